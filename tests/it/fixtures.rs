//! Fixture builders shared by the integration test modules: workspaces and
//! config homes owned by the test user, host Git repositories made with a
//! clean Git environment, waits on a Domain's published socket, and test
//! hosts (network namespaces on a veth, with a server in them).
//!
//! These only build and wait; what a test checks stays in the test.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{eventually, sh_quote, Env, Lz, Run, Tmux};

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

    /// Whether the CLI is a fault-injection build (`version` says so); when
    /// not, prints that the test is skipped.
    pub fn fault_build_or_skip(&self) -> bool {
        let v = self.lz(&self.home, &["version"]).run();
        if !v.stdout.contains("fault") {
            eprintln!("skipping: not a fault-injection build");
            return false;
        }
        true
    }

    /// Copies the test user's default image to `to` (`cp -a`; fails the
    /// test if that fails), then gives `tree` (which holds the copy) to the
    /// test user, best effort (`chown -R`).
    #[track_caller]
    pub fn copy_default_image(&self, to: &Path, tree: &Path) {
        let ok = Command::new("cp")
            .arg("-a")
            .arg(self.home.join(".local/share/lazaret/images/default"))
            .arg(to)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let _ = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(tree)
            .status();
    }

    /// A config home holding `config` (TOML) under `env.dir(name)` and,
    /// apart from it, an empty workspace `env.dir("NAME-ws")`: `(cfg, ws)`.
    pub fn config_and_workspace(&self, name: &str, config: &str) -> (PathBuf, PathBuf) {
        let base = self.dir(name);
        let cfg = self.write_config(&base, config);
        let ws = self.dir(&format!("{name}-ws"));
        (cfg, ws)
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

    /// The pid of the coordinator of Domain `id` (of `ws`) that has a
    /// session, waiting up to 120 s for it; fails the test naming `what`.
    /// Callers have just spawned that session: the coordinator of an
    /// earlier `run` may still answer while it stops (its last session
    /// ended), and it has none.
    pub fn coordinator_pid(&self, ws: &Path, id: &str, what: &str) -> i64 {
        let mut pid = None;
        assert!(
            eventually(Duration::from_secs(120), || {
                let json = self.ps_json(ws);
                pid = crate::harness::json_number(&json, id, "coordinator_pid").filter(|p| {
                    *p > 0 && crate::harness::json_domain(&json, id).is_some_and(|d| d.contains("\"session_id\""))
                });
                pid.is_some()
            }),
            "{what}: never running"
        );
        pid.expect("a pid once running")
    }

    /// Waits up to `limit` until `ps --json` gives Domain `id` (of `ws`) the
    /// number `key` (fails the test if it never does); then its value, read
    /// again.
    #[track_caller]
    pub fn wait_ps_number(&self, ws: &Path, id: &str, key: &str, limit: Duration) -> i64 {
        assert!(eventually(limit, || crate::harness::json_number(
            &self.ps_json(ws),
            id,
            key
        )
        .is_some()));
        crate::harness::json_number(&self.ps_json(ws), id, key).unwrap()
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

    /// A tmux pane `name` (`cols` x `rows`) with an interactive `lazaret run`
    /// in `ws` under the config home `cfg`, once its shell prompt shows
    /// (at most 120 s; fails the test showing the screen).
    #[track_caller]
    pub fn config_pane(&self, ws: &Path, cfg: &Path, name: &str, cols: u16, rows: u16) -> Tmux {
        let cfgs = cfg.display().to_string();
        let cmd =
            self.pane_cmd(ws, &["run"])
                .replacen(" env ", &format!(" env XDG_CONFIG_HOME={} ", sh_quote(&cfgs)), 1);
        let t = Tmux::new(name, cols, rows, &cmd);
        t.expect("root@lazaret", Duration::from_secs(120));
        t
    }

    /// `lazaret run -- sh -c SCRIPT` in `ws`, to run or spawn (the one
    /// spawn helper: add a config home or environment before).
    pub fn lz_sh(&self, ws: &Path, script: &str) -> Lz<'_> {
        self.lz(ws, &["run", "--", "sh", "-c", script])
    }

    /// `lazaret run --profile PROFILE -- ARGV` in `ws`, to run or spawn.
    pub fn lz_in(&self, ws: &Path, profile: &str, argv: &[&str]) -> Lz<'_> {
        let mut args = vec!["run", "--profile", profile, "--"];
        args.extend_from_slice(argv);
        self.lz(ws, &args)
    }

    /// `lazaret run -- sh -c SCRIPT` in `ws` with the default config.
    pub fn run_sh(&self, ws: &Path, script: &str) -> Run {
        self.lz_sh(ws, script).run()
    }

    /// `lazaret run -- sh -c SCRIPT` in `ws` with the config home `cfg`.
    pub fn run_sh_with_config(&self, ws: &Path, cfg: &Path, script: &str) -> Run {
        self.lz_sh(ws, script).config_home(cfg).run()
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

/// `ip ARGS`, quietly: whether it succeeded.
pub fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A test host: a network namespace on its own /30 of a test range, joined
/// to the root namespace by a veth (`link` on the root side, at
/// `host_side`, `.1` of the /30; `eth0` inside, at `ip`, `.2`). It may run
/// one server; the server, the link and the namespace go on drop.
pub struct TestNs {
    pub ns: String,
    pub link: String,
    /// The test host's address.
    pub ip: String,
    /// The root namespace's side of the link.
    pub host_side: String,
    server: Option<Child>,
}

impl TestNs {
    /// The test host `PREFIX K` on the /30 number K of `net`, K the first
    /// number from `k` on whose link does not exist yet.
    pub fn create(prefix: &str, net: std::net::Ipv4Addr, k: u32) -> TestNs {
        let mut k = k;
        while Path::new(&format!("/sys/class/net/{prefix}{k}")).exists() {
            k = (k + 1) % 32768;
        }
        let base = u32::from(net) + k * 4;
        let at = |i: u32| std::net::Ipv4Addr::from(base + i).to_string();
        let h = TestNs {
            ns: format!("{prefix}{k}-{}", std::process::id()),
            link: format!("{prefix}{k}"),
            ip: at(2),
            host_side: at(1),
            server: None,
        };
        assert!(ip(&["netns", "add", &h.ns]), "ip netns add {}", h.ns);
        assert!(ip(&[
            "link", "add", &h.link, "type", "veth", "peer", "name", "eth0", "netns", &h.ns
        ]));
        assert!(ip(&["addr", "add", &format!("{}/30", h.host_side), "dev", &h.link]));
        assert!(ip(&["link", "set", &h.link, "up"]));
        assert!(ip(&[
            "-n",
            &h.ns,
            "addr",
            "add",
            &format!("{}/30", h.ip),
            "dev",
            "eth0"
        ]));
        assert!(ip(&["-n", &h.ns, "link", "set", "eth0", "up"]));
        assert!(ip(&["-n", &h.ns, "link", "set", "lo", "up"]));
        h
    }

    /// Runs `PYTHON -c SCRIPT ARGS...` in the namespace and waits for its
    /// first line, which must be `ready` (it prints it once it listens).
    pub fn serve<S: AsRef<std::ffi::OsStr>>(&mut self, python: &str, script: &str, args: &[S]) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns, python, "-c", script])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("test host server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "test host server did not start");
        self.server = Some(child);
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        ip(&["link", "del", &self.link]);
        ip(&["netns", "del", &self.ns]);
    }
}

