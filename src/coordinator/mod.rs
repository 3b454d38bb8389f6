//! The Host Coordinator (`lazaret:[coordinator]`): one per live Domain,
//! started by the first Client CLI that wins the Domain lock.
//!
//! It holds the lock for its whole life, is the only opener of the durable
//! store, starts the Runtime Supervisor under a lease, publishes the Domain
//! socket once the sandbox is ready, owns one PTY master (or pipe set) per
//! session and the `runsc exec` client behind it, and tears everything down
//! when the last session leaves.
//!
//! Startup order (SPEC §5): lock → store → recover leftovers → generation +
//! component ids → lower prepared and leased → bundle → supervisor
//! (namespaces, runsc) → ready → publish. Nothing is joinable before publish.

mod approvals;
pub mod broker;
mod conn_state;
mod connections;
mod egress;
mod error;
mod secrets;
mod sessions;
mod sshagent;
mod startup;
mod teardown;

pub use error::CoordinatorError;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{self, Profile};
use crate::coordinator::broker::{self as escbroker, Broker, SessionView};
use crate::domain::{self, random_id, DomainId, Generation};
use crate::escalation::{self, Request, Status};
use crate::net::sidecar::NetRole;
use crate::plan;
use crate::storage::image;
use crate::storage::paths::{self, DomainPaths};
use crate::storage::store::{OwnedKind, Phase, Store};
use crate::supervisor;
use crate::sys;
use crate::trust::{Role, TrustAnchor};
use crate::view::sentry as gitsentry;
use crate::wire::client::{self as wire_client, ClientMsg, ServerMsg, SessionId, SessionInfo, StatusInfo};
use crate::wire::codec::{self, FrameReader};
use crate::wire::start::StartMsg;
use crate::wire::supervisor::{LeaseMsg, StatusMsg, StatusReceiver};

/// The Domain lock and the startup-report pipe arrive as these fds.
pub const LOCK_FD: RawFd = 3;
pub const START_FD: RawFd = 4;
/// With `--secrets`: the read end of the pipe on which the starting CLI
/// writes the profile's resolved secrets (`wire::start::SecretsMsg`).
pub const SECRETS_FD: RawFd = 5;

/// How long a published Domain waits for its first session.
const FIRST_SESSION_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the supervisor may take to have the sandbox running.
const SANDBOX_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Outbound bytes buffered per client before its session output pauses.
const CONN_OUT_MAX: usize = 1 << 20;

pub struct Args {
    pub profile: String,
    pub workspace: PathBuf,
    pub config: PathBuf,
    /// `--publish` forwards of the CLI that started the Domain.
    pub publish: Vec<crate::config::ports::PortForward>,
    /// `--memory/--pids/--cpus` from the CLI that started this Domain
    /// (`cgroup::override_args`): the set fields win over the profile's.
    pub limits: crate::config::Limits,
    /// `--secrets`: read the profile's secrets from [`SECRETS_FD`].
    pub secrets: bool,
    /// What was read there (in memory only).
    pub secret_values: Vec<(String, crate::config::secrets::SecretValue)>,
}

/// Startup reports to the CLI that spawned us (`wire::start::StartMsg`).
/// Closed once startup ends.
struct Reporter(Option<File>);

impl Reporter {
    fn send(&mut self, msg: StartMsg) {
        if let Some(f) = &mut self.0 {
            let _ = codec::send(f, &msg);
        }
    }
    fn progress(&mut self, msg: &str) {
        self.send(StartMsg::Progress { step: msg.into() });
    }
}

