//! The Runtime Supervisor (`lazaret:[supervisor]`): the Host Coordinator's
//! child that owns the generation's user, mount and network namespaces and
//! the attached `runsc run`.
//!
//! Steps, in order:
//! 1. arm PDEATHSIG (SIGKILL) and check the coordinator is still there;
//! 2. `unshare(USER|MOUNT)` (plus `NET` without a network); ask the
//!    coordinator to write the id maps (newuidmap/newgidmap need a pid
//!    outside the namespace); wait for them;
//! 3. become root of the namespace; make mounts private; mount what the
//!    bundle binds (meminfo view, mailbox tmpfs, State Anchor); with a
//!    network, prepare its sandbox half (`netns::prepare`: sandbox +
//!    router namespaces, IPv6 off, `lzr0` with its address and route,
//!    `/proc/sys/net/core` masked in the namespace runsc will run in:
//!    runsc ≤ 20240729 would otherwise think it is in the host network
//!    namespace); mount and serve the workspace views;
//! 4. start `runsc run` (non-detached, PDEATHSIG, in the sandbox network
//!    namespace) on the coordinator's bundle, its stdin a pipe; its root
//!    process is Lazaret's init, which waits there for its boot request;
//! 5. meanwhile, with a network, install its router half
//!    (`netns::finish`: slirp4netns on the router, the router's routes,
//!    read-back and route lookups, the egress gate; reports `Slirp` and
//!    `NetReady`); only then write the boot request (the coordinator's
//!    `gen/boot-request`) into init's stdin and close it: init runs the
//!    network probe and the user setup it asks for and reports each
//!    outcome, then `wire::guest::InitMsg::Ready`, on its stdout;
//! 6. relay the outcomes (`ProbeCheck`, `UserReady`/`UserFailed`), report
//!    `Ready { pid, start }` and wait. EOF on the lease pipe (coordinator
//!    gone or done) ⇒ kill the sandbox, delete its runsc state, exit.
//!
//! Wire format: `wire::supervisor` (`StatusMsg` frames on the status pipe,
//! `LeaseMsg::Mapped` then EOF on the lease pipe); the plans it is handed
//! are `wire::plan::PlanMsg` files.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::net::install as netns;
use crate::net::policy;
use crate::plan;
use crate::sys;
use crate::wire::guest::{InitError, InitReceiver, UserOutcome};
use crate::wire::supervisor::StatusMsg;
use crate::wire::ReadError;

mod error;
pub use error::SupervisorError;

/// The lease pipe's read end and the status pipe's write end arrive as
/// these fds.
pub const LEASE_FD: i32 = 3;
pub const STATUS_FD: i32 = 4;

pub struct Args {
    pub runsc_root: PathBuf,
    pub bundle: PathBuf,
    pub container_id: String,
    pub runsc_args: Vec<String>,
    /// The install plan the coordinator derived (`--net-plan`), if any.
    pub net_plan: Option<PathBuf>,
    /// What init does at boot (`--boot-request`, `wire::guest::BootCmd`
    /// frames: the network probe, the profile user's setup): `runsc run`'s
    /// stdin, so init reads it. Without it, stdin is empty.
    pub boot_request: Option<PathBuf>,
    /// The workspace views to serve (`fusefs`), written by the coordinator.
    pub views: Option<PathBuf>,
    /// Where the workspace is inside (`--guest-workspace`,
    /// `plan::workspace`): the relay touches host edits there.
    pub guest_workspace: Option<PathBuf>,
    /// The State Anchor's mount plan (`anchor::plan_message`).
    pub anchor_plan: Option<PathBuf>,
    /// Where runsc keeps the root filesystem's non-persisted writes.
    pub scratch: Option<PathBuf>,
    /// A `/proc/meminfo` with the Domain's memory limit as `MemTotal`
    /// (`cgroup::meminfo_view`), bound over ours so runsc tells the
    /// sentry that total.
    pub meminfo: Option<PathBuf>,
    /// The escalation mailbox's `requests/` (`--mailbox-requests`): a
    /// size-bounded tmpfs is mounted there in our mount namespace, so
    /// what the sandbox writes to it is bounded by the kernel.
    pub mailbox_requests: Option<PathBuf>,
    /// `--secrets`: the profile has secrets; the lease pipe carries them
    /// after `Mapped` (the flag holds no value).
    pub secrets: bool,
    /// `limits.disk` (`--disk-cap`): the views count what the sandbox
    /// writes to the ignored store and to `/tmp` (`--disk-tmp`, the view
    /// source served there) against it, from `--disk-used` (the persisted
    /// use the coordinator measured at start), and answer ENOSPC past it.
    pub disk_cap: Option<u64>,
    pub disk_used: u64,
    pub disk_tmp: Option<PathBuf>,
    /// `--scratch-size`: with a disk cap, `scratch` is a tmpfs of this size.
    pub scratch_size: Option<u64>,
}

