//! Fuzz targets (docs/fuzzing.md): one function per parser that the
//! sandbox or a remote host feeds. Each takes arbitrary bytes and panics
//! only on a real bug: a panic inside the parser, or a broken property
//! (stated above each function). The coverage-guided harness in
//! `tests/fuzz/` and the corpus replay (`tests/fuzz_replay.rs`) call
//! these same functions; [`TARGETS`] names them.
//!
//! Thin on purpose: each target calls the public entry points, so a change
//! of their signatures is a few lines here.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use crate::config::hostname::HostName;
use crate::config::hosts::{self, HostPattern};
use crate::config::secrets::{SecretValue, DEFAULT_HEADERS};
use crate::net::gate::{self, Sniffed, Verdict};
use crate::net::policy::GatePlan;
use crate::net::subst::{Binding, Expect, RequestSide, ResponseSide, Upstream};
use crate::wire::mailbox;

/// A fuzz target: panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name its corpus directory and the harness use.
pub const TARGETS: [(&str, Target); 12] = [
    ("name", name),
    ("dns", dns),
    ("http", http),
    ("swap_request", swap_request),
    ("swap_response", swap_response),
    ("mailbox", mailbox),
    ("toml", toml),
    ("config", config),
    ("hook", hook),
    ("gate_config", gate_config),
    ("client_frames", client_frames),
    ("ssh_agent", ssh_agent),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Patterns of the `name` target's list: a wildcard and an exact name.
pub const NAME_HOSTS: [&str; 2] = ["*.allowed.test", "exact.test:8443"];

/// Why `n` is not a name the gate may resolve and connect to: labels of
/// 1 to 63 bytes of `[a-z0-9_-]`, at most 253 bytes, one trailing dot
/// allowed (looser than the config's grammar, so it only flags names no
/// DNS encoder can carry).
fn outside_grammar(n: &str) -> Option<&'static str> {
    let n = n.strip_suffix('.').unwrap_or(n);
    if n.len() > 253 {
        return Some("a name over 253 bytes");
    }
    for l in n.split('.') {
        if l.is_empty() {
            return Some("an empty label");
        }
        if l.len() > 63 {
            return Some("a label over 63 bytes");
        }
        if !l
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            return Some("a byte outside [a-z0-9_-]");
        }
    }
    None
}

/// TLS ClientHello SNI, HTTP `Host` and `CONNECT` ([`gate::sniff`]), then
/// [`gate::decide`] against [`NAME_HOSTS`]. Property: a `Verdict::Name`
/// names exactly what was sniffed, a name the list allows at that port,
/// in the host-name grammar; a `CONNECT` head lies inside the input.
pub fn name(data: &[u8]) {
    let plan = GatePlan {
        log_only: false,
        hosts: NAME_HOSTS.iter().map(|p| p.parse::<HostPattern>().unwrap()).collect(),
        upstream: Vec::new(),
        forwarded: Vec::new(),
        idle_timeout_s: 3600,
    };
    let sniffed = gate::sniff(data);
    let sent = match &sniffed {
        Sniffed::Connect { host, header_len, .. } => {
            assert!(*header_len <= data.len(), "CONNECT head beyond the input");
            host.as_ref().ok().cloned()
        }
        Sniffed::Tls(n) => n.as_ref().and_then(|n| n.as_ref().ok().cloned()),
        Sniffed::Http { host, .. } => host.as_ref().and_then(|n| n.as_ref().ok().cloned()),
        Sniffed::NeedMore | Sniffed::Other => None,
    };
    let dst = SocketAddrV4::new(Ipv4Addr::new(100, 127, 0, 9), 443);
    if let Verdict::Name { name, port } = gate::decide(&plan, dst, None, &sniffed) {
        assert_eq!(Some(&name), sent.as_ref(), "a name that was not sniffed: {sniffed:?}");
        assert!(
            hosts::allowing(&plan.hosts, &name, port).is_some(),
            "{name:?}:{port} not listed"
        );
        if let Some(why) = outside_grammar(&name) {
            panic!("a name decided with {why}\n{name:?}");
        }
    }
}

