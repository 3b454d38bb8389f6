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
/// The checks `lazaret doctor` runs, in its order, around one check per
/// helper program of [`crate::sys::hostenv::HELPERS`] (at `HELPERS_AT`).
/// docs/doctor.md's table lists the same, and `checks()` makes exactly
/// these (unit tests hold both).
pub const CHECK_NAMES: &[&str] = &[
    "not-root",
    "subuid",
    "subgid",
    "newuidmap",
    "newgidmap",
    "userns",
    "dev-net-tun",
    "dev-fuse",
    "runsc",
    HELPERS_AT,
    "xdg-runtime-dir",
    "config",
    "secrets",
    "egress-by-name",
    "egress-log-mode",
    "resource-limits",
    "git-safe-bare-repository",
    "git-execution-surface",
];

/// Where in [`CHECK_NAMES`] the helper programs' checks go.
pub const HELPERS_AT: &str = "<helpers>";

/// Every check's name, the helpers' in place.
pub fn check_names() -> Vec<&'static str> {
    CHECK_NAMES
        .iter()
        .flat_map(|n| {
            if *n == HELPERS_AT {
                crate::sys::hostenv::HELPERS.iter().map(|h| h.prog).collect()
            } else {
                vec![*n]
            }
        })
        .collect()
}

pub fn checks() -> Vec<Check> {
    let target = Target::detect();
    let [subuid, subgid] = subid_checks(
        &target,
        read_optional("/etc/subuid").as_deref(),
        read_optional("/etc/subgid").as_deref(),
    );
    let mut out = vec![
        check_not_root(&target),
        subuid,
        subgid,
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
    debug_assert_eq!(out.iter().map(|c| c.name).collect::<Vec<_>>(), check_names());
    out
}

/// The subuid and subgid checks, given the two files' contents (`None`:
/// missing or unreadable).
fn subid_checks(target: &Target, subuid: Option<&str>, subgid: Option<&str>) -> [Check; 2] {
    let mut all_ranges = parse_subids(subuid.unwrap_or(""));
    all_ranges.extend(parse_subids(subgid.unwrap_or("")));
    let free = free_subid_start(&all_ranges);
    [
        check_subid("subuid", "/etc/subuid", subuid, "--add-subuids", target, free),
        check_subid("subgid", "/etc/subgid", subgid, "--add-subgids", target, free),
    ]
}

/// The first failing subid check as the failure (exit 2).
fn subid_failure(checks: [Check; 2]) -> Result<(), Failure> {
    match checks.into_iter().find(|c| !c.ok) {
        Some(c) => Err(Failure::NoSubids {
            detail: c.detail,
            fix: c.fix.unwrap_or_default(),
        }),
        None => Ok(()),
    }
}

/// Run before any image work (an image build, a Domain's first start):
/// the user namespaces of the build and of the sandbox map the user's
/// subordinate ids, so without a range nothing is started. The same
/// checks as `lazaret doctor`'s subuid and subgid lines.
pub(crate) fn require_subids() -> Result<(), Failure> {
    subid_failure(subid_checks(
        &Target::detect(),
        read_optional("/etc/subuid").as_deref(),
        read_optional("/etc/subgid").as_deref(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/doctor.md's table has a row for every check and for no other.
    #[test]
    fn the_docs_table_lists_every_check() {
        let doc = include_str!("../../../docs/doctor.md");
        let mut documented: Vec<String> = doc
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| {
                l[2..]
                    .split(" |")
                    .next()
                    .unwrap_or("")
                    .split(", ")
                    .map(|n| n.trim_matches('`').to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        documented.sort();
        let mut names: Vec<String> = check_names().iter().map(|s| s.to_string()).collect();
        names.sort();
        assert_eq!(documented, names, "docs/doctor.md's table vs doctor::CHECK_NAMES");
    }

    /// `checks()` makes exactly the listed checks, in order (they only read
    /// and try things in throwaway namespaces).
    #[test]
    fn doctor_runs_exactly_the_listed_checks() {
        let got: Vec<&str> = checks().iter().map(|c| c.name).collect();
        assert_eq!(got, check_names());
    }

    #[test]
    fn missing_subids_fail_before_image_work_with_the_fix() {
        // A uid no passwd names: its ranges match by the uid written out.
        let t = Target {
            mode: target::Mode::User,
            uid: 3_999_999,
            gid: 3_999_999,
            name: None,
            groups: vec![],
        };
        let good = "3999999:100000:65536\n";
        assert!(subid_failure(subid_checks(&t, Some(good), Some(good))).is_ok());
        let other = "someone:100000:65536\n";
        let Err(f) = subid_failure(subid_checks(&t, Some(other), Some(good))) else {
            panic!("no subuid range passed");
        };
        assert_eq!(f.code(), 2);
        let msg = f.to_string();
        assert!(msg.contains("/etc/subuid") && msg.contains("uid 3999999"), "{msg}");
        assert!(msg.contains("sudo usermod --add-subuids 165536-231071"), "{msg}");
        assert!(msg.contains("nothing was started"), "{msg}");
        // A missing /etc/subgid is named as such.
        let Err(f) = subid_failure(subid_checks(&t, Some(good), None)) else {
            panic!("no /etc/subgid passed");
        };
        let msg = f.to_string();
        assert!(msg.contains("/etc/subgid does not exist"), "{msg}");
        assert!(msg.contains("--add-subgids"), "{msg}");
        // Too small a range fails too.
        let small = "3999999:100000:1000\n";
        assert!(subid_failure(subid_checks(&t, Some(good), Some(small))).is_err());
    }

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
