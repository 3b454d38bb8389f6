//! Fixture builders shared by the integration test modules: workspaces and
//! config homes owned by the test user, host Git repositories made with a
//! clean Git environment, and waits on a Domain's published socket.
//!
//! These only build and wait; what a test checks stays in the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::harness::{eventually, Env, Run};

impl Env {
    /// A fresh `env.dir(name)` with an empty workspace `ws` inside it, both
    /// owned by the test user: `(base, base/ws)`.
    pub fn base_and_workspace(&self, name: &str) -> (PathBuf, PathBuf) {
        let base = self.dir(name);
        let ws = base.join("ws");
        std::fs::create_dir(&ws).unwrap();
        self.chown(&ws);
        (base, ws)
    }

    /// Writes `text` as `dir/cfg/lazaret/config.toml` and returns `dir/cfg`,
    /// the `XDG_CONFIG_HOME` to hand to [`crate::harness::Lz::config_home`].
    pub fn write_config(&self, dir: &Path, text: &str) -> PathBuf {
        let home = dir.join("cfg");
        self.write(&home.join("lazaret/config.toml"), text);
        home
    }

    /// A workspace and a config home holding `config` (TOML), both under
    /// `env.dir(name)`: `(ws, cfg)`.
    pub fn workspace_with_config(&self, name: &str, config: &str) -> (PathBuf, PathBuf) {
        let (base, ws) = self.base_and_workspace(name);
        let cfg = self.write_config(&base, config);
        (ws, cfg)
    }

    /// The control socket of the Domain of `profile` and `ws`; it exists
    /// while the Domain is published.
    pub fn domain_socket(&self, profile: &str, ws: &Path) -> PathBuf {
        self.runtime_root().join(self.domain_id(profile, ws)).join("hc.sock")
    }

    /// Waits up to `limit` until the Domain of `profile` and `ws` is
    /// published; fails the test if it never is.
    pub fn wait_published(&self, profile: &str, ws: &Path, limit: Duration) {
        let sock = self.domain_socket(profile, ws);
        assert!(eventually(limit, || sock.exists()), "the Domain was never published");
    }

    /// The pid of the running coordinator of Domain `id` (of `ws`),
    /// waiting up to 120 s for it; fails the test naming `what`.
    pub fn coordinator_pid(&self, ws: &Path, id: &str, what: &str) -> i64 {
        let mut pid = None;
        assert!(
            eventually(Duration::from_secs(120), || {
                pid = crate::harness::json_number(&self.ps_json(ws), id, "coordinator_pid").filter(|p| *p > 0);
                pid.is_some()
            }),
            "{what}: never running"
        );
        pid.expect("a pid once running")
    }

    /// Kills coordinator `pid` with SIGKILL, waits for `session` (a client
    /// of it) to end and for the Domain of `profile` and `ws` to answer no
    /// more: a dead coordinator leaves its socket file, with nobody behind
    /// it.
    pub fn kill_coordinator(&self, pid: i64, session: &mut std::process::Child, profile: &str, ws: &Path) {
        let sock = self.domain_socket(profile, ws);
        Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
        let _ = crate::harness::wait_bounded(session, Duration::from_secs(120), "the session of a killed coordinator");
        assert!(eventually(Duration::from_secs(30), || !sock.exists()
            || std::os::unix::net::UnixStream::connect(&sock).is_err()));
    }

    /// Waits up to `limit` until the Domain of `profile` and `ws` is no
    /// longer published, so the next `run` starts a new generation; fails
    /// the test if it stays up.
    pub fn wait_unpublished(&self, profile: &str, ws: &Path, limit: Duration) {
        let sock = self.domain_socket(profile, ws);
        assert!(eventually(limit, || !sock.exists()), "Domain still published");
    }

    /// `lazaret run -- sh -c SCRIPT` in `ws` with the default config.
    pub fn run_sh(&self, ws: &Path, script: &str) -> Run {
        self.lz(ws, &["run", "--", "sh", "-c", script]).run()
    }

    /// `lazaret run -- sh -c SCRIPT` in `ws` with the config home `cfg`.
    pub fn run_sh_with_config(&self, ws: &Path, cfg: &Path, script: &str) -> Run {
        self.lz(ws, &["run", "--", "sh", "-c", script]).config_home(cfg).run()
    }
}

/// The command `ARGV` in `dir` as the test user, with a clean environment
/// and no system or global Git config (so whatever Git honours comes from
/// the repository itself); the caller may add to it before running it.
pub fn host_command(env: &Env, dir: &Path, argv: &[&str]) -> Command {
    let pre = env.as_user();
    let mut c = Command::new(&pre[0]);
    c.args(&pre[1..])
        .args(argv)
        .current_dir(dir)
        .env_clear()
        .envs(env.base_env())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null");
    c
}

/// Runs [`host_command`] to completion.
pub fn host_cmd(env: &Env, dir: &Path, argv: &[&str]) -> Run {
    Run::from(host_command(env, dir, argv).output().unwrap())
}

/// Host `git -C DIR ARGS` as the test user (see [`host_cmd`]).
pub fn host_git(env: &Env, dir: &Path, args: &[&str]) -> Run {
    let d = dir.to_string_lossy().into_owned();
    let mut argv = vec!["git", "-C", &d];
    argv.extend_from_slice(args);
    host_cmd(env, Path::new("/"), &argv)
}

/// [`host_git`] that must succeed; its stdout.
pub fn host_git_ok(env: &Env, dir: &Path, args: &[&str]) -> String {
    let r = host_git(env, dir, args);
    assert_eq!(r.code, 0, "host git {args:?} in {}: {r:?}", dir.display());
    r.stdout
}

/// A workspace `env.dir(name)` that is a Git repository (branch `main`,
/// identity `Host <host@example.test>`) with one commit of a `README` and
/// `files`, all owned by the test user.
pub fn git_repo(env: &Env, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let ws = env.dir(name);
    host_git_ok(env, &ws, &["init", "-q", "-b", "main"]);
    host_git_ok(env, &ws, &["config", "user.name", "Host"]);
    host_git_ok(env, &ws, &["config", "user.email", "host@example.test"]);
    env.write(&ws.join("README"), "hello\n");
    for (p, c) in files {
        env.write(&ws.join(p), c);
    }
    host_git_ok(env, &ws, &["add", "-A"]);
    host_git_ok(env, &ws, &["commit", "-q", "-m", "initial"]);
    ws
}
