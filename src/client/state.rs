//! `lazaret state list|inspect|diff|verify|reset|unhide|rotate-sentinels`, `lazaret
//! changes` and `lazaret apply`: their command lines, the Domain it names (`client::select`), and the command in
//! `storage::state`.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::client::failure::Failure;
use crate::client::select;
use crate::storage::paths;
use crate::storage::state::{self, Selected, StateError};

pub(super) fn cmd_state(mut raw: Vec<OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    let r = match sub.as_ref().and_then(|s| s.to_str()) {
        Some("list") => {
            finish(args)?;
            state::list(json)
        }
        Some("inspect") => {
            let named = domain_args(&mut args)?;
            finish(args)?;
            state::inspect(chosen(named)?, json)
        }
        Some("verify") => {
            let named = domain_args(&mut args)?;
            finish(args)?;
            state::verify(chosen(named)?, json)
        }
        Some("reset") => {
            let named = domain_args(&mut args)?;
            let all = args.contains("--all");
            let yes = args.contains("--yes");
            let path: Option<String> = args.opt_value_from_str("--path").map_err(StateError::Args)?;
            finish(args)?;
            let scope = match (path, all) {
                (Some(_), true) => return Err(StateError::ResetPathAndAll.into()),
                (Some(p), false) => Some(p),
                (None, true) => None,
                (None, false) => return Err(StateError::ResetWhat.into()),
            };
            state::reset(chosen(named)?, scope, yes, json)
        }
        Some("rotate-sentinels") => {
            let named = domain_args(&mut args)?;
            finish(args)?;
            state::rotate_sentinels(chosen(named)?, json)
        }
        Some("unhide") => {
            let named = domain_args(&mut args)?;
            let all = args.contains("--all");
            let path: Option<PathBuf> = args
                .opt_value_from_os_str("--path", |v| Ok::<_, std::convert::Infallible>(PathBuf::from(v)))
                .map_err(StateError::Args)?;
            finish(args)?;
            if path.is_some() == all {
                return Err(StateError::UnhideWhat.into());
            }
            state::unhide(chosen(named)?, path, json)
        }
        Some("diff") => {
            let named = domain_args(&mut args)?;
            let path: PathBuf = args
                .free_from_os_str(|v| Ok::<_, std::convert::Infallible>(PathBuf::from(v)))
                .map_err(|_| StateError::DiffNeedsPath)?;
            finish(args)?;
            state::diff(chosen(named)?, path)
        }
        Some(other) => Err(StateError::UnknownCommand(other.to_string())),
        None => Err(StateError::NeedsCommand),
    };
    r.map_err(Failure::from)
}

/// `lazaret changes [DOMAIN] [--json]`: the Domain's host-tool copies that
/// differ from the host's.
pub(super) fn cmd_changes(raw: Vec<OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    let named = domain_args(&mut args)?;
    finish(args)?;
    Ok(state::changes(chosen(named)?, json)?)
}

/// `lazaret apply [DOMAIN] PATH…`: copies reviewed host-tool copies to the
/// host.
pub(super) fn cmd_apply(raw: Vec<OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let named = domain_args(&mut args)?;
    let paths: Vec<PathBuf> = args.finish().into_iter().map(PathBuf::from).collect();
    if let Some(p) = paths.iter().find(|p| p.to_string_lossy().starts_with('-')) {
        return Err(StateError::UnknownArgument(p.to_string_lossy().into_owned()).into());
    }
    if paths.is_empty() {
        return Err(StateError::ApplyNeedsPath.into());
    }
    Ok(state::apply(chosen(named)?, paths)?)
}

/// `--profile`/`--workspace` or `--domain ID`.
fn domain_args(args: &mut pico_args::Arguments) -> Result<(Option<String>, select::Names), Failure> {
    let names = select::name_args(args).map_err(|e| match e {
        Failure::Args(a) => Failure::State(StateError::Args(a)),
        e => e,
    })?;
    let id: Option<String> = args.opt_value_from_str("--domain").map_err(StateError::Args)?;
    Ok((id, names))
}

/// The Domain named, opened with its state.
fn chosen((id, names): (Option<String>, select::Names)) -> Result<Selected, Failure> {
    let named = select::named(id, names)?;
    let storage = paths::storage_root()?;
    Ok(state::open(select::stored(named, &storage)?)?)
}

fn finish(args: pico_args::Arguments) -> Result<(), StateError> {
    if let Some(a) = args.finish().first() {
        return Err(StateError::UnknownArgument(a.to_string_lossy().into_owned()));
    }
    Ok(())
}
