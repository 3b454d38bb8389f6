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
//! symlink can never lead outside either tree (a path longer than one call
//! takes is walked in pieces, each beneath the last). A node stands for a
//! file: hard links the kernel looks up are one node (keyed by host device
//! and inode), and a node holds an `O_PATH` handle of its file, so an open
//! file keeps working after unlink or rename over it, as on a plain bind;
//! a node without a handle refuses (ESTALE) once its path names another
//! file. Ids are never reused.
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
//!   reaches the host. Cached fds are read-only, but for a write fd used
//!   within the last `WRITE_IDLE`;
//! - directory listings are cached by the kernel (`FOPEN_CACHE_DIR`).
//!
//! Threads: `fuser`'s event loops (two), the watcher, and `view-writers`
//! (closes idle write fds).

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
use crate::view::budget::{self, Budget};
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
/// Per-view bound on cached per-node read (or write) fds.
const FD_CACHE: usize = 256;
/// Per-view bound on the `O_PATH` handles nodes keep of their files
/// (`Node::file`; a quarter of the open-file limit if that is less), beyond
/// which a node is served by path; `PINNED_MAX` more are allowed for files
/// unlinked or renamed over through the view.
const HANDLES_MAX: usize = 8192;
const PINNED_MAX: usize = 1024;
/// Paths up to this length go to one `openat2`; longer ones are walked in
/// pieces (PATH_MAX is 4096 per call, the tree below the root may be deeper).
const WALK_CHUNK: usize = 2048;
/// A cached write fd goes once unused this long (gVisor keeps its own fds
/// of a file open after the guest closed it, so the kernel's FLUSH comes
/// late): a host `exec` of a file the sandbox wrote is not `Text file busy`.
const WRITE_IDLE: Duration = Duration::from_secs(1);
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
/// developer cannot edit as. Such a `chown` is kept Domain-side instead
/// (`Guest`): it succeeds and shows inside. The Domain's own storage may
/// be chowned.
fn host_owner_stays(side: Side, uid: Option<u32>, gid: Option<u32>) -> bool {
    side == Side::Host && (uid.is_some_and(|u| u != 0) || gid.is_some_and(|g| g != 0))
}

/// What the sandbox set on a host file that the host file does not get
/// (an owner other than the developer, set-id or world-write bits): kept
/// for the life of the view, keyed by host identity, shown inside in
/// place of the host's values. Only what the sandbox sees depends on it;
/// the host file stays the developer's with safe modes.
#[derive(Clone, Copy, Default)]
struct Guest {
    /// Owner and group as the sandbox named them.
    uid: Option<u32>,
    gid: Option<u32>,
    /// The full mode bits the sandbox asked for (07777).
    mode: Option<u32>,
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
    /// More view paths of the same file (hard links the kernel looked up).
    aliases: Vec<PathBuf>,
    /// No path names the file any more (removed, overwritten): path
    /// operations fail, its handle serves reads, writes and attributes.
    gone: bool,
    /// Ever seen at a protected path (sticks across hard links).
    protected: bool,
    lookups: u64,
    dir: bool,
    /// The host (or store) file the node stands for: (device, inode).
    host_dev: u64,
    host_ino: u64,
    /// An `O_PATH` handle of the file (not for directories), kept until the
    /// kernel forgets the node: the node is this file whatever happens to
    /// its names, as an open fd on a plain bind is (`reopen`).
    file: Option<Arc<OwnedFd>>,
    /// Cached fd for handle-less reads and writes, and whether it writes.
    /// A write fd is kept only until the kernel's next FLUSH of the node.
    fd: Option<(Arc<File>, bool)>,
    /// The attributes last sent to the kernel for this node.
    told: Option<Told>,
    /// Made by the view (mkdir, mknod, symlink, link, an exclusive create)
    /// and its host IN_CREATE not seen yet.
    made_here: bool,
    /// The file's version (`version`) when the guest last read or changed
    /// it through the view: a host file changed since then by a host
    /// process is not overwritten in place from inside (`fresh_for_write`).
    seen: Version,
}

/// A host file's version as far as the view can tell: size, mtime, ctime.
type Version = [i64; 5];

fn version(st: &rustix::fs::Stat) -> Version {
    [
        st.st_size,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ]
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
            aliases: Vec::new(),
            host_dev: st.st_dev,
            host_ino: st.st_ino,
            file: None,
            fd: None,
            told: None,
            made_here: false,
            seen: version(st),
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
    /// Nodes with a cached fd, oldest first (may hold stale ids).
    fd_order: VecDeque<u64>,
    cached_fds: usize,
    /// Non-directory nodes by (side, device, inode): hard links the kernel
    /// looks up are one node, one inode number, one set of attributes.
    by_ino: HashMap<(Side, u64, u64), u64>,
    /// Nodes holding an `O_PATH` handle (`Node::file`).
    handles_held: usize,
    /// Nodes with a cached write fd, and when it last served a write.
    writers: HashMap<u64, std::time::Instant>,
}

impl Tables {
    fn drop_write_fd(&mut self, id: u64) {
        self.writers.remove(&id);
        if let Some(n) = self.nodes.get_mut(&id) {
            if matches!(n.fd, Some((_, true))) {
                n.fd = None;
                self.cached_fds -= 1;
            }
        }
    }

    /// Drops the write fds unused for `WRITE_IDLE` (the reaper thread).
    fn drop_idle_writers(&mut self) {
        let idle: Vec<u64> = self
            .writers
            .iter()
            .filter(|(_, t)| t.elapsed() >= WRITE_IDLE)
            .map(|(id, _)| *id)
            .collect();
        for id in idle {
            self.drop_write_fd(id);
        }
    }

