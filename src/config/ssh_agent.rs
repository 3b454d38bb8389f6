//! `[profiles.NAME.ssh_agent]`: which of the developer's SSH agent keys
//! the sandbox may use, and how each signature is approved
//! (docs/config.md, "SSH agent"):
//!
//! ```toml
//! [profiles.dev.ssh_agent]
//! keys = ["SHA256:…"]                   # the keys the sandbox sees
//! approve = "each"                      # | "session" | "rule"
//! rules = [
//!   { key = "SHA256:…", host = "github.com", user = "git" },
//!   { key = "SHA256:…", namespace = "git" },
//! ]
//! ```
//!
//! Parsing only: the strict grammar of each value, with file, line and
//! key in every error. A rule's `key` must be one of `keys`.

use std::path::Path;

use super::toml::{join_key, Item, Table, Val};
use super::ConfigError;

const KEYS: &[&str] = &["keys", "approve", "rules"];
const RULE_KEYS: &[&str] = &["key", "host", "user", "namespace"];

/// How a signature that no rule approves is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Approve {
    /// Ask at the asking session's terminal for every signature.
    Each,
    /// Ask once per (session, key); later signatures of that session with
    /// that key are approved.
    Session,
    /// Only rules approve; anything else is refused without asking.
    Rule,
}

/// What a rule approves without asking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RuleUse {
    /// SSH user authentication as `user` to a server whose host key the
    /// developer's known_hosts lists for `host`.
    Login { host: String, user: String },
    /// `ssh-keygen -Y sign -n NAMESPACE`.
    Namespace(String),
}

/// One rule: a key and the exact use it approves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SshRule {
    /// `SHA256:` and 43 base64 characters, as `ssh-add -l` prints it.
    pub key: String,
    pub what: RuleUse,
}

/// `[profiles.NAME.ssh_agent]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SshAgent {
    /// Key fingerprints, non-empty, unique, in file order.
    pub keys: Vec<String>,
    pub approve: Approve,
    pub rules: Vec<SshRule>,
}

/// Whether `s` is an OpenSSH SHA256 key fingerprint: `SHA256:` then the
/// 43 characters of an unpadded base64 of 32 bytes.
pub fn valid_fingerprint(s: &str) -> bool {
    let Some(b64) = s.strip_prefix("SHA256:") else {
        return false;
    };
    b64.len() == 43
        && b64
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
        // The last character carries 2 bits: one of the 16 with the low 4 bits zero.
        && b"AEIMQUYcgkosw048".contains(&b64.as_bytes()[42])
}

/// A host a login rule may name: a DNS name (lowercase labels of
/// `[a-z0-9-_]`), an IPv4 literal, or `[NAME]:PORT` for a server on
/// another port than 22, as known_hosts writes it.
pub fn valid_rule_host(s: &str) -> bool {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 253
            && n.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_')
            })
    };
    if let Some(rest) = s.strip_prefix('[') {
        let Some((name, port)) = rest.split_once("]:") else {
            return false;
        };
        let port_ok = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|c| c.is_ascii_digit())
            && !port.starts_with('0')
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p) && p != 22);
        return name_ok(name) && port_ok;
    }
    name_ok(s)
}

/// A login user name: 1 to 64 bytes of `[A-Za-z0-9._-]`, not starting with `-`.
pub fn valid_rule_user(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && !s.starts_with('-')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// An `ssh-keygen -Y` namespace: 1 to 64 bytes of `[A-Za-z0-9._@-]`.
pub fn valid_namespace(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'@'))
}

struct P<'a> {
    file: &'a Path,
}

impl P<'_> {
    fn invalid(&self, line: usize, key: &str, expected: &str, got: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line,
            key: key.to_string(),
            expected: expected.to_string(),
            got,
        }
    }

    fn known(&self, t: &Table, key: &str, allowed: &'static [&'static str]) -> Result<(), ConfigError> {
        super::known_keys(self.file, t, key, allowed)
    }

    fn string<'t>(
        &self,
        item: &'t Item,
        key: &str,
        expected: &str,
        ok: fn(&str) -> bool,
    ) -> Result<&'t str, ConfigError> {
        match &item.val {
            Val::Str(s) if ok(s) => Ok(s),
            other => Err(self.invalid(item.line, key, expected, got(other))),
        }
    }
}

fn got(v: &Val) -> String {
    match v {
        Val::Str(s) if s.chars().count() > 80 => format!("{:?}...", s.chars().take(80).collect::<String>()),
        Val::Str(s) => format!("{:?}", s),
        Val::Array(a) if a.is_empty() => "an empty array".into(),
        other => other.kind().to_string(),
    }
}

const FP: &str = "a key fingerprint as `ssh-add -l` prints it (\"SHA256:\" and 43 base64 characters)";

