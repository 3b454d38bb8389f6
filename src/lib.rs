//! Lazaret's library: a daemonless CLI that runs AI coding agents inside a rootless
//! gVisor sandbox per (agent profile, workspace). See ARCHITECTURE.md.
//!
//! One folder per process role (client, coordinator, supervisor), the
//! parts they share (config, plan, wire, storage, view, net) and the thin
//! syscall layer (sys). The binaries are thin: `src/main.rs` (the
//! `lazaret` CLI and every host-side role) and `bin/` (the sandbox side).

mod build_info;
mod client;
mod config;
mod coordinator;
pub mod display;
mod domain;
pub mod escalation;
mod exit;
mod export;
/// Fuzz targets: tests/fuzz (the coverage-guided harness) and
/// tests/fuzz_replay.rs (the corpora, replayed) call them.
#[doc(hidden)]
pub mod fuzzing;
mod net;
mod plan;
/// Expected-output files of the user-facing text (tests/snapshots/).
#[cfg(test)]
mod snapshot;
// The host side of the sandbox's SSH agent (issue 51): parser, host-key
// binding, known_hosts, decision and the calls to the developer's agent.
mod sshagent;
mod storage;
mod supervisor;
mod sys;
mod trace;
mod view;
mod wire;

/// The `lazaret` binary: parses the command line and runs it.
pub fn main() -> i32 {
    client::dispatch::main()
}

// For the sandbox-side binaries (bin/): the pure modules they share
// (`display` and `escalation` above, the Trust Anchor's session side,
// which links no OpenSSL, the messages `lazaret-init` sends to the host and
// the Escalation Mailbox's records). `trust` is the host's side.
pub mod session_key;
pub mod trust;
/// The host-tool table and its matcher: tests/it/view/host_tools.rs
/// iterates the table.
#[doc(hidden)]
pub use crate::view::hosttool;
pub use crate::wire::guest;
pub use crate::wire::mailbox;
