//! Where Lazaret keeps things on the host, and the checks that make those
//! places host-private.
//!
//! Storage Root (`$XDG_DATA_HOME/lazaret`, else `~/.local/share/lazaret`):
//!   images/NAME/          OCI layouts Lazaret built (the default image)
//!   lowers/ARTIFACT/      prepared lowers; `lowers/.prep-*` are in progress
//!   domains/DOMAIN/       Domain Roots (durable store, State Anchor, …)
//! Runtime dir (`$XDG_RUNTIME_DIR/lazaret`, else `/tmp/lazaret-UID`):
//!   DOMAIN/lock           the Domain lock (flock)
//!   DOMAIN/hc.sock        the published Host Coordinator socket
//!   DOMAIN/runsc/         runsc's state root for the Domain
//!   DOMAIN/gen/           the current generation's bundle and process specs

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::domain::DomainId;
use crate::sys;

#[derive(Debug)]
pub enum PathError {
    NoHome,
    Create(PathBuf, io::Error),
    NotDirectory(PathBuf),
    WrongOwner { path: PathBuf, owner: u32, uid: u32 },
    TooOpen { path: PathBuf, mode: u32 },
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            PathError::NoHome => write!(f, "cannot find a home directory: set HOME or XDG_DATA_HOME"),
            PathError::Create(p, e) => write!(f, "cannot create {}: {e}", p.display()),
            PathError::NotDirectory(p) => {
                write!(f, "{} must be a directory (not a symlink or file): remove it and retry", p.display())
            }
            PathError::WrongOwner { path, owner, uid } => write!(
                f,
                "{} is owned by uid {owner}, not by you (uid {uid}): refusing to use it; remove it or set another location",
                path.display()
            ),
            PathError::TooOpen { path, mode } => write!(
                f,
                "{} has mode {mode:04o}, which lets others in: run `chmod 0700 {}`",
                path.display(),
                path.display()
            ),
        }
    }
}

impl std::error::Error for PathError {}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute())
}

/// The Storage Root.
pub fn storage_root() -> Result<PathBuf, PathError> {
    if let Some(d) = env_dir("XDG_DATA_HOME") {
        return Ok(d.join("lazaret"));
    }
    let home = env_dir("HOME").ok_or(PathError::NoHome)?;
    Ok(home.join(".local/share/lazaret"))
}

/// The runtime dir: the config override, `$XDG_RUNTIME_DIR/lazaret`, or the
/// documented fallback `/tmp/lazaret-UID` (checked like every other). When
/// that fallback is squatted (another user created it, or it is not a
/// directory), a private per-user location under the Storage Root
/// ([`private_runtime_root`]) is used instead, after one warning that
/// names the squatter's owner: another local user cannot deny service.
pub fn runtime_root(config_override: Option<&Path>) -> PathBuf {
    if let Some(p) = config_override {
        return p.to_path_buf();
    }
    if let Some(d) = env_dir("XDG_RUNTIME_DIR") {
        return d.join("lazaret");
    }
    let tmp = tmp_runtime_root();
    match (squatter(&tmp), private_runtime_root()) {
        (Some(owner), Some(private)) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| eprintln!("lazaret: warning: {}", squat_sentence(&tmp, &owner, &private)));
            private
        }
        _ => tmp,
    }
}

/// `/tmp/lazaret-UID`.
pub fn tmp_runtime_root() -> PathBuf {
    PathBuf::from(format!("/tmp/lazaret-{}", sys::getuid()))
}

/// Who squats `dir` (`lstat`: a symlink is not a directory): `None` when
/// it is absent or a directory of ours; else the owner's uid and name.
pub fn squatter(dir: &Path) -> Option<(u32, String)> {
    let md = std::fs::symlink_metadata(dir).ok()?;
    let uid = sys::getuid();
    if md.file_type().is_dir() && md.uid() == uid {
        return None;
    }
    Some((
        md.uid(),
        sys::hostenv::user_name(md.uid()).unwrap_or_else(|| "?".into()),
    ))
}

/// The one warning of a squatted `/tmp/lazaret-UID`.
pub fn squat_sentence(tmp: &Path, owner: &(u32, String), private: &Path) -> String {
    format!(
        "{} belongs to uid {} ({}), not to you: using {} as the runtime dir (set XDG_RUNTIME_DIR to choose another)",
        tmp.display(),
        owner.0,
        crate::display::escape(&owner.1),
        private.display()
    )
}

/// Unix socket paths hold 107 bytes; the longest Lazaret puts in a
/// runtime dir is `DOMAIN/hc.sock` (29 bytes and a separator) and runsc's
/// sandbox sockets are abstract, so a root up to 70 bytes leaves room.
pub const RUNTIME_ROOT_MAX: usize = 70;

