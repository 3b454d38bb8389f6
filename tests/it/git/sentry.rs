//! Git inside the sandbox, the Git Sentry, and ignored workspace state
//! Host-side Git runs as the test user with
//! a clean environment and no system or global config, so everything it
//! honours comes from the repository itself.

use std::time::Duration;

use crate::fixtures::{git_repo, host_git, host_git_ok};
use crate::harness::{self, eventually, sh_quote};
use crate::require_env;

// Covers FR-3, DX-3.
#[test]
fn git_operations_inside_land_in_the_host_repository() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "gitops", &[("a.txt", "one\n")]);
    // The identity is in the host-written config already; the sandbox must
    // not need to (and cannot) write config.
    let script = "set -ex
        git status
        echo two >> a.txt && git add a.txt && git commit -q -m inside-1
        git checkout -q -b feature
        echo f > f.txt && git add f.txt && git commit -q -m inside-feature
        git checkout -q main
        echo three > b.txt && git add b.txt && git commit -q -m inside-main
        echo dirty >> a.txt && git stash && git stash list | grep -q stash@ && git stash pop
        git checkout -q a.txt
        git checkout -q feature && git rebase -q main && git checkout -q main
        git merge -q --no-edit feature
        git tag v1
        git worktree add -q /root/wt -b wt-branch && git -C /root/wt log --oneline -1
        git status --porcelain";
    let r = env.run_sh(&ws, script);
    assert_eq!(r.code, 0, "{r:?}");
    let log = host_git_ok(env, &ws, &["log", "--all", "--format=%s"]);
    for m in ["inside-1", "inside-feature", "inside-main", "initial"] {
        assert!(log.contains(m), "host log lacks {m}: {log}");
    }
    assert!(host_git_ok(env, &ws, &["tag"]).contains("v1"));
    assert!(host_git_ok(env, &ws, &["branch", "--list"]).contains("wt-branch"));
    let fsck = host_git(env, &ws, &["fsck", "--strict", "--no-progress"]);
    assert_eq!(fsck.code, 0, "{fsck:?}");
    assert_eq!(
        host_git_ok(env, &ws, &["status", "--porcelain"]),
        "",
        "clean on the host"
    );
}

// Covers SR-4.
#[test]
fn linked_worktree_workspace_works_and_its_common_dir_is_protected() {
    let (env, _g) = require_env!(shared);
    let main = git_repo(env, "wtmain", &[("a.txt", "one\n")]);
    let wt = main.with_file_name(format!("{}-wt", main.file_name().unwrap().to_string_lossy()));
    let _ = std::fs::remove_dir_all(&wt);
    host_git_ok(
        env,
        &main,
        &["worktree", "add", "-q", &wt.to_string_lossy(), "-b", "wt"],
    );
    let before = host_git_ok(env, &main, &["config", "--show-origin", "--list"]);
    let common = main.join(".git");
    let marker = wt.with_extension("marker");
    let c = common.display().to_string();
    let script = format!(
        "set -x
        git status || exit 10
        echo x > new.txt && git add new.txt && git commit -q -m wt-inside || exit 11
        git checkout -q -b wt-second || exit 12
        echo y >> new.txt && git stash -q && git stash pop -q || exit 13
        git commit -qam wt-second || exit 14
        git rebase -q main || exit 15
        echo '[core] fsmonitor = \"touch {m}\"' >> {c}/config
        git config core.fsmonitor 'touch {m}'
        mkdir -p {c}/hooks; printf '#!/bin/sh\\ntouch {m}\\n' > {c}/hooks/post-commit
        echo /tmp/evil > {c}/commondir
        echo '[core] fsmonitor = \"touch {m}\"' > {c}/worktrees/wt/config.worktree
        echo ../../../evil > {c}/worktrees/wt/commondir
        mv {c} {c}-x
        exit 0",
        m = marker.display()
    );
    let r = env.run_sh(&wt, &script);
    assert_eq!(r.code, 0, "{r:?}");
    let log = host_git_ok(env, &main, &["log", "--all", "--format=%s"]);
    assert!(log.contains("wt-inside") && log.contains("wt-second"), "{log}");
    assert_eq!(host_git(env, &main, &["fsck", "--strict", "--no-progress"]).code, 0);
    host_git_ok(env, &wt, &["status"]);
    host_git_ok(env, &wt, &["commit", "-q", "--allow-empty", "-m", "host"]);
    host_git_ok(env, &main, &["status"]);
    assert!(!marker.exists(), "host git ran something the sandbox planted");
    assert_eq!(host_git_ok(env, &main, &["config", "--show-origin", "--list"]), before);
    assert!(!common.join("commondir").exists());
    assert!(!common.join("worktrees/wt/config.worktree").exists());
    let _ = std::fs::remove_dir_all(&wt);
}

