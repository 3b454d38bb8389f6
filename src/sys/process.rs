//! Processes: ids, signals, waiting, and the steps a child runs between
//! fork and exec ([`ChildSetup`]).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use super::{cpath, cvt};

pub fn getuid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

pub fn getgid() -> u32 {
    // SAFETY: getgid has no preconditions and cannot fail.
    unsafe { libc::getgid() }
}

pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

/// Microseconds on CLOCK_MONOTONIC (one clock for every process here).
pub fn monotonic_us() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000 + t.tv_nsec as u64 / 1_000
}

pub fn getppid() -> i32 {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() }
}

/// Start time of a process in clock ticks since boot (field 22 of
/// `/proc/PID/stat`). Together with the pid this names one process for the
/// lifetime of the machine, which is what ownership records store.
pub fn proc_start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Parses the start time out of a `/proc/PID/stat` line. The comm field may
/// contain spaces and parentheses, so fields are counted after the last `)`.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the comm: field 3 (state) is index 0, so field 22 is index 19.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// True when `pid` is alive and started at `start_time`: the process we
/// recorded, not a later one that reused the pid.
pub fn same_process(pid: i32, start_time: u64) -> bool {
    pid > 0 && proc_start_time(pid) == Some(start_time)
}

pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    cvt(unsafe { libc::kill(pid, sig) }).map(|_| ())
}

/// Kills a whole process group.
pub fn killpg(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    kill(-pgid, sig)
}

/// Arrange for `sig` to be delivered to this process when its parent dies.
pub fn set_parent_death_signal(sig: i32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no pointers involved.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) }).map(|_| ())
}

/// Sets the kernel thread name (`comm`, at most 15 bytes).
pub fn set_thread_name(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: buf is a NUL-terminated buffer of 16 bytes that outlives the call.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0);
    }
}

pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid has no memory-safety preconditions.
    cvt(unsafe { libc::setsid() }).map(|_| ())
}

/// Become uid/gid 0 inside a freshly mapped user namespace.
pub fn become_ns_root() -> io::Result<()> {
    // SAFETY: plain id-setting syscalls with integer / null arguments.
    unsafe {
        cvt(libc::setresgid(0, 0, 0))?;
        cvt(libc::setgroups(0, std::ptr::null())).or_else(|e| {
            if e.raw_os_error() == Some(libc::EPERM) {
                Ok(0)
            } else {
                Err(e)
            }
        })?;
        cvt(libc::setresuid(0, 0, 0))?;
    }
    Ok(())
}

pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

pub fn umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Reaps `pid`, blocking (EINTR retried).
fn wait_blocking(pid: i32) -> io::Result<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Waits up to `limit` for `child` to exit. `Some(status)` when it did;
/// `None` when it did not, after killing (SIGKILL) and reaping it. The one
/// bounded wait every role uses for helpers it stops.
pub fn wait_deadline(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    let mut nap = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) => {}
            // Not our child any more (reaped elsewhere): nothing to wait for.
            Err(_) => return None,
        }
        let now = Instant::now();
        if now >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

// ---- signals: one self-pipe per process --------------------------------

static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write is async-signal-safe; b lives for the call. A full
        // pipe drops the byte, which is fine: the reader drains all of them.
        unsafe {
            libc::write(fd, &b as *const u8 as *const libc::c_void, 1);
        }
    }
}

/// Routes `signals` into a non-blocking pipe and returns its read end. The
/// event loop polls it and reads one byte per signal number.
pub fn signal_pipe(signals: &[libc::c_int]) -> io::Result<OwnedFd> {
    let (r, w) = super::pipe()?;
    super::set_nonblocking(&r, true)?;
    super::set_nonblocking(&w, true)?;
    let wfd = std::os::fd::IntoRawFd::into_raw_fd(w);
    SIGNAL_PIPE.store(wfd, Ordering::Relaxed);
    for &sig in signals {
        // SAFETY: installing a handler that only calls async-signal-safe
        // write; sa is fully initialised (zeroed, then set).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
        }
    }
    Ok(r)
}

/// Reads pending signal numbers from the self-pipe.
pub fn drain_signals(fd: impl AsFd) -> Vec<i32> {
    let mut buf = [0u8; 64];
    let mut out = Vec::new();
    while let Ok(n) = super::read(&fd, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend(buf[..n].iter().map(|&b| b as i32));
    }
    out
}

