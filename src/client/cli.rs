//! The Client CLI: argument parsing, the public commands, and the client
//! side of a session. Hidden subcommands `__coordinator` and `__supervisor`
//! are Lazaret re-executing itself in its other process roles.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::config::{self, ImageSource};
use crate::coordinator;
use crate::domain;
use crate::storage::image;
use crate::storage::paths::{self, DomainPaths};
use crate::supervisor;
use crate::sys;
use crate::wire::client::{self as wire_client, ClientMsg, ServerMsg};
use crate::wire::codec::{self, FrameReader};

/// Exit codes of Lazaret's own failures (a session's exit status is the
/// sandboxed command's).
pub const EXIT_USAGE: i32 = crate::exit::Exit::Usage.code();
pub const EXIT_FAILURE: i32 = crate::exit::Exit::Failure.code();

const USAGE: &str = "\
usage: lazaret <command> [options]

commands:
  run [-p P] [-w DIR] [-q] [--memory SIZE] [--pids N] [--cpus N]
      [-e KEY[=VALUE]]... [--publish [ADDR:]HOSTPORT:GUESTPORT]... [--root]
      [CMD ARGS...]    open a shell (or run CMD) in the Domain's sandbox;
                       -e passes a host variable to this session only;
                       --publish forwards a host port (127.0.0.1 by default);
                       --root runs as root when the profile names a user
  ps [--json]          list running Domains: ID prefix, age, sessions, ports
  escalations [ID]     escalation requests waiting for a decision, with
                       their full command (a second look from elsewhere)
  stop [ID | --all | -p P -w DIR]
                       stop running Domains (their sessions are told why)
  exec ID [-e KEY[=VALUE]]... [--root] [-- CMD ARGS...]
                       join a running Domain by ID (prefix) from anywhere
  port add ID [ADDR:]HOSTPORT:GUESTPORT
                       forward one more host port to a running Domain
                       (HOSTPORT 0: any free port)
  rm [ID | -p P -w DIR] [--yes] [--json]
                       delete a stopped Domain's state (asks first)
  image build [NAME] [--quiet] [--if-missing]
                       build the default image (debootstrap + umoci), or the
                       recipe [images.NAME] (built-in: dev); an unchanged
                       recipe is not rebuilt
  net show [--profile P] [--workspace DIR] [--json]
                       the Domain's derived network policy and readiness
  net log [--profile P] [--workspace DIR] [--json]
                       egress refusals by name (allow-by-name mode), newest
                       first, and the hosts line that would allow them
  image list [--json]  list prepared lowers, their leases and foreign dirs
  image prune [--dry-run] [--all] [--json]
                       delete prepared lowers no Domain leases (the lowers
                       of images a profile uses stay unless --all) and
                       interrupted builds
  state list [--json]  list Domains with persistent state
  state inspect|verify [DOMAIN] [--json]
                       show persistent changes (metadata only) / check them
  state reset [DOMAIN] (--path P | --all) [--yes] [--json]
                       empty persistent state (asks first unless --yes)
  state unhide [DOMAIN] (--path P | --all) [--json]
                       forget hidden ignored host files (docs/git.md)
                       DOMAIN: [--profile P] [--workspace DIR] | --domain ID
  doctor [--json]      check host prerequisites and print fixes
  version              print the version (also -V, --version)
  help [CMD]           this text, or CMD's usage (also CMD --help)

options may be written --opt=value; -p, -w and -q stand for --profile,
--workspace and --quiet
";

/// A failure of the CLI: a message and an exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub msg: String,
}

impl Failure {
    pub(crate) fn usage(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_USAGE,
            msg: msg.into(),
        }
    }
    pub(crate) fn runtime(msg: impl Into<String>) -> Failure {
        Failure {
            code: EXIT_FAILURE,
            msg: msg.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

macro_rules! usage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure { Failure::usage(e.to_string()) }
        }
    )*};
}
impl From<crate::storage::state::StateError> for Failure {
    fn from(e: crate::storage::state::StateError) -> Failure {
        Failure {
            code: e.code(),
            msg: e.to_string(),
        }
    }
}

usage_from!(
    config::ConfigError,
    config::passenv::PassEnvError,
    config::ports::PortError,
    domain::DomainError,
    paths::PathError,
    pico_args::Error
);

pub fn main() -> i32 {
    // Every helper (debootstrap's chroot, newuidmap, ip, ...) is found on
    // one PATH: the caller's plus the sbin directories.
    crate::sys::hostenv::set_helper_path();
    let mut raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let cmd = raw.first().and_then(|a| a.to_str()).map(String::from);
    if cmd.is_some() {
        raw.remove(0);
    }
    if let Some(code) = public_preamble(cmd.as_deref(), &raw) {
        return code;
    }
    // The internal roles log to stderr (the coordinator log file).
    if matches!(cmd.as_deref(), Some("__coordinator") | Some("__supervisor")) {
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
            .format_timestamp_millis()
            .init();
    }
    let result = match cmd.as_deref() {
        Some("run") => cmd_run(raw),
        Some("ps") => crate::client::lifecycle::cmd_ps(raw),
        Some("escalations") => crate::client::lifecycle::cmd_escalations(raw),
        Some("stop") => crate::client::lifecycle::cmd_stop(raw),
        Some("rm") => crate::client::lifecycle::cmd_rm(raw),
        Some("exec") => crate::client::lifecycle::cmd_exec(raw),
        Some("port") => crate::client::lifecycle::cmd_port(raw),
        Some("image") => cmd_image(raw),
        Some("doctor") => cmd_doctor(raw),
        Some("net") => cmd_net(raw),
        Some("state") => refuse_root().and_then(|()| crate::storage::state::cmd(raw).map_err(Failure::from)),
        Some("version") | Some("--version") | Some("-V") => {
            println!("lazaret {}", env!("CARGO_PKG_VERSION"));
            if cfg!(feature = "fault-injection") {
                println!("built with fault-injection (LAZARET_FAULT): for tests only");
            }
            Ok(0)
        }
        Some("help") | Some("--help") | Some("-h") => match raw.first().and_then(|a| a.to_str()) {
            None => {
                print!("{USAGE}");
                Ok(0)
            }
            Some(c) => match crate::client::usage::of(c) {
                Some(u) => {
                    print!("{u}");
                    Ok(0)
                }
                None => Err(Failure::usage(format!("unknown command {c:?}: see `lazaret help`"))),
            },
        },
        Some("__coordinator") => internal_coordinator(raw),
        Some("__supervisor") => internal_supervisor(raw),
        Some("__state-helper") => Ok(crate::storage::statefs::helper_main(raw)),
        Some(other) => Err(Failure::usage(format!("unknown command {other:?}: see `lazaret help`"))),
        None => Err(Failure::usage(format!("a command is required\n{USAGE}"))),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            restore_terminal();
            let f = plain_failure(f);
            eprintln!("lazaret: {}", f.msg);
            f.code
        }
    }
}

