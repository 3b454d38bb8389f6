//! Bounded and loud (docs/network.md, "The egress log"): a sandbox that
//! floods the egress gate with refused names cannot make later refusals
//! vanish without a word, nor `net log` print an unbounded line; and a
//! relayed connection that goes silent is closed after the profile's
//! `network.idle_timeout_s`.
//!
//! Test safety: no packet leaves this machine. The names are refused by
//! the gate's own resolver (nothing is forwarded); the one test host is a
//! namespace on a /30 of 198.19.0.0/16 (`names::NameHost`) that serves the
//! test zone and accepts TCP on port 80 without ever answering, writing to
//! its marker when a connection is accepted and when it is closed.

use crate::harness::Env;
use crate::net::names::NameHost;
use crate::require_env;

const SILENT: &str = concat!(
    r#"
import socket, sys, threading, time
ip, marker, zone = sys.argv[1:4]
zone = dict(kv.split("=") for kv in zone.split(",") if kv)
def mark(line):
    with open(marker, "a") as f:
        f.write(line + "\n")
def serve(port):
"#,
    crate::py_listen!(),
    r#"    while True:
        c, _ = s.accept()
        def one(c=c):
            t = time.monotonic()
            mark("accepted %d" % port)
            try:
                while c.recv(4096):
                    pass
            except Exception:
                pass
            mark("closed %d after %.1f" % (port, time.monotonic() - t))
        threading.Thread(target=one, daemon=True).start()
"#,
    crate::py_zone_dns!(),
    r#"        else:
            u.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
threading.Thread(target=serve, args=(80,), daemon=True).start()
threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#
);

/// Run inside the sandbox: N refused names of 249 bytes asked of the gate's
/// resolver, one distinctive last one, then a relayed connection left
/// silent until the gate closes it.
const CLIENT: &str = r#"
import socket, struct, sys, time
n = int(sys.argv[1])
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
u.connect((ns, 53))
sent = 0
def ask(name, qid):
    global sent
    pkt = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    pkt += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
    for _ in range(5):
        u.send(pkt)
        sent += 1
        try:
            while True:
                r = u.recv(2048)
                if r[:2] == pkt[:2]:
                    return r[3] & 15
        except socket.timeout:
            pass
    return -1
codes = {}
t = time.monotonic()
for i in range(n):
    name = ".".join(["f%06d" % i + "x" * 56, "y" * 63, "z" * 63, "w" * 52, "test"])
    c = ask(name, i & 0xffff)
    codes[c] = codes.get(c, 0) + 1
print("flood", n, "rcodes", sorted(codes.items()), "%.1f s" % (time.monotonic() - t), flush=True)
print("last", ask("zz-last-refusal.flood.test", 0xbeef), flush=True)
print("sent", sent, flush=True)
# A relayed connection that goes silent both ways.
s = socket.create_connection(("silent.test", 80), timeout=60)
s.sendall(b"GET / HTTP/1.1\r\nHost: silent.test\r\n\r\n")
t = time.monotonic()
try:
    d = s.recv(100)
    how = "eof" if not d else "data"
except OSError as e:
    how = type(e).__name__
print("idle", how, "%.1f" % (time.monotonic() - t), flush=True)
# Time for the coordinator's notices to reach this session.
time.sleep(2)
"#;

/// Names the flood refuses: at 300 bytes a log line, more than the log's
/// two files of 4 MiB hold.
const FLOOD: usize = 32_000;

/// The last few thousand characters of `s`.
fn tail(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    c[c.len().saturating_sub(3000)..].iter().collect()
}

fn num_after(text: &str, key: &str) -> Option<u64> {
    let at = text.find(key)? + key.len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())?
        .parse()
        .ok()
}

#[test]
fn a_flood_of_refusals_rotates_the_log_loudly_and_idle_relays_close() {
    let (env, _g) = require_env!(shared);
    run(env);
}

