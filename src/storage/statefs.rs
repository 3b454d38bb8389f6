//! Filesystem work on State Anchor uppers, done inside a user namespace.
//!
//! An upper holds entries the sandbox created, owned by the user or by the
//! user's subordinate ids (a guest `chown`), with any mode: a directory of
//! uid 42 with mode 0700 is closed to the host user. So walking, sizing and
//! deleting an upper run in `lazaret:[state-helper]`, a child that unshares
//! a user namespace which the parent maps with newuidmap/newgidmap:
//!
//! ```text
//! helper ns id 0                 ← the user's uid      (guest uid 0)
//! helper ns ids 100001..=165536  ← the subordinate range (guest uids 1..=65536)
//! ```
//!
//! The offset keeps the kernel's overflow id (65534, what an unmapped owner
//! looks like) apart from every mapped id, so a foreign owner is always
//! recognised. As root of that namespace the helper may read and delete
//! whatever the sandbox could have created, and nothing else.
//!
//! Every lookup is `openat`/`statat` relative to a directory fd with
//! `O_NOFOLLOW`/`AT_SYMLINK_NOFOLLOW`; a symlink is an entry, never a path.
//! Names come from `getdents`, never from the upper's contents.
//!
//! The helper reports in frames on its stdout (`wire::helper::HelperMsg`)
//! and takes `HelperCmd::Mapped` (with the operations) on its stdin.

use std::ffi::{CStr, CString};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use crate::plan;
use crate::storage::anchor::{self, Driver};
use crate::wire::helper::{HelperCmd, HelperMsg, HelperReceiver};

/// Helper namespace id of guest uid/gid 1.
pub const SUB_BASE: u32 = 100_001;
const MAX_DEPTH: usize = 200;

// ---- what the helper reports -----------------------------------------------------

pub use crate::wire::helper::{Entry, Finding, Kind, Op};

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Added => "added",
            Kind::Modified => "modified",
            Kind::Deleted => "deleted",
            Kind::Opaque => "opaque",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Report {
    pub entries: Vec<Entry>,
    pub findings: Vec<Finding>,
    /// Per key (or trash name): (entries, bytes).
    pub sizes: Vec<(String, u64, u64)>,
    pub removed: Vec<(String, Result<(), String>)>,
}

impl Report {
    /// The (entries, bytes) the helper measured for `name`; (0, 0) when
    /// it did not.
    pub fn size_of(&self, name: &str) -> (u64, u64) {
        self.sizes
            .iter()
            .find(|(n, _, _)| n == name)
            .map_or((0, 0), |s| (s.1, s.2))
    }
}

/// One `Size` op per name in the anchor (a key's upper plus its workdir,
/// or a trash tree).
pub fn anchor_sizes(names: &[String]) -> Vec<Op> {
    names
        .iter()
        .map(|k| Op::Size {
            name: k.clone(),
            in_root: false,
        })
        .collect()
}

/// The `Size` op for an entry of the Domain Root itself.
pub fn root_size(name: &str) -> Op {
    Op::Size {
        name: name.into(),
        in_root: true,
    }
}

/// Gathers the helper's report (`wire::helper::HelperMsg`).
pub fn collect_report(msgs: Vec<HelperMsg>) -> Report {
    let mut r = Report::default();
    for m in msgs {
        match m {
            HelperMsg::Entry(e) => r.entries.push(e),
            HelperMsg::Finding(f) => r.findings.push(f),
            HelperMsg::Size { key, entries, bytes } => r.sizes.push((key, entries, bytes)),
            HelperMsg::Removed { name, error } => r.removed.push((name, error.map_or(Ok(()), Err))),
            HelperMsg::Userns | HelperMsg::NoUserns | HelperMsg::Failed { .. } => {}
        }
    }
    r
}

// ---- the parent's side -----------------------------------------------------------

