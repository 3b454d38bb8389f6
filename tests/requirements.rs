//! Every requirement of docs/requirements.md marked `tested` is cited by
//! a test, and every ID a test cites is in that table (issue 53: docs the
//! tests keep true). A test cites an ID (`SR-3`, `FR-12`, `DX-2`, `OR-7`)
//! in the comment lines directly above its `#[test]` (with the attributes
//! between them) or in its name (`sr_3_…`). The rows not marked `tested`
//! are printed with their reasons, and their number is held here
//! (`UNTESTED`), so closing one or adding one is a deliberate edit.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Rows of docs/requirements.md marked `partial:` or `not tested:`.
const UNTESTED: usize = 6;

const FAMILIES: &[&str] = &["SR", "FR", "DX", "OR"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[derive(Debug, PartialEq, Eq)]
enum Status {
    Tested,
    /// `partial` or `not tested`, and the reason.
    Open(String, String),
}

/// The table's rows: ID → status. Panics naming the line of a malformed row.
fn requirements(text: &str) -> BTreeMap<String, Status> {
    let mut out = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if !line.trim_start().starts_with('|') || cells.len() < 3 || ids_in(cells[0]) != [cells[0]] {
            continue;
        }
        let status = cells[cells.len() - 1];
        let status = if status == "tested" {
            Status::Tested
        } else {
            let (kind, why) = status
                .split_once(':')
                .unwrap_or_else(|| panic!("docs/requirements.md:{}: status {status:?} has no reason", n + 1));
            let kind = kind.trim();
            assert!(
                kind == "partial" || kind == "not tested",
                "docs/requirements.md:{}: status {status:?} is none of tested, partial:, not tested:",
                n + 1
            );
            assert!(
                !why.trim().is_empty(),
                "docs/requirements.md:{}: {} gives no reason",
                n + 1,
                cells[0]
            );
            Status::Open(kind.to_string(), why.trim().to_string())
        };
        let before = out.insert(cells[0].to_string(), status);
        assert!(before.is_none(), "docs/requirements.md:{}: {} twice", n + 1, cells[0]);
    }
    out
}

/// The requirement IDs `text` names, in order (an ID is a family, `-`,
/// digits, not part of a longer word).
fn ids_in(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for (i, _) in text.match_indices('-') {
        // Bytes, not `&text[..]`: the two before the dash may end a
        // character of several bytes.
        if i < 2
            || (i > 2 && b[i - 3].is_ascii_alphanumeric())
            || !FAMILIES.iter().any(|f| f.as_bytes() == &b[i - 2..i])
        {
            continue;
        }
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let end = i + 1 + digits;
        if digits > 0 && !b.get(end).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            out.push(&text[i - 2..end]);
        }
    }
    out
}

/// The IDs a test's name cites (`sr_3_…`, `…_or_7`).
fn ids_in_name(name: &str) -> Vec<String> {
    let words: Vec<&str> = name.split('_').collect();
    words
        .windows(2)
        .filter(|w| FAMILIES.contains(&w[0].to_uppercase().as_str()) && w[1].bytes().all(|c| c.is_ascii_digit()))
        .filter(|w| !w[1].is_empty())
        .map(|w| format!("{}-{}", w[0].to_uppercase(), w[1]))
        .collect()
}

/// The test functions of one source file with the IDs each cites: the
/// comment lines (and attributes) directly above its `#[test]`, and its name.
fn cited_by_tests(source: &str) -> Vec<(String, Vec<String>)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() != "#[test]" {
            continue;
        }
        let Some(name) = lines[i + 1..].iter().find_map(|l| {
            let rest = &l[l.find("fn ")? + 3..];
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
            Some(rest[..end].to_string())
        }) else {
            continue;
        };
        let mut ids = ids_in_name(&name);
        for above in lines[..i].iter().rev().map(|l| l.trim()) {
            if above.starts_with("//") {
                ids.extend(ids_in(above).into_iter().map(String::from));
            } else if !above.starts_with("#[") {
                break;
            }
        }
        out.push((name, ids));
    }
    out
}

/// Rust files under `dir` (not a build's or the fuzz package's output).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().to_string();
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            if !name.starts_with('.') && name != "target" && name != "corpus" && name != "artifacts" {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// Every test of src/, bin/ and tests/: (file relative to the root, test
/// name, IDs cited).
fn all_citations() -> Vec<(String, String, Vec<String>)> {
    let mut files = Vec::new();
    for d in ["src", "bin", "tests"] {
        rust_files(&root().join(d), &mut files);
    }
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(root()).unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&f).unwrap();
        for (name, ids) in cited_by_tests(&text) {
            out.push((rel.clone(), name, ids));
        }
    }
    out
}

