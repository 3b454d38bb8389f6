//! Files and paths: no-follow opens, permission changes, durable writes.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::cpath;

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

/// Empties the regular file at `path` without following a symlink or
/// blocking on a FIFO, so its bytes are freed even while a writer still
/// holds it open (an unlink alone keeps them until the writer closes).
pub fn truncate_nofollow(path: &Path) -> io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    f.set_len(0)
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

/// What an open file description's lock of a byte range becomes
/// ([`ofd_lock`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeLock {
    Read,
    Write,
    Unlock,
}

/// Sets (or drops) an OFD lock of bytes `start..start + len` of the file
/// `fd` is open on (`len` 0: to the end of the file and beyond), without
/// waiting: `Ok(false)` when a lock another open file holds conflicts (a
/// host process's POSIX lock, or another OFD lock). A lock is the open
/// file description's: a later lock of the same range through it replaces
/// the earlier one (no conflict with itself), and closing its last fd
/// drops it. A write lock needs `fd` open for writing, a read lock open
/// for reading.
pub fn ofd_lock(fd: impl AsFd, how: RangeLock, start: i64, len: i64) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = match how {
        RangeLock::Read => libc::F_RDLCK,
        RangeLock::Write => libc::F_WRLCK,
        RangeLock::Unlock => libc::F_UNLCK,
    } as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a valid fd and a pointer to a live `flock`.
    let r = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// Whether a lock another open file holds conflicts with a write lock of
/// bytes `start..start + len` (`F_OFD_GETLK`; an error counts as no).
pub fn range_locked_elsewhere(fd: impl AsFd, start: i64, len: i64) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: `flock` is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a valid fd and a pointer to a live `flock`.
    let r = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    r == 0 && fl.l_type != libc::F_UNLCK as libc::c_short
}

