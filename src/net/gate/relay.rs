//! The gate's plain relay (splice, one thread per direction), closed when
//! idle both ways for the connection thread's timeout (`net::idle`).

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::net::idle::{idle, poll_ms};
use crate::sys;

/// When either direction of a relayed connection last moved bytes.
struct Activity {
    start: Instant,
    /// Milliseconds since `start`.
    last: AtomicU64,
    idle: Duration,
}

impl Activity {
    fn touch(&self) {
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long until the connection counts as idle; zero: it is.
    fn left(&self) -> Duration {
        let last = Duration::from_millis(self.last.load(Ordering::Relaxed));
        (last + self.idle).saturating_sub(self.start.elapsed())
    }
}

/// Relays `a` ⇄ `b` until both directions ended, or until neither moved a
/// byte for the idle timeout (then both are shut).
pub(super) fn relay(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let act = Arc::new(Activity {
        start: Instant::now(),
        last: AtomicU64::new(0),
        idle: idle(),
    });
    let act2 = act.clone();
    let back = std::thread::Builder::new()
        .name("lz-gate-relay".into())
        .spawn(move || pump(&b2, &a2, &act2));
    pump(&a, &b, &act);
    if let Ok(t) = back {
        let _ = t.join();
    }
}

/// Moves bytes `from` → `to` through a pipe with splice until EOF; then
/// half-closes `to`. On an error, or when the connection went idle (no
/// byte this way or the other, [`Activity`]), both connections are shut.
fn pump(from: &TcpStream, to: &TcpStream, act: &Activity) {
    let ok = (|| -> io::Result<()> {
        let (r, w) = sys::pipe()?;
        let _ = sys::sock::set_pipe_size(&w, 1 << 20);
        loop {
            let left = act.left();
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            // Readable, a hang-up or an error: splice says which.
            let mut fds = [sys::PollFd::new(from, sys::POLLIN)];
            if sys::poll(&mut fds, poll_ms(left))? == 0 {
                continue;
            }
            let n = sys::sock::splice(from, &w, 1 << 20)?;
            if n == 0 {
                return Ok(());
            }
            let mut left = n;
            while left > 0 {
                let m = sys::sock::splice(&r, to, left)?;
                if m == 0 {
                    return Err(io::ErrorKind::WriteZero.into());
                }
                left -= m;
            }
            act.touch();
        }
    })();
    match ok {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(e) => {
            if e.kind() == io::ErrorKind::TimedOut {
                log::debug!("egress gate: a relayed connection idle for {:?} closed", act.idle);
            }
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::idle::{poll_idle, set_idle};
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A connected loopback pair (nothing leaves the machine).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    /// client ⇄ [relay with `idle`] ⇄ server: the client's and the
    /// server's ends, and the relay's thread.
    fn relayed(idle: Duration) -> (TcpStream, TcpStream, std::thread::JoinHandle<()>) {
        let (client, gate_in) = pair();
        let (gate_out, server) = pair();
        let t = std::thread::spawn(move || {
            set_idle(idle);
            relay(gate_in, gate_out);
        });
        (client, server, t)
    }

    #[test]
    fn an_idle_relay_is_closed_after_the_timeout() {
        let (mut client, mut server, t) = relayed(Duration::from_millis(300));
        client.write_all(b"ping").unwrap();
        let mut b = [0u8; 16];
        assert_eq!(server.read(&mut b).unwrap(), 4);
        let t0 = Instant::now();
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // Silence both ways: the relay shuts the client's connection.
        let r = client.read(&mut b);
        let waited = t0.elapsed();
        assert!(matches!(r, Ok(0)) || r.is_err(), "{r:?}");
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
            "closed after {waited:?}"
        );
        server.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert!(matches!(server.read(&mut b), Ok(0) | Err(_)));
        t.join().unwrap();
    }

    #[test]
    fn traffic_one_way_keeps_the_relay_open() {
        // The client never sends after its first bytes; the server keeps
        // talking: not idle, though one direction is silent.
        let (mut client, mut server, t) = relayed(Duration::from_millis(300));
        client.write_all(b"get").unwrap();
        let mut b = [0u8; 64];
        assert_eq!(server.read(&mut b).unwrap(), 3);
        client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        for i in 0..8 {
            std::thread::sleep(Duration::from_millis(100));
            server.write_all(format!("chunk{i}").as_bytes()).unwrap();
            let n = client.read(&mut b).unwrap();
            assert!(n > 0, "closed at chunk {i} while the server was talking");
        }
        // Then silence: closed.
        let t0 = Instant::now();
        let r = client.read(&mut b);
        assert!(matches!(r, Ok(0)) || r.is_err(), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
    }

    #[test]
    fn poll_idle_says_idle_after_the_timeout() {
        let (a, mut b) = pair();
        set_idle(Duration::from_millis(200));
        let t0 = Instant::now();
        let mut fds = [sys::PollFd::new(&a, sys::POLLIN)];
        assert!(!poll_idle(&mut fds).unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(190), "{:?}", t0.elapsed());
        b.write_all(b"x").unwrap();
        let mut fds = [sys::PollFd::new(&a, sys::POLLIN)];
        assert!(poll_idle(&mut fds).unwrap());
    }
}
