//! Base images and prepared lowers.
//!
//! The default image is built locally: a debootstrap minbase of the host's
//! Debian release, run inside a user namespace with the user's subordinate
//! ids (so the build needs no host root), packed into an OCI layout with
//! umoci in that same namespace so file ownership is recorded as the image
//! sees it. Other sources are copied into an OCI layout by skopeo.
//!
//! A prepared lower is `umoci unpack --rootless` of one manifest into
//! `lowers/.prep-*`, finished by an atomic rename to `lowers/ARTIFACT`.
//! The artifact id is derived from the manifest digest, so concurrent
//! preparers of one source either reuse the finished tree or race to the
//! same rename, where the loser discards its own copy. An in-progress tree
//! is never used as a lower.

use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::config::ImageSource;
use nanoserde::DeJson;

use crate::domain::{hex, random_id};

/// Packages the default image carries beyond minbase.
pub const DEFAULT_PACKAGES: &[&str] = &[
    "bash",
    "coreutils",
    "git",
    "ca-certificates",
    "procps",
    "less",
    "python3-minimal",
    "vim-tiny",
    "ncurses-base",
];
pub const DEFAULT_TAG: &str = "latest";
/// Bumped when the preparer's output layout changes.
const PREPARER: &str = "umoci-unpack-rootless-v4";

