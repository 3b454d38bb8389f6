//! Unit tests of the derived network policy: derivation, plan, checks,
//! probe samples, description and digests.

use std::net::Ipv4Addr;
use std::path::Path;

use super::probe::Sample;
use super::*;
use crate::config::{EgressMode, Prefix, Profile};
use crate::wire::guest::BootCmd;

/// The probe request as `KIND=ADDR[@PREFIX]` words, for assertions.
fn probe_words(pol: &Policy) -> Vec<String> {
    let BootCmd::Probe { checks, .. } = pol.probe_request() else {
        panic!("a probe request")
    };
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
    assert!(pol.egress.networked());
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

// Covers SR-6, FR-19.
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
        egress: EgressMode::None,
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
    let sb =
        "default via 169.254.255.2 dev lzr0 \n169.254.255.0/30 dev lzr0 proto kernel scope link src 169.254.255.1 \n";
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

// Covers SR-17, FR-18.
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
    assert_eq!(plain.clone().by_name(&prof()), plain);
    let mut pr = prof();
    pr.hosts = vec!["a.test".parse().unwrap()];
    pr = pr.with_global_hosts(&["b.test".parse().unwrap()]);
    pr.allow = vec![p("198.18.4.0/24")];
    pr.deny = vec![p("198.18.4.8/29")];
    pr.dns = vec![p("198.18.0.2/32")];
    let pol = derive_ok(None, &pr).by_name(&pr);
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
    pr2.global_hosts = 0;
    assert_ne!(pol.digest(), derive_ok(None, &pr2).by_name(&pr2).digest());
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
    lg.egress = EgressMode::Log;
    let log = derive_ok(None, &lg).by_name(&lg);
    assert!(log.gate.is_some() && log.plan().gate.unwrap().log_only);
    let none = Profile {
        egress: EgressMode::None,
        ..pr.clone()
    };
    assert!(derive_ok(None, &none).by_name(&none).gate.is_none());
}

#[test]
fn the_idle_timeout_reaches_the_gates_plan_and_its_text() {
    let c = crate::config::parse(
        Path::new("/c.toml"),
        "[profiles.p.network]\nhosts = [\"a.test\"]\nidle_timeout_s = 5\n",
    )
    .unwrap();
    let short = c.profile("p").unwrap();
    let pol = derive_with_host_nets(Path::new("/c.toml"), None, short, &[], &[])
        .unwrap()
        .by_name(short);
    let plan = pol.plan();
    assert_eq!(plan.gate.as_ref().unwrap().idle_timeout_s, 5);
    assert!(plan.render().contains("idle-timeout 5s\n"), "{}", plan.render());
}