/// The resolver's question ([`gate::parse_question`]), its answer
/// ([`gate::dns_answer`]) and the gate's reading of an upstream answer
/// ([`gate::parse_a_answers`]). Properties: the answer built for a parsed
/// question is read back as exactly its one A record; a parsed answer has
/// no more records than it says.
pub fn dns(data: &[u8]) {
    let asked: HostName = "a.test".parse().expect("a valid name");
    if data.len() >= 2 {
        let id = u16::from_be_bytes([data[0], data[1]]);
        if let Some((addrs, _)) = gate::parse_a_answers(data, id, &asked) {
            let an = data.get(6..8).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
            assert!(addrs.len() <= an as usize);
        }
    }
    if let Some(q) = gate::parse_question(data) {
        let a = Ipv4Addr::new(100, 127, 0, 2);
        let answer = gate::dns_answer(data, &q, 0, Some(a));
        assert!(gate::parse_question(&answer).is_none(), "an answer read as a question");
        if let (Ok(name), 1, 1) = (&q.name, q.qtype, q.qclass) {
            assert_eq!(gate::parse_a_answers(&answer, q.id, name), Some((vec![a], 30)));
            let refused = gate::dns_answer(data, &q, 5, None);
            assert_eq!(
                gate::parse_a_answers(&refused, q.id, name),
                None,
                "a refusal read as an answer"
            );
        }
    }
}

/// The input cut in two at a point its first two bytes choose (the rest
/// of the input is what is fed).
fn cut(data: &[u8]) -> (&[u8], &[u8]) {
    let (at, rest) = match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]) as usize, rest),
        _ => (0, &[][..]),
    };
    rest.split_at(at % (rest.len() + 1))
}

/// Up to four responses' expectations, from one byte (per request: HEAD,
/// HTTP/1.0).
fn expects(flags: u8) -> VecDeque<Expect> {
    (0..4)
        .map(|i| Expect {
            head: flags >> (2 * i) & 1 != 0,
            http10: flags >> (2 * i + 1) & 1 != 0,
        })
        .collect()
}

/// HTTP request and response heads and bodies (length, chunked,
/// close-delimited) through the gate's two sides with no secrets bound
/// (`net::subst` head.rs, body.rs). Property: what a side writes out, fed
/// whole to a fresh side, is accepted, with as many requests.
pub fn http(data: &[u8]) {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let (a, b) = cut(data);
    let (mut out, mut ex) = (Vec::new(), VecDeque::new());
    let mut req = RequestSide::new("a.test", &[], Upstream::Verified);
    if req
        .feed(a, &mut out, &mut ex)
        .and_then(|_| req.feed(b, &mut out, &mut ex))
        .is_ok()
    {
        let (mut again, mut ex2) = (Vec::new(), VecDeque::new());
        let r = RequestSide::new("a.test", &[], Upstream::Verified).feed(&out, &mut again, &mut ex2);
        assert!(r.is_ok(), "the request side's own output refused: {r:?}");
        assert_eq!(ex.len(), ex2.len(), "a different number of requests");
    }
    let (mut out, mut ex) = (Vec::new(), expects(flags));
    let mut resp = ResponseSide::new("a.test", &[]);
    if resp
        .feed(a, &mut out, &mut ex)
        .and_then(|_| resp.feed(b, &mut out, &mut ex))
        .is_ok()
    {
        resp.finish(&mut out);
        let r = ResponseSide::new("a.test", &[]).feed(&out, &mut Vec::new(), &mut expects(flags));
        assert!(r.is_ok(), "the response side's own output refused: {r:?}");
    }
}

/// The swap's hosts: two secrets, each bound to one; the third has none.
pub const SWAP_HOSTS: [&str; 3] = ["api.test", "git.test", "other.test"];
/// The swap's secrets: (variable, sentinel, real value, bound host).
pub const SWAP_SECRETS: [(&str, &str, &str, &str); 2] = [
    (
        "API_KEY",
        "lzr-sk-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "sk-real-api-0123456789",
        "api.test",
    ),
    (
        "GH_TOKEN",
        "lzr-sk-BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB",
        "ghp_realgit9876543210",
        "git.test",
    ),
];

