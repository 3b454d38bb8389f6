//! `lazaret git show`: Git's execution surface of the workspace as host
//! Git sees it now (`view::hostexec`): the paths the view keeps read-only,
//! the hook managers found, and every hook or configured program whose
//! command line the analysis cannot decide (what a Domain start warns
//! about, or refuses under `host_hooks = "refuse"`).

use std::path::PathBuf;

use crate::client::args::finish_args;
use crate::client::failure::{Failure, EXIT_USAGE};
use crate::client::resolve::resolve;
use crate::display::{escape, escape_path};
use crate::view::hostexec::{report, Report, MAX_SCRIPT_DEPTH};

pub(super) fn cmd_git(mut raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    if sub.as_ref().and_then(|s| s.to_str()) != Some("show") {
        return Err(Failure::NeedsSubcommand {
            cmd: "git",
            choices: "show",
        });
    }
    let mut args = pico_args::Arguments::from_vec(raw);
    let profile: Option<String> = args.opt_value_from_str(["-p", "--profile"])?;
    let workspace: Option<PathBuf> = args.opt_value_from_str(["-w", "--workspace"])?;
    let json = args.contains("--json");
    finish_args(args)?;
    let r = resolve(profile, workspace)?;
    let rep = report(&r.workspace);
    if json {
        println!("{}", to_json(&rep));
    } else {
        print!("{}", to_text(&rep, &escape_path(&r.workspace)));
    }
    Ok(if rep.walk_error.is_some() { EXIT_USAGE } else { 0 })
}

fn to_text(rep: &Report, workspace: &str) -> String {
    let mut out = format!("workspace: {workspace}\n");
    if let Some(e) = &rep.walk_error {
        out.push_str(&format!("error: {e}: a Domain does not start here\n"));
    }
    out.push_str("read-only inside (host Git runs these or reads its configuration there):\n");
    if rep.paths.is_empty() {
        out.push_str("  (none)\n");
    }
    for p in &rep.paths {
        out.push_str(&format!("  {}\n", escape_path(p)));
    }
    out.push_str("hook managers:\n");
    if rep.managers.is_empty() {
        out.push_str("  (none)\n");
    }
    for m in &rep.managers {
        let list: Vec<String> = m.protects.iter().map(|p| escape_path(p)).collect();
        out.push_str(&format!("  {}: {}\n", m.name, list.join(", ")));
    }
    out.push_str(&format!(
        "runs project code (not decided; scripts are followed {MAX_SCRIPT_DEPTH} levels deep): a host Git command runs what the sandbox wrote\n"
    ));
    if rep.findings.is_empty() {
        out.push_str("  (none)\n");
    }
    for f in &rep.findings {
        let place = match &f.file {
            Some(p) => format!(" (in {})", escape_path(p)),
            None => String::new(),
        };
        out.push_str(&format!(
            "  {} runs `{}`{place}: {}\n",
            escape(&f.origin),
            escape(&f.command),
            escape(&f.reason)
        ));
    }
    out
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::plan::quote(&mut out, s);
    out
}

fn json_path(p: &std::path::Path) -> String {
    json_string(&p.to_string_lossy())
}

/// `{"paths":[..],"managers":[{"name":..,"protects":[..]}],
/// "findings":[{"origin":..,"command":..,"file":..|null,"reason":..}],
/// "error":..|null}`
fn to_json(rep: &Report) -> String {
    let paths: Vec<String> = rep.paths.iter().map(|p| json_path(p)).collect();
    let managers: Vec<String> = rep
        .managers
        .iter()
        .map(|m| {
            let l: Vec<String> = m.protects.iter().map(|p| json_path(p)).collect();
            format!("{{\"name\":{},\"protects\":[{}]}}", json_string(m.name), l.join(","))
        })
        .collect();
    let findings: Vec<String> = rep
        .findings
        .iter()
        .map(|f| {
            format!(
                "{{\"origin\":{},\"command\":{},\"file\":{},\"reason\":{}}}",
                json_string(&f.origin),
                json_string(&f.command),
                f.file.as_deref().map_or("null".to_string(), json_path),
                json_string(&f.reason)
            )
        })
        .collect();
    format!(
        "{{\"paths\":[{}],\"managers\":[{}],\"findings\":[{}],\"max_script_depth\":{MAX_SCRIPT_DEPTH},\"error\":{}}}",
        paths.join(","),
        managers.join(","),
        findings.join(","),
        rep.walk_error.as_deref().map_or("null".to_string(), json_string)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::hostexec::Finding;

    #[test]
    fn lists_findings_escaped_in_text_and_json() {
        let rep = Report {
            paths: vec![PathBuf::from(".git/hooks")],
            managers: vec![],
            findings: vec![Finding {
                origin: "pre-commit".into(),
                command: "npm test\u{1b}[2J".into(),
                file: Some(PathBuf::from(".husky/pre-commit")),
                reason: "a package manager or build tool runs code the project defines".into(),
            }],
            walk_error: None,
        };
        let t = to_text(&rep, "/w");
        assert!(t.contains("  .git/hooks\n"), "{t}");
        assert!(
            t.contains("pre-commit runs `npm test\\x1b[2J` (in .husky/pre-commit): a package manager"),
            "{t}"
        );
        let j = to_json(&rep);
        assert!(j.contains("\"command\":\"npm test\\u001b[2J\""), "{j}");
        assert!(j.contains("\"error\":null"), "{j}");
    }
}
