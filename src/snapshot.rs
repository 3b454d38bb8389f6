//! Snapshot tests of user-facing text: `check(name, actual)` compares
//! `actual` with tests/snapshots/NAME (a plain file). With
//! `LAZARET_BLESS=1` it writes the file instead, so a deliberate change
//! of the text is one command and a reviewed diff:
//!
//! ```text
//! LAZARET_BLESS=1 cargo test --release --features fault-injection --lib snapshot
//! ```

use std::path::PathBuf;

/// The expected file of snapshot `name`.
fn path(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots")).join(name)
}

/// Asserts that `actual` is the snapshot `name` (or writes it when blessing).
pub fn check(name: &str, actual: &str) {
    let p = path(name);
    if std::env::var_os("LAZARET_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&p, actual).unwrap_or_else(|e| panic!("cannot write {}: {e}", p.display()));
        return;
    }
    let expected = std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "snapshot {} is missing ({e}); write it with LAZARET_BLESS=1 and review it",
            p.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        panic!(
            "snapshot {} differs from line {}:\n--- expected\n{}\n--- actual\n{}\n(rerun with LAZARET_BLESS=1 if the change is meant)",
            p.display(),
            first + 1,
            expected.lines().skip(first).take(5).collect::<Vec<_>>().join("\n"),
            actual.lines().skip(first).take(5).collect::<Vec<_>>().join("\n"),
        );
    }
}
