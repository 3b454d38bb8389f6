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

pub mod broker;
pub mod trust;

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
use crate::coordinator::trust::{Role, TrustAnchor};
use crate::domain::{self, random_id};
use crate::escalation::{self, Request, Status};
use crate::net::sidecar::NetRole;
use crate::plan;
use crate::storage::image;
use crate::storage::paths::{self, DomainPaths};
use crate::storage::store::{OwnedKind, Phase, Store};
use crate::supervisor;
use crate::sys;
use crate::view::sentry as gitsentry;
use crate::wire::client::{self as ipc, ClientMsg, FrameReader, ServerMsg, SessionInfo, StatusInfo};
use crate::wire::start::StartMsg;
use crate::wire::supervisor::{LeaseMsg, StatusMsg, StatusReceiver};

/// The Domain lock and the startup-report pipe arrive as these fds.
pub const LOCK_FD: RawFd = 3;
pub const START_FD: RawFd = 4;

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
    /// (`cgroup::encode_overrides`).
    pub limits: Option<String>,
}

/// Startup reports to the CLI that spawned us (`wire::start::StartMsg`).
/// Closed once startup ends.
struct Reporter(Option<File>);

impl Reporter {
    fn send(&mut self, msg: StartMsg) {
        if let Some(f) = &mut self.0 {
            let _ = ipc::send(f, &msg);
        }
    }
    fn progress(&mut self, msg: &str) {
        self.send(StartMsg::Progress { step: msg.into() });
    }
}

pub fn main(args: Args) -> i32 {
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
    let mut hc = match Coordinator::start(&args, &mut report) {
        Ok(hc) => hc,
        Err(msg) => {
            log::error!("startup failed: {msg}");
            report.send(StartMsg::Failed { reason: msg });
            return 1;
        }
    };
    report.send(StartMsg::Ready);
    report.0 = None;
    let code = hc.run();
    hc.teardown();
    let paths = hc.paths.clone();
    // INVARIANT: the store is closed before the lock can pass on (FR-17).
    drop(hc);
    let _ = std::fs::remove_file(paths.log());
    // The lock file goes last, while we still hold the lock; a CLI that
    // locked the old inode notices it is unlinked and retries.
    let _ = std::fs::remove_file(paths.lock());
    // The Domain's runtime dir goes too when nothing is left in it (a CLI
    // that arrives now recreates it; see `cli::connect_or_start`).
    let _ = std::fs::remove_dir(paths.runsc_root());
    let _ = std::fs::remove_dir(&paths.run);
    drop(lock);
    code
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
    hello: Option<String>,
    /// Said Hello without a profile: may ask for status only.
    observer: bool,
    /// Why this client's configuration does not match the running one.
    stale: Option<String>,
    session: Option<u64>,
    /// Flush what is queued, then close.
    closing: bool,
}

struct Session {
    id: String,
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
    /// Escalation requests waiting for the developer, and the one shown.
    queue: VecDeque<Request>,
    prompt: Option<Request>,
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
}

struct Coordinator {
    domain_id: String,
    profile: Profile,
    workspace: PathBuf,
    paths: DomainPaths,
    store: Store,
    generation: u64,
    coordinator_id: String,
    sandbox_id: String,
    runsc_args: Vec<String>,
    sup: Option<Supervisor>,
    runsc_pid: i32,
    runsc_start: u64,
    owned_rows: Vec<i64>,
    listener: Option<UnixListener>,
    signals: OwnedFd,
    conns: HashMap<u64, Conn>,
    sessions: HashMap<u64, Session>,
    helpers: Vec<Child>,
    next_key: u64,
    had_session: bool,
    published_at: Instant,
    stop_reason: Option<String>,
    phase: &'static str,
    escalation: config::Escalation,
    broker: Option<Broker>,
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
}

