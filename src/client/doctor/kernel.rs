//! What the kernel must allow an unprivileged user: user, mount and network
//! namespaces (sysctls and a forked probe), and read-write /dev/net/tun and
//! /dev/fuse.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use crate::client::doctor::check::{err_text, Check};
use crate::client::doctor::target::{Mode, Target};

fn read_sysctl(path: &str) -> Option<i64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub(super) fn check_userns(t: &Target) -> Check {
    let mut problems: Vec<String> = Vec::new();
    let mut settings: Vec<&str> = Vec::new();

    match read_sysctl("/proc/sys/user/max_user_namespaces") {
        Some(n) if n > 0 => {}
        Some(n) => {
            problems.push(format!("user.max_user_namespaces is {n}"));
            settings.push("user.max_user_namespaces=15000");
        }
        None => problems.push("cannot read /proc/sys/user/max_user_namespaces".into()),
    }
    if let Some(v) = read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") {
        if v != 1 {
            problems.push(format!("kernel.unprivileged_userns_clone is {v}"));
            settings.push("kernel.unprivileged_userns_clone=1");
        }
    }
    let mut note = String::new();
    let mut apparmor_fix = None;
    let loaded = fs::read_to_string(APPARMOR_PROFILES).ok();
    match apparmor_userns(
        read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        loaded.as_deref(),
    ) {
        AppArmorUserns::Open => {}
        AppArmorUserns::ProfileLoaded => {
            note = format!(
                " (kernel.apparmor_restrict_unprivileged_userns=1; the AppArmor profile {APPARMOR_PROFILE:?} is loaded)"
            );
        }
        AppArmorUserns::ProfileNotLoaded { known } => {
            problems.push(format!(
                "kernel.apparmor_restrict_unprivileged_userns is 1 and the AppArmor profile {APPARMOR_PROFILE:?} {}",
                if known {
                    "is not loaded"
                } else {
                    "may not be loaded (cannot read the loaded profiles)"
                }
            ));
            apparmor_fix = Some(apparmor_load_fix(
                Path::new(APPARMOR_PROFILE_FILE).exists(),
                Path::new(APPARMOR_PROFILE_SHIPPED).exists(),
            ));
        }
    }

    let drop_to = (t.mode == Mode::Sudo).then_some((t.uid, t.gid));
    let probe = userns_probe(drop_to);
    match &probe {
        ProbeResult::Ok => {}
        ProbeResult::Failed { step, errno } => {
            problems.push(format!("{} failed: {}", probe_step_name(*step), errno_text(*errno)))
        }
        ProbeResult::Error(e) => problems.push(format!("probe could not run: {e}")),
    }

    if problems.is_empty() {
        let who = if t.mode == Mode::Root {
            "root"
        } else {
            "an unprivileged user"
        };
        return Check::pass(
            "userns",
            format!("{who} can create user, mount and network namespaces{note}"),
        );
    }
    let fix = if let Some(fix) = apparmor_fix {
        fix
    } else if !settings.is_empty() {
        sysctl_fix(&settings)
    } else {
        match probe {
            ProbeResult::Failed {
                errno: crate::sys::ENOSPC,
                ..
            } => "too many user namespaces: raise user.max_user_namespaces, or end stale sandboxes".into(),
            _ => "unprivileged user namespaces are blocked by the environment (e.g. a container's \
                  seccomp or lsm policy); run lazaret on a host or vm that allows them"
                .into(),
        }
    };
    Check::fail("userns", problems.join("; "), fix)
}

/// The name of the package's AppArmor profile (scripts/deb/apparmor-lazaret).
pub(super) const APPARMOR_PROFILE: &str = "lazaret";
/// Where the package's postinst puts it on a host with AppArmor 4.
pub(super) const APPARMOR_PROFILE_FILE: &str = "/etc/apparmor.d/lazaret";
/// Where the package ships it.
pub(super) const APPARMOR_PROFILE_SHIPPED: &str = "/usr/share/lazaret/apparmor/lazaret";
/// The profiles the kernel has loaded, one `NAME (MODE)` a line.
const APPARMOR_PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

/// What AppArmor's user-namespace restriction means for Lazaret.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AppArmorUserns {
    /// No restriction (the sysctl is absent or 0).
    Open,
    /// Restricted, and the package's profile is loaded: the binaries it
    /// names may create user namespaces.
    ProfileLoaded,
    /// Restricted, and the profile is not loaded (`known`), or the loaded
    /// profiles could not be read.
    ProfileNotLoaded { known: bool },
}

/// Pure: the restriction's value and the text of the loaded profiles.
pub(super) fn apparmor_userns(restrict: Option<i64>, loaded: Option<&str>) -> AppArmorUserns {
    match (restrict, loaded) {
        (None | Some(0), _) => AppArmorUserns::Open,
        (Some(_), Some(text)) if profile_loaded(text, APPARMOR_PROFILE) => AppArmorUserns::ProfileLoaded,
        (Some(_), l) => AppArmorUserns::ProfileNotLoaded { known: l.is_some() },
    }
}

