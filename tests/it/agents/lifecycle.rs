//! Agent-ready: lifecycle commands (ps header and ages, stop by ID prefix
//! and --all, rm, exec by ID), host environment by name, port forwards and
//! housekeeping.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fixtures::lower_artifacts;
use crate::harness::*;
use crate::require_env;

fn domain_root(env: &Env, id: &str) -> PathBuf {
    env.home.join(".local/share/lazaret/domains").join(id)
}

/// Waits for a background CLI and returns its stdout.
trait WaitOut {
    fn wait_with_output_ref(self) -> String;
}

impl WaitOut for std::process::Child {
    fn wait_with_output_ref(self) -> String {
        let o = self.wait_with_output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

fn running(env: &Env, ws: &Path, id: &str) -> bool {
    env.ps_json(ws).contains(id)
}

/// `ps` shows a header and ages; `stop ID` works with the
/// prefix `ps` prints; `stop --all` stops every Domain; `rm` deletes a
/// stopped Domain's state and refuses a running one; `exec ID` joins a
/// running Domain from anywhere.
/// `lazaret run --profile PROFILE --publish PUBLISH -- ARGV` in `ws`.
fn lz_published<'a>(env: &'a Env, ws: &Path, profile: &str, publish: &str, argv: &[&str]) -> Lz<'a> {
    let mut args = vec!["run", "--profile", profile, "--publish", publish, "--"];
    args.extend_from_slice(argv);
    env.lz(ws, &args)
}

#[test]
fn lifecycle_ps_stop_rm_exec() {
    let env = require_env!();
    // `stop --all` stops every Domain of the user: nothing else may run.
    let _g = GLOBAL.write();
    let a = env.dir("lc-a");
    let b = env.dir("lc-b");
    let (ida, idb) = (env.domain_id("default", &a), env.domain_id("default", &b));

    // Some persistent state for A, then A stops by itself.
    let r = env.run_sh(&a, "echo kept > /root/lc-marker");
    assert_eq!(r.code, 0, "{r:?}");
    let root_a = domain_root(env, &ida);
    assert!(root_a.join("store.sqlite").exists(), "A has state");

    let _sa = env.lz(&a, &["run", "--", "sleep", "100"]).spawn_bg();
    let _sb = env.lz(&b, &["run", "--", "sleep", "100"]).spawn_bg();
    assert!(eventually(Duration::from_secs(60), || running(env, &a, &ida)
        && running(env, &b, &idb)));

    let ps = env.lz(&a, &["ps"]).run();
    assert_eq!(ps.code, 0, "{ps:?}");
    let head = ps.stdout.lines().next().unwrap_or("");
    for col in [
        "DOMAIN",
        "PROFILE",
        "AGE",
        "SESSIONS",
        "ESCALATIONS",
        "PORTS",
        "EGRESS",
        "WORKSPACE",
    ] {
        assert!(head.contains(col), "header lacks {col}: {ps:?}");
    }
    let row_a = ps
        .stdout
        .lines()
        .find(|l| l.starts_with(&ida[..12]))
        .expect("row for A");
    assert!(!row_a.contains(&ida), "ps prints the ID prefix: {row_a}");
    assert!(row_a.contains("sleep") && row_a.contains("default"), "{row_a}");
    let age = row_a.split_whitespace().nth(3).unwrap_or("");
    assert!(
        age.ends_with('s') || age.ends_with('m'),
        "age column: {age:?} in {row_a}"
    );
    assert!(ps.stdout.contains(&idb[..12]), "{ps:?}");
    let json = env.ps_json(&a);
    assert!(
        json_number(&json, &ida, "started_at").unwrap_or(0) > 1_600_000_000,
        "{json}"
    );
    assert_eq!(json_number(&json, &ida, "pending_escalations"), Some(0), "{json}");

    // rm refuses a running Domain and leaves its state alone.
    let r = env.lz(&a, &["rm", "--yes"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("running"), "{r:?}");
    assert!(root_a.join("store.sqlite").exists());

    // exec by ID prefix, from a directory that is no workspace.
    env.write(&a.join("hello.txt"), "hi from the workspace");
    let r = env
        .lz(&env.home, &["exec", &ida[..8], "--", "cat", "/workspace/hello.txt"])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("hi from the workspace"), "{r:?}");
    let r = env.lz(&env.home, &["exec", "ffffffffffff", "--", "true"]).run();
    assert_eq!(r.code, 2, "unknown ID: {r:?}");

    // stop by the prefix ps prints.
    let r = env.lz(&env.home, &["stop", &ida[..12]]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("stopped Domain {ida}")), "{r:?}");
    assert!(eventually(Duration::from_secs(10), || !running(env, &a, &ida)));
    assert!(running(env, &b, &idb), "B still runs");

    // rm of the stopped Domain: shows what goes, then deletes it.
    let r = env.lz(&a, &["rm"]).run();
    assert_eq!(r.code, 2, "no --yes and no terminal: {r:?}");
    assert!(root_a.exists());
    let r = env.lz(&a, &["rm", "--yes"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("/root") && r.stderr.contains("store"), "{r:?}");
    assert!(!root_a.exists(), "Domain Root removed");
    let list = env.lz(&a, &["state", "list"]).run();
    assert!(!list.stdout.contains(&ida), "{list:?}");
    // The workspace is untouched.
    assert!(a.join("hello.txt").exists());

    // A new run starts from scratch: the marker is gone.
    let r = env.run_sh(&a, "test -e /root/lc-marker && echo present || echo absent");
    assert!(r.stdout.contains("absent"), "{r:?}");

    // stop --all.
    let r = env.lz(&env.home, &["stop", "--all"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("stopped Domain {idb}")), "{r:?}");
    let ps = env.lz(&a, &["ps"]).run();
    assert!(ps.stdout.contains("no running Domains"), "{ps:?}");
}

