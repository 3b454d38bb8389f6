//! Host escalation: the agent asks, the developer decides.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{eventually, sh_quote, Env, Tmux};
use crate::require_env;

/// A workspace and a config home with escalation on, then `toml` (more
/// `[escalation]` keys and rules): `(ws, cfg)`. Shared with `adversarial` and `prompt`.
pub(crate) fn setup(env: &Env, name: &str, toml: &str) -> (PathBuf, PathBuf) {
    env.workspace_with_config(name, &format!("[escalation]\nenabled = true\n{toml}"))
}

/// An `[[escalation.auto_approve]]` rule for `argv`.
pub(crate) fn rule(argv: &[&str], trailing: bool) -> String {
    rule_with(argv, trailing, "")
}

/// [`rule`] with `more` (TOML keys) appended to the rule's table. A
/// program other than Git that gets trailing arguments gets the pattern
/// `*` (one word without `/`) unless `more` declares `trailing_args`.
pub(crate) fn rule_with(argv: &[&str], trailing: bool, more: &str) -> String {
    let list = argv.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
    let pats = if trailing && argv[0] != "git" && !more.contains("trailing_args") {
        "trailing_args = [\"*\"]\n"
    } else {
        ""
    };
    format!("[[escalation.auto_approve]]\nargv = [{list}]\nallow_trailing_args = {trailing}\n{pats}{more}")
}

/// The Domain's escalation audit log (empty when there is none yet).
pub(crate) fn audit(env: &Env, ws: &Path) -> String {
    let root = env
        .home
        .join(".local/share/lazaret/domains")
        .join(env.domain_id("default", ws));
    std::fs::read_to_string(root.join("audit.log")).unwrap_or_default()
}

/// A shell function printing the request id of a mailbox record (a
/// `wire::mailbox::RequestMsg::Submit` frame: `u32 length`, tag, then the
/// id as `u32 32` + 32 hex digits at bytes 9..41). Shared with
/// `adversarial` and `prompt`.
pub(crate) const ID_OF: &str = r#"id_of() { tail -c +10 "$1" | head -c 32; }"#;

/// `rec` has the shape of a request record: one frame exactly as long as
/// the file, the `Submit` tag, a 32-byte id of hex digits.
pub(crate) fn is_request_record(rec: &[u8]) -> bool {
    rec.len() > 41
        && u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]) as usize == rec.len() - 4
        && rec[4] == 1
        && rec[5..9] == 32u32.to_le_bytes()
        && rec[9..41].iter().all(|b| b.is_ascii_hexdigit())
}

fn host_git_version() -> String {
    let o = Command::new("git").arg("--version").output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

// Covers SR-8.
#[test]
fn auto_rules_match_exactly_and_trailing_args_only_when_granted() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(
        env,
        "escauto",
        &(rule(&["git", "--version"], false) + &rule(&["echo", "hi"], true)),
    );
    // Then the client's step trace, asked for once; and a reader that has
    // closed the pipe before the answer comes: the client gets EPIPE, not
    // SIGPIPE, and still exits with the host command's status.
    let script = "lazaret-escalate -- git --version; echo rc=$?; \
                  lazaret-escalate -- git --version --foo; echo rc=$?; \
                  lazaret-escalate -- echo hi there; echo rc=$?; \
                  git --version; \
                  LAZARET_ESCALATE_TRACE=1 lazaret-escalate -- echo hi traced; \
                  { lazaret-escalate -- echo hi piped; echo piped-rc=$? >&2; } | { exec 0<&-; sleep 1; }";
    let r = env.run_sh_with_config(&ws, &cfg, script);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.get(6), Some(&"hi traced"), "{r:?}");
    assert!(
        r.stderr.contains("piped-rc=0"),
        "a closed stdout must not end the client by SIGPIPE: {r:?}"
    );
    let trace: Vec<(&str, u64)> = r
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("lazaret-escalate: trace "))
        .map(|l| {
            let (step, us) = l.split_once(' ').expect("trace STEP MICROS");
            (step, us.parse().expect("microseconds"))
        })
        .collect();
    let steps: Vec<&str> = trace.iter().map(|t| t.0).collect();
    assert_eq!(
        steps,
        ["credential", "signed", "written", "answered", "printed"],
        "one traced request, its steps in order, and no trace from the others: {r:?}"
    );
    assert!(
        trace.windows(2).all(|w| w[0].1 <= w[1].1),
        "marks since the start: {trace:?}"
    );
    // The host's git answered, not the image's.
    assert_eq!(lines[0], host_git_version(), "{r:?}");
    assert_eq!(lines[1], "rc=0");
    assert_eq!(lines[2], "rc=126", "not auto-approved, non-interactive: denied {r:?}");
    assert!(r.stderr.contains("denied"), "{r:?}");
    assert_eq!(lines[3], "hi there");
    assert_eq!(lines[4], "rc=0");
    let a = audit(env, &ws);
    assert!(
        a.contains("auto-approved by rule 0") && a.contains("auto-approved by rule 1"),
        "{a}"
    );
}

