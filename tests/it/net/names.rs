//! Egress by name (docs/network.md, "Egress by name"): with
//! `network.hosts`, the sandbox reaches only the listed names, through the
//! egress gate in the router namespace.
//!
//! Test safety: no packet leaves this machine. The "internet" is two test
//! host namespaces on /30s of 198.18.0.0/15 (as in `net.rs`): `allowed`
//! (also the test DNS zone the gate resolves through: `network.dns`) and
//! `other`. Each runs TLS on 443 with a certificate of a test CA made
//! here, plain HTTP on 80 and an SSH-shaped banner on 22; every connection
//! it accepts (and on 5432 and 8080, plain request-response ports that
//! are no gate port) is written to its marker file, so "nothing reached other"
//! is proven by other's marker staying empty. `rebind.test` resolves to an
//! address of this host (the root side of a test link): the gate must
//! refuse it before connecting.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::fixtures::TestNs;
use crate::harness::Env;
use crate::require_env;

const SERVER: &str = concat!(
    r#"
import socket, ssl, sys, threading
ip, name, cert, key, marker, zone = sys.argv[1:7]
zone = dict(kv.split("=") for kv in zone.split(",") if kv)
def mark(port):
    with open(marker, "a") as f:
        f.write("%s %d\n" % (name, port))
def serve(port, wrap):
"#,
    crate::py_listen!(),
    r#"    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    while True:
        c, _ = s.accept()
        mark(port)
        def one(c=c):
            try:
                if port == 22:
                    c.sendall(("SSH-2.0-%s\r\n" % name).encode())
                    c.recv(100)
                    return
                if wrap:
                    c = ctx.wrap_socket(c, server_side=True)
                c.recv(4096)
                body = ("hello from %s\n" % name).encode()
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                c.close()
            except Exception:
                pass
        threading.Thread(target=one, daemon=True).start()
"#,
    crate::py_zone_dns!(),
    r#"        else:
            u.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
for p, w in [(443, True), (80, False), (22, False), (5432, False), (8080, False)]:
    threading.Thread(target=serve, args=(p, w), daemon=True).start()
if zone:
    threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#
);

/// A test host namespace on its own /30 of 198.18.0.0/15 serving as `name`
/// (see [`TestNs`]).
pub(crate) struct NameHost {
    host: TestNs,
    pub(crate) marker: PathBuf,
}

impl std::ops::Deref for NameHost {
    type Target = TestNs;
    fn deref(&self) -> &TestNs {
        &self.host
    }
}

impl NameHost {
    pub(crate) fn new(k: u32) -> NameHost {
        NameHost {
            host: TestNs::create("lzn", std::net::Ipv4Addr::new(198, 19, 0, 0), k),
            marker: PathBuf::new(),
        }
    }

    fn serve(&mut self, name: &str, pki: &Path, zone: &str) {
        let args = [
            self.ip.clone(),
            name.to_string(),
            pki.join("srv.pem").display().to_string(),
            pki.join("srv.key").display().to_string(),
            pki.join(format!("marker-{name}")).display().to_string(),
            zone.to_string(),
        ];
        self.serve_with(SERVER, pki.join(format!("marker-{name}")), &args);
    }

    /// Runs the Python `script` with `args` in the namespace (it prints
    /// `ready` once it listens); `marker` is what it records.
    pub(crate) fn serve_with(&mut self, script: &str, marker: PathBuf, args: &[String]) {
        self.marker = marker;
        let _ = std::fs::remove_file(&self.marker);
        self.host.serve("python3", script, args);
    }

    pub(crate) fn marked(&self) -> String {
        std::fs::read_to_string(&self.marker).unwrap_or_default()
    }
}

/// `env.dir(name)` with the test PKI (see [`make_pki`]) in its `pki`:
/// `(base, base/pki, the CA's PEM)`, or `None` after printing why the test
/// is skipped.
fn test_pki(env: &Env, name: &str) -> Option<(PathBuf, PathBuf, String)> {
    let base = env.dir(name);
    let pki = base.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let Some(ca) = make_pki(&pki) else {
        eprintln!("skipping: openssl cannot make the test CA");
        return None;
    };
    Some((base, pki, ca))
}