/// Why the state helper did not run or report: a variant per step.
#[derive(Debug)]
pub enum StateHelperError {
    /// `current_exe` (to start ourselves as the helper).
    LocateExe(io::Error),
    Spawn(io::Error),
    /// The helper's user namespace (what it said instead).
    NoUserns(crate::wire::helper::UsernsError),
    /// Its id maps.
    IdMap(crate::plan::IdMapError),
    Wait(io::Error),
    /// The helper exited unsuccessfully or said it failed.
    Failed(std::process::ExitStatus, Option<String>),
    /// Its report does not decode (fail closed).
    Report(crate::wire::ReadError),
}

impl std::fmt::Display for StateHelperError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use StateHelperError::*;
        match self {
            LocateExe(e) => write!(f, "cannot locate lazaret: {e}"),
            Spawn(e) => write!(f, "cannot start the state helper: {e}"),
            NoUserns(said) => write!(
                f,
                "the state helper could not create a user namespace ({said}): run `lazaret doctor`"
            ),
            IdMap(e) => write!(f, "{e}"),
            Wait(e) => write!(f, "state helper: {e}"),
            Failed(st, said) => write!(
                f,
                "the state helper failed ({st}){}",
                said.as_ref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
            Report(e) => write!(f, "the state helper's report is unreadable: {e}"),
        }
    }
}

impl std::error::Error for StateHelperError {}

/// Runs `ops` in a fresh state helper and returns what it reported.
pub fn run_helper(domain_root: &Path, lower_rootfs: Option<&Path>, ops: &[Op]) -> Result<Report, StateHelperError> {
    if ops.is_empty() {
        return Ok(Report::default());
    }
    let exe = std::env::current_exe().map_err(StateHelperError::LocateExe)?;
    let mut cmd = Command::new(exe);
    std::os::unix::process::CommandExt::arg0(&mut cmd, "lazaret:[state-helper]");
    cmd.arg("__state-helper").arg("--root").arg(domain_root);
    if let Some(l) = lower_rootfs {
        cmd.arg("--lower").arg(l);
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    crate::sys::kill_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(StateHelperError::Spawn)?;
    let mut stdin = child.stdin.take().unwrap();
    let mut out = HelperReceiver::new(child.stdout.take().unwrap());
    if let Err(said) = out.wait_for_userns() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(StateHelperError::NoUserns(said));
    }
    if let Err(e) = write_helper_maps(child.id() as i32) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    // A helper that died here is reported by its status below, not by a
    // SIGPIPE that would end `rm` or `state reset` without a word.
    let _ =
        crate::sys::without_sigpipe(|| crate::wire::codec::send(&mut stdin, &HelperCmd::Mapped { ops: ops.to_vec() }));
    drop(stdin);
    let report = out.wait_for_report();
    let st = child.wait().map_err(StateHelperError::Wait)?;
    let failed = report.as_ref().ok().and_then(|msgs| {
        msgs.iter().find_map(|m| match m {
            HelperMsg::Failed { message } => Some(message.clone()),
            _ => None,
        })
    });
    if !st.success() || failed.is_some() {
        return Err(StateHelperError::Failed(st, failed));
    }
    // Fail closed: a report that does not decode is no report.
    let msgs = report.map_err(StateHelperError::Report)?;
    Ok(collect_report(msgs))
}

/// Sets `DOMAIN_ROOT/NAME` aside: a tree the sandbox may have shaped (any
/// owner among the subordinate ids, any mode, any depth) is renamed into
/// the anchor's trash (`anchor/.trash-NAME-NONCE`), a rename of a
/// directory Lazaret made, within the Domain Root, which host rights
/// always allow. Its contents are deleted only by the state helper
/// ([`empty_trash`]). Returns the trash name, `None` when `NAME` is absent.
pub fn set_aside(domain_root: &Path, name: &str) -> io::Result<Option<String>> {
    let from = domain_root.join(name);
    if std::fs::symlink_metadata(&from).is_err() {
        return Ok(None);
    }
    let anchor = anchor::anchor_dir(domain_root);
    crate::storage::paths::ensure_private_dir(&anchor).map_err(|e| io::Error::other(e.to_string()))?;
    let trash = format!("{}{name}-{}", anchor::TRASH_PREFIX, crate::domain::random_id(4));
    std::fs::rename(&from, anchor.join(&trash))?;
    Ok(Some(trash))
}

