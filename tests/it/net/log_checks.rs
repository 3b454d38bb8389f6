//! `lazaret net log` shows the sandbox's own traffic; the Domain's own
//! start-up checks (the readiness probe init runs at boot, whose packets
//! the gate refuses like any other) only with `--all`, marked as such
//! (issue 48 item 10).
//!
//! Test safety: no packet leaves this machine. The profile's DNS is a
//! test host namespace (`net::sentinels::api_host`); the refused name is
//! refused by the gate's resolver, never resolved, and the probe's
//! packets never pass the router.

use crate::require_env;

/// Inside: a lookup of a name not in `network.hosts` (a real refusal).
const LOOKUP: &str = r#"
import socket
try:
    socket.getaddrinfo("refused-here.test", 443)
    print("resolved")
except Exception:
    print("refused")
"#;

const MARK: &str = "[the Domain's own start-up check]";

#[test]
fn net_log_hides_the_domains_own_start_up_checks_unless_all() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("log-checks");
    let k = (std::process::id() * 4 + 61) % 16000;
    let (api, _ca) = crate::net::sentinels::api_host(env, &base, k, "sk-unused-value");
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.checks.network]\ndns = [\"{a}\"]\nhosts = [\"api.test\"]\n",
            a = api.ip
        ),
    );
    let ws = env.dir("log-checks-ws");
    let id = env.domain_id("checks", &ws);
    // A fresh Domain: its first start ran the probe; the session's lookup
    // is the sandbox's one refusal.
    let r = env
        .lz_in(&ws, "checks", &["python3", "-c", LOOKUP])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("refused"), "{r:?}");
    let refusal = "refused  dns refused-here.test:53";

    // The log itself says whose each line is: the probe's are there.
    let raw = std::fs::read_to_string(env.runtime_root().join(&id).join("egress.log")).unwrap_or_default();
    let checks = raw.lines().filter(|l| l.ends_with("\tcheck")).count();
    assert!(checks > 0, "no line of the start-up checks in the log: {raw}");
    assert!(
        raw.lines()
            .any(|l| l.contains("\trefused-here.test\t") && l.ends_with("\tsandbox")),
        "{raw}"
    );

    // By default: the sandbox's refusal, none of the checks, and a word
    // that they were left out.
    let log = env.lz(&ws, &["net", "log", "-p", "checks"]).config_home(&cfg).run();
    assert_eq!(log.code, 0, "{log:?}");
    assert!(log.stdout.contains(refusal), "{log:?}");
    assert!(!log.stdout.contains(MARK), "{log:?}");
    let rows = log.stdout.lines().filter(|l| l.starts_with("  refused ")).count();
    assert_eq!(rows, 1, "only the sandbox's refusal: {log:?}");
    assert!(
        log.stdout
            .contains("entries of the Domain's own start-up checks not shown"),
        "{log:?}"
    );

    // With --all: the checks too, each marked; the refusal still there.
    let all = env
        .lz(&ws, &["net", "log", "-p", "checks", "--all"])
        .config_home(&cfg)
        .run();
    assert_eq!(all.code, 0, "{all:?}");
    assert!(all.stdout.contains(refusal), "{all:?}");
    let marked: Vec<&str> = all.stdout.lines().filter(|l| l.ends_with(MARK)).collect();
    assert!(!marked.is_empty(), "{all:?}");
    assert!(marked.iter().all(|l| !l.contains("refused-here.test")), "{all:?}");

    // The same in --json.
    let j = env
        .lz(&ws, &["net", "log", "-p", "checks", "--json"])
        .config_home(&cfg)
        .run();
    assert_eq!(j.code, 0, "{j:?}");
    assert!(j.stdout.contains("\"name\":\"refused-here.test\""), "{j:?}");
    assert!(!j.stdout.contains("\"origin\":\"check\""), "{j:?}");
    assert!(!j.stdout.contains("\"checks_hidden\":\"0\""), "{j:?}");
    let ja = env
        .lz(&ws, &["net", "log", "-p", "checks", "--json", "--all"])
        .config_home(&cfg)
        .run();
    assert_eq!(ja.code, 0, "{ja:?}");
    assert!(ja.stdout.contains("\"name\":\"refused-here.test\""), "{ja:?}");
    assert!(ja.stdout.contains("\"origin\":\"check\""), "{ja:?}");
    assert!(ja.stdout.contains("\"checks_hidden\":\"0\""), "{ja:?}");
    // `--all` belongs to `net log` only.
    let show = env
        .lz(&ws, &["net", "show", "-p", "checks", "--all"])
        .config_home(&cfg)
        .run();
    assert_eq!(show.code, 2, "{show:?}");
}
