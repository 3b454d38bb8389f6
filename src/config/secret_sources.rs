//! What a `cmd:` or `file:` secret source may touch on the host: nothing
//! the sandbox can write (docs/network.md "Secrets", docs/threat-model.md).
//!
//! A secret source runs, or is read, on the host as the user, before the
//! sandbox starts and with the user's whole authority. Anything the
//! sandbox can write — the workspace (and a linked worktree's Git common
//! directory), every volume of every profile, the workspaces of the user's
//! other Domains, and Lazaret's storage root and runtime dir, which hold
//! the overlay uppers and the logs the sandbox fills — is the [`Fence`].
//! A source that would run, load or read from inside it is a config error
//! naming the secret; this module decides that and builds the `cmd:`
//! child's surroundings ([`CmdPlan`]):
//!
//! - the working directory is the home directory, or `/` when home lies
//!   inside the Fence (`/` is root's and exists everywhere: nothing can be
//!   planted there, and nothing has to be made or cleaned up, which a
//!   fresh private directory would need). `python3 -m X` puts the working
//!   directory first on `sys.path`, `node -e "require('./x')"` resolves
//!   against it and `npx` looks in its `node_modules` and its parents',
//!   so it must never be (or lie under) a place the sandbox writes;
//! - the environment is an allow-list ([`child_env`]): identity, locale,
//!   `PATH` with every relative, empty or fenced entry removed, and the
//!   handful of variables credential helpers need to reach the desktop
//!   keyring or an agent, each only when it points outside the Fence.
//!   Nothing else passes (`PYTHONPATH`, `NODE_OPTIONS`, `LD_PRELOAD`, …);
//! - the program is resolved here, in that `PATH`, to an absolute path;
//!   every location on the way (each symlink, each directory) must lie
//!   outside the Fence ([`locate`]), and so must a script's `#!`
//!   interpreter ([`shebang`]) and every path an argument
//!   names ([`arg_paths`]: absolute, glued to an option, in a `:` list,
//!   or relative to the child's directory).
//!
//! Paths are compared canonically (symlinks resolved one by one, as the
//! kernel does) and by whole components (`/a/bc` is not inside `/a/b`).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::{Config, ConfigError};

/// The `PATH` searched when the environment has none (what a login shell
/// on a Debian-like system starts with).
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Symlinks followed on one path before giving up (the kernel's limit).
const MAX_HOPS: usize = 40;

/// Variables copied as they are, when their value holds no `/` (a locale
/// or a user name never does; one that does could name a file).
const PLAIN_VARS: &[&str] = &["USER", "LOGNAME", "LANG", "LANGUAGE", "DISPLAY"];
/// Variables that name a directory or a socket: copied when they hold an
/// absolute path outside the Fence. These are what keyring, secret-service,
/// `pass`, `gpg`, `ssh-agent` and `gh`-style helpers read to find their
/// store or agent.
const PATH_VARS: &[&str] = &[
    "HOME",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "SSH_AUTH_SOCK",
    "GNUPGHOME",
    "PASSWORD_STORE_DIR",
    "XAUTHORITY",
];

/// What a fenced place is, for the error that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The workspace `lazaret` was started for.
    Workspace,
    /// The Git common directory of a linked worktree (bound into the
    /// sandbox with it).
    GitCommon,
    /// The workspace of another Domain of this user.
    OtherWorkspace,
    /// A profile's volume (read-only ones too: the sandbox reads them).
    Volume { profile: String, guest: String },
    /// Lazaret's storage root (the overlay uppers the sandbox writes).
    Storage,
    /// Lazaret's runtime dir (logs and sockets the sandbox fills).
    Runtime,
}

/// One place the sandbox can write (or read): its canonical path and what
/// it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub path: PathBuf,
    pub what: Reach,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = crate::display::escape_path(&self.path);
        match &self.what {
            Reach::Workspace => write!(f, "the workspace {p}"),
            Reach::GitCommon => write!(f, "the workspace's Git common directory {p}"),
            Reach::OtherWorkspace => write!(f, "the workspace {p} of another Domain"),
            Reach::Volume { profile, guest } => write!(
                f,
                "the volume {p} (mounted at {} by profile {:?})",
                crate::display::escape(guest),
                profile
            ),
            Reach::Storage => write!(f, "Lazaret's storage root {p}"),
            Reach::Runtime => write!(f, "Lazaret's runtime dir {p}"),
        }
    }
}

