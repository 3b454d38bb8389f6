//! Attacks on the workspace view found by trying them from inside: each
//! performs the attack and proves with a marker on the host that it did not
//! work.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use crate::fixtures::git_repo;
use crate::require_env;

/// The sandbox's root holds FOWNER and FSETID: `chmod 4755` (or a create
/// with set-id bits) on a host workspace file would leave a set-user-ID
/// program of the developer's on the host, which any local user who can
/// reach the workspace runs as the developer. A world-writable directory
/// would let any local user plant files in the workspace.
#[test]
fn sandbox_cannot_make_setid_or_world_writable_host_files() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "atk-setid", &[]);
    let r = env.run_sh(
        &ws,
        "cd /workspace; printf '#!/bin/sh\\nid\\n' > s1; chmod 4755 s1; \
         printf x > s2; chmod 6711 s2; printf x > s3; chmod g+s,g+x s3; \
         mkdir d1; chmod 2777 d1; mkdir d2; chmod 1777 d2; \
         python3 -c 'import os; os.close(os.open(\"s4\", os.O_CREAT|os.O_WRONLY, 0o6755)); os.mkdir(\"d3\", 0o7777)'; \
         echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    for f in ["s1", "s2", "s3", "s4"] {
        let m = std::fs::metadata(ws.join(f)).unwrap().permissions().mode();
        assert_eq!(m & 0o6000, 0, "{f} has a set-id bit on the host: {m:o}");
        assert_eq!(m & 0o002, 0, "{f} is world-writable on the host: {m:o}");
    }
    assert_eq!(
        std::fs::metadata(ws.join("s1")).unwrap().permissions().mode() & 0o777,
        0o755,
        "the rest of the mode still applies"
    );
    for d in ["d1", "d2", "d3"] {
        let m = std::fs::metadata(ws.join(d)).unwrap().permissions().mode();
        assert_eq!(m & 0o4002, 0, "{d} is world-writable or setuid on the host: {m:o}");
    }
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}

