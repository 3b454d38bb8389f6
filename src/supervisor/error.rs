//! The supervisor's errors: a variant per failing step, carrying the
//! io error (and the path, where there is one). `Display` is the sentence
//! the supervisor reports on the status pipe.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::wire::supervisor::LeaseError;
use crate::wire::FileError;

#[derive(Debug)]
pub enum SupervisorError {
    /// The network plan could not be read.
    NetPlan(FileError),
    /// `prctl(PR_SET_PDEATHSIG)`.
    DeathSignal(io::Error),
    /// `unshare(user, mount[, net])`.
    Unshare(io::Error),
    /// Taking the inherited lease pipe.
    LeasePipe(io::Error),
    /// The coordinator did not write the id maps.
    Lease(LeaseError),
    /// The secrets the lease pipe carried do not load into the gate.
    Secrets(crate::trust::TrustError),
    /// `setresuid` to root of the user namespace.
    BecomeRoot(io::Error),
    /// Making mounts private.
    MakePrivate(io::Error),
    /// Masking `/proc/sys/net/core`.
    MaskCore(io::Error),
    /// Binding the meminfo view over `/proc/meminfo`.
    Meminfo(PathBuf, io::Error),
    /// Mounting the mailbox's bounded `requests/` tmpfs.
    MailboxTmpfs(PathBuf, io::Error),
    ScratchTmpfs(PathBuf, io::Error),
    /// Mounting the State Anchor.
    Anchor(crate::storage::anchor::AnchorError),
    /// Installing the network.
    Network(crate::net::install::InstallError),
    /// Starting the workspace views.
    Views(crate::view::fs::serve::ViewError),
    /// The pipe runsc reports `ready` on.
    ReadyPipe(io::Error),
    /// The boot request the coordinator wrote cannot be opened.
    BootRequest(PathBuf, io::Error),
    /// Spawning `runsc run`.
    StartRunsc(io::Error),
    /// The signal pipe of the supervise loop.
    SignalPipe(io::Error),
    /// The start time of `runsc run` (its identity) is unreadable.
    StartTime(i32),
    /// The sandbox's init reported something other than `Ready`.
    InitReport(crate::wire::guest::InitError),
}

impl fmt::Display for SupervisorError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use SupervisorError::*;
        match self {
            NetPlan(e) => write!(f, "reading the network plan: {e}"),
            DeathSignal(e) => write!(f, "prctl(PR_SET_PDEATHSIG): {e}"),
            Unshare(e) => write!(f, "unshare(user, mount, net): {e} (run `lazaret doctor`)"),
            LeasePipe(e) => write!(f, "the lease pipe (fd {}): {e}", super::LEASE_FD),
            Lease(e) => write!(f, "{e}"),
            Secrets(e) => write!(f, "loading the secrets into the egress gate: {e}"),
            BecomeRoot(e) => write!(f, "setresuid in the user namespace: {e}"),
            MakePrivate(e) => write!(f, "making mounts private: {e}"),
            MaskCore(e) => write!(f, "masking /proc/sys/net/core: {e}"),
            Meminfo(p, e) => write!(f, "binding {} over /proc/meminfo: {e}", p.display()),
            MailboxTmpfs(p, e) => write!(f, "mounting a bounded tmpfs on {}: {e}", p.display()),
            ScratchTmpfs(p, e) => write!(f, "mounting the bounded root overlay store on {}: {e}", p.display()),
            Anchor(e) => write!(f, "{e}"),
            Network(e) => write!(f, "{e}"),
            Views(e) => write!(f, "{e}"),
            ReadyPipe(e) => write!(f, "pipe: {e}"),
            BootRequest(p, e) => write!(f, "cannot read init's boot request {}: {e}", p.display()),
            StartRunsc(e) => write!(f, "cannot start runsc: {e} (run `lazaret doctor`)"),
            SignalPipe(e) => write!(f, "signal pipe: {e}"),
            StartTime(pid) => write!(f, "cannot read the start time of runsc run (pid {pid})"),
            InitReport(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SupervisorError {}
