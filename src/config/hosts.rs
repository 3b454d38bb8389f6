//! `network.hosts`: the names a Domain may reach in allow-by-name mode
//! (docs/network.md, "Egress by name").
//!
//! A pattern is an exact DNS name (`api.anthropic.com`) or `*.` and a name
//! (`*.github.com`: any name below it, not the name itself), with an
//! optional `:PORT`; without one it allows ports 80 and 443. Names are
//! ASCII (IDNA "xn--" form for international names), compared lowercase.

use std::fmt;

/// Ports a pattern without `:PORT` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPattern {
    /// Lowercase, without the `*.` and without a trailing dot.
    pub name: String,
    /// `*.NAME`: any name strictly below `name`.
    pub wildcard: bool,
    /// `None`: [`DEFAULT_PORTS`].
    pub port: Option<u16>,
}

impl HostPattern {
    /// Whether `name` (any case, optional trailing dot) matches, port aside.
    pub fn matches_name(&self, name: &str) -> bool {
        let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if self.wildcard {
            n.len() > self.name.len() + 1
                && n.ends_with(&self.name)
                && n.as_bytes()[n.len() - self.name.len() - 1] == b'.'
        } else {
            n == self.name
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
    Empty,
    /// `*` alone, or a `*` anywhere but a leading `*.`.
    Star,
    /// `*.com`: a wildcard over a top-level domain.
    WildTld,
    /// An IPv4 or IPv6 literal.
    Address,
    Port,
    /// Non-ASCII: not in IDNA (`xn--`) form.
    Unicode,
    /// A label that is not `[a-z0-9-]{1,63}` without a leading or trailing `-`.
    Label,
    TooLong,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            PatternError::Empty => "a host name like \"api.example.com\" (empty)",
            PatternError::Star => {
                "a host name, or \"*.\" and a name for its subdomains (a bare \"*\" or a \"*\" inside a name would \
                 match too much)"
            }
            PatternError::WildTld => {
                "a wildcard below a registered name, like \"*.example.com\" (a wildcard over a top-level domain \
                 matches too much)"
            }
            PatternError::Address => "a host name, not an address (open address ranges with network.allow)",
            PatternError::Port => "an optional \":PORT\" with PORT a number in 1..=65535",
            PatternError::Unicode => "an ASCII host name (write international names in their IDNA form, \"xn--...\")",
            PatternError::Label => "a host name of labels [a-z0-9-] (1 to 63 characters, no leading or trailing \"-\")",
            PatternError::TooLong => "a host name of at most 253 characters",
        })
    }
}

impl std::str::FromStr for HostPattern {
    type Err = PatternError;

    fn from_str(s: &str) -> Result<HostPattern, PatternError> {
        if s.is_empty() {
            return Err(PatternError::Empty);
        }
        if !s.is_ascii() {
            return Err(PatternError::Unicode);
        }
        if s.starts_with('[') || s.matches(':').count() > 1 {
            return Err(PatternError::Address);
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => {
                let ok = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
                let n: u32 = if ok { p.parse().unwrap_or(0) } else { 0 };
                if !(1..=65535).contains(&n) {
                    return Err(PatternError::Port);
                }
                (h, Some(n as u16))
            }
            None => (s, None),
        };
        let (wildcard, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        if name.contains('*') || name.is_empty() && wildcard || host == "*" {
            return Err(PatternError::Star);
        }
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if name.is_empty() {
            return Err(PatternError::Empty);
        }
        if name.parse::<std::net::Ipv4Addr>().is_ok() {
            return Err(PatternError::Address);
        }
        if name.len() > 253 {
            return Err(PatternError::TooLong);
        }
        let labels: Vec<&str> = name.split('.').collect();
        for l in &labels {
            let b = l.as_bytes();
            let ok = !b.is_empty()
                && b.len() <= 63
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
            if !ok {
                return Err(PatternError::Label);
            }
        }
        // All-numeric last label: an address-like name (inet_aton forms).
        if labels.last().is_some_and(|l| l.bytes().all(|c| c.is_ascii_digit())) {
            return Err(PatternError::Address);
        }
        if wildcard && labels.len() < 2 {
            return Err(PatternError::WildTld);
        }
        Ok(HostPattern { name, wildcard, port })
    }
}

/// The pattern of `list` that allows `name:port`, if any.
pub fn allowing<'a>(list: &'a [HostPattern], name: &str, port: u16) -> Option<&'a HostPattern> {
    list.iter().find(|p| p.matches_name(name) && p.allows_port(port))
}

/// The `hosts = [...]` line that would allow `refused` (name, port) pairs,
/// added to `current`.
pub fn suggest(current: &[HostPattern], refused: &[(String, u16)]) -> String {
    let mut all: Vec<String> = current.iter().map(|p| p.to_string()).collect();
    for (n, port) in refused {
        let p = HostPattern {
            name: n.to_ascii_lowercase(),
            wildcard: false,
            port: (!DEFAULT_PORTS.contains(port)).then_some(*port),
        };
        if allowing(current, n, *port).is_none() && !all.contains(&p.to_string()) {
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
        assert!(a.matches_name("api.anthropic.com.") && a.allows_port(443) && a.allows_port(80));
        assert!(!a.allows_port(22) && !a.matches_name("x.api.anthropic.com"));
        let w = p("*.github.com").unwrap();
        assert!(w.matches_name("api.github.com") && w.matches_name("a.b.github.com"));
        assert!(!w.matches_name("github.com") && !w.matches_name("evilgithub.com"));
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
            ("1.2.3.4", PatternError::Address),
            ("1.2.3.4:443", PatternError::Address),
            ("[::1]:443", PatternError::Address),
            ("::1", PatternError::Address),
            ("example.com:0", PatternError::Port),
            ("example.com:65536", PatternError::Port),
            ("example.com:", PatternError::Port),
            ("example.com:+1", PatternError::Port),
            ("bücher.example", PatternError::Unicode),
            ("-a.example", PatternError::Label),
            ("a_b.example", PatternError::Label),
            ("a..example", PatternError::Label),
            ("", PatternError::Empty),
        ] {
            assert_eq!(p(s), Err(e.clone()), "{s}");
        }
    }

    #[test]
    fn suggestion_adds_only_what_is_missing() {
        let cur = vec![p("a.test").unwrap()];
        let s = suggest(
            &cur,
            &[("b.test".into(), 443), ("a.test".into(), 443), ("git.test".into(), 22)],
        );
        assert_eq!(s, "hosts = [\"a.test\", \"b.test\", \"git.test:22\"]");
    }
}
