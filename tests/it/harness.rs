//! Test harness: run the CLI as the test user, make workspaces, inspect
//! processes and mounts.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

pub struct Env {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub bin: PathBuf,
}

/// Tests that look at every process or mount of the test user take this
/// exclusively (`GLOBAL.write()`); the rest share it (`GLOBAL.read()`).
pub static GLOBAL: TestLock = TestLock(RwLock::new(()));

/// A lock that a panicking test does not poison: one failed test must not
/// fail every test that takes the lock after it.
pub struct TestLock(RwLock<()>);

impl TestLock {
    pub fn read(&self) -> RwLockReadGuard<'_, ()> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, ()> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

static ENV: OnceLock<Result<Env, String>> = OnceLock::new();

fn probe() -> Result<Env, String> {
    // SAFETY-free check of our own uid through /proc.
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
    if uid_line.split_whitespace().nth(1) != Some("0") {
        return Err("integration tests run as root (they switch to the test user); use scripts/test.sh".into());
    }
    let user = std::env::var("LAZARET_TEST_USER").unwrap_or_else(|_| "lazaret-test".into());
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    let fields: Vec<String> = passwd
        .lines()
        .map(|l| l.split(':').map(String::from).collect::<Vec<_>>())
        .find(|f| f.first() == Some(&user))
        .ok_or_else(|| format!("test user {user} does not exist; run scripts/test.sh"))?;
    let uid: u32 = fields[2].parse().map_err(|_| "bad uid")?;
    let gid: u32 = fields[3].parse().map_err(|_| "bad gid")?;
    if uid == 0 {
        return Err("the test user must not be root".into());
    }
    let bin = PathBuf::from(std::env::var("LAZARET_TEST_BIN").unwrap_or_else(|_| "/tmp/lazaret-bin".into()));
    if !bin.join("lazaret").exists() || !bin.join("lazaret-init").exists() {
        return Err(format!("no lazaret binaries in {}; run scripts/test.sh", bin.display()));
    }
    let home = PathBuf::from(&fields[5]);
    if !home.join(".local/share/lazaret/images/default/index.json").exists() {
        return Err(format!(
            "the default image is not built for {user}; run scripts/test.sh"
        ));
    }
    Ok(Env {
        user,
        uid,
        gid,
        home,
        bin,
    })
}

/// The environment, or `None` after printing why the test is skipped.
/// Under `LAZARET_MUST_WORK=1` a skip is a failure.
pub fn env_or_skip(test: &str) -> Option<&'static Env> {
    match ENV.get_or_init(probe) {
        Ok(e) => Some(e),
        Err(why) => {
            if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
                panic!("{test}: cannot run ({why}) and LAZARET_MUST_WORK=1");
            }
            eprintln!("skipping: {test}: {why}");
            None
        }
    }
}

/// The environment, or return from the test (see [`env_or_skip`]).
/// `require_env!(shared)` also takes [`GLOBAL`] shared, after the
/// environment: `let (env, _g) = require_env!(shared);`.
#[macro_export]
macro_rules! require_env {
    () => {
        match $crate::harness::env_or_skip(module_path!()) {
            Some(e) => e,
            None => return,
        }
    };
    (shared) => {
        ($crate::require_env!(), $crate::harness::GLOBAL.read())
    };
}

pub struct Run {
    pub code: i32,
    /// The signal that ended the command, when one did (`code` is -1).
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The exit code (-1 for a signal) and lossy text of a finished command.
    pub fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            signal: std::os::unix::process::ExitStatusExt::signal(&o.status),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self.signal {
            Some(sig) => write!(f, "killed by signal {sig}")?,
            None => write!(f, "exit {}", self.code)?,
        }
        write!(f, "\n--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr)
    }
}

/// Builder for one CLI invocation as the test user.
pub struct Lz<'a> {
    env: &'a Env,
    args: Vec<String>,
    cwd: PathBuf,
    config_home: Option<PathBuf>,
    stdin: Vec<u8>,
    extra_env: Vec<(String, String)>,
}

