//! Allow-by-name mode's notices: each session gets one line on its stderr
//! the first time the egress gate refuses a name while it is attached
//! (`lazaret: egress to NAME:PORT refused (...)`), at most once per name
//! per session. The gate writes refusals to `egress.log` in the Domain's
//! runtime dir (`net::gate`); the coordinator follows what was appended,
//! across the log's rotations. When the log first rotates in this
//! generation (it reached its bound: older entries are dropped from now
//! on), every attached session is told so in one line, once.

use std::collections::HashSet;

use super::Coordinator;
use crate::net::gate;
use crate::wire::client::ServerMsg;

/// How much of the log one turn of the event loop reads.
const READ_MAX: u64 = 64 * 1024;
/// At most this many names are remembered per Domain (then no new notices).
const TOLD_MAX: usize = 4096;
/// The line a session gets when the log first rotates.
pub(super) const FULL_LINE: &str =
    "lazaret: egress log full: the oldest entries are dropped from now on (lazaret net log counts them)";

#[derive(Default)]
pub(super) struct EgressNotices {
    /// Where the next read starts (the end of the log at the first turn:
    /// older refusals are not announced).
    follow: gate::Follower,
    /// (session key, name) already told.
    told: HashSet<(u64, String)>,
    /// The sessions were told that the log is full.
    told_full: bool,
}

impl Coordinator {
    pub(super) fn egress_notices(&mut self) {
        let Some(g) = &self.net.policy.gate else { return };
        let log_only = g.log_only;
        if self.sessions.is_empty() {
            return;
        }
        let chunk = self.egress.follow.next(&self.paths.run, READ_MAX);
        let mut out = Vec::new();
        if chunk.rotated && !self.egress.told_full {
            self.egress.told_full = true;
            for s in self.sessions.values() {
                let eol = if s.tty { "\r\n" } else { "\n" };
                out.push((s.conn, format!("{FULL_LINE}{eol}").into_bytes()));
            }
        }
        let entries = if log_only {
            Vec::new()
        } else {
            gate::parse_log(&chunk.text)
        };
        let profile = self.profile.name.clone();
        for e in entries.iter().filter(|e| e.action == "refused") {
            for (&key, s) in &self.sessions {
                let told = (key, e.what.clone());
                if self.egress.told.len() >= TOLD_MAX || self.egress.told.contains(&told) {
                    continue;
                }
                self.egress.told.insert(told);
                let line = format!(
                    "lazaret: egress to {}:{} refused ({} of profile {})",
                    crate::display::escape(&e.what),
                    e.port,
                    e.why,
                    crate::display::escape(&profile)
                );
                let eol = if s.tty { "\r\n" } else { "\n" };
                out.push((s.conn, format!("{line}{eol}").into_bytes()));
            }
        }
        for (conn, data) in out {
            self.send(conn, &ServerMsg::Stderr(data));
        }
        self.egress.told.retain(|(k, _)| self.sessions.contains_key(k));
    }
}
