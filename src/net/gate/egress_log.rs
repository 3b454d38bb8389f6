//! The egress log: appending one line per event, rotating it at its
//! bound, and reading it back (parsing, following it across a rotation,
//! the newest-first summary, the `hosts` suggestion).
//!
//! Bounded: the gate writes `egress.log` up to [`LOG_MAX`]; the line that
//! would pass it first renames the file to `egress.log.1` (replacing the
//! previous one, whose entries are counted in `egress.log.dropped`) and
//! starts a new `egress.log`. So the newest entries are kept, at most
//! twice [`LOG_MAX`] on disk, and what was dropped is said, not lost
//! silently. Readers: `lazaret net log` ([`read_log`]: both files and the
//! count) and the coordinator's egress notices ([`Follower`]).

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::hosts::{self, HostPattern};

/// The log of refusals (and, in log mode, of names reached), in the
/// Domain's runtime dir (it outlives the generation).
pub const LOG_FILE: &str = "egress.log";
/// The log before the last rotation.
pub const LOG_PREV: &str = "egress.log.1";
/// What the rotations dropped, `ENTRIES REFUSALS ALARMS` (decimal numbers
/// and a newline; a file of two numbers has no alarms), replaced whole at
/// each rotation.
pub const LOG_DROPPED: &str = "egress.log.dropped";
/// The egress log's files in the runtime dir (removed with the Domain).
pub const LOG_FILES: [&str; 3] = [LOG_FILE, LOG_PREV, LOG_DROPPED];
/// One file's bound: the log and its previous file hold at most twice this
/// (about 14,000 lines of the longest names each).
pub const LOG_MAX: u64 = 4 << 20;

/// Whose traffic a line of the log is about: the seventh field, written
/// by [`EgressLog::record`] from the phase the gate is in (a line of six
/// fields, written before the field existed, is the sandbox's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The sandbox's programs: everything after the start-up checks.
    Sandbox,
    /// The Domain's own start-up checks: the readiness probe the sandbox's
    /// init runs at boot, before it reports ready and so before any
    /// session can exist (`bin/probe.rs`). `net log` shows these only
    /// with `--all`.
    Check,
}

impl Origin {
    /// The field as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Sandbox => "sandbox",
            Origin::Check => "check",
        }
    }

    fn parse(s: &str) -> Option<Origin> {
        match s {
            "sandbox" => Some(Origin::Sandbox),
            "check" => Some(Origin::Check),
            _ => None,
        }
    }
}

/// What the rotations dropped so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Lines of any action.
    pub entries: u64,
    /// Of those, refusals.
    pub refusals: u64,
    /// Of the refusals, leak attempts and downgrades ([`alarm`]).
    pub alarms: u64,
}

/// Whether a refusal's reason is a secret's: its sentinel sent where the
/// secret is not bound (a leak attempt) or where it would cross in
/// cleartext (a downgrade). `net log` lists these first and counts the
/// dropped ones apart; the sessions are told of each.
pub fn alarm(why: &str) -> bool {
    why.starts_with("leak attempt") || why.starts_with("downgrade")
}

impl Dropped {
    /// The count file's content; malformed or missing is none dropped.
    pub fn read(dir: &Path) -> Dropped {
        let text = std::fs::read_to_string(dir.join(LOG_DROPPED)).unwrap_or_default();
        let f: Vec<&str> = text.trim_end_matches('\n').split(' ').collect();
        let n: Vec<u64> = f.iter().map_while(|x| x.parse().ok()).collect();
        match (n.len() == f.len(), n.as_slice()) {
            (true, [entries, refusals]) if refusals <= entries => Dropped {
                entries: *entries,
                refusals: *refusals,
                alarms: 0,
            },
            (true, [entries, refusals, alarms]) if alarms <= refusals && refusals <= entries => Dropped {
                entries: *entries,
                refusals: *refusals,
                alarms: *alarms,
            },
            _ => Dropped::default(),
        }
    }

