//! The pre-publication network probe, run inside the sandbox by PID 1 at
//! boot, before it reports `Ready` (so before any session exists and
//! without a `runsc exec` of its own).
//!
//! The request is the `lazaret::guest::BootCmd::Probe` frame of init's
//! boot request (built by `net::policy::Policy::probe_request`; none
//! without a network): the sandbox's address on its only NIC, then the
//! checks (`ProbeKind`):
//!   `Deny ADDR (PREFIX)`   a TCP connect with IP TTL 1 must be refused
//!                          at once by the router (a RST)
//!   `Allow ADDR (PREFIX)`  route decision must leave through the NIC
//!   `Resolver ADDR`        route decision must leave through the NIC
//!   `DnsQuery ADDR`        a DNS query to ADDR must be answered
//!   `RouterLive R`         TCP connect to the router must be refused at once
//!   `HelperLive GW`        TCP connect to GW must be answered at once
//!                          (RST or ICMP unreachable from slirp4netns)
//!   `Ipv6Off ADDR`         no IPv6 route to ADDR
//!
//! Where a deny is enforced: the sandbox's only route leads to the
//! router namespace, whose kernel refuses denied destinations with a local
//! route (RST). The deny check proves that from here: a SYN with TTL 1 is
//! answered by the router's own TCP (refused) when the router holds the
//! deny; were the route missing, the router would forward it, the TTL would
//! expire *in the router* (ICMP time exceeded, which gVisor ignores), and
//! the check times out — no packet of the probe ever leaves the router.
//! Multicast destinations are never forwarded by the router (no multicast
//! routing); for those only the route decision is checked here, the
//! router's own lookup is in the supervisor's attestation.
//!
//! A route decision is a UDP `connect()` followed by `getsockname()`: no
//! packet is sent. The live checks only send to the router's own address,
//! to slirp4netns's gateway (host loopback is disabled, so it refuses) and
//! TTL-1 SYNs that cannot pass the router. Report on init's stdout: one
//! `lazaret::guest::InitMsg::Check` frame per check (init's `Ready`
//! follows); a boot request init cannot read is one failed check. The host
//! judges the report: a failed check, or fewer checks than it asked for,
//! and the Domain is not published.

use std::fmt;
use std::io::{self, ErrorKind};

use lazaret::guest::{InitMsg, ProbeKind, MAX_CHECK_DETAIL, MAX_CHECK_NAME};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

/// How long a TTL-1 SYN may take to be refused by the router. Only a
/// refusal passes, so waiting longer never lets a forwarded SYN pass; on a
/// loaded machine (load 17 on 2 cores) 500 ms was seen to run out before
/// the router's refusal came, and the Domain failed to start.
const DENY_WAIT: Duration = Duration::from_millis(2000);
/// A live check's refusal must come within this (the router or the helper
/// answering by itself, not a timeout somewhere).
const LIVE_WAIT: Duration = Duration::from_millis(500);

/// Why a check failed; shows as the detail of its `FAIL` line.
#[derive(Debug)]
enum CheckError {
    /// A connect that had to be refused was accepted.
    Connected,
    /// … failed otherwise (the error, after how long).
    NotRefused(io::Error, Duration),
    /// The probe's own socket could not be made.
    Socket(io::Error),
    /// No refusal within `DENY_WAIT`.
    Forwarded,
    Io(io::Error),
    /// The DNS server did not answer.
    NoAnswer(io::Error),
    MalformedAnswer,
    /// The route leaves by another source than the router link.
    RoutedVia(IpAddr, Option<IpAddr>),
    NoRoute(io::Error),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use CheckError::*;
        match self {
            Connected => write!(f, "connected, expected a refusal"),
            NotRefused(e, t) => write!(f, "{e} after {} ms, expected a refusal", t.as_millis()),
            Socket(e) => write!(f, "socket: {e}"),
            Forwarded => write!(
                f,
                "not refused within {} ms (the router forwarded it; TTL 1 ended it there)",
                DENY_WAIT.as_millis()
            ),
            Io(e) => write!(f, "{e}"),
            NoAnswer(e) => write!(f, "no answer: {e}"),
            MalformedAnswer => write!(f, "malformed answer"),
            RoutedVia(s, want) => write!(f, "routed via {s}, expected the router link {want:?}"),
            NoRoute(e) => write!(f, "no route: {e}"),
        }
    }
}

