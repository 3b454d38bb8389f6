//! The `lazaret state` commands' errors and their exit codes.

use std::fmt;

// ---- errors ---------------------------------------------------------------------

#[derive(Debug)]
pub enum StateError {
    /// Bad input: unknown Domain, bad flag combination (exit 2).
    Usage(String),
    /// The state is in use: refused (exit 2).
    InUse(String),
    /// Something failed while working (exit 125).
    Failed(String),
}

impl StateError {
    pub fn code(&self) -> i32 {
        match self {
            StateError::Usage(_) | StateError::InUse(_) => crate::exit::Exit::Usage.code(),
            StateError::Failed(_) => crate::exit::Exit::Failure.code(),
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            StateError::Usage(m) | StateError::InUse(m) | StateError::Failed(m) => f.write_str(m),
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, StateError>;

pub(super) fn failed(what: &str, e: impl fmt::Display) -> StateError {
    StateError::Failed(format!("{what}: {e}"))
}