/// [`SWAP_SECRETS`], the real value of those not bound to `unbound_of`
/// (of every one with `all`) replaced by `other` (a value the sandbox
/// never saw).
fn swap_bindings(unbound_of: Option<&str>, other: &str, all: bool) -> Vec<Binding> {
    SWAP_SECRETS
        .iter()
        .map(|(var, sentinel, real, host)| Binding {
            var: var.to_string(),
            sentinel: sentinel.to_string(),
            real: SecretValue::new(
                if all || unbound_of.is_some_and(|h| h != *host) {
                    other
                } else {
                    real
                }
                .into(),
            )
            .unwrap(),
            hosts: vec![host.to_string()],
            headers: DEFAULT_HEADERS.iter().map(|h| h.to_string()).collect(),
            plain_http: false,
        })
        .collect()
}

/// The name of the header line `needle` lies on at each place it occurs
/// (`None`: on no header line's value: a first line, a header name, a body
/// line without a colon).
fn header_names_at(hay: &[u8], needle: &[u8]) -> Vec<Option<Vec<u8>>> {
    let mut v = Vec::new();
    for at in (0..hay.len().saturating_sub(needle.len() - 1)).filter(|&i| hay[i..].starts_with(needle)) {
        let start = hay[..at].iter().rposition(|b| *b == b'\n').map_or(0, |k| k + 1);
        let colon = hay[start..at].iter().position(|b| *b == b':');
        v.push(colon.map(|c| hay[start..start + c].trim_ascii().to_ascii_lowercase()));
    }
    v
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Where `needle` first lies in an HTTP byte stream: a header name, the
/// rest of a line, or a body (for the panic message, so that distinct
/// bugs read differently).
fn where_in(hay: &[u8], needle: &[u8]) -> Option<&'static str> {
    let at = hay.windows(needle.len()).position(|w| w == needle)?;
    let line_start = hay[..at].iter().rposition(|b| *b == b'\n').map_or(0, |k| k + 1);
    let line = &hay[line_start..];
    let line = &line[..line.iter().position(|b| *b == b'\n').unwrap_or(line.len())];
    let colon = line.iter().position(|b| *b == b':');
    Some(
        if line.starts_with(b"HTTP/") || line.ends_with(b"HTTP/1.1\r") || line.ends_with(b"HTTP/1.0\r") {
            "a first line"
        } else if colon.is_some_and(|c| line_start + c > at) {
            "a header name"
        } else if colon.is_some() {
            "a header value (or a body line with a colon)"
        } else {
            "a body"
        },
    )
}

/// The swap towards a host ([`RequestSide`]), the input cut in two at a
/// fuzz-chosen point; the first byte picks the host of [`SWAP_HOSTS`]
/// and, with its high bit, a plain-HTTP upstream instead of verified TLS.
/// Properties: what goes to the host holds no sentinel of a secret not
/// bound to it, and does not depend on the real value of such a secret
/// (so never contains it, unless the sandbox sent it itself); a real value
/// appears only in the value of a header its secret names; on a plain-HTTP
/// upstream nothing depends on any real value. (A value the sandbox sent
/// itself is exempt.)
pub fn swap_request(data: &[u8]) {
    let Some((&pick, data)) = data.split_first() else {
        return;
    };
    let host = SWAP_HOSTS[pick as usize % SWAP_HOSTS.len()];
    // The high bit: plain HTTP (no real value may be written) or verified TLS.
    let upstream = if pick & 0x80 != 0 {
        Upstream::Plain
    } else {
        Upstream::Verified
    };
    let (a, b) = cut(data);
    let run = |other: &str, all: bool| {
        let mut side = RequestSide::new(host, &swap_bindings(Some(host), other, all), upstream);
        let (mut out, mut ex) = (Vec::new(), VecDeque::new());
        let r = side
            .feed(a, &mut out, &mut ex)
            .and_then(|_| side.feed(b, &mut out, &mut ex));
        (out, r, ex)
    };
    // A value the sandbox sent itself protects nothing: the checks that
    // need a value it does not know skip it.
    let (one, two) = ("unbound-value-one-1111", "unbound-value-two-2222");
    let knows = |v: &str| contains(data, v.as_bytes());
    let knows_any = SWAP_SECRETS.iter().any(|s| knows(s.2)) || knows(one) || knows(two);
    let (out, r, ex) = run(one, false);
    for (var, sentinel, real, bound) in SWAP_SECRETS {
        if let Some(place) = where_in(&out, sentinel.as_bytes()).filter(|_| bound != host) {
            panic!("the sentinel of a secret bound to {bound} went to {host}, in {place}");
        }
        for name in header_names_at(&out, real.as_bytes())
            .into_iter()
            .filter(|_| !knows(real))
        {
            if !name.is_some_and(|n| DEFAULT_HEADERS.iter().any(|h| h.as_bytes() == n)) {
                let place = where_in(&out, real.as_bytes()).unwrap_or_default();
                panic!("the real value of {var} written outside the headers it names, in {place}");
            }
        }
    }
    if knows_any {
        return;
    }
    if upstream == Upstream::Plain {
        let all = run(one, true);
        assert_eq!(
            (&out, &r, &ex),
            (&all.0, &all.1, &all.2),
            "a real value on a plain-HTTP path to {host}"
        );
    }
    assert_eq!((out, r, ex), run(two, false), "an unbound real value reached {host}");
}

