//! `lazaret state list|inspect|verify|reset` and
//! the Domain metadata file they resolve Domains through.
//!
//! Domains are chosen by `--profile`/`--workspace` (the Domain ID is
//! derived) or by `--domain ID` as `list` prints it; never by a
//! filesystem path. What a Domain is (profile, workspace, persistent
//! paths, lower) comes from `DOMAIN_ROOT/domain.json`, written only by the
//! Host Coordinator into the host-only Domain Root.
//!
//! Everything that reads inside an upper runs in the state helper
//! (`statefs`); this module does the host-side parts: selection, locking,
//! the reset journal (`anchor::reset`), and output.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nanoserde::DeJson;

use crate::config;
use crate::display::{fit, human_size};
use crate::domain;
use crate::plan::Json;
use crate::storage::anchor::{self, Driver};
use crate::storage::image;
use crate::storage::paths::{self, DomainPaths};
use crate::storage::statefs::{self, Kind, Op, Report};

pub const META_FILE: &str = "domain.json";
/// Where the ignored-workspace-state role keeps its per-Domain storage.
pub const IGNORED_DIR: &str = "ignored";

// ---- errors ---------------------------------------------------------------------

#[derive(Debug)]
pub enum StateError {
    /// Bad input: unknown Domain, bad flag combination (exit 2).
    Usage(String),
    /// The state is in use: refused (exit 2).
    InUse(String),
    /// Something failed while working (exit 125).
    Failed(String),
}

impl StateError {
    pub fn code(&self) -> i32 {
        match self {
            StateError::Usage(_) | StateError::InUse(_) => crate::exit::Exit::Usage.code(),
            StateError::Failed(_) => crate::exit::Exit::Failure.code(),
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            StateError::Usage(m) | StateError::InUse(m) | StateError::Failed(m) => f.write_str(m),
        }
    }
}

type Result<T> = std::result::Result<T, StateError>;

use crate::exit::Exit;

fn failed(what: &str, e: impl fmt::Display) -> StateError {
    StateError::Failed(format!("{what}: {e}"))
}

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

// ---- selecting a Domain ----------------------------------------------------------------

struct Selected {
    id: domain::DomainId,
    paths: DomainPaths,
    meta: Option<DomainMeta>,
    storage: PathBuf,
}

pub(crate) fn is_domain_id(s: &str) -> bool {
    domain::DomainId::parse(s).is_ok()
}

fn dirs() -> Result<(config::Config, PathBuf, PathBuf)> {
    let cfg = config::load(&config::config_path()).map_err(|e| StateError::Usage(e.to_string()))?;
    let storage = paths::storage_root().map_err(|e| StateError::Usage(e.to_string()))?;
    let runtime = paths::runtime_root(cfg.runtime_dir.as_deref());
    Ok((cfg, storage, runtime))
}

fn select(profile: Option<String>, workspace: Option<PathBuf>, id: Option<String>) -> Result<Selected> {
    let (_cfg, storage, runtime) = dirs()?;
    let id = match id {
        Some(id) => {
            if profile.is_some() || workspace.is_some() {
                return Err(StateError::Usage(
                    "pass either --domain ID or --profile/--workspace, not both".into(),
                ));
            }
            domain::DomainId::parse(&id).map_err(|_| {
                StateError::Usage(format!(
                    "{id:?} is not a Domain ID (20 hex digits, as `lazaret state list` prints them)"
                ))
            })?
        }
        None => {
            let name = profile.unwrap_or_else(|| "default".into());
            let dir = match workspace {
                Some(w) => w,
                None => std::env::current_dir().map_err(|e| failed("reading the current directory", e))?,
            };
            let ws = domain::canonical_workspace(&dir).map_err(|e| StateError::Usage(e.to_string()))?;
            domain::domain_id(&name, &ws)
        }
    };
    let paths = DomainPaths::new(&storage, &runtime, &id);
    match std::fs::symlink_metadata(&paths.root) {
        Ok(md) if md.is_dir() => {}
        _ => {
            return Err(StateError::Usage(format!(
                "Domain {id} has no persistent state (no {}): see `lazaret state list`",
                paths.root.display()
            )))
        }
    }
    let meta = read_meta(&paths.root);
    Ok(Selected {
        id,
        paths,
        meta,
        storage,
    })
}

