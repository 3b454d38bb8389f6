//! `lazaret state list|inspect|diff|verify|reset|unhide`: this file parses
//! the command line and dispatches; the commands and the Domain metadata
//! file they resolve Domains through live in the files below.
//!
//! Domains are chosen by `--profile`/`--workspace` (the Domain ID is
//! derived) or by `--domain ID` as `list` prints it; never by a
//! filesystem path. What a Domain is (profile, workspace, persistent
//! paths, lower) comes from `DOMAIN_ROOT/domain.json`, written only by the
//! Host Coordinator into the host-only Domain Root.
//!
//! Everything that reads inside an upper runs in the state helper
//! (`statefs`); this module does the host-side parts: selection, locking,
//! the reset journal (`anchor::reset`), and output.
//!
//! The files: `error`
//! (the commands' errors), `meta` (`domain.json`), `select` (choosing and
//! locking a Domain), `disk` (what a Domain Root holds), `show` (`list`,
//! `inspect`, `diff`), `repair` (`verify`, `reset`, `unhide`).

use std::path::PathBuf;

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

// ---- the commands --------------------------------------------------------------------------

pub fn cmd(mut raw: Vec<std::ffi::OsString>) -> Result<i32> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    match sub.as_ref().and_then(|s| s.to_str()) {
        Some("list") => {
            finish(args)?;
            list(json)
        }
        Some("inspect") => {
            let (p, w, d) = domain_args(&mut args)?;
            finish(args)?;
            inspect(select(p, w, d)?, json)
        }
        Some("verify") => {
            let (p, w, d) = domain_args(&mut args)?;
            finish(args)?;
            verify(select(p, w, d)?, json)
        }
        Some("reset") => {
            let (p, w, d) = domain_args(&mut args)?;
            let all = args.contains("--all");
            let yes = args.contains("--yes");
            let path: Option<String> = args.opt_value_from_str("--path").map_err(StateError::Args)?;
            finish(args)?;
            let scope = match (path, all) {
                (Some(_), true) => return Err(StateError::ResetPathAndAll),
                (Some(p), false) => Some(p),
                (None, true) => None,
                (None, false) => return Err(StateError::ResetWhat),
            };
            reset(select(p, w, d)?, scope, yes, json)
        }
        Some("unhide") => {
            let (p, w, d) = domain_args(&mut args)?;
            let all = args.contains("--all");
            let path: Option<PathBuf> = args
                .opt_value_from_os_str("--path", |v| Ok::<_, std::convert::Infallible>(PathBuf::from(v)))
                .map_err(StateError::Args)?;
            finish(args)?;
            if path.is_some() == all {
                return Err(StateError::UnhideWhat);
            }
            unhide(select(p, w, d)?, path, json)
        }
        Some("diff") => {
            let (p, w, d) = domain_args(&mut args)?;
            let path: PathBuf = args
                .free_from_os_str(|v| Ok::<_, std::convert::Infallible>(PathBuf::from(v)))
                .map_err(|_| StateError::DiffNeedsPath)?;
            finish(args)?;
            diff(select(p, w, d)?, path)
        }
        Some(other) => Err(StateError::UnknownCommand(other.to_string())),
        None => Err(StateError::NeedsCommand),
    }
}
