//! `lazaret-escalate`: asks the developer to run a command on the host.
//!
//!   lazaret-escalate [--justification TEXT] [--timeout SECS] [--print-request] -- ARGV...
//!
//! Runs inside the sandbox (a static binary mounted read-only at
//! `/usr/local/bin/lazaret-escalate`). It signs a request with the session's
//! credential, drops it into the Escalation Mailbox by atomic rename, waits
//! for the correlated result, prints the host command's output and exits
//! with its status — or 126 denied, 124 timed out, 130 cancelled, 125
//! failed, 2 usage.

#[path = "../src/escalation.rs"]
#[allow(dead_code)]
mod escalation;
#[path = "../src/trust.rs"]
#[allow(dead_code)]
mod trust;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use escalation::*;

fn die(code: i32, msg: &str) -> ! {
    eprintln!("lazaret-escalate: {msg}");
    std::process::exit(code);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut justification = String::new();
    let mut timeout = DEFAULT_TIMEOUT_SECS;
    let mut argv = Vec::new();
    let mut print_only = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            // Prints the signed request instead of sending it (debugging
            // and adversarial tests of the mailbox).
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
    let cred = std::env::var(CREDENTIAL_ENV).unwrap_or_else(|_| {
        die(
            EXIT_FAILED,
            "no session credential: escalation is not enabled for this session",
        )
    });
    let (key_b64, cert_b64) = cred
        .split_once('.')
        .unwrap_or_else(|| die(EXIT_FAILED, "malformed session credential"));
    let key = openssl::base64::decode_block(key_b64)
        .ok()
        .and_then(|d| openssl::pkey::PKey::private_key_from_pkcs8(&d).ok())
        .unwrap_or_else(|| die(EXIT_FAILED, "malformed session key"));
    let cert_der =
        openssl::base64::decode_block(cert_b64).unwrap_or_else(|_| die(EXIT_FAILED, "malformed certificate"));
    let cert = openssl::x509::X509::from_der(&cert_der).unwrap_or_else(|_| die(EXIT_FAILED, "malformed certificate"));
    let who = trust::identity_of(&cert).unwrap_or_else(|| die(EXIT_FAILED, "certificate carries no session identity"));
    let cwd = std::env::current_dir().unwrap_or_default();
    let rel = cwd
        .strip_prefix("/workspace")
        .map(|r| r.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut idb = [0u8; 16];
    openssl::rand::rand_bytes(&mut idb).unwrap_or_else(|_| die(EXIT_FAILED, "no randomness"));
    let id: String = idb.iter().map(|b| format!("{b:02x}")).collect();
    let req = Request {
        id: id.clone(),
        domain: who.domain,
        generation: who.generation,
        session: who.session.unwrap_or_default(),
        client: who.component,
        cwd: rel,
        timeout_secs: timeout,
        justification,
        argv,
        cert: cert_der,
    };
    let sig = trust::sign(&key, req.signed_part().as_bytes()).unwrap_or_else(|e| die(EXIT_FAILED, &e.to_string()));
    let record = req.encode(&sig);
    if print_only {
        print!("{record}");
        return;
    }
    let tmp = Path::new(GUEST_REQUESTS).join(format!(".tmp-{id}"));
    let fin = Path::new(GUEST_REQUESTS).join(format!("{id}.req"));
    if let Err(e) = std::fs::write(&tmp, record.as_bytes()).and_then(|()| std::fs::rename(&tmp, &fin)) {
        die(
            EXIT_FAILED,
            &format!("cannot write to the mailbox {GUEST_REQUESTS}: {e}"),
        );
    }
    let res = Path::new(GUEST_RESULTS).join(format!("{id}.res"));
    // Poll briskly while an auto-approved answer is likely, then relax:
    // a human decision takes seconds.
    let started = std::time::Instant::now();
    let data = loop {
        match std::fs::read(&res) {
            Ok(d) if !d.is_empty() => break d,
            _ => std::thread::sleep(if started.elapsed() < Duration::from_secs(2) {
                Duration::from_micros(500)
            } else {
                Duration::from_millis(20)
            }),
        }
    };
    let out = Outcome::parse(&data).unwrap_or_else(|e| die(EXIT_FAILED, &format!("unreadable result: {e}")));
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
    std::process::exit(out.status.exit_code());
}
