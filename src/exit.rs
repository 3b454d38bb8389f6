//! The one exit-code mapping of the `lazaret` CLI: every code it decides
//! itself is an [`Exit`]; the "Exit codes" tables of README.md and docs/usage.md list the same
//! (a unit test holds them together). `lazaret run` and `lazaret exec`
//! otherwise exit with the sandboxed command's own status.

/// What an exit code of `lazaret` means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// The command succeeded.
    Success,
    /// A check found a problem (`lazaret doctor`, `lazaret state check`).
    Problem,
    /// Bad input: usage, configuration, workspace, paths, running as root,
    /// no default image, or the running sandbox refused the session.
    Usage,
    /// Lazaret itself failed (start, connection, a dead helper, a damaged
    /// store, an image build, a full disk).
    Failure,
    /// `lazaret run`: the command exists inside but cannot be executed
    /// (decided by the guest init, as a shell does).
    #[allow(dead_code)] // Passed through from the sandbox's init, never constructed here.
    NotExecutable,
    /// `lazaret run`: the command was not found inside the sandbox.
    #[allow(dead_code)] // Passed through from the sandbox's init, never constructed here.
    NotFound,
    /// Output went to a closed pipe: 128 + SIGPIPE, as a pipeline member.
    ClosedPipe,
}

impl Exit {
    #[cfg(test)] // The README table test walks every code.
    pub const ALL: [Exit; 7] = [
        Exit::Success,
        Exit::Problem,
        Exit::Usage,
        Exit::Failure,
        Exit::NotExecutable,
        Exit::NotFound,
        Exit::ClosedPipe,
    ];

    pub const fn code(self) -> i32 {
        match self {
            Exit::Success => 0,
            Exit::Problem => 1,
            Exit::Usage => 2,
            Exit::Failure => 125,
            Exit::NotExecutable => 126,
            Exit::NotFound => 127,
            Exit::ClosedPipe => 141,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Exit;

    /// The "Exit codes" tables of README.md and docs/usage.md name every
    /// code, and name no other number.
    #[test]
    fn readme_table_is_this_mapping() {
        for (file, text) in [
            ("README.md", include_str!("../README.md")),
            ("docs/usage.md", include_str!("../docs/usage.md")),
        ] {
            let start = text
                .find("## Exit codes")
                .unwrap_or_else(|| panic!("{file} has an exit-code section"));
            let section = &text[start..];
            let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
            let rows: Vec<&str> = section[..end]
                .lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| Code") && !l.starts_with("| ---"))
                .collect();
            let codes: Vec<i32> = rows
                .iter()
                .filter_map(|l| l.trim_start_matches("| ").split(" |").next()?.trim().parse().ok())
                .collect();
            for e in Exit::ALL {
                assert!(codes.contains(&e.code()), "{file} lacks exit code {} ({e:?})", e.code());
            }
            for c in &codes {
                assert!(
                    Exit::ALL.iter().any(|e| e.code() == *c),
                    "{file} names exit code {c}, which Exit does not"
                );
            }
        }
        assert_eq!(Exit::ClosedPipe.code(), 128 + 13);
    }
}