struct Out;

impl Out {
    fn send(&mut self, msg: InitMsg) {
        crate::report(&msg);
    }
    fn ok(&mut self, check: &str, detail: String) {
        self.check(check, true, detail);
    }
    fn fail(&mut self, check: &str, detail: impl fmt::Display) {
        self.check(check, false, detail.to_string());
    }
    /// Name and detail are cut to what the host takes.
    fn check(&mut self, name: &str, ok: bool, detail: String) {
        let cut = |s: &str, max: usize| {
            let mut end = s.len().min(max);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s[..end].to_string()
        };
        self.send(InitMsg::Check {
            name: cut(name, MAX_CHECK_NAME),
            ok,
            detail: cut(&detail, MAX_CHECK_DETAIL),
        });
    }
}

fn route_source(addr: IpAddr) -> std::io::Result<IpAddr> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let s = UdpSocket::bind(bind)?;
    s.connect(SocketAddr::new(addr, 9))?;
    Ok(s.local_addr()?.ip())
}

/// A TCP connect that must be answered at once with a refusal (RST), or,
/// when `icmp_ok`, with an ICMP unreachable: slirp4netns answers a connect
/// to its gateway that way when host loopback is disabled.
fn refused_fast(addr: IpAddr, icmp_ok: bool) -> Result<Duration, CheckError> {
    let t = Instant::now();
    match TcpStream::connect_timeout(&SocketAddr::new(addr, 9), Duration::from_secs(2)) {
        Ok(_) => Err(CheckError::Connected),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(t.elapsed()),
        Err(e) if icmp_ok && matches!(e.raw_os_error(), Some(101) | Some(113)) => Ok(t.elapsed()),
        Err(e) => Err(CheckError::NotRefused(e, t.elapsed())),
    }
}

/// A TCP connect to `addr` port 9 with IP TTL 1: `Ok(elapsed)` if refused
/// (RST), else what happened instead.
fn refused_at_router(addr: Ipv4Addr) -> Result<Duration, CheckError> {
    let t = Instant::now();
    let target = std::net::SocketAddrV4::new(addr, 9);
    match crate::sys::guest::connect_with_ttl(target, 1, DENY_WAIT) {
        Err(e) => Err(CheckError::Socket(e)),
        Ok(None) => Err(CheckError::Forwarded),
        Ok(Some(Err(e))) if e.kind() == ErrorKind::ConnectionRefused => Ok(t.elapsed()),
        Ok(Some(Ok(()))) => Err(CheckError::Connected),
        Ok(Some(Err(e))) => Err(CheckError::Io(e)),
    }
}

