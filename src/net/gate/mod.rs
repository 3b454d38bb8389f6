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
//! Other names are refused (`REFUSED`), nothing is forwarded. Every name
//! is a [`HostName`] (docs/network.md, "Names"); the gate asks upstream
//! only for a name the list allows: an exact name at lookup time, a name
//! under a `*.` pattern only when a connection names it ("Names under a
//! wildcard").
//!
//! Blocking sockets, one thread per connection (two while relaying),
//! bounded by [`MAX_CONNECTIONS`]; no async runtime.
//!
//! This file runs the gate's threads (listeners, per-connection handling
//! and relay, the resolver, the refusal watcher). `relay`: the plain
//! relay and the idle timeout of every relay. The pure parts: `name`
//! (sniffing and deciding by name, synthetic addresses), `dns` (DNS
//! messages and the upstream query), `filter` (the raw-socket filters for
//! what the router refuses), `egress_log` (the egress log), `cursor` (a byte
//! reader for the parsers).

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::hosts::{self, HostName};
use crate::net::policy::{self as netpolicy, GatePlan, Plan};
use crate::sys;

mod cursor;
mod dns;
mod egress_log;
mod filter;
mod name;
mod relay;
#[cfg(test)]
mod tests;

pub use self::dns::*;
pub use self::egress_log::*;
pub use self::filter::*;
pub use self::name::*;
use self::relay::relay;

pub const MAX_CONNECTIONS: usize = 1024;
const SNIFF_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The name the readiness probe queries (`bin/probe.rs`): refused, not logged.
const PROBE_NAME: &str = "lazaret-probe.invalid";
/// Ports on which the gate reads the name the client sends.
const NAMED_PORTS: [u16; 3] = [80, 443, netpolicy::PROXY_PORT];

/// The running gate; [`Handle::ended`] once any of its threads that must
/// run (listeners, resolver) stopped: a failed generation.
pub struct Handle {
    ended: Arc<AtomicBool>,
    catch_all: Option<u16>,
    shared: Arc<Shared>,
}

/// How long [`ChecksEnd::end_checks`] waits for the refusal watcher to log
/// the packets the checks left queued.
const END_CHECKS_WAIT: Duration = Duration::from_secs(1);
/// How often the refusal watcher looks whether the checks' end was asked
/// for while they run.
const CHECKS_POLL_MS: i32 = 20;

impl Handle {
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Log mode: the port of the catch-all listener (on [`netpolicy::GATE_ADDR`]),
    /// where the router's `tproxy` rule must send every other TCP port.
    pub fn catch_all(&self) -> Option<u16> {
        self.catch_all
    }

    /// What ends the start-up checks' phase of the log ([`ChecksEnd`]).
    pub fn checks_end(&self) -> ChecksEnd {
        ChecksEnd {
            shared: self.shared.clone(),
        }
    }
}

/// Ends the phase in which the egress log's lines are the Domain's own
/// start-up checks ([`Origin::Check`]).
pub struct ChecksEnd {
    shared: Arc<Shared>,
}

impl ChecksEnd {
    /// The sandbox's init reported its start-up checks (the readiness
    /// probe) done: from now on the log's lines are the sandbox's own
    /// traffic ([`Origin::Sandbox`]); until now they were the Domain's
    /// checks ([`Origin::Check`]). The probe's refused packets may still
    /// wait in the refusal watcher's queue: it ends the phase itself once
    /// that is empty, within [`END_CHECKS_WAIT`] (then it is ended here).
    pub fn end_checks(&self) {
        let log = &self.shared.log;
        log.request_end();
        let deadline = Instant::now() + END_CHECKS_WAIT;
        while log.checking() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        log.end_checks();
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
    /// Stand-alone (`lazaret gate`, a pod's sidecar): connections arrive
    /// by netfilter `REDIRECT` (their destination is `SO_ORIGINAL_DST`)
    /// from any process of the pod, not from the router link.
    sidecar: bool,
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
        sidecar: false,
    });
    // The sandbox boots after the gate: its first traffic is the Domain's
    // start-up checks, until `Handle::end_checks`.
    shared.log.begin_checks();
    let kept = shared.clone();
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
    Ok(Handle {
        ended,
        catch_all,
        shared: kept,
    })
}