/// A test CA and one server certificate for every test name.
fn make_pki(dir: &Path) -> Option<String> {
    let sh = format!(
        "set -e; cd {d}; openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
         -subj /CN=lazaret-test-ca 2>/dev/null; \
         openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj /CN=allowed.test 2>/dev/null; \
         printf 'subjectAltName=DNS:allowed.test,DNS:other.test,DNS:git.test,DNS:rebind.test\\n' > ext; \
         openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 \
         -extfile ext 2>/dev/null",
        d = dir.display()
    );
    let ok = Command::new("sh").args(["-c", &sh]).status().is_ok_and(|s| s.success());
    ok.then(|| std::fs::read_to_string(dir.join("ca.pem")).ok()).flatten()
}

/// Run inside the sandbox: one line per check, `NAME ok DETAIL` or
/// `NAME err DETAIL MS`.
const CLIENT: &str = r#"
import socket, ssl, sys, time, struct
ca, other_ip = sys.argv[1], sys.argv[2]
open("/tmp/ca.pem", "w").write(ca)
ctx = ssl.create_default_context(cafile="/tmp/ca.pem")
def report(name, f):
    t = time.monotonic()
    try:
        r = f()
        print("%s ok %r %.1f" % (name, r, (time.monotonic() - t) * 1000), flush=True)
    except Exception as e:
        print("%s err %s %.1f" % (name, type(e).__name__, (time.monotonic() - t) * 1000), flush=True)
def https(host, addr=None, sni=None, port=443):
    s = socket.create_connection((addr or host, port), timeout=3)
    s = ctx.wrap_socket(s, server_hostname=sni or host)
    s.sendall(b"GET / HTTP/1.0\r\nHost: " + host.encode() + b"\r\n\r\n")
    d = s.recv(4096)
    if not d:
        raise EOFError()
    return d.decode().split("\r\n\r\n")[-1].strip()
def raw(addr, port, send=b"ping"):
    s = socket.create_connection((addr, port), timeout=3)
    s.sendall(send)
    d = s.recv(100)
    if not d:
        raise EOFError()
    return d.decode(errors="replace").strip()
def udp(addr, port):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(1)
    u.connect((addr, port))
    u.send(b"\x4c\x5a\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05other\x04test\x00\x00\x01\x00\x01")
    return len(u.recv(512))
def proxy(host):
    s = socket.create_connection(("169.254.255.2", 3128), timeout=3)
    s.sendall(b"CONNECT " + host.encode() + b":443 HTTP/1.1\r\nHost: x\r\n\r\n")
    head = s.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        raise OSError(head.decode().split("\r\n")[0])
    s = ctx.wrap_socket(s, server_hostname=host)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    return s.recv(4096).decode().split("\r\n\r\n")[-1].strip()
report("allowed", lambda: https("allowed.test"))
report("other-name", lambda: https("other.test"))
report("other-dns", lambda: socket.gethostbyname("other.test"))
report("other-ip-tls", lambda: https("other.test", addr=other_ip))
report("ip-literal", lambda: https(other_ip))
report("other-raw", lambda: raw(other_ip, 443))
report("sni-fronted", lambda: https("allowed.test", addr=other_ip, sni="allowed.test"))
report("udp", lambda: udp(other_ip, 53))
report("udp-slirp-dns", lambda: udp("10.0.2.3", 53))
report("git", lambda: raw("git.test", 22, b"SSH-2.0-client\r\n"))
report("ssh-other-ip", lambda: raw(other_ip, 22, b"SSH-2.0-client\r\n"))
report("ssh-wrong-name", lambda: raw("allowed.test", 22, b"SSH-2.0-client\r\n"))
report("rebind", lambda: https("rebind.test"))
report("proxy", lambda: proxy("allowed.test"))
report("proxy-other", lambda: proxy("other.test"))
"#;

fn field<'a>(out: &'a str, check: &str) -> Vec<&'a str> {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(check))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default()
}