/// Every place the sandbox can write, canonical.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fence {
    places: Vec<Place>,
}

impl Fence {
    /// Adds `path` (absolute; a relative one names nothing and is skipped),
    /// canonicalized as far as it exists.
    pub fn add(&mut self, path: &Path, what: Reach) {
        if !path.is_absolute() {
            return;
        }
        let path = locate(path, &Fence::default()).unwrap_or_else(|_| path.to_path_buf());
        if !self.places.iter().any(|p| p.path == path) {
            self.places.push(Place { path, what });
        }
    }

    /// The place holding the canonical path `p` (equal to it or above it,
    /// by whole components).
    pub fn holding(&self, p: &Path) -> Option<&Place> {
        self.places.iter().find(|pl| p.starts_with(&pl.path))
    }

    #[cfg(test)]
    pub fn places(&self) -> &[Place] {
        &self.places
    }
}

/// What a secret source is resolved against on the host: the config file
/// (named in errors), the [`Fence`] and the starting client's environment
/// (`env:` reads it; a `cmd:` child gets the allow-listed part).
#[derive(Debug, Clone)]
pub struct SourceHost {
    pub file: PathBuf,
    pub fence: Fence,
    pub env: Vec<(OsString, OsString)>,
}

impl SourceHost {
    /// This process's environment and `fence` (the client gathers it:
    /// `client::secrets::fence`).
    pub fn here(cfg: &Config, fence: Fence) -> SourceHost {
        SourceHost {
            file: cfg.path.clone(),
            fence,
            env: std::env::vars_os().collect(),
        }
    }

    /// The client's variable `name`.
    pub fn var(&self, name: &str) -> Option<OsString> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }
}

/// Why [`locate`] gave no path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walk {
    /// A location on the way (`at`, canonical) lies in `place`.
    Inside { at: PathBuf, place: Place },
    /// More than [`MAX_HOPS`] symlinks.
    Loop,
}

/// Resolves the absolute `path` component by component as the kernel
/// would, following each symlink, and checks every location it passes
/// (each directory, each symlink, the end) against `fence`. The canonical
/// path on success; a part that does not exist is appended as written.
pub fn locate(path: &Path, fence: &Fence) -> Result<PathBuf, Walk> {
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, path);
    let mut cur = PathBuf::from("/");
    let mut hops = 0;
    let mut exists = true;
    // `at`: the fenced location and, lexically, the rest of the way.
    let check = |p: &Path, rest: &[OsString]| match fence.holding(p) {
        Some(place) => {
            let mut at = p.to_path_buf();
            for c in rest.iter().rev() {
                match c.to_str() {
                    Some("/") => at = PathBuf::from("/"),
                    Some("..") => {
                        at.pop();
                    }
                    _ => at.push(c),
                }
            }
            Err(Walk::Inside {
                at,
                place: place.clone(),
            })
        }
        None => Ok(()),
    };
    check(&cur, &todo)?;
    while let Some(c) = todo.pop() {
        if c == "/" {
            cur = PathBuf::from("/");
            continue;
        }
        if c == ".." {
            cur.pop();
            continue;
        }
        let next = cur.join(&c);
        check(&next, &todo)?;
        if exists {
            match std::fs::symlink_metadata(&next) {
                Ok(md) if md.file_type().is_symlink() => {
                    hops += 1;
                    if hops > MAX_HOPS {
                        return Err(Walk::Loop);
                    }
                    let target = std::fs::read_link(&next).map_err(|_| Walk::Loop)?;
                    push_components(&mut todo, &target);
                    continue;
                }
                Ok(_) => {}
                Err(_) => exists = false,
            }
        }
        cur = next;
    }
    Ok(cur)
}

/// Pushes `p`'s components onto the stack `todo` so that the first is
/// popped first (`/` for the root, `..` kept, `.` dropped).
fn push_components(todo: &mut Vec<OsString>, p: &Path) {
    let mut parts: Vec<OsString> = Vec::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => parts.push("/".into()),
            Component::CurDir => {}
            Component::ParentDir => parts.push("..".into()),
            Component::Normal(n) => parts.push(n.to_os_string()),
        }
    }
    todo.extend(parts.into_iter().rev());
}

