//! Domains started by another build of Lazaret: `ps` lists them and
//! `stop` stops them, whatever protocol their coordinator speaks.
//!
//! A coordinator of another protocol version refuses the full protocol's
//! `Hello` but answers the frozen basic exchange (`wire::basic`): its
//! status and a stop. A coordinator of a build from before the basic
//! exchange answers neither (it drops the unknown frame): it is found on
//! disk instead. Its Domain directory's `lock` is held, its profile and
//! workspace are in the Domain Root's `domain.json`, and its coordinator is
//! the one process of this user named `lazaret:[coordinator]` that has that
//! very lock file open (same device and inode). `stop` sends it SIGTERM
//! through a pidfd opened before the check, which it answers with its
//! ordinary teardown, as it does for `Stop`.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::domain::DomainId;
use crate::wire::basic::{BasicInfo, BasicRequest};
use crate::wire::client::ServerMsg;
use crate::wire::codec::{self, FrameReader, ReadError};

/// A running Domain whose coordinator is of another build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Foreign {
    pub domain_id: DomainId,
    pub profile: String,
    pub workspace: String,
    /// The build that started it (`0.1.0 (commit …)`), or what is known.
    pub build: String,
    /// Its protocol version, when it answered the basic exchange.
    pub protocol: Option<u32>,
    pub started_at: i64,
    /// Sessions open, when it answered.
    pub sessions: Option<u32>,
    pub coordinator_pid: i32,
}

/// What the build of a coordinator from before the basic exchange is
/// called in `ps` (it cannot say which it is).
pub const PRE_BASIC: &str = "a build from before the basic exchange";

/// What a basic request got.
#[derive(Debug)]
pub enum BasicAnswer {
    Info(BasicInfo),
    /// The coordinator closed the connection without an answer: a build
    /// from before the basic exchange.
    Silent,
    /// No answer in time, or no connection: nothing is known.
    Unknown,
}

/// Sends the basic `req` to the coordinator at `sock` and reads its answer.
pub fn ask(sock: &Path, req: BasicRequest) -> BasicAnswer {
    let Ok(mut s) = UnixStream::connect(sock) else {
        return BasicAnswer::Unknown;
    };
    if s.set_read_timeout(Some(Duration::from_secs(5))).is_err() {
        return BasicAnswer::Unknown;
    }
    if codec::send(&mut s, &crate::wire::client::ClientMsg::Basic(req)).is_err() {
        // A coordinator that closed at once on the unknown frame.
        return BasicAnswer::Silent;
    }
    match FrameReader::default().recv::<ServerMsg>(&mut s) {
        Ok(ServerMsg::Basic(info)) => BasicAnswer::Info(info),
        Err(ReadError::Closed) => BasicAnswer::Silent,
        Err(ReadError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => BasicAnswer::Silent,
        _ => BasicAnswer::Unknown,
    }
}

impl From<BasicInfo> for Foreign {
    fn from(i: BasicInfo) -> Foreign {
        Foreign {
            domain_id: i.domain_id,
            profile: i.profile,
            workspace: i.workspace,
            build: i.build,
            protocol: Some(i.protocol),
            started_at: i.started_at,
            sessions: Some(i.sessions),
            coordinator_pid: i.coordinator_pid,
        }
    }
}

/// A Domain whose coordinator answered neither protocol: found on disk.
/// `None` when its lock is not held or no coordinator of ours holds it (a
/// stale socket: nothing runs).
pub fn pre_basic(id: &DomainId, run: &Path, domain_root: &Path) -> Option<Foreign> {
    let pid = coordinator_holding(&run.join("lock"))?;
    let meta = crate::storage::state::read_meta(domain_root);
    let started_at = std::fs::symlink_metadata(run.join("hc.sock"))
        .map(|m| m.mtime())
        .unwrap_or(0);
    Some(Foreign {
        domain_id: id.clone(),
        profile: meta.as_ref().map_or("?".into(), |m| m.profile.clone()),
        workspace: meta.as_ref().map_or("?".into(), |m| m.workspace.clone()),
        build: PRE_BASIC.into(),
        protocol: None,
        started_at,
        sessions: None,
        coordinator_pid: pid,
    })
}

/// Whether `/proc/PID/cmdline` is a coordinator's (its `argv[0]`).
pub fn is_coordinator_cmdline(cmdline: &[u8]) -> bool {
    cmdline.split(|b| *b == 0).next() == Some(b"lazaret:[coordinator]")
}

/// The coordinator of this user that has the lock file `lock` open (same
/// device and inode), if exactly one does.
pub fn coordinator_holding(lock: &Path) -> Option<i32> {
    let want = std::fs::metadata(lock).ok()?;
    let uid = crate::sys::getuid();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if holds(pid, uid, &want) {
            found.push(pid);
        }
    }
    match found[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

fn holds(pid: i32, uid: u32, want: &std::fs::Metadata) -> bool {
    let dir = Path::new("/proc").join(pid.to_string());
    match std::fs::metadata(&dir) {
        Ok(m) if m.uid() == uid => {}
        _ => return false,
    }
    if !std::fs::read(dir.join("cmdline")).is_ok_and(|c| is_coordinator_cmdline(&c)) {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == want.dev() && m.ino() == want.ino()))
}

/// Stops a Domain of a build from before the basic exchange: SIGTERM to
/// its coordinator, through a pidfd, after checking (with the pidfd open)
/// that the process still is the one holding the Domain's lock.
pub fn terminate_pre_basic(run: &Path, pid: i32) -> io::Result<bool> {
    use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
    let Some(p) = Pid::from_raw(pid) else {
        return Ok(false);
    };
    let fd = match pidfd_open(p, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    // With the pidfd open the pid cannot name another process: check it.
    if coordinator_holding(&run.join("lock")) != Some(pid) {
        return Ok(false);
    }
    match pidfd_send_signal(&fd, Signal::Term) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_coordinator_argv0_counts() {
        assert!(is_coordinator_cmdline(b"lazaret:[coordinator]\0--profile\0default\0"));
        assert!(!is_coordinator_cmdline(b"lazaret:[supervisor]\0--bundle\0x\0"));
        assert!(!is_coordinator_cmdline(b"lazaret\0lazaret:[coordinator]\0"));
        assert!(!is_coordinator_cmdline(b"lazaret:[coordinator]x\0"));
        assert!(!is_coordinator_cmdline(b""));
    }

    /// The scan finds nothing for a lock no coordinator holds (this test
    /// process has it open, but is no coordinator).
    #[test]
    fn a_lock_held_by_no_coordinator_has_no_holder() {
        let dir = std::env::temp_dir().join(format!("lz-otherbuild-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = dir.join("lock");
        let _f = std::fs::File::create(&lock).unwrap();
        assert_eq!(coordinator_holding(&lock), None);
        assert_eq!(coordinator_holding(&dir.join("absent")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
