//! Escalation: the request the sandbox puts into the mailbox and the
//! outcome the Host Coordinator writes back (their records are frames of
//! the common codec, `crate::wire::mailbox`), plus auto-approval rule
//! matching and the quoting used in prompts. Pure and std-only: the
//! `lazaret-escalate` binary links it (`lazaret::escalation`).

/// Largest request record accepted from the sandbox.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Most bytes the mailbox's `requests/` holds (256 full-size records):
/// the supervisor mounts it as a tmpfs of this size, and the broker keeps
/// it below this by deleting what is over the record limit or the cap.
pub const REQUESTS_MAX_BYTES: u64 = 256 * MAX_REQUEST_BYTES as u64;
/// Largest result record the client accepts.
pub const MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_ARGS: usize = 256;
/// Host command output kept per stream; the rest is dropped and reported.
pub const OUTPUT_MAX_BYTES: usize = 1024 * 1024;
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// Exit codes of `lazaret-escalate` when the host command did not complete.
pub const EXIT_TIMED_OUT: i32 = 124;
pub const EXIT_FAILED: i32 = 125;
pub const EXIT_DENIED: i32 = 126;
pub const EXIT_CANCELLED: i32 = 130;
pub const EXIT_EXPIRED: i32 = 123;

/// Default and largest `[escalation] prompt_timeout_s`: how long an
/// accepted request may wait for the developer's decision.
pub const DEFAULT_PROMPT_TIMEOUT_SECS: u64 = 300;
pub const MAX_PROMPT_TIMEOUT_SECS: u64 = 86_400;
/// Environment variable telling the client how long a decision may take.
pub const PROMPT_TIMEOUT_ENV: &str = "LAZARET_ESCALATION_PROMPT_TIMEOUT";

/// Guest paths of the mailbox.
pub const GUEST_REQUESTS: &str = "/.lazaret/mailbox/requests";
pub const GUEST_RESULTS: &str = "/.lazaret/mailbox/results";
/// On the default PATH, which login shells reset.
pub const GUEST_ESCALATE: &str = "/usr/local/bin/lazaret-escalate";
/// Environment variable naming the file that holds the session's signing
/// credential (the path is no secret; the file is readable by the
/// session's uid only when that is root, see docs/threat-model.md).
pub const CREDENTIAL_FILE_ENV: &str = "LAZARET_ESCALATION_CREDENTIAL_FILE";
/// Guest directory of the sessions' credential files (read-only, not
/// listable by other uids).
pub const GUEST_KEYS: &str = "/.lazaret/keys";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: String,
    pub domain: String,
    pub generation: u64,
    pub session: String,
    pub client: String,
    /// Working directory relative to the workspace ("" = its top).
    pub cwd: String,
    pub timeout_secs: u64,
    pub justification: String,
    pub argv: Vec<String>,
    /// DER of the session certificate that signed the request.
    pub cert: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Completed(i32),
    Denied,
    TimedOut,
    Cancelled,
    Failed,
    /// Nobody decided within `prompt_timeout_s`; nothing ran.
    Expired,
}

impl Status {
    pub fn name(&self) -> &'static str {
        match self {
            Status::Completed(_) => "completed",
            Status::Denied => "denied",
            Status::TimedOut => "timed-out",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
            Status::Expired => "expired",
        }
    }
    /// What `lazaret-escalate` exits with.
    pub fn exit_code(&self) -> i32 {
        match self {
            Status::Completed(c) => *c,
            Status::Denied => EXIT_DENIED,
            Status::TimedOut => EXIT_TIMED_OUT,
            Status::Cancelled => EXIT_CANCELLED,
            Status::Failed => EXIT_FAILED,
            Status::Expired => EXIT_EXPIRED,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub id: String,
    pub status: Status,
    /// The argv that ran (after an edit), or was asked for.
    pub argv: Vec<String>,
    pub reason: String,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// Programs that run a command string (shells, interpreters, and wrappers
/// that run another program): never auto-approved. Matched on the
/// base name without a version suffix (`python3.12` is `python`).
const COMMAND_RUNNERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "pdksh",
    "yash",
    "fish",
    "csh",
    "tcsh",
    "ash",
    "busybox",
    "toybox",
    "rbash",
    "python",
    "pypy",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "env",
    "xargs",
    "nohup",
    "timeout",
    "nice",
    "ionice",
    "setsid",
    "stdbuf",
    "time",
    "sudo",
    "doas",
    "su",
    "runuser",
    "chroot",
    "unshare",
    "nsenter",
    "flock",
    "watch",
    "script",
    "expect",
    "ssh",
    "osascript",
    "pwsh",
    "powershell",
    "eval",
    "exec",
    "command",
    "builtin",
    "find",
    "make",
    "sed",
];

/// `Some(name)` when `program` is a shell or interpreter that runs a
/// command string, or a wrapper that runs another program.
pub fn command_runner(program: &str) -> Option<&'static str> {
    let base = program.rsplit('/').next().unwrap_or(program);
    let stem = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    COMMAND_RUNNERS.iter().copied().find(|r| *r == base || *r == stem)
}

