//! The derived policy's shape: the fixed addresses of the router, the
//! sandbox and slirp4netns, the built-in default deny list, rules and
//! their sources, the policy and its gate, and derivation errors.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use crate::config::hosts::HostPattern;
pub use crate::config::EgressMode;
use crate::config::Prefix;

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
    /// `None`: loopback only; `Open` until `by_name` adds the gate
    /// (`ByName`, `Log`): `gate` is set exactly when `egress.gated()`.
    pub egress: EgressMode,
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
    /// `[network] hosts` then the profile's, without duplicates.
    pub hosts: Vec<HostPattern>,
    /// What the gate resolves names through: the profile's `network.dns`,
    /// else slirp4netns's forwarder (the host's resolver).
    pub upstream: Vec<Ipv4Addr>,
    /// `network.idle_timeout_s`: a relayed connection without a byte
    /// either way for this long is closed.
    pub idle_timeout_s: u32,
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

pub(super) fn v4(p: &Prefix) -> Option<(u32, u8)> {
    match p.addr {
        IpAddr::V4(a) => Some((u32::from(a), p.len)),
        IpAddr::V6(_) => None,
    }
}

pub(super) fn pfx(s: &str) -> Prefix {
    s.parse().expect("built-in prefix")
}

pub(super) fn host(a: Ipv4Addr) -> Prefix {
    Prefix {
        addr: IpAddr::V4(a),
        len: 32,
    }
}

pub(super) fn contains(p: &Prefix, a: Ipv4Addr) -> bool {
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
}
