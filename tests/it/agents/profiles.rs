//! Agent-ready, part two: the profile `user` (an unprivileged guest user
//! that owns the workspace it edits and keeps its home), and the stand-in
//! agent profile of docs/agents.md end to end on the `dev` image, with its
//! key by name, its user and its credential directory as a volume.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::harness::*;
use crate::require_env;

/// The committed fixture: the `dev` recipe and the stand-in profile
/// (scripts/test.sh builds this recipe before the tests start).
pub fn fixture_text() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents/lazaret/config.toml");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A workspace, a credential directory and a config home holding the
/// fixture (its `@CREDS@` replaced).
pub fn fixture(env: &Env, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let base = env.dir(name);
    let (ws, creds, cfg) = (base.join("ws"), base.join("creds"), base.join("cfg"));
    for d in [&ws, &creds] {
        std::fs::create_dir(d).unwrap();
        env.chown(d);
    }
    let text = fixture_text().replace("@CREDS@", &creds.display().to_string());
    env.write(&cfg.join("lazaret/config.toml"), &text);
    (ws, creds, cfg)
}

/// Whether the `dev` image is built for the test user (scripts/test.sh
/// builds it); prints `skipping` or, with LAZARET_MUST_WORK=1, fails.
pub fn dev_image_built(env: &Env) -> bool {
    if env.home.join(".local/share/lazaret/images/dev/index.json").exists() {
        return true;
    }
    if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
        panic!(
            "the dev image is not built for {} and LAZARET_MUST_WORK=1 (scripts/test.sh builds it)",
            env.user
        );
    }
    eprintln!(
        "skipping: the dev image is not built for {} (scripts/test.sh builds it)",
        env.user
    );
    false
}

/// `lazaret run --profile u ARGS` in `ws` with the config home `cfg`.
fn run_profile_u(env: &Env, ws: &Path, cfg: &Path, args: &[&str]) -> Run {
    let mut a = vec!["run", "--profile", "u"];
    a.extend_from_slice(args);
    env.lz(ws, &a).config_home(cfg).run()
}

/// docs/agents.md documents exactly the recipe the tests build (its whole
/// `[images.dev]` table: packages and `run` steps), and that recipe is the
/// built-in one (config's unit test `the_builtin_dev_recipe_is_the_fixture`).
#[test]
fn the_dev_recipe_the_tests_build_is_the_documented_one() {
    let fx = fixture_text();
    let start = fx.find("[images.dev]\n").expect("the fixture's [images.dev]");
    let table = &fx[start..start + fx[start..].find("\n\n").expect("a blank line ends [images.dev]")];
    assert!(table.contains("packages = ") && table.contains("run = ["), "{table}");
    let docs = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md")).unwrap();
    assert!(docs.contains(table), "docs/agents.md lacks the tested recipe:\n{table}");
    for l in ["user = \"dev\"", "env = { IS_SANDBOX = \"1\" }"] {
        assert!(fx.contains(l) && docs.contains(l), "{l}");
    }
}

