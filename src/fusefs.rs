//! The workspace view: a filtering passthrough FUSE filesystem served by the
//! Runtime Supervisor and bound into the sandbox at `/workspace` (and, for a
//! linked worktree, at the common Git directory's own path).
//!
//! It does two jobs no bind layout can (PLATFORM §5, §7):
//! - **Git Sentry** (SR-4): every create, write, truncate, chmod, rename,
//!   unlink, link and symlink is checked against `gitsentry::Sentry` and
//!   refused with EPERM when it would touch a protected Git path. This also
//!   stops *creating* `.git/commondir`, which a read-only bind cannot.
//! - **Ignored Workspace State** (SR-13): paths the snapshot of ignore rules
//!   (`ignored::IgnoreRules`) matches resolve into the Domain's ignored store
//!   instead of the host workspace, including paths created during the
//!   session. No mount point is ever created in the host workspace.
//!
//! Host access is path based from two directory fds (workspace, store), with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` so a concurrently swapped
//! symlink can never lead outside either tree. The node id of a file is its
//! host inode number (so Git's index stat data matches the host's), tagged
//! in the top bits for the store side. Threads: `fuser`'s event loops, two.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow,
};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

use crate::gitsentry::Sentry;
use crate::ignored::IgnoreRules;

/// How long the kernel may cache entries and attributes. Host-side edits
/// become visible in the sandbox within this time.
const TTL: Duration = Duration::from_secs(1);
const STORE_BIT: u64 = 1 << 62;
const FOREIGN_BIT: u64 = 1 << 61;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    Host,
    Store,
}

struct Node {
    side: Side,
    rel: PathBuf,
    /// Removed or overwritten: path operations fail, open handles work.
    gone: bool,
    /// Ever seen at a protected path (sticks across hard links).
    protected: bool,
    lookups: u64,
}

enum Handle {
    File(Arc<File>),
    Dir(Arc<Vec<(u64, FileType, OsString)>>),
}

struct Tables {
    nodes: HashMap<u64, Node>,
    /// Live nodes by (side, view path). A node id is never reused, and a
    /// path gets a new id once its node is gone (removed, overwritten), so
    /// the kernel and gVisor never see one id for two different files.
    by_key: HashMap<(Side, PathBuf), u64>,
    next_id: u64,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
}

/// One view: a host tree, its policy, and (for the workspace) the ignored
/// store and rules.
pub struct View {
    host: OwnedFd,
    store: Option<(OwnedFd, u64)>,
    rules: Option<IgnoreRules>,
    sentry: Sentry,
    t: Mutex<Tables>,
}

fn errno(e: impl Into<io::Error>) -> Errno {
    Errno::from(e.into())
}

fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn open_root(p: &Path) -> io::Result<(OwnedFd, u64)> {
    let fd = rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    Ok((fd, st.st_dev))
}

fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs())
    }
}

