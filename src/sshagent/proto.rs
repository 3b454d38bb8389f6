//! The agent protocol (draft-miller-ssh-agent) as the sandbox speaks it,
//! parsed strictly. A message is `uint32 length, byte type, contents`;
//! [`parse_request`] takes the body (type and contents) without the length.

use std::fmt;

/// The largest request body accepted: a sign request's data is an SSH
/// user-authentication request (a few hundred bytes to a few KiB with an
/// RSA key) or an `ssh-keygen -Y sign` blob (a hash, not the file).
pub const MAX_REQUEST: usize = 16 * 1024;
/// The largest answer the host agent may send back (a list of keys).
pub const MAX_ANSWER: usize = 256 * 1024;

pub const SSH_AGENT_FAILURE: u8 = 5;
pub const SSH_AGENT_SUCCESS: u8 = 6;
pub const SSH_AGENTC_REQUEST_IDENTITIES: u8 = 11;
pub const SSH_AGENT_IDENTITIES_ANSWER: u8 = 12;
pub const SSH_AGENTC_SIGN_REQUEST: u8 = 13;
pub const SSH_AGENT_SIGN_RESPONSE: u8 = 14;
pub const SSH_AGENTC_EXTENSION: u8 = 27;

/// Sign request flags a client may set: RSA with SHA-256 or SHA-512.
pub const SSH_AGENT_RSA_SHA2_256: u32 = 2;
pub const SSH_AGENT_RSA_SHA2_512: u32 = 4;

/// `SSH_MSG_USERAUTH_REQUEST`.
const SSH_MSG_USERAUTH_REQUEST: u8 = 50;

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    Empty,
    TooLarge,
    /// A field runs past the end.
    Truncated,
    /// Bytes after the last field.
    Trailing,
    /// A message type other than list, sign and the session-bind extension.
    Unsupported(u8),
    /// An extension other than `session-bind@openssh.com`.
    UnsupportedExtension,
    /// A boolean other than 0 or 1.
    BadBool,
    /// Flags other than the RSA hash choices.
    BadFlags,
    /// A field with content outside its grammar.
    BadField(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Empty => write!(f, "an empty message"),
            ParseError::TooLarge => write!(f, "a message over {MAX_REQUEST} bytes"),
            ParseError::Truncated => write!(f, "a truncated message"),
            ParseError::Trailing => write!(f, "bytes after the message"),
            ParseError::Unsupported(t) => write!(f, "message type {t} (only list and sign are served)"),
            ParseError::UnsupportedExtension => write!(f, "an extension other than session-bind@openssh.com"),
            ParseError::BadBool => write!(f, "a boolean other than 0 or 1"),
            ParseError::BadFlags => write!(f, "sign flags other than the RSA hash choices"),
            ParseError::BadField(what) => write!(f, "a malformed {what}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// A reader of SSH wire types (RFC 4251 §5).
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    pub fn byte(&mut self) -> Result<u8, ParseError> {
        let (&b, rest) = self.buf.split_first().ok_or(ParseError::Truncated)?;
        self.buf = rest;
        Ok(b)
    }

    pub fn u32(&mut self) -> Result<u32, ParseError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if self.buf.len() < n {
            return Err(ParseError::Truncated);
        }
        let (h, t) = self.buf.split_at(n);
        self.buf = t;
        Ok(h)
    }

    /// `string`: uint32 length and that many bytes.
    pub fn string(&mut self) -> Result<&'a [u8], ParseError> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }

    pub fn boolean(&mut self) -> Result<bool, ParseError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ParseError::BadBool),
        }
    }

    /// Fails unless every byte was read.
    pub fn end(&self) -> Result<(), ParseError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(ParseError::Trailing)
        }
    }

    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }
}

/// Appends an SSH `string`.
pub fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// A request the sandbox may send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `SSH_AGENTC_REQUEST_IDENTITIES`.
    List,
    /// `SSH_AGENTC_SIGN_REQUEST`.
    Sign { key: Vec<u8>, data: Vec<u8>, flags: u32 },
    /// `session-bind@openssh.com`: the server's host key, the session id,
    /// the host key's signature over it, and whether this is a forwarded
    /// agent's hop.
    SessionBind {
        host_key: Vec<u8>,
        session_id: Vec<u8>,
        signature: Vec<u8>,
        forwarding: bool,
    },
}

