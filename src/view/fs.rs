//! The workspace view: a filtering passthrough FUSE filesystem served by the
//! Runtime Supervisor and bound into the sandbox at `/workspace` (and, for a
//! linked worktree, at the common Git directory's own path).
//!
//! It does two jobs no bind layout can:
//! - **Git Sentry**: every create, write, truncate, chmod, rename,
//!   unlink, link and symlink is checked against `gitsentry::Sentry` and
//!   refused with EPERM when it would touch a protected Git path. This also
//!   stops *creating* `.git/commondir`, which a read-only bind cannot.
//! - **Repository shapes** (`gitshape`): a `.git` the host lacks, a
//!   new linked-worktree or submodule Git directory, and the name that would
//!   complete a repository shape in a host directory are made in the store,
//!   so the host never gains a Git directory of the sandbox's making; the
//!   sensitive names of host shapes and host Git's hook locations are
//!   protected at access time.
//! - **Ignored Workspace State**: paths the snapshot of ignore rules
//!   (`ignored::IgnoreRules`) matches resolve into the Domain's ignored store
//!   instead of the host workspace, including paths created during the
//!   session. No mount point is ever created in the host workspace.
//!
//! Host access is path based from two directory fds (workspace, store), with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` so a concurrently swapped
//! symlink can never lead outside either tree. The node id of a file is its
//! fresh id per file the kernel looks up; a node remembers its host inode
//! number and refuses (ESTALE) once its path names another file.
//!
//! Caching (src/view/watch.rs): `git status` stats every tracked file, and
//! gVisor opens a host fd for each, so the view avoids per-file round trips:
//! - entries and attributes are cached for an hour under host directories
//!   watched with inotify (a host-side change invalidates exactly what it
//!   touched), for 1 s elsewhere; store-side entries change only through
//!   the view, which the kernel sees;
//! - the view's own changes come back from inotify too; those that leave
//!   the kernel's cache true (attributes exactly as last replied, a name
//!   the view just made) are not invalidated (`already_known`);
//! - opens are handle-less (`FUSE_NO_OPEN_SUPPORT`: the first OPEN answers
//!   ENOSYS and the kernel stops sending OPEN, FLUSH and RELEASE); reads and
//!   writes go through a bounded per-node fd cache, and the Git Sentry's
//!   write checks move from open to write/truncate, still before any byte
//!   reaches the host. A file unlinked or replaced through the view keeps
//!   its cached fd (pinned) until the kernel forgets it;
//! - directory listings are cached by the kernel (`FOPEN_CACHE_DIR`).
//!
//! Threads: `fuser`'s event loops (two) and the watcher.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow,
};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

use crate::sys;
use crate::view::counts::{Counts, Op};
use crate::view::gitshape;
use crate::view::ignored::IgnoreRules;
use crate::view::sentry::Sentry;
use crate::view::watch::{Inval, Watches};

/// How long the kernel may cache entries and attributes under a host
/// directory that is not watched: host-side edits show up within this time.
const TTL: Duration = Duration::from_secs(1);
/// The same under a watched directory and on the store side, where every
/// change is invalidated when it happens.
const TTL_LONG: Duration = Duration::from_secs(3600);
/// Per-view bound on cached per-node fds (pinned ones not counted).
const FD_CACHE: usize = 256;
/// Per-view bound on pinned fds.
const PINNED_MAX: usize = 512;
const STORE_BIT: u64 = 1 << 62;
const FOREIGN_BIT: u64 = 1 << 61;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    Host,
    Store,
}

/// The guest uid (and gid) the developer appears as: 0 (root), or the
/// profile `user`'s id ([`crate::config::GUEST_USER_UID`]). Files owned by
/// the developer (id 0 in the supervisor's user namespace) are shown with
/// it, and a `chown` to it stores the developer, so a session of that user
/// owns the workspace it edits and the host user owns what it writes. One
/// value per supervisor process (it serves one Domain), set before any view
/// is served.
static GUEST_OWNER: AtomicU32 = AtomicU32::new(0);

/// Sets [`GUEST_OWNER`] (the supervisor, from its `--views` file).
pub fn set_guest_owner(id: u32) {
    GUEST_OWNER.store(id, Ordering::Relaxed);
}

/// The id the sandbox sees for a stored owner id.
fn shown_id(id: u32) -> u32 {
    if id == 0 {
        GUEST_OWNER.load(Ordering::Relaxed)
    } else {
        id
    }
}

/// The owner id stored for one the sandbox asks for.
fn stored_id(id: Option<u32>) -> Option<u32> {
    let owner = GUEST_OWNER.load(Ordering::Relaxed);
    id.map(|i| if owner != 0 && i == owner { 0 } else { i })
}

