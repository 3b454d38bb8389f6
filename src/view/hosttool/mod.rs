//! Host-tool files: workspace files that the developer's other host tools
//! execute or obey (`.vscode/tasks.json` runs on folder open, `.envrc` under
//! direnv, Claude Code's hooks in `.claude/settings.json`, `.mcp.json`
//! servers, `.cargo/config.toml`'s `rustc-wrapper`, …), listed by tool in
//! one table (`table.rs`) and matched at any depth (`matcher.rs`). The
//! view serves them Domain-side, like ignored paths: at each start the ones
//! found on the host and not copied before are copied into the ignored
//! store, and from then on the sandbox reads and changes that copy; the
//! host's files never change. `lazaret changes` lists the copies that
//! differ from the host with a bounded diff, `lazaret apply PATH` copies a
//! reviewed one to the host (`review.rs`).
//!
//! Without a store (`isolate_ignored = false`) they are read-only instead.

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

mod matcher;
mod review;
pub mod table;

pub use self::matcher::{Cover, Matcher};
#[cfg(test)]
use self::review::Difference;
pub use self::review::{
    apply_reviewed, differing, record_reviewed, render, reviewed, Content, Listing, Row as ReviewRow, READ_CAP,
    READ_TOTAL, WALK_MAX,
};

/// Most bytes copied from the host per path at the first start; a larger
/// tree is not copied (the sandbox starts without it) and says so.
const SEED_MAX: u64 = 64 << 20;

/// `DOMAIN_ROOT/hostconfig.seeded`, next to the store: the paths already
/// copied once (a copy the sandbox removed stays removed).
pub fn seeded_file(store: &Path) -> PathBuf {
    store.with_file_name("hostconfig.seeded")
}

/// `DOMAIN_ROOT/hostconfig.paths`: the profile's `host_config` at the last
/// start, and `hostconfig.writable` its `host_config_writable`, for
/// `lazaret changes`.
pub fn paths_file(store: &Path) -> PathBuf {
    store.with_file_name("hostconfig.paths")
}

/// `DOMAIN_ROOT/hostconfig.reviewed`: fingerprints of the rows `lazaret
/// changes` and `state diff` showed, the only ones `apply` copies.
pub fn reviewed_file(store: &Path) -> PathBuf {
    store.with_file_name("hostconfig.reviewed")
}

fn writable_file(store: &Path) -> PathBuf {
    store.with_file_name("hostconfig.writable")
}

/// The matcher of the Domain's last start (the table, the profile's
/// additions and exceptions then).
pub fn recorded_matcher(store: &Path) -> Matcher {
    Matcher::new(&read_lines(&paths_file(store)), &read_lines(&writable_file(store)))
}

/// The paths copied from the host once.
pub fn read_seeded(store: &Path) -> Vec<PathBuf> {
    read_lines(&seeded_file(store))
}

fn read_lines(f: &Path) -> Vec<PathBuf> {
    std::fs::read(f)
        .map(|b| {
            b.split(|&c| c == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
                .collect()
        })
        .unwrap_or_default()
}

/// Copies each host-tool path the store has not had yet from the host
/// workspace `host` into `store`. Symlinks are copied as symlinks, never
/// followed. What `hidden` says (view path, is a directory, host
/// identity) is not copied: a host-tool file Git ignores (an `.envrc`
/// holding keys) stays as invisible as every ignored host file.
pub fn seed(host: &Path, store: &Path, paths: &[PathBuf], hidden: &Hidden) -> io::Result<()> {
    let done: std::collections::HashSet<PathBuf> = read_seeded(store).into_iter().collect();
    let mut new = Vec::new();
    for p in paths {
        if done.contains(p) {
            continue;
        }
        let src = host.join(p);
        if std::fs::symlink_metadata(&src).is_ok() {
            let dst = store.join(p);
            if through_symlink(store, p) {
                // The sandbox made a store directory on the way a symlink:
                // nothing is copied through it.
                log::warn!(
                    "host config: {} not copied into the Domain (a symlink on the way)",
                    crate::display::escape_path(p)
                );
            } else if std::fs::symlink_metadata(&dst).is_err() {
                let mut budget = SEED_MAX;
                if let Some(parent) = dst.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                if let Err(e) = copy_tree(&src, &dst, p, hidden, &mut budget) {
                    log::warn!(
                        "host config: {} not copied into the Domain ({e}): the sandbox starts without it",
                        crate::display::escape_path(p)
                    );
                    let _ = remove_tree(&dst);
                }
            }
        }
        new.push(p.clone());
    }
    if new.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(seeded_file(store))?;
    for p in new {
        f.write_all(p.as_os_str().as_bytes())?;
        f.write_all(b"\n")?;
    }
    f.sync_all()
}

/// True when a directory above `rel` in `root` is a symlink.
fn through_symlink(root: &Path, rel: &Path) -> bool {
    let mut cur = root.to_path_buf();
    let mut parents: Vec<_> = rel.components().collect();
    parents.pop();
    parents.into_iter().any(|c| {
        cur.push(c.as_os_str());
        std::fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink())
    })
}