/// How often the disk budget's count is published for `lazaret ps`
/// (`gen/disk`), when it changed.
const DISK_REPORT: Duration = Duration::from_millis(500);

/// Publishes the budget's count to `file` while the process lives.
fn report_disk(budget: std::sync::Arc<crate::view::budget::Budget>, file: PathBuf) {
    let mut last = None;
    loop {
        let used = budget.used();
        if last != Some(used) {
            let msg = crate::wire::show::ShowMsg::Disk {
                used,
                cap: budget.cap(),
            };
            if crate::wire::show::write(&file, &msg).is_ok() {
                last = Some(used);
            }
        }
        std::thread::sleep(DISK_REPORT);
    }
}

/// Mount options of the mailbox's `requests/` tmpfs: bytes and inodes
/// bounded (`escalation::REQUESTS_MAX_BYTES`, a few times the scan's junk
/// budget), owned by our namespace's root (the developer on the host).
pub fn mailbox_tmpfs_options() -> String {
    format!(
        "size={},nr_inodes=65536,mode=0700,uid=0,gid=0",
        crate::escalation::REQUESTS_MAX_BYTES
    )
}

fn status(msg: &StatusMsg) {
    let _ = crate::wire::send_fd(sys::borrow_inherited(STATUS_FD), msg);
}

fn fail(e: SupervisorError) -> i32 {
    let message = e.to_string();
    eprintln!("lazaret:[supervisor]: {message}");
    status(&StatusMsg::Error { message });
    1
}

