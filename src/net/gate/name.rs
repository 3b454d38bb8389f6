//! Deciding a connection by name (pure): what its first bytes say (TLS SNI,
//! HTTP `Host`, `CONNECT`), each parsed into a [`HostName`] or refused;
//! the synthetic address per name, the resolver cache, the verdict.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::cursor::Cursor;
use crate::config::hosts::{self, parse_port, HostName, NameError};
use crate::net::policy::GatePlan;

/// Synthetic addresses the gate's resolver hands out, one per name.
pub const SYNTHETIC_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(100, 127, 0, 0), 16);
/// At most this much of a connection's start is read for its name.
pub(super) const SNIFF_MAX: usize = 16 * 1024 + 5;
/// At most this many names in the resolver cache.
pub const CACHE_MAX: usize = 4096;
/// How long the resolver cache keeps an answer: its TTL, clamped to this.
pub const CACHE_TTL: (u32, u32) = (5, 300);

#[derive(Default)]
pub(super) struct Names {
    pub(super) by_name: HashMap<HostName, Ipv4Addr>,
    pub(super) by_addr: HashMap<Ipv4Addr, HostName>,
    next: u32,
    pub(super) cache: Cache,
}

impl Names {
    /// The name's synthetic address (a new one if it has none); `None`
    /// once [`SYNTHETIC_NET`] is used up (the resolver answers `SERVFAIL`).
    pub(super) fn synthetic(&mut self, name: &HostName) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        let size = 1u32 << (32 - SYNTHETIC_NET.1 as u32);
        if self.next + 2 >= size {
            return None;
        }
        self.next += 1;
        let a = Ipv4Addr::from(u32::from(SYNTHETIC_NET.0) + self.next);
        self.by_name.insert(name.clone(), a);
        self.by_addr.insert(a, name.clone());
        Some(a)
    }
}

/// What the gate resolved: name -> (addresses, valid until, stored at),
/// at most [`CACHE_MAX`] names (a full cache drops the expired, then the
/// oldest).
#[derive(Default)]
pub(super) struct Cache(HashMap<HostName, (Vec<Ipv4Addr>, Instant, Instant)>);

impl Cache {
    pub(super) fn get(&self, name: &HostName, now: Instant) -> Option<Vec<Ipv4Addr>> {
        self.0
            .get(name)
            .filter(|(_, until, _)| *until > now)
            .map(|(a, _, _)| a.clone())
    }

    /// Keeps `addrs` for `ttl` seconds, clamped to [`CACHE_TTL`].
    pub(super) fn put(&mut self, name: &HostName, addrs: Vec<Ipv4Addr>, ttl: u32, now: Instant) {
        if self.0.len() >= CACHE_MAX && !self.0.contains_key(name) {
            self.0.retain(|_, (_, until, _)| *until > now);
            if self.0.len() >= CACHE_MAX {
                let oldest = self.0.iter().min_by_key(|(_, (_, _, at))| *at).map(|(n, _)| n.clone());
                if let Some(n) = oldest {
                    self.0.remove(&n);
                }
            }
        }
        let ttl = Duration::from_secs(ttl.clamp(CACHE_TTL.0, CACHE_TTL.1) as u64);
        self.0.insert(name.clone(), (addrs, now + ttl, now));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

pub fn is_synthetic(a: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - SYNTHETIC_NET.1 as u32);
    u32::from(a) & mask == u32::from(SYNTHETIC_NET.0)
}

/// What a client sent that is not a [`HostName`]: shown escaped (for the
/// log and the refusal), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unnamed {
    pub shown: String,
    pub err: NameError,
}

/// A name as a client sent it: a [`HostName`], or why it is none.
pub type Sent = Result<HostName, Unnamed>;

/// Parses `raw` as a [`HostName`] at a door.
pub fn sent_name(raw: &[u8]) -> Sent {
    HostName::from_bytes(raw).map_err(|err| Unnamed {
        shown: HostName::shown(raw),
        err,
    })
}

/// What the first bytes of a connection say about where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    NeedMore,
    /// A TLS ClientHello, with its SNI host name.
    Tls(Option<Sent>),
    /// An HTTP request: its `Host` (or absolute-form URL's host and port).
    Http {
        host: Option<Sent>,
        port: Option<u16>,
        proxy: bool,
    },
    /// `CONNECT host:port`; the header is `header_len` bytes long.
    Connect {
        host: Sent,
        port: u16,
        header_len: usize,
    },
    Other,
}

/// Reads the name from the start of a connection (pure).
pub fn sniff(buf: &[u8]) -> Sniffed {
    if buf.is_empty() {
        return Sniffed::NeedMore;
    }
    if buf[0] == 0x16 {
        return sniff_tls(buf);
    }
    const METHODS: [&str; 9] = [
        "GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE ",
    ];
    let starts = METHODS
        .iter()
        .any(|m| buf.len() >= m.len() && &buf[..m.len()] == m.as_bytes() || m.as_bytes().starts_with(buf));
    if !starts {
        return Sniffed::Other;
    }
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= SNIFF_MAX {
            Sniffed::Other
        } else {
            Sniffed::NeedMore
        };
    };
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return Sniffed::Other;
    };
    let mut lines = head.split("\r\n");
    let req: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    if req.len() != 3 || !req[2].starts_with("HTTP/1.") {
        return Sniffed::Other;
    }
    if req[0] == "CONNECT" {
        let (host, port) = match split_host_port(req[1]) {
            // CONNECT names its port.
            (Ok(_), None) => (Err(unnamed(req[1], NameError::Port)), 0),
            (h, p) => (h, p.unwrap_or(0)),
        };
        return Sniffed::Connect {
            host,
            port,
            header_len: end + 4,
        };
    }
    if let Some(rest) = req[1].strip_prefix("http://") {
        let auth = rest.split('/').next().unwrap_or("");
        let (host, port) = split_host_port(auth);
        return Sniffed::Http {
            host: Some(host),
            port: Some(port.unwrap_or(80)),
            proxy: true,
        };
    }
    let host = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("host"))
        .map(|(_, v)| split_host_port(v.trim_matches([' ', '\t'])).0);
    Sniffed::Http {
        host,
        port: None,
        proxy: false,
    }
}

