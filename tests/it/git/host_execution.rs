//! Nothing the sandbox writes runs on the host (issue 26): Git's execution
//! surface computed from every scope and include (hooks through symlinks,
//! hook directories, includes that do not exist or do not apply yet,
//! programs the config names, hook managers), kept current while the
//! Domain runs, and host-tool files (`.vscode/`, `.envrc`, `.claude/…`)
//! served as the sandbox's own copies. Host Git runs as the test user with
//! no system or global config; every attack's proof is a marker file the
//! sandbox's code would make, and the developer's own hooks leave their own
//! marker to show they still run.

use std::path::Path;
use std::time::Duration;

use crate::fixtures::{git_repo, host_cmd, host_git_ok};
use crate::harness::{eventually, sh_quote, Env, Run};
use crate::require_env;

/// `attempts`, each run in a subshell that prints `attempt N succeeded`
/// when it did, then `tail`.
fn attempts_script(attempts: &[String], tail: &str) -> String {
    let mut script = String::new();
    for (i, a) in attempts.iter().enumerate() {
        script.push_str(&format!("( {a} ) >/dev/null 2>&1 && echo \"attempt {i} succeeded\"\n"));
    }
    script.push_str(tail);
    script.push_str("\nexit 0\n");
    script
}

fn no_attempt_succeeded(r: &Run) {
    let ok: Vec<&str> = r.stdout.lines().filter(|l| l.contains("succeeded")).collect();
    assert!(
        ok.is_empty(),
        "the sandbox changed Git's execution surface: {ok:?} {r:?}"
    );
}

/// A hook script that touches `marker` on the host (inside, the absolute
/// host path does not exist, so it does nothing and succeeds).
fn own_hook(marker: &Path) -> String {
    format!("#!/bin/sh\ntouch {} 2>/dev/null\nexit 0\n", marker.display())
}

fn evil(marker: &Path) -> String {
    format!("#!/bin/sh\ntouch {}\nexit 0\n", marker.display())
}

fn chmod_x(env: &Env, ws: &Path, p: &str) {
    let r = host_cmd(env, ws, &["chmod", "+x", p]);
    assert_eq!(r.code, 0, "{r:?}");
}

