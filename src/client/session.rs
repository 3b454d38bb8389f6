//! The client side of a session: Hello and Open, the raw terminal, and the
//! pump that moves bytes, signals and escalation prompts between the
//! terminal and the coordinator until the session exits.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use crate::client::answer::Terminal;
use crate::client::failure::{sys_step, Failure, SysStep};
use crate::client::resolve::Resolved;
use crate::config;
use crate::domain;
use crate::sys;
use crate::wire::client::{self as wire_client, ClientMsg, ServerMsg};
use crate::wire::codec::{self, FrameReader};

pub(crate) enum Outcome {
    Exited(i32),
    Retry,
}

// The terminal mode to restore on every exit path, including a panic.
static SAVED_TERM: Mutex<Option<sys::TermMode>> = Mutex::new(None);

pub(super) fn restore_terminal() {
    if let Ok(mut g) = SAVED_TERM.lock() {
        if let Some(m) = g.take() {
            m.restore();
        }
    }
}

fn hello(r: &Resolved) -> ClientMsg {
    ClientMsg::Hello {
        version: wire_client::protocol_version(),
        client_id: domain::random_id(8),
        profile: r.profile.name.clone(),
        fingerprint: config::join_fingerprint(&r.cfg, &r.profile),
    }
}

pub(crate) fn session(mut stream: UnixStream, r: &Resolved, argv: Vec<String>) -> Result<Outcome, Failure> {
    let tty = sys::isatty(sys::STDIN) && sys::isatty(sys::STDOUT);
    let size = if tty {
        sys::get_winsize(sys::STDIN).or_else(|| sys::get_winsize(sys::STDOUT))
    } else {
        None
    };
    let mut env = Vec::new();
    if let Ok(t) = std::env::var("TERM") {
        env.push(("TERM".to_string(), t));
    }
    env.extend(r.pass.iter().cloned());
    let cwd = std::env::current_dir()
        .unwrap_or_default()
        .to_string_lossy()
        .to_string();
    // A send that fails (the coordinator closed) still reads what it sent
    // before closing: a coordinator of another build refuses the Hello and
    // closes at once, often before the Open below is written, and its
    // refusal names the build and the fix (a Domain going down sends
    // nothing, and that is a retry).
    let mut sent = codec::send(&mut stream, &hello(r)).is_ok();
    let open = ClientMsg::Open(wire_client::OpenRequest {
        argv,
        env,
        cwd,
        tty: if tty {
            Some(
                size.map_or(wire_client::WinSize { rows: 24, cols: 80 }, |w| wire_client::WinSize {
                    rows: w.rows,
                    cols: w.cols,
                }),
            )
        } else {
            None
        },
        root: r.root,
    });
    sent = sent && codec::send(&mut stream, &open).is_ok();
    let mut reader = FrameReader::default();
    match reader.recv::<ServerMsg>(&mut stream) {
        Ok(ServerMsg::Refused { reason }) => return Err(Failure::SessionRefused(reason)),
        // Welcomed, but the Open never went out: the Domain was stopping.
        Ok(ServerMsg::Welcome { .. }) if !sent => return Ok(Outcome::Retry),
        Ok(ServerMsg::Welcome { .. }) => {}
        Ok(other) => {
            return Err(Failure::UnexpectedReply(crate::wire::UnexpectedMessage::of(
                "Welcome", &other,
            )))
        }
        // Closed (or reset) before Welcome: the Domain was stopping.
        Err(codec::ReadError::Closed) => return Ok(Outcome::Retry),
        Err(codec::ReadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(Outcome::Retry),
        Err(e) => return Err(Failure::ClosedSession(e)),
    }
    let signals = sys::signal_pipe(&[
        sys::SIGWINCH,
        sys::SIGINT,
        sys::SIGQUIT,
        sys::SIGTSTP,
        sys::SIGTERM,
        sys::SIGHUP,
    ])
    .map_err(sys_step(SysStep::SignalPipe))?;
    if tty {
        let mode = sys::TermMode::make_raw(sys::STDIN).map_err(sys_step(SysStep::RawMode))?;
        *SAVED_TERM.lock().unwrap() = Some(mode);
        std::panic::set_hook(Box::new(|info| {
            restore_terminal();
            eprintln!("lazaret: internal error: {info}");
        }));
    }
    let code = pump(&mut stream, &mut reader, signals.as_fd(), tty);
    restore_terminal();
    code.map(Outcome::Exited)
}

/// What the client's session loop waits on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PumpEvent {
    Coordinator,
    Signals,
    Stdin,
}

/// Moves bytes between the terminal and the coordinator until the session
/// ends. Returns the session's exit status.
fn pump(stream: &mut UnixStream, reader: &mut FrameReader, signals: BorrowedFd<'_>, tty: bool) -> Result<i32, Failure> {
    let mut term = Terminal::new(tty);
    let r = pump_terminal(stream, reader, signals, tty, &mut term);
    // Notices held while the program's screen was full are shown at the
    // session's end, however it ended.
    term.finish();
    r
}

