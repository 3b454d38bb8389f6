//! Unit tests of the egress gate's pure parts: sniffing, deciding by
//! name, DNS messages, packet filters, synthetic addresses, the log.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use super::*;
use crate::config::hosts::{HostName, HostPattern, NameError, PatternError};
use crate::net::policy::GatePlan;

fn hn(s: &str) -> HostName {
    s.parse().unwrap()
}

fn ok(s: &str) -> Option<Sent> {
    Some(Ok(hn(s)))
}

fn gate(hosts: &[&str], log_only: bool) -> GatePlan {
    GatePlan {
        log_only,
        hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
        upstream: vec![],
        forwarded: vec![],
        idle_timeout_s: crate::config::DEFAULT_IDLE_TIMEOUT_S,
    }
}

fn client_hello(sni: &str) -> Vec<u8> {
    client_hello_bytes(sni.as_bytes())
}

/// A TLS 1.3-shaped ClientHello record whose SNI is `name` (any bytes).
fn client_hello_bytes(name: &[u8]) -> Vec<u8> {
    client_hello_names(&[name])
}

/// A ClientHello with these host names in its `server_name` list (none:
/// no `server_name` extension).
fn client_hello_names(names: &[&[u8]]) -> Vec<u8> {
    let mut list = Vec::new();
    for name in names {
        list.push(0);
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
    }
    let mut ext = Vec::new();
    if !names.is_empty() {
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&(list.len() as u16 + 2).to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut hs = vec![1, 0];
    hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
    hs.extend_from_slice(&body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[test]
fn sniff_reads_sni_host_and_connect() {
    let ch = client_hello("Allowed.Test");
    assert_eq!(sniff(&ch[..10]), Sniffed::NeedMore);
    assert_eq!(sniff(&ch), Sniffed::Tls(ok("allowed.test")));
    assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: a.test:8080\r\n"), Sniffed::NeedMore);
    assert_eq!(
        sniff(b"GET / HTTP/1.1\r\nhost: A.test\r\n\r\n"),
        Sniffed::Http {
            host: ok("a.test"),
            port: None,
            proxy: false
        }
    );
    assert_eq!(
        sniff(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\nxx"),
        Sniffed::Connect {
            host: Ok(hn("a.test")),
            port: 443,
            header_len: 49
        }
    );
    assert_eq!(
        sniff(b"GET http://b.test/x HTTP/1.1\r\nHost: c.test\r\n\r\n"),
        Sniffed::Http {
            host: ok("b.test"),
            port: Some(80),
            proxy: true
        }
    );
    assert_eq!(sniff(b"ping"), Sniffed::Other);
    assert_eq!(sniff(b"SSH-2.0-x\r\n"), Sniffed::Other);
    assert_eq!(sniff(b"GE"), Sniffed::NeedMore);
}

#[test]
fn decide_by_name_never_by_address() {
    let g = gate(&["allowed.test", "git.test:22"], false);
    let other: SocketAddrV4 = "198.18.9.2:443".parse().unwrap();
    // SNI allowed.test towards another address: allowed, by name.
    assert_eq!(
        decide(&g, other, None, &Sniffed::Tls(ok("allowed.test"))),
        Verdict::Name {
            name: hn("allowed.test"),
            port: 443
        }
    );
    assert!(matches!(
        decide(&g, other, None, &Sniffed::Tls(ok("other.test"))),
        Verdict::Refuse { .. }
    ));
    assert!(matches!(
        decide(&g, other, None, &Sniffed::Other),
        Verdict::Refuse { .. }
    ));
    assert!(matches!(
        decide(&g, other, None, &Sniffed::Tls(None)),
        Verdict::Refuse { .. }
    ));
    // A Host that is an IP literal is no name.
    let lit = sniff(b"GET / HTTP/1.1\r\nHost: 198.18.9.2\r\n\r\n");
    assert!(matches!(decide(&g, other, None, &lit), Verdict::Refuse { .. }));
    // Nameless port: only the synthetic name, only its listed port.
    let syn: SocketAddrV4 = "100.127.0.1:22".parse().unwrap();
    assert_eq!(
        decide(&g, syn, Some(&hn("git.test")), &Sniffed::Other),
        Verdict::Name {
            name: hn("git.test"),
            port: 22
        }
    );
    assert!(matches!(
        decide(&g, syn, Some(&hn("allowed.test")), &Sniffed::Other),
        Verdict::Refuse { .. }
    ));
    assert!(matches!(
        decide(&g, "198.18.9.2:22".parse().unwrap(), None, &Sniffed::Other),
        Verdict::Refuse { .. }
    ));
    // CONNECT decides by its own port.
    let c = Sniffed::Connect {
        host: Ok(hn("allowed.test")),
        port: 22,
        header_len: 1,
    };
    assert!(matches!(decide(&g, other, None, &c), Verdict::Refuse { .. }));
    // Log mode: everything, an address by its address.
    let l = gate(&[], true);
    assert_eq!(decide(&l, other, None, &Sniffed::Other), Verdict::Addr(other));
    assert_eq!(decide(&l, other, None, &lit), Verdict::Addr(other));
    // A malformed name is refused for what it is, also in log mode, and
    // never falls back to the synthetic name.
    let bad = sniff(b"GET / HTTP/1.1\r\nHost: a_b.allowed.test\r\n\r\n");
    for (g, dst, syn) in [(&g, other, None), (&l, syn, Some(hn("git.test")))] {
        assert_eq!(
            decide(g, dst, syn.as_ref(), &bad),
            Verdict::Refuse {
                what: "a_b.allowed.test".into(),
                port: dst.port(),
                why: NameError::Byte(b'_').reason()
            }
        );
    }
}

#[test]
fn dns_round_trip() {
    let name = hn("Allowed.test");
    let q = dns_query(0x1234, &name, 1);
    let question = parse_question(&q).unwrap();
    assert_eq!(question.name, Ok(hn("allowed.test")));
    assert_eq!(question.qtype, 1);
    let a = dns_answer(&q, &question, 0, Some(Ipv4Addr::new(100, 127, 0, 1)));
    assert_eq!(
        parse_a_answers(&a, 0x1234, &name),
        Some((vec![Ipv4Addr::new(100, 127, 0, 1)], 30))
    );
    let r = dns_answer(&q, &question, 3, None);
    assert_eq!(r[3] & 0x0f, 3);
    assert_eq!(parse_a_answers(&r, 0x1234, &name), Some((vec![], 0)));
    // REFUSED (or any RCODE but 0 and NXDOMAIN) is no answer.
    assert_eq!(
        parse_a_answers(&dns_answer(&q, &question, 5, None), 0x1234, &name),
        None
    );
    assert!(parse_question(&r).is_none(), "a response is not a question");
}

#[test]
fn packet_destinations_are_read_from_the_headers() {
    let mut p = vec![0x45, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 169, 254, 255, 1, 198, 18, 0, 9];
    p.extend_from_slice(&[0x9c, 0x40, 0, 22]);
    assert_eq!(packet_dst(&p), Some((Ipv4Addr::new(198, 18, 0, 9), 22)));
    assert_eq!(packet_dst(&p[..21]), None);
    assert_eq!(SYN_FILTER[1].3, 0xa9fe_ff01);
}

#[test]
fn synthetic_addresses_map_back() {
    let mut n = Names::default();
    let a = n.synthetic(&hn("a.test")).unwrap();
    assert!(is_synthetic(a));
    assert_eq!(n.synthetic(&hn("a.test")), Some(a));
    let b = n.synthetic(&hn("b.test")).unwrap();
    assert_ne!(a, b);
    assert_eq!(n.by_addr[&b], hn("b.test"));
    // The table is bounded: once the /16 is used up, no more (SERVFAIL).
    let mut i = 0;
    while n.synthetic(&hn(&format!("n{i}.test"))).is_some() {
        i += 1;
    }
    // .0.1 to .255.254: every address but the network's and the broadcast.
    assert_eq!(n.by_name.len(), (1 << 16) - 2);
    assert_eq!(n.synthetic(&hn("a.test")), Some(a), "a known name keeps its address");
}

#[test]
fn log_lines_summarize_newest_first() {
    let text = "1\trefused\ttcp\tother.test\t443\tnot in network.hosts\n\
                2\trefused\tdns\tx.test\t53\tnot in network.hosts\n\
                3\trefused\ttcp\tother.test\t443\tnot in network.hosts\n\
                garbage\n";
    let rows = summarize(&parse_log(text));
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].0.what.as_str(), rows[0].1), ("other.test", 2));
    let s = suggestion(&["a.test".parse().unwrap()], &rows).unwrap();
    assert_eq!(s, "hosts = [\"a.test\", \"other.test\", \"x.test\"]");
}

// ---- hostile names through every door ---------------------------------------

/// What a door made of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Door {
    /// A host name (normalised).
    Name(String),
    /// Config only: a `*.` pattern over this name.
    Wild(String),
    /// Refused, with this reason.
    Refused(NameError),
    /// Config only: a `*` elsewhere than a leading `*.`.
    Star,
    /// The door found no name at all: the message is not one it reads
    /// (an HTTP head that is not UTF-8, a request line split by a space,
    /// a malformed DNS question: FORMERR).
    NoName,
}

