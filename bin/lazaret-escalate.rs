//! `lazaret-escalate`: asks the developer to run a command on the host.
//!
//!   lazaret-escalate [--justification TEXT] [--timeout SECS] [--print-request] -- ARGV...
//!   lazaret-escalate --ssh-agent      (started by `init exec --ssh-agent`: bin/agent.rs)
//!   lazaret-escalate --print-agent-request HEX   (the signed agent record, printed: bin/agent.rs)
//!
//! Runs inside the sandbox (a static binary mounted read-only at
//! `/usr/local/bin/lazaret-escalate`). It signs a request with the session's
//! credential, drops it into the Escalation Mailbox by atomic rename, waits
//! for the correlated result, prints the host command's output and exits
//! with its status — or 126 denied, 124 timed out, 130 cancelled, 125
//! failed, 123 expired (nobody decided in time), 2 usage.
//!
//! Every step costs more inside gVisor than on a host: a system call, a
//! trapped `cpuid` or a sleep's wake-up is tens of microseconds there, and a
//! 500 µs sleep lasts 1–3 ms. So the client skips the Rust runtime's start
//! (`no_main`: its stack-guard probe alone reads `/proc/self/maps`), links
//! no OpenSSL (it signs with [`session_key`]), polls
//! for the result without sleeping while a quick answer is likely, and with
//! `LAZARET_ESCALATE_TRACE=1` prints the microseconds of each step to
//! stderr (`scripts/bench-escalate.sh` reports their medians).

#![no_main]

mod agent;

use lazaret::{escalation, mailbox, session_key};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use escalation::*;

fn die(code: i32, msg: &str) -> ! {
    eprintln!("lazaret-escalate: {msg}");
    std::process::exit(code);
}

/// Fills `buf` from the kernel's random source (getrandom(2), blocking
/// only until the kernel pool is initialised).
fn random_bytes(buf: &mut [u8]) -> bool {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of
        // `buf`, which is valid for writes for the whole call.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n > 0 {
            done += n as usize;
        } else if n == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
    true
}

/// The C entry point, in place of the Rust runtime's `main`, which would
/// first make about fifteen system calls this client does not need (its
/// main-thread stack guard, the stack-overflow handler's alternate stack,
/// a probe of fds 0–2). What it keeps: SIGPIPE ignored, so a closed stdout
/// is a write error and the exit status is still the host command's.
/// (`std::env::args` reads argv on its own on Linux.)
#[no_mangle]
pub extern "C" fn main(_argc: std::ffi::c_int, _argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory
    // preconditions and installs no handler code.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    run();
    0
}

/// `LAZARET_ESCALATE_TRACE=1`: prints `trace STEP MICROS` (since the start)
/// to stderr after each step. Reading the clock is a vDSO call, not a trap.
struct Trace(Option<std::time::Instant>);

impl Trace {
    fn step(&self, what: &str) {
        if let Some(t0) = self.0 {
            eprintln!("lazaret-escalate: trace {what} {}", t0.elapsed().as_micros());
        }
    }
}

/// How long to poll for the result without sleeping: an auto-approved
/// command's answer usually comes within a few milliseconds, and inside
/// gVisor even a 50 µs sleep can last a millisecond. Each attempt is one
/// failed `open` (about 15 µs there), so the spin costs at most this much
/// CPU per request.
const SPIN: Duration = Duration::from_millis(10);

