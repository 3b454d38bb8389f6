//! Escalation records: the request the sandbox writes into the mailbox and
//! the result the Host Coordinator writes back, plus auto-approval rule
//! matching and the quoting used in prompts. Pure; shared (by `#[path]`)
//! with the `lazaret-escalate` binary, so it depends on std and openssl only.
//!
//! A request is line-oriented text, every line `key value`, values
//! percent-escaped (`%`, control bytes). The signature line comes last and
//! covers every byte before it. Parsing is strict: exact key order, bounded
//! sizes, no duplicates, nothing after `sig`.

use std::fmt;

pub const REQUEST_MAGIC: &str = "LZESC1";
pub const RESULT_MAGIC: &str = "LZRES1";
/// Largest request record accepted from the sandbox.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
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
/// Environment variable carrying the session's signing credential.
pub const CREDENTIAL_ENV: &str = "LAZARET_ESCALATION_CREDENTIAL";

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

#[derive(Debug, PartialEq, Eq)]
pub enum RecordError {
    TooLarge(usize),
    NotUtf8,
    Missing(&'static str),
    Unexpected { expected: &'static str, line: String },
    BadValue(&'static str),
    Trailing,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            RecordError::TooLarge(n) => write!(f, "record of {n} bytes is over the limit"),
            RecordError::NotUtf8 => write!(f, "record is not UTF-8"),
            RecordError::Missing(k) => write!(f, "record ends before {k:?}"),
            RecordError::Unexpected { expected, line } => {
                let l: String = line.chars().take(40).collect();
                write!(f, "expected {expected:?}, found {:?}", neutralize(&l))
            }
            RecordError::BadValue(k) => write!(f, "malformed {k:?}"),
            RecordError::Trailing => write!(f, "bytes after the signature"),
        }
    }
}

/// Percent-escapes `%` and control characters so every value fits a line.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '%' || (c as u32) < 0x20 || c == '\u{7f}' {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

pub fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            if b[i] < 0x20 || b[i] == 0x7f {
                return None;
            }
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Request {
    /// The bytes that are signed: everything up to and including the
    /// `cert` line.
    pub fn signed_part(&self) -> String {
        let mut s = format!(
            "{REQUEST_MAGIC}\nid {}\ndomain {}\ngeneration {}\nsession {}\nclient {}\ncwd {}\ntimeout {}\njustification {}\nargc {}\n",
            self.id,
            self.domain,
            self.generation,
            self.session,
            self.client,
            escape(&self.cwd),
            self.timeout_secs,
            escape(&self.justification),
            self.argv.len()
        );
        for a in &self.argv {
            s.push_str(&format!("arg {}\n", escape(a)));
        }
        s.push_str(&format!("cert {}\n", openssl::base64::encode_block(&self.cert)));
        s
    }

    /// The full record with its signature line.
    pub fn encode(&self, sig: &[u8]) -> String {
        format!("{}sig {}\n", self.signed_part(), openssl::base64::encode_block(sig))
    }

    /// Strict parse. Returns the request, the exact signed bytes and the
    /// signature.
    pub fn parse(data: &[u8]) -> Result<(Request, Vec<u8>, Vec<u8>), RecordError> {
        if data.len() > MAX_REQUEST_BYTES {
            return Err(RecordError::TooLarge(data.len()));
        }
        let text = std::str::from_utf8(data).map_err(|_| RecordError::NotUtf8)?;
        let mut lines = Lines {
            rest: text,
            consumed: 0,
        };
        if lines.next_line("magic")? != REQUEST_MAGIC {
            return Err(RecordError::BadValue("magic"));
        }
        let id = lines.field("id")?;
        let domain = lines.field("domain")?;
        let generation = lines
            .field("generation")?
            .parse()
            .map_err(|_| RecordError::BadValue("generation"))?;
        let session = lines.field("session")?;
        let client = lines.field("client")?;
        let cwd = unescape(lines.field("cwd")?).ok_or(RecordError::BadValue("cwd"))?;
        let timeout_secs: u64 = lines
            .field("timeout")?
            .parse()
            .map_err(|_| RecordError::BadValue("timeout"))?;
        let justification = unescape(lines.field("justification")?).ok_or(RecordError::BadValue("justification"))?;
        let argc: usize = lines
            .field("argc")?
            .parse()
            .map_err(|_| RecordError::BadValue("argc"))?;
        if argc == 0 || argc > MAX_ARGS {
            return Err(RecordError::BadValue("argc"));
        }
        let mut argv = Vec::with_capacity(argc);
        for _ in 0..argc {
            argv.push(unescape(lines.field("arg")?).ok_or(RecordError::BadValue("arg"))?);
        }
        let cert = openssl::base64::decode_block(lines.field("cert")?).map_err(|_| RecordError::BadValue("cert"))?;
        let signed = text.as_bytes()[..lines.consumed].to_vec();
        let sig = openssl::base64::decode_block(lines.field("sig")?).map_err(|_| RecordError::BadValue("sig"))?;
        if !lines.rest.is_empty() {
            return Err(RecordError::Trailing);
        }
        for (v, n, k) in [
            (&id, 32, "id"),
            (&domain, 20, "domain"),
            (&session, 16, "session"),
            (&client, 16, "client"),
        ] {
            if !is_hex(v, n) {
                return Err(RecordError::BadValue(k));
            }
        }
        if argv[0].is_empty() || timeout_secs == 0 || timeout_secs > MAX_TIMEOUT_SECS {
            return Err(RecordError::BadValue(if argv[0].is_empty() {
                "arg"
            } else {
                "timeout"
            }));
        }
        let req = Request {
            id: id.to_string(),
            domain: domain.to_string(),
            generation,
            session: session.to_string(),
            client: client.to_string(),
            cwd,
            timeout_secs,
            justification,
            argv,
            cert,
        };
        Ok((req, signed, sig))
    }
}

struct Lines<'a> {
    rest: &'a str,
    consumed: usize,
}

