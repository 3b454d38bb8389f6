//! Which tree serves an entry: finding an existing child (the store's
//! Domain-side entry or the host's), where a new one goes, the store's
//! scaffolding of host directories, and listings merged from both trees.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use fuser::{Errno, FileType};
use rustix::fs::Mode;

use super::host::{each_entry, errno, is_dir, Side};
use super::table::Proof;
use super::{View, FOREIGN_BIT, STORE_BIT};

impl View {
    /// Where a child of a directory on `parent_side` lives when created.
    pub(super) fn target_side(&self, parent_side: Side, rel: &Path, dir: bool) -> Side {
        if self.is_domain_side(parent_side, rel, dir) || (self.store.is_some() && self.git_domain_side(rel)) {
            Side::Store
        } else {
            Side::Host
        }
    }

    /// Finds an existing child: the store's entry for an ignored path, else
    /// the host's unless ignored.
    pub(super) fn find(&self, parent_side: Side, rel: &Path) -> Result<(Side, rustix::fs::Stat), Errno> {
        self.find_with(parent_side, rel, false)
            .map(|(side, st, _, _)| (side, st))
    }

    /// `find`, and with `want` the `O_PATH` handle of a non-directory and
    /// the entry's proof (`table::Proof`) from the very stat it returns
    /// (`stat_handle`).
    #[allow(clippy::type_complexity)] // `find` with what `stat_handle` adds
    pub(super) fn find_with(
        &self,
        parent_side: Side,
        rel: &Path,
        want: bool,
    ) -> Result<(Side, rustix::fs::Stat, Option<OwnedFd>, Option<Proof>), Errno> {
        let look = |side: Side| -> Result<(rustix::fs::Stat, Option<OwnedFd>, Option<Proof>), Errno> {
            if want {
                self.stat_handle(side, rel)
            } else {
                Ok((self.stat(side, rel)?, None, None))
            }
        };
        if parent_side == Side::Store {
            let (st, h, p) = look(Side::Store)?;
            return Ok((Side::Store, st, h, p));
        }
        if let Some(st) = self.git_store_entry(rel) {
            return Ok((Side::Store, st, None, None));
        }
        if self.rules.is_none() {
            let (st, h, p) = look(Side::Host)?;
            return Ok((Side::Host, st, h, p));
        }
        let maybe = self.ignored_either(rel);
        if maybe {
            if let Ok((st, h, p)) = look(Side::Store) {
                if self.ignored(rel, is_dir(&st)) {
                    return Ok((Side::Store, st, h, p));
                }
            }
        }
        let (st, h, p) = look(Side::Host)?;
        if maybe && self.ignored(rel, is_dir(&st)) {
            return Err(Errno::ENOENT);
        }
        if self.is_hidden_host(rel, &st) {
            // A hidden host file under a name the rules do not match (an
            // ancestor was renamed, or .gitignore edited): Domain-side.
            return match self.stat(Side::Store, rel) {
                Ok(sst) => Ok((Side::Store, sst, None, None)),
                Err(_) => Err(Errno::ENOENT),
            };
        }
        Ok((Side::Host, st, h, p))
    }

    /// Makes the store's copy of host directory `rel` (scaffolding for an
    /// ignored child).
    pub(super) fn scaffold(&self, rel: &Path) -> Result<(), Errno> {
        let mut cur = PathBuf::new();
        for c in rel.components() {
            let d = self.dir(Side::Store, &cur)?;
            cur.push(c.as_os_str());
            match rustix::fs::mkdirat(&d, c.as_os_str(), Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(errno(e)),
            }
        }
        Ok(())
    }

    pub(super) fn list_dir(&self, side: Side, rel: &Path) -> Result<Vec<(u64, FileType, OsString)>, Errno> {
        let mut out = vec![
            (1, FileType::Directory, OsString::from(".")),
            (1, FileType::Directory, OsString::from("..")),
        ];
        let mut seen = std::collections::HashSet::new();
        let mut read = |s: Side, keep: &dyn Fn(&Path, bool, u64) -> bool| -> Result<(), Errno> {
            let d = self.dir(s, rel)?;
            each_entry(&d, |name, file_type, ent_ino| {
                let name = name.to_os_string();
                let ft = match file_type {
                    rustix::fs::FileType::Directory => FileType::Directory,
                    rustix::fs::FileType::Symlink => FileType::Symlink,
                    rustix::fs::FileType::Fifo => FileType::NamedPipe,
                    rustix::fs::FileType::Socket => FileType::Socket,
                    rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
                    rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
                    _ => FileType::RegularFile,
                };
                let child = rel.join(&name);
                if !keep(&child, ft == FileType::Directory, ent_ino) || !seen.insert(name.clone()) {
                    return Ok(());
                }
                let ino =
                    (ent_ino & !(STORE_BIT | FOREIGN_BIT | (1 << 63))) | if s == Side::Store { STORE_BIT } else { 0 };
                out.push((ino.max(2), ft, name));
                Ok(())
            })
        };
        match (side, &self.rules) {
            (Side::Store, _) => read(side, &|_, _, _| true)?,
            (Side::Host, None) => {
                // Domain-side Git entries first, so they win over the host's.
                if self.store.is_some() {
                    let _ = read(Side::Store, &|p, _, _| self.git_store_entry(p).is_some());
                }
                read(side, &|_, _, _| true)?
            }
            (Side::Host, Some(_)) => {
                // The store's ignored and Git entries first, so they win over the host's.
                let _ = read(Side::Store, &|p, d, _| {
                    self.ignored(p, d) || self.hidden_host_at(p) || self.git_store_entry(p).is_some()
                });
                let dev = self.stat(Side::Host, rel).map(|st| st.st_dev).unwrap_or(0);
                read(Side::Host, &|p, d, ino| {
                    !self.ignored(p, d) && !self.hidden_entry(p, dev, ino)
                })?;
            }
        }
        Ok(out)
    }
}
