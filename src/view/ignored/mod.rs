//! Ignored Workspace State: which workspace paths Git ignores,
//! so the workspace view (`fusefs`) shows per-Domain storage there instead of
//! host content.
//!
//! The rules are a snapshot taken by the Runtime Supervisor before the
//! sandbox starts: every `.gitignore` in the workspace (not below ignored
//! directories or `.git`), `info/exclude` of the common Git directory, and
//! the user's global excludes file. Host `git` is never run (the workspace's
//! `.git/config` is not trusted to be free of commands). A snapshot means the
//! sandbox cannot un-ignore a host secret by editing `.gitignore` during the
//! session; its edits take effect in the next generation.
//!
//! A tracked path that matches the rules is normally not ignored by Git. The
//! sandbox can write the index, so "tracked" alone is not trusted: such a
//! path shows host content only when the host file's blob hash equals its
//! index entry (its content is then already in the object store the sandbox
//! can read). Anything else that matches is redirected.
//!
//! Beside this file: `rules_file.rs` (one rules file, read and built),
//! `gitindex.rs` (the Git index and blob ids), `store.rs` (the sticky set
//! and the rules history kept next to the store), `tests.rs`.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use ignore::gitignore::Gitignore;
use ignore::Match;

mod gitindex;
mod rules_file;
mod store;

use self::gitindex::{hash_beneath, parse_index};
use self::rules_file::{build_matcher, matcher, read_rules_file, strip_bom, RulesFile};
pub use self::store::*;
use crate::view::hosttool::{Cover, Matcher};

#[derive(Debug)]
pub enum IgnoredError {
    Walk(PathBuf, io::Error),
    Store(PathBuf, io::Error),
}

impl fmt::Display for IgnoredError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            IgnoredError::Walk(p, e) => write!(f, "reading ignore rules under {}: {e}", p.display()),
            IgnoredError::Store(p, e) => write!(
                f,
                "ignored-state storage {}: {e} (check the Domain Root's permissions, or reset the Domain's state)",
                p.display()
            ),
        }
    }
}

impl std::error::Error for IgnoredError {}

/// A snapshot of the workspace's ignore rules.
pub struct IgnoreRules {
    root: PathBuf,
    /// Host-tool paths (`hosttool`): always Domain-side, tracked or not.
    host_tool: Option<Arc<Matcher>>,
    /// Host-tool paths (the table's, `Matcher::table`) the load's walk
    /// found on the host, outside ignored directories: what the store is
    /// seeded with.
    host_tool_found: Vec<PathBuf>,
    /// One matcher per directory that has a `.gitignore`, by view path.
    per_dir: std::collections::HashMap<PathBuf, Gitignore>,
    /// `info/exclude` and the global excludes file, rooted at the workspace.
    exclude: Gitignore,
    /// Tracked paths whose host content equals their index blob.
    verified: HashSet<PathBuf>,
    /// Every ancestor directory of a `verified` path.
    verified_dirs: HashSet<PathBuf>,
    /// Directories whose `.gitignore` could not be read or understood
    /// safely (a symlink, not a regular file, too large, unreadable, a rule
    /// that does not build): everything below them is ignored.
    opaque: HashSet<PathBuf>,
    /// Host identities `(st_dev, st_ino)` of everything hidden: what the
    /// rules ignored at load, and what was hidden in earlier generations
    /// (`Sticky`). The view hides these under any name.
    hidden: HashMap<(u64, u64), u64>,
    /// The records behind `hidden`, for persisting.
    sticky: Vec<StickyEntry>,
    /// The paths of earlier generations' hidden entries: ignored whatever
    /// the rules now say, so a host file *replaced* at such a path (an
    /// editor's write-aside-and-rename, a regenerated credential: a new
    /// inode) stays hidden after the sandbox emptied the `.gitignore`.
    names: HashSet<PathBuf>,
    /// Rules files of earlier generations (`DOMAIN_ROOT/ignored.rules`)
    /// that differ from today's: a path any of them ignores is ignored, so
    /// a `.gitignore` emptied from inside reveals no host file created
    /// later at a formerly ignored path.
    history: Vec<(PathBuf, Gitignore)>,
    /// Every rules text this load used or remembered, for persisting.
    texts: Vec<(PathBuf, Vec<u8>)>,
}

