//! Making, renaming and removing entries: the checks before a new name is
//! made, the reply that registers it, and the CREATE, RENAME, UNLINK and
//! RMDIR bodies.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileAttr, Generation, INodeNo, RenameFlags, ReplyEmpty, ReplyEntry, Request};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::sys;
use crate::view::budget;

use super::attr::host_mode;
use super::host::{errno, is_dir, open_flags, resolve, Side};
use super::table::{Handle, OwnNames};
use super::View;

impl View {
    /// Common checks for making a new entry `name` in `parent`.
    pub(super) fn prepare_new(
        &self,
        parent: INodeNo,
        name: &OsStr,
        dir: bool,
    ) -> Result<(Side, PathBuf, OwnedFd), Errno> {
        let (pside, prel, _) = self.node(parent)?;
        let rel = prel.join(name);
        let side = self.target_side(pside, &rel, dir);
        if side == Side::Host && (self.protected_at(Side::Host, &rel) || self.git_refused(&rel)) {
            log::warn!("git sentry: refused creating {}", crate::display::escape_path(&rel));
            return Err(Errno::EPERM);
        }
        if side == Side::Store && pside == Side::Host {
            self.scaffold(&prel)?;
        }
        let d = self.dir(side, &prel)?;
        Ok((side, rel, d))
    }

