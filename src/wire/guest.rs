//! The sandbox side → the host: what `lazaret-init` (inside the sandbox)
//! reports. Everything here is hostile input for the host: the receivers
//! bound what they read and fail closed on anything but the expected
//! sequence.
//!
//! - [`BootCmd`]: Host Coordinator → PID 1, the one direction into the
//!   sandbox: what init does at boot before it reports ready (the network
//!   probe's checks, the profile user's setup). The coordinator writes the
//!   frames to `gen/boot-request`; the supervisor gives that file to `runsc
//!   run` as stdin, which becomes init's (empty: nothing to do).
//! - [`InitMsg`]: PID 1 → Runtime Supervisor, on init's stdout (the stdout
//!   of `runsc run`): one `Check` per probe check it was asked for, the
//!   user's outcome when asked, then `Ready`, then the pipe closes. The
//!   supervisor relays what came before `Ready` to the coordinator
//!   (`StatusMsg::ProbeCheck`, `StatusMsg::User`), which judges it.
//!
//! `lazaret-init` links this module from the library (`lazaret::guest`).

use std::fs::File;
use std::io::Read;
use std::net::IpAddr;

use super::{FrameReader, ReadError};
use crate::config::Prefix;
pub use crate::wire::codec::Message;
use crate::wire::codec::{Dec, DecodeError, Enc};

/// PID 1 → Runtime Supervisor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitMsg {
    /// Signals are set up and the boot probe ran; the sandbox's root
    /// process runs. Nothing follows.
    Ready,
    /// One check of the boot probe: its outcome, `detail` says what was
    /// seen (not yet escaped).
    Check { name: String, ok: bool, detail: String },
    /// The profile's user exists (made now or already there).
    UserReady,
    /// It could not be made: why (not yet escaped).
    UserFailed { reason: String },
}

impl Message for InitMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            InitMsg::Ready => Enc::new(1).finish(),
            InitMsg::Check { name, ok, detail } => Enc::new(2).str(name).u8(*ok as u8).str(detail).finish(),
            InitMsg::UserReady => Enc::new(3).finish(),
            InitMsg::UserFailed { reason } => Enc::new(4).str(reason).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => InitMsg::Ready,
            2 => {
                let ProbeCheck { name, ok, detail } = ProbeCheck::decode_from(&mut d)?;
                InitMsg::Check { name, ok, detail }
            }
            3 => InitMsg::UserReady,
            4 => InitMsg::UserFailed {
                reason: dec_setup_reason(&mut d)?,
            },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            InitMsg::Ready => "Ready",
            InitMsg::Check { .. } => "Check",
            InitMsg::UserReady => "UserReady",
            InitMsg::UserFailed { .. } => "UserFailed",
        }
    }
}

/// Longest check name and detail the host takes from the probe.
pub const MAX_CHECK_NAME: usize = 128;
pub const MAX_CHECK_DETAIL: usize = 512;
/// Most checks in one report.
pub const MAX_CHECKS: usize = 256;
/// Longest reason the host takes for a failed user setup.
pub const MAX_SETUP_REASON: usize = 1024;
/// Most bytes the supervisor takes from init's stdout: every check at its
/// longest, the user's outcome at its longest, then `Ready`.
pub const MAX_INIT_BYTES: usize =
    MAX_CHECKS * (5 + 1 + 4 + MAX_CHECK_NAME + 1 + 4 + MAX_CHECK_DETAIL) + (5 + 4 + MAX_SETUP_REASON) + 5;

/// What init reported before `Ready`: the probe's checks in order, and
/// the user setup's outcome when there was one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BootReport {
    pub checks: Vec<ProbeCheck>,
    pub user: Option<UserOutcome>,
}

/// How the profile user's setup at boot went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserOutcome {
    Ready,
    /// Why it failed (from inside the sandbox, not yet escaped).
    Failed(String),
}

