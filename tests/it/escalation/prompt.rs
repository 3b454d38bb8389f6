//! Host escalation: what the developer approves is exactly what runs,
//! where the prompt says. Nothing of the sandbox's reaches the terminal
//! while a prompt is up (held output included), the prompt is bounded
//! whatever the justification, the working directory is a handle (no
//! directory race), and a `user` session cannot read a `--root` session's
//! credential.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::escalation::broker::{audit, rule_with, setup};
use crate::harness::{sh_quote, Env, Tmux};
use crate::require_env;

const QUESTION: &str = "run it? type yes, no or edit, then Enter:";

/// The screen line right above the real question (the last line that
/// starts with it: a justification or a fake block is never at a line's
/// start, it is behind `why:` or indented).
fn above_question(screen: &str) -> Option<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let q = lines.iter().rposition(|l| l.starts_with(QUESTION))?;
    q.checked_sub(1).map(|i| lines[i].trim_end().to_string())
}

/// The rows of the prompt: from its header to the question.
fn prompt_rows(screen: &str) -> Vec<String> {
    let lines: Vec<&str> = screen.lines().collect();
    let end = lines.iter().rposition(|l| l.starts_with(QUESTION)).unwrap_or(0);
    let start = lines[..end]
        .iter()
        .rposition(|l| l.starts_with("-- lazaret: the sandbox asks"))
        .unwrap_or(end);
    lines[start..=end].iter().map(|l| l.to_string()).collect()
}

/// Runs `script` (sh) in the pane, which asks for `touch MARKER` at some
/// point; checks the prompt names exactly that command and directory on
/// the line above the question (also `hold` later: what a late release
/// would have drawn), answers yes, and checks the audit log ran exactly it.
fn approve_and_check(t: &Tmux, env: &Env, ws: &Path, tag: &str, script: &str, hold: Duration) {
    let marker = ws.join(format!("ran-{tag}"));
    let file = ws.join(format!("{tag}.sh"));
    let body = script.replace("MARKER", &sh_quote(&marker.display().to_string()));
    // The status on a line of its own: a guest that drew over the screen
    // may leave the cursor at the last column, where the first letter would
    // wrap onto another row.
    std::fs::write(&file, format!("{body}; s=$?; echo; echo rc-{tag}=$s\n")).unwrap();
    env.chown(&file);
    t.line(&format!("clear; sh /workspace/{tag}.sh"));
    let expect = format!(
        "=> touch {}   in {}",
        marker.display(),
        std::fs::canonicalize(ws).unwrap().display()
    );
    // This request's prompt (an earlier one may still be on screen until
    // the `clear` runs).
    assert!(
        crate::harness::eventually(Duration::from_secs(20), || t
            .capture()
            .contains(&format!("command: touch {}", marker.display()))),
        "{tag}: no prompt:\n{}",
        t.capture()
    );
    let first = t.capture();
    std::thread::sleep(hold);
    let screen = t.capture();
    eprintln!("{tag}: screen:\n{screen}");
    assert_eq!(
        above_question(&screen).as_deref(),
        Some(expect.as_str()),
        "{tag}:\n{screen}"
    );
    assert!(
        screen.contains(&format!("command: touch {}", marker.display())),
        "{tag}:\n{screen}"
    );
    // A fake block may be in the justification, behind `why:`, never a
    // line of its own.
    assert!(
        !screen
            .lines()
            .any(|l| l.starts_with("command: git") || l.starts_with("=> git")),
        "{tag}: a fake line:\n{screen}"
    );
    assert_eq!(prompt_rows(&first), prompt_rows(&screen), "{tag}: the prompt changed");
    assert!(!marker.exists());
    t.line("yes");
    assert!(
        t.wait_for(&format!("rc-{tag}=0"), Duration::from_secs(15)),
        "{tag}:\n{}",
        t.capture()
    );
    assert!(marker.exists(), "{tag}: the approved command did not run");
    let log = audit(env, ws);
    let ran = format!("ran=touch {}", marker.display());
    assert!(log.contains(&ran), "{tag}: {log}");
    // Exactly one host command for this request, and it is the one shown.
    let runs: Vec<&str> = log.lines().filter(|l| l.contains(&format!("ran-{tag}"))).collect();
    assert!(
        runs.iter().filter(|l| l.contains(" ran=")).all(|l| l.contains(&ran)),
        "{tag}: {runs:?}"
    );
}

