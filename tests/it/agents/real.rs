//! The real agents of docs/agents.md (issue 29 acceptance 1 and 6): Claude
//! Code and Codex CLI, installed inside a Domain of their documented
//! profile with `npm install -g` as the page says, start three times in a
//! row and after a `kill -9` of the coordinator; `lazaret rm` then removes
//! everything. Tests send no packet outside the machine: the packages come
//! from the npm caches scripts/install-deps.sh fetched
//! (tests/fixtures/agents/real-agents.txt), bound read-only, and the
//! Domain has no network (`network.mode = "none"`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::*;
use crate::require_env;

/// Where the caches are read in the guest.
const GUEST_CACHE: &str = "/opt/agent-cache";

/// The pinned line of real-agents.txt for `name`: the package spec the
/// test installs and the whole line of specs install-deps.sh fetched.
pub(crate) fn pinned(name: &str) -> (String, String) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents/real-agents.txt");
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let specs = text
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{} has no line for {name}", p.display()));
    let first = specs.split_whitespace().next().unwrap().to_string();
    (first, specs.trim().to_string())
}

/// The npm cache install-deps.sh fetched for `name`, if it holds exactly
/// the pinned specs; otherwise prints `skipping` (a failure under
/// LAZARET_MUST_WORK=1).
pub(crate) fn agent_cache(name: &str, specs: &str) -> Option<PathBuf> {
    let tools = std::env::var("LAZARET_TOOLS").unwrap_or_else(|_| "/var/tmp/lazaret-tools".into());
    let cache = Path::new(&tools).join("agents").join(name);
    let have = std::fs::read_to_string(cache.join(".lazaret-specs")).unwrap_or_default();
    if have.trim() == specs {
        return Some(cache);
    }
    let why = format!(
        "{} does not hold {specs} (scripts/install-deps.sh fetches it)",
        cache.display()
    );
    if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
        panic!("{why} and LAZARET_MUST_WORK=1");
    }
    eprintln!("skipping: {why}");
    None
}

/// The documented profiles without their `network` and `secrets` tables,
/// with `pass_env` for the keys instead (the tests' Domains have no
/// network: a gate would resolve the real API's names).
fn offline(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            skipping = t.starts_with("[profiles.claude.network]")
                || t.starts_with("[profiles.codex.network]")
                || t.starts_with("[profiles.claude.secrets.")
                || t.starts_with("[profiles.codex.secrets.");
        }
        if skipping {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if t.starts_with("[profiles.claude]") {
            out.push_str("pass_env = [\"ANTHROPIC_API_KEY\"]\n");
        } else if t.starts_with("[profiles.codex]") {
            out.push_str("pass_env = [\"OPENAI_API_KEY\"]\n");
        }
    }
    out
}

/// A real prompt: `claude -p` (key by the profile's `pass_env`) against a
/// stand-in Anthropic API on the sandbox's own loopback
/// (`ANTHROPIC_BASE_URL`) prints the API's reply; the stand-in saw the
/// request. No packet leaves the sandbox (network mode none).
fn claude_round_trip(env: &Env, ws: &Path, cfg: &Path) {
    let fake = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents/fake-anthropic.py");
    env.write(&ws.join("fake-anthropic.py"), &std::fs::read_to_string(&fake).unwrap());
    let script = "python3 /workspace/fake-anthropic.py 8765 reply-$((6*7))-from-the-api 2>/tmp/api.log & api=$!; \
        i=0; until python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8765))' 2>/dev/null; do \
          i=$((i+1)); [ $i -lt 300 ] || break; sleep 0.1; done; \
        ANTHROPIC_BASE_URL=http://127.0.0.1:8765 timeout 120 claude -p hi; echo rc=$?; \
        kill $api; cat /tmp/api.log >&2";
    let r = env
        .lz_in(ws, "claude", &["sh", "-c", script])
        .config_home(cfg)
        .env("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key")
        .run();
    eprintln!("claude -p: {r:?}");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("reply-42-from-the-api\nrc=0\n"), "{r:?}");
    assert!(
        r.stderr.contains("POST /v1/messages"),
        "the stand-in API was asked: {r:?}"
    );
}

