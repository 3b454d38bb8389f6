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
    let ms: u128 = line.split_whitespace().nth(3).and_then(|s| s.parse().ok()).unwrap_or(0);
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
