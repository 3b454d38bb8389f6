//! Unit tests of the agent protocol parser, the host-key binding, the
//! known_hosts matcher and the decision.

use openssl::bn::BigNumContext;
use openssl::ec::{EcGroup, EcKey, PointConversionForm};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::rsa::Rsa;
use openssl::sign::Signer;

use super::decide::{self, Conn, Decision, Refusal, Remembered, Use};
use super::keys::{self, KeyError};
use super::known_hosts::KnownHosts;
use super::proto::{self, put_string, ParseError, Request, Signed};
use crate::config::ssh_agent::{Approve, RuleUse, SshAgent, SshRule};

/// A host key that signs as an SSH server does.
enum Host {
    Ed(PKey<Private>),
    Ec(EcKey<Private>, &'static str, Nid),
    Rsa(PKey<Private>),
}

fn mpint(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    while v.len() > 1 && v[0] == 0 && v[1] & 0x80 == 0 {
        v.remove(0);
    }
    if v[0] & 0x80 != 0 {
        v.insert(0, 0);
    }
    v
}

impl Host {
    fn ed() -> Host {
        Host::Ed(PKey::generate_ed25519().unwrap())
    }
    fn ec(bits: u32) -> Host {
        let (curve, nid) = if bits == 256 {
            ("nistp256", Nid::X9_62_PRIME256V1)
        } else {
            ("nistp384", Nid::SECP384R1)
        };
        Host::Ec(
            EcKey::generate(&EcGroup::from_curve_name(nid).unwrap()).unwrap(),
            curve,
            nid,
        )
    }
    fn rsa(bits: u32) -> Host {
        Host::Rsa(PKey::from_rsa(Rsa::generate(bits).unwrap()).unwrap())
    }
    fn blob(&self) -> Vec<u8> {
        let mut b = Vec::new();
        match self {
            Host::Ed(k) => {
                put_string(&mut b, b"ssh-ed25519");
                put_string(&mut b, &k.raw_public_key().unwrap());
            }
            Host::Ec(k, curve, _) => {
                put_string(&mut b, format!("ecdsa-sha2-{curve}").as_bytes());
                put_string(&mut b, curve.as_bytes());
                let mut ctx = BigNumContext::new().unwrap();
                let q = k
                    .public_key()
                    .to_bytes(k.group(), PointConversionForm::UNCOMPRESSED, &mut ctx)
                    .unwrap();
                put_string(&mut b, &q);
            }
            Host::Rsa(k) => {
                let r = k.rsa().unwrap();
                put_string(&mut b, b"ssh-rsa");
                put_string(&mut b, &mpint(&r.e().to_vec()));
                put_string(&mut b, &mpint(&r.n().to_vec()));
            }
        }
        b
    }
    fn sign(&self, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            Host::Ed(k) => {
                let mut s = Signer::new_without_digest(k).unwrap();
                put_string(&mut out, b"ssh-ed25519");
                put_string(&mut out, &s.sign_oneshot_to_vec(data).unwrap());
            }
            Host::Ec(k, curve, nid) => {
                let md = if *nid == Nid::X9_62_PRIME256V1 {
                    MessageDigest::sha256()
                } else {
                    MessageDigest::sha384()
                };
                let d = openssl::hash::hash(md, data).unwrap();
                let sig = EcdsaSig::sign(&d, k).unwrap();
                let mut inner = Vec::new();
                put_string(&mut inner, &mpint(&sig.r().to_vec()));
                put_string(&mut inner, &mpint(&sig.s().to_vec()));
                put_string(&mut out, format!("ecdsa-sha2-{curve}").as_bytes());
                put_string(&mut out, &inner);
            }
            Host::Rsa(k) => {
                let mut s = Signer::new(MessageDigest::sha512(), k).unwrap();
                s.update(data).unwrap();
                put_string(&mut out, b"rsa-sha2-512");
                put_string(&mut out, &s.sign_to_vec().unwrap());
            }
        }
        out
    }
}

