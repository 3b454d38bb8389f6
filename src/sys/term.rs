//! Terminals and pseudo-terminals.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::cvt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WinSize {
    pub rows: u16,
    pub cols: u16,
}

pub fn get_winsize(fd: impl AsFd) -> Option<WinSize> {
    // SAFETY: ws is zero-initialised and a valid out pointer for TIOCGWINSZ.
    unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCGWINSZ, &mut ws) < 0 {
            return None;
        }
        Some(WinSize {
            rows: ws.ws_row,
            cols: ws.ws_col,
        })
    }
}

pub fn set_winsize(fd: impl AsFd, size: WinSize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: ws is a valid winsize for TIOCSWINSZ.
    cvt(unsafe { libc::ioctl(fd.as_fd().as_raw_fd(), libc::TIOCSWINSZ, &ws) }).map(|_| ())
}

/// Discards input the terminal has received but nobody has read yet
/// (typeahead), so it cannot answer a question asked after it was typed.
pub fn flush_input(fd: impl AsFd) -> io::Result<()> {
    Ok(rustix::termios::tcflush(fd, rustix::termios::QueueSelector::IFlush)?)
}

pub fn isatty(fd: impl AsFd) -> bool {
    rustix::termios::isatty(fd)
}

/// Opens a PTY pair: (master, slave), both close-on-exec.
pub fn openpty(size: Option<WinSize>) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut master: RawFd = 0;
    let mut slave: RawFd = 0;
    // SAFETY: out pointers are valid; name, termp and winp are null.
    cvt(unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    // SAFETY: openpty returned two fresh fds that nothing else owns.
    let (m, s) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    super::set_cloexec(&m, true)?;
    super::set_cloexec(&s, true)?;
    if let Some(size) = size {
        set_winsize(&m, size)?;
    }
    Ok((m, s))
}

/// A saved terminal mode; `restore` puts it back. Holds the fd number: the
/// terminal is the process's stdin, open for its whole life.
#[derive(Clone, Copy)]
pub struct TermMode {
    fd: RawFd,
    saved: libc::termios,
}

impl TermMode {
    /// Saves the current mode of `fd` and switches it to raw mode.
    pub fn make_raw(fd: impl AsFd) -> io::Result<TermMode> {
        let fd = fd.as_fd().as_raw_fd();
        // SAFETY: termios is zero-initialised; the out pointers are valid.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            cvt(libc::tcgetattr(fd, &mut saved))?;
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            cvt(libc::tcsetattr(fd, libc::TCSADRAIN, &raw))?;
            Ok(TermMode { fd, saved })
        }
    }

    pub fn restore(&self) {
        // SAFETY: restoring a termios we read earlier; a closed fd yields EBADF.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSADRAIN, &self.saved);
        }
    }
}
