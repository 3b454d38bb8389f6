//! Workspace view v2, ignored-path half: ignored host files stay hidden
//! through renames of any ancestor, links, hostile `.gitignore` files and
//! `.gitignore` edits from inside (next generations included); the
//! workspace root cannot swallow what is not the user's; names the sandbox
//! chose never reach the terminal raw.
//!
//! Every attack uses a marker: secret content that must never be readable
//! from inside, and the host file must be unchanged afterwards.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::fixtures::git_repo;
use crate::harness::{eventually, json_number, Run};
use crate::require_env;

fn no_marker(r: &Run, marker: &str) {
    assert!(
        !r.stdout.contains(marker) && !r.stderr.contains(marker),
        "{marker} readable inside: {r:?}"
    );
}

/// The host file (wherever a rename may have put it) still has `content`.
fn host_unchanged(ws: &Path, candidates: &[&str], content: &str) {
    let found: Vec<String> = candidates
        .iter()
        .filter_map(|p| std::fs::read_to_string(ws.join(p)).ok())
        .collect();
    assert!(
        !found.is_empty() && found.iter().all(|c| c == content),
        "host file changed or lost: {found:?}"
    );
}

// Covers SR-13.
#[test]
fn ignored_files_stay_hidden_through_ancestor_renames_links_and_gitignore_edits() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "v2-rename",
        &[
            (".gitignore", "/config/master.key\n.env\n"),
            ("config/app.toml", "app\n"),
            ("secrets/.gitignore", "*\n!.gitignore\n"),
        ],
    );
    env.write(&ws.join("config/master.key"), "MARKER-MASTER-0451\n");
    env.write(&ws.join("secrets/api.txt"), "MARKER-API-0452\n");
    env.write(&ws.join(".env"), "MARKER-ENV-0453\n");

    // Generation 1: rename every ancestor, follow symlinks, try hard links,
    // write under the new names, rename back.
    let r = env.run_sh(
        &ws,
        "cat config/master.key secrets/api.txt .env; \
         mv config c2 && echo RENAMED-1 && cat c2/master.key; ls -a c2; echo pwned > c2/master.key; \
         mv secrets s2 && echo RENAMED-2 && cat s2/api.txt; ls -a s2; echo pwned > s2/api.txt; \
         ln -s c2 lnk; cat lnk/master.key; ln c2/master.key hard; cat hard; \
         mkdir outer && mv s2 outer/s3 && cat outer/s3/api.txt; mv outer/s3 s2; rmdir outer; \
         mv c2 config; mv s2 secrets; rm -f lnk; cat config/master.key; echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(
        r.stdout.contains("RENAMED-1") && r.stdout.contains("RENAMED-2") && r.stdout.contains("app.toml"),
        "the renames themselves must work: {r:?}"
    );
    assert!(r.stdout.contains("pwned"), "the sandbox's own copy is readable: {r:?}");
    for m in ["MARKER-MASTER", "MARKER-API", "MARKER-ENV"] {
        no_marker(&r, m);
    }
    host_unchanged(&ws, &["config/master.key", "c2/master.key"], "MARKER-MASTER-0451\n");
    host_unchanged(
        &ws,
        &["secrets/api.txt", "s2/api.txt", "outer/s3/api.txt"],
        "MARKER-API-0452\n",
    );
    host_unchanged(&ws, &[".env"], "MARKER-ENV-0453\n");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));

    // Generation 2: un-ignore everything from inside, and move the
    // directories again (the move persists on the host).
    let r = env.run_sh(
        &ws,
        ": > .gitignore; rm -f secrets/.gitignore; mv config c3 && mv secrets s4 && echo MOVED; \
         cat c3/master.key s4/api.txt .env; echo done",
    );
    assert!(r.stdout.contains("done") && r.stdout.contains("MOVED"), "{r:?}");
    for m in ["MARKER-MASTER", "MARKER-API", "MARKER-ENV"] {
        no_marker(&r, m);
    }
    env.wait_unpublished("default", &ws, Duration::from_secs(20));

    // Generation 3: the rules no longer match anything, the names are new;
    // the host files are still hidden (sticky, by identity).
    let r = env.run_sh(
        &ws,
        "cat c3/master.key s4/api.txt .env; ls -a c3 s4; grep -r MARKER . ; \
         echo pwned > .env; echo pwned > c3/master.key; echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    for m in ["MARKER-MASTER", "MARKER-API", "MARKER-ENV"] {
        no_marker(&r, m);
    }
    assert!(
        ws.join("c3").is_dir() && ws.join("s4").is_dir(),
        "the moves reached the host"
    );
    host_unchanged(&ws, &["c3/master.key"], "MARKER-MASTER-0451\n");
    host_unchanged(&ws, &["s4/api.txt"], "MARKER-API-0452\n");
    host_unchanged(&ws, &[".env"], "MARKER-ENV-0453\n");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}

