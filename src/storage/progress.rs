//! Progress of the long image steps (a build, the first start's unpack of
//! an image): the line a terminal shows, which step runs, how long it has
//! run and what is known about the time left.
//!
//! An estimate has a basis or is not given: the unpack measures the bytes
//! written and read against the sizes its layer check found; a build
//! compares with the step times its last build of the same image recorded.
//! Without either, the line says so.

use std::io::{self, Write};
use std::time::Duration;

/// Progress on a terminal: one line, rewritten; silent otherwise. A
/// forwarding progress hands each line to its sink instead (the
/// coordinator's start report, which the starting CLI shows).
pub struct Progress<'a> {
    on: bool,
    shown: bool,
    sink: Option<&'a mut dyn FnMut(&str)>,
}

impl Progress<'static> {
    pub fn new(quiet: bool) -> Progress<'static> {
        Progress {
            on: !quiet && crate::sys::isatty(crate::sys::STDERR),
            shown: false,
            sink: None,
        }
    }
}

impl<'a> Progress<'a> {
    /// Every step goes to `sink`.
    pub fn forward(sink: &'a mut dyn FnMut(&str)) -> Progress<'a> {
        Progress {
            on: true,
            shown: false,
            sink: Some(sink),
        }
    }

    /// Whether anyone sees the steps (timed lines are worth computing).
    pub fn visible(&self) -> bool {
        self.on
    }

    pub fn step(&mut self, msg: &str) {
        if let Some(sink) = &mut self.sink {
            sink(msg);
            return;
        }
        if self.on {
            // One terminal line: a wrapped line would not be redrawn over.
            let cols = crate::sys::get_winsize(std::io::stderr())
                .map(|w| w.cols as usize)
                .filter(|c| *c > 1)
                .unwrap_or(101);
            let msg: String = msg.chars().filter(|c| !c.is_control()).take(cols - 1).collect();
            eprint!("\r\x1b[K{msg}");
            let _ = io::stderr().flush();
            self.shown = true;
        }
    }

    pub fn done(&mut self) {
        if self.on && self.shown {
            eprint!("\r\x1b[K");
            let _ = io::stderr().flush();
            self.shown = false;
        }
    }
}

impl Drop for Progress<'_> {
    fn drop(&mut self) {
        self.done();
    }
}

/// What is known about the time a step has left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Estimate {
    Left(Duration),
    /// There is a basis, but too little has been measured yet.
    TooEarly,
    /// Nothing to estimate from (why).
    NoBasis(&'static str),
}

/// `m:ss`, or `h:mm:ss` from an hour.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// Time left at the rate so far, `done` of `total` units of work in
/// `elapsed`. None before 3 seconds and 2 % of the work; past the total
/// (the basis was off) the rest is unknown.
pub fn by_rate(elapsed: Duration, done: u64, total: u64) -> Estimate {
    if total == 0 {
        return Estimate::NoBasis("size unknown");
    }
    if done >= total {
        return Estimate::NoBasis("past its expected size");
    }
    if elapsed < Duration::from_secs(3) || done.saturating_mul(50) < total {
        return Estimate::TooEarly;
    }
    let left = elapsed.as_secs_f64() * (total - done) as f64 / done as f64;
    Estimate::Left(Duration::from_secs_f64(left.ceil()))
}

/// Time left from the step times the last build of the same image
/// recorded: the rest of step `current` (which has run `in_step`) and the
/// steps after it. `recorded` is that build's steps, by name, in order.
pub fn by_record(recorded: &[(String, Duration)], steps: &[String], current: usize, in_step: Duration) -> Estimate {
    if recorded.is_empty() {
        return Estimate::NoBasis("first build of it here");
    }
    if recorded.len() != steps.len() || recorded.iter().zip(steps).any(|((n, _), s)| n != s) {
        return Estimate::NoBasis("its steps changed");
    }
    let now = recorded.get(current).map_or(Duration::ZERO, |r| r.1);
    let after: Duration = recorded.iter().skip(current + 1).map(|r| r.1).sum();
    // A step running longer than last time: the rest of it is unknown,
    // the later steps are not.
    Estimate::Left(now.saturating_sub(in_step) + after)
}

/// `ELAPSED elapsed, ESTIMATE`.
pub fn timing(elapsed: Duration, est: &Estimate) -> String {
    let left = match est {
        Estimate::Left(d) => format!("about {} left", clock(*d)),
        Estimate::TooEarly => "no estimate yet".to_string(),
        Estimate::NoBasis(why) => format!("no estimate ({why})"),
    };
    format!("{} elapsed, {left}", clock(elapsed))
}

/// The step times file a build leaves in its image (`SECS<TAB>STEP` lines).
pub fn render_times(times: &[(String, Duration)]) -> String {
    times
        .iter()
        .map(|(n, d)| format!("{}\t{}\n", d.as_secs(), n.replace(['\t', '\n'], " ")))
        .collect()
}

/// Reads [`render_times`]' text; a malformed file is no record.
pub fn parse_times(text: &str) -> Vec<(String, Duration)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((s, n)) = line.split_once('\t') else {
            return Vec::new();
        };
        let Ok(s) = s.parse::<u64>() else { return Vec::new() };
        out.push((n.to_string(), Duration::from_secs(s)));
    }
    out
}