impl IgnoreRules {
    /// Rules from explicit pattern files, for tests and tools: `(dir, text)`
    /// pairs, where `dir` is the view path holding a `.gitignore`.
    #[allow(dead_code)] // used by unit tests and bench tools only
    pub fn from_texts(root: &Path, gitignores: &[(&str, &str)], exclude: &str) -> IgnoreRules {
        let mut per_dir = std::collections::HashMap::new();
        for (dir, text) in gitignores {
            per_dir.insert(PathBuf::from(dir), matcher(&root.join(dir), text));
        }
        IgnoreRules {
            root: root.to_path_buf(),
            host_tool: None,
            host_tool_found: Vec::new(),
            per_dir,
            exclude: matcher(root, exclude),
            verified: HashSet::new(),
            verified_dirs: HashSet::new(),
            opaque: HashSet::new(),
            hidden: HashMap::new(),
            sticky: Vec::new(),
            names: HashSet::new(),
            history: Vec::new(),
            texts: Vec::new(),
        }
    }

    /// Reads the rules of the workspace at `root`. `common` and `git_dir` are
    /// the repository's directories (None outside a repository). `previous`
    /// are the identities hidden in earlier generations (see `Sticky`).
    ///
    /// Fails closed: a `.gitignore` that is a symlink, not a regular file,
    /// larger than `RULES_MAX`, unreadable, or holds a rule that does not
    /// build makes everything below its directory ignored (logged).
    #[cfg(test)] // The runtime always passes the rules history (`load_with_history`).
    pub fn load(
        root: &Path,
        git_dir: Option<&Path>,
        common: Option<&Path>,
        previous: &[StickyEntry],
    ) -> Result<IgnoreRules, IgnoredError> {
        Self::load_with_history(root, git_dir, common, previous, &[])
    }

