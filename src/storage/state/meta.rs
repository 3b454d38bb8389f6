//! `DOMAIN_ROOT/domain.json`: what a Domain is (profile, workspace,
//! persistent paths, lower), its writing, reading and last use.

use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nanoserde::DeJson;

use crate::config;
use crate::domain;
use crate::plan::Json;

pub const META_FILE: &str = "domain.json";

// ---- domain.json --------------------------------------------------------------------

#[derive(Clone, Debug, Default, DeJson, PartialEq)]
pub struct DomainMeta {
    pub domain_id: String,
    pub profile: String,
    pub workspace: String,
    pub persist: Vec<String>,
    #[nserde(default)]
    pub artifact: String,
    #[nserde(default)]
    pub digest: String,
    #[nserde(default)]
    pub last_used: i64,
}

impl DomainMeta {
    pub fn render(&self) -> String {
        Json::Obj(vec![
            ("domain_id", Json::s(&self.domain_id)),
            ("profile", Json::s(&self.profile)),
            ("workspace", Json::s(&self.workspace)),
            ("persist", Json::strs(&self.persist)),
            ("artifact", Json::s(&self.artifact)),
            ("digest", Json::s(&self.digest)),
            ("last_used", Json::Num(self.last_used)),
        ])
        .render()
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Writes `domain.json` atomically and durably (temp file, fsync, rename,
/// fsync of the directory). Coordinator only.
pub fn write_meta(root: &Path, m: &DomainMeta) -> io::Result<()> {
    let p = root.join(META_FILE);
    let tmp = root.join(format!(".{META_FILE}.{}", std::process::id()));
    // A write that fails (a full disk) leaves no temp file behind.
    crate::sys::write_durable(&p, &tmp, m.render().as_bytes(), 0o600)
}

/// Whether `name` is a `domain.json` temp file of [`write_meta`]; one found
/// while holding the Domain lock is a dead coordinator's leftover.
pub fn is_meta_temp(name: &str) -> bool {
    name.strip_prefix(&format!(".{META_FILE}."))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Reads `domain.json` without following a symlink, capped at 64 KiB.
pub fn read_meta(root: &Path) -> Option<DomainMeta> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(crate::sys::O_NOFOLLOW)
        .open(root.join(META_FILE))
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    f.take(64 << 10).read_to_string(&mut text).ok()?;
    DomainMeta::deserialize_json(&text).ok()
}

/// Records what the Domain is and which artifact it is about to lease
/// (coordinator, under the lowers lock, before the lease).
pub fn record_domain(
    root: &Path,
    domain_id: &domain::DomainId,
    profile: &config::Profile,
    workspace: &Path,
    artifact: &str,
    digest: &str,
) -> io::Result<()> {
    write_meta(
        root,
        &DomainMeta {
            domain_id: domain_id.to_string(),
            profile: profile.name.clone(),
            workspace: workspace.to_string_lossy().into(),
            persist: profile.persist.clone(),
            artifact: artifact.into(),
            digest: digest.into(),
            last_used: now(),
        },
    )
}

/// Updates `last_used` (coordinator teardown).
pub fn touch_domain(root: &Path) {
    if let Some(mut m) = read_meta(root) {
        m.last_used = now();
        let _ = write_meta(root, &m);
    }
}
