//! Refusals that protect host processes from the sandbox's changes: files
//! a host process holds a lock on or has open for writing, and overwrites
//! of a file a host process changed since the guest last read it.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::Ordering;

use fuser::{Errno, INodeNo};

use crate::sys;

use super::host::Side;
use super::table::version;
use super::View;

impl View {
    /// Refuses (EBUSY) a guest change that `overwrites` bytes of host file
    /// (`st`: a write below its size, a shrink to a shorter, non-empty size)
    /// when a host process changed the file since the guest last read
    /// or wrote it through the view. The guest's copy is stale: on a plain
    /// bind the kernel would have kept them coherent (shared page cache,
    /// shared locks); here the write would put old data over the host's new
    /// data. This is how a sandbox SQLite connection that outlived the
    /// host's last one would checkpoint its stale journal over the rows the
    /// host had just checkpointed. Appends and whole-file rewrites
    /// (truncation to 0) pass, as do files the host has not touched.
    pub(super) fn fresh_for_write(&self, ino: INodeNo, st: &rustix::fs::Stat, overwrites: bool) -> Result<(), Errno> {
        let (side, seen, rel) = {
            let t = self.t.lock().unwrap();
            let Some(n) = t.nodes.get(&ino.0) else { return Ok(()) };
            (n.side, n.seen, n.rel.clone())
        };
        if side != Side::Host || !overwrites || seen == version(st) {
            return Ok(());
        }
        if !self.warned_stale.swap(true, Ordering::Relaxed) {
            log::warn!(
                "workspace view: refused overwriting {}: a host process changed it since the sandbox last read it (EBUSY; further refusals not logged)",
                crate::display::escape_path(&rel)
            );
        }
        Err(Errno::EBUSY)
    }

    /// Refuses (EBUSY) changing a host file another process holds a lock
    /// on: gVisor keeps file locks inside the sandbox, so a host SQLite
    /// connection's locks are invisible to the sandbox's, which would then
    /// "recover" (truncate, rewrite) the host's live `-shm` index and crash
    /// or lose the host's transactions. Refused loudly instead (the sandbox
    /// sees an I/O error; the supervisor log says why, once per view).
    pub(super) fn not_locked_on_host(&self, ino: INodeNo, f: &impl AsFd) -> Result<(), Errno> {
        let host = self
            .t
            .lock()
            .unwrap()
            .nodes
            .get(&ino.0)
            .is_none_or(|n| n.side == Side::Host);
        if host && sys::locked_elsewhere(f) {
            if !self.warned_locked.swap(true, Ordering::Relaxed) {
                let rel = self
                    .t
                    .lock()
                    .unwrap()
                    .nodes
                    .get(&ino.0)
                    .map(|n| n.rel.clone())
                    .unwrap_or_default();
                log::warn!(
                    "workspace view: refused changing {}: a host process holds a lock on it (EBUSY; further refusals not logged)",
                    crate::display::escape_path(&rel)
                );
            }
            return Err(Errno::EBUSY);
        }
        Ok(())
    }

    /// Refuses (EBUSY) removing or replacing a host file a host process
    /// holds a lock on or has open for writing (the view's own write fd of
    /// it is dropped first): what it writes next would go to a file no
    /// name reaches. This is how a sandbox SQLite connection, which cannot
    /// see the host's locks and takes itself for the last one, would delete
    /// a live host `-wal` journal with the host's newest transactions.
    pub(super) fn not_in_use_on_host(&self, id: u64, rel: &Path) -> Result<(), Errno> {
        self.t.lock().unwrap().drop_write_fd(id);
        let Ok(f) = self.open_path(Side::Host, rel, false) else {
            return Ok(());
        };
        self.not_locked_on_host(INodeNo(id), &f)?;
        // The view's own write fd of the file may still be open for a
        // moment: a request on another worker thread that took it from the
        // cache before it was dropped above. A host writer keeps its file
        // open far longer than this short grace, so it is still refused.
        let mut busy = sys::open_for_write_elsewhere(&f);
        for wait_ms in [2, 8, 30] {
            if !busy {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(wait_ms));
            self.t.lock().unwrap().drop_write_fd(id);
            busy = sys::open_for_write_elsewhere(&f);
        }
        if busy {
            log::warn!(
                "workspace view: refused removing or truncating {}: a host process has it open for writing (EBUSY)",
                crate::display::escape_path(rel)
            );
            return Err(Errno::EBUSY);
        }
        Ok(())
    }
}
