//! `lazaret state verify`, `reset` and `unhide`: checking and changing
//! a Domain's state.

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use super::disk::*;
use super::error::*;
use super::meta::*;
use super::select::*;
use crate::display::{fit, human_size};
use crate::domain;
use crate::exit::Exit;
use crate::plan::Json;
use crate::storage::anchor::{self};
use crate::storage::statefs::{self, Op};

/// Deletes leftover `.trash-*` trees (a finished reset's old uppers).
fn clean_trash(s: &Selected) -> Result<Vec<String>> {
    let trash = trash_on_disk(&s.paths.root);
    let ops: Vec<Op> = trash.iter().map(|t| Op::Remove { name: t.clone() }).collect();
    let r = statefs::run_helper(&s.paths.root, None, &ops).map_err(StateError::Helper)?;
    Ok(r.removed
        .into_iter()
        .filter_map(|(n, res)| res.err().map(|e| format!("{n}: {e}")))
        .collect())
}

/// Host-side structure of the anchor: every name is one Lazaret writes,
/// every directory a real one.
fn structure_findings(root: &Path) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    // The Domain root and its store must be readable and sound, or
    // nothing below can be vouched for.
    if let Err(e) = std::fs::read_dir(root) {
        out.push((
            "error".into(),
            root.display().to_string(),
            format!("cannot be read ({e})"),
        ));
        return out;
    }
    if let Err(e) = crate::storage::store::check_file(&root.join("store.sqlite")) {
        out.push((
            "error".into(),
            root.join("store.sqlite").display().to_string(),
            e.to_string(),
        ));
    }
    let anchor = anchor::anchor_dir(root);
    let md = match std::fs::symlink_metadata(&anchor) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.push((
                "error".into(),
                anchor.display().to_string(),
                format!("cannot be read ({e})"),
            ));
            return out;
        }
    };
    if !md.is_dir() {
        out.push((
            "error".into(),
            anchor.display().to_string(),
            "is not a real directory (a symlink?)".into(),
        ));
        return out;
    }
    if let Err(e) = std::fs::read_dir(&anchor) {
        out.push((
            "error".into(),
            anchor.display().to_string(),
            format!("cannot be read ({e})"),
        ));
    }
    if let Ok(rd) = std::fs::read_dir(&anchor) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            let p = e.path();
            let ft = e.file_type().ok();
            if anchor::key_path(&n).is_some() {
                if !ft.is_some_and(|t| t.is_dir()) {
                    out.push((
                        "error".into(),
                        p.display().to_string(),
                        "is not a real directory".into(),
                    ));
                    continue;
                }
                for sub in ["upper", "work"] {
                    match std::fs::symlink_metadata(p.join(sub)) {
                        Ok(m) if m.is_dir() => {}
                        Ok(_) => out.push((
                            "error".into(),
                            p.join(sub).display().to_string(),
                            "is not a real directory (a symlink?)".into(),
                        )),
                        Err(_) => {}
                    }
                }
                if let Ok(m) = std::fs::symlink_metadata(p.join("driver")) {
                    if !m.is_file() || anchor::recorded_driver(&p).is_none() {
                        out.push((
                            "error".into(),
                            p.join("driver").display().to_string(),
                            "is not a driver record".into(),
                        ));
                    }
                }
            } else if n.starts_with(anchor::TRASH_PREFIX) {
                out.push((
                    "warning".into(),
                    p.display().to_string(),
                    "old state left by a reset could not be deleted".into(),
                ));
            } else {
                out.push((
                    "warning".into(),
                    p.display().to_string(),
                    "unexpected entry (not written by Lazaret)".into(),
                ));
            }
        }
    }
    out
}

