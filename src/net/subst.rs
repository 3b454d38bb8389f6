//! The secret swap (pure): what the egress gate does to the HTTP/1.1 bytes
//! of a connection to a name that has secrets bound (docs/network.md,
//! "Secrets").
//!
//! Towards the server ([`RequestSide`]): each request head is parsed
//! (bounded, strict: CRLF only, no folded lines, no `Content-Length` next
//! to `Transfer-Encoding`, exactly one `Host` naming the connection's own
//! host), and in the request target and every header value each sentinel
//! of a secret bound to this host becomes the real value (also inside
//! `Basic` credentials, decoded and encoded again). A sentinel of a secret
//! that is *not* bound to this host, in the head or anywhere in the body,
//! refuses the request before any byte of it is sent ([`Refusal::Leak`]).
//! Bodies stream through as they arrive; chunked trailers are dropped
//! both ways (never parsed, never forwarded).
//!
//! Towards the sandbox ([`ResponseSide`]): every real value in a response
//! head or body becomes its sentinel, streaming (a partial match at the
//! end of a read is held back only while it can still become a match, so
//! a server-sent event is never delayed). A body whose length changes is
//! sent chunked (close-delimited to an HTTP/1.0 client).
//!
//! Nothing here does I/O: the gate feeds bytes in and writes what comes out.

use std::collections::VecDeque;

use crate::config::secrets::SecretValue;

/// Largest request or response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
/// Largest chunk-size line or trailer section accepted.
const MAX_LINE: usize = 4 * 1024;

/// One secret as the gate holds it for a generation.
#[derive(Debug, Clone)]
pub struct Binding {
    pub var: String,
    pub sentinel: String,
    pub real: SecretValue,
    /// Exact lowercase names the real value may be sent to.
    pub hosts: Vec<String>,
}

impl Binding {
    fn bound_to(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }
}

/// Why a request is not sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A sentinel towards a host its secret is not bound to (the secret's
    /// variable name and the host).
    Leak { var: String, host: String },
    /// The request is not HTTP/1.1 the gate can frame safely.
    BadRequest(&'static str),
    /// The response is not HTTP/1.1 the gate can frame safely.
    BadResponse(&'static str),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Leak { var, host } => write!(
                f,
                "the sentinel of secret {var} was sent towards {}, which it is not bound to (leak attempt; refused)",
                crate::display::escape(host)
            ),
            Refusal::BadRequest(why) => write!(f, "request refused: {why}"),
            Refusal::BadResponse(why) => write!(f, "response refused: {why}"),
        }
    }
}

// ---------------------------------------------------------------------------
// Streaming replacement
// ---------------------------------------------------------------------------

/// Replaces (or, with no replacement, detects) byte patterns in a stream
/// cut at arbitrary points.
#[derive(Debug, Clone)]
pub struct Replacer {
    /// (pattern, replacement); `None`: finding it is an error (its index).
    pats: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    first: [bool; 256],
    /// Bytes held back: a proper prefix of some pattern.
    held: Vec<u8>,
}

impl Replacer {
    pub fn new(pats: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Replacer {
        let mut first = [false; 256];
        let pats: Vec<_> = pats.into_iter().filter(|(p, _)| !p.is_empty()).collect();
        for (p, _) in &pats {
            first[p[0] as usize] = true;
        }
        Replacer {
            pats,
            first,
            held: Vec::new(),
        }
    }

    /// Appends the replaced `input` to `out`; `Err(i)`: detect-only
    /// pattern `i` was found (nothing of the match is written).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), usize> {
        if self.pats.is_empty() {
            out.extend_from_slice(input);
            return Ok(());
        }
        let joined;
        let buf: &[u8] = if self.held.is_empty() {
            input
        } else {
            let mut j = std::mem::take(&mut self.held);
            j.extend_from_slice(input);
            joined = j;
            &joined
        };
        let mut i = 0;
        let mut copied = 0;
        while i < buf.len() {
            // Skip to the next byte that can start a pattern.
            match buf[i..].iter().position(|b| self.first[*b as usize]) {
                None => break,
                Some(k) => i += k,
            }
            let rest = &buf[i..];
            let mut matched = None;
            let mut partial = false;
            for (n, (p, _)) in self.pats.iter().enumerate() {
                if rest.len() >= p.len() {
                    if rest[..p.len()] == p[..] {
                        matched = Some(n);
                        break;
                    }
                } else if p.starts_with(rest) {
                    partial = true;
                }
            }
            if let Some(n) = matched {
                out.extend_from_slice(&buf[copied..i]);
                match &self.pats[n].1 {
                    Some(r) => out.extend_from_slice(r),
                    None => return Err(n),
                }
                i += self.pats[n].0.len();
                copied = i;
            } else if partial {
                out.extend_from_slice(&buf[copied..i]);
                self.held = rest.to_vec();
                return Ok(());
            } else {
                i += 1;
            }
        }
        out.extend_from_slice(&buf[copied..]);
        Ok(())
    }

