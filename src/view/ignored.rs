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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

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
    host_tool: Vec<PathBuf>,
    /// The first component of each host-tool path: a path whose first
    /// component is none of these is below none of them (one set lookup
    /// instead of a component walk per path, on every lookup).
    host_tool_heads: HashSet<std::ffi::OsString>,
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
            host_tool: Vec::new(),
            host_tool_heads: HashSet::new(),
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
            host_tool: Vec::new(),
            host_tool_heads: HashSet::new(),
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
        let mut stack = vec![(PathBuf::new(), rules.opaque.contains(Path::new("")))];
        while let Some((dir, in_opaque)) = stack.pop() {
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
                        stack.push((child, true));
                    }
                    continue;
                }
                if rules.matches_rules(&child, is_dir) {
                    candidates.push((child, dev, ino, btime, is_dir));
                } else if is_dir {
                    stack.push((child, false));
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
    pub fn with_host_tool(mut self, paths: Vec<PathBuf>) -> IgnoreRules {
        self.host_tool_heads = paths
            .iter()
            .filter_map(|p| p.components().next())
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        // A path without a first component (the workspace itself) covers
        // everything: no shortcut then.
        if paths.iter().any(|p| p.components().next().is_none()) {
            self.host_tool_heads.clear();
            self.host_tool_heads.insert(std::ffi::OsString::new());
        }
        self.host_tool = paths;
        self
    }

    /// Whether `rel` is at or below a host-tool path.
    fn host_tool_covers(&self, first: Option<&Component>) -> bool {
        if self.host_tool.is_empty() {
            return false;
        }
        if self.host_tool_heads.contains(std::ffi::OsStr::new("")) {
            return true;
        }
        first.is_some_and(|c| self.host_tool_heads.contains(c.as_os_str()))
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
        if self.host_tool_covers(comps.first()) && covers(&self.host_tool, rel) {
            return true;
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

/// True when view path `rel` is, or lies below, a host-tool path.
pub fn covers(paths: &[PathBuf], rel: &Path) -> bool {
    paths.iter().any(|p| rel.starts_with(p))
}

/// Bound on one rules file, and on all of them together.
pub const RULES_MAX: u64 = 1 << 20;
const RULES_TOTAL_MAX: u64 = 16 << 20;
/// Bound on the remembered rules texts of all generations together.
const HISTORY_MAX: usize = 4 << 20;

fn matcher(root: &Path, text: &str) -> Gitignore {
    build_matcher(root, text.as_bytes()).expect("test rules build")
}

fn strip_bom(b: &[u8]) -> &[u8] {
    b.strip_prefix(b"\xef\xbb\xbf").unwrap_or(b)
}

/// The matcher for one rules file, read as Git reads it: bytes, a leading
/// UTF-8 BOM dropped, lines split at LF (a CR before it dropped). A line
/// that is not UTF-8 keeps its valid part and matches any single byte where
/// an invalid one stands (a superset of Git's byte-exact match); a negated
/// one is dropped (fewer exceptions hide more). A rule that does not build
/// is an error: the caller hides everything it would have governed.
fn build_matcher(dir: &Path, data: &[u8]) -> Result<Gitignore, RulesError> {
    let data = strip_bom(data);
    let mut b = GitignoreBuilder::new(dir);
    for raw in data.split(|&c| c == b'\n') {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let line: std::borrow::Cow<str> = match std::str::from_utf8(raw) {
            Ok(l) => l.into(),
            Err(_) if raw.first() == Some(&b'!') => continue,
            Err(_) if raw.contains(&b'[') => return Err(RulesError::NonUtf8Class(raw.to_vec())),
            Err(_) => widen_invalid(raw).into(),
        };
        if let Err(e) = b.add_line(None, &line) {
            if line.starts_with('!') {
                continue;
            }
            return Err(RulesError::Rule(line.into_owned(), e));
        }
    }
    b.build().map_err(RulesError::Build)
}

/// Why a rules file's matcher does not build; shows as the predicate of
/// "FILE …" (sandbox-written text escaped).
#[derive(Debug)]
enum RulesError {
    /// A non-UTF-8 rule with a character class (its bytes).
    NonUtf8Class(Vec<u8>),
    /// A rule the matcher refuses (the rule).
    Rule(String, ignore::Error),
    /// The whole set does not build.
    Build(ignore::Error),
}

impl fmt::Display for RulesError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use crate::display::{escape, escape_bytes};
        match self {
            RulesError::NonUtf8Class(raw) => {
                write!(f, "has a non-UTF-8 rule with a character class ({})", escape_bytes(raw))
            }
            RulesError::Rule(line, e) => {
                write!(
                    f,
                    "has a rule that does not build ({}: {})",
                    escape(line),
                    escape(&e.to_string())
                )
            }
            RulesError::Build(e) => write!(f, "does not build ({})", escape(&e.to_string())),
        }
    }
}

/// A non-UTF-8 rule as a glob: every invalid byte becomes `?` (one byte,
/// never `/`). A backslash escaping the byte is dropped with it.
fn widen_invalid(raw: &[u8]) -> String {
    let mut out = String::new();
    for chunk in raw.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            let slashes = out.chars().rev().take_while(|&c| c == '\\').count();
            if slashes % 2 == 1 {
                out.pop();
            }
            out.push('?');
        }
    }
    out
}

