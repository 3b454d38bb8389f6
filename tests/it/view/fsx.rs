//! Random file operations through the view checked against a model of the
//! file's bytes (issue 47, acceptance 2, the part CI runs): scripts/fsx.sh
//! runs scripts/fsx.py through the view and on a plain bind of the same
//! host directory in one invocation, with plain, O_DIRECT and mapped reads
//! and writes, truncates, fallocate, fsync and reopens. Before the fix a
//! seed read back stale bytes (READ BAD DATA) or was refused a write of its
//! own file (EBUSY) now and then through the view, never on the bind.

use std::path::Path;

use crate::require_env;

/// Runs scripts/fsx.sh with `runs` runs of each seed; its output.
fn fsx(env: &crate::harness::Env, runs: u32, seeds: &[u32]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fsx.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(runs.to_string())
        .args(seeds.iter().map(|s| s.to_string()))
        .env("LAZARET_TEST_USER", &env.user)
        .env("LAZARET_BIN", env.bin.join("lazaret"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The (pass, fail) counts the script printed for `seed` on `side`.
fn counts(text: &str, seed: u32, side: &str) -> Option<(u32, u32)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            [s, sd, _runs, p, x] if *s == seed.to_string() && *sd == side => Some((p.parse().ok()?, x.parse().ok()?)),
            _ => None,
        }
    })
}

/// Three seeds (the reported one, 3, and two more), 10,000 operations each,
/// all clean through the view and on the bind; and the checker proves on
/// both sides that it reports a byte changed behind its back, so a clean
/// run means the reads matched, not that nothing was compared.
#[test]
fn fsx_seeds_run_clean_through_the_view_as_on_a_bind() {
    let (env, _g) = require_env!(shared);
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let seeds = [3, 5, 8];
    let (ok, text) = fsx(env, 1, &seeds);
    for side in ["view", "bind"] {
        assert!(
            text.contains(&format!("checker ({side}): caught a byte changed behind its back")),
            "{side}: {text}"
        );
    }
    for seed in seeds {
        assert_eq!(
            counts(&text, seed, "bind"),
            Some((1, 0)),
            "seed {seed} on the bind: {text}"
        );
        assert_eq!(
            counts(&text, seed, "view"),
            Some((1, 0)),
            "seed {seed} through the view: {text}"
        );
    }
    assert!(ok, "{text}");
    assert!(
        !text.contains("BAD DATA") && !text.contains("unexpected error"),
        "{text}"
    );
}
