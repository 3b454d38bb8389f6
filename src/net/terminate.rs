//! The egress gate's handler for a name with a secret bound (issue 31):
//! terminate the sandbox's TLS with the Domain leaf for that name (or take
//! its plain HTTP as it is), open a verified TLS connection (or plain TCP)
//! upstream, and relay both ways through the swap engine (`net::subst`).
//! A real value goes only into the verified TLS connection
//! ([`Upstream::Verified`]); plain HTTP (also inside a `CONNECT` tunnel)
//! carries one only for a secret with `plain_http = true`, else the
//! request is refused as a downgrade.
//!
//! One thread per connection, blocking sockets and `poll`: a side is read
//! only when its socket is readable or its TLS layer holds decrypted bytes.
//! An upstream that fails verification gets nothing: the sandbox receives
//! a 502 with a one-line reason. A leak attempt gets a 403 and is logged by
//! the caller.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use openssl::ssl::{SslAcceptor, SslConnector, SslStream};

use crate::net::subst::{Binding, Refusal, RequestSide, ResponseSide, Upstream};
use crate::net::tls;
use crate::sys;

/// What the gate holds for the generation's secrets: the bindings and the
/// TLS ends, built once.
pub struct Secrets {
    pub bindings: Arc<Vec<Binding>>,
    /// Name -> acceptor with that name's leaf.
    pub acceptors: Vec<(String, SslAcceptor)>,
    pub connector: SslConnector,
}

impl Secrets {
    /// The gate's side of a generation's secrets: a leaf per bound name
    /// from `anchor` (valid [`tls::LEAF_HOURS`]), and the upstream connector
    /// (system roots, or `upstream_ca`).
    pub fn build(
        bindings: Vec<Binding>,
        anchor: &crate::trust::TrustAnchor,
        upstream_ca: Option<&std::path::Path>,
    ) -> Result<Secrets, crate::trust::TrustError> {
        let ca = anchor.ca_cert_pem()?;
        let mut names: Vec<String> = bindings.iter().flat_map(|b| b.hosts.iter().cloned()).collect();
        names.sort_unstable();
        names.dedup();
        let mut acceptors = Vec::new();
        for n in names {
            let leaf = anchor.issue_tls_server(&n, tls::LEAF_HOURS)?;
            acceptors.push((n, tls::acceptor(&leaf, &ca)?));
        }
        Ok(Secrets {
            bindings: Arc::new(bindings),
            acceptors,
            connector: tls::connector(upstream_ca)?,
        })
    }

    /// The gate's side as the coordinator hands it over (the lease pipe's
    /// [`LeaseMsg::Secrets`](crate::wire::supervisor::LeaseMsg)): the
    /// leaves come issued, the CA key never reaches the gate. Fails closed:
    /// a bound name without a leaf, a leaf that does not load, or an
    /// upstream CA file that does not load is an error, never a pass-through.
    pub fn from_wire(g: crate::wire::supervisor::GateSecrets) -> Result<Secrets, crate::trust::TrustError> {
        use crate::trust::{Credential, TrustError};
        let mut acceptors = Vec::new();
        for l in &g.leaves {
            let cred = Credential {
                key: openssl::pkey::PKey::private_key_from_pem(&l.key_pem)?,
                cert: openssl::x509::X509::from_pem(&l.cert_pem)?,
            };
            acceptors.push((l.host.clone(), tls::acceptor(&cred, &g.ca_pem)?));
        }
        let bindings: Vec<Binding> = g
            .bindings
            .iter()
            .map(|b| Binding {
                var: b.var.clone(),
                sentinel: b.sentinel.clone(),
                real: b.real.clone(),
                hosts: b.hosts.clone(),
                headers: b.headers.iter().map(|h| h.to_ascii_lowercase()).collect(),
                plain_http: b.plain_http,
            })
            .collect();
        for b in &bindings {
            if let Some(h) = b.hosts.iter().find(|h| !acceptors.iter().any(|(n, _)| n == *h)) {
                let _ = h;
                return Err(TrustError::MalformedCredential("a bound host without a TLS leaf"));
            }
        }
        let upstream = g.upstream_ca.as_deref().map(std::path::Path::new);
        Ok(Secrets {
            bindings: Arc::new(bindings),
            acceptors,
            connector: tls::connector(upstream)?,
        })
    }

