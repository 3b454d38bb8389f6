//! The thin syscall layer. Every `unsafe` and every `libc::` of the crate
//! lives under this folder (a repository test enforces it, see
//! `tests::no_unsafe_or_libc_outside_sys`), each `unsafe` block with a
//! `// SAFETY:` note; callers get safe functions that take `AsFd` /
//! `BorrowedFd` / `OwnedFd` and return `io::Result`. `rustix` is used where
//! it covers a call; `libc` for the rest. (`nix` is not used.)
//!
//! By concern:
//! - [`fd`]: pipes, fd flags, reads and writes, locks, inherited fds, inotify
//! - [`poll`]: `poll(2)` and the event-loop set [`PollSet`]
//! - [`process`]: ids, signals, [`wait_deadline`], [`ChildSetup`] (between
//!   fork and exec), the doctor's namespace probe
//! - [`ns`]: namespaces, mounts, interface addresses
//! - [`sock`]: the egress gate's sockets: splice relaying, RST on close, raw listeners
//! - [`fs`]: no-follow opens, chmod/chown, [`write_durable`], [`write_replace`]
//! - [`term`]: terminals and PTYs
//! - [`guest`]: what only `lazaret-init` calls (exec, PID 1's reaping, the
//!   network probe's TTL-1 connect)

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub mod fd;
pub mod fs;
pub mod guest;
pub mod ns;
pub mod poll;
pub mod process;
pub mod sock;
pub mod term;

pub use fd::*;
pub use fs::*;
pub use ns::*;
pub use poll::*;
pub use process::*;
pub use term::*;

/// Signal numbers the roles name.
pub use libc::{SIGCHLD, SIGHUP, SIGINT, SIGIO, SIGKILL, SIGPIPE, SIGQUIT, SIGTERM, SIGTSTP, SIGWINCH};

/// Error numbers the roles compare against (`io::Error::raw_os_error`).
pub use libc::{EACCES, EDQUOT, EINVAL, ELOOP, ENOMEM, ENOSPC, ENOSYS, EPERM, EPIPE, EUSERS, EXDEV};
/// Used by `lazaret-init` and tests only.
#[allow(unused_imports)] // unused in the `lazaret` binary; `lazaret-init` and the tests use them
pub use libc::{ENOENT, ENOTDIR};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

pub mod hostenv;
#[cfg(test)]
mod tests;
