//! Trusted host configuration: `$XDG_CONFIG_HOME/lazaret/config.toml`
//! (fallback `$HOME/.config/lazaret/config.toml`).
//!
//! The file is optional; without it a built-in `default` profile exists.
//! Schema (see `docs/config.md`):
//!
//! ```toml
//! runtime_dir = "/path"                 # optional
//! [network]
//! default_deny = ["10.0.0.0/8"]         # optional; replaces the built-in list
//! [escalation]
//! enabled = true
//! [[escalation.auto_approve]]
//! argv = ["git", "--version"]
//! allow_trailing_args = false
//! [profiles.NAME]
//! image = "default"                     # | "oci:/PATH:TAG" | "docker-archive:/FILE" | "docker://REF"
//! command = ["/bin/bash", "-l"]
//! persist = ["/usr", "/etc", "/var", "/opt", "/root", "/home"]
//! volumes = ["/host:/guest:ro"]
//! env = { KEY = "value" }
//! isolate_ignored = true
//! ipv6 = false
//! caps = ["CHOWN", "SETUID"]            # optional; narrows DEFAULT_CAPS
//! git_identity = true
//! [profiles.NAME.network]
//! allow = ["198.18.0.0/15"]
//! deny = []
//! dns = ["198.18.0.2"]                  # optional; default slirp4netns's forwarder
//! mode = "slirp"                        # | "none"
//! ```
//!
//! Parsing uses the small strict TOML reader in [`toml`] below rather than
//! nanoserde's: nanoserde 0.1.37 drops the dots of dotted table headers
//! (`[profiles.dev]` becomes `profilesdev`), rejects keys containing digits
//! (`ipv6`), has no inline tables, files every table that follows a
//! `[[array]]` header into the array element, and silently accepts duplicate
//! keys. The reader here also records the line of every key, so semantic
//! errors point at the right line.

// Consumers of this module are being written concurrently.
#![allow(dead_code)]

pub mod passenv;
pub mod ports;

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use self::toml::{join_key, Item, Table, Val};

/// Name of the profile that always exists.
pub const DEFAULT_PROFILE: &str = "default";
/// Built-in `command`: a login shell.
pub const DEFAULT_COMMAND: &[&str] = &["/bin/bash", "-l"];
/// Built-in `persist` list.
pub const DEFAULT_PERSIST: &[&str] = &["/usr", "/etc", "/var", "/opt", "/root", "/home"];
/// Guest paths owned by lazaret; `persist` and volume targets may not be or lie under them.
pub const RESERVED_GUEST_PATHS: &[&str] = &["/workspace", "/.lazaret", "/proc", "/dev", "/sys"];
/// The sandbox's capabilities unless a profile narrows them (`caps`): the
/// container-default set minus what would reach past gVisor's own kernel.
/// Never CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN or CAP_SYS_PTRACE; see
/// docs/threat-model.md for why each one is here.
pub const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
    "CAP_MKNOD",
];

const ROOT_KEYS: &[&str] = &["runtime_dir", "network", "escalation", "images", "profiles"];
const IMAGE_KEYS: &[&str] = &["base", "packages"];
/// The built-in `dev` image recipe: what coding agents and their dev
/// servers need on top of the default image.
pub const DEV_PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "procps",
    "ncurses-base",
    "ca-certificates",
    "git",
    "curl",
    "less",
    "vim-tiny",
    "python3",
    "nodejs",
    "npm",
    "build-essential",
];
const NETWORK_KEYS: &[&str] = &["default_deny"];
const ESCALATION_KEYS: &[&str] = &["enabled", "auto_approve", "prompt_timeout_s"];
const RULE_KEYS: &[&str] = &["argv", "allow_trailing_args", "cwd", "harden_git"];
const PROFILE_KEYS: &[&str] = &[
    "image",
    "command",
    "persist",
    "volumes",
    "env",
    "pass_env",
    "ports",
    "isolate_ignored",
    "ipv6",
    "network",
    "caps",
    "git_identity",
    "limits",
    "user",
];
const PROFILE_LIMITS_KEYS: &[&str] = &["memory", "pids", "cpus", "disk", "image_layer"];
const PROFILE_NETWORK_KEYS: &[&str] = &["allow", "deny", "dns", "mode"];

// ---------------------------------------------------------------------------
// Public data model
// ---------------------------------------------------------------------------

/// The parsed, validated host configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file that was (or would have been) read.
    pub path: PathBuf,
    /// Whether that file existed.
    pub exists: bool,
    /// Override of the runtime directory.
    pub runtime_dir: Option<PathBuf>,
    /// Replacement for the built-in default deny list, when set.
    pub default_deny: Option<Vec<Prefix>>,
    pub escalation: Escalation,
    /// Always contains [`DEFAULT_PROFILE`].
    pub profiles: BTreeMap<String, Profile>,
    /// Profiles the file defines wrongly, with the first error of each: only
    /// that profile is unusable (`profile` returns its error).
    pub broken_profiles: BTreeMap<String, ConfigError>,
    /// `[images.NAME]` recipes; always contains the built-in `dev`.
    pub images: BTreeMap<String, Recipe>,
}

/// An image recipe: a debootstrap of a Debian suite with packages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    /// The Debian suite (`base = "debian:SUITE"`); `None`: the host's.
    pub suite: Option<String>,
    /// Package names (sorted, unique).
    pub packages: Vec<String>,
}

impl Recipe {
    /// Identity of the recipe: a rebuild of the same recipe is skipped, so
    /// the image's digest changes only when the recipe does.
    pub fn fingerprint(&self, host_suite: &str) -> String {
        let mut buf = Vec::new();
        put_field(&mut buf, b"lazaret-recipe-v1");
        put_field(&mut buf, self.suite.as_deref().unwrap_or(host_suite).as_bytes());
        for p in &self.packages {
            put_field(&mut buf, p.as_bytes());
        }
        crate::domain::hex(&openssl::sha::sha256(&buf)[..8])
    }
}

/// `[a-z0-9][a-z0-9_.-]{0,63}`, not `default` (the built-in image).
pub fn valid_image_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && name != "default"
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-'))
}

/// Host-command escalation settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// Off unless the file says `enabled = true`.
    pub enabled: bool,
    pub auto_approve: Vec<AutoRule>,
    /// How long an accepted request waits for a decision before it expires.
    pub prompt_timeout_s: u64,
}

impl Default for Escalation {
    fn default() -> Escalation {
        Escalation {
            enabled: false,
            auto_approve: Vec::new(),
            prompt_timeout_s: crate::escalation::DEFAULT_PROMPT_TIMEOUT_SECS,
        }
    }
}

/// A command line that is approved without asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoRule {
    /// Non-empty; `argv[0]` is non-empty.
    pub argv: Vec<String>,
    /// Whether extra arguments after `argv` are still approved.
    pub allow_trailing_args: bool,
    /// The only working directory the rule approves, relative to the
    /// workspace ("" = its root).
    pub cwd: String,
    /// Host Git runs with [`crate::escalation::GIT_HARDENING`] unless false.
    pub harden_git: bool,
}

/// One agent profile, with built-in defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub image: ImageSource,
    /// argv of the agent process; non-empty.
    pub command: Vec<String>,
    /// Absolute, normalized guest paths whose changes persist.
    pub persist: Vec<String>,
    pub volumes: Vec<Volume>,
    /// Sorted by key, keys unique.
    pub env: Vec<(String, String)>,
    /// `pass_env`: names of host environment variables each client passes
    /// to its own session (values are read by the client, never stored).
    /// Client-side only: not part of the fingerprint.
    pub pass_env: Vec<String>,
    /// `ports`: host port forwards into the Domain (loopback by default).
    pub ports: Vec<crate::config::ports::PortForward>,
    pub allow: Vec<Prefix>,
    pub deny: Vec<Prefix>,
    pub ipv6: bool,
    pub isolate_ignored: bool,
    /// `network.dns`: resolvers the sandbox uses (single IPv4 hosts); empty
    /// means slirp4netns's forwarder to the host's resolver.
    pub dns: Vec<Prefix>,
    /// `network.mode`: `true` for `"slirp"` (the default), `false` for
    /// `"none"` (loopback only, no helper).
    pub network: bool,
    /// Capabilities of sandboxed processes (`CAP_*`), a subset of
    /// [`DEFAULT_CAPS`] in that order.
    pub caps: Vec<String>,
    /// Whether the host's Git identity is visible inside (`/etc/gitconfig`).
    pub git_identity: bool,
    /// `[profiles.NAME.limits]`: what the user set; unset keys take the
    /// host-derived defaults (`cgroup::Effective`).
    pub limits: Limits,
    /// `user`: the unprivileged guest user (uid [`GUEST_USER_UID`], home
    /// `/home/NAME`) sessions run as; `None`: root.
    pub user: Option<String>,
}

/// The guest uid and gid of a profile's `user`.
pub const GUEST_USER_UID: u32 = 1000;

/// A guest user name: `[a-z_][a-z0-9_-]{0,31}`, not `root`.
pub fn valid_user_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 32
        && name != "root"
        && (b[0].is_ascii_lowercase() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-'))
}

/// The home of guest user `name`.
pub fn guest_home(name: &str) -> String {
    format!("/home/{name}")
}

/// Resource limits as configured; `None` means "the default".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Bytes.
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    /// Thousandths of a CPU (`cpus = 0.5` is 500).
    pub cpu_millis: Option<u64>,
    /// Bytes: the cap on persisted state (uppers + ignored), checked at start.
    pub disk: Option<u64>,
    /// Bytes: an image layer may expand to max(8x its compressed size,
    /// this); default 20 GiB.
    pub image_layer: Option<u64>,
}

impl Limits {
    /// Whether any of memory, pids or cpus was set explicitly (the ones a
    /// cgroup enforces).
    pub fn explicit(&self) -> bool {
        self.memory.is_some() || self.pids.is_some() || self.cpu_millis.is_some()
    }
}

/// Parses `"4GiB"`, `"256MiB"`, `"512M"`, `"1024"` (bytes); binary units.
pub fn parse_size(s: &str) -> Result<u64, String> {
    const EXPECTED: &str = "a size like \"4GiB\", \"256MiB\" or a number of bytes";
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| EXPECTED.to_string())?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => return Err(EXPECTED.to_string()),
    };
    n.checked_mul(mult)
        .filter(|v| *v > 0)
        .ok_or_else(|| EXPECTED.to_string())
}

/// Formats bytes the way limits are written (`4GiB`, `256MiB`, `1.5GiB`).
pub fn format_size(b: u64) -> String {
    const UNITS: &[(&str, u64)] = &[("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (u, m) in UNITS {
        if b >= *m {
            return if b.is_multiple_of(*m) {
                format!("{}{}", b / m, u)
            } else {
                format!("{:.1}{}", b as f64 / *m as f64, u)
            };
        }
    }
    format!("{b}B")
}

/// Parses a CPU count (`2`, `0.5`) into thousandths; 0.01..=1024.
pub fn parse_cpus(s: &str) -> Result<u64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| "a number of CPUs like 2 or 0.5".to_string())?;
    if !(0.01..=1024.0).contains(&v) {
        return Err("a number of CPUs between 0.01 and 1024".into());
    }
    Ok((v * 1000.0).round() as u64)
}

/// Where the root filesystem image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageSource {
    /// `"default"`: the built-in image.
    Default,
    /// `"oci:PATH:TAG"`: an OCI layout directory.
    Oci { path: PathBuf, tag: String },
    /// `"docker-archive:FILE"`: a `docker save` tarball.
    DockerArchive(PathBuf),
    /// `"docker://REF"`: a registry reference (stored without the `docker://` prefix).
    Docker(String),
    /// `"NAME"`: the image built from the recipe `[images.NAME]`.
    Named(String),
}

/// A bind mount from the host into the guest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Volume {
    /// Absolute host path.
    pub host: PathBuf,
    /// Absolute, normalized guest path outside the reserved paths.
    pub guest: String,
    pub read_only: bool,
}

/// An IP prefix (CIDR block) with all host bits zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

/// Everything that can be wrong with the configuration. `Display` names the
/// file, the 1-based line when known, the key, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file exists but cannot be read (or is not UTF-8).
    Read { path: PathBuf, message: String },
    /// The file is not valid TOML (or uses TOML this reader does not support).
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A key the schema does not define.
    UnknownKey {
        path: PathBuf,
        line: usize,
        key: String,
        expected: Vec<&'static str>,
    },
    /// A value of the wrong type or with invalid content.
    Invalid {
        path: PathBuf,
        line: usize,
        key: String,
        expected: String,
        got: String,
    },
    /// The same entry appears twice in one list.
    Duplicate {
        path: PathBuf,
        line: usize,
        first_line: usize,
        key: String,
        value: String,
    },
    /// Two different prefixes in one list overlap.
    Overlap {
        path: PathBuf,
        line: usize,
        first_line: usize,
        key: String,
        first: String,
        second: String,
    },
    /// A profile name that the file does not define.
    UnknownProfile {
        path: PathBuf,
        name: String,
        known: Vec<String>,
    },
    /// The config file is inside the workspace.
    InsideWorkspace { path: PathBuf, workspace: PathBuf },
    /// The config file is under a volume's host path.
    InsideVolume {
        path: PathBuf,
        host: PathBuf,
        guest: String,
    },
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

/// The config file location: `$XDG_CONFIG_HOME/lazaret/config.toml` when
/// `XDG_CONFIG_HOME` is an absolute path, else `$HOME/.config/lazaret/config.toml`
/// (with `/` standing in for an unset `HOME`).
pub fn config_path() -> PathBuf {
    config_path_from(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// [`config_path`] with the environment passed in.
pub fn config_path_from(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> PathBuf {
    if let Some(xdg) = xdg_config_home {
        let xdg = Path::new(xdg);
        // The XDG spec says relative values are invalid and must be ignored.
        if xdg.is_absolute() {
            return xdg.join("lazaret").join("config.toml");
        }
    }
    let home = match home {
        Some(h) if Path::new(h).is_absolute() => PathBuf::from(h),
        _ => PathBuf::from("/"),
    };
    home.join(".config").join("lazaret").join("config.toml")
}

/// Reads and validates `path`; an absent file yields the built-in config
/// (`exists == false`).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => parse(path, &text),
            Err(_) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                message: "expected UTF-8 text".into(),
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::builtin(path)),
        Err(e) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// Parses and validates `text` as the contents of `path` (used only in messages).
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let root = toml::parse(text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        line: e.line,
        message: e.message,
    })?;
    Schema { file: path }.config(&root)
}

/// Refuses a config file that the sandbox could modify, i.e. one that
/// (after resolving symlinks of the existing part of each path) lies inside
/// `workspace` or under the host path of any volume.
pub fn check_location(config_path: &Path, workspace: &Path, volumes: &[Volume]) -> Result<(), ConfigError> {
    let config = resolve(config_path);
    if config.starts_with(resolve(workspace)) {
        return Err(ConfigError::InsideWorkspace {
            path: config_path.to_path_buf(),
            workspace: workspace.to_path_buf(),
        });
    }
    for v in volumes {
        if config.starts_with(resolve(&v.host)) {
            return Err(ConfigError::InsideVolume {
                path: config_path.to_path_buf(),
                host: v.host.clone(),
                guest: v.guest.clone(),
            });
        }
    }
    Ok(())
}

/// Makes `p` absolute, canonicalizes its longest existing ancestor and
/// appends the rest lexically (so paths that do not exist yet still compare).
fn resolve(p: &Path) -> PathBuf {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    };
    let comps: Vec<Component> = abs.components().collect();
    for k in (1..=comps.len()).rev() {
        let head: PathBuf = comps[..k].iter().collect();
        if let Ok(mut out) = head.canonicalize() {
            for c in &comps[k..] {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::Normal(n) => out.push(n),
                    _ => {}
                }
            }
            return out;
        }
    }
    abs
}