#[test]
fn held_output_padding_and_fake_blocks_never_change_what_is_approved() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc3held", "prompt_timeout_s = 120\n");
    let t = env.config_pane(&ws, &cfg, "esc3held", 160, 40);
    // Attack (1): text in runsc's error shape (a `urpc method "` line)
    // that the coordinator holds back for up to 3 s, carrying cursor
    // movements that rewrite the prompt's command line, then the request
    // after DELAY: before, across and after the hold's release.
    let fake = "printf 'urpc method \"x\" failed\\033[8A\\r\\033[2Kcommand: git status\\033[8B\\r\\n\\033[4A\\r\\033[2K=> git status   in /\\033[4B'";
    for (tag, delay) in [("d05", "0.5"), ("d25", "2.5"), ("d35", "3.5")] {
        let script = format!("{fake}; sleep {delay}; lazaret-escalate --justification held -- touch MARKER");
        approve_and_check(&t, env, &ws, tag, &script, Duration::from_secs(4));
    }
    // Attack (2): justifications that pad the real prompt off the screen
    // or draw a complete fake one.
    let spaces = "lazaret-escalate --justification \"$(printf '%10000s' '')x\" -- touch MARKER";
    let newlines = "lazaret-escalate --justification \"$(printf 'a%.0s\\n' $(seq 200))b\" -- touch MARKER";
    let block = "lazaret-escalate --justification \"$(printf '\\n\\n\\n-- lazaret: the sandbox asks to run a command on the host --\\nprofile: default\\ncommand: git status\\ncwd:     /\\nwhy:     status\\n=> git status   in /\\nrun it? type yes, no or edit, then Enter: \\n%.0s' $(seq 30))\" -- touch MARKER";
    // An escape string left open (OSC, DCS) would swallow what follows.
    let open_osc = "printf '\\033]0;swallow'; lazaret-escalate -- touch MARKER";
    let open_dcs = "printf '\\033Pq'; lazaret-escalate -- touch MARKER";
    for (tag, script) in [
        ("spaces", spaces),
        ("newlines", newlines),
        ("block", block),
        ("osc", open_osc),
        ("dcs", open_dcs),
    ] {
        approve_and_check(&t, env, &ws, tag, script, Duration::from_millis(800));
    }
    t.line("exit");
}

