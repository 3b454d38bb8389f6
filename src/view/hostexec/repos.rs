//! The repositories host Git may run in (the workspace's, submodules,
//! linked worktrees, nested repositories) and each one's configuration
//! in every scope and include: [`compute`].

use std::path::{Path, PathBuf};

use super::config::{is_exec_key, parse_config, Entry};
use super::paths::{expand, read_small, symlink_hops, tilde};
use super::programs::{analyze_command, hooks_surface, RepoCtx};
use super::{Scopes, Surface};
use crate::view::sentry::normalize;

/// Git's include depth limit (`MAX_INCLUDE_DEPTH`).
const MAX_INCLUDE_DEPTH: usize = 10;

/// The most directory entries the nested-repository walk reads: a
/// workspace with more fails the start (never a silent stop).
pub const WALK_MAX_ENTRIES: usize = 20_000_000;

/// One repository host Git may run in.
#[derive(Clone, Debug)]
struct Repo {
    git_dir: PathBuf,
    common: PathBuf,
}

/// Computes the surface of the workspace at `root` (absolute, host).
pub fn compute(root: &Path, scopes: &Scopes) -> Surface {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut s = Surface::default();
    let mut repos = Vec::new();
    match crate::view::sentry::discover(&root) {
        Ok(l) => {
            if let (Some(g), Some(c)) = (l.git_dir(), l.common_dir()) {
                repos.push((
                    Repo {
                        git_dir: g.to_path_buf(),
                        common: c.to_path_buf(),
                    },
                    root.clone(),
                ));
            }
        }
        Err(e) => log::warn!("git surface: {e}"),
    }
    s.input_id(&root.join(".git"));
    // Submodule Git directories and other worktrees of the common dir.
    let mut more = Vec::new();
    for (r, _) in &repos {
        for sub in ["modules", "worktrees"] {
            collect_gitdirs(&r.common.join(sub), &r.common, sub == "modules", 0, &mut more);
            s.input(&r.common.join(sub));
        }
    }
    for (gd, common) in more {
        // A submodule's worktree is its `core.worktree`; a linked
        // worktree's is the directory its `gitdir` file names.
        let wt = worktree_of(&gd).unwrap_or_else(|| root.clone());
        repos.push((Repo { git_dir: gd, common }, wt));
    }
    // Nested repositories in the workspace (`sub/.git`): the whole tree.
    if let Err(e) = nested_repos(&root, &mut repos) {
        log::warn!("git surface: {e}");
        s.walk_error = Some(e.to_string());
    }
    for (repo, wt) in repos {
        repo_surface(&mut s, &root, &repo, &wt, scopes);
    }
    s.findings.sort();
    s.findings.dedup();
    s
}

fn collect_gitdirs(dir: &Path, common: &Path, modules: bool, depth: usize, out: &mut Vec<(PathBuf, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if p.join("HEAD").exists() {
            // A submodule's own common dir is itself.
            let c = if modules { p.clone() } else { common.to_path_buf() };
            out.push((p.clone(), c));
            if modules && depth < 4 {
                collect_gitdirs(&p.join("modules"), &p, true, depth + 1, out);
            }
        } else if modules && depth < 4 {
            // Submodule names may contain slashes: `modules/a/b`.
            collect_gitdirs(&p, common, true, depth + 1, out);
        }
    }
}

fn worktree_of(git_dir: &Path) -> Option<PathBuf> {
    if let Ok(t) = std::fs::read_to_string(git_dir.join("gitdir")) {
        let p = PathBuf::from(t.trim_end_matches(['\n', '\r']));
        let p = if p.is_absolute() { p } else { git_dir.join(p) };
        return normalize(&p).parent().map(Path::to_path_buf);
    }
    let text = std::fs::read(git_dir.join("config")).ok()?;
    let wt = parse_config(&text)
        .into_iter()
        .rev()
        .find(|e| e.section == "core" && e.sub.is_none() && e.name == "worktree")?
        .value?;
    Some(normalize(&git_dir.join(wt)))
}

/// Why the nested-repository walk did not complete.
#[derive(Debug)]
enum WalkError {
    Unreadable { dir: PathBuf, err: std::io::Error },
    TooMany,
}

impl std::fmt::Display for WalkError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            WalkError::Unreadable { dir, err } => write!(
                f,
                "cannot read {} to find the repositories in the workspace: {err}",
                crate::display::escape_path(dir)
            ),
            WalkError::TooMany => write!(
                f,
                "the workspace has more than {WALK_MAX_ENTRIES} entries: the search for its repositories cannot complete"
            ),
        }
    }
}

