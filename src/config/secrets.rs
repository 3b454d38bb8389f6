//! `[profiles.NAME.secrets.VAR]`: keys that never enter the sandbox
//! (docs/config.md, docs/network.md "Secrets").
//!
//! ```toml
//! [profiles.claude.secrets.ANTHROPIC_API_KEY]
//! from = "env:ANTHROPIC_API_KEY"      # | "file:/abs/path" | "cmd:gh auth token"
//! hosts = ["api.anthropic.com"]       # names of the profile's network.hosts
//! ttl_s = 3600                        # optional, cmd: only: re-run after this long
//! headers = ["x-api-key"]             # optional: the request headers swapped in
//! plain_http = false                  # optional: also over plain HTTP (cleartext!)
//! ```
//!
//! Inside, `VAR` holds a sentinel (`lzr-sk-` and 40 base62 characters,
//! [`derived_sentinel`]: stable per Domain and secret until the Domain's
//! sentinel key is rotated); the real value is resolved on the host
//! ([`resolve`]) and lives only in memory ([`SecretValue`]). The egress
//! gate swaps the sentinel for the real value in requests to the secret's
//! hosts (`net::subst`).
//!
//! This module is the configuration side: parsing and checking the table,
//! resolving a source, minting sentinels. Nothing here writes a value
//! anywhere.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::secret_sources;
use super::toml::{join_key, Item, Table, Val};
use super::ConfigError;

/// Keys of one `[profiles.NAME.secrets.VAR]` table.
const SECRET_KEYS: &[&str] = &["from", "hosts", "ttl_s", "headers", "plain_http"];
/// The request headers a sentinel is swapped in when the secret names
/// none (`headers`): nowhere else (not the target, a header name, another
/// header or a body).
pub const DEFAULT_HEADERS: [&str; 3] = ["authorization", "x-api-key", "proxy-authorization"];
/// Headers no secret may name: the gate frames and routes by them.
const FRAMING_HEADERS: [&str; 8] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "accept-encoding",
];
/// The sentinel's fixed prefix.
pub const SENTINEL_PREFIX: &str = "lzr-sk-";
/// Base62 characters after [`SENTINEL_PREFIX`].
pub const SENTINEL_CHARS: usize = 40;
/// Largest real value accepted (it goes into one HTTP header).
pub const MAX_VALUE: usize = 8 * 1024;
/// Smallest real value accepted: anything shorter is not a credential, and
/// replacing it in responses would rewrite ordinary text.
pub const MIN_VALUE: usize = 8;
/// How long a `cmd:` source may run.
pub const CMD_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a secret's real value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `env:NAME`: the starting client's environment variable.
    Env(String),
    /// `file:PATH`: an absolute host path; its content, trimmed.
    File(PathBuf),
    /// `cmd:ARGV`: a host command, split on whitespace and run without a
    /// shell; its standard output, trimmed.
    Cmd(Vec<String>),
}

impl Source {
    /// `env`, `file` or `cmd` (what `net show` prints).
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Env(_) => "env",
            Source::File(_) => "file",
            Source::Cmd(_) => "cmd",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Env(n) => write!(f, "env:{n}"),
            Source::File(p) => write!(f, "file:{}", crate::display::escape_path(p)),
            Source::Cmd(argv) => write!(f, "cmd:{}", crate::display::escape(&argv.join(" "))),
        }
    }
}

impl std::str::FromStr for Source {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Source, &'static str> {
        const EXPECTED: &str = "\"env:NAME\", \"file:/ABSOLUTE/PATH\" or \"cmd:PROGRAM ARGS...\" (PROGRAM a name looked up in PATH or an absolute path; run without a shell)";
        if let Some(n) = s.strip_prefix("env:") {
            if !super::valid_env_name(n) {
                return Err(EXPECTED);
            }
            return Ok(Source::Env(n.to_string()));
        }
        if let Some(p) = s.strip_prefix("file:") {
            let p = Path::new(p);
            if !p.is_absolute() {
                return Err(EXPECTED);
            }
            return Ok(Source::File(p.to_path_buf()));
        }
        if let Some(c) = s.strip_prefix("cmd:") {
            let argv: Vec<String> = c.split_ascii_whitespace().map(String::from).collect();
            // The program is a name looked up in PATH or an absolute path:
            // `./tool` would name a file in whatever directory it runs from.
            if argv.is_empty() || (argv[0].contains('/') && !argv[0].starts_with('/')) {
                return Err(EXPECTED);
            }
            return Ok(Source::Cmd(argv));
        }
        Err(EXPECTED)
    }
}

/// One `[profiles.NAME.secrets.VAR]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    /// The guest environment variable that holds the sentinel.
    pub var: String,
    pub source: Source,
    /// Exact DNS names (lowercase, no trailing dot), unique, non-empty.
    pub hosts: Vec<String>,
    /// `ttl_s`: a `cmd:` value is re-resolved after this long; `None`: once
    /// for the Domain's life.
    pub ttl_s: Option<u64>,
    /// `headers`: lowercase request header names the sentinel is swapped
    /// in (unique, non-empty; [`DEFAULT_HEADERS`] when not set).
    pub headers: Vec<String>,
    /// `plain_http = true`: the value may also go into plain HTTP to the
    /// secret's hosts (cleartext; default false: only over verified TLS).
    pub plain_http: bool,
    /// The line of the table's `from` (for errors found later).
    pub line: usize,
}

