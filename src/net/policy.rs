//! The derived network policy and everything about it that is pure:
//! derivation from trusted config (and the host's own addresses), the
//! install plan handed to the Runtime Supervisor, the read-back checks of
//! installed routes, the router's route-lookup attestation, the
//! probe's sample addresses, digests and the readiness fingerprint.
//!
//! Where a decision is enforced (docs/network.md). The sandbox (gVisor's
//! netstack) has one NIC, `lzr0`, and one route: `default via
//! 169.254.255.2`. Its other end, `lzr1`, lives in the generation's
//! **router namespace**, a plain host-kernel network namespace that also
//! holds slirp4netns's `tap0` and forwards between them. The policy is the
//! router's main route table:
//!
//! * `helper` routes go `via 10.0.2.2 dev tap0` (slirp4netns);
//! * `reject` routes are `local P dev lo table main`: the router takes the
//!   packet for itself, nothing listens, a TCP connect gets a RST
//!   (connection refused) at once, UDP gets an ICMP port unreachable.
//!
//! The sandbox can change gVisor's routes (a nested user namespace gives it
//! CAP_NET_ADMIN inside gVisor), but every packet it sends still arrives at
//! `lzr1` and is routed by the router's kernel, which it cannot configure.
//! Reject routes sit in the main table (not `local`, which is consulted
//! before main) so the longest prefix decides across allows and denies.
//!
//! slirp4netns's own network `10.0.2.0/24` (tap0's connected route in the
//! router) lies inside the `10.0.0.0/8` deny and is more specific, so by
//! itself it would open all of it. More specific reject routes close it
//! again except for exactly the gateway `10.0.2.2` (the next hop; host
//! loopback is disabled, so it refuses connections) and the DNS forwarder
//! `10.0.2.3` when it is the Domain's resolver: `10.0.2.0/31`,
//! `10.0.2.4/30`, `10.0.2.8/29`, …, `10.0.2.128/25` (and `10.0.2.3/32`
//! with custom resolvers). Every IPv4 address of the host's interfaces at
//! Domain start is denied with a `/32` (slirp4netns connects from the host,
//! so a service bound on `0.0.0.0` would otherwise be reachable); a profile
//! `allow` of exactly that `/32` opens it. Longest prefix wins; an allow
//! and a deny of the very same prefix end as deny, with a warning.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use crate::config::hosts::HostPattern;
use crate::config::{Prefix, Profile};
use crate::plan::Json;
use crate::wire::guest::{ProbeCmd, ProbeKind, ProbeSpec};

/// slirp4netns's fixed addresses (`--configure`, default `--cidr`). `tap0`
/// and the guest address `10.0.2.100` are the router's.
pub const TAP: &str = "tap0";
pub const SLIRP_GUEST: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);
pub const SLIRP_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
pub const SLIRP_DNS: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);
pub const MTU: u32 = 65520;
/// The veth between the sandbox and the router: the sandbox's end (gVisor's
/// only NIC) and the router's end, with their addresses.
pub const SANDBOX_IF: &str = "lzr0";
pub const ROUTER_IF: &str = "lzr1";
pub const SANDBOX_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 255, 1);
pub const ROUTER_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 255, 2);
pub const ROUTER_LINK: &str = "169.254.255.0/30";
pub const SLIRP_NET: &str = "10.0.2.0/24";
/// A global IPv6 destination for the IPv6 route-decision check.
pub const IPV6_SAMPLE: &str = "2000::1";

