//! The path users follow (issue 48, acceptance 1): Claude Code and Codex
//! CLI, from the pinned npm caches (tests/fixtures/agents/real-agents.txt),
//! each in its profile of docs/agents.md **as written**, `network.hosts`
//! and `secrets` included, complete real turns against a test API
//! (tests/fixtures/agents/test-api.py): the model asks for a shell
//! command, the agent runs it inside, the result goes back, the model
//! answers. Then the Domain stops, starts again and a second turn has no
//! 401; Claude Code's full-screen UI starts twice in a terminal (the
//! second start must ask neither trust nor key); then a second project,
//! which must have its own path inside (so its own history and trust).
//! The checks that need stable sentinels and per-project paths are
//! gathered and reported together at the end, after everything else ran.
//! It takes 90 to 120 s (both agents, two projects each; 86 s alone, 117 s
//! beside the other agent tests on two cores).
//!
//! What differs from the documented profiles, and only that: the API's
//! base URL (Claude Code: `ANTHROPIC_BASE_URL` in the profile's `env`;
//! Codex: a model provider's `base_url` in `~/.codex/config.toml`, the
//! way users point them at a gateway), the host names (each name of the
//! documented lists with its top-level domain made `.test`: the test API
//! answers `api.anthropic.test` and `api.openai.test`, the other names
//! do not resolve), `network.dns` (the test zone's resolver) and the
//! volumes' host paths (test directories), plus the read-only npm cache
//! the agents are installed from.
//!
//! Test safety: no packet leaves this machine. The test API is a test host
//! namespace on 198.19.0.0/16 (`net::names::NameHost`) with TLS from a test
//! CA (the gate verifies it through the test-only
//! `LAZARET_TEST_UPSTREAM_CA`) and the DNS zone of the test names; the
//! Domains resolve through it only (`network.dns`), and every real name an
//! agent tries is not in `network.hosts`, so the gate refuses it (they are
//! listed in `lazaret net log`, printed by the test). The test asserts
//! that the test API's resolver was only asked test names.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::harness::*;
use crate::require_env;

/// The test API's server (see its header).
const API: &str = include_str!("../../fixtures/agents/test-api.py");

/// Where the npm caches are read in the guest.
const GUEST_CACHE: &str = "/opt/agent-cache";

/// One agent of docs/agents.md, as the test drives it.
struct Agent {
    /// Its profile in docs/agents.md (and its npm cache's name).
    profile: &'static str,
    /// The secret the profile binds.
    secret: &'static str,
    /// The test name of its API.
    api: &'static str,
}

const CLAUDE: Agent = Agent {
    profile: "claude",
    secret: "ANTHROPIC_API_KEY",
    api: "api.anthropic.test",
};

const CODEX: Agent = Agent {
    profile: "codex",
    secret: "OPENAI_API_KEY",
    api: "api.openai.test",
};

impl Agent {
    /// The agent's command line for one non-interactive turn whose prompt
    /// carries `tag` (the test API's model asks to run a command that
    /// writes `TAG.txt`, then answers `answer-TAG: …`).
    fn turn(&self, tag: &str) -> Vec<String> {
        let prompt = format!("Run the marker command for {tag}, then tell me what it printed.");
        let argv: Vec<&str> = match self.profile {
            // `-p`: one turn, non-interactive. `--allowedTools Bash` lets
            // the model's Bash call run without a permission prompt (there
            // is no one to answer it); nothing else is pre-approved.
            "claude" => vec!["timeout", "300", "claude", "-p", &prompt, "--allowedTools", "Bash"],
            // `exec`: one turn, non-interactive. Codex's own sandbox is off
            // (`--dangerously-bypass-approvals-and-sandbox`): inside
            // Lazaret's gVisor sandbox the agent is already confined (no
            // capabilities, the Domain's filesystem, egress by name), and
            // Codex's Linux sandbox (Landlock and seccomp, or bubblewrap's
            // user namespaces) is not there to be had under gVisor as an
            // unprivileged user: with it on, the shell command would fail,
            // not run. `--skip-git-repo-check`: the test project is not a
            // Git repository.
            _ => vec![
                "timeout",
                "300",
                "codex",
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                &prompt,
            ],
        };
        argv.into_iter().map(String::from).collect()
    }
}

