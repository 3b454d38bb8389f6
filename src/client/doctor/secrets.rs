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
    let mut n = 0;
    for p in cfg.profiles.values() {
        for s in &p.secrets {
            let value = match secrets::resolve(&p.name, s, |n| std::env::var_os(n)) {
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