#[test]
fn hostile_gitignore_files_fail_closed() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("v2-hostile");
    // A BOM before the only rule; a non-UTF-8 line before a rule; a rules
    // file over the size limit; a symlinked one; a FIFO.
    std::fs::write(ws.join(".gitignore"), b"\xef\xbb\xbf.env\n").unwrap();
    std::fs::create_dir_all(ws.join("latin")).unwrap();
    std::fs::write(ws.join("latin/.gitignore"), b"caf\xe9\nsecret.txt\n").unwrap();
    std::fs::create_dir_all(ws.join("big")).unwrap();
    std::fs::write(ws.join("big/.gitignore"), vec![b'#'; 2 << 20]).unwrap();
    std::fs::create_dir_all(ws.join("sym")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", ws.join("sym/.gitignore")).unwrap();
    std::fs::create_dir_all(ws.join("fifo")).unwrap();
    nix_mkfifo(&ws.join("fifo/.gitignore"));
    env.write(&ws.join(".env"), "MARKER-BOM-0461\n");
    env.write(&ws.join("latin/secret.txt"), "MARKER-LATIN-0462\n");
    env.write(&ws.join("big/secret.txt"), "MARKER-BIG-0463\n");
    env.write(&ws.join("sym/secret.txt"), "MARKER-SYM-0464\n");
    env.write(&ws.join("fifo/secret.txt"), "MARKER-FIFO-0465\n");
    env.write(&ws.join("visible.txt"), "plain\n");
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", env.uid, env.gid)])
        .arg(&ws)
        .status();
    let r = env.run_sh(
        &ws,
        "cat .env latin/secret.txt big/secret.txt sym/secret.txt fifo/secret.txt visible.txt; \
         echo x > big/secret.txt; echo done",
    );
    assert!(r.stdout.contains("done") && r.stdout.contains("plain"), "{r:?}");
    for m in ["MARKER-BOM", "MARKER-LATIN", "MARKER-BIG", "MARKER-SYM", "MARKER-FIFO"] {
        no_marker(&r, m);
    }
    host_unchanged(&ws, &["big/secret.txt"], "MARKER-BIG-0463\n");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    let log = std::fs::read_to_string(
        env.runtime_root()
            .join(env.domain_id("default", &ws))
            .join("coordinator.log"),
    )
    .unwrap_or_default();
    assert!(
        log.contains("big/.gitignore") && log.contains("treated as ignored"),
        "the oversized .gitignore is not reported in coordinator.log:\n{log}"
    );
}

fn nix_mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().unwrap();
    assert!(st.success());
}

/// VmHWM of `pid` in KiB.
fn vm_hwm(pid: i64) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn planted_dev_zero_and_huge_gitignore_do_not_stop_the_next_start() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "v2-zero", &[(".gitignore", ".env\n"), ("pkg/a.txt", "a\n")]);
    env.write(&ws.join(".env"), "MARKER-ZERO-0471\n");
    // From inside: the root .gitignore becomes a symlink to /dev/zero and
    // pkg gets a 100 MiB one.
    let r = env.run_sh(
        &ws,
        "rm .gitignore && ln -s /dev/zero .gitignore && \
         head -c 104857600 /dev/zero > pkg/.gitignore && echo planted",
    );
    assert!(r.stdout.contains("planted"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    assert!(std::fs::symlink_metadata(ws.join(".gitignore"))
        .unwrap()
        .file_type()
        .is_symlink());

    let bg = env.lz_sh(&ws, "cat .env; echo started; sleep 30").spawn_bg();
    let id = env.domain_id("default", &ws);
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(60), || {
            pid = json_number(&env.ps_json(&ws), &id, "supervisor_pid").filter(|p| *p > 0);
            pid.is_some()
        }),
        "the next start did not succeed"
    );
    // Let it settle, then read its peak.
    std::thread::sleep(Duration::from_secs(3));
    let hwm = vm_hwm(pid.unwrap()).expect("supervisor status");
    println!("supervisor VmHWM after planted /dev/zero and 100 MiB .gitignore: {hwm} KiB");
    assert!(hwm < 100 * 1024, "supervisor peak RSS {hwm} KiB");
    drop(bg);
    let _ = env.lz(&ws, &["stop"]).run();
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    // And a plain run still works, the host .env still hidden.
    let r = env.run_sh(&ws, "cat .env; echo ok");
    assert!(r.stdout.contains("ok"), "{r:?}");
    no_marker(&r, "MARKER-ZERO");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}