/// A host name of the documented lists as a test name: its top-level
/// domain made `.test` (`api.anthropic.com` is `api.anthropic.test`, a
/// `:PORT` kept). Anything else (a path, an address, a word) unchanged.
fn test_name(s: &str) -> String {
    let (name, port) = match s.rsplit_once(':') {
        Some((n, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (n, Some(p)),
        _ => (s, None),
    };
    let hostlike = name.contains('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"*.-".contains(&b));
    match name.rsplit_once('.') {
        Some((rest, tld)) if hostlike && tld.bytes().all(|b| b.is_ascii_lowercase()) => {
            let mut out = format!("{rest}.test");
            if let Some(p) = port {
                out.push(':');
                out.push_str(p);
            }
            out
        }
        _ => s.to_string(),
    }
}

/// Every quoted string of `line` through [`test_name`].
pub(crate) fn test_names(line: &str) -> String {
    line.split('"')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { test_name(part) } else { part.to_string() })
        .collect::<Vec<_>>()
        .join("\"")
}

#[test]
fn documented_hosts_become_test_names() {
    assert_eq!(test_name("api.anthropic.com"), "api.anthropic.test");
    assert_eq!(test_name("*.githubusercontent.com"), "*.githubusercontent.test");
    assert_eq!(test_name("github.com:22"), "github.test:22");
    assert_eq!(test_name("127.0.0.1"), "127.0.0.1");
    assert_eq!(test_name("env:ANTHROPIC_API_KEY"), "env:ANTHROPIC_API_KEY");
    assert_eq!(
        test_name("/home/x/.claude:/home/dev/.claude"),
        "/home/x/.claude:/home/dev/.claude"
    );
    assert_eq!(
        test_names("hosts = [\"api.openai.com\", \"registry.npmjs.org\"]  # \"x\""),
        "hosts = [\"api.openai.test\", \"registry.npmjs.test\"]  # \"x\""
    );
}

/// The config file: the fixture's images and docs/agents.md's `claude` and
/// `codex` profiles (crate::limits::leftovers::documented_agent_config,
/// their credential volumes under `creds`), changed only as this module's
/// header says.
fn documented_config(env: &Env, creds: &Path, cache: &Path, resolver: &str) -> String {
    let text =
        crate::limits::leftovers::documented_agent_config(env, creds).replace("@CREDS@", &creds.display().to_string());
    // Only the documented profiles' part is renamed (the fixture before it
    // has URLs of its own, such as the Debian mirror the image was built
    // from).
    let at = text.find("[profiles.claude]").expect("[profiles.claude]");
    let mut out = text[..at].to_string();
    for line in text[at..].lines() {
        let t = line.trim_start();
        let mut line = if t.starts_with("volumes") {
            line.replacen("[\"", &format!("[\"{}:{GUEST_CACHE}:ro\", \"", cache.display()), 1)
        } else if t.starts_with('#') || t.starts_with('[') {
            line.to_string()
        } else {
            test_names(line)
        };
        if t.starts_with("env = { IS_SANDBOX = \"1\"") {
            // Claude Code's own variable for a gateway's base URL.
            line = line.replacen(
                "IS_SANDBOX = \"1\"",
                "IS_SANDBOX = \"1\", ANTHROPIC_BASE_URL = \"https://api.anthropic.test\"",
                1,
            );
        }
        out.push_str(&line);
        out.push('\n');
        if t.starts_with("[profiles.claude.network]") || t.starts_with("[profiles.codex.network]") {
            out.push_str(&format!("dns = [\"{resolver}\"]\n"));
        }
    }
    for want in [
        "ANTHROPIC_BASE_URL = \"https://api.anthropic.test\"",
        "\"api.anthropic.test\"",
        "\"api.openai.test\"",
        GUEST_CACHE,
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    assert!(!out[at..].contains(".com\"") && !out[at..].contains(".org\""), "{out}");
    out
}

/// Codex's config in its credential directory (the documented volume at
/// `~/.codex`): a model provider at the test API, its key from the
/// profile's secret, as a gateway is configured.
const CODEX_CONFIG: &str = r#"model_provider = "gateway"
model = "gpt-test"

[model_providers.gateway]
name = "Gateway"
base_url = "https://api.openai.test/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"#;

/// A random fake key in two halves (the second is what the guest greps
/// its files and environs for; the whole never goes to it): `PREFIX` and
/// 8 hex digits, then 16 hex digits.
fn fake_key(prefix: &str) -> (String, String) {
    let mut b = [0u8; 12];
    openssl::rand::rand_bytes(&mut b).unwrap();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    (format!("{prefix}{}", &hex[..8]), hex[8..].to_string())
}

/// Inside, as root: `files:` the files under the writable trees holding
/// `$1`, `environ:` how many process environments hold it.
const LEAK_CHECK: &str = r#"
echo "files: $(grep -rlsF -D skip -e "$1" /home /root /tmp /workspace /etc /var /run 2>/dev/null | head -5 | tr '\n' ' ')"
n=0
for f in /proc/[0-9]*/environ; do
  tr '\0' '\n' < "$f" 2>/dev/null | grep -qF -e "$1" && n=$((n+1))
done
echo "environ: $n"
"#;

/// The test API's records of requests to `host`.
fn requests<'a>(marked: &'a str, host: &str) -> Vec<&'a str> {
    let h = format!(" {host} ");
    marked
        .lines()
        .filter(|l| l.starts_with("REQ ") && l.contains(&h))
        .collect()
}

/// Runs everything for one agent; failures of the per-project checks
/// (which need per-project paths inside) are pushed to `later` rather
/// than failing at once, so the rest still runs.
fn documented_turns(
    env: &Env,
    agent: &Agent,
    api: &crate::net::names::NameHost,
    ca: &Path,
    (half_a, half_b): &(String, String),
    later: &mut Vec<String>,
) {
    let name = agent.profile;
    let (spec, specs) = crate::agents::real::pinned(name);
    let Some(cache) = crate::agents::real::agent_cache(name, &specs) else {
        return;
    };
    let t0 = Instant::now();
    let (ws, creds, cfg) = crate::agents::profiles::fixture(env, &format!("doc-{name}"));
    let ws2 = ws.parent().unwrap().join("ws2");
    std::fs::create_dir(&ws2).unwrap();
    env.chown(&ws2);
    let text = documented_config(env, &creds, &cache, &api.ip);
    env.write(&cfg.join("lazaret/config.toml"), &text);
    if name == "codex" {
        env.write(&creds.join(".codex/config.toml"), CODEX_CONFIG);
    }
    let real = format!("{half_a}{half_b}");
    let lz = |ws: &Path, args: &[&str]| {
        env.lz(ws, args)
            .config_home(&cfg)
            .env(agent.secret, &real)
            .env("LAZARET_TEST_UPSTREAM_CA", &ca.display().to_string())
    };
    // The Domain of `ws` stops with its last session: wait for it, so the
    // next run is a new generation (a restart).
    let stopped = |ws: &Path| {
        let id = env.domain_id(name, ws);
        assert!(
            eventually(Duration::from_secs(60), || processes_mentioning(&id).is_empty()),
            "{name}: the Domain of {} did not stop",
            ws.display()
        );
    };
    let install = |ws: &Path| {
        let mut script = format!(
            "cp -R {GUEST_CACHE} /tmp/npm-cache && \
             npm install -g --offline --no-audit --no-fund --cache /tmp/npm-cache {spec} && \
             rm -rf /tmp/npm-cache"
        );
        if name == "claude" {
            // Claude Code's first interactive start (its onboarding) asks
            // api.anthropic.com itself whatever ANTHROPIC_BASE_URL says, and
            // stops at "Unable to connect to Anthropic services" when it
            // cannot: a real name, which the test refuses. Onboarding is
            // marked done, as after a user's first start; the trust and
            // key prompts that follow it are the agent's own.
            script.push_str(
                " && printf '{\"hasCompletedOnboarding\": true}\\n' > /home/dev/.claude.json \
                 && chown dev:dev /home/dev/.claude.json",
            );
        }
        script.push_str(" && echo installed");
        let t = Instant::now();
        let r = lz(ws, &["run", "--root", "--profile", name, "--", "sh", "-c", &script]).run();
        assert_eq!(r.code, 0, "{name}: npm install -g {spec}: {r:?}");
        eprintln!("{name}: installed in {:?}", t.elapsed());
        stopped(ws);
    };
    // One turn in `ws`: the command ran inside (its file is in the
    // project, written by `dev`) and the answer quoting its output came
    // back. Returns the directory the command ran in, inside.
    let turn = |ws: &Path, tag: &str| -> String {
        let mut args = vec!["run".to_string(), "--profile".into(), name.into(), "--".into()];
        args.extend(agent.turn(tag));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t = Instant::now();
        let r = lz(ws, &args).run();
        eprintln!("{name} {tag}: {:?}: {r:?}", t.elapsed());
        assert_eq!(r.code, 0, "{name} {tag}: {r:?}");
        let made = std::fs::read_to_string(ws.join(format!("{tag}.txt"))).unwrap_or_default();
        assert_eq!(
            made,
            format!("made-{tag}\n"),
            "{name} {tag}: the command did not run: {r:?}"
        );
        assert_eq!(owner(&ws.join(format!("{tag}.txt"))), env.uid, "{name} {tag}");
        let answer = format!("answer-{tag}: dev ");
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&answer))
            .unwrap_or_else(|| panic!("{name} {tag}: no answer {answer:?}: {r:?}"));
        assert!(
            !r.stdout.contains(&real) && !r.stderr.contains(&real),
            "{name} {tag}: {r:?}"
        );
        stopped(ws);
        line[answer.len()..].trim().to_string()
    };

    install(&ws);
    let tag = |n: u32| format!("lzr-turn-{name}-{n}");
    let inside1 = turn(&ws, &tag(1));
    // Stopped (above); started again: a second turn.
    let inside2 = turn(&ws, &tag(2));
    assert_eq!(
        inside1, inside2,
        "{name}: the project's path inside changed across a restart"
    );
    // Claude Code started as users start it (`lazaret run --profile
    // claude`, its full-screen UI): the first start asks whether to trust
    // the project and whether to use the key; a restart asks neither.
    let interactive = |ws: &Path, n: u32| -> (bool, bool) {
        let prompts = claude_interactive(env, ws, &cfg, agent.secret, &real, ca, &format!("{name}-{n}"));
        stopped(ws);
        prompts
    };
    if name == "claude" {
        let (trust, key) = interactive(&ws, 1);
        eprintln!("claude: first interactive start: trust prompt {trust}, key prompt {key}");
        let (trust, key) = interactive(&ws, 2);
        if trust || key {
            later.push(format!(
                "claude: after a restart, the interactive start asked again (trust prompt {trust}, \
                 key prompt {key}: the key inside, a sentinel, changed)"
            ));
        }
    }

    // The real value arrived on every request to the API, under its own
    // header (Claude Code: x-api-key; Codex: Authorization: Bearer), never
    // a sentinel, and nothing was refused as a bad key.
    let marked = api.marked();
    let reqs = requests(&marked, agent.api);
    let keyed: Vec<_> = reqs.iter().filter(|l| l.contains(" /v1/")).collect();
    assert!(keyed.len() >= 4, "{name}: two requests a turn: {marked}");
    let want = if name == "claude" {
        format!("key={real} ")
    } else {
        format!("key=Bearer {real} ")
    };
    for l in &keyed {
        assert!(l.contains(&want), "{name}: not the real value: {l}");
        assert!(!l.contains("status=401"), "{name}: a 401: {l}");
    }
    assert!(
        !marked.contains("lzr-sk-"),
        "{name}: a sentinel reached the API: {marked}"
    );
    let bodies = std::fs::read_to_string(api.marker.with_extension("bodies")).unwrap_or_default();
    if bodies.contains("lzr-sk-") {
        eprintln!("{name}: note: a request body holds a sentinel (the gate swaps headers only)");
    }
    // Inside, no file of the writable trees (the workspace, the volumes,
    // home, /tmp, /etc, /var) and no process environment holds the value.
    let r = lz(
        &ws,
        &[
            "run",
            "--root",
            "--profile",
            name,
            "--",
            "sh",
            "-c",
            LEAK_CHECK,
            "leak",
            half_b,
        ],
    )
    .run();
    assert_eq!(r.code, 0, "{name}: {r:?}");
    let files = r.stdout.lines().find_map(|l| l.strip_prefix("files: ")).unwrap_or("?");
    assert_eq!(files.trim(), "", "{name}: files inside hold the real value: {r:?}");
    assert!(
        r.stdout.contains("environ: 0\n"),
        "{name}: an environ holds the real value: {r:?}"
    );
    stopped(&ws);
    // Nor does anything the agent wrote to its credential volume.
    for f in files_under(&creds) {
        let b = std::fs::read(&f).unwrap_or_default();
        assert!(
            !b.windows(half_b.len()).any(|w| w == half_b.as_bytes()),
            "{name}: {} holds the real value",
            f.display()
        );
        if b.windows(7).any(|w| w == b"lzr-sk-") {
            eprintln!("{name}: note: {} holds a sentinel", f.display());
        }
    }
    // The names the agent contacted that the gate refused (not in
    // network.hosts): printed for docs/agents.md's lists; none is a test
    // name the profile allows, and no sentinel or value is in the log.
    // (The Domain's own start-up checks, refused ports 9 of addresses,
    // are left out of what is printed.)
    let log = lz(&ws, &["net", "log", "--profile", name]).run();
    let shown: Vec<&str> = log
        .stdout
        .lines()
        .filter(|l| !l.contains("(port not served by the gate)"))
        .collect();
    eprintln!("{name}: net log:\n{}", shown.join("\n"));
    assert!(
        !log.stdout.contains(&real) && !log.stdout.contains("lzr-sk-"),
        "{log:?}"
    );
    let refused = format!(" {}:", agent.api);
    assert!(
        !shown
            .iter()
            .any(|l| l.trim_start().starts_with("refused") && l.contains(&refused)),
        "{name}: something to the API was refused: {log:?}"
    );

    // A second project: its own Domain, the same credential volume.
    install(&ws2);
    let inside3 = turn(&ws2, &tag(3));
    if name == "claude" {
        let (trust, _) = interactive(&ws2, 3);
        if !trust {
            later.push(
                "claude: the second project's first start did not ask for trust (the first project's trust applied)"
                    .into(),
            );
        }
    }
    let marked = api.marked();
    for l in requests(&marked, agent.api).iter().filter(|l| l.contains(" /v1/")) {
        assert!(l.contains(&want) && !l.contains("status=401"), "{name}: {l}");
    }
    // Per project, inside: its own path, so the agent's per-project state
    // (Claude Code's ~/.claude/projects/PATH, Codex's sessions by cwd)
    // does not list the first project's history in the second.
    if inside3 == inside1 {
        later.push(format!(
            "{name}: both projects are {inside1:?} inside (the agent keys its history by that path)"
        ));
    }
    match name {
        "claude" => {
            let dirs: Vec<String> = std::fs::read_dir(creds.join(".claude/projects"))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            if dirs.len() != 2 {
                later.push(format!(
                    "claude: ~/.claude/projects holds {dirs:?}, not one directory per project"
                ));
            }
        }
        _ => {
            let mut cwds: Vec<String> = files_under(&creds.join(".codex/sessions"))
                .iter()
                .filter_map(|f| std::fs::read_to_string(f).ok())
                .filter_map(|t| {
                    let v = t.lines().next()?.split("\"cwd\":\"").nth(1)?;
                    Some(v[..v.find('"')?].to_string())
                })
                .collect();
            cwds.sort();
            cwds.dedup();
            if cwds.len() != 2 {
                later.push(format!(
                    "codex: its sessions record the working directories {cwds:?}, not one per project"
                ));
            }
        }
    }
    for w in [&ws, &ws2] {
        let r = lz(w, &["rm", "--yes", "--profile", name]).run();
        assert_eq!(r.code, 0, "{name}: {r:?}");
    }
    eprintln!("{name}: documented path in {:?}", t0.elapsed());
}

