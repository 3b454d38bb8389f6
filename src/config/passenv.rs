//! Host environment passed by name (`pass_env` in a profile, `-e KEY` and
//! `-e KEY=VALUE` on `lazaret run`/`exec`).
//!
//! The client reads the values from its own environment and sends them to
//! the coordinator in its `Open` message over the Domain socket; the
//! coordinator writes them only into that session's process spec, which
//! reaches `runsc exec` through a pipe (`--process=/proc/self/fd/3`). So a
//! value never appears in the argv of a host process, in the store or in
//! the coordinator's log, and only the session that asked for it gets it.

use std::fmt;

use crate::config::{is_reserved_env, valid_env_name};

/// Largest value accepted for one variable (the whole session spec must
/// fit a pipe buffer).
pub const MAX_VALUE: usize = 16 * 1024;

/// Why a passed variable is refused (a usage error of the CLI).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassEnvError {
    /// `-e` with a malformed or reserved name (the name as given).
    BadFlag(String),
    /// `-e KEY` for a variable the environment does not have.
    Unset(String),
    /// A value over [`MAX_VALUE`] bytes (its variable).
    TooLong(String),
    /// A value with a NUL byte (its variable).
    Nul(String),
}

impl fmt::Display for PassEnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PassEnvError::BadFlag(name) => write!(
                f,
                "-e {:?}: expected KEY or KEY=VALUE with KEY matching [A-Za-z_][A-Za-z0-9_]* (not LAZARET_*)",
                crate::display::escape(name)
            ),
            PassEnvError::Unset(name) => write!(
                f,
                "-e {name}: {name} is not set in your environment; set it or pass -e {name}=VALUE"
            ),
            PassEnvError::TooLong(name) => write!(f, "the value of {name} is longer than {MAX_VALUE} bytes"),
            PassEnvError::Nul(name) => write!(f, "the value of {name} contains a NUL byte"),
        }
    }
}

impl std::error::Error for PassEnvError {}

/// The variables a session gets, in order: the profile's `pass_env` names
/// that are set in the client's environment (unset ones are skipped), then
/// each `-e` flag (`KEY` takes the client's value and must be set;
/// `KEY=VALUE` is literal). A later entry replaces an earlier one of the
/// same name. Pure: `lookup` reads the environment.
pub fn resolve(
    pass_env: &[String],
    flags: &[String],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, PassEnvError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| {
        out.retain(|(n, _)| n != k);
        out.push((k.to_string(), v));
    };
    for name in pass_env {
        if let Some(v) = lookup(name) {
            check_value(name, &v)?;
            put(name, v);
        }
    }
    for f in flags {
        let (name, value) = match f.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (f.as_str(), None),
        };
        if !valid_env_name(name) || is_reserved_env(name) {
            return Err(PassEnvError::BadFlag(f.split('=').next().unwrap_or("").to_string()));
        }
        let value = match value {
            Some(v) => v,
            None => lookup(name).ok_or_else(|| PassEnvError::Unset(name.to_string()))?,
        };
        check_value(name, &value)?;
        put(name, value);
    }
    Ok(out)
}

fn check_value(name: &str, v: &str) -> Result<(), PassEnvError> {
    if v.len() > MAX_VALUE {
        return Err(PassEnvError::TooLong(name.to_string()));
    }
    if v.contains('\0') {
        return Err(PassEnvError::Nul(name.to_string()));
    }
    Ok(())
}

/// What the coordinator accepts from a client as passed variables (pure):
/// valid names, none of Lazaret's own, bounded values. Anything else is
/// dropped.
pub fn accepted(env: &[(String, String)]) -> Vec<(String, String)> {
    env.iter()
        .filter(|(k, v)| {
            k != "TERM" && valid_env_name(k) && !is_reserved_env(k) && v.len() <= MAX_VALUE && !v.contains('\0')
        })
        .cloned()
        .collect()
}

/// What of the client's environment the coordinator starts with (and the
/// supervisor, runsc and the helpers after it, which inherit it): only what
/// Lazaret and its helpers read. Everything else, the passed variables
/// (`passed`) included, stays with the client, so a key passed by name is
/// never in the environment of a long-lived host process (escalated host
/// commands get a fixed environment of their own).
pub const COORDINATOR_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REGISTRY_AUTH_FILE",
    "DOCKER_CONFIG",
    // The developer's SSH agent, for a profile with `[ssh_agent]` (issue 51):
    // a path; the coordinator asks it for signatures the developer approved.
    "SSH_AUTH_SOCK",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// The coordinator's environment (pure): the [`COORDINATOR_ENV`] names and
/// Lazaret's own `LAZARET_*` switches from `vars`, minus every name in
/// `passed`.
pub fn coordinator_env(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    passed: &[(String, String)],
) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    vars.into_iter()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            (COORDINATOR_ENV.contains(&name.as_ref()) || name.starts_with("LAZARET_"))
                && !passed.iter().any(|(p, _)| *p == name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "API_KEY" => Some("s3cret".into()),
            "OTHER" => Some("o".into()),
            _ => None,
        }
    }

    #[test]
    fn pass_env_then_flags_later_wins() {
        let got = resolve(
            &["API_KEY".into(), "UNSET".into()],
            &["OTHER".into(), "API_KEY=override".into(), "X=a=b".into(), "E=".into()],
            env,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                ("OTHER".to_string(), "o".to_string()),
                ("API_KEY".to_string(), "override".to_string()),
                ("X".to_string(), "a=b".to_string()),
                ("E".to_string(), String::new()),
            ]
        );
    }

    #[test]
    fn bad_flags_are_errors() {
        assert!(resolve(&[], &["UNSET".into()], env)
            .unwrap_err()
            .to_string()
            .contains("not set"));
        assert!(resolve(&[], &["9X=1".into()], env)
            .unwrap_err()
            .to_string()
            .contains("KEY=VALUE"));
        assert!(resolve(&[], &["LAZARET_SESSION=x".into()], env)
            .unwrap_err()
            .to_string()
            .contains("LAZARET_"));
        assert!(resolve(&[], &["=x".into()], env).is_err());
        assert!(resolve(&[], &[format!("BIG={}", "x".repeat(MAX_VALUE + 1))], env).is_err());
    }

    #[test]
    fn the_coordinator_starts_without_passed_or_unknown_variables() {
        let vars = [
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("ANTHROPIC_API_KEY", "sk"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("LAZARET_FAULT", "x"),
            ("HTTPS_PROXY", "p"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let got = coordinator_env(vars, &[("HTTPS_PROXY".into(), "p".into())]);
        let names: Vec<String> = got.iter().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["PATH", "HOME", "LAZARET_FAULT"]);
    }

    #[test]
    fn coordinator_drops_reserved_and_bad_names() {
        let got = accepted(&[
            ("TERM".into(), "xterm".into()),
            ("LAZARET_SESSION".into(), "forged".into()),
            ("A-B".into(), "x".into()),
            ("OK".into(), "v".into()),
        ]);
        assert_eq!(got, [("OK".to_string(), "v".to_string())]);
    }
}
