//! The start-time check of a profile's `secrets` (docs/config.md): each
//! source must resolve on the host, and each secret needs a working swap
//! point before its sentinel may be put in a session's environment.

use crate::client::cli::{Failure, Resolved};
use crate::config::secrets;

/// Resolves every secret of the profile (the values are dropped, wiped,
/// right away: this only proves they resolve) and refuses the start when
/// one does not, naming the secret and its source (exit 2, nothing
/// started).
///
/// Then it refuses any profile with secrets: this build has no egress gate
/// to swap sentinels for values at (issue "Egress by name"), and a
/// sentinel without a swap point would only break the agent silently.
pub(crate) fn check_start(r: &Resolved) -> Result<(), Failure> {
    if r.profile.secrets.is_empty() {
        return Ok(());
    }
    for s in &r.profile.secrets {
        secrets::resolve(&r.profile.name, s, |n| std::env::var_os(n)).map_err(|e| Failure::usage(e.to_string()))?;
    }
    secrets::check_hosts(&r.cfg.path, &r.profile.name, &r.profile.secrets, network_hosts_allow)
        .map_err(|e| Failure::usage(e.to_string()))?;
    Err(Failure::usage(not_wired(&r.profile.name, &r.profile.secrets)))
}

/// Whether the profile's `network.hosts` allows `name`. This build has no
/// `network.hosts` (allow-by-name mode), so no name is allowed.
fn network_hosts_allow(_name: &str) -> bool {
    false
}

fn not_wired(profile: &str, s: &[secrets::Secret]) -> String {
    let vars: Vec<&str> = s.iter().map(|s| s.var.as_str()).collect();
    format!(
        "profile {profile:?} binds secrets ({}), but this build of Lazaret has no egress gate to swap them in at, \
         so the agent would only see sentinels: remove [profiles.{profile}.secrets] (or use pass_env) until it has",
        vars.join(", ")
    )
}

/// `lazaret doctor`: every secret of every usable profile resolves from
/// here (values are wiped right after; none is printed).
pub(crate) fn doctor_check() -> crate::client::doctor::Check {
    use crate::client::doctor::Check;
    let path = crate::config::config_path();
    let Ok(cfg) = crate::config::load(&path) else {
        return Check::pass("secrets", "no config to check (see the config check)");
    };
    let mut n = 0;
    for p in cfg.profiles.values() {
        for s in &p.secrets {
            if let Err(e) = secrets::resolve(&p.name, s, |n| std::env::var_os(n)) {
                return Check::fail(
                    "secrets",
                    e.to_string(),
                    format!("make the source give a value, or change `from` in {}", path.display()),
                );
            }
            n += 1;
        }
    }
    if n == 0 {
        Check::pass("secrets", "no profile binds secrets")
    } else {
        Check::pass("secrets", format!("{n} secret source(s) resolve (values not shown)"))
    }
}
