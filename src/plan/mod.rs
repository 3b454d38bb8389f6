//! Pure planners: the runsc bundle `config.json`, the per-session process
//! spec, runsc's argv and the user-namespace id maps. No syscalls here; the
//! coordinator and supervisor carry the plans out.

pub mod guest;
pub mod workspace;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Lazaret's fixed control mounts appear under `/.lazaret` inside the sandbox.
pub const GUEST_INIT: &str = "/.lazaret/init";
/// Always reaches the workspace: a symlink to its own path inside
/// ([`workspace`]), or on an image with files there, a second bind.
pub const GUEST_WORKSPACE: &str = "/workspace";
pub const GUEST_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Capabilities no sandboxed process ever gets, whatever the profile says
/// (the profile can only narrow `config::DEFAULT_CAPS`). CAP_NET_ADMIN
/// would let the sandbox reroute around denies; CAP_NET_RAW forge
/// packets; CAP_SYS_ADMIN and CAP_SYS_PTRACE widen gVisor's own attack
/// surface. See docs/threat-model.md.
pub const FORBIDDEN_CAPS: &[&str] = &["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE"];

/// The guest command runs through Lazaret's init (`init exec`), which
/// execs it and reports a missing or non-executable command the way a
/// shell does (127, 126) instead of runsc's internal error. A terminal
/// session's command (`terminal`) runs on a PTY of the sandbox's own that
/// init relays to the session's terminal (`init exec --tty`), so that it has
/// a name (`tty` prints `/dev/pts/N`).
///
/// With `ssh_agent` (a profile with `[ssh_agent]`, issue 51), init first
/// binds the session's agent socket at `SSH_AUTH_SOCK` and starts its
/// server (`init exec --ssh-agent`).
pub fn guarded_argv(argv: &[String], terminal: bool, ssh_agent: bool) -> Vec<String> {
    let mut v = vec![GUEST_INIT.to_string(), "exec".to_string()];
    if terminal {
        v.push("--tty".to_string());
    }
    if ssh_agent {
        v.push("--ssh-agent".to_string());
    }
    v.push("--".to_string());
    v.extend(argv.iter().cloned());
    v
}

// ---- a minimal JSON writer -------------------------------------------

