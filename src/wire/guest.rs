//! The sandbox side → the host: what `lazaret-init` (inside the sandbox)
//! reports. Everything here is hostile input for the host: the receivers
//! bound what they read and fail closed on anything but the expected
//! sequence.
//!
//! - [`ProbeCmd`]: Host Coordinator → PID 1, the one message this direction
//!   has: which network checks to run at boot. The coordinator writes it to
//!   `gen/probe-request`; the supervisor gives that file to `runsc run` as
//!   stdin, which becomes init's (with no network, stdin is empty).
//! - [`InitMsg`]: PID 1 → Runtime Supervisor, on init's stdout (the stdout
//!   of `runsc run`): one `Check` per check it was asked for, then `Ready`,
//!   then the pipe closes. The supervisor relays the checks to the
//!   coordinator (`StatusMsg::ProbeCheck`), which judges them.
//! - [`SetupMsg`]: `init user-setup` → Host Coordinator, on its stdout: one
//!   frame, `Done` or `Failed`.
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
}

impl Message for InitMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            InitMsg::Ready => Enc::new(1).finish(),
            InitMsg::Check { name, ok, detail } => Enc::new(2).str(name).u8(*ok as u8).str(detail).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => InitMsg::Ready,
            2 => {
                let name = d.str()?;
                if name.is_empty() || name.len() > MAX_CHECK_NAME {
                    return Err(DecodeError::BadValue("check name"));
                }
                let ok = d.flag()?;
                let detail = d.str()?;
                if detail.len() > MAX_CHECK_DETAIL {
                    return Err(DecodeError::BadValue("check detail"));
                }
                InitMsg::Check { name, ok, detail }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            InitMsg::Ready => "Ready",
            InitMsg::Check { .. } => "Check",
        }
    }
}

/// Longest check name and detail the host takes from the probe.
pub const MAX_CHECK_NAME: usize = 128;
pub const MAX_CHECK_DETAIL: usize = 512;
/// Most checks in one report.
pub const MAX_CHECKS: usize = 256;
/// Most bytes the supervisor takes from init's stdout: every check at its
/// longest, then `Ready`.
pub const MAX_INIT_BYTES: usize = MAX_CHECKS * (5 + 1 + 4 + MAX_CHECK_NAME + 1 + 4 + MAX_CHECK_DETAIL) + 5;

/// Why init's report was refused.
#[derive(Debug)]
pub enum InitError {
    /// Reading failed, the pipe closed before `Ready`, or a malformed frame.
    Read(ReadError),
    /// More than [`MAX_INIT_BYTES`] or [`MAX_CHECKS`] checks without a `Ready`.
    TooLong,
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
        }
    }
}

/// The supervisor's end of init's stdout.
pub struct InitReceiver {
    pipe: File,
    reader: FrameReader,
    taken: usize,
    checks: Vec<ProbeCheck>,
}

impl InitReceiver {
    pub fn new(pipe: File) -> InitReceiver {
        InitReceiver {
            pipe,
            reader: FrameReader::default(),
            taken: 0,
            checks: Vec::new(),
        }
    }

    pub fn pipe(&self) -> &File {
        &self.pipe
    }