/// The swap towards the sandbox ([`ResponseSide`]), the input cut in two;
/// the first byte gives up to four requests' expectations. Property: what
/// goes to the sandbox contains no real value.
pub fn swap_response(data: &[u8]) {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let (a, b) = cut(data);
    let mut side = ResponseSide::new(SWAP_HOSTS[0], &swap_bindings(None, "", false));
    let (mut out, mut ex) = (Vec::new(), expects(flags));
    if side
        .feed(a, &mut out, &mut ex)
        .and_then(|_| side.feed(b, &mut out, &mut ex))
        .is_ok()
    {
        side.finish(&mut out);
    }
    for (var, _, real, _) in SWAP_SECRETS {
        if let Some(place) = where_in(&out, real.as_bytes()) {
            panic!("the real value of {var} went to the sandbox, in {place}");
        }
    }
}

/// The Escalation Mailbox's records (`wire::mailbox`). Property: a record
/// that decodes re-encodes to the same bytes, and its signed part is the
/// encoder's.
pub fn mailbox(data: &[u8]) {
    if let Ok((request, signed, sig)) = mailbox::decode_request(data) {
        assert_eq!(
            mailbox::encode_request(&request, &sig),
            data,
            "a request with two encodings"
        );
        assert_eq!(mailbox::signed_part(&request), signed, "the signed part differs");
    }
    if let Ok(outcome) = mailbox::decode_result(data) {
        assert_eq!(mailbox::encode_result(&outcome), data, "a result with two encodings");
    }
    // The SSH agent's records (issue 51).
    if let Ok((mailbox::Record::Agent(request), signed, sig)) = mailbox::decode_record(data) {
        assert_eq!(
            mailbox::encode_agent_request(&request, &sig),
            data,
            "an agent request with two encodings"
        );
        assert_eq!(mailbox::agent_signed_part(&request), signed, "the signed part differs");
    }
    if let Ok((id, body)) = mailbox::decode_agent_reply(data) {
        assert_eq!(
            mailbox::encode_agent_reply(&id, &body),
            data,
            "an agent reply with two encodings"
        );
    }
}

/// The coordinator socket's frames (`wire::client`), the frozen basic
/// exchange (`wire::basic`) among them, which a client reads from a
/// coordinator of any other build. Property: a payload that decodes
/// re-encodes to the same bytes (one encoding per message), and a frame
/// stream never makes the reader panic.
pub fn client_frames(data: &[u8]) {
    use crate::wire::client::{ClientMsg, ServerMsg};
    use crate::wire::codec::{FrameReader, Message};
    if let Ok(m) = ClientMsg::decode(data) {
        assert_eq!(&m.encode()[4..], data, "a client message with two encodings");
    }
    if let Ok(m) = ServerMsg::decode(data) {
        assert_eq!(&m.encode()[4..], data, "a server message with two encodings");
    }
    let mut r = FrameReader::default();
    r.push(data);
    while let Ok(Some(_)) = r.next::<ServerMsg>() {}
}

/// The config's TOML reader (`config::toml`): no panic on any text.
pub fn toml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::config::toml::parse(text);
    }
}

/// The whole config read from text (TOML, then the schema and its checks;
/// nothing is resolved, no command runs): no panic on any text.
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::config::parse(Path::new("/nonexistent/lazaret/config.toml"), text);
    }
}

/// A host hook or configured command line the sandbox wrote (a script a
/// hook runs): the shell lexer and the analysis never panic, and finish
/// (the work tree `/nonexistent/wt` has no files, so nothing is followed
/// beyond the text itself).
pub fn hook(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::view::hostexec::fuzz_command(&text, Path::new("/nonexistent/wt"));
}

