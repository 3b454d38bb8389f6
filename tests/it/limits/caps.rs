//! Resource limits: memory, processes and CPU are bounded by the host
//! kernel (cgroups), non-persisted writes go to disk, and without a cgroup
//! the user can write, configured limits are refused.
//!
//! These tests need the delegated cgroup scripts/test.sh prepares
//! (`delegate_cgroup` in scripts/lib.sh); without it they skip.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::harness::{self, eventually, Env, GLOBAL};
use crate::require_env;

/// (controller, hierarchy mount point, our cgroup path) for the v1
/// hierarchies, or ("", cgroup2 mount, path) on a v2-only host.
fn hierarchies() -> Vec<(String, PathBuf, String)> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out = Vec::new();
    for l in mi.lines() {
        let Some((pre, post)) = l.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if post[0] == "cgroup" {
            for ctl in post.get(2).unwrap_or(&"").split(',') {
                if ["memory", "pids", "cpu", "cpuacct"].contains(&ctl) {
                    let path = cg.lines().find_map(|c| {
                        let mut f = c.splitn(3, ':');
                        let (_, ctls, p) = (f.next()?, f.next()?, f.next()?);
                        ctls.split(',').any(|x| x == ctl).then(|| p.to_string())
                    });
                    if let Some(p) = path {
                        out.push((ctl.to_string(), PathBuf::from(pre[4]), p));
                    }
                }
            }
        }
    }
    if out.is_empty() {
        if let Some(l) = mi.lines().find(|l| l.contains(" - cgroup2 ")) {
            let mp = l.split(' ').nth(4).unwrap_or("/sys/fs/cgroup");
            let p = cg.lines().find_map(|c| c.strip_prefix("0::")).unwrap_or("/");
            out.push((String::new(), PathBuf::from(mp), p.to_string()));
        }
    }
    out
}

fn dir_for(ctl: &str) -> Option<PathBuf> {
    let h = hierarchies();
    let (_, mp, p) = h.iter().find(|(c, _, _)| c == ctl || c.is_empty())?;
    Some(mp.join(p.trim_start_matches('/')))
}

fn unified_hierarchy() -> bool {
    hierarchies().iter().any(|(c, _, _)| c.is_empty())
}

/// The test process sits in a cgroup delegated to the test user (what
/// scripts/test.sh arranges); otherwise the test skips.
fn delegated(env: &Env, test: &str) -> bool {
    let ok = ["memory", "pids", "cpu"].iter().all(|c| {
        dir_for(c).is_some_and(|d| {
            // v2: the delegated directory is our parent.
            let d = if unified_hierarchy() {
                d.parent().map(Path::to_path_buf).unwrap_or(d)
            } else {
                d
            };
            std::fs::metadata(d.join("cgroup.procs")).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.uid() == env.uid
            })
        })
    });
    if !ok {
        if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
            panic!(
                "{test}: no cgroup delegated to {} (run through scripts/test.sh)",
                env.user
            );
        }
        eprintln!(
            "skipping: {test}: no cgroup delegated to {} (run through scripts/test.sh)",
            env.user
        );
    }
    ok
}

/// [`delegated`], then a fresh workspace as [`Env::base_and_workspace`]
/// makes it: `(base, ws)`, or `None` when the test skips.
fn delegated_workspace(env: &Env, test: &str, name: &str) -> Option<(PathBuf, PathBuf)> {
    delegated(env, test).then(|| env.base_and_workspace(name))
}