// ---------------------------------------------------------------------------
// Behaviour of the data model
// ---------------------------------------------------------------------------

impl Config {
    /// The configuration used when no file exists.
    pub fn builtin(path: &Path) -> Config {
        let mut profiles = BTreeMap::new();
        profiles.insert(DEFAULT_PROFILE.to_string(), Profile::builtin(DEFAULT_PROFILE));
        let mut images = BTreeMap::new();
        let mut dev: Vec<String> = DEV_PACKAGES.iter().map(|s| s.to_string()).collect();
        dev.sort();
        images.insert(
            "dev".to_string(),
            Recipe {
                suite: None,
                packages: dev,
            },
        );
        Config {
            path: path.to_path_buf(),
            exists: false,
            runtime_dir: None,
            default_deny: None,
            escalation: Escalation::default(),
            profiles,
            images,
            broken_profiles: BTreeMap::new(),
        }
    }

    /// One line per broken profile other than `except`, each naming the file
    /// and line of its error.
    pub fn warnings(&self, except: Option<&str>) -> Vec<String> {
        self.broken_profiles
            .iter()
            .filter(|(n, _)| Some(n.as_str()) != except)
            .map(|(n, e)| format!("warning: profile {:?} is unusable until fixed: {e}", n))
            .collect()
    }

    /// Looks up a profile; unknown names are an error naming the file and the known profiles.
    pub fn profile(&self, name: &str) -> Result<&Profile, ConfigError> {
        if let Some(e) = self.broken_profiles.get(name) {
            return Err(e.clone());
        }
        self.profiles.get(name).ok_or_else(|| ConfigError::UnknownProfile {
            path: self.path.clone(),
            name: name.to_string(),
            known: self.profiles.keys().cloned().collect(),
        })
    }
}

impl Profile {
    /// A profile with every field at its built-in default.
    pub fn builtin(name: &str) -> Profile {
        Profile {
            name: name.to_string(),
            image: ImageSource::Default,
            command: DEFAULT_COMMAND.iter().map(|s| s.to_string()).collect(),
            persist: DEFAULT_PERSIST.iter().map(|s| s.to_string()).collect(),
            volumes: Vec::new(),
            env: Vec::new(),
            pass_env: Vec::new(),
            ports: Vec::new(),
            allow: Vec::new(),
            deny: Vec::new(),
            ipv6: false,
            isolate_ignored: true,
            dns: Vec::new(),
            network: true,
            caps: DEFAULT_CAPS.iter().map(|s| s.to_string()).collect(),
            git_identity: true,
            limits: Limits::default(),
            user: None,
        }
    }

    /// First 16 lowercase hex chars of the SHA-256 of a canonical serialization
    /// of every field except `name`. Order-insensitive lists (`persist`,
    /// `allow`, `deny`) are sorted first; `volumes` keep their (mount) order.
    pub fn fingerprint(&self) -> String {
        let mut buf = Vec::new();
        let mut put = |tag: &str, items: &[&str]| {
            put_field(&mut buf, tag.as_bytes());
            put_field(&mut buf, items.len().to_string().as_bytes());
            for s in items {
                put_field(&mut buf, s.as_bytes());
            }
        };
        put("lazaret-profile", &["1"]);
        put("image", &[&self.image.to_string()]);
        put("command", &self.command.iter().map(String::as_str).collect::<Vec<_>>());
        let mut persist: Vec<&str> = self.persist.iter().map(String::as_str).collect();
        persist.sort_unstable();
        put("persist", &persist);
        let volumes: Vec<String> = self
            .volumes
            .iter()
            .map(|v| {
                let mut s = Vec::new();
                put_field(&mut s, v.host.to_string_lossy().as_bytes());
                put_field(&mut s, v.guest.as_bytes());
                put_field(&mut s, if v.read_only { b"ro" } else { b"rw" });
                String::from_utf8_lossy(&s).into_owned()
            })
            .collect();
        put("volumes", &volumes.iter().map(String::as_str).collect::<Vec<_>>());
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{}={}", k, v)).collect();
        put("env", &env.iter().map(String::as_str).collect::<Vec<_>>());
        for (tag, list) in [("allow", &self.allow), ("deny", &self.deny)] {
            let mut v: Vec<Prefix> = list.clone();
            v.sort_unstable();
            let v: Vec<String> = v.iter().map(Prefix::to_string).collect();
            put(tag, &v.iter().map(String::as_str).collect::<Vec<_>>());
        }
        put("ipv6", &[if self.ipv6 { "true" } else { "false" }]);
        put(
            "isolate_ignored",
            &[if self.isolate_ignored { "true" } else { "false" }],
        );
        // Added after the pin below: only non-default values are hashed, so
        // existing fingerprints stay what they were.
        if !self.dns.is_empty() {
            let dns: Vec<String> = self.dns.iter().map(Prefix::to_string).collect();
            put("dns", &dns.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if !self.network {
            put("network", &["none"]);
        }
        if !self.ports.is_empty() {
            let ports: Vec<String> = self.ports.iter().map(|p| p.to_string()).collect();
            put("ports", &ports.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if self.caps.iter().map(String::as_str).ne(DEFAULT_CAPS.iter().copied()) {
            put("caps", &self.caps.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if !self.git_identity {
            put("git_identity", &["false"]);
        }
        let l = &self.limits;
        for (tag, v) in [
            ("memory", l.memory),
            ("pids", l.pids),
            ("cpus", l.cpu_millis),
            ("disk", l.disk),
            ("image_layer", l.image_layer),
        ] {
            if let Some(v) = v {
                put(&format!("limits.{tag}"), &[&v.to_string()]);
            }
        }
        if let Some(u) = &self.user {
            put("user", &[u]);
        }
        let digest = openssl::sha::sha256(&buf);
        digest[..8].iter().map(|b| format!("{:02x}", b)).collect()
    }
}

/// The fingerprint a session's configuration must match to join a running
/// Domain: the profile's, plus everything of `[escalation]` and the global
/// `[network]` section, which the coordinator also applies.
pub fn join_fingerprint(cfg: &Config, profile: &Profile) -> String {
    let mut buf = Vec::new();
    put_field(&mut buf, profile.fingerprint().as_bytes());
    let e = &cfg.escalation;
    put_field(&mut buf, if e.enabled { b"escalation-on" } else { b"escalation-off" });
    put_field(&mut buf, e.prompt_timeout_s.to_string().as_bytes());
    for r in &e.auto_approve {
        put_field(&mut buf, b"rule");
        put_field(&mut buf, r.argv.len().to_string().as_bytes());
        for a in &r.argv {
            put_field(&mut buf, a.as_bytes());
        }
        put_field(&mut buf, &[r.allow_trailing_args as u8, r.harden_git as u8]);
        put_field(&mut buf, r.cwd.as_bytes());
    }
    match &cfg.default_deny {
        None => put_field(&mut buf, b"default-deny-builtin"),
        Some(list) => {
            put_field(&mut buf, b"default-deny");
            for p in list {
                put_field(&mut buf, p.to_string().as_bytes());
            }
        }
    }
    let digest = openssl::sha::sha256(&buf);
    digest[..8].iter().map(|b| format!("{:02x}", b)).collect()
}

/// Appends `len:bytes,` so concatenations are unambiguous.
fn put_field(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(bytes.len().to_string().as_bytes());
    buf.push(b':');
    buf.extend_from_slice(bytes);
    buf.push(b',');
}

impl FromStr for ImageSource {
    /// A phrase describing what was expected.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        const FORMS: &str =
            "one of \"default\", an [images.NAME] recipe name, \"oci:/ABS/PATH:TAG\", \"docker-archive:/ABS/FILE\" or \"docker://REF\"";
        if s == "default" {
            return Ok(ImageSource::Default);
        }
        if let Some(rest) = s.strip_prefix("oci:") {
            return match rest.rsplit_once(':') {
                Some((path, tag)) if path.starts_with('/') && !tag.is_empty() && !tag.contains('/') => {
                    Ok(ImageSource::Oci {
                        path: PathBuf::from(path),
                        tag: tag.to_string(),
                    })
                }
                _ => Err("\"oci:PATH:TAG\" with an absolute PATH and a non-empty TAG".into()),
            };
        }
        if let Some(rest) = s.strip_prefix("docker-archive:") {
            return if rest.starts_with('/') {
                Ok(ImageSource::DockerArchive(PathBuf::from(rest)))
            } else {
                Err("\"docker-archive:FILE\" with an absolute FILE".into())
            };
        }
        if let Some(rest) = s.strip_prefix("docker://") {
            return if !rest.is_empty() && !rest.chars().any(char::is_whitespace) {
                Ok(ImageSource::Docker(rest.to_string()))
            } else {
                Err("\"docker://REF\" with a non-empty REF without spaces".into())
            };
        }
        if valid_image_name(s) {
            return Ok(ImageSource::Named(s.to_string()));
        }
        Err(FORMS.into())
    }
}

impl fmt::Display for ImageSource {
    /// The config-file spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageSource::Default => f.write_str("default"),
            ImageSource::Oci { path, tag } => write!(f, "oci:{}:{}", path.display(), tag),
            ImageSource::DockerArchive(p) => write!(f, "docker-archive:{}", p.display()),
            ImageSource::Docker(r) => write!(f, "docker://{}", r),
            ImageSource::Named(n) => f.write_str(n),
        }
    }
}

impl FromStr for Volume {
    /// A phrase describing what was expected.
    type Err = String;

    /// Parses `HOSTPATH:GUESTPATH[:ro|:rw]` (read-write by default).
    fn from_str(s: &str) -> Result<Self, String> {
        const FORM: &str = "\"HOSTPATH:GUESTPATH[:ro|:rw]\" with absolute paths";
        let parts: Vec<&str> = s.split(':').collect();
        let (host, guest, read_only) = match parts.as_slice() {
            [h, g] => (*h, *g, false),
            [h, g, "ro"] => (*h, *g, true),
            [h, g, "rw"] => (*h, *g, false),
            _ => return Err(FORM.into()),
        };
        if !host.starts_with('/') {
            return Err(FORM.into());
        }
        if let Some(problem) = guest_path_problem(guest) {
            return Err(format!(
                "\"HOSTPATH:GUESTPATH[:ro|:rw]\" with GUESTPATH {}",
                problem.singular()
            ));
        }
        Ok(Volume {
            host: PathBuf::from(host),
            guest: guest.to_string(),
            read_only,
        })
    }
}

impl fmt::Display for Volume {
    /// The config-file spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.read_only { "ro" } else { "rw" };
        write!(f, "{}:{}:{}", self.host.display(), self.guest, mode)
    }
}

/// Why a guest path is unacceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathProblem {
    Relative,
    NotNormalized,
    Root,
    Reserved,
}

impl PathProblem {
    fn plural(self) -> &'static str {
        match self {
            PathProblem::Relative => "absolute paths",
            PathProblem::NotNormalized => "normalized paths (no \".\", \"..\", \"//\" or trailing \"/\")",
            PathProblem::Root => "paths other than \"/\"",
            PathProblem::Reserved => "paths outside /workspace, /.lazaret, /proc, /dev and /sys",
        }
    }

    fn singular(self) -> &'static str {
        match self {
            PathProblem::Relative => "an absolute path",
            PathProblem::NotNormalized => "a normalized path (no \".\", \"..\", \"//\" or trailing \"/\")",
            PathProblem::Root => "a path other than \"/\"",
            PathProblem::Reserved => "a path outside /workspace, /.lazaret, /proc, /dev and /sys",
        }
    }
}

/// Checks a guest path used by `persist` or as a volume target.
fn guest_path_problem(p: &str) -> Option<PathProblem> {
    if !p.starts_with('/') {
        return Some(PathProblem::Relative);
    }
    if p == "/" {
        return Some(PathProblem::Root);
    }
    if p.ends_with('/') || p[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Some(PathProblem::NotNormalized);
    }
    let reserved = RESERVED_GUEST_PATHS
        .iter()
        .any(|r| p == *r || (p.starts_with(r) && p.as_bytes().get(r.len()) == Some(&b'/')));
    reserved.then_some(PathProblem::Reserved)
}

impl Prefix {
    /// A prefix, or `None` when `len` is out of range or host bits are set.
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        let p = Prefix { addr, len };
        (len <= p.max_len() && p.network() == p).then_some(p)
    }

    /// 32 for IPv4, 128 for IPv6.
    pub fn max_len(&self) -> u8 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// This prefix with host bits cleared.
    pub fn network(&self) -> Prefix {
        let len = self.len.min(self.max_len());
        let bits = self.bits() & mask(len, self.max_len());
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
        };
        Prefix { addr, len }
    }

    /// Whether every address of `other` is inside `self` (same family only;
    /// IPv4-mapped IPv6 addresses are not matched against IPv4 prefixes).
    pub fn contains(&self, other: &Prefix) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.len <= other.len
            && (self.bits() ^ other.bits()) & mask(self.len, self.max_len()) == 0
    }

    /// Whether the two prefixes share at least one address.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.contains(other) || other.contains(self)
    }

    fn bits(&self) -> u128 {
        match self.addr {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }
}

/// The top `len` of `max` bits set.
fn mask(len: u8, max: u8) -> u128 {
    if len == 0 {
        return 0;
    }
    let full: u128 = if max >= 128 { !0 } else { (1u128 << max) - 1 };
    (!0u128 << (max - len.min(max))) & full
}

impl FromStr for Prefix {
    /// A phrase describing what was expected.
    type Err = String;

    /// Parses `ADDR/LEN`; a bare address means a single host (`/32`, `/128`).
    fn from_str(s: &str) -> Result<Self, String> {
        const FORM: &str = "a CIDR prefix like \"10.0.0.0/8\" or \"fd00::/8\"";
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| FORM.to_string())?;
        let max = if addr.is_ipv4() { 32u8 } else { 128u8 };
        let len = match len {
            None => max,
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(FORM.into());
                }
                match l.parse::<u8>() {
                    Ok(n) if n <= max => n,
                    _ => return Err(format!("a prefix length between 0 and {}", max)),
                }
            }
        };
        let p = Prefix { addr, len };
        let net = p.network();
        if net != p {
            return Err(format!("a prefix whose host bits are zero, such as \"{}\"", net));
        }
        Ok(p)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, message } => {
                write!(f, "{}: cannot read config file: {}", path.display(), message)
            }
            ConfigError::Syntax { path, line, message } => {
                write!(f, "{}:{}: invalid TOML: {}", path.display(), line, message)
            }
            ConfigError::UnknownKey { path, line, key, expected } => write!(
                f,
                "{}:{}: {}: unknown key; expected one of: {}",
                path.display(),
                line,
                key,
                expected.join(", ")
            ),
            ConfigError::Invalid { path, line, key, expected, got } => {
                write!(f, "{}:{}: {}: expected {}, got {}", path.display(), line, key, expected, got)
            }
            ConfigError::Duplicate { path, line, first_line, key, value } => write!(
                f,
                "{}:{}: {}: {} is listed twice (first on line {}); expected each entry once",
                path.display(),
                line,
                key,
                value,
                first_line
            ),
            ConfigError::Overlap { path, line, first_line, key, first, second } => write!(
                f,
                "{}:{}: {}: {} (line {}) and {} overlap; expected non-overlapping prefixes in one list, keep only one of them",
                path.display(),
                line,
                key,
                first,
                first_line,
                second
            ),
            ConfigError::UnknownProfile { path, name, known } => write!(
                f,
                "{}: unknown profile {:?}; expected one of: {} (define it as [profiles.{}])",
                path.display(),
                name,
                known.join(", "),
                join_key("", name)
            ),
            ConfigError::InsideWorkspace { path, workspace } => write!(
                f,
                "{}: the config file lies inside the workspace {}, where the sandbox could change it; \
                 expected it outside the workspace (move it, or set XDG_CONFIG_HOME to a directory outside the workspace)",
                path.display(),
                workspace.display()
            ),
            ConfigError::InsideVolume { path, host, guest } => write!(
                f,
                "{}: the config file lies under volume host path {} (mounted at {}), where the sandbox could reach it; \
                 expected it outside every volume (narrow or remove the volume, or move the config file)",
                path.display(),
                host.display(),
                guest
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

// ---------------------------------------------------------------------------
// Schema: TOML tree -> Config
// ---------------------------------------------------------------------------

/// Validates a parsed TOML tree against the schema; holds the file for messages.
struct Schema<'a> {
    file: &'a Path,
}

