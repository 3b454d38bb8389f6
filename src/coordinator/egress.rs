//! Allow-by-name mode's notices: each session gets one line on its stderr
//! the first time the egress gate refuses a name while it is attached
//! (`lazaret: egress to NAME:PORT refused (...)`), at most once per name
//! per session. The gate writes refusals to `egress.log` in the Domain's
//! runtime dir (`net::gate`); the coordinator reads what was appended.

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom};

use super::Coordinator;
use crate::net::gate;
use crate::wire::client::ServerMsg;

/// How much of the log one turn of the event loop reads.
const READ_MAX: u64 = 64 * 1024;
/// At most this many names are remembered per Domain (then no new notices).
const TOLD_MAX: usize = 4096;

#[derive(Default)]
pub(super) struct EgressNotices {
    /// Where the next read starts; `None` until the first turn (older
    /// refusals are not announced).
    offset: Option<u64>,
    /// (session key, name) already told.
    told: HashSet<(u64, String)>,
}

impl Coordinator {
    pub(super) fn egress_notices(&mut self) {
        let Some(g) = &self.net.policy.gate else { return };
        if g.log_only || self.sessions.is_empty() {
            return;
        }
        let path = self.paths.run.join(gate::LOG_FILE);
        let Ok(mut f) = std::fs::File::open(&path) else { return };
        let Ok(len) = f.metadata().map(|m| m.len()) else { return };
        let start = *self.egress.offset.get_or_insert(len);
        if len <= start {
            return;
        }
        let mut buf = Vec::new();
        if f.seek(SeekFrom::Start(start)).is_err() || f.take(READ_MAX).read_to_end(&mut buf).is_err() {
            return;
        }
        // Only whole lines; the rest is read next time.
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        self.egress.offset = Some(start + end as u64 + 1);
        let entries = gate::parse_log(&String::from_utf8_lossy(&buf[..end + 1]));
        let profile = self.profile.name.clone();
        let mut out = Vec::new();
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
