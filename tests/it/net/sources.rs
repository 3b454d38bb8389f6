//! `cmd:` and `file:` secret sources the sandbox cannot steer
//! (docs/network.md "Secrets", `config::secret_sources`).
//!
//! Each attack plants code where the sandbox can write, then starts
//! `lazaret run` for a profile whose secret source would, before the fix,
//! have loaded that code on the host as the user. The planted code creates
//! a marker file outside the workspace (a place the sandbox cannot reach):
//! its absence after the run is the proof. Each attack first checks that
//! its plant is live — the same command, run the old way (in the workspace,
//! with the planted environment), does create the marker — so a test can
//! only pass because Lazaret ran the source differently.
//!
//! How files are planted: the headline attack (`python3 -m keyring`) is
//! planted by the sandbox itself (`lazaret run -- sh -c` writing into
//! /workspace), end to end as the issue reported it. The others write the
//! plant straight into the host workspace as the test user: the view
//! writes the same bytes with the same owner to the same host directory,
//! and each sandbox start costs seconds the assertions do not need.
//!
//! No packet leaves this machine: the profiles list `api.test` only as a
//! name, and nothing inside connects anywhere.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{processes_mentioning, Env, Run};
use crate::require_env;

/// The profile `name` with one secret `API_KEY` from `from`.
fn profile(name: &str, from: &str) -> String {
    format!(
        "[profiles.{name}.network]\nhosts = [\"api.test\"]\n\
         [profiles.{name}.secrets.API_KEY]\nfrom = \"{from}\"\nhosts = [\"api.test\"]\n"
    )
}

/// Python that creates `marker` and prints a value.
fn py_plant(marker: &Path) -> String {
    format!(
        "import pathlib\npathlib.Path({:?}).write_text('ran')\nprint('sk-it-planted-value-1')\n",
        marker.display().to_string()
    )
}

