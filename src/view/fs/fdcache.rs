//! The fds reads and writes go through: the bounded per-node fd cache
//! (write fds included), the open handles of files and directories, and
//! reaching a node's file through its handle or by path.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Errno, FileHandle, FileType, INodeNo};
use rustix::fs::{Mode, OFlags};

use super::host::{beneath, errno, proc_path, reopen, Side};
use super::table::Handle;
use super::{View, FD_CACHE};

impl View {
    /// The fd a handle-less read (or write) of node `ino` goes through:
    /// the cached one, else one reopened from the node's handle (the very
    /// file, whatever became of its names), else one opened by path.
    pub(super) fn node_file(&self, ino: INodeNo, write: bool) -> Result<Arc<File>, Errno> {
        self.node_file_with(ino, write, true)
    }

    /// A handle-less WRITE or FALLOCATE of node `ino` was answered: its
    /// cached write fd goes before the reply, so no write fd of the view
    /// outlives the write (the host can `exec` a script the sandbox just
    /// wrote and closed: no `Text file busy`). gVisor's close of the file
    /// never reaches the view (it keeps its own fd of the view open, and
    /// FLUSH comes only with it), so the end of each write is the moment.
    /// A read fd reopened from the node's handle takes its place, so the
    /// attribute changes that follow a write (tar's chown, chmod and
    /// utimes) still go by fd; the next write reopens for writing. A write
    /// fd that holds a SQLite database's claim (`Node::claim`) stays: the
    /// claim is what keeps a host connection out of the sandbox's
    /// transaction between its writes.
    pub(super) fn written(&self, fh: FileHandle, ino: INodeNo) {
        if fh.0 != 0 {
            return;
        }
        let handle = {
            let mut t = self.t.lock().unwrap();
            if !t
                .nodes
                .get(&ino.0)
                .is_some_and(|n| matches!(n.fd, Some((_, true))) && !n.claim)
            {
                return;
            }
            t.drop_write_fd(ino.0);
            t.nodes.get(&ino.0).and_then(|n| n.file.clone())
        };
        if let Some(f) = handle.and_then(|h| reopen(&h, false).ok()) {
            self.cache_fd(ino.0, Arc::new(f), false);
        }
    }

    /// `node_file`, keeping a newly opened fd in the cache only when `cache`
    /// (a truncate outside any write needs no write fd afterwards).
    pub(super) fn node_file_with(&self, ino: INodeNo, write: bool, cache: bool) -> Result<Arc<File>, Errno> {
        let (side, rel, want, handle, gone) = {
            let mut t = self.t.lock().unwrap();
            let t = &mut *t;
            let n = t.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
            if write
                && (n.protected
                    || self.protected_at(n.side, &n.rel)
                    || n.aliases.iter().any(|a| self.protected_at(n.side, a)))
            {
                log::warn!("git sentry: refused writing {}", crate::display::escape_path(&n.rel));
                return Err(Errno::EPERM);
            }
            match &n.fd {
                Some((f, w)) if *w || !write => {
                    let f = f.clone();
                    if write {
                        t.writers.insert(ino.0, std::time::Instant::now());
                        if let Some(n) = t.nodes.get_mut(&ino.0) {
                            n.lend(&f, false);
                        }
                    }
                    return Ok(f);
                }
                _ => {}
            }
            let r = (n.side, n.rel.clone(), n.host_ino, n.file.clone(), n.gone);
            if write {
                if let Some(n) = t.nodes.get_mut(&ino.0) {
                    n.opening += 1;
                }
            }
            r
        };
        let opened = (|| {
            Ok(match handle {
                Some(h) => Arc::new(reopen(&h, write)?),
                None if gone => return Err(Errno::ESTALE),
                None => {
                    let open = |rel: &Path| -> Result<File, Errno> {
                        let f = self.open_path(side, rel, write)?;
                        if rustix::fs::fstat(&f).map_err(errno)?.st_ino != want {
                            return Err(Errno::ESTALE);
                        }
                        Ok(f)
                    };
                    match open(&rel) {
                        Ok(f) => Arc::new(f),
                        // Its path went stale: another name of it may not.
                        Err(e) if e == Errno::ENOENT || e == Errno::ESTALE => match self.refind(ino) {
                            Some((a, _)) => Arc::new(open(&a)?),
                            None => return Err(e),
                        },
                        Err(e) => return Err(e),
                    }
                }
            })
        })();
        if write {
            let mut t = self.t.lock().unwrap();
            if let Some(n) = t.nodes.get_mut(&ino.0) {
                n.opening = n.opening.saturating_sub(1);
                if let Ok(f) = &opened {
                    n.lend(f, false);
                }
            }
        }
        let f = opened?;
        if cache {
            self.cache_fd(ino.0, f.clone(), write);
        }
        Ok(f)
    }