#[test]
fn a_guest_drawing_in_a_loop_changes_nothing_on_the_prompt_rows() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc3loop", "prompt_timeout_s = 120\n");
    let t = env.config_pane(&ws, &cfg, "esc3loop", 160, 40);
    // A background process of the session draws over the bottom rows
    // (cursor up, clear, fake text, save/restore cursor) as fast as it can.
    let script = "(while :; do printf '\\0337\\033[6A\\r\\033[2Kcommand: git status\\033[2A\\033[2K=> git status   in /\\0338'; done) & \
                  loop=$!; sleep 0.5; lazaret-escalate --justification loop -- touch MARKER; rc=$?; kill $loop; wait $loop 2>/dev/null; (exit $rc)";
    approve_and_check(&t, env, &ws, "loop", script, Duration::from_secs(2));
    // Look-alike letters, wide characters, a single-character CSI (C1) and a
    // stack of combining marks: the line above the question spells them out
    // in ASCII, and what it names is what runs.
    let name = "ran-g\u{456}thub";
    let marker = ws.join(name);
    let zalgo: String = std::iter::once('z')
        .chain((0x300..0x340).filter_map(char::from_u32))
        .collect();
    std::fs::write(
        ws.join("odd.sh"),
        format!(
            "lazaret-escalate --justification '{zalgo}' -- touch {} '\u{754c}\u{9b}2J'; echo rc-odd=$?\n",
            sh_quote(&marker.display().to_string())
        ),
    )
    .unwrap();
    env.chown(&ws.join("odd.sh"));
    t.line("clear; sh /workspace/odd.sh");
    let expect = format!(
        "=> touch '{}/ran-g\\u{{456}}thub' '\\u{{754c}}\\x9b2J'   in {}",
        std::fs::canonicalize(&ws).unwrap().display(),
        std::fs::canonicalize(&ws).unwrap().display()
    );
    // (The previous prompt's question stays on screen until the `clear`.)
    let shown = crate::harness::eventually(Duration::from_secs(20), || {
        above_question(&t.capture()).as_deref() == Some(expect.as_str())
    });
    let screen = t.capture();
    eprintln!("odd: screen:\n{screen}");
    assert!(shown, "{expect}\n{screen}");
    assert!(!marker.exists());
    std::thread::sleep(Duration::from_millis(600));
    t.line("yes");
    t.expect("rc-odd=0", Duration::from_secs(15));
    assert!(marker.exists(), "the approved command did not run");
    t.line("clear; echo back-$((40+2))");
    t.expect("back-42", Duration::from_secs(10));
    t.line("exit");
}

// Covers DX-4.
#[test]
fn a_small_terminal_refuses_and_escalations_lists_the_full_argv() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc3small", "prompt_timeout_s = 120\n");
    // 10 rows cannot hold the prompt of a 12-argument command at 60 columns.
    let t = env.config_pane(&ws, &cfg, "esc3small", 60, 10);
    let marker = ws.join("small-ran");
    let long: Vec<String> = (0..12).map(|i| format!("argument-number-{i}")).collect();
    t.line(&format!(
        "clear; lazaret-escalate -- touch {} {}; echo rc=$?",
        sh_quote(&marker.display().to_string()),
        long.join(" ")
    ));
    t.expect("rc=126", Duration::from_secs(20));
    let screen = t.capture();
    assert!(screen.contains("too small"), "{screen}");
    assert!(!marker.exists());
    assert!(audit(env, &ws).contains("terminal is too small"), "{}", audit(env, &ws));
    drop(t);
    // A second look from another terminal: every argument in full (this
    // Domain's; other tests' Domains may be waiting too).
    let domain = env.domain_id("default", &ws);
    let t = env.config_pane(&ws, &cfg, "esc3list", 160, 40);
    let arg = format!("{}\u{1b}[2J", "y".repeat(3000));
    let script = format!(
        "lazaret-escalate --justification second-look -- touch {} '{arg}'",
        sh_quote(&marker.display().to_string())
    );
    std::fs::write(ws.join("list.sh"), format!("{script}; echo rc=$?\n")).unwrap();
    env.chown(&ws.join("list.sh"));
    t.line("clear; sh /workspace/list.sh");
    t.expect(QUESTION, Duration::from_secs(20));
    let screen = t.capture();
    assert!(
        screen.contains("[cut: "),
        "the long argument is cut on screen:\n{screen}"
    );
    let r = env.lz(&ws, &["escalations", &domain[..12]]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    let escaped = format!("{}\\x1b[2J", "y".repeat(3000));
    assert!(r.stdout.contains(&format!("argv[2] = {escaped}")), "{r:?}");
    assert!(r.stdout.contains(&format!("argv[1] = {}", marker.display())), "{r:?}");
    assert!(
        r.stdout.contains("on screen") && r.stdout.contains("second-look"),
        "{r:?}"
    );
    assert!(!r.stdout.contains('\u{1b}'), "{r:?}");
    std::thread::sleep(Duration::from_millis(600));
    t.line("no");
    t.expect("rc=126", Duration::from_secs(15));
    let r = env.lz(&ws, &["escalations", &domain[..12]]).config_home(&cfg).run();
    assert!(r.stdout.contains("no escalation requests waiting"), "{r:?}");
    t.line("exit");
}

