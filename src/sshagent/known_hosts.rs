//! The developer's `~/.ssh/known_hosts`, read as OpenSSH reads it, for one
//! question: does it list this host key for this host name?
//!
//! Lines: `[@marker] patterns keytype base64-key [comment]`. Patterns are
//! comma-separated names with `*` and `?` and `!negation`, `[name]:port`
//! for a port other than 22, or one hashed name `|1|salt|hmac-sha1`
//! (`HashKnownHosts`). `@revoked` lines make their key match no host;
//! `@cert-authority` lines are not used (a server known only through a
//! certificate authority shows as an unknown host key and matches no
//! rule). Malformed lines are skipped, as ssh does.

use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Signer;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Plain,
    Revoked,
    CertAuthority,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Hosts {
    /// Lowercased patterns.
    Patterns(Vec<String>),
    Hashed {
        salt: Vec<u8>,
        hmac: Vec<u8>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    marker: Marker,
    hosts: Hosts,
    key: Vec<u8>,
}

/// A parsed known_hosts file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

/// The largest file read (bigger: only the first this many bytes count).
pub const MAX_FILE: usize = 4 * 1024 * 1024;

fn b64(s: &str) -> Option<Vec<u8>> {
    openssl::base64::decode_block(s).ok()
}

fn parse_line(line: &str) -> Option<Entry> {
    let mut f = line.split_ascii_whitespace();
    let mut first = f.next()?;
    let marker = match first {
        "@revoked" => Marker::Revoked,
        "@cert-authority" => Marker::CertAuthority,
        m if m.starts_with('@') => return None,
        _ => Marker::Plain,
    };
    if marker != Marker::Plain {
        first = f.next()?;
    }
    let _ktype = f.next()?;
    let key = b64(f.next()?)?;
    if key.is_empty() {
        return None;
    }
    let hosts = if let Some(h) = first.strip_prefix("|1|") {
        let (salt, hmac) = h.split_once('|')?;
        let (salt, hmac) = (b64(salt)?, b64(hmac)?);
        if salt.len() != 20 || hmac.len() != 20 {
            return None;
        }
        Hosts::Hashed { salt, hmac }
    } else {
        Hosts::Patterns(
            first
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_ascii_lowercase)
                .collect(),
        )
    };
    Some(Entry { marker, hosts, key })
}

/// `*` any run, `?` one character.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while i < s.len() {
        if p < pat.len() && (pat[p] == b'?' || pat[p] == s[i]) {
            p += 1;
            i += 1;
        } else if p < pat.len() && pat[p] == b'*' {
            star = Some(p);
            mark = i;
            p += 1;
        } else if let Some(sp) = star {
            p = sp + 1;
            mark += 1;
            i = mark;
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

fn hmac_sha1(salt: &[u8], name: &str) -> Option<Vec<u8>> {
    let key = PKey::hmac(salt).ok()?;
    let mut s = Signer::new(MessageDigest::sha1(), &key).ok()?;
    s.update(name.as_bytes()).ok()?;
    s.sign_to_vec().ok()
}

impl Entry {
    fn names(&self, host: &str) -> bool {
        match &self.hosts {
            Hosts::Patterns(ps) => {
                let mut hit = false;
                for p in ps {
                    if let Some(neg) = p.strip_prefix('!') {
                        if glob(neg.as_bytes(), host.as_bytes()) {
                            return false;
                        }
                    } else if glob(p.as_bytes(), host.as_bytes()) {
                        hit = true;
                    }
                }
                hit
            }
            Hosts::Hashed { salt, hmac } => hmac_sha1(salt, host).is_some_and(|h| openssl::memcmp::eq(&h, hmac)),
        }
    }
}

impl KnownHosts {
    /// Parses a file's text (lenient line by line, as ssh is).
    pub fn parse(text: &[u8]) -> KnownHosts {
        let text = &text[..text.len().min(MAX_FILE)];
        let entries = text
            .split(|&b| b == b'\n')
            .filter_map(|l| std::str::from_utf8(l).ok())
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(parse_line)
            .collect();
        KnownHosts { entries }
    }

    /// Whether a `@revoked` line lists `key`.
    pub fn revoked(&self, key: &[u8]) -> bool {
        self.entries.iter().any(|e| e.marker == Marker::Revoked && e.key == key)
    }

    /// Whether a plain (not `@cert-authority`) line lists `key` for
    /// `host` (`name`, or `[name]:port`), and no line revokes it.
    pub fn lists(&self, key: &[u8], host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        !self.revoked(key)
            && self
                .entries
                .iter()
                .any(|e| e.marker == Marker::Plain && e.key == key && e.names(&host))
    }

    /// For the prompt: the literal names (no wildcard, no negation) of
    /// plain lines listing `key`, sorted and unique, and how many hashed
    /// lines list it (their names cannot be shown).
    pub fn names_of(&self, key: &[u8]) -> (Vec<String>, usize) {
        let (mut names, mut hashed) = (Vec::new(), 0);
        if self.revoked(key) {
            return (names, 0);
        }
        for e in self
            .entries
            .iter()
            .filter(|e| e.marker == Marker::Plain && e.key == key)
        {
            match &e.hosts {
                Hosts::Patterns(ps) => {
                    names.extend(ps.iter().filter(|p| !p.contains(['*', '?', '!'])).cloned());
                }
                Hosts::Hashed { .. } => hashed += 1,
            }
        }
        names.sort();
        names.dedup();
        (names, hashed)
    }
}
