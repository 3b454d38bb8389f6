//! Faults and load: a slow client, a full disk, a dead helper, a hostile
//! store. Each test performs the fault and checks what the user is told.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{eventually, Bg, Env, GLOBAL};
use crate::require_env;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn skip(test: &str, why: &str) {
    if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
        panic!("{test}: cannot run ({why}) and LAZARET_MUST_WORK=1");
    }
    eprintln!("skipping: {test}: {why}");
}

/// Starts a Domain held open by a long session; returns once it is published.
fn hold_domain(env: &Env, ws: &Path) -> Bg {
    let bg = env.lz(ws, &["run", "--", "sleep", "600"]).spawn_bg();
    let sock = env.runtime_root().join(env.domain_id("default", ws)).join("hc.sock");
    assert!(
        eventually(Duration::from_secs(120), || sock.exists()),
        "the Domain was never published"
    );
    bg
}

/// A client whose first read is delayed 400 ms finds Welcome, its output,
/// Exit and end-of-file all in one buffer: it must show all of them.
#[test]
fn a_slow_reader_gets_its_output_and_exit_status() {
    let env = require_env!();
    if !have("strace") {
        return skip("a_slow_reader_gets_its_output_and_exit_status", "strace is not installed");
    }
    let _g = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
    let ws = env.dir("slowread");
    let _hold = hold_domain(env, &ws);
    let mut failures = Vec::new();
    for i in 0..20 {
        let lz = env.lz(&ws, &["run", "--", "sh", "-c", &format!("echo out-{i}; exit 7")]);
        let inner = lz.command();
        // strace (as root) traces only the client: the Domain is running.
        let mut c = Command::new("strace");
        c.args([
            "-qq",
            "-o",
            "/dev/null",
            "-e",
            "trace=recvfrom",
            "-e",
            "inject=recvfrom:delay_enter=400000:when=1",
            "--",
        ])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env_clear()
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(&ws);
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let code = out.status.code().unwrap_or(-1);
        if code != 7 || !stdout.contains(&format!("out-{i}")) {
            failures.push(format!(
                "join {i}: exit {code}, stdout {stdout:?}, stderr {:?}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{} of 20 slow joins lost data:\n{}", failures.len(), failures.join("\n"));
}
