//! The fuzz corpora as ordinary tests (docs/fuzzing.md): every committed
//! seed in tests/fuzz/corpus/TARGET/ and every crash input in
//! tests/fuzz/artifacts/TARGET/, fed to the same `lazaret::fuzzing`
//! function the coverage-guided harness (tests/fuzz) runs. A failure
//! names each file that panicked.

use std::panic;
use std::path::{Path, PathBuf};

fn dirs(under: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(under);
    let Ok(rd) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd.map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    v.sort();
    v
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Feeds every file under `under`/TARGET to TARGET; the files that panic.
fn replay(under: &str) -> (usize, Vec<String>) {
    let (mut ran, mut failed) = (0, Vec::new());
    for dir in dirs(under) {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let f = lazaret::fuzzing::target(&name)
            .unwrap_or_else(|| panic!("{}: no fuzz target {name:?} in lazaret::fuzzing", dir.display()));
        for file in files(&dir) {
            let data = std::fs::read(&file).unwrap();
            ran += 1;
            if panic::catch_unwind(|| f(&data)).is_err() {
                failed.push(file.display().to_string());
            }
        }
    }
    (ran, failed)
}

#[test]
fn every_target_has_seeds() {
    let have: Vec<String> = dirs("tests/fuzz/corpus")
        .iter()
        .filter(|d| !files(d).is_empty())
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for (name, _) in lazaret::fuzzing::TARGETS {
        assert!(have.iter().any(|h| h == name), "no seeds in tests/fuzz/corpus/{name}/");
    }
}

#[test]
fn corpora_replay_without_a_panic() {
    let (ran, failed) = replay("tests/fuzz/corpus");
    assert!(ran > 0, "no corpus files found");
    assert!(
        failed.is_empty(),
        "fuzz corpus inputs that fail:\n{}",
        failed.join("\n")
    );
}

#[test]
fn crash_inputs_stay_fixed() {
    let (_, failed) = replay("tests/fuzz/artifacts");
    assert!(
        failed.is_empty(),
        "fuzz crash inputs that fail again:\n{}",
        failed.join("\n")
    );
}
