//! `git push` over SSH through the sandbox's SSH agent (issue 51,
//! acceptance 2; docs/config.md "SSH agent"): to a real `sshd` in a test
//! host namespace, reached by name through the egress gate
//! (`network.hosts = ["NAME:22"]`). The push lands when the developer
//! types `yes` at the prompt, not with `no`, and with no prompt under a
//! rule naming the key, the host and the user; a rule naming another host,
//! another key or another user does not match.
//!
//! Test safety: no packet leaves this machine. The server is a test host
//! namespace on a /30 of 198.18.0.0/15 (as in `net::names`), running the
//! test DNS zone the gate resolves through (`network.dns`) and an
//! unprivileged `sshd` (the test user's, with its own host key and config;
//! it can only log the test user in). The image has no SSH client: the
//! host's `ssh` and the libraries it needs beyond the C library are copied
//! into the workspace (the same Debian release as the image).
//!
//! The coordinator decides a login by the server's host key, which the
//! test makes known the way a developer does: a line in the test user's
//! `~/.ssh/known_hosts` (removed again when the test ends).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::ssh_agent::{agent_pane, ed25519_key, settled_question, tools, HostAgent, SSH_QUESTION};
use crate::fixtures::{host_git, TestNs};
use crate::harness::{eventually, sh_quote, Env};
use crate::require_env;

/// The test host's DNS: `NAME` resolves to the namespace's address.
const DNS: &str = concat!(
    "import socket, sys, threading\nip, zone = sys.argv[1], sys.argv[2]\n\
     zone = dict(kv.split('=') for kv in zone.split(',') if kv)\n",
    crate::py_zone_dns!(),
    r#"        else:
            u.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + q[12:e], a)
threading.Thread(target=dns, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#
);

/// Edits of the test user's known_hosts, one at a time.
static KNOWN_HOSTS: Mutex<()> = Mutex::new(());

/// An SSH server on a test host namespace, known as `name` (DNS there and
/// the test user's known_hosts), with a bare repository to push to.
struct SshHost {
    name: String,
    /// The bare repository pushes go to.
    bare: PathBuf,
    /// The server's host key's fingerprint.
    host_fp: String,
    /// The known_hosts line (without the tag).
    known_line: String,
    known_hosts: PathBuf,
    tag: String,
    log: PathBuf,
    sshd: Child,
    ns: TestNs,
}

impl Drop for SshHost {
    fn drop(&mut self) {
        let _ = self.sshd.kill();
        let _ = self.sshd.wait();
        let _l = KNOWN_HOSTS.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(text) = std::fs::read_to_string(&self.known_hosts) {
            let kept: String = text
                .split_inclusive('\n')
                .filter(|l| !l.trim_end().ends_with(&self.tag))
                .collect();
            let _ = std::fs::write(&self.known_hosts, kept);
        }
    }
}