// Covers SR-4.
#[test]
fn the_sandbox_cannot_make_host_git_obey_it() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "sentry", &[("a.txt", "one\n")]);
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let before_cfg = host_git_ok(env, &ws, &["config", "--show-origin", "--list"]);
    let hooks_before: Vec<_> = std::fs::read_dir(ws.join(".git/hooks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let poison = format!("[core]\n\tfsmonitor = \"touch {m}\"\n\thooksPath = /workspace/evil/hooks\n");
    // Each attempt may fail or succeed; only the host's behaviour counts.
    let attempts = [
        // config and hooks
        format!("git config core.fsmonitor {}", sh_quote(&format!("touch {m}"))),
        "git config core.hooksPath /workspace/evil/hooks".to_string(),
        "cat evil/config >> .git/config".to_string(),
        "cp evil/config .git/config".to_string(),
        "rm -f .git/config".to_string(),
        "chmod 000 .git/config".to_string(),
        "cp evil/hooks/post-commit .git/hooks/post-commit && chmod +x .git/hooks/post-commit".to_string(),
        "cp evil/hooks/post-commit .git/hooks/pre-commit.sample".to_string(),
        "mv .git/hooks .git/hooks-x && cp -r evil/hooks .git/hooks".to_string(),
        "rm -rf .git/hooks".to_string(),
        // redirections
        "echo ../evil > .git/commondir".to_string(),
        "echo /workspace/evil > .git/gitdir".to_string(),
        "cp evil/config .git/config.worktree".to_string(),
        "mkdir -p .git/objects/info && echo /workspace/evil/objects > .git/objects/info/alternates".to_string(),
        // symlinks
        "ln -s ../evil/config .git/config.worktree".to_string(),
        "ln -sf /workspace/evil/config .git/config".to_string(),
        "ln -s /workspace/evil/hooks .git/hooks2 && mv -T .git/hooks2 .git/hooks".to_string(),
        "ln -s ../evil .git/commondir".to_string(),
        "mv .git/objects/info .git/objects/info-x; ln -s /workspace/evil .git/objects/info".to_string(),
        "ln -s .git/config cfg-link && cat evil/config >> cfg-link".to_string(),
        // hard links
        "ln .git/config cfg-hard && cat evil/config >> cfg-hard".to_string(),
        "ln evil/config .git/config.worktree".to_string(),
        "ln evil/config .git/commondir".to_string(),
        "ln evil/hooks/post-commit .git/hooks/post-commit".to_string(),
        // .git itself
        "mv .git .git-x && mkdir .git && cp evil/config .git/config".to_string(),
        "mv .git .git-x && echo 'gitdir: /workspace/evil' > .git".to_string(),
        "rm -f .git; rmdir .git".to_string(),
        "mkdir sub && cd sub && mkdir .git".to_string(),
        "git init -q nested".to_string(),
    ];
    let mut script = format!(
        "mkdir -p evil/hooks evil/objects && printf {} > evil/config && \
         printf '#!/bin/sh\\ntouch {m}\\n' > evil/hooks/post-commit && chmod +x evil/hooks/post-commit\n",
        sh_quote(&poison)
    );
    for (i, a) in attempts.iter().enumerate() {
        script.push_str(&format!("( {a} ) >/dev/null 2>&1 && echo \"attempt {i} succeeded\"\n"));
    }
    script.push_str("git status --porcelain >/dev/null; exit 0\n");
    let r = env.run_sh(&ws, &script);
    assert_eq!(r.code, 0, "{r:?}");
    eprintln!(
        "sentry attempts that succeeded inside (harmless ones only): {}",
        r.stdout
    );

    // Host git: status, log, and a commit that would run hooks.
    host_git_ok(env, &ws, &["status"]);
    host_git_ok(env, &ws, &["log", "--oneline"]);
    host_git_ok(env, &ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    assert!(
        !marker.exists(),
        "host git ran something the sandbox planted: {}",
        r.stdout
    );
    assert_eq!(
        host_git_ok(env, &ws, &["config", "--show-origin", "--list"]),
        before_cfg,
        "host config changed"
    );
    for p in [
        "commondir",
        "gitdir",
        "config.worktree",
        "objects/info/alternates",
        "hooks-x",
    ] {
        assert!(
            std::fs::symlink_metadata(ws.join(".git").join(p)).is_err(),
            ".git/{p} was created"
        );
    }
    let hooks_after: Vec<_> = std::fs::read_dir(ws.join(".git/hooks"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(hooks_before, hooks_after, "hooks changed");
    assert!(ws.join(".git").is_dir() && !ws.join(".git-x").exists());
    assert!(!ws.join("sub/.git").exists() && !ws.join("nested/.git").exists());
    // objects/info may have been moved away (harmless), never swapped for a symlink.
    if let Ok(md) = std::fs::symlink_metadata(ws.join(".git/objects/info")) {
        assert!(md.is_dir(), ".git/objects/info replaced");
    }
    assert_eq!(host_git(env, &ws, &["fsck", "--no-progress"]).code, 0);
}

const IGNORES: &str = ".env\nnode_modules/\ncache/\n";

// Covers SR-13.
#[test]
fn ignored_paths_show_domain_state_not_host_content() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "ignored", &[(".gitignore", IGNORES), ("pkg/package.json", "{}\n")]);
    env.write(&ws.join(".env"), "SECRET=hunter2\n");
    env.write(&ws.join("node_modules/x.js"), "host-module\n");
    let ignored_before = host_git_ok(env, &ws, &["status", "--ignored", "--porcelain"]);

    let r = env.run_sh(
        &ws,
        "cat .env; cat node_modules/x.js; ls -a; ls node_modules; \
         mkdir -p node_modules && echo sandbox-y > node_modules/y.js && \
         mkdir -p pkg/node_modules && echo sandbox-z > pkg/node_modules/z.js && \
         mkdir cache && echo sandbox-c > cache/c.txt && echo SECRET=sandbox > .env && \
         echo 'x' >> node_modules/x.js; git status --porcelain; echo done",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(!r.stdout.contains("hunter2"), "host .env readable inside: {r:?}");
    assert!(
        !r.stdout.contains("host-module"),
        "host node_modules readable inside: {r:?}"
    );
    assert_eq!(r.stdout.lines().filter(|l| l.starts_with("?? ")).count(), 0, "{r:?}");

    // Nothing reached the host.
    assert_eq!(std::fs::read_to_string(ws.join(".env")).unwrap(), "SECRET=hunter2\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("node_modules/x.js")).unwrap(),
        "host-module\n"
    );
    assert!(!ws.join("node_modules/y.js").exists());
    assert!(!ws.join("pkg/node_modules").exists());
    assert!(!ws.join("cache").exists());
    env.wait_unpublished("default", &ws, Duration::from_secs(15));

    // The next generation sees what the sandbox wrote.
    let r = env.run_sh(
        &ws,
        "cat node_modules/y.js pkg/node_modules/z.js cache/c.txt .env node_modules/x.js",
    );
    assert_eq!(r.code, 0, "{r:?}");
    for s in ["sandbox-y", "sandbox-z", "sandbox-c", "SECRET=sandbox"] {
        assert!(r.stdout.contains(s), "{s} lost across generations: {r:?}");
    }
    assert!(!r.stdout.contains("hunter2") && !r.stdout.contains("host-module"));
    env.wait_unpublished("default", &ws, Duration::from_secs(15));

    // No paths created by Lazaret on the host.
    assert_eq!(
        host_git_ok(env, &ws, &["status", "--ignored", "--porcelain"]),
        ignored_before
    );
    assert_eq!(host_git_ok(env, &ws, &["status", "--porcelain"]), "");
}

// Covers FR-9.
#[test]
fn isolate_ignored_false_shows_host_ignored_files() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "noisolate", &[(".gitignore", IGNORES)]);
    env.write(&ws.join(".env"), "SECRET=visible\n");
    env.write(&ws.join("node_modules/x.js"), "host-module\n");
    let cfg = ws.with_extension("cfg");
    env.write(
        &cfg.join("lazaret/config.toml"),
        "[profiles.default]\nisolate_ignored = false\n",
    );
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "cat .env node_modules/x.js && echo w > node_modules/w.js && mkdir cache && echo c > cache/c",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("SECRET=visible") && r.stdout.contains("host-module"),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("node_modules/w.js")).unwrap(), "w\n");
    assert!(ws.join("cache/c").exists());
    assert!(harness::owner(&ws.join("cache/c")) == env.uid);
}

