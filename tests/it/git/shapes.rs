//! Workspace view v2, Git half: the repository-shape rule, Git
//! directories the sandbox makes kept Domain-side, host worktrees added
//! during a session, and hook locations from host Git's configuration.
//! Host Git runs as the test user with no system or global config (so
//! `safe.bareRepository` is unset and a planted bare repository would be
//! honoured); every attack's proof is a marker file its command would make.

use std::path::Path;
use std::time::Duration;

use crate::fixtures::{git_repo, host_cmd, host_git, host_git_ok};
use crate::harness::{eventually, sh_quote, Env, Run};
use crate::require_env;

/// Host `git ARGS` in `dir` on a terminal (`script`), where Git starts its
/// pager.
fn git_tty(env: &Env, dir: &Path, args: &str) -> Run {
    host_cmd(env, dir, &["script", "-qec", &format!("git {args}"), "/dev/null"])
}

/// Host Git would take `d` as a Git directory (setup.c's is_git_directory,
/// by name), or `d/.git` exists.
fn repository_shape(d: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(d.join(n)).is_ok();
    has(".git") || (has("HEAD") && (has("commondir") || (has("objects") && has("refs"))))
}

/// A config whose every command-running key touches `m`.
fn poison(m: &str) -> String {
    format!(
        "[core]\n\tpager = \"touch {m}; cat\"\n\tfsmonitor = \"touch {m}\"\n\tsshCommand = \"touch {m}\"\n\
         \thooksPath = /nonexistent\n[alias]\n\tlog = \"!touch {m}\"\n"
    )
}