impl Secret {
    /// Canonical text for the profile fingerprint: name, source, hosts,
    /// ttl, and the headers and `plain_http` when not the defaults (so a
    /// profile without them keeps its fingerprint); never a value.
    pub fn fingerprint_item(&self) -> String {
        let mut h = self.hosts.clone();
        h.sort_unstable();
        let mut s = format!(
            "{}\u{0}{}\u{0}{}\u{0}{}",
            self.var,
            self.source,
            h.join(","),
            self.ttl_s.map(|t| t.to_string()).unwrap_or_default()
        );
        let mut headers = self.headers.clone();
        headers.sort_unstable();
        let mut default: Vec<String> = DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect();
        default.sort_unstable();
        if headers != default {
            s.push_str(&format!("\u{0}headers={}", headers.join(",")));
        }
        if self.plain_http {
            s.push_str("\u{0}plain_http");
        }
        s
    }
}

/// Whether `s` is an exact DNS name a secret can be bound to (and a TLS
/// leaf certificate issued for): ASCII labels `[a-z0-9-]{1,63}` without a
/// leading or trailing `-`, at least two labels, 253 bytes at most, not an
/// IP literal.
pub fn valid_secret_host(s: &str) -> bool {
    if s.is_empty() || s.len() > 253 || s.parse::<std::net::IpAddr>().is_ok() {
        return false;
    }
    let labels: Vec<&str> = s.split('.').collect();
    labels.len() >= 2
        && labels.iter().all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
        && !labels[labels.len() - 1].bytes().all(|c| c.is_ascii_digit())
}

fn invalid(file: &Path, line: usize, key: &str, expected: &str, got: String) -> ConfigError {
    ConfigError::Invalid {
        path: file.to_path_buf(),
        line,
        key: key.to_string(),
        expected: expected.to_string(),
        got,
    }
}

fn got(v: &Val) -> String {
    match v {
        Val::Str(s) => format!("{:?}", s),
        other => other.kind().to_string(),
    }
}

/// Parses `[profiles.NAME.secrets]` (`key` is its dotted name). `taken`:
/// variable names the profile sets otherwise (`env`, `pass_env`), which a
/// secret may not shadow.
pub(super) fn parse(file: &Path, item: &Item, key: &str, taken: &[&str]) -> Result<Vec<Secret>, ConfigError> {
    let table: &Table = match &item.val {
        Val::Table(t) => t,
        other => {
            return Err(invalid(
                file,
                item.line,
                key,
                "a table of [secrets.VAR] tables",
                got(other),
            ))
        }
    };
    let mut out = Vec::new();
    for (var, it) in &table.entries {
        let vkey = join_key(key, var);
        if !super::valid_env_name(var) || super::is_reserved_env(var) {
            return Err(invalid(
                file,
                it.line,
                &vkey,
                "an environment variable name matching [A-Za-z_][A-Za-z0-9_]* (not LAZARET_*)",
                format!("{:?}", var),
            ));
        }
        if taken.contains(&var.as_str()) {
            return Err(invalid(
                file,
                it.line,
                &vkey,
                "a variable that `env` and `pass_env` of this profile do not also set",
                format!("{:?}", var),
            ));
        }
        let t = match &it.val {
            Val::Table(t) => t,
            other => {
                return Err(invalid(
                    file,
                    it.line,
                    &vkey,
                    "a table with `from` and `hosts`",
                    got(other),
                ))
            }
        };
        for (k, i) in &t.entries {
            if !SECRET_KEYS.contains(&k.as_str()) {
                return Err(ConfigError::UnknownKey {
                    path: file.to_path_buf(),
                    line: i.line,
                    key: join_key(&vkey, k),
                    expected: SECRET_KEYS.to_vec(),
                });
            }
        }
        let get = |k: &str| t.entries.iter().find(|(n, _)| n == k).map(|(_, i)| i);
        let fkey = join_key(&vkey, "from");
        let Some(from) = get("from") else {
            return Err(invalid(
                file,
                it.line,
                &fkey,
                "a source like \"env:NAME\"",
                "nothing".into(),
            ));
        };
        let source = match &from.val {
            Val::Str(s) if !s.contains('\0') => s
                .parse::<Source>()
                .map_err(|e| invalid(file, from.line, &fkey, e, format!("{:?}", s)))?,
            other => {
                return Err(invalid(
                    file,
                    from.line,
                    &fkey,
                    "a string like \"env:NAME\"",
                    got(other),
                ))
            }
        };
        let hkey = join_key(&vkey, "hosts");
        const HOSTS: &str = "a non-empty array of exact host names like \"api.anthropic.com\"";
        let Some(hi) = get("hosts") else {
            return Err(invalid(file, it.line, &hkey, HOSTS, "nothing".into()));
        };
        let items = match &hi.val {
            Val::Array(a) if !a.is_empty() => a,
            other => return Err(invalid(file, hi.line, &hkey, HOSTS, got(other))),
        };
        let mut hosts: Vec<String> = Vec::new();
        for h in items {
            let s = match &h.val {
                Val::Str(s) => s.strip_suffix('.').unwrap_or(s),
                other => return Err(invalid(file, h.line, &hkey, HOSTS, got(other))),
            };
            if !valid_secret_host(s) {
                return Err(invalid(
                    file,
                    h.line,
                    &hkey,
                    "exact lowercase DNS names (no \"*.\", no port, no IP address)",
                    format!("{:?}", s),
                ));
            }
            if hosts.iter().any(|x| x == s) {
                return Err(ConfigError::Duplicate {
                    path: file.to_path_buf(),
                    line: h.line,
                    first_line: hi.line,
                    key: hkey.clone(),
                    value: s.to_string(),
                });
            }
            hosts.push(s.to_string());
        }
        let ttl_s = match get("ttl_s") {
            None => None,
            Some(i) => match (&i.val, &source) {
                (Val::Int(n), Source::Cmd(_)) if *n >= 1 => Some(*n as u64),
                (_, Source::Cmd(_)) => {
                    return Err(invalid(
                        file,
                        i.line,
                        &join_key(&vkey, "ttl_s"),
                        "a number of seconds >= 1",
                        got(&i.val),
                    ))
                }
                _ => {
                    return Err(invalid(
                        file,
                        i.line,
                        &join_key(&vkey, "ttl_s"),
                        "no ttl_s (only a \"cmd:\" source is re-run)",
                        got(&i.val),
                    ))
                }
            },
        };
        let headers = match get("headers") {
            None => DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect(),
            Some(i) => parse_headers(file, i, &join_key(&vkey, "headers"))?,
        };
        let plain_http = match get("plain_http") {
            None => false,
            Some(i) => match &i.val {
                Val::Bool(b) => *b,
                other => {
                    return Err(invalid(
                        file,
                        i.line,
                        &join_key(&vkey, "plain_http"),
                        "true or false",
                        got(other),
                    ))
                }
            },
        };
        out.push(Secret {
            var: var.clone(),
            source,
            hosts,
            ttl_s,
            headers,
            plain_http,
            line: from.line,
        });
    }
    Ok(out)
}

