//! The node table: a node per file the kernel knows (its paths, handle,
//! cached fd, what the kernel was told), the open handles, and the
//! bookkeeping of cached fds, write fds and held handles.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use fuser::FileType;

use super::host::{is_dir, Side};

/// A cached write fd not dropped at the end of a write (a created file's,
/// before its first write) goes once unused this long (gVisor keeps its
/// own fds of a file open after the guest closed it, so the kernel's FLUSH
/// comes late): a host `exec` of a file the sandbox made is not `Text file
/// busy` for longer.
pub(super) const WRITE_IDLE: Duration = Duration::from_secs(1);

pub(super) struct Node {
    pub(super) side: Side,
    pub(super) rel: PathBuf,
    /// More view paths of the same file (hard links the kernel looked up).
    pub(super) aliases: Vec<PathBuf>,
    /// No path names the file any more (removed, overwritten): path
    /// operations fail, its handle serves reads, writes and attributes.
    pub(super) gone: bool,
    /// Ever seen at a protected path (sticks across hard links).
    pub(super) protected: bool,
    pub(super) lookups: u64,
    pub(super) dir: bool,
    /// The host (or store) file the node stands for: (device, inode).
    pub(super) host_dev: u64,
    pub(super) host_ino: u64,
    /// An `O_PATH` handle of the file (not for directories), kept until the
    /// kernel forgets the node: the node is this file whatever happens to
    /// its names, as an open fd on a plain bind is (`reopen`).
    pub(super) file: Option<Arc<OwnedFd>>,
    /// Cached fd for handle-less reads and writes, and whether it writes.
    /// A write fd is kept only until the kernel's next FLUSH of the node.
    pub(super) fd: Option<(Arc<File>, bool)>,
    /// The attributes last sent to the kernel for this node.
    pub(super) told: Option<Told>,
    /// Made by the view (mkdir, mknod, symlink, link, an exclusive create)
    /// and its host IN_CREATE not seen yet.
    pub(super) made_here: bool,
    /// The file's version (`version`) when the guest last read or changed
    /// it through the view: a host file changed since then by a host
    /// process is not overwritten in place from inside (`fresh_for_write`).
    pub(super) seen: Version,
    /// The host watcher saw a write of the file (`IN_MODIFY`, not the
    /// guest's own) since the guest last read or changed it: a later host
    /// rename or chmod never makes `seen` current (`after_host_event`).
    pub(super) host_wrote: bool,
    /// The file's size as the kernel believes it: what it was last told
    /// (`told`), grown by the guest's writes and `fallocate`s since, cut
    /// by a short read. A write at exactly this offset is at the end as
    /// the guest knows it (`View::appends`).
    pub(super) end: i64,
    /// The cached write fd holds the view's claim of a SQLite database
    /// (`keep_database_claim`): it stays past each write, until
    /// `WRITE_IDLE` (a database is not a script the host will `exec`).
    pub(super) claim: bool,
    /// The write fds of the file the view lent out (`node_file_with`, a
    /// created file's fd, a write handle), as weak references: while one
    /// is alive the view itself has the file open for writing, which a
    /// lease probe cannot tell from a host writer (`View::own_writes`).
    pub(super) lent: Vec<(std::sync::Weak<std::fs::File>, bool)>,
    /// Write fds of the file being opened right now (not yet in `lent`).
    pub(super) opening: u32,
    /// Used since the handle clock last passed it (`Tables::release_named_handle`).
    pub(super) used: bool,
    /// When the view last made sure the node holds a handle before an
    /// unlink or rename over its name (`View::pin`): the clock leaves the
    /// handle alone for `PIN_HOLD`, until the name is gone (a gone node's
    /// handle is never taken).
    pub(super) pinned: Option<std::time::Instant>,
}

/// How long a handle `View::pin` kept is safe from the handle clock: the
/// unlink or rename it was taken for comes right after, in the same
/// request.
pub(super) const PIN_HOLD: Duration = Duration::from_secs(10);

/// The view's own write fds of a file (`Node::lent`, `Node::opening`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OwnWrites {
    /// None: a write open the host kernel reports is a host process's.
    None,
    /// Lent for one request (a write, truncate, fallocate) or being
    /// opened: gone in a moment.
    Passing,
    /// A guest's open handle that writes: there as long as the guest
    /// keeps the file open.
    Held,
}

