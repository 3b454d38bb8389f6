//! A terminal session's command has a terminal with a name (issue 29,
//! item 8): `tty` prints `/dev/pts/N`, so `GPG_TTY=$(tty)` and programs
//! that reopen their terminal by name work; without a terminal `tty` says
//! so, as anywhere.

use std::process::Command;
use std::time::Duration;

use crate::harness::*;
use crate::require_env;

/// In an interactive session `tty` names a character device of the
/// sandbox's devpts (written to by name, it reaches the same screen) and
/// the shell's controlling terminal, and the session's exit status and
/// the host terminal's mode are kept; a second, joining session gets a
/// terminal of its own. Without a terminal, `tty` exits 1.
// Covers FR-14.
#[test]
fn a_terminal_session_has_a_tty_name() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("ttyname");
    let t = Tmux::new("ttyname", 100, 30, &env.pane_cmd(&ws, &["run"]));
    t.expect("root@lazaret", Duration::from_secs(120));
    t.line(
        "export GPG_TTY=$(tty); test -c \"$GPG_TTY\" && echo \"char-$GPG_TTY\"; \
         echo by-name-$((6*7)) > $GPG_TTY",
    );
    t.expect_line("by-name-42", Duration::from_secs(10));
    let screen = t.capture();
    let name = screen
        .lines()
        .find_map(|l| l.trim().strip_prefix("char-/dev/pts/"))
        .unwrap_or_else(|| panic!("tty names no /dev/pts device:\n{screen}"));
    assert!(name.parse::<u32>().is_ok(), "{screen}");
    // It is the shell's controlling terminal: bash has job control (it
    // says `no job control in this shell` otherwise; Ctrl-C of a
    // foreground job is sessions::terminals_resize_draw_interrupt_...).
    assert!(!screen.contains("job control"), "{screen}");
    // A joining session has a terminal of its own.
    let j = Tmux::new("ttyjoin", 100, 30, &env.pane_cmd(&ws, &["run"]));
    j.expect("root@lazaret", Duration::from_secs(60));
    j.line("echo \"second-$(tty)\"");
    j.expect("second-/dev/pts/", Duration::from_secs(10));
    assert!(
        !j.capture().contains(&format!("second-/dev/pts/{name}\n")),
        "{}",
        j.capture()
    );
    t.line("exit 4");
    t.expect("exit=4", Duration::from_secs(10));
    // The pane's shell writes stty-after just after `exit=4`.
    assert!(eventually(Duration::from_secs(5), || std::fs::read_to_string(
        ws.join("stty-after")
    )
    .is_ok_and(|s| s.ends_with('\n'))));
    assert_eq!(
        std::fs::read_to_string(ws.join("stty-before")).unwrap(),
        std::fs::read_to_string(ws.join("stty-after")).unwrap(),
        "the host terminal's mode is restored"
    );
    // A killed client's terminal session loses its processes, those in the
    // relay's inner session included (a background job that ignores the
    // hangup), while the other session runs on.
    let k = Tmux::new("ttykill", 100, 30, &env.pane_cmd(&ws, &["run"]));
    k.expect("root@lazaret", Duration::from_secs(60));
    k.line("nohup sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/tty-bg; echo bg-$((5*5))");
    k.expect_line("bg-25", Duration::from_secs(10));
    let bg = env
        .lz(&ws, &["run", "--", "cat", "/tmp/tty-bg"])
        .run()
        .stdout
        .trim()
        .to_string();
    assert!(bg.parse::<u32>().is_ok(), "{bg:?}");
    let pane: i32 = k
        .cmd(&["display-message", "-p", "-t", "t", "#{pane_pid}"])
        .trim()
        .parse()
        .unwrap();
    let client = processes()
        .into_iter()
        .find(|(pid, _, c)| c.contains("lazaret run") && descends_from(*pid, pane))
        .map(|p| p.0)
        .expect("the pane's lazaret client");
    Command::new("kill").args(["-9", &client.to_string()]).status().unwrap();
    let alive = || env.lz(&ws, &["run", "--", "kill", "-0", &bg]).run().code == 0;
    assert!(
        eventually(Duration::from_secs(10), || !alive()),
        "the killed session's background job survives"
    );
    j.line("echo still-$((8*8))");
    j.expect_line("still-64", Duration::from_secs(10));
    j.line("exit 3");
    j.expect("exit=3", Duration::from_secs(10));
    // No terminal: `tty` says so.
    let r = env.lz(&ws, &["run", "--", "tty"]).run();
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.stdout, "not a tty\n", "{r:?}");
}

/// Whether `ancestor` is `pid` or one of its ancestors.
fn descends_from(mut pid: i32, ancestor: i32) -> bool {
    while pid > 1 {
        if pid == ancestor {
            return true;
        }
        let Some(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok() else {
            return false;
        };
        let Some(p) = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1)?.parse().ok())
        else {
            return false;
        };
        pid = p;
    }
    false
}
