//! docs/config.md names every key the schema accepts, and its tables name
//! no key the schema refuses. The keys come from the schema itself (the
//! "expected one of" list of an unknown key in each table), so a key added
//! to `validation.rs` (or `secrets.rs`, `ssh_agent.rs`) without its line in
//! docs/config.md fails here.

use std::path::Path;

const DOC: &str = include_str!("../../docs/config.md");

/// The keys the schema accepts in the table that `header` opens.
fn accepted(header: &str) -> Vec<String> {
    let text = format!("{header}\nzz_not_a_key = 1\n");
    let e = match super::parse(Path::new("/c.toml"), &text) {
        Ok(c) => c
            .broken_profiles
            .values()
            .next()
            .expect("an unknown key is an error")
            .clone(),
        Err(e) => e,
    };
    match e {
        super::ConfigError::UnknownKey { expected, .. } => expected.iter().map(|s| s.to_string()).collect(),
        other => panic!("{header}: expected an unknown-key error, got {other}"),
    }
}

/// The section of docs/config.md from the heading `title` to the next `## `.
fn section(title: &str) -> &'static str {
    let start = DOC
        .find(title)
        .unwrap_or_else(|| panic!("docs/config.md has no section {title:?}"));
    let rest = &DOC[start + title.len()..];
    &DOC[start..start + title.len() + rest.find("\n## ").unwrap_or(rest.len())]
}

/// The first column of a section's key table: `key` or `a`, `b` entries.
fn table_keys(sec: &str) -> Vec<String> {
    sec.lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let cell = l[2..].split(" |").next().unwrap_or("");
            cell.split(", ")
                .map(|k| k.trim().trim_matches('`').to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether `sec` names `key`: as `key` in backticks or as `key =` in an example.
fn names(sec: &str, key: &str) -> bool {
    sec.contains(&format!("`{key}`"))
        || sec.lines().any(|l| {
            let l = l.trim_start_matches("# ").trim_start_matches("  { ");
            l.starts_with(&format!("{key} ="))
                || l.starts_with(&format!("[{key}]"))
                || l.starts_with(&format!("[{key}."))
                || l.starts_with(&format!("[[{key}"))
        })
        || sec.contains(&format!("{{ {key} ="))
        || sec.contains(&format!(", {key} ="))
        || sec.contains(&format!(".{key}]"))
}

#[test]
fn the_profile_table_lists_every_profile_key_and_no_other() {
    let sec = section("## Profiles");
    let mut code: Vec<String> = Vec::new();
    for k in accepted("[profiles.p]") {
        match k.as_str() {
            "network" => code.extend(accepted("[profiles.p.network]").iter().map(|n| format!("network.{n}"))),
            "limits" => code.extend(accepted("[profiles.p.limits]").iter().map(|n| format!("limits.{n}"))),
            // Tables of their own, with sections of their own (below).
            "secrets" | "ssh_agent" => {}
            _ => code.push(k),
        }
    }
    let doc = table_keys(sec);
    for k in &code {
        assert!(doc.contains(k), "docs/config.md's profile table has no row for `{k}`");
    }
    for k in &doc {
        assert!(
            code.contains(k),
            "docs/config.md's profile table has `{k}`, which the schema refuses"
        );
    }
}

#[test]
fn the_image_table_lists_every_recipe_key_and_no_other() {
    let code = accepted("[images.x]");
    let mut doc = table_keys(section("## Image recipes"));
    doc.sort();
    let mut sorted = code.clone();
    sorted.sort();
    assert_eq!(doc, sorted, "docs/config.md's image recipe table vs the schema");
}

#[test]
fn every_other_table_is_named_in_its_part_of_the_docs() {
    let example = &DOC[..DOC.find("## Profiles").unwrap()];
    for (header, sec) in [
        ("", example),
        ("[network]", example),
        ("[escalation]", example),
        ("[[escalation.auto_approve]]", example),
        ("[profiles.p.secrets.K]", section("## Secrets")),
        ("[profiles.p.ssh_agent]", section("## SSH agent")),
    ] {
        for k in accepted(header) {
            assert!(names(sec, &k), "docs/config.md does not name `{k}` of {header:?}");
        }
    }
}