/// Runs `f` (writes to a child's stdin) with SIGPIPE blocked in this
/// thread, then discards a SIGPIPE the writes raised: a child that exits
/// before reading its input makes the write fail with EPIPE instead of
/// ending a process that has SIGPIPE at its default action (every command
/// that only prints, so `| head` ends it quietly).
pub fn without_sigpipe<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t values are initialised by sigemptyset before use;
    // pthread_sigmask and sigtimedwait only read and write them.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        let pending_before = {
            let mut p: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut p) == 0 && libc::sigismember(&p, libc::SIGPIPE) == 1
        };
        let r = f();
        if !pending_before {
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&block, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

pub fn ignore_signal(sig: libc::c_int) {
    // SAFETY: SIG_IGN is a valid disposition.
    unsafe {
        libc::signal(sig, libc::SIG_IGN);
    }
}

/// Restores the default action of `sig` (e.g. SIGPIPE, which Rust ignores).
pub fn default_signal(sig: libc::c_int) {
    // SAFETY: SIG_DFL is a valid disposition.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
    }
}

/// Restores default dispositions and an empty mask; used in children
/// between fork and exec.
pub fn reset_signals() {
    // SAFETY: only async-signal-safe calls with valid arguments; the set is
    // zero-initialised before sigemptyset fills it.
    unsafe {
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

// ---- between fork and exec --------------------------------------------------

/// The most fds one [`ChildSetup`] step places (no allocation after fork).
const MAX_INSTALL: usize = 8;

enum Step {
    ResetSignals,
    Setsid,
    ParentDeath(i32),
    ExitUnlessParent(i32),
    WriteEach(Vec<RawFd>, &'static [u8]),
    Install(Vec<(RawFd, RawFd)>),
    CloseFrom(RawFd, Vec<RawFd>),
    Setns(RawFd, i32),
    Chdir(CString),
    Fchdir(RawFd),
    ControllingTty(RawFd),
    Detach,
}

/// What a child does between fork and exec, as data: each step is a plain
/// async-signal-safe system call that allocates nothing, so the hook is
/// sound in a multi-threaded parent. Steps run in the order they were
/// added. Fds are recorded by number: the caller keeps them open until the
/// command is spawned.
#[derive(Default)]
pub struct ChildSetup {
    steps: Vec<Step>,
}

impl ChildSetup {
    pub fn new() -> Self {
        Self::default()
    }
    /// Default signal dispositions and an empty mask.
    pub fn reset_signals(mut self) -> Self {
        self.steps.push(Step::ResetSignals);
        self
    }
    /// A new session and process group.
    pub fn setsid(mut self) -> Self {
        self.steps.push(Step::Setsid);
        self
    }
    /// `sig` when the parent dies.
    pub fn parent_death_signal(mut self, sig: i32) -> Self {
        self.steps.push(Step::ParentDeath(sig));
        self
    }
    /// Exits 127 when the parent is no longer `parent` (it died before
    /// the death signal was armed).
    pub fn exit_unless_parent(mut self, parent: i32) -> Self {
        self.steps.push(Step::ExitUnlessParent(parent));
        self
    }
    /// Writes `bytes` to each fd (joining cgroups through their
    /// `cgroup.procs`).
    pub fn write_each(mut self, fds: &[RawFd], bytes: &'static [u8]) -> Self {
        self.steps.push(Step::WriteEach(fds.to_vec(), bytes));
        self
    }
    /// Places each `(fd, target)` at its target number (close-on-exec
    /// cleared), safe against sources that sit on a target.
    pub fn install_fds(mut self, pairs: &[(RawFd, RawFd)]) -> Self {
        assert!(pairs.len() <= MAX_INSTALL, "too many fds to install");
        self.steps.push(Step::Install(pairs.to_vec()));
        self
    }
    /// Closes every fd >= `from` except those in `keep`.
    pub fn close_fds_from(mut self, from: RawFd, keep: &[RawFd]) -> Self {
        self.steps.push(Step::CloseFrom(from, keep.to_vec()));
        self
    }
    /// Joins the namespace `ns` of type `nstype` (a `CLONE_NEW*` flag).
    pub fn setns(mut self, ns: impl AsFd, nstype: i32) -> Self {
        self.steps.push(Step::Setns(ns.as_fd().as_raw_fd(), nstype));
        self
    }
    pub fn chdir(mut self, dir: &Path) -> Self {
        let c = cpath(dir).expect("a directory path without NUL");
        self.steps.push(Step::Chdir(c));
        self
    }
    /// Changes to the directory `dir` is open as (a handle, never a path).
    pub fn fchdir(mut self, dir: impl AsFd) -> Self {
        self.steps.push(Step::Fchdir(dir.as_fd().as_raw_fd()));
        self
    }
    /// Makes `fd` (a tty) the controlling terminal (after [`Self::setsid`]).
    pub fn controlling_tty(mut self, fd: RawFd) -> Self {
        self.steps.push(Step::ControllingTty(fd));
        self
    }
    /// Forks once more; the intermediate process exits 0, so the command
    /// is never the spawner's zombie.
    pub fn detach(mut self) -> Self {
        self.steps.push(Step::Detach);
        self
    }

    /// Installs the steps as `cmd`'s pre-exec hook.
    pub fn apply(self, cmd: &mut Command) {
        let steps = self.steps;
        // SAFETY: the hook runs between fork and exec; every step below is
        // an async-signal-safe system call on data prepared before fork
        // (no allocation, no locks, no unwinding).
        unsafe {
            cmd.pre_exec(move || {
                for s in &steps {
                    run_step(s)?;
                }
                Ok(())
            });
        }
    }
}

fn run_step(s: &Step) -> io::Result<()> {
    match s {
        Step::ResetSignals => reset_signals(),
        Step::Setsid => setsid()?,
        Step::ParentDeath(sig) => set_parent_death_signal(*sig)?,
        Step::ExitUnlessParent(p) => {
            if getppid() != *p {
                exit_now(127);
            }
        }
        Step::WriteEach(fds, bytes) => {
            for &fd in fds {
                // SAFETY: write(2) of a static buffer to an fd number.
                let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
                if n != bytes.len() as isize {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Step::Install(pairs) => install_fds_raw(pairs)?,
        Step::CloseFrom(from, keep) => close_fds_from_raw(*from, keep),
        Step::Setns(fd, t) => setns_raw(*fd, *t)?,
        Step::Chdir(p) => {
            // SAFETY: p is a valid NUL-terminated path made before fork.
            cvt(unsafe { libc::chdir(p.as_ptr()) })?;
        }
        Step::Fchdir(fd) => {
            // SAFETY: fchdir takes an fd number; a bad one yields EBADF.
            cvt(unsafe { libc::fchdir(*fd) })?;
        }
        Step::ControllingTty(fd) => {
            // SAFETY: TIOCSCTTY takes an integer argument.
            cvt(unsafe { libc::ioctl(*fd, libc::TIOCSCTTY, 0) })?;
        }
        Step::Detach => {
            // SAFETY: we are already a forked child that only execs next;
            // the grandchild continues with the remaining steps, the
            // intermediate process only calls _exit.
            match cvt(unsafe { libc::fork() })? {
                0 => {}
                _ => exit_now(0),
            }
        }
    }
    Ok(())
}

pub(super) fn setns_raw(fd: RawFd, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: setns takes an fd and flags; an invalid fd yields EBADF.
    cvt(unsafe { libc::setns(fd, nstype) }).map(|_| ())
}

/// Places each `(fd, target)` at its target number (close-on-exec cleared),
/// safe against sources that sit on a target. No allocation.
fn install_fds_raw(pairs: &[(RawFd, RawFd)]) -> io::Result<()> {
    let mut high = [0 as RawFd; MAX_INSTALL];
    for (i, &(fd, _)) in pairs.iter().enumerate().take(MAX_INSTALL) {
        // SAFETY: F_DUPFD_CLOEXEC with integer arguments.
        high[i] = cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100) })?;
    }
    for (&h, &(_, target)) in high.iter().zip(pairs) {
        super::fd::dup2_raw(h, target)?;
    }
    Ok(())
}

/// Closes every fd >= `from` except those in `keep`.
fn close_fds_from_raw(from: RawFd, keep: &[RawFd]) {
    // SAFETY: closing fds in the child before exec; nothing else uses them.
    unsafe {
        let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(256, 65536) as RawFd;
        for fd in from..max {
            if !keep.contains(&fd) {
                libc::close(fd);
            }
        }
    }
}

// ---- the doctor's namespace probe ------------------------------------------

/// Steps of [`probe_namespaces`], reported on failure.
pub const NS_STEP_SETGROUPS: u8 = 1;
pub const NS_STEP_SETGID: u8 = 2;
pub const NS_STEP_SETUID: u8 = 3;
pub const NS_STEP_USERNS: u8 = 4;
pub const NS_STEP_MNT_NET: u8 = 5;

/// The outcome of [`probe_namespaces`].
pub enum NsProbe {
    Ok,
    /// A step failed with errno.
    Failed {
        step: u8,
        errno: i32,
    },
    /// The child ended some other way (what happened to it).
    Died(String),
}

/// Forks a child that (optionally) drops to `drop_to = (uid, gid)`, then
/// creates a user namespace and, inside it, mount and network namespaces
/// (what the supervisor does). AppArmor's userns restriction lets the first
/// unshare succeed but denies the second, so both are tried.
pub fn probe_namespaces(drop_to: Option<(u32, u32)>) -> io::Result<NsProbe> {
    let (rd, wr) = super::pipe()?;
    let wfd = wr.as_raw_fd();
    // SAFETY: the child runs only `probe_child`, which makes raw system calls
    // (no allocation, locks or unwinding) and ends with `_exit`, so forking a
    // possibly multi-threaded process is sound.
    let pid = cvt(unsafe { libc::fork() })?;
    if pid == 0 {
        probe_child(wfd, drop_to)
    }
    drop(wr);
    let mut buf = [0u8; 5];
    let got = super::read_full(&rd, &mut buf);
    drop(rd);
    let status = wait_blocking(pid)?;
    if got? == buf.len() {
        let errno = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
        return Ok(NsProbe::Failed { step: buf[0], errno });
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(NsProbe::Ok)
    } else if libc::WIFSIGNALED(status) {
        Ok(NsProbe::Died(format!(
            "probe child killed by signal {}",
            libc::WTERMSIG(status)
        )))
    } else {
        Ok(NsProbe::Died(format!(
            "probe child exited with status {}",
            libc::WEXITSTATUS(status)
        )))
    }
}

/// Body of the probe child. Exits 0 on success; on failure writes
/// `[step, errno as 4 native-endian bytes]` to `wr` and exits 1. Only for
/// the freshly forked child; never returns.
fn probe_child(wr: RawFd, drop_to: Option<(u32, u32)>) -> ! {
    // Raw syscalls rather than the libc wrappers: glibc's set*id wrappers
    // broadcast to all threads, which is not something to rely on after fork.
    if let Some((uid, gid)) = drop_to {
        // SAFETY: plain system calls with integer / null arguments.
        unsafe {
            if libc::syscall(libc::SYS_setgroups, 0 as libc::c_long, std::ptr::null::<libc::gid_t>()) != 0 {
                probe_fail(wr, NS_STEP_SETGROUPS);
            }
            let g = gid as libc::c_long;
            if libc::syscall(libc::SYS_setresgid, g, g, g) != 0 {
                probe_fail(wr, NS_STEP_SETGID);
            }
            let u = uid as libc::c_long;
            if libc::syscall(libc::SYS_setresuid, u, u, u) != 0 {
                probe_fail(wr, NS_STEP_SETUID);
            }
        }
    }
    // SAFETY: unshare only changes this (single-threaded) child's namespaces.
    unsafe {
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            probe_fail(wr, NS_STEP_USERNS);
        }
        if libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) != 0 {
            probe_fail(wr, NS_STEP_MNT_NET);
        }
    }
    exit_now(0)
}

/// Only for the probe child: reads errno, writes to `wr`, and `_exit`s.
fn probe_fail(wr: RawFd, step: u8) -> ! {
    let e = io::Error::last_os_error().raw_os_error().unwrap_or(0).to_ne_bytes();
    let msg = [step, e[0], e[1], e[2], e[3]];
    // SAFETY: msg is a valid stack buffer; write is async-signal-safe.
    unsafe { libc::write(wr, msg.as_ptr().cast(), msg.len()) };
    exit_now(1)
}