/// The built-in default deny list (replaceable by `[network] default_deny`),
/// each with the reason it is denied. See docs/network.md.
pub const DEFAULT_DENY: &[(&str, &str)] = &[
    (
        "0.0.0.0/8",
        "\"this network\" (RFC 1122); 0.0.0.0 reaches the local host on Linux",
    ),
    ("10.0.0.0/8", "private network (RFC 1918)"),
    (
        "100.64.0.0/10",
        "carrier-grade NAT shared space (RFC 6598), also used by VPN overlays",
    ),
    (
        "169.254.0.0/16",
        "link-local (RFC 3927), includes cloud metadata at 169.254.169.254",
    ),
    ("172.16.0.0/12", "private network (RFC 1918)"),
    ("192.168.0.0/16", "private network (RFC 1918)"),
    (
        "224.0.0.0/4",
        "multicast: LAN discovery (mDNS, SSDP) reaches local devices",
    ),
    (
        "240.0.0.0/4",
        "reserved (RFC 1112), includes the limited broadcast 255.255.255.255",
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Allow,
    Deny,
}

/// Where a rule comes from, for `lazaret net show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Built-in default deny, with its reason.
    Builtin(&'static str),
    /// `[network] default_deny` in the config file.
    ConfigDefault,
    ProfileAllow,
    ProfileDeny,
    /// A resolver of the Domain: always reachable.
    Resolver,
    /// slirp4netns's network (tap0's kernel route, not installed by us).
    SlirpNet,
    /// The part of slirp4netns's network that is neither gateway nor DNS.
    SlirpRest,
    /// Everything not matched by a more specific rule.
    Default,
    /// The sandbox–router link's own /30 (a kernel route, not installed by us).
    RouterLink,
    /// An IPv4 address of the host's interfaces at Domain start.
    HostAddress,
}

impl Source {
    pub fn describe(&self) -> String {
        match self {
            Source::Builtin(why) => format!("built-in default: {why}"),
            Source::ConfigDefault => "[network] default_deny".into(),
            Source::ProfileAllow => "profile network.allow".into(),
            Source::ProfileDeny => "profile network.deny".into(),
            Source::Resolver => "DNS resolver of the Domain".into(),
            Source::SlirpNet => {
                "slirp4netns network: gateway 10.0.2.2 (host loopback disabled) and DNS 10.0.2.3".into()
            }
            Source::SlirpRest => "slirp4netns network, except gateway and DNS".into(),
            Source::Default => "everything else".into(),
            Source::RouterLink => "link between the sandbox and the router".into(),
            Source::HostAddress => {
                "an address of this host (at Domain start): services bound on 0.0.0.0 would be reachable".into()
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub prefix: Prefix,
    pub action: Action,
    pub source: Source,
}

impl Rule {
    /// Where the decision for this rule is enforced, for `lazaret net show`.
    pub fn enforced_at(&self) -> &'static str {
        match (&self.source, self.action) {
            (Source::RouterLink, _) => "router link",
            (Source::SlirpNet, _) => "router: forwarded",
            (_, Action::Deny) => "router: refused",
            (_, Action::Allow) => "router: forwarded",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// false: `network.mode = "none"`, loopback only.
    pub enabled: bool,
    /// Sorted by prefix length (longest first), then address.
    pub rules: Vec<Rule>,
    pub resolvers: Vec<Ipv4Addr>,
    /// Resolvers come from `network.dns` (slirp's forwarder is disabled).
    pub custom_dns: bool,
    /// IPv6 prefixes in the config, ignored because IPv6 is disabled.
    pub ignored_v6: Vec<Prefix>,
    pub warnings: Vec<String>,
    /// Allow-by-name mode (`network.hosts` or `network.mode = "log"`):
    /// the sandbox's traffic goes to the egress gate, not forwarded.
    pub gate: Option<Gate>,
}

/// Allow-by-name mode (docs/network.md, "Egress by name").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    /// `network.mode = "log"`: every name is allowed and logged.
    pub log_only: bool,
    /// `[network] hosts` then the profile's, without duplicates.
    pub hosts: Vec<HostPattern>,
    /// What the gate resolves names through: the profile's `network.dns`,
    /// else slirp4netns's forwarder (the host's resolver).
    pub upstream: Vec<Ipv4Addr>,
}

/// The gate's address for the sandbox: its DNS resolver and explicit proxy
/// (`HTTPS_PROXY=http://169.254.255.2:3128`) live on the router's end of
/// the link.
pub const GATE_ADDR: Ipv4Addr = ROUTER_ADDR;
/// The gate's explicit-proxy port (any gate port takes `CONNECT` too).
pub const PROXY_PORT: u16 = 3128;
/// The router's table of what it still forwards for the sandbox in
/// allow-by-name mode (profile `allow` ranges, slirp4netns's gateway).
pub const GATE_TABLE: u32 = 100;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetError {
    /// `ipv6 = true`: no IPv6 policy is implemented, and it is never left open.
    Ipv6Unsupported { file: PathBuf, profile: String },
    /// An IPv6 prefix in `network.allow` while IPv6 is disabled.
    Ipv6Allow {
        file: PathBuf,
        profile: String,
        prefix: Prefix,
    },
    /// A resolver the policy itself denies.
    ResolverDenied {
        file: PathBuf,
        profile: String,
        resolver: Ipv4Addr,
    },
    /// A deny of slirp4netns's gateway itself.
    GatewayDenied { file: PathBuf, profile: String },
}

impl fmt::Display for NetError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            NetError::Ipv6Unsupported { file, profile } => write!(
                f,
                "{}: profiles.{profile}.ipv6 = true is not supported yet: Lazaret has no IPv6 policy and never \
                 leaves IPv6 open; remove the key (IPv6 is disabled in the sandbox)",
                file.display()
            ),
            NetError::Ipv6Allow { file, profile, prefix } => write!(
                f,
                "{}: profiles.{profile}.network.allow: {prefix} is IPv6, but IPv6 is disabled in the sandbox; \
                 remove it",
                file.display()
            ),
            NetError::ResolverDenied {
                file,
                profile,
                resolver,
            } => write!(
                f,
                "{}: profiles.{profile}.network.dns: resolver {resolver} is denied by an equal prefix in \
                 profiles.{profile}.network.deny; remove one of them",
                file.display()
            ),
            NetError::GatewayDenied { file, profile } => write!(
                f,
                "{}: profiles.{profile}.network.deny: {SLIRP_GATEWAY}/32 is the network helper's gateway and \
                 cannot be denied; use network.mode = \"none\" for no network",
                file.display()
            ),
        }
    }
}

fn v4(p: &Prefix) -> Option<(u32, u8)> {
    match p.addr {
        IpAddr::V4(a) => Some((u32::from(a), p.len)),
        IpAddr::V6(_) => None,
    }
}

fn pfx(s: &str) -> Prefix {
    s.parse().expect("built-in prefix")
}

fn host(a: Ipv4Addr) -> Prefix {
    Prefix {
        addr: IpAddr::V4(a),
        len: 32,
    }
}

/// Derives the policy from trusted config only: the default deny list (or
/// its replacement), the profile's allow/deny/dns/mode/ipv6, plus a `/32`
/// deny for each IPv4 address of the host's interfaces (`host_addrs`, read
/// at Domain start; see [`host_denies`]).
pub fn derive(
    file: &std::path::Path,
    default_deny: Option<&[Prefix]>,
    profile: &Profile,
    host_addrs: &[Ipv4Addr],
) -> Result<Policy, NetError> {
    derive_with_host_nets(file, default_deny, profile, host_addrs, &[])
}

/// [`derive`], plus a deny for each prefix the host's kernel treats as its
/// own (`host_nets`: the `local` routes of every table, which include
/// "AnyIP" routes such as `local 198.18.201.0/24 dev lo` that no interface
/// carries; see [`host_net_denies`]). A service bound on `0.0.0.0` answers
/// on every such address, so each is denied like an interface address.
pub fn derive_with_host_nets(
    file: &std::path::Path,
    default_deny: Option<&[Prefix]>,
    profile: &Profile,
    host_addrs: &[Ipv4Addr],
    host_nets: &[Prefix],
) -> Result<Policy, NetError> {
    let err_ctx = || (file.to_path_buf(), profile.name.clone());
    if profile.ipv6 {
        let (file, profile) = err_ctx();
        return Err(NetError::Ipv6Unsupported { file, profile });
    }
    if let Some(p) = profile.allow.iter().find(|p| !p.addr.is_ipv4()) {
        let (file, prof) = err_ctx();
        return Err(NetError::Ipv6Allow {
            file,
            profile: prof,
            prefix: *p,
        });
    }
    let mut ignored_v6 = Vec::new();
    let mut denies: Vec<Rule> = Vec::new();
    let defaults: Vec<(Prefix, Source)> = match default_deny {
        Some(list) => list.iter().map(|p| (*p, Source::ConfigDefault)).collect(),
        None => DEFAULT_DENY
            .iter()
            .map(|&(p, why)| (pfx(p), Source::Builtin(why)))
            .collect(),
    };
    let profile_denies = profile.deny.iter().map(|p| (*p, Source::ProfileDeny));
    for (p, source) in defaults.into_iter().chain(profile_denies) {
        if !p.addr.is_ipv4() {
            ignored_v6.push(p);
            continue;
        }
        if !denies.iter().any(|r| r.prefix == p) {
            denies.push(Rule {
                prefix: p,
                action: Action::Deny,
                source,
            });
        }
    }
    let host_prefixes = host_denies(host_addrs).into_iter().map(host);
    for p in host_prefixes.chain(host_net_denies(host_nets)) {
        if !denies.iter().any(|r| r.prefix == p) {
            denies.push(Rule {
                prefix: p,
                action: Action::Deny,
                source: Source::HostAddress,
            });
        }
    }
    let custom_dns = !profile.dns.is_empty();
    let resolvers: Vec<Ipv4Addr> = if custom_dns {
        profile
            .dns
            .iter()
            .filter_map(|p| match p.addr {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            })
            .collect()
    } else {
        vec![SLIRP_DNS]
    };
    let gw_denied = profile
        .deny
        .iter()
        .any(|p| p.len > 24 && p.contains(&host(SLIRP_GATEWAY)));
    if gw_denied {
        let (file, profile) = err_ctx();
        return Err(NetError::GatewayDenied { file, profile });
    }
    let mut allows: Vec<Rule> = Vec::new();
    for r in &resolvers {
        allows.push(Rule {
            prefix: host(*r),
            action: Action::Allow,
            source: Source::Resolver,
        });
    }
    for p in &profile.allow {
        allows.push(Rule {
            prefix: *p,
            action: Action::Allow,
            source: Source::ProfileAllow,
        });
    }
    let mut warnings = Vec::new();
    let mut rules = denies.clone();
    for a in allows {
        if let Some(d) = denies.iter().find(|d| d.prefix == a.prefix) {
            match a.source {
                Source::Resolver if d.source == Source::ProfileDeny => {
                    let (file, prof) = err_ctx();
                    return Err(NetError::ResolverDenied {
                        file,
                        profile: prof,
                        resolver: match a.prefix.addr {
                            IpAddr::V4(x) => x,
                            _ => unreachable!(),
                        },
                    });
                }
                Source::Resolver => {
                    // A default deny of exactly one resolver address: the
                    // resolver is what the user chose; keep it reachable.
                    rules.retain(|r| r.prefix != a.prefix);
                    rules.push(a);
                }
                Source::ProfileAllow if d.source == Source::HostAddress => {
                    // Opening one of the host's own addresses on purpose
                    // (a local dev database): only an allow of exactly it.
                    rules.retain(|r| r.prefix != a.prefix);
                    rules.push(a);
                }
                _ => warnings.push(format!(
                    "{} is both allowed ({}) and denied ({}): it is denied",
                    a.prefix,
                    a.source.describe(),
                    d.source.describe()
                )),
            }
            continue;
        }
        if !rules.iter().any(|r| r.prefix == a.prefix) {
            rules.push(a);
        }
    }
    let zero = pfx("0.0.0.0/0");
    if !rules.iter().any(|r| r.prefix == zero) {
        rules.push(Rule {
            prefix: zero,
            action: Action::Allow,
            source: Source::Default,
        });
    }
    // The kernel routes of the two links, and the rest of slirp's network.
    for (p, action, source) in [
        (pfx(ROUTER_LINK), Action::Deny, Source::RouterLink),
        (pfx(SLIRP_NET), Action::Allow, Source::SlirpNet),
    ] {
        rules.retain(|r| r.prefix != p);
        rules.push(Rule {
            prefix: p,
            action,
            source,
        });
    }
    let mut keep = vec![SLIRP_GATEWAY];
    if !custom_dns {
        keep.push(SLIRP_DNS);
    }
    for p in split_except(pfx(SLIRP_NET), &keep) {
        if !rules.iter().any(|r| r.prefix == p) {
            rules.push(Rule {
                prefix: p,
                action: Action::Deny,
                source: Source::SlirpRest,
            });
        }
    }
    sort_rules(&mut rules);
    Ok(Policy {
        enabled: profile.network,
        rules,
        resolvers,
        custom_dns,
        ignored_v6,
        warnings,
        gate: None,
    })
}

impl Policy {
    /// Allow-by-name mode when `global` (`[network] hosts`) or the
    /// profile's `network.hosts` name any host, or with `network.mode =
    /// "log"`; otherwise the policy as derived. The sandbox's resolver
    /// becomes the gate's; the derived resolvers are the gate's upstream.
    pub fn by_name(mut self, global: &[HostPattern], profile: &Profile) -> Policy {
        if !self.enabled {
            return self;
        }
        let mut hosts: Vec<HostPattern> = Vec::new();
        for h in global.iter().chain(&profile.hosts) {
            if !hosts.contains(h) {
                hosts.push(h.clone());
            }
        }
        if hosts.is_empty() && !profile.egress_log {
            return self;
        }
        let upstream = std::mem::replace(&mut self.resolvers, vec![GATE_ADDR]);
        self.gate = Some(Gate {
            log_only: profile.egress_log,
            hosts,
            upstream,
        });
        self
    }

    /// In allow-by-name mode, what the router still forwards for the
    /// sandbox: profile `allow` ranges and slirp4netns's gateway (port
    /// forwards answer through it), and the denies inside those ranges
    /// (`Reject`: back to the gate). Longest prefix first.
    pub fn forwarded(&self) -> Vec<PlanRoute> {
        let allows: Vec<Prefix> = self
            .rules
            .iter()
            .filter(|r| r.action == Action::Allow && r.source == Source::ProfileAllow)
            .map(|r| r.prefix)
            .collect();
        let mut out = Vec::new();
        for r in &self.rules {
            let kind = if allows.contains(&r.prefix) {
                RouteKind::Helper
            } else if r.action == Action::Deny && allows.iter().any(|a| a.len < r.prefix.len && a.contains(&r.prefix)) {
                RouteKind::Reject
            } else {
                continue;
            };
            out.push(PlanRoute { prefix: r.prefix, kind });
        }
        let gw = host(SLIRP_GATEWAY);
        if !out.iter().any(|r| r.prefix == gw) {
            out.push(PlanRoute {
                prefix: gw,
                kind: RouteKind::Helper,
            });
        }
        out.sort_by(|a, b| b.prefix.len.cmp(&a.prefix.len).then(a.prefix.addr.cmp(&b.prefix.addr)));
        out
    }
}

/// The host addresses that get a `/32` deny: every IPv4 address of the
/// host's interfaces except loopback (`127.0.0.0/8` is the sandbox's own
/// loopback; the host's is closed by `--disable-host-loopback`), the
/// addresses slirp4netns answers itself (gateway, DNS forwarder: never the
/// host) and the sandbox–router link. Sorted, without duplicates.
pub fn host_denies(addrs: &[Ipv4Addr]) -> Vec<Ipv4Addr> {
    let link = pfx(ROUTER_LINK);
    let mut out: Vec<Ipv4Addr> = addrs
        .iter()
        .copied()
        .filter(|a| !a.is_loopback() && *a != SLIRP_GATEWAY && *a != SLIRP_DNS && !a.is_unspecified())
        .filter(|a| !contains(&link, *a))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The host's `local` route prefixes that get a deny: IPv4 only, none
/// inside loopback (`127.0.0.0/8`, closed by `--disable-host-loopback`)
/// or the sandbox–router link; `/32`s that [`host_denies`] would leave out
/// (slirp4netns's gateway and DNS forwarder) are left out here too. A
/// prefix is masked to its network address. Sorted, without duplicates.
pub fn host_net_denies(nets: &[Prefix]) -> Vec<Prefix> {
    let link = pfx(ROUTER_LINK);
    let mut out: Vec<Prefix> = Vec::new();
    for p in nets {
        let Some((net, len)) = v4(p) else { continue };
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len as u32) };
        let a = Ipv4Addr::from(net & mask);
        if a.is_loopback() || contains(&link, a) {
            continue;
        }
        if len == 32 && (a == SLIRP_GATEWAY || a == SLIRP_DNS || a.is_unspecified()) {
            continue;
        }
        out.push(Prefix {
            addr: IpAddr::V4(a),
            len,
        });
    }
    out.sort_by_key(|p| (v4(p), p.len));
    out.dedup();
    out
}