fn userauth(sid: &[u8], user: &str, key: &[u8], hostbound: Option<&[u8]>) -> Vec<u8> {
    let mut d = Vec::new();
    put_string(&mut d, sid);
    d.push(50);
    put_string(&mut d, user.as_bytes());
    put_string(&mut d, b"ssh-connection");
    put_string(
        &mut d,
        if hostbound.is_some() {
            &b"publickey-hostbound-v00@openssh.com"[..]
        } else {
            b"publickey"
        },
    );
    d.push(1);
    put_string(&mut d, b"ssh-ed25519");
    put_string(&mut d, key);
    if let Some(h) = hostbound {
        put_string(&mut d, h);
    }
    d
}

fn sshsig(ns: &str) -> Vec<u8> {
    let mut d = b"SSHSIG".to_vec();
    put_string(&mut d, ns.as_bytes());
    put_string(&mut d, b"");
    put_string(&mut d, b"sha512");
    put_string(&mut d, &[7u8; 64]);
    d
}

fn known_line(names: &str, blob: &[u8]) -> String {
    format!(
        "{names} {} {}\n",
        keys::key_type(blob).unwrap(),
        openssl::base64::encode_block(blob)
    )
}

/// `|1|salt|hmac` for `name`, as `ssh-keygen -H` writes it.
fn hashed(name: &str) -> String {
    let salt = [9u8; 20];
    let k = PKey::hmac(&salt).unwrap();
    let mut s = Signer::new(MessageDigest::sha1(), &k).unwrap();
    s.update(name.as_bytes()).unwrap();
    format!(
        "|1|{}|{}",
        openssl::base64::encode_block(&salt),
        openssl::base64::encode_block(&s.sign_to_vec().unwrap())
    )
}

const SID: [u8; 32] = [0x5a; 32];

// --- proto ---------------------------------------------------------------

#[test]
fn requests_round_trip_and_only_three_are_served() {
    let reqs = [
        Request::List,
        Request::Sign {
            key: vec![1, 2],
            data: vec![3],
            flags: 4,
        },
        Request::SessionBind {
            host_key: vec![1],
            session_id: SID.to_vec(),
            signature: vec![2],
            forwarding: true,
        },
    ];
    for r in &reqs {
        assert_eq!(&proto::parse_request(&proto::encode_request(r)).unwrap(), r);
    }
    // add identity, remove all, lock, add smartcard key, other extension
    for t in [17u8, 19, 22, 20, 25, 9, 1, 0, 255] {
        assert_eq!(proto::parse_request(&[t]), Err(ParseError::Unsupported(t)));
    }
    let mut ext = vec![27];
    put_string(&mut ext, b"query");
    assert_eq!(proto::parse_request(&ext), Err(ParseError::UnsupportedExtension));
    assert_eq!(proto::parse_request(&[]), Err(ParseError::Empty));
}

#[test]
fn malformed_requests_are_refused() {
    let sign = proto::encode_request(&Request::Sign {
        key: vec![1],
        data: vec![2],
        flags: 0,
    });
    let mut trailing = sign.clone();
    trailing.push(0);
    assert_eq!(proto::parse_request(&trailing), Err(ParseError::Trailing));
    assert_eq!(
        proto::parse_request(&sign[..sign.len() - 1]),
        Err(ParseError::Truncated)
    );
    // A length that runs past the end.
    assert_eq!(
        proto::parse_request(&[13, 0xff, 0xff, 0xff, 0xff, 1]),
        Err(ParseError::Truncated)
    );
    let flags = proto::encode_request(&Request::Sign {
        key: vec![1],
        data: vec![2],
        flags: 1,
    });
    assert_eq!(proto::parse_request(&flags), Err(ParseError::BadFlags));
    let big = proto::encode_request(&Request::Sign {
        key: vec![1],
        data: vec![0; proto::MAX_REQUEST],
        flags: 0,
    });
    assert_eq!(proto::parse_request(&big), Err(ParseError::TooLarge));
    let mut bind = proto::encode_request(&Request::SessionBind {
        host_key: vec![1],
        session_id: SID.to_vec(),
        signature: vec![2],
        forwarding: false,
    });
    *bind.last_mut().unwrap() = 2;
    assert_eq!(proto::parse_request(&bind), Err(ParseError::BadBool));
}

