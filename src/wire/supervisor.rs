//! Runtime Supervisor ↔ Host Coordinator, on two pipes:
//!
//! - status (supervisor → coordinator): [`StatusMsg`], in this order at
//!   startup: `Userns`, then with a network `Slirp` and `NetReady`, then
//!   the boot probe's `ProbeCheck`s and the user's `UserReady` or
//!   `UserFailed` as the sandbox's init reported them, then `Ready`; afterwards only `HelperDied`, `Exited`, `Stopped` or `Error`.
//! - lease (coordinator → supervisor): [`LeaseMsg::Mapped`] once the id
//!   maps are written; for a profile with `secrets` (`--secrets`) then
//!   [`LeaseMsg::Secrets`], what the egress gate needs to swap them in
//!   (issue 31; the values travel on this pipe only); then nothing until
//!   EOF, which means stop.

use std::fs::File;
use std::os::fd::AsFd;
use std::time::Instant;

use super::{dec_pid, Message, ReadError, UnexpectedMessage};
use crate::wire::codec::{Dec, DecodeError, Enc, FrameReader};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusMsg {
    /// The user namespace exists: write its id maps.
    Userns,
    /// slirp4netns runs (pid, start time), so its owner row can be exact.
    Slirp { pid: i32, start: u64 },
    /// The network is installed and read back: the namespaces' inodes.
    NetReady { inode: u64, router_inode: u64 },
    /// `runsc run` runs (pid, start time) and the guest init is ready.
    Ready { pid: i32, start: u64 },
    /// One check of the network probe init ran at boot, relayed as init
    /// reported it (from inside the sandbox; bounded like there).
    ProbeCheck(crate::wire::guest::ProbeCheck),
    /// Init made the profile's user exist at boot.
    UserReady,
    /// … or could not: why (from inside the sandbox, not yet escaped).
    UserFailed { reason: String },
    /// A helper (overlay daemon, slirp4netns, workspace view) died.
    HelperDied { name: String },
    /// `runsc run` exited with this code.
    Exited { code: i32 },
    /// The supervisor stopped the sandbox and is exiting.
    Stopped,
    /// The supervisor failed with this sentence.
    Error { message: String },
}

impl Message for StatusMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            StatusMsg::Userns => Enc::new(1).finish(),
            StatusMsg::Slirp { pid, start } => Enc::new(2).i32(*pid).u64(*start).finish(),
            StatusMsg::NetReady { inode, router_inode } => Enc::new(3).u64(*inode).u64(*router_inode).finish(),
            StatusMsg::Ready { pid, start } => Enc::new(4).i32(*pid).u64(*start).finish(),
            StatusMsg::HelperDied { name } => Enc::new(5).str(name).finish(),
            StatusMsg::Exited { code } => Enc::new(6).i32(*code).finish(),
            StatusMsg::Stopped => Enc::new(7).finish(),
            StatusMsg::Error { message } => Enc::new(8).str(message).finish(),
            StatusMsg::ProbeCheck(c) => {
                let mut e = Enc::new(9);
                c.encode_into(&mut e);
                e.finish()
            }
            StatusMsg::UserReady => Enc::new(10).finish(),
            StatusMsg::UserFailed { reason } => Enc::new(11).str(reason).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => StatusMsg::Userns,
            2 => StatusMsg::Slirp {
                pid: dec_pid(&mut d)?,
                start: d.u64()?,
            },
            3 => StatusMsg::NetReady {
                inode: d.u64()?,
                router_inode: d.u64()?,
            },
            4 => StatusMsg::Ready {
                pid: dec_pid(&mut d)?,
                start: d.u64()?,
            },
            5 => StatusMsg::HelperDied { name: d.str()? },
            6 => StatusMsg::Exited { code: d.i32()? },
            7 => StatusMsg::Stopped,
            8 => StatusMsg::Error { message: d.str()? },
            9 => StatusMsg::ProbeCheck(crate::wire::guest::ProbeCheck::decode_from(&mut d)?),
            10 => StatusMsg::UserReady,
            11 => StatusMsg::UserFailed {
                reason: crate::wire::guest::dec_setup_reason(&mut d)?,
            },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            StatusMsg::Userns => "Userns",
            StatusMsg::Slirp { .. } => "Slirp",
            StatusMsg::NetReady { .. } => "NetReady",
            StatusMsg::Ready { .. } => "Ready",
            StatusMsg::HelperDied { .. } => "HelperDied",
            StatusMsg::Exited { .. } => "Exited",
            StatusMsg::Stopped => "Stopped",
            StatusMsg::Error { .. } => "Error",
            StatusMsg::ProbeCheck(_) => "ProbeCheck",
            StatusMsg::UserReady => "UserReady",
            StatusMsg::UserFailed { .. } => "UserFailed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseMsg {
    /// The id maps are written: become root of the namespace and go on.
    Mapped,
    /// The generation's secrets, for the egress gate.
    Secrets(GateSecrets),
}

