//! Issue 52 acceptance 3: the sidecar egress gate of `lazaret export
//! kubernetes`, run as `lazaret gate --config FILE` with the exported
//! config and the init container's exported redirect rules in a network
//! namespace the test builds (standing in for the pod), lets only the
//! listed name through and swaps the bound secret there, with the test
//! hosts of the egress tests (`names::NameHost`, `secrets::SERVER`).
//! Also acceptance 4 on the CLI's own output: no exported file holds the
//! value. And the attacks of a process in the pod on the swap: `http://`
//! to the bound name (a downgrade, refused before the gate connects), an
//! SNI or a `Host` naming another host than the connection's, and the
//! gate's own port reached without a redirect; none gets the value.
//!
//! Test safety: no packet leaves this machine. The "pod" namespace has no
//! link but the two test hosts' veths (moved into it from the root
//! namespace) and a veth pair inside it for its default route (what is
//! routed there is dropped); the root namespace forwards nothing. The exported
//! config is used as written but for its `ca-dir` line (a directory of
//! the test's instead of the pod's `/run/lazaret-gate`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::GLOBAL;
use crate::require_env;

/// The gate's uid in the exported redirect rules (`export::kube::GATE_UID`).
const GATE_UID: u32 = 1337;

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().unwrap();
    assert!(st.success(), "ip {args:?}");
}

/// Removes the pod namespace, its resolv.conf and the gate on drop.
struct Pod {
    ns: String,
    gate: Option<std::process::Child>,
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut g) = self.gate.take() {
            let _ = g.kill();
            let _ = g.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.ns));
    }
}

const CLIENT: &str = r#"
import socket, ssl, sys
from http.client import HTTPResponse
ca, sentinel, other_ip, api_ip, gate_port = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=ca)
auth = b"Authorization: Bearer " + sentinel.encode() + b"\r\n"
def report(name, f):
    try:
        print("%s ok %s" % (name, f()), flush=True)
    except Exception as e:
        print("%s err %s" % (name, type(e).__name__), flush=True)
def exchange(s, host, path, headers):
    # The response as a client reads it: the gate may send a body whose
    # length the swap changed chunked.
    s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\nConnection: close\r\n" + headers + b"\r\n")
    r = HTTPResponse(s)
    r.begin()
    return r.status, r.read().decode(errors="replace").strip().replace(" ", "_")
def https(host, path, headers=b"", addr=None, sni=None, port=443):
    s = socket.create_connection((addr or host, port), timeout=5)
    s = ctx.wrap_socket(s, server_hostname=sni or host)
    status, body = exchange(s, host, path, headers)
    return body if status == 200 else "%d %s" % (status, body)
def http(addr, port, host, path, headers=b""):
    s = socket.create_connection((addr, port), timeout=5)
    return "%d %s" % exchange(s, host, path, headers)
def raw(addr, port):
    s = socket.create_connection((addr, port), timeout=3)
    s.sendall(b"ping")
    d = s.recv(100)
    if not d:
        raise EOFError()
    return d.decode(errors="replace").strip()
report("swap", lambda: https("api.test", b"/k", auth))
report("plain", lambda: https("api.test", b"/p"))
report("other-dns", lambda: socket.gethostbyname("other.test"))
report("other-ip", lambda: raw(other_ip, 443))
report("other-ip-80", lambda: raw(other_ip, 80))
report("api-ip", lambda: raw(api_ip, 443))
# Attacks on the swap: plain HTTP to the bound name, SNI and Host naming
# another host than the connection's, the gate's own port without a
# redirect.
report("downgrade", lambda: http("api.test", 80, "api.test", b"/d", auth))
report("sni-other", lambda: https("api.test", b"/s", auth, sni="other.test"))
report("host-other", lambda: https("other.test", b"/h", auth, addr="api.test", sni="api.test"))
report("direct-tls", lambda: https("api.test", b"/dt", auth, addr="127.0.0.1", port=int(gate_port)))
report("direct-http", lambda: http("127.0.0.1", int(gate_port), "api.test", b"/dh", auth))
"#;