    /// Whether the gate terminates connections to `name`: a secret is bound
    /// to it.
    pub fn bound(&self, name: &str) -> bool {
        self.bindings
            .iter()
            .any(|b| b.hosts.iter().any(|h| h.eq_ignore_ascii_case(name)))
    }

    fn acceptor(&self, name: &str) -> Option<&SslAcceptor> {
        self.acceptors
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, a)| a)
    }
}

/// The reason the gate logs for an outcome, if it was a refusal.
pub fn log_line(o: &Outcome) -> Option<String> {
    match o {
        Outcome::Refused(Refusal::Leak { var, .. }) => Some(format!("leak attempt: the sentinel of {var}")),
        Outcome::Refused(Refusal::Downgrade { var, .. }) => Some(format!(
            "downgrade: the sentinel of {var} in plain HTTP (its value goes only over TLS the gate verifies)"
        )),
        Outcome::Refused(r) => Some(r.to_string()),
        Outcome::Upstream(why) => Some(format!("upstream TLS: {why}")),
        Outcome::Done | Outcome::Handshake | Outcome::Io => None,
    }
}

/// How a terminated connection ended, for the gate's log.
#[derive(Debug)]
pub enum Outcome {
    /// Relayed until one side closed.
    Done,
    /// A request was refused (a leak attempt or a head the gate cannot frame).
    Refused(Refusal),
    /// The upstream failed TLS verification or the handshake: nothing sent.
    Upstream(String),
    /// The sandbox's handshake failed.
    Handshake,
    Io,
}

/// The sandbox's stream with the bytes the gate already read to learn the
/// name put back in front.
pub struct Prefixed {
    pre: Vec<u8>,
    pos: usize,
    inner: TcpStream,
}

impl Prefixed {
    pub fn new(pre: Vec<u8>, inner: TcpStream) -> Prefixed {
        Prefixed { pre, pos: 0, inner }
    }
}

impl Read for Prefixed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.pre.len() {
            let n = buf.len().min(self.pre.len() - self.pos);
            buf[..n].copy_from_slice(&self.pre[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

impl Write for Prefixed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// One end of the relay.
trait End: Read + Write {
    fn fd(&self) -> BorrowedFd<'_>;
    /// Bytes readable without waiting for the socket.
    fn buffered(&self) -> bool;
    fn close_write(&mut self);
    fn set_nonblocking(&self, on: bool);
}

/// One read that never waits: a readable TLS socket may hold only a
/// record that is no data (a session ticket, a key update), and a blocking
/// read would then wait for the peer while the other side's bytes sit
/// unread (a peer that waits for them: a deadlock). `Ok(None)`: nothing now.
fn read_now<E: End>(e: &mut E, buf: &mut [u8]) -> io::Result<Option<usize>> {
    e.set_nonblocking(true);
    let r = e.read(buf);
    e.set_nonblocking(false);
    match r {
        Ok(n) => Ok(Some(n)),
        Err(x) if x.kind() == io::ErrorKind::WouldBlock || x.kind() == io::ErrorKind::Interrupted => Ok(None),
        Err(x) => Err(x),
    }
}

impl End for Prefixed {
    fn fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
    fn buffered(&self) -> bool {
        self.pos < self.pre.len()
    }
    fn close_write(&mut self) {
        let _ = self.inner.shutdown(Shutdown::Write);
    }
    fn set_nonblocking(&self, on: bool) {
        let _ = self.inner.set_nonblocking(on);
    }
}

impl End for TcpStream {
    fn fd(&self) -> BorrowedFd<'_> {
        self.as_fd()
    }
    fn buffered(&self) -> bool {
        false
    }
    fn close_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
    fn set_nonblocking(&self, on: bool) {
        let _ = TcpStream::set_nonblocking(self, on);
    }
}

impl<S: End> End for SslStream<S> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.get_ref().fd()
    }
    fn buffered(&self) -> bool {
        self.ssl().pending() > 0 || self.get_ref().buffered()
    }
    fn close_write(&mut self) {
        let _ = self.shutdown();
        self.get_mut().close_write();
    }
    fn set_nonblocking(&self, on: bool) {
        self.get_ref().set_nonblocking(on);
    }
}

