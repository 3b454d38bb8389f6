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
//! behind. What it does not: the bytes of a real older build (the basic
//! frames' bytes are pinned by `wire::basic`'s unit test; a build of the
//! commit before the basic exchange speaks the same protocol version, 3,
//! so this build's full protocol reaches its Domains directly).

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
