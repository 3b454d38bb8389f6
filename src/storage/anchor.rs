//! The State Anchor: per-Domain persistent upper layers over the prepared
//! lower, one overlay per persistent guest path.
//!
//! On-disk layout in the Domain Root (host-only, 0700):
//!
//! ```text
//! DOMAIN_ROOT/anchor/                the State Anchor
//!   KEY/upper/                       overlay upper for one guest path (the
//!                                    only directory the sandbox can write)
//!   KEY/work                         overlay workdir (same filesystem)
//!   KEY/driver                       "kernel" or "fuse": fixed at first mount
//!   reset-journal                    a reset in progress (see `reset`)
//!   .trash-KEY-RAND/                 a reset scope on its way out
//!   .new-KEY-RAND/                   a fresh empty scope being built
//! ```
//!
//! KEY is the guest path without its leading `/`, with `%`, `/` and a
//! leading `.` percent-encoded (`/home/agent` → `home%2fagent`), so a key
//! never collides with Lazaret's own dot-names.
//!
//! The coordinator plans (pure: [`plan_mounts`]), creates the layout and
//! writes the plan file; the Runtime Supervisor mounts each overlay on a
//! mount point in the generation dir, in its own mount namespace, before it
//! starts runsc ([`mount_all`]); the bundle binds each mount point at its
//! guest path. Everything else of the root filesystem stays in runsc's
//! sandbox-local memory overlay and vanishes at teardown.
//!
//! Driver: kernel overlayfs with `userxattr` (the default: it reports a full
//! disk to the writer; works in a user namespace since Linux 5.11), else
//! fuse-overlayfs (one `-f` child of the supervisor per path, with
//! PDEATHSIG) when the kernel overlay cannot mount ([`preferred_driver`],
//! docs/state.md). An upper keeps the driver it was created with: the two
//! record opaque directories differently.

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

pub const ANCHOR_DIR: &str = "anchor";
pub const JOURNAL: &str = "reset-journal";
pub const TRASH_PREFIX: &str = ".trash-";
pub const NEW_PREFIX: &str = ".new-";
/// Kernel overlay options beyond the three dirs. `userxattr` is what makes
/// the mount possible in a user namespace; `index=off` lets an upper be
/// reused over a different (rebuilt) lower; redirects and metacopy stay off
/// so nothing in the upper can point elsewhere.
pub const KERNEL_OPTS: &str = "userxattr,index=off,redirect_dir=nofollow,metacopy=off";

pub use crate::wire::plan::{AnchorMount, Driver};

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Kernel => "kernel",
            Driver::Fuse => "fuse",
        }
    }
    pub fn parse(s: &str) -> Option<Driver> {
        match s.trim() {
            "kernel" => Some(Driver::Kernel),
            "fuse" => Some(Driver::Fuse),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub enum AnchorError {
    /// Two persistent paths nest (`/home` and `/home/agent`).
    Nested(String, String),
    /// A persistent path is not a directory in the image.
    NotDirectory {
        guest: String,
        what: &'static str,
    },
    /// A host path cannot be passed in overlay mount options.
    UnsafePath(PathBuf),
    Io(PathBuf, io::Error),
    /// Neither overlay driver could mount it.
    Mount {
        guest: String,
        first: (Driver, MountError),
        then: (Driver, MountError),
    },
    BadPlan(crate::wire::FileError),
    /// The upper was created by a driver that is not available now.
    DriverMismatch {
        guest: String,
        recorded: Driver,
    },
}

impl fmt::Display for AnchorError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            AnchorError::Nested(a, b) => write!(
                f,
                "persistent paths {a} and {b} nest: keep only {a} in the profile's `persist` list"
            ),
            AnchorError::NotDirectory { guest, what } => write!(
                f,
                "persistent path {guest} is {what} in the image, not a directory: \
                 remove it from the profile's `persist` list (persist its target instead)"
            ),
            AnchorError::UnsafePath(p) => write!(
                f,
                "{} contains `,`, `:`, `\\` or a control character, which overlay mount options cannot carry: \
                 set XDG_DATA_HOME / XDG_RUNTIME_DIR to a plainer path",
                p.display()
            ),
            AnchorError::Io(p, e) => write!(f, "{}: {e}", p.display()),
            AnchorError::Mount { guest, first, then } => write!(
                f,
                "cannot mount the State Anchor for {guest}: {}: {}; {}: {} (run `lazaret doctor`)",
                first.0.name(),
                first.1,
                then.0.name(),
                then.1
            ),
            AnchorError::BadPlan(why) => write!(f, "malformed State Anchor plan: {why}"),
            AnchorError::DriverMismatch { guest, recorded } => write!(
                f,
                "the persistent state of {guest} was created with the {} overlay driver, which is not \
                 available now: make it available again, or run `lazaret state reset --path {guest}`",
                recorded.name()
            ),
        }
    }
}

