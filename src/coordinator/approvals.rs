//! Escalation requests: mailbox intake through the broker, the prompt
//! shown to a session's developer, decisions, expiry, host command rows.
//! The same prompt asks for SSH agent signatures (`sshagent.rs`).

use super::sshagent::Asked;
use super::*;

/// Most bytes of already-written session output sent ahead of a prompt.
pub(super) const PROMPT_FLUSH_MAX: usize = 64 * 1024;

/// Reads what the session's output and error streams hold right now (they
/// are non-blocking), up to `max` bytes, as frames for its client.
pub(super) fn pending_output(s: &Session, max: usize) -> Vec<ServerMsg> {
    let mut out = Vec::new();
    let mut left = max;
    for (fd, err) in [(s.output.as_ref(), false), (s.errout.as_ref(), true)] {
        let Some(fd) = fd else { continue };
        while left > 0 {
            let mut buf = vec![0u8; wire_client::MAX_DATA_CHUNK.min(left)];
            match sys::read(fd, &mut buf) {
                Ok(n) if n > 0 => {
                    buf.truncate(n);
                    left -= n;
                    out.push(if err {
                        ServerMsg::Stderr(buf)
                    } else {
                        ServerMsg::Stdout(buf)
                    });
                }
                // Empty, end of file or an error: the normal path sees it.
                _ => break,
            }
        }
    }
    out
}

/// What the prompt for `req` shows: the host directory the broker resolved
/// for it, and the seconds left before it expires.
fn prompt_info(
    broker: Option<&Broker>,
    deadlines: &HashMap<String, Instant>,
    profile: &str,
    session: &str,
    asked: &Asked,
) -> wire_client::PromptInfo {
    let timeout = broker.map_or(0, |b| b.prompt_timeout_s());
    let left = deadlines
        .get(asked.id())
        .map_or(timeout, |d| d.saturating_duration_since(Instant::now()).as_secs());
    let mut info = wire_client::PromptInfo {
        request_id: asked.id().to_string(),
        profile: profile.to_string(),
        session_id: session.to_string(),
        argv: Vec::new(),
        cwd: String::new(),
        justification: String::new(),
        timeout_s: left,
        ssh: Vec::new(),
    };
    match asked {
        Asked::Command(req) => {
            info.argv = req.argv.clone();
            info.cwd = broker.map_or(String::new(), |b| b.host_cwd_display(&req.cwd));
            info.justification = req.justification.clone();
        }
        Asked::Ssh(a) => info.ssh = a.lines.clone(),
    }
    info
}

impl Coordinator {
    // ---- escalation ----------------------------------------------------------------

    pub(super) fn mailbox(&mut self) {
        let Some(mut b) = self.broker.take() else { return };
        let sessions = &self.sessions;
        let lookup = |sid: &str| {
            sessions.values().find(|s| s.id == sid).map(|s| SessionView {
                client_id: s.client_id.clone(),
                cert_der: s.cert_der.clone(),
            })
        };
        let ask = b.scan(&lookup);
        let patience = Duration::from_secs(b.prompt_timeout_s());
        self.broker = Some(b);
        self.sync_host_rows();
        self.ssh_requests();
        for (sid, req) in ask {
            let Some((&k, s)) = self.sessions.iter_mut().find(|(_, s)| s.id == sid) else {
                continue;
            };
            if s.tty {
                // The request deadline: accepted now, decided in time or expired.
                self.esc_deadlines.insert(req.id.clone(), Instant::now() + patience);
                s.queue.push_back(Asked::Command(req));
                self.next_prompt(k);
            } else if let Some(b) = self.broker.as_mut() {
                b.refuse(
                    &req,
                    Status::Denied,
                    "no auto-approval rule matched and the session has no terminal to ask in",
                );
            }
        }
    }

