//! Calls only the sandbox-side binary (`lazaret-init`, PID 1 of every
//! sandbox, and its network probe) makes. Compiled into every binary that
//! includes `sys`, hence the `dead_code` allowance: the `lazaret` binary
//! does not call these.
#![allow(dead_code)] // the `lazaret` binary compiles these but only `lazaret-init` calls them

use std::ffi::CString;
use std::io;

use super::{ignore_signal, PollFd, POLLOUT};

/// Replaces this process with `argv[0]` (looked up on `PATH` unless it has
/// a `/`), SIGPIPE restored to its default. Returns only on failure, with
/// the error of the exec.
pub fn exec_path(argv: &[CString]) -> io::Error {
    if argv.is_empty() {
        return io::ErrorKind::InvalidInput.into();
    }
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    super::default_signal(libc::SIGPIPE);
    // SAFETY: NUL-terminated strings and a NULL-terminated pointer array
    // that outlive the call.
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    io::Error::last_os_error()
}

// ---- PID 1 ---------------------------------------------------------------------

extern "C" fn wake_only(_: libc::c_int) {}

/// Blocks `sigs` and gives them a handler that does nothing, so they stay
/// pending until [`suspend_until_signal`] lets them interrupt it; `ignore`
/// is ignored outright. For a PID 1 before it has children.
pub fn block_for_suspend(sigs: &[libc::c_int], ignore: &[libc::c_int]) {
    // SAFETY: the set is zero-initialised and filled by sigemptyset and
    // sigaddset; the handler does nothing (async-signal-safe).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        for &s in sigs {
            libc::signal(s, wake_only as *const () as usize);
        }
    }
    for &s in ignore {
        ignore_signal(s);
    }
}

/// Whether `sig` is pending (blocked and delivered).
pub fn signal_pending(sig: libc::c_int) -> bool {
    // SAFETY: the set is zero-initialised, then filled by sigpending.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        libc::sigismember(&pending, sig) == 1
    }
}

/// Waits, with every signal unblocked, until one is delivered.
pub fn suspend_until_signal() {
    // SAFETY: the empty set is zero-initialised and filled by sigemptyset.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigsuspend(&empty);
    }
}

/// Reaps every child that has exited, without blocking.
pub fn reap_exited_children() {
    let mut status = 0;
    // SAFETY: status is a valid out pointer.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}

/// The session id of `pid`, when it exists.
pub fn getsid(pid: i32) -> Option<i32> {
    // SAFETY: getsid takes an integer.
    let r = unsafe { libc::getsid(pid) };
    (r >= 0).then_some(r)
}

// ---- the network probe ----------------------------------------------------------

/// A TCP connect from a non-blocking socket whose IP TTL is `ttl`, waited
/// for up to `wait`. `Ok(None)`: nothing came back in time; `Ok(Some(r))`:
/// the connect's result (`ConnectionRefused` for a RST). Used by the
/// sandbox's network probe.
pub fn connect_with_ttl(
    addr: std::net::SocketAddrV4,
    ttl: u32,
    wait: std::time::Duration,
) -> io::Result<Option<io::Result<()>>> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_ip_ttl(&sock, ttl)?;
    match rustix::net::connect_v4(&sock, &addr) {
        Ok(()) => return Ok(Some(Ok(()))),
        Err(rustix::io::Errno::INPROGRESS) => {}
        Err(e) => return Ok(Some(Err(e.into()))),
    }
    let mut p = [PollFd::new(&sock, POLLOUT)];
    if super::poll(&mut p, wait.as_millis().min(i32::MAX as u128) as i32)? == 0 {
        return Ok(None);
    }
    Ok(Some(
        rustix::net::sockopt::get_socket_error(&sock)?.map_err(io::Error::from),
    ))
}