pub enum Json {
    Null,
    Bool(bool),
    Num(i64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(&'static str, Json)>),
}

impl Json {
    pub fn s(v: impl Into<String>) -> Json {
        Json::Str(v.into())
    }
    pub fn strs<S: AsRef<str>>(v: &[S]) -> Json {
        Json::Arr(v.iter().map(|s| Json::s(s.as_ref())).collect())
    }
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }
    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Str(s) => quote(out, s),
            Json::Arr(items) => {
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    it.write(out);
                }
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    quote(out, k);
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// Writes `s` as a JSON string literal.
pub fn quote(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Control and format (bidi) characters never reach a terminal
            // raw, even through `--json` (still the same string to a parser).
            c if crate::display::is_unsafe(c) => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", u);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

// ---- the sandbox bundle ----------------------------------------------------

#[derive(Clone, Debug)]
pub struct BindMount {
    pub guest: String,
    pub host: PathBuf,
    pub read_only: bool,
}

#[derive(Clone, Debug)]
pub struct SandboxPlan {
    /// Prepared lower's rootfs (immutable; writes stay in the sandbox).
    pub rootfs: PathBuf,
    pub workspace: PathBuf,
    /// Where the workspace is bound inside (`workspace::place`).
    pub workspace_guest: String,
    /// How `/workspace` reaches it.
    pub workspace_alias: workspace::Alias,
    /// The static guest init binary on the host.
    pub init: PathBuf,
    pub hostname: String,
    /// Configured volumes and later control mounts.
    pub binds: Vec<BindMount>,
    /// The prepared sandbox network namespace (behind the router) to join (a path in the
    /// supervisor's mount namespace), when the Domain has a network.
    pub netns: Option<PathBuf>,
    /// The profile's capabilities (a subset of `config::DEFAULT_CAPS`).
    pub caps: Vec<String>,
    /// RLIMIT_NPROC for every process in the sandbox (runsc applies the
    /// root spec's rlimits to `runsc exec` processes too).
    pub nproc: u64,
}

fn caps(set: &[String]) -> Json {
    // Defence in depth: the config already refuses these.
    let set: Vec<&str> = set
        .iter()
        .map(String::as_str)
        .filter(|c| !FORBIDDEN_CAPS.contains(c))
        .collect();
    Json::Obj(vec![
        ("bounding", Json::strs(&set)),
        ("effective", Json::strs(&set)),
        ("permitted", Json::strs(&set)),
    ])
}

fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Json {
    Json::Obj(vec![
        ("destination", Json::s(dest)),
        ("type", Json::s(typ)),
        ("source", Json::s(source)),
        ("options", Json::strs(options)),
    ])
}

/// The `config.json` for `runsc run`. The root process is Lazaret's init,
/// which only reaps; sessions arrive by `runsc exec`. The root process stays
/// terminal-neutral. No user namespace in the spec: the supervisor already
/// runs inside one, and runsc refuses umoci's mappings.
pub fn sandbox_config(p: &SandboxPlan) -> String {
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &[]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", "ro"]),
        mount(GUEST_INIT, "bind", &p.init.to_string_lossy(), &["bind", "ro"]),
    ];
    for b in &p.binds {
        let opts: &[&str] = if b.read_only {
            &["rbind", "ro"]
        } else {
            &["rbind", "rw"]
        };
        mounts.push(mount(&b.guest, "bind", &b.host.to_string_lossy(), opts));
    }
    // After the binds: the persistent layer (or the `/workspaces` bind)
    // that holds its mount point is mounted by then.
    let ws = p.workspace.to_string_lossy();
    mounts.push(mount(&p.workspace_guest, "bind", &ws, &["rbind", "rw"]));
    if p.workspace_alias == workspace::Alias::Bind {
        mounts.push(mount(GUEST_WORKSPACE, "bind", &ws, &["rbind", "rw"]));
    }
    Json::Obj(vec![
        ("ociVersion", Json::s("1.0.2")),
        (
            "process",
            Json::Obj(vec![
                ("terminal", Json::Bool(false)),
                ("user", Json::Obj(vec![("uid", Json::Num(0)), ("gid", Json::Num(0))])),
                ("args", Json::strs(&[GUEST_INIT])),
                ("env", Json::strs(&[GUEST_PATH])),
                ("cwd", Json::s("/")),
                ("capabilities", caps(&p.caps)),
                ("rlimits", Json::Arr(vec![rlimit_nofile(), rlimit_nproc(p.nproc)])),
                ("noNewPrivileges", Json::Bool(true)),
            ]),
        ),
        (
            "root",
            Json::Obj(vec![
                ("path", Json::s(p.rootfs.to_string_lossy())),
                ("readonly", Json::Bool(false)),
            ]),
        ),
        ("hostname", Json::s(&p.hostname)),
        ("mounts", Json::Arr(mounts)),
        (
            "linux",
            Json::Obj(vec![(
                "namespaces",
                Json::Arr({
                    let mut ns: Vec<Json> = ["pid", "ipc", "uts", "mount"]
                        .iter()
                        .map(|t| Json::Obj(vec![("type", Json::s(*t))]))
                        .collect();
                    if let Some(p) = &p.netns {
                        ns.push(Json::Obj(vec![
                            ("type", Json::s("network")),
                            ("path", Json::s(p.to_string_lossy())),
                        ]));
                    }
                    ns
                }),
            )]),
        ),
    ])
    .render()
}

fn rlimit_nofile() -> Json {
    Json::Obj(vec![
        ("type", Json::s("RLIMIT_NOFILE")),
        ("hard", Json::Num(65536)),
        ("soft", Json::Num(65536)),
    ])
}

/// The guest's own task limit: gVisor refuses a fork beyond it with
/// EAGAIN (see `cgroup::guest_tasks`).
fn rlimit_nproc(n: u64) -> Json {
    Json::Obj(vec![
        ("type", Json::s("RLIMIT_NPROC")),
        ("hard", Json::Num(n.min(i64::MAX as u64) as i64)),
        ("soft", Json::Num(n.min(i64::MAX as u64) as i64)),
    ])
}

#[derive(Clone, Debug)]
pub struct SessionPlan {
    pub argv: Vec<String>,
    /// KEY=VALUE strings, already filtered to what the sandbox may see.
    pub env: Vec<String>,
    pub cwd: String,
    pub terminal: bool,
    /// The profile's capabilities (root sessions only).
    pub caps: Vec<String>,
    /// The profile's `user` as (uid, gid), or `None` for root.
    pub user: Option<(u32, u32)>,
}

/// The process spec for `runsc exec --process`. A session of the profile's
/// `user` has no capability at all (nothing effective, permitted or in the
/// bounding set) and no new privileges.
pub fn process_spec(s: &SessionPlan) -> String {
    let (uid, gid) = s.user.unwrap_or((0, 0));
    let caps_set: &[String] = if s.user.is_some() { &[] } else { &s.caps };
    Json::Obj(vec![
        ("terminal", Json::Bool(s.terminal)),
        (
            "user",
            Json::Obj(vec![("uid", Json::Num(uid.into())), ("gid", Json::Num(gid.into()))]),
        ),
        ("args", Json::strs(&s.argv)),
        ("env", Json::strs(&s.env)),
        ("cwd", Json::s(&s.cwd)),
        ("capabilities", caps(caps_set)),
        ("rlimits", Json::Arr(vec![rlimit_nofile()])),
        ("noNewPrivileges", Json::Bool(true)),
    ])
    .render()
}

pub use workspace::guest_cwd;

/// The session environment: fixed basics (`HOME`, and `USER`/`LOGNAME` for
/// the profile's guest `user`; `None`: root), the profile's env, then TERM
/// from the client. Nothing else of the host environment crosses over.
pub fn session_env_for(user: Option<&str>, profile_env: &[(String, String)], term: Option<&str>) -> Vec<String> {
    let mut env = vec![GUEST_PATH.to_string()];
    match user {
        Some(u) => {
            env.push(format!("HOME={}", crate::config::guest_home(u)));
            env.push(format!("USER={u}"));
            env.push(format!("LOGNAME={u}"));
        }
        None => env.push("HOME=/root".to_string()),
    }
    env.push("LANG=C.UTF-8".to_string());
    if let Some(t) = term {
        env.push(format!("TERM={t}"));
    }
    for (k, v) in profile_env {
        env.retain(|e| !e.starts_with(&format!("{k}=")));
        env.push(format!("{k}={v}"));
    }
    env
}

/// Sets `vars` in `env`, replacing earlier entries of the same names.
pub fn override_env(env: &mut Vec<String>, vars: &[(String, String)]) {
    for (k, v) in vars {
        env.retain(|e| !e.starts_with(&format!("{k}=")));
        env.push(format!("{k}={v}"));
    }
}

// ---- runsc argv --------------------------------------------------------------

/// Global flags for every runsc invocation of a Domain. Same flags for run,
/// exec, kill and delete so they agree on the state root.
pub fn runsc_global_args(runsc_root: &Path) -> Vec<String> {
    vec![
        format!("--root={}", runsc_root.display()),
        "--ignore-cgroups".into(),
        // Loopback only until the network role installs a policy.
        "--network=none".into(),
        // Root filesystem writes stay in sandbox memory: the prepared lower
        // is never written.
        "--overlay2=root:memory".into(),
    ]
}

/// The same flags with the root filesystem's writes kept in a file-backed
/// store in `dir` (on disk, in the Domain Root) instead of sandbox memory:
/// a write-heavy agent then costs disk, not host RAM. The prepared lower
/// is still never written.
pub fn with_scratch_overlay(args: &[String], dir: &Path) -> Vec<String> {
    args.iter()
        .map(|a| {
            if a.starts_with("--overlay2=") {
                format!("--overlay2=root:dir={}", dir.display())
            } else {
                a.clone()
            }
        })
        .collect()
}

/// The same flags with gVisor's own network stack in the prepared
/// sandbox network namespace instead of loopback only.
pub fn with_sandbox_network(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| {
            if a == "--network=none" {
                "--network=sandbox".to_string()
            } else {
                a.clone()
            }
        })
        .collect()
}

// ---- user namespace maps -------------------------------------------------------

pub use crate::sys::hostenv::SubRange;

/// The range of at least 65536 ids for `user`/`id` in an
/// `/etc/subuid`-style file (see [`crate::sys::hostenv::find_subrange`]).
pub fn find_subrange(text: &str, user: &str, id: u32) -> Option<SubRange> {
    crate::sys::hostenv::find_subrange(text, Some(user).filter(|u| !u.is_empty()), id)
}

/// Arguments for `newuidmap PID …` / `newgidmap PID …`: the user becomes 0,
/// the subordinate range fills `inside..inside + 65536`.
pub fn id_map_args(pid: i32, own: u32, sub: SubRange, inside: u32) -> Vec<String> {
    vec![
        pid.to_string(),
        "0".into(),
        own.to_string(),
        "1".into(),
        inside.to_string(),
        sub.start.to_string(),
        "65536".into(),
    ]
}

/// Why the id maps of a process could not be written.
#[derive(Debug)]
pub enum IdMapError {
    /// No subordinate range of 65536 ids for the user in the file.
    NoSubrange { file: &'static str, name: String, uid: u32 },
    /// `newuidmap`/`newgidmap` could not be started.
    Run(&'static str, std::io::Error),
    /// … or failed (its stderr).
    Failed(&'static str, String),
}

impl std::fmt::Display for IdMapError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            IdMapError::NoSubrange { file, name, uid } => write!(
                f,
                "{file} has no range of 65536 ids for {name} (uid {uid}): run `lazaret doctor` for the fix"
            ),
            IdMapError::Run(tool, e) => write!(f, "cannot run {tool}: {e} (install uidmap; run `lazaret doctor`)"),
            IdMapError::Failed(tool, err) => write!(f, "{tool} failed: {err}"),
        }
    }
}

impl std::error::Error for IdMapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IdMapError::Run(_, e) => Some(e),
            _ => None,
        }
    }
}

