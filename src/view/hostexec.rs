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

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::view::sentry::normalize;

/// Git's include depth limit (`MAX_INCLUDE_DEPTH`).
const MAX_INCLUDE_DEPTH: usize = 10;
/// The largest config file or hook script read.
const READ_MAX: u64 = 1 << 20;
/// How long a computed surface is trusted before its inputs are re-stat'ed.
pub const RECHECK: Duration = Duration::from_millis(200);
/// Hook names Git runs (`githooks(5)`).
const HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];
/// Interpreters whose first argument is a script (`sh tools/x.sh`).
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "python", "python3", "perl", "ruby", "node", "deno", "bun", "php",
    "lua", "tclsh", "pwsh", "npx", "env", "exec", "source", ".",
];

/// One `key = value` of a config file. `section` and `name` are lowercase,
/// `sub` is kept as written; a bare `key` has no value (boolean true).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub section: String,
    pub sub: Option<String>,
    pub name: String,
    pub value: Option<String>,
}

#[cfg(test)]
impl Entry {
    /// `section.sub.name` (or `section.name`), as Git spells the key.
    pub fn key(&self) -> String {
        match &self.sub {
            Some(s) => format!("{}.{s}.{}", self.section, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }
}

/// Parses Git's config syntax. Lines Git would reject are skipped (Git
/// then refuses the whole file and runs nothing from it).
pub fn parse_config(text: &[u8]) -> Vec<Entry> {
    let text = String::from_utf8_lossy(text);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut out = Vec::new();
    let (mut section, mut sub) = (String::new(), None::<String>);
    let mut lines = text.split('\n').peekable();
    while let Some(raw) = lines.next() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut rest = line;
        if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = header_end(r) else { continue };
            let head = &r[..end];
            rest = r[end + 1..].trim_start();
            match head.find(|c: char| c.is_ascii_whitespace()) {
                Some(sp) => {
                    section = head[..sp].to_ascii_lowercase();
                    let s = head[sp..].trim();
                    sub = Some(unquote_sub(s));
                }
                None => match head.split_once('.') {
                    Some((a, b)) => {
                        section = a.to_ascii_lowercase();
                        sub = Some(b.to_ascii_lowercase());
                    }
                    None => {
                        section = head.to_ascii_lowercase();
                        sub = None;
                    }
                },
            }
            if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                continue;
            }
        }
        if section.is_empty() {
            continue;
        }
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        if name_end == 0 {
            continue;
        }
        let name = rest[..name_end].to_ascii_lowercase();
        let after = rest[name_end..].trim_start();
        let value = if let Some(v) = after.strip_prefix('=') {
            let mut buf = v.to_string();
            // Continuation lines: a backslash at the end of the line.
            while ends_with_continuation(&buf) {
                buf.pop();
                if buf.ends_with('\r') {
                    buf.pop();
                }
                match lines.next() {
                    Some(next) => buf.push_str(next),
                    None => break,
                }
            }
            Some(parse_value(&buf))
        } else {
            None
        };
        out.push(Entry {
            section: section.clone(),
            sub: sub.clone(),
            name,
            value,
        });
    }
    out
}

fn header_end(r: &str) -> Option<usize> {
    let mut quoted = false;
    let mut esc = false;
    for (i, c) in r.char_indices() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote_sub(s: &str) -> String {
    let s = s.strip_prefix('"').unwrap_or(s);
    let s = s.strip_suffix('"').unwrap_or(s);
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

fn ends_with_continuation(s: &str) -> bool {
    let t = s.trim_end_matches('\r');
    let n = t.bytes().rev().take_while(|&b| b == b'\\').count();
    n % 2 == 1
}

fn parse_value(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut esc = false;
    let mut pending_ws = String::new();
    for c in v.trim_start().chars() {
        if esc {
            esc = false;
            out.push_str(&pending_ws);
            pending_ws.clear();
            out.push(match c {
                'n' => '\n',
                't' => '\t',
                'b' => '\u{8}',
                c => c,
            });
            continue;
        }
        match c {
            '\\' => esc = true,
            '"' => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                quoted = !quoted;
            }
            '#' | ';' if !quoted => break,
            '\r' | '\n' if !quoted => {}
            c if c.is_whitespace() && !quoted => pending_ws.push(c),
            c => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                out.push(c);
            }
        }
    }
    out
}

