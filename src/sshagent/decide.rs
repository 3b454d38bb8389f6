//! One agent connection's state and the decision for one request.
//!
//! A user-authentication signature is usable only in the SSH session whose
//! id it covers, and that session id is bound to the server's host key by
//! the host key's own signature (`session-bind@openssh.com`, checked in
//! [`Conn::bind`]). So "which server is this for" is answered by
//! cryptography, never by a log or a name the sandbox supplies: a rule's
//! `host` matches only a host key the developer's known_hosts lists for it.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;

use crate::config::ssh_agent::{Approve, RuleUse, SshAgent};

use super::keys::{self, KeyError};
use super::known_hosts::KnownHosts;
use super::proto::{self, ParseError, Signed};

/// Session bindings kept per agent connection (ssh binds once per hop;
/// a client reusing one agent connection for a few sessions stays under).
pub const MAX_BINDINGS: usize = 16;

/// Why a request is refused. The sandbox gets only `SSH_AGENT_FAILURE`
/// (the agent protocol has no reason text); the audit log gets the
/// `Display` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The message does not parse, or is not one that is served.
    Message(ParseError),
    /// A key not in `keys` (or not in the host agent).
    KeyNotAllowed,
    /// Sign data that is neither SSH user authentication nor `ssh-keygen -Y sign`.
    NotSigning(ParseError),
    /// The user-authentication request names another key than the one asked to sign.
    KeyMismatch,
    /// A session id no verified `session-bind` on this connection bound.
    Unbound,
    /// A hostbound request naming another host key than the bound one.
    HostKeyMismatch,
    /// `session-bind` of a forwarded agent hop.
    Forwarding,
    /// `session-bind` whose host key signature does not verify.
    HostKey(KeyError),
    /// The same session id bound again to another key, or too many bindings.
    Rebind,
    /// `approve = "rule"` and no rule matched.
    NoRule,
    /// The developer answered no, or the prompt timed out.
    Denied,
    /// The asking session has no terminal to ask at.
    NoTerminal,
    /// The host agent failed, timed out or is absent.
    Agent,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Message(e) => write!(f, "unserved message: {e}"),
            Refusal::KeyNotAllowed => write!(f, "a key not listed in keys"),
            Refusal::NotSigning(e) => write!(f, "data that is neither SSH login nor ssh-keygen -Y sign: {e}"),
            Refusal::KeyMismatch => write!(f, "the login request names another key"),
            Refusal::Unbound => write!(f, "a session id no verified session-bind bound"),
            Refusal::HostKeyMismatch => write!(f, "the login request names another host key than the bound one"),
            Refusal::Forwarding => write!(f, "a forwarded agent hop"),
            Refusal::HostKey(e) => write!(f, "session-bind: {e}"),
            Refusal::Rebind => write!(f, "session-bind: a session id rebound or too many bindings"),
            Refusal::NoRule => write!(f, "approve = \"rule\" and no rule matches"),
            Refusal::Denied => write!(f, "denied at the terminal"),
            Refusal::NoTerminal => write!(f, "the session has no terminal"),
            Refusal::Agent => write!(f, "the host agent did not answer"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Binding {
    session_id: Vec<u8>,
    host_key: Vec<u8>,
}

/// The state of one agent connection from the sandbox: the session ids
/// bound to host keys so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conn {
    bound: Vec<Binding>,
}

impl Conn {
    /// Checks a `session-bind@openssh.com` and records the binding.
    pub fn bind(
        &mut self,
        host_key: &[u8],
        session_id: &[u8],
        signature: &[u8],
        forwarding: bool,
    ) -> Result<(), Refusal> {
        if forwarding {
            return Err(Refusal::Forwarding);
        }
        keys::verify(host_key, session_id, signature).map_err(Refusal::HostKey)?;
        if let Some(b) = self.bound.iter().find(|b| b.session_id == session_id) {
            return if b.host_key == host_key {
                Ok(())
            } else {
                Err(Refusal::Rebind)
            };
        }
        if self.bound.len() >= MAX_BINDINGS {
            return Err(Refusal::Rebind);
        }
        self.bound.push(Binding {
            session_id: session_id.to_vec(),
            host_key: host_key.to_vec(),
        });
        Ok(())
    }

    /// What a sign request with `key` over `data` is for, checked against
    /// this connection's bindings.
    pub fn classify(&self, key: &[u8], data: &[u8]) -> Result<Use, Refusal> {
        match proto::parse_signed(data).map_err(Refusal::NotSigning)? {
            Signed::UserAuth {
                session_id,
                user,
                key: k,
                host_key,
            } => {
                if k != key {
                    return Err(Refusal::KeyMismatch);
                }
                let b = self
                    .bound
                    .iter()
                    .find(|b| b.session_id == session_id)
                    .ok_or(Refusal::Unbound)?;
                if host_key.is_some_and(|h| h != b.host_key) {
                    return Err(Refusal::HostKeyMismatch);
                }
                Ok(Use::Login {
                    user,
                    host_key: b.host_key.clone(),
                })
            }
            Signed::Sshsig {
                namespace,
                hash_alg,
                hash,
            } => Ok(Use::Sshsig {
                namespace,
                hash_alg,
                hash,
            }),
        }
    }
}

