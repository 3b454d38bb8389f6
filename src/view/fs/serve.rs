//! Serving views: mounting one, the writer reaper and the watcher thread
//! (host-side changes become kernel invalidations and relayed paths), and
//! the supervisor's entry points that read the views and serve them.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fuser::INodeNo;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::sys;
use crate::view::budget::Budget;
use crate::view::counts::Counts;
use crate::view::ignored::IgnoreRules;
use crate::view::sentry::Sentry;
use crate::view::watch::{Inval, Watches};

use super::attr::set_guest_owner;
use super::host::{resolve, split, Side};
use super::table::{told, Tables, WRITE_IDLE};
use super::{GuestChanged, View};

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
    // Once per path and batch (a file's write is several events).
    let found = std::cell::RefCell::new(std::collections::HashMap::<PathBuf, Option<u64>>::new());
    let node_of = |rel: &Path| -> Option<u64> {
        if rel.as_os_str().is_empty() {
            return Some(1);
        }
        if let Some(id) = found.borrow().get(rel) {
            return *id;
        }
        let known = t.lock().unwrap().by_key.get(&(Side::Host, rel.to_path_buf())).copied();
        let id = known.or_else(|| file_node_at(rel, t, host));
        found.borrow_mut().insert(rel.to_path_buf(), id);
        id
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
            let later: Vec<PathBuf> = crate::view::watch::relayed(&events, &|wd| w.dir_of(wd))
                .into_iter()
                .filter(|rel| !own.recent(rel))
                .collect();
            // Watchers of a file the host replaced hear of it first (while
            // the kernel still resolves its name to that file).
            let old: Vec<PathBuf> = crate::view::watch::replaced(&events, &|wd| w.dir_of(wd))
                .into_iter()
                .filter(|rel| !own.recent(rel) && replaced_known(rel, t, host))
                .collect();
            if !old.is_empty() {
                let (done, acks) = std::sync::mpsc::sync_channel(old.len());
                let n = old.len();
                for rel in old {
                    let _ = tx.send(Relayed {
                        path: rel,
                        done: Some(done.clone()),
                    });
                }
                drop(done);
                let end = std::time::Instant::now() + REPLACED_WAIT;
                for _ in 0..n {
                    let left = end.saturating_duration_since(std::time::Instant::now());
                    if acks.recv_timeout(left).is_err() {
                        break;
                    }
                }
            }
            for rel in later {
                let _ = tx.send(Relayed { path: rel, done: None });
            }
        }
        found.borrow_mut().clear();
        let plan = crate::view::watch::plan(&events, &|wd| w.dir_of(wd), &node_of);
        host_events(&events, w, t, &node_of, relay.map(|(_, own)| own));
        names_gone(&events, w, t, host);
        if plan.contains(&Inval::All) {
            invalidate(&crate::view::watch::plan_all(&all_nodes(t)), notifier);
        } else {
            invalidate(&plan, notifier);
        }
    }
}

/// The node of the file now at host view path `rel` that the kernel knows
/// by another name (`Tables::by_ino`): a file the host moved, or moved a
/// directory above, since the kernel looked it up. Its cached attributes
/// and pages are the file's whatever its name, so a host change there
/// reaches them too (a read served from the kernel's pages after a host
/// rename would not tell the view the guest saw the file as it is now).
fn file_node_at(rel: &Path, t: &Mutex<Tables>, host: &OwnedFd) -> Option<u64> {
    let (dir, name) = split(rel);
    let p = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let st = rustix::fs::openat2(
        host,
        p,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve(),
    )
    .and_then(|d| rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW))
    .ok()?;
    let t = t.lock().unwrap();
    let id = *t.by_ino.get(&(Side::Host, st.st_dev, st.st_ino))?;
    t.nodes
        .get(&id)
        .filter(|n| !n.dir && (n.host_dev, n.host_ino) == (st.st_dev, st.st_ino))
        .map(|_| id)
}