fn unnamed(s: &str, err: NameError) -> Unnamed {
    Unnamed {
        shown: HostName::shown(s.as_bytes()),
        err,
    }
}

/// `host[:port]`: an IPv6 literal (bracketed or not) is an address, a
/// bad port makes the whole a refusal, the rest is a [`HostName`].
fn split_host_port(s: &str) -> (Sent, Option<u16>) {
    if s.starts_with('[') || s.matches(':').count() > 1 {
        return (Err(unnamed(s, NameError::Address)), None);
    }
    match s.rsplit_once(':') {
        Some((h, p)) => match parse_port(p) {
            Some(p) => (sent_name(h.as_bytes()), Some(p)),
            None => (Err(unnamed(s, NameError::Port)), None),
        },
        None => (sent_name(s.as_bytes()), None),
    }
}

fn sniff_tls(buf: &[u8]) -> Sniffed {
    if buf.len() < 5 {
        return Sniffed::NeedMore;
    }
    let rec_len = u16::from_be_bytes([buf[3], buf[4]]) as usize;
    if buf.len() < 5 + rec_len {
        return Sniffed::NeedMore;
    }
    Sniffed::Tls(client_hello_sni(&buf[5..5 + rec_len]))
}

/// The SNI host name of a ClientHello handshake message (one record):
/// `None` without one. A second `server_name` extension or host name is
/// refused (a server might act on the other one).
fn client_hello_sni(h: &[u8]) -> Option<Sent> {
    let mut r = Cursor(h, 0);
    if r.u8()? != 1 {
        return None;
    }
    r.skip(3)?; // length
    r.skip(2 + 32)?; // version, random
    let n = r.u8()? as usize;
    r.skip(n)?; // session id
    let n = r.u16()? as usize;
    r.skip(n)?; // cipher suites
    let n = r.u8()? as usize;
    r.skip(n)?; // compression
    let ext_len = r.u16()? as usize;
    let exts = r.take(ext_len)?;
    let mut r = Cursor(exts, 0);
    let mut found: Option<Sent> = None;
    let twice = || Some(Err(unnamed("(two server names)", NameError::Twice)));
    while r.1 < exts.len() {
        let (t, l) = (r.u16()?, r.u16()? as usize);
        let body = r.take(l)?;
        if t != 0 {
            continue;
        }
        if found.is_some() {
            return twice();
        }
        let mut b = Cursor(body, 0);
        let n = b.u16()? as usize;
        let list = b.take(n)?;
        let mut b = Cursor(list, 0);
        while b.1 < list.len() {
            let (kind, l) = (b.u8()?, b.u16()? as usize);
            let name = b.take(l)?;
            if kind == 0 {
                if found.is_some() {
                    return twice();
                }
                found = Some(sent_name(name));
            }
        }
    }
    found
}

/// The gate's decision for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect to this name's own addresses at `port`.
    Name { name: HostName, port: u16 },
    /// Log mode only: a connection that names nothing goes to its address.
    Addr(SocketAddrV4),
    /// `what`, for the log and the refusal: a name, an address, or what
    /// the client sent (escaped).
    Refuse { what: String, port: u16, why: &'static str },
}

/// Decides by name (pure): the name the client sent, else the name the
/// synthetic destination stands for. An IP literal is no name; a name
/// the client sent that is not a [`HostName`] is refused for what it is.
pub fn decide(gate: &GatePlan, dst: SocketAddrV4, synthetic: Option<&HostName>, sniffed: &Sniffed) -> Verdict {
    let (sent, port) = match sniffed {
        Sniffed::Connect { host, port, .. } => (Some(host), *port),
        Sniffed::Http {
            host: Some(h),
            port: Some(p),
            proxy: true,
        } => (Some(h), *p),
        Sniffed::Tls(Some(n)) | Sniffed::Http { host: Some(n), .. } => (Some(n), dst.port()),
        _ => (None, dst.port()),
    };
    let name = match sent {
        Some(Ok(n)) => Some(n),
        Some(Err(u)) if u.err != NameError::Address => {
            return Verdict::Refuse {
                what: u.shown.clone(),
                port,
                why: u.err.reason(),
            };
        }
        Some(Err(_)) => None,
        None => synthetic,
    };
    match name {
        Some(n) if gate.log_only || hosts::allowing(&gate.hosts, n, port).is_some() => {
            Verdict::Name { name: n.clone(), port }
        }
        Some(n) => Verdict::Refuse {
            what: n.to_string(),
            port,
            why: "not in network.hosts",
        },
        None if gate.log_only && !is_synthetic(*dst.ip()) => {
            let literal = match sent {
                Some(Err(u)) => u.shown.parse().ok(),
                _ => None,
            };
            Verdict::Addr(SocketAddrV4::new(literal.unwrap_or(*dst.ip()), port))
        }
        None => Verdict::Refuse {
            what: match sent {
                Some(Err(u)) => u.shown.clone(),
                _ => dst.ip().to_string(),
            },
            port,
            why: "an address, not a listed name",
        },
    }
}
