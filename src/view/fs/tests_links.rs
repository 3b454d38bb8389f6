//! The view's own unlink, link and rename are not host edits
//! (`fresh_for_write`), and a file keeps its node id for the view's life
//! whatever the handle count (`Tables::ids`): driven through the methods
//! the FUSE handlers call, on a temporary host directory.

use super::table::{after_host_event, after_own, after_own_meta, may_be_same, proven_same, version, OwnNames};
use super::tests::{check_counts, view, Tmp};
use super::*;
use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;

fn lookup(v: &View, rel: &str) -> u64 {
    v.look_up(Side::Host, Path::new(rel)).unwrap().1.ino.0
}

/// Node `id`'s file as an overwrite through its open fd would see it.
fn may_overwrite(v: &View, id: u64) -> Result<(), Errno> {
    let f = v.node_file(INodeNo(id), true)?;
    let st = rustix::fs::fstat(&*f).unwrap();
    v.fresh_for_write(INodeNo(id), &st, true)
}

/// The kernel's coarse clock moves on, so that a ctime changes.
fn tick() {
    std::thread::sleep(Duration::from_millis(15));
}

fn stat_with(size: i64, mtime: i64, ctime: i64) -> rustix::fs::Stat {
    // Any real stat, its version fields set.
    let mut st = rustix::fs::stat("/").unwrap();
    st.st_mtime_nsec = 0;
    st.st_ctime_nsec = 0;
    st.st_size = size;
    st.st_mtime = mtime as _;
    st.st_ctime = ctime as _;
    st
}

#[test]
fn own_changes_keep_a_current_guest_current_and_a_stale_one_stale() {
    let pre = stat_with(10, 100, 100);
    let link = stat_with(10, 100, 101);
    let host_write = stat_with(12, 101, 101);
    let current = version(&pre);
    let stale = version(&stat_with(9, 99, 99));
    // A name or link change: ctime only.
    assert_eq!(after_own_meta(current, &pre, &link), version(&link));
    assert_eq!(after_own_meta(stale, &pre, &link), stale);
    // A host write between the two stats moved size and mtime.
    assert_eq!(after_own_meta(current, &pre, &host_write), current);
    // A content change of the guest's own.
    assert_eq!(after_own(current, &pre, &host_write), version(&host_write));
    assert_eq!(after_own(stale, &pre, &host_write), stale);
    // Left empty by the guest: all of it is known.
    let empty = stat_with(0, 102, 102);
    assert_eq!(after_own(stale, &pre, &empty), version(&empty));
}

#[test]
fn proofs_join_only_what_they_show_the_same() {
    let (a, b): (&[u8], &[u8]) = (b"\x01\0\0\0ino1gen1", b"\x01\0\0\0ino1gen2");
    assert!(proven_same(Some(a), Some(a)));
    assert!(!proven_same(Some(a), Some(b)));
    assert!(!proven_same(None, Some(a)) && !proven_same(Some(a), None) && !proven_same(None, None));
    assert!(may_be_same(Some(a), Some(a)) && may_be_same(None, Some(a)) && may_be_same(Some(a), None));
    assert!(!may_be_same(Some(a), Some(b)));
}

#[test]
fn an_unlinked_open_file_is_overwritten_as_on_a_disk() {
    let dir = Tmp::new("unlink");
    dir.write("t", "scratch data");
    let v = view(&dir);
    let id = lookup(&v, "t");
    v.saw(id, &dir.stat("t"));
    tick();
    v.remove_entry(INodeNo(1), OsStr::new("t"), false).unwrap();
    assert!(!dir.0.join("t").exists());
    assert!(
        may_overwrite(&v, id).is_ok(),
        "the sandbox's own unlink is not a host edit"
    );
}

#[test]
fn a_host_edit_before_an_unlink_is_still_refused() {
    let dir = Tmp::new("unlink-host");
    dir.write("t", "scratch data");
    std::fs::hard_link(dir.0.join("t"), dir.0.join("host-name")).unwrap();
    let v = view(&dir);
    let id = lookup(&v, "t");
    v.saw(id, &dir.stat("t"));
    tick();
    dir.write("host-name", "the host's new data");
    v.remove_entry(INodeNo(1), OsStr::new("t"), false).unwrap();
    assert_eq!(may_overwrite(&v, id), Err(Errno::EBUSY));
}

