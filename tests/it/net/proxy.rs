//! Behind a TLS-intercepting proxy (issue 48, problem 7): the documented
//! `claude` profile of docs/agents.md, with the proxy set up as its
//! section "Corporate CAs and proxies" says (`pass_env` of the proxy
//! variables, the proxy at its port in `network.hosts`), reaches an HTTPS
//! registry through a company proxy only once its `ca_certs = "host"` line
//! is uncommented; and the proxy CA's private key never enters.
//!
//! The company network is two test hosts (`net::names::NameHost`, on
//! 198.19.0.0/16) joined by a link of their own: `proxy`, which is
//! `proxy.corp.example.test`, an explicit proxy (`CONNECT` on 8080), and
//! also intercepts transparently (on 443, where the network sends every
//! HTTPS connection: the test zone gives `registry.npmjs.test` its
//! address); and `registry`, the real `registry.npmjs.test` behind it,
//! with a certificate of the usual test CA that only the proxy checks.
//! The proxy ends every TLS connection with a certificate of "Example Corp
//! TLS Inspection CA" (its chain sent, as such proxies send it) and
//! forwards the request to the registry. The host trusts that CA the way a
//! developer's machine does without root: `SSL_CERT_FILE` names a bundle
//! (the system's and the company CA), next to which lies the CA's key.
//!
//! Test safety: no packet leaves this machine. The Domains resolve through
//! the registry host's resolver only (`network.dns`), which knows the test
//! names; the proxy forwards to the registry over their own link and to
//! nothing else.

use std::path::Path;
use std::process::Command;

use crate::fixtures::ip;
use crate::harness::{Env, Run, GLOBAL};
use crate::net::names::NameHost;
use crate::require_env;

/// The proxy as `HTTPS_PROXY` names it (the test name of docs/agents.md's
/// `proxy.corp.example.com:8080`).
const PROXY_URL: &str = "http://proxy.corp.example.test:8080";
/// The registry's name (docs/agents.md lists `registry.npmjs.org`).
const REGISTRY: &str = "registry.npmjs.test";
/// The registry host's address on the link to the proxy (a link of two
/// test namespaces only: nothing else routes there).
const LINK_REGISTRY: &str = "198.18.255.254";
const LINK_PROXY: &str = "198.18.255.253";

/// The registry: DNS for the test zone on its address, and HTTPS on the
/// link to the proxy that answers every request with `body` (a packument
/// whose description is the test's marker). Every request is marked.
const REGISTRY_SERVER: &str = concat!(
    r#"
import socket, ssl, sys, threading
ip, marker, zone, body, pem, key, link = sys.argv[1:8]
zone = dict(kv.split("=") for kv in zone.split(",") if kv)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(pem, key)
lock = threading.Lock()
def mark(s):
    with lock, open(marker, "a") as f:
        f.write(s + "\n")
def handle(c):
    try:
        c = ctx.wrap_socket(c, server_side=True)
        f = c.makefile("rb")
        line, ua = f.readline().decode(errors="replace").strip(), ""
        while True:
            l = f.readline()
            if l in (b"\r\n", b"\n", b""):
                break
            k, _, v = l.decode(errors="replace").partition(":")
            if k.strip().lower() == "user-agent":
                ua = v.strip()
        mark("REQ %s | %s" % (line, ua))
        b = body.encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(b) + b)
    except Exception as e:
        mark("ERR %s %s" % (type(e).__name__, e))
    finally:
        c.close()
def https():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((link, 443))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()
"#,
    crate::py_zone_dns!(),
    r#"        else:
            u.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
threading.Thread(target=https, daemon=True).start()
threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#
);

/// The company proxy: `CONNECT` on 8080 (explicit) and TLS on 443
/// (transparent), both ended with the company CA's certificate for the
/// one name it serves (`name`), the request then sent to the registry at
/// `upstream` (verified against the test CA) and its answer relayed.
/// Marks every connection, `CONNECT` line, failed handshake (the client
/// refusing the certificate) and forwarded request.
const PROXY_SERVER: &str = r#"
import socket, ssl, sys, threading
ip, marker, upstream, test_ca, chain, key, name = sys.argv[1:8]
srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
srv.load_cert_chain(chain, key)
def sni(sock, server_name, ctx):
    sock.lz_sni = server_name
srv.sni_callback = sni
client = ssl.create_default_context(cafile=test_ca)
lock = threading.Lock()
def mark(s):
    with lock, open(marker, "a") as f:
        f.write(s + "\n")
