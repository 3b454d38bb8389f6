//! The Network Sidecar role on the Host Coordinator's side: it
//! derives the policy from trusted config, hands the install plan to the
//! Runtime Supervisor, owns the slirp4netns record, asks for the
//! pre-publication probe the sandbox's init runs at boot, judges it and
//! records the network readiness fingerprint. The Network Sidecar ID is a random role
//! id minted here, never a helper pid.
//!
//! The coordinator calls, in order: [`NetRole::new`] (with the config),
//! [`NetRole::prepare`] (writes `gen/netplan` and `gen/resolv.conf`),
//! [`NetRole::boot_request`] (the probe, for init's boot request),
//! [`NetRole::record_intent`] (before the supervisor may start the helper),
//! [`NetRole::status_msg`] for each supervisor report before `Ready`, then
//! [`NetRole::verify`] before publication.

use std::path::{Path, PathBuf};

use crate::config::{Config, Profile};
use crate::domain::{random_id, DomainId, Generation};
use crate::net::install as netns;
use crate::net::policy::{self as netpolicy, Policy};
use crate::plan::BindMount;
use crate::storage::store::{NetworkReadiness, Store};
use crate::sys;
use crate::wire::guest::{BootCmd, ProbeCheck, MAX_CHECKS};
use crate::wire::plan::PlanMsg;
use crate::wire::show::{NetReadiness as WireReadiness, RouterFacts, ShowMsg};
use crate::wire::supervisor::StatusMsg;

/// The readiness summary `lazaret net show` reads, in the generation dir
/// (`wire::show::ShowMsg::NetReadiness`).
pub const READINESS_FILE: &str = "net-readiness";

pub struct NetRole {
    pub policy: Policy,
    pub sidecar_id: String,
    gen_dir: PathBuf,
    slirp_row: Option<i64>,
    slirp: Option<(i32, u64)>,
    netns_inode: Option<u64>,
    router_inode: Option<u64>,
    /// The boot probe's checks as the supervisor relayed them, in order
    /// (at most `MAX_CHECKS`; `probe_overflow` when more came).
    probe: Vec<ProbeCheck>,
    probe_overflow: bool,
}

/// Why the network role could not derive, prepare or attest the network:
/// a variant per step, with the io error where there is one.
#[derive(Debug)]
pub enum SidecarError {
    /// `getifaddrs`.
    HostAddrs(std::io::Error),
    /// `ip route show … type local` could not be started.
    RouteDump(std::io::Error),
    /// … or failed (its stderr).
    /// A line of it that is not a local route.
    LocalRoute(String),
    Policy(netpolicy::NetError),
    Store(crate::storage::store::StoreError),
    /// Writing a file of the generation dir (its name).
    Write(&'static str, std::io::Error),
    NotAttested,
    RouterNotAttested,
    SlirpGone,
    WrongNamespace {
        seen: u64,
        attested: u64,
    },
    /// `/proc/PID/ns/net` is unreadable.
    NsInode(i32, std::io::Error),
    /// The probe's failed checks.
    ProbeFailed(String),
    /// The probe's report has too many or too few checks (what).
    ProbeReport(String),
}

impl std::fmt::Display for SidecarError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use SidecarError::*;
        match self {
            HostAddrs(e) => write!(f, "cannot list the host's network addresses (getifaddrs): {e}"),
            RouteDump(e) => write!(f, "cannot list the host's local routes over netlink: {e}"),
            LocalRoute(l) => write!(f, "cannot read the host's local route {l:?}"),
            Policy(e) => write!(f, "{e}"),
            Store(e) => write!(f, "{e}"),
            Write(name, e) => write!(f, "writing {name}: {e}"),
            NotAttested => write!(f, "the supervisor did not attest network readiness"),
            RouterNotAttested => write!(f, "the supervisor did not attest the router namespace"),
            SlirpGone => write!(f, "network readiness: slirp4netns is not running"),
            WrongNamespace { seen, attested } => write!(
                f,
                "network readiness: runsc runs in network namespace {seen}, not the attested {attested}"
            ),
            NsInode(pid, e) => write!(
                f,
                "network readiness: cannot read the network namespace of pid {pid}: {e}"
            ),
            ProbeFailed(checks) => write!(f, "network probe failed, the Domain is not published: {checks}"),
            ProbeReport(e) => write!(f, "network probe report: {e}; the Domain is not published"),
        }
    }
}

impl std::error::Error for SidecarError {}