fn run() {
    let trace = Trace(std::env::var_os("LAZARET_ESCALATE_TRACE").map(|_| std::time::Instant::now()));
    if std::env::args().nth(1).as_deref() == Some("--ssh-agent") {
        std::process::exit(agent::serve(random_bytes));
    }
    if std::env::args().nth(1).as_deref() == Some("--print-agent-request") {
        let hex = std::env::args().nth(2).unwrap_or_default();
        std::process::exit(agent::print_record(&hex, random_bytes));
    }
    let mut args = std::env::args().skip(1);
    let mut justification = String::new();
    let mut timeout = DEFAULT_TIMEOUT_SECS;
    let mut argv = Vec::new();
    let mut print_only = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            // Prints the signed request record (one binary frame) instead
            // of sending it (debugging and adversarial tests of the mailbox).
            "--print-request" => print_only = true,
            "--justification" => justification = args.next().unwrap_or_else(|| die(2, "--justification needs TEXT")),
            "--timeout" => {
                timeout = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|v| (1..=MAX_TIMEOUT_SECS).contains(v))
                    .unwrap_or_else(|| {
                        die(
                            2,
                            &format!("--timeout needs a number of seconds in 1..={MAX_TIMEOUT_SECS}"),
                        )
                    })
            }
            "--" => {
                argv.extend(args.by_ref());
            }
            "-h" | "--help" => {
                println!("usage: lazaret-escalate [--justification TEXT] [--timeout SECS] -- COMMAND ARGS...");
                return;
            }
            other if other.starts_with('-') => die(2, &format!("unknown option {other:?}")),
            _ => {
                argv.push(a);
                argv.extend(args.by_ref());
            }
        }
    }
    if argv.is_empty() {
        die(
            2,
            "no command given: lazaret-escalate [--justification TEXT] [--timeout SECS] -- COMMAND ARGS...",
        );
    }
    let cred = std::env::var_os(CREDENTIAL_FILE_ENV)
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_else(|| {
            die(
                EXIT_FAILED,
                "no session credential: escalation is not enabled for this session",
            )
        });
    let cred = cred.trim_end();
    let key = session_key::SessionKey::parse(cred).unwrap_or_else(|e| die(EXIT_FAILED, &e.to_string()));
    trace.step("credential");
    // The workspace is inside at its own path (`LAZARET_WORKSPACE`, where
    // `/workspace` leads); the host command runs at the same place below
    // the host workspace.
    let cwd = std::env::current_dir().unwrap_or_default();
    let linked = std::fs::read_link("/workspace").ok();
    let rel = [
        std::env::var_os("LAZARET_WORKSPACE").map(PathBuf::from),
        linked,
        Some("/workspace".into()),
    ]
    .into_iter()
    .flatten()
    .filter(|w| w.is_absolute())
    .find_map(|w| cwd.strip_prefix(&w).ok().map(|r| r.to_string_lossy().to_string()))
    .unwrap_or_default();
    let mut idb = [0u8; 16];
    if !random_bytes(&mut idb) {
        die(EXIT_FAILED, "no randomness");
    }
    let id: String = idb.iter().map(|b| format!("{b:02x}")).collect();
    let req = Request {
        id: id.clone(),
        domain: key.domain.clone(),
        generation: key.generation,
        session: key.session.clone(),
        client: key.client.clone(),
        cwd: rel,
        timeout_secs: timeout,
        justification,
        argv,
        cert: key.cert.clone(),
    };
    let sig = key.sign(&mailbox::signed_part(&req));
    let record = mailbox::encode_request(&req, &sig);
    trace.step("signed");
    if print_only {
        let mut out = std::io::stdout();
        if let Err(e) = out.write_all(&record).and_then(|()| out.flush()) {
            die(EXIT_FAILED, &format!("cannot print the request: {e}"));
        }
        return;
    }
    let tmp = Path::new(GUEST_REQUESTS).join(format!(".tmp-{id}"));
    let fin = Path::new(GUEST_REQUESTS).join(format!("{id}.req"));
    if let Err(e) = std::fs::write(&tmp, &record).and_then(|()| std::fs::rename(&tmp, &fin)) {
        die(
            EXIT_FAILED,
            &format!("cannot write to the mailbox {GUEST_REQUESTS}: {e}"),
        );
    }
    trace.step("written");
    let res = Path::new(GUEST_RESULTS).join(format!("{id}.res"));
    // Poll without sleeping while an auto-approved answer is likely, then
    // briskly, then relax: a human decision takes seconds.
    let started = std::time::Instant::now();
    // The coordinator ends every request (a decision, expiry after the
    // prompt timeout, the command's own timeout); this deadline only
    // covers a coordinator that is gone.
    let prompt_timeout = std::env::var(PROMPT_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_PROMPT_TIMEOUT_SECS)
        .min(MAX_PROMPT_TIMEOUT_SECS);
    let deadline = Duration::from_secs(prompt_timeout + timeout + 30);
    let data = loop {
        if started.elapsed() > deadline {
            let _ = std::fs::remove_file(&fin);
            die(
                EXIT_EXPIRED,
                &format!("expired: no answer from the host within {} s", deadline.as_secs()),
            );
        }
        match std::fs::read(&res) {
            Ok(d) if !d.is_empty() => break d,
            _ => {
                let waited = started.elapsed();
                if waited >= SPIN {
                    std::thread::sleep(if waited < Duration::from_secs(2) {
                        Duration::from_micros(500)
                    } else {
                        Duration::from_millis(20)
                    });
                }
            }
        }
    };
    trace.step("answered");
    let out = mailbox::decode_result(&data).unwrap_or_else(|e| die(EXIT_FAILED, &format!("unreadable result: {e}")));
    if out.id != id {
        die(EXIT_FAILED, "result does not belong to this request");
    }
    let _ = std::io::stdout().write_all(&out.stdout);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(&out.stderr);
    if out.stdout_truncated {
        eprintln!("lazaret-escalate: stdout truncated at {OUTPUT_MAX_BYTES} bytes");
    }
    if out.stderr_truncated {
        eprintln!("lazaret-escalate: stderr truncated at {OUTPUT_MAX_BYTES} bytes");
    }
    if !matches!(out.status, Status::Completed(_)) {
        eprintln!("lazaret-escalate: {}: {}", out.status.name(), out.reason);
    }
    trace.step("printed");
    std::process::exit(out.status.exit_code());
}