/// The prefixes that cover `p` except the addresses in `keep`, as few and
/// as large as possible.
pub fn split_except(p: Prefix, keep: &[Ipv4Addr]) -> Vec<Prefix> {
    let Some((net, len)) = v4(&p) else { return vec![] };
    if !keep.iter().any(|k| contains(&p, *k)) {
        return vec![p];
    }
    if len == 32 {
        return vec![];
    }
    let half = 1u32 << (31 - len as u32);
    let lo = Prefix {
        addr: IpAddr::V4(Ipv4Addr::from(net)),
        len: len + 1,
    };
    let hi = Prefix {
        addr: IpAddr::V4(Ipv4Addr::from(net + half)),
        len: len + 1,
    };
    let mut out = split_except(lo, keep);
    out.extend(split_except(hi, keep));
    out
}

fn sort_rules(rules: &mut [Rule]) {
    rules.sort_by(|a, b| b.prefix.len.cmp(&a.prefix.len).then(a.prefix.addr.cmp(&b.prefix.addr)));
}

fn contains(p: &Prefix, a: Ipv4Addr) -> bool {
    p.contains(&host(a))
}

impl Policy {
    /// The rule that decides `addr`: longest prefix wins.
    pub fn rule_for(&self, addr: Ipv4Addr) -> &Rule {
        self.rules
            .iter()
            .find(|r| contains(&r.prefix, addr))
            .expect("0.0.0.0/0 is always a rule")
    }

    #[cfg(test)] // Tests check the policy per address; the runtime installs `routes()`.
    pub fn decide(&self, addr: Ipv4Addr) -> Action {
        self.rule_for(addr).action
    }

    /// The routes to install (everything except the kernel's own link
    /// routes), as the install plan lists them.
    pub fn routes(&self) -> Vec<PlanRoute> {
        self.rules
            .iter()
            .filter(|r| !matches!(r.source, Source::RouterLink | Source::SlirpNet))
            .map(|r| PlanRoute {
                prefix: r.prefix,
                kind: match r.action {
                    Action::Allow => RouteKind::Helper,
                    Action::Deny => RouteKind::Reject,
                },
            })
            .collect()
    }

    /// The install plan handed to the Runtime Supervisor (also the
    /// canonical text the policy digest is computed over).
    pub fn plan(&self) -> Plan {
        Plan {
            enabled: self.enabled,
            custom_dns: self.custom_dns,
            routes: if self.enabled { self.routes() } else { Vec::new() },
            gate: self.gate.as_ref().map(|g| GatePlan {
                log_only: g.log_only,
                hosts: g.hosts.clone(),
                upstream: g.upstream.clone(),
                forwarded: self.forwarded(),
            }),
        }
    }

    /// sha256 of the canonical plan text, hex.
    pub fn digest(&self) -> String {
        hex(&openssl::sha::sha256(self.plan().render().as_bytes()))
    }

    /// Contents of the sandbox's `/etc/resolv.conf`.
    pub fn resolv_conf(&self) -> String {
        let mut s = String::from("# written by lazaret for this Domain\n");
        for r in &self.resolvers {
            s.push_str(&format!("nameserver {r}\n"));
        }
        s
    }

    /// Addresses the probe checks by route decision, each with the rule it
    /// represents: up to two per rule, each decided by that very rule.
    pub fn samples(&self) -> Vec<Sample> {
        let mut out = Vec::new();
        for r in &self.rules {
            if matches!(r.source, Source::RouterLink | Source::SlirpNet) {
                continue;
            }
            let Some((net, len)) = v4(&r.prefix) else { continue };
            let size: u64 = 1u64 << (32 - len as u32);
            let cands: Vec<u32> = if r.source == Source::Default {
                // Documentation addresses: only the route decision is
                // checked, no packet is sent.
                ["198.51.100.1", "203.0.113.1", "192.0.2.1", "198.18.0.1"]
                    .iter()
                    .map(|s| u32::from(s.parse::<Ipv4Addr>().unwrap()))
                    .collect()
            } else if size <= 2 {
                (0..size as u32).map(|i| net + i).collect()
            } else {
                let last = (net as u64 + size - 2) as u32;
                vec![net + 1, (net as u64 + size / 2 + 1) as u32, last]
            };
            let mut n = 0;
            for c in cands {
                let a = Ipv4Addr::from(c);
                if n < 2 && a != SLIRP_GUEST && self.rule_for(a) == r {
                    out.push(Sample {
                        addr: a,
                        action: r.action,
                        prefix: r.prefix,
                    });
                    n += 1;
                }
            }
        }
        out
    }

    /// The request `/.lazaret/init probe` reads on its stdin (see
    /// bin/probe.rs).
    pub fn probe_request(&self) -> ProbeCmd {
        let spec = |kind, addr: IpAddr, prefix| ProbeSpec { kind, addr, prefix };
        let mut checks = vec![
            spec(ProbeKind::RouterLive, ROUTER_ADDR.into(), None),
            spec(ProbeKind::HelperLive, SLIRP_GATEWAY.into(), None),
            spec(ProbeKind::Ipv6Off, IPV6_SAMPLE.parse().expect("an IPv6 address"), None),
        ];
        for s in self.samples() {
            let k = if s.action == Action::Deny {
                ProbeKind::Deny
            } else {
                ProbeKind::Allow
            };
            checks.push(spec(k, s.addr.into(), Some(s.prefix)));
        }
        for r in &self.resolvers {
            checks.push(spec(ProbeKind::Resolver, (*r).into(), None));
            if self.custom_dns || self.gate.is_some() {
                // Only a resolver the user chose (or the gate's, which
                // refuses the probe's name) is queried: slirp's own
                // forwarder would send the query on to the host's resolver.
                checks.push(spec(ProbeKind::DnsQuery, (*r).into(), None));
            }
        }
        ProbeCmd::Run {
            sandbox_src: SANDBOX_ADDR.into(),
            checks,
        }
    }