/// How long the gate waits for the first byte inside a `CONNECT` tunnel
/// (TLS or plain HTTP, it decides by that byte).
const FIRST_BYTE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves one connection to `name` (bound: [`Secrets::bound`]). `first`:
/// what the gate read from the sandbox to learn the name; `tls`: it was a
/// ClientHello or a `CONNECT` tunnel to a bound name (else plain HTTP);
/// `upstream`: connected to the name's own address, nothing sent yet. A
/// tunnel whose first byte is no TLS record is plain HTTP: relayed as
/// such, never with a real value (unless its secret has `plain_http`).
pub fn serve(conn: TcpStream, first: Vec<u8>, upstream: TcpStream, name: &str, tls: bool, s: &Secrets) -> Outcome {
    let mut first = first;
    if tls && first.is_empty() {
        let _ = conn.set_read_timeout(Some(FIRST_BYTE_TIMEOUT));
        let mut b = [0u8; 4096];
        match (&conn).read(&mut b) {
            Ok(n) if n > 0 => first.extend_from_slice(&b[..n]),
            _ => return Outcome::Io,
        }
    }
    let _ = conn.set_read_timeout(None);
    let tls = tls && first.first() == Some(&0x16);
    let sandbox = Prefixed::new(first, conn);
    if !tls {
        return relay(sandbox, upstream, name, s, Upstream::Plain);
    }
    let Some(acc) = s.acceptor(name) else {
        return Outcome::Handshake;
    };
    let Ok(mut inside) = acc.accept(sandbox) else {
        return Outcome::Handshake;
    };
    // `connect` sets the SNI and checks the certificate names `name`.
    let out = s.connector.configure().map(|mut c| {
        c.set_verify_hostname(true);
        c
    });
    let up = match out {
        Ok(c) => c.connect(name, upstream).map_err(|e| match &e {
            // A certificate problem is named as X.509 names it.
            openssl::ssl::HandshakeError::Failure(m)
                if m.ssl().verify_result() != openssl::x509::X509VerifyResult::OK =>
            {
                format!("certificate verify failed: {}", m.ssl().verify_result().error_string())
            }
            _ => e.to_string(),
        }),
        Err(e) => Err(e.to_string()),
    };
    match up {
        Ok(up) => relay(inside, up, name, s, Upstream::Verified),
        Err(why) => {
            let line = why.lines().next().unwrap_or("TLS handshake failed").to_string();
            let _ = inside.write_all(&tls::bad_gateway(name, &format!("upstream TLS: {line}")));
            inside.close_write();
            Outcome::Upstream(line)
        }
    }
}

