//! The sandbox's SSH agent, host side (issue 51, docs/config.md "SSH
//! agent"): each agent message arrives as a mailbox record the broker
//! verified (signed by the session's credential, bound to the session,
//! not replayed). Here it is parsed strictly (`sshagent::proto`: list,
//! sign and `session-bind@openssh.com` only), decided
//! (`sshagent::decide`: a rule, an earlier answer of this session for this
//! key under `approve = "session"`, or the developer at the asking
//! session's terminal through the escalation prompt), and only then is the
//! sign request forwarded to the developer's own agent, on a thread
//! (`sshagent::host::Caller`): the event loop never waits for it. Every
//! decision is in the audit log; the sandbox learns only a signature or a
//! failure.

use super::*;

use crate::config::ssh_agent::SshAgent;
use crate::escalation::AgentRequest;
use crate::sshagent::decide::{self, Conn as AgentConn, Decision, Refusal, Remembered, Use};
use crate::sshagent::host::Caller;
use crate::sshagent::known_hosts::KnownHosts;
use crate::sshagent::{keys, proto};

/// Agent connections whose session bindings are kept, per Domain: a
/// sandbox opening more makes the oldest forget theirs.
const MAX_CONNS: usize = 256;
/// The largest known_hosts file read.
const KNOWN_HOSTS_MAX: u64 = 4 * 1024 * 1024;

/// A signature waiting for the developer's answer.
pub(super) struct SshAsk {
    pub id: String,
    pub key_fp: String,
    pub what: Use,
    /// What the prompt shows.
    pub lines: Vec<String>,
    /// The sign request to forward once approved.
    pub body: Vec<u8>,
}

/// What a session's prompt asks: a host command or a signature.
pub(super) enum Asked {
    Command(Request),
    Ssh(SshAsk),
}

impl Asked {
    pub(super) fn id(&self) -> &str {
        match self {
            Asked::Command(r) => &r.id,
            Asked::Ssh(a) => &a.id,
        }
    }
}

/// A call to the developer's agent in flight.
pub(super) enum Job {
    List {
        id: String,
        session: String,
    },
    Sign {
        id: String,
        session: String,
        key_fp: String,
        what: Use,
        how: String,
    },
}

/// The Domain's SSH agent state.
pub(super) struct SshAgentState {
    cfg: SshAgent,
    /// Session bindings per (session, agent connection inside), oldest first.
    conns: VecDeque<((String, String), AgentConn)>,
    remembered: Remembered<String>,
    pub(super) caller: Caller<Job>,
}

impl SshAgentState {
    pub(super) fn new(cfg: SshAgent, host_sock: Option<PathBuf>) -> io::Result<SshAgentState> {
        Ok(SshAgentState {
            cfg,
            conns: VecDeque::new(),
            remembered: Remembered::default(),
            caller: Caller::new(host_sock)?,
        })
    }

    fn conn(&mut self, session: &str, conn: &str) -> &mut AgentConn {
        let k = (session.to_string(), conn.to_string());
        if let Some(i) = self.conns.iter().position(|(c, _)| *c == k) {
            return &mut self.conns[i].1;
        }
        if self.conns.len() >= MAX_CONNS {
            self.conns.pop_front();
        }
        self.conns.push_back((k, AgentConn::default()));
        &mut self.conns.back_mut().expect("just pushed").1
    }

    /// A session ended: its bindings and approvals go.
    pub(super) fn forget(&mut self, session: &str) {
        self.conns.retain(|((s, _), _)| s != session);
        self.remembered.forget(&session.to_string());
    }
}

/// The developer's known_hosts (`~/.ssh/known_hosts` of the coordinator's
/// `HOME`), read afresh for each decision; missing or unreadable is empty.
fn known_hosts() -> KnownHosts {
    let path = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ssh/known_hosts"));
    let text = path
        .and_then(|p| std::fs::File::open(p).ok())
        .and_then(|f| {
            use std::io::Read;
            let mut v = Vec::new();
            f.take(KNOWN_HOSTS_MAX).read_to_end(&mut v).ok().map(|_| v)
        })
        .unwrap_or_default();
    KnownHosts::parse(&text)
}

