//! `lazaret-init`: the root process of every Lazaret sandbox, bind-mounted
//! read-only at `/.lazaret/init`. A static binary with no dependencies on
//! the image.
//!
//! With no arguments it is PID 1. At boot it does what its stdin asks
//! (`BootCmd` frames of `lazaret::guest`; nothing when empty): the
//! pre-publication network probe (bin/probe.rs), the profile's `user`,
//! its passwd entry and home, made when missing (bin/usersetup.rs), and
//! `/workspace` as a symlink to the workspace's own path inside. It
//! sends each outcome and then `InitMsg::Ready` on stdout, the Runtime
//! Supervisor's readiness signal, closes both, and reaps every child until
//! it is told to stop. The coordinator also runs it through `runsc exec`
//! as a tiny in-sandbox tool:
//!   `init signal-session SID SIG`  signal every process of guest session SID
//!   `init signal-group PGID SIG`   signal one guest process group
//!   `init touch -- PATH...`        a host-side edit of each workspace file:
//!                                  sets its mtime to itself through gVisor,
//!                                  so watchers inside get an event
//!                                  (`IN_ATTRIB`); content unchanged
//!   `init exec -- CMD ARGS...`     every session's command: execs CMD (found
//!                                  on the session's PATH) in place; a missing
//!                                  command exits 127, one that cannot be
//!                                  executed 126, as a shell reports them
//!   `init exec --tty -- CMD ...`   a terminal session's command: the same,
//!                                  on a PTY of the sandbox's own that this
//!                                  process relays to the session's terminal
//!                                  (bin/ptyrelay.rs), so `tty` has a name
//!   `init exec [--tty] --ssh-agent -- CMD ...`  the same, and first the
//!                                  session's SSH agent socket at
//!                                  `SSH_AUTH_SOCK`, served by
//!                                  `lazaret-escalate --ssh-agent` (issue 51)

use std::io::Write;

use lazaret::guest::{InitMsg, Message};

mod probe;
mod ptyrelay;
mod usersetup;
// The crate's syscall layer, shared by path: every `unsafe` and `libc::`
// of this binary lives there too.
#[path = "../src/sys/mod.rs"]
#[allow(dead_code, unused_imports)] // most of it is for the `lazaret` binary
mod sys;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => run_init(),
        ["signal-session", sid, sig] => signal_session(sid, sig),
        ["signal-group", pgid, sig] => signal_group(pgid, sig),
        ["exec", "--", cmd, ..] => exec_command(cmd, &args[2..]),
        ["exec", "--ssh-agent", "--", cmd, ..] => {
            start_agent();
            exec_command(cmd, &args[3..])
        }
        ["exec", "--tty", "--", cmd, ..] => {
            ptyrelay::run(&args[3..], false).unwrap_or_else(|| exec_command(cmd, &args[3..]))
        }
        ["exec", "--tty", "--ssh-agent", "--", cmd, ..] => ptyrelay::run(&args[4..], true).unwrap_or_else(|| {
            start_agent();
            exec_command(cmd, &args[4..])
        }),
        ["touch", "--", ..] => touch(&args[2..]),
        _ => {
            eprintln!("lazaret-init: internal tool; usage: init [signal-session SID SIG | signal-group PGID SIG]");
            2
        }
    };
    std::process::exit(code);
}

/// Sets each regular file's mtime to its own (no symlink followed; a path
/// gone or of another kind is skipped): gVisor then tells its watchers.
fn touch(paths: &[String]) -> i32 {
    use rustix::fs::{AtFlags, Timespec, Timestamps, CWD};
    for p in paths {
        let Ok(st) = rustix::fs::statat(CWD, p.as_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if st.st_mode & 0o170000 != 0o100000 {
            continue;
        }
        let times = Timestamps {
            last_access: Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            last_modification: Timespec {
                tv_sec: st.st_mtime as _,
                tv_nsec: st.st_mtime_nsec as _,
            },
        };
        let _ = rustix::fs::utimensat(CWD, p.as_str(), &times, AtFlags::SYMLINK_NOFOLLOW);
    }
    0
}

/// The session's SSH agent socket (issue 51): binds `SSH_AUTH_SOCK` in a
/// new directory of mode 0700 (this process runs as the session's uid),
/// then starts `lazaret-escalate --ssh-agent` with the listening socket as
/// its stdin, dying with this process's successor (the command). Bound
/// before the command runs, so the command never finds it missing. A
/// failure is said on stderr and the command runs without an agent.
fn start_agent() {
    use std::os::unix::fs::DirBuilderExt;
    let Some(sock) = std::env::var_os(lazaret::escalation::AGENT_SOCK_ENV) else {
        return;
    };
    let sock = std::path::PathBuf::from(sock);
    let bound = sock
        .parent()
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        .and_then(|d| std::fs::DirBuilder::new().mode(0o700).create(d))
        .and_then(|()| std::os::unix::net::UnixListener::bind(&sock));
    let listener = match bound {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lazaret: the session's SSH agent socket {}: {e}", sock.display());
            return;
        }
    };
    let mut cmd = std::process::Command::new(lazaret::escalation::GUEST_ESCALATE);
    cmd.arg("--ssh-agent")
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(listener)))
        .stdout(std::process::Stdio::null());
    sys::ChildSetup::new()
        .reset_signals()
        .parent_death_signal(sys::SIGTERM)
        .apply(&mut cmd);
    if let Err(e) = cmd.spawn() {
        eprintln!("lazaret: cannot start the session's SSH agent: {e}");
    }
}

