//! The soak of the workspace view (scripts/soak.sh, issue 47 acceptance 4)
//! for one minute: random file operations from the host and from the
//! sandbox at once on one tree, then the tree as both sides see it against
//! what each side wrote (content, owner modes, hard-link identity).

use crate::require_env;
use std::path::Path;

#[test]
#[ignore = "under load the sandbox's side still meets an occasional EBUSY (an unlink refused while the host's side has the file open): docs/git.md, Soak; run with --ignored"]
fn soak_one_minute_host_and_sandbox_agree_with_what_each_wrote() {
    let (env, _g) = require_env!(shared);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/soak.sh");
    // The test user's own staged binaries and image: the script only
    // re-runs itself as that user (a long soak uses a user of its own).
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(["--minutes", "1", "--check-every", "25", "--seed", "4711"])
        .env("LAZARET_SOAK_USER", &env.user)
        .env("LAZARET_BIN", env.bin.join("lazaret"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // At least one checkpoint before the last, each with both sides' work.
    let checkpoints: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" checkpoint ") && l.contains("host ops"))
        .collect();
    assert!(checkpoints.len() >= 2, "{text}");
    assert!(
        checkpoints.iter().all(|l| !l.contains("sandbox ops 0 ")),
        "the sandbox's worker did no operation: {text}"
    );
    assert!(out.status.success() && text.contains("soak: no difference"), "{text}");
}
