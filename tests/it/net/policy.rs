//! Network enforcement.
//!
//! Test safety: no packet leaves this machine. The "internet"
//! is a test host namespace the test creates as root, on a /30 inside
//! 198.18.0.0/15, reached over a veth from the root namespace; slirp4netns
//! forwards sandbox traffic into the root namespace's stack, which routes it
//! to that veth. It runs a TCP echo (port 7), a byte sink (port 9000) and a
//! DNS responder that answers every A query with its own address. Default
//! denies of RFC 1918 and other ranges are checked only by route decision
//! (UDP connect + getsockname: no packet is sent).

use std::path::Path;
use std::time::Duration;

use crate::fixtures::TestNs;
use crate::harness::{self, eventually, Env};
use crate::require_env;

const SERVER: &str = concat!(
    r#"
import socket, sys, threading
ip = sys.argv[1]
def serve(c, echo):
    n = 0
    while True:
        d = c.recv(1 << 20)
        if not d:
            break
        if echo:
            c.sendall(d)
        else:
            n += len(d)
    if not echo:
        c.sendall(str(n).encode())
    c.close()
def tcp(port, echo):
"#,
    crate::py_listen!(),
    r#"    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c, echo), daemon=True).start()
def dns():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((ip, 53))
    while True:
        q, a = u.recvfrom(512)
        e = 12
        while q[e] != 0:
            e += q[e] + 1
        e += 5
        u.sendto(q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[12:e]
                 + b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + socket.inet_aton(ip), a)
for t in [(7, True), (9000, False)]:
    threading.Thread(target=tcp, args=t, daemon=True).start()
threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#
);

/// A test host namespace on its own /30 of 198.18.0.0/15 running
/// `SERVER` (see [`TestNs`]); removed on drop.
pub struct TestHost(TestNs);

impl std::ops::Deref for TestHost {
    type Target = TestNs;
    fn deref(&self) -> &TestNs {
        &self.0
    }
}

impl TestHost {
    pub fn new() -> TestHost {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let k = (std::process::id() * 16 + n * 7) % 32768;
        let mut h = TestNs::create("lzt", std::net::Ipv4Addr::new(198, 18, 0, 0), k);
        let python = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let ip = h.ip.clone();
        h.serve(python, SERVER, &[ip]);
        TestHost(h)
    }
}

/// Runs `python3 -c SCRIPT ARGS...` in the Domain of `profile`.
pub(crate) fn py(env: &Env, ws: &Path, cfg: &Path, profile: &str, script: &str, args: &[&str]) -> harness::Run {
    let mut a = vec!["run", "--profile", profile, "--", "python3", "-c", script];
    a.extend_from_slice(args);
    env.lz(ws, &a).config_home(cfg).run()
}

/// Connects to ADDR:PORT, prints `ok MS REPLY` or `err ERRNO MS`.
const CONNECT: &str = r#"
import socket, sys, time
s = socket.socket()
t = time.monotonic()
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    s.sendall(b"ping")
    print("ok", int((time.monotonic() - t) * 1000), s.recv(10).decode())
except OSError as e:
    print("err", e.errno, (time.monotonic() - t) * 1000)
"#;

