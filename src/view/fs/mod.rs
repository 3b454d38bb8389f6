//! The workspace view's FUSE filesystem: this file holds the [`View`] (its
//! state, constructors, budgets and path access to its two trees); the
//! node table, fd cache, operations, Git store and serving live in the
//! files below.
//!
//! The workspace view: a filtering passthrough FUSE filesystem served by the
//! Runtime Supervisor and bound into the sandbox at the workspace's path
//! inside (`plan::workspace`; `/workspace` leads there) and, for a linked
//! worktree, at the common Git directory's own path.
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
//!   reaches the host. Cached fds are read-only: a write fd goes before
//!   the WRITE it served is answered (`written`), a created file's once
//!   unused for `WRITE_IDLE`;
//! - directory listings are cached by the kernel (`FOPEN_CACHE_DIR`).
//!
//! Threads: `fuser`'s event loops (two), the watcher, and `view-writers`
//! (closes idle write fds).
//!
//! The files: `host` (access beneath the two roots), `table` (the node
//! table), `nodes` (lookups, renames, removals, forgets), `fdcache` (cached
//! fds and open handles), `attr` (attributes, owners and modes shown),
//! `guards` (refusals that protect host processes), `hidden` (ignored
//! paths), `sides` (which tree serves an entry), `gitstore` (repository
//! shapes), `entries` (making, renaming, removing), `ops` (the
//! FUSE operations), `serve` (mounting, the watcher, the entry points).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuser::{Errno, INodeNo};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::view::budget::Budget;
use crate::view::counts::Counts;
use crate::view::ignored::IgnoreRules;
use crate::view::sentry::Sentry;
use crate::view::watch::Watches;

use self::host::{beneath, errno, is_dir, open_root, split, Side};
use self::table::{Node, Tables};

mod attr;
mod dirmove;
mod entries;
mod fdcache;
mod gitstore;
mod guards;
mod hidden;
mod host;
mod nodes;
mod ops;
pub mod serve;
mod sides;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_links;

/// How long the kernel may cache entries and attributes under a host
/// directory that is not watched: host-side edits show up within this time.
const TTL: Duration = Duration::from_secs(1);
/// The same under a watched directory and on the store side, where every
/// change is invalidated when it happens.
const TTL_LONG: Duration = Duration::from_secs(3600);
/// Per-view bound on cached per-node read (or write) fds.
const FD_CACHE: usize = 256;
/// Per-view bound on the `O_PATH` handles nodes keep of their files
/// (`Node::file`; a quarter of the open-file limit if that is less): past
/// it the least recently used file gives its handle up to the one looked
/// up (`Tables::release_named_handle`) and is served by path;
/// `PINNED_MAX` more are allowed for files unlinked or renamed over
/// through the view.
const HANDLES_MAX: usize = 32768;
const PINNED_MAX: usize = 1024;

/// Stripes of the lock that orders the guest's reads and changes of a
/// file (`View::in_order`), by node id.
const ORDER_STRIPES: usize = 64;