/// What the egress gate holds for a generation's secrets: the bindings
/// (with the real values), a TLS leaf per bound name issued by the
/// Domain's Trust Anchor (the CA key stays in the coordinator), the CA
/// certificate, and the upstream CA file that replaces the system roots
/// (`LAZARET_TEST_UPSTREAM_CA`, tests only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateSecrets {
    pub bindings: Vec<GateBinding>,
    pub leaves: Vec<GateLeaf>,
    pub ca_pem: Vec<u8>,
    pub upstream_ca: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateBinding {
    pub var: String,
    pub sentinel: String,
    pub real: crate::config::secrets::SecretValue,
    pub hosts: Vec<String>,
    /// The request headers the sentinel is swapped in (lowercase).
    pub headers: Vec<String>,
    /// `plain_http = true`: also into plain HTTP to the hosts.
    pub plain_http: bool,
}

/// A leaf for `host`: certificate and private key, PEM. `Debug` shows no
/// key byte; the key is overwritten when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct GateLeaf {
    pub host: String,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for GateLeaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GateLeaf({}, key {} bytes)", self.host, self.key_pem.len())
    }
}

impl Drop for GateLeaf {
    fn drop(&mut self) {
        self.key_pem.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&self.key_pem);
    }
}

impl Message for LeaseMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            LeaseMsg::Mapped => Enc::new(1).finish(),
            LeaseMsg::Secrets(g) => {
                let mut e = Enc::new(2);
                e.u32(g.bindings.len() as u32);
                for b in &g.bindings {
                    e.str(&b.var).str(&b.sentinel).bytes(b.real.expose()).strs(&b.hosts);
                    e.strs(&b.headers).u8(u8::from(b.plain_http));
                }
                e.u32(g.leaves.len() as u32);
                for l in &g.leaves {
                    e.str(&l.host).bytes(&l.cert_pem).bytes(&l.key_pem);
                }
                e.bytes(&g.ca_pem);
                match &g.upstream_ca {
                    None => e.u8(0),
                    Some(p) => e.u8(1).str(p),
                };
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => LeaseMsg::Mapped,
            2 => {
                let mut bindings = Vec::new();
                for _ in 0..d.count()? {
                    let (var, sentinel, raw) = (d.str()?, d.str()?, d.bytes()?);
                    let real = crate::config::secrets::SecretValue::new(raw.clone())
                        .ok()
                        .filter(|v| v.expose() == raw.as_slice())
                        .ok_or(DecodeError::BadValue("secret value"))?;
                    let mut raw = raw;
                    raw.iter_mut().for_each(|b| *b = 0);
                    bindings.push(GateBinding {
                        var,
                        sentinel,
                        real,
                        hosts: d.strs()?,
                        headers: d.strs()?,
                        plain_http: d.flag()?,
                    });
                }
                let mut leaves = Vec::new();
                for _ in 0..d.count()? {
                    leaves.push(GateLeaf {
                        host: d.str()?,
                        cert_pem: d.bytes()?,
                        key_pem: d.bytes()?,
                    });
                }
                let ca_pem = d.bytes()?;
                let upstream_ca = if d.flag()? { Some(d.str()?) } else { None };
                LeaseMsg::Secrets(GateSecrets {
                    bindings,
                    leaves,
                    ca_pem,
                    upstream_ca,
                })
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            LeaseMsg::Mapped => "Mapped",
            LeaseMsg::Secrets(_) => "Secrets",
        }
    }
}

