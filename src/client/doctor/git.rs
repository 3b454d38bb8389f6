//! The Git checks: host Git's `safe.bareRepository`, and the execution
//! surface of the current directory as a workspace.

use crate::client::doctor::check::Check;

/// Git's execution surface of the current directory as a workspace
/// (`view::hostexec`): the hook managers found and what the view keeps
/// read-only for host Git.
pub(super) fn check_git_surface(dir: &std::path::Path) -> Check {
    if !matches!(
        crate::view::sentry::discover(dir),
        Ok(crate::view::sentry::GitLayout::Dir { .. } | crate::view::sentry::GitLayout::Linked { .. })
    ) {
        return Check::pass("git-execution-surface", "the current directory is not a Git workspace");
    }
    let rep = crate::view::hostexec::report(dir);
    let (paths, managers) = (rep.paths, rep.managers);
    let mut detail = String::new();
    if let Some(e) = &rep.walk_error {
        detail.push_str(&format!("{e}: a Domain does not start here; "));
    }
    if !rep.findings.is_empty() {
        detail.push_str(&format!(
            "{} hook(s) or program(s) run project code the view cannot protect (`lazaret git show`); ",
            rep.findings.len()
        ));
    }
    for m in &managers {
        let list: Vec<String> = m.protects.iter().map(|p| crate::display::escape_path(p)).collect();
        detail.push_str(&format!(
            "hook manager {} found: read-only inside: {}; ",
            m.name,
            list.join(", ")
        ));
    }
    let shown: Vec<String> = paths
        .iter()
        .filter(|p| !p.starts_with(".git"))
        .take(12)
        .map(|p| crate::display::escape_path(p))
        .collect();
    if shown.is_empty() {
        detail.push_str("host Git runs nothing from the workspace outside .git");
    } else {
        detail.push_str(&format!("read-only inside for host Git: {}", shown.join(", ")));
    }
    Check::pass("git-execution-surface", detail)
}

/// Host Git should not take a bare repository found by discovery as one
/// (`safe.bareRepository = explicit`): a second line of defence behind the
/// workspace view's shape rule (docs/git.md).
pub(super) fn check_git_bare_repository(mut git: std::process::Command) -> Check {
    let out = git
        .args(["config", "--get", "safe.bareRepository"])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let value = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Err(_) => return Check::pass("git-safe-bare-repository", "no host git"),
    };
    git_bare_repository_check(&value)
}

fn git_bare_repository_check(value: &str) -> Check {
    if value.eq_ignore_ascii_case("explicit") {
        Check::pass("git-safe-bare-repository", "safe.bareRepository = explicit")
    } else {
        Check::warning(
            "git-safe-bare-repository",
            format!(
                "host git takes a bare repository it finds as one (safe.bareRepository is {})",
                if value.is_empty() { "unset" } else { "not `explicit`" }
            ),
            "git config --global safe.bareRepository explicit",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::doctor::report::to_text;

    #[test]
    fn warns_without_safe_bare_repository() {
        let w = git_bare_repository_check("");
        assert!(w.ok && w.fix.as_deref() == Some("git config --global safe.bareRepository explicit"));
        assert!(to_text(&[w]).starts_with("warn git-safe-bare-repository"));
        assert!(git_bare_repository_check("all").fix.is_some());
        assert!(git_bare_repository_check("explicit").fix.is_none());
    }
}
