//! [`HostName`]: the one form a DNS host name takes on the egress gate's
//! path and in `network.hosts` (docs/network.md, "Names").
//!
//! Only [`HostName::from_bytes`] (and its `str` and label forms) makes
//! one, and it refuses rather than repairs: LDH labels (`[A-Za-z0-9-]`,
//! 1 to 63 bytes, no `-` first or last), at most 253 bytes in all, no
//! empty label, ASCII only (international names in their `xn--` A-label
//! form; a U-label is refused, not converted), and a last label that is
//! not a number (`127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`: what
//! `inet_aton` or a URL parser would read as an IPv4 address). The
//! normalisations are exactly two: letters are lower-cased and one
//! trailing dot is removed.

use std::fmt;

/// At most this many bytes in a name (without a trailing dot).
pub const MAX_NAME: usize = 253;
/// At most this many bytes in a label.
pub const MAX_LABEL: usize = 63;

/// A host name in canonical form (see the module docs): lower case, no
/// trailing dot, every label LDH of 1 to 63 bytes, 253 bytes at most.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostName(String);

/// Why bytes are not a [`HostName`]: what was expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    Empty,
    /// An IP literal in any form (dotted, one number, hex, octal, short,
    /// IPv6: bracketed or two `:`), or a name whose last label is a number.
    Address,
    /// A byte outside ASCII (a U-label, or not text at all).
    NotAscii,
    /// More than [`MAX_NAME`] bytes.
    TooLong,
    /// Two dots in a row, a leading dot, or two trailing dots.
    EmptyLabel,
    /// A label of more than [`MAX_LABEL`] bytes.
    LabelTooLong,
    /// An ASCII byte outside letters, digits, `-` and `.`.
    Byte(u8),
    /// A label that starts or ends with `-`.
    Hyphen,
    /// A door's `:PORT` that is not a number in 1..=65535 (HTTP `Host`,
    /// absolute-form and `CONNECT` targets).
    Port,
    /// Two names where a door takes one (two TLS `server_name`s).
    Twice,
}

impl NameError {
    /// The reason, as the gate logs it.
    pub fn reason(&self) -> &'static str {
        match self {
            NameError::Empty => "not a host name: empty",
            NameError::Address => "an address, not a listed name",
            NameError::NotAscii => "not a host name: not ASCII (IDNA names are sent as xn--)",
            NameError::TooLong => "not a host name: longer than 253 bytes",
            NameError::EmptyLabel => "not a host name: an empty label",
            NameError::LabelTooLong => "not a host name: a label longer than 63 bytes",
            NameError::Byte(_) => "not a host name: a byte outside letters, digits, '-' and '.'",
            NameError::Hyphen => "not a host name: a label starting or ending with '-'",
            NameError::Port => "not a port in 1..=65535",
            NameError::Twice => "two names where one is expected",
        }
    }
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("a host name like \"api.example.com\" (empty)"),
            NameError::Address => f.write_str("a host name, not an address (open address ranges with network.allow)"),
            NameError::NotAscii => {
                f.write_str("an ASCII host name (write international names in their IDNA form, \"xn--...\")")
            }
            NameError::TooLong => f.write_str("a host name of at most 253 characters"),
            NameError::EmptyLabel => f.write_str("a host name without empty labels (\"..\", a leading dot)"),
            NameError::LabelTooLong => f.write_str("a host name whose labels have at most 63 characters"),
            NameError::Byte(b) => write!(
                f,
                "a host name of labels [a-z0-9-] separated by dots (found {})",
                crate::display::escape_bytes(&[*b])
            ),
            NameError::Hyphen => f.write_str("a host name whose labels do not start or end with \"-\""),
            NameError::Port => f.write_str("an optional \":PORT\" with PORT a number in 1..=65535"),
            NameError::Twice => f.write_str("one host name"),
        }
    }
}

impl std::error::Error for NameError {}