/// `headers = ["x-goog-api-key", ...]`: HTTP field names (tokens),
/// lower-cased, unique, none the gate frames or routes by.
fn parse_headers(file: &Path, item: &Item, key: &str) -> Result<Vec<String>, ConfigError> {
    const HEADERS: &str = "a non-empty array of request header names like \"x-api-key\"";
    let items = match &item.val {
        Val::Array(a) if !a.is_empty() => a,
        other => return Err(invalid(file, item.line, key, HEADERS, got(other))),
    };
    let mut out: Vec<String> = Vec::new();
    for h in items {
        let s = match &h.val {
            Val::Str(s) => s,
            other => return Err(invalid(file, h.line, key, HEADERS, got(other))),
        };
        let token = !s.is_empty()
            && s.len() <= 256
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c));
        if !token {
            return Err(invalid(
                file,
                h.line,
                key,
                "HTTP header field names (letters, digits and !#$%&'*+-.^_`|~, no colon or space)",
                format!("{:?}", s),
            ));
        }
        let lower = s.to_ascii_lowercase();
        if FRAMING_HEADERS.contains(&lower.as_str()) {
            return Err(invalid(
                file,
                h.line,
                key,
                "a header that carries credentials, not one the gate frames or routes by (Host, Content-Length, Transfer-Encoding, Connection, Upgrade, TE, Trailer, Accept-Encoding)",
                format!("{:?}", s),
            ));
        }
        if out.contains(&lower) {
            return Err(ConfigError::Duplicate {
                path: file.to_path_buf(),
                line: h.line,
                first_line: item.line,
                key: key.to_string(),
                value: lower,
            });
        }
        out.push(lower);
    }
    Ok(out)
}

