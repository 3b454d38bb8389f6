//! Refusals that protect host processes from the sandbox's changes: files
//! a host process holds a lock on or has open for writing, and overwrites
//! of a file a host process changed since the guest last read it; the
//! view's own locks that make a host process see the sandbox's changes as
//! busy; appends that land at the host file's end.

use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fuser::{Errno, INodeNo};

use crate::sys::{self, RangeLock};
use crate::view::counts::Op;

use super::host::Side;
use super::table::{version, OwnWrites};
use super::View;

/// How long `not_in_use_on_host` waits for the view's own write fds lent
/// for one request (a write racing the remove on another worker thread)
/// to go, before the file counts as in use.
const OWN_WRITES_WAIT: Duration = Duration::from_secs(2);

/// How long a guest change of a host file waits for a host process's
/// lock of it to go before it is refused (`EBUSY`): longer than a host
/// SQLite transaction holds its locks, short enough that a tool whose
/// write waits does not look hung.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(1);
/// The wait instead while the lock that outlasted the last whole wait is
/// still held (a host connection that stays open): a tool that retries
/// is not held up a second per write.
const STUCK_WAIT: Duration = Duration::from_millis(50);

/// SQLite's lock bytes in a database file (its unix VFS; fixed by the file
/// format): a connection with a read transaction (in WAL mode: any open
/// connection) holds a read lock of the shared range; a writer a write
/// lock of the reserved byte, and of the whole shared range to commit.
const SQLITE_RESERVED: i64 = 0x4000_0001;
const SQLITE_SHARED_FIRST: i64 = 0x4000_0002;
const SQLITE_SHARED_SIZE: i64 = 510;
/// The first bytes of a SQLite database, and the magic numbers a SQLite
/// WAL journal starts with (big-endian).
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";
const WAL_MAGIC: [u32; 2] = [0x377f_0682, 0x377f_0683];

