//! The read-back checks (FR-18): installed routes against the plan, the
//! router's own route lookups, and the sandbox namespace's table.

use std::net::Ipv4Addr;

use super::rules::*;
use crate::config::Prefix;
use crate::wire::plan::{Plan, PlanRoute, RouteKind};

impl Plan {
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
