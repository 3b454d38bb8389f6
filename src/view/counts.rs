//! Request counts of a workspace view, per FUSE opcode: always-on relaxed
//! atomic counters (one add per request), written out when the view stops
//! if `LAZARET_VIEW_COUNTS` names a file (`scripts/bench-git.sh` reports
//! FUSE requests per created and per read file from them). With that
//! variable set, each request's time in the view is added up per opcode
//! too (`Counts::add`'s guard; one clock read at each end), and so are the
//! view's own waits (`Op::SleepOwn` and after: how often a guard slept),
//! written to the same name with `.us` appended.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The opcodes the view answers (anything else gets ENOSYS from `fuser`).
#[derive(Clone, Copy)]
pub(crate) enum Op {
    Lookup,
    Getattr,
    Setattr,
    Readlink,
    Mknod,
    Mkdir,
    Unlink,
    Rmdir,
    Symlink,
    Rename,
    Link,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Opendir,
    Readdir,
    Releasedir,
    Fsyncdir,
    Statfs,
    Create,
    Forget,
    Fallocate,
    Getxattr,
    Listxattr,
    Readdirplus,
    Setxattr,
    Removexattr,
    /// Not requests: sleeps of `not_in_use_on_host` waiting for the view's
    /// own lent write fds, its grace sleeps for a write open nothing of
    /// the view accounts for, and sleeps of `under_host_locks`.
    SleepOwn,
    SleepGrace,
    SleepLock,
}

const OPS: usize = 33;

const NAMES: [&str; OPS] = [
    "lookup",
    "getattr",
    "setattr",
    "readlink",
    "mknod",
    "mkdir",
    "unlink",
    "rmdir",
    "symlink",
    "rename",
    "link",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "opendir",
    "readdir",
    "releasedir",
    "fsyncdir",
    "statfs",
    "create",
    "forget",
    "fallocate",
    "getxattr",
    "listxattr",
    "readdirplus",
    "setxattr",
    "removexattr",
    "sleep-own",
    "sleep-grace",
    "sleep-lock",
];

pub(crate) struct Counts {
    n: [AtomicU64; OPS],
    /// Microseconds spent per opcode, while `timed`.
    us: [AtomicU64; OPS],
    timed: bool,
}

impl Default for Counts {
    fn default() -> Counts {
        Counts {
            n: std::array::from_fn(|_| AtomicU64::new(0)),
            us: std::array::from_fn(|_| AtomicU64::new(0)),
            timed: std::env::var_os("LAZARET_VIEW_COUNTS").is_some_and(|v| !v.is_empty()),
        }
    }
}

/// Adds the time until it is dropped to its opcode's (`Counts::add`).
pub(crate) struct Timed<'a>(Option<(&'a AtomicU64, std::time::Instant)>);

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        if let Some((us, t0)) = self.0.take() {
            us.fetch_add(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
        }
    }
}

impl Counts {
    /// Counts one `op`; the guard, kept for the request's life, adds its
    /// time when timing is on.
    pub(crate) fn add(&self, op: Op) -> Timed<'_> {
        self.n[op as usize].fetch_add(1, Ordering::Relaxed);
        Timed(self.timed.then(|| (&self.us[op as usize], std::time::Instant::now())))
    }

    /// `name count` lines, non-zero request counts only (no sleeps).
    pub(crate) fn render(&self, view: &str) -> String {
        let mut s = String::new();
        for (name, c) in NAMES.iter().zip(&self.n).take(Op::SleepOwn as usize) {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                s.push_str(&format!("{view} {name} {n}\n"));
            }
        }
        s
    }

    /// `name count microseconds` lines, non-zero counts only, the guards'
    /// sleeps included.
    pub(crate) fn render_times(&self, view: &str) -> String {
        let mut s = String::new();
        for ((name, c), us) in NAMES.iter().zip(&self.n).zip(&self.us) {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                s.push_str(&format!("{view} {name} {n} {}\n", us.load(Ordering::Relaxed)));
            }
        }
        s
    }

    /// Appends the counts to the file `LAZARET_VIEW_COUNTS` names, if any,
    /// and the times and sleeps to that name with `.us` appended.
    pub(crate) fn write_out(&self, view: &Path) {
        let Some(out) = std::env::var_os("LAZARET_VIEW_COUNTS").filter(|v| !v.is_empty()) else {
            return;
        };
        let view = view.display().to_string().replace(char::is_whitespace, "_");
        let mut times = out.clone();
        times.push(".us");
        for (file, text) in [(out, self.render(&view)), (times, self.render_times(&view))] {
            let r = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)
                .and_then(|mut f| f.write_all(text.as_bytes()));
            if let Err(e) = r {
                log::warn!("workspace view: cannot write request counts: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_non_zero_counts_by_name() {
        let c = Counts {
            timed: false,
            ..Counts::default()
        };
        c.add(Op::Lookup);
        c.add(Op::Lookup);
        c.add(Op::Forget);
        assert_eq!(c.render("v"), "v lookup 2\nv forget 1\n");
    }

    #[test]
    fn timing_adds_each_guards_life_to_its_opcode() {
        let c = Counts {
            timed: true,
            ..Counts::default()
        };
        {
            let _t = c.add(Op::Rename);
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
        c.add(Op::SleepOwn);
        assert_eq!(
            c.render("v"),
            "v rename 1\n",
            "the counts file keeps its format, without sleeps"
        );
        let text = c.render_times("v");
        let line = text.lines().next().unwrap();
        let us: u64 = line.strip_prefix("v rename 1 ").unwrap().parse().unwrap();
        assert!((3000..1_000_000).contains(&us), "{text}");
        assert!(text.contains("\nv sleep-own 1 "), "{text}");
    }
}
