//! Request counts of a workspace view, per FUSE opcode: always-on relaxed
//! atomic counters (one add per request), written out when the view stops
//! if `LAZARET_VIEW_COUNTS` names a file (`scripts/bench-git.sh` reports
//! FUSE requests per created and per read file from them).

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
}

const NAMES: [&str; 30] = [
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
];

#[derive(Default)]
pub(crate) struct Counts([AtomicU64; 30]);

impl Counts {
    pub(crate) fn add(&self, op: Op) {
        self.0[op as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// `name count` lines, non-zero counts only.
    pub(crate) fn render(&self, view: &str) -> String {
        let mut s = String::new();
        for (name, c) in NAMES.iter().zip(&self.0) {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                s.push_str(&format!("{view} {name} {n}\n"));
            }
        }
        s
    }

    /// Appends the counts to the file `LAZARET_VIEW_COUNTS` names, if any.
    pub(crate) fn write_out(&self, view: &Path) {
        let Some(out) = std::env::var_os("LAZARET_VIEW_COUNTS").filter(|v| !v.is_empty()) else {
            return;
        };
        let text = self.render(&view.display().to_string().replace(char::is_whitespace, "_"));
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = r {
            log::warn!("workspace view: cannot write request counts: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_non_zero_counts_by_name() {
        let c = Counts::default();
        c.add(Op::Lookup);
        c.add(Op::Lookup);
        c.add(Op::Forget);
        assert_eq!(c.render("v"), "v lookup 2\nv forget 1\n");
    }
}
