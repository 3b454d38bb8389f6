//! The coordinator's errors: a variant per failing step, carrying the io
//! error (and the path, where there is one) or the lower layer's error.
//! `Display` is the sentence the starting CLI (`StartMsg::Failed`) or a
//! refused client (`ServerMsg::Refused`) shows; the text is made only at
//! that edge.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::config::ports::PortError;
use crate::config::ConfigError;
use crate::net::sidecar::SidecarError;
use crate::plan::guest::VolumeTargetError;
use crate::storage::anchor::AnchorError;
use crate::storage::cgroup::CgroupError;
use crate::storage::gc::LockError;
use crate::storage::image::ImageError;
use crate::storage::paths::PathError;
use crate::storage::store::StoreError;
use crate::trust::TrustError;
use crate::view::sentry::GitError;
use crate::wire::supervisor::StatusError;

#[derive(Debug)]
pub enum CoordinatorError {
    /// Reading the config file or finding the profile in it.
    Config(ConfigError),
    /// Deriving, preparing, recording or attesting the network.
    Network(SidecarError),
    /// The profile's and `--publish` forwards.
    Ports(PortError),
    /// Port forwards asked of a profile without the slirp network.
    PortsWithoutNetwork {
        profile: String,
    },
    /// Creating the generation's cgroup when limits were asked for.
    Cgroup(CgroupError),
    /// The storage root, the Domain's directories, or scratch.
    Paths(PathError),
    /// Opening the Domain's store.
    OpenStore(StoreError),
    /// Recording in the store (generation, components, lease, intents, phase).
    Store(StoreError),
    /// The signal pipe of the event loop.
    SignalPipe(io::Error),
    /// Resolving, reading or preparing the image.
    Image(ImageError),
    /// The lowers lock (shared) while leasing.
    LowersLock(LockError),
    /// Writing `domain.json`.
    RecordDomain(io::Error),
    /// Creating the generation directory (and its bundle dir).
    GenDir(PathBuf, io::Error),
    /// Creating runsc's state root.
    RunscRoot(PathBuf, io::Error),
    /// `current_exe`.
    LocateExe(io::Error),
    /// A lazaret binary next to this one is missing.
    Missing(PathBuf),
    /// The State Anchor's layout and plan.
    Anchor(AnchorError),
    /// A volume's guest path the image lacks.
    Volumes(VolumeTargetError),
    /// Writing the host's Git identity for the guest.
    GitIdentity(io::Error),
    /// Creating the generation's trust anchor or its role identities.
    TrustAnchor(TrustError),
    /// The profile's secrets (issue 31): one sentence, never a value.
    Secrets(String),
    /// Creating the escalation mailbox or the audit log (the path).
    Mailbox(PathBuf, io::Error),
    /// Planning the workspace and volume views.
    Views(GitError),
    /// Setting the last generation's `scratch` aside (the rename).
    SetAside(PathBuf, io::Error),
    /// Creating `scratch/tmp`, or giving it /tmp's mode.
    ScratchTmp(PathBuf, io::Error),
    ScratchMode(PathBuf, io::Error),
    /// Making the workspace's mount point Domain-side (`plan::workspace`):
    /// the directory that failed.
    WorkspaceMountPoint(PathBuf, io::Error),
    /// Writing the bundle's `config.json`.
    WriteBundle(PathBuf, io::Error),
    /// A pipe (lease, status, session spec or streams).
    Pipe(io::Error),
    /// Spawning the supervisor.
    StartSupervisor(io::Error),
    /// What the supervisor reported (or failed to) during startup.
    Supervisor(StatusError),
    /// No subordinate id range for the user.
    IdMap(crate::plan::IdMapError),
    /// Opening the supervisor's namespaces.
    OpenNamespace(PathBuf, io::Error),
    /// Telling the supervisor its id maps are written.
    LeasePipe(io::Error),
    /// `runsc exec` needs the supervisor's namespaces.
    NotRunning,
    /// A `runsc exec` helper could not be run.
    RunscExec(io::Error),
    /// The profile's `user` could not be created (the guest's reason).
    UserSetup {
        profile: String,
        user: String,
        reason: String,
    },
    /// Writing `gen/ports`.
    WritePorts(PathBuf, io::Error),
    /// Binding, configuring or publishing the Domain socket.
    BindSocket(PathBuf, io::Error),
    SocketMode(io::Error),
    PublishSocket(PathBuf, io::Error),
    /// A session's process spec does not fit the pipe.
    SpecTooLarge,
    OpenPty(io::Error),
    /// Spawning a session's `runsc exec`.
    StartExec(io::Error),
    Pty(io::Error),
}

