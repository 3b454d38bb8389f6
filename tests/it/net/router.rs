//! Network v2: egress is enforced by the host kernel in the Domain's router
//! namespace, so nothing the sandbox does to its own routes reaches a
//! denied address (docs/network.md, "Where a decision is enforced").
//!
//! Each attack runs as the sandbox would: a process inside runs `unshare
//! -Ur` (a nested user namespace gives it CAP_NET_ADMIN over gVisor's
//! network stack) and installs more specific routes over raw netlink (the
//! default image has no `ip`), then tries to reach the denied destination.
//!
//! Test safety: no packet leaves this machine. Targets are
//! test hosts the tests build on 198.18.0.0/15 and the host's own address
//! on a test link. Default-denied ranges are tried only with IP TTL 1: were
//! the router to forward such a packet, the TTL would end in the router;
//! the kernel decision is then read from the router's own route lookup.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::{self, eventually, Env};
use crate::net::localhost::netns_of;
use crate::net::policy::{py, TestHost, DENIED_PRIVATE, DENIED_RESERVED};
use crate::require_env;

/// Shared by the attack scripts: netlink route changes as a process that
/// gained CAP_NET_ADMIN inside gVisor, timed TCP connects (optionally with
/// IP TTL 1) and UDP exchanges. `reroute(prefix, len, gw, onlink)` adds a
/// route on the NIC of the sandbox's default route, via its default gateway
/// unless `gw` is given, and prints `route PREFIX/LEN via GW: RESULT`.
const LIB: &str = concat!(
    r#"
import socket, struct, sys, time, os
def nl(typ, flags, body):
"#,
    crate::py_netlink_send!(),
    r#"    if struct.unpack("=H", d[4:6])[0] == 2:
        return "error %d" % -struct.unpack("=i", d[16:20])[0]
    return "reply"
"#,
    crate::py_netlink_attr!(),
    r#"def default_route():
    for l in open("/proc/net/route").read().splitlines()[1:]:
        f = l.split()
        if f[1] == "00000000" and f[7] == "00000000":
            return f[0], socket.inet_ntoa(struct.pack("<I", int(f[2], 16)))
    return None, None
def reroute(prefix, plen, gw=None, onlink=False):
    dev, dgw = default_route()
    gw = gw or dgw
    idx = socket.if_nametoindex(dev)
    flags = 4 if onlink else 0  # RTNH_F_ONLINK
    rt = struct.pack("=BBBBBBBBI", 2, plen, 0, 0, 254, 4, 0, 1, flags)
    rt += attr(1, socket.inet_aton(prefix)) + attr(5, socket.inet_aton(gw)) + attr(4, struct.pack("=I", idx))
    print("route %s/%d via %s: %s" % (prefix, plen, gw, nl(24, 0x400 | 0x200, rt)), flush=True)
def tcp(addr, port, ttl=0, timeout=2.0):
    s = socket.socket()
    if ttl:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
    s.settimeout(timeout)
    t = time.monotonic()
    try:
        s.connect((addr, port))
        s.sendall(b"ping")
        r = s.recv(16)
        print("tcp %s ok %.1f %r" % (addr, (time.monotonic() - t) * 1000, r), flush=True)
    except OSError as e:
        print("tcp %s err %s %.1f" % (addr, e.errno, (time.monotonic() - t) * 1000), flush=True)
def udp(addr, port, ttl=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if ttl:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
    s.settimeout(1.0)
    q = b"\x4c\x5a\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03pkg\x07example\x04test\x00\x00\x01\x00\x01"
    try:
        s.connect((addr, port))
        s.send(q)
        print("udp %s reply %d" % (addr, len(s.recv(512))), flush=True)
    except OSError as e:
        print("udp %s err %s" % (addr, e.errno), flush=True)
"#
);

/// Field `n` of the line starting with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> Option<Vec<&'a str>> {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .map(|l| l.split_whitespace().collect())
}

/// Runs `script` inside a nested user namespace (`unshare -Ur`), which is
/// how a sandbox process regains CAP_NET_ADMIN over gVisor's stack.
fn attack(env: &Env, ws: &Path, cfg: &Path, profile: &str, body: &str, args: &[&str]) -> harness::Run {
    let script = format!("{LIB}\n{body}");
    let mut a = vec![
        "run",
        "--profile",
        profile,
        "--",
        "unshare",
        "-Ur",
        "python3",
        "-c",
        &script,
    ];
    a.extend_from_slice(args);
    env.lz(ws, &a).config_home(cfg).run()
}

