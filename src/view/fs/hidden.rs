//! Ignored paths: what is Domain-side (the rules snapshot, hidden host
//! identities, the original names of host directories the sandbox renamed).

use std::path::Path;

use fuser::Errno;
use rustix::fs::AtFlags;

use super::host::{each_entry, errno, split, Side};
use super::View;

impl View {
    /// `ignored(rel, false) || ignored(rel, true)`, in one walk of the
    /// rules when no directory was moved.
    pub(super) fn ignored_either(&self, rel: &Path) -> bool {
        let Some(r) = &self.rules else { return false };
        if r.is_ignored_either(rel) {
            return true;
        }
        if self.moved_dirs.lock().unwrap().is_empty() {
            return false;
        }
        self.ignored(rel, false) || self.ignored(rel, true)
    }

    pub(super) fn ignored(&self, rel: &Path, dir: bool) -> bool {
        let Some(r) = &self.rules else { return false };
        if r.is_ignored(rel, dir) {
            return true;
        }
        // Below a host directory the sandbox renamed: the rules at its
        // original path hold too (a host process whose cwd is that
        // directory writes a new secret there).
        // Every earlier name: each remembered move maps the path below its
        // directory's current name to the name it had (bounded).
        let moved = self.moved_dirs.lock().unwrap();
        if moved.is_empty() {
            return false;
        }
        let mut names = vec![rel.to_path_buf()];
        let mut i = 0;
        while i < names.len() && names.len() < 64 {
            let cur = names[i].clone();
            i += 1;
            for (now, was) in moved.iter() {
                let Ok(rest) = cur.strip_prefix(now) else { continue };
                if rest.as_os_str().is_empty() {
                    continue;
                }
                let old = was.join(rest);
                if r.is_ignored(&old, dir) {
                    return true;
                }
                if !names.contains(&old) {
                    names.push(old);
                }
            }
        }
        false
    }
}

// ---- ignored paths: what is Domain-side ------------------------------------
//
// A path is Domain-side (served from the ignored store, never the host
// workspace) when the rules snapshot ignores it, or when the host file at
// that name is one whose identity (st_dev, st_ino) is hidden: ignored when
// the Domain first saw it (sticky across generations), or found ignored
// below a host directory the sandbox renamed. Deciding by identity is what
// keeps `/config/master.key` hidden after `mv config c2`.

/// Most entries one directory rename may scan for hidden files; beyond it
/// the rename answers EXDEV (`mv` then copies what it can see).
const HIDE_SCAN_MAX: usize = 200_000;
/// Most renamed host directories remembered per view (`View::dir_moved`).
const MOVED_MAX: usize = 4096;

impl View {
    /// True when the entry at view path `rel` (a directory when `dir`),
    /// whose parent is on `parent_side`, is Domain-side: it lives in the
    /// ignored store and creating, renaming or linking it must not touch
    /// the host workspace.
    pub(crate) fn is_domain_side(&self, parent_side: Side, rel: &Path, dir: bool) -> bool {
        if parent_side == Side::Store {
            return true;
        }
        if self.rules.is_none() {
            return false;
        }
        self.ignored(rel, dir) || self.hidden_host_at(rel)
    }

    /// True when the host file with this identity is hidden: device,
    /// inode and birth time, since a filesystem gives a removed hidden
    /// file's inode number to the next new file (which must not vanish).
    fn is_hidden_id(&self, dev: u64, ino: u64, btime: u64) -> bool {
        self.rules.as_ref().is_some_and(|r| r.is_hidden_id(dev, ino, btime))
            || self
                .more_hidden
                .lock()
                .unwrap()
                .get(&(dev, ino))
                .is_some_and(|&b| crate::view::ignored::same_birth(b, btime))
    }

    /// The host file at view path `rel` (device `dev`, inode `ino`) is
    /// hidden. Its birth time is read only when the inode number is one a
    /// hidden file had (the common case costs two hash lookups).
    pub(super) fn hidden_entry(&self, rel: &Path, dev: u64, ino: u64) -> bool {
        let candidate = self.rules.as_ref().is_some_and(|r| r.may_be_hidden(dev, ino))
            || self.more_hidden.lock().unwrap().contains_key(&(dev, ino));
        candidate && self.is_hidden_id(dev, ino, self.host_btime(rel))
    }

    /// The birth time (ns) of the host file at `rel`, 0 when unknown.
    fn host_btime(&self, rel: &Path) -> u64 {
        let (parent, name) = split(rel);
        let Ok(d) = self.dir(Side::Host, parent) else { return 0 };
        match rustix::fs::statx(&d, name, AtFlags::SYMLINK_NOFOLLOW, rustix::fs::StatxFlags::BTIME) {
            Ok(x) if x.stx_mask & rustix::fs::StatxFlags::BTIME.bits() != 0 && x.stx_btime.tv_sec >= 0 => {
                x.stx_btime.tv_sec as u64 * 1_000_000_000 + u64::from(x.stx_btime.tv_nsec)
            }
            _ => 0,
        }
    }

    pub(super) fn is_hidden_host(&self, rel: &Path, st: &rustix::fs::Stat) -> bool {
        self.rules.is_some() && self.hidden_entry(rel, st.st_dev, st.st_ino)
    }

    /// True when the host has an entry at `rel` and it is hidden.
    pub(super) fn hidden_host_at(&self, rel: &Path) -> bool {
        self.stat(Side::Host, rel).is_ok_and(|st| self.is_hidden_host(rel, &st))
    }