#[test]
fn answers_parse_and_refuse_lying_counts() {
    let ids = vec![proto::Identity {
        blob: vec![1, 2, 3],
        comment: b"c".to_vec(),
    }];
    assert_eq!(proto::parse_identities(&proto::encode_identities(&ids)).unwrap(), ids);
    assert_eq!(
        proto::parse_identities(&[12, 0xff, 0xff, 0xff, 0xff]),
        Err(ParseError::Truncated)
    );
    assert_eq!(
        proto::parse_sign_response(&proto::encode_sign_response(b"sig")).unwrap(),
        b"sig"
    );
    assert_eq!(proto::parse_sign_response(&[5]), Err(ParseError::Unsupported(5)));
}

#[test]
fn signed_data_is_login_or_sshsig_only() {
    let key = Host::ed().blob();
    let hk = Host::ed().blob();
    assert_eq!(
        proto::parse_signed(&userauth(&SID, "git", &key, Some(&hk))).unwrap(),
        Signed::UserAuth {
            session_id: SID.to_vec(),
            user: "git".into(),
            key: key.clone(),
            host_key: Some(hk)
        }
    );
    assert!(
        matches!(proto::parse_signed(&sshsig("git")).unwrap(), Signed::Sshsig { namespace, .. } if namespace == "git")
    );
    // Arbitrary data, a bad namespace, another auth method, trailing bytes.
    assert!(proto::parse_signed(b"please sign this").is_err());
    assert!(proto::parse_signed(&sshsig("g it")).is_err());
    let mut pw = userauth(&SID, "git", &key, None);
    pw.truncate(4 + 32 + 1 + 4 + 3 + 4 + 14);
    put_string(&mut pw, b"password");
    assert_eq!(
        proto::parse_signed(&pw),
        Err(ParseError::BadField("authentication method"))
    );
    let mut t = userauth(&SID, "git", &key, None);
    t.push(0);
    assert_eq!(proto::parse_signed(&t), Err(ParseError::Trailing));
    assert!(proto::parse_signed(&userauth(&SID, "g\nit", &key, None)).is_err());
}

// --- keys ----------------------------------------------------------------

#[test]
fn fingerprint_is_what_ssh_keygen_prints() {
    // ssh-keygen -l of this ed25519 public key prints this (OpenSSH 9.2).
    let line = "AAAAC3NzaC1lZDI1NTE5AAAAIDj2f7aIQM04c0rMxxIaOHTlEtjwzy8XwgRNy2dKsLWW";
    let blob = openssl::base64::decode_block(line).unwrap();
    assert_eq!(
        keys::fingerprint(&blob),
        "SHA256:3gDkNH9tD2dIcozx6wwmy2GCemLiCLW/WrpiXeOARCw"
    );
    assert!(crate::config::ssh_agent::valid_fingerprint(&keys::fingerprint(&blob)));
    assert_eq!(keys::key_type(&blob), Some("ssh-ed25519"));
}

#[test]
fn host_key_signatures_verify_for_every_supported_type() {
    for h in [Host::ed(), Host::ec(256), Host::ec(384), Host::rsa(2048)] {
        let blob = h.blob();
        let sig = h.sign(&SID);
        assert_eq!(keys::verify(&blob, &SID, &sig), Ok(()), "{:?}", keys::key_type(&blob));
        let mut other = SID;
        other[0] ^= 1;
        assert_eq!(keys::verify(&blob, &other, &sig), Err(KeyError::BadSignature));
        // Another key's signature over the same session id.
        let other_sig = Host::ed().sign(&SID);
        assert!(keys::verify(&blob, &SID, &other_sig).is_err());
    }
}