fn dns_query(addr: IpAddr) -> Result<Duration, CheckError> {
    let t = Instant::now();
    let s = UdpSocket::bind("0.0.0.0:0").map_err(CheckError::Io)?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(CheckError::Io)?;
    s.connect(SocketAddr::new(addr, 53)).map_err(CheckError::Io)?;
    // Query: id 0x4c5a, RD, one question `lazaret-probe.invalid. A IN`.
    let mut q = vec![0x4c, 0x5a, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["lazaret-probe", "invalid"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    s.send(&q).map_err(CheckError::Io)?;
    let mut buf = [0u8; 512];
    let n = s.recv(&mut buf).map_err(CheckError::NoAnswer)?;
    if n < 12 || buf[0..2] != [0x4c, 0x5a] || buf[2] & 0x80 == 0 {
        return Err(CheckError::MalformedAnswer);
    }
    Ok(t.elapsed())
}

/// Runs `checks` in order, one `InitMsg::Check` each on stdout.
pub fn run(sandbox_src: IpAddr, checks: Vec<lazaret::guest::ProbeSpec>) {
    let out = &mut Out;
    let sandbox_src = Some(sandbox_src);
    for c in checks {
        let (addr, k) = (c.addr, c.kind);
        let check = match c.prefix {
            None => format!("{} {addr}", k.word()),
            Some(prefix) => format!("{} {addr} ({prefix})", k.word()),
        };
        let via_nic = |src: std::io::Result<IpAddr>| -> Result<IpAddr, CheckError> {
            match src {
                Ok(s) if Some(s) == sandbox_src => Ok(s),
                Ok(s) => Err(CheckError::RoutedVia(s, sandbox_src)),
                Err(e) => Err(CheckError::NoRoute(e)),
            }
        };
        match k {
            ProbeKind::Allow | ProbeKind::Resolver => match via_nic(route_source(addr)) {
                Ok(s) => out.ok(&check, format!("routed via {s} to the router, forwarded there")),
                Err(e) => out.fail(&check, e),
            },
            ProbeKind::Deny => {
                let IpAddr::V4(v4) = addr else {
                    out.fail(&check, "not IPv4");
                    continue;
                };
                if v4.is_multicast() || v4.is_broadcast() {
                    // The router never forwards these (no multicast routing);
                    // its own lookup is attested by the supervisor.
                    match route_source(addr) {
                        Err(_) => out.ok(&check, "no route in the sandbox".into()),
                        Ok(_) => out.ok(&check, "multicast: the router never forwards it".into()),
                    }
                    continue;
                }
                // Only behind the router does TTL 1 keep the SYN here.
                if let Err(e) = via_nic(route_source(addr)) {
                    out.fail(&check, format!("not sent: {e}"));
                    continue;
                }
                match refused_at_router(v4) {
                    Ok(d) => out.ok(&check, format!("refused by the router in {} ms (TTL 1)", d.as_millis())),
                    Err(e) => out.fail(&check, format!("not refused by the router: {e}")),
                }
            }
            ProbeKind::DnsQuery => match dns_query(addr) {
                Ok(d) => out.ok(&format!("dns {addr}"), format!("answered in {} ms", d.as_millis())),
                Err(e) => out.fail(&format!("dns {addr}"), e),
            },
            ProbeKind::RouterLive | ProbeKind::HelperLive => {
                let name = if k == ProbeKind::RouterLive {
                    "router"
                } else {
                    "network helper"
                };
                if let Err(e) = via_nic(route_source(addr)) {
                    out.fail(&format!("{name} live"), format!("{addr}: {e}"));
                    continue;
                }
                // The first connect is the sandbox's first packet: under
                // load, resolving the router's neighbour entry can make its
                // refusal slow. A slow refusal is asked again once; the
                // second must be fast by itself.
                let icmp_ok = k == ProbeKind::HelperLive;
                let first = refused_fast(addr, icmp_ok);
                let result = match first {
                    Ok(d) if d >= LIVE_WAIT => refused_fast(addr, icmp_ok),
                    other => other,
                };
                match result {
                    Ok(d) if d < LIVE_WAIT => out.ok(
                        &format!("{name} live"),
                        format!("{addr} refused a connection in {} ms", d.as_millis()),
                    ),
                    Ok(d) => out.fail(
                        &format!("{name} live"),
                        format!("{addr} refused only after {} ms", d.as_millis()),
                    ),
                    Err(e) => out.fail(&format!("{name} live"), format!("{addr}: {e}")),
                }
            }
            ProbeKind::Ipv6Off => match route_source(addr) {
                Ok(src) => out.fail("ipv6 disabled", format!("{addr} is routable (source {src})")),
                Err(e) => out.ok("ipv6 disabled", format!("{addr} unreachable: {e}")),
            },
        }
    }
}
