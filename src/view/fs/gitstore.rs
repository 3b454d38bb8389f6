//! Repository shapes (src/view/gitshape.rs): the protected Git paths and
//! hook locations, and the Git entries kept Domain-side in the store.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use fuser::{Errno, RenameFlags};
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::view::gitshape;

use super::host::{errno, resolve, split, Side};
use super::table::OwnNames;
use super::View;

// ---- repository shapes (src/view/gitshape.rs) ----------------------------------

/// Names whose entry may be Domain-side for the shape rule: `.git`, the
/// shape names, and children of a `worktrees/` or `modules/` directory. No
/// syscall: a lookup of such a name also checks the store.
fn gitshape_candidate(rel: &Path) -> bool {
    let (parent, name) = split(rel);
    is_cow_config(rel)
        || gitshape::is_dotgit(name)
        || gitshape::is_shape_name(name)
        || parent.file_name().is_some_and(|p| p == "worktrees" || p == "modules")
}

/// `DIR/.git/config`: Git's own rewrites of it (`config.lock` renamed onto
/// it, as `git config` and `git submodule init` do) land in a Domain-side
/// copy; the host file never changes.
fn is_cow_config(rel: &Path) -> bool {
    let (parent, name) = split(rel);
    name == "config" && parent.file_name().is_some_and(|p| p == ".git")
}

impl View {
    /// Hook locations read from host Git's configuration (view paths):
    /// read-only inside.
    pub fn with_hooks(mut self, hooks: Vec<PathBuf>) -> View {
        self.hooks = hooks;
        self
    }

    /// Git's execution surface, recomputed as its inputs change: read-only.
    pub fn with_exec(mut self, exec: Option<crate::view::hostexec::Live>) -> View {
        self.exec = exec;
        self
    }

