//! Faults and load: a slow client, a full disk, a dead helper, a hostile
//! store. Each test performs the fault and checks what the user is told.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{eventually, json_number, Bg, Env, GLOBAL};
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
    env.wait_published("default", ws, Duration::from_secs(120));
    bg
}

/// A client whose first read is delayed 400 ms finds Welcome, its output,
/// Exit and end-of-file all in one buffer: it must show all of them.
#[test]
fn a_slow_reader_gets_its_output_and_exit_status() {
    let env = require_env!();
    if !have("strace") {
        return skip(
            "a_slow_reader_gets_its_output_and_exit_status",
            "strace is not installed",
        );
    }
    let _g = GLOBAL.read();
    let ws = env.dir("slowread");
    let _hold = hold_domain(env, &ws);
    let mut failures = Vec::new();
    for i in 0..20 {
        let lz = env.lz_sh(&ws, &format!("echo out-{i}; exit 7"));
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
    assert!(
        failures.is_empty(),
        "{} of 20 slow joins lost data:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn domain_run_dir(env: &Env, ws: &Path) -> std::path::PathBuf {
    env.runtime_root().join(env.domain_id("default", ws))
}

/// The string value after `"key":"` in `ps --json` for the Domain.
fn json_str(json: &str, domain: &str, key: &str) -> Option<String> {
    let at = json.find(domain)?;
    let obj = &json[json[..at].rfind('{')?..];
    let k = format!("\"{key}\":\"");
    let v = &obj[obj.find(&k)? + k.len()..];
    Some(v[..v.find('"')?].to_string())
}

fn says_ready(env: &Env, ws: &Path) -> bool {
    let id = env.domain_id("default", ws);
    json_str(&env.ps_json(ws), &id, "phase").as_deref() == Some("ready")
}

/// The pids of the Domain's processes whose command line starts with `prog`.
fn helper_pids(env: &Env, ws: &Path, prog: &str) -> Vec<i32> {
    env.domain_processes(ws)
        .into_iter()
        .filter(|(_, _, c)| c.split_whitespace().next().is_some_and(|a| a.ends_with(prog)))
        .map(|(p, _, _)| p)
        .collect()
}

/// Aborts the FUSE connection of the workspace view (mounted in the
/// supervisor's mount namespace) through a private fusectl mount.
fn abort_view(env: &Env, ws: &Path) -> bool {
    let id = env.domain_id("default", ws);
    let Some(sup) = json_number(&env.ps_json(ws), &id, "supervisor_pid") else {
        return false;
    };
    let Ok(mi) = std::fs::read_to_string(format!("/proc/{sup}/mountinfo")) else {
        return false;
    };
    // fields: id parent major:minor root mountpoint ... - fstype source
    let Some(minor) = mi.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fstype, source) = (post.next()?, post.next()?);
        (fstype == "fuse" && source == "lazaret")
            .then(|| pre.split_whitespace().nth(2)?.split(':').nth(1).map(String::from))?
    }) else {
        return false;
    };
    Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!(
                "mount -t fusectl none /sys/fs/fuse/connections && echo 1 > /sys/fs/fuse/connections/{minor}/abort"
            ),
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Kills (or aborts) one helper of a published Domain: `ps` stops saying
/// ready, the running session is told in one line which helper died, and
/// the next run starts a fresh generation.
fn helper_death(helper: &str, driver: &str) {
    let (env, _g) = require_env!(shared);
    let ws = env.dir(&format!("helper-{}", helper.replace(' ', "-")));
    // The session is running (blocked in a shell builtin, nothing left to
    // exec) before the helper dies: it must be told, not fail to start.
    let hold = env
        .lz_sh(&ws, "touch started; read x")
        .env("LAZARET_OVERLAY_DRIVER", driver)
        .spawn();
    let sock = domain_run_dir(env, &ws).join("hc.sock");
    assert!(eventually(Duration::from_secs(120), || sock.exists() && says_ready(env, &ws)));
    assert!(eventually(Duration::from_secs(60), || ws.join("started").exists()));
    let done = if helper == "view" {
        abort_view(env, &ws)
    } else {
        let pids = helper_pids(env, &ws, helper);
        assert!(!pids.is_empty(), "no {helper} in {:?}", env.domain_processes(&ws));
        Command::new("kill")
            .arg("-9")
            .arg(pids[0].to_string())
            .status()
            .unwrap()
            .success()
    };
    if !done && helper == "view" {
        drop(hold);
        return skip(
            "helper_death(view)",
            "cannot abort the view's FUSE connection (fusectl)",
        );
    }
    assert!(done, "could not kill {helper}");
    let t = std::time::Instant::now();
    assert!(
        eventually(Duration::from_secs(10), || !says_ready(env, &ws)),
        "ps still says ready after {helper} died"
    );
    eprintln!("{helper}: ps stopped saying ready after {:?}", t.elapsed());
    let net = env.lz(&ws, &["net", "show", "--json"]).run();
    assert!(
        net.stdout.contains("\"running\":false") && net.stdout.contains("\"readiness\":null"),
        "net show still reports the broken generation: {net:?}"
    );
    let out = hold.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    let name = if helper == "view" { "FUSE session" } else { helper };
    assert!(err.contains("helper") && err.contains(name), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    // The next run works without manual cleanup.
    let r = env.lz(&ws, &["run", "--", "echo", "fresh"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("fresh"), "{r:?}");
}

#[test]
fn a_dead_fuse_overlayfs_fails_the_domain_cleanly() {
    helper_death("fuse-overlayfs", "fuse");
}

// Covers FR-16.
#[test]
fn a_dead_slirp4netns_fails_the_domain_cleanly() {
    helper_death("slirp4netns", "kernel");
}

#[test]
fn an_aborted_workspace_view_fails_the_domain_cleanly() {
    helper_death("view", "kernel");
}

/// A killed sandbox is Lazaret's failure (125, one sentence), never a
/// status the command could have returned.
// Covers DX-5.
#[test]
fn a_killed_sandbox_exits_125_with_one_sentence() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("killsandbox");
    let hold = env.lz(&ws, &["run", "--", "sleep", "600"]).spawn();
    let sock = domain_run_dir(env, &ws).join("hc.sock");
    assert!(eventually(Duration::from_secs(120), || sock.exists() && says_ready(env, &ws)));
    let id = env.domain_id("default", &ws);
    let sandbox = json_str(&env.ps_json(&ws), &id, "sandbox_id").unwrap();
    let boot: Vec<i32> = crate::harness::processes()
        .into_iter()
        .filter(|(_, _, c)| c.contains("runsc-sandbox") && c.contains(&sandbox))
        .map(|(p, _, _)| p)
        .collect();
    assert!(!boot.is_empty(), "no sandbox process for {sandbox}");
    Command::new("kill")
        .arg("-9")
        .arg(boot[0].to_string())
        .status()
        .unwrap();
    let out = hold.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    // Exactly one line, Lazaret's sentence: runsc's own error (`urpc method
    // "containerManager.WaitPID" failed: EOF`) goes to the coordinator log.
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("lazaret: ") && lines[0].contains("the sandbox stopped unexpectedly"),
        "{err}"
    );
    assert!(!err.contains("urpc") && !err.contains("runsc"), "{err}");
    let r = env.lz(&ws, &["run", "--", "echo", "fresh"]).run();
    assert_eq!(r.code, 0, "{r:?}");
}