pub fn main(mut args: Args) -> i32 {
    sys::set_thread_name("lz-supervisor");
    // INVARIANT: the lease and status pipes are ours alone; runsc,
    // slirp4netns and fuse-overlayfs must not inherit them (an inherited
    // lease would outlive us, an inherited status pipe would hide our EOF).
    for fd in [LEASE_FD, STATUS_FD] {
        if let Err(e) = sys::set_cloexec(sys::borrow_inherited(fd), true) {
            eprintln!("lazaret:[supervisor]: fd {fd}: {e}");
            return 1;
        }
    }
    let plan = match args.net_plan.as_deref().map(crate::wire::plan::read_network) {
        None => None,
        Some(Ok(p)) => Some(p).filter(|p| p.enabled),
        Some(Err(e)) => return fail(SupervisorError::NetPlan(e)),
    };
    if let Some(dir) = &args.scratch {
        args.runsc_args = plan::with_scratch_overlay(&args.runsc_args, dir);
    }
    let parent = sys::getppid();
    if let Err(e) = sys::set_parent_death_signal(sys::SIGKILL) {
        return fail(SupervisorError::DeathSignal(e));
    }
    if parent == 1 || sys::getppid() != parent {
        return 1;
    }
    // With a network, the supervisor stays in the host network namespace
    // (slirp4netns must, to reach the outside) and prepares the sandbox and
    // router namespaces as children of its user namespace; without one, it keeps a
    // private empty netns of its own.
    let flags = if plan.is_some() {
        sys::CLONE_NEWUSER | sys::CLONE_NEWNS
    } else {
        sys::CLONE_NEWUSER | sys::CLONE_NEWNS | sys::CLONE_NEWNET
    };
    if let Err(e) = sys::unshare(flags) {
        return fail(SupervisorError::Unshare(e));
    }
    status(&StatusMsg::Userns);
    crate::trace::step("supervisor", "namespaces created");
    // LEASE_FD was handed to us by the coordinator and nothing else owns it.
    let lease = match sys::take_inherited(LEASE_FD) {
        Ok(fd) => fd,
        Err(e) => return fail(SupervisorError::LeasePipe(e)),
    };
    let mut lease = std::fs::File::from(lease);
    let secrets = match crate::wire::supervisor::wait_for_mapped(&mut lease, args.secrets) {
        Ok(s) => s,
        Err(e) => return fail(SupervisorError::Lease(e)),
    };
    // Fail closed: secrets the gate cannot load stop the start.
    let secrets = match secrets.map(crate::net::terminate::Secrets::from_wire).transpose() {
        Ok(s) => s,
        Err(e) => return fail(SupervisorError::Secrets(e)),
    };
    crate::trace::step("supervisor", "maps received");
    if let Err(e) = prepare_namespace(plan.is_none()) {
        return fail(e);
    }
    // With a network, its sandbox half is made on a thread of its own
    // while this one mounts what the bundle binds: the two are
    // independent (namespaces, sysctls and a veth there; mounts of this
    // mount namespace here; the half's own mounts, the namespace files in
    // `gen/` and the core mask inside the sandbox namespace, are on paths
    // nothing below mounts on). Joined before runsc starts; its router
    // half follows while runsc boots.
    let gen_dir = args.bundle.parent().unwrap_or(Path::new("/")).to_path_buf();
    let sandbox_half = match plan.as_ref().map(|_| {
        let dir = gen_dir.clone();
        std::thread::Builder::new()
            .name("lz-netprep".into())
            .spawn(move || netns::prepare(&dir))
    }) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(e)) => {
            return fail(SupervisorError::Network(netns::InstallError::Step(
                "preparing the sandbox network",
                e,
            )))
        }
    };
    if let Some(m) = &args.meminfo {
        if let Err(e) = sys::mount(&m.to_string_lossy(), "/proc/meminfo".as_ref(), "", sys::MS_BIND, None) {
            return fail(SupervisorError::Meminfo(m.clone(), e));
        }
    }
    if let Some(r) = &args.mailbox_requests {
        let flags = sys::MS_NOSUID | sys::MS_NODEV | sys::MS_NOEXEC;
        if let Err(e) = sys::mount("lazaret-mailbox", r, "tmpfs", flags, Some(&mailbox_tmpfs_options())) {
            return fail(SupervisorError::MailboxTmpfs(r.clone(), e));
        }
    }
    if let (Some(size), Some(dir)) = (args.scratch_size, &args.scratch) {
        // Under a disk cap, the root filesystem's other non-persisted
        // writes go to a tmpfs of this size: gVisor answers ENOSPC when
        // its overlay filestore cannot grow, and nothing reaches the disk.
        let flags = sys::MS_NOSUID | sys::MS_NODEV | sys::MS_NOEXEC;
        let opts = format!("size={size},mode=0700,uid=0,gid=0");
        if let Err(e) = sys::mount("lazaret-scratch", dir, "tmpfs", flags, Some(&opts)) {
            return fail(SupervisorError::ScratchTmpfs(dir.clone(), e));
        }
    }
    let budget = args.disk_cap.map(|cap| {
        let b = std::sync::Arc::new(crate::view::budget::Budget::new(cap, args.disk_used));
        let file = args.bundle.parent().unwrap_or(Path::new("/")).join("disk");
        let r = b.clone();
        let _ = std::thread::Builder::new()
            .name("lz-disk".into())
            .spawn(move || report_disk(r, file));
        b
    });
    // With a disk cap, each kernel overlay's upper and work directories
    // are reached through a storage view that counts what is written.
    let mut storage_views = Vec::new();
    let mut count_upper = |m: &crate::wire::plan::AnchorMount| -> std::io::Result<PathBuf> {
        let b = budget.clone().ok_or(std::io::ErrorKind::Unsupported)?;
        let mut at = m.target.clone().into_os_string();
        at.push(".upper");
        let at = PathBuf::from(at);
        std::fs::create_dir_all(&at)?;
        let served = crate::view::fs::serve::start_storage_view(&m.key_dir, &at, b)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        storage_views.push(served);
        Ok(at)
    };
    let counted: Option<crate::storage::anchor::CountUpper<'_>> =
        if budget.is_some() { Some(&mut count_upper) } else { None };
    // The State Anchor is mounted here, in our mount namespace, before runsc.
    let mounted = args
        .anchor_plan
        .as_deref()
        .map(|p| crate::storage::anchor::mount_all(p, counted));
    let mut anchor_daemons = match mounted {
        None => Vec::new(),
        Some(Ok(d)) => d,
        Some(Err(e)) => return fail(SupervisorError::Anchor(e)),
    };
    crate::trace::step("supervisor", "state anchor mounted");
    // Git Sentry + ignored state: the FUSE views runsc binds (fusefs).
    let (relay, relayed) = std::sync::mpsc::channel();
    let mut views = match args
        .views
        .as_deref()
        .map(|f| crate::view::fs::serve::start_views(f, Some(relay), budget.as_ref()))
    {
        Some(Err(e)) => return fail(SupervisorError::Views(e)),
        Some(Ok(v)) => v,
        None => Vec::new(),
    };
    // `/tmp` under a cap: a storage view of `scratch/tmp`, counted.
    if let (Some(b), Some(src)) = (&budget, &args.disk_tmp) {
        let at = args
            .bundle
            .parent()
            .unwrap_or(Path::new("/"))
            .join(crate::view::budget::TMP_VIEW);
        match crate::view::fs::serve::start_storage_view(src, &at, b.clone()) {
            Ok(v) => storage_views.push(v),
            Err(e) => return fail(SupervisorError::Views(e)),
        }
    }
    views.append(&mut storage_views);
    crate::trace::step("supervisor", "views mounted");
    // The network's sandbox half, complete before runsc is spawned: runsc
    // reads the sandbox namespace's interfaces, addresses and routes when
    // it starts.
    let mut side = None;
    if let Some(h) = sandbox_half {
        match h.join() {
            Ok(Ok(s)) => side = Some(s),
            Ok(Err(e)) => return fail(SupervisorError::Network(e)),
            Err(_) => {
                return fail(SupervisorError::Network(netns::InstallError::Step(
                    "preparing the sandbox network",
                    std::io::Error::other("the thread panicked"),
                )))
            }
        }
        args.runsc_args = plan::with_sandbox_network(&args.runsc_args);
        crate::trace::step("supervisor", "sandbox network prepared");
    }
    let _views = views;
    let (runsc_args, container) = (args.runsc_args.clone(), args.container_id.clone());
    let guest_ws = args
        .guest_workspace
        .clone()
        .unwrap_or_else(|| PathBuf::from(plan::GUEST_WORKSPACE));
    let _ = std::thread::Builder::new()
        .name("lz-relay".into())
        .spawn(move || relay_host_changes(&runsc_args, &container, &guest_ws, &relayed));
    // Before runsc exists, so no SIGCHLD of it is missed.
    let sig = match sys::signal_pipe(&[sys::SIGCHLD, sys::SIGTERM, sys::SIGINT, sys::SIGHUP]) {
        Ok(s) => s,
        Err(e) => return fail(SupervisorError::SignalPipe(e)),
    };
    let boot = match read_boot_request(&args) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    let (mut child, ready_rd, boot_wr) = match start_runsc(&args, side.as_ref().map(|s| s.sandbox().as_fd())) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    crate::trace::step("supervisor", "runsc started");
    // The router's half while runsc boots. ORDER (security): init does
    // nothing but wait for its boot request on stdin until it has it
    // whole, and no session can exist before init reports ready (the
    // Domain is published after that). The request is written only once
    // the network is installed and read back and the egress gate (in
    // allow-by-name mode) listens: the probe's packets, the sandbox's
    // first, and every later one, meet the whole policy. A failure here
    // stops the sandbox before init is given anything.
    let mut net = None;
    if let (Some(plan), Some(side)) = (&plan, side) {
        match netns::finish(side, plan, &gen_dir, secrets, policy::fault(), &status) {
            Ok(n) => {
                status(&StatusMsg::NetReady {
                    inode: n.inode,
                    router_inode: n.router_inode,
                });
                net = Some(n);
                crate::trace::step("supervisor", "network installed");
            }
            Err(e) => {
                stop_sandbox(&args, &mut child);
                return fail(SupervisorError::Network(e));
            }
        }
    }
    send_boot_request(boot_wr, boot);
    crate::trace::step("supervisor", "boot request sent");
    let watch = |fuse: &mut Vec<Child>, net: &mut Option<netns::Network>| -> Option<String> {
        let mut helpers: Vec<(&str, &mut Child)> = fuse.iter_mut().map(|c| ("fuse-overlayfs", c)).collect();
        if let Some(n) = net.as_mut() {
            if n.gate.as_ref().is_some_and(|g| g.ended()) {
                return Some("the egress gate".into());
            }
            helpers.push(("slirp4netns", &mut n.slirp));
        }
        dead_helper(&mut helpers, &_views)
    };
    // Init's start-up checks are done when it reports ready: the egress
    // log's later lines are the sandbox's own traffic.
    let gate_checks = net.as_ref().and_then(|n| n.gate.as_ref()).map(|g| g.checks_end());
    let code = supervise(
        &args,
        &mut child,
        ready_rd,
        lease,
        sig,
        &mut || watch(&mut anchor_daemons, &mut net),
        &mut || {
            if let Some(end) = &gate_checks {
                end.end_checks();
            }
        },
    );
    // The network goes after the sandbox (teardown order).
    if let Some(n) = &mut net {
        netns::stop_slirp(n);
    }
    for d in &mut anchor_daemons {
        let _ = d.kill();
        let _ = d.wait();
    }
    status(&StatusMsg::Stopped);
    code
}

