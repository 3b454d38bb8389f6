//! The Escalation Mailbox: `lazaret-escalate` (inside the sandbox) → Host
//! Coordinator, one request file; Host Coordinator → `lazaret-escalate`,
//! one result file. Each file is exactly one frame of the common codec
//! (`u32 LE length` + `u8 tag` + fields), nothing before or after it.
//!
//! - [`RequestMsg::Submit`], the request record (at most
//!   [`MAX_REQUEST_BYTES`]): tag 1, `id` (32 hex), `domain` (20 hex),
//!   `generation` (u64), `session` (16 hex), `client` (16 hex), `cwd`,
//!   `timeout` (u64 seconds, 1..=[`MAX_TIMEOUT_SECS`]), `justification`,
//!   `argv` (u32 count 1..=[`MAX_ARGS`], the first non-empty), `cert`
//!   (bytes: the session certificate's DER), `sig` (bytes).
//!   **The signature covers the signed part**: every byte of the frame's
//!   payload before the `sig` field (the tag through `cert`, see
//!   [`signed_part`]). The length prefix is not signed: it counts the
//!   signature, and the decoder takes only a file whose length it states
//!   exactly, so it adds nothing a forger could choose.
//! - [`ResultMsg::Deliver`], the result record (at most
//!   [`MAX_RESULT_BYTES`]): tag 1, `id` (32 hex), status (u8: 1 completed,
//!   followed by the i32 exit code; 2 denied, 3 timed out, 4 cancelled,
//!   5 failed, 6 expired), `reason`, `argv` (≤ [`MAX_ARGS`]),
//!   `stdout_truncated`, `stderr_truncated` (flags), `stdout`, `stderr`
//!   (bytes).
//!
//! Decoding is strict: bounded sizes, exact field order, no trailing bytes,
//! and every message has exactly one encoding (what decodes re-encodes to
//! the same bytes), so the signed part of a decoded request is both the
//! bytes that were read and [`signed_part`] of what they say.
//!
//! `lazaret-escalate` links this module from the library
//! (`lazaret::mailbox`).

use std::fmt;

use crate::escalation::{
    AgentRequest, Outcome, Request, Status, MAX_AGENT_ANSWER, MAX_AGENT_BODY, MAX_ARGS, MAX_REQUEST_BYTES,
    MAX_RESULT_BYTES, MAX_TIMEOUT_SECS,
};
pub use crate::wire::codec::Message;
use crate::wire::codec::{Dec, DecodeError, Enc};

/// `lazaret-escalate` → Host Coordinator (a `<id>.req` file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestMsg {
    /// A request and the session key's signature over its signed part.
    Submit { request: Request, sig: Vec<u8> },
    /// One SSH agent message of the session (issue 51), signed the same way.
    Agent { request: AgentRequest, sig: Vec<u8> },
}

/// Host Coordinator → `lazaret-escalate` (a `<id>.res` file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultMsg {
    /// How the request ended.
    Deliver(Outcome),
    /// The agent's answer to an [`RequestMsg::Agent`]: its id and the
    /// answer body (type byte and contents; a refusal is `SSH_AGENT_FAILURE`).
    AgentReply { id: String, body: Vec<u8> },
}

const SUBMIT: u8 = 1;
const AGENT: u8 = 2;
const DELIVER: u8 = 1;
const AGENT_REPLY: u8 = 2;

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn dec_hex(d: &mut Dec, len: usize, what: &'static str) -> Result<String, DecodeError> {
    let s = d.str()?;
    if !is_hex(&s, len) {
        return Err(DecodeError::BadValue(what));
    }
    Ok(s)
}

/// An argv of at most [`MAX_ARGS`], counted before anything is allocated.
fn dec_argv(d: &mut Dec) -> Result<Vec<String>, DecodeError> {
    let n = d.count()? as usize;
    if n > MAX_ARGS {
        return Err(DecodeError::BadValue("argc"));
    }
    (0..n).map(|_| d.str()).collect()
}

fn enc_body(e: &mut Enc, r: &Request) {
    e.str(&r.id)
        .str(&r.domain)
        .u64(r.generation)
        .str(&r.session)
        .str(&r.client)
        .str(&r.cwd)
        .u64(r.timeout_secs)
        .str(&r.justification)
        .strs(&r.argv)
        .bytes(&r.cert);
}

fn enc_agent(e: &mut Enc, r: &AgentRequest) {
    e.str(&r.id)
        .str(&r.domain)
        .u64(r.generation)
        .str(&r.session)
        .str(&r.client)
        .str(&r.conn)
        .bytes(&r.body)
        .bytes(&r.cert);
}

