//! What `lazaret net show` prints about a policy: text and JSON.

use super::rules::*;
use crate::plan::Json;
use crate::wire::plan::RouteKind;

impl Policy {
    /// What `lazaret net show` prints.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        if !self.egress.networked() {
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
        if self.egress == EgressMode::Log {
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
            "  a relayed connection with no byte either way for {}s is closed (network.idle_timeout_s)\n",
            g.idle_timeout_s
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
                // Kept for readers of the earlier JSON: `egress` says the same.
                (
                    "mode",
                    Json::s(if self.egress == EgressMode::Log {
                        "log"
                    } else {
                        "enforce"
                    }),
                ),
                (
                    "hosts",
                    Json::strs(&g.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()),
                ),
                (
                    "upstream",
                    Json::strs(&g.upstream.iter().map(|u| u.to_string()).collect::<Vec<_>>()),
                ),
                ("idle_timeout_s", Json::Num(g.idle_timeout_s as i64)),
            ]),
        };
        Json::Obj(vec![
            ("egress", Json::s(self.egress.word())),
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