    /// What `lazaret net show` prints.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if !self.enabled {
            s.push_str("network: none (network.mode = \"none\"): the sandbox has loopback only\n");
            return s;
        }
        s.push_str("network: slirp4netns user-mode networking; the sandbox has no CAP_NET_ADMIN\n");
        s.push_str("IPv4 routes, longest prefix first (the longest matching prefix decides):\n");
        if self.gate.is_some() {
            s.push_str(
                "  (allow-by-name mode: these decide where the egress gate may connect; the sandbox's own \
                 traffic goes to the gate, except profile network.allow ranges, forwarded by address)\n",
            );
        }
        for r in &self.rules {
            let what = match r.action {
                Action::Allow => "allow",
                Action::Deny => "DENY ",
            };
            s.push_str(&format!(
                "  {what} {:<18} [{}] {}\n",
                r.prefix.to_string(),
                r.enforced_at(),
                r.source.describe()
            ));
        }
        s.push_str(
            "enforced by the host kernel in the Domain's router namespace, between the sandbox and \
             slirp4netns:\n  [router: refused] a local route there: TCP connects get a RST at once, UDP an ICMP \
             port unreachable; nothing is forwarded\n  [router: forwarded] routed to slirp4netns (tap0)\n  \
             [router link] the sandbox's own link (169.254.255.0/30): only the sandbox and the router\n\
             the sandbox (gVisor) has one route, to the router, and cannot configure the router, \
             whatever it does to its own routes\n",
        );
        if let Some(g) = &self.gate {
            s.push_str(&self.describe_gate(g));
        }
        s.push_str(&format!(
            "DNS resolvers: {}{}\n",
            self.resolvers
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if self.gate.is_some() {
                " (the egress gate's resolver: listed names only)"
            } else if self.custom_dns {
                " (network.dns)"
            } else {
                " (slirp4netns forwarder to the host's resolver)"
            }
        ));
        s.push_str("IPv6: disabled in the sandbox's network namespace (no addresses, no routes)\n");
        for p in &self.ignored_v6 {
            s.push_str(&format!(
                "  note: IPv6 deny {p} has no effect: all IPv6 is unreachable\n"
            ));
        }
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s.push_str(&format!("policy digest: {}\n", self.digest()));
        s
    }

    /// `net show`'s allow-by-name section.
    fn describe_gate(&self, g: &Gate) -> String {
        let mut s = String::new();
        if g.log_only {
            s.push_str(
                "egress by name: LOG mode (network.mode = \"log\"): the sandbox's TCP goes to the egress gate in \
                 the router, which allows every name and logs it (`lazaret net log`)\n",
            );
        } else {
            s.push_str(
                "egress by name: the sandbox reaches only these hosts (network.hosts); every other destination is \
                 refused, public addresses included:\n",
            );
        }
        for h in &g.hosts {
            let ports: Vec<String> = h.ports().iter().map(|p| p.to_string()).collect();
            s.push_str(&format!("  host {:<30} ports {}\n", h.to_string(), ports.join(",")));
        }
        s.push_str(&format!(
            "  enforced by the egress gate in the router namespace: TCP from the sandbox is delivered to the gate, \
             never forwarded; it decides by the name the client sends (TLS SNI, HTTP Host, CONNECT) or the \
             address its resolver gave for that name, and connects to that name's own addresses; explicit proxy \
             at http://{GATE_ADDR}:{PROXY_PORT}; DNS only from the gate's resolver ({GATE_ADDR}); other UDP \
             refused\n",
        ));
        s.push_str(&format!(
            "  the gate resolves through: {}\n",
            g.upstream.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(", ")
        ));
        let fwd: Vec<String> = self
            .forwarded()
            .iter()
            .filter(|r| r.kind == RouteKind::Helper && r.prefix != host(SLIRP_GATEWAY))
            .map(|r| r.prefix.to_string())
            .collect();
        if fwd.is_empty() {
            s.push_str("  forwarded by address: nothing (no profile network.allow)\n");
        } else {
            s.push_str(&format!(
                "  forwarded by address (profile network.allow): {}\n",
                fwd.join(", ")
            ));
        }
        s
    }

    pub fn to_json(&self) -> Json {
        let gate = match &self.gate {
            None => Json::Null,
            Some(g) => Json::Obj(vec![
                ("mode", Json::s(if g.log_only { "log" } else { "enforce" })),
                (
                    "hosts",
                    Json::strs(&g.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()),
                ),
                (
                    "upstream",
                    Json::strs(&g.upstream.iter().map(|u| u.to_string()).collect::<Vec<_>>()),
                ),
            ]),
        };
        Json::Obj(vec![
            (
                "mode",
                Json::s(match (&self.gate, self.enabled) {
                    (_, false) => "none",
                    (Some(g), true) if g.log_only => "log",
                    _ => "slirp",
                }),
            ),
            ("hosts", gate),
            (
                "rules",
                Json::Arr(
                    self.rules
                        .iter()
                        .map(|r| {
                            Json::Obj(vec![
                                ("prefix", Json::s(r.prefix.to_string())),
                                (
                                    "action",
                                    Json::s(if r.action == Action::Allow { "allow" } else { "deny" }),
                                ),
                                ("source", Json::s(r.source.describe())),
                                ("enforced_at", Json::s(r.enforced_at())),
                            ])
                        })
                        .collect(),
                ),
            ),
            (
                "resolvers",
                Json::strs(&self.resolvers.iter().map(|r| r.to_string()).collect::<Vec<_>>()),
            ),
            ("ipv6", Json::s("disabled")),
            ("warnings", Json::strs(&self.warnings)),
            ("digest", Json::s(self.digest())),
        ])
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub addr: Ipv4Addr,
    pub action: Action,
    pub prefix: Prefix,
}

// ---- the install plan (HC → RS) ---------------------------------------------------

pub use crate::wire::plan::{GatePlan, Plan, PlanRoute, RouteKind};

impl PlanRoute {
    /// `ip route replace` arguments for the router namespace.
    pub fn ip_args(&self) -> Vec<String> {
        let p = self.prefix.to_string();
        match self.kind {
            RouteKind::Helper => vec![p, "via".into(), SLIRP_GATEWAY.to_string(), "dev".into(), TAP.into()],
            RouteKind::Reject => vec![
                "local".into(),
                p,
                "dev".into(),
                "lo".into(),
                "table".into(),
                "main".into(),
            ],
        }
    }

    fn word(&self) -> &'static str {
        match self.kind {
            RouteKind::Helper => "helper",
            RouteKind::Reject => "reject",
        }
    }
}

const PLAN_MAGIC: &str = "lazaret-netplan 2";

impl Plan {
    /// The canonical text the policy digest is computed over. The plan
    /// travels to the supervisor as `wire::plan::PlanMsg::Network`.
    pub fn render(&self) -> String {
        let mut s = format!("{PLAN_MAGIC}\n");
        s.push_str(&format!("mode {}\n", if self.enabled { "slirp" } else { "none" }));
        s.push_str("ipv6 disabled\n");
        s.push_str(&format!("dns {}\n", if self.custom_dns { "custom" } else { "slirp" }));
        for r in &self.routes {
            s.push_str(&format!("route {} {}\n", r.prefix, r.word()));
        }
        // Added after the format above: plans without a gate keep their digest.
        if let Some(g) = &self.gate {
            s.push_str(&format!("gate {}\n", if g.log_only { "log" } else { "enforce" }));
            for h in &g.hosts {
                s.push_str(&format!("host {h}\n"));
            }
            for u in &g.upstream {
                s.push_str(&format!("upstream {u}\n"));
            }
            for r in &g.forwarded {
                s.push_str(&format!("forward {} {}\n", r.prefix, r.word()));
            }
        }
        s
    }

    /// In allow-by-name mode, the router's decision for a packet from the
    /// sandbox to `addr`: `Helper` if a forwarded route decides it, else
    /// `Reject` (local to the router: the gate, or a RST).
    pub fn sandbox_kind(&self, addr: Ipv4Addr) -> RouteKind {
        self.gate
            .as_ref()
            .and_then(|g| {
                g.forwarded
                    .iter()
                    .filter(|r| contains(&r.prefix, addr))
                    .max_by_key(|r| r.prefix.len)
            })
            .map_or(RouteKind::Reject, |r| r.kind)
    }

    /// Whether the gate may connect to `addr` (a resolved address, or the
    /// original destination in log mode): refused when a reject route of
    /// the policy decides it (RFC 1918, link-local, the host's own
    /// addresses, profile denies), or it is the router link or
    /// slirp4netns's own network.
    pub fn gate_may_connect(&self, addr: Ipv4Addr) -> bool {
        if contains(&pfx(ROUTER_LINK), addr) || contains(&pfx(SLIRP_NET), addr) || addr.is_loopback() {
            return false;
        }
        self.routes
            .iter()
            .filter(|r| contains(&r.prefix, addr))
            .max_by_key(|r| r.prefix.len)
            .is_some_and(|r| r.kind == RouteKind::Helper)
    }

