//! Git inside on a repository the host's Git cloned: the index the host
//! wrote is taken as it is (no file re-read, no index rewritten, so the
//! host's next `git status` is as fast as before), and no change is missed
//! on either side but the documented window of `core.checkStat=minimal`
//! (docs/git.md, "Git inside and the host's index").

use std::time::Duration;

use crate::fixtures::{git_repo, host_git, host_git_ok};
use crate::harness::field;
use crate::require_env;

fn index(ws: &std::path::Path) -> Vec<u8> {
    std::fs::read(ws.join(".git/index")).unwrap()
}

#[test]
fn a_host_cloned_index_is_taken_as_is_and_no_change_is_missed() {
    let (env, _g) = require_env!(shared);
    let mut files: Vec<(String, String)> = Vec::new();
    for d in 0..20 {
        for f in 0..20 {
            files.push((format!("s/d{d}/f{f}"), format!("{d} {f}\n")));
        }
    }
    for n in ["host-edit", "host-back", "in-edit", "in-back", "racy"] {
        files.push((n.into(), "aaaa\n".into()));
    }
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let src = git_repo(env, "hidx-src", &refs);
    let ws = env.dir("hidx");
    host_git_ok(env, &ws, &["clone", "-q", &src.display().to_string(), "."]);
    // No entry racily clean (its mtime the index's second): the host's
    // own `git status` then writes the index it keeps.
    std::thread::sleep(Duration::from_millis(1100));
    host_git_ok(env, &ws, &["status", "--porcelain"]);
    // The host edits two files to the same size; one of them gets its old
    // modification time back (to the second, as `touch -r` or `cp -p`
    // would): the documented window.
    std::thread::sleep(Duration::from_millis(1100));
    let mtime = |p: &str| ws.join(p).metadata().unwrap().modified().unwrap();
    let old_back = mtime("host-back");
    env.write(&ws.join("host-edit"), "bbbb\n");
    env.write(&ws.join("host-back"), "bbbb\n");
    std::fs::File::options()
        .write(true)
        .open(ws.join("host-back"))
        .unwrap()
        .set_modified(old_back)
        .unwrap();
    let r = env.run_sh(
        &ws,
        "echo STATUS1 $(git status --porcelain | tr ' ' _); \
         echo CONFIG $(git config core.checkStat); \
         echo DEFAULT $(git -c core.checkStat=default status --porcelain host-back | tr ' ' _); \
         sleep 1.1; printf bbbb'\\n' > in-edit; t=$(stat -c %Y in-back); printf bbbb'\\n' > in-back; touch -d @$t in-back; \
         echo STATUS2 $(git status --porcelain in-edit in-back | tr ' ' _); \
         printf bbbb'\\n' > racy && git add racy && printf cccc'\\n' > racy && echo RACY $(git status --porcelain racy | tr ' ' _); \
         git reset -q racy; printf aaaa'\\n' > racy; echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    assert_eq!(field(&r, "CONFIG"), Some("minimal"), "{r:?}");
    // The host's same-size edit in a later second is seen inside; the one
    // that kept its modification second is not (the window), and Git's
    // default comparison shows it.
    assert_eq!(field(&r, "STATUS1"), Some("_M_host-edit"), "{r:?}");
    assert_eq!(field(&r, "DEFAULT"), Some("_M_host-back"), "{r:?}");
    assert!(r.stdout.contains("STATUS2 _M_in-edit\n"), "{r:?}");
    // A change in the second the index was written is caught by Git's own
    // racy-entry check, as on the host.
    assert_eq!(field(&r, "RACY"), Some("MM_racy"), "{r:?}");
    // The host sees every edit made inside, the one that set its old
    // modification time back included (its change time moved), and the
    // host's own.
    let host = host_git_ok(env, &ws, &["status", "--porcelain"]);
    let mut lines: Vec<&str> = host.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [" M host-back", " M host-edit", " M in-back", " M in-edit"],
        "host status: {host:?} (inside: {r:?})"
    );
    // Nothing was re-read: restored, Git inside leaves the host's index
    // as it was, byte for byte, and so does a clean status.
    for (p, c) in [
        ("host-edit", "aaaa\n"),
        ("host-back", "aaaa\n"),
        ("in-edit", "aaaa\n"),
        ("in-back", "aaaa\n"),
    ] {
        let r = host_git(env, &ws, &["checkout", "-q", "--", p]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(std::fs::read_to_string(ws.join(p)).unwrap(), c);
    }
    std::thread::sleep(Duration::from_millis(1100));
    host_git_ok(env, &ws, &["status", "--porcelain"]);
    let settled = index(&ws);
    let r = env.run_sh(&ws, "echo CLEAN $(git status --porcelain | wc -l); echo done");
    assert_eq!(field(&r, "CLEAN"), Some("0"), "{r:?}");
    assert!(settled == index(&ws), "Git inside rewrote the host's index");
}
