//! The host environment Lazaret's helpers run in: the `PATH` every helper
//! is found on, and the list of helpers the build and run paths execute.
//!
//! A normal user's `PATH` has no `sbin` directories, yet debootstrap calls
//! `chroot` (and `arch-test`), and some distributions keep `newuidmap` or
//! `ip` there. Lazaret appends the missing `sbin` directories to its own
//! `PATH` once at startup; every child (coordinator, supervisor, runsc,
//! debootstrap, umoci, ...) inherits it, and `lazaret doctor` checks the
//! helpers on exactly that `PATH`.
//!
//! Also the host facts every role reads the same way: the user's name
//! from /etc/passwd.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// Appended to `PATH` when missing, in this order.
pub const SBIN_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin"];
/// The `PATH` when none (or an empty one) is set.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A program Lazaret (or a helper it runs) executes: (program, Debian
/// package, what needs it).
pub struct Helper {
    pub prog: &'static str,
    pub package: &'static str,
    pub used_by: &'static str,
}

const fn h(prog: &'static str, package: &'static str, used_by: &'static str) -> Helper {
    Helper { prog, package, used_by }
}

/// Plain helpers that only need to be on the `PATH` (runsc, newuidmap and
/// newgidmap have their own, deeper checks in `lazaret doctor`).
pub const HELPERS: &[Helper] = &[
    h("slirp4netns", "slirp4netns", "the sandbox network"),
    h("fuse-overlayfs", "fuse-overlayfs", "persistent state"),
    h("umoci", "umoci", "image build and unpack"),
    h("skopeo", "skopeo", "images from oci:, docker-archive: and docker://"),
    h("debootstrap", "debootstrap", "image build"),
    h("chroot", "coreutils", "image build (debootstrap)"),
    h("arch-test", "arch-test", "image build (debootstrap)"),
    h("wget", "wget", "image build (debootstrap downloads)"),
    h("gpgv", "gpgv", "image build (debootstrap verifies the Release file)"),
    h("perl", "perl-base", "image build (debootstrap)"),
    h("unshare", "util-linux", "image build (user namespace)"),
    h("ip", "iproute2", "the sandbox network"),
    h("git", "git", "Git identity and the workspace view"),
];

/// `current` with every directory of [`SBIN_DIRS`] that is missing appended;
/// [`DEFAULT_PATH`] when `current` is unset or empty.
pub fn helper_path(current: Option<&OsStr>) -> OsString {
    let current = match current {
        Some(c) if !c.is_empty() => c,
        _ => return OsString::from(DEFAULT_PATH),
    };
    let dirs: Vec<PathBuf> = std::env::split_paths(current).collect();
    let mut out = current.to_os_string();
    for d in SBIN_DIRS {
        if !dirs.iter().any(|x| x == Path::new(d)) {
            out.push(":");
            out.push(d);
        }
    }
    out
}

/// Sets this process's `PATH` to [`helper_path`] of the inherited one. Call
/// once at startup, before any thread exists.
pub fn set_helper_path() {
    let p = helper_path(std::env::var_os("PATH").as_deref());
    std::env::set_var("PATH", p);
}

/// `prog` on this process's `PATH` (absolute directories only).
pub fn find(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(prog))
        .find(|c| is_executable(c))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The user's name, from /etc/passwd (no NSS in a static binary).
pub fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_missing_sbin_dirs_only() {
        assert_eq!(
            helper_path(Some(OsStr::new("/usr/local/bin:/usr/bin:/bin"))),
            OsString::from("/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin")
        );
        assert_eq!(
            helper_path(Some(OsStr::new("/usr/sbin:/usr/bin:/sbin:/usr/local/sbin"))),
            OsString::from("/usr/sbin:/usr/bin:/sbin:/usr/local/sbin")
        );
        assert_eq!(helper_path(None), OsString::from(DEFAULT_PATH));
        assert_eq!(helper_path(Some(OsStr::new(""))), OsString::from(DEFAULT_PATH));
    }
}