fn from(r: &Sent) -> Door {
    match r {
        Ok(n) => Door::Name(n.to_string()),
        Err(u) => Door::Refused(u.err),
    }
}

fn via_config(raw: &[u8]) -> Option<Door> {
    let s = std::str::from_utf8(raw).ok()?; // TOML strings are UTF-8
    Some(match s.parse::<HostPattern>() {
        Ok(p) if p.wildcard => Door::Wild(p.name.to_string()),
        Ok(p) => Door::Name(p.name.to_string()),
        Err(PatternError::Name(e)) => Door::Refused(e),
        Err(PatternError::Star) => Door::Star,
        Err(e) => panic!("{s:?}: {e:?}"),
    })
}

fn via_head(head: Vec<u8>) -> Door {
    match sniff(&head) {
        Sniffed::Http { host: Some(h), .. } | Sniffed::Connect { host: h, .. } => from(&h),
        Sniffed::Other => Door::NoName,
        s => panic!("{s:?}"),
    }
}

fn via_host(raw: &[u8]) -> Door {
    via_head([b"GET / HTTP/1.1\r\nHost: ", raw, b"\r\n\r\n"].concat())
}

fn via_absolute(raw: &[u8]) -> Door {
    via_head([b"GET http://", raw, b"/x HTTP/1.1\r\nHost: a.test\r\n\r\n"].concat())
}

