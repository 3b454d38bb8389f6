//! Sessions: `runsc exec` in the supervisor's namespaces, PTY or pipe
//! streams to and from the client, resize, reaping, closing.

use super::conn_state::ConnState;
use super::*;

impl Coordinator {
    // ---- sessions ---------------------------------------------------------------

    /// A `runsc exec` command that runs in the supervisor's user and mount
    /// namespaces, where runsc's state and the sandbox live.
    pub(super) fn runsc_in_ns(&self) -> Result<Command, CoordinatorError> {
        let sup = self.sup.as_ref().ok_or(CoordinatorError::NotRunning)?;
        let mut cmd = Command::new("runsc");
        cmd.args(&self.runsc_args);
        sys::ChildSetup::new()
            .reset_signals()
            .setns(&sup.userns, sys::CLONE_NEWUSER)
            .setns(&sup.mntns, sys::CLONE_NEWNS)
            .chdir(Path::new("/"))
            .parent_death_signal(sys::SIGKILL)
            .apply(&mut cmd);
        Ok(cmd)
    }

    pub(super) fn open_session(&mut self, key: u64, req: wire_client::OpenRequest) {
        let wire_client::OpenRequest {
            argv,
            env,
            cwd,
            tty,
            root,
        } = req;
        let argv = if argv.is_empty() {
            self.profile.command.clone()
        } else {
            argv
        };
        let env_in = env;
        let term = env_in.iter().find(|(k, _)| k == "TERM").map(|(_, v)| v.as_str());
        let cwd = plan::guest_cwd(&self.workspace, &self.guest_workspace, Path::new(&cwd));
        let id = SessionId::random();
        let sid = id.as_str();
        let (client_id, peer_pid) = {
            let c = &self.conns[&key];
            let client_id = match &c.state {
                ConnState::Joined { client_id, .. } => client_id.clone(),
                _ => String::new(),
            };
            (client_id, c.peer_pid)
        };
        // The profile's `user` runs every session but `--root` ones.
        let user = self.profile.user.clone().filter(|_| !root);
        let mut env = plan::session_env_for(user.as_deref(), &self.profile.env, term);
        if !self.profile.env.iter().any(|(k, _)| k == "GIT_CONFIG_SYSTEM") {
            env.push(crate::plan::guest::git_env());
        }
        // Host variables this client passed by name: this session only.
        // INVARIANT: their values go into the spec pipe and nowhere else
        // (no argv, no store row, no log line).
        plan::override_env(&mut env, &crate::config::passenv::accepted(&env_in));
        // Issue 31: each secret's sentinel (never its value) and the CA
        // bundle variables, over anything the client passed.
        plan::override_env(&mut env, &self.secret_env);
        env.push(format!("LAZARET_SESSION={id}"));
        // Where the workspace is inside (`/workspace` leads there too).
        env.push(format!("LAZARET_WORKSPACE={}", self.guest_workspace));
        // Session registration binds (Client CLI ID, Session ID, Session
        // Anchor): the anchor's certificate is issued for exactly this pair.
        let mut cert_der = Vec::new();
        if let Some(b) = &self.broker {
            let valid_client = client_id.len() == 16 && client_id.bytes().all(|c| c.is_ascii_hexdigit());
            if !valid_client {
                return self.refuse(key, "malformed client id".into());
            }
            match b.anchor.issue(Role::ClientCli, &client_id, Some(sid)).and_then(|c| {
                cert_der = c.cert.to_der()?;
                c.export()
            }) {
                // INVARIANT: the credential is never in a process's
                // environment (gVisor shows every environment to every
                // uid): it is in a file only a root session's uid can read.
                Ok(cred) => match b.write_credential(sid, &cred, user.is_none()) {
                    Ok(file) => {
                        env.push(format!("{}={file}", escalation::CREDENTIAL_FILE_ENV));
                        env.push(format!("{}={}", escalation::PROMPT_TIMEOUT_ENV, b.prompt_timeout_s()));
                    }
                    Err(e) => return self.refuse(key, format!("cannot register the session: {e}")),
                },
                Err(e) => return self.refuse(key, format!("cannot register the session: {e}")),
            }
        }
        // Issue 51: the session's SSH agent socket, served inside by
        // `lazaret-escalate --ssh-agent`, each message a signed mailbox record.
        let ssh_agent = self.ssh.is_some() && !cert_der.is_empty();
        if ssh_agent {
            env.retain(|e| !e.starts_with(&format!("{}=", escalation::AGENT_SOCK_ENV)));
            env.push(format!(
                "{}={}",
                escalation::AGENT_SOCK_ENV,
                escalation::guest_agent_socket(sid)
            ));
        }
        let spec = plan::SessionPlan {
            argv: plan::guarded_argv(&argv, tty.is_some(), ssh_agent),
            env,
            cwd,
            terminal: tty.is_some(),
            caps: self.profile.caps.clone(),
            user: user.as_ref().map(|_| (config::GUEST_USER_UID, config::GUEST_USER_UID)),
        };
        let pid_file = self.paths.gen_dir().join(format!("session-{id}.pid"));
        // The spec (with the values passed by name) goes through a pipe,
        // never to disk.
        match self.spawn_exec(plan::process_spec(&spec).as_bytes(), &pid_file, tty) {
            Ok((exec, input, output, errout)) => {
                let exec_pid = exec.id() as i32;
                let _ = self
                    .store
                    .open_session(self.generation, &id, &client_id, peer_pid, &argv[0]);
                let skey = self.key();
                self.sessions.insert(
                    skey,
                    Session {
                        id: id.clone(),
                        conn: key,
                        exec,
                        exec_start: sys::proc_start_time(exec_pid).unwrap_or(0),
                        tty: tty.is_some(),
                        input: Some(input),
                        output: Some(output),
                        errout,
                        pending_in: Vec::new(),
                        eof_after_input: false,
                        guest_pid_file: pid_file,
                        argv0: argv[0].clone(),
                        client_pid: peer_pid,
                        winch_pending: false,
                        client_id: client_id.clone(),
                        cert_der,
                        queue: VecDeque::new(),
                        prompt: None,
                        held: None,
                    },
                );
                self.had_session = true;
                if let Some(c) = self.conns.get_mut(&key) {
                    c.state = ConnState::InSession {
                        client_id,
                        session: skey,
                    };
                }
                let welcome = ServerMsg::Welcome {
                    version: wire_client::protocol_version(),
                    generation: self.generation,
                    coordinator_id: self.coordinator_id.clone(),
                    session_id: id,
                };
                self.send(key, &welcome);
            }
            Err(e) => {
                if let Some(b) = self.broker.as_mut() {
                    b.remove_credential(sid);
                }
                self.refuse(key, e.to_string())
            }
        }
    }

