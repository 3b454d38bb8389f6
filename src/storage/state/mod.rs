//! The `lazaret state` commands (`list`, `inspect`, `diff`, `verify`,
//! `reset`, `unhide`) on a Domain the client chose and parsed for
//! (`client/state.rs`), and the Domain metadata file they read.
//!
//! Domains are chosen by `--profile`/`--workspace` (the Domain ID is
//! derived) or by `--domain ID` (a prefix of an ID `list` prints); never
//! by a filesystem path. What a Domain is (profile, workspace, persistent
//! paths, lower) comes from `DOMAIN_ROOT/domain.json`, written only by the
//! Host Coordinator into the host-only Domain Root.
//!
//! Everything that reads inside an upper runs in the state helper
//! (`statefs`); this module does the host-side parts: selection, locking,
//! the reset journal (`anchor::reset`), and output.
//!
//! The files: `error`
//! (the commands' errors), `meta` (`domain.json`), `select` (opening and
//! locking a Domain), `disk` (what a Domain Root holds), `show` (`list`,
//! `inspect`, `diff`), `repair` (`verify`, `reset`, `unhide`).

mod disk;
mod error;
mod meta;
mod repair;
mod select;
mod show;
#[cfg(test)]
mod tests;

pub use self::disk::*;
pub use self::error::*;
pub use self::meta::*;
pub use self::repair::*;
pub use self::select::*;
pub use self::show::*;
