//! The escalation broker: the Host Coordinator's side of the Escalation
//! Mailbox. It treats every byte in the mailbox as hostile: bounded sizes,
//! no symlinks or special files, strict parsing, a signature by the
//! session's Trust Anchor certificate over the exact bytes, the identity
//! tuple checked against the registered session, replay rejection — and
//! one bad record never blocks the others.
//!
//! Accepted requests are auto-approved by an exact trusted rule, or routed
//! to the developer by the coordinator (which owns the terminals); approved
//! ones run here on the host: argv only (no shell), cwd inside the
//! workspace, a fixed trusted environment, output captured with a limit,
//! a timeout, and the whole process group killed on cancel.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Escalation;
use crate::escalation::{self, Outcome, Request, Status};
use crate::sys;
use crate::trust::{Role, TrustAnchor};

/// Most requests waiting in one scan; the rest wait for the next event.
const SCAN_MAX: usize = 64;

/// What the coordinator knows of a registered session.
pub struct SessionView {
    pub client_id: String,
    pub cert_der: Vec<u8>,
}

struct Capture {
    fd: Option<OwnedFd>,
    data: Vec<u8>,
    truncated: bool,
}

impl Capture {
    fn new(fd: OwnedFd) -> Capture {
        Capture {
            fd: Some(fd),
            data: Vec::new(),
            truncated: false,
        }
    }
    /// Reads what is there; false once the stream ended.
    fn pump(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut buf = [0u8; 65536];
        loop {
            match sys::read(fd.as_raw_fd(), &mut buf) {
                Ok(0) => {
                    self.fd = None;
                    return;
                }
                Ok(n) => {
                    let room = escalation::OUTPUT_MAX_BYTES.saturating_sub(self.data.len());
                    self.data.extend_from_slice(&buf[..n.min(room)]);
                    if n > room {
                        self.truncated = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.fd = None;
                    return;
                }
            }
        }
    }
}

struct HostRun {
    req: Request,
    argv: Vec<String>,
    decision: String,
    child: Child,
    pgid: i32,
    out: Capture,
    err: Capture,
    deadline: Instant,
}

pub struct Broker {
    pub anchor: TrustAnchor,
    config: Escalation,
    workspace: PathBuf,
    requests: PathBuf,
    results: PathBuf,
    inotify: OwnedFd,
    seen: HashSet<String>,
    runs: HashMap<String, HostRun>,
    audit: File,
}

fn io_msg(what: &Path, e: io::Error) -> String {
    format!("{}: {e}", what.display())
}

impl Broker {
    /// Creates the mailbox directories (host-private) and the anchor.
    pub fn new(
        anchor: TrustAnchor,
        config: Escalation,
        workspace: &Path,
        mailbox: &Path,
        audit_log: &Path,
    ) -> Result<Broker, String> {
        let _ = std::fs::remove_dir_all(mailbox);
        let requests = mailbox.join("requests");
        let results = mailbox.join("results");
        for d in [&requests, &results] {
            std::fs::create_dir_all(d).map_err(|e| io_msg(d, e))?;
        }
        std::fs::set_permissions(mailbox, std::fs::Permissions::from_mode(0o700)).map_err(|e| io_msg(mailbox, e))?;
        std::fs::set_permissions(&requests, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_msg(&requests, e))?;
        // Results can be opened by name but not listed from the sandbox.
        std::fs::set_permissions(&results, std::fs::Permissions::from_mode(0o300)).map_err(|e| io_msg(&results, e))?;
        let inotify = sys::inotify_dir(&requests).map_err(|e| io_msg(&requests, e))?;
        let audit = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(audit_log)
            .map_err(|e| io_msg(audit_log, e))?;
        Ok(Broker {
            anchor,
            config,
            workspace: workspace.to_path_buf(),
            requests,
            results,
            inotify,
            seen: HashSet::new(),
            runs: HashMap::new(),
            audit,
        })
    }