    /// End of stream: whatever was held back (it never became a match).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.held);
    }

    /// Replaces in one complete buffer.
    pub fn once(&self, input: &[u8]) -> Result<Vec<u8>, usize> {
        let mut r = Replacer {
            pats: self.pats.clone(),
            first: self.first,
            held: Vec::new(),
        };
        let mut out = Vec::with_capacity(input.len());
        r.feed(input, &mut out)?;
        r.finish(&mut out);
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// Heads
// ---------------------------------------------------------------------------

/// A parsed head: the first line's three parts and the header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Method (request) or version (response).
    pub first: Vec<u8>,
    /// Target (request) or status code (response).
    pub second: Vec<u8>,
    /// Version (request) or reason phrase (response).
    pub third: Vec<u8>,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Head {
    fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_slice())
    }

    fn remove(&mut self, name: &str) {
        self.fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()));
    }

    fn serialize(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.first);
        out.push(b' ');
        out.extend_from_slice(&self.second);
        out.push(b' ');
        out.extend_from_slice(&self.third);
        out.extend_from_slice(b"\r\n");
        for (n, v) in &self.fields {
            out.extend_from_slice(n);
            out.extend_from_slice(b": ");
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Finds a complete head at the start of `buf` (after at most a few empty
/// lines); `Ok(None)`: not complete yet. The length returned includes the
/// final empty line.
pub fn parse_head(buf: &[u8], request: bool) -> Result<Option<(Head, usize)>, &'static str> {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") && start < 8 {
        start += 2;
    }
    let Some(end) = buf[start..].windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err("the head is larger than 64 KiB");
        }
        if buf[start..].contains(&b'\n') && buf[start..].windows(2).any(|w| w[1] == b'\n' && w[0] != b'\r') {
            return Err("a line ends in a bare LF");
        }
        return Ok(None);
    };
    if start + end + 4 > MAX_HEAD {
        return Err("the head is larger than 64 KiB");
    }
    // Each line with its CR (the LF of the last one dropped).
    let text = &buf[start..start + end + 1];
    let mut lines = text
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").ok_or("a line ends in a bare LF"));
    let line = lines.next().ok_or("an empty head")??;
    let mut parts = line.splitn(3, |b| *b == b' ');
    let (a, b, c) = match (parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err("a malformed first line"),
    };
    if request {
        if a.is_empty() || !a.iter().all(|c| is_tchar(*c)) {
            return Err("a malformed method");
        }
        if b.is_empty() || !b.iter().all(|c| (0x21..=0x7e).contains(c)) {
            return Err("a malformed request target");
        }
        if c != b"HTTP/1.1" && c != b"HTTP/1.0" {
            return Err("not HTTP/1.0 or HTTP/1.1");
        }
    } else {
        if a != b"HTTP/1.1" && a != b"HTTP/1.0" {
            return Err("not HTTP/1.0 or HTTP/1.1");
        }
        if b.len() != 3 || !b.iter().all(u8::is_ascii_digit) {
            return Err("a malformed status code");
        }
        if c.iter().any(|c| c.is_ascii_control() && *c != b'\t') {
            return Err("a malformed reason phrase");
        }
    }
    let mut fields = Vec::new();
    for l in lines {
        let l = l?;
        if l.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
            return Err("a folded header line");
        }
        let colon = l
            .iter()
            .position(|c| *c == b':')
            .ok_or("a header line without a colon")?;
        let (name, value) = (&l[..colon], &l[colon + 1..]);
        if name.is_empty() || !name.iter().all(|c| is_tchar(*c)) {
            return Err("a malformed header name");
        }
        let value = value.trim_ascii();
        if value
            .iter()
            .any(|c| (c.is_ascii_control() && *c != b'\t') || *c == 0x7f)
        {
            return Err("a control byte in a header value");
        }
        fields.push((name.to_vec(), value.to_vec()));
    }
    Ok(Some((
        Head {
            first: a.to_vec(),
            second: b.to_vec(),
            third: c.to_vec(),
            fields,
        },
        start + end + 4,
    )))
}