pub fn main(mut args: Args) -> i32 {
    crate::trace::step("coordinator", "process started");
    sys::set_thread_name("lz-coordinator");
    sys::ignore_signal(sys::SIGPIPE);
    // Both fds were handed to us by the spawning CLI and nothing else in
    // this process owns them.
    let (lock, start) = match (sys::take_inherited(LOCK_FD), sys::take_inherited(START_FD)) {
        (Ok(l), Ok(s)) => (File::from(l), File::from(s)),
        _ => return 1,
    };
    let _ = sys::set_cloexec(&lock, true);
    let _ = sys::set_cloexec(&start, true);
    let mut report = Reporter(Some(start));
    match sys::try_lock_exclusive(&lock) {
        Ok(true) => {}
        _ => {
            report.send(StartMsg::Failed {
                reason: "the coordinator does not hold the Domain lock".into(),
            });
            return 1;
        }
    }
    if args.secrets {
        match read_secrets() {
            Ok(v) => args.secret_values = v,
            Err(why) => {
                report.send(StartMsg::Failed {
                    reason: format!("the profile's secrets did not arrive from the starting lazaret: {why}"),
                });
                return 1;
            }
        }
    }
    let mut hc = match Coordinator::start(&args, &mut report) {
        Ok(hc) => hc,
        Err(e) => {
            match e.path() {
                Some(p) => log::error!("startup failed: {e} ({})", p.display()),
                None => log::error!("startup failed: {e}"),
            }
            // The sentence goes to the starting CLI as data on the wire; a
            // taken host port as what it is (bad input: the CLI names the holder).
            match &e {
                CoordinatorError::Ports(p) if p.taken().is_some() => {
                    report.send(StartMsg::PortTaken(p.taken().expect("taken")))
                }
                _ => report.send(StartMsg::Failed { reason: e.to_string() }),
            }
            return 1;
        }
    };
    // The gate holds the values now; this copy goes (wiped).
    args.secret_values.clear();
    report.send(StartMsg::Ready);
    report.0 = None;
    let code = hc.run();
    hc.teardown();
    let paths = hc.paths.clone();
    // INVARIANT: the store is closed before the lock can pass on (FR-17).
    drop(hc);
    // runsc's root goes while we hold the lock (a runsc process may still
    // be unlinking its last state file: bounded patience).
    let left = paths.remove_runsc_root(Duration::from_secs(2));
    if !left.is_empty() {
        log::warn!(
            "teardown: runsc left {} in its root",
            crate::display::escape(&left.join(", "))
        );
    }
    let _ = std::fs::remove_file(paths.log());
    // The lock file goes last, while we still hold the lock; a CLI that
    // locked the old inode notices it is unlinked and retries.
    let _ = std::fs::remove_file(paths.lock());
    // The Domain's runtime dir goes too when nothing is left in it (a CLI
    // that arrives now recreates it; see `client::start::connect_or_start`), and so
    // do runtime dirs other Domains' teardowns left empty.
    let _ = std::fs::remove_dir(&paths.run);
    if let Some(base) = paths.run.parent() {
        let n = crate::storage::paths::sweep_runtime(base, &paths.run);
        if n > 0 {
            log::info!("removed {n} empty runtime dirs of stopped Domains");
        }
    }
    drop(lock);
    code
}

/// Why the secrets did not arrive on [`SECRETS_FD`].
#[derive(Debug)]
enum SecretsPipeError {
    /// The descriptor was not handed over.
    Missing(io::Error),
    /// The frame on it did not arrive whole or did not decode.
    Read(crate::wire::ReadError),
}

impl std::fmt::Display for SecretsPipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            SecretsPipeError::Missing(e) => write!(f, "no secrets pipe ({e})"),
            SecretsPipeError::Read(e) => write!(f, "reading the secrets pipe: {e}"),
        }
    }
}

/// The one `SecretsMsg` on [`SECRETS_FD`] (then EOF).
fn read_secrets() -> Result<Vec<(String, crate::config::secrets::SecretValue)>, SecretsPipeError> {
    let fd = sys::take_inherited(SECRETS_FD).map_err(SecretsPipeError::Missing)?;
    let mut f = File::from(fd);
    match FrameReader::default().recv::<crate::wire::start::SecretsMsg>(&mut f) {
        Ok(crate::wire::start::SecretsMsg::Values(v)) => Ok(v),
        Err(e) => Err(SecretsPipeError::Read(e)),
    }
}

// ---- the coordinator's state -------------------------------------------------

struct Supervisor {
    child: Child,
    lease: Option<OwnedFd>,
    status: StatusReceiver,
    userns: File,
    mntns: File,
}