#[test]
fn k8s_sidecar_gate_lets_only_listed_names_through_and_swaps_the_secret() {
    use lazaret::trust::TrustAnchor;
    let env = require_env!();
    let _g = GLOBAL.read();
    let tools = ["iptables-restore", "python3"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !tools {
        assert!(
            std::env::var("LAZARET_MUST_WORK").as_deref() != Ok("1"),
            "no iptables-restore or python3"
        );
        eprintln!("skipping: k8s sidecar gate: no iptables-restore or python3");
        return;
    }
    let base = env.dir("k8s-gate");
    // What the gate's uid reads and writes: outside the user's home.
    let shared = std::env::temp_dir().join(format!("lz-k8s-gate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&shared);
    let pki = shared.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&pki, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut rb = [0u8; 8];
    openssl::rand::rand_bytes(&mut rb).unwrap();
    let real = format!("sk-k8s-{}", rb.iter().map(|x| format!("{x:02x}")).collect::<String>());
    let key = base.join("api-key");
    env.write(&key, &format!("{real}\n"));

    // The export, by the CLI, as the user.
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.pod]\nimage = \"docker://registry.test/agent:1\"\n\
             [profiles.pod.network]\nhosts = [\"api.test\"]\n\
             [profiles.pod.secrets.API_KEY]\nfrom = \"file:{}\"\nhosts = [\"api.test\"]\n",
            key.display()
        ),
    );
    let out = base.join("out");
    let r = env
        .lz(
            &base,
            &[
                "export",
                "kubernetes",
                "-p",
                "pod",
                "--namespace",
                "it",
                "--out",
                out.to_str().unwrap(),
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains(&real) && !r.stderr.contains(&real), "{r:?}");
    let mut files = 0;
    for e in std::fs::read_dir(&out).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        assert!(!text.contains(&real), "an exported file holds the secret value");
        files += 1;
    }
    assert_eq!(files, 3, "lazaret-pod.yaml, .gate.conf, .redirect.rules");
    let conf = std::fs::read_to_string(out.join("lazaret-pod.gate.conf")).unwrap();
    let sentinel = conf
        .split_whitespace()
        .find_map(|w| w.strip_prefix("sentinel="))
        .expect("the secret's sentinel")
        .to_string();
    let gate_port: u16 = conf
        .lines()
        .find_map(|l| l.strip_prefix("listen 127.0.0.1:"))
        .and_then(|p| p.parse().ok())
        .expect("the gate's listen line");
    let run = shared.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(GATE_UID), Some(GATE_UID)).unwrap();
    let conf = conf.replace("ca-dir /run/lazaret-gate\n", &format!("ca-dir {}\n", run.display()));
    let conf_file = shared.join("gate.conf");
    std::fs::write(&conf_file, &conf).unwrap();

    // The test hosts: their TLS certificates from a test CA, the DNS zone on api.
    let ca = TrustAnchor::new("lazaret-test-ca", 1, "it").unwrap();
    let leaf = |name: &str, host: &str| {
        let c = ca.issue_tls_server(host, 2).unwrap();
        std::fs::write(pki.join(format!("{name}.pem")), c.cert.to_pem().unwrap()).unwrap();
        std::fs::write(
            pki.join(format!("{name}.key")),
            c.key.private_key_to_pem_pkcs8().unwrap(),
        )
        .unwrap();
    };
    leaf("api", "api.test");
    leaf("other", "other.test");
    std::fs::write(pki.join("ca.pem"), ca.ca_cert_pem().unwrap()).unwrap();
    let k = (std::process::id() * 4 + 24) % 16000;
    let mut api = crate::net::names::NameHost::new(k);
    let mut other = crate::net::names::NameHost::new(k + 1);
    let zone = format!("api.test={},other.test={}", api.ip, other.ip);
    let p = |n: &str| pki.join(n).display().to_string();
    api.serve_with(
        super::secrets::SERVER,
        pki.join("marker-api"),
        &[
            api.ip.clone(),
            p("marker-api"),
            zone,
            real.clone(),
            format!("api.test={}", p("api")),
        ],
    );
    other.serve_with(
        super::secrets::SERVER,
        pki.join("marker-other"),
        &[
            other.ip.clone(),
            p("marker-other"),
            String::new(),
            real.clone(),
            format!("other.test={}", p("other")),
        ],
    );

    // The pod: the hosts' links moved in, a default route, the
    // resolver api's (as kube-dns would be), the exported redirect rules.
    let mut pod = Pod {
        ns: format!("lzpod-{}", std::process::id()),
        gate: None,
    };
    ip(&["netns", "add", &pod.ns]);
    ip(&["-n", &pod.ns, "link", "set", "lo", "up"]);
    for h in [&*api, &*other] {
        ip(&["link", "set", &h.link, "netns", &pod.ns]);
        ip(&[
            "-n",
            &pod.ns,
            "addr",
            "add",
            &format!("{}/30", h.host_side),
            "dev",
            &h.link,
        ]);
        ip(&["-n", &pod.ns, "link", "set", &h.link, "up"]);
    }
    // The default route a pod has, onto a veth pair whose both ends are
    // in the pod (the dummy driver is not on every kernel): what is
    // routed there meets no one (the pod forwards nothing).
    ip(&[
        "-n", &pod.ns, "link", "add", "lzd0", "type", "veth", "peer", "name", "lzd1",
    ]);
    ip(&["-n", &pod.ns, "link", "set", "lzd0", "up"]);
    ip(&["-n", &pod.ns, "link", "set", "lzd1", "up"]);
    ip(&["-n", &pod.ns, "route", "add", "default", "dev", "lzd0"]);
    std::fs::create_dir_all(format!("/etc/netns/{}", pod.ns)).unwrap();
    std::fs::write(
        format!("/etc/netns/{}/resolv.conf", pod.ns),
        format!("nameserver {}\n", api.ip),
    )
    .unwrap();
    let st = Command::new("ip")
        .args(["netns", "exec", &pod.ns, "iptables-restore"])
        .arg(out.join("lazaret-pod.redirect.rules"))
        .status()
        .unwrap();
    assert!(st.success(), "iptables-restore of the exported rules");

    // The gate, as its uid, the value from the variable the config names.
    let log = shared.join("gate.log");
    let gate = Command::new("ip")
        .args(["netns", "exec", &pod.ns, "setpriv"])
        .args([
            &format!("--reuid={GATE_UID}"),
            &format!("--regid={GATE_UID}"),
            "--clear-groups",
            "--",
        ])
        .arg("env")
        .arg(format!("LAZARET_SECRET_API_KEY={real}"))
        .arg(format!("LAZARET_TEST_UPSTREAM_CA={}", p("ca.pem")))
        .arg(env.bin.join("lazaret"))
        .args(["gate", "--config"])
        .arg(&conf_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    pod.gate = Some(gate);
    let bundle = run.join("ca-bundle.pem");
    let t = Instant::now();
    while !bundle.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        bundle.exists(),
        "the gate did not get ready: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let st = Command::new(env.bin.join("lazaret"))
        .args(["gate", "--ready"])
        .arg(&bundle)
        .status()
        .unwrap();
    assert!(st.success(), "gate --ready");

    // The agent: any uid but the gate's.
    let o = Command::new("ip")
        .args(["netns", "exec", &pod.ns, "setpriv"])
        .args([
            &format!("--reuid={}", env.uid),
            &format!("--regid={}", env.gid),
            "--clear-groups",
            "--",
        ])
        // The system's Python (root's PATH may name one the user cannot run).
        .args([python3(), "-c", CLIENT])
        .arg(run.join("ca.pem"))
        .args([&sentinel, &other.ip, &api.ip, &gate_port.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} line: {text}\n{}", String::from_utf8_lossy(&o.stderr)))
            .to_string()
    };
    let gate_log = std::fs::read_to_string(&log).unwrap_or_default();
    let ctx = format!("{text}\n--- gate\n{gate_log}\n--- api\n{}", api.marked());
    // The listed name, its secret swapped: the host got the value (in
    // the header as the agent spelled it), the agent only ever sees its
    // sentinel (the echo is swapped back).
    assert_eq!(line("swap"), format!("swap ok auth=Bearer_{sentinel}_key="), "{ctx}");
    let marked = api.marked();
    let k = marked
        .lines()
        .find(|l| l.starts_with("REQ 443 GET /k "))
        .unwrap_or_else(|| panic!("no /k request: {ctx}"));
    assert!(k.contains(&format!("Authorization: Bearer {real}")), "{ctx}");
    assert_eq!(line("plain"), "plain ok auth=_key=", "{ctx}");
    assert!(!text.contains(&real), "the value reached the agent: {ctx}");
    assert!(!marked.contains(&sentinel), "the sentinel reached the host: {ctx}");
    // Everything else is refused, by name and by address.
    assert_eq!(line("other-dns"), "other-dns err gaierror", "{ctx}");
    assert!(line("other-ip").starts_with("other-ip err"), "{ctx}");
    assert!(
        line("other-ip-80").starts_with("other-ip-80 err") || line("other-ip-80").contains("403"),
        "{ctx}"
    );
    assert!(line("api-ip").starts_with("api-ip err"), "{ctx}");
    // Attack: http:// for the bound name with its sentinel. Refused before
    // the gate connects, a 403 naming the secret (a downgrade).
    let d = line("downgrade");
    assert!(
        d.starts_with("downgrade ok 403 lazaret:") && d.contains("(downgrade:") && d.contains("API_KEY"),
        "{ctx}"
    );
    assert!(!marked.contains("CONN 80"), "{ctx}");
    // Attack: SNI naming an unlisted host on the listed name's address:
    // refused by name (a reset), nothing reaches either host.
    assert!(line("sni-other").starts_with("sni-other err"), "{ctx}");
    // Attack: SNI api.test, Host other.test: the swap refuses the request
    // (a 403 inside the TLS), nothing of it is sent.
    let h = line("host-other");
    assert!(
        h.starts_with("host-other ok 403 lazaret:") && h.contains("Host_header_naming_another_host"),
        "{ctx}"
    );
    // Attack: the gate's own port, not redirected: no destination to
    // decide by, refused (a reset), whatever name the client sends.
    assert!(line("direct-tls").starts_with("direct-tls err"), "{ctx}");
    assert!(line("direct-http").starts_with("direct-http err"), "{ctx}");
    // The marker: api.test got the two requests only; it saw three
    // connections (swap, plain, and host-other's, which the gate opened
    // before it read the request), never the one by address.
    let reqs: Vec<&str> = marked.lines().filter(|l| l.starts_with("REQ ")).collect();
    assert_eq!(reqs.len(), 2, "{ctx}");
    assert!(
        reqs.iter()
            .all(|l| l.starts_with("REQ 443 GET /k ") || l.starts_with("REQ 443 GET /p ")),
        "{ctx}"
    );
    assert_eq!(marked.matches("CONN 443").count(), 3, "{ctx}");
    // other.test saw nothing at all.
    assert_eq!(other.marked(), "", "other.test saw a connection: {ctx}");
    // The gate's log names the refusals, never the value.
    let egress = std::fs::read_to_string(run.join("egress.log")).unwrap_or_default();
    assert!(
        !egress.contains(&real) && !gate_log.contains(&real),
        "{ctx}\n--- egress\n{egress}"
    );
    for want in [
        "refused\tdns\tother.test\t53\tnot in network.hosts",
        "refused\ttcp\tapi.test\t80\tdowngrade: the sentinel of API_KEY",
        "refused\ttcp\tother.test\t443\tnot in network.hosts",
        "refused\ttcp\tapi.test\t443\trequest refused: a Host header",
        &format!("refused\ttcp\t127.0.0.1\t{gate_port}\tan address, not a listed name"),
    ] {
        assert!(
            egress.contains(want),
            "the egress log lacks {want:?}: {ctx}\n--- egress\n{egress}"
        );
    }
    drop(pod);
    let _ = std::fs::remove_dir_all(&base);
    let _ = std::fs::remove_dir_all(&shared);
}

/// `/usr/bin/python3` where it exists, else the one on PATH.
fn python3() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}
