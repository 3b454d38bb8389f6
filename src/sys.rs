//! The thin syscall layer. Every `unsafe` in the `lazaret` binary lives here,
//! each with a `// SAFETY:` note; callers get safe functions that return
//! `io::Result`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

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

/// Kills a whole process group.
pub fn killpg(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    kill(-pgid, sig)
}

/// A non-blocking inotify instance watching `dir` for files that were
/// closed after writing or moved in.
pub fn inotify_dir(dir: &Path) -> io::Result<OwnedFd> {
    // SAFETY: inotify_init1 takes flags only and returns a fresh fd.
    let fd = cvt(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) })?;
    // SAFETY: fd is fresh and owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let p = cpath(dir)?;
    // SAFETY: p is a valid NUL-terminated path.
    cvt(unsafe { libc::inotify_add_watch(fd, p.as_ptr(), libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO) })?;
    Ok(owned)
}

/// A blocking inotify instance with no watches yet.
pub fn inotify_new() -> io::Result<OwnedFd> {
    // SAFETY: inotify_init1 takes flags only and returns a fresh fd.
    let fd = cvt(unsafe { libc::inotify_init1(libc::IN_CLOEXEC) })?;
    // SAFETY: fd is fresh and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Watches the directory `dir` (an fd, typically O_PATH, so the watch lands
/// on exactly that directory however its path changes) for `mask`; returns
/// the watch descriptor.
pub fn inotify_watch_fd(inotify: RawFd, dir: RawFd, mask: u32) -> io::Result<i32> {
    let p = cpath(Path::new(&format!("/proc/self/fd/{dir}")))?;
    // SAFETY: p is a valid NUL-terminated path; the magic link resolves to
    // the open directory `dir`.
    cvt(unsafe { libc::inotify_add_watch(inotify, p.as_ptr(), mask | libc::IN_ONLYDIR) })
}

pub fn inotify_unwatch(inotify: RawFd, wd: i32) {
    // SAFETY: removing a watch takes two integers; a stale wd yields EINVAL.
    unsafe { libc::inotify_rm_watch(inotify, wd) };
}

/// Raises the soft limit of open files to the hard limit.
pub fn raise_nofile() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid rlimit to fill and then to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Opens a file for reading without following a symlink at its last
/// component and without blocking on FIFOs.
pub fn open_nofollow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

pub fn setsid() -> io::Result<()> {
    // SAFETY: setsid has no memory-safety preconditions.
    cvt(unsafe { libc::setsid() }).map(|_| ())
}

pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes flags only.
    cvt(unsafe { libc::unshare(flags) }).map(|_| ())
}

pub fn setns(fd: RawFd, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: setns takes an fd and flags; an invalid fd yields EBADF.
    cvt(unsafe { libc::setns(fd, nstype) }).map(|_| ())
}

/// Become uid/gid 0 inside a freshly mapped user namespace.
pub fn become_ns_root() -> io::Result<()> {
    // SAFETY: plain id-setting syscalls.
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

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

pub fn mount(source: &str, target: &Path, fstype: &str, flags: libc::c_ulong, data: Option<&str>) -> io::Result<()> {
    let s = CString::new(source)?;
    let t = cpath(target)?;
    let f = CString::new(fstype)?;
    let d = data.map(CString::new).transpose()?;
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    cvt(unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            f.as_ptr(),
            flags,
            d.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr() as *const libc::c_void),
        )
    })
    .map(|_| ())
}

/// Non-blocking `flock` with `op` (`LOCK_EX` or `LOCK_SH`). `Ok(false)`
/// when a conflicting lock is held.
fn try_flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    // SAFETY: flock on a valid fd owned by `file`.
    let r = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Non-blocking exclusive `flock`. `Ok(false)` when someone else holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    try_flock(file, libc::LOCK_EX)
}

