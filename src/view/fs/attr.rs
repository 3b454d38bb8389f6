//! What the sandbox is shown of a file and what it may set on one:
//! attributes and times for the kernel, the guest owner, and the owners and
//! modes a host file does not get (kept Domain-side, shown inside).

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, Request, TimeOrNow};
use rustix::fs::{AtFlags, Mode};

use crate::sys;

use super::host::{errno, is_dir, Side};
use super::View;

/// The guest uid (and gid) the developer appears as: 0 (root), or the
/// profile `user`'s id ([`crate::config::GUEST_USER_UID`]). Files owned by
/// the developer (id 0 in the supervisor's user namespace) are shown with
/// it, and a `chown` to it stores the developer, so a session of that user
/// owns the workspace it edits and the host user owns what it writes. One
/// value per supervisor process (it serves one Domain), set before any view
/// is served.
static GUEST_OWNER: AtomicU32 = AtomicU32::new(0);

/// Sets [`GUEST_OWNER`] (the supervisor, from its `--views` file).
pub fn set_guest_owner(id: u32) {
    GUEST_OWNER.store(id, Ordering::Relaxed);
}

/// The id the sandbox sees for a stored owner id.
pub(super) fn shown_id(id: u32) -> u32 {
    if id == 0 {
        GUEST_OWNER.load(Ordering::Relaxed)
    } else {
        id
    }
}

/// The owner id stored for one the sandbox asks for.
pub(super) fn stored_id(id: Option<u32>) -> Option<u32> {
    let owner = GUEST_OWNER.load(Ordering::Relaxed);
    id.map(|i| if owner != 0 && i == owner { 0 } else { i })
}

/// Host workspace files stay the developer's: the sandbox's root holds
/// CAP_CHOWN, but a `chown` to any id other than its own (0 here, the
/// developer on the host) would hand host files to a subordinate id the
/// developer cannot edit as. Such a `chown` is kept Domain-side instead
/// (`Guest`): it succeeds and shows inside. The Domain's own storage may
/// be chowned.
pub(super) fn host_owner_stays(side: Side, uid: Option<u32>, gid: Option<u32>) -> bool {
    side == Side::Host && (uid.is_some_and(|u| u != 0) || gid.is_some_and(|g| g != 0))
}

/// Host workspace modes stay ones the developer would grant: no
/// set-user-ID or set-group-ID file (any local user who can reach the
/// workspace could run it as the developer) and nothing writable by every
/// user. The sandbox holds FOWNER and FSETID, so the view strips these bits
/// itself; the Domain's own storage keeps any mode.
pub(super) fn host_mode(side: Side, mode: u32, dir: bool) -> u32 {
    let m = mode & 0o7777;
    if side != Side::Host {
        return m;
    }
    let strip = sys::S_ISUID | sys::S_IWOTH | if dir { 0 } else { sys::S_ISGID };
    m & !strip
}

/// `wanted` with group and other given no access the host file's mode
/// `had` does not give them: each keeps at most the read and write bits it
/// had, and gets execute (search, for a directory) only where it can read,
/// which gives it nothing it could not do with a copy. A 0600 file stays
/// 0600 after `chmod 644`, `755` or `+x` (0700); a 0644 file becomes 0755
/// after `chmod 755`; a 0640 file 0750. Owner and the set-id and sticky
/// bits pass as `wanted` has them (pure).
pub(super) fn cap_class_bits(wanted: u32, had: u32) -> u32 {
    let read_write = had & 0o066;
    let exec_where_readable = (had & 0o044) >> 2;
    wanted & (0o7700 | read_write | exec_where_readable)
}

/// A host view's files by host identity (device, inode): the mode each
/// had when the sandbox first changed it, or the mode the sandbox made it
/// with. In memory, for the view's life: a file first changed in a later
/// generation takes its mode then. Bounded by the files the sandbox
/// changes.
#[derive(Default)]
pub(super) struct VolumeModes(std::sync::Mutex<std::collections::HashMap<(u64, u64), Seen>>);

/// What a volume's view knows of a host file's mode.
#[derive(Clone, Copy)]
enum Seen {
    /// The host's file: its mode when the sandbox first changed it.
    Host(u32),
    /// The sandbox made it (a new file, an editor's save-aside): its modes
    /// are the sandbox's own, as on any file it creates.
    Made,
}

