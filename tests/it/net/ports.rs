//! Host port forwards that meet other Domains (issue 29 item 5): the same
//! documented `ports` line in two Domains, "any free host port" entries,
//! and `lazaret port add` on a running Domain; `--publish` joining a
//! running Domain adds its forward, and a host port another Domain holds
//! is bad input naming that Domain (issue 48 item 8).
//!
//! Test safety: every connection goes to the host's 127.0.0.1.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use crate::harness::{eventually, Bg, Env};
use crate::require_env;

/// Answers every connection on 0.0.0.0:PORT with MARKER (forwards arrive
/// at the sandbox's NIC address, not at its loopback).
const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(16)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[2].encode())
    c.close()
"#;

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// What 127.0.0.1:PORT on the host answers (empty when nothing does).
fn read_host(port: u16) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r
}

/// A Domain of `profile` on `ws` serving MARKER on guest port 8000.
fn serve(env: &Env, ws: &Path, cfg: &Path, profile: &str, marker: &str) -> Bg {
    let bg = env
        .lz(
            ws,
            &[
                "run", "-q", "-p", profile, "--", "python3", "-c", SERVER, "8000", marker,
            ],
        )
        .config_home(cfg)
        .spawn_bg();
    env.wait_published(profile, ws, Duration::from_secs(120));
    bg
}

/// The host ports `ps --json` lists for the Domain `id` forwarding to
/// guest port `guest`.
fn host_ports(env: &Env, ws: &Path, id: &str, guest: u16) -> Vec<u16> {
    let j = env.ps_json(ws);
    let Some(at) = j.find(id) else { return Vec::new() };
    let obj = &j[j[..at].rfind('{').unwrap_or(0)..];
    let obj = &obj[..obj.find('}').unwrap_or(obj.len())];
    let Some(list) = obj.split("\"ports\":[").nth(1) else {
        return Vec::new();
    };
    list[..list.find(']').unwrap_or(0)]
        .split(',')
        .filter_map(|s| {
            let f: Vec<&str> = s.trim_matches('"').split(':').collect();
            (f.len() == 3 && f[2] == guest.to_string())
                .then(|| f[1].parse().ok())
                .flatten()
        })
        .collect()
}

#[test]
fn a_second_domain_with_the_same_ports_line_is_told_who_holds_the_port_or_gets_a_free_one() {
    let (env, _g) = require_env!(shared);
    let fixed = free_port();
    let base = env.dir("ports-two");
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.fixed]\nports = [\"127.0.0.1:{fixed}:8000\"]\n\
             [profiles.any]\nports = [\"127.0.0.1:0:8000\"]\n"
        ),
    );
    let ws: Vec<_> = (0..4).map(|i| env.dir(&format!("ports-two-ws{i}"))).collect();
    // The documented fixed line: the first Domain gets it ...
    let _a = serve(env, &ws[0], &cfg, "fixed", "domain-a");
    let id_a = env.domain_id("fixed", &ws[0]);
    assert!(
        eventually(Duration::from_secs(20), || read_host(fixed) == "domain-a"),
        "the first Domain's forward"
    );
    // ... the second fails, as bad input, with a sentence naming the first.
    let r = env
        .lz(&ws[1], &["run", "-q", "-p", "fixed", "--", "true"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "127.0.0.1:{fixed} is already forwarded by the running Domain {id_a} (workspace {})",
            ws[0].display()
        )),
        "{r:?}"
    );
    assert!(r.stderr.contains("\"127.0.0.1:0:8000\""), "names the way out: {r:?}");
    assert!(!r.stderr.contains("slirp_add_hostfwd failed"), "{r:?}");
    // "Any free host port": two Domains of one profile, each its own port,
    // shown by `ps`, each reaching its own server.
    let _c = serve(env, &ws[2], &cfg, "any", "domain-c");
    let _d = serve(env, &ws[3], &cfg, "any", "domain-d");
    let pc = host_ports(env, &ws[2], &env.domain_id("any", &ws[2]), 8000);
    let pd = host_ports(env, &ws[3], &env.domain_id("any", &ws[3]), 8000);
    assert_eq!((pc.len(), pd.len()), (1, 1), "{}", env.ps_json(&ws[2]));
    assert!(pc[0] != 0 && pd[0] != 0 && pc[0] != pd[0], "{pc:?} {pd:?}");
    assert!(eventually(Duration::from_secs(20), || read_host(pc[0]) == "domain-c"));
    assert!(eventually(Duration::from_secs(20), || read_host(pd[0]) == "domain-d"));
}

#[test]
fn port_add_forwards_a_new_host_port_into_a_running_domain() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("ports-add", "");
    let _a = serve(env, &ws, &cfg, "default", "added-port");
    let id = env.domain_id("default", &ws);
    let short = &id[..12];
    // A fixed host port, at run time, without a restart.
    let p = free_port();
    let r = env
        .lz(&ws, &["port", "add", short, &format!("{p}:8000")])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("forwarding 127.0.0.1:{p}:8000")), "{r:?}");
    assert!(eventually(Duration::from_secs(20), || read_host(p) == "added-port"));
    // Any free port: the one it got is printed and listed by `ps`.
    let r = env.lz(&ws, &["port", "add", short, "0:8000"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    let ports = host_ports(env, &ws, &id, 8000);
    assert_eq!(ports.len(), 2, "{}", env.ps_json(&ws));
    let got = *ports.iter().find(|&&q| q != p).unwrap();
    assert!(r.stdout.contains(&format!("127.0.0.1:{got}:8000")), "{r:?}");
    assert!(eventually(Duration::from_secs(20), || read_host(got) == "added-port"));
    // The same host port again to another guest port, and a bad form.
    let r = env
        .lz(&ws, &["port", "add", short, &format!("{p}:9000")])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("forwarded twice"), "{r:?}");
    let r = env.lz(&ws, &["port", "add", short, "99999:1"]).config_home(&cfg).run();
    assert_eq!(r.code, 2, "{r:?}");
    // A host port another program listens on is said so.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hp = held.local_addr().unwrap().port();
    let r = env
        .lz(&ws, &["port", "add", short, &format!("{hp}:8000")])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("in use by another program"), "{r:?}");
    drop(held);
    let _ = env.lz(&ws, &["stop", short]).config_home(&cfg).run();
    assert!(eventually(Duration::from_secs(15), || read_host(p).is_empty()
        && read_host(got).is_empty()));
}

