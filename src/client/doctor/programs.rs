//! The host programs Lazaret runs: newuidmap/newgidmap (setuid or file
//! capabilities), runsc (its release) and the plain helpers, each found on
//! the `PATH` Lazaret uses or named with its fix.

use std::env;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::client::doctor::check::{err_text, Check};
use crate::client::doctor::target::read_optional;

/// Oldest runsc release Lazaret supports.
pub const MIN_RUNSC_DATE: u32 = 20240729;
/// Where a helper that is not on the `PATH` may be, to name it in the fix.
const FALLBACK_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// Finds an executable on the `PATH` Lazaret runs its helpers with (the
/// caller's plus the sbin directories, see `hostenv`). A program that is
/// only in one of [`FALLBACK_DIRS`] is not found: Lazaret would not find it
/// either.
fn find_program(prog: &str) -> Option<(PathBuf, bool)> {
    crate::sys::hostenv::find(prog).map(|p| (p, true))
}

/// Where `prog` is when it is not on the `PATH`, to say so in the fix.
fn find_off_path(prog: &str) -> Option<PathBuf> {
    FALLBACK_DIRS
        .iter()
        .map(|d| Path::new(d).join(prog))
        .find(|c| is_executable(c))
}

/// The fix for a helper that is not on the `PATH`.
fn missing_fix(prog: &str, pkg: &str) -> String {
    match find_off_path(prog) {
        Some(p) => format!(
            "{} is not on your PATH: add {} to PATH (export PATH=\"$PATH:{}\")",
            p.display(),
            p.parent().unwrap_or(Path::new("/")).display(),
            p.parent().unwrap_or(Path::new("/")).display()
        ),
        None => format!("sudo apt-get install {pkg}"),
    }
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p)
        .map(|m| m.is_file() && m.mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `/usr/bin/x` or `/usr/sbin/x (not in $PATH)`.
fn describe_location(path: &Path, in_path: bool) -> String {
    if in_path {
        path.display().to_string()
    } else {
        format!("{} (not in $PATH)", path.display())
    }
}

fn has_file_caps(path: &Path) -> bool {
    rustix::fs::getxattr(path, "security.capability", &mut []).is_ok()
}

pub(super) fn check_idmap(prog: &'static str) -> Check {
    let Some((path, in_path)) = find_program(prog) else {
        return Check::fail(
            prog,
            format!("{prog} not found on {}", path_text()),
            missing_fix(prog, "uidmap"),
        );
    };
    let loc = describe_location(&path, in_path);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            return Check::fail(
                prog,
                format!("cannot stat {loc}: {}", err_text(&e)),
                "sudo apt-get install uidmap",
            )
        }
    };
    if meta.mode() & 0o4000 != 0 && meta.uid() == 0 {
        Check::pass(prog, format!("{loc} is setuid root"))
    } else if has_file_caps(&path) {
        Check::pass(prog, format!("{loc} has file capabilities"))
    } else {
        Check::fail(
            prog,
            format!(
                "{loc} is neither setuid root nor has file capabilities (mode {:04o}, owner {})",
                meta.mode() & 0o7777,
                meta.uid()
            ),
            "sudo apt-get install --reinstall uidmap",
        )
    }
}

/// The release date in `runsc --version` output: the first run of exactly
/// eight digits (`runsc version 0.0~20240729.0`, `release-20240729.0`).
fn parse_runsc_date(output: &str) -> Option<u32> {
    let line = output.lines().find(|l| l.contains("version"))?;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i - start == 8 {
                return line[start..i].parse().ok();
            }
        } else {
            i += 1;
        }
    }
    None
}