fn run(env: &Env) {
    let base = env.dir("flood");
    let k = (std::process::id() * 4 + 12) % 16000;
    let mut host = NameHost::new(k);
    let marker = base.join("marker-silent");
    let zone = format!("silent.test={}", host.ip);
    let args = [host.ip.clone(), marker.display().to_string(), zone];
    host.serve_with(SILENT, marker, &args);
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.flood.network]\ndns = [\"{}\"]\nhosts = [\"silent.test\"]\nidle_timeout_s = 2\n",
            host.ip
        ),
    );
    let ws = env.dir("flood-ws");
    let r = env
        .lz_in(&ws, "flood", &["python3", "-c", CLIENT, &FLOOD.to_string()])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, tail(&r.stderr));
    let out = &r.stdout;
    eprintln!("flood: {}", out.lines().next().unwrap_or(""));
    // Every name was refused by the gate's resolver (REFUSED, 5).
    assert!(out.contains(&format!("rcodes [(5, {FLOOD})]")), "{out}");
    assert!(out.contains("last 5"), "{out}");
    let sent = num_after(out, "sent ").expect("sent") as usize;

    // The idle relay: closed by the gate after about 2 s of silence, and
    // the test host saw its side closed too (its marker).
    let idle: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("idle "))
        .map(|l| l.split(' ').collect())
        .unwrap_or_default();
    assert_eq!(idle.get(1), Some(&"eof"), "{out}");
    let secs: f64 = idle[2].parse().unwrap();
    assert!(
        (1.5..12.0).contains(&secs),
        "closed after {secs} s, the timeout is 2 s: {out}"
    );
    let marked = host.marked();
    assert!(
        marked.contains("accepted 80") && marked.contains("closed 80 after"),
        "the test host's connection was not closed: {marked:?}"
    );

    // The session was told once that the log is full, not once per refusal.
    let full = "lazaret: egress log full";
    assert_eq!(r.stderr.matches(full).count(), 1, "{}", tail(&r.stderr));

    // `net log`: the last refusal first, the dropped ones counted, every
    // line bounded.
    let log = env
        .lz(&ws, &["net", "log", "--profile", "flood"])
        .config_home(&cfg)
        .run();
    assert_eq!(log.code, 0, "{}", log.stderr);
    let lines: Vec<&str> = log.stdout.lines().collect();
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.contains("refused  dns zz-last-refusal.flood.test:53 x1")),
        "the newest refusal must come first: {:?}",
        &lines[..lines.len().min(3)]
    );
    let longest = lines.iter().map(|l| l.len()).max().unwrap_or(0);
    assert!(longest <= 6000, "a line of {longest} bytes");
    assert!(lines.len() <= 240, "{} lines", lines.len());
    let dropped = lines
        .iter()
        .find(|l| l.contains(" older refusals dropped"))
        .and_then(|l| l.split(' ').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no dropped count: {}", tail(&log.stdout)));
    assert!(dropped > 5_000, "{dropped}");
    let hosts = lines
        .iter()
        .find(|l| l.trim_start().starts_with("hosts = ["))
        .expect("a hosts line");
    assert_eq!(
        hosts.matches("\", \"").count(),
        20,
        "the current name and 20 refused: {hosts}"
    );
    assert!(
        log.stdout.contains("more refused names not listed"),
        "{}",
        tail(&log.stdout)
    );

    // Nothing lost without a count: what is kept and what was dropped add
    // up to every query the gate answered.
    let j = env
        .lz(&ws, &["net", "log", "--profile", "flood", "--json"])
        .config_home(&cfg)
        .run();
    assert_eq!(j.code, 0, "{}", j.stderr);
    let kept: u64 = j
        .stdout
        .split("\"count\":\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let jd = num_after(&j.stdout, "\"refusals\":\"").expect("dropped in --json");
    assert_eq!(jd, dropped);
    assert!(
        kept + jd <= sent as u64 && kept + jd > FLOOD as u64,
        "kept {kept} + dropped {jd}, {sent} queries sent"
    );
    eprintln!("flood: {sent} queries, {kept} kept, {jd} dropped, longest net log line {longest} bytes");
}
