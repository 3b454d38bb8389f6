//! `lazaret state list`, `inspect` and `diff`: reading a Domain's state.

use std::path::{Path, PathBuf};

use super::disk::*;
use super::error::*;
use super::meta::*;
use super::select::*;
use crate::display::{fit, human_size};
use crate::domain;
use crate::plan::Json;
use crate::storage::anchor::{self};
use crate::storage::paths::DomainPaths;
use crate::storage::statefs::{self, Kind, Op};

pub(crate) fn list(json: bool) -> Result<i32> {
    let (_cfg, storage, runtime) = dirs()?;
    let mut ids: Vec<domain::DomainId> = std::fs::read_dir(storage.join("domains"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .filter_map(|e| domain::DomainId::parse(&e.file_name().to_string_lossy()).ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    let mut items = Vec::new();
    let mut human = String::new();
    for id in ids {
        let paths = DomainPaths::new(&storage, &runtime, &id);
        let meta = read_meta(&paths.root);
        let active = is_active(&paths);
        let keys = keys_on_disk(&paths.root);
        // A key's size is its upper plus its (normally empty) workdir.
        let mut ops: Vec<Op> = statefs::anchor_sizes(&keys);
        if paths.root.join(IGNORED_DIR).exists() {
            ops.push(statefs::root_size(IGNORED_DIR));
        }
        // Leftovers a start or a reset could not delete stay set aside.
        let aside = trash_on_disk(&paths.root);
        ops.extend(statefs::anchor_sizes(&aside));
        let report = statefs::run_helper(&paths.root, None, &ops).unwrap_or_default();
        let size_of = |k: &str| report.size_of(k).1;
        let total: u64 = keys.iter().map(|k| size_of(k)).sum();
        let m = meta.clone().unwrap_or_default();
        items.push(Json::Obj(vec![
            ("domain_id", Json::s(&id)),
            ("profile", Json::s(&m.profile)),
            ("workspace", Json::s(&m.workspace)),
            ("persist", Json::strs(&m.persist)),
            ("active", Json::Bool(active)),
            ("last_used", Json::Num(m.last_used)),
            (
                "paths",
                Json::Arr(
                    keys.iter()
                        .map(|k| {
                            Json::Obj(vec![
                                ("path", Json::s(guest(k))),
                                ("bytes", Json::Num(size_of(k) as i64)),
                                ("driver", Json::s(driver_of(&paths.root, k).name())),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("upper_bytes", Json::Num(total as i64)),
            (
                "ignored_bytes",
                if paths.root.join(IGNORED_DIR).exists() {
                    Json::Num(size_of(IGNORED_DIR) as i64)
                } else {
                    Json::Null
                },
            ),
            (
                "set_aside",
                Json::Arr(
                    aside
                        .iter()
                        .map(|t| Json::Obj(vec![("name", Json::s(t)), ("bytes", Json::Num(size_of(t) as i64))]))
                        .collect(),
                ),
            ),
        ]));
        human.push_str(&format!(
            "{id}  {:<12} {:<8} last used {}  {}\n",
            fit(if m.profile.is_empty() { "?" } else { &m.profile }, 12),
            if active { "active" } else { "inactive" },
            if m.last_used > 0 {
                format_time(m.last_used)
            } else {
                "never".into()
            },
            human_size(total)
        ));
        human.push_str(&format!("    workspace {}\n", fit(&m.workspace, 70)));
        let mut line = String::from("    persist");
        for k in &keys {
            let part = format!(" {} ({})", guest(k), human_size(size_of(k)));
            if line.chars().count() + part.chars().count() > 79 {
                human.push_str(&line);
                human.push('\n');
                line = String::from("           ");
            }
            line.push_str(&part);
        }
        if keys.is_empty() {
            line.push_str(" (nothing yet)");
        }
        human.push_str(&line);
        human.push('\n');
        if paths.root.join(IGNORED_DIR).exists() {
            human.push_str(&format!(
                "    ignored workspace state {}\n",
                human_size(size_of(IGNORED_DIR))
            ));
        }
        for t in &aside {
            human.push_str(&format!(
                "    set aside {} ({}): deleted by the next start, `state reset` or `rm`\n",
                fit(t, 40),
                human_size(size_of(t))
            ));
        }
    }
    if json {
        println!("{}", Json::Arr(items).render());
    } else if human.is_empty() {
        println!("no Domains have persistent state");
    } else {
        print!("{human}");
    }
    Ok(0)
}

/// `YYYY-MM-DD HH:MM` UTC from Unix seconds.
pub fn format_time(t: i64) -> String {
    let days = t.div_euclid(86400);
    let secs = t.rem_euclid(86400);
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}", secs / 3600, secs % 3600 / 60)
}

fn entry_json(e: &statefs::Entry) -> Json {
    let id = |v: Option<u32>| v.map_or(Json::Null, |v| Json::Num(v as i64));
    Json::Obj(vec![
        ("kind", Json::s(e.kind.name())),
        ("path", Json::s(entry_guest_path(&e.key, &e.path))),
        ("type", Json::s(&e.ftype)),
        ("mode", Json::s(format!("{:04o}", e.mode))),
        ("uid", id(e.uid)),
        ("gid", id(e.gid)),
        ("size", Json::Num(e.size as i64)),
    ])
}

fn finding_json(f: &statefs::Finding) -> Json {
    Json::Obj(vec![
        ("level", Json::s(&f.level)),
        ("path", Json::s(entry_guest_path(&f.key, &f.path).trim_end_matches('/'))),
        ("message", Json::s(&f.message)),
    ])
}

/// Host-tool files (`view::hosttool`) whose Domain copy differs from the
/// workspace's file, read within the review bounds.
fn host_config_differences(s: &Selected) -> crate::view::hosttool::Listing {
    let store = s.paths.root.join(IGNORED_DIR);
    let ws = workspace_of(s);
    if ws.as_os_str().is_empty() {
        return crate::view::hosttool::Listing {
            rows: Vec::new(),
            truncated: false,
        };
    }
    let tools = crate::view::hosttool::recorded_matcher(&store);
    crate::view::hosttool::differing(&ws, &store, &tools, &crate::view::hosttool::read_seeded(&store))
}

fn workspace_of(s: &Selected) -> PathBuf {
    s.meta.as_ref().map(|m| PathBuf::from(&m.workspace)).unwrap_or_default()
}

/// A command-line path as a workspace-relative one.
fn workspace_rel(ws: &Path, path: &Path) -> Result<PathBuf> {
    let rel = if path.is_absolute() {
        path.strip_prefix(ws)
            .map(Path::to_path_buf)
            .map_err(|_| StateError::NotInWorkspace {
                path: path.to_path_buf(),
                workspace: ws.to_path_buf(),
            })?
    } else {
        path.to_path_buf()
    };
    // Plain components only: the path is joined to both trees.
    let plain: PathBuf = rel
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect();
    if plain
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(StateError::NotHostTool(rel));
    }
    Ok(plain)
}

/// `lazaret state diff PATH`: the host's file against the Domain's copy,
/// within the review bounds (`view::hosttool::READ_CAP`, no symlink
/// followed).
pub(crate) fn diff(s: Selected, path: PathBuf) -> Result<i32> {
    let store = s.paths.root.join(IGNORED_DIR);
    let ws = workspace_of(&s);
    let rel = workspace_rel(&ws, &path)?;
    let tools = crate::view::hosttool::recorded_matcher(&store);
    if !tools.covers(&rel) {
        return Err(StateError::NotHostTool(rel));
    }
    let listing = host_config_differences(&s);
    let rows: Vec<_> = listing
        .rows
        .iter()
        .filter(|r| r.path.starts_with(&rel))
        .cloned()
        .collect();
    for r in &rows {
        print!("{}", crate::view::hosttool::render(r));
    }
    record_reviewed(&store, &rows);
    let shown = rows.len();
    if shown == 0 && listing.truncated {
        println!(
            "{}: not reached, the listing stopped at its bounds",
            crate::display::escape_path(&rel)
        );
    } else if shown == 0 {
        println!(
            "{}: the Domain's copy equals the host's",
            crate::display::escape_path(&rel)
        );
    }
    Ok(0)
}

/// `lazaret changes`: every Domain-side copy of a host-tool file that
/// differs from the host's, with a bounded, escaped diff.
pub(crate) fn changes(s: Selected, json: bool) -> Result<i32> {
    let listing = host_config_differences(&s);
    record_reviewed(&s.paths.root.join(IGNORED_DIR), &listing.rows);
    if json {
        let side = |c: &crate::view::hosttool::Content| {
            Json::Obj(vec![
                ("kind", Json::s(c.kind())),
                (
                    "note",
                    match c.note() {
                        Some(n) => Json::s(n),
                        None => Json::Null,
                    },
                ),
            ])
        };
        let rows = listing
            .rows
            .iter()
            .map(|r| {
                Json::Obj(vec![
                    ("path", Json::s(r.path.to_string_lossy())),
                    ("state", Json::s(r.how.word())),
                    ("host", side(&r.host)),
                    ("domain", side(&r.domain)),
                    ("diff", Json::s(crate::view::hosttool::render(r))),
                ])
            })
            .collect();
        let mut obj = header_json(&s, is_active(&s.paths));
        obj.push(("read_limit_bytes", Json::Num(crate::view::hosttool::READ_CAP as i64)));
        obj.push(("truncated", Json::Bool(listing.truncated)));
        obj.push(("changes", Json::Arr(rows)));
        println!("{}", Json::Obj(obj).render());
        return Ok(0);
    }
    if listing.rows.is_empty() {
        println!("no host-tool file differs from the host's");
    }
    for r in &listing.rows {
        print!("{}", crate::view::hosttool::render(r));
    }
    if listing.truncated {
        println!(
            "(listing stopped at {} entries or {} MiB read: some changes may be missing; remove what the Domain need not keep)",
            crate::view::hosttool::WALK_MAX,
            crate::view::hosttool::READ_TOTAL >> 20
        );
    }
    if !listing.rows.is_empty() {
        println!("copy a reviewed one to the host with `lazaret apply PATH`");
    }
    Ok(0)
}

/// Records the rows shown as reviewed (what `apply` may copy); a failure
/// only means `apply` refuses them.
fn record_reviewed(store: &Path, rows: &[crate::view::hosttool::ReviewRow]) {
    if let Err(e) = crate::view::hosttool::record_reviewed(&crate::view::hosttool::reviewed_file(store), rows) {
        log::warn!("host-tool files: recording what was shown: {e} (`lazaret apply` will refuse it)");
    }
}

/// `lazaret apply PATH…`: copies the Domain's reviewed copies at or below
/// each path to the host. Exit 1 when any was refused (one line each).
pub(crate) fn apply(s: Selected, paths: Vec<PathBuf>) -> Result<i32> {
    let store = s.paths.root.join(IGNORED_DIR);
    let ws = workspace_of(&s);
    let tools = crate::view::hosttool::recorded_matcher(&store);
    let mut rels = Vec::new();
    for p in &paths {
        let rel = workspace_rel(&ws, p)?;
        if !tools.covers(&rel) {
            return Err(StateError::NotHostTool(rel));
        }
        rels.push(rel);
    }
    let listing = host_config_differences(&s);
    let seen = crate::view::hosttool::reviewed(&crate::view::hosttool::reviewed_file(&store));
    let mut refused = 0;
    for rel in &rels {
        let rows: Vec<_> = listing.rows.iter().filter(|r| r.path.starts_with(rel)).collect();
        if rows.is_empty() && listing.truncated {
            // Not reached within the bounds: not known to be equal.
            refused += 1;
            println!(
                "refused {}: the listing stopped at its bounds before reaching it",
                crate::display::escape_path(rel)
            );
        } else if rows.is_empty() {
            println!(
                "{}: the Domain's copy equals the host's",
                crate::display::escape_path(rel)
            );
        }
        for r in rows {
            let shown = crate::display::escape_path(&r.path);
            match crate::view::hosttool::apply_reviewed(&ws, r, &seen) {
                Ok(()) => println!("applied {shown} ({})", r.how.word()),
                Err(why) => {
                    refused += 1;
                    println!("refused {shown}: {why}");
                }
            }
        }
    }
    Ok(if refused > 0 { 1 } else { 0 })
}

pub(crate) fn inspect(s: Selected, json: bool) -> Result<i32> {
    let active = is_active(&s.paths);
    let keys = keys_on_disk(&s.paths.root);
    let report = walk_all(&s, &keys, true)?;
    let pending = s.paths.root.join(anchor::ANCHOR_DIR).join(anchor::JOURNAL).exists();
    let lower_known = lower_rootfs(&s).is_some();
    if json {
        let mut obj = header_json(&s, active);
        obj.push(("lower_known", Json::Bool(lower_known)));
        obj.push(("reset_pending", Json::Bool(pending)));
        obj.push((
            "paths",
            Json::Arr(
                keys.iter()
                    .map(|k| {
                        let (n, b) = report
                            .sizes
                            .iter()
                            .find(|(x, _, _)| x == k)
                            .map_or((0, 0), |s| (s.1, s.2));
                        Json::Obj(vec![
                            ("path", Json::s(guest(k))),
                            ("driver", Json::s(driver_of(&s.paths.root, k).name())),
                            ("entries", Json::Num(n as i64)),
                            ("bytes", Json::Num(b as i64)),
                            (
                                "changes",
                                Json::Arr(report.entries.iter().filter(|e| &e.key == k).map(entry_json).collect()),
                            ),
                        ])
                    })
                    .collect(),
            ),
        ));
        obj.push((
            "ignored",
            match ignored_size(&s, &report) {
                Some((n, b)) => Json::Obj(vec![("entries", Json::Num(n as i64)), ("bytes", Json::Num(b as i64))]),
                None => Json::Null,
            },
        ));
        obj.push((
            "host_config",
            Json::Arr(
                host_config_differences(&s)
                    .rows
                    .iter()
                    .map(|r| {
                        Json::Obj(vec![
                            ("path", Json::s(r.path.to_string_lossy())),
                            ("state", Json::s(r.how.word())),
                        ])
                    })
                    .collect(),
            ),
        ));
        obj.push((
            "findings",
            Json::Arr(report.findings.iter().map(finding_json).collect()),
        ));
        println!("{}", Json::Obj(obj).render());
        return Ok(0);
    }
    let mut out = header_human(&s, active);
    if pending {
        out.push_str("  a reset was interrupted: the next `lazaret state verify` or `run` finishes it\n");
    }
    if !lower_known {
        out.push_str("  (the prepared lower is gone: \"added\" may also mean modified)\n");
    }
    if keys.is_empty() {
        out.push_str("no persistent changes yet\n");
    }
    for k in &keys {
        let (n, b) = report
            .sizes
            .iter()
            .find(|(x, _, _)| x == k)
            .map_or((0, 0), |s| (s.1, s.2));
        let changes: Vec<&statefs::Entry> = report.entries.iter().filter(|e| &e.key == k).collect();
        out.push_str(&format!(
            "{}  {} change(s), {} in {n} upper entries\n",
            guest(k),
            changes.len(),
            human_size(b)
        ));
        // Inside an added or opaque directory everything is new: show the
        // directory with a count, not every entry.
        let mut collapsed: Vec<String> = Vec::new();
        for e in &changes {
            if collapsed
                .iter()
                .any(|c| e.path.starts_with(c.as_str()) && e.path.as_bytes().get(c.len()) == Some(&b'/'))
            {
                continue;
            }
            let below = changes
                .iter()
                .filter(|o| o.path.starts_with(&e.path) && o.path.as_bytes().get(e.path.len()) == Some(&b'/'))
                .count();
            let mut p = entry_guest_path(k, &e.path);
            if e.ftype == "dir" {
                p.push('/');
            }
            let extra = if e.ftype == "dir" && below > 0 && matches!(e.kind, Kind::Added | Kind::Opaque) {
                collapsed.push(e.path.clone());
                format!(" (+{below})")
            } else {
                String::new()
            };
            let room = 80 - 2 - 9 - 9 - extra.chars().count();
            out.push_str(&format!(
                "  {:<8} {:<8} {}{extra}\n",
                e.kind.name(),
                e.ftype,
                fit(&p, room)
            ));
        }
    }
    if let Some((n, b)) = ignored_size(&s, &report) {
        out.push_str(&format!("ignored workspace state  {n} entries, {}\n", human_size(b)));
    }
    let hc = host_config_differences(&s);
    if !hc.rows.is_empty() {
        out.push_str("host-tool files whose Domain copy differs from the host (`lazaret changes`):\n");
        for r in &hc.rows {
            out.push_str(&format!(
                "  {:<8} {}\n",
                r.how.word(),
                fit(&crate::display::escape_path(&r.path), 68)
            ));
        }
    }
    for f in &report.findings {
        out.push_str(&format!(
            "{}: {}: {}\n",
            f.level,
            fit(&entry_guest_path(&f.key, &f.path), 40),
            crate::display::escape(&f.message)
        ));
    }
    print!("{out}");
    Ok(0)
}