fn domain_args(args: &mut pico_args::Arguments) -> Result<(Option<String>, Option<PathBuf>, Option<String>)> {
    let u = |e: pico_args::Error| StateError::Usage(e.to_string());
    Ok((
        args.opt_value_from_str(["-p", "--profile"]).map_err(u)?,
        args.opt_value_from_str(["-w", "--workspace"]).map_err(u)?,
        args.opt_value_from_str("--domain").map_err(u)?,
    ))
}

fn finish(args: pico_args::Arguments) -> Result<()> {
    if let Some(a) = args.finish().first() {
        return Err(StateError::Usage(format!(
            "unknown argument {:?}: see `lazaret help`",
            a.to_string_lossy()
        )));
    }
    Ok(())
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
        return Err(StateError::InUse(format!(
            "Domain {id} is running (its sessions use the state): end them or run `lazaret stop`, then retry"
        )));
    }
    paths::ensure_private_dir(&p.run).map_err(|e| StateError::Usage(e.to_string()))?;
    // A lock held by an unpublished coordinator is one that is tearing
    // down (or starting): wait a little for it, never while published.
    let deadline = std::time::Instant::now() + wait;
    let lock = loop {
        // A coordinator that just stopped may have removed the runtime dir.
        let _ = paths::ensure_private_dir(&p.run);
        if let Some(l) = domain::try_lock(&p.lock()).map_err(|e| StateError::Failed(e.to_string()))? {
            break l;
        }
        if published(p) {
            return Err(StateError::InUse(format!(
                "Domain {id} is running (its sessions use the state): end them or run `lazaret stop`, then retry"
            )));
        }
        if std::time::Instant::now() > deadline {
            return Err(StateError::InUse(format!(
                "Domain {id} is in use (another lazaret holds its lock): wait for it or run `lazaret stop`, then retry"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    if published(p) {
        return Err(StateError::InUse(format!(
            "Domain {id} is running: run `lazaret stop`, then retry"
        )));
    }
    Ok(Maintenance {
        lock: Some(lock),
        path: p.lock(),
    })
}

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

pub(crate) fn trash_on_disk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(anchor::anchor_dir(root)) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(anchor::TRASH_PREFIX) {
                out.push(n);
            }
        }
    }
    out.sort();
    out
}

fn driver_of(root: &Path, key: &str) -> Driver {
    anchor::recorded_driver(&anchor::anchor_dir(root).join(key)).unwrap_or(Driver::Kernel)
}

fn lower_rootfs(s: &Selected) -> Option<PathBuf> {
    let m = s.meta.as_ref()?;
    if m.artifact.is_empty() || !m.artifact.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let r = image::lowers_dir(&s.storage).join(&m.artifact).join("rootfs");
    std::fs::symlink_metadata(&r).ok().filter(|md| md.is_dir()).map(|_| r)
}

fn ignored_size(s: &Selected, r: &Report) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(s.paths.root.join(IGNORED_DIR)).ok()?;
    r.sizes
        .iter()
        .find(|(k, _, _)| k == IGNORED_DIR)
        .map(|&(_, n, b)| (n, b))
}

fn header_json(s: &Selected, active: bool) -> Vec<(&'static str, Json)> {
    let m = s.meta.clone().unwrap_or_default();
    vec![
        ("domain_id", Json::s(&s.id)),
        ("profile", Json::s(&m.profile)),
        ("workspace", Json::s(&m.workspace)),
        ("active", Json::Bool(active)),
    ]
}