impl Env {
    pub fn lz<'a>(&'a self, cwd: &Path, args: &[&str]) -> Lz<'a> {
        Lz {
            env: self,
            args: args.iter().map(|s| s.to_string()).collect(),
            cwd: cwd.to_path_buf(),
            config_home: None,
            stdin: Vec::new(),
            extra_env: Vec::new(),
        }
    }

    /// The argv prefix that runs a command as the test user.
    /// The prefix that runs a command as the test user, with every signal
    /// at its default disposition, as from a terminal: a suite started
    /// from a non-interactive shell's background job inherits SIGINT and
    /// SIGQUIT ignored, and a test's Ctrl-C would then interrupt nothing.
    pub fn as_user(&self) -> Vec<String> {
        vec![
            "setpriv".into(),
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.gid),
            "--clear-groups".into(),
            "--".into(),
            "/usr/bin/env".into(),
            "--default-signal".into(),
        ]
    }

    pub fn base_env(&self) -> Vec<(String, String)> {
        vec![
            ("HOME".into(), self.home.display().to_string()),
            ("USER".into(), self.user.clone()),
            ("LOGNAME".into(), self.user.clone()),
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into()),
        ]
    }

    /// A fresh directory in the test user's home, owned by the user.
    pub fn dir(&self, name: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = self.home.join(format!("it-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        self.chown(&d);
        d
    }

    pub fn chown(&self, p: &Path) {
        std::os::unix::fs::lchown(p, Some(self.uid), Some(self.gid)).unwrap();
    }

    /// Writes a file owned by the test user.
    pub fn write(&self, p: &Path, data: &str) {
        if let Some(d) = p.parent() {
            if !d.exists() {
                std::fs::create_dir_all(d).unwrap();
                self.chown(d);
            }
        }
        std::fs::write(p, data).unwrap();
        self.chown(p);
    }

    pub fn runtime_root(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/lazaret-{}", self.uid))
    }

    /// Domain ID as Lazaret derives it: the test's oracle.
    pub fn domain_id(&self, profile: &str, workspace: &Path) -> String {
        let ws = std::fs::canonicalize(workspace).unwrap();
        let mut data = b"lazaret-domain-v1\0".to_vec();
        data.extend_from_slice(profile.as_bytes());
        data.push(0);
        data.extend_from_slice(ws.as_os_str().as_encoded_bytes());
        openssl::sha::sha256(&data)[..10]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl<'a> Lz<'a> {
    pub fn config_home(mut self, dir: &Path) -> Self {
        self.config_home = Some(dir.to_path_buf());
        self
    }
    #[allow(dead_code)] // Harness API (what `run` feeds the CLI); no test feeds stdin at the moment.
    pub fn stdin(mut self, data: &[u8]) -> Self {
        self.stdin = data.to_vec();
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.extra_env.push((k.into(), v.into()));
        self
    }

    pub fn command(&self) -> Command {
        let pre = self.env.as_user();
        let mut c = Command::new(&pre[0]);
        c.args(&pre[1..]).arg(self.env.bin.join("lazaret")).args(&self.args);
        c.env_clear().envs(self.env.base_env()).current_dir(&self.cwd);
        if let Some(h) = &self.config_home {
            c.env("XDG_CONFIG_HOME", h);
        }
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        c
    }

    pub fn spawn(&self) -> std::process::Child {
        let mut c = self.command();
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c.spawn().expect("spawn lazaret")
    }

    pub fn run(self) -> Run {
        let mut child = self.spawn();
        let mut stdin = child.stdin.take().unwrap();
        let data = self.stdin.clone();
        let t = std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
        let out = child.wait_with_output().unwrap();
        let _ = t.join();
        Run::from(out)
    }
}

/// Processes of `uid`: (pid, real/effective/saved/fs uids, cmdline).
pub fn processes() -> Vec<(i32, Vec<u32>, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let uids: Vec<u32> = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .map(|l| l.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect())
            .unwrap_or_default();
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push((pid, uids, cmd));
    }
    out
}

/// Processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<(i32, Vec<u32>, String)> {
    processes().into_iter().filter(|(_, _, c)| c.contains(needle)).collect()
}

/// The value of the first line `KEY value` the script printed.
pub fn field<'a>(r: &'a Run, key: &str) -> Option<&'a str> {
    r.stdout
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
}

/// Polls `f` until it holds or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    f()
}