/// The extension OpenSSH ≥ 8.9 clients send after key exchange.
pub const SESSION_BIND: &[u8] = b"session-bind@openssh.com";

/// Parses one request body (type byte and contents).
pub fn parse_request(body: &[u8]) -> Result<Request, ParseError> {
    if body.is_empty() {
        return Err(ParseError::Empty);
    }
    if body.len() > MAX_REQUEST {
        return Err(ParseError::TooLarge);
    }
    let mut r = Reader::new(body);
    let req = match r.byte()? {
        SSH_AGENTC_REQUEST_IDENTITIES => Request::List,
        SSH_AGENTC_SIGN_REQUEST => {
            let key = r.string()?.to_vec();
            let data = r.string()?.to_vec();
            let flags = r.u32()?;
            if flags & !(SSH_AGENT_RSA_SHA2_256 | SSH_AGENT_RSA_SHA2_512) != 0 {
                return Err(ParseError::BadFlags);
            }
            if key.is_empty() {
                return Err(ParseError::BadField("key blob"));
            }
            Request::Sign { key, data, flags }
        }
        SSH_AGENTC_EXTENSION => {
            if r.string()? != SESSION_BIND {
                return Err(ParseError::UnsupportedExtension);
            }
            let host_key = r.string()?.to_vec();
            let session_id = r.string()?.to_vec();
            let signature = r.string()?.to_vec();
            let forwarding = r.boolean()?;
            if !(16..=64).contains(&session_id.len()) {
                return Err(ParseError::BadField("session id"));
            }
            Request::SessionBind {
                host_key,
                session_id,
                signature,
                forwarding,
            }
        }
        t => return Err(ParseError::Unsupported(t)),
    };
    r.end()?;
    Ok(req)
}

/// Encodes a request body (the inverse of [`parse_request`]).
pub fn encode_request(req: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    match req {
        Request::List => out.push(SSH_AGENTC_REQUEST_IDENTITIES),
        Request::Sign { key, data, flags } => {
            out.push(SSH_AGENTC_SIGN_REQUEST);
            put_string(&mut out, key);
            put_string(&mut out, data);
            out.extend_from_slice(&flags.to_be_bytes());
        }
        Request::SessionBind {
            host_key,
            session_id,
            signature,
            forwarding,
        } => {
            out.push(SSH_AGENTC_EXTENSION);
            put_string(&mut out, SESSION_BIND);
            put_string(&mut out, host_key);
            put_string(&mut out, session_id);
            put_string(&mut out, signature);
            out.push(u8::from(*forwarding));
        }
    }
    out
}

/// One key of an identities answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub blob: Vec<u8>,
    pub comment: Vec<u8>,
}

/// Parses the host agent's `SSH_AGENT_IDENTITIES_ANSWER` body.
pub fn parse_identities(body: &[u8]) -> Result<Vec<Identity>, ParseError> {
    if body.len() > MAX_ANSWER {
        return Err(ParseError::TooLarge);
    }
    let mut r = Reader::new(body);
    match r.byte()? {
        SSH_AGENT_IDENTITIES_ANSWER => {}
        t => return Err(ParseError::Unsupported(t)),
    }
    let n = r.u32()? as usize;
    // Each identity takes at least 8 bytes: no allocation from a lying count.
    if n > r.rest().len() / 8 {
        return Err(ParseError::Truncated);
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let blob = r.string()?.to_vec();
        let comment = r.string()?.to_vec();
        out.push(Identity { blob, comment });
    }
    r.end()?;
    Ok(out)
}

/// An identities answer body listing `ids`.
pub fn encode_identities(ids: &[Identity]) -> Vec<u8> {
    let mut out = vec![SSH_AGENT_IDENTITIES_ANSWER];
    out.extend_from_slice(&(ids.len() as u32).to_be_bytes());
    for i in ids {
        put_string(&mut out, &i.blob);
        put_string(&mut out, &i.comment);
    }
    out
}

