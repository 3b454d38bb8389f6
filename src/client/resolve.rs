//! Resolving the Domain a command names by profile and workspace into
//! [`Resolved`], everything a command needs to know about it, and the
//! config's warnings about broken profiles.

use std::path::{Path, PathBuf};

use crate::client::failure::Failure;
use crate::config;
use crate::domain;
use crate::storage::paths::{self, DomainPaths};

/// Everything a command needs to know about one Domain.
pub(crate) struct Resolved {
    pub(crate) cfg: config::Config,
    pub(crate) profile: config::Profile,
    pub(crate) workspace: PathBuf,
    pub(crate) domain_id: domain::DomainId,
    pub(crate) storage: PathBuf,
    pub(crate) paths: DomainPaths,
    /// Host variables this client passes to its session (never logged).
    pub(crate) pass: Vec<(String, String)>,
    /// `--publish` forwards for a Domain this client starts.
    pub(crate) publish: Vec<crate::config::ports::PortForward>,
    /// `--memory/--pids/--cpus` for a Domain this CLI starts.
    pub(crate) limit_overrides: config::Limits,
    /// `--root`: this client's session runs as root even when the profile
    /// names a `user`.
    pub(crate) root: bool,
    /// The profile's secrets, resolved on this host, for a Domain this CLI
    /// starts (never logged, never in argv or environment).
    pub(crate) secrets: Vec<(String, crate::config::secrets::SecretValue)>,
}

pub(crate) fn resolve(profile: Option<String>, workspace: Option<PathBuf>) -> Result<Resolved, Failure> {
    let cfg = config::load(&config::config_path())?;
    let name = profile.unwrap_or_else(|| "default".into());
    warn_broken_profiles(&cfg, Some(&name));
    let profile = cfg.profile(&name)?.clone();
    let dir = match workspace {
        Some(w) => {
            if !w.exists() {
                return Err(Failure::NoWorkspace(w));
            }
            w
        }
        None => std::env::current_dir().map_err(Failure::CurrentDir)?,
    };
    let workspace = domain::canonical_workspace(&dir)?;
    refuse_home(&workspace)?;
    config::check_location(&cfg.path, &workspace, &profile.volumes)?;
    let storage = paths::storage_root()?;
    let runtime = paths::runtime_root(cfg.runtime_dir.as_deref());
    check_workspace_root(&workspace, &storage, &runtime, &cfg.path)?;
    paths::ensure_private_dir(&storage)?;
    paths::ensure_private_dir(&runtime)?;
    let domain_id = domain::domain_id(&profile.name, &workspace);
    let paths = DomainPaths::new(&storage, &runtime, &domain_id);
    let pass = crate::config::passenv::resolve(&profile.pass_env, &[], |k| std::env::var(k).ok())?;
    Ok(Resolved {
        cfg,
        profile,
        workspace,
        domain_id,
        storage,
        paths,
        pass,
        publish: Vec::new(),
        limit_overrides: config::Limits::default(),
        root: false,
        secrets: Vec::new(),
    })
}

/// The home directory itself as a workspace, said as such (before the
/// config file and storage root it contains are).
fn refuse_home(workspace: &Path) -> Result<(), Failure> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    match home.and_then(|h| h.canonicalize().ok()) {
        Some(h) if h == workspace => Err(Failure::HomeAsWorkspace(workspace.to_path_buf())),
        _ => Ok(()),
    }
}

/// Workspace-root safety (see `domain::check_workspace_root`).
fn check_workspace_root(workspace: &Path, storage: &Path, runtime: &Path, config: &Path) -> Result<(), Failure> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let mut keep: Vec<(&'static str, &Path)> = vec![
        ("the Lazaret storage root", storage),
        ("the Lazaret runtime dir", runtime),
        ("the Lazaret config file", config),
    ];
    if let Some(h) = &home {
        keep.push(("your home directory", h));
    }
    Ok(domain::check_workspace_root(workspace, &keep)?)
}

/// Prints one warning per broken profile other than `except`, once per
/// process.
pub(crate) fn warn_broken_profiles(cfg: &config::Config, except: Option<&str>) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    for w in cfg.warnings(except) {
        eprintln!("lazaret: {w}");
    }
}
