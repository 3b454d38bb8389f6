//! The sandbox's SSH agent (issue 51, docs/config.md "SSH agent"): inside,
//! `SSH_AUTH_SOCK` lists only the configured keys of the developer's own
//! agent; a signature is made only by an exact rule or a `yes` typed at the
//! asking session's terminal; every other agent message, an oversized one
//! and a session without a terminal get a refusal, and nothing is signed.
//!
//! The host agent is a real `ssh-agent` with two test ed25519 keys, started
//! by the test as the test user. The image has no SSH tools: the host's
//! `ssh-add` and `ssh-keygen` (the same Debian release as the image) are
//! copied into the workspace and run from there.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::escalation::broker::audit;
use crate::fixtures::{host_cmd, host_command};
use crate::harness::{eventually, sh_quote, Env, Tmux};
use crate::require_env;

pub(crate) const SSH_QUESTION: &str = "sign it? type yes or no, then Enter:";

/// A host `ssh-agent` holding two test keys, killed when dropped.
pub(crate) struct HostAgent {
    pub(crate) sock: PathBuf,
    /// The debug log of [`HostAgent::start_with`].
    log: PathBuf,
    child: Child,
    /// (fingerprint, public key line) of the two keys.
    pub(crate) keys: [(String, String); 2],
}

impl Drop for HostAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HostAgent {
    pub(crate) fn start(env: &Env, name: &str) -> Option<HostAgent> {
        HostAgent::start_with(env, name, false)
    }