#[test]
fn weak_and_unknown_host_keys_are_refused() {
    let h = Host::rsa(1024);
    assert_eq!(keys::verify(&h.blob(), &SID, &h.sign(&SID)), Err(KeyError::Unsupported));
    // ssh-rsa (SHA-1) signatures are refused.
    let h = Host::rsa(2048);
    let mut sig = Vec::new();
    put_string(&mut sig, b"ssh-rsa");
    put_string(&mut sig, &[0; 256]);
    assert_eq!(keys::verify(&h.blob(), &SID, &sig), Err(KeyError::WrongAlgorithm));
    let mut cert = Vec::new();
    put_string(&mut cert, b"ssh-ed25519-cert-v01@openssh.com");
    assert_eq!(keys::verify(&cert, &SID, &sig), Err(KeyError::Unsupported));
    assert_eq!(keys::verify(&[0, 0], &SID, &sig), Err(KeyError::Malformed));
}

// --- known_hosts -----------------------------------------------------------

#[test]
fn known_hosts_plain_hashed_port_revoked_and_ca() {
    let gh = Host::ed().blob();
    let other = Host::ec(256).blob();
    let hashed_key = Host::ed().blob();
    let revoked = Host::ed().blob();
    let ca = Host::ed().blob();
    let text = [
        "# comment\n".to_string(),
        known_line("github.com,140.82.121.3", &gh),
        known_line("[git.example.test]:2222", &other),
        known_line(&hashed("hashed.test"), &hashed_key),
        known_line("*.wild.test,!bad.wild.test", &other),
        known_line("revoked.test", &revoked),
        format!("@revoked {}", known_line("*", &revoked)),
        format!("@cert-authority {}", known_line("*.ca.test", &ca)),
        "garbage line\n".into(),
    ]
    .concat();
    let k = KnownHosts::parse(text.as_bytes());
    assert!(k.lists(&gh, "github.com"));
    assert!(k.lists(&gh, "GitHub.com"));
    assert!(!k.lists(&gh, "gitlab.com"));
    assert!(!k.lists(&other, "github.com"));
    assert!(k.lists(&other, "[git.example.test]:2222"));
    assert!(!k.lists(&other, "git.example.test"));
    assert!(k.lists(&hashed_key, "hashed.test"));
    assert!(!k.lists(&hashed_key, "hashed.tes"));
    assert!(k.lists(&other, "a.wild.test"));
    assert!(!k.lists(&other, "bad.wild.test"));
    assert!(!k.lists(&revoked, "revoked.test"));
    assert!(!k.lists(&ca, "x.ca.test"));
    assert_eq!(k.names_of(&gh), (vec!["140.82.121.3".into(), "github.com".into()], 0));
    assert_eq!(k.names_of(&hashed_key), (vec![], 1));
    assert_eq!(decide::host_key_names(&revoked, &k), "a REVOKED host key");
    assert_eq!(decide::host_key_names(&ca, &k), "unknown host key");
}

// --- binding and decision ---------------------------------------------------

fn bound(h: &Host) -> Conn {
    let mut c = Conn::default();
    c.bind(&h.blob(), &SID, &h.sign(&SID), false).unwrap();
    c
}

