//! Every source path the documentation cites exists (issue 53: docs the
//! tests keep true). A path is cited as `src/…`, `bin/…`, `tests/…`,
//! `scripts/…`, `protocol/…` or `docs/…` from the repository root; as a
//! path under `src/` whose first directory is one of `src/`'s (tables
//! say "paths are under `src/`": `client/start.rs`); or as a bare Rust
//! file name (`trust.rs`), which must name a file somewhere in the tree.
//! A rename or a split that leaves a document behind fails here, naming
//! the document, the line and the path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Paths in examples of a user's repository or of command output, not of
/// this one (the hook, escalation and `cmd:` examples), and the fuzzing
/// build's output (with what is below them).
const EXAMPLES: &[&str] = &[
    "bin/tool",
    "build.rs",
    "scripts/a.sh",
    "scripts/hooks/pre-commit",
    "scripts/lint.sh",
    "scripts/more.sh",
    "scripts/pre-commit",
    "scripts/version.sh",
    "scripts/x.sh",
    "src/.env",
    "src/a/b",
    "src/api",
    "src/app",
    "src/app/lib",
    "src/other",
    "src/project",
    "src/sub",
    "src/web",
    "tests/fuzz/target",
];

const ROOTS: &[&str] = &["src/", "bin/", "tests/", "scripts/", "protocol/", "docs/"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files of the repository (not the build's or the fuzz
/// corpus's).
fn documents() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![root()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name();
            let name = name.to_string_lossy();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                if !name.starts_with('.') && name != "target" && name != "corpus" && name != "artifacts" {
                    todo.push(p);
                }
            } else if name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// The paths a line cites, as written (trailing sentence dots removed).
fn cited(line: &str, src_dirs: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for tok in line.split(|c: char| !is_path_char(c)) {
        let tok = tok.trim_end_matches('.');
        if tok.is_empty() || tok.starts_with('/') || tok.starts_with('.') {
            continue;
        }
        // Placeholders (`tests/fuzz/corpus/TARGET/`) are not paths.
        if tok
            .split('/')
            .any(|c| c.len() > 1 && c.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        {
            continue;
        }
        let first = tok.split('/').next().unwrap_or("");
        let from_root = ROOTS.iter().any(|r| tok.starts_with(r));
        let under_src = tok.contains('/') && tok.ends_with(".rs") && src_dirs.contains(first);
        let bare_rs = !tok.contains('/') && tok.ends_with(".rs") && tok.len() > 3;
        if from_root || under_src || bare_rs {
            out.push(tok.to_string());
        }
    }
    out
}

fn all_file_names(dir: &Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            let n = e.file_name();
            if n != "target" && n != "corpus" && n != "artifacts" {
                all_file_names(&e.path(), out);
            }
        } else {
            out.insert(e.file_name().to_string_lossy().into_owned());
        }
    }
}

fn exists(p: &str, names: &BTreeSet<String>) -> bool {
    let p_ = p.trim_end_matches('/');
    if EXAMPLES.iter().any(|e| p_ == *e || p_.starts_with(&format!("{e}/"))) {
        return true;
    }
    if !p.contains('/') {
        return names.contains(p);
    }
    root().join(p).exists() || root().join("src").join(p).exists()
}

#[test]
fn every_source_path_the_docs_cite_exists() {
    let src_dirs: BTreeSet<String> = std::fs::read_dir(root().join("src"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = BTreeSet::new();
    for d in ["src", "bin", "tests", "scripts", "protocol"] {
        all_file_names(&root().join(d), &mut names);
    }
    let docs = documents();
    assert!(docs.len() >= 10, "the documents were found: {docs:?}");
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for (i, line) in text.lines().enumerate() {
            for p in cited(line, &src_dirs) {
                checked += 1;
                if !exists(&p, &names) {
                    let rel = doc.strip_prefix(root()).unwrap_or(doc);
                    missing.push(format!("{}:{}: {p}", rel.display(), i + 1));
                }
            }
        }
    }
    assert!(checked > 200, "paths were found to check: {checked}");
    assert!(
        missing.is_empty(),
        "documents cite paths that do not exist (fix the document, or add a user-repository example to EXAMPLES):\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_path_that_is_gone_is_reported() {
    let src_dirs: BTreeSet<String> = ["client".to_string()].into();
    let names: BTreeSet<String> = ["trust.rs".to_string()].into();
    let line = "see `src/net/policy.rs`, `client/cli.rs`, `setattr.rs` and `trust.rs`; /usr/bin/node; tests/fuzz/corpus/TARGET/.";
    let got = cited(line, &src_dirs);
    assert_eq!(got, ["src/net/policy.rs", "client/cli.rs", "setattr.rs", "trust.rs"]);
    let gone: Vec<&String> = got.iter().filter(|p| !exists(p, &names)).collect();
    assert_eq!(gone, ["src/net/policy.rs", "client/cli.rs", "setattr.rs"]);
}
