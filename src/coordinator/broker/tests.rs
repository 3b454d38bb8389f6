//! The mailbox intake against what a hostile sandbox can put there. Real
//! files in a temporary directory, the real Trust Anchor; nothing runs
//! (the default settings have no rule, so none auto-approves; where there
//! are rules, only requests they refuse are sent).

use super::*;
use crate::escalation::REQUESTS_MAX_BYTES;
use crate::session_key::SessionKey;
use crate::trust::Role;

const CLIENT: &str = "0123456789abcdef";
const SESSION: &str = "fedcba9876543210";

struct Fixture {
    dir: PathBuf,
    broker: Broker,
    key: SessionKey,
    cert: Vec<u8>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(tag: &str) -> Fixture {
    fixture_with(tag, |_| Escalation::default())
}

/// A fixture whose escalation settings `esc` makes from the workspace path.
fn fixture_with(tag: &str, esc: impl Fn(&Path) -> Escalation) -> Fixture {
    let dir = std::env::temp_dir().join(format!("lz-broker-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ws")).unwrap();
    let ws = std::fs::canonicalize(dir.join("ws")).unwrap();
    let anchor = TrustAnchor::new(&"d".repeat(20), 3, "default").unwrap();
    let cred = anchor.issue(Role::ClientCli, CLIENT, Some(SESSION)).unwrap();
    let key = SessionKey::parse(&cred.export().unwrap()).unwrap();
    let cert = key.cert.clone();
    // The broker exists with escalation on (or for a profile's SSH agent,
    // where command requests are refused).
    let mut config = esc(&ws);
    config.enabled = true;
    let broker = Broker::new(anchor, config, &ws, &dir.join("mbox"), &dir.join("audit.log")).unwrap();
    Fixture { dir, broker, key, cert }
}

fn request(f: &Fixture, n: u8) -> Request {
    Request {
        id: format!("{n:02x}").repeat(16),
        domain: "d".repeat(20),
        generation: 3,
        session: SESSION.into(),
        client: CLIENT.into(),
        cwd: String::new(),
        timeout_secs: 10,
        justification: "test".into(),
        argv: vec!["true".into()],
        cert: f.cert.clone(),
    }
}

fn record(f: &Fixture, req: &Request) -> Vec<u8> {
    let sig = f.key.sign(&mailbox::signed_part(req));
    mailbox::encode_request(req, &sig)
}

impl Fixture {
    fn put(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.broker.requests_dir().join(name);
        std::fs::write(&p, data).unwrap();
        p
    }
    fn scan(&mut self) -> Vec<String> {
        let cert = self.cert.clone();
        let view = move |s: &str| {
            (s == SESSION).then(|| SessionView {
                client_id: CLIENT.into(),
                cert_der: cert.clone(),
            })
        };
        self.broker.scan(&view).into_iter().map(|(_, r)| r.id).collect()
    }
    fn left(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.broker.requests_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
    fn audit(&self) -> String {
        std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default()
    }
    fn results(&self) -> usize {
        // The results dir is not listable by its mode (0300) unless we
        // are root; open it up for the check.
        let r = self.broker.results_dir();
        std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o700)).unwrap();
        let n = std::fs::read_dir(r).unwrap().count();
        std::fs::set_permissions(r, std::fs::Permissions::from_mode(0o300)).unwrap();
        n
    }
}