struct Conn {
    stream: UnixStream,
    reader: FrameReader,
    out: Vec<u8>,
    peer_pid: i32,
    state: conn_state::ConnState,
}

struct Session {
    id: SessionId,
    conn: u64,
    exec: Child,
    exec_start: u64,
    tty: bool,
    /// PTY master, or the write end of the guest's stdin pipe.
    input: Option<OwnedFd>,
    /// PTY master (again) or stdout pipe; stderr pipe.
    output: Option<OwnedFd>,
    errout: Option<OwnedFd>,
    pending_in: Vec<u8>,
    eof_after_input: bool,
    guest_pid_file: PathBuf,
    argv0: String,
    client_pid: i32,
    winch_pending: bool,
    client_id: String,
    /// The Session Anchor's certificate (DER) when escalation is on.
    cert_der: Vec<u8>,
    /// Escalation requests and SSH agent signatures waiting for the
    /// developer, and the one shown.
    queue: VecDeque<sshagent::Asked>,
    prompt: Option<sshagent::Asked>,
    /// A trailing piece of the stream `runsc exec` writes its own errors
    /// to (stderr pipe, or the PTY) that has runsc's error shape: held
    /// back until more output shows it was the command's, or the session
    /// ends (stream is `true` for the stderr pipe), or `HELD_MAX_AGE` passed.
    held: Option<(bool, Vec<u8>, Instant)>,
}

/// One closed token set for the event loop.
#[derive(Clone, Copy)]
enum Token {
    Listener,
    Signals,
    SupervisorStatus,
    ConnRead(u64),
    ConnWrite(u64),
    SessionOut(u64),
    SessionErr(u64),
    SessionIn(u64),
    Mailbox,
    HostOutput(usize),
    /// An answer of the developer's SSH agent is waiting.
    SshAgent,
}

struct Coordinator {
    domain_id: DomainId,
    profile: Profile,
    workspace: PathBuf,
    /// Where the workspace is inside (`plan::workspace`); set while the
    /// generation is planned.
    guest_workspace: String,
    paths: DomainPaths,
    store: Store,
    generation: Generation,
    coordinator_id: String,
    sandbox_id: String,
    runsc_args: Vec<String>,
    sup: Option<Supervisor>,
    runsc_pid: i32,
    runsc_start: u64,
    /// The profile user's setup as init reported it at boot; `None` until
    /// then.
    user_report: Option<crate::wire::guest::UserOutcome>,
    owned_rows: Vec<i64>,
    listener: Option<UnixListener>,
    signals: OwnedFd,
    conns: HashMap<u64, Conn>,
    sessions: HashMap<u64, Session>,
    helpers: Vec<Child>,
    /// The removal of earlier generations' trash, running since the start
    /// (joined at teardown; a drop joins it too).
    trash: Option<crate::storage::statefs::TrashRemoval>,
    next_key: u64,
    had_session: bool,
    published_at: Instant,
    stop_reason: Option<String>,
    phase: Phase,
    escalation: config::Escalation,
    broker: Option<Broker>,
    /// The profile's `[ssh_agent]` in use (issue 51).
    ssh: Option<sshagent::SshAgentState>,
    /// Request ids behind `Token::HostOutput` indices of the last poll set.
    host_tokens: Vec<String>,
    /// The Network Sidecar role of this generation.
    net: NetRole,
    /// Host port forwards (profile `ports` and `--publish`).
    ports: Vec<crate::config::ports::PortForward>,
    /// The resource limits that apply, and the generation's cgroup.
    limits: crate::storage::cgroup::Effective,
    cgroup: Option<crate::storage::cgroup::DomainCgroup>,
    /// What a joining session's configuration must match
    /// ([`config::join_fingerprint`]).
    join_fp: String,
    /// Accepted escalation requests waiting for a decision, by id: when
    /// they expire.
    esc_deadlines: HashMap<String, Instant>,
    /// Store rows of running host commands, by request id.
    host_rows: HashMap<String, i64>,
    /// Allow-by-name mode: which refusals each session was told of.
    egress: egress::EgressNotices,
    /// Issue 31: what the egress gate gets on the lease pipe (taken when
    /// sent), and what every session's environment gets (sentinels, the
    /// CA bundle variables). No real value is in `secret_env`.
    gate_secrets: Option<crate::wire::supervisor::GateSecrets>,
    secret_env: Vec<(String, String)>,
}

