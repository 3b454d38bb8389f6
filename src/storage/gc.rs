//! What `lazaret image list|prune` show and remove: prepared lowers and
//! their leases, image leftovers (the client prints them,
//! `client/image.rs`).
//!
//! An artifact is reclaimed only when no Domain holds an unreleased lease
//! on it. Finding that out needs every Domain's store, and only the holder
//! of a Domain's lock may open its store: prune takes each Domain's
//! lock without blocking. A Domain whose lock is held (or that is
//! published) is active; its artifact is the one its coordinator recorded
//! in `domain.json` before it leased and used it.
//!
//! Races with preparers are closed by the lowers lock `lowers/.gc.lock`: a
//! coordinator holds it shared from before it records its artifact until
//! the lower is prepared and leased; prune holds it exclusively while it
//! decides and deletes. So prune never sees a lease-in-the-making.
//!
//! Prune touches only: finished artifacts (a directory named by its
//! artifact id whose `lazaret-artifact` marker names a digest that derives
//! that id), `.prep-ARTIFACT-PID-START-RAND` trees whose preparer is dead,
//! and its own `.trash-*` trees. Anything else under `lowers/` is foreign
//! and left alone. An artifact is renamed to `.trash-*` before it is
//! deleted, so a half-deleted tree never looks finished.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::storage::image;
use crate::storage::paths::{self, DomainPaths};
use crate::storage::state::{self, StateError};
use crate::storage::store::Store;

pub const GC_LOCK: &str = ".gc.lock";

type Result<T> = std::result::Result<T, StateError>;

fn open_gc_lock(storage: &Path) -> std::io::Result<File> {
    let lowers = image::lowers_dir(storage);
    std::fs::DirBuilder::new().recursive(true).create(&lowers)?;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(crate::sys::O_CLOEXEC | crate::sys::O_NOFOLLOW)
        .open(lowers.join(GC_LOCK))
}

/// Why the lowers lock could not be taken shared.
#[derive(Debug)]
pub enum LockError {
    /// Creating or opening the lock file.
    Open(std::io::Error),
    /// `flock` itself failed.
    Lock(std::io::Error),
    /// A prune held it past the deadline.
    Busy,
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            LockError::Open(e) | LockError::Lock(e) => write!(f, "lowers lock: {e}"),
            LockError::Busy => write!(f, "`lazaret image prune` holds the lowers lock for too long: retry"),
        }
    }
}

impl std::error::Error for LockError {}

/// The lowers lock, shared: held by a coordinator while it records,
/// prepares and leases its lower. Waits while a prune runs.
pub fn lock_shared(storage: &Path) -> std::result::Result<File, LockError> {
    let f = open_gc_lock(storage).map_err(LockError::Open)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match crate::sys::try_lock_shared(&f) {
            Ok(true) => return Ok(f),
            Ok(false) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(false) => return Err(LockError::Busy),
            Err(e) => return Err(LockError::Lock(e)),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Artifact { id: String, digest: String, source: String },
    Preparing { name: String, live: bool },
    Trash(String),
    Foreign(String),
}

/// A `.prep-ARTIFACT-PID-START-RAND` name: (pid, start time).
pub fn parse_prep(name: &str) -> Option<(i32, u64)> {
    let rest = name.strip_prefix(".prep-")?;
    let f: Vec<&str> = rest.split('-').collect();
    if f.len() != 4 || f[0].len() != 24 || !f[0].bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((f[1].parse().ok()?, f[2].parse().ok()?))
}

/// Classifies one name under `lowers/`. `marker` is the artifact marker's
/// text when the entry is a real directory that has one. Pure.
pub fn classify(name: &str, is_dir: bool, marker: Option<&str>, alive: impl Fn(i32, u64) -> bool) -> Option<Item> {
    if name == GC_LOCK {
        return None;
    }
    if !is_dir {
        return Some(Item::Foreign(name.into()));
    }
    if let Some((pid, start)) = parse_prep(name) {
        return Some(Item::Preparing {
            name: name.into(),
            live: alive(pid, start),
        });
    }
    if let Some(rest) = name.strip_prefix(".trash-") {
        let id = rest.split('-').next().unwrap_or("");
        if id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(Item::Trash(name.into()));
        }
    }
    if let Some(m) = marker {
        let mut lines = m.lines();
        let digest = lines.next().unwrap_or("").to_string();
        let source = lines.next().unwrap_or("").to_string();
        if !digest.is_empty() && image::artifact_id(&digest) == name {
            return Some(Item::Artifact {
                id: name.into(),
                digest,
                source,
            });
        }
    }
    Some(Item::Foreign(name.into()))
}