#[test]
fn tracked_files_matching_ignore_rules_stay_visible() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "tracked", &[(".gitignore", "build/\n*.log\n")]);
    env.write(&ws.join("build/keep.txt"), "tracked\n");
    env.write(&ws.join("build/out.bin"), "host-build\n");
    env.write(&ws.join("x.log"), "tracked-log\n");
    host_git_ok(env, &ws, &["add", "-f", "build/keep.txt", "x.log"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "force-added"]);
    let r = env.run_sh(
        &ws,
        "cat build/keep.txt x.log; cat build/out.bin; git status --porcelain",
    );
    assert!(
        r.stdout.contains("tracked\n") && r.stdout.contains("tracked-log"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("host-build"), "{r:?}");
    assert!(!r.stdout.contains(" D "), "tracked files appear deleted: {r:?}");
}

/// The view lets the kernel cache entries, attributes, pages and listings
/// for an hour under watched host directories; host-side changes must still
/// show up inside at once (the watcher invalidates what they touched). With
/// the long caches and no invalidation this fails.
#[test]
fn host_edits_show_up_inside_despite_the_views_caches() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "hostedit",
        &[
            ("a.txt", "one\n"),
            ("b.txt", "bee\n"),
            ("c.txt", "sea\n"),
            ("sub/s.txt", "old\n"),
        ],
    );
    let mut hold = env.lz(&ws, &["run", "--", "sleep", "300"]).spawn();
    // Fill the caches: entries, attributes, pages, listings.
    let r = env.run_sh(&ws, "cat a.txt sub/s.txt; ls; ls sub; stat -c '%n %s' a.txt");
    assert!(r.stdout.contains("one") && r.stdout.contains("b.txt"), "{r:?}");

    // Host-side changes of each kind.
    std::fs::write(ws.join("a.txt"), "two, longer\n").unwrap(); // same inode, new size
    std::fs::remove_file(ws.join("b.txt")).unwrap();
    std::fs::rename(ws.join("c.txt"), ws.join("d.txt")).unwrap();
    env.write(&ws.join("sub/new.txt"), "fresh\n");
    env.write(&ws.join("newdir/n.txt"), "nested\n");
    env.write(&ws.join(".save.tmp"), "saved\n"); // an editor's save: rename over
    std::fs::rename(ws.join(".save.tmp"), ws.join("sub/s.txt")).unwrap();

    let mut last = None;
    let seen = eventually(Duration::from_secs(5), || {
        let r = env.run_sh(
            &ws,
            "cat a.txt sub/s.txt sub/new.txt newdir/n.txt; stat -c 'size=%s' a.txt; ls",
        );
        let o = &r.stdout;
        let ok = o.contains("two, longer")
            && o.contains("size=12")
            && o.contains("saved")
            && o.contains("fresh")
            && o.contains("nested")
            && o.contains("d.txt")
            && !o.contains("b.txt")
            && !o.contains("c.txt");
        last = Some(r);
        ok
    });
    assert!(seen, "host changes not visible inside: {last:?}");

    // Writing a set-user-ID file clears the bit (the view does what the
    // kernel would for an unprivileged writer).
    let r = env.run_sh(
        &ws,
        "echo x > s.sh && chmod 4755 s.sh && echo y >> s.sh && stat -c %a s.sh",
    );
    assert_eq!(r.stdout.trim(), "755", "{r:?}");

    // The sandbox's own writes still reach the host at once.
    let r = env.run_sh(&ws, "echo from-inside >> d.txt && cat d.txt");
    assert!(r.stdout.contains("sea\nfrom-inside"), "{r:?}");
    assert_eq!(std::fs::read_to_string(ws.join("d.txt")).unwrap(), "sea\nfrom-inside\n");

    let _ = env.lz(&ws, &["stop"]).run();
    let _ = hold.wait();
}
