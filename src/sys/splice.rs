//! Zero-copy relaying for the egress gate (`net::gate`): `splice(2)`
//! between a socket and a pipe.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Moves up to `len` bytes from `from` to `to` (one of them a pipe)
/// without copying them through user space; 0 at end of input.
pub fn splice(from: impl AsFd, to: impl AsFd, len: usize) -> io::Result<usize> {
    loop {
        // SAFETY: plain fds borrowed for the call; null offsets (not seekable).
        let n = unsafe {
            libc::splice(
                from.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                to.as_fd().as_raw_fd(),
                std::ptr::null_mut(),
                len,
                libc::SPLICE_F_MOVE,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Grows a pipe's buffer to `size` bytes (best effort: fewer splice calls).
pub fn set_pipe_size(pipe: impl AsFd, size: i32) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed fd with an int argument.
    super::cvt(unsafe { libc::fcntl(pipe.as_fd().as_raw_fd(), libc::F_SETPIPE_SZ, size) }).map(|_| ())
}

/// `SO_LINGER` 0: closing the socket sends a RST (a refusal the peer sees
/// at once) instead of a FIN.
pub fn set_linger_zero(sock: impl AsFd) -> io::Result<()> {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a pointer to a live linger of the right size.
    super::cvt(unsafe {
        libc::setsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}