/// Why init's report was refused.
#[derive(Debug)]
pub enum InitError {
    /// Reading failed, the pipe closed before `Ready`, or a malformed frame.
    Read(ReadError),
    /// More than [`MAX_INIT_BYTES`] or [`MAX_CHECKS`] checks without a `Ready`.
    TooLong,
    /// A second user outcome.
    TwoUserReports,
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            InitError::Read(ReadError::Closed) => write!(f, "the sandbox's init closed its stdout before Ready"),
            InitError::Read(e) => write!(
                f,
                "the sandbox's init reported something other than checks then Ready: {e}"
            ),
            InitError::TooLong => write!(
                f,
                "the sandbox's init wrote more than {MAX_CHECKS} checks or {MAX_INIT_BYTES} bytes without Ready"
            ),
            InitError::TwoUserReports => write!(f, "the sandbox's init reported its user setup twice"),
        }
    }
}

/// The supervisor's end of init's stdout.
pub struct InitReceiver {
    pipe: File,
    reader: FrameReader,
    taken: usize,
    report: BootReport,
}

impl InitReceiver {
    pub fn new(pipe: File) -> InitReceiver {
        InitReceiver {
            pipe,
            reader: FrameReader::default(),
            taken: 0,
            report: BootReport::default(),
        }
    }

    pub fn pipe(&self) -> &File {
        &self.pipe
    }

    /// One step of waiting for `Ready`, for a poll loop: reads once (call
    /// when the pipe is readable). `Ok(Some(report))` when `Ready` arrived
    /// (with what came before it), `Ok(None)` when more is needed;
    /// anything else, EOF first, bytes after `Ready`, or more than the
    /// bounds is an error.
    pub fn wait_for_ready(&mut self) -> Result<Option<BootReport>, InitError> {
        let mut chunk = [0u8; 16 * 1024];
        let room = (MAX_INIT_BYTES - self.taken).min(chunk.len());
        let n = match self.pipe.read(&mut chunk[..room]) {
            Ok(0) => return Err(InitError::Read(ReadError::Closed)),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Ok(None),
            Err(e) => return Err(InitError::Read(ReadError::Io(e))),
        };
        self.taken += n;
        self.reader.push(&chunk[..n]);
        loop {
            match self.reader.next::<InitMsg>() {
                Ok(Some(InitMsg::Check { .. })) if self.report.checks.len() == MAX_CHECKS => {
                    return Err(InitError::TooLong)
                }
                Ok(Some(InitMsg::Check { name, ok, detail })) => {
                    self.report.checks.push(ProbeCheck { name, ok, detail })
                }
                Ok(Some(InitMsg::UserReady | InitMsg::UserFailed { .. })) if self.report.user.is_some() => {
                    return Err(InitError::TwoUserReports)
                }
                Ok(Some(InitMsg::UserReady)) => self.report.user = Some(UserOutcome::Ready),
                Ok(Some(InitMsg::UserFailed { reason })) => self.report.user = Some(UserOutcome::Failed(reason)),
                Ok(Some(InitMsg::Ready)) if self.reader.is_empty() => {
                    return Ok(Some(std::mem::take(&mut self.report)))
                }
                Ok(Some(InitMsg::Ready)) => {
                    return Err(InitError::Read(ReadError::Decode(DecodeError::TrailingBytes(
                        self.reader.buffered(),
                    ))))
                }
                Ok(None) if self.taken >= MAX_INIT_BYTES => return Err(InitError::TooLong),
                Ok(None) => return Ok(None),
                Err(e) => return Err(InitError::Read(ReadError::Decode(e))),
            }
        }
    }
}

/// One check of a probe report, as received (not yet escaped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeCheck {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// A failed user setup's reason, bounded ([`MAX_SETUP_REASON`]).
pub(crate) fn dec_setup_reason(d: &mut Dec) -> Result<String, DecodeError> {
    let reason = d.str()?;
    if reason.len() > MAX_SETUP_REASON {
        return Err(DecodeError::BadValue("setup reason"));
    }
    Ok(reason)
}

impl ProbeCheck {
    /// Its fields in a frame: name, ok, detail; decoding bounds the name
    /// and the detail ([`MAX_CHECK_NAME`], [`MAX_CHECK_DETAIL`]).
    pub(crate) fn encode_into(&self, e: &mut Enc) {
        e.str(&self.name).u8(self.ok as u8).str(&self.detail);
    }

    pub(crate) fn decode_from(d: &mut Dec) -> Result<ProbeCheck, DecodeError> {
        let name = d.str()?;
        if name.is_empty() || name.len() > MAX_CHECK_NAME {
            return Err(DecodeError::BadValue("check name"));
        }
        let ok = d.flag()?;
        let detail = d.str()?;
        if detail.len() > MAX_CHECK_DETAIL {
            return Err(DecodeError::BadValue("check detail"));
        }
        Ok(ProbeCheck { name, ok, detail })
    }