/// With `user = "dev"`, `id -u` is 1000 inside (no
/// capability, no new privileges), files the session writes to /workspace
/// are the host user's, host files stay editable, the home survives a
/// restart, and `--root` (run and exec) is root.
#[test]
fn a_profile_user_owns_its_workspace_and_keeps_its_home() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("user");
    let (ws, cfg) = (base.join("ws"), base.join("cfg"));
    std::fs::create_dir(&ws).unwrap();
    env.chown(&ws);
    env.write(&cfg.join("lazaret/config.toml"), "[profiles.u]\nuser = \"dev\"\n");
    env.write(&ws.join("host-file.txt"), "from the host\n");
    let id = env.domain_id("u", &ws);
    let run = |args: &[&str]| run_profile_u(env, &ws, &cfg, args);
    let r = run(&[
        "--",
        "sh",
        "-c",
        "id -u; id -un; echo home=$HOME; grep CapEff /proc/self/status; \
         echo by-user > /workspace/by-user.txt && mkdir /workspace/dir && echo x > /workspace/dir/f && \
         echo appended >> /workspace/host-file.txt && echo kept > $HOME/keep && echo wrote; \
         echo evil >> /etc/passwd 2>/dev/null && echo PASSWD-WRITTEN; \
         touch /root/x 2>/dev/null && echo ROOT-WRITTEN; true",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut lines = r.stdout.lines();
    assert_eq!(lines.next(), Some("1000"), "{r:?}");
    assert_eq!(lines.next(), Some("dev"), "{r:?}");
    assert!(r.stdout.contains("home=/home/dev\n"), "{r:?}");
    assert!(r.stdout.contains("CapEff:\t0000000000000000"), "no capability: {r:?}");
    assert!(r.stdout.contains("wrote\n"), "{r:?}");
    assert!(!r.stdout.contains("-WRITTEN"), "the user is not root: {r:?}");
    for f in ["by-user.txt", "dir", "dir/f", "host-file.txt"] {
        assert_eq!(owner(&ws.join(f)), env.uid, "{f} is the host user's");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("host-file.txt")).unwrap(),
        "from the host\nappended\n"
    );

    // Root stays available without sudo: `--root`. Its chown to the user,
    // or to any other id, leaves the host file the developer's.
    let r = run(&[
        "--root",
        "--",
        "sh",
        "-c",
        "id -u; echo home=$HOME; chown 1000:1000 /workspace/by-user.txt && echo chowned; \
         chown 4242 /workspace/by-user.txt 2>/dev/null; true",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("0\nhome=/root\nchowned\n"), "{r:?}");
    assert_eq!(owner(&ws.join("by-user.txt")), env.uid);

    // The home survives a restart (a new generation).
    let r = env.lz(&ws, &["stop", "--profile", "u"]).config_home(&cfg).run();
    assert!(r.code == 0 || r.code == 2, "{r:?}");
    assert!(eventually(Duration::from_secs(20), || !env.ps_json(&ws).contains(&id)));
    let _bg = env.lz_in(&ws, "u", &["sleep", "60"]).config_home(&cfg).spawn_bg();
    assert!(eventually(Duration::from_secs(60), || env.ps_json(&ws).contains(&id)));
    let r = env
        .lz(
            &env.home,
            &[
                "exec",
                &id[..12],
                "--",
                "sh",
                "-c",
                "id -u; cat $HOME/keep; ls -ld $HOME",
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("1000\nkept\n"), "the home survived: {r:?}");
    assert!(r.stdout.contains(" dev dev "), "{r:?}");
    let r = env
        .lz(&env.home, &["exec", "--root", &id[..12], "--", "id", "-u"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "0\n", "{r:?}");
    let r = env.lz(&ws, &["stop", &id[..12]]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");

    // Bad input names the key.
    env.write(&cfg.join("lazaret/config.toml"), "[profiles.u]\nuser = \"root\"\n");
    let r = run(&["--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("profiles.u.user"), "{r:?}");
    env.write(
        &cfg.join("lazaret/config.toml"),
        "[profiles.u]\nuser = \"dev\"\npersist = [\"/usr\"]\n",
    );
    let r = run(&["--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("persist"), "{r:?}");
}

/// The user is made by the sandbox's init at boot. When it cannot be (the
/// sandbox, as root, turned the persisted home into a file), the start
/// fails with one sentence naming the profile, the user and why,
/// and nothing is published; the Domain can still be removed.
// Covers DX-2.
#[test]
fn a_user_setup_that_fails_at_boot_fails_the_start_with_its_reason() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("userfail");
    let (ws, cfg) = (base.join("ws"), base.join("cfg"));
    std::fs::create_dir(&ws).unwrap();
    env.chown(&ws);
    env.write(&cfg.join("lazaret/config.toml"), "[profiles.u]\nuser = \"dev\"\n");
    let id = env.domain_id("u", &ws);
    let r = run_profile_u(env, &ws, &cfg, &["--", "id", "-un"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "dev\n"), "{r:?}");
    let r = run_profile_u(
        env,
        &ws,
        &cfg,
        &[
            "--root",
            "--",
            "sh",
            "-c",
            "rm -rf /home/dev && printf 'x\\033[2J' > /home/dev",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(eventually(Duration::from_secs(20), || !env.ps_json(&ws).contains(&id)));
    let r = run_profile_u(env, &ws, &cfg, &["--", "id", "-un"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("profile u user dev: user dev: /home/dev exists and is not a directory"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("dev"), "no command ran: {r:?}");
    assert!(!env.runtime_root().join(&id).join("hc.sock").exists());
    let r = env.lz(&ws, &["rm", "--yes", "--profile", "u"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
}

/// The stand-in agent profile of docs/agents.md (fixture) on
/// the `dev` image: its command starts with no CMD as user `dev` (uid
/// 1000), gets its key by name and `IS_SANDBOX`, reads what the host put in
/// its credential directory (a volume) and writes a token there that
/// survives a restart and is the host user's file.
// Covers DX-1.
#[test]
fn the_stand_in_agent_profile_runs_end_to_end() {
    let (env, _g) = require_env!(shared);
    if !dev_image_built(env) {
        return;
    }
    let (ws, creds, cfg) = fixture(env, "standin");
    env.write(&creds.join("settings.json"), "{\"from\": \"host\"}\n");
    env.write(
        &ws.join("agent.sh"),
        r#"set -e
test "$STANDIN_API_KEY" = "sk-standin-123" || { echo "bad key: '$STANDIN_API_KEY'"; exit 3; }
test "$IS_SANDBOX" = 1 || { echo "IS_SANDBOX unset"; exit 4; }
test "$(id -u)" = 1000 && test "$(id -un)" = dev || { echo "not the dev user: $(id)"; exit 5; }
test "$HOME" = /home/dev || { echo "HOME=$HOME"; exit 6; }
grep -q '"host"' "$HOME/.standin/settings.json" || { echo "no host settings"; exit 7; }
node -e 'process.exit(0)' && python3 -c 'import json' && curl --version > /dev/null
if [ -f "$HOME/.standin/token" ]; then echo "login kept: $(cat "$HOME/.standin/token")"
else echo token-1 > "$HOME/.standin/token" && echo "logged in"; fi
echo "edited by the agent" > /workspace/agent-was-here
echo "standin ok"
"#,
    );
    let run = || {
        env.lz(&ws, &["run", "--profile", "standin"])
            .config_home(&cfg)
            .env("STANDIN_API_KEY", "sk-standin-123")
            .run()
    };
    let r = run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("logged in") && r.stdout.contains("standin ok"),
        "{r:?}"
    );
    assert_eq!(
        owner(&ws.join("agent-was-here")),
        env.uid,
        "workspace files are the user's"
    );
    assert_eq!(owner(&creds.join("token")), env.uid, "the token is the user's file");
    assert_eq!(std::fs::read_to_string(creds.join("token")).unwrap(), "token-1\n");
    // A restart (the Domain stopped when the agent exited): the login stays.
    let r = run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("login kept: token-1"), "{r:?}");
    // Without the key in the environment the agent sees none.
    let r = env.lz(&ws, &["run", "--profile", "standin"]).config_home(&cfg).run();
    assert_eq!(r.code, 3, "{r:?}");
}

/// A file volume of a profile with `user` (a credential file such as an
/// agent's `~/.claude.json`, mode 0600 on the host) is the user's inside:
/// uid 1000 reads and edits it, the edit is the host user's file, and
/// nothing in the file's host directory besides it can be reached (the
/// sandbox is given the one file, not a view of its directory).
#[test]
fn a_profile_users_file_volume_is_its_own_and_alone() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("filevol");
    let (ws, creds, cfg) = (base.join("ws"), base.join("creds"), base.join("cfg"));
    for d in [&ws, &creds] {
        std::fs::create_dir(d).unwrap();
        env.chown(d);
    }
    let token = creds.join("token.json");
    env.write(&token, "host-token\n");
    env.write(&creds.join("sibling"), "SIBLING-CONTENT\n");
    use std::os::unix::fs::PermissionsExt;
    for f in [&token, &creds.join("sibling")] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    env.write(
        &cfg.join("lazaret/config.toml"),
        &format!(
            "[profiles.u]\nuser = \"dev\"\nvolumes = [\"{}:/home/dev/.token.json\"]\n",
            token.display()
        ),
    );
    let run = |args: &[&str]| run_profile_u(env, &ws, &cfg, args);
    let r = run(&[
        "--",
        "sh",
        "-c",
        "f=/home/dev/.token.json; stat -c 'owner=%u mode=%a' $f; cat $f; \
         echo agent >> $f && echo appended; \
         cat $f/../sibling 2>/dev/null; ls -a /home/dev; \
         grep -rs SIBLING /home/dev /proc/self/mountinfo; true",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("owner=1000 mode=600\n"),
        "the file is the user's: {r:?}"
    );
    assert!(r.stdout.contains("host-token\n"), "{r:?}");
    assert!(r.stdout.contains("appended\n"), "{r:?}");
    assert!(!r.stdout.contains("SIBLING-CONTENT"), "a sibling was reachable: {r:?}");
    assert!(!r.stdout.contains("sibling"), "a sibling was listed: {r:?}");
    assert_eq!(std::fs::read_to_string(&token).unwrap(), "host-token\nagent\n");
    assert_eq!(owner(&token), env.uid, "the edited file stays the host user's");
    let mode = std::fs::metadata(&token).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the host file's mode is kept");

    // Root (`--root`) renaming or replacing the file through the mount, or
    // creating next to it, reaches nothing on the host.
    let r = run(&[
        "--root",
        "--",
        "sh",
        "-c",
        "f=/home/dev/.token.json; mv $f /home/dev/moved 2>/dev/null && echo MOVED; \
         ln -sf /etc/passwd $f 2>/dev/null && echo LINKED; \
         ln $f /home/dev/hardlink 2>/dev/null && echo HARDLINKED; \
         mkdir $f/x 2>/dev/null && echo MKDIR; touch $f/../created 2>/dev/null; \
         chmod 6777 $f; true",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        // "LINKED" also catches "HARDLINKED".
        !r.stdout.contains("MOVED") && !r.stdout.contains("LINKED") && !r.stdout.contains("MKDIR"),
        "{r:?}"
    );
    let mut names: Vec<String> = std::fs::read_dir(&creds)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["sibling", "token.json"],
        "nothing was created or moved on the host"
    );
    assert_eq!(std::fs::read_to_string(&token).unwrap(), "host-token\nagent\n");
    // The chmod reached the host file through the view: no setuid, setgid
    // or world-write bit with it.
    let mode = std::fs::metadata(&token).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode & 0o6002, 0, "mode {mode:o} on the host file");
}