/// Whether `p` is absolute and [`locate`]s outside the Fence.
fn outside(p: &Path, fence: &Fence) -> bool {
    p.is_absolute() && locate(p, fence).is_ok()
}

/// `PATH` with every empty, relative or fenced entry removed (and entries
/// that lead through a symlink inside the Fence).
pub fn filter_path(path: &OsStr, fence: &Fence) -> OsString {
    let kept: Vec<&[u8]> = path
        .as_bytes()
        .split(|b| *b == b':')
        .filter(|e| outside(Path::new(OsStr::from_bytes(e)), fence))
        .collect();
    OsString::from(OsStr::from_bytes(&kept.join(&b':')))
}

/// Whether a `DBUS_SESSION_BUS_ADDRESS` only names `unix:` sockets whose
/// paths (and directories) lie outside the Fence: no `%`-escapes (they
/// could spell a path this check does not see), no other transport
/// (`unixexec:` runs a program, `autolaunch:` starts a bus).
fn dbus_outside(v: &OsStr, fence: &Fence) -> bool {
    let Some(v) = v.to_str() else { return false };
    !v.is_empty()
        && !v.contains('%')
        && v.split(';').filter(|a| !a.is_empty()).all(|a| {
            let Some(kv) = a.strip_prefix("unix:") else {
                return false;
            };
            kv.split(',').all(|kv| match kv.split_once('=') {
                Some(("path" | "dir" | "tmpdir", p)) => outside(Path::new(p), fence),
                Some(("abstract" | "guid" | "runtime", _)) => true,
                _ => false,
            })
        })
}

/// The environment of a `cmd:` child, from the starting client's `host`
/// environment: an allow-list (see the module head), each value checked.
pub fn child_env(host: &[(OsString, OsString)], fence: &Fence) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    let mut path = None;
    for (k, v) in host {
        let Some(name) = k.to_str() else { continue };
        let keep = if name == "PATH" {
            path = Some(v.clone());
            false
        } else if PLAIN_VARS.contains(&name) || is_lc_var(name) {
            !v.as_bytes().contains(&b'/')
        } else if PATH_VARS.contains(&name) {
            outside(Path::new(v), fence)
        } else if name == "WAYLAND_DISPLAY" {
            // A socket name under XDG_RUNTIME_DIR, or an absolute path.
            if v.as_bytes().first() == Some(&b'/') {
                outside(Path::new(v), fence)
            } else {
                !v.as_bytes().contains(&b'/')
            }
        } else if name == "DBUS_SESSION_BUS_ADDRESS" {
            dbus_outside(v, fence)
        } else {
            false
        };
        if keep && !out.iter().any(|(o, _)| o == k) {
            out.push((k.clone(), v.clone()));
        }
    }
    let path = path.unwrap_or_else(|| DEFAULT_PATH.into());
    out.push(("PATH".into(), filter_path(&path, fence)));
    out.sort();
    out
}

/// `LC_ALL`, `LC_CTYPE`, …
fn is_lc_var(name: &str) -> bool {
    name.strip_prefix("LC_")
        .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'))
}

/// How a `cmd:` source is run: the program's absolute path, the argv as
/// written (`argv[0]` as the user wrote it), the working directory and the
/// whole environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdPlan {
    pub program: PathBuf,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
}

/// Why a `cmd:` or `file:` source is refused before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Steer {
    /// `what` (the program, an argument, the file) leads to `at`, which
    /// lies in `place`: a config error.
    Inside { what: String, at: PathBuf, place: Place },
    /// The program is in no directory of the filtered `PATH`.
    NotFound { name: String, path: OsString },
    /// Too many symlinks on the way to `what`.
    Loop { what: String },
}

impl Steer {
    /// The config error for [`Steer::Inside`] (`None` for the others,
    /// which say the source gave no value).
    pub fn config_error(&self, file: &Path, line: usize, key: &str, source: &str) -> Option<ConfigError> {
        let Steer::Inside { what, at, place } = self else {
            return None;
        };
        let expected = if source.starts_with("file:") {
            "a file outside every workspace and volume (the sandbox could read the key there, or put its own)"
        } else {
            "a program and arguments outside every workspace and volume (a cmd: source runs on the host as you, \
             and the sandbox can write there)"
        };
        Some(ConfigError::Invalid {
            path: file.to_path_buf(),
            line,
            key: key.to_string(),
            expected: expected.to_string(),
            got: format!(
                "{source}, whose {what} leads to {}, inside {place}",
                crate::display::escape_path(at)
            ),
        })
    }
}