    #[allow(clippy::type_complexity)] // the exec and its three stdio pipe ends, taken apart by the one caller
    pub(super) fn spawn_exec(
        &self,
        spec: &[u8],
        pid_file: &Path,
        tty: Option<wire_client::WinSize>,
    ) -> Result<(Child, OwnedFd, OwnedFd, Option<OwnedFd>), CoordinatorError> {
        if spec.len() > 60 * 1024 {
            return Err(CoordinatorError::SpecTooLarge);
        }
        let (spec_rd, spec_wr) = sys::pipe().map_err(CoordinatorError::Pipe)?;
        // Fits the pipe buffer: the write cannot block.
        sys::write_all(&spec_wr, spec).map_err(CoordinatorError::Pipe)?;
        drop(spec_wr);
        let sp = spec_rd.as_raw_fd();
        let mut cmd = self.runsc_in_ns()?;
        cmd.arg("exec")
            .arg(format!("--internal-pid-file={}", pid_file.display()))
            .arg("--process=/proc/self/fd/3")
            .arg(&self.sandbox_id);
        if let Some(w) = tty {
            let (master, slave) = sys::openpty(Some(sys::WinSize {
                rows: w.rows,
                cols: w.cols,
            }))
            .map_err(CoordinatorError::OpenPty)?;
            let s = slave.as_raw_fd();
            sys::ChildSetup::new()
                .setsid()
                .install_fds(&[(s, 0), (s, 1), (s, 2), (sp, 3)])
                .controlling_tty(0)
                .apply(&mut cmd);
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let child = cmd.spawn().map_err(CoordinatorError::StartExec)?;
            drop(slave);
            drop(spec_rd);
            sys::set_nonblocking(&master, true).map_err(CoordinatorError::Pty)?;
            let out = master.try_clone().map_err(CoordinatorError::Pty)?;
            Ok((child, master, out, None))
        } else {
            sys::ChildSetup::new().setsid().install_fds(&[(sp, 3)]).apply(&mut cmd);
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = cmd.spawn().map_err(CoordinatorError::StartExec)?;
            drop(spec_rd);
            let i: OwnedFd = child.stdin.take().unwrap().into();
            let o: OwnedFd = child.stdout.take().unwrap().into();
            let e: OwnedFd = child.stderr.take().unwrap().into();
            for fd in [&i, &o, &e] {
                sys::set_nonblocking(fd, true).map_err(CoordinatorError::Pipe)?;
            }
            Ok((child, i, o, Some(e)))
        }
    }