fn scan(storage: &Path) -> Vec<Item> {
    let lowers = image::lowers_dir(storage);
    let mut out = Vec::new();
    let Some(names) = crate::storage::imagegc::sorted_entries(&lowers) else {
        return out;
    };
    for (n, is_dir) in names {
        let marker = if is_dir {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(crate::sys::O_NOFOLLOW)
                .open(lowers.join(&n).join("lazaret-artifact"))
                .ok()
                .and_then(|f| {
                    use std::io::Read;
                    let mut s = String::new();
                    f.take(4096).read_to_string(&mut s).ok().map(|_| s)
                })
        } else {
            None
        };
        if let Some(item) = classify(&n, is_dir, marker.as_deref(), crate::sys::same_process) {
            out.push(item);
        }
    }
    out
}

/// Which artifacts each Domain holds. `Err` names a Domain whose leases
/// cannot be known (prune then reclaims nothing).
struct Leases {
    /// artifact → (Domain ids leasing it, active Domains among them)
    by_artifact: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>,
    unknown: Vec<String>,
}

fn leases(storage: &Path, runtime: &Path) -> Leases {
    let mut l = Leases {
        by_artifact: BTreeMap::new(),
        unknown: Vec::new(),
    };
    let Ok(rd) = std::fs::read_dir(storage.join("domains")) else {
        return l;
    };
    for e in rd.flatten() {
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        // Only a directory named by a Domain ID is a Domain (no
        // coordinator uses any other, so nothing depends on its leases).
        let Ok(id) = crate::domain::DomainId::parse(&e.file_name().to_string_lossy()) else {
            continue;
        };
        let dp = DomainPaths::new(storage, runtime, &id);
        let meta = state::read_meta(&dp.root);
        let mut add = |art: &str, active: bool| {
            let ent = l.by_artifact.entry(art.to_string()).or_default();
            ent.0.insert(id.to_string());
            if active {
                ent.1.insert(id.to_string());
            }
        };
        let held = state::lock_domain(&dp, &id, Duration::ZERO).ok();
        match held {
            None => {
                // Active: its coordinator recorded its artifact before use.
                match meta.as_ref().filter(|m| !m.artifact.is_empty()) {
                    Some(m) => add(&m.artifact, true),
                    None => l.unknown.push(format!("{id} is active and has no domain.json")),
                }
            }
            Some(_lock) => {
                if !dp.store().exists() {
                    continue;
                }
                match Store::open(&dp.store()).and_then(|s| s.unreleased_leases()) {
                    Ok(arts) => {
                        for a in arts {
                            add(&a, false);
                        }
                    }
                    Err(err) => l.unknown.push(format!("{id}: {err}")),
                }
            }
        }
    }
    l
}

fn dirs() -> Result<(PathBuf, PathBuf)> {
    let cfg = crate::config::load(&crate::config::config_path()).map_err(StateError::Config)?;
    let storage = paths::storage_root().map_err(StateError::Dirs)?;
    Ok((storage, paths::runtime_root(cfg.runtime_dir.as_deref())))
}

/// What the current configuration's profiles refer to (kept by prune).
fn referenced(storage: &Path) -> Result<crate::storage::imagegc::Referenced> {
    let cfg = crate::config::load(&crate::config::config_path()).map_err(StateError::Config)?;
    Ok(crate::storage::imagegc::referenced(&cfg, storage))
}