#[test]
fn session_bind_needs_the_host_keys_signature() {
    let h = Host::ed();
    let mut c = Conn::default();
    let forged = Host::ed().sign(&SID);
    assert_eq!(
        c.bind(&h.blob(), &SID, &forged, false),
        Err(Refusal::HostKey(KeyError::BadSignature))
    );
    assert_eq!(c.bind(&h.blob(), &SID, &h.sign(&SID), true), Err(Refusal::Forwarding));
    assert_eq!(c.bind(&h.blob(), &SID, &h.sign(&SID), false), Ok(()));
    // The same session id bound again to another server's key.
    let h2 = Host::ed();
    assert_eq!(c.bind(&h2.blob(), &SID, &h2.sign(&SID), false), Err(Refusal::Rebind));
    for i in 1..decide::MAX_BINDINGS {
        let sid = [i as u8; 32];
        c.bind(&h.blob(), &sid, &h.sign(&sid), false).unwrap();
    }
    let sid = [0xee; 32];
    assert_eq!(c.bind(&h.blob(), &sid, &h.sign(&sid), false), Err(Refusal::Rebind));
}

#[test]
fn login_signatures_need_a_bound_session_of_that_host() {
    let server = Host::ed();
    let c = bound(&server);
    let key = Host::ed().blob();
    assert_eq!(
        c.classify(&key, &userauth(&SID, "git", &key, None)),
        Ok(Use::Login {
            user: "git".into(),
            host_key: server.blob()
        })
    );
    assert_eq!(
        c.classify(&key, &userauth(&SID, "git", &key, Some(&server.blob()))),
        Ok(Use::Login {
            user: "git".into(),
            host_key: server.blob()
        })
    );
    // Another session id (an unbound or other connection's session).
    assert_eq!(
        c.classify(&key, &userauth(&[1; 32], "git", &key, None)),
        Err(Refusal::Unbound)
    );
    assert_eq!(
        Conn::default().classify(&key, &userauth(&SID, "git", &key, None)),
        Err(Refusal::Unbound)
    );
    // Hostbound naming another host key than the one that signed.
    let other = Host::ed().blob();
    assert_eq!(
        c.classify(&key, &userauth(&SID, "git", &key, Some(&other))),
        Err(Refusal::HostKeyMismatch)
    );
    assert_eq!(
        c.classify(&other, &userauth(&SID, "git", &key, None)),
        Err(Refusal::KeyMismatch)
    );
    assert!(matches!(
        c.classify(&key, b"arbitrary bytes"),
        Err(Refusal::NotSigning(_))
    ));
}

fn cfg(approve: Approve, rules: Vec<SshRule>, keys: &[&str]) -> SshAgent {
    SshAgent {
        keys: keys.iter().map(|k| k.to_string()).collect(),
        approve,
        rules,
    }
}

#[test]
fn rules_match_only_their_key_user_and_known_host() {
    let gh = Host::ed();
    let evil = Host::ed();
    let key = Host::ed().blob();
    let fp = keys::fingerprint(&key);
    let fp2 = keys::fingerprint(&Host::ed().blob());
    let known = KnownHosts::parse(
        [
            known_line("github.com", &gh.blob()),
            known_line("evil.test", &evil.blob()),
        ]
        .concat()
        .as_bytes(),
    );
    let login = |h: &Host, user: &str| bound(h).classify(&key, &userauth(&SID, user, &key, None)).unwrap();
    let rule = SshRule {
        key: fp.clone(),
        what: RuleUse::Login {
            host: "github.com".into(),
            user: "git".into(),
        },
    };
    let c = cfg(Approve::Rule, vec![rule.clone()], &[&fp, &fp2]);
    assert_eq!(
        decide::decide(&c, &fp, &login(&gh, "git"), &known, false),
        Decision::Rule(0)
    );
    // Another host (known under another name), another user, another key.
    assert_eq!(
        decide::decide(&c, &fp, &login(&evil, "git"), &known, false),
        Decision::Refuse(Refusal::NoRule)
    );
    assert_eq!(
        decide::decide(&c, &fp, &login(&gh, "root"), &known, false),
        Decision::Refuse(Refusal::NoRule)
    );
    assert_eq!(
        decide::decide(&c, &fp2, &login(&gh, "git"), &known, false),
        Decision::Refuse(Refusal::NoRule)
    );
    // An unknown host key matches no rule.
    assert_eq!(
        decide::decide(&c, &fp, &login(&Host::ed(), "git"), &KnownHosts::default(), false),
        Decision::Refuse(Refusal::NoRule)
    );
    // A key not listed in keys.
    let fp3 = keys::fingerprint(&Host::ed().blob());
    assert_eq!(
        decide::decide(&c, &fp3, &login(&gh, "git"), &known, false),
        Decision::Refuse(Refusal::KeyNotAllowed)
    );
    // A namespace rule does not approve a login, nor another namespace.
    let ns = SshRule {
        key: fp.clone(),
        what: RuleUse::Namespace("git".into()),
    };
    let c = cfg(Approve::Each, vec![ns], &[&fp]);
    assert_eq!(
        decide::decide(&c, &fp, &login(&gh, "git"), &known, false),
        Decision::Ask
    );
    let sig = |n: &str| Conn::default().classify(&key, &sshsig(n)).unwrap();
    assert_eq!(decide::decide(&c, &fp, &sig("git"), &known, false), Decision::Rule(0));
    assert_eq!(decide::decide(&c, &fp, &sig("file"), &known, false), Decision::Ask);
}