impl From<crate::storage::store::StoreError> for SidecarError {
    fn from(e: crate::storage::store::StoreError) -> Self {
        SidecarError::Store(e)
    }
}

/// Every IPv4 address configured on the host's interfaces now (the
/// coordinator runs in the host's network namespace). Fails closed: a
/// Domain whose host addresses cannot be listed does not start.
pub fn host_ipv4_addrs() -> Result<Vec<std::net::Ipv4Addr>, SidecarError> {
    crate::sys::ipv4_addrs().map_err(SidecarError::HostAddrs)
}

/// Every IPv4 prefix the host's kernel delivers locally: the `local`
/// routes of all its route tables (what `ip -4 route show table all type
/// local` lists). This is what makes an address the host's: it covers
/// interface addresses and also "AnyIP" routes (`ip route add local P dev
/// lo`) that no interface carries and `getifaddrs` does not list. Read
/// from the kernel over netlink (a route dump), not by running `ip`, which
/// cost every start about 3 ms. Fails closed: an error, an interrupted or
/// malformed dump is an error, never a shorter list.
pub fn host_local_nets() -> Result<Vec<crate::config::Prefix>, SidecarError> {
    let dump = crate::sys::netlink_route_dump(&route_dump_request(), 65_536).map_err(SidecarError::RouteDump)?;
    parse_local_route_dump(&dump)
}

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_DUMP_INTR: u16 = 0x10;
const RTN_LOCAL: u8 = 2;
const RTA_DST: u16 = 1;
const AF_INET: u8 = 2;