/// The one place a failure's message and exit code are settled before they
/// are shown: a full disk under the storage root or the runtime dir is
/// said as "no space left on DEVICE (PATH)" whatever step hit it.
fn plain_failure(f: Failure) -> Failure {
    if f.code == EXIT_USAGE {
        return f;
    }
    let mut roots = Vec::new();
    if let Ok(s) = paths::storage_root() {
        roots.push(s);
    }
    if let Ok(cfg) = config::load(&config::config_path()) {
        roots.push(paths::runtime_root(cfg.runtime_dir.as_deref()));
    }
    let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
    Failure {
        code: f.code,
        msg: crate::storage::nospace::explain(&f.msg, &refs),
    }
}

pub(crate) fn finish_args(args: pico_args::Arguments) -> Result<(), Failure> {
    let rest = args.finish();
    if let Some(a) = rest.first() {
        return Err(Failure::usage(format!(
            "unknown argument {:?}: see `lazaret help`",
            a.to_string_lossy()
        )));
    }
    Ok(())
}

/// The command after `--` as strings; an argument that is not UTF-8 is
/// bad input.
pub(crate) fn utf8_argv(cmd: Vec<std::ffi::OsString>) -> Result<Vec<String>, Failure> {
    cmd.into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| Failure::usage(format!("argument {a:?} is not UTF-8")))
        })
        .collect()
}

/// Lazaret never runs a sandbox as host root.
pub(crate) fn refuse_root() -> Result<(), Failure> {
    if sys::geteuid() == 0 || sys::getuid() == 0 {
        return Err(Failure::usage(
            "refusing to run as root: Lazaret runs sandboxes rootless; run it as your normal user \
             (scripts/lazaret-here does this for you under sudo)",
        ));
    }
    Ok(())
}

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
                return Err(Failure::usage(format!(
                    "workspace {} does not exist: pass an existing directory to --workspace",
                    w.display()
                )));
            }
            w
        }
        None => {
            std::env::current_dir().map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?
        }
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
        Some(h) if h == workspace => Err(Failure::usage(format!(
            "{} is your home directory: a workspace is one project's directory (the sandbox would read and \
             write all of your home, your config and Lazaret's own state); cd into a project, or pass -w DIR",
            workspace.display()
        ))),
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

/// `--memory SIZE`, `--pids N`, `--cpus N` of `lazaret run`.
fn limit_flags(args: &mut pico_args::Arguments) -> Result<config::Limits, Failure> {
    let mut l = config::Limits::default();
    if let Some(v) = args.opt_value_from_str::<_, String>("--memory")? {
        l.memory = Some(config::parse_size(&v).ok().filter(|m| *m >= 64 << 20).ok_or_else(|| {
            Failure::usage(format!(
                "--memory {v:?}: expected a size of at least 64MiB like \"4GiB\""
            ))
        })?);
    }
    if let Some(v) = args.opt_value_from_str::<_, String>("--pids")? {
        l.pids = Some(
            v.parse::<u64>()
                .ok()
                .filter(|n| (32..=4_194_304).contains(n))
                .ok_or_else(|| Failure::usage(format!("--pids {v:?}: expected an integer between 32 and 4194304")))?,
        );
    }
    if let Some(v) = args.opt_value_from_str::<_, String>("--cpus")? {
        l.cpu_millis = Some(config::parse_cpus(&v).map_err(|e| Failure::usage(format!("--cpus {v:?}: expected {e}")))?);
    }
    Ok(l)
}

/// Explicit limits need a cgroup mechanism: refuse (exit 2) with the fix
/// when there is none, before anything starts.
fn check_limits(r: &Resolved) -> Result<(), Failure> {
    let explicit = r.profile.limits.explicit() || r.limit_overrides.explicit();
    if !explicit {
        return Ok(());
    }
    match crate::storage::cgroup::detect() {
        crate::storage::cgroup::Mechanism::Unavailable { why, fix } => Err(Failure::usage(format!(
            "profile {:?} sets resource limits but they cannot be enforced here: {why}. Fix: {fix} (see `lazaret doctor`)",
            r.profile.name
        ))),
        _ => Ok(()),
    }
}

// ---- run ------------------------------------------------------------------------