/// `images/import-*` layouts with their state and disk use.
fn imports(storage: &Path) -> Vec<(String, image::ImportState, u64)> {
    let dir = image::images_dir(storage);
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else { return out };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with("import-") || !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let p = dir.join(&name);
        let marker = std::fs::read_to_string(p.join(image::IMPORT_MARKER)).ok();
        let st = image::import_state(
            marker.as_deref(),
            p.join("index.json").is_file(),
            crate::sys::same_process,
        );
        out.push((name, st, image::du(&p)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One thing `image list` shows, in the order it shows them.
pub enum Listed {
    /// An image layout: the built default or a built recipe.
    Image { name: String, bytes: u64 },
    /// An imported image, its import state and the profiles that use it.
    Import {
        name: String,
        state: image::ImportState,
        bytes: u64,
        profiles: Option<Vec<String>>,
    },
    /// A prepared lower, its leases and the profiles whose image it is.
    Artifact {
        id: String,
        digest: String,
        source: String,
        bytes: u64,
        leased_by: Vec<String>,
        active: Vec<String>,
        profiles: Vec<String>,
    },
    /// A lower being prepared (`live` while its preparer runs).
    Preparing { name: String, live: bool },
    /// One of prune's `.trash-*` trees.
    Trash(String),
    /// Not Lazaret's: never touched.
    Foreign(String),
    /// A leftover under `images/` (an import is listed as `Import`).
    ImageDir {
        item: crate::storage::imagegc::ImageItem,
        path: PathBuf,
        bytes: u64,
    },
}

/// What `image list` shows, and the lowers directory it looked in.
pub fn list() -> Result<(Vec<Listed>, PathBuf)> {
    let (storage, runtime) = dirs()?;
    let items = scan(&storage);
    let l = leases(&storage, &runtime);
    let refs = referenced(&storage)?;
    let lowers = image::lowers_dir(&storage);
    let mut out = Vec::new();
    // Image layouts (the built default and imports) and their disk use.
    let default = image::images_dir(&storage).join("default");
    if default.is_dir() {
        let bytes = image::du(&default);
        out.push(Listed::Image {
            name: "default".into(),
            bytes,
        });
    }
    // Images built from `[images.NAME]` recipes.
    let mut recipes: Vec<String> = std::fs::read_dir(image::images_dir(&storage))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| crate::config::valid_image_name(n) && !n.starts_with("import-"))
                .filter(|n| image::built_recipe(&storage, n).is_some())
                .collect()
        })
        .unwrap_or_default();
    recipes.sort();
    for name in recipes {
        let bytes = image::du(&image::images_dir(&storage).join(&name));
        out.push(Listed::Image { name, bytes });
    }
    for (name, state, bytes) in imports(&storage) {
        let profiles = refs.imports.get(&name).cloned();
        out.push(Listed::Import {
            name,
            state,
            bytes,
            profiles,
        });
    }
    for it in items {
        out.push(match it {
            Item::Artifact { id, digest, source } => {
                let bytes = image::du(&lowers.join(&id));
                let (doms, act) = l.by_artifact.get(&id).cloned().unwrap_or_default();
                let profiles = refs.artifacts.get(&id).cloned().unwrap_or_default();
                Listed::Artifact {
                    id,
                    digest,
                    source,
                    bytes,
                    leased_by: doms.into_iter().collect(),
                    active: act.into_iter().collect(),
                    profiles,
                }
            }
            Item::Preparing { name, live } => Listed::Preparing { name, live },
            Item::Trash(n) => Listed::Trash(n),
            Item::Foreign(n) => Listed::Foreign(n),
        });
    }
    for item in crate::storage::imagegc::scan(&storage, &refs.imports) {
        // Imports are listed above, with their import state.
        if let crate::storage::imagegc::ImageItem::Import { .. } = item {
            continue;
        }
        let path = image::images_dir(&storage).join(item.name());
        let bytes = image::du(&path);
        out.push(Listed::ImageDir { item, path, bytes });
    }
    Ok((out, lowers))
}

/// What `image prune` removed (or would), kept, and left alone.
pub struct Pruned {
    pub removed: Vec<String>,
    pub kept: Vec<String>,
    pub foreign: Vec<String>,
}

