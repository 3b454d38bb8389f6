//! Approved commands on the host: started with argv only in the resolved
//! working directory, a fixed environment and its own process group;
//! output captured with a limit, timeouts, cancels, results delivered;
//! and the recovery kill of a recorded command after a crash.

use std::io;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Broker, HostEvent};
use crate::escalation::{self, Outcome, Request, Status};
use crate::sys;

struct Capture {
    fd: Option<OwnedFd>,
    data: Vec<u8>,
    truncated: bool,
}

impl Capture {
    fn new(fd: OwnedFd) -> Capture {
        Capture {
            fd: Some(fd),
            data: Vec::new(),
            truncated: false,
        }
    }
    /// Reads what is there; false once the stream ended.
    fn pump(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut buf = [0u8; 65536];
        loop {
            match sys::read(fd, &mut buf) {
                Ok(0) => {
                    self.fd = None;
                    return;
                }
                Ok(n) => {
                    let room = escalation::OUTPUT_MAX_BYTES.saturating_sub(self.data.len());
                    self.data.extend_from_slice(&buf[..n.min(room)]);
                    if n > room {
                        self.truncated = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.fd = None;
                    return;
                }
            }
        }
    }
}

pub(super) struct HostRun {
    req: Request,
    argv: Vec<String>,
    decision: String,
    child: Child,
    pgid: i32,
    out: Capture,
    err: Capture,
    deadline: Instant,
    steps: Option<Steps>,
}

/// When an auto-approved request passed each step on the host, logged as
/// one line when its result is written: `escalation-steps ID verify=µs
/// spawn=µs run=µs deliver=µs` (reading and checking the record; starting
/// the command; the command itself until its exit is noticed; reaping it,
/// recording its end and writing the result). `scripts/bench-escalate.sh`
/// prints their medians beside the client's own steps.
struct Steps {
    seen: Instant,
    spawning: Instant,
    started: Instant,
    exited: Option<Instant>,
}

/// The marker of a step line in the coordinator log.
const STEPS_MARK: &str = "escalation-steps ";

impl Broker {
    /// Runs a command the developer approved, in the directory resolved
    /// when the request arrived (the one the prompt named). The path is
    /// resolved again now and must still lead to that same directory.
    pub fn start(&mut self, req: Request, argv: Vec<String>, decision: String) {
        let Some(dir) = self.dirs.remove(&req.id) else {
            return self.refuse(&req, Status::Failed, "working directory was not resolved; nothing ran");
        };
        let same = match (self.resolve_cwd(&req.cwd), sys::fd_identity(&dir)) {
            (Ok(now), Ok(then)) => sys::fd_identity(&now).is_ok_and(|n| n == then),
            _ => false,
        };
        if !same {
            return self.refuse(
                &req,
                Status::Failed,
                "the working directory changed while the request waited (it is not the directory the prompt \
                 named); nothing ran",
            );
        }
        self.start_in(req, argv, decision, dir, None)
    }