#[test]
fn a_rerouted_sandbox_still_cannot_reach_a_denied_test_host() {
    let (env, _g) = require_env!(shared);
    let th = TestHost::new();
    let (cfg, ws) = env.config_and_workspace(
        "netv2-reroute",
        &format!(
            "[profiles.deny.network]\ndeny = [\"198.18.0.0/15\"]\n\
             [profiles.hole.network]\ndeny = [\"198.18.0.0/15\"]\nallow = [\"{}/32\"]\n",
            th.ip
        ),
    );
    // The attack: a /32 for the test host via the sandbox's own default
    // gateway (the router), and one via slirp4netns's gateway as if it
    // were on the link; then TCP (echo, port 7) and UDP (DNS, port 53).
    let body = r#"
th = sys.argv[1]
print("uid", os.getuid(), "default", default_route(), flush=True)
reroute(th, 32)
print(open("/proc/net/route").read(), flush=True)
tcp(th, 7)
udp(th, 53)
reroute(th, 32, "10.0.2.2", onlink=True)
tcp(th, 7)
udp(th, 53)
"#;
    let r = attack(env, &ws, &cfg, "deny", body, &[&th.ip]);
    assert_eq!(r.code, 0, "{r:?}");
    // The attack really changed gVisor's table: the route is there.
    let first = line(&r.stdout, &format!("route {}/32 via ", th.ip)).unwrap_or_default();
    assert_eq!(
        first.last(),
        Some(&"0"),
        "the nested user namespace must be able to add the route: {r:?}"
    );
    let hex = {
        let o: Vec<u8> = th.ip.split('.').map(|x| x.parse().unwrap()).collect();
        format!("{:02X}{:02X}{:02X}{:02X}", o[3], o[2], o[1], o[0])
    };
    assert!(
        r.stdout.contains(&hex),
        "the /32 route is not in the sandbox's table: {r:?}"
    );
    let tcps: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("tcp ")).collect();
    let udps: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("udp ")).collect();
    assert_eq!(tcps.len(), 2, "{r:?}");
    // Via the router: refused by the router's kernel (ECONNREFUSED) fast.
    let f: Vec<&str> = tcps[0].split_whitespace().collect();
    assert_eq!(f[2..4], ["err", "111"], "{r:?}");
    let ms: f64 = f[4].parse().unwrap();
    assert!(ms < 50.0, "the refusal took {ms} ms: {r:?}");
    // Via slirp's gateway "on link": it is not on the link, nothing answers.
    assert!(tcps[1].contains(" err "), "{r:?}");
    assert!(r.stdout.contains("default ('lzr0', '169.254.255.2')"), "{r:?}");
    for u in &udps {
        assert!(u.contains(" err "), "a UDP reply came back from the denied host: {r:?}");
    }
    // Positive control: the same script reaches the test host when the
    // profile allows it (so the failures above are the policy's doing).
    let r = attack(
        env,
        &ws,
        &cfg,
        "hole",
        "tcp(sys.argv[1], 7)\nudp(sys.argv[1], 53)",
        &[&th.ip],
    );
    assert!(r.stdout.contains(&format!("tcp {} ok", th.ip)), "{r:?}");
    assert!(r.stdout.contains(&format!("udp {} reply", th.ip)), "{r:?}");
}

/// The router namespace of the running Domain (default profile on `ws`): a
/// path to an fd of it held by one of the user's processes (the supervisor
/// holds one). Its inode is in `net show --json`'s readiness.
fn router_ns(env: &Env, ws: &Path, cfg: &Path) -> Option<PathBuf> {
    netns_of(env, ws, cfg, "router-netns-inode", false)
}

/// `ip route get ADDR from 169.254.255.1 iif lzr1` in the router: the
/// kernel's decision for a packet the sandbox sends.
fn router_decision(ns: &Path, addr: &str) -> String {
    let o = Command::new("nsenter")
        .arg(format!("--net={}", ns.display()))
        .args(["ip", "-o", "route", "get", addr, "from", "169.254.255.1", "iif", "lzr1"])
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The default-denied samples of `policy`, and one more in 192.168/16.
fn default_denied() -> Vec<&'static str> {
    [DENIED_PRIVATE, &["192.168.1.1"], DENIED_RESERVED].concat()
}