impl HostName {
    /// The one parser: see the module docs.
    pub fn from_bytes(b: &[u8]) -> Result<HostName, NameError> {
        if b.is_empty() {
            return Err(NameError::Empty);
        }
        if b[0] == b'[' || b.iter().filter(|c| **c == b':').count() > 1 {
            return Err(NameError::Address);
        }
        if !b.is_ascii() {
            return Err(NameError::NotAscii);
        }
        let b = b.strip_suffix(b".").unwrap_or(b);
        if b.is_empty() {
            return Err(NameError::Empty);
        }
        if b.len() > MAX_NAME {
            return Err(NameError::TooLong);
        }
        let mut last: &[u8] = b;
        for l in b.split(|c| *c == b'.') {
            check_label(l)?;
            last = l;
        }
        if is_number(last) {
            return Err(NameError::Address);
        }
        Ok(HostName(b.iter().map(|c| c.to_ascii_lowercase() as char).collect()))
    }

    /// A name from DNS wire labels (a `.` inside a label is a byte
    /// outside the grammar; no labels is [`NameError::Empty`]).
    pub fn from_labels(labels: &[&[u8]]) -> Result<HostName, NameError> {
        if labels.is_empty() {
            return Err(NameError::Empty);
        }
        if labels.iter().any(|l| l.contains(&b'.')) {
            return Err(NameError::Byte(b'.'));
        }
        HostName::from_bytes(&labels.join(&b'.'))
    }

    /// The labels, left to right.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.0.split('.')
    }

    /// Whether `self` is strictly below `parent` (`a.b.test` below `b.test`).
    pub fn is_below(&self, parent: &HostName) -> bool {
        self.0.len() > parent.0.len() + 1
            && self.0.ends_with(&parent.0)
            && self.0.as_bytes()[self.0.len() - parent.0.len() - 1] == b'.'
    }

    /// How bytes that came from outside are shown in a log or a refusal:
    /// escaped, cut after 80 bytes.
    pub fn shown(raw: &[u8]) -> String {
        const CUT: usize = 80;
        let mut s = crate::display::escape_bytes(&raw[..raw.len().min(CUT)]);
        if raw.len() > CUT {
            s.push_str("...");
        }
        s
    }
}

fn check_label(l: &[u8]) -> Result<(), NameError> {
    if l.is_empty() {
        return Err(NameError::EmptyLabel);
    }
    if l.len() > MAX_LABEL {
        return Err(NameError::LabelTooLong);
    }
    if let Some(c) = l.iter().find(|c| !(c.is_ascii_alphanumeric() || **c == b'-')) {
        return Err(NameError::Byte(*c));
    }
    if l[0] == b'-' || l[l.len() - 1] == b'-' {
        return Err(NameError::Hyphen);
    }
    Ok(())
}

/// A label an IPv4 parser would read as a number: decimal or octal
/// digits, or `0x` and hex digits (the URL standard's "ends in a number").
fn is_number(l: &[u8]) -> bool {
    if l.iter().all(|c| c.is_ascii_digit()) {
        return true;
    }
    match l {
        [b'0', b'x' | b'X', rest @ ..] => rest.iter().all(|c| c.is_ascii_hexdigit()),
        _ => false,
    }
}

impl std::str::FromStr for HostName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<HostName, NameError> {
        HostName::from_bytes(s.as_bytes())
    }
}

impl fmt::Display for HostName {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A `HostName` reads as the `str` it is (never the other way round).
impl std::ops::Deref for HostName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for HostName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for HostName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for HostName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_strictly_and_normalise_twice() {
        let n = HostName::from_bytes(b"API.Example.COM.").unwrap();
        assert_eq!(n, "api.example.com");
        assert_eq!(n.labels().collect::<Vec<_>>(), ["api", "example", "com"]);
        let p: HostName = "example.com".parse().unwrap();
        assert!(n.is_below(&p) && !p.is_below(&p) && !n.is_below(&n));
        assert!(!"xexample.com".parse::<HostName>().unwrap().is_below(&p));
        assert_eq!(
            HostName::from_labels(&[b"A", b"test"]).unwrap(),
            HostName::from_bytes(b"a.test").unwrap()
        );
        assert_eq!(HostName::from_labels(&[b"a.b", b"test"]), Err(NameError::Byte(b'.')));
        assert_eq!(HostName::from_labels(&[]), Err(NameError::Empty));
        assert_eq!(HostName::shown(b"a\0b"), "a\\x00b");
        assert!(HostName::shown(&[b'a'; 300]).ends_with("..."));
    }
}