/// Deletes every trash tree of the anchor inside the state helper (as
/// root of a user namespace mapped like the Domain's, so whatever the
/// sandbox created can go, and nothing else). Returns what stayed, as
/// `name: why`; what stays is listed by `lazaret state list` and retried
/// by the next start, `state reset|verify` and `rm`.
pub fn empty_trash(domain_root: &Path) -> Result<Vec<String>, StateHelperError> {
    let ops: Vec<Op> = crate::storage::anchor::trash_on_disk(domain_root)
        .into_iter()
        .map(|name| Op::Remove { name })
        .collect();
    let r = run_helper(domain_root, None, &ops)?;
    Ok(r.removed
        .into_iter()
        .filter_map(|(n, res)| res.err().map(|e| format!("{n}: {e}")))
        .collect())
}

/// [`empty_trash`] on a thread of its own, for a start: the state helper
/// (a process in a user namespace, about 5 ms) runs while the sandbox
/// boots instead of before it. What stays is logged as a warning, as the
/// start did when it waited. Joined when dropped (the coordinator drops it
/// at teardown or a failed start, while it still holds the Domain lock), so
/// no helper of ours is still deleting when `rm` or the next start may run
/// their own.
pub struct TrashRemoval(Option<std::thread::JoinHandle<()>>);

impl TrashRemoval {
    pub fn start(domain_root: &Path) -> TrashRemoval {
        let root = domain_root.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("lz-trash".into())
            .spawn(move || match empty_trash(&root) {
                Ok(left) if left.is_empty() => {}
                Ok(left) => log::warn!(
                    "leftovers of an earlier session stay set aside ({}): see `lazaret state list`",
                    left.join("; ")
                ),
                Err(e) => log::warn!("leftovers of an earlier session stay set aside ({e}): see `lazaret state list`"),
            });
        match handle {
            Ok(h) => TrashRemoval(Some(h)),
            Err(e) => {
                // No thread: the trash stays set aside for the next start,
                // `state reset` or `rm` (all retry it).
                log::warn!("leftovers of an earlier session stay set aside (no thread to remove them: {e})");
                TrashRemoval(None)
            }
        }
    }

