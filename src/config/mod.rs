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
//! mode = "slirp"                        # | "none" | "log"
//! hosts = ["api.example.com", "*.github.com", "github.com:22"]  # allow-by-name mode
//! [profiles.NAME.secrets.ANTHROPIC_API_KEY]   # config::secrets
//! from = "env:ANTHROPIC_API_KEY"        # | "file:/PATH" | "cmd:PROGRAM ARGS"
//! hosts = ["api.anthropic.com"]
//! [profiles.NAME.ssh_agent]             # config::ssh_agent
//! keys = ["SHA256:…"]
//! approve = "each"                      # | "session" | "rule"
//! rules = [{ key = "SHA256:…", host = "github.com", user = "git" }, { key = "SHA256:…", namespace = "git" }]
//! ```
//!
//! Parsing uses the small strict TOML reader in [`toml`] below rather than
//! nanoserde's: nanoserde 0.1.37 drops the dots of dotted table headers
//! (`[profiles.dev]` becomes `profilesdev`), rejects keys containing digits
//! (`ipv6`), has no inline tables, files every table that follows a
//! `[[array]]` header into the array element, and silently accepts duplicate
//! keys. The reader here also records the line of every key, so semantic
//! errors point at the right line.

pub mod hostname;
pub mod hosts;
pub mod passenv;
pub mod ports;
pub mod secret_sources;
pub mod secrets;
pub mod ssh_agent;

mod defaults;
#[cfg(test)]
mod doc_keys;
mod fingerprint;
mod model;
#[cfg(test)]
mod tests;
/// A small strict TOML reader.
pub(crate) mod toml;
mod validation;
mod values;

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use self::validation::Schema;

pub use self::defaults::*;
pub use self::fingerprint::*;
pub use self::model::*;
pub use self::validation::*;
pub use self::values::*;

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

/// SR-2: refuses a config file that the sandbox could modify, i.e. one that
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

/// A profile entry as a normalized relative path; None when it is empty,
/// absolute, leaves the workspace, or names `.git`.
pub fn normalize_rel(s: &str) -> Option<String> {
    let mut parts = Vec::new();
    for c in Path::new(s).components() {
        match c {
            Component::Normal(n) => {
                if std::os::unix::ffi::OsStrExt::as_bytes(n).eq_ignore_ascii_case(b".git") {
                    return None;
                }
                parts.push(n.to_str()?.to_string());
            }
            Component::CurDir => {}
            _ => return None,
        }
    }
    if parts.is_empty() || s.contains(['\n', '\t']) {
        return None;
    }
    Some(parts.join("/"))
}

/// Rejects keys of `table` (at `key` in `file`) outside `allowed`, naming
/// the first other one with its line.
fn known_keys(
    file: &std::path::Path,
    table: &toml::Table,
    key: &str,
    allowed: &'static [&'static str],
) -> Result<(), ConfigError> {
    for (k, item) in &table.entries {
        if !allowed.contains(&k.as_str()) {
            return Err(ConfigError::UnknownKey {
                path: file.to_path_buf(),
                line: item.line,
                key: toml::join_key(key, k),
                expected: allowed.to_vec(),
            });
        }
    }
    Ok(())
}