impl Coordinator {
    /// Every agent message the broker verified since the last look.
    pub(super) fn ssh_requests(&mut self) {
        let Some(b) = self.broker.as_mut() else { return };
        let reqs: Vec<AgentRequest> = b.agent.drain(..).collect();
        for r in reqs {
            self.ssh_request(r);
        }
    }

    fn ssh_refuse(&mut self, r: &AgentRequest, line: String) {
        if let Some(b) = self.broker.as_mut() {
            b.audit(line);
            b.write_agent_reply(&r.id, &proto::failure());
        }
    }

    fn ssh_request(&mut self, r: AgentRequest) {
        let sid = r.session.clone();
        let Some(st) = self.ssh.as_mut() else {
            let line = format!(
                "ssh-agent session={sid} request={} -> refused: the profile has no ssh_agent",
                r.id
            );
            return self.ssh_refuse(&r, line);
        };
        let msg = match proto::parse_request(&r.body) {
            Ok(m) => m,
            Err(e) => {
                let line = format!(
                    "ssh-agent session={sid} request={} -> refused: {}",
                    r.id,
                    Refusal::Message(e)
                );
                return self.ssh_refuse(&r, line);
            }
        };
        match msg {
            proto::Request::List => st.caller.start(
                Job::List {
                    id: r.id.clone(),
                    session: sid,
                },
                proto::encode_request(&proto::Request::List),
            ),
            proto::Request::SessionBind {
                host_key,
                session_id,
                signature,
                forwarding,
            } => {
                let bound = st
                    .conn(&sid, &r.conn)
                    .bind(&host_key, &session_id, &signature, forwarding);
                let (body, outcome) = match bound {
                    Ok(()) => (vec![proto::SSH_AGENT_SUCCESS], "bound".to_string()),
                    Err(e) => (proto::failure(), format!("refused: {e}")),
                };
                if let Some(b) = self.broker.as_mut() {
                    b.audit(format!(
                        "ssh-agent session={sid} session-bind host_key={} -> {outcome}",
                        keys::fingerprint(&host_key)
                    ));
                    b.write_agent_reply(&r.id, &body);
                }
            }
            proto::Request::Sign { key, data, .. } => {
                let fp = keys::fingerprint(&key);
                if !st.cfg.keys.contains(&fp) {
                    let line = format!(
                        "ssh-agent session={sid} key={fp} request={} -> refused: {}",
                        r.id,
                        Refusal::KeyNotAllowed
                    );
                    return self.ssh_refuse(&r, line);
                }
                let what = match st.conn(&sid, &r.conn).classify(&key, &data) {
                    Ok(w) => w,
                    Err(e) => {
                        let line = format!("ssh-agent session={sid} key={fp} request={} -> refused: {e}", r.id);
                        return self.ssh_refuse(&r, line);
                    }
                };
                let known = known_hosts();
                let remembered = st.remembered.contains(&sid, &fp);
                match decide::decide(&st.cfg, &fp, &what, &known, remembered) {
                    Decision::Rule(n) => self.ssh_sign(r, fp, what, format!("approved by rule {n}")),
                    Decision::Remembered => {
                        self.ssh_sign(r, fp, what, "approved: approved earlier in this session".into())
                    }
                    Decision::Refuse(e) => {
                        let line = decide::audit_line(&sid, &fp, &what, &format!("refused: {e}"));
                        self.ssh_refuse(&r, line);
                    }
                    Decision::Ask => {
                        let lines = decide::describe(&fp, &what, &known);
                        self.ssh_ask(
                            r.clone(),
                            SshAsk {
                                id: r.id.clone(),
                                key_fp: fp,
                                what,
                                lines,
                                body: r.body.clone(),
                            },
                        );
                    }
                }
            }
        }
    }

    /// Forwards an approved sign request to the developer's agent.
    fn ssh_sign(&mut self, r: AgentRequest, key_fp: String, what: Use, how: String) {
        let Some(st) = self.ssh.as_mut() else { return };
        st.caller.start(
            Job::Sign {
                id: r.id,
                session: r.session,
                key_fp,
                what,
                how,
            },
            r.body,
        );
    }

