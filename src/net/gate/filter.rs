//! What the router's kernel refuses, as the gate sees it: the raw-socket
//! filters for the sandbox's SYNs and UDP, and the packets' destinations.

use std::net::{IpAddr, Ipv4Addr};

use crate::net::policy::{self as netpolicy, GatePlan};
use crate::sys;

/// Classic BPF over the IP header: a TCP SYN (no ACK) from the sandbox.
pub const SYN_FILTER: [sys::sock::BpfInsn; 8] = [
    (0x20, 0, 0, 12),                                 // ld [12]: source address
    (0x15, 0, 5, u32::from_be_bytes(SANDBOX_OCTETS)), // == sandbox, else drop
    (0xb1, 0, 0, 0),                                  // ldx 4*([0]&0xf): header length
    (0x50, 0, 0, 13),                                 // ldb [x+13]: TCP flags
    (0x54, 0, 0, 0x12),                               // and SYN|ACK
    (0x15, 0, 1, 0x02),                               // == SYN, else drop
    (0x06, 0, 0, 0xffff),                             // accept
    (0x06, 0, 0, 0),                                  // drop
];
/// Classic BPF over the IP header: a UDP datagram from the sandbox.
pub const UDP_FILTER: [sys::sock::BpfInsn; 4] = [
    (0x20, 0, 0, 12),
    (0x15, 0, 1, u32::from_be_bytes(SANDBOX_OCTETS)),
    (0x06, 0, 0, 0xffff),
    (0x06, 0, 0, 0),
];
const SANDBOX_OCTETS: [u8; 4] = netpolicy::SANDBOX_ADDR.octets();

/// Destination address and port of an IPv4 TCP or UDP packet (pure).
pub fn packet_dst(p: &[u8]) -> Option<(Ipv4Addr, u16)> {
    let ihl = ((*p.first()? & 0x0f) as usize) * 4;
    let a = p.get(16..20)?;
    let port = p.get(ihl + 2..ihl + 4)?;
    Some((
        Ipv4Addr::new(a[0], a[1], a[2], a[3]),
        u16::from_be_bytes([port[0], port[1]]),
    ))
}

/// Whether a forwarded route (a profile `allow` range, slirp4netns's
/// gateway) contains `a`: the router's tproxy rule leaves those alone.
pub fn forwarded_range(gate: &GatePlan, a: Ipv4Addr) -> bool {
    let host = crate::config::Prefix {
        addr: IpAddr::V4(a),
        len: 32,
    };
    gate.forwarded
        .iter()
        .any(|r| r.kind == netpolicy::RouteKind::Helper && r.prefix.contains(&host))
}
