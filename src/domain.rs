//! Domains: the scope of one (profile, canonical workspace) pair.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum DomainError {
    Workspace(PathBuf, io::Error),
    NotDirectory(PathBuf),
    Root,
    /// The workspace (or the `.git` that made it the workspace) belongs to
    /// another user.
    NotOwned {
        path: PathBuf,
        owner: u32,
    },
    /// A world-writable directory (such as /tmp) as the workspace root.
    WorldWritable(PathBuf),
    /// The workspace is, or contains, something of the user's own or of
    /// Lazaret's that the sandbox must not reach.
    Contains {
        workspace: PathBuf,
        what: &'static str,
        path: PathBuf,
    },
    /// The workspace lies inside a directory of Lazaret's own (the storage
    /// root, the runtime dir): the sandbox would write images, other
    /// Domains' state or control files.
    Inside {
        workspace: PathBuf,
        what: &'static str,
        path: PathBuf,
    },
}

impl fmt::Display for DomainError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            DomainError::Workspace(p, e) => write!(f, "workspace {}: {e}", p.display()),
            DomainError::NotDirectory(p) => write!(f, "workspace {} is not a directory", p.display()),
            DomainError::Root => write!(f, "the workspace cannot be the filesystem root"),
            DomainError::NotOwned { path, owner } => write!(
                f,
                "{} is owned by uid {owner}, not by you: refusing it as (part of) the workspace; \
                 run in a directory you own (or remove a stray `.git` you did not make)",
                crate::display::escape_path(path)
            ),
            DomainError::WorldWritable(p) => write!(
                f,
                "{} is writable by every user: refusing it as the workspace; make a directory of your own (e.g. `mkdir ~/work && cd ~/work`)",
                crate::display::escape_path(p)
            ),
            DomainError::Contains { workspace, what, path } => write!(
                f,
                "the workspace {} contains {what} {}: refusing it (the sandbox would read and write it); \
                 run in a project directory below it, or move {what} outside the workspace",
                crate::display::escape_path(workspace),
                crate::display::escape_path(path)
            ),
            DomainError::Inside { workspace, what, path } => write!(
                f,
                "the workspace {} lies inside {what} {}: refusing it (the sandbox would read and write Lazaret's own files there); \
                 run in a project directory outside it",
                crate::display::escape_path(workspace),
                crate::display::escape_path(path)
            ),
        }
    }
}

/// The canonical workspace for `dir`: the enclosing Git top level when there
/// is one, else `dir` itself, with symlinks resolved. The top level is found
/// by looking for a `.git` entry rather than by running host `git`, which
/// would read configuration the workspace controls.
pub fn canonical_workspace(dir: &Path) -> Result<PathBuf, DomainError> {
    let real = std::fs::canonicalize(dir).map_err(|e| DomainError::Workspace(dir.to_path_buf(), e))?;
    if !real.is_dir() {
        return Err(DomainError::NotDirectory(real));
    }
    let mut cur = real.as_path();
    let top = loop {
        if let Ok(md) = std::fs::symlink_metadata(cur.join(".git")) {
            use std::os::unix::fs::MetadataExt;
            if md.uid() != crate::sys::getuid() {
                return Err(DomainError::NotOwned {
                    path: cur.join(".git"),
                    owner: md.uid(),
                });
            }
            break cur.to_path_buf();
        }
        match cur.parent() {
            Some(p) => cur = p,
            None => break real.clone(),
        }
    };
    if top == Path::new("/") {
        return Err(DomainError::Root);
    }
    Ok(top)
}