    /// Waits for the removal to end.
    pub fn join(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

impl Drop for TrashRemoval {
    fn drop(&mut self) {
        self.join();
    }
}

fn write_helper_maps(pid: i32) -> Result<(), StateHelperError> {
    plan::write_id_maps(pid, SUB_BASE).map_err(StateHelperError::IdMap)
}

// ---- the helper ----------------------------------------------------------------------

/// `lazaret __state-helper --root DR [--lower ROOTFS]`; the operations
/// arrive with `HelperCmd::Mapped`.
pub fn helper_main(raw: Vec<std::ffi::OsString>) -> i32 {
    crate::sys::set_thread_name("lz-state-helper");
    let mut args: Vec<String> = raw.into_iter().map(|a| a.to_string_lossy().to_string()).collect();
    let mut take = |flag: &str| -> Option<String> {
        let i = args.iter().position(|a| a == flag)?;
        let v = args.get(i + 1)?.clone();
        args.drain(i..=i + 1);
        Some(v)
    };
    let Some(root) = take("--root") else {
        let _ = crate::wire::codec::send(
            &mut io::stdout(),
            &HelperMsg::Failed {
                message: "missing --root".into(),
            },
        );
        return 2;
    };
    let lower = take("--lower");
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if crate::sys::unshare(crate::sys::CLONE_NEWUSER).is_err() {
        let _ = crate::wire::codec::send(&mut out, &HelperMsg::NoUserns);
        return 1;
    }
    let _ = crate::wire::codec::send(&mut out, &HelperMsg::Userns);
    let _ = out.flush();
    let Some(ops) = crate::wire::helper::wait_for_mapped(&mut io::stdin()) else {
        return 1;
    };
    let fail = |out: &mut io::StdoutLock, message: String| {
        let _ = crate::wire::codec::send(out, &HelperMsg::Failed { message });
        1
    };
    if let Err(e) = crate::sys::become_ns_root() {
        return fail(&mut out, format!("setresuid: {e}"));
    }
    let dirflags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root_fd = match rustix::fs::open(root.as_str(), dirflags, Mode::empty()) {
        Ok(f) => f,
        Err(e) => return fail(&mut out, format!("{root}: {e}")),
    };
    let root_dev = match rustix::fs::fstat(&root_fd) {
        Ok(s) => s.st_dev,
        Err(e) => return fail(&mut out, format!("{root}: {e}")),
    };
    let anchor_fd = rustix::fs::openat(&root_fd, anchor::ANCHOR_DIR, dirflags, Mode::empty()).ok();
    let lower_fd = lower
        .as_deref()
        .and_then(|l| rustix::fs::open(l, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok());
    if let Some(extra) = args.first() {
        return fail(&mut out, format!("unexpected argument {extra:?}"));
    }
    for op in ops {
        let name = match &op {
            Op::Walk { key, .. } => key.clone(),
            Op::Size { name, .. } | Op::Remove { name } => name.clone(),
        };
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return fail(&mut out, format!("bad name {name:?}"));
        }
        match op {
            Op::Walk { driver, .. } => {
                let Some(a) = &anchor_fd else { continue };
                let Some(guest) = anchor::key_path(&name) else {
                    return fail(&mut out, format!("bad key {name:?}"));
                };
                let mut w = Walker {
                    out: &mut out,
                    key: name.clone(),
                    driver,
                    dev: root_dev,
                    entries: 0,
                    bytes: 0,
                };
                let upper = rustix::fs::openat(a, name.as_str(), dirflags, Mode::empty())
                    .and_then(|k| rustix::fs::openat(&k, "upper", dirflags, Mode::empty()));
                match upper {
                    Ok(u) => {
                        let lower_dir = lower_fd.as_ref().and_then(|l| open_path_nofollow(l, &guest));
                        w.walk(u, lower_dir);
                        let (entries, bytes) = (w.entries, w.bytes);
                        size(&mut out, name, entries, bytes);
                    }
                    Err(rustix::io::Errno::NOENT) => size(&mut out, name, 0, 0),
                    Err(e) => {
                        w.finding(
                            "error",
                            "",
                            &format!("the upper cannot be opened without following a link: {e}"),
                        );
                    }
                }
            }
            Op::Size { in_root, .. } => {
                let base = if !in_root { anchor_fd.as_ref() } else { Some(&root_fd) };
                let (n, b) = match base.and_then(|d| rustix::fs::openat(d, name.as_str(), dirflags, Mode::empty()).ok())
                {
                    Some(fd) => tree_size(fd, 0),
                    None => (0, 0),
                };
                size(&mut out, name, n, b);
            }
            Op::Remove { .. } => {
                if !name.starts_with(anchor::TRASH_PREFIX) {
                    return fail(&mut out, format!("refusing to remove {name:?}: not a trash directory"));
                }
                let res = match &anchor_fd {
                    Some(a) => remove_tree_at(a, &name),
                    None => Ok(()),
                };
                let _ = crate::wire::codec::send(
                    &mut out,
                    &HelperMsg::Removed {
                        name,
                        error: res.err().map(|e| e.to_string()),
                    },
                );
            }
        }
    }
    0
}

fn size(out: &mut io::StdoutLock, key: String, entries: u64, bytes: u64) {
    let _ = crate::wire::codec::send(out, &HelperMsg::Size { key, entries, bytes });
}

fn open_path_nofollow(base: &OwnedFd, guest: &str) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::io::dup(base).ok()?;
    for c in guest.trim_start_matches('/').split('/') {
        fd = rustix::fs::openat(&fd, c, flags, Mode::empty()).ok()?;
    }
    Some(fd)
}

/// fuse-overlayfs marks an opaque directory with `.wh..wh..opq` (and may
/// add a `.wh..opq` whiteout next to it).
fn is_fuse_opaque_marker(name: &[u8]) -> bool {
    name == b".wh..wh..opq" || name == b".wh..opq"
}

fn ftype_name(ft: FileType, rdev: u64) -> &'static str {
    match ft {
        FileType::RegularFile => "file",
        FileType::Directory => "dir",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice if rdev == 0 => "whiteout",
        _ => "other",
    }
}

