//! The request side, towards the server: each head checked; a bound
//! secret's sentinel swapped for its real value in the headers the secret
//! names (refused there on a connection without verified TLS, unless the
//! secret opts in to plain HTTP); a sentinel of any other secret, anywhere
//! in the head or the body, refuses.

use std::collections::VecDeque;

use super::body::{emit, Body, Chunk};
use super::head::{framing, parse_head, Framing, Head};
use super::replace::Replacer;
use super::{Binding, Expect, Refusal, Upstream};

/// A replacer and, for each of its patterns, the refusal it stands for
/// when it has no replacement (a detect-only pattern).
#[derive(Debug, Clone)]
struct Scan {
    repl: Replacer,
    why: Vec<Refusal>,
}

impl Scan {
    fn new(pats: Vec<(Vec<u8>, Option<Vec<u8>>, Refusal)>) -> Scan {
        let pats: Vec<_> = pats.into_iter().filter(|(p, _, _)| !p.is_empty()).collect();
        let why = pats.iter().map(|(_, _, w)| w.clone()).collect();
        let repl = Replacer::new(pats.into_iter().map(|(p, r, _)| (p, r)).collect());
        Scan { repl, why }
    }

    fn refusal(&self, n: usize) -> Refusal {
        self.why
            .get(n)
            .cloned()
            .unwrap_or(Refusal::BadRequest("a sentinel where none may be"))
    }

    fn once(&self, v: &[u8]) -> Result<Vec<u8>, Refusal> {
        self.repl.once(v).map_err(|n| self.refusal(n))
    }
}

/// The requests of one connection to `host`, towards the server.
#[derive(Debug)]
pub struct RequestSide {
    host: String,
    /// Detect only: the sentinel of every secret not bound to `host`.
    /// Scanned for in the whole head (target, names, values) and bodies.
    leak: Scan,
    /// Per request header name (lowercase) that a secret bound to `host`
    /// names: sentinel -> real value for those secrets (detect only, a
    /// downgrade, when this connection may not carry it), and the leak
    /// patterns. Any other header: `leak` alone.
    swaps: Vec<(Vec<u8>, Scan)>,
    /// Whether any secret is bound here: then every request needs its
    /// `Host`, and asks for `Accept-Encoding: identity` so that responses
    /// can be scanned.
    bound: bool,
    /// `Basic` credentials the gate encoded with a real value in them, and
    /// the sandbox's own encoding: the response side turns the first back
    /// into the second ([`RequestSide::take_encoded`]).
    encoded: Vec<Encoded>,
    pending: Vec<u8>,
    body: Option<Body>,
}

impl RequestSide {
    /// `upstream`: what the gate's connection to `host` is (a real value
    /// goes only into a verified one, or to a secret with `plain_http`).
    pub fn new(host: &str, bindings: &[Binding], upstream: Upstream) -> RequestSide {
        let host = host.to_ascii_lowercase();
        let leak: Vec<(Vec<u8>, Option<Vec<u8>>, Refusal)> = bindings
            .iter()
            .filter(|b| !b.bound_to(&host))
            .map(|b| {
                let why = Refusal::Leak {
                    var: b.var.clone(),
                    host: host.clone(),
                };
                (b.sentinel.as_bytes().to_vec(), None, why)
            })
            .collect();
        let bound: Vec<&Binding> = bindings.iter().filter(|b| b.bound_to(&host)).collect();
        let mut names: Vec<Vec<u8>> = bound
            .iter()
            .flat_map(|b| b.headers.iter().map(|h| h.to_ascii_lowercase().into_bytes()))
            .collect();
        names.sort_unstable();
        names.dedup();
        let swaps = names
            .into_iter()
            .map(|n| {
                let mut pats: Vec<_> = bound
                    .iter()
                    .filter(|b| b.names_header(&n))
                    .map(|b| {
                        let may = upstream == Upstream::Verified || b.plain_http;
                        let why = Refusal::Downgrade {
                            var: b.var.clone(),
                            host: host.clone(),
                        };
                        let real = may.then(|| b.real.expose().to_vec());
                        (b.sentinel.as_bytes().to_vec(), real, why)
                    })
                    .collect();
                pats.extend(leak.iter().cloned());
                (n, Scan::new(pats))
            })
            .collect();
        RequestSide {
            host,
            leak: Scan::new(leak),
            swaps,
            bound: !bound.is_empty(),
            encoded: Vec::new(),
            pending: Vec::new(),
            body: None,
        }
    }