    /// Held from the side decision to the creation of an entry named `name`
    /// when it is a `.git` or shape name.
    pub(super) fn shape_guard(&self, name: &OsStr) -> Option<std::sync::MutexGuard<'_, ()>> {
        (gitshape::is_dotgit(name) || gitshape::is_shape_name(name))
            .then(|| self.shape_lock.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// True when the sandbox may not change the entry at `rel` on `side`:
    /// the Git Sentry's names, host hook locations, and the sensitive paths
    /// of any host directory that is a repository shape now (made before or
    /// during the session). The store is the Domain's own: never protected.
    pub(super) fn protected_at(&self, side: Side, rel: &Path) -> bool {
        side == Side::Host
            && (self.sentry.is_protected(rel)
                || self.hooks.iter().any(|h| {
                    // The location and its ancestors (a renamed ancestor
                    // would let another directory take its place).
                    rel.starts_with(h) || (!rel.as_os_str().is_empty() && h.starts_with(rel))
                })
                || gitshape::sensitive_anchors(rel).iter().any(|a| self.host_shape(a))
                || self.exec.as_ref().is_some_and(|e| e.protects(rel))
                || self.host_tool_read_only(rel))
    }

    fn host_has(&self, rel: &Path) -> bool {
        self.stat(Side::Host, rel).is_ok()
    }

    /// The host directory `dir` is a repository shape (`gitshape::is_shape`).
    pub(super) fn host_shape(&self, dir: &Path) -> bool {
        gitshape::is_shape(&|n| self.host_has(&dir.join(n)))
    }

    /// `rel` lies inside a host Git directory: a `.git` or a shape ancestor.
    pub(super) fn in_host_git_dir(&self, rel: &Path) -> bool {
        if self.sentry.in_git_dir(rel) {
            return true;
        }
        let mut p = rel.parent();
        while let Some(d) = p {
            if self.host_shape(d) {
                return true;
            }
            p = d.parent();
        }
        false
    }

    /// True when a new entry at `rel` (its parent on the host) must not be
    /// made on the host: a `.git` the host lacks, a new linked worktree or
    /// submodule Git directory, or the name completing a repository shape.
    pub(super) fn git_domain_side(&self, rel: &Path) -> bool {
        let (parent, name) = split(rel);
        if !gitshape_candidate(rel) {
            return false;
        }
        if is_cow_config(rel) {
            return true;
        }
        if gitshape::is_dotgit(name) {
            return !self.host_has(rel);
        }
        let slot = gitshape::is_new_gitdir_slot(rel, &|p| {
            self.sentry.in_git_dir(p) || p.parent().is_some_and(|g| self.host_shape(g))
        });
        if slot {
            return !self.host_has(rel);
        }
        gitshape::is_shape_name(name)
            && !self.host_shape(parent)
            && gitshape::completes_shape(name, &|n| self.host_has(&parent.join(n)))
    }

    /// A Domain-side Git entry is wanted but the view has no store (ignored
    /// isolation off, or a common-directory view): refuse.
    pub(super) fn git_refused(&self, rel: &Path) -> bool {
        self.store.is_none() && self.git_domain_side(rel)
    }

    /// The store's entry for a Domain-side Git name under a host parent.
    /// A name the host has is the host's (the store may hold a directory of
    /// that name as scaffolding for deeper entries), except `.git/config`'s
    /// Domain-side copy.
    pub(super) fn git_store_entry(&self, rel: &Path) -> Option<rustix::fs::Stat> {
        if self.store.is_none() || !gitshape_candidate(rel) {
            return None;
        }
        let st = self.stat(Side::Store, rel).ok()?;
        (is_cow_config(rel) || !self.host_has(rel)).then_some(st)
    }

    /// Renames a host regular file onto a Domain-side Git name (Git's
    /// `HEAD.lock` to `HEAD` completing a shape): copies it into the store
    /// under a temporary name, renames that into place, removes the host
    /// file. The node follows the file to the store.
    pub(super) fn move_file_to_store(
        &self,
        id: u64,
        from: &Path,
        to: &Path,
        nprel: &Path,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        use std::io::{Read, Write};
        self.scaffold(nprel)?;
        let d2 = self.dir(Side::Store, nprel)?;
        if flags.contains(RenameFlags::RENAME_NOREPLACE)
            && rustix::fs::statat(&d2, newname, AtFlags::SYMLINK_NOFOLLOW).is_ok()
        {
            return Err(Errno::EEXIST);
        }
        let mut src = self.open_path(Side::Host, from, false)?;
        let mode = rustix::fs::fstat(&src).map_err(errno)?.st_mode & 0o7777;
        let mut tmp_name = newname.to_os_string();
        tmp_name.push(format!(".lazaret-move-{id}"));
        let fd = rustix::fs::openat2(
            &d2,
            &tmp_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(mode),
            resolve(),
        )
        .map_err(errno)?;
        let mut dst = File::from(fd);
        let mut buf = Vec::new();
        src.read_to_end(&mut buf).map_err(errno)?;
        if let Err(e) = dst.write_all(&buf) {
            let _ = rustix::fs::unlinkat(&d2, &tmp_name, AtFlags::empty());
            return Err(errno(e));
        }
        drop(dst);
        self.pin(Side::Store, to);
        rustix::fs::renameat(&d2, &tmp_name, &d2, newname).map_err(errno)?;
        let (fparent, fname) = split(from);
        let d1 = self.dir(Side::Host, fparent)?;
        // The watcher's event of this unlink must not take the name off
        // the node before it is re-homed below (it would be left gone).
        let _own = OwnNames::new(&self.t, Side::Host, &[from]);
        rustix::fs::unlinkat(&d1, fname, AtFlags::empty()).map_err(errno)?;
        let st = self.stat(Side::Store, to)?;
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        // The node the name had: the file replaced, unless a lookup that
        // raced this move already gave the moved file a node of its own
        // (the kernel may hold it; it stays live beside this one).
        let raced = match t.by_key.get(&(Side::Store, to.to_path_buf())).copied() {
            Some(old)
                if t.nodes
                    .get(&old)
                    .is_some_and(|n| (n.host_dev, n.host_ino) == (st.st_dev, st.st_ino)) =>
            {
                Some(old)
            }
            Some(old) => {
                t.detach(old, Side::Store, to);
                None
            }
            None => None,
        };
        if t.by_key.get(&(Side::Host, from.to_path_buf())) == Some(&id) {
            t.by_key.remove(&(Side::Host, from.to_path_buf()));
        }
        if let Some(n) = t.nodes.get_mut(&id) {
            // The node is now the store's copy: nothing of the host file.
            let (had_fd, had_handle) = (n.fd.take().is_some(), n.file.take().is_some());
            let ikey = (n.side, n.host_dev, n.host_ino);
            let aliases = std::mem::take(&mut n.aliases);
            n.side = Side::Store;
            n.rel = to.to_path_buf();
            n.gone = false;
            n.host_dev = st.st_dev;
            n.host_ino = st.st_ino;
            if had_fd {
                t.cached_fds -= 1;
            }
            t.writers.remove(&id);
            if had_handle {
                t.handles_held -= 1;
            }
            for a in aliases {
                if t.by_key.get(&(Side::Host, a.clone())) == Some(&id) {
                    t.by_key.remove(&(Side::Host, a));
                }
            }
            if t.by_ino.get(&ikey) == Some(&id) {
                t.by_ino.remove(&ikey);
            }
            if raced.is_none() {
                t.by_ino.insert((Side::Store, st.st_dev, st.st_ino), id);
                t.by_key.insert((Side::Store, to.to_path_buf()), id);
            }
        }
        Ok(())
    }
}