/// An executable shell script that creates `marker` and prints a value.
fn sh_plant(env: &Env, p: &Path, marker: &Path) {
    env.write(
        p,
        &format!(
            "#!/bin/sh\necho ran > '{}'\necho sk-it-planted-value-1\n",
            marker.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs `argv` as the test user in `cwd` with the CLI's base environment
/// and `extra`: what a `cmd:` source did before (the plant's liveness
/// check).
fn as_user_in(env: &Env, cwd: &Path, extra: &[(&str, &str)], argv: &[&str]) -> std::process::Output {
    let pre = env.as_user();
    let mut c = Command::new(&pre[0]);
    c.args(&pre[1..])
        .args(argv)
        .env_clear()
        .envs(env.base_env())
        .current_dir(cwd);
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The plant is live: the old way of running the source creates `marker`
/// (which is then removed for the real test).
fn assert_live(env: &Env, cwd: &Path, extra: &[(&str, &str)], argv: &[&str], marker: &Path) {
    let o = as_user_in(env, cwd, extra, argv);
    assert!(marker.exists(), "the plant is not live: {argv:?}: {o:?}");
    std::fs::remove_file(marker).unwrap();
}

/// Nothing of the Domain of `profile` and `ws` is running.
fn assert_nothing_started(env: &Env, profile: &str, ws: &Path) {
    let id = env.domain_id(profile, ws);
    assert!(!env.runtime_root().join(&id).join("hc.sock").exists(), "{profile}");
    assert!(processes_mentioning(&id).is_empty(), "{profile}");
}

/// A refused start: exit 2, one line naming the secret (`want`), nothing
/// started.
fn assert_refused(env: &Env, r: &Run, profile: &str, ws: &Path, want: &[&str]) {
    assert_eq!(r.code, 2, "{profile}: {r:?}");
    for w in want {
        assert!(r.stderr.contains(w), "{profile}: expected {w:?}: {r:?}");
    }
    assert_eq!(r.stderr.trim_end().lines().count(), 1, "{profile}: {r:?}");
    assert!(!r.stderr.contains("sk-it-planted-value-1"), "{profile}: {r:?}");
    assert_nothing_started(env, profile, ws);
}

/// The attack: the sandbox plants `keyring/__main__.py` in
/// /workspace; the next `lazaret run` with `cmd:python3 -m keyring get`
/// must not run it (python's `-m` looks in the working directory first,
/// which is now the home directory).
#[test]
fn sources_a_python_module_planted_by_the_sandbox_does_not_run_on_the_host() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-keyring");
    let marker = base.join("marker-keyring");
    // Planted from inside, by the sandbox, with the default profile.
    let plant = env
        .lz(
            &ws,
            &[
                "run",
                "--quiet",
                "--",
                "sh",
                "-c",
                "mkdir -p /workspace/keyring && printf '%s' \"$1\" > /workspace/keyring/__main__.py",
                "sh",
                &py_plant(&marker),
            ],
        )
        .run();
    assert_eq!(plant.code, 0, "{plant:?}");
    assert!(ws.join("keyring/__main__.py").is_file(), "{plant:?}");
    assert!(!marker.exists());
    let argv = ["python3", "-m", "keyring", "get", "svc", "user"];
    assert_live(env, &ws, &[], &argv, &marker);

    let cfg = env.write_config(&base, &profile("kr", "cmd:python3 -m keyring get svc user"));
    let r = env.lz(&ws, &["run", "-p", "kr", "--", "true"]).config_home(&cfg).run();
    assert!(!marker.exists(), "the planted module ran on the host: {r:?}");
    // No keyring module outside the workspace: the source fails, the start
    // is refused.
    assert_refused(
        env,
        &r,
        "kr",
        &ws,
        &["secret API_KEY", "cmd:python3 -m keyring get svc user"],
    );
}

/// `cmd:./tool` names a file of the directory it runs from: refused as a
/// config error before anything runs.
#[test]
fn sources_a_relative_program_is_a_config_error() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-rel");
    let marker = base.join("marker-rel");
    sh_plant(env, &ws.join("tool"), &marker);
    assert_live(env, &ws, &[], &["./tool"], &marker);
    let cfg = env.write_config(&base, &profile("rel", "cmd:./tool"));
    let r = env.lz(&ws, &["run", "-p", "rel", "--", "true"]).config_home(&cfg).run();
    assert!(!marker.exists(), "./tool ran on the host: {r:?}");
    let file = cfg.join("lazaret/config.toml").display().to_string();
    assert_refused(
        env,
        &r,
        "rel",
        &ws,
        &[&format!("{file}:4: profiles.rel.secrets.API_KEY.from"), "absolute path"],
    );
}

/// `PATH` entries in the workspace — absolute, relative and empty (the
/// working directory) — each holding a fake `echo`: the real `echo` runs
/// and the start succeeds.
#[test]
fn sources_path_entries_in_the_workspace_are_skipped() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-path");
    let marker = base.join("marker-path");
    for p in ["bin/echo", "rel/echo", "echo"] {
        sh_plant(env, &ws.join(p), &marker);
    }
    // The plants are live: `env echo` (a PATH search, as `Command` did)
    // finds each of them first.
    for first in ["", "rel", &format!("{}/bin", ws.display())] {
        let p = format!("{first}:/usr/bin:/bin");
        assert_live(env, &ws, &[("PATH", &p)], &["/usr/bin/env", "echo"], &marker);
    }
    let path = format!(":rel:{}/bin:/usr/local/bin:/usr/bin:/bin", ws.display());
    let cfg = env.write_config(&base, &profile("path", "cmd:echo sk-it-real-echo-value"));
    let r = env
        .lz(&ws, &["run", "-p", "path", "--", "true"])
        .config_home(&cfg)
        .env("PATH", &path)
        .run();
    assert!(!marker.exists(), "a workspace echo ran on the host: {r:?}");
    assert_eq!(r.code, 0, "the real echo gave the value: {r:?}");
}

/// `PYTHONPATH` into the workspace in the CLI's environment (a `.envrc`
/// the sandbox wrote could set it): python's `sitecustomize` there is not
/// loaded, and the start succeeds.
#[test]
fn sources_pythonpath_into_the_workspace_is_not_passed() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-pythonpath");
    let marker = base.join("marker-pythonpath");
    env.write(&ws.join("pp/sitecustomize.py"), &py_plant(&marker));
    let pp = ws.join("pp").display().to_string();
    assert_live(env, &base, &[("PYTHONPATH", &pp)], &["python3", "-c", "pass"], &marker);
    let cfg = env.write_config(&base, &profile("pp", "cmd:python3 -c print('sk-it-real-python-value')"));
    let r = env
        .lz(&ws, &["run", "-p", "pp", "--", "true"])
        .config_home(&cfg)
        .env("PYTHONPATH", &pp)
        .run();
    assert!(!marker.exists(), "the workspace's sitecustomize ran on the host: {r:?}");
    assert_eq!(r.code, 0, "{r:?}");
}