/// Describes a value for "got ..." in messages.
fn got(val: &Val) -> String {
    match val {
        Val::Str(s) => quote(s),
        Val::Array(items) if items.is_empty() => "an empty array".into(),
        other => other.kind().into(),
    }
}

/// Debug-quotes `s`, shortened to keep messages readable.
fn quote(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() > MAX {
        let short: String = s.chars().take(MAX).collect();
        format!("{:?}...", short)
    } else {
        format!("{:?}", s)
    }
}

impl Schema<'_> {
    fn invalid(&self, line: usize, key: &str, expected: impl Into<String>, got: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line,
            key: key.to_string(),
            expected: expected.into(),
            got: got.into(),
        }
    }

    /// Rejects keys of `table` outside `allowed`.
    fn known_keys(&self, table: &Table, key: &str, allowed: &'static [&'static str]) -> Result<(), ConfigError> {
        for (k, item) in &table.entries {
            if !allowed.contains(&k.as_str()) {
                return Err(ConfigError::UnknownKey {
                    path: self.file.to_path_buf(),
                    line: item.line,
                    key: join_key(key, k),
                    expected: allowed.to_vec(),
                });
            }
        }
        Ok(())
    }

    fn table<'t>(&self, item: &'t Item, key: &str) -> Result<&'t Table, ConfigError> {
        match &item.val {
            Val::Table(t) => Ok(t),
            other => Err(self.invalid(item.line, key, "a table", got(other))),
        }
    }

    fn boolean(&self, item: &Item, key: &str) -> Result<bool, ConfigError> {
        match &item.val {
            Val::Bool(b) => Ok(*b),
            other => Err(self.invalid(item.line, key, "a boolean (true or false)", got(other))),
        }
    }

    /// A string; NUL characters are never valid in paths, argv or env.
    fn string<'t>(&self, item: &'t Item, key: &str, expected: &str) -> Result<&'t str, ConfigError> {
        match &item.val {
            Val::Str(s) if s.contains('\0') => {
                Err(self.invalid(item.line, key, "a string without NUL characters", quote(s)))
            }
            Val::Str(s) => Ok(s),
            other => Err(self.invalid(item.line, key, expected, got(other))),
        }
    }

    /// An array of strings, each with its line.
    fn strings<'t>(&self, item: &'t Item, key: &str, expected: &str) -> Result<Vec<(usize, &'t str)>, ConfigError> {
        let items = match &item.val {
            Val::Array(items) => items,
            other => return Err(self.invalid(item.line, key, expected, got(other))),
        };
        items
            .iter()
            .map(|i| Ok((i.line, self.string(i, key, expected)?)))
            .collect()
    }

    fn absolute_path(&self, item: &Item, key: &str) -> Result<PathBuf, ConfigError> {
        let s = self.string(item, key, "an absolute path")?;
        if !s.starts_with('/') {
            return Err(self.invalid(item.line, key, "an absolute path", quote(s)));
        }
        Ok(PathBuf::from(s))
    }

    /// A list of prefixes with no duplicates and no overlaps.
    fn prefixes(&self, item: &Item, key: &str) -> Result<Vec<Prefix>, ConfigError> {
        const EXPECTED: &str = "an array of CIDR prefixes like \"10.0.0.0/8\" or \"fd00::/8\"";
        let mut out: Vec<(usize, Prefix)> = Vec::new();
        for (line, s) in self.strings(item, key, EXPECTED)? {
            let p: Prefix = s.parse().map_err(|e: String| self.invalid(line, key, e, quote(s)))?;
            for (first_line, q) in &out {
                if *q == p {
                    return Err(ConfigError::Duplicate {
                        path: self.file.to_path_buf(),
                        line,
                        first_line: *first_line,
                        key: key.to_string(),
                        value: quote(&p.to_string()),
                    });
                }
                if q.overlaps(&p) {
                    return Err(ConfigError::Overlap {
                        path: self.file.to_path_buf(),
                        line,
                        first_line: *first_line,
                        key: key.to_string(),
                        first: quote(&q.to_string()),
                        second: quote(&p.to_string()),
                    });
                }
            }
            out.push((line, p));
        }
        Ok(out.into_iter().map(|(_, p)| p).collect())
    }

    fn config(&self, root: &Table) -> Result<Config, ConfigError> {
        self.known_keys(root, "", ROOT_KEYS)?;
        let mut cfg = Config::builtin(self.file);
        cfg.exists = true;
        if let Some(item) = root.get("runtime_dir") {
            cfg.runtime_dir = Some(self.absolute_path(item, "runtime_dir")?);
        }
        if let Some(item) = root.get("network") {
            let t = self.table(item, "network")?;
            self.known_keys(t, "network", NETWORK_KEYS)?;
            if let Some(dd) = t.get("default_deny") {
                cfg.default_deny = Some(self.prefixes(dd, "network.default_deny")?);
            }
        }
        if let Some(item) = root.get("escalation") {
            cfg.escalation = self.escalation(item)?;
        }
        if let Some(item) = root.get("images") {
            let t = self.table(item, "images")?;
            for (name, iitem) in &t.entries {
                let key = join_key("images", name);
                if !valid_image_name(name) {
                    return Err(self.invalid(
                        iitem.line,
                        &key,
                        "an image name matching [a-z0-9][a-z0-9_.-]{0,63}, not \"default\"",
                        quote(name),
                    ));
                }
                let recipe = self.recipe(iitem, &key)?;
                cfg.images.insert(name.clone(), recipe);
            }
        }
        if let Some(item) = root.get("profiles") {
            let t = self.table(item, "profiles")?;
            for (name, pitem) in &t.entries {
                let key = join_key("profiles", name);
                if !valid_profile_name(name) {
                    return Err(self.invalid(
                        pitem.line,
                        &key,
                        "a profile name matching [A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
                        quote(name),
                    ));
                }
                // A wrong profile breaks only itself: the others, and the
                // commands that need no profile, keep working.
                let profile = self.profile(name, pitem, &key).and_then(|profile| {
                    if let ImageSource::Named(n) = &profile.image {
                        if !cfg.images.contains_key(n) {
                            let line = self.table(pitem, &key)?.get("image").map_or(pitem.line, |i| i.line);
                            return Err(self.invalid(
                                line,
                                &join_key(&key, "image"),
                                format!(
                                    "an image recipe name defined as [images.NAME] (known: {})",
                                    cfg.images.keys().cloned().collect::<Vec<_>>().join(", ")
                                ),
                                quote(n),
                            ));
                        }
                    }
                    Ok(profile)
                });
                match profile {
                    Ok(profile) => {
                        cfg.profiles.insert(name.clone(), profile);
                    }
                    Err(e) => {
                        cfg.profiles.remove(name);
                        cfg.broken_profiles.insert(name.clone(), e);
                    }
                }
            }
        }
        Ok(cfg)
    }

    fn escalation(&self, item: &Item) -> Result<Escalation, ConfigError> {
        let t = self.table(item, "escalation")?;
        self.known_keys(t, "escalation", ESCALATION_KEYS)?;
        let mut esc = Escalation::default();
        if let Some(i) = t.get("enabled") {
            esc.enabled = self.boolean(i, "escalation.enabled")?;
        }
        if let Some(i) = t.get("prompt_timeout_s") {
            let max = crate::escalation::MAX_PROMPT_TIMEOUT_SECS;
            let expected = format!("a whole number of seconds in 1..={max}");
            esc.prompt_timeout_s = match &i.val {
                Val::Int(n) if (1..=max as i64).contains(n) => *n as u64,
                Val::Int(n) => {
                    return Err(self.invalid(i.line, "escalation.prompt_timeout_s", expected, n.to_string()))
                }
                other => return Err(self.invalid(i.line, "escalation.prompt_timeout_s", expected, got(other))),
            };
        }
        if let Some(i) = t.get("auto_approve") {
            const EXPECTED: &str = "an array of tables ([[escalation.auto_approve]])";
            let rules = match &i.val {
                Val::TableArray(rules) | Val::Array(rules) => rules,
                other => return Err(self.invalid(i.line, "escalation.auto_approve", EXPECTED, got(other))),
            };
            for (n, rule) in rules.iter().enumerate() {
                let key = format!("escalation.auto_approve[{}]", n);
                let rt = match &rule.val {
                    Val::Table(rt) => rt,
                    other => return Err(self.invalid(rule.line, &key, EXPECTED, got(other))),
                };
                esc.auto_approve.push(self.rule(rt, rule.line, &key)?);
            }
        }
        Ok(esc)
    }

    fn rule(&self, t: &Table, line: usize, key: &str) -> Result<AutoRule, ConfigError> {
        const EXPECTED: &str = "a non-empty array of strings";
        self.known_keys(t, key, RULE_KEYS)?;
        let argv_key = format!("{}.argv", key);
        let argv_item = t
            .get("argv")
            .ok_or_else(|| self.invalid(line, &argv_key, EXPECTED, "no value"))?;
        let argv = self.strings(argv_item, &argv_key, EXPECTED)?;
        match argv.first() {
            None => return Err(self.invalid(argv_item.line, &argv_key, EXPECTED, "an empty array")),
            Some((l, "")) => {
                return Err(self.invalid(*l, &argv_key, "a non-empty program name as the first element", "\"\""))
            }
            _ => {}
        }
        // A command that needs a shell is never auto-approved.
        if let Some(runner) = crate::escalation::command_runner(argv[0].1) {
            return Err(self.invalid(
                argv[0].0,
                &argv_key,
                format!(
                    "a program that does not run a command string ({runner:?} is a shell, interpreter or \
                     command wrapper; such commands must be approved by the developer each time)"
                ),
                quote(argv[0].1),
            ));
        }
        let allow_trailing_args = match t.get("allow_trailing_args") {
            Some(i) => self.boolean(i, &format!("{}.allow_trailing_args", key))?,
            None => false,
        };
        let cwd = match t.get("cwd") {
            Some(i) => {
                let ck = format!("{}.cwd", key);
                const EXPECTED: &str = "a directory relative to the workspace, without \"..\"";
                let s = self.string(i, &ck, EXPECTED)?;
                let rel = Path::new(s);
                if !rel
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                {
                    return Err(self.invalid(i.line, &ck, EXPECTED, quote(s)));
                }
                rel.components()
                    .filter_map(|c| match c {
                        Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("/")
            }
            None => String::new(),
        };
        let harden_git = match t.get("harden_git") {
            Some(i) => self.boolean(i, &format!("{}.harden_git", key))?,
            None => true,
        };
        Ok(AutoRule {
            argv: argv.into_iter().map(|(_, s)| s.to_string()).collect(),
            allow_trailing_args,
            cwd,
            harden_git,
        })
    }

    /// A profile: built-in defaults overridden field by field.
    fn profile(&self, name: &str, item: &Item, key: &str) -> Result<Profile, ConfigError> {
        let t = self.table(item, key)?;
        self.known_keys(t, key, PROFILE_KEYS)?;
        let mut p = Profile::builtin(name);
        let k = |field: &str| join_key(key, field);

        if let Some(i) = t.get("image") {
            let key = k("image");
            let s = self.string(i, &key, "an image string")?;
            p.image = s.parse().map_err(|e: String| self.invalid(i.line, &key, e, quote(s)))?;
        }
        if let Some(i) = t.get("command") {
            let key = k("command");
            const EXPECTED: &str = "a non-empty array of strings (argv)";
            let argv = self.strings(i, &key, EXPECTED)?;
            match argv.first() {
                None => return Err(self.invalid(i.line, &key, EXPECTED, "an empty array")),
                Some((l, "")) => {
                    return Err(self.invalid(*l, &key, "a non-empty program name as the first element", "\"\""))
                }
                _ => {}
            }
            p.command = argv.into_iter().map(|(_, s)| s.to_string()).collect();
        }
        if let Some(i) = t.get("persist") {
            let key = k("persist");
            let mut seen: Vec<(usize, &str)> = Vec::new();
            for (line, s) in self.strings(i, &key, "an array of absolute paths")? {
                if let Some(problem) = guest_path_problem(s) {
                    return Err(self.invalid(line, &key, format!("an array of {}", problem.plural()), quote(s)));
                }
                if let Some((first_line, _)) = seen.iter().find(|(_, q)| *q == s) {
                    return Err(self.duplicate(line, *first_line, &key, s));
                }
                seen.push((line, s));
            }
            p.persist = seen.into_iter().map(|(_, s)| s.to_string()).collect();
        }
        if let Some(i) = t.get("volumes") {
            let key = k("volumes");
            const EXPECTED: &str = "an array of \"HOSTPATH:GUESTPATH[:ro|:rw]\" strings";
            let mut seen: Vec<(usize, Volume)> = Vec::new();
            for (line, s) in self.strings(i, &key, EXPECTED)? {
                let v: Volume = s.parse().map_err(|e: String| self.invalid(line, &key, e, quote(s)))?;
                if let Some((first_line, _)) = seen.iter().find(|(_, w)| w.guest == v.guest) {
                    return Err(self.duplicate(line, *first_line, &key, &format!("guest path {}", v.guest)));
                }
                seen.push((line, v));
            }
            p.volumes = seen.into_iter().map(|(_, v)| v).collect();
        }
        if let Some(i) = t.get("env") {
            let key = k("env");
            let et = self.table(i, &key)?;
            let mut env = BTreeMap::new();
            for (name, vi) in &et.entries {
                let vkey = join_key(&key, name);
                if !valid_env_name(name) {
                    return Err(self.invalid(
                        vi.line,
                        &vkey,
                        "an environment variable name matching [A-Za-z_][A-Za-z0-9_]*",
                        quote(name),
                    ));
                }
                let value = self.string(vi, &vkey, "a string")?;
                env.insert(name.clone(), value.to_string());
            }
            p.env = env.into_iter().collect();
        }
        if let Some(i) = t.get("pass_env") {
            p.pass_env = self.pass_env(i, &k("pass_env"))?;
        }
        if let Some(i) = t.get("ports") {
            let key = k("ports");
            const EXPECTED: &str = "an array of \"[ADDR:]HOSTPORT:GUESTPORT\" strings";
            let mut seen: Vec<(usize, crate::config::ports::PortForward)> = Vec::new();
            for (line, s) in self.strings(i, &key, EXPECTED)? {
                let f: crate::config::ports::PortForward =
                    s.parse().map_err(|e: String| self.invalid(line, &key, e, quote(s)))?;
                if let Some((first_line, _)) = seen.iter().find(|(_, q)| q.addr == f.addr && q.host == f.host) {
                    return Err(self.duplicate(line, *first_line, &key, &format!("host port {}:{}", f.addr, f.host)));
                }
                seen.push((line, f));
            }
            p.ports = seen.into_iter().map(|(_, f)| f).collect();
        }
        if let Some(i) = t.get("isolate_ignored") {
            p.isolate_ignored = self.boolean(i, &k("isolate_ignored"))?;
        }
        if let Some(i) = t.get("ipv6") {
            p.ipv6 = self.boolean(i, &k("ipv6"))?;
        }
        if let Some(i) = t.get("network") {
            let key = k("network");
            let nt = self.table(i, &key)?;
            self.known_keys(nt, &key, PROFILE_NETWORK_KEYS)?;
            if let Some(a) = nt.get("allow") {
                p.allow = self.prefixes(a, &join_key(&key, "allow"))?;
            }
            if let Some(d) = nt.get("deny") {
                p.deny = self.prefixes(d, &join_key(&key, "deny"))?;
            }
            if let Some(d) = nt.get("dns") {
                let dkey = join_key(&key, "dns");
                p.dns = self.prefixes(d, &dkey)?;
                if let Some(bad) = p.dns.iter().find(|q| !q.addr.is_ipv4() || q.len != 32) {
                    return Err(self.invalid(
                        d.line,
                        &dkey,
                        "IPv4 host addresses like \"198.18.0.2\"",
                        quote(&bad.to_string()),
                    ));
                }
            }
            if let Some(m) = nt.get("mode") {
                let mkey = join_key(&key, "mode");
                p.network = match self.string(m, &mkey, "\"slirp\" or \"none\"")? {
                    "slirp" => true,
                    "none" => false,
                    other => return Err(self.invalid(m.line, &mkey, "\"slirp\" or \"none\"", quote(other))),
                };
            }
        }
        if let Some(i) = t.get("caps") {
            p.caps = self.caps(i, &k("caps"))?;
        }
        if let Some(i) = t.get("git_identity") {
            p.git_identity = self.boolean(i, &k("git_identity"))?;
        }
        if let Some(i) = t.get("limits") {
            p.limits = self.limits(i, &k("limits"))?;
        }
        if let Some(i) = t.get("user") {
            let key = k("user");
            const EXPECTED: &str = "a user name matching [a-z_][a-z0-9_-]{0,31}, not \"root\"";
            let name = self.string(i, &key, EXPECTED)?;
            if !valid_user_name(name) {
                return Err(self.invalid(i.line, &key, EXPECTED, quote(name)));
            }
            // The home keeps the user's logins and tools across restarts.
            let home = guest_home(name);
            if !p.persist.iter().any(|q| Path::new(&home).starts_with(q)) {
                return Err(self.invalid(
                    i.line,
                    &key,
                    format!("a user whose home {home} lies under a persist path (add \"/home\" to persist)"),
                    quote(name),
                ));
            }
            p.user = Some(name.to_string());
        }
        Ok(p)
    }

    /// `[images.NAME]`: `base = "debian:SUITE"`, `packages = [...]`.
    fn recipe(&self, item: &Item, key: &str) -> Result<Recipe, ConfigError> {
        let t = self.table(item, key)?;
        self.known_keys(t, key, IMAGE_KEYS)?;
        let mut r = Recipe {
            suite: None,
            packages: Vec::new(),
        };
        if let Some(i) = t.get("base") {
            let bkey = join_key(key, "base");
            const EXPECTED: &str = "\"debian:SUITE\" (a Debian suite such as bookworm)";
            let s = self.string(i, &bkey, EXPECTED)?;
            match s.strip_prefix("debian:") {
                Some(suite)
                    if !suite.is_empty()
                        && suite.len() <= 32
                        && suite.bytes().all(|b| b.is_ascii_lowercase() || b == b'-') =>
                {
                    r.suite = Some(suite.to_string())
                }
                _ => return Err(self.invalid(i.line, &bkey, EXPECTED, quote(s))),
            }
        }
        if let Some(i) = t.get("packages") {
            let pkey = join_key(key, "packages");
            const EXPECTED: &str = "an array of Debian package names matching [a-z0-9][a-z0-9+.-]+";
            for (line, p) in self.strings(i, &pkey, EXPECTED)? {
                let b = p.as_bytes();
                let ok = b.len() >= 2
                    && b.len() <= 100
                    && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'+' | b'.' | b'-'));
                if !ok {
                    return Err(self.invalid(line, &pkey, EXPECTED, quote(p)));
                }
                r.packages.push(p.to_string());
            }
            r.packages.sort();
            r.packages.dedup();
        }
        Ok(r)
    }

    /// `pass_env`: unique variable names, none of Lazaret's own.
    fn pass_env(&self, i: &Item, key: &str) -> Result<Vec<String>, ConfigError> {
        const EXPECTED: &str = "an array of environment variable names matching [A-Za-z_][A-Za-z0-9_]* (not LAZARET_*)";
        let mut seen: Vec<(usize, &str)> = Vec::new();
        for (line, name) in self.strings(i, key, EXPECTED)? {
            if !valid_env_name(name) || is_reserved_env(name) {
                return Err(self.invalid(line, key, EXPECTED, quote(name)));
            }
            if let Some((first_line, _)) = seen.iter().find(|(_, q)| *q == name) {
                return Err(self.duplicate(line, *first_line, key, name));
            }
            seen.push((line, name));
        }
        Ok(seen.into_iter().map(|(_, s)| s.to_string()).collect())
    }

    /// `caps`: names from [`DEFAULT_CAPS`], with or without `CAP_`; kept
    /// in the order of [`DEFAULT_CAPS`].
    fn caps(&self, item: &Item, key: &str) -> Result<Vec<String>, ConfigError> {
        let expected = format!(
            "an array of capabilities from: {}",
            DEFAULT_CAPS
                .iter()
                .map(|c| c.trim_start_matches("CAP_"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut seen: Vec<(usize, String)> = Vec::new();
        for (line, s) in self.strings(item, key, &expected)? {
            let name = format!("CAP_{}", s.trim_start_matches("CAP_").to_ascii_uppercase());
            if !DEFAULT_CAPS.contains(&name.as_str()) {
                return Err(self.invalid(line, key, expected.clone(), quote(s)));
            }
            if let Some((first_line, _)) = seen.iter().find(|(_, c)| *c == name) {
                return Err(self.duplicate(line, *first_line, key, s));
            }
            seen.push((line, name));
        }
        Ok(DEFAULT_CAPS
            .iter()
            .filter(|c| seen.iter().any(|(_, s)| s == *c))
            .map(|c| c.to_string())
            .collect())
    }

    /// `[profiles.NAME.limits]`: sizes as strings, pids an integer, cpus a number.
    fn limits(&self, item: &Item, key: &str) -> Result<Limits, ConfigError> {
        let t = self.table(item, key)?;
        self.known_keys(t, key, PROFILE_LIMITS_KEYS)?;
        let mut l = Limits::default();
        for (name, slot) in [
            ("memory", &mut l.memory),
            ("disk", &mut l.disk),
            ("image_layer", &mut l.image_layer),
        ] {
            if let Some(i) = t.get(name) {
                let k = join_key(key, name);
                let s = self.string(i, &k, "a size string like \"4GiB\"")?;
                let v = parse_size(s).map_err(|e| self.invalid(i.line, &k, e, quote(s)))?;
                if name == "memory" && v < (64 << 20) {
                    return Err(self.invalid(i.line, &k, "at least \"64MiB\"", quote(s)));
                }
                *slot = Some(v);
            }
        }
        if let Some(i) = t.get("pids") {
            let k = join_key(key, "pids");
            l.pids = Some(match &i.val {
                Val::Int(n) if (32..=4_194_304).contains(n) => *n as u64,
                other => return Err(self.invalid(i.line, &k, "an integer between 32 and 4194304", got(other))),
            });
        }
        if let Some(i) = t.get("cpus") {
            let k = join_key(key, "cpus");
            let v = match &i.val {
                Val::Int(n) => parse_cpus(&n.to_string()),
                Val::Float(f) => parse_cpus(&f.to_string()),
                _ => Err("a number of CPUs like 2 or 0.5".to_string()),
            };
            l.cpu_millis = Some(v.map_err(|e| self.invalid(i.line, &k, e, got(&i.val)))?);
        }
        Ok(l)
    }

    fn duplicate(&self, line: usize, first_line: usize, key: &str, value: &str) -> ConfigError {
        ConfigError::Duplicate {
            path: self.file.to_path_buf(),
            line,
            first_line,
            key: key.to_string(),
            value: quote(value),
        }
    }
}

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`
pub fn valid_profile_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// Variables Lazaret sets in every session itself; nothing passes them.
pub fn is_reserved_env(name: &str) -> bool {
    name.starts_with("LAZARET_")
}

/// `[A-Za-z_][A-Za-z0-9_]*`
pub fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

// ---------------------------------------------------------------------------
// A small strict TOML reader
// ---------------------------------------------------------------------------

/// Reads TOML 1.0 into a tree that remembers the 1-based line of every key.
/// Supported: comments, bare/quoted/dotted keys, `[table]` and `[[array]]`
/// headers, basic/literal (multi-line) strings, booleans, arrays, inline
/// tables (newlines and a trailing comma are tolerated, as in TOML 1.1).
/// Numbers and date-times are recognised loosely; the schema has no such
/// fields, so they only need to be reported as the wrong type.
mod toml {
    /// Maximum nesting of arrays and inline tables.
    const MAX_DEPTH: usize = 32;

    /// How a table came into being; decides whether it may be extended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Origin {
        Root,
        /// `[a.b]`
        Header,
        /// `a` when only `[a.b]` was written.
        Implicit,
        /// `a` in `a.b = 1`.
        Dotted,
        /// `{ ... }`
        Inline,
        /// An element of `[[a]]`.
        ArrayElement,
    }

    #[derive(Debug, Clone)]
    pub struct Table {
        pub origin: Origin,
        /// In file order; keys are unique.
        pub entries: Vec<(String, Item)>,
    }

    impl Table {
        fn new(origin: Origin) -> Table {
            Table {
                origin,
                entries: Vec::new(),
            }
        }

        pub fn get(&self, key: &str) -> Option<&Item> {
            self.entries.iter().find(|(k, _)| k == key).map(|(_, i)| i)
        }

        fn position(&self, key: &str) -> Option<usize> {
            self.entries.iter().position(|(k, _)| k == key)
        }
    }

    /// A value and the 1-based line where it (or its key/header) appears.
    #[derive(Debug, Clone)]
    pub struct Item {
        pub line: usize,
        pub val: Val,
    }

    #[derive(Debug, Clone)]
    pub enum Val {
        Str(String),
        Bool(bool),
        Int(i64),
        Float(f64),
        Datetime(String),
        Array(Vec<Item>),
        Table(Table),
        /// `[[a]]` elements; each is a `Val::Table`.
        TableArray(Vec<Item>),
    }

    impl Val {
        /// "a string", "an array", ...
        pub fn kind(&self) -> &'static str {
            match self {
                Val::Str(_) => "a string",
                Val::Bool(_) => "a boolean",
                Val::Int(_) => "an integer",
                Val::Float(_) => "a float",
                Val::Datetime(_) => "a date-time",
                Val::Array(_) => "an array",
                Val::Table(_) => "a table",
                Val::TableArray(_) => "an array of tables",
            }
        }
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct SyntaxError {
        /// 1-based.
        pub line: usize,
        pub message: String,
    }

    /// Appends `seg` to the dotted key `base`, quoting it unless it is a bare key.
    pub fn join_key(base: &str, seg: &str) -> String {
        let bare = !seg.is_empty() && seg.chars().all(is_bare);
        let seg = if bare { seg.to_string() } else { format!("{:?}", seg) };
        if base.is_empty() {
            seg
        } else {
            format!("{}.{}", base, seg)
        }
    }

    fn display_key(segs: &[String]) -> String {
        segs.iter().fold(String::new(), |acc, s| join_key(&acc, s))
    }

    fn is_bare(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_' || c == '-'
    }

    fn describe(c: Option<char>) -> String {
        match c {
            None => "end of file".into(),
            Some('\n') | Some('\r') => "end of line".into(),
            Some(c) => format!("{:?}", c),
        }
    }

    /// Parses a whole document.
    pub fn parse(text: &str) -> Result<Table, SyntaxError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut p = Parser {
            chars: text.chars().collect(),
            pos: 0,
            line: 1,
        };
        p.document()
    }

    struct Parser {
        chars: Vec<char>,
        pos: usize,
        line: usize,
    }

    impl Parser {
        fn peek(&self) -> Option<char> {
            self.chars.get(self.pos).copied()
        }

        fn peek_at(&self, n: usize) -> Option<char> {
            self.chars.get(self.pos + n).copied()
        }

        fn starts_with(&self, s: &str) -> bool {
            s.chars().enumerate().all(|(i, c)| self.peek_at(i) == Some(c))
        }

        fn bump(&mut self) -> Option<char> {
            let c = self.peek()?;
            self.pos += 1;
            if c == '\n' {
                self.line += 1;
            }
            Some(c)
        }

        fn err(&self, message: impl Into<String>) -> SyntaxError {
            SyntaxError {
                line: self.line,
                message: message.into(),
            }
        }

        fn skip_ws(&mut self) {
            while matches!(self.peek(), Some(' ') | Some('\t')) {
                self.bump();
            }
        }

        fn skip_comment(&mut self) -> Result<(), SyntaxError> {
            if self.peek() == Some('#') {
                while let Some(c) = self.peek() {
                    if c == '\n' || (c == '\r' && self.peek_at(1) == Some('\n')) {
                        break;
                    }
                    if is_control(c) {
                        return Err(self.err("control character in comment"));
                    }
                    self.bump();
                }
            }
            Ok(())
        }

        /// Consumes a newline (`\n` or `\r\n`) if one is next.
        fn newline(&mut self) -> bool {
            match self.peek() {
                Some('\n') => {
                    self.bump();
                    true
                }
                Some('\r') if self.peek_at(1) == Some('\n') => {
                    self.bump();
                    self.bump();
                    true
                }
                _ => false,
            }
        }

        /// Whitespace, comments and newlines (inside arrays and inline tables).
        fn skip_blank(&mut self) -> Result<(), SyntaxError> {
            loop {
                self.skip_ws();
                self.skip_comment()?;
                if !self.newline() {
                    return Ok(());
                }
            }
        }

        /// Trailing whitespace and comment, then a newline or the end of the file.
        fn end_of_line(&mut self, after: &str) -> Result<(), SyntaxError> {
            self.skip_ws();
            self.skip_comment()?;
            if self.peek().is_none() || self.newline() {
                Ok(())
            } else {
                Err(self.err(format!(
                    "expected end of line after {}, found {}",
                    after,
                    describe(self.peek())
                )))
            }
        }

        fn expect(&mut self, c: char, context: &str) -> Result<(), SyntaxError> {
            if self.peek() == Some(c) {
                self.bump();
                Ok(())
            } else {
                Err(self.err(format!("expected {:?} {}, found {}", c, context, describe(self.peek()))))
            }
        }

        fn document(&mut self) -> Result<Table, SyntaxError> {
            let mut root = Table::new(Origin::Root);
            let mut current: Vec<String> = Vec::new();
            loop {
                self.skip_ws();
                self.skip_comment()?;
                if self.newline() {
                    continue;
                }
                match self.peek() {
                    None => return Ok(root),
                    Some('[') => {
                        let line = self.line;
                        self.bump();
                        let array = self.peek() == Some('[');
                        if array {
                            self.bump();
                        }
                        let key = self.key()?;
                        self.expect(']', "to close the table header")?;
                        if array {
                            self.expect(']', "to close the array-of-tables header")?;
                        }
                        self.end_of_line("the table header")?;
                        define_header(&mut root, &key, array, line)?;
                        current = key;
                    }
                    Some(_) => {
                        let line = self.line;
                        let key = self.key()?;
                        self.expect('=', "after the key")?;
                        self.skip_ws();
                        let val = self.value(0)?;
                        self.end_of_line("the value")?;
                        let table = navigate(&mut root, &current, line)?;
                        insert(table, &current, &key, Item { line, val })?;
                    }
                }
            }
        }

        /// `a.b."c d"` with optional spaces around the dots; leaves trailing spaces consumed.
        fn key(&mut self) -> Result<Vec<String>, SyntaxError> {
            let mut segs = Vec::new();
            loop {
                self.skip_ws();
                segs.push(self.simple_key()?);
                self.skip_ws();
                if self.peek() != Some('.') {
                    return Ok(segs);
                }
                self.bump();
            }
        }

        fn simple_key(&mut self) -> Result<String, SyntaxError> {
            match self.peek() {
                Some('"') if self.starts_with("\"\"\"") => Err(self.err("a multi-line string cannot be a key")),
                Some('\'') if self.starts_with("'''") => Err(self.err("a multi-line string cannot be a key")),
                Some('"') => {
                    self.bump();
                    self.basic_string()
                }
                Some('\'') => {
                    self.bump();
                    self.literal_string()
                }
                Some(c) if is_bare(c) => {
                    let mut s = String::new();
                    while let Some(c) = self.peek().filter(|c| is_bare(*c)) {
                        s.push(c);
                        self.bump();
                    }
                    Ok(s)
                }
                other => Err(self.err(format!("expected a key, found {}", describe(other)))),
            }
        }

        fn value(&mut self, depth: usize) -> Result<Val, SyntaxError> {
            if depth > MAX_DEPTH {
                return Err(self.err("arrays or inline tables nested too deeply"));
            }
            match self.peek() {
                Some('"') if self.starts_with("\"\"\"") => {
                    self.pos += 3;
                    self.multiline_string(true).map(Val::Str)
                }
                Some('\'') if self.starts_with("'''") => {
                    self.pos += 3;
                    self.multiline_string(false).map(Val::Str)
                }
                Some('"') => {
                    self.bump();
                    self.basic_string().map(Val::Str)
                }
                Some('\'') => {
                    self.bump();
                    self.literal_string().map(Val::Str)
                }
                Some('[') => self.array(depth),
                Some('{') => self.inline_table(depth),
                Some(c) if c.is_ascii_alphanumeric() || "+-_.:".contains(c) => self.scalar(),
                other => Err(self.err(format!("expected a value, found {}", describe(other)))),
            }
        }

        /// Booleans, numbers and date-times.
        fn scalar(&mut self) -> Result<Val, SyntaxError> {
            let word = |p: &mut Parser| {
                let mut s = String::new();
                while let Some(c) = p.peek().filter(|c| c.is_ascii_alphanumeric() || "+-_.:".contains(*c)) {
                    s.push(c);
                    p.bump();
                }
                s
            };
            let mut tok = word(self);
            let is_date = |t: &str| {
                let b = t.as_bytes();
                b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
            };
            // "1979-05-27 07:32:00": a date, a space, a time.
            if is_date(&tok)
                && tok.len() == 10
                && self.peek() == Some(' ')
                && self.peek_at(1).is_some_and(|c| c.is_ascii_digit())
            {
                self.bump();
                tok.push(' ');
                tok.push_str(&word(self));
            }
            match tok.as_str() {
                "true" => return Ok(Val::Bool(true)),
                "false" => return Ok(Val::Bool(false)),
                "inf" | "+inf" => return Ok(Val::Float(f64::INFINITY)),
                "-inf" => return Ok(Val::Float(f64::NEG_INFINITY)),
                "nan" | "+nan" | "-nan" => return Ok(Val::Float(f64::NAN)),
                _ => {}
            }
            if is_date(&tok) || tok.contains(':') {
                return Ok(Val::Datetime(tok));
            }
            let digits = tok.strip_prefix(['+', '-']).unwrap_or(&tok);
            if !digits.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(self.err(format!("invalid value {:?}; strings must be quoted", tok)));
            }
            let clean: String = tok.chars().filter(|c| *c != '_').collect();
            let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
                .into_iter()
                .find(|(p, _)| clean.starts_with(p));
            let parsed = match radix {
                Some((p, r)) => i64::from_str_radix(&clean[p.len()..], r).ok().map(Val::Int),
                None if clean.contains(['.', 'e', 'E']) => clean.parse::<f64>().ok().map(Val::Float),
                None => clean.parse::<i64>().ok().map(Val::Int),
            };
            parsed.ok_or_else(|| self.err(format!("invalid number {:?}", tok)))
        }

        fn array(&mut self, depth: usize) -> Result<Val, SyntaxError> {
            self.bump(); // '['
            let mut items = Vec::new();
            loop {
                self.skip_blank()?;
                if self.peek() == Some(']') {
                    self.bump();
                    return Ok(Val::Array(items));
                }
                let line = self.line;
                let val = self.value(depth + 1)?;
                items.push(Item { line, val });
                self.skip_blank()?;
                match self.peek() {
                    Some(',') => {
                        self.bump();
                    }
                    Some(']') => {}
                    other => return Err(self.err(format!("expected ',' or ']' in array, found {}", describe(other)))),
                }
            }
        }

        fn inline_table(&mut self, depth: usize) -> Result<Val, SyntaxError> {
            self.bump(); // '{'
            let mut table = Table::new(Origin::Inline);
            loop {
                self.skip_blank()?;
                if self.peek() == Some('}') {
                    self.bump();
                    return Ok(Val::Table(table));
                }
                let line = self.line;
                let key = self.key()?;
                self.expect('=', "after the key")?;
                self.skip_ws();
                let val = self.value(depth + 1)?;
                insert(&mut table, &[], &key, Item { line, val })?;
                self.skip_blank()?;
                match self.peek() {
                    Some(',') => {
                        self.bump();
                    }
                    Some('}') => {}
                    other => {
                        return Err(self.err(format!(
                            "expected ',' or '}}' in inline table, found {}",
                            describe(other)
                        )))
                    }
                }
            }
        }

        /// After the opening `"`.
        fn basic_string(&mut self) -> Result<String, SyntaxError> {
            let mut s = String::new();
            loop {
                match self.peek() {
                    None | Some('\n') => return Err(self.err("unterminated string")),
                    Some('"') => {
                        self.bump();
                        return Ok(s);
                    }
                    Some('\\') => {
                        self.bump();
                        s.push(self.escape()?);
                    }
                    Some(c) if is_control(c) => return Err(self.err("control character in string; use an escape")),
                    Some(c) => {
                        s.push(c);
                        self.bump();
                    }
                }
            }
        }

        /// After the opening `'`.
        fn literal_string(&mut self) -> Result<String, SyntaxError> {
            let mut s = String::new();
            loop {
                match self.peek() {
                    None | Some('\n') => return Err(self.err("unterminated string")),
                    Some('\'') => {
                        self.bump();
                        return Ok(s);
                    }
                    Some(c) if is_control(c) => return Err(self.err("control character in string")),
                    Some(c) => {
                        s.push(c);
                        self.bump();
                    }
                }
            }
        }

        /// After the opening `"""` (`basic`) or `'''`.
        fn multiline_string(&mut self, basic: bool) -> Result<String, SyntaxError> {
            let quote = if basic { '"' } else { '\'' };
            let start = self.line;
            self.newline(); // a newline right after the delimiter is trimmed
            let mut s = String::new();
            loop {
                match self.peek() {
                    None => {
                        return Err(SyntaxError {
                            line: start,
                            message: "unterminated multi-line string".into(),
                        })
                    }
                    Some(c) if c == quote && self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote) => {
                        let mut n = 0;
                        while self.peek() == Some(quote) {
                            n += 1;
                            self.bump();
                        }
                        if n > 5 {
                            return Err(self.err("too many quotes closing a multi-line string"));
                        }
                        s.extend(std::iter::repeat_n(quote, n - 3));
                        return Ok(s);
                    }
                    Some('\\') if basic => {
                        self.bump();
                        // A backslash ending a line trims the newline and leading whitespace.
                        let mut k = 0;
                        while matches!(self.peek_at(k), Some(' ') | Some('\t')) {
                            k += 1;
                        }
                        if matches!(self.peek_at(k), Some('\n') | Some('\r')) {
                            while matches!(self.peek(), Some(' ') | Some('\t')) {
                                self.bump();
                            }
                            loop {
                                if self.newline() {
                                    continue;
                                }
                                if !matches!(self.peek(), Some(' ') | Some('\t')) {
                                    break;
                                }
                                self.bump();
                            }
                        } else {
                            s.push(self.escape()?);
                        }
                    }
                    Some(_) if self.newline() => s.push('\n'),
                    Some(c) if is_control(c) => return Err(self.err("control character in string")),
                    Some(c) => {
                        s.push(c);
                        self.bump();
                    }
                }
            }
        }

        /// After a backslash in a basic string.
        fn escape(&mut self) -> Result<char, SyntaxError> {
            let c = self.peek();
            let simple = match c {
                Some('b') => Some('\u{8}'),
                Some('t') => Some('\t'),
                Some('n') => Some('\n'),
                Some('f') => Some('\u{c}'),
                Some('r') => Some('\r'),
                Some('e') => Some('\u{1b}'),
                Some('"') => Some('"'),
                Some('\\') => Some('\\'),
                _ => None,
            };
            if let Some(ch) = simple {
                self.bump();
                return Ok(ch);
            }
            let digits = match c {
                Some('u') => 4,
                Some('U') => 8,
                _ => return Err(self.err(format!("invalid escape \\{}", c.map(String::from).unwrap_or_default()))),
            };
            self.bump();
            let mut code = 0u32;
            for _ in 0..digits {
                match self.peek().and_then(|h| h.to_digit(16)) {
                    Some(d) => {
                        code = code * 16 + d;
                        self.bump();
                    }
                    None => return Err(self.err(format!("expected {} hex digits in a unicode escape", digits))),
                }
            }
            char::from_u32(code).ok_or_else(|| self.err(format!("invalid unicode escape U+{:X}", code)))
        }
    }

    /// Control characters TOML does not allow raw in strings and comments.
    fn is_control(c: char) -> bool {
        (c < ' ' && c != '\t') || c == '\u{7f}'
    }

    /// Defines `[key]` or `[[key]]` (header on `line`).
    fn define_header(root: &mut Table, key: &[String], array: bool, line: usize) -> Result<(), SyntaxError> {
        let header = if array {
            format!("[[{}]]", display_key(key))
        } else {
            format!("[{}]", display_key(key))
        };
        let (last, parents) = match key.split_last() {
            Some(x) => x,
            None => {
                return Err(SyntaxError {
                    line,
                    message: "empty table header".into(),
                })
            }
        };
        let mut t = root;
        for (n, seg) in parents.iter().enumerate() {
            let idx = match t.position(seg) {
                Some(i) => i,
                None => {
                    let item = Item {
                        line,
                        val: Val::Table(Table::new(Origin::Implicit)),
                    };
                    t.entries.push((seg.clone(), item));
                    t.entries.len() - 1
                }
            };
            let item = &mut t.entries[idx].1;
            let extensible = match &item.val {
                Val::Table(sub) => sub.origin != Origin::Inline,
                Val::TableArray(_) => true,
                _ => false,
            };
            if !extensible {
                return Err(SyntaxError {
                    line,
                    message: format!(
                        "cannot define {}: {} is already defined as {} on line {}",
                        header,
                        display_key(&key[..=n]),
                        item.val.kind(),
                        item.line
                    ),
                });
            }
            t = match &mut item.val {
                Val::Table(sub) => sub,
                Val::TableArray(elems) => match elems.last_mut() {
                    Some(Item {
                        val: Val::Table(sub), ..
                    }) => sub,
                    _ => {
                        return Err(SyntaxError {
                            line,
                            message: format!("cannot define {}", header),
                        })
                    }
                },
                _ => {
                    return Err(SyntaxError {
                        line,
                        message: format!("cannot define {}", header),
                    })
                }
            };
        }
        let new_table = |origin| Item {
            line,
            val: Val::Table(Table::new(origin)),
        };
        match t.position(last) {
            None => {
                let item = if array {
                    Item {
                        line,
                        val: Val::TableArray(vec![new_table(Origin::ArrayElement)]),
                    }
                } else {
                    new_table(Origin::Header)
                };
                t.entries.push((last.clone(), item));
                Ok(())
            }
            Some(idx) => {
                let item = &mut t.entries[idx].1;
                match (&mut item.val, array) {
                    (Val::Table(sub), false) if sub.origin == Origin::Implicit => {
                        sub.origin = Origin::Header;
                        item.line = line;
                        Ok(())
                    }
                    (Val::TableArray(elems), true) => {
                        elems.push(new_table(Origin::ArrayElement));
                        Ok(())
                    }
                    (other, _) => Err(SyntaxError {
                        line,
                        message: format!(
                            "cannot define {}: {} is already defined as {} on line {}",
                            header,
                            display_key(key),
                            other.kind(),
                            item.line
                        ),
                    }),
                }
            }
        }
    }

    /// The table the current header names (last element for arrays of tables).
    fn navigate<'t>(root: &'t mut Table, path: &[String], line: usize) -> Result<&'t mut Table, SyntaxError> {
        let mut t = root;
        for seg in path {
            let idx = t.position(seg).ok_or_else(|| SyntaxError {
                line,
                message: "internal: lost table".into(),
            })?;
            t = match &mut t.entries[idx].1.val {
                Val::Table(sub) => sub,
                Val::TableArray(elems) => match elems.last_mut() {
                    Some(Item {
                        val: Val::Table(sub), ..
                    }) => sub,
                    _ => {
                        return Err(SyntaxError {
                            line,
                            message: "internal: lost table".into(),
                        })
                    }
                },
                _ => {
                    return Err(SyntaxError {
                        line,
                        message: "internal: lost table".into(),
                    })
                }
            };
        }
        Ok(t)
    }

    /// Inserts `key = item` (key possibly dotted) into `table`, whose own key is `prefix`.
    fn insert(table: &mut Table, prefix: &[String], key: &[String], item: Item) -> Result<(), SyntaxError> {
        let line = item.line;
        let full = || display_key(&[prefix, key].concat());
        let (last, parents) = match key.split_last() {
            Some(x) => x,
            None => {
                return Err(SyntaxError {
                    line,
                    message: "empty key".into(),
                })
            }
        };
        let mut t = table;
        for (n, seg) in parents.iter().enumerate() {
            let idx = match t.position(seg) {
                Some(i) => i,
                None => {
                    let sub = Item {
                        line,
                        val: Val::Table(Table::new(Origin::Dotted)),
                    };
                    t.entries.push((seg.clone(), sub));
                    t.entries.len() - 1
                }
            };
            let sub = &mut t.entries[idx].1;
            if !matches!(&sub.val, Val::Table(st) if st.origin == Origin::Dotted) {
                return Err(SyntaxError {
                    line,
                    message: format!(
                        "cannot set {}: {} is already defined as {} on line {}",
                        full(),
                        display_key(&[prefix, &key[..=n]].concat()),
                        sub.val.kind(),
                        sub.line
                    ),
                });
            }
            t = match &mut sub.val {
                Val::Table(st) => st,
                _ => {
                    return Err(SyntaxError {
                        line,
                        message: format!("cannot set {}", full()),
                    })
                }
            };
        }
        if let Some(idx) = t.position(last) {
            return Err(SyntaxError {
                line,
                message: format!("duplicate key {} (first set on line {})", full(), t.entries[idx].1.line),
            });
        }
        t.entries.push((last.clone(), item));
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const FILE: &str = "/home/u/.config/lazaret/config.toml";

    fn ok(text: &str) -> Config {
        match parse(Path::new(FILE), text) {
            Ok(c) if !c.broken_profiles.is_empty() => panic!("unexpected error: {:?}", c.broken_profiles),
            Ok(c) => c,
            Err(e) => panic!("unexpected error: {}", e),
        }
    }

    /// The error message; fails the test if parsing succeeds.
    fn err(text: &str) -> String {
        match parse(Path::new(FILE), text) {
            // A wrong profile is reported as that profile's error.
            Ok(c) if !c.broken_profiles.is_empty() => c.broken_profiles.values().next().unwrap().to_string(),
            Ok(c) => panic!("expected an error, got {:?}", c),
            Err(e) => e.to_string(),
        }
    }

    fn assert_has(msg: &str, parts: &[&str]) {
        for p in parts {
            assert!(msg.contains(p), "message {:?} lacks {:?}", msg, p);
        }
    }

    fn pfx(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    // --- TOML reader -------------------------------------------------------

    #[test]
    fn toml_dotted_headers_and_keys() {
        let t = toml::parse("[a.b]\nc.d = \"x\"\n[\"e.f\"]\ng = true\n").unwrap();
        let a = match &t.get("a").unwrap().val {
            Val::Table(a) => a,
            v => panic!("{:?}", v),
        };
        assert!(a.get("b").is_some());
        assert!(t.get("e.f").is_some(), "quoted key keeps its dot");
    }

    #[test]
    fn toml_array_of_tables_does_not_swallow_later_tables() {
        let c = ok("[[escalation.auto_approve]]\nargv = [\"git\"]\n[profiles.dev2]\nipv6 = true\n");
        assert_eq!(c.escalation.auto_approve.len(), 1);
        assert!(c.profiles["dev2"].ipv6);
    }

    #[test]
    fn toml_strings_and_escapes() {
        let c = ok(concat!(
            "[profiles.default.env]\n",
            "A = \"tab\\there \\\"q\\\" \\u00e9 \\U0001F600\"\n",
            "B = 'C:\\no\\escape'\n",
            "C = \"\"\"\nline1\nline2\"\"\"\n",
            "D = '''\nraw\\n'''\n",
            "E = \"\"\"a \\\n   b\"\"\"\n",
            "F = \"\"\"x\"\"\"\"\"\n",
            "G = \"\"\"a\\\nb\\\n\n  c\"\"\"\n",
        ));
        let env: BTreeMap<_, _> = c.profiles["default"].env.iter().cloned().collect();
        assert_eq!(env["A"], "tab\there \"q\" \u{e9} \u{1F600}");
        assert_eq!(env["B"], "C:\\no\\escape");
        assert_eq!(env["C"], "line1\nline2");
        assert_eq!(env["D"], "raw\\n");
        assert_eq!(env["E"], "a b");
        assert_eq!(env["F"], "x\"\"");
        assert_eq!(env["G"], "abc");
        assert!(ok("\u{feff}[profiles.bom]\n").profiles.contains_key("bom"));
    }

    #[test]
    fn toml_multiline_arrays_comments_crlf() {
        let c = ok("# top\r\n[profiles.x] # c\r\npersist = [\r\n  \"/usr\", # one\r\n  \"/etc\",\r\n]\r\n");
        assert_eq!(c.profiles["x"].persist, vec!["/usr", "/etc"]);
    }

    #[test]
    fn toml_syntax_errors_have_one_based_lines() {
        assert_has(&err("\n\n[profiles.x\n"), &[FILE, ":3: invalid TOML", "expected ']'"]);
        assert_has(&err("a = \"unterminated\n"), &[":1: invalid TOML: unterminated string"]);
        assert_has(
            &err("\nimage = default\n"),
            &[":2:", "invalid value \"default\"; strings must be quoted"],
        );
        assert_has(&err("x = 1 2\n"), &[":1:", "expected end of line after the value"]);
        assert_has(&err("= 1\n"), &[":1:", "expected a key"]);
        assert_has(&err("a = \"\\q\"\n"), &[":1:", "invalid escape \\q"]);
        assert_has(&err("a = [1,,]\n"), &[":1:", "expected a value, found ','"]);
    }

    #[test]
    fn toml_duplicates_and_redefinitions() {
        assert_has(
            &err("[profiles.x]\nipv6 = true\nipv6 = false\n"),
            &[":3: invalid TOML: duplicate key profiles.x.ipv6 (first set on line 2)"],
        );
        assert_has(
            &err("[profiles.x]\n\n[profiles.x]\n"),
            &[":3:", "cannot define [profiles.x]", "line 1"],
        );
        assert_has(
            &err("[profiles.x]\nenv = { A = \"1\" }\n[profiles.x.env]\nB = \"2\"\n"),
            &[":3:", "cannot define [profiles.x.env]"],
        );
        assert_has(
            &err("a = 1\na.b = 2\n"),
            &[":2:", "cannot set a.b: a is already defined as an integer on line 1"],
        );
    }

    #[test]
    fn toml_deep_nesting_is_an_error_not_a_crash() {
        let text = format!("a = {}", "[".repeat(100_000));
        assert_has(&err(&text), &[":1:", "nested too deeply"]);
        let text = format!("a = {}", "{b = ".repeat(10_000));
        assert_has(&err(&text), &["nested too deeply"]);
    }

    #[test]
    fn toml_numbers_and_dates_are_values_of_the_wrong_type() {
        assert_has(
            &err("[profiles.x]\nipv6 = 1\n"),
            &[":2: profiles.x.ipv6: expected a boolean (true or false), got an integer"],
        );
        assert_has(&err("[profiles.x]\nipv6 = 1.5e3\n"), &["got a float"]);
        assert_has(&err("[profiles.x]\nipv6 = 1979-05-27 07:32:00\n"), &["got a date-time"]);
        assert_has(&err("[profiles.x]\nipv6 = 0xff\n"), &["got an integer"]);
        assert_has(&err("[profiles.x]\nipv6 = -inf\n"), &["got a float"]);
    }

    // --- whole config -----------------------------------------------------

    #[test]
    fn empty_file_gives_builtin_default() {
        let c = ok("");
        assert!(c.exists);
        assert_eq!(c.path, PathBuf::from(FILE));
        assert_eq!(c.profiles.len(), 1);
        assert_eq!(c.profiles["default"], Profile::builtin("default"));
        assert!(!c.escalation.enabled);
        assert_eq!(c.default_deny, None);
        assert_eq!(c.runtime_dir, None);
    }

    #[test]
    fn builtin_defaults() {
        let p = Profile::builtin("default");
        assert_eq!(p.image, ImageSource::Default);
        assert_eq!(p.command, vec!["/bin/bash", "-l"]);
        assert_eq!(p.persist, vec!["/usr", "/etc", "/var", "/opt", "/root", "/home"]);
        assert!(p.isolate_ignored);
        assert!(!p.ipv6);
        assert!(p.volumes.is_empty() && p.env.is_empty() && p.allow.is_empty() && p.deny.is_empty());
    }

    #[test]
    fn load_absent_file_gives_builtin() {
        let path = std::env::temp_dir().join("lazaret-config-test-definitely-absent/config.toml");
        let c = load(&path).unwrap();
        assert!(!c.exists);
        assert_eq!(c.path, path);
        assert!(c.profiles.contains_key("default"));
    }

    #[test]
    fn load_unreadable_path_is_a_read_error() {
        let dir = std::env::temp_dir();
        let e = load(&dir).unwrap_err().to_string();
        assert_has(&e, &[&dir.display().to_string(), "cannot read config file"]);
    }

    #[test]
    fn full_example() {
        let c = ok(r#"
runtime_dir = "/run/user/1000/lazaret"
[network]
default_deny = ["10.0.0.0/8", "fd00::/8"]
[escalation]
enabled = true
[[escalation.auto_approve]]
argv = ["git", "--version"]
[[escalation.auto_approve]]
argv = ["gh", "pr", "view"]
allow_trailing_args = true
cwd = "./sub/dir"

[profiles.dev]
image = "oci:/srv/images/dev:latest"
command = ["claude", "--yes"]
persist = ["/usr", "/home/agent"]
volumes = ["/home/u/.cache/pip:/root/.cache/pip", "/data:/data:ro"]
env = { ZED = "1", ALPHA = "two" }
isolate_ignored = false
ipv6 = true
[profiles.dev.network]
allow = ["198.18.0.0/15"]
deny = ["198.18.0.0/15", "2001:db8::/32"]
"#);
        assert_eq!(c.runtime_dir, Some(PathBuf::from("/run/user/1000/lazaret")));
        assert_eq!(c.default_deny, Some(vec![pfx("10.0.0.0/8"), pfx("fd00::/8")]));
        assert!(c.escalation.enabled);
        assert_eq!(
            c.escalation.auto_approve,
            vec![
                AutoRule {
                    argv: vec!["git".into(), "--version".into()],
                    allow_trailing_args: false,
                    cwd: String::new(),
                    harden_git: true,
                },
                AutoRule {
                    argv: vec!["gh".into(), "pr".into(), "view".into()],
                    allow_trailing_args: true,
                    cwd: "sub/dir".into(),
                    harden_git: true,
                },
            ]
        );
        assert_eq!(c.profiles.len(), 2);
        let p = c.profile("dev").unwrap();
        assert_eq!(p.name, "dev");
        assert_eq!(
            p.image,
            ImageSource::Oci {
                path: "/srv/images/dev".into(),
                tag: "latest".into()
            }
        );
        assert_eq!(p.command, vec!["claude", "--yes"]);
        assert_eq!(p.persist, vec!["/usr", "/home/agent"]);
        assert_eq!(
            p.volumes,
            vec![
                Volume {
                    host: "/home/u/.cache/pip".into(),
                    guest: "/root/.cache/pip".into(),
                    read_only: false
                },
                Volume {
                    host: "/data".into(),
                    guest: "/data".into(),
                    read_only: true
                },
            ]
        );
        assert_eq!(p.env, vec![("ALPHA".into(), "two".into()), ("ZED".into(), "1".into())]);
        assert!(!p.isolate_ignored);
        assert!(p.ipv6);
        assert_eq!(p.allow, vec![pfx("198.18.0.0/15")]);
        assert_eq!(p.deny, vec![pfx("198.18.0.0/15"), pfx("2001:db8::/32")]);
        assert_eq!(c.profile("default").unwrap(), &Profile::builtin("default"));
    }

    #[test]
    fn default_profile_overrides_fields_individually() {
        let c = ok("[profiles.default]\nipv6 = true\n[profiles.other]\n");
        let d = &c.profiles["default"];
        assert!(d.ipv6);
        assert_eq!(d.persist, Profile::builtin("default").persist);
        assert_eq!(d.command, Profile::builtin("default").command);
        // Other profiles start from the built-in values, not from [profiles.default].
        assert_eq!(c.profiles["other"], Profile::builtin("other"));
    }

    #[test]
    fn inline_auto_approve_and_profile_as_dotted_keys() {
        let c = ok("escalation.auto_approve = [{ argv = [\"ls\"] }]\nprofiles.x.ipv6 = true\n");
        assert_eq!(c.escalation.auto_approve[0].argv, vec!["ls"]);
        assert!(c.profiles["x"].ipv6);
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        assert_eq!(
            err("\nruntime_dri = \"/x\"\n"),
            format!(
                "{}:2: runtime_dri: unknown key; expected one of: runtime_dir, network, escalation, images, profiles",
                FILE
            )
        );
        assert_has(
            &err("[profiles.dev]\nimage = \"default\"\nimgae = \"x\"\n"),
            &[":3: profiles.dev.imgae: unknown key", "image, command"],
        );
        assert_has(
            &err("[network]\nallow = []\n"),
            &[":2: network.allow: unknown key; expected one of: default_deny"],
        );
        assert_has(
            &err("[escalation]\nenable = true\n"),
            &[":2: escalation.enable: unknown key"],
        );
        assert_has(
            &err("[[escalation.auto_approve]]\nargv = [\"a\"]\n[[escalation.auto_approve]]\nargv = [\"b\"]\ntrailing = true\n"),
            &[":5: escalation.auto_approve[1].trailing: unknown key; expected one of: argv, allow_trailing_args, cwd, harden_git"],
        );
        assert_has(
            &err("[profiles.dev.network]\nalow = []\n"),
            &[":2: profiles.dev.network.alow: unknown key"],
        );
        assert_has(
            &err("[profiles.\"my.dev\"]\nx = 1\n"),
            &[":2: profiles.\"my.dev\".x: unknown key"],
        );
    }

    #[test]
    fn wrong_types() {
        assert_has(
            &err("runtime_dir = 3\n"),
            &[":1: runtime_dir: expected an absolute path, got an integer"],
        );
        assert_has(
            &err("runtime_dir = \"rel\"\n"),
            &[":1: runtime_dir: expected an absolute path, got \"rel\""],
        );
        assert_has(
            &err("network = 1\n"),
            &[":1: network: expected a table, got an integer"],
        );
        assert_has(
            &err("profiles = []\n"),
            &[":1: profiles: expected a table, got an empty array"],
        );
        assert_has(
            &err("profiles.x = \"y\"\n"),
            &[":1: profiles.x: expected a table, got \"y\""],
        );
        assert_has(
            &err("[escalation]\nenabled = \"yes\"\n"),
            &[":2: escalation.enabled: expected a boolean (true or false), got \"yes\""],
        );
        assert_has(
            &err("[profiles.d]\npersist = \"/usr\"\n"),
            &[":2: profiles.d.persist: expected an array of absolute paths, got \"/usr\""],
        );
        assert_has(
            &err("[profiles.d]\ncommand = [\"a\", 1]\n"),
            &[":2: profiles.d.command: expected a non-empty array of strings (argv), got an integer"],
        );
        assert_has(
            &err("[profiles.d]\nenv = [\"A=1\"]\n"),
            &[":2: profiles.d.env: expected a table, got an array"],
        );
        assert_has(
            &err("[profiles.d]\nisolate_ignored = \"no\"\n"),
            &[":2: profiles.d.isolate_ignored: expected a boolean"],
        );
        assert_has(
            &err("[profiles.d]\nnetwork = []\n"),
            &[":2: profiles.d.network: expected a table"],
        );
        assert_has(
            &err("[profiles.d]\nimage = [\"default\"]\n"),
            &[":2: profiles.d.image: expected an image string, got an array"],
        );
        assert_has(
            &err("[escalation]\nauto_approve = \"git\"\n"),
            &[":2: escalation.auto_approve: expected an array of tables"],
        );
        assert_has(
            &err("[escalation]\nauto_approve = [\"git\"]\n"),
            &[":2: escalation.auto_approve[0]: expected an array of tables"],
        );
    }

    #[test]
    fn nul_characters_are_rejected() {
        assert_has(
            &err("[profiles.d]\ncommand = [\"a\\u0000b\"]\n"),
            &[":2: profiles.d.command: expected a string without NUL characters"],
        );
    }

    #[test]
    fn persist_paths() {
        assert_eq!(
            err("[profiles.dev]\n\n\n\n\n\npersist = [\"usr\"]\n"),
            format!(
                "{}:7: profiles.dev.persist: expected an array of absolute paths, got \"usr\"",
                FILE
            )
        );
        for (bad, what) in [
            ("/", "paths other than \"/\""),
            ("/usr/", "normalized paths"),
            ("/usr/../etc", "normalized paths"),
            ("/usr/./lib", "normalized paths"),
            ("//usr", "normalized paths"),
            ("/workspace", "outside /workspace"),
            ("/workspace/sub", "outside /workspace"),
            ("/.lazaret/x", "outside /workspace"),
            ("/proc", "outside /workspace"),
            ("/dev/shm", "outside /workspace"),
            ("/sys", "outside /workspace"),
        ] {
            let msg = err(&format!("[profiles.d]\npersist = [\n  \"/etc\",\n  {:?},\n]\n", bad));
            assert_has(
                &msg,
                &[
                    ":4: profiles.d.persist: expected an array of ",
                    what,
                    &format!("got {:?}", bad),
                ],
            );
        }
        // Near misses of reserved names are fine.
        let c = ok("[profiles.d]\npersist = [\"/workspaces\", \"/devx\", \"/system\", \"/.lazaretx\"]\n");
        assert_eq!(c.profiles["d"].persist.len(), 4);
        assert!(ok("[profiles.d]\npersist = []\n").profiles["d"].persist.is_empty());
        assert_has(
            &err("[profiles.d]\npersist = [\"/usr\",\n\"/usr\"]\n"),
            &[":3: profiles.d.persist: \"/usr\" is listed twice (first on line 2)"],
        );
    }

    #[test]
    fn volumes() {
        let c = ok("[profiles.d]\nvolumes = [\"/a:/b\", \"/c:/d:rw\", \"/e:/f:ro\"]\n");
        let v = &c.profiles["d"].volumes;
        assert_eq!(
            v[0],
            Volume {
                host: "/a".into(),
                guest: "/b".into(),
                read_only: false
            }
        );
        assert!(!v[1].read_only);
        assert!(v[2].read_only);
        assert_eq!(v[2].to_string(), "/e:/f:ro");
        for bad in ["a:/b", "/a", "/a:/b:rx", "/a:/b:ro:x", ":/b", "/a:"] {
            let msg = err(&format!("[profiles.d]\nvolumes = [{:?}]\n", bad));
            assert_has(
                &msg,
                &[
                    ":2: profiles.d.volumes: expected \"HOSTPATH:GUESTPATH[:ro|:rw]\"",
                    &format!("got {:?}", bad),
                ],
            );
        }
        assert_has(
            &err("[profiles.d]\nvolumes = [\"/a:/workspace/x\"]\n"),
            &[":2: profiles.d.volumes: expected \"HOSTPATH:GUESTPATH[:ro|:rw]\" with GUESTPATH a path outside /workspace"],
        );
        assert_has(
            &err("[profiles.d]\nvolumes = [\"/a:b\"]\n"),
            &["with GUESTPATH an absolute path, got \"/a:b\""],
        );
        assert_has(
            &err("[profiles.d]\nvolumes = [\"/a:/x\", \"/b:/x:ro\"]\n"),
            &[":2: profiles.d.volumes: \"guest path /x\" is listed twice (first on line 2)"],
        );
    }

    #[test]
    fn env_forms_and_validation() {
        let a = ok("[profiles.d]\nenv = { B = \"2\", A = \"1\", _x9 = \"\" }\n");
        let b = ok("[profiles.d.env]\n_x9 = \"\"\nA = \"1\"\nB = \"2\"\n");
        assert_eq!(a.profiles["d"].env, b.profiles["d"].env);
        assert_eq!(a.profiles["d"].env[0], ("A".to_string(), "1".to_string()));
        assert_has(
            &err("[profiles.d.env]\nOK = \"1\"\n9LIVES = \"x\"\n"),
            &[":3: profiles.d.env.9LIVES: expected an environment variable name matching [A-Za-z_][A-Za-z0-9_]*, got \"9LIVES\""],
        );
        assert_has(
            &err("[profiles.d.env]\n\"A-B\" = \"x\"\n"),
            &[":2: profiles.d.env.A-B: expected an environment variable name"],
        );
        assert_has(
            &err("[profiles.d.env]\n\"A=B\" = \"x\"\n"),
            &["profiles.d.env.\"A=B\": expected an environment variable name"],
        );
        assert_has(
            &err("[profiles.d.env]\nA = 1\n"),
            &[":2: profiles.d.env.A: expected a string, got an integer"],
        );
        assert_has(
            &err("[profiles.d]\nenv = { A = { B = \"x\" } }\n"),
            &[":2: profiles.d.env.A: expected a string, got a table"],
        );
    }

    #[test]
    fn profile_user() {
        let c = ok("[profiles.a]\nuser = \"dev\"\n");
        assert_eq!(c.profiles["a"].user.as_deref(), Some("dev"));
        assert_eq!(c.profiles["default"].user, None);
        assert_ne!(c.profiles["a"].fingerprint(), Profile::builtin("a").fingerprint());
        for bad in ["root", "Dev", "1x", "a b", ""] {
            assert_has(
                &err(&format!("[profiles.a]\nuser = {bad:?}\n")),
                &[":2: profiles.a.user: expected a user name matching"],
            );
        }
        assert_has(
            &err("[profiles.a]\nuser = \"dev\"\npersist = [\"/usr\"]\n"),
            &["profiles.a.user: expected a user whose home /home/dev lies under a persist path"],
        );
        let c = ok("[profiles.a]\nuser = \"dev\"\npersist = [\"/home/dev\"]\n");
        assert_eq!(c.profiles["a"].user.as_deref(), Some("dev"));
    }

    #[test]
    fn image_recipes() {
        let c = ok("[images.web]\nbase = \"debian:bookworm\"\npackages = [\"nodejs\", \"curl\", \"nodejs\"]\n[profiles.d]\nimage = \"web\"\n");
        assert_eq!(c.images["web"].suite.as_deref(), Some("bookworm"));
        assert_eq!(c.images["web"].packages, ["curl", "nodejs"]);
        assert_eq!(c.profiles["d"].image, ImageSource::Named("web".into()));
        assert!(c.images.contains_key("dev"), "the built-in dev recipe");
        let d = ok("[profiles.d]\nimage = \"dev\"\n");
        assert!(d.images["dev"].packages.contains(&"nodejs".to_string()));
        let fp = c.images["web"].fingerprint("bookworm");
        assert_eq!(fp, c.images["web"].fingerprint("trixie"), "explicit suite");
        assert_ne!(fp, d.images["dev"].fingerprint("bookworm"));
        assert_has(
            &err("[profiles.d]\nimage = \"nope\"\n"),
            &[
                ":2: profiles.d.image: expected an image recipe name defined as [images.NAME]",
                "\"nope\"",
            ],
        );
        assert_has(&err("[images.default]\n"), &["images.default: expected an image name"]);
        assert_has(
            &err("[images.x]\nbase = \"ubuntu:jammy\"\n"),
            &[":2: images.x.base: expected \"debian:SUITE\""],
        );
        assert_has(&err("[images.x]\npackages = [\"a b\"]\n"), &["images.x.packages"]);
        assert_has(&err("[images.x]\nsuite = \"x\"\n"), &["images.x.suite: unknown key"]);
    }

    #[test]
    fn port_forwards() {
        let c = ok("[profiles.d]\nports = [\"127.0.0.1:3000:3000\", \"18000:8000\"]\n");
        assert_eq!(c.profiles["d"].ports.len(), 2);
        assert_eq!(c.profiles["d"].ports[1].to_string(), "127.0.0.1:18000:8000");
        assert_has(
            &err("[profiles.d]\nports = [\"3000\"]\n"),
            &[":2: profiles.d.ports: expected \"[ADDR:]HOSTPORT:GUESTPORT\""],
        );
        assert_has(
            &err("[profiles.d]\nports = [\"3000:1\", \"127.0.0.1:3000:2\"]\n"),
            &["profiles.d.ports", "host port 127.0.0.1:3000"],
        );
    }

    #[test]
    fn pass_env_names() {
        let c = ok("[profiles.d]\npass_env = [\"ANTHROPIC_API_KEY\", \"_X\"]\n");
        assert_eq!(c.profiles["d"].pass_env, ["ANTHROPIC_API_KEY", "_X"]);
        assert_eq!(
            c.profiles["d"].fingerprint(),
            ok("[profiles.d]\n").profiles["d"].fingerprint(),
            "client-side only"
        );
        assert_has(
            &err("[profiles.d]\npass_env = [\"A=B\"]\n"),
            &[":2: profiles.d.pass_env: expected an array of environment variable names"],
        );
        assert_has(
            &err("[profiles.d]\npass_env = [\"LAZARET_SESSION\"]\n"),
            &["profiles.d.pass_env", "not LAZARET_*"],
        );
        assert_has(
            &err("[profiles.d]\npass_env = [\"A\", \"A\"]\n"),
            &["profiles.d.pass_env"],
        );
        assert_has(&err("[profiles.d]\npass_env = \"A\"\n"), &["profiles.d.pass_env"]);
    }

    #[test]
    fn image_sources() {
        let cases = [
            ("default", ImageSource::Default),
            (
                "oci:/srv/img:v1.2",
                ImageSource::Oci {
                    path: "/srv/img".into(),
                    tag: "v1.2".into(),
                },
            ),
            (
                "oci:/srv/a:b/img:v1",
                ImageSource::Oci {
                    path: "/srv/a:b/img".into(),
                    tag: "v1".into(),
                },
            ),
            (
                "docker-archive:/tmp/img.tar",
                ImageSource::DockerArchive("/tmp/img.tar".into()),
            ),
            (
                "docker://docker.io/library/debian:12",
                ImageSource::Docker("docker.io/library/debian:12".into()),
            ),
        ];
        for (s, want) in cases {
            let c = ok(&format!("[profiles.d]\nimage = {:?}\n", s));
            assert_eq!(c.profiles["d"].image, want);
            assert_eq!(want.to_string(), s, "display round-trips");
        }
        for (bad, expected) in [
            (
                "debian",
                "expected an image recipe name defined as [images.NAME] (known: dev)",
            ),
            (
                "Debian",
                "expected one of \"default\", an [images.NAME] recipe name, \"oci:/ABS/PATH:TAG\"",
            ),
            (
                "oci:/srv/img",
                "expected \"oci:PATH:TAG\" with an absolute PATH and a non-empty TAG",
            ),
            ("oci:/srv/img:", "expected \"oci:PATH:TAG\""),
            ("oci:rel:tag", "expected \"oci:PATH:TAG\""),
            (
                "docker-archive:img.tar",
                "expected \"docker-archive:FILE\" with an absolute FILE",
            ),
            ("docker://", "expected \"docker://REF\""),
            ("Default", "expected one of"),
        ] {
            let msg = err(&format!("\n[profiles.d]\nimage = {:?}\n", bad));
            assert_has(
                &msg,
                &[FILE, ":3: profiles.d.image: ", expected, &format!("got {:?}", bad)],
            );
        }
    }

    #[test]
    fn command_validation() {
        assert_has(
            &err("[profiles.d]\ncommand = []\n"),
            &[":2: profiles.d.command: expected a non-empty array of strings (argv), got an empty array"],
        );
        assert_has(
            &err("[profiles.d]\ncommand = [\n\"\", \"x\"]\n"),
            &[":3: profiles.d.command: expected a non-empty program name as the first element"],
        );
        assert_has(
            &err("[profiles.d]\ncommand = \"bash\"\n"),
            &["expected a non-empty array of strings (argv), got \"bash\""],
        );
        assert_eq!(
            ok("[profiles.d]\ncommand = [\"sh\", \"\"]\n").profiles["d"].command,
            vec!["sh", ""]
        );
    }

    #[test]
    fn auto_approve_validation() {
        assert_has(
            &err("[escalation]\n[[escalation.auto_approve]]\nallow_trailing_args = true\n"),
            &[":2: escalation.auto_approve[0].argv: expected a non-empty array of strings, got no value"],
        );
        assert_has(
            &err("[[escalation.auto_approve]]\nargv = []\n"),
            &[":2: escalation.auto_approve[0].argv: expected a non-empty array of strings, got an empty array"],
        );
        assert_has(
            &err("[[escalation.auto_approve]]\nargv = [\"\"]\n"),
            &[":2: escalation.auto_approve[0].argv: expected a non-empty program name"],
        );
        assert_has(
            &err("[[escalation.auto_approve]]\nargv = [\"a\"]\nallow_trailing_args = 1\n"),
            &[":3: escalation.auto_approve[0].allow_trailing_args: expected a boolean"],
        );
        for prog in ["sh", "bash", "/bin/dash", "python3", "perl", "env"] {
            assert_has(
                &err(&format!(
                    "[[escalation.auto_approve]]\nargv = [{prog:?}, \"-c\", \"x\"]\n"
                )),
                &[":2: escalation.auto_approve[0].argv: expected a program that does not run a command string"],
            );
        }
        assert_has(
            &err("[[escalation.auto_approve]]\nargv = [\"git\"]\ncwd = \"../x\"\n"),
            &[":3: escalation.auto_approve[0].cwd: expected a directory relative to the workspace"],
        );
        assert_has(
            &err("[escalation]\nprompt_timeout_s = 0\n"),
            &[":2: escalation.prompt_timeout_s: expected a whole number of seconds"],
        );
        let c = ok(
            "[escalation]\nprompt_timeout_s = 7\n[[escalation.auto_approve]]\nargv = [\"git\"]\nharden_git = false\n",
        );
        assert_eq!(c.escalation.prompt_timeout_s, 7);
        assert!(!c.escalation.auto_approve[0].harden_git);
        assert_eq!(ok("").escalation.prompt_timeout_s, 300);
    }

    #[test]
    fn join_fingerprint_covers_escalation_and_global_network() {
        let base = ok("[escalation]\nenabled = true\n");
        let fp = |c: &Config| join_fingerprint(c, c.profile("default").unwrap());
        let mut seen = std::collections::HashSet::new();
        seen.insert(fp(&base));
        for v in [
            "",
            "[escalation]\nenabled = true\nprompt_timeout_s = 5\n",
            "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"git\"]\n",
            "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"git\"]\ncwd = \"a\"\n",
            "[escalation]\nenabled = true\n[network]\ndefault_deny = [\"10.0.0.0/8\"]\n",
        ] {
            assert!(seen.insert(fp(&ok(v))), "{v:?} collides");
        }
        assert_eq!(fp(&base), fp(&ok("[escalation]\nenabled = true\n")));
    }

    #[test]
    fn profile_names() {
        let long = "a".repeat(64);
        assert!(ok(&format!(
            "[profiles.{}]\n[profiles.A-b_c]\n[profiles.\"v1.2\"]\n[profiles.9]\n",
            long
        ))
        .profiles
        .contains_key("v1.2"));
        for bad in [
            "\"-x\"",
            "\"_x\"",
            "\"a b\"",
            "\"\"",
            "\"é\"",
            &format!("\"{}\"", "a".repeat(65)),
        ] {
            let msg = err(&format!("\n[profiles.{}]\n", bad));
            assert_has(
                &msg,
                &[
                    ":2: profiles.",
                    "expected a profile name matching [A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
                ],
            );
        }
    }

    #[test]
    fn unknown_profile_lists_known_ones() {
        let c = ok("[profiles.dev]\n[profiles.ci]\n");
        let e = c.profile("prod").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: unknown profile \"prod\"; expected one of: ci, default, dev (define it as [profiles.prod])",
                FILE
            )
        );
    }

    // --- prefixes ---------------------------------------------------------

    #[test]
    fn prefix_parsing() {
        assert_eq!(
            pfx("10.0.0.0/8"),
            Prefix {
                addr: "10.0.0.0".parse().unwrap(),
                len: 8
            }
        );
        assert_eq!(pfx("fd00::/8").to_string(), "fd00::/8");
        assert_eq!(pfx("0.0.0.0/0").len, 0);
        assert_eq!(pfx("::/0").len, 0);
        assert_eq!(pfx("192.0.2.1").to_string(), "192.0.2.1/32");
        assert_eq!(pfx("2001:db8::1").to_string(), "2001:db8::1/128");
        assert_eq!(pfx("::1/128").to_string(), "::1/128");
        let e = |s: &str| s.parse::<Prefix>().unwrap_err();
        assert_eq!(
            e("10.1.2.3/8"),
            "a prefix whose host bits are zero, such as \"10.0.0.0/8\""
        );
        assert_eq!(
            e("fd00::1/8"),
            "a prefix whose host bits are zero, such as \"fd00::/8\""
        );
        assert_eq!(e("10.0.0.0/33"), "a prefix length between 0 and 32");
        assert_eq!(e("::/129"), "a prefix length between 0 and 128");
        assert_eq!(e("::/999"), "a prefix length between 0 and 128");
        for bad in [
            "",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0/8",
            "example.com/8",
            "10.0.0.0/8/8",
            "/8",
            "10.0.0.0/0008",
        ] {
            assert!(e(bad).starts_with("a CIDR prefix"), "{:?}", bad);
        }
        assert_eq!(Prefix::new("10.0.0.0".parse().unwrap(), 8), Some(pfx("10.0.0.0/8")));
        assert_eq!(Prefix::new("10.0.0.1".parse().unwrap(), 8), None);
        assert_eq!(Prefix::new("10.0.0.0".parse().unwrap(), 33), None);
    }

    #[test]
    fn prefix_contains_and_overlaps() {
        let a = pfx("10.0.0.0/8");
        let b = pfx("10.1.0.0/16");
        let c = pfx("11.0.0.0/8");
        assert!(a.contains(&b) && !b.contains(&a));
        assert!(a.contains(&a));
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c) && !a.contains(&c));
        assert!(pfx("0.0.0.0/0").contains(&c));
        assert!(!pfx("0.0.0.0/0").overlaps(&pfx("::/0")), "families never overlap");
        assert!(pfx("::/0").contains(&pfx("2001:db8::/32")));
        assert!(pfx("2001:db8::/32").contains(&pfx("2001:db8:1::1/128")));
        assert!(!pfx("2001:db8::/32").overlaps(&pfx("2001:db9::/32")));
        assert!(pfx("255.255.255.255/32").contains(&pfx("255.255.255.255")));
    }

    #[test]
    fn prefix_list_errors() {
        assert_eq!(
            err("[profiles.d.network]\ndeny = [\n  \"10.0.0.0/8\",\n  \"10.1.0.0/16\",\n]\n"),
            format!(
                "{}:4: profiles.d.network.deny: \"10.0.0.0/8\" (line 3) and \"10.1.0.0/16\" overlap; \
                 expected non-overlapping prefixes in one list, keep only one of them",
                FILE
            )
        );
        assert_has(
            &err("[network]\ndefault_deny = [\"10.1.0.0/16\", \"10.0.0.0/8\"]\n"),
            &[":2: network.default_deny: \"10.1.0.0/16\" (line 2) and \"10.0.0.0/8\" overlap"],
        );
        assert_has(
            &err("[profiles.d.network]\nallow = [\"fd00::/8\", \"fd00:0::/8\"]\n"),
            &[":2: profiles.d.network.allow: \"fd00::/8\" is listed twice (first on line 2)"],
        );
        assert_has(
            &err("[profiles.d.network]\nallow = [\"10.0.0.1/8\"]\n"),
            &[":2: profiles.d.network.allow: expected a prefix whose host bits are zero, such as \"10.0.0.0/8\", got \"10.0.0.1/8\""],
        );
        assert_has(
            &err("[network]\ndefault_deny = [\"nope\"]\n"),
            &[":2: network.default_deny: expected a CIDR prefix", "got \"nope\""],
        );
        assert_has(
            &err("[network]\ndefault_deny = \"10.0.0.0/8\"\n"),
            &["expected an array of CIDR prefixes"],
        );
        // The same prefix in allow and deny is resolved by the network layer, not here.
        let c = ok("[profiles.d.network]\nallow = [\"10.0.0.0/8\"]\ndeny = [\"10.0.0.0/8\", \"11.0.0.0/8\"]\n");
        assert_eq!(c.profiles["d"].allow, vec![pfx("10.0.0.0/8")]);
        assert_eq!(ok("[network]\ndefault_deny = []\n").default_deny, Some(vec![]));
        let c = ok("[profiles.d.network]\ndns = [\"198.18.0.2\"]\nmode = \"none\"\n");
        assert_eq!(c.profiles["d"].dns, vec![pfx("198.18.0.2/32")]);
        assert!(!c.profiles["d"].network && c.profiles["default"].network);
        assert_has(
            &err("[profiles.d.network]\ndns = [\"10.0.0.0/8\"]\n"),
            &[":2: profiles.d.network.dns: expected IPv4 host addresses"],
        );
        assert_has(
            &err("[profiles.d.network]\nmode = \"host\"\n"),
            &[":2: profiles.d.network.mode: expected \"slirp\" or \"none\", got \"host\""],
        );
    }

    // --- fingerprint ------------------------------------------------------

    #[test]
    fn fingerprint_is_stable() {
        let fp = Profile::builtin("default").fingerprint();
        assert_eq!(fp.len(), 16);
        assert!(fp.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // Pinned: a change here silently invalidates every recorded fingerprint.
        assert_eq!(fp, "b78eed2f2854e2da");
    }

    #[test]
    fn fingerprint_covers_every_sandbox_field() {
        let base = Profile::builtin("x");
        assert_eq!(
            base.fingerprint(),
            Profile::builtin("y").fingerprint(),
            "name is not part of it"
        );
        let variants: Vec<fn(&mut Profile)> = vec![
            |p| p.image = ImageSource::Docker("debian".into()),
            |p| p.command = vec!["/bin/bash".into()],
            |p| p.command = vec!["/bin/bash".into(), "-l".into(), "".into()],
            |p| {
                p.persist.pop();
            },
            |p| p.volumes.push("/a:/b".parse().unwrap()),
            |p| p.volumes.push("/a:/b:ro".parse().unwrap()),
            |p| p.env.push(("A".into(), "1".into())),
            |p| p.env.push(("A".into(), "".into())),
            |p| p.allow.push(pfx("10.0.0.0/8")),
            |p| p.deny.push(pfx("10.0.0.0/8")),
            |p| p.ipv6 = true,
            |p| p.isolate_ignored = false,
            |p| p.dns.push(pfx("198.18.0.2/32")),
            |p| p.network = false,
            |p| p.ports.push("18000:8000".parse().unwrap()),
        ];
        let mut seen = BTreeSet::new();
        seen.insert(base.fingerprint());
        for (n, f) in variants.iter().enumerate() {
            let mut p = base.clone();
            f(&mut p);
            assert!(seen.insert(p.fingerprint()), "variant {} collides", n);
        }
    }

    #[test]
    fn fingerprint_ignores_order_where_order_is_meaningless() {
        let a = ok("[profiles.d]\npersist = [\"/a\", \"/b\"]\nenv = { A = \"1\", B = \"2\" }\n[profiles.d.network]\ndeny = [\"10.0.0.0/8\", \"fd00::/8\"]\n");
        let b = ok("[profiles.d]\npersist = [\"/b\", \"/a\"]\nenv = { B = \"2\", A = \"1\" }\n[profiles.d.network]\ndeny = [\"fd00::/8\", \"10.0.0.0/8\"]\n");
        assert_eq!(a.profiles["d"].fingerprint(), b.profiles["d"].fingerprint());
        let c = ok("[profiles.d]\nvolumes = [\"/a:/x\", \"/b:/y\"]\n");
        let d = ok("[profiles.d]\nvolumes = [\"/b:/y\", \"/a:/x\"]\n");
        assert_ne!(
            c.profiles["d"].fingerprint(),
            d.profiles["d"].fingerprint(),
            "mount order matters"
        );
    }

    // --- location and paths -----------------------------------------------

    #[test]
    fn config_path_from_env() {
        let p = |x: Option<&str>, h: Option<&str>| config_path_from(x.map(OsStr::new), h.map(OsStr::new));
        assert_eq!(p(Some("/x"), Some("/home/u")), PathBuf::from("/x/lazaret/config.toml"));
        assert_eq!(
            p(None, Some("/home/u")),
            PathBuf::from("/home/u/.config/lazaret/config.toml")
        );
        assert_eq!(
            p(Some(""), Some("/home/u")),
            PathBuf::from("/home/u/.config/lazaret/config.toml")
        );
        assert_eq!(
            p(Some("rel"), Some("/home/u")),
            PathBuf::from("/home/u/.config/lazaret/config.toml")
        );
        assert_eq!(p(None, None), PathBuf::from("/.config/lazaret/config.toml"));
        assert!(config_path().ends_with("lazaret/config.toml"));
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let dir = std::env::temp_dir().join(format!("lazaret-config-{}-{}-{}", tag, std::process::id(), nanos));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn check_location_refuses_config_inside_workspace() {
        let tmp = TempDir::new("ws");
        let ws = tmp.0.join("proj");
        std::fs::create_dir_all(ws.join(".config/lazaret")).unwrap();
        let inside = ws.join(".config/lazaret/config.toml");
        std::fs::write(&inside, "").unwrap();
        let e = check_location(&inside, &ws, &[]).unwrap_err();
        assert!(matches!(e, ConfigError::InsideWorkspace { .. }));
        assert_has(
            &e.to_string(),
            &[
                &inside.display().to_string(),
                "lies inside the workspace",
                &ws.display().to_string(),
                "XDG_CONFIG_HOME",
            ],
        );
        // Not yet existing files and `..` tricks are caught too.
        assert!(check_location(&ws.join("nope/config.toml"), &ws, &[]).is_err());
        assert!(check_location(&tmp.0.join("other/../proj/config.toml"), &ws, &[]).is_err());
        // A symlink outside the workspace pointing into it is resolved.
        let link = tmp.0.join("link.toml");
        std::os::unix::fs::symlink(&inside, &link).unwrap();
        assert!(check_location(&link, &ws, &[]).is_err());
        // The workspace given through a symlink is resolved as well.
        let ws_link = tmp.0.join("ws-link");
        std::os::unix::fs::symlink(&ws, &ws_link).unwrap();
        assert!(check_location(&inside, &ws_link, &[]).is_err());
        // Outside: fine; a sibling whose name merely starts the same is outside.
        let outside = tmp.0.join("config.toml");
        std::fs::write(&outside, "").unwrap();
        assert_eq!(check_location(&outside, &ws, &[]), Ok(()));
        assert_eq!(check_location(&tmp.0.join("proj2/config.toml"), &ws, &[]), Ok(()));
    }

    #[test]
    fn check_location_refuses_config_under_a_volume() {
        let tmp = TempDir::new("vol");
        let ws = tmp.0.join("proj");
        let home = tmp.0.join("home");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(home.join(".config/lazaret")).unwrap();
        let cfg = home.join(".config/lazaret/config.toml");
        std::fs::write(&cfg, "").unwrap();
        let vols = vec![
            Volume {
                host: tmp.0.join("elsewhere"),
                guest: "/e".into(),
                read_only: false,
            },
            Volume {
                host: home.join(".config"),
                guest: "/root/.config".into(),
                read_only: true,
            },
        ];
        let e = check_location(&cfg, &ws, &vols).unwrap_err();
        assert_has(
            &e.to_string(),
            &[
                &cfg.display().to_string(),
                "under volume host path",
                &home.join(".config").display().to_string(),
                "/root/.config",
            ],
        );
        assert_eq!(check_location(&cfg, &ws, &vols[..1]), Ok(()));
        let root = vec![Volume {
            host: "/".into(),
            guest: "/host".into(),
            read_only: true,
        }];
        assert!(check_location(&cfg, &ws, &root).is_err());
    }

    // --- robustness -------------------------------------------------------

    /// xorshift64*: deterministic pseudo-random numbers without a crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn garbage_never_panics() {
        const SEED: &str = r#"runtime_dir = "/r"
[network]
default_deny = ["10.0.0.0/8", "fd00::/8"]
[escalation]
enabled = true
[[escalation.auto_approve]]
argv = ["git", "--version"]
allow_trailing_args = false
[profiles.dev]
image = "oci:/a:b"
command = ["bash", "-l"]
persist = ["/usr"]
volumes = ["/a:/b:ro"]
env = { K = "v", 'L' = """x""" }
isolate_ignored = true
ipv6 = false
[profiles.dev.network]
allow = ["198.18.0.0/15"]
deny = ["::/0"]
"#;
        assert!(parse(Path::new(FILE), SEED).is_ok());
        let alphabet: Vec<char> = "[]{}=,.\"'\\#\n\r\t :/-_0123456789abcdefxyzAZ\u{0}\u{7f}é😀truefalse"
            .chars()
            .collect();
        let seed: Vec<char> = SEED.chars().collect();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut errors = 0;
        for round in 0..3000 {
            let text: String = if round % 3 == 0 {
                (0..rng.below(200))
                    .map(|_| alphabet[rng.below(alphabet.len())])
                    .collect()
            } else {
                let mut t = seed.clone();
                for _ in 0..1 + rng.below(6) {
                    let at = rng.below(t.len() + 1);
                    match rng.below(3) {
                        0 if at < t.len() => {
                            t.remove(at);
                        }
                        1 if at < t.len() => t[at] = alphabet[rng.below(alphabet.len())],
                        _ => t.insert(at, alphabet[rng.below(alphabet.len())]),
                    }
                }
                t.into_iter().collect()
            };
            if let Err(e) = parse(Path::new(FILE), &text) {
                errors += 1;
                let msg = e.to_string();
                assert!(msg.starts_with(FILE), "{:?}", msg);
                if let Some(line) = msg[FILE.len()..].strip_prefix(':').and_then(|r| r.split(':').next()) {
                    let n: usize = line.parse().unwrap_or(0);
                    assert!(
                        n >= 1 && n <= text.split('\n').count(),
                        "line {} out of range in {:?}",
                        n,
                        msg
                    );
                }
            }
        }
        assert!(errors > 1000, "mutations should mostly fail ({} did)", errors);
    }

    #[test]
    fn a_broken_profile_breaks_only_itself() {
        let c = parse(
            Path::new(FILE),
            "[profiles.a]\nipv6 = false\n[profiles.b]\ncomand = [\"sh\"]\n",
        )
        .unwrap();
        assert!(c.profile("a").is_ok());
        assert!(c.profile("default").is_ok());
        let e = c.profile("b").unwrap_err().to_string();
        assert_has(&e, &[FILE, ":4:", "profiles.b.comand", "unknown key"]);
        let w = c.warnings(Some("a"));
        assert_eq!(w.len(), 1);
        assert_has(&w[0], &["profile \"b\"", ":4:"]);
        assert!(c.warnings(Some("b")).is_empty());
        // Outside a profile an error still fails the whole file.
        assert!(parse(Path::new(FILE), "runtime_dir = \"rel\"\n[profiles.a]\n").is_err());
    }

    #[test]
    fn caps_narrow_the_default_set_and_never_widen_it() {
        let c = ok("[profiles.d]\ncaps = [\"setuid\", \"CAP_CHOWN\"]\n");
        assert_eq!(c.profile("d").unwrap().caps, ["CAP_CHOWN", "CAP_SETUID"]);
        assert_eq!(c.profile("default").unwrap().caps.len(), DEFAULT_CAPS.len());
        for bad in ["NET_ADMIN", "CAP_NET_RAW", "SYS_ADMIN", "SYS_PTRACE", "ALL"] {
            let e = err(&format!("[profiles.d]\ncaps = [\"{bad}\"]\n"));
            assert_has(
                &e,
                &[
                    ":2:",
                    "profiles.d.caps",
                    "expected an array of capabilities from: CHOWN",
                ],
            );
        }
        assert_has(
            &err("[profiles.d]\ncaps = [\"KILL\", \"CAP_KILL\"]\n"),
            &["listed twice"],
        );
        assert!(
            !ok("[profiles.d]\ngit_identity = false\n")
                .profile("d")
                .unwrap()
                .git_identity
        );
        assert_ne!(
            ok("[profiles.d]\ncaps = [\"KILL\"]\n")
                .profile("d")
                .unwrap()
                .fingerprint(),
            Profile::builtin("d").fingerprint()
        );
    }
}