#[test]
fn a_working_directory_is_resolved_beneath_the_workspace_without_symlinks() {
    let f = fixture("cwd");
    let ws = std::fs::canonicalize(f.dir.join("ws")).unwrap();
    std::fs::create_dir_all(ws.join("a/b")).unwrap();
    std::os::unix::fs::symlink("a", ws.join("link")).unwrap();
    std::os::unix::fs::symlink("..", ws.join("a/up")).unwrap();
    std::fs::write(ws.join("file"), b"").unwrap();
    let id = |d: &OwnedFd| sys::fd_identity(d).unwrap();
    let ab = f.broker.resolve_cwd("a/b").unwrap();
    let meta = std::fs::metadata(ws.join("a/b")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(id(&ab), (meta.dev(), meta.ino()));
    assert!(f.broker.resolve_cwd("").is_ok());
    for (rel, why) in [
        ("link", "symlink"),
        ("link/b", "symlink"),
        ("a/up", "symlink"),
        ("a/../..", "plain path"),
        ("/etc", "plain path"),
        ("missing", "no such directory"),
        ("file", "not a directory"),
    ] {
        let e = f.broker.resolve_cwd(rel).unwrap_err();
        assert!(e.contains(why), "{rel}: {e}");
    }
}

#[test]
fn a_well_formed_signed_request_is_accepted_once_and_removed() {
    let mut f = fixture("ok");
    let req = request(&f, 1);
    f.put(&format!("{}.req", req.id), &record(&f, &req));
    assert_eq!(f.scan(), vec![req.id.clone()]);
    assert!(f.left().is_empty());
    // The same record again is a replay.
    f.put(&format!("{}.req", req.id), &record(&f, &req));
    assert!(f.scan().is_empty());
    assert!(f.audit().contains("replayed request id"), "{}", f.audit());
    assert!(f.left().is_empty());
    assert_eq!(f.results(), 0);
}

#[test]
fn an_oversize_record_is_rejected_unread() {
    let mut f = fixture("big");
    let req = request(&f, 2);
    let mut data = record(&f, &req);
    data.resize(escalation::MAX_REQUEST_BYTES + 1, b'\n');
    f.put(&format!("{}.req", req.id), &data);
    assert!(f.scan().is_empty());
    assert!(f.audit().contains("over the limit"), "{}", f.audit());
    assert!(f.left().is_empty());
}

#[test]
fn a_symlink_is_never_followed() {
    let mut f = fixture("link");
    let req = request(&f, 3);
    // A valid record outside the mailbox, reached through a symlink
    // with a well-formed name: the marker file must stay untouched.
    let target = f.dir.join("outside.req");
    std::fs::write(&target, record(&f, &req)).unwrap();
    std::os::unix::fs::symlink(&target, f.broker.requests_dir().join(format!("{}.req", req.id))).unwrap();
    // And one to a directory with a junk name.
    std::os::unix::fs::symlink(&f.dir, f.broker.requests_dir().join("up")).unwrap();
    assert!(f.scan().is_empty());
    assert!(f.left().is_empty());
    assert!(target.exists(), "the symlink's target was removed");
    assert!(f.dir.join("ws").is_dir(), "a directory symlink was followed");
    assert!(f.audit().contains("cannot open: a symlink"), "{}", f.audit());
}

#[test]
fn junk_is_removed_and_does_not_block_a_request() {
    let mut f = fixture("junk");
    let good = request(&f, 4);
    f.put(&format!("{}.req", good.id), &record(&f, &good));
    for name in [
        "x",
        "ABCDEF0123456789ABCDEF0123456789.req",
        "0123.req",
        "a b.req",
        ".hidden",
        "\u{202e}.req",
    ] {
        f.put(name, b"junk");
    }
    std::fs::create_dir(f.broker.requests_dir().join(format!("{}.req", "5".repeat(32)))).unwrap();
    std::fs::create_dir_all(f.broker.requests_dir().join("deep/er")).unwrap();
    std::os::unix::net::UnixListener::bind(f.broker.requests_dir().join("sock")).unwrap();
    // A young temporary file is a writer at work: it stays.
    f.put(".tmp-young", b"half a record");
    assert_eq!(f.scan(), vec![good.id.clone()]);
    assert_eq!(f.left(), vec![".tmp-young".to_string()]);
    assert!(f.audit().contains("not a regular file"), "{}", f.audit());
}

#[test]
fn an_unreadable_or_garbled_record_is_rejected_without_a_result() {
    let mut f = fixture("mode");
    let a = request(&f, 6);
    let p = f.put(&format!("{}.req", a.id), b"LZESC1\ngarbage\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    let b = request(&f, 7);
    f.put(&format!("{}.req", b.id), &record(&f, &b));
    assert_eq!(f.scan(), vec![b.id.clone()]);
    assert!(f.left().is_empty());
    assert_eq!(f.results(), 0);
}

#[test]
fn a_record_in_the_former_text_format_cut_or_with_trailing_bytes_is_malformed() {
    let mut f = fixture("frame");
    let a = request(&f, 14);
    f.put(&format!("{}.req", a.id), format!("LZESC1\nid {}\n", a.id).as_bytes());
    let b = request(&f, 15);
    let rec = record(&f, &b);
    f.put(&format!("{}.req", b.id), &rec[..rec.len() - 1]);
    let c = request(&f, 16);
    let mut rec = record(&f, &c);
    rec.push(0);
    f.put(&format!("{}.req", c.id), &rec);
    assert!(f.scan().is_empty());
    assert!(f.left().is_empty());
    assert_eq!(f.audit().matches("malformed record").count(), 3, "{}", f.audit());
    assert_eq!(f.results(), 0);
}

// Covers SR-9, FR-10.
#[test]
fn a_record_not_bound_to_its_name_session_or_key_is_rejected() {
    let mut f = fixture("bind");
    // Under another request's name.
    let a = request(&f, 8);
    f.put(&format!("{}.req", "9".repeat(32)), &record(&f, &a));
    // For a session that is not registered.
    let mut b = request(&f, 10);
    b.session = "0000000000000000".into();
    f.put(&format!("{}.req", b.id), &record(&f, &b));
    // Another generation.
    let mut c = request(&f, 11);
    c.generation = 2;
    f.put(&format!("{}.req", c.id), &record(&f, &c));
    // Signed by someone else's key (the signature does not verify).
    let d = request(&f, 12);
    let other = TrustAnchor::new(&"d".repeat(20), 3, "default").unwrap();
    let ok = other.issue(Role::ClientCli, CLIENT, Some(SESSION)).unwrap();
    let k = SessionKey::parse(&ok.export().unwrap()).unwrap();
    f.put(
        &format!("{}.req", d.id),
        &mailbox::encode_request(&d, &k.sign(&mailbox::signed_part(&d))),
    );
    // A changed byte after signing.
    let mut e = request(&f, 13);
    let sig = f.key.sign(&mailbox::signed_part(&e));
    e.argv = vec!["rm".into()];
    f.put(&format!("{}.req", e.id), &mailbox::encode_request(&e, &sig));
    assert!(f.scan().is_empty());
    assert!(f.left().is_empty());
    let audit = f.audit();
    for why in [
        "file name does not match the request id",
        "no such session",
        "another Domain or generation",
    ] {
        assert!(audit.contains(why), "{why}: {audit}");
    }
    assert_eq!(audit.matches("rejected").count(), 5, "{audit}");
    // INVARIANT: no result for a record that failed verification.
    assert_eq!(f.results(), 0);
}

#[test]
fn young_temporaries_are_bounded_by_bytes_not_only_by_age() {
    let mut f = fixture("bytes");
    // Over the record limit: gone on sight, young as it is.
    f.put(".tmp-big", &vec![0u8; escalation::MAX_REQUEST_BYTES + 1]);
    // Young and small: a writer's file in progress, kept.
    f.put(".tmp-small", b"partial");
    assert!(f.scan().is_empty());
    assert_eq!(f.left(), vec![".tmp-small".to_string()]);
    // Young files under the limit that add up to more than the cap: the
    // largest go until what is left is under it.
    let n = (REQUESTS_MAX_BYTES / escalation::MAX_REQUEST_BYTES as u64) as usize + 8;
    for i in 0..n {
        f.put(&format!(".tmp-{i}"), &vec![1u8; escalation::MAX_REQUEST_BYTES - i]);
    }
    assert!(f.scan().is_empty());
    let total: u64 = f
        .left()
        .iter()
        .map(|n| std::fs::metadata(f.broker.requests_dir().join(n)).unwrap().len())
        .sum();
    assert!(total <= REQUESTS_MAX_BYTES, "{total}");
    assert!(f.left().contains(&".tmp-small".to_string()), "the smallest stays");
    assert!(f.left().len() < n, "some went");
}

/// The session's certificate is checked once and kept: later requests
/// bearing exactly it are accepted on their signature alone, and every
/// other certificate is still checked in full, so the cache never lets a
/// changed byte, a second certificate for the same identity from this
/// anchor, or another anchor's certificate through.
#[test]
fn a_kept_session_certificate_still_refuses_every_other_record() {
    let mut f = fixture("kept");
    let first = request(&f, 20);
    f.put(&format!("{}.req", first.id), &record(&f, &first));
    assert_eq!(f.scan(), vec![first.id.clone()]);
    // The same key, a changed byte after signing.
    let mut a = request(&f, 21);
    let sig = f.key.sign(&mailbox::signed_part(&a));
    a.argv = vec!["rm".into()];
    f.put(&format!("{}.req", a.id), &mailbox::encode_request(&a, &sig));
    // A second certificate of this anchor for the very same identity.
    let twin = f.broker.anchor.issue(Role::ClientCli, CLIENT, Some(SESSION)).unwrap();
    let twin = SessionKey::parse(&twin.export().unwrap()).unwrap();
    let mut b = request(&f, 22);
    b.cert = twin.cert.clone();
    f.put(
        &format!("{}.req", b.id),
        &mailbox::encode_request(&b, &twin.sign(&mailbox::signed_part(&b))),
    );
    // The session's own certificate with a signature by the twin's key.
    let c = request(&f, 23);
    f.put(
        &format!("{}.req", c.id),
        &mailbox::encode_request(&c, &twin.sign(&mailbox::signed_part(&c))),
    );
    assert!(f.scan().is_empty());
    let audit = f.audit();
    assert!(audit.contains("certificate is not the session's own"), "{audit}");
    assert_eq!(audit.matches("rejected").count(), 3, "{audit}");
    // The session's own, well signed: accepted again.
    let d = request(&f, 24);
    f.put(&format!("{}.req", d.id), &record(&f, &d));
    assert_eq!(f.scan(), vec![d.id.clone()]);
    // Once the session ends, its certificate is checked in full again.
    f.broker.remove_credential(SESSION);
    assert!(f.broker.checked.is_empty());
    let e = request(&f, 25);
    f.put(&format!("{}.req", e.id), &record(&f, &e));
    assert_eq!(f.scan(), vec![e.id.clone()]);
}

#[test]
fn a_request_beyond_what_its_rule_grants_is_refused_with_one_line() {
    let rule = |argv: &[&str], trailing: bool| crate::config::AutoRule {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        allow_trailing_args: trailing,
        trailing_args: Vec::new(),
        cwd: String::new(),
        harden_git: true,
    };
    let mut f = fixture_with("rules", |ws| Escalation {
        enabled: true,
        auto_approve: vec![
            rule(&["git", "log"], true),
            rule(&[&ws.join("tool").display().to_string()], false),
            rule(&[&ws.join("sub/../tool").display().to_string()], false),
        ],
        prompt_timeout_s: 5,
    });
    let ws = std::fs::canonicalize(f.dir.join("ws")).unwrap();
    let mut asks = Vec::new();
    for (n, argv) in [
        vec!["git".to_string(), "log".into(), "--output=/tmp/x\n".into()],
        vec![ws.join("tool").display().to_string()],
        vec![ws.join("sub/../tool").display().to_string()],
    ]
    .into_iter()
    .enumerate()
    {
        let mut req = request(&f, n as u8 + 1);
        req.argv = argv;
        f.put(&format!("{}.req", req.id), &record(&f, &req));
        asks.extend(f.scan());
    }
    assert!(asks.is_empty(), "nothing is asked: {asks:?}");
    assert_eq!(f.results(), 3);
    let log = f.audit();
    let denied: Vec<&str> = log.lines().filter(|l| l.contains("result=denied")).collect();
    assert_eq!(denied.len(), 3, "{log}");
    assert!(
        denied[0].contains("decision=\"rule 0: git option '--output=/tmp/x")
            && denied[0].contains("' is refused: only options that neither read nor write"),
        "{log}"
    );
    assert!(
        denied[1].contains("rule 1: its program") && denied[1].contains("is a file of the workspace"),
        "{log}"
    );
    assert!(denied[2].contains("rule 2: its program"), "{log}");
}

/// Issue 51: an SSH agent record is verified exactly as a command request
/// (signature, session, replay) and handed to the coordinator; a forged or
/// replayed one gets no answer, and when escalation is off a command
/// request is refused.
#[test]
fn agent_records_are_verified_like_requests_and_command_requests_need_escalation_on() {
    let mut f = fixture_with("agent", |_| Escalation::default());
    let cert = f.cert.clone();
    let agent = |n: u8| crate::escalation::AgentRequest {
        id: format!("{n:02x}").repeat(16),
        domain: "d".repeat(20),
        generation: 3,
        session: SESSION.into(),
        client: CLIENT.into(),
        conn: "0123456789abcdef".into(),
        body: vec![11],
        cert: cert.clone(),
    };
    let a = agent(7);
    let rec = mailbox::encode_agent_request(&a, &f.key.sign(&mailbox::agent_signed_part(&a)));
    f.put(&format!("{}.req", a.id), &rec);
    assert!(
        f.scan().is_empty(),
        "an agent record is not a command for the developer"
    );
    assert_eq!(f.broker.agent.drain(..).collect::<Vec<_>>(), vec![a.clone()]);
    // Replayed, forged (signed over other bytes), another session's.
    f.put(&format!("{}.req", a.id), &rec);
    let b = agent(8);
    let forged = mailbox::encode_agent_request(&b, &f.key.sign(&mailbox::agent_signed_part(&agent(9))));
    f.put(&format!("{}.req", b.id), &forged);
    let c = crate::escalation::AgentRequest {
        session: "0000000000000000".into(),
        ..agent(10)
    };
    f.put(
        &format!("{}.req", c.id),
        &mailbox::encode_agent_request(&c, &f.key.sign(&mailbox::agent_signed_part(&c))),
    );
    assert!(f.scan().is_empty());
    assert!(f.broker.agent.is_empty(), "a bad agent record was accepted");
    assert_eq!(f.results(), 0, "a bad agent record got an answer");
    let log = f.audit();
    assert!(log.contains("replayed") && log.contains("no such session"), "{log}");
    // Escalation off (the broker is there for the SSH agent): a verified
    // command request is refused, not asked.
    f.broker.config.enabled = false;
    let req = request(&f, 11);
    f.put(&format!("{}.req", req.id), &record(&f, &req));
    assert!(f.scan().is_empty());
    assert_eq!(f.results(), 1);
    assert!(
        f.audit().contains("escalation of host commands is off"),
        "{}",
        f.audit()
    );
}