#[test]
fn default_denies_hold_at_the_router_after_the_sandbox_reroutes() {
    let (env, _g) = require_env!(shared);
    let (cfg, ws) = env.config_and_workspace("netv2-defaults", "");
    let default_denied = default_denied();
    // Inside: a /32 via the gateway for every sample, then TTL-1 TCP and
    // UDP to each (a TTL-1 packet cannot pass the router), then wait so
    // the router can be inspected while the routes are in place.
    // Safety: TTL 1 protects only behind a router; send nothing unless the
    // sandbox's default route leads to it.
    let body = r#"
if default_route() != ("lzr0", "169.254.255.2"):
    print("unexpected topology", default_route(), flush=True)
    sys.exit(3)
for a in sys.argv[1:]:
    reroute(a, 32)
for a in sys.argv[1:]:
    tcp(a, 80, ttl=1, timeout=1.0)
    udp(a, 53, ttl=1)
print("attacked", flush=True)
time.sleep(8)
"#;
    let script = format!("{LIB}\n{body}");
    let mut a = vec!["run", "--", "unshare", "-Ur", "python3", "-c", &script];
    a.extend_from_slice(&default_denied);
    let mut child: Child = env.lz(&ws, &a).config_home(&cfg).spawn();
    let mut out = String::new();
    let mut rd = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut l = String::new();
        if rd.read_line(&mut l).unwrap_or(0) == 0 {
            break;
        }
        out.push_str(&l);
        if l.trim() == "attacked" {
            break;
        }
    }
    assert!(out.contains("attacked"), "{out}");
    // The router's own kernel decision, with the sandbox's routes changed.
    let ns = router_ns(env, &ws, &cfg);
    let decisions: Vec<(String, String)> = match &ns {
        Some(ns) => default_denied
            .iter()
            .chain(["224.0.0.251", "239.255.255.250", "198.51.100.7"].iter())
            .map(|a| (a.to_string(), router_decision(ns, a)))
            .collect(),
        None => Vec::new(),
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(ns.is_some(), "the router namespace of the running Domain was not found");
    for a in &default_denied {
        let l = line(&out, &format!("route {a}/32 ")).unwrap_or_default();
        assert_eq!(l.last(), Some(&"0"), "route for {a} was not added: {out}");
        let t = line(&out, &format!("tcp {a} ")).unwrap_or_default();
        assert_eq!(t.get(2..4), Some(&["err", "111"][..]), "{a}: {out}");
        let u = line(&out, &format!("udp {a} ")).unwrap_or_default();
        assert_eq!(u.get(2), Some(&"err"), "{a}: {out}");
    }
    for (a, d) in &decisions {
        if a == "198.51.100.7" {
            assert!(d.contains("via 10.0.2.2 dev tap0"), "control {a}: {d}");
        } else if a.starts_with("2") && !a.starts_with("240") {
            // Multicast: the router takes it for itself or refuses to
            // route it (no multicast forwarding); never tap0.
            assert!(!d.contains("tap0"), "{a}: the router's decision is {d:?}");
        } else {
            assert!(d.starts_with("local "), "{a}: the router's decision is {d:?}");
            assert!(!d.contains("tap0"), "{a}: {d}");
        }
    }
}

/// A TCP service on the host's own (non-loopback) address: the root
/// namespace side of a test link, bound by the test.
const HOST_SERVICE: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"host-service")
    c.close()
"#;

#[test]
fn the_hosts_own_address_is_denied_by_default_and_an_exact_allow_opens_it() {
    let (env, _g) = require_env!(shared);
    // The test link's root-namespace side is an address of this host.
    let th = TestHost::new();
    let port = "7070";
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut srv = Command::new(python)
        .args(["-c", HOST_SERVICE, &th.host_side, port])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut l = String::new();
    BufReader::new(srv.stdout.take().unwrap()).read_line(&mut l).unwrap();
    assert_eq!(l.trim(), "ready");
    let config = format!(
        "[profiles.broad.network]\nallow = [\"198.18.0.0/15\"]\n\
         [profiles.devdb.network]\nallow = [\"{}/32\"]\n",
        th.host_side
    );
    let (cfg, ws) = env.config_and_workspace("netv2-host", &config);
    let connect = format!("{LIB}\ntcp(sys.argv[1], int(sys.argv[2]))");
    let mut results = Vec::new();
    for profile in ["default", "broad", "devdb"] {
        let r = py(env, &ws, &cfg, profile, &connect, &[&th.host_side, port]);
        results.push((profile, r));
    }
    let shown = env
        .lz(&ws, &["net", "show", "--profile", "broad"])
        .config_home(&cfg)
        .run();
    let _ = srv.kill();
    let _ = srv.wait();
    for (profile, r) in &results[..2] {
        assert!(
            r.stdout.contains(&format!("tcp {} err 111", th.host_side)),
            "{profile}: the host's own address must be refused: {r:?}"
        );
    }
    let (_, r) = &results[2];
    assert!(
        r.stdout.contains(&format!("tcp {} ok", th.host_side)) && r.stdout.contains("host-service"),
        "an exact allow must open the host address: {r:?}"
    );
    assert!(
        shown.stdout.contains(&format!("DENY  {}/32", th.host_side))
            && shown.stdout.contains("an address of this host"),
        "{shown:?}"
    );
    assert!(shown.stdout.contains("[router: refused]"), "{shown:?}");
    // Nothing of the Domains is left.
    for p in ["default", "broad", "devdb"] {
        let id = env.domain_id(p, &ws);
        assert!(eventually(Duration::from_secs(5), || harness::processes_mentioning(
            &id
        )
        .is_empty()));
    }
}