/// Why a startup step did not get the message it waits for.
#[derive(Debug)]
pub enum StatusError {
    /// The deadline passed.
    TimedOut,
    /// The pipe closed (the supervisor exited), broke, or carried a
    /// malformed frame.
    Read(ReadError),
    /// The supervisor reported an error.
    Failed(String),
    Unexpected(UnexpectedMessage),
}

impl std::fmt::Display for StatusError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            StatusError::TimedOut => write!(f, "the sandbox did not start in time"),
            StatusError::Read(ReadError::Decode(e)) => write!(f, "malformed supervisor report: {e}"),
            StatusError::Read(_) => write!(f, "the supervisor exited during startup"),
            StatusError::Failed(m) => write!(f, "{m}"),
            StatusError::Unexpected(u) => write!(f, "unexpected supervisor report ({u})"),
        }
    }
}

impl std::error::Error for StatusError {}

/// The coordinator's end of the status pipe.
pub struct StatusReceiver {
    pipe: File,
    reader: FrameReader,
}

impl StatusReceiver {
    pub fn new(pipe: File) -> StatusReceiver {
        StatusReceiver {
            pipe,
            reader: FrameReader::default(),
        }
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.pipe.as_fd()
    }

    /// The next message, waiting until `deadline`.
    fn recv_until(&mut self, deadline: Instant) -> Result<StatusMsg, StatusError> {
        loop {
            if let Some(m) = self
                .reader
                .next::<StatusMsg>()
                .map_err(|e| StatusError::Read(ReadError::Decode(e)))?
            {
                return Ok(m);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(StatusError::TimedOut);
            }
            if crate::sys::wait_readable(&self.pipe, left.min(std::time::Duration::from_secs(1))).unwrap_or(false) {
                self.reader.fill(&mut self.pipe).map_err(StatusError::Read)?;
            }
        }
    }

    /// Step 1: the supervisor unshared its user namespace.
    pub fn wait_for_userns(&mut self, deadline: Instant) -> Result<(), StatusError> {
        match self.recv_until(deadline)? {
            StatusMsg::Userns => Ok(()),
            StatusMsg::Error { message } => Err(StatusError::Failed(message)),
            m => Err(StatusError::Unexpected(UnexpectedMessage::of("Userns", &m))),
        }
    }

    /// Step 2: `runsc run` is up and its init ready: (pid, start time).
    /// The reports before it (`Slirp`, `NetReady`, and init's boot report:
    /// `ProbeCheck`, `UserReady`, `UserFailed`) go to `before`.
    pub fn wait_for_ready(
        &mut self,
        deadline: Instant,
        mut before: impl FnMut(&StatusMsg),
    ) -> Result<(i32, u64), StatusError> {
        loop {
            match self.recv_until(deadline)? {
                m @ (StatusMsg::Slirp { .. }
                | StatusMsg::NetReady { .. }
                | StatusMsg::ProbeCheck(_)
                | StatusMsg::UserReady
                | StatusMsg::UserFailed { .. }) => before(&m),
                StatusMsg::Ready { pid, start } => return Ok((pid, start)),
                StatusMsg::Error { message } => return Err(StatusError::Failed(message)),
                m => return Err(StatusError::Unexpected(UnexpectedMessage::of("Ready", &m))),
            }
        }
    }

    /// After startup, when the pipe polled readable: reads once and
    /// returns what arrived, in order; an error (EOF, a malformed frame)
    /// comes last.
    pub fn read_available(&mut self) -> Vec<Result<StatusMsg, ReadError>> {
        let filled = self.reader.fill(&mut self.pipe);
        let mut out = Vec::new();
        loop {
            match self.reader.next::<StatusMsg>() {
                Ok(Some(m)) => out.push(Ok(m)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(ReadError::Decode(e)));
                    return out;
                }
            }
        }
        if let Err(e) = filled {
            out.push(Err(e));
        }
        out
    }
}

/// The supervisor's end of the lease pipe, step 1: wait for `Mapped`.
/// EOF, a malformed frame or anything else is a refusal.
pub fn wait_for_mapped(lease: &mut File, secrets: bool) -> Result<Option<GateSecrets>, LeaseError> {
    let mut r = FrameReader::default();
    match r.recv::<LeaseMsg>(lease) {
        Ok(LeaseMsg::Mapped) => {}
        Ok(m) => return Err(LeaseError::Unexpected(m.name())),
        Err(e) => return Err(LeaseError::Read(e)),
    }
    if !secrets {
        return Ok(None);
    }
    match r.recv::<LeaseMsg>(lease) {
        Ok(LeaseMsg::Secrets(g)) => Ok(Some(g)),
        Ok(m) => Err(LeaseError::Unexpected(m.name())),
        Err(e) => Err(LeaseError::Read(e)),
    }
}