#[derive(Debug)]
pub enum ImageError {
    NotBuilt(PathBuf),
    MissingLayout(PathBuf),
    NoTag {
        layout: PathBuf,
        tag: String,
    },
    BadIndex(PathBuf, IndexError),
    Tool {
        tool: &'static str,
        status: String,
        log: String,
    },
    Spawn(&'static str, io::Error),
    Io(PathBuf, io::Error),
    NoMirror,
    NoRelease,
    /// A layer would expand beyond its bound, or cannot be read as tar.
    Layer(crate::storage::layercheck::LayerError),
    /// The filesystem holding this path ran out of space.
    NoSpace(PathBuf),
    /// The filesystem holding this path has less free space than the step needs.
    NoRoom {
        path: PathBuf,
        needs: u64,
        free: u64,
    },
}

/// Free space the default image build needs at its peak (downloaded
/// packages, the debootstrap tree and the OCI layout side by side).
const BUILD_NEEDS: u64 = 400 << 20;

/// `e` as [`ImageError::NoSpace`] when `path`'s filesystem is full or the
/// error says so (checked before the failed step's files are removed).
fn no_space_or(e: ImageError, path: &Path) -> ImageError {
    let said = match &e {
        ImageError::Io(_, io) => matches!(io.raw_os_error(), Some(crate::sys::ENOSPC) | Some(crate::sys::EDQUOT)),
        ImageError::Tool { log, .. } => crate::storage::nospace::mentions(log),
        _ => false,
    };
    if said || crate::storage::nospace::is_full(path) {
        ImageError::NoSpace(path.to_path_buf())
    } else {
        e
    }
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ImageError::NotBuilt(p) => match p.file_name().map(|n| n.to_string_lossy()) {
                Some(n) if n != "default" => write!(
                    f,
                    "the image {n} is not built yet ({}): run `lazaret image build {n}`",
                    p.display()
                ),
                _ => write!(
                    f,
                    "the default image is not built yet ({}): run `lazaret image build`",
                    p.display()
                ),
            },
            ImageError::MissingLayout(p) => {
                write!(f, "image layout {} does not exist or has no index.json", p.display())
            }
            ImageError::NoTag { layout, tag } => write!(f, "image layout {} has no tag {tag:?}", layout.display()),
            ImageError::BadIndex(p, why) => write!(f, "cannot read {}: {why}", p.display()),
            ImageError::Tool { tool, status, log } => {
                write!(f, "{tool} failed ({status})")?;
                if !log.is_empty() {
                    write!(f, ":\n{log}")?;
                }
                Ok(())
            }
            ImageError::Spawn(t, e) => write!(f, "cannot run {t}: {e} (run `lazaret doctor`)"),
            ImageError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            ImageError::NoMirror => write!(
                f,
                "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d"
            ),
            ImageError::NoRelease => write!(f, "cannot read VERSION_CODENAME from /etc/os-release"),
            ImageError::NoSpace(p) => write!(
                f,
                "{}: free space there and try again",
                crate::storage::nospace::message(p)
            ),
            ImageError::NoRoom { path, needs, free } => write!(
                f,
                "{} for the image build: it needs about {} MiB there, {} MiB are free; free space there and try again",
                crate::storage::nospace::message(path),
                needs >> 20,
                free >> 20
            ),
            ImageError::Layer(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ImageError {}

type Result<T> = std::result::Result<T, ImageError>;

pub use crate::storage::progress::Progress;

// ---- locating the image ----------------------------------------------------

pub fn images_dir(storage: &Path) -> PathBuf {
    storage.join("images")
}

pub fn lowers_dir(storage: &Path) -> PathBuf {
    storage.join("lowers")
}

/// The OCI layout and tag a source resolves to. Non-OCI sources are
/// imported with skopeo into a layout under the Storage Root first.
pub fn resolve(storage: &Path, source: &ImageSource, progress: &mut Progress) -> Result<(PathBuf, String)> {
    match source {
        ImageSource::Default => {
            let layout = images_dir(storage).join("default");
            if !layout.join("index.json").exists() {
                return Err(ImageError::NotBuilt(layout));
            }
            Ok((layout, DEFAULT_TAG.to_string()))
        }
        ImageSource::Named(n) => {
            let layout = images_dir(storage).join(n);
            if !layout.join("index.json").exists() {
                return Err(ImageError::NotBuilt(layout));
            }
            Ok((layout, DEFAULT_TAG.to_string()))
        }
        ImageSource::Oci { path, tag } => Ok((path.clone(), tag.clone())),
        ImageSource::DockerArchive(_) | ImageSource::Docker(_) => {
            let src = match source {
                ImageSource::DockerArchive(p) => format!("docker-archive:{}", p.display()),
                ImageSource::Docker(r) => format!("docker://{r}"),
                _ => unreachable!(),
            };
            let layout = import_layout(storage, &src);
            progress.step(&format!("importing {src}"));
            std::fs::create_dir_all(&layout).map_err(|e| ImageError::Io(layout.clone(), e))?;
            // The importer's pid + start time: `image list` tells a live
            // import from a failed one, `image prune` removes failed ones.
            let marker = layout.join(IMPORT_MARKER);
            let pid = std::process::id() as i32;
            let start = crate::sys::proc_start_time(pid).unwrap_or(0);
            std::fs::write(&marker, format!("{pid} {start}\n")).map_err(|e| ImageError::Io(marker.clone(), e))?;
            run_tool(
                "skopeo",
                Command::new("skopeo").args([
                    "copy",
                    "--quiet",
                    &src,
                    &format!("oci:{}:{DEFAULT_TAG}", layout.display()),
                ]),
            )
            .inspect_err(|_| {
                // Failed at once, not only once this process is gone.
                let _ = std::fs::write(&marker, "failed\n");
            })?;
            // A failed import keeps its marker (and is listed as failed).
            let _ = std::fs::remove_file(&marker);
            Ok((layout, DEFAULT_TAG.to_string()))
        }
    }
}

/// Where `lazaret image export` writes a built image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportTarget {
    /// An OCI image layout directory (made, or an existing layout added to).
    Oci(PathBuf),
    /// An OCI archive: a tar of a layout (a new file).
    Archive(PathBuf),
}

/// Writes the built image `images/NAME` (tag [`DEFAULT_TAG`]) to `target`
/// under the tag `NAME`, with skopeo (which keeps the manifest and its
/// blobs byte for byte between OCI layouts); returns the manifest digest
/// the target's index names.
pub fn export(storage: &Path, name: &str, target: &ExportTarget) -> Result<String> {
    let layout = images_dir(storage).join(name);
    if !layout.join("index.json").exists() {
        return Err(ImageError::NotBuilt(layout));
    }
    let src = format!("oci:{}:{DEFAULT_TAG}", layout.display());
    let (dst, inspect) = match target {
        ExportTarget::Oci(d) => (
            format!("oci:{}:{name}", d.display()),
            format!("oci:{}:{name}", d.display()),
        ),
        ExportTarget::Archive(f) => (
            format!("oci-archive:{}:{name}", f.display()),
            format!("oci-archive:{}:{name}", f.display()),
        ),
    };
    run_tool("skopeo", Command::new("skopeo").args(["copy", "--quiet", &src, &dst]))?;
    match target {
        ExportTarget::Oci(d) => manifest_digest(d, name),
        ExportTarget::Archive(_) => {
            // The digest of the manifest the archive holds, as skopeo reads it.
            let out = Command::new("skopeo")
                .args(["inspect", "--raw", &inspect])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| ImageError::Spawn("skopeo", e))?;
            if !out.status.success() {
                return Err(ImageError::Tool {
                    tool: "skopeo",
                    status: out.status.to_string(),
                    log: tail(&out.stderr, 15),
                });
            }
            let hex: String = openssl::sha::sha256(&out.stdout)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            Ok(format!("sha256:{hex}"))
        }
    }
}

/// Where a non-OCI source (`docker-archive:FILE`, `docker://REF`, in
/// skopeo's spelling) is imported to.
pub fn import_layout(storage: &Path, skopeo_src: &str) -> PathBuf {
    images_dir(storage).join(format!(
        "import-{}",
        hex(&openssl::sha::sha256(skopeo_src.as_bytes())[..8])
    ))
}

#[derive(DeJson)]
struct OciIndex {
    manifests: Vec<OciDescriptor>,
}

#[derive(DeJson)]
struct OciDescriptor {
    digest: String,
    #[nserde(default)]
    annotations: std::collections::HashMap<String, String>,
}

/// The manifest digest that `tag` names in an OCI layout: the image's
/// source identity.
pub fn manifest_digest(layout: &Path, tag: &str) -> Result<String> {
    let path = layout.join("index.json");
    let text = std::fs::read_to_string(&path).map_err(|_| ImageError::MissingLayout(layout.to_path_buf()))?;
    parse_index_digest(&text, tag)
        .map_err(|why| ImageError::BadIndex(path.clone(), why))?
        .ok_or_else(|| ImageError::NoTag {
            layout: layout.to_path_buf(),
            tag: tag.to_string(),
        })
}

/// Why an OCI `index.json` could not be read.
#[derive(Debug)]
pub enum IndexError {
    Json(nanoserde::DeJsonErr),
    /// The tag's manifest digest is not `sha256:` and 64 hex digits.
    Digest(String),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            IndexError::Json(e) => write!(f, "{e}"),
            IndexError::Digest(d) => write!(f, "malformed digest {d:?}"),
        }
    }
}