/// Starts the gate stand-alone in the current network namespace (`lazaret
/// gate`, the sidecar of a Kubernetes pod): one listener on `listen` that
/// the pod's redirected TCP connections reach, the resolver on `dns`
/// (the pod's redirected queries), no raw watchers (the gate holds no
/// capability there). Returns once both are bound; the threads run for
/// the process's life.
pub fn start_sidecar(
    plan: &Plan,
    listen: SocketAddrV4,
    dns: SocketAddrV4,
    log: PathBuf,
    secrets: Option<crate::net::terminate::Secrets>,
) -> io::Result<Handle> {
    let gate = plan
        .gate
        .clone()
        .ok_or_else(|| io::Error::other("no gate in the plan"))?;
    let ended = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        gate,
        names: Mutex::new(Names::default()),
        log: EgressLog::open(log),
        conns: AtomicUsize::new(0),
        secrets,
        sidecar: true,
    });
    let l = TcpListener::bind(listen)
        .map_err(|e| io::Error::new(e.kind(), format!("egress gate: listening on {listen}: {e}")))?;
    let d =
        UdpSocket::bind(dns).map_err(|e| io::Error::new(e.kind(), format!("egress gate: resolver on {dns}: {e}")))?;
    let (s2, f2) = (shared.clone(), ended.clone());
    std::thread::Builder::new().name("lz-gate-dns".into()).spawn(move || {
        let _guard = EndGuard(f2);
        serve_dns(&s2, &d);
    })?;
    let (s1, f1) = (shared.clone(), ended.clone());
    std::thread::Builder::new().name("lz-gate".into()).spawn(move || {
        let _guard = EndGuard(f1);
        accept_loop(&s1, &[l], false);
    })?;
    Ok(Handle {
        ended,
        catch_all: None,
        shared,
    })
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
            // Only the sandbox's end of the link talks to the gate (a
            // sidecar's listener is on loopback: the pod's own processes).
            if !shared.sidecar && peer.ip() != IpAddr::V4(netpolicy::SANDBOX_ADDR) {
                continue;
            }
            if shared.conns.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                shared.conns.fetch_sub(1, Ordering::SeqCst);
                reset(conn);
                continue;
            }
            let s = shared.clone();
            let r = std::thread::Builder::new().name("lz-gate-conn".into()).spawn(move || {
                crate::net::idle::set_idle(Duration::from_secs(s.gate.idle_timeout_s.into()));
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

/// What to do with an allowed connection: the seam for other handlers
/// (issue 31: TLS termination for named hosts).
enum Handler {
    Relay,
}

/// Where an allowed connection goes: a name, or (log mode) an address;
/// read as the `str` it is.
enum Dest {
    Name(HostName),
    Addr(String),
}

impl std::ops::Deref for Dest {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Dest::Name(n) => n,
            Dest::Addr(a) => a,
        }
    }
}

fn pick_handler(_name: &str) -> Handler {
    Handler::Relay
}