/// The bytes the session key signs in an agent record: its payload up to
/// and including `cert`.
pub fn agent_signed_part(r: &AgentRequest) -> Vec<u8> {
    let mut e = Enc::new(AGENT);
    enc_agent(&mut e, r);
    e.finish().split_off(4)
}

/// The agent record: one `Agent` frame.
pub fn encode_agent_request(r: &AgentRequest, sig: &[u8]) -> Vec<u8> {
    RequestMsg::Agent {
        request: r.clone(),
        sig: sig.to_vec(),
    }
    .encode()
}

/// The bytes the session key signs: the request's payload up to and
/// including `cert` (the record without its length prefix and `sig`).
pub fn signed_part(r: &Request) -> Vec<u8> {
    let mut e = Enc::new(SUBMIT);
    enc_body(&mut e, r);
    e.finish().split_off(4)
}

/// The request record: one `Submit` frame.
pub fn encode_request(r: &Request, sig: &[u8]) -> Vec<u8> {
    RequestMsg::Submit {
        request: r.clone(),
        sig: sig.to_vec(),
    }
    .encode()
}

impl Message for RequestMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            RequestMsg::Submit { request, sig } => {
                let mut e = Enc::new(SUBMIT);
                enc_body(&mut e, request);
                e.bytes(sig).finish()
            }
            RequestMsg::Agent { request, sig } => {
                let mut e = Enc::new(AGENT);
                enc_agent(&mut e, request);
                e.bytes(sig).finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            SUBMIT => {
                let id = dec_hex(&mut d, 32, "id")?;
                let domain = dec_hex(&mut d, 20, "domain")?;
                let generation = d.u64()?;
                let session = dec_hex(&mut d, 16, "session")?;
                let client = dec_hex(&mut d, 16, "client")?;
                let cwd = d.str()?;
                let timeout_secs = d.u64()?;
                if timeout_secs == 0 || timeout_secs > MAX_TIMEOUT_SECS {
                    return Err(DecodeError::BadValue("timeout"));
                }
                let justification = d.str()?;
                let argv = dec_argv(&mut d)?;
                if argv.first().is_none_or(|a| a.is_empty()) {
                    return Err(DecodeError::BadValue("argv"));
                }
                let cert = d.bytes()?;
                let sig = d.bytes()?;
                RequestMsg::Submit {
                    request: Request {
                        id,
                        domain,
                        generation,
                        session,
                        client,
                        cwd,
                        timeout_secs,
                        justification,
                        argv,
                        cert,
                    },
                    sig,
                }
            }
            AGENT => {
                let id = dec_hex(&mut d, 32, "id")?;
                let domain = dec_hex(&mut d, 20, "domain")?;
                let generation = d.u64()?;
                let session = dec_hex(&mut d, 16, "session")?;
                let client = dec_hex(&mut d, 16, "client")?;
                let conn = dec_hex(&mut d, 16, "conn")?;
                let body = d.bytes()?;
                if body.is_empty() || body.len() > MAX_AGENT_BODY {
                    return Err(DecodeError::BadValue("agent message"));
                }
                let cert = d.bytes()?;
                let sig = d.bytes()?;
                RequestMsg::Agent {
                    request: AgentRequest {
                        id,
                        domain,
                        generation,
                        session,
                        client,
                        conn,
                        body,
                        cert,
                    },
                    sig,
                }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            RequestMsg::Submit { .. } => "Submit",
            RequestMsg::Agent { .. } => "Agent",
        }
    }
}

fn status_byte(s: &Status) -> u8 {
    match s {
        Status::Completed(_) => 1,
        Status::Denied => 2,
        Status::TimedOut => 3,
        Status::Cancelled => 4,
        Status::Failed => 5,
        Status::Expired => 6,
    }
}

