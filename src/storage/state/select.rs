//! Opening a chosen Domain's state (`open`) and locking it for
//! maintenance.

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::error::*;
use super::meta::*;
use crate::config;
use crate::domain;
use crate::storage::paths::{self, DomainPaths};

// ---- selecting a Domain ----------------------------------------------------------------

pub(crate) struct Selected {
    pub(super) id: domain::DomainId,
    pub(super) paths: DomainPaths,
    pub(super) meta: Option<DomainMeta>,
    pub(super) storage: PathBuf,
}

pub(crate) fn is_domain_id(s: &str) -> bool {
    domain::DomainId::parse(s).is_ok()
}

pub(super) fn dirs() -> Result<(config::Config, PathBuf, PathBuf)> {
    let cfg = config::load(&config::config_path()).map_err(StateError::Config)?;
    let storage = paths::storage_root().map_err(StateError::Dirs)?;
    let runtime = paths::runtime_root(cfg.runtime_dir.as_deref());
    Ok((cfg, storage, runtime))
}

/// The Domain `id` names, with its state: `NoState` when it has no
/// Domain Root. Choosing it is the client's (`client::select`).
pub(crate) fn open(id: domain::DomainId) -> Result<Selected> {
    let (_cfg, storage, runtime) = dirs()?;
    let paths = DomainPaths::new(&storage, &runtime, &id);
    match std::fs::symlink_metadata(&paths.root) {
        Ok(md) if md.is_dir() => {}
        _ => return Err(StateError::NoState { id, root: paths.root }),
    }
    let meta = read_meta(&paths.root);
    Ok(Selected {
        id,
        paths,
        meta,
        storage,
    })
}

/// Whether a coordinator answers on the Domain's socket.
fn published(p: &DomainPaths) -> bool {
    UnixStream::connect(p.socket()).is_ok()
}

/// Whether anything uses the Domain: its socket answers or its lock is
/// held. Takes and drops the lock to find out.
pub fn is_active(p: &DomainPaths) -> bool {
    if published(p) {
        return true;
    }
    if !p.lock().exists() {
        return false;
    }
    // Taking the lock (and dropping it at once) means no one holds it.
    !matches!(domain::try_lock(&p.lock()), Ok(Some(_)))
}

/// The Domain lock, held for maintenance: refused when a
/// coordinator holds it or the Domain is published.
pub struct Maintenance {
    lock: Option<File>,
    path: PathBuf,
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        // Like the coordinator: unlink while still holding it.
        if self.lock.is_some() {
            let _ = std::fs::remove_file(&self.path);
            // And the Domain's runtime dir, if that left it empty.
            if let Some(run) = self.path.parent() {
                let _ = std::fs::remove_dir(run);
            }
        }
        self.lock = None;
    }
}

/// How long maintenance waits for a Domain that holds its lock without
/// being published (a teardown in progress).
pub const MAINTENANCE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

pub fn lock_for_maintenance(p: &DomainPaths, id: &domain::DomainId) -> Result<Maintenance> {
    lock_domain(p, id, MAINTENANCE_WAIT)
}

/// The Domain lock if it can be had within `wait` while the Domain stays
/// unpublished.
pub fn lock_domain(p: &DomainPaths, id: &domain::DomainId, wait: std::time::Duration) -> Result<Maintenance> {
    if published(p) {
        return Err(StateError::Running(id.clone()));
    }
    paths::ensure_private_dir(&p.run).map_err(StateError::Dirs)?;
    // A lock held by an unpublished coordinator is one that is tearing
    // down (or starting): wait a little for it, never while published.
    let deadline = std::time::Instant::now() + wait;
    let lock = loop {
        // A coordinator that just stopped may have removed the runtime dir.
        let _ = paths::ensure_private_dir(&p.run);
        if let Some(l) = domain::try_lock(&p.lock()).map_err(StateError::Lock)? {
            break l;
        }
        if published(p) {
            return Err(StateError::Running(id.clone()));
        }
        if std::time::Instant::now() > deadline {
            return Err(StateError::Locked(id.clone()));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    if published(p) {
        return Err(StateError::StartedMeanwhile(id.clone()));
    }
    Ok(Maintenance {
        lock: Some(lock),
        path: p.lock(),
    })
}