fn pane_text(t: &Tmux) -> String {
    t.capture()
}

// Covers SR-7, FR-5, DX-4.
#[test]
fn prompts_appear_only_in_the_requesting_terminal_and_decide_the_outcome() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "escprompt", "");
    let pane = |name: &str| env.config_pane(&ws, &cfg, name, 120, 40);
    let a = pane("escA");
    let b = pane("escB");
    let marker = ws.join("edited-ran");

    // Approve: output and status come back to the asking client.
    a.line("clear; lazaret-escalate --justification 'need the host' -- sh -c 'echo from-host; exit 3'; echo rc=$?");
    assert!(
        a.wait_for("type yes, no or edit", Duration::from_secs(10)),
        "{}",
        pane_text(&a)
    );
    let shown = pane_text(&a);
    assert!(
        shown.contains("profile: default") && shown.contains("need the host"),
        "{shown}"
    );
    assert!(shown.contains("sh -c 'echo from-host; exit 3'"), "{shown}");
    assert!(
        !pane_text(&b).contains("type yes, no or edit"),
        "the other session saw the prompt"
    );
    // Keystrokes in the first 500 ms after the prompt appears are discarded.
    std::thread::sleep(Duration::from_millis(700));
    a.line("yes");
    assert!(a.wait_for("rc=3", Duration::from_secs(10)), "{}", pane_text(&a));
    assert!(pane_text(&a).contains("from-host"));

    // Deny: the documented code.
    a.line("clear; lazaret-escalate --justification step-two -- touch /tmp/never; echo rc=$?");
    assert!(
        a.wait_for("why:     step-two", Duration::from_secs(10)),
        "{}",
        pane_text(&a)
    );
    std::thread::sleep(Duration::from_millis(700));
    a.line("no");
    assert!(a.wait_for("rc=126", Duration::from_secs(10)), "{}", pane_text(&a));

    // Edit: the edited command is what runs and what is reported.
    a.line("clear; lazaret-escalate --justification step-three -- rm -rf /tmp/x; echo rc=$?");
    assert!(
        a.wait_for("why:     step-three", Duration::from_secs(10)),
        "{}",
        pane_text(&a)
    );
    std::thread::sleep(Duration::from_millis(700));
    a.line("edit");
    assert!(
        a.wait_for("command to run instead", Duration::from_secs(5)),
        "{}",
        pane_text(&a)
    );
    a.line(&format!("touch {}", marker.display()));
    assert!(
        a.wait_for("run the edited command?", Duration::from_secs(5)),
        "{}",
        pane_text(&a)
    );
    a.line("yes");
    assert!(a.wait_for("rc=0", Duration::from_secs(10)), "{}", pane_text(&a));
    assert!(marker.exists(), "the edited command did not run");
    let log = audit(env, &ws);
    assert!(log.contains("edited by the developer to: touch"), "{log}");
    assert!(
        log.contains("denied by the developer") && log.contains("approved by the developer"),
        "{log}"
    );
    assert!(
        !pane_text(&b).contains("lazaret: the sandbox asks"),
        "{}",
        pane_text(&b)
    );
    for t in [&a, &b] {
        t.line("exit");
    }
}

