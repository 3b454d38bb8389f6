//! The exported egress gate's configuration (`lazaret gate --config
//! FILE`): what the sidecar gate of a Kubernetes pod needs from the
//! profile, and never a secret's value (each secret is named by the
//! environment variable the gate's container gets from a Kubernetes
//! Secret at run time).
//!
//! One directive a line, words separated by one space, in this order:
//!
//! ```text
//! lazaret-gate 1
//! listen 127.0.0.1:15001
//! dns 127.0.0.1:15053
//! ca-dir /run/lazaret-gate
//! idle-timeout 900
//! host api.example.com            (any number, at least one)
//! deny 10.0.0.0/8                 (any number)
//! allow 198.18.0.0/15             (any number)
//! secret VAR env=NAME sentinel=S hosts=a,b headers=authorization,x-api-key plain-http=no
//! ```
//!
//! The parser is strict: an unknown directive, a directive out of order,
//! a repeated singleton, a bad value, a line over [`MAX_LINE`] bytes or a
//! file over [`MAX_FILE`] bytes are errors naming the line. Fuzzed:
//! `fuzzing::gate_config`.

use std::net::SocketAddrV4;

use crate::config::hosts::HostPattern;
use crate::config::Prefix;

pub const MAGIC: &str = "lazaret-gate 1";
pub const MAX_LINE: usize = 4096;
pub const MAX_FILE: usize = 256 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateConfig {
    /// Where the redirected TCP connections arrive.
    pub listen: SocketAddrV4,
    /// Where the redirected DNS queries arrive.
    pub dns: SocketAddrV4,
    /// Where the gate writes its CA certificate (`ca.pem`) for the agent.
    pub ca_dir: String,
    pub idle_timeout_s: u32,
    pub hosts: Vec<HostPattern>,
    /// Addresses the gate never connects to.
    pub deny: Vec<Prefix>,
    /// Ranges the pod reaches directly (not through the gate); within
    /// them a deny still holds.
    pub allow: Vec<Prefix>,
    pub secrets: Vec<GateSecret>,
}

/// A secret the gate swaps: the agent holds `sentinel` in `var`; the
/// gate reads the real value from its own environment variable `env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSecret {
    pub var: String,
    pub env: String,
    pub sentinel: String,
    pub hosts: Vec<String>,
    pub headers: Vec<String>,
    pub plain_http: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateConfigError {
    pub line: usize,
    pub why: String,
}

impl std::fmt::Display for GateConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

impl GateConfig {
    pub fn render(&self) -> String {
        let mut s = format!("{MAGIC}\n");
        s.push_str(&format!("listen {}\n", self.listen));
        s.push_str(&format!("dns {}\n", self.dns));
        s.push_str(&format!("ca-dir {}\n", self.ca_dir));
        s.push_str(&format!("idle-timeout {}\n", self.idle_timeout_s));
        for h in &self.hosts {
            s.push_str(&format!("host {h}\n"));
        }
        for p in &self.deny {
            s.push_str(&format!("deny {p}\n"));
        }
        for p in &self.allow {
            s.push_str(&format!("allow {p}\n"));
        }
        for x in &self.secrets {
            s.push_str(&format!(
                "secret {} env={} sentinel={} hosts={} headers={} plain-http={}\n",
                x.var,
                x.env,
                x.sentinel,
                x.hosts.join(","),
                x.headers.join(","),
                if x.plain_http { "yes" } else { "no" }
            ));
        }
        s
    }
}

/// The order directives must come in.
const ORDER: [&str; 9] = [
    "lazaret-gate",
    "listen",
    "dns",
    "ca-dir",
    "idle-timeout",
    "host",
    "deny",
    "allow",
    "secret",
];