// Covers SR-17, FR-16, FR-18.
#[test]
fn allowed_test_host_is_reachable_over_tcp_and_dns_and_net_show_reports_readiness() {
    let (env, _g) = require_env!(shared);
    let th = TestHost::new();
    let (cfg, ws) = env.config_and_workspace(
        "netallow",
        &format!(
            "[profiles.net.network]\nallow = [\"198.18.0.0/15\"]\ndns = [\"{}\"]\n",
            th.ip
        ),
    );
    let r = py(env, &ws, &cfg, "net", CONNECT, &[&th.ip, "7"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("ok ") && r.stdout.trim().ends_with("ping"),
        "{r:?}"
    );
    // DNS through the Domain's resolver (the test host), via resolv.conf.
    let r = env
        .lz_in(
            &ws,
            "net",
            &["sh", "-c", "cat /etc/resolv.conf; getent ahostsv4 pkg.example.test"],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("nameserver {}", th.ip)), "{r:?}");
    assert!(
        r.stdout.contains(&format!("{} ", th.ip)) && r.stdout.contains("pkg.example.test"),
        "{r:?}"
    );

    // The probe request reached init as its stdin (the checks below ran),
    // and init closed it and its report pipe before any session started:
    // nothing in the sandbox can read or write either host file.
    let r = env
        .lz_in(
            &ws,
            "net",
            &[
                "sh",
                "-c",
                "test -e /proc/1/fd/0 || test -e /proc/1/fd/1 || echo closed",
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.stdout.trim(), "closed", "{r:?}");

    // `net show` while the Domain runs: policy and attested readiness.
    let mut bg = env.lz_in(&ws, "net", &["sleep", "4"]).config_home(&cfg).spawn();
    let id = env.domain_id("net", &ws);
    let run = env.runtime_root().join(&id);
    let mut r = env.lz(&ws, &["version"]).run();
    let shown = eventually(Duration::from_secs(20), || {
        if !run.join("hc.sock").exists() || !run.join("gen/net-readiness").exists() {
            return false;
        }
        r = env
            .lz(&ws, &["net", "show", "--profile", "net"])
            .config_home(&cfg)
            .run();
        r.stdout.contains("readiness: attested")
    });
    assert!(shown && r.code == 0, "{r:?}");
    for want in [
        "DENY  10.0.0.0/8",
        "allow 198.18.0.0/15",
        "readiness: attested and probed",
        "fingerprint: ",
        "network-sidecar: ",
        &format!("probe ok dns {}", th.ip),
        "probe ok deny 192.168.0.1 (192.168.0.0/16): refused by the router in",
        "probe ok network helper live",
        "probe ok router live",
        "router-netns-inode: ",
        "probe ok ipv6 disabled",
    ] {
        assert!(r.stdout.contains(want), "missing {want:?}: {r:?}");
    }
    let j = env
        .lz(&ws, &["net", "show", "--profile", "net", "--json"])
        .config_home(&cfg)
        .run();
    assert!(
        j.stdout.contains("\"running\":true") && j.stdout.contains("\"fingerprint\""),
        "{j:?}"
    );
    let _ = bg.wait();
}

// Covers SR-6, FR-19.
#[test]
fn deny_is_refused_fast_a_host_allow_opens_it_and_equal_prefix_is_deny() {
    let (env, _g) = require_env!(shared);
    let th = TestHost::new();
    let (cfg, ws) = env.config_and_workspace(
        "netdeny",
        &format!(
            "[profiles.deny.network]\ndeny = [\"198.18.0.0/15\"]\n\
             [profiles.hole.network]\ndeny = [\"198.18.0.0/15\"]\nallow = [\"{}/32\"]\n\
             [profiles.equal.network]\ndeny = [\"198.18.0.0/15\"]\nallow = [\"198.18.0.0/15\"]\n",
            th.ip
        ),
    );
    // Deny: refused (ECONNREFUSED = 111), in under 50 ms.
    let r = py(env, &ws, &cfg, "deny", CONNECT, &[&th.ip, "7"]);
    assert_eq!(r.code, 0, "{r:?}");
    let f: Vec<&str> = r.stdout.split_whitespace().collect();
    assert_eq!(f.get(..2), Some(&["err", "111"][..]), "{r:?}");
    let ms: f64 = f[2].parse().unwrap();
    assert!(ms < 50.0, "refusal took {ms} ms: {r:?}");
    // A more specific /32 allow opens a hole.
    let r = py(env, &ws, &cfg, "hole", CONNECT, &[&th.ip, "7"]);
    assert!(
        r.stdout.starts_with("ok ") && r.stdout.trim().ends_with("ping"),
        "{r:?}"
    );
    // Equal prefix allow + deny: deny, with a warning.
    let r = py(env, &ws, &cfg, "equal", CONNECT, &[&th.ip, "7"]);
    assert!(r.stdout.starts_with("err 111 "), "{r:?}");
    let r = env
        .lz(&ws, &["net", "show", "--profile", "equal"])
        .config_home(&cfg)
        .run();
    assert!(
        r.stdout
            .contains("warning: 198.18.0.0/15 is both allowed (profile network.allow) and denied"),
        "{r:?}"
    );
}

/// TCP connects with IP TTL 1: the router refuses a denied destination
/// itself (errno 111); an allowed one it would forward, and the TTL ends
/// there (no answer, no packet leaves). IPv6 by route decision only.
const ROUTES: &str = r#"
import socket, sys
# Safety: TTL 1 protects only behind the router; send nothing otherwise.
if "lzr0\t00000000\t02FFFEA9" not in open("/proc/net/route").read():
    print("unexpected topology")
    sys.exit(3)
for a in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 1)
    s.settimeout(0.3)
    try:
        s.connect((a, 9))
        print(a, "connected")
    except OSError as e:
        print(a, "err", e.errno)
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.connect(("2000::1", 9))
    print("ipv6", s.getsockname()[0])