enum RulesFile {
    Missing,
    Text(Vec<u8>),
    Refused(String),
}

/// Reads a rules file: beneath `root` without following a symlink at any
/// step (a workspace `.gitignore`), or at an absolute path (`info/exclude`,
/// the global excludes file: the user's own), and only when it is a regular
/// file of at most `RULES_MAX` bytes and within the remaining `budget`.
fn read_rules_file(root: Option<BorrowedFd>, path: &Path, budget: &mut u64) -> RulesFile {
    use std::io::Read;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let fd = match root {
        Some(r) => rustix::fs::openat2(
            r,
            path,
            flags,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ),
        // The user's own files outside the workspace (a dotfiles manager's
        // symlink is fine): still regular and bounded.
        None => rustix::fs::open(path, flags - OFlags::NOFOLLOW, Mode::empty()),
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return RulesFile::Missing,
        Err(rustix::io::Errno::LOOP) => return RulesFile::Refused("is a symbolic link".into()),
        Err(e) => return RulesFile::Refused(format!("cannot be opened ({e})")),
    };
    let st = match rustix::fs::fstat(&fd) {
        Ok(st) => st,
        Err(e) => return RulesFile::Refused(format!("cannot be read ({e})")),
    };
    if st.st_mode & crate::sys::S_IFMT != crate::sys::S_IFREG {
        return RulesFile::Refused("is not a regular file".into());
    }
    let limit = RULES_MAX.min(*budget);
    if st.st_size as u64 > limit {
        return RulesFile::Refused(format!("is {} bytes, over the limit of {} bytes", st.st_size, limit));
    }
    let mut data = Vec::new();
    if let Err(e) = std::fs::File::from(fd).take(limit + 1).read_to_end(&mut data) {
        return RulesFile::Refused(format!("cannot be read ({e})"));
    }
    if data.len() as u64 > limit {
        return RulesFile::Refused(format!("grew over the limit of {limit} bytes while read"));
    }
    *budget -= data.len() as u64;
    RulesFile::Text(data)
}

/// Git's blob id of the regular file at `rel` beneath `root` (no symlinks
/// followed), hashed as it is read.
fn hash_beneath(root: BorrowedFd, rel: &Path, sha256: bool) -> Option<Vec<u8>> {
    use std::io::Read;
    let fd = rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if st.st_mode & crate::sys::S_IFMT != crate::sys::S_IFREG {
        return None;
    }
    let header = format!("blob {}\0", st.st_size);
    let mut f = std::fs::File::from(fd);
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    let mut h1 = openssl::sha::Sha1::new();
    let mut h2 = openssl::sha::Sha256::new();
    if sha256 {
        h2.update(header.as_bytes())
    } else {
        h1.update(header.as_bytes())
    }
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if sha256 {
            h2.update(&buf[..n])
        } else {
            h1.update(&buf[..n])
        }
    }
    if total != st.st_size as u64 {
        return None;
    }
    Some(if sha256 {
        h2.finish().to_vec()
    } else {
        h1.finish().to_vec()
    })
}

