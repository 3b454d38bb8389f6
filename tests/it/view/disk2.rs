//! The workspace view behaves like the disk, round two (issue 47): the
//! sandbox's own unlink, link and rename of an open file are not taken for
//! host edits, hard links stay one file and inode numbers stay put in a
//! Domain that has used up its handles, and every name of a file shows its
//! new link count and ctime at once. Each test asserts what a plain bind
//! gives (POSIX's outcome).

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::fixtures::git_repo;
use crate::harness::{eventually, field, Run};
use crate::require_env;

const OWN_CHANGES: &str = r#"
import os, tempfile
def attempt(name, f):
    try:
        print(name, 'ok' if f() else 'FAIL')
    except OSError as e:
        print(name, 'ERR', e.errno)
def tmpfile():
    # Python's scratch file: made, unlinked, written, rewound, rewritten.
    with tempfile.TemporaryFile(dir='/workspace') as t:
        t.write(b'first version of the scratch data')
        t.flush()
        t.seek(0)
        t.write(b'SECOND')
        t.flush()
        t.seek(0)
        return t.read() == b'SECONDversion of the scratch data'
def mkstemp():
    fd, p = tempfile.mkstemp(dir='/workspace')
    os.write(fd, b'0123456789')
    os.unlink(p)
    os.pwrite(fd, b'AB', 0)
    ok = os.pread(fd, 10, 0) == b'AB23456789'
    os.close(fd)
    return ok
def linked():
    with open('/workspace/a', 'wb') as w:
        w.write(b'linked-0000')
    fd = os.open('/workspace/a', os.O_RDWR)
    os.link('/workspace/a', '/workspace/b')
    os.pwrite(fd, b'LINK', 7)
    os.close(fd)
    return open('/workspace/b', 'rb').read() == b'linked-LINK'
def renamed_over():
    with open('/workspace/c', 'wb') as w:
        w.write(b'victim-0000')
    os.link('/workspace/c', '/workspace/d')
    fd = os.open('/workspace/d', os.O_RDWR)
    with open('/workspace/e', 'wb') as w:
        w.write(b'new file')
    os.rename('/workspace/e', '/workspace/c')
    os.pwrite(fd, b'OVER', 7)
    os.close(fd)
    return open('/workspace/d', 'rb').read() == b'victim-OVER' and os.stat('/workspace/d').st_nlink == 1
def moved():
    with open('/workspace/m', 'wb') as w:
        w.write(b'moved-0000')
    fd = os.open('/workspace/m', os.O_RDWR)
    os.rename('/workspace/m', '/workspace/m2')
    os.pwrite(fd, b'MOVE', 6)
    os.close(fd)
    return open('/workspace/m2', 'rb').read() == b'moved-MOVE'
def replaced():
    # Renamed over at its only name while open: the fd still writes it.
    with open('/workspace/r', 'wb') as w:
        w.write(b'replaced-0000')
    fd = os.open('/workspace/r', os.O_RDWR)
    with open('/workspace/s', 'wb') as w:
        w.write(b'new file')
    os.rename('/workspace/s', '/workspace/r')
    os.pwrite(fd, b'REPL', 9)
    ok = os.pread(fd, 13, 0) == b'replaced-REPL' and open('/workspace/r', 'rb').read() == b'new file'
    os.close(fd)
    return ok
attempt('TEMPFILE', tmpfile)
attempt('MKSTEMP', mkstemp)
attempt('LINKED', linked)
attempt('RENAMED-OVER', renamed_over)
attempt('MOVED', moved)
attempt('REPLACED', replaced)
print('done')
"#;

/// Item 1: a file the sandbox unlinked, hard-linked or renamed (or renamed
/// another file over) while open is overwritten through its open fd, as on
/// a bind, where before the stale-write guard took the sandbox's own name
/// change (a new ctime) for a host edit and refused it (EBUSY). That a host
/// edit is still refused is `disk::overwriting_what_the_host_changed_since_the_sandbox_read_it_is_refused`.
#[test]
fn files_the_sandbox_unlinked_linked_or_renamed_while_open_are_overwritten() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "disk2-own", &[]);
    env.write(&ws.join("own.py"), OWN_CHANGES);
    let r = env.run_sh(&ws, "python3 own.py 2>&1");
    assert!(r.stdout.contains("done"), "{r:?}");
    for k in ["TEMPFILE", "MKSTEMP", "LINKED", "RENAMED-OVER", "MOVED", "REPLACED"] {
        assert_eq!(field(&r, k), Some("ok"), "{k} (ERR 16 is the refusal): {r:?}");
    }
    // The host has what the sandbox wrote.
    assert_eq!(std::fs::read(ws.join("b")).unwrap(), b"linked-LINK");
    assert_eq!(std::fs::read(ws.join("d")).unwrap(), b"victim-OVER");
    assert_eq!(std::fs::read(ws.join("m2")).unwrap(), b"moved-MOVE");
    assert_eq!(
        ws.join("a").metadata().unwrap().ino(),
        ws.join("b").metadata().unwrap().ino()
    );
}