/// Replaces this process with `argv` (argv[0] == `cmd`, looked up on
/// `PATH` unless it has a `/`). Returns only on failure: 127 when there is
/// no such command, 126 when it exists but cannot be executed.
fn exec_command(cmd: &str, argv: &[String]) -> i32 {
    use std::ffi::CString;
    let shown: String = cmd.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    let Ok(c_argv) = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
    else {
        eprintln!("lazaret: {shown}: an argument contains a NUL byte");
        return 126;
    };
    // Rust ignores SIGPIPE in its own processes; the command gets the default.
    let errno = sys::guest::exec_path(&c_argv).raw_os_error().unwrap_or(0);
    match errno {
        sys::ENOENT | sys::ENOTDIR if !cmd.contains('/') => {
            eprintln!("lazaret: {shown}: command not found");
            127
        }
        sys::ENOENT | sys::ENOTDIR => {
            eprintln!("lazaret: {shown}: no such file or directory");
            127
        }
        e => {
            let text = std::io::Error::from_raw_os_error(e);
            eprintln!("lazaret: {shown}: cannot execute: {text}");
            126
        }
    }
}

fn run_init() -> i32 {
    // Set before any child exists: SIGCHLD and SIGTERM stay pending until
    // they interrupt the wait below.
    sys::guest::block_for_suspend(&[sys::SIGCHLD, sys::SIGTERM], &[sys::SIGINT, sys::SIGHUP]);
    // Before Ready, so before any session exists: the Domain is published
    // only when the host judged these outcomes good.
    boot();
    report(&InitMsg::Ready);
    // Our stdout is closed: nothing else uses it afterwards.
    drop(sys::take_inherited(1));
    loop {
        sys::guest::reap_exited_children();
        if sys::guest::signal_pending(sys::SIGTERM) {
            return 0;
        }
        sys::guest::suspend_until_signal();
    }
}

/// Does what the boot request on stdin asks, in its order, then closes
/// stdin. A request that cannot be read is one failed check (the host
/// then refuses the probe, and a user it asked for was not reported).
fn boot() {
    use lazaret::guest::BootCmd;
    match lazaret::guest::read_boot_request(&mut std::io::stdin().lock()) {
        Ok(cmds) => {
            for c in cmds {
                match c {
                    BootCmd::Probe { sandbox_src, checks } => probe::run(sandbox_src, checks),
                    BootCmd::User { name, uid } => usersetup::at_boot(&name, uid),
                    BootCmd::Workspace { path } => link_workspace(&path),
                }
            }
        }
        Err(e) => report(&InitMsg::Check {
            name: "boot request".into(),
            ok: false,
            detail: e.to_string(),
        }),
    }
    drop(sys::take_inherited(0));
}

/// Makes `/workspace` a symlink to `path`, where the workspace is bound:
/// the image's empty directory (or an old symlink) there is replaced. The
/// coordinator asks only when the image has nothing else at `/workspace`;
/// a failure is said on stderr (the coordinator's log), and sessions still
/// start in the workspace at its own path.
fn link_workspace(path: &str) {
    let link = std::path::Path::new(lazaret::guest::GUEST_WORKSPACE_LINK);
    let cleared = match std::fs::symlink_metadata(link) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir(link),
        Ok(_) => std::fs::remove_file(link),
    };
    if let Err(e) = cleared.and_then(|()| std::os::unix::fs::symlink(path, link)) {
        eprintln!("lazaret-init: cannot make /workspace a symlink to {path:?}: {e}");
    }
}

/// One frame on stdout, init's report to the Runtime Supervisor.
fn report(msg: &InitMsg) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&msg.encode()).and_then(|_| out.flush());
}

fn parse(s: &str) -> Option<i32> {
    s.parse::<i32>().ok().filter(|v| *v > 0)
}

/// Signals every process of guest session SID and, when SID's leader is a
/// terminal session's PTY relay (bin/ptyrelay.rs) and the signal is not
/// SIGWINCH, of the session the relay made for its command (led by its
/// child). SIGWINCH goes to the relay alone, which sets the new size on its
/// terminal before it signals the command. A session a command started
/// with `setsid` is its own, as before.
fn signal_session(sid: &str, sig: &str) -> i32 {
    let (Some(sid), Some(sig)) = (parse(sid), parse(sig)) else {
        return 2;
    };
    let me = sys::getpid();
    let Ok(rd) = std::fs::read_dir("/proc") else { return 1 };
    // (pid, its session, its parent)
    let procs: Vec<(i32, i32, i32)> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(parse))
        .filter_map(|pid| Some((pid, sys::guest::getsid(pid)?, parent(pid)?)))
        .collect();
    let mut sessions = vec![sid];
    if sig != sys::SIGWINCH && is_pty_relay(sid) {
        sessions.extend(
            procs
                .iter()
                .filter(|(pid, s, ppid)| pid == s && *s != sid && *ppid == sid)
                .map(|p| p.1),
        );
    }
    for (pid, s, _) in procs {
        if pid != 1 && pid != me && sessions.contains(&s) {
            let _ = sys::kill(pid, sig);
        }
    }
    0
}

/// Whether `pid` runs `init exec --tty` (its command line as set at exec;
/// init is run by the same path as this process).
fn is_pty_relay(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let me = std::env::args().next().unwrap_or_default();
    let mut args = cmdline.split(|&b| b == 0);
    args.next() == Some(me.as_bytes()) && args.next() == Some(b"exec") && args.next() == Some(b"--tty")
}

/// The parent of `pid` (field 4 of `/proc/PID/stat`).
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()
}

fn signal_group(pgid: &str, sig: &str) -> i32 {
    let (Some(pgid), Some(sig)) = (parse(pgid), parse(sig)) else {
        return 2;
    };
    if pgid == 1 {
        return 2;
    }
    if sys::killpg(pgid, sig).is_ok() {
        0
    } else {
        1
    }
}