/// Waits for `child` to exit on its own, at most `limit`: past that it is
/// killed (its process group too, when it leads one) and the test fails
/// naming `what`. A test never hangs on a child that ignores its signal.
pub fn wait_bounded(child: &mut std::process::Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t.elapsed() > limit {
            let pid = child.id().to_string();
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn owner(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().uid()
}

/// A tmux server of our own (its own socket), torn down on drop.
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    pub fn new(name: &str, cols: u16, rows: u16, cmd: &str) -> Tmux {
        let socket = format!("lz-{name}-{}", std::process::id());
        let ok = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d", "-s", "t"])
            .args(["-x", &cols.to_string(), "-y", &rows.to_string(), cmd])
            .env("TERM", "xterm-256color")
            .status()
            .unwrap()
            .success();
        assert!(ok, "tmux new-session failed");
        let t = Tmux { socket };
        t.cmd(&["set-option", "-g", "status", "off"]);
        t.cmd(&["set-option", "-g", "remain-on-exit", "on"]);
        t
    }
    pub fn cmd(&self, args: &[&str]) -> String {
        let o = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
    pub fn send(&self, keys: &str) {
        self.cmd(&["send-keys", "-t", "t", "-l", keys]);
    }
    pub fn enter(&self) {
        self.cmd(&["send-keys", "-t", "t", "Enter"]);
    }
    pub fn capture(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
    }
    /// Waits until some screen line, trimmed, equals `line`.
    pub fn wait_for_line(&self, line: &str, limit: Duration) -> bool {
        eventually(limit, || self.capture().lines().any(|l| l.trim() == line))
    }
    pub fn wait_for(&self, needle: &str, limit: Duration) -> bool {
        eventually(limit, || self.capture().contains(needle))
    }
    /// Types `keys` and presses Enter.
    pub fn line(&self, keys: &str) {
        self.send(keys);
        self.enter();
    }
    /// [`Tmux::wait_for`] that must hold; fails the test showing the screen.
    #[track_caller]
    pub fn expect(&self, needle: &str, limit: Duration) {
        assert!(self.wait_for(needle, limit), "{}", self.capture());
    }
    /// [`Tmux::expect`] that fails the test saying `what`, then the screen
    /// on the next line.
    #[track_caller]
    pub fn expect_saying(&self, needle: &str, limit: Duration, what: &str) {
        assert!(self.wait_for(needle, limit), "{what}\n{}", self.capture());
    }
    /// [`Tmux::expect_line`] that fails the test saying `what`, then the
    /// screen on the next line.
    #[track_caller]
    pub fn expect_line_saying(&self, line: &str, limit: Duration, what: &str) {
        assert!(self.wait_for_line(line, limit), "{what}\n{}", self.capture());
    }
    /// [`Tmux::wait_for_line`] that must hold; fails the test showing the
    /// screen.
    #[track_caller]
    pub fn expect_line(&self, line: &str, limit: Duration) {
        assert!(self.wait_for_line(line, limit), "{}", self.capture());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["-L", &self.socket, "kill-server"]).status();
    }
}

/// Shell-quotes one argument.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl Env {
    /// A shell command line (for a tmux pane) that runs `lazaret ARGS` as
    /// the test user in `ws`, recording `stty -g` before and after in
    /// `ws/stty-before` and `ws/stty-after` and printing `exit=N`.
    pub fn pane_cmd(&self, ws: &Path, args: &[&str]) -> String {
        let mut cmd = self.as_user().iter().map(|s| sh_quote(s)).collect::<Vec<_>>().join(" ");
        cmd.push_str(" env");
        for (k, v) in self.base_env() {
            cmd.push_str(&format!(" {k}={}", sh_quote(&v)));
        }
        cmd.push_str(" TERM=xterm-256color sh -c ");
        let lz = std::iter::once(self.bin.join("lazaret").display().to_string())
            .chain(args.iter().map(|s| s.to_string()))
            .map(|s| sh_quote(&s))
            .collect::<Vec<_>>()
            .join(" ");
        let inner = format!(
            "cd {ws}; stty -g > stty-before; {lz}; echo exit=$?; stty -g > stty-after; sleep 120",
            ws = sh_quote(&ws.display().to_string()),
        );
        cmd.push_str(&sh_quote(&inner));
        cmd
    }

    /// Processes that belong to the Domain of `ws` (its id or workspace
    /// path on the command line).
    pub fn domain_processes(&self, ws: &Path) -> Vec<(i32, Vec<u32>, String)> {
        let id = self.domain_id("default", ws);
        let w = std::fs::canonicalize(ws).unwrap().display().to_string();
        processes()
            .into_iter()
            .filter(|(_, _, c)| c.contains(&id) || c.contains(&w))
            .collect()
    }

    /// `lazaret ps --json` as the test user.
    pub fn ps_json(&self, ws: &Path) -> String {
        self.lz(ws, &["ps", "--json"]).run().stdout
    }
}

/// The object of Domain `domain` in `ps --json` output, as text: from its
/// `{` to the next Domain's.
pub fn json_domain<'a>(json: &'a str, domain: &str) -> Option<&'a str> {
    let at = json.find(domain)?;
    let obj_start = json[..at].rfind('{')?;
    let rest = &json[obj_start..];
    let end = rest[1..].find("{\"domain_id\"").map_or(rest.len(), |e| e + 1);
    Some(&rest[..end])
}

/// The value of a numeric field after `"key":` in the JSON object that
/// mentions `domain` (a deliberately small reader for test oracles).
pub fn json_number(json: &str, domain: &str, key: &str) -> Option<i64> {
    let rest = json_domain(json, domain)?;
    let k = format!("\"{key}\":");
    let v = &rest[rest.find(&k)? + k.len()..];
    let end = v.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(v.len());
    v[..end].parse().ok()
}

/// A background CLI that is killed (and reaped) when the test ends, even
/// when it fails.
pub struct Bg(pub std::process::Child);

impl Drop for Bg {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl<'a> Lz<'a> {
    pub fn spawn_bg(&self) -> Bg {
        Bg(self.spawn())
    }
}
