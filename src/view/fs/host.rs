//! Host access by path beneath the view's two roots (the host workspace and
//! the store, `Side`): `openat2` walks that never follow a symlink, handles
//! reopened through `/proc/self/fd`, directory entries, open flags.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use fuser::Errno;
use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::sys;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Side {
    Host,
    Store,
}

/// Paths up to this length go to one `openat2`; longer ones are walked in
/// pieces (PATH_MAX is 4096 per call, the tree below the root may be deeper).
const WALK_CHUNK: usize = 2048;

pub(super) fn errno(e: impl Into<io::Error>) -> Errno {
    Errno::from(e.into())
}

pub(super) fn resolve() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// `openat2(root, p, flags)` beneath `root`, without symlinks, for a path
/// of any length: a long one is walked in pieces of at most `WALK_CHUNK`
/// bytes (whole components), each beneath the directory the last reached,
/// so the whole walk stays beneath `root` as one call would.
pub(super) fn beneath(root: BorrowedFd<'_>, p: &Path, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
    if p.as_os_str().len() <= WALK_CHUNK {
        return rustix::fs::openat2(root, p, flags, mode, resolve());
    }
    let mut pieces: Vec<PathBuf> = vec![PathBuf::new()];
    for c in p.components() {
        let last = pieces.last_mut().expect("one piece");
        if !last.as_os_str().is_empty() && last.as_os_str().len() + c.as_os_str().len() + 1 > WALK_CHUNK {
            pieces.push(PathBuf::new());
        }
        pieces.last_mut().expect("one piece").push(c.as_os_str());
    }
    let (final_piece, dirs) = pieces.split_last().expect("one piece");
    let mut cur: Option<OwnedFd> = None;
    for d in dirs {
        let at = cur.as_ref().map_or(root, |f| f.as_fd());
        let next = rustix::fs::openat2(
            at,
            d,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            resolve(),
        )?;
        cur = Some(next);
    }
    let at = cur.as_ref().map_or(root, |f| f.as_fd());
    rustix::fs::openat2(at, final_piece, flags, mode, resolve())
}

/// `/proc/self/fd/N` of a handle: opening it reaches the very file the
/// handle holds (renamed, replaced or unlinked since), nothing else.
pub(super) fn proc_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// A read (or read-write, else write-only) fd of the file `handle` holds.
pub(super) fn reopen(handle: &OwnedFd, write: bool) -> Result<File, Errno> {
    let p = proc_path(handle);
    let open = |fl: OFlags| rustix::fs::open(&p, fl | OFlags::CLOEXEC | OFlags::NONBLOCK, Mode::empty()).map_err(errno);
    let fd = if write {
        open(OFlags::RDWR).or_else(|_| open(OFlags::WRONLY))?
    } else {
        open(OFlags::RDONLY)?
    };
    Ok(File::from(fd))
}

pub(super) fn open_root(p: &Path) -> io::Result<(OwnedFd, u64)> {
    let fd = rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    Ok((fd, st.st_dev))
}

pub(super) fn is_dir(st: &rustix::fs::Stat) -> bool {
    st.st_mode & sys::S_IFMT == sys::S_IFDIR
}

/// Calls `f(name, type, inode)` for every entry of the directory `dir`
/// but `.` and `..`, read through a descriptor of its own (so `dir`'s
/// offset is untouched); the first error `f` returns ends the walk.
pub(super) fn each_entry(
    dir: &OwnedFd,
    mut f: impl FnMut(&OsStr, rustix::fs::FileType, u64) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    let mut entries = rustix::fs::Dir::read_from(&fd).map_err(errno)?;
    while let Some(ent) = entries.read() {
        let ent = ent.map_err(errno)?;
        let name = OsStr::from_bytes(ent.file_name().to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        f(name, ent.file_type(), ent.ino())?;
    }
    Ok(())
}

pub(super) fn split(rel: &Path) -> (&Path, &OsStr) {
    (
        rel.parent().unwrap_or(Path::new("")),
        rel.file_name().unwrap_or(OsStr::new("")),
    )
}

pub(super) fn open_flags(flags: i32) -> OFlags {
    let keep = sys::O_ACCMODE | sys::O_APPEND | sys::O_NONBLOCK | sys::O_SYNC | sys::O_DSYNC | sys::O_TRUNC;
    OFlags::from_bits_retain((flags & keep) as u32) | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

pub(super) fn writes(flags: i32) -> bool {
    flags & sys::O_ACCMODE != sys::O_RDONLY || flags & sys::O_TRUNC != 0
}
