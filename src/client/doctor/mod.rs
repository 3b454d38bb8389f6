//! `lazaret doctor`: checks that this host can run rootless gVisor sandboxes
//! and prints the exact command that fixes each problem it finds.
//!
//! This file runs the checks in report order; each family lives in its own
//! file. Every check is independent; pure parts (version parsing,
//! subordinate id files, passwd/group lookups, JSON output) are separate
//! functions with unit tests. See docs/doctor.md.

pub(crate) mod check;
mod config;
mod git;
mod kernel;
mod programs;
mod report;
mod runtime_dir;
mod secrets;
mod subids;
mod target;

use check::Check;

use crate::client::args::finish_args;
use crate::client::failure::Failure;
use crate::sys::hostenv::parse_subids;
use config::{check_config, check_egress_by_name, check_egress_log_mode, check_resource_limits};
use git::{check_git_bare_repository, check_git_surface};
use kernel::{check_device, check_userns};
use programs::{check_idmap, check_runsc, check_tool};
use report::{to_json, to_text};
use runtime_dir::check_xdg_runtime_dir;
use secrets::check_secrets;
use subids::{check_subid, free_subid_start};
use target::{check_not_root, read_optional, Target};

/// `lazaret doctor [--json]`.
pub(crate) fn cmd(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    finish_args(args)?;
    Ok(run(json))
}

/// Runs every check and prints the report; returns the process exit code
/// (0 when every check passed, 1 otherwise).
pub fn run(json: bool) -> i32 {
    let checks = checks();
    if json {
        println!("{}", to_json(&checks));
    } else {
        print!("{}", to_text(&checks));
    }
    if checks.iter().all(|c| c.ok) {
        crate::exit::Exit::Success.code()
    } else {
        crate::exit::Exit::Problem.code()
    }
}

/// Runs every check, in report order.
pub fn checks() -> Vec<Check> {
    let target = Target::detect();
    let subuid = read_optional("/etc/subuid");
    let subgid = read_optional("/etc/subgid");
    let mut all_ranges = parse_subids(subuid.as_deref().unwrap_or(""));
    all_ranges.extend(parse_subids(subgid.as_deref().unwrap_or("")));
    let free = free_subid_start(&all_ranges);

    let mut out = vec![
        check_not_root(&target),
        check_subid(
            "subuid",
            "/etc/subuid",
            subuid.as_deref(),
            "--add-subuids",
            &target,
            free,
        ),
        check_subid(
            "subgid",
            "/etc/subgid",
            subgid.as_deref(),
            "--add-subgids",
            &target,
            free,
        ),
        check_idmap("newuidmap"),
        check_idmap("newgidmap"),
        check_userns(&target),
        check_device("dev-net-tun", "/dev/net/tun", (10, 200), &target),
        check_device("dev-fuse", "/dev/fuse", (10, 229), &target),
        check_runsc(),
    ];
    for h in crate::sys::hostenv::HELPERS {
        out.push(check_tool(h.prog, h.package, h.used_by));
    }
    out.push(check_xdg_runtime_dir(&target));
    out.push(check_config());
    out.push(check_secrets());
    out.push(check_egress_by_name());
    out.push(check_egress_log_mode());
    out.push(check_resource_limits());
    out.push(check_git_bare_repository(std::process::Command::new("git")));
    if let Ok(cwd) = std::env::current_dir() {
        out.push(check_git_surface(&cwd));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_has_a_fix_when_failing() {
        let all = checks();
        // Shown with `--nocapture`.
        print!("{}", to_text(&all));
        for c in all {
            assert!(c.ok || c.fix.as_deref().is_some_and(|f| !f.is_empty()), "{}", c.name);
            assert!(!c.detail.ends_with('.'), "{}", c.name);
        }
    }
}