/// `RTM_GETROUTE` with `NLM_F_DUMP` for IPv4: a 16-byte `nlmsghdr` and a
/// zeroed 12-byte `rtmsg` (table 0: every table).
pub fn route_dump_request() -> Vec<u8> {
    let mut m = Vec::with_capacity(28);
    m.extend_from_slice(&28u32.to_ne_bytes());
    m.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel fills it
    m.extend_from_slice(&[AF_INET, 0, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&0u32.to_ne_bytes()); // rtm_flags
    m
}

/// The `local` routes of a route dump (the datagrams of
/// [`crate::sys::netlink_route_dump`]) as prefixes. Refuses a dump that
/// the kernel marked interrupted, one that ends in an error or not at
/// all, and any message or attribute whose length does not fit.
pub fn parse_local_route_dump(datagrams: &[Vec<u8>]) -> Result<Vec<crate::config::Prefix>, SidecarError> {
    let bad = |what: &str| SidecarError::LocalRoute(format!("route dump: {what}"));
    let u16_at = |d: &[u8], i: usize| u16::from_ne_bytes([d[i], d[i + 1]]);
    let u32_at = |d: &[u8], i: usize| u32::from_ne_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
    let mut nets = Vec::new();
    for d in datagrams {
        let mut at = 0;
        while at < d.len() {
            if d.len() - at < 16 {
                return Err(bad("short message header"));
            }
            let len = u32_at(d, at) as usize;
            let (ty, flags) = (u16_at(d, at + 4), u16_at(d, at + 6));
            if len < 16 || len > d.len() - at {
                return Err(bad("message length out of bounds"));
            }
            if flags & NLM_F_DUMP_INTR != 0 {
                return Err(bad("interrupted by a concurrent change"));
            }
            let msg = &d[at..at + len];
            match ty {
                NLMSG_DONE => return Ok(nets),
                NLMSG_ERROR => {
                    let code = if msg.len() >= 20 { u32_at(msg, 16) as i32 } else { 0 };
                    return Err(bad(&format!("the kernel answered error {}", -code)));
                }
                RTM_NEWROUTE => {
                    if msg.len() < 28 {
                        return Err(bad("short route message"));
                    }
                    let (family, dst_len, rtype) = (msg[16], msg[17], msg[16 + 7]);
                    if family == AF_INET && rtype == RTN_LOCAL {
                        if dst_len > 32 {
                            return Err(bad("prefix length over 32"));
                        }
                        let mut dst = None;
                        let mut a = 28;
                        while a < msg.len() {
                            if msg.len() - a < 4 {
                                return Err(bad("short attribute"));
                            }
                            let alen = u16_at(msg, a) as usize;
                            if alen < 4 || alen > msg.len() - a {
                                return Err(bad("attribute length out of bounds"));
                            }
                            if u16_at(msg, a + 2) == RTA_DST {
                                if alen != 8 {
                                    return Err(bad("IPv4 destination not 4 bytes"));
                                }
                                dst = Some(std::net::Ipv4Addr::new(msg[a + 4], msg[a + 5], msg[a + 6], msg[a + 7]));
                            }
                            a += (alen + 3) & !3;
                        }
                        let addr = match (dst, dst_len) {
                            (Some(d), _) => d,
                            (None, 0) => std::net::Ipv4Addr::UNSPECIFIED,
                            (None, _) => return Err(bad("local route without a destination")),
                        };
                        nets.push(crate::config::Prefix {
                            addr: std::net::IpAddr::V4(addr),
                            len: dst_len,
                        });
                    }
                }
                _ => {}
            }
            at += (len + 3) & !3;
        }
    }
    Err(bad("no end of dump"))
}

impl NetRole {
    pub fn new(cfg: &Config, profile: &Profile) -> Result<NetRole, SidecarError> {
        let (host, nets) = if profile.egress.networked() {
            (host_ipv4_addrs()?, host_local_nets()?)
        } else {
            (Vec::new(), Vec::new())
        };
        let policy = netpolicy::derive_with_host_nets(&cfg.path, cfg.default_deny.as_deref(), profile, &host, &nets)
            .map_err(SidecarError::Policy)?
            .by_name(profile);
        for w in &policy.warnings {
            log::warn!("network policy: {w}");
        }
        Ok(NetRole {
            policy,
            sidecar_id: random_id(8),
            gen_dir: PathBuf::new(),
            slirp_row: None,
            slirp: None,
            netns_inode: None,
            router_inode: None,
            probe: Vec::new(),
            probe_overflow: false,
        })
    }

    /// Records the Network Sidecar ID and writes the install plan and the
    /// sandbox's resolv.conf into the generation dir.
    pub fn prepare(&mut self, store: &Store, generation: Generation, gen_dir: &Path) -> Result<(), SidecarError> {
        self.gen_dir = gen_dir.to_path_buf();
        store.record_component(generation, "network-sidecar", &self.sidecar_id)?;
        let w = |name: &'static str, text: String| {
            std::fs::write(gen_dir.join(name), text).map_err(|e| SidecarError::Write(name, e))
        };
        crate::wire::plan::write_plan(&gen_dir.join("netplan"), &PlanMsg::Network(self.policy.plan()))
            .map_err(|e| SidecarError::Write("netplan", e))?;
        w("resolv.conf", self.policy.resolv_conf())
    }

    pub fn supervisor_args(&self) -> Vec<PathBuf> {
        vec!["--net-plan".into(), self.gen_dir.join("netplan")]
    }

    /// What init probes at boot, when the Domain has a network.
    pub fn boot_request(&self) -> Option<BootCmd> {
        self.policy.egress.networked().then(|| self.policy.probe_request())
    }

    /// The namespace path for `config.json`, when the Domain has a network.
    pub fn sandbox_netns(&self) -> Option<PathBuf> {
        self.policy
            .egress
            .networked()
            .then(|| self.gen_dir.join(netns::SANDBOX_FILE))
    }

    pub fn binds(&self) -> Vec<BindMount> {
        if !self.policy.egress.networked() {
            return Vec::new();
        }
        vec![BindMount {
            guest: "/etc/resolv.conf".into(),
            host: self.gen_dir.join("resolv.conf"),
            read_only: true,
        }]
    }

    /// Ownership intent for the helper, recorded before the supervisor is
    /// allowed to start it.
    pub fn record_intent(&mut self, store: &Store, generation: Generation) -> Result<Option<i64>, SidecarError> {
        if !self.policy.egress.networked() {
            return Ok(None);
        }
        let row = store.record_intent(generation, crate::storage::store::OwnedKind::Process, "slirp4netns")?;
        self.slirp_row = Some(row);
        Ok(Some(row))
    }

    /// Handles the supervisor's `Slirp`, `NetReady` and `ProbeCheck`
    /// reports; false for any other message.
    pub fn status_msg(&mut self, msg: &StatusMsg, store: &Store) -> bool {
        match *msg {
            StatusMsg::ProbeCheck(ref c) => {
                if self.probe.len() < MAX_CHECKS {
                    self.probe.push(c.clone());
                } else {
                    self.probe_overflow = true;
                }
                true
            }
            StatusMsg::Slirp { pid, start } => {
                if let Some(row) = self.slirp_row {
                    let _ = store.set_owned_pid(row, pid, start);
                }
                self.slirp = Some((pid, start));
                true
            }
            StatusMsg::NetReady { inode, router_inode } => {
                self.netns_inode = Some(inode);
                self.router_inode = Some(router_inode);
                true
            }
            _ => false,
        }
    }

    /// Before publication: the helper still runs, the sandbox is in the
    /// attested namespace, and the probe init ran at boot passed, from the
    /// sandbox's own view. Then records the readiness fingerprint.
    pub fn verify(
        &self,
        store: &Store,
        domain_id: &DomainId,
        generation: Generation,
        config_fp: &str,
        supervisor_pid: i32,
        runsc_pid: i32,
    ) -> Result<(), SidecarError> {
        let (inode, router_inode, probe) = if self.policy.egress.networked() {
            let inode = self.netns_inode.ok_or(SidecarError::NotAttested)?;
            let router_inode = self.router_inode.ok_or(SidecarError::RouterNotAttested)?;
            match self.slirp {
                Some((pid, start)) if sys::same_process(pid, start) => {}
                _ => return Err(SidecarError::SlirpGone),
            }
            let seen = ns_inode(runsc_pid)?;
            if seen != inode {
                return Err(SidecarError::WrongNamespace { seen, attested: inode });
            }
            (
                inode,
                router_inode,
                judge_probe(&self.probe, self.probe_overflow, self.policy.probe_checks().len())?,
            )
        } else {
            (ns_inode(supervisor_pid)?, 0, vec![ProbeLine::Skipped])
        };
        // The store and the log get the escaped text; `net show` the
        // checks as received (it escapes what it prints).
        let probe_text: Vec<String> = probe.iter().map(ProbeLine::escaped).collect();
        let probe_lines: Vec<String> = probe.iter().map(ProbeLine::raw).collect();
        let digest = self.policy.digest();
        let fingerprint = netpolicy::readiness_fingerprint(
            domain_id.as_str(),
            generation.get(),
            config_fp,
            &self.sidecar_id,
            &digest,
            inode,
            router_inode,
        );
        let r = NetworkReadiness {
            generation: generation.get(),
            sidecar_id: self.sidecar_id.clone(),
            policy_digest: digest,
            netns_inode: inode,
            fingerprint,
            probe: probe_text.join("\n"),
        };
        store.record_network_readiness(&r)?;
        let router = self.policy.egress.networked().then(|| {
            let count = |k| self.policy.plan().routes.iter().filter(|r| r.kind == k).count() as u32;
            RouterFacts {
                netns_inode: router_inode,
                refused: count(netpolicy::RouteKind::Reject),
                forwarded: count(netpolicy::RouteKind::Helper),
            }
        });
        let summary = ShowMsg::NetReadiness(WireReadiness {
            generation: r.generation,
            sidecar_id: r.sidecar_id.clone(),
            policy_digest: r.policy_digest.clone(),
            netns_inode: r.netns_inode,
            fingerprint: r.fingerprint.clone(),
            helper_pid: self.slirp.map(|s| s.0),
            probe: probe_lines,
            router,
        });
        // Only `net show` reads it: a failed write leaves "not attested yet".
        if let Err(e) = crate::wire::show::write(&self.gen_dir.join(READINESS_FILE), &summary) {
            log::warn!("writing {READINESS_FILE}: {e}");
        }
        log::info!("network ready: fingerprint {}", r.fingerprint);
        Ok(())
    }
}