/// The Domain's generation cgroup in hierarchy `ctl` (`lz-<domain8>-*`),
/// searched below our own cgroup (v1) or its parent (v2).
fn domain_cgroup(ctl: &str, domain: &str) -> Option<PathBuf> {
    let mut base = dir_for(ctl)?;
    if unified_hierarchy() {
        base = base.parent()?.to_path_buf();
    }
    let prefix = format!("lz-{}-", &domain[..8]);
    std::fs::read_dir(&base)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Samples `f` every 50 ms on a thread until stopped; keeps all samples.
struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    t: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(f: impl Fn() -> Option<u64> + Send + 'static) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s2, v2) = (stop.clone(), samples.clone());
        let t = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                if let Some(v) = f() {
                    v2.lock().unwrap_or_else(|e| e.into_inner()).push((Instant::now(), v));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Sampler {
            stop,
            samples,
            t: Some(t),
        }
    }
    fn finish(mut self) -> Vec<(Instant, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.t.take() {
            let _ = t.join();
        }
        let v = self.samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
        v
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn memory_limit_stops_an_allocation_and_spares_other_domains() {
    let (env, _g) = require_env!(shared);
    if !delegated(env, "limits::memory") {
        return;
    }
    let base = env.dir("lim-mem");
    let (ws_a, ws_b) = (base.join("a"), base.join("b"));
    for w in [&ws_a, &ws_b] {
        std::fs::create_dir(w).unwrap();
        env.chown(w);
    }
    let cfg = env.write_config(
        &base,
        "[profiles.default.limits]\nmemory = \"256MiB\"\n[profiles.other]\n",
    );
    // Another Domain (no explicit limits) that must keep running.
    let b = env
        .lz(
            &ws_b,
            &[
                "run",
                "--quiet",
                "--profile",
                "other",
                "--",
                "sh",
                "-c",
                "sleep 20; echo b-alive",
            ],
        )
        .config_home(&cfg)
        .spawn_bg();
    let domain_a = env.domain_id("default", &ws_a);
    let peak = Sampler::start(move || {
        let d = domain_cgroup("memory", &domain_a)?;
        read_u64(&d.join(if unified_hierarchy() {
            "memory.peak"
        } else {
            "memory.max_usage_in_bytes"
        }))
    });
    let r = env
        .lz(
            &ws_a,
            &[
                "run",
                "--quiet",
                "--",
                "python3",
                "-c",
                "b = b'\\x01' * (700 << 20); print('allocated', len(b))",
            ],
        )
        .config_home(&cfg)
        .run();
    let samples = peak.finish();
    assert!(!r.stdout.contains("allocated"), "the allocation succeeded: {r:?}");
    let guest_oom = r.stderr.contains("MemoryError");
    let domain_oom = r.stderr.contains("out of memory (limit 256MiB)") && r.code == 125;
    assert!(
        guest_oom || domain_oom,
        "neither MemoryError nor the OOM message: {r:?}"
    );
    let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    assert!(max > 0, "never saw the Domain's memory cgroup");
    assert!(max < 300 * MIB, "cgroup peak {} MiB", max / MIB);
    // The other Domain is unaffected.
    let out = b.wait_with_output_keep();
    assert!(out.contains("b-alive"), "the other Domain did not survive: {out}");
}

trait WaitKeep {
    fn wait_with_output_keep(self) -> String;
}

impl WaitKeep for harness::Bg {
    fn wait_with_output_keep(mut self) -> String {
        use std::io::Read;
        let mut s = String::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut o) = self.0.stdout.take() {
            let _ = o.read_to_string(&mut s);
        }
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

/// The shell tail of the flood tests: ends the flood (the session's own
/// shell survives), waits with builtins only until the guest's processes
/// are gone, runs `then`, and holds the Domain until a second session has
/// joined ([`join_and_mark`]).
fn end_flood_then_wait_for_join(then: &str) -> String {
    format!(
        "trap '' TERM; kill -TERM 0; \
         i=0; while set -- /proc/[0-9]*; [ $# -gt 8 ] && [ $i -lt 200000 ]; do i=$((i+1)); done; \
         {then}; \
         i=0; while [ ! -e /workspace/.joined ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done; \
         echo a-done"
    )
}

/// A new session joins the Domain of `ws`, runs a command and marks
/// `.joined`.
fn join_and_mark(env: &Env, ws: &Path) -> harness::Run {
    env.run_sh(ws, "/bin/echo joined-$((6*7)) && : > /workspace/.joined")
}

/// `pids.events` "max N": forks the host cgroup refused.
fn pids_refused(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p.join("pids.events"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("max ").and_then(|v| v.trim().parse().ok()))
}

#[test]
fn pids_limit_bounds_a_process_flood_and_the_shell_stays_usable() {
    let (env, _g) = require_env!(shared);
    let Some((_, ws)) = delegated_workspace(env, "limits::pids", "lim-pids") else {
        return;
    };
    let domain = env.domain_id("default", &ws);
    let d2 = domain.clone();
    let count = Sampler::start(move || read_u64(&domain_cgroup("pids", &d2)?.join("pids.current")));
    let d3 = domain.clone();
    let refused = Sampler::start(move || pids_refused(&domain_cgroup("pids", &d3)?));
    // The runaway: a child shell starting 400 background sleeps (dash gives
    // up at the first refused fork). Then the session's own shell counts
    // the guest's processes with builtins only, ends the sleeps, waits
    // until they are gone, forks again, and holds the Domain until a
    // second session has joined.
    let flood = format!(
        "sh -c 'i=0; while [ $i -lt 400 ]; do sleep 120 & i=$((i+1)); done' 2>/dev/null; \
         set -- /proc/[0-9]*; echo guest-procs-$#; {}",
        end_flood_then_wait_for_join("/bin/echo usable-$((6*7)); : > /workspace/.flooded")
    );
    let a = env
        .lz(&ws, &["run", "--quiet", "--pids", "200", "--", "sh", "-c", &flood])
        .spawn_bg();
    let flooded = harness::eventually(Duration::from_secs(180), || ws.join(".flooded").exists());
    // A new session joins the same Domain and runs a command.
    let b = join_and_mark(env, &ws);
    let out = a.wait_with_output_keep();
    let (samples, refused) = (count.finish(), refused.finish());
    eprintln!("session: {out}");
    assert!(flooded, "the flooded session never got usable again: {out}");
    assert!(
        out.contains("usable-42"),
        "the shell was not usable after the flood: {out}"
    );
    assert!(out.contains("a-done"), "the first session did not finish: {out}");
    assert_eq!(b.code, 0, "a new session could not join: {b:?}");
    assert!(b.stdout.contains("joined-42"), "{b:?}");
    let guest: u64 = out
        .split("guest-procs-")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("guest process count");
    let max = samples.iter().map(|s| s.1).max().unwrap_or(0);
    eprintln!("guest processes at the limit: {guest}; host tasks peak: {max}");
    assert!(guest < 300, "{guest} guest processes");
    assert!(max > 0, "never saw the Domain's pids cgroup");
    assert!(max < 300, "{max} host processes/threads");
    // The guest's own limit held first: the host cgroup never refused a fork.
    let refused = refused.iter().map(|s| s.1).max().unwrap_or(0);
    assert_eq!(refused, 0, "the host pids limit was reached ({refused} forks refused)");
}

/// Joining a Domain while its guest sits at its task limit: the new
/// session fails with one sentence that names the limit (not runsc's own
/// words), the Domain and the session holding the limit keep running, and
/// a join after the flood ends works.
#[test]
fn joining_at_the_task_limit_says_so_and_keeps_the_domain() {
    let (env, _g) = require_env!(shared);
    let Some((_, ws)) = delegated_workspace(env, "limits::join", "lim-join") else {
        return;
    };
    // Holds the guest at its limit: bash retries a refused fork instead of
    // giving up (so no slot stays free), and its first refusal, written to
    // .flood-err, says the limit is reached. The holding shell uses
    // builtins only until the host says the refused join happened, then
    // ends the flood, waits until it is gone, and waits for a second join.
    let hold = format!(
        "bash -c 'while :; do sleep 120 & done' 2> /workspace/.flood-err & \
                i=0; while [ ! -s /workspace/.flood-err ] && [ $i -lt 3000000 ]; do i=$((i+1)); done; \
                : > /workspace/.full; \
                i=0; while [ ! -e /workspace/.tried ] && [ $i -lt 3000000 ]; do i=$((i+1)); done; {}",
        end_flood_then_wait_for_join(": > /workspace/.drained")
    );
    let a = env
        .lz(&ws, &["run", "--quiet", "--pids", "200", "--", "sh", "-c", &hold])
        .spawn_bg();
    let full = harness::eventually(Duration::from_secs(180), || ws.join(".full").exists());
    let refused = env
        .lz(&ws, &["run", "--quiet", "--", "/bin/echo", "JOINED-AT-LIMIT"])
        .run();
    env.write(&ws.join(".tried"), "");
    let drained = harness::eventually(Duration::from_secs(120), || ws.join(".drained").exists());
    let joined = join_and_mark(env, &ws);
    let out = a.wait_with_output_keep();
    assert!(full, "the guest never reached its limit: {out}");
    assert!(!refused.stdout.contains("JOINED-AT-LIMIT"), "{refused:?}");
    assert_ne!(refused.code, 0, "{refused:?}");
    assert!(
        refused.stderr.contains("task limit") && refused.stderr.contains("--pids"),
        "the refusal names the limit: {refused:?}"
    );
    for raw in [
        "try again",
        "resource temporarily unavailable",
        "executing processes",
        "urpc",
    ] {
        assert!(
            !refused.stderr.to_lowercase().contains(raw),
            "runsc's own words reached the user ({raw}): {refused:?}"
        );
    }
    assert!(drained, "the flood never ended: {out}");
    assert_eq!(joined.code, 0, "a join after the flood failed: {joined:?}");
    assert!(joined.stdout.contains("joined-42"), "{joined:?}");
    assert!(
        out.contains("a-done"),
        "the session holding the limit did not finish: {out}"
    );
    // Variant: a command that prints runsc's words itself and exits 128 is
    // not taken for a refusal (its process started: runsc wrote its pid).
    let forged = env.run_sh(
        &ws,
        "echo 'executing processes for container: x: try again' >&2; exit 128",
    );
    assert_eq!(forged.code, 128, "{forged:?}");
    assert!(
        !forged.stderr.contains("task limit"),
        "a forged refusal was believed: {forged:?}"
    );
}

#[test]
fn the_guest_sees_the_memory_limit_as_its_total_memory() {
    let (env, _g) = require_env!(shared);
    let Some((base, ws)) = delegated_workspace(env, "limits::meminfo", "lim-meminfo") else {
        return;
    };
    let cfg = env.write_config(&base, "[profiles.default.limits]\nmemory = \"256MiB\"\n");
    let r = env
        .lz(&ws, &["run", "--quiet", "--", "sh", "-c", "head -n 1 /proc/meminfo"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let kib: u64 = r
        .stdout
        .strip_prefix("MemTotal:")
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no MemTotal: {r:?}"));
    eprintln!("guest MemTotal: {kib} kB");
    assert!(
        kib > 0 && kib <= 256 * 1024,
        "guest MemTotal {kib} kB with a 256MiB limit"
    );
}

#[test]
fn cpu_limit_holds_a_busy_loop_to_half_a_core() {
    let (env, _g) = require_env!(shared);
    let Some((_, ws)) = delegated_workspace(env, "limits::cpus", "lim-cpu") else {
        return;
    };
    let domain = env.domain_id("default", &ws);
    // CPU time in nanoseconds by the host's account.
    let usage = Sampler::start(move || {
        if unified_hierarchy() {
            let d = domain_cgroup("", &domain)?;
            let t = std::fs::read_to_string(d.join("cpu.stat")).ok()?;
            t.lines()
                .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
                .map(|u| u * 1000)
        } else {
            read_u64(&domain_cgroup("cpuacct", &domain)?.join("cpuacct.usage"))
        }
    });
    let r = env
        .lz(
            &ws,
            &[
                "run",
                "--quiet",
                "--cpus",
                "0.5",
                "--",
                "sh",
                "-c",
                "sleep 1; timeout 5 sh -c 'while :; do :; done'; echo looped",
            ],
        )
        .run();
    let s = usage.finish();
    assert!(r.stdout.contains("looped"), "{r:?}");
    assert!(s.len() > 20, "too few samples of the Domain's CPU use: {}", s.len());
    // The busiest 3-second window.
    let mut best = 0.0f64;
    for (i, a) in s.iter().enumerate() {
        if let Some(b) = s[i..]
            .iter()
            .find(|b| b.0.duration_since(a.0) >= Duration::from_secs(3))
        {
            let rate = (b.1.saturating_sub(a.1)) as f64 / b.0.duration_since(a.0).as_nanos() as f64;
            best = best.max(rate);
        }
    }
    eprintln!("busiest 3 s window: {:.2} of one core", best);
    assert!(best > 0.25, "the loop did not run ({best:.2})");
    assert!(best < 0.6, "{best:.2} of one core with cpus = 0.5");
}

/// A command whose process first leaves the delegated cgroup for its
/// (root-owned) parent, then becomes the test user.
fn undelegated(env: &Env, ws: &Path, args: &[&str], cfg: &Path) -> harness::Run {
    let mut targets: Vec<PathBuf> = Vec::new();
    for (ctl, mp, p) in hierarchies() {
        let own = mp.join(p.trim_start_matches('/'));
        let up = if ctl.is_empty() {
            // v2: out of the delegated subtree (leaf's grandparent).
            own.parent().and_then(Path::parent).map(Path::to_path_buf)
        } else {
            own.parent().map(Path::to_path_buf)
        };
        if let Some(u) = up {
            targets.push(u.join("cgroup.procs"));
        }
    }
    let mut c = env.lz(ws, args).config_home(cfg).command();
    c.stdin(std::process::Stdio::null());
    // SAFETY: only open/write/close between fork and exec.
    unsafe {
        c.pre_exec(move || {
            for t in &targets {
                std::fs::write(t, "0")?;
            }
            Ok(())
        });
    }
    harness::Run::from(c.output().unwrap())
}

#[test]
fn without_delegation_configured_limits_are_refused_with_the_fix() {
    let (env, _g) = require_env!(shared);
    let Some((base, ws)) = delegated_workspace(env, "limits::refused", "lim-none") else {
        return;
    };
    let limited = env.write_config(&base.join("l"), "[profiles.default.limits]\npids = 4096\n");
    let marker = ws.join("ran");
    let r = undelegated(env, &ws, &["run", "--quiet", "--", "touch", "/workspace/ran"], &limited);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("cannot be enforced") && r.stderr.contains("Fix:"),
        "{r:?}"
    );
    assert!(r.stderr.contains("cgroup.procs"), "the fix names what to do: {r:?}");
    assert!(!marker.exists(), "the sandbox ran anyway");
    // The same with --memory on the command line.
    let plain = env.write_config(&base.join("p"), "");
    let r = undelegated(env, &ws, &["run", "--quiet", "--memory", "1GiB", "--", "true"], &plain);
    assert_eq!(r.code, 2, "{r:?}");
    // doctor says the same, as a warning (sandboxes do run), with the fix.
    let d = undelegated(env, &ws, &["doctor"], &plain);
    assert!(
        d.stdout.contains("warn resource-limits") && d.stdout.contains("cgroup.procs"),
        "{d:?}"
    );
    assert!(!d.stdout.contains("FAIL resource-limits"), "{d:?}");
    // Defaults only: it runs, with one one-line warning, and none with -q.
    let r = undelegated(env, &ws, &["run", "--", "touch", "/workspace/ran"], &plain);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(marker.exists());
    let warnings: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("warning: no resource limits"))
        .collect();
    assert_eq!(warnings.len(), 1, "{r:?}");
    assert!(
        warnings[0].contains("lazaret doctor") && warnings[0].len() < 200,
        "{r:?}"
    );
    // A new Domain (another workspace), started quietly.
    let ws2 = env.dir("limits-quiet");
    let r = undelegated(env, &ws2, &["run", "--quiet", "--", "true"], &plain);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("warning"), "-q: {r:?}");
    // And with delegation doctor names the mechanism.
    let d = env.lz(&ws, &["doctor"]).config_home(&plain).run();
    assert!(d.stdout.contains("ok   resource-limits: delegated cgroup"), "{d:?}");
}

/// Sum of VmRSS (bytes) of the processes in the Domain's memory cgroup.
fn domain_rss(domain: &str) -> Option<u64> {
    let d = domain_cgroup("memory", domain)?;
    let procs = std::fs::read_to_string(d.join("cgroup.procs")).ok()?;
    let mut sum = 0;
    for p in procs.split_whitespace() {
        let st = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        sum += st
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024;
    }
    Some(sum)
}

#[test]
fn writing_a_gigabyte_to_tmp_costs_disk_not_host_memory() {
    let (env, _g) = require_env!(shared);
    let Some((_, ws)) = delegated_workspace(env, "limits::tmp", "lim-tmp") else {
        return;
    };
    let domain = env.domain_id("default", &ws);
    let _hold = env.lz(&ws, &["run", "--quiet", "--", "sleep", "90"]).spawn_bg();
    assert!(eventually(Duration::from_secs(90), || domain_rss(&domain).is_some_and(|r| r > 0)));
    std::thread::sleep(Duration::from_secs(2));
    let before = domain_rss(&domain).unwrap();
    let r = env
        .lz(
            &ws,
            &[
                "run",
                "--quiet",
                "--",
                "sh",
                "-c",
                "dd if=/dev/zero of=/tmp/big bs=1M count=1024 2>/dev/null && \
                 dd if=/dev/zero of=/var/big bs=1M count=256 2>/dev/null && wc -c < /tmp/big",
            ],
        )
        .run();
    assert!(r.stdout.contains("1073741824"), "{r:?}");
    let after = domain_rss(&domain).unwrap();
    eprintln!("sandbox RSS {} MiB -> {} MiB", before / MIB, after / MIB);
    assert!(
        after < before + 100 * MIB,
        "host RSS grew by {} MiB",
        (after.saturating_sub(before)) / MIB
    );
}

fn sha256_hex(data: &[u8]) -> String {
    openssl::sha::sha256(data).iter().map(|b| format!("{b:02x}")).collect()
}

fn sh(cmd: &str) {
    let st = std::process::Command::new("sh").args(["-c", cmd]).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// An OCI layout (owned by the test user) whose single layer holds a
/// 3 GiB PAX-sparse file: a ~10 KiB blob.
fn sparse_layout(env: &Env, base: &Path) -> PathBuf {
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    sh(&format!("truncate -s 3G {}/big", src.display()));
    let tar = base.join("layer.tar");
    sh(&format!(
        "tar --sparse --format=pax -C {} -cf {} big && gzip -n -k {}",
        src.display(),
        tar.display(),
        tar.display()
    ));
    let l = base.join("layout");
    let blobs = l.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| -> (String, usize) {
        let h = sha256_hex(data);
        std::fs::write(blobs.join(&h), data).unwrap();
        (format!("sha256:{h}"), data.len())
    };
    let diff_id = format!("sha256:{}", sha256_hex(&std::fs::read(&tar).unwrap()));
    let gz = std::fs::read(base.join("layer.tar.gz")).unwrap();
    assert!(gz.len() < 64 * 1024, "the layer blob is {} bytes", gz.len());
    let (layer, lsize) = put(&gz);
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":["{diff_id}"]}}}}"#
    );
    let (cfg, csize) = put(config.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{cfg}","size":{csize}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{layer}","size":{lsize}}}]}}"#
    );
    let (m, msize) = put(manifest.as_bytes());
    std::fs::write(
        l.join("index.json"),
        format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{m}","size":{msize},"annotations":{{"org.opencontainers.image.ref.name":"t"}}}}]}}"#
        ),
    )
    .unwrap();
    std::fs::write(l.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    sh(&format!("chown -R {}:{} {}", env.uid, env.gid, base.display()));
    let _ = layer;
    l
}