/// Writes the user namespace maps of `pid` with the setuid helpers: the
/// user is 0 inside, the subordinate range fills `inside..inside + 65536`
/// (the supervisor's and the state helper's maps differ only there).
pub fn write_id_maps(pid: i32, inside: u32) -> Result<(), IdMapError> {
    let (uid, gid) = (crate::sys::getuid(), crate::sys::getgid());
    let name = crate::sys::hostenv::user_name(uid).unwrap_or_default();
    // Both helpers run side by side (each is a setuid process of a few
    // ms; the two maps are independent files); each is waited for.
    let mut running = Vec::new();
    let mut first_err = None;
    for (tool, file, own) in [("newuidmap", "/etc/subuid", uid), ("newgidmap", "/etc/subgid", gid)] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let started = find_subrange(&text, &name, uid)
            .ok_or_else(|| IdMapError::NoSubrange {
                file,
                name: name.clone(),
                uid,
            })
            .and_then(|sub| {
                std::process::Command::new(tool)
                    .args(id_map_args(pid, own, sub, inside))
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| IdMapError::Run(tool, e))
            });
        match started {
            Ok(child) => running.push((tool, child)),
            Err(e) => {
                first_err = Some(e);
                break;
            }
        }
    }
    for (tool, child) in running {
        let result = child
            .wait_with_output()
            .map_err(|e| IdMapError::Run(tool, e))
            .and_then(|out| {
                if out.status.success() {
                    Ok(())
                } else {
                    Err(IdMapError::Failed(
                        tool,
                        String::from_utf8_lossy(&out.stderr).trim().to_string(),
                    ))
                }
            });
        if let Err(e) = result {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> SandboxPlan {
        SandboxPlan {
            rootfs: "/s/lowers/a/rootfs".into(),
            workspace: "/home/u/p \"q\"".into(),
            workspace_guest: "/home/u/p \"q\"".into(),
            workspace_alias: workspace::Alias::Symlink,
            init: "/opt/lazaret/lazaret-init".into(),
            hostname: "lazaret".into(),
            binds: vec![],
            netns: None,
            caps: crate::config::DEFAULT_CAPS.iter().map(|s| s.to_string()).collect(),
            nproc: 2709,
        }
    }

    #[test]
    fn sandbox_config_has_workspace_init_and_no_userns() {
        let c = sandbox_config(&plan());
        assert!(
            c.contains(
                r#""destination":"/home/u/p \"q\"","type":"bind","source":"/home/u/p \"q\"","options":["rbind","rw"]"#
            ),
            "{c}"
        );
        assert!(!c.contains(r#""destination":"/workspace""#), "{c}");
        assert!(c.contains(r#""destination":"/.lazaret/init","type":"bind","source":"/opt/lazaret/lazaret-init","options":["bind","ro"]"#));
        assert!(c.contains(r#""args":["/.lazaret/init"]"#));
        assert!(!c.contains("\"user\",") && !c.contains("uidMappings"));
        assert!(!c.contains("NET_ADMIN") && !c.contains("SYS_ADMIN"));
        assert!(!c.contains("NET_RAW") && !c.contains("SYS_PTRACE"));
        assert!(c.contains("CAP_CHOWN") && c.contains("CAP_SETUID") && c.contains("CAP_MKNOD"));
        assert!(c.contains(r#""terminal":false"#));
        assert!(c.contains(r#"{"type":"RLIMIT_NPROC","hard":2709,"soft":2709}"#), "{c}");
        assert!(!c.contains(r#""network""#), "no network namespace without a network");
        let c = sandbox_config(&SandboxPlan {
            netns: Some("/run/g/netns-enforce".into()),
            ..plan()
        });
        assert!(c.contains(r#"{"type":"network","path":"/run/g/netns-enforce"}"#), "{c}");
        assert_eq!(
            with_sandbox_network(&["--root=x".into(), "--network=none".into()]),
            ["--root=x", "--network=sandbox"]
        );
    }

    #[test]
    fn process_spec_escapes_arguments() {
        let s = process_spec(&SessionPlan {
            argv: vec!["sh".into(), "-c".into(), "echo \"a\\b\"\n\u{1b}".into()],
            env: vec!["TERM=xterm".into()],
            cwd: "/workspace".into(),
            terminal: true,
            caps: vec!["CAP_CHOWN".into(), "CAP_NET_ADMIN".into()],
            user: None,
        });
        assert!(s.contains(r#""bounding":["CAP_CHOWN"]"#), "{s}");
        assert!(s.contains(r#""args":["sh","-c","echo \"a\\b\"\n\u001b"]"#), "{s}");
        assert!(s.contains(r#""terminal":true"#));
        assert!(s.contains(r#""user":{"uid":0,"gid":0}"#), "{s}");
    }

    #[test]
    fn a_user_session_has_its_ids_and_no_capability() {
        let s = process_spec(&SessionPlan {
            argv: vec!["id".into()],
            env: session_env_for(Some("dev"), &[], None),
            cwd: "/workspace".into(),
            terminal: false,
            caps: vec!["CAP_CHOWN".into(), "CAP_DAC_OVERRIDE".into()],
            user: Some((1000, 1000)),
        });
        assert!(s.contains(r#""user":{"uid":1000,"gid":1000}"#), "{s}");
        assert!(
            s.contains(r#""capabilities":{"bounding":[],"effective":[],"permitted":[]}"#),
            "{s}"
        );
        assert!(s.contains(r#""noNewPrivileges":true"#), "{s}");
        assert!(s.contains("\"HOME=/home/dev\",\"USER=dev\",\"LOGNAME=dev\""), "{s}");
    }

    #[test]
    fn the_workspace_is_mounted_after_the_layer_that_holds_its_mount_point() {
        let p = SandboxPlan {
            workspace: "/g/view-workspace".into(),
            workspace_guest: "/workspaces/p-0123456789".into(),
            binds: vec![BindMount {
                guest: "/workspaces".into(),
                host: "/g/workspaces".into(),
                read_only: true,
            }],
            ..plan()
        };
        let c = sandbox_config(&p);
        let parent =
            c.find(r#""destination":"/workspaces","type":"bind","source":"/g/workspaces","options":["rbind","ro"]"#);
        let ws = c.find(r#""destination":"/workspaces/p-0123456789","type":"bind","source":"/g/view-workspace","options":["rbind","rw"]"#);
        assert!(parent.is_some() && ws.is_some() && parent < ws, "{c}");
        assert!(!c.contains(r#""destination":"/workspace","#), "{c}");
        // An image with files at /workspace: a second bind of the view.
        let c = sandbox_config(&SandboxPlan {
            workspace_alias: workspace::Alias::Bind,
            ..p
        });
        assert!(
            c.contains(
                r#""destination":"/workspace","type":"bind","source":"/g/view-workspace","options":["rbind","rw"]"#
            ),
            "{c}"
        );
    }

    #[test]
    fn env_is_built_from_trusted_parts_only() {
        let env = session_env_for(
            None,
            &[("HOME".into(), "/home/a".into()), ("X".into(), "1".into())],
            Some("xterm-256color"),
        );
        assert!(env.contains(&"HOME=/home/a".to_string()));
        assert!(!env.contains(&"HOME=/root".to_string()));
        assert!(env.contains(&"TERM=xterm-256color".to_string()));
        assert!(env.contains(&"X=1".to_string()));
    }

    #[test]
    fn json_quote_escapes_controls_quotes_backslash_and_bidi() {
        let q = |s: &str| {
            let mut o = String::new();
            quote(&mut o, s);
            o
        };
        assert_eq!(q("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(q("l1\nl2\t\r"), r#""l1\nl2\t\r""#);
        assert_eq!(
            q("\u{1}\u{8}\u{c}\u{1b}[2J\u{7f}"),
            r#""\u0001\u0008\u000c\u001b[2J\u007f""#
        );
        assert_eq!(
            q("x\u{202e}y\u{2066}\u{200f}\u{2028}"),
            r#""x\u202ey\u2066\u200f\u2028""#
        );
        assert_eq!(q("\u{e0041}"), r#""\udb40\udc41""#);
        assert_eq!(q("ü→"), "\"ü→\"");
        // Every writer of JSON renders a string the same way.
        let hostile = "\u{1b}]0;t\u{7}\"\\\u{202e}";
        assert_eq!(Json::s(hostile).render(), q(hostile));
    }

    #[test]
    fn subranges_match_by_name_or_uid_and_need_65536() {
        let t = "alice:100000:65536\nbob:200000:1000\n1001:300000:65536\n";
        assert_eq!(
            find_subrange(t, "alice", 1000),
            Some(SubRange {
                start: 100000,
                count: 65536
            })
        );
        assert_eq!(find_subrange(t, "bob", 1002), None);
        assert_eq!(
            find_subrange(t, "carol", 1001),
            Some(SubRange {
                start: 300000,
                count: 65536
            })
        );
        assert_eq!(
            id_map_args(
                7,
                1000,
                SubRange {
                    start: 100000,
                    count: 65536
                },
                1
            ),
            ["7", "0", "1000", "1", "1", "100000", "65536"]
        );
    }
}
