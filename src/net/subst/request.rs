//! The request side, towards the server: each head checked and its
//! sentinels swapped for real values of secrets bound to the host; a
//! sentinel of any other secret, in the head or the body, refuses.

use std::collections::VecDeque;

use super::body::{emit, Body, Chunk};
use super::head::{framing, parse_head, Framing, Head};
use super::replace::Replacer;
use super::{Binding, Expect, Refusal};

/// The requests of one connection to `host`, towards the server.
#[derive(Debug)]
pub struct RequestSide {
    host: String,
    /// sentinel -> real for secrets bound to `host`; other sentinels: refuse.
    head_repl: Replacer,
    /// Every sentinel not bound to `host` (detect only), for bodies.
    leak: Replacer,
    /// Variable names, by pattern index of both replacers.
    vars: Vec<String>,
    /// Whether any secret is bound here (then the gate strips
    /// `Accept-Encoding`, so responses can be scanned).
    bound: bool,
    pending: Vec<u8>,
    body: Option<Body>,
}

impl RequestSide {
    pub fn new(host: &str, bindings: &[Binding]) -> RequestSide {
        let mut pats = Vec::new();
        let mut leak = Vec::new();
        let mut vars = Vec::new();
        let mut leak_vars = Vec::new();
        for b in bindings {
            if b.bound_to(host) {
                pats.push((b.sentinel.as_bytes().to_vec(), Some(b.real.expose().to_vec())));
                vars.push(b.var.clone());
            }
        }
        let bound = !pats.is_empty();
        for b in bindings {
            if !b.bound_to(host) {
                pats.push((b.sentinel.as_bytes().to_vec(), None));
                vars.push(b.var.clone());
                leak.push((b.sentinel.as_bytes().to_vec(), None));
                leak_vars.push(b.var.clone());
            }
        }
        vars.extend(leak_vars);
        RequestSide {
            host: host.to_ascii_lowercase(),
            head_repl: Replacer::new(pats),
            leak: Replacer::new(leak),
            vars,
            bound,
            pending: Vec::new(),
            body: None,
        }
    }

    fn leak_at(&self, n: usize) -> Refusal {
        Refusal::Leak {
            var: self.vars.get(n).cloned().unwrap_or_default(),
            host: self.host.clone(),
        }
    }

    /// Leak index of a body pattern -> the variable (leak vars follow the
    /// head patterns in `vars`).
    fn body_leak(&self, n: usize) -> Refusal {
        let base = self.vars.len() - self.leak.pats.len();
        self.leak_at(base + n)
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
                let leak = &mut self.leak;
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
                    return Err(self.body_leak(n));
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
                self.leak.held.clear();
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

    fn rewrite(&self, mut head: Head) -> Result<(Vec<u8>, Expect, Framing), Refusal> {
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
            [] if http10 => {}
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
        head.second = self.head_repl.once(&head.second).map_err(|n| self.leak_at(n))?;
        for (name, value) in head.fields.iter_mut() {
            let mut v = self.head_repl.once(value).map_err(|n| self.leak_at(n))?;
            if name.eq_ignore_ascii_case(b"authorization") || name.eq_ignore_ascii_case(b"proxy-authorization") {
                v = self.basic(&v)?;
            }
            *value = v;
        }
        if self.bound {
            // Compressed responses could hide a real value from the scan.
            head.remove("accept-encoding");
        }
        let mut out = Vec::with_capacity(256);
        head.serialize(&mut out);
        Ok((out, expect, framing))
    }

    /// `Basic BASE64(user:password)`: the sentinel in either part.
    fn basic(&self, v: &[u8]) -> Result<Vec<u8>, Refusal> {
        let Some(pos) = v.iter().position(|c| *c == b' ') else {
            return Ok(v.to_vec());
        };
        let (scheme, cred) = (&v[..pos], v[pos..].trim_ascii());
        if !scheme.eq_ignore_ascii_case(b"basic") {
            return Ok(v.to_vec());
        }
        let Ok(text) = std::str::from_utf8(cred) else {
            return Ok(v.to_vec());
        };
        let Ok(decoded) = openssl::base64::decode_block(text) else {
            return Ok(v.to_vec());
        };
        let replaced = self.head_repl.once(&decoded).map_err(|n| self.leak_at(n))?;
        if replaced == decoded {
            return Ok(v.to_vec());
        }
        let mut out = scheme.to_vec();
        out.push(b' ');
        out.extend_from_slice(openssl::base64::encode_block(&replaced).as_bytes());
        Ok(out)
    }
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
