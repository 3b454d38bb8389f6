//! Host paths as the surface reads them: bounded reads, every symlink hop
//! of a lookup, and `~/` or relative paths made absolute.

use std::path::{Component, Path, PathBuf};

use crate::view::sentry::normalize;

/// The largest config file or hook script read.
const READ_MAX: u64 = 1 << 20;

pub(super) fn read_small(p: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(p).ok()?;
    let mut buf = Vec::new();
    f.take(READ_MAX).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// The paths a lookup of `p` passes through: every symlink on the way and
/// where each leads, one hop at a time (at most 40).
pub(super) fn symlink_hops(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![normalize(p)];
    let mut n = 0;
    while let Some(cur) = todo.pop() {
        n += 1;
        if n > 40 {
            break;
        }
        let mut prefix = PathBuf::new();
        let comps: Vec<Component> = cur.components().collect();
        for (i, c) in comps.iter().enumerate() {
            prefix.push(c.as_os_str());
            if let Ok(t) = std::fs::read_link(&prefix) {
                let base = prefix.parent().unwrap_or(Path::new("/"));
                let mut next = normalize(&base.join(t));
                for r in &comps[i + 1..] {
                    next.push(r.as_os_str());
                }
                let next = normalize(&next);
                out.push(prefix.clone());
                out.push(next.clone());
                todo.push(next);
                break;
            }
        }
    }
    out
}

pub(super) fn expand(v: &str, home: Option<&Path>, base: &Path) -> PathBuf {
    if let Some(p) = tilde(v, home) {
        return p;
    }
    normalize(&base.join(v))
}

/// `~`, `~/rest`, `~user` and `~user/rest` as Git expands them (the home
/// directory, or that user's from the password database); `None` for any
/// other value, or a user or home that is unknown.
pub(super) fn tilde(v: &str, home: Option<&Path>) -> Option<PathBuf> {
    let rest = v.strip_prefix('~')?;
    let (user, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let h = if user.is_empty() {
        home?.to_path_buf()
    } else {
        home_of(user)?
    };
    Some(normalize(&h.join(tail)))
}

/// The home directory of `user` (from /etc/passwd, as the rest of the
/// product reads it).
fn home_of(user: &str) -> Option<PathBuf> {
    crate::sys::hostenv::user_home(user)
}
