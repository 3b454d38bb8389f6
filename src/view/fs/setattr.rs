//! SETATTR: a node's size, mode, owner and times changed through its own
//! fd, or by path.

use std::os::fd::AsRawFd;
use std::path::Path;

use fuser::{Errno, FileHandle, INodeNo, ReplyAttr, TimeOrNow};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::sys;
use crate::view::budget;

use super::attr::{host_mode, host_owner_stays, kill_priv, stored_id, timestamps};
use super::host::{errno, is_dir, resolve, split, Side};
use super::{View, TTL};
impl View {
    /// SETATTR's body (after the count): what the guest asked for, on the
    /// node's own fd or by path, and the reply.
    #[allow(clippy::too_many_arguments)] // the request's own fields
    pub(super) fn set_attributes(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        let (asked_uid, asked_gid) = (uid, gid);
        self.guest_changes(ino);
        let (uid, gid) = if self.raw {
            (uid, gid)
        } else {
            (stored_id(uid), stored_id(gid))
        };
        let r = (|| {
            let (side, rel, protected, gone) = self.node_any(ino)?;
            let pre = match self.handle_stat(ino) {
                Some(Ok((_, _, st, _))) => Some(st),
                _ => self.stat(side, &rel).ok(),
            };
            if protected {
                log::warn!(
                    "git sentry: refused changing attributes of {}",
                    crate::display::escape_path(&rel)
                );
                return Err(Errno::EPERM);
            }
            // An owner the host file may not get, and the mode bits it may
            // not get, are kept Domain-side (shown inside); the host file
            // gets the rest.
            let (uid, gid) = if host_owner_stays(side, uid, gid) {
                (None, None)
            } else {
                (uid, gid)
            };
            if size.is_some() && side == Side::Host && !gone && !rel.as_os_str().is_empty() {
                // Not a file a host process is writing (or has locked).
                self.not_in_use_on_host(ino.0, &rel)?;
            }
            let own = match self.cached_fd(ino) {
                Some(fw) => Some(fw),
                // A file whose names are gone: through its handle.
                None if gone => Some((self.node_file(ino, false)?, false)),
                None => None,
            };
            if let Some((f, w)) = own {
                // The node's own fd: no path walks.
                if let Some(sz) = size {
                    let wf = if w {
                        f.clone()
                    } else {
                        self.node_file_with(ino, true, false)?
                    };
                    self.not_locked_on_host(ino, &wf)?;
                    let st = rustix::fs::fstat(&*wf).map_err(errno)?;
                    self.fresh_for_write(ino, &st, sz > 0 && (sz as i64) < st.st_size)?;
                    kill_priv(&*wf)?;
                    wf.set_len(sz).map_err(errno)?;
                }
                if let Some(m) = mode {
                    let d = is_dir(&rustix::fs::fstat(&*f).map_err(errno)?);
                    rustix::fs::fchmod(&*f, Mode::from_raw_mode(host_mode(side, m, d))).map_err(errno)?;
                }
                if uid.is_some() || gid.is_some() {
                    sys::fchown(&*f, uid, gid).map_err(errno)?;
                }
                if atime.is_some() || mtime.is_some() {
                    rustix::fs::futimens(&*f, &timestamps(atime, mtime)).map_err(errno)?;
                }
                let ttl = if gone { TTL } else { self.ttl(side, &rel) };
                let st = rustix::fs::fstat(&*f).map_err(errno)?;
                return Ok((st, ttl, side, pre));
            }
            let (parent, name) = split(&rel);
            let d = self.dir(side, parent)?;
            let target = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                Path::new(name)
            };
            let d = if rel.as_os_str().is_empty() {
                self.dir(side, &rel)?
            } else {
                d
            };
            if let Some(sz) = size {
                match fh.and_then(|fh| self.file(fh).ok()) {
                    Some(f) => {
                        kill_priv(&*f)?;
                        f.set_len(sz).map_err(errno)?
                    }
                    None => {
                        let fd = rustix::fs::openat2(
                            &d,
                            target,
                            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                            Mode::empty(),
                            resolve(),
                        )
                        .map_err(errno)?;
                        self.not_locked_on_host(ino, &fd)?;
                        let st = rustix::fs::fstat(&fd).map_err(errno)?;
                        self.fresh_for_write(ino, &st, sz > 0 && (sz as i64) < st.st_size)?;
                        kill_priv(&fd)?;
                        rustix::fs::ftruncate(&fd, sz).map_err(errno)?;
                    }
                }
            }
            if let Some(m) = mode {
                let fd = rustix::fs::openat2(
                    &d,
                    target,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    resolve(),
                );
                match fd {
                    Ok(fd) => {
                        use std::os::unix::fs::PermissionsExt;
                        let st = rustix::fs::fstat(&fd).map_err(errno)?;
                        if st.st_mode & sys::S_IFMT != sys::S_IFLNK {
                            let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
                            std::fs::set_permissions(
                                proc,
                                std::fs::Permissions::from_mode(host_mode(side, m, is_dir(&st))),
                            )
                            .map_err(errno)?;
                        }
                    }
                    Err(e) => return Err(errno(e)),
                }
            }
            if uid.is_some() || gid.is_some() {
                sys::lchownat(&d, target, uid, gid).map_err(errno)?;
            }
            if atime.is_some() || mtime.is_some() {
                let times = timestamps(atime, mtime);
                rustix::fs::utimensat(&d, target, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
            }
            Ok((self.stat(side, &rel)?, self.ttl(side, &rel), side, pre))
        })();
        match r {
            Ok((st, ttl, side, pre)) => {
                if side == Side::Host && (mode.is_some() || asked_uid.is_some() || asked_gid.is_some()) {
                    self.keep_guest(&st, mode, asked_uid, asked_gid);
                }
                self.note(ino.0, &st);
                if let Some(pre) = pre {
                    if let (Some(b), Some(_)) = (self.budget_for(side), size) {
                        b.changed(budget::on_disk(&pre), budget::on_disk(&st));
                    }
                    self.changed(ino.0, &pre, &st);
                }
                reply.attr(&ttl, &self.shown(ino.0, side, &st))
            }
            Err(e) => reply.error(e),
        }
    }
}
