//! Lazaret: a daemonless CLI that runs AI coding agents inside a rootless
//! gVisor sandbox per (agent profile, workspace). See ARCHITECTURE.md.

mod anchor;
mod broker;
mod cgroup;
mod cli;
mod config;
mod coordinator;
mod display;
mod doctor;
mod domain;
// Shared with the lazaret-escalate binary, which uses the other half.
#[allow(dead_code)]
mod escalation;
mod fusecount;
mod fusefs;
mod fusewatch;
mod gc;
mod gitsentry;
mod gitshape;
mod guestsetup;
mod hostenv;
mod ignored;
mod image;
mod imagegc;
mod ipc;
mod layercheck;
mod lifecycle;
mod netcli;
mod netns;
mod netpolicy;
mod netrole;
mod nospace;
mod passenv;
mod paths;
mod plan;
mod ports;
mod state;
mod statefs;
mod store;
mod supervisor;
mod sys;
mod trust;
mod usage;
mod wire;

fn main() {
    std::process::exit(cli::main());
}