impl VolumeModes {
    /// The mode a chmod to `mode` gives host file `st` (its current
    /// stat): [`host_mode`], and for a file the host had, group and other
    /// get no access they did not have ([`cap_class_bits`]). Owner bits
    /// are the developer's own and pass.
    pub(super) fn capped(&self, st: &rustix::fs::Stat, mode: u32) -> u32 {
        let now = st.st_mode & 0o7777;
        let seen = *self
            .0
            .lock()
            .unwrap()
            .entry((st.st_dev, st.st_ino))
            .or_insert(Seen::Host(now));
        let wanted = host_mode(Side::Host, mode, is_dir(st));
        match seen {
            Seen::Made => wanted,
            Seen::Host(first) => cap_class_bits(wanted, first | now),
        }
    }

    /// The sandbox made `st` (also over a stale entry of a reused inode
    /// number): a later chmod is not capped (an editor's atomic save makes
    /// its temporary file 0600 and then gives it the original's mode).
    pub(super) fn made(&self, st: &rustix::fs::Stat) {
        self.0.lock().unwrap().insert((st.st_dev, st.st_ino), Seen::Made);
    }

    /// The last name of `st` is gone: its inode number may be reused.
    pub(super) fn gone(&self, st: &rustix::fs::Stat) {
        self.0.lock().unwrap().remove(&(st.st_dev, st.st_ino));
    }

    #[cfg(test)]
    pub(super) fn knows(&self, st: &rustix::fs::Stat) -> bool {
        self.0.lock().unwrap().contains_key(&(st.st_dev, st.st_ino))
    }
}

pub(super) fn kind(mode: u32) -> FileType {
    match mode & sys::S_IFMT {
        sys::S_IFDIR => FileType::Directory,
        sys::S_IFLNK => FileType::Symlink,
        sys::S_IFIFO => FileType::NamedPipe,
        sys::S_IFSOCK => FileType::Socket,
        sys::S_IFCHR => FileType::CharDevice,
        sys::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

pub(super) fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        // Before 1970: `sec` is negative, `nsec` still counts forward.
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

/// A time as (seconds, nanoseconds) since 1970, negative seconds before.
pub(super) fn timespec(t: SystemTime) -> rustix::fs::Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => rustix::fs::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: d.subsec_nanos() as _,
        },
        Err(e) => {
            // fuser 0.18 makes a request's time before 1970 as
            // `UNIX_EPOCH - (|sec|, nsec)` (its own TODO): undo exactly that.
            let d = e.duration();
            rustix::fs::Timespec {
                tv_sec: -(d.as_secs() as i64),
                tv_nsec: d.subsec_nanos() as _,
            }
        }
    }
}