/// The lease pipe closed, broke or carried a malformed or unexpected frame
/// before `Mapped` (and, with secrets, `Secrets`).
#[derive(Debug)]
pub enum LeaseError {
    Read(ReadError),
    Unexpected(&'static str),
}

impl std::fmt::Display for LeaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            LeaseError::Read(e) => write!(f, "the coordinator did not map the user namespace ({e})"),
            LeaseError::Unexpected(m) => write!(f, "unexpected {m} on the lease pipe"),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    pub(crate) fn samples_status() -> Vec<StatusMsg> {
        vec![
            StatusMsg::Userns,
            StatusMsg::Slirp { pid: 42, start: 7 },
            StatusMsg::NetReady {
                inode: 4026531840,
                router_inode: 4026531841,
            },
            StatusMsg::Ready {
                pid: i32::MAX,
                start: u64::MAX,
            },
            StatusMsg::HelperDied {
                name: "fuse-overlayfs (pid 9, signal: 9)".into(),
            },
            StatusMsg::Exited { code: -1 },
            StatusMsg::Stopped,
            StatusMsg::Error {
                message: "unshare: EPERM\n".into(),
            },
            StatusMsg::ProbeCheck(crate::wire::guest::ProbeCheck {
                name: "router live".into(),
                ok: false,
                detail: "169.254.255.2: \x1b]0;t\x07".into(),
            }),
            StatusMsg::UserReady,
            StatusMsg::UserFailed {
                reason: "/home/dev exists and is not a directory".into(),
            },
        ]
    }

    pub(crate) fn samples_lease() -> Vec<LeaseMsg> {
        vec![
            LeaseMsg::Mapped,
            LeaseMsg::Secrets(GateSecrets {
                bindings: vec![GateBinding {
                    var: "API_KEY".into(),
                    sentinel: "lzr-sk-0123456789012345678901234567890123456789".into(),
                    real: crate::config::secrets::SecretValue::new(b"sk-real-value".to_vec()).unwrap(),
                    hosts: vec!["api.test".into(), "b.test".into()],
                    headers: vec!["authorization".into(), "x-goog-api-key".into()],
                    plain_http: true,
                }],
                leaves: vec![GateLeaf {
                    host: "api.test".into(),
                    cert_pem: b"CERT".to_vec(),
                    key_pem: b"KEY".to_vec(),
                }],
                ca_pem: b"CA".to_vec(),
                upstream_ca: Some("/tmp/ca.pem".into()),
            }),
        ]
    }

