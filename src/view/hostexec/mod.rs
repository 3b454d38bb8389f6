//! Git's execution surface: everything host Git would execute, or read
//! configuration from, for the workspace's repositories, computed from the
//! configuration files themselves (never by running host `git`, whose
//! configuration is what is being judged).
//!
//! Every scope is read (system, global, local, worktree) and every
//! `include.path` / `includeIf.*.path` target is taken, whether or not it
//! exists and whether or not its condition holds today. From the result:
//!
//! - the hooks directory (`core.hooksPath`, else `GIT_DIR/hooks`) and each
//!   hook in it, resolved through symlinks one hop at a time;
//! - the programs named by the keys of [`is_exec_key`] (`core.fsmonitor`,
//!   `filter.*.clean`, `diff.external`, `alias.* = !…`, …) and the files
//!   their command lines name;
//! - hook managers a host hook runs (husky's directory, the pre-commit
//!   framework's and lefthook's configuration).
//!
//! The view makes each of these *paths* read-only (with their ancestors'
//! names, and everything below a directory), so a file created later at
//! such a path is refused too: the path is protected, not an inode.
//! [`Live`] recomputes the surface whenever one of its input files or
//! directories changes (checked at most every [`RECHECK`]).
//!
//! This file holds the [`Surface`] (what it protects and what it was
//! computed from), the config [`Scopes`], [`Live`] and the views' and
//! doctor's readings of it; `config.rs` parses config files,
//! `repos.rs` finds the repositories and reads their config (`compute`),
//! `programs.rs` follows hooks and programs, `paths.rs` reads and resolves
//! host paths; unit tests in `tests.rs`.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod config;
mod paths;
mod programs;
mod repos;
mod shell;
#[cfg(test)]
mod tests;

use self::config::{is_exec_key, Entry};
pub use self::programs::MAX_SCRIPT_DEPTH;
pub use self::repos::compute;

/// The analysis of one hook text or configured command line, as the fuzz
/// target `hook` drives it (`crate::fuzzing`): the text read by the shell
/// lexer and followed from a work tree at `base` (whose files need not
/// exist). Returns the paths it would make read-only.
pub fn fuzz_command(text: &str, base: &Path) -> Vec<PathBuf> {
    programs::command_paths(text, base, Some(Path::new("/home/dev")))
}

/// How long a computed surface is trusted before its inputs are re-stat'ed.
pub const RECHECK: Duration = Duration::from_millis(200);

/// The files host Git reads configuration from, outside any repository:
/// the system file and the global ones, as host Git finds them from its
/// environment (`GIT_CONFIG_SYSTEM`, `GIT_CONFIG_NOSYSTEM`,
/// `GIT_CONFIG_GLOBAL`, `XDG_CONFIG_HOME`, `HOME`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scopes {
    pub files: Vec<PathBuf>,
    pub home: Option<PathBuf>,
}

impl Scopes {
    pub fn from_env() -> Scopes {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = var("HOME");
        let mut files = Vec::new();
        // The system file is always considered: a GIT_CONFIG_NOSYSTEM in
        // this process's environment says nothing about the developer's shell.
        files.push(var("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig")));
        if let Some(g) = var("GIT_CONFIG_GLOBAL") {
            files.push(g);
        }
        // Both: the developer's shell may set XDG_CONFIG_HOME differently
        // from this process (Lazaret's tests point it elsewhere).
        if let Some(x) = var("XDG_CONFIG_HOME") {
            files.push(x.join("git/config"));
        }
        if let Some(h) = &home {
            files.push(h.join(".config/git/config"));
        }
        if let Some(h) = &home {
            files.push(h.join(".gitconfig"));
        }
        Scopes { files, home }
    }
}

/// What the surface was computed from: a file's or directory's identity
/// and times, or its absence.
type Stamp = Option<(u64, u64, u64, i64, i64, i64, i64)>;