/// A pipe whose both ends are close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two fresh fds that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd with integer arguments.
    unsafe {
        let fl = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        let fl = if on {
            fl | libc::O_NONBLOCK
        } else {
            fl & !libc::O_NONBLOCK
        };
        cvt(libc::fcntl(fd, libc::F_SETFL, fl))?;
    }
    Ok(())
}

pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd with integer arguments.
    unsafe {
        let fl = cvt(libc::fcntl(fd, libc::F_GETFD))?;
        let fl = if on {
            fl | libc::FD_CLOEXEC
        } else {
            fl & !libc::FD_CLOEXEC
        };
        cvt(libc::fcntl(fd, libc::F_SETFD, fl))?;
    }
    Ok(())
}

/// Duplicates `fd` onto `target` (clearing close-on-exec on the copy).
pub fn dup2(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 with integer fds.
    cvt(unsafe { libc::dup2(fd, target) }).map(|_| ())
}

pub fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

pub fn write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Writes all of `buf` to a blocking fd, retrying on EINTR.
pub fn write_all(fd: RawFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match write(fd, buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                poll(&mut [PollFd::new(fd, libc::POLLOUT)], 1000)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct PollFd(libc::pollfd);

impl PollFd {
    pub fn new(fd: RawFd, events: libc::c_short) -> PollFd {
        PollFd(libc::pollfd { fd, events, revents: 0 })
    }
    pub fn readable(&self) -> bool {
        self.0.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }
    pub fn writable(&self) -> bool {
        self.0.revents & (libc::POLLOUT | libc::POLLERR) != 0
    }
    pub fn hangup(&self) -> bool {
        self.0.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
    }
}

/// `poll(2)`; EINTR is reported as zero ready fds.
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: PollFd is repr(transparent) over pollfd; the slice is valid.
    let r = unsafe {
        libc::poll(
            fds.as_mut_ptr() as *mut libc::pollfd,
            fds.len() as libc::nfds_t,
            timeout_ms,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(r as usize)
}

/// Reaps `pid` without blocking: `Some(status)` once it has exited.
pub fn try_wait(pid: i32) -> io::Result<Option<libc::c_int>> {
    let mut status = 0;
    // SAFETY: status is a valid out pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    match r {
        0 => Ok(None),
        r if r < 0 => Err(io::Error::last_os_error()),
        _ => Ok(Some(status)),
    }
}

/// Maps a wait status to a shell-style exit code (128+signal when killed).
pub fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        125
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
    let (r, w) = pipe()?;
    set_nonblocking(r.as_raw_fd(), true)?;
    set_nonblocking(w.as_raw_fd(), true)?;
    let wfd = std::os::fd::IntoRawFd::into_raw_fd(w);
    SIGNAL_PIPE.store(wfd, Ordering::Relaxed);
    for &sig in signals {
        // SAFETY: installing a handler that only calls async-signal-safe write.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            cvt(libc::sigaction(sig, &sa, std::ptr::null_mut()))?;
        }
    }
    Ok(r)
}

/// Reads pending signal numbers from the self-pipe.
pub fn drain_signals(fd: RawFd) -> Vec<i32> {
    let mut buf = [0u8; 64];
    let mut out = Vec::new();
    while let Ok(n) = read(fd, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend(buf[..n].iter().map(|&b| b as i32));
    }
    out
}

pub fn ignore_signal(sig: libc::c_int) {
    // SAFETY: SIG_IGN is a valid disposition.
    unsafe {
        libc::signal(sig, libc::SIG_IGN);
    }
}

/// Restores default dispositions and an empty mask; used in children
/// between fork and exec.
pub fn reset_signals() {
    // SAFETY: only async-signal-safe calls with valid arguments.
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

// ---- terminals ----------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WinSize {
    pub rows: u16,
    pub cols: u16,
}

pub fn get_winsize(fd: RawFd) -> Option<WinSize> {
    // SAFETY: ws is a valid out pointer for TIOCGWINSZ.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) < 0 {
            return None;
        }
        Some(WinSize {
            rows: ws.ws_row,
            cols: ws.ws_col,
        })
    }
}