impl Node {
    /// Records write fd `f` of the file as lent (`lent`); `held` for a
    /// guest's open handle.
    pub(super) fn lend(&mut self, f: &std::sync::Arc<std::fs::File>, held: bool) {
        self.lent.retain(|(w, _)| w.strong_count() > 0);
        let w = std::sync::Arc::downgrade(f);
        if !self.lent.iter().any(|(l, _)| l.ptr_eq(&w)) {
            self.lent.push((w, held));
        }
    }

    pub(super) fn own_writes(&self) -> OwnWrites {
        let alive = self.lent.iter().filter(|(w, _)| w.strong_count() > 0);
        if alive.clone().any(|(_, held)| *held) {
            OwnWrites::Held
        } else if self.opening > 0 || alive.count() > 0 {
            OwnWrites::Passing
        } else {
            OwnWrites::None
        }
    }
}

/// A host file's version as far as the view can tell: size, mtime, ctime.
pub(super) type Version = [i64; 5];

pub(super) fn version(st: &rustix::fs::Stat) -> Version {
    [
        st.st_size,
        st.st_mtime as i64,
        st.st_mtime_nsec as i64,
        st.st_ctime as i64,
        st.st_ctime_nsec as i64,
    ]
}

/// Whether a guest that knows version `seen` of a file knows it as it was
/// at `v`: the same size and mtime, and a change time no earlier (a later
/// one moved by a name or mode change only: every change up to `v` moved
/// the ctime to at most `v`'s, and a content change since `seen` would
/// have moved the size or mtime, or, restored by `touch -r`, the ctime
/// past `seen`'s).
pub(super) fn knows(seen: Version, v: Version) -> bool {
    seen[..3] == v[..3] && (seen[3], seen[4]) >= (v[3], v[4])
}

/// What the guest knows of a file (`seen`) after its own change of the
/// file's content (a write, truncate, fallocate, or attributes) took it
/// from `pre` to `post`: current if it was current; stale if a host change
/// came first (an append to, or a `touch` of, a file the host rewrote does
/// not make the guest's copy fresh), unless the change left the file
/// empty: then the guest knows all of it.
pub(super) fn after_own(seen: Version, pre: &rustix::fs::Stat, post: &rustix::fs::Stat) -> Version {
    if knows(seen, version(pre)) || post.st_size == 0 {
        version(post)
    } else {
        seen
    }
}

/// What the guest knows of a file (`seen`) after the view's own change of
/// its names or attributes (unlink, link, rename, chmod, chown, utimes
/// of the file) took it from `pre` to `post`: current if it was current,
/// unless its size or mtime moved meanwhile, which names, links and modes
/// never move: then a host write fell between the two stats, and what the
/// guest knew stays stale (`fresh_for_write` refuses overwriting it).
pub(super) fn after_own_meta(seen: Version, pre: &rustix::fs::Stat, post: &rustix::fs::Stat) -> Version {
    let (a, b) = (version(pre), version(post));
    if knows(seen, a) && a[..3] == b[..3] {
        b
    } else {
        seen
    }
}

/// What the guest knows of a file (`seen`, and whether a host write came
/// since: `host_wrote`) after the host watcher's event of it, `st` the
/// file as it is now. A host write (`wrote`) that moved the file's size or
/// mtime from what the guest read leaves `seen` stale until the guest
/// reads it again; one that did not is one the guest has read since (the
/// watcher handles events some time after they happen). Any other host
/// event (a rename of the file or of a directory above it, a link or
/// unlink of another name, a chmod) moved only its ctime: a guest that
/// knew the file's content still knows it (the kernel may serve its next
/// read from the pages it cached, which the view never sees), unless a
/// host write came first (a write, then a `touch -r` back to the old
/// mtime, stays stale) or its size or mtime moved since.
///
/// A stat older than what the guest knows (its change time before `seen`'s:
/// taken before a change the view made and recorded meanwhile, such as the
/// guest's unlink of the file) tells nothing new and changes nothing:
/// applied, it took `seen` back to before the guest's own change, and the
/// guest's next overwrite of the file was refused as stale.
pub(super) fn after_host_event(seen: Version, host_wrote: bool, wrote: bool, st: &rustix::fs::Stat) -> (Version, bool) {
    let now = version(st);
    if (now[3], now[4]) < (seen[3], seen[4]) {
        (seen, host_wrote)
    } else if seen[..3] != now[..3] {
        (seen, host_wrote || wrote)
    } else if host_wrote && !wrote {
        (seen, true)
    } else {
        (now, false)
    }
}

/// The kernel's file handle of a file (`sys::file_handle`): which file an
/// inode number stands for, checked without holding the file open.
pub(super) type Proof = Box<[u8]>;