except OSError as e:
    print("ipv6 unreachable", e.errno)
"#;

/// Addresses in ranges denied by default, part one: RFC 1918 (10.0.2.15,
/// slirp4netns's guest address, among them). Shared with `router`.
pub(crate) const DENIED_PRIVATE: &[&str] = &[
    "10.0.0.1",
    "10.255.255.254",
    "10.0.2.15",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.0.1",
];

/// Addresses in ranges denied by default, part two: the end of 192.168/16,
/// link-local, shared address space, "this network" and 240/4. Shared
/// with `router`.
pub(crate) const DENIED_RESERVED: &[&str] = &[
    "192.168.255.254",
    "169.254.169.254",
    "100.64.0.1",
    "100.127.255.254",
    "0.0.0.1",
    "240.0.0.1",
];

// Covers SR-6, FR-19.
#[test]
fn default_denies_take_the_reject_route_and_ipv6_is_unreachable() {
    let (env, _g) = require_env!(shared);
    let (cfg, ws) = env.config_and_workspace("netdefault", "");
    let denied = [DENIED_PRIVATE, DENIED_RESERVED].concat();
    let allowed = ["198.18.0.1", "198.51.100.7", "10.0.2.2", "10.0.2.3"];
    let mut args: Vec<&str> = denied.to_vec();
    args.extend_from_slice(&allowed);
    let r = py(env, &ws, &cfg, "default", ROUTES, &args);
    assert_eq!(r.code, 0, "{r:?}");
    for a in &denied {
        assert!(
            r.stdout.contains(&format!("{a} err 111\n")),
            "{a} must be refused by the router: {r:?}"
        );
    }
    for a in allowed {
        assert!(
            r.stdout.contains(&format!("{a} err None\n")),
            "{a} must be forwarded by the router (TTL 1 ends there): {r:?}"
        );
    }
    assert!(r.stdout.contains("ipv6 unreachable"), "{r:?}");
}

/// Python: the body of a netlink request function `(typ, flags, body)`
/// up to the reply `d` (a send or receive error returns `send-error ERRNO`).
/// Shared with `router`.
#[macro_export]
macro_rules! py_netlink_send {
    () => {
        r#"    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    msg = struct.pack("=IHHII", 16 + len(body), typ, flags | 1 | 4, 1, 0) + body
    try:
        s.send(msg)
        d = s.recv(4096)
    except OSError as e:
        return "send-error %d" % e.errno
"#
    };
}

/// Python: `attr(t, v)`, a netlink attribute, padded. Shared with `router`.
#[macro_export]
macro_rules! py_netlink_attr {
    () => {
        r#"def attr(t, v):
    a = struct.pack("=HH", 4 + len(v), t) + v
    return a + b"\0" * ((4 - len(a) % 4) % 4)
"#
    };
}