/// A secret host that no pattern of `network.hosts` allows: a config error
/// naming the secret and the host. `allowed(name)`: whether the profile's
/// (or the global) `network.hosts` lets the Domain reach `name`.
pub fn check_hosts(
    file: &Path,
    profile: &str,
    secrets: &[Secret],
    allowed: impl Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    for s in secrets {
        if let Some(h) = s.hosts.iter().find(|h| !allowed(h)) {
            return Err(invalid(
                file,
                s.line,
                &format!("profiles.{profile}.secrets.{}.hosts", s.var),
                "names that the profile's network.hosts allows (a secret goes only to a host the Domain may reach)",
                format!("{:?}, which is not in network.hosts", h),
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------

/// A real value: in memory only. `Debug` shows no byte of it; the buffer
/// is overwritten when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(Vec<u8>);

impl SecretValue {
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// Checks a resolved value: trimmed of ASCII whitespace, then
    /// [`MIN_VALUE`]..=[`MAX_VALUE`] bytes of visible ASCII (what an HTTP
    /// header carries without quoting; no CR, LF, NUL or space).
    pub fn new(raw: Vec<u8>) -> Result<SecretValue, ValueProblem> {
        let mut raw = raw;
        let end = raw.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
        let start = raw.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(end);
        let v: Vec<u8> = raw[start..end].to_vec();
        raw.iter_mut().for_each(|b| *b = 0);
        let problem = if v.is_empty() {
            Some(ValueProblem::Empty)
        } else if v.len() > MAX_VALUE {
            Some(ValueProblem::TooLong)
        } else if v.len() < MIN_VALUE {
            Some(ValueProblem::TooShort)
        } else if !v.iter().all(|b| (0x21..=0x7e).contains(b)) {
            Some(ValueProblem::NotHeaderSafe)
        } else {
            None
        };
        let value = SecretValue(v);
        match problem {
            Some(p) => Err(p),
            None => Ok(value),
        }
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretValue({} bytes)", self.0.len())
    }
}

impl Drop for SecretValue {
    fn drop(&mut self) {
        self.0.iter_mut().for_each(|b| *b = 0);
        // Keeps the compiler from eliding the wipe of memory about to be freed.
        std::hint::black_box(&self.0);
    }
}

/// What is wrong with a resolved value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueProblem {
    Empty,
    TooShort,
    TooLong,
    NotHeaderSafe,
}

impl fmt::Display for ValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueProblem::Empty => f.write_str("is empty"),
            ValueProblem::TooShort => write!(f, "is shorter than {MIN_VALUE} characters (not a credential)"),
            ValueProblem::TooLong => write!(f, "is longer than {MAX_VALUE} bytes"),
            ValueProblem::NotHeaderSafe => {
                f.write_str("contains a space, a control byte or non-ASCII text, which cannot go in an HTTP header")
            }
        }
    }
}

/// Why a secret's source gave no usable value. The message names the
/// secret, its profile and its source, and never contains a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveError {
    pub var: String,
    pub profile: String,
    pub source: String,
    pub why: String,
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "secret {} of profile {:?}: its source {} {}",
            self.var, self.profile, self.source, self.why
        )
    }
}

impl std::error::Error for ResolveError {}

/// Why a secret gave no value: a source that reaches where the sandbox
/// writes is a config error (file, line, key); any other failure is a
/// [`ResolveError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceError {
    Config(super::ConfigError),
    Resolve(ResolveError),
}

impl fmt::Display for SourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceError::Config(e) => e.fmt(f),
            SourceError::Resolve(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SourceError {}

/// Resolves `secret` on the host (`host`: the starting client's
/// environment and the Fence, `secret_sources`). A `file:` is read at its
/// canonical path; a `cmd:` runs as argv without a shell, with the
/// program, working directory and environment of
/// [`secret_sources::plan_cmd`], stdin closed, stderr discarded (it could
/// echo a value), for at most [`CMD_TIMEOUT`]. A `file:` or `cmd:` that
/// leads inside a workspace, a volume or Lazaret's own directories is a
/// config error and nothing is read or run.
pub fn resolve(profile: &str, secret: &Secret, host: &secret_sources::SourceHost) -> Result<SecretValue, SourceError> {
    let fail = |why: String| {
        SourceError::Resolve(ResolveError {
            var: secret.var.clone(),
            profile: profile.to_string(),
            source: secret.source.to_string(),
            why,
        })
    };
    let steered = |e: secret_sources::Steer| {
        let key = join_key(
            &join_key(&join_key(&join_key("profiles", profile), "secrets"), &secret.var),
            "from",
        );
        match e.config_error(&host.file, secret.line, &key, &secret.source.to_string()) {
            Some(c) => SourceError::Config(c),
            None => fail(e.to_string()),
        }
    };
    let raw: Vec<u8> = match &secret.source {
        Source::Env(n) => match host.var(n) {
            None => return Err(fail("is not set in your environment".into())),
            Some(v) => std::os::unix::ffi::OsStringExt::into_vec(v),
        },
        Source::File(p) => {
            let real = secret_sources::plan_file(p, &host.fence).map_err(steered)?;
            std::fs::read(real).map_err(|e| fail(format!("cannot be read: {e}")))?
        }
        Source::Cmd(argv) => {
            let plan = secret_sources::plan_cmd(argv, &host.env, &host.fence).map_err(steered)?;
            run_cmd(&plan).map_err(|e| fail(e.to_string()))?
        }
    };
    SecretValue::new(raw).map_err(|p| fail(format!("gave a value that {p}")))
}

/// Why a `cmd:` source gave no output.
#[derive(Debug)]
enum CmdError {
    Spawn(std::io::Error),
    NoPipe,
    Timeout,
    Wait(std::io::Error),
    Read(Option<std::io::Error>),
    Status(i32),
    Signal,
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Spawn(e) => write!(f, "could not be started: {e}"),
            CmdError::NoPipe => f.write_str("gave no output pipe"),
            CmdError::Timeout => write!(f, "did not finish within {} s", CMD_TIMEOUT.as_secs()),
            CmdError::Wait(e) => write!(f, "could not be waited for: {e}"),
            CmdError::Read(Some(e)) => write!(f, "output could not be read: {e}"),
            CmdError::Read(None) => f.write_str("output could not be read"),
            CmdError::Status(c) => write!(f, "failed (exit status {c}); run it yourself to see why"),
            CmdError::Signal => f.write_str("was killed by a signal"),
        }
    }
}

