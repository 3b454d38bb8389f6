//! `init exec --tty -- CMD ARGS...`: a terminal session's command on a
//! terminal of the sandbox's own, so that `tty` prints `/dev/pts/N` and
//! `GPG_TTY=$(tty)`, `ttyname()` and tools that reopen their terminal by
//! name work. The session's stdin/stdout are the host PTY that `runsc exec`
//! was given: gVisor shows it as `host:[N]`, which has no name
//! (PLATFORM.md §3).
//!
//! This process opens a PTY of the sandbox's devpts, starts
//! `init exec -- CMD ARGS...` on its slave in a new session (the slave its
//! controlling terminal), puts the host terminal in raw mode (the guest
//! terminal's line discipline does echo, editing and ^C), and relays bytes
//! both ways until the command exits; it then exits as the command did.
//! - SIGWINCH (the coordinator's resize): the host terminal's size is copied
//!   to the guest terminal, then its foreground group gets SIGWINCH.
//! - SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT, SIGUSR1, SIGUSR2 (what
//!   `runsc exec` forwards to the session's process) go to the command, as
//!   they did without the relay.
//! - SIGQUIT and SIGKILL come by `init signal-session`, which also reaches
//!   the session this relay made (see `signal_session`): ignored here.
//!
//! No PTY (devpts missing, out of PTYs): the command runs on the host
//! terminal as before, with no name.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use crate::sys;

/// At most this much typed input waits for the command to read it; the
/// relay stops reading the host terminal until it drains.
const MAX_PENDING: usize = 64 * 1024;

/// Runs `argv` on a guest PTY; `None` when no PTY can be had (the caller
/// then execs the command directly).
pub fn run(argv: &[String], ssh_agent: bool) -> Option<i32> {
    let (tin, tout) = (sys::STDIN, sys::STDOUT);
    if !sys::isatty(tin) {
        return None;
    }
    let (master, slave) = sys::openpty(sys::get_winsize(tin)).ok()?;
    let signals = sys::signal_pipe(&[
        sys::SIGCHLD,
        sys::SIGWINCH,
        sys::SIGINT,
        sys::SIGTERM,
        sys::SIGHUP,
        sys::SIGQUIT,
        sys::SIGTSTP,
        rustix::process::Signal::Cont as i32,
        rustix::process::Signal::Usr1 as i32,
        rustix::process::Signal::Usr2 as i32,
    ])
    .ok()?;
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg("exec");
    if ssh_agent {
        // The session's agent starts in the command's process (`exec_command`'s caller).
        cmd.arg("--ssh-agent");
    }
    cmd.arg("--").args(argv);
    let s = slave.as_raw_fd();
    sys::ChildSetup::new()
        .reset_signals()
        .setsid()
        .install_fds(&[(s, 0), (s, 1), (s, 2)])
        .controlling_tty(0)
        .apply(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lazaret: cannot start the command on a terminal: {e}");
            return Some(126);
        }
    };
    drop(slave);
    let pid = child.id() as i32;
    let mode = sys::TermMode::make_raw(tin).ok();
    let _ = sys::set_nonblocking(&master, true);
    let mut pending: Vec<u8> = Vec::new();
    let (mut input_open, mut output_open) = (true, true);
    let mut buf = vec![0u8; 16 * 1024];
    let status = loop {
        let mut fds = vec![sys::PollFd::new(&signals, sys::POLLIN)];
        let (mut i_in, mut i_m) = (None, None);
        if input_open && pending.len() < MAX_PENDING {
            i_in = Some(fds.len());
            fds.push(sys::PollFd::new(tin, sys::POLLIN));
        }
        if output_open {
            let ev = if pending.is_empty() {
                sys::POLLIN
            } else {
                sys::POLLIN | sys::POLLOUT
            };
            i_m = Some(fds.len());
            fds.push(sys::PollFd::new(&master, ev));
        }
        if sys::poll(&mut fds, -1).is_err() {
            // EINTR: a signal's byte is in the pipe.
            continue;
        }
        if i_in.is_some_and(|i| fds[i].ready()) {
            match sys::read(tin, &mut buf) {
                Ok(n) if n > 0 => pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => input_open = false,
            }
        }
        if let Some(i) = i_m.filter(|&i| fds[i].ready()) {
            if fds[i].readable() || fds[i].hangup() {
                output_open = copy_out(&master, tout, &mut buf);
            }
            if output_open && !pending.is_empty() {
                match sys::write(&master, &pending) {
                    Ok(n) => {
                        pending.drain(..n);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => pending.clear(),
                }
            }
        }
        if !fds[0].ready() {
            continue;
        }
        let mut exited = None;
        for sig in sys::drain_signals(&signals) {
            match sig {
                sys::SIGCHLD => exited = child.try_wait().ok().flatten().or(exited),
                sys::SIGWINCH => {
                    if let Some(size) = sys::get_winsize(tin) {
                        let _ = sys::set_winsize(&master, size);
                    }
                    let group = rustix::termios::tcgetpgrp(&master)
                        .map(|p| p.as_raw_nonzero().get())
                        .unwrap_or(pid);
                    let _ = sys::killpg(group, sys::SIGWINCH);
                }
                sys::SIGQUIT => {}
                other => {
                    let _ = sys::kill(pid, other);
                }
            }
        }
        if let Some(st) = exited {
            break st;
        }
    };
    // What the command wrote last, before it exited.
    if output_open {
        copy_out(&master, tout, &mut buf);
    }
    if let Some(m) = mode {
        m.restore();
    }
    Some(match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => {
            // Die of the same signal, as the command did.
            sys::default_signal(sig);
            let _ = sys::kill(sys::getpid(), sig);
            128 + sig
        }
        _ => 1,
    })
}

/// Copies what the guest terminal has to the host terminal; false once it
/// has no writer left (EIO) or the host terminal is gone.
fn copy_out(master: impl AsFd, out: BorrowedFd, buf: &mut [u8]) -> bool {
    loop {
        match sys::read(&master, buf) {
            Ok(0) => return false,
            Ok(n) => {
                if sys::write_all(out, &buf[..n]).is_err() {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}