impl std::error::Error for AnchorError {}

type Result<T> = std::result::Result<T, AnchorError>;

// ---- keys -------------------------------------------------------------------

/// The directory name under `anchor/` for a guest path.
pub fn path_key(guest: &str) -> String {
    let rel = guest.trim_start_matches('/');
    let mut out = String::new();
    for (i, c) in rel.chars().enumerate() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2f"),
            '.' if i == 0 => out.push_str("%2e"),
            c => out.push(c),
        }
    }
    out
}

/// The guest path of a key, or `None` for a name that is not a key.
pub fn key_path(key: &str) -> Option<String> {
    if key.is_empty() || key.starts_with('.') || key.contains('/') {
        return None;
    }
    let mut out = String::from("/");
    let b = key.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let code = key.get(i + 1..i + 3)?;
            out.push(match code {
                "25" => '%',
                "2f" => '/',
                "2e" => '.',
                _ => return None,
            });
            i += 3;
        } else {
            let c = key[i..].chars().next()?;
            out.push(c);
            i += c.len_utf8();
        }
    }
    (path_key(&out) == key).then_some(out)
}

// ---- the mount plan (pure) ----------------------------------------------------

/// What the prepared lower has at a persistent path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowerKind {
    Dir,
    Missing,
    Symlink,
    Other,
}

impl AnchorMount {
    pub fn upper(&self) -> PathBuf {
        self.key_dir.join("upper")
    }
    pub fn work(&self) -> PathBuf {
        self.key_dir.join("work")
    }
    pub fn kernel_options(&self) -> String {
        format!(
            "lowerdir={},upperdir={},workdir={},{KERNEL_OPTS}",
            self.lower.display(),
            self.upper().display(),
            self.work().display()
        )
    }
    /// `kernel_options` with `upper` and `work` under `base`, where the
    /// key directory is served (a counting storage view, `mount_all`).
    pub fn kernel_options_on(&self, base: &Path) -> String {
        format!(
            "lowerdir={},upperdir={},workdir={},{KERNEL_OPTS}",
            self.lower.display(),
            base.join("upper").display(),
            base.join("work").display()
        )
    }
    pub fn fuse_options(&self) -> String {
        format!(
            "lowerdir={},upperdir={},workdir={}",
            self.lower.display(),
            self.upper().display(),
            self.work().display()
        )
    }
}

/// Where the plan's pieces live.
pub struct Layout<'a> {
    pub lower_rootfs: &'a Path,
    pub domain_root: &'a Path,
    /// The generation's runtime dir (mount points, the empty lower).
    pub gen_dir: &'a Path,
}

pub fn anchor_dir(domain_root: &Path) -> PathBuf {
    domain_root.join(ANCHOR_DIR)
}

/// The names of the trash trees in the anchor of `root`, sorted.
pub(crate) fn trash_on_disk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(anchor_dir(root)) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(TRASH_PREFIX) {
                out.push(n);
            }
        }
    }
    out.sort();
    out
}

pub fn empty_lower(gen_dir: &Path) -> PathBuf {
    gen_dir.join("anchor-empty")
}

fn option_safe(p: &Path) -> bool {
    let s = p.as_os_str().as_encoded_bytes();
    !s.iter()
        .any(|&c| c == b',' || c == b':' || c == b'\\' || c < 0x20 || c == 0x7f)
}

