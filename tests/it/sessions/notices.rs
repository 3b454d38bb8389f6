//! Lazaret's notices never draw over a full-screen program (issue 48,
//! acceptance 2): a program in the alternate screen triggers an egress
//! refusal; its screen stays as it drew it until it leaves the alternate
//! screen (the leaving sequence split across two writes), and then the
//! notice appears once.
//!
//! Test safety: no packet leaves this machine. The profile's DNS is a
//! test host namespace (`net::sentinels::api_host`); the refused name is
//! refused by the gate's resolver, never resolved.

use std::time::Duration;

use crate::harness::{eventually, Tmux, GLOBAL};
use crate::require_env;

/// Inside: the alternate screen, five rows, a lookup of a name not in
/// `network.hosts`, a line saying so; then, after Enter, the leaving
/// sequence in two writes half a second apart, and a last line.
const TUI: &str = r#"
import socket, sys, time
def w(s):
    sys.stdout.write(s)
    sys.stdout.flush()
w("\x1b[?1049h\x1b[2J\x1b[H")
for i in range(5):
    w("TUI-ROW-%d\r\n" % i)
try:
    socket.getaddrinfo("denied.test", 443)
except Exception:
    pass
w("TUI-REFUSED\r\n")
sys.stdin.readline()
w("\x1b[?10")
time.sleep(0.5)
w("49l")
time.sleep(0.5)
w("AFTER-TUI\r\n")
time.sleep(3)
"#;

// Covers FR-8.
#[test]
fn notices_wait_while_a_full_screen_program_has_the_terminal() {
    let env = require_env!();
    let _g = GLOBAL.read();
    let base = env.dir("tui-notice");
    let k = (std::process::id() * 4 + 56) % 16000;
    let (api, _ca) = crate::net::sentinels::api_host(env, &base, k, "sk-unused-value");
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.tui.network]\ndns = [\"{a}\"]\nhosts = [\"api.test\"]\n",
            a = api.ip
        ),
    );
    let ws = env.dir("tui-notice-ws");
    let id = env.domain_id("tui", &ws);
    let cmd = env
        .pane_cmd(&ws, &["run", "-p", "tui", "--", "python3", "-c", TUI])
        .replacen(
            " TERM=xterm-256color ",
            &format!(
                " XDG_CONFIG_HOME={} TERM=xterm-256color ",
                crate::harness::sh_quote(&cfg.display().to_string())
            ),
            1,
        );
    let t = Tmux::new("tuinotice", 100, 30, &cmd);
    t.expect("TUI-REFUSED", Duration::from_secs(120));
    let drawn = t.capture();
    // The refusal is in the gate's log; the coordinator follows it at
    // least once a second and sends the notice.
    let log = env.runtime_root().join(&id).join("egress.log");
    assert!(
        eventually(Duration::from_secs(20), || std::fs::read_to_string(&log)
            .is_ok_and(|s| s.contains("denied.test"))),
        "no refusal logged: {}\n{}",
        log.display(),
        t.capture()
    );
    std::thread::sleep(Duration::from_secs(3));
    let held = t.capture();
    assert_eq!(held, drawn, "the full screen changed while it was up");
    for i in 0..5 {
        assert!(held.contains(&format!("TUI-ROW-{i}")), "{held}");
    }
    assert!(
        !held.contains("lazaret:"),
        "a notice drew over the full screen:\n{held}"
    );
    // The program leaves the alternate screen: the notice, once.
    t.enter();
    let notice = "lazaret: egress to denied.test:53 refused (not in network.hosts of profile tui)";
    t.expect(notice, Duration::from_secs(10));
    t.expect("AFTER-TUI", Duration::from_secs(10));
    t.expect("exit=0", Duration::from_secs(20));
    let after = t.capture();
    assert_eq!(after.matches(notice).count(), 1, "{after}");
    assert!(!after.contains("TUI-ROW-"), "the main screen is back:\n{after}");
    // And it is in `net log`.
    let r = env.lz(&ws, &["net", "log", "-p", "tui"]).config_home(&cfg).run();
    assert!(r.stdout.contains("denied.test:53"), "{r:?}");
}