/// `lazaret run --profile claude` in `ws` in a terminal (tmux): answers
/// the trust prompt (yes) and the key prompt (use it) when they come,
/// waits for the input prompt, then `/exit`. Returns whether each prompt
/// came.
fn claude_interactive(
    env: &Env,
    ws: &Path,
    cfg: &Path,
    secret: &str,
    real: &str,
    ca: &Path,
    name: &str,
) -> (bool, bool) {
    let mut cmd = env.as_user().iter().map(|s| sh_quote(s)).collect::<Vec<_>>().join(" ");
    cmd.push_str(" env");
    let vars = [
        ("XDG_CONFIG_HOME".to_string(), cfg.display().to_string()),
        (secret.to_string(), real.to_string()),
        ("LAZARET_TEST_UPSTREAM_CA".to_string(), ca.display().to_string()),
    ];
    for (k, v) in env.base_env().into_iter().chain(vars) {
        cmd.push_str(&format!(" {k}={}", sh_quote(&v)));
    }
    let inner = format!(
        "cd {}; {} run --profile claude; echo exit=$?; sleep 120",
        sh_quote(&ws.display().to_string()),
        sh_quote(&env.bin.join("lazaret").display().to_string())
    );
    cmd.push_str(&format!(" TERM=xterm-256color sh -c {}", sh_quote(&inner)));
    let t = Tmux::new(&format!("doc-{name}"), 120, 40, &cmd);
    let (mut trust, mut key) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let screen = t.capture();
        // A choice is made by moving to it until the screen shows it
        // selected (keys sent while the dialog is still drawing are lost),
        // then Enter.
        let selected = |choice: &str| screen.lines().any(|l| l.trim() == format!("\u{276f} {choice}"));
        if screen.contains("Quick safety check") {
            trust = true;
            if selected("Yes, I trust this folder") {
                t.enter();
                std::thread::sleep(Duration::from_millis(700));
            } else {
                t.cmd(&["send-keys", "-t", "t", "Down"]);
            }
        } else if screen.contains("Detected a custom API key") {
            key = true;
            if selected("Yes") {
                t.enter();
                std::thread::sleep(Duration::from_millis(700));
            } else {
                t.cmd(&["send-keys", "-t", "t", "Up"]);
            }
        } else if screen.contains("Claude Code v")
            && (screen.contains("shift+tab") || screen.contains("for shortcuts"))
            && !screen.contains("Quick safety check")
            && !screen.contains("Detected a custom API key")
        {
            break;
        } else if screen.contains("exit=") || Instant::now() > deadline {
            panic!("{name}: Claude Code did not come up:\n{screen}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // Let the UI settle, then leave.
    std::thread::sleep(Duration::from_secs(1));
    t.send("/exit");
    std::thread::sleep(Duration::from_millis(500));
    t.enter();
    t.expect_saying("exit=0", Duration::from_secs(60), &format!("{name}: /exit"));
    (trust, key)
}

/// Regular files under `dir`, not following links.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => out.push(e.path()),
                _ => {}
            }
        }
    }
    out
}

