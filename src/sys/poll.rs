//! `poll(2)` and the one event-loop set every process role uses:
//! [`PollSet`] pairs each polled fd with a caller-chosen token, so a loop
//! dispatches on what an fd *is* (`Token::Listener`, `Token::ConnRead(k)`)
//! rather than on its index.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

pub use libc::{POLLIN, POLLOUT};

/// The `events` bits of a [`PollFd`].
pub type PollEvents = libc::c_short;

/// One entry of a `poll(2)` array. Holds the fd number only: the caller
/// keeps the fd open while it polls (a closed one reports POLLNVAL, which is
/// memory-safe and shows as [`PollFd::hangup`]).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct PollFd(libc::pollfd);

impl PollFd {
    pub fn new(fd: impl AsFd, events: libc::c_short) -> PollFd {
        PollFd(libc::pollfd {
            fd: fd.as_fd().as_raw_fd(),
            events,
            revents: 0,
        })
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
    /// Any event at all (readable, writable or hang-up).
    pub fn ready(&self) -> bool {
        self.readable() || self.writable() || self.hangup()
    }
}

/// `poll(2)`; EINTR is reported as zero ready fds. `timeout_ms < 0` waits
/// forever.
pub fn poll(fds: &mut [PollFd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: PollFd is repr(transparent) over pollfd; the slice is valid
    // for reads and writes of fds.len() entries for the call.
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

/// A poll set built fresh each loop turn: fds with the token that names
/// them. After [`PollSet::wait`], [`PollSet::ready`] yields the tokens whose
/// fd has an event, in insertion order.
pub struct PollSet<T> {
    fds: Vec<PollFd>,
    tokens: Vec<T>,
}

impl<T: Copy> Default for PollSet<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> PollSet<T> {
    pub fn new() -> Self {
        PollSet {
            fds: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// Polls `fd` for input (or hang-up).
    pub fn read(&mut self, fd: impl AsFd, token: T) {
        self.add(fd, POLLIN, token);
    }

    pub fn add(&mut self, fd: impl AsFd, events: libc::c_short, token: T) {
        self.fds.push(PollFd::new(fd, events));
        self.tokens.push(token);
    }

    /// Waits up to `timeout` (forever when `None`) for an event; EINTR
    /// counts as a timeout. Returns how many fds are ready.
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        poll(&mut self.fds, ms)
    }

    /// The tokens whose fd had an event in the last [`PollSet::wait`], with
    /// that event.
    pub fn ready(&self) -> impl Iterator<Item = (T, PollFd)> + '_ {
        self.tokens
            .iter()
            .zip(&self.fds)
            .filter(|(_, f)| f.ready())
            .map(|(&t, &f)| (t, f))
    }

    /// Whether `token`'s fd was readable (or hung up) in the last wait.
    pub fn is_readable(&self, token: T) -> bool
    where
        T: PartialEq,
    {
        self.tokens
            .iter()
            .zip(&self.fds)
            .any(|(&t, f)| t == token && f.readable())
    }
}

/// Waits up to `timeout` for `fd` to become readable (or hang up).
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> io::Result<bool> {
    let mut set = PollSet::new();
    set.read(fd, ());
    Ok(set.wait(Some(timeout))? > 0 && set.is_readable(()))
}