    pub(super) fn session_output(&mut self, skey: u64, err: bool, readable: bool) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        // INVARIANT: nothing the session writes reaches its terminal after
        // a prompt is drawn and before it is decided. The poll set is built
        // before the round, so a request taken from the mailbox earlier in
        // the same round must stop this read (output such as a screen clear
        // would otherwise follow, and wipe, the prompt).
        if s.prompt.is_some() {
            return;
        }
        let fd = if err { s.errout.as_ref() } else { s.output.as_ref() };
        let Some(fd) = fd else { return };
        let mut buf = vec![0u8; wire_client::MAX_DATA_CHUNK];
        let r = if readable { sys::read(fd, &mut buf) } else { Ok(0) };
        match r {
            Ok(n) if n > 0 => {
                buf.truncate(n);
                let conn = s.conn;
                // runsc's own stream: the stderr pipe, or the PTY.
                let runsc_stream = err || s.tty;
                let mut chunks = Vec::new();
                if let Some((held_err, held, _)) = s.held.take() {
                    // More output followed: what was held was the command's.
                    chunks.push((held_err, held));
                }
                if runsc_stream {
                    if let Some(at) = runsc_error_at(&buf, &self.sandbox_id) {
                        s.held = Some((err, buf.split_off(at), Instant::now()));
                    }
                }
                chunks.push((err, buf));
                for (e, data) in chunks {
                    if data.is_empty() {
                        continue;
                    }
                    let msg = if e {
                        ServerMsg::Stderr(data)
                    } else {
                        ServerMsg::Stdout(data)
                    };
                    self.send(conn, &msg);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
            _ => {
                // EOF, or EIO from a PTY master whose slaves are all closed.
                if err {
                    s.errout = None;
                } else {
                    s.output = None;
                    if s.tty {
                        s.input = None;
                    }
                }
            }
        }
    }

    pub(super) fn session_input(&mut self, skey: u64) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        let Some(fd) = &s.input else {
            s.pending_in.clear();
            return;
        };
        while !s.pending_in.is_empty() {
            match sys::write(fd, &s.pending_in) {
                Ok(n) => {
                    s.pending_in.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    s.pending_in.clear();
                    break;
                }
            }
        }
        if s.eof_after_input && s.pending_in.is_empty() {
            if s.tty {
                // A terminal has no EOF of its own; ^D at line start is it.
                let _ = sys::write(fd, &[4]);
            } else {
                s.input = None;
            }
            s.eof_after_input = false;
        }
    }

    pub(super) fn guest_pid(s: &Session) -> Option<i32> {
        std::fs::read_to_string(&s.guest_pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 1)
    }

