//! Joining a Domain's published coordinator, or winning its Domain lock and
//! starting the coordinator (`start_coordinator`) with the start-time checks.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::failure::{sys_step, Failure, SysStep};
use crate::client::resolve::Resolved;
use crate::coordinator;
use crate::domain;
use crate::storage::image;
use crate::sys;
use crate::wire::codec;

/// Joins the published coordinator, or becomes the one that starts it by
/// winning the Domain lock. Losers wait for publication.
pub(super) fn connect_or_start(r: &Resolved, quiet: bool) -> Result<UnixStream, Failure> {
    r.paths.ensure()?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut progress = image::Progress::new(quiet);
    let mut waited = false;
    loop {
        match UnixStream::connect(r.paths.socket()) {
            Ok(s) => return Ok(s),
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => {}
            Err(e) => {
                return Err(Failure::Connect {
                    socket: r.paths.socket(),
                    err: e,
                })
            }
        }
        // A coordinator that just stopped removes the runtime dir.
        r.paths.ensure()?;
        if let Some(lock) = try_domain_lock(&r.paths.lock())? {
            // Before the image is prepared: the sandbox's namespace maps them.
            crate::client::doctor::require_subids()?;
            check_disk(r)?;
            check_host_hooks(r)?;
            warn_unlimited(r, quiet);
            start_coordinator(r, lock, &mut progress)?;
            continue;
        }
        if Instant::now() > deadline {
            return Err(Failure::LockedUnpublished);
        }
        if !waited {
            progress.step("waiting for the Domain to start");
            waited = true;
        }
        std::thread::sleep(Duration::from_millis(15));
    }
}

/// The Domain lock, if we win it on the file that is still at its path.
fn try_domain_lock(path: &Path) -> Result<Option<File>, Failure> {
    domain::try_lock(path).map_err(Failure::Lock)
}

/// The profile's `disk` cap on persisted state, checked at each start
/// (rootless quotas are not available: this is the enforcement point).
fn check_disk(r: &Resolved) -> Result<(), Failure> {
    if r.profile.limits.disk.is_none() {
        return Ok(());
    }
    let used = crate::storage::cgroup::persisted_use(&r.paths.root);
    match crate::storage::cgroup::disk_verdict(used, r.profile.limits.disk, &r.profile.name) {
        crate::storage::cgroup::DiskVerdict::Ok => Ok(()),
        crate::storage::cgroup::DiskVerdict::Warn(m) => {
            eprintln!("lazaret: warning: {m}");
            Ok(())
        }
        crate::storage::cgroup::DiskVerdict::Refuse(m) => Err(Failure::DiskCap(m)),
    }
}

/// Git's execution surface at each Domain start (`view::hostexec`): a
/// workspace whose repositories could not all be found does not start;
/// host hooks or configured programs that run project code are one
/// warning line, or refuse the start under `host_hooks = "refuse"`.
fn check_host_hooks(r: &Resolved) -> Result<(), Failure> {
    let rep = crate::view::hostexec::report(&r.workspace);
    if let Some(e) = rep.walk_error {
        return Err(Failure::HostHooks(format!("{e}; the Domain does not start")));
    }
    let Some(line) = crate::view::hostexec::warning_line(&rep.findings) else {
        return Ok(());
    };
    if r.profile.host_hooks == crate::config::HostHooks::Refuse {
        let f = &rep.findings[0];
        return Err(Failure::HostHooks(format!(
            "{line}; profile {} sets host_hooks = \"refuse\": the Domain does not start ({})",
            crate::display::escape(&r.profile.name),
            crate::display::escape(&f.reason)
        )));
    }
    eprintln!("lazaret: {line}");
    Ok(())
}

/// Once per Domain start, unless quiet: nothing bounds the sandbox here.
/// One line; the fix is `lazaret doctor`'s.
fn warn_unlimited(r: &Resolved, quiet: bool) {
    if quiet {
        return;
    }
    if let crate::storage::cgroup::Mechanism::Unavailable { why, .. } = crate::storage::cgroup::detect() {
        eprintln!(
            "lazaret: warning: no resource limits for Domain {} ({}); `lazaret doctor` says how to enable them",
            r.domain_id.short(),
            why.split(';').next().unwrap_or(&why).trim()
        );
    }
}