pub fn parse_index_digest(text: &str, tag: &str) -> std::result::Result<Option<String>, IndexError> {
    let idx: OciIndex = OciIndex::deserialize_json(text).map_err(IndexError::Json)?;
    for m in idx.manifests {
        if m.annotations
            .get("org.opencontainers.image.ref.name")
            .map(String::as_str)
            == Some(tag)
        {
            let ok = m
                .digest
                .strip_prefix("sha256:")
                .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()));
            if !ok {
                return Err(IndexError::Digest(m.digest));
            }
            return Ok(Some(m.digest));
        }
    }
    Ok(None)
}

/// The prepared-artifact id for a manifest digest.
pub fn artifact_id(digest: &str) -> String {
    hex(&openssl::sha::sha256(format!("{PREPARER}\0{digest}").as_bytes())[..12])
}

#[derive(Clone, Debug)]
pub struct Prepared {
    pub dir: PathBuf,
}

impl Prepared {
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }
}

const ARTIFACT_MARKER: &str = "lazaret-artifact";
/// In `images/import-*` while an import runs (or after it failed).
pub const IMPORT_MARKER: &str = "lazaret-import";

/// State of an `images/import-*` layout: complete, being imported by a
/// live process, or failed (its importer is gone). Pure given `alive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportState {
    Complete,
    Importing,
    Failed,
}

pub fn import_state(marker: Option<&str>, has_index: bool, alive: impl Fn(i32, u64) -> bool) -> ImportState {
    match marker {
        Some(m) => {
            let mut f = m.split_whitespace();
            let pid = f.next().and_then(|v| v.parse().ok());
            let start = f.next().and_then(|v| v.parse().ok());
            match (pid, start) {
                (Some(p), Some(s)) if alive(p, s) => ImportState::Importing,
                _ => ImportState::Failed,
            }
        }
        None if has_index => ImportState::Complete,
        None => ImportState::Failed,
    }
}

/// Prepares (or reuses) the lower for `layout:tag`.
#[allow(dead_code)] // the unbounded form of `prepare_bounded`; no caller in the binaries now
pub fn prepare(storage: &Path, layout: &Path, tag: &str, progress: &mut Progress) -> Result<Prepared> {
    prepare_bounded(
        storage,
        layout,
        tag,
        progress,
        crate::storage::layercheck::Bound::default(),
    )
}

/// [`prepare`] with the bound on each layer's expanded size.
pub fn prepare_bounded(
    storage: &Path,
    layout: &Path,
    tag: &str,
    progress: &mut Progress,
    bound: crate::storage::layercheck::Bound,
) -> Result<Prepared> {
    let digest = manifest_digest(layout, tag)?;
    let artifact = artifact_id(&digest);
    let lowers = lowers_dir(storage);
    let dir = lowers.join(&artifact);
    let done = Prepared { dir: dir.clone() };
    if is_finished(&dir, &digest) {
        return Ok(done);
    }
    // Bounded preparation: every layer's expanded size is checked from its
    // tar headers before anything is unpacked, so a refused image leaves
    // no partial lower.
    progress.step("preparing image: checking its layers");
    let sizes = crate::storage::layercheck::check_layout(layout, &digest, bound).map_err(ImageError::Layer)?;
    std::fs::create_dir_all(&lowers).map_err(|e| ImageError::Io(lowers.clone(), e))?;
    // pid + start time name the live preparer (`lazaret image prune` never
    // touches the tree of a live one).
    let pid = std::process::id() as i32;
    let start = crate::sys::proc_start_time(pid).unwrap_or(0);
    let tmp = lowers.join(format!(".prep-{artifact}-{pid}-{start}-{}", random_id(4)));
    let result = unpack_into(layout, tag, &tmp, &digest, sizes, progress);
    if let Err(e) = result {
        let e = no_space_or(e, &lowers);
        remove_tree(&tmp);
        return Err(e);
    }
    // INVARIANT: the tree only becomes a lower by this rename, after it is
    // complete and marked.
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => {}
        Err(_) if is_finished(&dir, &digest) => remove_tree(&tmp),
        Err(e) => {
            remove_tree(&tmp);
            return Err(ImageError::Io(dir, e));
        }
    }
    progress.done();
    Ok(done)
}

/// Makes `/workspaces` in a prepared lower where an older unpack did not
/// (the parent of the fallback workspace paths, `plan::workspace`): one
/// empty directory, the same for every Domain, like `/workspace`.
pub fn ensure_workspaces_dir(rootfs: &Path) -> Result<()> {
    match std::fs::symlink_metadata(rootfs.join("workspaces")) {
        Ok(m) if m.is_dir() => Ok(()),
        _ => real_dir(rootfs, "workspaces").map(drop),
    }
}

/// Makes `root/rel` a real directory, replacing any symlink or file on the
/// way (inside our own unpacked copy) instead of following it.
fn real_dir(root: &Path, rel: &str) -> Result<PathBuf> {
    let mut cur = root.to_path_buf();
    for part in rel.split('/') {
        cur.push(part);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_dir() => continue,
            Ok(_) => std::fs::remove_file(&cur).map_err(|e| ImageError::Io(cur.clone(), e))?,
            Err(_) => {}
        }
        std::fs::create_dir(&cur).map_err(|e| ImageError::Io(cur.clone(), e))?;
    }
    Ok(cur)
}

