//! The egress gate: allow-by-name mode's only way out (docs/network.md,
//! "Egress by name").
//!
//! Threads of the Runtime Supervisor that live in the generation's router
//! namespace (they `setns` into it; every socket they open is the
//! router's). The router delivers every TCP connection of the sandbox to
//! the router itself (`local 0.0.0.0/0` in its local table, chosen only for
//! packets arriving on `lzr1`), so the gate's listeners on the gate ports
//! receive them with the sandbox's chosen destination as their local
//! address. In log mode one more, transparent listener (the **catch-all**,
//! on an ephemeral port of the gate's address) receives every other TCP
//! port: the router's netfilter `tproxy` rule (`net::install`) hands it
//! each SYN from the sandbox to a port without a listener for an address
//! the policy would forward (a denied one stays the kernel's RST), and its
//! local address is still the sandbox's chosen destination. Per
//! connection: **decide the name** ([`sniff`], [`decide`]: TLS SNI,
//! HTTP `Host`, `CONNECT`, or the synthetic address the gate's resolver
//! gave for a name), **pick a handler** (today [`Handler::Relay`];
//! issue 31's TLS termination is another), **relay** (splice). The gate
//! resolves the name itself and connects to that name's addresses, never to
//! the address the sandbox chose; an address a reject route of the policy
//! decides (RFC 1918, link-local, the host's own) is refused.
//!
//! The resolver ([`serve_dns`]) answers only listed names (every name in
//! log mode) with a synthetic address from [`SYNTHETIC_NET`] per name,
//! which maps back to the name here: so a nameless protocol (SSH to
//! `git.example:22`) is allowed exactly for the name it was resolved for.
//! Other names are refused (`REFUSED`), nothing is forwarded.
//!
//! Blocking sockets, one thread per connection (two while relaying),
//! bounded by [`MAX_CONNECTIONS`]; no async runtime.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::hosts::{self, HostPattern};
use crate::net::policy::{self as netpolicy, GatePlan, Plan};
use crate::sys;

/// Synthetic addresses the gate's resolver hands out, one per name.
pub const SYNTHETIC_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(100, 127, 0, 0), 16);
/// The log of refusals (and, in log mode, of names reached), in the
/// Domain's runtime dir (it outlives the generation).
pub const LOG_FILE: &str = "egress.log";
const LOG_MAX: u64 = 8 << 20;
pub const MAX_CONNECTIONS: usize = 1024;
const SNIFF_TIMEOUT: Duration = Duration::from_secs(5);
const SNIFF_MAX: usize = 16 * 1024 + 5;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const DNS_TIMEOUT: Duration = Duration::from_secs(2);
/// The name the readiness probe queries (`bin/probe.rs`): refused, not logged.
const PROBE_NAME: &str = "lazaret-probe.invalid";
/// Ports on which the gate reads the name the client sends.
const NAMED_PORTS: [u16; 3] = [80, 443, netpolicy::PROXY_PORT];

/// The running gate; [`Handle::ended`] once any of its threads that must
/// run (listeners, resolver) stopped: a failed generation.
pub struct Handle {
    ended: Arc<AtomicBool>,
    catch_all: Option<u16>,
}

impl Handle {
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Log mode: the port of the catch-all listener (on [`netpolicy::GATE_ADDR`]),
    /// where the router's `tproxy` rule must send every other TCP port.
    pub fn catch_all(&self) -> Option<u16> {
        self.catch_all
    }
}

