//! The developer's own SSH agent (`SSH_AUTH_SOCK` of the coordinator's
//! environment), asked on a thread of its own: the coordinator's event loop
//! never waits for it. Each call connects, sends one message and reads
//! one answer, with a deadline on every step; the answer comes back on a
//! channel, and the thread wakes the event loop through a pipe.

use std::fmt;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::proto::MAX_ANSWER;

/// How long one call to the host agent may take (connect, write, read).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the host agent gave no answer.
#[derive(Debug)]
pub enum HostAgentError {
    /// The coordinator was started without `SSH_AUTH_SOCK`.
    NoSocket,
    Connect(PathBuf, std::io::Error),
    Io(std::io::Error),
    /// An answer longer than [`MAX_ANSWER`] (its length).
    TooLarge(usize),
}

impl fmt::Display for HostAgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostAgentError::NoSocket => write!(f, "SSH_AUTH_SOCK was not set when the Domain started"),
            HostAgentError::Connect(p, e) => write!(f, "cannot connect to the SSH agent at {}: {e}", p.display()),
            HostAgentError::Io(e) => write!(f, "the SSH agent: {e}"),
            HostAgentError::TooLarge(n) => write!(f, "the SSH agent answered {n} bytes, over {MAX_ANSWER}"),
        }
    }
}

impl std::error::Error for HostAgentError {}

/// One message to the agent at `sock` and its answer body, each step
/// bounded by `timeout`.
pub fn call(sock: &Path, body: &[u8], timeout: Duration) -> Result<Vec<u8>, HostAgentError> {
    let mut s = UnixStream::connect(sock).map_err(|e| HostAgentError::Connect(sock.to_path_buf(), e))?;
    s.set_read_timeout(Some(timeout)).map_err(HostAgentError::Io)?;
    s.set_write_timeout(Some(timeout)).map_err(HostAgentError::Io)?;
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    s.write_all(&out).map_err(HostAgentError::Io)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).map_err(HostAgentError::Io)?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_ANSWER {
        return Err(HostAgentError::TooLarge(len));
    }
    let mut answer = vec![0u8; len];
    s.read_exact(&mut answer).map_err(HostAgentError::Io)?;
    Ok(answer)
}

/// A finished call: its tag and the answer.
pub type Done<T> = (T, Result<Vec<u8>, HostAgentError>);

/// Calls on threads; answers on a channel, each announced by a byte on a
/// pipe the event loop polls.
pub struct Caller<T: Send + 'static> {
    sock: Option<PathBuf>,
    tx: mpsc::Sender<Done<T>>,
    rx: mpsc::Receiver<Done<T>>,
    wake_rd: OwnedFd,
    wake_wr: std::sync::Arc<OwnedFd>,
    /// Calls started and not yet taken.
    pub pending: usize,
}

impl<T: Send + 'static> Caller<T> {
    pub fn new(sock: Option<PathBuf>) -> std::io::Result<Caller<T>> {
        let (wake_rd, wake_wr) = crate::sys::pipe()?;
        crate::sys::set_nonblocking(&wake_rd, true)?;
        crate::sys::set_nonblocking(&wake_wr, true)?;
        let (tx, rx) = mpsc::channel();
        Ok(Caller {
            sock,
            tx,
            rx,
            wake_rd,
            wake_wr: std::sync::Arc::new(wake_wr),
            pending: 0,
        })
    }

    /// The fd to poll for readable: an answer is waiting.
    pub fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.wake_rd)
    }

    /// Sends `body` to the host agent on a new thread.
    pub fn start(&mut self, tag: T, body: Vec<u8>) {
        self.pending += 1;
        let tx = self.tx.clone();
        let wake = self.wake_wr.clone();
        let sock = self.sock.clone();
        let spawned = std::thread::Builder::new().name("lz-ssh-agent".into()).spawn(move || {
            let r = match &sock {
                Some(p) => call(p, &body, CALL_TIMEOUT),
                None => Err(HostAgentError::NoSocket),
            };
            let _ = tx.send((tag, r));
            let _ = crate::sys::write_all(&*wake, b"x");
        });
        if let Err(e) = spawned {
            self.pending -= 1;
            log::warn!("ssh-agent: cannot start a thread: {e}");
        }
    }

    /// The calls that finished.
    pub fn take(&mut self) -> Vec<Done<T>> {
        let mut buf = [0u8; 64];
        while crate::sys::read(&self.wake_rd, &mut buf)
            .map(|n| n > 0)
            .unwrap_or(false)
        {}
        let done: Vec<Done<T>> = self.rx.try_iter().collect();
        self.pending -= done.len().min(self.pending);
        done
    }
}
