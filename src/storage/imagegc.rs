//! Housekeeping of `images/` and the profile side of `image prune`.
//!
//! - The lower of every image a profile of the current configuration refers
//!   to is kept by `image prune` (unless `--all`), so the next `run` does
//!   not pay the unpack again.
//! - Under `images/`, Lazaret's own names are: `default` and other built
//!   layouts, `import-HASH` (a skopeo import of a profile's
//!   `docker://`/`docker-archive:` source), `.build-PID-START-RAND` (a build
//!   in progress, or interrupted when that process is gone) and `.old-RAND`
//!   (an old layout an interrupted rebuild did not delete). `image list`
//!   shows the interrupted ones and unreferenced imports; `image prune`
//!   removes them. Anything else is never touched.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::config::{Config, ImageSource};
use crate::storage::image;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageItem {
    /// `.build-*`: `live` while its builder runs.
    Build { name: String, live: bool },
    /// `.old-*`: left by an interrupted rebuild.
    Old { name: String },
    /// `import-*`: the profiles whose source it is (none: unreferenced).
    Import { name: String, profiles: Vec<String> },
}

impl ImageItem {
    pub fn name(&self) -> &str {
        match self {
            ImageItem::Build { name, .. } | ImageItem::Old { name } | ImageItem::Import { name, .. } => name,
        }
    }
    /// Whether `image prune` removes it.
    pub fn removable(&self) -> bool {
        match self {
            ImageItem::Build { live, .. } => !live,
            ImageItem::Old { .. } => true,
            ImageItem::Import { profiles, .. } => profiles.is_empty(),
        }
    }
}

/// `.build-PID-START-RAND` → (pid, Some(start)); the older
/// `.build-PID-RAND` → (pid, None). Pure.
pub fn parse_build(name: &str) -> Option<(i32, Option<u64>)> {
    let rest = name.strip_prefix(".build-")?;
    let f: Vec<&str> = rest.split('-').collect();
    let hex8 = |s: &str| s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit());
    match f.as_slice() {
        [pid, start, rand] if hex8(rand) => Some((pid.parse().ok()?, Some(start.parse().ok()?))),
        [pid, rand] if hex8(rand) => Some((pid.parse().ok()?, None)),
        _ => None,
    }
}

/// Classifies one name under `images/` (pure). `alive(pid, start)`;
/// `imports` maps import names to the profiles that use them.
pub fn classify(
    name: &str,
    is_dir: bool,
    alive: impl Fn(i32, Option<u64>) -> bool,
    imports: &BTreeMap<String, Vec<String>>,
) -> Option<ImageItem> {
    if !is_dir {
        return None;
    }
    if let Some((pid, start)) = parse_build(name) {
        return Some(ImageItem::Build {
            name: name.into(),
            live: alive(pid, start),
        });
    }
    if let Some(rand) = name.strip_prefix(".old-") {
        if rand.len() == 8 && rand.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(ImageItem::Old { name: name.into() });
        }
        return None;
    }
    if let Some(h) = name.strip_prefix("import-") {
        if h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(ImageItem::Import {
                name: name.into(),
                profiles: imports.get(name).cloned().unwrap_or_default(),
            });
        }
    }
    None
}

fn alive(pid: i32, start: Option<u64>) -> bool {
    match start {
        Some(s) => crate::sys::same_process(pid, s),
        // Without a start time a running pid may be a reused one: keep it.
        None => Path::new(&format!("/proc/{pid}")).exists(),
    }
}

/// The OCI layout and tag a profile's image has on disk now, without
/// building or importing anything.
fn layout_of(storage: &Path, source: &ImageSource) -> (PathBuf, String) {
    match source {
        ImageSource::Default => (image::images_dir(storage).join("default"), image::DEFAULT_TAG.into()),
        ImageSource::Named(n) => (image::images_dir(storage).join(n), image::DEFAULT_TAG.into()),
        ImageSource::Oci { path, tag } => (path.clone(), tag.clone()),
        ImageSource::DockerArchive(p) => (
            image::import_layout(storage, &format!("docker-archive:{}", p.display())),
            image::DEFAULT_TAG.into(),
        ),
        ImageSource::Docker(r) => (
            image::import_layout(storage, &format!("docker://{r}")),
            image::DEFAULT_TAG.into(),
        ),
    }
}