/// What the guest knows of the host files the events are about
/// (`table::after_host_event`): a host write makes its copy stale; a host
/// rename, link, unlink of another name or chmod, which move only the
/// file's ctime, do not (the guest's next overwrite is no stale one).
/// `own`: the paths the guest itself just changed (their writes are its own).
pub(super) fn host_events(
    events: &[crate::view::watch::Event],
    w: &Watches,
    t: &Mutex<Tables>,
    node_of: &dyn Fn(&Path) -> Option<u64>,
    own: Option<&GuestChanged>,
) {
    for ev in events {
        if ev.name.is_empty() || ev.mask & sys::IN_ISDIR != 0 {
            continue;
        }
        let Some(dir) = w.dir_of(ev.wd) else { continue };
        let rel = dir.join(&ev.name);
        let Some(id) = node_of(&rel) else { continue };
        let wrote = ev.mask & sys::IN_MODIFY != 0;
        if wrote && own.is_some_and(|o| o.recent(&rel)) {
            continue;
        }
        let Some(h) = t
            .lock()
            .unwrap()
            .nodes
            .get(&id)
            .filter(|n| n.side == Side::Host)
            .and_then(|n| n.file.clone())
        else {
            continue;
        };
        let Ok(st) = rustix::fs::fstat(&*h) else { continue };
        let mut t = t.lock().unwrap();
        if let Some(n) = t
            .nodes
            .get_mut(&id)
            .filter(|n| (n.host_dev, n.host_ino) == (st.st_dev, st.st_ino))
        {
            (n.seen, n.host_wrote) = super::table::after_host_event(n.seen, n.host_wrote, wrote, &st);
        }
    }
}

/// How long the watcher waits for the relay to touch the files the host
/// replaced before it invalidates their names (a bound for a loaded
/// machine, where `runsc exec` is slow; past it the names are invalidated
/// anyway and those watchers may miss the change).
const REPLACED_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Whether view path `rel`, which the host just made or renamed onto, is a
/// name the kernel knows as another file (a regular file node whose host
/// inode is not the one there now). If so the name is taken off that node
/// (`Tables::detach`): the relay's touch of the name, which the kernel
/// still resolves to the old node, then reaches the old file through its
/// handle and never the new file by path (whose mtime it would set to the
/// old one's).
fn replaced_known(rel: &Path, t: &Mutex<Tables>, host: &OwnedFd) -> bool {
    let key = (Side::Host, rel.to_path_buf());
    let known = {
        let t = t.lock().unwrap();
        t.by_key
            .get(&key)
            .and_then(|id| t.nodes.get(id).map(|n| (*id, n)))
            .filter(|(_, n)| !n.gone && !n.dir && n.file.is_some())
            .map(|(id, n)| (id, n.host_ino))
    };
    let Some((id, ino)) = known else { return false };
    let (dir, name) = split(rel);
    let p = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let now = rustix::fs::openat2(
        host,
        p,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        resolve(),
    )
    .and_then(|d| rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW));
    if now.is_ok_and(|st| st.st_ino == ino) {
        return false;
    }
    let mut t = t.lock().unwrap();
    // Not while the view renames or removes the name or a directory above
    // it (`OwnNames`): the stat may show that change, not the host's.
    if t.by_key.get(&key) != Some(&id) || t.own_name(Side::Host, rel) {
        return false;
    }
    t.detach(id, Side::Host, rel);
    true
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