fn remove_tree(p: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(_) => Ok(()),
    }
}

/// Says whether the host entry at a view path (a directory when the flag
/// is set, with its `(st_dev, st_ino)`) is hidden from the sandbox.
pub type Hidden<'a> = dyn Fn(&Path, bool, (u64, u64)) -> bool + 'a;

fn copy_tree(src: &Path, dst: &Path, rel: &Path, hidden: &Hidden, budget: &mut u64) -> io::Result<()> {
    let m = std::fs::symlink_metadata(src)?;
    let ft = m.file_type();
    if hidden(rel, ft.is_dir(), (m.dev(), m.ino())) {
        return Ok(());
    }
    if ft.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dst)
    } else if ft.is_dir() {
        std::fs::create_dir(dst)?;
        for e in std::fs::read_dir(src)? {
            let e = e?;
            copy_tree(
                &e.path(),
                &dst.join(e.file_name()),
                &rel.join(e.file_name()),
                hidden,
                budget,
            )?;
        }
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(m.mode() & 0o7777))
    } else if ft.is_file() {
        if m.len() > *budget {
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, "larger than 64 MiB"));
        }
        *budget -= m.len();
        let data = read_nofollow(src)?;
        std::fs::write(dst, data)?;
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(m.mode() & 0o7777))
    } else {
        // FIFOs, sockets, devices: nothing a tool reads as configuration.
        Ok(())
    }
}