    /// Replaces the count file (written aside, then renamed over it).
    fn write(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!("{LOG_DROPPED}.tmp"));
        std::fs::write(&tmp, format!("{} {} {}\n", self.entries, self.refusals, self.alarms))?;
        std::fs::rename(&tmp, dir.join(LOG_DROPPED))
    }

    /// The lines of a log file's text, and how many of them are refusals
    /// (the Domain's start-up checks' too: a count, whoever made them).
    fn count(text: &[u8]) -> Dropped {
        let mut d = Dropped::default();
        for l in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            d.entries += 1;
            let f: Vec<&[u8]> = l.split(|b| *b == b'\t').collect();
            if f.get(1) == Some(&&b"refused"[..]) {
                d.refusals += 1;
                if f.get(5).is_some_and(|w| alarm(&String::from_utf8_lossy(w))) {
                    d.alarms += 1;
                }
            }
        }
        d
    }
}

/// Appends one line per event:
/// `UNIX_MS\tACTION\tPROTO\tWHAT\tPORT\tWHY\tORIGIN` ([`Origin`]).
/// WHAT came from the sandbox: anything outside `[A-Za-z0-9._:*-]` is `?`.
/// Bounded by [`LOG_MAX`] per file, rotated (module doc).
pub(super) struct EgressLog {
    file: Mutex<Option<Writer>>,
    /// The Domain's start-up checks are running: lines are [`Origin::Check`].
    checking: AtomicBool,
    /// The checks were reported over; the raw watcher ends `checking` once
    /// it has logged the packets already queued (they are the checks').
    ending: AtomicBool,
}

struct Writer {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    max: u64,
}