/// `rchar` and `wchar` of a `/proc/PID/io` text.
pub fn parse_proc_io(text: &str) -> Option<(u64, u64)> {
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((field("rchar:")?, field("wchar:")?))
}

/// The first start's unpack (`umoci unpack`) in its two phases: it writes
/// the layers' files (`wchar` up to their expanded size, reading the
/// compressed blobs), then reads every file back for its manifest. The
/// work is counted as bytes written plus bytes read against
/// `2 × expanded + compressed`. Pure: the line for one sample.
pub fn unpack_line(elapsed: Duration, io: Option<(u64, u64)>, sizes: crate::storage::layercheck::Sizes) -> String {
    let total = sizes.expanded.saturating_mul(2).saturating_add(sizes.compressed);
    let Some((rchar, wchar)) = io else {
        return format!(
            "preparing image: unpacking {} of layers, {}",
            crate::display::human_size(sizes.expanded),
            timing(elapsed, &Estimate::NoBasis("progress unreadable"))
        );
    };
    let done = rchar.saturating_add(wchar);
    // The blobs are read once while the files are written; reading more
    // is the read-back (the expanded size counts the tar headers too, so
    // the bytes written never quite reach it).
    let what = if rchar <= sizes.compressed.saturating_add(sizes.compressed / 20) {
        format!(
            "unpacking the layers, {} of {}",
            crate::display::human_size(wchar),
            crate::display::human_size(sizes.expanded)
        )
    } else {
        "recording the unpacked files' digests".to_string()
    };
    format!(
        "preparing image: {what}, {}",
        timing(elapsed, &by_rate(elapsed, done, total))
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::layercheck::Sizes;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn clock_reads_as_minutes_and_hours() {
        assert_eq!(clock(secs(0)), "0:00");
        assert_eq!(clock(secs(65)), "1:05");
        assert_eq!(clock(secs(3600 + 62)), "1:01:02");
    }

    #[test]
    fn rate_estimates_need_a_basis_and_a_measurement() {
        assert_eq!(by_rate(secs(60), 10, 0), Estimate::NoBasis("size unknown"));
        // Too early: under 3 seconds, or under 2 % done.
        assert_eq!(by_rate(secs(2), 50, 100), Estimate::TooEarly);
        assert_eq!(by_rate(secs(30), 1, 100), Estimate::TooEarly);
        // A quarter in 10 s: 30 s left.
        assert_eq!(by_rate(secs(10), 25, 100), Estimate::Left(secs(30)));
        assert!(matches!(by_rate(secs(10), 100, 100), Estimate::NoBasis(_)));
    }

    #[test]
    fn record_estimates_follow_the_last_build_of_the_same_steps() {
        let steps = vec!["debootstrap".to_string(), "install curl".into(), "pack".into()];
        let rec: Vec<(String, Duration)> = steps.iter().cloned().zip([secs(300), secs(60), secs(30)]).collect();
        assert_eq!(by_record(&rec, &steps, 0, secs(100)), Estimate::Left(secs(290)));
        assert_eq!(by_record(&rec, &steps, 2, secs(10)), Estimate::Left(secs(20)));
        // Longer than last time: only the later steps are counted.
        assert_eq!(by_record(&rec, &steps, 1, secs(500)), Estimate::Left(secs(30)));
        assert!(matches!(by_record(&[], &steps, 0, secs(0)), Estimate::NoBasis(w) if w.contains("first build")));
        let other = vec!["debootstrap".to_string(), "install git".into(), "pack".into()];
        assert!(matches!(by_record(&rec, &other, 0, secs(0)), Estimate::NoBasis(w) if w.contains("changed")));
        // The record survives its file.
        assert_eq!(parse_times(&render_times(&rec)), rec);
        assert!(parse_times("x\tdebootstrap\n").is_empty());
    }

    #[test]
    fn unpack_lines_name_the_phase_and_what_is_left() {
        let sizes = Sizes {
            compressed: 100 << 20,
            expanded: 250 << 20,
        };
        let text = "rchar: 52428800\nwchar: 131072000\nsyscr: 1\nsyscw: 2\n";
        let io = parse_proc_io(text);
        assert_eq!(io, Some((50 << 20, 125 << 20)));
        // 175 of 600 MiB in 35 s: 85 s left.
        let l = unpack_line(secs(35), io, sizes);
        assert_eq!(
            l,
            "preparing image: unpacking the layers, 125 MiB of 250 MiB, 0:35 elapsed, about 1:25 left"
        );
        let l = unpack_line(secs(1), Some((1 << 20, 1 << 20)), sizes);
        assert!(l.ends_with(", 0:01 elapsed, no estimate yet"), "{l}");
        // Written out: the files are read back for umoci's manifest.
        let l = unpack_line(secs(60), Some((200 << 20, 250 << 20)), sizes);
        assert!(
            l.starts_with("preparing image: recording the unpacked files' digests, 1:00 elapsed, about 0:2"),
            "{l}"
        );
        let l = unpack_line(secs(9), None, sizes);
        assert!(l.contains("no estimate (progress unreadable)"), "{l}");
        assert!(unpack_line(secs(9), Some((0, 0)), Sizes::default()).contains("no estimate (size unknown)"));
    }
}
