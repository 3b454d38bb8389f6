//! Allow-by-name mode's notices: each session gets one line on its stderr
//! the first time the egress gate refuses a name while it is attached
//! (`lazaret: egress to NAME:PORT refused (...)`), at most once per name
//! per session; a leak attempt or a downgrade (a secret's sentinel) once
//! per name and reason, counted apart, so that no flood of other
//! refusals and no earlier refusal of the name silences it. The gate writes refusals to `egress.log` in the Domain's
//! runtime dir (`net::gate`); the coordinator follows what was appended,
//! across the log's rotations. When the log first rotates in this
//! generation (it reached its bound: older entries are dropped from now
//! on), every attached session is told so in one line, once.
//!
//! A terminal's client holds these lines while the session's program has
//! the alternate screen (a full-screen UI) and writes them when it leaves
//! it or the session ends (`client::screen`); the program's output
//! already written when a notice is made is sent ahead of it.

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
    /// (session key, name, reason) of leak attempts and downgrades already
    /// told: kept apart, so that a flood of other refusals (or an earlier
    /// harmless refusal of the same name) never silences one.
    told_alarm: HashSet<(u64, String, String)>,
    /// The sessions were told that the log is full.
    told_full: bool,
}

impl EgressNotices {
    /// The lines `entries` give each session (key, whether a TTY), at most
    /// once per session and name (a leak attempt or a downgrade once per
    /// session, name and reason, whatever else was told), escaped.
    fn lines(&mut self, entries: &[gate::LogEntry], sessions: &[(u64, bool)], profile: &str) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        // The Domain's own start-up checks are not the sessions' traffic.
        for e in entries
            .iter()
            .filter(|e| e.action == "refused" && e.origin == gate::Origin::Sandbox)
        {
            for &(key, tty) in sessions {
                let fresh = if gate::alarm(&e.why) {
                    let k = (key, e.what.clone(), e.why.clone());
                    self.told_alarm.len() < TOLD_MAX && self.told_alarm.insert(k)
                } else {
                    let k = (key, e.what.clone());
                    self.told.len() < TOLD_MAX && self.told.insert(k)
                };
                if !fresh {
                    continue;
                }
                let line = format!(
                    "lazaret: egress to {}:{} refused ({} of profile {})",
                    crate::display::escape(&e.what),
                    e.port,
                    crate::display::escape(&e.why),
                    crate::display::escape(profile)
                );
                let eol = if tty { "\r\n" } else { "\n" };
                out.push((key, format!("{line}{eol}")));
            }
        }
        out
    }

    /// Forgets what was told to sessions no longer attached.
    fn keep(&mut self, live: impl Fn(u64) -> bool) {
        self.told.retain(|(k, _)| live(*k));
        self.told_alarm.retain(|(k, _, _)| live(*k));
    }
}

impl Coordinator {
    pub(super) fn egress_notices(&mut self) {
        if !self.net.policy.egress.gated() {
            return;
        }
        let log_only = self.net.policy.egress == crate::config::EgressMode::Log;
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
        let sessions: Vec<(u64, bool)> = self.sessions.iter().map(|(&k, s)| (k, s.tty)).collect();
        for (key, line) in self.egress.lines(&entries, &sessions, &self.profile.name) {
            // What the terminal's program wrote before the refusal (a
            // switch to the alternate screen, which makes the client hold
            // notices) goes out before the notice.
            if self.sessions.get(&key).is_some_and(|s| s.tty) {
                self.session_output(key, false, true);
            }
            if let Some(s) = self.sessions.get(&key) {
                out.push((s.conn, line.into_bytes()));
            }
        }
        for (conn, data) in out {
            self.send(conn, &ServerMsg::Stderr(data));
        }
        let live: HashSet<u64> = self.sessions.keys().copied().collect();
        self.egress.keep(|k| live.contains(&k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(what: &str, port: u16, why: &str) -> gate::LogEntry {
        gate::LogEntry {
            ms: 0,
            action: "refused".into(),
            proto: "tcp".into(),
            what: what.into(),
            port,
            why: why.into(),
            origin: gate::Origin::Sandbox,
        }
    }

    /// Attack: the sandbox first makes a harmless refusal of a name (a
    /// port the gate does not serve), or floods refusals of made-up names
    /// past the bound, then sends a sentinel there: the leak attempt is
    /// still told, once; reasons are escaped.
    #[test]
    fn a_leak_attempt_is_told_after_a_harmless_refusal_and_a_flood() {
        let mut n = EgressNotices::default();
        let s = [(7u64, false)];
        let first = n.lines(&[refused("other.test", 25, "port not served by the gate")], &s, "p");
        assert_eq!(first.len(), 1);
        let flood: Vec<gate::LogEntry> = (0..TOLD_MAX + 10)
            .map(|i| refused(&format!("n{i}.allowed.test"), 443, "not in network.hosts"))
            .collect();
        assert_eq!(n.lines(&flood, &s, "p").len(), TOLD_MAX - 1);
        let leak = refused("other.test", 80, "leak attempt: the sentinel of API_KEY");
        let down = refused("api.test", 80, "downgrade: the sentinel of API_KEY in plain HTTP");
        let told = n.lines(&[leak.clone(), down.clone(), leak], &s, "p");
        assert_eq!(told.len(), 2, "{told:?}");
        assert!(told[0]
            .1
            .contains("other.test:80 refused (leak attempt: the sentinel of API_KEY"));
        assert!(told[1].1.contains("api.test:80 refused (downgrade"));
        // Reasons come from a file the gate writes: printed escaped.
        let mut fresh = EgressNotices::default();
        let odd = fresh.lines(&[refused("x.test", 443, "upstream TLS: a\x1b[2Jb")], &[(8, true)], "p");
        assert_eq!(odd.len(), 1);
        assert!(!odd[0].1.contains('\x1b') && odd[0].1.ends_with("\r\n"), "{odd:?}");
        n.keep(|k| k == 8);
        assert!(n.told.is_empty() && n.told_alarm.is_empty());
    }

    /// The Domain's own start-up checks are no session's refusal.
    #[test]
    fn the_domains_checks_are_not_told() {
        let mut n = EgressNotices::default();
        let mut check = refused("10.0.0.1", 9, "a denied address");
        check.origin = gate::Origin::Check;
        assert!(n.lines(&[check], &[(1, false)], "p").is_empty());
        assert_eq!(
            n.lines(&[refused("10.0.0.1", 9, "a denied address")], &[(1, false)], "p")
                .len(),
            1
        );
    }
}