    pub(super) fn entry_reply(&self, side: Side, rel: &Path, d: &OwnedFd, name: &OsStr, reply: ReplyEntry) {
        let _ = (d, name);
        match self.remember(side, rel) {
            Ok(a) => {
                self.made(a.ino.0);
                reply.entry(&self.ttl(side, rel), &a, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// CREATE's body: the new (or opened) file, its attributes, how long
    /// the kernel may keep them, and its handle (0: none, handle-less opens).
    pub(super) fn create_entry(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Result<(FileAttr, Duration, u64), Errno> {
        let _shape = self.shape_guard(name);
        let (side, rel, d) = self.prepare_new(parent, name, false)?;
        self.guest_changed.mark(&rel);
        let no_open = self.no_open.load(Ordering::Relaxed);
        let mut fl = open_flags(flags) | OFlags::CREATE | OFlags::from_bits_retain((flags & sys::O_EXCL) as u32);
        if no_open {
            // The fd becomes the node's cached fd: readable and writable,
            // positioned writes (the kernel computes append offsets).
            fl = (fl - OFlags::RWMODE - OFlags::APPEND) | OFlags::RDWR;
        }
        let asked = mode;
        let mode = Mode::from_raw_mode(host_mode(side, mode, false));
        // Exclusive first, so the view knows whether it made the file.
        let mut truncated = None;
        let (fd, made) = match rustix::fs::openat2(&d, name, fl | OFlags::EXCL, mode, resolve()) {
            Ok(fd) => (fd, true),
            Err(rustix::io::Errno::EXIST) if !fl.contains(OFlags::EXCL) => {
                let counted = self.budget_for(side).filter(|_| fl.contains(OFlags::TRUNC));
                let pre = fl
                    .contains(OFlags::TRUNC)
                    .then(|| rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW).ok())
                    .flatten();
                let fd = rustix::fs::openat2(&d, name, fl, mode, resolve()).map_err(errno)?;
                if let (Some(b), Some(pre), Ok(st)) = (counted, pre, rustix::fs::fstat(&fd)) {
                    b.changed(budget::on_disk(&pre), budget::on_disk(&st));
                }
                truncated = pre;
                (fd, false)
            }
            Err(e) => return Err(errno(e)),
        };
        if made {
            // By the descriptor: a host file renamed onto the name since is
            // not taken for the sandbox's (its mode changes stay capped).
            if let Ok(st) = rustix::fs::fstat(&fd) {
                self.keep_new_mode_of(side, &st, asked);
            }
            self.own_new(req, &d, name)?;
        }
        let a = self.remember(side, &rel)?;
        if made {
            self.made(a.ino.0);
        }
        if let (Some(pre), Ok(post)) = (truncated, rustix::fs::fstat(&fd)) {
            // Truncated by the guest's own open: what it knows follows.
            if (pre.st_dev, pre.st_ino) == (post.st_dev, post.st_ino) {
                self.changed(a.ino.0, &pre, &post);
            }
        }
        let ttl = self.ttl(side, &rel);
        let f = Arc::new(File::from(fd));
        if no_open {
            // With handle-less opens the kernel sends no RELEASE for a
            // created file either: its fd joins the node's cache and the
            // kernel gets no handle.
            self.cache_fd(a.ino.0, f, true);
            return Ok((a, ttl, 0));
        }
        self.lend_held(a.ino.0, &f);
        Ok((a, ttl, self.add_handle(Handle::File(f))))
    }

    /// RENAME's body, under the shape guard of `newname`.
    pub(super) fn rename_entry(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let (pside, prel, _) = self.node(parent)?;
        let (npside, nprel, _) = self.node(newparent)?;
        let from = prel.join(name);
        let to = nprel.join(newname);
        self.guest_changed.mark(&to);
        let (side, st) = self.find(pside, &from)?;
        let id = self.known(side, &from).unwrap_or(u64::MAX);
        let sticky = self.t.lock().unwrap().nodes.get(&id).is_some_and(|n| n.protected);
        let dir = is_dir(&st);
        let nside = self.target_side(npside, &to, dir);
        // A host repository itself keeps its name, as `.git` does.
        let moves_repo = side == Side::Host
            && ((dir && self.host_shape(&from))
                || (flags.contains(RenameFlags::RENAME_EXCHANGE) && self.host_shape(&to)));
        if sticky
            || moves_repo
            || self.protected_at(side, &from)
            || (nside == Side::Host && (self.protected_at(Side::Host, &to) || self.git_refused(&to)))
        {
            log::warn!(
                "git sentry: refused renaming {} to {}",
                crate::display::escape_path(&from),
                crate::display::escape_path(&to)
            );
            return Err(Errno::EPERM);
        }
        if self.host_tool_move(side, &from, &to, flags.contains(RenameFlags::RENAME_EXCHANGE)) {
            return Err(Errno::EXDEV);
        }
        let link = st.st_mode & sys::S_IFMT == sys::S_IFLNK;
        let git_from = side == Side::Host && (self.sentry.in_git_dir(&from) || (dir && self.in_host_git_dir(&from)));
        let git_to =
            nside == Side::Host && (self.sentry.in_git_dir(&to) || ((dir || link) && self.in_host_git_dir(&to)));
        let git = git_from || git_to;
        if git && link && git_to {
            return Err(Errno::EPERM);
        }
        if git && dir {
            return Err(Errno::EXDEV);
        }
        if nside != side {
            if side == Side::Host
                && nside == Side::Store
                && st.st_mode & sys::S_IFMT == sys::S_IFREG
                && !flags.contains(RenameFlags::RENAME_EXCHANGE)
                && self.git_domain_side(&to)
            {
                // A lock file renamed onto a Domain-side Git name.
                return self.move_file_to_store(id, &from, &to, &nprel, newname, flags);
            }
            if side == Side::Host && nside == Side::Store && dir {
                // A small directory made here, renamed into place under
                // an ignored name (cargo's `target/`).
                return self.move_dir_to_store(id, &from, &to, &nprel, newname, flags);
            }
            return Err(Errno::EXDEV);
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            if let Ok((oside, ost)) = self.find(npside, &to) {
                if oside != side || (git && is_dir(&ost)) {
                    return Err(Errno::EXDEV);
                }
            }
        }
        if side == Side::Store {
            self.scaffold(&nprel)?;
        }
        let host_dirs = side == Side::Host && self.rules.is_some();
        if host_dirs && dir {
            self.hide_below(&from)?;
        }
        if host_dirs
            && flags.contains(RenameFlags::RENAME_EXCHANGE)
            && self.stat(Side::Host, &to).is_ok_and(|st| is_dir(&st))
        {
            self.hide_below(&to)?;
        }
        let d1 = self.dir(side, &prel)?;
        let d2 = self.dir(side, &nprel)?;
        let rf = rustix::fs::RenameFlags::from_bits_retain(flags.bits());
        if !flags.contains(RenameFlags::RENAME_EXCHANGE) {
            if side == Side::Host {
                if let Ok(vst) = self.stat(side, &to) {
                    let victim = self.known(side, &to).unwrap_or(u64::MAX);
                    if vst.st_mode & sys::S_IFMT == sys::S_IFREG && vst.st_ino != st.st_ino {
                        self.not_in_use_on_host(victim, &to)?;
                    }
                }
            }
            self.pin(side, &to);
        }
        // Two names of one file: rename(2) leaves both in place.
        let victim = (!flags.contains(RenameFlags::RENAME_EXCHANGE))
            .then(|| self.stat(side, &to).ok())
            .flatten();
        // The file at `to` (replaced, or exchanged) and its node.
        let other = flags
            .contains(RenameFlags::RENAME_EXCHANGE)
            .then(|| self.stat(side, &to).ok())
            .flatten();
        let to_id = self.known(side, &to);
        let same_file = victim
            .as_ref()
            .is_some_and(|t| t.st_ino == st.st_ino && t.st_dev == st.st_dev);
        let _own = OwnNames::new(&self.t, side, &[&from, &to]);
        rustix::fs::renameat_with(&d1, name, &d2, newname, rf).map_err(errno)?;
        if same_file {
            return Ok(());
        }
        if let (Some(v), Some(b)) = (&victim, self.budget_for(side)) {
            if v.st_mode & sys::S_IFMT != sys::S_IFDIR && v.st_nlink <= 1 {
                // The file renamed over lost its last name.
                b.changed(budget::on_disk(v), 0);
            }
        }
        if let Some(v) = &victim {
            if v.st_mode & sys::S_IFMT == sys::S_IFDIR || v.st_nlink <= 1 {
                // As for an unlink: its inode number may be reused by
                // another file, which must not inherit what was kept of it.
                self.guest.lock().unwrap().remove(&(v.st_dev, v.st_ino));
                if let Some(vm) = &self.volume {
                    vm.gone(v);
                }
                self.forget_id(side, v);
            }
            if let Some(post) = self.inode_stat(side, to_id, v) {
                // Its link count and ctime changed, the guest's own doing
                // (its other names, or an open fd, still write it).
                self.changed_meta(side, to_id, v, &post);
            }
        }
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let tmp = PathBuf::from("\0swap");
            self.renamed(side, &to, &tmp);
            self.renamed(side, &from, &to);
            self.renamed(side, &tmp, &from);
            // Both files' ctime changed: the guest's own doing.
            if let Ok(post) = self.stat(side, &to) {
                self.changed_meta(side, Some(id), &st, &post);
            }
            if let (Some(o), Ok(post)) = (&other, self.stat(side, &from)) {
                self.changed_meta(side, to_id, o, &post);
            }
        } else {
            if dir || victim.as_ref().is_some_and(is_dir) {
                self.renamed(side, &from, &to);
            } else {
                self.renamed_file(side, &from, &to);
            }
            // rename(2) changes the file's ctime: the guest's own doing.
            if let Ok(post) = self.stat(side, &to) {
                self.changed_meta(side, Some(id), &st, &post);
            }
            if host_dirs && dir {
                self.store_follows(&from, &to);
                self.dir_moved(&from, &to);
            }
        }
        Ok(())
    }
}

impl View {
    pub(super) fn remove(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        match self.remove_entry(parent, name, dir) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// UNLINK's and RMDIR's body.
    pub(super) fn remove_entry(&self, parent: INodeNo, name: &OsStr, dir: bool) -> Result<(), Errno> {
        {
            let (pside, prel, _) = self.node(parent)?;
            let rel = prel.join(name);
            let (side, st) = self.find(pside, &rel)?;
            if self.protected_at(side, &rel) {
                log::warn!("git sentry: refused removing {}", crate::display::escape_path(&rel));
                return Err(Errno::EPERM);
            }
            let id = self.known(side, &rel).unwrap_or(u64::MAX);
            if self.t.lock().unwrap().nodes.get(&id).is_some_and(|n| n.protected) {
                return Err(Errno::EPERM);
            }
            let d = self.dir(side, &prel)?;
            let fl = if dir { AtFlags::REMOVEDIR } else { AtFlags::empty() };
            if !dir && side == Side::Host && st.st_mode & sys::S_IFMT == sys::S_IFREG {
                self.not_in_use_on_host(id, &rel)?;
            }
            if !dir {
                self.pin(side, &rel);
            }
            let _own = OwnNames::new(&self.t, side, &[&rel]);
            rustix::fs::unlinkat(&d, name, fl).map_err(errno)?;
            self.removed(side, &rel);
            if !dir {
                // unlink(2) changes the file's link count and ctime: the
                // guest's own doing (an open file is still written).
                if let Some(post) = self.inode_stat(side, Some(id), &st) {
                    self.changed_meta(side, Some(id), &st, &post);
                }
            }
            if let (false, true, Some(b)) = (dir, st.st_nlink <= 1, self.budget_for(side)) {
                // The last name: its blocks are given back.
                b.changed(budget::on_disk(&st), 0);
            }
            if dir || st.st_nlink <= 1 {
                // The inode may be reused for another file.
                self.guest.lock().unwrap().remove(&(st.st_dev, st.st_ino));
                if let Some(v) = &self.volume {
                    v.gone(&st);
                }
                self.forget_id(side, &st);
            }
            Ok(())
        }
    }
}
