//! `network.hosts`: the names a Domain may reach in allow-by-name mode
//! (docs/network.md, "Egress by name").
//!
//! A pattern is an exact DNS name (`api.anthropic.com`) or `*.` and a name
//! (`*.github.com`: any name below it, not the name itself), with an
//! optional `:PORT`; without one it allows ports 80 and 443. Names are
//! ASCII (IDNA "xn--" form for international names), compared lowercase.

use std::fmt;

pub use super::hostname::{HostName, NameError};

/// Ports a pattern without `:PORT` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPattern {
    /// Without the `*.`.
    pub name: HostName,
    /// `*.NAME`: any name strictly below `name`.
    pub wildcard: bool,
    /// `None`: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

impl HostPattern {
    /// Whether `name` matches, port aside.
    pub fn matches_name(&self, name: &HostName) -> bool {
        if self.wildcard {
            name.is_below(&self.name)
        } else {
            *name == self.name
        }
    }

    pub fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        match self.port {
            Some(p) => vec![p],
            None => DEFAULT_PORTS.to_vec(),
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.wildcard {
            f.write_str("*.")?;
        }
        f.write_str(&self.name)?;
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// Why a `hosts` entry is not a pattern (the config error's "expected").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// `*` alone, or a `*` anywhere but a leading `*.`.
    Star,
    /// `*.com`: a wildcard over a top-level domain.
    WildTld,
    Port,
    /// The name is not a [`HostName`].
    Name(NameError),
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            PatternError::Star => f.write_str(
                "a host name, or \"*.\" and a name for its subdomains (a bare \"*\" or a \"*\" inside a name would \
                 match too much)",
            ),
            PatternError::WildTld => f.write_str(
                "a wildcard below a registered name, like \"*.example.com\" (a wildcard over a top-level domain \
                 matches too much)",
            ),
            PatternError::Port => f.write_str("an optional \":PORT\" with PORT a number in 1..=65535"),
            PatternError::Name(e) => e.fmt(f),
        }
    }
}

impl std::str::FromStr for HostPattern {
    type Err = PatternError;

    /// `[*.]NAME[:PORT]`: the `:PORT` and the `*.` are split off first,
    /// the rest is a [`HostName`].
    fn from_str(s: &str) -> Result<HostPattern, PatternError> {
        if s.starts_with('[') || s.matches(':').count() > 1 {
            return Err(PatternError::Name(NameError::Address));
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(parse_port(p).ok_or(PatternError::Port)?)),
            None => (s, None),
        };
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') || name.is_empty() && wildcard {
            return Err(PatternError::Star);
        }
        let name = HostName::from_bytes(name.as_bytes()).map_err(PatternError::Name)?;
        if wildcard && name.labels().count() < 2 {
            return Err(PatternError::WildTld);
        }
        Ok(HostPattern { name, wildcard, port })
    }
}

/// A port in 1..=65535 written as 1 to 5 ASCII digits (no sign, no space).
pub fn parse_port(p: &str) -> Option<u16> {
    let ok = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    let n: u32 = if ok { p.parse().ok()? } else { 0 };
    (1..=65535).contains(&n).then_some(n as u16)
}

/// The pattern of `list` that allows `name:port`, if any.
pub fn allowing<'a>(list: &'a [HostPattern], name: &HostName, port: u16) -> Option<&'a HostPattern> {
    list.iter().find(|p| p.matches_name(name) && p.allows_port(port))
}

/// Whether `name` is allowed only through `*.` patterns (on some port):
/// the gate's resolver does not ask upstream for it (docs/network.md,
/// "Names under a wildcard").
pub fn only_by_wildcard(list: &[HostPattern], name: &HostName) -> bool {
    list.iter().any(|p| p.wildcard && p.matches_name(name)) && !list.iter().any(|p| !p.wildcard && p.name == *name)
}

/// The `hosts = [...]` line that would allow `refused` (name, port) pairs,
/// added to `current` (a refused entry that is no host name is left out).
pub fn suggest(current: &[HostPattern], refused: &[(String, u16)]) -> String {
    let mut all: Vec<String> = current.iter().map(|p| p.to_string()).collect();
    for (n, port) in refused {
        let Ok(name) = HostName::from_bytes(n.as_bytes()) else {
            continue;
        };
        if allowing(current, &name, *port).is_some() {
            continue;
        }
        let p = HostPattern {
            name,
            wildcard: false,
            port: (!DEFAULT_PORTS.contains(port)).then_some(*port),
        };
        if !all.contains(&p.to_string()) {
            all.push(p.to_string());
        }
    }
    let q: Vec<String> = all.iter().map(|s| format!("{s:?}")).collect();
    format!("hosts = [{}]", q.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<HostPattern, PatternError> {
        s.parse()
    }

    #[test]
    fn patterns_parse_and_match() {
        let a = p("API.Anthropic.com").unwrap();
        assert_eq!(a.to_string(), "api.anthropic.com");
        let n = |s: &str| -> HostName { s.parse().unwrap() };
        assert!(a.matches_name(&n("api.anthropic.com.")) && a.allows_port(443) && a.allows_port(80));
        assert!(!a.allows_port(22) && !a.matches_name(&n("x.api.anthropic.com")));
        let w = p("*.github.com").unwrap();
        assert!(w.matches_name(&n("api.github.com")) && w.matches_name(&n("a.b.github.com")));
        assert!(!w.matches_name(&n("github.com")) && !w.matches_name(&n("evilgithub.com")));
        assert!(only_by_wildcard(std::slice::from_ref(&w), &n("a.github.com")));
        assert!(!only_by_wildcard(
            &[w, p("a.github.com:22").unwrap()],
            &n("a.github.com")
        ));
        let s = p("github.com:22").unwrap();
        assert!(s.allows_port(22) && !s.allows_port(443));
        assert_eq!(s.to_string(), "github.com:22");
        assert_eq!(p("xn--bcher-kva.example").unwrap().name, "xn--bcher-kva.example");
    }

    #[test]
    fn bad_patterns_say_why() {
        for (s, e) in [
            ("*", PatternError::Star),
            ("*.", PatternError::Star),
            ("a.*.com", PatternError::Star),
            ("*.com", PatternError::WildTld),
            ("1.2.3.4", PatternError::Name(NameError::Address)),
            ("1.2.3.4:443", PatternError::Name(NameError::Address)),
            ("[::1]:443", PatternError::Name(NameError::Address)),
            ("::1", PatternError::Name(NameError::Address)),
            ("*.127.1", PatternError::Name(NameError::Address)),
            ("example.com:0", PatternError::Port),
            ("example.com:65536", PatternError::Port),
            ("example.com:", PatternError::Port),
            ("example.com:+1", PatternError::Port),
            ("bücher.example", PatternError::Name(NameError::NotAscii)),
            ("-a.example", PatternError::Name(NameError::Hyphen)),
            ("a_b.example", PatternError::Name(NameError::Byte(b'_'))),
            ("a..example", PatternError::Name(NameError::EmptyLabel)),
            ("", PatternError::Name(NameError::Empty)),
        ] {
            assert_eq!(p(s), Err(e.clone()), "{s}");
        }
    }

    #[test]
    fn suggestion_adds_only_what_is_missing() {
        let cur = vec![p("a.test").unwrap()];
        let s = suggest(
            &cur,
            &[
                ("b.test".into(), 443),
                ("a.test".into(), 443),
                ("git.test".into(), 22),
                ("bad?name".into(), 443),
            ],
        );
        assert_eq!(s, "hosts = [\"a.test\", \"b.test\", \"git.test:22\"]");
    }
}
