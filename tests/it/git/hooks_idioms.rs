//! Hooks that find their scripts the usual ways (`git rev-parse`,
//! `GIT_DIR`, variables, `cd`, `python -m`, `sh`/`node FILE`, scripts that
//! run scripts), a nested repository behind many entries, and hooks that
//! run project code: the sandbox cannot rewrite what a host Git command
//! would run, and what cannot be decided is warned about at each start, or
//! refused. Host Git runs as the test user with no system or global
//! config; each attack's proof is a marker file the sandbox's code would
//! make, and the developer's scripts leave their own markers to show the
//! idioms still run them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fixtures::{git_repo, host_cmd, host_git_ok};
use crate::harness::{sh_quote, Env, Run};
use crate::require_env;

fn chmod_x(env: &Env, ws: &Path, p: &str) {
    let r = host_cmd(env, ws, &["chmod", "+x", p]);
    assert_eq!(r.code, 0, "{r:?}");
}

/// `attempts`, each in a subshell that prints `attempt N succeeded` when
/// it did; then `tail`.
fn attempts_script(attempts: &[String], tail: &str) -> String {
    let mut script = String::new();
    for (i, a) in attempts.iter().enumerate() {
        script.push_str(&format!(
            "( {a} ) >/dev/null 2>&1 && echo \"attempt {i} succeeded: {}\"\n",
            a.replace('"', "'")
        ));
    }
    script.push_str(tail);
    script.push_str("\nexit 0\n");
    script
}

fn no_attempt_succeeded(r: &Run) {
    let ok: Vec<&str> = r.stdout.lines().filter(|l| l.contains("succeeded")).collect();
    assert!(ok.is_empty(), "the sandbox rewrote what a host hook runs: {ok:?} {r:?}");
}

fn marker(ws: &Path, tag: &str) -> PathBuf {
    ws.with_extension(format!("marker-{tag}"))
}

fn own(ws: &Path, tag: &str) -> PathBuf {
    ws.with_extension(format!("own-{tag}"))
}

/// A shell script that touches its own marker (absent inside: it does
/// nothing there).
fn own_sh(ws: &Path, tag: &str) -> String {
    format!("#!/bin/sh\ntouch {} 2>/dev/null\n", own(ws, tag).display())
}

fn evil_sh(ws: &Path, tag: &str) -> String {
    format!("#!/bin/sh\ntouch {}\n", marker(ws, tag).display())
}

const WARNING: &str = "lazaret: host hooks run project code: pre-commit runs `npm test`; a host commit runs what the sandbox wrote — commit inside, or review first (lazaret git show)";