#[test]
fn a_linked_file_is_overwritten_through_its_open_fd() {
    let dir = Tmp::new("link");
    dir.write("a", "linked data");
    let v = view(&dir);
    let id = lookup(&v, "a");

    v.saw(id, &dir.stat("a"));
    tick();
    let (side, nrel, _) = v.link_entry(INodeNo(id), INodeNo(1), OsStr::new("b")).unwrap();
    let b = v.remember(side, &nrel).unwrap().ino.0;
    assert_eq!(b, id, "one file, one node");
    assert_eq!(dir.stat("a").st_nlink, 2);
    assert!(
        may_overwrite(&v, id).is_ok(),
        "the sandbox's own link is not a host edit"
    );
    // Renamed over at one name: the other name's file lost a link.
    dir.write("c", "new file");
    lookup(&v, "c");
    tick();
    v.rename_entry(
        INodeNo(1),
        OsStr::new("c"),
        INodeNo(1),
        OsStr::new("a"),
        fuser::RenameFlags::empty(),
    )
    .unwrap();
    assert_eq!(dir.stat("b").st_nlink, 1);
    assert_eq!(v.known(Side::Host, Path::new("b")), Some(id));
    assert!(
        may_overwrite(&v, id).is_ok(),
        "the sandbox's rename over a name is not a host edit"
    );
    // A host edit after all that is still caught.
    tick();
    dir.write("b", "the host's new data");
    assert_eq!(may_overwrite(&v, id), Err(Errno::EBUSY));
}

#[test]
fn hard_links_and_ids_hold_past_the_handle_bound() {
    let dir = Tmp::new("bound");
    for i in 0..8 {
        dir.write(&format!("f{i}"), "x");
    }
    dir.write("x1", "linked");
    let mut v = view(&dir);
    v.handles_max = 4;
    let ids: Vec<u64> = (0..8).map(|i| lookup(&v, &format!("f{i}"))).collect();
    assert_eq!(v.t.lock().unwrap().handles_held, 4, "the bound is reached");
    // A node past the bound, with no handle, joins a new link of its file.
    let bare = {
        let t = v.t.lock().unwrap();
        ids.iter()
            .position(|id| t.nodes[id].file.is_none())
            .expect("a node past the bound")
    };
    std::fs::hard_link(dir.0.join(format!("f{bare}")), dir.0.join("g")).unwrap();
    assert_eq!(lookup(&v, "g"), ids[bare], "a new link joins the node without a handle");
    assert_eq!(v.t.lock().unwrap().handles_held, 4, "the bound holds");
    let x = lookup(&v, "x1");
    assert_eq!(v.t.lock().unwrap().handles_held, 4, "the bound holds");
    assert!(
        v.t.lock().unwrap().nodes[&x].file.is_some(),
        "the file looked up last has a handle: the least recently used gave its up"
    );
    std::fs::hard_link(dir.0.join("x1"), dir.0.join("x2")).unwrap();
    assert_eq!(lookup(&v, "x2"), x, "a new link joins the node");
    // Forgotten by the kernel and looked up again: the same id.
    for (i, id) in ids.iter().enumerate() {
        let n = v.t.lock().unwrap().nodes[id].lookups;
        v.forget_node(INodeNo(*id), n);
        assert!(!v.t.lock().unwrap().nodes.contains_key(id));
        assert_eq!(lookup(&v, &format!("f{i}")), *id, "f{i} keeps its inode number");
    }
    let n = v.t.lock().unwrap().nodes[&x].lookups;
    v.forget_node(INodeNo(x), n);
    assert_eq!(lookup(&v, "x2"), x);
    assert_eq!(lookup(&v, "x1"), x);
}

#[test]
fn a_file_in_use_keeps_its_handle_past_the_bound() {
    let dir = Tmp::new("lru");
    dir.write("hot", "in use");
    for i in 0..40 {
        dir.write(&format!("f{i}"), "x");
    }
    let mut v = view(&dir);
    v.handles_max = 4;
    let hot = lookup(&v, "hot");
    for i in 0..40 {
        lookup(&v, &format!("f{i}"));
        // The guest uses `hot` between lookups of other files.
        v.node_any(INodeNo(hot)).unwrap();
        let t = v.t.lock().unwrap();
        assert!(t.nodes[&hot].file.is_some(), "hot lost its handle at f{i}");
        assert!(t.handles_held <= 4, "{} handles", t.handles_held);
        assert!(t.handle_ring.len() <= 2 * t.handles_held + 64 + 1);
    }
    // Renamed on the host where the view does not hear of it: the handle
    // still reaches the file.
    std::fs::rename(dir.0.join("hot"), dir.0.join("moved")).unwrap();
    let f = v
        .node_file_with(INodeNo(hot), false, false)
        .expect("read through the handle");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap(),
        "in use"
    );
}