/// Plans one overlay per persistent path. `lower_kinds[i]` is what the
/// lower has at `persist[i]`. Pure.
pub fn plan_mounts(persist: &[String], lower_kinds: &[LowerKind], l: &Layout) -> Result<Vec<AnchorMount>> {
    let mut sorted: Vec<&String> = persist.iter().collect();
    sorted.sort();
    for w in sorted.windows(2) {
        if w[1].starts_with(w[0].as_str()) && w[1].as_bytes().get(w[0].len()) == Some(&b'/') {
            return Err(AnchorError::Nested(w[0].clone(), w[1].clone()));
        }
    }
    let mut out = Vec::new();
    for (guest, kind) in persist.iter().zip(lower_kinds) {
        let key = path_key(guest);
        let lower = match kind {
            LowerKind::Dir => l.lower_rootfs.join(guest.trim_start_matches('/')),
            LowerKind::Missing => empty_lower(l.gen_dir),
            LowerKind::Symlink => {
                return Err(AnchorError::NotDirectory {
                    guest: guest.clone(),
                    what: "a symlink",
                })
            }
            LowerKind::Other => {
                return Err(AnchorError::NotDirectory {
                    guest: guest.clone(),
                    what: "a file",
                })
            }
        };
        let m = AnchorMount {
            guest: guest.clone(),
            lower,
            key_dir: anchor_dir(l.domain_root).join(&key),
            target: l.gen_dir.join("anchor").join(&key),
            key,
        };
        for p in [&m.lower, &m.key_dir, &m.target] {
            if !option_safe(p) {
                return Err(AnchorError::UnsafePath(p.clone()));
            }
        }
        out.push(m);
    }
    Ok(out)
}

/// The plan file handed to the supervisor (`wire::plan::PlanMsg::Anchor`).
pub fn plan_message(mounts: &[AnchorMount], prefer: Driver) -> crate::wire::plan::PlanMsg {
    crate::wire::plan::PlanMsg::Anchor {
        prefer,
        mounts: mounts.to_vec(),
    }
}

// ---- the coordinator's side ---------------------------------------------------

/// What the lower has at `guest`, looked up one component at a time
/// without following any symlink (the image is untrusted).
pub fn lower_kind(rootfs: &Path, guest: &str) -> io::Result<LowerKind> {
    let mut dir: OwnedFd = rustix::fs::open(
        rootfs,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let comps: Vec<&str> = guest.trim_start_matches('/').split('/').collect();
    for (i, c) in comps.iter().enumerate() {
        let st = match rustix::fs::statat(&dir, *c, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(LowerKind::Missing),
            Err(e) => return Err(e.into()),
        };
        let ft = rustix::fs::FileType::from_raw_mode(st.st_mode);
        if ft == rustix::fs::FileType::Symlink {
            return Ok(LowerKind::Symlink);
        }
        if ft != rustix::fs::FileType::Directory {
            return Ok(LowerKind::Other);
        }
        if i + 1 < comps.len() {
            dir = rustix::fs::openat(
                &dir,
                *c,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
        }
    }
    Ok(LowerKind::Dir)
}

fn mkdir_private(p: &Path) -> Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let md = std::fs::symlink_metadata(p).map_err(|e| AnchorError::Io(p.to_path_buf(), e))?;
            if md.is_dir() {
                Ok(())
            } else {
                Err(AnchorError::Io(
                    p.to_path_buf(),
                    io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a directory"),
                ))
            }
        }
        Err(e) => Err(AnchorError::Io(p.to_path_buf(), e)),
    }
}

/// Creates `anchor/`, each `KEY/{upper,work}`, the mount points and the
/// empty lower. Runs in the coordinator, which holds the Domain lock.
pub fn ensure_layout(domain_root: &Path, gen_dir: &Path, mounts: &[AnchorMount]) -> Result<()> {
    mkdir_private(&anchor_dir(domain_root))?;
    mkdir_private(&gen_dir.join("anchor"))?;
    mkdir_private(&empty_lower(gen_dir))?;
    for m in mounts {
        mkdir_private(&m.key_dir)?;
        mkdir_private(&m.upper())?;
        upper_mode_from_lower(m)?;
        mkdir_private(&m.work())?;
        mkdir_private(&m.target)?;
    }
    Ok(())
}

/// The merged directory shows the upper's mode: give the upper the mode of
/// the image's directory (0755 when the image has none), so `/usr`, `/etc`
/// ... stay searchable by the sandbox's non-root users (apt's `_apt`,
/// `su nobody`). The upper itself stays private on the host: its parent
/// `anchor/KEY` is 0700.
fn upper_mode_from_lower(m: &AnchorMount) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match std::fs::symlink_metadata(&m.lower) {
        Ok(md) if md.is_dir() => md.permissions().mode() & 0o7777,
        _ => 0o755,
    };
    std::fs::set_permissions(m.upper(), std::fs::Permissions::from_mode(mode))
        .map_err(|e| AnchorError::Io(m.upper(), e))
}