/// How a message's body ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Response only: until the connection closes.
    Close,
}

fn framing(head: &Head) -> Result<Framing, &'static str> {
    let te: Vec<&[u8]> = head.get_all("transfer-encoding").collect();
    let cl: Vec<&[u8]> = head.get_all("content-length").collect();
    if !te.is_empty() {
        if !cl.is_empty() {
            return Err("both Transfer-Encoding and Content-Length");
        }
        let all: Vec<Vec<u8>> = te
            .iter()
            .flat_map(|v| v.split(|c| *c == b','))
            .map(|c| c.trim_ascii().to_ascii_lowercase())
            .collect();
        if all.last().map(Vec::as_slice) != Some(b"chunked") || all.iter().filter(|c| *c == b"chunked").count() != 1 {
            return Err("a Transfer-Encoding that does not end in one chunked");
        }
        return Ok(Framing::Chunked);
    }
    match cl.as_slice() {
        [] => Ok(Framing::None),
        [v] => std::str::from_utf8(v)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .map(Framing::Length)
            .ok_or("a malformed Content-Length"),
        _ => Err("more than one Content-Length"),
    }
}

// ---------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk-size line.
    Size(Vec<u8>),
    Data(u64),
    /// The CRLF after a chunk's data (bytes of it still expected).
    DataEnd(u8),
    /// After the last chunk: trailer lines until an empty one.
    Trailers(Vec<u8>),
}

/// Decodes one body: payload bytes go to `data`, trailer bytes (after the
/// last chunk, with the final empty line) are returned when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Length(u64),
    Chunked(Chunk),
    Close,
}

/// What [`Body::decode`] did: bytes consumed, and the trailer section when
/// the body ended (empty for a length-framed one).
struct Decoded {
    used: usize,
    end: Option<Vec<u8>>,
}

impl Body {
    fn decode(&mut self, input: &[u8], data: &mut dyn FnMut(&[u8]) -> Result<(), Refusal>) -> Result<Decoded, Refusal> {
        let bad = Refusal::BadRequest;
        let mut i = 0;
        loop {
            match self {
                Body::Close => {
                    data(&input[i..])?;
                    return Ok(Decoded {
                        used: input.len(),
                        end: None,
                    });
                }
                Body::Length(n) => {
                    let take = (*n).min((input.len() - i) as u64) as usize;
                    data(&input[i..i + take])?;
                    *n -= take as u64;
                    i += take;
                    let end = (*n == 0).then(Vec::new);
                    return Ok(Decoded { used: i, end });
                }
                Body::Chunked(c) => {
                    if i == input.len() && !matches!(c, Chunk::Trailers(_)) {
                        return Ok(Decoded { used: i, end: None });
                    }
                    match c {
                        Chunk::Size(line) => {
                            let nl = input[i..].iter().position(|b| *b == b'\n');
                            let upto = nl.map_or(input.len(), |k| i + k + 1);
                            line.extend_from_slice(&input[i..upto]);
                            i = upto;
                            if line.len() > MAX_LINE {
                                return Err(bad("a chunk-size line over 4 KiB"));
                            }
                            if nl.is_none() {
                                return Ok(Decoded { used: i, end: None });
                            }
                            let l = line
                                .strip_suffix(b"\r\n")
                                .ok_or(bad("a chunk-size line ends in a bare LF"))?;
                            let hex = l.split(|b| *b == b';').next().unwrap_or(b"").trim_ascii_end();
                            if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
                                return Err(bad("a malformed chunk size"));
                            }
                            let n = u64::from_str_radix(std::str::from_utf8(hex).unwrap_or("x"), 16)
                                .map_err(|_| bad("a malformed chunk size"))?;
                            *c = if n == 0 {
                                Chunk::Trailers(Vec::new())
                            } else {
                                Chunk::Data(n)
                            };
                        }
                        Chunk::Data(n) => {
                            let take = (*n).min((input.len() - i) as u64) as usize;
                            data(&input[i..i + take])?;
                            *n -= take as u64;
                            i += take;
                            if *n == 0 {
                                *c = Chunk::DataEnd(2);
                            }
                        }
                        Chunk::DataEnd(k) => {
                            let want: &[u8] = if *k == 2 { b"\r" } else { b"\n" };
                            if input[i] != want[0] {
                                return Err(bad("chunk data not followed by CRLF"));
                            }
                            i += 1;
                            *k -= 1;
                            if *k == 0 {
                                *c = Chunk::Size(Vec::new());
                            }
                        }
                        Chunk::Trailers(t) => {
                            // Ends at an empty line: "\r\n" alone or "\r\n\r\n".
                            while i < input.len() {
                                t.push(input[i]);
                                i += 1;
                                if t == b"\r\n" || t.ends_with(b"\r\n\r\n") {
                                    let end = std::mem::take(t);
                                    return Ok(Decoded {
                                        used: i,
                                        end: Some(end),
                                    });
                                }
                            }
                            if t.len() > MAX_LINE {
                                return Err(bad("a trailer section over 4 KiB"));
                            }
                            return Ok(Decoded { used: i, end: None });
                        }
                    }
                }
            }
        }
    }
}