/// What a signature would be used for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Use {
    /// Logging in as `user` to the server holding `host_key` (verified).
    Login { user: String, host_key: Vec<u8> },
    /// `ssh-keygen -Y sign -n NAMESPACE` of data with this hash.
    Sshsig {
        namespace: String,
        hash_alg: String,
        hash: Vec<u8>,
    },
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Rule number N (0-based, in file order) approves.
    Rule(usize),
    /// `approve = "session"` and this (session, key) was approved before.
    Remembered,
    /// Ask the developer at the asking session's terminal.
    Ask,
    Refuse(Refusal),
}

/// Decides a sign request by `key_fp` for `what`. `remembered`: whether
/// this session already approved this key (used only with `approve = "session"`).
pub fn decide(cfg: &SshAgent, key_fp: &str, what: &Use, known: &KnownHosts, remembered: bool) -> Decision {
    if !cfg.keys.iter().any(|k| k == key_fp) {
        return Decision::Refuse(Refusal::KeyNotAllowed);
    }
    for (i, r) in cfg.rules.iter().enumerate() {
        if r.key != key_fp {
            continue;
        }
        let hit = match (&r.what, what) {
            (RuleUse::Login { host, user }, Use::Login { user: u, host_key }) => {
                user == u && known.lists(host_key, host)
            }
            (RuleUse::Namespace(ns), Use::Sshsig { namespace, .. }) => ns == namespace,
            _ => false,
        };
        if hit {
            return Decision::Rule(i);
        }
    }
    match cfg.approve {
        Approve::Rule => Decision::Refuse(Refusal::NoRule),
        Approve::Session if remembered => Decision::Remembered,
        Approve::Each | Approve::Session => Decision::Ask,
    }
}

/// `approve = "session"`'s memory: the (session, key) pairs the developer
/// approved. Scoped to the session that asked, never to the Domain.
#[derive(Debug, Clone)]
pub struct Remembered<S: Eq + Hash> {
    set: HashSet<(S, String)>,
}

impl<S: Eq + Hash> Default for Remembered<S> {
    fn default() -> Self {
        Remembered { set: HashSet::new() }
    }
}

impl<S: Eq + Hash + Clone> Remembered<S> {
    pub fn contains(&self, session: &S, key_fp: &str) -> bool {
        self.set.contains(&(session.clone(), key_fp.to_string()))
    }
    pub fn insert(&mut self, session: S, key_fp: &str) {
        self.set.insert((session, key_fp.to_string()));
    }
    /// Forgets a session that ended.
    pub fn forget(&mut self, session: &S) {
        self.set.retain(|(s, _)| s != session);
    }
}

/// What the host key is known as, for the prompt and the audit log.
pub fn host_key_names(host_key: &[u8], known: &KnownHosts) -> String {
    if known.revoked(host_key) {
        return "a REVOKED host key".into();
    }
    let (names, hashed) = known.names_of(host_key);
    match (names.is_empty(), hashed) {
        (true, 0) => "unknown host key".into(),
        (true, n) => format!("listed in known_hosts under {n} hashed name(s)"),
        (false, 0) => format!("known as {}", names.join(", ")),
        (false, n) => format!("known as {} and {n} hashed name(s)", names.join(", ")),
    }
}

/// The prompt's lines describing a signature (sandbox-supplied strings escaped).
pub fn describe(key_fp: &str, what: &Use, known: &KnownHosts) -> Vec<String> {
    match what {
        Use::Login { user, host_key } => vec![
            format!("SSH login as {:?} with key {key_fp}", crate::display::escape(user)),
            format!(
                "to the server with host key {} {} ({})",
                keys::key_type(host_key).unwrap_or("?"),
                keys::fingerprint(host_key),
                host_key_names(host_key, known)
            ),
        ],
        Use::Sshsig {
            namespace,
            hash_alg,
            hash,
        } => vec![
            format!(
                "ssh-keygen -Y sign, namespace {:?}, with key {key_fp}",
                crate::display::escape(namespace)
            ),
            format!("of data with {hash_alg} {}", hex(hash)),
        ],
    }
}

/// One audit log line for a decision: every sandbox-supplied string quoted
/// and escaped.
pub fn audit_line(session: &str, key_fp: &str, what: &Use, outcome: &str) -> String {
    let what = match what {
        Use::Login { user, host_key } => format!(
            "login user={:?} host_key={}",
            crate::display::escape(user),
            keys::fingerprint(host_key)
        ),
        Use::Sshsig {
            namespace,
            hash_alg,
            hash,
        } => {
            format!(
                "sshsig namespace={:?} {hash_alg}={}",
                crate::display::escape(namespace),
                hex(hash)
            )
        }
    };
    format!(
        "ssh-agent session={:?} key={key_fp} {what} -> {outcome}",
        crate::display::escape(session)
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