/// Makes `root/rel` an empty regular file (a mount point), never through a
/// symlink.
fn real_file(root: &Path, rel: &str) -> Result<()> {
    let (dir, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let parent = if dir.is_empty() {
        root.to_path_buf()
    } else {
        real_dir(root, dir)?
    };
    let p = parent.join(name);
    if let Ok(m) = std::fs::symlink_metadata(&p) {
        if m.file_type().is_dir() {
            std::fs::remove_dir_all(&p).map_err(|e| ImageError::Io(p.clone(), e))?;
        } else {
            std::fs::remove_file(&p).map_err(|e| ImageError::Io(p.clone(), e))?;
        }
    }
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(crate::sys::O_NOFOLLOW)
        .open(&p)
        .map(drop)
        .map_err(|e| ImageError::Io(p, e))
}

fn is_finished(dir: &Path, digest: &str) -> bool {
    std::fs::read_to_string(dir.join(ARTIFACT_MARKER)).is_ok_and(|s| s.lines().next() == Some(digest))
        && dir.join("rootfs").is_dir()
}

fn unpack_into(
    layout: &Path,
    tag: &str,
    tmp: &Path,
    digest: &str,
    sizes: crate::storage::layercheck::Sizes,
    progress: &mut Progress,
) -> Result<()> {
    let mut cmd = Command::new("umoci");
    cmd.args(["unpack", "--rootless", "--image"])
        .arg(format!("{}:{tag}", layout.display()))
        .arg(tmp);
    // Once a second: the bytes umoci wrote and read so far against what
    // the layer check found (`progress::unpack_line`).
    let t0 = std::time::Instant::now();
    let mut tick = |pid: u32| {
        if progress.visible() {
            let io = std::fs::read_to_string(format!("/proc/{pid}/io"))
                .ok()
                .and_then(|t| crate::storage::progress::parse_proc_io(&t));
            progress.step(&crate::storage::progress::unpack_line(t0.elapsed(), io, sizes));
        }
    };
    run_tool_ticking("umoci unpack", &mut cmd, &mut tick)?;
    let rootfs = tmp.join("rootfs");
    // Mount points for Lazaret's fixed mounts exist in the lower itself, so
    // runsc never has to create them anywhere. The image is untrusted: no
    // symlink in it is ever followed while making them.
    for d in [
        "workspace",
        "workspaces",
        ".lazaret/mailbox/requests",
        ".lazaret/mailbox/results",
    ] {
        real_dir(&rootfs, d)?;
    }
    for f in [".lazaret/init", ".lazaret/gitconfig", "usr/local/bin/lazaret-escalate"] {
        real_file(&rootfs, f)?;
    }
    let marker = tmp.join(ARTIFACT_MARKER);
    std::fs::write(&marker, format!("{digest}\n{}\n", layout.display()))
        .map_err(|e| ImageError::Io(marker.clone(), e))?;
    Ok(())
}

/// The disk a tree takes, as `du -s --block-size=1` counts it: the
/// allocated blocks of `p` and of everything under it, without following
/// symlinks, a file with several links once. What this user cannot read
/// is not counted.
pub fn du(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(top) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    let mut total = top.blocks() * 512;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(md) = e.path().symlink_metadata() else { continue };
            if md.is_dir() {
                stack.push(e.path());
            } else if md.nlink() > 1 && !seen.insert((md.dev(), md.ino())) {
                continue;
            }
            total += md.blocks() * 512;
        }
    }
    total
}

/// Removes a tree Lazaret created, even where the rootless unpack left
/// directories without write permission.
pub fn remove_tree(path: &Path) {
    if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
        return;
    }
    let _ = Command::new("chmod")
        .args(["-R", "u+rwX"])
        .arg(path)
        .stderr(Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(path);
}

fn run_tool(tool: &'static str, cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ImageError::Spawn(tool, e))?;
    if out.status.success() {
        return Ok(());
    }
    Err(ImageError::Tool {
        tool,
        status: out.status.to_string(),
        log: tail(&out.stderr, 15),
    })
}

/// [`run_tool`], calling `tick` with the tool's pid at once and about
/// once a second while it runs.
fn run_tool_ticking(tool: &'static str, cmd: &mut Command, tick: &mut dyn FnMut(u32)) -> Result<()> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ImageError::Spawn(tool, e))?;
    let stderr = child.stderr.take().expect("piped");
    let err_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = io::Read::read_to_end(&mut BufReader::new(stderr), &mut buf);
        buf
    });
    let mut last = None::<std::time::Instant>;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| ImageError::Spawn(tool, e))? {
            break st;
        }
        if last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
            tick(child.id());
            last = Some(std::time::Instant::now());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let errs = err_thread.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    Err(ImageError::Tool {
        tool,
        status: status.to_string(),
        log: tail(&errs, 15),
    })
}