impl fmt::Display for Steer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Steer::Inside { what, at, place } => write!(
                f,
                "is refused: its {what} leads to {}, inside {place}",
                crate::display::escape_path(at)
            ),
            Steer::NotFound { name, path } => write!(
                f,
                "could not be started: no program {} in PATH {} (entries that are relative, empty, or inside a \
                 workspace or volume are left out; write an absolute path outside them)",
                crate::display::escape(name),
                crate::display::escape_bytes(path.as_bytes())
            ),
            Steer::Loop { what } => write!(
                f,
                "could not be started: too many symbolic links on the way to its {what}"
            ),
        }
    }
}

fn walk_err(what: String) -> impl Fn(Walk) -> Steer {
    move |w| match w {
        Walk::Inside { at, place } => Steer::Inside {
            what: what.clone(),
            at,
            place,
        },
        Walk::Loop => Steer::Loop { what: what.clone() },
    }
}

/// Checks a `file:` path: the canonical path to read, or why not.
pub fn plan_file(p: &Path, fence: &Fence) -> Result<PathBuf, Steer> {
    locate(p, fence).map_err(walk_err("file".into()))
}

/// Plans a `cmd:` source `argv` (non-empty, `argv[0]` a name or an
/// absolute path) for the client's environment `host`.
pub fn plan_cmd(argv: &[String], host: &[(OsString, OsString)], fence: &Fence) -> Result<CmdPlan, Steer> {
    let env = child_env(host, fence);
    let name = &argv[0];
    let shown = crate::display::escape(name);
    let program = if name.contains('/') && !name.starts_with('/') {
        // `./tool`, `bin/tool`: `Source` refuses these when it parses.
        return Err(Steer::NotFound {
            name: name.clone(),
            path: OsString::new(),
        });
    } else if name.starts_with('/') {
        locate(Path::new(name), fence).map_err(walk_err(format!("program {shown}")))?;
        PathBuf::from(name)
    } else {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let mut found = None;
        for dir in path.as_bytes().split(|b| *b == b':').filter(|d| !d.is_empty()) {
            let cand = Path::new(OsStr::from_bytes(dir)).join(name);
            // Checked before it is looked at: a PATH entry outside may hold
            // a symlink into a workspace.
            let real = locate(&cand, fence).map_err(walk_err(format!(
                "program {shown} (found as {})",
                crate::display::escape_path(&cand)
            )))?;
            let is_file = std::fs::metadata(&real).map(|m| m.is_file()).unwrap_or(false);
            if is_file && rustix::fs::access(&real, rustix::fs::Access::EXEC_OK).is_ok() {
                found = Some(cand);
                break;
            }
        }
        found.ok_or_else(|| Steer::NotFound {
            name: name.clone(),
            path,
        })?
    };
    let home = env.iter().find(|(k, _)| k == "HOME").map(|(_, v)| PathBuf::from(v));
    let cwd = home
        .and_then(|h| locate(&h, fence).ok())
        .filter(|h| h.is_dir())
        .unwrap_or_else(|| PathBuf::from("/"));
    // A script runs its `#!` interpreter: that is what runs, so it (and a
    // path its one argument names) must lie outside too, and so on down
    // a chain of scripts, as the kernel follows it.
    let mut script = program.clone();
    for _ in 0..MAX_SHEBANGS {
        let Some((interp, arg)) = shebang(&script) else { break };
        let what = format!("program {shown}'s interpreter {}", crate::display::escape_path(&interp));
        let real = locate(&interp, fence).map_err(walk_err(what.clone()))?;
        if let Some(a) = &arg {
            for p in arg_paths(a, &cwd) {
                locate(&p, fence).map_err(walk_err(what.clone()))?;
            }
        }
        script = real;
    }
    for a in &argv[1..] {
        for p in arg_paths(a, &cwd) {
            locate(&p, fence).map_err(walk_err(format!("argument {}", crate::display::escape(a))))?;
        }
    }
    Ok(CmdPlan {
        program,
        argv: argv.to_vec(),
        cwd,
        env,
    })
}

/// Interpreters of interpreters followed (Linux follows four).
const MAX_SHEBANGS: usize = 4;

