//! TLS for hosts with a secret bound (issue 31, docs/network.md
//! "Secrets"): the egress gate terminates the sandbox's TLS with a leaf
//! issued by the Domain's Trust Anchor for exactly that name
//! ([`TrustAnchor::issue_tls_server`]), offers only `http/1.1`, and opens
//! its own TLS upstream, verified against the host's system roots (or a
//! configured CA file, for tests) with the name checked. Every other
//! allowed host stays end-to-end TLS, untouched.
//!
//! The guest is to trust the Domain CA through [`guest_bundle`] (the
//! image's bundle plus the CA) bound read-only over the image's bundle
//! path, with `SSL_CERT_FILE`, `NODE_EXTRA_CA_CERTS`, `REQUESTS_CA_BUNDLE`
//! and `GIT_SSL_CAINFO` in every session (`coordinator::secrets`).

use std::path::Path;

use openssl::ssl::{AlpnError, SslAcceptor, SslConnector, SslMethod, SslVerifyMode, SslVersion};

use crate::trust::{Credential, TrustAnchor, TrustError};

/// The only protocol offered on a terminated connection (ALPN wire form).
pub const ALPN_HTTP11: &[u8] = b"\x08http/1.1";
/// How long a leaf for a bound host is valid; the gate issues a new one
/// per generation (and before this runs out).
pub const LEAF_HOURS: u32 = 24;
/// The sandbox-facing TLS server for `host`: `leaf` (issued for it) and
/// the CA that issued it, TLS 1.2 or later, ALPN `http/1.1` or none.
pub fn acceptor(leaf: &Credential, ca_pem: &[u8]) -> Result<SslAcceptor, TrustError> {
    let mut b = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
    b.set_private_key(&leaf.key)?;
    b.set_certificate(&leaf.cert)?;
    b.add_extra_chain_cert(openssl::x509::X509::from_pem(ca_pem)?)?;
    b.check_private_key()?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    b.set_alpn_select_callback(|_, client| {
        openssl::ssl::select_next_proto(ALPN_HTTP11, client).ok_or(AlpnError::NOACK)
    });
    Ok(b.build())
}

/// The upstream TLS client: peer verification on, against `ca_file` when
/// given, else the host's default roots; ALPN `http/1.1`. The name is
/// checked by `SslConnector::connect`.
pub fn connector(ca_file: Option<&Path>) -> Result<SslConnector, TrustError> {
    let mut b = SslConnector::builder(SslMethod::tls_client())?;
    match ca_file {
        Some(f) => b.set_ca_file(f)?,
        None => b.set_default_verify_paths()?,
    }
    b.set_verify(SslVerifyMode::PEER);
    b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    b.set_alpn_protos(ALPN_HTTP11)?;
    Ok(b.build())
}