fn header_human(s: &Selected, active: bool) -> String {
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

fn entry_guest_path(key: &str, rel: &str) -> String {
    format!("{}/{rel}", guest(key))
}

// ---- the commands --------------------------------------------------------------------------

pub fn cmd(mut raw: Vec<std::ffi::OsString>) -> Result<i32> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    match sub.as_ref().and_then(|s| s.to_str()) {
        Some("list") => {
            finish(args)?;
            list(json)
        }
        Some("inspect") => {
            let (p, w, d) = domain_args(&mut args)?;
            finish(args)?;
            inspect(select(p, w, d)?, json)
        }
        Some("verify") => {
            let (p, w, d) = domain_args(&mut args)?;
            finish(args)?;
            verify(select(p, w, d)?, json)
        }
        Some("reset") => {
            let (p, w, d) = domain_args(&mut args)?;
            let all = args.contains("--all");
            let yes = args.contains("--yes");
            let path: Option<String> = args
                .opt_value_from_str("--path")
                .map_err(|e| StateError::Usage(e.to_string()))?;
            finish(args)?;
            let scope = match (path, all) {
                (Some(_), true) => return Err(StateError::Usage("pass --path P or --all, not both".into())),
                (Some(p), false) => Some(p),
                (None, true) => None,
                (None, false) => {
                    return Err(StateError::Usage(
                        "say what to reset: --path P (one persistent path) or --all".into(),
                    ))
                }
            };
            reset(select(p, w, d)?, scope, yes, json)
        }
        Some("unhide") => {
            let (p, w, d) = domain_args(&mut args)?;
            let all = args.contains("--all");
            let path: Option<PathBuf> = args
                .opt_value_from_os_str("--path", |v| Ok::<_, std::convert::Infallible>(PathBuf::from(v)))
                .map_err(|e| StateError::Usage(e.to_string()))?;
            finish(args)?;
            if path.is_some() == all {
                return Err(StateError::Usage(
                    "say what to un-hide: --path P (a workspace path, relative or absolute) or --all".into(),
                ));
            }
            unhide(select(p, w, d)?, path, json)
        }
        Some("diff") => {
            let (p, w, d) = domain_args(&mut args)?;
            let path: PathBuf = args
                .free_from_os_str(|v| Ok::<_, std::convert::Infallible>(PathBuf::from(v)))
                .map_err(|_| StateError::Usage("`lazaret state diff` needs a PATH (a host-tool file)".into()))?;
            finish(args)?;
            diff(select(p, w, d)?, path)
        }
        Some(other) => Err(StateError::Usage(format!(
            "unknown state command {other:?}: expected list, inspect, diff, verify, reset or unhide"
        ))),
        None => Err(StateError::Usage(
            "`lazaret state` needs a command: list, inspect, verify or reset".into(),
        )),
    }
}

