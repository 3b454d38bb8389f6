//! The sandbox's own loopback (issue 29 item 3): `lo` with 127.0.0.1/8 in
//! every network mode, servers bound on localhost reachable from every
//! session of the Domain, and from nothing outside it.
//!
//! Test safety: every connection here goes to 127.0.0.1, inside gVisor or
//! in one of this machine's namespaces.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::harness::{self, Env};
use crate::require_env;

/// Binds 127.0.0.1:PORT, prints `bound`, and answers every connection with
/// MARKER.
const SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("bound", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[2].encode())
    c.close()
"#;

/// Connects to 127.0.0.1:PORT (retrying for up to 10 s while nothing
/// listens yet) and prints `got WHAT` or `err ERRNO`.
const CLIENT: &str = r#"
import socket, sys, time
port, tag = int(sys.argv[1]), sys.argv[2]
end = time.time() + 10
while True:
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=2)
        print(tag, "got", c.recv(256).decode(), flush=True)
        break
    except OSError as e:
        if time.time() > end:
            print(tag, "err", e.errno, flush=True)
            break
        time.sleep(0.05)
"#;

/// A TCP port nobody on the host listens on right now (the host's own
/// 127.0.0.1 is tested for it below).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A path to the network namespace whose inode `net show --json` gives
/// under `key`, from a process of the test user: its `/proc/PID/ns/net`
/// when `own` and the process is in that namespace, else a descriptor of
/// it that refers to the namespace. Shared with `router`.
pub(crate) fn netns_of(env: &Env, ws: &Path, cfg: &Path, key: &str, own: bool) -> Option<PathBuf> {
    let j = env.lz(ws, &["net", "show", "--json"]).config_home(cfg).run().stdout;
    let k = format!("[\"{key}\",\"");
    let rest = &j[j.find(&k)? + k.len()..];
    let want = format!("net:[{}]", &rest[..rest.find('"')?]);
    for (pid, uids, _) in harness::processes() {
        if uids.first() != Some(&env.uid) {
            continue;
        }
        let ns = PathBuf::from(format!("/proc/{pid}/ns/net"));
        if own
            && std::fs::read_link(&ns)
                .map(|l| l.to_string_lossy() == want)
                .unwrap_or(false)
        {
            return Some(ns);
        }
        let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in rd.flatten() {
            if std::fs::read_link(e.path())
                .map(|l| l.to_string_lossy() == want)
                .unwrap_or(false)
            {
                return Some(e.path());
            }
        }
    }
    None
}

