//! Host escalation, adversarially: a host command runs only on a
//! deliberate, informed decision, every request ends, junk in the mailbox
//! never switches escalation off, and no host command outlives its Domain.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::escalation::broker::{audit, host_pids, rule, rule_with, setup, ID_OF};
use crate::fixtures::host_command;
use crate::harness::{eventually, json_number, sh_quote, Env, Tmux};
use crate::require_env;

const QUESTION: &str = "type yes, no or edit";

/// Types `keys` one character at a time, `gap` apart.
fn type_slowly(t: &Tmux, keys: &str, gap: Duration) {
    for c in keys.chars() {
        t.send(&c.to_string());
        std::thread::sleep(gap);
    }
}

// Covers SR-7.
#[test]
fn typeahead_and_typed_streams_never_decide() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2type", "prompt_timeout_s = 120\n");
    let t = env.config_pane(&ws, &cfg, "esc2type", 160, 40);
    let marker = ws.join("typeahead-ran");
    t.line(&format!(
        "clear; lazaret-escalate -- touch {}; echo rc=$?",
        sh_quote(&marker.display().to_string())
    ));
    // `a` every 250 ms from before the prompt appears until well after it,
    // then Enter: the old single-key prompt approved on the first `a`.
    let start = Instant::now();
    let mut seen_at = None;
    while start.elapsed() < Duration::from_secs(20) {
        t.send("a");
        std::thread::sleep(Duration::from_millis(250));
        if seen_at.is_none() && t.capture().contains(QUESTION) {
            seen_at = Some(start.elapsed());
        }
        if let Some(s) = seen_at {
            if start.elapsed() > s + Duration::from_secs(2) {
                break;
            }
        }
    }
    assert!(seen_at.is_some(), "no prompt: {}", t.capture());
    t.enter();
    std::thread::sleep(Duration::from_secs(1));
    assert!(!marker.exists(), "typeahead approved a host command");
    // The line was begun in the grace: no answer, asked again.
    assert!(t.capture().contains("so it is no answer"), "{}", t.capture());
    // A typed stream full of `e`s (and a real sentence) never enters edit
    // mode, so the typing can never become a host command.
    type_slowly(&t, "eeee", Duration::from_millis(100));
    t.enter();
    type_slowly(&t, "make tests pass", Duration::from_millis(60));
    t.enter();
    std::thread::sleep(Duration::from_millis(500));
    let screen = t.capture();
    assert!(!screen.contains("command to run instead"), "{screen}");
    assert!(!marker.exists());
    // Only the whole word decides.
    t.line("no");
    t.expect("rc=126", Duration::from_secs(10));
    assert!(!marker.exists());
    let log = audit(env, &ws);
    assert!(
        log.contains("denied by the developer") && !log.contains("approved"),
        "{log}"
    );
    // An edit is shown again and needs its own yes.
    let edited = ws.join("edited-ran");
    // The shell still holds the `a`s typed before the prompt: clear them.
    t.cmd(&["send-keys", "-t", "t", "C-u"]);
    t.line("clear; lazaret-escalate -- touch /nonexistent/x; echo rc=$?");
    // The screen still shows the last prompt's question until `clear` runs:
    // wait for this request's own command line in the prompt.
    t.expect("command: touch /nonexistent/x", Duration::from_secs(10));
    t.expect(QUESTION, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(800));
    t.line("edit");
    t.expect("command to run instead", Duration::from_secs(5));
    t.line(&format!("touch {}", edited.display()));
    t.expect("run the edited command?", Duration::from_secs(5));
    assert!(t
        .capture()
        .contains(&format!("edited command: touch {}", edited.display())));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!edited.exists(), "ran before confirmation");
    t.line("yes");
    t.expect("rc=0", Duration::from_secs(10));
    assert!(edited.exists());
    t.line("exit");
}

