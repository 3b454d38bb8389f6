//! Upgrades never strand a Domain: `ps` lists, and `stop` stops, a Domain
//! started by a build of another protocol version; everything else is
//! refused with a message naming the build that started it.
//!
//! The other build is this build told `LAZARET_FAULT_PROTOCOL` (a
//! `fault-injection` switch; the client that starts the Domain and its
//! coordinator both speak that protocol version): `99` stands for a newer
//! or older build that answers the frozen basic exchange, `2/no-basic` for
//! a build from before it (its coordinator drops the basic frame, as one
//! whose codec does not know the tag does). What this proves: the basic
//! frames' handling across two protocol versions, the on-disk fallback for
//! a coordinator that answers neither, and that stopping leaves no process
//! behind. The bytes of a real older build are the second test's: the
//! previous release, built from its commit by scripts/old-build.sh
//! (scripts/test.sh pins the commit), starts the Domains. It speaks this
//! build's protocol version (3, as every build since the escalation
//! prompt), so this build reaches it as itself and, told another version,
//! through that build's own basic exchange. (A build from before the basic
//! exchange also speaks 3: this build's full protocol reaches its Domains
//! directly.)

use std::path::Path;
use std::time::Duration;

use crate::harness::*;
use crate::require_env;

/// The host processes of the Domain of `ws`, but not the CLI that started it.
fn domain_procs(env: &Env, ws: &Path) -> Vec<(i32, Vec<u32>, String)> {
    env.domain_processes(ws)
        .into_iter()
        .filter(|(_, uids, c)| uids.first() == Some(&env.uid) && !c.contains(" run --"))
        .collect()
}

#[test]
fn upgrade_other_builds_domains_are_listed_and_stopped() {
    let env = require_env!();
    let _g = GLOBAL.read();
    for (fault, build_words, stop_words) in [
        ("99", "(protocol 99)", "stopping it"),
        ("2/no-basic", "a build from before the basic exchange", "with SIGTERM"),
    ] {
        let ws = env.dir("upgrade");
        let id = env.domain_id("default", &ws);
        let mut old = env
            .lz(&ws, &["run", "--", "sleep", "300"])
            .env("LAZARET_FAULT_PROTOCOL", fault)
            .spawn_bg();
        // This build's `ps` lists it among another build's Domains.
        let mut ps = Run::from(std::process::Command::new("true").output().unwrap());
        let listed = eventually(Duration::from_secs(90), || {
            ps = env.lz(&ws, &["ps"]).run();
            ps.stdout.contains(&id[..12])
        });
        if !listed {
            // What the other build's client said (it may have failed to start).
            let _ = old.0.kill();
            let mut err = String::new();
            if let Some(mut e) = old.0.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            panic!("{fault}: not listed: {ps:?}\nthe other build's run said: {err}");
        }
        assert!(
            ps.stdout.contains("started by another lazaret build"),
            "{fault}: {ps:?}"
        );
        let row = ps.stdout.lines().find(|l| l.starts_with(&id[..12])).unwrap();
        assert!(row.contains(build_words) && row.contains("default"), "{fault}: {row}");
        let json = env.ps_json(&ws);
        let obj = json_domain(&json, &id).unwrap_or("");
        assert!(obj.contains("\"other_build\":true"), "{fault}: {json}");
        assert!(
            json_number(&json, &id, "coordinator_pid").unwrap_or(0) > 1,
            "{fault}: {json}"
        );
        let procs = domain_procs(env, &ws);
        assert!(
            procs.iter().any(|(_, _, c)| c.starts_with("lazaret:[coordinator]")),
            "{fault}: {procs:?}"
        );
        assert!(procs.iter().any(|(_, _, c)| c.contains("runsc")), "{fault}: {procs:?}");

        // What needs the full protocol is refused, naming how to restart.
        if fault == "99" {
            let r = env.lz(&ws, &["run", "--", "true"]).run();
            assert_ne!(r.code, 0, "{r:?}");
            assert!(r.stderr.contains("this Domain was started by lazaret"), "{r:?}");
            assert!(r.stderr.contains(&format!("lazaret stop {}", &id[..12])), "{r:?}");
        }

        // This build's `stop ID` stops it; nothing of it is left.
        let r = env.lz(&env.home, &["stop", &id[..12]]).run();
        assert_eq!(r.code, 0, "{fault}: {r:?}");
        assert!(r.stdout.contains(stop_words), "{fault}: {r:?}");
        assert!(r.stdout.contains(&format!("stopped Domain {id}")), "{fault}: {r:?}");
        let gone = eventually(Duration::from_secs(20), || domain_procs(env, &ws).is_empty());
        assert!(gone, "{fault}: left behind: {:?}", domain_procs(env, &ws));
        let status = wait_bounded(&mut old.0, Duration::from_secs(20), "the other build's client");
        assert!(!status.success(), "{fault}: its session was ended: {status:?}");
        assert!(!env.runtime_root().join(&id).join("hc.sock").exists(), "{fault}");
        let ps = env.lz(&ws, &["ps"]).run();
        assert!(!ps.stdout.contains(&id[..12]), "{fault}: still listed: {ps:?}");
    }
}

