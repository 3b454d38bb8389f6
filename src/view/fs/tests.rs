//! The node table without FUSE: a [`View`] over a temporary host directory,
//! driven through the same methods the FUSE handlers call.

use super::attr::{time, timespec};
use super::table::WRITE_IDLE;
use super::*;
use fuser::FileHandle;
use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::UNIX_EPOCH;

/// A fresh host directory, removed on drop.
pub(super) struct Tmp(pub(super) PathBuf);

impl Tmp {
    pub(super) fn new(tag: &str) -> Tmp {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("lazaret-view-nodes-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }

    pub(super) fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.0.join(rel), text).unwrap();
    }

    pub(super) fn stat(&self, rel: &str) -> rustix::fs::Stat {
        rustix::fs::lstat(self.0.join(rel)).unwrap()
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn view(dir: &Tmp) -> View {
    View::new(&dir.0, None, Sentry::new(false, Vec::new())).unwrap()
}

/// Looks `rel` up on the host side and returns its node id.
fn lookup(v: &View, rel: &str) -> u64 {
    v.remember(Side::Host, Path::new(rel)).unwrap().ino.0
}

/// Replaces the host file at `rel` by a new file (a new inode: the old one
/// stays alive under `keep`).
fn replace_on_host(dir: &Tmp, rel: &str, keep: &str) {
    std::fs::hard_link(dir.0.join(rel), dir.0.join(keep)).unwrap();
    std::fs::remove_file(dir.0.join(rel)).unwrap();
    dir.write(rel, "new");
}

fn errno_of<T>(r: Result<T, Errno>) -> Errno {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn same_file_keeps_its_id() {
    let dir = Tmp::new("same");
    dir.write("a", "x");
    let v = view(&dir);
    let id = lookup(&v, "a");
    assert_ne!(id, 1, "1 is the root");
    assert_eq!(lookup(&v, "a"), id);
    assert_eq!(v.t.lock().unwrap().nodes[&id].lookups, 2);
}

#[test]
fn node_ids_are_never_reused() {
    let dir = Tmp::new("reuse");
    dir.write("a", "old");
    let v = view(&dir);
    let mut seen = HashSet::from([1u64]);
    let mut id = lookup(&v, "a");
    assert!(seen.insert(id));
    for round in 0..20 {
        // Replaced on the host: the path gets a new id, the old one is gone.
        replace_on_host(&dir, "a", &format!("keep{round}"));
        let next = lookup(&v, "a");
        assert!(seen.insert(next), "id {next} handed out twice");
        assert!(next > id);
        assert!(v.t.lock().unwrap().nodes[&id].gone);
        // Removed through the view and made again: a new id too.
        std::fs::rename(dir.0.join("a"), dir.0.join(format!("moved{round}"))).unwrap();
        v.removed(Side::Host, Path::new("a"));
        dir.write("a", "again");
        assert!(v.t.lock().unwrap().nodes[&next].gone);
        let again = lookup(&v, "a");
        assert!(seen.insert(again), "id {again} handed out twice");
        id = again;
    }
}

#[test]
fn a_replaced_file_stays_its_node_and_a_stale_path_is_estale() {
    let dir = Tmp::new("stale");
    dir.write("a", "old");
    let v = view(&dir);
    let id = lookup(&v, "a");
    // The host replaced the file, the kernel still holds the old id: by
    // path it is stale, through its handle it is still the old file (an
    // open fd on a plain bind reads the old data).
    replace_on_host(&dir, "a", "keep");
    assert_eq!(errno_of(v.node_stat(INodeNo(id))), Errno::ESTALE);
    let mut s = String::new();
    use std::io::Read;
    (&*v.node_file(INodeNo(id), false).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "old");
    // Once looked up again the path is a new node.
    let new = lookup(&v, "a");
    assert_ne!(new, id);
    assert!(v.t.lock().unwrap().nodes[&id].gone);
    assert!(v.node_stat(INodeNo(new)).is_ok());
    // A node without a handle (beyond HANDLES_MAX) is refused once stale.
    {
        let mut t = v.t.lock().unwrap();
        let n = t.nodes.get_mut(&new).unwrap();
        n.file = None;
        t.handles_held -= 1;
    }
    replace_on_host(&dir, "a", "keep2");
    assert_eq!(errno_of(v.node_file(INodeNo(new), false)), Errno::ESTALE);
    assert_eq!(errno_of(v.node_file(INodeNo(new), true)), Errno::ESTALE);
    // An id the table never handed out (or already forgot).
    assert_eq!(errno_of(v.node(INodeNo(new + 1000))), Errno::ENOENT);
    assert_eq!(errno_of(v.node_file(INodeNo(new + 1000), false)), Errno::ENOENT);
}

#[test]
fn an_unlinked_file_serves_reads_writes_and_attributes() {
    let dir = Tmp::new("unlinked");
    dir.write("a", "old");
    let v = view(&dir);
    let id = lookup(&v, "a");
    v.pin(Side::Host, Path::new("a"));
    std::fs::remove_file(dir.0.join("a")).unwrap();
    v.removed(Side::Host, Path::new("a"));
    assert!(v.t.lock().unwrap().nodes[&id].gone);
    let w = v.node_file(INodeNo(id), true).unwrap();
    w.write_all_at(b"new", 0).unwrap();
    let (_, _, st, gone) = v.handle_stat(INodeNo(id)).unwrap().unwrap();
    assert!(gone);
    assert_eq!((st.st_size, st.st_nlink), (3, 0));
    // The write fd goes once idle; a read reopens from the handle.
    v.t.lock().unwrap().drop_write_fd(id);
    assert!(v.cached_fd(INodeNo(id)).is_none());
    let mut buf = [0u8; 3];
    v.node_file(INodeNo(id), false)
        .unwrap()
        .read_exact_at(&mut buf, 0)
        .unwrap();
    assert_eq!(&buf, b"new");
    check_counts(&v);
}

#[test]
fn hard_links_are_one_node() {
    let dir = Tmp::new("links");
    dir.write("h1", "x");
    std::fs::hard_link(dir.0.join("h1"), dir.0.join("h2")).unwrap();
    let v = view(&dir);
    let a = lookup(&v, "h1");
    let b = lookup(&v, "h2");
    assert_eq!(a, b, "one file, one node");
    // Removing one name keeps the node under the other.
    std::fs::remove_file(dir.0.join("h1")).unwrap();
    v.removed(Side::Host, Path::new("h1"));
    {
        let t = v.t.lock().unwrap();
        assert!(!t.nodes[&a].gone);
        assert_eq!(t.nodes[&a].rel, Path::new("h2"));
    }
    assert!(v.node_stat(INodeNo(a)).is_ok());
    // A rename moves that name.
    std::fs::rename(dir.0.join("h2"), dir.0.join("h3")).unwrap();
    v.renamed(Side::Host, Path::new("h2"), Path::new("h3"));
    assert_eq!(v.known(Side::Host, Path::new("h3")), Some(a));
    assert_eq!(v.known(Side::Host, Path::new("h2")), None);
    // Forgetting drops every key.
    v.t.lock().unwrap().nodes.get_mut(&a).unwrap().lookups = 1;
    let mut t = v.t.lock().unwrap();
    let n = t.nodes.remove(&a).unwrap();
    assert!(n.aliases.is_empty());
    drop(t);
}

#[test]
fn deep_paths_are_walked_in_pieces() {
    let dir = Tmp::new("deep");
    let mut rel = PathBuf::new();
    let mut host = dir.0.clone();
    for i in 0..60 {
        let c = format!("{i:02}{}", "d".repeat(200));
        rel.push(&c);
        // The host side walks relative to each new level too (PATH_MAX).
        rustix::fs::mkdirat(v_open(&host), c.as_str(), Mode::from_raw_mode(0o755)).unwrap();
        host.push(&c);
    }
    assert!(rel.as_os_str().len() > 12_000);
    let v = view(&dir);
    assert!(v.dir(Side::Host, &rel).is_ok());
    let (st, h, _) = v.stat_handle(Side::Host, &rel).unwrap();
    assert!(is_dir(&st) && h.is_none());
}

fn v_open(p: &Path) -> OwnedFd {
    // Opened piece by piece from the temporary directory's parent chain.
    let mut fd = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for c in p.components().skip(1) {
        fd = rustix::fs::openat(&fd, c.as_os_str(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    fd
}

#[test]
fn times_before_1970_keep_their_sign() {
    // -1.5 s is (-2, 500_000_000); fuser hands it over as EPOCH - (2, 0.5 s).
    let t = UNIX_EPOCH - Duration::new(2, 500_000_000);
    let ts = timespec(t);
    assert_eq!((ts.tv_sec, ts.tv_nsec as i64), (-2, 500_000_000));
    // Replies: the real instant.
    assert_eq!(time(-2, 500_000_000), UNIX_EPOCH - Duration::from_millis(1500));
}

#[test]
fn a_gone_node_keeps_its_cached_fd() {
    let dir = Tmp::new("gone");
    dir.write("a", "old");
    let v = view(&dir);
    let id = lookup(&v, "a");
    let f = v.node_file(INodeNo(id), false).unwrap();
    replace_on_host(&dir, "a", "keep");
    lookup(&v, "a");
    let again = v.node_file(INodeNo(id), false).unwrap();
    assert!(Arc::ptr_eq(&f, &again), "the open fd still serves the old file");
}

/// Checks the counters against the nodes that hold fds.
pub(super) fn check_counts(v: &View) {
    let t = v.t.lock().unwrap();
    let cached = t.nodes.values().filter(|n| n.fd.is_some()).count();
    let handles = t.nodes.values().filter(|n| n.file.is_some()).count();
    assert_eq!(t.cached_fds, cached);
    assert_eq!(t.handles_held, handles);
    assert!(t.cached_fds <= FD_CACHE, "{} cached fds", t.cached_fds);
    assert!(t.handles_held <= HANDLES_MAX + PINNED_MAX, "{} handles", t.handles_held);
}
#[test]
fn fd_cache_stays_bounded_and_eviction_closes_fds() {
    let dir = Tmp::new("cache");
    let extra = 40;
    let total = FD_CACHE + extra;
    let mut files: Vec<(u64, Weak<File>)> = Vec::new();
    for i in 0..total {
        dir.write(&format!("f{i}"), "x");
    }
    let v = view(&dir);
    for i in 0..total {
        let id = lookup(&v, &format!("f{i}"));
        let f = v.node_file(INodeNo(id), i % 2 == 0).unwrap();
        files.push((id, Arc::downgrade(&f)));
        drop(f);
        check_counts(&v);
    }
    assert_eq!(v.t.lock().unwrap().cached_fds, FD_CACHE);
    // The oldest were evicted, and nothing else holds them: closed.
    for (i, (id, w)) in files.iter().enumerate() {
        let open = w.upgrade().is_some();
        assert_eq!(open, i >= extra, "file {i}: open {open}");
        assert_eq!(v.cached_fd(INodeNo(*id)).is_some(), i >= extra);
    }
    // Caching again for a node that has an fd does not count it twice.
    let (id, _) = files[total - 1];
    let f = v.node_file(INodeNo(id), true).unwrap();
    v.cache_fd(id, f, true);
    check_counts(&v);
    // An evicted node opens a fresh fd on demand.
    let (id, _) = files[0];
    assert!(v.node_file(INodeNo(id), false).is_ok());
    check_counts(&v);
}

#[test]
fn no_write_fd_outlives_the_write_it_served() {
    let dir = Tmp::new("written");
    dir.write("build.sh", "#!/bin/sh\n");
    let v = view(&dir);
    let a = lookup(&v, "build.sh");
    let f = v.node_file(INodeNo(a), true).unwrap();
    assert!(matches!(v.cached_fd(INodeNo(a)), Some((_, true))));
    drop(f);
    v.written(FileHandle(0), INodeNo(a));
    assert!(
        matches!(v.cached_fd(INodeNo(a)), Some((_, false))),
        "the write fd went with the write, a read fd in its place"
    );
    // The host can run what was written at once: no fd writes the file.
    let p = dir.0.join("build.sh");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let st = std::process::Command::new(&p).status().unwrap();
    assert!(st.success(), "{st:?}");
    // A read fd stays cached; the next write reopens.
    v.node_file(INodeNo(a), false).unwrap();
    v.written(FileHandle(0), INodeNo(a));
    assert!(matches!(v.cached_fd(INodeNo(a)), Some((_, false))));
    assert!(v.node_file(INodeNo(a), true).is_ok());
    check_counts(&v);
}

/// Removing a host file while another worker thread still holds the view's
/// own write fd of it (a write racing the unlink) waits for exactly that
/// fd, however long the write takes, and succeeds as on a plain bind; a
/// host process's write open is still refused, and the file kept.
#[test]
fn a_remove_waits_for_the_views_own_write_and_refuses_a_host_writer() {
    let dir = Tmp::new("ownwrite");
    dir.write("a", "x");
    dir.write("b", "y");
    let v = view(&dir);
    let a = lookup(&v, "a");
    let w = v.node_file(INodeNo(a), true).unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        w.write_all_at(b"z", 0).unwrap();
    });
    v.remove_entry(INodeNo(1), std::ffi::OsStr::new("a"), false).unwrap();
    writer.join().unwrap();
    assert!(!dir.0.join("a").exists());
    assert_eq!(
        v.t.lock().unwrap().nodes[&a].own_writes(),
        super::table::OwnWrites::None
    );

    lookup(&v, "b");
    let host = std::fs::OpenOptions::new().write(true).open(dir.0.join("b")).unwrap();
    assert_eq!(
        errno_of(v.remove_entry(INodeNo(1), std::ffi::OsStr::new("b"), false)),
        Errno::EBUSY
    );
    assert!(dir.0.join("b").exists(), "a file a host process writes is kept");
    drop(host);
    v.remove_entry(INodeNo(1), std::ffi::OsStr::new("b"), false).unwrap();
    check_counts(&v);
}

#[test]
fn idle_write_fds_go_and_reads_keep_theirs() {
    let dir = Tmp::new("idle");
    dir.write("a", "x");
    dir.write("b", "y");
    let v = view(&dir);
    let a = lookup(&v, "a");
    let b = lookup(&v, "b");
    v.node_file(INodeNo(a), true).unwrap();
    v.node_file(INodeNo(b), false).unwrap();
    {
        let mut t = v.t.lock().unwrap();
        let past = std::time::Instant::now() - 2 * WRITE_IDLE;
        t.writers.insert(a, past);
        t.drop_idle_writers();
    }
    assert!(v.cached_fd(INodeNo(a)).is_none(), "the idle write fd went");
    assert!(v.cached_fd(INodeNo(b)).is_some(), "read fds stay cached");
    check_counts(&v);
}

#[test]
fn guest_owner_and_mode_show_while_the_host_keeps_its_own() {
    let dir = Tmp::new("guest");
    dir.write("a", "x");
    let v = view(&dir);
    let id = lookup(&v, "a");
    let st = v.stat(Side::Host, Path::new("a")).unwrap();
    v.keep_guest(&st, Some(0o4777), None, Some(4242), Some(4343));
    let a = v.shown(id, Side::Host, &st);
    // The chown after the chmod cleared set-user-ID, as the kernel does.
    assert_eq!((a.uid, a.gid, a.perm), (4242, 4343, 0o777));
    // A mode the host may have: nothing kept; the developer's id: the host's.
    v.keep_guest(&st, Some(0o644), None, Some(0), Some(0));
    assert!(v.guest.lock().unwrap().is_empty());
    // The store side is shown as it is.
    v.keep_guest(&st, Some(0o1777), None, None, None);
    assert_eq!(v.shown(id, Side::Store, &st).perm as u32, st.st_mode & 0o7777);
}

#[test]
fn a_mode_kept_inside_gives_way_to_a_later_chmod_on_the_host() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Tmp::new("guest-mode");
    dir.write("a", "x");
    std::fs::set_permissions(dir.0.join("a"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let v = view(&dir);
    let id = lookup(&v, "a");
    // A chmod inside that the host file did not get all of (capped).
    let st = v.stat(Side::Host, Path::new("a")).unwrap();
    v.keep_guest(&st, Some(0o644), None, None, None);
    assert_eq!(v.shown(id, Side::Host, &st).perm, 0o644);
    // The developer's chmod on the host: its mode shows inside.
    std::fs::set_permissions(dir.0.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let st = v.stat(Side::Host, Path::new("a")).unwrap();
    assert_eq!(v.shown(id, Side::Host, &st).perm, 0o755);
}

#[test]
fn rules_apply_at_the_original_path_of_a_moved_directory() {
    let dir = Tmp::new("moved");
    std::fs::create_dir(dir.0.join("config")).unwrap();
    dir.write(".gitignore", "/config/master.key\n");
    let store = Tmp::new("moved-store");
    let rules = crate::view::ignored::IgnoreRules::load(&dir.0, None, None, &[]).unwrap();
    let v = View::new(&dir.0, Some((&store.0, rules)), Sentry::new(false, Vec::new())).unwrap();
    assert!(v.ignored(Path::new("config/master.key"), false));
    assert!(!v.ignored(Path::new("c2/master.key"), false));
    v.dir_moved(Path::new("config"), Path::new("c2"));
    assert!(v.ignored(Path::new("c2/master.key"), false));
    v.dir_moved(Path::new("c2"), Path::new("c3/c4"));
    assert!(v.ignored(Path::new("c3/c4/master.key"), false));
    assert!(!v.ignored(Path::new("c3/c4/other"), false));
}

/// A host write that lands while the guest reads: the guest's bytes may be
/// the old version, so its next overwrite is refused (EBUSY) as after any
/// unseen host change; a read with nothing between its two stats makes the
/// guest current again.
#[test]
fn a_host_write_during_a_read_leaves_the_guest_stale() {
    let dir = Tmp::new("read-race");
    dir.write("db", "page one");
    let v = view(&dir);
    let id = lookup(&v, "db");
    let stat = || rustix::fs::stat(dir.0.join("db")).unwrap();
    let pre = stat();
    dir.write("db", "page one, rewritten by the host");
    let post = stat();
    v.read_between(id, &pre, &post);
    assert_eq!(errno_of(v.fresh_for_write(INodeNo(id), &post, true)), Errno::EBUSY);
    v.read_between(id, &post, &post);
    assert!(v.fresh_for_write(INodeNo(id), &post, true).is_ok());
}

#[test]
fn a_volume_mode_change_never_adds_group_or_other_bits() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Tmp::new("volmode");
    let v = view(&dir).for_volume();
    let ws = view(&dir);
    let set = |rel: &str, m: u32| {
        std::fs::set_permissions(dir.0.join(rel), std::fs::Permissions::from_mode(m)).unwrap();
    };
    let st = |rel: &str| rustix::fs::stat(dir.0.join(rel)).unwrap();
    // 0600 at first sight: 0644 gives 0600, 0400 is 0400, then 0600 again.
    dir.write("secret", "s");
    set("secret", 0o600);
    assert_eq!(v.chmod_mode(Side::Host, &st("secret"), 0o644), 0o600);
    assert_eq!(v.chmod_mode(Side::Host, &st("secret"), 0o400), 0o400);
    set("secret", 0o400);
    assert_eq!(v.chmod_mode(Side::Host, &st("secret"), 0o600), 0o600);
    assert_eq!(v.chmod_mode(Side::Host, &st("secret"), 0o644), 0o600);
    assert_eq!(v.chmod_mode(Side::Host, &st("secret"), 0o700), 0o700);
    // Bits it had at first sight come back after being removed.
    dir.write("shared", "s");
    set("shared", 0o640);
    assert_eq!(v.chmod_mode(Side::Host, &st("shared"), 0o600), 0o600);
    set("shared", 0o600);
    assert_eq!(v.chmod_mode(Side::Host, &st("shared"), 0o640), 0o640);
    assert_eq!(v.chmod_mode(Side::Host, &st("shared"), 0o666), 0o640);
    // Execute where the class can read: 0640 to 0755 gives 0750.
    assert_eq!(v.chmod_mode(Side::Host, &st("shared"), 0o755), 0o750);
    dir.write("script", "s");
    set("script", 0o644);
    assert_eq!(v.chmod_mode(Side::Host, &st("script"), 0o755), 0o755);
    assert_eq!(v.chmod_mode(Side::Host, &st("script"), 0o777), 0o755);
    // Set-id and world-write stay stripped, also where the file had them.
    dir.write("tool", "s");
    set("tool", 0o757);
    assert_eq!(v.chmod_mode(Side::Host, &st("tool"), 0o4777), 0o755);
    // Directories alike.
    std::fs::create_dir(dir.0.join("d")).unwrap();
    set("d", 0o700);
    assert_eq!(v.chmod_mode(Side::Host, &st("d"), 0o755), 0o700);
    // A file the sandbox made is its own: an editor's save-aside made
    // 0600 gets the original's 0644 (set-id and world-write still go).
    dir.write("new", "n");
    set("new", 0o600);
    v.volume.as_ref().unwrap().made(&st("new"));
    assert_eq!(v.chmod_mode(Side::Host, &st("new"), 0o644), 0o644);
    assert_eq!(v.chmod_mode(Side::Host, &st("new"), 0o4666), 0o664);
    // Once its last name is gone, a host file at a reused inode number is
    // the host's again.
    v.volume.as_ref().unwrap().gone(&st("new"));
    assert_eq!(v.chmod_mode(Side::Host, &st("new"), 0o644), 0o600);
    // The workspace view caps alike: a 0600 file stays 0600 with the
    // owner's execute as asked.
    set("secret", 0o600);
    assert_eq!(ws.chmod_mode(Side::Host, &st("secret"), 0o755), 0o700);
    assert_eq!(ws.chmod_mode(Side::Host, &st("secret"), 0o4777), 0o700);
    assert_eq!(ws.chmod_mode(Side::Host, &st("script"), 0o755), 0o755);
    // Pure rule.
    assert_eq!(attr::cap_class_bits(0o755, 0o600), 0o700);
    assert_eq!(attr::cap_class_bits(0o644, 0o600), 0o600);
    assert_eq!(attr::cap_class_bits(0o755, 0o644), 0o755);
    assert_eq!(attr::cap_class_bits(0o775, 0o644), 0o755);
    assert_eq!(attr::cap_class_bits(0o751, 0o604), 0o701);
    assert_eq!(attr::cap_class_bits(0o1700, 0o600), 0o1700);
}

#[test]
fn a_volume_forgets_a_file_renamed_over() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Tmp::new("volrename");
    let v = view(&dir).for_volume();
    let st = |rel: &str| rustix::fs::stat(dir.0.join(rel)).unwrap();
    let seen = |s: &rustix::fs::Stat| v.volume.as_ref().unwrap().knows(s);
    // A file the sandbox made, then renamed over: its inode number may be
    // reused by a host file (a tool's atomic save), which must not find
    // the sandbox's uncapped entry (nor a stale first mode).
    dir.write("made", "m");
    dir.write("other", "o");
    std::fs::set_permissions(dir.0.join("other"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let made = st("made");
    v.volume.as_ref().unwrap().made(&made);
    let other = st("other");
    v.chmod_mode(Side::Host, &other, 0o644);
    dir.write("x", "x");
    lookup(&v, "made");
    lookup(&v, "x");
    v.rename_entry(
        INodeNo(1),
        std::ffi::OsStr::new("x"),
        INodeNo(1),
        std::ffi::OsStr::new("made"),
        fuser::RenameFlags::empty(),
    )
    .unwrap();
    assert!(!seen(&made), "the replaced file's entry outlived it");
    lookup(&v, "other");
    dir.write("y", "y");
    lookup(&v, "y");
    v.rename_entry(
        INodeNo(1),
        std::ffi::OsStr::new("y"),
        INodeNo(1),
        std::ffi::OsStr::new("other"),
        fuser::RenameFlags::empty(),
    )
    .unwrap();
    assert!(!seen(&other), "the replaced host file's first mode outlived it");
}

#[test]
fn a_change_waits_for_a_host_lock_and_is_refused_at_once_while_it_stays() {
    use crate::sys::{ofd_lock, RangeLock};
    let dir = Tmp::new("locks");
    dir.write("f", "data");
    let v = view(&dir);
    let ino = INodeNo(lookup(&v, "f"));
    let f = v.node_file(ino, true).unwrap();
    // A host process's lock (another open file) that goes after 100 ms:
    // the change waits for it, then runs.
    let host = File::options().read(true).write(true).open(dir.0.join("f")).unwrap();
    assert!(ofd_lock(&host, RangeLock::Read, 0x4000_0002, 510).unwrap());
    let t0 = std::time::Instant::now();
    let (rel, h) = std::sync::mpsc::channel::<()>();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(host);
        let _ = rel.send(());
    });
    assert_eq!(v.under_host_locks(ino, &*f, || Ok(7)), Ok(7));
    assert!(t0.elapsed() >= std::time::Duration::from_millis(90), "it waited");
    releaser.join().unwrap();
    h.recv().unwrap();
    // A lock that stays: refused after the whole wait, then at once.
    let host = File::options().read(true).write(true).open(dir.0.join("f")).unwrap();
    assert!(ofd_lock(&host, RangeLock::Read, 128, 1).unwrap());
    let t0 = std::time::Instant::now();
    assert_eq!(v.under_host_locks(ino, &*f, || Ok(())), Err(Errno::EBUSY));
    assert!(t0.elapsed() >= super::guards::LOCK_WAIT);
    let t0 = std::time::Instant::now();
    assert_eq!(v.under_host_locks(ino, &*f, || Ok(())), Err(Errno::EBUSY));
    assert!(
        t0.elapsed() < std::time::Duration::from_millis(500),
        "stuck: no second long wait"
    );
    // During the change the view's lock is held: a host lock is refused.
    drop(host);
    let probe = File::options().read(true).write(true).open(dir.0.join("f")).unwrap();
    let seen = v
        .under_host_locks(ino, &*f, || Ok(ofd_lock(&probe, RangeLock::Read, 0, 1).unwrap()))
        .unwrap();
    assert!(!seen, "a host lock during the change conflicts");
    assert!(
        ofd_lock(&probe, RangeLock::Write, 0, 0).unwrap(),
        "and is free after it"
    );
}

#[test]
fn a_sqlite_database_the_sandbox_writes_keeps_its_claim_while_the_write_fd_lives() {
    use crate::sys::{ofd_lock, range_locked_elsewhere, RangeLock};
    let dir = Tmp::new("claim");
    let mut head = b"SQLite format 3\0".to_vec();
    head.resize(4096, 0);
    std::fs::write(dir.0.join("db"), &head).unwrap();
    let v = view(&dir);
    let ino = INodeNo(lookup(&v, "db"));
    let f = v.node_file(ino, true).unwrap();
    v.under_host_locks(ino, &*f, || f.write_all_at(b"x", 100).map_err(|_| Errno::EIO))
        .unwrap();
    let host = File::options().read(true).write(true).open(dir.0.join("db")).unwrap();
    // A host writer cannot reserve, a hot-journal check sees the reserved
    // byte locked, a host reader still reads, and the rest is free.
    assert!(!ofd_lock(&host, RangeLock::Write, 0x4000_0001, 1).unwrap());
    assert!(range_locked_elsewhere(&host, 0x4000_0001, 1));
    assert!(ofd_lock(&host, RangeLock::Read, 0x4000_0002, 510).unwrap());
    assert!(ofd_lock(&host, RangeLock::Unlock, 0, 0).unwrap());
    assert!(ofd_lock(&host, RangeLock::Write, 0, 0x4000_0001).unwrap());
    assert!(ofd_lock(&host, RangeLock::Unlock, 0, 0).unwrap());
    // Gone with the view's write fd.
    v.t.lock().unwrap().drop_write_fd(ino.0);
    drop(f);
    assert!(ofd_lock(&host, RangeLock::Write, 0, 0).unwrap());
}

#[test]
fn a_rollback_journal_write_claims_its_database_before_the_database_is_written() {
    use crate::sys::{ofd_lock, range_locked_elsewhere, RangeLock};
    let dir = Tmp::new("jclaim");
    let mut head = b"SQLite format 3\0".to_vec();
    head.resize(4096, 0);
    std::fs::write(dir.0.join("db"), &head).unwrap();
    std::fs::write(dir.0.join("db-journal"), "").unwrap();
    let v = view(&dir);
    let db = INodeNo(lookup(&v, "db"));
    let j = INodeNo(lookup(&v, "db-journal"));
    let host = File::options().read(true).write(true).open(dir.0.join("db")).unwrap();
    // A host transaction holds the reserved byte: the journal write waits,
    // then is refused, as for a lock of the journal itself.
    assert!(ofd_lock(&host, RangeLock::Write, 0x4000_0001, 1).unwrap());
    let jf = v.node_file(j, true).unwrap();
    assert_eq!(v.under_host_locks(j, &*jf, || Ok(())), Err(Errno::EBUSY));
    assert!(ofd_lock(&host, RangeLock::Unlock, 0, 0).unwrap());
    // Free: the journal's first write claims the database (no database
    // write yet), so a host hot-journal check sees the reserved byte held,
    // while a host reader still reads.
    assert_eq!(v.under_host_locks(j, &*jf, || Ok(1)), Ok(1));
    assert!(range_locked_elsewhere(&host, 0x4000_0001, 1));
    assert!(ofd_lock(&host, RangeLock::Read, 0x4000_0002, 510).unwrap());
    assert!(ofd_lock(&host, RangeLock::Unlock, 0, 0).unwrap());
    // The sandbox's database write goes through the same fd: not blocked
    // by its own claim.
    let f = v.node_file(db, true).unwrap();
    assert_eq!(v.under_host_locks(db, &*f, || Ok(2)), Ok(2));
    assert!(
        range_locked_elsewhere(&host, 0x4000_0001, 1),
        "claimed after the write too"
    );
    v.t.lock().unwrap().drop_write_fd(db.0);
    drop(f);
    assert!(
        ofd_lock(&host, RangeLock::Write, 0, 0).unwrap(),
        "gone with the write fd"
    );
}

#[test]
fn text_written_at_the_guests_end_of_a_file_the_host_grew_is_an_append() {
    let dir = Tmp::new("append");
    dir.write("log", "a\n");
    let v = view(&dir);
    let ino = INodeNo(lookup(&v, "log"));
    {
        use std::io::Write;
        let mut h = File::options().append(true).open(dir.0.join("log")).unwrap();
        h.write_all(b"host\n").unwrap();
    }
    let st = rustix::fs::stat(dir.0.join("log")).unwrap();
    assert!(v.appends(ino, &st, 2, b"guest\n"));
    assert!(!v.appends(ino, &st, 1, b"guest\n"), "not at the guest's end");
    assert!(!v.appends(ino, &st, 2, b"\0binary"), "binary data keeps its offset");
    // The guest's own write moves its end; a short read pulls it back.
    v.guest_end(ino, 8, true);
    assert!(!v.appends(ino, &st, 2, b"guest\n"));
    assert!(
        !v.appends(ino, &st, 7, b"guest\n"),
        "the guest takes the file for 8 bytes"
    );
    v.guest_end(ino, 7, false);
    assert!(
        !v.appends(ino, &st, 7, b"guest\n"),
        "at the host's end already: written where asked"
    );
}

#[test]
fn text_at_the_end_both_sides_see_is_written_at_the_end_at_the_moment_of_the_write() {
    let dir = Tmp::new("atend");
    dir.write("log", "a\n");
    let v = view(&dir);
    let ino = INodeNo(lookup(&v, "log"));
    let st = rustix::fs::stat(dir.0.join("log")).unwrap();
    assert!(v.at_end(ino, &st, 2, b"guest\n"));
    assert!(!v.at_end(ino, &st, 1, b"guest\n"), "not at the end");
    assert!(!v.at_end(ino, &st, 2, b"\0binary"), "binary data keeps its offset");
    assert!(!v.at_end(ino, &st, 2, b""), "nothing to write");
    // A host append racing the write: it lands before the guest's line,
    // never under it.
    let f = v.node_file(ino, true).unwrap();
    {
        use std::io::Write;
        let mut h = File::options().append(true).open(dir.0.join("log")).unwrap();
        h.write_all(b"host\n").unwrap();
    }
    crate::sys::write_at_end(&*f, b"guest\n").unwrap();
    assert_eq!(std::fs::read_to_string(dir.0.join("log")).unwrap(), "a\nhost\nguest\n");
}

#[test]
fn a_write_at_the_guests_end_of_a_file_only_the_guest_changed_stays_where_asked() {
    let dir = Tmp::new("noappend");
    dir.write("f", "abcdef");
    let v = view(&dir);
    let ino = INodeNo(lookup(&v, "f"));
    let st = rustix::fs::stat(dir.0.join("f")).unwrap();
    // The guest's end lags (a short read raced its own write): a write
    // there overwrites the middle, as asked.
    v.guest_end(ino, 3, false);
    assert!(!v.appends(ino, &st, 3, b"xyz"));
}

/// Two guest writes of one file on the two server threads (the kernel
/// writes mapped pages back while the guest writes through its
/// descriptor): each write's stats and record are one step
/// (`View::in_order`), so the second never takes the first for a host
/// edit. Unordered, the second's stat before the first's write and the
/// first's record after it refused the guest's own overwrite (EBUSY), and
/// a refused write-back lost mapped bytes the program had stored.
#[test]
fn concurrent_guest_writes_never_look_like_a_host_edit() {
    let dir = Tmp::new("own-writes");
    dir.write("f", "0123456789");
    let v = Arc::new(view(&dir));
    let id = lookup(&v, "f");
    let path = dir.0.join("f");
    let file = Arc::new(std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap());
    v.saw(id, &rustix::fs::fstat(&*file).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let first = {
        let (v, file) = (v.clone(), file.clone());
        std::thread::spawn(move || {
            let _order = v.in_order(id);
            let pre = rustix::fs::fstat(&*file).unwrap();
            tx.send(()).unwrap();
            // The other request arrives while this one is between its stats.
            std::thread::sleep(Duration::from_millis(50));
            file.write_all_at(b"a longer file than before", 0).unwrap();
            let post = rustix::fs::fstat(&*file).unwrap();
            v.changed(id, &pre, &post);
        })
    };
    rx.recv().unwrap();
    let second = {
        let _order = v.in_order(id);
        let pre = rustix::fs::fstat(&*file).unwrap();
        let r = v.fresh_for_write(INodeNo(id), &pre, true);
        file.write_all_at(b"A", 0).unwrap();
        v.changed(id, &pre, &rustix::fs::fstat(&*file).unwrap());
        r
    };
    first.join().unwrap();
    assert!(second.is_ok(), "the guest's own write was refused");
    let now = rustix::fs::fstat(&*file).unwrap();
    assert!(
        v.fresh_for_write(INodeNo(id), &now, true).is_ok(),
        "and so would the next one be"
    );
}

#[test]
fn a_file_renamed_over_a_file_moves_only_those_two_names() {
    let dir = Tmp::new("renfile");
    std::fs::create_dir_all(dir.0.join("d/sub")).unwrap();
    for f in ["d/a.tmp", "d/a", "d/other", "d/sub/x"] {
        dir.write(f, f);
    }
    std::fs::hard_link(dir.0.join("d/a.tmp"), dir.0.join("d/link")).unwrap();
    let v = view(&dir);
    let d = lookup(&v, "d");
    lookup(&v, "d/sub");
    let tmp = lookup(&v, "d/a.tmp");
    assert_eq!(lookup(&v, "d/link"), tmp, "hard links are one node");
    let old = lookup(&v, "d/a");
    let other = lookup(&v, "d/other");
    let x = lookup(&v, "d/sub/x");
    let rename = |from: &str, to: &str| {
        v.rename_entry(
            INodeNo(d),
            std::ffi::OsStr::new(from),
            INodeNo(d),
            std::ffi::OsStr::new(to),
            fuser::RenameFlags::empty(),
        )
        .unwrap()
    };
    // The `.pyc` pattern: a new file renamed over the old one.
    rename("a.tmp", "a");
    let known = |rel: &str| v.known(Side::Host, Path::new(rel));
    assert_eq!(known("d/a"), Some(tmp));
    assert_eq!(known("d/a.tmp"), None);
    assert_eq!(known("d/link"), Some(tmp), "the other name of the file stays");
    {
        let t = v.t.lock().unwrap();
        assert!(t.nodes[&old].gone, "the file renamed over lost its name");
        let n = &t.nodes[&tmp];
        let mut names: Vec<&Path> = std::iter::once(&n.rel).chain(&n.aliases).map(|p| p.as_path()).collect();
        names.sort();
        assert_eq!(names, [Path::new("d/a"), Path::new("d/link")]);
        assert!(!t.nodes[&other].gone && !t.nodes[&x].gone);
    }
    assert_eq!(known("d/other"), Some(other));
    assert_eq!(known("d/sub/x"), Some(x));
    // A rename of the file's other name moves that name (an alias) only.
    rename("link", "other");
    assert_eq!(known("d/other"), Some(tmp));
    assert_eq!(known("d/link"), None);
    assert_eq!(known("d/a"), Some(tmp));
    assert!(v.t.lock().unwrap().nodes[&other].gone);
    let mut names: Vec<PathBuf> = {
        let t = v.t.lock().unwrap();
        let n = &t.nodes[&tmp];
        std::iter::once(&n.rel).chain(&n.aliases).cloned().collect()
    };
    names.sort();
    assert_eq!(names, [PathBuf::from("d/a"), PathBuf::from("d/other")]);
    // A directory still moves everything below it.
    v.rename_entry(
        INodeNo(d),
        std::ffi::OsStr::new("sub"),
        INodeNo(d),
        std::ffi::OsStr::new("moved"),
        fuser::RenameFlags::empty(),
    )
    .unwrap();
    assert_eq!(known("d/moved/x"), Some(x));
    assert_eq!(known("d/sub/x"), None);
}

#[test]
fn a_host_chmod_between_the_views_chmod_and_its_stat_wins() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Tmp::new("guest-race");
    dir.write("a", "x");
    let v = view(&dir);
    let id = lookup(&v, "a");
    // The view's chmod gave the host file 0700 (all that was asked); a
    // host chmod to 0600 landed before the view's stat of the result.
    std::fs::set_permissions(dir.0.join("a"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let st = v.stat(Side::Host, Path::new("a")).unwrap();
    v.keep_guest(&st, Some(0o700), Some(0o700), None, None);
    assert_eq!(
        v.shown(id, Side::Host, &st).perm,
        0o600,
        "the host's mode, as on the host"
    );
    assert!(v.guest.lock().unwrap().is_empty());
    // Without the race, a mode the host file did not get is kept.
    v.keep_guest(&st, Some(0o755), Some(0o600), None, None);
    assert_eq!(v.shown(id, Side::Host, &st).perm, 0o755);
}