fn via_connect(raw: &[u8]) -> Door {
    via_head([b"CONNECT ", raw, b":443 HTTP/1.1\r\n\r\n"].concat())
}

fn via_sni(raw: &[u8]) -> Door {
    match sniff(&client_hello_bytes(raw)) {
        Sniffed::Tls(Some(n)) => from(&n),
        s => panic!("{s:?}"),
    }
}

/// A query whose labels are `raw` split at dots (one trailing dot is the
/// root); a label's length byte is its length, so one over 63 reads as a
/// pointer or reserved type, and an empty label ends the name early.
fn via_dns(raw: &[u8]) -> Door {
    let mut q = vec![0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    let body = raw.strip_suffix(b".").unwrap_or(raw);
    if !body.is_empty() {
        for l in body.split(|c| *c == b'.') {
            q.push(l.len().min(255) as u8);
            q.extend_from_slice(l);
        }
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    match parse_question(&q) {
        Some(question) => {
            assert_eq!((question.qtype, question.qclass, question.end), (1, 1, q.len()));
            from(&question.name)
        }
        None => {
            let r = dns_formerr(&q).unwrap();
            assert_eq!((&r[..2], r[3] & 0x0f), (&q[..2], RCODE_FORMERR));
            Door::NoName
        }
    }
}

/// The start of the long-label attack: `evil.test.` and a label that
/// begins with `\0\x01\0\x01` (type A, class IN, once a length byte of
/// 256 wrapped to 0 had ended the name there).
const ATTACK: &[u8] = b"evil.test.\0\x01\0\x01";

/// At least 40 hostile names, each with what the name grammar makes of
/// it (docs/network.md, "Names"); each door differs only as documented.
fn hostile() -> Vec<(Vec<u8>, Result<&'static str, NameError>)> {
    use NameError::*;
    let long = |c: u8, n: usize| vec![c; n];
    let join = |parts: &[&[u8]]| parts.join(&b'.');
    let n253 = join(&[&long(b'a', 63), &long(b'b', 63), &long(b'c', 63), &long(b'd', 61)]);
    let n254 = join(&[&long(b'a', 63), &long(b'b', 63), &long(b'c', 63), &long(b'd', 62)]);
    let s253: &'static str = Box::leak(String::from_utf8(n253.clone()).unwrap().into_boxed_str());
    let l63: &'static str = Box::leak(format!("{}.allowed.test", "a".repeat(63)).into_boxed_str());
    let rows: Vec<(Vec<u8>, Result<&'static str, NameError>)> = vec![
        // Case and trailing dots.
        (b"Allowed.TEST".to_vec(), Ok("allowed.test")),
        (b"allowed.test.".to_vec(), Ok("allowed.test")),
        (
            b"XN--BCHER-KVA.Allowed.Test.".to_vec(),
            Ok("xn--bcher-kva.allowed.test"),
        ),
        (b"allowed.test..".to_vec(), Err(EmptyLabel)),
        (b"".to_vec(), Err(Empty)),
        (b".".to_vec(), Err(Empty)),
        (b".allowed.test".to_vec(), Err(EmptyLabel)),
        (b"a..allowed.test".to_vec(), Err(EmptyLabel)),
        // Lengths.
        ([&long(b'a', 63)[..], b".allowed.test"].concat(), Ok(l63)),
        ([&long(b'a', 64)[..], b".allowed.test"].concat(), Err(LabelTooLong)),
        (n253.clone(), Ok(s253)),
        ([&n253[..], b"."].concat(), Ok(s253)),
        (n254, Err(TooLong)),
        ([ATTACK, &long(b'a', 252), b".allowed.test"].concat(), Err(TooLong)),
        ([ATTACK, &long(b'a', 59), b".allowed.test"].concat(), Err(Byte(0))),
        ([ATTACK, b"x.allowed.test"].concat(), Err(Byte(0))),
        (b"a.test.allowed.test\0".to_vec(), Err(Byte(0))),
        // Control bytes, escapes, punctuation.
        (b"a\0.allowed.test".to_vec(), Err(Byte(0))),
        (b"a\x01b.allowed.test".to_vec(), Err(Byte(1))),
        (b"a\x7f.allowed.test".to_vec(), Err(Byte(0x7f))),
        (b"a\tb.allowed.test".to_vec(), Err(Byte(b'\t'))),
        (b"a\rb.allowed.test".to_vec(), Err(Byte(b'\r'))),
        (b"a%2e.allowed.test".to_vec(), Err(Byte(b'%'))),
        (b"%61llowed.test".to_vec(), Err(Byte(b'%'))),
        (b"a b.allowed.test".to_vec(), Err(Byte(b' '))),
        (b"a_b.allowed.test".to_vec(), Err(Byte(b'_'))),
        (b"a\\.allowed.test".to_vec(), Err(Byte(b'\\'))),
        (b"a@allowed.test".to_vec(), Err(Byte(b'@'))),
        (b"a,allowed.test".to_vec(), Err(Byte(b','))),
        (b"-a.allowed.test".to_vec(), Err(Hyphen)),
        (b"a-.allowed.test".to_vec(), Err(Hyphen)),
        (b"a-b.allowed.test".to_vec(), Ok("a-b.allowed.test")),
        // Unicode: refused, never mapped to an A-label.
        ("bücher.allowed.test".as_bytes().to_vec(), Err(NotAscii)),
        ("a\u{200b}.allowed.test".as_bytes().to_vec(), Err(NotAscii)),
        ("ａllowed.test".as_bytes().to_vec(), Err(NotAscii)),
        (b"\xff.allowed.test".to_vec(), Err(NotAscii)),
        // `*` in odd places.
        (b"*.allowed.test".to_vec(), Err(Byte(b'*'))),
        (b"a.*.allowed.test".to_vec(), Err(Byte(b'*'))),
        (b"a*.allowed.test".to_vec(), Err(Byte(b'*'))),
        (b"*".to_vec(), Err(Byte(b'*'))),
        // IP literals in every form.
        (b"127.0.0.1".to_vec(), Err(Address)),
        (b"2130706433".to_vec(), Err(Address)),
        (b"0x7f000001".to_vec(), Err(Address)),
        (b"0X7F.1".to_vec(), Err(Address)),
        (b"0177.0.0.1".to_vec(), Err(Address)),
        (b"127.1".to_vec(), Err(Address)),
        (b"198.18.0.9.".to_vec(), Err(Address)),
        (b"allowed.test.127".to_vec(), Err(Address)),
        (b"a.0x".to_vec(), Err(Address)),
        (b"[::1]".to_vec(), Err(Address)),
        (b"::1".to_vec(), Err(Address)),
        (b"::ffff:127.0.0.1".to_vec(), Err(Address)),
        (b"[fe80::1%25lo]".to_vec(), Err(Address)),
        // Names that look like numbers but are not addresses.
        (b"1.allowed.test".to_vec(), Ok("1.allowed.test")),
        (b"a.0xg".to_vec(), Ok("a.0xg")),
        (b"localhost".to_vec(), Ok("localhost")),
    ];
    rows
}

#[test]
fn hostile_names_are_refused_or_normalised_alike_at_every_door() {
    let rows = hostile();
    assert!(rows.len() >= 40);
    for (raw, want) in &rows {
        let shown = crate::display::escape_bytes(&raw[..raw.len().min(40)]);
        let grammar = match want {
            Ok(n) => Door::Name(n.to_string()),
            Err(e) => Door::Refused(*e),
        };
        assert_eq!(
            HostName::from_bytes(raw).map(|n| n.to_string()),
            want.map(str::to_string),
            "grammar: {shown}"
        );
        let utf8 = std::str::from_utf8(raw).is_ok();
        // SNI: the bytes as they are.
        assert_eq!(via_sni(raw), grammar, "SNI {shown}");
        // HTTP: the head must be UTF-8; the request line is split at
        // spaces (a target with one is no request).
        let head = |d| if utf8 { d } else { Door::NoName };
        assert_eq!(via_host(raw), head(grammar.clone()), "Host {shown}");
        let line = |d| if raw.contains(&b' ') { Door::NoName } else { head(d) };
        assert_eq!(via_absolute(raw), line(grammar.clone()), "absolute-form {shown}");
        assert_eq!(via_connect(raw), line(grammar.clone()), "CONNECT {shown}");
        // DNS: labels on the wire; an empty label or one over 63 bytes
        // cannot be written, so the message is malformed (FORMERR).
        let body = raw.strip_suffix(b".").unwrap_or(raw);
        let unwritable = !body.is_empty() && body.split(|c| *c == b'.').any(|l| l.is_empty() || l.len() > 63);
        let dns = if unwritable { Door::NoName } else { grammar.clone() };
        assert_eq!(via_dns(raw), dns, "DNS {shown}");
        // Config: `*.` and a name is a wildcard pattern; any other `*` is
        // refused as such.
        if let Some(cfg) = via_config(raw) {
            let want_cfg = match raw.strip_prefix(b"*.") {
                _ if raw == b"*" => Door::Star,
                Some(rest) if !rest.contains(&b'*') => match HostName::from_bytes(rest) {
                    Ok(n) => Door::Wild(n.to_string()),
                    Err(e) => Door::Refused(e),
                },
                _ if raw.contains(&b'*') => Door::Star,
                _ => grammar.clone(),
            };
            assert_eq!(cfg, want_cfg, "config {shown}");
        }
    }
}

#[test]
fn the_long_label_attack_matches_no_pattern_and_asks_nothing() {
    // `*.allowed.test` and the name that used to match it and be asked
    // upstream as `evil.test`.
    let g = gate(&["*.allowed.test"], false);
    // The label after `evil.test.` is 256 bytes long.
    let raw = [ATTACK, &[b'a'; 252][..], b".allowed.test"].concat();
    let dst: SocketAddrV4 = "198.18.0.9:443".parse().unwrap();
    for s in [
        sniff(&client_hello_bytes(&raw)),
        sniff(&[b"GET / HTTP/1.1\r\nHost: ", &raw[..], b"\r\n\r\n"].concat()),
        sniff(&[b"CONNECT ", &raw[..], b":443 HTTP/1.1\r\n\r\n"].concat()),
    ] {
        let Verdict::Refuse { what, why, .. } = decide(&g, dst, None, &s) else {
            panic!("{s:?}");
        };
        assert_eq!(why, NameError::TooLong.reason());
        assert!(
            what.starts_with("evil.test.\\x00\\x01\\x00\\x01aaa") && what.len() < 100,
            "{what}"
        );
    }
}

#[test]
fn sni_takes_one_name_only() {
    let two = client_hello_names(&[b"allowed.test", b"other.test"]);
    assert!(matches!(
        sniff(&two),
        Sniffed::Tls(Some(Err(Unnamed {
            err: NameError::Twice,
            ..
        })))
    ));
    assert_eq!(sniff(&client_hello_names(&[])), Sniffed::Tls(None));
}

// ---- DNS answers --------------------------------------------------------------

fn wire(name: &str) -> Vec<u8> {
    let mut w = Vec::new();
    for l in name.split('.').filter(|l| !l.is_empty()) {
        w.push(l.len() as u8);
        w.extend_from_slice(l.as_bytes());
    }
    w.push(0);
    w
}

/// A response: id, flags, one question (`qname` wire bytes, type, class),
/// then answer records (owner wire bytes, type, rdata).
fn response(id: u16, flags: u16, q: (&[u8], u16, u16), answers: &[(&[u8], u16, &[u8])]) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&[0, 1]);
    m.extend_from_slice(&(answers.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(q.0);
    m.extend_from_slice(&q.1.to_be_bytes());
    m.extend_from_slice(&q.2.to_be_bytes());
    for (owner, t, data) in answers {
        m.extend_from_slice(owner);
        m.extend_from_slice(&t.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0, 60]);
        m.extend_from_slice(&(data.len() as u16).to_be_bytes());
        m.extend_from_slice(data);
    }
    m
}

#[test]
fn upstream_answers_count_only_for_the_question_asked() {
    let asked = hn("pw.allowed.test");
    let q = wire("pw.allowed.test");
    let here: &[u8] = &[0xc0, 12]; // a pointer to the question's name
    let a1: &[u8] = &[198, 18, 0, 1];
    let a2: &[u8] = &[198, 18, 0, 2];
    let ok = |m: &[u8]| parse_a_answers(m, 7, &asked);
    let one = Some((vec![Ipv4Addr::new(198, 18, 0, 1)], 60));
    assert_eq!(ok(&response(7, 0x8180, (&q, 1, 1), &[(here, 1, a1)])), one);
    assert_eq!(ok(&response(7, 0x8180, (&q, 1, 1), &[(&q, 1, a1)])), one);
    // The question's name in another case is the same name.
    let upper = wire("PW.Allowed.TEST");
    assert_eq!(ok(&response(7, 0x8180, (&upper, 1, 1), &[(here, 1, a1)])), one);
    for (why, m) in [
        ("wrong id", response(8, 0x8180, (&q, 1, 1), &[(here, 1, a1)])),
        ("not a response", response(7, 0x0180, (&q, 1, 1), &[(here, 1, a1)])),
        ("another opcode", response(7, 0x8980, (&q, 1, 1), &[(here, 1, a1)])),
        ("SERVFAIL", response(7, 0x8182, (&q, 1, 1), &[])),
        ("REFUSED", response(7, 0x8185, (&q, 1, 1), &[])),
        (
            "another name",
            response(7, 0x8180, (&wire("evil.test"), 1, 1), &[(here, 1, a1)]),
        ),
        (
            "a shorter name",
            response(7, 0x8180, (&wire("allowed.test"), 1, 1), &[(here, 1, a1)]),
        ),
        ("type AAAA", response(7, 0x8180, (&q, 28, 1), &[(here, 1, a1)])),
        ("class CH", response(7, 0x8180, (&q, 1, 3), &[(here, 1, a1)])),
        (
            "cut short",
            response(7, 0x8180, (&q, 1, 1), &[(here, 1, a1)])[..40].to_vec(),
        ),
    ] {
        assert_eq!(ok(&m), None, "{why}");
    }
    let mut two = response(7, 0x8180, (&q, 1, 1), &[]);
    two[5] = 2;
    two.extend_from_slice(&q);
    two.extend_from_slice(&[0, 1, 0, 1]);
    assert_eq!(ok(&two), None, "two questions");
    // NXDOMAIN for the question asked: no addresses.
    assert_eq!(ok(&response(7, 0x8183, (&q, 1, 1), &[])), Some((vec![], 0)));
    // An A record for another owner is not the asked name's address.
    let evil = wire("evil.test");
    assert_eq!(
        ok(&response(7, 0x8180, (&q, 1, 1), &[(&evil, 1, a2)])),
        Some((vec![], 0))
    );
    assert_eq!(
        ok(&response(7, 0x8180, (&q, 1, 1), &[(&evil, 1, a2), (here, 1, a1)])),
        one
    );
    // A CNAME chain from the asked name counts; a record off the chain does not.
    let cname_to_cdn = wire("cdn.example");
    let cdn = wire("cdn.example");
    assert_eq!(
        ok(&response(
            7,
            0x8180,
            (&q, 1, 1),
            &[(here, 5, &cname_to_cdn), (&cdn, 1, a1), (&evil, 1, a2)]
        )),
        one
    );
    // A CNAME of another owner does not start a chain.
    assert_eq!(
        ok(&response(7, 0x8180, (&q, 1, 1), &[(&evil, 5, &cdn), (&cdn, 1, a1)])),
        Some((vec![], 0))
    );
    // Compression loops and forward pointers end, refused.
    let mut looped = response(7, 0x8180, (&q, 1, 1), &[]);
    looped[7] = 1;
    let at = looped.len();
    looped.extend_from_slice(&[
        0xc0 | (at >> 8) as u8,
        at as u8,
        0,
        1,
        0,
        1,
        0,
        0,
        0,
        60,
        0,
        4,
        1,
        2,
        3,
        4,
    ]);
    assert_eq!(ok(&looped), None, "a pointer to itself");
    let mut fwd = response(7, 0x8180, (&q, 1, 1), &[]);
    fwd[7] = 1;
    let at = fwd.len() + 2;
    fwd.extend_from_slice(&[0xc0, at as u8, 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 1, 2, 3, 4]);
    assert_eq!(ok(&fwd), None, "a forward pointer");
    // A label that points back into itself grows the name until 255 bytes.
    let mut grow = response(7, 0x8180, (&q, 1, 1), &[]);
    grow[7] = 1;
    let at = grow.len();
    grow.extend_from_slice(&[1, b'x', 0xc0 | (at >> 8) as u8, at as u8]);
    grow.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 1, 2, 3, 4]);
    assert_eq!(ok(&grow), None, "a label loop");
    // A CNAME loop ends too.
    let a_name = wire("a.example");
    assert_eq!(
        ok(&response(
            7,
            0x8180,
            (&q, 1, 1),
            &[(here, 5, &a_name), (&a_name, 5, &q), (&a_name, 1, a1)]
        )),
        one
    );
}

