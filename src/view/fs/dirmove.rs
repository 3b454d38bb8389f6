//! A small directory the sandbox made on the host side, renamed to a name
//! that is Domain-side (ignored): `cargo` makes `target/` as a temporary
//! directory next to it and renames it into place, with no fallback for
//! EXDEV. The view copies the directory into the store, checks that the
//! host copy did not change meanwhile, renames the copy into place and
//! removes the host directory; its nodes move to the store with it. A
//! directory that is large, holds anything hidden, protected, open,
//! hard-linked or special, or has Domain-side entries below it, is
//! refused with EXDEV as before (`mv` copies it entry by entry).

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use fuser::{Errno, RenameFlags};
use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};

use crate::sys;
use crate::view::budget;

use super::host::{each_entry, errno, resolve, split, Side};
use super::table::{Handle, OwnNames};
use super::View;

/// Most entries (the directory included) a directory may hold to be moved
/// into the store by the view.
pub(super) const DIR_MOVE_ENTRIES: usize = 256;
/// Most bytes of file data it may hold.
pub(super) const DIR_MOVE_BYTES: u64 = 8 << 20;

/// One entry of the directory being moved: its path below the directory
/// (empty: the directory itself) and its host attributes when read.
struct Entry {
    below: PathBuf,
    st: rustix::fs::Stat,
}

impl View {
    /// RENAME of host directory `from` (node `id`) to the Domain-side name
    /// `to` (`newname` in store directory `nprel`). EXDEV when the view
    /// declines (see the module's text).
    pub(super) fn move_dir_to_store(
        &self,
        id: u64,
        from: &Path,
        to: &Path,
        nprel: &Path,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || self.stat(Side::Store, from).is_ok() {
            return Err(Errno::EXDEV);
        }
        let entries = self.small_host_tree(from)?;
        if self.any_open(&entries) {
            return Err(Errno::EXDEV);
        }
        self.scaffold(nprel)?;
        let d2 = self.dir(Side::Store, nprel)?;
        match rustix::fs::statat(&d2, newname, AtFlags::SYMLINK_NOFOLLOW) {
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(errno(e)),
            Ok(_) if flags.contains(RenameFlags::RENAME_NOREPLACE) => return Err(Errno::EEXIST),
            Ok(st) if st.st_mode & sys::S_IFMT != sys::S_IFDIR => return Err(Errno::ENOTDIR),
            // An empty directory there is replaced, as rename(2) does;
            // renameat below answers ENOTEMPTY for any other.
            Ok(_) => {}
        }
        // The copy counts against the Domain's disk budget like any write
        // to the store (ENOSPC past the cap), the host files it replaces
        // no longer do.
        let blocks: i64 = entries.iter().map(|e| budget::on_disk(&e.st)).sum();
        let held = match self.budget_for(Side::Store) {
            Some(b) => Some(b.reserve(blocks.max(0) as u64)?),
            None => None,
        };
        let mut tmp_name = newname.to_os_string();
        tmp_name.push(format!(".lazaret-move-{id}"));
        // Its top first: an entry already at the name (left by a view that
        // stopped mid-move, or made there) is not the view's to remove.
        if rustix::fs::mkdirat(&d2, &tmp_name, Mode::from_raw_mode(0o700)).is_err() {
            return Err(Errno::EXDEV);
        }
        if let Err(e) = self.copy_tree(from, &entries, &d2, &tmp_name) {
            remove_tree(&d2, &tmp_name);
            return Err(e);
        }
        // A host process that changed the directory while it was copied:
        // nothing is moved (its change must not be lost).
        if self
            .small_host_tree(from)
            .map_or(true, |now| !same_tree(&entries, &now))
        {
            remove_tree(&d2, &tmp_name);
            return Err(Errno::EXDEV);
        }
        let store_paths: Vec<PathBuf> = entries.iter().map(|e| join(to, &e.below)).collect();
        let host_paths: Vec<PathBuf> = entries.iter().map(|e| join(from, &e.below)).collect();
        let store_refs: Vec<&Path> = store_paths.iter().map(PathBuf::as_path).collect();
        let host_refs: Vec<&Path> = host_paths.iter().map(PathBuf::as_path).collect();
        let _own_store = OwnNames::new(&self.t, Side::Store, &store_refs);
        if let Err(e) = rustix::fs::renameat(&d2, &tmp_name, &d2, newname) {
            remove_tree(&d2, &tmp_name);
            return Err(errno(e));
        }
        let _own_host = OwnNames::new(&self.t, Side::Host, &host_refs);
        // Deepest first: the directory itself is last.
        for (e, rel) in entries.iter().zip(&host_paths).rev() {
            let (parent, name) = split(rel);
            let fl = if e.st.st_mode & sys::S_IFMT == sys::S_IFDIR {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            };
            let gone = self
                .dir(Side::Host, parent)
                .and_then(|d| rustix::fs::unlinkat(&d, name, fl).map_err(errno));
            if let Err(err) = gone {
                // What a host process added meanwhile stays on the host
                // (the moved copy is in the store): nothing is lost.
                log::warn!(
                    "ignored paths: {} was moved to the store but stays on the host: {err:?}",
                    crate::display::escape_path(rel)
                );
            }
        }
        if let Some(h) = held {
            h.settle(0, blocks);
        }
        if let Some(b) = self.budget_for(Side::Host) {
            b.changed(blocks, 0);
        }
        if let Some(w) = &self.watch {
            for (e, rel) in entries.iter().zip(&host_paths) {
                if e.st.st_mode & sys::S_IFMT == sys::S_IFDIR {
                    w.unwatch(rel);
                }
            }
        }
        self.rehome_to_store(&entries, from, to);
        Ok(())
    }

