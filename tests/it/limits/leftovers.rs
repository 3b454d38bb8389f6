//! Nothing the sandbox leaves behind bricks a Domain: trees of any owner,
//! mode, depth and size planted in `/tmp`, in a persisted path and in
//! ignored workspace state never stop the next `run`, and `lazaret rm`
//! removes all of it (issue 27 acceptance 1). The documented agent
//! profiles start three times in a row and after a `kill -9` of the
//! coordinator with what Claude Code and Codex leave in `/tmp` (issue 29
//! acceptance 1).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::*;
use crate::require_env;

pub fn domain_root(env: &Env, id: &str) -> PathBuf {
    env.home.join(".local/share/lazaret/domains").join(id)
}

/// Shapes the sandbox can make that the host user cannot delete with its
/// own rights: each is planted under `$1` (a directory of /tmp, of a
/// persisted path or of an ignored directory).
const PLANT: &str = r#"set -e
b=$1
# 1. The brick of issue 27: a subordinate owner, 0700 at two levels.
mkdir -p $b/brick/inner; touch $b/brick/inner/f
chown -R 4242:4242 $b/brick; chmod 700 $b/brick/inner $b/brick
# 2. Mode 0000 everywhere, owned by the guest's root.
mkdir -p $b/zero/a; echo x > $b/zero/a/f; chmod 000 $b/zero/a/f $b/zero/a $b/zero
# 3. Immutable-looking: read-only directories (0555) of a foreign owner
#    with entries, a sticky directory with files of several owners, and
#    the immutable flag where the stack takes it.
mkdir -p $b/ro/d; touch $b/ro/d/f $b/ro/g; chattr +i $b/ro/d/f 2>/dev/null || true
chown -R 7:7 $b/ro; chmod 555 $b/ro/d $b/ro
mkdir $b/sticky; chmod 1777 $b/sticky
for u in 1 2 3 65534; do touch $b/sticky/f$u; chown $u:$u $b/sticky/f$u; done
chown 9:9 $b/sticky; chmod 1700 $b/sticky
# 4. A deep tree (beyond any fd budget), foreign-owned and closed at the bottom.
d=$b/deep; i=0
while [ $i -lt 400 ]; do d=$d/d; i=$((i+1)); done
mkdir -p $d; touch $d/bottom; chown -R 31337:31337 $b/deep
chmod 700 $d; chmod 000 $b/deep
# 5. Many entries in one closed directory.
mkdir $b/many; cd $b/many; seq 1 5000 | xargs touch; cd /
chown -R 5000:5000 $b/many; chmod 500 $b/many
# 6. Special files, a symlink to a host path, a hard link.
mkfifo $b/fifo; ln -s "$2" $b/host-link; ln $b/brick/inner/f $b/hard 2>/dev/null || true
python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])" $b/sock 2>/dev/null || true
echo planted
"#;

fn plant(env: &Env, ws: &Path, cfg: &Path, base: &str, host_marker: &Path) -> Run {
    let script = format!(
        "mkdir -p {base} && sh -c {} plant {base} {}",
        sh_quote(PLANT),
        sh_quote(&host_marker.display().to_string())
    );
    env.run_sh_with_config(ws, cfg, &script)
}

/// Issue 27, acceptance 1: the brick and five other shapes planted in
/// `/tmp`, in a persisted path (`/root`) and in an ignored directory; the
/// next `run` works (with a fresh `/tmp`), nothing is set aside for good,
/// and `rm --yes` removes the Domain Root entirely. A symlink to a host
/// directory is never followed.
#[test]
fn planted_trees_of_any_owner_and_mode_never_brick_a_domain() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("brick");
    let cfg = env.write_config(&base, "[profiles.default]\n");
    env.write(&ws.join(".gitignore"), "build/\n");
    let marker = base.join("host-marker");
    env.write(&marker.join("keep"), "host file\n");
    let id = env.domain_id("default", &ws);
    let root = domain_root(env, &id);
    for place in ["/tmp/p", "/root/p", "/workspace/build/p"] {
        let r = plant(env, &ws, &cfg, place, &marker);
        assert_eq!(r.code, 0, "planting in {place}: {r:?}");
        assert!(r.stdout.contains("planted"), "{r:?}");
        // The next start works and /tmp is fresh.
        let r = env.run_sh_with_config(&ws, &cfg, "ls -A /tmp; echo started");
        assert_eq!(r.code, 0, "after planting in {place}: {r:?}");
        assert_eq!(r.stdout, "started\n", "/tmp is fresh at each start: {r:?}");
    }
    // A persisted plant is kept (that is what persisting means) and the
    // Domain still runs; nothing stayed set aside.
    let r = env.run_sh_with_config(&ws, &cfg, "test -d /root/p/brick && echo kept");
    assert_eq!(r.stdout, "kept\n", "{r:?}");
    let list = env.lz(&ws, &["state", "list", "--json"]).config_home(&cfg).run();
    assert_eq!(list.code, 0, "{list:?}");
    assert!(list.stdout.contains("\"set_aside\":[]"), "{list:?}");
    assert!(!root.join("scratch/tmp/p").exists());
    // /tmp itself closed and given away: still no brick.
    let r = env.run_sh_with_config(&ws, &cfg, "mkdir /tmp/x; chown 4242 /tmp/x /tmp; chmod 000 /tmp");
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run_sh_with_config(&ws, &cfg, "touch /tmp/ok && echo started");
    assert_eq!(r.code, 0, "{r:?}");
    // rm removes everything, and followed no link.
    let r = env.lz(&ws, &["rm", "--yes"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!root.exists(), "the Domain Root is gone: {r:?}");
    assert_eq!(
        std::fs::read_to_string(marker.join("keep")).unwrap(),
        "host file\n",
        "a symlink was followed"
    );
    // The workspace's own files are the user's and untouched.
    assert!(ws.join(".gitignore").exists());
    assert!(!ws.join("build/p").exists(), "ignored state was Domain-side");
}