fn tail(bytes: &[u8], lines: usize) -> String {
    let s = String::from_utf8_lossy(bytes);
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

// ---- building the default image --------------------------------------------------

/// The host's Debian codename.
pub fn host_codename() -> Result<String> {
    let text = std::fs::read_to_string("/etc/os-release").map_err(|_| ImageError::NoRelease)?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or(ImageError::NoRelease)
}

/// The mirror apt already uses for `codename`, from deb822 `.sources`
/// stanzas or one-line `sources.list` entries.
pub fn find_mirror(sources: &[(String, String)], codename: &str) -> Option<String> {
    for (name, text) in sources {
        if name.ends_with(".sources") {
            for stanza in text.split("\n\n") {
                let field = |k: &str| {
                    stanza
                        .lines()
                        .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
                };
                let types = field("Types:").unwrap_or_default();
                let suites = field("Suites:").unwrap_or_default();
                if types.split_whitespace().any(|t| t == "deb") && suites.split_whitespace().any(|s| s == codename) {
                    if let Some(uri) = field("URIs:").and_then(|u| u.split_whitespace().next().map(String::from)) {
                        return Some(uri);
                    }
                }
            }
        } else {
            for line in text.lines() {
                let mut f = line.split_whitespace().filter(|w| !w.starts_with('['));
                if f.next() == Some("deb") {
                    if let (Some(uri), Some(suite)) = (f.next(), f.next()) {
                        if suite == codename {
                            return Some(uri.to_string());
                        }
                    }
                }
            }
        }
    }
    None
}

fn apt_sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Ok(t) = std::fs::read_to_string("/etc/apt/sources.list") {
        out.push(("sources.list".to_string(), t));
    }
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            let n = p.file_name().unwrap_or_default().to_string_lossy().to_string();
            if n.ends_with(".sources") || n.ends_with(".list") {
                if let Ok(t) = std::fs::read_to_string(&p) {
                    out.push((n, t));
                }
            }
        }
    }
    out
}

/// Builds the default image into `images/default` (replacing an older one
/// only once the new one is complete).
pub fn build_default(storage: &Path, progress: &mut Progress) -> Result<String> {
    let packages: Vec<String> = DEFAULT_PACKAGES.iter().map(|s| s.to_string()).collect();
    build_image(storage, "default", None, &packages, &Layers::default(), None, progress)
}

/// What a recipe adds beyond a debootstrap with packages: the built image
/// it starts from instead (`base = "NAME"`), and its `run` steps.
#[derive(Default)]
pub struct Layers<'a> {
    /// The OCI layout of the base image.
    pub from: Option<&'a Path>,
    pub steps: &'a [String],
}

/// The file in a recipe image's layout that names the recipe it was built
/// from ([`crate::config::Recipe::fingerprint`]).
pub const RECIPE_FILE: &str = "lazaret-recipe";