#[test]
fn a_sandbox_drawn_scroll_region_and_fake_prompt_cannot_hide_the_real_one() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2spoof", "prompt_timeout_s = 120\n");
    let t = env.config_pane(&ws, &cfg, "esc2spoof", 220, 40);
    let marker = ws.join("spoof-ran");
    // The sandbox draws a fake prompt, confines scrolling to the top five
    // lines (origin mode on), hides the cursor, conceals text, switches to
    // the alternate screen and the DEC graphics set, then asks for
    // something else; the argument also carries a bidi override.
    let script = format!(
        "printf '\\033[?1049h\\033[2J\\033[30;1Hcommand: git status\\r\\nrun it? type yes, no or edit, then Enter: \
         \\033[1;5r\\033[?6h\\033[?25l\\033[8m\\033(0\\033[1;1H'; sleep 1; \
         lazaret-escalate --justification 'status only' -- touch {} \"$(printf 'x\\342\\200\\256y')\"; echo rc=$?",
        sh_quote(&marker.display().to_string())
    );
    std::fs::write(ws.join("spoof.sh"), script).unwrap();
    env.chown(&ws.join("spoof.sh"));
    t.line("clear; sh /workspace/spoof.sh");
    t.expect("-- lazaret: the sandbox asks", Duration::from_secs(15));
    std::thread::sleep(Duration::from_millis(300));
    let screen = t.capture();
    eprintln!("screen:\n{screen}");
    let host_ws = std::fs::canonicalize(&ws).unwrap().display().to_string();
    for line in [
        "-- lazaret: the sandbox asks to run a command on the host --".to_string(),
        "profile: default".to_string(),
        format!("command: touch {}", marker.display()),
        "x\\u{202e}y".to_string(),
        format!("cwd:     {host_ws}"),
        "why:     status only".to_string(),
        QUESTION.to_string(),
    ] {
        assert!(screen.contains(&line), "{line:?} not visible:\n{screen}");
    }
    assert!(
        !screen.contains("command: git status"),
        "fake prompt still shown:\n{screen}"
    );
    // Nothing of the prompt is concealed or drawn in the graphics set.
    let styled = t.cmd(&["capture-pane", "-p", "-e", "-t", "t"]);
    let prompt_lines: Vec<&str> = styled.lines().filter(|l| l.contains("command: touch")).collect();
    assert!(!prompt_lines.is_empty(), "{styled}");
    for l in prompt_lines {
        assert!(
            !l.contains("\u{1b}[8m") && !l.contains(";8m") && !l.contains("\u{1b}(0"),
            "{l:?}"
        );
    }
    // The decision is the one shown.
    std::thread::sleep(Duration::from_millis(300));
    t.line("yes");
    t.expect("rc=0", Duration::from_secs(10));
    assert!(marker.exists());
    t.line("exit");
}

// Covers SR-7, OR-2.
#[test]
fn an_unanswered_prompt_expires_and_nothing_runs() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2exp", "prompt_timeout_s = 3\n");
    let t = env.config_pane(&ws, &cfg, "esc2exp", 160, 40);
    let marker = ws.join("expired-ran");
    t.line(&format!(
        "clear; lazaret-escalate -- touch {}; echo rc=$?",
        sh_quote(&marker.display().to_string())
    ));
    t.expect(QUESTION, Duration::from_secs(15));
    let shown = Instant::now();
    t.expect("rc=123", Duration::from_secs(20));
    eprintln!("expired {:?} after the prompt appeared", shown.elapsed());
    let screen = t.capture();
    assert!(screen.contains("the request expired and nothing ran"), "{screen}");
    assert!(screen.contains("expired"), "{screen}");
    assert!(!marker.exists());
    let log = audit(env, &ws);
    assert!(log.contains("result=expired"), "{log}");
    // The terminal is the session's again: typing reaches the shell.
    t.line("echo back-$((40+2))");
    t.expect("back-42", Duration::from_secs(10));
    t.line("exit");
}