/// Writes all of `data` at the end of the file `fd` is open on, wherever
/// that is when the kernel writes it (`pwritev2` with `RWF_APPEND`: atomic
/// against other appenders, as an `O_APPEND` write is), whatever the fd's
/// own flags.
pub fn write_at_end(fd: impl AsFd, mut data: &[u8]) -> io::Result<()> {
    use rustix::io::ReadWriteFlags;
    while !data.is_empty() {
        match rustix::io::pwritev2(&fd, &[io::IoSlice::new(data)], 0, ReadWriteFlags::APPEND) {
            Ok(0) => return Err(io::Error::from_raw_os_error(libc::EIO)),
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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
    write_tmp_then_rename(path, tmp, data, mode, true)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// [`write_durable`] without the fsyncs: atomic for readers (the old or
/// the new content, never a torn file), not across a crash. For runtime
/// files that do not outlive their Domain.
pub fn write_replace(path: &Path, tmp: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    write_tmp_then_rename(path, tmp, data, mode, false)
}

fn write_tmp_then_rename(path: &Path, tmp: &Path, data: &[u8], mode: u32, sync: bool) -> io::Result<()> {
    let _ = std::fs::remove_file(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp)?;
    let written = f.write_all(data).and_then(|_| if sync { f.sync_all() } else { Ok(()) });
    drop(f);
    if let Err(e) = written.and_then(|_| std::fs::rename(tmp, path)) {
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    Ok(())
}

/// Opens the directory `path` as a handle (`O_PATH`), refusing a symlink
/// at its last component.
pub fn open_dir_handle(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    Ok(f.into())
}

/// Opens the directory `rel` beneath `dir` as a handle (`O_PATH`) with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`:
/// the kernel refuses any step that leaves `dir` (`EXDEV`) or meets a
/// symlink, at any component (`ELOOP`). `rel` empty is `dir` itself.
pub fn open_dir_beneath(dir: impl AsFd, rel: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let p = cpath(rel)?;
    // SAFETY: open_how is plain data; zeroed is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 reads a NUL-terminated path and an open_how of the
    // size passed; it returns a new fd or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_fd().as_raw_fd(),
            p.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// The kernel's file handle of the file `fd` is open on (`O_PATH` will
/// do): handle type, then its bytes (`name_to_handle_at`), then its birth
/// time where the filesystem keeps one. It names that very file without
/// holding it open: filesystems put the inode number and its generation in
/// the handle, so a file that later gets the same inode number has another
/// handle (and, on a filesystem whose handles carry no generation, another
/// birth time). None where the filesystem gives no handle (EOPNOTSUPP).
pub fn file_handle(fd: impl AsFd) -> Option<Box<[u8]>> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Handle {
        bytes: libc::c_uint,
        kind: libc::c_int,
        data: [u8; libc::MAX_HANDLE_SZ as usize],
    }
    let mut h = Handle {
        bytes: libc::MAX_HANDLE_SZ as libc::c_uint,
        kind: 0,
        data: [0; libc::MAX_HANDLE_SZ as usize],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: a valid fd, an empty C string, and a handle buffer whose
    // `bytes` field says how much room follows the header.
    let r = unsafe {
        libc::name_to_handle_at(
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            (&mut h as *mut Handle).cast(),
            &mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    let n = h.bytes as usize;
    if r != 0 || n > h.data.len() {
        return None;
    }
    let mut out = Vec::with_capacity(4 + n + 12);
    out.extend_from_slice(&h.kind.to_ne_bytes());
    out.extend_from_slice(&h.data[..n]);
    let btime = rustix::fs::StatxFlags::BTIME;
    if let Ok(x) = rustix::fs::statx(&fd, "", rustix::fs::AtFlags::EMPTY_PATH, btime) {
        if x.stx_mask & btime.bits() != 0 {
            out.extend_from_slice(&x.stx_btime.tv_sec.to_ne_bytes());
            out.extend_from_slice(&x.stx_btime.tv_nsec.to_ne_bytes());
        }
    }
    Some(out.into_boxed_slice())
}

/// What an open fd is: (device, inode).
pub fn fd_identity(fd: impl AsFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Removes `dir/name` and everything below it, never following a symlink:
/// every lookup is relative to a directory fd opened `O_NOFOLLOW`, names
/// come from `getdents`. A directory of ours the sandbox closed (mode
/// 0000, or without write permission) is opened up (0700) through an
/// `O_PATH` fd of exactly that directory first. What belongs to another
/// id stays (the error says which).
pub fn remove_tree_nofollow(dir: &Path, name: &std::ffi::OsStr) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let parent = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    remove_at(&parent, name, 0)
}

fn remove_at(parent: &std::os::fd::OwnedFd, name: &std::ffi::OsStr, depth: usize) -> io::Result<()> {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    const MAX_DEPTH: usize = 512;
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?);
    }
    if depth >= MAX_DEPTH {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let open_up = || -> io::Result<()> {
        let p = rustix::fs::openat(
            parent,
            name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        // The magic link is the inode just opened, never a path walk.
        Ok(rustix::fs::chmod(
            format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&p)),
            Mode::from_raw_mode(0o700),
        )?)
    };
    let sub = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
        Ok(f) => f,
        Err(rustix::io::Errno::ACCESS) => {
            open_up()?;
            rustix::fs::openat(parent, name, flags, Mode::empty())?
        }
        Err(e) => return Err(e.into()),
    };
    if st.st_mode & 0o300 != 0o300 {
        let _ = rustix::fs::fchmod(&sub, Mode::from_raw_mode(0o700));
    }
    let mut names = Vec::new();
    let mut d = rustix::fs::Dir::read_from(&sub)?;
    while let Some(e) = d.read() {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(std::ffi::OsString::from(
                std::os::unix::ffi::OsStrExt::from_bytes(n) as &std::ffi::OsStr
            ));
        }
    }
    for n in names {
        remove_at(&sub, &n, depth + 1)?;
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}