    /// Asks at the session's terminal; a session without one is refused.
    fn ssh_ask(&mut self, r: AgentRequest, ask: SshAsk) {
        let patience = Duration::from_secs(self.broker.as_ref().map_or(0, |b| b.prompt_timeout_s()));
        let Some((&k, s)) = self.sessions.iter_mut().find(|(_, s)| s.id.as_str() == r.session) else {
            return;
        };
        if !s.tty {
            let line = decide::audit_line(
                &r.session,
                &ask.key_fp,
                &ask.what,
                &format!("refused: {}", Refusal::NoTerminal),
            );
            return self.ssh_refuse(&r, line);
        }
        self.esc_deadlines.insert(ask.id.clone(), Instant::now() + patience);
        s.queue.push_back(Asked::Ssh(ask));
        self.next_prompt(k);
    }

    /// The developer answered a signature's prompt.
    pub(super) fn ssh_decided(&mut self, session: &str, ask: SshAsk, approved: bool) {
        if approved {
            if let Some(st) = self.ssh.as_mut() {
                if st.cfg.approve == crate::config::ssh_agent::Approve::Session {
                    st.remembered.insert(session.to_string(), &ask.key_fp);
                }
                st.caller.start(
                    Job::Sign {
                        id: ask.id,
                        session: session.to_string(),
                        key_fp: ask.key_fp,
                        what: ask.what,
                        how: "approved by the developer".into(),
                    },
                    ask.body,
                );
            }
        } else {
            self.ssh_end(session, &ask, &format!("refused: {}", Refusal::Denied));
        }
    }

    /// Ends a signature's request without signing (denied, expired, the
    /// session ended): audited, the sandbox gets a failure.
    pub(super) fn ssh_end(&mut self, session: &str, ask: &SshAsk, outcome: &str) {
        if let Some(b) = self.broker.as_mut() {
            b.audit(decide::audit_line(session, &ask.key_fp, &ask.what, outcome));
            b.write_agent_reply(&ask.id, &proto::failure());
        }
    }

    /// Answers from the developer's agent: filtered lists, signatures.
    pub(super) fn ssh_answers(&mut self) {
        let Some(st) = self.ssh.as_mut() else { return };
        let done = st.caller.take();
        let allowed = st.cfg.keys.clone();
        let Some(b) = self.broker.as_mut() else { return };
        for (job, answer) in done {
            match job {
                Job::List { id, session } => {
                    let body = match answer
                        .map_err(|e| e.to_string())
                        .and_then(|a| proto::parse_identities(&a).map_err(|e| format!("an unreadable answer: {e}")))
                    {
                        Ok(ids) => {
                            // INVARIANT: the sandbox sees only the keys `keys` lists.
                            let shown: Vec<proto::Identity> = ids
                                .into_iter()
                                .filter(|i| allowed.contains(&keys::fingerprint(&i.blob)))
                                .collect();
                            b.audit(format!("ssh-agent session={session} list -> {} key(s)", shown.len()));
                            proto::encode_identities(&shown)
                        }
                        Err(e) => {
                            b.audit(format!("ssh-agent session={session} list -> failed: {e}"));
                            proto::failure()
                        }
                    };
                    b.write_agent_reply(&id, &body);
                }
                Job::Sign {
                    id,
                    session,
                    key_fp,
                    what,
                    how,
                } => {
                    let sig = answer.map_err(|e| e.to_string()).and_then(|a| {
                        proto::parse_sign_response(&a).map_err(|_| "the agent refused or answered badly".to_string())
                    });
                    let (body, outcome) = match sig {
                        Ok(sig) => (proto::encode_sign_response(&sig), format!("signed: {how}")),
                        Err(e) => (proto::failure(), format!("failed after {how}: {}: {e}", Refusal::Agent)),
                    };
                    b.audit(decide::audit_line(&session, &key_fp, &what, &outcome));
                    b.write_agent_reply(&id, &body);
                }
            }
        }
    }
}