    /// Compares `ip -4 route show table main` output of the router
    /// namespace with the plan: every planned route present in its form
    /// (reject: `local P dev lo`; helper: `P via 10.0.2.2 dev tap0`),
    /// nothing else but the two links' kernel routes.
    pub fn verify_routes(&self, ip_route: &str) -> Result<(), RouteMismatch> {
        // (prefix, kind, via, dev)
        type Seen = (Prefix, Option<RouteKind>, Option<String>, Option<String>);
        let mut seen: Vec<Seen> = Vec::new();
        for line in ip_route.lines().filter(|l| !l.trim().is_empty()) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, i) = match f.first() {
                Some(&"unicast") => (false, 1),
                Some(&"local") => (true, 1),
                _ => (false, 0),
            };
            let Some(dst) = f.get(i) else { continue };
            if matches!(
                *dst,
                "local"
                    | "unreachable"
                    | "blackhole"
                    | "prohibit"
                    | "throw"
                    | "broadcast"
                    | "multicast"
                    | "nat"
                    | "anycast"
            ) {
                return Err(RouteMismatch::RouteType {
                    kind: dst.to_string(),
                    line: line.to_string(),
                });
            }
            let prefix = parse_dst(dst).ok_or_else(|| RouteMismatch::Unreadable(line.to_string()))?;
            let after = |k: &str| {
                f.iter()
                    .position(|x| *x == k)
                    .and_then(|p| f.get(p + 1))
                    .map(|s| s.to_string())
            };
            let (via, dev) = (after("via"), after("dev"));
            let kind = if local {
                (dev.as_deref() == Some("lo") && via.is_none()).then_some(RouteKind::Reject)
            } else {
                (via.as_deref() == Some(&SLIRP_GATEWAY.to_string()) && dev.as_deref() == Some(TAP))
                    .then_some(RouteKind::Helper)
            };
            if seen.iter().any(|(p, ..)| *p == prefix) {
                return Err(RouteMismatch::Duplicate(prefix));
            }
            seen.push((prefix, kind, via, dev));
        }
        for r in &self.routes {
            match seen.iter().find(|(p, ..)| *p == r.prefix) {
                None => return Err(RouteMismatch::Missing(r.prefix, r.word())),
                Some((_, k, via, dev)) if *k != Some(r.kind) => {
                    return Err(RouteMismatch::Goes {
                        prefix: r.prefix,
                        local: k == &Some(RouteKind::Reject),
                        via: via.clone(),
                        dev: dev.clone(),
                        expected: r.ip_args().join(" "),
                    })
                }
                Some(_) => {}
            }
        }
        for (p, kind, via, dev) in &seen {
            let planned = self.routes.iter().any(|r| r.prefix == *p);
            let kernel_link = via.is_none()
                && kind.is_none()
                && ((*p == pfx(ROUTER_LINK) && dev.as_deref() == Some(ROUTER_IF))
                    || (*p == pfx(SLIRP_NET) && dev.as_deref() == Some(TAP)));
            if !planned && !kernel_link {
                return Err(RouteMismatch::Extra(*p));
            }
        }
        Ok(())
    }

    /// Addresses for the router's own route lookup (`ip route get ADDR from
    /// 169.254.255.1 iif lzr1`, the kernel's decision for a packet from the
    /// sandbox): one per planned route, decided by that very route. Never
    /// the router's or the sandbox's own address.
    pub fn lookups(&self) -> Vec<(Ipv4Addr, &PlanRoute)> {
        let kernel = [pfx(ROUTER_LINK), pfx(SLIRP_NET)];
        let decider = |a: Ipv4Addr| -> Option<Prefix> {
            self.routes
                .iter()
                .map(|r| r.prefix)
                .chain(kernel)
                .filter(|p| contains(p, a))
                .max_by_key(|p| p.len)
        };
        let mut out = Vec::new();
        for r in &self.routes {
            let Some((net, len)) = v4(&r.prefix) else { continue };
            let size: u64 = 1u64 << (32 - len as u32);
            let last = (net as u64 + size - 1) as u32;
            let mut cands = vec![
                net.saturating_add(1).min(last),
                (net as u64 + size / 2 + 1).min(last as u64) as u32,
            ];
            cands.push(last.saturating_sub(1).max(net));
            cands.push(net);
            if let Some(a) = cands
                .into_iter()
                .map(Ipv4Addr::from)
                .find(|a| *a != SLIRP_GUEST && *a != ROUTER_ADDR && *a != SANDBOX_ADDR && decider(*a) == Some(r.prefix))
            {
                out.push((a, r));
            }
        }
        out
    }
}

fn parse_dst(dst: &str) -> Option<Prefix> {
    if dst == "default" {
        Some(pfx("0.0.0.0/0"))
    } else if dst.contains('/') {
        dst.parse().ok()
    } else {
        format!("{dst}/32").parse().ok()
    }
}

/// Where the installed routes or the router's own decisions differ from
/// the plan (FR-18 read-back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteMismatch {
    /// A route of a type the plan never installs (`unreachable`, …).
    RouteType {
        kind: String,
        line: String,
    },
    /// A line of `ip route` output that is not a route.
    Unreadable(String),
    Duplicate(Prefix),
    /// A planned route (prefix, `reject`/`helper`) is absent.
    Missing(Prefix, &'static str),
    /// A planned route leads elsewhere.
    Goes {
        prefix: Prefix,
        local: bool,
        via: Option<String>,
        dev: Option<String>,
        expected: String,
    },
    /// A route the plan does not have.
    Extra(Prefix),
    /// A refused address is forwarded to the helper (with `ip route get`'s line).
    Forwards(Ipv4Addr, String),
    NotRefused(Ipv4Addr, String),
    NotForwarded(Ipv4Addr, String),
    /// An allowed address has no route (with `ip`'s error).
    NoRoute(Ipv4Addr, String),
    SandboxExtra(String),
    SandboxNoDefault,
}

impl std::fmt::Display for RouteMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use RouteMismatch::*;
        match self {
            RouteType { kind, line } => write!(f, "unexpected {kind} route in the router namespace: {line}"),
            Unreadable(line) => write!(f, "cannot read route {line:?}"),
            Duplicate(p) => write!(f, "two routes for {p} in the router namespace"),
            Missing(p, word) => write!(f, "route for {p} ({word}) is missing"),
            Goes {
                prefix,
                local,
                via,
                dev,
                expected,
            } => write!(
                f,
                "route for {prefix} goes {}via {} dev {}, expected {expected}",
                if *local { "local " } else { "" },
                via.as_deref().unwrap_or("-"),
                dev.as_deref().unwrap_or("-"),
            ),
            Extra(p) => write!(f, "unexpected route for {p} in the router namespace"),
            Forwards(a, l) => write!(
                f,
                "the router forwards {a} to the network helper ({l}), expected a refusal"
            ),
            NotRefused(a, l) => write!(f, "the router's decision for {a} is not a refusal: {l}"),
            NotForwarded(a, l) => write!(f, "the router does not forward {a} to the network helper: {l}"),
            NoRoute(a, e) => write!(f, "the router has no route for {a}: {e}"),
            SandboxExtra(line) => write!(f, "unexpected route in the sandbox's namespace: {line}"),
            SandboxNoDefault => write!(f, "the sandbox's namespace has no default route via {ROUTER_ADDR}"),
        }
    }
}

/// The router's decision for one lookup (`ip route get` output, or its
/// error): a reject must not leave through tap0 (a local route; the kernel
/// also takes multicast for itself or refuses it, and refuses martians); a
/// helper route must leave through tap0.
pub fn verify_lookup(addr: Ipv4Addr, kind: RouteKind, out: Result<&str, &str>) -> Result<(), RouteMismatch> {
    let first = |o: &str| o.lines().next().unwrap_or("").trim().to_string();
    let forwarded = |o: &str| {
        let f: Vec<&str> = o.split_whitespace().collect();
        f.windows(2).any(|w| w == ["dev", TAP]) && !matches!(f.first(), Some(&"local") | Some(&"multicast"))
    };
    match (kind, out) {
        (RouteKind::Reject, Ok(o)) if forwarded(o) => Err(RouteMismatch::Forwards(addr, first(o))),
        (RouteKind::Reject, Ok(o)) if o.starts_with("local ") || o.starts_with("multicast ") => Ok(()),
        (RouteKind::Reject, Ok(o)) => Err(RouteMismatch::NotRefused(addr, first(o))),
        // The kernel refuses to route it at all (martian or multicast).
        (RouteKind::Reject, Err(_)) => Ok(()),
        (RouteKind::Helper, Ok(o)) if forwarded(o) => Ok(()),
        (RouteKind::Helper, Ok(o)) => Err(RouteMismatch::NotForwarded(addr, first(o))),
        (RouteKind::Helper, Err(e)) => Err(RouteMismatch::NoRoute(addr, e.trim().to_string())),
    }
}

/// The sandbox namespace's table before gVisor takes it: its link and one
/// default route to the router, nothing else.
pub fn verify_sandbox_routes(ip_route: &str) -> Result<(), RouteMismatch> {
    let mut default = false;
    for line in ip_route.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let ok_default = f.len() >= 5 && f[..5] == ["default", "via", &ROUTER_ADDR.to_string(), "dev", SANDBOX_IF];
        let ok_link = f.len() >= 3 && f[0] == ROUTER_LINK && f[1..3] == ["dev", SANDBOX_IF];
        if ok_default {
            default = true;
        } else if !ok_link {
            return Err(RouteMismatch::SandboxExtra(line.to_string()));
        }
    }
    if !default {
        return Err(RouteMismatch::SandboxNoDefault);
    }
    Ok(())
}

// ---- readiness ------------------------------------------------------------------------

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Digest over Domain ID, generation, config fingerprint, Network
/// Sidecar ID, policy digest and the identities of the sandbox's and the
/// router's network namespaces (length-prefixed fields).
pub fn readiness_fingerprint(
    domain_id: &str,
    generation: u64,
    config_fp: &str,
    sidecar_id: &str,
    policy_digest: &str,
    netns_inode: u64,
    router_inode: u64,
) -> String {
    let mut buf = Vec::new();
    for f in [
        "lazaret-net-readiness-v2",
        domain_id,
        &generation.to_string(),
        config_fp,
        sidecar_id,
        policy_digest,
        &netns_inode.to_string(),
        &router_inode.to_string(),
    ] {
        buf.extend_from_slice(f.len().to_string().as_bytes());
        buf.push(b':');
        buf.extend_from_slice(f.as_bytes());
        buf.push(b',');
    }
    hex(&openssl::sha::sha256(&buf))
}