pub(super) fn attr(ino: u64, st: &rustix::fs::Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime as i64, st.st_atime_nsec as i64),
        mtime: time(st.st_mtime as i64, st.st_mtime_nsec as i64),
        ctime: time(st.st_ctime as i64, st.st_ctime_nsec as i64),
        crtime: UNIX_EPOCH,
        kind: kind(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: shown_id(st.st_uid),
        gid: shown_id(st.st_gid),
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

pub(super) fn timestamps(atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) -> rustix::fs::Timestamps {
    let ts = |t: Option<TimeOrNow>| match t {
        None => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => timespec(t),
    };
    rustix::fs::Timestamps {
        last_access: ts(atime),
        last_modification: ts(mtime),
    }
}

/// The attributes of a negative entry (node id 0).
pub(super) fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// Clears set-user-ID and set-group-ID (with group execute) before data
/// changes, as a write by an unprivileged owner would: the view writes with
/// CAP_FSETID, which would keep them.
pub(super) fn kill_priv(f: impl AsFd) -> Result<(), Errno> {
    let mode = rustix::fs::fstat(&f).map_err(errno)?.st_mode;
    let sgid = sys::S_ISGID | sys::S_IXGRP;
    if mode & sys::S_ISUID != 0 || mode & sgid == sgid {
        let keep = mode & 0o7777 & !sys::S_ISUID & !(if mode & sgid == sgid { sys::S_ISGID } else { 0 });
        rustix::fs::fchmod(&f, Mode::from_raw_mode(keep)).map_err(errno)?;
    }
    Ok(())
}

impl View {
    /// In a storage view, the entry `name` just made in `d` belongs to the
    /// requester (the kernel overlay creates with the owner's fsuid).
    pub(super) fn own_new(&self, req: &Request, d: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
        if !self.raw || (req.uid() == 0 && req.gid() == 0) {
            return Ok(());
        }
        sys::lchownat(d, Path::new(name), Some(req.uid()), Some(req.gid())).map_err(errno)
    }

    /// The attributes the sandbox sees for a file on `side`: the host's,
    /// with what it keeps Domain-side (`Guest`) in their place.
    pub(super) fn shown(&self, id: u64, side: Side, st: &rustix::fs::Stat) -> FileAttr {
        let mut a = attr(id, st);
        if self.raw {
            (a.uid, a.gid) = (st.st_uid, st.st_gid);
        }
        if side == Side::Host {
            if let Some(g) = self.guest.lock().unwrap().get(&(st.st_dev, st.st_ino)) {
                if let Some(u) = g.uid {
                    a.uid = u;
                }
                if let Some(gid) = g.gid {
                    a.gid = gid;
                }
                if let Some(m) = g.mode.filter(|_| st.st_mode & 0o7777 == g.host_mode) {
                    a.perm = m as u16;
                }
            }
        }
        a
    }

    /// The mode a chmod to `mode` gives the file `st` on `side`
    /// ([`host_mode`]; in a volume, [`VolumeModes::capped`]).
    pub(super) fn chmod_mode(&self, side: Side, st: &rustix::fs::Stat, mode: u32) -> u32 {
        match &self.volume {
            Some(v) if side == Side::Host => v.capped(st, mode),
            _ => host_mode(side, mode, is_dir(st)),
        }
    }

    /// Keeps Domain-side what a chmod or chown of host file `st` asked for
    /// and the host file does not get. `mode`: the requested bits,
    /// `given`: the bits the view's chmod gave the host file (none: not
    /// known), `uid` and `gid`: the ids as the sandbox named them.
    pub(super) fn keep_guest(
        &self,
        st: &rustix::fs::Stat,
        mode: Option<u32>,
        given: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
    ) {
        let key = (st.st_dev, st.st_ino);
        let mut all = self.guest.lock().unwrap();
        let mut g = all.get(&key).copied().unwrap_or_default();
        let dir = is_dir(st);
        // What the host file got (`host_mode`, and in a volume never a
        // widened mode) is compared with what was asked for.
        let host = st.st_mode & 0o7777;
        g.host_mode = host;
        if let Some(m) = mode {
            let m = m & 0o7777;
            // A host chmod between the view's and its stat: the host's
            // mode is the file's now, and shows (nothing asked is kept).
            let raced = given.is_some_and(|given| given & 0o7777 != host);
            g.mode = (host != m && !raced).then_some(m);
        }
        for (want, slot) in [(uid, &mut g.uid), (gid, &mut g.gid)] {
            if let Some(i) = want {
                // The developer's own id (shown as the guest owner) is the host's.
                *slot = (stored_id(Some(i)) != Some(0)).then_some(i);
            }
        }
        if (uid.is_some() || gid.is_some()) && !dir {
            // A chown clears set-user-ID, and set-group-ID with group
            // execute, as the kernel does.
            if let Some(m) = g.mode {
                let sgid = sys::S_ISGID | sys::S_IXGRP;
                let mut k = m & !sys::S_ISUID;
                if m & sgid == sgid {
                    k &= !sys::S_ISGID;
                }
                g.mode = (host != k).then_some(k);
            }
        }
        if g.uid.is_none() && g.gid.is_none() && g.mode.is_none() {
            all.remove(&key);
        } else {
            all.insert(key, g);
        }
    }

    /// A host entry just made with mode bits the host may not get: the
    /// sandbox sees the bits it asked for.
    pub(super) fn keep_new_mode(&self, side: Side, d: &OwnedFd, name: &OsStr, mode: u32) {
        if side != Side::Host {
            return;
        }
        if let Ok(st) = rustix::fs::statat(d, name, AtFlags::SYMLINK_NOFOLLOW) {
            self.keep_new_mode_of(side, &st, mode);
        }
    }

    /// The same for the entry `st` (a new file's `fstat`: the file made,
    /// whatever was renamed onto its name since).
    pub(super) fn keep_new_mode_of(&self, side: Side, st: &rustix::fs::Stat, mode: u32) {
        if side != Side::Host {
            return;
        }
        if let Some(v) = &self.volume {
            v.made(st);
        }
        if host_mode(side, mode, is_dir(st)) != mode & 0o7777 {
            self.keep_guest(st, Some(mode), None, None, None);
        }
    }
}
