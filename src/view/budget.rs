//! The Domain's disk budget (`limits.disk`) as the views enforce it while
//! the Domain runs: one shared count of the bytes on disk in what the
//! views serve and count (the ignored store; `/tmp` when the cap is set),
//! started from the Domain's persisted use at start. A write, `fallocate`
//! or size change that would take the count past the cap is answered with
//! ENOSPC inside; removing or shrinking a file gives its blocks back.
//!
//! The view runs in the supervisor, on the host side of FUSE: the sandbox
//! cannot reach the count. It costs the write path one atomic add and the
//! `fstat` before and after the write that the view makes anyway.

use std::sync::atomic::{AtomicI64, Ordering};

/// Under a cap, the supervisor serves `scratch/tmp` as a storage view at
/// this directory of the generation dir, which the bundle binds at `/tmp`.
pub const TMP_VIEW: &str = "view-tmp";

use fuser::Errno;

/// Bytes on disk of a stat (allocated blocks).
pub fn on_disk(st: &rustix::fs::Stat) -> i64 {
    st.st_blocks.saturating_mul(512)
}

#[derive(Debug)]
pub struct Budget {
    cap: i64,
    used: AtomicI64,
}

impl Budget {
    pub fn new(cap: u64, used: u64) -> Budget {
        Budget {
            cap: i64::try_from(cap).unwrap_or(i64::MAX),
            used: AtomicI64::new(i64::try_from(used).unwrap_or(i64::MAX)),
        }
    }

    pub fn cap(&self) -> u64 {
        self.cap as u64
    }

    /// Bytes counted now (never below 0).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed).max(0) as u64
    }

    /// Holds room for `want` more bytes, or ENOSPC when they would take
    /// the count past the cap. Nothing is held for `want == 0`.
    pub fn reserve(&self, want: u64) -> Result<Reservation<'_>, Errno> {
        let want = i64::try_from(want).unwrap_or(i64::MAX);
        if want > 0 {
            let before = self.used.fetch_add(want, Ordering::Relaxed);
            if before.saturating_add(want) > self.cap {
                self.used.fetch_sub(want, Ordering::Relaxed);
                return Err(Errno::ENOSPC);
            }
        }
        Ok(Reservation { b: self, held: want })
    }

    /// A file's blocks went from `pre` to `post` bytes outside a
    /// reservation (a truncation, a removal: `post` 0).
    pub fn changed(&self, pre: i64, post: i64) {
        if post != pre {
            self.used.fetch_add(post - pre, Ordering::Relaxed);
        }
    }
}

/// Room held for one operation: `settle` replaces it with what the file's
/// blocks really changed by; dropped unsettled (the operation failed), it
/// is given back.
pub struct Reservation<'a> {
    b: &'a Budget,
    held: i64,
}

impl Reservation<'_> {
    pub fn settle(mut self, pre: i64, post: i64) {
        self.b.used.fetch_add(post - pre - self.held, Ordering::Relaxed);
        self.held = 0;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held != 0 {
            self.b.used.fetch_sub(self.held, Ordering::Relaxed);
        }
    }
}

/// How many bytes a write of `len` at `offset` may add to a file whose
/// size and blocks are in `pre`: none when it lands inside allocated
/// bytes of a dense file, at most `len`.
pub fn growth(pre: &rustix::fs::Stat, offset: u64, len: u64) -> u64 {
    let alloc = on_disk(pre).max(0) as u64;
    if pre.st_size.max(0) as u64 > alloc {
        // Sparse: where its holes are is not known here.
        return len;
    }
    offset.saturating_add(len).saturating_sub(alloc.max(offset)).min(len)
}

/// What a `fallocate` of `len` at `offset` in `mode` may add: punching
/// or collapsing a range adds nothing, inserting one adds `len`, plain
/// allocation and zeroing what `growth` says.
pub fn fallocate_growth(pre: &rustix::fs::Stat, mode: rustix::fs::FallocateFlags, offset: u64, len: u64) -> u64 {
    use rustix::fs::FallocateFlags as F;
    if mode.intersects(F::PUNCH_HOLE | F::COLLAPSE_RANGE) {
        0
    } else if mode.contains(F::INSERT_RANGE) {
        len
    } else {
        growth(pre, offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_past_the_cap_are_refused_and_failed_ones_given_back() {
        let b = Budget::new(100, 40);
        assert!(b.reserve(61).is_err());
        assert_eq!(b.used(), 40);
        let r = b.reserve(60).unwrap();
        assert_eq!(b.used(), 100);
        assert!(b.reserve(1).is_err());
        drop(r);
        assert_eq!(b.used(), 40);
        // Settled: the real change replaces what was held.
        b.reserve(50).unwrap().settle(0, 8);
        assert_eq!(b.used(), 48);
        b.changed(8, 0);
        assert_eq!(b.used(), 40);
        assert!(b.reserve(0).is_ok());
    }

    #[test]
    fn growth_is_zero_inside_a_dense_file_and_at_most_the_write() {
        let mut st = rustix::fs::fstat(std::fs::File::open("/").unwrap()).unwrap();
        st.st_size = 8192;
        st.st_blocks = 16;
        assert_eq!(growth(&st, 0, 4096), 0);
        assert_eq!(growth(&st, 8192, 4096), 4096);
        assert_eq!(growth(&st, 6144, 4096), 2048);
        st.st_blocks = 0; // sparse
        assert_eq!(growth(&st, 0, 4096), 4096);
    }
}