    /// Runs an approved command on the host, its working directory the
    /// handle `dir` (`fchdir`: no path is looked up again). `seen`: when
    /// the mailbox scan found an auto-approved request (its steps are
    /// logged when it ends, see [`Steps`]).
    pub(super) fn start_in(
        &mut self,
        req: Request,
        argv: Vec<String>,
        decision: String,
        dir: OwnedFd,
        seen: Option<Instant>,
    ) {
        let spawning = Instant::now();
        let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
        let user = std::env::var("USER").unwrap_or_default();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home)
            .env("USER", &user)
            .env("LOGNAME", &user)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The command becomes its own session and process group so a
        // cancel reaches all of it, and dies with the coordinator (checked
        // against the race where the coordinator died before the signal
        // was armed).
        sys::ChildSetup::new()
            .reset_signals()
            .setsid()
            .parent_death_signal(sys::SIGKILL)
            .exit_unless_parent(sys::getpid())
            .fchdir(&dir)
            .apply(&mut cmd);
        let spawned = cmd.spawn();
        drop(dir);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                return self.refuse(
                    &req,
                    Status::Failed,
                    &format!("cannot run {:?} on the host: {e}", argv[0]),
                )
            }
        };
        let out: OwnedFd = child.stdout.take().unwrap().into();
        let err: OwnedFd = child.stderr.take().unwrap().into();
        let _ = sys::set_nonblocking(&out, true);
        let _ = sys::set_nonblocking(&err, true);
        let pgid = child.id() as i32;
        self.events.push(HostEvent::Started {
            id: req.id.clone(),
            pid: pgid,
            start_time: sys::proc_start_time(pgid).unwrap_or(0),
        });
        let started = Instant::now();
        let steps = seen.map(|seen| Steps {
            seen,
            spawning,
            started,
            exited: None,
        });
        let deadline = started + Duration::from_secs(req.timeout_secs.min(escalation::MAX_TIMEOUT_SECS));
        self.runs.insert(
            req.id.clone(),
            HostRun {
                req,
                argv,
                decision,
                child,
                pgid,
                out: Capture::new(out),
                err: Capture::new(err),
                deadline,
                steps,
            },
        );
    }

    /// Output fds of running host commands, tagged by request id.
    pub fn poll_fds(&self) -> Vec<(std::os::fd::BorrowedFd<'_>, String)> {
        let mut v = Vec::new();
        for (id, r) in &self.runs {
            for c in [&r.out, &r.err] {
                if let Some(fd) = &c.fd {
                    v.push((std::os::fd::AsFd::as_fd(fd), id.clone()));
                }
            }
        }
        v
    }

    pub fn pump(&mut self, id: &str) {
        if let Some(r) = self.runs.get_mut(id) {
            r.out.pump();
            r.err.pump();
        }
    }

    pub fn next_deadline(&self) -> Option<Instant> {
        self.runs.values().map(|r| r.deadline).min()
    }

    /// Finishes commands that exited or ran out of time.
    pub fn reap(&mut self) {
        let now = Instant::now();
        let ids: Vec<String> = self.runs.keys().cloned().collect();
        for id in ids {
            let r = self.runs.get_mut(&id).unwrap();
            let status = match r.child.try_wait() {
                Ok(Some(st)) => {
                    if let Some(s) = r.steps.as_mut() {
                        s.exited = Some(Instant::now());
                    }
                    r.out.pump();
                    r.err.pump();
                    Some(Status::Completed(st.code().unwrap_or_else(|| {
                        128 + std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0)
                    })))
                }
                _ if now >= r.deadline => Some(Status::TimedOut),
                _ => None,
            };
            if let Some(status) = status {
                self.finish(&id, status);
            }
        }
    }

    /// Ends one run: kill its process group, reap, deliver the result.
    fn finish(&mut self, id: &str, status: Status) {
        let Some(mut r) = self.runs.remove(id) else { return };
        // INVARIANT: no host process outlives its request.
        let _ = sys::killpg(r.pgid, sys::SIGKILL);
        let _ = r.child.kill();
        let _ = r.child.wait();
        self.events.push(HostEvent::Ended { id: id.to_string() });
        r.out.pump();
        r.err.pump();
        let reason = match &status {
            Status::Completed(_) => r.decision.clone(),
            Status::TimedOut => format!("killed after {} s ({})", r.req.timeout_secs, r.decision),
            Status::Cancelled => "the requesting session ended".into(),
            Status::Expired => "no decision in time".into(),
            _ => r.decision.clone(),
        };
        self.audit(format!(
            "request={} session={} ran={} result={} exit={}",
            r.req.id,
            r.req.session,
            escalation::quote_argv(&r.argv),
            status.name(),
            status.exit_code()
        ));
        self.write_result(&Outcome {
            id: r.req.id.clone(),
            status,
            argv: r.argv.clone(),
            reason,
            stdout: std::mem::take(&mut r.out.data),
            stderr: std::mem::take(&mut r.err.data),
            stdout_truncated: r.out.truncated,
            stderr_truncated: r.err.truncated,
        });
        if let Some(Steps {
            seen,
            spawning,
            started,
            exited: Some(exited),
        }) = r.steps
        {
            let us = |a: Instant, b: Instant| b.saturating_duration_since(a).as_micros();
            log::info!(
                "{STEPS_MARK}{id} verify={} spawn={} run={} deliver={}",
                us(seen, spawning),
                us(spawning, started),
                us(started, exited),
                us(exited, Instant::now())
            );
        }
    }

    /// The session is gone: cancel whatever it started.
    pub fn cancel_session(&mut self, session_id: &str) {
        let ids: Vec<String> = self
            .runs
            .iter()
            .filter(|(_, r)| r.req.session == session_id)
            .map(|(k, _)| k.clone())
            .collect();
        for id in ids {
            self.finish(&id, Status::Cancelled);
        }
    }

    /// Cancels everything (teardown).
    pub fn cancel_all(&mut self) {
        let ids: Vec<String> = self.runs.keys().cloned().collect();
        for id in ids {
            self.finish(&id, Status::Cancelled);
        }
    }
}

/// Recovery after a coordinator crash: kills exactly the host command
/// recorded as (`pid`, `start_time`, `pgid`). The leader is verified by its
/// start time; if the leader is gone, its process group and session id
/// cannot have been reused while any member lives, so the members still
/// carrying that group (and started no earlier) are ours. A pid now used by
/// a different process means the group is gone: nothing is killed.
pub fn kill_recorded(pid: i32, start_time: u64, pgid: i32) -> usize {
    if pid <= 0 || pgid <= 0 {
        return 0;
    }
    if sys::same_process(pid, start_time) {
        let _ = sys::killpg(pgid, sys::SIGKILL);
        return 1;
    }
    if sys::proc_start_time(pid).is_some() {
        return 0; // the pid was reused: not ours
    }
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            // Fields after the command name: state ppid pgrp session ...
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            let (Some(pg), Some(st)) = (
                f.get(2).and_then(|v| v.parse::<i32>().ok()),
                sys::parse_start_time(&stat),
            ) else {
                continue;
            };
            if pg == pgid && st >= start_time {
                let _ = sys::kill(p, sys::SIGKILL);
                n += 1;
            }
        }
    }
    n
}
