//! The Domain's files beside the ignored store: the sticky set of hidden
//! host identities, the rules texts of earlier generations, and what the
//! store holds (`usage`).

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::IgnoredError;

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