#[test]
fn a_file_about_to_lose_its_name_keeps_its_handle_while_others_are_looked_up() {
    let dir = Tmp::new("pin-lru");
    dir.write("open", "open scratch");
    dir.write("held", "held before");
    for i in 0..40 {
        dir.write(&format!("f{i}"), "x");
    }
    let mut v = view(&dir);
    v.handles_max = 4;
    let held = lookup(&v, "held");
    let open = lookup(&v, "open");
    for i in 0..3 {
        lookup(&v, &format!("f{i}"));
    }
    // Both are pinned before their unlink (one held its handle already,
    // one gets it now); lookups of other files in between, past the bound,
    // must not take either handle.
    v.pin(Side::Host, Path::new("held"));
    v.pin(Side::Host, Path::new("open"));
    for i in 3..40 {
        lookup(&v, &format!("f{i}"));
    }
    for (id, name, data) in [(held, "held", "held before"), (open, "open", "open scratch")] {
        assert!(v.t.lock().unwrap().nodes[&id].file.is_some(), "{name} lost its handle");
        std::fs::remove_file(dir.0.join(name)).unwrap();
        v.removed(Side::Host, Path::new(name));
        let f = v
            .node_file_with(INodeNo(id), false, false)
            .expect("its open fd reads on");
        assert_eq!(
            std::fs::read_to_string(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap(),
            data
        );
    }
    check_counts(&v);
}

#[test]
fn a_node_without_a_handle_is_found_again_by_its_other_name() {
    let dir = Tmp::new("refind");
    dir.write("a", "linked data");
    std::fs::hard_link(dir.0.join("a"), dir.0.join("b")).unwrap();
    dir.write("other", "another file");
    let mut v = view(&dir);
    v.handles_max = 0;
    let id = lookup(&v, "a");
    assert_eq!(lookup(&v, "b"), id, "one node for both names");
    assert!(v.t.lock().unwrap().nodes[&id].file.is_none());
    let by = |v: &View| v.t.lock().unwrap().nodes[&id].rel.clone();
    // The host removes the name the node is served by, unheard of: its
    // other name serves it (as the guest's own name does on a bind).
    let gone = by(&v);
    std::fs::remove_file(dir.0.join(&gone)).unwrap();
    let (_, rel, st) = v.node_stat(INodeNo(id)).expect("found by its other name");
    assert_ne!(rel, gone);
    assert_eq!(st.st_nlink, 1);
    let f = v
        .node_file_with(INodeNo(id), false, false)
        .expect("opened by its other name");
    assert_eq!(
        std::fs::read_to_string(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap(),
        "linked data"
    );
    // Another file put where the node's path was (replaced on the host):
    // never linked or read in its place.
    let now = by(&v);
    std::fs::hard_link(dir.0.join("other"), dir.0.join("c")).unwrap();
    std::fs::rename(dir.0.join("c"), dir.0.join(&gone)).unwrap();
    std::fs::remove_file(dir.0.join(&now)).unwrap();
    std::fs::rename(dir.0.join("other"), dir.0.join(&now)).unwrap();
    assert_eq!(v.node_stat(INodeNo(id)).err(), Some(Errno::ESTALE));
    assert_eq!(
        v.link_entry(INodeNo(id), INodeNo(1), OsStr::new("d")).err(),
        Some(Errno::ESTALE)
    );
    assert!(!dir.0.join("d").exists(), "no link made to another file");
}

#[test]
fn a_reused_inode_number_is_another_node() {
    let dir = Tmp::new("reused");
    dir.write("a", "first file");
    let v = view(&dir);
    let id = lookup(&v, "a");
    let ino = dir.0.join("a").metadata().unwrap().ino();
    let n = v.t.lock().unwrap().nodes[&id].lookups;
    v.forget_node(INodeNo(id), n);
    // What a file that reused the number would prove: another generation.
    {
        let mut t = v.t.lock().unwrap();
        let e = t.ids.values_mut().find(|(i, _)| *i == id).expect("a remembered id");
        let last = e.1.len() - 1;
        e.1[last] ^= 0xff;
    }
    let again = lookup(&v, "a");
    assert_ne!(again, id, "another proof, another id");
    // A real reuse on this filesystem, where one comes quickly.
    std::fs::remove_file(dir.0.join("a")).unwrap();
    let mut reused = None;
    for i in 0..200 {
        let name = format!("n{i}");
        dir.write(&name, "second file");
        if dir.0.join(&name).metadata().unwrap().ino() == ino {
            reused = Some(name);
            break;
        }
    }
    if let Some(name) = reused {
        let other = lookup(&v, &name);
        assert!(other != id && other != again, "a reused inode number is another node");
    }
}

#[test]
fn the_own_unlink_of_a_last_name_forgets_the_identity() {
    let dir = Tmp::new("forget-id");
    dir.write("a", "x");
    let v = view(&dir);
    let st = dir.stat("a");
    let id = lookup(&v, "a");
    assert!(v
        .t
        .lock()
        .unwrap()
        .ids
        .contains_key(&(Side::Host, st.st_dev, st.st_ino)));
    v.remove_entry(INodeNo(1), OsStr::new("a"), false).unwrap();
    assert!(!v
        .t
        .lock()
        .unwrap()
        .ids
        .contains_key(&(Side::Host, st.st_dev, st.st_ino)));
    assert!(v.t.lock().unwrap().nodes[&id].gone);
}

#[test]
fn a_file_renamed_over_at_its_only_name_is_overwritten_through_its_open_fd() {
    let dir = Tmp::new("replaced");
    dir.write("r", "replaced data");
    dir.write("s", "new file");
    let v = view(&dir);
    let id = lookup(&v, "r");
    v.saw(id, &dir.stat("r"));
    lookup(&v, "s");
    tick();
    v.rename_entry(
        INodeNo(1),
        OsStr::new("s"),
        INodeNo(1),
        OsStr::new("r"),
        fuser::RenameFlags::empty(),
    )
    .unwrap();
    assert!(v.t.lock().unwrap().nodes[&id].gone);
    assert!(
        may_overwrite(&v, id).is_ok(),
        "the sandbox's rename over the file is not a host edit"
    );
}

#[test]
fn a_file_below_a_directory_the_view_is_moving_keeps_its_name() {
    let dir = Tmp::new("own-dir-move");
    std::fs::create_dir(dir.0.join("d")).unwrap();
    let v = view(&dir);
    // Watched once the kernel looks it up; the file is made after, so the
    // watch reports its IN_CREATE.
    lookup(&v, "d");
    dir.write("d/f", "data");
    let id = lookup(&v, "d/f");
    let w = v.watch.clone().expect("inotify");
    {
        // The view's rename of `d` is under way (`rename_entry`): the
        // syscall done, the bookkeeping not yet. The watcher handles the
        // file's IN_CREATE now, its watch still at `d`.
        let _own = OwnNames::new(&v.t, Side::Host, &[Path::new("d"), Path::new("e")]);
        std::fs::rename(dir.0.join("d"), dir.0.join("e")).unwrap();
        let events = w.read().unwrap();
        assert!(events.iter().any(|e| e.name == "f"), "{events:?}");
        super::serve::names_gone(&events, &w, &v.t, &v.host);
    }
    v.renamed(Side::Host, Path::new("d"), Path::new("e"));
    assert_eq!(v.node(INodeNo(id)).unwrap().1, Path::new("e/f"));
    let (side, nrel, _) = v.link_entry(INodeNo(id), INodeNo(1), OsStr::new("g")).unwrap();
    assert_eq!(v.remember(side, &nrel).unwrap().ino.0, id);
    assert_eq!(dir.stat("e/f").st_nlink, 2);
}

#[test]
fn a_host_rename_or_chmod_keeps_what_the_guest_read_current_and_a_host_write_does_not() {
    let read = stat_with(10, 100, 100);
    let renamed = stat_with(10, 100, 105);
    // A rename, link or chmod moves the ctime only.
    assert_eq!(
        after_host_event(version(&read), false, false, &renamed),
        (version(&renamed), false)
    );
    // A host write: stale, and it stays so after a later rename, even one
    // that finds the mtime restored (a write, then `touch -r`).
    let written = stat_with(10, 101, 101);
    let (seen, wrote) = after_host_event(version(&read), false, true, &written);
    assert_eq!((seen, wrote), (version(&read), true));
    let restored = stat_with(10, 100, 106);
    assert_eq!(after_host_event(seen, wrote, false, &restored), (version(&read), true));
    // A host write the guest has read since (its event handled late, after
    // a rename too) is no reason for staleness.
    let written_renamed = stat_with(10, 101, 107);
    assert_eq!(
        after_host_event(version(&written), false, true, &written_renamed),
        (version(&written_renamed), false)
    );
    // A size or mtime that moved (a write whose event is still queued).
    assert_eq!(
        after_host_event(version(&read), false, false, &written),
        (version(&read), false)
    );
}

#[test]
fn a_host_event_stat_taken_before_the_guests_own_change_never_takes_what_it_knows_back() {
    // The guest created the file (ctime 100), the watcher took its stat for
    // that event, the guest unlinked it (ctime 101, recorded), and only
    // then was the event applied.
    let created = stat_with(0, 100, 100);
    let unlinked = stat_with(0, 100, 101);
    assert_eq!(
        after_host_event(version(&unlinked), false, false, &created),
        (version(&unlinked), false),
        "an older stat took seen back"
    );
    // ... whatever the event was, and a pending host write stays noted.
    assert_eq!(
        after_host_event(version(&unlinked), true, true, &created),
        (version(&unlinked), true)
    );
    // The same change time is no older: the event applies.
    let chmod = stat_with(0, 100, 101);
    assert_eq!(
        after_host_event(version(&created), false, false, &chmod),
        (version(&chmod), false)
    );
    // A guest write whose first stat came before the unlink was recorded:
    // what the guest knows covers that stat, so the write keeps it current.
    let written = stat_with(9, 102, 102);
    assert_eq!(after_own(version(&unlinked), &created, &written), version(&written));
    assert_eq!(
        after_own_meta(version(&unlinked), &created, &unlinked),
        version(&unlinked)
    );
    // A host write restored with `touch -r` moved the ctime past what the
    // guest knows: still stale.
    let touched = stat_with(0, 100, 103);
    assert_eq!(after_own(version(&unlinked), &touched, &written), version(&unlinked));
}

#[test]
fn a_file_the_host_renamed_after_the_guest_read_it_is_overwritten_as_on_a_disk() {
    let dir = Tmp::new("host-rename");
    dir.write("a", "handed over");
    let v = view(&dir);
    let id = lookup(&v, "a");
    v.saw(id, &dir.stat("a"));
    tick();
    std::fs::rename(dir.0.join("a"), dir.0.join("b")).unwrap();
    // The guest reads the file again from the kernel's pages (no READ
    // reaches the view), then overwrites it: stale by the ctime alone.
    assert_eq!(may_overwrite(&v, id), Err(Errno::EBUSY));
    let w = v.watch.clone().expect("inotify");
    let events = w.read().unwrap();
    let node_of = |_: &Path| Some(id);
    super::serve::host_events(&events, &w, &v.t, &node_of, None);
    assert!(may_overwrite(&v, id).is_ok(), "a host rename is no host edit");
    // A host write after that is still caught.
    tick();
    std::fs::write(dir.0.join("b"), "the host's new data").unwrap();
    let events = w.read().unwrap();
    super::serve::host_events(&events, &w, &v.t, &node_of, None);
    assert_eq!(may_overwrite(&v, id), Err(Errno::EBUSY));
}

#[test]
fn a_file_losing_its_last_name_gets_a_handle_even_at_the_bound() {
    let dir = Tmp::new("pin-bound");
    let n = PINNED_MAX;
    for i in 0..n {
        dir.write(&format!("f{i}"), "x");
    }
    dir.write("t", "open scratch");
    let mut v = view(&dir);
    v.handles_max = 0;
    // Every handle is taken by a file that still has a name.
    for i in 0..n {
        lookup(&v, &format!("f{i}"));
        v.pin(Side::Host, Path::new(&format!("f{i}")));
    }
    assert_eq!(v.t.lock().unwrap().handles_held, n, "the bound is reached");
    // A file open inside is unlinked: one named file gives its handle up.
    let id = lookup(&v, "t");
    v.pin(Side::Host, Path::new("t"));
    {
        let t = v.t.lock().unwrap();
        assert!(t.nodes[&id].file.is_some(), "the file losing its name holds a handle");
        assert_eq!(t.handles_held, n);
    }
    std::fs::remove_file(dir.0.join("t")).unwrap();
    v.removed(Side::Host, Path::new("t"));
    let mut s = String::new();
    use std::io::Read;
    (&*v.node_file(INodeNo(id), false).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "open scratch", "its open fd still reads it, as on a disk");
    check_counts(&v);
}