/// The recipe fingerprint a built image records, if any.
pub fn built_recipe(storage: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(images_dir(storage).join(name).join(RECIPE_FILE))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Builds `images/NAME` from a Debian suite (the host's when `None`) and
/// packages, replacing an older one only once the new one is complete, and
/// records `recipe` (a fingerprint) in it.
pub fn build_image(
    storage: &Path,
    name: &str,
    suite: Option<&str>,
    packages: &[String],
    layers: &Layers,
    recipe: Option<&str>,
    progress: &mut Progress,
) -> Result<String> {
    let codename = match suite {
        Some(s) => s.to_string(),
        None => host_codename()?,
    };
    // LAZARET_IMAGE_MIRROR overrides the mirror apt uses (a local mirror or
    // cache; the tests point it at a server of their own).
    let mirror = match std::env::var("LAZARET_IMAGE_MIRROR") {
        Ok(m) if m.starts_with("http://") || m.starts_with("https://") || m.starts_with("file:/") => m,
        _ => find_mirror(&apt_sources(), &codename).ok_or(ImageError::NoMirror)?,
    };
    let images = images_dir(storage);
    std::fs::create_dir_all(&images).map_err(|e| no_space_or(ImageError::Io(images.clone(), e), &images))?;
    // Said before minutes of downloading: the build cannot fit.
    let free = crate::storage::nospace::free_bytes(&images).unwrap_or(u64::MAX);
    if free < BUILD_NEEDS {
        return Err(ImageError::NoRoom {
            path: images,
            needs: BUILD_NEEDS,
            free,
        });
    }
    // pid + start time name the live builder (`image prune` removes only
    // the trees of builders that are gone).
    let pid = std::process::id() as i32;
    let start = crate::sys::proc_start_time(pid).unwrap_or(0);
    let work = images.join(format!(".build-{pid}-{start}-{}", random_id(4)));
    std::fs::create_dir(&work).map_err(|e| no_space_or(ImageError::Io(work.clone(), e), &images))?;
    let (base, extra) = split_packages(packages);
    // On a base image, every package of the recipe goes through apt.
    let extra = match layers.from {
        Some(_) => packages.join(","),
        None => extra,
    };
    // Each step of the script says when it begins with this line; a
    // random one, so no output of the steps themselves is taken for it.
    let marker = format!("L:{}", random_id(8));
    let steps = work.join("steps.sh");
    if !layers.steps.is_empty() {
        let mut text = String::from("set -e\n");
        for step in layers.steps {
            text.push_str(&format!("echo {marker}\n{step}\n"));
        }
        std::fs::write(&steps, text).map_err(|e| ImageError::Io(steps.clone(), e))?;
    }
    let plan = build_steps(
        &codename,
        layers
            .from
            .map(|b| b.file_name().unwrap_or_default().to_string_lossy().into_owned())
            .as_deref(),
        &extra,
        layers.steps,
    );
    let last = images.join(name).join(TIMES_FILE);
    let recorded = std::fs::read_to_string(&last)
        .map(|t| crate::storage::progress::parse_times(&t))
        .unwrap_or_default();
    let result = build_in(
        &work,
        &codename,
        &mirror,
        &base,
        &extra,
        layers.from,
        (!layers.steps.is_empty()).then_some(steps.as_path()),
        &BuildProgress {
            name,
            marker: &marker,
            plan: &plan,
            recorded: &recorded,
        },
        progress,
    )
    .map_err(|e| no_space_or(e, &images));
    if let Ok(times) = &result {
        // The next build of this image estimates from these.
        let _ = std::fs::write(
            work.join("oci").join(TIMES_FILE),
            crate::storage::progress::render_times(times),
        );
    }
    if let (Ok(_), Some(r)) = (&result, recipe) {
        let _ = std::fs::write(work.join("oci").join(RECIPE_FILE), format!("{r}\n"));
    }
    let final_layout = images.join(name);
    let outcome = result.and_then(|_| {
        let old = images.join(format!(".old-{}", random_id(4)));
        let had_old = final_layout.exists();
        if had_old {
            std::fs::rename(&final_layout, &old).map_err(|e| ImageError::Io(final_layout.clone(), e))?;
        }
        std::fs::rename(work.join("oci"), &final_layout).map_err(|e| ImageError::Io(final_layout.clone(), e))?;
        if had_old {
            remove_tree(&old);
        }
        manifest_digest(&final_layout, DEFAULT_TAG)
    });
    remove_tree(&work);
    progress.done();
    outcome
}

/// What debootstrap includes and what apt adds afterwards, each as a
/// comma-separated list (pure). A recipe is the default image plus its
/// packages: debootstrap always gets the whole default set (never an empty
/// `--include=`, which it refuses), apt the recipe's other packages.
pub fn split_packages(packages: &[String]) -> (String, String) {
    let extra: Vec<&str> = packages
        .iter()
        .map(String::as_str)
        .filter(|p| !DEFAULT_PACKAGES.contains(p))
        .collect();
    (DEFAULT_PACKAGES.join(","), extra.join(","))
}

/// The file in a built image's layout with its build's step times.
pub const TIMES_FILE: &str = "lazaret-build-times";

/// The steps a build runs, in order, as its progress names them (pure):
/// a debootstrap only for an image with no base, apt only for packages
/// beyond the default set (or any, on a base), then each `run` step and
/// the packing. The build script marks the start of each in this order.
pub fn build_steps(suite: &str, base: Option<&str>, extra: &str, run: &[String]) -> Vec<String> {
    let short = |s: &str| {
        let s = s.lines().next().unwrap_or("").trim();
        match s.char_indices().nth(40) {
            Some((i, _)) => format!("{}…", &s[..i]),
            None => s.to_string(),
        }
    };
    let mut out = vec![match base {
        None => format!("debootstrap of Debian {suite}"),
        Some(b) => format!("unpacking the base image {b}"),
    }];
    if !extra.is_empty() {
        out.push(format!("installing {}", short(&extra.replace(',', ", "))));
    }
    for (i, r) in run.iter().enumerate() {
        out.push(format!("run step {} of {}: {}", i + 1, run.len(), short(r)));
    }
    out.push("packing into an OCI layout".to_string());
    out
}

/// What a build's progress line shows.
struct BuildProgress<'a> {
    name: &'a str,
    /// The line that starts the next step of `plan`.
    marker: &'a str,
    plan: &'a [String],
    /// The last build's step times, if any.
    recorded: &'a [(String, std::time::Duration)],
}

impl BuildProgress<'_> {
    /// The line for step `current` (`None`: before the first) with the
    /// tools' last `I:` line as its detail. Pure.
    fn line(
        &self,
        current: Option<usize>,
        elapsed: std::time::Duration,
        in_step: std::time::Duration,
        detail: &str,
    ) -> String {
        use crate::storage::progress::{by_record, timing};
        let (step, est) = match current {
            None => (
                "entering the build namespace,".to_string(),
                by_record(self.recorded, self.plan, 0, std::time::Duration::ZERO),
            ),
            Some(i) => (
                format!(
                    "{} [{}/{}],",
                    self.plan.get(i).map_or("", String::as_str),
                    i + 1,
                    self.plan.len()
                ),
                by_record(self.recorded, self.plan, i, in_step),
            ),
        };
        let mut l = format!("building {}: {step} {}", self.name, timing(elapsed, &est));
        if !detail.is_empty() {
            l.push_str(": ");
            l.push_str(detail);
        }
        l
    }
}