fn commit_on_host(env: &Env, ws: &Path) {
    host_git_ok(env, ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
}

#[test]
fn symlinked_hooks_and_hook_dirs_run_only_the_developers_code() {
    let (env, _g) = require_env!(shared);
    // `.git/hooks/pre-commit -> ../../scripts/pre-commit`
    let a = git_repo(env, "hx-hooklink", &[]);
    let (own_a, evil_a) = (a.with_extension("own"), a.with_extension("marker"));
    env.write(&a.join("scripts/pre-commit"), &own_hook(&own_a));
    chmod_x(env, &a, "scripts/pre-commit");
    host_cmd(
        env,
        &a,
        &["ln", "-s", "../../scripts/pre-commit", ".git/hooks/pre-commit"],
    );
    host_git_ok(env, &a, &["add", "-A"]);
    host_git_ok(env, &a, &["commit", "-q", "-m", "hooks"]);
    let _ = std::fs::remove_file(&own_a);
    let ev = evil(&evil_a);
    let attempts = [
        format!("printf {} > scripts/pre-commit", sh_quote(&ev)),
        format!(
            "printf {} >> scripts/pre-commit",
            sh_quote(&format!("touch {}\n", evil_a.display()))
        ),
        format!(
            "rm -f scripts/pre-commit && printf {} > scripts/pre-commit",
            sh_quote(&ev)
        ),
        format!(
            "mv scripts s2 && mkdir scripts && printf {} > scripts/pre-commit && chmod +x scripts/pre-commit",
            sh_quote(&ev)
        ),
        format!("printf {} > x && chmod +x x && mv x scripts/pre-commit", sh_quote(&ev)),
    ];
    let r = env.run_sh(
        &a,
        &attempts_script(
            &attempts,
            "echo inside > in.txt && git add in.txt && git commit -qm inside && echo committed",
        ),
    );
    assert!(r.stdout.contains("committed"), "Git inside must still commit: {r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &a, Duration::from_secs(15));
    commit_on_host(env, &a);
    assert!(!evil_a.exists(), "host git commit ran the sandbox's hook");
    assert!(
        own_a.exists(),
        "the developer's symlinked hook must still run on the host"
    );

    // `.git/hooks -> ../githooks`
    let b = git_repo(env, "hx-hookdir", &[]);
    let (own_b, evil_b) = (b.with_extension("own"), b.with_extension("marker"));
    env.write(&b.join("githooks/pre-commit"), &own_hook(&own_b));
    chmod_x(env, &b, "githooks/pre-commit");
    std::fs::remove_dir_all(b.join(".git/hooks")).unwrap();
    host_cmd(env, &b, &["ln", "-s", "../githooks", ".git/hooks"]);
    let ev = evil(&evil_b);
    let attempts = [
        format!("printf {} > githooks/pre-commit", sh_quote(&ev)),
        format!(
            "printf {} > githooks/post-commit && chmod +x githooks/post-commit",
            sh_quote(&ev)
        ),
        format!(
            "printf {} > githooks/commit-msg && chmod +x githooks/commit-msg",
            sh_quote(&ev)
        ),
        format!(
            "mv githooks gh2 && mkdir githooks && printf {} > githooks/pre-commit",
            sh_quote(&ev)
        ),
        "rm -rf githooks".to_string(),
        "ln -s /workspace/x githooks/post-merge".to_string(),
    ];
    let r = env.run_sh(
        &b,
        &attempts_script(&attempts, "git commit -q --allow-empty -m inside && echo committed"),
    );
    assert!(r.stdout.contains("committed"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &b, Duration::from_secs(15));
    let _ = std::fs::remove_file(&own_b);
    commit_on_host(env, &b);
    assert!(!evil_b.exists(), "host git commit ran a hook the sandbox wrote");
    assert!(own_b.exists(), "the developer's hook directory must still run");
}

#[test]
fn husky_runs_the_developers_hooks_and_never_the_sandboxs() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hx-husky", &[]);
    let (own, marker) = (ws.with_extension("own"), ws.with_extension("marker"));
    // husky 9's layout: core.hooksPath = .husky/_, whose hooks run `.husky/NAME`.
    env.write(&ws.join(".husky/_/h"), "#!/bin/sh\nn=$(basename \"$0\")\ns=$(dirname \"$(dirname \"$0\")\")/$n\n[ -f \"$s\" ] || exit 0\nsh -e \"$s\" \"$@\"\n");
    for h in ["pre-commit", "commit-msg", "post-commit"] {
        env.write(
            &ws.join(format!(".husky/_/{h}")),
            "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
        );
        chmod_x(env, &ws, &format!(".husky/_/{h}"));
    }
    env.write(
        &ws.join(".husky/pre-commit"),
        &format!("touch {} 2>/dev/null || true\n", own.display()),
    );
    env.chown(&ws.join(".husky"));
    host_git_ok(env, &ws, &["config", "core.hooksPath", ".husky/_"]);
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "husky"]);
    let _ = std::fs::remove_file(&own);
    let t = format!("touch {}\n", marker.display());
    let attempts = [
        format!("printf {} > .husky/pre-commit", sh_quote(&t)),
        format!("printf {} > .husky/commit-msg", sh_quote(&t)),
        format!("printf {} > .husky/post-commit", sh_quote(&t)),
        format!("printf {} >> .husky/_/h", sh_quote(&t)),
        format!(
            "rm -rf .husky && mkdir -p .husky/_ && printf {} > .husky/pre-commit",
            sh_quote(&t)
        ),
        format!(
            "mv .husky .h2 && mkdir .husky && printf {} > .husky/pre-commit",
            sh_quote(&t)
        ),
    ];
    let r = env.run_sh(
        &ws,
        &attempts_script(&attempts, "git commit -q --allow-empty -m inside && echo committed"),
    );
    assert!(r.stdout.contains("committed"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    commit_on_host(env, &ws);
    assert!(!marker.exists(), "host commit ran a husky hook the sandbox wrote");
    assert!(own.exists(), "the developer's husky hook must still run");
    let d = env.lz(&ws, &["doctor"]).run();
    assert!(d.stdout.contains("husky"), "doctor names the hook manager: {d:?}");
}

/// A config whose every command-running key touches `m`.
fn poison(m: &Path) -> String {
    let m = m.display();
    format!(
        "[core]\n\tfsmonitor = \"touch {m}; false\"\n\tpager = \"touch {m}; cat\"\n[filter \"x\"]\n\tclean = \"touch {m}; cat\"\n\
         \tprocess = \"touch {m}\"\n[diff]\n\texternal = \"touch {m}\"\n[alias]\n\tst = \"!touch {m}\"\n"
    )
}

#[test]
fn includes_conditions_and_named_programs_cannot_be_planted() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "hx-include",
        &[("a.txt", "one\n"), ("tools/strip.sh", "#!/bin/sh\ncat\n")],
    );
    chmod_x(env, &ws, "tools/strip.sh");
    let marker = ws.with_extension("marker");
    // Targets that do not exist, a condition that does not hold at start,
    // one inside `.git`, and a host filter naming a workspace program.
    let cfg = "[include]\n\tpath = ../team.gitconfig\n[includeIf \"onbranch:evil\"]\n\tpath = ../conf/branch.cfg\n\
               [includeIf \"gitdir:/nowhere/\"]\n\tpath = extra.cfg\n[filter \"strip\"]\n\tclean = ./tools/strip.sh\n";
    let r = host_cmd(
        env,
        &ws,
        &["sh", "-c", &format!("printf {} >> .git/config", sh_quote(cfg))],
    );
    assert_eq!(r.code, 0, "{r:?}");
    env.write(&ws.join(".gitattributes"), "*.txt filter=strip\n");
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "attrs"]);
    let p = sh_quote(&poison(&marker));
    let attempts = [
        format!("printf {p} > team.gitconfig"),
        format!("mkdir -p conf && printf {p} > conf/branch.cfg"),
        format!("printf {p} > .git/extra.cfg"),
        format!(
            "printf '#!/bin/sh\\ntouch {}\\ncat\\n' > tools/strip.sh",
            marker.display()
        ),
        format!("printf {p} > t && mv t team.gitconfig"),
        "ln -s /workspace/a.txt team.gitconfig".to_string(),
        "mv tools tools2 && mkdir tools && cp tools2/strip.sh tools/".to_string(),
        "rm tools/strip.sh".to_string(),
    ];
    // The branch the condition names starts to apply: HEAD is the host's.
    let tail =
        "git checkout -q -b evil && echo changed >> a.txt && git add a.txt && git commit -qm inside && echo committed";
    let r = env.run_sh(&ws, &attempts_script(&attempts, tail));
    assert!(r.stdout.contains("committed"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    assert_eq!(host_git_ok(env, &ws, &["branch", "--show-current"]).trim(), "evil");
    // A racy file makes status run the clean filter.
    env.write(&ws.join("a.txt"), "two\n");
    host_git_ok(env, &ws, &["status"]);
    host_git_ok(env, &ws, &["diff"]);
    commit_on_host(env, &ws);
    let r = host_cmd(env, &ws, &["git", "st"]);
    assert_ne!(r.code, 0, "no alias was planted: {r:?}");
    assert!(!marker.exists(), "host git ran a command the sandbox planted");
    assert_eq!(
        std::fs::read_to_string(ws.join("tools/strip.sh")).unwrap(),
        "#!/bin/sh\ncat\n"
    );
    assert!(!ws.join("team.gitconfig").exists() && !ws.join("conf/branch.cfg").exists());
    assert!(!ws.join(".git/extra.cfg").exists());
}

#[test]
fn surface_added_on_the_host_during_a_session_is_protected() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hx-late", &[("scripts/late.sh", "")]);
    let (own, marker) = (ws.with_extension("own"), ws.with_extension("marker"));
    let go = ws.join("go");
    let _ = std::fs::remove_file(&go);
    let p = sh_quote(&poison(&marker));
    let ev = sh_quote(&evil(&marker));
    let attempts = [
        format!("printf {p} > late.gitconfig"),
        format!("printf {ev} > scripts/late.sh"),
        format!("printf {ev} > githooks2/post-commit && chmod +x githooks2/post-commit"),
        format!("printf {ev} > githooks2/pre-commit"),
        format!("rm -rf githooks2 && mkdir githooks2 && printf {ev} > githooks2/pre-commit"),
        format!("mkdir -p sub && printf {p} > sub/nested.cfg"),
    ];
    let script = format!(
        "for i in $(seq 600); do [ -e /workspace/go ] && break; sleep 0.1; done\nsleep 1\n{}",
        attempts_script(&attempts, "git commit -q --allow-empty -m inside && echo committed")
    );
    let child = env.lz_sh(&ws, &script).spawn();
    let sock = env.runtime_root().join(env.domain_id("default", &ws)).join("hc.sock");
    assert!(
        eventually(Duration::from_secs(120), || sock.exists()),
        "Domain did not start"
    );
    // While the Domain runs, the developer adds an include, replaces the
    // hooks directory by a symlink, and adds a hook that is a symlink.
    host_git_ok(env, &ws, &["config", "include.path", "../late.gitconfig"]);
    host_git_ok(env, &ws, &["config", "--add", "include.path", "../sub/nested.cfg"]);
    env.write(&ws.join("scripts/late.sh"), &own_hook(&own));
    chmod_x(env, &ws, "scripts/late.sh");
    std::fs::create_dir_all(ws.join("githooks2")).unwrap();
    env.chown(&ws.join("githooks2"));
    host_cmd(env, &ws, &["ln", "-s", "../scripts/late.sh", "githooks2/pre-commit"]);
    std::fs::remove_dir_all(ws.join(".git/hooks")).unwrap();
    host_cmd(env, &ws, &["ln", "-s", "../githooks2", ".git/hooks"]);
    env.write(&go, "");
    let out = child.wait_with_output().unwrap();
    let r = Run::from(out);
    assert!(r.stdout.contains("committed"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    let _ = std::fs::remove_file(&own);
    host_git_ok(env, &ws, &["status"]);
    commit_on_host(env, &ws);
    assert!(
        !marker.exists(),
        "host git ran what the sandbox wrote after the surface grew"
    );
    assert!(own.exists(), "the developer's late hook must run");
}

#[test]
fn auto_approved_git_status_runs_nothing_from_any_include() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hx-esc", &[("a.txt", "one\n")]);
    let cfg = env.write_config(
        &env.dir("hx-esc-cfg"),
        "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"git\", \"status\"]\nallow_trailing_args = false\n",
    );
    let marker = ws.with_extension("marker");
    // The developer's own include (exists), and one that does not exist yet.
    env.write(&ws.with_extension("team"), &poison(&marker));
    let inc = format!(
        "[include]\n\tpath = {}\n\tpath = ../planted.cfg\n",
        ws.with_extension("team").display()
    );
    host_cmd(
        env,
        &ws,
        &["sh", "-c", &format!("printf {} >> .git/config", sh_quote(&inc))],
    );
    env.write(&ws.join(".gitattributes"), "* filter=x diff=x\n");
    let p = sh_quote(&poison(&marker));
    let script = format!(
        "( printf {p} > planted.cfg ) 2>/dev/null && echo planted\n\
         echo racy >> a.txt\n\
         lazaret-escalate -- git status; echo rc=$?"
    );
    let r = env.run_sh_with_config(&ws, &cfg, &script);
    assert!(!r.stdout.contains("planted\n"), "{r:?}");
    assert!(r.stdout.contains("rc=0"), "the hardened status still works: {r:?}");
    assert!(
        !marker.exists(),
        "auto-approved host git ran a filter, fsmonitor or pager: {r:?}"
    );
}

/// The host-tool files of issue 26, each with the developer's content.
const HOST_TOOL: &[&str] = &[
    ".vscode/tasks.json",
    ".vscode/settings.json",
    ".idea/workspace.xml",
    ".envrc",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands/deploy.md",
    ".claude/agents/helper.md",
    ".claude/hooks/check.sh",
    ".mcp.json",
    ".devcontainer/devcontainer.json",
    ".gitmodules",
    ".pre-commit-config.yaml",
    "lefthook.yml",
    "tools/run.json",
];

#[test]
fn host_tool_files_are_the_sandboxs_own_copies() {
    let (env, _g) = require_env!(shared);
    let files: Vec<(String, String)> = HOST_TOOL
        .iter()
        .map(|p| {
            let c = if *p == ".envrc" {
                "export DEV=1\n".to_string()
            } else {
                format!("developer's {p}\n")
            };
            (p.to_string(), c)
        })
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let ws = git_repo(env, "hx-tools", &refs);
    let cfg = env.write_config(
        &env.dir("hx-tools-cfg"),
        "[profiles.default]\nhost_config = [\"tools/run.json\"]\n",
    );
    let marker = ws.with_extension("marker");
    let m = marker.display().to_string();
    let mut script = String::from("set -e\n");
    for p in HOST_TOOL {
        let content = if *p == ".envrc" {
            format!("touch {m}\n")
        } else {
            format!("sandbox's {p}\n")
        };
        script.push_str(&format!(
            "printf {c} > {p}\n[ \"$(cat {p})\" = {c2} ] && echo \"own {raw}\"\n",
            c = sh_quote(&content),
            c2 = sh_quote(content.trim_end()),
            p = sh_quote(p),
            raw = p
        ));
    }
    // A copy the host does not have, and a Claude Code permission recorded inside.
    script.push_str("mkdir -p .claude/commands && echo new > .claude/commands/new.md\n");
    script.push_str("git status --porcelain\n");
    let r = env.run_sh_with_config(&ws, &cfg, &script);
    assert_eq!(r.code, 0, "{r:?}");
    for p in HOST_TOOL {
        assert!(r.stdout.contains(&format!("own {p}")), "{p} did not read back: {r:?}");
    }
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    for (p, c) in &files {
        assert_eq!(&std::fs::read_to_string(ws.join(p)).unwrap(), c, "host {p} changed");
    }
    assert!(!ws.join(".claude/commands/new.md").exists());
    // direnv's semantics, simulated: the shell sources `.envrc` only if it is unchanged.
    let r = host_cmd(
        env,
        &ws,
        &[
            "sh",
            "-c",
            "[ \"$(cat .envrc)\" = \"export DEV=1\" ] && . ./.envrc; true",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!marker.exists(), "the host ran the sandbox's .envrc");
    let i = env.lz(&ws, &["state", "inspect"]).config_home(&cfg).run();
    assert_eq!(i.code, 0, "{i:?}");
    for p in HOST_TOOL {
        assert!(i.stdout.contains(p), "state inspect does not list {p}: {i:?}");
    }
    assert!(i.stdout.contains(".claude/commands/new.md"), "{i:?}");
    let d = env.lz(&ws, &["state", "diff", ".envrc"]).config_home(&cfg).run();
    assert_eq!(d.code, 0, "{d:?}");
    assert!(
        d.stdout.contains("-export DEV=1") && d.stdout.contains(&format!("+touch {m}")),
        "{d:?}"
    );
    // A later generation keeps the sandbox's copy.
    let r = env.run_sh_with_config(&ws, &cfg, "cat .vscode/tasks.json");
    assert!(r.stdout.contains("sandbox's .vscode/tasks.json"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    let r = env.lz(&ws, &["rm", "--yes"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    for (p, c) in &files {
        assert_eq!(&std::fs::read_to_string(ws.join(p)).unwrap(), c, "host {p} after rm");
    }
}

#[test]
fn host_config_writable_opts_a_path_out() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "hx-optout",
        &[
            (".vscode/settings.json", "dev\n"),
            (".envrc", "dev\n"),
            (".gitignore", ".claude/settings.local.json\n"),
            (".claude/settings.local.json", "secret-token\n"),
        ],
    );
    let cfg = env.write_config(
        &env.dir("hx-optout-cfg"),
        "[profiles.default]\nhost_config_writable = [\".vscode\"]\n",
    );
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "cat .claude/settings.local.json 2>/dev/null; echo sb > .vscode/settings.json && echo sb > .envrc && echo done",
    );
    assert!(r.stdout.contains("done"), "{r:?}");
    assert!(
        !r.stdout.contains("secret-token"),
        "an ignored host-tool file stays hidden: {r:?}"
    );
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    assert_eq!(
        std::fs::read_to_string(ws.join(".vscode/settings.json")).unwrap(),
        "sb\n"
    );
    assert_eq!(std::fs::read_to_string(ws.join(".envrc")).unwrap(), "dev\n");
}

#[test]
fn nested_repositories_keep_their_surface() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hx-nested", &[]);
    let marker = ws.with_extension("marker");
    // A nested repository (not a submodule) whose config names its own program.
    let sub = ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    env.chown(&sub);
    host_git_ok(env, &sub, &["init", "-q", "-b", "main"]);
    env.write(&sub.join("bin/smudge"), "#!/bin/sh\ncat\n");
    chmod_x(env, &sub, "bin/smudge");
    host_git_ok(env, &sub, &["config", "filter.s.clean", "bin/smudge"]);
    host_git_ok(env, &sub, &["config", "alias.fix", "!sh tools/fix.sh"]);
    let p = sh_quote(&poison(&marker));
    let attempts = [
        format!("printf '#!/bin/sh\\ntouch {}\\n' > sub/bin/smudge", marker.display()),
        format!(
            "mkdir -p sub/tools && printf 'touch {}\\n' > sub/tools/fix.sh",
            marker.display()
        ),
        format!("printf {p} > sub/.git/config"),
    ];
    let r = env.run_sh(&ws, &attempts_script(&attempts, "echo done"));
    assert!(r.stdout.contains("done"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    env.write(&sub.join("f.txt"), "x\n");
    env.write(&sub.join(".gitattributes"), "* filter=s\n");
    host_git_ok(env, &sub, &["add", "-A"]);
    let _ = host_cmd(env, &sub, &["git", "fix"]);
    host_git_ok(env, &ws, &["status"]);
    assert!(!marker.exists(), "host git ran a program the sandbox wrote");
    assert_eq!(
        std::fs::read_to_string(sub.join("bin/smudge")).unwrap(),
        "#!/bin/sh\ncat\n"
    );
}

#[test]
fn a_dot_git_file_pointing_elsewhere_keeps_the_programs_its_config_names() {
    let (env, _g) = require_env!(shared);
    // `git init --separate-git-dir`: `.git` is a `gitdir:` file, the Git
    // directory lies outside the workspace (Git inside cannot reach it, so
    // only the attempts run there), its config names a workspace program.
    let ws = env.dir("hx-sepgit");
    let gd = env.dir("hx-sepgit-gitdir");
    std::fs::remove_dir(&gd).unwrap();
    let r = host_cmd(
        env,
        &ws,
        &[
            "git",
            "init",
            "-q",
            "-b",
            "main",
            "--separate-git-dir",
            &gd.to_string_lossy(),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    host_git_ok(env, &ws, &["config", "user.name", "Host"]);
    host_git_ok(env, &ws, &["config", "user.email", "host@example.test"]);
    env.write(&ws.join("tools/fsmon.sh"), "#!/bin/sh\nexit 1\n");
    chmod_x(env, &ws, "tools/fsmon.sh");
    env.write(&ws.join("a.txt"), "one\n");
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "initial"]);
    host_git_ok(env, &ws, &["config", "core.fsmonitor", "./tools/fsmon.sh"]);
    let marker = ws.with_extension("marker");
    let attempts = [
        format!(
            "printf '#!/bin/sh\\ntouch {}\\nexit 1\\n' > tools/fsmon.sh",
            marker.display()
        ),
        "echo 'gitdir: /workspace/evil' > .git".to_string(),
        "rm -f .git".to_string(),
    ];
    let r = env.run_sh(&ws, &attempts_script(&attempts, "echo status-ok"));
    assert!(r.stdout.contains("status-ok"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    host_git_ok(env, &ws, &["status"]);
    assert!(!marker.exists(), "host git ran the sandbox's fsmonitor");
}
