//! Every local `#[allow(…)]` / `#![allow(…)]` in `src/` and `bin/` says
//! why: a plain `//` comment on the same line (after the attribute) or on
//! the line just before it (doc comments, `///` and `//!`, describe the
//! item, not the allowance, and do not count). Pure: reads the source tree
//! only.

use std::path::{Path, PathBuf};

/// The `.rs` files below `root`, in name order.
fn sources(root: &Path) -> Vec<PathBuf> {
    let mut todo = vec![root.to_path_buf()];
    let mut out = Vec::new();
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display())) {
            let p = entry.expect("directory entry").path();
            match p.is_dir() {
                true => todo.push(p),
                false if p.extension().is_some_and(|x| x == "rs") => out.push(p),
                false => {}
            }
        }
    }
    out.sort();
    out
}

/// A plain `//` comment (not `///` nor `//!`) with some text.
fn is_reason(comment: &str) -> bool {
    let Some(rest) = comment.trim_start().strip_prefix("//") else {
        return false;
    };
    !rest.starts_with('/') && !rest.starts_with('!') && !rest.trim().is_empty()
}

/// The 1-based lines of `text` holding an `allow` attribute with no reason.
fn unexplained(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let Some(attr) = t.strip_prefix("#![allow(").or_else(|| t.strip_prefix("#[allow(")) else {
            continue;
        };
        let same = attr.find("//").is_some_and(|at| is_reason(&attr[at..]));
        let before = i > 0 && is_reason(lines[i - 1]);
        if !same && !before {
            out.push(i + 1);
        }
    }
    out
}

/// Allowances known to lack a reason and left for now, as (file, the
/// start of the item under the attribute): none today.
const PENDING: &[(&str, &str)] = &[];

#[test]
fn every_allow_has_a_reason() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = sources(&root.join("src"));
    files.extend(sources(&root.join("bin")));
    assert!(files.len() > 50, "found only {} files", files.len());
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        for n in unexplained(&text) {
            let rel = f.strip_prefix(root).unwrap_or(f);
            let item = text.lines().nth(n).unwrap_or("").trim_start();
            if PENDING.iter().any(|(p, i)| rel == Path::new(p) && item.starts_with(i)) {
                continue;
            }
            bad.push(format!(
                "{}:{n}: {}",
                rel.display(),
                text.lines().nth(n - 1).unwrap_or("").trim()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "`allow` attributes with no reason (add a `// why` on the line or the line before):\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn a_reason_is_a_plain_comment_on_the_line_or_the_one_before() {
    let text = "#[allow(dead_code)] // used by the tests\n\
                // one argument per script parameter\n\
                #[allow(clippy::too_many_arguments)]\n\
                /// A doc comment is about the item.\n\
                #[allow(unused_imports)]\n\
                fn f() {}\n\
                    #![allow(dead_code)]\n\
                #[allow(dead_code)] //\n\
                #[allow(dead_code)] /// doc\n\
                #[cfg(test)]\n\
                #[allow(dead_code)]\n";
    assert_eq!(unexplained(text), [5, 7, 8, 9, 11]);
}
