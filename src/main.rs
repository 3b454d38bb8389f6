//! Lazaret: a daemonless CLI that runs AI coding agents inside a rootless
//! gVisor sandbox per (agent profile, workspace). See ARCHITECTURE.md.

fn main() {
    std::process::exit(lazaret::main());
}
