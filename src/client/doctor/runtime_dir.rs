//! The xdg-runtime-dir check: the runtime directory Lazaret would use
//! (`$XDG_RUNTIME_DIR`, or its /tmp fallback) is the user's own and not
//! group- or world-writable.

use std::env;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use crate::client::doctor::check::{err_text, Check};
use crate::client::doctor::target::{Mode, Target};

/// What is wrong with a runtime directory.
#[derive(Debug, PartialEq, Eq)]
enum RuntimeDirProblem {
    NotDir,
    Owner(u32),
    Writable(u32),
}

impl RuntimeDirProblem {
    fn describe(&self, uid: u32) -> String {
        match self {
            RuntimeDirProblem::NotDir => "is not a directory".into(),
            RuntimeDirProblem::Owner(o) => format!("is owned by uid {o}, not {uid}"),
            RuntimeDirProblem::Writable(m) => format!("is group- or world-writable (mode {m:04o})"),
        }
    }
}

/// Checks a runtime directory's metadata (from lstat, so a symlink is not a
/// directory); `None` when it is fine.
fn runtime_dir_problem(is_dir: bool, owner: u32, mode: u32, uid: u32) -> Option<RuntimeDirProblem> {
    if !is_dir {
        Some(RuntimeDirProblem::NotDir)
    } else if owner != uid {
        Some(RuntimeDirProblem::Owner(owner))
    } else if mode & 0o022 != 0 {
        Some(RuntimeDirProblem::Writable(mode & 0o7777))
    } else {
        None
    }
}

pub(super) fn check_xdg_runtime_dir(t: &Target) -> Check {
    const NAME: &str = "xdg-runtime-dir";
    if t.mode == Mode::Sudo {
        return Check::pass(
            NAME,
            format!(
                "not checked under sudo (the environment is root's); run `lazaret doctor` as {} \
                 to check it",
                t.arg()
            ),
        );
    }
    match env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let shown = PathBuf::from(dir).display().to_string();
            let not_mine = format!(
                "unset XDG_RUNTIME_DIR, or point it at a directory you own (mode 0700), \
                 e.g. /run/user/{}",
                t.uid
            );
            match fs::symlink_metadata(&shown) {
                Err(e) => Check::fail(
                    NAME,
                    format!("XDG_RUNTIME_DIR={shown}: {}", err_text(&e)),
                    format!("mkdir -m 0700 -p {shown}, or unset XDG_RUNTIME_DIR"),
                ),
                Ok(m) => match runtime_dir_problem(m.is_dir(), m.uid(), m.mode(), t.uid) {
                    None => Check::pass(
                        NAME,
                        format!(
                            "XDG_RUNTIME_DIR={shown} is owned by {} and not group- or world-writable",
                            t.display()
                        ),
                    ),
                    Some(p @ RuntimeDirProblem::Writable(_)) => Check::fail(
                        NAME,
                        format!("XDG_RUNTIME_DIR={shown} {}", p.describe(t.uid)),
                        format!("chmod go-w {shown}"),
                    ),
                    Some(p) => Check::fail(NAME, format!("XDG_RUNTIME_DIR={shown} {}", p.describe(t.uid)), not_mine),
                },
            }
        }
        None => {
            let fallback = format!("/tmp/lazaret-{}", t.uid);
            match fs::symlink_metadata(&fallback) {
                Ok(m) => match runtime_dir_problem(m.is_dir(), m.uid(), m.mode(), t.uid) {
                    None => Check::pass(NAME, format!("XDG_RUNTIME_DIR is unset; lazaret uses {fallback}")),
                    Some(p @ RuntimeDirProblem::Writable(_)) => Check::fail(
                        NAME,
                        format!(
                            "XDG_RUNTIME_DIR is unset and the fallback {fallback} {}",
                            p.describe(t.uid)
                        ),
                        format!("chmod 0700 {fallback}"),
                    ),
                    // Squatted (another user's, or not a directory):
                    // lazaret uses its private fallback instead.
                    Some(p) => match crate::storage::paths::private_runtime_root() {
                        Some(private) => Check::warning(
                            NAME,
                            format!(
                                "XDG_RUNTIME_DIR is unset and {fallback} {}{}: lazaret uses {} instead",
                                p.describe(t.uid),
                                crate::sys::hostenv::user_name(m.uid())
                                    .map(|n| format!(" ({})", crate::display::escape(&n)))
                                    .unwrap_or_default(),
                                private.display()
                            ),
                            format!(
                                "nothing needed; to use /tmp again: sudo rm -rf {fallback} (someone else \
                                 created it), or set XDG_RUNTIME_DIR to a directory you own"
                            ),
                        ),
                        None => Check::fail(
                            NAME,
                            format!(
                                "XDG_RUNTIME_DIR is unset and the fallback {fallback} {}",
                                p.describe(t.uid)
                            ),
                            format!(
                                "sudo rm -rf {fallback} (someone else created it), or set \
                                 XDG_RUNTIME_DIR to a directory you own"
                            ),
                        ),
                    },
                },
                Err(_) => Check::pass(
                    NAME,
                    format!("XDG_RUNTIME_DIR is unset; lazaret uses {fallback} (not created yet)"),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_dir_rules() {
        assert_eq!(runtime_dir_problem(true, 1000, 0o40700, 1000), None);
        assert_eq!(runtime_dir_problem(true, 1000, 0o40755, 1000), None);
        let p = runtime_dir_problem(true, 0, 0o40700, 1000).unwrap();
        assert_eq!(p, RuntimeDirProblem::Owner(0));
        assert_eq!(p.describe(1000), "is owned by uid 0, not 1000");
        let p = runtime_dir_problem(true, 1000, 0o41777, 1000).unwrap();
        assert_eq!(p.describe(1000), "is group- or world-writable (mode 1777)");
        assert_eq!(
            runtime_dir_problem(true, 1000, 0o40720, 1000),
            Some(RuntimeDirProblem::Writable(0o720))
        );
        assert_eq!(
            runtime_dir_problem(false, 1000, 0o100600, 1000),
            Some(RuntimeDirProblem::NotDir)
        );
    }
}
