//! The Client CLI ↔ Host Coordinator protocol: length-prefixed frames with a
//! hand-written codec, one closed message enum per direction.
//!
//! Frame: `u32 LE payload length` + payload; payload = `u8 tag` + fields.
//! Fields: `u8`, `u16`/`u32`/`u64`/`i32` little endian, byte strings as
//! `u32 length + bytes`, lists as `u32 count + items`. A length is checked
//! against what remains of the frame before anything is allocated, and the
//! frame length against [`MAX_FRAME_LEN`] before the frame is buffered.

use std::fmt;

use crate::domain::{DomainId, Generation, InvalidId};
use crate::wire::codec::{Dec, DecodeError, Enc, Message};

/// Bumped on any incompatible change; the handshake refuses a mismatch.
pub const PROTOCOL_VERSION: u32 = 3;
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
    AddPort(crate::config::ports::PortForward),
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

/// The typed ids, read as the same bytes as their plain form (`u64`,
/// string); a value outside the type's shape is `BadValue`.
impl Dec<'_> {
    pub(crate) fn generation(&mut self) -> Result<Generation, DecodeError> {
        Generation::new(self.u64()?).map_err(|_| DecodeError::BadValue("generation"))
    }
    pub(crate) fn session_id(&mut self) -> Result<SessionId, DecodeError> {
        SessionId::parse(&self.str()?).map_err(|_| DecodeError::BadValue("session id"))
    }
    pub(crate) fn domain_id(&mut self) -> Result<DomainId, DecodeError> {
        DomainId::parse(&self.str()?).map_err(|_| DecodeError::BadValue("domain id"))
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
    /// Host port forwards, `ADDR:HOSTPORT:GUESTPORT`.
    pub ports: Vec<String>,
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
}

// ---- this edge's composite fields ----------------------------------------

impl Enc {
    pub(crate) fn winsize(&mut self, w: WinSize) -> &mut Self {
        self.u16(w.rows).u16(w.cols)
    }
    fn prompt(&mut self, p: &PromptInfo) -> &mut Self {
        self.str(&p.request_id)
            .str(&p.profile)
            .str(&p.session_id)
            .strs(&p.argv)
            .str(&p.cwd)
            .str(&p.justification)
            .u64(p.timeout_s)
    }
}

impl Dec<'_> {
    fn prompt(&mut self) -> Result<PromptInfo, DecodeError> {
        Ok(PromptInfo {
            request_id: self.str()?,
            profile: self.str()?,
            session_id: self.str()?,
            argv: self.strs()?,
            cwd: self.str()?,
            justification: self.str()?,
            timeout_s: self.u64()?,
        })
    }
    pub(crate) fn winsize(&mut self) -> Result<WinSize, DecodeError> {
        Ok(WinSize {
            rows: self.u16()?,
            cols: self.u16()?,
        })
    }
}

impl Message for ClientMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            ClientMsg::Hello {
                version,
                client_id,
                profile,
                fingerprint,
            } => Enc::new(1)
                .u32(*version)
                .str(client_id)
                .str(profile)
                .str(fingerprint)
                .finish(),
            ClientMsg::Open(OpenRequest {
                argv,
                env,
                cwd,
                tty,
                root,
            }) => {
                let mut e = Enc::new(2);
                e.strs(argv).u32(env.len() as u32);
                for (k, v) in env {
                    e.str(k).str(v);
                }
                e.str(cwd);
                match tty {
                    Some(w) => e.u8(1).winsize(*w),
                    None => e.u8(0),
                };
                e.u8(*root as u8);
                e.finish()
            }
            ClientMsg::Stdin(d) => Enc::new(3).bytes(d).finish(),
            ClientMsg::StdinEof => Enc::new(4).finish(),
            ClientMsg::Resize(w) => Enc::new(5).winsize(*w).finish(),
            ClientMsg::Signal(s) => Enc::new(6).u8(*s).finish(),
            ClientMsg::Status => Enc::new(7).finish(),
            ClientMsg::Stop { reason } => Enc::new(8).str(reason).finish(),
            ClientMsg::Decision {
                request_id,
                verdict,
                argv,
            } => Enc::new(9).str(request_id).u8(*verdict).strs(argv).finish(),
            ClientMsg::Escalations => Enc::new(10).finish(),
            ClientMsg::AddPort(p) => Enc::new(11).str(&p.to_string()).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let msg = match d.u8()? {
            1 => ClientMsg::Hello {
                version: d.u32()?,
                client_id: d.str()?,
                profile: d.str()?,
                fingerprint: d.str()?,
            },
            2 => {
                let argv = d.strs()?;
                let n = d.count()?;
                let env = (0..n).map(|_| Ok((d.str()?, d.str()?))).collect::<Result<_, _>>()?;
                let cwd = d.str()?;
                let tty = if d.flag()? { Some(d.winsize()?) } else { None };
                let root = d.flag()?;
                ClientMsg::Open(OpenRequest {
                    argv,
                    env,
                    cwd,
                    tty,
                    root,
                })
            }
            3 => ClientMsg::Stdin(d.bytes()?),
            4 => ClientMsg::StdinEof,
            5 => ClientMsg::Resize(d.winsize()?),
            6 => ClientMsg::Signal(d.u8()?),
            7 => ClientMsg::Status,
            8 => ClientMsg::Stop { reason: d.str()? },
            9 => ClientMsg::Decision {
                request_id: d.str()?,
                verdict: d.u8()?,
                argv: d.strs()?,
            },
            10 => ClientMsg::Escalations,
            11 => ClientMsg::AddPort(d.str()?.parse().map_err(|_| DecodeError::BadValue("port forward"))?),
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(msg)
    }

    fn name(&self) -> &'static str {
        match self {
            ClientMsg::Hello { .. } => "Hello",
            ClientMsg::Open(_) => "Open",
            ClientMsg::Stdin(_) => "Stdin",
            ClientMsg::StdinEof => "StdinEof",
            ClientMsg::Resize(_) => "Resize",
            ClientMsg::Signal(_) => "Signal",
            ClientMsg::Status => "Status",
            ClientMsg::Stop { .. } => "Stop",
            ClientMsg::Decision { .. } => "Decision",
            ClientMsg::Escalations => "Escalations",
            ClientMsg::AddPort(_) => "AddPort",
        }
    }
}

