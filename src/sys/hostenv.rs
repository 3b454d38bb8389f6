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
//! Also the host facts every role reads the same way: /etc/passwd entries
//! and the subordinate id ranges of /etc/subuid and /etc/subgid
//! (`lazaret doctor` and the runtime share these parsers, so doctor passes
//! exactly when the id maps can be written).

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

/// A helper whose Debian package has the program's own name.
const fn own(prog: &'static str, used_by: &'static str) -> Helper {
    h(prog, prog, used_by)
}

/// Plain helpers that only need to be on the `PATH` (runsc, newuidmap and
/// newgidmap have their own, deeper checks in `lazaret doctor`).
pub const HELPERS: &[Helper] = &[
    own("slirp4netns", "the sandbox network"),
    own("fuse-overlayfs", "persistent state"),
    own("umoci", "image build and unpack"),
    own("skopeo", "images from oci:, docker-archive: and docker://"),
    own("debootstrap", "image build"),
    h("chroot", "coreutils", "image build (debootstrap)"),
    own("arch-test", "image build (debootstrap)"),
    own("wget", "image build (debootstrap downloads)"),
    own("gpgv", "image build (debootstrap verifies the Release file)"),
    h("perl", "perl-base", "image build (debootstrap)"),
    h("unshare", "util-linux", "image build (user namespace)"),
    h("ip", "iproute2", "the sandbox network"),
    own("git", "Git identity and the workspace view"),
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
    passwd_by_uid(&text, uid).map(|(name, _)| name)
}

/// `name:x:uid:gid:...` → `(name, gid)` for the first entry whose uid field
/// is exactly `uid` in decimal (`01000` is not uid 1000).
pub fn passwd_by_uid(passwd: &str, uid: u32) -> Option<(String, u32)> {
    let uid = uid.to_string();
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 4 && !f[0].is_empty() && f[2] == uid {
            Some((f[0].to_string(), f[3].parse().ok()?))
        } else {
            None
        }
    })
}

/// `name:x:uid:gid:...` → `(uid, gid)` for the first entry named `name`.
pub fn passwd_by_name(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() >= 4 && !name.is_empty() && f[0] == name {
            Some((f[2].parse().ok()?, f[3].parse().ok()?))
        } else {
            None
        }
    })
}

/// `name:x:uid:gid:gecos:home:shell` → `home` for the first entry named
/// `name`, when it is absolute.
pub fn passwd_home(passwd: &str, name: &str) -> Option<std::path::PathBuf> {
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 6 && !name.is_empty() && f[0] == name && f[5].starts_with('/'))
            .then(|| std::path::PathBuf::from(f[5]))
    })
}

/// The home directory of user `name`, from /etc/passwd.
pub fn user_home(name: &str) -> Option<std::path::PathBuf> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd_home(&text, name)
}

// ---- /etc/subuid, /etc/subgid ------------------------------------------------

/// The ids one user namespace maps above the user's own: the runtime maps
/// exactly this many from the start of the user's range.
pub const SUBID_MAP_COUNT: u64 = 65536;

/// One line of /etc/subuid or /etc/subgid: `owner:start:count`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubidRange {
    pub owner: String,
    pub start: u64,
    pub count: u64,
}

/// A subordinate range the id maps are written from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubRange {
    pub start: u64,
    pub count: u64,
}

/// Parses a subordinate id file; blank, comment and malformed lines (and
/// lines with an empty owner) are skipped.
pub fn parse_subids(contents: &str) -> Vec<SubidRange> {
    contents
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let mut f = line.split(':');
            let owner = f.next()?;
            let start = f.next()?.trim().parse::<u64>().ok()?;
            let count = f.next()?.trim().parse::<u64>().ok()?;
            if owner.is_empty() {
                return None;
            }
            Some(SubidRange {
                owner: owner.to_string(),
                start,
                count,
            })
        })
        .collect()
}

/// Whether a subid entry belongs to the user: by login name, or by the uid
/// written exactly in decimal (`01000` is not uid 1000).
pub fn subid_owner_matches(owner: &str, name: Option<&str>, uid: u32) -> bool {
    !owner.is_empty() && (name == Some(owner) || owner == uid.to_string())
}

/// The range the id maps use: the first of the user's ranges with at least
/// [`SUBID_MAP_COUNT`] ids. `lazaret doctor` and the runtime both decide by
/// this function.
pub fn find_subrange(contents: &str, name: Option<&str>, uid: u32) -> Option<SubRange> {
    parse_subids(contents)
        .into_iter()
        .filter(|r| subid_owner_matches(&r.owner, name, uid))
        .find(|r| r.count >= SUBID_MAP_COUNT)
        .map(|r| SubRange {
            start: r.start,
            count: r.count,
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

    #[test]
    fn subids_doctor_and_runtime_decide_alike() {
        // Files the former doctor parser accepted while the runtime refused:
        // an owner written as `01000` (uid 1000 with a leading zero).
        let zero = "01000:100000:65536\n";
        assert_eq!(find_subrange(zero, Some("alice"), 1000), None);
        assert!(!subid_owner_matches("01000", None, 1000));
        assert!(!subid_owner_matches("+1000", None, 1000));
        // The runtime matched an empty owner when the user had no passwd
        // name; nobody owns an empty owner field.
        assert_eq!(find_subrange(":100000:65536\n", None, 1000), None);
        assert_eq!(find_subrange(":100000:65536\n", Some(""), 1000), None);
        // The first range large enough is used, by name or exact uid.
        let f = "alice:100000:1000\n1000:200000:65536\nalice:300000:131072\n";
        assert_eq!(
            find_subrange(f, Some("alice"), 1000),
            Some(SubRange {
                start: 200000,
                count: 65536
            })
        );
        assert_eq!(find_subrange(f, Some("bob"), 1001), None);
        assert_eq!(find_subrange("alice:100000:65535\n", Some("alice"), 1000), None);
    }

    #[test]
    fn passwd_uid_is_exact() {
        let passwd = "root:x:0:0::/root:/bin/sh\nalice:x:01000:1000::/h:/bin/sh\nbob:x:1001:1001::/h:/bin/sh\n";
        assert_eq!(passwd_by_uid(passwd, 1000), None);
        assert_eq!(passwd_by_uid(passwd, 1001), Some(("bob".to_string(), 1001)));
        assert_eq!(passwd_by_name(passwd, "bob"), Some((1001, 1001)));
        assert_eq!(passwd_by_name(passwd, ""), None);
    }
}