impl Coordinator {
    // ---- event loop -----------------------------------------------------------

    fn run(&mut self) -> i32 {
        loop {
            if self.stop_reason.is_some() {
                return 0;
            }
            if self.sessions.is_empty() {
                if self.had_session {
                    self.stop_reason = Some("the last session ended".into());
                    continue;
                }
                if self.published_at.elapsed() > FIRST_SESSION_TIMEOUT && self.conns.is_empty() {
                    self.stop_reason = Some("no session arrived".into());
                    continue;
                }
            }
            let mut fds = self.poll_set();
            let next = self
                .broker
                .as_ref()
                .and_then(|b| b.next_deadline())
                .into_iter()
                .chain(self.esc_deadlines.values().copied())
                .min();
            let mut timeout_ms = next.map_or(1000, |d| {
                d.saturating_duration_since(Instant::now()).as_millis().min(1000) as i32
            });
            if self.broker.as_ref().is_some_and(|b| b.backlog) {
                timeout_ms = 0;
            }
            if let Err(e) = fds.wait(Some(Duration::from_millis(timeout_ms as u64))) {
                log::error!("poll: {e}");
                return 1;
            }
            for (tok, fd) in fds.ready().collect::<Vec<_>>() {
                self.dispatch(tok, &fd);
            }
            if let Some(b) = self.broker.as_mut() {
                b.reap();
            }
            if self.broker.as_ref().is_some_and(|b| b.backlog) {
                self.mailbox();
            }
            self.expire_requests();
            self.sync_host_rows();
            self.release_held();
            self.egress_notices();
        }
    }

    /// `runsc exec` writes its error just before it exits, and the exit is
    /// reaped within moments: a held line still there after
    /// `HELD_MAX_AGE` was the command's own and goes out as it was.
    fn release_held(&mut self) {
        let mut out = Vec::new();
        for s in self.sessions.values_mut() {
            // INVARIANT: nothing of the session's reaches its terminal while
            // a prompt is up; what is held waits for the decision (it was
            // flushed before the prompt if it was held then).
            if s.prompt.is_some() {
                continue;
            }
            if s.held.as_ref().is_some_and(|h| h.2.elapsed() > HELD_MAX_AGE) {
                let (err, data, _) = s.held.take().unwrap();
                out.push((s.conn, err, data));
            }
        }
        for (conn, err, data) in out {
            let msg = if err {
                ServerMsg::Stderr(data)
            } else {
                ServerMsg::Stdout(data)
            };
            self.send(conn, &msg);
        }
    }

    fn poll_set(&mut self) -> sys::PollSet<Token> {
        let mut set = sys::PollSet::new();
        let mut add = |fd: std::os::fd::BorrowedFd<'_>, ev: sys::PollEvents, t: Token| set.add(fd, ev, t);
        add(self.signals.as_fd(), sys::POLLIN, Token::Signals);
        if let Some(l) = &self.listener {
            add(l.as_fd(), sys::POLLIN, Token::Listener);
        }
        if let Some(s) = &self.sup {
            add(s.status.fd(), sys::POLLIN, Token::SupervisorStatus);
        }
        let mut host_tokens = Vec::new();
        if let Some(a) = &self.ssh {
            add(a.caller.wake_fd(), sys::POLLIN, Token::SshAgent);
        }
        if let Some(b) = &self.broker {
            add(b.inotify_fd(), sys::POLLIN, Token::Mailbox);
            for (fd, id) in b.poll_fds() {
                add(fd, sys::POLLIN, Token::HostOutput(host_tokens.len()));
                host_tokens.push(id);
            }
        }
        for (&k, c) in &self.conns {
            if c.state != conn_state::ConnState::Closing {
                add(c.stream.as_fd(), sys::POLLIN, Token::ConnRead(k));
            }
            if !c.out.is_empty() {
                add(c.stream.as_fd(), sys::POLLOUT, Token::ConnWrite(k));
            }
        }
        for (&k, s) in &self.sessions {
            let backlog = self.conns.get(&s.conn).map_or(0, |c| c.out.len());
            // While an escalation prompt is up, the session's output waits.
            if backlog < CONN_OUT_MAX && s.prompt.is_none() {
                if let Some(o) = &s.output {
                    add(o.as_fd(), sys::POLLIN, Token::SessionOut(k));
                }
                if let Some(o) = &s.errout {
                    add(o.as_fd(), sys::POLLIN, Token::SessionErr(k));
                }
            }
            if let Some(i) = &s.input {
                if !s.pending_in.is_empty() {
                    add(i.as_fd(), sys::POLLOUT, Token::SessionIn(k));
                }
            }
        }
        self.host_tokens = host_tokens;
        set
    }