#[test]
fn allow_by_name_reaches_only_listed_names_through_the_gate() {
    let (env, _g) = require_env!(shared);
    let Some((base, pki, ca)) = test_pki(env, "names") else {
        return;
    };
    let k = (std::process::id() * 4) % 16000;
    let mut allowed = NameHost::new(k);
    let mut other = NameHost::new(k + 1);
    let zone = format!(
        "allowed.test={a},git.test={a},other.test={o},rebind.test={h}",
        a = allowed.ip,
        o = other.ip,
        h = allowed.host_side
    );
    allowed.serve("allowed.test", &pki, &zone);
    other.serve("other.test", &pki, "");
    let cfg = env.write_config(
        &base,
        &format!(
            "[network]\nhosts = [\"allowed.test\"]\n\
             [profiles.names.network]\ndns = [\"{a}\"]\nhosts = [\"git.test:22\", \"rebind.test\"]\n\
             [profiles.hole.network]\ndns = [\"{a}\"]\nallow = [\"{o}/32\"]\n",
            a = allowed.ip,
            o = other.ip
        ),
    );
    let ws = env.dir("names-ws");
    let r = env
        .lz_in(&ws, "names", &["python3", "-c", CLIENT, &ca, &other.ip])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let ok = |c: &str, want: &str| {
        let f = field(&r.stdout, c);
        assert!(
            f.get(1) == Some(&"ok") && f.join(" ").contains(want),
            "{c}: expected ok {want}: {r:?}"
        );
    };
    ok("allowed", "hello from allowed.test");
    // An allowed SNI towards other's address reaches allowed.test.
    ok("sni-fronted", "hello from allowed.test");
    ok("git", "SSH-2.0-allowed.test");
    ok("proxy", "hello from allowed.test");
    for c in [
        "other-name",
        "other-dns",
        "other-ip-tls",
        "ip-literal",
        "other-raw",
        "udp",
        "udp-slirp-dns",
        "ssh-other-ip",
        "ssh-wrong-name",
        "rebind",
        "proxy-other",
    ] {
        let f = field(&r.stdout, c);
        assert_eq!(f.get(1), Some(&"err"), "{c} must fail: {r:?}");
        let ms: f64 = f.last().unwrap().parse().unwrap();
        // Fails at once, not by a time-out (the client waits 1-3 s).
        assert!(ms < 900.0, "{c} failed only after {ms} ms: {r:?}");
    }
    assert_eq!(other.marked(), "", "a connection reached other.test: {r:?}");
    assert!(!allowed.marked().contains("allowed.test 80"), "{}", allowed.marked());

    // Acceptance 2: a nested user namespace (CAP_NET_ADMIN over gVisor's
    // stack), its own routes to other.test and via slirp's gateway, and raw
    // sockets: still nothing arrives.
    let attack = r#"
import socket, struct, sys, os
other = sys.argv[1]
def nl(typ, flags, body):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.send(struct.pack("=IHHII", 16 + len(body), typ, flags | 1 | 4, 1, 0) + body)
    d = s.recv(4096)
    return struct.unpack("=i", d[16:20])[0] if struct.unpack("=H", d[4:6])[0] == 2 else 1
def attr(t, v):
    a = struct.pack("=HH", 4 + len(v), t) + v
    return a + b"\0" * ((4 - len(a) % 4) % 4)
def reroute(gw, onlink):
    idx = socket.if_nametoindex("lzr0")
    rt = struct.pack("=BBBBBBBBI", 2, 32, 0, 0, 254, 4, 0, 1, 4 if onlink else 0)
    rt += attr(1, socket.inet_aton(other)) + attr(5, socket.inet_aton(gw)) + attr(4, struct.pack("=I", idx))
    print("route via", gw, nl(24, 0x400 | 0x200, rt), flush=True)
def tcp(port):
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((other, port)); s.sendall(b"GET / HTTP/1.0\r\n\r\n"); print("tcp", port, "data", s.recv(100), flush=True)
    except OSError as e:
        print("tcp", port, "err", e.errno, flush=True)
print("uid", os.getuid(), flush=True)
for gw, onlink in [("169.254.255.2", False), ("10.0.2.2", True)]:
    reroute(gw, onlink)
    for p in (443, 80, 22, 7):
        tcp(p)
try:
    r = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    syn = struct.pack("!HHIIBBHHH", 40000, 22, 1, 0, 5 << 4, 2, 65535, 0, 0)
    for _ in range(3):
        r.sendto(syn, (other, 0))
    u = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    u.sendto(struct.pack("!HHHH", 40000, 53, 8, 0), (other, 0))
    print("raw sent", flush=True)
except OSError as e:
    print("raw refused", e.errno, flush=True)
"#;
    let r2 = env
        .lz_in(&ws, "names", &["unshare", "-Ur", "python3", "-c", attack, &other.ip])
        .config_home(&cfg)
        .run();
    assert_eq!(r2.code, 0, "{r2:?}");
    assert!(r2.stdout.contains("uid 0") && r2.stdout.contains("raw "), "{r2:?}");
    assert!(
        r2.stdout.contains("route via 169.254.255.2 0"),
        "the nested namespace must be able to add the route: {r2:?}"
    );
    assert!(!r2.stdout.contains("hello from other"), "{r2:?}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(other.marked(), "", "a connection reached other.test: {r2:?}");

    // Every refusal is in the log, with the hosts line that would allow it.
    let log = env
        .lz(&ws, &["net", "log", "--profile", "names"])
        .config_home(&cfg)
        .run();
    assert_eq!(log.code, 0, "{log:?}");
    for want in [
        "refused  dns other.test:53",
        "refused  tcp other.test:443",
        &format!("refused  tcp {}:443", other.ip),
        &format!("refused  tcp {}:22", other.ip),
        "refused  tcp allowed.test:22",
        &format!("refused  udp {}:53", other.ip),
        "refused  udp 10.0.2.3:53",
        &format!("refused  tcp {}:7 x2 (port not served by the gate)", other.ip),
        "refused  tcp rebind.test:443 x1 (resolves only to denied addresses)",
        "hosts = [\"allowed.test\", \"git.test:22\", \"rebind.test\", ",
        "\"other.test\"",
        "\"allowed.test:22\"",
    ] {
        assert!(log.stdout.contains(want), "missing {want:?}: {log:?}");
    }
    let j = env
        .lz(&ws, &["net", "log", "--profile", "names", "--json"])
        .config_home(&cfg)
        .run();
    assert!(j.stdout.contains("\"name\":\"other.test\""), "{j:?}");
    assert!(
        !log.stdout.contains("lazaret-probe"),
        "the probe is not egress: {log:?}"
    );
    // The session that hit refusals is told once per name (escaped), not
    // once per attempt.
    let notice = r#"
import socket, ssl, sys, time
ctx = ssl.create_default_context()
for _ in range(3):
    try:
        ctx.wrap_socket(socket.create_connection((sys.argv[1], 443), timeout=2), server_hostname="other.test")
    except Exception:
        pass
time.sleep(2.5)
"#;
    let n = env
        .lz_in(&ws, "names", &["python3", "-c", notice, &other.ip])
        .config_home(&cfg)
        .run();
    assert_eq!(n.code, 0, "{n:?}");
    let line = "lazaret: egress to other.test:443 refused (not in network.hosts of profile names)";
    assert_eq!(n.stderr.matches(line).count(), 1, "{n:?}");
    // `net show` lists the mode and the names.
    let show = env
        .lz(&ws, &["net", "show", "--profile", "names"])
        .config_home(&cfg)
        .run();
    for want in ["egress by name", "host allowed.test", "host git.test:22", "ports 22"] {
        assert!(show.stdout.contains(want), "missing {want:?}: {show:?}");
    }
    // A profile `allow` range stays the explicit way to open addresses: it
    // is forwarded by address (the global hosts put `hole` in the mode too).
    let h = env
        .lz_in(
            &ws,
            "hole",
            &[
                "python3",
                "-c",
                "import socket,sys\ns=socket.create_connection((sys.argv[1],80),timeout=3)\n\
                 s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n')\nprint(s.recv(4096).decode())",
                &other.ip,
            ],
        )
        .config_home(&cfg)
        .run();
    assert!(h.stdout.contains("hello from other.test"), "{h:?}");
    assert!(other.marked().contains("other.test 80"), "{}", other.marked());
}

#[test]
fn log_mode_allows_every_name_and_logs_it() {
    let (env, _g) = require_env!(shared);
    let Some((base, pki, ca)) = test_pki(env, "names-log") else {
        return;
    };
    let k = (std::process::id() * 4 + 8) % 16000;
    let mut allowed = NameHost::new(k);
    let mut other = NameHost::new(k + 1);
    let zone = format!("allowed.test={},other.test={}", allowed.ip, other.ip);
    allowed.serve("allowed.test", &pki, &zone);
    other.serve("other.test", &pki, "");
    // A service on an address of this host (the root side of allowed's
    // link), which log mode must still refuse: it marks any connection.
    let host_marker = pki.join("marker-host");
    let _ = std::fs::remove_file(&host_marker);
    let mut host_service = HostService(
        Command::new("python3")
            .args([
                "-c",
                "import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
                 s.bind((sys.argv[1],5432))\ns.listen(8)\nprint('ready',flush=True)\nwhile True:\n  \
                 c,_=s.accept()\n  open(sys.argv[2],'a').write('reached\\n')\n  c.close()",
                &allowed.host_side,
            ])
            .arg(&host_marker)
            .stdout(Stdio::piped())
            .spawn()
            .expect("host service"),
    );
    let mut line = String::new();
    BufReader::new(host_service.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "host service did not start");
    let cfg = env.write_config(
        &base,
        &format!("[profiles.learn.network]\ndns = [\"{}\"]\nmode = \"log\"\n", allowed.ip),
    );
    let ws = env.dir("names-log-ws");
    let script = r#"
import socket, ssl, sys, time
open("/tmp/ca.pem", "w").write(sys.argv[1])
ctx = ssl.create_default_context(cafile="/tmp/ca.pem")
for h in ["allowed.test", "other.test"]:
    s = ctx.wrap_socket(socket.create_connection((h, 443), timeout=3), server_hostname=h)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print(s.recv(4096).decode().split("\r\n\r\n")[-1].strip(), flush=True)
s = socket.create_connection((sys.argv[2], 80), timeout=3)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
print(s.recv(4096).decode().split("\r\n\r\n")[-1].strip(), "by address", flush=True)
# Ports the gate has no listener of its own for: the catch-all.
def port(tag, addr, p, send=b"GET / HTTP/1.0\r\n\r\n"):
    t = time.monotonic()
    try:
        s = socket.create_connection((addr, p), timeout=3)
        s.sendall(send)
        d = s.recv(4096).decode(errors="replace")
        if not d:
            raise EOFError()
        print(tag, "ok", d.split("\r\n\r\n")[-1].strip(), flush=True)
    except Exception as e:
        print(tag, "err", type(e).__name__, "%.1f" % ((time.monotonic() - t) * 1000), flush=True)
port("name-5432", "allowed.test", 5432)
port("name-8080", "other.test", 8080)
port("literal-5432", sys.argv[2], 5432)
port("ssh-22", "other.test", 22, b"")
port("denied-5432", sys.argv[3], 5432)
"#;
    let r = env
        .lz_in(
            &ws,
            "learn",
            &["python3", "-c", script, &ca, &other.ip, &allowed.host_side],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    for want in [
        "hello from allowed.test",
        "hello from other.test",
        "hello from other.test by address",
        "name-5432 ok hello from allowed.test",
        "name-8080 ok hello from other.test",
        "literal-5432 ok hello from other.test",
        "ssh-22 ok SSH-2.0-other.test",
    ] {
        assert!(r.stdout.contains(want), "missing {want:?}: {r:?}");
    }
    // The test servers saw those connections (their markers).
    assert!(allowed.marked().contains("allowed.test 5432"), "{}", allowed.marked());
    for want in ["other.test 8080", "other.test 5432", "other.test 22"] {
        assert!(other.marked().contains(want), "missing {want:?}: {}", other.marked());
    }
    // A denied prefix (an address of this host) stays refused, at once,
    // and its service saw nothing.
    let f = field(&r.stdout, "denied-5432");
    assert_eq!(f.get(1), Some(&"err"), "{r:?}");
    let ms: f64 = f.last().unwrap().parse().unwrap();
    assert!(ms < 900.0, "refused only after {ms} ms: {r:?}");
    assert_eq!(
        std::fs::read_to_string(&host_marker).unwrap_or_default(),
        "",
        "a connection reached the host's own address"
    );
    drop(host_service);
    let log = env
        .lz(&ws, &["net", "log", "--profile", "learn"])
        .config_home(&cfg)
        .run();
    for want in [
        "allowed  tcp allowed.test:443",
        "allowed  tcp other.test:443",
        "allowed  dns other.test:53",
        &format!("allowed  tcp {}:80", other.ip),
        "allowed  tcp allowed.test:5432",
        "allowed  tcp other.test:8080",
        "allowed  tcp other.test:22",
        &format!("allowed  tcp {}:5432", other.ip),
        &format!("refused  tcp {}:5432 x1 (a denied address)", allowed.host_side),
    ] {
        assert!(log.stdout.contains(want), "missing {want:?}: {log:?}");
    }
    assert!(
        !log.stdout.contains("port not served"),
        "log mode serves every port: {log:?}"
    );
}

/// A process killed and reaped when the test ends.
struct HostService(Child);

impl Drop for HostService {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bad_host_patterns_are_config_errors_naming_file_line_and_pattern() {
    let env = require_env!();
    let ws = env.dir("names-bad-ws");
    for (pattern, why) in [
        ("*", "bare"),
        ("*.com", "top-level domain"),
        ("198.18.0.1", "not an address"),
        ("a.example:70000", ":PORT"),
        ("bücher.example", "IDNA"),
    ] {
        let base = env.dir("names-bad");
        let cfg = env.write_config(
            &base,
            &format!("[profiles.p.network]\nhosts = [\n  \"ok.example\",\n  \"{pattern}\",\n]\n"),
        );
        let r = env.lz(&ws, &["net", "show", "--profile", "p"]).config_home(&cfg).run();
        assert_eq!(r.code, 2, "{pattern}: {r:?}");
        for want in [
            "config.toml:4:",
            "profiles.p.network.hosts",
            why,
            &format!("{pattern:?}"),
        ] {
            assert!(r.stderr.contains(want), "{pattern}: missing {want:?}: {r:?}");
        }
    }
}

/// Log mode without `nft` does not start (fail closed): one sentence
/// says what is missing (fault-injection builds hide nft).
#[test]
fn log_mode_without_nft_fails_the_start() {
    let (env, _g) = require_env!(shared);
    if !env.fault_build_or_skip() {
        return;
    }
    let (cfg, ws) = env.config_and_workspace("names-nonft", "[profiles.p.network]\nmode = \"log\"\n");
    let r = env
        .lz_in(&ws, "p", &["echo", "started"])
        .config_home(&cfg)
        .env("LAZARET_FAULT", "no-nft")
        .run();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("started"), "{r:?}");
    assert!(
        r.stderr.contains("network.mode = \"log\" needs nft (nftables)") && r.stderr.contains("install nftables"),
        "{r:?}"
    );
}

/// A dead gate is a failed generation, like a dead slirp4netns: the
/// running session is told in one line, exit 125 (fault-injection builds).
#[test]
fn a_dead_egress_gate_fails_the_generation() {
    let (env, _g) = require_env!(shared);
    if !env.fault_build_or_skip() {
        return;
    }
    let (cfg, ws) = env.config_and_workspace("names-dies", "[profiles.p.network]\nhosts = [\"allowed.test\"]\n");
    let script = r#"
import socket, time
try:
    socket.create_connection(("198.18.0.9", 443), timeout=2).sendall(b"ping")
except OSError:
    pass
time.sleep(30)
print("still running")
"#;
    let r = env
        .lz_in(&ws, "p", &["python3", "-c", script])
        .config_home(&cfg)
        .env("LAZARET_FAULT", "gate-dies")
        .run();
    assert_eq!(r.code, 125, "{r:?}");
    assert!(
        r.stderr.contains("helper") && r.stderr.contains("the egress gate"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("still running"), "{r:?}");
}
