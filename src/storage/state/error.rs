//! `StateError`, the failures of `lazaret state`, `lazaret rm` and
//! `lazaret image prune`: a variant per kind of bad input, per reason the
//! state is in use, and per failing step (carrying the source error and
//! the path or name it was about), rendered once in `Display`.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::config::ConfigError;
use crate::domain::{self, DomainId};
use crate::storage::paths::PathError;
use crate::storage::statefs::StateHelperError;
use crate::view::ignored::IgnoredError;

#[derive(Debug)]
pub enum StateError {
    // ---- bad input (exit 2) ----
    /// The command line did not parse (a flag's value).
    Args(pico_args::Error),
    /// An argument no command takes.
    UnknownArgument(String),
    /// `lazaret state` alone.
    NeedsCommand,
    /// `lazaret state WHAT` with an unknown WHAT.
    UnknownCommand(String),
    /// `state reset --path P --all`.
    ResetPathAndAll,
    /// `state reset` without a scope.
    ResetWhat,
    /// `state unhide` without (or with both) scopes.
    UnhideWhat,
    /// `state diff` without a PATH.
    DiffNeedsPath,
    ApplyNeedsPath,
    /// The config file could not be loaded.
    Config(ConfigError),
    /// The storage root or the runtime dir could not be found or made.
    Dirs(PathError),
    /// The chosen Domain has no Domain Root.
    NoState {
        id: DomainId,
        root: PathBuf,
    },
    /// `state diff PATH` outside the Domain's workspace.
    NotInWorkspace {
        path: PathBuf,
        workspace: PathBuf,
    },
    /// `state diff PATH` on a file that is not a host-tool file.
    NotHostTool(PathBuf),
    /// `state reset --path P` on a path with no state (the ones with some).
    NoStateAt {
        path: String,
        id: DomainId,
        have: Vec<String>,
    },
    /// A destructive command without `--yes` and without a terminal to ask
    /// on (what it is doing).
    NotConfirmed(&'static str),

    // ---- the state is in use (exit 2) ----
    /// The Domain is published: its sessions use the state.
    Running(DomainId),
    /// Another lazaret holds the Domain lock.
    Locked(DomainId),
    /// The Domain was published while its lock was being taken.
    StartedMeanwhile(DomainId),
    /// `image prune`: a Domain holds the lowers lock.
    LowerBeingPrepared,
    /// `image prune`: some Domains' leases cannot be read (which, why).
    LeasesUnreadable(Vec<String>),

    // ---- a failing step (exit 125) ----
    /// Taking the Domain lock.
    Lock(domain::LockError),
    /// Running the state helper.
    Helper(StateHelperError),
    /// Finishing a reset an earlier command left half done.
    FinishReset(io::Error),
    /// The reset journal (`anchor::reset`).
    Reset(io::Error),
    /// Removing the Domain's sentinel key (`storage::sentinel_key`).
    SentinelKey(io::Error),
    /// Reading or writing the sticky un-hidden list.
    Sticky(IgnoredError),
    /// Removing the remembered ignore rules (the file).
    RulesHistory {
        path: PathBuf,
        err: io::Error,
    },
    /// `image prune`: opening or taking the lowers lock.
    LowersLock(io::Error),
    /// `image prune`: moving a lower (its id) to the trash.
    TrashLower {
        id: String,
        err: io::Error,
    },
    /// `rm`: making the anchor dir.
    AnchorDir(PathError),
    /// `rm`: moving a directory (its name) to the trash.
    Trash {
        name: String,
        err: io::Error,
    },
    /// `rm`: the state helper left these undeleted.
    Undeleted(Vec<String>),
}

impl StateError {
    pub fn code(&self) -> i32 {
        use StateError::*;
        match self {
            Args(_)
            | UnknownArgument(_)
            | NeedsCommand
            | UnknownCommand(_)
            | ResetPathAndAll
            | ResetWhat
            | UnhideWhat
            | DiffNeedsPath
            | ApplyNeedsPath
            | Config(_)
            | Dirs(_)
            | NoState { .. }
            | NotInWorkspace { .. }
            | NotHostTool(_)
            | NoStateAt { .. }
            | NotConfirmed(_)
            | Running(_)
            | Locked(_)
            | StartedMeanwhile(_)
            | LowerBeingPrepared
            | LeasesUnreadable(_) => crate::exit::Exit::Usage.code(),
            Lock(_)
            | Helper(_)
            | FinishReset(_)
            | Reset(_)
            | SentinelKey(_)
            | Sticky(_)
            | RulesHistory { .. }
            | LowersLock(_)
            | TrashLower { .. }
            | AnchorDir(_)
            | Trash { .. }
            | Undeleted(_) => crate::exit::Exit::Failure.code(),
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use crate::display::escape_path;
        use StateError::*;
        match self {
            Args(e) => write!(f, "{e}"),
            UnknownArgument(a) => write!(f, "unknown argument {a:?}: see `lazaret help`"),
            NeedsCommand => {
                f.write_str("`lazaret state` needs a command: list, inspect, verify, reset or rotate-sentinels")
            }
            UnknownCommand(c) => {
                write!(
                    f,
                    "unknown state command {c:?}: expected list, inspect, diff, verify, reset, unhide or rotate-sentinels"
                )
            }
            ResetPathAndAll => f.write_str("pass --path P or --all, not both"),
            ResetWhat => f.write_str("say what to reset: --path P (one persistent path) or --all"),
            UnhideWhat => {
                f.write_str("say what to un-hide: --path P (a workspace path, relative or absolute) or --all")
            }
            DiffNeedsPath => f.write_str("`lazaret state diff` needs a PATH (a host-tool file)"),
            ApplyNeedsPath => f.write_str("`lazaret apply` needs a PATH (a host-tool file `lazaret changes` lists)"),
            Config(e) => write!(f, "{e}"),
            Dirs(e) | AnchorDir(e) => write!(f, "{e}"),
            NoState { id, root } => write!(
                f,
                "Domain {id} has no persistent state (no {}): see `lazaret state list`",
                root.display()
            ),
            NotInWorkspace { path, workspace } => write!(
                f,
                "{} is not inside the Domain's workspace {}",
                escape_path(path),
                escape_path(workspace)
            ),
            NotHostTool(rel) => write!(
                f,
                "{} is not a host-tool file of this Domain (see `lazaret state inspect`)",
                escape_path(rel)
            ),
            NoStateAt { path, id, have } => write!(
                f,
                "{path} has no persistent state in Domain {id}; persistent paths with state: {}",
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                }
            ),
            NotConfirmed(doing) => write!(f, "not {doing}: confirm with --yes (stdin is not a terminal)"),
            Running(id) => write!(
                f,
                "Domain {id} is running (its sessions use the state): end them or run `lazaret stop`, then retry"
            ),
            Locked(id) => write!(
                f,
                "Domain {id} is in use (another lazaret holds its lock): wait for it or run `lazaret stop`, then retry"
            ),
            StartedMeanwhile(id) => write!(f, "Domain {id} is running: run `lazaret stop`, then retry"),
            LowerBeingPrepared => {
                f.write_str("a Domain is preparing its lower right now: retry `lazaret image prune` in a moment")
            }
            LeasesUnreadable(which) => write!(
                f,
                "not pruning: the leases of some Domains cannot be read ({}); fix or stop them and retry",
                which.join("; ")
            ),
            Lock(e) => write!(f, "{e}"),
            Helper(e) => write!(f, "{e}"),
            FinishReset(e) => write!(f, "finishing an interrupted reset: {e}"),
            Reset(e) => write!(f, "reset: {e}"),
            SentinelKey(e) => write!(f, "rotating the sentinel key: {e}"),
            Sticky(e) => write!(f, "{e}"),
            RulesHistory { path, err } => write!(f, "{}: {err}", path.display()),
            LowersLock(e) => write!(f, "lowers lock: {e}"),
            TrashLower { id: name, err } | Trash { name, err } => write!(f, "{name}: {err}"),
            Undeleted(left) => write!(
                f,
                "could not delete all persistent state ({}); the Domain stays listed: retry `lazaret rm`",
                left.join("; ")
            ),
        }
    }
}

pub(super) type Result<T> = std::result::Result<T, StateError>;