/// Whether a node with proof `known` may be the file with proof `now` (the
/// same device and inode number): unless both are known and differ. A
/// missing proof (a filesystem without file handles) decides nothing.
pub(super) fn may_be_same(known: Option<&[u8]>, now: Option<&[u8]>) -> bool {
    match (known, now) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// Whether two proofs show one file (both known and equal).
pub(super) fn proven_same(known: Option<&[u8]>, now: Option<&[u8]>) -> bool {
    matches!((known, now), (Some(a), Some(b)) if a == b)
}

/// Bound on the remembered identities (`Tables::ids`); beyond it only
/// those of live nodes are kept.
pub(super) const IDS_MAX: usize = 1 << 20;

/// Whether nothing changed a file between two stats of it (the bytes read
/// between them are one version of it).
pub(super) fn unchanged_between(pre: &rustix::fs::Stat, post: &rustix::fs::Stat) -> bool {
    version(pre) == version(post)
}

/// What the kernel caches of a file's attributes, as compared by the
/// watcher: an attribute event after which the file still stats exactly as
/// last told changed nothing the kernel holds.
pub(super) type Told = [i64; 10];

pub(super) fn told(st: &rustix::fs::Stat) -> Told {
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
    pub(super) fn new(side: Side, rel: PathBuf, st: &rustix::fs::Stat) -> Node {
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
            host_wrote: false,
            end: st.st_size,
            claim: false,
            lent: Vec::new(),
            opening: 0,
            used: false,
            pinned: None,
        }
    }
}

pub(super) enum Handle {
    File(Arc<File>),
    Dir(Arc<Vec<(u64, FileType, OsString)>>),
}

pub(super) struct Tables {
    pub(super) nodes: HashMap<u64, Node>,
    /// Live nodes by (side, view path). A node id is never reused, and a
    /// path gets a new id once its node is gone (removed, overwritten), so
    /// the kernel and gVisor never see one id for two different files.
    pub(super) by_key: HashMap<(Side, PathBuf), u64>,
    pub(super) next_id: u64,
    pub(super) handles: HashMap<u64, Handle>,
    pub(super) next_fh: u64,
    /// Nodes with a cached fd, oldest first (may hold stale ids).
    pub(super) fd_order: VecDeque<u64>,
    pub(super) cached_fds: usize,
    /// Non-directory nodes by (side, device, inode): hard links the kernel
    /// looks up are one node, one inode number, one set of attributes.
    pub(super) by_ino: HashMap<(Side, u64, u64), u64>,
    /// Nodes holding an `O_PATH` handle (`Node::file`).
    pub(super) handles_held: usize,
    /// The nodes that took a handle, in the order the clock visits them
    /// (`release_named_handle`; may hold stale and repeated ids).
    pub(super) handle_ring: VecDeque<u64>,
    /// Nodes with a cached write fd, and when it last served a write.
    pub(super) writers: HashMap<u64, std::time::Instant>,
    /// Every file the view gave an id, by (side, device, inode), with its
    /// proof (`Proof`), for the view's life (up to `IDS_MAX`): a file gets
    /// the same id whenever it is looked up again, after its node was
    /// forgotten or at another name, with or without a handle, as its
    /// inode number stays on a disk; a file that reuses the inode number
    /// has another proof and gets a new id.
    pub(super) ids: HashMap<(Side, u64, u64), (u64, Proof)>,
    /// Names the view itself is renaming or removing right now, from just
    /// before the syscall until its bookkeeping is done (`OwnNames`): the
    /// host watcher's event of that change can arrive in between, and must
    /// not take the name off its node as if a host process had moved it.
    pub(super) own_names: HashMap<(Side, PathBuf), usize>,
}

/// Marks names as being changed by the view itself (`Tables::own_names`)
/// for as long as it lives.
pub(super) struct OwnNames<'a> {
    t: &'a Mutex<Tables>,
    keys: Vec<(Side, PathBuf)>,
}

impl<'a> OwnNames<'a> {
    pub(super) fn new(t: &'a Mutex<Tables>, side: Side, paths: &[&Path]) -> OwnNames<'a> {
        let keys: Vec<(Side, PathBuf)> = paths.iter().map(|p| (side, p.to_path_buf())).collect();
        let mut g = t.lock().unwrap();
        for k in &keys {
            *g.own_names.entry(k.clone()).or_insert(0) += 1;
        }
        OwnNames { t, keys }
    }
}

impl Drop for OwnNames<'_> {
    fn drop(&mut self) {
        let mut g = self.t.lock().unwrap();
        for k in &self.keys {
            if let Some(n) = g.own_names.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    g.own_names.remove(k);
                }
            }
        }
    }
}

