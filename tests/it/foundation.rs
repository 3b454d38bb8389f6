//! `lazaret run`: the rootless sandbox end to end.

use std::time::Duration;

use crate::harness::{self, eventually, owner, processes_mentioning, sh_quote, Tmux, GLOBAL};
use crate::require_env;

// Covers SR-1, OR-4.
#[test]
fn proc_version_is_gvisor_and_exit_status_passes_through() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("version");
    let r = env.lz(&ws, &["run", "--", "cat", "/proc/version"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    // gVisor reports its own fixed kernel string, not the host's.
    let host = std::fs::read_to_string("/proc/version").unwrap();
    assert!(r.stdout.starts_with("Linux version 4.4.0"), "{r:?}");
    assert_ne!(r.stdout, host);
    let r = env.run_sh(&ws, "exit 7");
    assert_eq!(r.code, 7, "{r:?}");
}

// Covers FR-3.
#[test]
fn workspace_is_shared_both_ways_and_owned_by_the_user() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("share");
    env.write(&ws.join("from-host.txt"), "hello from host\n");
    let r = env.run_sh(
        &ws,
        "cat /workspace/from-host.txt && pwd && echo inside > /workspace/from-sandbox.txt",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("hello from host"), "{r:?}");
    // Inside, the workspace is at its own host path (`/workspace` leads there).
    assert!(
        r.stdout.contains(&format!("{}\n", ws.display())),
        "cwd is the workspace: {r:?}"
    );
    let p = ws.join("from-sandbox.txt");
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "inside\n");
    assert_eq!(
        owner(&p),
        env.uid,
        "a file written inside belongs to the user on the host"
    );
}

// Covers SR-2, SR-3.
#[test]
fn host_home_is_invisible_and_mountinfo_shows_only_the_workspace() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("secret");
    let secret = env.home.join(".ssh/id_test");
    env.write(&secret, "SECRET-KEY-MATERIAL\n");
    let script = format!(
        "cat {} 2>&1; ls {} 2>&1; echo ---; cat /proc/1/mountinfo",
        sh_quote(&secret.display().to_string()),
        sh_quote(&env.home.display().to_string())
    );
    let r = env.run_sh(&ws, &script);
    assert!(!r.stdout.contains("SECRET-KEY-MATERIAL"), "{r:?}");
    assert!(r.stdout.contains("No such file"), "{r:?}");
    let mountinfo = r.stdout.split("---\n").nth(1).expect("mountinfo printed");
    let ws_real = std::fs::canonicalize(&ws).unwrap().display().to_string();
    for line in mountinfo.lines() {
        for field in line.split_whitespace() {
            if field.starts_with('/')
                && (field.starts_with(&env.home.display().to_string()) || field.starts_with("/tmp/lazaret"))
            {
                assert!(field.starts_with(&ws_real), "host path {field} visible inside: {line}");
            }
        }
    }
    // The same check from the other direction: nothing of the storage root
    // or runtime dir is named inside.
    assert!(!mountinfo.contains(".local/share/lazaret"), "{mountinfo}");
}

// Covers SR-1, SR-12, FR-12.
#[test]
fn nothing_runs_as_host_root_while_the_sandbox_runs() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("noroot");
    let id = env.domain_id("default", &ws);
    let child = env.lz(&ws, &["run", "--", "sleep", "4"]).spawn();
    // Wait until the sandbox's own processes (sentry and gofer) are up, not
    // only runsc: under load the sentry appears well after `runsc run`.
    assert!(
        eventually(Duration::from_secs(20), || {
            let all = processes_mentioning(&id);
            all.iter()
                .any(|(_, _, c)| c.contains("runsc-gofer") || c.contains("gofer"))
                && all
                    .iter()
                    .any(|(_, _, c)| c.contains("runsc-sandbox") || c.contains("boot"))
        }),
        "the sandbox did not start"
    );
    let ws_s = ws.display().to_string();
    let procs: Vec<_> = harness::processes()
        .into_iter()
        .filter(|(_, _, c)| c.contains(&id) || c.contains(&ws_s))
        .collect();
    let mut roles = Vec::new();
    for (pid, uids, cmd) in &procs {
        assert!(!uids.is_empty());
        assert!(
            uids.iter().all(|&u| u != 0),
            "pid {pid} runs with host uid 0: {uids:?} {cmd}"
        );
        roles.push(cmd.split_whitespace().next().unwrap_or("").to_string());
    }
    // Every role is among them: coordinator, supervisor, runsc run and the
    // sandbox's own processes (gofer, sentry).
    let all = procs.iter().map(|p| p.2.clone()).collect::<Vec<_>>().join("\n");
    assert!(all.contains("lazaret:[coordinator]"), "{all}");
    assert!(all.contains("lazaret:[supervisor]"), "{all}");
    assert!(all.contains("runsc-gofer") || all.contains("gofer"), "{all}");
    assert!(all.contains("runsc-sandbox") || all.contains("boot"), "{all}");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
}

