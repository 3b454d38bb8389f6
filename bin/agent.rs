//! `lazaret-escalate --ssh-agent`: the session's SSH agent socket inside
//! the sandbox (issue 51, docs/config.md "SSH agent").
//!
//! `init exec --ssh-agent` binds the socket named by `SSH_AUTH_SOCK` (in a
//! directory of mode 0700 of the session's uid) before the session's
//! command runs, and starts this server with the listening socket as its
//! stdin, so the command never finds the socket missing. Each agent
//! message a client sends becomes one mailbox record signed with the
//! session's credential (`RequestMsg::Agent`), exactly as a command request
//! is; the host's answer (`ResultMsg::AgentReply`) goes back to the client.
//! No key, no host socket and no decision is here: the host parses, decides
//! and signs. The server ends when its session's credential file is gone
//! (the coordinator removes it when the session ends) or its parent dies.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lazaret::escalation::{
    AgentRequest, CREDENTIAL_FILE_ENV, DEFAULT_PROMPT_TIMEOUT_SECS, GUEST_REQUESTS, GUEST_RESULTS, MAX_AGENT_BODY,
    MAX_PROMPT_TIMEOUT_SECS, PROMPT_TIMEOUT_ENV,
};
use lazaret::{mailbox, session_key};

/// The agent protocol's failure answer.
const FAILURE: [u8; 1] = [5];

/// The session's credential file and key, or the exit status after
/// saying why there is none.
fn credential() -> Result<(std::ffi::OsString, session_key::SessionKey), i32> {
    let Some(cred_file) = std::env::var_os(CREDENTIAL_FILE_ENV) else {
        eprintln!("lazaret-escalate --ssh-agent: no session credential: the session has no agent");
        return Err(2);
    };
    match std::fs::read_to_string(&cred_file)
        .ok()
        .and_then(|c| session_key::SessionKey::parse(c.trim_end()).ok())
    {
        Some(k) => Ok((cred_file, k)),
        None => {
            eprintln!("lazaret-escalate --ssh-agent: unreadable session credential");
            Err(2)
        }
    }
}

/// `--print-agent-request HEX`: writes the signed mailbox record of one
/// agent message (its body in hex, on a new connection) to stdout instead
/// of sending it, as `--print-request` does for a command (debugging and
/// adversarial tests of the mailbox). Returns the exit status.
pub fn print_record(hex: &str, random: fn(&mut [u8]) -> bool) -> i32 {
    let body: Option<Vec<u8>> = hex
        .len()
        .is_multiple_of(2)
        .then(|| {
            (0..hex.len())
                .step_by(2)
                .map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
                .collect()
        })
        .flatten();
    let Some(body) = body.filter(|b| !b.is_empty() && b.len() <= MAX_AGENT_BODY) else {
        eprintln!("lazaret-escalate: --print-agent-request needs the message body in hex (1..={MAX_AGENT_BODY} bytes)");
        return 2;
    };
    let key = match credential() {
        Ok((_, k)) => k,
        Err(code) => return code,
    };
    let mut idb = [0u8; 8];
    if !random(&mut idb) {
        eprintln!("lazaret-escalate: no randomness");
        return 125;
    }
    let conn: String = idb.iter().map(|b| format!("{b:02x}")).collect();
    let Some((_, record)) = record(&key, &conn, body, random) else {
        eprintln!("lazaret-escalate: no randomness");
        return 125;
    };
    let mut out = std::io::stdout();
    match out.write_all(&record).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("lazaret-escalate: cannot print the request: {e}");
            125
        }
    }
}

