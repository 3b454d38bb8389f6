//! The escalation broker: the Host Coordinator's side of the Escalation
//! Mailbox. It treats every byte in the mailbox as hostile: bounded sizes,
//! no symlinks or special files, strict parsing, a signature by the
//! session's Trust Anchor certificate over the exact bytes, the identity
//! tuple checked against the registered session, replay rejection — and
//! one bad record never blocks the others.
//!
//! Accepted requests are auto-approved by an exact trusted rule (trailing
//! arguments only as the rule grants them: otherwise refused with one
//! line), or routed to the developer by the coordinator (which owns the
//! terminals); approved
//! ones run here on the host: argv only (no shell), cwd inside the
//! workspace, a fixed trusted environment, output captured with a limit,
//! a timeout, and the whole process group killed on cancel.
//!
//! This file holds the [`Broker`] (its mailbox directories, session
//! credential files, the audit log, working directories as handles and
//! the results it writes); `intake.rs` reads and checks the mailbox,
//! `run.rs` runs approved commands on the host; unit tests in `tests.rs`.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use crate::config::Escalation;
use crate::coordinator::CoordinatorError;
use crate::escalation::{self, Outcome, Request, Status};
use crate::sys;
use crate::trust::TrustAnchor;
use crate::wire::mailbox;

mod intake;
mod run;
#[cfg(test)]
mod tests;

pub use self::run::kill_recorded;
use self::run::HostRun;

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
    /// Each session's certificate once checked, by session id (only one
    /// equal to the session's own is kept), until the session ends.
    checked: HashMap<String, crate::trust::CheckedCert>,
    runs: HashMap<String, HostRun>,
    audit: File,
    /// More well-formed requests are waiting than one scan handled.
    pub backlog: bool,
    /// Started and ended host commands since the coordinator last looked.
    pub events: Vec<HostEvent>,
    /// Verified SSH agent messages since the coordinator last looked
    /// (issue 51: the coordinator decides them).
    pub agent: Vec<escalation::AgentRequest>,
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
            checked: HashMap::new(),
            runs: HashMap::new(),
            audit,
            backlog: false,
            events: Vec::new(),
            agent: Vec::new(),
        })
    }

    pub fn requests_dir(&self) -> &Path {
        &self.requests
    }

    /// From now on reads `requests/` through the supervisor's mount
    /// namespace (`/proc/PID/root`), where the supervisor mounted a tmpfs
    /// of [`REQUESTS_MAX_BYTES`](escalation::REQUESTS_MAX_BYTES) over it
    /// before runsc started: what the sandbox writes there (even to a file
    /// it keeps open after the broker deleted it) is bounded by the kernel,
    /// and it is gone with the namespace.
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
    pub fn remove_credential(&mut self, session: &str) {
        self.checked.remove(session);
        let _ = std::fs::remove_file(self.keys.join(session));
    }
    pub fn inotify_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.inotify)
    }

    pub(crate) fn audit(&mut self, line: String) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let _ = writeln!(self.audit, "time={now} {}", escalation::neutralize(&line));
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

    /// Answers an SSH agent message (`ResultMsg::AgentReply`).
    pub fn write_agent_reply(&self, id: &str, body: &[u8]) {
        self.write_file(id, &mailbox::encode_agent_reply(id, body));
    }

    fn write_result(&self, o: &Outcome) {
        self.write_file(&o.id, &mailbox::encode_result(o));
    }

    fn write_file(&self, id: &str, record: &[u8]) {
        let o_id = id;
        let tmp = self.results.join(format!(".tmp-{o_id}"));
        let fin = self.results.join(format!("{o_id}.res"));
        let ok = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(sys::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(record))
            .and_then(|()| std::fs::rename(&tmp, &fin));
        if let Err(e) = ok {
            log::warn!("escalation: cannot deliver result {o_id}: {e}");
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