fn handle(shared: &Shared, conn: TcpStream) {
    let dst = if shared.sidecar {
        match sys::sock::original_dst(&conn) {
            Ok(d) => d,
            Err(_) => return reset(conn),
        }
    } else {
        let Ok(SocketAddr::V4(dst)) = conn.local_addr() else {
            return;
        };
        dst
    };
    let synthetic: Option<HostName> = is_synthetic(*dst.ip())
        .then(|| shared.names.lock().ok()?.by_addr.get(dst.ip()).cloned())
        .flatten();
    let mut buf = Vec::new();
    let sniffed = if NAMED_PORTS.contains(&dst.port()) {
        read_name(&conn, &mut buf)
    } else {
        Sniffed::Other
    };
    let verdict = decide(&shared.gate, dst, synthetic.as_ref(), &sniffed);
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
            (Dest::Addr(a.ip().to_string()), vec![a])
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
            (Dest::Name(name), ok)
        }
    };
    // Issue 31: a plain HTTP head the swap would refuse is refused before
    // the gate connects, so that the host sees nothing at all: a sentinel
    // towards a host its secret is not bound to (a leak), a bound secret's
    // sentinel where it would be swapped (a downgrade: its value goes only
    // over TLS the gate verifies), a head it cannot frame. The swap
    // refuses the rest (later requests, bodies) later.
    let plain = plain_http(&sniffed, dst.port(), &buf);
    if let (Some(s), true) = (shared.secrets.as_ref(), plain) {
        let mut scratch = Vec::new();
        let r = crate::net::subst::RequestSide::new(&name, &s.bindings, crate::net::subst::Upstream::Plain).feed(
            &buf,
            &mut scratch,
            &mut std::collections::VecDeque::new(),
        );
        scratch.iter_mut().for_each(|b| *b = 0);
        if let Err(r) = r {
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
    if let Some(tls) = wants(shared.secrets.as_ref(), &name, &sniffed, plain) {
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

/// Whether the gate hands this connection to
/// [`crate::net::terminate::serve`], and with TLS termination
/// (`Some(true)`) or as plain HTTP (`Some(false)`): a TLS or CONNECT
/// connection to a bound name (a tunnel whose first byte is no TLS record
/// is served as plain HTTP there, never with a real value unless its
/// secret has `plain_http`), or any plain HTTP request while the gate
/// holds secrets (`plain`, [`plain_http`]: a sentinel in it towards an
/// unbound host is a leak, a bound one where it would be swapped a
/// downgrade). Everything else is relayed untouched.
fn wants(s: Option<&crate::net::terminate::Secrets>, name: &str, sniffed: &Sniffed, plain: bool) -> Option<bool> {
    let s = s?;
    match sniffed {
        Sniffed::Tls(_) | Sniffed::Connect { .. } if s.bound(name) => Some(true),
        _ if plain => Some(false),
        _ => None,
    }
}

/// Whether a connection is plain HTTP to the swap: a head [`sniff`] read,
/// or, on a port the gate reads names on, bytes it could not read as one
/// that a server may still take for a request (a head that is not UTF-8,
/// lines ending in a bare LF, an unknown or lower-case method, two spaces
/// in the request line, empty lines before it, an HTTP/0.9 `GET /`), and
/// a client that paused before its first line was complete, or before
/// its first byte, longer than the sniff waits (the rest would follow
/// unread): the swap frames them strictly and refuses what it cannot, so
/// a sentinel in them is never relayed unseen. Bytes that look like no
/// request (a TLS record, an SSH banner) are not HTTP.
pub(super) fn plain_http(sniffed: &Sniffed, port: u16, buf: &[u8]) -> bool {
    match sniffed {
        Sniffed::Http { .. } => true,
        Sniffed::Other if NAMED_PORTS.contains(&port) => looks_like_http(buf),
        _ => false,
    }
}

/// Nothing yet; a first line (after empty ones) not complete yet that is
/// text; one that mentions `HTTP/`, or starts like a request: a token, one
/// or more spaces, and `/`, `*` or a URL.
fn looks_like_http(buf: &[u8]) -> bool {
    let start = buf.iter().position(|b| !b"\r\n".contains(b)).unwrap_or(buf.len());
    let rest = &buf[start..];
    if rest.first() == Some(&0x16) {
        return false;
    }
    let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
        return rest.iter().all(|c| c.is_ascii_graphic() || b" \t\r".contains(c));
    };
    let line = &rest[..nl];
    if line.windows(5).any(|w| w.eq_ignore_ascii_case(b"HTTP/")) {
        return true;
    }
    let token = line
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(c))
        .count();
    let after = &line[token..];
    let target = after.trim_ascii_start();
    token > 0
        && target.len() < after.len()
        && (target.starts_with(b"/") || target.starts_with(b"*") || target.windows(3).any(|w| w == b"://"))
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
        // One write: a client that reads once gets the whole refusal.
        let whole = format!(
            "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(whole.as_bytes());
        let _ = conn.shutdown(Shutdown::Write);
        return;
    }
    reset(conn);
}

// ---- names to addresses ---------------------------------------------------------

/// The name's addresses: from the cache (filled when the gate resolved it
/// before), else asked upstream now. Called only for a name the list
/// allows (or any name in log mode): nothing else is asked upstream.
fn resolve(shared: &Shared, name: &HostName) -> Vec<Ipv4Addr> {
    if let Ok(n) = shared.names.lock() {
        if let Some(a) = n.cache.get(name, Instant::now()) {
            return a;
        }
    }
    let (addrs, ttl) = query_upstream(&shared.gate.upstream, name).unwrap_or_default();
    if let Ok(mut n) = shared.names.lock() {
        n.cache.put(name, addrs.clone(), ttl, Instant::now());
    }
    addrs
}

/// What the resolver answers a question for `name` (type A, class IN).
#[derive(Debug, PartialEq, Eq)]
enum Lookup {
    /// Not listed: `REFUSED`, nothing asked upstream.
    Refused,
    /// Listed by a `*.` pattern only: a synthetic address without asking
    /// upstream (asked when a connection names it).
    Synthetic,
    /// An exact name (every name in log mode): resolved upstream now,
    /// then its synthetic address (`NXDOMAIN` without addresses).
    Resolve,
}

fn lookup(gate: &GatePlan, name: &HostName) -> Lookup {
    if gate.log_only || gate.hosts.iter().any(|h| !h.wildcard && h.matches_name(name)) {
        Lookup::Resolve
    } else if hosts::only_by_wildcard(&gate.hosts, name) {
        Lookup::Synthetic
    } else {
        Lookup::Refused
    }
}

fn serve_dns(shared: &Shared, sock: &UdpSocket) {
    let mut buf = [0u8; 1500];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        if !shared.sidecar && from.ip() != IpAddr::V4(netpolicy::SANDBOX_ADDR) {
            continue;
        }
        let q = &buf[..n];
        let Some(question) = parse_question(q) else {
            if let Some(r) = dns_formerr(q) {
                let _ = sock.send_to(&r, from);
            }
            continue;
        };
        let name = match &question.name {
            Ok(n) => n,
            Err(u) => {
                shared.log.record("refused", "dns", &u.shown, 53, u.err.reason());
                let _ = sock.send_to(&dns_answer(q, &question, RCODE_REFUSED, None), from);
                continue;
            }
        };
        let how = lookup(&shared.gate, name);
        let reply = if how == Lookup::Refused || question.qclass != 1 {
            // The readiness probe's own query (bin/probe.rs) is no egress.
            if *name != PROBE_NAME {
                shared.log.record("refused", "dns", name, 53, "not in network.hosts");
            }
            dns_answer(q, &question, RCODE_REFUSED, None)
        } else if question.qtype != TYPE_A {
            // AAAA and the rest: no data (IPv6 is off; nothing else is needed).
            dns_answer(q, &question, 0, None)
        } else {
            let found = how == Lookup::Synthetic || !resolve(shared, name).is_empty();
            if !found {
                dns_answer(q, &question, RCODE_NXDOMAIN, None)
            } else {
                if shared.gate.log_only {
                    shared.log.record("allowed", "dns", name, 53, "log mode");
                }
                let syn = shared.names.lock().ok().and_then(|mut n| n.synthetic(name));
                match syn {
                    Some(a) => dns_answer(q, &question, 0, Some(a)),
                    None => dns_answer(q, &question, RCODE_SERVFAIL, None),
                }
            }
        };
        let _ = sock.send_to(&reply, from);
    }
}

fn watch_refusals(shared: &Shared, tcp: &OwnedFd, udp: &OwnedFd) {
    let gate_ports = ports(&shared.gate);
    let mut buf = [0u8; 128];
    loop {
        let mut fds = [sys::PollFd::new(tcp, sys::POLLIN), sys::PollFd::new(udp, sys::POLLIN)];
        // While the start-up checks run, wake now and then to see whether
        // their end was asked for.
        let checking = shared.log.checking();
        let wait = if !checking {
            -1
        } else if shared.log.ending() {
            0
        } else {
            CHECKS_POLL_MS
        };
        if sys::poll(&mut fds, wait).is_err() {
            continue;
        }
        if checking && shared.log.ending() && !fds.iter().any(|f| f.readable()) {
            // Every packet of the checks is logged: the rest is the sandbox's.
            shared.log.end_checks();
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
                name.map_or_else(|| dst.to_string(), |n| n.to_string())
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
