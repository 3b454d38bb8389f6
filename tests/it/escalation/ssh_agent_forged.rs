//! Forged, replayed and other sessions' SSH agent records (issue 51,
//! acceptance 4; docs/escalation.md "Mailbox"): a session writes agent
//! records into the mailbox itself (`lazaret-escalate
//! --print-agent-request`, then edited), as a compromised sandbox could.
//! Each asks for a signature a rule would approve if the record were
//! genuine; each is refused with nothing signed: no result, a `rejected`
//! line in the audit log, and the developer's agent is never asked (its
//! debug log counts the sign requests it got).

use std::time::Duration;

use super::ssh_agent::{tools, HostAgent};
use crate::escalation::broker::audit;
use crate::harness::eventually;
use crate::require_env;

/// Mailbox records from inside (python3 in the image). Records are
/// frames: `u32 LE length`, tag, then fields (`u32 LE length` + bytes, a
/// `u64 LE` generation); an agent record (tag 2) holds id, domain,
/// generation, session, client, conn, body, cert, sig.
///
/// - `body PUB NAMESPACE TEXT`: the agent sign request (hex) for an
///   `ssh-keygen -Y sign -n NAMESPACE` of TEXT with the key in file PUB;
/// - `field REC NAME`: a field of a record (`id`, `session`, ...);
/// - `set REC NAME VALUE OUT`: the record with one field replaced by
///   VALUE (`hex:HEX`: those bytes), the signature left as it was;
/// - `submit REC`: drops REC into the mailbox under its id, waits until
///   the host took it and up to 3 s more for a result; prints
///   `result=HEX` of the answer's body, or `result=none`.
const REC: &str = r#"import base64, hashlib, os, struct, sys, time
FIELDS = ["id", "domain", "generation", "session", "client", "conn", "body", "cert", "sig"]
def ssh_str(b):
    return struct.pack(">I", len(b)) + b
def parse(d):
    assert struct.unpack("<I", d[:4])[0] == len(d) - 4 and d[4] == 2, "not an agent record"
    out, i = {}, 5
    for f in FIELDS:
        if f == "generation":
            out[f] = d[i:i + 8]; i += 8
        else:
            n = struct.unpack("<I", d[i:i + 4])[0]
            out[f] = d[i + 4:i + 4 + n]; i += 4 + n
    return out
def build(r):
    p = bytes([2])
    for f in FIELDS:
        p += r[f] if f == "generation" else struct.pack("<I", len(r[f])) + r[f]
    return struct.pack("<I", len(p)) + p
cmd = sys.argv[1]
if cmd == "body":
    blob = base64.b64decode(open(sys.argv[2]).read().split()[1])
    data = b"SSHSIG" + ssh_str(sys.argv[3].encode()) + ssh_str(b"") + ssh_str(b"sha512") \
        + ssh_str(hashlib.sha512(sys.argv[4].encode()).digest())
    print((bytes([13]) + ssh_str(blob) + ssh_str(data) + struct.pack(">I", 0)).hex())
elif cmd == "field":
    print(parse(open(sys.argv[2], "rb").read())[sys.argv[3]].decode())
elif cmd == "set":
    r = parse(open(sys.argv[2], "rb").read())
    v = sys.argv[4]
    r[sys.argv[3]] = bytes.fromhex(v[4:]) if v.startswith("hex:") else v.encode()
    open(sys.argv[5], "wb").write(build(r))
elif cmd == "submit":
    d = open(sys.argv[2], "rb").read()
    n = parse(d)["id"].decode()
    q, res = "/.lazaret/mailbox/requests", "/.lazaret/mailbox/results/%s.res" % n
    before = os.path.exists(res) and os.path.getmtime(res)
    open("%s/.tmp-%s" % (q, n), "wb").write(d)
    os.rename("%s/.tmp-%s" % (q, n), "%s/%s.req" % (q, n))
    t = time.monotonic()
    while os.path.exists("%s/%s.req" % (q, n)) and time.monotonic() - t < 60:
        time.sleep(0.05)
    t = time.monotonic()
    out = "none"
    while time.monotonic() - t < 3:
        if os.path.exists(res) and os.path.getmtime(res) != before and os.path.getsize(res) > 0:
            r = open(res, "rb").read()
            i = 5 + 4 + struct.unpack("<I", r[5:9])[0]
            out = r[i + 4:i + 4 + struct.unpack("<I", r[i:i + 4])[0]].hex()
            break
        time.sleep(0.05)
    print("result=" + out, flush=True)
"#;

