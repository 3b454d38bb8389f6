//! File descriptors: pipes, flags, reads and writes, locks, inherited fds.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use super::cvt;

#[cfg(test)]
pub use libc::IN_DELETE_SELF;
/// inotify event bits.
pub use libc::{
    IN_ATTRIB, IN_CLOSE_WRITE, IN_CREATE, IN_DELETE, IN_EXCL_UNLINK, IN_IGNORED, IN_ISDIR, IN_MODIFY, IN_MOVED_FROM,
    IN_MOVED_TO, IN_Q_OVERFLOW,
};

/// Standard input, output and error as borrowed fds.
// SAFETY: fds 0, 1 and 2 are open for the whole life of every process of
// ours (std reopens them on /dev/null when missing) and are never closed.
pub const STDIN: BorrowedFd<'static> = unsafe { BorrowedFd::borrow_raw(0) };
// SAFETY: as STDIN.
pub const STDOUT: BorrowedFd<'static> = unsafe { BorrowedFd::borrow_raw(1) };
// SAFETY: as STDIN.
pub const STDERR: BorrowedFd<'static> = unsafe { BorrowedFd::borrow_raw(2) };

/// Takes ownership of an fd that the parent placed at the fixed number
/// `fd` (the process contract of the coordinator and supervisor). Call at
/// most once per number, before anything else could have used it.
pub fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    // Refuse a number that is not open (a missing handover), rather than
    // owning whatever gets that number later.
    rustix::io::fcntl_getfd(borrow_inherited(fd))?;
    // SAFETY: the fd is open (checked above), was handed over by the parent
    // at this number, and the process contract says nothing else in this
    // process owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Borrows an fd that the parent placed at the fixed number `fd` and that
/// this process keeps open until it exits (the supervisor's status pipe).
pub fn borrow_inherited(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: by the process contract the fd stays open (or is absent, when
    // calls on it fail with EBADF, which is memory-safe) for the life of
    // the process.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// A pipe whose both ends are close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

pub fn set_nonblocking(fd: impl AsFd, on: bool) -> io::Result<()> {
    use rustix::fs::OFlags;
    let fl = rustix::fs::fcntl_getfl(&fd)?;
    let fl = if on {
        fl | OFlags::NONBLOCK
    } else {
        fl & !OFlags::NONBLOCK
    };
    Ok(rustix::fs::fcntl_setfl(&fd, fl)?)
}

pub fn set_cloexec(fd: impl AsFd, on: bool) -> io::Result<()> {
    use rustix::io::FdFlags;
    let fl = rustix::io::fcntl_getfd(&fd)?;
    let fl = if on {
        fl | FdFlags::CLOEXEC
    } else {
        fl & !FdFlags::CLOEXEC
    };
    Ok(rustix::io::fcntl_setfd(&fd, fl)?)
}

/// Duplicates `fd` onto `target` (clearing close-on-exec on the copy).
/// Raw numbers: used between fork and exec (async-signal-safe).
pub(super) fn dup2_raw(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 with integer fds; no memory is touched.
    cvt(unsafe { libc::dup2(fd, target) }).map(|_| ())
}

pub fn read(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    read_raw(fd.as_fd().as_raw_fd(), buf)
}

fn read_raw(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

pub fn write(fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::write(fd.as_fd().as_raw_fd(), buf.as_ptr() as *const libc::c_void, buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Writes all of `buf` to an fd, retrying on EINTR and waiting on a
/// non-blocking one.
pub fn write_all(fd: impl AsFd, mut buf: &[u8]) -> io::Result<()> {
    let fd = fd.as_fd();
    while !buf.is_empty() {
        match write(fd, buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                super::poll(&mut [super::PollFd::new(fd, super::POLLOUT)], 1000)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads until EOF or until `buf` is full, retrying on EINTR.
pub fn read_full(fd: impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match read(&fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Non-blocking `flock`. `Ok(false)` when a conflicting lock is held.
fn try_flock(file: &File, op: rustix::fs::FlockOperation) -> io::Result<bool> {
    match rustix::fs::flock(file, op) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Non-blocking exclusive `flock`. `Ok(false)` when someone else holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    try_flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
}

/// Shared `flock`, non-blocking. `Ok(false)` when someone holds it
/// exclusively.
pub fn try_lock_shared(file: &File) -> io::Result<bool> {
    try_flock(file, rustix::fs::FlockOperation::NonBlockingLockShared)
}

/// The inode number of an open fd (of a namespace: its identity).
pub fn fd_inode(fd: impl AsFd) -> io::Result<u64> {
    Ok(rustix::fs::fstat(fd)?.st_ino)
}

/// Peer credentials of a connected Unix socket: (pid, uid). The pid is 0
/// when the peer is in a pid namespace that cannot see it (libc, not
/// rustix's `UCred`, whose pid may not be 0).
pub fn peer_uid(fd: impl AsFd) -> io::Result<(i32, u32)> {
    // SAFETY: cred is zero-initialised (a valid ucred) and cred and len are
    // valid out pointers of the right size.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        cvt(libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        ))?;
        Ok((cred.pid, cred.uid))
    }
}

/// A non-blocking inotify instance watching `dir` for files that were
/// closed after writing or moved in.
pub fn inotify_dir(dir: &Path) -> io::Result<OwnedFd> {
    use rustix::fs::inotify::{self, CreateFlags, WatchFlags};
    let fd = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC)?;
    // MODIFY too: a file that keeps growing is seen while it grows.
    inotify::add_watch(
        &fd,
        dir,
        WatchFlags::CLOSE_WRITE | WatchFlags::MOVED_TO | WatchFlags::MODIFY,
    )?;
    Ok(fd)
}

/// A blocking inotify instance with no watches yet.
pub fn inotify_new() -> io::Result<OwnedFd> {
    use rustix::fs::inotify::{self, CreateFlags};
    Ok(inotify::init(CreateFlags::CLOEXEC)?)
}

/// Watches the directory `dir` (an fd, typically O_PATH, so the watch lands
/// on exactly that directory however its path changes) for `mask`; returns
/// the watch descriptor.
pub fn inotify_watch_fd(inotify: impl AsFd, dir: impl AsFd, mask: u32) -> io::Result<i32> {
    use rustix::fs::inotify::{self, WatchFlags};
    let p = format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd());
    // The magic link resolves to the open directory `dir`.
    Ok(inotify::add_watch(
        inotify,
        p.as_str(),
        WatchFlags::from_bits_retain(mask) | WatchFlags::ONLYDIR,
    )?)
}

pub fn inotify_unwatch(inotify: impl AsFd, wd: i32) {
    // A stale wd yields EINVAL, which is fine to ignore.
    let _ = rustix::fs::inotify::remove_watch(inotify, wd);
}

/// Raises the soft limit of open files to the hard limit.
pub fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let r = getrlimit(Resource::Nofile);
    if r.current < r.maximum {
        let mut n = r;
        n.current = n.maximum;
        let _ = setrlimit(Resource::Nofile, n);
    }
}
