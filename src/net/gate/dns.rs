//! DNS messages (pure parsing and building) and the gate's query to its
//! upstream resolvers. Names in and out are [`HostName`]s: the encoder
//! cannot write a name outside the grammar, a question whose name is not
//! one is refused, and an upstream answer counts only when it answers
//! exactly what was asked.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::cursor::Cursor;
use super::name::{Sent, Unnamed};
use crate::config::hosts::HostName;

const DNS_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many compression pointers in one name.
const MAX_POINTERS: usize = 32;
/// At most this many CNAMEs followed from the asked name.
const MAX_CNAMES: usize = 8;

pub const TYPE_A: u16 = 1;
const TYPE_CNAME: u16 = 5;
const CLASS_IN: u16 = 1;
pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_REFUSED: u8 = 5;

/// `name` in DNS wire form: length-prefixed labels and the root's 0.
fn wire_name(name: &HostName) -> Vec<u8> {
    let mut w = Vec::with_capacity(name.len() + 2);
    for l in name.labels() {
        // A HostName's labels have 1 to 63 bytes: one length byte says it.
        w.push(l.len() as u8);
        w.extend_from_slice(l.as_bytes());
    }
    w.push(0);
    w
}

/// A recursive query for `name` (type `qtype`, class IN), as bytes.
pub(super) fn dns_query(id: u16, name: &HostName, qtype: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    q.extend_from_slice(&wire_name(name));
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    q
}

fn query_id() -> u16 {
    let mut b = [0u8; 2];
    if openssl::rand::rand_bytes(&mut b).is_ok() {
        return u16::from_be_bytes(b);
    }
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    (t.subsec_nanos() & 0xffff) as u16
}

/// The A records of `name` from the first upstream that answers it (see
/// [`parse_a_answers`]), with the smallest TTL. Replies that do not
/// answer the query are skipped until the upstream's time is up.
pub(super) fn query_upstream(upstream: &[Ipv4Addr], name: &HostName) -> Option<(Vec<Ipv4Addr>, u32)> {
    let sock = UdpSocket::bind("0.0.0.0:0").ok()?;
    let id = query_id();
    let q = dns_query(id, name, TYPE_A);
    for u in upstream {
        if sock.connect(SocketAddrV4::new(*u, 53)).is_err() || sock.send(&q).is_err() {
            continue;
        }
        let deadline = Instant::now() + DNS_TIMEOUT;
        let mut buf = [0u8; 1500];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
                break;
            }
            let Ok(n) = sock.recv(&mut buf) else { break };
            if let Some(r) = parse_a_answers(&buf[..n], id, name) {
                return Some(r);
            }
        }
    }
    None
}

/// Reads a (possibly compressed) name at `c` as lower-case wire form;
/// `c` moves past it. Pointers only point backwards, at most
/// [`MAX_POINTERS`] of them, and the name has at most 255 bytes: a loop
/// ends there.
fn read_name(c: &mut Cursor) -> Option<Vec<u8>> {
    let m = c.0;
    let mut pos = c.1;
    let (mut out, mut jumps, mut jumped) = (Vec::new(), 0, false);
    loop {
        let l = *m.get(pos)? as usize;
        match l & 0xc0 {
            0xc0 => {
                let to = (l & 0x3f) << 8 | *m.get(pos + 1)? as usize;
                if !jumped {
                    c.1 = pos + 2;
                    jumped = true;
                }
                jumps += 1;
                if jumps > MAX_POINTERS || to >= pos {
                    return None;
                }
                pos = to;
            }
            0 if l == 0 => {
                out.push(0);
                if !jumped {
                    c.1 = pos + 1;
                }
                return (out.len() <= 255).then_some(out);
            }
            0 => {
                let label = m.get(pos + 1..pos + 1 + l)?;
                out.push(l as u8);
                out.extend(label.iter().map(|b| b.to_ascii_lowercase()));
                if out.len() > 255 {
                    return None;
                }
                pos += 1 + l;
            }
            _ => return None,
        }
    }
}