#[test]
fn session_approval_is_per_session_and_key() {
    let key = Host::ed().blob();
    let fp = keys::fingerprint(&key);
    let fp2 = keys::fingerprint(&Host::ed().blob());
    let c = cfg(Approve::Session, vec![], &[&fp, &fp2]);
    let what = Conn::default().classify(&key, &sshsig("git")).unwrap();
    let mut r: Remembered<u64> = Remembered::default();
    assert_eq!(
        decide::decide(&c, &fp, &what, &KnownHosts::default(), r.contains(&1, &fp)),
        Decision::Ask
    );
    r.insert(1, &fp);
    assert_eq!(
        decide::decide(&c, &fp, &what, &KnownHosts::default(), r.contains(&1, &fp)),
        Decision::Remembered
    );
    assert!(!r.contains(&2, &fp), "another session of the Domain");
    assert!(!r.contains(&1, &fp2), "another key");
    r.forget(&1);
    assert!(!r.contains(&1, &fp));
    // approve = "each" never remembers.
    let c = cfg(Approve::Each, vec![], &[&fp]);
    assert_eq!(
        decide::decide(&c, &fp, &what, &KnownHosts::default(), true),
        Decision::Ask
    );
}

#[test]
fn texts_escape_the_sandbox_and_refusals_leak_nothing() {
    let server = Host::ed();
    let key = Host::ed().blob();
    let c = bound(&server);
    let what = c
        .classify(&key, &userauth(&SID, "git\u{202e}x\"y", &key, None))
        .unwrap();
    let known = KnownHosts::parse(known_line("github.com", &server.blob()).as_bytes());
    let lines = decide::describe("SHA256:x", &what, &known);
    assert!(!lines.concat().contains('\u{202e}'), "{lines:?}");
    assert!(lines[1].contains("known as github.com"), "{lines:?}");
    assert!(lines[1].contains(&keys::fingerprint(&server.blob())), "{lines:?}");
    let audit = decide::audit_line("s\n1", "SHA256:x", &what, "approved by rule 1");
    assert!(!audit.contains('\n') && !audit.contains('\u{202e}'), "{audit}");
    assert!(audit.contains("user=\"git\\\\u{202e}x\\\"y\""), "{audit}");
    for r in [
        Refusal::KeyNotAllowed,
        Refusal::NoRule,
        Refusal::Unbound,
        Refusal::Denied,
        Refusal::Agent,
    ] {
        // One audit line each: no newline, and no path or key material.
        let t = r.to_string();
        assert!(!t.contains('\n') && !t.contains('/') && !t.contains("SHA256:"), "{t}");
    }
}
