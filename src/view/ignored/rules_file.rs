//! One rules file, read and built as Git reads it: bounded, opened beneath
//! the workspace without following links, and made into a matcher.

use std::fmt;
use std::os::fd::BorrowedFd;
use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::RULES_MAX;

pub(super) fn matcher(root: &Path, text: &str) -> Gitignore {
    build_matcher(root, text.as_bytes()).expect("test rules build")
}

pub(super) fn strip_bom(b: &[u8]) -> &[u8] {
    b.strip_prefix(b"\xef\xbb\xbf").unwrap_or(b)
}

/// The matcher for one rules file, read as Git reads it: bytes, a leading
/// UTF-8 BOM dropped, lines split at LF (a CR before it dropped). A line
/// that is not UTF-8 keeps its valid part and matches any single byte where
/// an invalid one stands (a superset of Git's byte-exact match); a negated
/// one is dropped (fewer exceptions hide more). A rule that does not build
/// is an error: the caller hides everything it would have governed.
pub(super) fn build_matcher(dir: &Path, data: &[u8]) -> Result<Gitignore, RulesError> {
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
pub(super) enum RulesError {
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

pub(super) enum RulesFile {
    Missing,
    Text(Vec<u8>),
    Refused(String),
}

/// Reads a rules file: beneath `root` without following a symlink at any
/// step (a workspace `.gitignore`), or at an absolute path (`info/exclude`,
/// the global excludes file: the user's own), and only when it is a regular
/// file of at most `RULES_MAX` bytes and within the remaining `budget`.
pub(super) fn read_rules_file(root: Option<BorrowedFd>, path: &Path, budget: &mut u64) -> RulesFile {
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