pub fn recorded_driver(key_dir: &Path) -> Option<Driver> {
    let p = key_dir.join("driver");
    let md = std::fs::symlink_metadata(&p).ok()?;
    if !md.is_file() {
        return None;
    }
    Driver::parse(&std::fs::read_to_string(p).ok()?)
}

fn record_driver(key_dir: &Path, d: Driver) -> Result<()> {
    let p = key_dir.join("driver");
    let tmp = key_dir.join(".driver.tmp");
    crate::sys::write_durable(&p, &tmp, format!("{}\n", d.name()).as_bytes(), 0o600).map_err(|e| AnchorError::Io(p, e))
}

/// The driver preferred for fresh uppers: `LAZARET_OVERLAY_DRIVER`
/// (`kernel` or `fuse`, a benchmarking and troubleshooting knob), else the
/// kernel overlay: it reports ENOSPC/EDQUOT to the writer faithfully, where
/// fuse-overlayfs acknowledged fsync'd writes the upper could not hold
/// (docs/state.md). An upper keeps the driver that first mounted it.
pub fn preferred_driver() -> Driver {
    std::env::var("LAZARET_OVERLAY_DRIVER")
        .ok()
        .and_then(|v| Driver::parse(&v))
        .unwrap_or(Driver::Kernel)
}

/// Everything the coordinator does for the State Anchor of one generation:
/// finish an interrupted reset, plan the overlays for `persist` over the
/// lower, create the layout, write the supervisor's plan file
/// (`GEN/anchor.plan`). Returns the bundle binds, one per persistent path.
pub fn prepare_generation(
    domain_root: &Path,
    gen_dir: &Path,
    lower_rootfs: &Path,
    persist: &[String],
) -> Result<Vec<crate::plan::BindMount>> {
    finish_reset(domain_root).map_err(|e| AnchorError::Io(anchor_dir(domain_root), e))?;
    let kinds = persist
        .iter()
        .map(|p| lower_kind(lower_rootfs, p))
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| AnchorError::Io(lower_rootfs.to_path_buf(), e))?;
    let l = Layout {
        lower_rootfs,
        domain_root,
        gen_dir,
    };
    let mounts = plan_mounts(persist, &kinds, &l)?;
    ensure_layout(domain_root, gen_dir, &mounts)?;
    let plan_file = plan_path(gen_dir);
    crate::wire::plan::write_plan(&plan_file, &plan_message(&mounts, preferred_driver()))
        .map_err(|e| AnchorError::Io(plan_file.clone(), e))?;
    Ok(mounts
        .iter()
        .map(|m| crate::plan::BindMount {
            guest: m.guest.clone(),
            host: m.target.clone(),
            read_only: false,
        })
        .collect())
}

pub fn plan_path(gen_dir: &Path) -> PathBuf {
    gen_dir.join("anchor.plan")
}

// ---- the supervisor's side ------------------------------------------------------

/// Serves a key directory through a counting storage view and says where
/// (`mount_all`).
pub type CountUpper<'a> = &'a mut dyn FnMut(&AnchorMount) -> io::Result<PathBuf>;

