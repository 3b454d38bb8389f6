//! Lazaret: a daemonless CLI that runs AI coding agents inside a rootless
//! gVisor sandbox per (agent profile, workspace). See ARCHITECTURE.md.

mod cli;
mod config;
mod coordinator;
mod doctor;
mod domain;
mod image;
mod ipc;
mod netcli;
mod netns;
mod netpolicy;
mod netrole;
mod paths;
mod plan;
mod store;
mod supervisor;
mod sys;

fn main() {
    std::process::exit(cli::main());
}