    /// Feeds bytes from the sandbox; appends what goes to the server to
    /// `out` and one [`Expect`] per request head to `expects`. After an
    /// `Err` the connection must be closed (nothing of the refused request
    /// was appended).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>, expects: &mut VecDeque<Expect>) -> Result<(), Refusal> {
        let mut buf: Vec<u8> = input.to_vec();
        loop {
            if let Some(body) = &mut self.body {
                let chunked = matches!(body, Body::Chunked(_));
                let leak = &mut self.leak.repl;
                let mut found = None;
                let mut data_out: Vec<u8> = Vec::new();
                let mut scratch = Vec::new();
                let d = body.decode(&buf, &mut |data| {
                    scratch.clear();
                    if let Err(n) = leak.feed(data, &mut scratch) {
                        found = Some(n);
                        return Err(Refusal::BadRequest("a sentinel in the body"));
                    }
                    data_out.extend_from_slice(data);
                    Ok(())
                });
                if let Some(n) = found {
                    return Err(self.leak.refusal(n));
                }
                let d = d?;
                emit(out, &data_out, chunked);
                if d.end.is_none() {
                    return Ok(());
                }
                if chunked {
                    // Trailers are dropped: never parsed, never forwarded.
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                self.body = None;
                self.leak.repl.held.clear();
                buf.drain(..d.used);
                if buf.is_empty() {
                    return Ok(());
                }
                continue;
            }
            self.pending.extend_from_slice(&buf);
            let Some((head, used)) = parse_head(&self.pending, true).map_err(Refusal::BadRequest)? else {
                return Ok(());
            };
            buf = self.pending.split_off(used);
            self.pending.clear();
            let (bytes, expect, framing) = self.rewrite(head)?;
            out.extend_from_slice(&bytes);
            expects.push_back(expect);
            self.body = match framing {
                Framing::None | Framing::Length(0) => None,
                Framing::Length(n) => Some(Body::Length(n)),
                Framing::Chunked => Some(Body::Chunked(Chunk::Size(Vec::new()))),
                Framing::Close => return Err(Refusal::BadRequest("a request body without length")),
            };
            if buf.is_empty() {
                return Ok(());
            }
        }
    }

    /// The `Basic` credentials swapped since the last call: (what the
    /// server got, what the sandbox sent), base64 both. The real value in
    /// the first is no byte string the response scan would otherwise find
    /// (base64 of `user:value`), so the relay hands these to
    /// [`super::ResponseSide::add_encoded`].
    pub fn take_encoded(&mut self) -> Vec<Encoded> {
        std::mem::take(&mut self.encoded)
    }