fn emit(out: &mut Vec<u8>, data: &[u8], rechunk: bool) {
    if !rechunk {
        out.extend_from_slice(data);
    } else if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// What the response side must know of each request, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// `HEAD`: the response has no body whatever its head says.
    pub head: bool,
    /// An HTTP/1.0 client: no chunked responses.
    pub http10: bool,
}

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

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// The responses of one connection, towards the sandbox: real -> sentinel.
#[derive(Debug)]
pub struct ResponseSide {
    repl: Replacer,
    pending: Vec<u8>,
    /// The body being relayed, and whether it is re-chunked.
    body: Option<(Body, bool)>,
    closing: bool,
}

impl ResponseSide {
    /// Every secret's real value is replaced, whatever host it is bound to.
    pub fn new(bindings: &[Binding]) -> ResponseSide {
        let pats = bindings
            .iter()
            .map(|b| (b.real.expose().to_vec(), Some(b.sentinel.as_bytes().to_vec())))
            .collect();
        ResponseSide {
            repl: Replacer::new(pats),
            pending: Vec::new(),
            body: None,
            closing: false,
        }
    }

    /// Feeds bytes from the server; appends what goes to the sandbox.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>, expects: &mut VecDeque<Expect>) -> Result<(), Refusal> {
        let mut buf: Vec<u8> = input.to_vec();
        loop {
            if self.closing {
                // Close-delimited towards an HTTP/1.0 client: nothing after it.
                return Ok(());
            }
            if let Some((body, rechunk)) = &mut self.body {
                let rechunk = *rechunk;
                let repl = &mut self.repl;
                let mut data_out = Vec::new();
                let d = body.decode(&buf, &mut |data| {
                    // Only replacements here, never a detect-only pattern.
                    let _ = repl.feed(data, &mut data_out);
                    Ok(())
                })?;
                if d.end.is_none() {
                    emit(out, &data_out, rechunk);
                    return Ok(());
                }
                self.repl.finish(&mut data_out);
                emit(out, &data_out, rechunk);
                if rechunk {
                    // Trailers are dropped, as towards the server.
                    out.extend_from_slice(b"0\r\n\r\n");
                } else {
                    self.closing = true;
                }
                self.body = None;
                buf.drain(..d.used);
                if buf.is_empty() {
                    return Ok(());
                }
                continue;
            }
            self.pending.extend_from_slice(&buf);
            let Some((mut head, used)) = parse_head(&self.pending, false).map_err(Refusal::BadResponse)? else {
                return Ok(());
            };
            buf = self.pending.split_off(used);
            self.pending.clear();
            let status: u16 = std::str::from_utf8(&head.second)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            if status == 101 {
                return Err(Refusal::BadResponse("a protocol switch that was not asked for"));
            }
            let informational = (100..200).contains(&status);
            let expect = if informational {
                expects.front().copied()
            } else {
                expects.pop_front()
            }
            .ok_or(Refusal::BadResponse("a response without a request"))?;
            let framing = if expect.head || informational || status == 204 || status == 304 {
                Framing::None
            } else {
                match framing(&head).map_err(Refusal::BadResponse)? {
                    Framing::None => Framing::Close,
                    f => f,
                }
            };
            head.third = self.repl.once(&head.third).unwrap_or_default();
            for (_, v) in head.fields.iter_mut() {
                *v = self.repl.once(v).unwrap_or_default();
            }
            self.body = match framing {
                Framing::None | Framing::Length(0) => None,
                Framing::Close => Some((Body::Close, false)),
                f => {
                    head.remove("content-length");
                    head.remove("transfer-encoding");
                    if expect.http10 {
                        head.remove("connection");
                        head.fields.push((b"Connection".to_vec(), b"close".to_vec()));
                    } else {
                        head.fields.push((b"Transfer-Encoding".to_vec(), b"chunked".to_vec()));
                    }
                    let decoder = match f {
                        Framing::Length(n) => Body::Length(n),
                        _ => Body::Chunked(Chunk::Size(Vec::new())),
                    };
                    Some((decoder, !expect.http10))
                }
            };
            head.serialize(out);
            if buf.is_empty() {
                return Ok(());
            }
        }
    }

    /// Whether the gate must close the connection towards the sandbox now
    /// (a body sent close-delimited has ended).
    pub fn closing(&self) -> bool {
        self.closing
    }

    /// The server closed the connection: the rest of a close-delimited body.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if let Some((Body::Close, _)) = &self.body {
            self.repl.finish(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = "sk-ant-REAL-0123456789abcdef";
    const OTHER_REAL: &str = "ghp_OTHERREAL987654321";

    fn bindings() -> (Vec<Binding>, String, String) {
        let s1 = crate::config::secrets::sentinel().unwrap();
        let s2 = crate::config::secrets::sentinel().unwrap();
        let b = vec![
            Binding {
                var: "ANTHROPIC_API_KEY".into(),
                sentinel: s1.clone(),
                real: SecretValue::new(REAL.into()).unwrap(),
                hosts: vec!["api.test".into()],
            },
            Binding {
                var: "GH_TOKEN".into(),
                sentinel: s2.clone(),
                real: SecretValue::new(OTHER_REAL.into()).unwrap(),
                hosts: vec!["git.test".into()],
            },
        ];
        (b, s1, s2)
    }

    fn send(side: &mut RequestSide, parts: &[&[u8]]) -> Result<(Vec<u8>, VecDeque<Expect>), Refusal> {
        let mut out = Vec::new();
        let mut ex = VecDeque::new();
        for p in parts {
            side.feed(p, &mut out, &mut ex)?;
        }
        Ok((out, ex))
    }

    fn contains(h: &[u8], n: &str) -> bool {
        h.windows(n.len()).any(|w| w == n.as_bytes())
    }

    #[test]
    fn replacer_across_every_cut() {
        let text = b"aa PATTERN bb PATTERNPATTERN cc PATT".to_vec();
        let want = b"aa X bb XX cc PATT".to_vec();
        for cut in 0..=text.len() {
            for cut2 in cut..=text.len() {
                let mut r = Replacer::new(vec![(b"PATTERN".to_vec(), Some(b"X".to_vec()))]);
                let mut out = Vec::new();
                r.feed(&text[..cut], &mut out).unwrap();
                r.feed(&text[cut..cut2], &mut out).unwrap();
                r.feed(&text[cut2..], &mut out).unwrap();
                r.finish(&mut out);
                assert_eq!(out, want, "cuts {cut} {cut2}");
            }
        }
    }

    #[test]
    fn replacer_holds_back_only_a_possible_match() {
        let mut r = Replacer::new(vec![(b"secretvalue".to_vec(), Some(b"S".to_vec()))]);
        let mut out = Vec::new();
        // An SSE event ends in "\n\n": nothing of it is held back.
        r.feed(b"data: hello\n\n", &mut out).unwrap();
        assert_eq!(out, b"data: hello\n\n");
        out.clear();
        r.feed(b"data: secr", &mut out).unwrap();
        assert_eq!(out, b"data: ");
        r.feed(b"etvalue!\n\n", &mut out).unwrap();
        assert_eq!(out, b"data: S!\n\n");
        let d = Replacer::new(vec![(b"sentinel".to_vec(), None)]);
        assert_eq!(d.once(b"xx sentinel yy"), Err(0));
    }

    #[test]
    fn sentinel_becomes_real_in_any_header_for_its_host() {
        let (b, s1, _) = bindings();
        let mut side = RequestSide::new("api.test", &b);
        let req = format!(
            "POST /v1/messages?key={s1} HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {s1}\r\n\
             x-api-key: {s1}\r\nAccept-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello"
        );
        // Byte by byte: every cut of the head.
        let parts: Vec<&[u8]> = req.as_bytes().chunks(1).collect();
        let (out, ex) = send(&mut side, &parts).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains(&s1), "{text}");
        assert!(text.contains(&format!("Authorization: Bearer {REAL}\r\n")), "{text}");
        assert!(text.contains(&format!("x-api-key: {REAL}\r\n")), "{text}");
        assert!(text.contains(&format!("?key={REAL} ")), "{text}");
        assert!(!text.to_ascii_lowercase().contains("accept-encoding"), "{text}");
        assert!(text.ends_with("\r\n\r\nhello"), "{text}");
        assert_eq!(ex.len(), 1);
    }

    #[test]
    fn basic_auth_user_or_password() {
        let (b, s1, _) = bindings();
        for cred in [format!("x:{s1}"), format!("{s1}:x-oauth-basic")] {
            let mut side = RequestSide::new("api.test", &b);
            let enc = openssl::base64::encode_block(cred.as_bytes());
            let req = format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Basic {enc}\r\n\r\n");
            let (out, _) = send(&mut side, &[req.as_bytes()]).unwrap();
            let text = String::from_utf8(out).unwrap();
            let got = text.split("Basic ").nth(1).unwrap().split("\r\n").next().unwrap();
            let dec = String::from_utf8(openssl::base64::decode_block(got).unwrap()).unwrap();
            assert_eq!(dec, cred.replace(&s1, REAL));
        }
    }

    #[test]
    fn sentinel_towards_another_host_is_a_leak() {
        let (b, s1, s2) = bindings();
        // In a header, towards a host with no secret.
        let mut side = RequestSide::new("other.test", &b);
        let req = format!("GET / HTTP/1.1\r\nHost: other.test\r\nx-api-key: {s1}\r\n\r\n");
        let e = send(&mut side, &[req.as_bytes()]).unwrap_err();
        assert_eq!(
            e,
            Refusal::Leak {
                var: "ANTHROPIC_API_KEY".into(),
                host: "other.test".into()
            }
        );
        // GH_TOKEN's sentinel towards api.test (bound to another secret).
        let mut side = RequestSide::new("api.test", &b);
        let req = format!("GET /?t={s2} HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert!(matches!(send(&mut side, &[req.as_bytes()]), Err(Refusal::Leak { var, .. }) if var == "GH_TOKEN"));
        // Base64 inside Basic.
        let mut side = RequestSide::new("other.test", &b);
        let enc = openssl::base64::encode_block(format!("u:{s1}").as_bytes());
        let req = format!("GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Basic {enc}\r\n\r\n");
        assert!(matches!(send(&mut side, &[req.as_bytes()]), Err(Refusal::Leak { .. })));
        // In a chunked body, cut across chunks and reads: refused, and the
        // piece holding the sentinel is never output.
        let mut side = RequestSide::new("other.test", &b);
        let (half1, half2) = s1.split_at(20);
        let head = b"POST / HTTP/1.1\r\nHost: other.test\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let c1 = format!("{:x}\r\nabc{half1}\r\n", half1.len() + 3);
        let c2 = format!("{:x}\r\n{half2}\r\n0\r\n\r\n", half2.len());
        let mut out = Vec::new();
        let mut ex = VecDeque::new();
        side.feed(&head, &mut out, &mut ex).unwrap();
        side.feed(c1.as_bytes(), &mut out, &mut ex).unwrap();
        assert!(matches!(
            side.feed(c2.as_bytes(), &mut out, &mut ex),
            Err(Refusal::Leak { .. })
        ));
        assert!(!contains(&out, &s1[..21]));
        // Content-Length body.
        let mut side = RequestSide::new("other.test", &b);
        let req = format!("POST / HTTP/1.1\r\nHost: other.test\r\nContent-Length: 60\r\n\r\n{{\"k\":\"{s1}\"}}");
        assert!(matches!(send(&mut side, &[req.as_bytes()]), Err(Refusal::Leak { .. })));
    }

    #[test]
    fn no_secret_host_without_sentinel_passes_unchanged() {
        let (b, _, _) = bindings();
        let mut side = RequestSide::new("other.test", &b);
        let req = b"GET /x HTTP/1.1\r\nHost: other.test\r\nAccept-Encoding: gzip\r\n\r\n";
        let (out, _) = send(&mut side, &[req]).unwrap();
        assert_eq!(out, req);
    }

    #[test]
    fn framing_attacks_are_refused() {
        let (b, s1, _) = bindings();
        let cases: Vec<String> = vec![
            "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n".into(),
            "GET / HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n".into(),
            "GET / HTTP/1.1\r\n\r\n".into(),
            "GET http://evil.test/ HTTP/1.1\r\nHost: api.test\r\n\r\n".into(),
            "POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
            "POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n".into(),
            "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked, gzip\r\n\r\n".into(),
            "GET / HTTP/1.1\r\nHost: api.test\r\nX: a\r\n b\r\n\r\n".into(),
            "GET / HTTP/1.1\nHost: api.test\n\n".into(),
            "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test\r\n\r\n".into(),
            "GET / HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n".into(),
            "GET / HTTP/2.0\r\nHost: api.test\r\n\r\n".into(),
            format!("GET / HTTP/1.1\r\nHost: api.test\r\nX: {}\r\n", "a".repeat(MAX_HEAD)),
        ];
        for c in cases {
            let mut side = RequestSide::new("api.test", &b);
            let r = send(&mut side, &[c.as_bytes()]);
            assert!(
                matches!(r, Err(Refusal::BadRequest(_))),
                "{:?}: {r:?}",
                &c[..c.len().min(90)]
            );
        }
        // A smuggled second request after a body is parsed and swapped too.
        let mut side = RequestSide::new("api.test", &b);
        let req = format!(
            "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
             GET / HTTP/1.1\r\nHost: api.test\r\nx-api-key: {s1}\r\n\r\n"
        );
        let (out, ex) = send(&mut side, &[req.as_bytes()]).unwrap();
        assert_eq!(ex.len(), 2);
        assert!(contains(&out, &format!("x-api-key: {REAL}")) && !contains(&out, &s1));
        assert!(contains(&out, "3\r\nabc\r\n0\r\n\r\n"));
        // Trailers never reach the server.
        let mut side = RequestSide::new("api.test", &b);
        let req = "POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\nGET /smuggled HTTP/1.1\r\n\r\n";
        let (out, ex) = send(&mut side, &[req.as_bytes()]).unwrap();
        assert!(out.ends_with(b"1\r\na\r\n0\r\n\r\n") && !contains(&out, "X-T") && !contains(&out, "smuggled"));
        assert_eq!(ex.len(), 1);
    }

    fn receive(side: &mut ResponseSide, ex: &mut VecDeque<Expect>, parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in parts {
            side.feed(p, &mut out, ex).unwrap();
        }
        side.finish(&mut out);
        out
    }

    /// Decodes a chunked body (test oracle).
    fn dechunk(mut b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap(), 16).unwrap();
            b = &b[nl + 2..];
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&b[..n]);
            b = &b[n + 2..];
        }
    }

    #[test]
    fn real_value_in_response_becomes_sentinel() {
        let (b, s1, s2) = bindings();
        let body = format!("{{\"echo\":\"{REAL}\",\"other\":\"{OTHER_REAL}\"}}");
        let resp = format!(
            "HTTP/1.1 200 OK\r\nX-Echo: Bearer {REAL}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        for step in [1, 7, resp.len()] {
            let mut side = ResponseSide::new(&b);
            let mut ex = VecDeque::from([Expect {
                head: false,
                http10: false,
            }]);
            let parts: Vec<&[u8]> = resp.as_bytes().chunks(step).collect();
            let out = receive(&mut side, &mut ex, &parts);
            let text = String::from_utf8(out.clone()).unwrap();
            assert!(!text.contains(REAL) && !text.contains(OTHER_REAL), "{text}");
            assert!(text.contains(&format!("X-Echo: Bearer {s1}\r\n")), "{text}");
            assert!(
                text.contains("Transfer-Encoding: chunked") && !text.contains("Content-Length"),
                "{text}"
            );
            let (_, rest) = text.split_once("\r\n\r\n").unwrap();
            let decoded = String::from_utf8(dechunk(rest.as_bytes())).unwrap();
            assert_eq!(decoded, body.replace(REAL, &s1).replace(OTHER_REAL, &s2));
            assert!(ex.is_empty());
        }
    }

    #[test]
    fn chunked_and_sse_stream_without_holding_events() {
        let (b, s1, _) = bindings();
        let mut side = ResponseSide::new(&b);
        let mut ex = VecDeque::from([Expect {
            head: false,
            http10: false,
        }]);
        let mut out = Vec::new();
        side.feed(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
            &mut out,
            &mut ex,
        )
        .unwrap();
        out.clear();
        // Each event is out as soon as its chunk is in.
        for i in 0..3 {
            let ev = format!("data: event {i}\n\n");
            side.feed(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes(), &mut out, &mut ex)
                .unwrap();
            assert!(contains(&out, &ev), "event {i} held back");
            out.clear();
        }
        // A real value cut across two chunks.
        let (a, z) = REAL.split_at(10);
        side.feed(
            format!("{:x}\r\ndata: {a}\r\n", a.len() + 6).as_bytes(),
            &mut out,
            &mut ex,
        )
        .unwrap();
        side.feed(
            format!("{:x}\r\n{z}\n\n\r\n0\r\n\r\n", z.len() + 2).as_bytes(),
            &mut out,
            &mut ex,
        )
        .unwrap();
        let text = String::from_utf8(dechunk(&out)).unwrap();
        assert_eq!(text, format!("data: {s1}\n\n"));
        assert!(out.ends_with(b"0\r\n\r\n"));
    }

    #[test]
    fn head_informational_and_http10_responses() {
        let (b, s1, _) = bindings();
        let mut side = ResponseSide::new(&b);
        let mut ex = VecDeque::from([
            Expect {
                head: true,
                http10: false,
            },
            Expect {
                head: false,
                http10: false,
            },
        ]);
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n\
             HTTP/1.1 204 No Content\r\nX-K: {REAL}\r\n\r\n"
        );
        let out = receive(&mut side, &mut ex, &[resp.as_bytes()]);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("Content-Length: 99") && text.contains("100 Continue"),
            "{text}"
        );
        assert!(text.contains(&format!("X-K: {s1}")), "{text}");
        assert!(ex.is_empty());

        let mut side = ResponseSide::new(&b);
        let mut ex = VecDeque::from([Expect {
            head: false,
            http10: true,
        }]);
        let resp = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{REAL}", REAL.len());
        let out = receive(&mut side, &mut ex, &[resp.as_bytes()]);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("Connection: close") && text.ends_with(&s1), "{text}");
        assert!(side.closing());
        // A close-delimited body, value cut at the very end.
        let mut side = ResponseSide::new(&b);
        let mut ex = VecDeque::from([Expect {
            head: false,
            http10: false,
        }]);
        let out = receive(
            &mut side,
            &mut ex,
            &[b"HTTP/1.1 200 OK\r\n\r\nabc ", &REAL.as_bytes()[..5]],
        );
        assert!(out.ends_with(&REAL.as_bytes()[..5]));
        let mut ex = VecDeque::new();
        let mut side = ResponseSide::new(&b);
        assert!(side.feed(b"HTTP/1.1 200 OK\r\n\r\n", &mut Vec::new(), &mut ex).is_err());
    }
}
