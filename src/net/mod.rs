//! The Network Sidecar: the derived policy (pure), its install in the
//! generation's namespaces (Runtime Supervisor side), the coordinator's side
//! of the role, and `lazaret net show`.

pub mod gate;
pub mod idle;
pub mod install;
pub mod policy;
pub mod show;
pub mod sidecar;
pub mod subst;
pub mod terminate;
pub mod tls;
