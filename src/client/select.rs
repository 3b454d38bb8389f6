//! Naming a Domain, the same way for every command that takes one: an ID
//! prefix among the Domains that run or have state, or `--profile` and
//! `--workspace`, from which the ID is derived (the profile need not be
//! valid in today's configuration). One set of messages.

use std::path::{Path, PathBuf};

use crate::client::failure::Failure;
use crate::config;
use crate::domain::{self, DomainId};

/// How a command named its Domain.
pub(crate) enum Named {
    /// An ID or a prefix of one.
    Id(String),
    /// `--profile` (default: the default profile) on `--workspace`
    /// (default: the current directory).
    Derived {
        profile: Option<String>,
        workspace: Option<PathBuf>,
    },
}

/// `-p/--profile` and `-w/--workspace`, as given.
pub(crate) type Names = (Option<String>, Option<PathBuf>);

/// Reads `-p/--profile` and `-w/--workspace` from `args`.
pub(crate) fn name_args(args: &mut pico_args::Arguments) -> Result<Names, Failure> {
    Ok((
        args.opt_value_from_str(["-p", "--profile"])?,
        args.opt_value_from_str(["-w", "--workspace"])?,
    ))
}

/// `id` (positional or `--domain`) or the profile and workspace: the
/// Domain is named one way.
pub(crate) fn named(id: Option<String>, (profile, workspace): Names) -> Result<Named, Failure> {
    match id {
        Some(_) if profile.is_some() || workspace.is_some() => Err(Failure::NameOneWay { all: false }),
        Some(id) => Ok(Named::Id(id)),
        None => Ok(Named::Derived { profile, workspace }),
    }
}

/// The derived Domain: its ID, profile name and canonical workspace.
pub(crate) fn derived(
    profile: Option<String>,
    workspace: Option<PathBuf>,
) -> Result<(DomainId, String, PathBuf), Failure> {
    let name = profile.unwrap_or_else(|| config::DEFAULT_PROFILE.into());
    let dir = match workspace {
        Some(w) => w,
        None => std::env::current_dir().map_err(Failure::CurrentDir)?,
    };
    let ws = domain::canonical_workspace(&dir)?;
    Ok((domain::domain_id(&name, &ws), name, ws))
}

/// A Domain that has state under `storage`: by a prefix of its ID, or
/// derived (whether or not it has state; the caller says what is missing).
pub(crate) fn stored(named: Named, storage: &Path) -> Result<DomainId, Failure> {
    match named {
        Named::Id(p) => Ok(match_prefix(&p, &with_state(storage), "stored")?.clone()),
        Named::Derived { profile, workspace } => derived(profile, workspace).map(|(id, _, _)| id),
    }
}

/// The one ID among `ids` that starts with `prefix` (pure); `what` says
/// which Domains were searched ("running" or "stored").
pub fn match_prefix<'a>(prefix: &str, ids: &'a [DomainId], what: &str) -> Result<&'a DomainId, Failure> {
    if prefix.is_empty()
        || prefix.len() > 20
        || !prefix.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Failure::NotADomainId(prefix.to_string()));
    }
    let hits: Vec<&DomainId> = ids.iter().filter(|i| i.as_str().starts_with(prefix)).collect();
    match hits.as_slice() {
        [one] => Ok(one),
        [] => Err(Failure::NoDomain {
            what: what.to_string(),
            prefix: prefix.to_string(),
        }),
        many => Err(Failure::Ambiguous {
            prefix: prefix.to_string(),
            ids: many.iter().map(|s| s.as_str().to_string()).collect(),
        }),
    }
}

/// The Domains with a Domain Root under `storage`, sorted.
pub(crate) fn with_state(storage: &Path) -> Vec<DomainId> {
    let mut ids: Vec<DomainId> = std::fs::read_dir(storage.join("domains"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .filter_map(|e| DomainId::parse(&e.file_name().to_string_lossy()).ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_resolve_uniquely() {
        let ids: Vec<DomainId> = ["abcdef0123456789abcd", "abd00000000000000000"]
            .iter()
            .map(|i| DomainId::parse(i).unwrap())
            .collect();
        assert_eq!(match_prefix("abc", &ids, "running").unwrap(), &ids[0]);
        assert!(match_prefix("ab", &ids, "running")
            .unwrap_err()
            .to_string()
            .contains("ambiguous"));
        assert!(match_prefix("ff", &ids, "running")
            .unwrap_err()
            .to_string()
            .contains("lazaret ps"));
        assert!(match_prefix("../x", &ids, "running")
            .unwrap_err()
            .to_string()
            .contains("not a Domain ID"));
        assert!(match_prefix("", &ids, "running").is_err());
        assert_eq!(match_prefix("abcdef0123456789abcd", &ids, "running").unwrap(), &ids[0]);
    }
}