pub fn parse(text: &str) -> Result<GateConfig, GateConfigError> {
    let err = |line: usize, why: String| GateConfigError { line, why };
    if text.len() > MAX_FILE {
        return Err(err(0, format!("expected at most {MAX_FILE} bytes")));
    }
    if !text.ends_with('\n') {
        return Err(err(text.lines().count().max(1), "expected a newline at the end".into()));
    }
    let mut at = 0usize;
    let mut listen = None;
    let mut dns = None;
    let mut ca_dir = None;
    let mut idle = None;
    let mut c = GateConfig {
        listen: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
        dns: SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0),
        ca_dir: String::new(),
        idle_timeout_s: 0,
        hosts: Vec::new(),
        deny: Vec::new(),
        allow: Vec::new(),
        secrets: Vec::new(),
    };
    for (i, line) in text.split_terminator('\n').enumerate() {
        let n = i + 1;
        if line.len() > MAX_LINE {
            return Err(err(n, format!("expected a line of at most {MAX_LINE} bytes")));
        }
        if line.is_empty() || line.contains(['\r', '\t']) || line.contains("  ") || line.ends_with(' ') {
            return Err(err(
                n,
                "expected one directive, its words separated by one space".into(),
            ));
        }
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let Some(pos) = ORDER.iter().position(|w| *w == word) else {
            return Err(err(
                n,
                format!(
                    "unknown directive {:?}; expected one of: {}",
                    crate::display::escape(word),
                    ORDER.join(", ")
                ),
            ));
        };
        let repeatable = pos >= 5;
        if (i == 0) != (pos == 0) {
            return Err(err(n, format!("expected {MAGIC:?} on the first line only")));
        }
        if pos < at || (pos == at && !repeatable && i > 0) {
            return Err(err(
                n,
                format!(
                    "{word}: out of order or repeated; expected the order {}",
                    ORDER.join(", ")
                ),
            ));
        }
        at = pos;
        let bad = |what: &str| {
            err(
                n,
                format!("{word}: expected {what}, got {:?}", crate::display::escape(rest)),
            )
        };
        match word {
            "lazaret-gate" => {
                if line != MAGIC {
                    return Err(err(n, format!("expected {MAGIC:?} (this version's format)")));
                }
            }
            "listen" | "dns" => {
                let a = rest.parse::<SocketAddrV4>().map_err(|_| bad("IPV4:PORT"))?;
                if a.to_string() != rest || a.port() == 0 {
                    return Err(bad("IPV4:PORT"));
                }
                if word == "listen" {
                    listen = Some(a)
                } else {
                    dns = Some(a)
                }
            }
            "ca-dir" => {
                if !rest.starts_with('/') || rest.split('/').any(|p| p == "..") || rest.contains(' ') {
                    return Err(bad("an absolute path without spaces or .."));
                }
                ca_dir = Some(rest.to_string());
            }
            "idle-timeout" => {
                let v: u32 = rest.parse().map_err(|_| bad("seconds (1..=86400)"))?;
                if !(1..=86400).contains(&v) || rest.starts_with(['+', '0']) {
                    return Err(bad("seconds (1..=86400)"));
                }
                idle = Some(v);
            }
            "host" => {
                let h: HostPattern = rest
                    .parse()
                    .map_err(|_| bad("a host pattern (NAME, *.NAME, NAME:PORT)"))?;
                if h.to_string() != rest || c.hosts.contains(&h) {
                    return Err(bad("a host pattern in canonical form, once"));
                }
                c.hosts.push(h);
            }
            "deny" | "allow" => {
                let p: Prefix = rest.parse().map_err(|_| bad("an IPv4 prefix A.B.C.D/LEN"))?;
                if !p.addr.is_ipv4() || p.to_string() != rest {
                    return Err(bad("an IPv4 prefix A.B.C.D/LEN"));
                }
                if word == "deny" {
                    c.deny.push(p)
                } else {
                    c.allow.push(p)
                }
            }
            "secret" => c
                .secrets
                .push(parse_secret(rest).map_err(|w| err(n, format!("secret: {w}")))?),
            _ => unreachable!("ORDER lists every directive"),
        }
    }
    let missing = |w: &str| err(0, format!("expected a {w} line"));
    c.listen = listen.ok_or_else(|| missing("listen"))?;
    c.dns = dns.ok_or_else(|| missing("dns"))?;
    c.ca_dir = ca_dir.ok_or_else(|| missing("ca-dir"))?;
    c.idle_timeout_s = idle.ok_or_else(|| missing("idle-timeout"))?;
    if c.hosts.is_empty() {
        return Err(missing("host"));
    }
    for s in &c.secrets {
        if c.secrets
            .iter()
            .filter(|t| t.var == s.var || t.sentinel == s.sentinel)
            .count()
            > 1
        {
            return Err(err(
                0,
                format!("secret {}: expected each variable and sentinel once", s.var),
            ));
        }
    }
    Ok(c)
}