    fn rewrite(&mut self, mut head: Head) -> Result<(Vec<u8>, Expect, Framing), Refusal> {
        let bad = Refusal::BadRequest;
        if head.first.eq_ignore_ascii_case(b"CONNECT") {
            return Err(bad("CONNECT inside a connection to a host with secrets"));
        }
        if head.get_all("upgrade").next().is_some() {
            return Err(bad("a protocol upgrade towards a host with secrets"));
        }
        let hosts: Vec<&[u8]> = head.get_all("host").collect();
        let http10 = head.third == b"HTTP/1.0";
        match hosts.as_slice() {
            [h] if authority_is(h, &self.host) => {}
            // An HTTP/1.0 request may omit it, except towards a bound host:
            // a server (a shared front) would pick some default host for it.
            [] if http10 && !self.bound => {}
            [_] => return Err(bad("a Host header naming another host than the connection's")),
            [] => return Err(bad("no Host header")),
            _ => return Err(bad("more than one Host header")),
        }
        // An absolute-form target must name this host too.
        let lower = head.second.to_ascii_lowercase();
        for scheme in [&b"http://"[..], b"https://"] {
            if let Some(rest) = lower.strip_prefix(scheme) {
                let auth = rest.split(|c| *c == b'/' || *c == b'?').next().unwrap_or(b"");
                if !authority_is(auth, &self.host) {
                    return Err(bad("a request target naming another host than the connection's"));
                }
            }
        }
        let framing = framing(&head).map_err(bad)?;
        let expect = Expect {
            head: head.first == b"HEAD",
            http10,
        };
        let mut encoded = Vec::new();
        for (name, value) in head.fields.iter_mut() {
            let scan = self
                .swaps
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map_or(&self.leak, |(_, s)| s);
            let mut v = scan.once(value)?;
            if name.eq_ignore_ascii_case(b"authorization") || name.eq_ignore_ascii_case(b"proxy-authorization") {
                let (b, pair) = basic(scan, &v)?;
                v = b;
                encoded.extend(pair);
            }
            *value = v;
        }
        if self.bound {
            // Only what the response scan can read: no content or
            // transfer codings (`ResponseSide` refuses any it gets), and
            // whole bodies: a range request could have an echo cut
            // where the sandbox likes, a value's two halves in two
            // responses, neither of which the scan would match.
            head.remove("accept-encoding");
            head.remove("te");
            head.remove("range");
            head.remove("if-range");
            head.fields.push((b"Accept-Encoding".to_vec(), b"identity".to_vec()));
        }
        self.encoded.extend(encoded);
        let mut out = Vec::with_capacity(256);
        head.serialize(&mut out);
        // A sentinel of a secret not bound here, anywhere in the head: the
        // target, a header name, a value.
        self.leak.once(&out)?;
        Ok((out, expect, framing))
    }
}

/// A `Basic` credential as the server gets it and as the sandbox sent
/// it, base64 both.
type Encoded = (Vec<u8>, Vec<u8>);

/// `Basic BASE64(user:password)`: the sentinel in either part, through
/// `scan` (the header's own). With the new value, when it changed: (the
/// new credentials, the sandbox's), base64 both.
fn basic(scan: &Scan, v: &[u8]) -> Result<(Vec<u8>, Option<Encoded>), Refusal> {
    let same = || Ok((v.to_vec(), None));
    let Some(pos) = v.iter().position(|c| *c == b' ') else {
        return same();
    };
    let (scheme, cred) = (&v[..pos], v[pos..].trim_ascii());
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return same();
    }
    let Ok(text) = std::str::from_utf8(cred) else {
        return same();
    };
    let Ok(decoded) = openssl::base64::decode_block(text) else {
        return same();
    };
    let replaced = scan.once(&decoded)?;
    if replaced == decoded {
        return same();
    }
    let enc = openssl::base64::encode_block(&replaced).into_bytes();
    let mut out = scheme.to_vec();
    out.push(b' ');
    out.extend_from_slice(&enc);
    Ok((out, Some((enc, cred.to_vec()))))
}

/// Whether `auth` (`host[:port]`, any case) names `host`.
fn authority_is(auth: &[u8], host: &str) -> bool {
    let a = auth.to_ascii_lowercase();
    let name = match a.iter().rposition(|c| *c == b':') {
        Some(k) if a[k + 1..].iter().all(u8::is_ascii_digit) => &a[..k],
        _ => &a[..],
    };
    let name = name.strip_suffix(b".").unwrap_or(name);
    name == host.as_bytes()
}