pub fn prune(dry_run: bool, all: bool) -> Result<Pruned> {
    let (storage, runtime) = dirs()?;
    let gc = open_gc_lock(&storage).map_err(StateError::LowersLock)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match crate::sys::try_lock_exclusive(&gc) {
            Ok(true) => break,
            Ok(false) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(false) => return Err(StateError::LowerBeingPrepared),
            Err(e) => return Err(StateError::LowersLock(e)),
        }
    }
    let items = scan(&storage);
    let l = leases(&storage, &runtime);
    let refs = referenced(&storage)?;
    if !l.unknown.is_empty() {
        return Err(StateError::LeasesUnreadable(l.unknown));
    }
    let lowers = image::lowers_dir(&storage);
    let mut removed = Vec::new();
    let mut kept = Vec::new();
    // Failed imports go; an import in progress stays even when no profile
    // refers to it (yet).
    let mut import_done = std::collections::BTreeSet::new();
    for (name, st, _) in imports(&storage) {
        if st == image::ImportState::Failed {
            if !dry_run {
                image::remove_tree(&image::images_dir(&storage).join(&name));
            }
            removed.push(name.clone());
        }
        if st != image::ImportState::Complete {
            import_done.insert(name);
        }
    }
    for it in &items {
        match it {
            Item::Artifact { id, .. } => {
                if l.by_artifact.contains_key(id) {
                    kept.push(id.clone());
                    continue;
                }
                // The next `run` of a profile would unpack it again.
                if !all && refs.artifacts.contains_key(id) {
                    kept.push(id.clone());
                    continue;
                }
                if !dry_run {
                    let trash = lowers.join(format!(".trash-{id}-{}", crate::domain::random_id(4)));
                    std::fs::rename(lowers.join(id), &trash)
                        .map_err(|err| StateError::TrashLower { id: id.clone(), err })?;
                    image::remove_tree(&trash);
                }
                removed.push(id.clone());
            }
            Item::Preparing { name, live: false } | Item::Trash(name) => {
                if !dry_run {
                    image::remove_tree(&lowers.join(name));
                }
                removed.push(name.clone());
            }
            Item::Preparing { name, live: true } => kept.push(name.clone()),
            Item::Foreign(_) => {}
        }
    }
    for it in crate::storage::imagegc::scan(&storage, &refs.imports) {
        if import_done.contains(it.name()) {
            continue;
        }
        if it.removable() {
            if !dry_run {
                crate::storage::imagegc::remove(&storage, &it);
            }
            removed.push(format!("images/{}", it.name()));
        } else if let crate::storage::imagegc::ImageItem::Build { .. } = it {
            kept.push(format!("images/{}", it.name()));
        }
    }
    let foreign: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            Item::Foreign(n) => Some(n.clone()),
            _ => None,
        })
        .collect();
    Ok(Pruned { removed, kept, foreign })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Covers OR-7.
    #[test]
    fn only_marked_artifacts_and_dead_preparers_are_ours() {
        let digest = "sha256:".to_string() + &"a".repeat(64);
        let id = image::artifact_id(&digest);
        let marker = format!("{digest}\n/l\n");
        let dead = |_: i32, _: u64| false;
        assert_eq!(
            classify(&id, true, Some(&marker), dead),
            Some(Item::Artifact {
                id: id.clone(),
                digest: digest.clone(),
                source: "/l".into()
            })
        );
        // A marker that does not derive the directory's name is foreign.
        assert!(matches!(
            classify("0123456789abcdef01234567", true, Some(&marker), dead),
            Some(Item::Foreign(_))
        ));
        assert!(matches!(classify(&id, true, None, dead), Some(Item::Foreign(_))));
        assert!(matches!(classify("mine", true, None, dead), Some(Item::Foreign(_))));
        assert!(matches!(classify(&id, false, None, dead), Some(Item::Foreign(_))));
        let prep = format!(".prep-{id}-42-777-ab12");
        assert_eq!(parse_prep(&prep), Some((42, 777)));
        assert_eq!(
            classify(&prep, true, None, |p, s| p == 42 && s == 777),
            Some(Item::Preparing {
                name: prep.clone(),
                live: true
            })
        );
        assert_eq!(
            classify(&prep, true, None, dead),
            Some(Item::Preparing {
                name: prep,
                live: false
            })
        );
        assert!(matches!(
            classify(".prep-x-1-2-3", true, None, dead),
            Some(Item::Foreign(_))
        ));
        assert!(matches!(
            classify(&format!(".trash-{id}-zz"), true, None, dead),
            Some(Item::Trash(_))
        ));
        assert!(matches!(
            classify(".trash-../x", true, None, dead),
            Some(Item::Foreign(_))
        ));
        assert_eq!(classify(GC_LOCK, false, None, dead), None);
    }
}