/// True for a key whose value host Git runs as a program or shell command.
pub fn is_exec_key(e: &Entry) -> bool {
    let n = e.name.as_str();
    match (e.section.as_str(), e.sub.is_some()) {
        ("core", false) => matches!(
            n,
            "fsmonitor" | "sshcommand" | "editor" | "pager" | "askpass" | "gitproxy" | "hookspath"
        ),
        ("filter", true) => matches!(n, "clean" | "smudge" | "process"),
        ("diff", false) => n == "external",
        ("diff", true) => matches!(n, "command" | "textconv"),
        ("merge", true) => n == "driver",
        ("mergetool" | "difftool", true) => matches!(n, "cmd" | "path"),
        ("sequence", false) => n == "editor",
        ("credential", _) => n == "helper",
        ("gpg", _) => n == "program",
        ("alias", _) => e.value.as_deref().is_some_and(|v| v.trim_start().starts_with('!')),
        ("pager", _) | ("interactive", false) => n != "singlekey",
        ("uploadpack", false) => n == "packobjectshook",
        ("remote", true) => matches!(n, "receivepack" | "uploadpack" | "vcs"),
        ("ssh", false) => n == "variant",
        ("web", false) => n == "browser",
        ("browser" | "man", true) => matches!(n, "cmd" | "path"),
        ("sendemail", _) => matches!(n, "sendmailcmd" | "smtpserver" | "tocmd" | "cccmd" | "headercmd"),
        ("core", true) | ("protocol", _) => false,
        _ => false,
    }
}

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

/// The computed surface, as absolute host paths.
#[derive(Clone, Debug, Default)]
pub struct Surface {
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
    // Nested repositories in the workspace (`sub/.git`), a bounded walk.
    let mut budget = 20_000usize;
    nested_repos(&root, &root, 0, &mut budget, &mut repos);
    for (repo, wt) in repos {
        repo_surface(&mut s, &root, &repo, &wt, scopes);
    }
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

fn nested_repos(root: &Path, dir: &Path, depth: usize, budget: &mut usize, out: &mut Vec<(Repo, PathBuf)>) {
    if depth > 6 || *budget == 0 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let Ok(t) = e.file_type() else { continue };
        let name = e.file_name();
        if name == ".git" {
            if dir != root {
                if let Ok(l) = crate::view::sentry::discover(dir) {
                    if let (Some(g), Some(c)) = (l.git_dir(), l.common_dir()) {
                        out.push((
                            Repo {
                                git_dir: g.to_path_buf(),
                                common: c.to_path_buf(),
                            },
                            dir.to_path_buf(),
                        ));
                    }
                }
            }
            continue;
        }
        if t.is_dir() && name != "node_modules" {
            nested_repos(root, &e.path(), depth + 1, budget, out);
        }
    }
}

fn read_small(p: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(p).ok()?;
    let mut buf = Vec::new();
    f.take(READ_MAX).read_to_end(&mut buf).ok()?;
    Some(buf)
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
    let p = if let Some(rest) = v.strip_prefix("~/") {
        match home {
            Some(h) => h.join(rest),
            None => return out,
        }
    } else if v.starts_with('~') || v.starts_with("%(prefix)/") {
        return out;
    } else if Path::new(v).is_absolute() {
        PathBuf::from(v)
    } else {
        file.parent().unwrap_or(git_dir).join(v)
    };
    out.push(normalize(&p));
    out
}

/// The paths a lookup of `p` passes through: every symlink on the way and
/// where each leads, one hop at a time (at most 40).
fn symlink_hops(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![normalize(p)];
    let mut n = 0;
    while let Some(cur) = todo.pop() {
        n += 1;
        if n > 40 {
            break;
        }
        let mut prefix = PathBuf::new();
        let comps: Vec<Component> = cur.components().collect();
        for (i, c) in comps.iter().enumerate() {
            prefix.push(c.as_os_str());
            if let Ok(t) = std::fs::read_link(&prefix) {
                let base = prefix.parent().unwrap_or(Path::new("/"));
                let mut next = normalize(&base.join(t));
                for r in &comps[i + 1..] {
                    next.push(r.as_os_str());
                }
                let next = normalize(&next);
                out.push(prefix.clone());
                out.push(next.clone());
                todo.push(next);
                break;
            }
        }
    }
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
    for d in hook_dirs {
        hooks_surface(s, root, &d, &wt);
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
        for p in command_paths(v, &wt, home) {
            protect_program(s, &p, &wt);
        }
    }
}