/// Mounts every overlay of the plan. Runs in the Runtime Supervisor as root
/// of its user namespace, in its private mount namespace, before runsc
/// starts. Returns the fuse-overlayfs daemons it started (children with
/// PDEATHSIG), which the supervisor stops after runsc.
///
/// `counted`, with a disk cap: serves a kernel overlay's key directory
/// through a storage view that counts what is written to the upper and
/// returns where (the overlay's upper and work are then on it); such a
/// mount never falls back to fuse-overlayfs, which would not be counted.
pub fn mount_all(plan_file: &Path, counted: Option<CountUpper<'_>>) -> Result<Vec<std::process::Child>> {
    let mut counted = counted;
    let (prefer, mounts) = crate::wire::plan::read_anchor(plan_file).map_err(AnchorError::BadPlan)?;
    let mut daemons = Vec::new();
    // The fuse daemons start together and are then waited for in turn, so
    // their mounts overlap instead of queueing behind each other.
    let mut started: Vec<Option<std::process::Child>> = mounts
        .iter()
        .map(|m| match recorded_driver(&m.key_dir).unwrap_or(prefer) {
            Driver::Fuse => spawn_fuse(m).ok(),
            Driver::Kernel => None,
        })
        .collect();
    for (i, m) in mounts.iter().enumerate() {
        let recorded = recorded_driver(&m.key_dir);
        let first = recorded.unwrap_or(prefer);
        let on = match (&mut counted, first) {
            (Some(f), Driver::Kernel) => Some(f(m).map_err(|e| AnchorError::Mount {
                guest: m.guest.clone(),
                first: (first, MountError::Kernel(e)),
                then: (first, MountError::Counted),
            })?),
            _ => None,
        };
        let result = match (started[i].take(), &on) {
            (Some(child), _) => wait_fuse(m, child, &mut daemons),
            (None, Some(base)) => {
                crate::sys::mount("overlay", &m.target, "overlay", 0, Some(&m.kernel_options_on(base)))
                    .map_err(MountError::Kernel)
            }
            (None, None) => mount_one(m, first, &mut daemons),
        };
        let used = match result {
            Ok(()) => first,
            Err(e) if recorded.is_none() && on.is_none() => {
                // A fresh upper: the other driver may do.
                let other = if first == Driver::Kernel {
                    Driver::Fuse
                } else {
                    Driver::Kernel
                };
                log::warn!(
                    "State Anchor for {}: {} overlay failed ({e}); trying {}",
                    m.guest,
                    first.name(),
                    other.name()
                );
                mount_one(m, other, &mut daemons).map_err(|e2| AnchorError::Mount {
                    guest: m.guest.clone(),
                    first: (first, e),
                    then: (other, e2),
                })?;
                other
            }
            Err(e) if on.is_some() => {
                return Err(AnchorError::Mount {
                    guest: m.guest.clone(),
                    first: (first, e),
                    then: (first, MountError::Counted),
                })
            }
            Err(e) => {
                log::error!("State Anchor for {}: {e}", m.guest);
                return Err(AnchorError::DriverMismatch {
                    guest: m.guest.clone(),
                    recorded: first,
                });
            }
        };
        if recorded.is_none() {
            record_driver(&m.key_dir, used)?;
        }
    }
    Ok(daemons)
}

/// Why one overlay driver could not mount one persistent path.
#[derive(Debug)]
pub enum MountError {
    /// The kernel overlay mount failed.
    Kernel(io::Error),
    FuseSpawn(io::Error),
    FuseExited(std::process::ExitStatus),
    FuseTimeout,
    /// With a disk cap, a kernel overlay whose upper is counted is the
    /// only one allowed.
    Counted,
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            MountError::Kernel(e) => write!(f, "{e}"),
            MountError::FuseSpawn(e) => write!(f, "fuse-overlayfs: {e}"),
            MountError::FuseExited(st) => write!(f, "fuse-overlayfs exited ({st})"),
            MountError::FuseTimeout => write!(f, "fuse-overlayfs did not mount in 10 s"),
            MountError::Counted => write!(f, "no uncounted fallback under a disk cap"),
        }
    }
}

fn mount_one(
    m: &AnchorMount,
    d: Driver,
    daemons: &mut Vec<std::process::Child>,
) -> std::result::Result<(), MountError> {
    match d {
        Driver::Kernel => {
            crate::sys::mount("overlay", &m.target, "overlay", 0, Some(&m.kernel_options())).map_err(MountError::Kernel)
        }
        Driver::Fuse => wait_fuse(m, spawn_fuse(m)?, daemons),
    }
}

/// Starts the fuse-overlayfs daemon for one mount (PDEATHSIG-coupled).
fn spawn_fuse(m: &AnchorMount) -> std::result::Result<std::process::Child, MountError> {
    let mut cmd = std::process::Command::new("fuse-overlayfs");
    cmd.arg("-f")
        .arg("-o")
        .arg(m.fuse_options())
        .arg(&m.target)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    crate::sys::kill_with_parent(&mut cmd);
    cmd.spawn().map_err(MountError::FuseSpawn)
}