fn unique(tag: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}-{t:x}-{}", std::process::id())
}

/// `pass_env` and `-e` reach the session that asked (and no
/// other); the values are absent from every host process's argv but the
/// client's own literal `-e KEY=VALUE`, from the store and from
/// coordinator.log.
#[test]
fn host_env_by_name_reaches_only_its_session() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("hostenv", "[profiles.pe]\npass_env = [\"LZ_PASS_A\", \"LZ_UNSET_Z\"]\n");
    let id = env.domain_id("pe", &ws);
    let (va, vb, vc) = (unique("passA"), unique("flagB"), unique("litC"));
    let script = "echo A=$LZ_PASS_A; echo B=$LZ_FLAG_B; echo C=$LZ_LIT_C; echo Z=${LZ_UNSET_Z-unset}; \
                  echo done > /workspace/first-ready; sleep 8";
    let lit = format!("LZ_LIT_C={vc}");
    let first = env
        .lz(
            &ws,
            &[
                "run",
                "--profile",
                "pe",
                "-e",
                "LZ_FLAG_B",
                "-e",
                &lit,
                "--",
                "sh",
                "-c",
                script,
            ],
        )
        .config_home(&cfg)
        .env("LZ_PASS_A", &va)
        .env("LZ_FLAG_B", &vb)
        .spawn();
    assert!(eventually(Duration::from_secs(60), || ws.join("first-ready").exists()));

    // A second session in the same Domain asked for nothing: it sees nothing.
    let second = env
        .lz_in(&ws, "pe", &["sh", "-c", "echo A=$LZ_PASS_A B=$LZ_FLAG_B C=$LZ_LIT_C"])
        .config_home(&cfg)
        .run();
    assert_eq!(second.code, 0, "{second:?}");
    assert!(second.stdout.contains("A= B= C="), "{second:?}");

    // No host process carries a value in its argv, except the literal
    // `-e KEY=VALUE` on the client's own command line, which the user typed.
    let client_pid = first.id() as i32;
    for (pid, _, cmd) in processes() {
        assert!(!cmd.contains(&va) && !cmd.contains(&vb), "pid {pid}: {cmd}");
        if cmd.contains(&vc) {
            let is_client = pid == client_pid || cmd.starts_with("setpriv") || cmd.contains("lazaret run --profile pe");
            assert!(
                is_client && !cmd.contains("coordinator") && !cmd.contains("runsc"),
                "pid {pid}: {cmd}"
            );
        }
    }
    // Nor its environment: the coordinator starts with only what Lazaret
    // needs, so no long-lived helper (coordinator, supervisor, runsc,
    // slirp4netns, fuse-overlayfs) holds a passed value.
    let mut helpers = 0;
    for (pid, uids, cmd) in processes() {
        if pid == client_pid || !uids.contains(&env.uid) || cmd.contains("lazaret run") {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let environ = String::from_utf8_lossy(&environ);
        helpers += usize::from(cmd.contains("coordinator"));
        for v in [&va, &vb, &vc] {
            assert!(
                !environ.contains(v.as_str()),
                "pid {pid} ({cmd}) has a value in its environment"
            );
        }
    }
    assert!(helpers > 0, "the coordinator runs as the test user");
    let log = std::fs::read(env.runtime_root().join(&id).join("coordinator.log")).unwrap_or_default();
    let log = String::from_utf8_lossy(&log);
    assert!(!log.is_empty(), "the coordinator log exists while the Domain runs");
    for v in [&va, &vb, &vc] {
        assert!(!log.contains(v.as_str()), "coordinator.log: {log}");
    }
    let out = first.wait_with_output_ref();
    assert!(
        out.contains(&format!("A={va}")) && out.contains(&format!("B={vb}")),
        "{out}"
    );
    assert!(out.contains(&format!("C={vc}")) && out.contains("Z=unset"), "{out}");

    // The store: its file bytes (freed pages included) and a dump.
    let root = domain_root(env, &id);
    for f in ["store.sqlite", "store.sqlite-wal"] {
        let bytes = std::fs::read(root.join(f)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        for v in [&va, &vb, &vc] {
            assert!(!text.contains(v.as_str()), "{f} holds a value");
        }
    }
    let dump = std::process::Command::new("sqlite3")
        .arg(root.join("store.sqlite"))
        .arg(".dump")
        .output();
    if let Ok(d) = dump {
        let d = String::from_utf8_lossy(&d.stdout);
        assert!(d.contains("CREATE TABLE"), "{d}");
        for v in [&va, &vb, &vc] {
            assert!(!d.contains(v.as_str()), "store dump holds a value");
        }
    }

    // Bad input is exit 2 and names the flag.
    let r = env
        .lz(
            &ws,
            &["run", "--profile", "pe", "-e", "LZ_NOT_SET_ANYWHERE", "--", "true"],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("LZ_NOT_SET_ANYWHERE"), "{r:?}");
}

/// A free TCP port on 127.0.0.1 at or above `from`.
fn free_port(from: u16) -> u16 {
    (from..from + 500)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok() && !listening(*p).iter().any(|_| true))
        .expect("a free port")
}