fn refused(r: &Refusal) -> Vec<u8> {
    let body = format!("lazaret: {r}\n");
    format!(
        "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn relay<A: End, B: End>(mut a: A, mut b: B, name: &str, s: &Secrets, up: Upstream) -> Outcome {
    let mut req = RequestSide::new(name, &s.bindings, up);
    let mut resp = ResponseSide::new(name, &s.bindings);
    let mut expects = VecDeque::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(64 * 1024);
    let mut a_open = true;
    // The relay ends when upstream closes, so its side stays open.
    let b_open = true;
    loop {
        let (mut ra, mut rb) = (a_open && a.buffered(), b_open && b.buffered());
        if !ra && !rb {
            let mut fds = Vec::new();
            if a_open {
                fds.push((0, sys::PollFd::new(a.fd(), sys::POLLIN)));
            }
            if b_open {
                fds.push((1, sys::PollFd::new(b.fd(), sys::POLLIN)));
            }
            if fds.is_empty() {
                return Outcome::Done;
            }
            let mut p: Vec<sys::PollFd> = fds.into_iter().map(|(_, f)| f).collect();
            // Idle both ways for network.idle_timeout_s: closed.
            match crate::net::idle::poll_idle(&mut p) {
                Err(_) => return Outcome::Io,
                Ok(false) => return Outcome::Done,
                Ok(true) => {}
            }
            let mut k = 0;
            if a_open {
                ra = p[k].readable();
                k += 1;
            }
            if b_open {
                rb = p[k].readable();
            }
        }
        if ra {
            out.clear();
            match read_now(&mut a, &mut buf) {
                Ok(None) => {}
                Ok(Some(0)) | Err(_) => {
                    a_open = false;
                    b.close_write();
                }
                Ok(Some(n)) => {
                    // The `Basic` credentials swapped in are turned back in
                    // responses too (before a byte of them is sent).
                    let fed = req
                        .feed(&buf[..n], &mut out, &mut expects)
                        .and_then(|()| resp.add_encoded(req.take_encoded()));
                    if let Err(r) = fed {
                        let _ = a.write_all(&refused(&r));
                        a.close_write();
                        return Outcome::Refused(r);
                    }
                    if b.write_all(&out).is_err() {
                        return Outcome::Done;
                    }
                }
            }
        }
        if rb {
            out.clear();
            match read_now(&mut b, &mut buf) {
                Ok(None) => {}
                Ok(Some(0)) | Err(_) => {
                    resp.finish(&mut out);
                    let _ = a.write_all(&out);
                    a.close_write();
                    return Outcome::Done;
                }
                Ok(Some(n)) => {
                    if let Err(r) = resp.feed(&buf[..n], &mut out, &mut expects) {
                        // Between responses: this one's answer is a 502
                        // with one line (mid-body, the connection just ends).
                        if let (Refusal::BadResponse(why), false) = (&r, resp.in_body()) {
                            let _ = a.write_all(&tls::bad_gateway(name, why));
                        }
                        a.close_write();
                        return Outcome::Refused(r);
                    }
                    if a.write_all(&out).is_err() {
                        return Outcome::Done;
                    }
                    if resp.closing() {
                        a.close_write();
                        return Outcome::Done;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::secrets::{sentinel, SecretValue};
    use crate::trust::TrustAnchor;
    use std::net::TcpListener;

    const REAL: &str = "sk-ant-real-9f8e7d6c5b4a";

    /// A loopback "upstream" (nothing leaves the machine): TLS with a leaf
    /// for `name` from `ca` when given, else plain; records the request
    /// head and answers what `respond` makes of it.
    fn upstream_with(
        ca: Option<(&TrustAnchor, &str)>,
        respond: fn(&str) -> Vec<u8>,
    ) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let acc =
            ca.map(|(a, n)| tls::acceptor(&a.issue_tls_server(n, 1).unwrap(), &a.ca_cert_pem().unwrap()).unwrap());
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut io: Box<dyn ReadWrite> = match acc {
                Some(acc) => match acc.accept(s) {
                    Ok(t) => Box::new(t),
                    Err(_) => return Vec::new(),
                },
                None => Box::new(s),
            };
            let mut head = Vec::new();
            let mut b = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match io.read(&mut b) {
                    Ok(0) | Err(_) => return head,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let _ = io.write_all(&respond(&String::from_utf8_lossy(&head)));
            head
        });
        (port, t)
    }

    /// The header `name`'s value in a request head.
    fn header<'a>(head: &'a str, name: &str) -> &'a str {
        head.lines()
            .find_map(|l| l.split_once(':').filter(|(n, _)| n.eq_ignore_ascii_case(name)))
            .map_or("", |(_, v)| v.trim())
    }

    /// [`upstream_with`] an answer that echoes the Authorization header in
    /// a header and the body.
    fn upstream(ca: Option<(&TrustAnchor, &str)>) -> (u16, std::thread::JoinHandle<Vec<u8>>) {
        upstream_with(ca, |head| {
            let auth = header(head, "authorization");
            let body = format!("you sent {auth}\n");
            format!(
                "HTTP/1.1 200 OK\r\nX-Echo: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        })
    }

    trait ReadWrite: Read + Write + Send {}
    impl<T: Read + Write + Send> ReadWrite for T {}

    fn secrets(domain: &TrustAnchor, up_ca: Option<&std::path::Path>, s1: &str) -> Secrets {
        secrets_plain(domain, up_ca, s1, false)
    }

    fn secrets_plain(domain: &TrustAnchor, up_ca: Option<&std::path::Path>, s1: &str, plain_http: bool) -> Secrets {
        let bindings = vec![Binding {
            var: "ANTHROPIC_API_KEY".into(),
            sentinel: s1.into(),
            real: SecretValue::new(REAL.into()).unwrap(),
            hosts: vec!["api.test".into()],
            headers: crate::config::secrets::DEFAULT_HEADERS
                .iter()
                .map(|h| h.to_string())
                .collect(),
            plain_http,
        }];
        Secrets::build(bindings, domain, up_ca).unwrap()
    }

    /// Runs the gate's handler for one connection on loopback; returns
    /// what the client received and what upstream recorded.
    fn through_gate(
        s: Secrets,
        name: &'static str,
        tls_mode: bool,
        up_port: u16,
        client_ca: Option<Vec<u8>>,
        request: String,
    ) -> (Vec<u8>, Outcome) {
        let gl = TcpListener::bind("127.0.0.1:0").unwrap();
        let gport = gl.local_addr().unwrap().port();
        let gate = std::thread::spawn(move || {
            let (c, _) = gl.accept().unwrap();
            // The gate's sniff: the first bytes the client sent.
            let mut first = vec![0u8; 16 * 1024];
            let n = (&c).read(&mut first).unwrap();
            first.truncate(n);
            let up = TcpStream::connect(("127.0.0.1", up_port)).unwrap();
            serve(c, first, up, name, tls_mode, &s)
        });
        let tcp = TcpStream::connect(("127.0.0.1", gport)).unwrap();
        let mut got = Vec::new();
        match client_ca {
            Some(ca) => {
                let mut b = SslConnector::builder(openssl::ssl::SslMethod::tls_client()).unwrap();
                b.cert_store_mut()
                    .add_cert(openssl::x509::X509::from_pem(&ca).unwrap())
                    .unwrap();
                b.set_alpn_protos(b"\x02h2\x08http/1.1").unwrap();
                let mut t = b.build().connect(name, tcp).unwrap();
                assert_eq!(t.ssl().selected_alpn_protocol(), Some(&b"http/1.1"[..]));
                t.write_all(request.as_bytes()).unwrap();
                let _ = t.read_to_end(&mut got);
            }
            None => {
                let mut t = tcp;
                t.write_all(request.as_bytes()).unwrap();
                let _ = t.read_to_end(&mut got);
            }
        }
        (got, gate.join().unwrap())
    }

    /// [`through_gate`] with TLS to `api.test`: the gate trusts the
    /// upstream CA in `up_ca`, the client trusts `domain`'s CA.
    fn tls_to_api(
        domain: &TrustAnchor,
        up_ca: &std::path::Path,
        s1: &str,
        up_port: u16,
        request: String,
    ) -> (Vec<u8>, Outcome) {
        let client_ca = Some(domain.ca_cert_pem().unwrap());
        through_gate(
            secrets(domain, Some(up_ca), s1),
            "api.test",
            true,
            up_port,
            client_ca,
            request,
        )
    }

    fn ca_file(a: &TrustAnchor, tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("lz-term-{}-{tag}.pem", std::process::id()));
        std::fs::write(&p, a.ca_cert_pem().unwrap()).unwrap();
        p
    }

    #[test]
    fn https_sentinel_reaches_upstream_as_the_real_value_and_back_as_sentinel() {
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let test_ca = TrustAnchor::new("testca", 1, "p").unwrap();
        let f = ca_file(&test_ca, "https");
        let s1 = sentinel().unwrap();
        let (port, up) = upstream(Some((&test_ca, "api.test")));
        let req = format!("GET /v1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {s1}\r\n\r\n");
        let (got, outcome) = tls_to_api(&domain, &f, &s1, port, req);
        let head = String::from_utf8(up.join().unwrap()).unwrap();
        assert!(head.contains(&format!("Authorization: Bearer {REAL}\r\n")), "{head}");
        assert!(!head.contains(&s1), "{head}");
        let got = String::from_utf8(got).unwrap();
        assert!(!got.contains(REAL), "{got}");
        assert!(
            got.contains(&format!("X-Echo: Bearer {s1}")) && got.contains(&format!("you sent Bearer {s1}")),
            "{got}"
        );
        assert!(matches!(outcome, Outcome::Done), "{outcome:?}");
        std::fs::remove_file(f).unwrap();
    }

    #[test]
    fn upstream_with_the_wrong_ca_or_name_gets_nothing_and_the_sandbox_a_502() {
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let test_ca = TrustAnchor::new("testca", 1, "p").unwrap();
        let stranger = TrustAnchor::new("stranger", 1, "p").unwrap();
        let f = ca_file(&test_ca, "bad");
        let s1 = sentinel().unwrap();
        for (ca, leaf_name) in [(&stranger, "api.test"), (&test_ca, "wrong.test")] {
            let (port, up) = upstream(Some((ca, leaf_name)));
            let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n");
            let (got, outcome) = tls_to_api(&domain, &f, &s1, port, req);
            let got = String::from_utf8(got).unwrap();
            assert!(got.starts_with("HTTP/1.1 502 "), "{got}");
            assert!(matches!(outcome, Outcome::Upstream(_)), "{outcome:?}");
            // The upstream's handshake failed: it never saw a request byte.
            assert!(up.join().unwrap().is_empty());
        }
        std::fs::remove_file(f).unwrap();
    }

    /// The lease pipe's form loads, and fails closed: a bound name
    /// without a leaf, a key that does not parse, a CA file that is not
    /// there.
    #[test]
    fn secrets_from_the_lease_pipe_load_or_refuse() {
        use crate::wire::supervisor::{GateBinding, GateLeaf, GateSecrets};
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let leaf = domain.issue_tls_server("api.test", 1).unwrap();
        let good = GateSecrets {
            bindings: vec![GateBinding {
                var: "K".into(),
                sentinel: sentinel().unwrap(),
                real: SecretValue::new(REAL.into()).unwrap(),
                hosts: vec!["api.test".into()],
                headers: vec!["x-api-key".into()],
                plain_http: false,
            }],
            leaves: vec![GateLeaf {
                host: "api.test".into(),
                cert_pem: leaf.cert.to_pem().unwrap(),
                key_pem: leaf.key.private_key_to_pem_pkcs8().unwrap(),
            }],
            ca_pem: domain.ca_cert_pem().unwrap(),
            upstream_ca: None,
        };
        let s = Secrets::from_wire(good.clone()).unwrap();
        assert!(s.bound("api.test") && !s.bound("other.test"));
        let mut no_leaf = good.clone();
        no_leaf.bindings[0].hosts.push("b.test".into());
        assert!(Secrets::from_wire(no_leaf).is_err());
        let mut bad_key = good.clone();
        bad_key.leaves[0].key_pem = b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec();
        assert!(Secrets::from_wire(bad_key).is_err());
        let mut bad_ca = good;
        bad_ca.upstream_ca = Some("/nonexistent/lazaret-ca.pem".into());
        assert!(Secrets::from_wire(bad_ca).is_err());
    }

    #[test]
    fn plain_http_to_a_bound_host_is_a_downgrade_unless_the_secret_opts_in() {
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let s1 = sentinel().unwrap();
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {s1}\r\n\r\n");
        // Plain HTTP, and plain HTTP inside a tunnel the gate would have
        // terminated (`tls` true, the first byte no TLS record): refused,
        // the impostor upstream gets no byte.
        for tls_mode in [false, true] {
            let (port, up) = upstream(None);
            let (got, outcome) = through_gate(
                secrets(&domain, None, &s1),
                "api.test",
                tls_mode,
                port,
                None,
                req.clone(),
            );
            let got = String::from_utf8(got).unwrap();
            assert!(got.starts_with("HTTP/1.1 403 "), "{got}");
            let body = got.split("\r\n\r\n").nth(1).unwrap();
            assert_eq!(body.lines().count(), 1, "{got}");
            assert!(
                body.contains("ANTHROPIC_API_KEY") && body.contains("downgrade"),
                "{got}"
            );
            assert!(
                matches!(outcome, Outcome::Refused(Refusal::Downgrade { .. })),
                "{outcome:?}"
            );
            assert!(log_line(&outcome).unwrap().starts_with("downgrade: "));
            assert!(up.join().unwrap().is_empty(), "the upstream saw bytes");
        }
        // `plain_http = true`: swapped, and echoed back as the sentinel.
        let (port, up) = upstream(None);
        let (got, _) = through_gate(
            secrets_plain(&domain, None, &s1, true),
            "api.test",
            false,
            port,
            None,
            req,
        );
        let head = String::from_utf8(up.join().unwrap()).unwrap();
        assert!(head.contains(&format!("Bearer {REAL}")), "{head}");
        let got = String::from_utf8(got).unwrap();
        assert!(
            !got.contains(REAL) && got.contains(&format!("you sent Bearer {s1}")),
            "{got}"
        );

        // The sentinel towards other.test (plain HTTP, no secret bound).
        let (port, up) = upstream(None);
        let req = format!("GET / HTTP/1.1\r\nHost: other.test\r\nx-api-key: {s1}\r\n\r\n");
        let (got, outcome) = through_gate(secrets(&domain, None, &s1), "other.test", false, port, None, req);
        let got = String::from_utf8(got).unwrap();
        assert!(
            got.starts_with("HTTP/1.1 403 ") && got.contains("leak attempt"),
            "{got}"
        );
        assert!(matches!(outcome, Outcome::Refused(Refusal::Leak { .. })), "{outcome:?}");
        assert!(up.join().unwrap().is_empty(), "other.test saw bytes");
    }

    /// An upstream that echoes `x-api-key` in a header *name*: the sandbox
    /// sees the sentinel there.
    #[test]
    fn a_value_echoed_in_a_header_name_comes_back_as_the_sentinel() {
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let test_ca = TrustAnchor::new("testca", 1, "p").unwrap();
        let f = ca_file(&test_ca, "name");
        let s1 = sentinel().unwrap();
        let (port, up) = upstream_with(Some((&test_ca, "api.test")), |head| {
            let k = header(head, "x-api-key");
            format!("HTTP/1.1 200 OK\r\nX-{k}: 1\r\n{k}: 2\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .into_bytes()
        });
        let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n");
        let (got, _) = tls_to_api(&domain, &f, &s1, port, req);
        assert!(String::from_utf8(up.join().unwrap()).unwrap().contains(REAL));
        let got = String::from_utf8(got).unwrap();
        assert!(!got.contains(REAL), "{got}");
        assert!(
            got.contains(&format!("X-{s1}: 1\r\n")) && got.contains(&format!("\r\n{s1}: 2\r\n")),
            "{got}"
        );
        std::fs::remove_file(f).unwrap();
    }

    /// An upstream that ignores `Accept-Encoding: identity` and gzips its
    /// echo: the sandbox gets a 502 with one line, never the body.
    #[test]
    fn an_encoding_the_gate_did_not_ask_for_is_a_502() {
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let test_ca = TrustAnchor::new("testca", 1, "p").unwrap();
        let f = ca_file(&test_ca, "gzip");
        let s1 = sentinel().unwrap();
        for ce in ["gzip", "GZip", "identity, gzip", "br"] {
            let (port, up) = upstream_with(Some((&test_ca, "api.test")), |head| {
                // Stands for a compressed echo; the encoding is the point.
                let body = format!("z{}", header(head, "x-api-key"));
                let ce = header(head, "x-ce");
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Encoding: {ce}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .into_bytes()
            });
            let req = format!(
                "GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\nx-ce: {ce}\r\nAccept-Encoding: gzip\r\n\r\n"
            );
            let (got, outcome) = tls_to_api(&domain, &f, &s1, port, req);
            let head = String::from_utf8(up.join().unwrap()).unwrap();
            assert_eq!(header(&head, "accept-encoding"), "identity", "{head}");
            let got = String::from_utf8(got).unwrap();
            assert!(got.starts_with("HTTP/1.1 502 "), "{ce}: {got}");
            let body = got.split("\r\n\r\n").nth(1).unwrap();
            assert_eq!(body.lines().count(), 1, "{got}");
            assert!(body.contains("Content-Encoding") && !got.contains(REAL), "{got}");
            assert!(
                matches!(outcome, Outcome::Refused(Refusal::BadResponse(_))),
                "{outcome:?}"
            );
        }
        std::fs::remove_file(f).unwrap();
    }

    /// Pipelined on one TLS connection: an HTTP/1.0 request without
    /// `Host` after a good one is refused before a byte of it is sent.
    #[test]
    fn a_pipelined_http10_request_without_host_gets_no_value() {
        let domain = TrustAnchor::new("d", 1, "p").unwrap();
        let test_ca = TrustAnchor::new("testca", 1, "p").unwrap();
        let f = ca_file(&test_ca, "http10");
        let s1 = sentinel().unwrap();
        let (port, up) = upstream(Some((&test_ca, "api.test")));
        let req = format!("GET /a HTTP/1.1\r\nHost: api.test\r\n\r\nGET /b HTTP/1.0\r\nx-api-key: {s1}\r\n\r\n");
        let (got, outcome) = tls_to_api(&domain, &f, &s1, port, req);
        let head = String::from_utf8(up.join().unwrap()).unwrap();
        assert!(!head.contains(REAL) && !head.contains("/b"), "{head}");
        assert!(String::from_utf8(got).unwrap().contains("no Host header"));
        assert!(
            matches!(outcome, Outcome::Refused(Refusal::BadRequest(_))),
            "{outcome:?}"
        );
        std::fs::remove_file(f).unwrap();
    }
}