/// What a guest write to a SQLite WAL journal meets on the host.
enum WalUse {
    /// Not a WAL journal, or its database has no host connection.
    Free,
    /// A host process has the journal's database open.
    Connected,
    /// No name reaches the journal any more (a host connection checkpointed
    /// and deleted it): what is written to it is lost.
    Deleted,
}

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

    /// Runs `act`, a guest change of node `ino`'s host file through `f`
    /// (open for writing), under the view's own OFD write lock of the whole
    /// file, taken without waiting and retried with short sleeps for up to
    /// `LOCK_WAIT` while a host process holds a lock of the file; then the
    /// change is refused (`EBUSY`), and after `STUCK_WAIT` only while that
    /// lock is still held. Taking the lock is the check, so no host lock can be
    /// taken between the check and the change; a host process that tries
    /// one during the change is refused (SQLite: `SQLITE_BUSY`, which its
    /// busy timeout retries) or waits. gVisor keeps the guest's own locks
    /// inside the sandbox, so this is the only lock a host process sees.
    /// A write to a SQLite WAL journal waits the same way while its
    /// database has a host connection, and is refused if the journal was
    /// deleted. After the change a SQLite database keeps a claim
    /// (`keep_database_claim`). Store-side files change at once.
    pub(super) fn under_host_locks<T>(
        &self,
        ino: INodeNo,
        f: &impl AsFd,
        act: impl FnOnce() -> Result<T, Errno>,
    ) -> Result<T, Errno> {
        let (host, rel) = {
            let t = self.t.lock().unwrap();
            match t.nodes.get(&ino.0) {
                Some(n) => (n.side == Side::Host, n.rel.clone()),
                None => (true, PathBuf::new()),
            }
        };
        if !host {
            return act();
        }
        let stripe = &self.change_stripes[(ino.0 % self.change_stripes.len() as u64) as usize];
        let stuck = self.lock_stuck.lock().unwrap().contains(&ino.0);
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        let mut deleted = false;
        loop {
            {
                let _one = stripe.lock().unwrap();
                // Not while a host connection writes the journal's database.
                if self.claim_for_journal(&rel) {
                    match sys::ofd_lock(f, RangeLock::Write, 0, 0) {
                        Ok(true) => match self.wal_use(&rel, f) {
                            WalUse::Free => {
                                self.lock_stuck.lock().unwrap().remove(&ino.0);
                                let r = act();
                                let claim = keep_database_claim(f);
                                if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&ino.0) {
                                    n.claim = claim;
                                }
                                return r;
                            }
                            WalUse::Connected => {
                                let _ = sys::ofd_lock(f, RangeLock::Unlock, 0, 0);
                            }
                            WalUse::Deleted => {
                                let _ = sys::ofd_lock(f, RangeLock::Unlock, 0, 0);
                                deleted = true;
                            }
                        },
                        Ok(false) => {}
                        // No lock through this fd (not open for writing, or no
                        // lock support): the probe alone.
                        Err(_) if !sys::locked_elsewhere(f) => return act(),
                        Err(_) => {}
                    }
                }
            }
            let bound = if stuck { STUCK_WAIT } else { LOCK_WAIT };
            if deleted || start.elapsed() >= bound {
                if !deleted {
                    self.lock_stuck.lock().unwrap().insert(ino.0);
                }
                if !self.warned_locked.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "workspace view: refused changing {}: a host process holds a lock on it or has its SQLite database open, {} (EBUSY; further refusals not logged)",
                        crate::display::escape_path(&rel),
                        if deleted { "and deleted this journal" } else { "for longer than 1 s" }
                    );
                }
                return Err(Errno::EBUSY);
            }
            let _timed = self.counts.add(Op::SleepLock);
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(16));
        }
    }

    /// Before a guest write to `rel`: when it is the rollback journal
    /// (`X-journal`, as SQLite names it) of a host SQLite database `X` the
    /// guest has looked up, the database's write fd in the view takes the
    /// claim of `keep_database_claim` now, not at the transaction's first
    /// write of the database. A host reader that opens the database in
    /// between sees the reserved byte locked, so it does not take the
    /// sandbox's live journal for a crashed one and roll it back (and
    /// delete it under the sandbox's commit). False while a host
    /// connection holds the reserved byte or the shared range for writing
    /// (its own transaction): the write waits as for a host lock.
    fn claim_for_journal(&self, rel: &Path) -> bool {
        let Some(db) = rel
            .file_name()
            .and_then(|n| n.as_bytes().strip_suffix(b"-journal"))
            .filter(|n| !n.is_empty())
            .map(|n| rel.with_file_name(std::ffi::OsStr::from_bytes(n)))
        else {
            return true;
        };
        let id = {
            let t = self.t.lock().unwrap();
            match t.by_key.get(&(Side::Host, db)).copied() {
                Some(id) if t.nodes.get(&id).is_some_and(|n| !n.claim && !n.dir && !n.gone) => id,
                // Claimed already (the write fd's use refreshes it), or not
                // a database the guest opened through the view.
                _ => return true,
            }
        };
        let Ok(f) = self.node_file(INodeNo(id), true) else {
            return true;
        };
        let mut head = [0u8; 16];
        if !matches!(rustix::io::pread(&*f, &mut head, 0), Ok(16)) || &head != SQLITE_HEADER {
            return true;
        }
        let taken = matches!(sys::ofd_lock(&*f, RangeLock::Read, SQLITE_RESERVED, 1), Ok(true))
            && matches!(sys::ofd_lock(&*f, RangeLock::Read, SQLITE_SHARED_FIRST, 1), Ok(true));
        if !taken {
            let _ = sys::ofd_lock(&*f, RangeLock::Unlock, 0, 0);
            return false;
        }
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.claim = matches!(&n.fd, Some((c, true)) if std::sync::Arc::ptr_eq(c, &f));
        }
        true
    }

    /// Whether `f` (view path `rel`) is a SQLite WAL journal (by its magic
    /// number) whose database (the journal's name without `-wal`, as SQLite
    /// names it) a host process has open: a host connection holds a read
    /// lock of the database's shared range for as long as it is open in
    /// WAL mode. The guest's connection cannot see it (gVisor keeps locks
    /// inside) and would append frames the host's index does not know,
    /// which the host's next commit overwrites or its checkpoint drops.
    fn wal_use(&self, rel: &Path, f: &impl AsFd) -> WalUse {
        if !is_wal(f) {
            return WalUse::Free;
        }
        if rustix::fs::fstat(f).is_ok_and(|st| st.st_nlink == 0) {
            return WalUse::Deleted;
        }
        let Some(db) = rel
            .file_name()
            .and_then(|n| n.as_bytes().strip_suffix(b"-wal"))
            .filter(|n| !n.is_empty())
            .map(|n| rel.with_file_name(std::ffi::OsStr::from_bytes(n)))
        else {
            return WalUse::Free;
        };
        let Ok(d) = self.open_path(Side::Host, &db, false) else {
            return WalUse::Free;
        };
        let mut head = [0u8; 16];
        let is_db = matches!(rustix::io::pread(&d, &mut head, 0), Ok(16)) && &head == SQLITE_HEADER;
        // The last byte of the shared range: the view's own claim
        // (`keep_database_claim`) holds only the first.
        if is_db && sys::range_locked_elsewhere(&d, SQLITE_SHARED_FIRST + SQLITE_SHARED_SIZE - 1, 1) {
            return WalUse::Connected;
        }
        WalUse::Free
    }

    /// Whether a guest write of `data` at `offset` to node `ino` (its host
    /// file as `pre`) is an append: text (no NUL byte) written exactly at
    /// the end of the file as the guest knows it (`Node::end`), of a file a
    /// host process changed since the guest last saw it and made longer
    /// than that (a file only the guest changed is written where asked:
    /// the guest's idea of its end can lag its own writes on another
    /// thread for a moment, and a write there is no append). gVisor turns an `O_APPEND` write into
    /// one at its cached size and opens its host file without `O_APPEND`
    /// (the request's open flags do not say), so a host process that
    /// appended since (a dev server's log) would have those lines
    /// overwritten, or the write refused as stale. Such a write lands at
    /// the host file's current end instead (`sys::write_at_end`). Binary
    /// data is not moved: a structured file (a SQLite WAL journal) computes
    /// its bytes from what precedes them, and is refused as stale instead.
    pub(super) fn appends(&self, ino: INodeNo, pre: &rustix::fs::Stat, offset: u64, data: &[u8]) -> bool {
        let t = self.t.lock().unwrap();
        let Some(n) = t.nodes.get(&ino.0) else { return false };
        n.side == Side::Host
            && n.end == offset as i64
            && pre.st_size > offset as i64
            && n.seen != version(pre)
            && !data.is_empty()
            && !data.contains(&0)
    }

    /// Whether a guest write of `data` at `offset` to host file node `ino`
    /// (`pre`) is text written exactly at the file's end, as the guest and
    /// the host both see it. A host process appending between the view's
    /// stat and the write would have its line overwritten by a write at
    /// `offset`; one made at the end at the moment of the write
    /// (`sys::write_at_end`) lands after it instead, and without a race it
    /// lands at `offset`.
    pub(super) fn at_end(&self, ino: INodeNo, pre: &rustix::fs::Stat, offset: u64, data: &[u8]) -> bool {
        let t = self.t.lock().unwrap();
        let Some(n) = t.nodes.get(&ino.0) else { return false };
        n.side == Side::Host
            && n.end == offset as i64
            && pre.st_size == offset as i64
            && !data.is_empty()
            && !data.contains(&0)
    }

    /// The kernel's idea of node `ino`'s size after the guest's write or
    /// allocation up to `end` (it grows), or a short read ending at `end`
    /// (it shrinks).
    pub(super) fn guest_end(&self, ino: INodeNo, end: u64, grew: bool) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&ino.0) {
            n.end = if grew {
                n.end.max(end as i64)
            } else {
                n.end.min(end as i64)
            };
        }
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
        // The kernel tells whether any open file writes the host file, the
        // view's own write fds included. Those lent for one request (a
        // write on another worker thread, which took the fd before it was
        // dropped above) are gone in a moment: the view waits for exactly
        // those (`OwnWrites::Passing`, up to `OWN_WRITES_WAIT`, however
        // slow the write is under load). Otherwise a write open still gets
        // a short grace (2, 8, 30 ms), as before lent fds were tracked: the
        // soak meets write opens no lent fd accounts for that go within it
        // (their holder is not known yet), and a host writer keeps its file
        // open far longer. With nothing open for writing the first
        // probe decides: no sleep. A guest's own open write handle
        // (`Held`, only where the kernel sends OPEN) cannot be told from a
        // host writer's.
        let deadline = Instant::now() + OWN_WRITES_WAIT;
        let mut grace = [2, 8, 30].into_iter();
        while sys::open_for_write_elsewhere(&f) {
            let own = {
                let mut t = self.t.lock().unwrap();
                t.drop_write_fd(id);
                t.nodes.get(&id).map_or(OwnWrites::None, |n| n.own_writes())
            };
            let (pause, op) = match own {
                OwnWrites::Passing if Instant::now() < deadline => (Duration::from_micros(200), Op::SleepOwn),
                _ => match grace.next() {
                    Some(ms) => (Duration::from_millis(ms), Op::SleepGrace),
                    None => {
                        log::warn!(
                            "workspace view: refused removing or truncating {}: {} (EBUSY)",
                            crate::display::escape_path(rel),
                            if own == OwnWrites::Held {
                                "the sandbox has it open for writing through a handle the host kernel cannot tell from a host writer's"
                            } else {
                                "a host process has it open for writing"
                            }
                        );
                        return Err(Errno::EBUSY);
                    }
                },
            };
            let _timed = self.counts.add(op);
            std::thread::sleep(pause);
        }
        // A SQLite WAL journal holds commits until a checkpoint copies them
        // into the database: one a host connection appended to since the
        // guest last read it holds host commits the guest's checkpoint did
        // not copy (a sandbox connection that takes itself for the last one
        // deletes or truncates it when it closes).
        let seen = self.t.lock().unwrap().nodes.get(&id).map(|n| n.seen);
        if is_wal(&f) && rustix::fs::fstat(&f).is_ok_and(|st| seen.is_some_and(|s| s != version(&st))) {
            log::warn!(
                "workspace view: refused removing or truncating {}: a SQLite journal a host process wrote since the sandbox read it (EBUSY)",
                crate::display::escape_path(rel)
            );
            return Err(Errno::EBUSY);
        }
        Ok(())
    }
}