    /// The host tree at `from`, directory first, parents before children,
    /// when it may be moved into the store: at most `DIR_MOVE_ENTRIES`
    /// entries and `DIR_MOVE_BYTES` bytes, only directories, regular files
    /// with one link and symlinks, nothing ignored, hidden or protected,
    /// no repository. EXDEV otherwise.
    fn small_host_tree(&self, from: &Path) -> Result<Vec<Entry>, Errno> {
        let top = self.stat(Side::Host, from)?;
        let mut out = vec![Entry {
            below: PathBuf::new(),
            st: top,
        }];
        let mut bytes = 0u64;
        let mut i = 0;
        while i < out.len() {
            if out[i].st.st_mode & sys::S_IFMT != sys::S_IFDIR {
                i += 1;
                continue;
            }
            let below = out[i].below.clone();
            let rel = join(from, &below);
            let fd = self.dir(Side::Host, &rel)?;
            let mut names: Vec<OsString> = Vec::new();
            each_entry(&fd, |name, _, _| {
                if names.len() + out.len() >= DIR_MOVE_ENTRIES {
                    return Err(Errno::EXDEV);
                }
                names.push(name.to_os_string());
                Ok(())
            })?;
            names.sort();
            for name in names {
                let st = rustix::fs::statat(&fd, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
                let child = rel.join(&name);
                let kind = st.st_mode & sys::S_IFMT;
                let is_d = kind == sys::S_IFDIR;
                let movable = name != ".git"
                    && match kind {
                        sys::S_IFDIR | sys::S_IFLNK => true,
                        sys::S_IFREG => st.st_nlink == 1,
                        _ => false,
                    };
                if !movable
                    || self.ignored(&child, is_d)
                    || self.hidden_entry(&child, st.st_dev, st.st_ino)
                    || self.protected_at(Side::Host, &child)
                    || self.stat(Side::Store, &child).is_ok()
                {
                    return Err(Errno::EXDEV);
                }
                if kind == sys::S_IFREG {
                    bytes += st.st_size.max(0) as u64;
                    if bytes > DIR_MOVE_BYTES {
                        return Err(Errno::EXDEV);
                    }
                }
                out.push(Entry {
                    below: below.join(&name),
                    st,
                });
            }
            i += 1;
        }
        Ok(out)
    }

    /// True when a file of the tree is open through the view (a handle the
    /// kernel holds, a write fd lent out): its writes would go to the host
    /// file the move removes.
    fn any_open(&self, entries: &[Entry]) -> bool {
        let ids: std::collections::HashSet<(u64, u64)> = entries
            .iter()
            .filter(|e| e.st.st_mode & sys::S_IFMT == sys::S_IFREG)
            .map(|e| (e.st.st_dev, e.st.st_ino))
            .collect();
        if ids.is_empty() {
            return false;
        }
        let t = self.t.lock().unwrap();
        let lent = t.nodes.values().any(|n| {
            n.side == Side::Host
                && !n.dir
                && ids.contains(&(n.host_dev, n.host_ino))
                && (n.opening > 0 || n.lent.iter().any(|(w, _)| w.strong_count() > 0))
        });
        lent || t.handles.values().any(|h| match h {
            Handle::File(f) => rustix::fs::fstat(&**f).is_ok_and(|st| ids.contains(&(st.st_dev, st.st_ino))),
            Handle::Dir(_) => false,
        })
    }

    /// Copies the host tree (`entries`, read at `from`) to `name` in store
    /// directory `d2`, with modes and times.
    fn copy_tree(&self, from: &Path, entries: &[Entry], d2: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
        use std::io::{Read, Write};
        for e in entries {
            let dst = Path::new(name).join(&e.below);
            let mode = Mode::from_raw_mode(e.st.st_mode & 0o7777);
            let (parent, leaf) = split(&dst);
            let pd = if parent.as_os_str().is_empty() {
                rustix::fs::openat(
                    d2,
                    ".",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
            } else {
                rustix::fs::openat2(
                    d2,
                    parent,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                    resolve(),
                )
            }
            .map_err(errno)?;
            let src = join(from, &e.below);
            match e.st.st_mode & sys::S_IFMT {
                // The top was made by the caller.
                sys::S_IFDIR if e.below.as_os_str().is_empty() => {}
                sys::S_IFDIR => rustix::fs::mkdirat(&pd, leaf, Mode::from_raw_mode(0o700)).map_err(errno)?,
                sys::S_IFLNK => {
                    let (sp, sn) = split(&src);
                    let target = rustix::fs::readlinkat(&self.dir(Side::Host, sp)?, sn, Vec::new()).map_err(errno)?;
                    rustix::fs::symlinkat(target.as_c_str(), &pd, leaf).map_err(errno)?;
                }
                _ => {
                    let mut s = self.open_path(Side::Host, &src, false)?;
                    let fd = rustix::fs::openat(
                        &pd,
                        leaf,
                        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                        Mode::from_raw_mode(0o600),
                    )
                    .map_err(errno)?;
                    let mut buf = Vec::new();
                    s.read_to_end(&mut buf).map_err(errno)?;
                    std::fs::File::from(fd).write_all(&buf).map_err(errno)?;
                }
            }
            if e.st.st_mode & sys::S_IFMT != sys::S_IFLNK {
                rustix::fs::chmodat(&pd, leaf, mode, AtFlags::empty()).map_err(errno)?;
            }
            let times = times_of(&e.st);
            rustix::fs::utimensat(&pd, leaf, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
        }
        // Directories' times last: their entries changed them.
        for e in entries
            .iter()
            .rev()
            .filter(|e| e.st.st_mode & sys::S_IFMT == sys::S_IFDIR)
        {
            let dst = Path::new(name).join(&e.below);
            let times = times_of(&e.st);
            rustix::fs::utimensat(d2, &dst, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
        }
        Ok(())
    }

    /// After the move: every node at or below host path `from` is now the
    /// store's file at the same place below `to` (same id, so the kernel's
    /// entries stay valid); a node that was at or below `to` in the store
    /// is gone.
    fn rehome_to_store(&self, entries: &[Entry], from: &Path, to: &Path) {
        let stats: Vec<(PathBuf, Option<rustix::fs::Stat>)> = entries
            .iter()
            .map(|e| (e.below.clone(), self.stat(Side::Store, &join(to, &e.below)).ok()))
            .collect();
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let stale: Vec<(u64, PathBuf)> = t
            .by_key
            .iter()
            .filter(|((side, p), _)| *side == Side::Store && p.starts_with(to))
            .map(|((_, p), id)| (*id, p.clone()))
            .collect();
        for (id, p) in stale {
            t.detach(id, Side::Store, &p);
        }
        for (below, st) in stats {
            let old = join(from, &below);
            let Some(id) = t.by_key.remove(&(Side::Host, old.clone())) else {
                continue;
            };
            let Some(n) = t.nodes.get_mut(&id) else { continue };
            let ikey = (Side::Host, n.host_dev, n.host_ino);
            let Some(st) = st else {
                n.gone = true;
                continue;
            };
            let (had_fd, had_handle) = (n.fd.take().is_some(), n.file.take().is_some());
            n.side = Side::Store;
            n.rel = join(to, &below);
            n.aliases.clear();
            n.gone = false;
            n.host_dev = st.st_dev;
            n.host_ino = st.st_ino;
            n.told = None;
            let file = !n.dir;
            if had_fd {
                t.cached_fds -= 1;
            }
            if had_handle {
                t.handles_held -= 1;
            }
            t.writers.remove(&id);
            if t.by_ino.get(&ikey) == Some(&id) {
                t.by_ino.remove(&ikey);
            }
            if file {
                t.by_ino.insert((Side::Store, st.st_dev, st.st_ino), id);
            }
            t.by_key.insert((Side::Store, join(to, &below)), id);
        }
    }
}

/// The access and modification times of `st`, to set on its copy.
fn times_of(st: &rustix::fs::Stat) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.st_atime as _,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: Timespec {
            tv_sec: st.st_mtime as _,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

fn join(top: &Path, below: &Path) -> PathBuf {
    if below.as_os_str().is_empty() {
        top.to_path_buf()
    } else {
        top.join(below)
    }
}

/// The same entries with the same identity, size and change time.
fn same_tree(a: &[Entry], b: &[Entry]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.below == y.below
                && x.st.st_ino == y.st.st_ino
                && x.st.st_size == y.st.st_size
                && (x.st.st_ctime, x.st.st_ctime_nsec) == (y.st.st_ctime, y.st.st_ctime_nsec)
                && (x.st.st_mtime, x.st.st_mtime_nsec) == (y.st.st_mtime, y.st.st_mtime_nsec)
        })
}

/// Removes a partial copy at `name` in store directory `d` (best effort).
fn remove_tree(d: &OwnedFd, name: &OsStr) {
    let Ok(fd) = rustix::fs::openat(
        d,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        let _ = rustix::fs::unlinkat(d, name, AtFlags::empty());
        return;
    };
    let mut names: Vec<(OsString, bool)> = Vec::new();
    let _ = each_entry(&fd, |n, ty, _| {
        names.push((n.to_os_string(), ty == rustix::fs::FileType::Directory));
        Ok(())
    });
    for (n, is_dir) in names {
        if is_dir {
            remove_tree(&fd, &n);
        } else {
            let _ = rustix::fs::unlinkat(&fd, &n, AtFlags::empty());
        }
    }
    let _ = rustix::fs::unlinkat(d, name, AtFlags::REMOVEDIR);
}