// Covers OR-6.
#[test]
fn nothing_is_left_behind_after_run_returns() {
    let env = require_env!();
    // Looks at every process and mount of the test user: run alone.
    let _g = GLOBAL.write();
    let ws = env.dir("leftover");
    let id = env.domain_id("default", &ws);
    let r = env.run_sh(&ws, "sleep 0.2 & echo started");
    assert_eq!(r.code, 0, "{r:?}");
    let gone = eventually(Duration::from_secs(3), || {
        harness::processes().iter().all(|(_, uids, cmd)| {
            !(uids.first() == Some(&env.uid) && (cmd.contains("lazaret") || cmd.contains("runsc")))
        })
    });
    let left: Vec<_> = harness::processes()
        .into_iter()
        .filter(|(_, uids, cmd)| uids.first() == Some(&env.uid) && (cmd.contains("lazaret") || cmd.contains("runsc")))
        .collect();
    assert!(gone, "processes left behind: {left:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&ws.display().to_string()) && !mounts.contains("/tmp/lazaret-"),
        "{mounts}"
    );
    let run_dir = env.runtime_root().join(&id);
    let runsc_root = run_dir.join("runsc");
    let state: Vec<_> = std::fs::read_dir(&runsc_root)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        state.is_empty(),
        "runsc state left in {}: {state:?}",
        runsc_root.display()
    );
    assert!(!run_dir.join("hc.sock").exists(), "the Domain is still published");
    assert!(!run_dir.join("gen").exists(), "generation files left behind");
}

// Covers SR-2, DX-5.
#[test]
fn bad_input_is_refused_with_a_clear_message_and_exit_2() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("badinput");

    let bad = env.write_config(&base, "[profiles.default]\npersist = \"usr\"\n");
    let r = env.lz(&ws, &["run", "--", "true"]).config_home(&bad).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("config.toml:2") && r.stderr.contains("persist"),
        "{r:?}"
    );

    let syntax = env.write_config(&base.join("s"), "[profiles.default\n");
    let r = env.lz(&ws, &["run", "--", "true"]).config_home(&syntax).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("config.toml:1"), "{r:?}");

    // A config file inside the workspace is refused.
    let inside = env.write_config(&ws, "[profiles.default]\n");
    let r = env.lz(&ws, &["run", "--", "true"]).config_home(&inside).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("workspace"), "{r:?}");

    let r = env.lz(&ws, &["run", "--frobnicate", "--", "true"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--frobnicate"), "{r:?}");

    let r = env
        .lz(&ws, &["run", "--workspace", "/nonexistent/lazaret-ws", "--", "true"])
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("/nonexistent/lazaret-ws") && r.stderr.contains("does not exist"),
        "{r:?}"
    );

    let r = env.lz_in(&ws, "nope", &["true"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("nope"), "{r:?}");

    // Nothing was started for any of them.
    let id = env.domain_id("default", &ws);
    assert!(!env.runtime_root().join(&id).join("hc.sock").exists());
    assert!(processes_mentioning(&id).is_empty());
}

#[test]
fn missing_image_is_bad_input() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("noimage");
    let data = env.dir("emptydata");
    let r = env
        .lz(&ws, &["run", "--", "true"])
        .env("XDG_DATA_HOME", &data.display().to_string())
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("lazaret image build"), "{r:?}");
}

// Covers SR-1.
#[test]
fn refuses_to_run_as_root() {
    let env = require_env!();
    let out = std::process::Command::new(env.bin.join("lazaret"))
        .args(["run", "--", "true"])
        .current_dir("/tmp")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to run as root"));
}

// Covers FR-8, DX-5.
#[test]
fn interactive_shell_under_tmux_sizes_and_restores_the_terminal() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("tty");
    let before = ws.join("stty-before");
    let after = ws.join("stty-after");
    let cmd = env.pane_cmd(&ws, &["run"]);
    let t = Tmux::new("tty", 111, 33, &cmd);
    t.expect_saying("root@lazaret", Duration::from_secs(120), "no prompt:");
    let size = t.cmd(&["display-message", "-p", "-t", "t", "#{pane_height} #{pane_width}"]);
    t.line("stty size");
    assert!(
        t.wait_for_line(size.trim(), Duration::from_secs(10)),
        "want {size}:\n{}",
        t.capture()
    );
    t.line("exit 3");
    t.expect("exit=3", Duration::from_secs(10));
    // The shell creates the file before `stty -g` has written to it.
    assert!(eventually(Duration::from_secs(5), || std::fs::read_to_string(&after)
        .is_ok_and(|s| s.ends_with('\n'))));
    assert_eq!(
        std::fs::read_to_string(&before).unwrap(),
        std::fs::read_to_string(&after).unwrap()
    );
}