    pub fn requests_dir(&self) -> &Path {
        &self.requests
    }
    pub fn results_dir(&self) -> &Path {
        &self.results
    }
    pub fn inotify_fd(&self) -> RawFd {
        self.inotify.as_raw_fd()
    }

    fn audit(&mut self, line: String) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let _ = writeln!(self.audit, "time={now} {}", escalation::neutralize(&line));
    }

    /// Reads every waiting request. Returns the accepted ones that need a
    /// human, keyed by session; auto-approved ones are started here.
    pub fn scan(&mut self, session: &dyn Fn(&str) -> Option<SessionView>) -> Vec<(String, Request)> {
        let mut buf = [0u8; 4096];
        while sys::read(self.inotify.as_raw_fd(), &mut buf)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        let mut names: Vec<String> = match std::fs::read_dir(&self.requests) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => return Vec::new(),
        };
        names.sort();
        let mut ask = Vec::new();
        for name in names.into_iter().take(SCAN_MAX) {
            if name.starts_with(".tmp-") {
                continue; // being written; its rename brings it back
            }
            let path = self.requests.join(&name);
            let data = self.take(&path);
            // INVARIANT: the record is gone from the mailbox before it is
            // acted on, so nothing is processed twice.
            let _ = std::fs::remove_file(&path);
            let verdict = data.and_then(|d| self.accept(&name, &d, session));
            match verdict {
                Ok((req, client)) => match self.auto_rule(&req.argv) {
                    Some(rule) => {
                        let why = format!("auto-approved by rule {rule}");
                        self.audit(format!(
                            "request={} session={} client={client} argv={} decision=\"{why}\"",
                            req.id,
                            req.session,
                            escalation::quote_argv(&req.argv)
                        ));
                        let argv = req.argv.clone();
                        self.start(req, argv, why);
                    }
                    None => ask.push((req.session.clone(), req)),
                },
                Err((id, reason)) => {
                    log::warn!("escalation: rejected {name}: {reason}");
                    self.audit(format!("rejected file={name} reason=\"{reason}\""));
                    if let Some(id) = id {
                        self.write_result(&Outcome {
                            id,
                            status: Status::Failed,
                            argv: Vec::new(),
                            reason: format!("rejected: {reason}"),
                            stdout: Vec::new(),
                            stderr: Vec::new(),
                            stdout_truncated: false,
                            stderr_truncated: false,
                        });
                    }
                }
            }
        }
        ask
    }

    /// Reads one record: a regular file reached without symlinks, of
    /// bounded size.
    fn take(&self, path: &Path) -> Result<Vec<u8>, (Option<String>, String)> {
        let f = sys::open_nofollow(path).map_err(|e| (None, format!("cannot open: {e}")))?;
        let md = f.metadata().map_err(|e| (None, e.to_string()))?;
        if !md.file_type().is_file() {
            return Err((None, "not a regular file".into()));
        }
        if md.len() as usize > escalation::MAX_REQUEST_BYTES {
            return Err((None, format!("record of {} bytes is over the limit", md.len())));
        }
        let mut data = Vec::new();
        f.take(escalation::MAX_REQUEST_BYTES as u64 + 1)
            .read_to_end(&mut data)
            .map_err(|e| (None, e.to_string()))?;
        Ok(data)
    }

    /// Strict parse, then every check that binds the record to one live
    /// session of this Domain and generation.
    #[allow(clippy::type_complexity)]
    fn accept(
        &mut self,
        name: &str,
        data: &[u8],
        session: &dyn Fn(&str) -> Option<SessionView>,
    ) -> Result<(Request, String), (Option<String>, String)> {
        let (req, signed, sig) = Request::parse(data).map_err(|e| (None, e.to_string()))?;
        let id = Some(req.id.clone());
        if name != format!("{}.req", req.id) {
            return Err((id, "file name does not match the request id".into()));
        }
        if req.domain != self.anchor.domain || req.generation != self.anchor.generation {
            return Err((id, "request is for another Domain or generation".into()));
        }
        let view = session(&req.session).ok_or((id.clone(), "no such session".to_string()))?;
        if view.client_id != req.client {
            return Err((id, "client does not match the session".into()));
        }
        let expected = self.anchor.identity(Role::ClientCli, &req.client, Some(&req.session));
        self.anchor
            .verify(&req.cert, &expected, &signed, &sig)
            .map_err(|e| (id.clone(), e.to_string()))?;
        // The Session Anchor: exactly the certificate issued at registration.
        if req.cert != view.cert_der {
            return Err((id, "certificate is not the session's own".into()));
        }
        if !self.seen.insert(req.id.clone()) {
            return Err((None, "replayed request id".into()));
        }
        let client = req.client.clone();
        Ok((req, client))
    }

    fn auto_rule(&self, argv: &[String]) -> Option<usize> {
        if !self.config.enabled {
            return None;
        }
        self.config
            .auto_approve
            .iter()
            .position(|r| escalation::rule_matches(&r.argv, r.allow_trailing_args, argv))
    }

    /// Answers a request without running anything.
    pub fn refuse(&mut self, req: &Request, status: Status, reason: &str) {
        self.audit(format!(
            "request={} session={} argv={} decision=\"{reason}\" result={}",
            req.id,
            req.session,
            escalation::quote_argv(&req.argv),
            status.name()
        ));
        self.write_result(&Outcome {
            id: req.id.clone(),
            status,
            argv: req.argv.clone(),
            reason: reason.into(),
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_truncated: false,
            stderr_truncated: false,
        });
    }

    /// Records the developer's decision.
    pub fn decided(&mut self, req: &Request, decision: &str) {
        self.audit(format!(
            "request={} session={} argv={} justification=\"{}\" decision=\"{decision}\"",
            req.id,
            req.session,
            escalation::quote_argv(&req.argv),
            req.justification
        ));
    }

    /// Host cwd for a request: inside the workspace, never above it.
    fn host_cwd(&self, rel: &str) -> Option<PathBuf> {
        let rel = Path::new(rel);
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return None;
        }
        let p = std::fs::canonicalize(self.workspace.join(rel)).ok()?;
        p.starts_with(&self.workspace).then_some(p)
    }

    /// Runs an approved command on the host.
    pub fn start(&mut self, req: Request, argv: Vec<String>, decision: String) {
        let Some(cwd) = self.host_cwd(&req.cwd) else {
            return self.refuse(&req, Status::Failed, "working directory is outside the workspace");
        };
        let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
        let user = std::env::var("USER").unwrap_or_default();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home)
            .env("USER", &user)
            .env("LOGNAME", &user)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls before exec: the command
        // becomes its own process group so a cancel reaches all of it.
        unsafe {
            cmd.pre_exec(|| {
                sys::reset_signals();
                sys::setsid()
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return self.refuse(
                    &req,
                    Status::Failed,
                    &format!("cannot run {:?} on the host: {e}", argv[0]),
                )
            }
        };
        let out: OwnedFd = child.stdout.take().unwrap().into();
        let err: OwnedFd = child.stderr.take().unwrap().into();
        let _ = sys::set_nonblocking(out.as_raw_fd(), true);
        let _ = sys::set_nonblocking(err.as_raw_fd(), true);
        let pgid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(req.timeout_secs.min(escalation::MAX_TIMEOUT_SECS));
        self.runs.insert(
            req.id.clone(),
            HostRun {
                req,
                argv,
                decision,
                child,
                pgid,
                out: Capture::new(out),
                err: Capture::new(err),
                deadline,
            },
        );
    }

    /// Output fds of running host commands, tagged by request id.
    pub fn poll_fds(&self) -> Vec<(RawFd, String)> {
        let mut v = Vec::new();
        for (id, r) in &self.runs {
            for c in [&r.out, &r.err] {
                if let Some(fd) = &c.fd {
                    v.push((fd.as_raw_fd(), id.clone()));
                }
            }
        }
        v
    }

    pub fn pump(&mut self, id: &str) {
        if let Some(r) = self.runs.get_mut(id) {
            r.out.pump();
            r.err.pump();
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.runs.values().map(|r| r.deadline).min()
    }

    /// Finishes commands that exited or ran out of time.
    pub fn reap(&mut self) {
        let now = Instant::now();
        let ids: Vec<String> = self.runs.keys().cloned().collect();
        for id in ids {
            let r = self.runs.get_mut(&id).unwrap();
            let status = match r.child.try_wait() {
                Ok(Some(st)) => {
                    r.out.pump();
                    r.err.pump();
                    Some(Status::Completed(st.code().unwrap_or_else(|| {
                        128 + std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0)
                    })))
                }
                _ if now >= r.deadline => Some(Status::TimedOut),
                _ => None,
            };
            if let Some(status) = status {
                self.finish(&id, status);
            }
        }
    }

    /// Ends one run: kill its process group, reap, deliver the result.
    fn finish(&mut self, id: &str, status: Status) {
        let Some(mut r) = self.runs.remove(id) else { return };
        // INVARIANT: no host process outlives its request (OR-3).
        let _ = sys::killpg(r.pgid, libc::SIGKILL);
        let _ = r.child.kill();
        let _ = r.child.wait();
        r.out.pump();
        r.err.pump();
        let reason = match &status {
            Status::Completed(_) => r.decision.clone(),
            Status::TimedOut => format!("killed after {} s ({})", r.req.timeout_secs, r.decision),
            Status::Cancelled => "the requesting session ended".into(),
            _ => r.decision.clone(),
        };
        self.audit(format!(
            "request={} session={} ran={} result={} exit={}",
            r.req.id,
            r.req.session,
            escalation::quote_argv(&r.argv),
            status.name(),
            status.exit_code()
        ));
        self.write_result(&Outcome {
            id: r.req.id.clone(),
            status,
            argv: r.argv.clone(),
            reason,
            stdout: std::mem::take(&mut r.out.data),
            stderr: std::mem::take(&mut r.err.data),
            stdout_truncated: r.out.truncated,
            stderr_truncated: r.err.truncated,
        });
    }

    /// The session is gone: cancel whatever it started.
    pub fn cancel_session(&mut self, session_id: &str) {
        let ids: Vec<String> = self
            .runs
            .iter()
            .filter(|(_, r)| r.req.session == session_id)
            .map(|(k, _)| k.clone())
            .collect();
        for id in ids {
            self.finish(&id, Status::Cancelled);
        }
    }

    /// Cancels everything (teardown).
    pub fn cancel_all(&mut self) {
        let ids: Vec<String> = self.runs.keys().cloned().collect();
        for id in ids {
            self.finish(&id, Status::Cancelled);
        }
    }

    fn write_result(&self, o: &Outcome) {
        let tmp = self.results.join(format!(".tmp-{}", o.id));
        let fin = self.results.join(format!("{}.res", o.id));
        let ok = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(o.encode().as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &fin));
        if let Err(e) = ok {
            log::warn!("escalation: cannot deliver result {}: {e}", o.id);
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The prompt shown in the requesting session's terminal.
pub fn prompt_text(profile: &str, session: &str, req: &Request) -> String {
    let cwd = if req.cwd.is_empty() {
        "/workspace".to_string()
    } else {
        format!("/workspace/{}", req.cwd)
    };
    let why = if req.justification.is_empty() {
        "(none given)".to_string()
    } else {
        req.justification.clone()
    };
    format!(
        "\r\n\x1b[1m-- lazaret: the sandbox asks to run a command on the host --\x1b[0m\r\n\
         profile: {}   session: {}\r\n\
         command: {}\r\n\
         cwd:     {}\r\n\
         why:     {}\r\n\
         [a]pprove  [d]eny  [e]dit? ",
        escalation::neutralize(profile),
        escalation::neutralize(session),
        escalation::quote_argv(&req.argv),
        escalation::neutralize(&cwd),
        escalation::neutralize(&why),
    )
}