#[test]
fn workspace_roots_that_are_not_the_users_or_swallow_too_much_are_refused() {
    let (env, _g) = require_env!(shared);
    let refused = |cwd: &Path, extra: &[(&str, &str)], needle: &str| {
        let mut lz = env.lz(cwd, &["run", "--", "true"]);
        for (k, v) in extra {
            lz = lz.env(k, v);
        }
        let r = lz.run();
        assert_eq!(r.code, 2, "{needle}: {r:?}");
        assert!(r.stderr.contains(needle), "message does not name {needle}: {r:?}");
    };
    // $HOME itself, and /tmp (world-writable).
    refused(&env.home, &[], &env.home.display().to_string());
    refused(Path::new("/tmp"), &[], "/tmp");
    // Another world-writable directory.
    let ww = env.dir("v2-worldw");
    std::fs::set_permissions(&ww, std::fs::Permissions::from_mode(0o1777)).unwrap();
    refused(&ww, &[], &ww.display().to_string());
    // An ancestor .git made by another user (root here).
    let shared = env.dir("v2-shared");
    std::fs::create_dir(shared.join(".git")).unwrap();
    let proj = shared.join("proj");
    std::fs::create_dir(&proj).unwrap();
    env.chown(&proj);
    refused(&proj, &[], &shared.join(".git").display().to_string());
    // A workspace holding the storage root or the runtime dir.
    let ws = env.dir("v2-holds");
    let data = ws.join("data");
    refused(
        &ws,
        &[("XDG_DATA_HOME", data.to_str().unwrap())],
        &data.display().to_string(),
    );
    let rt = ws.join("rt");
    std::fs::create_dir(&rt).unwrap();
    env.chown(&rt);
    std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o700)).unwrap();
    refused(
        &ws,
        &[("XDG_RUNTIME_DIR", rt.to_str().unwrap())],
        &rt.display().to_string(),
    );
    // The workspace itself owned by another user.
    let theirs = env.dir("v2-theirs");
    std::os::unix::fs::chown(&theirs, Some(0), Some(0)).unwrap();
    refused(&theirs, &[], &theirs.display().to_string());
    assert!(!ws.join("data").exists(), "storage created inside a refused workspace");
}