    /// `ok NAME: DETAIL` or `FAIL NAME: DETAIL`, escaped for a terminal.
    pub fn line(&self) -> String {
        format!(
            "{} {}: {}",
            if self.ok { "ok" } else { "FAIL" },
            crate::display::escape(&self.name),
            crate::display::escape(&self.detail)
        )
    }
}

/// One check the probe runs (bin/probe.rs says what each proves).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    /// A TCP connect to the router must be refused at once.
    RouterLive,
    /// A TCP connect to slirp4netns's gateway must be answered at once.
    HelperLive,
    /// No IPv6 route to the address.
    Ipv6Off,
    /// A TTL-1 connect must be refused by the router.
    Deny,
    /// The route decision must leave through the NIC.
    Allow,
    /// The route decision must leave through the NIC.
    Resolver,
    /// A DNS query to the address must be answered.
    DnsQuery,
}

impl ProbeKind {
    const ALL: [ProbeKind; 7] = [
        ProbeKind::RouterLive,
        ProbeKind::HelperLive,
        ProbeKind::Ipv6Off,
        ProbeKind::Deny,
        ProbeKind::Allow,
        ProbeKind::Resolver,
        ProbeKind::DnsQuery,
    ];

    /// The word check names start with (`deny 192.168.0.1 (…)`).
    pub fn word(self) -> &'static str {
        match self {
            ProbeKind::RouterLive => "router-live",
            ProbeKind::HelperLive => "helper-live",
            ProbeKind::Ipv6Off => "ipv6-off",
            ProbeKind::Deny => "deny",
            ProbeKind::Allow => "allow",
            ProbeKind::Resolver => "resolver",
            ProbeKind::DnsQuery => "dns-query",
        }
    }
}

/// One check: its kind, the address it is about and, for a sample of a
/// rule, the rule's prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    pub kind: ProbeKind,
    pub addr: IpAddr,
    pub prefix: Option<Prefix>,
}

/// Most bytes of a boot request: a probe frame at its largest, a user
/// frame, and a workspace frame (a path of at most [`MAX_WORKSPACE_PATH`]).
pub const MAX_REQUEST_BYTES: u64 =
    crate::wire::codec::MAX_FRAME_LEN as u64 + 4 + 64 + 4 + 5 + MAX_WORKSPACE_PATH as u64;

/// The name init makes a symlink to the workspace (`BootCmd::Workspace`).
pub const GUEST_WORKSPACE_LINK: &str = "/workspace";

/// The longest workspace path inside (`PATH_MAX` less its NUL).
pub const MAX_WORKSPACE_PATH: usize = 4095;

/// Host Coordinator → PID 1 (`gen/boot-request`, init's stdin at boot):
/// each frame one thing to do, in order; at most one of each kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BootCmd {
    /// Run `checks` in order (the network probe, bin/probe.rs);
    /// `sandbox_src` is the sandbox's address on its only NIC (what a
    /// route through the router leaves from).
    Probe {
        sandbox_src: IpAddr,
        checks: Vec<ProbeSpec>,
    },
    /// Make the profile's user `name` with `uid` exist (bin/usersetup.rs).
    User { name: String, uid: u32 },
    /// Make `/workspace` a symlink to `path`, where the workspace is bound
    /// (`plan::workspace`); an absolute path.
    Workspace { path: String },
}

fn enc_ip(e: &mut Enc, a: IpAddr) {
    match a {
        IpAddr::V4(v) => e.u8(4).u32(u32::from(v)),
        IpAddr::V6(v) => {
            e.u8(6);
            for b in v.octets() {
                e.u8(b);
            }
            e
        }
    };
}

fn dec_ip(d: &mut Dec) -> Result<IpAddr, DecodeError> {
    match d.u8()? {
        4 => Ok(IpAddr::from(std::net::Ipv4Addr::from(d.u32()?))),
        6 => Ok(IpAddr::from(<[u8; 16]>::try_from(d.take(16)?).unwrap())),
        _ => Err(DecodeError::BadValue("address family")),
    }
}

