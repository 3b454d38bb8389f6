//! The Client CLI ↔ Host Coordinator protocol: length-prefixed frames with a
//! hand-written codec, one closed message enum per direction; each message's
//! tag and fields are named once, in wire order (`codec::messages!`, and
//! `codec::record!` for the structs they carry).
//!
//! Frame: `u32 LE payload length` + payload; payload = `u8 tag` + fields.
//! Fields: `u8`, `u16`/`u32`/`u64`/`i32` little endian, byte strings as
//! `u32 length + bytes`, lists as `u32 count + items`. A length is checked
//! against what remains of the frame before anything is allocated, and the
//! frame length against [`MAX_FRAME_LEN`] before the frame is buffered.

use std::fmt;

use crate::config::ports::{PortForward, Taken};
use crate::domain::{DomainId, Generation, InvalidId};
use crate::wire::basic::{BasicInfo, BasicRequest};
use crate::wire::codec::{messages, record, Dec, DecodeError, Enc, Field, Listed};

/// Bumped on any incompatible change; the handshake refuses a mismatch
/// (only the frozen basic exchange, `wire::basic`, crosses versions).
pub const PROTOCOL_VERSION: u32 = 4;

/// The protocol version this process speaks: [`PROTOCOL_VERSION`], or in a
/// `fault-injection` build `LAZARET_FAULT_PROTOCOL=N[/no-basic]` (an
/// upgrade test's stand-in for another build's client and coordinator).
pub fn protocol_version() -> u32 {
    fault_protocol().map_or(PROTOCOL_VERSION, |(v, _)| v)
}

/// Whether this coordinator answers the basic exchange: always, except in
/// a `fault-injection` build told `LAZARET_FAULT_PROTOCOL=N/no-basic` (a
/// stand-in for a build from before the basic exchange, which drops a
/// frame with a tag it does not know).
pub fn answers_basic() -> bool {
    fault_protocol().is_none_or(|(_, basic)| basic)
}

fn fault_protocol() -> Option<(u32, bool)> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    let v = std::env::var("LAZARET_FAULT_PROTOCOL").ok()?;
    let (n, basic) = match v.split_once('/') {
        Some((n, "no-basic")) => (n, false),
        Some(_) => return None,
        None => (v.as_str(), true),
    };
    Some((n.parse().ok()?, basic))
}
/// Largest chunk of terminal or pipe data sent in one frame.
pub const MAX_DATA_CHUNK: usize = 32 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WinSize {
    pub rows: u16,
    pub cols: u16,
}

/// Client CLI → Host Coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMsg {
    /// First frame on every connection.
    Hello {
        version: u32,
        client_id: String,
        profile: String,
        fingerprint: String,
    },
    /// Opens this connection's session (after Welcome).
    Open(OpenRequest),
    Stdin(Vec<u8>),
    StdinEof,
    Resize(WinSize),
    /// A control event (SIGINT, SIGQUIT, SIGTSTP, …) for the session's guest group.
    Signal(u8),
    /// Asks for the Domain's status instead of opening a session.
    Status,
    /// Asks the coordinator to stop the Domain; sessions are told `reason`.
    Stop {
        reason: String,
    },
    /// Asks the coordinator to add a host port forward to the running
    /// Domain (`lazaret port add`); answered with `Status` or `Refused`.
    AddPort(PortForward),
    /// The developer's answer to an escalation prompt. `argv` is the edited
    /// command when `verdict` is [`VERDICT_EDIT`].
    Decision {
        request_id: String,
        verdict: u8,
        argv: Vec<String>,
    },
    /// Asks for the escalation requests waiting for a decision (an
    /// observer may ask, like `Status`).
    Escalations,
    /// The frozen basic request (`wire::basic`), as the first frame
    /// instead of `Hello`: answered by every build.
    Basic(BasicRequest),
}

/// What a client asks for when it opens its session ([`ClientMsg::Open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenRequest {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub tty: Option<WinSize>,
    /// `--root`: run as root even when the profile names a `user`.
    pub root: bool,
}

pub const VERDICT_DENY: u8 = 0;
pub const VERDICT_APPROVE: u8 = 1;
pub const VERDICT_EDIT: u8 = 2;
/// The prompt could not be shown in full: the terminal is too small.
pub const VERDICT_TOO_SMALL: u8 = 3;