fn lowers_entries(env: &Env) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(env.home.join(".local/share/lazaret/lowers"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_sparse_bomb_layer_is_refused_and_failed_imports_are_pruned() {
    let env = require_env!();
    // Looks at the user's whole lowers directory.
    let _g = GLOBAL.write();
    let (base, ws) = env.base_and_workspace("lim-img");
    let layout = sparse_layout(env, &base.join("img"));
    let cfg = env.write_config(&base,
        &format!(
            "[profiles.bomb]\nimage = \"oci:{}:t\"\n[profiles.bomb.limits]\nimage_layer = \"1GiB\"\n[profiles.bad]\nimage = \"docker-archive:{}\"\n",
            layout.display(),
            base.join("bad.tar").display()
        ),
    );
    let before = lowers_entries(env);
    let r = env
        .lz(&ws, &["run", "--quiet", "--profile", "bomb", "--", "true"])
        .config_home(&cfg)
        .run();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("image layer sha256:") && r.stderr.contains("expands to at least 3.0GiB"),
        "{r:?}"
    );
    assert_eq!(lowers_entries(env), before, "a partial lower was left behind");

    // A docker-archive import that fails is listed, then pruned.
    env.write(&base.join("bad.tar"), "this is not a docker archive\n");
    let r = env
        .lz(&ws, &["run", "--quiet", "--profile", "bad", "--", "true"])
        .config_home(&cfg)
        .run();
    assert_ne!(r.code, 0, "{r:?}");
    let list = env.lz(&ws, &["image", "list"]).config_home(&cfg).run();
    let failed: Vec<String> = list
        .stdout
        .lines()
        .filter(|l| l.contains("failed"))
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .collect();
    assert!(!failed.is_empty(), "{list:?}");
    let prune = env.lz(&ws, &["image", "prune"]).config_home(&cfg).run();
    assert_eq!(prune.code, 0, "{prune:?}");
    for f in &failed {
        assert!(prune.stdout.contains(&format!("removed {f}")), "{prune:?}");
        assert!(!env.home.join(".local/share/lazaret/images").join(f).exists());
    }
    let list = env.lz(&ws, &["image", "list"]).config_home(&cfg).run();
    assert!(!list.stdout.contains("failed"), "{list:?}");
}

/// Writes 200 MiB to `$1` with dd and reports dd's status, the size the
/// file reached and whether dd was told ENOSPC; then removes the file.
const FILL: &str = r#"fill() { out=$(dd if=/dev/zero of="$1" bs=1M count=200 2>&1); rc=$?
  echo "$1 rc=$rc size=$(stat -c %s "$1")"
  case "$out" in *"No space left on device"*) echo "$1 enospc";; esac; }
