//! The response side, towards the sandbox: every real value in a head
//! (status line, header names and values) or body becomes its sentinel,
//! streaming; a body whose length changes is re-chunked (or
//! close-delimited to an HTTP/1.0 client); from a bound host, a coding
//! the scan cannot read is refused.

use std::collections::VecDeque;

use super::body::{emit, Body, Chunk};
use super::head::{framing, parse_head, scannable, Framing};
use super::replace::Replacer;
use super::{Binding, Expect, Refusal};

/// Distinct `Basic` credentials with a real value one connection may
/// carry (each is one more pattern the response scan looks for).
const MAX_ENCODED: usize = 64;

/// The responses of one connection, towards the sandbox: real -> sentinel.
#[derive(Debug)]
pub struct ResponseSide {
    repl: Replacer,
    /// How many of `repl`'s patterns are the secrets' values (the rest are
    /// `Basic` credentials, [`ResponseSide::add_encoded`]).
    base: usize,
    /// A secret is bound to the connection's host: only codings the scan
    /// reads (identity content, chunked transfer).
    bound: bool,
    pending: Vec<u8>,
    /// The body being relayed, and whether it is re-chunked.
    body: Option<(Body, bool)>,
    closing: bool,
}

impl ResponseSide {
    /// The responses of a connection to `host`. Every secret's real value
    /// is replaced, whatever host it is bound to.
    pub fn new(host: &str, bindings: &[Binding]) -> ResponseSide {
        let pats = bindings
            .iter()
            .map(|b| (b.real.expose().to_vec(), Some(b.sentinel.as_bytes().to_vec())))
            .collect();
        ResponseSide {
            base: bindings.len(),
            repl: Replacer::new(pats),
            bound: bindings.iter().any(|b| b.bound_to(host)),
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
            if self.bound {
                scannable(&head).map_err(Refusal::BadResponse)?;
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
            // Every real value anywhere in the head: the reason phrase, a
            // header name, a value (a sentinel is a token: names stay names).
            let mut text = Vec::with_capacity(256);
            head.serialize(&mut text);
            out.extend_from_slice(&self.repl.once(&text).unwrap_or_default());
            if buf.is_empty() {
                return Ok(());
            }
        }
    }

    /// Also turns these (server form, sandbox form) back, from now on:
    /// `Basic` credentials the request side encoded with a real value
    /// ([`super::RequestSide::take_encoded`]). At most [`MAX_ENCODED`]
    /// per connection; past that the connection is refused.
    pub fn add_encoded(&mut self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), Refusal> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut pats = self.repl.pats.clone();
        for (server, sandbox) in pairs {
            if !pats.iter().any(|(p, _)| *p == server) {
                pats.push((server, Some(sandbox)));
            }
        }
        if pats.len() > self.base + MAX_ENCODED {
            return Err(Refusal::BadRequest(
                "too many different Basic credentials on one connection",
            ));
        }
        let held = std::mem::take(&mut self.repl.held);
        self.repl = Replacer::new(pats);
        self.repl.held = held;
        Ok(())
    }

    /// Whether a body is being relayed (after a refusal: part of a
    /// response went out, so no error response can follow it).
    pub fn in_body(&self) -> bool {
        self.body.is_some()
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