/// Issue 48, acceptance 1 (one-turn, restart and second-project parts):
/// see the module's header.
#[test]
fn documented_claude_and_codex_complete_turns_restart_and_work_in_a_second_project() {
    use lazaret::trust::TrustAnchor;
    let (env, _g) = require_env!(shared);
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let t0 = Instant::now();
    let base = env.dir("doc-api");
    let pki = base.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let ca = TrustAnchor::new("lazaret-test-ca", 1, "it").unwrap();
    for n in [CLAUDE.api, CODEX.api] {
        let c = ca.issue_tls_server(n, 2).unwrap();
        env.write(
            &pki.join(format!("{n}.pem")),
            &String::from_utf8(c.cert.to_pem().unwrap()).unwrap(),
        );
        env.write(
            &pki.join(format!("{n}.key")),
            &String::from_utf8(c.key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
        );
    }
    let ca_file = pki.join("ca.pem");
    env.write(&ca_file, &String::from_utf8(ca.ca_cert_pem().unwrap()).unwrap());
    let mut api = crate::net::names::NameHost::new((std::process::id() * 4 + 40) % 16000);
    let zone = format!("{}={ip},{}={ip}", CLAUDE.api, CODEX.api, ip = api.ip);
    let p = |n: &str| pki.join(n).display().to_string();
    let certs = format!(
        "{a}={},{o}={}",
        p(CLAUDE.api),
        p(CODEX.api),
        a = CLAUDE.api,
        o = CODEX.api
    );
    // The agents' fake real values: the API takes these and no other.
    let keys = [fake_key("sk-ant-it-"), fake_key("sk-it-")];
    let accepted = keys
        .iter()
        .map(|(a, b)| format!("{a}{b}"))
        .collect::<Vec<_>>()
        .join(",");
    let args = [api.ip.clone(), p("api-log"), zone, certs, accepted];
    api.serve_with(API, pki.join("api-log"), &args);
    let mut later = Vec::new();
    for (agent, key) in [&CLAUDE, &CODEX].into_iter().zip(&keys) {
        documented_turns(env, agent, &api, &ca_file, key, &mut later);
    }
    // Only test names were ever looked up upstream: the gate asked the
    // test zone for the names in network.hosts and nothing else.
    let marked = api.marked();
    for l in marked.lines().filter(|l| l.starts_with("DNS ")) {
        assert!(l.split(' ').nth(1).is_some_and(|n| n.ends_with(".test")), "{l}");
    }
    eprintln!("documented path: both agents in {:?}", t0.elapsed());
    assert!(
        later.is_empty(),
        "restarts and projects are not yet told apart (stable sentinels, per-project paths inside):\n{}",
        later.join("\n")
    );
}
