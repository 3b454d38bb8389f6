//! Attacks on the network enforcement that go around the router's table
//! rather than through it: addresses the host owns without an interface
//! carrying them, and the odd destinations the router and slirp4netns
//! answer themselves (docs/network.md).
//!
//! Test safety: no packet leaves this machine. The only
//! destinations are a local ("AnyIP") route the test adds to the host and
//! checks is local before the sandbox starts, the host's own addresses,
//! the router's and slirp4netns's own addresses, and broadcast/unspecified
//! addresses the router keeps.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::harness::{self, Env};
use crate::require_env;

/// A TCP service on every address of the host (`0.0.0.0`, ephemeral port,
/// printed first): what a dev server or a published port looks like.
const ANY_SERVICE: &str = r#"
import socket
s = socket.socket()
s.bind(("0.0.0.0", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"host-service")
    c.close()
"#;

/// Connects to each address in argv[2:] on port argv[1] and prints
/// `tcp ADDR ok REPLY` or `tcp ADDR err ERRNO`; IPv6 forms too.
const CONNECT: &str = r#"
import socket, sys
port = int(sys.argv[1])
for a in sys.argv[2:]:
    fam = socket.AF_INET6 if ":" in a else socket.AF_INET
    s = socket.socket(fam)
    s.settimeout(1.5)
    try:
        s.connect((a, port))
        print("tcp %s ok %r" % (a, s.recv(32)), flush=True)
    except OSError as e:
        print("tcp %s err %s" % (a, e.errno), flush=True)
"#;

/// A local route of the host (`ip route add local P dev lo`): the kernel
/// delivers every address in P to the host itself, though no interface
/// carries one. Removed on drop.
struct AnyIp {
    prefix: String,
}

impl AnyIp {
    fn add(prefix: &str, probe: &str) -> Option<AnyIp> {
        let ok = Command::new("ip")
            .args(["route", "add", "local", prefix, "dev", "lo"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return None;
        }
        let r = AnyIp { prefix: prefix.into() };
        // Safety: the sandbox sends to `probe` only if the host keeps it.
        let o = Command::new("ip").args(["-o", "route", "get", probe]).output().ok()?;
        String::from_utf8_lossy(&o.stdout).starts_with("local ").then_some(r)
    }
}

impl Drop for AnyIp {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["route", "del", "local", &self.prefix, "dev", "lo"])
            .status();
    }
}

fn skip(why: &str) {
    if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
        panic!("{}: cannot run ({why}) and LAZARET_MUST_WORK=1", module_path!());
    }
    eprintln!("skipping: {}: {why}", module_path!());
}

fn start_service() -> (Child, String) {
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut srv = Command::new(python)
        .args(["-c", ANY_SERVICE])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut l = String::new();
    BufReader::new(srv.stdout.take().unwrap()).read_line(&mut l).unwrap();
    (srv, l.trim().to_string())
}

fn connect(env: &Env, ws: &Path, cfg: &Path, profile: &str, port: &str, addrs: &[&str]) -> harness::Run {
    let mut a = vec!["run", "--profile", profile, "--", "python3", "-c", CONNECT, port];
    a.extend_from_slice(addrs);
    env.lz(ws, &a).config_home(cfg).run()
}