fn guest_id(ns: u32) -> Option<u32> {
    if ns == 0 {
        Some(0)
    } else if (SUB_BASE..SUB_BASE + 65536).contains(&ns) {
        Some(ns - SUB_BASE + 1)
    } else {
        None
    }
}

fn list_dir(fd: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut d = rustix::fs::Dir::read_from(fd)?;
    let mut names = Vec::new();
    while let Some(e) = d.read() {
        let e = e?;
        let n = e.file_name();
        if n.to_bytes() == b"." || n.to_bytes() == b".." {
            continue;
        }
        names.push(n.to_owned());
    }
    names.sort();
    Ok(names)
}

/// xattr names and values of `name` in `dir`, without following it: via
/// the `/proc/self/fd` entry of the directory, final component not
/// followed (`l*xattr`).
fn xattrs(dir: &OwnedFd, name: &CStr) -> Vec<(String, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let mut raw_path = format!("/proc/self/fd/{}/", dir.as_fd().as_raw_fd()).into_bytes();
    raw_path.extend_from_slice(name.to_bytes());
    let path = std::ffi::OsStr::from_bytes(&raw_path);
    let mut buf = vec![0u8; 65536];
    let n = match rustix::fs::llistxattr(path, &mut buf) {
        Ok(n) => n,
        Err(_) => return Vec::new(),
    };
    let raw = &buf[..n];
    let mut out = Vec::new();
    for k in raw.split(|&b| b == 0).filter(|k| !k.is_empty()) {
        let k = String::from_utf8_lossy(k).to_string();
        let mut v = vec![0u8; 4096];
        let len = rustix::fs::lgetxattr(path, k.as_str(), &mut v).unwrap_or(0);
        v.truncate(len);
        out.push((k, v));
    }
    out
}

struct Walker<'a, 'b> {
    out: &'a mut io::StdoutLock<'b>,
    key: String,
    driver: Driver,
    dev: u64,
    entries: u64,
    bytes: u64,
}

const OVL_KNOWN: &[&str] = &[
    "opaque", "origin", "impure", "nlink", "upper", "uuid", "protattr", "whiteout",
];

impl Walker<'_, '_> {
    fn finding(&mut self, level: &str, path: &str, msg: &str) {
        let f = Finding {
            key: self.key.clone(),
            level: level.into(),
            path: path.into(),
            message: msg.into(),
        };
        let _ = crate::wire::codec::send(self.out, &HelperMsg::Finding(f));
    }

    fn entry(&mut self, kind: Kind, ft: &str, st: &Stat, path: &str) {
        let e = Entry {
            key: self.key.clone(),
            kind,
            ftype: ft.into(),
            mode: st.st_mode & 0o7777,
            uid: guest_id(st.st_uid),
            gid: guest_id(st.st_gid),
            size: st.st_size as u64,
            path: path.into(),
        };
        let _ = crate::wire::codec::send(self.out, &HelperMsg::Entry(e));
    }