def forward(t, mode, host):
    f = t.makefile("rb")
    head = b""
    while True:
        l = f.readline()
        head += l
        if l in (b"\r\n", b"\n", b""):
            break
    if not head.strip():
        # A client that refused the certificate after the handshake
        # (Node checks it then) closes without a request.
        mark("NOREQ %s %s" % (mode, host))
        return
    lines = head.decode(errors="replace").split("\r\n")
    ua = next((l.split(":", 1)[1].strip() for l in lines if l.lower().startswith("user-agent:")), "")
    mark("FWD %s %s %s | %s" % (mode, host, lines[0], ua))
    if host != name:
        t.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return
    u = client.wrap_socket(socket.create_connection((upstream, 443), timeout=20), server_hostname=host)
    u.sendall(head)
    try:
        while True:
            d = u.recv(65536)
            if not d:
                break
            t.sendall(d)
    except (ssl.SSLError, OSError):
        pass
    u.close()
def explicit(c):
    head = b""
    while not head.endswith(b"\r\n\r\n") and len(head) < 8192:
        d = c.recv(1)
        if not d:
            return
        head += d
    line = head.split(b"\r\n")[0].decode(errors="replace")
    mark("CONNECT-LINE %s" % line)
    parts = line.split()
    if len(parts) < 2 or parts[0] != "CONNECT":
        c.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        return
    host = parts[1].rsplit(":", 1)[0]
    c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    try:
        t = srv.wrap_socket(c, server_side=True)
    except (ssl.SSLError, OSError) as e:
        mark("TLS-FAIL explicit %s %s" % (host, e))
        return
    forward(t, "explicit", host)
def transparent(c):
    try:
        t = srv.wrap_socket(c, server_side=True)
    except (ssl.SSLError, OSError) as e:
        mark("TLS-FAIL transparent %s" % e)
        return
    forward(t, "transparent", getattr(t, "lz_sni", None) or "")
def serve(port, fn):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((ip, port))
    s.listen(64)
    while True:
        c, _ = s.accept()
        mark("CONN %d" % port)
        def run(c=c):
            try:
                fn(c)
            except Exception as e:
                mark("ERR %s %s" % (type(e).__name__, e))
            finally:
                c.close()
        threading.Thread(target=run, daemon=True).start()
threading.Thread(target=serve, args=(8080, explicit), daemon=True).start()
threading.Thread(target=serve, args=(443, transparent), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

/// Inside (as root, so that every file is read): `$1` and `$2` are a line
/// of the company CA's key and of the proxy's key (PEM), `$3` a line of
/// the company CA's certificate. curl and npm ask the registry through
/// the proxy (`HTTPS_PROXY`, as passed) and directly (intercepted on the
/// way); with `$4` = `scan`, every file and process environment is then
/// searched for the keys. Each line is `NAME: RESULT`.
const INSIDE: &str = r#"
U=https://registry.npmjs.test/lz-corp-probe
npmv() {
  npm view lz-corp-probe description --registry=https://registry.npmjs.test/ --fetch-retries=0 \
    --fetch-timeout=30000 --no-update-notifier --prefer-online --cache="/tmp/npm-cache-$1" 2>&1 \
    | grep -v 'complete log of this run' | tr '\n' ' '
}
echo "proxy-env: ${HTTPS_PROXY:-unset}"
echo "curl-proxy: $(curl -sS --max-time 30 "$U?via=curl-proxy" 2>&1 | tr '\n' ' ')"
echo "npm-proxy: $(npmv proxy)"
echo "curl-transparent: $(curl -sS --max-time 30 --noproxy '*' "$U?via=curl-transparent" 2>&1 | tr '\n' ' ')"
echo "npm-transparent: $(unset HTTPS_PROXY https_proxy HTTP_PROXY http_proxy; npmv transparent)"
echo "corp-ca: $(grep -cF -e "$3" /etc/ssl/certs/ca-certificates.crt)"
[ "$4" = scan ] || exit 0
echo "keys: $(grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e "$1" -e "$2" / 2>/dev/null | head -5 | tr '\n' ' ')"
n=0
for f in /proc/[0-9]*/environ; do
  tr '\0' '\n' < "$f" 2>/dev/null | grep -qF -e "$1" -e "$2" && n=$((n+1))
done
echo "environ: $n"
"#;

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    let p = format!("{name}: ");
    out.lines().find_map(|l| l.strip_prefix(&p)).unwrap_or("")
}