/// `node -e "require('./x')"` resolves against the working directory:
/// the workspace's `x.js` is not loaded.
#[test]
fn sources_node_require_does_not_load_from_the_workspace() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-node");
    let marker = base.join("marker-node");
    env.write(
        &ws.join("x.js"),
        &format!(
            "require('fs').writeFileSync({:?}, 'ran'); console.log('sk-it-planted-value-1');\n",
            marker.display().to_string()
        ),
    );
    assert_live(env, &ws, &[], &["node", "-e", "require('./x')"], &marker);
    // No shell: the argument is `require('./x')` as written.
    let cfg = env.write_config(&base, &profile("node", "cmd:node -e require('./x')"));
    let r = env
        .lz(&ws, &["run", "-p", "node", "--", "true"])
        .config_home(&cfg)
        .run();
    assert!(!marker.exists(), "the workspace's x.js ran on the host: {r:?}");
    assert_refused(env, &r, "node", &ws, &["secret API_KEY", "exit status"]);
}

/// A `file:` source in the workspace (directly, or through a symlink
/// outside that leads in) or in a volume of another profile (a file
/// outside the workspace whose directory is a volume) is a config error
/// naming the secret and the place; nothing is read or started.
#[test]
fn sources_a_file_the_sandbox_can_reach_is_a_config_error() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-file");
    let key = ws.join("key");
    env.write(&key, "sk-it-planted-value-1");
    let link: PathBuf = base.join("key-link");
    std::os::unix::fs::symlink(&key, &link).unwrap();
    env.chown(&link);
    let vol = base.join("vol");
    env.write(&vol.join("key"), "sk-it-planted-value-1");
    let text = [
        profile("inws", &format!("file:{}", key.display())),
        profile("viasymlink", &format!("file:{}", link.display())),
        profile("invol", &format!("file:{}", vol.join("key").display())),
        format!("[profiles.other]\nvolumes = [\"{}:/data:ro\"]\n", vol.display()),
    ]
    .concat();
    let cfg = env.write_config(&base, &text);
    let file = cfg.join("lazaret/config.toml").display().to_string();
    let wsd = ws.display().to_string();
    let cases: [(&str, usize, String); 3] = [
        ("inws", 4, format!("inside the workspace {wsd}")),
        (
            "viasymlink",
            9,
            format!("leads to {wsd}/key, inside the workspace {wsd}"),
        ),
        (
            "invol",
            14,
            format!(
                "inside the volume {} (mounted at /data by profile \"other\")",
                vol.display()
            ),
        ),
    ];
    for (p, line, place) in cases {
        let r = env.lz(&ws, &["run", "-p", p, "--", "true"]).config_home(&cfg).run();
        assert_refused(
            env,
            &r,
            p,
            &ws,
            &[
                &format!("{file}:{line}: profiles.{p}.secrets.API_KEY.from: expected a file outside every workspace and volume"),
                &place,
            ],
        );
    }
}

/// A program outside whose `#!` interpreter the sandbox can write (a
/// project virtualenv's `python` in the workspace), and a workspace
/// directory in a `PATH` given to `env` after one outside: each would
/// have run the sandbox's code on the host; each is a config error
/// naming the secret, and nothing runs or starts.
#[test]
fn sources_an_interpreter_or_a_listed_path_in_the_workspace_is_a_config_error() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("sources-shebang");
    let marker = base.join("marker-shebang");
    let venv_py = ws.join("venv/bin/py");
    sh_plant(env, &venv_py, &marker);
    sh_plant(env, &ws.join("bin/keytool2"), &marker);
    let tool = base.join("bin/keytool");
    env.write(&tool, &format!("#!{}\nprint('x')\n", venv_py.display()));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool_s = tool.display().to_string();
    let listed = format!("PATH=/usr/bin:{}/bin", ws.display());
    // Both plants are live the old way (the kernel runs the interpreter;
    // env searches the PATH it is given).
    assert_live(env, &base, &[], &[&tool_s], &marker);
    assert_live(env, &base, &[], &["/usr/bin/env", &listed, "keytool2"], &marker);
    let text = [
        profile("shebang", &format!("cmd:{tool_s}")),
        profile("listed", &format!("cmd:/usr/bin/env {listed} keytool2")),
    ]
    .concat();
    let cfg = env.write_config(&base, &text);
    for (p, what) in [("shebang", "interpreter"), ("listed", "argument")] {
        let r = env.lz(&ws, &["run", "-p", p, "--", "true"]).config_home(&cfg).run();
        assert!(!marker.exists(), "{p}: the sandbox's code ran on the host: {r:?}");
        assert_refused(
            env,
            &r,
            p,
            &ws,
            &[
                &format!("profiles.{p}.secrets.API_KEY.from: expected a program and arguments outside"),
                what,
                &format!("inside the workspace {}", ws.display()),
            ],
        );
    }
}