/// What a host-side connect to 127.0.0.1:PORT reads (in the root
/// namespace, or in `ns`), or its error.
fn host_side_read(ns: Option<&Path>, port: u16) -> String {
    let script = "import socket,sys\ntry:\n c=socket.create_connection(('127.0.0.1',int(sys.argv[1])),timeout=3)\n \
                  print('read',c.recv(256).decode())\nexcept OSError as e:\n print('err',e.errno)\n";
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg("python3");
            c
        }
        None => Command::new("python3"),
    };
    let o = c.args(["-c", script, &port.to_string()]).output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn loopback_session(env: &Env, profile: &str) {
    let (ws, cfg) = env.workspace_with_config(&format!("lo-{profile}"), "[profiles.none.network]\nmode = \"none\"\n");
    let port = free_port();
    let marker = format!("lz-loopback-{}-{port}", std::process::id());
    // Session 1: the server, and a client in another process of the same
    // session; then it stays until the test is done.
    let inner = format!(
        "grep -q '^ *lo:' /proc/net/dev && echo lo-listed; \
         python3 -c {server} {port} {marker} & \
         python3 -c {client} {port} same-session; echo serving; sleep 120",
        server = harness::sh_quote(SERVER),
        client = harness::sh_quote(CLIENT),
    );
    let mut first = env
        .lz(&ws, &["run", "-p", profile, "--", "sh", "-c", &inner])
        .config_home(&cfg)
        .spawn_bg();
    let mut out = String::new();
    let mut rd = BufReader::new(first.0.stdout.take().unwrap());
    loop {
        let mut l = String::new();
        if rd.read_line(&mut l).unwrap_or(0) == 0 {
            break;
        }
        out.push_str(&l);
        if l.trim() == "serving" {
            break;
        }
    }
    if !out.contains("serving") {
        let _ = first.0.kill();
        let mut err = String::new();
        let _ = first.0.stderr.take().unwrap().read_to_string(&mut err);
        panic!("{profile}: the first session ended early: {out}\n{err}");
    }
    assert!(out.contains("lo-listed"), "{profile}: /proc/net/dev has no lo: {out}");
    assert!(out.contains("bound"), "{profile}: binding 127.0.0.1 failed: {out}");
    assert!(
        out.contains(&format!("same-session got {marker}")),
        "{profile}: another process of the same session: {out}"
    );
    // Session 2 joins the running Domain and reaches the same server.
    let r = env
        .lz(
            &ws,
            &[
                "run",
                "-p",
                profile,
                "--",
                "python3",
                "-c",
                CLIENT,
                &port.to_string(),
                "other-session",
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{profile}: {r:?}");
    assert!(
        r.stdout.contains(&format!("other-session got {marker}")),
        "{profile}: another session: {r:?}"
    );
    // Nothing outside the sandbox reaches it: not the host, not the host
    // kernel's side of the sandbox namespace, not the router.
    let host = host_side_read(None, port);
    assert!(
        !host.contains(&marker),
        "{profile}: the host reached the sandbox's loopback: {host}"
    );
    if profile != "none" {
        let sandbox = netns_of(env, &ws, &cfg, "netns-inode", true);
        let router = netns_of(env, &ws, &cfg, "router-netns-inode", true);
        assert!(sandbox.is_some() && router.is_some(), "{profile}: namespaces not found");
        for ns in [sandbox, router].iter().flatten() {
            let seen = host_side_read(Some(ns), port);
            assert!(seen.starts_with("err "), "{profile}: {}: {seen}", ns.display());
            assert!(!seen.contains(&marker), "{profile}: {}: {seen}", ns.display());
        }
    }
    drop(first);
    let _ = env.lz(&ws, &["stop", "-p", profile]).config_home(&cfg).run();
}

// Covers FR-2.
#[test]
fn a_localhost_server_is_reached_from_every_session_and_from_nothing_outside() {
    let (env, _g) = require_env!(shared);
    loopback_session(env, "default");
}

#[test]
fn without_a_network_the_sandbox_still_has_its_loopback() {
    let (env, _g) = require_env!(shared);
    loopback_session(env, "none");
}

const EXPRESS_APP: &str = r#"const express = require('express');
const app = express();
app.get('/hello', (req, res) => res.json({ hello: 'world' }));
module.exports = app;
"#;

const EXPRESS_TEST: &str = r#"const test = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const request = require('supertest');
const app = require('../app');

test('supertest starts the app on an ephemeral local port', async () => {
  const r = await request(app).get('/hello');
  assert.strictEqual(r.status, 200);
  assert.deepStrictEqual(r.body, { hello: 'world' });
});

test('the app listens on 127.0.0.1', async () => {
  const srv = app.listen(0, '127.0.0.1');
  await new Promise((ok) => srv.once('listening', ok));
  const body = await new Promise((ok, fail) => {
    http.get({ host: '127.0.0.1', port: srv.address().port, path: '/hello' }, (r) => {
      let d = '';
      r.on('data', (c) => (d += c));
      r.on('end', () => ok(d));
    }).on('error', fail);
  });
  srv.close();
  assert.match(body, /world/);
});
"#;

const FLASK_APP: &str = r#"from flask import Flask

app = Flask(__name__)


@app.get("/hello")
def hello():
    return {"hello": "world"}
"#;

const FLASK_TEST: &str = r#"import json
import threading
import urllib.request

from werkzeug.serving import make_server

from app import app


def test_the_app_serves_on_localhost():
    srv = make_server("127.0.0.1", 0, app)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.port}/hello", timeout=10) as r:
            assert json.load(r) == {"hello": "world"}
    finally:
        srv.shutdown()


def test_the_test_client():
    assert app.test_client().get("/hello").json == {"hello": "world"}
"#;

/// Words of npm's and apt's output that mean the registry was not reached
/// (then the test skips; under LAZARET_MUST_WORK=1 it fails).
const UNREACHABLE: &[&str] = &[
    "ENOTFOUND",
    "EAI_AGAIN",
    "ENETUNREACH",
    "ECONNREFUSED",
    "Temporary failure resolving",
    "Could not resolve",
];

fn registry_unreachable(what: &str, r: &harness::Run) -> bool {
    let text = format!("{}{}", r.stdout, r.stderr);
    if r.code == 0 || !UNREACHABLE.iter().any(|w| text.contains(w)) {
        return false;
    }
    if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
        panic!("{what} is unreachable and LAZARET_MUST_WORK=1: {r:?}");
    }
    eprintln!("skipping: {what} is unreachable from the sandbox: {r:?}");
    true
}

/// Acceptance 3 of issue 29: the test suites of a small Express app
/// (supertest) and of a small Flask app (pytest, the app started on
/// localhost) pass inside, installed from the registries as a user would
/// (npm from the npm registry; Flask and pytest as Debian packages: the dev
/// image has no pip or venv). `ca_certs = "host"`: where the host reaches
/// the registries through a TLS-intercepting proxy, its CA bundle does.
#[test]
fn express_with_supertest_and_flask_with_pytest_pass_inside() {
    let (env, _g) = require_env!(shared);
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let (ws, cfg) = env.workspace_with_config("lo-suites", "[profiles.web]\nimage = \"dev\"\nca_certs = \"host\"\n");
    env.write(
        &ws.join("package.json"),
        r#"{"name": "lz-express", "version": "1.0.0", "private": true, "scripts": {"test": "node --test"}}"#,
    );
    env.write(&ws.join("app.js"), EXPRESS_APP);
    env.write(&ws.join("test/app.test.js"), EXPRESS_TEST);
    env.write(&ws.join("py/app.py"), FLASK_APP);
    env.write(&ws.join("py/test_app.py"), FLASK_TEST);
    let run = |cmd: &str| {
        env.lz(&ws, &["run", "-q", "-p", "web", "--", "sh", "-c", cmd])
            .config_home(&cfg)
            .run()
    };
    let r = run("npm install --no-audit --no-fund express supertest 2>&1");
    if registry_unreachable("the npm registry", &r) {
        return;
    }
    assert_eq!(r.code, 0, "npm install: {r:?}");
    let r = run("npm test 2>&1");
    assert_eq!(r.code, 0, "npm test: {r:?}");
    assert!(r.stdout.contains("# pass 2") && r.stdout.contains("# fail 0"), "{r:?}");
    let r = run(
        "apt-get update -q 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
         --no-install-recommends python3-flask python3-pytest 2>&1",
    );
    if registry_unreachable("the Debian mirror", &r) {
        return;
    }
    assert_eq!(r.code, 0, "apt-get install: {r:?}");
    let r = run("cd py && python3 -m pytest -q -p no:cacheprovider 2>&1");
    assert_eq!(r.code, 0, "pytest: {r:?}");
    assert!(r.stdout.contains("2 passed"), "{r:?}");
    let _ = env.lz(&ws, &["stop", "-p", "web"]).config_home(&cfg).run();
}
