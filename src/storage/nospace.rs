//! A full disk, said plainly: "no space left on DEVICE (PATH)" wherever
//! Lazaret writes (image build, unpack, the Domain store, state reset),
//! instead of whatever a helper printed after the write failed.

use std::path::{Path, PathBuf};

/// Below this many free bytes a filesystem counts as full.
const FULL_BELOW: u64 = 1024 * 1024;

/// Phrases helpers print when a write failed for lack of space.
const PHRASES: &[&str] = &[
    "no space left on device",
    "database or disk is full",
    "disk quota exceeded",
    "enospc",
];

/// Whether `text` reports a full disk.
pub fn mentions(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    PHRASES.iter().any(|p| t.contains(p))
}

/// Whether the filesystem holding `path` (or its nearest existing
/// ancestor) has (nearly) no space left for this user.
pub fn is_full(path: &Path) -> bool {
    let Some(p) = existing(path) else { return false };
    match rustix::fs::statvfs(&p) {
        Ok(s) => s.f_bavail.saturating_mul(s.f_frsize) < FULL_BELOW || (s.f_files > 0 && s.f_favail == 0),
        Err(_) => false,
    }
}

/// Free bytes for this user on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let p = existing(path)?;
    rustix::fs::statvfs(&p)
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

fn existing(path: &Path) -> Option<PathBuf> {
    path.ancestors().find(|a| a.exists()).map(Path::to_path_buf)
}

/// The mount source (device) of the filesystem holding `path`, from
/// /proc/self/mountinfo; "device" when it cannot be told.
pub fn device_of(path: &Path) -> String {
    let Some(p) = existing(path).and_then(|p| p.canonicalize().ok()) else {
        return "device".into();
    };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return "device".into();
    };
    device_in(&info, &p).unwrap_or_else(|| "device".into())
}

/// The source of the longest mount point in `mountinfo` that holds `path`.
pub fn device_in(mountinfo: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(mp) = f.get(4) else { continue };
        let mp = unescape_mountinfo(mp);
        let Some(dash) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        let Some(source) = f.get(dash + 2) else { continue };
        if path.starts_with(&mp) && best.as_ref().is_none_or(|(l, _)| mp.len() >= *l) {
            let fstype = f.get(dash + 1).copied().unwrap_or("");
            let dev = if source.starts_with('/') || fstype == *source {
                unescape_mountinfo(source)
            } else {
                format!("{} ({fstype})", unescape_mountinfo(source))
            };
            best = Some((mp.len(), dev));
        }
    }
    best.map(|(_, d)| d)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push(((b[i + 1] - b'0') << 6) | ((b[i + 2] - b'0') << 3) | (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// "no space left on DEVICE (PATH)".
pub fn message(path: &Path) -> String {
    Full::at(path).to_string()
}

/// A full filesystem a failure is said through: its device and the path
/// on it.
#[derive(Debug)]
pub struct Full {
    pub device: String,
    pub path: PathBuf,
}

impl Full {
    /// The filesystem holding `path`.
    pub fn at(path: &Path) -> Full {
        Full {
            device: device_of(path),
            path: path.to_path_buf(),
        }
    }

    /// `msg` led by "no space left on DEVICE (PATH)". A helper's log after
    /// the sentence is cut to its first line: the rest is its fallout.
    pub fn said(&self, msg: &str) -> String {
        let first = msg.lines().next().unwrap_or("");
        format!("{self}: free space there and try again ({first})")
    }
}

/// "no space left on DEVICE (PATH)".
impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "no space left on {} ({})", self.device, self.path.display())
    }
}

/// The full filesystem `msg` is to be said through: the first of `paths`
/// that is full, else the first of them when `msg` reports a full disk;
/// none when `msg` is already said so.
pub fn full_for(msg: &str, paths: &[&Path]) -> Option<Full> {
    if msg.starts_with("no space left on ") && msg.contains(": free space there") {
        return None;
    }
    let path = match paths.iter().find(|p| is_full(p)) {
        Some(p) => p,
        None if mentions(msg) => paths.first()?,
        None => return None,
    };
    Some(Full::at(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `msg` as the client settles it (`client::failure::plain_failure`).
    fn explain(msg: &str, paths: &[&Path]) -> String {
        match full_for(msg, paths) {
            Some(full) => full.said(msg),
            None => msg.to_string(),
        }
    }

    #[test]
    fn device_is_the_longest_mount_holding_the_path() {
        let info = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
30 22 0:40 / /home/u/small rw - tmpfs tmpfs rw,size=1024k
31 22 0:41 / /home/u/sm\\040all rw - tmpfs tmpfs rw
";
        assert_eq!(device_in(info, Path::new("/home/u/small/x")).unwrap(), "tmpfs");
        assert_eq!(device_in(info, Path::new("/home/u/sm all/x")).unwrap(), "tmpfs");
        assert_eq!(device_in(info, Path::new("/home/u/other")).unwrap(), "/dev/sda1");
    }

    #[test]
    fn phrases_of_helpers_count() {
        assert!(mentions("tar: write error: No space left on device"));
        assert!(mentions("Error: database or disk is full"));
        assert!(!mentions("Couldn't download package"));
        let m = explain(
            "umoci unpack failed: write x: no space left on device\nmore",
            &[Path::new("/")],
        );
        assert!(m.starts_with("no space left on "), "{m}");
        assert!(!m.contains("more"), "{m}");
        assert_eq!(
            explain("other failure", &[Path::new("/nonexistent-x")]),
            "other failure"
        );
    }
}
