//! `lazaret-init`: the root process of every Lazaret sandbox, bind-mounted
//! read-only at `/.lazaret/init`. A static binary with no dependencies on
//! the image.
//!
//! With no arguments it is PID 1: it prints `ready` on stdout (the Runtime
//! Supervisor's readiness signal), then reaps every child until it is told
//! to stop. The coordinator also runs it through `runsc exec` as a tiny
//! in-sandbox tool:
//!   `init signal-session SID SIG`  signal every process of guest session SID
//!   `init signal-group PGID SIG`   signal one guest process group
//!   `init probe KEY=VALUE...`      the pre-publication network probe (FR-20),
//!                                  from the sandbox's own network view
//!   `init user-setup NAME UID`     the profile's `user`: its passwd entry and
//!                                  home, made when missing (bin/usersetup.rs)
//!   `init exec -- CMD ARGS...`     every session's command: execs CMD (found
//!                                  on the session's PATH) in place; a missing
//!                                  command exits 127, one that cannot be
//!                                  executed 126, as a shell reports them

use std::io::Write;

mod probe;
mod usersetup;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        [] => run_init(),
        ["signal-session", sid, sig] => signal_session(sid, sig),
        ["signal-group", pgid, sig] => signal_group(pgid, sig),
        ["probe", rest @ ..] => probe::run(rest),
        ["user-setup", name, uid] => usersetup::run(name, uid),
        ["exec", "--", cmd, ..] => exec_command(cmd, &args[2..]),
        _ => {
            eprintln!("lazaret-init: internal tool; usage: init [signal-session SID SIG | signal-group PGID SIG]");
            2
        }
    };
    std::process::exit(code);
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
    let mut ptrs: Vec<*const libc::c_char> = c_argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // Rust ignores SIGPIPE in its own processes; the command gets the default.
    // SAFETY: resetting a signal disposition and execvp with NUL-terminated
    // strings and a NULL-terminated pointer array that outlive the call.
    let errno = unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::execvp(ptrs[0], ptrs.as_ptr());
        *libc::__errno_location()
    };
    match errno {
        libc::ENOENT | libc::ENOTDIR if !cmd.contains('/') => {
            eprintln!("lazaret: {shown}: command not found");
            127
        }
        libc::ENOENT | libc::ENOTDIR => {
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

extern "C" fn noop(_: libc::c_int) {}

fn run_init() -> i32 {
    // SAFETY: signal masks and handlers are set before any child exists;
    // the handler does nothing, it only interrupts sigsuspend.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGCHLD, noop as *const () as usize);
        libc::signal(libc::SIGTERM, noop as *const () as usize);
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
    let mut out = std::io::stdout();
    let _ = out.write_all(b"ready\n");
    let _ = out.flush();
    // SAFETY: closing our own stdout; nothing else uses it afterwards.
    unsafe {
        libc::close(1);
    }
    loop {
        // SAFETY: waitpid/sigpending/sigsuspend with valid pointers.
        unsafe {
            let mut status = 0;
            while libc::waitpid(-1, &mut status, libc::WNOHANG) > 0 {}
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut pending);
            if libc::sigismember(&pending, libc::SIGTERM) == 1 {
                return 0;
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigsuspend(&empty);
        }
    }
}

fn parse(s: &str) -> Option<i32> {
    s.parse::<i32>().ok().filter(|v| *v > 0)
}

fn signal_session(sid: &str, sig: &str) -> i32 {
    let (Some(sid), Some(sig)) = (parse(sid), parse(sig)) else {
        return 2;
    };
    // SAFETY: getpid cannot fail.
    let me = unsafe { libc::getpid() };
    let Ok(rd) = std::fs::read_dir("/proc") else { return 1 };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(parse) else {
            continue;
        };
        // SAFETY: getsid/kill take plain integers.
        unsafe {
            if pid != 1 && pid != me && libc::getsid(pid) == sid {
                libc::kill(pid, sig);
            }
        }
    }
    0
}

fn signal_group(pgid: &str, sig: &str) -> i32 {
    let (Some(pgid), Some(sig)) = (parse(pgid), parse(sig)) else {
        return 2;
    };
    if pgid == 1 {
        return 2;
    }
    // SAFETY: kill takes plain integers.
    unsafe {
        if libc::kill(-pgid, sig) == 0 {
            0
        } else {
            1
        }
    }
}