fn ns_inode(pid: i32) -> Result<u64, SidecarError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .map(|m| m.ino())
        .map_err(|e| SidecarError::NsInode(pid, e))
}

/// One line of the probe report: a check as the sandbox reported it, or
/// why there was no probe.
enum ProbeLine {
    Check(ProbeCheck),
    Skipped,
}

impl ProbeLine {
    const SKIPPED: &'static str = "skipped: network.mode = \"none\"";

    /// For the store and the log.
    fn escaped(&self) -> String {
        match self {
            ProbeLine::Check(c) => c.line(),
            ProbeLine::Skipped => Self::SKIPPED.into(),
        }
    }

    /// For `net show`, which escapes what it prints.
    fn raw(&self) -> String {
        match self {
            ProbeLine::Check(c) => format!("{} {}: {}", if c.ok { "ok" } else { "FAIL" }, c.name, c.detail),
            ProbeLine::Skipped => Self::SKIPPED.into(),
        }
    }
}

/// The boot probe's report, judged: one check for each asked for, and
/// every one passed; otherwise the failing ones (or what is wrong with
/// the report). Its checks came from inside the sandbox: the text is
/// escaped wherever it is shown.
fn judge_probe(checks: &[ProbeCheck], overflow: bool, asked: usize) -> Result<Vec<ProbeLine>, SidecarError> {
    if overflow {
        return Err(SidecarError::ProbeReport(format!("more than {MAX_CHECKS} checks")));
    }
    let lines: Vec<String> = checks.iter().map(ProbeCheck::line).collect();
    log::info!("network probe:\n{}", lines.join("\n"));
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.line().trim_start_matches("FAIL ").to_string())
        .collect();
    if !failed.is_empty() {
        return Err(SidecarError::ProbeFailed(failed.join("; ")));
    }
    if checks.len() != asked {
        return Err(SidecarError::ProbeReport(format!(
            "{} checks reported, {asked} asked for",
            checks.len()
        )));
    }
    Ok(checks.iter().cloned().map(ProbeLine::Check).collect())
}