impl fmt::Display for CoordinatorError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use CoordinatorError::*;
        match self {
            Config(e) => write!(f, "{e}"),
            Network(e) => write!(f, "{e}"),
            Ports(e) => write!(f, "{e}"),
            PortsWithoutNetwork { profile } => write!(
                f,
                "profile {profile:?} forwards ports but has network.mode = \"none\": port forwards need the slirp network"
            ),
            Cgroup(e) => write!(f, "{e}"),
            Paths(e) => write!(f, "{e}"),
            OpenStore(e) | Store(e) => write!(f, "{e}"),
            SignalPipe(e) => write!(f, "signal pipe: {e}"),
            Image(e) => write!(f, "{e}"),
            LowersLock(e) => write!(f, "{e}"),
            RecordDomain(e) => write!(f, "writing domain.json: {e}"),
            GenDir(p, e) => write!(f, "{}: {e}", p.display()),
            RunscRoot(_, e) => write!(f, "runsc root: {e}"),
            LocateExe(e) => write!(f, "locating lazaret: {e}"),
            Missing(p) => write!(f, "{} is missing: reinstall lazaret", p.display()),
            Anchor(e) => write!(f, "{e}"),
            Volumes(e) => write!(f, "{e}"),
            GitIdentity(e) => write!(f, "writing gitconfig: {e}"),
            TrustAnchor(e) => write!(f, "trust anchor: {e}"),
            Secrets(s) => write!(f, "{s}"),
            Mailbox(p, e) => write!(f, "{}: {e}", p.display()),
            Views(e) => write!(f, "{e}"),
            SetAside(p, e) => write!(f, "setting {} aside: {e}", p.display()),
            ScratchTmp(_, e) => write!(f, "creating scratch/tmp: {e}"),
            ScratchMode(_, e) => write!(f, "chmod scratch/tmp: {e}"),
            WorkspaceMountPoint(p, e) => write!(
                f,
                "making the workspace's mount point {}: {e} (the Domain's persistent state has something \
                 other than a directory there: `lazaret state reset` clears it)",
                p.display()
            ),
            WriteBundle(_, e) => write!(f, "writing config.json: {e}"),
            Pipe(e) => write!(f, "pipe: {e}"),
            StartSupervisor(e) => write!(f, "starting the supervisor: {e}"),
            Supervisor(e) => write!(f, "{e}"),
            IdMap(e) => write!(f, "{e}"),
            OpenNamespace(_, e) => write!(f, "opening namespace: {e}"),
            LeasePipe(e) => write!(f, "lease pipe: {e}"),
            NotRunning => write!(f, "the sandbox is not running"),
            RunscExec(e) => write!(f, "runsc exec: {e}"),
            UserSetup { profile, user, reason } => write!(f, "profile {profile} user {user}: {reason}"),
            WritePorts(_, e) => write!(f, "writing gen/ports: {e}"),
            BindSocket(_, e) => write!(f, "binding the Domain socket: {e}"),
            SocketMode(e) => write!(f, "socket: {e}"),
            PublishSocket(_, e) => write!(f, "publishing the Domain socket: {e}"),
            SpecTooLarge => write!(f, "the session spec is too large"),
            OpenPty(e) => write!(f, "openpty: {e}"),
            StartExec(e) => write!(f, "starting runsc exec: {e}"),
            Pty(e) => write!(f, "pty: {e}"),
        }
    }
}

impl CoordinatorError {
    /// The file or directory the failing step worked on, where there is
    /// one (for the coordinator log; not every sentence names it).
    pub fn path(&self) -> Option<&Path> {
        use CoordinatorError::*;
        match self {
            GenDir(p, _)
            | RunscRoot(p, _)
            | Missing(p)
            | Mailbox(p, _)
            | SetAside(p, _)
            | ScratchTmp(p, _)
            | ScratchMode(p, _)
            | WorkspaceMountPoint(p, _)
            | WriteBundle(p, _)
            | OpenNamespace(p, _)
            | WritePorts(p, _)
            | BindSocket(p, _)
            | PublishSocket(p, _) => Some(p),
            _ => None,
        }
    }
}

impl std::error::Error for CoordinatorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        use CoordinatorError::*;
        match self {
            Config(e) => Some(e),
            Network(e) => Some(e),
            Ports(e) => Some(e),
            Cgroup(e) => Some(e),
            Paths(e) => Some(e),
            OpenStore(e) | Store(e) => Some(e),
            Image(e) => Some(e),
            LowersLock(e) => Some(e),
            Anchor(e) => Some(e),
            Volumes(e) => Some(e),
            TrustAnchor(e) => Some(e),
            Views(e) => Some(e),
            Supervisor(e) => Some(e),
            IdMap(e) => Some(e),
            SignalPipe(e) | RecordDomain(e) | LocateExe(e) | GitIdentity(e) | Pipe(e) | StartSupervisor(e)
            | LeasePipe(e) | RunscExec(e) | SocketMode(e) | OpenPty(e) | StartExec(e) | Pty(e) => Some(e),
            GenDir(_, e)
            | RunscRoot(_, e)
            | Mailbox(_, e)
            | SetAside(_, e)
            | ScratchTmp(_, e)
            | ScratchMode(_, e)
            | WorkspaceMountPoint(_, e)
            | WriteBundle(_, e)
            | OpenNamespace(_, e)
            | WritePorts(_, e)
            | BindSocket(_, e)
            | PublishSocket(_, e) => Some(e),
            PortsWithoutNetwork { .. } | Secrets(_) | Missing(_) | NotRunning | UserSetup { .. } | SpecTooLarge => None,
        }
    }
}

macro_rules! from_lower {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for CoordinatorError {
            fn from(e: $t) -> Self {
                CoordinatorError::$v(e)
            }
        }
    )*};
}

from_lower!(
    ConfigError => Config,
    SidecarError => Network,
    PortError => Ports,
    PathError => Paths,
    StoreError => Store,
    ImageError => Image,
    LockError => LowersLock,
    AnchorError => Anchor,
    VolumeTargetError => Volumes,
    TrustError => TrustAnchor,
    GitError => Views,
    StatusError => Supervisor,
    crate::plan::IdMapError => IdMap,
);