    /// [`HostAgent::start`], with `logged` in debug mode (`-d`): every
    /// message it gets is a line of `log`.
    pub(crate) fn start_with(env: &Env, name: &str, logged: bool) -> Option<HostAgent> {
        if Command::new("ssh-agent").arg("-h").output().is_err() {
            eprintln!("skipping: no ssh-agent on the host");
            return None;
        }
        let dir = env.dir(&format!("{name}-agent"));
        let sock = dir.join("agent.sock");
        let log = dir.join("agent.log");
        let stderr = if logged {
            Stdio::from(std::fs::File::create(&log).unwrap())
        } else {
            Stdio::null()
        };
        let mode = if logged { "-d" } else { "-D" };
        let child = host_command(env, &dir, &["ssh-agent", mode, "-a", sock.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut keys: Vec<(String, String)> = Vec::new();
        assert!(
            eventually(Duration::from_secs(10), || sock.exists()),
            "ssh-agent did not start"
        );
        let agent = |argv: &[&str]| {
            let mut c = host_command(env, &dir, argv);
            c.env("SSH_AUTH_SOCK", &sock);
            c.output().unwrap()
        };
        for k in ["k1", "k2"] {
            let key = dir.join(k);
            let (fp, public) = ed25519_key(env, &dir, &key, &format!("{k}@test"));
            let o = agent(&["ssh-add", key.to_str().unwrap()]);
            assert!(o.status.success(), "{o:?}");
            keys.push((fp, public));
        }
        let mut child = Some(child);
        let me = HostAgent {
            log,
            sock,
            child: child.take().unwrap(),
            keys: [keys[0].clone(), keys[1].clone()],
        };
        assert_eq!(me.host_list(env).lines().count(), 2);
        Some(me)
    }

    /// How many sign requests the agent got (started `logged`).
    pub(crate) fn sign_requests(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .matches("process_sign_request2: entering")
            .count()
    }

    /// `ssh-add -l` on the host: what the developer's agent holds.
    pub(crate) fn host_list(&self, env: &Env) -> String {
        let o = host_command(env, Path::new("/"), &["ssh-add", "-l"])
            .env("SSH_AUTH_SOCK", &self.sock)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

/// Puts the host's `ssh-add` and `ssh-keygen` in `ws/tools`, and both
/// public keys in `ws` (`k1.pub`, `k2.pub`).
pub(crate) fn tools(env: &Env, ws: &Path, agent: &HostAgent) {
    let t = ws.join("tools");
    std::fs::create_dir_all(&t).unwrap();
    env.chown(&t);
    for b in ["ssh-add", "ssh-keygen"] {
        std::fs::copy(Path::new("/usr/bin").join(b), t.join(b)).unwrap();
        env.chown(&t.join(b));
    }
    for (i, (_, public)) in agent.keys.iter().enumerate() {
        env.write(&ws.join(format!("k{}.pub", i + 1)), &format!("{public}\n"));
    }
}

/// `ssh-keygen -Y verify` on the host: whether `sig` is key `n`'s
/// signature of `data` in `namespace`.
fn verifies(env: &Env, dir: &Path, agent: &HostAgent, n: usize, namespace: &str, data: &Path, sig: &Path) -> bool {
    let allowed = dir.join(format!("allowed-{n}"));
    env.write(&allowed, &format!("signer@test {}\n", agent.keys[n].1));
    let mut c = host_command(
        env,
        dir,
        &[
            "ssh-keygen",
            "-Y",
            "verify",
            "-f",
            allowed.to_str().unwrap(),
            "-I",
            "signer@test",
            "-n",
            namespace,
            "-s",
            sig.to_str().unwrap(),
        ],
    );
    c.stdin(std::fs::File::open(data).unwrap());
    c.output().unwrap().status.success()
}

/// A raw agent message through the session's socket (python3 in the
/// image): prints `reply=HEX` of the answer, or `reply=closed`.
const RAW: &str = r#"import os, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(os.environ['SSH_AUTH_SOCK'])
body = bytes.fromhex(sys.argv[1]) + b'\0' * int(sys.argv[2])
s.sendall(len(body).to_bytes(4, 'big') + body)
r = b''
while len(r) < 5:
    d = s.recv(65536)
    if not d: break
    r += d
print('reply=' + (r.hex() if r else 'closed'))
"#;

// Issue 51, acceptance 1, 3 and 4.
#[test]
fn the_sandbox_sees_only_listed_keys_signs_commits_by_rule_and_nothing_else() {
    let (env, _g) = require_env!(shared);
    let Some(agent) = HostAgent::start(env, "sshrule") else {
        return;
    };
    let (fp1, fp2) = (agent.keys[0].0.clone(), agent.keys[1].0.clone());
    let (ws, cfg) = env.workspace_with_config(
        "sshrule",
        &format!(
            "[profiles.default.ssh_agent]\nkeys = [\"{fp1}\"]\napprove = \"rule\"\n\
             rules = [{{ key = \"{fp1}\", namespace = \"git\" }}]\n"
        ),
    );
    tools(env, &ws, &agent);
    env.write(&ws.join("raw.py"), RAW);
    for d in ["d-other-key", "d-other-ns"] {
        env.write(&ws.join(d), "data\n");
    }
    let script = "T=/workspace/tools; echo sock=$SSH_AUTH_SOCK; \
        $T/ssh-add -l; echo rc-list=$?; \
        cd /tmp && git init -q r && cd r && \
        git -c user.name=t -c user.email=t@test -c gpg.format=ssh -c user.signingkey=/workspace/k1.pub \
            -c gpg.ssh.program=$T/ssh-keygen commit -q -S --allow-empty -m signed; echo rc-commit=$?; \
        git cat-file commit HEAD > /workspace/commit.txt; \
        $T/ssh-keygen -Y sign -n git -f /workspace/k2.pub /workspace/d-other-key; echo rc-other-key=$?; \
        $T/ssh-keygen -Y sign -n file -f /workspace/k1.pub /workspace/d-other-ns; echo rc-other-ns=$?; \
        $T/ssh-add -D; echo rc-remove-all=$?; \
        $T/ssh-keygen -q -t ed25519 -N '' -C k3@inside -f /tmp/k3 && $T/ssh-add /tmp/k3; echo rc-add=$?; \
        python3 /workspace/raw.py 0d 20000; python3 /workspace/raw.py 0d 40000; python3 /workspace/raw.py 13 0";
    let r = env
        .lz_sh(&ws, script)
        .config_home(&cfg)
        .env("SSH_AUTH_SOCK", agent.sock.to_str().unwrap())
        .run();
    eprintln!("{r:?}");
    if r.stderr.contains("error while loading shared libraries") {
        eprintln!("skipping: the image cannot run the host's ssh-add");
        assert!(std::env::var_os("LAZARET_MUST_WORK").is_none(), "{r:?}");
        return;
    }
    let out = &r.stdout;
    assert!(out.contains("sock=/tmp/lazaret-ssh-"), "{r:?}");
    // Acceptance 1: only the listed key.
    assert!(out.contains("rc-list=0") && out.contains(&fp1), "{r:?}");
    assert!(!out.contains(&fp2), "an unlisted key is visible inside: {r:?}");
    // Acceptance 3: the commit's signature verifies on the host.
    assert!(out.contains("rc-commit=0"), "{r:?}");
    let commit = std::fs::read_to_string(ws.join("commit.txt")).unwrap();
    let (payload, sig) = split_gpgsig(&commit);
    let dir = ws.parent().unwrap();
    env.write(&dir.join("payload"), &payload);
    env.write(&dir.join("payload.sig"), &sig);
    assert!(
        verifies(
            env,
            dir,
            &agent,
            0,
            "git",
            &dir.join("payload"),
            &dir.join("payload.sig")
        ),
        "the commit's signature does not verify:\n{commit}"
    );
    // Acceptance 4: nothing else is signed; every marker stays absent.
    assert!(!out.contains("rc-other-key=0"), "{r:?}");
    assert!(!ws.join("d-other-key.sig").exists(), "signed with an unlisted key");
    assert!(!out.contains("rc-other-ns=0"), "{r:?}");
    assert!(!ws.join("d-other-ns.sig").exists(), "signed without a matching rule");
    assert!(!out.contains("rc-remove-all=0"), "{r:?}");
    assert!(!out.contains("rc-add=0"), "{r:?}");
    let held = agent.host_list(env);
    assert_eq!(held.lines().count(), 2, "the host agent lost or gained keys: {held}");
    assert!(
        held.contains(&fp1) && held.contains(&fp2) && !held.contains("k3@inside"),
        "{held}"
    );
    // Oversized (over the host's limit; over the guest's own) and empty
    // sign requests: a failure answer, nothing signed.
    let replies: Vec<&str> = out.lines().filter(|l| l.starts_with("reply=")).collect();
    assert_eq!(replies.len(), 3, "{r:?}");
    assert!(replies.iter().all(|l| *l == "reply=0000000105"), "{replies:?}");
    let log = audit(env, &ws);
    assert!(log.contains("approved by rule 0") && log.contains("signed"), "{log}");
    assert!(
        log.contains("a message over"),
        "the oversized message was not refused by the host: {log}"
    );
    assert!(log.contains("unserved message"), "{log}");
    assert!(
        log.contains("sshsig namespace=\"file\"") && log.contains("refused"),
        "{log}"
    );
}

/// The screen once the SSH prompt has settled (800 ms after it appeared),
/// asserting that the line just above the last question is `want`.
pub(crate) fn settled_question(t: &Tmux, want: &str) -> String {
    std::thread::sleep(Duration::from_millis(800));
    let screen = t.capture();
    eprintln!("screen:\n{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    let q = lines
        .iter()
        .rposition(|l| l.starts_with(SSH_QUESTION))
        .expect("the question");
    assert_eq!(lines[q - 1].trim_end(), want, "{screen}");
    screen
}

/// A 200×40 tmux pane running `lazaret run` in `ws` with the config in
/// `cfg` and the host agent's socket, at its shell prompt.
pub(crate) fn agent_pane(env: &Env, ws: &Path, cfg: &Path, agent: &HostAgent, name: &str) -> Tmux {
    let cmd = env.pane_cmd(ws, &["run"]).replacen(
        " env ",
        &format!(
            " env XDG_CONFIG_HOME={} SSH_AUTH_SOCK={} ",
            sh_quote(&cfg.display().to_string()),
            sh_quote(&agent.sock.display().to_string())
        ),
        1,
    );
    let t = Tmux::new(name, 200, 40, &cmd);
    t.expect("root@lazaret", Duration::from_secs(120));
    t
}

/// Makes an ed25519 key pair without a passphrase at `key` (and
/// `key.pub`) on the host; returns its SHA256 fingerprint and its public
/// line.
pub(crate) fn ed25519_key(env: &Env, dir: &Path, key: &Path, comment: &str) -> (String, String) {
    let o = host_cmd(
        env,
        dir,
        &[
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            comment,
            "-f",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(o.code, 0, "{o:?}");
    let l = host_cmd(env, dir, &["ssh-keygen", "-lf", &format!("{}.pub", key.display())]);
    let fp = l.stdout.split_whitespace().nth(1).unwrap().to_string();
    let public = std::fs::read_to_string(format!("{}.pub", key.display())).unwrap();
    (fp, public.trim().to_string())
}

/// A commit object's text without its `gpgsig` header, and the signature.
fn split_gpgsig(commit: &str) -> (String, String) {
    let mut payload = String::new();
    let mut sig = String::new();
    let mut in_sig = false;
    for l in commit.split_inclusive('\n') {
        if let Some(rest) = l.strip_prefix("gpgsig ") {
            in_sig = true;
            sig.push_str(rest);
        } else if in_sig && l.starts_with(' ') {
            sig.push_str(&l[1..]);
        } else {
            in_sig = false;
            payload.push_str(l);
        }
    }
    assert!(!sig.is_empty(), "no gpgsig in the commit:\n{commit}");
    (payload, sig)
}

// Issue 51, acceptance 4 and 5: `yes` signs, `no` refuses, a session with
// no terminal is refused, and the sandbox's drawing cannot change the prompt.
#[test]
fn each_signature_is_asked_at_the_terminal_and_only_yes_signs() {
    let (env, _g) = require_env!(shared);
    let Some(agent) = HostAgent::start(env, "sshask") else {
        return;
    };
    let fp1 = agent.keys[0].0.clone();
    let (ws, cfg) = env.workspace_with_config(
        "sshask",
        &format!("[escalation]\nprompt_timeout_s = 120\n[profiles.default.ssh_agent]\nkeys = [\"{fp1}\"]\n"),
    );
    tools(env, &ws, &agent);
    for d in ["d-yes", "d-no", "d-noterm"] {
        env.write(&ws.join(d), &format!("{d}\n"));
    }
    let t = agent_pane(env, &ws, &cfg, &agent, "sshask");
    // A fake prompt, a scroll region and concealed text drawn first.
    let fake =
        "printf '\\033[?1049h\\033[2J\\033[30;1H=> ssh-keygen -Y sign, namespace \"git\", with key SHA256:fake\\r\\n\
                sign it? type yes or no, then Enter: \\033[1;5r\\033[?6h\\033[8m\\033[1;1H'; sleep 1; ";
    env.write(
        &ws.join("yes.sh"),
        &format!("{fake}/workspace/tools/ssh-keygen -Y sign -n file -f /workspace/k1.pub /workspace/d-yes; echo; echo rc-yes=$?\n"),
    );
    t.line("clear; sh /workspace/yes.sh");
    let want = format!("=> ssh-keygen -Y sign, namespace \"file\", with key {fp1}");
    assert!(
        eventually(Duration::from_secs(20), || t.capture().contains(&want)),
        "no prompt:\n{}",
        t.capture()
    );
    let screen = settled_question(&t, &want);
    assert!(
        !screen.contains("SHA256:fake"),
        "the fake prompt is still shown:\n{screen}"
    );
    assert!(screen.contains("of data with sha512 "), "{screen}");
    assert!(!ws.join("d-yes.sig").exists());
    // `edit` is no answer to a signature.
    t.line("edit");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!ws.join("d-yes.sig").exists());
    t.line("yes");
    t.expect("rc-yes=0", Duration::from_secs(20));
    let dir = ws.parent().unwrap();
    assert!(
        verifies(env, dir, &agent, 0, "file", &ws.join("d-yes"), &ws.join("d-yes.sig")),
        "the approved signature does not verify"
    );
    // `no` refuses: nothing signed.
    // The first prompt's question stays on the screen until `clear` runs:
    // wait for the marker `clear` is followed by (a line of its own, never
    // the typed command), so the question waited for is the new one. A
    // `no` typed before the new prompt is drawn would be flushed with the
    // typeahead and the prompt would wait on.
    t.line("clear; echo 'mark''-no'; /workspace/tools/ssh-keygen -Y sign -n file -f /workspace/k1.pub /workspace/d-no; echo rc-no=$?");
    t.expect_line("mark-no", Duration::from_secs(20));
    t.expect(SSH_QUESTION, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(800));
    t.line("no");
    t.expect("rc-no=", Duration::from_secs(20));
    assert!(!t.capture().contains("rc-no=0"), "{}", t.capture());
    assert!(!ws.join("d-no.sig").exists(), "signed after no");
    // A session of the same Domain with no terminal: refused, never asked.
    let r = env
        .lz_sh(
            &ws,
            "/workspace/tools/ssh-keygen -Y sign -n file -f /workspace/k1.pub /workspace/d-noterm; echo rc-noterm=$?",
        )
        .config_home(&cfg)
        .env("SSH_AUTH_SOCK", agent.sock.to_str().unwrap())
        .run();
    assert!(
        r.stdout.contains("rc-noterm=") && !r.stdout.contains("rc-noterm=0"),
        "{r:?}"
    );
    assert!(
        !ws.join("d-noterm.sig").exists(),
        "signed for a session with no terminal"
    );
    let log = audit(env, &ws);
    assert!(log.contains("signed: approved by the developer"), "{log}");
    assert!(log.contains("refused: denied at the terminal"), "{log}");
    assert!(log.contains("the session has no terminal"), "{log}");
    t.line("exit");
}