/// The sidecar gate's config file (`export::gateconf`, what `lazaret gate
/// --config` reads): no panic, and what parses renders back to the same
/// text (one spelling per config: the parser admits only the canonical one).
pub fn gate_config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(c) = crate::export::gateconf::parse(text) {
            assert_eq!(c.render(), text, "a gate config with two spellings");
        }
    }
}

/// The host agent key the `ssh_agent` target's profile lists (an ed25519
/// public key; it never signs here).
pub fn ssh_agent_user_key() -> Vec<u8> {
    let mut b = Vec::new();
    crate::sshagent::proto::put_string(&mut b, b"ssh-ed25519");
    crate::sshagent::proto::put_string(&mut b, &[0x11; 32]);
    b
}

/// The server host key of the `ssh_agent` target: known_hosts lists it
/// for `github.com`. Its private half (fixed, deterministic ed25519 signatures)
/// makes the seeds.
pub fn ssh_agent_host_key() -> openssl::pkey::PKey<openssl::pkey::Private> {
    openssl::pkey::PKey::private_key_from_raw_bytes(&[0x42; 32], openssl::pkey::Id::ED25519)
        .expect("an ed25519 key from 32 bytes")
}

/// The SSH public key blob of [`ssh_agent_host_key`].
pub fn ssh_agent_host_blob() -> Vec<u8> {
    let mut b = Vec::new();
    crate::sshagent::proto::put_string(&mut b, b"ssh-ed25519");
    let raw = ssh_agent_host_key().raw_public_key().expect("a public key");
    crate::sshagent::proto::put_string(&mut b, &raw);
    b
}