/// The previous release's binaries, built from its commit by
/// scripts/old-build.sh and staged by scripts/test.sh in
/// `LAZARET_TEST_OLD_BIN_DIR` (with the commit in `commit`), as an [`Env`]
/// that runs them; `None` after saying why not (under `LAZARET_MUST_WORK=1`
/// the test fails instead).
fn previous_release(env: &Env) -> Option<(Env, String)> {
    let why = match std::env::var("LAZARET_TEST_OLD_BIN_DIR") {
        Err(_) => "LAZARET_TEST_OLD_BIN_DIR is unset (scripts/test.sh builds the previous release with scripts/old-build.sh and sets it)".to_string(),
        Ok(dir) => {
            let dir = std::path::PathBuf::from(dir);
            let commit = std::fs::read_to_string(dir.join("commit")).unwrap_or_default();
            let bins = ["lazaret", "lazaret-init", "lazaret-escalate"];
            if let Some(b) = bins.iter().find(|b| !dir.join(b).is_file()) {
                format!("{}: no {b} (scripts/old-build.sh COMMIT DIR makes it)", dir.display())
            } else if commit.trim().len() < 12 {
                format!("{}: no commit file (scripts/old-build.sh writes it)", dir.display())
            } else {
                let old = Env {
                    user: env.user.clone(),
                    uid: env.uid,
                    gid: env.gid,
                    home: env.home.clone(),
                    bin: dir,
                };
                return Some((old, commit.trim()[..12].to_string()));
            }
        }
    };
    let test = module_path!();
    if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
        panic!("{test}: cannot run ({why}) and LAZARET_MUST_WORK=1");
    }
    eprintln!("skipping: {test}: {why}");
    None
}

/// A process as the test saw it: pid and start time (`/proc/PID/stat`
/// field 22), so that a reused pid is not taken for it.
fn proc_start(pid: i32) -> Option<(i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    // Fields from the state (3rd) on: the start time is the 22nd.
    let start = after_comm.split_whitespace().nth(19)?.parse().ok()?;
    Some((pid, start))
}

fn still_there(procs: &[(i32, u64)]) -> Vec<(i32, u64)> {
    procs.iter().filter(|p| proc_start(p.0) == Some(**p)).copied().collect()
}

/// A text field of the first JSON object that mentions `domain` (a small
/// reader for test oracles, as [`json_number`]).
fn json_text(json: &str, domain: &str, key: &str) -> Option<String> {
    let obj = json_domain(json, domain)?;
    let k = format!("\"{key}\":\"");
    let v = &obj[obj.find(&k)? + k.len()..];
    Some(v[..v.find('"')?].to_string())
}