/// A bare repository with one commit on `main`, made on the host.
fn host_bare(env: &Env, src: &Path, dir: &Path) {
    let r = host_cmd(
        env,
        Path::new("/"),
        &[
            "git",
            "clone",
            "-q",
            "--bare",
            &src.to_string_lossy(),
            &dir.to_string_lossy(),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn sandbox_made_repositories_work_inside_and_stay_domain_side() {
    let (env, _g) = require_env!(shared);
    let lib = git_repo(env, "v2lib", &[("lib.txt", "lib\n")]);
    let ws = git_repo(env, "v2nested", &[("a.txt", "one\n")]);
    host_bare(env, &lib, &ws.join("vendor/lib.git"));
    let lib_head = host_git_ok(env, &lib, &["rev-parse", "HEAD"]);
    // An uninitialised submodule `lib` pointing at the vendored bare repository.
    env.write(
        &ws.join(".gitmodules"),
        "[submodule \"lib\"]\n\tpath = lib\n\turl = ./vendor/lib.git\n",
    );
    host_git_ok(
        env,
        &ws,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},lib", lib_head.trim()),
        ],
    );
    host_git_ok(env, &ws, &["add", ".gitmodules"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "submodule"]);
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let script = format!(
        "set -ex
        git config --global protocol.file.allow always
        git config --global user.name In && git config --global user.email in@example.test
        git init -q -b main sub
        echo s > sub/s.txt
        git -C sub add s.txt
        git -C sub commit -qm sub-commit
        git -C sub checkout -q -b topic
        git -C sub commit -q --allow-empty -m topic
        git -C sub checkout -q main
        git -C sub rebase -q topic
        git clone -q /workspace/vendor/lib.git dep
        git -C dep log --oneline -1
        git init -q --bare bare.git
        git push -q bare.git HEAD:refs/heads/main
        git -C bare.git log --oneline -1 main
        printf {p} >> sub/.git/config
        git submodule update --init lib
        git -C lib log --oneline -1
        git worktree add -q /root/wt -b wt-branch
        git -C /root/wt commit -q --allow-empty -m in-wt
        git status --porcelain",
        p = sh_quote(&poison(&m))
    );
    let r = env.run_sh(&ws, &script);
    assert_eq!(r.code, 0, "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(15));

    // The host sees the working files, and no repository of the sandbox's making.
    assert!(ws.join("sub/s.txt").is_file() && ws.join("dep/lib.txt").is_file() && ws.join("lib/lib.txt").is_file());
    for d in ["sub", "dep", "lib", "bare.git", ".git/modules/lib", ".git/worktrees/wt"] {
        assert!(!repository_shape(&ws.join(d)), "{d} is a repository on the host");
    }
    // At most the empty `modules/` Git itself made; the submodule's Git directory is Domain-side.
    if let Ok(rd) = std::fs::read_dir(ws.join(".git/modules")) {
        assert_eq!(rd.count(), 0, "a submodule Git directory reached the host");
    }
    for d in ["sub", "dep", "bare.git"] {
        let top = host_git_ok(env, &ws.join(d), &["rev-parse", "--absolute-git-dir"]);
        assert_eq!(
            Path::new(top.trim()),
            ws.join(".git"),
            "host git in {d} found another repository"
        );
    }
    host_git_ok(env, &ws.join("sub"), &["status"]);
    let tty = git_tty(env, &ws.join("sub"), "log -1");
    assert!(!marker.exists(), "host git ran the sandbox's config: {tty:?}");
    assert!(host_git_ok(env, &ws, &["branch", "--list"]).contains("wt-branch"));
    assert!(host_git_ok(env, &ws, &["log", "--all", "--format=%s"]).contains("in-wt"));
    assert_eq!(host_git(env, &ws, &["fsck", "--no-progress"]).code, 0);

    // The next generation still has them.
    let r = env.run_sh(
        &ws,
        "set -ex
        git -C sub log --format=%s | grep -q sub-commit
        git -C sub status --porcelain
        git -C dep status --porcelain
        git -C dep log --oneline -1
        git -C bare.git log --oneline -1 main
        git submodule status lib | grep -v '^-'
        git -C lib status --porcelain
        git worktree list | grep -q /root/wt",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!marker.exists());
}

#[test]
fn sandbox_cannot_leave_a_repository_the_host_obeys() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "v2shape", &[("a.txt", "one\n")]);
    // A vendored bare repository that exists on the host at start.
    host_bare(env, &ws, &ws.join("vendor/fix.git"));
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let fix_cfg = std::fs::read(ws.join("vendor/fix.git/config")).unwrap();
    let head = "ref: refs/heads/main";
    let attempts: Vec<String> = vec![
        // bare shapes by hand, in every order, and by rename, link and symlink
        format!("mkdir -p s1/objects s1/refs && cp evil.cfg s1/config && echo '{head}' > s1/HEAD"),
        format!("mkdir s2 && cp evil.cfg s2/config && echo '{head}' > s2/HEAD && mkdir s2/refs s2/objects"),
        format!("mkdir s3 && echo '{head}' > s3/HEAD && mkdir s3/objects && cp evil.cfg s3/config && mkdir s3/refs"),
        format!("mkdir -p s4/objects s4/refs && cp evil.cfg s4/config && echo '{head}' > h4 && mv h4 s4/HEAD"),
        format!("mkdir -p s5/objects s5/refs && cp evil.cfg s5/config && echo '{head}' > h5 && ln h5 s5/HEAD"),
        format!("mkdir -p s6/refs && cp evil.cfg s6/config && echo '{head}' > s6/HEAD && ln -s /workspace/.git/objects s6/objects"),
        format!("mkdir -p s7/refs && cp evil.cfg s7/config && echo '{head}' > s7/HEAD && mkdir o7 && mv o7 s7/objects"),
        format!("mkdir s8 && cp evil.cfg s8/config && echo '{head}' > s8/HEAD && echo /workspace/.git > s8/commondir"),
        format!("mkdir -p t9/objects t9/refs && cp evil.cfg t9/config && echo '{head}' > t9/HEAD; mv t9 s9"),
        format!("mkdir -p s10/OBJECTS s10/refs && cp evil.cfg s10/config && echo '{head}' > s10/head"),
        "git init -q --bare s11 && cat evil.cfg >> s11/config".to_string(),
        "git init -q s12 && cat evil.cfg >> s12/.git/config".to_string(),
        "git clone -q --bare /workspace s13 && cat evil.cfg >> s13/config".to_string(),
        "git clone -q --mirror /workspace/vendor/fix.git s14 && cat evil.cfg >> s14/config".to_string(),
        // .git entries
        "mkdir s15 && echo 'gitdir: /workspace/s1' > s15/.git".to_string(),
        "mkdir -p s16/.GIT && cp evil.cfg s16/.GIT/config".to_string(),
        "mkdir s17 && ln -s /workspace/vendor/fix.git s17/.git".to_string(),
        "mkdir -p s18 g18 && echo 'gitdir: /workspace/s1' > g18/x && mv g18/x s18/.git".to_string(),
        "cp -a s11 s19 2>/dev/null; mkdir -p s19".to_string(),
        // the pre-existing bare repository
        "cat evil.cfg >> vendor/fix.git/config".to_string(),
        "cp evil.cfg vendor/fix.git/config".to_string(),
        "rm -f vendor/fix.git/config".to_string(),
        "printf '#!/bin/sh\\ntouch M\\n' > vendor/fix.git/hooks/post-update".to_string(),
        "mv vendor/fix.git/hooks vendor/fix.git/hooks-x && mkdir vendor/fix.git/hooks".to_string(),
        "echo /workspace/s1/objects > vendor/fix.git/objects/info/alternates".to_string(),
        "echo /workspace/s1 > vendor/fix.git/commondir".to_string(),
        "cp evil.cfg vendor/fix.git/config.worktree".to_string(),
        "mv vendor/fix.git/objects/info vendor/fix.git/objects/i2 && mkdir vendor/fix.git/objects/info".to_string(),
        "cd vendor/fix.git && git config core.pager 'touch M'".to_string(),
        "mv vendor/fix.git vendor/f2.git && mkdir vendor/fix.git && cp evil.cfg vendor/fix.git/config && cp -a vendor/f2.git/HEAD vendor/f2.git/refs vendor/f2.git/objects vendor/fix.git/".to_string(),
    ];
    let mut script = format!("printf {} > evil.cfg\n", sh_quote(&poison(&m)));
    for (i, a) in attempts.iter().enumerate() {
        let a = a.replace("touch M", &format!("touch {m}"));
        script.push_str(&format!("( {a} ) >/dev/null 2>&1 && echo \"attempt {i} succeeded\"\n"));
    }
    script.push_str("exit 0\n");
    let r = env.run_sh(&ws, &script);
    assert_eq!(r.code, 0, "{r:?}");
    eprintln!("shape attempts that succeeded inside: {}", r.stdout);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));

    let dirs: Vec<String> = (1..=19).map(|i| format!("s{i}")).collect();
    for d in &dirs {
        let p = ws.join(d);
        if !p.exists() {
            continue;
        }
        assert!(!repository_shape(&p), "{d} is a repository on the host");
        // What a user would run there.
        let _ = host_git(env, &p, &["status"]);
        let _ = git_tty(env, &p, "log -1");
        let _ = host_git(env, &p, &["fetch", "-q", &ws.to_string_lossy()]);
        assert!(!marker.exists(), "host git in {d} ran a sandbox-chosen command");
    }
    let fix = ws.join("vendor/fix.git");
    assert_eq!(
        std::fs::read(fix.join("config")).unwrap(),
        fix_cfg,
        "vendored config changed"
    );
    for p in [
        "hooks/post-update",
        "hooks-x",
        "objects/info/alternates",
        "commondir",
        "config.worktree",
    ] {
        assert!(
            std::fs::symlink_metadata(fix.join(p)).is_err(),
            "vendor/fix.git/{p} exists"
        );
    }
    let _ = git_tty(env, &fix, "log -1");
    host_git_ok(
        env,
        &fix,
        &["fetch", "-q", &ws.to_string_lossy(), "main:refs/heads/fetched"],
    );
    host_git_ok(env, &ws, &["status"]);
    let _ = git_tty(env, &ws, "log -1");
    host_git_ok(env, &ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    assert!(!marker.exists(), "host git ran a sandbox-chosen command");
}