/// The host removed, renamed away or replaced names the view knows
/// (`IN_DELETE`, `IN_MOVED_FROM`, of a file or of a directory above it;
/// `IN_CREATE`, `IN_MOVED_TO` of another file at a file's name): a file node
/// whose name no longer reaches its file loses it (`Tables::detach`:
/// another known name of it takes its place, or its handle alone serves
/// it), so no operation by path (link, readlink, chmod) goes to a name
/// that is gone or is another file now.
pub(super) fn names_gone(events: &[crate::view::watch::Event], w: &Watches, t: &Mutex<Tables>, host: &OwnedFd) {
    let moved = sys::IN_MOVED_FROM | sys::IN_ISDIR;
    for (i, ev) in events.iter().enumerate() {
        let replaced = ev.mask & (sys::IN_CREATE | sys::IN_MOVED_TO) != 0 && ev.mask & sys::IN_ISDIR == 0;
        if ev.name.is_empty() || (ev.mask & (sys::IN_DELETE | sys::IN_MOVED_FROM) == 0 && !replaced) {
            continue;
        }
        let Some(dir) = w.dir_of(ev.wd) else { continue };
        // A host rename of a directory within the workspace: the kernel
        // queues its IN_MOVED_TO right after its IN_MOVED_FROM. The watches
        // below it now report under the new path.
        if ev.mask & moved == moved {
            if let Some(to) = events.get(i + 1).filter(|n| {
                n.mask & (sys::IN_MOVED_TO | sys::IN_ISDIR) == (sys::IN_MOVED_TO | sys::IN_ISDIR) && !n.name.is_empty()
            }) {
                // Not after the view's own rename (`View::renamed` moved
                // the watches already; a new directory may have the old
                // name by now).
                if let Some(to_path) = w.dir_of(to.wd).map(|d| d.join(&to.name)).filter(|p| !w.is_watched(p)) {
                    w.renamed(&dir.join(&ev.name), &to_path);
                }
            }
        }
        let key = (Side::Host, dir.join(&ev.name));
        let known = {
            let t = t.lock().unwrap();
            if t.own_name(Side::Host, &key.1) {
                // The view's own rename or removal (of the name or of a
                // directory above it), its bookkeeping not done yet
                // (`OwnNames`).
                continue;
            }
            t.by_key
                .get(&key)
                .and_then(|id| t.nodes.get(id).map(|n| (*id, n)))
                .filter(|(_, n)| !n.gone)
                .map(|(id, n)| (id, n.host_dev, n.host_ino, n.dir))
        };
        let is_dir = ev.mask & sys::IN_ISDIR != 0;
        let (id, dev, ino) = match known {
            Some((id, dev, ino, d)) if d == is_dir => (id, dev, ino),
            // A directory the kernel never looked up has no names below.
            _ => continue,
        };
        let p = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir.as_path()
        };
        let now = rustix::fs::openat2(
            host,
            p,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )
        .and_then(|d| rustix::fs::statat(&d, ev.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW));
        if now.is_ok_and(|st| (st.st_dev, st.st_ino) == (dev, ino)) {
            continue;
        }
        let mut t = t.lock().unwrap();
        if t.own_name(Side::Host, &key.1) {
            // The view began renaming or removing it (or a directory above
            // it) since the check above: the stat may show that change,
            // which its own bookkeeping records.
            continue;
        }
        if !is_dir {
            if t.by_key.get(&key) == Some(&id) {
                t.detach(id, Side::Host, &key.1);
            }
            continue;
        }
        // The names of files below the directory (its own node keeps its
        // path, as for any directory: the kernel looks the new one up).
        let below: Vec<(u64, PathBuf)> = t
            .nodes
            .iter()
            .filter(|(_, n)| n.side == Side::Host && !n.gone && !n.dir)
            .flat_map(|(&nid, n)| {
                std::iter::once(&n.rel)
                    .chain(n.aliases.iter())
                    .filter(|p| p.starts_with(&key.1))
                    .map(move |p| (nid, p.clone()))
            })
            .collect();
        for (nid, p) in below {
            t.detach(nid, Side::Host, &p);
        }
    }
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
pub type Relay = std::sync::mpsc::Sender<Relayed>;

/// One path to relay, and where to say it was touched (the watcher waits
/// for the files the host replaced, `crate::view::watch::replaced`).
pub struct Relayed {
    pub path: PathBuf,
    pub done: Option<std::sync::mpsc::SyncSender<()>>,
}

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
    for (i, v) in specs.into_iter().enumerate() {
        // After the workspace (first) come a linked worktree's common
        // directory (`git_root`) and the read-write volumes.
        let volume = i > 0 && !v.git_root;
        let (v, exec) = crate::view::hosttool::prepare_view(v, workspace.as_deref()).map_err(ViewError::HostConfig)?;
        // The workspace view's host-tool files (the first view's).
        let tools = (i == 0).then(|| Arc::new(crate::view::hosttool::view_matcher(&v)));
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
                // What the rules hide is not copied (a host-tool file Git
                // ignores stays as invisible as every ignored host file).
                let source = v.source.clone();
                let hidden = |rel: &Path, dir: bool, (dev, ino): (u64, u64)| {
                    rules.is_ignored(rel, dir)
                        || (rules.may_be_hidden(dev, ino) && {
                            let btime = std::fs::symlink_metadata(source.join(rel))
                                .map_or(0, |m| crate::view::ignored::btime_of(&m));
                            rules.is_hidden_id(dev, ino, btime)
                        })
                };
                crate::view::hosttool::seed_store(&v.source, dir, &v, rules.host_tool_found(), &hidden)
                    .map_err(ViewError::HostConfig)?;
                let rules = match &tools {
                    Some(t) => rules.with_host_tool(t.clone()),
                    None => rules,
                };
                Some((dir.as_path(), rules))
            }
            None => None,
        };
        let sentry = Sentry::for_view(&v.source, v.git_root);
        let counted = store.is_some();
        let mut view = View::new(&v.source, store, sentry)
            .map_err(|e| ViewError::Open(v.source.clone(), e))?
            .with_hooks(v.protect.clone())
            .with_exec(exec)
            .with_host_tool(tools);
        if let (Some(b), true) = (budget, counted) {
            view = view.with_budget(b.clone(), false);
        }
        if volume {
            view = view.for_volume();
        }
        served.push(serve(view, &v.mountpoint, relay.take()).map_err(|e| ViewError::Serve(v.mountpoint.clone(), e))?);
    }
    Ok(served)
}