    /// Checks one entry's metadata; returns whether its xattrs mark an
    /// opaque directory, and whether they mark an xattr whiteout.
    fn check(&mut self, dir: &OwnedFd, name: &CStr, st: &Stat, path: &str) -> (bool, bool) {
        let ft = FileType::from_raw_mode(st.st_mode);
        if guest_id(st.st_uid).is_none() || guest_id(st.st_gid).is_none() {
            self.finding(
                "error",
                path,
                "owned by an id outside your user and subordinate ranges (not created by the sandbox)",
            );
        }
        if st.st_dev != self.dev {
            self.finding(
                "error",
                path,
                "on another filesystem than the Domain Root (a mount inside the upper)",
            );
        }
        match ft {
            FileType::CharacterDevice if st.st_rdev != 0 => {
                self.finding("error", path, "a device node that is not a whiteout (not 0:0)")
            }
            FileType::BlockDevice => self.finding("error", path, "a block device"),
            _ => {}
        }
        let mut opaque = false;
        let mut xwhiteout = false;
        if ft == FileType::Symlink {
            return (false, false);
        }
        let prefix = match self.driver {
            Driver::Kernel => "user.overlay.",
            Driver::Fuse => "user.fuseoverlayfs.",
        };
        for (k, v) in xattrs(dir, name) {
            let Some(sub) = k
                .strip_prefix("user.overlay.")
                .or_else(|| k.strip_prefix("user.fuseoverlayfs."))
            else {
                continue;
            };
            if !k.starts_with(prefix) {
                self.finding("warning", path, &format!("overlay xattr {k} of the other driver"));
                continue;
            }
            match sub {
                "opaque" => {
                    if ft != FileType::Directory {
                        self.finding("error", path, &format!("{k} on something that is not a directory"));
                    } else if v == b"y" || v == b"x" {
                        opaque = v == b"y";
                    } else {
                        self.finding(
                            "error",
                            path,
                            &format!("{k} has the malformed value {:?}", String::from_utf8_lossy(&v)),
                        );
                    }
                }
                "whiteout" => {
                    if ft != FileType::RegularFile || st.st_size != 0 {
                        self.finding("error", path, &format!("{k} on something that is not an empty file"));
                    } else {
                        xwhiteout = true;
                    }
                }
                s if OVL_KNOWN.contains(&s) => {}
                _ => self.finding(
                    "error",
                    path,
                    &format!("unexpected overlay xattr {k} (Lazaret never enables redirects or metacopy)"),
                ),
            }
        }
        (opaque, xwhiteout)
    }