impl Message for BootCmd {
    fn encode(&self) -> Vec<u8> {
        match self {
            BootCmd::Probe { sandbox_src, checks } => {
                let mut e = Enc::new(1);
                enc_ip(&mut e, *sandbox_src);
                e.u32(checks.len() as u32);
                for c in checks {
                    e.u8(ProbeKind::ALL.iter().position(|k| *k == c.kind).unwrap() as u8 + 1);
                    enc_ip(&mut e, c.addr);
                    match c.prefix {
                        Some(p) => {
                            enc_ip(e.u8(1), p.addr);
                            e.u8(p.len)
                        }
                        None => e.u8(0),
                    };
                }
                e.finish()
            }
            BootCmd::User { name, uid } => Enc::new(2).str(name).u32(*uid).finish(),
            BootCmd::Workspace { path } => Enc::new(3).str(path).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => {
                let sandbox_src = dec_ip(&mut d)?;
                let n = d.count()?;
                let mut checks = Vec::new();
                for _ in 0..n {
                    let kind = match d.u8()? {
                        k @ 1..=7 => ProbeKind::ALL[k as usize - 1],
                        _ => return Err(DecodeError::BadValue("probe kind")),
                    };
                    let addr = dec_ip(&mut d)?;
                    let prefix = if d.flag()? {
                        let addr = dec_ip(&mut d)?;
                        let len = d.u8()?;
                        if len > if addr.is_ipv4() { 32 } else { 128 } {
                            return Err(DecodeError::BadValue("prefix length"));
                        }
                        Some(Prefix { addr, len })
                    } else {
                        None
                    };
                    checks.push(ProbeSpec { kind, addr, prefix });
                }
                BootCmd::Probe { sandbox_src, checks }
            }
            2 => BootCmd::User {
                name: d.str()?,
                uid: d.u32()?,
            },
            3 => {
                let path = d.str()?;
                if !path.starts_with('/') || path.len() > MAX_WORKSPACE_PATH || path.contains('\0') {
                    return Err(DecodeError::BadValue("workspace path"));
                }
                BootCmd::Workspace { path }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            BootCmd::Probe { .. } => "Probe",
            BootCmd::User { .. } => "User",
            BootCmd::Workspace { .. } => "Workspace",
        }
    }
}

/// Why init could not take its boot request.
#[derive(Debug)]
pub enum RequestError {
    Read(std::io::Error),
    Malformed(DecodeError),
    /// More than [`MAX_REQUEST_BYTES`].
    TooLong,
    /// Two frames of one kind.
    Twice(&'static str),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            RequestError::Read(e) => write!(f, "reading the request: {e}"),
            RequestError::Malformed(e) => write!(f, "malformed request: {e}"),
            RequestError::TooLong => write!(f, "the request exceeds {MAX_REQUEST_BYTES} bytes"),
            RequestError::Twice(what) => write!(f, "the request asks for {what} twice"),
        }
    }
}