fn start_coordinator(r: &Resolved, lock: File, progress: &mut image::Progress) -> Result<(), Failure> {
    let t0 = crate::trace::now_us();
    let exe = std::env::current_exe().map_err(sys_step(SysStep::LocateSelf))?;
    let (start_rd, start_wr) = sys::pipe().map_err(sys_step(SysStep::Pipe))?;
    let log = coordinator::open_log(&r.paths.log()).map_err(|err| Failure::OpenLog {
        path: r.paths.log(),
        err,
    })?;
    // The profile's secrets reach the coordinator on a pipe of their own.
    let secrets_pipe = if r.secrets.is_empty() {
        None
    } else {
        Some(sys::pipe().map_err(sys_step(SysStep::Pipe))?)
    };
    let mut cmd = Command::new(exe);
    cmd.arg0("lazaret:[coordinator]")
        .arg("__coordinator")
        .args(secrets_pipe.as_ref().map(|_| "--secrets"))
        .arg("--profile")
        .arg(&r.profile.name)
        .arg("--workspace")
        .arg(&r.workspace)
        .arg("--config")
        .arg(&r.cfg.path)
        .args(r.publish.iter().flat_map(|p| ["--publish".to_string(), p.to_string()]))
        .args(crate::storage::cgroup::override_args(&r.limit_overrides))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        // Only what Lazaret and its helpers read: passed keys and the rest
        // of the caller's environment stay out of long-lived processes.
        .env_clear()
        .envs(crate::config::passenv::coordinator_env(std::env::vars_os(), &r.pass));
    let (l, s) = (lock.as_raw_fd(), start_wr.as_raw_fd());
    let mut fds = vec![(l, coordinator::LOCK_FD), (s, coordinator::START_FD)];
    if let Some((rd, _)) = &secrets_pipe {
        fds.push((rd.as_raw_fd(), coordinator::SECRETS_FD));
    }
    // The extra fork detaches the coordinator so it is never our zombie.
    sys::ChildSetup::new()
        .reset_signals()
        .setsid()
        .install_fds(&fds)
        // Nothing the caller left open (a lock, a pipe someone waits
        // on) may live on in the coordinator and its helpers.
        .close_fds_from(3, &fds.iter().map(|(_, to)| *to).collect::<Vec<_>>())
        .detach()
        .apply(&mut cmd);
    let mut child = cmd.spawn().map_err(sys_step(SysStep::StartCoordinator))?;
    let writer = secrets_pipe.map(|(rd, wr)| {
        drop(rd);
        crate::client::secrets::send(&r.secrets, wr)
    });
    let _ = child.wait();
    drop(start_wr);
    drop(lock);
    let mut start = crate::wire::start::StartReceiver::new(File::from(start_rd));
    let result = start.wait_for_ready(|p| progress.step(p));
    progress.done();
    if result.is_ok() && std::env::var_os(crate::trace::ENV).is_some_and(|v| v == "1") {
        let log = std::fs::read_to_string(r.paths.log()).unwrap_or_default();
        eprint!(
            "lazaret: startup trace (ms since the start began, step time)\n{}",
            crate::trace::render(&log, t0)
        );
    }
    // Written by now, or the coordinator is gone (the write failed).
    if let Some(w) = writer {
        let _ = w.join();
    }
    match result {
        Ok(()) => Ok(()),
        Err(crate::wire::start::StartError::Failed(e)) => Err(Failure::StartFailed(e)),
        Err(crate::wire::start::StartError::PortTaken(t)) => Err(crate::client::lifecycle::port_taken(
            r.paths.run.parent().unwrap_or(Path::new("/")),
            t,
        )),
        Err(crate::wire::start::StartError::Read(e)) => Err(Failure::StartExited {
            err: match e {
                codec::ReadError::Closed => None,
                e => Some(e),
            },
            log: r.paths.log(),
        }),
    }
}