/// Sets the flag when a required thread ends, by return or panic.
struct EndGuard(Arc<AtomicBool>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Shared {
    plan: Plan,
    gate: GatePlan,
    names: Mutex<Names>,
    log: EgressLog,
    conns: AtomicUsize,
    /// Issue 31: the generation's secrets, when the profile has any
    /// (handed over on the lease pipe, `supervisor`).
    secrets: Option<crate::net::terminate::Secrets>,
}

#[derive(Default)]
struct Names {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
    next: u32,
    /// name -> (addresses, valid until)
    cache: HashMap<String, (Vec<Ipv4Addr>, Instant)>,
}

impl Names {
    fn synthetic(&mut self, name: &str) -> Option<Ipv4Addr> {
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

/// The ports the gate listens on: the named ports and every listed port.
pub fn ports(gate: &GatePlan) -> Vec<u16> {
    let mut p: Vec<u16> = NAMED_PORTS.to_vec();
    for h in &gate.hosts {
        p.extend(h.ports());
    }
    p.sort_unstable();
    p.dedup();
    p
}

/// What the gate's thread binds before it reports ready: the listeners,
/// the resolver's socket, the catch-all's port (log mode), the raw TCP and
/// UDP watchers.
type Bound = (Vec<TcpListener>, UdpSocket, Option<u16>, OwnedFd, OwnedFd);

/// Starts the gate in `router` for `plan` (which has a gate), logging to
/// `log`. Returns once every listener and the resolver are bound.
/// `secrets`: the generation's, if the profile has any (their names are
/// terminated and swapped, `net::terminate`).
/// `die_early` (fault injection only): the listener thread ends after its
/// first connection.
pub fn start(
    router: &OwnedFd,
    plan: &Plan,
    log: PathBuf,
    secrets: Option<crate::net::terminate::Secrets>,
    die_early: bool,
) -> io::Result<Handle> {
    let gate = plan
        .gate
        .clone()
        .ok_or_else(|| io::Error::other("no gate in the plan"))?;
    let ns = router.try_clone()?;
    let ended = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        gate,
        names: Mutex::new(Names::default()),
        log: EgressLog::open(log),
        conns: AtomicUsize::new(0),
        secrets,
    });
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<Option<u16>>>();
    let flag = ended.clone();
    std::thread::Builder::new().name("lz-gate".into()).spawn(move || {
        let _guard = EndGuard(flag.clone());
        let setup = || -> io::Result<(Vec<TcpListener>, UdpSocket, Option<u16>)> {
            sys::setns(&ns, sys::CLONE_NEWNET)?;
            drop(ns);
            let mut ls = Vec::new();
            for p in ports(&shared.gate) {
                let l = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, p))
                    .map_err(|e| io::Error::new(e.kind(), format!("egress gate: listening on port {p}: {e}")))?;
                ls.push(l);
            }
            // Log mode: every other TCP port, through the router's tproxy rule.
            let mut catch_all = None;
            if shared.gate.log_only {
                let l = TcpListener::bind(SocketAddrV4::new(netpolicy::GATE_ADDR, 0))
                    .and_then(|l| sys::sock::set_ip_transparent(&l).map(|()| l))
                    .map_err(|e| io::Error::new(e.kind(), format!("egress gate: the catch-all listener: {e}")))?;
                catch_all = Some(l.local_addr()?.port());
                ls.push(l);
            }
            let dns = UdpSocket::bind(SocketAddrV4::new(netpolicy::GATE_ADDR, 53))
                .map_err(|e| io::Error::new(e.kind(), format!("egress gate: resolver on port 53: {e}")))?;
            Ok((ls, dns, catch_all))
        };
        let setup = || -> io::Result<Bound> {
            let (ls, dns, catch_all) = setup()?;
            let tcp = sys::sock::raw_listener(sys::sock::IPPROTO_TCP, &SYN_FILTER)
                .map_err(|e| io::Error::new(e.kind(), format!("egress gate: raw TCP listener: {e}")))?;
            let udp = sys::sock::raw_listener(sys::sock::IPPROTO_UDP, &UDP_FILTER)
                .map_err(|e| io::Error::new(e.kind(), format!("egress gate: raw UDP listener: {e}")))?;
            Ok((ls, dns, catch_all, tcp, udp))
        };
        let (listeners, dns, catch_all, raw_tcp, raw_udp) = match setup() {
            Ok(v) => v,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        // The resolver: a thread of its own (it waits on the upstream).
        let (s2, f2) = (shared.clone(), flag.clone());
        let spawned = std::thread::Builder::new().name("lz-gate-dns".into()).spawn(move || {
            let _guard = EndGuard(f2);
            serve_dns(&s2, &dns);
        });
        if let Err(e) = spawned {
            let _ = tx.send(Err(e));
            return;
        }
        // The refusals the router's kernel makes itself (ports without a
        // listener, UDP), seen through raw sockets, for the log.
        let (s3, f3) = (shared.clone(), flag.clone());
        let spawned = std::thread::Builder::new().name("lz-gate-log".into()).spawn(move || {
            let _guard = EndGuard(f3);
            watch_refusals(&s3, &raw_tcp, &raw_udp);
        });
        if let Err(e) = spawned {
            let _ = tx.send(Err(e));
            return;
        }
        let _ = tx.send(Ok(catch_all));
        accept_loop(&shared, &listeners, die_early);
    })?;
    let catch_all = rx.recv().map_err(|_| io::Error::other("egress gate thread ended"))??;
    Ok(Handle { ended, catch_all })
}