/// Init's side: every frame on stdin, read to EOF (bounded); empty is
/// nothing to do.
pub fn read_boot_request(r: &mut impl Read) -> Result<Vec<BootCmd>, RequestError> {
    let mut buf = Vec::new();
    r.take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(RequestError::Read)?;
    if buf.len() as u64 > MAX_REQUEST_BYTES {
        return Err(RequestError::TooLong);
    }
    let mut reader = FrameReader::default();
    reader.push(&buf);
    let mut cmds: Vec<BootCmd> = Vec::new();
    while let Some(c) = reader.next::<BootCmd>().map_err(RequestError::Malformed)? {
        if cmds.iter().any(|o| o.name() == c.name()) {
            return Err(RequestError::Twice(c.name()));
        }
        cmds.push(c);
    }
    if !reader.is_empty() {
        return Err(RequestError::Malformed(DecodeError::Truncated));
    }
    Ok(cmds)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn samples_init() -> Vec<InitMsg> {
        vec![
            InitMsg::Check {
                name: "deny 198.18.0.1 (198.18.0.0/15)".into(),
                ok: true,
                detail: "refused by the router in 1 ms (TTL 1)".into(),
            },
            InitMsg::Check {
                name: "dns 10.0.2.3".into(),
                ok: false,
                detail: "no answer: \x1b[31m".into(),
            },
            InitMsg::UserFailed {
                reason: "cannot write /etc/passwd: Read-only file system".into(),
            },
            InitMsg::Ready,
            InitMsg::UserReady,
        ]
    }

    pub(crate) fn samples_cmd() -> Vec<BootCmd> {
        let p = |s: &str| s.parse::<Prefix>().unwrap();
        vec![
            BootCmd::Probe {
                sandbox_src: "169.254.255.1".parse().unwrap(),
                checks: vec![
                    ProbeSpec {
                        kind: ProbeKind::Deny,
                        addr: "192.168.0.1".parse().unwrap(),
                        prefix: Some(p("192.168.0.0/16")),
                    },
                    ProbeSpec {
                        kind: ProbeKind::Ipv6Off,
                        addr: "2000::1".parse().unwrap(),
                        prefix: None,
                    },
                    ProbeSpec {
                        kind: ProbeKind::DnsQuery,
                        addr: "10.0.2.3".parse().unwrap(),
                        prefix: None,
                    },
                ],
            },
            BootCmd::Probe {
                sandbox_src: "::1".parse().unwrap(),
                checks: Vec::new(),
            },
            BootCmd::User {
                name: "dev".into(),
                uid: 1000,
            },
            BootCmd::Workspace {
                path: "/home/u/my project".into(),
            },
        ]
    }

    #[test]
    fn the_boot_request_is_frames_to_eof_at_most_one_of_each() {
        let s = samples_cmd();
        let probe_and_user: Vec<u8> = [s[0].encode(), s[2].encode()].concat();
        let cmds = read_boot_request(&mut &probe_and_user[..]).unwrap();
        assert_eq!(cmds, vec![s[0].clone(), s[2].clone()]);
        assert!(read_boot_request(&mut &b""[..]).unwrap().is_empty());
        // The old text, a cut frame, trailing bytes, a kind twice, too long.
        assert!(read_boot_request(&mut &b"deny=192.168.0.1@192.168.0.0/16"[..]).is_err());
        let b = s[0].encode();
        assert!(read_boot_request(&mut &b[..b.len() - 1]).is_err());
        let mut t = b.clone();
        t.push(1);
        assert!(read_boot_request(&mut &t[..]).is_err());
        let twice: Vec<u8> = [s[0].encode(), s[1].encode()].concat();
        assert!(matches!(
            read_boot_request(&mut &twice[..]),
            Err(RequestError::Twice("Probe"))
        ));
        let long = vec![0u8; MAX_REQUEST_BYTES as usize + 1];
        assert!(matches!(read_boot_request(&mut &long[..]), Err(RequestError::TooLong)));
        // The workspace frame: first, with the others; a relative or
        // overlong path is malformed.
        let all: Vec<u8> = [s[3].encode(), s[0].encode(), s[2].encode()].concat();
        assert_eq!(
            read_boot_request(&mut &all[..]).unwrap(),
            vec![s[3].clone(), s[0].clone(), s[2].clone()]
        );
        for path in ["workspace".to_string(), format!("/{}", "a".repeat(MAX_WORKSPACE_PATH))] {
            let b = BootCmd::Workspace { path }.encode();
            assert!(read_boot_request(&mut &b[..]).is_err());
        }
        let widest: Vec<u8> = [
            BootCmd::Workspace {
                path: format!("/{}", "a".repeat(MAX_WORKSPACE_PATH - 1)),
            }
            .encode(),
            s[2].encode(),
        ]
        .concat();
        assert_eq!(read_boot_request(&mut &widest[..]).unwrap().len(), 2);
    }

    /// A file that reads as `bytes` then EOF, like init's stdout does
    /// (unlinked at once; a pipe would not hold more than 64 KiB).
    fn pipe_with(bytes: &[u8]) -> File {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "lazaret-init-report-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, bytes).unwrap();
        let f = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    fn ready_of(bytes: &[u8]) -> Result<BootReport, InitError> {
        let mut rx = InitReceiver::new(pipe_with(bytes));
        loop {
            match rx.wait_for_ready() {
                Ok(None) => continue,
                Ok(Some(report)) => return Ok(report),
                Err(e) => return Err(e),
            }
        }
    }

    fn report(msgs: &[InitMsg]) -> Vec<u8> {
        msgs.iter().flat_map(Message::encode).collect()
    }

    #[test]
    fn init_ready_is_a_frame_and_anything_else_fails_closed() {
        assert_eq!(ready_of(&InitMsg::Ready.encode()).unwrap(), BootReport::default());
        // The old word, EOF, garbage, a huge frame header, trailing bytes.
        assert!(matches!(
            ready_of(b"ready\n"),
            Err(InitError::Read(ReadError::Decode(_)))
        ));
        assert!(matches!(ready_of(b""), Err(InitError::Read(ReadError::Closed))));
        assert!(matches!(ready_of(&[0, 0, 1, 0]), Err(InitError::Read(_))));
        let mut extra = InitMsg::Ready.encode();
        extra.push(0);
        assert!(ready_of(&extra).is_err());
        // A frame that never completes within the bound.
        let mut long = vec![200, 0, 0, 0, 1];
        long.extend([0u8; 100]);
        assert!(matches!(ready_of(&long), Err(InitError::Read(ReadError::Closed))));
        let mut endless = ((MAX_INIT_BYTES + 100) as u32).to_le_bytes().to_vec();
        endless.resize(MAX_INIT_BYTES + 50, 2);
        assert!(matches!(ready_of(&endless), Err(InitError::TooLong)));
    }

    #[test]
    fn boot_probe_checks_come_before_ready_and_everything_is_bounded() {
        let boot = &samples_init()[..4];
        let got = ready_of(&report(boot)).unwrap();
        assert_eq!(got.checks.len(), 2);
        assert_eq!(got.checks[1].line(), "FAIL dns 10.0.2.3: no answer: \\x1b[31m");
        assert_eq!(
            got.user,
            Some(UserOutcome::Failed(
                "cannot write /etc/passwd: Read-only file system".into()
            ))
        );
        let ready = ready_of(&report(&[InitMsg::UserReady, InitMsg::Ready])).unwrap();
        assert_eq!(ready.user, Some(UserOutcome::Ready));
        assert!(ready.checks.is_empty());
        // Two user outcomes.
        assert!(matches!(
            ready_of(&report(&[InitMsg::UserReady, InitMsg::UserReady, InitMsg::Ready])),
            Err(InitError::TwoUserReports)
        ));
        let long_reason = InitMsg::UserFailed {
            reason: "r".repeat(MAX_SETUP_REASON + 1),
        };
        assert!(ready_of(&report(&[long_reason, InitMsg::Ready])).is_err());
        // Checks without Ready (EOF), something after Ready, the old text,
        // a cut frame.
        assert!(matches!(
            ready_of(&report(&samples_init()[..2])),
            Err(InitError::Read(ReadError::Closed))
        ));
        let mut after = boot.to_vec();
        after.push(samples_init()[0].clone());
        assert!(ready_of(&report(&after)).is_err());
        assert!(ready_of(b"ok dns: fine\n").is_err());
        let b = report(boot);
        assert!(ready_of(&b[..b.len() - 1]).is_err());
        // Too many checks; an oversized name or detail.
        let mut many: Vec<InitMsg> = (0..=MAX_CHECKS).map(|_| samples_init()[0].clone()).collect();
        many.push(InitMsg::Ready);
        assert!(matches!(ready_of(&report(&many)), Err(InitError::TooLong)));
        let big = InitMsg::Check {
            name: "x".into(),
            ok: true,
            detail: "d".repeat(MAX_CHECK_DETAIL + 1),
        };
        assert!(ready_of(&report(&[big, InitMsg::Ready])).is_err());
        let long_name = InitMsg::Check {
            name: "n".repeat(MAX_CHECK_NAME + 1),
            ok: true,
            detail: String::new(),
        };
        assert!(ready_of(&report(&[long_name, InitMsg::Ready])).is_err());
        // At the longest each check may be, the most checks fit the bound.
        let longest = InitMsg::Check {
            name: "n".repeat(MAX_CHECK_NAME),
            ok: true,
            detail: "d".repeat(MAX_CHECK_DETAIL),
        };
        let mut full: Vec<InitMsg> = (0..MAX_CHECKS).map(|_| longest.clone()).collect();
        full.push(InitMsg::UserFailed {
            reason: "r".repeat(MAX_SETUP_REASON),
        });
        full.push(InitMsg::Ready);
        assert!(ready_of(&report(&full)).is_ok());
        assert!(report(&full).len() <= MAX_INIT_BYTES);
    }
}
