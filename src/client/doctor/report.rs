//! The doctor report: the human text and the JSON document.

use crate::client::doctor::check::Check;

/// The human report: `ok   name: detail` or `FAIL name: detail` plus an
/// indented `  fix: ...` line.
pub(super) fn to_text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let tag = match (c.ok, c.fix.is_some()) {
            (true, false) => "ok  ",
            (true, true) => "warn",
            (false, _) => "FAIL",
        };
        out.push_str(&format!("{tag} {}: {}\n", c.name, c.detail));
        if !c.ok || c.fix.is_some() {
            if let Some(fix) = &c.fix {
                out.push_str(&format!("  fix: {fix}\n"));
            }
        }
    }
    out
}

/// A JSON string literal (with quotes) for `s`, by the one JSON writer.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::plan::quote(&mut out, s);
    out
}

/// `{"ok":bool,"checks":[{"name":..,"ok":..,"detail":..,"fix":..|null}]}`
pub(super) fn to_json(checks: &[Check]) -> String {
    let all_ok = checks.iter().all(|c| c.ok);
    let items: Vec<String> = checks
        .iter()
        .map(|c| {
            let fix = match &c.fix {
                Some(f) => json_string(f),
                None => "null".to_string(),
            };
            format!(
                "{{\"name\":{},\"ok\":{},\"detail\":{},\"fix\":{}}}",
                json_string(c.name),
                c.ok,
                json_string(&c.detail),
                fix
            )
        })
        .collect();
    format!("{{\"ok\":{all_ok},\"checks\":[{}]}}", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escaping() {
        assert_eq!(json_string("plain"), "\"plain\"");
        assert_eq!(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(json_string("l1\nl2\t\r"), "\"l1\\nl2\\t\\r\"");
        assert_eq!(json_string("\u{1}\u{1f}\u{7f}"), "\"\\u0001\\u001f\\u007f\"");
        assert_eq!(json_string("ü→"), "\"ü→\"");
        assert_eq!(json_string("\u{8}\u{c}a\u{202e}b"), "\"\\u0008\\u000ca\\u202eb\"");
    }

    /// `doctor --json`'s shape: its keys and every check's name, in order
    /// (details are this machine's, so fixed here):
    /// tests/snapshots/doctor-json.txt.
    #[test]
    fn doctor_json_shape_snapshot() {
        let checks: Vec<Check> = crate::client::doctor::check_names()
            .into_iter()
            .map(|n| match n {
                "runsc" => Check::fail(n, "DETAIL", "FIX"),
                "resource-limits" => Check::warning(n, "DETAIL", "FIX"),
                _ => Check::pass(n, "DETAIL"),
            })
            .collect();
        let json = to_json(&checks).replace("},{", "},\n{");
        crate::snapshot::check("doctor-json.txt", &format!("{json}\n"));
    }

    #[test]
    fn json_document() {
        let checks = vec![
            Check::pass("git", "found /usr/bin/git"),
            Check::fail("runsc", "runsc not \"found\"", "run scripts/install-deps.sh"),
        ];
        assert_eq!(
            to_json(&checks),
            "{\"ok\":false,\"checks\":[{\"name\":\"git\",\"ok\":true,\"detail\":\"found /usr/bin/git\",\"fix\":null},\
             {\"name\":\"runsc\",\"ok\":false,\"detail\":\"runsc not \\\"found\\\"\",\"fix\":\"run scripts/install-deps.sh\"}]}"
        );
        assert!(to_json(&checks[..1]).starts_with("{\"ok\":true,"));
    }

    #[test]
    fn text_report() {
        let checks = vec![
            Check::pass("git", "found /usr/bin/git"),
            Check::fail("umoci", "umoci not found", "sudo apt-get install umoci"),
        ];
        assert_eq!(
            to_text(&checks),
            "ok   git: found /usr/bin/git\nFAIL umoci: umoci not found\n  fix: sudo apt-get install umoci\n"
        );
    }
}