pub(crate) fn verify(s: Selected, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let finished = anchor::finish_reset(&s.paths.root).map_err(StateError::FinishReset)?;
    let _ = clean_trash(&s)?;
    let keys = keys_on_disk(&s.paths.root);
    let report = walk_all(&s, &keys, false)?;
    let mut findings: Vec<(String, String, String)> = structure_findings(&s.paths.root);
    if s.meta.is_none() {
        findings.push((
            "warning".into(),
            s.paths.root.join(META_FILE).display().to_string(),
            "missing or malformed; the next `lazaret run` writes it".into(),
        ));
    }
    for f in &report.findings {
        findings.push((
            f.level.clone(),
            entry_guest_path(&f.key, &f.path).trim_end_matches('/').to_string(),
            f.message.clone(),
        ));
    }
    let errors = findings.iter().filter(|f| f.0 == "error").count();
    let entries: u64 = report.sizes.iter().map(|s| s.1).sum();
    if json {
        let mut obj = header_json(&s, false);
        obj.push(("ok", Json::Bool(errors == 0)));
        obj.push(("finished_interrupted_reset", Json::Bool(finished)));
        obj.push(("paths", Json::strs(&keys.iter().map(|k| guest(k)).collect::<Vec<_>>())));
        obj.push(("entries", Json::Num(entries as i64)));
        obj.push((
            "findings",
            Json::Arr(
                findings
                    .iter()
                    .map(|(l, p, m)| {
                        Json::Obj(vec![
                            ("level", Json::s(l)),
                            ("path", Json::s(p)),
                            ("message", Json::s(m)),
                        ])
                    })
                    .collect(),
            ),
        ));
        println!("{}", Json::Obj(obj).render());
    } else {
        let mut out = header_human(&s, false);
        if finished {
            out.push_str("finished a reset that was interrupted\n");
        }
        for (l, p, m) in &findings {
            out.push_str(&format!("{l}: {}: {}\n", fit(p, 50), crate::display::escape(m)));
        }
        out.push_str(&format!(
            "{}: {entries} entries in {} persistent path(s), {errors} error(s)\n",
            if errors == 0 { "ok" } else { "FAILED" },
            keys.len()
        ));
        print!("{out}");
    }
    Ok(if errors == 0 { Exit::Success } else { Exit::Problem }.code())
}

pub(crate) fn reset(s: Selected, path: Option<String>, yes: bool, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let finished = anchor::finish_reset(&s.paths.root).map_err(StateError::FinishReset)?;
    let keys = keys_on_disk(&s.paths.root);
    let scope: Vec<String> = match &path {
        None => keys.clone(),
        Some(p) => {
            let k = anchor::path_key(p);
            if !keys.contains(&k) {
                let have: Vec<String> = keys.iter().map(|k| guest(k)).collect();
                return Err(StateError::NoStateAt {
                    path: p.clone(),
                    id: s.id.clone(),
                    have,
                });
            }
            vec![k]
        }
    };
    let sizes = statefs::run_helper(&s.paths.root, None, &statefs::anchor_sizes(&scope)).map_err(StateError::Helper)?;
    let size_of = |k: &str| sizes.size_of(k);
    let untouched: Vec<String> = keys.iter().filter(|k| !scope.contains(k)).map(|k| guest(k)).collect();
    if !json || !yes {
        let mut out = header_human(&s, false);
        if finished {
            out.push_str("finished a reset that was interrupted\n");
        }
        out.push_str("reset empties the persistent upper layer of:\n");
        for k in &scope {
            let (n, b) = size_of(k);
            out.push_str(&format!("  {}  ({n} entries, {})\n", guest(k), human_size(b)));
        }
        if scope.is_empty() {
            out.push_str("  (nothing: no persistent path has state)\n");
        }
        out.push_str(&format!(
            "kept: {}the workspace, ignored workspace state\n",
            untouched.iter().map(|u| format!("{u}, ")).collect::<String>()
        ));
        eprint!("{out}");
    }
    if !yes && !confirm("resetting", "reset", "not reset")? {
        return Ok(1);
    }
    let steps = anchor::plan_reset(&scope, &domain::random_id(4));
    if !steps.is_empty() {
        anchor::reset(&s.paths.root, &steps).map_err(StateError::Reset)?;
    }
    // A reset of everything also forgets the sentinel key: the next start
    // gives every secret a new sentinel (docs/network.md, "Secrets").
    let rotated =
        path.is_none() && crate::storage::sentinel_key::rotate(&s.paths.root).map_err(StateError::SentinelKey)?;
    let leftovers = clean_trash(&s)?;
    if json {
        let mut obj = header_json(&s, false);
        obj.push(("reset", Json::strs(&scope.iter().map(|k| guest(k)).collect::<Vec<_>>())));
        obj.push(("sentinels_rotated", Json::Bool(rotated)));
        obj.push(("kept", Json::strs(&untouched)));
        obj.push(("leftovers", Json::strs(&leftovers)));
        println!("{}", Json::Obj(obj).render());
    } else {
        for k in &scope {
            println!("reset {}: empty", guest(k));
        }
        if rotated {
            println!("sentinels: rotated (the secrets get new ones at the next start)");
        }
        for l in &leftovers {
            println!("warning: could not delete the old state {l}");
        }
    }
    Ok(0)
}