    /// `load`, also applying the rules texts of earlier generations
    /// (`read_rules_history`); `rules_history()` is what to persist next.
    pub fn load_with_history(
        root: &Path,
        git_dir: Option<&Path>,
        common: Option<&Path>,
        previous: &[StickyEntry],
        history: &[(PathBuf, Vec<u8>)],
    ) -> Result<IgnoreRules, IgnoredError> {
        let root_fd = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| IgnoredError::Walk(root.to_path_buf(), e.into()))?;
        let mut budget = RULES_TOTAL_MAX;
        let mut opaque = HashSet::new();
        let mut exclude_text = Vec::new();
        let mut excludes = Vec::new();
        if let Some(c) = common {
            excludes.push(c.join("info/exclude"));
        }
        excludes.extend(global_excludes_file());
        for f in excludes {
            match read_rules_file(None, &f, &mut budget) {
                RulesFile::Missing => {}
                RulesFile::Text(t) => {
                    exclude_text.extend_from_slice(strip_bom(&t));
                    exclude_text.push(b'\n');
                }
                RulesFile::Refused(why) => {
                    log::warn!(
                        "ignored paths: {} {why}: the whole workspace is treated as ignored",
                        crate::display::escape_path(&f)
                    );
                    opaque.insert(PathBuf::new());
                }
            }
        }
        let exclude = build_matcher(root, &exclude_text).unwrap_or_else(|e| {
            log::warn!("ignored paths: the exclude files {e}: the whole workspace is treated as ignored");
            opaque.insert(PathBuf::new());
            Gitignore::empty()
        });
        let mut rules = IgnoreRules {
            root: root.to_path_buf(),
            host_tool: None,
            host_tool_found: Vec::new(),
            per_dir: Default::default(),
            exclude,
            verified: HashSet::new(),
            verified_dirs: HashSet::new(),
            opaque,
            hidden: HashMap::new(),
            sticky: Vec::new(),
            names: previous.iter().map(|e| e.rel.clone()).collect(),
            history: Vec::new(),
            texts: Vec::new(),
        };
        // Today's rules files, read before the walk uses the history.
        let mut today: HashMap<PathBuf, Vec<u8>> = HashMap::new();
        {
            let mut b = RULES_TOTAL_MAX;
            for (dir, _) in history {
                if let RulesFile::Text(t) = read_rules_file(Some(root_fd.as_fd()), &dir.join(".gitignore"), &mut b) {
                    today.insert(dir.clone(), t);
                }
            }
        }
        for (dir, text) in history {
            // The oldest texts (the user's own) are kept; past the bound,
            // newer ones are not remembered.
            if !rules.remember_text(dir, text) {
                continue;
            }
            if today.get(dir) == Some(text) {
                continue;
            }
            match build_matcher(&root.join(dir), text) {
                Ok(m) => rules.history.push((dir.clone(), m)),
                Err(why) => rules.make_opaque(dir, &why.to_string()),
            }
        }
        let prev: HashMap<(u64, u64), u64> = previous.iter().map(|e| ((e.dev, e.ino), e.btime)).collect();
        // Entries the rules match, before tracked content is taken out.
        let mut candidates: Vec<(PathBuf, u64, u64, u64, bool)> = Vec::new();
        // Walk top-down; an ignored directory's .gitignore files do not count.
        // Below an opaque directory the walk only looks for earlier hidden
        // identities (so they are not forgotten while it is opaque).
        let tools = Matcher::table();
        let mut stack = vec![(PathBuf::new(), rules.opaque.contains(Path::new("")), false)];
        while let Some((dir, in_opaque, in_tool)) = stack.pop() {
            let abs = root.join(&dir);
            if !in_opaque {
                match read_rules_file(Some(root_fd.as_fd()), &dir.join(".gitignore"), &mut budget) {
                    RulesFile::Missing => {}
                    RulesFile::Text(t) => match build_matcher(&abs, &t) {
                        Ok(m) => {
                            rules.per_dir.insert(dir.clone(), m);
                            rules.remember_text(&dir, &t);
                        }
                        Err(why) => rules.make_opaque(&dir, &why.to_string()),
                    },
                    RulesFile::Refused(why) => rules.make_opaque(&dir, &why),
                }
            }
            let in_opaque = in_opaque || rules.opaque.contains(&dir);
            let rd = match std::fs::read_dir(&abs) {
                Ok(rd) => rd,
                Err(e) if dir.as_os_str().is_empty() => return Err(IgnoredError::Walk(abs, e)),
                Err(_) => continue,
            };
            let dev = std::fs::symlink_metadata(&abs).map(|m| m.dev()).unwrap_or(0);
            for e in rd.flatten() {
                let name = e.file_name();
                if name == ".git" {
                    continue;
                }
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                let child = dir.join(&name);
                // The identity the view will see (lstat, not d_ino, which
                // differs on some filesystems).
                let (dev, ino, btime) = match e.metadata() {
                    Ok(m) => (m.dev(), m.ino(), btime_of(&m)),
                    Err(_) => (dev, e.ino(), 0),
                };
                if prev.get(&(dev, ino)).is_some_and(|&b| same_birth(b, btime)) {
                    rules.hide(child, dev, ino, btime);
                    continue;
                }
                if in_opaque {
                    if is_dir {
                        stack.push((child, true, false));
                    }
                    continue;
                }
                if rules.matches_rules(&child, is_dir) {
                    candidates.push((child, dev, ino, btime, is_dir));
                    continue;
                }
                // Every entry at or below a host-tool path, so one the
                // developer adds inside a directory copied at an earlier
                // start is copied at the next.
                let tool = in_tool || {
                    let comps: Vec<Component> = child.components().collect();
                    tools.classify(&comps) == Cover::Full
                };
                if tool {
                    rules.host_tool_found.push(child.clone());
                }
                if is_dir {
                    stack.push((child, false, tool));
                }
            }
        }
        if let (Some(g), Some(c)) = (git_dir, common) {
            let sha256 = std::fs::read_to_string(c.join("config"))
                .map(|t| t.to_ascii_lowercase().contains("objectformat = sha256"))
                .unwrap_or(false);
            if let Ok(data) = std::fs::read(g.join("index")) {
                for (path, oid) in parse_index(&data, if sha256 { 32 } else { 20 }).unwrap_or_default() {
                    if !rules.matches_any_prefix(&path) {
                        continue;
                    }
                    if hash_beneath(root_fd.as_fd(), &path, sha256).as_deref() == Some(&oid[..]) {
                        rules.add_verified(path);
                    }
                }
            }
        }
        // Rule-matched entries are hidden unless kept as verified tracked
        // content; below a kept directory, whatever is not kept is hidden.
        let mut stack = candidates;
        while let Some((rel, dev, ino, btime, is_dir)) = stack.pop() {
            if !rules.is_ignored(&rel, is_dir) {
                if is_dir && rules.verified_dirs.contains(&rel) {
                    if let Ok(rd) = std::fs::read_dir(root.join(&rel)) {
                        for e in rd.flatten() {
                            if let Ok(m) = e.metadata() {
                                stack.push((rel.join(e.file_name()), m.dev(), m.ino(), btime_of(&m), m.is_dir()));
                            }
                        }
                    }
                }
                continue;
            }
            rules.hide(rel, dev, ino, btime);
        }
        Ok(rules)
    }

    fn make_opaque(&mut self, dir: &Path, why: &str) {
        log::warn!(
            "ignored paths: {}/.gitignore {why}: everything under {}/ is treated as ignored",
            crate::display::escape_path(&self.root.join(dir)),
            crate::display::escape_path(&self.root.join(dir))
        );
        self.opaque.insert(dir.to_path_buf());
    }

    /// Hides the host file with identity `(dev, ino, btime)`, now at `rel`,
    /// under any name, for this and later generations.
    fn hide(&mut self, rel: PathBuf, dev: u64, ino: u64, btime: u64) {
        if self.hidden.insert((dev, ino), btime).is_none() {
            self.sticky.push(StickyEntry { dev, ino, btime, rel });
        }
    }

    /// Serves the host-tool paths (view paths) Domain-side from now on. Set
    /// after the load's walk, so the host's files are not added to the
    /// sticky hidden set (an opt-out in a later generation takes effect).
    pub fn with_host_tool(mut self, tools: Arc<Matcher>) -> IgnoreRules {
        self.host_tool = Some(tools);
        self
    }

    /// The host-tool paths of the table the load found on the host (not
    /// below an ignored directory, none below another).
    pub fn host_tool_found(&self) -> &[PathBuf] {
        &self.host_tool_found
    }

    /// True when a hidden file had inode `ino` on `dev` (then the birth
    /// time decides, [`IgnoreRules::is_hidden_id`]): cheap, for hot paths.
    pub fn may_be_hidden(&self, dev: u64, ino: u64) -> bool {
        self.hidden.contains_key(&(dev, ino))
    }

    /// True when the host file with this identity is hidden: its device
    /// and inode, and its birth time (`btime`, nanoseconds; 0 unknown), as
    /// a filesystem reuses the inode number of a removed file for a new
    /// one that has nothing to do with it.
    pub fn is_hidden_id(&self, dev: u64, ino: u64, btime: u64) -> bool {
        self.hidden.get(&(dev, ino)).is_some_and(|&b| same_birth(b, btime))
    }

    /// Adds a rules text to remember; false when already there or past
    /// `HISTORY_MAX` (then it is not remembered).
    fn remember_text(&mut self, dir: &Path, text: &[u8]) -> bool {
        if self.texts.iter().any(|(d, t)| d == dir && t == text) {
            return false;
        }
        let used: usize = self.texts.iter().map(|(_, t)| t.len()).sum();
        if used + text.len() > HISTORY_MAX {
            return false;
        }
        self.texts.push((dir.to_path_buf(), text.to_vec()));
        true
    }

    /// The rules texts to remember for the next load: earlier ones and
    /// today's, oldest first.
    pub fn rules_history(&self) -> &[(PathBuf, Vec<u8>)] {
        &self.texts
    }

    /// The hidden identities and where they were seen at load.
    pub fn sticky(&self) -> &[StickyEntry] {
        &self.sticky
    }

    fn add_verified(&mut self, path: PathBuf) {
        let mut p = path.as_path();
        while let Some(parent) = p.parent() {
            if parent.as_os_str().is_empty() {
                break;
            }
            self.verified_dirs.insert(parent.to_path_buf());
            p = parent;
        }
        self.verified.insert(path);
    }

    /// The ignore rules alone for one path (no parent-directory logic).
    fn matches_rules(&self, rel: &Path, is_dir: bool) -> bool {
        if self.names.contains(rel) {
            return true;
        }
        for (d, gi) in &self.history {
            if rel.starts_with(d) && matches!(gi.matched(self.root.join(rel), is_dir), Match::Ignore(_)) {
                return true;
            }
        }
        let abs = self.root.join(rel);
        let mut dir = rel.parent();
        while let Some(d) = dir {
            if let Some(gi) = self.per_dir.get(d) {
                match gi.matched(&abs, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
            dir = d.parent();
        }
        matches!(self.exclude.matched(&abs, is_dir), Match::Ignore(_))
    }

    fn matches_any_prefix(&self, rel: &Path) -> bool {
        let mut prefix = PathBuf::new();
        let n = rel.components().count();
        for (i, c) in rel.components().enumerate() {
            prefix.push(c.as_os_str());
            if self.matches_rules(&prefix, i + 1 < n) {
                return true;
            }
        }
        false
    }

    /// True when the view path `rel` is ignored: it, or a directory above
    /// it, matches the rules, and it is not verified tracked content.
    /// Nothing inside `.git` is ever ignored.
    pub fn is_ignored(&self, rel: &Path, is_dir: bool) -> bool {
        self.ignored_as(rel, &[is_dir])
    }

    /// `is_ignored(rel, false) || is_ignored(rel, true)` in one walk: for
    /// an entry whose type is not known yet.
    pub fn is_ignored_either(&self, rel: &Path) -> bool {
        self.ignored_as(rel, &[false, true])
    }

    /// Whether `rel` is ignored as any of the types `last_dir` lists for
    /// its last component (true: a directory).
    fn ignored_as(&self, rel: &Path, last_dir: &[bool]) -> bool {
        let comps: Vec<Component> = rel.components().collect();
        if comps.iter().any(|c| c.as_os_str() == ".git") {
            return false;
        }
        if let Some(m) = &self.host_tool {
            match m.classify(&comps) {
                Cover::Full => return true,
                // A non-directory at a leading name of a multi-component
                // pattern (a symlink `.cargo`): Domain-side.
                Cover::Prefix if last_dir.contains(&false) => return true,
                _ => {}
            }
        }
        if !self.opaque.is_empty() {
            let mut d = rel.parent();
            while let Some(p) = d {
                if self.opaque.contains(p) {
                    return true;
                }
                d = p.parent();
            }
        }
        let Some((last, parents)) = comps.split_last() else {
            return false;
        };
        let mut prefix = PathBuf::new();
        for c in parents {
            prefix.push(c.as_os_str());
        }
        let Some(below_match) = AncestorMemo::get(self, &prefix, || self.ancestors(parents)) else {
            return true;
        };
        prefix.push(last.as_os_str());
        last_dir.iter().any(|&dir| {
            (below_match || self.matches_rules(&prefix, dir))
                && !if dir {
                    self.verified_dirs.contains(&prefix)
                } else {
                    self.verified.contains(&prefix)
                }
        })
    }

    /// What the rules say of the directories `parents` (a path's leading
    /// components) for an entry below them: `None` when one of them is
    /// ignored, else whether one matched and is kept only for its tracked
    /// content (below it everything else is ignored, as Git never looks
    /// inside it).
    fn ancestors(&self, parents: &[Component]) -> Option<bool> {
        let mut prefix = PathBuf::new();
        let mut below_match = false;
        for c in parents {
            prefix.push(c.as_os_str());
            if below_match || self.matches_rules(&prefix, true) {
                if !self.verified_dirs.contains(&prefix) {
                    return None;
                }
                below_match = true;
            }
        }
        Some(below_match)
    }
}

/// The last verdict of `ancestors`: the rules' address, the directory,
/// the verdict.
type Judged = (usize, PathBuf, Option<bool>);

thread_local! {
    /// Inside an `AncestorMemo` scope (`Some`): the last directory
    /// `ancestors` judged, if any.
    static ANCESTORS: std::cell::RefCell<Option<Option<Judged>>> = const { std::cell::RefCell::new(None) };
}

/// While alive, the rules' verdict on a directory's ancestors is kept on
/// this thread for the next path below the same directory: one listing's
/// entries share their parent, and the rules of a view do not change
/// while it serves (the scope is one request).
pub struct AncestorMemo;

impl AncestorMemo {
    pub fn enter() -> AncestorMemo {
        ANCESTORS.with(|m| *m.borrow_mut() = Some(None));
        AncestorMemo
    }

    fn get(rules: &IgnoreRules, parent: &Path, judge: impl FnOnce() -> Option<bool>) -> Option<bool> {
        let key = rules as *const IgnoreRules as usize;
        let hit = ANCESTORS.with(|m| match &*m.borrow() {
            Some(Some((k, p, v))) if *k == key && p == parent => Some(*v),
            _ => None,
        });
        if let Some(v) = hit {
            return v;
        }
        let v = judge();
        ANCESTORS.with(|m| {
            if let Some(slot) = m.borrow_mut().as_mut() {
                *slot = Some((key, parent.to_path_buf(), v));
            }
        });
        v
    }
}

impl Drop for AncestorMemo {
    fn drop(&mut self) {
        ANCESTORS.with(|m| *m.borrow_mut() = None);
    }
}

/// Bound on one rules file, and on all of them together.
pub const RULES_MAX: u64 = 1 << 20;
const RULES_TOTAL_MAX: u64 = 16 << 20;
/// Bound on the remembered rules texts of all generations together.
const HISTORY_MAX: usize = 4 << 20;

/// `core.excludesFile`'s default location: `$XDG_CONFIG_HOME/git/ignore`,
/// else `~/.config/git/ignore`. (A `core.excludesFile` set in the global
/// config is not read: see docs/git.md.)
fn global_excludes_file() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("git/ignore"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/git/ignore"))
}

#[cfg(test)]
mod tests;