// Covers OR-2.
#[test]
fn bursts_drain_and_junk_never_blocks_a_request() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2junk", &rule(&["true"], false));
    let q = "/.lazaret/mailbox/requests";
    let res = "/.lazaret/mailbox/results";
    // 200 signed records, renamed into the mailbox back to back.
    // A result's status is its byte 41 (after the length, the tag and the
    // id); 1 is `completed`.
    let burst = format!(
        r#"set -u
        {ID_OF}
        completed() {{ [ "$(tail -c +42 "$1" | head -c 1 | od -An -tu1 | tr -d ' ')" = 1 ]; }}
        mkdir /tmp/b; i=0
        while [ $i -lt 200 ]; do lazaret-escalate --print-request -- true > /tmp/b/$i; i=$((i+1)); done
        for f in /tmp/b/*; do n=$(id_of $f); cp $f {q}/.tmp-$n; echo $n >> /tmp/ids; done
        for n in $(cat /tmp/ids); do mv {q}/.tmp-$n {q}/$n.req; done
        t=0
        while [ $t -lt 600 ]; do
            c=0; for n in $(cat /tmp/ids); do [ -e {res}/$n.res ] && c=$((c+1)); done
            [ $c -eq 200 ] && break
            sleep 0.1; t=$((t+1))
        done
        echo answered=$c
        c=0; for n in $(cat /tmp/ids); do completed {res}/$n.res && c=$((c+1)); done
        echo completed=$c"#
    );
    let r = env.run_sh_with_config(&ws, &cfg, &burst);
    assert!(r.stdout.contains("answered=200"), "{r:?}");
    assert!(r.stdout.contains("completed=200"), "{r:?}");

    // Junk of every kind, 64 and then 10,000 of each; a legitimate request
    // is still answered.
    for n in [64, 10_000] {
        let junk = format!(
            r#"set -u
            cd {q}
            seq -f .tmp-junk%g 1 {n} | xargs touch
            seq -f dir%g 1 {n} | xargs mkdir
            seq -f %032g 1 {n} | sed 's/$/.req/' | xargs mkdir
            seq -f fifo%g 1 {n} | xargs mkfifo
            mkdir -p /tmp/l && seq -f /tmp/l/link%g 1 {n} | xargs sh -c 'ln -s "$@" {q}/' sh
            mkdir -p locked/a && touch locked/a/f && chmod 000 locked/a locked
            echo entries=$(ls -A | wc -l)
            s=$(date +%s%N)
            lazaret-escalate -- true; echo rc=$?
            e=$(date +%s%N)
            echo ms=$(( (e-s)/1000000 ))
            touch /workspace/junk-ready-{n}
            while [ ! -e /workspace/junk-checked-{n} ]; do sleep 0.2; done
            echo left-inside=$(ls -A | grep -v '^.tmp-' | wc -l)"#
        );
        let child = env.lz_sh(&ws, &junk).config_home(&cfg).spawn();
        let ready = ws.join(format!("junk-ready-{n}"));
        assert!(
            eventually(Duration::from_secs(600), || ready.exists()),
            "junk script never got through"
        );
        // What is left in the host's mailbox: the sandbox's own view of it
        // may be cached (and gVisor keeps FIFOs to itself). `requests/` is
        // a tmpfs in the supervisor's mount namespace: seen through it.
        let id = env.domain_id("default", &ws);
        let sup = json_number(&env.ps_json(&ws), &id, "supervisor_pid").expect("supervisor_pid");
        let host_requests = std::path::PathBuf::from(format!("/proc/{sup}/root")).join(
            env.runtime_root()
                .join(&id)
                .join("mailbox/requests")
                .strip_prefix("/")
                .unwrap(),
        );
        assert!(host_requests.is_dir(), "{}", host_requests.display());
        let mut left = Vec::new();
        let t = Instant::now();
        let cleared = eventually(Duration::from_secs(180), || {
            left = std::fs::read_dir(&host_requests)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| !n.starts_with(".tmp-"))
                        .collect()
                })
                .unwrap_or_default();
            left.is_empty()
        });
        eprintln!(
            "{n} of each kind: host mailbox clear {:?} after the request was answered",
            t.elapsed()
        );
        std::fs::write(ws.join(format!("junk-checked-{n}")), "").unwrap();
        let o = child.wait_with_output().unwrap();
        let r = crate::harness::Run::from(o);
        eprintln!("{n} junk entries of each kind: {}", r.stdout.replace('\n', " "));
        assert!(r.stdout.contains("rc=0"), "{r:?}");
        assert!(
            cleared,
            "junk left in the host mailbox: {} entries, e.g. {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
    }
}

// Covers FR-10.
#[test]
fn a_forged_record_naming_another_sessions_pending_id_leaves_it_alone() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2forge", "prompt_timeout_s = 120\n");
    let t = env.config_pane(&ws, &cfg, "esc2forge", 160, 40);
    let q = "/.lazaret/mailbox/requests";
    let ok = ws.join("a-ran");
    // Session A's request, submitted by hand so its id is known.
    t.line(&format!(
        "clear; {ID_OF}; lazaret-escalate --print-request -- touch {} > /tmp/a.rec; n=$(id_of /tmp/a.rec); \
         echo $n > /tmp/a.id; cp /tmp/a.rec {q}/.tmp-$n; mv {q}/.tmp-$n {q}/$n.req",
        sh_quote(&ok.display().to_string())
    ));
    t.expect(QUESTION, Duration::from_secs(15));
    // Session B forges a record under A's id: its own signed record with
    // the id (bytes 9..41) replaced, a hand-written one (a frame cut after
    // the id), and the former text format.
    let forge = format!(
        r#"set -u
        n=$(cat /tmp/a.id)
        lazaret-escalate --print-request -- touch /workspace/forged > /tmp/b.rec
        {{ head -c 9 /tmp/b.rec; printf %s $n; tail -c +42 /tmp/b.rec; }} > /tmp/f.rec
        cp /tmp/f.rec {q}/.tmp-f; mv {q}/.tmp-f {q}/$n.req; sleep 1
        printf '\045\000\000\000\001\040\000\000\000%s' $n > {q}/.tmp-h; mv {q}/.tmp-h {q}/$n.req; sleep 1
        printf 'LZESC1\nid %s\n' $n > {q}/.tmp-g; mv {q}/.tmp-g {q}/$n.req; sleep 1
        [ -e /.lazaret/mailbox/results/$n.res ] && echo LEAKED || echo untouched"#
    );
    let r = env.run_sh_with_config(&ws, &cfg, &forge);
    assert!(r.stdout.contains("untouched"), "{r:?}");
    assert!(!ws.join("forged").exists());
    // A's prompt is still up and still decides A's request.
    assert!(t.capture().contains(QUESTION), "{}", t.capture());
    std::thread::sleep(Duration::from_millis(600));
    t.line("yes");
    assert!(eventually(Duration::from_secs(10), || ok.exists()), "{}", t.capture());
    // The result's status byte (41): 1 is `completed`.
    t.line("clear; tail -c +42 /.lazaret/mailbox/results/$(cat /tmp/a.id).res | head -c 1 | od -An -tu1");
    t.expect_line("1", Duration::from_secs(10));
    t.line("exit");
}

// Covers OR-3.
#[test]
fn a_host_command_dies_with_a_killed_coordinator() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2orphan", &rule(&["sleep"], true));
    let needle = "sleep 300.123";
    let _c = env
        .lz(&ws, &["run", "--", "lazaret-escalate", "--", "sleep", "300.123"])
        .config_home(&cfg)
        .spawn_bg();
    assert!(
        eventually(Duration::from_secs(60), || !host_pids(env, needle).is_empty()),
        "host command never ran"
    );
    let id = env.domain_id("default", &ws);
    let hc = json_number(
        &env.lz(&ws, &["ps", "--json"]).config_home(&cfg).run().stdout,
        &id,
        "coordinator_pid",
    )
    .expect("coordinator pid");
    Command::new("kill").args(["-9", &hc.to_string()]).status().unwrap();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        host_pids(env, needle).is_empty(),
        "host command outlived the coordinator: {:?}",
        host_pids(env, needle)
    );
    eprintln!("checked {:?} after kill -9", t.elapsed());
    let r = env.lz(&ws, &["run", "--", "echo", "recovered"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.trim(), "recovered", "{r:?}");
}

/// Runs `script` with `sh -c` on the host, as the test user, in `dir`, with
/// no system or global Git config (so nothing there hardens host Git).
fn host_sh(env: &Env, dir: &Path, script: &str) -> crate::harness::Run {
    let o = host_command(env, dir, &["sh", "-c", script])
        .env("GIT_CEILING_DIRECTORIES", dir.parent().unwrap_or(dir))
        .output()
        .unwrap();
    crate::harness::Run::from(o)
}

// Covers SR-8.
#[test]
fn rules_fix_the_directory_shells_are_refused_and_host_git_is_hardened() {
    let (env, _g) = require_env!(shared);
    let rules = rule(&["ls"], false)
        + &rule_with(&["git", "status"], false, "cwd = \"bare\"\n")
        + &rule_with(
            &["git", "status", "--short"],
            false,
            "cwd = \"bare\"\nharden_git = false\n",
        );
    let (ws, cfg) = setup(env, "esc2rules", &rules);
    // Host Git ignores a repository shape in its cwd: an implicit bare
    // repository whose fsmonitor runs a command. The sandbox cannot leave
    // such a shape on the host (the view keeps Git dirs it makes
    // Domain-side), so the hostile shape is planted on the host, as the
    // user, before the Domain starts: the strongest case, a shape that
    // exists at start and that the sandbox can reach and name as its cwd.
    let bare = ws.join("bare");
    let b = bare.display().to_string();
    let plant = format!(
        "set -e; git init -q --bare {q}; mkdir {q}/wt; \
         git -C {q} config core.worktree wt; git -C {q} config core.bare false; \
         git -C {q} config core.fsmonitor 'touch fsmon-ran; false'; \
         git -C {q} config core.hooksPath {q}/hooks",
        q = sh_quote(&b)
    );
    let p = host_sh(env, &ws, &plant);
    assert_eq!(p.code, 0, "planting the host shape: {p:?}");
    let marker = bare.join("wt/fsmon-ran");

    // Another directory: not auto-approved (and with no terminal, denied).
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "mkdir -p /workspace/sub; cd /workspace/sub && lazaret-escalate -- ls; echo rc=$?; \
         cd /workspace && lazaret-escalate -- ls >/dev/null; echo rc=$?",
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"rc=126"), "{r:?}");
    assert_eq!(lines.get(1), Some(&"rc=0"), "{r:?}");

    // The sandbox itself cannot make such a shape on the host: the same
    // steps inside leave no repository host Git would take.
    let shape = "git init -q --bare /workspace/bare2; mkdir -p /workspace/bare2/wt; \
                 git -C /workspace/bare2 config core.worktree wt; git -C /workspace/bare2 config core.bare false; \
                 git -C /workspace/bare2 config core.fsmonitor 'touch fsmon-ran; false'; echo made";
    let r = env.run_sh_with_config(&ws, &cfg, shape);
    assert!(r.stdout.contains("made"), "{r:?}");
    let b2 = ws.join("bare2");
    let host_shape = b2.join("HEAD").exists()
        && (b2.join("commondir").exists() || (b2.join("objects").exists() && b2.join("refs").exists()));
    assert!(
        !host_shape && !b2.join(".git").exists(),
        "the sandbox left a repository shape on the host"
    );
    let h = host_sh(env, &ws, "cd bare2 && git status; echo rc=$?");
    assert!(
        !h.stdout.contains("rc=0"),
        "unhardened host git took the sandbox's shape: {h:?}"
    );
    assert!(
        !b2.join("wt/fsmon-ran").exists(),
        "host git ran the sandbox's fsmonitor: {h:?}"
    );

    // Broker-run host Git, hardened, ignores the hostile shape in its cwd.
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "cd /workspace/bare; rc=0; lazaret-escalate -- git status || rc=$?; echo rc=$rc",
    );
    assert!(r.stdout.contains("rc="), "{r:?}");
    assert!(!marker.exists(), "host git ran the planted fsmonitor: {r:?}");
    assert!(audit(env, &ws).contains("auto-approved"), "{}", audit(env, &ws));
    // Control: the rule that opts out of hardening shows the attack is real.
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "cd /workspace/bare; lazaret-escalate -- git status --short; echo rc=$?",
    );
    eprintln!("unhardened control: {r:?}");
    assert!(marker.exists(), "control did not trigger the fsmonitor: {r:?}");

    // A rule for a shell or an interpreter with a command string is refused at load.
    for (i, bad) in [
        rule(&["sh", "-c", "make test"], false),
        rule(&["bash"], true),
        rule(&["/usr/bin/python3", "-c", "print(1)"], false),
        rule(&["env"], true),
    ]
    .into_iter()
    .enumerate()
    {
        let (ws2, cfg2) = setup(env, &format!("esc2bad{i}"), &bad);
        let r = env.lz(&ws2, &["run", "--", "true"]).config_home(&cfg2).run();
        assert_ne!(r.code, 0, "{bad}: {r:?}");
        assert!(
            r.stderr.contains("escalation.auto_approve[0].argv")
                && r.stderr
                    .contains("expected a program that runs no file of the workspace"),
            "{bad}: {r:?}"
        );
    }
}

#[test]
fn changed_escalation_or_network_config_refuses_the_next_join() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esc2fp", &rule(&["true"], false));
    let file = cfg.join("lazaret/config.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    let mut first = env.lz(&ws, &["run", "--", "sleep", "120"]).config_home(&cfg).spawn_bg();
    let sock = env.runtime_root().join(env.domain_id("default", &ws)).join("hc.sock");
    assert!(eventually(Duration::from_secs(120), || sock.exists()));
    // Each join below must meet the first session's Domain: had it ended
    // (a failed start), a join would start a new Domain with the changed
    // configuration and prove nothing, so that is reported as such.
    let mut still_running = |when: &str| {
        if let Ok(Some(status)) = first.0.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(first.0.stderr.as_mut().unwrap(), &mut err);
            panic!("the first session ended ({status}) {when}; its stderr: {err}");
        }
    };
    let r = env.lz(&ws, &["run", "--", "true"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "unchanged config must join: {r:?}");
    for changed in [
        original.replace("[escalation]\n", "[escalation]\nprompt_timeout_s = 5\n"),
        original.replace("argv = [\"true\"]", "argv = [\"false\"]"),
        format!("[network]\ndefault_deny = [\"10.0.0.0/8\"]\n{original}"),
    ] {
        still_running("before a join with a changed configuration");
        env.write(&file, &changed);
        let r = env.lz(&ws, &["run", "--", "true"]).config_home(&cfg).run();
        still_running("during a join with a changed configuration");
        assert_ne!(r.code, 0, "{changed}: {r:?}");
        assert!(
            r.stderr.contains("changed since this Domain started"),
            "{changed}: {r:?}"
        );
    }
    env.write(&file, &original);
    let r = env.lz(&ws, &["run", "--", "true"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
}