/// Parses the host agent's `SSH_AGENT_SIGN_RESPONSE` body: the signature.
pub fn parse_sign_response(body: &[u8]) -> Result<Vec<u8>, ParseError> {
    if body.len() > MAX_ANSWER {
        return Err(ParseError::TooLarge);
    }
    let mut r = Reader::new(body);
    match r.byte()? {
        SSH_AGENT_SIGN_RESPONSE => {}
        t => return Err(ParseError::Unsupported(t)),
    }
    let sig = r.string()?.to_vec();
    r.end()?;
    Ok(sig)
}

/// A sign response body carrying `sig`.
pub fn encode_sign_response(sig: &[u8]) -> Vec<u8> {
    let mut out = vec![SSH_AGENT_SIGN_RESPONSE];
    put_string(&mut out, sig);
    out
}

/// The body of `SSH_AGENT_FAILURE` (the agent protocol has no reason text).
pub fn failure() -> Vec<u8> {
    vec![SSH_AGENT_FAILURE]
}

/// What a sign request's data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signed {
    /// An SSH `publickey` user-authentication request.
    UserAuth {
        session_id: Vec<u8>,
        user: String,
        /// The key blob inside the request (must be the key signing).
        key: Vec<u8>,
        /// `publickey-hostbound-v00@openssh.com`: the server host key the
        /// client names.
        host_key: Option<Vec<u8>>,
    },
    /// `ssh-keygen -Y sign`: the namespace, hash algorithm and the hash.
    Sshsig {
        namespace: String,
        hash_alg: String,
        hash: Vec<u8>,
    },
}

const HOSTBOUND: &[u8] = b"publickey-hostbound-v00@openssh.com";

/// Classifies a sign request's data; anything that is neither an SSH
/// user-authentication request nor an SSHSIG blob is refused.
pub fn parse_signed(data: &[u8]) -> Result<Signed, ParseError> {
    if let Some(rest) = data.strip_prefix(b"SSHSIG") {
        let mut r = Reader::new(rest);
        let namespace = r.string()?;
        let _reserved = r.string()?;
        let hash_alg = r.string()?;
        let hash = r.string()?.to_vec();
        r.end()?;
        let namespace = std::str::from_utf8(namespace)
            .ok()
            .filter(|n| crate::config::ssh_agent::valid_namespace(n))
            .ok_or(ParseError::BadField("namespace"))?;
        let hash_alg = match hash_alg {
            b"sha256" if hash.len() == 32 => "sha256",
            b"sha512" if hash.len() == 64 => "sha512",
            _ => return Err(ParseError::BadField("hash")),
        };
        return Ok(Signed::Sshsig {
            namespace: namespace.to_string(),
            hash_alg: hash_alg.to_string(),
            hash,
        });
    }
    let mut r = Reader::new(data);
    let session_id = r.string()?.to_vec();
    if !(16..=64).contains(&session_id.len()) {
        return Err(ParseError::BadField("session id"));
    }
    if r.byte()? != SSH_MSG_USERAUTH_REQUEST {
        return Err(ParseError::BadField("user-authentication request"));
    }
    let user = r.string()?;
    let user = std::str::from_utf8(user)
        .ok()
        .filter(|u| !u.is_empty() && u.len() <= 256 && !u.chars().any(char::is_control))
        .ok_or(ParseError::BadField("user name"))?
        .to_string();
    if r.string()? != b"ssh-connection" {
        return Err(ParseError::BadField("service"));
    }
    let method = r.string()?;
    let hostbound = match method {
        b"publickey" => false,
        m if m == HOSTBOUND => true,
        _ => return Err(ParseError::BadField("authentication method")),
    };
    if !r.boolean()? {
        return Err(ParseError::BadField("signature flag"));
    }
    let _alg = r.string()?;
    let key = r.string()?.to_vec();
    let host_key = if hostbound { Some(r.string()?.to_vec()) } else { None };
    r.end()?;
    Ok(Signed::UserAuth {
        session_id,
        user,
        key,
        host_key,
    })
}