fn cmd_run(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let (opts, cmd) = crate::client::usage::split_run(raw);
    let mut args = pico_args::Arguments::from_vec(opts);
    let profile: Option<String> = args.opt_value_from_str(["-p", "--profile"])?;
    let workspace: Option<PathBuf> = args.opt_value_from_str(["-w", "--workspace"])?;
    let quiet = args.contains(["-q", "--quiet"]);
    let overrides = limit_flags(&mut args)?;
    let env_flags: Vec<String> = args.values_from_str(["-e", "--env"])?;
    let publish: Vec<String> = args.values_from_str("--publish")?;
    let as_root = args.contains("--root");
    finish_args(args)?;
    let publish = publish
        .iter()
        .map(|p| {
            p.parse::<crate::config::ports::PortForward>()
                .map_err(|e| Failure::usage(format!("--publish {:?}: expected {e}", crate::display::escape(p))))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let argv = utf8_argv(cmd)?;
    refuse_root()?;
    let mut r = resolve(profile, workspace)?;
    r.pass = crate::config::passenv::resolve(&r.profile.pass_env, &env_flags, |k| std::env::var(k).ok())?;
    crate::config::ports::merge(&r.profile.ports, &publish)?;
    r.publish = publish;
    r.root = as_root;
    r.limit_overrides = overrides;
    check_limits(&r)?;
    // A network policy the config cannot yield is bad input too.
    crate::net::policy::derive(&r.cfg.path, r.cfg.default_deny.as_deref(), &r.profile, &[])
        .map_err(|e| Failure::usage(e.to_string()))?;
    preflight(&r)?;
    r.secrets = crate::client::secrets::check_start(&r)?;
    // A missing image is bad input, reported before anything starts; a
    // published Domain already runs on its prepared lower and needs none.
    if matches!(r.profile.image, ImageSource::Default)
        && !image::images_dir(&r.storage).join("default/index.json").exists()
        && !r.paths.socket().exists()
    {
        return Err(Failure::usage(format!(
            "the default image is not built yet: run `lazaret image build` (it goes to {})",
            image::images_dir(&r.storage).join("default").display()
        )));
    }
    if let ImageSource::Named(n) = &r.profile.image {
        if !image::images_dir(&r.storage).join(n).join("index.json").exists() {
            return Err(Failure::usage(format!(
                "the image {n} of profile {} is not built yet: run `lazaret image build {n}`",
                r.profile.name
            )));
        }
    }
    // A connection that closes before Welcome opened nothing: the Domain
    // was going down as we joined. Start over (a bounded number of times).
    for _ in 0..5 {
        let stream = connect_or_start(&r, quiet)?;
        crate::client::lifecycle::check_published(&r)?;
        match session(stream, &r, argv.clone())? {
            Outcome::Exited(code) => return Ok(code),
            Outcome::Retry => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Err(Failure::runtime("the Domain kept stopping while joining it; try again"))
}

pub(crate) enum Outcome {
    Exited(i32),
    Retry,
}

/// Joins the published coordinator, or becomes the one that starts it by
/// winning the Domain lock. Losers wait for publication.
fn connect_or_start(r: &Resolved, quiet: bool) -> Result<UnixStream, Failure> {
    r.paths.ensure()?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut progress = image::Progress::new(quiet);
    let mut waited = false;
    loop {
        match UnixStream::connect(r.paths.socket()) {
            Ok(s) => return Ok(s),
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => {}
            Err(e) => {
                return Err(Failure::runtime(format!(
                    "cannot connect to {}: {e}",
                    r.paths.socket().display()
                )))
            }
        }
        // A coordinator that just stopped removes the runtime dir.
        r.paths.ensure()?;
        if let Some(lock) = try_domain_lock(&r.paths.lock())? {
            check_disk(r)?;
            warn_unlimited(r, quiet);
            start_coordinator(r, lock, &mut progress)?;
            continue;
        }
        if Instant::now() > deadline {
            return Err(Failure::runtime(
                "the Domain is locked by another lazaret but was never published: \
                 check `lazaret ps`, or stop the other process",
            ));
        }
        if !waited {
            progress.step("waiting for the Domain to start");
            waited = true;
        }
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// The Domain lock, if we win it on the file that is still at its path.
fn try_domain_lock(path: &Path) -> Result<Option<File>, Failure> {
    domain::try_lock(path).map_err(|e| Failure::runtime(e.to_string()))
}

/// The profile's `disk` cap on persisted state, checked at each start
/// (rootless quotas are not available: this is the enforcement point).
fn check_disk(r: &Resolved) -> Result<(), Failure> {
    if r.profile.limits.disk.is_none() {
        return Ok(());
    }
    let used = crate::storage::cgroup::persisted_use(&r.paths.root);
    match crate::storage::cgroup::disk_verdict(used, r.profile.limits.disk, &r.profile.name) {
        crate::storage::cgroup::DiskVerdict::Ok => Ok(()),
        crate::storage::cgroup::DiskVerdict::Warn(m) => {
            eprintln!("lazaret: warning: {m}");
            Ok(())
        }
        crate::storage::cgroup::DiskVerdict::Refuse(m) => Err(Failure::runtime(m)),
    }
}

/// Once per Domain start, unless quiet: nothing bounds the sandbox here.
/// One line; the fix is `lazaret doctor`'s.
fn warn_unlimited(r: &Resolved, quiet: bool) {
    if quiet {
        return;
    }
    if let crate::storage::cgroup::Mechanism::Unavailable { why, .. } = crate::storage::cgroup::detect() {
        eprintln!(
            "lazaret: warning: no resource limits for Domain {} ({}); `lazaret doctor` says how to enable them",
            r.domain_id.short(),
            why.split(';').next().unwrap_or(&why).trim()
        );
    }
}

fn start_coordinator(r: &Resolved, lock: File, progress: &mut image::Progress) -> Result<(), Failure> {
    let t0 = crate::trace::now_us();
    let exe = std::env::current_exe().map_err(|e| Failure::runtime(format!("cannot locate lazaret: {e}")))?;
    let (start_rd, start_wr) = sys::pipe().map_err(|e| Failure::runtime(format!("pipe: {e}")))?;
    let log = coordinator::open_log(&r.paths.log())
        .map_err(|e| Failure::runtime(format!("cannot open {}: {e}", r.paths.log().display())))?;
    // The profile's secrets reach the coordinator on a pipe of their own.
    let secrets_pipe = if r.secrets.is_empty() {
        None
    } else {
        Some(sys::pipe().map_err(|e| Failure::runtime(format!("pipe: {e}")))?)
    };
    let mut cmd = Command::new(exe);
    cmd.arg0("lazaret:[coordinator]")
        .arg("__coordinator")
        .args(secrets_pipe.as_ref().map(|_| "--secrets"))
        .arg("--profile")
        .arg(&r.profile.name)
        .arg("--workspace")
        .arg(&r.workspace)
        .arg("--config")
        .arg(&r.cfg.path)
        .args(r.publish.iter().flat_map(|p| ["--publish".to_string(), p.to_string()]))
        .args(crate::storage::cgroup::override_args(&r.limit_overrides))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        // Only what Lazaret and its helpers read: passed keys and the rest
        // of the caller's environment stay out of long-lived processes.
        .env_clear()
        .envs(crate::config::passenv::coordinator_env(std::env::vars_os(), &r.pass));
    let (l, s) = (lock.as_raw_fd(), start_wr.as_raw_fd());
    let mut fds = vec![(l, coordinator::LOCK_FD), (s, coordinator::START_FD)];
    if let Some((rd, _)) = &secrets_pipe {
        fds.push((rd.as_raw_fd(), coordinator::SECRETS_FD));
    }
    // The extra fork detaches the coordinator so it is never our zombie.
    sys::ChildSetup::new()
        .reset_signals()
        .setsid()
        .install_fds(&fds)
        // Nothing the caller left open (a lock, a pipe someone waits
        // on) may live on in the coordinator and its helpers.
        .close_fds_from(3, &fds.iter().map(|(_, to)| *to).collect::<Vec<_>>())
        .detach()
        .apply(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| Failure::runtime(format!("cannot start the coordinator: {e}")))?;
    let writer = secrets_pipe.map(|(rd, wr)| {
        drop(rd);
        crate::client::secrets::send(&r.secrets, wr)
    });
    let _ = child.wait();
    drop(start_wr);
    drop(lock);
    let mut start = crate::wire::start::StartReceiver::new(File::from(start_rd));
    let result = start.wait_for_ready(|p| progress.step(p));
    progress.done();
    if result.is_ok() && std::env::var_os(crate::trace::ENV).is_some_and(|v| v == "1") {
        let log = std::fs::read_to_string(r.paths.log()).unwrap_or_default();
        eprint!(
            "lazaret: startup trace (ms since the start began, step time)\n{}",
            crate::trace::render(&log, t0)
        );
    }
    // Written by now, or the coordinator is gone (the write failed).
    if let Some(w) = writer {
        let _ = w.join();
    }
    match result {
        Ok(()) => Ok(()),
        Err(crate::wire::start::StartError::Failed(e)) => Err(Failure::runtime(e)),
        Err(crate::wire::start::StartError::Read(e)) => Err(Failure::runtime(format!(
            "the coordinator exited during startup{}; see {}",
            match e {
                codec::ReadError::Closed => String::new(),
                e => format!(" ({e})"),
            },
            r.paths.log().display()
        ))),
    }
}

// The terminal mode to restore on every exit path, including a panic.
static SAVED_TERM: Mutex<Option<sys::TermMode>> = Mutex::new(None);

fn restore_terminal() {
    if let Ok(mut g) = SAVED_TERM.lock() {
        if let Some(m) = g.take() {
            m.restore();
        }
    }
}

fn hello(r: &Resolved) -> ClientMsg {
    ClientMsg::Hello {
        version: wire_client::PROTOCOL_VERSION,
        client_id: domain::random_id(8),
        profile: r.profile.name.clone(),
        fingerprint: config::join_fingerprint(&r.cfg, &r.profile),
    }
}

pub(crate) fn session(mut stream: UnixStream, r: &Resolved, argv: Vec<String>) -> Result<Outcome, Failure> {
    let tty = sys::isatty(sys::STDIN) && sys::isatty(sys::STDOUT);
    let size = if tty {
        sys::get_winsize(sys::STDIN).or_else(|| sys::get_winsize(sys::STDOUT))
    } else {
        None
    };
    let mut env = Vec::new();
    if let Ok(t) = std::env::var("TERM") {
        env.push(("TERM".to_string(), t));
    }
    env.extend(r.pass.iter().cloned());
    let cwd = std::env::current_dir()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string();
    if codec::send(&mut stream, &hello(r)).is_err() {
        return Ok(Outcome::Retry);
    }
    let open = ClientMsg::Open {
        argv,
        env,
        cwd,
        tty: if tty {
            Some(
                size.map_or(wire_client::WinSize { rows: 24, cols: 80 }, |w| wire_client::WinSize {
                    rows: w.rows,
                    cols: w.cols,
                }),
            )
        } else {
            None
        },
        root: r.root,
    };
    if codec::send(&mut stream, &open).is_err() {
        return Ok(Outcome::Retry);
    }
    let mut reader = FrameReader::default();
    match reader.recv::<ServerMsg>(&mut stream) {
        Ok(ServerMsg::Welcome { .. }) => {}
        Ok(ServerMsg::Refused { reason }) => return Err(Failure::usage(reason)),
        Ok(other) => {
            return Err(Failure::runtime(format!(
                "unexpected reply from the coordinator ({})",
                crate::wire::UnexpectedMessage::of("Welcome", &other)
            )))
        }
        // Closed (or reset) before Welcome: the Domain was stopping.
        Err(codec::ReadError::Closed) => return Ok(Outcome::Retry),
        Err(codec::ReadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(Outcome::Retry),
        Err(e) => return Err(Failure::runtime(format!("the coordinator closed the session: {e}"))),
    }
    let signals = sys::signal_pipe(&[
        sys::SIGWINCH,
        sys::SIGINT,
        sys::SIGQUIT,
        sys::SIGTSTP,
        sys::SIGTERM,
        sys::SIGHUP,
    ])
    .map_err(|e| Failure::runtime(format!("signal pipe: {e}")))?;
    if tty {
        let mode =
            sys::TermMode::make_raw(sys::STDIN).map_err(|e| Failure::runtime(format!("cannot set raw mode: {e}")))?;
        *SAVED_TERM.lock().unwrap() = Some(mode);
        std::panic::set_hook(Box::new(|info| {
            restore_terminal();
            eprintln!("lazaret: internal error: {info}");
        }));
    }
    let code = pump(&mut stream, &mut reader, signals.as_fd(), tty);
    restore_terminal();
    code.map(Outcome::Exited)
}

/// What the client's session loop waits on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PumpEvent {
    Coordinator,
    Signals,
    Stdin,
}

/// Moves bytes between the terminal and the coordinator until the session
/// ends. Returns the session's exit status.
fn pump(stream: &mut UnixStream, reader: &mut FrameReader, signals: BorrowedFd<'_>, tty: bool) -> Result<i32, Failure> {
    let mut stdin_open = true;
    let mut term = Terminal::default();
    let mut buf = vec![0u8; wire_client::MAX_DATA_CHUNK];
    loop {
        // Frames read ahead with Welcome (or in one read with others) are
        // acted on before waiting for more: poll cannot see them.
        if let Some(code) = drain_frames(stream, reader, &mut term, tty)? {
            return Ok(code);
        }
        let mut fds = sys::PollSet::new();
        fds.read(&*stream, PumpEvent::Coordinator);
        fds.read(signals, PumpEvent::Signals);
        if stdin_open {
            fds.read(sys::STDIN, PumpEvent::Stdin);
        }
        fds.wait(None).map_err(|e| Failure::runtime(format!("poll: {e}")))?;
        if fds.is_readable(PumpEvent::Signals) {
            for sig in sys::drain_signals(signals) {
                if sig == sys::SIGWINCH {
                    // A prompt on screen is drawn again for the new size.
                    if let Some(d) = term.redraw() {
                        let _ = codec::send(stream, &d);
                    }
                }
                let msg = match sig {
                    sys::SIGWINCH => sys::get_winsize(sys::STDIN).map(|w| {
                        ClientMsg::Resize(wire_client::WinSize {
                            rows: w.rows,
                            cols: w.cols,
                        })
                    }),
                    sys::SIGTERM | sys::SIGHUP => {
                        restore_terminal();
                        return Ok(128 + sig);
                    }
                    s => Some(ClientMsg::Signal(s as u8)),
                };
                if let Some(m) = msg {
                    let _ = codec::send(stream, &m);
                }
            }
        }
        if stdin_open && fds.is_readable(PumpEvent::Stdin) {
            match sys::read(sys::STDIN, &mut buf) {
                Ok(0) => {
                    stdin_open = false;
                    let _ = codec::send(stream, &ClientMsg::StdinEof);
                }
                Ok(n) => match term.prompt.as_mut() {
                    // Keystrokes answer the prompt; none reach the sandbox.
                    Some(p) => {
                        if let Some(decision) = p.feed(&buf[..n]) {
                            let _ = codec::send(stream, &decision);
                            term.end_prompt();
                        }
                    }
                    None => {
                        let _ = codec::send(stream, &ClientMsg::Stdin(buf[..n].to_vec()));
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    stdin_open = false;
                    let _ = codec::send(stream, &ClientMsg::StdinEof);
                }
            }
        }
        if fds.is_readable(PumpEvent::Coordinator) {
            let filled = reader.fill(stream);
            // Everything already received is shown before end-of-file is
            // reported: the Exit frame may be in the same read as the EOF.
            if let Some(code) = drain_frames(stream, reader, &mut term, tty)? {
                return Ok(code);
            }
            if let Err(e) = filled {
                restore_terminal();
                return Err(Failure::runtime(format!(
                    "lost the connection to the coordinator ({e}); the session is gone"
                )));
            }
        }
    }
}

/// The developer's terminal as the session pump sees it: while a prompt is
/// up the terminal is the prompt's. Session output that arrives meanwhile
/// (the coordinator sends none; this is the second line of defence) waits
/// here and is written once the prompt is decided or ended.
#[derive(Default)]
struct Terminal {
    prompt: Option<Prompt>,
    /// Output held while a prompt is up: (stderr?, bytes).
    held: Vec<(bool, Vec<u8>)>,
}

impl Terminal {
    /// Writes session output, or holds it while a prompt is up. `Err` is
    /// the EPIPE of a closed stdout.
    fn output(&mut self, err: bool, data: Vec<u8>) -> Result<(), ()> {
        if self.prompt.is_some() {
            self.held.push((err, data));
            return Ok(());
        }
        if err {
            let _ = sys::write_all(sys::STDERR, &data);
            return Ok(());
        }
        match sys::write_all(sys::STDOUT, &data) {
            Err(e) if e.raw_os_error() == Some(sys::EPIPE) => Err(()),
            _ => Ok(()),
        }
    }

    /// The prompt is over: what was held goes out now, after it.
    fn end_prompt(&mut self) {
        self.prompt = None;
        for (err, data) in std::mem::take(&mut self.held) {
            let _ = self.output(err, data);
        }
    }

    /// Shows a prompt, or refuses it when the terminal cannot show it in
    /// full: the decision to send then.
    fn show(&mut self, info: wire_client::PromptInfo) -> Option<ClientMsg> {
        let (p, refused) = Prompt::show(info);
        self.prompt = p;
        if refused.is_some() {
            self.end_prompt();
        }
        refused
    }

    /// The terminal was resized: the prompt is drawn again for its size.
    fn redraw(&mut self) -> Option<ClientMsg> {
        let old = self.prompt.take()?;
        let refused = self.show(old.info);
        if let Some(p) = self.prompt.as_mut() {
            p.resume(old.stage);
        }
        refused
    }
}

/// Acts on every whole frame buffered in `reader`. `Some(code)` once the
/// session's Exit frame is read.
fn drain_frames(
    stream: &mut UnixStream,
    reader: &mut FrameReader,
    term: &mut Terminal,
    tty: bool,
) -> Result<Option<i32>, Failure> {
    loop {
        match reader.next::<ServerMsg>() {
            Ok(Some(ServerMsg::Stdout(d))) => {
                // Our reader is gone (`lazaret run -- yes | head -1`): end
                // as a shell pipeline member does, 128+SIGPIPE; the
                // coordinator ends the session when we leave.
                if term.output(false, d).is_err() {
                    restore_terminal();
                    return Ok(Some(crate::exit::Exit::ClosedPipe.code()));
                }
            }
            Ok(Some(ServerMsg::Stderr(d))) => {
                let _ = term.output(true, d);
            }
            Ok(Some(ServerMsg::Exit { code })) => {
                term.end_prompt();
                return Ok(Some(code));
            }
            Ok(Some(ServerMsg::Prompt(info))) => {
                if let Some(d) = term.show(info) {
                    let _ = codec::send(stream, &d);
                }
            }
            Ok(Some(ServerMsg::PromptEnd { request_id, text })) => {
                let _ = sys::write_all(sys::STDOUT, text.as_bytes());
                if term.prompt.as_ref().is_some_and(|p| p.info.request_id == request_id) {
                    term.end_prompt();
                }
            }
            Ok(Some(ServerMsg::Closing { reason })) => {
                term.end_prompt();
                restore_terminal();
                if tty {
                    eprint!("\r\n");
                }
                return Err(Failure::runtime(format!("session closed: {reason}")));
            }
            Ok(Some(other)) => {
                return Err(Failure::runtime(format!(
                    "unexpected message from the coordinator: {}",
                    codec::Message::name(&other)
                )))
            }
            Ok(None) => return Ok(None),
            Err(e) => return Err(Failure::runtime(format!("bad frame from the coordinator: {e}"))),
        }
    }
}

// ---- image / doctor ------------------------------------------------------------------

fn cmd_image(mut raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    match sub.as_ref().and_then(|s| s.to_str()) {
        Some("build") => {
            let mut args = pico_args::Arguments::from_vec(raw);
            let quiet = args.contains(["-q", "--quiet"]);
            let if_missing = args.contains("--if-missing");
            let name: Option<String> = args.opt_free_from_str()?;
            finish_args(args)?;
            refuse_root()?;
            if let Some(name) = name.filter(|n| n != "default") {
                return crate::client::lifecycle::build_recipe(&name, quiet, if_missing);
            }
            let storage = paths::storage_root()?;
            paths::ensure_private_dir(&storage)?;
            let layout = image::images_dir(&storage).join("default");
            if if_missing && layout.join("index.json").exists() {
                return Ok(0);
            }
            let mut progress = image::Progress::new(quiet);
            let digest = image::build_default(&storage, &mut progress).map_err(|e| Failure::runtime(e.to_string()))?;
            if !quiet {
                println!("built the default image {digest}");
            }
            Ok(0)
        }
        Some(sub @ ("list" | "prune")) => {
            let mut args = pico_args::Arguments::from_vec(raw);
            let json = args.contains("--json");
            let dry_run = sub == "prune" && args.contains("--dry-run");
            let all = sub == "prune" && args.contains("--all");
            finish_args(args)?;
            refuse_root()?;
            let r = if sub == "list" {
                crate::storage::gc::cmd_list(json)
            } else {
                crate::storage::gc::cmd_prune(json, dry_run, all)
            };
            r.map_err(Failure::from)
        }
        Some(other) => Err(Failure::usage(format!(
            "unknown image command {other:?}: expected build, list or prune"
        ))),
        None => Err(Failure::usage("`lazaret image` needs a command: build, list or prune")),
    }
}

fn cmd_net(mut raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    let sub = sub.as_ref().and_then(|s| s.to_str());
    if sub != Some("show") && sub != Some("log") {
        return Err(Failure::usage("`lazaret net` needs a command: show or log"));
    }
    let mut args = pico_args::Arguments::from_vec(raw);
    let profile: Option<String> = args.opt_value_from_str(["-p", "--profile"])?;
    let workspace: Option<PathBuf> = args.opt_value_from_str(["-w", "--workspace"])?;
    let json = args.contains("--json");
    finish_args(args)?;
    let r = resolve(profile, workspace)?;
    if sub == Some("log") {
        let run = r.paths.gen_dir();
        let run = run.parent().unwrap_or(&run);
        return Ok(crate::net::show::log(
            &r.cfg,
            &r.profile,
            r.domain_id.as_str(),
            run,
            json,
        ));
    }
    let published = r.paths.socket().exists();
    crate::net::show::show(
        &r.cfg,
        &r.profile,
        r.domain_id.as_str(),
        &r.workspace,
        &r.paths.gen_dir(),
        published,
        json,
    )
    .map_err(|e| Failure::usage(e.to_string()))
}

/// Before a public command runs: `CMD --help` prints its usage (exit 0);
/// commands that only print get the default SIGPIPE, so `| head` ends them
/// quietly (status 141) instead of a panic on EPIPE; the config's broken
/// profiles are named once for commands that need no profile.
fn public_preamble(cmd: Option<&str>, raw: &[std::ffi::OsString]) -> Option<i32> {
    let cmd = cmd?;
    if matches!(cmd, "-h" | "--help" | "-V" | "--version") {
        sigpipe_default();
        return None;
    }
    let usage = crate::client::usage::of(cmd)?;
    let opts: &[std::ffi::OsString] = if cmd == "run" {
        &crate::client::usage::split_run(raw.to_vec()).0
    } else if cmd == "exec" {
        // `exec ID -- CMD --help` asks CMD.
        &raw[..raw.iter().position(|a| a == "--").unwrap_or(raw.len())]
    } else {
        raw
    };
    if cmd != "help" && crate::client::usage::wants_help(opts) {
        sigpipe_default();
        print!("{usage}");
        return Some(0);
    }
    if cmd != "run" {
        sigpipe_default();
    }
    if matches!(cmd, "image" | "state") {
        if let Ok(cfg) = config::load(&config::config_path()) {
            warn_broken_profiles(&cfg, None);
        }
    }
    None
}

/// The default action for SIGPIPE: a closed reader ends the process the
/// way it ends `cat` (Rust ignores SIGPIPE, and `println!` then panics on
/// EPIPE, which the release profile turns into an abort).
fn sigpipe_default() {
    sys::default_signal(sys::SIGPIPE);
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

/// Bad input a `run` can be refused for before anything starts (exit 2): a
/// volume whose host path does not exist, an image path that is not there.
fn preflight(r: &Resolved) -> Result<(), Failure> {
    if let Some(v) = crate::plan::guest::missing_volume(&r.profile.volumes) {
        return Err(Failure::usage(format!(
            "{}: profile {:?}: volume host path {} (for {}) does not exist: create it or fix `volumes`",
            r.cfg.path.display(),
            r.profile.name,
            v.host.display(),
            v.guest
        )));
    }
    // Where a volume may be mounted is known once the lower exists (the
    // coordinator checks again after preparing it).
    if matches!(r.profile.image, ImageSource::Default) && !r.profile.volumes.is_empty() {
        let layout = image::images_dir(&r.storage).join("default");
        if let Ok(digest) = image::manifest_digest(&layout, image::DEFAULT_TAG) {
            let rootfs = image::lowers_dir(&r.storage)
                .join(image::artifact_id(&digest))
                .join("rootfs");
            if rootfs.is_dir() {
                crate::plan::guest::check_volume_targets(&rootfs, &r.profile.volumes, &r.profile.persist).map_err(
                    |e| Failure::usage(format!("{}: profile {:?}: {e}", r.cfg.path.display(), r.profile.name)),
                )?;
            }
        }
    }
    match &r.profile.image {
        ImageSource::Oci { path, .. } if !path.join("index.json").is_file() => Err(Failure::usage(format!(
            "{}: profile {:?}: image {}: {} is not an OCI layout (no index.json): fix `image`",
            r.cfg.path.display(),
            r.profile.name,
            r.profile.image,
            path.display()
        ))),
        ImageSource::DockerArchive(file) if !file.is_file() => Err(Failure::usage(format!(
            "{}: profile {:?}: image {}: {} is not a file: fix `image`",
            r.cfg.path.display(),
            r.profile.name,
            r.profile.image,
            file.display()
        ))),
        _ => Ok(()),
    }
}

fn cmd_doctor(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    finish_args(args)?;
    Ok(crate::client::doctor::run(json))
}

// ---- internal roles ------------------------------------------------------------------------

fn internal_coordinator(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let a = coordinator::Args {
        profile: args.value_from_str("--profile")?,
        workspace: args.value_from_str("--workspace")?,
        config: args.value_from_str("--config")?,
        publish: args.values_from_str("--publish")?,
        limits: crate::storage::cgroup::coordinator_overrides(&mut args)?,
        secrets: args.contains("--secrets"),
        secret_values: Vec::new(),
    };
    finish_args(args)?;
    Ok(coordinator::main(a))
}

fn internal_supervisor(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let runsc_root: PathBuf = args.value_from_str("--runsc-root")?;
    let a = supervisor::Args {
        runsc_args: crate::plan::runsc_global_args(&runsc_root),
        runsc_root,
        bundle: args.value_from_str("--bundle")?,
        container_id: args.value_from_str("--id")?,
        net_plan: args.opt_value_from_str("--net-plan")?,
        views: args.opt_value_from_str("--views")?,
        anchor_plan: args.opt_value_from_str("--anchor-plan")?,
        scratch: args.opt_value_from_str("--scratch")?,
        meminfo: args.opt_value_from_str("--meminfo")?,
        mailbox_requests: args.opt_value_from_str("--mailbox-requests")?,
        secrets: args.contains("--secrets"),
        disk_cap: args.opt_value_from_str("--disk-cap")?,
        disk_used: args.opt_value_from_str("--disk-used")?.unwrap_or(0),
        disk_tmp: args.opt_value_from_str("--disk-tmp")?,
        scratch_size: args.opt_value_from_str("--scratch-size")?,
    };
    finish_args(args)?;
    Ok(supervisor::main(a))
}

/// An escalation prompt being answered in the developer's terminal (raw
/// mode). Only deliberate answers count: typeahead is flushed when the
/// prompt is drawn and keystrokes in the next [`PROMPT_GRACE`] are
/// discarded, and the line they began is no answer (the sandbox sees what
/// is typed to it, so it can time the prompt to appear in the middle of a
/// line that ends in `yes`); an answer is a whole line that is exactly `y`/`yes`,
/// `n`/`no` or `e`/`edit`, anything else asks again; an edited command is
/// shown in full and needs its own `yes`. Ctrl-C denies.
struct Prompt {
    info: wire_client::PromptInfo,
    /// Keystrokes read before this instant are discarded.
    ignore_until: Instant,
    stage: PromptStage,
    line: String,
    /// Keys were discarded in the grace and the last was not Enter: the
    /// line they began does not count when it ends.
    typed_early: bool,
}

enum PromptStage {
    Ask,
    Edit,
    Confirm(Vec<String>),
}

/// How long after the prompt appears keystrokes are thrown away.
const PROMPT_GRACE: Duration = Duration::from_millis(500);
/// Longest answer line kept.
const PROMPT_LINE_MAX: usize = 8192;

impl Prompt {
    fn say(s: &str) {
        // Unit tests drive the prompt without a terminal to draw on.
        if cfg!(test) {
            return;
        }
        let _ = sys::write_all(sys::STDOUT, s.as_bytes());
    }

    fn new(info: wire_client::PromptInfo) -> Prompt {
        Prompt {
            info,
            ignore_until: Instant::now() + PROMPT_GRACE,
            stage: PromptStage::Ask,
            line: String::new(),
            typed_early: false,
        }
    }

    /// The prompt was drawn again (a resize): it goes on at the stage it
    /// was at, so a `yes` means what it meant before (an edited command
    /// still needs its own confirmation, never the original's).
    fn resume(&mut self, stage: PromptStage) {
        match &stage {
            PromptStage::Ask => {}
            PromptStage::Edit => Self::say("\r\n\x1b[2Kcommand to run instead: "),
            PromptStage::Confirm(argv) => Self::say(&format!(
                "\r\n\x1b[2Kedited command: {}\r\n\x1b[2Krun the edited command? type yes or no, then Enter: ",
                crate::escalation::quote_argv(argv)
            )),
        }
        self.stage = stage;
    }

    /// Draws the prompt for this terminal's size (the text starts by
    /// resetting the terminal state) and throws away whatever was typed
    /// before it. On a terminal too small to show all of it, says so and
    /// returns the refusal to send instead.
    fn show(info: wire_client::PromptInfo) -> (Option<Prompt>, Option<ClientMsg>) {
        let size = sys::get_winsize(sys::STDOUT).or_else(|| sys::get_winsize(sys::STDIN));
        let (rows, cols) = size.map_or((24, 80), |w| (w.rows, w.cols));
        let _ = sys::flush_input(sys::STDIN);
        match crate::client::prompt::render(&info, rows, cols) {
            Ok(text) => {
                Self::say(&text);
                (Some(Prompt::new(info)), None)
            }
            Err(small) => {
                Self::say(&crate::client::prompt::too_small_text(&small));
                let d = ClientMsg::Decision {
                    request_id: info.request_id,
                    verdict: wire_client::VERDICT_TOO_SMALL,
                    argv: Vec::new(),
                };
                (None, Some(d))
            }
        }
    }

    fn decide(&self, verdict: u8, argv: Vec<String>, word: &str) -> ClientMsg {
        Self::say(&format!("{word}\r\n"));
        ClientMsg::Decision {
            request_id: self.info.request_id.clone(),
            verdict,
            argv,
        }
    }

    /// Consumes keystrokes; returns the decision once there is one.
    fn feed(&mut self, bytes: &[u8]) -> Option<ClientMsg> {
        if Instant::now() < self.ignore_until {
            if let Some(&last) = bytes.last() {
                self.typed_early = !matches!(last, b'\r' | b'\n');
            }
            return None;
        }
        let text = String::from_utf8_lossy(bytes).into_owned();
        for c in text.chars() {
            match c {
                '\r' | '\n' => {
                    let line = std::mem::take(&mut self.line);
                    Self::say("\r\n");
                    if std::mem::take(&mut self.typed_early) {
                        Self::say("(this line was begun before the prompt appeared, so it is no answer) ");
                        Self::say(match self.stage {
                            PromptStage::Confirm(_) => "type yes or no, then Enter: ",
                            PromptStage::Edit => "command to run instead: ",
                            PromptStage::Ask => "type yes, no or edit, then Enter: ",
                        });
                        continue;
                    }
                    if let Some(d) = self.enter(&line) {
                        return Some(d);
                    }
                }
                '\u{3}' => return Some(self.decide(wire_client::VERDICT_DENY, Vec::new(), "\r\ndenied")),
                '\u{7f}' | '\u{8}' => {
                    let erased = self.line.pop().is_some();
                    if erased {
                        Self::say("\u{8} \u{8}");
                    }
                }
                '\u{15}' => {
                    for _ in 0..self.line.chars().count() {
                        Self::say("\u{8} \u{8}");
                    }
                    self.line.clear();
                }
                c if !crate::display::is_unsafe(c) && self.line.len() < PROMPT_LINE_MAX => {
                    self.line.push(c);
                    Self::say(&c.to_string());
                }
                _ => {}
            }
        }
        None
    }

    /// "edit" was answered: asks for the command to run instead.
    fn ask_for_edit(&mut self) -> Option<ClientMsg> {
        Self::say("command to run instead: ");
        self.stage = PromptStage::Edit;
        None
    }

    /// A whole line was entered.
    fn enter(&mut self, line: &str) -> Option<ClientMsg> {
        use crate::escalation::{parse_answer, quote_argv, split_words, Answer};
        match &self.stage {
            PromptStage::Ask => match parse_answer(line) {
                Some(Answer::Yes) => Some(self.decide(wire_client::VERDICT_APPROVE, Vec::new(), "approved")),
                Some(Answer::No) => Some(self.decide(wire_client::VERDICT_DENY, Vec::new(), "denied")),
                Some(Answer::Edit) => self.ask_for_edit(),
                None => {
                    Self::say("please type yes, no or edit (the whole word), then Enter: ");
                    None
                }
            },
            PromptStage::Edit => match split_words(line) {
                Some(argv) if !argv.is_empty() => {
                    Self::say(&format!(
                        "\x1b[2Kedited command: {}\r\n\x1b[2Krun the edited command? type yes or no, then Enter: ",
                        quote_argv(&argv)
                    ));
                    self.stage = PromptStage::Confirm(argv);
                    None
                }
                _ => {
                    Self::say("unbalanced quotes or empty command; command to run instead: ");
                    None
                }
            },
            PromptStage::Confirm(argv) => match parse_answer(line) {
                Some(Answer::Yes) => Some(self.decide(wire_client::VERDICT_EDIT, argv.clone(), "approved (edited)")),
                Some(Answer::No) => Some(self.decide(wire_client::VERDICT_DENY, Vec::new(), "denied")),
                Some(Answer::Edit) => self.ask_for_edit(),
                None => {
                    Self::say("please type yes or no (the whole word), then Enter: ");
                    None
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt() -> Prompt {
        let info = wire_client::PromptInfo {
            request_id: "r1".into(),
            profile: "default".into(),
            session_id: "0123456789abcdef".into(),
            argv: vec!["touch".into(), "/m".into()],
            cwd: "/w".into(),
            justification: String::new(),
            timeout_s: 300,
        };
        let mut p = Prompt::new(info);
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        p
    }

    fn verdict(d: Option<ClientMsg>) -> Option<(u8, Vec<String>)> {
        d.map(|d| match d {
            ClientMsg::Decision { verdict, argv, .. } => (verdict, argv),
            m => panic!("{m:?}"),
        })
    }

    #[test]
    fn a_line_begun_before_the_prompt_appeared_is_no_answer() {
        // The sandbox saw "please go ahead, " typed to it and had the
        // prompt appear: the grace swallows the keys that arrive in it,
        // and the "yes" that finishes the line must not approve.
        let mut p = prompt();
        p.ignore_until = Instant::now() + Duration::from_secs(60);
        assert!(p.feed(b"ahead, ").is_none());
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        assert_eq!(verdict(p.feed(b"yes\r")), None);
        // A line typed after the prompt appeared is an answer.
        assert_eq!(verdict(p.feed(b"yes\r")), Some((wire_client::VERDICT_APPROVE, vec![])));
        // A line that ended (Enter) in the grace leaves the next one whole.
        let mut p = prompt();
        p.ignore_until = Instant::now() + Duration::from_secs(60);
        assert!(p.feed(b"ok\r").is_none());
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        assert_eq!(verdict(p.feed(b"y\r")), Some((wire_client::VERDICT_APPROVE, vec![])));
        // Ctrl-C and garbage before the grace ends do nothing.
        let mut p = prompt();
        assert_eq!(verdict(p.feed(b"yess\r")), None);
        assert_eq!(verdict(p.feed(b"\x1b[Myes\r")), None);
        assert_eq!(verdict(p.feed(b"no\r")), Some((wire_client::VERDICT_DENY, vec![])));
    }

    #[test]
    fn a_resize_keeps_an_edited_command_waiting_for_its_own_yes() {
        let mut term = Terminal {
            prompt: Some(prompt()),
            held: Vec::new(),
        };
        let p = term.prompt.as_mut().unwrap();
        assert!(p.feed(b"edit\r").is_none());
        assert!(p.feed(b"ls -l\r").is_none());
        assert!(matches!(p.stage, PromptStage::Confirm(_)));
        // The terminal is resized: the prompt is drawn again, for the
        // same request, still asking about the edited command.
        assert!(term.redraw().is_none() || term.prompt.is_none());
        let p = term.prompt.as_mut().expect("a 24x80 default fits the prompt");
        assert!(matches!(&p.stage, PromptStage::Confirm(a) if a == &["ls", "-l"]));
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        assert_eq!(
            verdict(p.feed(b"yes\r")),
            Some((wire_client::VERDICT_EDIT, vec!["ls".to_string(), "-l".to_string()]))
        );
    }
}