/// Runs a planned `cmd:` source; its stdout (bounded), or why not.
fn run_cmd(plan: &secret_sources::CmdPlan) -> Result<Vec<u8>, CmdError> {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(&plan.program)
        .arg0(&plan.argv[0])
        .args(&plan.argv[1..])
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&plan.cwd)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(CmdError::Spawn)?;
    let mut out = child.stdout.take().ok_or(CmdError::NoPipe)?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let r = (&mut out).take(MAX_VALUE as u64 * 2).read_to_end(&mut buf);
        // Drain the rest so the command never blocks on a full pipe.
        let _ = std::io::copy(&mut out, &mut std::io::sink());
        r.map(|_| buf)
    });
    let deadline = Instant::now() + CMD_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CmdError::Timeout);
            }
            Err(e) => return Err(CmdError::Wait(e)),
        }
    };
    let out = reader
        .join()
        .map_err(|_| CmdError::Read(None))?
        .map_err(|e| CmdError::Read(Some(e)))?;
    if !status.success() {
        let mut out = out;
        out.iter_mut().for_each(|b| *b = 0);
        return Err(match status.code() {
            Some(c) => CmdError::Status(c),
            None => CmdError::Signal,
        });
    }
    Ok(out)
}

/// A fresh sentinel: [`SENTINEL_PREFIX`] and [`SENTINEL_CHARS`] base62
/// characters from OpenSSL's RNG (rejection-sampled, so uniform). The
/// swap self-check's; a Domain's sentinels are [`derived_sentinel`]s.
pub fn sentinel() -> Result<String, openssl::error::ErrorStack> {
    base62_sentinel(openssl::rand::rand_bytes)
}

/// The sentinel of secret `var` in Domain `domain`: the same at every
/// start until the Domain's key (`storage::sentinel_key`, random, never
/// derived from a value) is rotated. HMAC-SHA256 under `key` of a label,
/// the Domain, the variable and a block counter gives the bytes, which
/// are rejection-sampled into base62 like [`sentinel`]'s: the shape is
/// the same, and without the key a sentinel says nothing about another
/// one (nor about any value: none goes in).
pub fn derived_sentinel(key: &[u8], domain: &str, var: &str) -> Result<String, openssl::error::ErrorStack> {
    let hkey = openssl::pkey::PKey::hmac(key)?;
    let mut block: u32 = 0;
    base62_sentinel(|buf| {
        let mut at = 0;
        while at < buf.len() {
            let mut h = openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), &hkey)?;
            h.update(b"lazaret sentinel v1\0")?;
            h.update(domain.as_bytes())?;
            h.update(b"\0")?;
            h.update(var.as_bytes())?;
            h.update(b"\0")?;
            h.update(&block.to_be_bytes())?;
            block += 1;
            let mac = h.sign_to_vec()?;
            let n = mac.len().min(buf.len() - at);
            buf[at..at + n].copy_from_slice(&mac[..n]);
            at += n;
        }
        Ok(())
    })
}