/// A Domain of the default profile on `ws` serving MARKER on guest port
/// 8000, started with `extra` options of `run` (`--publish`).
fn serve_with(env: &Env, ws: &Path, cfg: &Path, extra: &[&str], marker: &str) -> Bg {
    let mut args = vec!["run", "-q"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "python3", "-c", SERVER, "8000", marker]);
    let bg = env.lz(ws, &args).config_home(cfg).spawn_bg();
    env.wait_published("default", ws, Duration::from_secs(120));
    bg
}

#[test]
fn publish_on_a_running_domain_adds_the_forward_as_port_add_does() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("ports-join", "");
    let _a = serve_with(env, &ws, &cfg, &[], "joined-port");
    let id = env.domain_id("default", &ws);
    let p = free_port();
    assert!(read_host(p).is_empty(), "nothing forwards {p} yet");
    // A second session of the running Domain asks for a forward: added,
    // and said on stderr.
    let r = env
        .lz(&ws, &["run", "--publish", &format!("{p}:8000"), "--", "true"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(&format!("added the forward 127.0.0.1:{p}:8000")),
        "{r:?}"
    );
    assert!(!r.stderr.contains("already running without --publish"), "{r:?}");
    // It works: the host port reaches the listener inside, and `ps` lists it.
    assert!(eventually(Duration::from_secs(20), || read_host(p) == "joined-port"));
    assert_eq!(host_ports(env, &ws, &id, 8000), vec![p], "{}", env.ps_json(&ws));
    // Asked again, it is there: nothing added, nothing said.
    let r = env
        .lz(&ws, &["run", "--publish", &format!("{p}:8000"), "--", "true"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stderr.contains("added the forward"), "{r:?}");
    assert_eq!(host_ports(env, &ws, &id, 8000), vec![p], "{}", env.ps_json(&ws));
    // The same checks as `port add`: the same host port to another guest port.
    let r = env
        .lz(&ws, &["run", "--publish", &format!("{p}:9000"), "--", "true"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("forwarded twice"), "{r:?}");
    assert!(eventually(Duration::from_secs(20), || read_host(p) == "joined-port"));
    let _ = env.lz(&ws, &["stop", &id[..12]]).config_home(&cfg).run();
    assert!(eventually(Duration::from_secs(15), || read_host(p).is_empty()));
}

#[test]
fn two_projects_asking_for_one_host_port_the_second_is_told_which_domain_holds_it() {
    let (env, _g) = require_env!(shared);
    let (ws_a, cfg) = env.workspace_with_config("ports-clash-a", "");
    let ws_b = env.dir("ports-clash-b");
    let p = free_port();
    // Project A publishes the port at its start.
    let _a = serve_with(env, &ws_a, &cfg, &["--publish", &format!("{p}:8000")], "project-a");
    let id_a = env.domain_id("default", &ws_a);
    assert!(eventually(Duration::from_secs(20), || read_host(p) == "project-a"));
    let names_a = |r: &crate::harness::Run| {
        r.code == 2
            && r.stderr.contains(&format!(
                "host port 127.0.0.1:{p} is already forwarded by the running Domain {id_a} (workspace {})",
                ws_a.display()
            ))
            && r.stderr.contains("\"127.0.0.1:0:8000\"")
    };
    // Project B asks for it at its start: exit 2, naming A.
    let r = env
        .lz(&ws_b, &["run", "-q", "--publish", &format!("{p}:8000"), "--", "true"])
        .config_home(&cfg)
        .run();
    assert!(names_a(&r), "{r:?}");
    // B running, then asking for it by `port add` and by `--publish`: the same.
    let _b = serve_with(env, &ws_b, &cfg, &[], "project-b");
    let id_b = env.domain_id("default", &ws_b);
    let r = env
        .lz(&ws_b, &["port", "add", &id_b[..12], &format!("{p}:8000")])
        .config_home(&cfg)
        .run();
    assert!(names_a(&r), "{r:?}");
    let r = env
        .lz(&ws_b, &["run", "--publish", &format!("{p}:8000"), "--", "true"])
        .config_home(&cfg)
        .run();
    assert!(names_a(&r), "{r:?}");
    // Nothing of A's forward broke, and B got none.
    assert!(eventually(Duration::from_secs(20), || read_host(p) == "project-a"));
    assert_eq!(host_ports(env, &ws_a, &id_a, 8000), vec![p], "{}", env.ps_json(&ws_a));
    assert!(host_ports(env, &ws_b, &id_b, 8000).is_empty(), "{}", env.ps_json(&ws_b));
    for id in [&id_a, &id_b] {
        let _ = env.lz(&ws_a, &["stop", &id[..12]]).config_home(&cfg).run();
    }
    assert!(eventually(Duration::from_secs(15), || read_host(p).is_empty()));
}
