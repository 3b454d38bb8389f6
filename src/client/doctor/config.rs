//! The checks of the config file and of what its profiles need from this
//! host: valid profiles, allow-by-name and log-mode egress in a throwaway
//! namespace, and a cgroup mechanism for resource limits.

use crate::client::doctor::check::Check;

/// Allow-by-name mode (`network.hosts`) needs the router namespace's
/// policy rules and a `local 0.0.0.0/0` route in its local table (docs/
/// network.md, "Egress by name"): tried in a throwaway user and network
/// namespace (`unshare -Urn`), no packet sent. Which profiles use it.
pub(super) fn check_egress_by_name() -> Check {
    let users: Vec<String> = crate::config::load(&crate::config::config_path())
        .map(|cfg| {
            cfg.profiles
                .values()
                .filter(|p| p.egress.gated())
                .map(|p| p.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let ip = crate::net::install::tool("ip");
    let script = format!(
        "{ip} rule add pref 20 lookup local suppress_prefixlength 0 && {ip} rule del pref 0 && \
         {ip} route add local 0.0.0.0/0 dev lo table local",
        ip = ip.display()
    );
    let tried = std::process::Command::new(crate::net::install::tool("unshare"))
        .args(["-Urn", "/bin/sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    let used = if users.is_empty() {
        "no profile uses it".to_string()
    } else {
        format!("used by profiles {}", users.join(", "))
    };
    match tried {
        Ok(o) if o.status.success() => Check::pass(
            "egress-by-name",
            format!("policy rules and a local default route work in a user-owned network namespace ({used})"),
        ),
        Ok(o) => {
            let detail = format!(
                "allow-by-name mode (network.hosts) cannot install its router rules: {} ({used})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            if users.is_empty() {
                Check::warning(
                    "egress-by-name",
                    detail,
                    "install iproute2 with policy routing (ip rule)",
                )
            } else {
                Check::fail(
                    "egress-by-name",
                    detail,
                    "install iproute2 with policy routing (ip rule)",
                )
            }
        }
        Err(e) => Check::warning(
            "egress-by-name",
            format!("cannot try allow-by-name mode's router rules (unshare: {e}) ({used})"),
            "install util-linux (unshare) to check",
        ),
    }
}

/// `network.mode = "log"` needs `nft` and the kernel's `tproxy` for its
/// catch-all (docs/network.md, "Egress by name"): the rule is installed
/// in a throwaway user and network namespace (`unshare -Urn`, `nft -f -`),
/// no packet sent. Which profiles use log mode.
pub(super) fn check_egress_log_mode() -> Check {
    let users: Vec<String> = crate::config::load(&crate::config::config_path())
        .map(|cfg| {
            cfg.profiles
                .values()
                .filter(|p| p.egress == crate::config::EgressMode::Log)
                .map(|p| p.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let used = if users.is_empty() {
        "no profile uses it".to_string()
    } else {
        format!("used by profiles {}", users.join(", "))
    };
    let sample = crate::net::policy::GatePlan {
        log_only: true,
        hosts: vec![],
        upstream: vec![],
        forwarded: vec![],
        idle_timeout_s: crate::config::DEFAULT_IDLE_TIMEOUT_S,
    };
    // The rule names the router's links: a veth pair stands in for them.
    let script = format!(
        "{ip} link add {tap} type veth peer name {rif} && {nft} -f -",
        ip = crate::net::install::tool("ip").display(),
        nft = crate::net::install::tool("nft").display(),
        tap = crate::net::policy::TAP,
        rif = crate::net::policy::ROUTER_IF,
    );
    let tried = std::process::Command::new(crate::net::install::tool("unshare"))
        .args(["-Urn", "/bin/sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            let rules = crate::net::install::catch_all_rules(&sample, 1);
            // unshare fails at once when it cannot run sh: the write
            // must not end doctor with SIGPIPE.
            let _ = crate::sys::without_sigpipe(|| c.stdin.take().map(|mut i| i.write_all(rules.as_bytes())));
            c.wait_with_output()
        });
    let fix = "install nftables (scripts/install-deps.sh) on a kernel with nft_tproxy";
    match tried {
        Ok(o) if o.status.success() => Check::pass(
            "egress-log-mode",
            format!("nft can install log mode's catch-all (tproxy) in a user-owned network namespace ({used})"),
        ),
        Ok(o) => {
            let detail = format!(
                "network.mode = \"log\" cannot install its catch-all rule, so a Domain in log mode will not start: {} ({used})",
                String::from_utf8_lossy(&o.stderr).trim().replace('\n', "; ")
            );
            if users.is_empty() {
                Check::warning("egress-log-mode", detail, fix)
            } else {
                Check::fail("egress-log-mode", detail, fix)
            }
        }
        Err(e) => {
            let detail = format!(
                "network.mode = \"log\" needs nft, which cannot be run, so a Domain in log mode will not start ({e}) ({used})"
            );
            if users.is_empty() {
                Check::warning("egress-log-mode", detail, fix)
            } else {
                Check::fail("egress-log-mode", detail, fix)
            }
        }
    }
}

/// The config file parses and every profile in it is valid.
pub(super) fn check_config() -> Check {
    let path = crate::config::config_path();
    match crate::config::load(&path) {
        Err(e) => Check::fail("config", e.to_string(), format!("correct {}", path.display())),
        Ok(cfg) => match cfg.broken_profiles.values().next() {
            Some(e) => Check::fail(
                "config",
                e.to_string(),
                format!("correct {} (only that profile is unusable until then)", path.display()),
            ),
            None if cfg.exists => Check::pass("config", format!("{} is valid", path.display())),
            None => Check::pass("config", format!("no {} (built-in defaults)", path.display())),
        },
    }
}

/// Which cgroup mechanism would bound a Domain started from here
/// (`cgroup::detect`), or why none and the exact fix (a warning: Domains
/// run without limits).
pub(super) fn check_resource_limits() -> Check {
    let m = crate::storage::cgroup::detect();
    match &m {
        // Sandboxes still run (unbounded, with a warning): a warning, not
        // a failure; only profiles that set [limits] are refused.
        crate::storage::cgroup::Mechanism::Unavailable { why, fix } => Check::warning(
            "resource-limits",
            format!("no mechanism to enforce memory/pids/cpus limits: {why}; profiles that set [limits] are refused"),
            fix.clone(),
        ),
        _ => Check::pass("resource-limits", m.describe()),
    }
}