/// [`SENTINEL_PREFIX`] and [`SENTINEL_CHARS`] base62 characters from the
/// bytes `fill` gives, rejection-sampled (uniform if they are).
fn base62_sentinel(
    mut fill: impl FnMut(&mut [u8]) -> Result<(), openssl::error::ErrorStack>,
) -> Result<String, openssl::error::ErrorStack> {
    const ALPHABET: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut s = String::with_capacity(SENTINEL_PREFIX.len() + SENTINEL_CHARS);
    s.push_str(SENTINEL_PREFIX);
    let mut buf = [0u8; 64];
    while s.len() < SENTINEL_PREFIX.len() + SENTINEL_CHARS {
        fill(&mut buf)?;
        for b in buf {
            // 248 = 4 * 62: bytes at or above it would bias the choice.
            if b < 248 && s.len() < SENTINEL_PREFIX.len() + SENTINEL_CHARS {
                s.push(ALPHABET[(b % 62) as usize] as char);
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_profile(text: &str) -> Result<crate::config::Config, ConfigError> {
        crate::config::parse(Path::new("/cfg.toml"), text)
    }

    #[test]
    fn sentinel_shape_and_uniqueness() {
        let a = sentinel().unwrap();
        let b = sentinel().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 47);
        assert!(a.starts_with("lzr-sk-"));
        assert!(a[7..].bytes().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn derived_sentinels_are_stable_per_domain_and_secret() {
        let key = [1u8; 32];
        let a = derived_sentinel(&key, "d1", "API_KEY").unwrap();
        assert_eq!(
            a,
            derived_sentinel(&key, "d1", "API_KEY").unwrap(),
            "stable across calls"
        );
        assert_eq!(a.len(), SENTINEL_PREFIX.len() + SENTINEL_CHARS);
        assert!(a.starts_with(SENTINEL_PREFIX));
        assert!(a[7..].bytes().all(|c| c.is_ascii_alphanumeric()));
        let others = [
            derived_sentinel(&key, "d2", "API_KEY").unwrap(),
            derived_sentinel(&key, "d1", "OTHER_KEY").unwrap(),
            // The separators keep (Domain, name) pairs apart.
            derived_sentinel(&key, "d1A", "PI_KEY").unwrap(),
            derived_sentinel(&[2u8; 32], "d1", "API_KEY").unwrap(),
        ];
        for o in &others {
            assert_ne!(&a, o);
        }
        // A rotated (new random) key gives other sentinels.
        let mut fresh = [0u8; 32];
        openssl::rand::rand_bytes(&mut fresh).unwrap();
        assert_ne!(a, derived_sentinel(&fresh, "d1", "API_KEY").unwrap());
        // Every base62 character shows up over many sentinels (the
        // sampling reaches the whole alphabet, as the random one does).
        let mut seen = std::collections::HashSet::new();
        for i in 0..200 {
            seen.extend(derived_sentinel(&key, "d1", &format!("V{i}")).unwrap()[7..].bytes());
        }
        assert_eq!(seen.len(), 62);
    }

    #[test]
    fn sources_parse() {
        assert_eq!("env:API_KEY".parse::<Source>(), Ok(Source::Env("API_KEY".into())));
        assert_eq!("file:/a/b".parse::<Source>(), Ok(Source::File("/a/b".into())));
        assert_eq!(
            "cmd:gh  auth token".parse::<Source>(),
            Ok(Source::Cmd(vec!["gh".into(), "auth".into(), "token".into()]))
        );
        for bad in ["env:", "env:1X", "file:rel/p", "cmd:", "cmd:   ", "vault:x", ""] {
            assert!(bad.parse::<Source>().is_err(), "{bad}");
        }
    }

    #[test]
    fn hosts_are_exact_names() {
        for ok in ["api.anthropic.com", "api.test", "a-b.c0.test"] {
            assert!(valid_secret_host(ok), "{ok}");
        }
        for bad in [
            "*.x.com",
            "x.com:443",
            "1.2.3.4",
            "::1",
            "com",
            "API.test",
            "-a.test",
            "a..test",
            "ü.test",
        ] {
            assert!(!valid_secret_host(bad), "{bad}");
        }
    }

    #[test]
    fn config_table_parses() {
        let cfg = parse_profile(
            "[profiles.c.network]\nhosts = [\"api.anthropic.com\", \"*.github.com\", \"github.com\"]\n\
             [profiles.c.secrets.ANTHROPIC_API_KEY]\nfrom = \"env:ANTHROPIC_API_KEY\"\nhosts = [\"api.anthropic.com\"]\n\
             [profiles.c.secrets.GH_TOKEN]\nfrom = \"cmd:gh auth token\"\nhosts = [\"api.github.com\", \"github.com\"]\nttl_s = 600\n",
        )
        .unwrap();
        let p = cfg.profile("c").unwrap();
        assert_eq!(p.secrets.len(), 2);
        assert_eq!(p.secrets[0].var, "ANTHROPIC_API_KEY");
        assert_eq!(p.secrets[1].ttl_s, Some(600));
        assert_eq!(p.secrets[1].source.kind(), "cmd");
        assert_ne!(p.fingerprint(), crate::config::Profile::builtin("c").fingerprint());
        // A secret host outside network.hosts (here: none at all, or a
        // wildcard's apex) breaks the profile, naming secret and host.
        for text in [
            "[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"api.test\"]\n",
            "[network]\nhosts = [\"*.api.test\"]\n[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"api.test\"]\n",
        ] {
            let e = parse_profile(text).unwrap().profile("c").unwrap_err().to_string();
            assert!(
                e.contains("profiles.c.secrets.K.hosts") && e.contains("\"api.test\", which is not in network.hosts"),
                "{e}"
            );
        }
        let ok =
            "[network]\nhosts = [\"api.test\"]\n[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"api.test\"]\n";
        assert_eq!(
            parse_profile(ok).unwrap().profile("c").unwrap().secrets[0].hosts,
            ["api.test"]
        );
    }

    #[test]
    fn config_errors_name_line_and_key() {
        let cases = [
            (
                "[profiles.c.secrets.K]\nhosts = [\"a.test\"]\n",
                "profiles.c.secrets.K.from",
            ),
            (
                "[profiles.c.secrets.K]\nfrom = \"env:K\"\n",
                "profiles.c.secrets.K.hosts",
            ),
            (
                "[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = []\n",
                "profiles.c.secrets.K.hosts",
            ),
            (
                "[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"*.a.test\"]\n",
                "profiles.c.secrets.K.hosts",
            ),
            (
                "[profiles.c.secrets.K]\nfrom = \"vault:K\"\nhosts = [\"a.test\"]\n",
                "profiles.c.secrets.K.from",
            ),
            (
                "[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"a.test\"]\nttl_s = 5\n",
                "profiles.c.secrets.K.ttl_s",
            ),
            (
                "[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"a.test\"]\nvalue = \"x\"\n",
                "profiles.c.secrets.K.value",
            ),
            (
                "[profiles.c.secrets.LAZARET_X]\nfrom = \"env:K\"\nhosts = [\"a.test\"]\n",
                "profiles.c.secrets.LAZARET_X",
            ),
            (
                "[profiles.c]\npass_env = [\"K\"]\n[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"a.test\"]\n",
                "profiles.c.secrets.K",
            ),
        ];
        for (text, key) in cases {
            let cfg = parse_profile(text).unwrap();
            let e = cfg.profile("c").unwrap_err().to_string();
            assert!(e.contains(key) && e.contains("/cfg.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn headers_and_plain_http_parse_and_enter_the_fingerprint() {
        let text = |extra: &str| {
            format!(
                "[network]\nhosts = [\"api.test\"]\n[profiles.c.secrets.K]\nfrom = \"env:K\"\nhosts = [\"api.test\"]\n{extra}"
            )
        };
        let secret = |extra: &str| parse_profile(&text(extra)).unwrap().profile("c").unwrap().secrets[0].clone();
        let d = secret("");
        assert_eq!(d.headers, DEFAULT_HEADERS);
        assert!(!d.plain_http);
        let s = secret("headers = [\"X-Goog-Api-Key\", \"authorization\"]\nplain_http = true\n");
        assert_eq!(s.headers, ["x-goog-api-key", "authorization"]);
        assert!(s.plain_http);
        // The defaults, spelled out or not, keep the fingerprint; anything
        // else changes it.
        let same =
            secret("headers = [\"Proxy-Authorization\", \"authorization\", \"x-api-key\"]\nplain_http = false\n");
        assert_eq!(same.fingerprint_item(), d.fingerprint_item());
        assert!(!d.fingerprint_item().contains("headers") && !d.fingerprint_item().contains("plain_http"));
        assert_ne!(
            secret("headers = [\"x-api-key\"]\n").fingerprint_item(),
            d.fingerprint_item()
        );
        assert_ne!(secret("plain_http = true\n").fingerprint_item(), d.fingerprint_item());
        for (extra, line, want) in [
            ("headers = []\n", 6, "a non-empty array of request header names"),
            (
                "headers = \"x-api-key\"\n",
                6,
                "a non-empty array of request header names",
            ),
            ("headers = [1]\n", 6, "a non-empty array of request header names"),
            ("headers = [\"x api\"]\n", 6, "HTTP header field names"),
            ("headers = [\"x-api-key:\"]\n", 6, "HTTP header field names"),
            ("headers = [\"\"]\n", 6, "HTTP header field names"),
            ("headers = [\"Host\"]\n", 6, "not one the gate frames or routes by"),
            (
                "headers = [\"transfer-encoding\"]\n",
                6,
                "not one the gate frames or routes by",
            ),
            ("headers = [\"x-k\",\n  \"X-K\"]\n", 7, "listed twice"),
            ("plain_http = \"yes\"\n", 6, "expected true or false"),
            ("plain_http = 1\n", 6, "expected true or false"),
        ] {
            let e = parse_profile(&text(extra))
                .unwrap()
                .profile("c")
                .unwrap_err()
                .to_string();
            let key = if extra.starts_with("plain") {
                "plain_http"
            } else {
                "headers"
            };
            assert!(
                e.contains(&format!("/cfg.toml:{line}: profiles.c.secrets.K.{key}")) && e.contains(want),
                "{extra}: {e}"
            );
        }
    }

    #[test]
    fn host_outside_network_hosts_is_an_error() {
        let s = Secret {
            var: "K".into(),
            source: Source::Env("K".into()),
            hosts: vec!["api.test".into(), "evil.test".into()],
            ttl_s: None,
            headers: DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect(),
            plain_http: false,
            line: 3,
        };
        let e = check_hosts(Path::new("/cfg.toml"), "c", std::slice::from_ref(&s), |h| {
            h == "api.test"
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("evil.test") && e.contains("profiles.c.secrets.K.hosts") && e.contains("/cfg.toml:3:"),
            "{e}"
        );
        assert!(check_hosts(Path::new("/cfg.toml"), "c", &[s], |_| true).is_ok());
    }

    fn secret(source: Source) -> Secret {
        Secret {
            var: "K".into(),
            source,
            hosts: vec!["api.test".into()],
            ttl_s: None,
            headers: DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect(),
            plain_http: false,
            line: 1,
        }
    }

    /// A host side with `env` as the client's environment (plus a PATH)
    /// and an empty Fence.
    fn host(env: &[(&str, &str)]) -> secret_sources::SourceHost {
        let mut e: Vec<(std::ffi::OsString, std::ffi::OsString)> =
            env.iter().map(|(k, v)| (k.into(), v.into())).collect();
        e.push(("PATH".into(), "/usr/bin:/bin".into()));
        secret_sources::SourceHost {
            file: "/cfg.toml".into(),
            fence: secret_sources::Fence::default(),
            env: e,
        }
    }

    #[test]
    fn resolve_sources() {
        let env = host(&[("K", "  sk-real-12345\n")]);
        let env = &env;
        let v = resolve("c", &secret(Source::Env("K".into())), env).unwrap();
        assert_eq!(v.expose(), b"sk-real-12345");
        assert!(!format!("{v:?}").contains("real"));
        let e = resolve("c", &secret(Source::Env("NOPE".into())), env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("secret K") && e.contains("env:NOPE") && e.contains("not set"),
            "{e}"
        );

        let dir = std::env::temp_dir().join(format!("lzsecret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("key");
        std::fs::write(&f, "file-value-123\n").unwrap();
        assert_eq!(
            resolve("c", &secret(Source::File(f.clone())), env).unwrap().expose(),
            b"file-value-123"
        );
        std::fs::write(&f, "  \n").unwrap();
        let e = resolve("c", &secret(Source::File(f.clone())), env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is empty") && e.contains("file:"), "{e}");
        let e = resolve("c", &secret(Source::File(dir.join("missing"))), env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot be read"), "{e}");
        std::fs::write(&f, "has space inside\n").unwrap();
        let e = resolve("c", &secret(Source::File(f)), env).unwrap_err().to_string();
        assert!(e.contains("HTTP header"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();

        let cmd = |s: &str| secret(s.parse().unwrap());
        assert_eq!(
            resolve("c", &cmd("cmd:echo cmd-value-42"), env).unwrap().expose(),
            b"cmd-value-42"
        );
        let e = resolve("c", &cmd("cmd:false"), env).unwrap_err().to_string();
        assert!(e.contains("cmd:false") && e.contains("exit status 1"), "{e}");
        let e = resolve("c", &cmd("cmd:/nonexistent/prog x"), env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("could not be started"), "{e}");
        let e = resolve("c", &cmd("cmd:lz-no-such-program x"), env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no program lz-no-such-program in PATH"), "{e}");
        // No shell: the `;` is an argument of echo.
        assert_eq!(
            resolve("c", &cmd("cmd:echo abcdefgh;touch"), env).unwrap().expose(),
            b"abcdefgh;touch"
        );
        let e = resolve("c", &cmd("cmd:echo short"), env).unwrap_err().to_string();
        assert!(e.contains("shorter"), "{e}");
    }

    #[test]
    fn a_cmd_runs_from_home_with_the_allow_listed_environment() {
        let dir = std::env::temp_dir().join(format!("lzsecret-env-{}", std::process::id()));
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let home = std::fs::canonicalize(&home).unwrap();
        let h = home.to_str().unwrap();
        let env = host(&[
            ("HOME", h),
            ("LANG", "C.UTF-8"),
            ("PYTHONPATH", "/x"),
            ("LD_PRELOAD", "/x.so"),
            ("SECRETISH", "y"),
        ]);
        // `env` prints the child's environment (lines: no value), `pwd -P`
        // its directory.
        let plan = secret_sources::plan_cmd(&["env".into()], &env.env, &env.fence).unwrap();
        let text = String::from_utf8(run_cmd(&plan).unwrap()).unwrap();
        let mut names: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
        names.sort_unstable();
        assert_eq!(names, ["HOME", "LANG", "PATH"], "{text}");
        let out = resolve("c", &secret("cmd:pwd -P".parse().unwrap()), &env).unwrap();
        assert_eq!(out.expose(), h.as_bytes());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sources_inside_the_fence_are_config_errors_naming_the_secret() {
        let dir = std::env::temp_dir().join(format!("lzsecret-fence-{}", std::process::id()));
        let ws = dir.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ws = std::fs::canonicalize(&ws).unwrap();
        std::fs::write(ws.join("key"), "file-value-123").unwrap();
        std::fs::write(ws.join("marker-src"), "").unwrap();
        let mut env = host(&[]);
        env.fence.add(&ws, secret_sources::Reach::Workspace);
        let mut s = secret(Source::File(ws.join("key")));
        s.line = 9;
        let e = resolve("my.p", &s, &env).unwrap_err();
        let SourceError::Config(c) = &e else { panic!("{e:?}") };
        let t = c.to_string();
        assert!(
            t.starts_with("/cfg.toml:9: profiles.\"my.p\".secrets.K.from: expected a file outside")
                && t.contains(&format!("inside the workspace {}", ws.display())),
            "{t}"
        );
        // A program and an argument inside.
        let mut s = secret(Source::Cmd(vec![
            "/bin/cp".into(),
            ws.join("marker-src").display().to_string(),
            ws.join("marker").display().to_string(),
        ]));
        s.line = 4;
        let t = resolve("c", &s, &env).unwrap_err().to_string();
        assert!(
            t.starts_with("/cfg.toml:4: profiles.c.secrets.K.from: expected a program and arguments outside")
                && t.contains("whose argument"),
            "{t}"
        );
        assert!(!ws.join("marker").exists(), "nothing ran");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_relative_program_does_not_parse() {
        for bad in ["cmd:./tool", "cmd:bin/tool x", "cmd:../x"] {
            assert!(bad.parse::<Source>().is_err(), "{bad}");
        }
        let cfg = parse_profile(
            "[profiles.c.network]\nhosts = [\"a.test\"]\n[profiles.c.secrets.K]\nfrom = \"cmd:./tool\"\nhosts = [\"a.test\"]\n",
        )
        .unwrap();
        let e = cfg.profile("c").unwrap_err().to_string();
        assert!(
            e.starts_with("/cfg.toml:4: profiles.c.secrets.K.from:") && e.contains("absolute path"),
            "{e}"
        );
    }
}
