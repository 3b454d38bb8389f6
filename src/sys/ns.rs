//! Namespaces, mounts and the network calls the namespace code needs.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use super::{cpath, cvt};

pub use libc::{CLONE_NEWNET, CLONE_NEWNS, CLONE_NEWUSER, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_REC};

pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    cvt(unsafe { libc::unshare(flags) }).map(|_| ())
}

/// Joins the namespace `fd` of type `nstype` (a `CLONE_NEW*` flag).
pub fn setns(fd: impl AsFd, nstype: libc::c_int) -> io::Result<()> {
    super::process::setns_raw(fd.as_fd().as_raw_fd(), nstype)
}

pub fn mount(source: &str, target: &Path, fstype: &str, flags: libc::c_ulong, data: Option<&str>) -> io::Result<()> {
    let s = CString::new(source)?;
    let t = cpath(target)?;
    let f = CString::new(fstype)?;
    let d = data.map(CString::new).transpose()?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    cvt(unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            f.as_ptr(),
            flags,
            d.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr() as *const libc::c_void),
        )
    })
    .map(|_| ())
}

/// A new network namespace, owned by the caller's user namespace. A
/// short-lived thread unshares it (a netns is per thread), and the
/// returned fd keeps it alive: no holder process.
pub fn new_netns() -> io::Result<OwnedFd> {
    std::thread::spawn(|| -> io::Result<OwnedFd> {
        unshare(libc::CLONE_NEWNET)?;
        Ok(File::open("/proc/thread-self/ns/net")?.into())
    })
    .join()
    .map_err(|_| io::Error::other("netns thread panicked"))?
}

/// Runs `f` on a short-lived thread that has joined the network namespace
/// `ns` (so `/proc/sys/net` and new sockets are that namespace's).
pub fn in_netns<T: Send + 'static>(ns: impl AsFd, f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    let ns = ns.as_fd().try_clone_to_owned()?;
    std::thread::spawn(move || -> io::Result<T> {
        setns(&ns, libc::CLONE_NEWNET)?;
        drop(ns);
        f()
    })
    .join()
    .map_err(|_| io::Error::other("netns thread panicked"))?
}

/// Makes `cmd`'s child join the network namespace `ns` before exec, with
/// PDEATHSIG armed and signal dispositions reset. `ns` stays open until
/// `cmd` is spawned.
pub fn command_in_netns(cmd: &mut std::process::Command, ns: impl AsFd) {
    super::ChildSetup::new()
        .reset_signals()
        .parent_death_signal(libc::SIGKILL)
        .setns(ns, libc::CLONE_NEWNET)
        .apply(cmd);
}

/// Makes `cmd`'s child start with default signal dispositions and die with
/// SIGKILL when its parent dies (for helpers such as fuse-overlayfs).
pub fn kill_with_parent(cmd: &mut std::process::Command) {
    super::ChildSetup::new()
        .reset_signals()
        .parent_death_signal(libc::SIGKILL)
        .apply(cmd);
}

/// Makes `cmd`'s child a PDEATHSIG-coupled helper that finds `fds` at the
/// given numbers (the fds stay open until `cmd` is spawned).
pub fn command_coupled(cmd: &mut std::process::Command, fds: &[(std::os::fd::RawFd, std::os::fd::RawFd)]) {
    super::ChildSetup::new()
        .reset_signals()
        .parent_death_signal(libc::SIGKILL)
        .install_fds(fds)
        .apply(cmd);
}

/// Switches an ethtool feature (`cmd`, e.g. `ETHTOOL_SRXCSUM`) of the
/// interface `name` in the calling thread's network namespace.
pub fn ethtool_set(name: &str, cmd: u32, on: bool) -> io::Result<()> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut val = EthtoolValue {
        cmd,
        data: u32::from(on),
    };
    let sock = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: the ifreq is zeroed (a valid value of this plain C struct).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in name.bytes().take(libc::IFNAMSIZ - 1).enumerate() {
        ifr.ifr_name[i] = b as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut val as *mut EthtoolValue).cast();
    // SAFETY: a socket we own; the ifreq carries a NUL-terminated name and
    // points at `val`, both of which outlive the ioctl.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) }).map(|_| ())
}

/// Sends one netlink request (`NETLINK_ROUTE`, a dump) and returns every
/// datagram of the answer, up to and including the one holding the
/// message that ends it (`NLMSG_DONE` or `NLMSG_ERROR`), for the caller to
/// parse. Fails on a truncated datagram, a silent kernel (2 s) or an
/// answer over `max_datagrams`, never returning a partial dump as whole.
pub fn netlink_route_dump(request: &[u8], max_datagrams: usize) -> io::Result<Vec<Vec<u8>>> {
    // SAFETY: plain socket creation; the fd is owned below.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // SAFETY: `fd` is a fresh socket that nothing else owns.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let tv = libc::timeval { tv_sec: 2, tv_usec: 0 };
    // SAFETY: the option value points to a timeval of the size passed.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    })?;
    // SAFETY: an all-zero sockaddr_nl (pid 0, groups 0) names the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: the buffer and the address are valid for the lengths passed.
    let sent = cvt(unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    } as i32)?;
    if sent as usize != request.len() {
        return Err(io::Error::other("netlink request sent in part"));
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while out.len() < max_datagrams {
        // SAFETY: `buf` is valid for writes of its length; MSG_TRUNC makes
        // the call return the datagram's real length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_TRUNC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        if n > buf.len() {
            return Err(io::Error::other("netlink datagram truncated"));
        }
        let d = buf[..n].to_vec();
        let ends = netlink_ends_dump(&d);
        out.push(d);
        if ends {
            return Ok(out);
        }
    }
    Err(io::Error::other(format!(
        "netlink dump longer than {max_datagrams} datagrams"
    )))
}

/// Whether a datagram holds `NLMSG_DONE` or `NLMSG_ERROR` (headers walked
/// as far as their lengths are sound; the caller's parser judges the rest).
fn netlink_ends_dump(d: &[u8]) -> bool {
    let mut at = 0;
    while at + 16 <= d.len() {
        let len = u32::from_ne_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]) as usize;
        let ty = u16::from_ne_bytes([d[at + 4], d[at + 5]]);
        if ty == libc::NLMSG_DONE as u16 || ty == libc::NLMSG_ERROR as u16 {
            return true;
        }
        if len < 16 {
            return true; // malformed: stop reading, the parser refuses it
        }
        at += (len + 3) & !3;
    }
    false
}

/// Every IPv4 address configured on the interfaces of the calling
/// thread's network namespace.
pub fn ipv4_addrs() -> io::Result<Vec<std::net::Ipv4Addr>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below and only read.
    cvt(unsafe { libc::getifaddrs(&mut head) })?;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family says its type.
            let fam = unsafe { (*ifa.ifa_addr).sa_family } as i32;
            if fam == libc::AF_INET {
                // SAFETY: the family is AF_INET, so it is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                out.push(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}
