//! The workspace view: ignored state (`ignored`), attacks on it (`attacks`),
//! the view as a disk (`disk`), host edits seen inside (`hostwatch`), the
//! host-tool table's files (`host_tools`), random file operations checked
//! against a model (`fsx`).
pub mod attacks;
pub mod disk;
pub mod fsx;
pub mod host_tools;
pub mod hostwatch;
pub mod ignored;
