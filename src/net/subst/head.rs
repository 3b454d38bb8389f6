//! Heads: parsing a request or response head (bounded, strict), writing
//! one out, and how its body is framed.

use super::MAX_HEAD;

/// A parsed head: the first line's three parts and the header fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Head {
    /// Method (request) or version (response).
    pub first: Vec<u8>,
    /// Target (request) or status code (response).
    pub second: Vec<u8>,
    /// Version (request) or reason phrase (response).
    pub third: Vec<u8>,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Head {
    pub(super) fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v.as_slice())
    }

    pub(super) fn remove(&mut self, name: &str) {
        self.fields.retain(|(n, _)| !n.eq_ignore_ascii_case(name.as_bytes()));
    }

    pub(super) fn serialize(&self, out: &mut Vec<u8>) {
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
pub(super) fn parse_head(buf: &[u8], request: bool) -> Result<Option<(Head, usize)>, &'static str> {
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
pub(super) enum Framing {
    None,
    Length(u64),
    Chunked,
    /// Response only: until the connection closes.
    Close,
}

pub(super) fn framing(head: &Head) -> Result<Framing, &'static str> {
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

/// A response from a bound host: only codings the scan can read. The
/// gate asked for `Accept-Encoding: identity`; any other
/// `Content-Encoding` (any case, any list) would hide a real value from
/// it, and so would a transfer coding other than `chunked`.
pub(super) fn scannable(head: &Head) -> Result<(), &'static str> {
    let list = |name: &'static str| -> Vec<Vec<u8>> {
        head.get_all(name)
            .flat_map(|v| v.split(|c| *c == b','))
            .map(|c| c.trim_ascii().to_ascii_lowercase())
            .filter(|c| !c.is_empty())
            .collect()
    };
    if list("content-encoding").iter().any(|c| c != b"identity") {
        return Err("a Content-Encoding other than identity, which the gate did not ask for and cannot scan");
    }
    let te = list("transfer-encoding");
    if !te.is_empty() && te != [b"chunked".to_vec()] {
        return Err("a Transfer-Encoding other than chunked, which the gate cannot scan");
    }
    Ok(())
}