impl<'a> Lines<'a> {
    fn next_line(&mut self, what: &'static str) -> Result<&'a str, RecordError> {
        let end = self.rest.find('\n').ok_or(RecordError::Missing(what))?;
        let line = &self.rest[..end];
        self.rest = &self.rest[end + 1..];
        self.consumed += end + 1;
        Ok(line)
    }
    fn field(&mut self, key: &'static str) -> Result<&'a str, RecordError> {
        let line = self.next_line(key)?;
        match line.split_once(' ') {
            Some((k, v)) if k == key => Ok(v),
            _ => Err(RecordError::Unexpected {
                expected: key,
                line: line.to_string(),
            }),
        }
    }
}

// ---- results ------------------------------------------------------------------

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

impl Outcome {
    pub fn encode(&self) -> String {
        let code = match self.status {
            Status::Completed(c) => c,
            _ => -1,
        };
        let mut s = format!(
            "{RESULT_MAGIC}\nid {}\nstatus {}\nexit {code}\nreason {}\nargc {}\n",
            self.id,
            self.status.name(),
            escape(&self.reason),
            self.argv.len()
        );
        for a in &self.argv {
            s.push_str(&format!("arg {}\n", escape(a)));
        }
        s.push_str(&format!(
            "stdout-truncated {}\nstderr-truncated {}\nstdout {}\nstderr {}\n",
            self.stdout_truncated as u8,
            self.stderr_truncated as u8,
            b64_line(&self.stdout),
            b64_line(&self.stderr)
        ));
        s
    }

    pub fn parse(data: &[u8]) -> Result<Outcome, RecordError> {
        if data.len() > MAX_RESULT_BYTES {
            return Err(RecordError::TooLarge(data.len()));
        }
        let text = std::str::from_utf8(data).map_err(|_| RecordError::NotUtf8)?;
        let mut l = Lines {
            rest: text,
            consumed: 0,
        };
        if l.next_line("magic")? != RESULT_MAGIC {
            return Err(RecordError::BadValue("magic"));
        }
        let id = l.field("id")?.to_string();
        let status = l.field("status")?;
        let code: i32 = l.field("exit")?.parse().map_err(|_| RecordError::BadValue("exit"))?;
        let status = match status {
            "completed" => Status::Completed(code),
            "denied" => Status::Denied,
            "timed-out" => Status::TimedOut,
            "cancelled" => Status::Cancelled,
            "failed" => Status::Failed,
            "expired" => Status::Expired,
            _ => return Err(RecordError::BadValue("status")),
        };
        let reason = unescape(l.field("reason")?).ok_or(RecordError::BadValue("reason"))?;
        let argc: usize = l.field("argc")?.parse().map_err(|_| RecordError::BadValue("argc"))?;
        if argc > MAX_ARGS {
            return Err(RecordError::BadValue("argc"));
        }
        let mut argv = Vec::new();
        for _ in 0..argc {
            argv.push(unescape(l.field("arg")?).ok_or(RecordError::BadValue("arg"))?);
        }
        let flag = |v: &str, k| match v {
            "0" => Ok(false),
            "1" => Ok(true),
            _ => Err(RecordError::BadValue(k)),
        };
        let stdout_truncated = flag(l.field("stdout-truncated")?, "stdout-truncated")?;
        let stderr_truncated = flag(l.field("stderr-truncated")?, "stderr-truncated")?;
        let stdout = b64_decode(l.field("stdout")?).ok_or(RecordError::BadValue("stdout"))?;
        let stderr = b64_decode(l.field("stderr")?).ok_or(RecordError::BadValue("stderr"))?;
        if !l.rest.is_empty() {
            return Err(RecordError::Trailing);
        }
        Ok(Outcome {
            id,
            status,
            argv,
            reason,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
        })
    }
}

fn b64_line(b: &[u8]) -> String {
    if b.is_empty() {
        "-".into()
    } else {
        openssl::base64::encode_block(b)
    }
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    if s == "-" {
        Some(Vec::new())
    } else {
        openssl::base64::decode_block(s).ok()
    }
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
/// runs.
pub const GIT_HARDENING: &[&str] = &[
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
];

/// The argv the broker runs: host Git gets [`GIT_HARDENING`].
pub fn harden_git(argv: &[String]) -> Vec<String> {
    let base = argv[0].rsplit('/').next().unwrap_or(&argv[0]);
    if base != "git" {
        return argv.to_vec();
    }
    let mut v = vec![argv[0].clone()];
    v.extend(GIT_HARDENING.iter().map(|s| s.to_string()));
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

    fn req() -> Request {
        Request {
            id: "a".repeat(32),
            domain: "b".repeat(20),
            generation: 3,
            session: "c".repeat(16),
            client: "d".repeat(16),
            cwd: "sub dir".into(),
            timeout_secs: 30,
            justification: "need\nthe host %".into(),
            argv: vec!["git".into(), "--version".into(), "\u{1b}[2J".into()],
            cert: vec![1, 2, 3],
        }
    }

    #[test]
    fn request_round_trips_and_signed_part_is_exact() {
        let r = req();
        let rec = r.encode(b"sig");
        let (back, signed, sig) = Request::parse(rec.as_bytes()).unwrap();
        assert_eq!(back, r);
        assert_eq!(signed, r.signed_part().into_bytes());
        assert_eq!(sig, b"sig");
    }

    #[test]
    fn tampering_and_garbage_are_rejected() {
        let rec = req().encode(b"sig");
        assert!(Request::parse(format!("{rec}extra\n").as_bytes()).is_err());
        assert!(Request::parse(rec.replace("argc 3", "argc 2").as_bytes()).is_err());
        assert!(Request::parse(rec.replace("id aaaa", "id ../a").as_bytes()).is_err());
        assert!(Request::parse(&vec![b'x'; MAX_REQUEST_BYTES + 1]).is_err());
        assert!(Request::parse(b"LZESC1\n").is_err());
        assert!(Request::parse(&[0xff, 0xfe]).is_err());
        // Random bytes never panic.
        let mut x: u32 = 1;
        for n in 0..2000 {
            let mut v = rec.clone().into_bytes();
            x = x.wrapping_mul(1664525).wrapping_add(1013904223);
            let p = (x as usize) % v.len();
            v[p] = (x >> 8) as u8;
            v.truncate(v.len() - (n % 7));
            let _ = Request::parse(&v);
        }
    }

    #[test]
    fn outcome_round_trips() {
        let o = Outcome {
            id: "a".repeat(32),
            status: Status::Completed(3),
            argv: vec!["echo".into(), "x y".into()],
            reason: "approved by the developer".into(),
            stdout: b"out\n".to_vec(),
            stderr: vec![],
            stdout_truncated: true,
            stderr_truncated: false,
        };
        assert_eq!(Outcome::parse(o.encode().as_bytes()).unwrap(), o);
        let d = Outcome {
            status: Status::Denied,
            ..o
        };
        assert_eq!(
            Outcome::parse(d.encode().as_bytes()).unwrap().status.exit_code(),
            EXIT_DENIED
        );
    }

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
        let g = harden_git(&v(&["git", "status"]));
        assert_eq!(g[0], "git");
        assert_eq!(g.last().unwrap(), "status");
        assert!(g.contains(&"safe.bareRepository=explicit".to_string()));
        assert_eq!(harden_git(&v(&["ls", "-l"])), v(&["ls", "-l"]));
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