/// Host workspace files stay the developer's: the sandbox's root holds
/// CAP_CHOWN, but a `chown` to any id other than its own (0 here, the
/// developer on the host) would hand host files to a subordinate id the
/// developer cannot edit as. The Domain's own storage may be chowned.
fn host_owner_stays(side: Side, uid: Option<u32>, gid: Option<u32>) -> Result<(), Errno> {
    if side == Side::Host && (uid.is_some_and(|u| u != 0) || gid.is_some_and(|g| g != 0)) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// Host workspace modes stay ones the developer would grant: no
/// set-user-ID or set-group-ID file (any local user who can reach the
/// workspace could run it as the developer) and nothing writable by every
/// user. The sandbox holds FOWNER and FSETID, so the view strips these bits
/// itself; the Domain's own storage keeps any mode.
fn host_mode(side: Side, mode: u32, dir: bool) -> u32 {
    let m = mode & 0o7777;
    if side != Side::Host {
        return m;
    }
    let strip = sys::S_ISUID | sys::S_IWOTH | if dir { 0 } else { sys::S_ISGID };
    m & !strip
}

struct Node {
    side: Side,
    rel: PathBuf,
    /// Removed or overwritten: path operations fail, open handles work.
    gone: bool,
    /// Ever seen at a protected path (sticks across hard links).
    protected: bool,
    lookups: u64,
    dir: bool,
    regular: bool,
    /// The host (or store) inode the node stands for.
    host_ino: u64,
    /// Cached fd for handle-less reads and writes, and whether it writes.
    fd: Option<(Arc<File>, bool)>,
    /// Kept until the kernel forgets the node: the path no longer leads to
    /// the file (unlinked or replaced through the view).
    pinned: bool,
    /// The attributes last sent to the kernel for this node.
    told: Option<Told>,
    /// Made by the view (mkdir, mknod, symlink, link, an exclusive create)
    /// and its host IN_CREATE not seen yet.
    made_here: bool,
}

/// What the kernel caches of a file's attributes, as compared by the
/// watcher: an attribute event after which the file still stats exactly as
/// last told changed nothing the kernel holds.
type Told = [i64; 10];

fn told(st: &rustix::fs::Stat) -> Told {
    [
        st.st_ino as i64,
        st.st_mode as i64,
        st.st_uid as i64,
        st.st_gid as i64,
        st.st_size,
        st.st_nlink as i64,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ]
}

impl Node {
    fn new(side: Side, rel: PathBuf, st: &rustix::fs::Stat) -> Node {
        Node {
            side,
            rel,
            gone: false,
            protected: false,
            lookups: 0,
            dir: is_dir(st),
            regular: st.st_mode & sys::S_IFMT == sys::S_IFREG,
            host_ino: st.st_ino,
            fd: None,
            pinned: false,
            told: None,
            made_here: false,
        }
    }
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
    /// Nodes with an unpinned cached fd, oldest first (may hold stale ids).
    fd_order: VecDeque<u64>,
    cached_fds: usize,
    /// Pinned nodes, oldest first (may hold stale ids).
    pin_order: VecDeque<u64>,
    pinned_fds: usize,
}

/// One view: a host tree, its policy, and (for the workspace) the ignored
/// store and rules.
pub struct View {
    host: OwnedFd,
    store: Option<(OwnedFd, u64)>,
    rules: Option<IgnoreRules>,
    sentry: Sentry,
    /// Hook locations from host Git's configuration, as view paths.
    hooks: Vec<PathBuf>,
    /// Serialises deciding and making entries with repository-shape names,
    /// so two concurrent creates cannot complete a shape together.
    shape_lock: Mutex<()>,
    t: Arc<Mutex<Tables>>,
    /// None when inotify is unavailable: everything host-side uses `TTL`.
    watch: Option<Arc<Watches>>,
    /// The kernel does handle-less opens (set at FUSE init).
    no_open: AtomicBool,
    /// Host identities hidden during this session (beyond the rules'
    /// snapshot), and the sticky file they are added to.
    more_hidden: Mutex<std::collections::HashSet<(u64, u64)>>,
    sticky_path: Option<PathBuf>,
    /// Requests answered, per opcode (src/view/counts.rs).
    counts: Arc<Counts>,
    /// Host paths the sandbox changed through the view, and when: their
    /// host events are the sandbox's own, not relayed back (`relay`).
    guest_changed: Arc<GuestChanged>,
}

/// Host paths (view-relative) the sandbox last changed through the view.
#[derive(Default)]
pub struct GuestChanged(Mutex<HashMap<PathBuf, std::time::Instant>>);

/// How long a path the sandbox changed keeps its host events its own.
const OWN_CHANGE: Duration = Duration::from_secs(2);

impl GuestChanged {
    fn mark(&self, rel: &Path) {
        let mut m = self.0.lock().unwrap();
        if m.len() > 4096 {
            m.retain(|_, t| t.elapsed() < OWN_CHANGE);
        }
        m.insert(rel.to_path_buf(), std::time::Instant::now());
    }

    /// Whether the sandbox changed `rel` through the view just now.
    pub fn recent(&self, rel: &Path) -> bool {
        self.0
            .lock()
            .unwrap()
            .get(rel)
            .is_some_and(|t| t.elapsed() < OWN_CHANGE)
    }
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
    match mode & sys::S_IFMT {
        sys::S_IFDIR => FileType::Directory,
        sys::S_IFLNK => FileType::Symlink,
        sys::S_IFIFO => FileType::NamedPipe,
        sys::S_IFSOCK => FileType::Socket,
        sys::S_IFCHR => FileType::CharDevice,
        sys::S_IFBLK => FileType::BlockDevice,
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
        uid: shown_id(st.st_uid),
        gid: shown_id(st.st_gid),
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

fn timestamps(atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> rustix::fs::Timestamps {
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
    rustix::fs::Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    }
}

/// The attributes of a negative entry (node id 0).
fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// Clears set-user-ID and set-group-ID (with group execute) before data
/// changes, as a write by an unprivileged owner would: the view writes with
/// CAP_FSETID, which would keep them.
fn kill_priv(f: impl AsFd) -> Result<(), Errno> {
    let mode = rustix::fs::fstat(&f).map_err(errno)?.st_mode;
    let sgid = sys::S_ISGID | sys::S_IXGRP;
    if mode & sys::S_ISUID != 0 || mode & sgid == sgid {
        let keep = mode & 0o7777 & !sys::S_ISUID & !(if mode & sgid == sgid { sys::S_ISGID } else { 0 });
        rustix::fs::fchmod(&f, Mode::from_raw_mode(keep)).map_err(errno)?;
    }
    Ok(())
}

fn is_dir(st: &rustix::fs::Stat) -> bool {
    st.st_mode & sys::S_IFMT == sys::S_IFDIR
}

/// Calls `f(name, type, inode)` for every entry of the directory `dir`
/// but `.` and `..`, read through a descriptor of its own (so `dir`'s
/// offset is untouched); the first error `f` returns ends the walk.
fn each_entry(
    dir: &OwnedFd,
    mut f: impl FnMut(&OsStr, rustix::fs::FileType, u64) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let mut entries = rustix::fs::Dir::read_from(&fd).map_err(errno)?;
    while let Some(ent) = entries.read() {
        let ent = ent.map_err(errno)?;
        let name = OsStr::from_bytes(ent.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        f(name, ent.file_type(), ent.ino())?;
    }
    Ok(())
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
        let root_st = rustix::fs::fstat(&host_fd)?;
        let (store, rules, sticky_path) = match store {
            Some((dir, rules)) => {
                std::fs::create_dir_all(dir)?;
                (
                    Some(open_root(dir)?),
                    Some(rules),
                    Some(crate::view::ignored::sticky_file(dir)),
                )
            }
            None => (None, None, None),
        };
        let mut nodes = HashMap::new();
        let mut root = Node::new(Side::Host, PathBuf::new(), &root_st);
        root.lookups = 1;
        nodes.insert(1, root);
        let watch = match Watches::new() {
            Ok(w) => {
                w.watch(host_fd.as_fd(), Path::new(""));
                Some(Arc::new(w))
            }
            Err(e) => {
                log::warn!("workspace view: no inotify ({e}); host edits show up within 1 s");
                None
            }
        };
        Ok(View {
            host: host_fd,
            store,
            rules,
            sentry,
            hooks: Vec::new(),
            shape_lock: Mutex::new(()),
            t: Arc::new(Mutex::new(Tables {
                nodes,
                by_key: HashMap::new(),
                next_id: 2,
                handles: HashMap::new(),
                next_fh: 1,
                fd_order: VecDeque::new(),
                cached_fds: 0,
                pin_order: VecDeque::new(),
                pinned_fds: 0,
            })),
            watch,
            no_open: AtomicBool::new(false),
            more_hidden: Mutex::new(Default::default()),
            sticky_path,
            counts: Arc::default(),
            guest_changed: Arc::default(),
        })
    }

    /// Records that the sandbox changes the host file of node `ino`.
    fn guest_changes(&self, ino: INodeNo) {
        if let Some(rel) = self.t.lock().unwrap().nodes.get(&ino.0).map(|n| n.rel.clone()) {
            self.guest_changed.mark(&rel);
        }
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
        let (side, rel, sticky) = (n.side, n.rel.clone(), n.protected);
        drop(t);
        let protected = sticky || self.protected_at(side, &rel);
        Ok((side, rel, protected))
    }

    /// Registers one kernel lookup of the entry at `rel` and returns its
    /// attributes under its node id.
    fn remember(&self, side: Side, rel: &Path) -> Result<FileAttr, Errno> {
        let st = self.stat(side, rel)?;
        let dir = is_dir(&st);
        if dir && side == Side::Host {
            // Watched before the kernel can cache anything below it.
            if let Some(w) = &self.watch {
                if !w.is_watched(rel) {
                    if let Ok(d) = self.dir(side, rel) {
                        w.watch(d.as_fd(), rel);
                    }
                }
            }
        }
        let protected = self.protected_at(side, rel);
        let key = (side, rel.to_path_buf());
        let mut t = self.t.lock().unwrap();
        let existing = t.by_key.get(&key).copied();
        let id = match existing {
            // The same file as before.
            Some(id) if t.nodes.get(&id).is_some_and(|n| n.host_ino == st.st_ino) => id,
            _ => {
                if let Some(old) = existing {
                    // Another file now has this path (replaced on the host).
                    if let Some(n) = t.nodes.get_mut(&old) {
                        n.gone = true;
                    }
                }
                let id = t.next_id;
                t.next_id += 1;
                t.by_key.insert(key, id);
                t.nodes.insert(id, Node::new(side, rel.to_path_buf(), &st));
                id
            }
        };
        let n = t.nodes.get_mut(&id).expect("node of a known key");
        n.protected |= protected;
        n.lookups += 1;
        n.told = Some(told(&st));
        Ok(attr(id, &st))
    }

    /// Records the attributes about to be sent for node `id`.
    fn note(&self, id: u64, st: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.told = Some(told(st));
        }
    }

    /// Node `id` was just made through the view: its host IN_CREATE tells
    /// the kernel nothing it does not know (src/view/watch.rs).
    fn made(&self, id: u64) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.made_here = true;
        }
    }

    /// How long the kernel may keep what it learns about `rel`.
    fn ttl(&self, side: Side, rel: &Path) -> Duration {
        if side == Side::Store {
            return TTL_LONG;
        }
        let parent = if rel.as_os_str().is_empty() {
            rel
        } else {
            rel.parent().unwrap_or(Path::new(""))
        };
        match &self.watch {
            Some(w) if w.is_watched(parent) => TTL_LONG,
            _ => TTL,
        }
    }

    /// Stats a node's path and checks it still names the node's file.
    fn node_stat(&self, ino: INodeNo) -> Result<(Side, PathBuf, rustix::fs::Stat), Errno> {
        let (side, rel, _) = self.node(ino)?;
        let want = self.t.lock().unwrap().nodes.get(&ino.0).map(|n| n.host_ino);
        let st = self.stat(side, &rel)?;
        if want != Some(st.st_ino) {
            return Err(Errno::ESTALE);
        }
        Ok((side, rel, st))
    }

    /// The fd a handle-less read (or write) of node `ino` goes through.
    fn node_file(&self, ino: INodeNo, write: bool) -> Result<Arc<File>, Errno> {
        let (side, rel, want) = {
            let t = self.t.lock().unwrap();
            let n = t.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
            if write && (n.protected || self.protected_at(n.side, &n.rel)) {
                log::warn!("git sentry: refused writing {}", crate::display::escape_path(&n.rel));
                return Err(Errno::EPERM);
            }
            match &n.fd {
                Some((f, w)) if *w || !write => return Ok(f.clone()),
                _ if n.gone => return Err(Errno::ESTALE),
                _ => (n.side, n.rel.clone(), n.host_ino),
            }
        };
        let f = Arc::new(self.open_path(side, &rel, write)?);
        if rustix::fs::fstat(&*f).map_err(errno)?.st_ino != want {
            return Err(Errno::ESTALE);
        }
        self.cache_fd(ino.0, f.clone(), write);
        Ok(f)
    }

    /// The node's cached fd, if any, and whether it writes.
    fn cached_fd(&self, ino: INodeNo) -> Option<(Arc<File>, bool)> {
        self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.fd.clone())
    }

    /// Keeps `f` as node `id`'s fd, evicting the oldest beyond `FD_CACHE`.
    fn cache_fd(&self, id: u64, f: Arc<File>, write: bool) {
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let Some(n) = t.nodes.get_mut(&id) else { return };
        let counted = n.fd.is_some() && !n.pinned;
        n.fd = Some((f, write));
        if !n.pinned && !counted {
            t.cached_fds += 1;
            t.fd_order.push_back(id);
        }
        while t.cached_fds > FD_CACHE {
            let Some(old) = t.fd_order.pop_front() else { break };
            if let Some(n) = t.nodes.get_mut(&old) {
                if !n.pinned && n.fd.take().is_some() {
                    t.cached_fds -= 1;
                }
            }
        }
    }

    /// Opens `rel` for reading, or for writing (and reading, when allowed).
    fn open_path(&self, side: Side, rel: &Path, write: bool) -> Result<File, Errno> {
        let p = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let open = |fl: OFlags| {
            rustix::fs::openat2(
                self.root(side)?,
                p,
                fl | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
                resolve(),
            )
            .map_err(errno)
        };
        let fd = if write {
            open(OFlags::RDWR).or_else(|_| open(OFlags::WRONLY))?
        } else {
            open(OFlags::RDONLY)?
        };
        Ok(File::from(fd))
    }

    /// Before `rel` stops naming its file (unlink, rename over it): a node
    /// with a cached fd keeps it until the kernel forgets the node, so the
    /// kernel can still write back or read the file's pages. No fd is opened
    /// for this: gVisor itself refuses I/O on a file unlinked while open (a
    /// plain bind behaves the same), and it keeps deleted files referenced,
    /// so pins are bounded: beyond `PINNED_MAX` the oldest is dropped.
    fn pin(&self, side: Side, rel: &Path) {
        let Some(id) = self.known(side, rel) else { return };
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let Some(n) = t.nodes.get_mut(&id) else { return };
        if n.pinned || !n.regular || n.fd.is_none() {
            return;
        }
        t.cached_fds -= 1;
        n.pinned = true;
        t.pinned_fds += 1;
        t.pin_order.push_back(id);
        while t.pinned_fds > PINNED_MAX {
            let Some(old) = t.pin_order.pop_front() else { break };
            if let Some(n) = t.nodes.get_mut(&old) {
                if n.pinned {
                    n.pinned = false;
                    n.fd = None;
                    t.pinned_fds -= 1;
                }
            }
        }
    }

    fn ignored(&self, rel: &Path, dir: bool) -> bool {
        self.rules.as_ref().is_some_and(|r| r.is_ignored(rel, dir))
    }

    /// Where a child of a directory on `parent_side` lives when created.
    fn target_side(&self, parent_side: Side, rel: &Path, dir: bool) -> Side {
        if self.is_domain_side(parent_side, rel, dir) || (self.store.is_some() && self.git_domain_side(rel)) {
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
        if let Some(st) = self.git_store_entry(rel) {
            return Ok((Side::Store, st));
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
        if self.is_hidden_host(&st) {
            // A hidden host file under a name the rules do not match (an
            // ancestor was renamed, or .gitignore edited): Domain-side.
            return match self.stat(Side::Store, rel) {
                Ok(sst) => Ok((Side::Store, sst)),
                Err(_) => Err(Errno::ENOENT),
            };
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
        let side = self.target_side(pside, &rel, dir);
        if side == Side::Host && (self.protected_at(Side::Host, &rel) || self.git_refused(&rel)) {
            log::warn!("git sentry: refused creating {}", crate::display::escape_path(&rel));
            return Err(Errno::EPERM);
        }
        if side == Side::Store && pside == Side::Host {
            self.scaffold(&prel)?;
        }
        let d = self.dir(side, &prel)?;
        Ok((side, rel, d))
    }

    fn entry_reply(&self, side: Side, rel: &Path, d: &OwnedFd, name: &OsStr, reply: ReplyEntry) {
        let _ = (d, name);
        match self.remember(side, rel) {
            Ok(a) => {
                self.made(a.ino.0);
                reply.entry(&self.ttl(side, rel), &a, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// After a rename: every node at or below `from` moves to `to`; a node
    /// that was at `to` is gone.
    fn renamed(&self, side: Side, from: &Path, to: &Path) {
        if let (Side::Host, Some(w)) = (side, &self.watch) {
            w.renamed(from, to);
        }
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

    /// The open handle `fh`, or for a handle-less open (fh 0) the node's fd.
    fn handle_or_node(&self, fh: FileHandle, ino: INodeNo, write: bool) -> Result<Arc<File>, Errno> {
        if fh.0 == 0 {
            self.node_file(ino, write)
        } else {
            self.file(fh)
        }
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
        let mut read = |s: Side, keep: &dyn Fn(&Path, bool, u64) -> bool| -> Result<(), Errno> {
            let d = self.dir(s, rel)?;
            each_entry(&d, |name, file_type, ent_ino| {
                let name = name.to_os_string();
                let ft = match file_type {
                    rustix::fs::FileType::Directory => FileType::Directory,
                    rustix::fs::FileType::Symlink => FileType::Symlink,
                    rustix::fs::FileType::Fifo => FileType::NamedPipe,
                    rustix::fs::FileType::Socket => FileType::Socket,
                    rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
                    rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
                    _ => FileType::RegularFile,
                };
                let child = rel.join(&name);
                if !keep(&child, ft == FileType::Directory, ent_ino) || !seen.insert(name.clone()) {
                    return Ok(());
                }
                let ino =
                    (ent_ino & !(STORE_BIT | FOREIGN_BIT | (1 << 63))) | if s == Side::Store { STORE_BIT } else { 0 };
                out.push((ino.max(2), ft, name));
                Ok(())
            })
        };
        match (side, &self.rules) {
            (Side::Store, _) => read(side, &|_, _, _| true)?,
            (Side::Host, None) => {
                // Domain-side Git entries first, so they win over the host's.
                if self.store.is_some() {
                    let _ = read(Side::Store, &|p, _, _| self.git_store_entry(p).is_some());
                }
                read(side, &|_, _, _| true)?
            }
            (Side::Host, Some(rules)) => {
                // The store's ignored and Git entries first, so they win over the host's.
                let _ = read(Side::Store, &|p, d, _| {
                    rules.is_ignored(p, d) || self.hidden_host_at(p) || self.git_store_entry(p).is_some()
                });
                let dev = self.stat(Side::Host, rel).map(|st| st.st_dev).unwrap_or(0);
                read(Side::Host, &|p, d, ino| {
                    !rules.is_ignored(p, d) && !self.is_hidden_id(dev, ino)
                })?;
            }
        }
        Ok(out)
    }
}

fn open_flags(flags: i32) -> OFlags {
    let keep = sys::O_ACCMODE | sys::O_APPEND | sys::O_NONBLOCK | sys::O_SYNC | sys::O_DSYNC | sys::O_TRUNC;
    OFlags::from_bits_retain((flags & keep) as u32) | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn writes(flags: i32) -> bool {
    flags & sys::O_ACCMODE != sys::O_RDONLY || flags & sys::O_TRUNC != 0
}

impl Filesystem for View {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counts.add(Op::Lookup);
        let mut negative_ttl = None;
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let rel = prel.join(name);
            negative_ttl = Some(self.ttl(pside, &rel));
            let (side, _) = self.find(pside, &rel)?;
            Ok((self.remember(side, &rel)?, self.ttl(side, &rel)))
        })();
        match (r, negative_ttl) {
            (Ok((a, ttl)), _) => reply.entry(&ttl, &a, Generation(0)),
            // A negative entry: the kernel remembers the absence as long as
            // it would remember a presence. Creating the name through the
            // view replaces it; a host-side create is invalidated by the
            // watcher.
            (Err(Errno::ENOENT), Some(ttl)) => reply.entry(&ttl, &negative(), Generation(0)),
            (Err(e), _) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.counts.add(Op::Getattr);
        if let Some(f) = fh.and_then(|fh| self.file(fh).ok()) {
            match rustix::fs::fstat(&*f) {
                Ok(st) => {
                    let ttl = self.node(ino).map_or(TTL, |(side, rel, _)| self.ttl(side, &rel));
                    self.note(ino.0, &st);
                    return reply.attr(&ttl, &attr(ino.0, &st));
                }
                Err(e) => return reply.error(errno(e)),
            }
        }
        let r = match self.cached_fd(ino) {
            Some((f, _)) => self.node(ino).and_then(|(side, rel, _)| {
                let st = rustix::fs::fstat(&*f).map_err(errno)?;
                Ok((side, rel, st))
            }),
            None => self.node_stat(ino),
        };
        match r {
            Ok((side, rel, st)) => {
                self.note(ino.0, &st);
                reply.attr(&self.ttl(side, &rel), &attr(ino.0, &st))
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.counts.add(Op::Forget);
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
                if n.fd.is_some() {
                    if n.pinned {
                        t.pinned_fds -= 1;
                    } else {
                        t.cached_fds -= 1;
                    }
                }
                let key = (n.side, n.rel);
                if t.by_key.get(&key) == Some(&ino.0) {
                    t.by_key.remove(&key);
                    if let (true, Side::Host, Some(w)) = (n.dir, key.0, &self.watch) {
                        w.unwatch(&key.1);
                    }
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
        self.counts.add(Op::Setattr);
        self.guest_changes(ino);
        let (uid, gid) = (stored_id(uid), stored_id(gid));
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected {
                log::warn!(
                    "git sentry: refused changing attributes of {}",
                    crate::display::escape_path(&rel)
                );
                return Err(Errno::EPERM);
            }
            host_owner_stays(side, uid, gid)?;
            if let Some((f, w)) = self.cached_fd(ino) {
                // The node's own fd: no path walks.
                if let Some(sz) = size {
                    let wf = if w { f.clone() } else { self.node_file(ino, true)? };
                    kill_priv(&*wf)?;
                    wf.set_len(sz).map_err(errno)?;
                }
                if let Some(m) = mode {
                    let d = is_dir(&rustix::fs::fstat(&*f).map_err(errno)?);
                    rustix::fs::fchmod(&*f, Mode::from_raw_mode(host_mode(side, m, d))).map_err(errno)?;
                }
                if uid.is_some() || gid.is_some() {
                    sys::fchown(&*f, uid, gid).map_err(errno)?;
                }
                if atime.is_some() || mtime.is_some() {
                    rustix::fs::futimens(&*f, &timestamps(atime, mtime)).map_err(errno)?;
                }
                return Ok((rustix::fs::fstat(&*f).map_err(errno)?, self.ttl(side, &rel)));
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
                    Some(f) => {
                        kill_priv(&*f)?;
                        f.set_len(sz).map_err(errno)?
                    }
                    None => {
                        let fd = rustix::fs::openat2(
                            &d,
                            target,
                            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                            Mode::empty(),
                            resolve(),
                        )
                        .map_err(errno)?;
                        kill_priv(&fd)?;
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
                        if st.st_mode & sys::S_IFMT != sys::S_IFLNK {
                            let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
                            std::fs::set_permissions(
                                proc,
                                std::fs::Permissions::from_mode(host_mode(side, m, is_dir(&st))),
                            )
                            .map_err(errno)?;
                        }
                    }
                    Err(e) => return Err(errno(e)),
                }
            }
            if uid.is_some() || gid.is_some() {
                sys::lchownat(&d, target, uid, gid).map_err(errno)?;
            }
            if atime.is_some() || mtime.is_some() {
                let times = timestamps(atime, mtime);
                rustix::fs::utimensat(&d, target, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
            }
            Ok((self.stat(side, &rel)?, self.ttl(side, &rel)))
        })();
        match r {
            Ok((st, ttl)) => {
                self.note(ino.0, &st);
                reply.attr(&ttl, &attr(ino.0, &st))
            }
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.counts.add(Op::Readlink);
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
        self.counts.add(Op::Mknod);
        let _shape = self.shape_guard(name);
        let (side, rel, d) = match self.prepare_new(parent, name, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        let ft = rustix::fs::FileType::from_raw_mode(mode);
        match rustix::fs::mknodat(
            &d,
            name,
            ft,
            Mode::from_raw_mode(host_mode(side, mode, false)),
            rdev as u64,
        ) {
            Ok(()) => self.entry_reply(side, &rel, &d, name, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        self.counts.add(Op::Mkdir);
        let _shape = self.shape_guard(name);
        let (side, rel, d) = match self.prepare_new(parent, name, true) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(host_mode(side, mode, true))) {
            Ok(()) => self.entry_reply(side, &rel, &d, name, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.add(Op::Unlink);
        self.remove(parent, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.add(Op::Rmdir);
        self.remove(parent, name, true, reply)
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        self.counts.add(Op::Symlink);
        let _shape = self.shape_guard(link_name);
        let (side, rel, d) = match self.prepare_new(parent, link_name, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        if side == Side::Host && self.in_host_git_dir(&rel) {
            log::warn!(
                "git sentry: refused a symlink inside a Git directory: {}",
                crate::display::escape_path(&rel)
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
        self.counts.add(Op::Rename);
        let _shape = self.shape_guard(newname);
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let (npside, nprel, _) = self.node(newparent)?;
            let from = prel.join(name);
            let to = nprel.join(newname);
            self.guest_changed.mark(&to);
            let (side, st) = self.find(pside, &from)?;
            let id = self.known(side, &from).unwrap_or(u64::MAX);
            let sticky = self.t.lock().unwrap().nodes.get(&id).is_some_and(|n| n.protected);
            let dir = is_dir(&st);
            let nside = self.target_side(npside, &to, dir);
            // A host repository itself keeps its name, as `.git` does.
            let moves_repo = side == Side::Host
                && ((dir && self.host_shape(&from))
                    || (flags.contains(RenameFlags::RENAME_EXCHANGE) && self.host_shape(&to)));
            if sticky
                || moves_repo
                || self.protected_at(side, &from)
                || (nside == Side::Host && (self.protected_at(Side::Host, &to) || self.git_refused(&to)))
            {
                log::warn!(
                    "git sentry: refused renaming {} to {}",
                    crate::display::escape_path(&from),
                    crate::display::escape_path(&to)
                );
                return Err(Errno::EPERM);
            }
            let link = st.st_mode & sys::S_IFMT == sys::S_IFLNK;
            let git_from =
                side == Side::Host && (self.sentry.in_git_dir(&from) || (dir && self.in_host_git_dir(&from)));
            let git_to =
                nside == Side::Host && (self.sentry.in_git_dir(&to) || ((dir || link) && self.in_host_git_dir(&to)));
            let git = git_from || git_to;
            if git && link && git_to {
                return Err(Errno::EPERM);
            }
            if git && dir {
                return Err(Errno::EXDEV);
            }
            if nside != side {
                if side == Side::Host
                    && nside == Side::Store
                    && st.st_mode & sys::S_IFMT == sys::S_IFREG
                    && !flags.contains(RenameFlags::RENAME_EXCHANGE)
                    && self.git_domain_side(&to)
                {
                    // A lock file renamed onto a Domain-side Git name.
                    return self.move_file_to_store(id, &from, &to, &nprel, newname, flags);
                }
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
            let host_dirs = side == Side::Host && self.rules.is_some();
            if host_dirs && dir {
                self.hide_below(&from)?;
            }
            if host_dirs
                && flags.contains(RenameFlags::RENAME_EXCHANGE)
                && self.stat(Side::Host, &to).is_ok_and(|st| is_dir(&st))
            {
                self.hide_below(&to)?;
            }
            let d1 = self.dir(side, &prel)?;
            let d2 = self.dir(side, &nprel)?;
            let rf = rustix::fs::RenameFlags::from_bits_retain(flags.bits());
            if !flags.contains(RenameFlags::RENAME_EXCHANGE) {
                self.pin(side, &to);
            }
            rustix::fs::renameat_with(&d1, name, &d2, newname, rf).map_err(errno)?;
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                let tmp = PathBuf::from("\0swap");
                self.renamed(side, &to, &tmp);
                self.renamed(side, &from, &to);
                self.renamed(side, &tmp, &from);
            } else {
                self.renamed(side, &from, &to);
                if host_dirs && dir {
                    self.store_follows(&from, &to);
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.counts.add(Op::Link);
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected {
                log::warn!(
                    "git sentry: refused a hard link to {}",
                    crate::display::escape_path(&rel)
                );
                return Err(Errno::EPERM);
            }
            let _shape = self.shape_guard(newname);
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

    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> io::Result<()> {
        use fuser::InitFlags;
        if config.capabilities().contains(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            self.no_open.store(true, Ordering::Relaxed);
        }
        // A safety net under the watcher: a changed mtime or size seen on
        // any attribute refresh drops the file's cached pages.
        let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        // Set-id bits are cleared here (chown by the host kernel, write and
        // truncate by `kill_priv`), which spares the kernel a GETATTR and a
        // SETATTR around every chown.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV);
        Ok(())
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.counts.add(Op::Open);
        if self.no_open.load(Ordering::Relaxed) {
            // The kernel takes this as "opens need no round trip" from now on.
            return reply.error(Errno::ENOSYS);
        }
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected && writes(flags.0) {
                log::warn!(
                    "git sentry: refused opening {} for writing",
                    crate::display::escape_path(&rel)
                );
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
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        self.counts.add(Op::Read);
        let r = self.handle_or_node(fh, ino, false).and_then(|f| {
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
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        self.counts.add(Op::Write);
        self.guest_changes(ino);
        match self.handle_or_node(fh, ino, true).and_then(|f| {
            kill_priv(&*f)?;
            f.write_all_at(data, offset).map_err(errno)
        }) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lo: fuser::LockOwner, reply: ReplyEmpty) {
        self.counts.add(Op::Flush);
        // Nothing is buffered here; the kernel stops sending FLUSH.
        reply.error(Errno::ENOSYS)
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
        self.counts.add(Op::Release);
        self.t.lock().unwrap().handles.remove(&fh.0);
        reply.ok()
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.counts.add(Op::Fsync);
        let r = self.handle_or_node(fh, ino, false).and_then(|f| {
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
        self.counts.add(Op::Opendir);
        match self.node(ino) {
            Ok(_) => {
                let fh = self.add_handle(Handle::Dir(Arc::new(Vec::new())));
                // The kernel keeps listings until the directory changes
                // (through the view, or on the host: see fusewatch).
                reply.opened(
                    FileHandle(fh),
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
                )
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        self.counts.add(Op::Readdir);
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
        self.counts.add(Op::Releasedir);
        self.t.lock().unwrap().handles.remove(&fh.0);
        reply.ok()
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.counts.add(Op::Fsyncdir);
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.counts.add(Op::Statfs);
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
        self.counts.add(Op::Create);
        let r = (|| {
            let _shape = self.shape_guard(name);
            let (side, rel, d) = self.prepare_new(parent, name, false)?;
            self.guest_changed.mark(&rel);
            let no_open = self.no_open.load(Ordering::Relaxed);
            let mut fl = open_flags(flags) | OFlags::CREATE | OFlags::from_bits_retain((flags & sys::O_EXCL) as u32);
            if no_open {
                // The fd becomes the node's cached fd: readable and writable,
                // positioned writes (the kernel computes append offsets).
                fl = (fl - OFlags::RWMODE - OFlags::APPEND) | OFlags::RDWR;
            }
            let mode = Mode::from_raw_mode(host_mode(side, mode, false));
            // Exclusive first, so the view knows whether it made the file.
            let (fd, made) = match rustix::fs::openat2(&d, name, fl | OFlags::EXCL, mode, resolve()) {
                Ok(fd) => (fd, true),
                Err(rustix::io::Errno::EXIST) if !fl.contains(OFlags::EXCL) => (
                    rustix::fs::openat2(&d, name, fl, mode, resolve()).map_err(errno)?,
                    false,
                ),
                Err(e) => return Err(errno(e)),
            };
            let a = self.remember(side, &rel)?;
            if made {
                self.made(a.ino.0);
            }
            let ttl = self.ttl(side, &rel);
            let f = Arc::new(File::from(fd));
            if no_open {
                // With handle-less opens the kernel sends no RELEASE for a
                // created file either: its fd joins the node's cache and the
                // kernel gets no handle.
                self.cache_fd(a.ino.0, f, true);
                return Ok((a, ttl, 0));
            }
            Ok((a, ttl, self.add_handle(Handle::File(f))))
        })();
        match r {
            Ok((a, ttl, fh)) => reply.created(&ttl, &a, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

impl View {
    fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let rel = prel.join(name);
            let (side, _) = self.find(pside, &rel)?;
            if self.protected_at(side, &rel) {
                log::warn!("git sentry: refused removing {}", crate::display::escape_path(&rel));
                return Err(Errno::EPERM);
            }
            let id = self.known(side, &rel).unwrap_or(u64::MAX);
            if self.t.lock().unwrap().nodes.get(&id).is_some_and(|n| n.protected) {
                return Err(Errno::EPERM);
            }
            let d = self.dir(side, &prel)?;
            let fl = if dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
            if !dir {
                self.pin(side, &rel);
            }
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

// ---- ignored paths: what is Domain-side ------------------------------------
//
// A path is Domain-side (served from the ignored store, never the host
// workspace) when the rules snapshot ignores it, or when the host file at
// that name is one whose identity (st_dev, st_ino) is hidden: ignored when
// the Domain first saw it (sticky across generations), or found ignored
// below a host directory the sandbox renamed. Deciding by identity is what
// keeps `/config/master.key` hidden after `mv config c2`.

/// Most entries one directory rename may scan for hidden files; beyond it
/// the rename answers EXDEV (`mv` then copies what it can see).
const HIDE_SCAN_MAX: usize = 200_000;

impl View {
    /// True when the entry at view path `rel` (a directory when `dir`),
    /// whose parent is on `parent_side`, is Domain-side: it lives in the
    /// ignored store and creating, renaming or linking it must not touch
    /// the host workspace.
    pub(crate) fn is_domain_side(&self, parent_side: Side, rel: &Path, dir: bool) -> bool {
        if parent_side == Side::Store {
            return true;
        }
        if self.rules.is_none() {
            return false;
        }
        self.ignored(rel, dir) || self.hidden_host_at(rel)
    }

    /// True when the host file with this identity is hidden.
    fn is_hidden_id(&self, dev: u64, ino: u64) -> bool {
        self.rules.as_ref().is_some_and(|r| r.is_hidden_id(dev, ino))
            || self.more_hidden.lock().unwrap().contains(&(dev, ino))
    }

    fn is_hidden_host(&self, st: &rustix::fs::Stat) -> bool {
        self.rules.is_some() && self.is_hidden_id(st.st_dev, st.st_ino)
    }

    /// True when the host has an entry at `rel` and it is hidden.
    fn hidden_host_at(&self, rel: &Path) -> bool {
        self.stat(Side::Host, rel).is_ok_and(|st| self.is_hidden_host(&st))
    }

    /// Hides one host identity for the rest of the session and later
    /// generations.
    fn hide_id(&self, dev: u64, ino: u64, rel: &Path) {
        if self.is_hidden_id(dev, ino) {
            return;
        }
        self.more_hidden.lock().unwrap().insert((dev, ino));
        if let Some(p) = &self.sticky_path {
            let e = crate::view::ignored::StickyEntry {
                dev,
                ino,
                rel: rel.to_path_buf(),
            };
            if let Err(err) = crate::view::ignored::append_sticky(p, &e) {
                log::warn!("ignored paths: {err}");
            }
        }
    }

    /// Before host directory `rel` moves: everything below it that is
    /// hidden now (by the rules at its current name, or by identity) is
    /// hidden by identity, so no new name reveals it.
    fn hide_below(&self, rel: &Path) -> Result<(), Errno> {
        let rules = match &self.rules {
            Some(r) => r,
            None => return Ok(()),
        };
        let mut found = Vec::new();
        let mut stack = vec![rel.to_path_buf()];
        let mut seen = 0usize;
        while let Some(d) = stack.pop() {
            let fd = self.dir(Side::Host, &d)?;
            let dev = rustix::fs::fstat(&fd).map_err(errno)?.st_dev;
            each_entry(&fd, |name, file_type, ino| {
                seen += 1;
                if seen > HIDE_SCAN_MAX {
                    log::warn!(
                        "ignored paths: {} is too large to rename through the view (EXDEV)",
                        crate::display::escape_path(rel)
                    );
                    return Err(Errno::EXDEV);
                }
                let child = d.join(name);
                let is_d = file_type == rustix::fs::FileType::Directory;
                if rules.is_ignored(&child, is_d) || self.is_hidden_id(dev, ino) {
                    found.push((dev, ino, child));
                } else if is_d && name != ".git" {
                    stack.push(child);
                }
                Ok(())
            })?;
        }
        for (dev, ino, child) in found {
            self.hide_id(dev, ino, &child);
        }
        Ok(())
    }

    /// After host directory `from` moved to `to`: the store's entries kept
    /// under `from` (what the sandbox wrote at ignored names there) move too.
    fn store_follows(&self, from: &Path, to: &Path) {
        if self.stat(Side::Store, from).is_err() {
            return;
        }
        let (fp, fname) = split(from);
        let (tp, tname) = split(to);
        let r = self.scaffold(tp).and_then(|()| {
            let d1 = self.dir(Side::Store, fp)?;
            let d2 = self.dir(Side::Store, tp)?;
            rustix::fs::renameat(&d1, fname, &d2, tname).map_err(errno)
        });
        match r {
            Ok(()) => self.renamed(Side::Store, from, to),
            Err(e) => log::warn!(
                "ignored paths: the Domain's entries under {} stay there after the rename ({e:?})",
                crate::display::escape_path(from)
            ),
        }
    }
}

// ---- mounting ------------------------------------------------------------

/// A served view; dropping it stops serving (the mount goes with the
/// supervisor's mount namespace).
pub struct Served {
    _session: fuser::BackgroundSession,
    counts: Arc<Counts>,
    mountpoint: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.counts.write_out(&self.mountpoint);
    }
}

impl Served {
    /// The session's server loop returned: the connection is gone.
    pub fn ended(&self) -> bool {
        self._session.guard.is_finished()
    }
}

/// Mounts `view` at `mountpoint` (in the caller's mount namespace, where it
/// must be root of its user namespace) and serves it on background threads.
pub fn serve(view: View, mountpoint: &Path, relay: Option<Relay>) -> io::Result<Served> {
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
    let data = format!("fd={},rootmode=40000,user_id=0,group_id=0,allow_other", dev.as_raw_fd());
    crate::sys::mount(
        "lazaret",
        mountpoint,
        "fuse",
        sys::MS_NOSUID | sys::MS_NODEV,
        Some(&data),
    )?;
    let mut cfg = fuser::Config::default();
    cfg.n_threads = Some(2);
    cfg.clone_fd = true;
    let watched = match &view.watch {
        Some(w) => Some((w.clone(), view.t.clone(), view.host.try_clone()?)),
        None => None,
    };
    let guest_changed = view.guest_changed.clone();
    let counts = view.counts.clone();
    let session = fuser::Session::from_fd(view, OwnedFd::from(dev), fuser::SessionACL::All, cfg)?;
    if let Some((w, t, host)) = watched {
        let notifier = session.notifier();
        std::thread::Builder::new()
            .name("view-watch".into())
            .spawn(move || watch_loop(&w, &t, &host, &notifier, relay.as_ref().map(|r| (r, &*guest_changed))))?;
    }
    Ok(Served {
        _session: session.spawn()?,
        counts,
        mountpoint: mountpoint.to_path_buf(),
    })
}

/// The watcher thread: host-side changes become kernel invalidations. Never
/// holds the tables while notifying (the kernel may wait for a request the
/// server threads are answering).
fn watch_loop(
    w: &Watches,
    t: &Mutex<Tables>,
    host: &OwnedFd,
    notifier: &fuser::Notifier,
    relay: Option<(&Relay, &GuestChanged)>,
) {
    let node_of = |rel: &Path| -> Option<u64> {
        if rel.as_os_str().is_empty() {
            return Some(1);
        }
        t.lock().unwrap().by_key.get(&(Side::Host, rel.to_path_buf())).copied()
    };
    loop {
        let events = match w.read() {
            Ok(ev) => ev,
            Err(e) => {
                log::warn!("workspace view: watcher stopped ({e}); host edits show up within 1 s");
                w.set_unhealthy();
                invalidate(&crate::view::watch::plan_all(&all_nodes(t)), notifier);
                return;
            }
        };
        for ev in &events {
            if ev.mask & sys::IN_IGNORED != 0 {
                w.dropped(ev.wd);
            }
        }
        let events: Vec<_> = events.into_iter().filter(|ev| !already_known(ev, w, t, host)).collect();
        if let Some((tx, own)) = relay {
            for rel in crate::view::watch::relayed(&events, &|wd| w.dir_of(wd)) {
                if !own.recent(&rel) {
                    let _ = tx.send(rel);
                }
            }
        }
        let plan = crate::view::watch::plan(&events, &|wd| w.dir_of(wd), &node_of);
        if plan.contains(&Inval::All) {
            invalidate(&crate::view::watch::plan_all(&all_nodes(t)), notifier);
        } else {
            invalidate(&plan, notifier);
        }
    }
}

/// Whether host event `ev` tells the kernel nothing it does not hold:
/// - an attribute change after which the file stats exactly as the view
///   last told the kernel (typically the view's own chown, chmod or utimes,
///   answered with the new attributes);
/// - the creation of a name the view itself just made (the kernel got the
///   entry in the reply, and dropped the directory's cached attributes and
///   listing itself), still the same host file.
///
/// Anything else, or anything that cannot be checked, is invalidated.
fn already_known(ev: &crate::view::watch::Event, w: &Watches, t: &Mutex<Tables>, host: &OwnedFd) -> bool {
    let m = ev.mask & !crate::sys::IN_ISDIR;
    if ev.name.is_empty() || (m != crate::sys::IN_ATTRIB && m != crate::sys::IN_CREATE) {
        return false;
    }
    let Some(dir) = w.dir_of(ev.wd) else { return false };
    let rel = dir.join(&ev.name);
    let key = (Side::Host, rel);
    let (id, was, made, host_ino) = {
        let t = t.lock().unwrap();
        let Some(&id) = t.by_key.get(&key) else { return false };
        match t.nodes.get(&id) {
            Some(n) if !n.gone => (id, n.told, n.made_here, n.host_ino),
            _ => return false,
        }
    };
    let p = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir.as_path()
    };
    let st = match rustix::fs::openat2(
        host,
        p,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve(),
    )
    .and_then(|d| rustix::fs::statat(&d, ev.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW))
    {
        Ok(st) => st,
        Err(_) => return false,
    };
    if m == crate::sys::IN_ATTRIB {
        return was == Some(told(&st));
    }
    if !made || st.st_ino != host_ino {
        return false;
    }
    // Once per creation: a later IN_CREATE of the name is the host's.
    let mut t = t.lock().unwrap();
    match t.nodes.get_mut(&id) {
        Some(n) if n.made_here => {
            n.made_here = false;
            true
        }
        _ => false,
    }
}

/// Every live host node as (id, parent id, name).
fn all_nodes(t: &Mutex<Tables>) -> Vec<(u64, Option<u64>, OsString)> {
    let t = t.lock().unwrap();
    t.nodes
        .iter()
        .filter(|(_, n)| n.side == Side::Host && !n.gone)
        .map(|(&id, n)| {
            let (parent, name) = split(&n.rel);
            let pid = if parent.as_os_str().is_empty() {
                Some(1)
            } else {
                t.by_key.get(&(Side::Host, parent.to_path_buf())).copied()
            };
            (id, pid.filter(|_| id != 1), name.to_os_string())
        })
        .collect()
}

fn invalidate(plan: &[Inval], n: &fuser::Notifier) {
    for i in plan {
        // ENOENT: the kernel no longer holds it, which is just as good.
        let _ = match i {
            Inval::Entry { parent, name } => n.inval_entry(INodeNo(*parent), name),
            Inval::Inode(id) => n.inval_inode(INodeNo(*id), 0, 0),
            Inval::All => Ok(()),
        };
    }
}

/// Why the workspace views could not be served: a variant per step.
/// `Display` is the sentence the supervisor reports.
#[derive(Debug)]
pub enum ViewError {
    /// The coordinator's `--views` file.
    Plan(crate::wire::FileError),
    /// The repository layout of a view's source.
    Layout(crate::view::sentry::GitError),
    /// The ignored store: sticky names, rules history, the rules walk.
    Ignored(crate::view::ignored::IgnoredError),
    /// Opening a view's source directory.
    Open(PathBuf, io::Error),
    /// Mounting a view (its mount point).
    Serve(PathBuf, io::Error),
}

impl std::fmt::Display for ViewError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            ViewError::Plan(e) => write!(f, "reading the views: {e}"),
            ViewError::Layout(e) => write!(f, "{e}"),
            ViewError::Ignored(e) => write!(f, "{e}"),
            ViewError::Open(p, e) => write!(f, "opening {} for the workspace view: {e}", p.display()),
            ViewError::Serve(p, e) => write!(
                f,
                "serving the workspace view at {}: {e} (run `lazaret doctor`: /dev/fuse must be usable)",
                p.display()
            ),
        }
    }
}

impl std::error::Error for ViewError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ViewError::Plan(e) => Some(e),
            ViewError::Layout(e) => Some(e),
            ViewError::Ignored(e) => Some(e),
            ViewError::Open(_, e) | ViewError::Serve(_, e) => Some(e),
        }
    }
}

/// Where the workspace view sends the host paths (view-relative) whose
/// host-side changes watchers inside should hear of (`crate::view::watch::relayed`).
pub type Relay = std::sync::mpsc::Sender<PathBuf>;

/// The supervisor's part: reads the coordinator's `--views` file and serves
/// every view; the workspace view (the first) relays host changes to
/// `relay`. Called as root of the supervisor's user namespace, before
/// runsc starts.
pub fn start_views(file: &Path, relay: Option<Relay>) -> Result<Vec<Served>, ViewError> {
    let mut relay = relay;
    let (owner, specs) = crate::wire::plan::read_views(file).map_err(ViewError::Plan)?;
    // Modes the sandbox asks for are applied as given (the guest applied its umask).
    crate::sys::umask(0);
    // Cached per-node fds (FD_CACHE per view) and gVisor's many opens.
    crate::sys::raise_nofile();
    set_guest_owner(owner);
    let mut served = Vec::new();
    for v in specs {
        let store = match &v.store {
            Some(dir) => {
                use ViewError::Ignored;
                let layout = crate::view::sentry::discover(&v.source).map_err(ViewError::Layout)?;
                let sticky = crate::view::ignored::sticky_file(dir);
                let previous = crate::view::ignored::read_sticky(&sticky).map_err(Ignored)?;
                let hist_file = crate::view::ignored::rules_history_file(dir);
                let history = crate::view::ignored::read_rules_history(&hist_file).map_err(Ignored)?;
                let rules = IgnoreRules::load_with_history(
                    &v.source,
                    layout.git_dir(),
                    layout.common_dir(),
                    &previous,
                    &history,
                )
                .map_err(Ignored)?;
                crate::view::ignored::write_sticky(&sticky, rules.sticky()).map_err(Ignored)?;
                crate::view::ignored::write_rules_history(&hist_file, rules.rules_history()).map_err(Ignored)?;
                Some((dir.as_path(), rules))
            }
            None => None,
        };
        let sentry = Sentry::for_view(&v.source, v.git_root);
        let view = View::new(&v.source, store, sentry)
            .map_err(|e| ViewError::Open(v.source.clone(), e))?
            .with_hooks(v.protect.clone());
        served.push(serve(view, &v.mountpoint, relay.take()).map_err(|e| ViewError::Serve(v.mountpoint.clone(), e))?);
    }
    Ok(served)
}

// ---- repository shapes (src/view/gitshape.rs) ----------------------------------

/// Names whose entry may be Domain-side for the shape rule: `.git`, the
/// shape names, and children of a `worktrees/` or `modules/` directory. No
/// syscall: a lookup of such a name also checks the store.
fn gitshape_candidate(rel: &Path) -> bool {
    let (parent, name) = split(rel);
    is_cow_config(rel)
        || gitshape::is_dotgit(name)
        || gitshape::is_shape_name(name)
        || parent.file_name().is_some_and(|p| p == "worktrees" || p == "modules")
}

/// `DIR/.git/config`: Git's own rewrites of it (`config.lock` renamed onto
/// it, as `git config` and `git submodule init` do) land in a Domain-side
/// copy; the host file never changes.
fn is_cow_config(rel: &Path) -> bool {
    let (parent, name) = split(rel);
    name == "config" && parent.file_name().is_some_and(|p| p == ".git")
}

impl View {
    /// Hook locations read from host Git's configuration (view paths):
    /// read-only inside.
    pub fn with_hooks(mut self, hooks: Vec<PathBuf>) -> View {
        self.hooks = hooks;
        self
    }

    /// Held from the side decision to the creation of an entry named `name`
    /// when it is a `.git` or shape name.
    fn shape_guard(&self, name: &OsStr) -> Option<std::sync::MutexGuard<'_, ()>> {
        (gitshape::is_dotgit(name) || gitshape::is_shape_name(name))
            .then(|| self.shape_lock.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// True when the sandbox may not change the entry at `rel` on `side`:
    /// the Git Sentry's names, host hook locations, and the sensitive paths
    /// of any host directory that is a repository shape now (made before or
    /// during the session). The store is the Domain's own: never protected.
    fn protected_at(&self, side: Side, rel: &Path) -> bool {
        side == Side::Host
            && (self.sentry.is_protected(rel)
                || self.hooks.iter().any(|h| {
                    // The location and its ancestors (a renamed ancestor
                    // would let another directory take its place).
                    rel.starts_with(h) || (!rel.as_os_str().is_empty() && h.starts_with(rel))
                })
                || gitshape::sensitive_anchors(rel).iter().any(|a| self.host_shape(a)))
    }

    fn host_has(&self, rel: &Path) -> bool {
        self.stat(Side::Host, rel).is_ok()
    }

    /// The host directory `dir` is a repository shape (`gitshape::is_shape`).
    fn host_shape(&self, dir: &Path) -> bool {
        gitshape::is_shape(&|n| self.host_has(&dir.join(n)))
    }

    /// `rel` lies inside a host Git directory: a `.git` or a shape ancestor.
    fn in_host_git_dir(&self, rel: &Path) -> bool {
        if self.sentry.in_git_dir(rel) {
            return true;
        }
        let mut p = rel.parent();
        while let Some(d) = p {
            if self.host_shape(d) {
                return true;
            }
            p = d.parent();
        }
        false
    }

    /// True when a new entry at `rel` (its parent on the host) must not be
    /// made on the host: a `.git` the host lacks, a new linked worktree or
    /// submodule Git directory, or the name completing a repository shape.
    fn git_domain_side(&self, rel: &Path) -> bool {
        let (parent, name) = split(rel);
        if !gitshape_candidate(rel) {
            return false;
        }
        if is_cow_config(rel) {
            return true;
        }
        if gitshape::is_dotgit(name) {
            return !self.host_has(rel);
        }
        let slot = gitshape::is_new_gitdir_slot(rel, &|p| {
            self.sentry.in_git_dir(p) || p.parent().is_some_and(|g| self.host_shape(g))
        });
        if slot {
            return !self.host_has(rel);
        }
        gitshape::is_shape_name(name)
            && !self.host_shape(parent)
            && gitshape::completes_shape(name, &|n| self.host_has(&parent.join(n)))
    }

    /// A Domain-side Git entry is wanted but the view has no store (ignored
    /// isolation off, or a common-directory view): refuse.
    fn git_refused(&self, rel: &Path) -> bool {
        self.store.is_none() && self.git_domain_side(rel)
    }

    /// The store's entry for a Domain-side Git name under a host parent.
    /// A name the host has is the host's (the store may hold a directory of
    /// that name as scaffolding for deeper entries), except `.git/config`'s
    /// Domain-side copy.
    fn git_store_entry(&self, rel: &Path) -> Option<rustix::fs::Stat> {
        if self.store.is_none() || !gitshape_candidate(rel) {
            return None;
        }
        let st = self.stat(Side::Store, rel).ok()?;
        (is_cow_config(rel) || !self.host_has(rel)).then_some(st)
    }

    /// Renames a host regular file onto a Domain-side Git name (Git's
    /// `HEAD.lock` to `HEAD` completing a shape): copies it into the store
    /// under a temporary name, renames that into place, removes the host
    /// file. The node follows the file to the store.
    fn move_file_to_store(
        &self,
        id: u64,
        from: &Path,
        to: &Path,
        nprel: &Path,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        use std::io::{Read, Write};
        self.scaffold(nprel)?;
        let d2 = self.dir(Side::Store, nprel)?;
        if flags.contains(RenameFlags::RENAME_NOREPLACE)
            && rustix::fs::statat(&d2, newname, AtFlags::SYMLINK_NOFOLLOW).is_ok()
        {
            return Err(Errno::EEXIST);
        }
        let mut src = self.open_path(Side::Host, from, false)?;
        let mode = rustix::fs::fstat(&src).map_err(errno)?.st_mode & 0o7777;
        let mut tmp_name = newname.to_os_string();
        tmp_name.push(format!(".lazaret-move-{id}"));
        let fd = rustix::fs::openat2(
            &d2,
            &tmp_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(mode),
            resolve(),
        )
        .map_err(errno)?;
        let mut dst = File::from(fd);
        let mut buf = Vec::new();
        src.read_to_end(&mut buf).map_err(errno)?;
        if let Err(e) = dst.write_all(&buf) {
            let _ = rustix::fs::unlinkat(&d2, &tmp_name, AtFlags::empty());
            return Err(errno(e));
        }
        drop(dst);
        self.pin(Side::Store, to);
        rustix::fs::renameat(&d2, &tmp_name, &d2, newname).map_err(errno)?;
        let (fparent, fname) = split(from);
        let d1 = self.dir(Side::Host, fparent)?;
        rustix::fs::unlinkat(&d1, fname, AtFlags::empty()).map_err(errno)?;
        let st = self.stat(Side::Store, to)?;
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        if let Some(old) = t.by_key.remove(&(Side::Store, to.to_path_buf())) {
            if let Some(n) = t.nodes.get_mut(&old) {
                n.gone = true;
            }
        }
        if t.by_key.get(&(Side::Host, from.to_path_buf())) == Some(&id) {
            t.by_key.remove(&(Side::Host, from.to_path_buf()));
        }
        if let Some(n) = t.nodes.get_mut(&id) {
            if n.fd.is_some() {
                if n.pinned {
                    t.pinned_fds -= 1;
                } else {
                    t.cached_fds -= 1;
                }
            }
            n.fd = None;
            n.pinned = false;
            n.side = Side::Store;
            n.rel = to.to_path_buf();
            n.host_ino = st.st_ino;
            t.by_key.insert((Side::Store, to.to_path_buf()), id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
