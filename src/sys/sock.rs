//! Sockets of the egress gate (`net::gate`): `splice(2)` relaying
//! between a socket and a pipe, RST on close, raw listeners with a filter,
//! transparent listeners.

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

/// `SO_ORIGINAL_DST`: the destination a connection had before the
/// netfilter `REDIRECT` that brought it to this listener (the sidecar
/// gate of `lazaret gate`).
pub fn original_dst(sock: impl AsFd) -> io::Result<std::net::SocketAddrV4> {
    const SO_ORIGINAL_DST: libc::c_int = 80;
    // SAFETY: an all-zero sockaddr_in is a valid value of the type.
    let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into the live `a`.
    super::cvt(unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            &mut a as *mut libc::sockaddr_in as *mut libc::c_void,
            &mut len,
        )
    })?;
    if a.sin_family != libc::AF_INET as libc::sa_family_t {
        return Err(io::Error::other("SO_ORIGINAL_DST: not IPv4"));
    }
    Ok(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
        u16::from_be(a.sin_port),
    ))
}

/// `IP_TRANSPARENT` on a listener: the router's netfilter `tproxy` rule
/// may hand it connections to any address and port (log mode's catch-all
/// listener); their local address stays the one the client chose.
pub fn set_ip_transparent(sock: impl AsFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt with a pointer to a live int of the right size.
    super::cvt(unsafe {
        libc::setsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_IP,
            libc::IP_TRANSPARENT,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

pub use libc::{IPPROTO_TCP, IPPROTO_UDP};

/// One classic BPF instruction (`struct sock_filter`).
pub type BpfInsn = (u16, u8, u8, u32);

/// A raw IPv4 socket for `protocol` (`libc::IPPROTO_TCP`, `IPPROTO_UDP`)
/// that receives a copy of every such packet delivered locally and passing
/// `filter` (classic BPF over the IP header on); receive only.
pub fn raw_listener(protocol: i32, filter: &[BpfInsn]) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) with constant arguments; the fd is owned at once.
    let fd = super::cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol) })?;
    // SAFETY: a fresh fd we own.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let mut insns: Vec<libc::sock_filter> = filter
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect();
    let prog = libc::sock_fprog {
        len: insns.len() as u16,
        filter: insns.as_mut_ptr(),
    };
    // SAFETY: the program points at `insns`, alive for the call; the kernel copies it.
    super::cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &prog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}