/// SIGQUIT to a pipe-mode client reaches the command, and no Go runtime
/// dump reaches the user.
// Covers FR-15.
#[test]
fn sigquit_reaches_the_command_without_a_goroutine_dump() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("sigquit");
    let _hold = hold_domain(env, &ws);
    let c = env
        .lz_sh(&ws, "trap 'echo got-quit; exit 3' QUIT; echo armed; sleep 60 & wait")
        .spawn();
    let pid = c.id();
    std::thread::sleep(Duration::from_secs(3));
    Command::new("kill").args(["-QUIT", &pid.to_string()]).status().unwrap();
    let out = c.wait_with_output().unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !se.contains("goroutine") && !se.contains("SIGQUIT"),
        "a Go dump reached the user: {se}"
    );
    assert!(so.contains("got-quit"), "the command never saw SIGQUIT: {so} / {se}");
    assert_eq!(out.status.code(), Some(3), "{so} / {se}");
}

/// A store with a hostile schema version or a damaged page is refused with
/// its path and a fix (125), never a panic, never silently re-created.
// Covers FR-21.
#[test]
fn hostile_and_damaged_stores_fail_closed() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("badstore");
    let r = env.lz(&ws, &["run", "--", "true"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    let store = env
        .home
        .join(".local/share/lazaret/domains")
        .join(env.domain_id("default", &ws))
        .join("store.sqlite");
    let sock = domain_run_dir(env, &ws).join("hc.sock");
    assert!(eventually(Duration::from_secs(20), || !sock.exists()));
    let good = std::fs::read(&store).unwrap();
    let known: i64 = rusqlite::Connection::open(&store)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let check = |what: &str| {
        let r = env.lz(&ws, &["run", "--", "true"]).run();
        assert_eq!(r.code, 125, "{what}: {r:?}");
        assert!(
            r.stderr.contains(&store.display().to_string()),
            "{what}: no path: {r:?}"
        );
        assert!(
            r.stderr.contains("upgrade lazaret") || r.stderr.contains("restore it from a backup"),
            "{what}: no fix: {r:?}"
        );
        assert!(!r.stderr.contains("panicked"), "{what}: {r:?}");
    };
    for v in [-1, 4, known + 1, 99] {
        if (0..=known).contains(&v) {
            continue;
        }
        std::fs::write(&store, &good).unwrap();
        let c = rusqlite::Connection::open(&store).unwrap();
        c.pragma_update(None, "user_version", v).unwrap();
        drop(c);
        check(&format!("user_version {v}"));
    }
    // A damaged page.
    let mut bytes = good.clone();
    if bytes.len() >= 2 * 4096 {
        for b in &mut bytes[4096..2 * 4096] {
            *b = 0xa5;
        }
    } else {
        for b in &mut bytes[16..100] {
            *b = 0xa5;
        }
    }
    std::fs::write(&store, &bytes).unwrap();
    check("a damaged page");
    // A zero-length store is not silently re-created.
    std::fs::write(&store, b"").unwrap();
    check("a zero-length store");
    assert_eq!(std::fs::metadata(&store).unwrap().len(), 0);
    // `state verify` reports the damage too.
    let v = env.lz(&ws, &["state", "verify"]).run();
    assert_ne!(v.code, 0, "state verify passed a zero-length store: {v:?}");
    std::fs::write(&store, &good).unwrap();
    let r = env.lz(&ws, &["run", "--", "true"]).run();
    assert_eq!(r.code, 0, "restored: {r:?}");
}

/// After the supervisor is killed, the next generation's start and stop
/// leave no file of the dead generation in the runtime dir.
// Covers FR-7.
#[test]
fn a_killed_supervisor_leaves_nothing_in_the_runtime_dir() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("killsup");
    let hold = env.lz(&ws, &["run", "--", "sleep", "600"]).spawn();
    let run = domain_run_dir(env, &ws);
    assert!(eventually(Duration::from_secs(120), || run.join("hc.sock").exists()
        && says_ready(env, &ws)));
    let id = env.domain_id("default", &ws);
    let ps = env.ps_json(&ws);
    let sandbox = json_str(&ps, &id, "sandbox_id").unwrap();
    let sup = json_number(&ps, &id, "supervisor_pid").unwrap();
    Command::new("kill").args(["-9", &sup.to_string()]).status().unwrap();
    let out = hold.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.trim_end().lines().last().unwrap_or("").starts_with("lazaret: "),
        "{err}"
    );
    let r = env.lz(&ws, &["run", "--", "echo", "next"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(eventually(Duration::from_secs(20), || !run.join("hc.sock").exists()));
    assert!(eventually(Duration::from_secs(20), || env
        .domain_processes(&ws)
        .is_empty()));
    let mut left = Vec::new();
    let mut stack = vec![run.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.contains(&sandbox) || n.starts_with("hc.sock.") {
                left.push(e.path());
            }
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(e.path());
            }
        }
    }
    assert!(left.is_empty(), "files of the dead generation remain: {left:?}");
    let runsc_left: Vec<_> = std::fs::read_dir(run.join("runsc"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(runsc_left.is_empty(), "runsc state remains: {runsc_left:?}");
}

/// Mounts made for one test, undone (lazily) when it ends.
struct Mounts(Vec<std::path::PathBuf>);

impl Drop for Mounts {
    fn drop(&mut self) {
        for m in self.0.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

fn root_ok(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn find_file(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let ft = e.file_type().ok()?;
        if ft.is_file() && e.file_name() == name {
            return Some(p);
        }
        if ft.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        }
    }
    None
}

/// A full disk under the State Anchor: the writer is told ENOSPC and the
/// file on the host is what the writer was told; a reset on the full disk
/// leaves `state verify` clean once space returns.
#[test]
fn a_full_disk_is_reported_to_the_writer_and_reset_leaves_no_debris() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("enospc");
    let data = base.join("data");
    let store = data.join("lazaret");
    let mine = env.home.join(".local/share/lazaret");
    for d in ["domains", "images", "lowers"] {
        std::fs::create_dir_all(store.join(d)).unwrap();
    }
    for d in [
        &data,
        &store,
        &store.join("domains"),
        &store.join("images"),
        &store.join("lowers"),
    ] {
        env.chown(d);
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let domains = store.join("domains");
    let mut mounts = Mounts(Vec::new());
    // The image and its prepared lower are shared (bind mounts); only the
    // Domain roots live on a small tmpfs.
    for d in ["images", "lowers"] {
        let (src, dst) = (mine.join(d), store.join(d));
        if !root_ok(&["mount", "--bind", src.to_str().unwrap(), dst.to_str().unwrap()]) {
            return skip("a_full_disk", "cannot bind-mount the image store");
        }
        mounts.0.push(dst);
    }
    let opts = format!("size=48m,mode=0700,uid={},gid={}", env.uid, env.gid);
    if !root_ok(&["mount", "-t", "tmpfs", "-o", &opts, "lzfull", domains.to_str().unwrap()]) {
        return skip("a_full_disk", "cannot mount a tmpfs");
    }
    mounts.0.push(domains.clone());
    let ws = env.dir("enospc-ws");
    let xdg = data.display().to_string();
    let script = "dd if=/dev/zero of=/usr/local/big bs=1M count=100 conv=fsync; echo dd=$?; \
                  stat -c size=%s /usr/local/big";
    // LAZARET_TEST_OVERLAY_DRIVER=fuse|kernel measures one driver; unset
    // (or empty) tests the default.
    let driver = std::env::var("LAZARET_TEST_OVERLAY_DRIVER").unwrap_or_default();
    let r = env
        .lz_sh(&ws, script)
        .env("XDG_DATA_HOME", &xdg)
        .env("LAZARET_OVERLAY_DRIVER", &driver)
        .run();
    assert!(
        r.stdout.contains("dd=") && !r.stdout.contains("dd=0"),
        "the writer was told success: {r:?}"
    );
    assert!(r.stderr.contains("No space left on device"), "{r:?}");
    let told: u64 = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("size="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{r:?}"));
    let sock = domain_run_dir(env, &ws).join("hc.sock");
    assert!(eventually(Duration::from_secs(20), || !sock.exists()));
    let root = domains.join(env.domain_id("default", &ws));
    let on_host = find_file(&root.join("anchor"), "big").expect("the partial file is in the upper");
    assert_eq!(
        std::fs::metadata(&on_host).unwrap().len(),
        told,
        "host and writer disagree"
    );
    // Fill what is left, then reset on the full disk.
    let filler = domains.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=1M", "count=100"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status();
    let reset = env
        .lz(&ws, &["state", "reset", "--all", "--yes"])
        .env("XDG_DATA_HOME", &xdg)
        .run();
    eprintln!("reset on a full disk: {reset:?}");
    std::fs::remove_file(&filler).unwrap();
    let v = env.lz(&ws, &["state", "verify"]).env("XDG_DATA_HOME", &xdg).run();
    assert_eq!(v.code, 0, "state verify after space returned: {v:?}");
    assert!(!root.join("anchor/reset-journal.tmp").exists());
    drop(mounts);
}

/// The supervisor's lease and status pipes (fds 3 and 4) reach none of its
/// helpers: runsc, slirp4netns, fuse-overlayfs.
#[test]
fn supervisor_pipes_are_not_inherited_by_helpers() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("cloexec");
    let _hold = env
        .lz(&ws, &["run", "--", "sleep", "600"])
        .env("LAZARET_OVERLAY_DRIVER", "fuse")
        .spawn_bg();
    let run = domain_run_dir(env, &ws);
    assert!(eventually(Duration::from_secs(120), || run.join("hc.sock").exists()
        && says_ready(env, &ws)));
    let id = env.domain_id("default", &ws);
    let sup = json_number(&env.ps_json(&ws), &id, "supervisor_pid").unwrap();
    let link = |pid: i64, fd: &str| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok();
    let pipes: Vec<_> = ["3", "4"].iter().filter_map(|fd| link(sup, fd)).collect();
    assert_eq!(pipes.len(), 2, "the supervisor holds its two pipes");
    let mut checked = 0;
    for (pid, _, cmd) in crate::harness::processes() {
        let prog = cmd.split_whitespace().next().unwrap_or("");
        if !["runsc", "slirp4netns", "fuse-overlayfs", "runsc-sandbox", "runsc-gofer"]
            .iter()
            .any(|p| prog.ends_with(p))
        {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let target = std::fs::read_link(fd.path()).ok();
            assert!(
                !target.as_ref().is_some_and(|t| pipes.contains(t)),
                "{cmd:?} (pid {pid}) inherited a supervisor pipe {target:?}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 2, "found too few helpers to check");
}

/// A Domain root nobody can read is an error for `state verify`, not
/// "ok: 0 entries".
#[test]
fn state_verify_fails_on_an_unreadable_domain_root() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("mode000");
    let r = env.lz(&ws, &["run", "--", "true"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    let sock = domain_run_dir(env, &ws).join("hc.sock");
    assert!(eventually(Duration::from_secs(20), || !sock.exists()));
    let root = env
        .home
        .join(".local/share/lazaret/domains")
        .join(env.domain_id("default", &ws));
    let ok = env.lz(&ws, &["state", "verify"]).run();
    assert_eq!(ok.code, 0, "{ok:?}");
    let mode = |m: u32| std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap();
    mode(0o000);
    let v = env.lz(&ws, &["state", "verify"]).run();
    mode(0o700);
    assert_ne!(v.code, 0, "state verify passed an unreadable Domain root: {v:?}");
    assert!(!v.stdout.contains("ok: 0 entries"), "{v:?}");
}

/// A join needs no image when the running Domain does not: the image is
/// removed while the Domain runs.
#[test]
fn joins_need_no_image_while_the_domain_runs() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("noimage");
    let store = base.join("data/lazaret");
    std::fs::create_dir_all(store.join("images")).unwrap();
    std::fs::create_dir_all(store.join("lowers")).unwrap();
    env.copy_default_image(&store.join("images/default"), &base.join("data"));
    for d in [base.join("data"), store.clone()] {
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    let mut mounts = Mounts(Vec::new());
    let lowers = store.join("lowers");
    if !root_ok(&[
        "mount",
        "--bind",
        env.home.join(".local/share/lazaret/lowers").to_str().unwrap(),
        lowers.to_str().unwrap(),
    ]) {
        return skip("joins_need_no_image", "cannot bind-mount the prepared lowers");
    }
    mounts.0.push(lowers);
    let xdg = base.join("data").display().to_string();
    let ws = env.dir("noimage-ws");
    let _hold = env
        .lz(&ws, &["run", "--", "sleep", "600"])
        .env("XDG_DATA_HOME", &xdg)
        .spawn_bg();
    let sock = domain_run_dir(env, &ws).join("hc.sock");
    assert!(eventually(Duration::from_secs(120), || sock.exists()));
    std::fs::remove_dir_all(store.join("images/default")).unwrap();
    let r = env
        .lz(&ws, &["run", "--", "echo", "joined"])
        .env("XDG_DATA_HOME", &xdg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("joined"), "{r:?}");
    drop(_hold);
    assert!(eventually(Duration::from_secs(20), || !sock.exists()));
    drop(mounts);
}