    /// One step of waiting for `Ready`, for a poll loop: reads once (call
    /// when the pipe is readable). `Ok(Some(checks))` when `Ready` arrived
    /// (the boot probe's checks before it, in order), `Ok(None)` when more
    /// is needed; anything else, EOF first, bytes after `Ready`, or more
    /// than the bounds is an error.
    pub fn wait_for_ready(&mut self) -> Result<Option<Vec<ProbeCheck>>, InitError> {
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
                Ok(Some(InitMsg::Check { .. })) if self.checks.len() == MAX_CHECKS => return Err(InitError::TooLong),
                Ok(Some(InitMsg::Check { name, ok, detail })) => self.checks.push(ProbeCheck { name, ok, detail }),
                Ok(Some(InitMsg::Ready)) if self.reader.is_empty() => {
                    return Ok(Some(std::mem::take(&mut self.checks)))
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

impl ProbeCheck {
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

/// Most bytes of a probe request: one frame.
pub const MAX_REQUEST_BYTES: u64 = crate::wire::codec::MAX_FRAME_LEN as u64 + 4;

/// Host Coordinator → PID 1 (`gen/probe-request`, init's stdin at boot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeCmd {
    /// Run `checks` in order; `sandbox_src` is the sandbox's address on its
    /// only NIC (what a route through the router leaves from).
    Run {
        sandbox_src: IpAddr,
        checks: Vec<ProbeSpec>,
    },
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

impl Message for ProbeCmd {
    fn encode(&self) -> Vec<u8> {
        match self {
            ProbeCmd::Run { sandbox_src, checks } => {
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
                ProbeCmd::Run { sandbox_src, checks }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            ProbeCmd::Run { .. } => "Run",
        }
    }
}

/// Why the probe could not take its request.
#[derive(Debug)]
pub enum RequestError {
    Read(std::io::Error),
    Malformed(DecodeError),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            RequestError::Read(e) => write!(f, "reading the request: {e}"),
            RequestError::Malformed(e) => write!(f, "malformed request: {e}"),
        }
    }
}

/// The probe's side: the one `Run` on stdin, read to EOF (bounded by the
/// frame maximum).
pub fn wait_for_run(r: &mut impl Read) -> Result<(IpAddr, Vec<ProbeSpec>), RequestError> {
    let mut buf = Vec::new();
    r.take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(RequestError::Read)?;
    match super::decode_one::<ProbeCmd>(&buf) {
        Ok(ProbeCmd::Run { sandbox_src, checks }) => Ok((sandbox_src, checks)),
        Err(e) => Err(RequestError::Malformed(e)),
    }
}

/// Longest reason the host takes from `init user-setup`.
pub const MAX_SETUP_REASON: usize = 1024;

/// `init user-setup` → Host Coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupMsg {
    /// The profile's user exists (made now or already there).
    Done,
    /// It could not be made: why (not yet escaped).
    Failed { reason: String },
}

impl Message for SetupMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            SetupMsg::Done => Enc::new(1).finish(),
            SetupMsg::Failed { reason } => Enc::new(2).str(reason).finish(),
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => SetupMsg::Done,
            2 => {
                let reason = d.str()?;
                if reason.len() > MAX_SETUP_REASON {
                    return Err(DecodeError::BadValue("setup reason"));
                }
                SetupMsg::Failed { reason }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            SetupMsg::Done => "Done",
            SetupMsg::Failed { .. } => "Failed",
        }
    }
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
            InitMsg::Ready,
        ]
    }

    pub(crate) fn samples_cmd() -> Vec<ProbeCmd> {
        let p = |s: &str| s.parse::<Prefix>().unwrap();
        vec![
            ProbeCmd::Run {
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
            ProbeCmd::Run {
                sandbox_src: "::1".parse().unwrap(),
                checks: Vec::new(),
            },
        ]
    }

    #[test]
    fn probe_request_is_one_frame_to_eof() {
        let b = samples_cmd()[0].encode();
        let (src, checks) = wait_for_run(&mut &b[..]).unwrap();
        assert_eq!(src.to_string(), "169.254.255.1");
        assert_eq!(checks.len(), 3);
        assert!(wait_for_run(&mut &b"deny=192.168.0.1@192.168.0.0/16"[..]).is_err());
        let mut t = b.clone();
        t.push(1);
        assert!(wait_for_run(&mut &t[..]).is_err());
    }

    pub(crate) fn samples_setup() -> Vec<SetupMsg> {
        vec![
            SetupMsg::Done,
            SetupMsg::Failed {
                reason: "cannot write /etc/passwd: Read-only file system".into(),
            },
        ]
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

    fn ready_of(bytes: &[u8]) -> Result<Vec<ProbeCheck>, InitError> {
        let mut rx = InitReceiver::new(pipe_with(bytes));
        loop {
            match rx.wait_for_ready() {
                Ok(None) => continue,
                Ok(Some(checks)) => return Ok(checks),
                Err(e) => return Err(e),
            }
        }
    }

    fn report(msgs: &[InitMsg]) -> Vec<u8> {
        msgs.iter().flat_map(Message::encode).collect()
    }

    #[test]
    fn init_ready_is_a_frame_and_anything_else_fails_closed() {
        assert!(ready_of(&InitMsg::Ready.encode()).unwrap().is_empty());
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
        let checks = ready_of(&report(&samples_init())).unwrap();
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[1].line(), "FAIL dns 10.0.2.3: no answer: \\x1b[31m");
        // Checks without Ready (EOF), something after Ready, the old text,
        // a cut frame.
        assert!(matches!(
            ready_of(&report(&samples_init()[..2])),
            Err(InitError::Read(ReadError::Closed))
        ));
        let mut after = samples_init();
        after.push(samples_init()[0].clone());
        assert!(ready_of(&report(&after)).is_err());
        assert!(ready_of(b"ok dns: fine\n").is_err());
        let b = report(&samples_init());
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
        full.push(InitMsg::Ready);
        assert!(report(&full).len() <= MAX_INIT_BYTES);
    }
}
