//! The mailbox intake: one scan of `requests/` (junk removed without
//! being opened, bounded counts and bytes), each record read, parsed and
//! bound to its session, then auto-approved by a rule or handed on for
//! the developer.

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Broker, SessionView};
use crate::escalation::{self, Request, Status};
use crate::sys;
use crate::trust::Role;
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

impl Broker {
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
            let seen = Instant::now();
            let path = self.requests.join(&name);
            let data = self.take(&path);
            // INVARIANT: the record is gone from the mailbox before it is
            // acted on, so nothing is processed twice.
            let _ = std::fs::remove_file(&path);
            let verdict = data.and_then(|d| self.accept(&name, &d, session));
            match verdict {
                Ok(Accepted::Agent(r)) => self.agent.push(r),
                Ok(Accepted::Command(req, _)) if !self.config.enabled => self.refuse(
                    &req,
                    Status::Denied,
                    "escalation of host commands is off for this profile ([escalation] enabled = false); nothing ran",
                ),
                Ok(Accepted::Command(req, client)) => {
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
                        AutoDecision::Refuse(why) => self.refuse(&req, Status::Denied, &why),
                        AutoDecision::Approve(rule, harden) => {
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
                            self.start_in(req, argv, why, dir, Some(seen));
                        }
                        AutoDecision::Ask if self.dirs.len() >= MAX_WAITING => self.refuse(
                            &req,
                            Status::Failed,
                            "too many requests are waiting for a decision; nothing ran",
                        ),
                        AutoDecision::Ask => {
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
    ) -> Result<Accepted, Rejection> {
        let (record, signed, sig) = mailbox::decode_record(data).map_err(Rejection::Record)?;
        // Both kinds carry the same header fields.
        macro_rules! header {
            ($r:expr) => {
                Header {
                    id: &$r.id,
                    domain: &$r.domain,
                    generation: $r.generation,
                    session: &$r.session,
                    client: &$r.client,
                    cert: &$r.cert,
                }
            };
        }
        let req = match &record {
            mailbox::Record::Command(r) => header!(r),
            mailbox::Record::Agent(r) => header!(r),
        };
        if name != format!("{}.req", req.id) {
            return Err(Rejection::NameMismatch);
        }
        if req.domain != self.anchor.domain || req.generation != self.anchor.generation {
            return Err(Rejection::OtherGeneration);
        }
        let view = session(req.session).ok_or(Rejection::NoSession)?;
        if view.client_id != *req.client {
            return Err(Rejection::ClientMismatch);
        }
        let expected = self.anchor.identity(Role::ClientCli, req.client, Some(req.session));
        // The session's certificate, once checked (issuer, identity), is
        // kept: a later request bearing exactly it, for the same identity,
        // costs one signature check. Anything else is checked in full.
        match self.checked.get(req.session) {
            Some(c) if c.is(req.cert, &expected) => c.verify(&signed, &sig).map_err(Rejection::Signature)?,
            _ => {
                let c = self
                    .anchor
                    .check_cert(req.cert, &expected)
                    .map_err(Rejection::Signature)?;
                c.verify(&signed, &sig).map_err(Rejection::Signature)?;
                // The Session Anchor: exactly the certificate issued at registration.
                if *req.cert != view.cert_der {
                    return Err(Rejection::ForeignCertificate);
                }
                self.checked.insert(req.session.to_string(), c);
            }
        }
        if !self.seen.insert(req.id.to_string()) {
            return Err(Rejection::Replayed);
        }
        Ok(match record {
            mailbox::Record::Command(r) => {
                let client = r.client.clone();
                Accepted::Command(r, client)
            }
            mailbox::Record::Agent(r) => Accepted::Agent(r),
        })
    }

    /// The first rule matching both the argv and the working directory
    /// `dir` (already resolved): the rule's own directory is resolved the
    /// same way now and must be the same directory (device and inode), so
    /// a symlink at the rule's path matches nothing. With its Git hardening.
    /// A rule whose command it is but whose trailing arguments it does not
    /// grant refuses the request (one line, `escalation::rule_match`), as
    /// does a rule whose program is a file of the workspace.
    fn auto_rule(&self, req: &Request, dir: &OwnedFd) -> AutoDecision {
        if !self.config.enabled {
            return AutoDecision::Ask;
        }
        let Ok(here) = sys::fd_identity(dir) else {
            return AutoDecision::Ask;
        };
        let mut refused = None;
        for (n, r) in self.config.auto_approve.iter().enumerate() {
            let m = escalation::rule_match(&r.argv, r.allow_trailing_args, &r.trailing_args, &req.argv);
            if m == escalation::RuleMatch::No {
                continue;
            }
            let same_dir = self
                .resolve_cwd(&r.cwd)
                .ok()
                .and_then(|d| sys::fd_identity(&d).ok())
                .is_some_and(|rc| rc == here);
            if !same_dir {
                continue;
            }
            if self.in_workspace(&r.argv[0]) {
                refused.get_or_insert(format!(
                    "rule {n}: its program {} is a file of the workspace, which the sandbox can write; nothing ran",
                    escalation::quote_argv(std::slice::from_ref(&r.argv[0]))
                ));
                continue;
            }
            match m {
                escalation::RuleMatch::Yes => return AutoDecision::Approve(n, r.harden_git),
                escalation::RuleMatch::Refused(why) => {
                    refused.get_or_insert(format!("rule {n}: {why}; nothing ran"));
                }
                escalation::RuleMatch::No => {}
            }
        }
        refused.map_or(AutoDecision::Ask, AutoDecision::Refuse)
    }

    /// Whether an absolute program path lies in the workspace, as written
    /// (`..` taken lexically) or once resolved on the host.
    fn in_workspace(&self, program: &str) -> bool {
        let p = Path::new(program);
        if !p.is_absolute() {
            return false;
        }
        let mut lexical = PathBuf::new();
        for c in p.components() {
            match c {
                Component::ParentDir => {
                    lexical.pop();
                }
                Component::CurDir => {}
                c => lexical.push(c),
            }
        }
        let ws = &self.workspace;
        let ws_real = std::fs::canonicalize(ws).unwrap_or_else(|_| ws.clone());
        let real = std::fs::canonicalize(p).ok();
        let inside = |q: &Path| q.starts_with(ws) || q.starts_with(&ws_real);
        inside(&lexical) || real.as_deref().is_some_and(inside)
    }
}

/// The identity fields every record has.
struct Header<'a> {
    id: &'a str,
    domain: &'a str,
    generation: u64,
    session: &'a str,
    client: &'a str,
    cert: &'a Vec<u8>,
}

/// A record that passed every check.
enum Accepted {
    /// A command request, and its client id.
    Command(Request, String),
    /// An SSH agent message, for the coordinator.
    Agent(crate::escalation::AgentRequest),
}

/// What the rules say about a request.
enum AutoDecision {
    /// Run it without asking: the rule's index and its Git hardening.
    Approve(usize, bool),
    /// Refuse it: one line.
    Refuse(String),
    /// No rule is about it: the developer decides.
    Ask,
}

/// A request file's name: `<32 lowercase hex>.req`.
fn well_formed_name(n: &str) -> bool {
    n.len() == 36 && n.ends_with(".req") && n[..32].bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