    /// The node's cached fd, if any, and whether it writes.
    pub(super) fn cached_fd(&self, ino: INodeNo) -> Option<(Arc<File>, bool)> {
        self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.fd.clone())
    }

    /// The attributes of node `ino` from its own fd or handle, when it has
    /// one (no path walk; right after unlink or rename too), with whether
    /// it is gone.
    pub(super) fn handle_stat(&self, ino: INodeNo) -> Option<Result<(Side, PathBuf, rustix::fs::Stat, bool), Errno>> {
        let (side, rel, gone, fd, handle) = {
            let t = self.t.lock().unwrap();
            let n = t.nodes.get(&ino.0)?;
            (n.side, n.rel.clone(), n.gone, n.fd.clone(), n.file.clone())
        };
        let st = match (fd, handle) {
            (Some((f, _)), _) => rustix::fs::fstat(&*f),
            (None, Some(h)) => rustix::fs::fstat(&*h),
            (None, None) => return None,
        };
        Some(st.map_err(errno).map(|st| (side, rel, st, gone)))
    }

    /// Keeps `f` as node `id`'s fd, evicting the oldest beyond `FD_CACHE`.
    pub(super) fn cache_fd(&self, id: u64, f: Arc<File>, write: bool) {
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let Some(n) = t.nodes.get_mut(&id) else { return };
        let counted = n.fd.is_some();
        if write {
            n.lend(&f, false);
        }
        n.fd = Some((f, write));
        if write {
            t.writers.insert(id, std::time::Instant::now());
        } else {
            t.writers.remove(&id);
        }
        if !counted {
            t.cached_fds += 1;
            t.fd_order.push_back(id);
        }
        while t.cached_fds > FD_CACHE {
            let Some(old) = t.fd_order.pop_front() else { break };
            if let Some(n) = t.nodes.get_mut(&old) {
                if n.fd.take().is_some() {
                    t.cached_fds -= 1;
                    t.writers.remove(&old);
                }
            }
        }
        if t.fd_order.len() > 4 * FD_CACHE {
            // Drop stale and repeated entries (fds dropped at FLUSH).
            let mut seen = std::collections::HashSet::new();
            let nodes = &t.nodes;
            t.fd_order
                .retain(|id| nodes.get(id).is_some_and(|n| n.fd.is_some()) && seen.insert(*id));
        }
    }

    /// Opens `rel` for reading, or for writing (and reading, when allowed).
    pub(super) fn open_path(&self, side: Side, rel: &Path, write: bool) -> Result<File, Errno> {
        let p = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let open = |fl: OFlags| {
            beneath(
                self.root(side)?,
                p,
                fl | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .map_err(errno)
        };
        let fd = if write {
            open(OFlags::RDWR).or_else(|_| open(OFlags::WRONLY))?
        } else {
            open(OFlags::RDONLY)?
        };
        Ok(File::from(fd))
    }

    /// Records `f`, a write handle the guest opened of node `id`, as the
    /// view's own write fd of the file (`Node::lend`).
    pub(super) fn lend_held(&self, id: u64, f: &Arc<File>) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.lend(f, true);
        }
    }

    pub(super) fn add_handle(&self, h: Handle) -> u64 {
        let mut t = self.t.lock().unwrap();
        let fh = t.next_fh;
        t.next_fh += 1;
        t.handles.insert(fh, h);
        fh
    }

    /// The open handle `fh`, or for a handle-less open (fh 0) the node's fd.
    pub(super) fn handle_or_node(&self, fh: FileHandle, ino: INodeNo, write: bool) -> Result<Arc<File>, Errno> {
        if fh.0 == 0 {
            self.node_file(ino, write)
        } else {
            self.file(fh)
        }
    }

    pub(super) fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        match self.t.lock().unwrap().handles.get(&fh.0) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    /// The listing of open directory `fh` (node `ino`), made afresh at
    /// offset 0: a reader that rewinds an open directory (gVisor keeps its
    /// directory fds) must see the directory as it is now.
    #[allow(clippy::type_complexity)] // the listing's own entry shape
    pub(super) fn listing(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
    ) -> Result<Arc<Vec<(u64, FileType, OsString)>>, Errno> {
        if offset == 0 {
            let list = self.node(ino).and_then(|(side, rel, _)| self.list_dir(side, &rel))?;
            self.t.lock().unwrap().handles.insert(fh.0, Handle::Dir(Arc::new(list)));
        }
        match self.t.lock().unwrap().handles.get(&fh.0) {
            Some(Handle::Dir(l)) => Ok(l.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    /// A path that reaches node `ino`'s file for the xattr calls (with
    /// the handle it goes through, kept alive as long as the path is used).
    pub(super) fn xattr_path(&self, ino: INodeNo) -> Result<(PathBuf, Option<Arc<OwnedFd>>), Errno> {
        let (side, rel, _, gone) = self.node_any(ino)?;
        let handle = self.t.lock().unwrap().nodes.get(&ino.0).and_then(|n| n.file.clone());
        if let Some(h) = handle {
            return Ok((proc_path(&*h), Some(h)));
        }
        if gone {
            return Err(Errno::ESTALE);
        }
        let p = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel.as_path()
        };
        let fd = beneath(
            self.root(side)?,
            p,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        let fd = Arc::new(fd);
        Ok((proc_path(&*fd), Some(fd)))
    }
}
