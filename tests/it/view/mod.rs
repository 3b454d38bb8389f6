//! The workspace view: ignored state (`ignored`), attacks on it (`attacks`),
//! the view as a disk (`disk`, `disk2`), host edits seen inside (`hostwatch`), the
//! host-tool table's files (`host_tools`), files both sides use at once
//! (`shared`: SQLite, logs), host and sandbox at once for a while (`soak`),
//! random file operations checked against a model (`fsx`).
pub mod attacks;
pub mod disk;
pub mod disk2;
pub mod fsx;
pub mod host_tools;
pub mod hostwatch;
pub mod ignored;
pub mod shared;
pub mod soak;
