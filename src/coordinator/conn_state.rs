//! The client connection's state machine, as pure logic: [`decide`] maps a
//! connection's [`ConnState`] and one [`ClientMsg`] to the [`Action`] the
//! coordinator takes (the shell in `connections.rs` performs it and moves
//! the connection to its next state).
//!
//! ```text
//! AwaitingHello --Hello(version ok)--> Observer | Joined{stale?}
//! AwaitingHello --Hello(other version)--> Closing (refused, naming this build)
//! AwaitingHello --Basic(status|stop)--> Closing (the frozen basic answer;
//!                                        any build's client may ask)
//! Observer --Status|Escalations--> Closing   Observer --Open|Stop--> dropped
//! Joined --Open--> InSession (or Closing when refused / stale)
//! Joined --Status|Escalations|Stop|AddPort--> Closing
//! InSession --Stdin|StdinEof|Resize|Signal|Decision--> InSession
//! InSession --(session ends)--> Closing
//! any --message not listed--> dropped ("unexpected message")
//! Closing: nothing is read; queued output is flushed, then it is closed.
//! ```

use crate::sys;
use crate::wire::basic;
use crate::wire::client::{self as wire_client, ClientMsg, OpenRequest, WinSize};
use crate::wire::codec;

/// Where one client connection is in its protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Accepted; the first frame must be `Hello`.
    AwaitingHello,
    /// Said `Hello` without a profile: may ask for status only.
    Observer,
    /// Said `Hello` for a profile; no session yet. `stale` says why this
    /// client's configuration does not match the running one (it may then
    /// still ask for status or stop the Domain, but not open a session).
    Joined { client_id: String, stale: Option<String> },
    /// Has the session with this key.
    InSession { client_id: String, session: u64 },
    /// Flush what is queued, then close; nothing more is read.
    Closing,
}

impl ConnState {
    /// The session this connection has, if any.
    pub(super) fn session(&self) -> Option<u64> {
        match self {
            ConnState::InSession { session, .. } => Some(*session),
            _ => None,
        }
    }
}

/// What the running Domain a client joins is: its profile name and its
/// configuration fingerprint (`config::join_fingerprint`).
pub(super) struct Running<'a> {
    pub profile: &'a str,
    pub fingerprint: &'a str,
    /// The Domain's ID (for the refusal a client of another build gets).
    pub domain_id: &'a str,
}

/// A session's input from its client.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum SessionInput {
    Stdin(Vec<u8>),
    StdinEof,
    Resize(WinSize),
    /// SIGQUIT for the guest session (never for `runsc exec`: Go's runtime
    /// would answer it with a goroutine dump on the user's terminal).
    Quit,
    /// A signal `runsc exec` forwards to its guest process.
    Forward(i32),
    Decision {
        request_id: String,
        verdict: u8,
        argv: Vec<String>,
    },
}

/// What the coordinator does with one client message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    /// `Hello` accepted: the connection's next state.
    Enter(ConnState),
    /// Tell the client why, then close (→ `Closing`).
    Refuse(String),
    /// Close this connection (and its session) at once.
    Drop(String),
    /// Open the session (→ `InSession`, or `Refuse` when it cannot start).
    Open(OpenRequest),
    /// Reply with the status (→ `Closing`).
    Status,
    /// Reply with the pending escalation requests (→ `Closing`).
    Escalations,
    /// Stop the Domain with this reason (→ `Closing`).
    Stop(String),
    /// Reply with the frozen basic answer (`wire::basic`), first stopping
    /// the Domain with the reason when it is `Some` (→ `Closing`).
    Basic { stop: Option<String> },
    /// Add this host port forward, then reply with the status or why not
    /// (→ `Closing`).
    AddPort(crate::config::ports::PortForward),
    /// Input for the connection's session.
    Session(u64, SessionInput),
    /// Nothing to do (a message for a closing connection, a signal that is
    /// not forwarded).
    Ignore,
}