/// An escalation request as the prompt shows it; the client lays it out
/// for its own terminal (`client::prompt`). Every string is as the sandbox
/// or the host gave it: the client escapes what it prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptInfo {
    pub request_id: String,
    pub profile: String,
    pub session_id: String,
    pub argv: Vec<String>,
    /// The host directory the command runs in (resolved by the broker).
    pub cwd: String,
    pub justification: String,
    /// Seconds left to decide.
    pub timeout_s: u64,
    /// Non-empty for a signature the sandbox asks of the developer's SSH
    /// agent (issue 51): what is signed, one line each (the key, the use,
    /// the server or namespace and hash). `argv`, `cwd` and
    /// `justification` are then empty, and the only answers are yes and no.
    pub ssh: Vec<String>,
}

/// A request waiting for a decision, for `lazaret escalations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingInfo {
    pub prompt: PromptInfo,
    /// On screen now (else queued behind another one).
    pub shown: bool,
}

/// A session's ID: 16 lowercase hex digits, minted by the coordinator for
/// each session it opens. It names the session's pid file and store row and
/// is bound into the Session Anchor's certificate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    pub const LEN: usize = 16;

    /// A fresh random session id.
    pub fn random() -> SessionId {
        SessionId(crate::domain::random_id(Self::LEN / 2))
    }

    pub fn parse(s: &str) -> Result<SessionId, InvalidId> {
        if crate::domain::is_lower_hex(s, Self::LEN) {
            Ok(SessionId(s.to_string()))
        } else {
            Err(InvalidId {
                what: "session ID",
                expected: "16 lowercase hex digits",
            })
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&SessionId> for String {
    fn from(id: &SessionId) -> String {
        id.0.clone()
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for SessionId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

/// The typed ids travel as the same bytes as their plain form (`u64`,
/// string); a value outside the type's shape is `BadValue`.
impl Field for Generation {
    fn put(&self, e: &mut Enc) {
        e.u64(self.get());
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        Generation::new(d.u64()?).map_err(|_| DecodeError::BadValue("generation"))
    }
}

impl Field for SessionId {
    fn put(&self, e: &mut Enc) {
        e.str(self.as_str());
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        SessionId::parse(&d.str()?).map_err(|_| DecodeError::BadValue("session id"))
    }
}

impl Field for DomainId {
    fn put(&self, e: &mut Enc) {
        e.str(self.as_str());
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        DomainId::parse(&d.str()?).map_err(|_| DecodeError::BadValue("domain id"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionInfo {
    pub session_id: SessionId,
    pub client_pid: i32,
    pub exec_pid: i32,
    pub argv0: String,
    pub tty: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusInfo {
    pub domain_id: DomainId,
    pub profile: String,
    pub workspace: String,
    pub generation: Generation,
    /// The generation's phase, as its word (`store::Phase::as_str`).
    pub phase: String,
    pub coordinator_id: String,
    pub coordinator_pid: i32,
    pub supervisor_pid: i32,
    pub runsc_pid: i32,
    pub sandbox_id: String,
    pub sessions: Vec<SessionInfo>,
    /// Unix seconds when the generation was published.
    pub started_at: i64,
    /// Escalation requests waiting for a developer's decision.
    pub pending_escalations: u32,
    /// Host port forwards (each as its `ADDR:HOSTPORT:GUESTPORT` text).
    pub ports: Vec<PortForward>,
    /// The profile's egress mode, as its word (`config::EgressMode::word`).
    pub egress: String,
}

/// Host Coordinator → Client CLI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMsg {
    Welcome {
        version: u32,
        generation: Generation,
        coordinator_id: String,
        session_id: SessionId,
    },
    Refused {
        reason: String,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit {
        code: i32,
    },
    Status(StatusInfo),
    /// The Domain is stopping; the session ends with `reason`.
    Closing {
        reason: String,
    },
    /// An escalation request for this session needs the developer: show
    /// it and answer with a Decision. Session output is held meanwhile.
    Prompt(PromptInfo),
    /// The prompt for `request_id` ended without an answer (it expired):
    /// show `text` and stop taking keystrokes as its answer.
    PromptEnd {
        request_id: String,
        text: String,
    },
    /// The requests waiting for a decision (answer to `Escalations`).
    Escalations(Vec<PendingInfo>),
    /// `AddPort` refused: the host port is taken (by another Domain, or
    /// another program on the host).
    PortTaken(Taken),
    /// The frozen basic answer (`wire::basic`).
    Basic(BasicInfo),
}

// ---- this edge's composite fields and messages -----------------------------

/// A port forward travels as its `ADDR:HOSTPORT:GUESTPORT` text, read
/// back only in that one spelling ([`PortForward::from_canonical`]: the
/// address always there, no second port, no leading zero), so a decoded
/// forward re-encodes to the same bytes.
impl Field for PortForward {
    fn put(&self, e: &mut Enc) {
        e.str(&self.to_string());
    }
    fn get(d: &mut Dec) -> Result<Self, DecodeError> {
        PortForward::from_canonical(&d.str()?).map_err(DecodeError::PortForward)
    }
}
impl Listed for PortForward {}

record!(WinSize { rows, cols });
record!(Taken { port, holder });
record!(OpenRequest {
    argv,
    env,
    cwd,
    tty,
    root,
});
record!(PromptInfo {
    request_id,
    profile,
    session_id,
    argv,
    cwd,
    justification,
    timeout_s,
    ssh,
});
record!(PendingInfo { prompt, shown });
record!(SessionInfo {
    session_id,
    client_pid,
    exec_pid,
    argv0,
    tty,
});
record!(StatusInfo {
    domain_id,
    profile,
    workspace,
    generation,
    phase,
    coordinator_id,
    coordinator_pid,
    supervisor_pid,
    runsc_pid,
    sandbox_id,
    sessions,
    started_at,
    pending_escalations,
    ports,
    egress,
});

messages!(ClientMsg {
    1 => Hello {
        version,
        client_id,
        profile,
        fingerprint,
    },
    2 => Open(open),
    3 => Stdin(data),
    4 => StdinEof,
    5 => Resize(size),
    6 => Signal(signal),
    7 => Status,
    8 => Stop { reason },
    9 => Decision {
        request_id,
        verdict,
        argv,
    },
    10 => Escalations,
    11 => AddPort(port),
    0xb0 => Basic(basic),
});

messages!(ServerMsg {
    1 => Welcome {
        version,
        generation,
        coordinator_id,
        session_id,
    },
    2 => Refused { reason },
    3 => Stdout(data),
    4 => Stderr(data),
    5 => Exit { code },
    6 => Status(status),
    7 => Closing { reason },
    8 => Prompt(prompt),
    9 => PromptEnd { request_id, text },
    10 => Escalations(pending),
    11 => PortTaken(taken),
    0xb0 => Basic(basic),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::codec::{FrameReader, Message, MAX_FRAME_LEN};

    fn samples_client() -> Vec<ClientMsg> {
        vec![
            ClientMsg::Hello {
                version: 1,
                client_id: "c".into(),
                profile: "default".into(),
                fingerprint: "f".into(),
            },
            ClientMsg::Open(OpenRequest {
                argv: vec!["sh".into(), "-c".into(), "exit 7".into()],
                env: vec![("TERM".into(), "xterm".into())],
                cwd: "/workspace/src".into(),
                tty: Some(WinSize { rows: 40, cols: 132 }),
                root: false,
            }),
            ClientMsg::Open(OpenRequest {
                argv: vec![],
                env: vec![],
                cwd: String::new(),
                tty: None,
                root: true,
            }),
            ClientMsg::Stdin(vec![0, 1, 2, 255]),
            ClientMsg::StdinEof,
            ClientMsg::Resize(WinSize { rows: 1, cols: 2 }),
            ClientMsg::Signal(2),
            ClientMsg::Status,
            ClientMsg::Stop { reason: "user".into() },
            ClientMsg::Decision {
                request_id: "r".into(),
                verdict: VERDICT_EDIT,
                argv: vec!["ls".into()],
            },
            ClientMsg::Escalations,
            ClientMsg::AddPort("127.0.0.1:0:3000".parse().unwrap()),
            ClientMsg::Basic(crate::wire::basic::BasicRequest::stop("bye")),
        ]
    }

    fn sample_prompt() -> PromptInfo {
        PromptInfo {
            request_id: "r".into(),
            profile: "default".into(),
            session_id: "s".into(),
            argv: vec!["git".into(), "status".into()],
            cwd: "/w".into(),
            justification: "why".into(),
            timeout_s: 300,
            ssh: vec!["SSH login".into()],
        }
    }

    fn samples_server() -> Vec<ServerMsg> {
        vec![
            ServerMsg::Welcome {
                version: 1,
                generation: Generation::new(9).unwrap(),
                coordinator_id: "h".into(),
                session_id: SessionId::parse("0123456789abcdef").unwrap(),
            },
            ServerMsg::Refused { reason: "no".into() },
            ServerMsg::Stdout(b"out".to_vec()),
            ServerMsg::Stderr(vec![]),
            ServerMsg::Exit { code: -1 },
            ServerMsg::Status(StatusInfo {
                domain_id: DomainId::parse("0123456789abcdef0123").unwrap(),
                profile: "default".into(),
                workspace: "/w".into(),
                generation: Generation::new(3).unwrap(),
                phase: "ready".into(),
                coordinator_id: "c".into(),
                coordinator_pid: 1,
                supervisor_pid: 2,
                runsc_pid: 3,
                sandbox_id: "lz-01234567-89ab".into(),
                sessions: vec![SessionInfo {
                    session_id: SessionId::parse("fedcba9876543210").unwrap(),
                    client_pid: 5,
                    exec_pid: 6,
                    argv0: "bash".into(),
                    tty: true,
                }],
                started_at: 1_700_000_000,
                pending_escalations: 2,
                ports: vec!["127.0.0.1:18000:8000".parse().unwrap()],
                egress: "by-name".into(),
            }),
            ServerMsg::Closing { reason: "stop".into() },
            ServerMsg::Prompt(sample_prompt()),
            ServerMsg::Escalations(vec![]),
            ServerMsg::Escalations(vec![PendingInfo {
                prompt: sample_prompt(),
                shown: true,
            }]),
            ServerMsg::PromptEnd {
                request_id: "r".into(),
                text: "expired".into(),
            },
            ServerMsg::PortTaken(Taken {
                port: "127.0.0.1:18000:8000".parse().unwrap(),
                holder: Some(DomainId::parse("0123456789abcdef0123").unwrap()),
            }),
            ServerMsg::PortTaken(Taken {
                port: "127.0.0.1:18000:8000".parse().unwrap(),
                holder: None,
            }),
            ServerMsg::Basic(crate::wire::basic::tests::info()),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        let mut r = FrameReader::default();
        for m in samples_client() {
            r.push(&m.encode());
            assert_eq!(r.next::<ClientMsg>().unwrap(), Some(m));
        }
        for m in samples_server() {
            r.push(&m.encode());
            assert_eq!(r.next::<ServerMsg>().unwrap(), Some(m));
        }
        assert!(r.is_empty());
    }

    /// The frames of every sample, as the codec wrote them before the
    /// messages were described by `messages!`/`record!`: the wire format
    /// does not move (a change here is a protocol change, which bumps
    /// [`PROTOCOL_VERSION`]).
    #[test]
    fn every_variant_keeps_its_bytes() {
        const CLIENT: &[&str] = &[
        "1a000000010100000001000000630700000064656661756c740100000066",
        "480000000203000000020000007368020000002d630600000065786974203701000000040000005445524d05000000787465726d0e0000002f776f726b73706163652f737263012800840000",
        "0f000000020000000000000000000000000001",
        "090000000304000000000102ff",
        "0100000004",
        "050000000501000200",
        "020000000602",
        "0100000007",
        "09000000080400000075736572",
        "110000000901000000720201000000020000006c73",
        "010000000a",
        "150000000b100000003132372e302e302e313a303a33303030",
        "0d000000b0010000000203000000627965",
    ];
        const SERVER: &[&str] = &[
        "260000000101000000090000000000000001000000681000000030313233343536373839616263646566",
        "0700000002020000006e6f",
        "0800000003030000006f7574",
        "050000000400000000",
        "0500000005ffffffff",
        "bc000000061400000030313233343536373839616263646566303132330700000064656661756c74020000002f7703000000000000000500000072656164790100000063010000000200000003000000100000006c7a2d30313233343536372d38396162010000001000000066656463626139383736353433323130050000000600000004000000626173680100f15365000000000200000001000000140000003132372e302e302e313a31383030303a383030300700000062792d6e616d65",
        "09000000070400000073746f70",
        "510000000801000000720700000064656661756c740100000073020000000300000067697406000000737461747573020000002f77030000007768792c010000000000000100000009000000535348206c6f67696e",
        "050000000a00000000",
        "560000000a0100000001000000720700000064656661756c740100000073020000000300000067697406000000737461747573020000002f77030000007768792c010000000000000100000009000000535348206c6f67696e01",
        "110000000901000000720700000065787069726564",
        "320000000b140000003132372e302e302e313a31383030303a3830303001140000003031323334353637383961626364656630313233",
        "1a0000000b140000003132372e302e302e313a31383030303a3830303000",
        "6e000000b0010000000300000016000000302e312e302028636f6d6d69742065396165633432291400000030313233343536373839616263646566303132330700000064656661756c74020000002f7702000000000000000500000072656164794d00000000f15365000000000100000000",
    ];
        let hex = |m: Vec<u8>| m.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let client: Vec<String> = samples_client().iter().map(|m| hex(m.encode())).collect();
        let server: Vec<String> = samples_server().iter().map(|m| hex(m.encode())).collect();
        assert_eq!(client, CLIENT);
        assert_eq!(server, SERVER);
    }

    #[test]
    fn frames_split_at_every_byte_reassemble() {
        let all: Vec<u8> = samples_client().iter().flat_map(|m| m.encode()).collect();
        let mut r = FrameReader::default();
        let mut got = Vec::new();
        for b in all {
            r.push(&[b]);
            while let Some(m) = r.next::<ClientMsg>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, samples_client());
    }

    #[test]
    fn oversized_header_is_rejected_before_buffering() {
        let mut r = FrameReader::default();
        r.push(&((MAX_FRAME_LEN as u32) + 1).to_le_bytes());
        assert_eq!(
            r.next::<ClientMsg>(),
            Err(DecodeError::FrameTooLarge(MAX_FRAME_LEN + 1))
        );
    }

    #[test]
    fn malformed_payloads_are_errors() {
        let mut r = FrameReader::default();
        r.push(&[1, 0, 0, 0, 99]);
        assert_eq!(r.next::<ClientMsg>(), Err(DecodeError::UnknownTag(99)));
        // A string length larger than the frame.
        assert_eq!(ClientMsg::decode(&[8, 255, 255, 255, 0]), Err(DecodeError::Truncated));
        // Trailing garbage after a complete message.
        assert_eq!(ClientMsg::decode(&[4, 0]), Err(DecodeError::TrailingBytes(1)));
        // A list count beyond the bound.
        assert_eq!(
            ClientMsg::decode(&[2, 0, 0, 1, 0]),
            Err(DecodeError::TooManyItems(65536))
        );
        assert_eq!(ClientMsg::decode(&[8, 1, 0, 0, 0, 0xff]), Err(DecodeError::BadUtf8));
    }

    /// The typed ids travel as their plain bytes (a `u64`, a string); a
    /// value outside the type's shape is refused, never carried on.
    #[test]
    fn typed_ids_keep_their_bytes_and_refuse_bad_values() {
        let welcome = |generation: u64, session: &str| {
            let mut e = Enc::new(1);
            e.u32(PROTOCOL_VERSION).u64(generation).str("c").str(session);
            e.finish()[4..].to_vec()
        };
        let good = welcome(7, "0123456789abcdef");
        let m = ServerMsg::decode(&good).unwrap();
        assert_eq!(
            m,
            ServerMsg::Welcome {
                version: PROTOCOL_VERSION,
                generation: Generation::new(7).unwrap(),
                coordinator_id: "c".into(),
                session_id: SessionId::parse("0123456789abcdef").unwrap(),
            }
        );
        assert_eq!(&m.encode()[4..], &good[..]);
        assert_eq!(
            ServerMsg::decode(&welcome(0, "0123456789abcdef")),
            Err(DecodeError::BadValue("generation"))
        );
        assert_eq!(
            ServerMsg::decode(&welcome(7, "../../x")),
            Err(DecodeError::BadValue("session id"))
        );
        let ServerMsg::Status(st) = &samples_server()[5] else {
            panic!("sample 5 is the status")
        };
        let mut bad = st.clone();
        bad.domain_id = DomainId::parse("0123456789abcdef0123").unwrap();
        let mut frame = ServerMsg::Status(bad).encode()[4..].to_vec();
        // The Domain ID's first byte, after the tag and its length.
        frame[5] = b'/';
        assert_eq!(ServerMsg::decode(&frame), Err(DecodeError::BadValue("domain id")));
        assert!(SessionId::parse("0123456789ABCDEF").is_err());
        assert_eq!(SessionId::random().as_str().len(), SessionId::LEN);
    }

    /// The basic messages are written as `wire::basic` freezes them, and
    /// the versioned tags stay below the basic one, so that a basic frame is
    /// never read as a versioned message of any build.
    #[test]
    fn basic_frames_keep_their_frozen_bytes_and_tag() {
        use crate::wire::basic::{frame, tests::info, BasicRequest, BASIC_TAG};
        for r in [BasicRequest::status(), BasicRequest::stop("bye")] {
            assert_eq!(ClientMsg::Basic(r.clone()).encode(), frame(&r));
        }
        assert_eq!(ServerMsg::Basic(info()).encode(), frame(&info()));
        let known = |e: Result<&'static str, DecodeError>| !matches!(e, Err(DecodeError::UnknownTag(_)));
        for t in BASIC_TAG..=255 {
            let c = ClientMsg::decode(&[t]).map(|m| m.name());
            let s = ServerMsg::decode(&[t]).map(|m| m.name());
            assert_eq!(known(c), t == BASIC_TAG, "client tag {t}");
            assert_eq!(known(s), t == BASIC_TAG, "server tag {t}");
        }
    }

    /// Every field holding a port forward (`AddPort`, `PortTaken`, the
    /// status's `ports`) reads only its canonical spelling: another one
    /// (the address left out, a second port, a leading zero, …) fails with
    /// its reason instead of decoding to a forward that re-encodes to other
    /// bytes (the fuzz crash tests/fuzz/artifacts/client_frames/).
    #[test]
    fn port_forward_fields_read_only_their_canonical_spelling() {
        use crate::config::ports::CanonicalError;
        let add_port = |text: &str| {
            let mut e = Enc::new(11);
            e.str(text);
            e.finish()[4..].to_vec()
        };
        let taken = |text: &str| {
            let mut e = Enc::new(11);
            e.str(text).u8(0);
            e.finish()[4..].to_vec()
        };
        let status = |text: &str| {
            let mut m = match samples_server().swap_remove(5) {
                ServerMsg::Status(st) => st,
                m => panic!("not the status sample: {m:?}"),
            };
            m.ports.clear();
            m.egress.clear();
            let mut payload = ServerMsg::Status(m).encode()[4..].to_vec();
            // The sample's empty list (and the empty egress word after
            // it), replaced by a one-item list of `text`.
            payload.truncate(payload.len() - 8);
            payload.extend_from_slice(&1u32.to_le_bytes());
            payload.extend_from_slice(&(text.len() as u32).to_le_bytes());
            payload.extend_from_slice(text.as_bytes());
            payload.extend_from_slice(&0u32.to_le_bytes());
            payload
        };
        for good in ["127.0.0.1:9:42", "0.0.0.0:0:3000"] {
            let payload = add_port(good);
            assert_eq!(
                &ClientMsg::decode(&payload).unwrap().encode()[4..],
                &payload[..],
                "{good}"
            );
            for payload in [taken(good), status(good)] {
                assert_eq!(
                    &ServerMsg::decode(&payload).unwrap().encode()[4..],
                    &payload[..],
                    "{good}"
                );
            }
        }
        for (bad, why) in [
            ("9:42", CanonicalError::Parts(2)),
            ("127.0.0.1:9:42:7", CanonicalError::Parts(4)),
            ("127.0.0.01:9:42", CanonicalError::Address),
            ("127.0.0.1:09:42", CanonicalError::HostPort),
            ("127.0.0.1:9:042", CanonicalError::GuestPort),
        ] {
            let want = Err(DecodeError::PortForward(why));
            assert_eq!(
                ClientMsg::decode(&add_port(bad)).map(|m| m.name()),
                want,
                "AddPort {bad}"
            );
            assert_eq!(
                ServerMsg::decode(&taken(bad)).map(|m| m.name()),
                want,
                "PortTaken {bad}"
            );
            assert_eq!(ServerMsg::decode(&status(bad)).map(|m| m.name()), want, "Status {bad}");
            let said = DecodeError::PortForward(why).to_string();
            assert!(
                said.contains("port forward") && said.contains(&why.to_string()),
                "{said}"
            );
        }
    }

    /// Randomized corpus: mutations of valid frames and pure noise never
    /// panic, and whatever decodes re-encodes to the same bytes.
    #[test]
    fn decoder_survives_random_and_mutated_input() {
        let valid: Vec<Vec<u8>> = samples_client()
            .iter()
            .map(|m| m.encode())
            .chain(samples_server().iter().map(|m| m.encode()))
            .collect();
        crate::wire::tests::for_each_mutation(0x9e3779b97f4a7c15, &valid, |mut input| {
            if input.len() > 4 {
                let payload = input.split_off(4);
                if let Ok(m) = ClientMsg::decode(&payload) {
                    assert_eq!(&m.encode()[4..], &payload[..]);
                }
                if let Ok(m) = ServerMsg::decode(&payload) {
                    assert_eq!(&m.encode()[4..], &payload[..]);
                }
            }
            let mut r = FrameReader::default();
            r.push(&input);
            while let Ok(Some(_)) = r.next::<ClientMsg>() {}
        });
    }
}