/// The SSH agent the sandbox talks to (`sshagent`): a stream of agent
/// frames (`uint32 length, body`) on one connection, each parsed,
/// session-binds verified and recorded, sign requests classified and
/// decided against a profile listing [`ssh_agent_user_key`] with a login
/// rule for `git@github.com` and a `git` namespace rule. Properties: a
/// request that parses re-encodes to the same bytes; the login rule
/// approves only a login to the host key known_hosts lists for
/// github.com (so only after that key's own signature bound the session);
/// the prompt and audit texts hold no character a terminal acts on.
pub fn ssh_agent(data: &[u8]) {
    use crate::config::ssh_agent::{Approve, RuleUse, SshAgent, SshRule};
    use crate::sshagent::decide::{self, Conn, Decision, Use};
    use crate::sshagent::known_hosts::KnownHosts;
    use crate::sshagent::{keys, proto};

    let user_key = ssh_agent_user_key();
    let fp = keys::fingerprint(&user_key);
    let host = ssh_agent_host_blob();
    let known_text = format!("github.com ssh-ed25519 {}\n", openssl::base64::encode_block(&host));
    let known = KnownHosts::parse(known_text.as_bytes());
    let cfg = SshAgent {
        keys: vec![fp.clone()],
        approve: Approve::Session,
        rules: vec![
            SshRule {
                key: fp.clone(),
                what: RuleUse::Login {
                    host: "github.com".into(),
                    user: "git".into(),
                },
            },
            SshRule {
                key: fp.clone(),
                what: RuleUse::Namespace("git".into()),
            },
        ],
    };
    let mut conn = Conn::default();
    let mut rest = data;
    while rest.len() >= 4 {
        let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let body = &rest[4..4 + n.min(rest.len() - 4)];
        rest = &rest[4 + body.len()..];
        let Ok(req) = proto::parse_request(body) else {
            continue;
        };
        assert_eq!(proto::encode_request(&req), body, "an agent request with two encodings");
        match req {
            proto::Request::List => {}
            proto::Request::SessionBind {
                host_key,
                session_id,
                signature,
                forwarding,
            } => {
                let _ = conn.bind(&host_key, &session_id, &signature, forwarding);
            }
            proto::Request::Sign { key, data, .. } => {
                let Ok(what) = conn.classify(&key, &data) else {
                    continue;
                };
                let key_fp = keys::fingerprint(&key);
                let d = decide::decide(&cfg, &key_fp, &what, &known, false);
                if d == Decision::Rule(0) {
                    assert!(
                        matches!(&what, Use::Login { user, host_key } if user == "git" && *host_key == host),
                        "the login rule approved {what:?}"
                    );
                }
                let mut text = decide::describe(&key_fp, &what, &known);
                text.push(decide::audit_line("s", &key_fp, &what, "x"));
                for t in text {
                    assert!(!t.chars().any(crate::display::is_unsafe), "unescaped text {t:?}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::wire::mailbox::tests::{samples_request, samples_result};
    use crate::wire::mailbox::Message;

    /// The mailbox seeds are what the encoder writes today;
    /// `LAZARET_WRITE_SEEDS=1` writes them anew.
    #[test]
    fn mailbox_seeds_are_the_encoders() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus/mailbox");
        let requests = samples_request().into_iter().map(|m| m.encode());
        let results = samples_result().into_iter().map(|m| m.encode());
        let seeds = requests
            .enumerate()
            .map(|(i, b)| (format!("request-{i}"), b))
            .chain(results.enumerate().map(|(i, b)| (format!("result-{i}"), b)));
        for (name, bytes) in seeds {
            seed_is(&dir.join(&name), bytes);
        }
    }

    /// The seed at `path` holds exactly `bytes`; `LAZARET_WRITE_SEEDS=1`
    /// writes them there first.
    fn seed_is(path: &std::path::Path, bytes: Vec<u8>) {
        if std::env::var_os("LAZARET_WRITE_SEEDS").is_some() {
            std::fs::write(path, &bytes).unwrap();
        }
        assert_eq!(
            std::fs::read(path).ok(),
            Some(bytes),
            "{}: not the encoder's",
            path.display()
        );
    }

    /// The `ssh_agent` seeds: agent frames a real client sends
    /// (`LAZARET_WRITE_SEEDS=1` writes them anew).
    #[test]
    fn ssh_agent_seeds_are_the_encoders() {
        use crate::sshagent::proto::{encode_request, put_string, Request};
        let frame = |r: &Request| {
            let b = encode_request(r);
            let mut f = (b.len() as u32).to_be_bytes().to_vec();
            f.extend(b);
            f
        };
        let sid = [0x5a; 32];
        let mut s = openssl::sign::Signer::new_without_digest(&super::ssh_agent_host_key()).unwrap();
        let mut sig = Vec::new();
        put_string(&mut sig, b"ssh-ed25519");
        put_string(&mut sig, &s.sign_oneshot_to_vec(&sid).unwrap());
        let bind = Request::SessionBind {
            host_key: super::ssh_agent_host_blob(),
            session_id: sid.to_vec(),
            signature: sig,
            forwarding: false,
        };
        let key = super::ssh_agent_user_key();
        let login = |user: &[u8], hostbound: bool| {
            let mut d = Vec::new();
            put_string(&mut d, &sid);
            d.push(50);
            put_string(&mut d, user);
            put_string(&mut d, b"ssh-connection");
            put_string(
                &mut d,
                if hostbound {
                    &b"publickey-hostbound-v00@openssh.com"[..]
                } else {
                    b"publickey"
                },
            );
            d.push(1);
            put_string(&mut d, b"ssh-ed25519");
            put_string(&mut d, &key);
            if hostbound {
                put_string(&mut d, &super::ssh_agent_host_blob());
            }
            Request::Sign {
                key: key.clone(),
                data: d,
                flags: 0,
            }
        };
        let mut sshsig = b"SSHSIG".to_vec();
        put_string(&mut sshsig, b"git");
        put_string(&mut sshsig, b"");
        put_string(&mut sshsig, b"sha512");
        put_string(&mut sshsig, &[7; 64]);
        let seeds: Vec<(&str, Vec<u8>)> = vec![
            ("list", frame(&Request::List)),
            ("bind-login", [frame(&bind), frame(&login(b"git", false))].concat()),
            (
                "bind-login-hostbound",
                [frame(&bind), frame(&login(b"git", true))].concat(),
            ),
            ("login-unbound", frame(&login(b"root", false))),
            (
                "sshsig",
                frame(&Request::Sign {
                    key: key.clone(),
                    data: sshsig,
                    flags: 0,
                }),
            ),
            ("add-identity", [0, 0, 0, 1, 17].to_vec()),
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus/ssh_agent");
        if std::env::var_os("LAZARET_WRITE_SEEDS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
        }
        for (name, bytes) in seeds {
            seed_is(&dir.join(name), bytes);
        }
    }
}