/// Makes, in `dir`, the test CA (`test-ca`) and the company's (`corp-ca`),
/// the registry's certificate from the first (`registry`) and the
/// proxy's for the same name from the second (`intercept`, with its chain
/// in `intercept.chain`); whether openssl managed.
fn make_pki(dir: &Path) -> bool {
    let sh = format!(
        r#"set -e; cd {d}
ca() {{
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key -out $1.pem -days 2 \
    -subj "/O=$3/CN=$2" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}}
leaf() {{
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $1.key -out $1.csr -subj "/CN=$3" 2>/dev/null
  printf 'subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n' $3 > $1.ext
  openssl x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial -out $1.pem -days 2 -extfile $1.ext 2>/dev/null
  cat $1.pem $2.pem > $1.chain
}}
ca test-ca lazaret-test-ca Lazaret
ca corp-ca "Example Corp TLS Inspection CA" "Example Corp"
leaf registry test-ca {REGISTRY}
leaf intercept corp-ca {REGISTRY}
"#,
        d = dir.display()
    );
    Command::new("sh").args(["-c", &sh]).status().is_ok_and(|s| s.success())
}

/// The second base64 line of a PEM file: bytes of that key or certificate
/// alone (the first line of a key starts with a prefix all keys share).
fn pem_line(p: &Path) -> String {
    let text = std::fs::read_to_string(p).unwrap();
    let body: Vec<&str> = text.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(body.len() >= 2 && body[1].len() >= 40, "{}: {text}", p.display());
    body[1].to_string()
}

/// A link of their own between the proxy and the registry host: the
/// proxy at [`LINK_PROXY`], the registry at [`LINK_REGISTRY`]. It goes
/// with their namespaces.
fn link(proxy: &NameHost, registry: &NameHost, k: u32) {
    let (a, b) = (format!("lzpa{k}"), format!("lzpb{k}"));
    assert!(ip(&[
        "link",
        "add",
        &a,
        "netns",
        &proxy.ns,
        "type",
        "veth",
        "peer",
        "name",
        &b,
        "netns",
        &registry.ns
    ]));
    for (ns, dev, addr) in [(&proxy.ns, &a, LINK_PROXY), (&registry.ns, &b, LINK_REGISTRY)] {
        assert!(ip(&["-n", ns, "addr", "add", &format!("{addr}/30"), "dev", dev]));
        assert!(ip(&["-n", ns, "link", "set", dev, "up"]));
    }
}

/// docs/agents.md's "Corporate CAs and proxies" example, its lines as the
/// test applies them: (`pass_env` line, the proxy's `hosts` entry as a
/// test name). The example must uncomment `ca_certs = "host"`.
fn documented_proxy_lines() -> (String, String) {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/agents.md")).unwrap();
    let at = doc
        .find("### Corporate CAs and proxies")
        .expect("docs/agents.md has \"Corporate CAs and proxies\"");
    let block = &doc[at..];
    let start = block.find("```toml").expect("its example") + "```toml".len();
    let block = &block[start..start + block[start..].find("```").unwrap()];
    assert!(
        block.lines().any(|l| l.trim_start().starts_with("ca_certs = \"host\"")),
        "{block}"
    );
    let pass = block
        .lines()
        .find(|l| l.starts_with("pass_env = ["))
        .unwrap_or_else(|| panic!("no pass_env in {block}"));
    assert!(pass.contains("\"HTTPS_PROXY\""), "{pass}");
    let host = block
        .lines()
        .find(|l| l.contains(":8080\""))
        .unwrap_or_else(|| panic!("no proxy host in {block}"));
    let host = crate::agents::documented::test_names(host);
    assert!(
        host.contains(&format!("\"{}\"", PROXY_URL.trim_start_matches("http://"))),
        "{host}"
    );
    (pass.to_string(), host)
}