/// Issue 29, acceptance 1 with the real agents: for `claude` and `codex`
/// (docs/agents.md's profiles: `user = "dev"` on the `dev` image, their
/// credential volumes at test directories), the agent installed once as
/// root with `npm install -g` runs `--version` as `dev`, on Node 22, in
/// three starts in a row and after a `kill -9` of the coordinator with a
/// session running; `rm --yes` leaves no Domain Root and no process.
/// Claude Code also answers a prompt from a stand-in API
/// ([`claude_round_trip`]).
#[test]
fn real_claude_and_codex_start_three_times_and_after_a_killed_coordinator() {
    let (env, _g) = require_env!(shared);
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    for (profile, bin, says) in [("claude", "claude", "(Claude Code)"), ("codex", "codex", "codex-cli ")] {
        let (spec, specs) = pinned(profile);
        let Some(cache) = agent_cache(profile, &specs) else {
            return;
        };
        let version = spec.rsplit('@').next().unwrap().to_string();
        let (ws, creds, cfg) = crate::agents::profiles::fixture(env, &format!("real-{profile}"));
        let mut text = crate::limits::leftovers::documented_agent_config(env, &creds)
            .replace("@CREDS@", &creds.display().to_string())
            .replace(
                "volumes = [\"",
                &format!("volumes = [\"{}:{GUEST_CACHE}:ro\", \"", cache.display()),
            );
        assert!(text.contains(GUEST_CACHE), "{text}");
        // No packet may leave: the documented allow-by-name network and the
        // keys it swaps in at the gate give way to no network at all, and
        // the stand-in API's test key comes in by `pass_env`.
        text = offline(&text);
        for p in ["claude", "codex"] {
            text.push_str(&format!("\n[profiles.{p}.network]\nmode = \"none\"\n"));
        }
        env.write(&cfg.join("lazaret/config.toml"), &text);
        let run = |root: bool, script: &str| {
            let mut a = vec!["run", "--profile", profile];
            if root {
                a.push("--root");
            }
            a.extend_from_slice(&["--", "sh", "-c", script]);
            env.lz(&ws, &a).config_home(&cfg).run()
        };
        // Installed as docs/agents.md says, from the local cache.
        let r = run(
            true,
            &format!(
                "cp -R {GUEST_CACHE} /tmp/npm-cache && \
                 npm install -g --offline --no-audit --no-fund --cache /tmp/npm-cache {spec} && \
                 rm -rf /tmp/npm-cache && echo installed"
            ),
        );
        assert_eq!(r.code, 0, "{profile}: npm install -g {spec}: {r:?}");
        assert!(r.stdout.ends_with("installed\n"), "{profile}: {r:?}");
        let check = format!("id -un; node --version; {bin} --version");
        let expect = |r: &Run, when: &str| {
            assert_eq!(r.code, 0, "{profile} {when}: {r:?}");
            let mut lines = r.stdout.lines();
            assert_eq!(lines.next(), Some("dev"), "{profile} {when}: {r:?}");
            assert!(
                lines.next().is_some_and(|l| l.starts_with("v22.")),
                "{profile} {when}: Node 22 first on the PATH: {r:?}"
            );
            let v = lines.next().unwrap_or_default();
            assert!(v.contains(says) && v.contains(&version), "{profile} {when}: {r:?}");
            eprintln!("{profile} {when}: {}", r.stdout.replace('\n', " | "));
        };
        for i in 1..=3 {
            expect(&run(false, &check), &format!("start {i}"));
        }
        if profile == "claude" {
            claude_round_trip(env, &ws, &cfg);
        }
        // A session running the agent, its coordinator killed.
        let id = env.domain_id(profile, &ws);
        let mut keeper = env
            .lz_in(&ws, profile, &["sh", "-c", &format!("{check}; sleep 300")])
            .config_home(&cfg)
            .spawn();
        let pid = env.coordinator_pid(&ws, &id, profile);
        env.kill_coordinator(pid, &mut keeper, profile, &ws);
        expect(&run(false, &check), "after kill -9");
        let r = env
            .lz(&ws, &["rm", "--yes", "--profile", profile])
            .config_home(&cfg)
            .run();
        assert_eq!(r.code, 0, "{profile}: {r:?}");
        assert!(
            !crate::limits::leftovers::domain_root(env, &id).exists(),
            "{profile}: rm left the Domain Root"
        );
        assert!(
            eventually(Duration::from_secs(30), || processes_mentioning(&id).is_empty()),
            "{profile}: processes left: {:?}",
            processes_mentioning(&id)
        );
    }
}