pub fn set_winsize(fd: RawFd, size: WinSize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: ws is a valid winsize for TIOCSWINSZ.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &ws) }).map(|_| ())
}

/// chmod without following a symlink in the last component (it fails on a
/// symlink instead).
pub fn chmod_nofollow(path: &Path, mode: u32) -> io::Result<()> {
    let p = cpath(path)?;
    // SAFETY: p is a valid NUL-terminated path.
    cvt(unsafe {
        libc::fchmodat(
            libc::AT_FDCWD,
            p.as_ptr(),
            mode as libc::mode_t,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(|_| ())
}

/// Discards input the terminal has received but nobody has read yet
/// (typeahead), so it cannot answer a question asked after it was typed.
pub fn flush_input(fd: RawFd) -> io::Result<()> {
    // SAFETY: tcflush takes an fd and a constant.
    cvt(unsafe { libc::tcflush(fd, libc::TCIFLUSH) }).map(|_| ())
}

pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty takes an fd.
    unsafe { libc::isatty(fd) == 1 }
}

/// Opens a PTY pair: (master, slave), both close-on-exec.
pub fn openpty(size: Option<WinSize>) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut master = 0;
    let mut slave = 0;
    // SAFETY: out pointers are valid; name, termp and winp are null.
    cvt(unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    // SAFETY: openpty returned two fresh fds.
    let (m, s) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    set_cloexec(m.as_raw_fd(), true)?;
    set_cloexec(s.as_raw_fd(), true)?;
    if let Some(size) = size {
        set_winsize(m.as_raw_fd(), size)?;
    }
    Ok((m, s))
}

/// Makes `fd` (a tty) the controlling terminal of the calling session leader.
pub fn set_controlling_tty(fd: RawFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument.
    cvt(unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) }).map(|_| ())
}

/// A saved terminal mode; `restore` puts it back.
#[derive(Clone, Copy)]
pub struct TermMode {
    fd: RawFd,
    saved: libc::termios,
}

impl TermMode {
    /// Saves the current mode of `fd` and switches it to raw mode.
    pub fn make_raw(fd: RawFd) -> io::Result<TermMode> {
        // SAFETY: termios out pointers are valid.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            cvt(libc::tcgetattr(fd, &mut saved))?;
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            cvt(libc::tcsetattr(fd, libc::TCSADRAIN, &raw))?;
            Ok(TermMode { fd, saved })
        }
    }

    pub fn restore(&self) {
        // SAFETY: restoring a termios we read earlier.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSADRAIN, &self.saved);
        }
    }
}

/// Closes every fd >= `from` except those in `keep` (children before exec).
pub fn close_fds_from(from: RawFd, keep: &[RawFd]) {
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

/// In a child before exec: places each `(fd, target)` at its target number
/// (close-on-exec cleared), safe against sources that sit on a target.
pub fn install_fds(pairs: &[(RawFd, RawFd)]) -> io::Result<()> {
    let mut high = Vec::with_capacity(pairs.len());
    for &(fd, _) in pairs {
        // SAFETY: F_DUPFD_CLOEXEC with integer arguments.
        high.push(cvt(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100) })?);
    }
    for (&h, &(_, target)) in high.iter().zip(pairs) {
        dup2(h, target)?;
    }
    Ok(())
}

pub fn chdir(path: &Path) -> io::Result<()> {
    let p = cpath(path)?;
    // SAFETY: p is a valid NUL-terminated path.
    cvt(unsafe { libc::chdir(p.as_ptr()) }).map(|_| ())
}

/// Writes a pid into a file opened by the caller for newuidmap-style tools.
pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() }
}

pub fn getppid() -> i32 {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() }
}

/// `fork()`; only for the double-fork detach of the coordinator, where the
/// child immediately execs.
///
/// # Safety
/// The caller must be single-threaded and the child must only exec or exit.
pub unsafe fn fork() -> io::Result<i32> {
    // SAFETY: the caller upholds this function's contract (single-threaded,
    // the child only execs or exits).
    cvt(unsafe { libc::fork() })
}

pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is async-signal-safe.
    unsafe { libc::_exit(code) }
}

pub fn umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Peer credentials of a connected Unix socket.
pub fn peer_uid(fd: RawFd) -> io::Result<(i32, u32)> {
    // SAFETY: cred and len are valid out pointers of the right size.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        cvt(libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut _ as *mut libc::c_void,
            &mut len,
        ))?;
        Ok((cred.pid, cred.uid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_skips_comm_with_spaces_and_parens() {
        let stat = "123 (a b) c) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_start_time(stat), Some(98765));
    }

    #[test]
    fn own_start_time_is_readable_and_stable() {
        let a = proc_start_time(getpid()).unwrap();
        assert!(same_process(getpid(), a));
        assert!(!same_process(getpid(), a + 1));
    }

    #[test]
    fn exit_codes_follow_shell_convention() {
        assert_eq!(exit_code(7 << 8), 7);
        assert_eq!(exit_code(libc::SIGKILL), 128 + 9);
    }
}

// ---- network namespaces (the Runtime Supervisor's install path) ----------------

/// A new network namespace, owned by the caller's user namespace. A
/// short-lived thread unshares it (a netns is per thread), and the
/// returned fd keeps it alive: no holder process.
pub fn new_netns() -> io::Result<OwnedFd> {
    std::thread::spawn(|| -> io::Result<OwnedFd> {
        unshare(libc::CLONE_NEWNET)?;
        Ok(File::open("/proc/thread-self/ns/net")?.into())
    })
    .join()
    .map_err(|_| io::Error::other("netns thread panicked"))?
}

/// Runs `f` on a short-lived thread that has joined the network namespace
/// `ns` (so `/proc/sys/net` and new sockets are that namespace's).
pub fn in_netns<T: Send + 'static>(ns: RawFd, f: impl FnOnce() -> io::Result<T> + Send + 'static) -> io::Result<T> {
    std::thread::spawn(move || -> io::Result<T> {
        setns(ns, libc::CLONE_NEWNET)?;
        f()
    })
    .join()
    .map_err(|_| io::Error::other("netns thread panicked"))?
}

/// Makes `cmd`'s child join the network namespace `ns` before exec, with
/// PDEATHSIG armed and signal dispositions reset.
pub fn command_in_netns(cmd: &mut std::process::Command, ns: RawFd) {
    // SAFETY: only async-signal-safe syscalls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            reset_signals();
            set_parent_death_signal(libc::SIGKILL)?;
            setns(ns, libc::CLONE_NEWNET)
        });
    }
}

/// Makes `cmd`'s child start with default signal dispositions and die with
/// SIGKILL when its parent dies (for helpers such as fuse-overlayfs).
pub fn kill_with_parent(cmd: &mut std::process::Command) {
    // SAFETY: the hook only makes async-signal-safe syscalls.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            reset_signals();
            set_parent_death_signal(libc::SIGKILL)
        });
    }
}

/// Makes `cmd`'s child a PDEATHSIG-coupled helper that finds `fds` at the
/// given numbers.
pub fn command_coupled(cmd: &mut std::process::Command, fds: Vec<(RawFd, RawFd)>) {
    // SAFETY: only async-signal-safe syscalls between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            reset_signals();
            set_parent_death_signal(libc::SIGKILL)?;
            install_fds(&fds)
        });
    }
}

/// The inode number of an open namespace fd: the namespace's identity.
pub fn fd_inode(fd: RawFd) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: borrowing fd for fstat only; ManuallyDrop keeps it open.
    let f = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    Ok(f.metadata()?.ino())
}

/// Shared `flock`, non-blocking. `Ok(false)` when someone holds it
/// exclusively.
pub fn try_lock_shared(file: &File) -> io::Result<bool> {
    try_flock(file, libc::LOCK_SH)
}