/// The decision for `msg` on a connection in `state`.
pub(super) fn decide(state: &ConnState, msg: ClientMsg, running: &Running) -> Action {
    use ConnState as S;
    match (state, msg) {
        (S::Closing, _) => Action::Ignore,
        (
            S::AwaitingHello,
            ClientMsg::Hello {
                version,
                client_id,
                profile,
                fingerprint,
            },
        ) => {
            let mine = wire_client::protocol_version();
            if version != mine {
                return Action::Refuse(other_build(version, mine, running.domain_id));
            }
            if profile.is_empty() && fingerprint.is_empty() {
                return Action::Enter(S::Observer);
            }
            let mine = running.fingerprint;
            // A client whose configuration differs may still stop the
            // Domain (that is how it picks up the new configuration),
            // but may not open a session in it.
            let stale = (profile != running.profile || fingerprint != mine).then(|| {
                format!(
                    "profile {profile:?} changed since this Domain started (configuration fingerprint {fingerprint} \
                     vs running {mine}): run `lazaret stop --profile {}` to restart it with the new configuration",
                    running.profile
                )
            });
            Action::Enter(S::Joined { client_id, stale })
        }
        // The frozen basic exchange: every build answers it, whatever the
        // client's protocol version (`wire::basic`).
        (S::AwaitingHello, ClientMsg::Basic(req)) if wire_client::answers_basic() => match req.op {
            basic::OP_STATUS => Action::Basic { stop: None },
            basic::OP_STOP => Action::Basic {
                stop: Some(if req.reason.is_empty() {
                    "stopped by `lazaret stop` of another lazaret build".into()
                } else {
                    req.reason
                }),
            },
            op => Action::Drop(format!("unknown basic request {op}")),
        },
        (S::Joined { stale: Some(why), .. }, ClientMsg::Open(_)) => Action::Refuse(why.clone()),
        (S::Observer, ClientMsg::Open(_) | ClientMsg::Stop { .. } | ClientMsg::AddPort(_)) => {
            Action::Drop("an observer connection may only ask for status".into())
        }
        (S::Joined { stale: None, .. }, ClientMsg::Open(req)) => Action::Open(req),
        (S::Observer | S::Joined { .. }, ClientMsg::Status) => Action::Status,
        (S::Observer | S::Joined { .. }, ClientMsg::Escalations) => Action::Escalations,
        // A stale client may add a port too: forwards are not part of the
        // configuration a session runs with.
        (S::Joined { .. }, ClientMsg::AddPort(p)) => Action::AddPort(p),
        (S::Joined { .. }, ClientMsg::Stop { reason }) => Action::Stop(if reason.is_empty() {
            "stopped by `lazaret stop`".into()
        } else {
            reason
        }),
        (S::InSession { session, .. }, m) => {
            let input = match m {
                ClientMsg::Stdin(data) => SessionInput::Stdin(data),
                ClientMsg::StdinEof => SessionInput::StdinEof,
                ClientMsg::Resize(w) => SessionInput::Resize(w),
                ClientMsg::Signal(sig) if sig as i32 == sys::SIGQUIT => SessionInput::Quit,
                ClientMsg::Signal(sig) => {
                    if !matches!(sig as i32, sys::SIGINT | sys::SIGTSTP | sys::SIGTERM | sys::SIGHUP) {
                        return Action::Ignore;
                    }
                    SessionInput::Forward(sig as i32)
                }
                ClientMsg::Decision {
                    request_id,
                    verdict,
                    argv,
                } => SessionInput::Decision {
                    request_id,
                    verdict,
                    argv,
                },
                m => return unexpected(&m),
            };
            Action::Session(*session, input)
        }
        (_, m) => unexpected(&m),
    }
}

/// The refusal a client of another protocol version gets: which build
/// started the Domain, and how to restart it with the client's build.
fn other_build(theirs: u32, mine: u32, domain_id: &str) -> String {
    let short = &domain_id[..domain_id.len().min(12)];
    format!(
        "this Domain was started by lazaret {} (protocol {mine}) and this lazaret speaks protocol {theirs}: \
         `lazaret ps` and `lazaret stop` reach it, nothing else does; run `lazaret stop {short}` \
         (its sessions end), then run again to restart it with this build",
        crate::build_info::describe()
    )
}