/// What a `secret` line lacks (`parse_secret`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SecretError {
    Shape,
    Var,
    Env,
    Sentinel,
    /// A `KEY=` field missing.
    Field(&'static str),
    /// A list field (`hosts=`, `headers=`) empty, repeated or invalid.
    List(&'static str),
    PlainHttp,
}

impl std::fmt::Display for SecretError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretError::Shape => {
                f.write_str("expected VAR env=NAME sentinel=S hosts=A,B headers=H,I plain-http=yes|no")
            }
            SecretError::Var => f.write_str("expected an environment variable name"),
            SecretError::Env => f.write_str("env=: expected an environment variable name"),
            SecretError::Sentinel => f.write_str("sentinel=: expected 16 to 128 letters, digits, _ or -"),
            SecretError::Field(k) => write!(f, "expected {k}…"),
            SecretError::List(k) => write!(f, "{k}: expected a comma-separated list of distinct valid entries"),
            SecretError::PlainHttp => f.write_str("plain-http=: expected yes or no"),
        }
    }
}

fn parse_secret(rest: &str) -> Result<GateSecret, SecretError> {
    let words: Vec<&str> = rest.split(' ').collect();
    let [var, env, sentinel, hosts, headers, plain] = words[..] else {
        return Err(SecretError::Shape);
    };
    let field = |w: &str, k: &'static str| w.strip_prefix(k).map(str::to_string).ok_or(SecretError::Field(k));
    let var = var.to_string();
    if !crate::config::valid_env_name(&var) {
        return Err(SecretError::Var);
    }
    let env = field(env, "env=")?;
    if !crate::config::valid_env_name(&env) {
        return Err(SecretError::Env);
    }
    let sentinel = field(sentinel, "sentinel=")?;
    if sentinel.len() < 16
        || sentinel.len() > 128
        || !sentinel
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(SecretError::Sentinel);
    }
    let list = |w: &str, k: &'static str, ok: &dyn Fn(&str) -> bool| {
        let v = field(w, k)?;
        let items: Vec<String> = v.split(',').map(str::to_string).collect();
        let mut seen = items.clone();
        seen.sort();
        seen.dedup();
        if v.is_empty() || seen.len() != items.len() || !items.iter().all(|i| ok(i)) {
            return Err(SecretError::List(k));
        }
        Ok(items)
    };
    let hosts = list(hosts, "hosts=", &crate::config::secrets::valid_secret_host)?;
    let headers = list(headers, "headers=", &|h: &str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    })?;
    let plain_http = match field(plain, "plain-http=")?.as_str() {
        "yes" => true,
        "no" => false,
        _ => return Err(SecretError::PlainHttp),
    };
    Ok(GateSecret {
        var,
        env,
        sentinel,
        hosts,
        headers,
        plain_http,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "lazaret-gate 1\nlisten 127.0.0.1:15001\ndns 127.0.0.1:15053\nca-dir /run/lazaret-gate\nidle-timeout 900\nhost api.example.com\nhost *.github.com\nhost github.com:22\ndeny 10.0.0.0/8\nallow 198.18.0.0/15\nsecret API_KEY env=LAZARET_SECRET_API_KEY sentinel=lzs_0123456789abcdef hosts=api.example.com headers=authorization,x-api-key plain-http=no\n";

    #[test]
    fn round_trip() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.hosts.len(), 3);
        assert_eq!(c.secrets[0].env, "LAZARET_SECRET_API_KEY");
        assert_eq!(c.render(), GOOD);
    }

    #[test]
    fn strict() {
        let bad = [
            ("", 1),
            ("lazaret-gate 2\n", 1),
            ("listen 127.0.0.1:1\n", 1),
            (&GOOD.replace("dns 127", "dns  127"), 3),
            (
                &GOOD.replace(
                    "listen 127.0.0.1:15001\ndns 127.0.0.1:15053",
                    "dns 127.0.0.1:15053\nlisten 127.0.0.1:15001",
                ),
                3,
            ),
            (
                &GOOD.replace("host api.example.com\n", "host api.example.com\nhost api.example.com\n"),
                7,
            ),
            (&GOOD.replace("host *.github.com\n", "host *.GitHub.com\n"), 7),
            (&GOOD.replace("deny 10.0.0.0/8", "deny 10.0.0.1/8"), 9),
            (&GOOD.replace("idle-timeout 900", "idle-timeout 0900"), 5),
            (&GOOD.replace("plain-http=no", "plain-http=maybe"), 11),
            (&GOOD.replace("sentinel=lzs_0123456789abcdef", "sentinel=short"), 11),
            (&GOOD.replace("allow 198", "frobnicate 198"), 10),
            (
                &GOOD.replace("allow 198.18.0.0/15\n", "allow 198.18.0.0/15\nhost late.example\n"),
                11,
            ),
            (&GOOD[..GOOD.len() - 1], 11),
        ];
        for (text, line) in bad {
            let e = parse(text).expect_err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
        let no_hosts: String = GOOD
            .lines()
            .filter(|l| !l.starts_with("host "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(parse(&no_hosts).is_err());
    }
}