/// The A records of the response `m` to the query `id` for `asked` (pure),
/// with their smallest TTL; `None` when `m` does not answer that query:
/// a response (QR) to a standard query with the same ID, exactly one
/// question that is `asked` (any case), type A, class IN, and RCODE 0
/// (NXDOMAIN: no addresses). Only A records of `asked`, or of the CNAME
/// chain from it (at most [`MAX_CNAMES`]), count.
pub fn parse_a_answers(m: &[u8], id: u16, asked: &HostName) -> Option<(Vec<Ipv4Addr>, u32)> {
    let mut c = Cursor(m, 0);
    if c.u16()? != id {
        return None;
    }
    let flags = c.u16()?;
    if flags & 0x8000 == 0 || flags & 0x7800 != 0 {
        return None;
    }
    let (qd, an) = (c.u16()?, c.u16()?);
    c.skip(4)?;
    let want = wire_name(asked);
    if qd != 1 || read_name(&mut c)? != want || c.u16()? != TYPE_A || c.u16()? != CLASS_IN {
        return None;
    }
    match (flags & 0x000f) as u8 {
        0 => {}
        RCODE_NXDOMAIN => return Some((Vec::new(), 0)),
        _ => return None,
    }
    let (mut cnames, mut a) = (Vec::new(), Vec::new());
    for _ in 0..an {
        let owner = read_name(&mut c)?;
        let (t, class) = (c.u16()?, c.u16()?);
        let ttl = u32::from_be_bytes(c.take(4)?.try_into().ok()?);
        let len = c.u16()? as usize;
        let start = c.1;
        let data = c.take(len)?;
        if class != CLASS_IN {
            continue;
        }
        if t == TYPE_A && len == 4 {
            a.push((owner, Ipv4Addr::new(data[0], data[1], data[2], data[3]), ttl));
        } else if t == TYPE_CNAME {
            let mut d = Cursor(m, start);
            let target = read_name(&mut d)?;
            if d.1 != start + len {
                return None;
            }
            cnames.push((owner, target));
        }
    }
    let mut chain = vec![want];
    for _ in 0..MAX_CNAMES {
        let last = chain.last().expect("the asked name");
        match cnames.iter().find(|(o, _)| o == last) {
            Some((_, t)) if !chain.contains(t) => chain.push(t.clone()),
            _ => break,
        }
    }
    let (mut out, mut ttl) = (Vec::new(), u32::MAX);
    for (owner, addr, t) in a {
        if chain.contains(&owner) {
            out.push(addr);
            ttl = ttl.min(t);
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
    /// The name, or why it is none (the resolver answers `REFUSED`).
    pub name: Sent,
    pub qtype: u16,
    pub qclass: u16,
    pub end: usize,
}

/// Parses a standard query with one question (pure); `None` for a
/// message that is not one (the resolver answers `FORMERR` when it can):
/// a response, another opcode, answer or authority records, a label
/// length over 63 or a compression pointer in the question, or bytes
/// after it that no additional record (EDNS) accounts for.
pub fn parse_question(q: &[u8]) -> Option<Question> {
    let mut c = Cursor(q, 0);
    let id = c.u16()?;
    let flags = c.u16()?;
    if flags & 0x8000 != 0 || flags & 0x7800 != 0 || c.u16()? != 1 {
        return None;
    }
    let (an, ns, ar) = (c.u16()?, c.u16()?, c.u16()?);
    if an != 0 || ns != 0 || ar > 1 {
        return None;
    }
    let mut labels: Vec<&[u8]> = Vec::new();
    let mut wire_len = 0;
    loop {
        let l = c.u8()? as usize;
        if l == 0 {
            break;
        }
        if l > 63 {
            return None;
        }
        labels.push(c.take(l)?);
        wire_len += 1 + l;
        if wire_len > 255 {
            return None;
        }
    }
    let qtype = c.u16()?;
    let qclass = c.u16()?;
    if ar == 0 && c.1 != q.len() {
        return None;
    }
    let name = HostName::from_labels(&labels).map_err(|err| Unnamed {
        shown: HostName::shown(&labels.join(&b'.')),
        err,
    });
    Some(Question {
        id,
        rd: flags & 0x0100 != 0,
        name,
        qtype,
        qclass,
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

/// `FORMERR` for a query [`parse_question`] refused, when it has a
/// header and is not itself a response (no answer to answers).
pub fn dns_formerr(q: &[u8]) -> Option<Vec<u8>> {
    if q.len() < 12 || q[2] & 0x80 != 0 {
        return None;
    }
    let mut r = q[..2].to_vec();
    r.push(0x80 | (q[2] & 0x79));
    r.push(RCODE_FORMERR);
    r.extend_from_slice(&[0; 8]);
    Some(r)
}