    fn dispatch(&mut self, tok: Token, fd: &sys::PollFd) {
        match tok {
            Token::Signals => {
                for s in sys::drain_signals(&self.signals) {
                    if s == sys::SIGCHLD {
                        self.reap();
                    } else {
                        self.stop_reason = Some(format!("the coordinator received signal {s}"));
                    }
                }
            }
            Token::Listener => self.accept(),
            Token::SupervisorStatus => self.supervisor_event(),
            Token::ConnRead(k) => self.conn_read(k),
            Token::ConnWrite(k) => self.conn_flush(k),
            Token::SessionOut(k) => self.session_output(k, false, fd.readable()),
            Token::SessionErr(k) => self.session_output(k, true, fd.readable()),
            Token::SessionIn(k) => self.session_input(k),
            Token::Mailbox => self.mailbox(),
            Token::SshAgent => self.ssh_answers(),
            Token::HostOutput(i) => {
                if let (Some(b), Some(id)) = (self.broker.as_mut(), self.host_tokens.get(i)) {
                    b.pump(id);
                }
            }
        }
    }

    fn supervisor_event(&mut self) {
        let Some(sup) = self.sup.as_mut() else { return };
        for msg in sup.status.read_available() {
            let why = match msg {
                Ok(StatusMsg::HelperDied { name }) => {
                    // Publication is withdrawn at once (teardown starts on the next
                    // turn of the loop); every session is told which helper died.
                    log::warn!("supervisor: helper {name} died");
                    self.phase = Phase::Failed;
                    // A helper the kernel killed at the memory limit (or that could
                    // not fork at the pids limit) reports that limit instead.
                    self.stop_reason = Some(self.oom_reason().unwrap_or_else(|| helper_died_reason(&name)));
                    return;
                }
                Ok(StatusMsg::Exited { code }) => format!("runsc run exited ({code})"),
                Ok(StatusMsg::Error { message }) => format!("error {message}"),
                Ok(StatusMsg::Stopped) => "stopped".into(),
                Err(codec::ReadError::Closed) => "exited".into(),
                // Fail closed: a report that does not decode ends the Domain.
                Err(e) => format!("unreadable report ({e})"),
                Ok(_) => continue,
            };
            log::warn!("supervisor: {why}");
            self.phase = Phase::Failed;
            self.stop_reason = Some(self.lost_reason());
            return;
        }
    }
}

/// How long a line in runsc's error shape may be held back while the
/// session's `runsc exec` is still running.
const HELD_MAX_AGE: Duration = Duration::from_secs(3);

fn sandbox_lost_reason() -> String {
    "the sandbox stopped unexpectedly (it was killed or crashed), so this Domain was stopped; \
     run `lazaret run` again to start it afresh"
        .into()
}

/// The one sentence a session is told when a helper of its generation died.
fn helper_died_reason(name: &str) -> String {
    format!(
        "the sandbox's helper {} died, so this Domain was stopped; run `lazaret run` again to start it afresh",
        crate::display::escape(name)
    )
}

/// Opens the coordinator log for the spawning CLI (stderr of the HC).
pub fn open_log(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}
