//! `Failure`, a public command's failure (a variant per kind, its exit
//! code and its one rendering), and how it is settled before it is shown.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::config;
use crate::domain::{self, DomainId};
use crate::storage::nospace;
use crate::storage::paths;
use crate::storage::state::StateError;
use crate::wire::codec::{DecodeError, ReadError};

/// Exit codes of Lazaret's own failures (a session's exit status is the
/// sandboxed command's).
pub const EXIT_USAGE: i32 = crate::exit::Exit::Usage.code();
pub const EXIT_FAILURE: i32 = crate::exit::Exit::Failure.code();

/// The form of `lazaret port add`.
pub(crate) const PORT_ADD_FORM: &str = "lazaret port add ID [ADDR:]HOSTPORT:GUESTPORT";

/// A failure of the CLI. Bad input exits 2, a failing step 125; a
/// wrapped layer error keeps its own rendering.
#[derive(Debug)]
pub enum Failure {
    // ---- the lower layers' errors ----
    /// The config file (bad input).
    Config(config::ConfigError),
    /// `--env`/`pass_env` (bad input).
    PassEnv(config::passenv::PassEnvError),
    /// A port forward (bad input).
    Port(config::ports::PortError),
    /// A workspace or profile naming a Domain (bad input).
    Domain(domain::DomainError),
    /// The storage root or runtime dir (bad input).
    Path(paths::PathError),
    /// The command line did not parse (bad input).
    Args(pico_args::Error),
    /// A secret that does not resolve on this host (bad input).
    Secret(config::secrets::ResolveError),
    /// A network policy the config cannot yield (bad input).
    Policy(crate::net::policy::NetError),
    /// `lazaret net show` could not read the host's networks (exit 2).
    NetShow(crate::net::sidecar::SidecarError),
    /// `lazaret state`, `rm` (its exit code).
    State(StateError),
    /// Building or reading an image (a failing step).
    Image(crate::storage::image::ImageError),
    /// Taking the Domain lock (a failing step).
    Lock(domain::LockError),