/// What every name of a file shows after link, unlink and a rename over
/// one of its names (pjdfstest rename/23.t): the new link count, a later
/// ctime.
const OTHER_NAMES: &str = r#"
import os, time
os.makedirs('names', exist_ok=True)
os.chdir('names')
with open('dst', 'w') as w: w.write('d')
os.link('dst', 'dl')
s1 = os.lstat('dl')
time.sleep(1.1)
with open('src', 'w') as w: w.write('s')
os.rename('src', 'dst')
s2 = os.lstat('dl')
print('RENAME-NLINK', s1.st_nlink, s2.st_nlink)
print('RENAME-CTIME', 'later' if s2.st_ctime_ns > s1.st_ctime_ns else 'same')
with open('u1', 'w') as w: w.write('u')
os.link('u1', 'u2')
a = os.lstat('u2').st_nlink
os.unlink('u1')
print('UNLINK-NLINK', a, os.lstat('u2').st_nlink)
with open('l1', 'w') as w: w.write('l')
a = os.lstat('l1').st_nlink
os.link('l1', 'l2')
print('LINK-NLINK', a, os.lstat('l1').st_nlink)
os.chdir('..')
"#;

fn assert_other_names(r: &Run, when: &str) {
    assert_eq!(field(r, "RENAME-NLINK"), Some("2 1"), "{when}: {r:?}");
    assert_eq!(field(r, "RENAME-CTIME"), Some("later"), "{when}: {r:?}");
    assert_eq!(field(r, "UNLINK-NLINK"), Some("2 1"), "{when}: {r:?}");
    assert_eq!(field(r, "LINK-NLINK"), Some("1 2"), "{when}: {r:?}");
}

/// Item 6: after a rename over a name of a file with another hard link,
/// the other name shows link count 1 and a later ctime at once (not after
/// the attribute cache's hour), as do unlink and link, as on a bind.
#[test]
fn every_name_of_a_file_shows_its_new_link_count_and_ctime() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "disk2-names", &[]);
    env.write(&ws.join("names.py"), OTHER_NAMES);
    let r = env.run_sh(&ws, "python3 names.py 2>&1; echo done");
    assert!(r.stdout.contains("done"), "{r:?}");
    assert_other_names(&r, "a fresh Domain");
}

const EXHAUST: &str = r#"
import os, subprocess, time
def ident(p):
    st = os.lstat(p)
    return '%d/%d' % (st.st_ino, st.st_nlink)
print('KEEP-BEFORE', os.lstat('keep').st_ino)
with open('early1', 'w') as w: w.write('e')
os.link('early1', 'early2')
n = 0
for root, dirs, files in os.walk('big'):
    for f in files:
        os.lstat(os.path.join(root, f))
        n += 1
print('STATTED', n)
with open('n1', 'w') as w: w.write('n')
os.link('n1', 'n2')
print('LINK', ident('n1'), ident('n2'))
subprocess.run(['cp', '-a', 'pair', 'pair-copy'], check=True)
print('CPA', ident('pair-copy/p'), ident('pair-copy/q'))
open('ready', 'w').close()
t = time.time()
while not os.path.exists('go') and time.time() - t < 120:
    time.sleep(0.1)
print('GO', os.path.exists('go'))
print('KEEP-AFTER', os.lstat('keep').st_ino)
print('LINK-AFTER', ident('n1'), ident('n2'))
print('EARLY-AFTER', ident('early1'), ident('early2'))
exec(open('names.py').read())
print('done')
"#;

