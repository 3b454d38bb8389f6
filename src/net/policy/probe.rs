//! The pre-publication probe's side of the policy: the sample addresses
//! each rule is checked with, and the request the probe reads.

use std::net::{IpAddr, Ipv4Addr};

use super::rules::*;
use crate::config::Prefix;
use crate::wire::guest::{BootCmd, ProbeKind, ProbeSpec};

impl Policy {
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

    /// The probe's frame of the boot request the sandbox's init reads on
    /// its stdin (see bin/probe.rs).
    pub fn probe_request(&self) -> BootCmd {
        BootCmd::Probe {
            sandbox_src: SANDBOX_ADDR.into(),
            checks: self.probe_checks(),
        }
    }

    /// The checks the probe runs, in order; the sidecar requires one
    /// passed report for each.
    pub fn probe_checks(&self) -> Vec<ProbeSpec> {
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
        checks
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub addr: Ipv4Addr,
    pub action: Action,
    pub prefix: Prefix,
}
