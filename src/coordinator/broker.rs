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
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Escalation;
use crate::coordinator::CoordinatorError;
use crate::escalation::{self, Outcome, Request, Status};
use crate::sys;
use crate::trust::{Role, TrustAnchor};
use crate::wire::mailbox;

/// Most well-formed requests handled in one scan; the rest are handled
/// by the next one, which the coordinator runs at once (`backlog`), so a
/// burst of any size drains without waiting for another event while the
/// event loop stays responsive.
const SCAN_MAX: usize = 256;
/// Most junk entries removed in one scan: small, so a flood of junk is
/// removed over several short passes and a request waits at most one.
const JUNK_MAX: usize = 1024;
/// A `.tmp-*` file older than this is abandoned and removed. Generous: a
/// writer inside a loaded sandbox can be slow, and a young one costs only a
/// `stat` per scan, never a place in it. Bytes are bounded apart from
/// age: a file over the record limit goes on sight, and so do the largest
/// young ones while `requests/` holds more than [`REQUESTS_MAX_BYTES`].
const TMP_GRACE: Duration = Duration::from_secs(120);
/// Most requests waiting for the developer at once (each holds its
/// directory open): more are refused, so a flood cannot exhaust fds.
const MAX_WAITING: usize = 1024;
use escalation::REQUESTS_MAX_BYTES;

/// Host-command lifecycle, for the coordinator's durable record.
#[derive(Debug)]
pub enum HostEvent {
    Started { id: String, pid: i32, start_time: u64 },
    Ended { id: String },
}

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
            match sys::read(fd, &mut buf) {
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
    /// The workspace as opened at start: every working directory is
    /// resolved beneath this handle, never through a path string.
    workspace_fd: OwnedFd,
    /// The resolved working directory of each request waiting for the
    /// developer, by request id: what the prompt names is what runs.
    dirs: HashMap<String, OwnedFd>,
    requests: PathBuf,
    results: PathBuf,
    /// Sessions' credential files, bound read-only at `GUEST_KEYS`.
    keys: PathBuf,
    /// Host-only: junk that could not be removed is moved here.
    quarantine: PathBuf,
    quarantined: u64,
    inotify: OwnedFd,
    seen: HashSet<String>,
    runs: HashMap<String, HostRun>,
    audit: File,
    /// More well-formed requests are waiting than one scan handled.
    pub backlog: bool,
    /// Started and ended host commands since the coordinator last looked.
    pub events: Vec<HostEvent>,
}

/// Why a mailbox record was rejected (no result is written for it; the
/// reason goes to the audit log).
#[derive(Debug)]
enum Rejection {
    Open(io::Error),
    Read(io::Error),
    NotAFile,
    /// Its size.
    TooLarge(u64),
    Record(mailbox::RecordError),
    NameMismatch,
    OtherGeneration,
    NoSession,
    ClientMismatch,
    Signature(crate::trust::TrustError),
    ForeignCertificate,
    Replayed,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use Rejection::*;
        match self {
            Open(e) => write!(f, "cannot open: {e}"),
            Read(e) => write!(f, "{e}"),
            NotAFile => write!(f, "not a regular file"),
            TooLarge(n) => write!(f, "record of {n} bytes is over the limit"),
            Record(e) => write!(f, "{e}"),
            NameMismatch => write!(f, "file name does not match the request id"),
            OtherGeneration => write!(f, "request is for another Domain or generation"),
            NoSession => write!(f, "no such session"),
            ClientMismatch => write!(f, "client does not match the session"),
            Signature(e) => write!(f, "{e}"),
            ForeignCertificate => write!(f, "certificate is not the session's own"),
            Replayed => write!(f, "replayed request id"),
        }
    }
}

fn io_err(what: &Path, e: io::Error) -> CoordinatorError {
    CoordinatorError::Mailbox(what.to_path_buf(), e)
}