/// The sandbox empties `.gitignore` (the edit reaches the host); later the
/// developer saves `.env` the way editors do (write aside, rename over: a
/// new inode) or regenerates a credential. The new host file must stay
/// hidden in the next generation: the hidden path is sticky, not only the
/// old inode.
#[test]
fn hidden_path_stays_hidden_when_the_host_replaces_the_file_after_rules_were_emptied() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "atk-replace",
        &[(".gitignore", ".env\n"), ("secrets/.gitignore", "*\n!.gitignore\n")],
    );
    env.write(&ws.join(".env"), "MARKER-OLD-0711\n");
    env.write(&ws.join("secrets/api.txt"), "MARKER-OLD-0712\n");
    let r = env.run_sh(
        &ws,
        "cd /workspace; cat .env secrets/api.txt; : > .gitignore; rm -f secrets/.gitignore; echo done",
    );
    assert!(r.stdout.contains("done") && !r.stdout.contains("MARKER-OLD"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    assert_eq!(std::fs::read_to_string(ws.join(".gitignore")).unwrap(), "");
    // The developer replaces both files on the host.
    env.write(&ws.join(".env.tmp"), "MARKER-NEW-0713\n");
    std::fs::rename(ws.join(".env.tmp"), ws.join(".env")).unwrap();
    std::fs::remove_file(ws.join("secrets/api.txt")).unwrap();
    env.write(&ws.join("secrets/api.txt"), "MARKER-NEW-0714\n");
    let r = env.run_sh(
        &ws,
        "cd /workspace; cat .env secrets/api.txt; ls -a . secrets; echo pwned > .env; echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(
        !r.stdout.contains("MARKER-NEW") && !r.stderr.contains("MARKER-NEW"),
        "a replaced secret is readable inside: {r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".env")).unwrap(),
        "MARKER-NEW-0713\n",
        "host .env written from inside"
    );
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}

/// A workspace *inside* Lazaret's own directories: from the storage root's
/// `images/` the sandbox would rewrite the image every Domain starts from
/// (and from `domains/` other Domains' state and hidden sets); from the
/// runtime dir, other Domains' control sockets. Refused with exit 2.
#[test]
fn workspace_inside_lazarets_own_directories_is_refused() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("atk-inside");
    // The test user's real Storage Root (it holds the built image).
    let images = env.home.join(".local/share/lazaret/images");
    assert!(images.join("default").is_dir(), "no image at {images:?}");
    let rt = base.join("rt");
    let rt_proj = rt.join("lazaret/proj");
    std::fs::create_dir_all(&rt_proj).unwrap();
    let _ = Command::new("chown")
        .args(["-R", &format!("{}:{}", env.uid, env.gid)])
        .arg(&base)
        .status();
    for d in [&rt, &rt.join("lazaret")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let marker = "MARKER-INSIDE-0721";
    for (cwd, rt_env) in [(&images, None), (&rt_proj, Some(&rt))] {
        let mut lz = env.lz_sh(cwd, &format!("echo {marker}; touch /workspace/{marker}"));
        if let Some(rt) = rt_env {
            lz = lz.env("XDG_RUNTIME_DIR", rt.to_str().unwrap());
        }
        let r = lz.run();
        assert_eq!(r.code, 2, "{cwd:?}: {r:?}");
        assert!(r.stderr.contains("lies inside"), "{r:?}");
        assert!(!r.stdout.contains(marker), "the sandbox ran: {r:?}");
        assert!(!cwd.join(marker).exists(), "the sandbox wrote inside {cwd:?}");
    }
}

/// The sandbox empties `.gitignore` (the edit reaches the host); a secret
/// the developer creates *afterwards* at a formerly ignored path was never
/// hidden, so no identity or path is sticky for it: the rules texts of
/// earlier generations are remembered and still apply.
#[test]
fn secret_created_after_the_sandbox_emptied_gitignore_stays_hidden() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "atk-late", &[(".gitignore", ".env\n")]);
    let r = env.run_sh(&ws, "cd /workspace; : > .gitignore; echo done");
    assert!(r.stdout.contains("done"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
    env.write(&ws.join(".env"), "MARKER-LATE-0731\n");
    let r = env.run_sh(&ws, "cd /workspace; cat .env; echo done");
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(
        !r.stdout.contains("MARKER-LATE"),
        "a later secret is readable inside: {r:?}"
    );
    env.wait_unpublished("default", &ws, Duration::from_secs(20));
}

/// A listing and a directory swap raced from inside (variant of the
/// listing change of issue 28: READDIRPLUS opens the listed directory once
/// per request). While one process lists a large directory and reads every
/// entry, another renames it away and puts symlinks in its place (to the
/// workspace's parent, and to a host directory next to the workspace by
/// its relative name). Neither a hidden secret inside the directory nor a
/// host file outside the workspace ever reaches the sandbox.
#[test]
fn a_listing_raced_with_a_directory_swapped_for_symlinks_reveals_nothing() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "atk-list", &[(".gitignore", "*.key\n")]);
    let big = ws.join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..2000 {
        std::fs::write(big.join(format!("f{i:04}")), "x\n").unwrap();
    }
    env.write(&big.join("master.key"), "MARKER-LIST-3601\n");
    let outside = ws.parent().unwrap().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    env.write(&outside.join("f0001"), "MARKER-OUT-3602\n");
    let _ = Command::new("chown")
        .args([
            "-R",
            &format!("{}:", env.user),
            &big.display().to_string(),
            &outside.display().to_string(),
        ])
        .status();
    let r = env.run_sh(
        &ws,
        "cd /workspace
         ( for i in $(seq 40); do
             mv big big2 && ln -s .. big && rm big && ln -s ../outside big && rm big && mv big2 big
           done; echo swapped ) &
         for i in $(seq 40); do ls -f big 2>/dev/null; cat big/* 2>/dev/null; done > /tmp/seen
         wait; echo listed $(grep -c '^f1999$' /tmp/seen); grep -a MARKER /tmp/seen; ls big | wc -l; echo done",
    );
    assert!(r.stdout.contains("done") && r.stdout.contains("swapped"), "{r:?}");
    assert!(
        r.stdout.lines().any(|l| l
            .strip_prefix("listed ")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n > 0)),
        "the race never listed the directory: {r:?}"
    );
    for m in ["MARKER-LIST", "MARKER-OUT"] {
        assert!(
            !r.stdout.contains(m) && !r.stderr.contains(m),
            "{m} reached the sandbox: {r:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(big.join("master.key")).ok().as_deref(),
        Some("MARKER-LIST-3601\n"),
        "the host's secret is untouched"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("f0001")).ok().as_deref(),
        Some("MARKER-OUT-3602\n")
    );
}