impl Message for ServerMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            ServerMsg::Welcome {
                version,
                generation,
                coordinator_id,
                session_id,
            } => Enc::new(1)
                .u32(*version)
                .u64(generation.get())
                .str(coordinator_id)
                .str(session_id.as_str())
                .finish(),
            ServerMsg::Refused { reason } => Enc::new(2).str(reason).finish(),
            ServerMsg::Stdout(d) => Enc::new(3).bytes(d).finish(),
            ServerMsg::Stderr(d) => Enc::new(4).bytes(d).finish(),
            ServerMsg::Exit { code } => Enc::new(5).i32(*code).finish(),
            ServerMsg::Status(s) => {
                let mut e = Enc::new(6);
                e.str(s.domain_id.as_str())
                    .str(&s.profile)
                    .str(&s.workspace)
                    .u64(s.generation.get())
                    .str(&s.phase);
                e.str(&s.coordinator_id)
                    .i32(s.coordinator_pid)
                    .i32(s.supervisor_pid)
                    .i32(s.runsc_pid);
                e.str(&s.sandbox_id).u32(s.sessions.len() as u32);
                for x in &s.sessions {
                    e.str(x.session_id.as_str())
                        .i32(x.client_pid)
                        .i32(x.exec_pid)
                        .str(&x.argv0)
                        .u8(x.tty as u8);
                }
                e.u64(s.started_at as u64).u32(s.pending_escalations).strs(&s.ports);
                e.finish()
            }
            ServerMsg::Closing { reason } => Enc::new(7).str(reason).finish(),
            ServerMsg::Prompt(p) => {
                let mut e = Enc::new(8);
                e.prompt(p);
                e.finish()
            }
            ServerMsg::PromptEnd { request_id, text } => Enc::new(9).str(request_id).str(text).finish(),
            ServerMsg::Escalations(list) => {
                let mut e = Enc::new(10);
                e.u32(list.len() as u32);
                for p in list {
                    e.prompt(&p.prompt).u8(p.shown as u8);
                }
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let msg = match d.u8()? {
            1 => ServerMsg::Welcome {
                version: d.u32()?,
                generation: d.generation()?,
                coordinator_id: d.str()?,
                session_id: d.session_id()?,
            },
            2 => ServerMsg::Refused { reason: d.str()? },
            3 => ServerMsg::Stdout(d.bytes()?),
            4 => ServerMsg::Stderr(d.bytes()?),
            5 => ServerMsg::Exit { code: d.i32()? },
            6 => {
                let mut s = StatusInfo {
                    domain_id: d.domain_id()?,
                    profile: d.str()?,
                    workspace: d.str()?,
                    generation: d.generation()?,
                    phase: d.str()?,
                    coordinator_id: d.str()?,
                    coordinator_pid: d.i32()?,
                    supervisor_pid: d.i32()?,
                    runsc_pid: d.i32()?,
                    sandbox_id: d.str()?,
                    sessions: Vec::new(),
                    started_at: 0,
                    pending_escalations: 0,
                    ports: Vec::new(),
                };
                for _ in 0..d.count()? {
                    s.sessions.push(SessionInfo {
                        session_id: d.session_id()?,
                        client_pid: d.i32()?,
                        exec_pid: d.i32()?,
                        argv0: d.str()?,
                        tty: d.flag()?,
                    });
                }
                s.started_at = d.u64()? as i64;
                s.pending_escalations = d.u32()?;
                s.ports = d.strs()?;
                ServerMsg::Status(s)
            }
            7 => ServerMsg::Closing { reason: d.str()? },
            8 => ServerMsg::Prompt(d.prompt()?),
            9 => ServerMsg::PromptEnd {
                request_id: d.str()?,
                text: d.str()?,
            },
            10 => {
                let n = d.count()?;
                let mut list = Vec::new();
                for _ in 0..n {
                    list.push(PendingInfo {
                        prompt: d.prompt()?,
                        shown: d.flag()?,
                    });
                }
                ServerMsg::Escalations(list)
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(msg)
    }

    fn name(&self) -> &'static str {
        match self {
            ServerMsg::Welcome { .. } => "Welcome",
            ServerMsg::Refused { .. } => "Refused",
            ServerMsg::Stdout(_) => "Stdout",
            ServerMsg::Stderr(_) => "Stderr",
            ServerMsg::Exit { .. } => "Exit",
            ServerMsg::Status(_) => "Status",
            ServerMsg::Closing { .. } => "Closing",
            ServerMsg::Prompt { .. } => "Prompt",
            ServerMsg::PromptEnd { .. } => "PromptEnd",
            ServerMsg::Escalations(_) => "Escalations",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::codec::{FrameReader, MAX_FRAME_LEN};

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
                ports: vec!["127.0.0.1:18000:8000".into()],
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
