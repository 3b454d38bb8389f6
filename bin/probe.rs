//! The pre-publication network probe (FR-20), run inside the sandbox by
//! the Host Coordinator through `runsc exec … /.lazaret/init probe`.
//!
//! Arguments (built by `netpolicy::Policy::probe_args`):
//!   `reject-src=A` `helper-src=G`  source addresses that identify the path
//!   `deny=ADDR@PREFIX`             route decision must be the reject path
//!   `allow=ADDR@PREFIX`            route decision must be the helper path
//!   `resolver=ADDR`                route decision must be the helper path
//!   `dns-query=ADDR`               a DNS query to ADDR must be answered
//!   `reject-live=B`                TCP connect to B must be refused at once
//!   `helper-live=GW`               TCP connect to GW must be answered at once
//!                                  (RST or ICMP unreachable from slirp4netns)
//!   `ipv6-off=ADDR`                no IPv6 route to ADDR
//!
//! A route decision is a UDP `connect()` followed by `getsockname()`: no
//! packet is sent, and the source address names the interface the sandbox
//! would use. The live checks only ever send to the reject namespace's own
//! address and to slirp4netns's gateway (host loopback is disabled, so it
//! refuses), never to a denied or public destination. One line per check on
//! stdout: `ok CHECK: DETAIL` or `FAIL CHECK: DETAIL`; exit 1 on any FAIL.

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

struct Out {
    failed: bool,
}

impl Out {
    fn ok(&mut self, check: &str, detail: String) {
        println!("ok {check}: {detail}");
    }
    fn fail(&mut self, check: &str, detail: String) {
        self.failed = true;
        println!("FAIL {check}: {detail}");
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
fn refused_fast(addr: IpAddr, icmp_ok: bool) -> Result<Duration, String> {
    let t = Instant::now();
    match TcpStream::connect_timeout(&SocketAddr::new(addr, 9), Duration::from_secs(2)) {
        Ok(_) => Err("connected, expected a refusal".into()),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => Ok(t.elapsed()),
        Err(e) if icmp_ok && matches!(e.raw_os_error(), Some(101) | Some(113)) => Ok(t.elapsed()),
        Err(e) => Err(format!("{e} after {} ms, expected a refusal", t.elapsed().as_millis())),
    }
}

fn dns_query(addr: IpAddr) -> Result<Duration, String> {
    let t = Instant::now();
    let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    s.connect(SocketAddr::new(addr, 53)).map_err(|e| e.to_string())?;
    // Query: id 0x4c5a, RD, one question `lazaret-probe.invalid. A IN`.
    let mut q = vec![0x4c, 0x5a, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in ["lazaret-probe", "invalid"] {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    s.send(&q).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 512];
    let n = s.recv(&mut buf).map_err(|e| format!("no answer: {e}"))?;
    if n < 12 || buf[0..2] != [0x4c, 0x5a] || buf[2] & 0x80 == 0 {
        return Err("malformed answer".into());
    }
    Ok(t.elapsed())
}

pub fn run(args: &[&str]) -> i32 {
    let mut out = Out { failed: false };
    let mut reject_src: Option<IpAddr> = None;
    let mut helper_src: Option<IpAddr> = None;
    for a in args {
        let Some((k, v)) = a.split_once('=') else {
            eprintln!("probe: bad argument {a:?}");
            return 2;
        };
        let (addr_s, prefix) = v.split_once('@').unwrap_or((v, ""));
        let Ok(addr) = addr_s.parse::<IpAddr>() else {
            eprintln!("probe: bad address in {a:?}");
            return 2;
        };
        let path_name = |src: IpAddr| {
            if Some(src) == reject_src {
                format!("{src} (reject path)")
            } else if Some(src) == helper_src {
                format!("{src} (network helper)")
            } else {
                format!("{src} (unknown path)")
            }
        };
        match k {
            "reject-src" => reject_src = Some(addr),
            "helper-src" => helper_src = Some(addr),
            "deny" | "allow" | "resolver" => {
                let (want, want_name) = if k == "deny" {
                    (reject_src, "the reject path")
                } else {
                    (helper_src, "the network helper")
                };
                let check = if prefix.is_empty() {
                    format!("{k} {addr}")
                } else {
                    format!("{k} {addr} ({prefix})")
                };
                match route_source(addr) {
                    Ok(src) if Some(src) == want => out.ok(&check, format!("routed via {}", path_name(src))),
                    Ok(src) => out.fail(&check, format!("routed via {}, expected {want_name}", path_name(src))),
                    Err(e) => out.fail(&check, format!("no route: {e}, expected {want_name}")),
                }
            }
            "dns-query" => match dns_query(addr) {
                Ok(d) => out.ok(&format!("dns {addr}"), format!("answered in {} ms", d.as_millis())),
                Err(e) => out.fail(&format!("dns {addr}"), e),
            },
            "reject-live" | "helper-live" => {
                let name = if k == "reject-live" {
                    "reject path"
                } else {
                    "network helper"
                };
                // The route decision first: an answer must come over the
                // interface the policy names, not from a missing route.
                let want = if k == "reject-live" { reject_src } else { helper_src };
                match route_source(addr) {
                    Ok(src) if Some(src) == want => {}
                    other => {
                        out.fail(
                            &format!("{name} live"),
                            format!("{addr}: no route via the {name}: {other:?}"),
                        );
                        continue;
                    }
                }
                match refused_fast(addr, k == "helper-live") {
                    Ok(d) if d < Duration::from_millis(500) => out.ok(
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
            "ipv6-off" => match route_source(addr) {
                Ok(src) => out.fail("ipv6 disabled", format!("{addr} is routable (source {src})")),
                Err(e) => out.ok("ipv6 disabled", format!("{addr} unreachable: {e}")),
            },
            _ => {
                eprintln!("probe: unknown check {k:?}");
                return 2;
            }
        }
    }
    i32::from(out.failed)
}