fn accept_loop(shared: &Arc<Shared>, listeners: &[TcpListener], die_early: bool) {
    let mut served = false;
    loop {
        if die_early && served {
            log::warn!("fault injection: the egress gate's listener ends");
            return;
        }
        let mut fds: Vec<sys::PollFd> = listeners.iter().map(|l| sys::PollFd::new(l, sys::POLLIN)).collect();
        if sys::poll(&mut fds, -1).is_err() {
            continue;
        }
        for (i, f) in fds.iter().enumerate() {
            if !f.readable() {
                continue;
            }
            let Ok((conn, peer)) = listeners[i].accept() else {
                continue;
            };
            served = true;
            // Only the sandbox's end of the link talks to the gate.
            if peer.ip() != IpAddr::V4(netpolicy::SANDBOX_ADDR) {
                continue;
            }
            if shared.conns.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                shared.conns.fetch_sub(1, Ordering::SeqCst);
                reset(conn);
                continue;
            }
            let s = shared.clone();
            let r = std::thread::Builder::new().name("lz-gate-conn".into()).spawn(move || {
                handle(&s, conn);
                s.conns.fetch_sub(1, Ordering::SeqCst);
            });
            if r.is_err() {
                shared.conns.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// Closes with a RST: the client sees a refusal at once.
fn reset(conn: TcpStream) {
    let _ = sys::sock::set_linger_zero(&conn);
    drop(conn);
}

// ---- the name -------------------------------------------------------------------

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

struct Cursor<'a>(&'a [u8], usize);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.0.get(self.1..self.1.checked_add(n)?)?;
        self.1 += n;
        Some(s)
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
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

/// What to do with an allowed connection: the seam for other handlers
/// (issue 31: TLS termination for named hosts).
enum Handler {
    Relay,
}

fn pick_handler(_name: &str) -> Handler {
    Handler::Relay
}

fn handle(shared: &Shared, conn: TcpStream) {
    let Ok(SocketAddr::V4(dst)) = conn.local_addr() else {
        return;
    };
    let synthetic = is_synthetic(*dst.ip())
        .then(|| shared.names.lock().ok()?.by_addr.get(dst.ip()).cloned())
        .flatten();
    let mut buf = Vec::new();
    let sniffed = if NAMED_PORTS.contains(&dst.port()) {
        read_name(&conn, &mut buf)
    } else {
        Sniffed::Other
    };
    let verdict = decide(&shared.gate, dst, synthetic.as_deref(), &sniffed);
    let http = matches!(sniffed, Sniffed::Http { .. } | Sniffed::Connect { .. });
    let (name, target) = match verdict {
        Verdict::Refuse { what, port, why } => {
            shared.log.record("refused", "tcp", &what, port, why);
            return refuse(conn, http, &what, port, why);
        }
        Verdict::Addr(a) => {
            if !shared.plan.gate_may_connect(*a.ip()) {
                let what = a.ip().to_string();
                shared.log.record("refused", "tcp", &what, a.port(), "a denied address");
                return refuse(conn, http, &what, a.port(), "a denied address");
            }
            shared
                .log
                .record("allowed", "tcp", &a.ip().to_string(), a.port(), "log mode");
            (a.ip().to_string(), vec![a])
        }
        Verdict::Name { name, port } => {
            let addrs = resolve(shared, &name);
            let ok: Vec<SocketAddrV4> = addrs
                .iter()
                .filter(|a| shared.plan.gate_may_connect(**a))
                .map(|a| SocketAddrV4::new(*a, port))
                .collect();
            if ok.is_empty() {
                let why = if addrs.is_empty() {
                    "does not resolve"
                } else {
                    "resolves only to denied addresses"
                };
                shared.log.record("refused", "tcp", &name, port, why);
                return refuse(conn, http, &name, port, why);
            }
            if shared.gate.log_only {
                shared.log.record("allowed", "tcp", &name, port, "log mode");
            }
            (name, ok)
        }
    };
    // Issue 31: a plain HTTP head that carries a sentinel towards a host
    // its secret is not bound to is refused before the gate connects, so
    // that host sees nothing at all (the swap refuses the rest later).
    if let (Some(s), Sniffed::Http { .. }) = (shared.secrets.as_ref(), &sniffed) {
        let mut scratch = Vec::new();
        let r = crate::net::subst::RequestSide::new(&name, &s.bindings).feed(
            &buf,
            &mut scratch,
            &mut std::collections::VecDeque::new(),
        );
        scratch.iter_mut().for_each(|b| *b = 0);
        if let Err(r @ crate::net::subst::Refusal::Leak { .. }) = r {
            let outcome = crate::net::terminate::Outcome::Refused(r);
            let why = crate::net::terminate::log_line(&outcome).unwrap_or_default();
            shared.log.record("refused", "tcp", &name, target[0].port(), &why);
            return refuse(conn, true, &name, target[0].port(), &why);
        }
    }
    let Some(upstream) = target
        .iter()
        .find_map(|a| TcpStream::connect_timeout(&SocketAddr::V4(*a), CONNECT_TIMEOUT).ok())
    else {
        shared
            .log
            .record("failed", "tcp", &name, target[0].port(), "cannot connect");
        return refuse(conn, http, &name, target[0].port(), "cannot connect");
    };
    let mut conn = conn;
    let _ = conn.set_read_timeout(None);
    let _ = conn.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let mut upstream = upstream;
    let first: &[u8] = match sniffed {
        Sniffed::Connect { header_len, .. } => {
            if conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").is_err() {
                return;
            }
            &buf[header_len.min(buf.len())..]
        }
        _ => &buf,
    };
    // Issue 31: a name with a secret bound, and any plain HTTP while
    // secrets exist (a sentinel sent there is a leak), go through the swap.
    if let Some(tls) = crate::net::terminate::wants(shared.secrets.as_ref(), &name, &sniffed) {
        let port = target[0].port();
        let secrets = shared.secrets.as_ref().expect("wants() saw secrets");
        let outcome = crate::net::terminate::serve(conn, first.to_vec(), upstream, &name, tls, secrets);
        if let Some(why) = crate::net::terminate::log_line(&outcome) {
            shared.log.record("refused", "tcp", &name, port, &why);
        }
        return;
    }
    if upstream.write_all(first).is_err() {
        return;
    }
    match pick_handler(&name) {
        Handler::Relay => relay(conn, upstream),
    }
}

/// Reads until [`sniff`] decides, within [`SNIFF_TIMEOUT`].
fn read_name(mut conn: &TcpStream, buf: &mut Vec<u8>) -> Sniffed {
    let deadline = Instant::now() + SNIFF_TIMEOUT;
    let mut chunk = [0u8; 4096];
    loop {
        let s = sniff(buf);
        if s != Sniffed::NeedMore {
            return s;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || buf.len() >= SNIFF_MAX {
            return Sniffed::Other;
        }
        let _ = conn.set_read_timeout(Some(left));
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return Sniffed::Other,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn refuse(mut conn: TcpStream, http: bool, what: &str, port: u16, why: &str) {
    if http {
        let body = format!("lazaret: egress to {what}:{port} refused ({why})\n");
        let _ = write!(
            conn,
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.shutdown(Shutdown::Write);
        return;
    }
    reset(conn);
}

fn relay(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let back = std::thread::Builder::new()
        .name("lz-gate-relay".into())
        .spawn(move || pump(&b2, &a2));
    pump(&a, &b);
    if let Ok(t) = back {
        let _ = t.join();
    }
}

/// Moves bytes `from` → `to` through a pipe with splice until EOF; then
/// half-closes `to`. On an error both connections are shut.
fn pump(from: &TcpStream, to: &TcpStream) {
    let ok = (|| -> io::Result<()> {
        let (r, w) = sys::pipe()?;
        let _ = sys::sock::set_pipe_size(&w, 1 << 20);
        loop {
            let n = sys::sock::splice(from, &w, 1 << 20)?;
            if n == 0 {
                return Ok(());
            }
            let mut left = n;
            while left > 0 {
                let m = sys::sock::splice(&r, to, left)?;
                if m == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                left -= m;
            }
        }
    })();
    match ok {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
}

// ---- names to addresses ---------------------------------------------------------

/// The name's addresses: from the cache (filled when the sandbox resolved
/// it through the gate), else asked upstream now.
fn resolve(shared: &Shared, name: &str) -> Vec<Ipv4Addr> {
    if let Ok(n) = shared.names.lock() {
        if let Some((a, until)) = n.cache.get(name) {
            if *until > Instant::now() {
                return a.clone();
            }
        }
    }
    let (addrs, ttl) = query_upstream(&shared.gate.upstream, name).unwrap_or_default();
    if let Ok(mut n) = shared.names.lock() {
        let ttl = Duration::from_secs(ttl.clamp(5, 300) as u64);
        n.cache.insert(name.to_string(), (addrs.clone(), Instant::now() + ttl));
    }
    addrs
}

/// A DNS query for `name` (type `qtype`), as bytes.
fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
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
fn query_upstream(upstream: &[Ipv4Addr], name: &str) -> Option<(Vec<Ipv4Addr>, u32)> {
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

// ---- the sandbox's resolver -----------------------------------------------------

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

fn serve_dns(shared: &Shared, sock: &UdpSocket) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if from.ip() != IpAddr::V4(netpolicy::SANDBOX_ADDR) {
            continue;
        }
        let q = &buf[..n];
        let Some(question) = parse_question(q) else { continue };
        let name = question.name.clone();
        let listed = shared.gate.log_only || shared.gate.hosts.iter().any(|h| h.matches_name(&name));
        let valid = name
            .parse::<HostPattern>()
            .is_ok_and(|p| !p.wildcard && p.port.is_none());
        let reply = if !listed || !valid {
            // The readiness probe's own query (bin/probe.rs) is no egress.
            if name != PROBE_NAME {
                shared.log.record("refused", "dns", &name, 53, "not in network.hosts");
            }
            dns_answer(q, &question, 5, None)
        } else if question.qtype != 1 {
            // AAAA and the rest: no data (IPv6 is off; nothing else is needed).
            dns_answer(q, &question, 0, None)
        } else {
            let addrs = resolve(shared, &name);
            if addrs.is_empty() {
                dns_answer(q, &question, 3, None)
            } else {
                if shared.gate.log_only {
                    shared.log.record("allowed", "dns", &name, 53, "log mode");
                }
                let syn = shared.names.lock().ok().and_then(|mut n| n.synthetic(&name));
                match syn {
                    Some(a) => dns_answer(q, &question, 0, Some(a)),
                    None => dns_answer(q, &question, 2, None),
                }
            }
        };
        let _ = sock.send_to(&reply, from);
    }
}

// ---- what the router's kernel refuses ------------------------------------------

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

fn watch_refusals(shared: &Shared, tcp: &OwnedFd, udp: &OwnedFd) {
    let gate_ports = ports(&shared.gate);
    let mut buf = [0u8; 128];
    loop {
        let mut fds = [sys::PollFd::new(tcp, sys::POLLIN), sys::PollFd::new(udp, sys::POLLIN)];
        if sys::poll(&mut fds, -1).is_err() {
            continue;
        }
        for (i, fd) in [tcp, udp].into_iter().enumerate() {
            if !fds[i].readable() {
                continue;
            }
            let Ok(n) = sys::read(fd, &mut buf) else { continue };
            let Some((dst, port)) = packet_dst(&buf[..n]) else {
                continue;
            };
            let what = if is_synthetic(dst) {
                let name = shared.names.lock().ok().and_then(|n| n.by_addr.get(&dst).cloned());
                name.unwrap_or_else(|| dst.to_string())
            } else {
                dst.to_string()
            };
            // Log mode: the catch-all serves every other port of what the
            // policy would forward (`net::install::catch_all_rules`); the
            // rest is a denied address, refused by the router's kernel.
            let caught =
                is_synthetic(dst) || (!forwarded_range(&shared.gate, dst) && shared.plan.gate_may_connect(dst));
            if i == 0 && !gate_ports.contains(&port) && shared.gate.log_only {
                if !caught {
                    shared.log.record("refused", "tcp", &what, port, "a denied address");
                }
            } else if i == 0 && !gate_ports.contains(&port) {
                shared
                    .log
                    .record("refused", "tcp", &what, port, "port not served by the gate");
            } else if i == 1 && !(dst == netpolicy::GATE_ADDR && port == 53) {
                shared.log.record("refused", "udp", &what, port, "UDP is closed");
            }
        }
    }
}

// ---- the log --------------------------------------------------------------------

/// Appends one line per event: `UNIX_MS\tACTION\tPROTO\tWHAT\tPORT\tWHY`.
/// WHAT came from the sandbox: anything outside `[A-Za-z0-9._:*-]` is `?`.
/// Bounded by [`LOG_MAX`].
struct EgressLog {
    file: Mutex<Option<(std::fs::File, u64)>>,
}

impl EgressLog {
    fn open(path: PathBuf) -> EgressLog {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        if let Err(e) = &f {
            log::warn!("egress gate: cannot open {}: {e}", path.display());
        }
        let size = f.as_ref().ok().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        EgressLog {
            file: Mutex::new(f.ok().map(|f| (f, size))),
        }
    }

    fn record(&self, action: &str, proto: &str, what: &str, port: u16, why: &str) {
        let clean: String = what
            .chars()
            .take(253)
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._:*-".contains(c) {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let line = format!("{ms}\t{action}\t{proto}\t{clean}\t{port}\t{why}\n");
        if let Ok(mut g) = self.file.lock() {
            if let Some((f, size)) = g.as_mut() {
                if *size + line.len() as u64 <= LOG_MAX && f.write_all(line.as_bytes()).is_ok() {
                    *size += line.len() as u64;
                }
            }
        }
    }
}

/// One line of the log, parsed (`lazaret net log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub ms: u128,
    pub action: String,
    pub proto: String,
    pub what: String,
    pub port: u16,
    pub why: String,
}

pub fn parse_log(text: &str) -> Vec<LogEntry> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() != 6 {
                return None;
            }
            Some(LogEntry {
                ms: f[0].parse().ok()?,
                action: f[1].to_string(),
                proto: f[2].to_string(),
                what: f[3].to_string(),
                port: f[4].parse().ok()?,
                why: f[5].to_string(),
            })
        })
        .collect()
}

/// Aggregated: one row per (action, proto, what, port) with its count and
/// last time, newest first.
pub fn summarize(entries: &[LogEntry]) -> Vec<(LogEntry, u64)> {
    let mut rows: Vec<(LogEntry, u64)> = Vec::new();
    for e in entries {
        match rows
            .iter_mut()
            .find(|(r, _)| r.action == e.action && r.proto == e.proto && r.what == e.what && r.port == e.port)
        {
            Some((r, n)) => {
                *n += 1;
                if e.ms >= r.ms {
                    *r = e.clone();
                }
            }
            None => rows.push((e.clone(), 1)),
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0.ms));
    rows
}

/// The `hosts` line that would allow the refused names of `rows`.
pub fn suggestion(current: &[HostPattern], rows: &[(LogEntry, u64)]) -> Option<String> {
    let refused: Vec<(String, u16)> = rows
        .iter()
        .filter(|(e, _)| e.action == "refused" && e.what.parse::<HostPattern>().is_ok())
        .map(|(e, _)| (e.what.clone(), if e.proto == "dns" { 443 } else { e.port }))
        .collect();
    (!refused.is_empty()).then(|| hosts::suggest(current, &refused))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(hosts: &[&str], log_only: bool) -> GatePlan {
        GatePlan {
            log_only,
            hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
            upstream: vec![],
            forwarded: vec![],
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
}