impl Message for ResultMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            ResultMsg::Deliver(o) => {
                let mut e = Enc::new(DELIVER);
                e.str(&o.id).u8(status_byte(&o.status));
                if let Status::Completed(code) = o.status {
                    e.i32(code);
                }
                e.str(&o.reason)
                    .strs(&o.argv)
                    .u8(o.stdout_truncated as u8)
                    .u8(o.stderr_truncated as u8)
                    .bytes(&o.stdout)
                    .bytes(&o.stderr)
                    .finish()
            }
            ResultMsg::AgentReply { id, body } => {
                let mut e = Enc::new(AGENT_REPLY);
                e.str(id).bytes(body).finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            DELIVER => {
                let id = dec_hex(&mut d, 32, "id")?;
                let status = match d.u8()? {
                    1 => Status::Completed(d.i32()?),
                    2 => Status::Denied,
                    3 => Status::TimedOut,
                    4 => Status::Cancelled,
                    5 => Status::Failed,
                    6 => Status::Expired,
                    _ => return Err(DecodeError::BadValue("status")),
                };
                ResultMsg::Deliver(Outcome {
                    id,
                    status,
                    reason: d.str()?,
                    argv: dec_argv(&mut d)?,
                    stdout_truncated: d.flag()?,
                    stderr_truncated: d.flag()?,
                    stdout: d.bytes()?,
                    stderr: d.bytes()?,
                })
            }
            AGENT_REPLY => {
                let id = dec_hex(&mut d, 32, "id")?;
                let body = d.bytes()?;
                if body.is_empty() || body.len() > MAX_AGENT_ANSWER {
                    return Err(DecodeError::BadValue("agent answer"));
                }
                ResultMsg::AgentReply { id, body }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            ResultMsg::Deliver(_) => "Deliver",
            ResultMsg::AgentReply { .. } => "AgentReply",
        }
    }
}

/// Why a mailbox record was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The file is larger than its record may be (its size).
    TooLarge(usize),
    /// Not exactly one well-formed frame of the expected message.
    Malformed(DecodeError),
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            RecordError::TooLarge(n) => write!(f, "record of {n} bytes is over the limit"),
            RecordError::Malformed(e) => write!(f, "malformed record: {e}"),
        }
    }
}

impl std::error::Error for RecordError {}

/// A whole file that must be exactly one frame of `M`, at most `max` bytes.
/// Its own bound, not the stream maximum (a result may be megabytes).
fn one_frame<M: Message>(data: &[u8], max: usize) -> Result<M, RecordError> {
    if data.len() > max {
        return Err(RecordError::TooLarge(data.len()));
    }
    let bad = |e| Err(RecordError::Malformed(e));
    if data.len() < 4 {
        return bad(DecodeError::Truncated);
    }
    let len = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
    let rest = data.len() - 4;
    if len == 0 || len > rest {
        return bad(DecodeError::Truncated);
    }
    if len < rest {
        return bad(DecodeError::TrailingBytes(rest - len));
    }
    M::decode(&data[4..]).map_err(RecordError::Malformed)
}

/// A request file's record, either kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Command(Request),
    Agent(AgentRequest),
}

/// Strict decode of a request file of either kind: the record, the exact
/// signed bytes (taken from `data`) and the signature.
pub fn decode_record(data: &[u8]) -> Result<(Record, Vec<u8>, Vec<u8>), RecordError> {
    let (record, sig) = match one_frame::<RequestMsg>(data, MAX_REQUEST_BYTES)? {
        RequestMsg::Submit { request, sig } => (Record::Command(request), sig),
        RequestMsg::Agent { request, sig } => (Record::Agent(request), sig),
    };
    // `sig` is the last field (u32 length + bytes) and nothing follows it.
    let signed = data[4..data.len() - 4 - sig.len()].to_vec();
    Ok((record, signed, sig))
}

/// Strict decode of a command request record: the request, the exact
/// signed bytes (taken from `data`) and the signature. An agent record is
/// refused.
pub fn decode_request(data: &[u8]) -> Result<(Request, Vec<u8>, Vec<u8>), RecordError> {
    match decode_record(data)? {
        (Record::Command(r), signed, sig) => Ok((r, signed, sig)),
        (Record::Agent(_), _, _) => Err(RecordError::Malformed(DecodeError::UnknownTag(AGENT))),
    }
}

/// The result record: one `Deliver` frame.
pub fn encode_result(o: &Outcome) -> Vec<u8> {
    ResultMsg::Deliver(o.clone()).encode()
}

/// Strict decode of a command's result record (an agent reply is refused).
pub fn decode_result(data: &[u8]) -> Result<Outcome, RecordError> {
    match one_frame::<ResultMsg>(data, MAX_RESULT_BYTES)? {
        ResultMsg::Deliver(o) => Ok(o),
        ResultMsg::AgentReply { .. } => Err(RecordError::Malformed(DecodeError::UnknownTag(AGENT_REPLY))),
    }
}

/// The agent reply record for request `id`.
pub fn encode_agent_reply(id: &str, body: &[u8]) -> Vec<u8> {
    ResultMsg::AgentReply {
        id: id.to_string(),
        body: body.to_vec(),
    }
    .encode()
}