#[test]
fn hooks_that_find_the_top_by_expansion_run_only_the_developers_scripts() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hk-idioms", &[]);
    let sh_tags = ["a", "b", "c", "d", "f", "g", "z", "x"];
    for t in sh_tags {
        env.write(&ws.join(format!("scripts/{t}.sh")), &own_sh(&ws, t));
        chmod_x(env, &ws, &format!("scripts/{t}.sh"));
    }
    // Sourced: no `exit`.
    env.write(
        &ws.join("scripts/f.sh"),
        &format!("touch {} 2>/dev/null\n", own(&ws, "f").display()),
    );
    env.write(
        &ws.join("scripts/e.py"),
        &format!(
            "try:\n    open({:?}, 'w').close()\nexcept OSError:\n    pass\n",
            own(&ws, "e").display().to_string()
        ),
    );
    env.write(&ws.join("scripts/y.js"), "process.exit(0)\n");
    // The developer's hook, every idiom of the issue and three more.
    let hook = "#!/bin/sh\n\
        \"$(git rev-parse --show-toplevel)/scripts/a.sh\"\n\
        ROOT=$(git rev-parse --show-toplevel)\n\
        sh \"$ROOT/scripts/b.sh\"\n\
        \"${GIT_DIR:-.git}/../scripts/c.sh\"\n\
        (cd scripts && ./d.sh)\n\
        if command -v python3 >/dev/null 2>&1; then python3 -m scripts.e; else touch \"$(git rev-parse --show-toplevel)/../no-python\" 2>/dev/null; fi\n\
        . \"$(dirname \"$0\")/../../scripts/f.sh\"\n\
        G=`git rev-parse --git-dir`\n\
        bash \"$G/../scripts/g.sh\"\n\
        cd \"$(git rev-parse --show-toplevel)\" && sh scripts/z.sh\n\
        TOP=\"$(git rev-parse --show-toplevel)\"; (cd \"$TOP/scripts\" && sh ./x.sh)\n\
        command -v node >/dev/null 2>&1 && node ./scripts/y.js\n\
        exit 0\n";
    env.write(&ws.join(".git/hooks/pre-commit"), hook);
    chmod_x(env, &ws, ".git/hooks/pre-commit");
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "scripts"]);
    for t in sh_tags.iter().chain(["e"].iter()) {
        let _ = std::fs::remove_file(own(&ws, t));
    }
    let mut attempts = Vec::new();
    for t in sh_tags {
        attempts.push(format!("printf {} > scripts/{t}.sh", sh_quote(&evil_sh(&ws, t))));
    }
    let py = format!("open({:?}, 'w').close()\n", marker(&ws, "e").display().to_string());
    attempts.extend([
        format!("printf {} > scripts/e.py", sh_quote(&py)),
        format!("mkdir -p scripts/e && printf {} > scripts/e/__main__.py", sh_quote(&py)),
        format!("printf {} > scripts/__init__.py", sh_quote(&py)),
        "mkdir -p scripts/__pycache__ && printf x > scripts/__pycache__/e.cpython-311.pyc".to_string(),
        format!(
            "printf {} > scripts/y.js",
            sh_quote("require('child_process').execSync('touch /x')\n")
        ),
        format!(
            "mv scripts s2 && mkdir scripts && printf {} > scripts/a.sh",
            sh_quote(&evil_sh(&ws, "a"))
        ),
        format!(
            "printf {} > t && chmod +x t && mv t scripts/d.sh",
            sh_quote(&evil_sh(&ws, "d"))
        ),
        "rm scripts/c.sh".to_string(),
    ]);
    let r = env.run_sh(&ws, &attempts_script(&attempts, "echo done"));
    assert!(r.stdout.contains("done"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    host_git_ok(env, &ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    for t in sh_tags.iter().chain(["e"].iter()) {
        assert!(!marker(&ws, t).exists(), "host git commit ran the sandbox's {t} script");
    }
    let python = !ws.parent().unwrap().join("no-python").exists();
    for t in sh_tags {
        assert!(
            own(&ws, t).exists(),
            "the hook must still run the developer's scripts/{t}"
        );
    }
    if python {
        assert!(
            own(&ws, "e").exists(),
            "python3 -m scripts.e must still run the developer's module"
        );
    }
}

#[test]
fn scripts_a_husky_hook_runs_are_the_developers() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hk-husky2", &[]);
    // husky 9: core.hooksPath = .husky/_, whose hooks source `h`, which
    // runs `.husky/NAME` with `sh -e`.
    env.write(
        &ws.join(".husky/_/h"),
        "#!/usr/bin/env sh\nn=$(basename \"$0\")\ns=$(dirname \"$(dirname \"$0\")\")/$n\n[ ! -f \"$s\" ] && exit 0\nexport PATH=\"node_modules/.bin:$PATH\"\nsh -e \"$s\" \"$@\"\n",
    );
    env.write(
        &ws.join(".husky/_/pre-commit"),
        "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
    );
    chmod_x(env, &ws, ".husky/_/pre-commit");
    env.write(&ws.join(".husky/pre-commit"), "./scripts/lint.sh\n");
    env.write(
        &ws.join("scripts/lint.sh"),
        &format!("{}sh scripts/more.sh\n", own_sh(&ws, "lint")),
    );
    env.write(&ws.join("scripts/more.sh"), &own_sh(&ws, "more"));
    chmod_x(env, &ws, "scripts/lint.sh");
    host_git_ok(env, &ws, &["config", "core.hooksPath", ".husky/_"]);
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "husky"]);
    let _ = std::fs::remove_file(own(&ws, "lint"));
    let _ = std::fs::remove_file(own(&ws, "more"));
    let attempts = [
        format!("printf {} > scripts/lint.sh", sh_quote(&evil_sh(&ws, "lint"))),
        format!("printf {} > scripts/more.sh", sh_quote(&evil_sh(&ws, "more"))),
        format!(
            "mkdir -p node_modules/.bin && printf {} > node_modules/.bin/sh && chmod +x node_modules/.bin/sh",
            sh_quote(&evil_sh(&ws, "path"))
        ),
        format!(
            "mv scripts s2 && mkdir scripts && printf {} > scripts/lint.sh",
            sh_quote(&evil_sh(&ws, "lint"))
        ),
    ];
    let r = env.run_sh(&ws, &attempts_script(&attempts, "echo done"));
    assert!(r.stdout.contains("done"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    host_git_ok(env, &ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    for t in ["lint", "more", "path"] {
        assert!(!marker(&ws, t).exists(), "host commit ran the sandbox's {t}");
    }
    assert!(
        own(&ws, "lint").exists() && own(&ws, "more").exists(),
        "husky must still run the developer's scripts"
    );
}

#[test]
fn many_entries_do_not_hide_a_nested_repositorys_hooks() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hk-walk", &[]);
    let lib = ws.join("vendor/lib");
    std::fs::create_dir_all(&lib).unwrap();
    env.chown(&ws.join("vendor"));
    env.chown(&lib);
    host_git_ok(env, &lib, &["init", "-q", "-b", "main"]);
    host_git_ok(env, &lib, &["config", "user.name", "Host"]);
    host_git_ok(env, &lib, &["config", "user.email", "host@example.test"]);
    host_git_ok(env, &lib, &["config", "core.hooksPath", ".githooks"]);
    env.write(&lib.join(".githooks/pre-commit"), &own_sh(&ws, "lib"));
    chmod_x(env, &lib, ".githooks/pre-commit");
    // First session: 20,000 empty files in a directory read first.
    let r = env.run_sh(
        &ws,
        "mkdir -p 0000 && cd 0000 && seq -f f%g 1 20000 | xargs touch && ls | wc -l",
    );
    assert!(r.stdout.trim().ends_with("20000"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(30));
    // Next start: the nested repository's hook is still the developer's.
    let attempts = [
        format!(
            "printf {} > vendor/lib/.githooks/pre-commit",
            sh_quote(&evil_sh(&ws, "lib"))
        ),
        format!(
            "printf {} > vendor/lib/.githooks/post-commit && chmod +x vendor/lib/.githooks/post-commit",
            sh_quote(&evil_sh(&ws, "lib"))
        ),
        "mv vendor/lib/.githooks vendor/lib/gh2".to_string(),
    ];
    let r = env.run_sh(&ws, &attempts_script(&attempts, "echo done"));
    assert!(r.stdout.contains("done"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    let _ = std::fs::remove_file(own(&ws, "lib"));
    host_git_ok(env, &lib, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    assert!(
        !marker(&ws, "lib").exists(),
        "host commit in the nested repository ran the sandbox's hook"
    );
    assert!(
        own(&ws, "lib").exists(),
        "the nested repository's own hook must still run"
    );
}

#[test]
fn hooks_that_run_project_code_are_warned_about_or_refused() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "hk-npm",
        &[("package.json", "{\"scripts\":{\"test\":\"true\"}}\n")],
    );
    env.write(&ws.join(".git/hooks/pre-commit"), "#!/bin/sh\nnpm test\n");
    chmod_x(env, &ws, ".git/hooks/pre-commit");
    let r = env.run_sh(&ws, "echo started");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("started"), "{r:?}");
    assert_eq!(
        r.stderr.lines().filter(|l| *l == WARNING).count(),
        1,
        "one warning line, word for word: {r:?}"
    );
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    // `lazaret git show` lists it in full.
    let s = env.lz(&ws, &["git", "show"]).run();
    assert_eq!(s.code, 0, "{s:?}");
    assert!(
        s.stdout.contains("pre-commit runs `npm test` (in .git/hooks/pre-commit): a package manager or build tool runs code the project defines"),
        "{s:?}"
    );
    let j = env.lz(&ws, &["git", "show", "--json"]).run();
    assert!(
        j.stdout.contains("\"origin\":\"pre-commit\",\"command\":\"npm test\""),
        "{j:?}"
    );
    // `host_hooks = "refuse"`: the start is refused, naming the finding.
    let cfg = ws.with_extension("cfg");
    env.write(
        &cfg.join("lazaret/config.toml"),
        "[profiles.default]\nhost_hooks = \"refuse\"\n",
    );
    let r = env.run_sh_with_config(&ws, &cfg, "echo started");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!r.stdout.contains("started"), "{r:?}");
    assert!(
        r.stderr.contains("pre-commit runs `npm test`") && r.stderr.contains("host_hooks = \"refuse\""),
        "{r:?}"
    );
    // A hook with nothing undecided: no warning.
    env.write(&ws.join(".git/hooks/pre-commit"), "#!/bin/sh\n./scripts/check.sh\n");
    let r = env.run_sh_with_config(&ws, &cfg, "echo started");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("host hooks run project code"), "{r:?}");
}

