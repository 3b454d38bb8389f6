//! The configuration's data model: the parsed config, its profiles,
//! recipes, escalation and limits, and what can be wrong with a file.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::toml::join_key;
use super::values::{ImageSource, Prefix, Volume};

/// Name of the profile that always exists.
pub const DEFAULT_PROFILE: &str = "default";

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

/// An image recipe: a debootstrap of a Debian suite with packages, or
/// another built image (`base = "NAME"`) with more packages; then its
/// `run` steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipe {
    /// The Debian suite (`base = "debian:SUITE"`); `None`: the host's.
    pub suite: Option<String>,
    /// Package names (sorted, unique).
    pub packages: Vec<String>,
    /// `base = "NAME"`: the built image (`default` or a recipe's) this one
    /// starts from instead of a debootstrap.
    pub from: Option<String>,
    /// `run`: shell command lines run in order in the image at build time,
    /// as root, with the network (`npm install -g …`).
    pub run: Vec<String>,
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
    /// Whether extra arguments after `argv` are still approved (host
    /// Git's are checked by `escalation::git_trailing`; any other
    /// program's must match `trailing_args`).
    pub allow_trailing_args: bool,
    /// `trailing_args`: the patterns each trailing argument must match
    /// (`escalation::pattern_matches`); required for trailing arguments of
    /// a program other than Git.
    pub trailing_args: Vec<String>,
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
    /// What the Domain may reach: `network.mode` and whether any host is
    /// named (settled once, by [`Profile::with_global_hosts`]).
    pub egress: EgressMode,
    /// The names the Domain may reach (allow-by-name mode, docs/network.md):
    /// `[network] hosts` first, then the profile's `network.hosts`, without
    /// duplicates.
    pub hosts: Vec<crate::config::hosts::HostPattern>,
    /// How many of `hosts` come from `[network] hosts` (the first ones):
    /// those enter the join fingerprint, not the profile's.
    pub global_hosts: usize,
    /// `network.idle_timeout_s`: the egress gate closes a relayed
    /// connection after this many seconds without a byte either way.
    pub idle_timeout_s: u32,
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
    /// `host_config`: workspace paths (root-relative, literal) host tools
    /// execute or obey, served Domain-side in addition to the table of
    /// `view::hosttool::table`.
    pub host_config: Vec<String>,
    /// `host_config_writable`: root-relative literal paths taken out of the
    /// host-tool files, with everything below them (the sandbox writes the
    /// host's files there: a host-execution risk).
    pub host_config_writable: Vec<String>,
    /// `host_hooks`: what a Domain start does when a host hook or
    /// configured Git program runs code the analysis cannot decide
    /// (`view::hostexec`, docs/git.md).
    pub host_hooks: HostHooks,
    /// `[profiles.NAME.secrets.VAR]`: keys the sandbox sees only as
    /// sentinels (`config::secrets`), in file order.
    pub secrets: Vec<crate::config::secrets::Secret>,
    /// `[profiles.NAME.ssh_agent]`: the developer's agent keys the
    /// sandbox may ask to sign with, and how each use is approved.
    /// Host-side: not part of the fingerprint.
    pub ssh_agent: Option<crate::config::ssh_agent::SshAgent>,
}

/// A profile's egress: `network.mode` together with whether any host is
/// named (docs/network.md). The one place the mode is derived is
/// [`EgressMode::of`]; everything else matches on this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EgressMode {
    /// `network.mode = "none"`: loopback only, no network helper.
    None,
    /// `network.mode = "slirp"` without hosts: every destination the
    /// address lists (`allow`, `deny`, the default deny list) leave open.
    Open,
    /// `network.mode = "slirp"` with hosts: only the names of `hosts`,
    /// through the egress gate.
    ByName,
    /// `network.mode = "log"`: the egress gate allows every name and logs it.
    Log,
}

impl EgressMode {
    /// The mode of `network.mode = mode` (a valid value of the key) when
    /// the profile names hosts or not.
    pub fn of(mode: &str, any_host: bool) -> Option<EgressMode> {
        Some(match mode {
            "none" => EgressMode::None,
            "slirp" if any_host => EgressMode::ByName,
            "slirp" => EgressMode::Open,
            "log" => EgressMode::Log,
            _ => return None,
        })
    }

    /// The word `net show --json` (`egress`) and `doctor` use.
    pub fn word(self) -> &'static str {
        match self {
            EgressMode::None => "none",
            EgressMode::Open => "open",
            EgressMode::ByName => "by-name",
            EgressMode::Log => "log",
        }
    }

    /// The value of `network.mode` that gives this mode.
    pub fn config_value(self) -> &'static str {
        match self {
            EgressMode::None => "none",
            EgressMode::Open | EgressMode::ByName => "slirp",
            EgressMode::Log => "log",
        }
    }

    /// Whether the Domain has a network (slirp4netns) at all.
    pub fn networked(self) -> bool {
        self != EgressMode::None
    }

    /// Whether the sandbox's traffic goes through the egress gate.
    pub fn gated(self) -> bool {
        matches!(self, EgressMode::ByName | EgressMode::Log)
    }
}

impl Profile {
    /// The profile with `[network] hosts` (`global`) put first in its
    /// `hosts` (without duplicates) and its egress mode settled for them.
    pub fn with_global_hosts(mut self, global: &[crate::config::hosts::HostPattern]) -> Profile {
        let own = self.hosts.split_off(self.global_hosts);
        let mut hosts: Vec<crate::config::hosts::HostPattern> = global.to_vec();
        for h in own {
            if !hosts.contains(&h) {
                hosts.push(h);
            }
        }
        self.hosts = hosts;
        self.global_hosts = global.len();
        if let Some(e) = EgressMode::of(self.egress.config_value(), !self.hosts.is_empty()) {
            self.egress = e;
        }
        self
    }

    /// The profile's own `network.hosts` (not `[network] hosts`'s).
    pub fn own_hosts(&self) -> &[crate::config::hosts::HostPattern] {
        &self.hosts[self.global_hosts..]
    }

    /// `[network] hosts`, as this profile carries it.
    pub fn global_hosts(&self) -> &[crate::config::hosts::HostPattern] {
        &self.hosts[..self.global_hosts]
    }
}

/// `host_hooks`: warn (one line at each Domain start, the default) or
/// refuse to start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum HostHooks {
    #[default]
    Warn,
    Refuse,
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
    /// SR-2: the config file is inside the workspace.
    InsideWorkspace { path: PathBuf, workspace: PathBuf },
    /// SR-2: the config file is under a volume's host path.
    InsideVolume {
        path: PathBuf,
        host: PathBuf,
        guest: String,
    },
}

impl Config {
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