/// Item 5: in a Domain that has used up the view's handles (more files
/// looked up than `HANDLES_MAX` + `PINNED_MAX`), new hard links are one
/// file (one inode number, link count 2; `cp -a` keeps them), and a file's
/// inode number stays what it was, also after the kernel forgot its nodes
/// (caches dropped), as on a bind, where inode numbers never change.
#[test]
fn hard_links_and_inode_numbers_hold_after_the_handles_are_used_up() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "disk2-handles", &[]);
    env.write(&ws.join("keep"), "k");
    env.write(&ws.join("x.py"), EXHAUST);
    env.write(&ws.join("names.py"), OTHER_NAMES);
    env.write(&ws.join("pair/p"), "p");
    std::fs::hard_link(ws.join("pair/p"), ws.join("pair/q")).unwrap();
    let big = ws.join("big");
    for d in 0..96 {
        let sub = big.join(format!("d{d}"));
        std::fs::create_dir_all(&sub).unwrap();
        for f in 0..100 {
            std::fs::write(sub.join(format!("f{f}")), "").unwrap();
        }
    }
    let st = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", env.uid, env.gid)])
        .arg(&big)
        .status()
        .unwrap();
    assert!(st.success());
    let host_ws = ws.clone();
    let dropper = std::thread::spawn(move || {
        // The kernel forgets the nodes it no longer uses (FORGET): their
        // ids must come back the same on the next lookup.
        if eventually(Duration::from_secs(300), || host_ws.join("ready").exists()) {
            let dropped = std::fs::write("/proc/sys/vm/drop_caches", "2").is_ok();
            std::fs::write(host_ws.join("go"), "").unwrap();
            return dropped;
        }
        false
    });
    let r = env.run_sh(&ws, "python3 x.py 2>&1");
    let dropped = dropper.join().unwrap();
    eprintln!("caches dropped: {dropped}");
    assert!(r.stdout.contains("done"), "{r:?}");
    let statted: usize = field(&r, "STATTED").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(statted >= 9_600, "past HANDLES_MAX + PINNED_MAX (9,216): {r:?}");
    assert_eq!(field(&r, "GO"), Some("True"), "{r:?}");
    let pair = |k: &str| {
        let v = field(&r, k).unwrap_or_else(|| panic!("{k}: {r:?}"));
        let parts: Vec<&str> = v.split(' ').collect();
        assert_eq!(parts.len(), 2, "{k}: {v}");
        assert_eq!(parts[0], parts[1], "{k}: two names, one file: {v}");
        assert!(parts[0].ends_with("/2"), "{k}: link count 2: {v}");
        v.to_string()
    };
    let link = pair("LINK");
    pair("CPA");
    assert_eq!(pair("LINK-AFTER"), link, "the new link's inode number stays: {r:?}");
    pair("EARLY-AFTER");
    assert_eq!(
        field(&r, "KEEP-BEFORE"),
        field(&r, "KEEP-AFTER"),
        "an inode number changed: {r:?}"
    );
    assert_other_names(&r, "after the handles were used up");
    assert_eq!(
        ws.join("n1").metadata().unwrap().ino(),
        ws.join("n2").metadata().unwrap().ino()
    );
}

const OPEN_THEN_RENAMED: &str = r#"
import os, sys, time
n = int(sys.argv[1])
fds = [os.open("o/f%d" % i, os.O_RDONLY) for i in range(n)]
open("ready", "w").close()
for _ in range(3000):
    if os.path.exists("go"):
        break
    time.sleep(0.1)
print("GO", os.path.exists("go"))
good = bad = 0
errs = set()
for i, fd in enumerate(fds):
    try:
        ok = os.pread(fd, 100, 0) == b"content %d\n" % i
    except OSError as e:
        ok = False
        errs.add(e.strerror)
    good += ok
    bad += not ok
print("READ", good, bad, sorted(errs))
print("done")
"#;

/// The sandbox opens 600 files; a host process then renames a symlink
/// over half of their names and removes the other half; every open file
/// still reads what it held, as on a disk (run at a shell's usual soft
/// limit of 1,024 open files, which bounds the view's handles to 256).
#[test]
fn open_files_read_on_after_the_host_renames_over_or_removes_their_names() {
    use std::os::unix::process::CommandExt;
    let (env, _g) = require_env!(shared);
    const N: usize = 600;
    let files: Vec<(String, String)> = (0..N).map(|i| (format!("o/f{i}"), format!("content {i}\n"))).collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let ws = git_repo(env, "disk2-open-renamed", &refs);
    env.write(&ws.join("x.py"), OPEN_THEN_RENAMED);
    let host_ws = ws.clone();
    let (uid, gid) = (env.uid, env.gid);
    let host = std::thread::spawn(move || {
        if !eventually(Duration::from_secs(300), || host_ws.join("ready").exists()) {
            return false;
        }
        for i in 0..N {
            let name = host_ws.join(format!("o/f{i}"));
            if i % 2 == 0 {
                let tmp = host_ws.join(format!("o/.l{i}"));
                std::os::unix::fs::symlink(format!("f{i}"), &tmp).unwrap();
                let _ = std::os::unix::fs::lchown(&tmp, Some(uid), Some(gid));
                std::fs::rename(&tmp, &name).unwrap();
            } else {
                std::fs::remove_file(&name).unwrap();
            }
        }
        std::fs::write(host_ws.join("go"), "").unwrap();
        true
    });
    let mut c = env.lz_sh(&ws, &format!("python3 x.py {N} 2>&1")).command();
    // A shell's usual soft limit, whatever this test process has.
    // SAFETY: between fork and exec the closure only makes two rlimit
    // system calls (no allocation, no lock).
    unsafe {
        c.pre_exec(|| {
            let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            let soft = rustix::process::Rlimit {
                current: Some(lim.maximum.map_or(1024, |h| h.min(1024))),
                maximum: lim.maximum,
            };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, soft).map_err(std::io::Error::from)
        });
    }
    let r = Run::from(c.output().unwrap());
    assert!(host.join().unwrap(), "the sandbox never opened the files: {r:?}");
    assert!(r.stdout.contains("done"), "{r:?}");
    assert_eq!(field(&r, "GO"), Some("True"), "{r:?}");
    assert_eq!(field(&r, "READ"), Some(format!("{N} 0 []").as_str()), "{r:?}");
}
