//! The exported documents: an ordered tree of typed values and its two
//! writers, YAML and JSON. Both are strict and small: every string is
//! quoted (YAML double-quoted, with escapes for every byte a plain or
//! single-quoted scalar would read differently), map keys are quoted
//! unless they are plain identifiers, and nothing is ever taken from the
//! text it writes back in (no anchors, tags, flow collections but `[]`
//! and `{}`, nor multi-line scalars).

use std::fmt::Write as _;

/// One node of an exported object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
    List(Vec<Value>),
    /// In the order written.
    Map(Vec<(String, Value)>),
}

impl Value {
    pub fn str(s: impl Into<String>) -> Value {
        Value::Str(s.into())
    }

    pub fn map<K: Into<String>>(entries: Vec<(K, Value)>) -> Value {
        Value::Map(entries.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    pub fn strs<S: AsRef<str>>(items: &[S]) -> Value {
        Value::List(items.iter().map(|s| Value::str(s.as_ref())).collect())
    }

    /// The value at `key` of a map.
    #[cfg(test)]
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// YAML: one document. `comment` lines go first, each as `# LINE`.
pub fn yaml(comment: &[String], v: &Value) -> String {
    let mut out = String::new();
    for line in comment {
        out.push_str(&comment_line(line));
    }
    match v {
        Value::Map(m) if !m.is_empty() => yaml_map(&mut out, m, 0),
        Value::List(l) if !l.is_empty() => yaml_list(&mut out, l, 0),
        _ => {
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
    out
}

/// A comment line: control characters become `?`, so the text cannot end
/// the comment.
pub fn comment_line(line: &str) -> String {
    let clean: String = line.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    if clean.is_empty() {
        "#\n".to_string()
    } else {
        format!("# {clean}\n")
    }
}

fn pad(out: &mut String, n: usize) {
    for _ in 0..n {
        out.push(' ');
    }
}

fn yaml_map(out: &mut String, m: &[(String, Value)], indent: usize) {
    for (k, v) in m {
        pad(out, indent);
        out.push_str(&key(k));
        out.push(':');
        yaml_after_key(out, v, indent);
    }
}

fn yaml_after_key(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Map(m) if !m.is_empty() => {
            out.push('\n');
            yaml_map(out, m, indent + 2);
        }
        Value::List(l) if !l.is_empty() => {
            out.push('\n');
            yaml_list(out, l, indent);
        }
        _ => {
            out.push(' ');
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
}

fn yaml_list(out: &mut String, l: &[Value], indent: usize) {
    for v in l {
        pad(out, indent);
        out.push('-');
        match v {
            Value::Map(m) if !m.is_empty() => {
                // The first entry on the dash's line, the rest under it.
                let (k0, v0) = &m[0];
                out.push(' ');
                out.push_str(&key(k0));
                out.push(':');
                yaml_after_key(out, v0, indent + 2);
                yaml_map(out, &m[1..], indent + 2);
            }
            Value::List(inner) if !inner.is_empty() => {
                out.push('\n');
                yaml_list(out, inner, indent + 2);
            }
            _ => {
                out.push(' ');
                out.push_str(&scalar(v));
                out.push('\n');
            }
        }
    }
}

/// A scalar or an empty collection, on one line.
fn scalar(v: &Value) -> String {
    match v {
        Value::Str(s) => quote(s),
        Value::Int(i) => i.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::List(_) => "[]".into(),
        Value::Map(_) => "{}".into(),
    }
}

/// A map key: plain when it is a non-empty run of `[A-Za-z0-9._/-]` that
/// starts with a letter (no YAML 1.1 boolean or null spelling can be
/// read into it then but `y`, `n`, `yes`, `no`, `on`, `off`, `true`,
/// `false`, `null`, which are quoted), else double-quoted.
fn key(k: &str) -> String {
    const WORDS: &[&str] = &["y", "n", "yes", "no", "on", "off", "true", "false", "null"];
    let plain = k.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c))
        && !WORDS.contains(&k.to_ascii_lowercase().as_str());
    if plain {
        k.to_string()
    } else {
        quote(k)
    }
}

/// A YAML double-quoted scalar: `"` and `\` escaped, every control
/// character, DEL, the C1 controls and the Unicode line and paragraph
/// separators and BOM as `\xNN` / `\uNNNN`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || (0x7f..=0x9f).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            '\u{2028}' | '\u{2029}' | '\u{feff}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// JSON, indented by two spaces, keys in the tree's order, a newline at
/// the end.
pub fn json(v: &Value) -> String {
    let mut out = String::new();
    json_value(&mut out, v, 0);
    out.push('\n');
    out
}

fn json_value(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Str(s) => json_str(out, s),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::List(l) if l.is_empty() => out.push_str("[]"),
        Value::Map(m) if m.is_empty() => out.push_str("{}"),
        Value::List(l) => {
            out.push_str("[\n");
            for (i, x) in l.iter().enumerate() {
                pad(out, indent + 2);
                json_value(out, x, indent + 2);
                out.push_str(if i + 1 < l.len() { ",\n" } else { "\n" });
            }
            pad(out, indent);
            out.push(']');
        }
        Value::Map(m) => {
            out.push_str("{\n");
            for (i, (k, x)) in m.iter().enumerate() {
                pad(out, indent + 2);
                json_str(out, k);
                out.push_str(": ");
                json_value(out, x, indent + 2);
                out.push_str(if i + 1 < m.len() { ",\n" } else { "\n" });
            }
            pad(out, indent);
            out.push('}');
        }
    }
}

/// A JSON string: `"`, `\` and every control character (C0, DEL, C1)
/// escaped, and the line separators too (JavaScript reads them as line
/// ends).
pub fn json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_strings_stay_one_quoted_scalar() {
        let hostile = [
            "",
            "yes",
            "null",
            "~",
            "0x1F",
            "1e3",
            "- item",
            "key: value",
            "# comment",
            "&anchor *alias !tag",
            "'single'",
            "\"double\"",
            "back\\slash",
            "line\nbreak",
            "cr\rlf",
            "nul\0byte",
            "esc\u{1b}[31m",
            "del\u{7f}",
            "c1\u{85}next-line",
            "ls\u{2028}ps\u{2029}",
            "bom\u{feff}",
            "{flow: map}",
            "[flow, list]",
            "%TAG ! x",
            "--- doc",
            "... end",
            "|\n  literal",
            ">\n  folded",
            "trailing space ",
            "tab\there",
            "ünïcödé",
        ];
        for s in hostile {
            let q = quote(s);
            assert!(q.starts_with('"') && q.ends_with('"'), "{q}");
            let inner = &q[1..q.len() - 1];
            // No raw control character, line separator, or unescaped quote.
            assert!(
                !inner
                    .chars()
                    .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}'),
                "{q:?}"
            );
            assert_eq!(unquote(inner), s, "round trip of {s:?}");
            let mut j = String::new();
            json_str(&mut j, s);
            assert!(!j.chars().any(|c| c.is_control()), "{j:?}");
        }
    }

    /// The YAML double-quoted escapes `quote` writes, read back.
    fn unquote(s: &str) -> String {
        let mut out = String::new();
        let mut it = s.chars();
        while let Some(c) = it.next() {
            if c == '"' {
                panic!("unescaped quote in {s:?}");
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            match it.next().unwrap() {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                'x' => {
                    let h: String = it.by_ref().take(2).collect();
                    out.push(char::from_u32(u32::from_str_radix(&h, 16).unwrap()).unwrap());
                }
                'u' => {
                    let h: String = it.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&h, 16).unwrap()).unwrap());
                }
                e => panic!("unknown escape {e}"),
            }
        }
        out
    }

    #[test]
    fn keys_are_plain_only_when_safe() {
        assert_eq!(key("apiVersion"), "apiVersion");
        assert_eq!(key("app.kubernetes.io/name"), "app.kubernetes.io/name");
        assert_eq!(key("yes"), "\"yes\"");
        assert_eq!(key("On"), "\"On\"");
        assert_eq!(
            key("k8s:io.kubernetes.pod.namespace"),
            "\"k8s:io.kubernetes.pod.namespace\""
        );
        assert_eq!(key("-x"), "\"-x\"");
        assert_eq!(key(""), "\"\"");
        assert_eq!(key("a: b"), "\"a: b\"");
    }

    #[test]
    fn nested_block_layout() {
        let v = Value::map(vec![
            ("a", Value::Int(1)),
            (
                "b",
                Value::List(vec![
                    Value::map(vec![("x", Value::str("1")), ("y", Value::List(vec![]))]),
                    Value::str("s"),
                ]),
            ),
            ("c", Value::map(vec![("d", Value::Bool(true))])),
            ("e", Value::Map(vec![])),
        ]);
        assert_eq!(
            yaml(&["top\nline".into()], &v),
            "# top?line\na: 1\nb:\n- x: \"1\"\n  \"y\": []\n- \"s\"\nc:\n  d: true\ne: {}\n"
        );
        assert_eq!(
            json(&v),
            "{\n  \"a\": 1,\n  \"b\": [\n    {\n      \"x\": \"1\",\n      \"y\": []\n    },\n    \"s\"\n  ],\n  \"c\": {\n    \"d\": true\n  },\n  \"e\": {}\n}\n"
        );
    }
}
