//! Client connections: accept, framed reads and writes, and the
//! per-connection handling of `ClientMsg`.

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
                hello: None,
                observer: false,
                stale: None,
                session: None,
                closing: false,
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
            c.out.extend_from_slice(&ipc::Message::encode(msg));
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
        if c.closing && c.out.is_empty() && c.session.is_none() {
            self.conns.remove(&key);
        }
    }

    /// Drops a connection after a protocol violation or client loss: only
    /// this connection (and its session) is affected.
    pub(super) fn drop_conn(&mut self, key: u64, why: &str) {
        if let Some(c) = self.conns.get(&key) {
            log::info!("closing connection of pid {}: {why}", c.peer_pid);
            if let Some(s) = c.session {
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
        if let Some(c) = self.conns.get_mut(&key) {
            c.closing = true;
        }
        self.conn_flush(key);
    }

    pub(super) fn handle(&mut self, key: u64, msg: ClientMsg) {
        let (has_hello, session) = match self.conns.get(&key) {
            Some(c) => (c.hello.is_some(), c.session),
            None => return,
        };
        match (has_hello, session, msg) {
            (
                false,
                _,
                ClientMsg::Hello {
                    version,
                    client_id,
                    profile,
                    fingerprint,
                },
            ) => {
                if version != ipc::PROTOCOL_VERSION {
                    return self.refuse(
                        key,
                        format!("protocol version {version} is not {}: the coordinator runs a different lazaret; stop the Domain with `lazaret stop`", ipc::PROTOCOL_VERSION),
                    );
                }
                let observer = profile.is_empty() && fingerprint.is_empty();
                let mine = self.join_fp.clone();
                // A client whose configuration differs may still stop the
                // Domain (that is how it picks up the new configuration),
                // but may not open a session in it.
                let stale = (!observer && (profile != self.profile.name || fingerprint != mine)).then(|| {
                    format!(
                        "profile {profile:?} changed since this Domain started (configuration fingerprint {fingerprint} \
                         vs running {mine}): run `lazaret stop --profile {}` to restart it with the new configuration",
                        self.profile.name
                    )
                });
                if let Some(c) = self.conns.get_mut(&key) {
                    c.hello = Some(client_id);
                    c.observer = observer;
                    c.stale = stale;
                }
            }
            (true, None, ClientMsg::Open { .. }) if self.conns[&key].stale.is_some() => {
                let why = self.conns[&key].stale.clone().unwrap_or_default();
                self.refuse(key, why)
            }
            (true, None, ClientMsg::Open { .. } | ClientMsg::Stop { .. }) if self.conns[&key].observer => {
                self.drop_conn(key, "an observer connection may only ask for status")
            }
            (
                true,
                None,
                ClientMsg::Open {
                    argv,
                    env,
                    cwd,
                    tty,
                    root,
                },
            ) => self.open_session(key, argv, env, cwd, tty, root),
            (true, None, ClientMsg::Status) => {
                let st = self.status();
                self.send(key, &ServerMsg::Status(st));
                if let Some(c) = self.conns.get_mut(&key) {
                    c.closing = true;
                }
                self.conn_flush(key);
            }
            (true, None, ClientMsg::Stop { reason }) => {
                self.stop_reason = Some(if reason.is_empty() {
                    "stopped by `lazaret stop`".into()
                } else {
                    reason
                });
                if let Some(c) = self.conns.get_mut(&key) {
                    c.closing = true;
                }
            }
            (true, Some(s), ClientMsg::Stdin(data)) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.pending_in.extend_from_slice(&data);
                    self.session_input(s);
                }
            }
            (true, Some(s), ClientMsg::StdinEof) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.eof_after_input = true;
                    self.session_input(s);
                }
            }
            (true, Some(s), ClientMsg::Resize(w)) => self.resize(s, w),
            (true, Some(s), ClientMsg::Signal(sig)) if sig as i32 == sys::SIGQUIT => {
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
            (true, Some(s), ClientMsg::Signal(sig)) => {
                if let Some(sess) = self.sessions.get(&s) {
                    if matches!(sig as i32, sys::SIGINT | sys::SIGTSTP | sys::SIGTERM | sys::SIGHUP) {
                        // runsc exec forwards what it receives to its guest process.
                        let _ = sys::kill(sess.exec.id() as i32, sig as i32);
                    }
                }
            }
            (
                true,
                Some(s),
                ClientMsg::Decision {
                    request_id,
                    verdict,
                    argv,
                },
            ) => self.decision(s, request_id, verdict, argv),
            (_, _, m) => {
                let name = ipc::Message::name(&m);
                self.drop_conn(key, &format!("unexpected message {name} in this state"));
            }
        }
    }

    pub(super) fn status(&self) -> StatusInfo {
        StatusInfo {
            domain_id: self.domain_id.clone(),
            profile: self.profile.name.clone(),
            workspace: self.workspace.to_string_lossy().into(),
            generation: self.generation,
            phase: self.phase.into(),
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
            ports: self.ports.iter().map(|p| p.to_string()).collect(),
        }
    }
}