fn io_msg(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

/// Most bytes of already-written session output sent ahead of a prompt.
const PROMPT_FLUSH_MAX: usize = 64 * 1024;

/// Reads what the session's output and error streams hold right now (they
/// are non-blocking), up to `max` bytes, as frames for its client.
fn pending_output(s: &Session, max: usize) -> Vec<ServerMsg> {
    let mut out = Vec::new();
    let mut left = max;
    for (fd, err) in [(s.output.as_ref(), false), (s.errout.as_ref(), true)] {
        let Some(fd) = fd else { continue };
        while left > 0 {
            let mut buf = vec![0u8; ipc::MAX_DATA_CHUNK.min(left)];
            match sys::read(&fd, &mut buf) {
                Ok(n) if n > 0 => {
                    buf.truncate(n);
                    left -= n;
                    out.push(if err {
                        ServerMsg::Stderr(buf)
                    } else {
                        ServerMsg::Stdout(buf)
                    });
                }
                // Empty, end of file or an error: the normal path sees it.
                _ => break,
            }
        }
    }
    out
}

impl Coordinator {
    fn start(args: &Args, report: &mut Reporter) -> Result<Coordinator, String> {
        let cfg = config::load(&args.config).map_err(|e| e.to_string())?;
        let profile = cfg.profile(&args.profile).map_err(|e| e.to_string())?.clone();
        let net = NetRole::new(&cfg, &profile)?;
        let ports = crate::config::ports::merge(&profile.ports, &args.publish)?;
        if !ports.is_empty() && !profile.network {
            return Err(format!(
                "profile {:?} forwards ports but has network.mode = \"none\": port forwards need the slirp network",
                profile.name
            ));
        }
        let limits = crate::storage::cgroup::apply_overrides(profile.limits, args.limits.as_deref().unwrap_or(""))?;
        let limits = crate::storage::cgroup::Effective::for_host(&limits);
        let profile_for_fp = profile.clone();
        let storage = paths::storage_root().map_err(|e| e.to_string())?;
        let runtime = paths::runtime_root(cfg.runtime_dir.as_deref());
        let domain_id = domain::domain_id(&profile.name, &args.workspace);
        let dp = DomainPaths::new(&storage, &runtime, &domain_id);
        dp.ensure().map_err(|e| e.to_string())?;
        let mut store = match Store::open(&dp.store()) {
            Ok(s) => s,
            Err(e) => {
                // A Domain root that never got a store (a full disk) is not
                // left behind as an empty, nameless Domain.
                let _ = std::fs::remove_dir(&dp.root);
                return Err(e.to_string());
            }
        };
        recover(&store, &dp);

        let generation = store
            .begin_generation(&profile.name, &args.workspace.to_string_lossy(), &profile.fingerprint())
            .map_err(|e| e.to_string())?;
        let coordinator_id = random_id(8);
        let sandbox_id = format!("lz-{}-{}", &domain_id[..8], random_id(4));
        store
            .record_component(generation, "session-coordinator", &coordinator_id)
            .map_err(|e| e.to_string())?;
        store
            .record_component(generation, "agent-sandbox", &sandbox_id)
            .map_err(|e| e.to_string())?;
        log::info!("domain {domain_id} generation {generation} coordinator {coordinator_id}");

        let signals = sys::signal_pipe(&[sys::SIGCHLD, sys::SIGTERM, sys::SIGINT, sys::SIGHUP])
            .map_err(|e| io_msg("signal pipe", e))?;
        let mut hc = Coordinator {
            domain_id,
            profile,
            workspace: args.workspace.clone(),
            runsc_args: plan::runsc_global_args(&dp.runsc_root()),
            paths: dp,
            store,
            generation,
            coordinator_id,
            sandbox_id,
            sup: None,
            runsc_pid: 0,
            runsc_start: 0,
            owned_rows: Vec::new(),
            listener: None,
            signals,
            conns: HashMap::new(),
            sessions: HashMap::new(),
            helpers: Vec::new(),
            next_key: 1,
            had_session: false,
            published_at: Instant::now(),
            stop_reason: None,
            phase: "starting",
            escalation: cfg.escalation.clone(),
            broker: None,
            host_tokens: Vec::new(),
            net,
            ports,
            limits,
            cgroup: None,
            join_fp: config::join_fingerprint(&cfg, &profile_for_fp),
            esc_deadlines: HashMap::new(),
            host_rows: HashMap::new(),
        };
        if let Err(e) = hc.bring_up(&storage, report) {
            hc.teardown();
            return Err(e);
        }
        Ok(hc)
    }

    fn bring_up(&mut self, storage: &Path, report: &mut Reporter) -> Result<(), String> {
        report.progress("preparing image");
        let mut quiet = image::Progress::new(true);
        let (layout, tag) = image::resolve(storage, &self.profile.image, &mut quiet).map_err(|e| e.to_string())?;
        // INVARIANT: the lease is recorded before the lower is used, so GC
        // never reclaims an artifact a generation depends on. The lowers
        // lock (shared) keeps `image prune` out until the artifact is named
        // in domain.json and leased.
        let gc = crate::storage::gc::lock_shared(storage)?;
        let digest = image::manifest_digest(&layout, &tag).map_err(|e| e.to_string())?;
        let artifact = image::artifact_id(&digest);
        crate::storage::state::record_domain(
            &self.paths.root,
            &self.domain_id,
            &self.profile,
            &self.workspace,
            &artifact,
            &digest,
        )
        .map_err(|e| io_msg("writing domain.json", e))?;
        self.store
            .lease(self.generation, &artifact, &digest)
            .map_err(|e| e.to_string())?;
        let bound = crate::storage::layercheck::Bound {
            floor: self
                .profile
                .limits
                .image_layer
                .unwrap_or(crate::storage::layercheck::DEFAULT_FLOOR),
            ..Default::default()
        };
        let lower = image::prepare_bounded(storage, &layout, &tag, &mut quiet, bound).map_err(|e| e.to_string())?;
        drop(gc);

        report.progress("starting sandbox");
        let gen_dir = self.paths.gen_dir();
        let _ = std::fs::remove_dir_all(&gen_dir);
        std::fs::create_dir_all(gen_dir.join("bundle")).map_err(|e| io_msg(&gen_dir.display().to_string(), e))?;
        std::fs::create_dir_all(self.paths.runsc_root()).map_err(|e| io_msg("runsc root", e))?;
        let init = std::env::current_exe()
            .map_err(|e| io_msg("locating lazaret", e))?
            .with_file_name("lazaret-init");
        if !init.is_file() {
            return Err(format!("{} is missing: reinstall lazaret", init.display()));
        }
        self.net.prepare(&self.store, self.generation, &gen_dir)?;
        // The State Anchor: one persistent overlay per `persist` path.
        let mut binds = crate::storage::anchor::prepare_generation(
            &self.paths.root,
            &gen_dir,
            &lower.rootfs(),
            &self.profile.persist,
        )
        .map_err(|e| e.to_string())?;
        binds.extend(self.net.binds());
        // The profile's volumes (over any persistent path they lie under),
        // and the host's Git identity as read-only system config.
        crate::plan::guest::check_volume_targets(&lower.rootfs(), &self.profile.volumes, &self.profile.persist)?;
        let mut volume_views = Vec::new();
        for mut b in crate::plan::guest::volume_binds(&self.profile.volumes) {
            // A profile `user` sees its volume directories through a view
            // that shows the developer's files as its own.
            if self.profile.user.is_some() && b.host.is_dir() {
                let mnt = gen_dir.join(format!("view-volume-{}", volume_views.len()));
                volume_views.push((b.host.clone(), mnt.clone()));
                b.host = mnt;
            }
            binds.push(b);
        }
        if self.profile.git_identity {
            binds.push(crate::plan::guest::git_identity_bind(&gen_dir).map_err(|e| io_msg("writing gitconfig", e))?);
        }
        if self.escalation.enabled {
            let escalate = init.with_file_name("lazaret-escalate");
            if !escalate.is_file() {
                return Err(format!("{} is missing: reinstall lazaret", escalate.display()));
            }
            let anchor = TrustAnchor::new(&self.domain_id, self.generation, &self.profile.name)
                .map_err(|e| format!("trust anchor: {e}"))?;
            // Role identities of this generation; their keys never leave memory.
            for (role, id) in [
                (Role::SessionCoordinator, &self.coordinator_id),
                (Role::AgentSandbox, &self.sandbox_id),
            ] {
                anchor.issue(role, id, None).map_err(|e| format!("trust anchor: {e}"))?;
            }
            let broker = Broker::new(
                anchor,
                self.escalation.clone(),
                &self.workspace,
                &self.paths.run.join("mailbox"),
                &self.paths.root.join("audit.log"),
            )?;
            binds.push(plan::BindMount {
                guest: escalation::GUEST_ESCALATE.into(),
                host: escalate,
                read_only: true,
            });
            binds.push(plan::BindMount {
                guest: escalation::GUEST_REQUESTS.into(),
                host: broker.requests_dir().to_path_buf(),
                read_only: false,
            });
            binds.push(plan::BindMount {
                guest: escalation::GUEST_RESULTS.into(),
                host: broker.results_dir().to_path_buf(),
                read_only: true,
            });
            self.broker = Some(broker);
        }
        // Git Sentry and ignored state: /workspace is a FUSE view the supervisor serves.
        let views = gitsentry::prepare_views(
            &self.workspace,
            &gen_dir,
            self.profile
                .isolate_ignored
                .then(|| self.paths.ignored_dir())
                .as_deref(),
            self.profile.user.as_ref().map_or(0, |_| config::GUEST_USER_UID),
        )
        .map_err(|e| e.to_string())?;
        gitsentry::add_volume_views(&gen_dir, &volume_views).map_err(|e| e.to_string())?;
        binds.extend(views.binds.iter().cloned());
        binds.extend(self.prepare_scratch(&binds)?);
        let plan = plan::SandboxPlan {
            rootfs: lower.rootfs(),
            workspace: views.workspace_source.clone(),
            init,
            hostname: "lazaret".into(),
            binds,
            netns: self.net.sandbox_netns(),
            caps: self.profile.caps.clone(),
            nproc: self.limits.guest_tasks(),
        };
        std::fs::write(gen_dir.join("bundle/config.json"), plan::sandbox_config(&plan))
            .map_err(|e| io_msg("writing config.json", e))?;
        self.start_supervisor()?;
        report.progress("probing the network");
        self.verify_network()?;
        self.setup_user()?;
        self.forward_ports(report)?;
        self.publish()
    }

    fn start_supervisor(&mut self) -> Result<(), String> {
        let (lease_rd, lease_wr) = sys::pipe().map_err(|e| io_msg("pipe", e))?;
        let (status_rd, status_wr) = sys::pipe().map_err(|e| io_msg("pipe", e))?;
        let exe = std::env::current_exe().map_err(|e| io_msg("locating lazaret", e))?;
        let row = self
            .store
            .record_intent(self.generation, OwnedKind::Process, "supervisor")
            .map_err(|e| e.to_string())?;
        self.owned_rows.push(row);
        // Resource limits: the supervisor joins the generation's cgroup
        // before it execs, so runsc and the sandbox are born inside.
        self.cgroup = self.make_cgroup()?;
        let join: Vec<i32> = self.cgroup.as_ref().map(|c| c.procs_fds()).unwrap_or_default();
        let mut cmd = match self.cgroup.as_ref().and_then(|c| c.systemd_unit.clone()) {
            Some(unit) => {
                let mut c = Command::new("systemd-run");
                c.args(crate::storage::cgroup::systemd_run_args(&unit, &self.limits))
                    .arg(&exe);
                c
            }
            None => {
                let mut c = Command::new(&exe);
                c.arg0("lazaret:[supervisor]");
                c
            }
        };
        cmd.arg("__supervisor")
            .arg("--runsc-root")
            .arg(self.paths.runsc_root())
            .arg("--bundle")
            .arg(self.paths.gen_dir().join("bundle"))
            .arg("--id")
            .arg(&self.sandbox_id)
            .args(self.net.supervisor_args())
            .arg("--views")
            .arg(self.paths.gen_dir().join("views"))
            .arg("--anchor-plan")
            .arg(crate::storage::anchor::plan_path(&self.paths.gen_dir()))
            .arg("--scratch")
            .arg(self.paths.root.join("scratch/overlay"))
            .args(self.meminfo_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (l, s) = (lease_rd.as_raw_fd(), status_wr.as_raw_fd());
        sys::ChildSetup::new()
            .reset_signals()
            .write_each(&join, b"0") // joins the generation's cgroups
            .install_fds(&[(l, supervisor::LEASE_FD), (s, supervisor::STATUS_FD)])
            .parent_death_signal(sys::SIGKILL)
            .apply(&mut cmd);
        let child = cmd.spawn().map_err(|e| io_msg("starting the supervisor", e))?;
        // The supervisor joined between fork and exec (or failed to start).
        if let Some(c) = self.cgroup.as_mut() {
            c.close_procs();
        }
        drop(lease_rd);
        drop(status_wr);
        let pid = child.id() as i32;
        let _ = self
            .store
            .set_owned_pid(row, pid, sys::proc_start_time(pid).unwrap_or(0));
        let mut status = StatusReceiver::new(File::from(status_rd));
        let deadline = Instant::now() + SANDBOX_START_TIMEOUT;

        // 1. The supervisor unshared its user namespace: write the id maps.
        status.wait_for_userns(deadline).map_err(|e| e.to_string())?;
        if let Err(e) = write_id_maps(pid) {
            return Err(e);
        }
        let ns = |n: &str| File::open(format!("/proc/{pid}/ns/{n}")).map_err(|e| io_msg("opening namespace", e));
        let (userns, mntns) = (ns("user")?, ns("mnt")?);
        let row = self
            .store
            .record_intent(self.generation, OwnedKind::RunscContainer, &self.sandbox_id)
            .map_err(|e| e.to_string())?;
        self.owned_rows.push(row);
        if let Some(row) = self.net.record_intent(&self.store, self.generation)? {
            self.owned_rows.push(row);
        }
        crate::wire::send_fd(&lease_wr, &LeaseMsg::Mapped).map_err(|e| io_msg("lease pipe", e))?;
        self.sup = Some(Supervisor {
            child,
            lease: Some(lease_wr),
            status,
            userns,
            mntns,
        });

        // 2. runsc run is up and the init printed ready.
        let sup = self.sup.as_mut().unwrap();
        // The network is installed and attested before runsc starts.
        let (net, store) = (&mut self.net, &self.store);
        let (rpid, rstart) = sup
            .status
            .wait_for_ready(deadline, |m| {
                net.status_msg(m, store);
            })
            .map_err(|e| e.to_string())?;
        self.runsc_pid = rpid;
        self.runsc_start = rstart;
        let row = self
            .store
            .record_intent(self.generation, OwnedKind::Process, "runsc-run")
            .map_err(|e| e.to_string())?;
        let _ = self.store.set_owned_pid(row, rpid, rstart);
        self.owned_rows.push(row);
        Ok(())
    }

    /// Non-persisted writes go to disk in the Domain Root, not to host
    /// RAM: `scratch/overlay` holds runsc's file-backed root overlay
    /// (`plan::with_scratch_overlay`), and `scratch/tmp` is bound at `/tmp`
    /// (gVisor would otherwise mount a sentry-memory tmpfs there) unless the
    /// profile already mounts something at `/tmp`. Emptied at every start:
    /// a crashed generation's leftovers go first.
    fn prepare_scratch(&self, binds: &[plan::BindMount]) -> Result<Option<plan::BindMount>, String> {
        let dir = self.paths.root.join("scratch");
        // remove_dir_all never follows symlinks the sandbox left in tmp.
        let _ = std::fs::remove_dir_all(&dir);
        paths::ensure_private_dir(&dir.join("overlay")).map_err(|e| e.to_string())?;
        if binds.iter().any(|b| b.guest == "/tmp") || self.profile.persist.iter().any(|p| p == "/tmp") {
            return Ok(None);
        }
        let tmp = dir.join("tmp");
        std::fs::create_dir(&tmp).map_err(|e| io_msg("creating scratch/tmp", e))?;
        // /tmp semantics inside; the Domain Root (0700) keeps others out.
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .map_err(|e| io_msg("chmod scratch/tmp", e))?;
        Ok(Some(plan::BindMount {
            guest: "/tmp".into(),
            host: tmp,
            read_only: false,
        }))
    }

    /// `--meminfo PATH` for the supervisor when the memory limit is
    /// enforced: runsc then gives the sentry that total, and the guest's
    /// `/proc/meminfo` shows the limit instead of the host's RAM.
    fn meminfo_args(&self) -> Vec<std::ffi::OsString> {
        if self.cgroup.is_none() {
            return Vec::new();
        }
        let view = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|h| crate::storage::cgroup::meminfo_view(&h, self.limits.memory));
        let path = self.paths.gen_dir().join("meminfo");
        match view.map(|v| std::fs::write(&path, v)) {
            Some(Ok(())) => vec!["--meminfo".into(), path.into()],
            _ => {
                log::warn!("the guest will see the host's total memory: /proc/meminfo unreadable or unwritable");
                Vec::new()
            }
        }
    }

    /// The generation's cgroup with the Domain's limits; `None` (after a
    /// warning in the log) when no mechanism exists and only defaults apply.
    fn make_cgroup(&mut self) -> Result<Option<crate::storage::cgroup::DomainCgroup>, String> {
        let mech = crate::storage::cgroup::detect();
        match crate::storage::cgroup::DomainCgroup::create(&mech, &self.sandbox_id, &self.limits) {
            Ok(c) => {
                log::info!("resource limits: {} via {}", self.limits.describe(), mech.describe());
                Ok(Some(c))
            }
            Err(e) if !self.limits.explicit => {
                log::warn!("running without resource limits: {e}");
                Ok(None)
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// "out of memory (limit 4GiB)" once the kernel OOM-killed something
    /// in the Domain's cgroup.
    /// "process limit reached (pids 200)" when forks failed at the limit
    /// and the sandbox is gone.
    fn oom_reason(&self) -> Option<String> {
        let c = self.cgroup.as_ref()?;
        let (oom, pids) = (c.oom_kills() > 0, c.pids_max_events() > 0);
        if !oom && !pids {
            return None;
        }
        // Only when the limit took the sandbox down: runsc run is gone.
        let deadline = Instant::now() + Duration::from_secs(2);
        let gone = || {
            std::fs::read_to_string(format!("/proc/{}/stat", self.runsc_pid))
                .map(|s| {
                    s.rsplit_once(") ")
                        .is_some_and(|(_, r)| r.starts_with('Z') || r.starts_with('X'))
                })
                .unwrap_or(true)
        };
        while !gone() {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(if oom {
            format!("out of memory (limit {})", config::format_size(self.limits.memory))
        } else {
            format!("process limit reached (pids {})", self.limits.pids)
        })
    }

    /// The one sentence for a sandbox that went away on its own: the limit
    /// it hit when the generation's cgroup counted an OOM kill or a fork
    /// refused at the pids limit, else the generic lost-sandbox sentence.
    /// Every path that reports a lost sandbox asks this, before teardown
    /// removes the cgroup.
    fn lost_reason(&self) -> String {
        self.oom_reason().unwrap_or_else(sandbox_lost_reason)
    }

    /// FR-18/FR-20 before publication: observed readiness and the probe
    /// from inside the sandbox; records the readiness fingerprint.
    fn verify_network(&mut self) -> Result<(), String> {
        let sup_pid = self.sup.as_ref().map_or(0, |s| s.child.id() as i32);
        let cmd = || -> Result<Command, String> {
            let mut c = self.runsc_in_ns()?;
            c.arg("exec").arg(&self.sandbox_id).arg(plan::GUEST_INIT);
            Ok(c)
        };
        self.net
            .verify(
                &self.store,
                &self.domain_id,
                self.generation,
                &self.profile.fingerprint(),
                sup_pid,
                self.runsc_pid,
                cmd,
            )
            .map_err(|e| e.to_string())
    }

    /// The profile's `user`: its passwd entry and home inside (made once;
    /// both persist by default), before any session starts. Fails the start
    /// when the image's ids conflict.
    fn setup_user(&mut self) -> Result<(), String> {
        let Some(name) = self.profile.user.clone() else {
            return Ok(());
        };
        let mut cmd = self.runsc_in_ns()?;
        cmd.arg("exec").arg(&self.sandbox_id).arg(plan::GUEST_INIT);
        cmd.args(["user-setup", &name, &config::GUEST_USER_UID.to_string()]);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let out = cmd.output().map_err(|e| io_msg("runsc exec", e))?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let line = text
                .lines()
                .find(|l| l.starts_with("lazaret: user "))
                .map(|l| crate::display::escape(l.trim_start_matches("lazaret: ")))
                .unwrap_or_else(|| "the guest could not create it".into());
            log::warn!("user setup failed: {}", crate::display::escape(&text));
            return Err(format!("profile {} user {name}: {line}", self.profile.name));
        }
        Ok(())
    }

    /// Host port forwards through slirp4netns's API socket; the list goes
    /// to `gen/ports` for `net show`.
    fn forward_ports(&mut self, report: &mut Reporter) -> Result<(), String> {
        if self.ports.is_empty() {
            return Ok(());
        }
        report.progress("forwarding ports");
        let gen_dir = self.paths.gen_dir();
        crate::config::ports::install(
            &gen_dir.join(crate::config::ports::API_SOCKET),
            &self.ports,
            // slirp4netns's own guest (10.0.2.100) is the router's tap0
            // now: forwards go to the sandbox's address, which the router
            // answers ARP for on tap0 and routes to lzr1.
            crate::net::policy::SANDBOX_ADDR,
        )?;
        let text: String = self.ports.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(gen_dir.join(crate::config::ports::PORTS_FILE), text).map_err(|e| io_msg("writing gen/ports", e))
    }

    /// Makes the generation joinable: the socket appears at its published
    /// path by rename, only now that everything is ready.
    fn publish(&mut self) -> Result<(), String> {
        let sock = self.paths.socket();
        let tmp = self.paths.run.join(format!("hc.sock.{}", self.generation));
        let _ = std::fs::remove_file(&tmp);
        let _ = std::fs::remove_file(&sock);
        let l = UnixListener::bind(&tmp).map_err(|e| io_msg("binding the Domain socket", e))?;
        l.set_nonblocking(true).map_err(|e| io_msg("socket", e))?;
        std::fs::rename(&tmp, &sock).map_err(|e| io_msg("publishing the Domain socket", e))?;
        self.listener = Some(l);
        self.phase = "ready";
        self.published_at = Instant::now();
        self.store
            .set_phase(self.generation, Phase::Ready)
            .map_err(|e| e.to_string())?;
        log::info!("published generation {}", self.generation);
        Ok(())
    }

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
        }
    }

    /// `runsc exec` writes its error just before it exits, and the exit is
    /// reaped within moments: a held line still there after
    /// `HELD_MAX_AGE` was the command's own and goes out as it was.
    fn release_held(&mut self) {
        let mut out = Vec::new();
        for s in self.sessions.values_mut() {
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
        if let Some(b) = &self.broker {
            add(b.inotify_fd(), sys::POLLIN, Token::Mailbox);
            for (fd, id) in b.poll_fds() {
                add(fd, sys::POLLIN, Token::HostOutput(host_tokens.len()));
                host_tokens.push(id);
            }
        }
        for (&k, c) in &self.conns {
            if !c.closing {
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
                    self.phase = "failed";
                    // A helper the kernel killed at the memory limit (or that could
                    // not fork at the pids limit) reports that limit instead.
                    self.stop_reason = Some(self.oom_reason().unwrap_or_else(|| helper_died_reason(&name)));
                    return;
                }
                Ok(StatusMsg::Exited { code }) => format!("runsc run exited ({code})"),
                Ok(StatusMsg::Error { message }) => format!("error {message}"),
                Ok(StatusMsg::Stopped) => "stopped".into(),
                Err(ipc::ReadError::Closed) => "exited".into(),
                // Fail closed: a report that does not decode ends the Domain.
                Err(e) => format!("unreadable report ({e})"),
                Ok(_) => continue,
            };
            log::warn!("supervisor: {why}");
            self.phase = "failed";
            self.stop_reason = Some(self.lost_reason());
            return;
        }
    }

    fn accept(&mut self) {
        loop {
            let Some(l) = &self.listener else { return };
            let Ok((stream, _)) = l.accept() else { return };
            // INVARIANT: only our own uid may talk to the coordinator.
            let (pid, uid) = match sys::peer_uid(&stream) {
                Ok(v) => v,
                Err(_) => continue,
            };
            if uid != sys::getuid() {
                log::warn!("refused a connection from uid {uid} (pid {pid})");
                continue;
            }
            let _ = stream.set_nonblocking(true);
            let key = self.key();
            let conn = Conn {
                stream,
                reader: FrameReader::default(),
                out: Vec::new(),
                peer_pid: pid,
                hello: None,
                observer: false,
                stale: None,
                session: None,
                closing: false,
            };
            self.conns.insert(key, conn);
        }
    }

    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn send(&mut self, key: u64, msg: &ServerMsg) {
        if let Some(c) = self.conns.get_mut(&key) {
            c.out.extend_from_slice(&ipc::Message::encode(msg));
        }
        self.conn_flush(key);
    }

    fn conn_flush(&mut self, key: u64) {
        let Some(c) = self.conns.get_mut(&key) else { return };
        while !c.out.is_empty() {
            match c.stream.write(&c.out) {
                Ok(0) => break,
                Ok(n) => {
                    c.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The client is gone. A closing connection is no longer
                    // read, so its end-of-file would never be seen: its
                    // session ends here, as on any other client loss.
                    return self.drop_conn(key, &format!("writing to the client: {e}"));
                }
            }
        }
        if c.closing && c.out.is_empty() && c.session.is_none() {
            self.conns.remove(&key);
        }
    }

    /// Drops a connection after a protocol violation or client loss: only
    /// this connection (and its session) is affected.
    fn drop_conn(&mut self, key: u64, why: &str) {
        if let Some(c) = self.conns.get(&key) {
            log::info!("closing connection of pid {}: {why}", c.peer_pid);
            if let Some(s) = c.session {
                self.close_session(s, None);
            }
        }
        self.conns.remove(&key);
    }

    fn conn_read(&mut self, key: u64) {
        let Some(c) = self.conns.get_mut(&key) else { return };
        match c.reader.fill(&mut c.stream) {
            Ok(_) => {}
            Err(e) => return self.drop_conn(key, &e.to_string()),
        }
        loop {
            let Some(c) = self.conns.get_mut(&key) else { return };
            match c.reader.next::<ClientMsg>() {
                Ok(Some(m)) => self.handle(key, m),
                Ok(None) => return,
                Err(e) => return self.drop_conn(key, &format!("malformed frame: {e}")),
            }
        }
    }

    fn refuse(&mut self, key: u64, reason: String) {
        self.send(key, &ServerMsg::Refused { reason });
        if let Some(c) = self.conns.get_mut(&key) {
            c.closing = true;
        }
        self.conn_flush(key);
    }

    fn handle(&mut self, key: u64, msg: ClientMsg) {
        let (has_hello, session) = match self.conns.get(&key) {
            Some(c) => (c.hello.is_some(), c.session),
            None => return,
        };
        match (has_hello, session, msg) {
            (
                false,
                _,
                ClientMsg::Hello {
                    version,
                    client_id,
                    profile,
                    fingerprint,
                },
            ) => {
                if version != ipc::PROTOCOL_VERSION {
                    return self.refuse(
                        key,
                        format!("protocol version {version} is not {}: the coordinator runs a different lazaret; stop the Domain with `lazaret stop`", ipc::PROTOCOL_VERSION),
                    );
                }
                let observer = profile.is_empty() && fingerprint.is_empty();
                let mine = self.join_fp.clone();
                // A client whose configuration differs may still stop the
                // Domain (that is how it picks up the new configuration),
                // but may not open a session in it.
                let stale = (!observer && (profile != self.profile.name || fingerprint != mine)).then(|| {
                    format!(
                        "profile {profile:?} changed since this Domain started (configuration fingerprint {fingerprint} \
                         vs running {mine}): run `lazaret stop --profile {}` to restart it with the new configuration",
                        self.profile.name
                    )
                });
                if let Some(c) = self.conns.get_mut(&key) {
                    c.hello = Some(client_id);
                    c.observer = observer;
                    c.stale = stale;
                }
            }
            (true, None, ClientMsg::Open { .. }) if self.conns[&key].stale.is_some() => {
                let why = self.conns[&key].stale.clone().unwrap_or_default();
                self.refuse(key, why)
            }
            (true, None, ClientMsg::Open { .. } | ClientMsg::Stop { .. }) if self.conns[&key].observer => {
                self.drop_conn(key, "an observer connection may only ask for status")
            }
            (
                true,
                None,
                ClientMsg::Open {
                    argv,
                    env,
                    cwd,
                    tty,
                    root,
                },
            ) => self.open_session(key, argv, env, cwd, tty, root),
            (true, None, ClientMsg::Status) => {
                let st = self.status();
                self.send(key, &ServerMsg::Status(st));
                if let Some(c) = self.conns.get_mut(&key) {
                    c.closing = true;
                }
                self.conn_flush(key);
            }
            (true, None, ClientMsg::Stop { reason }) => {
                self.stop_reason = Some(if reason.is_empty() {
                    "stopped by `lazaret stop`".into()
                } else {
                    reason
                });
                if let Some(c) = self.conns.get_mut(&key) {
                    c.closing = true;
                }
            }
            (true, Some(s), ClientMsg::Stdin(data)) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.pending_in.extend_from_slice(&data);
                    self.session_input(s);
                }
            }
            (true, Some(s), ClientMsg::StdinEof) => {
                if let Some(sess) = self.sessions.get_mut(&s) {
                    sess.eof_after_input = true;
                    self.session_input(s);
                }
            }
            (true, Some(s), ClientMsg::Resize(w)) => self.resize(s, w),
            (true, Some(s), ClientMsg::Signal(sig)) if sig as i32 == sys::SIGQUIT => {
                // SIGQUIT goes to the guest session, never to `runsc exec`:
                // Go's runtime would answer it with a goroutine dump on the
                // user's terminal and exit 2.
                let pid = self.sessions.get(&s).and_then(Self::guest_pid);
                if let Some(pid) = pid {
                    if let Ok(c) = self.in_sandbox_tool(&["signal-session", &pid.to_string(), "3"]) {
                        self.helpers.push(c);
                    }
                }
            }
            (true, Some(s), ClientMsg::Signal(sig)) => {
                if let Some(sess) = self.sessions.get(&s) {
                    if matches!(sig as i32, sys::SIGINT | sys::SIGTSTP | sys::SIGTERM | sys::SIGHUP) {
                        // runsc exec forwards what it receives to its guest process.
                        let _ = sys::kill(sess.exec.id() as i32, sig as i32);
                    }
                }
            }
            (
                true,
                Some(s),
                ClientMsg::Decision {
                    request_id,
                    verdict,
                    argv,
                },
            ) => self.decision(s, request_id, verdict, argv),
            (_, _, m) => {
                let name = ipc::Message::name(&m);
                self.drop_conn(key, &format!("unexpected message {name} in this state"));
            }
        }
    }

    fn status(&self) -> StatusInfo {
        StatusInfo {
            domain_id: self.domain_id.clone(),
            profile: self.profile.name.clone(),
            workspace: self.workspace.to_string_lossy().into(),
            generation: self.generation,
            phase: self.phase.into(),
            coordinator_id: self.coordinator_id.clone(),
            coordinator_pid: sys::getpid(),
            supervisor_pid: self.sup.as_ref().map_or(0, |s| s.child.id() as i32),
            runsc_pid: self.runsc_pid,
            sandbox_id: self.sandbox_id.clone(),
            sessions: self
                .sessions
                .values()
                .map(|s| SessionInfo {
                    session_id: s.id.clone(),
                    client_pid: s.client_pid,
                    exec_pid: s.exec.id() as i32,
                    argv0: s.argv0.clone(),
                    tty: s.tty,
                })
                .collect(),
            started_at: crate::storage::state::now() - self.published_at.elapsed().as_secs() as i64,
            pending_escalations: self
                .sessions
                .values()
                .map(|s| s.queue.len() as u32 + s.prompt.is_some() as u32)
                .sum(),
            ports: self.ports.iter().map(|p| p.to_string()).collect(),
        }
    }

    // ---- escalation ----------------------------------------------------------------

    fn mailbox(&mut self) {
        let Some(mut b) = self.broker.take() else { return };
        let sessions = &self.sessions;
        let lookup = |sid: &str| {
            sessions.values().find(|s| s.id == sid).map(|s| SessionView {
                client_id: s.client_id.clone(),
                cert_der: s.cert_der.clone(),
            })
        };
        let ask = b.scan(&lookup);
        let patience = Duration::from_secs(b.prompt_timeout_s());
        self.broker = Some(b);
        self.sync_host_rows();
        for (sid, req) in ask {
            let Some((&k, s)) = self.sessions.iter_mut().find(|(_, s)| s.id == sid) else {
                continue;
            };
            if s.tty {
                // The request deadline: accepted now, decided in time or expired.
                self.esc_deadlines.insert(req.id.clone(), Instant::now() + patience);
                s.queue.push_back(req);
                self.next_prompt(k);
            } else if let Some(b) = self.broker.as_mut() {
                b.refuse(
                    &req,
                    Status::Denied,
                    "no auto-approval rule matched and the session has no terminal to ask in",
                );
            }
        }
    }

    /// Shows the next waiting request in its session's terminal, one at a
    /// time per session; other sessions are never held up by it.
    fn next_prompt(&mut self, skey: u64) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        if s.prompt.is_some() {
            return;
        }
        let Some(req) = s.queue.pop_front() else { return };
        let (cwd, timeout) = match &self.broker {
            Some(b) => (b.host_cwd_display(&req.cwd), b.prompt_timeout_s()),
            None => (String::new(), 0),
        };
        let left = self
            .esc_deadlines
            .get(&req.id)
            .map_or(timeout, |d| d.saturating_duration_since(Instant::now()).as_secs());
        let text = escbroker::prompt_text(&self.profile.name, &s.id, &req, &cwd, left);
        let msg = ServerMsg::Prompt {
            request_id: req.id.clone(),
            text,
        };
        let conn = s.conn;
        // Output the session wrote before it asked (a screen clear just
        // before `lazaret-escalate`) goes out first, so it cannot land
        // after the prompt and wipe it or what ends it; bounded, so a
        // session that keeps writing cannot hold the prompt back.
        let pending = pending_output(s, PROMPT_FLUSH_MAX);
        s.prompt = Some(req);
        for m in &pending {
            self.send(conn, m);
        }
        self.send(conn, &msg);
    }

    fn decision(&mut self, skey: u64, request_id: String, verdict: u8, argv: Vec<String>) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        // INVARIANT: only the session that was asked can answer, and only
        // for the request it was shown.
        if s.prompt.as_ref().map(|r| &r.id) != Some(&request_id) {
            return;
        }
        let req = s.prompt.take().unwrap();
        self.esc_deadlines.remove(&req.id);
        if let Some(b) = self.broker.as_mut() {
            match verdict {
                ipc::VERDICT_APPROVE => {
                    b.decided(&req, "approved by the developer");
                    let argv = escalation::harden_git(&req.argv);
                    b.start(req, argv, "approved by the developer".into());
                }
                ipc::VERDICT_EDIT if !argv.is_empty() && !argv[0].is_empty() && argv.len() <= escalation::MAX_ARGS => {
                    let why = format!("edited by the developer to: {}", escalation::quote_argv(&argv));
                    b.decided(&req, &why);
                    let argv = escalation::harden_git(&argv);
                    b.start(req, argv, why);
                }
                _ => {
                    b.decided(&req, "denied by the developer");
                    b.refuse(&req, Status::Denied, "denied by the developer");
                }
            }
        }
        self.next_prompt(skey);
        self.sync_host_rows();
    }

    /// Ends every request whose deadline passed without a decision, queued
    /// or on screen: `expired`, audited, nothing runs.
    fn expire_requests(&mut self) {
        let now = Instant::now();
        if !self.esc_deadlines.values().any(|d| *d <= now) {
            return;
        }
        let keys: Vec<u64> = self.sessions.keys().copied().collect();
        for k in keys {
            let Some(s) = self.sessions.get_mut(&k) else { continue };
            let late = |r: &Request| self.esc_deadlines.get(&r.id).is_some_and(|d| *d <= now);
            let mut gone: Vec<Request> = Vec::new();
            let mut keep = VecDeque::new();
            for r in s.queue.drain(..) {
                if late(&r) {
                    gone.push(r);
                } else {
                    keep.push_back(r);
                }
            }
            s.queue = keep;
            let mut shown = None;
            if s.prompt.as_ref().is_some_and(late) {
                shown = s.prompt.take();
            }
            let conn = s.conn;
            if let Some(r) = &shown {
                let text = format!(
                    "\r\nlazaret: no decision within {} s: the request expired and nothing ran\r\n",
                    self.escalation.prompt_timeout_s
                );
                self.send(
                    conn,
                    &ServerMsg::PromptEnd {
                        request_id: r.id.clone(),
                        text,
                    },
                );
            }
            for r in gone.iter().chain(shown.iter()) {
                self.esc_deadlines.remove(&r.id);
                if let Some(b) = self.broker.as_mut() {
                    let why = format!("expired: no decision within {} s", b.prompt_timeout_s());
                    b.refuse(r, Status::Expired, &why);
                }
            }
            if shown.is_some() {
                self.next_prompt(k);
            }
        }
        // A deadline whose request is no longer waiting anywhere is dropped,
        // so a past deadline never keeps the event loop spinning.
        self.esc_deadlines.retain(|_, d| *d > now);
    }

    /// Makes the durable record of host commands match the broker's: a row
    /// (pid, start time, process group) per running command, released when
    /// it ends, so recovery after a crash kills exactly them.
    fn sync_host_rows(&mut self) {
        let Some(b) = self.broker.as_mut() else { return };
        let events: Vec<escbroker::HostEvent> = b.events.drain(..).collect();
        for e in events {
            match e {
                escbroker::HostEvent::Started { id, pid, start_time } => {
                    if let Ok(row) = self.store.record_intent(self.generation, OwnedKind::HostCommand, &id) {
                        let _ = self.store.set_owned_pid(row, pid, start_time);
                        let _ = self.store.set_owned_pgid(row, pid);
                        self.host_rows.insert(id, row);
                    }
                }
                escbroker::HostEvent::Ended { id } => {
                    if let Some(row) = self.host_rows.remove(&id) {
                        let _ = self.store.release(row);
                    }
                }
            }
        }
    }

    // ---- sessions ---------------------------------------------------------------

    /// A `runsc exec` command that runs in the supervisor's user and mount
    /// namespaces, where runsc's state and the sandbox live.
    fn runsc_in_ns(&self) -> Result<Command, String> {
        let sup = self.sup.as_ref().ok_or("the sandbox is not running")?;
        let mut cmd = Command::new("runsc");
        cmd.args(&self.runsc_args);
        sys::ChildSetup::new()
            .reset_signals()
            .setns(&sup.userns, sys::CLONE_NEWUSER)
            .setns(&sup.mntns, sys::CLONE_NEWNS)
            .chdir(Path::new("/"))
            .parent_death_signal(sys::SIGKILL)
            .apply(&mut cmd);
        Ok(cmd)
    }

    fn open_session(
        &mut self,
        key: u64,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
        tty: Option<ipc::WinSize>,
        root: bool,
    ) {
        let argv = if argv.is_empty() {
            self.profile.command.clone()
        } else {
            argv
        };
        let env_in = env;
        let term = env_in.iter().find(|(k, _)| k == "TERM").map(|(_, v)| v.as_str());
        let cwd = plan::guest_cwd(&self.workspace, Path::new(&cwd));
        let id = random_id(8);
        let (client_id, peer_pid) = {
            let c = &self.conns[&key];
            (c.hello.clone().unwrap_or_default(), c.peer_pid)
        };
        // The profile's `user` runs every session but `--root` ones.
        let user = self.profile.user.clone().filter(|_| !root);
        let mut env = plan::session_env_for(user.as_deref(), &self.profile.env, term);
        if self.profile.git_identity && !self.profile.env.iter().any(|(k, _)| k == "GIT_CONFIG_SYSTEM") {
            env.push(crate::plan::guest::git_env());
        }
        // Host variables this client passed by name: this session only.
        // INVARIANT: their values go into the spec pipe and nowhere else
        // (no argv, no store row, no log line).
        plan::override_env(&mut env, &crate::config::passenv::accepted(&env_in));
        env.push(format!("LAZARET_SESSION={id}"));
        // Session registration binds (Client CLI ID, Session ID, Session
        // Anchor): the anchor's certificate is issued for exactly this pair.
        let mut cert_der = Vec::new();
        if let Some(b) = &self.broker {
            let valid_client = client_id.len() == 16 && client_id.bytes().all(|c| c.is_ascii_hexdigit());
            if !valid_client {
                return self.refuse(key, "malformed client id".into());
            }
            match b.anchor.issue(Role::ClientCli, &client_id, Some(&id)).and_then(|c| {
                cert_der = c.cert.to_der()?;
                c.export()
            }) {
                Ok(cred) => {
                    env.push(format!("{}={cred}", escalation::CREDENTIAL_ENV));
                    env.push(format!("{}={}", escalation::PROMPT_TIMEOUT_ENV, b.prompt_timeout_s()));
                }
                Err(e) => return self.refuse(key, format!("cannot register the session: {e}")),
            }
        }
        let spec = plan::SessionPlan {
            argv: plan::guarded_argv(&argv),
            env,
            cwd,
            terminal: tty.is_some(),
            caps: self.profile.caps.clone(),
            user: user.as_ref().map(|_| (config::GUEST_USER_UID, config::GUEST_USER_UID)),
        };
        let pid_file = self.paths.gen_dir().join(format!("session-{id}.pid"));
        // The spec carries the session's key: it goes through a pipe, never
        // to disk.
        match self.spawn_exec(plan::process_spec(&spec).as_bytes(), &pid_file, tty) {
            Ok((exec, input, output, errout)) => {
                let exec_pid = exec.id() as i32;
                let _ = self
                    .store
                    .open_session(self.generation, &id, &client_id, peer_pid, &argv[0]);
                let skey = self.key();
                self.sessions.insert(
                    skey,
                    Session {
                        id: id.clone(),
                        conn: key,
                        exec,
                        exec_start: sys::proc_start_time(exec_pid).unwrap_or(0),
                        tty: tty.is_some(),
                        input: Some(input),
                        output: Some(output),
                        errout,
                        pending_in: Vec::new(),
                        eof_after_input: false,
                        guest_pid_file: pid_file,
                        argv0: argv[0].clone(),
                        client_pid: peer_pid,
                        winch_pending: false,
                        client_id: client_id.clone(),
                        cert_der,
                        queue: VecDeque::new(),
                        prompt: None,
                        held: None,
                    },
                );
                self.had_session = true;
                if let Some(c) = self.conns.get_mut(&key) {
                    c.session = Some(skey);
                }
                let welcome = ServerMsg::Welcome {
                    version: ipc::PROTOCOL_VERSION,
                    generation: self.generation,
                    coordinator_id: self.coordinator_id.clone(),
                    session_id: id,
                };
                self.send(key, &welcome);
            }
            Err(e) => self.refuse(key, e),
        }
    }

    #[allow(clippy::type_complexity)]
    fn spawn_exec(
        &self,
        spec: &[u8],
        pid_file: &Path,
        tty: Option<ipc::WinSize>,
    ) -> Result<(Child, OwnedFd, OwnedFd, Option<OwnedFd>), String> {
        if spec.len() > 60 * 1024 {
            return Err("the session spec is too large".into());
        }
        let (spec_rd, spec_wr) = sys::pipe().map_err(|e| io_msg("pipe", e))?;
        // Fits the pipe buffer: the write cannot block.
        sys::write_all(&spec_wr, spec).map_err(|e| io_msg("pipe", e))?;
        drop(spec_wr);
        let sp = spec_rd.as_raw_fd();
        let mut cmd = self.runsc_in_ns()?;
        cmd.arg("exec")
            .arg(format!("--internal-pid-file={}", pid_file.display()))
            .arg("--process=/proc/self/fd/3")
            .arg(&self.sandbox_id);
        if let Some(w) = tty {
            let (master, slave) = sys::openpty(Some(sys::WinSize {
                rows: w.rows,
                cols: w.cols,
            }))
            .map_err(|e| io_msg("openpty", e))?;
            let s = slave.as_raw_fd();
            sys::ChildSetup::new()
                .setsid()
                .install_fds(&[(s, 0), (s, 1), (s, 2), (sp, 3)])
                .controlling_tty(0)
                .apply(&mut cmd);
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            let child = cmd.spawn().map_err(|e| io_msg("starting runsc exec", e))?;
            drop(slave);
            drop(spec_rd);
            sys::set_nonblocking(&master, true).map_err(|e| io_msg("pty", e))?;
            let out = master.try_clone().map_err(|e| io_msg("pty", e))?;
            Ok((child, master, out, None))
        } else {
            sys::ChildSetup::new().setsid().install_fds(&[(sp, 3)]).apply(&mut cmd);
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = cmd.spawn().map_err(|e| io_msg("starting runsc exec", e))?;
            drop(spec_rd);
            let i: OwnedFd = child.stdin.take().unwrap().into();
            let o: OwnedFd = child.stdout.take().unwrap().into();
            let e: OwnedFd = child.stderr.take().unwrap().into();
            for fd in [&i, &o, &e] {
                sys::set_nonblocking(&fd, true).map_err(|e| io_msg("pipe", e))?;
            }
            Ok((child, i, o, Some(e)))
        }
    }

    fn session_output(&mut self, skey: u64, err: bool, readable: bool) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        // INVARIANT: nothing the session writes reaches its terminal after
        // a prompt is drawn and before it is decided. The poll set is built
        // before the round, so a request taken from the mailbox earlier in
        // the same round must stop this read (output such as a screen clear
        // would otherwise follow, and wipe, the prompt).
        if s.prompt.is_some() {
            return;
        }
        let fd = if err { s.errout.as_ref() } else { s.output.as_ref() };
        let Some(fd) = fd else { return };
        let mut buf = vec![0u8; ipc::MAX_DATA_CHUNK];
        let r = if readable { sys::read(&fd, &mut buf) } else { Ok(0) };
        match r {
            Ok(n) if n > 0 => {
                buf.truncate(n);
                let conn = s.conn;
                // runsc's own stream: the stderr pipe, or the PTY.
                let runsc_stream = err || s.tty;
                let mut chunks = Vec::new();
                if let Some((held_err, held, _)) = s.held.take() {
                    // More output followed: what was held was the command's.
                    chunks.push((held_err, held));
                }
                if runsc_stream {
                    if let Some(at) = runsc_error_at(&buf, &self.sandbox_id) {
                        s.held = Some((err, buf.split_off(at), Instant::now()));
                    }
                }
                chunks.push((err, buf));
                for (e, data) in chunks {
                    if data.is_empty() {
                        continue;
                    }
                    let msg = if e {
                        ServerMsg::Stderr(data)
                    } else {
                        ServerMsg::Stdout(data)
                    };
                    self.send(conn, &msg);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
            _ => {
                // EOF, or EIO from a PTY master whose slaves are all closed.
                if err {
                    s.errout = None;
                } else {
                    s.output = None;
                    if s.tty {
                        s.input = None;
                    }
                }
            }
        }
    }

    fn session_input(&mut self, skey: u64) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        let Some(fd) = &s.input else {
            s.pending_in.clear();
            return;
        };
        while !s.pending_in.is_empty() {
            match sys::write(&fd, &s.pending_in) {
                Ok(n) => {
                    s.pending_in.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    s.pending_in.clear();
                    break;
                }
            }
        }
        if s.eof_after_input && s.pending_in.is_empty() {
            if s.tty {
                // A terminal has no EOF of its own; ^D at line start is it.
                let _ = sys::write(&fd, &[4]);
            } else {
                s.input = None;
            }
            s.eof_after_input = false;
        }
    }

    fn guest_pid(s: &Session) -> Option<i32> {
        std::fs::read_to_string(&s.guest_pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 1)
    }

    fn resize(&mut self, skey: u64, w: ipc::WinSize) {
        let Some(s) = self.sessions.get_mut(&skey) else { return };
        if let Some(fd) = &s.input {
            if s.tty {
                let _ = sys::set_winsize(
                    fd,
                    sys::WinSize {
                        rows: w.rows,
                        cols: w.cols,
                    },
                );
                s.winch_pending = true;
            }
        }
        self.deliver_winch(skey);
    }

    /// The guest reads the new size from its terminal but gets no SIGWINCH
    /// by itself (PLATFORM §3): signal the session's guest processes.
    fn deliver_winch(&mut self, skey: u64) {
        let Some(s) = self.sessions.get(&skey) else { return };
        if !s.winch_pending {
            return;
        }
        let Some(pid) = Self::guest_pid(s) else { return };
        if let Ok(child) = self.in_sandbox_tool(&["signal-session", &pid.to_string(), &sys::SIGWINCH.to_string()]) {
            self.helpers.push(child);
        }
        if let Some(s) = self.sessions.get_mut(&skey) {
            s.winch_pending = false;
        }
    }

    fn in_sandbox_tool(&self, args: &[&str]) -> Result<Child, String> {
        let mut cmd = self.runsc_in_ns()?;
        cmd.arg("exec").arg(&self.sandbox_id).arg(plan::GUEST_INIT).args(args);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd.spawn().map_err(|e| io_msg("runsc exec", e))
    }

    fn reap(&mut self) {
        self.helpers.retain_mut(|h| !matches!(h.try_wait(), Ok(Some(_))));
        let done: Vec<(u64, i32)> = self
            .sessions
            .iter_mut()
            .filter_map(|(&k, s)| match s.exec.try_wait() {
                Ok(Some(st)) => Some((
                    k,
                    st.code()
                        .unwrap_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0)),
                )),
                _ => None,
            })
            .collect();
        for (k, code) in done {
            // Whatever the guest wrote before it exited is already in the
            // PTY or pipes: forward it before the exit status.
            for _ in 0..64 {
                let before = self.conns.get(&self.sessions[&k].conn).map_or(0, |c| c.out.len());
                self.session_output(k, false, true);
                self.session_output(k, true, true);
                let after = self.conns.get(&self.sessions[&k].conn).map_or(0, |c| c.out.len());
                if after == before {
                    break;
                }
            }
            // `runsc exec` says 128 (and prints its own error) when the
            // sandbox went away under it: that is not the command's status.
            if code >= 128 && self.sandbox_lost(code) {
                self.phase = "failed";
                // runsc's own account of the loss goes to the log, not to
                // the user: the Closing sentence says it plainly.
                if let Some((_, held, _)) = self.sessions.get_mut(&k).and_then(|s| s.held.take()) {
                    log::warn!(
                        "session {}: runsc exec: {}",
                        self.sessions[&k].id,
                        crate::display::escape_bytes(held.trim_ascii_end())
                    );
                }
                if self.stop_reason.is_none() {
                    self.stop_reason = Some(self.lost_reason());
                }
                let reason = self.stop_reason.clone().unwrap_or_else(sandbox_lost_reason);
                let conn = self.sessions[&k].conn;
                self.send(conn, &ServerMsg::Closing { reason });
                self.close_session(k, None);
                continue;
            }
            self.close_session(k, Some(code));
        }
        if let Some(sup) = self.sup.as_mut() {
            if let Ok(Some(st)) = sup.child.try_wait() {
                log::warn!("supervisor exited: {st}");
                self.phase = "failed";
                if self.stop_reason.is_none() {
                    self.stop_reason = Some(self.lost_reason());
                }
            }
        }
    }

    /// Whether the sandbox is gone, given that a session's `runsc exec`
    /// just exited with `code`. The attached `runsc run` exits right after
    /// its sandbox; a short grace covers the order of the two exits.
    fn sandbox_lost(&mut self, code: i32) -> bool {
        let grace = if code == 128 {
            Duration::from_millis(1000)
        } else {
            Duration::from_millis(200)
        };
        let deadline = Instant::now() + grace;
        loop {
            // The supervisor gone takes the sandbox with it (PDEATHSIG).
            let sup_gone = self
                .sup
                .as_mut()
                .is_some_and(|s| matches!(s.child.try_wait(), Ok(Some(_))));
            let runsc_gone = self.runsc_pid > 0
                && (!sys::same_process(self.runsc_pid, self.runsc_start) || is_zombie(self.runsc_pid));
            if sup_gone || runsc_gone {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Deregisters first, then stops what is left of the session in the
    /// guest, reaps the exec client and closes the PTY.
    fn close_session(&mut self, skey: u64, code: Option<i32>) {
        let Some(mut s) = self.sessions.remove(&skey) else {
            return;
        };
        let _ = self.store.close_session(&s.id, code);
        if let Some(b) = self.broker.as_mut() {
            b.cancel_session(&s.id);
            for req in s.prompt.take().into_iter().chain(s.queue.drain(..)) {
                self.esc_deadlines.remove(&req.id);
                b.refuse(&req, Status::Cancelled, "the requesting session ended");
            }
        }
        if let Some(c) = self.conns.get_mut(&s.conn) {
            c.session = None;
            c.closing = true;
        }
        // A session that ended because the kernel OOM-killed the sandbox
        // learns why, instead of a bare exit code.
        if let Some((err, held, _)) = s.held.take() {
            if code.is_some() {
                let msg = if err {
                    ServerMsg::Stderr(held)
                } else {
                    ServerMsg::Stdout(held)
                };
                self.send(s.conn, &msg);
            }
        }
        let oom = code.and_then(|_| self.oom_reason());
        if let Some(reason) = oom {
            self.stop_reason.get_or_insert_with(|| reason.clone());
            self.send(s.conn, &ServerMsg::Closing { reason });
        } else if let Some(code) = code {
            self.send(s.conn, &ServerMsg::Exit { code });
        } else {
            self.conn_flush(s.conn);
        }
        let exec_pid = s.exec.id() as i32;
        if sys::same_process(exec_pid, s.exec_start) {
            let _ = s.exec.kill();
        }
        let _ = s.exec.wait();
        let more_sessions = !self.sessions.is_empty();
        if let Some(pid) = Self::guest_pid(&s) {
            if more_sessions {
                if let Ok(c) = self.in_sandbox_tool(&["signal-session", &pid.to_string(), "9"]) {
                    self.helpers.push(c);
                }
            }
        }
        let _ = std::fs::remove_file(&s.guest_pid_file);
        drop(s);
    }

    // ---- teardown ----------------------------------------------------------------

    /// Withdraw publication, end sessions, stop the sandbox through the
    /// supervisor, release ownership records, remove runtime files.
    fn teardown(&mut self) {
        let reason = self.stop_reason.clone().unwrap_or_else(|| "stopping".into());
        log::info!("teardown: {reason}");
        // INVARIANT: publication is withdrawn before anything is stopped.
        if self.listener.take().is_some() {
            let _ = std::fs::remove_file(self.paths.socket());
        }
        if self.phase != "failed" {
            self.phase = "stopping";
        }
        let _ = self.store.set_phase(self.generation, Phase::Stopping);
        let keys: Vec<u64> = self.sessions.keys().copied().collect();
        for k in keys {
            let conn = self.sessions[&k].conn;
            self.send(conn, &ServerMsg::Closing { reason: reason.clone() });
            self.close_session(k, None);
        }
        if let Some(mut b) = self.broker.take() {
            b.cancel_all();
        }
        // The results dir is not listable (0300); open it up to remove it.
        let mailbox = self.paths.run.join("mailbox");
        let _ = std::fs::set_permissions(
            mailbox.join("results"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        );
        escbroker::remove_tree(&mailbox);
        for mut h in self.helpers.drain(..) {
            let _ = h.kill();
            let _ = h.wait();
        }
        if let Some(mut sup) = self.sup.take() {
            sup.lease = None; // EOF: the supervisor stops the sandbox.
            if sys::wait_deadline(&mut sup.child, Duration::from_secs(10)).is_none() {
                log::warn!("supervisor did not stop in time: killed it");
            }
        }
        if let Some(mut c) = self.cgroup.take() {
            c.remove();
        }
        // Never assume a process vanished with its parent: check each owned
        // pid by start time and kill only an exact match.
        if let Ok(list) = self.store.unreleased() {
            for o in list.iter().filter(|o| o.generation == self.generation) {
                if o.kind == OwnedKind::RunscContainer {
                    remove_runsc_state(&self.paths.runsc_root(), &o.name);
                }
                if let (Some(pid), Some(st)) = (o.pid, o.start_time) {
                    if sys::same_process(pid, st) {
                        log::warn!("{} (pid {pid}) outlived teardown: killing it", o.name);
                        let _ = sys::kill(pid, sys::SIGKILL);
                    }
                }
                let _ = self.store.release(o.row);
            }
        }
        let _ = self.store.release_leases(self.generation);
        crate::storage::state::touch_domain(&self.paths.root);
        let _ = std::fs::remove_dir_all(self.paths.gen_dir());
        let final_phase = if self.phase == "failed" {
            Phase::Failed
        } else {
            Phase::Stopped
        };
        let _ = self.store.set_phase(self.generation, final_phase);
        // Last words to clients, bounded.
        let deadline = Instant::now() + Duration::from_millis(500);
        while self.conns.values().any(|c| !c.out.is_empty()) && Instant::now() < deadline {
            let keys: Vec<u64> = self.conns.keys().copied().collect();
            for k in keys {
                self.conn_flush(k);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.conns.clear();
        log::info!("generation {} {final_phase}", self.generation);
    }
}

/// Whether `pid` has exited but is not reaped yet (state `Z` or `X`).
fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| st.rfind(')').map(|i| st[i + 1..].trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// How long a line in runsc's error shape may be held back while the
/// session's `runsc exec` is still running.
const HELD_MAX_AGE: Duration = Duration::from_secs(3);

/// Where, in a chunk of the stream `runsc exec` writes its errors to, a
/// trailing run of lines in runsc's own error shape begins (a line naming
/// this sandbox as `sandbox "ID"` or `container "ID"`, a `urpc method "`
/// failure, or one of `runsc exec`'s fatal-error prefixes), if the chunk
/// ends with one. Bounded: only a
/// short tail is ever held back.
fn runsc_error_at(buf: &[u8], sandbox_id: &str) -> Option<usize> {
    const MAX_HELD: usize = 4096;
    // The prefixes `runsc exec` puts on its fatal errors (runsc 20240729).
    const PREFIXES: [&str; 5] = [
        "waiting on pid ",
        "executing processes for container: ",
        "loading sandbox: ",
        "loading container: ",
        "getting processes for container: ",
    ];
    let sandbox = format!("sandbox \"{sandbox_id}\"");
    let container = format!("container \"{sandbox_id}\"");
    let shaped = |line: &[u8]| {
        let l = String::from_utf8_lossy(line);
        PREFIXES.iter().any(|p| l.starts_with(p))
            || l.contains("urpc method \"")
            || l.contains(&sandbox)
            || l.contains(&container)
    };
    let mut start = 0;
    while start < buf.len() {
        let end = buf[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(buf.len(), |i| start + i + 1);
        if shaped(&buf[start..end]) {
            return (buf.len() - start <= MAX_HELD).then_some(start);
        }
        start = end;
    }
    None
}

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

/// Writes the supervisor's id maps with the setuid helpers: the user is 0
/// inside, the subordinate range fills 1..=65536.
fn write_id_maps(pid: i32) -> Result<(), String> {
    let uid = sys::getuid();
    let gid = sys::getgid();
    let name = crate::sys::hostenv::user_name(uid).unwrap_or_default();
    for (tool, file, own) in [("newuidmap", "/etc/subuid", uid), ("newgidmap", "/etc/subgid", gid)] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let sub = plan::find_subrange(&text, &name, uid).ok_or_else(|| {
            format!("{file} has no range of 65536 ids for {name} (uid {uid}): run `lazaret doctor` for the fix")
        })?;
        let out = Command::new(tool)
            .args(plan::id_map_args(pid, own, sub))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {tool}: {e} (install uidmap; run `lazaret doctor`)"))?;
        if !out.status.success() {
            return Err(format!(
                "{tool} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// Recovery of a previous generation that did not end cleanly: kill only
/// processes whose pid *and* start time we recorded, then mark it.
fn recover(store: &Store, dp: &DomainPaths) {
    let Ok(mut list) = store.unreleased() else { return };
    // Recovery order (SPEC §5): the sandbox first, then the network helper,
    // then the supervisor that held the namespaces and mounts.
    let rank = |o: &crate::storage::store::Owned| match (o.kind.as_str(), o.name.as_str()) {
        ("process", "runsc-run") => 0,
        ("runsc-container", _) => 1,
        ("process", "supervisor") => 3,
        ("process", _) => 2,
        _ => 4,
    };
    list.sort_by_key(|o| (rank(o), o.row));
    for o in &list {
        match (o.kind.as_str(), o.pid, o.start_time) {
            ("process", Some(pid), Some(st)) if sys::same_process(pid, st) => {
                log::warn!(
                    "recovery: killing leftover {} (pid {pid}) of generation {}",
                    o.name,
                    o.generation
                );
                let _ = sys::kill(pid, sys::SIGKILL);
            }
            ("process", Some(pid), Some(_)) => {
                log::info!(
                    "recovery: {} (pid {pid}) of generation {} is gone (pid absent or reused: not touched)",
                    o.name,
                    o.generation
                );
            }
            ("process", _, _) => {
                log::info!(
                    "recovery: {} of generation {} was only an intent (no pid recorded): nothing to stop",
                    o.name,
                    o.generation
                );
            }
            ("host-command", Some(pid), Some(st)) => {
                let pgid = store.owned_pgid(o.row).ok().flatten().unwrap_or(pid);
                let n = escbroker::kill_recorded(pid, st, pgid);
                if n > 0 {
                    log::warn!(
                        "recovery: killed host command {} (pid {pid}) of generation {}",
                        o.name,
                        o.generation
                    );
                }
            }
            ("runsc-container", _, _) => {
                crate::storage::cgroup::remove_leftover(&crate::storage::cgroup::detect(), &o.name);
                remove_runsc_state(&dp.runsc_root(), &o.name);
            }
            (kind, _, _) => {
                log::warn!(
                    "recovery: refusing to touch {kind} {:?} of generation {}: not a kind this lazaret owns",
                    o.name,
                    o.generation
                );
            }
        }
        let _ = store.release(o.row);
    }
    if let Ok(gens) = store.unfinished_generations() {
        for g in gens {
            let _ = store.release_leases(g);
            let _ = store.set_phase(g, Phase::Recovered);
        }
    }
    let _ = std::fs::remove_dir_all(dp.gen_dir());
    // `domain.json` temp files a dead coordinator was writing.
    if let Ok(rd) = std::fs::read_dir(&dp.root) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if crate::storage::state::is_meta_temp(&n) && e.file_type().is_ok_and(|t| t.is_file()) {
                log::info!("recovery: removing {n}");
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    // Publication temp sockets of dead generations (`hc.sock.N`).
    if let Ok(rd) = std::fs::read_dir(&dp.run) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.strip_prefix("hc.sock.")
                .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    match store.prune_history(KEEP_GENERATIONS) {
        Ok(0) => {}
        Ok(n) => log::info!("store: forgot {n} old generations (keeping the last {KEEP_GENERATIONS})"),
        Err(e) => log::warn!("store: pruning history: {e}"),
    }
}

/// How many generations (with their sessions) the store remembers.
const KEEP_GENERATIONS: u64 = 100;

/// Whether `file` in a runsc root is state of container `id`: runsc names
/// them `ID_sandbox:ID.state` / `.lock` and the control socket `runsc-ID.sock`.
pub fn is_runsc_state_of(file: &str, id: &str) -> bool {
    let Some(rest) = file.strip_prefix(id).and_then(|r| r.strip_prefix('_')) else {
        return file == format!("runsc-{id}.sock");
    };
    let stem = rest.strip_suffix(".state").or_else(|| rest.strip_suffix(".lock"));
    stem.is_some_and(|s| !s.contains('/') && !s.is_empty())
}

/// Removes runsc's state for container `id` by its recorded name, only
/// regular files and sockets (never what a symlink points at).
fn remove_runsc_state(root: &Path, id: &str) {
    // A recorded id is ours only if it has the shape we mint.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        log::warn!("recovery: refusing runsc state of {id:?}: not a container id this lazaret mints");
        return;
    }
    let Ok(rd) = std::fs::read_dir(root) else { return };
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().to_string();
        if !is_runsc_state_of(&n, id) {
            continue;
        }
        match e.file_type() {
            Ok(t) if t.is_file() || std::os::unix::fs::FileTypeExt::is_socket(&t) => {
                log::info!("removing runsc state {n}");
                let _ = std::fs::remove_file(e.path());
            }
            _ => log::warn!("recovery: refusing to remove {n}: not a regular file or socket"),
        }
    }
}

/// Opens the coordinator log for the spawning CLI (stderr of the HC).
pub fn open_log(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod recovery_tests {
    use super::is_runsc_state_of;

    #[test]
    fn runsc_state_is_matched_by_exact_container_id() {
        let id = "lz-0123abcd-beef";
        for ours in [
            "lz-0123abcd-beef_sandbox:lz-0123abcd-beef.state",
            "lz-0123abcd-beef_sandbox:lz-0123abcd-beef.lock",
            "runsc-lz-0123abcd-beef.sock",
        ] {
            assert!(is_runsc_state_of(ours, id), "{ours}");
        }
        for not_ours in [
            "lz-0123abcd-beef2_sandbox:lz-0123abcd-beef2.state",
            "lz-0123abcd-bee_sandbox:x.state",
            "lz-0123abcd-beef_sandbox:lz-0123abcd-beef.state.tmp",
            "lz-0123abcd-beef_.state",
            "runsc-lz-0123abcd-beef.sock.old",
            "lz-0123abcd-beef",
        ] {
            assert!(!is_runsc_state_of(not_ours, id), "{not_ours}");
        }
    }
}

#[cfg(test)]
mod runsc_error_tests {
    use super::runsc_error_at;

    #[test]
    fn holds_only_a_trailing_runsc_error() {
        let id = "lz-158c3fa2-c0e66783";
        let line = format!(
            "waiting on pid 3: waiting on PID 3 in sandbox \"{id}\": urpc method \"containerManager.WaitPID\" failed: EOF\n"
        );
        assert_eq!(runsc_error_at(line.as_bytes(), id), Some(0));
        let mixed = format!("guest said this\n{line}");
        assert_eq!(runsc_error_at(mixed.as_bytes(), id), Some(16));
        let early = "executing processes for container: executing command \"/.lazaret/init exec -- sleep 600\" \
                     in sandbox: connecting to control server at PID 27185: connection refused\n";
        assert_eq!(runsc_error_at(early.as_bytes(), id), Some(0));
        let other = "error: sandbox \"lz-other\" is fine\n";
        assert_eq!(runsc_error_at(other.as_bytes(), id), None);
        assert_eq!(runsc_error_at(b"plain guest stderr\npartial", id), None);
        let big = format!("{line}{}", "x".repeat(5000));
        assert_eq!(runsc_error_at(big.as_bytes(), id), None);
    }
}