fn stamp(p: &Path) -> Stamp {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some((
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

/// A hook manager found through a host hook, and what it protects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manager {
    pub name: &'static str,
    pub protects: Vec<PathBuf>,
}

/// A hook or configured program whose command line the analysis cannot
/// resolve: what it runs may be what the sandbox wrote.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// The hook's name (`pre-commit`) or the config key (`alias.t`).
    pub origin: String,
    /// The command as written.
    pub command: String,
    /// The script it is in (`None`: the hook's or key's own text).
    pub file: Option<PathBuf>,
    pub reason: String,
}

/// The computed surface, as absolute host paths.
#[derive(Clone, Debug, Default)]
pub struct Surface {
    /// What the analysis could not decide, sorted.
    pub findings: Vec<Finding>,
    /// Why the nested-repository walk did not complete (the surface is
    /// then incomplete: a Domain does not start).
    pub walk_error: Option<String>,
    /// Read-only from the sandbox, with everything below and the names of
    /// their ancestors.
    pub protect: BTreeSet<PathBuf>,
    /// Every config file considered (read or absent).
    pub config_files: BTreeSet<PathBuf>,
    /// Every entry of every config file read, with the file it came from.
    pub entries: Vec<(PathBuf, Entry)>,
    pub managers: Vec<Manager>,
    /// What the surface was computed from: (path, identity only, stamp).
    inputs: Vec<(PathBuf, bool, Stamp)>,
}

/// Which file an entry is and its type, not its times: for directories
/// whose entries change with every Git command (`.git` itself).
fn id_stamp(p: &Path) -> Stamp {
    let m = std::fs::symlink_metadata(p).ok()?;
    Some((m.dev(), m.ino(), 0, 0, 0, (m.mode() & 0o170000) as i64, 0))
}

impl Surface {
    fn input(&mut self, p: &Path) {
        if !self.inputs.iter().any(|(q, _, _)| q == p) {
            self.inputs.push((p.to_path_buf(), false, stamp(p)));
        }
    }

    fn input_id(&mut self, p: &Path) {
        if !self.inputs.iter().any(|(q, _, _)| q == p) {
            self.inputs.push((p.to_path_buf(), true, id_stamp(p)));
        }
    }

    /// True when one of the inputs changed since the computation.
    pub fn stale(&self) -> bool {
        self.inputs
            .iter()
            .any(|(p, id, s)| if *id { id_stamp(p) } else { stamp(p) } != *s)
    }

    /// The distinct `section.sub.name` keys host Git could be told to run
    /// something by, from any scope or include.
    pub fn exec_keys(&self) -> BTreeSet<(String, Option<String>, String)> {
        self.entries
            .iter()
            .filter(|(_, e)| is_exec_key(e) || e.section == "filter" || e.section == "diff" || e.section == "merge")
            .map(|(_, e)| (e.section.clone(), e.sub.clone(), e.name.clone()))
            .collect()
    }
}

/// The surface of one view, kept current: recomputed when an input
/// changed, checked at most every [`RECHECK`].
pub struct Live {
    workspace: PathBuf,
    /// The view's root on the host (the workspace, or a common dir).
    view_root: PathBuf,
    scopes: Scopes,
    state: Mutex<(Instant, Surface, Vec<PathBuf>)>,
}

impl Live {
    /// The surface at start; an error when the nested-repository walk did
    /// not complete (the surface would be incomplete).
    pub fn new(workspace: &Path, view_root: &Path, scopes: Scopes) -> std::io::Result<Live> {
        let surface = compute(workspace, &scopes);
        if let Some(e) = &surface.walk_error {
            return Err(std::io::Error::other(e.clone()));
        }
        let view_root = std::fs::canonicalize(view_root).unwrap_or_else(|_| view_root.to_path_buf());
        let rels = view_paths(&surface, &view_root);
        for r in &rels {
            log::info!("git surface: read-only {}", crate::display::escape_path(r));
        }
        Ok(Live {
            workspace: workspace.to_path_buf(),
            view_root,
            scopes,
            state: Mutex::new((Instant::now(), surface, rels)),
        })
    }

    /// True when the view path `rel` is, lies below, or is an ancestor of a
    /// path of the surface.
    ///
    /// A recomputation runs only when an input changed; every input is a
    /// path of the surface itself (read-only inside) or a host file outside
    /// the workspace, so only the host triggers one. It walks the tree again
    /// (new host repositories count); a walk that fails keeps every path of
    /// the previous surface too. A `.git` the sandbox creates never reaches
    /// the host (`gitshape`), so no repository appears through a sandbox
    /// write.
    pub fn protects(&self, rel: &Path) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.0.elapsed() >= RECHECK {
            if st.1.stale() {
                let surface = compute(&self.workspace, &self.scopes);
                let mut rels = view_paths(&surface, &self.view_root);
                if surface.walk_error.is_some() {
                    rels.extend(st.2.iter().cloned());
                    rels.sort();
                    rels.dedup();
                }
                if rels != st.2 {
                    log::info!("git surface: recomputed, {} paths read-only", rels.len());
                }
                st.1 = surface;
                st.2 = rels;
            }
            st.0 = Instant::now();
        }
        st.2.iter()
            .any(|h| rel.starts_with(h) || (!rel.as_os_str().is_empty() && h.starts_with(rel)))
    }
}

/// The surface's paths inside `view_root`, as view paths (the root itself
/// is never one: that would make the whole view read-only).
fn view_paths(s: &Surface, view_root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = s
        .protect
        .iter()
        .filter_map(|p| p.strip_prefix(view_root).ok())
        .filter(|r| !r.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Everything `lazaret git show` lists (and `lazaret doctor` sums up),
/// relative to the workspace where inside it.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub paths: Vec<PathBuf>,
    pub managers: Vec<Manager>,
    pub findings: Vec<Finding>,
    pub walk_error: Option<String>,
}

/// The surface of the workspace as the host's Git sees it now.
pub fn report(workspace: &Path) -> Report {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let s = compute(&root, &Scopes::from_env());
    let rel = |p: &Path| {
        p.strip_prefix(&root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| p.to_path_buf())
    };
    Report {
        paths: view_paths(&s, &root),
        managers: s
            .managers
            .iter()
            .map(|m| Manager {
                name: m.name,
                protects: m.protects.iter().map(|p| rel(p)).collect(),
            })
            .collect(),
        findings: s
            .findings
            .iter()
            .map(|f| Finding {
                file: f.file.as_deref().map(rel),
                ..f.clone()
            })
            .collect(),
        walk_error: s.walk_error.clone(),
    }
}

/// The one line a Domain start prints when host hooks or programs run
/// project code (`None` when none does), every part escaped.
pub fn warning_line(findings: &[Finding]) -> Option<String> {
    let f = findings.first()?;
    let more = if findings.len() > 1 {
        format!(" and {} more", findings.len() - 1)
    } else {
        String::new()
    };
    Some(format!(
        "host hooks run project code: {} runs `{}`{more}; a host commit runs what the sandbox wrote — commit inside, or review first (lazaret git show)",
        crate::display::escape(&f.origin),
        crate::display::escape(&f.command),
    ))
}