#[test]
fn worktrees_added_on_the_host_during_a_session_are_protected() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "v2late", &[("a.txt", "one\n")]);
    let late = ws.with_extension("late");
    let _ = std::fs::remove_dir_all(&late);
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let go = ws.join("go");
    let script = format!(
        "for i in $(seq 600); do [ -e /workspace/go ] && break; sleep 0.1; done
        ls .git/worktrees
        W=.git/worktrees/late
        printf {p} > evil.cfg
        ( cat evil.cfg > $W/config.worktree ) 2>/dev/null && echo wrote-config-worktree
        ( echo /workspace/evil > $W/commondir ) 2>/dev/null && echo wrote-commondir
        ( echo /workspace/evil/.git > $W/gitdir ) 2>/dev/null && echo wrote-gitdir
        ( mv $W $W-x ) 2>/dev/null && echo moved
        ( mkdir -p $W/hooks && printf '#!/bin/sh\\ntouch {m}\\n' > $W/hooks/post-commit ) 2>/dev/null
        git config extensions.worktreeConfig true 2>/dev/null
        git worktree list
        exit 0",
        p = sh_quote(&poison(&m)),
    );
    let child = env.lz_sh(&ws, &script).spawn();
    // Once the Domain runs, the user adds a worktree on the host.
    let sock = env.runtime_root().join(env.domain_id("default", &ws)).join("hc.sock");
    assert!(
        eventually(Duration::from_secs(120), || sock.exists()),
        "Domain did not start"
    );
    host_git_ok(
        env,
        &ws,
        &["worktree", "add", "-q", &late.to_string_lossy(), "-b", "late"],
    );
    env.write(&go, "");
    let out = child.wait_with_output().unwrap();
    let r = Run::from(out);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("late"),
        "the new worktree was not visible inside: {r:?}"
    );
    for w in ["wrote-config-worktree", "wrote-commondir", "wrote-gitdir", "moved"] {
        assert!(!r.stdout.contains(w), "{w}: {r:?}");
    }
    host_git_ok(env, &late, &["status"]);
    let _ = git_tty(env, &late, "log -1");
    host_git_ok(env, &late, &["commit", "-q", "--allow-empty", "-m", "host-in-late"]);
    assert!(
        !marker.exists(),
        "host git in the late worktree ran a sandbox-chosen command"
    );
    assert!(!ws.join(".git/worktrees/late/config.worktree").exists());
    assert!(!ws.join(".git/worktrees/late/hooks").exists());
    let _ = std::fs::remove_dir_all(&late);
}

