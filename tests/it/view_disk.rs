//! The workspace view behaves like the disk it stands for (issue 28): a
//! plain bind of the host directory is the reference. Each test performs
//! what real tools do through the view and asserts what the bind gives
//! (for ownership and modes: the safe host result and what the guest sees).

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::fixtures::git_repo;
use crate::harness::{eventually, Run, GLOBAL};
use crate::require_env;

/// The lines `KEY value` the script printed, as (key, value).
fn field<'a>(r: &'a Run, key: &str) -> Option<&'a str> {
    r.stdout
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
}

const OPEN_FILES: &str = r#"
import os
def check(name, ok):
    print(name, 'ok' if ok else 'FAIL')
# unlinked while open: still read and written, as on a bind
f = os.open('t', os.O_RDWR | os.O_CREAT, 0o644)
os.unlink('t')
os.write(f, b'x')
check('unlink-pread', os.pread(f, 1, 0) == b'x')
st = os.fstat(f)
check('unlink-fstat', st.st_size == 1)
print('unlink-nlink', st.st_nlink)
os.ftruncate(f, 0)
check('unlink-ftruncate', os.fstat(f).st_size == 0)
os.fchmod(f, 0o600)
check('unlink-fchmod', os.fstat(f).st_mode & 0o777 == 0o600)
os.close(f)
# renamed over while open: the old file stays readable
with open('a', 'w') as w: w.write('old')
g = os.open('a', os.O_RDONLY)
with open('b', 'w') as w: w.write('new')
os.rename('b', 'a')
check('rename-over-pread', os.pread(g, 3, 0) == b'old')
with open('a') as r: check('rename-over-new', r.read() == 'new')
# many open-then-unlinked files at once
fds = []
for i in range(700):
    fd = os.open('m%d' % i, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b'%d' % i)
    fds.append(fd)
for i in range(700):
    os.unlink('m%d' % i)
good = 0
for i, fd in enumerate(fds):
    try:
        if os.pread(fd, 10, 0) == b'%d' % i and os.pwrite(fd, b'!', 10) == 1:
            good += 1
    except OSError as e:
        pass
check('unlinked-700', good == 700)
print('unlinked-good', good)
# the host replaces the file by rename (an editor's save) while it is open
d = os.open('doc', os.O_RDONLY)
open('ready', 'w').close()
import time
for _ in range(400):
    if os.path.exists('go'): break
    time.sleep(0.05)
check('host-save-old-fd', os.pread(d, 10, 0) == b'v1')
with open('doc') as r: check('host-save-new-name', r.read() == 'v2')
print('done')
"#;

#[test]
fn open_files_outlive_their_names_as_on_a_bind() {
    let env = require_env!();
    let _g = GLOBAL.read().unwrap();
    let ws = git_repo(env, "disk-open", &[]);
    env.write(&ws.join("doc"), "v1");
    env.write(&ws.join("t.py"), OPEN_FILES);
    let host_ws = ws.clone();
    let saver = std::thread::spawn(move || {
        // The developer's editor saves by rename while the sandbox reads.
        if eventually(Duration::from_secs(60), || host_ws.join("ready").exists()) {
            std::fs::write(host_ws.join("doc.tmp"), "v2").unwrap();
            std::fs::rename(host_ws.join("doc.tmp"), host_ws.join("doc")).unwrap();
            std::fs::write(host_ws.join("go"), "").unwrap();
        }
    });
    let r = env.run_sh(&ws, "python3 t.py 2>&1");
    saver.join().unwrap();
    assert!(r.stdout.contains("done"), "{r:?}");
    for k in [
        "unlink-pread",
        "unlink-fstat",
        "unlink-ftruncate",
        "unlink-fchmod",
        "rename-over-pread",
        "rename-over-new",
        "unlinked-700",
        "host-save-old-fd",
        "host-save-new-name",
    ] {
        assert_eq!(field(&r, k), Some("ok"), "{k}: {r:?}");
    }
    assert!(!ws.join("t").exists() && !ws.join("m0").exists(), "unlinked on the host too");
}