/// Waits until a started daemon's mount is in place.
fn wait_fuse(
    m: &AnchorMount,
    mut child: std::process::Child,
    daemons: &mut Vec<std::process::Child>,
) -> std::result::Result<(), MountError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if is_mountpoint(&m.target) {
            daemons.push(child);
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(MountError::FuseExited(st));
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(MountError::FuseTimeout);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

fn is_mountpoint(p: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = p.to_string_lossy();
    text.lines().any(|l| l.split(' ').nth(4) == Some(&want))
}

// ---- reset: the plan and the journal ----------------------------------------------

/// One key of a reset: its directory is renamed to `trash`, then replaced
/// by a fresh empty one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResetStep {
    pub key: String,
    pub trash: String,
}

/// Plans a reset of `keys` (pure): a distinct trash name per key.
pub fn plan_reset(keys: &[String], nonce: &str) -> Vec<ResetStep> {
    keys.iter()
        .map(|k| ResetStep {
            key: k.clone(),
            trash: format!("{TRASH_PREFIX}{k}-{nonce}"),
        })
        .collect()
}

pub fn render_journal(steps: &[ResetStep]) -> String {
    let mut s = String::from("lazaret-reset v1\n");
    for st in steps {
        s.push_str(&format!("{}\t{}\n", st.key, st.trash));
    }
    s
}

pub fn parse_journal(text: &str) -> Option<Vec<ResetStep>> {
    let mut lines = text.lines();
    if lines.next()? != "lazaret-reset v1" {
        return None;
    }
    let mut out = Vec::new();
    for l in lines {
        let (k, t) = l.split_once('\t')?;
        if key_path(k).is_none() || !t.starts_with(TRASH_PREFIX) || t.contains('/') {
            return None;
        }
        out.push(ResetStep {
            key: k.into(),
            trash: t.into(),
        });
    }
    Some(out)
}

/// Fault injection for the crash-consistency tests: with the
/// `fault-injection` feature, `LAZARET_FAULT=reset-step-N` SIGKILLs the
/// process at step N. Compiled out otherwise.
pub fn fault_point(name: &str) {
    #[cfg(feature = "fault-injection")]
    if std::env::var("LAZARET_FAULT").as_deref() == Ok(name) {
        let _ = crate::sys::kill(crate::sys::getpid(), crate::sys::SIGKILL);
    }
    #[cfg(not(feature = "fault-injection"))]
    let _ = name;
}

fn write_file_durable(p: &Path, data: &str) -> io::Result<()> {
    // A write that fails (a full disk) leaves nothing behind: the temp
    // file is ours and was never renamed into place.
    crate::sys::write_durable(p, &p.with_extension("tmp"), data.as_bytes(), 0o600)
}

fn sync_dir(d: &Path) -> io::Result<()> {
    std::fs::File::open(d)?.sync_all()
}

/// Creates an empty `KEY` (with `upper` and `work`) by building it under a
/// dot-name and renaming it into place.
fn create_empty_key(anchor: &Path, key: &str) -> io::Result<()> {
    if std::fs::symlink_metadata(anchor.join(key)).is_ok() {
        return Ok(());
    }
    let tmp = anchor.join(format!("{NEW_PREFIX}{key}-{}", crate::domain::random_id(4)));
    std::fs::DirBuilder::new().mode(0o700).create(&tmp)?;
    std::fs::DirBuilder::new().mode(0o700).create(tmp.join("upper"))?;
    std::fs::DirBuilder::new().mode(0o700).create(tmp.join("work"))?;
    std::fs::rename(&tmp, anchor.join(key))
}

/// Carries out a reset of `steps` (the caller holds the Domain lock and has
/// checked nothing uses the state). Crash-consistent: the journal is
/// written first, and [`finish_reset`] completes any reset it finds. Trash
/// is left for [`crate::storage::state`] to delete inside a user namespace.
pub fn reset(domain_root: &Path, steps: &[ResetStep]) -> io::Result<()> {
    let anchor = anchor_dir(domain_root);
    write_file_durable(&anchor.join(JOURNAL), &render_journal(steps))?;
    fault_point("reset-step-1");
    roll_forward(&anchor, steps, true)
}

