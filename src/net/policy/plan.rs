//! The install plan handed to the Runtime Supervisor (HC → RS): the routes
//! a policy installs, the sandbox's resolv.conf, the plan's canonical text
//! and digest, and the router decisions the plan implies.

use std::net::Ipv4Addr;

use super::rules::*;
pub use crate::wire::plan::{GatePlan, Plan, PlanRoute, RouteKind};

impl Policy {
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
            enabled: self.egress.networked(),
            custom_dns: self.custom_dns,
            routes: if self.egress.networked() {
                self.routes()
            } else {
                Vec::new()
            },
            gate: self.gate.as_ref().map(|g| GatePlan {
                log_only: self.egress == EgressMode::Log,
                hosts: g.hosts.clone(),
                upstream: g.upstream.clone(),
                forwarded: self.forwarded(),
                idle_timeout_s: g.idle_timeout_s,
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
}

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

    pub(super) fn word(&self) -> &'static str {
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
            s.push_str(&format!("idle-timeout {}s\n", g.idle_timeout_s));
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
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