/// How long the relay gathers host changes into one batch, and how many
/// paths one batch touches at most (a host `git checkout` of thousands of
/// files is not replayed file by file).
const RELAY_GATHER: Duration = Duration::from_millis(30);
const RELAY_MAX: usize = 256;

/// Host-side edits of workspace files, which gVisor does not see as
/// events, become inotify events inside: each batch of paths the
/// workspace view relays is touched through gVisor by `init touch` (its
/// own mtime set again: `IN_ATTRIB` for watchers of the file and of its
/// directory, content unchanged). Ends when the views are gone.
fn relay_host_changes(
    runsc_args: &[String],
    container: &str,
    guest_ws: &Path,
    rx: &std::sync::mpsc::Receiver<crate::view::fs::serve::Relayed>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first.path];
        // Told once the batch ran (files the host replaced: the view
        // invalidates their names after this touch).
        let mut done: Vec<_> = first.done.into_iter().collect();
        while let Ok(r) = rx.recv_timeout(RELAY_GATHER) {
            done.extend(r.done);
            if batch.len() < RELAY_MAX && !batch.contains(&r.path) {
                batch.push(r.path);
            }
        }
        while let Ok(r) = rx.try_recv() {
            done.extend(r.done);
        }
        let mut cmd = Command::new("runsc");
        cmd.args(runsc_args)
            .args(["exec", container, plan::GUEST_INIT, "touch", "--"])
            .args(batch.iter().map(|p| guest_ws.join(p)))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let _ = run_bounded(&mut cmd, Duration::from_secs(10));
        for d in done {
            let _ = d.send(());
        }
    }
}