#[test]
fn names_the_sandbox_chose_reach_stdout_escaped() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("v2-names");
    let r = env.run_sh(&ws,
        "mkdir -p /usr/local/bin && touch \"/usr/local/bin/$(printf 'a\\033[2Jb\\342\\200\\256c\\033]0;t\\007')\" && echo made",
    );
    assert!(r.stdout.contains("made"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    for args in [
        &["state", "inspect"][..],
        &["state", "inspect", "--json"],
        &["state", "list"],
        &["state", "list", "--json"],
        &["state", "verify"],
        &["state", "verify", "--json"],
        &["ps"],
        &["ps", "--json"],
    ] {
        let r = env.lz(&ws, args).run();
        for bad in ['\u{1b}', '\u{202e}', '\u{7}', '\u{9b}'] {
            assert!(
                !r.stdout.contains(bad) && !r.stderr.contains(bad),
                "{args:?} printed a raw {:?}: {r:?}",
                bad
            );
        }
        if args == ["state", "inspect"] {
            assert!(r.stdout.contains("a\\x1b[2Jb\\u{202e}c"), "{r:?}");
        }
    }
}

#[test]
fn the_user_unhides_on_purpose_with_state_unhide() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "v2-unhide", &[(".gitignore", ".env\n")]);
    env.write(&ws.join(".env"), "MARKER-UNHIDE-0481\n");
    let r = env.run_sh(&ws, "cat .env; echo done");
    assert!(r.stdout.contains("done"), "{r:?}");
    no_marker(&r, "MARKER-UNHIDE");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    // The user stops ignoring it on the host: still hidden (sticky) ...
    env.write(&ws.join(".gitignore"), "");
    let r = env.run_sh(&ws, "cat .env; echo done");
    assert!(r.stdout.contains("done"), "{r:?}");
    no_marker(&r, "MARKER-UNHIDE");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    // ... until they say so.
    let r = env.lz(&ws, &["state", "unhide", "--path", ".env"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(".env"), "{r:?}");
    let r = env.run_sh(&ws, "cat .env");
    assert!(r.stdout.contains("MARKER-UNHIDE-0481"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}

/// Cargo makes `target/` as a temporary directory next to it and renames
/// it into place, with no fallback for EXDEV: a small directory made here
/// moves into an ignored name in one rename(2). What the view cannot move
/// whole (too large, holding a hidden host file, a file open) is refused
/// with EXDEV as before, and nothing is lost or revealed.
#[test]
fn a_small_directory_made_here_renames_into_an_ignored_name_as_cargo_does() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "v2-dirmove",
        &[(".gitignore", "/target/\n/big/\n/held/\n/conf2/\n.env\n")],
    );
    env.write(&ws.join("conf/app.txt"), "app\n");
    env.write(&ws.join("conf/.env"), "MARKER-DIRMOVE-0491\n");
    env.write(
        &ws.join("t.py"),
        "import errno, os\n\
         def mv(a, b):\n\
         \x20   try:\n\
         \x20       os.rename(a, b)\n\
         \x20       return 'ok'\n\
         \x20   except OSError as e:\n\
         \x20       return errno.errorcode[e.errno]\n\
         os.mkdir('.tmpA')\n\
         open('.tmpA/CACHEDIR.TAG', 'w').write('Signature: 8a477f597d28d172789f06886806bc55\\n')\n\
         os.mkdir('.tmpA/debug')\n\
         open('.tmpA/debug/x', 'w').write('build')\n\
         os.symlink('debug/x', '.tmpA/link')\n\
         os.stat('.tmpA/debug/x')\n\
         print('A', mv('.tmpA', 'target'))\n\
         print('READ', open('target/CACHEDIR.TAG').read().strip(), open('target/debug/x').read(), os.readlink('target/link'))\n\
         open('target/debug/x', 'a').write('+more')\n\
         print('AFTER', open('target/link').read(), '.tmpA' in os.listdir('.'))\n\
         os.mkdir('.tmpB')\n\
         for i in range(300):\n\
         \x20   open('.tmpB/f%d' % i, 'w').close()\n\
         print('B', mv('.tmpB', 'big'))\n\
         os.mkdir('.tmpC')\n\
         held = open('.tmpC/held.log', 'w')\n\
         held.write('line\\n'); held.flush()\n\
         c = mv('.tmpC', 'held')\n\
         print('C', c)\n\
         held.write('after\\n'); held.close()\n\
         print('HELD', repr(open('held/held.log' if c == 'ok' else '.tmpC/held.log').read()))\n\
         print('D', mv('conf', 'conf2'))\n\
         print('done')\n",
    );
    let r = env.run_sh(&ws, "python3 t.py 2>&1");
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(
        r.stdout.contains("A ok"),
        "cargo's rename into target/ must work: {r:?}"
    );
    assert!(
        r.stdout
            .contains("READ Signature: 8a477f597d28d172789f06886806bc55 build debug/x"),
        "the moved tree reads back whole: {r:?}"
    );
    assert!(r.stdout.contains("AFTER build+more False"), "{r:?}");
    assert!(r.stdout.contains("B EXDEV"), "a large tree is refused as before: {r:?}");
    // A file open while its directory moves: without handles (gVisor's
    // opens) its node moves along and the fd writes the moved copy; with
    // handles the move is refused. Either way no line is lost.
    assert!(
        r.stdout.contains("HELD 'line\\nafter\\n'"),
        "a write through a file open across the move is kept: {r:?}"
    );
    assert!(
        r.stdout.contains("D EXDEV"),
        "a tree holding a hidden file is refused: {r:?}"
    );
    no_marker(&r, "MARKER-DIRMOVE");
    // target/ is Domain-side: not on the host; the temporary name is gone.
    assert!(!ws.join("target").exists() && !ws.join(".tmpA").exists(), "{r:?}");
    // What was refused stays where it was, whole.
    assert_eq!(std::fs::read_dir(ws.join(".tmpB")).unwrap().count(), 300);
    if r.stdout.contains("C EXDEV") {
        assert_eq!(
            std::fs::read_to_string(ws.join(".tmpC/held.log")).unwrap(),
            "line\nafter\n"
        );
    } else {
        assert!(r.stdout.contains("C ok") && !ws.join(".tmpC").exists(), "{r:?}");
    }
    host_unchanged(&ws, &["conf/.env"], "MARKER-DIRMOVE-0491\n");
    host_unchanged(&ws, &["conf/app.txt"], "app\n");
    // Another session (the kernel's cache cold for it) sees the same tree.
    let r = env.run_sh(
        &ws,
        "cat target/debug/x; echo; cat target/CACHEDIR.TAG; ls -a; echo done",
    );
    assert!(r.stdout.contains("build+more"), "{r:?}");
    assert!(!r.stdout.contains(".tmpA"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    // And the next generation: the store keeps it.
    let r = env.run_sh(&ws, "cat target/debug/x; echo; echo done");
    assert!(r.stdout.contains("build+more"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}
