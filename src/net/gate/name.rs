//! Deciding a connection by name (pure): what its first bytes say (TLS SNI,
//! HTTP `Host`, `CONNECT`), the synthetic address per name, the verdict.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use super::cursor::Cursor;
use crate::config::hosts;
use crate::net::policy::GatePlan;

/// Synthetic addresses the gate's resolver hands out, one per name.
pub const SYNTHETIC_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(100, 127, 0, 0), 16);
/// At most this much of a connection's start is read for its name.
pub(super) const SNIFF_MAX: usize = 16 * 1024 + 5;

#[derive(Default)]
pub(super) struct Names {
    pub(super) by_name: HashMap<String, Ipv4Addr>,
    pub(super) by_addr: HashMap<Ipv4Addr, String>,
    next: u32,
    /// name -> (addresses, valid until)
    pub(super) cache: HashMap<String, (Vec<Ipv4Addr>, Instant)>,
}

impl Names {
    pub(super) fn synthetic(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        let size = 1u32 << (32 - SYNTHETIC_NET.1 as u32);
        if self.next + 2 >= size {
            return None;
        }
        self.next += 1;
        let a = Ipv4Addr::from(u32::from(SYNTHETIC_NET.0) + self.next);
        self.by_name.insert(name.to_string(), a);
        self.by_addr.insert(a, name.to_string());
        Some(a)
    }
}

pub fn is_synthetic(a: Ipv4Addr) -> bool {
    let mask = u32::MAX << (32 - SYNTHETIC_NET.1 as u32);
    u32::from(a) & mask == u32::from(SYNTHETIC_NET.0)
}

/// What the first bytes of a connection say about where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    NeedMore,
    /// A TLS ClientHello, with its SNI host name.
    Tls(Option<String>),
    /// An HTTP request: its `Host` (or absolute-form URL's host and port).
    Http {
        host: Option<String>,
        port: Option<u16>,
        proxy: bool,
    },
    /// `CONNECT host:port`; the header is `header_len` bytes long.
    Connect {
        host: String,
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
        return match split_host_port(req[1]) {
            Some((h, Some(p))) => Sniffed::Connect {
                host: h,
                port: p,
                header_len: end + 4,
            },
            _ => Sniffed::Other,
        };
    }
    if let Some(rest) = req[1].strip_prefix("http://") {
        let auth = rest.split('/').next().unwrap_or("");
        return match split_host_port(auth) {
            Some((h, p)) => Sniffed::Http {
                host: Some(h),
                port: Some(p.unwrap_or(80)),
                proxy: true,
            },
            None => Sniffed::Other,
        };
    }
    let host = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("host"))
        .and_then(|(_, v)| split_host_port(v.trim()))
        .map(|(h, _)| h);
    Sniffed::Http {
        host,
        port: None,
        proxy: false,
    }
}

/// `host[:port]` (no userinfo, no IPv6 brackets), host lowercased.
fn split_host_port(s: &str) -> Option<(String, Option<u16>)> {
    if s.is_empty() || s.contains('@') || s.starts_with('[') {
        return None;
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Some((h.to_ascii_lowercase(), Some(p.parse().ok().filter(|p| *p != 0)?))),
        None => Some((s.to_ascii_lowercase(), None)),
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

/// The SNI host name of a ClientHello handshake message (one record).
fn client_hello_sni(h: &[u8]) -> Option<String> {
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
    let end = r.1 + ext_len;
    while r.1 + 4 <= end {
        let (t, l) = (r.u16()?, r.u16()? as usize);
        if t != 0 {
            r.skip(l)?;
            continue;
        }
        r.skip(2)?; // list length
        while r.1 < end {
            let (kind, l) = (r.u8()?, r.u16()? as usize);
            let name = r.take(l)?;
            if kind == 0 {
                return std::str::from_utf8(name).ok().map(|s| s.to_ascii_lowercase());
            }
        }
        return None;
    }
    None
}

/// The gate's decision for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Connect to this name's own addresses at `port`.
    Name {
        name: String,
        port: u16,
    },
    /// Log mode only: a connection that names nothing goes to its address.
    Addr(SocketAddrV4),
    Refuse {
        what: String,
        port: u16,
        why: &'static str,
    },
}

/// Decides by name (pure): the name the client sent, else the name the
/// synthetic destination stands for; an IP literal is no name.
pub fn decide(gate: &GatePlan, dst: SocketAddrV4, synthetic: Option<&str>, sniffed: &Sniffed) -> Verdict {
    let (sent, port) = match sniffed {
        Sniffed::Connect { host, port, .. } => (Some(host.as_str()), *port),
        Sniffed::Http {
            host: Some(h),
            port: Some(p),
            proxy: true,
        } => (Some(h.as_str()), *p),
        Sniffed::Tls(Some(n)) | Sniffed::Http { host: Some(n), .. } => (Some(n.as_str()), dst.port()),
        _ => (None, dst.port()),
    };
    let name = sent.or(synthetic).filter(|n| n.parse::<Ipv4Addr>().is_err());
    match name {
        Some(n) if gate.log_only || hosts::allowing(&gate.hosts, n, port).is_some() => Verdict::Name {
            name: n.to_string(),
            port,
        },
        Some(n) => Verdict::Refuse {
            what: n.to_string(),
            port,
            why: "not in network.hosts",
        },
        None if gate.log_only && !is_synthetic(*dst.ip()) => {
            let ip = sent.and_then(|n| n.parse().ok()).unwrap_or(*dst.ip());
            Verdict::Addr(SocketAddrV4::new(ip, port))
        }
        None => Verdict::Refuse {
            what: sent.unwrap_or(&dst.ip().to_string()).to_string(),
            port,
            why: "an address, not a listed name",
        },
    }
}