/// Local addresses (hex, as in /proc/net/tcp) listening on `port`.
fn listening(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for l in text.lines().skip(1) {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.len() > 3 && cols[3] == "0A" {
                if let Some((addr, p)) = cols[1].split_once(':') {
                    if u16::from_str_radix(p, 16) == Ok(port) {
                        out.push(addr.to_string());
                    }
                }
            }
        }
    }
    out
}

fn http_get(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n");
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r
}

/// A tiny HTTP server on guest port 8000 (the default image has no
/// http.server): answers `hello-guest`.
const GUEST_SERVER: &str = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000)); s.listen(5)
open("/workspace/listening", "w").write("1")
while True:
    c, a = s.accept(); c.recv(4096)
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\nhello-guest\n"); c.close()
"#;

/// Connects to each ADDR PORT pair (5 s each), prints `ADDR ok` or
/// `ADDR err ERRNO`.
const PROBE: &str = r#"
import socket, sys
a = sys.argv[1:]
for i in range(0, len(a), 2):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((a[i], int(a[i + 1]))); print(a[i], "ok")
    except OSError as e:
        print(a[i], "err", e.errno)
    s.close()
"#;

/// A server on guest port 8000 answers on host loopback
/// through a profile `ports` entry and `--publish`; nothing listens on a
/// non-loopback host address; the forwards are gone after teardown.
#[test]
fn ports_forward_host_loopback_into_the_domain() {
    let (env, _g) = require_env!(shared);
    let p1 = free_port(18000);
    let p2 = free_port(p1 + 1);
    let (ws, cfg) = env.workspace_with_config("ports", &format!("[profiles.web]\nports = [\"{p1}:8000\"]\n"));
    let id = env.domain_id("web", &ws);
    env.write(&ws.join("srv.py"), GUEST_SERVER);
    let publish = format!("{p2}:8000");
    let _server = lz_published(env, &ws, "web", &publish, &["python3", "/workspace/srv.py"])
        .config_home(&cfg)
        .spawn_bg();
    assert!(eventually(Duration::from_secs(60), || ws.join("listening").exists()));
    for p in [p1, p2] {
        let r = http_get(p);
        assert!(r.contains("200 OK") && r.contains("hello-guest"), "port {p}: {r:?}");
        let addrs = listening(p);
        assert!(!addrs.is_empty(), "port {p} listens");
        assert!(
            addrs.iter().all(|a| a == "0100007F"),
            "port {p} listens on a non-loopback address: {addrs:?}"
        );
    }
    // The forwards are inbound only: from inside the same Domain the
    // router still refuses denied destinations (its tap0 side, the old
    // slirp guest address, a LAN, cloud metadata), and the forwarded host
    // port is not reachable through slirp4netns's gateway.
    let p1s = p1.to_string();
    let r = env
        .lz_in(
            &ws,
            "web",
            &[
                "python3",
                "-c",
                PROBE,
                "10.0.2.100",
                "8000",
                "192.168.0.1",
                "80",
                "169.254.169.254",
                "80",
                "10.0.2.2",
                &p1s,
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    for a in ["10.0.2.100", "192.168.0.1", "169.254.169.254"] {
        assert!(
            r.stdout.contains(&format!("{a} err 111\n")),
            "{a} must be refused: {r:?}"
        );
    }
    assert!(
        !r.stdout.contains("10.0.2.2 ok"),
        "host loopback reached through the gateway: {r:?}"
    );
    let ps = env.lz(&ws, &["ps"]).config_home(&cfg).run();
    assert!(ps.stdout.contains(&format!("127.0.0.1:{p1}:8000")), "{ps:?}");
    assert!(ps.stdout.contains(&format!("127.0.0.1:{p2}:8000")), "{ps:?}");
    let net = env
        .lz(&ws, &["net", "show", "--profile", "web", "--json"])
        .config_home(&cfg)
        .run();
    assert!(net.stdout.contains(&format!("\"127.0.0.1:{p2}:8000\"")), "{net:?}");

    // Joining with a forward the running Domain lacks adds it, as
    // `lazaret port add` does, and says so.
    let p3 = free_port(p2 + 1);
    let r = lz_published(env, &ws, "web", &format!("{p3}:8000"), &["true"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(&format!("added the forward 127.0.0.1:{p3}:8000")),
        "{r:?}"
    );
    let r = http_get(p3);
    assert!(r.contains("200 OK") && r.contains("hello-guest"), "port {p3}: {r:?}");

    let r = env.lz(&ws, &["stop", &id[..12]]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    for p in [p1, p2, p3] {
        assert!(
            eventually(Duration::from_secs(10), || listening(p).is_empty()),
            "port {p} still listens after teardown"
        );
        assert!(http_get(p).is_empty());
    }

    // Bad input: exit 2 naming the flag.
    let r = env.lz(&ws, &["run", "--publish", "99999:1", "--", "true"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--publish"), "{r:?}");
}

/// `image prune` after a run keeps the lower the default
/// profile uses; an interrupted build (SIGINT to its process group, as a
/// terminal's Ctrl-C) is listed by `image list` and removed by `prune`; a
/// stopped Domain leaves no runtime dir behind.
#[test]
fn housekeeping_keeps_used_lowers_and_prunes_interrupted_builds() {
    let env = require_env!();
    // `image prune` on the user's own lowers refuses while another
    // Domain prepares one: nothing else may be starting.
    let _g = GLOBAL.write();
    let ws = env.dir("hk");
    let id = env.domain_id("default", &ws);
    // What an earlier teardown may have left (runsc unlinked its last state
    // file after the dir was tried): an empty `runsc/` alone. Beside it, a
    // dir of the same shape plus a `lock` (a Domain starting) must stay.
    let fake = |tag: u32| {
        env.runtime_root()
            .join(format!("{:08x}{:012x}", tag, std::process::id()))
    };
    let (leftover, locked) = (fake(0xfeed), fake(0xbeef));
    for d in [&leftover, &locked] {
        let _ = std::fs::create_dir_all(env.runtime_root());
        std::fs::create_dir_all(d.join("runsc")).unwrap();
        env.chown(d);
        env.chown(&d.join("runsc"));
    }
    env.write(&locked.join("lock"), "");
    let r = env.lz(&ws, &["run", "--", "true"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    // The runtime dir of the stopped Domain is gone, and so is the leftover.
    let run = env.runtime_root().join(&id);
    assert!(
        eventually(Duration::from_secs(10), || !run.exists()),
        "runtime dir left: {:?}",
        std::fs::read_dir(&run).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
    assert!(
        eventually(Duration::from_secs(10), || !leftover.exists()),
        "an empty runtime dir of a stopped Domain was left"
    );
    assert!(
        locked.join("lock").exists() && locked.join("runsc").is_dir(),
        "a locked runtime dir was swept"
    );
    std::fs::remove_dir_all(&locked).unwrap();
    let lowers = env.home.join(".local/share/lazaret/lowers");
    let arts = || lower_artifacts(&lowers);
    let meta = std::fs::read_to_string(domain_root(env, &id).join("domain.json")).unwrap();
    let art = meta
        .split("\"artifact\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string();
    assert!(arts().contains(&art), "{art} in {:?}", arts());
    let r = env.lz(&ws, &["image", "prune", "--json"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        arts().contains(&art),
        "the default profile's lower survives prune: {r:?}"
    );
    assert!(!run.exists(), "prune leaves no runtime dir behind");
    let l = env.lz(&ws, &["image", "list", "--json"]).run();
    assert!(l.stdout.contains(r#""profiles":["default"]"#), "{l:?}");

    // An interrupted build, in a storage root of its own, against a mirror
    // on loopback that never answers (no packet leaves the machine).
    let data = env.dir("hk-data");
    let mirror = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mirror.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in mirror.incoming().flatten() {
            held.push(c);
        }
    });
    let mut cmd = env
        .lz(&ws, &["image", "build"])
        .env("XDG_DATA_HOME", &data.display().to_string())
        .env("LAZARET_IMAGE_MIRROR", &format!("http://127.0.0.1:{port}/debian"))
        .command();
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let images = data.join("lazaret/images");
    let build = || -> Option<String> {
        std::fs::read_dir(&images)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .find(|n| n.starts_with(".build-"))
    };
    assert!(
        eventually(Duration::from_secs(30), || build().is_some()),
        "no .build-* appeared"
    );
    std::thread::sleep(Duration::from_millis(500));
    let pg = child.id();
    let _ = std::process::Command::new("kill")
        .args(["-INT", "--", &format!("-{pg}")])
        .status();
    let st = wait_bounded(&mut child, Duration::from_secs(120), "the interrupted image build");
    assert!(!st.success());
    // Nothing of that build runs any more.
    assert!(eventually(Duration::from_secs(10), || processes_mentioning(
        &data.display().to_string()
    )
    .is_empty()));
    let name = build().expect("the interrupted build is left on disk");
    let with_data = |args: &[&str]| {
        env.lz(&ws, args)
            .env("XDG_DATA_HOME", &data.display().to_string())
            .run()
    };
    let l = with_data(&["image", "list"]);
    assert!(
        l.stdout.contains(&name) && l.stdout.contains("interrupted image build"),
        "{l:?}"
    );
    let l = with_data(&["image", "list", "--json"]);
    assert!(
        l.stdout.contains(r#""kind":"build""#) && l.stdout.contains(r#""removable":true"#),
        "{l:?}"
    );
    let p = with_data(&["image", "prune"]);
    assert_eq!(p.code, 0, "{p:?}");
    assert!(p.stdout.contains(&name), "{p:?}");
    assert!(build().is_none(), "pruned: {p:?}");
}

/// The `dev` image of the
/// committed recipe (tests/fixtures/agents, which scripts/test.sh builds
/// before the tests start; the build downloads from the Debian mirror, no
/// test does) has the tools agents need, and building the unchanged recipe
/// again keeps the digest. The rebuild runs against a mirror on a closed
/// loopback port, so it could not fetch anything even if it tried.
#[test]
fn the_dev_image_has_node_npm_python_and_curl() {
    let (env, _g) = require_env!(shared);
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let dev = env.home.join(".local/share/lazaret/images/dev/index.json");
    let (ws, _creds, cfg) = crate::agents::profiles::fixture(env, "devimg");
    let r = env
        .lz_in(
            &ws,
            "dev",
            &[
                "sh",
                "-c",
                "node --version && npm --version && python3 -c 'import json; print(\"json-ok\")' && curl --version",
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with('v') && r.stdout.contains("json-ok") && r.stdout.contains("curl "),
        "{r:?}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let before = std::fs::read_to_string(&dev).unwrap();
    // `image build dev` with config home `home` and no mirror to reach:
    // nothing to fetch, the same image.
    let rebuild_offline = |home: &Path| {
        let r = env
            .lz(&ws, &["image", "build", "dev"])
            .config_home(home)
            .env("LAZARET_IMAGE_MIRROR", &format!("http://127.0.0.1:{port}/debian"))
            .run();
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("up to date"), "{r:?}");
        assert_eq!(std::fs::read_to_string(&dev).unwrap(), before, "same digest");
    };
    rebuild_offline(&cfg);
    // The built-in `dev` recipe (no config file) is the same recipe.
    let empty = env.dir("devimg-nocfg");
    rebuild_offline(&empty);

    // python3 -m http.server on guest port 8000, published on the host.
    let hp = free_port(18000);
    let publish = format!("{hp}:8000");
    let _srv = lz_published(env, &ws, "dev", &publish, &["python3", "-m", "http.server", "8000"])
        .config_home(&cfg)
        .spawn_bg();
    assert!(
        eventually(Duration::from_secs(90), || http_get(hp).contains("200 OK")),
        "http.server answers on 127.0.0.1:{hp}"
    );
    assert!(listening(hp).iter().all(|a| a == "0100007F"), "{:?}", listening(hp));
    let id = env.domain_id("dev", &ws);
    let r = env.lz(&ws, &["stop", &id[..12]]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(eventually(Duration::from_secs(10), || listening(hp).is_empty()));
}