impl Broker {
    /// Creates the mailbox directories (host-private) and the anchor.
    pub fn new(
        anchor: TrustAnchor,
        config: Escalation,
        workspace: &Path,
        mailbox: &Path,
        audit_log: &Path,
    ) -> Result<Broker, CoordinatorError> {
        remove_tree(mailbox);
        let requests = mailbox.join("requests");
        let results = mailbox.join("results");
        let quarantine = mailbox.join("quarantine");
        let keys = mailbox.join("keys");
        for d in [&requests, &results, &quarantine, &keys] {
            std::fs::create_dir_all(d).map_err(|e| io_err(d, e))?;
        }
        std::fs::set_permissions(mailbox, std::fs::Permissions::from_mode(0o700)).map_err(|e| io_err(mailbox, e))?;
        std::fs::set_permissions(&requests, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err(&requests, e))?;
        // Results can be opened by name but not listed from the sandbox.
        std::fs::set_permissions(&results, std::fs::Permissions::from_mode(0o300)).map_err(|e| io_err(&results, e))?;
        // Keys: guest root's (the host user is root inside); other uids may
        // open a file by name but not list the directory.
        std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o711)).map_err(|e| io_err(&keys, e))?;
        let inotify = sys::inotify_dir(&requests).map_err(|e| io_err(&requests, e))?;
        let audit = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(audit_log)
            .map_err(|e| io_err(audit_log, e))?;
        let workspace_fd = sys::open_dir_handle(workspace).map_err(|e| io_err(workspace, e))?;
        Ok(Broker {
            anchor,
            config,
            workspace: workspace.to_path_buf(),
            workspace_fd,
            dirs: HashMap::new(),
            requests,
            results,
            keys,
            quarantine,
            quarantined: 0,
            inotify,
            seen: HashSet::new(),
            runs: HashMap::new(),
            audit,
            backlog: false,
            events: Vec::new(),
        })
    }

    pub fn requests_dir(&self) -> &Path {
        &self.requests
    }

    /// From now on reads `requests/` through the supervisor's mount
    /// namespace (`/proc/PID/root`), where the supervisor mounted a tmpfs
    /// of [`REQUESTS_MAX_BYTES`] over it before runsc started: what the
    /// sandbox writes there (even to a file it keeps open after the broker
    /// deleted it) is bounded by the kernel, and it is gone with the
    /// namespace.
    pub fn attach(&mut self, supervisor_pid: i32) -> io::Result<()> {
        let rel = self.requests.strip_prefix("/").unwrap_or(&self.requests);
        let p = PathBuf::from(format!("/proc/{supervisor_pid}/root")).join(rel);
        self.inotify = sys::inotify_dir(&p)?;
        self.requests = p;
        Ok(())
    }
    pub fn results_dir(&self) -> &Path {
        &self.results
    }
    pub fn keys_dir(&self) -> &Path {
        &self.keys
    }

    /// Writes a session's credential where only its process can read it:
    /// a file owned by the host user (root inside the sandbox) of mode
    /// 0600 for a root session. A session of the profile's `user` (uid
    /// 1000 inside) cannot be given a file of its own uid from here, so
    /// its file is 0644: readable by every uid inside, as an environment
    /// variable would be (`/proc/PID/environ` is 0444 in gVisor), but
    /// never a root session's. Returns the guest path.
    pub fn write_credential(&self, session: &str, cred: &str, root: bool) -> io::Result<String> {
        let path = self.keys.join(session);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(sys::O_NOFOLLOW)
            .open(&path)?;
        f.write_all(cred.as_bytes())?;
        if !root {
            f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        }
        Ok(format!("{}/{session}", escalation::GUEST_KEYS))
    }

    /// The session ended: its credential file goes.
    pub fn remove_credential(&self, session: &str) {
        let _ = std::fs::remove_file(self.keys.join(session));
    }
    pub fn inotify_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.inotify)
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
    ///
    /// Only well-formed entries (a regular file named `<32 hex>.req`) are
    /// read, and only they count against [`SCAN_MAX`]; everything else the
    /// sandbox can put there (abandoned temporary files, directories,
    /// FIFOs, sockets, symlinks, other names) is removed without being
    /// opened. A result is written only for a record whose signature and
    /// session binding were verified: a forged record naming someone
    /// else's request id leaves that request alone.
    pub fn scan(&mut self, session: &dyn Fn(&str) -> Option<SessionView>) -> Vec<(String, Request)> {
        let mut buf = [0u8; 4096];
        while sys::read(&self.inotify, &mut buf).map(|n| n > 0).unwrap_or(false) {}
        let rd = match std::fs::read_dir(&self.requests) {
            Ok(rd) => rd,
            Err(_) => return Vec::new(),
        };
        let mut names: Vec<String> = Vec::new();
        let mut junk: Vec<(PathBuf, bool)> = Vec::new();
        let mut bad_named: Vec<(String, &'static str)> = Vec::new();
        let now = std::time::SystemTime::now();
        // Bytes of the regular files seen, and the young temporary ones.
        let mut total: u64 = 0;
        let mut young_tmps: Vec<(u64, PathBuf)> = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name();
            let Ok(ft) = e.file_type() else { continue };
            let name_ok = name.to_str().is_some_and(well_formed_name);
            let md = if ft.is_file() { e.metadata().ok() } else { None };
            let bytes = md.as_ref().map_or(0, |m| m.len().max(m.blocks() * 512));
            total = total.saturating_add(bytes);
            let oversized = bytes > escalation::MAX_REQUEST_BYTES as u64;
            // An oversized record is read no further than its size and
            // rejected (audited) like any bad record.
            if name_ok && ft.is_file() {
                names.push(name.to_string_lossy().into_owned());
                continue;
            }
            if junk.len() >= JUNK_MAX {
                continue; // the next scan removes the rest
            }
            let is_tmp = name.as_encoded_bytes().starts_with(b".tmp-");
            if is_tmp && ft.is_file() && !oversized {
                // Being written; its rename brings it back. Abandoned ones go.
                let young = md
                    .as_ref()
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| now.duration_since(t).ok())
                    .is_none_or(|age| age < TMP_GRACE);
                if young {
                    young_tmps.push((bytes, e.path()));
                    continue;
                }
            }
            if name_ok {
                bad_named.push((
                    name.to_string_lossy().into_owned(),
                    if ft.is_symlink() {
                        "cannot open: a symlink"
                    } else {
                        "not a regular file"
                    },
                ));
            }
            junk.push((e.path(), ft.is_dir()));
        }
        // Over the byte cap: the largest young temporary files go too.
        young_tmps.sort();
        while total > REQUESTS_MAX_BYTES {
            let Some((bytes, p)) = young_tmps.pop() else { break };
            total -= bytes;
            junk.push((p, false));
        }
        names.sort();
        // Requests past SCAN_MAX are left for the next scan, which runs at once.
        self.backlog = names.len() > SCAN_MAX;
        let mut ask = Vec::new();
        for name in names.into_iter().take(SCAN_MAX) {
            let path = self.requests.join(&name);
            let data = self.take(&path);
            // INVARIANT: the record is gone from the mailbox before it is
            // acted on, so nothing is processed twice.
            let _ = std::fs::remove_file(&path);
            let verdict = data.and_then(|d| self.accept(&name, &d, session));
            match verdict {
                Ok((req, client)) => {
                    let dir = match self.resolve_cwd(&req.cwd) {
                        Ok(d) => d,
                        Err(why) => {
                            let why = format!(
                                "working directory {}: {why}; nothing ran",
                                escalation::quote_argv(std::slice::from_ref(&req.cwd))
                            );
                            self.refuse(&req, Status::Failed, &why);
                            continue;
                        }
                    };
                    match self.auto_rule(&req, &dir) {
                        Some((rule, harden)) => {
                            let why = format!("auto-approved by rule {rule}");
                            self.audit(format!(
                                "request={} session={} client={client} cwd={} argv={} decision=\"{why}\"",
                                req.id,
                                req.session,
                                escalation::quote_argv(std::slice::from_ref(&req.cwd)),
                                escalation::quote_argv(&req.argv)
                            ));
                            let argv = if harden {
                                self.harden_git(&req.argv)
                            } else {
                                req.argv.clone()
                            };
                            self.start_in(req, argv, why, dir);
                        }
                        None if self.dirs.len() >= MAX_WAITING => self.refuse(
                            &req,
                            Status::Failed,
                            "too many requests are waiting for a decision; nothing ran",
                        ),
                        None => {
                            self.dirs.insert(req.id.clone(), dir);
                            ask.push((req.session.clone(), req))
                        }
                    }
                }
                Err(reason) => {
                    // INVARIANT: no result for a record that failed
                    // verification; its id may be another session's.
                    log::warn!("escalation: rejected {name}: {reason}");
                    self.audit(format!("rejected file={name} reason=\"{reason}\""));
                }
            }
        }
        // Only now, so no amount of junk delays a legitimate request.
        if !junk.is_empty() {
            let mut progress = false;
            for (p, dir) in &junk {
                // Never through a symlink; directories of ours the sandbox
                // closed (mode 0000 at any level) are opened up on the way.
                let removed = if *dir {
                    match (p.parent(), p.file_name()) {
                        (Some(d), Some(n)) => sys::remove_tree_nofollow(d, n),
                        _ => Err(io::Error::from(io::ErrorKind::InvalidInput)),
                    }
                } else {
                    // Emptied first: a writer holding it open keeps an
                    // unlinked file's bytes until it closes.
                    let _ = sys::truncate_nofollow(p);
                    std::fs::remove_file(p)
                };
                // What cannot be removed (a tree the sandbox made unreadable)
                // is moved out of the sandbox's reach, so it never comes back.
                let moved = removed.is_err() && {
                    self.quarantined += 1;
                    std::fs::rename(p, self.quarantine.join(self.quarantined.to_string())).is_ok()
                };
                progress |= removed.is_ok() || moved;
            }
            // Rescan at once only while the junk is going away.
            self.backlog |= progress && junk.len() >= JUNK_MAX;
            for (name, why) in bad_named {
                self.audit(format!("rejected file={name} reason=\"{why}\""));
            }
            log::warn!("escalation: removed {} junk entries from the mailbox", junk.len());
        }
        ask
    }

    /// Reads one record: a regular file reached without symlinks, of
    /// bounded size.
    fn take(&self, path: &Path) -> Result<Vec<u8>, Rejection> {
        let f = sys::open_nofollow(path).map_err(Rejection::Open)?;
        let md = f.metadata().map_err(Rejection::Read)?;
        if !md.file_type().is_file() {
            return Err(Rejection::NotAFile);
        }
        if md.len() as usize > escalation::MAX_REQUEST_BYTES {
            return Err(Rejection::TooLarge(md.len()));
        }
        let mut data = Vec::new();
        f.take(escalation::MAX_REQUEST_BYTES as u64 + 1)
            .read_to_end(&mut data)
            .map_err(Rejection::Read)?;
        Ok(data)
    }

    /// Strict parse, then every check that binds the record to one live
    /// session of this Domain and generation.
    fn accept(
        &mut self,
        name: &str,
        data: &[u8],
        session: &dyn Fn(&str) -> Option<SessionView>,
    ) -> Result<(Request, String), Rejection> {
        let (req, signed, sig) = mailbox::decode_request(data).map_err(Rejection::Record)?;
        if name != format!("{}.req", req.id) {
            return Err(Rejection::NameMismatch);
        }
        if req.domain != self.anchor.domain || req.generation != self.anchor.generation {
            return Err(Rejection::OtherGeneration);
        }
        let view = session(&req.session).ok_or(Rejection::NoSession)?;
        if view.client_id != req.client {
            return Err(Rejection::ClientMismatch);
        }
        let expected = self.anchor.identity(Role::ClientCli, &req.client, Some(&req.session));
        self.anchor
            .verify(&req.cert, &expected, &signed, &sig)
            .map_err(Rejection::Signature)?;
        // The Session Anchor: exactly the certificate issued at registration.
        if req.cert != view.cert_der {
            return Err(Rejection::ForeignCertificate);
        }
        if !self.seen.insert(req.id.clone()) {
            return Err(Rejection::Replayed);
        }
        let client = req.client.clone();
        Ok((req, client))
    }

    /// The first rule matching both the argv and the working directory
    /// `dir` (already resolved): the rule's own directory is resolved the
    /// same way now and must be the same directory (device and inode), so
    /// a symlink at the rule's path matches nothing. With its Git hardening.
    fn auto_rule(&self, req: &Request, dir: &OwnedFd) -> Option<(usize, bool)> {
        if !self.config.enabled {
            return None;
        }
        let here = sys::fd_identity(dir).ok()?;
        self.config.auto_approve.iter().enumerate().find_map(|(n, r)| {
            (escalation::rule_matches(&r.argv, r.allow_trailing_args, &req.argv)
                && self
                    .resolve_cwd(&r.cwd)
                    .ok()
                    .and_then(|d| sys::fd_identity(&d).ok())
                    .is_some_and(|rc| rc == here))
            .then_some((n, r.harden_git))
        })
    }

    /// `argv` with host Git's hardening (`escalation::harden_git`), given
    /// every configuration key the workspace's repositories set in any
    /// scope or include (`view::hostexec`).
    pub fn harden_git(&self, argv: &[String]) -> Vec<String> {
        if argv.first().is_none_or(|a| a.rsplit('/').next() != Some("git")) {
            return argv.to_vec();
        }
        let surface = crate::view::hostexec::compute(&self.workspace, &crate::view::hostexec::Scopes::from_env());
        let keys: Vec<escalation::GitKey> = surface.exec_keys().into_iter().collect();
        escalation::harden_git(argv, &keys)
    }

    /// The host directory a request runs in, as the prompt shows it: its
    /// path under the workspace (resolved without symlinks, so the path is
    /// the directory's).
    pub fn host_cwd_display(&self, rel: &str) -> String {
        let p = if rel.is_empty() {
            self.workspace.clone()
        } else {
            self.workspace.join(rel)
        };
        p.to_string_lossy().into_owned()
    }

    pub fn prompt_timeout_s(&self) -> u64 {
        self.config.prompt_timeout_s
    }

    /// Answers a request without running anything.
    pub fn refuse(&mut self, req: &Request, status: Status, reason: &str) {
        self.dirs.remove(&req.id);
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

    /// The directory `rel` (relative to the workspace) as a handle,
    /// resolved beneath the workspace handle opened at start with no
    /// symlink anywhere on the way (`sys::open_dir_beneath`).
    fn resolve_cwd(&self, rel: &str) -> Result<OwnedFd, &'static str> {
        let rel = Path::new(rel);
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err("not a plain path inside the workspace");
        }
        sys::open_dir_beneath(&self.workspace_fd, rel).map_err(|e| match e.raw_os_error() {
            Some(sys::ELOOP) => "a symlink is on the way (refused: the directory must be reached without one)",
            Some(sys::EXDEV) => "it leads outside the workspace",
            Some(sys::ENOENT) => "no such directory in the workspace",
            Some(sys::ENOTDIR) => "not a directory",
            _ => "cannot be opened",
        })
    }

    /// Runs a command the developer approved, in the directory resolved
    /// when the request arrived (the one the prompt named). The path is
    /// resolved again now and must still lead to that same directory.
    pub fn start(&mut self, req: Request, argv: Vec<String>, decision: String) {
        let Some(dir) = self.dirs.remove(&req.id) else {
            return self.refuse(&req, Status::Failed, "working directory was not resolved; nothing ran");
        };
        let same = match (self.resolve_cwd(&req.cwd), sys::fd_identity(&dir)) {
            (Ok(now), Ok(then)) => sys::fd_identity(&now).is_ok_and(|n| n == then),
            _ => false,
        };
        if !same {
            return self.refuse(
                &req,
                Status::Failed,
                "the working directory changed while the request waited (it is not the directory the prompt \
                 named); nothing ran",
            );
        }
        self.start_in(req, argv, decision, dir)
    }

    /// Runs an approved command on the host, its working directory the
    /// handle `dir` (`fchdir`: no path is looked up again).
    fn start_in(&mut self, req: Request, argv: Vec<String>, decision: String, dir: OwnedFd) {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
        let user = std::env::var("USER").unwrap_or_default();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home)
            .env("USER", &user)
            .env("LOGNAME", &user)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The command becomes its own session and process group so a
        // cancel reaches all of it, and dies with the coordinator (checked
        // against the race where the coordinator died before the signal
        // was armed).
        sys::ChildSetup::new()
            .reset_signals()
            .setsid()
            .parent_death_signal(sys::SIGKILL)
            .exit_unless_parent(sys::getpid())
            .fchdir(&dir)
            .apply(&mut cmd);
        let spawned = cmd.spawn();
        drop(dir);
        let mut child = match spawned {
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
        let _ = sys::set_nonblocking(&out, true);
        let _ = sys::set_nonblocking(&err, true);
        let pgid = child.id() as i32;
        self.events.push(HostEvent::Started {
            id: req.id.clone(),
            pid: pgid,
            start_time: sys::proc_start_time(pgid).unwrap_or(0),
        });
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
    pub fn poll_fds(&self) -> Vec<(std::os::fd::BorrowedFd<'_>, String)> {
        let mut v = Vec::new();
        for (id, r) in &self.runs {
            for c in [&r.out, &r.err] {
                if let Some(fd) = &c.fd {
                    v.push((std::os::fd::AsFd::as_fd(fd), id.clone()));
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
        // INVARIANT: no host process outlives its request.
        let _ = sys::killpg(r.pgid, sys::SIGKILL);
        let _ = r.child.kill();
        let _ = r.child.wait();
        self.events.push(HostEvent::Ended { id: id.to_string() });
        r.out.pump();
        r.err.pump();
        let reason = match &status {
            Status::Completed(_) => r.decision.clone(),
            Status::TimedOut => format!("killed after {} s ({})", r.req.timeout_secs, r.decision),
            Status::Cancelled => "the requesting session ended".into(),
            Status::Expired => "no decision in time".into(),
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
            .custom_flags(sys::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&mailbox::encode_result(o)))
            .and_then(|()| std::fs::rename(&tmp, &fin));
        if let Err(e) = ok {
            log::warn!("escalation: cannot deliver result {}: {e}", o.id);
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// Removes a mailbox tree without following symlinks. A subtree the
/// sandbox made unreadable may stay behind (it is in the host-private
/// runtime directory, and `quarantine/` is never visible to the sandbox).
pub fn remove_tree(p: &Path) {
    let _ = std::fs::set_permissions(p.join("results"), std::fs::Permissions::from_mode(0o700));
    if let Err(e) = std::fs::remove_dir_all(p) {
        if e.kind() != io::ErrorKind::NotFound {
            log::warn!("escalation: could not remove all of {}: {e}", p.display());
        }
    }
}

/// A request file's name: `<32 lowercase hex>.req`.
fn well_formed_name(n: &str) -> bool {
    n.len() == 36 && n.ends_with(".req") && n[..32].bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Recovery after a coordinator crash: kills exactly the host command
/// recorded as (`pid`, `start_time`, `pgid`). The leader is verified by its
/// start time; if the leader is gone, its process group and session id
/// cannot have been reused while any member lives, so the members still
/// carrying that group (and started no earlier) are ours. A pid now used by
/// a different process means the group is gone: nothing is killed.
pub fn kill_recorded(pid: i32, start_time: u64, pgid: i32) -> usize {
    if pid <= 0 || pgid <= 0 {
        return 0;
    }
    if sys::same_process(pid, start_time) {
        let _ = sys::killpg(pgid, sys::SIGKILL);
        return 1;
    }
    if sys::proc_start_time(pid).is_some() {
        return 0; // the pid was reused: not ours
    }
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            // Fields after the command name: state ppid pgrp session ...
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let (Some(pg), Some(st)) = (
                f.get(2).and_then(|v| v.parse::<i32>().ok()),
                sys::parse_start_time(&stat),
            ) else {
                continue;
            };
            if pg == pgid && st >= start_time {
                let _ = sys::kill(p, sys::SIGKILL);
                n += 1;
            }
        }
    }
    n
}

/// The mailbox intake against what a hostile sandbox can put there. Real
/// files in a temporary directory, the real Trust Anchor; nothing runs
/// (escalation is off, so no rule auto-approves).
#[cfg(test)]
mod intake_tests {
    use super::*;
    use crate::trust::SessionKey;

    const CLIENT: &str = "0123456789abcdef";
    const SESSION: &str = "fedcba9876543210";

    struct Fixture {
        dir: PathBuf,
        broker: Broker,
        key: SessionKey,
        cert: Vec<u8>,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn fixture(tag: &str) -> Fixture {
        let dir = std::env::temp_dir().join(format!("lz-broker-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ws")).unwrap();
        let ws = std::fs::canonicalize(dir.join("ws")).unwrap();
        let anchor = TrustAnchor::new(&"d".repeat(20), 3, "default").unwrap();
        let cred = anchor.issue(Role::ClientCli, CLIENT, Some(SESSION)).unwrap();
        let key = SessionKey::parse(&cred.export().unwrap()).unwrap();
        let cert = key.cert.clone();
        let broker = Broker::new(
            anchor,
            Escalation::default(),
            &ws,
            &dir.join("mbox"),
            &dir.join("audit.log"),
        )
        .unwrap();
        Fixture { dir, broker, key, cert }
    }

    fn request(f: &Fixture, n: u8) -> Request {
        Request {
            id: format!("{n:02x}").repeat(16),
            domain: "d".repeat(20),
            generation: 3,
            session: SESSION.into(),
            client: CLIENT.into(),
            cwd: String::new(),
            timeout_secs: 10,
            justification: "test".into(),
            argv: vec!["true".into()],
            cert: f.cert.clone(),
        }
    }

    fn record(f: &Fixture, req: &Request) -> Vec<u8> {
        let sig = f.key.sign(&mailbox::signed_part(req)).unwrap();
        mailbox::encode_request(req, &sig)
    }

    impl Fixture {
        fn put(&self, name: &str, data: &[u8]) -> PathBuf {
            let p = self.broker.requests_dir().join(name);
            std::fs::write(&p, data).unwrap();
            p
        }
        fn scan(&mut self) -> Vec<String> {
            let cert = self.cert.clone();
            let view = move |s: &str| {
                (s == SESSION).then(|| SessionView {
                    client_id: CLIENT.into(),
                    cert_der: cert.clone(),
                })
            };
            self.broker.scan(&view).into_iter().map(|(_, r)| r.id).collect()
        }
        fn left(&self) -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(self.broker.requests_dir())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        }
        fn audit(&self) -> String {
            std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default()
        }
        fn results(&self) -> usize {
            // The results dir is not listable by its mode (0300) unless we
            // are root; open it up for the check.
            let r = self.broker.results_dir();
            std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o700)).unwrap();
            let n = std::fs::read_dir(r).unwrap().count();
            std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o300)).unwrap();
            n
        }
    }

    #[test]
    fn a_working_directory_is_resolved_beneath_the_workspace_without_symlinks() {
        let f = fixture("cwd");
        let ws = std::fs::canonicalize(f.dir.join("ws")).unwrap();
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        std::os::unix::fs::symlink("a", ws.join("link")).unwrap();
        std::os::unix::fs::symlink("..", ws.join("a/up")).unwrap();
        std::fs::write(ws.join("file"), b"").unwrap();
        let id = |d: &OwnedFd| sys::fd_identity(d).unwrap();
        let ab = f.broker.resolve_cwd("a/b").unwrap();
        let meta = std::fs::metadata(ws.join("a/b")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(id(&ab), (meta.dev(), meta.ino()));
        assert!(f.broker.resolve_cwd("").is_ok());
        for (rel, why) in [
            ("link", "symlink"),
            ("link/b", "symlink"),
            ("a/up", "symlink"),
            ("a/../..", "plain path"),
            ("/etc", "plain path"),
            ("missing", "no such directory"),
            ("file", "not a directory"),
        ] {
            let e = f.broker.resolve_cwd(rel).unwrap_err();
            assert!(e.contains(why), "{rel}: {e}");
        }
    }

    #[test]
    fn a_well_formed_signed_request_is_accepted_once_and_removed() {
        let mut f = fixture("ok");
        let req = request(&f, 1);
        f.put(&format!("{}.req", req.id), &record(&f, &req));
        assert_eq!(f.scan(), vec![req.id.clone()]);
        assert!(f.left().is_empty());
        // The same record again is a replay.
        f.put(&format!("{}.req", req.id), &record(&f, &req));
        assert!(f.scan().is_empty());
        assert!(f.audit().contains("replayed request id"), "{}", f.audit());
        assert!(f.left().is_empty());
        assert_eq!(f.results(), 0);
    }

    #[test]
    fn an_oversize_record_is_rejected_unread() {
        let mut f = fixture("big");
        let req = request(&f, 2);
        let mut data = record(&f, &req);
        data.resize(escalation::MAX_REQUEST_BYTES + 1, b'\n');
        f.put(&format!("{}.req", req.id), &data);
        assert!(f.scan().is_empty());
        assert!(f.audit().contains("over the limit"), "{}", f.audit());
        assert!(f.left().is_empty());
    }

    #[test]
    fn a_symlink_is_never_followed() {
        let mut f = fixture("link");
        let req = request(&f, 3);
        // A valid record outside the mailbox, reached through a symlink
        // with a well-formed name: the marker file must stay untouched.
        let target = f.dir.join("outside.req");
        std::fs::write(&target, record(&f, &req)).unwrap();
        std::os::unix::fs::symlink(&target, f.broker.requests_dir().join(format!("{}.req", req.id))).unwrap();
        // And one to a directory with a junk name.
        std::os::unix::fs::symlink(&f.dir, f.broker.requests_dir().join("up")).unwrap();
        assert!(f.scan().is_empty());
        assert!(f.left().is_empty());
        assert!(target.exists(), "the symlink's target was removed");
        assert!(f.dir.join("ws").is_dir(), "a directory symlink was followed");
        assert!(f.audit().contains("cannot open: a symlink"), "{}", f.audit());
    }

    #[test]
    fn junk_is_removed_and_does_not_block_a_request() {
        let mut f = fixture("junk");
        let good = request(&f, 4);
        f.put(&format!("{}.req", good.id), &record(&f, &good));
        for name in [
            "x",
            "ABCDEF0123456789ABCDEF0123456789.req",
            "0123.req",
            "a b.req",
            ".hidden",
            "\u{202e}.req",
        ] {
            f.put(name, b"junk");
        }
        std::fs::create_dir(f.broker.requests_dir().join(format!("{}.req", "5".repeat(32)))).unwrap();
        std::fs::create_dir_all(f.broker.requests_dir().join("deep/er")).unwrap();
        std::os::unix::net::UnixListener::bind(f.broker.requests_dir().join("sock")).unwrap();
        // A young temporary file is a writer at work: it stays.
        f.put(".tmp-young", b"half a record");
        assert_eq!(f.scan(), vec![good.id.clone()]);
        assert_eq!(f.left(), vec![".tmp-young".to_string()]);
        assert!(f.audit().contains("not a regular file"), "{}", f.audit());
    }

    #[test]
    fn an_unreadable_or_garbled_record_is_rejected_without_a_result() {
        let mut f = fixture("mode");
        let a = request(&f, 6);
        let p = f.put(&format!("{}.req", a.id), b"LZESC1\ngarbage\n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        let b = request(&f, 7);
        f.put(&format!("{}.req", b.id), &record(&f, &b));
        assert_eq!(f.scan(), vec![b.id.clone()]);
        assert!(f.left().is_empty());
        assert_eq!(f.results(), 0);
    }

    #[test]
    fn a_record_in_the_former_text_format_cut_or_with_trailing_bytes_is_malformed() {
        let mut f = fixture("frame");
        let a = request(&f, 14);
        f.put(&format!("{}.req", a.id), format!("LZESC1\nid {}\n", a.id).as_bytes());
        let b = request(&f, 15);
        let rec = record(&f, &b);
        f.put(&format!("{}.req", b.id), &rec[..rec.len() - 1]);
        let c = request(&f, 16);
        let mut rec = record(&f, &c);
        rec.push(0);
        f.put(&format!("{}.req", c.id), &rec);
        assert!(f.scan().is_empty());
        assert!(f.left().is_empty());
        assert_eq!(f.audit().matches("malformed record").count(), 3, "{}", f.audit());
        assert_eq!(f.results(), 0);
    }

    #[test]
    fn a_record_not_bound_to_its_name_session_or_key_is_rejected() {
        let mut f = fixture("bind");
        // Under another request's name.
        let a = request(&f, 8);
        f.put(&format!("{}.req", "9".repeat(32)), &record(&f, &a));
        // For a session that is not registered.
        let mut b = request(&f, 10);
        b.session = "0000000000000000".into();
        f.put(&format!("{}.req", b.id), &record(&f, &b));
        // Another generation.
        let mut c = request(&f, 11);
        c.generation = 2;
        f.put(&format!("{}.req", c.id), &record(&f, &c));
        // Signed by someone else's key (the signature does not verify).
        let d = request(&f, 12);
        let other = TrustAnchor::new(&"d".repeat(20), 3, "default").unwrap();
        let ok = other.issue(Role::ClientCli, CLIENT, Some(SESSION)).unwrap();
        let k = SessionKey::parse(&ok.export().unwrap()).unwrap();
        f.put(
            &format!("{}.req", d.id),
            &mailbox::encode_request(&d, &k.sign(&mailbox::signed_part(&d)).unwrap()),
        );
        // A changed byte after signing.
        let mut e = request(&f, 13);
        let sig = f.key.sign(&mailbox::signed_part(&e)).unwrap();
        e.argv = vec!["rm".into()];
        f.put(&format!("{}.req", e.id), &mailbox::encode_request(&e, &sig));
        assert!(f.scan().is_empty());
        assert!(f.left().is_empty());
        let audit = f.audit();
        for why in [
            "file name does not match the request id",
            "no such session",
            "another Domain or generation",
        ] {
            assert!(audit.contains(why), "{why}: {audit}");
        }
        assert_eq!(audit.matches("rejected").count(), 5, "{audit}");
        // INVARIANT: no result for a record that failed verification.
        assert_eq!(f.results(), 0);
    }

    #[test]
    fn young_temporaries_are_bounded_by_bytes_not_only_by_age() {
        let mut f = fixture("bytes");
        // Over the record limit: gone on sight, young as it is.
        f.put(".tmp-big", &vec![0u8; escalation::MAX_REQUEST_BYTES + 1]);
        // Young and small: a writer's file in progress, kept.
        f.put(".tmp-small", b"partial");
        assert!(f.scan().is_empty());
        assert_eq!(f.left(), vec![".tmp-small".to_string()]);
        // Young files under the limit that add up to more than the cap: the
        // largest go until what is left is under it.
        let n = (REQUESTS_MAX_BYTES / escalation::MAX_REQUEST_BYTES as u64) as usize + 8;
        for i in 0..n {
            f.put(&format!(".tmp-{i}"), &vec![1u8; escalation::MAX_REQUEST_BYTES - i]);
        }
        assert!(f.scan().is_empty());
        let total: u64 = f
            .left()
            .iter()
            .map(|n| std::fs::metadata(f.broker.requests_dir().join(n)).unwrap().len())
            .sum();
        assert!(total <= REQUESTS_MAX_BYTES, "{total}");
        assert!(f.left().contains(&".tmp-small".to_string()), "the smallest stays");
        assert!(f.left().len() < n, "some went");
    }
}