/// Python for a test host's server: `dns()`, a responder on `ip`:53 that
/// answers an A query for a name in the dict `zone` with its address. What
/// it sends for any other query the server's own lines that follow say (an
/// `elif` or `else` of the `if` this ends in).
#[macro_export]
macro_rules! py_zone_dns {
    () => {
        r#"def dns():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((ip, 53))
    while True:
        q, a = u.recvfrom(512)
        e, labels = 12, []
        while q[e] != 0:
            labels.append(q[e + 1:e + 1 + q[e]].decode().lower())
            e += q[e] + 1
        qtype = q[e + 1:e + 3]
        e += 5
        addr = zone.get(".".join(labels))
        if addr and qtype == b"\x00\x01":
            ans = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + socket.inet_aton(addr)
            u.sendto(q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[12:e] + ans, a)
"#
    };
}

/// Python for a test host's server: the socket `s` of a function with
/// `port` in scope, listening on `ip`:`port`.
#[macro_export]
macro_rules! py_listen {
    () => {
        r#"    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(64)
"#
    };
}

/// The artifacts in a `lowers` directory: the entries whose name is 24
/// characters long (anything else there is not an artifact).
pub fn lower_artifacts(lowers: &Path) -> Vec<String> {
    std::fs::read_dir(lowers)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.len() == 24)
        .collect()
}