#[cfg(test)]
mod probe_tests {
    use super::*;

    fn check(name: &str, ok: bool) -> ProbeCheck {
        ProbeCheck {
            name: name.into(),
            ok,
            detail: "seen \x1b[2J".into(),
        }
    }

    #[test]
    fn the_boot_probe_passes_only_with_every_check_asked_for_passed() {
        let good = [check("router live", true), check("ipv6 disabled", true)];
        assert_eq!(judge_probe(&good, false, 2).unwrap().len(), 2);
        // A failed check names itself, escaped.
        let bad = [check("router live", true), check("deny 10.0.0.1 (10.0.0.0/8)", false)];
        match judge_probe(&bad, false, 2) {
            Err(SidecarError::ProbeFailed(t)) => assert_eq!(t, "deny 10.0.0.1 (10.0.0.0/8): seen \\x1b[2J"),
            r => panic!("{:?}", r.map(|l| l.len())),
        }
        // Fewer or more checks than asked for, none at all, too many.
        assert!(matches!(
            judge_probe(&good[..1], false, 2),
            Err(SidecarError::ProbeReport(_))
        ));
        assert!(matches!(
            judge_probe(&good, false, 3),
            Err(SidecarError::ProbeReport(_))
        ));
        assert!(matches!(judge_probe(&[], false, 3), Err(SidecarError::ProbeReport(_))));
        assert!(matches!(judge_probe(&good, true, 2), Err(SidecarError::ProbeReport(_))));
    }
}

#[cfg(test)]
mod local_route_tests {
    use super::*;