fn prepare_namespace(mask_core: bool) -> Result<(), SupervisorError> {
    sys::become_ns_root().map_err(SupervisorError::BecomeRoot)?;
    sys::mount("none", "/".as_ref(), "", sys::MS_REC | sys::MS_PRIVATE, None).map_err(SupervisorError::MakePrivate)?;
    if mask_core {
        sys::mount("lzmask", "/proc/sys/net/core".as_ref(), "tmpfs", 0, Some("size=16k"))
            .map_err(SupervisorError::MaskCore)?;
    }
    Ok(())
}

/// The boot request's bytes (`--boot-request`, written by the coordinator
/// with the bundle; bounded as init reads it), or none.
fn read_boot_request(args: &Args) -> Result<Vec<u8>, SupervisorError> {
    let Some(p) = &args.boot_request else {
        return Ok(Vec::new());
    };
    let mut buf = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(p).map_err(|e| SupervisorError::BootRequest(p.clone(), e))?,
            crate::wire::guest::MAX_REQUEST_BYTES + 1,
        ),
        &mut buf,
    )
    .map_err(|e| SupervisorError::BootRequest(p.clone(), e))?;
    Ok(buf)
}

/// Gives init its boot request: the bytes, then EOF. From a thread of its
/// own: a request larger than the pipe holds is written as init reads it,
/// and if the sandbox is gone the write fails and the thread ends.
fn send_boot_request(pipe: OwnedFd, bytes: Vec<u8>) {
    let _ = std::thread::Builder::new().name("lz-boot".into()).spawn(move || {
        let _ = sys::write_all(&pipe, &bytes);
    });
}