/// The config: the fixture's images and docs/agents.md's `claude` and
/// `codex` profiles as written (crate::limits::leftovers), their names
/// made test names, `network.dns` the test zone's resolver, and the proxy
/// lines of [`documented_proxy_lines`] in `claude`; with `host_ca`, the
/// profile's commented `ca_certs = "host"` line uncommented.
fn config(env: &Env, creds: &Path, resolver: &str, host_ca: bool) -> String {
    let text =
        crate::limits::leftovers::documented_agent_config(env, creds).replace("@CREDS@", &creds.display().to_string());
    let (pass, host) = documented_proxy_lines();
    let at = text.find("[profiles.claude]").expect("[profiles.claude]");
    let mut out = text[..at].to_string();
    let (mut in_claude, mut uncommented) = (false, false);
    for l in text[at..].lines() {
        let t = l.trim_start();
        if t.starts_with('[') {
            in_claude = t.starts_with("[profiles.claude]") || t.starts_with("[profiles.claude.network]");
        }
        if host_ca && in_claude && t.starts_with("# ca_certs = \"host\"") {
            out.push_str(l.replacen("# ca_certs", "ca_certs", 1).as_str());
            uncommented = true;
        } else if t.starts_with('#') || t.starts_with('[') {
            out.push_str(l);
        } else {
            out.push_str(&crate::agents::documented::test_names(l));
        }
        out.push('\n');
        if t.starts_with("[profiles.claude]") {
            out.push_str(&pass);
            out.push('\n');
        }
        if t.starts_with("[profiles.claude.network]") {
            out.push_str(&format!("dns = [\"{resolver}\"]\n"));
        }
        if in_claude && t.starts_with("hosts = [") {
            out.push_str(&host);
            out.push('\n');
        }
    }
    assert_eq!(uncommented, host_ca, "the claude profile's ca_certs line: {out}");
    for want in [
        "\"registry.npmjs.test\"",
        "\"proxy.corp.example.test:8080\"",
        "# ca_certs = \"host\"",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    out
}

#[test]
fn behind_an_intercepting_proxy_https_works_with_ca_certs_host_only_and_no_key_enters() {
    let env = require_env!();
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let _g = GLOBAL.read();
    let base = env.dir("corp-proxy");
    let pki = base.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    if !make_pki(&pki) {
        if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
            panic!("openssl cannot make the test CAs and LAZARET_MUST_WORK=1");
        }
        eprintln!("skipping: openssl cannot make the test CAs");
        return;
    }
    // The host's trust, as a developer's machine has it without root: a
    // bundle of the system's roots and the company CA that SSL_CERT_FILE
    // names, the CA's key beside it.
    let trust = base.join("trust");
    let system = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    let corp_pem = std::fs::read_to_string(pki.join("corp-ca.pem")).unwrap();
    let bundle = trust.join("ca-bundle.crt");
    env.write(&bundle, &format!("{system}{corp_pem}"));
    env.write(
        &trust.join("corp-ca.key"),
        &std::fs::read_to_string(pki.join("corp-ca.key")).unwrap(),
    );
    let (corp_key, proxy_key, corp_cert) = (
        pem_line(&pki.join("corp-ca.key")),
        pem_line(&pki.join("intercept.key")),
        pem_line(&pki.join("corp-ca.pem")),
    );
    let mut rnd = [0u8; 8];
    openssl::rand::rand_bytes(&mut rnd).unwrap();
    let marker: String = format!(
        "from-the-registry-{}",
        rnd.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let body = format!(
        r#"{{"_id":"lz-corp-probe","name":"lz-corp-probe","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"lz-corp-probe","version":"1.0.0","description":"{marker}","dist":{{"tarball":"https://{REGISTRY}/lz-corp-probe/-/lz-corp-probe-1.0.0.tgz","shasum":"0000000000000000000000000000000000000000"}}}}}},"time":{{"created":"2026-01-01T00:00:00.000Z","modified":"2026-01-01T00:00:00.000Z","1.0.0":"2026-01-01T00:00:00.000Z"}},"description":"{marker}"}}"#
    );

    let k = (std::process::id() * 4 + 24) % 16000;
    let mut registry = NameHost::new(k);
    let mut proxy = NameHost::new(k + 1);
    link(&proxy, &registry, k);
    let p = |n: &str| pki.join(n).display().to_string();
    // The network intercepts: the registry's name leads to the proxy.
    let zone = format!("{REGISTRY}={x},proxy.corp.example.test={x}", x = proxy.ip);
    let args = [
        registry.ip.clone(),
        p("marker-registry"),
        zone,
        body,
        p("registry.pem"),
        p("registry.key"),
        LINK_REGISTRY.to_string(),
    ];
    registry.serve_with(REGISTRY_SERVER, pki.join("marker-registry"), &args);
    let args = [
        proxy.ip.clone(),
        p("marker-proxy"),
        LINK_REGISTRY.to_string(),
        p("test-ca.pem"),
        p("intercept.chain"),
        p("intercept.key"),
        REGISTRY.to_string(),
    ];
    proxy.serve_with(PROXY_SERVER, pki.join("marker-proxy"), &args);

    let creds = base.join("creds");
    std::fs::create_dir_all(&creds).unwrap();
    env.chown(&creds);
    let run = |host_ca: bool| -> Run {
        let name = if host_ca { "with-host-ca" } else { "as-documented" };
        let (home, ws) = env.base_and_workspace(&format!("corp-proxy-{name}"));
        let cfg = env.write_config(&home, &config(env, &creds, &registry.ip, host_ca));
        let _ = std::fs::remove_file(&proxy.marker);
        let _ = std::fs::remove_file(&registry.marker);
        let t = std::time::Instant::now();
        let r = env
            .lz(
                &ws,
                &[
                    "run",
                    "--root",
                    "-p",
                    "claude",
                    "--",
                    "bash",
                    "-c",
                    INSIDE,
                    "inside",
                    &corp_key,
                    &proxy_key,
                    &corp_cert,
                    if host_ca { "scan" } else { "" },
                ],
            )
            .config_home(&cfg)
            .env("SSL_CERT_FILE", &bundle.display().to_string())
            .env("HTTPS_PROXY", PROXY_URL)
            .env("ANTHROPIC_API_KEY", "sk-ant-it-corp-proxy")
            .env("OPENAI_API_KEY", "sk-openai-it-corp-proxy")
            .run();
        eprintln!("{name}: {:?}: {r:?}", t.elapsed());
        assert_eq!(r.code, 0, "{name}: {r:?}");
        r
    };

    // (1) The documented profile as written: every request reaches the
    // proxy, which the client then refuses for its certificate; the
    // registry never sees one.
    let r = run(false);
    let out = &r.stdout;
    let (marked_proxy, marked_registry) = (proxy.marked(), registry.marked());
    assert_eq!(line(out, "proxy-env"), PROXY_URL, "pass_env: {r:?}");
    for c in ["curl-proxy", "curl-transparent"] {
        let got = line(out, c);
        assert!(
            got.contains("SSL certificate problem: self-signed certificate in certificate chain")
                && !got.contains(&marker),
            "{c}: {r:?}"
        );
    }
    for c in ["npm-proxy", "npm-transparent"] {
        let got = line(out, c);
        assert!(
            got.contains("SELF_SIGNED_CERT_IN_CHAIN") && !got.contains(&marker),
            "{c}: {r:?}"
        );
    }
    assert_eq!(line(out, "corp-ca"), "0", "{r:?}");
    assert!(
        marked_proxy
            .matches(&format!("CONNECT-LINE CONNECT {REGISTRY}:443 "))
            .count()
            >= 2,
        "curl and npm each asked the proxy for a tunnel: {marked_proxy}"
    );
    assert!(
        marked_proxy.contains("TLS-FAIL explicit") && marked_proxy.contains("TLS-FAIL transparent"),
        "{marked_proxy}"
    );
    assert!(!marked_proxy.contains("FWD "), "{marked_proxy}");
    assert!(!marked_registry.contains("REQ "), "{marked_registry}");

    // (2) `ca_certs = "host"` uncommented: the same requests get the
    // registry's answer, through the proxy both ways.
    let r = run(true);
    let out = &r.stdout;
    let (marked_proxy, marked_registry) = (proxy.marked(), registry.marked());
    assert_eq!(line(out, "proxy-env"), PROXY_URL, "{r:?}");
    for c in ["curl-proxy", "curl-transparent"] {
        assert!(
            line(out, c).contains(&format!("\"description\":\"{marker}\"")),
            "{c}: {r:?}"
        );
    }
    for c in ["npm-proxy", "npm-transparent"] {
        assert_eq!(line(out, c).trim(), marker, "{c}: {r:?}");
    }
    assert_eq!(line(out, "corp-ca"), "1", "the host's bundle is inside: {r:?}");
    for (mode, via) in [("explicit", "curl-proxy"), ("transparent", "curl-transparent")] {
        assert!(
            marked_proxy.contains(&format!(
                "FWD {mode} {REGISTRY} GET /lz-corp-probe?via={via} HTTP/1.1 | curl/"
            )),
            "{mode}: {marked_proxy}"
        );
        assert!(
            marked_proxy
                .lines()
                .any(|l| l.starts_with(&format!("FWD {mode} {REGISTRY} GET /lz-corp-probe HTTP/1.1 | npm/"))),
            "{mode} npm: {marked_proxy}"
        );
        assert!(
            marked_registry.contains(&format!("REQ GET /lz-corp-probe?via={via} HTTP/1.1 | curl/")),
            "{marked_registry}"
        );
    }
    assert!(
        !marked_proxy.contains("TLS-FAIL") && !marked_proxy.contains("NOREQ"),
        "{marked_proxy}"
    );
    assert!(
        marked_registry.contains("REQ GET /lz-corp-probe HTTP/1.1 | npm/"),
        "{marked_registry}"
    );
    // (3) Only the certificate came in: neither the company CA's key
    // (beside the bundle on the host) nor the proxy's is in any file or
    // process environment inside (searched as root).
    assert_eq!(line(out, "keys"), "", "{r:?}");
    assert_eq!(line(out, "environ"), "0", "{r:?}");
    assert!(out.contains("environ: "), "the search ran: {r:?}");
}