/// Configuration given to host Git on its command line, ahead of the
/// repository's own: implicit bare repositories (a shape the sandbox can
/// create in the workspace) are refused, no fsmonitor command runs, no hook
/// runs, no pager runs, `core.sshCommand` is plain `ssh`, the `ext::`
/// transport is off.
pub const GIT_HARDENING: &[&str] = &[
    "--no-pager",
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.pager=cat",
    "-c",
    "core.sshCommand=ssh",
    "-c",
    "protocol.ext.allow=never",
];

/// A configuration key `(section, subsection, name)` (lowercase section and
/// name) that some scope or include of the repository sets.
pub type GitKey = (String, Option<String>, String);

/// The value that neutralizes `key` on host Git's command line, for the keys
/// that make Git run a program: filters become `cat` (identity) and lose
/// `process`, textconv becomes `cat`, external diff and diff drivers become
/// empty (Git then refuses to diff through them, running nothing), merge
/// drivers `false`, `!` aliases empty. None for keys left alone.
fn neutral(key: &GitKey) -> Option<&'static str> {
    let (sec, sub, name) = (key.0.as_str(), key.1.is_some(), key.2.as_str());
    Some(match (sec, sub, name) {
        ("filter", true, "clean" | "smudge") => "cat",
        ("filter", true, "process") => "",
        ("filter", true, "required") => "false",
        ("diff", true, "textconv") => "cat",
        ("diff", true, "command") => "",
        ("diff", false, "external") => "",
        ("merge", true, "driver") => "false",
        ("alias", _, _) => "",
        ("core", false, "askpass" | "gitproxy") => "",
        ("remote", true, "uploadpack") => "git-upload-pack",
        ("remote", true, "receivepack") => "git-receive-pack",
        ("interactive", false, "difffilter") => "cat",
        _ => return None,
    })
}

/// The argv the broker runs: host Git gets [`GIT_HARDENING`] and, for every
/// key in `keys` (every scope and include of the repository, whether or not
/// the include applies today) that runs a program, a neutral value. A key
/// that cannot be written as `-c KEY=VALUE` (a subsection holding `=`)
/// makes Git refuse to start (`-c =`, "empty config key").
pub fn harden_git(argv: &[String], keys: &[GitKey]) -> Vec<String> {
    let base = argv[0].rsplit('/').next().unwrap_or(&argv[0]);
    if base != "git" {
        return argv.to_vec();
    }
    let mut v = vec![argv[0].clone()];
    v.extend(GIT_HARDENING.iter().map(|s| s.to_string()));
    let mut seen = std::collections::BTreeSet::new();
    for k in keys {
        let Some(val) = neutral(k) else { continue };
        let mut ks = vec![(k.0.clone(), k.1.clone(), k.2.clone())];
        if k.0 == "filter" && k.1.is_some() {
            ks.push((k.0.clone(), k.1.clone(), "required".into()));
        }
        for k in ks {
            let val = neutral(&k).unwrap_or(val);
            let name = match &k.1 {
                Some(s) if s.contains(['=', '\n', '\0']) => {
                    v.extend(["-c".to_string(), "=".to_string()]);
                    continue;
                }
                Some(s) => format!("{}.{s}.{}", k.0, k.2),
                None => format!("{}.{}", k.0, k.2),
            };
            if seen.insert(name.clone()) {
                v.push("-c".into());
                v.push(format!("{name}={val}"));
            }
        }
    }
    v.extend(argv[1..].iter().cloned());
    v
}

/// A decision typed at the prompt: a whole line that is exactly one of
/// the documented answers; anything else is `None` and the prompt asks
/// again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    Edit,
}

pub fn parse_answer(line: &str) -> Option<Answer> {
    match line.trim_matches(' ') {
        "y" | "yes" | "Y" | "YES" | "Yes" => Some(Answer::Yes),
        "n" | "no" | "N" | "NO" | "No" => Some(Answer::No),
        "e" | "edit" | "E" | "EDIT" | "Edit" => Some(Answer::Edit),
        _ => None,
    }
}

// ---- rules and display -------------------------------------------------------------

/// An auto-approval rule matches its argv exactly, or as a prefix when it
/// allows trailing arguments. Never a shell, never a pattern.
pub fn rule_matches(rule_argv: &[String], allow_trailing: bool, argv: &[String]) -> bool {
    if allow_trailing {
        argv.len() >= rule_argv.len() && argv[..rule_argv.len()] == *rule_argv
    } else {
        argv == rule_argv
    }
}