/// Spawns `runsc run`, attached, in `netns` when given. Its stdin (init's)
/// is a pipe whose write end is returned: init waits on it for its boot
/// request ([`send_boot_request`]); its stdout is init's report (the
/// read end returned).
fn start_runsc(args: &Args, netns: Option<BorrowedFd<'_>>) -> Result<(Child, OwnedFd, OwnedFd), SupervisorError> {
    let (ready_rd, ready_wr) = sys::pipe().map_err(SupervisorError::ReadyPipe)?;
    // Init's stdin: a pipe the sandbox sees only as this stream (init
    // closes it once it read the request).
    let (boot_rd, boot_wr) = sys::pipe().map_err(SupervisorError::ReadyPipe)?;
    let mut cmd = Command::new("runsc");
    cmd.args(&args.runsc_args)
        .arg("run")
        .arg("--bundle")
        .arg(&args.bundle)
        .arg(&args.container_id)
        .stdin(Stdio::from(boot_rd))
        .stdout(Stdio::from(ready_wr));
    let mut setup = sys::ChildSetup::new().reset_signals().parent_death_signal(sys::SIGKILL);
    if let Some(ns) = netns {
        // runsc itself, its gofer and the sandbox all live in the
        // sandbox network namespace (behind the router); never in
        // the host's.
        setup = setup.setns(ns, sys::CLONE_NEWNET);
    }
    setup.apply(&mut cmd);
    let child = cmd.spawn().map_err(SupervisorError::StartRunsc)?;
    Ok((child, ready_rd, boot_wr))
}

/// What the supervisor's loop waits on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wake {
    Lease,
    Signals,
    Ready,
}

/// How often the helpers are checked besides SIGCHLD (a FUSE session
/// ends without one).
const HELPER_CHECK: Duration = Duration::from_millis(250);

/// The first helper found dead, by name: an exited child (reaped here, so
/// none stays a zombie) or a workspace view whose FUSE session ended (its
/// connection was aborted or its device closed).
pub fn dead_helper(children: &mut [(&str, &mut Child)], views: &[crate::view::fs::serve::Served]) -> Option<String> {
    for (name, c) in children.iter_mut() {
        let pid = c.id();
        if let Ok(Some(st)) = c.try_wait() {
            return Some(format!("{name} (pid {pid}, {st})"));
        }
    }
    if views.iter().any(|v| v.ended()) {
        return Some("the workspace view's FUSE session".into());
    }
    None
}