const STORE_BIT: u64 = 1 << 62;
const FOREIGN_BIT: u64 = 1 << 61;

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
    /// The host file's mode bits when `mode` was kept: once the host
    /// changes them (a chmod on the host), the host's mode shows again.
    host_mode: u32,
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
    /// The workspace's host-tool patterns (`view::hosttool`): Domain-side
    /// through `rules` with a store, read-only without; moves into and out
    /// of their positions are refused either way (`hidden.rs`).
    host_tool: Option<Arc<crate::view::hosttool::Matcher>>,
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
    /// The pinned-handle budget ran out (`pin`) and this was logged.
    warned_pins: AtomicBool,
    /// A stale overwrite was refused and logged (`fresh_for_write`).
    warned_stale: AtomicBool,
    /// Changes of one host file are made one at a time (by node id modulo
    /// their number), each under the view's own OFD lock of the file
    /// (`View::under_host_locks`).
    change_stripes: [Mutex<()>; 8],
    /// Nodes whose last change waited the whole `LOCK_WAIT` for a host
    /// lock: refused at once while that lock is still held.
    lock_stuck: Mutex<std::collections::HashSet<u64>>,
    /// Orders the guest's reads and changes of one file (`View::in_order`).
    order: Box<[std::sync::RwLock<()>]>,
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
    /// Host files' first modes: a mode change never gives group or other
    /// access a host file did not give them (`attr::VolumeModes`), in the
    /// workspace and in a read-write volume alike.
    volume: Option<attr::VolumeModes>,
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
            host_tool: None,
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
                handle_ring: Default::default(),
                writers: HashMap::new(),
                ids: HashMap::new(),
                own_names: HashMap::new(),
            })),
            watch,
            no_open: AtomicBool::new(false),
            more_hidden: Mutex::new(Default::default()),
            sticky_path,
            counts: Arc::default(),
            guest: Mutex::new(HashMap::new()),
            moved_dirs: Mutex::new(Vec::new()),
            warned_locked: AtomicBool::new(false),
            warned_pins: AtomicBool::new(false),
            warned_stale: AtomicBool::new(false),
            change_stripes: Default::default(),
            lock_stuck: Mutex::new(Default::default()),
            order: (0..ORDER_STRIPES).map(|_| std::sync::RwLock::new(())).collect(),
            handles_max: {
                let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
                lim.map_or(HANDLES_MAX, |l| HANDLES_MAX.min((l / 4) as usize).max(64))
            },
            guest_changed: Arc::default(),
            budget: None,
            raw: false,
            // The workspace's modes are capped as a volume's are.
            volume: Some(attr::VolumeModes::default()),
        })
    }

    /// Serves a read-write volume: a chmod inside removes permission bits
    /// of a host file but never gives group or other access the file gave
    /// them neither when the sandbox first changed its mode (or made it)
    /// nor now (`attr::cap_class_bits`); set-user-ID, set-group-ID and
    /// world-write stay stripped. The workspace is served so too.
    pub fn for_volume(mut self) -> View {
        self.volume = Some(attr::VolumeModes::default());
        self
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

    /// Records that the sandbox changes the host file of node `ino` (a file
    /// no name reaches any more changes no path).
    fn guest_changes(&self, ino: INodeNo) {
        let rel = self
            .t
            .lock()
            .unwrap()
            .nodes
            .get(&ino.0)
            .filter(|n| !n.gone)
            .map(|n| n.rel.clone());
        if let Some(rel) = rel {
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

    /// The attributes of the entry at `rel`, its proof (`table::Proof`),
    /// and for anything but a directory an `O_PATH` handle of it, all from
    /// one fd.
    #[allow(clippy::type_complexity)] // what one stat of an entry yields
    fn stat_handle(
        &self,
        side: Side,
        rel: &Path,
    ) -> Result<(rustix::fs::Stat, Option<OwnedFd>, Option<table::Proof>), Errno> {
        if rel.as_os_str().is_empty() {
            let root = self.root(side)?;
            return Ok((
                rustix::fs::fstat(root).map_err(errno)?,
                None,
                crate::sys::file_handle(root),
            ));
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
        let proof = crate::sys::file_handle(&fd);
        Ok((st, (!is_dir(&st)).then_some(fd), proof))
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

    /// How long the kernel may keep what it learns about `rel`.
    fn ttl(&self, side: Side, rel: &Path) -> Duration {
        let parent = if rel.as_os_str().is_empty() {
            rel
        } else {
            rel.parent().unwrap_or(Path::new(""))
        };
        self.ttl_below(side, parent)
    }

    /// `ttl` of an entry of directory `parent` on `side`.
    fn ttl_below(&self, side: Side, parent: &Path) -> Duration {
        if side == Side::Store {
            return TTL_LONG;
        }
        match &self.watch {
            Some(w) if w.is_watched(parent) => TTL_LONG,
            _ => TTL,
        }
    }
}