    pub(super) fn resize(&mut self, skey: u64, w: wire_client::WinSize) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        if let Some(fd) = &s.input {
            if s.tty {
                let _ = sys::set_winsize(
                    fd,
                    sys::WinSize {
                        rows: w.rows,
                        cols: w.cols,
                    },
                );
                s.winch_pending = true;
            }
        }
        self.deliver_winch(skey);
    }

    /// The guest reads the new size from its terminal but gets no SIGWINCH
    /// by itself (PLATFORM §3): signal the session's guest processes.
    pub(super) fn deliver_winch(&mut self, skey: u64) {
        let Some(s) = self.sessions.get(&skey) else { return };
        if !s.winch_pending {
            return;
        }
        let Some(pid) = Self::guest_pid(s) else { return };
        if let Ok(child) = self.in_sandbox_tool(&["signal-session", &pid.to_string(), &sys::SIGWINCH.to_string()]) {
            self.helpers.push(child);
        }
        if let Some(s) = self.sessions.get_mut(&skey) {
            s.winch_pending = false;
        }
    }

    pub(super) fn in_sandbox_tool(&self, args: &[&str]) -> Result<Child, CoordinatorError> {
        let mut cmd = self.runsc_in_ns()?;
        cmd.arg("exec").arg(&self.sandbox_id).arg(plan::GUEST_INIT).args(args);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.spawn().map_err(CoordinatorError::RunscExec)
    }

    pub(super) fn reap(&mut self) {
        self.helpers.retain_mut(|h| !matches!(h.try_wait(), Ok(Some(_))));
        let done: Vec<(u64, i32)> = self
            .sessions
            .iter_mut()
            .filter_map(|(&k, s)| match s.exec.try_wait() {
                Ok(Some(st)) => Some((
                    k,
                    st.code()
                        .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0)),
                )),
                _ => None,
            })
            .collect();
        for (k, code) in done {
            // Whatever the guest wrote before it exited is already in the
            // PTY or pipes: forward it before the exit status.
            for _ in 0..64 {
                let before = self.conns.get(&self.sessions[&k].conn).map_or(0, |c| c.out.len());
                self.session_output(k, false, true);
                self.session_output(k, true, true);
                let after = self.conns.get(&self.sessions[&k].conn).map_or(0, |c| c.out.len());
                if after == before {
                    break;
                }
            }
            // `runsc exec` says 128 (and prints its own error) when the
            // sandbox went away under it: that is not the command's status.
            if code >= 128 && self.sandbox_lost(code) {
                self.phase = Phase::Failed;
                // runsc's own account of the loss goes to the log, not to
                // the user: the Closing sentence says it plainly.
                if let Some((_, held, _)) = self.sessions.get_mut(&k).and_then(|s| s.held.take()) {
                    log::warn!(
                        "session {}: runsc exec: {}",
                        self.sessions[&k].id,
                        crate::display::escape_bytes(held.trim_ascii_end())
                    );
                }
                if self.stop_reason.is_none() {
                    self.stop_reason = Some(self.lost_reason());
                }
                let reason = self.stop_reason.clone().unwrap_or_else(sandbox_lost_reason);
                let conn = self.sessions[&k].conn;
                self.send(conn, &ServerMsg::Closing { reason });
                self.close_session(k, None);
                continue;
            }
            // runsc exec could not create the command's process because
            // the guest is at its task limit: one sentence, not runsc's.
            // The held text may be the guest's own (it shares the stream):
            // what decides is that runsc never wrote the process's pid, a
            // host file the sandbox cannot reach.
            let s = &self.sessions[&k];
            let at_limit = code == 128
                && !s.guest_pid_file.exists()
                && s.held
                    .as_ref()
                    .is_some_and(|(_, held, _)| exec_refused_at_task_limit(held));
            if at_limit {
                let s = self.sessions.get_mut(&k).expect("a reaped session");
                if let Some((_, held, _)) = s.held.take() {
                    log::info!(
                        "session {}: runsc exec: {}",
                        s.id,
                        crate::display::escape_bytes(held.trim_ascii_end())
                    );
                }
                let conn = s.conn;
                let reason = format!(
                    "the command was not started: the Domain is at its task limit ({} tasks, from pids {}); \
                     end some of its processes, or restart it with a higher `limits.pids` (or `--pids`)",
                    self.limits.guest_tasks(),
                    self.limits.pids
                );
                self.send(conn, &ServerMsg::Closing { reason });
                self.close_session(k, None);
                continue;
            }
            self.close_session(k, Some(code));
        }
        if let Some(sup) = self.sup.as_mut() {
            if let Ok(Some(st)) = sup.child.try_wait() {
                log::warn!("supervisor exited: {st}");
                self.phase = Phase::Failed;
                if self.stop_reason.is_none() {
                    self.stop_reason = Some(self.lost_reason());
                }
            }
        }
    }

    /// Whether the sandbox is gone, given that a session's `runsc exec`
    /// just exited with `code`. The attached `runsc run` exits right after
    /// its sandbox; a short grace covers the order of the two exits.
    pub(super) fn sandbox_lost(&mut self, code: i32) -> bool {
        let grace = if code == 128 {
            Duration::from_millis(1000)
        } else {
            Duration::from_millis(200)
        };
        let deadline = Instant::now() + grace;
        loop {
            // The supervisor gone takes the sandbox with it (PDEATHSIG).
            let sup_gone = self
                .sup
                .as_mut()
                .is_some_and(|s| matches!(s.child.try_wait(), Ok(Some(_))));
            let runsc_gone = self.runsc_pid > 0
                && (!sys::same_process(self.runsc_pid, self.runsc_start) || is_zombie(self.runsc_pid));
            if sup_gone || runsc_gone {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Deregisters first, then stops what is left of the session in the
    /// guest, reaps the exec client and closes the PTY.
    pub(super) fn close_session(&mut self, skey: u64, code: Option<i32>) {
        let Some(mut s) = self.sessions.remove(&skey) else {
            return;
        };
        let _ = self.store.close_session(&s.id, code);
        // The last session's end stops the Domain: withdraw publication
        // before its client learns the exit, so a command it runs next
        // (`lazaret rm`, `state reset`) finds the Domain tearing down
        // (and waits for its lock), not still published (and refused).
        if self.sessions.is_empty() && self.had_session {
            self.withdraw_publication();
        }
        if let Some(b) = self.broker.as_mut() {
            b.cancel_session(s.id.as_str());
            b.remove_credential(s.id.as_str());
        }
        let sid = s.id.as_str().to_string();
        for asked in s.prompt.take().into_iter().chain(s.queue.drain(..)) {
            self.esc_deadlines.remove(asked.id());
            match asked {
                super::sshagent::Asked::Command(req) => {
                    if let Some(b) = self.broker.as_mut() {
                        b.refuse(&req, Status::Cancelled, "the requesting session ended");
                    }
                }
                // INVARIANT: nothing is signed for a session that is gone.
                super::sshagent::Asked::Ssh(a) => self.ssh_end(&sid, &a, "refused: the session ended"),
            }
        }
        if let Some(st) = self.ssh.as_mut() {
            st.forget(&sid);
        }
        // What was held back goes out before the connection is marked
        // closing: a closing connection is removed as soon as its output is
        // flushed, and the Exit below would then never be sent.
        if let Some((err, held, _)) = s.held.take() {
            if code.is_some() {
                let msg = if err {
                    ServerMsg::Stderr(held)
                } else {
                    ServerMsg::Stdout(held)
                };
                self.send(s.conn, &msg);
            }
        }
        if let Some(c) = self.conns.get_mut(&s.conn) {
            c.state = ConnState::Closing;
        }
        // A session that ended because the kernel OOM-killed the sandbox
        // learns why, instead of a bare exit code.
        let oom = code.and_then(|_| self.oom_reason());
        if let Some(reason) = oom {
            self.stop_reason.get_or_insert_with(|| reason.clone());
            self.send(s.conn, &ServerMsg::Closing { reason });
        } else if let Some(code) = code {
            self.send(s.conn, &ServerMsg::Exit { code });
        } else {
            self.conn_flush(s.conn);
        }
        let exec_pid = s.exec.id() as i32;
        if sys::same_process(exec_pid, s.exec_start) {
            let _ = s.exec.kill();
        }
        let _ = s.exec.wait();
        let more_sessions = !self.sessions.is_empty();
        if let Some(pid) = Self::guest_pid(&s) {
            if more_sessions {
                if let Ok(c) = self.in_sandbox_tool(&["signal-session", &pid.to_string(), "9"]) {
                    self.helpers.push(c);
                }
            }
        }
        let _ = std::fs::remove_file(&s.guest_pid_file);
        drop(s);
    }
}

/// Whether the error `runsc exec` held back says the sandbox could not
/// create the command's process for lack of a task (EAGAIN, which gVisor
/// names "try again", from the guest's RLIMIT_NPROC): runsc 20240729 says
/// `executing processes for container: ...: try again`.
pub(super) fn exec_refused_at_task_limit(held: &[u8]) -> bool {
    String::from_utf8_lossy(held).lines().any(|l| {
        let l = l.trim_end();
        l.starts_with("executing processes for container: ")
            && (l.ends_with(": try again") || l.ends_with(": resource temporarily unavailable"))
    })
}

/// Whether `pid` has exited but is not reaped yet (state `Z` or `X`).
pub(super) fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| st.rfind(')').map(|i| st[i + 1..].trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// Where, in a chunk of the stream `runsc exec` writes its errors to, a
/// trailing run of lines in runsc's own error shape begins (a line naming
/// this sandbox as `sandbox "ID"` or `container "ID"`, a `urpc method "`
/// failure, or one of `runsc exec`'s fatal-error prefixes), if the chunk
/// ends with one. Bounded: only a
/// short tail is ever held back.
pub(super) fn runsc_error_at(buf: &[u8], sandbox_id: &str) -> Option<usize> {
    const MAX_HELD: usize = 4096;
    // The prefixes `runsc exec` puts on its fatal errors (runsc 20240729).
    const PREFIXES: [&str; 5] = [
        "waiting on pid ",
        "executing processes for container: ",
        "loading sandbox: ",
        "loading container: ",
        "getting processes for container: ",
    ];
    let sandbox = format!("sandbox \"{sandbox_id}\"");
    let container = format!("container \"{sandbox_id}\"");
    let shaped = |line: &[u8]| {
        let l = String::from_utf8_lossy(line);
        PREFIXES.iter().any(|p| l.starts_with(p))
            || l.contains("urpc method \"")
            || l.contains(&sandbox)
            || l.contains(&container)
    };
    let mut start = 0;
    while start < buf.len() {
        let end = buf[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| start + i + 1);
        if shaped(&buf[start..end]) {
            return (buf.len() - start <= MAX_HELD).then_some(start);
        }
        start = end;
    }
    None
}

#[cfg(test)]
mod runsc_error_tests {
    use super::runsc_error_at;

    #[test]
    fn a_refused_exec_at_the_task_limit_is_recognised() {
        use super::exec_refused_at_task_limit as at_limit;
        let line = "executing processes for container: executing command \"/.lazaret/init exec -- /bin/echo x\" in sandbox: try again\n";
        assert!(at_limit(line.as_bytes()));
        assert!(at_limit(
            b"executing processes for container: x: resource temporarily unavailable"
        ));
        // Other runsc failures, and the guest's own words, are not it.
        assert!(!at_limit(
            b"executing processes for container: x: no such file or directory\n"
        ));
        assert!(!at_limit(b"loading sandbox: try again\n"));
        assert!(!at_limit(b"sh: fork: try again\n"));
        assert!(!at_limit(b""));
    }

    #[test]
    fn holds_only_a_trailing_runsc_error() {
        let id = "lz-158c3fa2-c0e66783";
        let line = format!(
            "waiting on pid 3: waiting on PID 3 in sandbox \"{id}\": urpc method \"containerManager.WaitPID\" failed: EOF\n"
        );
        assert_eq!(runsc_error_at(line.as_bytes(), id), Some(0));
        let mixed = format!("guest said this\n{line}");
        assert_eq!(runsc_error_at(mixed.as_bytes(), id), Some(16));
        let early = "executing processes for container: executing command \"/.lazaret/init exec -- sleep 600\" \
                     in sandbox: connecting to control server at PID 27185: connection refused\n";
        assert_eq!(runsc_error_at(early.as_bytes(), id), Some(0));
        let other = "error: sandbox \"lz-other\" is fine\n";
        assert_eq!(runsc_error_at(other.as_bytes(), id), None);
        assert_eq!(runsc_error_at(b"plain guest stderr\npartial", id), None);
        let big = format!("{line}{}", "x".repeat(5000));
        assert_eq!(runsc_error_at(big.as_bytes(), id), None);
    }
}
