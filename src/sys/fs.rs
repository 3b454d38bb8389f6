//! Files and paths: no-follow opens, permission changes, durable writes.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::{cpath, cvt};

pub use libc::{O_ACCMODE, O_APPEND, O_CLOEXEC, O_DSYNC, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_RDONLY, O_SYNC, O_TRUNC};

/// File type and mode bits of `st_mode`.
pub use libc::{
    S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK, S_ISGID, S_ISUID, S_IWOTH, S_IXGRP,
};

/// Opens a file for reading without following a symlink at its last
/// component and without blocking on FIFOs.
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// chmod without following a symlink in the last component (it fails on a
/// symlink instead).
pub fn chmod_nofollow(path: &Path, mode: u32) -> io::Result<()> {
    let p = cpath(path)?;
    // SAFETY: p is a valid NUL-terminated path.
    cvt(unsafe {
        libc::fchmodat(
            libc::AT_FDCWD,
            p.as_ptr(),
            mode as libc::mode_t,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(|_| ())
}

/// Whether the calling process may write `path` (access(2) with W_OK:
/// real ids, as the kernel checks a later open).
pub fn writable(path: &Path) -> bool {
    rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok()
}

fn ids(uid: Option<u32>, gid: Option<u32>) -> (Option<rustix::fs::Uid>, Option<rustix::fs::Gid>) {
    // SAFETY: from_raw only wraps the number; every value is a valid id to
    // pass to the kernel (-1 would mean "unchanged", which None already says).
    unsafe {
        (
            uid.map(|u| rustix::fs::Uid::from_raw(u)),
            gid.map(|g| rustix::fs::Gid::from_raw(g)),
        )
    }
}

/// Whether any lock on the file `fd` is open on is held through another
/// open file (a host process's POSIX `fcntl` lock, or an OFD lock): the
/// `F_OFD_GETLK` probe of a whole-file write lock. An error counts as not
/// locked (the caller then behaves as it did without the probe).
pub fn locked_elsewhere(fd: impl AsFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    // SAFETY: a valid fd and a pointer to a live `flock`.
    let r = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    r == 0 && fl.l_type != libc::F_UNLCK as libc::c_short
}

/// Whether the file `fd` (opened read-only) is open for writing through
/// any other open file: a read lease (`F_SETLEASE`) is refused exactly
/// then (EAGAIN); one that is granted is released at once. The caller
/// ignores SIGIO (a lease break in that instant signals it). An error
/// other than EAGAIN counts as not open (no probe).
pub fn open_for_write_elsewhere(fd: impl AsFd) -> bool {
    use std::os::fd::AsRawFd;
    let raw = fd.as_fd().as_raw_fd();
    // SAFETY: fcntl on a valid fd with an integer argument.
    let r = unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_RDLCK) };
    if r == 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(raw, libc::F_SETLEASE, libc::F_UNLCK) };
        return false;
    }
    io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// `fchown` of an open file; `None` leaves that id unchanged.
pub fn fchown(fd: impl AsFd, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let (u, g) = ids(uid, gid);
    Ok(rustix::fs::fchown(fd, u, g)?)
}

/// `fchownat(dir, name, AT_SYMLINK_NOFOLLOW)`: changes a symlink itself.
pub fn lchownat(dir: impl AsFd, name: &Path, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let (u, g) = ids(uid, gid);
    Ok(rustix::fs::chownat(
        dir,
        name,
        u,
        g,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// Replaces `path` with `data` so that a crash leaves either the old or the
/// new content, never a torn file: writes `tmp` (created fresh, mode
/// `mode`, never through a symlink), fsyncs it, renames it over `path`, then
/// fsyncs the directory so the rename itself is durable. A failed write
/// (a full disk) leaves no temp file behind.
pub fn write_durable(path: &Path, tmp: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let _ = std::fs::remove_file(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)?;
    let written = f.write_all(data).and_then(|_| f.sync_all());
    drop(f);
    if let Err(e) = written.and_then(|_| std::fs::rename(tmp, path)) {
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}