/// What a session of `profile` (fixture of docs/agents.md) leaves in /tmp
/// as the agents do: `/tmp/claude-1000` (0700, uid 1000) and
/// `/tmp/codex-daemon-1000`.
const AGENT_TMP: &str = "set -e; mkdir -m 700 /tmp/claude-1000 /tmp/codex-daemon-1000; \
    touch /tmp/claude-1000/f /tmp/codex-daemon-1000/sock; \
    [ \"$(id -u)\" = 0 ] && chown -R 1000:1000 /tmp/claude-1000 /tmp/codex-daemon-1000; \
    chmod 700 /tmp/claude-1000 /tmp/codex-daemon-1000; echo left";

/// The `claude` and `codex` profiles exactly as docs/agents.md documents
/// them, their volumes' host side moved to `dir` (and their `ports` left
/// out: other tests may hold port 3000), on the fixture's `dev` recipe.
pub fn documented_agent_config(env: &Env, dir: &Path) -> String {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md")).unwrap();
    let start = doc
        .find("[profiles.claude]")
        .expect("docs/agents.md documents [profiles.claude]");
    let end = start
        + doc[start..]
            .find("[images.aider]")
            .expect("[images.aider] follows codex");
    let mut text = crate::agents::profiles::fixture_text();
    for line in doc[start..end].lines() {
        if line.starts_with("ports") {
            continue;
        }
        text.push_str(&line.replace("/home/me/", &format!("{}/", dir.display())));
        text.push('\n');
    }
    for d in [".claude", ".codex"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
        env.chown(&dir.join(d));
    }
    assert!(
        text.contains("[profiles.codex]") && text.contains("user = \"dev\""),
        "{text}"
    );
    text
}

/// Issue 29, acceptance 1: both documented agent profiles (`claude` and
/// `codex` of docs/agents.md, `user = "dev"` on the `dev` image) start
/// three times in a row, each session leaving what Claude Code and Codex
/// leave in /tmp, then again after a `kill -9` of the coordinator; `rm`
/// then removes everything. The fixture's root profile `dev` too.
#[test]
fn agent_profiles_start_three_times_and_after_a_killed_coordinator() {
    let (env, _g) = require_env!(shared);
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    for profile in ["claude", "codex", "dev"] {
        let (ws, creds, cfg) = crate::agents::profiles::fixture(env, &format!("again-{profile}"));
        let text = documented_agent_config(env, &creds).replace("@CREDS@", &creds.display().to_string());
        env.write(&cfg.join("lazaret/config.toml"), &text);
        // The documented profiles bind their keys as `secrets` (env:).
        let run = |script: &str| {
            env.lz_in(&ws, profile, &["sh", "-c", script])
                .config_home(&cfg)
                .env("ANTHROPIC_API_KEY", "sk-ant-test-key-123")
                .env("OPENAI_API_KEY", "sk-openai-test-key-123")
                .run()
        };
        // The repro of issue 29.
        let r = run("mkdir -m 700 /tmp/mine");
        assert_eq!(r.code, 0, "{profile}: {r:?}");
        for i in 1..=3 {
            let r = run(&format!("ls -A /tmp; {AGENT_TMP}"));
            assert_eq!(r.code, 0, "{profile} start {i}: {r:?}");
            assert_eq!(r.stdout, "left\n", "{profile} start {i}: /tmp is fresh: {r:?}");
        }
        // A session running, its coordinator killed.
        let id = env.domain_id(profile, &ws);
        let mut keeper = env
            .lz_in(&ws, profile, &["sh", "-c", &format!("{AGENT_TMP}; sleep 300")])
            .config_home(&cfg)
            .env("ANTHROPIC_API_KEY", "sk-ant-test-key-123")
            .env("OPENAI_API_KEY", "sk-openai-test-key-123")
            .spawn();
        let hc = env.coordinator_pid(&ws, &id, profile);
        // The session's leftovers are there before the kill.
        assert!(eventually(Duration::from_secs(30), || {
            std::fs::read_dir(domain_root(env, &id).join("scratch/tmp")).is_ok_and(|rd| rd.count() >= 2)
        }));
        env.kill_coordinator(hc, &mut keeper, profile, &ws);
        let r = run(&format!("ls -A /tmp; {AGENT_TMP}"));
        assert_eq!(r.code, 0, "{profile} after kill -9: {r:?}");
        assert_eq!(r.stdout, "left\n", "{profile} after kill -9: {r:?}");
        let r = env
            .lz(&ws, &["rm", "--yes", "--profile", profile])
            .config_home(&cfg)
            .run();
        assert_eq!(r.code, 0, "{profile}: {r:?}");
        assert!(!domain_root(env, &id).exists(), "{profile}: rm left the Domain Root");
    }
}