impl Writer {
    /// `egress.log` becomes `egress.log.1` (the entries of the one it
    /// replaces are counted as dropped) and a new `egress.log` starts.
    fn rotate(&mut self) -> io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let prev = dir.join(LOG_PREV);
        match std::fs::read(&prev) {
            Ok(text) => {
                let (had, now) = (Dropped::read(dir), Dropped::count(&text));
                Dropped {
                    entries: had.entries + now.entries,
                    refusals: had.refusals + now.refusals,
                    alarms: had.alarms + now.alarms,
                }
                .write(dir)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::rename(&self.path, &prev)?;
        self.file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

impl EgressLog {
    pub(super) fn open(path: PathBuf) -> EgressLog {
        EgressLog::bounded(path, LOG_MAX)
    }

    /// [`EgressLog::open`] with a bound of `max` bytes per file.
    pub(super) fn bounded(path: PathBuf, max: u64) -> EgressLog {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        if let Err(e) = &f {
            log::warn!("egress gate: cannot open {}: {e}", path.display());
        }
        let size = f.as_ref().ok().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        EgressLog {
            file: Mutex::new(f.ok().map(|file| Writer { path, file, size, max })),
            checking: AtomicBool::new(false),
            ending: AtomicBool::new(false),
        }
    }

    /// From now on lines are the Domain's start-up checks (the gate starts
    /// before the sandbox boots).
    pub(super) fn begin_checks(&self) {
        self.ending.store(false, Ordering::SeqCst);
        self.checking.store(true, Ordering::SeqCst);
    }

    /// Whether lines written now are the checks'.
    pub(super) fn checking(&self) -> bool {
        self.checking.load(Ordering::SeqCst)
    }

    /// The checks were reported over (see [`EgressLog::end_checks`]).
    pub(super) fn ending(&self) -> bool {
        self.ending.load(Ordering::SeqCst)
    }

    /// Asks for the checks' end: the next line recorded once `checking`
    /// is false is the sandbox's.
    pub(super) fn request_end(&self) {
        self.ending.store(true, Ordering::SeqCst);
    }

    /// The checks are over: every later line is the sandbox's.
    pub(super) fn end_checks(&self) {
        self.checking.store(false, Ordering::SeqCst);
    }

    pub(super) fn record(&self, action: &str, proto: &str, what: &str, port: u16, why: &str) {
        let origin = if self.checking() {
            Origin::Check
        } else {
            Origin::Sandbox
        };
        let clean: String = what
            .chars()
            .take(253)
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._:*-".contains(c) {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        // A reason may quote what a remote host said (a TLS error): no
        // byte of it may split the line or its fields.
        let why: String = why.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
        let line = format!("{ms}\t{action}\t{proto}\t{clean}\t{port}\t{why}\t{}\n", origin.as_str());
        let Ok(mut g) = self.file.lock() else { return };
        let Some(w) = g.as_mut() else { return };
        if w.size + line.len() as u64 > w.max && w.size > 0 {
            if let Err(e) = w.rotate() {
                // Not rotated: the line is dropped (the bound holds); said
                // once, then the log is closed.
                log::warn!(
                    "egress gate: cannot rotate {}: {e}; the log ends here",
                    w.path.display()
                );
                *g = None;
                return;
            }
        }
        if w.file.write_all(line.as_bytes()).is_ok() {
            w.size += line.len() as u64;
        }
    }
}

/// The log as `lazaret net log` reads it: the previous file's text, then
/// the current one's (oldest first), and what the rotations dropped before.
pub fn read_log(dir: &Path) -> (String, Dropped) {
    let ino = |p: &Path| std::fs::metadata(p).ok().map(|m| m.ino());
    let read = |p: &Path| -> Option<(u64, String)> {
        let mut f = std::fs::File::open(p).ok()?;
        let i = f.metadata().ok()?.ino();
        let mut b = Vec::new();
        f.read_to_end(&mut b).ok()?;
        Some((i, String::from_utf8_lossy(&b).into_owned()))
    };
    let (cur, prev) = (dir.join(LOG_FILE), dir.join(LOG_PREV));
    // A rotation between the two reads would show one file twice or miss
    // one: read again until the current file is the one read.
    for _ in 0..3 {
        let dropped = Dropped::read(dir);
        let p = read(&prev);
        let c = read(&cur);
        let (pi, ci) = (p.as_ref().map(|p| p.0), c.as_ref().map(|c| c.0));
        if ci == ino(&cur) && (pi.is_none() || pi != ci) {
            let mut text = p.map(|p| p.1).unwrap_or_default();
            text.push_str(&c.map(|c| c.1).unwrap_or_default());
            return (text, dropped);
        }
    }
    let c = read(&cur).map(|c| c.1).unwrap_or_default();
    (c, Dropped::read(dir))
}

/// Follows `egress.log` by (inode, offset) across rotations: what was
/// appended since the last call, in whole lines (the coordinator's egress
/// notices). Starts at the end (older lines are not returned).
#[derive(Debug, Default)]
pub struct Follower {
    at: Option<(u64, u64)>,
}

/// One [`Follower::next`]: whole lines, and whether the file followed was
/// rotated away (the log reached its bound).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    pub rotated: bool,
}

impl Follower {
    /// At most `max` bytes of lines appended since the last call (the rest
    /// next time). After a rotation, the rest of the file followed (now
    /// `egress.log.1`) comes first, then the new file from its start.
    pub fn next(&mut self, dir: &Path, max: u64) -> Chunk {
        let Ok(mut cur) = std::fs::File::open(dir.join(LOG_FILE)) else {
            return Chunk::default();
        };
        let Ok(m) = cur.metadata() else {
            return Chunk::default();
        };
        let (ino, len) = (m.ino(), m.len());
        let Some((at_ino, off)) = self.at else {
            self.at = Some((ino, len));
            return Chunk::default();
        };
        if at_ino == ino {
            let off = if len < off { 0 } else { off };
            let (text, used) = lines_at(&mut cur, off, max);
            self.at = Some((ino, off + used));
            return Chunk { text, rotated: false };
        }
        // Rotated: finish the file followed if it is the previous one.
        if let Ok(mut prev) = std::fs::File::open(dir.join(LOG_PREV)) {
            if prev.metadata().is_ok_and(|m| m.ino() == at_ino && m.len() > off) {
                let (text, used) = lines_at(&mut prev, off, max);
                if used > 0 {
                    self.at = Some((at_ino, off + used));
                    return Chunk { text, rotated: true };
                }
            }
        }
        let (text, used) = lines_at(&mut cur, 0, max);
        self.at = Some((ino, used));
        Chunk { text, rotated: true }
    }
}

/// Whole lines of `f` from `off`, at most `max` bytes: the text and how
/// many bytes it took (a line longer than `max`, never written, is skipped).
fn lines_at(f: &mut std::fs::File, off: u64, max: u64) -> (String, u64) {
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(off)).is_err() || f.take(max).read_to_end(&mut buf).is_err() {
        return (String::new(), 0);
    }
    let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
        let skip = if buf.len() as u64 >= max { buf.len() as u64 } else { 0 };
        return (String::new(), skip);
    };
    (String::from_utf8_lossy(&buf[..end + 1]).into_owned(), end as u64 + 1)
}

/// One line of the log, parsed (`lazaret net log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub ms: u128,
    pub action: String,
    pub proto: String,
    pub what: String,
    pub port: u16,
    pub why: String,
    pub origin: Origin,
}