/// One hidden host identity and the view path it had when last seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StickyEntry {
    pub dev: u64,
    pub ino: u64,
    /// Birth time in nanoseconds since 1970 (0: unknown, as in entries
    /// written before it was recorded: then the inode alone decides).
    pub btime: u64,
    pub rel: PathBuf,
}

/// A file's birth time in nanoseconds since 1970, 0 when the filesystem
/// does not record one.
pub fn btime_of(m: &std::fs::Metadata) -> u64 {
    m.created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Whether two birth times can be one file's: equal, or either unknown
/// (fail closed: an unknown birth time hides).
pub fn same_birth(recorded: u64, seen: u64) -> bool {
    recorded == 0 || seen == 0 || recorded == seen
}

/// `DOMAIN_ROOT/ignored.sticky`, next to the store `DOMAIN_ROOT/ignored`
/// (outside it: the sandbox writes the store).
pub fn sticky_file(store: &Path) -> PathBuf {
    store.with_file_name("ignored.sticky")
}

/// Reads the sticky set. Missing is empty; anything else unreadable or
/// malformed is an error (the Domain does not start rather than forget).
pub fn read_sticky(path: &Path) -> Result<Vec<StickyEntry>, IgnoredError> {
    read_store_lines(path, |line| {
        let mut it = line.split(' ');
        let (Some(dev), Some(ino), Some(hexpath), btime, None) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return None;
        };
        let path = unhex(hexpath)?;
        Some(StickyEntry {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            btime: match btime {
                Some(b) => b.parse().ok()?,
                None => 0,
            },
            rel: PathBuf::from(std::ffi::OsStr::from_bytes(&path)),
        })
    })
}

/// The non-empty lines of the store file `path`, each read by `parse`
/// (`None`: malformed). A missing file is empty; an unreadable one, a line
/// that is not UTF-8 or one `parse` refuses is an error naming `path`.
fn read_store_lines<T>(path: &Path, mut parse: impl FnMut(&str) -> Option<T>) -> Result<Vec<T>, IgnoredError> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(IgnoredError::Store(path.to_path_buf(), e)),
    };
    let bad = || {
        IgnoredError::Store(
            path.to_path_buf(),
            io::Error::new(io::ErrorKind::InvalidData, "malformed line"),
        )
    };
    let mut out = Vec::new();
    for line in data.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        let line = std::str::from_utf8(line).map_err(|_| bad())?;
        out.push(parse(line).ok_or_else(bad)?);
    }
    Ok(out)
}

fn sticky_line(e: &StickyEntry) -> String {
    format!(
        "{} {} {} {}\n",
        e.dev,
        e.ino,
        crate::domain::hex(e.rel.as_os_str().as_bytes()),
        e.btime
    )
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `DOMAIN_ROOT/ignored.rules`: the rules texts of earlier generations.
pub fn rules_history_file(store: &Path) -> PathBuf {
    store.with_file_name("ignored.rules")
}

/// Reads the remembered rules texts (`DIRHEX TEXTHEX` lines). Missing is
/// empty; unreadable or malformed is an error (the Domain does not start
/// rather than forget).
pub fn read_rules_history(path: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, IgnoredError> {
    read_store_lines(path, |line| {
        let (d, t) = line.split_once(' ')?;
        let (d, t) = (unhex(d)?, unhex(t)?);
        Some((PathBuf::from(std::ffi::OsStr::from_bytes(&d)), t))
    })
}

/// Replaces the remembered rules texts (written aside, then renamed over).
pub fn write_rules_history(path: &Path, texts: &[(PathBuf, Vec<u8>)]) -> Result<(), IgnoredError> {
    let tmp = path.with_extension("rules.tmp");
    let text: String = texts
        .iter()
        .map(|(d, t)| {
            format!(
                "{} {}\n",
                crate::domain::hex(d.as_os_str().as_bytes()),
                crate::domain::hex(t)
            )
        })
        .collect();
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| IgnoredError::Store(path.to_path_buf(), e))
}

/// Replaces the sticky set (written aside, then renamed over).
pub fn write_sticky(path: &Path, entries: &[StickyEntry]) -> Result<(), IgnoredError> {
    let tmp = path.with_extension("sticky.tmp");
    let text: String = entries.iter().map(sticky_line).collect();
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| IgnoredError::Store(path.to_path_buf(), e))
}