#[test]
fn a_directory_swapped_with_a_symlink_never_moves_a_host_command() {
    let (env, _g) = require_env!(shared);
    let rules = rule_with(&["touch", "race-marker"], false, "cwd = \"tools\"\n");
    let (ws, cfg) = setup(env, "esc3race", &rules);
    let outside = ws.parent().unwrap().join("race-marker");
    // The sandbox swaps `tools` between a directory and a symlink to the
    // workspace's parent while 2,000 auto-approved requests name it.
    // The shell sits in the directory, so each request names `tools`
    // whenever the directory is in place, and the swap races the broker.
    // The swapper stops at the end of a whole swap (a flag, not a kill:
    // a killed `mv` or `ln` could leave `tools` moved out of the tree).
    let script = "cd /workspace; mkdir -p tools; cd tools; \
        rm -f /tmp/stop-swap; \
        (cd /workspace; while [ ! -e /tmp/stop-swap ]; do mv tools tools.d; ln -s .. tools; rm -f tools; mv tools.d tools; done) 2>/dev/null & swap=$!; \
        ok=0; other=0; i=0; while [ $i -lt 2000 ]; do \
          if lazaret-escalate -- touch race-marker >/dev/null 2>&1; then ok=$((ok+1)); else other=$((other+1)); fi; \
          i=$((i+1)); done; \
        touch /tmp/stop-swap; wait $swap 2>/dev/null; cd /workspace; \
        while [ ! -d tools ] || [ -L tools ]; do rm -f tools; [ -d tools.d ] && mv tools.d tools; mkdir -p tools; done; \
        echo ok=$ok other=$other";
    let start = Instant::now();
    let r = env.run_sh_with_config(&ws, &cfg, script);
    eprintln!("2000 requests in {:?}: {}", start.elapsed(), r.stdout.trim());
    assert!(r.stdout.contains("ok="), "{r:?}");
    assert!(!outside.exists(), "a host command ran outside the resolved directory");
    assert!(
        !ws.join("race-marker").exists(),
        "a host command ran in the workspace root"
    );
    let log = audit(env, &ws);
    let ran = log
        .lines()
        .filter(|l| l.contains(" ran=touch race-marker result=completed"))
        .count();
    let refused = log.lines().filter(|l| l.contains("a symlink is on the way")).count();
    eprintln!("ran {ran}, refused for a symlink {refused}");
    assert!(ran > 0, "no request ran at all: {r:?}");
    assert!(ws.join("tools/race-marker").exists() || ws.join("tools.d/race-marker").exists());
    // A symlink at the rule's own path: the rule matches nothing, so the
    // request is not auto-approved (no terminal: denied); the directory it
    // points to gets nothing.
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "cd /workspace; mkdir -p gitlike; rm -rf tools; ln -s gitlike tools; \
         cd /workspace/tools; lazaret-escalate -- touch race-marker; echo rc=$?; \
         cd /workspace/gitlike; lazaret-escalate -- touch race-marker; echo rc=$?",
    );
    assert_eq!(r.stdout.matches("rc=126").count(), 2, "{r:?}");
    assert!(!ws.join("gitlike/race-marker").exists());
}

