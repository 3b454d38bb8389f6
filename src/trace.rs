//! Startup trace (issue 32): where a cold start spends its time. Each
//! startup step of the coordinator and the supervisor logs one line,
//! `startup-trace ROLE STEP MICROSECONDS`, to the coordinator log when it
//! ends (CLOCK_MONOTONIC, one clock for every process of the machine).
//! With `LAZARET_TRACE_STARTUP=1` the CLI that started the Domain prints
//! them once the Domain is ready, as milliseconds since it began the
//! start, each with the time the step took (`render`, pure).

/// The marker of a trace line in the coordinator log.
pub const MARK: &str = "startup-trace ";

/// The environment variable that asks the starting CLI for the trace.
pub const ENV: &str = "LAZARET_TRACE_STARTUP";

/// Microseconds on CLOCK_MONOTONIC.
pub fn now_us() -> u64 {
    crate::sys::monotonic_us()
}

/// Logs that `step` of `role` ended now.
pub fn step(role: &str, step: &str) {
    log::info!("{MARK}{role} {} {}", step.replace(' ', "_"), now_us());
}

/// The trace lines of `log` at or after `t0` (microseconds), in time
/// order, one per step: `+TOTAL ms  (+STEP ms)  ROLE  STEP`. Lines that
/// are not trace lines, or do not parse, are skipped.
pub fn render(log: &str, t0: u64) -> String {
    let mut steps: Vec<(u64, &str, String)> = log
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find(MARK)? + MARK.len()..];
            let mut w = rest.split_whitespace();
            let (role, step, at) = (w.next()?, w.next()?, w.next()?.parse::<u64>().ok()?);
            (at >= t0).then(|| (at, role, step.replace('_', " ")))
        })
        .collect();
    steps.sort_by_key(|s| s.0);
    let mut out = String::new();
    let mut last = t0;
    for (at, role, step) in steps {
        out.push_str(&format!(
            "{:>9.1} ms  (+{:>7.1})  {:<12} {}\n",
            (at - t0) as f64 / 1000.0,
            (at - last) as f64 / 1000.0,
            role,
            crate::display::escape(&step)
        ));
        last = at;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_orders_steps_and_skips_other_lines() {
        let log = "[2026 INFO] hello\n\
                   [x INFO lazaret] startup-trace supervisor views_mounted 1500\n\
                   [x INFO lazaret] startup-trace coordinator image_resolved 1200\n\
                   startup-trace coordinator broken notanumber\n\
                   startup-trace coordinator before_start 900\n";
        let out = render(log, 1000);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].contains("0.2 ms") && lines[0].contains("coordinator") && lines[0].ends_with("image resolved")
        );
        assert!(lines[1].contains("0.5 ms") && lines[1].contains("(+    0.3)") && lines[1].ends_with("views mounted"));
    }
}