    // ---- the command line (exit 2) ----
    /// A command Lazaret does not have.
    UnknownCommand(String),
    /// No command at all (the usage to show).
    NoCommand(&'static str),
    /// An argument the command does not take.
    UnknownArgument(String),
    /// An argument of the sandboxed command that is not UTF-8.
    NotUtf8(OsString),
    /// Run as host root.
    AsRoot,
    /// `lazaret CMD` without its subcommand (the command, the choices).
    NeedsSubcommand { cmd: &'static str, choices: &'static str },
    /// `lazaret image WHAT` with an unknown WHAT.
    UnknownImageCommand(String),
    /// A flag's value that is not what the flag expects.
    BadValue {
        flag: &'static str,
        value: String,
        expected: Expected,
    },
    /// `lazaret port` without `add`.
    PortUsage,
    /// `lazaret port add` without an ID or a forward.
    PortNeedsArgs,
    /// `lazaret port add ID SPEC` with a SPEC that is not a forward.
    BadForward { spec: String, err: config::ValueError },
    /// `lazaret exec` without an ID.
    ExecNeedsId,
    /// A Domain named more than one way (whether `--all` is one).
    NameOneWay { all: bool },

    // ---- naming a Domain (exit 2) ----
    /// Not an ID prefix.
    NotADomainId(String),
    /// No `what` (running, stored) Domain's ID starts with the prefix.
    NoDomain { what: String, prefix: String },
    /// More than one ID starts with the prefix (those IDs).
    Ambiguous { prefix: String, ids: Vec<String> },
    /// The Domain stopped since it was listed.
    NotRunningAnyMore(DomainId),
    /// `rm`: the Domain has no Domain Root.
    NoStateToRemove { id: DomainId, root: PathBuf },
    /// A forward's host port is taken: by another running Domain (its ID,
    /// and its workspace as it answered), or by another program on the host.
    PortTaken {
        port: config::ports::PortForward,
        holder: Option<(DomainId, Option<String>)>,
    },

    // ---- the profile and workspace (exit 2) ----
    /// Reading the current directory.
    CurrentDir(io::Error),
    /// `--workspace` that does not exist.
    NoWorkspace(PathBuf),
    /// The home directory itself as a workspace.
    HomeAsWorkspace(PathBuf),
    /// Explicit limits with no mechanism to enforce them.
    LimitsUnenforceable { profile: String, why: String, fix: String },
    /// A volume whose host path does not exist.
    MissingVolume {
        config: PathBuf,
        profile: String,
        host: PathBuf,
        guest: String,
    },
    /// A volume target the image does not allow.
    VolumeTarget {
        config: PathBuf,
        profile: String,
        err: crate::plan::guest::VolumeTargetError,
    },
    /// An OCI image path with no index.json.
    NotOciLayout {
        config: PathBuf,
        profile: String,
        image: config::ImageSource,
        path: PathBuf,
    },
    /// A docker-archive image path that is not a file.
    NotAFile {
        config: PathBuf,
        profile: String,
        image: config::ImageSource,
        file: PathBuf,
    },
    /// The default image is not built (where it goes).
    DefaultImageMissing(PathBuf),
    /// A named image is not built.
    ImageMissing { image: String, profile: String },
    /// `image build NAME` with no recipe NAME.
    NoRecipe {
        name: String,
        config: PathBuf,
        known: Vec<String>,
    },
    /// A recipe whose base image is not built.
    BaseNotBuilt { recipe: String, base: String },
    /// Secrets with no egress gate to swap them in (the profile, its vars).
    NoGate { profile: String, vars: Vec<String> },
    /// The coordinator refused the session (its sentence).
    SessionRefused(String),
    /// Git's execution surface refuses the start: host hooks run project
    /// code under `host_hooks = "refuse"`, or the workspace could not be
    /// searched for its repositories (the sentence).
    HostHooks(String),
    /// No subordinate id range for the user in /etc/subuid or /etc/subgid
    /// (doctor's check, before any image work): what is missing, the fix.
    NoSubids { detail: String, fix: String },
    /// `lazaret export`, `image export` or `gate`: bad input (the sentence).
    Export(String),
    /// `lazaret export`, `image export` or `gate`: a failing step (the sentence).
    ExportFailed(String),

    // ---- starting the coordinator (exit 125) ----
    /// Connecting to a published Domain.
    Connect { socket: PathBuf, err: io::Error },
    /// Locked by another lazaret, never published.
    LockedUnpublished,
    /// The profile's disk cap refuses the start (the cap's sentence, made
    /// by `cgroup::disk_verdict`).
    DiskCap(String),
    /// A step of the client's own that failed on the host.
    Sys { step: SysStep, err: io::Error },
    /// Opening the coordinator log.
    OpenLog { path: PathBuf, err: io::Error },
    /// The coordinator reported a failed start (its sentence on the wire).
    StartFailed(String),
    /// The coordinator exited during startup (why, when not just closed;
    /// its log).
    StartExited { err: Option<ReadError>, log: PathBuf },

    // ---- talking to the coordinator (exit 125) ----
    /// Sending to it.
    Unreachable(io::Error),
    /// `stop` refused (its sentence).
    StopRefused(String),
    /// `port add` refused (its sentence).
    PortRefused(String),
    /// A reply of the wrong kind.
    UnexpectedReply(crate::wire::UnexpectedMessage),
    /// No reply to `port add`.
    NoAnswer(ReadError),
    /// Closed before Welcome with an error.
    ClosedSession(ReadError),
    /// The session's connection broke.
    ConnectionLost(ReadError),
    /// The coordinator closed the session (why).
    SessionClosed(String),
    /// A frame the session does not expect (its name).
    UnexpectedFrame(&'static str),
    /// A frame that does not decode.
    BadFrame(DecodeError),
    /// The Domain kept stopping while `run` joined it.
    KeptStopping,
    /// The Domain stopped while `exec` joined it.
    StoppedWhileJoining(DomainId),
    /// The Domain's profile or workspace changed since it started.
    Mismatch(DomainId),
    /// Asking the Domain for its ports.
    NoPorts,

    // ---- settled before shown ----
    /// A failure under a full filesystem, said as such.
    NoSpace { full: nospace::Full, cause: Box<Failure> },
}

/// What a flag expected instead of its value.
#[derive(Debug)]
pub enum Expected {
    Memory,
    Pids,
    Value(config::ValueError),
}

/// Host steps of the client: what was being done.
#[derive(Debug, Clone, Copy)]
pub enum SysStep {
    LocateSelf,
    Pipe,
    StartCoordinator,
    SignalPipe,
    RawMode,
    Poll,
}

impl Failure {
    pub fn code(&self) -> i32 {
        use Failure::*;
        match self {
            State(e) => e.code(),
            NoSpace { cause, .. } => cause.code(),
            Config(_)
            | PassEnv(_)
            | Port(_)
            | Domain(_)
            | Path(_)
            | Args(_)
            | Secret(_)
            | Policy(_)
            | NetShow(_)
            | UnknownCommand(_)
            | NoCommand(_)
            | UnknownArgument(_)
            | NotUtf8(_)
            | AsRoot
            | NeedsSubcommand { .. }
            | UnknownImageCommand(_)
            | BadValue { .. }
            | PortUsage
            | PortNeedsArgs
            | BadForward { .. }
            | ExecNeedsId
            | NameOneWay { .. }
            | NotADomainId(_)
            | NoDomain { .. }
            | Ambiguous { .. }
            | NotRunningAnyMore(_)
            | NoStateToRemove { .. }
            | PortTaken { .. }
            | CurrentDir(_)
            | NoWorkspace(_)
            | HomeAsWorkspace(_)
            | LimitsUnenforceable { .. }
            | MissingVolume { .. }
            | VolumeTarget { .. }
            | NotOciLayout { .. }
            | NotAFile { .. }
            | DefaultImageMissing(_)
            | ImageMissing { .. }
            | NoRecipe { .. }
            | BaseNotBuilt { .. }
            | NoGate { .. }
            | SessionRefused(_)
            | HostHooks(_)
            | NoSubids { .. }
            | Export(_) => EXIT_USAGE,
            Image(_)
            | Lock(_)
            | Connect { .. }
            | LockedUnpublished
            | DiskCap(_)
            | Sys { .. }
            | OpenLog { .. }
            | StartFailed(_)
            | StartExited { .. }
            | Unreachable(_)
            | StopRefused(_)
            | PortRefused(_)
            | UnexpectedReply(_)
            | NoAnswer(_)
            | ClosedSession(_)
            | ConnectionLost(_)
            | SessionClosed(_)
            | UnexpectedFrame(_)
            | BadFrame(_)
            | KeptStopping
            | StoppedWhileJoining(_)
            | Mismatch(_)
            | NoPorts
            | ExportFailed(_) => EXIT_FAILURE,
        }
    }
}

impl fmt::Display for SysStep {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            SysStep::LocateSelf => "cannot locate lazaret",
            SysStep::Pipe => "pipe",
            SysStep::StartCoordinator => "cannot start the coordinator",
            SysStep::SignalPipe => "signal pipe",
            SysStep::RawMode => "cannot set raw mode",
            SysStep::Poll => "poll",
        })
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use crate::display::escape;
        use Failure::*;
        match self {
            Config(e) => write!(f, "{e}"),
            PassEnv(e) => write!(f, "{e}"),
            Port(e) => write!(f, "{e}"),
            Domain(e) => write!(f, "{e}"),
            Path(e) => write!(f, "{e}"),
            Args(e) => write!(f, "{e}"),
            Secret(e) => write!(f, "{e}"),
            Policy(e) => write!(f, "{e}"),
            NetShow(e) => write!(f, "{e}"),
            State(e) => write!(f, "{e}"),
            Image(e) => write!(f, "{e}"),
            Lock(e) => write!(f, "{e}"),

            UnknownCommand(c) => write!(f, "unknown command {c:?}: see `lazaret help`"),
            NoCommand(usage) => write!(f, "a command is required\n{usage}"),
            UnknownArgument(a) => write!(f, "unknown argument {a:?}: see `lazaret help`"),
            NotUtf8(a) => write!(f, "argument {a:?} is not UTF-8"),
            AsRoot => f.write_str(
                "refusing to run as root: Lazaret runs sandboxes rootless; run it as your normal user \
                 (scripts/lazaret-here does this for you under sudo)",
            ),
            NeedsSubcommand { cmd, choices } => write!(f, "`lazaret {cmd}` needs a command: {choices}"),
            UnknownImageCommand(c) => write!(f, "unknown image command {c:?}: expected build, list or prune"),
            BadValue { flag, value, expected } => {
                write!(f, "{flag} {value:?}: expected ")?;
                match expected {
                    Expected::Memory => f.write_str("a size of at least 64MiB like \"4GiB\""),
                    Expected::Pids => f.write_str("an integer between 32 and 4194304"),
                    Expected::Value(e) => write!(f, "{e}"),
                }
            }
            PortUsage => write!(f, "usage: {PORT_ADD_FORM}"),
            PortNeedsArgs => write!(
                f,
                "`lazaret port add` needs a Domain ID (as `lazaret ps` prints it) and a forward: {PORT_ADD_FORM}"
            ),
            BadForward { spec, err } => write!(f, "port add: {:?} is not {err}", escape(spec)),
            ExecNeedsId => f.write_str(
                "`lazaret exec` needs a Domain ID (as `lazaret ps` prints it): lazaret exec ID [-- CMD ARGS...]",
            ),
            NameOneWay { all: true } => f.write_str("name the Domain one way: ID, --all, or --profile/--workspace"),
            NameOneWay { all: false } => f.write_str("name the Domain one way: ID or --profile/--workspace"),

            NotADomainId(p) => write!(
                f,
                "{:?} is not a Domain ID: expected lowercase hex digits, a prefix of the ID `lazaret ps` or `lazaret state list` prints",
                escape(p)
            ),
            NoDomain { what, prefix } => write!(
                f,
                "no {what} Domain has an ID starting with {prefix}: see `lazaret {}`",
                if what == "running" { "ps" } else { "state list" }
            ),
            Ambiguous { prefix, ids } => write!(
                f,
                "{prefix} is ambiguous: it starts the IDs {}; give more digits",
                ids.join(", ")
            ),
            NotRunningAnyMore(id) => write!(f, "Domain {id} is not running any more"),
            NoStateToRemove { id, root } => write!(
                f,
                "Domain {id} has no state to remove (no {}): see `lazaret state list`",
                root.display()
            ),
            PortTaken {
                port: p,
                holder: Some((id, ws)),
            } => {
                write!(
                    f,
                    "host port {}:{} is already forwarded by the running Domain {id}",
                    p.addr, p.host
                )?;
                if let Some(ws) = ws {
                    write!(f, " (workspace {})", escape(ws))?;
                }
                write!(
                    f,
                    ": stop that Domain (`lazaret stop {id}`), or ask for any free host port with \"{}:0:{}\"",
                    p.addr, p.guest
                )
            }
            PortTaken { port: p, holder: None } => write!(
                f,
                "host port {}:{} is in use by another program on this host: free it, or ask for any free \
                 host port with \"{}:0:{}\"",
                p.addr, p.host, p.addr, p.guest
            ),

            CurrentDir(e) => write!(f, "cannot read the current directory: {e}"),
            NoWorkspace(w) => write!(
                f,
                "workspace {} does not exist: pass an existing directory to --workspace",
                w.display()
            ),
            HomeAsWorkspace(w) => write!(
                f,
                "{} is your home directory: a workspace is one project's directory (the sandbox would read and \
                 write all of your home, your config and Lazaret's own state); cd into a project, or pass -w DIR",
                w.display()
            ),
            LimitsUnenforceable { profile, why, fix } => write!(
                f,
                "profile {profile:?} sets resource limits but they cannot be enforced here: {why}. Fix: {fix} (see `lazaret doctor`)"
            ),
            MissingVolume {
                config,
                profile,
                host,
                guest,
            } => write!(
                f,
                "{}: profile {profile:?}: volume host path {} (for {guest}) does not exist: create it or fix `volumes`",
                config.display(),
                host.display()
            ),
            VolumeTarget { config, profile, err } => write!(f, "{}: profile {profile:?}: {err}", config.display()),
            NotOciLayout {
                config,
                profile,
                image,
                path,
            } => write!(
                f,
                "{}: profile {profile:?}: image {image}: {} is not an OCI layout (no index.json): fix `image`",
                config.display(),
                path.display()
            ),
            NotAFile {
                config,
                profile,
                image,
                file,
            } => write!(
                f,
                "{}: profile {profile:?}: image {image}: {} is not a file: fix `image`",
                config.display(),
                file.display()
            ),
            NoSubids { detail, fix } => write!(
                f,
                "{detail}: image builds and sandboxes run in a user namespace that maps a range of \
                 subordinate ids, and nothing was started. Fix: {fix} (then `lazaret doctor` checks it)"
            ),
            DefaultImageMissing(at) => write!(
                f,
                "the default image is not built yet: run `lazaret image build` (it goes to {})",
                at.display()
            ),
            ImageMissing { image, profile } => write!(
                f,
                "the image {image} of profile {profile} is not built yet: run `lazaret image build {image}`"
            ),
            NoRecipe { name, config, known } => write!(
                f,
                "no image recipe {:?} in {}: known recipes: {} (define [images.NAME])",
                escape(name),
                config.display(),
                known.join(", ")
            ),
            BaseNotBuilt { recipe, base } => write!(
                f,
                "the recipe {recipe} starts from the image {base}, which is not built: run `lazaret image build{}` first",
                if base == "default" { String::new() } else { format!(" {base}") }
            ),
            NoGate { profile, vars } => write!(
                f,
                "profile {profile:?} binds secrets ({}) but has no egress gate to swap them in: \
                 give it network.hosts (the secrets' hosts), or remove [profiles.{profile}.secrets]",
                vars.join(", ")
            ),
            Export(why) | ExportFailed(why) => f.write_str(why),
            SessionRefused(reason) | DiskCap(reason) | StartFailed(reason) | HostHooks(reason) => {
                f.write_str(reason)
            }

            Connect { socket, err } => write!(f, "cannot connect to {}: {err}", socket.display()),
            LockedUnpublished => f.write_str(
                "the Domain is locked by another lazaret but was never published: \
                 check `lazaret ps`, or stop the other process",
            ),
            Sys { step, err } => write!(f, "{step}: {err}"),
            OpenLog { path, err } => write!(f, "cannot open {}: {err}", path.display()),
            StartExited { err, log } => write!(
                f,
                "the coordinator exited during startup{}; see {}",
                match err {
                    None => String::new(),
                    Some(e) => format!(" ({e})"),
                },
                log.display()
            ),

            Unreachable(e) => write!(f, "cannot reach the coordinator: {e}"),
            StopRefused(reason) => write!(f, "the coordinator refused: {reason}"),
            PortRefused(reason) => f.write_str(&escape(reason)),
            UnexpectedReply(m) => write!(f, "unexpected reply from the coordinator ({m})"),
            NoAnswer(e) => write!(f, "the coordinator did not answer: {e}"),
            ClosedSession(e) => write!(f, "the coordinator closed the session: {e}"),
            ConnectionLost(e) => write!(f, "lost the connection to the coordinator ({e}); the session is gone"),
            SessionClosed(reason) => write!(f, "session closed: {reason}"),
            UnexpectedFrame(name) => write!(f, "unexpected message from the coordinator: {name}"),
            BadFrame(e) => write!(f, "bad frame from the coordinator: {e}"),
            KeptStopping => f.write_str("the Domain kept stopping while joining it; try again"),
            StoppedWhileJoining(id) => write!(f, "Domain {id} stopped while joining it"),
            Mismatch(id) => write!(
                f,
                "Domain {id} does not match its profile and workspace any more: stop it and start it again"
            ),
            NoPorts => f.write_str("cannot ask the Domain for its ports"),

            NoSpace { full, cause } => f.write_str(&full.said(&cause.to_string())),
        }
    }
}

