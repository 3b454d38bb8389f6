//! Host-tool files: workspace files that the developer's other host tools
//! execute or obey (`.vscode/tasks.json` runs on folder open, `.envrc` under
//! direnv, Claude Code's hooks in `.claude/settings.json`, `.mcp.json`
//! servers, …). The view serves them Domain-side, like ignored paths: at
//! the Domain's first start each is copied from the host into the ignored
//! store, and from then on the sandbox reads and changes that copy; the
//! host's files never change. `lazaret state inspect` lists the copies that
//! differ from the host, `lazaret state diff PATH` shows how.
//!
//! Without a store (`isolate_ignored = false`) they are read-only instead.

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The built-in host-tool paths, relative to the workspace root.
pub const DEFAULT: &[&str] = &[
    ".vscode",
    ".idea",
    ".envrc",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands",
    ".claude/agents",
    ".claude/hooks",
    ".mcp.json",
    ".devcontainer",
    ".gitmodules",
    ".pre-commit-config.yaml",
    "lefthook.yml",
];

/// Most bytes copied from the host per path at the first start; a larger
/// tree is not copied (the sandbox starts without it) and says so.
const SEED_MAX: u64 = 64 << 20;

/// The host-tool paths of a profile: the defaults and its `host_config`,
/// less everything at or below a `host_config_writable` entry.
pub fn effective(additions: &[String], writable: &[String]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = DEFAULT
        .iter()
        .map(|s| s.to_string())
        .chain(additions.iter().cloned())
        .map(PathBuf::from)
        .filter(|p| !writable.iter().any(|w| p.starts_with(w)))
        .collect();
    v.sort();
    v.dedup();
    v
}

pub use crate::view::ignored::covers;

/// `DOMAIN_ROOT/hostconfig.seeded`, next to the store: the paths already
/// copied once (a copy the sandbox removed stays removed).
pub fn seeded_file(store: &Path) -> PathBuf {
    store.with_file_name("hostconfig.seeded")
}

/// `DOMAIN_ROOT/hostconfig.paths`: the host-tool paths of the last start,
/// for `lazaret state inspect`.
pub fn paths_file(store: &Path) -> PathBuf {
    store.with_file_name("hostconfig.paths")
}

/// The host-tool paths of the Domain's last start.
pub fn read_paths(store: &Path) -> Vec<PathBuf> {
    read_lines(&paths_file(store))
}

