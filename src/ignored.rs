//! Ignored Workspace State (SR-13, FR-9): which workspace paths Git ignores,
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

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

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

/// A snapshot of the workspace's ignore rules.
pub struct IgnoreRules {
    root: PathBuf,
    /// One matcher per directory that has a `.gitignore`, by view path.
    per_dir: std::collections::HashMap<PathBuf, Gitignore>,
    /// `info/exclude` and the global excludes file, rooted at the workspace.
    exclude: Gitignore,
    /// Tracked paths whose host content equals their index blob.
    verified: HashSet<PathBuf>,
    /// Every ancestor directory of a `verified` path.
    verified_dirs: HashSet<PathBuf>,
}

impl IgnoreRules {
    /// Rules from explicit pattern files, for tests and tools: `(dir, text)`
    /// pairs, where `dir` is the view path holding a `.gitignore`.
    #[allow(dead_code)]
    pub fn from_texts(root: &Path, gitignores: &[(&str, &str)], exclude: &str) -> IgnoreRules {
        let mut per_dir = std::collections::HashMap::new();
        for (dir, text) in gitignores {
            per_dir.insert(PathBuf::from(dir), matcher(&root.join(dir), text));
        }
        IgnoreRules {
            root: root.to_path_buf(),
            per_dir,
            exclude: matcher(root, exclude),
            verified: HashSet::new(),
            verified_dirs: HashSet::new(),
        }
    }

    /// Reads the rules of the workspace at `root`. `common` and `git_dir` are
    /// the repository's directories (None outside a repository).
    pub fn load(root: &Path, git_dir: Option<&Path>, common: Option<&Path>) -> Result<IgnoreRules, IgnoredError> {
        let mut exclude_text = String::new();
        if let Some(c) = common {
            exclude_text.push_str(&std::fs::read_to_string(c.join("info/exclude")).unwrap_or_default());
            exclude_text.push('\n');
        }
        if let Some(g) = global_excludes_file() {
            exclude_text.push_str(&std::fs::read_to_string(g).unwrap_or_default());
        }
        let mut rules = IgnoreRules {
            root: root.to_path_buf(),
            per_dir: Default::default(),
            exclude: matcher(root, &exclude_text),
            verified: HashSet::new(),
            verified_dirs: HashSet::new(),
        };
        // Walk top-down; an ignored directory's .gitignore files do not count.
        let mut stack = vec![PathBuf::new()];
        while let Some(dir) = stack.pop() {
            let abs = root.join(&dir);
            if let Ok(text) = std::fs::read_to_string(abs.join(".gitignore")) {
                rules.per_dir.insert(dir.clone(), matcher(&abs, &text));
            }
            let rd = match std::fs::read_dir(&abs) {
                Ok(rd) => rd,
                Err(e) if dir.as_os_str().is_empty() => return Err(IgnoredError::Walk(abs, e)),
                Err(_) => continue,
            };
            for e in rd.flatten() {
                let name = e.file_name();
                if name == ".git" {
                    continue;
                }
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    let child = dir.join(&name);
                    if !rules.matches_rules(&child, true) {
                        stack.push(child);
                    }
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
                    if let Ok(content) = std::fs::read(root.join(&path)) {
                        if blob_id(&content, sha256) == oid {
                            rules.add_verified(path);
                        }
                    }
                }
            }
        }
        Ok(rules)
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
        let comps: Vec<Component> = rel.components().collect();
        if comps.iter().any(|c| c.as_os_str() == ".git") {
            return false;
        }
        let mut prefix = PathBuf::new();
        // Below a matching directory kept only for its tracked content,
        // everything else is ignored, as Git never looks inside it.
        let mut below_match = false;
        for (i, c) in comps.iter().enumerate() {
            prefix.push(c.as_os_str());
            let last = i + 1 == comps.len();
            let dir = !last || is_dir;
            if below_match || self.matches_rules(&prefix, dir) {
                let kept = if dir {
                    self.verified_dirs.contains(&prefix)
                } else {
                    self.verified.contains(&prefix)
                };
                if !kept {
                    return true;
                }
                below_match = true;
            }
        }
        false
    }
}

fn matcher(root: &Path, text: &str) -> Gitignore {
    let mut b = GitignoreBuilder::new(root);
    for line in text.lines() {
        let _ = b.add_line(None, line);
    }
    b.build().unwrap_or_else(|_| Gitignore::empty())
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
/// inspect` (SR-13). Symlinks are counted, never followed.
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