/// Strict decode of an agent reply record: its id and answer body.
pub fn decode_agent_reply(data: &[u8]) -> Result<(String, Vec<u8>), RecordError> {
    match one_frame::<ResultMsg>(data, MAX_RESULT_BYTES)? {
        ResultMsg::AgentReply { id, body } => Ok((id, body)),
        ResultMsg::Deliver(_) => Err(RecordError::Malformed(DecodeError::UnknownTag(DELIVER))),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::escalation::EXIT_DENIED;

    pub(crate) fn req() -> Request {
        Request {
            id: "a".repeat(32),
            domain: "b".repeat(20),
            generation: 3,
            session: "c".repeat(16),
            client: "d".repeat(16),
            cwd: "sub dir".into(),
            timeout_secs: 30,
            justification: "need\nthe host %".into(),
            argv: vec!["git".into(), "--version".into(), "\u{1b}[2J".into()],
            cert: vec![1, 2, 3],
        }
    }

    pub(crate) fn agent_req() -> AgentRequest {
        AgentRequest {
            id: "e".repeat(32),
            domain: "b".repeat(20),
            generation: 3,
            session: "c".repeat(16),
            client: "d".repeat(16),
            conn: "0123456789abcdef".into(),
            body: vec![11],
            cert: vec![1, 2, 3],
        }
    }

    fn outcome() -> Outcome {
        Outcome {
            id: "a".repeat(32),
            status: Status::Completed(3),
            argv: vec!["echo".into(), "x y".into()],
            reason: "approved by the developer".into(),
            stdout: b"out\n".to_vec(),
            stderr: vec![],
            stdout_truncated: true,
            stderr_truncated: false,
        }
    }

    pub(crate) fn samples_request() -> Vec<RequestMsg> {
        let mut short = req();
        short.argv = vec!["true".into()];
        short.cwd = String::new();
        short.justification = String::new();
        short.cert = Vec::new();
        vec![
            RequestMsg::Submit {
                request: req(),
                sig: b"sig".to_vec(),
            },
            RequestMsg::Submit {
                request: short,
                sig: vec![0x30; 71],
            },
            RequestMsg::Agent {
                request: agent_req(),
                sig: vec![0x30; 70],
            },
        ]
    }

    pub(crate) fn samples_result() -> Vec<ResultMsg> {
        let mut v = vec![ResultMsg::Deliver(outcome())];
        for status in [
            Status::Completed(-1),
            Status::Denied,
            Status::TimedOut,
            Status::Cancelled,
            Status::Failed,
            Status::Expired,
        ] {
            v.push(ResultMsg::Deliver(Outcome {
                status,
                argv: Vec::new(),
                stdout: Vec::new(),
                stdout_truncated: false,
                ..outcome()
            }));
        }
        v.push(ResultMsg::AgentReply {
            id: "e".repeat(32),
            body: vec![5],
        });
        v
    }

    #[test]
    fn request_round_trips_and_the_signed_part_is_exact() {
        let r = req();
        let rec = encode_request(&r, b"sig");
        let (back, signed, sig) = decode_request(&rec).unwrap();
        assert_eq!(back, r);
        assert_eq!(signed, signed_part(&r));
        assert_eq!(&rec[4..4 + signed.len()], &signed[..]);
        assert_eq!(sig, b"sig");
        // The id sits at a fixed place (tests and tools read it there).
        assert_eq!(&rec[9..41], r.id.as_bytes());
        assert_eq!(rec[4], SUBMIT);
    }

    #[test]
    fn tampering_and_garbage_are_rejected() {
        let rec = encode_request(&req(), b"sig");
        let mut t = rec.clone();
        t.push(b'\n');
        assert_eq!(
            decode_request(&t),
            Err(RecordError::Malformed(DecodeError::TrailingBytes(1)))
        );
        assert!(decode_request(&rec[..rec.len() - 1]).is_err());
        // One id byte that is not lower-case hex; a timeout out of range;
        // an empty or oversized argv.
        let mut bad = rec.clone();
        bad[9] = b'/';
        assert_eq!(
            decode_request(&bad),
            Err(RecordError::Malformed(DecodeError::BadValue("id")))
        );
        for (timeout, argv) in [
            (0, vec!["x".to_string()]),
            (MAX_TIMEOUT_SECS + 1, vec!["x".to_string()]),
            (1, vec![]),
            (1, vec![String::new()]),
            (1, vec!["x".to_string(); MAX_ARGS + 1]),
        ] {
            let r = Request {
                timeout_secs: timeout,
                argv,
                ..req()
            };
            assert!(decode_request(&encode_request(&r, b"s")).is_err(), "{r:?}");
        }
        let big = Request {
            justification: "j".repeat(MAX_REQUEST_BYTES),
            ..req()
        };
        assert!(matches!(
            decode_request(&encode_request(&big, b"s")),
            Err(RecordError::TooLarge(_))
        ));
        // The former text record, pure noise, nothing.
        assert!(decode_request(b"LZESC1\nid 00\n").is_err());
        assert!(decode_request(&[0xff, 0xfe]).is_err());
        assert!(decode_request(b"").is_err());
        // A result is not a request, nor the reverse.
        assert!(decode_request(&encode_result(&outcome())).is_err());
        assert!(decode_result(&rec).is_err());
    }

    /// Variants the sandbox could try on a record it writes itself: an
    /// argument that is not UTF-8 (a host command must never see bytes the
    /// prompt showed differently), and a length prefix that claims more or
    /// less than the file holds.
    #[test]
    fn non_utf8_arguments_and_lying_lengths_are_rejected() {
        let r = Request {
            argv: vec!["touch".into(), "markXer".into()],
            ..req()
        };
        let rec = encode_request(&r, b"sig");
        let at = rec.windows(7).position(|w| w == b"markXer").unwrap();
        let mut bad = rec.clone();
        bad[at + 4] = 0xff;
        assert!(decode_request(&bad).is_err(), "a non-UTF-8 argument was accepted");
        assert!(decode_request(&rec).is_ok());
        for delta in [1i64, -1, 1 << 20] {
            let mut lie = rec.clone();
            let n = u32::from_le_bytes(lie[..4].try_into().unwrap()) as i64 + delta;
            lie[..4].copy_from_slice(&(n as u32).to_le_bytes());
            assert!(decode_request(&lie).is_err(), "length off by {delta} was accepted");
        }
    }

    #[test]
    fn agent_records_round_trip_and_are_bounded() {
        let r = agent_req();
        let rec = encode_agent_request(&r, b"sig");
        let (back, signed, sig) = decode_record(&rec).unwrap();
        assert_eq!(back, Record::Agent(r.clone()));
        assert_eq!(signed, agent_signed_part(&r));
        assert_eq!(sig, b"sig");
        // Not a command request, and a command request is not an agent one.
        assert!(decode_request(&rec).is_err());
        assert!(matches!(
            decode_record(&encode_request(&req(), b"s")),
            Ok((Record::Command(_), _, _))
        ));
        for body in [vec![], vec![0u8; MAX_AGENT_BODY + 1]] {
            let bad = AgentRequest { body, ..agent_req() };
            assert!(decode_record(&encode_agent_request(&bad, b"s")).is_err());
        }
        let bad = AgentRequest {
            conn: "xyz".into(),
            ..agent_req()
        };
        assert!(decode_record(&encode_agent_request(&bad, b"s")).is_err());
        let reply = encode_agent_reply(&"e".repeat(32), &[14, 0, 0, 0, 0]);
        assert_eq!(
            decode_agent_reply(&reply).unwrap(),
            ("e".repeat(32), vec![14, 0, 0, 0, 0])
        );
        assert!(decode_result(&reply).is_err());
        assert!(decode_agent_reply(&encode_result(&outcome())).is_err());
        assert!(decode_agent_reply(&encode_agent_reply(&"e".repeat(32), &[])).is_err());
    }

    #[test]
    fn outcome_round_trips() {
        let o = outcome();
        assert_eq!(decode_result(&encode_result(&o)).unwrap(), o);
        let d = Outcome {
            status: Status::Denied,
            ..o
        };
        assert_eq!(
            decode_result(&encode_result(&d)).unwrap().status.exit_code(),
            EXIT_DENIED
        );
        // A result may be larger than a stream frame, up to its own bound.
        let big = Outcome {
            stdout: vec![b'x'; crate::escalation::OUTPUT_MAX_BYTES],
            stderr: vec![b'y'; crate::escalation::OUTPUT_MAX_BYTES],
            ..outcome()
        };
        assert_eq!(decode_result(&encode_result(&big)).unwrap(), big);
        let mut huge = encode_result(&big);
        huge.resize(MAX_RESULT_BYTES + 1, 0);
        assert!(matches!(decode_result(&huge), Err(RecordError::TooLarge(_))));
    }
}