/// Netlink requests a process with CAP_NET_ADMIN could use to reroute:
/// `ip route add`, `ip addr add`, `ip link set down`. Prints each errno.
const NETLINK: &str = concat!(
    r#"
import socket, struct
def req(typ, flags, body):
"#,
    crate::py_netlink_send!(),
    r#"    ln, t = struct.unpack("=IH", d[:6])
    if t == 2:
        return "error %d" % -struct.unpack("=i", d[16:20])[0]
    return "reply %d" % t
"#,
    crate::py_netlink_attr!(),
    r#"idx = socket.if_nametoindex("lzr0")
# RTM_NEWROUTE 198.18.0.0/16 via lzr0 gateway 169.254.255.2
rt = struct.pack("=BBBBBBBBI", 2, 16, 0, 0, 254, 4, 0, 1, 0) + attr(1, socket.inet_aton("198.18.0.0")) + attr(5, socket.inet_aton("169.254.255.2")) + attr(4, struct.pack("=I", idx))
print("route-add", req(24, 0x400 | 0x200, rt))
# RTM_NEWADDR 10.9.9.9/24 on lzr0
ad = struct.pack("=BBBBI", 2, 24, 0, 0, idx) + attr(2, socket.inet_aton("10.9.9.9")) + attr(1, socket.inet_aton("10.9.9.9"))
print("addr-add", req(20, 0x400 | 0x200, ad))
# RTM_NEWLINK lzr0 flags 0 (down), change IFF_UP
ln = struct.pack("=BBHiII", 0, 0, 0, idx, 0, 1)
print("link-down", req(16, 0, ln))
print(open("/proc/net/route").read())
print(open("/proc/net/dev").read())
"#
);

// Covers SR-5, SR-12.
#[test]
fn the_sandbox_cannot_change_its_network_and_is_not_in_the_host_namespace() {
    let (env, _g) = require_env!(shared);
    let (cfg, ws) = env.config_and_workspace("netadmin", "");
    let r = py(env, &ws, &cfg, "default", NETLINK, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    for op in ["route-add", "addr-add", "link-down"] {
        let line = r.stdout.lines().find(|l| l.starts_with(op)).unwrap_or("");
        assert!(
            line.contains(" error ") && !line.ends_with(" error 0") || line.contains("send-error"),
            "{op} must fail: {r:?}"
        );
    }
    // Nothing changed: no route to 198.18.0.0/16 (00 00 12 C6), lzr0 still up.
    assert!(!r.stdout.contains("000012C6"), "{r:?}");
    // Only the Domain's interfaces: not the host's.
    let ifaces: Vec<&str> = r
        .stdout
        .lines()
        .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim()))
        .filter(|n| ["lo", "tap0", "lzr0", "eth0"].contains(n) || n.starts_with("lz"))
        .collect();
    // One NIC, to the router; slirp4netns's tap0 is in the router, not here.
    assert!(ifaces.contains(&"lzr0"), "{r:?}");
    assert!(
        !ifaces.contains(&"tap0") && !ifaces.contains(&"eth0") && !ifaces.iter().any(|n| n.starts_with("lzt")),
        "{r:?}"
    );

    // Host side: the sandbox and gofer run in a network namespace that is
    // not the host's.
    let host_ns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    let mut bg = env.lz_in(&ws, "default", &["sleep", "3"]).config_home(&cfg).spawn();
    let id = env.domain_id("default", &ws);
    let mut seen = Vec::new();
    eventually(Duration::from_secs(20), || {
        seen = harness::processes_mentioning(&id[..8])
            .into_iter()
            .filter(|(_, uids, c)| {
                uids.first() == Some(&env.uid) && (c.starts_with("runsc-sandbox") || c.starts_with("runsc-gofer"))
            })
            .collect();
        !seen.is_empty()
    });
    assert!(!seen.is_empty(), "no sandbox process found");
    for (pid, _, cmd) in &seen {
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        if let Ok(ns) = ns {
            assert_ne!(ns, host_ns, "{cmd} runs in the host network namespace");
        }
    }
    let _ = bg.wait();
}