fn attr(ino: u64, st: &rustix::fs::Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime as i64, st.st_atime_nsec as i64),
        mtime: time(st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: time(st.st_ctime as i64, st.st_ctime_nsec as i64),
        crtime: UNIX_EPOCH,
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn is_dir(st: &rustix::fs::Stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

fn split(rel: &Path) -> (&Path, &OsStr) {
    (
        rel.parent().unwrap_or(Path::new("")),
        rel.file_name().unwrap_or(OsStr::new("")),
    )
}

impl View {
    /// A view of `host`. `store` is the ignored store (created if missing)
    /// with its rules; None shows ignored paths from the host.
    pub fn new(host: &Path, store: Option<(&Path, IgnoreRules)>, sentry: Sentry) -> io::Result<View> {
        let (host_fd, _) = open_root(host)?;
        let (store, rules) = match store {
            Some((dir, rules)) => {
                std::fs::create_dir_all(dir)?;
                (Some(open_root(dir)?), Some(rules))
            }
            None => (None, None),
        };
        let mut nodes = HashMap::new();
        nodes.insert(
            1,
            Node {
                side: Side::Host,
                rel: PathBuf::new(),
                gone: false,
                protected: false,
                lookups: 1,
            },
        );
        Ok(View {
            host: host_fd,
            store,
            rules,
            sentry,
            t: Mutex::new(Tables {
                nodes,
                by_key: HashMap::new(),
                next_id: 2,
                handles: HashMap::new(),
                next_fh: 1,
            }),
        })
    }

    fn root(&self, side: Side) -> Result<BorrowedFd<'_>, Errno> {
        match side {
            Side::Host => Ok(self.host.as_fd()),
            Side::Store => self.store.as_ref().map(|(f, _)| f.as_fd()).ok_or(Errno::EIO),
        }
    }

    /// An O_PATH fd of directory `rel` on `side`, never through a symlink.
    fn dir(&self, side: Side, rel: &Path) -> Result<OwnedFd, Errno> {
        let root = self.root(side)?;
        let p = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        rustix::fs::openat2(
            root,
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )
        .map_err(errno)
    }

    fn stat(&self, side: Side, rel: &Path) -> Result<rustix::fs::Stat, Errno> {
        if rel.as_os_str().is_empty() {
            return rustix::fs::fstat(self.root(side)?).map_err(errno);
        }
        let (parent, name) = split(rel);
        let d = self.dir(side, parent)?;
        rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
    }

    /// The node id of the entry at `rel`, if the kernel knows it.
    fn known(&self, side: Side, rel: &Path) -> Option<u64> {
        self.t.lock().unwrap().by_key.get(&(side, rel.to_path_buf())).copied()
    }

    fn node(&self, ino: INodeNo) -> Result<(Side, PathBuf, bool), Errno> {
        let t = self.t.lock().unwrap();
        let n = t.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
        if n.gone {
            return Err(Errno::ENOENT);
        }
        Ok((n.side, n.rel.clone(), n.protected || self.sentry.is_protected(&n.rel)))
    }

    /// Registers one kernel lookup of the entry at `rel` and returns its
    /// attributes under its node id.
    fn remember(&self, side: Side, rel: &Path) -> Result<FileAttr, Errno> {
        let st = self.stat(side, rel)?;
        let protected = self.sentry.is_protected(rel);
        let key = (side, rel.to_path_buf());
        let mut t = self.t.lock().unwrap();
        let id = match t.by_key.get(&key) {
            Some(&id) => id,
            None => {
                let id = t.next_id;
                t.next_id += 1;
                t.by_key.insert(key, id);
                t.nodes.insert(
                    id,
                    Node {
                        side,
                        rel: rel.to_path_buf(),
                        gone: false,
                        protected: false,
                        lookups: 0,
                    },
                );
                id
            }
        };
        let n = t.nodes.get_mut(&id).expect("node of a known key");
        n.protected |= protected;
        n.lookups += 1;
        Ok(attr(id, &st))
    }

    fn ignored(&self, rel: &Path, dir: bool) -> bool {
        self.rules.as_ref().is_some_and(|r| r.is_ignored(rel, dir))
    }

    /// Where a child of a directory on `parent_side` lives when created.
    fn target_side(&self, parent_side: Side, rel: &Path, dir: bool) -> Side {
        if parent_side == Side::Store || self.ignored(rel, dir) {
            Side::Store
        } else {
            Side::Host
        }
    }

    /// Finds an existing child: the store's entry for an ignored path, else
    /// the host's unless ignored.
    fn find(&self, parent_side: Side, rel: &Path) -> Result<(Side, rustix::fs::Stat), Errno> {
        if parent_side == Side::Store {
            return Ok((Side::Store, self.stat(Side::Store, rel)?));
        }
        let Some(rules) = &self.rules else {
            return Ok((Side::Host, self.stat(Side::Host, rel)?));
        };
        let maybe = rules.is_ignored(rel, false) || rules.is_ignored(rel, true);
        if maybe {
            if let Ok(st) = self.stat(Side::Store, rel) {
                if rules.is_ignored(rel, is_dir(&st)) {
                    return Ok((Side::Store, st));
                }
            }
        }
        let st = self.stat(Side::Host, rel)?;
        if maybe && rules.is_ignored(rel, is_dir(&st)) {
            return Err(Errno::ENOENT);
        }
        Ok((Side::Host, st))
    }

    /// Makes the store's copy of host directory `rel` (scaffolding for an
    /// ignored child).
    fn scaffold(&self, rel: &Path) -> Result<(), Errno> {
        let mut cur = PathBuf::new();
        for c in rel.components() {
            let d = self.dir(Side::Store, &cur)?;
            cur.push(c.as_os_str());
            match rustix::fs::mkdirat(&d, c.as_os_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(errno(e)),
            }
        }
        Ok(())
    }

    /// Common checks for making a new entry `name` in `parent`.
    fn prepare_new(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(Side, PathBuf, OwnedFd), Errno> {
        let (pside, prel, _) = self.node(parent)?;
        let rel = prel.join(name);
        if self.sentry.is_protected(&rel) {
            log::warn!("git sentry: refused creating {}", rel.display());
            return Err(Errno::EPERM);
        }
        let side = self.target_side(pside, &rel, dir);
        if side == Side::Store && pside == Side::Host {
            self.scaffold(&prel)?;
        }
        let d = self.dir(side, &prel)?;
        Ok((side, rel, d))
    }

    fn entry_reply(&self, side: Side, rel: &Path, d: &OwnedFd, name: &OsStr, reply: ReplyEntry) {
        let _ = (d, name);
        match self.remember(side, rel) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    /// After a rename: every node at or below `from` moves to `to`; a node
    /// that was at `to` is gone.
    fn renamed(&self, side: Side, from: &Path, to: &Path) {
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let moved_id = t.by_key.get(&(side, from.to_path_buf())).copied();
        let mut rekey = Vec::new();
        for (id, n) in t.nodes.iter_mut() {
            if n.side != side || n.gone {
                continue;
            }
            if Some(*id) != moved_id && n.rel.starts_with(to) && !n.rel.starts_with(from) {
                n.gone = true;
                rekey.push((n.rel.clone(), None));
            } else if let Ok(rest) = n.rel.strip_prefix(from) {
                let new = if rest.as_os_str().is_empty() {
                    to.to_path_buf()
                } else {
                    to.join(rest)
                };
                rekey.push((n.rel.clone(), Some((new.clone(), *id))));
                n.rel = new;
            }
        }
        for (old, _) in &rekey {
            t.by_key.remove(&(side, old.clone()));
        }
        for (_, new) in rekey {
            if let Some((p, id)) = new {
                t.by_key.insert((side, p), id);
            }
        }
    }

    /// After an unlink or rmdir: the node at `rel` is gone.
    fn removed(&self, side: Side, rel: &Path) {
        let mut t = self.t.lock().unwrap();
        if let Some(id) = t.by_key.remove(&(side, rel.to_path_buf())) {
            if let Some(n) = t.nodes.get_mut(&id) {
                n.gone = true;
            }
        }
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let mut t = self.t.lock().unwrap();
        let fh = t.next_fh;
        t.next_fh += 1;
        t.handles.insert(fh, h);
        fh
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        match self.t.lock().unwrap().handles.get(&fh.0) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    fn list_dir(&self, side: Side, rel: &Path) -> Result<Vec<(u64, FileType, OsString)>, Errno> {
        let mut out = vec![
            (1, FileType::Directory, OsString::from(".")),
            (1, FileType::Directory, OsString::from("..")),
        ];
        let mut seen = std::collections::HashSet::new();
        let mut read = |s: Side, keep: &dyn Fn(&Path, bool) -> bool| -> Result<(), Errno> {
            let d = self.dir(s, rel)?;
            let fd = rustix::fs::openat(
                &d,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno)?;
            let mut dir = rustix::fs::Dir::read_from(&fd).map_err(errno)?;
            while let Some(ent) = dir.read() {
                let ent = ent.map_err(errno)?;
                let name = OsStr::from_bytes(ent.file_name().to_bytes()).to_os_string();
                if name == "." || name == ".." {
                    continue;
                }
                let ft = match ent.file_type() {
                    rustix::fs::FileType::Directory => FileType::Directory,
                    rustix::fs::FileType::Symlink => FileType::Symlink,
                    rustix::fs::FileType::Fifo => FileType::NamedPipe,
                    rustix::fs::FileType::Socket => FileType::Socket,
                    rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
                    rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
                    _ => FileType::RegularFile,
                };
                let child = rel.join(&name);
                if !keep(&child, ft == FileType::Directory) || !seen.insert(name.clone()) {
                    continue;
                }
                let ino =
                    (ent.ino() & !(STORE_BIT | FOREIGN_BIT | (1 << 63))) | if s == Side::Store { STORE_BIT } else { 0 };
                out.push((ino.max(2), ft, name));
            }
            Ok(())
        };
        match (side, &self.rules) {
            (Side::Store, _) | (Side::Host, None) => read(side, &|_, _| true)?,
            (Side::Host, Some(rules)) => {
                // The store's ignored entries first, so they win over the host's.
                let _ = read(Side::Store, &|p, d| rules.is_ignored(p, d));
                read(Side::Host, &|p, d| !rules.is_ignored(p, d))?;
            }
        }
        Ok(out)
    }
}

fn open_flags(flags: i32) -> OFlags {
    let keep = libc::O_ACCMODE | libc::O_APPEND | libc::O_NONBLOCK | libc::O_SYNC | libc::O_DSYNC | libc::O_TRUNC;
    OFlags::from_bits_retain((flags & keep) as u32) | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn writes(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Filesystem for View {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let rel = prel.join(name);
            let (side, _) = self.find(pside, &rel)?;
            self.remember(side, &rel)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(f) = fh.and_then(|fh| self.file(fh).ok()) {
            match rustix::fs::fstat(&*f) {
                Ok(st) => return reply.attr(&TTL, &attr(ino.0, &st)),
                Err(e) => return reply.error(errno(e)),
            }
        }
        let st = self.node(ino).and_then(|(side, rel, _)| self.stat(side, &rel));
        match st {
            Ok(st) => reply.attr(&TTL, &attr(ino.0, &st)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        let mut t = self.t.lock().unwrap();
        let drop_it = match t.nodes.get_mut(&ino.0) {
            Some(n) => {
                n.lookups = n.lookups.saturating_sub(nlookup);
                n.lookups == 0
            }
            None => false,
        };
        if drop_it {
            if let Some(n) = t.nodes.remove(&ino.0) {
                let key = (n.side, n.rel);
                if t.by_key.get(&key) == Some(&ino.0) {
                    t.by_key.remove(&key);
                }
            }
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected {
                log::warn!("git sentry: refused changing attributes of {}", rel.display());
                return Err(Errno::EPERM);
            }
            let (parent, name) = split(&rel);
            let d = self.dir(side, parent)?;
            let target = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                Path::new(name)
            };
            let d = if rel.as_os_str().is_empty() {
                self.dir(side, &rel)?
            } else {
                d
            };
            if let Some(sz) = size {
                match fh.and_then(|fh| self.file(fh).ok()) {
                    Some(f) => f.set_len(sz).map_err(errno)?,
                    None => {
                        let fd = rustix::fs::openat2(
                            &d,
                            target,
                            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                            Mode::empty(),
                            resolve(),
                        )
                        .map_err(errno)?;
                        rustix::fs::ftruncate(&fd, sz).map_err(errno)?;
                    }
                }
            }
            if let Some(m) = mode {
                let fd = rustix::fs::openat2(
                    &d,
                    target,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    resolve(),
                );
                match fd {
                    Ok(fd) => {
                        use std::os::unix::fs::PermissionsExt;
                        let st = rustix::fs::fstat(&fd).map_err(errno)?;
                        if st.st_mode & libc::S_IFMT != libc::S_IFLNK {
                            let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
                            std::fs::set_permissions(proc, std::fs::Permissions::from_mode(m & 0o7777))
                                .map_err(errno)?;
                        }
                    }
                    Err(e) => return Err(errno(e)),
                }
            }
            if uid.is_some() || gid.is_some() {
                nix::unistd::fchownat(
                    Some(d.as_raw_fd()),
                    target,
                    uid.map(nix::unistd::Uid::from_raw),
                    gid.map(nix::unistd::Gid::from_raw),
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(|e| Errno::from_i32(e as i32))?;
            }
            if atime.is_some() || mtime.is_some() {
                let ts = |t: Option<TimeOrNow>| match t {
                    None => rustix::fs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_OMIT,
                    },
                    Some(TimeOrNow::Now) => rustix::fs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_NOW,
                    },
                    Some(TimeOrNow::SpecificTime(t)) => {
                        let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
                        rustix::fs::Timespec {
                            tv_sec: d.as_secs() as i64,
                            tv_nsec: d.subsec_nanos() as _,
                        }
                    }
                };
                let times = rustix::fs::Timestamps {
                    last_access: ts(atime),
                    last_modification: ts(mtime),
                };
                rustix::fs::utimensat(&d, target, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
            }
            self.stat(side, &rel)
        })();
        match r {
            Ok(st) => reply.attr(&TTL, &attr(ino.0, &st)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = (|| {
            let (side, rel, _) = self.node(ino)?;
            let (parent, name) = split(&rel);
            let d = self.dir(side, parent)?;
            rustix::fs::readlinkat(&d, name, Vec::new()).map_err(errno)
        })();
        match r {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (side, rel, d) = match self.prepare_new(parent, name, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        let ft = rustix::fs::FileType::from_raw_mode(mode);
        match rustix::fs::mknodat(&d, name, ft, Mode::from_raw_mode(mode & 0o7777), rdev as u64) {
            Ok(()) => self.entry_reply(side, &rel, &d, name, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let (side, rel, d) = match self.prepare_new(parent, name, true) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(mode & 0o7777)) {
            Ok(()) => self.entry_reply(side, &rel, &d, name, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, true, reply)
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let (side, rel, d) = match self.prepare_new(parent, link_name, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        if self.sentry.in_git_dir(&rel) {
            log::warn!(
                "git sentry: refused a symlink inside a Git directory: {}",
                rel.display()
            );
            return reply.error(Errno::EPERM);
        }
        match rustix::fs::symlinkat(target, &d, link_name) {
            Ok(()) => self.entry_reply(side, &rel, &d, link_name, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let (npside, nprel, _) = self.node(newparent)?;
            let from = prel.join(name);
            let to = nprel.join(newname);
            let (side, st) = self.find(pside, &from)?;
            let id = self.known(side, &from).unwrap_or(u64::MAX);
            let sticky = self.t.lock().unwrap().nodes.get(&id).is_some_and(|n| n.protected);
            if sticky || self.sentry.is_protected(&from) || self.sentry.is_protected(&to) {
                log::warn!("git sentry: refused renaming {} to {}", from.display(), to.display());
                return Err(Errno::EPERM);
            }
            let dir = is_dir(&st);
            let link = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
            let git = self.sentry.in_git_dir(&from) || self.sentry.in_git_dir(&to);
            if git && link && self.sentry.in_git_dir(&to) {
                return Err(Errno::EPERM);
            }
            if git && dir {
                return Err(Errno::EXDEV);
            }
            let nside = self.target_side(npside, &to, dir);
            if nside != side {
                return Err(Errno::EXDEV);
            }
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                if let Ok((oside, ost)) = self.find(npside, &to) {
                    if oside != side || (git && is_dir(&ost)) {
                        return Err(Errno::EXDEV);
                    }
                }
            }
            if side == Side::Store {
                self.scaffold(&nprel)?;
            }
            let d1 = self.dir(side, &prel)?;
            let d2 = self.dir(side, &nprel)?;
            let rf = rustix::fs::RenameFlags::from_bits_retain(flags.bits());
            rustix::fs::renameat_with(&d1, name, &d2, newname, rf).map_err(errno)?;
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                let tmp = PathBuf::from("\0swap");
                self.renamed(side, &to, &tmp);
                self.renamed(side, &from, &to);
                self.renamed(side, &tmp, &from);
            } else {
                self.renamed(side, &from, &to);
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected {
                log::warn!("git sentry: refused a hard link to {}", rel.display());
                return Err(Errno::EPERM);
            }
            let (nside, nrel, d2) = self.prepare_new(newparent, newname, false)?;
            if nside != side {
                return Err(Errno::EXDEV);
            }
            let (parent, name) = split(&rel);
            let d1 = self.dir(side, parent)?;
            rustix::fs::linkat(&d1, name, &d2, newname, AtFlags::empty()).map_err(errno)?;
            Ok((side, nrel, d2))
        })();
        match r {
            Ok((side, nrel, d2)) => self.entry_reply(side, &nrel, &d2, newname, reply),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected && writes(flags.0) {
                log::warn!("git sentry: refused opening {} for writing", rel.display());
                return Err(Errno::EPERM);
            }
            let p = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel.as_path()
            };
            let fd = rustix::fs::openat2(self.root(side)?, p, open_flags(flags.0), Mode::empty(), resolve())
                .map_err(errno)?;
            Ok(self.add_handle(Handle::File(Arc::new(File::from(fd)))))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.file(fh).and_then(|f| {
            let mut buf = vec![0u8; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(n);
            Ok(buf)
        });
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.file(fh).and_then(|f| f.write_all_at(data, offset).map_err(errno)) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lo: fuser::LockOwner, reply: ReplyEmpty) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.t.lock().unwrap().handles.remove(&fh.0);
        reply.ok()
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let r = self.file(fh).and_then(|f| {
            if datasync {
                f.sync_data().map_err(errno)
            } else {
                f.sync_all().map_err(errno)
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.node(ino) {
            Ok(_) => {
                let fh = self.add_handle(Handle::Dir(Arc::new(Vec::new())));
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if offset == 0 {
            // A reader that rewinds an open directory (gVisor keeps its
            // directory fds) must see the directory as it is now.
            match self.node(ino).and_then(|(side, rel, _)| self.list_dir(side, &rel)) {
                Ok(list) => {
                    self.t.lock().unwrap().handles.insert(fh.0, Handle::Dir(Arc::new(list)));
                }
                Err(e) => return reply.error(e),
            }
        }
        let list = match self.t.lock().unwrap().handles.get(&fh.0) {
            Some(Handle::Dir(l)) => l.clone(),
            _ => return reply.error(Errno::EBADF),
        };
        for (i, (ino, ft, name)) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *ft, name) {
                break;
            }
        }
        reply.ok()
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.t.lock().unwrap().handles.remove(&fh.0);
        reply.ok()
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match rustix::fs::fstatvfs(&self.host) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = (|| {
            let (side, rel, d) = self.prepare_new(parent, name, false)?;
            let fl = open_flags(flags) | OFlags::CREATE | OFlags::from_bits_retain((flags & libc::O_EXCL) as u32);
            let fd = rustix::fs::openat2(&d, name, fl, Mode::from_raw_mode(mode & 0o7777), resolve()).map_err(errno)?;
            let a = self.remember(side, &rel)?;
            Ok((a, self.add_handle(Handle::File(Arc::new(File::from(fd))))))
        })();
        match r {
            Ok((a, fh)) => reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

impl View {
    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let rel = prel.join(name);
            if self.sentry.is_protected(&rel) {
                log::warn!("git sentry: refused removing {}", rel.display());
                return Err(Errno::EPERM);
            }
            let (side, _) = self.find(pside, &rel)?;
            let id = self.known(side, &rel).unwrap_or(u64::MAX);
            if self.t.lock().unwrap().nodes.get(&id).is_some_and(|n| n.protected) {
                return Err(Errno::EPERM);
            }
            let d = self.dir(side, &prel)?;
            let fl = if dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
            rustix::fs::unlinkat(&d, name, fl).map_err(errno)?;
            self.removed(side, &rel);
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

// ---- mounting ------------------------------------------------------------

/// A served view; dropping it stops serving (the mount goes with the
/// supervisor's mount namespace).
pub struct Served {
    _session: fuser::BackgroundSession,
}

/// Mounts `view` at `mountpoint` (in the caller's mount namespace, where it
/// must be root of its user namespace) and serves it on background threads.
pub fn serve(view: View, mountpoint: &Path) -> io::Result<Served> {
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
    let data = format!("fd={},rootmode=40000,user_id=0,group_id=0,allow_other", dev.as_raw_fd());
    crate::sys::mount(
        "lazaret",
        mountpoint,
        "fuse",
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&data),
    )?;
    let mut cfg = fuser::Config::default();
    cfg.n_threads = Some(2);
    cfg.clone_fd = true;
    let session = fuser::Session::from_fd(view, OwnedFd::from(dev), fuser::SessionACL::All, cfg)?;
    Ok(Served {
        _session: session.spawn()?,
    })
}

/// The supervisor's part: reads the coordinator's `--views` file and serves
/// every view. Called as root of the supervisor's user namespace, before
/// runsc starts.
pub fn start_views(file: &Path) -> Result<Vec<Served>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    // Modes the sandbox asks for are applied as given (the guest applied its umask).
    crate::sys::umask(0);
    let specs = crate::gitsentry::parse_views(&text).ok_or_else(|| format!("{} is malformed", file.display()))?;
    let mut served = Vec::new();
    for v in specs {
        let store = match &v.store {
            Some(dir) => {
                let layout = crate::gitsentry::discover(&v.source).map_err(|e| e.to_string())?;
                let rules =
                    IgnoreRules::load(&v.source, layout.git_dir(), layout.common_dir()).map_err(|e| e.to_string())?;
                Some((dir.as_path(), rules))
            }
            None => None,
        };
        let sentry = Sentry::for_view(&v.source, v.git_root);
        let view = View::new(&v.source, store, sentry)
            .map_err(|e| format!("opening {} for the workspace view: {e}", v.source.display()))?;
        served.push(serve(view, &v.mountpoint).map_err(|e| {
            format!(
                "serving the workspace view at {}: {e} (run `lazaret doctor`: /dev/fuse must be usable)",
                v.mountpoint.display()
            )
        })?);
    }
    Ok(served)
}