    /// The reference the netlink reader is checked against: `ip -4 -o
    /// route show table all type local`, what the host's local prefixes
    /// were read from before.
    pub fn parse_local_routes(text: &str) -> Result<Vec<crate::config::Prefix>, SidecarError> {
        let mut nets = Vec::new();
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut f = l.split_whitespace();
            let dest = match (f.next(), f.next()) {
                (Some("local"), Some(d)) => d,
                _ => return Err(SidecarError::LocalRoute(l.to_string())),
            };
            let dest = if dest.contains('/') {
                dest.to_string()
            } else {
                format!("{dest}/32")
            };
            // The kernel prints canonical prefixes, host bits may be set by
            // the user; keep the length and mask it in the policy.
            let (a, len) = dest.split_once('/').unwrap();
            let addr: std::net::Ipv4Addr = a.parse().map_err(|_| SidecarError::LocalRoute(l.to_string()))?;
            let len: u8 = len
                .parse()
                .ok()
                .filter(|n| *n <= 32)
                .ok_or_else(|| SidecarError::LocalRoute(l.to_string()))?;
            nets.push(crate::config::Prefix {
                addr: std::net::IpAddr::V4(addr),
                len,
            });
        }
        Ok(nets)
    }

    /// A netlink message: header (type, flags) and payload, padded to 4.
    fn nlmsg(ty: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&[0; 8]);
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    /// An IPv4 route: rtmsg (dst_len, type) and attributes (type, value).
    fn route(dst_len: u8, rtype: u8, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut p = vec![AF_INET, dst_len, 0, 0, 255, 2, 254, rtype, 0, 0, 0, 0];
        for (t, v) in attrs {
            p.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            p.extend_from_slice(&t.to_ne_bytes());
            p.extend_from_slice(v);
            while p.len() % 4 != 0 {
                p.push(0);
            }
        }
        nlmsg(RTM_NEWROUTE, 2, &p)
    }

    fn shown(nets: &[crate::config::Prefix]) -> Vec<String> {
        nets.iter().map(|p| format!("{}/{}", p.addr, p.len)).collect()
    }

    #[test]
    fn a_route_dump_yields_its_local_routes_and_anything_unsound_fails_closed() {
        const RTA_TABLE: u16 = 15;
        let local = route(
            32,
            RTN_LOCAL,
            &[(RTA_TABLE, &255u32.to_ne_bytes()), (RTA_DST, &[10, 1, 2, 3])],
        );
        let unicast = route(24, 1, &[(RTA_DST, &[192, 0, 2, 0])]);
        let anyip_default = route(0, RTN_LOCAL, &[]);
        let done = nlmsg(NLMSG_DONE, 2, &0i32.to_ne_bytes());
        // Spread over two datagrams, as a long dump is.
        let dump = vec![
            [local.clone(), unicast.clone()].concat(),
            [anyip_default, done.clone()].concat(),
        ];
        assert_eq!(
            shown(&parse_local_route_dump(&dump).unwrap()),
            ["10.1.2.3/32", "0.0.0.0/0"]
        );
        assert!(parse_local_route_dump(std::slice::from_ref(&done)).unwrap().is_empty());

        let refused = |dump: Vec<Vec<u8>>, why: &str| {
            assert!(parse_local_route_dump(&dump).is_err(), "{why} must fail closed");
        };
        refused(vec![local.clone()], "a dump without its end");
        refused(
            vec![[local.clone(), nlmsg(NLMSG_ERROR, 0, &(-16i32).to_ne_bytes())].concat()],
            "an error",
        );
        let mut intr = local.clone();
        intr[6..8].copy_from_slice(&(2 | NLM_F_DUMP_INTR).to_ne_bytes());
        refused(vec![[intr, done.clone()].concat()], "an interrupted dump");
        let mut long = local.clone();
        long[0..4].copy_from_slice(&4096u32.to_ne_bytes());
        refused(
            vec![[long, done.clone()].concat()],
            "a message longer than its datagram",
        );
        refused(vec![local[..20].to_vec()], "a cut message");
        refused(
            vec![[route(33, RTN_LOCAL, &[(RTA_DST, &[10, 0, 0, 0])]), done.clone()].concat()],
            "/33",
        );
        refused(
            vec![[route(24, RTN_LOCAL, &[]), done.clone()].concat()],
            "a prefix without its address",
        );
        refused(
            vec![[
                route(32, RTN_LOCAL, &[(RTA_DST, &[10, 0, 0, 1, 0, 0, 0, 0])]),
                done.clone(),
            ]
            .concat()],
            "an 8-byte IPv4 address",
        );
        let mut bad_attr = route(32, RTN_LOCAL, &[(RTA_DST, &[10, 0, 0, 1])]);
        let a = 16 + 12;
        bad_attr[a..a + 2].copy_from_slice(&200u16.to_ne_bytes());
        refused(vec![[bad_attr, done].concat()], "an attribute longer than its message");
    }

    /// The kernel's answer over netlink is what `ip` prints, on this host.
    #[test]
    fn the_netlink_reader_agrees_with_ip_on_this_host() {
        let Ok(out) = std::process::Command::new(netns::tool("ip"))
            .args(["-4", "-o", "route", "show", "table", "all", "type", "local"])
            .output()
        else {
            assert!(std::env::var_os("LAZARET_MUST_WORK").is_none(), "no ip to compare with");
            eprintln!("skipping: no ip to compare the netlink reader with");
            return;
        };
        assert!(out.status.success(), "{out:?}");
        let mut want = shown(&parse_local_routes(&String::from_utf8_lossy(&out.stdout)).unwrap());
        let mut got = shown(&host_local_nets().unwrap());
        want.sort();
        got.sort();
        assert!(got.iter().any(|p| p == "127.0.0.0/8"), "loopback is local: {got:?}");
        assert_eq!(got, want);
    }

    #[test]
    fn local_routes_are_parsed_and_garbage_fails_closed() {
        let text = "local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1 \n\
                    local 192.0.2.2 dev eth0 table local proto kernel scope host src 192.0.2.2 \n\
                    local 198.18.201.0/24 dev lo table local scope host \n";
        let nets: Vec<String> = parse_local_routes(text)
            .unwrap()
            .iter()
            .map(|p| format!("{}/{}", p.addr, p.len))
            .collect();
        assert_eq!(nets, ["127.0.0.0/8", "192.0.2.2/32", "198.18.201.0/24"]);
        assert!(parse_local_routes("unicast 1.2.3.4 dev x\n").is_err());
        assert!(parse_local_routes("local 1.2.3.4/33 dev x\n").is_err());
        assert!(parse_local_routes("").unwrap().is_empty());
    }
}