// Covers SR-9, SR-11, FR-10.
#[test]
fn forged_tampered_replayed_foreign_oversized_and_linked_records_are_rejected() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "escforge", &(rule(&["true"], false) + &rule(&["touch"], true)));
    let (ws2, cfg2) = setup(env, "escforge2", &rule(&["touch"], true));
    let marker = ws.join("forged-ran");
    let m = sh_quote(&marker.display().to_string());
    let m_signed = sh_quote(&ws.join("forged-rax").display().to_string());
    // A record signed by a session of another Domain, carried over by the
    // host as bytes.
    let r = env.run_sh_with_config(
        &ws2,
        &cfg2,
        &format!("lazaret-escalate --print-request -- touch {m} > /workspace/foreign.rec"),
    );
    let foreign = std::fs::read(ws2.join("foreign.rec")).unwrap_or_default();
    assert!(is_request_record(&foreign), "{r:?} {foreign:?}");
    // Session Y of this Domain leaves a record of its own in the shared /tmp.
    let _y = env
        .lz_sh(
            &ws,
            &format!("lazaret-escalate --print-request -- touch {m} > /tmp/y.rec; sleep 120"),
        )
        .config_home(&cfg)
        .spawn_bg();
    let q = "/.lazaret/mailbox/requests";
    let script = format!(
        r#"set -u
        {ID_OF}
        put() {{ n=$(id_of "$1"); cp "$1" {q}/.tmp-$n; mv {q}/.tmp-$n {q}/$n.req; }}
        while [ ! -s /tmp/y.rec ]; do sleep 0.1; done
        # hand-written: a frame header, the tag and an id, then nothing
        printf '\045\000\000\000\001\040\000\000\000%s' 0123456789abcdef0123456789abcdef > {q}/0123456789abcdef0123456789abcdef.req
        # the former text format
        printf 'LZESC1\nid %s\n' 0123456789abcdef0123456789abcdef > {q}/0123456789abcdef0123456789abcdee.req
        # tampered after signing: signed for {m_signed}, the path's last
        # byte changed to the marker's
        lazaret-escalate --print-request -- touch {m_signed} | LC_ALL=C sed 's#forged-rax#forged-ran#' > /tmp/t.rec
        put /tmp/t.rec
        # replayed: a valid record sent twice
        lazaret-escalate --print-request -- true > /tmp/r.rec
        put /tmp/r.rec; sleep 0.5; put /tmp/r.rec
        # signed with session Y's credential, claiming to be this session
        lazaret-escalate --print-request -- true > /tmp/me.rec
        # (bytes 73..113: session and client, each with its length)
        {{ head -c 73 /tmp/y.rec; tail -c +74 /tmp/me.rec | head -c 40; tail -c +114 /tmp/y.rec; }} > /tmp/x.rec
        put /tmp/x.rec
        # another Domain's
        put /workspace/foreign.rec
        # 10 MiB under a request's name, in one step (a temporary file that
        # large is deleted on sight before it could be renamed)
        truncate -s 10485760 {q}/fedcba9876543210fedcba9876543210.req
        # a symlink
        ln -s /etc/passwd {q}/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.req
        sleep 1
        # and a valid request still works
        lazaret-escalate -- true; echo rc=$?"#
    );
    std::fs::write(ws.join("foreign.rec"), &foreign).unwrap();
    env.chown(&ws.join("foreign.rec"));
    let r = env.run_sh_with_config(&ws, &cfg, &script);
    assert!(r.stdout.contains("rc=0"), "{r:?}");
    assert!(!marker.exists(), "a forged request ran");
    let log = audit(env, &ws);
    let rejected: Vec<&str> = log.lines().filter(|l| l.contains(" rejected ")).collect();
    for name in ["0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdee"] {
        assert!(
            rejected
                .iter()
                .any(|l| l.contains(name) && l.contains("malformed record")),
            "{name} not rejected as malformed:\n{log}"
        );
    }
    for why in [
        "frame ends inside a field",    // hand-written, and the former text format
        "signature does not match",     // tampered
        "replayed request id",          // replay
        "certificate speaks for",       // another session's credential
        "another Domain or generation", // another Domain's
        "over the limit",               // 10 MiB
        "cannot open",                  // symlink
    ] {
        assert!(
            rejected.iter().any(|l| l.contains(why)),
            "no rejection for {why:?}:\n{log}"
        );
    }
}

/// The test user's processes whose command line is exactly `needle`.
pub(crate) fn host_pids(env: &Env, needle: &str) -> Vec<i32> {
    crate::harness::processes()
        .into_iter()
        .filter(|(_, u, c)| u.first() == Some(&env.uid) && c.trim_end() == needle)
        .map(|p| p.0)
        .collect()
}

