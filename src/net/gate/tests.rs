//! Unit tests of the egress gate's pure parts: sniffing, deciding by
//! name, DNS messages, packet filters, synthetic addresses, the log.

use std::net::{Ipv4Addr, SocketAddrV4};

use super::*;
use crate::net::policy::GatePlan;

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
    let name = sni.as_bytes();
    let mut ext = vec![0, 0];
    let list_len = (name.len() + 3) as u16;
    ext.extend_from_slice(&(list_len + 2).to_be_bytes());
    ext.extend_from_slice(&list_len.to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&(name.len() as u16).to_be_bytes());
    ext.extend_from_slice(name);
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
    assert_eq!(sniff(&ch), Sniffed::Tls(Some("allowed.test".into())));
    assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: a.test:8080\r\n"), Sniffed::NeedMore);
    assert_eq!(
        sniff(b"GET / HTTP/1.1\r\nhost: A.test\r\n\r\n"),
        Sniffed::Http {
            host: Some("a.test".into()),
            port: None,
            proxy: false
        }
    );
    assert_eq!(
        sniff(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\nxx"),
        Sniffed::Connect {
            host: "a.test".into(),
            port: 443,
            header_len: 49
        }
    );
    assert_eq!(
        sniff(b"GET http://b.test/x HTTP/1.1\r\nHost: c.test\r\n\r\n"),
        Sniffed::Http {
            host: Some("b.test".into()),
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
        decide(&g, other, None, &Sniffed::Tls(Some("allowed.test".into()))),
        Verdict::Name {
            name: "allowed.test".into(),
            port: 443
        }
    );
    assert!(matches!(
        decide(&g, other, None, &Sniffed::Tls(Some("other.test".into()))),
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
    let lit = Sniffed::Http {
        host: Some("198.18.9.2".into()),
        port: None,
        proxy: false,
    };
    assert!(matches!(decide(&g, other, None, &lit), Verdict::Refuse { .. }));
    // Nameless port: only the synthetic name, only its listed port.
    let syn: SocketAddrV4 = "100.127.0.1:22".parse().unwrap();
    assert_eq!(
        decide(&g, syn, Some("git.test"), &Sniffed::Other),
        Verdict::Name {
            name: "git.test".into(),
            port: 22
        }
    );
    assert!(matches!(
        decide(&g, syn, Some("allowed.test"), &Sniffed::Other),
        Verdict::Refuse { .. }
    ));
    assert!(matches!(
        decide(&g, "198.18.9.2:22".parse().unwrap(), None, &Sniffed::Other),
        Verdict::Refuse { .. }
    ));
    // CONNECT decides by its own port.
    let c = Sniffed::Connect {
        host: "allowed.test".into(),
        port: 22,
        header_len: 1,
    };
    assert!(matches!(decide(&g, other, None, &c), Verdict::Refuse { .. }));
    // Log mode: everything, an address by its address.
    let l = gate(&[], true);
    assert_eq!(decide(&l, other, None, &Sniffed::Other), Verdict::Addr(other));
}

#[test]
fn dns_round_trip() {
    let q = dns_query(0x1234, "Allowed.test", 1);
    let question = parse_question(&q).unwrap();
    assert_eq!(question.name, "allowed.test");
    assert_eq!(question.qtype, 1);
    let a = dns_answer(&q, &question, 0, Some(Ipv4Addr::new(100, 127, 0, 1)));
    assert_eq!(
        parse_a_answers(&a, 0x1234),
        Some((vec![Ipv4Addr::new(100, 127, 0, 1)], 30))
    );
    let r = dns_answer(&q, &question, 5, None);
    assert_eq!(r[3] & 0x0f, 5);
    assert_eq!(parse_a_answers(&r, 0x1234), Some((vec![], 0)));
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
    let a = n.synthetic("a.test").unwrap();
    assert!(is_synthetic(a));
    assert_eq!(n.synthetic("a.test"), Some(a));
    let b = n.synthetic("b.test").unwrap();
    assert_ne!(a, b);
    assert_eq!(n.by_addr[&b], "b.test");
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