/// Whether `f` is a SQLite WAL journal (by its magic number).
pub(super) fn is_wal(f: &impl AsFd) -> bool {
    let mut magic = [0u8; 4];
    matches!(rustix::io::pread(f, &mut magic, 0), Ok(4)) && WAL_MAGIC.contains(&u32::from_be_bytes(magic))
}

/// After a guest change through `f`: the view's whole-file lock goes,
/// except that a SQLite database (by its header) keeps a read lock of its
/// reserved byte and the first byte of its shared range for as long as
/// the view keeps this write fd (`WRITE_IDLE` after the guest's last
/// write). A host SQLite then sees the sandbox's transaction as a host
/// connection's: a host writer waits (`SQLITE_BUSY`, retried by its busy
/// timeout) instead of committing over pages the sandbox is rewriting; a
/// host reader does not take the sandbox's live rollback journal for one
/// a crashed process left (its hot-journal check looks for a lock of the
/// reserved byte) and roll the sandbox's commit back; the last host
/// connection of a WAL database does not checkpoint and delete a journal
/// the sandbox still writes. Readers are not held up.
fn keep_database_claim(f: &impl AsFd) -> bool {
    let mut head = [0u8; 16];
    let is_db = matches!(rustix::io::pread(f, &mut head, 0), Ok(16)) && &head == SQLITE_HEADER;
    let kept = is_db
        && matches!(
            sys::ofd_lock(
                f,
                RangeLock::Read,
                SQLITE_RESERVED,
                SQLITE_SHARED_FIRST + 1 - SQLITE_RESERVED
            ),
            Ok(true)
        )
        && matches!(sys::ofd_lock(f, RangeLock::Unlock, 0, SQLITE_RESERVED), Ok(true))
        && matches!(
            sys::ofd_lock(f, RangeLock::Unlock, SQLITE_SHARED_FIRST + 1, 0),
            Ok(true)
        );
    if !kept {
        let _ = sys::ofd_lock(f, RangeLock::Unlock, 0, 0);
    }
    kept
}