/// Whether `name` is among the loaded profiles (`name (unconfined)`).
pub(super) fn profile_loaded(text: &str, name: &str) -> bool {
    text.lines()
        .any(|l| l.rsplit_once(" (").map_or(l.trim(), |(n, _)| n) == name)
}

/// How to load the profile: from /etc/apparmor.d when it is there, else
/// from the package's copy, else by installing the package.
pub(super) fn apparmor_load_fix(in_etc: bool, shipped: bool) -> String {
    if in_etc {
        format!("sudo apparmor_parser -r {APPARMOR_PROFILE_FILE} (the package's profile, which lets lazaret and runsc create user namespaces)")
    } else if shipped {
        format!(
            "sudo install -m 0644 {APPARMOR_PROFILE_SHIPPED} {APPARMOR_PROFILE_FILE} && sudo apparmor_parser -r {APPARMOR_PROFILE_FILE} \
             (needs AppArmor 4, which knows the userns rule)"
        )
    } else {
        "install lazaret's .deb (README.md, Install), whose AppArmor profile lets lazaret and runsc create user \
         namespaces; or, for every program, sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
            .into()
    }
}

/// `sudo sysctl -w a=1 b=0 && printf 'a=1\nb=0\n' | sudo tee /etc/sysctl.d/60-lazaret.conf`
fn sysctl_fix(settings: &[&str]) -> String {
    let mut lines = String::new();
    for s in settings {
        lines.push_str(s);
        lines.push_str("\\n");
    }
    format!(
        "sudo sysctl -w {} && printf '{lines}' | sudo tee /etc/sysctl.d/60-lazaret.conf",
        settings.join(" ")
    )
}

#[derive(Debug)]
enum ProbeResult {
    Ok,
    Failed { step: u8, errno: i32 },
    Error(String),
}

const STEP_SETGROUPS: u8 = crate::sys::NS_STEP_SETGROUPS;
const STEP_SETGID: u8 = crate::sys::NS_STEP_SETGID;
const STEP_SETUID: u8 = crate::sys::NS_STEP_SETUID;
const STEP_USERNS: u8 = crate::sys::NS_STEP_USERNS;
const STEP_MNT_NET: u8 = crate::sys::NS_STEP_MNT_NET;

fn probe_step_name(step: u8) -> &'static str {
    match step {
        STEP_SETGROUPS => "setgroups() to drop to the user",
        STEP_SETGID => "setresgid() to the user",
        STEP_SETUID => "setresuid() to the user",
        STEP_USERNS => "unshare(CLONE_NEWUSER)",
        STEP_MNT_NET => "unshare(CLONE_NEWNS|CLONE_NEWNET) inside the new user namespace",
        _ => "probe",
    }
}

/// Forks a child that (optionally) drops to `drop_to = (uid, gid)`, then
/// creates a user namespace and, inside it, mount and network namespaces
/// (what the supervisor does). AppArmor's userns restriction lets the first
/// unshare succeed but denies the second, so both are tried.
fn userns_probe(drop_to: Option<(u32, u32)>) -> ProbeResult {
    match crate::sys::probe_namespaces(drop_to) {
        Ok(crate::sys::NsProbe::Ok) => ProbeResult::Ok,
        Ok(crate::sys::NsProbe::Failed { step, errno }) => ProbeResult::Failed { step, errno },
        Ok(crate::sys::NsProbe::Died(what)) => ProbeResult::Error(what),
        Err(e) => ProbeResult::Error(format!("pipe, fork or wait: {}", err_text(&e))),
    }
}

/// `EPERM (operation not permitted)`.
fn errno_text(errno: i32) -> String {
    let name = match errno {
        crate::sys::EPERM => "EPERM",
        crate::sys::EACCES => "EACCES",
        crate::sys::EINVAL => "EINVAL",
        crate::sys::ENOSPC => "ENOSPC",
        crate::sys::ENOMEM => "ENOMEM",
        crate::sys::ENOSYS => "ENOSYS",
        crate::sys::EUSERS => "EUSERS",
        _ => return err_text(&io::Error::from_raw_os_error(errno)),
    };
    format!("{name} ({})", err_text(&io::Error::from_raw_os_error(errno)))
}

