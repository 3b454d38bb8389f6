//! The FUSE operations (`impl Filesystem for View`): each request counted
//! and answered, the larger ones through the helpers of the files beside.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow,
};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::sys;
use crate::view::budget;
use crate::view::counts::Op;

use super::attr::{host_mode, host_owner_stays, kill_priv, negative, stored_id, timestamps};
use super::host::{beneath, errno, open_flags, proc_path, resolve, split, writes, Side};
use super::table::Handle;
use super::{ParentMemo, View, TTL, TTL_LONG};

impl Filesystem for View {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _timed = self.counts.add(Op::Lookup);
        let mut negative_ttl = None;
        let r = (|| {
            let (pside, prel, _) = self.node(parent)?;
            let rel = prel.join(name);
            negative_ttl = Some(self.ttl(pside, &rel));
            let (side, a) = self.look_up(pside, &rel)?;
            Ok((a, self.ttl(side, &rel)))
        })();
        match (r, negative_ttl) {
            (Ok((a, ttl)), _) => reply.entry(&ttl, &a, Generation(0)),
            // A negative entry: the kernel remembers the absence as long as
            // it would remember a presence. Creating the name through the
            // view replaces it; a host-side create is invalidated by the
            // watcher.
            (Err(Errno::ENOENT), Some(ttl)) => reply.entry(&ttl, &negative(), Generation(0)),
            (Err(e), _) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let _timed = self.counts.add(Op::Getattr);
        if let Some(f) = fh.and_then(|fh| self.file(fh).ok()) {
            match rustix::fs::fstat(&*f) {
                Ok(st) => {
                    let ttl = self.node(ino).map_or(TTL, |(side, rel, _)| self.ttl(side, &rel));
                    self.note(ino.0, &st);
                    let side = self.node_any(ino).map_or(Side::Host, |n| n.0);
                    return reply.attr(&ttl, &self.shown(ino.0, side, &st));
                }
                Err(e) => return reply.error(errno(e)),
            }
        }
        let r = match self.handle_stat(ino) {
            Some(r) => r,
            None => self.node_stat(ino).map(|(side, rel, st)| (side, rel, st, false)),
        };
        match r {
            Ok((side, rel, st, gone)) => {
                self.note(ino.0, &st);
                let ttl = if gone { TTL } else { self.ttl(side, &rel) };
                reply.attr(&ttl, &self.shown(ino.0, side, &st))
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _timed = self.counts.add(Op::Forget);
        self.forget_node(ino, nlookup)
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _timed = self.counts.add(Op::Setattr);
        let _order = self.in_order(ino.0);
        let (asked_uid, asked_gid) = (uid, gid);
        if size.is_some() {
            // A truncate is a content change the host watcher hears of
            // (IN_MODIFY) and must not relay back. Owner, mode and times
            // come back as IN_ATTRIB, which is never relayed: marking them
            // would hide the host's next edit of the file from watchers
            // inside for `OWN_CHANGE`, as after the relay's own touch.
            self.guest_changes(ino);
        }
        let (uid, gid) = if self.raw {
            (uid, gid)
        } else {
            (stored_id(uid), stored_id(gid))
        };
        // The mode the view's chmod gave the host file (`keep_guest`).
        let given = std::cell::Cell::new(None);
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
            // A regular file with a handle is changed through it: its path
            // may name another file by now (a host rename of it, or of a
            // directory above it, that no lookup has seen yet).
            let regular_handle = self
                .t
                .lock()
                .unwrap()
                .nodes
                .get(&ino.0)
                .and_then(|n| n.file.clone())
                .is_some_and(|h| rustix::fs::fstat(&*h).is_ok_and(|st| st.st_mode & sys::S_IFMT == sys::S_IFREG));
            let own = match self.cached_fd(ino) {
                Some(fw) => Some(fw),
                // A file whose names are gone: through its handle.
                None if gone => Some((self.node_file(ino, false)?, false)),
                // (By its path when it cannot be opened for reading.)
                None if regular_handle => self.node_file(ino, false).ok().map(|f| (f, false)),
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
                    self.under_host_locks(ino, &*wf, || {
                        let st = rustix::fs::fstat(&*wf).map_err(errno)?;
                        self.fresh_for_write(ino, &st, sz > 0 && (sz as i64) < st.st_size)?;
                        kill_priv(&*wf)?;
                        wf.set_len(sz).map_err(errno)
                    })?;
                }
                if let Some(m) = mode {
                    let st = rustix::fs::fstat(&*f).map_err(errno)?;
                    let m = self.chmod_mode(side, &st, m);
                    rustix::fs::fchmod(&*f, Mode::from_raw_mode(m)).map_err(errno)?;
                    given.set(Some(m));
                }
                if uid.is_some() || gid.is_some() {
                    sys::fchown(&*f, uid, gid).map_err(errno)?;
                } else if asked_uid.is_some() || asked_gid.is_some() {
                    // An owner kept Domain-side: the host file's ctime
                    // still moves, as a chown's does (chown(-1, -1)).
                    let _ = sys::fchown(&*f, None, None);
                }
                if atime.is_some() || mtime.is_some() {
                    rustix::fs::futimens(&*f, &timestamps(atime, mtime)).map_err(errno)?;
                }
                let ttl = if gone { TTL } else { self.ttl(side, &rel) };
                let st = rustix::fs::fstat(&*f).map_err(errno)?;
                return Ok((st, ttl, side, pre));
            }
            if let Some(p) = pre {
                // The path must still name this node's file (a directory,
                // a symlink, a file without a handle): nothing else is
                // changed in its place.
                let now = self.stat(side, &rel)?;
                if (p.st_dev, p.st_ino) != (now.st_dev, now.st_ino) {
                    return Err(Errno::ESTALE);
                }
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
            // The node itself, never through a link, beneath the view's root.
            let open_target = |how: OFlags| {
                rustix::fs::openat2(
                    &d,
                    target,
                    how | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    resolve(),
                )
            };
            if let Some(sz) = size {
                match fh.and_then(|fh| self.file(fh).ok()) {
                    Some(f) => {
                        kill_priv(&*f)?;
                        f.set_len(sz).map_err(errno)?
                    }
                    None => {
                        let fd = open_target(OFlags::WRONLY).map_err(errno)?;
                        self.under_host_locks(ino, &fd, || {
                            let st = rustix::fs::fstat(&fd).map_err(errno)?;
                            self.fresh_for_write(ino, &st, sz > 0 && (sz as i64) < st.st_size)?;
                            kill_priv(&fd)?;
                            rustix::fs::ftruncate(&fd, sz).map_err(errno)
                        })?;
                    }
                }
            }
            if let Some(m) = mode {
                match open_target(OFlags::PATH) {
                    Ok(fd) => {
                        use std::os::unix::fs::PermissionsExt;
                        let st = rustix::fs::fstat(&fd).map_err(errno)?;
                        if st.st_mode & sys::S_IFMT != sys::S_IFLNK {
                            let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
                            let m = self.chmod_mode(side, &st, m);
                            std::fs::set_permissions(proc, std::fs::Permissions::from_mode(m)).map_err(errno)?;
                            given.set(Some(m));
                        }
                    }
                    Err(e) => return Err(errno(e)),
                }
            }
            if uid.is_some() || gid.is_some() {
                sys::lchownat(&d, target, uid, gid).map_err(errno)?;
            } else if asked_uid.is_some() || asked_gid.is_some() {
                let _ = sys::lchownat(&d, target, None, None);
            }
            if atime.is_some() || mtime.is_some() {
                let times = timestamps(atime, mtime);
                rustix::fs::utimensat(&d, target, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
            }
            let st = self.stat(side, &rel)?;
            if pre.is_some_and(|p| (p.st_dev, p.st_ino) != (st.st_dev, st.st_ino)) {
                // Another file has the path now: its attributes are not
                // this node's (the kernel would take the node for broken).
                return Err(Errno::ESTALE);
            }
            Ok((st, self.ttl(side, &rel), side, pre))
        })();
        match r {
            Ok((st, ttl, side, pre)) => {
                if side == Side::Host && (mode.is_some() || asked_uid.is_some() || asked_gid.is_some()) {
                    self.keep_guest(&st, mode, given.get(), asked_uid, asked_gid);
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

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _timed = self.counts.add(Op::Readlink);
        match self.readlink_entry(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _timed = self.counts.add(Op::Mknod);
        let _shape = self.shape_guard(name);
        let (side, rel, d) = match self.prepare_new(parent, name, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        let ft = rustix::fs::FileType::from_raw_mode(mode);
        let made = rustix::fs::mknodat(
            &d,
            name,
            ft,
            Mode::from_raw_mode(host_mode(side, mode, false)),
            rdev as u64,
        );
        self.new_entry_reply(req, side, &rel, &d, name, Some(mode), made, reply)
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let _timed = self.counts.add(Op::Mkdir);
        let _shape = self.shape_guard(name);
        let (side, rel, d) = match self.prepare_new(parent, name, true) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        let made = rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(host_mode(side, mode, true)));
        self.new_entry_reply(req, side, &rel, &d, name, Some(mode), made, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Unlink);
        self.remove(parent, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Rmdir);
        self.remove(parent, name, true, reply)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _timed = self.counts.add(Op::Symlink);
        let _shape = self.shape_guard(link_name);
        let (side, rel, d) = match self.prepare_new(parent, link_name, false) {
            Ok(v) => v,
            Err(e) => return reply.error(e),
        };
        if side == Side::Host && self.in_host_git_dir(&rel) {
            log::warn!(
                "git sentry: refused a symlink inside a Git directory: {}",
                crate::display::escape_path(&rel)
            );
            return reply.error(Errno::EPERM);
        }
        let made = rustix::fs::symlinkat(target, &d, link_name);
        self.new_entry_reply(req, side, &rel, &d, link_name, None, made, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _timed = self.counts.add(Op::Rename);
        let _shape = self.shape_guard(newname);
        let r = self.rename_entry(parent, name, newparent, newname, flags);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _timed = self.counts.add(Op::Link);
        match self.link_entry(ino, newparent, newname) {
            Ok((side, nrel, d2)) => self.entry_reply(side, &nrel, &d2, newname, reply),
            Err(e) => reply.error(e),
        }
    }

    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> io::Result<()> {
        use fuser::InitFlags;
        if config.capabilities().contains(InitFlags::FUSE_NO_OPEN_SUPPORT) {
            self.no_open.store(true, Ordering::Relaxed);
        }
        // A safety net under the watcher: a changed mtime or size seen on
        // any attribute refresh drops the file's cached pages.
        let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        // Set-id bits are cleared here (chown by the host kernel, write and
        // truncate by `kill_priv`, whatever the kernel asks), which spares
        // the kernel a GETATTR and a SETATTR around every chown. The host
        // kernel drops `security.capability` when the view writes to or
        // chowns the host file. With v2 the kernel here marks the mount
        // SB_NOSEC and stops asking for `security.capability` (a GETXATTR)
        // before every write to a file it has seen without one: 200 round
        // trips fewer for a 200 MiB write.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV | InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // A listing answers the lookups of its entries too (one request per
        // page of entries, not one per entry).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        Ok(())
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _timed = self.counts.add(Op::Open);
        if self.no_open.load(Ordering::Relaxed) {
            // The kernel takes this as "opens need no round trip" from now on.
            return reply.error(Errno::ENOSYS);
        }
        let r = (|| {
            let (side, rel, protected) = self.node(ino)?;
            if protected && writes(flags.0) {
                log::warn!(
                    "git sentry: refused opening {} for writing",
                    crate::display::escape_path(&rel)
                );
                return Err(Errno::EPERM);
            }
            let p = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel.as_path()
            };
            let counted = self.budget_for(side).filter(|_| flags.0 & sys::O_TRUNC != 0);
            let pre = (flags.0 & sys::O_TRUNC != 0)
                .then(|| self.stat(side, &rel).ok())
                .flatten();
            let fd = beneath(self.root(side)?, p, open_flags(flags.0), Mode::empty()).map_err(errno)?;
            if let (Some(pre), Ok(st)) = (pre, rustix::fs::fstat(&fd)) {
                if let Some(b) = counted {
                    b.changed(budget::on_disk(&pre), budget::on_disk(&st));
                }
                // Truncated by the guest's own open.
                if (pre.st_dev, pre.st_ino) == (st.st_dev, st.st_ino) {
                    self.changed(ino.0, &pre, &st);
                }
            }
            let f = Arc::new(File::from(fd));
            if writes(flags.0) {
                self.lend_held(ino.0, &f);
            }
            Ok(self.add_handle(Handle::File(f)))
        })();
        match r {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let _timed = self.counts.add(Op::Read);
        let r = self.handle_or_node(fh, ino, false).and_then(|f| {
            let _order = self.in_order_to_read(ino.0);
            let pre = rustix::fs::fstat(&*f).ok();
            let mut buf = vec![0u8; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            buf.truncate(n);
            if n < size as usize {
                // The kernel takes a short read for the end of the file.
                self.guest_end(ino, offset + n as u64, false);
            }
            if let (Some(pre), Ok(post)) = (pre, rustix::fs::fstat(&*f)) {
                // A SQLite WAL journal is read frame by frame as its reader's
                // index leads: a read that stops short of the end says
                // nothing of frames a host connection appended after them.
                if offset + n as u64 >= post.st_size as u64 || !super::guards::is_wal(&*f) {
                    self.read_between(ino.0, &pre, &post);
                }
            }
            Ok(buf)
        });
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let _timed = self.counts.add(Op::Write);
        self.guest_changes(ino);
        let r = self.handle_or_node(fh, ino, true).and_then(|f| {
            let _order = self.in_order(ino.0);
            self.under_host_locks(ino, &*f, || {
                let pre = rustix::fs::fstat(&*f).map_err(errno)?;
                let len = data.len() as u64;
                if self.appends(ino, &pre, offset, data) {
                    // Lands at the host file's end, past what a host
                    // process appended since the guest last saw its size.
                    let at = pre.st_size as u64;
                    self.grow_in_place(ino, &f, &pre, budget::growth(&pre, at, len), |f| {
                        sys::write_at_end(f, data).map_err(errno)
                    })?;
                } else if self.at_end(ino, &pre, offset, data) {
                    // Text at the end as both sides see it: at the end at
                    // the moment of the write, so a host append racing it
                    // lands before it, never under it.
                    self.fresh_for_write(ino, &pre, false)?;
                    self.grow_in_place(ino, &f, &pre, budget::growth(&pre, offset, len), |f| {
                        sys::write_at_end(f, data).map_err(errno)
                    })?;
                } else {
                    self.fresh_for_write(ino, &pre, (offset as i64) < pre.st_size)?;
                    self.grow_in_place(ino, &f, &pre, budget::growth(&pre, offset, len), |f| {
                        f.write_all_at(data, offset).map_err(errno)
                    })?;
                }
                // What the kernel now takes the size to be.
                self.guest_end(ino, offset + len, true);
                Ok(())
            })
        });
        self.written(fh, ino);
        match r {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lo: fuser::LockOwner, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Flush);
        // Nothing is buffered here; the kernel stops sending FLUSH. (gVisor
        // keeps its fds of the view open after the guest closes, so FLUSH
        // would say nothing of the guest's close: the view keeps no write
        // fd past the WRITE it answers instead, `View::written`.)
        reply.error(Errno::ENOSYS)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _timed = self.counts.add(Op::Release);
        self.t.lock().unwrap().handles.remove(&fh.0);
        reply.ok()
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Fsync);
        let r = self.handle_or_node(fh, ino, false).and_then(|f| {
            if datasync {
                f.sync_data().map_err(errno)
            } else {
                f.sync_all().map_err(errno)
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _timed = self.counts.add(Op::Opendir);
        match self.node(ino) {
            Ok(_) => {
                let fh = self.add_handle(Handle::Dir(Arc::new(Vec::new())));
                // The kernel keeps listings until the directory changes
                // (through the view, or on the host: see fusewatch).
                reply.opened(
                    FileHandle(fh),
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
                )
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _timed = self.counts.add(Op::Readdir);
        let list = match self.listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        for (i, (ino, ft, name)) in list.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *ft, name) {
                break;
            }
        }
        reply.ok()
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        let _timed = self.counts.add(Op::Readdirplus);
        let _memo = ParentMemo::enter();
        let _rules_memo = crate::view::ignored::AncestorMemo::enter();
        let list = match self.listing(ino, fh, offset) {
            Ok(l) => l,
            Err(e) => return reply.error(e),
        };
        let Ok((side, rel, _)) = self.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        // Every entry has this parent: `ttl` by side, decided once.
        let host_ttl = self.ttl_below(Side::Host, &rel);
        for (i, (ent_ino, _, name)) in list.iter().enumerate().skip(offset as usize) {
            let off = (i + 1) as u64;
            if name == "." || name == ".." {
                // Not looked up by the kernel: attributes only for the form.
                let mut a = negative();
                a.ino = INodeNo(*ent_ino);
                a.kind = FileType::Directory;
                if reply.add(INodeNo(*ent_ino), off, name, &Duration::ZERO, &a, Generation(0)) {
                    break;
                }
                continue;
            }
            // The entry exactly as a LOOKUP would answer it (the same rules).
            let child = rel.join(name);
            let Ok(a) = self.look_up(side, &child) else {
                // Gone since the listing: a plain entry the kernel looks up.
                let mut a = negative();
                a.ino = INodeNo(0);
                if reply.add(INodeNo(0), off, name, &Duration::ZERO, &a, Generation(0)) {
                    break;
                }
                continue;
            };
            let (eside, a) = a;
            let ttl = if eside == Side::Host { host_ttl } else { TTL_LONG };
            if reply.add(a.ino, off, name, &ttl, &a, Generation(0)) {
                // Not sent: the kernel did not get this lookup.
                self.forget(_req, a.ino, 1);
                break;
            }
        }
        reply.ok()
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _timed = self.counts.add(Op::Fallocate);
        // The sandbox's own change, as a write is: its host event is not
        // relayed back inside as a host edit.
        self.guest_changes(ino);
        let r = self.handle_or_node(fh, ino, true).and_then(|f| {
            let _order = self.in_order(ino.0);
            self.under_host_locks(ino, &*f, || {
                let pre = rustix::fs::fstat(&*f).map_err(errno)?;
                // Punching, zeroing or collapsing a range drops bytes; plain
                // allocation keeps them.
                if mode as u32 & !rustix::fs::FallocateFlags::KEEP_SIZE.bits() != 0 {
                    self.fresh_for_write(ino, &pre, (offset as i64) < pre.st_size)?;
                }
                let fl = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
                self.grow_in_place(ino, &f, &pre, budget::fallocate_growth(&pre, fl, offset, length), |f| {
                    rustix::fs::fallocate(f, fl, offset, length).map_err(errno)
                })?;
                if !fl.contains(rustix::fs::FallocateFlags::KEEP_SIZE) {
                    self.guest_end(ino, offset + length, true);
                }
                Ok(())
            })
        });
        self.written(fh, ino);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: fuser::ReplyXattr) {
        let _timed = self.counts.add(Op::Getxattr);
        self.xattr_read_reply(ino, size, reply, |p, buf| rustix::fs::getxattr(p, name, buf))
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        let _timed = self.counts.add(Op::Listxattr);
        self.xattr_read_reply(ino, size, reply, |p, buf| rustix::fs::listxattr(p, buf))
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _timed = self.counts.add(Op::Setxattr);
        if !self.raw {
            return reply.error(Errno::ENOSYS);
        }
        let r = self.xattr_path(ino).and_then(|(p, _keep)| {
            let fl = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
            rustix::fs::setxattr(&p, name, value, fl).map_err(errno)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Removexattr);
        if !self.raw {
            return reply.error(Errno::ENOSYS);
        }
        let r = self
            .xattr_path(ino)
            .and_then(|(p, _keep)| rustix::fs::removexattr(&p, name).map_err(errno));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Releasedir);
        self.t.lock().unwrap().handles.remove(&fh.0);
        reply.ok()
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let _timed = self.counts.add(Op::Fsyncdir);
        reply.ok()
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _timed = self.counts.add(Op::Statfs);
        match rustix::fs::fstatvfs(&self.host) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _timed = self.counts.add(Op::Create);
        let r = self.create_entry(req, parent, name, mode, flags);
        match r {
            Ok((a, ttl, fh)) => reply.created(&ttl, &a, Generation(0), FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }
}

impl View {
    /// LINK's body: the new name, its side and its directory.
    pub(super) fn link_entry(
        &self,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
    ) -> Result<(Side, std::path::PathBuf, std::os::fd::OwnedFd), Errno> {
        let (side, rel, protected) = self.node(ino)?;
        if protected {
            log::warn!(
                "git sentry: refused a hard link to {}",
                crate::display::escape_path(&rel)
            );
            return Err(Errno::EPERM);
        }
        let _shape = self.shape_guard(newname);
        let (nside, nrel, d2) = self.prepare_new(newparent, newname, false)?;
        if nside != side {
            return Err(Errno::EXDEV);
        }
        // The file itself, through its handle, whatever its names are now
        // (a host rename or removal of the name the node knows it by would
        // make the path fail where the guest's own name still reaches it,
        // as on a plain bind). A symlink, or a node without a handle, by
        // its path.
        let handle = self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.file.clone());
        let regular = handle.and_then(|h| {
            rustix::fs::fstat(&*h)
                .ok()
                .filter(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile)
                .map(|st| (h, st))
        });
        let pre = match regular {
            Some((h, st)) => {
                rustix::fs::linkat(rustix::fs::CWD, proc_path(&*h), &d2, newname, AtFlags::SYMLINK_FOLLOW)
                    .map_err(errno)?;
                Some(st)
            }
            None => {
                let want = self.t.lock().unwrap().nodes.get(&ino.0).map(|n| n.host_ino);
                // Only the node's own file: a path that names another one
                // now (replaced on the host) is stale.
                let link = |rel: &std::path::Path| -> Result<Option<rustix::fs::Stat>, Errno> {
                    let (parent, name) = split(rel);
                    let d1 = self.dir(side, parent)?;
                    let pre = self.stat(side, rel)?;
                    if Some(pre.st_ino) != want {
                        return Err(Errno::ESTALE);
                    }
                    rustix::fs::linkat(&d1, name, &d2, newname, AtFlags::empty()).map_err(errno)?;
                    Ok(Some(pre))
                };
                match link(&rel) {
                    // Its path went stale: another name of it may not.
                    Err(e) if e == Errno::ENOENT || e == Errno::ESTALE => match self.refind(ino) {
                        Some((a, _)) => link(&a)?,
                        None => return Err(e),
                    },
                    r => r?,
                }
            }
        };
        // link(2) changes the file's link count and ctime: the guest's
        // own doing.
        if let (Some(pre), Ok(post)) = (pre, self.stat(side, &nrel)) {
            self.changed_meta(side, Some(ino.0), &pre, &post);
        }
        Ok((side, nrel, d2))
    }

    /// READLINK's body: the symlink itself, through its handle, whatever
    /// its names are now (a host rename of it, or of a directory above it,
    /// that no lookup has seen leaves the node's path stale or the node
    /// gone); by its path when it has no handle.
    pub(super) fn readlink_entry(&self, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let (side, rel, _, gone) = self.node_any(ino)?;
        let handle = self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.file.clone());
        let target = match handle {
            Some(h) => rustix::fs::readlinkat(&*h, "", Vec::new()),
            None if gone => return Err(Errno::ENOENT),
            None => {
                let (parent, name) = split(&rel);
                let d = self.dir(side, parent)?;
                rustix::fs::readlinkat(&d, name, Vec::new())
            }
        };
        target.map(|t| t.into_bytes()).map_err(errno)
    }

    /// Answers GETXATTR and LISTXATTR: `read` fills a buffer of the guest's
    /// `size` from the node's path (size 0 asks only how much it needs).
    fn xattr_read_reply(
        &self,
        ino: INodeNo,
        size: u32,
        reply: fuser::ReplyXattr,
        read: impl FnOnce(&Path, &mut [u8]) -> rustix::io::Result<usize>,
    ) {
        let r = self.xattr_path(ino).and_then(|(p, _keep)| {
            let mut buf = vec![0u8; size as usize];
            let n = read(&p, &mut buf[..]).map_err(errno)?;
            buf.truncate(n);
            Ok((n, buf))
        });
        match r {
            Ok((n, _)) if size == 0 => reply.size(n as u32),
            Ok((_, buf)) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    /// Answers MKNOD, MKDIR and SYMLINK once the node `name` in `d` (`rel`
    /// on `side`) was `made`: a new node keeps the guest's `mode` (none for
    /// a symlink) and gets its owner, then is looked up for the reply.
    #[allow(clippy::too_many_arguments)] // what the three callers hold (request, place, outcome, reply); a struct would only rename them
    fn new_entry_reply(
        &self,
        req: &Request,
        side: Side,
        rel: &Path,
        d: &std::os::fd::OwnedFd,
        name: &OsStr,
        mode: Option<u32>,
        made: rustix::io::Result<()>,
        reply: ReplyEntry,
    ) {
        if let Err(e) = made {
            return reply.error(errno(e));
        }
        if let Some(mode) = mode {
            self.keep_new_mode(side, d, name, mode);
        }
        match self.own_new(req, d, name) {
            Ok(()) => self.entry_reply(side, rel, d, name, reply),
            Err(e) => reply.error(e),
        }
    }

    /// Changes open file `f` (node `ino`, `pre` its stat before) in place
    /// by `act`, which may grow it by up to `growth` bytes (WRITE,
    /// FALLOCATE): the budget is reserved first and settled with the size
    /// on disk after, setuid/setgid bits are dropped before, and a
    /// successful change is noted for the node.
    fn grow_in_place(
        &self,
        ino: INodeNo,
        f: &File,
        pre: &rustix::fs::Stat,
        growth: u64,
        act: impl FnOnce(&File) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let room = match self.budget_of(ino) {
            Some(b) => Some(b.reserve(growth)?),
            None => None,
        };
        kill_priv(f)?;
        let done = act(f);
        if let Ok(st) = rustix::fs::fstat(f) {
            if let Some(r) = room {
                r.settle(budget::on_disk(pre), budget::on_disk(&st));
            }
            if done.is_ok() {
                self.changed(ino.0, pre, &st);
            }
        }
        done
    }
}