impl SshHost {
    /// A server as `name` that lets the test user in with `authorized`
    /// (public key lines), on test host number `k`.
    fn start(env: &Env, name: &str, k: u32, authorized: &[&str]) -> Option<SshHost> {
        if !Path::new("/usr/sbin/sshd").exists() {
            eprintln!("skipping: no /usr/sbin/sshd (openssh-server; scripts/install-deps.sh)");
            assert!(
                std::env::var_os("LAZARET_MUST_WORK").is_none(),
                "no sshd and LAZARET_MUST_WORK"
            );
            return None;
        }
        let dir = env.dir(&format!("{name}-sshd"));
        let mut ns = TestNs::create("lzs", std::net::Ipv4Addr::new(198, 19, 0, 0), k);
        ns.serve("python3", DNS, &[ns.ip.clone(), format!("{name}={}", ns.ip)]);
        let hostkey = dir.join("hostkey");
        let (host_fp, public) = ed25519_key(env, &dir, &hostkey, name);
        let mut f = public.split_whitespace();
        let known_line = format!("{name} {} {}", f.next().unwrap(), f.next().unwrap());
        env.write(&dir.join("authorized_keys"), &(authorized.join("\n") + "\n"));
        let bare = dir.join("bare.git");
        let o = host_git(env, &dir, &["init", "-q", "--bare", "bare.git"]);
        assert_eq!(o.code, 0, "{o:?}");
        let d = dir.display();
        env.write(
            &dir.join("sshd_config"),
            &format!(
                "Port 22\nListenAddress {ip}\nHostKey {d}/hostkey\nAuthorizedKeysFile {d}/authorized_keys\n\
                 UsePAM no\nStrictModes no\nPidFile none\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nAllowUsers {user}\n\
                 LogLevel VERBOSE\n",
                ip = ns.ip,
                user = env.user
            ),
        );
        // The namespace lets the unprivileged sshd bind port 22.
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.ns,
                "sysctl",
                "-qw",
                "net.ipv4.ip_unprivileged_port_start=22",
            ])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "sysctl in {}", ns.ns);
        let log = dir.join("sshd.log");
        let sshd = Command::new("ip")
            .args(["netns", "exec", &ns.ns])
            .args(env.as_user())
            .args(["/usr/sbin/sshd", "-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .env_clear()
            .envs(env.base_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let known_hosts = env.home.join(".ssh/known_hosts");
        let tag = format!("lazaret-it-{}-{name}", std::process::id());
        let me = SshHost {
            name: name.to_string(),
            bare,
            host_fp,
            known_line,
            known_hosts,
            tag,
            log,
            sshd,
            ns,
        };
        assert!(
            eventually(Duration::from_secs(20), || me.log().contains("Server listening")),
            "sshd did not start: {}",
            me.log()
        );
        me.make_known(env);
        Some(me)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Adds the host key to the test user's known_hosts, as `ssh` does
    /// when the developer accepts a new host.
    fn make_known(&self, env: &Env) {
        let _l = KNOWN_HOSTS.lock().unwrap_or_else(|e| e.into_inner());
        let dot = self.known_hosts.parent().unwrap();
        if !dot.exists() {
            std::fs::create_dir_all(dot).unwrap();
            env.chown(dot);
        }
        let mut text = std::fs::read_to_string(&self.known_hosts).unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{} {}\n", self.known_line, self.tag));
        env.write(&self.known_hosts, &text);
    }

    /// The URL inside the sandbox.
    fn url(&self, env: &Env) -> String {
        format!("ssh://{}@{}{}", env.user, self.name, self.bare.display())
    }

    /// The commit `refs/heads/BRANCH` names in the bare repository, if any.
    fn head(&self, env: &Env, branch: &str) -> Option<String> {
        let r = host_git(
            env,
            &self.bare,
            &["rev-parse", "--verify", "-q", &format!("refs/heads/{branch}")],
        );
        (r.code == 0).then(|| r.stdout.trim().to_string())
    }

    /// Every ref of the bare repository.
    fn refs(&self, env: &Env) -> String {
        host_git(env, &self.bare, &["for-each-ref"]).stdout
    }
}

/// Puts the host's `ssh` in `ws/tools` and the libraries it needs beyond
/// the C library in `ws/tools/lib`; the server's known_hosts line for the
/// client inside in `ws/known_hosts`; and `ws/push.sh BRANCH URL`, which
/// commits `marker-BRANCH` in a new repository and pushes it to BRANCH,
/// printing `commit-BRANCH=SHA` (also written to `ws/commit-BRANCH`) and
/// `rc-push-BRANCH=RC`.
fn client(env: &Env, ws: &Path, agent: &HostAgent, server: &SshHost) {
    tools(env, ws, agent);
    let t = ws.join("tools");
    let lib = t.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    env.chown(&lib);
    std::fs::copy("/usr/bin/ssh", t.join("ssh")).unwrap();
    env.chown(&t.join("ssh"));
    let ldd = Command::new("ldd").arg("/usr/bin/ssh").output().unwrap();
    for l in String::from_utf8_lossy(&ldd.stdout).lines() {
        let Some(path) = l.split("=> ").nth(1).and_then(|r| r.split_whitespace().next()) else {
            continue;
        };
        let file = Path::new(path).file_name().unwrap().to_string_lossy().to_string();
        if ["libc.so", "libm.so", "libresolv.so", "ld-linux"]
            .iter()
            .any(|p| file.starts_with(p))
        {
            continue;
        }
        std::fs::copy(path, lib.join(&file)).unwrap();
        env.chown(&lib.join(&file));
    }
    env.write(&ws.join("known_hosts"), &format!("{}\n", server.known_line));
    env.write(
        &ws.join("push.sh"),
        "b=$1; T=/workspace/tools\n\
         cd /tmp && rm -rf r-$b && git init -q -b $b r-$b && cd r-$b && \
         git -c user.name=t -c user.email=t@test commit -q --allow-empty -m marker-$b && \
         git rev-parse HEAD > /workspace/commit-$b && echo commit-$b=$(git rev-parse HEAD)\n\
         GIT_SSH_COMMAND=\"env LD_LIBRARY_PATH=$T/lib $T/ssh -F /dev/null -o BatchMode=yes \
         -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/workspace/known_hosts\" \
         git push -q \"$2\" HEAD:refs/heads/$b\n\
         echo rc-push-$b=$?\n",
    );
}

/// The network half of a profile: the gate resolves through the test
/// host and lets SSH reach its name only.
fn network(profile: &str, server: &SshHost) -> String {
    format!(
        "[profiles.{profile}.network]\ndns = [\"{ip}\"]\nhosts = [\"{name}:22\"]\n",
        ip = server.ns.ip,
        name = server.name
    )
}

/// The audit log of `profile`'s Domain on `ws`.
fn audit_of(env: &Env, profile: &str, ws: &Path) -> String {
    let root = env
        .home
        .join(".local/share/lazaret/domains")
        .join(env.domain_id(profile, ws));
    std::fs::read_to_string(root.join("audit.log")).unwrap_or_default()
}

/// `commit-BRANCH=SHA` from a run's output.
fn pushed_commit(out: &str, branch: &str) -> Option<String> {
    let p = format!("commit-{branch}=");
    out.lines()
        .find_map(|l| l.trim().strip_prefix(&p).map(|s| s.trim().to_string()))
}

/// Whether the image can run the host's ssh (else prints why the test is
/// skipped; a skip fails under LAZARET_MUST_WORK).
fn runs_ssh(stderr: &str) -> bool {
    if stderr.contains("error while loading shared libraries") {
        eprintln!("skipping: the image cannot run the host's ssh");
        assert!(std::env::var_os("LAZARET_MUST_WORK").is_none(), "{stderr}");
        return false;
    }
    true
}

// Issue 51, acceptance 2: `yes` at the terminal pushes, `no` does not.
#[test]
fn git_push_over_ssh_is_asked_at_the_terminal_and_lands_only_after_yes() {
    let (env, _g) = require_env!(shared);
    let Some(agent) = HostAgent::start(env, "sshpush") else {
        return;
    };
    let fp1 = agent.keys[0].0.clone();
    let k = (std::process::id() * 4 + 40) % 16000;
    let Some(server) = SshHost::start(env, "push-ask.test", k, &[&agent.keys[0].1]) else {
        return;
    };
    let (ws, cfg) = env.workspace_with_config(
        "sshpush",
        &format!(
            "[escalation]\nprompt_timeout_s = 120\n{}[profiles.default.ssh_agent]\nkeys = [\"{fp1}\"]\n",
            network("default", &server)
        ),
    );
    client(env, &ws, &agent, &server);
    let t = agent_pane(env, &ws, &cfg, &agent, "sshpush");
    let url = server.url(env);
    t.line(&format!(
        "clear; echo 'mark''-yes'; sh /workspace/push.sh yes {}",
        sh_quote(&url)
    ));
    t.expect_line("mark-yes", Duration::from_secs(20));
    let want = format!("=> SSH login as \"{}\" with key {fp1}", env.user);
    assert!(
        eventually(Duration::from_secs(60), || t.capture().contains(&want)),
        "no prompt:\n{}\nsshd: {}",
        t.capture(),
        server.log()
    );
    let screen = settled_question(&t, &want);
    // The server is named by its host key, as the developer's known_hosts
    // knows it (the server proved the key by signing the session).
    let to = format!(
        "to the server with host key ssh-ed25519 {} (known as {})",
        server.host_fp, server.name
    );
    assert!(screen.lines().any(|l| l.trim_end() == to), "{screen}");
    assert_eq!(server.head(env, "yes"), None, "pushed before the answer");
    t.line("yes");
    t.expect("rc-push-yes=0", Duration::from_secs(60));
    // The prompt drew over the screen: the commit is read from its file.
    let sent = std::fs::read_to_string(ws.join("commit-yes"))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(server.head(env, "yes"), Some(sent), "{}", server.refs(env));
    let subject = host_git(env, &server.bare, &["log", "-1", "--format=%s", "refs/heads/yes"]);
    assert_eq!(subject.stdout.trim(), "marker-yes");

    // `no`: the login fails and the server's repository is unchanged.
    // Wait for the marker printed after `clear` first, so the question
    // waited for is the new prompt's, not the old one's.
    let before = server.refs(env);
    t.line(&format!(
        "clear; echo 'mark''-no'; sh /workspace/push.sh no {}",
        sh_quote(&url)
    ));
    t.expect_line("mark-no", Duration::from_secs(20));
    t.expect(SSH_QUESTION, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(800));
    t.line("no");
    t.expect("rc-push-no=", Duration::from_secs(60));
    let screen = t.capture();
    assert!(!screen.contains("rc-push-no=0"), "{screen}");
    assert_eq!(server.head(env, "no"), None, "pushed after no");
    assert_eq!(server.refs(env), before, "the server's repository changed after no");
    let log = audit_of(env, "default", &ws);
    let login = format!("login user=\"{}\" host_key={}", env.user, server.host_fp);
    assert!(
        log.contains(&format!("{login} -> signed: approved by the developer")),
        "{log}"
    );
    assert!(
        log.contains(&format!("{login} -> refused: denied at the terminal")),
        "{log}"
    );
    assert!(
        log.contains("session-bind host_key=") && log.contains("-> bound"),
        "{log}"
    );
    t.line("exit");
}

// Issue 51, acceptance 2: a rule naming the key, the host and the user
// pushes with no prompt (from a session with no terminal, where a prompt
// would be refused); rules naming another host, key or user do not match
// (`approve = "rule"`: refused, nothing pushed).
#[test]
fn git_push_over_ssh_by_a_matching_rule_needs_no_prompt_and_other_rules_do_not_match() {
    let (env, _g) = require_env!(shared);
    let Some(agent) = HostAgent::start(env, "sshpushrule") else {
        return;
    };
    let (fp1, fp2) = (agent.keys[0].0.clone(), agent.keys[1].0.clone());
    let k = (std::process::id() * 4 + 48) % 16000;
    let Some(server) = SshHost::start(env, "push-rule.test", k, &[&agent.keys[0].1]) else {
        return;
    };
    let user = &env.user;
    let name = &server.name;
    let (ws, cfg) = env.workspace_with_config(
        "sshpushrule",
        &format!(
            "{}[profiles.nomatch.ssh_agent]\nkeys = [\"{fp1}\", \"{fp2}\"]\napprove = \"rule\"\n\
             rules = [\n  {{ key = \"{fp2}\", host = \"{name}\", user = \"{user}\" }},\n  \
             {{ key = \"{fp1}\", host = \"other.test\", user = \"{user}\" }},\n  \
             {{ key = \"{fp1}\", host = \"{name}\", user = \"git\" }},\n  \
             {{ key = \"{fp1}\", namespace = \"git\" }},\n]\n\
             {}[profiles.match.ssh_agent]\nkeys = [\"{fp1}\"]\napprove = \"rule\"\n\
             rules = [{{ key = \"{fp1}\", host = \"{name}\", user = \"{user}\" }}]\n",
            network("nomatch", &server),
            network("match", &server),
        ),
    );
    client(env, &ws, &agent, &server);
    let url = server.url(env);
    let push = |profile: &str, branch: &str| {
        let r = env
            .lz_in(&ws, profile, &["sh", "/workspace/push.sh", branch, &url])
            .config_home(&cfg)
            .env("SSH_AUTH_SOCK", agent.sock.to_str().unwrap())
            .run();
        eprintln!("{profile}: {r:?}");
        r
    };
    // Other host, other key, other user: no rule matches.
    let r = push("nomatch", "nomatch");
    if !runs_ssh(&r.stderr) {
        return;
    }
    assert!(
        pushed_commit(&r.stdout, "nomatch").is_some() && r.stdout.contains("rc-push-nomatch="),
        "{r:?}"
    );
    assert!(!r.stdout.contains("rc-push-nomatch=0"), "{r:?}");
    assert_eq!(server.head(env, "nomatch"), None, "pushed with no matching rule");
    assert_eq!(server.refs(env), "", "the server's repository changed");
    let log = audit_of(env, "nomatch", &ws);
    let login = format!("login user=\"{user}\" host_key={}", server.host_fp);
    assert!(
        log.contains(&format!(
            "key={fp1} {login} -> refused: approve = \"rule\" and no rule matches"
        )),
        "{log}"
    );
    assert!(!log.contains("signed"), "{log}");

    // The matching rule: pushed, no prompt.
    let r = push("match", "match");
    let sent = pushed_commit(&r.stdout, "match").unwrap_or_else(|| panic!("{r:?}"));
    assert!(r.stdout.contains("rc-push-match=0"), "{r:?}\nsshd: {}", server.log());
    assert_eq!(server.head(env, "match"), Some(sent), "{}", server.refs(env));
    let log = audit_of(env, "match", &ws);
    assert!(
        log.contains(&format!("key={fp1} {login} -> signed: approved by rule 0")),
        "{log}"
    );
    assert!(!log.contains("no terminal"), "{log}");
}