/// A failed host step of the client as its `Failure` (for `map_err`).
pub(crate) fn sys_step(step: SysStep) -> impl FnOnce(io::Error) -> Failure {
    move |err| Failure::Sys { step, err }
}

macro_rules! failure_from {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Failure {
            fn from(e: $t) -> Failure { Failure::$v(e) }
        }
    )*};
}

failure_from!(
    config::ConfigError => Config,
    config::passenv::PassEnvError => PassEnv,
    config::ports::PortError => Port,
    domain::DomainError => Domain,
    paths::PathError => Path,
    pico_args::Error => Args,
    StateError => State,
    crate::storage::image::ImageError => Image,
);

/// The one place a failure is settled before it is shown: a full disk
/// under the storage root or the runtime dir is said as "no space left on
/// DEVICE (PATH)" whatever step hit it.
pub(super) fn plain_failure(f: Failure) -> Failure {
    if f.code() == EXIT_USAGE {
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
    match nospace::full_for(&f.to_string(), &refs) {
        Some(full) => Failure::NoSpace {
            full,
            cause: Box::new(f),
        },
        None => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_says_its_sentence_with_its_code() {
        let memory = Failure::BadValue {
            flag: "--memory",
            value: "1k".into(),
            expected: Expected::Memory,
        };
        assert_eq!(
            memory.to_string(),
            "--memory \"1k\": expected a size of at least 64MiB like \"4GiB\""
        );
        assert_eq!(memory.code(), EXIT_USAGE);
        let sub = Failure::NeedsSubcommand {
            cmd: "image",
            choices: "build, list or prune",
        };
        assert_eq!(sub.to_string(), "`lazaret image` needs a command: build, list or prune");
        let raw = sys_step(SysStep::RawMode)(io::Error::other("not a tty"));
        assert_eq!(raw.to_string(), "cannot set raw mode: not a tty");
        assert_eq!(raw.code(), EXIT_FAILURE);
        assert_eq!(Failure::State(StateError::LowerBeingPrepared).code(), EXIT_USAGE);
        assert_eq!(
            Failure::State(StateError::Undeleted(vec!["x".into()])).code(),
            EXIT_FAILURE
        );
    }

    #[test]
    fn a_full_disk_leads_the_cause_and_keeps_its_code() {
        let cause = Failure::StartFailed("write x: no space left on device\nmore".into());
        let full = nospace::Full {
            device: "/dev/sda1".into(),
            path: PathBuf::from("/s"),
        };
        let f = Failure::NoSpace {
            full,
            cause: Box::new(cause),
        };
        assert_eq!(
            f.to_string(),
            "no space left on /dev/sda1 (/s): free space there and try again (write x: no space left on device)"
        );
        assert_eq!(f.code(), EXIT_FAILURE);
    }
}