    /// View path `rel` no longer names node `id`'s file: another path of
    /// it becomes its name, or, with none left, the node is gone.
    fn detach(&mut self, id: u64, side: Side, rel: &Path) {
        let key = (side, rel.to_path_buf());
        if self.by_key.get(&key) == Some(&id) {
            self.by_key.remove(&key);
        }
        let Some(n) = self.nodes.get_mut(&id) else { return };
        n.aliases.retain(|a| a != rel);
        if n.rel == rel {
            match n.aliases.pop() {
                Some(a) => n.rel = a,
                None => n.gone = true,
            }
        }
    }
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
    /// Git's execution surface (`hostexec`), kept current: read-only.
    exec: Option<crate::view::hostexec::Live>,
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
    /// Identities hidden during this session: (device, inode) to birth
    /// time (`view::ignored::same_birth`).
    more_hidden: Mutex<HashMap<(u64, u64), u64>>,
    sticky_path: Option<PathBuf>,
    /// Requests answered, per opcode (src/view/counts.rs).
    counts: Arc<Counts>,
    /// Guest owners and modes of host files, by (device, inode) (`Guest`).
    guest: Mutex<HashMap<(u64, u64), Guest>>,
    /// Host directories the sandbox renamed this session: (path now,
    /// original path), oldest first (`ignored` applies the rules at both).
    moved_dirs: Mutex<Vec<(PathBuf, PathBuf)>>,
    /// A refusal of a host-locked file was logged (`not_locked_on_host`).
    warned_locked: AtomicBool,
    /// A stale overwrite was refused and logged (`fresh_for_write`).
    warned_stale: AtomicBool,
    /// `HANDLES_MAX`, or a quarter of the open-file limit when that is less.
    handles_max: usize,
    /// Host paths the sandbox changed through the view, and when: their
    /// host events are the sandbox's own, not relayed back (`relay`).
    guest_changed: Arc<GuestChanged>,
    /// The Domain's disk budget (`view::budget`), and whether it counts
    /// the whole view (`/tmp`) or only its ignored store.
    budget: Option<(Arc<Budget>, bool)>,
    /// A view of the Domain's own storage (`View::storage`): owners as
    /// stored, new entries owned by the requester, xattrs writable.
    raw: bool,
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

thread_local! {
    /// Inside one READDIRPLUS (`ParentMemo`): the listed directory's fds,
    /// by side and view path, opened once for all of its entries.
    static PARENT_MEMO: std::cell::RefCell<Option<Vec<(Side, PathBuf, OwnedFd)>>> =
        const { std::cell::RefCell::new(None) };
}

/// While alive, `View::at_dir` keeps the directories it opens on this
/// thread (one request: what it opened is what a lookup at that moment
/// would have opened).
struct ParentMemo;

impl ParentMemo {
    fn enter() -> ParentMemo {
        PARENT_MEMO.with(|m| *m.borrow_mut() = Some(Vec::new()));
        ParentMemo
    }
}

impl Drop for ParentMemo {
    fn drop(&mut self) {
        PARENT_MEMO.with(|m| *m.borrow_mut() = None);
    }
}

/// `openat2(root, p, flags)` beneath `root`, without symlinks, for a path
/// of any length: a long one is walked in pieces of at most `WALK_CHUNK`
/// bytes (whole components), each beneath the directory the last reached,
/// so the whole walk stays beneath `root` as one call would.
fn beneath(root: BorrowedFd<'_>, p: &Path, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
    if p.as_os_str().len() <= WALK_CHUNK {
        return rustix::fs::openat2(root, p, flags, mode, resolve());
    }
    let mut pieces: Vec<PathBuf> = vec![PathBuf::new()];
    for c in p.components() {
        let last = pieces.last_mut().expect("one piece");
        if !last.as_os_str().is_empty() && last.as_os_str().len() + c.as_os_str().len() + 1 > WALK_CHUNK {
            pieces.push(PathBuf::new());
        }
        pieces.last_mut().expect("one piece").push(c.as_os_str());
    }
    let (final_piece, dirs) = pieces.split_last().expect("one piece");
    let mut cur: Option<OwnedFd> = None;
    for d in dirs {
        let at = cur.as_ref().map_or(root, |f| f.as_fd());
        let next = rustix::fs::openat2(
            at,
            d,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )?;
        cur = Some(next);
    }
    let at = cur.as_ref().map_or(root, |f| f.as_fd());
    rustix::fs::openat2(at, final_piece, flags, mode, resolve())
}

/// `/proc/self/fd/N` of a handle: opening it reaches the very file the
/// handle holds (renamed, replaced or unlinked since), nothing else.
fn proc_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// A read (or read-write, else write-only) fd of the file `handle` holds.
fn reopen(handle: &OwnedFd, write: bool) -> Result<File, Errno> {
    let p = proc_path(handle);
    let open = |fl: OFlags| rustix::fs::open(&p, fl | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty()).map_err(errno);
    let fd = if write {
        open(OFlags::RDWR).or_else(|_| open(OFlags::WRONLY))?
    } else {
        open(OFlags::RDONLY)?
    };
    Ok(File::from(fd))
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
        // Before 1970: `sec` is negative, `nsec` still counts forward.
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

/// A time as (seconds, nanoseconds) since 1970, negative seconds before.
fn timespec(t: SystemTime) -> rustix::fs::Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => rustix::fs::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as _,
        },
        Err(e) => {
            // fuser 0.18 makes a request's time before 1970 as
            // `UNIX_EPOCH - (|sec|, nsec)` (its own TODO): undo exactly that.
            let d = e.duration();
            rustix::fs::Timespec {
                tv_sec: -(d.as_secs() as i64),
                tv_nsec: d.subsec_nanos() as _,
            }
        }
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
        Some(TimeOrNow::SpecificTime(t)) => timespec(t),
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
            exec: None,
            shape_lock: Mutex::new(()),
            t: Arc::new(Mutex::new(Tables {
                nodes,
                by_key: HashMap::new(),
                next_id: 2,
                handles: HashMap::new(),
                next_fh: 1,
                fd_order: VecDeque::new(),
                cached_fds: 0,
                by_ino: HashMap::new(),
                handles_held: 0,
                writers: HashMap::new(),
            })),
            watch,
            no_open: AtomicBool::new(false),
            more_hidden: Mutex::new(Default::default()),
            sticky_path,
            counts: Arc::default(),
            guest: Mutex::new(HashMap::new()),
            moved_dirs: Mutex::new(Vec::new()),
            warned_locked: AtomicBool::new(false),
            warned_stale: AtomicBool::new(false),
            handles_max: {
                let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
                lim.map_or(HANDLES_MAX, |l| HANDLES_MAX.min((l / 4) as usize).max(64))
            },
            guest_changed: Arc::default(),
            budget: None,
            raw: false,
        })
    }

    /// A view of the Domain's own storage `dir` as it is: no host side, no
    /// rules, owners, modes and xattrs as stored, new entries owned by the
    /// id that asks for them. The kernel overlay of a persisted path keeps
    /// its upper and work directories on such a view
    /// (`storage::anchor::mount_all`), so that what the sandbox persists
    /// passes a budget (`with_budget`). It is mounted only in the
    /// supervisor's mount namespace; only the overlay uses it.
    pub fn storage(dir: &Path) -> io::Result<View> {
        let mut v = View::new(dir, None, Sentry::for_view(dir, false))?;
        v.store = Some(open_root(dir)?);
        v.watch = None;
        v.raw = true;
        if let Some(root) = v.t.lock().unwrap().nodes.get_mut(&1) {
            root.side = Side::Store;
        }
        Ok(v)
    }

    /// In a storage view, the entry `name` just made in `d` belongs to the
    /// requester (the kernel overlay creates with the owner's fsuid).
    fn own_new(&self, req: &Request, d: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
        if !self.raw || (req.uid() == 0 && req.gid() == 0) {
            return Ok(());
        }
        sys::lchownat(d, Path::new(name), Some(req.uid()), Some(req.gid())).map_err(errno)
    }

    /// Counts what the sandbox writes against `budget`: everything the
    /// view serves (`all`) or its ignored store only.
    pub fn with_budget(mut self, budget: Arc<Budget>, all: bool) -> View {
        self.budget = Some((budget, all));
        self
    }

    /// The budget that counts files on `side`, if any.
    fn budget_for(&self, side: Side) -> Option<&Budget> {
        match &self.budget {
            Some((b, all)) if *all || side == Side::Store => Some(b),
            _ => None,
        }
    }

    /// The budget that counts node `ino`'s file, if any (no table lookup
    /// without a budget).
    fn budget_of(&self, ino: INodeNo) -> Option<&Budget> {
        match &self.budget {
            None => None,
            Some((b, true)) => Some(b),
            Some((b, false)) => {
                let side = self.t.lock().unwrap().nodes.get(&ino.0).map(|n| n.side);
                (side == Some(Side::Store)).then_some(&**b)
            }
        }
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
        beneath(
            root,
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)
    }

    /// The attributes of the entry at `rel`, and for anything but a
    /// directory an `O_PATH` handle of it.
    fn stat_handle(&self, side: Side, rel: &Path) -> Result<(rustix::fs::Stat, Option<OwnedFd>), Errno> {
        if rel.as_os_str().is_empty() {
            return Ok((rustix::fs::fstat(self.root(side)?).map_err(errno)?, None));
        }
        let (parent, name) = split(rel);
        let fd = self.at_dir(side, parent, |d| {
            rustix::fs::openat(
                d,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno)
        })?;
        let st = rustix::fs::fstat(&fd).map_err(errno)?;
        Ok((st, (!is_dir(&st)).then_some(fd)))
    }

    /// Runs `f` on directory `rel` of `side` (as `dir` opens it). Inside a
    /// `ParentMemo` scope the fd is opened once and kept for the scope: a
    /// listing's entries all have one parent.
    fn at_dir<T>(
        &self,
        side: Side,
        rel: &Path,
        f: impl FnOnce(BorrowedFd<'_>) -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        PARENT_MEMO.with(|m| {
            let mut m = m.borrow_mut();
            let Some(v) = m.as_mut() else {
                let d = self.dir(side, rel)?;
                return f(d.as_fd());
            };
            let i = match v.iter().position(|(s, p, _)| *s == side && p == rel) {
                Some(i) => i,
                None => {
                    let d = self.dir(side, rel)?;
                    if v.len() >= 4 {
                        v.remove(0);
                    }
                    v.push((side, rel.to_path_buf(), d));
                    v.len() - 1
                }
            };
            f(v[i].2.as_fd())
        })
    }

    fn stat(&self, side: Side, rel: &Path) -> Result<rustix::fs::Stat, Errno> {
        if rel.as_os_str().is_empty() {
            return rustix::fs::fstat(self.root(side)?).map_err(errno);
        }
        let (parent, name) = split(rel);
        self.at_dir(side, parent, |d| {
            rustix::fs::statat(d, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)
        })
    }

    /// The node id of the entry at `rel`, if the kernel knows it.
    fn known(&self, side: Side, rel: &Path) -> Option<u64> {
        self.t.lock().unwrap().by_key.get(&(side, rel.to_path_buf())).copied()
    }

    fn node(&self, ino: INodeNo) -> Result<(Side, PathBuf, bool), Errno> {
        let (side, rel, protected, gone) = self.node_any(ino)?;
        if gone {
            return Err(Errno::ENOENT);
        }
        Ok((side, rel, protected))
    }

    /// Like `node`, for a node whose names are gone too (its handle still
    /// serves it): side, last path, protected, gone. Protected when any of
    /// its paths is.
    fn node_any(&self, ino: INodeNo) -> Result<(Side, PathBuf, bool, bool), Errno> {
        let t = self.t.lock().unwrap();
        let n = t.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
        let (side, rel, sticky, gone, aliases) = (n.side, n.rel.clone(), n.protected, n.gone, n.aliases.clone());
        drop(t);
        let protected = sticky || self.protected_at(side, &rel) || aliases.iter().any(|a| self.protected_at(side, a));
        Ok((side, rel, protected, gone))
    }

    /// Registers one kernel lookup of the entry at `rel` and returns its
    /// attributes under its node id.
    fn remember(&self, side: Side, rel: &Path) -> Result<FileAttr, Errno> {
        let (st, handle) = self.stat_handle(side, rel)?;
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
        let t = &mut *t;
        let existing = t.by_key.get(&key).copied();
        let same = |n: &Node| n.host_ino == st.st_ino && n.host_dev == st.st_dev;
        let id = match existing {
            // The same file as before.
            Some(id) if t.nodes.get(&id).is_some_and(same) => id,
            _ => {
                if let Some(old) = existing {
                    // Another file now has this path (replaced on the host).
                    t.detach(old, side, rel);
                }
                // Another name of a file the kernel knows: the same node.
                // Only a node holding a handle is sure to be that file (an
                // inode number is reused once its file is freed).
                let linked = if dir {
                    None
                } else {
                    t.by_ino
                        .get(&(side, st.st_dev, st.st_ino))
                        .copied()
                        .filter(|id| t.nodes.get(id).is_some_and(|n| same(n) && n.file.is_some()))
                };
                match linked {
                    Some(id) => {
                        let n = t.nodes.get_mut(&id).expect("node of a known inode");
                        if n.gone {
                            n.gone = false;
                            n.rel = rel.to_path_buf();
                        } else if n.rel != rel && !n.aliases.iter().any(|a| a == rel) {
                            n.aliases.push(rel.to_path_buf());
                        }
                        t.by_key.insert(key, id);
                        id
                    }
                    None => {
                        let id = t.next_id;
                        t.next_id += 1;
                        t.by_key.insert(key, id);
                        t.nodes.insert(id, Node::new(side, rel.to_path_buf(), &st));
                        if !dir {
                            t.by_ino.insert((side, st.st_dev, st.st_ino), id);
                        }
                        id
                    }
                }
            }
        };
        let keep = t.handles_held < self.handles_max;
        let n = t.nodes.get_mut(&id).expect("node of a known key");
        n.protected |= protected;
        n.lookups += 1;
        n.told = Some(told(&st));
        if n.file.is_none() && keep {
            if let Some(h) = handle {
                n.file = Some(Arc::new(h));
                t.handles_held += 1;
            }
        }
        Ok(self.shown(id, side, &st))
    }

    /// The attributes the sandbox sees for a file on `side`: the host's,
    /// with what it keeps Domain-side (`Guest`) in their place.
    fn shown(&self, id: u64, side: Side, st: &rustix::fs::Stat) -> FileAttr {
        let mut a = attr(id, st);
        if self.raw {
            (a.uid, a.gid) = (st.st_uid, st.st_gid);
        }
        if side == Side::Host {
            if let Some(g) = self.guest.lock().unwrap().get(&(st.st_dev, st.st_ino)) {
                if let Some(u) = g.uid {
                    a.uid = u;
                }
                if let Some(gid) = g.gid {
                    a.gid = gid;
                }
                if let Some(m) = g.mode {
                    a.perm = m as u16;
                }
            }
        }
        a
    }

    /// Keeps Domain-side what a chmod or chown of host file `st` asked for
    /// and the host file does not get. `mode`: the requested bits, `uid`
    /// and `gid`: the ids as the sandbox named them.
    fn keep_guest(&self, st: &rustix::fs::Stat, mode: Option<u32>, uid: Option<u32>, gid: Option<u32>) {
        let key = (st.st_dev, st.st_ino);
        let mut all = self.guest.lock().unwrap();
        let mut g = all.get(&key).copied().unwrap_or_default();
        let dir = is_dir(st);
        if let Some(m) = mode {
            let m = m & 0o7777;
            g.mode = (host_mode(Side::Host, m, dir) != m).then_some(m);
        }
        for (want, slot) in [(uid, &mut g.uid), (gid, &mut g.gid)] {
            if let Some(i) = want {
                // The developer's own id (shown as the guest owner) is the host's.
                *slot = (stored_id(Some(i)) != Some(0)).then_some(i);
            }
        }
        if (uid.is_some() || gid.is_some()) && !dir {
            // A chown clears set-user-ID, and set-group-ID with group
            // execute, as the kernel does.
            if let Some(m) = g.mode {
                let sgid = sys::S_ISGID | sys::S_IXGRP;
                let mut k = m & !sys::S_ISUID;
                if m & sgid == sgid {
                    k &= !sys::S_ISGID;
                }
                g.mode = (host_mode(Side::Host, k, dir) != k).then_some(k);
            }
        }
        if g.uid.is_none() && g.gid.is_none() && g.mode.is_none() {
            all.remove(&key);
        } else {
            all.insert(key, g);
        }
    }

    /// Records the attributes about to be sent for node `id`.
    fn note(&self, id: u64, st: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.told = Some(told(st));
        }
    }

    /// The guest has read node `id` as it is now.
    fn saw(&self, id: u64, st: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.seen = version(st);
        }
    }

    /// The guest changed node `id` from `pre` to `post`: what it knew
    /// stays current if it was current (its own change), and stays stale if
    /// a host change came first (an append to, or a `touch` of, a file the
    /// host rewrote does not make the guest's copy of it fresh).
    fn changed(&self, id: u64, pre: &rustix::fs::Stat, post: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            if n.seen == version(pre) {
                n.seen = version(post);
            }
        }
    }

    /// Refuses (EBUSY) a guest change that `overwrites` bytes of host file
    /// (`st`: a write below its size, a shrink to a shorter, non-empty size)
    /// when a host process changed the file since the guest last read
    /// or wrote it through the view. The guest's copy is stale: on a plain
    /// bind the kernel would have kept them coherent (shared page cache,
    /// shared locks); here the write would put old data over the host's new
    /// data. This is how a sandbox SQLite connection that outlived the
    /// host's last one would checkpoint its stale journal over the rows the
    /// host had just checkpointed. Appends and whole-file rewrites
    /// (truncation to 0) pass, as do files the host has not touched.
    fn fresh_for_write(&self, ino: INodeNo, st: &rustix::fs::Stat, overwrites: bool) -> Result<(), Errno> {
        let (side, seen, rel) = {
            let t = self.t.lock().unwrap();
            let Some(n) = t.nodes.get(&ino.0) else { return Ok(()) };
            (n.side, n.seen, n.rel.clone())
        };
        if side != Side::Host || !overwrites || seen == version(st) {
            return Ok(());
        }
        if !self.warned_stale.swap(true, Ordering::Relaxed) {
            log::warn!(
                "workspace view: refused overwriting {}: a host process changed it since the sandbox last read it (EBUSY; further refusals not logged)",
                crate::display::escape_path(&rel)
            );
        }
        Err(Errno::EBUSY)
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

    /// The fd a handle-less read (or write) of node `ino` goes through:
    /// the cached one, else one reopened from the node's handle (the very
    /// file, whatever became of its names), else one opened by path.
    fn node_file(&self, ino: INodeNo, write: bool) -> Result<Arc<File>, Errno> {
        self.node_file_with(ino, write, true)
    }

    /// `node_file`, keeping a newly opened fd in the cache only when `cache`
    /// (a truncate outside any write needs no write fd afterwards).
    fn node_file_with(&self, ino: INodeNo, write: bool, cache: bool) -> Result<Arc<File>, Errno> {
        let (side, rel, want, handle, gone) = {
            let mut t = self.t.lock().unwrap();
            let t = &mut *t;
            let n = t.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
            if write
                && (n.protected
                    || self.protected_at(n.side, &n.rel)
                    || n.aliases.iter().any(|a| self.protected_at(n.side, a)))
            {
                log::warn!("git sentry: refused writing {}", crate::display::escape_path(&n.rel));
                return Err(Errno::EPERM);
            }
            match &n.fd {
                Some((f, w)) if *w || !write => {
                    if write {
                        t.writers.insert(ino.0, std::time::Instant::now());
                    }
                    return Ok(f.clone());
                }
                _ => (n.side, n.rel.clone(), n.host_ino, n.file.clone(), n.gone),
            }
        };
        let f = match handle {
            Some(h) => Arc::new(reopen(&h, write)?),
            None if gone => return Err(Errno::ESTALE),
            None => {
                let f = Arc::new(self.open_path(side, &rel, write)?);
                if rustix::fs::fstat(&*f).map_err(errno)?.st_ino != want {
                    return Err(Errno::ESTALE);
                }
                f
            }
        };
        if cache {
            self.cache_fd(ino.0, f.clone(), write);
        }
        Ok(f)
    }

    /// Refuses (EBUSY) changing a host file another process holds a lock
    /// on: gVisor keeps file locks inside the sandbox, so a host SQLite
    /// connection's locks are invisible to the sandbox's, which would then
    /// "recover" (truncate, rewrite) the host's live `-shm` index and crash
    /// or lose the host's transactions. Refused loudly instead (the sandbox
    /// sees an I/O error; the supervisor log says why, once per view).
    fn not_locked_on_host(&self, ino: INodeNo, f: &impl AsFd) -> Result<(), Errno> {
        let host = self
            .t
            .lock()
            .unwrap()
            .nodes
            .get(&ino.0)
            .is_none_or(|n| n.side == Side::Host);
        if host && sys::locked_elsewhere(f) {
            if !self.warned_locked.swap(true, Ordering::Relaxed) {
                let rel = self
                    .t
                    .lock()
                    .unwrap()
                    .nodes
                    .get(&ino.0)
                    .map(|n| n.rel.clone())
                    .unwrap_or_default();
                log::warn!(
                    "workspace view: refused changing {}: a host process holds a lock on it (EBUSY; further refusals not logged)",
                    crate::display::escape_path(&rel)
                );
            }
            return Err(Errno::EBUSY);
        }
        Ok(())
    }

    /// Refuses (EBUSY) removing or replacing a host file a host process
    /// holds a lock on or has open for writing (the view's own write fd of
    /// it is dropped first): what it writes next would go to a file no
    /// name reaches. This is how a sandbox SQLite connection, which cannot
    /// see the host's locks and takes itself for the last one, would delete
    /// a live host `-wal` journal with the host's newest transactions.
    fn not_in_use_on_host(&self, id: u64, rel: &Path) -> Result<(), Errno> {
        self.t.lock().unwrap().drop_write_fd(id);
        let Ok(f) = self.open_path(Side::Host, rel, false) else {
            return Ok(());
        };
        self.not_locked_on_host(INodeNo(id), &f)?;
        if sys::open_for_write_elsewhere(&f) {
            log::warn!(
                "workspace view: refused removing or truncating {}: a host process has it open for writing (EBUSY)",
                crate::display::escape_path(rel)
            );
            return Err(Errno::EBUSY);
        }
        Ok(())
    }

    /// The node's cached fd, if any, and whether it writes.
    fn cached_fd(&self, ino: INodeNo) -> Option<(Arc<File>, bool)> {
        self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.fd.clone())
    }

    /// The attributes of node `ino` from its own fd or handle, when it has
    /// one (no path walk; right after unlink or rename too), with whether
    /// it is gone.
    fn handle_stat(&self, ino: INodeNo) -> Option<Result<(Side, PathBuf, rustix::fs::Stat, bool), Errno>> {
        let (side, rel, gone, fd, handle) = {
            let t = self.t.lock().unwrap();
            let n = t.nodes.get(&ino.0)?;
            (n.side, n.rel.clone(), n.gone, n.fd.clone(), n.file.clone())
        };
        let st = match (fd, handle) {
            (Some((f, _)), _) => rustix::fs::fstat(&*f),
            (None, Some(h)) => rustix::fs::fstat(&*h),
            (None, None) => return None,
        };
        Some(st.map_err(errno).map(|st| (side, rel, st, gone)))
    }

    /// Keeps `f` as node `id`'s fd, evicting the oldest beyond `FD_CACHE`.
    fn cache_fd(&self, id: u64, f: Arc<File>, write: bool) {
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let Some(n) = t.nodes.get_mut(&id) else { return };
        let counted = n.fd.is_some();
        n.fd = Some((f, write));
        if write {
            t.writers.insert(id, std::time::Instant::now());
        } else {
            t.writers.remove(&id);
        }
        if !counted {
            t.cached_fds += 1;
            t.fd_order.push_back(id);
        }
        while t.cached_fds > FD_CACHE {
            let Some(old) = t.fd_order.pop_front() else { break };
            if let Some(n) = t.nodes.get_mut(&old) {
                if n.fd.take().is_some() {
                    t.cached_fds -= 1;
                    t.writers.remove(&old);
                }
            }
        }
        if t.fd_order.len() > 4 * FD_CACHE {
            // Drop stale and repeated entries (fds dropped at FLUSH).
            let mut seen = std::collections::HashSet::new();
            let nodes = &t.nodes;
            t.fd_order
                .retain(|id| nodes.get(id).is_some_and(|n| n.fd.is_some()) && seen.insert(*id));
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
            beneath(
                self.root(side)?,
                p,
                fl | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
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

    /// Before `rel` stops naming its file (unlink, rename over it): the
    /// node the kernel knows there gets a handle if it has none (beyond
    /// `HANDLES_MAX`, up to `PINNED_MAX` more), so an open fd keeps reading
    /// and writing the file until the kernel forgets it, as on a plain bind.
    fn pin(&self, side: Side, rel: &Path) {
        let Some(id) = self.known(side, rel) else { return };
        {
            let t = self.t.lock().unwrap();
            match t.nodes.get(&id) {
                Some(n) if n.file.is_none() && !n.dir && t.handles_held < self.handles_max + PINNED_MAX => {}
                _ => return,
            }
        }
        let Ok((st, Some(h))) = self.stat_handle(side, rel) else {
            return;
        };
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        if let Some(n) = t.nodes.get_mut(&id) {
            if n.file.is_none() && n.host_ino == st.st_ino && n.host_dev == st.st_dev {
                n.file = Some(Arc::new(h));
                t.handles_held += 1;
            }
        }
    }

    /// `ignored(rel, false) || ignored(rel, true)`, in one walk of the
    /// rules when no directory was moved.
    fn ignored_either(&self, rel: &Path) -> bool {
        let Some(r) = &self.rules else { return false };
        if r.is_ignored_either(rel) {
            return true;
        }
        if self.moved_dirs.lock().unwrap().is_empty() {
            return false;
        }
        self.ignored(rel, false) || self.ignored(rel, true)
    }

    fn ignored(&self, rel: &Path, dir: bool) -> bool {
        let Some(r) = &self.rules else { return false };
        if r.is_ignored(rel, dir) {
            return true;
        }
        // Below a host directory the sandbox renamed: the rules at its
        // original path hold too (a host process whose cwd is that
        // directory writes a new secret there).
        // Every earlier name: each remembered move maps the path below its
        // directory's current name to the name it had (bounded).
        let moved = self.moved_dirs.lock().unwrap();
        if moved.is_empty() {
            return false;
        }
        let mut names = vec![rel.to_path_buf()];
        let mut i = 0;
        while i < names.len() && names.len() < 64 {
            let cur = names[i].clone();
            i += 1;
            for (now, was) in moved.iter() {
                let Ok(rest) = cur.strip_prefix(now) else { continue };
                if rest.as_os_str().is_empty() {
                    continue;
                }
                let old = was.join(rest);
                if r.is_ignored(&old, dir) {
                    return true;
                }
                if !names.contains(&old) {
                    names.push(old);
                }
            }
        }
        false
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
        if self.rules.is_none() {
            return Ok((Side::Host, self.stat(Side::Host, rel)?));
        }
        let maybe = self.ignored_either(rel);
        if maybe {
            if let Ok(st) = self.stat(Side::Store, rel) {
                if self.ignored(rel, is_dir(&st)) {
                    return Ok((Side::Store, st));
                }
            }
        }
        let st = self.stat(Side::Host, rel)?;
        if maybe && self.ignored(rel, is_dir(&st)) {
            return Err(Errno::ENOENT);
        }
        if self.is_hidden_host(rel, &st) {
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

    /// A host entry just made with mode bits the host may not get: the
    /// sandbox sees the bits it asked for.
    fn keep_new_mode(&self, side: Side, d: &OwnedFd, name: &OsStr, mode: u32) {
        if side != Side::Host {
            return;
        }
        if let Ok(st) = rustix::fs::statat(d, name, AtFlags::SYMLINK_NOFOLLOW) {
            if host_mode(side, mode, is_dir(&st)) != mode & 0o7777 {
                self.keep_guest(&st, Some(mode), None, None);
            }
        }
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
        // (node, old path, new path or none: no longer names the node).
        let mut changes: Vec<(u64, PathBuf, Option<PathBuf>)> = Vec::new();
        for (id, n) in t.nodes.iter() {
            if n.side != side || n.gone {
                continue;
            }
            for p in std::iter::once(&n.rel).chain(n.aliases.iter()) {
                if Some(*id) != moved_id && p.starts_with(to) && !p.starts_with(from) {
                    changes.push((*id, p.clone(), None));
                } else if let Ok(rest) = p.strip_prefix(from) {
                    let new = if rest.as_os_str().is_empty() {
                        to.to_path_buf()
                    } else {
                        to.join(rest)
                    };
                    changes.push((*id, p.clone(), Some(new)));
                }
            }
        }
        for (id, old, new) in &changes {
            if new.is_none() {
                t.detach(*id, side, old);
                continue;
            }
            let key = (side, old.clone());
            if t.by_key.get(&key) == Some(id) {
                t.by_key.remove(&key);
            }
        }
        for (id, old, new) in changes {
            let Some(new) = new else { continue };
            if let Some(n) = t.nodes.get_mut(&id) {
                if n.rel == old {
                    n.rel = new.clone();
                } else if let Some(a) = n.aliases.iter_mut().find(|a| **a == old) {
                    *a = new.clone();
                }
            }
            t.by_key.insert((side, new), id);
        }
    }

    /// After an unlink or rmdir: the entry at `rel` no longer names its
    /// node (gone unless another link of it is known).
    fn removed(&self, side: Side, rel: &Path) {
        let mut t = self.t.lock().unwrap();
        if let Some(id) = t.by_key.get(&(side, rel.to_path_buf())).copied() {
            t.detach(id, side, rel);
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

    /// The listing of open directory `fh` (node `ino`), made afresh at
    /// offset 0: a reader that rewinds an open directory (gVisor keeps its
    /// directory fds) must see the directory as it is now.
    #[allow(clippy::type_complexity)] // the listing's own entry shape
    fn listing(&self, ino: INodeNo, fh: FileHandle, offset: u64) -> Result<Arc<Vec<(u64, FileType, OsString)>>, Errno> {
        if offset == 0 {
            let list = self.node(ino).and_then(|(side, rel, _)| self.list_dir(side, &rel))?;
            self.t.lock().unwrap().handles.insert(fh.0, Handle::Dir(Arc::new(list)));
        }
        match self.t.lock().unwrap().handles.get(&fh.0) {
            Some(Handle::Dir(l)) => Ok(l.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    /// A path that reaches node `ino`'s file for the xattr calls (with
    /// the handle it goes through, kept alive as long as the path is used).
    fn xattr_path(&self, ino: INodeNo) -> Result<(PathBuf, Option<Arc<OwnedFd>>), Errno> {
        let (side, rel, _, gone) = self.node_any(ino)?;
        let handle = self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.file.clone());
        if let Some(h) = handle {
            return Ok((proc_path(&*h), Some(h)));
        }
        if gone {
            return Err(Errno::ESTALE);
        }
        let p = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel.as_path()
        };
        let fd = beneath(
            self.root(side)?,
            p,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let fd = Arc::new(fd);
        Ok((proc_path(&*fd), Some(fd)))
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
            (Side::Host, Some(_)) => {
                // The store's ignored and Git entries first, so they win over the host's.
                let _ = read(Side::Store, &|p, d, _| {
                    self.ignored(p, d) || self.hidden_host_at(p) || self.git_store_entry(p).is_some()
                });
                let dev = self.stat(Side::Host, rel).map(|st| st.st_dev).unwrap_or(0);
                read(Side::Host, &|p, d, ino| {
                    !self.ignored(p, d) && !self.hidden_entry(p, dev, ino)
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
                    let side = self.node_any(ino).map_or(Side::Host, |n| n.0);
                    return reply.attr(&ttl, &self.shown(ino.0, side, &st));
                }
                Err(e) => return reply.error(errno(e)),
            }
        }
        let r = match self.handle_stat(ino) {
            Some(r) => r,
            None => self.node_stat(ino).map(|(side, rel, st)| (side, rel, st, false)),
        };
        match r {
            Ok((side, rel, st, gone)) => {
                self.note(ino.0, &st);
                let ttl = if gone { TTL } else { self.ttl(side, &rel) };
                reply.attr(&ttl, &self.shown(ino.0, side, &st))
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
                    t.cached_fds -= 1;
                }
                t.writers.remove(&ino.0);
                if n.file.is_some() {
                    t.handles_held -= 1;
                }
                let ikey = (n.side, n.host_dev, n.host_ino);
                if t.by_ino.get(&ikey) == Some(&ino.0) {
                    t.by_ino.remove(&ikey);
                }
                for a in n.aliases {
                    let key = (n.side, a);
                    if t.by_key.get(&key) == Some(&ino.0) {
                        t.by_key.remove(&key);
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
        let (asked_uid, asked_gid) = (uid, gid);
        self.guest_changes(ino);
        let (uid, gid) = if self.raw {
            (uid, gid)
        } else {
            (stored_id(uid), stored_id(gid))
        };
        let r = (|| {
            let (side, rel, protected, gone) = self.node_any(ino)?;
            let pre = match self.handle_stat(ino) {
                Some(Ok((_, _, st, _))) => Some(st),
                _ => self.stat(side, &rel).ok(),
            };
            if protected {
                log::warn!(
                    "git sentry: refused changing attributes of {}",
                    crate::display::escape_path(&rel)
                );
                return Err(Errno::EPERM);
            }
            // An owner the host file may not get, and the mode bits it may
            // not get, are kept Domain-side (shown inside); the host file
            // gets the rest.
            let (uid, gid) = if host_owner_stays(side, uid, gid) {
                (None, None)
            } else {
                (uid, gid)
            };
            if size.is_some() && side == Side::Host && !gone && !rel.as_os_str().is_empty() {
                // Not a file a host process is writing (or has locked).
                self.not_in_use_on_host(ino.0, &rel)?;
            }
            let own = match self.cached_fd(ino) {
                Some(fw) => Some(fw),
                // A file whose names are gone: through its handle.
                None if gone => Some((self.node_file(ino, false)?, false)),
                None => None,
            };
            if let Some((f, w)) = own {
                // The node's own fd: no path walks.
                if let Some(sz) = size {
                    let wf = if w {
                        f.clone()
                    } else {
                        self.node_file_with(ino, true, false)?
                    };
                    self.not_locked_on_host(ino, &wf)?;
                    let st = rustix::fs::fstat(&*wf).map_err(errno)?;
                    self.fresh_for_write(ino, &st, sz > 0 && (sz as i64) < st.st_size)?;
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
                let ttl = if gone { TTL } else { self.ttl(side, &rel) };
                let st = rustix::fs::fstat(&*f).map_err(errno)?;
                return Ok((st, ttl, side, pre));
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
                        self.not_locked_on_host(ino, &fd)?;
                        let st = rustix::fs::fstat(&fd).map_err(errno)?;
                        self.fresh_for_write(ino, &st, sz > 0 && (sz as i64) < st.st_size)?;
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
            Ok((self.stat(side, &rel)?, self.ttl(side, &rel), side, pre))
        })();
        match r {
            Ok((st, ttl, side, pre)) => {
                if side == Side::Host && (mode.is_some() || asked_uid.is_some() || asked_gid.is_some()) {
                    self.keep_guest(&st, mode, asked_uid, asked_gid);
                }
                self.note(ino.0, &st);
                if let Some(pre) = pre {
                    if let (Some(b), Some(_)) = (self.budget_for(side), size) {
                        b.changed(budget::on_disk(&pre), budget::on_disk(&st));
                    }
                    self.changed(ino.0, &pre, &st);
                }
                reply.attr(&ttl, &self.shown(ino.0, side, &st))
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
        req: &Request,
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
            Ok(()) => {
                self.keep_new_mode(side, &d, name, mode);
                if let Err(e) = self.own_new(req, &d, name) {
                    return reply.error(e);
                }
                self.entry_reply(side, &rel, &d, name, reply)
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        self.counts.add(Op::Mkdir);
        let _shape = self.shape_guard(name);
        let (side, rel, d) = match self.prepare_new(parent, name, true) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        match rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(host_mode(side, mode, true))) {
            Ok(()) => {
                self.keep_new_mode(side, &d, name, mode);
                if let Err(e) = self.own_new(req, &d, name) {
                    return reply.error(e);
                }
                self.entry_reply(side, &rel, &d, name, reply)
            }
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

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
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
            Ok(()) => match self.own_new(req, &d, link_name) {
                Ok(()) => self.entry_reply(side, &rel, &d, link_name, reply),
                Err(e) => reply.error(e),
            },
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
                if side == Side::Host {
                    if let Ok(vst) = self.stat(side, &to) {
                        let victim = self.known(side, &to).unwrap_or(u64::MAX);
                        if vst.st_mode & sys::S_IFMT == sys::S_IFREG && vst.st_ino != st.st_ino {
                            self.not_in_use_on_host(victim, &to)?;
                        }
                    }
                }
                self.pin(side, &to);
            }
            // Two names of one file: rename(2) leaves both in place.
            let victim = (!flags.contains(RenameFlags::RENAME_EXCHANGE))
                .then(|| self.stat(side, &to).ok())
                .flatten();
            let same_file = victim
                .as_ref()
                .is_some_and(|t| t.st_ino == st.st_ino && t.st_dev == st.st_dev);
            rustix::fs::renameat_with(&d1, name, &d2, newname, rf).map_err(errno)?;
            if same_file {
                return Ok(());
            }
            if let (Some(v), Some(b)) = (&victim, self.budget_for(side)) {
                if v.st_mode & sys::S_IFMT != sys::S_IFDIR && v.st_nlink <= 1 {
                    // The file renamed over lost its last name.
                    b.changed(budget::on_disk(v), 0);
                }
            }
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                let tmp = PathBuf::from("\0swap");
                self.renamed(side, &to, &tmp);
                self.renamed(side, &from, &to);
                self.renamed(side, &tmp, &from);
            } else {
                self.renamed(side, &from, &to);
                // rename(2) changes the file's ctime: the guest's own doing.
                if let Ok(post) = self.stat(side, &to) {
                    self.changed(id, &st, &post);
                }
                if host_dirs && dir {
                    self.store_follows(&from, &to);
                    self.dir_moved(&from, &to);
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
        // A listing answers the lookups of its entries too (one request per
        // page of entries, not one per entry).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
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
            let counted = self.budget_for(side).filter(|_| flags.0 & sys::O_TRUNC != 0);
            let pre = counted.and_then(|_| self.stat(side, &rel).ok());
            let fd = beneath(self.root(side)?, p, open_flags(flags.0), Mode::empty()).map_err(errno)?;
            if let (Some(b), Some(pre), Ok(st)) = (counted, pre, rustix::fs::fstat(&fd)) {
                b.changed(budget::on_disk(&pre), budget::on_disk(&st));
            }
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
            if let Ok(st) = rustix::fs::fstat(&*f) {
                self.saw(ino.0, &st);
            }
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
            self.not_locked_on_host(ino, &f)?;
            let pre = rustix::fs::fstat(&*f).map_err(errno)?;
            self.fresh_for_write(ino, &pre, (offset as i64) < pre.st_size)?;
            let room = match self.budget_of(ino) {
                Some(b) => Some(b.reserve(budget::growth(&pre, offset, data.len() as u64))?),
                None => None,
            };
            kill_priv(&*f)?;
            let wrote = f.write_all_at(data, offset).map_err(errno);
            if let Ok(st) = rustix::fs::fstat(&*f) {
                if let Some(r) = room {
                    r.settle(budget::on_disk(&pre), budget::on_disk(&st));
                }
                if wrote.is_ok() {
                    self.changed(ino.0, &pre, &st);
                }
            }
            wrote
        }) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lo: fuser::LockOwner, reply: ReplyEmpty) {
        self.counts.add(Op::Flush);
        // Nothing is buffered here; the kernel stops sending FLUSH. (gVisor
        // keeps its fds of the view open after the guest closes, so FLUSH
        // would say little: write fds go when idle, `WRITE_IDLE`.)
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
        let list = match self.listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        for (i, (ino, ft, name)) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *ft, name) {
                break;
            }
        }
        reply.ok()
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        self.counts.add(Op::Readdirplus);
        let _memo = ParentMemo::enter();
        let list = match self.listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let Ok((side, rel, _)) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        for (i, (ent_ino, _, name)) in list.iter().enumerate().skip(offset as usize) {
            let off = (i + 1) as u64;
            if name == "." || name == ".." {
                // Not looked up by the kernel: attributes only for the form.
                let mut a = negative();
                a.ino = INodeNo(*ent_ino);
                a.kind = FileType::Directory;
                if reply.add(INodeNo(*ent_ino), off, name, &Duration::ZERO, &a, Generation(0)) {
                    break;
                }
                continue;
            }
            // The entry exactly as a LOOKUP would answer it (the same rules).
            let child = rel.join(name);
            let found = self.find(side, &child);
            let Ok(a) = found.and_then(|(eside, _)| Ok((eside, self.remember(eside, &child)?))) else {
                // Gone since the listing: a plain entry the kernel looks up.
                let mut a = negative();
                a.ino = INodeNo(0);
                if reply.add(INodeNo(0), off, name, &Duration::ZERO, &a, Generation(0)) {
                    break;
                }
                continue;
            };
            let (eside, a) = a;
            if reply.add(a.ino, off, name, &self.ttl(eside, &child), &a, Generation(0)) {
                // Not sent: the kernel did not get this lookup.
                self.forget(_req, a.ino, 1);
                break;
            }
        }
        reply.ok()
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Fallocate);
        let r = self.handle_or_node(fh, ino, true).and_then(|f| {
            self.not_locked_on_host(ino, &f)?;
            let pre = rustix::fs::fstat(&*f).map_err(errno)?;
            // Punching, zeroing or collapsing a range drops bytes; plain
            // allocation keeps them.
            if mode as u32 & !rustix::fs::FallocateFlags::KEEP_SIZE.bits() != 0 {
                self.fresh_for_write(ino, &pre, (offset as i64) < pre.st_size)?;
            }
            let fl = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
            let room = match self.budget_of(ino) {
                Some(b) => Some(b.reserve(budget::fallocate_growth(&pre, fl, offset, length))?),
                None => None,
            };
            kill_priv(&*f)?;
            let done = rustix::fs::fallocate(&*f, fl, offset, length).map_err(errno);
            if let Ok(st) = rustix::fs::fstat(&*f) {
                if let Some(r) = room {
                    r.settle(budget::on_disk(&pre), budget::on_disk(&st));
                }
                if done.is_ok() {
                    self.changed(ino.0, &pre, &st);
                }
            }
            done
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: fuser::ReplyXattr) {
        self.counts.add(Op::Getxattr);
        let r = self.xattr_path(ino).and_then(|(p, _keep)| {
            let mut buf = vec![0u8; size as usize];
            let n = rustix::fs::getxattr(&p, name, &mut buf[..]).map_err(errno)?;
            buf.truncate(n);
            Ok((n, buf))
        });
        match r {
            Ok((n, _)) if size == 0 => reply.size(n as u32),
            Ok((_, buf)) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        self.counts.add(Op::Listxattr);
        let r = self.xattr_path(ino).and_then(|(p, _keep)| {
            let mut buf = vec![0u8; size as usize];
            let n = rustix::fs::listxattr(&p, &mut buf[..]).map_err(errno)?;
            buf.truncate(n);
            Ok((n, buf))
        });
        match r {
            Ok((n, _)) if size == 0 => reply.size(n as u32),
            Ok((_, buf)) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.counts.add(Op::Setxattr);
        if !self.raw {
            return reply.error(Errno::ENOSYS);
        }
        let r = self.xattr_path(ino).and_then(|(p, _keep)| {
            let fl = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
            rustix::fs::setxattr(&p, name, value, fl).map_err(errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.counts.add(Op::Removexattr);
        if !self.raw {
            return reply.error(Errno::ENOSYS);
        }
        let r = self
            .xattr_path(ino)
            .and_then(|(p, _keep)| rustix::fs::removexattr(&p, name).map_err(errno));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
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
        req: &Request,
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
            let asked = mode;
            let mode = Mode::from_raw_mode(host_mode(side, mode, false));
            // Exclusive first, so the view knows whether it made the file.
            let (fd, made) = match rustix::fs::openat2(&d, name, fl | OFlags::EXCL, mode, resolve()) {
                Ok(fd) => (fd, true),
                Err(rustix::io::Errno::EXIST) if !fl.contains(OFlags::EXCL) => {
                    let counted = self.budget_for(side).filter(|_| fl.contains(OFlags::TRUNC));
                    let pre = counted.and_then(|_| rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW).ok());
                    let fd = rustix::fs::openat2(&d, name, fl, mode, resolve()).map_err(errno)?;
                    if let (Some(b), Some(pre), Ok(st)) = (counted, pre, rustix::fs::fstat(&fd)) {
                        b.changed(budget::on_disk(&pre), budget::on_disk(&st));
                    }
                    (fd, false)
                }
                Err(e) => return Err(errno(e)),
            };
            if made {
                self.keep_new_mode(side, &d, name, asked);
                self.own_new(req, &d, name)?;
            }
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
            let (side, st) = self.find(pside, &rel)?;
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
            if !dir && side == Side::Host && st.st_mode & sys::S_IFMT == sys::S_IFREG {
                self.not_in_use_on_host(id, &rel)?;
            }
            if !dir {
                self.pin(side, &rel);
            }
            rustix::fs::unlinkat(&d, name, fl).map_err(errno)?;
            self.removed(side, &rel);
            if let (false, true, Some(b)) = (dir, st.st_nlink <= 1, self.budget_for(side)) {
                // The last name: its blocks are given back.
                b.changed(budget::on_disk(&st), 0);
            }
            if dir || st.st_nlink <= 1 {
                // The inode may be reused for another file.
                self.guest.lock().unwrap().remove(&(st.st_dev, st.st_ino));
            }
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
/// Most renamed host directories remembered per view (`View::dir_moved`).
const MOVED_MAX: usize = 4096;

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

    /// True when the host file with this identity is hidden: device,
    /// inode and birth time, since a filesystem gives a removed hidden
    /// file's inode number to the next new file (which must not vanish).
    fn is_hidden_id(&self, dev: u64, ino: u64, btime: u64) -> bool {
        self.rules.as_ref().is_some_and(|r| r.is_hidden_id(dev, ino, btime))
            || self
                .more_hidden
                .lock()
                .unwrap()
                .get(&(dev, ino))
                .is_some_and(|&b| crate::view::ignored::same_birth(b, btime))
    }

    /// The host file at view path `rel` (device `dev`, inode `ino`) is
    /// hidden. Its birth time is read only when the inode number is one a
    /// hidden file had (the common case costs two hash lookups).
    fn hidden_entry(&self, rel: &Path, dev: u64, ino: u64) -> bool {
        let candidate = self.rules.as_ref().is_some_and(|r| r.may_be_hidden(dev, ino))
            || self.more_hidden.lock().unwrap().contains_key(&(dev, ino));
        candidate && self.is_hidden_id(dev, ino, self.host_btime(rel))
    }

    /// The birth time (ns) of the host file at `rel`, 0 when unknown.
    fn host_btime(&self, rel: &Path) -> u64 {
        let (parent, name) = split(rel);
        let Ok(d) = self.dir(Side::Host, parent) else { return 0 };
        match rustix::fs::statx(&d, name, AtFlags::SYMLINK_NOFOLLOW, rustix::fs::StatxFlags::BTIME) {
            Ok(x) if x.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0 && x.stx_btime.tv_sec >= 0 => {
                x.stx_btime.tv_sec as u64 * 1_000_000_000 + u64::from(x.stx_btime.tv_nsec)
            }
            _ => 0,
        }
    }

    fn is_hidden_host(&self, rel: &Path, st: &rustix::fs::Stat) -> bool {
        self.rules.is_some() && self.hidden_entry(rel, st.st_dev, st.st_ino)
    }

    /// True when the host has an entry at `rel` and it is hidden.
    fn hidden_host_at(&self, rel: &Path) -> bool {
        self.stat(Side::Host, rel).is_ok_and(|st| self.is_hidden_host(rel, &st))
    }

    /// Hides one host identity for the rest of the session and later
    /// generations.
    fn hide_id(&self, dev: u64, ino: u64, rel: &Path) {
        let btime = self.host_btime(rel);
        if self.is_hidden_id(dev, ino, btime) {
            return;
        }
        self.more_hidden.lock().unwrap().insert((dev, ino), btime);
        if let Some(p) = &self.sticky_path {
            let e = crate::view::ignored::StickyEntry {
                dev,
                ino,
                btime,
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
        if self.rules.is_none() {
            return Ok(());
        }
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
                if self.ignored(&child, is_d) || self.hidden_entry(&child, dev, ino) {
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

    /// Remembers that host directory `from` is now `to` (earlier moves
    /// below `from` move along), bounded by `MOVED_MAX`: beyond it the
    /// oldest is dropped (its hidden files stay hidden by identity).
    fn dir_moved(&self, from: &Path, to: &Path) {
        let mut m = self.moved_dirs.lock().unwrap();
        for (now, _) in m.iter_mut() {
            if let Ok(rest) = now.strip_prefix(from) {
                *now = to.join(rest);
            }
        }
        m.push((to.to_path_buf(), from.to_path_buf()));
        if m.len() > MOVED_MAX {
            m.remove(0);
        }
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
    let tables = Arc::downgrade(&view.t);
    std::thread::Builder::new().name("view-writers".into()).spawn(move || {
        // Ends with the view (its tables dropped).
        while let Some(t) = tables.upgrade() {
            t.lock().unwrap().drop_idle_writers();
            drop(t);
            std::thread::sleep(WRITE_IDLE / 4);
        }
    })?;
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
    /// Copying host-tool files into the store (`hosttool`).
    HostConfig(std::io::Error),
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
            ViewError::HostConfig(e) => write!(f, "copying host-tool files into the Domain: {e}"),
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
            ViewError::HostConfig(e) | ViewError::Open(_, e) | ViewError::Serve(_, e) => Some(e),
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
/// Serves the Domain storage directory `dir` (a persisted path's
/// `anchor/KEY`) at `mountpoint` as a storage view counted against
/// `budget` (`View::storage`).
pub fn start_storage_view(dir: &Path, mountpoint: &Path, budget: Arc<Budget>) -> Result<Served, ViewError> {
    crate::sys::umask(0);
    crate::sys::raise_nofile();
    let view = View::storage(dir)
        .map_err(|e| ViewError::Open(dir.to_path_buf(), e))?
        .with_budget(budget, true);
    serve(view, mountpoint, None).map_err(|e| ViewError::Serve(mountpoint.to_path_buf(), e))
}

/// `budget`: the Domain's disk budget, which every ignored store counts
/// against.
pub fn start_views(file: &Path, relay: Option<Relay>, budget: Option<&Arc<Budget>>) -> Result<Vec<Served>, ViewError> {
    let mut relay = relay;
    let (owner, specs) = crate::wire::plan::read_views(file).map_err(ViewError::Plan)?;
    // Modes the sandbox asks for are applied as given (the guest applied its umask).
    crate::sys::umask(0);
    // Cached per-node fds (FD_CACHE per view) and gVisor's many opens.
    crate::sys::raise_nofile();
    // The read-lease probe of `not_in_use_on_host`: a lease broken in its
    // instant must not kill the supervisor (SIGIO's default).
    crate::sys::ignore_signal(crate::sys::SIGIO);
    set_guest_owner(owner);
    let mut served = Vec::new();
    let workspace = specs.first().map(|v| v.source.clone());
    for v in specs {
        let (v, exec) = crate::view::hosttool::prepare_view(v, workspace.as_deref()).map_err(ViewError::HostConfig)?;
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
                crate::view::hosttool::seed_store(&v.source, dir, &v.host_config, &rules)
                    .map_err(ViewError::HostConfig)?;
                Some((dir.as_path(), rules.with_host_tool(v.host_config.clone())))
            }
            None => None,
        };
        let sentry = Sentry::for_view(&v.source, v.git_root);
        let counted = store.is_some();
        let mut view = View::new(&v.source, store, sentry)
            .map_err(|e| ViewError::Open(v.source.clone(), e))?
            .with_hooks(v.protect.clone())
            .with_exec(exec);
        if let (Some(b), true) = (budget, counted) {
            view = view.with_budget(b.clone(), false);
        }
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

    /// Git's execution surface, recomputed as its inputs change: read-only.
    pub fn with_exec(mut self, exec: Option<crate::view::hostexec::Live>) -> View {
        self.exec = exec;
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
                || gitshape::sensitive_anchors(rel).iter().any(|a| self.host_shape(a))
                || self.exec.as_ref().is_some_and(|e| e.protects(rel)))
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
        if let Some(old) = t.by_key.get(&(Side::Store, to.to_path_buf())).copied() {
            t.detach(old, Side::Store, to);
        }
        if t.by_key.get(&(Side::Host, from.to_path_buf())) == Some(&id) {
            t.by_key.remove(&(Side::Host, from.to_path_buf()));
        }
        if let Some(n) = t.nodes.get_mut(&id) {
            // The node is now the store's copy: nothing of the host file.
            let (had_fd, had_handle) = (n.fd.take().is_some(), n.file.take().is_some());
            let ikey = (n.side, n.host_dev, n.host_ino);
            let aliases = std::mem::take(&mut n.aliases);
            n.side = Side::Store;
            n.rel = to.to_path_buf();
            n.host_dev = st.st_dev;
            n.host_ino = st.st_ino;
            if had_fd {
                t.cached_fds -= 1;
            }
            t.writers.remove(&id);
            if had_handle {
                t.handles_held -= 1;
            }
            for a in aliases {
                if t.by_key.get(&(Side::Host, a.clone())) == Some(&id) {
                    t.by_key.remove(&(Side::Host, a));
                }
            }
            if t.by_ino.get(&ikey) == Some(&id) {
                t.by_ino.remove(&ikey);
            }
            t.by_ino.insert((Side::Store, st.st_dev, st.st_ino), id);
            t.by_key.insert((Side::Store, to.to_path_buf()), id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
