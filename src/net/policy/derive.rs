//! Derivation of the policy from trusted config (and the host's own
//! addresses), and what allow-by-name mode still forwards.

use std::net::{IpAddr, Ipv4Addr};

use super::rules::*;
use crate::config::{Prefix, Profile};
use crate::wire::plan::{PlanRoute, RouteKind};

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
        // `by_name` makes it `ByName` or `Log` with the gate.
        egress: if profile.egress.networked() {
            EgressMode::Open
        } else {
            EgressMode::None
        },
        rules,
        resolvers,
        custom_dns,
        ignored_v6,
        warnings,
        gate: None,
    })
}

impl Policy {
    /// Allow-by-name mode when the profile's egress is `ByName` or `Log`
    /// (its hosts are `[network] hosts` then its own); otherwise the policy
    /// as derived. The sandbox's resolver becomes the gate's; the derived
    /// resolvers are the gate's upstream.
    pub fn by_name(mut self, profile: &Profile) -> Policy {
        if !self.egress.networked() || !profile.egress.gated() {
            return self;
        }
        let upstream = std::mem::replace(&mut self.resolvers, vec![GATE_ADDR]);
        self.egress = profile.egress;
        self.gate = Some(Gate {
            hosts: profile.hosts.clone(),
            upstream,
            idle_timeout_s: profile.idle_timeout_s,
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