/// Every repository below `root` host Git would use when run there (a
/// directory holding a `.git` entry), by a walk of the whole tree that
/// reads each directory once (`getdents` with its entry types: no `stat`
/// per entry), so its cost is linear in the tree. It does not enter `.git`
/// directories or follow symlinks (a symlinked directory's repositories
/// are found where it leads, when that is in the tree). A directory it
/// cannot read, or more than [`WALK_MAX_ENTRIES`] entries, is an error:
/// the surface would be incomplete.
fn nested_repos(root: &Path, out: &mut Vec<(Repo, PathBuf)>) -> Result<(), WalkError> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let mut stack = vec![root.to_path_buf()];
    let mut n = 0usize;
    while let Some(dir) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                // A directory of another user's that this user cannot read
                // is one the sandbox (running as this user) did not make,
                // and host Git as this user cannot use either.
                let other = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.uid() != me);
                if other && e.kind() == std::io::ErrorKind::PermissionDenied {
                    log::info!(
                        "git surface: not reading {} (another user's)",
                        crate::display::escape_path(&dir)
                    );
                    continue;
                }
                if e.kind() == std::io::ErrorKind::NotFound && dir != root {
                    continue;
                }
                return Err(WalkError::Unreadable { dir, err: e });
            }
        };
        for e in rd {
            let e = match e {
                Ok(e) => e,
                Err(err) => return Err(WalkError::Unreadable { dir, err }),
            };
            n += 1;
            if n > WALK_MAX_ENTRIES {
                return Err(WalkError::TooMany);
            }
            let name = e.file_name();
            if crate::view::gitshape::is_dotgit(&name) {
                if dir != root {
                    if let Ok(l) = crate::view::sentry::discover(&dir) {
                        if let (Some(g), Some(c)) = (l.git_dir(), l.common_dir()) {
                            out.push((
                                Repo {
                                    git_dir: g.to_path_buf(),
                                    common: c.to_path_buf(),
                                },
                                dir.clone(),
                            ));
                        }
                    }
                }
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    Ok(())
}

/// Reads one config file and, recursively, every include target.
fn read_config(s: &mut Surface, file: &Path, home: Option<&Path>, git_dir: &Path, depth: usize, out: &mut Vec<Entry>) {
    s.config_files.insert(file.to_path_buf());
    s.input(file);
    s.protect.insert(file.to_path_buf());
    // Every hop of a symlinked config file is part of the surface too.
    for hop in symlink_hops(file) {
        s.input(&hop);
        s.protect.insert(hop);
    }
    let Some(text) = read_small(file) else { return };
    for e in parse_config(&text) {
        let include = e.name == "path"
            && (e.section == "include" && e.sub.is_none() || e.section == "includeif" && e.sub.is_some());
        s.entries.push((file.to_path_buf(), e.clone()));
        if include {
            if let Some(v) = &e.value {
                if depth < MAX_INCLUDE_DEPTH {
                    for t in include_targets(v, file, home, git_dir) {
                        read_config(s, &t, home, git_dir, depth + 1, out);
                    }
                }
            }
        }
        out.push(e);
    }
}

/// Where an include's `path` points. A relative path is relative to the
/// including file's directory; `~/` is the home directory.
fn include_targets(v: &str, file: &Path, home: Option<&Path>, git_dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let p = if v.starts_with('~') {
        match tilde(v, home) {
            Some(p) => p,
            None => return out,
        }
    } else if v.starts_with("%(prefix)/") {
        return out;
    } else if Path::new(v).is_absolute() {
        PathBuf::from(v)
    } else {
        file.parent().unwrap_or(git_dir).join(v)
    };
    out.push(normalize(&p));
    out
}

fn repo_surface(s: &mut Surface, root: &Path, repo: &Repo, wt: &Path, scopes: &Scopes) {
    let home = scopes.home.as_deref();
    let mut entries = Vec::new();
    for f in &scopes.files {
        read_config(s, f, home, &repo.git_dir, 0, &mut entries);
    }
    read_config(s, &repo.common.join("config"), home, &repo.git_dir, 0, &mut entries);
    read_config(
        s,
        &repo.git_dir.join("config.worktree"),
        home,
        &repo.git_dir,
        0,
        &mut entries,
    );
    if repo.git_dir != repo.common {
        read_config(
            s,
            &repo.common.join("config.worktree"),
            home,
            &repo.git_dir,
            0,
            &mut entries,
        );
    }
    let last = |sec: &str, name: &str| {
        entries
            .iter()
            .rev()
            .find(|e| e.section == sec && e.sub.is_none() && e.name == name)
            .and_then(|e| e.value.clone())
    };
    // `core.worktree` moves the directory commands run in.
    let wt = match last("core", "worktree") {
        Some(w) => normalize(&repo.git_dir.join(w)),
        None => wt.to_path_buf(),
    };
    // Hooks: every `core.hooksPath` any scope names (the last one wins
    // today; another scope or include may win tomorrow), and the default.
    let mut hook_dirs = vec![repo.common.join("hooks")];
    for e in entries.iter() {
        if e.section == "core" && e.sub.is_none() && e.name == "hookspath" {
            if let Some(v) = &e.value {
                let p = expand(v, home, &wt);
                hook_dirs.push(p);
            }
        }
    }
    let cx = RepoCtx {
        root,
        wt: &wt,
        git_dir: &repo.git_dir,
        common: &repo.common,
        home,
    };
    for d in hook_dirs {
        hooks_surface(s, &cx, &d);
    }
    // Programs.
    for e in entries.iter().filter(|e| is_exec_key(e)) {
        let Some(v) = &e.value else { continue };
        if e.section == "core" && e.name == "hookspath" {
            continue;
        }
        if e.section == "core" && e.name == "fsmonitor" && is_bool(v) {
            continue;
        }
        let v = v.trim_start().strip_prefix('!').unwrap_or(v);
        analyze_command(s, &cx, &e.key(), v);
    }
}

fn is_bool(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
    )
}