"#;

/// `path rc=N size=M` from `FILL`'s report.
fn filled(out: &str, path: &str) -> (i32, u64) {
    let l = out
        .lines()
        .find(|l| l.starts_with(&format!("{path} rc=")))
        .unwrap_or_else(|| panic!("no report for {path}: {out}"));
    let num = |k: &str| {
        l.split(k)
            .nth(1)
            .and_then(|v| v.split(' ').next())
            .unwrap_or("")
            .to_string()
    };
    (num("rc=").parse().unwrap(), num("size=").parse().unwrap())
}

const CAP: u64 = 64 << 20;
/// What a write may land past the cap: the blocks of one FUSE write in
/// flight and the directories counted at start.
const SLACK: u64 = 4 << 20;

/// Issue 27, acceptance 4 (`/tmp` and an ignored directory): with
/// `limits.disk = "64MiB"`, 200 MiB written to `/tmp` and to an ignored
/// directory each fail with ENOSPC near the cap (and to `/srv`, the root
/// filesystem's own non-persisted store, a tmpfs of the cap's size here), the Domain keeps working
/// once the files are gone (a small write in the same session, a second
/// `run`), and `lazaret ps` shows the use against the cap while it runs.
#[test]
fn the_disk_cap_holds_for_tmp_and_ignored_state_while_the_domain_runs() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("lim-disk");
    let cfg = env.write_config(&base, "[profiles.default.limits]\ndisk = \"64MiB\"\n");
    env.write(&ws.join(".gitignore"), "build/\n");
    let id = env.domain_id("default", &ws);
    let script = format!(
        "{FILL}mkdir -p /workspace/build
         fill /tmp/big; rm -f /tmp/big
         fill /workspace/build/big; rm -f /workspace/build/big
         fill /srv/big; rm -f /srv/big
         echo small > /tmp/small && echo small > /workspace/build/small && echo small-ok
         echo small > /srv/small && echo srv-ok
         cd /tmp && git init -q r && cd r && echo a > f && git add f && git -c user.email=a@b -c user.name=n commit -qm m && echo git-ok; cd /
         dd if=/dev/zero of=/tmp/held bs=1M count=20 2>/dev/null && touch /workspace/ready
         i=0; while [ ! -e /workspace/seen ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
         echo done"
    );
    let mut bg = env.lz_sh(&ws, &script).config_home(&cfg).command();
    bg.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = bg.spawn().unwrap();
    // While the session holds 20 MiB in /tmp, ps shows the count.
    let ready = eventually(Duration::from_secs(120), || ws.join("ready").exists());
    let mut used = None;
    if ready {
        eventually(Duration::from_secs(5), || {
            let j = env.ps_json(&ws);
            used = harness::json_number(&j, &id, "disk_used");
            harness::json_number(&j, &id, "disk_cap") == Some(CAP as i64) && used.is_some_and(|u| u >= 20 << 20)
        });
        let table = env.lz(&ws, &["ps"]).run();
        assert!(
            table.stdout.contains("DISK") && table.stdout.contains("/64MiB"),
            "{table:?}"
        );
        env.write(&ws.join("seen"), "");
    }
    let out = child.wait_with_output().unwrap();
    let r = harness::Run::from(out);
    assert!(ready, "the session never got to its held file: {r:?}");
    assert_eq!(r.code, 0, "{r:?}");
    for p in ["/tmp/big", "/workspace/build/big", "/srv/big"] {
        let (rc, size) = filled(&r.stdout, p);
        eprintln!("{p}: dd rc={rc}, reached {} MiB of a 64 MiB cap", size >> 20);
        assert_ne!(rc, 0, "200 MiB fitted under a 64 MiB cap at {p}: {r:?}");
        assert!(r.stdout.contains(&format!("{p} enospc")), "not ENOSPC at {p}: {r:?}");
        assert!(size <= CAP + SLACK, "{p} grew to {size} bytes past the cap: {r:?}");
        assert!(size >= CAP / 2, "{p} stopped far below the cap ({size} bytes): {r:?}");
    }
    assert!(r.stdout.contains("small-ok"), "no write after the removal: {r:?}");
    assert!(r.stdout.contains("srv-ok"), "no write to /srv after the removal: {r:?}");
    assert!(
        r.stdout.contains("git-ok"),
        "a repository in /tmp works as on a plain bind: {r:?}"
    );
    let u = used.expect("ps --json shows disk_used");
    assert!((20 << 20..CAP as i64).contains(&u), "ps disk_used {u}: {r:?}");
    // A second run works and the budget starts from what stayed.
    let r = env.run_sh_with_config(
        &ws,
        &cfg,
        "cat /workspace/build/small && echo again > /tmp/x && echo ok",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "small\nok\n", "{r:?}");
    let r = env.lz(&ws, &["rm", "--yes"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
}

/// Issue 27, acceptance 4 (a persisted path): with a cap, a persisted
/// path's overlay keeps its upper on a storage view that counts it
/// (`view::fs::View::storage`); 200 MiB written to `/root` fail with
/// ENOSPC near the cap, and the Domain keeps working once the file is gone.
#[test]
fn the_disk_cap_holds_for_a_persisted_path_while_the_domain_runs() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("lim-disk-p");
    let cfg = env.write_config(&base, "[profiles.default.limits]\ndisk = \"64MiB\"\n");
    let script = format!("{FILL}fill /root/big; rm -f /root/big; echo small > /root/small && echo small-ok");
    let r = env.run_sh_with_config(&ws, &cfg, &script);
    assert_eq!(r.code, 0, "{r:?}");
    let (rc, size) = filled(&r.stdout, "/root/big");
    eprintln!("/root/big: dd rc={rc}, reached {} MiB of a 64 MiB cap", size >> 20);
    assert_ne!(rc, 0, "200 MiB fitted under a 64 MiB cap at /root: {r:?}");
    assert!(r.stdout.contains("/root/big enospc"), "{r:?}");
    assert!(size <= CAP + SLACK, "{r:?}");
    assert!(r.stdout.contains("small-ok"), "{r:?}");
    let r = env.run_sh_with_config(&ws, &cfg, "cat /root/small");
    assert_eq!(r.stdout, "small\n", "{r:?}");
    let r = env.lz(&ws, &["rm", "--yes"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
}

/// What persisting means holds under a disk cap too (the overlay's upper
/// on a counting storage view): foreign owners, set-id modes, symlinks,
/// hard links, FIFOs, deletions of image files (whiteouts) and a
/// directory replaced as a whole (opaque) are all there at the next run,
/// exactly as without a cap.
#[test]
fn persisted_paths_under_a_disk_cap_keep_what_was_persisted() {
    let (env, _g) = require_env!(shared);
    let write = "set -e; d=/usr/local/lz; mkdir -p $d/sub; echo a > $d/f; chown 4242:4243 $d/f; chmod 4755 $d/f
        chown 77:78 $d/sub; chmod 2770 $d/sub; ln -s f $d/l; ln $d/f $d/h; mkfifo $d/p
        rm /usr/bin/yes; rm -rf /etc/apt; mkdir /etc/apt; touch /etc/apt/new
        mv $d/sub $d/sub2; echo ok";
    let check = "d=/usr/local/lz; stat -c '%n %u:%g %a %h %F' $d/f $d/sub2 $d/p; readlink $d/l
        test -e /usr/bin/yes && echo yes-back; ls -A /etc/apt; cat $d/h";
    let mut seen = Vec::new();
    for (name, limits) in [
        ("lim-sem-ref", ""),
        ("lim-sem-cap", "[profiles.default.limits]\ndisk = \"256MiB\"\n"),
    ] {
        let (base, ws) = env.base_and_workspace(name);
        let cfg = env.write_config(&base, &format!("[profiles.default]\n{limits}"));
        let r = env.run_sh_with_config(&ws, &cfg, write);
        assert_eq!(r.code, 0, "{name}: {r:?}");
        assert!(r.stdout.ends_with("ok\n"), "{name}: {r:?}");
        let r = env.run_sh_with_config(&ws, &cfg, check);
        assert_eq!(r.code, 0, "{name}: {r:?}");
        eprintln!("{name}: {}", r.stdout);
        seen.push(r.stdout);
        let r = env.lz(&ws, &["rm", "--yes"]).config_home(&cfg).run();
        assert_eq!(r.code, 0, "{r:?}");
    }
    assert!(
        seen[0].contains("/usr/local/lz/f 4242:4243 4755 2 regular file")
            && seen[0].contains("/usr/local/lz/sub2 77:78 2770")
            && !seen[0].contains("yes-back")
            && seen[0].contains("\nnew\na\n"),
        "the reference run: {}",
        seen[0]
    );
    assert_eq!(seen[1], seen[0], "under a disk cap the persisted state differs");
}

/// Variants of the disk-cap attack (cap 64 MiB): a `fallocate` of 200 MiB
/// is refused whole, a 1 GiB sparse file filled in, a hard link that
/// keeps a removed file's blocks, and two writers at once (`/tmp` and an
/// ignored directory, one shared budget) each end near the cap; after
/// removal the Domain writes again.
#[test]
fn the_disk_cap_holds_against_fallocate_sparse_files_links_and_parallel_writers() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("lim-disk-v");
    let cfg = env.write_config(&base, "[profiles.default.limits]\ndisk = \"64MiB\"\n");
    env.write(&ws.join(".gitignore"), "build/\n");
    let script = "mkdir -p /workspace/build
        fallocate -l 200M /tmp/fa; echo \"fa rc=$? kib=$(du -k /tmp/fa | cut -f1)\"; rm -f /tmp/fa
        truncate -s 1G /root/sp; out=$(dd if=/dev/zero of=/root/sp bs=1M count=200 conv=notrunc 2>&1)
        echo \"sp rc=$? kib=$(( $(echo \"$out\" | tail -1 | cut -d' ' -f1) / 1024 ))\"; rm -f /root/sp
        dd if=/dev/zero of=/tmp/l1 bs=1M count=40 2>/dev/null; ln /tmp/l1 /tmp/l2; rm /tmp/l1
        dd if=/dev/zero of=/tmp/l3 bs=1M count=40 2>/dev/null; echo \"ln rc=$? kib=$(du -k /tmp/l3 | cut -f1)\"
        rm -f /tmp/l2 /tmp/l3
        dd if=/dev/zero of=/tmp/pa bs=1M count=100 2>/dev/null & p=$!
        dd if=/dev/zero of=/workspace/build/pb bs=1M count=100 2>/dev/null; b=$?; wait $p; a=$?
        echo \"par rc=$a,$b kib=$(( $(du -k /tmp/pa | cut -f1) + $(du -k /workspace/build/pb | cut -f1) ))\"
        rm -f /tmp/pa /workspace/build/pb
        echo small > /root/after && echo small > /tmp/after && echo after-ok";
    let r = env.run_sh_with_config(&ws, &cfg, script);
    assert_eq!(r.code, 0, "{r:?}");
    eprintln!("{}", r.stdout);
    let field = |tag: &str, k: &str| -> String {
        let l = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{tag} ")))
            .unwrap_or_else(|| panic!("no {tag} line: {r:?}"));
        l.split(&format!("{k}="))
            .nth(1)
            .unwrap_or("")
            .split(' ')
            .next()
            .unwrap_or("")
            .to_string()
    };
    let kib = |tag: &str| -> u64 { field(tag, "kib").parse().unwrap() };
    let cap_kib = CAP >> 10;
    let slack_kib = SLACK >> 10;
    // fallocate is refused before anything is allocated.
    assert_ne!(field("fa", "rc"), "0", "{r:?}");
    assert!(kib("fa") < 1024, "{r:?}");
    // The sparse file (what dd wrote into it), the link and the parallel
    // writers stop near the cap.
    assert_ne!(field("sp", "rc"), "0", "{r:?}");
    assert!((cap_kib / 2..=cap_kib + slack_kib).contains(&kib("sp")), "{r:?}");
    // 40 MiB kept by the link + 40 MiB more do not fit under 64 MiB.
    assert_ne!(field("ln", "rc"), "0", "the link's blocks were given back early: {r:?}");
    assert!(kib("ln") < 30 << 10, "{r:?}");
    assert_ne!(field("par", "rc"), "0,0", "{r:?}");
    assert!(
        kib("par") <= cap_kib + slack_kib,
        "two writers passed the cap together: {r:?}"
    );
    assert!(r.stdout.contains("after-ok"), "{r:?}");
    let r = env.lz(&ws, &["rm", "--yes"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
}