    /// Depth-first walk of an upper directory with the matching lower
    /// directory, if any.
    fn walk(&mut self, upper: OwnedFd, lower: Option<OwnedFd>) {
        let mut stack: Vec<(OwnedFd, Option<OwnedFd>, String, usize)> = vec![(upper, lower, String::new(), 0)];
        while let Some((dir, lower, prefix, depth)) = stack.pop() {
            let names = match list_dir(&dir) {
                Ok(n) => n,
                Err(e) => {
                    self.finding("error", &prefix, &format!("cannot list: {e}"));
                    continue;
                }
            };
            let fuse_opq = self.driver == Driver::Fuse && names.iter().any(|n| is_fuse_opaque_marker(n.to_bytes()));
            let lower = if fuse_opq { None } else { lower };
            for name in names {
                let nm = name.to_string_lossy().to_string();
                let path = if prefix.is_empty() {
                    nm.clone()
                } else {
                    format!("{prefix}/{nm}")
                };
                let st = match rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(s) => s,
                    Err(e) => {
                        self.finding("error", &path, &format!("cannot stat: {e}"));
                        continue;
                    }
                };
                self.entries += 1;
                self.bytes += st.st_blocks as u64 * 512;
                let ft = FileType::from_raw_mode(st.st_mode);
                let (opaque, xwhiteout) = self.check(&dir, &name, &st, &path);
                let fuse_whiteout_shape = (ft == FileType::RegularFile && st.st_size == 0)
                    || (ft == FileType::CharacterDevice && st.st_rdev == 0);
                if self.driver == Driver::Fuse && is_fuse_opaque_marker(nm.as_bytes()) {
                    if !fuse_whiteout_shape {
                        self.finding(
                            "error",
                            &path,
                            "an opaque marker that is not an empty file or a 0:0 device",
                        );
                    }
                    continue;
                }
                if self.driver == Driver::Fuse && nm.starts_with(".wh.") {
                    if !fuse_whiteout_shape {
                        self.finding(
                            "error",
                            &path,
                            "a .wh. whiteout that is not an empty file or a 0:0 device",
                        );
                    }
                    let target = if prefix.is_empty() {
                        nm[4..].to_string()
                    } else {
                        format!("{prefix}/{}", &nm[4..])
                    };
                    self.entry(Kind::Deleted, "whiteout", &st, &target);
                    continue;
                }
                if (ft == FileType::CharacterDevice && st.st_rdev == 0) || xwhiteout {
                    self.entry(Kind::Deleted, "whiteout", &st, &path);
                    continue;
                }
                let lst = lower
                    .as_ref()
                    .and_then(|l| rustix::fs::statat(l, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).ok());
                let ftn = ftype_name(ft, st.st_rdev);
                if ft == FileType::Directory {
                    let in_lower_dir = lst
                        .as_ref()
                        .is_some_and(|l| FileType::from_raw_mode(l.st_mode) == FileType::Directory);
                    if opaque && in_lower_dir {
                        self.entry(Kind::Opaque, ftn, &st, &path);
                    } else if lst.is_none() {
                        self.entry(Kind::Added, ftn, &st, &path);
                    } else if !in_lower_dir || lst.as_ref().is_some_and(|l| (l.st_mode ^ st.st_mode) & 0o7777 != 0) {
                        self.entry(Kind::Modified, ftn, &st, &path);
                    }
                    if depth + 1 > MAX_DEPTH {
                        self.finding(
                            "warning",
                            &path,
                            &format!("deeper than {MAX_DEPTH} levels: not inspected below"),
                        );
                        continue;
                    }
                    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                    match rustix::fs::openat(&dir, name.as_c_str(), flags, Mode::empty()) {
                        Ok(sub) => {
                            let sub_lower = if opaque || !in_lower_dir {
                                None
                            } else {
                                lower
                                    .as_ref()
                                    .and_then(|l| rustix::fs::openat(l, name.as_c_str(), flags, Mode::empty()).ok())
                            };
                            stack.push((sub, sub_lower, path, depth + 1));
                        }
                        Err(e) => self.finding("error", &path, &format!("cannot open: {e}")),
                    }
                } else {
                    let kind = if lst.is_some() { Kind::Modified } else { Kind::Added };
                    self.entry(kind, ftn, &st, &path);
                }
            }
        }
    }
}

fn tree_size(fd: OwnedFd, depth: usize) -> (u64, u64) {
    let (mut n, mut b) = (0u64, 0u64);
    let Ok(names) = list_dir(&fd) else { return (0, 0) };
    for name in names {
        let Ok(st) = rustix::fs::statat(&fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        n += 1;
        b += st.st_blocks as u64 * 512;
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory && depth < MAX_DEPTH {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(sub) = rustix::fs::openat(&fd, name.as_c_str(), flags, Mode::empty()) {
                let (sn, sb) = tree_size(sub, depth + 1);
                n += sn;
                b += sb;
            }
        }
    }
    (n, b)
}

/// A trash tree that could not be removed (its name, the errno).
#[derive(Debug)]
pub enum RemoveError {
    /// Opening or unlinking it.
    Unlink(String, rustix::io::Errno),
    /// Emptying it.
    Empty(String, io::Error),
}

impl std::fmt::Display for RemoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            RemoveError::Unlink(name, e) => write!(f, "{name}: {e}"),
            RemoveError::Empty(name, e) => write!(f, "{name}: {e}"),
        }
    }
}