/// The upgrade as a user meets it: a Domain started by the previous
/// release's real build (scripts/old-build.sh; no stand-in) is listed by
/// this build's `ps`, stopped by its `stop` with no process of it left, and
/// removed by its `rm`. The previous release speaks this build's protocol
/// version (3): this build's full protocol reaches its coordinator. Then
/// the path across protocol versions against the same real build: this
/// build told `LAZARET_FAULT_PROTOCOL=99` (another protocol version) lists
/// it with the build that started it and stops it through the frozen basic
/// exchange, whose bytes are then the previous release's own.
#[test]
fn upgrade_previous_release_domains_are_listed_stopped_and_removed() {
    let env = require_env!();
    let _g = GLOBAL.read();
    let Some((old, commit)) = previous_release(env) else {
        return;
    };
    let version = |e: &Env| {
        let r = e.lz(&e.home, &["version", "--json"]).run();
        assert_eq!(r.code, 0, "{} version --json: {r:?}", e.bin.display());
        r.stdout
    };
    let old_version = version(&old);
    assert!(
        old_version.contains(&format!("\"commit\":\"{commit}\"")),
        "the previous release names its commit {commit}: {old_version}"
    );
    let protocol = |v: &str| {
        let k = "\"protocol\":";
        let rest = &v[v.find(k).unwrap() + k.len()..];
        rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap()]
            .parse::<u32>()
            .unwrap()
    };
    let (old_protocol, new_protocol) = (protocol(&old_version), protocol(&version(env)));
    let build = format!("(commit {commit}) (protocol {old_protocol})");

    // Two Domains of the previous release, started at once.
    let (wa, wb) = (env.dir("upgrade-real-a"), env.dir("upgrade-real-b"));
    let (ida, idb) = (env.domain_id("default", &wa), env.domain_id("default", &wb));
    let mut clients: Vec<Bg> = [&wa, &wb]
        .iter()
        .map(|ws| old.lz(ws, &["run", "--", "sleep", "300"]).spawn_bg())
        .collect();
    let started = |ws: &Path, id: &str, fault: Option<&str>, clients: &mut Vec<Bg>| {
        let mut ps = String::new();
        let listed = eventually(Duration::from_secs(120), || {
            let mut c = env.lz(ws, &["ps", "--json"]);
            if let Some(f) = fault {
                c = c.env("LAZARET_FAULT_PROTOCOL", f);
            }
            ps = c.run().stdout;
            // Ready, or another build's (whose phase this build does not read).
            json_domain(&ps, id)
                .is_some_and(|o| o.contains("\"phase\":\"ready\"") || o.contains("\"other_build\":true"))
        });
        if !listed {
            for c in clients.iter_mut() {
                let _ = c.0.kill();
            }
            let said: Vec<String> = clients
                .drain(..)
                .map(|mut c| {
                    let mut err = String::new();
                    if let Some(mut e) = c.0.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    err
                })
                .collect();
            panic!("{id}: not listed by this build: {ps}\nthe previous release's clients said: {said:?}");
        }
        ps
    };

    // 1. This build, as it is: lists A among its own Domains when the
    //    protocol is the same (else among another build's), stops it.
    let json = started(&wa, &ida, None, &mut clients);
    let same = old_protocol == new_protocol;
    let obj = json_domain(&json, &ida).unwrap();
    assert!(obj.contains(&format!("\"other_build\":{}", !same)), "{json}");
    let ps = env.lz(&wa, &["ps"]).run();
    let row = ps.stdout.lines().find(|l| l.starts_with(&ida[..12])).unwrap_or("");
    assert!(row.contains("default"), "{ps:?}");
    if !same {
        assert!(row.contains(&build), "{ps:?}");
    }
    // What the test records of A: its coordinator, supervisor and runsc
    // (ps --json names them) and every process of the user that mentions
    // its ID or workspace.
    let mut procs_a: Vec<(i32, u64)> = domain_procs(env, &wa).iter().filter_map(|p| proc_start(p.0)).collect();
    let keys: &[&str] = if same {
        &["coordinator_pid", "supervisor_pid", "runsc_pid"]
    } else {
        &["coordinator_pid"]
    };
    for key in keys {
        let pid = json_number(&json, &ida, key).unwrap_or(0) as i32;
        let p = proc_start(pid).unwrap_or_else(|| panic!("{key} {pid} is no process: {json}"));
        procs_a.push(p);
    }
    assert!(
        domain_procs(env, &wa)
            .iter()
            .any(|(_, _, c)| c.starts_with("lazaret:[coordinator]"))
            && domain_procs(env, &wa).iter().any(|(_, _, c)| c.contains("runsc")),
        "{:?}",
        domain_procs(env, &wa)
    );
    let r = env.lz(&env.home, &["stop", &ida[..12]]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("stopped Domain {ida}")), "{r:?}");
    let gone = eventually(Duration::from_secs(20), || {
        still_there(&procs_a).is_empty() && domain_procs(env, &wa).is_empty()
    });
    assert!(
        gone,
        "left behind: {:?} {:?}",
        still_there(&procs_a),
        domain_procs(env, &wa)
    );
    let status = wait_bounded(
        &mut clients[0].0,
        Duration::from_secs(20),
        "the previous release's client",
    );
    assert!(!status.success(), "its session was ended: {status:?}");
    assert!(!env.runtime_root().join(&ida).exists(), "runtime dir left");
    let ps = env.lz(&wa, &["ps"]).run();
    assert!(!ps.stdout.contains(&ida[..12]), "still listed: {ps:?}");
    // Its state, made by the previous release, goes with this build's rm.
    let root = env.home.join(".local/share/lazaret/domains").join(&ida);
    assert!(root.exists(), "the previous release made {}", root.display());
    let r = env.lz(&wa, &["rm", "--yes"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!root.exists(), "rm left {}", root.display());

    // 2. Across protocol versions: this build as one of another protocol
    //    version meets B's real coordinator of the previous release.
    let fault = if old_protocol == 99 { "98" } else { "99" };
    started(&wb, &idb, None, &mut clients);
    let json = started(&wb, &idb, Some(fault), &mut clients);
    assert!(
        json_domain(&json, &idb).unwrap().contains("\"other_build\":true"),
        "{json}"
    );
    let told = json_text(&json, &idb, "build").unwrap_or_default();
    assert!(told.ends_with(&format!("(commit {commit})")), "{json}");
    let pid = json_number(&json, &idb, "coordinator_pid").unwrap_or(0) as i32;
    let mut procs_b: Vec<(i32, u64)> = domain_procs(env, &wb).iter().filter_map(|p| proc_start(p.0)).collect();
    procs_b.push(proc_start(pid).unwrap_or_else(|| panic!("coordinator {pid} is no process: {json}")));
    let ps = env.lz(&wb, &["ps"]).env("LAZARET_FAULT_PROTOCOL", fault).run();
    assert!(ps.stdout.contains("started by another lazaret build"), "{ps:?}");
    let row = ps.stdout.lines().find(|l| l.starts_with(&idb[..12])).unwrap_or("");
    assert!(row.contains(&build) && row.contains("default"), "{ps:?}");
    let r = env
        .lz(&env.home, &["stop", &idb[..12]])
        .env("LAZARET_FAULT_PROTOCOL", fault)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "was started by lazaret {told} (protocol {old_protocol}): stopping it"
        )),
        "{r:?}"
    );
    assert!(r.stdout.contains(&format!("stopped Domain {idb}")), "{r:?}");
    let gone = eventually(Duration::from_secs(20), || {
        still_there(&procs_b).is_empty() && domain_procs(env, &wb).is_empty()
    });
    assert!(
        gone,
        "left behind: {:?} {:?}",
        still_there(&procs_b),
        domain_procs(env, &wb)
    );
    let status = wait_bounded(
        &mut clients[1].0,
        Duration::from_secs(20),
        "the previous release's client",
    );
    assert!(!status.success(), "its session was ended: {status:?}");
    let r = env.lz(&wb, &["rm", "--yes"]).run();
    assert_eq!(r.code, 0, "{r:?}");
}
