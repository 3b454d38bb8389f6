//! The workspace view: ignored state (`ignored`), attacks on it (`attacks`),
//! the view as a disk (`disk`), host edits seen inside (`hostwatch`).
pub mod attacks;
pub mod disk;
pub mod hostwatch;
pub mod ignored;