    fn receiver(msgs: &[StatusMsg], raw: &[u8]) -> StatusReceiver {
        let (r, w) = crate::sys::pipe().unwrap();
        let mut w = File::from(w);
        for m in msgs {
            crate::wire::codec::send(&mut w, m).unwrap();
        }
        std::io::Write::write_all(&mut w, raw).unwrap();
        StatusReceiver::new(File::from(r))
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn ready_needs_a_real_pid() {
        // `ready PID START` used to default a missing pid to 0.
        let zero = {
            let mut e = Enc::new(4);
            e.i32(0).u64(1);
            e.finish()
        };
        assert_eq!(StatusMsg::decode(&zero[4..]), Err(DecodeError::BadValue("pid")));
        let neg = {
            let mut e = Enc::new(2);
            e.i32(-1).u64(1);
            e.finish()
        };
        assert_eq!(StatusMsg::decode(&neg[4..]), Err(DecodeError::BadValue("pid")));
        let mut rx = receiver(&[StatusMsg::Userns], &zero);
        rx.wait_for_userns(soon()).unwrap();
        assert!(matches!(
            rx.wait_for_ready(soon(), |_| {}),
            Err(StatusError::Read(ReadError::Decode(DecodeError::BadValue("pid"))))
        ));
    }

    #[test]
    fn startup_steps_in_order() {
        let mut rx = receiver(
            &[
                StatusMsg::Userns,
                StatusMsg::Slirp { pid: 5, start: 6 },
                StatusMsg::NetReady {
                    inode: 1,
                    router_inode: 2,
                },
                StatusMsg::Ready { pid: 9, start: 10 },
            ],
            b"",
        );
        rx.wait_for_userns(soon()).unwrap();
        let mut net = Vec::new();
        assert_eq!(rx.wait_for_ready(soon(), |m| net.push(m.clone())).unwrap(), (9, 10));
        assert_eq!(net.len(), 2);
    }

    #[test]
    fn out_of_order_error_eof_and_old_lines_are_refused() {
        let mut rx = receiver(&[StatusMsg::Ready { pid: 1, start: 1 }], b"");
        match rx.wait_for_userns(soon()) {
            Err(StatusError::Unexpected(u)) => assert_eq!(
                u,
                UnexpectedMessage {
                    expected: "Userns",
                    received: "Ready"
                }
            ),
            other => panic!("{other:?}"),
        }
        let mut rx = receiver(&[StatusMsg::Userns, StatusMsg::Stopped], b"");
        rx.wait_for_userns(soon()).unwrap();
        let e = rx.wait_for_ready(soon(), |_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unexpected supervisor report (expected Ready, received Stopped)"
        );
        let mut rx = receiver(
            &[StatusMsg::Error {
                message: "no runsc".into(),
            }],
            b"",
        );
        assert_eq!(rx.wait_for_userns(soon()).unwrap_err().to_string(), "no runsc");
        let mut rx = receiver(&[], b"");
        assert_eq!(
            rx.wait_for_userns(soon()).unwrap_err().to_string(),
            "the supervisor exited during startup"
        );
        let mut rx = receiver(&[], b"ready 12 34\n");
        assert!(rx.wait_for_userns(soon()).is_err());
        let mut rx = receiver(&[StatusMsg::Stopped], b"xx");
        let got = rx.read_available();
        assert_eq!(got.len(), 1, "a partial frame waits for the rest");
        assert_eq!(got[0].as_ref().unwrap(), &StatusMsg::Stopped);
        let got = rx.read_available();
        assert!(matches!(got[..], [Err(ReadError::Closed)]), "{got:?}");
        let mut rx = receiver(&[], b"\x01\x00\x00\x00\x63");
        assert!(matches!(
            rx.read_available()[..],
            [Err(ReadError::Decode(DecodeError::UnknownTag(0x63)))]
        ));
    }

    #[test]
    fn mapped_or_nothing() {
        let (r, w) = crate::sys::pipe().unwrap();
        crate::wire::send_fd(&w, &LeaseMsg::Mapped).unwrap();
        drop(w);
        assert!(matches!(wait_for_mapped(&mut File::from(r), false), Ok(None)));
        let (r, w) = crate::sys::pipe().unwrap();
        crate::sys::write_all(&w, b"mapped\n").unwrap();
        drop(w);
        assert!(wait_for_mapped(&mut File::from(r), false).is_err());
        let (r, w) = crate::sys::pipe().unwrap();
        drop(w);
        assert!(wait_for_mapped(&mut File::from(r), false).is_err());
        // With secrets: Mapped then Secrets, both in one write; Mapped
        // alone (EOF after it) or Secrets first fail closed.
        let s = samples_lease();
        let (r, w) = crate::sys::pipe().unwrap();
        crate::wire::send_fd(&w, &s[0]).unwrap();
        crate::wire::send_fd(&w, &s[1]).unwrap();
        drop(w);
        let LeaseMsg::Secrets(want) = &s[1] else { unreachable!() };
        assert_eq!(wait_for_mapped(&mut File::from(r), true).unwrap().as_ref(), Some(want));
        let (r, w) = crate::sys::pipe().unwrap();
        crate::wire::send_fd(&w, &s[0]).unwrap();
        drop(w);
        assert!(wait_for_mapped(&mut File::from(r), true).is_err());
        let (r, w) = crate::sys::pipe().unwrap();
        crate::wire::send_fd(&w, &s[1]).unwrap();
        drop(w);
        assert!(wait_for_mapped(&mut File::from(r), true).is_err());
        let shown = format!("{want:?}");
        assert!(
            !shown.contains("sk-real-value") && !shown.contains("75, 69, 89"),
            "{shown}"
        );
    }
}
