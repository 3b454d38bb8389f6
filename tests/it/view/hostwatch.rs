//! Host-side edits fire inotify events inside (issue 29 item 4): gVisor
//! does not see host changes as events; the workspace view (which watches
//! the host) relays each changed file, and `init touch` sets its mtime to
//! itself through gVisor, so `fs.watch` and inotifywait inside hear of it.

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::harness::{Env, GLOBAL};
use crate::require_env;

/// Watches `src` (the directory) and `src/a.txt` (the file) and prints
/// `ready`, then `WHO EVENT NAME MS CONTENT` for every event.
const WATCHER: &str = r#"
const fs = require('fs');
const show = (who) => (ev, name) => {
  let content = '';
  try { content = fs.readFileSync('src/' + (name || 'a.txt'), 'utf8').trim(); } catch (e) { content = 'gone'; }
  console.log(who, ev, name, Date.now(), content);
};
fs.watch('src', show('dir'));
fs.watch('src/a.txt', show('file'));
console.log('ready');
setTimeout(() => process.exit(0), 120000);
"#;

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// The first line from `rx` within `limit` that satisfies `f`.
fn wait_line(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    f: impl Fn(&str) -> bool,
    seen: &mut String,
) -> Option<String> {
    let end = Instant::now() + limit;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
                if f(&l) {
                    return Some(l);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// For each predicate, the first line from `rx` within `limit` that
/// satisfies it, in whatever order they come.
fn wait_all(
    rx: &mpsc::Receiver<String>,
    limit: Duration,
    preds: &[&dyn Fn(&str) -> bool],
    seen: &mut String,
) -> Vec<Option<String>> {
    let mut got: Vec<Option<String>> = vec![None; preds.len()];
    let end = Instant::now() + limit;
    while got.iter().any(Option::is_none) {
        let Some(left) = end.checked_duration_since(Instant::now()) else {
            break;
        };
        let Ok(l) = rx.recv_timeout(left) else { break };
        seen.push_str(&l);
        seen.push('\n');
        for (g, p) in got.iter_mut().zip(preds) {
            if g.is_none() && p(&l) {
                *g = Some(l.clone());
            }
        }
    }
    got
}

fn latency(line: &str, since: u128) -> i128 {
    latency_at(line, 3, since)
}

/// Milliseconds from `since` to the time in whitespace field `field` of `line`.
fn latency_at(line: &str, field: usize, since: u128) -> i128 {
    let ms: u128 = line
        .split_whitespace()
        .nth(field)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    ms as i128 - since as i128
}

#[test]
fn host_edits_in_place_and_by_rename_fire_fs_watch_events_inside() {
    let env: &Env = require_env!();
    let _g = GLOBAL.read();
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let (ws, cfg) = env.workspace_with_config("hostwatch", "[profiles.w]\nimage = \"dev\"\n");
    env.write(&ws.join("src/a.txt"), "one\n");
    env.write(&ws.join("src/b.txt"), "one\n");
    env.write(&ws.join("watch.js"), WATCHER);
    let mut bg = env
        .lz(&ws, &["run", "-q", "-p", "w", "--", "node", "/workspace/watch.js"])
        .config_home(&cfg)
        .spawn_bg();
    let (tx, rx) = mpsc::channel();
    let out = bg.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut seen = String::new();
    assert!(
        wait_line(&rx, Duration::from_secs(120), |l| l == "ready", &mut seen).is_some(),
        "the watcher did not start: {seen}"
    );
    // Let the watches settle (the view watches a directory once it is looked up).
    std::thread::sleep(Duration::from_millis(500));
    // An edit in place, as `echo two > src/a.txt` on the host.
    let t0 = now_ms();
    env.write(&ws.join("src/a.txt"), "two\n");
    let got = wait_all(
        &rx,
        Duration::from_secs(10),
        &[&|l: &str| l.starts_with("file ") && l.ends_with(" two"), &|l: &str| {
            l.starts_with("dir ") && l.contains(" a.txt ") && l.ends_with(" two")
        }],
        &mut seen,
    );
    assert!(
        got[0].is_some(),
        "no event for the watched file after a host edit in place: {seen}"
    );
    assert!(
        got[1].is_some(),
        "no event in the watched directory after a host edit in place: {seen}"
    );
    eprintln!(
        "in place: file event after {} ms, directory event after {} ms",
        latency(got[0].as_deref().unwrap(), t0),
        latency(got[1].as_deref().unwrap(), t0)
    );
    // Save by rename, as editors do: a new file renamed onto the name.
    let t1 = now_ms();
    let tmp = ws.join("src/.b.txt.new");
    env.write(&tmp, "three\n");
    std::fs::rename(&tmp, ws.join("src/b.txt")).unwrap();
    let renamed = wait_line(
        &rx,
        Duration::from_secs(10),
        |l| l.starts_with("dir ") && l.contains(" b.txt ") && l.ends_with(" three"),
        &mut seen,
    );
    assert!(
        renamed.is_some(),
        "no event in the watched directory after a save-by-rename: {seen}"
    );
    eprintln!(
        "save-by-rename: directory event after {} ms",
        latency(renamed.as_deref().unwrap(), t1)
    );
    // The relay leaves the content alone.
    assert_eq!(std::fs::read_to_string(ws.join("src/a.txt")).unwrap(), "two\n");
    assert_eq!(std::fs::read_to_string(ws.join("src/b.txt")).unwrap(), "three\n");
    drop(bg);
    let _ = env.lz(&ws, &["stop", "-p", "w"]).config_home(&cfg).run();
}

/// A raw inotify watcher (python3, ctypes) of the directory it is given:
/// prints `ready`, then `ev MS MASK NAME` for every event.
const RAW_WATCHER: &str = r#"
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
wd = libc.inotify_add_watch(fd, sys.argv[1].encode(), 0xfff)
print('ready', wd, flush=True)
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        w, mask, cookie, n = struct.unpack_from('iIII', buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b'\0').decode()
        i += 16 + n
        print('ev', int(time.time() * 1000), mask, name, flush=True)
"#;

/// Starts `argv` in a Domain of profile `w` (the dev image) and returns the
/// session and its stdout lines.
fn start_watcher(
    env: &Env,
    ws: &std::path::Path,
    cfg: &std::path::Path,
    argv: &[&str],
) -> (crate::harness::Bg, mpsc::Receiver<String>) {
    let mut args = vec!["run", "-q", "-p", "w", "--"];
    args.extend_from_slice(argv);
    let mut bg = env.lz(ws, &args).config_home(cfg).spawn_bg();
    let (tx, rx) = mpsc::channel();
    let out = bg.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (bg, rx)
}

/// Issue 47 item 8: a watch added on a directory the sandbox never listed
/// sees each of 7 host changes (edits in place, creates, a save-by-rename,
/// `sed -i`, a copy over, a move in), each within 10 s; the latencies are
/// printed (docs/git.md, "Caching and host edits").
#[test]
fn a_watch_on_a_directory_never_listed_sees_each_host_change() {
    let env: &Env = require_env!();
    let _g = GLOBAL.read();
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let (ws, cfg) = env.workspace_with_config("hostwatch-raw", "[profiles.w]\nimage = \"dev\"\n");
    for f in ["a.txt", "b.txt", "c.txt", "d.txt"] {
        env.write(&ws.join("deep/dir").join(f), "one\n");
    }
    env.write(&ws.join("elsewhere/e.txt"), "one\n");
    env.write(&ws.join("watch.py"), RAW_WATCHER);
    let (bg, rx) = start_watcher(
        env,
        &ws,
        &cfg,
        &["python3", "/workspace/watch.py", "/workspace/deep/dir"],
    );
    let mut seen = String::new();
    let ready = wait_line(&rx, Duration::from_secs(120), |l| l.starts_with("ready "), &mut seen);
    assert!(
        ready.as_deref().is_some_and(|l| l != "ready -1"),
        "the watcher did not start: {seen}"
    );
    let dir = ws.join("deep/dir");
    let as_user = |argv: &[&str]| {
        let pre = env.as_user();
        let st = std::process::Command::new(&pre[0])
            .args(&pre[1..])
            .args(argv)
            .current_dir(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "{argv:?}");
    };
    type Change<'a> = (&'a str, &'a str, Box<dyn Fn() + 'a>);
    let changes: Vec<Change> = vec![
        (
            "edit in place",
            "a.txt",
            Box::new(|| env.write(&dir.join("a.txt"), "two\n")),
        ),
        (
            "append",
            "a.txt",
            Box::new(|| as_user(&["sh", "-c", "echo three >> a.txt"])),
        ),
        ("create", "n.txt", Box::new(|| env.write(&dir.join("n.txt"), "new\n"))),
        (
            "save-by-rename",
            "b.txt",
            Box::new(|| as_user(&["sh", "-c", "echo two > .b.txt.tmp && mv .b.txt.tmp b.txt"])),
        ),
        (
            "sed -i",
            "c.txt",
            Box::new(|| as_user(&["sed", "-i", "s/one/two/", "c.txt"])),
        ),
        (
            "copy over",
            "d.txt",
            Box::new(|| as_user(&["cp", "../../elsewhere/e.txt", "d.txt"])),
        ),
        (
            "move in",
            "e.txt",
            Box::new(|| as_user(&["mv", "../../elsewhere/e.txt", "e.txt"])),
        ),
    ];
    let mut report = Vec::new();
    let mut missed = Vec::new();
    for (what, name, change) in &changes {
        // Earlier events of the same name are drained first.
        std::thread::sleep(Duration::from_millis(300));
        while let Ok(l) = rx.try_recv() {
            seen.push_str(&l);
            seen.push('\n');
        }
        let t0 = now_ms();
        change();
        let suffix = format!(" {name}");
        match wait_line(
            &rx,
            Duration::from_secs(10),
            |l| l.starts_with("ev ") && l.ends_with(&suffix),
            &mut seen,
        ) {
            Some(l) => report.push(format!("{what}: {} ms", latency_at(&l, 1, t0))),
            None => missed.push(*what),
        }
    }
    eprintln!("host change to event inside: {}", report.join(", "));
    assert!(missed.is_empty(), "no event inside for {missed:?} (of 7): {seen}");
    drop(bg);
    let _ = env.lz(&ws, &["stop", "-p", "w"]).config_home(&cfg).run();
}

/// Issue 47 item 8: `node --watch script.js` restarts when the host edits
/// the script with `sed -i` (a rename onto its name: the watch is on the
/// file gVisor knew) and when the sandbox does.
#[test]
fn node_watch_restarts_on_sed_i_from_the_host_and_from_inside() {
    let env: &Env = require_env!();
    let _g = GLOBAL.read();
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let (ws, cfg) = env.workspace_with_config("hostwatch-node", "[profiles.w]\nimage = \"dev\"\n");
    let script =
        |tag: &str| format!("const v = 'v1';\nconsole.log('{tag}', v, Date.now());\nsetTimeout(() => {{}}, 600000);\n");
    env.write(&ws.join("host.js"), &script("host"));
    env.write(&ws.join("inside.js"), &script("inside"));
    let (bg, rx) = start_watcher(
        env,
        &ws,
        &cfg,
        &[
            "sh",
            "-c",
            "node --watch /workspace/host.js & node --watch /workspace/inside.js & wait",
        ],
    );
    let mut seen = String::new();
    let started = wait_all(
        &rx,
        Duration::from_secs(120),
        &[&|l: &str| l.starts_with("host v1 "), &|l: &str| {
            l.starts_with("inside v1 ")
        }],
        &mut seen,
    );
    assert!(started.iter().all(Option::is_some), "node did not start: {seen}");
    // Let node's watchers settle (it watches each module it loaded).
    std::thread::sleep(Duration::from_millis(1000));
    let t0 = now_ms();
    let pre = env.as_user();
    let st = std::process::Command::new(&pre[0])
        .args(&pre[1..])
        .args(["sed", "-i", "s/v1/v2/"])
        .arg(ws.join("host.js"))
        .status()
        .unwrap();
    assert!(st.success());
    let host = wait_line(&rx, Duration::from_secs(15), |l| l.starts_with("host v2 "), &mut seen);
    assert!(host.is_some(), "node --watch did not restart on a host sed -i: {seen}");
    eprintln!(
        "node --watch restarted {} ms after a host sed -i",
        latency_at(host.as_deref().unwrap(), 2, t0)
    );
    let r = env
        .lz(
            &ws,
            &[
                "run",
                "-q",
                "-p",
                "w",
                "--",
                "sed",
                "-i",
                "s/v1/v2/",
                "/workspace/inside.js",
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let inside = wait_line(&rx, Duration::from_secs(15), |l| l.starts_with("inside v2 "), &mut seen);
    assert!(
        inside.is_some(),
        "node --watch did not restart on a sed -i inside: {seen}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("host.js")).unwrap(),
        script("host").replace("v1", "v2")
    );
    drop(bg);
    let _ = env.lz(&ws, &["stop", "-p", "w"]).config_home(&cfg).run();
}
