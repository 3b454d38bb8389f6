//! Auto-approval rules that cannot run the sandbox's code: a rule naming a
//! program that runs the workspace's files is a config error, and Git's
//! trailing arguments that reach host files are refused at request time
//! (docs/escalation.md "What a rule may name", "Trailing arguments").

use crate::escalation::broker::{audit, rule, setup};
use crate::fixtures::{host_git, host_git_ok};
use crate::harness::sh_quote;
use crate::require_env;

#[test]
fn git_options_that_reach_host_files_are_refused_at_request_time() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(
        env,
        "escrules",
        &(rule(&["git", "log"], true) + &rule(&["git", "diff"], true) + &rule(&["git"], true)),
    );
    host_git_ok(env, &ws, &["init", "-q", "-b", "main"]);
    let id = ["-c", "user.name=Host", "-c", "user.email=host@example.test"];
    host_git_ok(
        env,
        &ws,
        &[&id[..], &["commit", "-q", "--allow-empty", "-m", "initial"]].concat(),
    );
    // A host file outside the workspace holding a secret, and the path a
    // host write would create.
    let base = ws.parent().unwrap();
    let secret = base.join("secret.txt");
    let content = "host-secret-7f3a9c1e";
    env.write(&secret, &format!("{content}\n"));
    let marker = base.join("marker");
    let (s, m) = (secret.display().to_string(), marker.display().to_string());
    // Control: the same commands run on the host as the developer do reach
    // the host files, so the refusals below are what stops them.
    let c = host_git(env, &ws, &["diff", "--no-index", &s, "/dev/null"]);
    assert!(
        c.stdout.contains(content),
        "control: --no-index did not read the file: {c:?}"
    );
    let c = host_git(env, &ws, &["log", &format!("--output={m}-control")]);
    eprintln!("control --output: {c:?}");
    assert!(
        base.join("marker-control").exists(),
        "control: --output wrote nothing: {c:?}"
    );

    let attempts = [
        format!("git log --output={m}"),
        format!("git log --outp={m}"),
        format!("git log --output {m}"),
        format!("git diff --no-index {s} /dev/null"),
        format!("git diff --no-ind {s} /dev/null"),
        format!("git diff {s} /dev/null"),
        "git diff -- ../secret.txt /dev/null".to_string(),
        format!("git -C {} diff --no-index secret.txt /dev/null", base.display()),
        "git -c core.pager=touch log".to_string(),
        format!("git log -O{m}"),
    ];
    let mut script = String::from("cd /workspace; ");
    for a in &attempts {
        let words: Vec<String> = a.split(' ').map(sh_quote).collect();
        script += &format!("lazaret-escalate -- {}; echo rc=$?; ", words.join(" "));
    }
    // And what the rules do grant still runs.
    script += "lazaret-escalate -- git diff --stat; echo ok-rc=$?";
    let r = env.run_sh_with_config(&ws, &cfg, &script);
    assert_eq!(r.stdout.matches("rc=126").count(), attempts.len(), "{r:?}");
    assert!(r.stdout.contains("ok-rc=0"), "{r:?}");
    let denied: Vec<&str> = r.stderr.lines().filter(|l| l.contains("denied")).collect();
    assert_eq!(denied.len(), attempts.len(), "one line per refusal: {r:?}");
    assert_eq!(
        denied[0],
        format!(
            "lazaret-escalate: denied: rule 0: git option --output={m} is refused: only options that neither \
             read nor write a file outside the repository nor run a program are granted (docs/escalation.md \
             lists them; an abbreviation counts as the option it abbreviates); nothing ran"
        ),
        "{r:?}"
    );
    assert_eq!(
        denied[5],
        format!(
            "lazaret-escalate: denied: rule 1: git argument {s} names a path outside the repository (or \
             standard input); refused; nothing ran"
        ),
        "{r:?}"
    );
    assert!(!marker.exists(), "host git wrote the marker: {r:?}");
    assert!(
        !r.stdout.contains(content) && !r.stderr.contains(content),
        "the secret reached the sandbox: {r:?}"
    );
    let log = audit(env, &ws);
    assert_eq!(log.matches("result=denied").count(), attempts.len(), "{log}");
    assert!(log.contains("auto-approved by rule 1"), "{log}");
}

#[test]
fn rules_for_programs_that_run_workspace_files_are_config_errors() {
    let (env, _g) = require_env!(shared);
    for (i, (bad, why)) in [
        (
            rule(&["npm", "test"], false),
            "is a package manager or task runner (npm)",
        ),
        (rule(&["make"], false), "is a build tool (make)"),
        (rule(&["python3", "-m", "x"], false), "is an interpreter (python)"),
        (rule(&["sh", "-c", "x"], false), "is a shell (sh)"),
        (
            rule(&["/usr/bin/npx", "x"], false),
            "is a package manager or task runner (npx)",
        ),
        (rule(&["./gradlew"], false), "is a build tool (gradlew)"),
        (
            rule(&["scripts/x.sh"], false),
            "is a path relative to the working directory",
        ),
        (
            rule(&["touch"], true).replace("trailing_args = [\"*\"]\n", ""),
            "trailing_args patterns for argv touch",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (ws, cfg) = setup(env, &format!("escrule{i}"), &bad);
        let marker = ws.join("ran");
        let r = env
            .lz(&ws, &["run", "--", "touch", &marker.display().to_string()])
            .config_home(&cfg)
            .run();
        assert_ne!(r.code, 0, "{bad}: {r:?}");
        let file = cfg.join("lazaret/config.toml").display().to_string();
        assert!(r.stderr.contains(&format!("{file}:")), "{bad}: {r:?}");
        assert!(
            r.stderr.contains("escalation.auto_approve[0]") && r.stderr.contains(why),
            "{bad}: {r:?}"
        );
        assert!(!marker.exists(), "{bad}: a Domain started");
    }
}