fn is_bool(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0" | ""
    )
}

fn expand(v: &str, home: Option<&Path>, base: &Path) -> PathBuf {
    if let (Some(rest), Some(h)) = (v.strip_prefix("~/"), home) {
        return normalize(&h.join(rest));
    }
    normalize(&base.join(v))
}

/// Protects a program and what it leads to: symlink hops, and for a hook
/// script, the files and hook managers it names.
fn protect_program(s: &mut Surface, p: &Path, wt: &Path) {
    s.protect.insert(p.to_path_buf());
    s.input(p);
    for hop in symlink_hops(p) {
        s.input(&hop);
        s.protect.insert(hop);
    }
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let Some(text) = read_small(&real) else { return };
    if text.len() > 64 * 1024 || text.contains(&0) {
        return;
    }
    let text = String::from_utf8_lossy(&text);
    // Hook managers the script runs, and their configuration.
    let lower = text.to_ascii_lowercase();
    let managers: &[(&'static str, &str, &[&str])] = &[
        (
            "pre-commit",
            "pre-commit.com",
            &[".pre-commit-config.yaml", ".pre-commit-config.yml"],
        ),
        (
            "pre-commit",
            "pre_commit",
            &[".pre-commit-config.yaml", ".pre-commit-config.yml"],
        ),
        (
            "lefthook",
            "lefthook",
            &[
                "lefthook.yml",
                ".lefthook.yml",
                "lefthook.yaml",
                ".lefthook.yaml",
                "lefthook.toml",
                ".lefthook.toml",
                "lefthook.json",
                ".lefthook.json",
                "lefthook-local.yml",
                ".lefthook-local.yml",
                "lefthook-local.yaml",
                ".lefthook-local.yaml",
                ".lefthook",
                ".lefthook-local",
                ".config/lefthook.yml",
                ".config/lefthook.yaml",
            ],
        ),
        ("overcommit", "overcommit", &[".overcommit.yml", ".git-hooks"]),
        ("husky", "husky", &[".husky"]),
        (
            "simple-git-hooks",
            "simple-git-hooks",
            &[".simple-git-hooks.json", ".simple-git-hooks.js"],
        ),
    ];
    for (name, mark, files) in managers {
        if lower.contains(mark) {
            let protects: Vec<PathBuf> = files.iter().map(|f| wt.join(f)).collect();
            s.protect.extend(protects.iter().cloned());
            if !s.managers.iter().any(|m| m.name == *name) {
                s.managers.push(Manager { name, protects });
            }
        }
    }
    // Relative paths the script names (hooks run at the worktree's top).
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('#') {
            continue;
        }
        for p in command_paths(line, wt, None) {
            // Directories a hook merely mentions (`cargo fmt -- src/`) stay
            // writable; hook managers' directories are named above.
            if p.starts_with(wt) && p != *wt && !p.is_dir() {
                s.protect.insert(p);
            }
        }
    }
}

fn hooks_surface(s: &mut Surface, root: &Path, dir: &Path, wt: &Path) {
    s.input(dir);
    s.protect.insert(dir.to_path_buf());
    let mut dirs = vec![dir.to_path_buf()];
    for hop in symlink_hops(dir) {
        s.input(&hop);
        s.protect.insert(hop.clone());
        dirs.push(hop);
    }
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    s.input(&real);
    dirs.push(real.clone());
    // A hooks directory named `_` is husky's: the hooks it holds run the
    // scripts of the directory above (`.husky/pre-commit`).
    for d in &dirs {
        if d.file_name().is_some_and(|n| n == "_") {
            if let Some(parent) = d.parent() {
                if parent != root {
                    s.protect.insert(parent.to_path_buf());
                    if !s.managers.iter().any(|m| m.name == "husky") {
                        s.managers.push(Manager {
                            name: "husky",
                            protects: vec![parent.to_path_buf()],
                        });
                    }
                }
            }
        }
    }
    // The workspace root as a hooks directory: its hook names only.
    if real == root {
        for h in HOOK_NAMES {
            s.protect.insert(root.join(h));
        }
    }
    let names: Vec<std::ffi::OsString> = std::fs::read_dir(&real)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    for n in names {
        let hook = real.join(&n);
        let known = HOOK_NAMES.iter().any(|h| n.as_bytes() == h.as_bytes());
        // `*.sample` and other names Git never runs need no scan: below a
        // workspace hooks directory they are protected with it.
        if known {
            protect_program(s, &hook, wt);
        }
    }
}