/// What is wrong between the table and the citations: `tested` rows no
/// test cites, and cited IDs the table lacks (with the citing test).
fn mismatches(reqs: &BTreeMap<String, Status>, cites: &[(String, String, Vec<String>)]) -> Vec<String> {
    let cited: BTreeSet<&str> = cites.iter().flat_map(|c| c.2.iter().map(String::as_str)).collect();
    let mut out: Vec<String> = reqs
        .iter()
        .filter(|(id, s)| **s == Status::Tested && !cited.contains(id.as_str()))
        .map(|(id, _)| format!("{id} is marked tested but no test cites it"))
        .collect();
    for (file, name, ids) in cites {
        for id in ids.iter().filter(|id| !reqs.contains_key(id.as_str())) {
            out.push(format!(
                "{file}: {name} cites {id}, which docs/requirements.md does not list"
            ));
        }
    }
    out
}

fn table() -> BTreeMap<String, Status> {
    requirements(&std::fs::read_to_string(root().join("docs/requirements.md")).unwrap())
}

#[test]
fn every_tested_requirement_is_cited_and_every_citation_is_a_requirement() {
    let reqs = table();
    let bad = mismatches(&reqs, &all_citations());
    assert!(
        bad.is_empty(),
        "docs/requirements.md and the tests disagree:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_table_numbers_each_family_without_gaps() {
    let reqs = table();
    for fam in FAMILIES {
        let mut nums: Vec<u32> = reqs
            .keys()
            .filter_map(|id| id.strip_prefix(fam)?.strip_prefix('-')?.parse().ok())
            .collect();
        nums.sort_unstable();
        let want: Vec<u32> = (1..=nums.len() as u32).collect();
        assert_eq!(nums, want, "{fam}-… in docs/requirements.md");
    }
}

#[test]
fn the_requirements_not_tested_are_listed_with_their_reasons() {
    let reqs = table();
    let open: Vec<(&String, &String, &String)> = reqs
        .iter()
        .filter_map(|(id, s)| match s {
            Status::Open(kind, why) => Some((id, kind, why)),
            Status::Tested => None,
        })
        .collect();
    println!("{} requirements, {} not fully tested:", reqs.len(), open.len());
    for (id, kind, why) in &open {
        println!("{id} ({kind}): {why}");
    }
    assert_eq!(
        open.len(),
        UNTESTED,
        "the rows not marked tested changed: update UNTESTED in tests/requirements.rs (see docs/requirements.md)"
    );
}

/// OR-4: every security requirement marked tested is performed by an
/// integration test (tests/it/, the real CLI on runsc, its filesystem and
/// network), not only by unit tests.
#[test]
fn security_requirements_are_tested_end_to_end() {
    let reqs = table();
    let cites = all_citations();
    let missing: Vec<&String> = reqs
        .iter()
        .filter(|(id, s)| id.starts_with("SR-") && **s == Status::Tested)
        .map(|(id, _)| id)
        .filter(|id| {
            !cites
                .iter()
                .any(|(f, _, ids)| f.starts_with("tests/it/") && ids.contains(id))
        })
        .collect();
    assert!(missing.is_empty(), "no integration test cites {missing:?}");
}

#[test]
fn the_detector_catches_a_missing_citation_and_an_unknown_id() {
    let doc = "| ID | What | Status |\n| --- | --- | --- |\n| SR-1 | a | tested |\n\
               | SR-2 | b | tested |\n| FR-1 | c | partial: half of it |\n";
    let reqs = requirements(doc);
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs["FR-1"], Status::Open("partial".into(), "half of it".into()));
    // SR-1 cited in a doc comment above an attribute; SR-2 only in a comment
    // that a blank line separates from the test, and in a test of nothing;
    // OR-9 is not in the table.
    let src = "/// SR-1: the first.\n#[test]\n#[ignore]\nfn one() {}\n\n// SR-2\n\n#[test]\nfn two() {}\n\
               // Covers OR-9, ERROR-2 and FOR-3.\n#[test]\nfn three() {}\n";
    let cites: Vec<(String, String, Vec<String>)> = cited_by_tests(src)
        .into_iter()
        .map(|(n, ids)| ("x.rs".to_string(), n, ids))
        .collect();
    assert_eq!(cites[0].2, ["SR-1"]);
    assert!(cites[1].2.is_empty());
    assert_eq!(cites[2].2, ["OR-9"]);
    assert_eq!(
        mismatches(&reqs, &cites),
        [
            "SR-2 is marked tested but no test cites it",
            "x.rs: three cites OR-9, which docs/requirements.md does not list",
        ]
    );
    // Cited by name, it is covered.
    let named = cited_by_tests("#[test]\nfn sr_2_holds() {}\n");
    assert_eq!(named[0].1, ["SR-2"]);
    assert_eq!(ids_in("FR-18/FR-20, SR-3."), ["FR-18", "FR-20", "SR-3"]);
}