/// Makes sandbox-chosen text safe to print: every Cc and Cf character
/// (terminal escapes, bidi overrides, zero-width characters) and the
/// backslash become visible escapes (`\\x1b`, `\\u{202e}`, `\\\\`), so a
/// prompt can be neither repainted nor reordered by what it displays.
pub fn neutralize(s: &str) -> String {
    crate::display::escape(s)
}

/// Shell-quotes an argv for display, neutralising control characters.
pub fn quote_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let a = neutralize(a);
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits an edited command line into words: whitespace separates, single
/// quotes are literal, double quotes allow `\"` and `\\`, a backslash
/// escapes the next character. No expansion of any kind.
pub fn split_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => cur.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => cur.push(chars.next()?),
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_exactly_unless_trailing_args_are_granted() {
        let rule: Vec<String> = vec!["git".into(), "--version".into()];
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(rule_matches(&rule, false, &v(&["git", "--version"])));
        assert!(!rule_matches(&rule, false, &v(&["git", "--version", "--foo"])));
        assert!(!rule_matches(&rule, false, &v(&["git"])));
        assert!(rule_matches(&rule, true, &v(&["git", "--version", "--foo"])));
        assert!(!rule_matches(&rule, true, &v(&["git", "status"])));
    }

    #[test]
    fn display_is_quoted_and_neutralised() {
        let q = quote_argv(&["echo".into(), "a b".into(), "\u{1b}[2J".into(), "it's".into()]);
        assert_eq!(q, r"echo 'a b' '\x1b[2J' 'it'\''s'");
        assert!(!q.contains('\u{1b}'));
        let q = quote_argv(&["x\u{202e}y".into(), "a\\x1b".into(), "\u{200b}".into()]);
        assert_eq!(q, r"'x\u{202e}y' 'a\\x1b' '\u{200b}'");
    }

    #[test]
    fn shells_and_interpreters_are_recognised() {
        for p in [
            "sh",
            "/bin/bash",
            "python3",
            "python3.12",
            "perl",
            "env",
            "/usr/bin/env",
            "zsh",
            "node",
        ] {
            assert!(command_runner(p).is_some(), "{p}");
        }
        for p in ["git", "gh", "ls", "echo", "true", "cargo", "shellcheck"] {
            assert!(command_runner(p).is_none(), "{p}");
        }
    }

    #[test]
    fn git_is_hardened_and_nothing_else_is() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let g = harden_git(&v(&["git", "status"]), &[]);
        assert_eq!(g[0], "git");
        assert_eq!(g.last().unwrap(), "status");
        assert!(g.contains(&"safe.bareRepository=explicit".to_string()));
        assert!(g.contains(&"--no-pager".to_string()) && g.contains(&"core.pager=cat".to_string()));
        assert_eq!(harden_git(&v(&["ls", "-l"]), &[]), v(&["ls", "-l"]));
        let k = |a: &str, b: Option<&str>, c: &str| (a.to_string(), b.map(str::to_string), c.to_string());
        let g = harden_git(
            &v(&["git", "status"]),
            &[
                k("filter", Some("X.y"), "clean"),
                k("diff", None, "external"),
                k("merge", Some("m"), "driver"),
                k("user", None, "name"),
            ],
        );
        for want in [
            "filter.X.y.clean=cat",
            "filter.X.y.required=false",
            "diff.external=",
            "merge.m.driver=false",
        ] {
            assert!(g.contains(&want.to_string()), "{want} in {g:?}");
        }
        assert!(!g.iter().any(|a| a.starts_with("user.")));
        let g = harden_git(&v(&["git", "status"]), &[k("filter", Some("a=b"), "clean")]);
        assert!(g.windows(2).any(|w| w[0] == "-c" && w[1] == "="), "{g:?}");
    }

    #[test]
    fn only_whole_documented_answers_decide() {
        assert_eq!(parse_answer("y"), Some(Answer::Yes));
        assert_eq!(parse_answer("yes"), Some(Answer::Yes));
        assert_eq!(parse_answer("no"), Some(Answer::No));
        assert_eq!(parse_answer("edit"), Some(Answer::Edit));
        for l in ["a", "aaaa", "ye", "yess", "make tests pass", "e x", "", "approve"] {
            assert_eq!(parse_answer(l), None, "{l}");
        }
    }

    #[test]
    fn edited_lines_split_without_expansion() {
        assert_eq!(
            split_words(r#"git commit -m "a \"b\"" 'c d' e\ f $HOME"#).unwrap(),
            ["git", "commit", "-m", "a \"b\"", "c d", "e f", "$HOME"]
        );
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
        assert!(split_words("'open").is_none());
    }
}