// Issue 51, acceptance 4: forged, replayed, other sessions' and ended
// sessions' agent records are refused, and nothing is signed.
#[test]
fn forged_replayed_and_other_sessions_agent_records_sign_nothing() {
    let (env, _g) = require_env!(shared);
    let Some(agent) = HostAgent::start_with(env, "sshforge", true) else {
        return;
    };
    let fp1 = agent.keys[0].0.clone();
    let (ws, cfg) = env.workspace_with_config(
        "sshforge",
        &format!(
            "[profiles.default.ssh_agent]\nkeys = [\"{fp1}\"]\napprove = \"rule\"\n\
             rules = [{{ key = \"{fp1}\", namespace = \"git\" }}]\n"
        ),
    );
    tools(env, &ws, &agent);
    env.write(&ws.join("rec.py"), REC);
    let run = |script: &str| {
        env.lz_sh(&ws, script)
            .config_home(&cfg)
            .env("SSH_AUTH_SOCK", agent.sock.to_str().unwrap())
    };
    // A session holding the Domain open throughout, so the sessions
    // below come and go in one generation.
    let _keep = run("sleep 600").spawn_bg();
    // Session A prints a genuine record of its own (never sent), then
    // waits until the test lets it end.
    let mut a = run("P='python3 /workspace/rec.py'; \
         lazaret-escalate --print-agent-request $($P body /workspace/k1.pub git from-a) > /workspace/a.rec; \
         $P field /workspace/a.rec session > /workspace/a.sid; \
         i=0; while [ ! -e /workspace/a.done ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo a-done")
    .spawn_bg();
    assert!(
        eventually(Duration::from_secs(120), || {
            std::fs::read_to_string(ws.join("a.sid")).is_ok_and(|s| s.trim().len() > 8)
        }),
        "session A did not print its record"
    );
    // Session B: one genuine record (signed by the rule), then the same
    // record again, a record whose body was changed after signing, and
    // its own record naming session A.
    let b = run(
        "set -u; P='python3 /workspace/rec.py'; cd /tmp; \
         lazaret-escalate --print-agent-request $($P body /workspace/k1.pub git genuine) > ok.rec; \
         echo ok-$($P submit ok.rec); \
         echo replay-$($P submit ok.rec); \
         lazaret-escalate --print-agent-request $($P body /workspace/k1.pub git edited) > e.rec; \
         $P set e.rec body hex:$($P body /workspace/k1.pub git swapped) e2.rec; \
         echo body-$($P submit e2.rec); \
         lazaret-escalate --print-agent-request $($P body /workspace/k1.pub git as-a) > s.rec; \
         $P set s.rec session $(cat /workspace/a.sid) s2.rec; \
         echo other-$($P submit s2.rec); \
         $P field ok.rec id > /workspace/ids; $P field e2.rec id >> /workspace/ids; $P field s2.rec id >> /workspace/ids",
    )
    .run();
    eprintln!("{b:?}");
    let out = &b.stdout;
    // The genuine record: signed once (SSH_AGENT_SIGN_RESPONSE, 14).
    assert!(out.contains("ok-result=0e"), "{b:?}");
    for case in ["replay", "body", "other"] {
        assert!(
            out.contains(&format!("{case}-result=none")),
            "{case}: a result for a refused record: {b:?}"
        );
    }
    // Session A ends; its genuine record, sent now, is refused.
    std::fs::write(ws.join("a.done"), "").unwrap();
    assert!(
        eventually(Duration::from_secs(60), || a.0.try_wait().ok().flatten().is_some()),
        "session A did not end"
    );
    let ended = run("cd /tmp && python3 /workspace/rec.py submit /workspace/a.rec").run();
    eprintln!("{ended:?}");
    assert!(ended.stdout.contains("result=none"), "{ended:?}");
    let log = audit(env, &ws);
    eprintln!("audit:\n{log}");
    let ids: Vec<String> = std::fs::read_to_string(ws.join("ids"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    let a_id = std::process::Command::new("python3")
        .arg("-c")
        .arg(REC)
        .args(["field", ws.join("a.rec").to_str().unwrap(), "id"])
        .output()
        .unwrap();
    let a_id = String::from_utf8_lossy(&a_id.stdout).trim().to_string();
    for (id, why) in [
        (&ids[0], "replayed request id"),
        (&ids[1], "signature does not match the record"),
        (&ids[2], "client does not match the session"),
        (&a_id, "no such session"),
    ] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("rejected file={id}.req")))
            .unwrap_or_else(|| panic!("no rejection of {id}:\n{log}"));
        assert!(line.contains(why), "{line}");
    }
    // One signature in all: the genuine record's.
    assert_eq!(log.matches("signed: approved by rule 0").count(), 1, "{log}");
    assert_eq!(
        agent.sign_requests(),
        1,
        "the host agent was asked to sign more than once"
    );
    drop(a);
}
