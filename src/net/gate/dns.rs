//! DNS messages (pure parsing and building) and the gate's query to its
//! upstream resolvers.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::cursor::Cursor;

const DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// A DNS query for `name` (type `qtype`), as bytes.
pub(super) fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for l in name.split('.').filter(|l| !l.is_empty()) {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    q
}

/// The A records of `name` from the first upstream that answers, with
/// the smallest TTL.
pub(super) fn query_upstream(upstream: &[Ipv4Addr], name: &str) -> Option<(Vec<Ipv4Addr>, u32)> {
    let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
    let _ = sock.set_read_timeout(Some(DNS_TIMEOUT));
    let id = (SystemTime::now().duration_since(UNIX_EPOCH).ok()?.subsec_nanos() & 0xffff) as u16;
    let q = dns_query(id, name, 1);
    for u in upstream {
        if sock.connect(SocketAddrV4::new(*u, 53)).is_err() || sock.send(&q).is_err() {
            continue;
        }
        let mut buf = [0u8; 1500];
        let Ok(n) = sock.recv(&mut buf) else { continue };
        if let Some(r) = parse_a_answers(&buf[..n], id) {
            return Some(r);
        }
    }
    None
}

fn skip_name(c: &mut Cursor) -> Option<()> {
    loop {
        let l = c.u8()?;
        if l & 0xc0 == 0xc0 {
            c.skip(1)?;
            return Some(());
        }
        if l == 0 {
            return Some(());
        }
        c.skip(l as usize)?;
    }
}

/// The A records of a DNS response with id `id` (pure).
pub fn parse_a_answers(m: &[u8], id: u16) -> Option<(Vec<Ipv4Addr>, u32)> {
    let mut c = Cursor(m, 0);
    if c.u16()? != id {
        return None;
    }
    let flags = c.u16()?;
    if flags & 0x8000 == 0 {
        return None;
    }
    let (qd, an) = (c.u16()?, c.u16()?);
    c.skip(4)?;
    for _ in 0..qd {
        skip_name(&mut c)?;
        c.skip(4)?;
    }
    let (mut out, mut ttl) = (Vec::new(), u32::MAX);
    for _ in 0..an {
        skip_name(&mut c)?;
        let (t, class) = (c.u16()?, c.u16()?);
        let rttl = u32::from_be_bytes(c.take(4)?.try_into().ok()?);
        let len = c.u16()? as usize;
        let data = c.take(len)?;
        if t == 1 && class == 1 && len == 4 {
            out.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]));
            ttl = ttl.min(rttl);
        }
    }
    let ttl = if out.is_empty() { 0 } else { ttl };
    Some((out, ttl))
}

/// A parsed question: id, the query's flags, name, type, and where the
/// question section ends.
#[derive(Debug, PartialEq, Eq)]
pub struct Question {
    pub id: u16,
    pub rd: bool,
    pub name: String,
    pub qtype: u16,
    pub end: usize,
}

/// Parses a query with one question (pure); `None` for anything else.
pub fn parse_question(q: &[u8]) -> Option<Question> {
    let mut c = Cursor(q, 0);
    let id = c.u16()?;
    let flags = c.u16()?;
    if flags & 0x8000 != 0 || c.u16()? != 1 {
        return None;
    }
    c.skip(6)?;
    let mut labels = Vec::new();
    loop {
        let l = c.u8()? as usize;
        if l == 0 {
            break;
        }
        if l > 63 {
            return None;
        }
        let b = c.take(l)?;
        labels.push(String::from_utf8_lossy(b).to_ascii_lowercase());
    }
    let qtype = c.u16()?;
    c.skip(2)?;
    Some(Question {
        id,
        rd: flags & 0x0100 != 0,
        name: labels.join("."),
        qtype,
        end: c.1,
    })
}

/// The response to `q` (the raw query) with `rcode` and an optional A record.
pub fn dns_answer(q: &[u8], question: &Question, rcode: u8, a: Option<Ipv4Addr>) -> Vec<u8> {
    let mut r = question.id.to_be_bytes().to_vec();
    r.push(0x80 | if question.rd { 1 } else { 0 } | 0x04);
    r.push(0x80 | rcode);
    r.extend_from_slice(&[0, 1, 0, a.is_some() as u8, 0, 0, 0, 0]);
    r.extend_from_slice(&q[12..question.end]);
    if let Some(a) = a {
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4]);
        r.extend_from_slice(&a.octets());
    }
    r
}
