//! Lazaret: a daemonless CLI that runs AI coding agents inside a rootless
//! gVisor sandbox per (agent profile, workspace). See ARCHITECTURE.md.

mod anchor;
mod cli;
mod config;
mod coordinator;
mod doctor;
mod domain;
mod gc;
mod image;
mod ipc;
mod paths;
mod plan;
mod state;
mod statefs;
mod store;
mod supervisor;
mod sys;

fn main() {
    std::process::exit(cli::main());
}