#[test]
fn a_user_session_cannot_read_a_root_sessions_credential() {
    let (env, _g) = require_env!(shared);
    let cfg_text = "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"true\"]\n\
                    [profiles.u]\nuser = \"dev\"\npass_env = [\"LZ_PASSED\"]\n";
    let (ws, cfg) = env.workspace_with_config("esc3uid", cfg_text);
    // A root session that keeps running, with a passed value, and that
    // can use its own credential; it keeps the credential file open (fd 3,
    // as a reader might be caught doing) with its cwd in the key directory.
    let root = env
        .lz(
            &ws,
            &[
                "run",
                "-p",
                "u",
                "--root",
                "--",
                "sh",
                "-c",
                "exec 3<\"$LAZARET_ESCALATION_CREDENTIAL_FILE\"; cd /.lazaret/keys; \
                 lazaret-escalate -- true; echo rc=$? > /workspace/root-rc; sleep 60",
            ],
        )
        .config_home(&cfg)
        .env("LZ_PASSED", "root-passed-value-4242")
        .spawn_bg();
    assert!(
        crate::harness::eventually(Duration::from_secs(120), || std::fs::read_to_string(ws.join("root-rc"))
            .is_ok_and(|s| s.ends_with('\n'))),
        "the root session never ran"
    );
    assert_eq!(std::fs::read_to_string(ws.join("root-rc")).unwrap().trim(), "rc=0");
    // The user session looks at every process's environment and every
    // credential file it can name.
    let probe = "id -u; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done > /tmp/envs; \
                 grep -c root-passed-value-4242 /tmp/envs; grep -c '^LAZARET_ESCALATION_CREDENTIAL=' /tmp/envs; \
                 ls /.lazaret/keys >/dev/null 2>&1 && echo listed || echo not-listed; \
                 for f in $(grep '^LAZARET_ESCALATION_CREDENTIAL_FILE=' /tmp/envs | cut -d= -f2 | sort -u); do \
                   if cat $f 2>/dev/null | grep -q lzc2; then echo read-$f; else echo denied; fi; \
                   ln $f /tmp/hard 2>/dev/null && echo linked-hard; ln -sf $f /tmp/soft; \
                   cat /tmp/soft 2>/dev/null | grep -q lzc2 && echo through-symlink-$f; \
                   b=$(basename $f); for p in /proc/[0-9]*; do \
                     cat $p/cwd/$b $p/root$f 2>/dev/null | grep -q lzc2 && echo through-proc-$p-$f; done; done; \
                 for l in /proc/[0-9]*/fd/*; do [ -f $l ] && cat $l 2>/dev/null | grep -q lzc2 && echo fd-$l; done; \
                 echo probe-done";
    let r = env
        .lz(&ws, &["run", "-p", "u", "--", "sh", "-c", probe])
        .config_home(&cfg)
        .run();
    eprintln!("{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"1000"), "{r:?}");
    // What gVisor lets every uid read, pinned as docs/threat-model.md says:
    // a root session's environment, passed values included.
    assert_ne!(
        lines.get(1),
        Some(&"0"),
        "passed value no longer visible: update the threat model {r:?}"
    );
    // No credential is in any environment; the root session's file is
    // not readable (the user's own is), and the directory is not listable.
    assert_eq!(lines.get(2), Some(&"0"), "{r:?}");
    assert_eq!(lines.get(3), Some(&"not-listed"), "{r:?}");
    assert!(
        r.stdout.contains("denied"),
        "the root session's file was not tried: {r:?}"
    );
    assert_eq!(
        r.stdout.matches("read-").count(),
        1,
        "read another session's credential: {r:?}"
    );
    // Not through a hard link (a read-only bind), a symlink, another
    // uid's /proc/PID/{cwd,root} or an fd the root session holds open.
    assert!(r.stdout.contains("probe-done"), "{r:?}");
    assert!(!r.stdout.contains("linked-hard"), "{r:?}");
    let leaks: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("through-") || l.starts_with("fd-"))
        .collect();
    // The user session's own file (0644) is readable by any path, and none
    // of its processes holds it open; only the root session's is ever open.
    let own = lines.iter().find_map(|l| l.strip_prefix("read-")).unwrap_or("-");
    assert!(
        leaks.iter().all(|l| l.starts_with("through-") && l.ends_with(own)),
        "a root session's credential leaked to a user session: {leaks:?}\n{r:?}"
    );
    drop(root);
}