/// Parses `[profiles.NAME.ssh_agent]` (`key` is its dotted name).
pub(super) fn parse(file: &Path, item: &Item, key: &str) -> Result<SshAgent, ConfigError> {
    let p = P { file };
    let t = match &item.val {
        Val::Table(t) => t,
        other => return Err(p.invalid(item.line, key, "a table", got(other))),
    };
    p.known(t, key, KEYS)?;
    let keys_key = join_key(key, "keys");
    let keys_item = t.get("keys").ok_or_else(|| {
        p.invalid(
            item.line,
            &keys_key,
            "a non-empty array of key fingerprints",
            "no value".into(),
        )
    })?;
    let mut keys: Vec<(usize, String)> = Vec::new();
    match &keys_item.val {
        Val::Array(a) if !a.is_empty() => {
            for i in a {
                let s = p.string(i, &keys_key, FP, valid_fingerprint)?;
                if let Some((first, _)) = keys.iter().find(|(_, k)| k == s) {
                    return Err(ConfigError::Duplicate {
                        path: file.to_path_buf(),
                        line: i.line,
                        first_line: *first,
                        key: keys_key,
                        value: format!("{:?}", s),
                    });
                }
                keys.push((i.line, s.to_string()));
            }
        }
        other => {
            return Err(p.invalid(
                keys_item.line,
                &keys_key,
                "a non-empty array of key fingerprints",
                got(other),
            ))
        }
    }
    let approve = match t.get("approve") {
        None => Approve::Each,
        Some(i) => {
            let k = join_key(key, "approve");
            const EXPECTED: &str = "\"each\", \"session\" or \"rule\"";
            match &i.val {
                Val::Str(s) if s == "each" => Approve::Each,
                Val::Str(s) if s == "session" => Approve::Session,
                Val::Str(s) if s == "rule" => Approve::Rule,
                other => return Err(p.invalid(i.line, &k, EXPECTED, got(other))),
            }
        }
    };
    let mut rules: Vec<SshRule> = Vec::new();
    if let Some(i) = t.get("rules") {
        let rk = join_key(key, "rules");
        const EXPECTED: &str = "an array of inline tables ({ key, host, user } or { key, namespace })";
        let list = match &i.val {
            Val::Array(a) | Val::TableArray(a) => a,
            other => return Err(p.invalid(i.line, &rk, EXPECTED, got(other))),
        };
        for (n, r) in list.iter().enumerate() {
            let rkey = format!("{rk}[{n}]");
            let rt = match &r.val {
                Val::Table(rt) => rt,
                other => return Err(p.invalid(r.line, &rkey, EXPECTED, got(other))),
            };
            p.known(rt, &rkey, RULE_KEYS)?;
            let field = |f: &str| format!("{rkey}.{f}");
            let kitem = rt
                .get("key")
                .ok_or_else(|| p.invalid(r.line, &field("key"), FP, "no value".into()))?;
            let k = p.string(kitem, &field("key"), FP, valid_fingerprint)?;
            if !keys.iter().any(|(_, x)| x == k) {
                return Err(p.invalid(
                    kitem.line,
                    &field("key"),
                    &format!("one of the keys listed in {keys_key}"),
                    format!("{:?}", k),
                ));
            }
            let what = match (rt.get("host"), rt.get("user"), rt.get("namespace")) {
                (Some(h), Some(u), None) => RuleUse::Login {
                    host: p
                        .string(
                            h,
                            &field("host"),
                            "a host name as known_hosts lists it (\"github.com\", or \"[name]:port\" for a port other than 22)",
                            valid_rule_host,
                        )?
                        .to_string(),
                    user: p
                        .string(u, &field("user"), "a login name of [A-Za-z0-9._-]", valid_rule_user)?
                        .to_string(),
                },
                (None, None, Some(ns)) => RuleUse::Namespace(
                    p.string(ns, &field("namespace"), "a namespace of [A-Za-z0-9._@-] (\"git\")", valid_namespace)?
                        .to_string(),
                ),
                _ => {
                    return Err(p.invalid(
                        r.line,
                        &rkey,
                        "either host and user (SSH login) or namespace (ssh-keygen -Y sign), with key",
                        "another combination".into(),
                    ))
                }
            };
            let rule = SshRule {
                key: k.to_string(),
                what,
            };
            if rules.contains(&rule) {
                return Err(p.invalid(r.line, &rkey, "each rule once", "a repeated rule".into()));
            }
            rules.push(rule);
        }
    }
    if approve == Approve::Rule && rules.is_empty() {
        let line = t.get("approve").map_or(item.line, |i| i.line);
        return Err(p.invalid(
            line,
            &join_key(key, "approve"),
            "rules to approve by (approve = \"rule\" without rules would refuse every signature)",
            "\"rule\" without rules".into(),
        ));
    }
    Ok(SshAgent {
        keys: keys.into_iter().map(|(_, k)| k).collect(),
        approve,
        rules,
    })
}
