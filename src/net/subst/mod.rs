//! The secret swap (pure): what the egress gate does to the HTTP/1.1 bytes
//! of a connection to a name that has secrets bound (docs/network.md,
//! "Secrets").
//!
//! Towards the server ([`RequestSide`]): each request head is parsed
//! (bounded, strict: CRLF only, no folded lines, no `Content-Length` next
//! to `Transfer-Encoding`, one `Host` naming the connection's own host,
//! which a connection to a bound host needs on every request, HTTP/1.0
//! included). A secret's sentinel becomes the real value only in the
//! values of the request headers the secret names ([`Binding::headers`];
//! also inside `Basic` credentials, decoded and encoded again), and only
//! on a connection the gate opened with verified TLS to the bound name
//! ([`Upstream::Verified`]) unless the secret opts in to plain HTTP: there
//! the sentinel refuses the request ([`Refusal::Downgrade`]). Anywhere
//! else (the target, a header name, another header, the body) a bound
//! sentinel is left as it is. A sentinel of a secret that is *not* bound
//! to this host, anywhere in the head or the body, refuses the request
//! before any byte of it is sent ([`Refusal::Leak`]). Bodies stream
//! through as they arrive; chunked trailers are dropped both ways (never
//! parsed, never forwarded).
//!
//! Towards the sandbox ([`ResponseSide`]): every real value in a response
//! head (status line, header names and values) or body becomes its
//! sentinel, streaming (a partial match at the end of a read is held back
//! only while it can still become a match, so a server-sent event is
//! never delayed). A body whose length changes is sent chunked
//! (close-delimited to an HTTP/1.0 client). Requests to a bound host ask
//! for `Accept-Encoding: identity` and whole bodies (no `Range`, which
//! could cut an echoed value in two responses); a response from it with any other
//! `Content-Encoding`, or a `Transfer-Encoding` other than `chunked`, is
//! refused (the scan could not see into it).
//!
//! Nothing here does I/O: the gate feeds bytes in and writes what comes out.
//!
//! This file holds the limits and the types the gate sees ([`Binding`],
//! [`Refusal`], [`Expect`]); `replace.rs` the streaming replacement,
//! `head.rs` heads and framing, `body.rs` body decoding, `request.rs` and
//! `response.rs` the two sides; unit tests in `tests.rs`.

use crate::config::secrets::SecretValue;

mod body;
mod head;
mod replace;
mod request;
mod response;
#[cfg(test)]
mod tests;

pub use self::request::RequestSide;
pub use self::response::ResponseSide;

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
    /// Lowercase names of the request headers the sentinel is replaced in
    /// (`headers`, default [`crate::config::secrets::DEFAULT_HEADERS`]);
    /// nowhere else.
    pub headers: Vec<String>,
    /// `plain_http = true`: the real value may also go into a connection
    /// without verified TLS (plain HTTP) to a bound host.
    pub plain_http: bool,
}

impl Binding {
    fn bound_to(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    fn names_header(&self, name: &[u8]) -> bool {
        self.headers.iter().any(|h| h.as_bytes().eq_ignore_ascii_case(name))
    }
}

/// What the gate's own connection to the host is: whether a real value
/// may be written into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// TLS the gate opened to the bound name, the certificate verified
    /// against the system roots (or the configured CA) with the name
    /// checked.
    Verified,
    /// Anything else: plain HTTP, whatever address the name resolved to.
    Plain,
}

/// Why a request is not sent on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A sentinel towards a host its secret is not bound to (the secret's
    /// variable name and the host).
    Leak { var: String, host: String },
    /// A sentinel, where it would be swapped, of a secret bound to this
    /// host, on a connection without verified TLS (the secret's variable
    /// name and the host): the real value would cross in cleartext.
    Downgrade { var: String, host: String },
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
            Refusal::Downgrade { var, host } => write!(
                f,
                "the secret {var} goes to {} only over TLS the gate verifies, and this is plain HTTP (downgrade; refused)",
                crate::display::escape(host)
            ),
            Refusal::BadRequest(why) => write!(f, "request refused: {why}"),
            Refusal::BadResponse(why) => write!(f, "response refused: {why}"),
        }
    }
}

/// What the response side must know of each request, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expect {
    /// `HEAD`: the response has no body whatever its head says.
    pub head: bool,
    /// An HTTP/1.0 client: no chunked responses.
    pub http10: bool,
}