fn supervise(
    args: &Args,
    child: &mut Child,
    ready: OwnedFd,
    lease: std::fs::File,
    sig: OwnedFd,
    dead_helper: &mut dyn FnMut() -> Option<String>,
    checks_done: &mut dyn FnMut(),
) -> i32 {
    let mut ready = Some(InitReceiver::new(std::fs::File::from(ready)));
    let mut reported = false;
    loop {
        let mut fds = sys::PollSet::new();
        fds.read(&lease, Wake::Lease);
        fds.read(&sig, Wake::Signals);
        if let Some(r) = &ready {
            fds.read(r.pipe(), Wake::Ready);
        }
        if fds.wait(Some(HELPER_CHECK)).is_err() {
            continue;
        }
        // A generation with a dead helper is broken (a lost overlay, view or
        // network): report which one and stop the sandbox.
        if let Some(name) = dead_helper() {
            eprintln!("lazaret:[supervisor]: helper {name} died; stopping the sandbox");
            status(&StatusMsg::HelperDied { name });
            stop_sandbox(args, child);
            return 1;
        }
        if fds.is_readable(Wake::Lease) {
            // Any byte or EOF on the lease means: stop.
            break;
        }
        if fds.is_readable(Wake::Signals) {
            let sigs = sys::drain_signals(&sig);
            if sigs.iter().any(|&s| s != sys::SIGCHLD) {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                let code = st.code().unwrap_or(125);
                eprintln!("lazaret:[supervisor]: runsc run exited ({st})");
                status(&StatusMsg::Exited { code });
                delete_state(args);
                return if reported { 0 } else { 1 };
            }
        }
        if fds.is_readable(Wake::Ready) {
            // Init's report comes from inside the sandbox: bounded
            // `InitMsg::Check` frames and the user's outcome, then `Ready`;
            // anything else stops the sandbox. The outcomes go on as they
            // came; the coordinator judges them.
            match ready.as_mut().map(InitReceiver::wait_for_ready) {
                Some(Ok(Some(boot))) => {
                    ready = None;
                    crate::trace::step("supervisor", "sandbox init ready");
                    let pid = child.id() as i32;
                    // Fail closed: the coordinator records runsc by pid and start
                    // time, never by a guessed one.
                    let Some(start) = sys::proc_start_time(pid) else {
                        fail(SupervisorError::StartTime(pid));
                        stop_sandbox(args, child);
                        return 1;
                    };
                    checks_done();
                    for c in boot.checks {
                        status(&StatusMsg::ProbeCheck(c));
                    }
                    match boot.user {
                        Some(UserOutcome::Ready) => status(&StatusMsg::UserReady),
                        Some(UserOutcome::Failed(reason)) => status(&StatusMsg::UserFailed { reason }),
                        None => {}
                    }
                    status(&StatusMsg::Ready { pid, start });
                    reported = true;
                }
                Some(Ok(None)) | None => {}
                // runsc closes it when it exits (reported on SIGCHLD);
                // no Ready means the Domain is never published.
                Some(Err(InitError::Read(ReadError::Closed))) => ready = None,
                Some(Err(e)) => {
                    fail(SupervisorError::InitReport(e));
                    stop_sandbox(args, child);
                    return 1;
                }
            }
        }
    }
    stop_sandbox(args, child);
    0
}

fn runsc(args: &Args) -> Command {
    let mut c = Command::new("runsc");
    c.args(&args.runsc_args).stdin(Stdio::null()).stdout(Stdio::null());
    c
}

/// Kills the sandbox, waits for the attached runsc to exit (SIGKILL after a
/// grace period), then removes runsc's state for our container only.
fn stop_sandbox(args: &Args, child: &mut Child) {
    let _ = run_bounded(
        runsc(args).args(["kill", "--all", &args.container_id, "KILL"]),
        Duration::from_secs(5),
    );
    sys::wait_deadline(child, Duration::from_secs(3));
    delete_state(args);
}

fn delete_state(args: &Args) {
    let _ = run_bounded(
        runsc(args).args(["delete", "--force", &args.container_id]),
        Duration::from_secs(5),
    );
    // INVARIANT: only files named after our container id are touched.
    if let Ok(rd) = std::fs::read_dir(&args.runsc_root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with(&format!("{}_", args.container_id))
                || name == format!("runsc-{}.sock", args.container_id)
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Runs a short runsc command, killing it if it outlives `limit`.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Option<std::process::ExitStatus> {
    let mut child = cmd.stderr(Stdio::null()).spawn().ok()?;
    sys::wait_deadline(&mut child, limit)
}
