//! The idle timeout every relay of the egress gate obeys: a connection
//! with no byte either way for the profile's `network.idle_timeout_s` is
//! closed (both ends shut), so a sandbox cannot hold connections (and the
//! gate's threads) open forever by going silent.
//!
//! The timeout is per connection thread ([`set_idle`], from the plan, when
//! the gate spawns it); the plain relay (`net::gate`) and the
//! TLS-terminating relay (`net::terminate`) wait through [`poll_idle`] or
//! [`poll_ms`].

use std::cell::Cell;
use std::io;
use std::time::{Duration, Instant};

use crate::sys;

thread_local! {
    /// The idle timeout of the connection this thread serves.
    static IDLE: Cell<Duration> =
        const { Cell::new(Duration::from_secs(crate::config::DEFAULT_IDLE_TIMEOUT_S as u64)) };
}

/// Sets the idle timeout of the connection this thread serves.
pub(crate) fn set_idle(d: Duration) {
    IDLE.with(|c| c.set(d));
}

pub(crate) fn idle() -> Duration {
    IDLE.with(|c| c.get())
}

/// `left` as a poll timeout, rounded up (no busy wait under a millisecond).
pub(crate) fn poll_ms(left: Duration) -> i32 {
    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

/// `poll` for a relay that waits on both its ends: at most this thread's
/// idle timeout; `Ok(false)`: no event came in that time (the connection is
/// idle both ways). An interrupted wait resumes.
pub(crate) fn poll_idle(fds: &mut [sys::PollFd]) -> io::Result<bool> {
    let deadline = Instant::now() + idle();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        if sys::poll(fds, poll_ms(left))? > 0 {
            return Ok(true);
        }
    }
}
