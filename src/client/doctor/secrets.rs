//! The doctor's secrets check: every profile's secret sources resolve on
//! this host and the swap path works (docs/doctor.md).

use super::check::Check;
use crate::client::secrets::swap_self_check;
use crate::config::secrets;

/// `lazaret doctor`: every secret of every usable profile resolves from
/// here (values are wiped right after; none is printed).
pub(super) fn check_secrets() -> Check {
    let path = crate::config::config_path();
    let Ok(cfg) = crate::config::load(&path) else {
        return Check::pass("secrets", "no config to check (see the config check)");
    };
    // The workspace a `lazaret run` here would use, when there is one.
    // (`run` refuses home, and any directory holding it, as a workspace.)
    let home = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok());
    let workspace = std::env::current_dir()
        .ok()
        .and_then(|d| crate::domain::canonical_workspace(&d).ok())
        .filter(|w| !home.as_deref().is_some_and(|h| h.starts_with(w)));
    let storage = crate::storage::paths::storage_root().ok();
    let runtime = crate::storage::paths::runtime_root(cfg.runtime_dir.as_deref());
    let host = crate::config::secret_sources::SourceHost::here(
        &cfg,
        crate::client::secrets::fence(&cfg, workspace.as_deref(), storage.as_deref(), Some(&runtime)),
    );
    let mut n = 0;
    for p in cfg.profiles.values() {
        for s in &p.secrets {
            let value = match secrets::resolve(&p.name, s, &host) {
                Ok(v) => v,
                Err(e) => {
                    return Check::fail(
                        "secrets",
                        e.to_string(),
                        format!("make the source give a value, or change `from` in {}", path.display()),
                    )
                }
            };
            if let Err(why) = swap_self_check(s, value) {
                return Check::fail(
                    "secrets",
                    format!(
                        "secret {} of profile {:?}: the swap self-check failed: {why}",
                        s.var, p.name
                    ),
                    "report this as a bug (the host's OpenSSL may be unusable)",
                );
            }
            n += 1;
        }
    }
    if n == 0 {
        Check::pass("secrets", "no profile binds secrets")
    } else {
        Check::pass(
            "secrets",
            format!("{n} secret source(s) resolve, and the swap self-check passed (values not shown)"),
        )
    }
}