#[test]
fn the_encoder_writes_only_names_and_reads_back_the_same() {
    let long = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    for n in [
        "a",
        "A.Test",
        "xn--bcher-kva.example",
        "1.allowed.test",
        "a-b.c",
        long.as_str(),
    ] {
        let name = hn(n);
        let q = dns_query(0x4242, &name, 1);
        assert_eq!(q.len(), 12 + name.len() + 2 + 4, "{n}");
        let back = parse_question(&q).unwrap();
        assert_eq!(back.name, Ok(name.clone()), "{n}");
        assert_eq!((back.id, back.qtype, back.qclass, back.end), (0x4242, 1, 1, q.len()));
    }
}

#[test]
fn questions_that_are_no_query_get_formerr_or_nothing() {
    let q = dns_query(9, &hn("a.test"), 1);
    let mut pointer = q[..12].to_vec();
    pointer.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    let mut trailing = q.clone();
    trailing.push(0);
    let mut answers = q.clone();
    answers[7] = 1;
    for m in [pointer, trailing, answers, q[..q.len() - 1].to_vec()] {
        assert_eq!(parse_question(&m), None);
        let r = dns_formerr(&m).unwrap();
        assert_eq!((r[2] & 0x80, r[3] & 0x0f), (0x80, RCODE_FORMERR));
    }
    // One EDNS record after the question is fine.
    let mut edns = q.clone();
    edns[11] = 1;
    edns.extend_from_slice(&[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(parse_question(&edns).unwrap().name, Ok(hn("a.test")));
    // No answer to a response.
    let r = dns_answer(&q, &parse_question(&q).unwrap(), 0, None);
    assert_eq!(dns_formerr(&r), None);
    // A question whose labels are no host name is REFUSED, shown escaped:
    // here one label `a\0.b` (a dot inside a label is no separator).
    let mut bad = q[..12].to_vec();
    bad.extend_from_slice(b"\x04a\0.b\x04test\0\0\x01\0\x01");
    let question = parse_question(&bad).unwrap();
    assert_eq!(
        question.name,
        Err(Unnamed {
            shown: "a\\x00.b.test".into(),
            err: NameError::Byte(b'.')
        })
    );
}

// ---- what the resolver asks upstream -----------------------------------------

#[test]
fn the_resolver_asks_upstream_only_for_exact_listed_names() {
    let g = gate(&["*.allowed.test", "exact.allowed.test:22", "plain.test"], false);
    assert_eq!(lookup(&g, &hn("plain.test")), Lookup::Resolve);
    assert_eq!(lookup(&g, &hn("exact.allowed.test")), Lookup::Resolve);
    assert_eq!(lookup(&g, &hn("pw-hunter2-t1.allowed.test")), Lookup::Synthetic);
    assert_eq!(lookup(&g, &hn("a.b.allowed.test")), Lookup::Synthetic);
    assert_eq!(lookup(&g, &hn("allowed.test")), Lookup::Refused);
    assert_eq!(lookup(&g, &hn("evil.test")), Lookup::Refused);
    assert_eq!(lookup(&g, &hn("x.plain.test")), Lookup::Refused);
    let l = gate(&[], true);
    assert_eq!(lookup(&l, &hn("anything.test")), Lookup::Resolve);
}

#[test]
fn the_resolver_cache_is_bounded_and_clamps_ttls() {
    let mut c = Cache::default();
    let t0 = Instant::now();
    let addr = vec![Ipv4Addr::new(198, 18, 0, 1)];
    c.put(&hn("short.test"), addr.clone(), 0, t0);
    c.put(&hn("long.test"), addr.clone(), u32::MAX, t0);
    assert_eq!(
        c.get(&hn("short.test"), t0 + Duration::from_secs(4)),
        Some(addr.clone())
    );
    assert_eq!(
        c.get(&hn("short.test"), t0 + Duration::from_secs(5)),
        None,
        "TTL 0 kept 5 s"
    );
    assert!(c.get(&hn("long.test"), t0 + Duration::from_secs(299)).is_some());
    assert_eq!(
        c.get(&hn("long.test"), t0 + Duration::from_secs(300)),
        None,
        "kept 300 s at most"
    );
    // Full: the expired go first, then the oldest.
    let mut c = Cache::default();
    for i in 0..CACHE_MAX {
        let ttl = if i < 3 { 5 } else { 300 };
        c.put(
            &hn(&format!("n{i}.test")),
            addr.clone(),
            ttl,
            t0 + Duration::from_millis(i as u64),
        );
    }
    assert_eq!(c.len(), CACHE_MAX);
    let later = t0 + Duration::from_secs(10);
    c.put(&hn("new.test"), addr.clone(), 300, later);
    assert_eq!(c.len(), CACHE_MAX - 2, "the three expired went");
    assert!(c.get(&hn("n3.test"), later).is_some());
    for i in 0..3 {
        c.put(&hn(&format!("more{i}.test")), addr.clone(), 300, later);
    }
    assert_eq!(c.len(), CACHE_MAX);
    assert!(c.get(&hn("n3.test"), later).is_none(), "then the oldest");
    assert!(c.get(&hn("n4.test"), later).is_some() && c.get(&hn("more2.test"), later).is_some());
    assert_eq!(c.len(), CACHE_MAX);
}

/// Attack: a plain HTTP request the sniff cannot read as a head (a header
/// value that is not UTF-8, bare LF line ends, an unknown or lower-case
/// method, two spaces in the request line, an empty line first, HTTP/0.9)
/// but a lenient server takes, carrying a sentinel towards a host it is
/// not bound to. It must reach the swap (which refuses it as a leak or as
/// a head it cannot frame), never the plain relay.
#[test]
fn requests_the_sniff_cannot_read_still_go_through_the_swap() {
    use crate::config::secrets::SecretValue;
    use crate::net::subst::{Binding, RequestSide, Upstream};
    let s = "lzr-sk-0123456789abcdefghijABCDEFGHIJ0123456789";
    let bindings = vec![Binding {
        var: "API_KEY".into(),
        sentinel: s.into(),
        real: SecretValue::new(b"sk-real-value-1234".to_vec()).unwrap(),
        hosts: vec!["api.test".into()],
        headers: vec!["authorization".into()],
        plain_http: false,
    }];
    let attacks: Vec<Vec<u8>> = vec![
        [
            &b"GET / HTTP/1.1\r\nHost: other.test\r\nX: \xff\r\n"[..],
            format!("Authorization: Bearer {s}\r\n\r\n").as_bytes(),
        ]
        .concat(),
        format!("GET / HTTP/1.1\nHost: other.test\nAuthorization: Bearer {s}\n\n").into_bytes(),
        format!("PROPFIND / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer {s}\r\n\r\n").into_bytes(),
        format!("get / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer {s}\r\n\r\n").into_bytes(),
        format!("GET  /  HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer {s}\r\n\r\n").into_bytes(),
        format!("\r\nGET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer {s}\r\n\r\n").into_bytes(),
        format!("GET /?k={s}\r\n").into_bytes(),
    ];
    // A client that pauses past the sniff's wait mid-line or before its
    // first byte: what follows would be relayed unread.
    for early in [&b"G"[..], b"GET / HTTP/1.1", b"\r\nPOST /x", b""] {
        assert!(
            plain_http(&Sniffed::Other, 80, early),
            "{:?}",
            String::from_utf8_lossy(early)
        );
    }
    for a in &attacks {
        // As the gate's read_name ends it: a head never complete is Other.
        let sn = match sniff(a) {
            Sniffed::NeedMore => Sniffed::Other,
            x => x,
        };
        let shown = String::from_utf8_lossy(a);
        for port in [80, 443, netpolicy::PROXY_PORT] {
            assert!(plain_http(&sn, port, a), "{port}: {shown:?}");
        }
        // What the swap does with it: refused, nothing goes out.
        let mut out = Vec::new();
        let r = RequestSide::new("other.test", &bindings, Upstream::Plain).feed(
            a,
            &mut out,
            &mut std::collections::VecDeque::new(),
        );
        assert!(
            r.is_err() || !out.windows(s.len()).any(|w| w == s.as_bytes()),
            "{shown:?}"
        );
    }
    // Not requests: relayed as they are (SSH over 443, TLS, a port the
    // gate does not read names on).
    assert!(!plain_http(&Sniffed::Other, 443, b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3\r\n"));
    assert!(!plain_http(&Sniffed::Other, 443, &client_hello("a.test")[..3]));
    assert!(!plain_http(&Sniffed::Other, 443, b"\x00\x01binary"));
    assert!(!plain_http(&Sniffed::Other, 8080, &attacks[0]));
    assert!(plain_http(&sniff(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"), 8080, b""));
}
