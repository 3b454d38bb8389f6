//! Bodies: decoding a length-framed, chunked or close-delimited body as it
//! arrives (trailers taken apart, never forwarded), and writing payload
//! out again, re-chunked when its length changes.

use super::{Refusal, MAX_LINE};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chunk {
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
pub(super) enum Body {
    Length(u64),
    Chunked(Chunk),
    Close,
}

/// What [`Body::decode`] did: bytes consumed, and the trailer section when
/// the body ended (empty for a length-framed one).
pub(super) struct Decoded {
    pub(super) used: usize,
    pub(super) end: Option<Vec<u8>>,
}

impl Body {
    pub(super) fn decode(
        &mut self,
        input: &[u8],
        data: &mut dyn FnMut(&[u8]) -> Result<(), Refusal>,
    ) -> Result<Decoded, Refusal> {
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

pub(super) fn emit(out: &mut Vec<u8>, data: &[u8], rechunk: bool) {
    if !rechunk {
        out.extend_from_slice(data);
    } else if !data.is_empty() {
        out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}