/// The lines of the log that parse (six fields: the sandbox's; seven:
/// the last is the [`Origin`]).
pub fn parse_log(text: &str) -> Vec<LogEntry> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let origin = match f.len() {
                6 => Origin::Sandbox,
                7 => Origin::parse(f[6])?,
                _ => return None,
            };
            Some(LogEntry {
                ms: f[0].parse().ok()?,
                action: f[1].to_string(),
                proto: f[2].to_string(),
                what: f[3].to_string(),
                port: f[4].parse().ok()?,
                why: f[5].to_string(),
                origin,
            })
        })
        .collect()
}

/// Aggregated: one row per (action, proto, what, port, reason, origin)
/// with its count and last time, newest first. The reason is part of the
/// key: a later refusal of the same name and port for another reason (a
/// head the gate cannot frame) must not turn a leak attempt's row into its
/// own; so is the origin: the sandbox's refusal is never counted into a
/// start-up check's row, which `net log` hides.
pub fn summarize(entries: &[LogEntry]) -> Vec<(LogEntry, u64)> {
    type Key<'a> = (&'a str, &'a str, &'a str, u16, &'a str, Origin);
    let mut at: HashMap<Key, usize> = HashMap::new();
    let mut rows: Vec<(LogEntry, u64)> = Vec::new();
    // Each row's newest entry's place in the log: the order among rows of
    // one millisecond (a flood logs many in one).
    let mut last: Vec<usize> = Vec::new();
    for (k, e) in entries.iter().enumerate() {
        let key = (
            e.action.as_str(),
            e.proto.as_str(),
            e.what.as_str(),
            e.port,
            e.why.as_str(),
            e.origin,
        );
        match at.get(&key) {
            Some(&i) => {
                let (r, n) = &mut rows[i];
                *n += 1;
                if e.ms >= r.ms {
                    *r = e.clone();
                    last[i] = k;
                }
            }
            None => {
                at.insert(key, rows.len());
                rows.push((e.clone(), 1));
                last.push(k);
            }
        }
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse((rows[i].0.ms, last[i])));
    let mut rows: Vec<Option<(LogEntry, u64)>> = rows.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| rows[i].take()).collect()
}

/// At most this many names in the suggested `hosts` line.
pub const SUGGEST_MAX: usize = 20;

/// The suggested `hosts` line, capped at [`SUGGEST_MAX`] refused names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suggestion {
    /// `hosts = [...]`: the current patterns, then the most refused names
    /// (most refused first).
    pub line: String,
    /// Refused names left out (refused less often).
    pub more: usize,
}

/// The `hosts` line that would allow the most refused names of `rows`,
/// most refused first, at most [`SUGGEST_MAX`] of them.
pub fn suggest_capped(current: &[HostPattern], rows: &[(LogEntry, u64)]) -> Option<Suggestion> {
    // (name, port as a pattern writes it) -> refusals.
    let mut count: HashMap<(String, Option<u16>), u64> = HashMap::new();
    for (e, n) in rows {
        if e.action != "refused" || e.what.parse::<HostPattern>().is_err() {
            continue;
        }
        let Ok(name) = crate::config::hostname::HostName::from_bytes(e.what.as_bytes()) else {
            continue;
        };
        let port = if e.proto == "dns" { 443 } else { e.port };
        if hosts::allowing(current, &name, port).is_some() {
            continue;
        }
        let key = (
            name.to_string(),
            (!hosts::DEFAULT_PORTS.contains(&port)).then_some(port),
        );
        *count.entry(key).or_default() += n;
    }
    if count.is_empty() {
        return None;
    }
    let mut names: Vec<((String, Option<u16>), u64)> = count.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let more = names.len().saturating_sub(SUGGEST_MAX);
    let top: Vec<(String, u16)> = names
        .into_iter()
        .take(SUGGEST_MAX)
        .map(|((n, p), _)| (n, p.unwrap_or(443)))
        .collect();
    Some(Suggestion {
        line: hosts::suggest(current, &top),
        more,
    })
}