/// Adds one entry to the sticky set (a file hidden during a session).
pub fn append_sticky(path: &Path, e: &StickyEntry) -> Result<(), IgnoredError> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .and_then(|mut f| f.write_all(sticky_line(e).as_bytes()))
        .map_err(|err| IgnoredError::Store(path.to_path_buf(), err))
}

/// `core.excludesFile`'s default location: `$XDG_CONFIG_HOME/git/ignore`,
/// else `~/.config/git/ignore`. (A `core.excludesFile` set in the global
/// config is not read: see docs/git.md.)
fn global_excludes_file() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("git/ignore"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/git/ignore"))
}

/// Git's object id of a blob with this content.
#[allow(dead_code)] // the reference for `hash_beneath`, in tests
pub fn blob_id(content: &[u8], sha256: bool) -> Vec<u8> {
    let mut data = format!("blob {}\0", content.len()).into_bytes();
    data.extend_from_slice(content);
    if sha256 {
        openssl::sha::sha256(&data).to_vec()
    } else {
        openssl::sha::sha1(&data).to_vec()
    }
}

/// Paths and object ids of a Git index (versions 2, 3 and 4). None when the
/// file is not an index Lazaret understands.
pub fn parse_index(data: &[u8], hash_len: usize) -> Option<Vec<(PathBuf, Vec<u8>)>> {
    let be32 = |o: usize| -> Option<u32> { Some(u32::from_be_bytes(data.get(o..o + 4)?.try_into().ok()?)) };
    if data.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut out = Vec::with_capacity(count.min(1 << 20));
    let mut off = 12;
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = off;
        let oid = data.get(off + 40..off + 40 + hash_len)?.to_vec();
        off += 40 + hash_len;
        let flags = u16::from_be_bytes(data.get(off..off + 2)?.try_into().ok()?);
        off += 2;
        if version >= 3 && flags & 0x4000 != 0 {
            off += 2;
        }
        let path = if version == 4 {
            let (strip, n) = varint(data.get(off..)?)?;
            off += n;
            let end = off + data.get(off..)?.iter().position(|&b| b == 0)?;
            let keep = prev.len().checked_sub(strip as usize)?;
            let mut p = prev[..keep].to_vec();
            p.extend_from_slice(&data[off..end]);
            off = end + 1;
            p
        } else {
            let end = off + data.get(off..)?.iter().position(|&b| b == 0)?;
            let p = data[off..end].to_vec();
            let len = end - start;
            off = start + ((len + 8) & !7);
            p
        };
        prev = path.clone();
        out.push((PathBuf::from(std::ffi::OsStr::from_bytes(&path)), oid));
    }
    Some(out)
}

/// Git's offset varint (index v4).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut i = 0;
    let mut c = *b.first()?;
    let mut val = (c & 0x7f) as u64;
    while c & 0x80 != 0 {
        i += 1;
        c = *b.get(i)?;
        val = ((val + 1) << 7) | (c & 0x7f) as u64;
    }
    Some((val, i + 1))
}

/// Bytes and files the Domain keeps for ignored paths, for `lazaret state
/// inspect`. Symlinks are counted, never followed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(dead_code)] // for `lazaret state inspect`
pub struct Usage {
    pub files: u64,
    pub dirs: u64,
    pub bytes: u64,
}