/// Workspace-root safety, after `canonical_workspace`: the workspace is a
/// directory of the user's own, not writable by everyone, and is not (and
/// does not contain) `$HOME` or any of `keep` (what: path pairs such as the
/// Storage Root, the runtime dir, the config file).
pub fn check_workspace_root(workspace: &Path, keep: &[(&'static str, &Path)]) -> Result<(), DomainError> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(workspace).map_err(|e| DomainError::Workspace(workspace.to_path_buf(), e))?;
    if md.uid() != crate::sys::getuid() {
        return Err(DomainError::NotOwned {
            path: workspace.to_path_buf(),
            owner: md.uid(),
        });
    }
    if md.mode() & 0o002 != 0 {
        return Err(DomainError::WorldWritable(workspace.to_path_buf()));
    }
    for (what, p) in keep {
        let r = resolve_lexically(p);
        if r.starts_with(workspace) {
            return Err(DomainError::Contains {
                workspace: workspace.to_path_buf(),
                what,
                path: p.to_path_buf(),
            });
        }
        // Below Lazaret's own directories (`what` names them "the Lazaret
        // ..."; below $HOME is where projects live).
        if what.starts_with("the Lazaret") && r.is_dir() && workspace.starts_with(&r) {
            return Err(DomainError::Inside {
                workspace: workspace.to_path_buf(),
                what,
                path: p.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// `p` with its longest existing ancestor canonicalized and the rest
/// appended (paths that do not exist yet still compare).
fn resolve_lexically(p: &Path) -> PathBuf {
    let mut head = p.to_path_buf();
    let mut tail = Vec::new();
    loop {
        if let Ok(c) = head.canonicalize() {
            let mut out = c;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (head.file_name().map(|n| n.to_os_string()), head.parent()) {
            (Some(n), Some(parent)) => {
                tail.push(n);
                head = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Deterministic Domain ID: truncated SHA-256 over the profile name and the
/// canonical workspace path. A namespace, never a credential.
pub fn domain_id(profile: &str, workspace: &Path) -> DomainId {
    use std::os::unix::ffi::OsStrExt;
    let mut data = b"lazaret-domain-v1\0".to_vec();
    data.extend_from_slice(profile.as_bytes());
    data.push(0);
    data.extend_from_slice(workspace.as_os_str().as_bytes());
    DomainId(hex(&openssl::sha::sha256(&data)[..DomainId::LEN / 2]))
}

/// A value that is not the identifier it was read as: `what` names the
/// kind, `expected` its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidId {
    pub what: &'static str,
    pub expected: &'static str,
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "not a {} ({})", self.what, self.expected)
    }
}

/// True when `s` is `len` lowercase hex digits (the shape of every random
/// or hashed id Lazaret makes).
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A Domain's ID: 20 lowercase hex digits, as [`domain_id`] makes it. It
/// names the Domain's directories under the storage root and the runtime
/// dir, so only a value of that shape can become one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DomainId(String);

impl DomainId {
    pub const LEN: usize = 20;
    /// Digits of the short form (sandbox container names, messages).
    pub const SHORT_LEN: usize = 8;

    pub fn parse(s: &str) -> Result<DomainId, InvalidId> {
        if is_lower_hex(s, Self::LEN) {
            Ok(DomainId(s.to_string()))
        } else {
            Err(InvalidId {
                what: "Domain ID",
                expected: "20 lowercase hex digits",
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first [`Self::SHORT_LEN`] digits.
    pub fn short(&self) -> &str {
        &self.0[..Self::SHORT_LEN]
    }
}

impl fmt::Display for DomainId {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for DomainId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<Path> for DomainId {
    fn as_ref(&self) -> &Path {
        Path::new(&self.0)
    }
}

impl From<&DomainId> for String {
    fn from(id: &DomainId) -> String {
        id.0.clone()
    }
}

impl PartialEq<str> for DomainId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for DomainId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for DomainId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// A generation of a Domain: the store numbers them 1, 2, 3, … and never
/// reuses a number. Stored as an SQLite INTEGER, so at most `i64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Generation(u64);

impl Generation {
    pub const FIRST: Generation = Generation(1);

    /// `n` as a generation: 0 and numbers beyond `i64::MAX` are refused.
    pub fn new(n: u64) -> Result<Generation, InvalidId> {
        if n == 0 || n > i64::MAX as u64 {
            return Err(InvalidId {
                what: "generation",
                expected: "a number from 1 to 2^63-1",
            });
        }
        Ok(Generation(n))
    }

    pub fn get(self) -> u64 {
        self.0
    }

    /// The generation after this one (`None` past the largest).
    pub fn next(self) -> Option<Generation> {
        Generation::new(self.0 + 1).ok()
    }
}

impl fmt::Display for Generation {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh random id (hex) for components, sessions and generations.
pub fn random_id(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    openssl::rand::rand_bytes(&mut buf).expect("openssl rand");
    hex(&buf)
}

/// Why the Domain lock could not be tried.
#[derive(Debug)]
pub enum LockError {
    Open(PathBuf, io::Error),
    Flock(PathBuf, io::Error),
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            LockError::Open(p, e) => write!(f, "cannot open the Domain lock {}: {e}", p.display()),
            LockError::Flock(p, e) => write!(f, "flock {}: {e}", p.display()),
        }
    }
}

/// The Domain lock, if we win it on the file that is still at its path.
pub fn try_lock(path: &Path) -> Result<Option<std::fs::File>, LockError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(crate::sys::O_CLOEXEC | crate::sys::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        // The runtime dir was removed by a coordinator that just stopped:
        // not won; the caller recreates the dir and tries again.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LockError::Open(path.to_path_buf(), e)),
    };
    if !crate::sys::try_lock_exclusive(&f).map_err(|e| LockError::Flock(path.to_path_buf(), e))? {
        return Ok(None);
    }
    // A coordinator unlinks the lock file at teardown while holding it: a
    // lock on an unlinked inode is worth nothing.
    let same = match (f.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
        _ => false,
    };
    Ok(same.then_some(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_roots_that_swallow_too_much_are_refused() {
        let base = std::env::temp_dir().join(format!("lz-wsroot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("home/proj")).unwrap();
        let home = base.join("home");
        let home = home.canonicalize().unwrap();
        let keep = [("your home directory", home.as_path())];
        let e = check_workspace_root(&home, &keep).unwrap_err().to_string();
        assert!(
            e.contains(&home.display().to_string()) && e.contains("home directory"),
            "{e}"
        );
        assert!(check_workspace_root(&base.canonicalize().unwrap(), &keep).is_err());
        assert!(check_workspace_root(&home.join("proj"), &keep).is_ok());
        let store = home.join("proj/.local/share/lazaret");
        assert!(check_workspace_root(&home.join("proj"), &[("the storage root", store.as_path())]).is_err());
        // A workspace inside Lazaret's own directories.
        std::fs::create_dir_all(home.join("store/images")).unwrap();
        let store = home.join("store");
        let e = check_workspace_root(&store.join("images"), &[("the Lazaret storage root", store.as_path())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lies inside") && e.contains(&store.display().to_string()),
            "{e}"
        );
        let e = check_workspace_root(Path::new("/tmp"), &[]).unwrap_err().to_string();
        assert!(e.contains("/tmp"), "{e}");
        let _ = std::fs::remove_dir_all(&base);
    }

    // Covers FR-1.
    #[test]
    fn domain_id_is_stable_and_separates_profiles() {
        let a = domain_id("default", Path::new("/home/u/p"));
        assert_eq!(a, domain_id("default", Path::new("/home/u/p")));
        assert_eq!(a.as_str().len(), 20);
        assert_ne!(a, domain_id("other", Path::new("/home/u/p")));
        assert_ne!(a, domain_id("default", Path::new("/home/u/q")));
        // The separator keeps ("ab","/c") and ("a","b/c") apart.
        assert_ne!(domain_id("ab", Path::new("/c")), domain_id("a", Path::new("b/c")));
    }

    #[test]
    fn domain_id_parse_refuses_what_is_not_one() {
        let made = domain_id("default", Path::new("/home/u/p"));
        assert_eq!(DomainId::parse(made.as_str()), Ok(made.clone()));
        assert_eq!(made.short(), &made.as_str()[..8]);
        for bad in [
            "",
            "0123456789abcdef012",
            "0123456789abcdef01234",
            "0123456789ABCDEF0123",
            "../../etc/passwd0000",
            "0123456789abcdef012/",
            "0123456789abcdef012\n",
            "0123456789abcdef01g3",
            "٠123456789abcdef012",
        ] {
            let e = DomainId::parse(bad).unwrap_err();
            assert!(e.to_string().contains("Domain ID"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn generations_order_and_step() {
        assert!(Generation::new(0).is_err());
        assert!(Generation::new(i64::MAX as u64 + 1).is_err());
        let g = Generation::new(1).unwrap();
        assert_eq!(g, Generation::FIRST);
        let n = g.next().unwrap();
        assert_eq!(n.get(), 2);
        assert!(g < n && n < n.next().unwrap());
        assert_eq!(n.to_string(), "2");
        let last = Generation::new(i64::MAX as u64).unwrap();
        assert_eq!(last.next(), None);
    }

    #[test]
    fn workspace_resolves_to_git_top_level() {
        let base = std::env::temp_dir().join(format!("lazaret-dom-{}", std::process::id()));
        let sub = base.join("repo/src/deep");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(base.join("repo/.git")).unwrap();
        let top = canonical_workspace(&sub).unwrap();
        assert_eq!(top, std::fs::canonicalize(base.join("repo")).unwrap());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn missing_workspace_is_an_error() {
        let e = canonical_workspace(Path::new("/nonexistent/lazaret/ws")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/lazaret/ws"));
    }
}
