//! Client connections: accept, framed reads and writes, and the
//! per-connection handling of `ClientMsg`.

use super::conn_state::{decide, Action, ConnState, Running, SessionInput};
use super::*;

impl Coordinator {
    pub(super) fn accept(&mut self) {
        loop {
            let Some(l) = &self.listener else { return };
            let Ok((stream, _)) = l.accept() else { return };
            // INVARIANT: only our own uid may talk to the coordinator.
            let (pid, uid) = match sys::peer_uid(&stream) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if uid != sys::getuid() {
                log::warn!("refused a connection from uid {uid} (pid {pid})");
                continue;
            }
            let _ = stream.set_nonblocking(true);
            let key = self.key();
            let conn = Conn {
                stream,
                reader: FrameReader::default(),
                out: Vec::new(),
                peer_pid: pid,
                state: ConnState::AwaitingHello,
            };
            self.conns.insert(key, conn);
        }
    }

    pub(super) fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    pub(super) fn send(&mut self, key: u64, msg: &ServerMsg) {
        if let Some(c) = self.conns.get_mut(&key) {
            c.out.extend_from_slice(&codec::Message::encode(msg));
        }
        self.conn_flush(key);
    }

    pub(super) fn conn_flush(&mut self, key: u64) {
        let Some(c) = self.conns.get_mut(&key) else { return };
        while !c.out.is_empty() {
            match c.stream.write(&c.out) {
                Ok(0) => break,
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The client is gone. A closing connection is no longer
                    // read, so its end-of-file would never be seen: its
                    // session ends here, as on any other client loss.
                    return self.drop_conn(key, &format!("writing to the client: {e}"));
                }
            }
        }
        if c.state == ConnState::Closing && c.out.is_empty() {
            self.conns.remove(&key);
        }
    }

    /// Drops a connection after a protocol violation or client loss: only
    /// this connection (and its session) is affected.
    pub(super) fn drop_conn(&mut self, key: u64, why: &str) {
        if let Some(c) = self.conns.get(&key) {
            log::info!("closing connection of pid {}: {why}", c.peer_pid);
            if let Some(s) = c.state.session() {
                self.close_session(s, None);
            }
        }
        self.conns.remove(&key);
    }

    pub(super) fn conn_read(&mut self, key: u64) {
        let Some(c) = self.conns.get_mut(&key) else { return };
        match c.reader.fill(&mut c.stream) {
            Ok(_) => {}
            Err(e) => return self.drop_conn(key, &e.to_string()),
        }
        loop {
            let Some(c) = self.conns.get_mut(&key) else { return };
            match c.reader.next::<ClientMsg>() {
                Ok(Some(m)) => self.handle(key, m),
                Ok(None) => return,
                Err(e) => return self.drop_conn(key, &format!("malformed frame: {e}")),
            }
        }
    }

    pub(super) fn refuse(&mut self, key: u64, reason: String) {
        self.send(key, &ServerMsg::Refused { reason });
        self.set_state(key, ConnState::Closing);
        self.conn_flush(key);
    }

    pub(super) fn set_state(&mut self, key: u64, state: ConnState) {
        if let Some(c) = self.conns.get_mut(&key) {
            c.state = state;
        }
    }

    /// Performs what [`decide`] says for `msg` on connection `key`.
    pub(super) fn handle(&mut self, key: u64, msg: ClientMsg) {
        let Some(c) = self.conns.get(&key) else { return };
        let running = Running {
            profile: &self.profile.name,
            fingerprint: &self.join_fp,
            domain_id: self.domain_id.as_str(),
        };
        match decide(&c.state, msg, &running) {
            Action::Enter(state) => self.set_state(key, state),
            Action::Refuse(why) => self.refuse(key, why),
            Action::Drop(why) => self.drop_conn(key, &why),
            Action::Open(req) => self.open_session(key, req),
            Action::Status => {
                let st = self.status();
                self.send(key, &ServerMsg::Status(st));
                self.set_state(key, ConnState::Closing);
                self.conn_flush(key);
            }
            Action::Escalations => {
                let list = self.pending_escalations();
                self.send(key, &ServerMsg::Escalations(list));
                self.set_state(key, ConnState::Closing);
                self.conn_flush(key);
            }
            Action::AddPort(p) => {
                match self.add_port(p) {
                    Ok(()) => {
                        let st = self.status();
                        self.send(key, &ServerMsg::Status(st));
                    }
                    Err(e) => match &e {
                        CoordinatorError::Ports(p) if p.taken().is_some() => {
                            self.send(key, &ServerMsg::PortTaken(p.taken().expect("taken")))
                        }
                        _ => self.send(key, &ServerMsg::Refused { reason: e.to_string() }),
                    },
                }
                self.set_state(key, ConnState::Closing);
                self.conn_flush(key);
            }
            Action::Stop(reason) => {
                self.stop_reason = Some(reason);
                self.set_state(key, ConnState::Closing);
            }
            Action::Basic { stop } => {
                let stopping = stop.is_some() || self.stop_reason.is_some();
                if let Some(reason) = stop {
                    self.stop_reason.get_or_insert(reason);
                }
                let st = self.status();
                let info = crate::wire::basic::BasicInfo {
                    basic: crate::wire::basic::BASIC_VERSION,
                    protocol: crate::wire::client::protocol_version(),
                    build: crate::build_info::describe(),
                    domain_id: st.domain_id,
                    profile: st.profile,
                    workspace: st.workspace,
                    generation: st.generation,
                    phase: st.phase,
                    coordinator_pid: st.coordinator_pid,
                    started_at: st.started_at,
                    sessions: st.sessions.len() as u32,
                    stopping,
                };
                self.send(key, &ServerMsg::Basic(info));
                self.set_state(key, ConnState::Closing);
                self.conn_flush(key);
            }
            Action::Session(s, SessionInput::Stdin(data)) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.pending_in.extend_from_slice(&data);
                    self.session_input(s);
                }
            }
            Action::Session(s, SessionInput::StdinEof) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.eof_after_input = true;
                    self.session_input(s);
                }
            }
            Action::Session(s, SessionInput::Resize(w)) => self.resize(s, w),
            Action::Session(s, SessionInput::Quit) => {
                // SIGQUIT goes to the guest session, never to `runsc exec`:
                // Go's runtime would answer it with a goroutine dump on the
                // user's terminal and exit 2.
                let pid = self.sessions.get(&s).and_then(Self::guest_pid);
                if let Some(pid) = pid {
                    if let Ok(c) = self.in_sandbox_tool(&["signal-session", &pid.to_string(), "3"]) {
                        self.helpers.push(c);
                    }
                }
            }
            Action::Session(s, SessionInput::Forward(sig)) => {
                if let Some(sess) = self.sessions.get(&s) {
                    // runsc exec forwards what it receives to its guest process.
                    let _ = sys::kill(sess.exec.id() as i32, sig);
                }
            }
            Action::Session(
                s,
                SessionInput::Decision {
                    request_id,
                    verdict,
                    argv,
                },
            ) => self.decision(s, request_id, verdict, argv),
            Action::Ignore => {}
        }
    }

    pub(super) fn status(&self) -> StatusInfo {
        StatusInfo {
            domain_id: self.domain_id.clone(),
            profile: self.profile.name.clone(),
            workspace: self.workspace.to_string_lossy().into(),
            generation: self.generation,
            phase: self.phase.as_str().into(),
            coordinator_id: self.coordinator_id.clone(),
            coordinator_pid: sys::getpid(),
            supervisor_pid: self.sup.as_ref().map_or(0, |s| s.child.id() as i32),
            runsc_pid: self.runsc_pid,
            sandbox_id: self.sandbox_id.clone(),
            sessions: self
                .sessions
                .values()
                .map(|s| SessionInfo {
                    session_id: s.id.clone(),
                    client_pid: s.client_pid,
                    exec_pid: s.exec.id() as i32,
                    argv0: s.argv0.clone(),
                    tty: s.tty,
                })
                .collect(),
            started_at: crate::storage::state::now() - self.published_at.elapsed().as_secs() as i64,
            pending_escalations: self
                .sessions
                .values()
                .map(|s| s.queue.len() as u32 + s.prompt.is_some() as u32)
                .sum(),
            ports: self.ports.clone(),
            egress: self.profile.egress.word().into(),
        }
    }
}