/// Files a command line names: a first word with a `/`, every argument
/// with a `/`, and the script argument of an interpreter. Relative to `base` (Git runs these at the
/// worktree's top level).
pub fn command_paths(cmd: &str, base: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for words in simple_commands(cmd) {
        let mut first = true;
        let mut after_interp = false;
        for w in words {
            let w = match w.split_once('=') {
                Some((k, v)) if k.starts_with('-') || (first && !k.contains('/')) => {
                    if first {
                        // `VAR=value prog`: still the first word next.
                        if !v.is_empty() && (v.contains('/')) {
                            out.push(expand(v, home, base));
                        }
                        continue;
                    }
                    v.to_string()
                }
                _ => w,
            };
            if w.is_empty() || w.contains(['$', '%', '*', '?', '`']) || w.starts_with('-') {
                first = false;
                continue;
            }
            let has_slash = w.contains('/');
            let p = if Path::new(&w).is_absolute() {
                normalize(Path::new(&w))
            } else {
                expand(&w, home, base)
            };
            // A first word without a `/` is found through PATH, not here.
            if has_slash || after_interp {
                out.push(p);
            }
            let base_name = w.rsplit('/').next().unwrap_or(&w);
            after_interp = first && INTERPRETERS.contains(&base_name);
            first = false;
            if w.contains(char::is_whitespace) {
                // `sh -c 'tools/x.sh --fix'`: the string is a command too.
                out.extend(command_paths(&w, base, home));
            }
        }
    }
    out
}

/// Splits a shell command line into simple commands' words (quotes
/// removed; operators separate commands). An approximation of the shell:
/// it errs towards seeing more words.
fn simple_commands(cmd: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = cmd.chars().peekable();
    let mut has = false;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                has = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    has = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if has || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            (None, ';' | '|' | '&' | '(' | ')' | '{' | '}' | '<' | '>' | '\n') => {
                if has || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
                if !words.is_empty() {
                    out.push(std::mem::take(&mut words));
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if has || !cur.is_empty() {
        words.push(cur);
    }
    if !words.is_empty() {
        out.push(words);
    }
    // Redirection targets and function bodies are words too; keywords are
    // not programs.
    for w in out.iter_mut() {
        while w
            .first()
            .is_some_and(|f| matches!(f.as_str(), "then" | "do" | "else" | "if" | "while" | "!" | "time"))
        {
            w.remove(0);
        }
    }
    out.retain(|w| !w.is_empty());
    out
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
    pub fn new(workspace: &Path, view_root: &Path, scopes: Scopes) -> Live {
        let surface = compute(workspace, &scopes);
        let view_root = std::fs::canonicalize(view_root).unwrap_or_else(|_| view_root.to_path_buf());
        let rels = view_paths(&surface, &view_root);
        for r in &rels {
            log::info!("git surface: read-only {}", crate::display::escape_path(r));
        }
        Live {
            workspace: workspace.to_path_buf(),
            view_root,
            scopes,
            state: Mutex::new((Instant::now(), surface, rels)),
        }
    }

    /// True when the view path `rel` is, lies below, or is an ancestor of a
    /// path of the surface.
    pub fn protects(&self, rel: &Path) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.0.elapsed() >= RECHECK {
            if st.1.stale() {
                let surface = compute(&self.workspace, &self.scopes);
                let rels = view_paths(&surface, &self.view_root);
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

/// The surface's paths inside the workspace, relative, with what put them
/// there, for `lazaret doctor`.
pub fn describe(workspace: &Path) -> (Vec<PathBuf>, Vec<Manager>) {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let s = compute(&root, &Scopes::from_env());
    let rels = view_paths(&s, &root);
    let managers = s
        .managers
        .iter()
        .map(|m| Manager {
            name: m.name,
            protects: m
                .protects
                .iter()
                .map(|p| {
                    p.strip_prefix(&root)
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|_| p.clone())
                })
                .collect(),
        })
        .collect();
    (rels, managers)
}

#[cfg(test)]
mod tests;