/// The private per-user runtime dir: `STORAGE_ROOT/run` (the Storage Root
/// is the user's, 0700), or `$HOME/.lazaret-run` when that is too long for
/// socket paths; `None` when neither fits.
pub fn private_runtime_root() -> Option<PathBuf> {
    let fits = |p: &PathBuf| p.as_os_str().len() <= RUNTIME_ROOT_MAX;
    storage_root()
        .ok()
        .map(|s| s.join("run"))
        .filter(fits)
        .or_else(|| env_dir("HOME").map(|h| h.join(".lazaret-run")).filter(fits))
}

/// Creates `path` (0700) if missing, then checks it is a real directory
/// owned by us and closed to group and others. Parents are created with
/// default permissions when missing.
pub fn ensure_private_dir(path: &Path) -> Result<(), PathError> {
    if let Some(parent) = path.parent() {
        if !parent.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| PathError::Create(parent.to_path_buf(), e))?;
        }
    }
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(PathError::Create(path.to_path_buf(), e)),
    }
    check_private_dir(path)
}

pub fn check_private_dir(path: &Path) -> Result<(), PathError> {
    let md = std::fs::symlink_metadata(path).map_err(|e| PathError::Create(path.to_path_buf(), e))?;
    if !md.file_type().is_dir() {
        return Err(PathError::NotDirectory(path.to_path_buf()));
    }
    let uid = sys::getuid();
    if md.uid() != uid {
        return Err(PathError::WrongOwner {
            path: path.to_path_buf(),
            owner: md.uid(),
            uid,
        });
    }
    let mode = md.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(PathError::TooOpen {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Removes what stopped Domains left in the runtime base `base`
/// (`/tmp/lazaret-UID`): a Domain's runtime dir holding nothing but an
/// empty `runsc/` (runsc unlinked its last state file after the
/// coordinator had tried to remove the dir). Only that exact shape goes,
/// and only by `rmdir`, which cannot remove anything with content: a dir
/// with a `lock` (a Domain starting or running) or any other entry stays.
/// A CLI that is just creating the same dir retries (`connect_or_start`).
/// Returns how many were removed.
pub fn sweep_runtime(base: &Path, keep: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(base) else { return 0 };
    let mut removed = 0;
    for e in rd.flatten() {
        let dir = e.path();
        if dir == keep || DomainId::parse(&e.file_name().to_string_lossy()).is_err() {
            continue;
        }
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let only_runsc = std::fs::read_dir(&dir).is_ok_and(|rd| {
            let names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
            names.len() == 1 && names[0] == "runsc"
        });
        let runsc = dir.join("runsc");
        let runsc_dir = std::fs::symlink_metadata(&runsc).is_ok_and(|m| m.file_type().is_dir());
        if only_runsc && runsc_dir && std::fs::remove_dir(&runsc).is_ok() && std::fs::remove_dir(&dir).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Host paths of one Domain.
#[derive(Clone, Debug)]
pub struct DomainPaths {
    /// Domain Root in the Storage Root (persistent).
    pub root: PathBuf,
    /// Per-Domain runtime dir (transient).
    pub run: PathBuf,
}

impl DomainPaths {
    pub fn new(storage: &Path, runtime: &Path, domain_id: &DomainId) -> DomainPaths {
        DomainPaths {
            root: storage.join("domains").join(domain_id.as_str()),
            run: runtime.join(domain_id.as_str()),
        }
    }
    pub fn store(&self) -> PathBuf {
        self.root.join("store.sqlite")
    }
    pub fn lock(&self) -> PathBuf {
        self.run.join("lock")
    }
    pub fn socket(&self) -> PathBuf {
        self.run.join("hc.sock")
    }
    pub fn runsc_root(&self) -> PathBuf {
        self.run.join("runsc")
    }
    /// Per-Domain storage shown at Git-ignored workspace paths.
    pub fn ignored_dir(&self) -> PathBuf {
        self.root.join("ignored")
    }
    pub fn gen_dir(&self) -> PathBuf {
        self.run.join("gen")
    }
    pub fn log(&self) -> PathBuf {
        self.run.join("coordinator.log")
    }

    /// Removes this Domain's runsc root, only if empty. runsc processes
    /// that outlive the supervisor by a moment (an exec's or a delete's
    /// cleanup) may still be unlinking their last state files: the removal
    /// is retried until `patience` is spent. Returns the names left in it
    /// when it could not go.
    pub fn remove_runsc_root(&self, patience: std::time::Duration) -> Vec<String> {
        let deadline = std::time::Instant::now() + patience;
        let root = self.runsc_root();
        loop {
            match std::fs::remove_dir(&root) {
                Err(e) if e.kind() != io::ErrorKind::NotFound && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                _ => break,
            }
        }
        match std::fs::read_dir(&root) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Creates the Domain Root and runtime dir, both host-private.
    pub fn ensure(&self) -> Result<(), PathError> {
        ensure_private_dir(&self.root)?;
        ensure_private_dir(&self.run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("lazaret-paths-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    /// A runtime dir is squatted unless it is absent or a real directory
    /// of ours; a symlink (even to a directory of ours) is squatted.
    #[test]
    fn squatting_is_decided_by_lstat() {
        let base = scratch("squat");
        std::fs::create_dir_all(&base).unwrap();
        assert_eq!(squatter(&base.join("absent")), None);
        let own = base.join("own");
        std::fs::create_dir(&own).unwrap();
        assert_eq!(squatter(&own), None);
        let link = base.join("link");
        std::os::unix::fs::symlink(&own, &link).unwrap();
        assert_eq!(squatter(&link).map(|o| o.0), Some(sys::getuid()));
        let file = base.join("file");
        std::fs::write(&file, "").unwrap();
        assert!(squatter(&file).is_some());
        let s = squat_sentence(Path::new("/tmp/lazaret-1"), &(7, "mal\x1b".into()), Path::new("/h/run"));
        assert!(
            s.contains("uid 7") && s.contains("/h/run") && !s.contains('\u{1b}'),
            "{s}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Only a Domain runtime dir holding nothing but an empty `runsc/` is
    /// swept; every other shape, and the caller's own dir, stays.
    #[test]
    fn sweep_removes_only_empty_leftovers() {
        let base = scratch("sweep");
        let id = |n: u8| format!("{:020x}", n);
        let mk = |name: &str, entries: &[&str]| {
            let d = base.join(name);
            std::fs::create_dir_all(&d).unwrap();
            for e in entries {
                if let Some(dir) = e.strip_suffix('/') {
                    std::fs::create_dir_all(d.join(dir)).unwrap();
                } else {
                    std::fs::write(d.join(e), "x").unwrap();
                }
            }
            d
        };
        let leftover = mk(&id(1), &["runsc/"]);
        let running = mk(&id(2), &["lock", "runsc/"]);
        let busy = mk(&id(3), &["runsc/", "runsc/lz-x_sandbox:lz-x.state"]);
        let fresh = mk(&id(4), &[]);
        let own = mk(&id(5), &["runsc/"]);
        let other = mk("not-a-domain-id", &["runsc/"]);
        let file_runsc = mk(&id(6), &["runsc"]);
        let link = base.join(id(7));
        std::os::unix::fs::symlink(&leftover, &link).unwrap();
        assert_eq!(sweep_runtime(&base, &own), 1);
        assert!(!leftover.exists(), "the leftover was not swept");
        for kept in [&running, &busy, &fresh, &own, &other, &file_runsc] {
            assert!(kept.exists(), "{} was swept", kept.display());
        }
        assert!(running.join("runsc").is_dir() && busy.join("runsc").is_dir() && own.join("runsc").is_dir());
        assert!(
            std::fs::symlink_metadata(&link).is_ok(),
            "a symlink was followed or removed"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// The runsc root goes once it is empty; what is left is named.
    #[test]
    fn runsc_root_removal_reports_what_is_left() {
        let base = scratch("rr");
        let dp = DomainPaths {
            root: base.join("root"),
            run: base.join("run"),
        };
        std::fs::create_dir_all(dp.runsc_root()).unwrap();
        std::fs::write(dp.runsc_root().join("state"), "x").unwrap();
        let left = dp.remove_runsc_root(std::time::Duration::from_millis(50));
        assert_eq!(left, ["state"]);
        std::fs::remove_file(dp.runsc_root().join("state")).unwrap();
        assert!(dp.remove_runsc_root(std::time::Duration::from_millis(50)).is_empty());
        assert!(!dp.runsc_root().exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    // Covers SR-10.
    #[test]
    fn creates_private_dir() {
        let p = scratch("new").join("a");
        ensure_private_dir(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    // Covers SR-10.
    #[test]
    fn refuses_group_writable_dir() {
        let p = scratch("open");
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = ensure_private_dir(&p).unwrap_err().to_string();
        assert!(e.contains("mode 0770") && e.contains("chmod 0700"), "{e}");
        std::fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn refuses_symlink() {
        let base = scratch("link");
        std::fs::create_dir_all(&base).unwrap();
        let target = base.join("t");
        std::fs::create_dir(&target).unwrap();
        let link = base.join("l");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = ensure_private_dir(&link).unwrap_err().to_string();
        assert!(e.contains("must be a directory"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