/// `lazaret state rotate-sentinels`: forgets the Domain's sentinel key, so
/// that its next start gives every secret a new sentinel (an old one, an
/// agent saved or someone copied, stops working at the gate). The Domain
/// must be stopped: a running generation keeps the sentinels it has.
pub(crate) fn rotate_sentinels(s: Selected, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let rotated = crate::storage::sentinel_key::rotate(&s.paths.root).map_err(StateError::SentinelKey)?;
    if json {
        println!(
            "{}",
            Json::Obj(vec![("domain_id", Json::s(&s.id)), ("rotated", Json::Bool(rotated))]).render()
        );
    } else if rotated {
        println!("sentinels: rotated (the secrets get new ones at the next start)");
    } else {
        println!("sentinels: no key yet (the next start with secrets makes one)");
    }
    Ok(0)
}

/// `lazaret state unhide`: forgets hidden host identities (the sticky
/// hidden set of ignored paths, docs/git.md) at or below a workspace path,
/// or all of them. The rules still apply at the next start: change them on
/// the host first.
pub(crate) fn unhide(s: Selected, path: Option<PathBuf>, json: bool) -> Result<i32> {
    let _lock = lock_for_maintenance(&s.paths, &s.id)?;
    let file = crate::view::ignored::sticky_file(&s.paths.ignored_dir());
    let entries = crate::view::ignored::read_sticky(&file).map_err(StateError::Sticky)?;
    let rel = path.map(|p| {
        let ws = s.meta.as_ref().map(|m| PathBuf::from(&m.workspace)).unwrap_or_default();
        p.strip_prefix(&ws).map(Path::to_path_buf).unwrap_or(p)
    });
    let (gone, kept): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|e| rel.as_ref().is_none_or(|r| e.rel.starts_with(r)));
    crate::view::ignored::write_sticky(&file, &kept).map_err(StateError::Sticky)?;
    // Un-hiding on purpose also forgets the remembered rules of earlier
    // generations: the next start applies the rules as they are then.
    let hist = crate::view::ignored::rules_history_file(&s.paths.ignored_dir());
    match std::fs::remove_file(&hist) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(StateError::RulesHistory { path: hist, err }),
    }
    let names: Vec<String> = gone.iter().map(|e| crate::display::escape_path(&e.rel)).collect();
    if json {
        println!(
            "{}",
            Json::Obj(vec![("domain_id", Json::s(&s.id)), ("unhidden", Json::strs(&names))]).render()
        );
    } else if names.is_empty() {
        println!("nothing hidden there");
    } else {
        for n in &names {
            println!("un-hidden (if the rules no longer ignore it): {n}");
        }
    }
    Ok(0)
}

/// Asks `VERB? [y/N]` on the terminal before a destructive command; without
/// a terminal the command needs `--yes`. False (after saying `declined`)
/// unless the answer is y/yes.
pub fn confirm(doing: &'static str, verb: &str, declined: &str) -> Result<bool> {
    if !crate::sys::isatty(crate::sys::STDIN) {
        return Err(StateError::NotConfirmed(doing));
    }
    eprint!("{verb}? [y/N] ");
    let _ = io::stderr().flush();
    let mut line = String::new();
    let _ = io::stdin().lock().read_line(&mut line);
    let yes = matches!(line.trim(), "y" | "Y" | "yes");
    if !yes {
        eprintln!("{declined}");
    }
    Ok(yes)
}