/// debootstrap and umoci run inside one user namespace with the full
/// subordinate mapping (`unshare --map-auto`); `container=lxc` makes
/// debootstrap bind device nodes instead of calling mknod, which a user
/// namespace forbids.
#[allow(clippy::too_many_arguments)] // one argument per script parameter, named as the script uses them
fn build_in(
    work: &Path,
    codename: &str,
    mirror: &str,
    packages: &str,
    extra: &str,
    from: Option<&Path>,
    steps: Option<&Path>,
    shown: &BuildProgress,
    progress: &mut Progress,
) -> Result<Vec<(String, std::time::Duration)>> {
    let script = r#"set -e
cd "$1"
# An unpacked image has no device nodes (a user namespace cannot make
# them) and no /proc: apt and the steps get the host's, bound, until the
# image is packed.
bound=
bind_in() {
  mkdir -p rootfs/proc rootfs/dev
  mount --rbind /proc rootfs/proc
  for d in null zero random urandom tty; do
    [ -e "rootfs/dev/$d" ] || : > "rootfs/dev/$d"
    mount --bind "/dev/$d" "rootfs/dev/$d"
  done
  bound=1
}
unbind() {
  [ -n "$bound" ] || return 0
  for d in null zero random urandom tty; do umount "rootfs/dev/$d"; done
  umount -l rootfs/proc
  bound=
}
echo "$9"
if [ -n "$6" ]; then
  umoci unpack --image "$6:latest" base >/dev/null
  mv base/rootfs rootfs
  rm -rf base
  bind_in
else
  /usr/sbin/debootstrap --variant=minbase --include="$4" "$2" rootfs "$3"
fi
if [ -n "$5" ]; then
  # debootstrap's own resolver cannot install packages with deep
  # dependency trees (npm): apt inside the new root does.
  echo "$9"
  cp /etc/resolv.conf rootfs/etc/resolv.conf
  chroot rootfs /usr/bin/apt-get update -q
  DEBIAN_FRONTEND=noninteractive chroot rootfs /usr/bin/apt-get install -y -q --no-install-recommends $(echo "$5" | tr , ' ')
  chroot rootfs /usr/bin/apt-get clean
  : > rootfs/etc/resolv.conf
fi
if [ -n "$7" ]; then
  # The recipe's steps, as root in the image, with the host's network,
  # resolver and CA bundle (a TLS-intercepting proxy's CA included); the
  # binds are gone before the image is packed.
  cp /etc/resolv.conf rootfs/etc/resolv.conf
  cp "$7" rootfs/.lazaret-steps
  [ -n "$bound" ] || bind_in
  bundle=
  if [ -n "$8" ] && [ -f rootfs/etc/ssl/certs/ca-certificates.crt ]; then
    mount --bind -o ro "$8" rootfs/etc/ssl/certs/ca-certificates.crt
    bundle=/etc/ssl/certs/ca-certificates.crt
  fi
  rc=0
  env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb \
    NODE_EXTRA_CA_CERTS=$bundle SSL_CERT_FILE=$bundle PIP_CERT=$bundle REQUESTS_CA_BUNDLE=$bundle \
    DEBIAN_FRONTEND=noninteractive chroot rootfs /bin/sh /.lazaret-steps || rc=$?
  [ -z "$bundle" ] || umount rootfs/etc/ssl/certs/ca-certificates.crt
  unbind
  rm -f rootfs/.lazaret-steps
  : > rootfs/etc/resolv.conf
  rm -rf rootfs/root/.npm/_cacache rootfs/root/.cache/pip
  [ "$rc" = 0 ] || { echo "E: a run step failed (exit status $rc)" >&2; exit "$rc"; }
fi
unbind
rm -rf rootfs/debootstrap rootfs/var/cache/apt/archives/*.deb rootfs/var/lib/apt/lists/*_Packages
echo "$9"
umoci init --layout oci
umoci new --image oci:latest
umoci insert --image oci:latest rootfs /
umoci config --image oci:latest --config.workingdir=/workspace --config.cmd=/bin/bash
umoci gc --layout oci
rm -rf rootfs
chmod -R a+rX,u+w oci
"#;
    let log_path = work.join("build.log");
    let mut child = Command::new("unshare")
        .args([
            "--map-auto",
            "--map-root-user",
            "--mount",
            "--fork",
            "--",
            "sh",
            "-c",
            script,
            "lazaret-build",
        ])
        .arg(work)
        .args([codename, mirror, packages, extra])
        .arg(from.map(Path::as_os_str).unwrap_or_default())
        .arg(steps.map(Path::as_os_str).unwrap_or_default())
        .arg(crate::config::host_ca_bundle().unwrap_or_default())
        .arg(shown.marker)
        .env("container", "lxc")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ImageError::Spawn("unshare", e))?;
    let stderr = child.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = io::Read::read_to_end(&mut BufReader::new(stderr), &mut buf);
        buf
    });
    let mut log = Vec::new();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out_thread = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The line is redrawn at each step, each `I:` line of the tools and
    // once a second; each step's time is recorded for the next build.
    let t0 = std::time::Instant::now();
    let mut step_start = t0;
    let mut current: Option<usize> = None;
    let mut times = Vec::new();
    let mut detail = String::new();
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(1)) {
            Ok(line) if line == shown.marker => {
                if let Some(i) = current {
                    times.push((shown.plan.get(i).cloned().unwrap_or_default(), step_start.elapsed()));
                }
                current = Some(current.map_or(0, |i| i + 1));
                step_start = std::time::Instant::now();
                detail.clear();
            }
            Ok(line) => {
                if !line.trim().is_empty() {
                    detail = line.strip_prefix("I: ").unwrap_or(&line).to_string();
                }
                log.extend_from_slice(line.as_bytes());
                log.push(b'\n');
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if progress.visible() {
            progress.step(&shown.line(current, t0.elapsed(), step_start.elapsed(), &detail));
        }
    }
    let _ = out_thread.join();
    if let Some(i) = current {
        times.push((shown.plan.get(i).cloned().unwrap_or_default(), step_start.elapsed()));
    }
    let status = child.wait().map_err(|e| ImageError::Spawn("unshare", e))?;
    let errs = err_thread.join().unwrap_or_default();
    log.extend_from_slice(&errs);
    let _ = std::fs::write(&log_path, &log);
    if !status.success() {
        // Said before the partial tree is removed, while the disk is full.
        let full =
            crate::storage::nospace::is_full(work) || crate::storage::nospace::mentions(&String::from_utf8_lossy(&log));
        // The namespace's files belong to subordinate ids; remove them from
        // inside a namespace again.
        let _ = Command::new("unshare")
            .args(["--map-auto", "--map-root-user", "--", "rm", "-rf"])
            .arg(work.join("rootfs"))
            .status();
        if full {
            return Err(ImageError::NoSpace(work.parent().unwrap_or(work).to_path_buf()));
        }
        return Err(ImageError::Tool {
            tool: "image build",
            status: status.to_string(),
            log: tail(&log, 20),
        });
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_from_deb822_and_one_line_sources() {
        let deb822 = "Types: deb\nURIs: http://m.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://s.example/sec\nSuites: bookworm-security\n";
        let srcs = vec![("debian.sources".to_string(), deb822.to_string())];
        assert_eq!(
            find_mirror(&srcs, "bookworm").as_deref(),
            Some("http://m.example/debian")
        );
        assert_eq!(find_mirror(&srcs, "trixie"), None);
        let list = vec![(
            "sources.list".to_string(),
            "# c\ndeb [arch=amd64] http://l.example/d bookworm main\n".to_string(),
        )];
        assert_eq!(find_mirror(&list, "bookworm").as_deref(), Some("http://l.example/d"));
    }

    #[test]
    fn index_digest_by_tag() {
        let d = format!("sha256:{}", "a".repeat(64));
        let idx = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"x","digest":"{d}","size":1,"annotations":{{"org.opencontainers.image.ref.name":"latest"}}}}]}}"#
        );
        assert_eq!(parse_index_digest(&idx, "latest").unwrap(), Some(d));
        assert_eq!(parse_index_digest(&idx, "other").unwrap(), None);
        let bad = idx.replace(&"a".repeat(64), "../x");
        assert!(parse_index_digest(&bad, "latest").is_err());
    }

    #[test]
    fn mount_points_never_follow_image_symlinks() {
        let base = std::env::temp_dir().join(format!("lazaret-img-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (root, outside) = (base.join("rootfs"), base.join("outside"));
        std::fs::create_dir_all(root.join("usr/local")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("usr/local/bin")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("workspace")).unwrap();
        real_file(&root, "usr/local/bin/lazaret-escalate").unwrap();
        real_dir(&root, "workspace").unwrap();
        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "wrote through a symlink"
        );
        assert!(std::fs::symlink_metadata(root.join("usr/local/bin")).unwrap().is_dir());
        assert!(root.join("usr/local/bin/lazaret-escalate").is_file());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_recipe_is_the_default_image_plus_its_packages() {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // No package of the default set (was: an empty `--include=`).
        let (base, extra) = split_packages(&own(&["inotify-tools", "python3"]));
        assert_eq!(base, DEFAULT_PACKAGES.join(","));
        assert_eq!(extra, "inotify-tools,python3");
        // Some of the default set: still all of it, and apt gets the rest.
        let (base, extra) = split_packages(&own(&["git", "curl"]));
        assert_eq!(base, DEFAULT_PACKAGES.join(","));
        assert_eq!(extra, "curl");
        let (base, extra) = split_packages(&[]);
        assert!(!base.is_empty());
        assert_eq!(extra, "");
    }

    #[test]
    fn a_build_names_the_steps_its_recipe_runs() {
        let run = vec!["npm install -g some-agent-cli-with-a-long-name@1.2.3 --omit=dev".to_string()];
        // On a base: no debootstrap, the base unpacked instead.
        let on_base = build_steps("trixie", Some("dev"), "", &run);
        assert_eq!(
            on_base,
            [
                "unpacking the base image dev",
                "run step 1 of 1: npm install -g some-agent-cli-with-a-lon…",
                "packing into an OCI layout"
            ]
        );
        assert!(on_base.iter().all(|s| !s.contains("debootstrap")));
        let fresh = build_steps("trixie", None, "curl,jq", &[]);
        assert_eq!(
            fresh,
            [
                "debootstrap of Debian trixie",
                "installing curl, jq",
                "packing into an OCI layout"
            ]
        );
        let shown = BuildProgress {
            name: "tooled",
            marker: "L:x",
            plan: &on_base,
            recorded: &[],
        };
        let secs = std::time::Duration::from_secs;
        assert_eq!(
            shown.line(Some(1), secs(75), secs(5), "added 3 packages"),
            "building tooled: run step 1 of 1: npm install -g some-agent-cli-with-a-lon… [2/3], \
             1:15 elapsed, no estimate (first build of it here): added 3 packages"
        );
        let rec: Vec<(String, std::time::Duration)> =
            on_base.iter().cloned().zip([secs(20), secs(60), secs(40)]).collect();
        let shown = BuildProgress {
            recorded: &rec,
            ..shown
        };
        assert_eq!(
            shown.line(Some(0), secs(5), secs(5), ""),
            "building tooled: unpacking the base image dev [1/3], 0:05 elapsed, about 1:55 left"
        );
        assert!(shown
            .line(None, secs(1), secs(1), "")
            .contains("entering the build namespace, 0:01 elapsed, about 2:00 left"));
    }

    #[test]
    fn du_counts_like_du() {
        let base = std::env::temp_dir().join(format!("lazaret-du-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::write(base.join("a/f"), vec![7u8; 100_000]).unwrap();
        std::fs::hard_link(base.join("a/f"), base.join("a/b/g")).unwrap();
        std::os::unix::fs::symlink("/usr", base.join("l")).unwrap();
        let out = Command::new("du").arg("-sB1").arg(&base).output().unwrap();
        let want: u64 = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(du(&base), want);
        std::fs::remove_dir_all(&base).unwrap();
    }

    // Covers SR-15, FR-22.
    #[test]
    fn artifact_ids_follow_the_digest() {
        let a = artifact_id("sha256:1");
        assert_eq!(a, artifact_id("sha256:1"));
        assert_ne!(a, artifact_id("sha256:2"));
        assert_eq!(a.len(), 24);
    }
}