// Covers OR-3.
#[test]
fn a_killed_client_cancels_its_host_command_and_never_blocks_others() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esckill", &(rule(&["sleep"], true) + &rule(&["echo"], true)));
    // Session A: interactive, with a prompt left pending.
    let a = env.config_pane(&ws, &cfg, "esckillA", 100, 30);
    a.line("lazaret-escalate -- cat /etc/hostname");
    a.expect("type yes, no or edit", Duration::from_secs(10));
    // Session B is answered at once while A's prompt is up.
    let t = Instant::now();
    let r = env
        .lz(&ws, &["run", "--", "lazaret-escalate", "--", "echo", "quick"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.stdout.trim(), "quick", "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "B waited {:?}", t.elapsed());
    // Session C runs a long host command, then its client is killed.
    let mut c = env
        .lz(&ws, &["run", "--", "lazaret-escalate", "--", "sleep", "37"])
        .config_home(&cfg)
        .spawn_bg();
    assert!(
        eventually(Duration::from_secs(20), || !host_pids(env, "sleep 37").is_empty()),
        "host command never ran"
    );
    Command::new("kill")
        .args(["-9", &c.0.id().to_string()])
        .status()
        .unwrap();
    let _ = c.0.wait();
    let t = Instant::now();
    assert!(
        eventually(Duration::from_secs(2), || host_pids(env, "sleep 37").is_empty()),
        "host command survived"
    );
    eprintln!("host group gone after {:?}", t.elapsed());
    // The broker records the outcome after the group is killed: wait for
    // the record rather than race it.
    assert!(
        eventually(Duration::from_secs(5), || audit(env, &ws).contains("result=cancelled")),
        "{}",
        audit(env, &ws)
    );
    std::thread::sleep(Duration::from_millis(700));
    a.line("no");
    a.line("exit");
}

// Covers OR-2.
#[test]
fn timeouts_kill_and_output_limits_truncate() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(
        env,
        "esclimit",
        &(rule(&["sleep"], true)
            + &rule_with(
                &["head"],
                true,
                "trailing_args = [\"-c\", \"3000000\", \"/dev/zero\"]\n",
            )),
    );
    let r = env.run_sh_with_config(&ws, &cfg, "lazaret-escalate --timeout 1 -- sleep 30; echo rc=$?");
    assert!(r.stdout.contains("rc=124"), "{r:?}");
    assert!(r.stderr.contains("timed-out"), "{r:?}");
    assert!(host_pids(env, "sleep 30").is_empty());
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "lazaret-escalate -- head -c 3000000 /dev/zero | wc -c; echo rc=$?",
    );
    assert!(r.stdout.contains("1048576"), "{r:?}");
    assert!(r.stderr.contains("stdout truncated at 1048576 bytes"), "{r:?}");
}

#[test]
fn no_key_material_is_reachable_inside_or_left_behind() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = setup(env, "esckeys", &rule(&["true"], false));
    let id = env.domain_id("default", &ws);
    let run_dir = env.runtime_root().join(&id);
    // The session's own credential file is the only place its key is:
    // not in any environment, nowhere else on the filesystem.
    let r = env.run_sh_with_config(&ws, &cfg, "grep -rlsI 'PRIVATE KEY' / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head; \
                 k=$(cut -d. -f1 \"$LAZARET_ESCALATION_CREDENTIAL_FILE\"); [ -n \"$k\" ] || echo no-key; \
                 grep -rlsF \"$k\" / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | grep -vxF \"$LAZARET_ESCALATION_CREDENTIAL_FILE\" | head; \
                 env | grep -F \"$k\"; echo scanned");
    assert_eq!(r.stdout.trim(), "scanned", "key material visible inside: {r:?}");
    // On the host: the runtime dir is closed to other users, and nothing
    // with key material remains after teardown.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&run_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(eventually(Duration::from_secs(3), || !run_dir.join("hc.sock").exists()));
    let root = env.home.join(".local/share/lazaret/domains").join(&id);
    for dir in [&run_dir, &root] {
        let out = Command::new("grep")
            .args(["-rlsI", "PRIVATE KEY"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    }
    assert!(
        eventually(Duration::from_secs(3), || !run_dir.join("mailbox").exists()),
        "mailbox left behind"
    );
}