    /// Hides one host identity for the rest of the session and later
    /// generations.
    fn hide_id(&self, dev: u64, ino: u64, rel: &Path) {
        let btime = self.host_btime(rel);
        if self.is_hidden_id(dev, ino, btime) {
            return;
        }
        self.more_hidden.lock().unwrap().insert((dev, ino), btime);
        if let Some(p) = &self.sticky_path {
            let e = crate::view::ignored::StickyEntry {
                dev,
                ino,
                btime,
                rel: rel.to_path_buf(),
            };
            if let Err(err) = crate::view::ignored::append_sticky(p, &e) {
                log::warn!("ignored paths: {err}");
            }
        }
    }

    /// Before host directory `rel` moves: everything below it that is
    /// hidden now (by the rules at its current name, or by identity) is
    /// hidden by identity, so no new name reveals it.
    pub(super) fn hide_below(&self, rel: &Path) -> Result<(), Errno> {
        if self.rules.is_none() {
            return Ok(());
        }
        let mut found = Vec::new();
        let mut stack = vec![rel.to_path_buf()];
        let mut seen = 0usize;
        while let Some(d) = stack.pop() {
            let fd = self.dir(Side::Host, &d)?;
            let dev = rustix::fs::fstat(&fd).map_err(errno)?.st_dev;
            each_entry(&fd, |name, file_type, ino| {
                seen += 1;
                if seen > HIDE_SCAN_MAX {
                    log::warn!(
                        "ignored paths: {} is too large to rename through the view (EXDEV)",
                        crate::display::escape_path(rel)
                    );
                    return Err(Errno::EXDEV);
                }
                let child = d.join(name);
                let is_d = file_type == rustix::fs::FileType::Directory;
                if self.ignored(&child, is_d) || self.hidden_entry(&child, dev, ino) {
                    found.push((dev, ino, child));
                } else if is_d && name != ".git" {
                    stack.push(child);
                }
                Ok(())
            })?;
        }
        for (dev, ino, child) in found {
            self.hide_id(dev, ino, &child);
        }
        Ok(())
    }

    /// Remembers that host directory `from` is now `to` (earlier moves
    /// below `from` move along), bounded by `MOVED_MAX`: beyond it the
    /// oldest is dropped (its hidden files stay hidden by identity).
    pub(super) fn dir_moved(&self, from: &Path, to: &Path) {
        let mut m = self.moved_dirs.lock().unwrap();
        for (now, _) in m.iter_mut() {
            if let Ok(rest) = now.strip_prefix(from) {
                *now = to.join(rest);
            }
        }
        m.push((to.to_path_buf(), from.to_path_buf()));
        if m.len() > MOVED_MAX {
            m.remove(0);
        }
    }

    /// After host directory `from` moved to `to`: the store's entries kept
    /// under `from` (what the sandbox wrote at ignored names there) move too.
    pub(super) fn store_follows(&self, from: &Path, to: &Path) {
        if self.stat(Side::Store, from).is_err() {
            return;
        }
        let (fp, fname) = split(from);
        let (tp, tname) = split(to);
        let r = self.scaffold(tp).and_then(|()| {
            let d1 = self.dir(Side::Store, fp)?;
            let d2 = self.dir(Side::Store, tp)?;
            rustix::fs::renameat(&d1, fname, &d2, tname).map_err(errno)
        });
        match r {
            Ok(()) => self.renamed(Side::Store, from, to),
            Err(e) => log::warn!(
                "ignored paths: the Domain's entries under {} stay there after the rename ({e:?})",
                crate::display::escape_path(from)
            ),
        }
    }
}

// ---- host-tool positions ----------------------------------------------------
//
// A host-tool path (`view::hosttool`) is Domain-side (through the rules)
// or read-only (without a store). What could still put the sandbox's file
// at one on the host is a move through a parent: a host directory renamed
// onto a leading name of a multi-component pattern (`mv z .cargo` with
// `z/config.toml`), or one such directory renamed away and replaced. Those
// renames answer EXDEV, so `mv` copies entry by entry through the view and
// each lands where the rules put it; a symlink at such a name is
// Domain-side (the rules treat a non-directory there as covered).

impl View {
    /// The workspace's host-tool patterns.
    pub fn with_host_tool(mut self, tools: Option<std::sync::Arc<crate::view::hosttool::Matcher>>) -> View {
        self.host_tool = tools;
        self
    }

    fn host_tool_cover(&self, rel: &Path) -> crate::view::hosttool::Cover {
        self.host_tool
            .as_ref()
            .map_or(crate::view::hosttool::Cover::None, |m| m.classify_path(rel))
    }

    /// Without a store: a host-tool path, and a leading directory of one,
    /// may not be changed inside.
    pub(super) fn host_tool_read_only(&self, rel: &Path) -> bool {
        self.store.is_none()
            && self.host_tool.is_some()
            && !rel.as_os_str().is_empty()
            && self.host_tool_cover(rel) != crate::view::hosttool::Cover::None
    }

    /// A host entry renamed from `from` to `to` (or exchanged) where either
    /// name is a host-tool path or a leading name of one, or that takes
    /// content out of a `host_config_writable` exception: it would move
    /// host content into or out of a host-tool position.
    pub(super) fn host_tool_move(&self, side: Side, from: &Path, to: &Path, exchange: bool) -> bool {
        use crate::view::hosttool::Cover;
        let refused = side == Side::Host
            && self.host_tool.as_ref().is_some_and(|m| {
                self.host_tool_cover(from) != Cover::None
                    || self.host_tool_cover(to) != Cover::None
                    || m.leaves_writable(from, to, exchange)
            });
        if refused {
            log::info!(
                "host-tool files: {} to {} is copied, not renamed (EXDEV)",
                crate::display::escape_path(from),
                crate::display::escape_path(to)
            );
        }
        refused
    }
}