/// The host owns a whole prefix through a local route ("AnyIP", used by
/// some proxies and load balancers): a service bound on `0.0.0.0` answers
/// on every address in it. Denying only interface addresses (getifaddrs)
/// left it open through slirp4netns; the policy must deny what the host's
/// kernel treats as local, and an exact allow opens it on purpose.
#[test]
fn a_hosts_anyip_local_route_is_denied_like_its_addresses() {
    let (env, _g) = require_env!(shared);
    // Inside 198.18.0.0/15 (allowed by default), where no test link is.
    let prefix = "198.19.254.240/28";
    let target = "198.19.254.249";
    let busy = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "to", prefix])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(true);
    if busy {
        skip(&format!("{prefix} is in use on this host"));
        return;
    }
    let Some(_route) = AnyIp::add(prefix, target) else {
        skip(&format!("cannot add a local route for {prefix}"));
        return;
    };
    let (mut srv, port) = start_service();
    let (cfg, ws) = env.config_and_workspace(
        "atknet-anyip",
        &format!("[profiles.open.network]\nallow = [\"{prefix}\"]\n"),
    );
    let denied = connect(env, &ws, &cfg, "default", &port, &[target]);
    let opened = connect(env, &ws, &cfg, "open", &port, &[target]);
    let shown = env.lz(&ws, &["net", "show"]).config_home(&cfg).run();
    let _ = srv.kill();
    let _ = srv.wait();
    assert!(
        !denied.stdout.contains("host-service"),
        "the host's service was reached through its local route {prefix}: {denied:?}"
    );
    assert!(denied.stdout.contains(&format!("tcp {target} err 111")), "{denied:?}");
    // Positive control: the path is real, an exact allow opens it.
    assert!(
        opened.stdout.contains(&format!("tcp {target} ok")) && opened.stdout.contains("host-service"),
        "{opened:?}"
    );
    assert!(
        shown.stdout.contains(&format!("DENY  {prefix}")) && shown.stdout.contains("an address of this host"),
        "{shown:?}"
    );
}

/// Destinations the router or slirp4netns keep for themselves, tried
/// against a service bound on every host address: slirp4netns's gateway
/// (host loopback disabled), the router's own addresses on both
/// links, the broadcast addresses of both links, `0.0.0.0`, and the host's
/// address in IPv4-mapped IPv6 form. None may reach the host's service.
/// (Not 10.0.2.3: slirp4netns relays it to the host's resolver, which may
/// be off this machine.)
#[test]
fn the_routers_and_slirps_own_addresses_do_not_lead_to_the_host() {
    let (env, _g) = require_env!(shared);
    let (mut srv, port) = start_service();
    let host = crate::net::policy::TestHost::new();
    let (cfg, ws) = env.config_and_workspace("atknet-own", "");
    let mapped = format!("::ffff:{}", host.host_side);
    let addrs = [
        "10.0.2.2",
        "10.0.2.100",
        "10.0.2.255",
        "169.254.255.2",
        "169.254.255.3",
        "0.0.0.0",
        &host.host_side,
        &mapped,
    ];
    let r = connect(env, &ws, &cfg, "default", &port, &addrs);
    let _ = srv.kill();
    let _ = srv.wait();
    assert_eq!(r.code, 0, "{r:?}");
    for a in addrs {
        assert!(r.stdout.contains(&format!("tcp {a} ")), "{a} not tried: {r:?}");
    }
    assert!(
        !r.stdout.contains("host-service") && !r.stdout.contains(" ok "),
        "a destination reached something: {r:?}"
    );
}

/// A descriptor the caller of `lazaret run` left open (here a pipe's write
/// end at fd 9, as a shell's `exec 9>…` or a tool's job pipe would be) must
/// not live on in the coordinator, the supervisor, slirp4netns or runsc:
/// they outlive the client, so whoever waits for that pipe's end (or holds
/// a lock through it) would wait for the Domain.
#[test]
fn a_callers_open_descriptor_does_not_leak_into_the_domains_processes() {
    use std::os::unix::process::CommandExt;
    let (env, _g) = require_env!(shared);
    let ws = env.dir("atknet-fds-ws");
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds, both close-on-exec.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    let ino = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/fd/{}", fds[1])).unwrap().ino()
    };
    let marker = format!("pipe:[{ino}]");
    let mut cmd = env.lz_sh(&ws, "echo started; sleep 5").command();
    let w = fds[1];
    // SAFETY: dup2 only, between fork and exec; it clears close-on-exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(w, 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut l = String::new();
    let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut l);
    let mut holders = Vec::new();
    if l.trim() == "started" {
        for (pid, uids, cmdline) in harness::processes() {
            if pid == child.id() as i32 || uids.first() != Some(&env.uid) {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for e in rd.flatten() {
                if std::fs::read_link(e.path())
                    .map(|t| t.to_string_lossy() == marker)
                    .unwrap_or(false)
                {
                    holders.push(format!("{pid} {cmdline}"));
                }
            }
        }
    }
    let _ = child.wait();
    // SAFETY: closing the two fds this test opened.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    assert_eq!(l.trim(), "started", "the session did not start");
    assert!(holders.is_empty(), "the caller's fd 9 leaked into: {holders:#?}");
}