/// The `hosts` line that would allow the refused names of `rows`
/// ([`suggest_capped`]; the gate's tests).
#[cfg(test)]
pub fn suggestion(current: &[HostPattern], rows: &[(LogEntry, u64)]) -> Option<String> {
    suggest_capped(current, rows).map(|s| s.line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lz-egress-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A name of exactly `len` bytes, distinct per `i`.
    fn long_name(i: usize, len: usize) -> String {
        let head = format!("n{i}-");
        let mut s = head.clone();
        while s.len() < len - 5 {
            s.push('a');
            if (s.len() + 1) % 60 == 0 {
                s.push('.');
            }
        }
        s.push_str(".test");
        s
    }

    #[test]
    fn the_log_rotates_at_its_bound_keeps_the_newest_and_counts_the_dropped() {
        let d = dir("rotate");
        let log = EgressLog::bounded(d.join(LOG_FILE), 1000);
        // ~60-byte lines: 16 to a file.
        for i in 0..100 {
            log.record("refused", "dns", &format!("n{i:03}.test"), 53, "not in network.hosts");
        }
        log.record("allowed", "tcp", "last.test", 443, "log mode");
        for f in [LOG_FILE, LOG_PREV] {
            let len = std::fs::metadata(d.join(f)).unwrap().len();
            assert!(len <= 1000 && len > 0, "{f}: {len}");
        }
        let (text, dropped) = read_log(&d);
        let kept = parse_log(&text);
        // Nothing lost without a count, nothing counted twice.
        assert_eq!(kept.len() as u64 + dropped.entries, 101, "{dropped:?}");
        assert_eq!(dropped.refusals, dropped.entries, "every dropped line was a refusal");
        assert!(dropped.entries > 0);
        // The newest are kept, oldest first, ending with the last line.
        assert_eq!(kept.last().unwrap().what, "last.test");
        assert_eq!(kept[0].what, format!("n{:03}.test", dropped.entries));
        assert!(kept.windows(2).all(|w| w[0].ms <= w[1].ms));
        assert_eq!(
            std::fs::read_to_string(d.join(LOG_DROPPED)).unwrap(),
            format!("{} {} 0\n", dropped.entries, dropped.refusals)
        );
        // A gate of the next generation appends to the same log and count.
        let again = EgressLog::bounded(d.join(LOG_FILE), 1000);
        for i in 0..40 {
            again.record("refused", "tcp", &format!("m{i:03}.test"), 443, "not in network.hosts");
        }
        let (text, d2) = read_log(&d);
        assert_eq!(parse_log(&text).len() as u64 + d2.entries, 141);
        assert!(d2.entries > dropped.entries);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Attack: a leak attempt, then a flood of refused made-up names that
    /// rotates it out of both files: the count of dropped lines says a
    /// leak attempt was among them.
    #[test]
    fn a_flood_cannot_drop_a_leak_attempt_without_a_word() {
        let d = dir("alarm");
        let log = EgressLog::bounded(d.join(LOG_FILE), 2000);
        log.record(
            "refused",
            "tcp",
            "other.test",
            80,
            "leak attempt: the sentinel of API_KEY",
        );
        for i in 0..200 {
            log.record("refused", "dns", &format!("n{i:03}.test"), 53, "not in network.hosts");
        }
        let (text, dropped) = read_log(&d);
        assert!(!text.contains("leak attempt"), "the flood did not rotate it out");
        assert_eq!(dropped.alarms, 1, "{dropped:?}");
        assert!(alarm("downgrade: the sentinel of K in plain HTTP") && !alarm("not in network.hosts"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_bound_holds_with_the_longest_names() {
        let d = dir("long");
        let log = EgressLog::bounded(d.join(LOG_FILE), 64 * 1024);
        for i in 0..2000 {
            log.record("refused", "dns", &long_name(i, 253), 53, "not in network.hosts");
        }
        let total: u64 = [LOG_FILE, LOG_PREV]
            .iter()
            .map(|f| std::fs::metadata(d.join(f)).unwrap().len())
            .sum();
        assert!(total <= 2 * 64 * 1024, "{total}");
        let (text, dropped) = read_log(&d);
        assert_eq!(parse_log(&text).len() as u64 + dropped.entries, 2000);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A reason with a tab, a newline or an escape (a TLS error quoting
    /// a remote host) stays one line of seven fields: nothing forged, the
    /// line not lost to `net log`.
    #[test]
    fn a_reason_cannot_split_or_forge_a_line() {
        let d = dir("why");
        let log = EgressLog::bounded(d.join(LOG_FILE), 1 << 20);
        log.record(
            "refused",
            "tcp",
            "a.test",
            443,
            "upstream TLS: x\t1\trefused\tdns\tforged.test\t53\ty\n2\tallowed\ttcp\tb.test\t443\t\x1b[2J",
        );
        let (text, _) = read_log(&d);
        let e = parse_log(&text);
        assert_eq!(text.lines().count(), 1, "{text:?}");
        assert_eq!(e.len(), 1, "{text:?}");
        assert_eq!(e[0].what, "a.test");
        assert!(!e[0].why.chars().any(char::is_control), "{:?}", e[0].why);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Lines written while the Domain's start-up checks run are marked
    /// as theirs, in the line itself; every later line is the sandbox's;
    /// a line of the six fields before the mark existed is the sandbox's,
    /// and a mark that is neither is no line.
    #[test]
    fn the_checks_lines_are_marked_where_they_are_written() {
        let d = dir("origin");
        let log = EgressLog::bounded(d.join(LOG_FILE), 1 << 20);
        log.begin_checks();
        log.record("refused", "tcp", "10.0.0.1", 9, "a denied address");
        log.request_end();
        // Until the watcher (or the bounded wait) ends the phase, still the checks'.
        log.record("refused", "udp", "10.0.0.2", 9, "UDP is closed");
        log.end_checks();
        log.record("refused", "tcp", "other.test", 443, "not in network.hosts");
        let (mut text, _) = read_log(&d);
        assert!(text.lines().all(|l| l.split('\t').count() == 7), "{text:?}");
        text.push_str("9\trefused\tdns\told.test\t53\tnot in network.hosts\n");
        text.push_str("10\trefused\tdns\tforged.test\t53\tx\tcheck?\n");
        let e = parse_log(&text);
        let got: Vec<(&str, Origin)> = e.iter().map(|e| (e.what.as_str(), e.origin)).collect();
        assert_eq!(
            got,
            [
                ("10.0.0.1", Origin::Check),
                ("10.0.0.2", Origin::Check),
                ("other.test", Origin::Sandbox),
                ("old.test", Origin::Sandbox),
            ]
        );
        // One name and reason from both: two rows, never one.
        let both = "1\trefused\ttcp\tx.test\t9\tr\tcheck\n2\trefused\ttcp\tx.test\t9\tr\tsandbox\n";
        assert_eq!(summarize(&parse_log(both)).len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_malformed_count_is_none() {
        let d = dir("count");
        for bad in ["", "x y\n", "1\n", "1 2 3\n", "1 5\n", "-1 0\n", "5 3 1 1\n", "5 3 x\n"] {
            std::fs::write(d.join(LOG_DROPPED), bad).unwrap();
            assert_eq!(Dropped::read(&d), Dropped::default(), "{bad:?}");
        }
        std::fs::write(d.join(LOG_DROPPED), "7 5\n").unwrap();
        assert_eq!(
            Dropped::read(&d),
            Dropped {
                entries: 7,
                refusals: 5,
                alarms: 0
            }
        );
        std::fs::write(d.join(LOG_DROPPED), "7 5 2\n").unwrap();
        assert_eq!(Dropped::read(&d).alarms, 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_follower_reads_every_line_once_across_rotations() {
        let d = dir("follow");
        let log = EgressLog::bounded(d.join(LOG_FILE), 600);
        let mut f = Follower::default();
        log.record("refused", "tcp", "before.test", 443, "x");
        // The first call starts at the end: older lines are not returned.
        assert_eq!(f.next(&d, 1 << 20), Chunk::default());
        let mut seen = Vec::new();
        let mut rotations = 0;
        let mut n = 0;
        for _ in 0..6 {
            // Less than one file per round: the follower keeps up.
            for _ in 0..5 {
                log.record("refused", "tcp", &format!("r{n}.test"), 443, "x");
                n += 1;
            }
            // Small reads: the rest of a rotated file comes over turns.
            loop {
                let c = f.next(&d, 100);
                rotations += c.rotated as usize;
                if c.text.is_empty() && !c.rotated {
                    break;
                }
                seen.extend(parse_log(&c.text).into_iter().map(|e| e.what));
            }
        }
        let want: Vec<String> = (0..n).map(|i| format!("r{i}.test")).collect();
        assert_eq!(seen, want);
        assert!(rotations > 0, "the log must have rotated");
        let _ = std::fs::remove_dir_all(&d);
    }

    fn row(what: &str, port: u16, n: u64, ms: u128) -> (LogEntry, u64) {
        (
            LogEntry {
                ms,
                action: "refused".into(),
                proto: "tcp".into(),
                what: what.into(),
                port,
                why: "not in network.hosts".into(),
                origin: Origin::Sandbox,
            },
            n,
        )
    }

    #[test]
    fn the_suggestion_is_capped_and_sorted_by_count() {
        let mut rows: Vec<(LogEntry, u64)> = (0..30).map(|i| row(&format!("n{i:02}.test"), 443, i + 1, 0)).collect();
        // Counted together: the DNS refusal and the TLS one of one name.
        rows.push(row("n00.test", 80, 100, 0));
        // Already allowed, and not a name: never suggested.
        rows.push(row("a.test", 443, 1000, 0));
        rows.push(row("n??.test", 443, 1000, 0));
        rows.push(row("git.test", 22, 50, 0));
        let s = suggest_capped(&["a.test".parse().unwrap()], &rows).unwrap();
        assert_eq!(s.more, 31 - SUGGEST_MAX);
        let names: Vec<&str> = s
            .line
            .trim_start_matches("hosts = [")
            .trim_end_matches(']')
            .split(", ")
            .map(|q| q.trim_matches('"'))
            .collect();
        assert_eq!(names.len(), 1 + SUGGEST_MAX, "{}", s.line);
        assert_eq!(
            &names[..4],
            ["a.test", "n00.test", "git.test:22", "n29.test"],
            "{}",
            s.line
        );
        assert_eq!(names[SUGGEST_MAX], "n12.test", "{}", s.line);
        assert!(!s.line.contains("n11.test") && !s.line.contains('?'), "{}", s.line);
        // Bounded whatever the log holds.
        let many: Vec<(LogEntry, u64)> = (0..5000).map(|i| row(&long_name(i, 253), 443, 1, 0)).collect();
        let s = suggest_capped(&[], &many).unwrap();
        assert!(s.line.len() < SUGGEST_MAX * 260 + 20, "{}", s.line.len());
        assert_eq!(s.more, 5000 - SUGGEST_MAX);
        assert_eq!(suggest_capped(&[], &[row("a?b", 443, 1, 0)]), None);
    }

    /// Attack: a sentinel towards other.test:80 (a leak attempt), then
    /// requests to the same name and port the gate refuses for another
    /// reason: the leak attempt keeps a row of its own.
    #[test]
    fn a_later_refusal_of_the_name_does_not_hide_a_leak_attempt() {
        let text = "1\trefused\ttcp\tother.test\t80\tleak attempt: the sentinel of K\n\
                    2\trefused\ttcp\tother.test\t80\trequest refused: a malformed request target\n\
                    3\trefused\ttcp\tother.test\t80\trequest refused: a malformed request target\n";
        let rows = summarize(&parse_log(text));
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            (rows[0].0.why.as_str(), rows[0].1),
            ("request refused: a malformed request target", 2)
        );
        assert_eq!(
            (rows[1].0.why.as_str(), rows[1].1),
            ("leak attempt: the sentinel of K", 1)
        );
    }

    #[test]
    fn summarize_scales_to_a_flood() {
        let text: String = (0..30_000)
            .map(|i| format!("{i}\trefused\tdns\t{}\t53\tnot in network.hosts\n", long_name(i, 200)))
            .collect();
        let t = std::time::Instant::now();
        let rows = summarize(&parse_log(&text));
        assert_eq!(rows.len(), 30_000);
        assert!(rows[0].0.ms == 29_999);
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    }

    #[test]
    fn rows_of_one_millisecond_are_newest_first_by_their_place_in_the_log() {
        let e = |what: &str| LogEntry {
            ms: 7,
            action: "refused".into(),
            proto: "dns".into(),
            what: what.into(),
            port: 53,
            why: "not in network.hosts".into(),
            origin: Origin::Sandbox,
        };
        let rows = summarize(&[e("a.test"), e("b.test"), e("a.test"), e("c.test")]);
        let names: Vec<&str> = rows.iter().map(|(r, _)| r.what.as_str()).collect();
        assert_eq!(names, ["c.test", "a.test", "b.test"]);
        assert_eq!(rows[1].1, 2);
    }
}
