//! The node table without FUSE: a [`View`] over a temporary host directory,
//! driven through the same methods the FUSE handlers call.

use super::*;
use std::collections::HashSet;
use std::sync::atomic::AtomicUsize;
use std::sync::Weak;

/// A fresh host directory, removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("lazaret-view-nodes-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Tmp(p)
    }

    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.0.join(rel), text).unwrap();
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn view(dir: &Tmp) -> View {
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
        v.removed(Side::Host, Path::new("a"));
        assert!(v.t.lock().unwrap().nodes[&next].gone);
        let again = lookup(&v, "a");
        assert!(seen.insert(again), "id {again} handed out twice");
        id = again;
    }
}

#[test]
fn a_stale_id_is_estale_and_an_unknown_one_enoent() {
    let dir = Tmp::new("stale");
    dir.write("a", "old");
    let v = view(&dir);
    let id = lookup(&v, "a");
    // The host replaced the file, the kernel still holds the old id.
    replace_on_host(&dir, "a", "keep");
    assert_eq!(errno_of(v.node_stat(INodeNo(id))), Errno::ESTALE);
    assert_eq!(errno_of(v.node_file(INodeNo(id), false)), Errno::ESTALE);
    assert_eq!(errno_of(v.node_file(INodeNo(id), true)), Errno::ESTALE);
    // Once looked up again the old node is gone: still refused.
    let new = lookup(&v, "a");
    assert_ne!(new, id);
    assert_eq!(errno_of(v.node_file(INodeNo(id), false)), Errno::ESTALE);
    assert!(v.node_stat(INodeNo(new)).is_ok());
    // An id the table never handed out (or already forgot).
    assert_eq!(errno_of(v.node(INodeNo(new + 1000))), Errno::ENOENT);
    assert_eq!(errno_of(v.node_file(INodeNo(new + 1000), false)), Errno::ENOENT);
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
fn check_counts(v: &View) {
    let t = v.t.lock().unwrap();
    let cached = t.nodes.values().filter(|n| n.fd.is_some() && !n.pinned).count();
    let pinned = t.nodes.values().filter(|n| n.fd.is_some() && n.pinned).count();
    assert_eq!(t.cached_fds, cached);
    assert_eq!(t.pinned_fds, pinned);
    assert!(t.cached_fds <= FD_CACHE, "{} cached fds", t.cached_fds);
    assert!(t.pinned_fds <= PINNED_MAX, "{} pinned fds", t.pinned_fds);
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
fn pinned_fds_stay_bounded_and_leave_the_cache() {
    let dir = Tmp::new("pin");
    let total = PINNED_MAX + 10;
    for i in 0..total {
        dir.write(&format!("f{i}"), "x");
    }
    let v = view(&dir);
    let mut first: Option<Weak<File>> = None;
    for i in 0..total {
        let rel = format!("f{i}");
        let id = lookup(&v, &rel);
        let f = v.node_file(INodeNo(id), false).unwrap();
        if i == 0 {
            first = Some(Arc::downgrade(&f));
        }
        drop(f);
        v.pin(Side::Host, Path::new(&rel));
        check_counts(&v);
    }
    let t = v.t.lock().unwrap();
    assert_eq!(t.pinned_fds, PINNED_MAX);
    assert_eq!(t.cached_fds, 0);
    drop(t);
    assert!(
        first.unwrap().upgrade().is_none(),
        "the oldest pin was dropped and closed"
    );
}