fn unexpected(m: &ClientMsg) -> Action {
    let name = codec::Message::name(m);
    Action::Drop(format!("unexpected message {name} in this state"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUNNING: Running = Running {
        profile: "dev",
        fingerprint: "fp1",
        domain_id: "0123456789abcdef0123",
    };

    fn hello(version: u32, profile: &str, fingerprint: &str) -> ClientMsg {
        ClientMsg::Hello {
            version,
            client_id: "c1".into(),
            profile: profile.into(),
            fingerprint: fingerprint.into(),
        }
    }
    fn open() -> ClientMsg {
        ClientMsg::Open(OpenRequest {
            argv: vec!["sh".into()],
            env: vec![],
            cwd: "/w".into(),
            tty: None,
            root: false,
        })
    }
    fn joined() -> ConnState {
        ConnState::Joined {
            client_id: "c1".into(),
            stale: None,
        }
    }
    fn stale() -> ConnState {
        ConnState::Joined {
            client_id: "c1".into(),
            stale: Some("changed".into()),
        }
    }
    fn in_session() -> ConnState {
        ConnState::InSession {
            client_id: "c1".into(),
            session: 7,
        }
    }
    fn stop(reason: &str) -> ClientMsg {
        ClientMsg::Stop { reason: reason.into() }
    }
    fn decision() -> ClientMsg {
        ClientMsg::Decision {
            request_id: "r".into(),
            verdict: wire_client::VERDICT_DENY,
            argv: vec![],
        }
    }
    fn is_drop(a: &Action) -> bool {
        matches!(a, Action::Drop(_))
    }
    /// Every message kind, for the "anything else" rows.
    fn all() -> Vec<ClientMsg> {
        vec![
            hello(wire_client::PROTOCOL_VERSION, "dev", "fp1"),
            open(),
            ClientMsg::Stdin(b"x".to_vec()),
            ClientMsg::StdinEof,
            ClientMsg::Resize(WinSize { rows: 24, cols: 80 }),
            ClientMsg::Signal(sys::SIGINT as u8),
            ClientMsg::Status,
            stop(""),
            decision(),
            ClientMsg::Escalations,
        ]
    }

    #[test]
    fn hello_of_a_matching_client_joins() {
        let a = decide(
            &ConnState::AwaitingHello,
            hello(wire_client::PROTOCOL_VERSION, "dev", "fp1"),
            &RUNNING,
        );
        assert_eq!(a, Action::Enter(joined()));
    }

    #[test]
    fn hello_without_a_profile_is_an_observer() {
        let a = decide(
            &ConnState::AwaitingHello,
            hello(wire_client::PROTOCOL_VERSION, "", ""),
            &RUNNING,
        );
        assert_eq!(a, Action::Enter(ConnState::Observer));
    }

    #[test]
    fn hello_of_another_version_is_refused() {
        let a = decide(
            &ConnState::AwaitingHello,
            hello(wire_client::PROTOCOL_VERSION + 1, "dev", "fp1"),
            &RUNNING,
        );
        let Action::Refuse(why) = a else { panic!("{a:?}") };
        assert!(why.contains("this Domain was started by lazaret 0."), "{why}");
        assert!(why.contains("run `lazaret stop 0123456789ab`"), "{why}");
    }

    #[test]
    fn basic_requests_of_any_build_are_answered_first_only() {
        use crate::wire::basic::BasicRequest;
        assert_eq!(
            decide(
                &ConnState::AwaitingHello,
                ClientMsg::Basic(BasicRequest::status()),
                &RUNNING
            ),
            Action::Basic { stop: None }
        );
        assert_eq!(
            decide(
                &ConnState::AwaitingHello,
                ClientMsg::Basic(BasicRequest::stop("")),
                &RUNNING
            ),
            Action::Basic {
                stop: Some("stopped by `lazaret stop` of another lazaret build".into())
            }
        );
        // A newer basic version is answered all the same (its layout is frozen).
        let mut newer = BasicRequest::stop("why");
        newer.basic = 9;
        assert_eq!(
            decide(&ConnState::AwaitingHello, ClientMsg::Basic(newer), &RUNNING),
            Action::Basic {
                stop: Some("why".into())
            }
        );
        let mut unknown = BasicRequest::status();
        unknown.op = 3;
        assert!(is_drop(&decide(
            &ConnState::AwaitingHello,
            ClientMsg::Basic(unknown),
            &RUNNING
        )));
        // After Hello it is a violation, as any second first frame is.
        for s in [ConnState::Observer, joined(), in_session()] {
            let a = decide(&s, ClientMsg::Basic(BasicRequest::status()), &RUNNING);
            assert!(is_drop(&a), "{s:?}: {a:?}");
        }
    }

    #[test]
    fn hello_with_another_configuration_is_stale() {
        for (p, f) in [("dev", "fp2"), ("other", "fp1"), ("", "fp1"), ("dev", "")] {
            let a = decide(
                &ConnState::AwaitingHello,
                hello(wire_client::PROTOCOL_VERSION, p, f),
                &RUNNING,
            );
            let Action::Enter(ConnState::Joined { stale: Some(why), .. }) = a else {
                panic!("{p} {f}: {a:?}")
            };
            assert!(why.contains("run `lazaret stop --profile dev`"), "{why}");
        }
    }

    #[test]
    fn nothing_but_hello_comes_first() {
        for m in all().into_iter().skip(1) {
            assert!(is_drop(&decide(&ConnState::AwaitingHello, m, &RUNNING)));
        }
    }

    #[test]
    fn a_second_hello_is_a_violation() {
        for s in [ConnState::Observer, joined(), stale(), in_session()] {
            let a = decide(&s, hello(wire_client::PROTOCOL_VERSION, "dev", "fp1"), &RUNNING);
            assert!(is_drop(&a), "{s:?}: {a:?}");
        }
    }

    #[test]
    fn an_observer_may_only_ask_for_status() {
        assert_eq!(
            decide(&ConnState::Observer, ClientMsg::Status, &RUNNING),
            Action::Status
        );
        assert_eq!(
            decide(&ConnState::Observer, ClientMsg::Escalations, &RUNNING),
            Action::Escalations
        );
        for m in all()
            .into_iter()
            .filter(|m| !matches!(m, ClientMsg::Status | ClientMsg::Escalations))
        {
            let a = decide(&ConnState::Observer, m, &RUNNING);
            assert!(is_drop(&a), "{a:?}");
        }
        let Action::Drop(why) = decide(&ConnState::Observer, open(), &RUNNING) else {
            panic!()
        };
        assert_eq!(why, "an observer connection may only ask for status");
    }

    #[test]
    fn a_joined_client_opens_asks_or_stops() {
        assert!(matches!(
            decide(&joined(), open(), &RUNNING),
            Action::Open(OpenRequest { root: false, .. })
        ));
        assert_eq!(decide(&joined(), ClientMsg::Status, &RUNNING), Action::Status);
        let p: crate::config::ports::PortForward = "0:3000".parse().unwrap();
        assert_eq!(decide(&joined(), ClientMsg::AddPort(p), &RUNNING), Action::AddPort(p));
        assert!(matches!(
            decide(&ConnState::Observer, ClientMsg::AddPort(p), &RUNNING),
            Action::Drop(_)
        ));
        assert_eq!(decide(&joined(), stop("why"), &RUNNING), Action::Stop("why".into()));
        assert_eq!(
            decide(&joined(), stop(""), &RUNNING),
            Action::Stop("stopped by `lazaret stop`".into())
        );
        for m in [
            ClientMsg::Stdin(vec![1]),
            ClientMsg::StdinEof,
            ClientMsg::Signal(2),
            decision(),
        ] {
            assert!(is_drop(&decide(&joined(), m, &RUNNING)));
        }
    }

    #[test]
    fn a_stale_client_may_stop_but_not_open() {
        assert_eq!(decide(&stale(), open(), &RUNNING), Action::Refuse("changed".into()));
        assert_eq!(decide(&stale(), ClientMsg::Status, &RUNNING), Action::Status);
        assert_eq!(decide(&stale(), stop("x"), &RUNNING), Action::Stop("x".into()));
    }

    #[test]
    fn a_session_takes_input_signals_and_decisions() {
        let s = in_session();
        assert_eq!(
            decide(&s, ClientMsg::Stdin(b"ab".to_vec()), &RUNNING),
            Action::Session(7, SessionInput::Stdin(b"ab".to_vec()))
        );
        assert_eq!(
            decide(&s, ClientMsg::StdinEof, &RUNNING),
            Action::Session(7, SessionInput::StdinEof)
        );
        let w = WinSize { rows: 24, cols: 80 };
        assert_eq!(
            decide(&s, ClientMsg::Resize(w), &RUNNING),
            Action::Session(7, SessionInput::Resize(w))
        );
        assert!(matches!(
            decide(&s, decision(), &RUNNING),
            Action::Session(7, SessionInput::Decision { .. })
        ));
        for sig in [sys::SIGINT, sys::SIGTSTP, sys::SIGTERM, sys::SIGHUP] {
            assert_eq!(
                decide(&s, ClientMsg::Signal(sig as u8), &RUNNING),
                Action::Session(7, SessionInput::Forward(sig))
            );
        }
        assert_eq!(
            decide(&s, ClientMsg::Signal(sys::SIGQUIT as u8), &RUNNING),
            Action::Session(7, SessionInput::Quit)
        );
        // SIGKILL (9) or any other number is not passed to `runsc exec`.
        for sig in [9u8, 0, 255] {
            assert_eq!(decide(&s, ClientMsg::Signal(sig), &RUNNING), Action::Ignore);
        }
    }

    #[test]
    fn a_session_cannot_reopen_stop_or_ask() {
        for m in [open(), ClientMsg::Status, stop(""), ClientMsg::Escalations] {
            assert!(is_drop(&decide(&in_session(), m, &RUNNING)));
        }
    }

    #[test]
    fn a_closing_connection_ignores_everything() {
        for m in all() {
            assert_eq!(decide(&ConnState::Closing, m, &RUNNING), Action::Ignore);
        }
    }

    #[test]
    fn only_a_session_has_a_session() {
        assert_eq!(in_session().session(), Some(7));
        for s in [
            ConnState::AwaitingHello,
            ConnState::Observer,
            joined(),
            stale(),
            ConnState::Closing,
        ] {
            assert_eq!(s.session(), None);
        }
    }
}
