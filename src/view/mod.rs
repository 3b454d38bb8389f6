//! The workspace view: the filtering FUSE filesystem the Runtime Supervisor
//! serves as the workspace (`plan::workspace`), its change tracking, and the rules it enforces
//! (Git Sentry, repository shape, ignored workspace state).

pub mod budget;
pub mod counts;
pub mod fs;
pub mod gitshape;
pub mod hostexec;
pub mod hosttool;
pub mod ignored;
pub mod sentry;
pub mod watch;