fn read_seeded(store: &Path) -> Vec<PathBuf> {
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
    let done = read_seeded(store);
    let mut new = Vec::new();
    for p in paths {
        if done.contains(p) {
            continue;
        }
        let src = host.join(p);
        if std::fs::symlink_metadata(&src).is_ok() {
            let dst = store.join(p);
            if std::fs::symlink_metadata(&dst).is_err() {
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

/// How the Domain's copy of a host-tool path stands against the host's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// Both exist and differ (content, type, mode, or entries below).
    Changed,
    /// The Domain has it, the host does not.
    Added,
    /// The host has it, the Domain's copy was removed.
    Removed,
}

impl Difference {
    pub fn word(self) -> &'static str {
        match self {
            Difference::Changed => "changed",
            Difference::Added => "added",
            Difference::Removed => "removed",
        }
    }
}

/// The files below the host-tool paths whose Domain copy differs from the
/// host, as (relative path, how). `store` is the ignored store.
pub fn differing(host: &Path, store: &Path, paths: &[PathBuf]) -> Vec<(PathBuf, Difference)> {
    let seeded = read_seeded(store);
    let mut out = Vec::new();
    for p in paths {
        compare(host, store, p, seeded.contains(p), &mut out);
    }
    out
}

fn compare(host: &Path, store: &Path, rel: &Path, seeded: bool, out: &mut Vec<(PathBuf, Difference)>) {
    let h = std::fs::symlink_metadata(host.join(rel)).ok();
    let s = std::fs::symlink_metadata(store.join(rel)).ok();
    match (h, s) {
        (None, None) => {}
        (None, Some(_)) => out.push((rel.to_path_buf(), Difference::Added)),
        (Some(_), None) => {
            if seeded {
                out.push((rel.to_path_buf(), Difference::Removed))
            }
        }
        (Some(h), Some(s)) if h.is_dir() && s.is_dir() => {
            let mut names: Vec<std::ffi::OsString> = Vec::new();
            for d in [host.join(rel), store.join(rel)] {
                if let Ok(rd) = std::fs::read_dir(d) {
                    names.extend(rd.flatten().map(|e| e.file_name()));
                }
            }
            names.sort();
            names.dedup();
            for n in names {
                compare(host, store, &rel.join(n), true, out);
            }
        }
        (Some(h), Some(s)) => {
            let same = h.file_type() == s.file_type()
                && (h.mode() & 0o111) == (s.mode() & 0o111)
                && if h.file_type().is_symlink() {
                    std::fs::read_link(host.join(rel)).ok() == std::fs::read_link(store.join(rel)).ok()
                } else {
                    read_nofollow(&host.join(rel)).ok() == read_nofollow(&store.join(rel)).ok()
                };
            if !same {
                out.push((rel.to_path_buf(), Difference::Changed));
            }
        }
    }
}

/// A unified-style line diff of the host's file (`---`) against the
/// Domain's copy (`+++`). Bytes that are not printable are escaped by the
/// caller's display.
pub fn diff_text(rel: &Path, host: Option<&[u8]>, domain: Option<&[u8]>) -> String {
    let lines = |b: Option<&[u8]>| -> Vec<String> {
        b.map(|b| String::from_utf8_lossy(b).lines().map(str::to_string).collect())
            .unwrap_or_default()
    };
    let (a, b) = (lines(host), lines(domain));
    let shown = crate::display::escape_path(rel);
    let mut out = format!(
        "--- host/{shown}{}\n+++ domain/{shown}{}\n",
        if host.is_none() { " (absent)" } else { "" },
        if domain.is_none() { " (absent)" } else { "" }
    );
    // LCS table; bounded so a huge file costs at most 4M cells.
    if a.len().saturating_mul(b.len()) > 4_000_000 {
        for l in &a {
            out.push_str(&format!("-{l}\n"));
        }
        for l in &b {
            out.push_str(&format!("+{l}\n"));
        }
        return out;
    }
    let (n, m) = (a.len(), b.len());
    let mut t = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i][j] = if a[i] == b[j] {
                t[i + 1][j + 1] + 1
            } else {
                t[i + 1][j].max(t[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push_str(&format!(" {}\n", a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || t[i + 1][j] >= t[i][j + 1]) {
            out.push_str(&format!("-{}\n", a[i]));
            i += 1;
        } else {
            out.push_str(&format!("+{}\n", b[j]));
            j += 1;
        }
    }
    out
}

/// The supervisor's preparation of a view before it is served: without a
/// store, host-tool files are made read-only (with one, [`seed_store`]
/// copies them), and every view (workspace, a linked
/// worktree's common dir, volumes) gets Git's execution surface
/// (`hostexec`) of the workspace, the first view.
pub fn prepare_view(
    mut v: crate::wire::plan::ViewSpec,
    workspace: Option<&Path>,
) -> io::Result<(crate::wire::plan::ViewSpec, Option<crate::view::hostexec::Live>)> {
    if v.store.is_none() && !v.host_config.is_empty() {
        let extra = std::mem::take(&mut v.host_config);
        v.protect.extend(extra);
    }
    // Every view, volumes included: a host config may include a file or
    // name a program in a volume the sandbox writes.
    let exec = workspace
        .map(|ws| crate::view::hostexec::Live::new(ws, &v.source, crate::view::hostexec::Scopes::from_env()))
        .transpose()?;
    Ok((v, exec))
}

/// Seeds the workspace view's store with the host-tool files the ignore
/// rules do not hide, and records the paths for `lazaret state inspect`.
pub fn seed_store(
    source: &Path,
    store: &Path,
    paths: &[PathBuf],
    rules: &crate::view::ignored::IgnoreRules,
) -> io::Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(store)?;
    let hidden = |rel: &Path, dir: bool, (dev, ino): (u64, u64)| {
        rules.is_ignored(rel, dir)
            || (rules.may_be_hidden(dev, ino) && {
                let btime =
                    std::fs::symlink_metadata(source.join(rel)).map_or(0, |m| crate::view::ignored::btime_of(&m));
                rules.is_hidden_id(dev, ino, btime)
            })
    };
    seed(source, store, paths, &hidden)?;
    let mut text = Vec::new();
    for p in paths {
        text.extend_from_slice(p.as_os_str().as_bytes());
        text.push(b'\n');
    }
    std::fs::write(paths_file(store), text)
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
        let e = effective(&["tools/run.json".into()], &[".vscode".into(), ".claude".into()]);
        assert!(e.contains(&PathBuf::from("tools/run.json")));
        assert!(e.contains(&PathBuf::from(".envrc")));
        assert!(!e.iter().any(|p| p.starts_with(".vscode") || p.starts_with(".claude")));
        assert!(covers(&e, Path::new(".idea/workspace.xml")));
        assert!(!covers(&e, Path::new(".envrc2")));
    }

    #[test]
    fn seeds_once_and_reports_differences() {
        let d = std::env::temp_dir().join(format!("lz-ht-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let (host, store) = (d.join("ws"), d.join("ignored"));
        std::fs::create_dir_all(host.join(".vscode")).unwrap();
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(host.join(".vscode/tasks.json"), "{}\n").unwrap();
        std::fs::write(host.join(".envrc"), "export A=1\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", host.join(".mcp.json")).unwrap();
        let paths = effective(&[], &[]);
        std::fs::write(host.join(".vscode/secret.json"), "key\n").unwrap();
        let hidden = |rel: &Path, _: bool, _: (u64, u64)| rel == Path::new(".vscode/secret.json");
        seed(&host, &store, &paths, &hidden).unwrap();
        assert!(
            !store.join(".vscode/secret.json").exists(),
            "an ignored host file is never copied"
        );
        assert_eq!(std::fs::read(store.join(".vscode/tasks.json")).unwrap(), b"{}\n");
        assert!(std::fs::symlink_metadata(store.join(".mcp.json")).unwrap().is_symlink());
        // Only the file never copied (state inspect shows it as removed).
        assert_eq!(
            differing(&host, &store, &paths),
            vec![(PathBuf::from(".vscode/secret.json"), Difference::Removed)]
        );
        std::fs::write(store.join(".vscode/tasks.json"), "{\"x\":1}\n").unwrap();
        std::fs::remove_file(store.join(".envrc")).unwrap();
        std::fs::write(store.join("lefthook.yml"), "x\n").unwrap();
        // A second start copies nothing again.
        seed(&host, &store, &paths, &hidden).unwrap();
        let diff = differing(&host, &store, &paths);
        assert!(diff.contains(&(PathBuf::from(".vscode/tasks.json"), Difference::Changed)));
        assert!(diff.contains(&(PathBuf::from(".envrc"), Difference::Removed)));
        assert!(diff.contains(&(PathBuf::from("lefthook.yml"), Difference::Added)));
        let t = diff_text(Path::new(".envrc"), Some(b"a\nb\n"), Some(b"a\nc\n"));
        assert!(t.contains("-b\n+c\n") && t.contains(" a\n"), "{t}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