#[test]
fn a_workspace_of_200000_files_and_20_nested_repositories_starts() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hk-big", &[]);
    // 200 directories of 1,000 empty files, and 20 nested repositories
    // (each with a hooks directory of its own), made on the host.
    let r = host_cmd(
        env,
        &ws,
        &[
            "sh",
            "-c",
            "for d in $(seq 1 200); do mkdir -p tree/d$d && (cd tree/d$d && seq -f f%g 1 1000 | xargs touch); done; \
             for n in $(seq 1 20); do git init -q tree/d$n/repo$n && git -C tree/d$n/repo$n config core.hooksPath .githooks; done",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let t0 = std::time::Instant::now();
    let r = env.run_sh(
        &ws,
        "printf x > tree/d7/repo7/.githooks/pre-commit && echo rewrote; echo started",
    );
    let took = t0.elapsed();
    eprintln!("a_workspace_of_200000_files_and_20_nested_repositories_starts: lazaret run took {took:?}");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("started") && !r.stdout.contains("rewrote"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(30));
    let t0 = std::time::Instant::now();
    let s = env.lz(&ws, &["git", "show", "--json"]).run();
    eprintln!(
        "a_workspace_of_200000_files_and_20_nested_repositories_starts: git show took {:?}",
        t0.elapsed()
    );
    assert_eq!(s.code, 0, "{s:?}");
    assert!(s.stdout.contains("tree/d20/repo20/.githooks"), "{s:?}");
    let _ = std::fs::remove_dir_all(ws.join("tree"));
}

#[test]
fn hooks_that_reach_scripts_through_substitutions_aliases_and_symlinks_run_only_the_developers() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(env, "hk-idioms2", &[]);
    let tags = ["r", "v", "l", "lint", "c"];
    for (t, p) in [
        ("r", "scripts/hooks/r.sh"),
        ("v", "scripts/v.sh"),
        ("l", "scripts/l.sh"),
        ("lint", "bin/lint"),
        ("c", "scripts/c.sh"),
    ] {
        env.write(&ws.join(p), &own_sh(&ws, t));
        chmod_x(env, &ws, p);
    }
    // The developer's hook lives in scripts/hooks/ and is linked into
    // .git/hooks; it finds its helper beside its target (`readlink -f`),
    // runs a script in a command substitution, through an alias (dash
    // expands them), through a PATH set for one command, and after a case
    // statement inside a subshell that changed directory.
    env.write(
        &ws.join("scripts/hooks/pre-commit"),
        "#!/bin/sh\n\
         HERE=$(dirname \"$(readlink -f \"$0\")\")\n\
         \"$HERE/r.sh\"\n\
         V=$(./scripts/v.sh)\n\
         alias l='sh scripts/l.sh'\n\
         l\n\
         PATH=\"$PWD/bin:$PATH\" lint\n\
         (cd scripts\n\
         case x in x) : ;; esac\n\
         ./c.sh)\n\
         exit 0\n",
    );
    chmod_x(env, &ws, "scripts/hooks/pre-commit");
    let r = host_cmd(
        env,
        &ws,
        &["ln", "-s", "../../scripts/hooks/pre-commit", ".git/hooks/pre-commit"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "scripts"]);
    for t in tags {
        let _ = std::fs::remove_file(own(&ws, t));
    }
    let mut attempts = Vec::new();
    for (t, p) in [
        ("r", "scripts/hooks/r.sh"),
        ("v", "scripts/v.sh"),
        ("l", "scripts/l.sh"),
        ("lint", "bin/lint"),
        ("c", "scripts/c.sh"),
    ] {
        attempts.push(format!("printf {} > {p}", sh_quote(&evil_sh(&ws, t))));
    }
    attempts.push(format!(
        "mv scripts s2 && mkdir -p scripts/hooks && printf {} > scripts/hooks/r.sh && chmod +x scripts/hooks/r.sh",
        sh_quote(&evil_sh(&ws, "r"))
    ));
    let r = env.run_sh(&ws, &attempts_script(&attempts, "echo done"));
    assert!(r.stdout.contains("done"), "{r:?}");
    no_attempt_succeeded(&r);
    env.wait_unpublished("default", &ws, Duration::from_secs(15));
    host_git_ok(env, &ws, &["commit", "-q", "--allow-empty", "-m", "host-after"]);
    for t in tags {
        assert!(!marker(&ws, t).exists(), "host git commit ran the sandbox's {t} script");
    }
    // The idioms still run the developer's scripts (the alias only where
    // /bin/sh expands aliases in scripts).
    for t in ["r", "v", "lint", "c"] {
        assert!(own(&ws, t).exists(), "the hook must still run the developer's {t}");
    }
}
