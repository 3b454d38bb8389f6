//! `Failure`, a public command's failure (message and exit code), and how
//! it is settled before it is shown.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config;
use crate::domain;
use crate::storage::paths;

/// Exit codes of Lazaret's own failures (a session's exit status is the
/// sandboxed command's).
pub const EXIT_USAGE: i32 = crate::exit::Exit::Usage.code();
pub const EXIT_FAILURE: i32 = crate::exit::Exit::Failure.code();

/// A failure of the CLI: a message and an exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub msg: String,
}

impl Failure {
    pub(crate) fn usage(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_USAGE,
            msg: msg.into(),
        }
    }
    pub(crate) fn runtime(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

macro_rules! usage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure { Failure::usage(e.to_string()) }
        }
    )*};
}
impl From<crate::storage::state::StateError> for Failure {
    fn from(e: crate::storage::state::StateError) -> Failure {
        Failure {
            code: e.code(),
            msg: e.to_string(),
        }
    }
}

usage_from!(
    config::ConfigError,
    config::passenv::PassEnvError,
    config::ports::PortError,
    domain::DomainError,
    paths::PathError,
    pico_args::Error
);

/// The one place a failure's message and exit code are settled before they
/// are shown: a full disk under the storage root or the runtime dir is
/// said as "no space left on DEVICE (PATH)" whatever step hit it.
pub(super) fn plain_failure(f: Failure) -> Failure {
    if f.code == EXIT_USAGE {
        return f;
    }
    let mut roots = Vec::new();
    if let Ok(s) = paths::storage_root() {
        roots.push(s);
    }
    if let Ok(cfg) = config::load(&config::config_path()) {
        roots.push(paths::runtime_root(cfg.runtime_dir.as_deref()));
    }
    let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
    Failure {
        code: f.code,
        msg: crate::storage::nospace::explain(&f.msg, &refs),
    }
}