fn roll_forward(anchor: &Path, steps: &[ResetStep], faults: bool) -> io::Result<()> {
    for (i, st) in steps.iter().enumerate() {
        let from = anchor.join(&st.key);
        let to = anchor.join(&st.trash);
        // Rename only a real directory, and only if not already renamed.
        match std::fs::symlink_metadata(&from) {
            Ok(md) if md.is_dir() && std::fs::symlink_metadata(&to).is_err() => std::fs::rename(&from, &to)?,
            Ok(md) if !md.is_dir() => std::fs::remove_file(&from)?,
            _ => {}
        }
        if faults && i == 0 {
            fault_point("reset-step-2");
        }
    }
    sync_dir(anchor)?;
    if faults {
        fault_point("reset-step-3");
    }
    for st in steps {
        create_empty_key(anchor, &st.key)?;
    }
    sync_dir(anchor)?;
    if faults {
        fault_point("reset-step-4");
    }
    std::fs::remove_file(anchor.join(JOURNAL))?;
    sync_dir(anchor)
}

/// Completes a reset a crash interrupted (roll forward: once the journal
/// exists the user's decision is recorded). Removes half-built `.new-*`
/// dirs. Returns whether a journal was found. Idempotent.
pub fn finish_reset(domain_root: &Path) -> io::Result<bool> {
    let anchor = anchor_dir(domain_root);
    match std::fs::symlink_metadata(&anchor) {
        Ok(md) if md.is_dir() => {}
        _ => return Ok(false),
    }
    if let Ok(rd) = std::fs::read_dir(&anchor) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(NEW_PREFIX) && e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                // Built by us and never renamed into place: only empty dirs.
                let p = e.path();
                let _ = std::fs::remove_dir(p.join("upper"));
                let _ = std::fs::remove_dir(p.join("work"));
                let _ = std::fs::remove_dir(&p);
            }
        }
    }
    let jp = anchor.join(JOURNAL);
    // A journal that never got written in full (a full disk) was never
    // renamed into place: the reset did not begin.
    let tmp = jp.with_extension("tmp");
    if std::fs::symlink_metadata(&tmp).is_ok_and(|m| m.is_file()) {
        let _ = std::fs::remove_file(&tmp);
    }
    let md = match std::fs::symlink_metadata(&jp) {
        Ok(md) => md,
        Err(_) => return Ok(false),
    };
    if !md.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", jp.display()),
        ));
    }
    let text = std::fs::read_to_string(&jp)?;
    let Some(steps) = parse_journal(&text) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is malformed: remove it after checking the anchor", jp.display()),
        ));
    };
    log::warn!("finishing an interrupted reset of {} path(s)", steps.len());
    roll_forward(&anchor, &steps, false)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_never_look_like_dot_names() {
        for g in ["/usr", "/home/agent", "/a%b", "/.cache", "/x/.y", "/ünï"] {
            let k = path_key(g);
            assert!(!k.starts_with('.') && !k.contains('/'), "{k}");
            assert_eq!(key_path(&k).as_deref(), Some(g), "{k}");
        }
        assert_eq!(path_key("/home/agent"), "home%2fagent");
        assert_eq!(path_key("/.cache"), "%2ecache");
        assert_eq!(key_path(".trash-usr-1"), None);
        assert_eq!(key_path("a%zz"), None);
        assert_eq!(key_path("a.b%2E"), None, "non-canonical spelling");
    }

    fn layout() -> (PathBuf, PathBuf, PathBuf) {
        (
            "/s/lowers/A/rootfs".into(),
            "/s/domains/D".into(),
            "/run/lz/D/gen".into(),
        )
    }

    #[test]
    fn plan_has_one_overlay_per_path_and_an_empty_lower_for_missing_ones() {
        let (r, d, g) = layout();
        let l = Layout {
            lower_rootfs: &r,
            domain_root: &d,
            gen_dir: &g,
        };
        let persist = vec!["/usr".to_string(), "/home/agent".to_string()];
        let m = plan_mounts(&persist, &[LowerKind::Dir, LowerKind::Missing], &l).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].lower, PathBuf::from("/s/lowers/A/rootfs/usr"));
        assert_eq!(m[0].upper(), PathBuf::from("/s/domains/D/anchor/usr/upper"));
        assert_eq!(m[0].target, PathBuf::from("/run/lz/D/gen/anchor/usr"));
        assert_eq!(m[1].lower, PathBuf::from("/run/lz/D/gen/anchor-empty"));
        assert_eq!(m[1].key, "home%2fagent");
        assert_eq!(
            m[0].kernel_options(),
            "lowerdir=/s/lowers/A/rootfs/usr,upperdir=/s/domains/D/anchor/usr/upper,\
             workdir=/s/domains/D/anchor/usr/work,userxattr,index=off,redirect_dir=nofollow,metacopy=off"
        );
        let bytes = crate::wire::codec::Message::encode(&plan_message(&m, Driver::Kernel));
        assert_eq!(
            crate::wire::decode_one::<crate::wire::plan::PlanMsg>(&bytes).unwrap(),
            crate::wire::plan::PlanMsg::Anchor {
                prefer: Driver::Kernel,
                mounts: m
            }
        );
    }

    #[test]
    fn plan_refuses_nesting_symlinks_and_unsafe_paths() {
        let (r, d, g) = layout();
        let l = Layout {
            lower_rootfs: &r,
            domain_root: &d,
            gen_dir: &g,
        };
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = plan_mounts(&p(&["/home/agent", "/home"]), &[LowerKind::Dir; 2], &l).unwrap_err();
        assert!(e.to_string().contains("/home and /home/agent nest"), "{e}");
        assert!(plan_mounts(&p(&["/home", "/homer"]), &[LowerKind::Dir; 2], &l).is_ok());
        let e = plan_mounts(&p(&["/bin"]), &[LowerKind::Symlink], &l).unwrap_err();
        assert!(e.to_string().contains("/bin is a symlink in the image"), "{e}");
        let bad: PathBuf = "/s/do,mains".into();
        let l2 = Layout {
            lower_rootfs: &r,
            domain_root: &bad,
            gen_dir: &g,
        };
        assert!(matches!(
            plan_mounts(&p(&["/usr"]), &[LowerKind::Dir], &l2),
            Err(AnchorError::UnsafePath(_))
        ));
        let rel = plan_message(
            &[AnchorMount {
                guest: "/usr".into(),
                key: "a".into(),
                lower: "rel".into(),
                key_dir: "/a".into(),
                target: "/b".into(),
            }],
            Driver::Kernel,
        );
        let bytes = crate::wire::codec::Message::encode(&rel);
        assert!(crate::wire::decode_one::<crate::wire::plan::PlanMsg>(&bytes).is_err());
    }

    #[test]
    fn journal_round_trips_and_rejects_escapes() {
        let steps = plan_reset(&["usr".into(), "home%2fagent".into()], "ab12");
        assert_eq!(steps[0].trash, ".trash-usr-ab12");
        let j = render_journal(&steps);
        assert_eq!(parse_journal(&j).unwrap(), steps);
        assert!(parse_journal("lazaret-reset v1\n../x\t.trash-a\n").is_none());
        assert!(parse_journal("lazaret-reset v1\nusr\t../../etc\n").is_none());
        assert!(parse_journal("lazaret-reset v1\nusr\t.trash-x/../../y\n").is_none());
        assert!(parse_journal("garbage\n").is_none());
    }

    #[test]
    fn reset_and_recovery_on_disk() {
        let d = std::env::temp_dir().join(format!("lazaret-anchor-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let anchor = anchor_dir(&d);
        for k in ["usr", "etc"] {
            std::fs::create_dir_all(anchor.join(k).join("upper/local")).unwrap();
            std::fs::create_dir_all(anchor.join(k).join("work")).unwrap();
        }
        let steps = plan_reset(&["usr".into()], "n1");
        reset(&d, &steps).unwrap();
        assert!(anchor.join("usr/upper").is_dir() && !anchor.join("usr/upper/local").exists());
        assert!(anchor.join(".trash-usr-n1/upper/local").is_dir());
        assert!(anchor.join("etc/upper/local").is_dir(), "out of scope");
        assert!(!anchor.join(JOURNAL).exists());
        // A crash after the journal and the rename but before the new dir.
        std::fs::create_dir_all(anchor.join("etc/upper/x")).unwrap();
        let steps = plan_reset(&["etc".into()], "n2");
        std::fs::write(anchor.join(JOURNAL), render_journal(&steps)).unwrap();
        std::fs::rename(anchor.join("etc"), anchor.join(".trash-etc-n2")).unwrap();
        std::fs::create_dir_all(anchor.join(".new-etc-zz/upper")).unwrap();
        assert!(finish_reset(&d).unwrap());
        assert!(anchor.join("etc/upper").is_dir() && !anchor.join("etc/upper/x").exists());
        assert!(!anchor.join(".new-etc-zz").exists());
        assert!(!finish_reset(&d).unwrap(), "idempotent");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