fn pump_terminal(
    stream: &mut UnixStream,
    reader: &mut FrameReader,
    signals: BorrowedFd<'_>,
    tty: bool,
    term: &mut Terminal,
) -> Result<i32, Failure> {
    let mut stdin_open = true;
    let mut buf = vec![0u8; wire_client::MAX_DATA_CHUNK];
    loop {
        // Frames read ahead with Welcome (or in one read with others) are
        // acted on before waiting for more: poll cannot see them.
        if let Some(code) = drain_frames(stream, reader, term, tty)? {
            return Ok(code);
        }
        let mut fds = sys::PollSet::new();
        fds.read(&*stream, PumpEvent::Coordinator);
        fds.read(signals, PumpEvent::Signals);
        if stdin_open {
            fds.read(sys::STDIN, PumpEvent::Stdin);
        }
        fds.wait(None).map_err(sys_step(SysStep::Poll))?;
        if fds.is_readable(PumpEvent::Signals) {
            for sig in sys::drain_signals(signals) {
                if sig == sys::SIGWINCH {
                    // A prompt on screen is drawn again for the new size.
                    if let Some(d) = term.redraw() {
                        let _ = codec::send(stream, &d);
                    }
                }
                let msg = match sig {
                    sys::SIGWINCH => sys::get_winsize(sys::STDIN).map(|w| {
                        ClientMsg::Resize(wire_client::WinSize {
                            rows: w.rows,
                            cols: w.cols,
                        })
                    }),
                    sys::SIGTERM | sys::SIGHUP => {
                        restore_terminal();
                        return Ok(128 + sig);
                    }
                    s => Some(ClientMsg::Signal(s as u8)),
                };
                if let Some(m) = msg {
                    let _ = codec::send(stream, &m);
                }
            }
        }
        if stdin_open && fds.is_readable(PumpEvent::Stdin) {
            match sys::read(sys::STDIN, &mut buf) {
                Ok(0) => {
                    stdin_open = false;
                    let _ = codec::send(stream, &ClientMsg::StdinEof);
                }
                Ok(n) => match term.prompt.as_mut() {
                    // Keystrokes answer the prompt; none reach the sandbox.
                    Some(p) => {
                        if let Some(decision) = p.feed(&buf[..n]) {
                            let _ = codec::send(stream, &decision);
                            term.end_prompt();
                        }
                    }
                    None => {
                        let _ = codec::send(stream, &ClientMsg::Stdin(buf[..n].to_vec()));
                    }
                },
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    stdin_open = false;
                    let _ = codec::send(stream, &ClientMsg::StdinEof);
                }
            }
        }
        if fds.is_readable(PumpEvent::Coordinator) {
            let filled = reader.fill(stream);
            // Everything already received is shown before end-of-file is
            // reported: the Exit frame may be in the same read as the EOF.
            if let Some(code) = drain_frames(stream, reader, term, tty)? {
                return Ok(code);
            }
            if let Err(e) = filled {
                restore_terminal();
                return Err(Failure::ConnectionLost(e));
            }
        }
    }
}

/// Acts on every whole frame buffered in `reader`. `Some(code)` once the
/// session's Exit frame is read.
fn drain_frames(
    stream: &mut UnixStream,
    reader: &mut FrameReader,
    term: &mut Terminal,
    tty: bool,
) -> Result<Option<i32>, Failure> {
    loop {
        match reader.next::<ServerMsg>() {
            Ok(Some(ServerMsg::Stdout(d))) => {
                // Our reader is gone (`lazaret run -- yes | head -1`): end
                // as a shell pipeline member does, 128+SIGPIPE; the
                // coordinator ends the session when we leave.
                if term.output(false, d).is_err() {
                    restore_terminal();
                    return Ok(Some(crate::exit::Exit::ClosedPipe.code()));
                }
            }
            Ok(Some(ServerMsg::Stderr(d))) => {
                let _ = term.output(true, d);
            }
            Ok(Some(ServerMsg::Exit { code })) => {
                term.end_prompt();
                return Ok(Some(code));
            }
            Ok(Some(ServerMsg::Prompt(info))) => {
                if let Some(d) = term.show(info) {
                    let _ = codec::send(stream, &d);
                }
            }
            Ok(Some(ServerMsg::PromptEnd { request_id, text })) => {
                let _ = sys::write_all(sys::STDOUT, text.as_bytes());
                if term.prompt.as_ref().is_some_and(|p| p.info.request_id == request_id) {
                    term.end_prompt();
                }
            }
            Ok(Some(ServerMsg::Closing { reason })) => {
                term.end_prompt();
                restore_terminal();
                if tty {
                    eprint!("\r\n");
                }
                return Err(Failure::SessionClosed(reason));
            }
            Ok(Some(other)) => return Err(Failure::UnexpectedFrame(codec::Message::name(&other))),
            Ok(None) => return Ok(None),
            Err(e) => return Err(Failure::BadFrame(e)),
        }
    }
}