/// What the sandbox gets when the upstream cannot be reached safely (a
/// certificate problem, a refused connection): a 502 whose body is one
/// line; nothing was sent upstream.
pub fn bad_gateway(host: &str, why: &str) -> Vec<u8> {
    let body = format!(
        "lazaret: {} refused: {}\n",
        crate::display::escape(host),
        crate::display::escape(why)
    );
    format!(
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The guest bundle: the image's bundle (if it has one) and the Domain
/// CA, each ending in a newline.
pub fn guest_bundle(image_bundle: Option<&[u8]>, ca_pem: &[u8]) -> Vec<u8> {
    let mut out = image_bundle.unwrap_or_default().to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(ca_pem);
    if !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out
}

/// Why the swap self-check (`lazaret doctor`) failed.
#[derive(Debug)]
pub enum SelfCheckError {
    Trust(TrustError),
    /// The named step of the engine did not do what it must.
    Swap(&'static str),
    /// A leaf did not verify for its name, or verified for another.
    Leaf(&'static str),
}

impl std::fmt::Display for SelfCheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SelfCheckError::Trust(e) => write!(f, "{e}"),
            SelfCheckError::Swap(what) | SelfCheckError::Leaf(what) => f.write_str(what),
        }
    }
}

impl From<TrustError> for SelfCheckError {
    fn from(e: TrustError) -> Self {
        SelfCheckError::Trust(e)
    }
}

/// A self-check of the swap path on this host's OpenSSL (`lazaret
/// doctor`): an anchor issues a leaf for `host`, which verifies against
/// the anchor's CA with the name checked, and not for another name.
pub fn self_check(host: &str) -> Result<(), SelfCheckError> {
    let anchor = TrustAnchor::new("selfcheck", 1, "selfcheck")?;
    let leaf = anchor.issue_tls_server(host, 1)?;
    let ca = anchor.ca_cert_pem()?;
    acceptor(&leaf, &ca)?;
    // Verify against the bundle a guest would get: this host's bundle plus
    // the Domain CA, as one PEM file.
    let host_bundle = std::fs::read("/etc/ssl/certs/ca-certificates.crt").ok();
    let bundle = guest_bundle(host_bundle.as_deref(), &ca);
    let verify = |name: &str| -> Result<bool, openssl::error::ErrorStack> {
        let mut store = openssl::x509::store::X509StoreBuilder::new()?;
        for c in openssl::x509::X509::stack_from_pem(&bundle)? {
            store.add_cert(c)?;
        }
        let mut p = openssl::x509::verify::X509VerifyParam::new()?;
        p.set_host(name)?;
        store.set_param(&p)?;
        let store = store.build();
        let chain = openssl::stack::Stack::new()?;
        let mut ctx = openssl::x509::X509StoreContext::new()?;
        ctx.init(&store, &leaf.cert, &chain, |c| c.verify_cert())
    };
    match (verify(host), verify("not-the-host.invalid")) {
        (Ok(true), Ok(false)) => Ok(()),
        (Ok(true), _) => Err(SelfCheckError::Leaf("a leaf verified for a name it was not issued for")),
        (Err(e), _) => Err(SelfCheckError::Trust(TrustError::OpenSsl(e))),
        _ => Err(SelfCheckError::Leaf("a leaf issued by the Domain CA does not verify")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A TLS server on loopback (nothing leaves the machine) with `leaf`;
    /// returns the port and the thread, which answers one request line.
    fn serve(leaf: Credential, ca: Vec<u8>) -> (u16, std::thread::JoinHandle<Option<Vec<u8>>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let acc = acceptor(&leaf, &ca).unwrap();
            let (s, _) = l.accept().unwrap();
            let mut tls = acc.accept(s).ok()?;
            let alpn = tls.ssl().selected_alpn_protocol().map(|p| p.to_vec());
            let mut buf = [0u8; 64];
            let n = tls.read(&mut buf).ok()?;
            tls.write_all(&buf[..n]).ok()?;
            Some(alpn.unwrap_or_default())
        });
        (port, t)
    }

    fn ca_file(anchor: &TrustAnchor, tag: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("lz-tls-{}-{tag}.pem", std::process::id()));
        std::fs::write(&p, anchor.ca_cert_pem().unwrap()).unwrap();
        p
    }

    #[test]
    fn terminated_leaf_verifies_by_name_with_http11_only() {
        let anchor = TrustAnchor::new("d", 1, "p").unwrap();
        let leaf = anchor.issue_tls_server("api.test", LEAF_HOURS).unwrap();
        let (port, t) = serve(leaf, anchor.ca_cert_pem().unwrap());
        let f = ca_file(&anchor, "ok");
        let c = connector(Some(&f)).unwrap();
        let mut s = c
            .connect("api.test", TcpStream::connect(("127.0.0.1", port)).unwrap())
            .unwrap();
        s.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        assert_eq!(t.join().unwrap().unwrap(), b"http/1.1");
        std::fs::remove_file(f).unwrap();
        // The leaf is no CA and names exactly api.test.
        let leaf = anchor.issue_tls_server("api.test", 1).unwrap();
        let text = String::from_utf8_lossy(&leaf.cert.to_text().unwrap()).into_owned();
        assert!(text.contains("CA:FALSE") && text.contains("DNS:api.test"), "{text}");
        assert!(self_check("api.test").is_ok());
    }

    #[test]
    fn upstream_problems_refuse() {
        let anchor = TrustAnchor::new("d", 1, "p").unwrap();
        let stranger = TrustAnchor::new("d", 2, "p").unwrap();
        let f = ca_file(&anchor, "bad");
        // Wrong name, wrong CA, expired: each handshake fails.
        for (leaf_of, issued_for, hours) in [(&anchor, "other.test", 1), (&stranger, "api.test", 1)] {
            let leaf = leaf_of.issue_tls_server(issued_for, hours).unwrap();
            let (port, t) = serve(leaf, leaf_of.ca_cert_pem().unwrap());
            let c = connector(Some(&f)).unwrap();
            let r = c.connect("api.test", TcpStream::connect(("127.0.0.1", port)).unwrap());
            assert!(r.is_err(), "{issued_for}");
            assert!(t.join().unwrap().is_none());
        }
        let expired = anchor.issue_tls_server_valid("api.test", 1_000_000, 2_000_000).unwrap();
        let (port, t) = serve(expired, anchor.ca_cert_pem().unwrap());
        let c = connector(Some(&f)).unwrap();
        assert!(c
            .connect("api.test", TcpStream::connect(("127.0.0.1", port)).unwrap())
            .is_err());
        let _ = t.join();
        std::fs::remove_file(f).unwrap();
        let r = String::from_utf8(bad_gateway("api.test", "certificate verify failed\r\nX: y")).unwrap();
        assert!(r.starts_with("HTTP/1.1 502 ") && !r.contains("\r\nX: y"), "{r}");
        assert_eq!(r.split("\r\n\r\n").nth(1).unwrap().lines().count(), 1);
    }

    #[test]
    fn guest_bundle_appends_the_ca() {
        assert_eq!(guest_bundle(Some(b"A"), b"CA\n"), b"A\nCA\n");
        assert_eq!(guest_bundle(None, b"CA"), b"CA\n");
    }
}