impl Tables {
    /// The proof node `id` (a file of `side`, device `dev`, inode `ino`)
    /// was given its id on, if any.
    pub(super) fn proof_of(&self, id: u64, side: Side, dev: u64, ino: u64) -> Option<&[u8]> {
        self.ids
            .get(&(side, dev, ino))
            .filter(|(i, _)| *i == id)
            .map(|(_, p)| &p[..])
    }

    /// Remembers that the file (`side`, `dev`, `ino`) with `proof` is
    /// node `id` (without a proof: forgets what stood for that inode).
    pub(super) fn remember_id(&mut self, id: u64, side: Side, dev: u64, ino: u64, proof: Option<Proof>) {
        let key = (side, dev, ino);
        let Some(p) = proof else {
            self.ids.remove(&key);
            return;
        };
        if self.ids.len() >= IDS_MAX && !self.ids.contains_key(&key) {
            let nodes = &self.nodes;
            self.ids.retain(|_, (i, _)| nodes.contains_key(i));
            if self.ids.len() >= IDS_MAX {
                return;
            }
        }
        self.ids.insert(key, (id, p));
    }

    pub(super) fn drop_write_fd(&mut self, id: u64) {
        self.writers.remove(&id);
        if let Some(n) = self.nodes.get_mut(&id) {
            if matches!(n.fd, Some((_, true))) {
                n.fd = None;
                n.claim = false;
                self.cached_fds -= 1;
            }
        }
    }

    /// Drops the write fds unused for `WRITE_IDLE` (the reaper thread).
    pub(super) fn drop_idle_writers(&mut self) {
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

    /// Whether the view itself is renaming or removing `rel` or a
    /// directory above it right now (`OwnNames`): a name below a directory
    /// the view is moving stops resolving at its old path as much as the
    /// directory's own name does, before `View::renamed` moves it.
    pub(super) fn own_name(&self, side: Side, rel: &Path) -> bool {
        !self.own_names.is_empty()
            && rel
                .ancestors()
                .any(|a| !a.as_os_str().is_empty() && self.own_names.contains_key(&(side, a.to_path_buf())))
    }

    /// View path `rel` no longer names node `id`'s file: another path of
    /// it becomes its name, or, with none left, the node is gone.
    /// Node `id` keeps `h` as its `O_PATH` handle (it has none).
    pub(super) fn give_handle(&mut self, id: u64, h: Arc<OwnedFd>) {
        let Some(n) = self.nodes.get_mut(&id) else { return };
        n.file = Some(h);
        self.handles_held += 1;
        self.handle_ring.push_back(id);
        // Ids of nodes since forgotten or released pile up where nothing
        // is released: keep the ring near the handles it stands for.
        if self.handle_ring.len() > 2 * self.handles_held + 64 {
            let mut seen = std::collections::HashSet::new();
            let nodes = &self.nodes;
            self.handle_ring
                .retain(|id| nodes.get(id).is_some_and(|n| n.file.is_some()) && seen.insert(*id));
        }
    }

    /// Takes the handle of the regular-file node least recently used that
    /// still has a name (not `keep`), for a node that needs one more than
    /// the bound allows: a file the guest is using keeps its handle, and
    /// with it its identity across host renames and removals of the name
    /// the view knows it by. A clock over `handle_ring`: a node used since
    /// the last pass gets one more round. False when every handle is held
    /// by a file with no name left (or by `keep`). `spare_pinned`: for a
    /// lookup, a handle `View::pin` kept in the last `PIN_HOLD` is not
    /// taken either (for another pin at the cap it is: both files are
    /// about to lose a name).
    pub(super) fn release_named_handle(&mut self, keep: u64, spare_pinned: bool) -> bool {
        let mut budget = 2 * self.handle_ring.len();
        while budget > 0 {
            budget -= 1;
            let Some(id) = self.handle_ring.pop_front() else {
                return false;
            };
            let Some(n) = self.nodes.get_mut(&id) else { continue };
            if n.file.is_none() {
                continue;
            }
            if id == keep
                || n.gone
                || n.dir
                || n.used
                || (spare_pinned && n.pinned.is_some_and(|t| t.elapsed() < PIN_HOLD))
            {
                n.used = false;
                self.handle_ring.push_back(id);
                continue;
            }
            n.file = None;
            self.handles_held -= 1;
            return true;
        }
        false
    }

    pub(super) fn detach(&mut self, id: u64, side: Side, rel: &Path) {
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