    /// Shows the next waiting request in its session's terminal, one at a
    /// time per session; other sessions are never held up by it.
    pub(super) fn next_prompt(&mut self, skey: u64) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        if s.prompt.is_some() {
            return;
        }
        let Some(req) = s.queue.pop_front() else { return };
        let msg = ServerMsg::Prompt(prompt_info(
            self.broker.as_ref(),
            &self.esc_deadlines,
            &self.profile.name,
            s.id.as_str(),
            &req,
        ));
        let conn = s.conn;
        // Output the session wrote before it asked (a screen clear just
        // before `lazaret-escalate`) goes out first, so it cannot land
        // after the prompt and wipe it or what ends it; bounded, so a
        // session that keeps writing cannot hold the prompt back.
        // What was held back (text in runsc's error shape, `HELD_MAX_AGE`)
        // goes first, then what is waiting in the streams: nothing of the
        // session's is left to be released while the prompt is up.
        let mut pending: Vec<ServerMsg> = s
            .held
            .take()
            .map(|(err, data, _)| {
                if err {
                    ServerMsg::Stderr(data)
                } else {
                    ServerMsg::Stdout(data)
                }
            })
            .into_iter()
            .collect();
        pending.extend(pending_output(s, PROMPT_FLUSH_MAX));
        s.prompt = Some(req);
        for m in &pending {
            self.send(conn, m);
        }
        self.send(conn, &msg);
    }

    pub(super) fn decision(&mut self, skey: u64, request_id: String, verdict: u8, argv: Vec<String>) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        // INVARIANT: only the session that was asked can answer, and only
        // for the request it was shown.
        if s.prompt.as_ref().map(|r| r.id()) != Some(request_id.as_str()) {
            return;
        }
        let asked = s.prompt.take().unwrap();
        let sid = s.id.as_str().to_string();
        self.esc_deadlines.remove(asked.id());
        let req = match asked {
            Asked::Command(req) => req,
            Asked::Ssh(ask) => {
                let approved = verdict == wire_client::VERDICT_APPROVE;
                self.ssh_decided(&sid, ask, approved);
                self.next_prompt(skey);
                return;
            }
        };
        if let Some(b) = self.broker.as_mut() {
            match verdict {
                wire_client::VERDICT_APPROVE => {
                    b.decided(&req, "approved by the developer");
                    let argv = b.harden_git(&req.argv);
                    b.start(req, argv, "approved by the developer".into());
                }
                wire_client::VERDICT_EDIT
                    if !argv.is_empty() && !argv[0].is_empty() && argv.len() <= escalation::MAX_ARGS =>
                {
                    let why = format!("edited by the developer to: {}", escalation::quote_argv(&argv));
                    b.decided(&req, &why);
                    let argv = b.harden_git(&argv);
                    b.start(req, argv, why);
                }
                wire_client::VERDICT_TOO_SMALL => {
                    let why = "refused: the terminal is too small to show the request in full";
                    b.decided(&req, why);
                    b.refuse(&req, Status::Denied, why);
                }
                _ => {
                    b.decided(&req, "denied by the developer");
                    b.refuse(&req, Status::Denied, "denied by the developer");
                }
            }
        }
        self.next_prompt(skey);
        self.sync_host_rows();
    }

    /// Every request waiting for a decision, for `lazaret escalations`:
    /// the one on screen and those queued, with their full argv. Bounded by
    /// the frame size (what does not fit is left out; the audit log has all).
    pub(super) fn pending_escalations(&self) -> Vec<wire_client::PendingInfo> {
        let mut out = Vec::new();
        let mut size = 0usize;
        for s in self.sessions.values() {
            let shown = s.prompt.iter().map(|r| (r, true));
            for (req, on_screen) in shown.chain(s.queue.iter().map(|r| (r, false))) {
                let info = prompt_info(
                    self.broker.as_ref(),
                    &self.esc_deadlines,
                    &self.profile.name,
                    s.id.as_str(),
                    req,
                );
                size += 64
                    + info.argv.iter().map(|a| a.len() + 4).sum::<usize>()
                    + info.ssh.iter().map(|a| a.len() + 4).sum::<usize>()
                    + info.justification.len()
                    + info.cwd.len();
                if size > codec::MAX_FRAME_LEN - 4096 {
                    return out;
                }
                out.push(wire_client::PendingInfo {
                    prompt: info,
                    shown: on_screen,
                });
            }
        }
        out
    }

    /// Ends every request whose deadline passed without a decision, queued
    /// or on screen: `expired`, audited, nothing runs.
    pub(super) fn expire_requests(&mut self) {
        let now = Instant::now();
        if !self.esc_deadlines.values().any(|d| *d <= now) {
            return;
        }
        let keys: Vec<u64> = self.sessions.keys().copied().collect();
        for k in keys {
            let Some(s) = self.sessions.get_mut(&k) else { continue };
            let late = |r: &Asked| self.esc_deadlines.get(r.id()).is_some_and(|d| *d <= now);
            let mut gone: Vec<Asked> = Vec::new();
            let mut keep = VecDeque::new();
            for r in s.queue.drain(..) {
                if late(&r) {
                    gone.push(r);
                } else {
                    keep.push_back(r);
                }
            }
            s.queue = keep;
            let mut shown = None;
            if s.prompt.as_ref().is_some_and(late) {
                shown = s.prompt.take();
            }
            let conn = s.conn;
            let sid = s.id.as_str().to_string();
            if let Some(r) = &shown {
                let text = format!(
                    "\r\nlazaret: no decision within {} s: the request expired and nothing ran\r\n",
                    self.escalation.prompt_timeout_s
                );
                self.send(
                    conn,
                    &ServerMsg::PromptEnd {
                        request_id: r.id().to_string(),
                        text,
                    },
                );
            }
            let shown_now = shown.is_some();
            for r in gone.into_iter().chain(shown) {
                self.esc_deadlines.remove(r.id());
                let timeout = self.broker.as_ref().map_or(0, |b| b.prompt_timeout_s());
                let why = format!("expired: no decision within {timeout} s");
                match r {
                    Asked::Command(r) => {
                        if let Some(b) = self.broker.as_mut() {
                            b.refuse(&r, Status::Expired, &why);
                        }
                    }
                    Asked::Ssh(a) => self.ssh_end(&sid, &a, &format!("refused: {why}")),
                }
            }
            if shown_now {
                self.next_prompt(k);
            }
        }
        // A deadline whose request is no longer waiting anywhere is dropped,
        // so a past deadline never keeps the event loop spinning.
        self.esc_deadlines.retain(|_, d| *d > now);
    }

    /// Makes the durable record of host commands match the broker's: a row
    /// (pid, start time, process group) per running command, released when
    /// it ends, so recovery after a crash kills exactly them.
    pub(super) fn sync_host_rows(&mut self) {
        let Some(b) = self.broker.as_mut() else { return };
        let events: Vec<escbroker::HostEvent> = b.events.drain(..).collect();
        for e in events {
            match e {
                escbroker::HostEvent::Started { id, pid, start_time } => {
                    let row = self
                        .store
                        .record_process(self.generation, OwnedKind::HostCommand, &id, pid, start_time);
                    if let Ok(row) = row {
                        self.host_rows.insert(id, row);
                    }
                }
                escbroker::HostEvent::Ended { id } => {
                    if let Some(row) = self.host_rows.remove(&id) {
                        let _ = self.store.release(row);
                    }
                }
            }
        }
    }
}
