//! The egress log: appending one line per event, and reading it back
//! (parsing, the newest-first summary, the `hosts` suggestion).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::hosts::{self, HostPattern};

/// The log of refusals (and, in log mode, of names reached), in the
/// Domain's runtime dir (it outlives the generation).
pub const LOG_FILE: &str = "egress.log";
const LOG_MAX: u64 = 8 << 20;

/// Appends one line per event: `UNIX_MS\tACTION\tPROTO\tWHAT\tPORT\tWHY`.
/// WHAT came from the sandbox: anything outside `[A-Za-z0-9._:*-]` is `?`.
/// Bounded by [`LOG_MAX`].
pub(super) struct EgressLog {
    file: Mutex<Option<(std::fs::File, u64)>>,
}

impl EgressLog {
    pub(super) fn open(path: PathBuf) -> EgressLog {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        if let Err(e) = &f {
            log::warn!("egress gate: cannot open {}: {e}", path.display());
        }
        let size = f.as_ref().ok().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        EgressLog {
            file: Mutex::new(f.ok().map(|f| (f, size))),
        }
    }

    pub(super) fn record(&self, action: &str, proto: &str, what: &str, port: u16, why: &str) {
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
        let line = format!("{ms}\t{action}\t{proto}\t{clean}\t{port}\t{why}\n");
        if let Ok(mut g) = self.file.lock() {
            if let Some((f, size)) = g.as_mut() {
                if *size + line.len() as u64 <= LOG_MAX && f.write_all(line.as_bytes()).is_ok() {
                    *size += line.len() as u64;
                }
            }
        }
    }
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
}

pub fn parse_log(text: &str) -> Vec<LogEntry> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() != 6 {
                return None;
            }
            Some(LogEntry {
                ms: f[0].parse().ok()?,
                action: f[1].to_string(),
                proto: f[2].to_string(),
                what: f[3].to_string(),
                port: f[4].parse().ok()?,
                why: f[5].to_string(),
            })
        })
        .collect()
}

/// Aggregated: one row per (action, proto, what, port) with its count and
/// last time, newest first.
pub fn summarize(entries: &[LogEntry]) -> Vec<(LogEntry, u64)> {
    let mut rows: Vec<(LogEntry, u64)> = Vec::new();
    for e in entries {
        match rows
            .iter_mut()
            .find(|(r, _)| r.action == e.action && r.proto == e.proto && r.what == e.what && r.port == e.port)
        {
            Some((r, n)) => {
                *n += 1;
                if e.ms >= r.ms {
                    *r = e.clone();
                }
            }
            None => rows.push((e.clone(), 1)),
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0.ms));
    rows
}

/// The `hosts` line that would allow the refused names of `rows`.
pub fn suggestion(current: &[HostPattern], rows: &[(LogEntry, u64)]) -> Option<String> {
    let refused: Vec<(String, u16)> = rows
        .iter()
        .filter(|(e, _)| e.action == "refused" && e.what.parse::<HostPattern>().is_ok())
        .map(|(e, _)| (e.what.clone(), if e.proto == "dns" { 443 } else { e.port }))
        .collect();
    (!refused.is_empty()).then(|| hosts::suggest(current, &refused))
}