/// The `#!` line of the file at `p`: the interpreter (an absolute path)
/// and its optional argument, as the kernel reads them (the rest of the
/// first line after the first blank is one argument); `None` for a file
/// that is no script or cannot be read.
fn shebang(p: &Path) -> Option<(PathBuf, Option<String>)> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(p).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n').unwrap_or(line.len())];
    let line = String::from_utf8_lossy(line);
    let line = line.trim_matches([' ', '\t', '\r']);
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (
            i,
            Some(a.trim_matches([' ', '\t']).to_string()).filter(|a| !a.is_empty()),
        ),
        None => (line, None),
    };
    (!interp.is_empty()).then(|| (PathBuf::from(interp), arg))
}

/// The paths an argument may name, as the child would read them: the
/// argument split at `=`, `:`, `,` and `;` (`--config=P`, a `PATH`-like
/// list `A:B`), and of each piece every tail that starts at a `/` (an
/// option glued to its path, `-I/p`, `--file/p`); a relative piece with a
/// `/` in it (or `.`, `..`) is taken from `cwd`, where the child runs. A
/// tail that names no fenced place costs a look and nothing more.
fn arg_paths(a: &str, cwd: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    // After a `=` a piece is a value (`PYTHONPATH=proj` given to `env`):
    // relative, it names a place under `cwd` even without a `/`.
    let value_at = a.find('=').map_or(a.len(), |i| i + 1);
    let mut at = 0;
    for piece in a.split(['=', ':', ',', ';']) {
        let value = at >= value_at;
        at += piece.len() + 1;
        if piece.is_empty() {
            continue;
        }
        for (i, _) in piece.match_indices('/') {
            out.push(PathBuf::from(&piece[i..]));
        }
        let relative = !piece.starts_with('/') && !piece.starts_with('-');
        if relative && (value || piece.contains('/') || piece == "." || piece == "..") {
            out.push(cwd.join(piece));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory with a workspace `ws`, a volume `vol` and an
    /// `outside` directory, all canonical.
    struct Scratch {
        root: PathBuf,
    }

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let root = std::env::temp_dir().join(format!("lzsrc-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for d in ["ws/bin", "vol", "outside/bin", "home"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            Scratch {
                root: std::fs::canonicalize(&root).unwrap(),
            }
        }
        fn p(&self, rel: &str) -> PathBuf {
            self.root.join(rel)
        }
        fn fence(&self) -> Fence {
            let mut f = Fence::default();
            f.add(&self.p("ws"), Reach::Workspace);
            f.add(
                &self.p("vol"),
                Reach::Volume {
                    profile: "c".into(),
                    guest: "/data".into(),
                },
            );
            f
        }
        fn exe(&self, rel: &str) -> PathBuf {
            use std::os::unix::fs::PermissionsExt;
            let p = self.p(rel);
            std::fs::write(&p, "#!/bin/sh\necho fake\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn os(s: &str) -> OsString {
        s.into()
    }

    #[test]
    fn containment_is_by_whole_components() {
        let mut f = Fence::default();
        f.add(Path::new("/nonexistent-lz/a/b"), Reach::Workspace);
        assert!(f.holding(Path::new("/nonexistent-lz/a/b")).is_some());
        assert!(f.holding(Path::new("/nonexistent-lz/a/b/c")).is_some());
        assert!(f.holding(Path::new("/nonexistent-lz/a/bc")).is_none());
        assert!(f.holding(Path::new("/nonexistent-lz/a")).is_none());
        // Relative paths name nothing.
        f.add(Path::new("rel"), Reach::Workspace);
        assert_eq!(f.places().len(), 1);
    }

    #[test]
    fn locate_follows_every_symlink_and_checks_each_hop() {
        let s = Scratch::new("locate");
        let f = s.fence();
        std::fs::write(s.p("ws/key"), "k").unwrap();
        std::fs::write(s.p("outside/key"), "k").unwrap();
        assert_eq!(locate(&s.p("outside/key"), &f), Ok(s.p("outside/key")));
        // Directly inside, by `..`, by a symlink to the file, by a symlink
        // to a directory, by a relative symlink.
        let inside = |p: PathBuf| match locate(&p, &f) {
            Err(Walk::Inside { place, .. }) => place,
            other => panic!("{}: {other:?}", p.display()),
        };
        assert_eq!(inside(s.p("ws/key")).what, Reach::Workspace);
        assert_eq!(inside(s.p("outside/../ws/key")).what, Reach::Workspace);
        std::os::unix::fs::symlink(s.p("ws/key"), s.p("outside/link")).unwrap();
        assert_eq!(inside(s.p("outside/link")).path, s.p("ws"));
        // The error shows where the path leads, not only the fenced root.
        assert_eq!(
            locate(&s.p("outside/link"), &f),
            Err(Walk::Inside {
                at: s.p("ws/key"),
                place: f.places()[0].clone()
            })
        );
        std::os::unix::fs::symlink("../vol", s.p("outside/voldir")).unwrap();
        assert!(matches!(inside(s.p("outside/voldir/x")).what, Reach::Volume { .. }));
        // A symlink inside the Fence that leads back out is still refused:
        // the sandbox could repoint it after the check.
        std::os::unix::fs::symlink(s.p("outside"), s.p("ws/out")).unwrap();
        assert_eq!(inside(s.p("ws/out/key")).what, Reach::Workspace);
        std::os::unix::fs::symlink(s.p("ws/out"), s.p("outside/via")).unwrap();
        assert_eq!(inside(s.p("outside/via/key")).what, Reach::Workspace);
        // A missing tail is appended as written.
        assert_eq!(locate(&s.p("outside/none/x"), &f), Ok(s.p("outside/none/x")));
        // A loop.
        std::os::unix::fs::symlink(s.p("outside/loop"), s.p("outside/loop")).unwrap();
        assert_eq!(locate(&s.p("outside/loop"), &f), Err(Walk::Loop));
        // A Fence entry given through a symlink is stored canonical.
        let mut g = Fence::default();
        g.add(&s.p("outside/voldir"), Reach::Workspace);
        assert_eq!(g.places()[0].path, s.p("vol"));
    }

    #[test]
    fn path_keeps_only_absolute_entries_outside() {
        let s = Scratch::new("path");
        let f = s.fence();
        std::os::unix::fs::symlink(s.p("ws/bin"), s.p("outside/wsbin")).unwrap();
        let path = format!(
            ":bin:.:{ws}/bin:{vol}:{wsl}:{out}/bin:/usr/bin:",
            ws = s.p("ws").display(),
            vol = s.p("vol").display(),
            wsl = s.p("outside/wsbin").display(),
            out = s.p("outside").display()
        );
        assert_eq!(
            filter_path(OsStr::new(&path), &f),
            OsString::from(format!("{}/bin:/usr/bin", s.p("outside").display()))
        );
    }

    #[test]
    fn environment_is_an_allow_list() {
        let s = Scratch::new("env");
        let f = s.fence();
        let ws = s.p("ws").display().to_string();
        let home = s.p("home").display().to_string();
        let host: Vec<(OsString, OsString)> = [
            ("HOME", home.as_str()),
            ("USER", "dev"),
            ("LOGNAME", "dev"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "en_US.UTF-8"),
            ("LC_CTYPE", "/x/evil"),
            ("PATH", &format!("{ws}/bin:/usr/bin")),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            ("SSH_AUTH_SOCK", &format!("{ws}/agent.sock")),
            ("XDG_CONFIG_HOME", &format!("{ws}/.config")),
            ("GNUPGHOME", "relative/gpg"),
            ("PYTHONPATH", &ws),
            ("PYTHONSTARTUP", &format!("{ws}/s.py")),
            ("NODE_PATH", &ws),
            ("NODE_OPTIONS", "--require /x.js"),
            ("LD_PRELOAD", "/x.so"),
            ("RUBYLIB", &ws),
            ("PERL5LIB", &ws),
            ("BASH_ENV", "/x"),
            ("GH_TOKEN", "x"),
            ("WAYLAND_DISPLAY", "wayland-0"),
        ]
        .iter()
        .map(|(k, v)| (os(k), os(v)))
        .collect();
        let env = child_env(&host, &f);
        let names: Vec<&str> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "DBUS_SESSION_BUS_ADDRESS",
                "HOME",
                "LANG",
                "LC_ALL",
                "LOGNAME",
                "PATH",
                "USER",
                "WAYLAND_DISPLAY",
                "XDG_RUNTIME_DIR"
            ]
        );
        assert_eq!(env.iter().find(|(k, _)| k == "PATH").unwrap().1, os("/usr/bin"));
        // No PATH at all: the default, filtered.
        let env = child_env(&[], &f);
        assert_eq!(env, [(os("PATH"), os(DEFAULT_PATH))]);
        // D-Bus: only unix sockets outside, no escapes.
        for (addr, ok) in [
            ("unix:path=/run/user/1000/bus", true),
            ("unix:abstract=/tmp/dbus-x,guid=abc", true),
            ("unix:path=/run/user/1000/bus;unix:abstract=/tmp/d", true),
            (&format!("unix:path={ws}/bus") as &str, false),
            ("unix:path=/run%2fx", false),
            ("unixexec:path=/bin/sh", false),
            ("autolaunch:", false),
            ("tcp:host=localhost,port=1", false),
            ("unix:path=relative", false),
            ("", false),
        ] {
            assert_eq!(dbus_outside(OsStr::new(addr), &f), ok, "{addr}");
        }
    }

    #[test]
    fn the_program_is_found_outside_and_runs_from_home() {
        let s = Scratch::new("plan");
        let f = s.fence();
        s.exe("ws/bin/lztool");
        s.exe("ws/lztool");
        let real = s.exe("outside/bin/lztool");
        let host = |path: String| {
            vec![
                (os("HOME"), s.p("home").into_os_string()),
                (os("PATH"), OsString::from(path)),
            ]
        };
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // The workspace's entries (absolute, relative, empty) are skipped.
        let h = host(format!(
            ":.:{}/bin:{}/bin",
            s.p("ws").display(),
            s.p("outside").display()
        ));
        let plan = plan_cmd(&argv(&["lztool", "get", "x"]), &h, &f).unwrap();
        assert_eq!(plan.program, real);
        assert_eq!(plan.argv, ["lztool", "get", "x"]);
        assert_eq!(plan.cwd, s.p("home"));
        // Absolute, outside.
        let plan = plan_cmd(&argv(&[real.to_str().unwrap()]), &h, &f).unwrap();
        assert_eq!(plan.program, real);
        // Absolute, inside: refused.
        let ws_tool = s.p("ws/bin/lztool");
        match plan_cmd(&argv(&[ws_tool.to_str().unwrap()]), &h, &f) {
            Err(Steer::Inside { place, .. }) => assert_eq!(place.what, Reach::Workspace),
            other => panic!("{other:?}"),
        }
        // Found through a symlink outside that leads into the workspace:
        // refused, not skipped.
        std::fs::remove_file(&real).unwrap();
        std::os::unix::fs::symlink(&ws_tool, &real).unwrap();
        assert!(matches!(
            plan_cmd(&argv(&["lztool"]), &h, &f),
            Err(Steer::Inside { .. })
        ));
        // Not found anywhere outside.
        std::fs::remove_file(&real).unwrap();
        let e = plan_cmd(&argv(&["lztool"]), &h, &f).unwrap_err();
        assert!(matches!(e, Steer::NotFound { .. }), "{e:?}");
        assert!(e.to_string().contains("no program lztool in PATH"), "{e}");
        // An argument that is a path inside (alone or after `=`).
        for a in [
            format!("{}/x.py", s.p("ws").display()),
            format!("--config={}/c", s.p("vol").display()),
        ] {
            assert!(
                matches!(plan_cmd(&argv(&["/bin/echo", &a]), &h, &f), Err(Steer::Inside { .. })),
                "{a}"
            );
        }
        assert!(plan_cmd(&argv(&["/bin/echo", "./x", "a=b", "-I."]), &h, &f).is_ok());
        std::os::unix::fs::symlink(s.p("ws"), s.p("home/wslink")).unwrap();
        // Attack: a path into the workspace the check did not read as one:
        // glued to its option, in a PATH-like list after an entry outside,
        // after a second `=`, or relative to the child's directory (home).
        for a in [
            format!("-I{}/lib", s.p("ws").display()),
            format!("PATH=/usr/bin:{}/bin", s.p("ws").display()),
            format!("--x=y={}/c", s.p("vol").display()),
            "../ws/x.py".to_string(),
            "--script=../ws/x.py".to_string(),
            // `env` given a module path relative to home (home/ws links
            // to the workspace).
            "PYTHONPATH=wslink".to_string(),
            "NODE_PATH=/usr/lib/node:wslink".to_string(),
        ] {
            assert!(
                matches!(plan_cmd(&argv(&["/bin/echo", &a]), &h, &f), Err(Steer::Inside { .. })),
                "{a}"
            );
        }
        // Attack: a script outside whose `#!` interpreter lies inside (a
        // project's virtualenv), directly or through an outside script.
        let venv = s.exe("ws/bin/python");
        let tool = s.p("outside/bin/keytool");
        std::fs::write(&tool, format!("#!{} -u\nprint(1)\n", venv.display())).unwrap();
        match plan_cmd(&argv(&[tool.to_str().unwrap()]), &h, &f) {
            Err(Steer::Inside { what, place, .. }) => {
                assert!(what.contains("interpreter"), "{what}");
                assert_eq!(place.what, Reach::Workspace);
            }
            other => panic!("{other:?}"),
        }
        let mid = s.p("outside/bin/mid");
        std::fs::write(&mid, format!("#!{}\n", venv.display())).unwrap();
        std::fs::write(&tool, format!("#!{}\n", mid.display())).unwrap();
        assert!(matches!(
            plan_cmd(&argv(&[tool.to_str().unwrap()]), &h, &f),
            Err(Steer::Inside { .. })
        ));
        // `#!/usr/bin/env python3` names no place: env looks in the
        // filtered PATH.
        std::fs::write(&tool, "#!/usr/bin/env python3\n").unwrap();
        assert!(plan_cmd(&argv(&[tool.to_str().unwrap()]), &h, &f).is_ok());
        std::fs::write(&tool, format!("#!/usr/bin/env {}\n", venv.display())).unwrap();
        assert!(plan_cmd(&argv(&[tool.to_str().unwrap()]), &h, &f).is_err());
        // What names nothing inside still runs.
        assert!(plan_cmd(
            &argv(&[
                "/bin/echo",
                "https://api.test/v1",
                "repos/o/r",
                "-u",
                "a:b",
                "../outside/x"
            ]),
            &h,
            &f
        )
        .is_ok());
    }

    #[test]
    fn home_inside_the_fence_runs_from_root() {
        let s = Scratch::new("home");
        let mut f = s.fence();
        f.add(
            &s.p("home"),
            Reach::Volume {
                profile: "c".into(),
                guest: "/h".into(),
            },
        );
        let h = vec![(os("HOME"), s.p("home").into_os_string()), (os("PATH"), os("/bin"))];
        let plan = plan_cmd(&["true".to_string()], &h, &f).unwrap();
        assert_eq!(plan.cwd, Path::new("/"));
        // No HOME: `/` too.
        let plan = plan_cmd(&["true".to_string()], &[(os("PATH"), os("/bin"))], &f).unwrap();
        assert_eq!(plan.cwd, Path::new("/"));
    }

    #[test]
    fn errors_name_file_line_key_and_place() {
        let s = Scratch::new("err");
        let f = s.fence();
        let e = plan_file(&s.p("ws/key"), &f).unwrap_err();
        let c = e
            .config_error(Path::new("/cfg.toml"), 7, "profiles.c.secrets.K.from", "file:/w/key")
            .unwrap()
            .to_string();
        assert!(
            c.starts_with("/cfg.toml:7: profiles.c.secrets.K.from: expected a file outside every workspace and volume")
                && c.contains(&format!("inside the workspace {}", s.p("ws").display())),
            "{c}"
        );
        assert!(!c.contains('\n'), "{c}");
        let e = plan_file(&s.p("vol/key"), &f).unwrap_err();
        let c = e
            .config_error(Path::new("/cfg.toml"), 7, "k", "file:/v/key")
            .unwrap()
            .to_string();
        assert!(c.contains("mounted at /data by profile \"c\""), "{c}");
        // A path the sandbox wrote is escaped.
        std::fs::write(s.p("ws/a\nb"), "k").unwrap();
        let c = plan_file(&s.p("ws/a\nb"), &f)
            .unwrap_err()
            .config_error(Path::new("/cfg.toml"), 1, "k", "file:x")
            .unwrap()
            .to_string();
        assert!(!c.contains('\n'), "{c}");
        assert!(Steer::Loop { what: "x".into() }
            .config_error(Path::new("/c"), 1, "k", "cmd:x")
            .is_none());
    }
}