/// Whether a file with `mode`/`owner`/`group` grants read+write to a user
/// with `uid` and `groups`, using the kernel's rule: the owner class applies
/// if the user owns the file, else the group class if in the group, else
/// other. (Root is not special-cased: the caller decides.)
fn mode_allows_rw(mode: u32, owner: u32, group: u32, uid: u32, groups: &[u32]) -> bool {
    let bits = if owner == uid {
        (mode >> 6) & 0o7
    } else if groups.contains(&group) {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    bits & 0o6 == 0o6
}

pub(super) fn check_device(name: &'static str, path: &str, (major, minor): (u32, u32), t: &Target) -> Check {
    let note = "stock udev distros ship it 0666; without udev redo this after each boot";
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            let parent = Path::new(path).parent().map(|p| p.display().to_string());
            let mkdir = match parent.as_deref() {
                Some("/dev") | None => String::new(),
                Some(p) => format!("sudo mkdir -p {p} && "),
            };
            return Check::fail(
                name,
                format!("{path}: {}", err_text(&e)),
                format!("{mkdir}sudo mknod -m 0666 {path} c {major} {minor}"),
            );
        }
    };
    if !meta.file_type().is_char_device() {
        return Check::fail(
            name,
            format!("{path} is not a character device"),
            format!("sudo rm -f {path} && sudo mknod -m 0666 {path} c {major} {minor}"),
        );
    }
    let mode = meta.mode() & 0o7777;
    let (ok, who) = match t.mode {
        Mode::User => (
            rustix::fs::access(path, rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK).is_ok(),
            t.display(),
        ),
        Mode::Sudo => (
            mode_allows_rw(mode, meta.uid(), meta.gid(), t.uid, &t.groups),
            t.display(),
        ),
        // Root can open anything; what matters is a normal user, so look at
        // the "other" bits.
        Mode::Root => (mode & 0o006 == 0o006, "other users".to_string()),
    };
    if ok {
        Check::pass(
            name,
            format!("{path} is readable and writable by {who} (mode {mode:04o})"),
        )
    } else {
        Check::fail(
            name,
            format!(
                "{path} is not readable and writable by {who} (mode {mode:04o}, owner {}:{})",
                meta.uid(),
                meta.gid()
            ),
            format!("sudo chmod 0666 {path}  # {note}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apparmor_restriction_needs_the_loaded_profile() {
        let loaded = "docker-default (enforce)\nlazaret (unconfined)\nlazaret-runsc (unconfined)\n";
        assert_eq!(apparmor_userns(None, None), AppArmorUserns::Open);
        assert_eq!(apparmor_userns(Some(0), None), AppArmorUserns::Open);
        assert_eq!(apparmor_userns(Some(1), Some(loaded)), AppArmorUserns::ProfileLoaded);
        assert_eq!(
            apparmor_userns(Some(1), Some("lazaret-runsc (unconfined)\nxlazaret (enforce)\n")),
            AppArmorUserns::ProfileNotLoaded { known: true }
        );
        assert_eq!(
            apparmor_userns(Some(1), None),
            AppArmorUserns::ProfileNotLoaded { known: false }
        );
        assert!(profile_loaded("lazaret (unconfined)", "lazaret"));
        assert!(!profile_loaded("/usr/bin/lazaret (enforce)", "lazaret"));
        assert!(apparmor_load_fix(true, true).starts_with("sudo apparmor_parser -r /etc/apparmor.d/lazaret"));
        assert!(apparmor_load_fix(false, true).contains("sudo install -m 0644 /usr/share/lazaret/apparmor/lazaret"));
        assert!(apparmor_load_fix(false, false).contains("install lazaret's .deb"));
    }

    #[test]
    fn sysctl_fix_text() {
        assert_eq!(
            sysctl_fix(&["kernel.apparmor_restrict_unprivileged_userns=0"]),
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 && printf \
             'kernel.apparmor_restrict_unprivileged_userns=0\\n' | sudo tee /etc/sysctl.d/60-lazaret.conf"
        );
    }

    #[test]
    fn device_mode_classes() {
        assert!(mode_allows_rw(0o666, 0, 0, 1000, &[1000]));
        assert!(!mode_allows_rw(0o600, 0, 0, 1000, &[1000]));
        assert!(mode_allows_rw(0o660, 0, 104, 1000, &[104, 1000]));
        assert!(mode_allows_rw(0o600, 1000, 0, 1000, &[1000]));
        // The owner class wins even when "other" would allow it.
        assert!(!mode_allows_rw(0o066, 1000, 0, 1000, &[1000]));
        assert!(!mode_allows_rw(0o644, 0, 0, 1000, &[1000]));
    }

    #[test]
    fn error_text_is_lowercase_without_suffix() {
        assert_eq!(errno_text(crate::sys::EPERM), "EPERM (operation not permitted)");
        assert_eq!(
            err_text(&io::Error::from_raw_os_error(crate::sys::ENOENT)),
            "no such file or directory"
        );
    }

    #[test]
    fn userns_probe_runs() {
        // Whatever the host allows, the fork/pipe machinery must work.
        let r = userns_probe(None);
        assert!(!matches!(r, ProbeResult::Error(_)), "{r:?}");
    }
}