/// What the configuration's profiles refer to: artifact id → profiles, and
/// import name → profiles.
pub struct Referenced {
    pub artifacts: BTreeMap<String, Vec<String>>,
    pub imports: BTreeMap<String, Vec<String>>,
}

pub fn referenced(cfg: &Config, storage: &Path) -> Referenced {
    let mut r = Referenced {
        artifacts: BTreeMap::new(),
        imports: BTreeMap::new(),
    };
    for (name, p) in &cfg.profiles {
        let (layout, tag) = layout_of(storage, &p.image);
        if matches!(p.image, ImageSource::Docker(_) | ImageSource::DockerArchive(_)) {
            if let Some(n) = layout.file_name() {
                r.imports
                    .entry(n.to_string_lossy().into_owned())
                    .or_default()
                    .push(name.clone());
            }
        }
        if let Ok(digest) = image::manifest_digest(&layout, &tag) {
            r.artifacts
                .entry(image::artifact_id(&digest))
                .or_default()
                .push(name.clone());
        }
    }
    r
}

/// The entries of `dir` as (name, is a directory, not following links),
/// sorted by name; `None` when `dir` cannot be read.
pub(crate) fn sorted_entries(dir: &Path) -> Option<Vec<(String, bool)>> {
    let rd = std::fs::read_dir(dir).ok()?;
    let mut names: Vec<(String, bool)> = rd
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                e.file_type().map(|t| t.is_dir()).unwrap_or(false),
            )
        })
        .collect();
    names.sort();
    Some(names)
}

/// Lazaret's items under `images/`, sorted by name.
pub fn scan(storage: &Path, imports: &BTreeMap<String, Vec<String>>) -> Vec<ImageItem> {
    let Some(names) = sorted_entries(&image::images_dir(storage)) else {
        return Vec::new();
    };
    names
        .into_iter()
        .filter_map(|(n, d)| classify(&n, d, alive, imports))
        .collect()
}

/// Deletes an item's tree. A build's rootfs belongs to subordinate ids:
/// it is removed inside a user namespace with the same mapping the build
/// used, then the rest with host rights.
pub fn remove(storage: &Path, item: &ImageItem) {
    let path = image::images_dir(storage).join(item.name());
    if matches!(item, ImageItem::Build { .. }) && std::fs::remove_dir_all(&path).is_err() {
        let _ = Command::new("unshare")
            .args(["--map-auto", "--map-root-user", "--", "rm", "-rf", "--one-file-system"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    image::remove_tree(&path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_names_are_classified() {
        let dead = |_: i32, _: Option<u64>| false;
        let mut imports = BTreeMap::new();
        imports.insert("import-0123456789abcdef".to_string(), vec!["web".to_string()]);
        assert_eq!(parse_build(".build-42-777-ab12cd34"), Some((42, Some(777))));
        assert_eq!(parse_build(".build-42-ab12cd34"), Some((42, None)));
        assert_eq!(parse_build(".build-x-ab12cd34"), None);
        assert_eq!(parse_build(".build-42-777-zz"), None);
        assert_eq!(
            classify(
                ".build-42-777-ab12cd34",
                true,
                |p, s| p == 42 && s == Some(777),
                &imports
            ),
            Some(ImageItem::Build {
                name: ".build-42-777-ab12cd34".into(),
                live: true
            })
        );
        assert!(classify(".build-42-777-ab12cd34", true, dead, &imports)
            .unwrap()
            .removable());
        assert!(classify(".old-ab12cd34", true, dead, &imports).unwrap().removable());
        let used = classify("import-0123456789abcdef", true, dead, &imports).unwrap();
        assert!(!used.removable());
        assert!(classify("import-fedcba9876543210", true, dead, &imports)
            .unwrap()
            .removable());
        for foreign in ["default", "mine", ".old-../x", "import-x", ".build-1-2-3-4"] {
            assert_eq!(classify(foreign, true, dead, &imports), None, "{foreign}");
        }
        assert_eq!(classify(".old-ab12cd34", false, dead, &imports), None);
    }
}