fn read_nofollow(p: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let fd = rustix::fs::open(
        p,
        rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::NONBLOCK
            | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut f = std::fs::File::from(fd);
    let mut v = Vec::new();
    f.read_to_end(&mut v)?;
    Ok(v)
}

/// The supervisor's preparation of a view before it is served: every view
/// (workspace, a linked worktree's common dir, volumes) gets Git's
/// execution surface (`hostexec`) of the workspace, the first view.
/// (Host-tool files: `seed_store` with a store, read-only without, by
/// the view's matcher.)
pub fn prepare_view(
    v: crate::wire::plan::ViewSpec,
    workspace: Option<&Path>,
) -> io::Result<(crate::wire::plan::ViewSpec, Option<crate::view::hostexec::Live>)> {
    // Every view, volumes included: a host config may include a file or
    // name a program in a volume the sandbox writes.
    let exec = workspace
        .map(|ws| crate::view::hostexec::Live::new(ws, &v.source, crate::view::hostexec::Scopes::from_env()))
        .transpose()?;
    Ok((v, exec))
}

/// The matcher of a view: the table, the profile's `host_config`
/// additions and its `host_config_writable` exceptions.
pub fn view_matcher(v: &crate::wire::plan::ViewSpec) -> Matcher {
    Matcher::new(&v.host_config, &v.host_writable)
}

/// Seeds the workspace view's store with the host-tool files `found` on
/// the host (`IgnoreRules::host_tool_found`) and the profile's additions,
/// less what `hidden` hides and what the matcher exempts, and records the
/// profile's lists for `lazaret changes`.
pub fn seed_store(
    source: &Path,
    store: &Path,
    v: &crate::wire::plan::ViewSpec,
    found: &[PathBuf],
    hidden: &Hidden,
) -> io::Result<()> {
    std::fs::create_dir_all(store)?;
    let tools = view_matcher(v);
    let paths: Vec<PathBuf> = found
        .iter()
        .chain(v.host_config.iter())
        .filter(|p| tools.covers(p))
        .cloned()
        .collect();
    seed(source, store, &paths, hidden)?;
    let lines = |ps: &[PathBuf]| {
        let mut text = Vec::new();
        for p in ps {
            text.extend_from_slice(p.as_os_str().as_bytes());
            text.push(b'\n');
        }
        text
    };
    std::fs::write(paths_file(store), lines(&v.host_config))?;
    std::fs::write(writable_file(store), lines(&v.host_writable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::normalize_rel;

    #[test]
    fn profile_paths() {
        assert_eq!(normalize_rel("./.vscode/"), Some(".vscode".into()));
        assert_eq!(normalize_rel("tools/run.json"), Some("tools/run.json".into()));
        for bad in ["", "/etc", "../x", "a/../../b", ".git/config", "x/.GIT"] {
            assert_eq!(normalize_rel(bad), None, "{bad}");
        }
    }

    /// docs/config.md's table of host-tool files lists every row: its tool,
    /// each pattern, its depth and when the tool runs.
    #[test]
    fn the_docs_list_every_row() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/config.md")).unwrap();
        for row in table::TABLE {
            let line = doc
                .lines()
                .find(|l| l.starts_with(&format!("| {} |", row.tool)))
                .unwrap_or_else(|| panic!("docs/config.md has no row for {}", row.tool));
            for p in row.patterns {
                assert!(line.contains(&format!("`{p}`")), "{}: {p} missing", row.tool);
            }
            let depth = match row.depth {
                table::Depth::Root => "root",
                table::Depth::Any => "any directory",
            };
            assert!(line.contains(depth), "{}: depth", row.tool);
            for w in row.when {
                assert!(line.contains(w.words()), "{}: {}", row.tool, w.words());
            }
            if row.treatment == table::Treatment::HostExec {
                assert!(line.contains("read-only"), "{}: treatment", row.tool);
            }
        }
    }

    /// docs/config.md's table has no row the table lacks (a tool removed
    /// from the code stays documented otherwise).
    #[test]
    fn the_docs_list_no_other_row() {
        let doc = include_str!("../../../docs/config.md");
        let start = doc
            .find("| Tool | Paths |")
            .expect("docs/config.md has the host-tool table");
        for line in doc[start..].lines().skip(2).take_while(|l| l.starts_with("| ")) {
            let tool = line[2..].split(" |").next().unwrap_or("");
            assert!(
                table::TABLE.iter().any(|r| r.tool == tool),
                "docs/config.md lists host tool {tool:?}, which view::hosttool::table::TABLE does not"
            );
        }
    }

    /// docs/threat-model.md's "Host-tool files" row names every tool of
    /// the table (one of its paths, or the tool's first word), and every
    /// path it names is one of the table's.
    #[test]
    fn the_threat_model_names_every_tool() {
        let doc = include_str!("../../../docs/threat-model.md");
        let row = doc
            .lines()
            .find(|l| l.starts_with("| **Host-tool files** |"))
            .expect("docs/threat-model.md has a Host-tool files row");
        let summary = &row[..row.find("), in every directory").expect("the row's list ends there")];
        for r in table::TABLE {
            let first = r.tool.split([' ', ',']).next().unwrap();
            assert!(
                r.patterns.iter().any(|p| row.contains(&format!("`{p}`"))) || row.contains(first),
                "docs/threat-model.md's Host-tool files row does not name {:?}",
                r.tool
            );
        }
        for named in summary.split('`').skip(1).step_by(2) {
            if named.starts_with('.') || named.contains('*') || named.ends_with(".toml") {
                assert!(
                    table::TABLE.iter().any(|r| r.patterns.contains(&named)),
                    "docs/threat-model.md names {named}, which is no host-tool pattern"
                );
            }
        }
    }

    #[test]
    fn seeds_once_and_reports_differences() {
        let d = std::env::temp_dir().join(format!("lz-ht-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (host, store) = (d.join("ws"), d.join("ignored"));
        std::fs::create_dir_all(host.join(".vscode")).unwrap();
        std::fs::create_dir_all(host.join("sub")).unwrap();
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(host.join(".vscode/tasks.json"), "{}\n").unwrap();
        std::fs::write(host.join(".envrc"), "export A=1\n").unwrap();
        std::fs::write(host.join("sub/.envrc"), "export B=1\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", host.join(".mcp.json")).unwrap();
        let paths: Vec<PathBuf> = [".vscode", ".envrc", ".mcp.json", "sub/.envrc"]
            .iter()
            .map(PathBuf::from)
            .collect();
        std::fs::write(host.join(".vscode/secret.json"), "key\n").unwrap();
        let hidden = |rel: &Path, _: bool, _: (u64, u64)| rel == Path::new(".vscode/secret.json");
        seed(&host, &store, &paths, &hidden).unwrap();
        assert!(
            !store.join(".vscode/secret.json").exists(),
            "an ignored host file is never copied"
        );
        assert_eq!(std::fs::read(store.join(".vscode/tasks.json")).unwrap(), b"{}\n");
        assert_eq!(std::fs::read(store.join("sub/.envrc")).unwrap(), b"export B=1\n");
        assert!(std::fs::symlink_metadata(store.join(".mcp.json")).unwrap().is_symlink());
        let tools = Matcher::new(&[], &[]);
        let rows = |seeded: &[PathBuf]| -> Vec<(PathBuf, Difference)> {
            differing(&host, &store, &tools, seeded)
                .rows
                .into_iter()
                .map(|r| (r.path, r.how))
                .collect()
        };
        // Only the file never copied (`changes` shows it as removed).
        assert_eq!(
            rows(&read_seeded(&store)),
            vec![(PathBuf::from(".vscode/secret.json"), Difference::Removed)]
        );
        std::fs::write(store.join(".vscode/tasks.json"), "{\"x\":1}\n").unwrap();
        std::fs::remove_file(store.join(".envrc")).unwrap();
        std::fs::write(store.join("lefthook.yml"), "x\n").unwrap();
        std::fs::create_dir_all(store.join("a/b/.cargo")).unwrap();
        std::fs::write(store.join("a/b/.cargo/config.toml"), "[build]\n").unwrap();
        // A second start copies nothing again.
        seed(&host, &store, &paths, &hidden).unwrap();
        let diff = rows(&read_seeded(&store));
        assert!(diff.contains(&(PathBuf::from(".vscode/tasks.json"), Difference::Changed)));
        assert!(diff.contains(&(PathBuf::from(".envrc"), Difference::Removed)));
        assert!(diff.contains(&(PathBuf::from("lefthook.yml"), Difference::Added)));
        assert!(diff.contains(&(PathBuf::from("a/b/.cargo/config.toml"), Difference::Added)));
        let _ = std::fs::remove_dir_all(&d);
    }
}