/// `VERSION_CODENAME` from /etc/os-release contents.
fn os_release_codename(contents: &str) -> Option<String> {
    contents.lines().find_map(|l| {
        let v = l.trim().strip_prefix("VERSION_CODENAME=")?;
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

fn runsc_fix(codename: Option<&str>) -> String {
    match codename {
        Some("bookworm") => "sudo apt-get install -t bookworm-backports runsc (with bookworm-backports \
                             enabled), or run scripts/install-deps.sh"
            .into(),
        Some(_) => "run scripts/install-deps.sh (or: sudo apt-get install runsc)".into(),
        None => format!("run scripts/install-deps.sh, or install runsc >= {MIN_RUNSC_DATE} from gvisor.dev"),
    }
}

pub(super) fn check_runsc() -> Check {
    let codename = read_optional("/etc/os-release").and_then(|c| os_release_codename(&c));
    let fix = runsc_fix(codename.as_deref());
    let Some((path, in_path)) = find_program("runsc") else {
        let fix = if find_off_path("runsc").is_some() {
            missing_fix("runsc", "runsc")
        } else {
            fix
        };
        return Check::fail("runsc", format!("runsc not found on {}", path_text()), fix);
    };
    let loc = describe_location(&path, in_path);
    let out = match Command::new(&path).arg("--version").stdin(Stdio::null()).output() {
        Ok(o) => o,
        Err(e) => return Check::fail("runsc", format!("cannot run {loc} --version: {}", err_text(&e)), fix),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    match parse_runsc_date(&text) {
        Some(d) if d >= MIN_RUNSC_DATE => Check::pass(
            "runsc",
            format!("{loc} is release {d} (systrap platform; /dev/kvm is not used)"),
        ),
        Some(d) => Check::fail(
            "runsc",
            format!("{loc} is release {d}, need {MIN_RUNSC_DATE} or newer"),
            fix,
        ),
        None => {
            let first = text.lines().next().unwrap_or("").trim();
            Check::fail(
                "runsc",
                format!("cannot read a release date from `{loc} --version` (got {first:?})"),
                fix,
            )
        }
    }
}

pub(super) fn check_tool(tool: &'static str, pkg: &str, used_by: &str) -> Check {
    match find_program(tool) {
        Some((path, in_path)) => Check::pass(tool, format!("found {}", describe_location(&path, in_path))),
        None => Check::fail(
            tool,
            format!("{tool} (needed for {used_by}) not found on {}", path_text()),
            missing_fix(tool, pkg),
        ),
    }
}

/// `PATH=...` as Lazaret uses it, for messages.
fn path_text() -> String {
    format!("PATH={}", env::var_os("PATH").unwrap_or_default().to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runsc_date_debian_format() {
        assert_eq!(
            parse_runsc_date("runsc version 0.0~20240729.0\nspec: 1.0.2-dev\n"),
            Some(20240729)
        );
        assert_eq!(parse_runsc_date("runsc version 0.0~20221219.0\n"), Some(20221219));
    }

    #[test]
    fn runsc_date_release_format() {
        assert_eq!(
            parse_runsc_date("runsc version release-20240729.0\nspec: 1.1.0\n"),
            Some(20240729)
        );
        assert_eq!(parse_runsc_date("runsc version release-20250113.0"), Some(20250113));
    }

    #[test]
    fn runsc_date_rejects_non_dates() {
        assert_eq!(parse_runsc_date("runsc version google-123456"), None);
        assert_eq!(parse_runsc_date("runsc version 123456789"), None);
        assert_eq!(parse_runsc_date("spec: 20240729\n"), None);
        assert_eq!(parse_runsc_date(""), None);
    }

    #[test]
    fn runsc_version_comparison() {
        let ok = |s: &str| parse_runsc_date(s).is_some_and(|d| d >= MIN_RUNSC_DATE);
        assert!(ok("runsc version 0.0~20240729.0"));
        assert!(!ok("runsc version 0.0~20221219.0"));
        assert!(!ok("runsc version 0.0~20240728.0"));
    }

    #[test]
    fn os_release_and_runsc_fix() {
        let c = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n";
        assert_eq!(os_release_codename(c).as_deref(), Some("bookworm"));
        assert_eq!(
            os_release_codename("VERSION_CODENAME=\"noble\"\n").as_deref(),
            Some("noble")
        );
        assert_eq!(os_release_codename("ID=arch\n"), None);
        assert!(runsc_fix(Some("bookworm")).starts_with("sudo apt-get install -t bookworm-backports runsc"));
        assert!(runsc_fix(Some("trixie")).contains("scripts/install-deps.sh"));
    }
}