fn list(json: bool) -> Result<i32> {
    let (_cfg, storage, runtime) = dirs()?;
    let mut ids: Vec<domain::DomainId> = std::fs::read_dir(storage.join("domains"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .filter_map(|e| domain::DomainId::parse(&e.file_name().to_string_lossy()).ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    let mut items = Vec::new();
    let mut human = String::new();
    for id in ids {
        let paths = DomainPaths::new(&storage, &runtime, &id);
        let meta = read_meta(&paths.root);
        let active = is_active(&paths);
        let keys = keys_on_disk(&paths.root);
        // A key's size is its upper plus its (normally empty) workdir.
        let mut ops: Vec<Op> = keys
            .iter()
            .map(|k| Op::Size {
                name: k.clone(),
                in_root: false,
            })
            .collect();
        if paths.root.join(IGNORED_DIR).exists() {
            ops.push(Op::Size {
                name: IGNORED_DIR.into(),
                in_root: true,
            });
        }
        // Leftovers a start or a reset could not delete stay set aside.
        let aside = trash_on_disk(&paths.root);
        ops.extend(aside.iter().map(|t| Op::Size {
            name: t.clone(),
            in_root: false,
        }));
        let report = statefs::run_helper(&paths.root, None, &ops).unwrap_or_default();
        let size_of = |k: &str| report.sizes.iter().find(|(n, _, _)| n == k).map_or(0, |s| s.2);
        let total: u64 = keys.iter().map(|k| size_of(k)).sum();
        let m = meta.clone().unwrap_or_default();
        items.push(Json::Obj(vec![
            ("domain_id", Json::s(&id)),
            ("profile", Json::s(&m.profile)),
            ("workspace", Json::s(&m.workspace)),
            ("persist", Json::strs(&m.persist)),
            ("active", Json::Bool(active)),
            ("last_used", Json::Num(m.last_used)),
            (
                "paths",
                Json::Arr(
                    keys.iter()
                        .map(|k| {
                            Json::Obj(vec![
                                ("path", Json::s(guest(k))),
                                ("bytes", Json::Num(size_of(k) as i64)),
                                ("driver", Json::s(driver_of(&paths.root, k).name())),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("upper_bytes", Json::Num(total as i64)),
            (
                "ignored_bytes",
                if paths.root.join(IGNORED_DIR).exists() {
                    Json::Num(size_of(IGNORED_DIR) as i64)
                } else {
                    Json::Null
                },
            ),
            (
                "set_aside",
                Json::Arr(
                    aside
                        .iter()
                        .map(|t| Json::Obj(vec![("name", Json::s(t)), ("bytes", Json::Num(size_of(t) as i64))]))
                        .collect(),
                ),
            ),
        ]));
        human.push_str(&format!(
            "{id}  {:<12} {:<8} last used {}  {}\n",
            fit(if m.profile.is_empty() { "?" } else { &m.profile }, 12),
            if active { "active" } else { "inactive" },
            if m.last_used > 0 {
                format_time(m.last_used)
            } else {
                "never".into()
            },
            human_size(total)
        ));
        human.push_str(&format!("    workspace {}\n", fit(&m.workspace, 70)));
        let mut line = String::from("    persist");
        for k in &keys {
            let part = format!(" {} ({})", guest(k), human_size(size_of(k)));
            if line.chars().count() + part.chars().count() > 79 {
                human.push_str(&line);
                human.push('\n');
                line = String::from("           ");
            }
            line.push_str(&part);
        }
        if keys.is_empty() {
            line.push_str(" (nothing yet)");
        }
        human.push_str(&line);
        human.push('\n');
        if paths.root.join(IGNORED_DIR).exists() {
            human.push_str(&format!(
                "    ignored workspace state {}\n",
                human_size(size_of(IGNORED_DIR))
            ));
        }
        for t in &aside {
            human.push_str(&format!(
                "    set aside {} ({}): deleted by the next start, `state reset` or `rm`\n",
                fit(t, 40),
                human_size(size_of(t))
            ));
        }
    }
    if json {
        println!("{}", Json::Arr(items).render());
    } else if human.is_empty() {
        println!("no Domains have persistent state");
    } else {
        print!("{human}");
    }
    Ok(0)
}

/// `YYYY-MM-DD HH:MM` UTC from Unix seconds.
pub fn format_time(t: i64) -> String {
    let days = t.div_euclid(86400);
    let secs = t.rem_euclid(86400);
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
}

fn walk_all(s: &Selected, keys: &[String], with_ignored: bool) -> Result<Report> {
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
    statefs::run_helper(&s.paths.root, lower.as_deref(), &ops).map_err(|e| StateError::Failed(e.to_string()))
}

fn entry_json(e: &statefs::Entry) -> Json {
    let id = |v: Option<u32>| v.map_or(Json::Null, |v| Json::Num(v as i64));
    Json::Obj(vec![
        ("kind", Json::s(e.kind.name())),
        ("path", Json::s(entry_guest_path(&e.key, &e.path))),
        ("type", Json::s(&e.ftype)),
        ("mode", Json::s(format!("{:04o}", e.mode))),
        ("uid", id(e.uid)),
        ("gid", id(e.gid)),
        ("size", Json::Num(e.size as i64)),
    ])
}

fn finding_json(f: &statefs::Finding) -> Json {
    Json::Obj(vec![
        ("level", Json::s(&f.level)),
        ("path", Json::s(entry_guest_path(&f.key, &f.path).trim_end_matches('/'))),
        ("message", Json::s(&f.message)),
    ])
}

/// Host-tool files (`view::hosttool`) whose Domain copy differs from the
/// workspace's file.
fn host_config_differences(s: &Selected) -> Vec<(PathBuf, crate::view::hosttool::Difference)> {
    let store = s.paths.root.join(IGNORED_DIR);
    let ws = s.meta.as_ref().map(|m| PathBuf::from(&m.workspace)).unwrap_or_default();
    if ws.as_os_str().is_empty() {
        return Vec::new();
    }
    let paths = crate::view::hosttool::read_paths(&store);
    crate::view::hosttool::differing(&ws, &store, &paths)
}

/// `lazaret state diff PATH`: the host's file against the Domain's copy.
fn diff(s: Selected, path: PathBuf) -> Result<i32> {
    let store = s.paths.root.join(IGNORED_DIR);
    let ws = s.meta.as_ref().map(|m| PathBuf::from(&m.workspace)).unwrap_or_default();
    let rel = if path.is_absolute() {
        path.strip_prefix(&ws).map(Path::to_path_buf).map_err(|_| {
            StateError::Usage(format!(
                "{} is not inside the Domain's workspace {}",
                crate::display::escape_path(&path),
                crate::display::escape_path(&ws)
            ))
        })?
    } else {
        path.clone()
    };
    let paths = crate::view::hosttool::read_paths(&store);
    if !crate::view::hosttool::covers(&paths, &rel) {
        return Err(StateError::Usage(format!(
            "{} is not a host-tool file of this Domain (see `lazaret state inspect`)",
            crate::display::escape_path(&rel)
        )));
    }
    let diffs = crate::view::hosttool::differing(&ws, &store, &paths);
    let mut shown = 0;
    for (p, _) in diffs.iter().filter(|(p, _)| p.starts_with(&rel)) {
        let read = |root: &Path| std::fs::read(root.join(p)).ok();
        let text = crate::view::hosttool::diff_text(p, read(&ws).as_deref(), read(&store).as_deref());
        // The copy is the sandbox's: every line is escaped for the terminal.
        for line in text.lines() {
            println!("{}", crate::display::escape(line));
        }
        shown += 1;
    }
    if shown == 0 {
        println!(
            "{}: the Domain's copy equals the host's",
            crate::display::escape_path(&rel)
        );
    }
    Ok(0)
}

fn inspect(s: Selected, json: bool) -> Result<i32> {
    let active = is_active(&s.paths);
    let keys = keys_on_disk(&s.paths.root);
    let report = walk_all(&s, &keys, true)?;
    let pending = s.paths.root.join(anchor::ANCHOR_DIR).join(anchor::JOURNAL).exists();
    let lower_known = lower_rootfs(&s).is_some();
    if json {
        let mut obj = header_json(&s, active);
        obj.push(("lower_known", Json::Bool(lower_known)));
        obj.push(("reset_pending", Json::Bool(pending)));
        obj.push((
            "paths",
            Json::Arr(
                keys.iter()
                    .map(|k| {
                        let (n, b) = report
                            .sizes
                            .iter()
                            .find(|(x, _, _)| x == k)
                            .map_or((0, 0), |s| (s.1, s.2));
                        Json::Obj(vec![
                            ("path", Json::s(guest(k))),
                            ("driver", Json::s(driver_of(&s.paths.root, k).name())),
                            ("entries", Json::Num(n as i64)),
                            ("bytes", Json::Num(b as i64)),
                            (
                                "changes",
                                Json::Arr(report.entries.iter().filter(|e| &e.key == k).map(entry_json).collect()),
                            ),
                        ])
                    })
                    .collect(),
            ),
        ));
        obj.push((
            "ignored",
            match ignored_size(&s, &report) {
                Some((n, b)) => Json::Obj(vec![("entries", Json::Num(n as i64)), ("bytes", Json::Num(b as i64))]),
                None => Json::Null,
            },
        ));
        obj.push((
            "host_config",
            Json::Arr(
                host_config_differences(&s)
                    .iter()
                    .map(|(p, d)| {
                        Json::Obj(vec![
                            ("path", Json::s(p.to_string_lossy())),
                            ("state", Json::s(d.word())),
                        ])
                    })
                    .collect(),
            ),
        ));
        obj.push((
            "findings",
            Json::Arr(report.findings.iter().map(finding_json).collect()),
        ));
        println!("{}", Json::Obj(obj).render());
        return Ok(0);
    }
    let mut out = header_human(&s, active);
    if pending {
        out.push_str("  a reset was interrupted: the next `lazaret state verify` or `run` finishes it\n");
    }
    if !lower_known {
        out.push_str("  (the prepared lower is gone: \"added\" may also mean modified)\n");
    }
    if keys.is_empty() {
        out.push_str("no persistent changes yet\n");
    }
    for k in &keys {
        let (n, b) = report
            .sizes
            .iter()
            .find(|(x, _, _)| x == k)
            .map_or((0, 0), |s| (s.1, s.2));
        let changes: Vec<&statefs::Entry> = report.entries.iter().filter(|e| &e.key == k).collect();
        out.push_str(&format!(
            "{}  {} change(s), {} in {n} upper entries\n",
            guest(k),
            changes.len(),
            human_size(b)
        ));
        // Inside an added or opaque directory everything is new: show the
        // directory with a count, not every entry.
        let mut collapsed: Vec<String> = Vec::new();
        for e in &changes {
            if collapsed
                .iter()
                .any(|c| e.path.starts_with(c.as_str()) && e.path.as_bytes().get(c.len()) == Some(&b'/'))
            {
                continue;
            }
            let below = changes
                .iter()
                .filter(|o| o.path.starts_with(&e.path) && o.path.as_bytes().get(e.path.len()) == Some(&b'/'))
                .count();
            let mut p = entry_guest_path(k, &e.path);
            if e.ftype == "dir" {
                p.push('/');
            }
            let extra = if e.ftype == "dir" && below > 0 && matches!(e.kind, Kind::Added | Kind::Opaque) {
                collapsed.push(e.path.clone());
                format!(" (+{below})")
            } else {
                String::new()
            };
            let room = 80 - 2 - 9 - 9 - extra.chars().count();
            out.push_str(&format!(
                "  {:<8} {:<8} {}{extra}\n",
                e.kind.name(),
                e.ftype,
                fit(&p, room)
            ));
        }
    }
    if let Some((n, b)) = ignored_size(&s, &report) {
        out.push_str(&format!("ignored workspace state  {n} entries, {}\n", human_size(b)));
    }
    let hc = host_config_differences(&s);
    if !hc.is_empty() {
        out.push_str("host-tool files whose Domain copy differs from the host (`lazaret state diff PATH`):\n");
        for (p, d) in &hc {
            out.push_str(&format!(
                "  {:<8} {}\n",
                d.word(),
                fit(&crate::display::escape_path(p), 68)
            ));
        }
    }
    for f in &report.findings {
        out.push_str(&format!(
            "{}: {}: {}\n",
            f.level,
            fit(&entry_guest_path(&f.key, &f.path), 40),
            crate::display::escape(&f.message)
        ));
    }
    print!("{out}");
    Ok(0)
}

/// Deletes leftover `.trash-*` trees (a finished reset's old uppers).
fn clean_trash(s: &Selected) -> Result<Vec<String>> {
    let trash = trash_on_disk(&s.paths.root);
    let ops: Vec<Op> = trash.iter().map(|t| Op::Remove { name: t.clone() }).collect();
    let r = statefs::run_helper(&s.paths.root, None, &ops).map_err(|e| StateError::Failed(e.to_string()))?;
    Ok(r.removed
        .into_iter()
        .filter_map(|(n, res)| res.err().map(|e| format!("{n}: {e}")))
        .collect())
}

/// Host-side structure of the anchor: every name is one Lazaret writes,
/// every directory a real one.
fn structure_findings(root: &Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    // The Domain root and its store must be readable and sound, or
    // nothing below can be vouched for.
    if let Err(e) = std::fs::read_dir(root) {
        out.push((
            "error".into(),
            root.display().to_string(),
            format!("cannot be read ({e})"),
        ));
        return out;
    }
    if let Err(e) = crate::storage::store::check_file(&root.join("store.sqlite")) {
        out.push((
            "error".into(),
            root.join("store.sqlite").display().to_string(),
            e.to_string(),
        ));
    }
    let anchor = anchor::anchor_dir(root);
    let md = match std::fs::symlink_metadata(&anchor) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.push((
                "error".into(),
                anchor.display().to_string(),
                format!("cannot be read ({e})"),
            ));
            return out;
        }
    };
    if !md.is_dir() {
        out.push((
            "error".into(),
            anchor.display().to_string(),
            "is not a real directory (a symlink?)".into(),
        ));
        return out;
    }
    if let Err(e) = std::fs::read_dir(&anchor) {
        out.push((
            "error".into(),
            anchor.display().to_string(),
            format!("cannot be read ({e})"),
        ));
    }
    if let Ok(rd) = std::fs::read_dir(&anchor) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            let p = e.path();
            let ft = e.file_type().ok();
            if anchor::key_path(&n).is_some() {
                if !ft.is_some_and(|t| t.is_dir()) {
                    out.push((
                        "error".into(),
                        p.display().to_string(),
                        "is not a real directory".into(),
                    ));
                    continue;
                }
                for sub in ["upper", "work"] {
                    match std::fs::symlink_metadata(p.join(sub)) {
                        Ok(m) if m.is_dir() => {}
                        Ok(_) => out.push((
                            "error".into(),
                            p.join(sub).display().to_string(),
                            "is not a real directory (a symlink?)".into(),
                        )),
                        Err(_) => {}
                    }
                }
                if let Ok(m) = std::fs::symlink_metadata(p.join("driver")) {
                    if !m.is_file() || anchor::recorded_driver(&p).is_none() {
                        out.push((
                            "error".into(),
                            p.join("driver").display().to_string(),
                            "is not a driver record".into(),
                        ));
                    }
                }
            } else if n.starts_with(anchor::TRASH_PREFIX) {
                out.push((
                    "warning".into(),
                    p.display().to_string(),
                    "old state left by a reset could not be deleted".into(),
                ));
            } else {
                out.push((
                    "warning".into(),
                    p.display().to_string(),
                    "unexpected entry (not written by Lazaret)".into(),
                ));
            }
        }
    }
    out
}

fn verify(s: Selected, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let finished = anchor::finish_reset(&s.paths.root).map_err(|e| failed("finishing an interrupted reset", e))?;
    let _ = clean_trash(&s)?;
    let keys = keys_on_disk(&s.paths.root);
    let report = walk_all(&s, &keys, false)?;
    let mut findings: Vec<(String, String, String)> = structure_findings(&s.paths.root);
    if s.meta.is_none() {
        findings.push((
            "warning".into(),
            s.paths.root.join(META_FILE).display().to_string(),
            "missing or malformed; the next `lazaret run` writes it".into(),
        ));
    }
    for f in &report.findings {
        findings.push((
            f.level.clone(),
            entry_guest_path(&f.key, &f.path).trim_end_matches('/').to_string(),
            f.message.clone(),
        ));
    }
    let errors = findings.iter().filter(|f| f.0 == "error").count();
    let entries: u64 = report.sizes.iter().map(|s| s.1).sum();
    if json {
        let mut obj = header_json(&s, false);
        obj.push(("ok", Json::Bool(errors == 0)));
        obj.push(("finished_interrupted_reset", Json::Bool(finished)));
        obj.push(("paths", Json::strs(&keys.iter().map(|k| guest(k)).collect::<Vec<_>>())));
        obj.push(("entries", Json::Num(entries as i64)));
        obj.push((
            "findings",
            Json::Arr(
                findings
                    .iter()
                    .map(|(l, p, m)| {
                        Json::Obj(vec![
                            ("level", Json::s(l)),
                            ("path", Json::s(p)),
                            ("message", Json::s(m)),
                        ])
                    })
                    .collect(),
            ),
        ));
        println!("{}", Json::Obj(obj).render());
    } else {
        let mut out = header_human(&s, false);
        if finished {
            out.push_str("finished a reset that was interrupted\n");
        }
        for (l, p, m) in &findings {
            out.push_str(&format!("{l}: {}: {}\n", fit(p, 50), crate::display::escape(m)));
        }
        out.push_str(&format!(
            "{}: {entries} entries in {} persistent path(s), {errors} error(s)\n",
            if errors == 0 { "ok" } else { "FAILED" },
            keys.len()
        ));
        print!("{out}");
    }
    Ok(if errors == 0 { Exit::Success } else { Exit::Problem }.code())
}

fn reset(s: Selected, path: Option<String>, yes: bool, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let finished = anchor::finish_reset(&s.paths.root).map_err(|e| failed("finishing an interrupted reset", e))?;
    let keys = keys_on_disk(&s.paths.root);
    let scope: Vec<String> = match &path {
        None => keys.clone(),
        Some(p) => {
            let k = anchor::path_key(p);
            if !keys.contains(&k) {
                let have: Vec<String> = keys.iter().map(|k| guest(k)).collect();
                return Err(StateError::Usage(format!(
                    "{p} has no persistent state in Domain {}; persistent paths with state: {}",
                    s.id,
                    if have.is_empty() {
                        "none".into()
                    } else {
                        have.join(", ")
                    }
                )));
            }
            vec![k]
        }
    };
    let sizes = statefs::run_helper(
        &s.paths.root,
        None,
        &scope
            .iter()
            .map(|k| Op::Size {
                name: k.clone(),
                in_root: false,
            })
            .collect::<Vec<_>>(),
    )
    .map_err(|e| StateError::Failed(e.to_string()))?;
    let size_of = |k: &str| {
        sizes
            .sizes
            .iter()
            .find(|(n, _, _)| n == k)
            .map_or((0, 0), |s| (s.1, s.2))
    };
    let untouched: Vec<String> = keys.iter().filter(|k| !scope.contains(k)).map(|k| guest(k)).collect();
    if !json || !yes {
        let mut out = header_human(&s, false);
        if finished {
            out.push_str("finished a reset that was interrupted\n");
        }
        out.push_str("reset empties the persistent upper layer of:\n");
        for k in &scope {
            let (n, b) = size_of(k);
            out.push_str(&format!("  {}  ({n} entries, {})\n", guest(k), human_size(b)));
        }
        if scope.is_empty() {
            out.push_str("  (nothing: no persistent path has state)\n");
        }
        out.push_str(&format!(
            "kept: {}the workspace, ignored workspace state\n",
            untouched.iter().map(|u| format!("{u}, ")).collect::<String>()
        ));
        eprint!("{out}");
    }
    if !yes && !confirm("resetting", "reset", "not reset")? {
        return Ok(1);
    }
    let steps = anchor::plan_reset(&scope, &domain::random_id(4));
    if !steps.is_empty() {
        anchor::reset(&s.paths.root, &steps).map_err(|e| failed("reset", e))?;
    }
    let leftovers = clean_trash(&s)?;
    if json {
        let mut obj = header_json(&s, false);
        obj.push(("reset", Json::strs(&scope.iter().map(|k| guest(k)).collect::<Vec<_>>())));
        obj.push(("kept", Json::strs(&untouched)));
        obj.push(("leftovers", Json::strs(&leftovers)));
        println!("{}", Json::Obj(obj).render());
    } else {
        for k in &scope {
            println!("reset {}: empty", guest(k));
        }
        for l in &leftovers {
            println!("warning: could not delete the old state {l}");
        }
    }
    Ok(0)
}

/// `lazaret state unhide`: forgets hidden host identities (the sticky
/// hidden set of ignored paths, docs/git.md) at or below a workspace path,
/// or all of them. The rules still apply at the next start: change them on
/// the host first.
fn unhide(s: Selected, path: Option<PathBuf>, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let file = crate::view::ignored::sticky_file(&s.paths.ignored_dir());
    let entries = crate::view::ignored::read_sticky(&file).map_err(|e| StateError::Failed(e.to_string()))?;
    let rel = path.map(|p| {
        let ws = s.meta.as_ref().map(|m| PathBuf::from(&m.workspace)).unwrap_or_default();
        p.strip_prefix(&ws).map(Path::to_path_buf).unwrap_or(p)
    });
    let (gone, kept): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|e| rel.as_ref().is_none_or(|r| e.rel.starts_with(r)));
    crate::view::ignored::write_sticky(&file, &kept).map_err(|e| StateError::Failed(e.to_string()))?;
    // Un-hiding on purpose also forgets the remembered rules of earlier
    // generations: the next start applies the rules as they are then.
    let hist = crate::view::ignored::rules_history_file(&s.paths.ignored_dir());
    match std::fs::remove_file(&hist) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StateError::Failed(format!("{}: {e}", hist.display()))),
    }
    let names: Vec<String> = gone.iter().map(|e| crate::display::escape_path(&e.rel)).collect();
    if json {
        println!(
            "{}",
            Json::Obj(vec![("domain_id", Json::s(&s.id)), ("unhidden", Json::strs(&names))]).render()
        );
    } else if names.is_empty() {
        println!("nothing hidden there");
    } else {
        for n in &names {
            println!("un-hidden (if the rules no longer ignore it): {n}");
        }
    }
    Ok(0)
}

/// Asks `VERB? [y/N]` on the terminal before a destructive command; without
/// a terminal the command needs `--yes`. False (after saying `declined`)
/// unless the answer is y/yes.
pub fn confirm(doing: &str, verb: &str, declined: &str) -> Result<bool> {
    if !crate::sys::isatty(crate::sys::STDIN) {
        return Err(StateError::Usage(format!(
            "not {doing}: confirm with --yes (stdin is not a terminal)"
        )));
    }
    eprint!("{verb}? [y/N] ");
    let _ = io::stderr().flush();
    let mut line = String::new();
    let _ = io::stdin().lock().read_line(&mut line);
    let yes = matches!(line.trim(), "y" | "Y" | "yes");
    if !yes {
        eprintln!("{declined}");
    }
    Ok(yes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips() {
        let d = std::env::temp_dir().join(format!("lazaret-meta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let m = DomainMeta {
            domain_id: "0123456789abcdef0123".into(),
            profile: "dev".into(),
            workspace: "/home/u/p \"q\"".into(),
            persist: vec!["/usr".into(), "/etc".into()],
            artifact: "abc".into(),
            digest: "sha256:x".into(),
            last_used: 1_700_000_000,
        };
        write_meta(&d, &m).unwrap();
        assert_eq!(read_meta(&d), Some(m));
        std::fs::remove_file(d.join(META_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join(META_FILE)).unwrap();
        assert_eq!(read_meta(&d), None, "never follows a symlink");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn ids_and_times() {
        assert!(is_domain_id("0123456789abcdef0123"));
        assert!(!is_domain_id("../../etc/passwd00000"));
        assert!(!is_domain_id("0123456789ABCDEF0123"));
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(1_700_000_000), "2023-11-14 22:13");
    }
}
