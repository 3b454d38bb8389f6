//! The wire and the model agree (issue 53): every variant of every message
//! enum in `src/wire/` (an enum named `…Msg` or `…Cmd`) is in
//! protocol/README.md's table of model actions and the messages that carry
//! them, or in its table of messages outside the model with a reason; every
//! message those tables name exists; and every action the first table names
//! is defined in protocol/Lazaret.tla. A new message added without its row
//! fails here, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Message enums and their variants, from the source text: `pub enum
/// NameMsg {` to the `}` at the start of a line; a variant is a line
/// indented four spaces starting with a capital letter.
fn enums_of(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let Some(rest) = l.strip_prefix("pub enum ") else {
            continue;
        };
        let Some(name) = rest.strip_suffix(" {") else { continue };
        if !(name.ends_with("Msg") || name.ends_with("Cmd")) {
            continue;
        }
        let mut vs = BTreeSet::new();
        for l in lines.by_ref() {
            if l.starts_with('}') {
                break;
            }
            let Some(v) = l.strip_prefix("    ") else { continue };
            if v.starts_with(|c: char| c.is_ascii_uppercase()) {
                let id: String = v
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                vs.insert(id);
            }
        }
        out.insert(name.to_string(), vs);
    }
    out
}

fn wire_enums() -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(root().join("src/wire")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            out.extend(enums_of(&std::fs::read_to_string(&p).unwrap()));
        }
    }
    out
}

/// The backticked spans of `s`.
fn ticks(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// The backticked spans of a cell outside parentheses (`Expire` (from
/// `Prompting`): only `Expire`).
fn ticks_outside_parens(s: &str) -> Vec<String> {
    let (mut depth, mut in_tick, mut cur, mut out) = (0i32, false, String::new(), Vec::new());
    for c in s.chars() {
        match c {
            '`' if in_tick => {
                if depth == 0 {
                    out.push(std::mem::take(&mut cur));
                }
                cur.clear();
                in_tick = false;
            }
            '`' => in_tick = true,
            _ if in_tick => cur.push(c),
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
    }
    out
}

fn cells(row: &str) -> Vec<&str> {
    row.trim().trim_matches('|').split(" | ").collect()
}

struct Tables {
    /// (actions cell, messages cell) of each row of the first table.
    actions: Vec<(String, String)>,
    /// The first cell of each row of the second table.
    outside: Vec<String>,
}

fn tables(readme: &str) -> Tables {
    let start = readme
        .find("### Model actions and the messages that carry them")
        .expect("protocol/README.md has its message table");
    let end = readme[start..].find("\n### ").map_or(readme.len(), |i| start + 1 + i);
    let section = &readme[start..end];
    let (first, second) = section.split_at(section.find("Outside the model").expect("an outside-the-model table"));
    let rows = |t: &str| -> Vec<Vec<String>> {
        t.lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| cells(l).into_iter().map(str::to_string).collect())
            .collect()
    };
    Tables {
        actions: rows(first)
            .into_iter()
            .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
            .collect(),
        outside: rows(second).into_iter().map(|c| c[0].clone()).collect(),
    }
}

/// The messages the tables account for, and every `Enum::Variant` they
/// name. In a cell naming `Enum::X`, a bare `` `Y` `` that is a variant of
/// that enum counts as `Enum::Y` (`StatusMsg::HelperDied`, `Exited`); a
/// bare enum name in the outside table stands for all its variants.
fn accounted(t: &Tables, enums: &BTreeMap<String, BTreeSet<String>>) -> (BTreeSet<String>, Vec<String>) {
    let mut have = BTreeSet::new();
    let mut named = Vec::new();
    let cells = t
        .actions
        .iter()
        .map(|(_, m)| m.as_str())
        .chain(t.outside.iter().map(String::as_str));
    for cell in cells {
        let spans = ticks(cell);
        let mut context = BTreeSet::new();
        for s in &spans {
            if let Some((e, v)) = s.split_once("::") {
                if enums.contains_key(e) {
                    let v: String = v
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    named.push(format!("{e}::{v}"));
                    have.insert(format!("{e}::{v}"));
                    context.insert(e.to_string());
                }
            }
        }
        for s in &spans {
            for e in &context {
                if enums[e].contains(*s) {
                    have.insert(format!("{e}::{s}"));
                }
            }
        }
    }
    for first in &t.outside {
        for s in ticks(first) {
            if let Some(vs) = enums.get(s) {
                have.extend(vs.iter().map(|v| format!("{s}::{v}")));
            }
        }
    }
    (have, named)
}

fn readme() -> String {
    std::fs::read_to_string(root().join("protocol/README.md")).unwrap()
}

#[test]
fn every_wire_message_maps_to_a_model_action_or_says_why_not() {
    let enums = wire_enums();
    assert!(enums.len() >= 10, "the message enums were found: {:?}", enums.keys());
    let t = tables(&readme());
    let (have, named) = accounted(&t, &enums);
    let missing: Vec<String> = enums
        .iter()
        .flat_map(|(e, vs)| vs.iter().map(move |v| format!("{e}::{v}")))
        .filter(|m| !have.contains(m))
        .collect();
    assert!(
        missing.is_empty(),
        "messages in src/wire/ that protocol/README.md neither maps to a model action nor lists as outside the model: {missing:?}"
    );
    let stale: Vec<&String> = named
        .iter()
        .filter(|m| {
            let (e, v) = m.split_once("::").unwrap();
            !enums[e].contains(v)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "protocol/README.md names messages src/wire/ does not have: {stale:?}"
    );
}

#[test]
fn every_action_the_table_names_is_in_the_model() {
    let tla = std::fs::read_to_string(root().join("protocol/Lazaret.tla")).unwrap();
    let defined: BTreeSet<String> = tla
        .lines()
        .filter_map(|l| {
            let id: String = l.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            let rest = &l[id.len()..];
            (!id.is_empty() && (rest.starts_with(" ==") || (rest.starts_with('(') && rest.contains(") =="))))
                .then_some(id)
        })
        .collect();
    let t = tables(&readme());
    let mut unknown = Vec::new();
    for (actions, _) in &t.actions {
        for span in ticks_outside_parens(actions) {
            let head = span.split('(').next().unwrap_or("");
            for name in head.split('/') {
                if !defined.contains(name) {
                    unknown.push(name.to_string());
                }
            }
        }
    }
    assert!(t.actions.len() >= 15, "the action table was read: {}", t.actions.len());
    assert!(
        unknown.is_empty(),
        "protocol/README.md names actions Lazaret.tla does not define: {unknown:?}"
    );
}

#[test]
fn a_message_without_a_row_is_named() {
    let enums = enums_of("pub enum PingMsg {\n    /// doc\n    Ping,\n    Pong { n: u32 },\n    Gone(u8),\n}\n");
    assert_eq!(enums["PingMsg"], ["Gone", "Ping", "Pong"].map(String::from).into());
    let t = tables(
        "### Model actions and the messages that carry them\n| `Join(c)` | `PingMsg::Ping`, then `Pong` |\n\nOutside the model\n\n| `PingMsg::Nope` | why |\n",
    );
    let (have, named) = accounted(&t, &enums);
    assert!(have.contains("PingMsg::Ping") && have.contains("PingMsg::Pong"));
    assert!(!have.contains("PingMsg::Gone"), "a variant in no row is missing");
    assert!(named.contains(&"PingMsg::Nope".to_string()), "a stale name is seen");
    assert_eq!(ticks_outside_parens("`Expire` (from `Prompting`)"), ["Expire"]);
}
