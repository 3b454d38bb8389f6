//! A file's names after host renames and removals: operations by path go
//! through a name that still reaches the file.

use super::super::*;

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("lazaret-view-hostnames-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn lookup(v: &View, rel: &str) -> u64 {
    v.remember(Side::Host, Path::new(rel)).unwrap().ino.0
}

#[test]
fn a_name_looked_up_after_a_host_rename_is_the_one_operations_use() {
    let dir = tmp("rename");
    std::os::unix::fs::symlink("target-t", dir.join("l1")).unwrap();
    std::fs::write(dir.join("f1"), "x").unwrap();
    let v = View::new(&dir, None, Sentry::new(false, Vec::new())).unwrap();
    let l = lookup(&v, "l1");
    let f = lookup(&v, "f1");
    std::fs::rename(dir.join("l1"), dir.join("l2")).unwrap();
    std::fs::rename(dir.join("f1"), dir.join("f2")).unwrap();
    // The kernel looks the new names up: the same nodes, now by them.
    assert_eq!(lookup(&v, "l2"), l);
    assert_eq!(lookup(&v, "f2"), f);
    assert_eq!(v.node(INodeNo(l)).unwrap().1, Path::new("l2"));
    assert_eq!(v.node(INodeNo(f)).unwrap().1, Path::new("f2"));
    assert!(v.node_stat(INodeNo(f)).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_host_removed_name_of_a_linked_file_leaves_the_other_name_in_use() {
    let dir = tmp("unlink");
    std::fs::write(dir.join("a"), "x").unwrap();
    let v = View::new(&dir, None, Sentry::new(false, Vec::new())).unwrap();
    let id = lookup(&v, "a");
    std::fs::hard_link(dir.join("a"), dir.join("b")).unwrap();
    assert_eq!(lookup(&v, "b"), id);
    // The kernel looks `a` up again (a listing), then the host removes it.
    assert_eq!(lookup(&v, "a"), id);
    std::fs::remove_file(dir.join("a")).unwrap();
    // What the watcher does on IN_DELETE of `a` (serve::names_gone).
    v.t.lock().unwrap().detach(id, Side::Host, Path::new("a"));
    assert_eq!(v.node(INodeNo(id)).unwrap().1, Path::new("b"));
    assert!(v.node_stat(INodeNo(id)).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_symlink_reads_through_its_handle_after_a_host_move_no_lookup_saw() {
    let dir = tmp("readlink");
    std::fs::create_dir(dir.join("d1")).unwrap();
    std::os::unix::fs::symlink("../target-t", dir.join("d1/l")).unwrap();
    let v = View::new(&dir, None, Sentry::new(false, Vec::new())).unwrap();
    lookup(&v, "d1");
    let l = lookup(&v, "d1/l");
    std::fs::rename(dir.join("d1"), dir.join("d2")).unwrap();
    // What the watcher does on the IN_MOVED_FROM of `d1` (serve::names_gone):
    // the names below it are taken off; the kernel's entry of the link
    // may still lead to the node.
    v.t.lock().unwrap().detach(l, Side::Host, Path::new("d1/l"));
    assert!(matches!(v.node(INodeNo(l)), Err(Errno::ENOENT)));
    assert_eq!(v.readlink_entry(INodeNo(l)).unwrap(), b"../target-t");
    let _ = std::fs::remove_dir_all(&dir);
}
