//! What a Domain Root holds on disk: its keys, trash, lower, ignored
//! state, and the state helper's walk over its uppers.

use std::path::{Path, PathBuf};

use super::error::*;
use super::select::*;
use crate::display::fit;
use crate::plan::Json;
use crate::storage::anchor::{self, Driver};
use crate::storage::image;
use crate::storage::statefs::{self, Op, Report};

/// Where the ignored-workspace-state role keeps its per-Domain storage.
pub const IGNORED_DIR: &str = "ignored";

// ---- what is on disk --------------------------------------------------------------------

/// Keys present under `anchor/` (real directories with a key's name).
pub(crate) fn keys_on_disk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(anchor::anchor_dir(root)) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if anchor::key_path(&n).is_some() && e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                out.push(n);
            }
        }
    }
    out.sort();
    out
}

pub(crate) use crate::storage::anchor::trash_on_disk;

pub(super) fn driver_of(root: &Path, key: &str) -> Driver {
    anchor::recorded_driver(&anchor::anchor_dir(root).join(key)).unwrap_or(Driver::Kernel)
}

pub(super) fn lower_rootfs(s: &Selected) -> Option<PathBuf> {
    let m = s.meta.as_ref()?;
    if m.artifact.is_empty() || !m.artifact.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let r = image::lowers_dir(&s.storage).join(&m.artifact).join("rootfs");
    std::fs::symlink_metadata(&r).ok().filter(|md| md.is_dir()).map(|_| r)
}

pub(super) fn ignored_size(s: &Selected, r: &Report) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(s.paths.root.join(IGNORED_DIR)).ok()?;
    r.sizes
        .iter()
        .find(|(k, _, _)| k == IGNORED_DIR)
        .map(|&(_, n, b)| (n, b))
}

pub(super) fn header_json(s: &Selected, active: bool) -> Vec<(&'static str, Json)> {
    let m = s.meta.clone().unwrap_or_default();
    vec![
        ("domain_id", Json::s(&s.id)),
        ("profile", Json::s(&m.profile)),
        ("workspace", Json::s(&m.workspace)),
        ("active", Json::Bool(active)),
    ]
}

pub(super) fn header_human(s: &Selected, active: bool) -> String {
    let m = s.meta.clone().unwrap_or_default();
    format!(
        "Domain {}{}\n  profile    {}\n  workspace  {}\n",
        s.id,
        if active { "  (active)" } else { "" },
        if m.profile.is_empty() { "?" } else { &m.profile },
        fit(if m.workspace.is_empty() { "?" } else { &m.workspace }, 67)
    )
}

/// Guest path of a key for display.
pub(crate) fn guest(key: &str) -> String {
    anchor::key_path(key).unwrap_or_else(|| key.to_string())
}

pub(super) fn entry_guest_path(key: &str, rel: &str) -> String {
    format!("{}/{rel}", guest(key))
}

pub(super) fn walk_all(s: &Selected, keys: &[String], with_ignored: bool) -> Result<Report> {
    let mut ops: Vec<Op> = keys
        .iter()
        .map(|k| Op::Walk {
            key: k.clone(),
            driver: driver_of(&s.paths.root, k),
        })
        .collect();
    if with_ignored && s.paths.root.join(IGNORED_DIR).exists() {
        ops.push(Op::Size {
            name: IGNORED_DIR.into(),
            in_root: true,
        });
    }
    let lower = lower_rootfs(s);
    statefs::run_helper(&s.paths.root, lower.as_deref(), &ops).map_err(StateError::Helper)
}