#[test]
fn hard_links_are_one_file_and_copies_keep_them() {
    let env = require_env!();
    let _g = GLOBAL.read().unwrap();
    let ws = git_repo(env, "disk-links", &[(".gitignore", "build/\n")]);
    env.write(&ws.join("x1"), "x");
    std::fs::hard_link(ws.join("x1"), ws.join("x2")).unwrap();
    let r = env.run_sh(
        &ws,
        "set -e; echo h > h1; ln h1 h2; echo LINK $(stat -c %i/%h h1 h2); \
         echo HOST $(stat -c %i/%h x1 x2); \
         mkdir build; echo b > build/a; ln build/a build/b; echo IGN $(stat -c %i/%h build/a build/b); \
         mkdir src; echo p > src/p; ln src/p src/q; \
         cp -a src cpa; echo CPA $(stat -c %i/%h cpa/p cpa/q); \
         mkdir tarx; tar cf - src | tar xf - -C tarx; echo TAR $(stat -c %i/%h tarx/src/p tarx/src/q); \
         cp -a src /tmp/out; echo OUT $(stat -c %i/%h /tmp/out/p /tmp/out/q); \
         mkdir /tmp/in; echo i > /tmp/in/p; ln /tmp/in/p /tmp/in/q; cp -a /tmp/in ./in; \
         echo IN $(stat -c %i/%h in/p in/q); \
         if command -v rsync >/dev/null; then rsync -aH src/ rs/; echo RSYNC $(stat -c %i/%h rs/p rs/q); fi; \
         rm h1; echo AFTER $(stat -c %i/%h h2); echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    // One inode and a link count of 2 on both names, as `stat` on a bind.
    let same = |k: &str| {
        let v = field(&r, k).unwrap_or_else(|| panic!("{k}: {r:?}"));
        let parts: Vec<&str> = v.split(' ').collect();
        assert_eq!(parts.len(), 2, "{k}: {v}");
        assert_eq!(parts[0], parts[1], "{k}: two names, one file: {v}");
        assert!(parts[0].ends_with("/2"), "{k}: link count 2: {v}");
    };
    for k in ["LINK", "HOST", "IGN", "CPA", "TAR", "OUT", "IN"] {
        same(k);
    }
    if field(&r, "RSYNC").is_some() {
        same("RSYNC");
    }
    assert!(field(&r, "AFTER").is_some_and(|v| v.ends_with("/1")), "{r:?}");
    // The host has one file per pair too.
    for (a, b) in [("h2", "h2"), ("cpa/p", "cpa/q"), ("tarx/src/p", "tarx/src/q"), ("in/p", "in/q")] {
        let (ma, mb) = (ws.join(a).metadata().unwrap(), ws.join(b).metadata().unwrap());
        assert_eq!(ma.ino(), mb.ino(), "host {a} {b}");
    }
    assert_eq!(ws.join("cpa/p").metadata().unwrap().nlink(), 2);
    assert!(!ws.join("build").exists(), "the ignored directory stays Domain-side");
}

const XATTR_TIMES: &str = r#"
import os, errno
# 60 levels of 200-byte names: 12 KiB below the root, walked by components
for i in range(60):
    n = '%d' % i + 'd' * 200
    os.mkdir(n)
    os.chdir(n)
with open('f', 'w') as w: w.write('deep')
with open('f') as r: print('DEEP', 'ok' if r.read() == 'deep' else 'FAIL')
os.chdir('/workspace')
fd = os.open('fa', os.O_RDWR | os.O_CREAT, 0o644)
os.posix_fallocate(fd, 0, 65536)
print('FALLOC', 'ok' if os.fstat(fd).st_size == 65536 else 'FAIL')
os.utime('fa', (-86400 * 365 * 10, -86400 * 365 * 10 + 0.5))
st = os.stat('fa')
print('OLDTIME', st.st_atime_ns, st.st_mtime_ns)
try:
    os.getxattr('fa', 'user.absent')
    print('XATTR', 'present')
except OSError as e:
    print('XATTR', errno.errorcode.get(e.errno))
print('LISTX', os.listxattr('fa'))
"#;

#[test]
fn deep_paths_fallocate_times_and_xattrs_as_on_a_bind() {
    let env = require_env!();
    let _g = GLOBAL.read().unwrap();
    let ws = git_repo(env, "disk-deep", &[]);
    env.write(&ws.join("x.py"), XATTR_TIMES);
    let r = env.run_sh(
        &ws,
        "python3 x.py 2>&1; echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    assert_eq!(field(&r, "DEEP"), Some("ok"), "a 12 KiB path below the root: {r:?}");
    assert_eq!(field(&r, "FALLOC"), Some("ok"), "{r:?}");
    let old: i64 = -86400 * 365 * 10;
    // Inside: whole seconds exactly (gVisor's own reading of a negative
    // time with nanoseconds was seen 2^32 ns off; the host has them right).
    let inside = field(&r, "OLDTIME").unwrap_or_default();
    assert_eq!(
        inside.split(' ').next(),
        Some((old * 1_000_000_000).to_string().as_str()),
        "{r:?}"
    );
    let m = ws.join("fa").metadata().unwrap();
    assert_eq!((m.atime(), m.mtime(), m.mtime_nsec()), (old, old, 500_000_000), "stored on the host");
    assert_eq!(field(&r, "XATTR"), Some("ENODATA"), "{r:?}");
    assert_eq!(field(&r, "LISTX"), Some("[]"), "{r:?}");
}

#[test]
fn the_host_executes_a_script_the_sandbox_wrote_while_the_domain_runs() {
    let env = require_env!();
    let _g = GLOBAL.read().unwrap();
    let ws = git_repo(env, "disk-txtbsy", &[]);
    let host_ws = ws.clone();
    let pre = env.as_user();
    let runner = std::thread::spawn(move || {
        if !eventually(Duration::from_secs(60), || host_ws.join("written").exists()) {
            return "sandbox never wrote".to_string();
        }
        // The view lets its write fd go within WRITE_IDLE (1 s) of the last
        // write; gVisor's own fds are on the view, not on the host file.
        let mut text = String::new();
        eventually(Duration::from_secs(10), || {
            let out = std::process::Command::new(&pre[0])
                .args(&pre[1..])
                .arg(host_ws.join("build.sh"))
                .output()
                .unwrap();
            text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            !text.contains("Text file busy")
        });
        std::fs::write(host_ws.join("ran"), "").unwrap();
        text
    });
    let r = env.run_sh(
        &ws,
        "printf '#!/bin/sh\\necho BUILT\\n' > build.sh; chmod +x build.sh; echo x >> build.sh.log; \
         : > written; i=0; while [ ! -e ran ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; echo done",
    );
    let host = runner.join().unwrap();
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(host.contains("BUILT"), "host exec of the sandbox's script: {host}");
}