/// Serves the socket given as stdin until the session ends. Returns the
/// exit status.
pub fn serve(random: fn(&mut [u8]) -> bool) -> i32 {
    let (cred_file, key) = match credential() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let key = Arc::new(key);
    let listener = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => UnixListener::from(fd),
        Err(e) => {
            eprintln!("lazaret-escalate --ssh-agent: no listening socket on stdin: {e}");
            return 2;
        }
    };
    let sock = std::env::var_os(lazaret::escalation::AGENT_SOCK_ENV);
    // The session is over when its credential file is gone.
    let watched = cred_file.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        if !Path::new(&watched).exists() {
            if let Some(s) = &sock {
                let p = Path::new(s);
                let _ = std::fs::remove_file(p);
                if let Some(d) = p.parent() {
                    let _ = std::fs::remove_dir(d);
                }
            }
            std::process::exit(0);
        }
    });
    let prompt_timeout = std::env::var(PROMPT_TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(DEFAULT_PROMPT_TIMEOUT_SECS)
        .min(MAX_PROMPT_TIMEOUT_SECS);
    let deadline = Duration::from_secs(prompt_timeout + 60);
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let mut idb = [0u8; 8];
        if !random(&mut idb) {
            continue;
        }
        let conn_id: String = idb.iter().map(|b| format!("{b:02x}")).collect();
        let key = key.clone();
        std::thread::spawn(move || connection(stream, &key, &conn_id, deadline, random));
    }
    0
}

/// One client connection: message in, record out, answer back, until EOF.
fn connection(
    mut s: UnixStream,
    key: &session_key::SessionKey,
    conn: &str,
    deadline: Duration,
    random: fn(&mut [u8]) -> bool,
) {
    loop {
        let mut len = [0u8; 4];
        if s.read_exact(&mut len).is_err() {
            return;
        }
        let len = u32::from_be_bytes(len) as usize;
        if len == 0 || len > MAX_AGENT_BODY {
            // Refused here: the stream cannot be trusted to resynchronise.
            let _ = send(&mut s, &FAILURE);
            return;
        }
        let mut body = vec![0u8; len];
        if s.read_exact(&mut body).is_err() {
            return;
        }
        let answer = ask_host(key, conn, body, deadline, random).unwrap_or_else(|| FAILURE.to_vec());
        if send(&mut s, &answer).is_err() {
            return;
        }
    }
}

fn send(s: &mut UnixStream, body: &[u8]) -> std::io::Result<()> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    s.write_all(&out)
}

/// One agent message as a signed mailbox record: its id and bytes.
fn record(
    key: &session_key::SessionKey,
    conn: &str,
    body: Vec<u8>,
    random: fn(&mut [u8]) -> bool,
) -> Option<(String, Vec<u8>)> {
    let mut idb = [0u8; 16];
    if !random(&mut idb) {
        return None;
    }
    let id: String = idb.iter().map(|b| format!("{b:02x}")).collect();
    let req = AgentRequest {
        id: id.clone(),
        domain: key.domain.clone(),
        generation: key.generation,
        session: key.session.clone(),
        client: key.client.clone(),
        conn: conn.to_string(),
        body,
        cert: key.cert.clone(),
    };
    let sig = key.sign(&mailbox::agent_signed_part(&req));
    Some((id, mailbox::encode_agent_request(&req, &sig)))
}

/// One agent message as a signed mailbox record; the host's answer body.
fn ask_host(
    key: &session_key::SessionKey,
    conn: &str,
    body: Vec<u8>,
    deadline: Duration,
    random: fn(&mut [u8]) -> bool,
) -> Option<Vec<u8>> {
    let (id, record) = record(key, conn, body, random)?;
    let tmp = Path::new(GUEST_REQUESTS).join(format!(".tmp-{id}"));
    let fin = Path::new(GUEST_REQUESTS).join(format!("{id}.req"));
    std::fs::write(&tmp, &record)
        .and_then(|()| std::fs::rename(&tmp, &fin))
        .ok()?;
    let res = Path::new(GUEST_RESULTS).join(format!("{id}.res"));
    let started = std::time::Instant::now();
    loop {
        if started.elapsed() > deadline {
            let _ = std::fs::remove_file(&fin);
            return None;
        }
        match std::fs::read(&res) {
            Ok(d) if !d.is_empty() => {
                let (rid, body) = mailbox::decode_agent_reply(&d).ok()?;
                return (rid == id).then_some(body);
            }
            _ => std::thread::sleep(if started.elapsed() < Duration::from_secs(2) {
                Duration::from_millis(1)
            } else {
                Duration::from_millis(20)
            }),
        }
    }
}
