//! No import circle between top-level modules.
//!
//! A top-level module is a file or a folder directly under `src/` (other
//! than `main.rs` and `lib.rs`). Module A depends on module B when any file
//! of A names `crate::B` (in a path or in a `use crate::{…}` group; comments
//! and doc links do not count). The test fails on any cycle in that graph
//! and prints it, with a file and line for each step. Pure: reads the
//! source tree only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A reference to another top-level module: where it is written.
#[derive(Clone, Debug)]
struct Site {
    file: PathBuf,
    line: usize,
}

type Graph = BTreeMap<String, BTreeMap<String, Site>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Top-level module name -> its files.
fn top_level_modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut mods: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component");
        let first = first.as_os_str().to_string_lossy().to_string();
        let name = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        if rel.components().count() == 1 && (name == "main" || name == "lib") {
            continue;
        }
        if name == "bin" {
            continue;
        }
        mods.entry(name).or_default().push(f);
    }
    mods
}

/// The code of a line without its comment (`//` outside a string).
fn code_of(line: &str) -> &str {
    let t = line.trim_start();
    if t.starts_with("//") {
        return "";
    }
    let mut in_str = false;
    let mut prev = ' ';
    let b = line.as_bytes();
    for (i, c) in line.char_indices() {
        if c == '"' && prev != '\\' {
            in_str = !in_str;
        }
        if !in_str && c == '/' && b.get(i + 1) == Some(&b'/') {
            return &line[..i];
        }
        prev = c;
    }
    line
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every top-level module a piece of code names after `crate::`, with the
/// line it is on (1-based, relative to `text`).
fn crate_refs(text: &str) -> Vec<(String, usize)> {
    let code: Vec<&str> = text.lines().map(code_of).collect();
    let joined = code.join("\n");
    let line_of = |pos: usize| joined[..pos].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = joined[from..].find("crate::") {
        let at = from + i;
        from = at + "crate::".len();
        // `foo_crate::x` or `$crate::x` is not ours.
        if joined[..at]
            .chars()
            .next_back()
            .is_some_and(|c| is_ident(c) || c == '$')
        {
            continue;
        }
        let rest = &joined[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::c, d::{e, f}}`: the names at depth one.
            let mut depth = 1;
            let mut expect_name = true;
            let mut name = String::new();
            for (j, c) in group.char_indices() {
                if depth == 1 && expect_name && is_ident(c) {
                    name.push(c);
                    continue;
                }
                if !name.is_empty() {
                    let n = std::mem::take(&mut name);
                    if n != "self" {
                        out.push((n, line_of(from + 1 + j)));
                    }
                    expect_name = false;
                }
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => expect_name = true,
                    _ => {}
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            if !name.is_empty() {
                out.push((name, line_of(at)));
            }
        }
    }
    out
}

fn graph(src: &Path) -> Graph {
    let mods = top_level_modules(src);
    let mut g = Graph::new();
    for (m, files) in &mods {
        let deps = g.entry(m.clone()).or_default();
        for f in files {
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
            for (name, line) in crate_refs(&text) {
                if &name != m && mods.contains_key(&name) {
                    deps.entry(name).or_insert(Site { file: f.clone(), line });
                }
            }
        }
    }
    g
}

/// One cycle per strongly connected component of more than one module,
/// each as the list of modules along it (first repeated at the end).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative enough for a few dozen modules.
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        sccs: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g[v].keys() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.sccs.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    // In each component, the shortest way from its first module back to
    // itself (breadth-first inside the component).
    t.sccs
        .iter()
        .map(|comp| {
            let inside: BTreeSet<&str> = comp.iter().copied().collect();
            let start = *inside.iter().next().unwrap();
            let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut end = None;
            'bfs: while let Some(v) = queue.pop_front() {
                for w in g[v].keys().map(String::as_str).filter(|w| inside.contains(w)) {
                    if w == start {
                        end = Some(v);
                        break 'bfs;
                    }
                    if !prev.contains_key(w) {
                        prev.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            let mut path = vec![start.to_string()];
            let mut v = end.expect("a cycle in a component");
            while v != start {
                path.push(v.to_string());
                v = prev[v];
            }
            path.push(start.to_string());
            path.reverse();
            path
        })
        .collect()
}

fn describe(g: &Graph, cycle: &[String], root: &Path) -> String {
    let mut s = cycle.join(" → ");
    for w in cycle.windows(2) {
        let site = &g[&w[0]][&w[1]];
        let file = site.file.strip_prefix(root).unwrap_or(&site.file);
        s.push_str(&format!("\n    {} → {}: {}:{}", w[0], w[1], file.display(), site.line));
    }
    s
}

#[test]
fn no_cycle_between_top_level_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let g = graph(&root.join("src"));
    assert!(g.len() > 5, "found only {} top-level modules under src/", g.len());
    let found = cycles(&g);
    let text: Vec<String> = found.iter().map(|c| describe(&g, c, root)).collect();
    assert!(
        found.is_empty(),
        "import circles between top-level modules of src/ (move the shared item into the module it belongs to):\n  {}",
        text.join("\n  ")
    );
}

#[test]
fn references_are_read_from_paths_and_use_groups_not_comments() {
    let text = "use crate::a::X;\n\
                use crate::{b,c::{D, E}, \n  f::G, self};\n\
                // crate::h::I in a comment\n\
                /// [`crate::i`] in a doc link\n\
                let s = \"//\"; crate::j::k(); // crate::l\n\
                other_crate::m::n(); $crate::o::p();\n";
    let names: Vec<(String, usize)> = crate_refs(text);
    let just: Vec<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(just, ["a", "b", "c", "f", "j"]);
    assert_eq!(names.iter().find(|(n, _)| n == "f").unwrap().1, 3);
}

#[test]
fn a_cycle_is_found_and_named() {
    let site = || Site {
        file: PathBuf::from("src/x.rs"),
        line: 1,
    };
    let mut g = Graph::new();
    for (a, b) in [
        ("cli", "coordinator"),
        ("coordinator", "gc"),
        ("gc", "state"),
        ("state", "cli"),
        ("state", "sys"),
    ] {
        g.entry(a.to_string()).or_default().insert(b.to_string(), site());
        g.entry(b.to_string()).or_default();
    }
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["cli", "coordinator", "gc", "state", "cli"]]);
    g.get_mut("state").unwrap().remove("cli");
    assert!(cycles(&g).is_empty());
}

#[test]
fn folders_and_files_are_top_level_modules() {
    let dir = std::env::temp_dir().join(format!("lazaret-module-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("net")).unwrap();
    std::fs::write(dir.join("main.rs"), "use crate::net;\n").unwrap();
    std::fs::write(dir.join("lib.rs"), "pub mod net;\npub mod view;\n").unwrap();
    std::fs::write(dir.join("net/mod.rs"), "mod policy;\n").unwrap();
    std::fs::write(dir.join("net/policy.rs"), "use super::x;\nuse crate::view::fs;\n").unwrap();
    std::fs::write(dir.join("view.rs"), "mod fs;\n").unwrap();
    std::fs::create_dir_all(dir.join("view")).unwrap();
    std::fs::write(dir.join("view/fs.rs"), "fn f() { crate::net::policy::g() }\n").unwrap();
    let g = graph(&dir);
    assert_eq!(g.keys().collect::<Vec<_>>(), ["net", "view"]);
    let found = cycles(&g);
    assert_eq!(found, vec![vec!["net", "view", "net"]]);
    let text = describe(&g, &found[0], &dir);
    assert!(text.contains("net → view: net/policy.rs:2"), "{text}");
    assert!(text.contains("view → net: view/fs.rs:1"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