#[test]
fn hooks_path_inside_the_workspace_is_read_only() {
    let (env, _g) = require_env!(shared);
    let hooks = [(".githooks/pre-commit", "#!/bin/sh\nexit 0\n"), ("team/hooks.cfg", "")];
    let ws = git_repo(env, "v2hooks", &hooks);
    host_cmd(env, &ws, &["chmod", "+x", ".githooks/pre-commit"]);
    host_git_ok(env, &ws, &["config", "core.hooksPath", ".githooks"]);
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let hook = format!("#!/bin/sh\ntouch {m}\n");
    let attempts = [
        format!("printf {} > .githooks/pre-commit", sh_quote(&hook)),
        format!("printf {} >> .githooks/pre-commit", sh_quote(&format!("touch {m}\n"))),
        format!(
            "printf {} > .githooks/post-commit && chmod +x .githooks/post-commit",
            sh_quote(&hook)
        ),
        "rm -f .githooks/pre-commit".to_string(),
        "chmod 777 .githooks/pre-commit".to_string(),
        format!(
            "mv .githooks .gh2 && mkdir .githooks && printf {} > .githooks/pre-commit && chmod +x .githooks/pre-commit",
            sh_quote(&hook)
        ),
        format!(
            "printf {} > x && chmod +x x && mv x .githooks/pre-commit",
            sh_quote(&hook)
        ),
        "ln -sf /workspace/x .githooks/post-commit".to_string(),
    ];
    let mut script = String::new();
    for (i, a) in attempts.iter().enumerate() {
        script.push_str(&format!("( {a} ) >/dev/null 2>&1 && echo \"attempt {i} succeeded\"\n"));
    }
    script.push_str("git commit -q --allow-empty -m inside && echo committed\nexit 0\n");
    let r = env.run_sh(&ws, &script);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("committed"), "{r:?}");
    // gVisor reports a refused chmod (attempt 4) as done; the host mode is what counts.
    let succeeded: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("succeeded") && !l.contains("attempt 4 "))
        .collect();
    assert!(succeeded.is_empty(), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    host_git_ok(env, &ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    assert!(!marker.exists(), "host commit ran a hook the sandbox wrote");
    assert_eq!(
        std::fs::read_to_string(ws.join(".githooks/pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join(".githooks/pre-commit"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "hook mode changed");
    assert!(!ws.join(".githooks/post-commit").exists() && !ws.join(".gh2").exists());
}

#[test]
fn host_submodule_git_dirs_are_protected_like_dot_git() {
    let (env, _g) = require_env!(shared);
    let lib = git_repo(env, "v2sublib", &[("lib.txt", "lib\n")]);
    let ws = git_repo(env, "v2sub", &[("a.txt", "one\n")]);
    let r = host_cmd(
        env,
        &ws,
        &[
            "git",
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &lib.to_string_lossy(),
            "lib",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    host_git_ok(env, &ws, &["commit", "-q", "-m", "add lib"]);
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let cfg_before = std::fs::read(ws.join(".git/modules/lib/config")).unwrap();
    let hook = format!("#!/bin/sh\ntouch {m}\n");
    let attempts = [
        "cat evil.cfg >> .git/modules/lib/config".to_string(),
        "cp evil.cfg .git/modules/lib/config".to_string(),
        format!("printf {} > .git/modules/lib/hooks/post-checkout", sh_quote(&hook)),
        "echo /workspace/s1 > .git/modules/lib/commondir".to_string(),
        "echo /workspace/x > .git/modules/lib/objects/info/alternates".to_string(),
        "mkdir -p s1/objects s1/refs && cp evil.cfg s1/config && echo 'ref: refs/heads/main' > s1/HEAD".to_string(),
        "echo 'gitdir: /workspace/s1' > lib/.git".to_string(),
        "rm -f lib/.git".to_string(),
        "mv lib/.git lib/.git-x".to_string(),
        "mv .git/modules/lib .git/modules/lib-x".to_string(),
        "cd lib && git config core.pager 'touch M'".to_string(),
    ];
    let mut script = format!("printf {} > evil.cfg\n", sh_quote(&poison(&m)));
    for (i, a) in attempts.iter().enumerate() {
        let a = a.replace("touch M", &format!("touch {m}"));
        script.push_str(&format!("( {a} ) >/dev/null 2>&1 && echo \"attempt {i} succeeded\"\n"));
    }
    script.push_str("git -C lib status --porcelain && echo lib-ok\nexit 0\n");
    let r = env.run_sh(&ws, &script);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("lib-ok"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    assert_eq!(std::fs::read(ws.join(".git/modules/lib/config")).unwrap(), cfg_before);
    let lib_wt = ws.join("lib");
    host_git_ok(env, &lib_wt, &["status"]);
    let _ = git_tty(env, &lib_wt, "log -1");
    host_git_ok(env, &lib_wt, &["fetch", "-q", &lib.to_string_lossy()]);
    host_git_ok(
        env,
        &lib_wt,
        &[
            "-c",
            "user.name=Host",
            "-c",
            "user.email=host@example.test",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "host-in-lib",
        ],
    );
    let r = host_cmd(
        env,
        &ws,
        &["git", "-c", "protocol.file.allow=always", "submodule", "update"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        !marker.exists(),
        "host git in the submodule ran a sandbox-chosen command"
    );
}