/// Walks `DOMAIN_ROOT/ignored` (see `paths::DomainPaths::ignored_dir`).
#[allow(dead_code)] // for `lazaret state inspect`
pub fn usage(dir: &Path) -> Result<Usage, IgnoredError> {
    use std::os::unix::fs::MetadataExt;
    let mut u = Usage::default();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound && d == dir => return Ok(u),
            Err(e) => return Err(IgnoredError::Store(d, e)),
        };
        for e in rd.flatten() {
            let md = match e.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            if md.is_dir() {
                u.dirs += 1;
                stack.push(e.path());
            } else {
                u.files += 1;
                u.bytes += md.blocks() * 512;
            }
        }
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> IgnoreRules {
        IgnoreRules::from_texts(
            Path::new("/w"),
            &[
                ("", "node_modules/\n.env\ntarget\n*.log\n!keep.log\n/build/\n"),
                ("pkg", "dist/\n!.env\n"),
            ],
            ".venv/\n",
        )
    }

    #[test]
    fn matches_gitignore_semantics() {
        let r = rules();
        assert!(r.is_ignored(Path::new(".env"), false));
        assert!(r.is_ignored(Path::new("node_modules"), true));
        assert!(!r.is_ignored(Path::new("node_modules"), false), "dir-only pattern");
        assert!(r.is_ignored(Path::new("node_modules/x.js"), false));
        assert!(r.is_ignored(Path::new("a/b/node_modules/x/y.js"), false));
        assert!(r.is_ignored(Path::new("target/debug/x"), false));
        assert!(r.is_ignored(Path::new("a.log"), false));
        assert!(!r.is_ignored(Path::new("keep.log"), false));
        assert!(r.is_ignored(Path::new("build/x"), false));
        assert!(!r.is_ignored(Path::new("src/build/x"), false), "anchored");
        assert!(r.is_ignored(Path::new("pkg/dist/a"), false));
        assert!(!r.is_ignored(Path::new("pkg/.env"), false), "deeper .gitignore wins");
        assert!(r.is_ignored(Path::new(".venv/bin/python"), false), "info/exclude");
        assert!(!r.is_ignored(Path::new("src/main.rs"), false));
        assert!(!r.is_ignored(Path::new(".git/x.log"), false));
    }

    /// Inside an `AncestorMemo` scope every answer is the one given
    /// outside it, whatever order paths come in (siblings, a parent's
    /// verdict reused, another rules set at the same parent path).
    #[test]
    fn ancestor_memo_changes_no_answer() {
        let r = rules();
        let other = IgnoreRules::from_texts(Path::new("/ws"), &[("", "src/\n")], "");
        let paths = [
            "node_modules/x.js",
            "node_modules/y.js",
            "src/main.rs",
            "src/build",
            "src/build/x",
            "src/lib.rs",
            "build/x",
            "build/y",
            "a/b/node_modules/x/y.js",
            "a/b/node_modules/x/z.js",
            "big/e000001",
            "big/e000002",
            "pkg/.env",
            "pkg/dist",
            ".git/x.log",
            "a.log",
        ];
        let plain: Vec<_> = paths
            .iter()
            .map(|p| {
                let p = Path::new(p);
                (
                    r.is_ignored_either(p),
                    r.is_ignored(p, false),
                    other.is_ignored(p, true),
                )
            })
            .collect();
        let _memo = AncestorMemo::enter();
        for _ in 0..2 {
            for (p, want) in paths.iter().zip(&plain) {
                let p = Path::new(p);
                let got = (
                    r.is_ignored_either(p),
                    r.is_ignored(p, false),
                    other.is_ignored(p, true),
                );
                assert_eq!(&got, want, "{p:?}");
            }
        }
    }

    /// The one-walk forms answer exactly what the per-type calls do: the
    /// shortcut by first component never misses a host-tool path.
    #[test]
    fn either_type_and_host_tool_shortcut_agree_with_the_plain_walk() {
        let r = rules().with_host_tool(vec![
            PathBuf::from(".vscode"),
            PathBuf::from(".claude/settings.json"),
            PathBuf::from("tools/hook.sh"),
        ]);
        let paths = [
            "",
            ".env",
            "node_modules",
            "node_modules/x.js",
            "a/b/node_modules/x/y.js",
            "target",
            "a.log",
            "keep.log",
            "build",
            "build/x",
            "src/build",
            "pkg/dist",
            "pkg/.env",
            ".venv",
            "src/main.rs",
            ".git/x.log",
            ".vscode",
            ".vscode/tasks.json",
            ".vscodex",
            ".claude",
            ".claude/settings.json",
            ".claude/settings.json/x",
            ".claude/other",
            "tools",
            "tools/hook.sh",
            "tools/hook.shx",
            "big/e000001",
        ];
        for p in paths {
            let p = Path::new(p);
            assert_eq!(
                r.is_ignored_either(p),
                r.is_ignored(p, false) || r.is_ignored(p, true),
                "{p:?}"
            );
            let covered = covers(&r.host_tool, p);
            if covered {
                assert!(
                    r.is_ignored(p, false) && r.is_ignored(p, true),
                    "{p:?} is a host-tool path"
                );
            }
        }
        assert!(r.is_ignored(Path::new(".vscode/tasks.json"), false));
        assert!(r.is_ignored(Path::new(".claude/settings.json"), false));
        assert!(!r.is_ignored(Path::new(".claude/other"), false));
        assert!(!r.is_ignored(Path::new(".vscodex"), false));
        assert!(!r.is_ignored(Path::new("tools/hook.shx"), false));
        // A host-tool path naming the workspace itself covers everything.
        let all = rules().with_host_tool(vec![PathBuf::new()]);
        assert!(all.is_ignored(Path::new("src/main.rs"), false));
    }

    #[test]
    fn parent_exclusion_cannot_be_undone() {
        let r = IgnoreRules::from_texts(Path::new("/w"), &[("", "out/\n!out/keep\n")], "");
        assert!(r.is_ignored(Path::new("out/keep"), false));
    }

    #[test]
    fn verified_tracked_paths_pass_through() {
        let mut r = rules();
        r.add_verified(PathBuf::from("build/tracked.txt"));
        assert!(!r.is_ignored(Path::new("build"), true));
        assert!(!r.is_ignored(Path::new("build/tracked.txt"), false));
        assert!(r.is_ignored(Path::new("build/other.txt"), false));
    }

    #[test]
    fn parses_index_v2_and_v4() {
        // Built by hand: two entries, version 2.
        fn entry_v2(path: &str, oid: u8) -> Vec<u8> {
            let mut e = vec![0u8; 40];
            e.extend_from_slice(&[oid; 20]);
            e.extend_from_slice(&(path.len() as u16).to_be_bytes());
            e.extend_from_slice(path.as_bytes());
            let len = e.len();
            e.resize((len + 8) & !7, 0);
            e
        }
        let mut d = b"DIRC".to_vec();
        d.extend_from_slice(&2u32.to_be_bytes());
        d.extend_from_slice(&2u32.to_be_bytes());
        d.extend(entry_v2("a.txt", 1));
        d.extend(entry_v2("dir/b", 2));
        let v = parse_index(&d, 20).unwrap();
        assert_eq!(v[0].0, PathBuf::from("a.txt"));
        assert_eq!(v[1], (PathBuf::from("dir/b"), vec![2u8; 20]));

        let mut d = b"DIRC".to_vec();
        d.extend_from_slice(&4u32.to_be_bytes());
        d.extend_from_slice(&2u32.to_be_bytes());
        for (strip, suffix) in [(0u8, "dir/a"), (1, "b")] {
            d.extend(vec![0u8; 40]);
            d.extend([7u8; 20]);
            d.extend(5u16.to_be_bytes());
            d.push(strip);
            d.extend(suffix.as_bytes());
            d.push(0);
        }
        let v = parse_index(&d, 20).unwrap();
        assert_eq!(v[1].0, PathBuf::from("dir/b"));
        assert!(parse_index(b"nope", 20).is_none());
    }

    #[test]
    fn blob_ids_match_git() {
        // `printf hello | git hash-object --stdin`
        assert_eq!(
            crate::domain::hex(&blob_id(b"hello", false)),
            "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"
        );
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lz-ign-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn bom_and_non_utf8_rules_still_hide() {
        let r = IgnoreRules::from_texts(Path::new("/w"), &[], "");
        let _ = r;
        let m = build_matcher(
            Path::new("/w"),
            b"\xef\xbb\xbf.env\nsecret-\xff.txt\n!\xfe.env\r\nkey\\\xfe\n",
        )
        .unwrap();
        let ig = |p: &[u8]| {
            matches!(
                m.matched(Path::new(std::ffi::OsStr::from_bytes(p)), false),
                Match::Ignore(_)
            )
        };
        assert!(ig(b"/w/.env"), "BOM stripped");
        assert!(ig(b"/w/secret-\xff.txt"), "non-UTF-8 line kept");
        assert!(ig(b"/w/key\xfe"), "escaped invalid byte");
        assert!(!ig(b"/w/other"));
        assert!(build_matcher(Path::new("/w"), b"a[\xff]\n").is_err(), "fails closed");
    }

    #[test]
    fn unsafe_gitignore_files_make_their_directory_opaque() {
        let d = scratch("opaque");
        std::fs::create_dir_all(d.join("a")).unwrap();
        std::fs::create_dir_all(d.join("b")).unwrap();
        std::fs::create_dir_all(d.join("c")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("a/.gitignore")).unwrap();
        std::fs::write(d.join("b/.gitignore"), vec![b'x'; (RULES_MAX + 1) as usize]).unwrap();
        std::fs::create_dir(d.join("c/.gitignore")).unwrap();
        std::fs::write(d.join(".gitignore"), "\u{feff}.env\n").unwrap();
        std::fs::write(d.join("a/x"), "x").unwrap();
        let r = IgnoreRules::load(&d, None, None, &[]).unwrap();
        assert!(r.is_ignored(Path::new("a/x"), false));
        assert!(r.is_ignored(Path::new("b/y"), false));
        assert!(r.is_ignored(Path::new("c/z"), false));
        assert!(!r.is_ignored(Path::new("a"), true), "the directory itself stays");
        assert!(r.is_ignored(Path::new(".env"), false));
        assert!(!r.is_ignored(Path::new("src/main.rs"), false));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_new_file_on_a_hidden_files_inode_number_is_not_hidden() {
        use std::os::unix::fs::MetadataExt;
        let d = scratch("reuse");
        std::fs::write(d.join(".gitignore"), "/secret\n").unwrap();
        std::fs::write(d.join("secret"), "s").unwrap();
        let r = IgnoreRules::load(&d, None, None, &[]).unwrap();
        let md = std::fs::metadata(d.join("secret")).unwrap();
        let (dev, ino, b) = (md.dev(), md.ino(), btime_of(&md));
        assert!(r.is_hidden_id(dev, ino, b));
        assert!(r.is_hidden_id(dev, ino, 0), "an unknown birth time hides (fail closed)");
        assert_eq!(r.sticky()[0].btime, b);
        if b != 0 {
            // The filesystem gave the inode number to a file born later.
            assert!(!r.is_hidden_id(dev, ino, b + 1));
            let prev = [StickyEntry {
                dev,
                ino,
                btime: b + 1,
                rel: PathBuf::from("old"),
            }];
            std::fs::write(d.join(".gitignore"), "").unwrap();
            let r2 = IgnoreRules::load(&d, None, None, &prev).unwrap();
            assert!(!r2.is_hidden_id(dev, ino, b), "a sticky record of another file's birth");
        }
        // Records written before birth times were kept: unknown, so hidden.
        let f = d.join("ignored.sticky");
        std::fs::write(&f, format!("5 6 {}\n", crate::domain::hex(b"a/b"))).unwrap();
        let old = read_sticky(&f).unwrap();
        assert_eq!((old[0].dev, old[0].ino, old[0].btime), (5, 6, 0));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn hidden_identities_are_sticky_across_rule_edits_and_renames() {
        use std::os::unix::fs::MetadataExt;
        let d = scratch("sticky");
        std::fs::create_dir_all(d.join("config")).unwrap();
        std::fs::write(d.join("config/master.key"), "k").unwrap();
        std::fs::write(d.join(".env"), "e").unwrap();
        std::fs::write(d.join(".gitignore"), "/config/master.key\n.env\n").unwrap();
        let r = IgnoreRules::load(&d, None, None, &[]).unwrap();
        let md = std::fs::metadata(d.join("config/master.key")).unwrap();
        assert!(r.is_hidden_id(md.dev(), md.ino(), btime_of(&md)));
        assert_eq!(r.sticky().len(), 2);
        let f = d.join("ignored.sticky");
        write_sticky(&f, r.sticky()).unwrap();
        let prev = read_sticky(&f).unwrap();
        assert_eq!(prev, r.sticky());
        // From inside: rules emptied, directory renamed.
        std::fs::write(d.join(".gitignore"), "").unwrap();
        std::fs::rename(d.join("config"), d.join("c2")).unwrap();
        let r2 = IgnoreRules::load(&d, None, None, &prev).unwrap();
        assert!(r2.is_hidden_id(md.dev(), md.ino(), btime_of(&md)));
        let env = std::fs::metadata(d.join(".env")).unwrap();
        assert!(r2.is_hidden_id(env.dev(), env.ino(), btime_of(&env)));
        assert!(r2.sticky().iter().any(|e| e.rel == Path::new("c2/master.key")));
        // Replaced on the host at the same path (a new inode, rules still
        // emptied): hidden by its path.
        std::fs::write(d.join(".env.tmp"), "v2").unwrap();
        std::fs::rename(d.join(".env.tmp"), d.join(".env")).unwrap();
        let r2 = IgnoreRules::load(&d, None, None, r2.sticky()).unwrap();
        let env2 = std::fs::metadata(d.join(".env")).unwrap();
        assert!(r2.is_hidden_id(env2.dev(), env2.ino(), btime_of(&env2)));
        assert!(r2.is_ignored(Path::new(".env"), false));
        // Deleted on the host: forgotten.
        std::fs::remove_file(d.join(".env")).unwrap();
        let r3 = IgnoreRules::load(&d, None, None, r2.sticky()).unwrap();
        assert_eq!(r3.sticky().len(), 1);
        std::fs::write(&f, "1 2 zz\n").unwrap();
        assert!(read_sticky(&f).is_err(), "malformed is an error, not empty");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn rules_emptied_between_generations_still_hide_later_files() {
        let d = scratch("history");
        std::fs::write(d.join(".gitignore"), ".env\n").unwrap();
        let r = IgnoreRules::load_with_history(&d, None, None, &[], &[]).unwrap();
        let f = d.join("ignored.rules");
        write_rules_history(&f, r.rules_history()).unwrap();
        // From inside: rules emptied. Later the host creates .env.
        std::fs::write(d.join(".gitignore"), "").unwrap();
        let h = read_rules_history(&f).unwrap();
        assert_eq!(h, r.rules_history());
        let r2 = IgnoreRules::load_with_history(&d, None, None, &[], &h).unwrap();
        write_rules_history(&f, r2.rules_history()).unwrap();
        std::fs::write(d.join(".env"), "secret").unwrap();
        let r3 = IgnoreRules::load_with_history(&d, None, None, &[], &read_rules_history(&f).unwrap()).unwrap();
        assert!(r3.is_ignored(Path::new(".env"), false));
        assert!(!r3.is_ignored(Path::new("src.rs"), false));
        std::fs::write(&f, "zz\n").unwrap();
        assert!(read_rules_history(&f).is_err(), "malformed is an error, not empty");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn hashes_regular_files_only() {
        let d = scratch("hash");
        std::fs::write(d.join("f"), "hello").unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("z")).unwrap();
        let root = rustix::fs::open(&d, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        assert_eq!(
            hash_beneath(root.as_fd(), Path::new("f"), false),
            Some(blob_id(b"hello", false))
        );
        assert_eq!(hash_beneath(root.as_fd(), Path::new("z"), false), None);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn usage_counts_files_and_dirs() {
        let d = std::env::temp_dir().join(format!("lz-ign-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a/node_modules")).unwrap();
        std::fs::write(d.join("a/node_modules/x.js"), "x").unwrap();
        std::fs::write(d.join(".env"), "y").unwrap();
        let u = usage(&d).unwrap();
        assert_eq!((u.files, u.dirs), (2, 2));
        assert_eq!(usage(&d.join("missing")).unwrap(), Usage::default());
        let _ = std::fs::remove_dir_all(&d);
    }
}
