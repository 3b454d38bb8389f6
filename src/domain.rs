//! Domains: the scope of one (profile, canonical workspace) pair (FR-1).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum DomainError {
    Workspace(PathBuf, io::Error),
    NotDirectory(PathBuf),
    Root,
}

impl fmt::Display for DomainError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            DomainError::Workspace(p, e) => write!(f, "workspace {}: {e}", p.display()),
            DomainError::NotDirectory(p) => write!(f, "workspace {} is not a directory", p.display()),
            DomainError::Root => write!(f, "the workspace cannot be the filesystem root"),
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
        if std::fs::symlink_metadata(cur.join(".git")).is_ok() {
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

/// Deterministic Domain ID: truncated SHA-256 over the profile name and the
/// canonical workspace path. A namespace, never a credential.
pub fn domain_id(profile: &str, workspace: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut data = b"lazaret-domain-v1\0".to_vec();
    data.extend_from_slice(profile.as_bytes());
    data.push(0);
    data.extend_from_slice(workspace.as_os_str().as_bytes());
    hex(&openssl::sha::sha256(&data)[..10])
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_id_is_stable_and_separates_profiles() {
        let a = domain_id("default", Path::new("/home/u/p"));
        assert_eq!(a, domain_id("default", Path::new("/home/u/p")));
        assert_eq!(a.len(), 20);
        assert_ne!(a, domain_id("other", Path::new("/home/u/p")));
        assert_ne!(a, domain_id("default", Path::new("/home/u/q")));
        // The separator keeps ("ab","/c") and ("a","b/c") apart.
        assert_ne!(domain_id("ab", Path::new("/c")), domain_id("a", Path::new("b/c")));
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