/// The test-only fault switch (`LAZARET_FAULT`), honored only in builds
/// with the `fault-injection` cargo feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The installer skips one deny route in the router (192.168.0.0/16
    /// when planned) and its self-check (route read-back and route lookups)
    /// is blind to it: only the pre-publication probe can catch it.
    SkipOneDeny,
    /// The installer skips one deny route; the route read-back catches it.
    SkipOneDenyVisible,
    /// The egress gate's listener thread ends after its first connection:
    /// the supervisor must fail the generation.
    GateDies,
    /// Log mode: `nft` is not found; the start must fail with one sentence.
    NoNft,
}

pub fn fault() -> Option<Fault> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    match std::env::var("LAZARET_FAULT").ok()?.as_str() {
        "skip-one-deny" => Some(Fault::SkipOneDeny),
        "skip-one-deny-visible" => Some(Fault::SkipOneDenyVisible),
        "gate-dies" => Some(Fault::GateDies),
        "no-nft" => Some(Fault::NoNft),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The probe request as `KIND=ADDR[@PREFIX]` words, for assertions.
    fn probe_words(pol: &Policy) -> Vec<String> {
        let ProbeCmd::Run { checks, .. } = pol.probe_request();
        checks
            .iter()
            .map(|c| match c.prefix {
                Some(p) => format!("{}={}@{p}", c.kind.word(), c.addr),
                None => format!("{}={}", c.kind.word(), c.addr),
            })
            .collect()
    }

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }
    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn prof() -> Profile {
        Profile::builtin("dev")
    }
    fn derive_ok(dd: Option<&[Prefix]>, pr: &Profile) -> Policy {
        derive(Path::new("/c.toml"), dd, pr, &[]).unwrap()
    }

    #[test]
    fn defaults_deny_each_special_range_and_allow_the_rest() {
        let pol = derive_ok(None, &prof());
        for (r, _) in DEFAULT_DENY {
            let net = p(r);
            let (n, len) = v4(&net).unwrap();
            let last = Ipv4Addr::from(n | (u32::MAX >> len));
            assert_eq!(pol.decide(Ipv4Addr::from(n + 1)), Action::Deny, "{r}");
            assert_eq!(pol.decide(last), Action::Deny, "{r}");
        }
        for ok in [
            "1.1.1.1",
            "8.8.8.8",
            "198.18.0.2",
            "198.19.255.254",
            "11.0.0.1",
            "172.32.0.1",
            "192.167.1.1",
        ] {
            assert_eq!(pol.decide(a(ok)), Action::Allow, "{ok}");
        }
        assert_eq!(pol.decide(a("169.254.169.254")), Action::Deny, "cloud metadata");
        assert_eq!(pol.decide(a("100.100.100.100")), Action::Deny);
        assert!(pol.warnings.is_empty());
        assert!(pol.enabled);
    }

    #[test]
    fn slirp_net_is_denied_except_gateway_and_dns() {
        let pol = derive_ok(None, &prof());
        assert_eq!(pol.decide(SLIRP_GATEWAY), Action::Allow);
        assert_eq!(pol.decide(SLIRP_DNS), Action::Allow);
        assert_eq!(pol.decide(a("10.0.2.4")), Action::Deny);
        assert_eq!(pol.decide(a("10.0.2.1")), Action::Deny);
        assert_eq!(pol.decide(SLIRP_GUEST), Action::Deny);
        for x in ["10.0.2.0", "10.0.2.5", "10.0.2.15", "10.0.2.255", "10.0.2.128"] {
            assert_eq!(pol.decide(a(x)), Action::Deny, "{x}");
        }
        let rest: Vec<String> = split_except(p(SLIRP_NET), &[SLIRP_GATEWAY, SLIRP_DNS])
            .iter()
            .map(|x| x.to_string())
            .collect();
        assert_eq!(
            rest,
            [
                "10.0.2.0/31",
                "10.0.2.4/30",
                "10.0.2.8/29",
                "10.0.2.16/28",
                "10.0.2.32/27",
                "10.0.2.64/26",
                "10.0.2.128/25"
            ]
        );
        assert_eq!(split_except(p("10.0.2.2/32"), &[SLIRP_GATEWAY]), vec![]);
        assert_eq!(split_except(p("1.0.0.0/8"), &[SLIRP_GATEWAY]), vec![p("1.0.0.0/8")]);
        assert_eq!(pol.resolvers, vec![SLIRP_DNS]);
        assert!(pol.resolv_conf().contains("nameserver 10.0.2.3\n"));
    }

    #[test]
    fn custom_dns_replaces_the_forwarder_and_opens_a_hole() {
        let mut pr = prof();
        pr.dns = vec![p("192.168.1.53/32"), p("198.18.0.2/32")];
        let pol = derive_ok(None, &pr);
        assert!(pol.custom_dns);
        assert_eq!(pol.decide(SLIRP_DNS), Action::Deny, "slirp's forwarder is not used");
        assert_eq!(
            pol.decide(a("192.168.1.53")),
            Action::Allow,
            "a chosen resolver is reachable"
        );
        assert_eq!(pol.decide(a("192.168.1.54")), Action::Deny);
        assert!(probe_words(&pol).contains(&"dns-query=198.18.0.2".to_string()));
        // A default deny of exactly the resolver yields to the resolver.
        let pol = derive_ok(Some(&[p("198.18.0.2/32")]), &pr);
        assert_eq!(pol.decide(a("198.18.0.2")), Action::Allow);
    }

    #[test]
    fn profile_deny_of_a_resolver_is_an_error() {
        let mut pr = prof();
        pr.dns = vec![p("198.18.0.2/32")];
        pr.deny = vec![p("198.18.0.2/32")];
        let e = derive(Path::new("/c.toml"), None, &pr, &[]).unwrap_err().to_string();
        assert!(e.contains("/c.toml") && e.contains("resolver 198.18.0.2"), "{e}");
        for d in ["10.0.2.2/32", "10.0.2.0/25"] {
            let mut pr = prof();
            pr.deny = vec![p(d)];
            let e = derive(Path::new("/c.toml"), None, &pr, &[]).unwrap_err().to_string();
            assert!(e.contains("gateway"), "{e}");
        }
    }

    #[test]
    fn more_specific_allow_opens_a_hole_and_equal_prefix_is_deny() {
        let mut pr = prof();
        pr.deny = vec![p("198.18.0.0/15")];
        pr.allow = vec![p("198.18.0.2/32")];
        let pol = derive_ok(None, &pr);
        assert_eq!(pol.decide(a("198.18.0.2")), Action::Allow);
        assert_eq!(pol.decide(a("198.18.0.3")), Action::Deny);
        assert_eq!(pol.decide(a("198.19.0.1")), Action::Deny);
        assert!(pol.warnings.is_empty());

        let mut pr = prof();
        pr.deny = vec![p("198.18.0.0/15")];
        pr.allow = vec![p("198.18.0.0/15")];
        let pol = derive_ok(None, &pr);
        assert_eq!(pol.decide(a("198.18.0.2")), Action::Deny);
        assert_eq!(pol.warnings.len(), 1);
        assert!(
            pol.warnings[0].contains("198.18.0.0/15 is both allowed"),
            "{:?}",
            pol.warnings
        );
        assert!(!pol
            .routes()
            .iter()
            .any(|r| r.prefix == p("198.18.0.0/15") && r.kind == RouteKind::Helper));

        // Equal prefix against a built-in default.
        let mut pr = prof();
        pr.allow = vec![p("10.0.0.0/8")];
        let pol = derive_ok(None, &pr);
        assert_eq!(pol.decide(a("10.1.1.1")), Action::Deny);
        assert!(pol.warnings[0].contains("built-in default"), "{:?}", pol.warnings);

        // A broader allow does not override a narrower deny.
        let mut pr = prof();
        pr.allow = vec![p("10.0.0.0/7")];
        let pol = derive_ok(None, &pr);
        assert_eq!(pol.decide(a("10.1.1.1")), Action::Deny);
        assert_eq!(pol.decide(a("11.1.1.1")), Action::Allow);
    }

    #[test]
    fn deny_everything_then_allow_some() {
        let mut pr = prof();
        pr.deny = vec![p("0.0.0.0/0")];
        pr.allow = vec![p("198.18.0.0/15")];
        let pol = derive_ok(None, &pr);
        assert_eq!(pol.decide(a("1.1.1.1")), Action::Deny);
        assert_eq!(pol.decide(a("198.18.0.9")), Action::Allow);
        assert_eq!(pol.decide(SLIRP_DNS), Action::Allow);
        let routes = pol.routes();
        assert!(routes.contains(&PlanRoute {
            prefix: p("0.0.0.0/0"),
            kind: RouteKind::Reject
        }));
        assert!(!routes
            .iter()
            .any(|r| r.prefix == p("0.0.0.0/0") && r.kind == RouteKind::Helper));
    }

    #[test]
    fn replaced_default_list_and_profile_denies_merge() {
        let mut pr = prof();
        pr.deny = vec![p("10.0.0.0/8"), p("2001:db8::/32")];
        let pol = derive_ok(Some(&[p("10.0.0.0/8"), p("fd00::/8")]), &pr);
        assert_eq!(pol.decide(a("192.168.1.1")), Action::Allow, "replaced list");
        assert_eq!(pol.decide(a("10.9.9.9")), Action::Deny);
        assert_eq!(pol.rules.iter().filter(|r| r.prefix == p("10.0.0.0/8")).count(), 1);
        assert_eq!(pol.ignored_v6, vec![p("fd00::/8"), p("2001:db8::/32")]);
        assert!(pol.describe().contains("fd00::/8 has no effect"));
    }

    #[test]
    fn ipv6_true_and_ipv6_allows_are_errors() {
        let mut pr = prof();
        pr.ipv6 = true;
        let e = derive(Path::new("/c.toml"), None, &pr, &[]).unwrap_err().to_string();
        assert!(
            e.contains("not supported yet") && e.contains("profiles.dev.ipv6"),
            "{e}"
        );
        let mut pr = prof();
        pr.allow = vec![p("2001:db8::/32")];
        let e = derive(Path::new("/c.toml"), None, &pr, &[]).unwrap_err().to_string();
        assert!(e.contains("IPv6 is disabled"), "{e}");
    }

    #[test]
    fn routes_name_a_nic_and_leave_kernel_routes_alone() {
        let pol = derive_ok(None, &prof());
        let routes = pol.routes();
        assert!(routes.iter().all(|r| r.prefix != p(SLIRP_NET)));
        assert!(routes.contains(&PlanRoute {
            prefix: p("10.0.2.4/30"),
            kind: RouteKind::Reject
        }));
        let ten = routes.iter().find(|r| r.prefix == p("10.0.0.0/8")).unwrap();
        assert_eq!(ten.ip_args().join(" "), "local 10.0.0.0/8 dev lo table main");
        let def = routes.iter().find(|r| r.prefix == p("0.0.0.0/0")).unwrap();
        assert_eq!(def.ip_args().join(" "), "0.0.0.0/0 via 10.0.2.2 dev tap0");
        assert!(routes.iter().all(|r| r.prefix != p(ROUTER_LINK)));
    }

    #[test]
    fn plan_round_trips_through_the_wire() {
        use crate::wire::codec::Message;
        use crate::wire::plan::PlanMsg;
        let rt = |p: Plan| match crate::wire::decode_one::<PlanMsg>(&PlanMsg::Network(p).encode()) {
            Ok(PlanMsg::Network(p)) => p,
            other => panic!("{other:?}"),
        };
        let mut pr = prof();
        pr.dns = vec![p("198.18.0.2/32")];
        let pol = derive_ok(None, &pr);
        let plan = pol.plan();
        assert!(!plan.routes.is_empty());
        assert_eq!(rt(plan.clone()), plan);
        let none = Profile {
            network: false,
            ..prof()
        };
        let pol = derive_ok(None, &none);
        assert!(pol.plan().routes.is_empty());
        assert!(!rt(pol.plan()).enabled);
    }

    fn ip_output(pol: &Policy) -> String {
        let mut s = String::new();
        for r in pol.routes() {
            let dst = match r.prefix.to_string().as_str() {
                "0.0.0.0/0" => "default".to_string(),
                d if d.ends_with("/32") => d.trim_end_matches("/32").to_string(),
                d => d.to_string(),
            };
            match r.kind {
                RouteKind::Reject => s.push_str(&format!("local {dst} dev lo scope host \n")),
                RouteKind::Helper => s.push_str(&format!("{dst} via 10.0.2.2 dev tap0 \n")),
            }
        }
        s.push_str("169.254.255.0/30 dev lzr1 proto kernel scope link src 169.254.255.2 \n");
        s.push_str("10.0.2.0/24 dev tap0 proto kernel scope link src 10.0.2.100 \n");
        s
    }

    #[test]
    fn verify_accepts_the_installed_table_and_names_each_deviation() {
        let pol = derive_ok(None, &prof());
        let plan = pol.plan();
        let good = ip_output(&pol);
        plan.verify_routes(&good).unwrap();
        // A missing deny.
        let missing: String = good
            .lines()
            .filter(|l| !l.starts_with("local 192.168.0.0/16"))
            .map(|l| format!("{l}\n"))
            .collect();
        let e = plan.verify_routes(&missing).unwrap_err().to_string();
        assert!(e.contains("192.168.0.0/16 (reject) is missing"), "{e}");
        // A deny that leads to the helper instead.
        let wrong = good.replace(
            "local 192.168.0.0/16 dev lo scope host",
            "192.168.0.0/16 via 10.0.2.2 dev tap0",
        );
        assert!(plan
            .verify_routes(&wrong)
            .unwrap_err()
            .to_string()
            .contains("goes via 10.0.2.2 dev tap0"));
        // An allow turned into a refusal, and a deny of another kind.
        let wrong = good.replace("default via 10.0.2.2 dev tap0", "local default dev lo scope host");
        assert!(plan
            .verify_routes(&wrong)
            .unwrap_err()
            .to_string()
            .contains("route for 0.0.0.0/0 goes local"));
        let lo = good.replace("local 172.16.0.0/12 dev lo scope host", "unreachable 172.16.0.0/12");
        assert!(plan
            .verify_routes(&lo)
            .unwrap_err()
            .to_string()
            .contains("unexpected unreachable route"));
        // Anything extra.
        let extra = format!("{good}10.0.3.0/24 dev tap0 proto kernel scope link src 10.0.2.100 \n");
        assert!(plan
            .verify_routes(&extra)
            .unwrap_err()
            .to_string()
            .contains("unexpected route for 10.0.3.0/24"));
        let extra = format!("{good}10.0.2.0/25 via 10.0.2.2 dev tap0 \n");
        assert!(plan
            .verify_routes(&extra)
            .unwrap_err()
            .to_string()
            .contains("unexpected route for 10.0.2.0/25"));
        // The sandbox's table: its link and one default route to the router.
        let sb = "default via 169.254.255.2 dev lzr0 \n169.254.255.0/30 dev lzr0 proto kernel scope link src 169.254.255.1 \n";
        verify_sandbox_routes(sb).unwrap();
        assert!(verify_sandbox_routes("169.254.255.0/30 dev lzr0 proto kernel scope link \n").is_err());
        assert!(verify_sandbox_routes(&format!("{sb}10.0.0.0/8 via 169.254.255.2 dev lzr0\n")).is_err());
    }

    #[test]
    fn router_lookups_cover_every_route_and_judge_the_kernel_decision() {
        let mut pr = prof();
        pr.deny = vec![p("198.18.0.0/15")];
        pr.allow = vec![p("198.18.0.1/32")];
        let pol = derive_ok(None, &pr);
        let plan = pol.plan();
        let l = plan.lookups();
        assert_eq!(l.len(), plan.routes.len(), "one lookup per route: {l:?}");
        for (a, r) in &l {
            assert_eq!(pol.rule_for(*a).prefix, r.prefix, "{a} is decided by {}", r.prefix);
            assert!(*a != SLIRP_GUEST && *a != ROUTER_ADDR && *a != SANDBOX_ADDR);
        }
        let a: Ipv4Addr = "10.1.2.3".parse().unwrap();
        let local = "local 10.1.2.3 from 169.254.255.1 dev lo \\    cache <local> iif lzr1";
        let fwd = "10.1.2.3 from 169.254.255.1 via 10.0.2.2 dev tap0 \\    cache iif lzr1";
        assert!(verify_lookup(a, RouteKind::Reject, Ok(local)).is_ok());
        assert!(verify_lookup(a, RouteKind::Reject, Err("RTNETLINK answers: Invalid argument")).is_ok());
        assert!(verify_lookup(a, RouteKind::Reject, Ok(fwd))
            .unwrap_err()
            .to_string()
            .contains("forwards 10.1.2.3 to the network helper"));
        assert!(verify_lookup(a, RouteKind::Helper, Ok(fwd)).is_ok());
        assert!(verify_lookup(a, RouteKind::Helper, Ok(local)).is_err());
        assert!(verify_lookup(a, RouteKind::Helper, Err("x")).is_err());
    }

    #[test]
    fn host_addresses_are_denied_and_an_exact_allow_opens_one() {
        let host = [
            a("192.0.2.2"),
            a("127.0.0.1"),
            a("198.18.7.1"),
            a("10.0.2.2"),
            a("192.0.2.2"),
        ];
        assert_eq!(host_denies(&host), vec![a("192.0.2.2"), a("198.18.7.1")]);
        let mut pr = prof();
        pr.allow = vec![p("198.18.0.0/15")];
        let pol = derive(Path::new("/c.toml"), None, &pr, &host).unwrap();
        assert_eq!(
            pol.decide(a("198.18.7.1")),
            Action::Deny,
            "a broad allow does not open it"
        );
        assert_eq!(pol.rule_for(a("198.18.7.1")).source, Source::HostAddress);
        assert_eq!(pol.decide(a("198.18.7.2")), Action::Allow);
        assert_eq!(pol.decide(a("192.0.2.2")), Action::Deny);
        assert!(pol.describe().contains("an address of this host"), "{}", pol.describe());
        assert_ne!(pol.digest(), derive_ok(None, &pr).digest());
        // An exact allow opens it, without a warning; a profile deny of the
        // same /32 still wins (equal prefix = deny).
        pr.allow = vec![p("198.18.7.1/32")];
        let pol = derive(Path::new("/c.toml"), None, &pr, &host).unwrap();
        assert_eq!(pol.decide(a("198.18.7.1")), Action::Allow);
        assert!(pol.warnings.is_empty(), "{:?}", pol.warnings);
        pr.deny = vec![p("198.18.7.1/32")];
        let pol = derive(Path::new("/c.toml"), None, &pr, &host).unwrap();
        assert_eq!(pol.decide(a("198.18.7.1")), Action::Deny);
        assert_eq!(pol.warnings.len(), 1);
        // A host address inside a default deny: the /32 allow opens only it.
        let host = [a("192.168.1.20")];
        let mut pr = prof();
        pr.allow = vec![p("192.168.1.20/32")];
        let pol = derive(Path::new("/c.toml"), None, &pr, &host).unwrap();
        assert_eq!(pol.decide(a("192.168.1.20")), Action::Allow);
        assert_eq!(pol.decide(a("192.168.1.21")), Action::Deny);
    }

    #[test]
    fn local_route_prefixes_of_the_host_are_denied() {
        // An "AnyIP" route (`local 198.18.201.0/24 dev lo`): every address in
        // it is the host's, though no interface carries it.
        let nets = [
            p("127.0.0.0/8"),
            p("127.0.0.1/32"),
            p("198.18.201.0/24"),
            p("10.0.2.2/32"),
            p("169.254.255.1/32"),
            p("198.18.201.0/24"),
        ];
        assert_eq!(host_net_denies(&nets), vec![p("198.18.201.0/24")]);
        let mut pr = prof();
        pr.allow = vec![p("198.18.0.0/15")];
        let pol = derive_with_host_nets(Path::new("/c.toml"), None, &pr, &[], &nets).unwrap();
        assert_eq!(
            pol.decide(a("198.18.201.9")),
            Action::Deny,
            "a broad allow does not open it"
        );
        assert_eq!(pol.rule_for(a("198.18.201.9")).source, Source::HostAddress);
        assert_eq!(pol.decide(a("198.18.202.9")), Action::Allow);
        pr.allow = vec![p("198.18.201.0/24")];
        let pol = derive_with_host_nets(Path::new("/c.toml"), None, &pr, &[], &nets).unwrap();
        assert_eq!(pol.decide(a("198.18.201.9")), Action::Allow, "an exact allow opens it");
    }

    #[test]
    fn samples_are_decided_by_their_rule_and_cover_every_deny() {
        let mut pr = prof();
        pr.deny = vec![p("198.18.0.0/15")];
        pr.allow = vec![p("198.18.0.1/32")];
        let pol = derive_ok(None, &pr);
        let s = pol.samples();
        for r in pol
            .rules
            .iter()
            .filter(|r| r.action == Action::Deny && r.source != Source::RouterLink)
        {
            assert!(s.iter().any(|x| x.prefix == r.prefix), "no sample for {}", r.prefix);
        }
        for x in &s {
            assert_eq!(pol.rule_for(x.addr).prefix, x.prefix, "{x:?}");
            assert_eq!(pol.decide(x.addr), x.action);
        }
        // The hole itself is sampled as an allow, its surroundings as denies.
        assert!(s.contains(&Sample {
            addr: a("198.18.0.1"),
            action: Action::Allow,
            prefix: p("198.18.0.1/32")
        }));
        assert!(!s.iter().any(|x| x.action == Action::Deny && x.addr == a("198.18.0.1")));
        // Never the slirp guest's own address for 10/8 samples.
        assert!(s.iter().all(|x| x.addr != SLIRP_GUEST));
        let args = probe_words(&pol);
        assert!(args.contains(&"deny=10.0.0.1@10.0.0.0/8".to_string()), "{args:?}");
        assert!(args.contains(&"resolver=10.0.2.3".to_string()));
        assert!(
            !args.iter().any(|x| x.starts_with("dns-query=")),
            "slirp's forwarder is never queried"
        );
    }

    #[test]
    fn digest_and_fingerprint_change_with_every_input() {
        let pol = derive_ok(None, &prof());
        let mut pr = prof();
        pr.deny = vec![p("198.18.5.0/24")];
        assert_ne!(pol.digest(), derive_ok(None, &pr).digest());
        assert_eq!(pol.digest(), derive_ok(None, &prof()).digest());
        let f = readiness_fingerprint("d", 1, "c", "s", "p", 7, 9);
        assert_eq!(f.len(), 64);
        for g in [
            readiness_fingerprint("e", 1, "c", "s", "p", 7, 9),
            readiness_fingerprint("d", 2, "c", "s", "p", 7, 9),
            readiness_fingerprint("d", 1, "x", "s", "p", 7, 9),
            readiness_fingerprint("d", 1, "c", "x", "p", 7, 9),
            readiness_fingerprint("d", 1, "c", "s", "x", 7, 9),
            readiness_fingerprint("d", 1, "c", "s", "p", 8, 9),
            readiness_fingerprint("d", 1, "c", "s", "p", 7, 8),
            readiness_fingerprint("d1", 1, "", "s", "p", 7, 9),
        ] {
            assert_ne!(f, g);
        }
    }

    #[test]
    fn describe_names_every_rule_and_its_reason() {
        let pol = derive_ok(None, &prof());
        let d = pol.describe();
        assert!(d.contains("DENY  10.0.0.0/8"), "{d}");
        assert!(
            d.contains("[router: refused]") && d.contains("[router: forwarded]"),
            "{d}"
        );
        assert!(pol.to_json().render().contains("\"enforced_at\""));
        assert!(d.contains("cloud metadata"), "{d}");
        assert!(d.contains("IPv6: disabled"), "{d}");
        assert!(pol.to_json().render().contains("\"digest\""));
    }

    #[test]
    fn allow_by_name_mode_keeps_allows_forwarded_and_changes_the_digest() {
        let plain = derive_ok(None, &prof());
        // Without hosts nothing changes: same policy, same digest, same text.
        assert_eq!(plain.clone().by_name(&[], &prof()), plain);
        let mut pr = prof();
        pr.hosts = vec!["a.test".parse().unwrap()];
        pr.allow = vec![p("198.18.4.0/24")];
        pr.deny = vec![p("198.18.4.8/29")];
        pr.dns = vec![p("198.18.0.2/32")];
        let pol = derive_ok(None, &pr).by_name(&["b.test".parse().unwrap()], &pr);
        let g = pol.gate.as_ref().unwrap();
        let hosts: Vec<String> = g.hosts.iter().map(|h| h.to_string()).collect();
        assert_eq!(hosts, ["b.test", "a.test"]);
        assert_eq!(g.upstream, vec![a("198.18.0.2")]);
        assert_eq!(pol.resolvers, vec![GATE_ADDR]);
        assert!(pol.resolv_conf().contains("nameserver 169.254.255.2"));
        let f = pol.forwarded();
        assert!(f.contains(&PlanRoute {
            prefix: p("198.18.4.0/24"),
            kind: RouteKind::Helper
        }));
        assert!(f.contains(&PlanRoute {
            prefix: p("198.18.4.8/29"),
            kind: RouteKind::Reject
        }));
        assert!(f.contains(&PlanRoute {
            prefix: p("10.0.2.2/32"),
            kind: RouteKind::Helper
        }));
        assert!(
            !f.iter().any(|r| r.prefix == p("0.0.0.0/0")),
            "nothing else is forwarded: {f:?}"
        );
        let plan = pol.plan();
        assert_eq!(plan.sandbox_kind(a("198.18.4.1")), RouteKind::Helper);
        assert_eq!(plan.sandbox_kind(a("198.18.4.9")), RouteKind::Reject);
        assert_eq!(plan.sandbox_kind(a("1.1.1.1")), RouteKind::Reject);
        assert_eq!(
            plan.sandbox_kind(a("198.18.0.2")),
            RouteKind::Reject,
            "the resolver is the gate's only"
        );
        // The gate connects only where the policy would forward.
        assert!(plan.gate_may_connect(a("198.18.9.9")));
        assert!(!plan.gate_may_connect(a("10.1.2.3")));
        assert!(!plan.gate_may_connect(a("192.168.1.1")));
        assert!(!plan.gate_may_connect(a("169.254.169.254")));
        assert!(!plan.gate_may_connect(a("10.0.2.3")));
        assert!(!plan.gate_may_connect(a("127.0.0.1")));
        assert!(!plan.gate_may_connect(a("198.18.4.9")));
        // The host list is part of the digest, and net show lists it.
        let mut pr2 = pr.clone();
        pr2.hosts = vec!["c.test".parse().unwrap()];
        assert_ne!(pol.digest(), derive_ok(None, &pr2).by_name(&[], &pr2).digest());
        assert_ne!(pol.digest(), derive_ok(None, &pr).digest());
        let d = pol.describe();
        assert!(
            d.contains("egress by name") && d.contains("host a.test") && d.contains("ports 80,443"),
            "{d}"
        );
        assert!(pol.to_json().render().contains("\"hosts\":{\"mode\":\"enforce\""));
        // Probe: the gate's resolver is queried.
        assert!(
            probe_words(&pol).contains(&"dns-query=169.254.255.2".to_string()),
            "{:?}",
            probe_words(&pol)
        );
        // Log mode without hosts; mode none wins over hosts.
        let mut lg = prof();
        lg.egress_log = true;
        assert!(derive_ok(None, &lg).by_name(&[], &lg).gate.unwrap().log_only);
        let none = Profile {
            network: false,
            ..pr.clone()
        };
        assert!(derive_ok(None, &none).by_name(&[], &none).gate.is_none());
    }
}