/// Deletes `parent/name` and everything below it without following any
/// symlink. Directories deeper than the fd budget are first moved up to
/// the top of the tree, so any depth can be removed.
fn remove_tree_at(parent: &OwnedFd, name: &str) -> Result<(), RemoveError> {
    let err = |e: rustix::io::Errno| RemoveError::Unlink(name.to_string(), e);
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let top = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(f) => f,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(rustix::io::Errno::NOTDIR) | Err(rustix::io::Errno::LOOP) => {
            return rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(err)
        }
        Err(e) => return Err(err(e)),
    };
    let mut moved = 0u64;
    loop {
        // Deep directories move to the top on each pass; repeat until empty.
        match empty_dir(&top, &top, 0, &mut moved) {
            Ok(true) => break,
            Ok(false) => continue,
            Err(e) => return Err(RemoveError::Empty(name.to_string(), e)),
        }
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).map_err(err)
}

/// Removes what it can below `dir`; returns true once `dir` is empty.
fn empty_dir(top: &OwnedFd, dir: &OwnedFd, depth: usize, moved: &mut u64) -> io::Result<bool> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let names = list_dir(dir)?;
    let mut empty = true;
    for name in names {
        let st = match rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => s,
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::empty())?;
            // Crash tests: die with the old upper half deleted.
            anchor::fault_point("reset-step-5");
            continue;
        }
        if depth >= MAX_DEPTH {
            // Move the deep directory to the top and come back for it.
            *moved += 1;
            let new = format!(".deep-{moved}");
            rustix::fs::renameat(dir, name.as_c_str(), top, new.as_str())?;
            empty = false;
            continue;
        }
        let sub = rustix::fs::openat(dir, name.as_c_str(), flags, Mode::empty())?;
        if empty_dir(top, &sub, depth + 1, moved)? {
            rustix::fs::unlinkat(dir, name.as_c_str(), AtFlags::REMOVEDIR)?;
        } else {
            empty = false;
        }
    }
    Ok(empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display::{fit, human_size};

    #[test]
    fn report_frames_collect_with_odd_names() {
        use crate::wire::helper::tests::samples;
        let r = collect_report(samples());
        assert_eq!(r.entries.len(), 1);
        assert_eq!(r.entries[0].path, "local/bin/a\tb\nc\\d");
        assert_eq!(r.entries[0].uid, Some(0));
        assert_eq!(r.entries[0].gid, None);
        assert_eq!(r.entries[0].mode, 0o4755);
        assert_eq!(r.findings[0].message, "bad thing");
        assert_eq!(r.sizes, vec![("usr".to_string(), 3, 4096)]);
        assert_eq!(r.removed[0].1, Ok(()));
        assert_eq!(r.removed[1].1, Err("EBUSY".to_string()));
    }

    #[test]
    fn guest_ids_keep_overflow_apart() {
        assert_eq!(guest_id(0), Some(0));
        assert_eq!(guest_id(SUB_BASE), Some(1));
        assert_eq!(guest_id(SUB_BASE + 65535), Some(65536));
        assert_eq!(guest_id(65534), None, "the kernel's overflow id is never mapped");
        assert_eq!(guest_id(1), None);
    }

    #[test]
    fn sizes_and_fitting() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(2048), "2.0 KiB");
        assert_eq!(human_size(50 << 20), "50 MiB");
        assert_eq!(fit("/usr/local/bin/tool", 80), "/usr/local/bin/tool");
        let f = fit(&"a".repeat(100), 20);
        assert_eq!(f.chars().count(), 20);
        assert!(f.contains('…'));
    }
}