// Covers FR-20.
#[test]
fn a_skipped_deny_is_caught_and_the_domain_is_not_published() {
    let (env, _g) = require_env!(shared);
    let v = env.lz(&env.home, &["version"]).run();
    assert!(
        v.stdout.contains("fault-injection"),
        "the binary must be built with --features fault-injection (scripts/test.sh does): {v:?}"
    );
    let (cfg, ws) = env.config_and_workspace("netfault", "");
    let id = env.domain_id("default", &ws);
    // The installer skips the 192.168.0.0/16 deny in the router and its
    // self-check is blind to it: the probe from inside the sandbox must
    // catch it (a TTL-1 SYN the router forwards instead of refusing).
    let r = env
        .lz(&ws, &["run", "--", "true"])
        .config_home(&cfg)
        .env("LAZARET_FAULT", "skip-one-deny")
        .run();
    assert_eq!(r.code, 125, "{r:?}");
    assert!(
        r.stderr.contains("network probe failed, the Domain is not published")
            && r.stderr
                .contains("deny 192.168.0.1 (192.168.0.0/16): not refused by the router"),
        "{r:?}"
    );
    assert!(!env.runtime_root().join(&id).join("hc.sock").exists());
    // The same fault with an honest self-check: the route read-back catches it.
    let r = env
        .lz(&ws, &["run", "--", "true"])
        .config_home(&cfg)
        .env("LAZARET_FAULT", "skip-one-deny-visible")
        .run();
    assert_eq!(r.code, 125, "{r:?}");
    assert!(
        r.stderr
            .contains("network readiness: route for 192.168.0.0/16 (reject) is missing"),
        "{r:?}"
    );
    // Nothing of the failed generations is left, and a clean start works.
    assert!(eventually(Duration::from_secs(5), || harness::processes_mentioning(
        &id
    )
    .is_empty()));
    let r = env.lz(&ws, &["run", "--", "true"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
}

/// The time of startup step `step` in a `LAZARET_TRACE_STARTUP=1` trace
/// (milliseconds since the start began), if it is there.
fn trace_ms(trace: &str, role: &str, step: &str) -> Option<f64> {
    trace.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        // "12.3 ms (+ 0.4) ROLE STEP WORDS…" ("(+" and the step time may be one word or two).
        let at = w.iter().position(|x| *x == role)?;
        (w[at + 1..].join(" ") == step)
            .then(|| w.first()?.parse().ok())
            .flatten()
    })
}

// Covers SR-5.
#[test]
fn runsc_boots_while_the_router_is_installed_and_init_waits_for_it() {
    let (env, _g) = require_env!(shared);
    let (cfg, ws) = env.config_and_workspace("netslow", "");
    // The router's half of the network is held back 1.5 s while runsc
    // boots. Init's probe (its first packets) must still meet the whole
    // policy: a probe run before slirp4netns and the router's routes
    // exist fails ("not refused by the router", no route out) and the
    // Domain is not published. The run succeeding is the marker.
    let r = env
        .lz(&ws, &["run", "--", "true"])
        .config_home(&cfg)
        .env("LAZARET_FAULT", "slow-router")
        .env("LAZARET_TRACE_STARTUP", "1")
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let t = |role, step| trace_ms(&r.stderr, role, step).unwrap_or_else(|| panic!("no {role} {step:?} in {r:?}"));
    let (runsc, net, boot, ready) = (
        t("supervisor", "runsc started"),
        t("supervisor", "network installed"),
        t("supervisor", "boot request sent"),
        t("supervisor", "sandbox init ready"),
    );
    // runsc was started before the router's half was done (the overlap),
    // and init got its request only after it: its Ready came after that.
    assert!(runsc + 1400.0 < net, "runsc at {runsc} ms, network at {net} ms: {r:?}");
    assert!(net <= boot && boot <= ready, "{net} {boot} {ready}: {r:?}");
}

#[test]
fn teardown_leaves_no_helper_or_namespace_holder() {
    let (env, _g) = require_env!(shared);
    let (cfg, ws) = env.config_and_workspace("netteardown", "");
    let id = env.domain_id("default", &ws);
    let mut bg = env.lz(&ws, &["run", "--", "sleep", "2"]).config_home(&cfg).spawn();
    let mine = |needle: &str| -> Vec<(i32, Vec<u32>, String)> {
        harness::processes_mentioning(&id)
            .into_iter()
            .filter(|(_, uids, c)| uids.first() == Some(&env.uid) && c.contains(needle))
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(20), || !mine("slirp4netns").is_empty()),
        "slirp4netns of the Domain never ran"
    );
    let st = harness::wait_bounded(&mut bg, Duration::from_secs(300), "lazaret run -- sleep 2");
    assert!(st.success());
    let gone = eventually(Duration::from_secs(5), || harness::processes_mentioning(&id).is_empty());
    assert!(gone, "left behind: {:?}", harness::processes_mentioning(&id));
    assert!(mine("slirp4netns").is_empty());
}
