//! Host-side change tracking for the workspace view (src/view/fs/).
//!
//! The view lets the kernel cache entries, attributes, file pages and
//! directory listings for a long time, because every uncached lookup is a
//! FUSE round trip and `git status` does one per tracked file. What makes the
//! long cache correct is this module: an inotify watch on every host
//! directory the kernel has looked up, and a thread that turns each host-side
//! change into the matching kernel invalidation (`FUSE_NOTIFY_INVAL_ENTRY`
//! for the name, `FUSE_NOTIFY_INVAL_INODE` for the file and its directory).
//! A directory that cannot be watched (the user's inotify limit) keeps the
//! short timeout; an event queue overflow invalidates everything.
//!
//! The view drops, before planning, the events that change nothing the
//! kernel holds (`fusefs::already_known`: its own chown/chmod/utimes and
//! creates). The planner (`plan`) is pure: events in, invalidations out.
//! The syscalls are in `sys`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::sys;

/// What a watched directory reports: its entries appearing, going or moving,
/// and its children's content or attributes changing.
const MASK: u32 = sys::IN_CREATE
    | sys::IN_DELETE
    | sys::IN_MOVED_FROM
    | sys::IN_MOVED_TO
    | sys::IN_MODIFY
    | sys::IN_ATTRIB
    | sys::IN_CLOSE_WRITE
    | sys::IN_EXCL_UNLINK;

/// Masks that change a directory's entries (and so its listing and mtime).
const ENTRY_CHANGE: u32 = sys::IN_CREATE | sys::IN_DELETE | sys::IN_MOVED_FROM | sys::IN_MOVED_TO;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub wd: i32,
    pub mask: u32,
    pub name: OsString,
}

/// Splits a buffer of `struct inotify_event` records. A truncated record at
/// the end is dropped (the kernel never returns one).
pub fn parse(buf: &[u8]) -> Vec<Event> {
    const HEAD: usize = 16; // wd, mask, cookie, len
    let mut out = Vec::new();
    let mut at = 0;
    while at + HEAD <= buf.len() {
        let word = |i: usize| u32::from_ne_bytes(buf[at + i..at + i + 4].try_into().expect("4 bytes"));
        let wd = word(0) as i32;
        let mask = word(4);
        let len = word(12) as usize;
        let Some(end) = (at + HEAD).checked_add(len).filter(|&e| e <= buf.len()) else {
            break;
        };
        let raw = &buf[at + HEAD..end];
        let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
        out.push(Event {
            wd,
            mask,
            name: std::ffi::OsStr::from_bytes(name).to_os_string(),
        });
        at = end;
    }
    out
}

/// One kernel invalidation, by node id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Inval {
    /// The name `name` in directory node `parent`.
    Entry { parent: u64, name: OsString },
    /// Attributes and cached pages (for a directory: its listing).
    Inode(u64),
    /// Everything the kernel holds (queue overflow).
    All,
}

/// Plans the invalidations for a batch of events. `dir_of` maps a watch to
/// the view path of its directory; `node_of` maps a host view path to the
/// node id the kernel knows it by.
pub fn plan(
    events: &[Event],
    dir_of: &dyn Fn(i32) -> Option<PathBuf>,
    node_of: &dyn Fn(&Path) -> Option<u64>,
) -> Vec<Inval> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut push = |i: Inval, out: &mut Vec<Inval>| {
        if seen.insert(i.clone()) {
            out.push(i);
        }
    };
    for ev in events {
        if ev.mask & sys::IN_Q_OVERFLOW != 0 {
            return vec![Inval::All];
        }
        if ev.name.is_empty() {
            continue; // about the watched directory itself: its parent's watch covers it
        }
        let Some(dir) = dir_of(ev.wd) else { continue };
        let dir_node = node_of(&dir);
        if ev.mask & ENTRY_CHANGE != 0 {
            if let Some(p) = dir_node {
                push(
                    Inval::Entry {
                        parent: p,
                        name: ev.name.clone(),
                    },
                    &mut out,
                );
                push(Inval::Inode(p), &mut out);
            }
        }
        if let Some(c) = node_of(&dir.join(&ev.name)) {
            push(Inval::Inode(c), &mut out);
        }
    }
    out
}

/// Host changes gVisor does not see as events: what a watcher inside
/// (`fs.watch`, inotifywait, a dev server) must hear of. The files (not
/// directories) whose content changed or that a name now points at
/// (written in place, created, or renamed onto: save-by-rename), outside
/// any `.git` directory; deletions have nothing left to touch (pure).
pub fn relayed(events: &[Event], dir_of: &dyn Fn(i32) -> Option<PathBuf>) -> Vec<PathBuf> {
    const CHANGED: u32 = sys::IN_MODIFY | sys::IN_CLOSE_WRITE | sys::IN_MOVED_TO | sys::IN_CREATE;
    let mut out: Vec<PathBuf> = Vec::new();
    for ev in events {
        if ev.mask & CHANGED == 0 || ev.mask & sys::IN_ISDIR != 0 || ev.name.is_empty() {
            continue;
        }
        let Some(dir) = dir_of(ev.wd) else { continue };
        let rel = dir.join(&ev.name);
        if rel.components().any(|c| c.as_os_str() == ".git") || out.contains(&rel) {
            continue;
        }
        out.push(rel);
    }
    out
}

/// The names a host file now stands at that another file had (renamed
/// onto: a save-by-rename, `sed -i`; or made anew), outside any `.git`
/// directory, files only. A watcher inside that watches the file itself
/// (`node --watch`, `fs.watch(file)`) watches the file gVisor last saw
/// there, which no touch of the name reaches once the kernel looks the
/// name up again: the view relays these first, while the kernel still
/// resolves the name to the old file (pure).
pub fn replaced(events: &[Event], dir_of: &dyn Fn(i32) -> Option<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for ev in events {
        if ev.mask & (sys::IN_MOVED_TO | sys::IN_CREATE) == 0 || ev.mask & sys::IN_ISDIR != 0 || ev.name.is_empty() {
            continue;
        }
        let Some(dir) = dir_of(ev.wd) else { continue };
        let rel = dir.join(&ev.name);
        if rel.components().any(|c| c.as_os_str() == ".git") || out.contains(&rel) {
            continue;
        }
        out.push(rel);
    }
    out
}

/// Invalidations for everything the kernel may hold: every known host node
/// as (id, parent id, name).
pub fn plan_all(nodes: &[(u64, Option<u64>, OsString)]) -> Vec<Inval> {
    let mut out = Vec::new();
    for (id, parent, name) in nodes {
        if let Some(p) = parent {
            out.push(Inval::Entry {
                parent: *p,
                name: name.clone(),
            });
        }
        out.push(Inval::Inode(*id));
    }
    out
}

#[derive(Default)]
struct Map {
    by_wd: HashMap<i32, PathBuf>,
    by_rel: HashMap<PathBuf, i32>,
}

/// The inotify instance of one view and which directory each watch is on.
pub struct Watches {
    fd: OwnedFd,
    map: Mutex<Map>,
    /// Cleared when the event thread stops: nothing is long-cached any more.
    healthy: AtomicBool,
    warned: AtomicBool,
}

impl Watches {
    pub fn new() -> io::Result<Watches> {
        Ok(Watches {
            fd: sys::inotify_new()?,
            map: Mutex::new(Map::default()),
            healthy: AtomicBool::new(true),
            warned: AtomicBool::new(false),
        })
    }

    /// Watches host directory `rel`, open as `dir`. False when the user's
    /// watch limit is reached: the directory keeps the short timeout.
    pub fn watch(&self, dir: BorrowedFd, rel: &Path) -> bool {
        if self.is_watched(rel) {
            return true;
        }
        match sys::inotify_watch_fd(&self.fd, dir, MASK) {
            Ok(wd) => {
                let mut m = self.map.lock().unwrap();
                if let Some(old) = m.by_wd.insert(wd, rel.to_path_buf()) {
                    // The same directory under a new path (moved on the host).
                    m.by_rel.remove(&old);
                }
                m.by_rel.insert(rel.to_path_buf(), wd);
                true
            }
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    log::warn!(
                        "workspace view: cannot watch {} ({e}); host edits there show up within 1 s \
                         (raise fs.inotify.max_user_watches)",
                        rel.display()
                    );
                }
                false
            }
        }
    }

    pub fn is_watched(&self, rel: &Path) -> bool {
        self.healthy.load(Ordering::Relaxed) && self.map.lock().unwrap().by_rel.contains_key(rel)
    }

    /// The kernel forgot directory `rel`.
    pub fn unwatch(&self, rel: &Path) {
        let mut m = self.map.lock().unwrap();
        if let Some(wd) = m.by_rel.remove(rel) {
            m.by_wd.remove(&wd);
            sys::inotify_unwatch(&self.fd, wd);
        }
    }

    /// The view renamed `from` to `to`: watches below move with it.
    pub fn renamed(&self, from: &Path, to: &Path) {
        let mut m = self.map.lock().unwrap();
        let moved: Vec<(PathBuf, i32)> = m
            .by_rel
            .iter()
            .filter(|(r, _)| r.starts_with(from))
            .map(|(r, wd)| (r.clone(), *wd))
            .collect();
        for (old, wd) in moved {
            let rest = old.strip_prefix(from).expect("filtered by prefix");
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            m.by_rel.remove(&old);
            m.by_rel.insert(new.clone(), wd);
            m.by_wd.insert(wd, new);
        }
    }

    pub fn dir_of(&self, wd: i32) -> Option<PathBuf> {
        self.map.lock().unwrap().by_wd.get(&wd).cloned()
    }

    /// A watch the kernel dropped (its directory was removed).
    pub fn dropped(&self, wd: i32) {
        let mut m = self.map.lock().unwrap();
        if let Some(rel) = m.by_wd.remove(&wd) {
            if m.by_rel.get(&rel) == Some(&wd) {
                m.by_rel.remove(&rel);
            }
        }
    }

    /// Blocks for the next batch of events.
    pub fn read(&self) -> io::Result<Vec<Event>> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sys::read(&self.fd, &mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => return Ok(parse(&buf[..n])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    pub fn set_unhealthy(&self) {
        self.healthy.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relayed_are_changed_files_outside_git() {
        let ev = |wd, mask, name: &str| Event {
            wd,
            mask,
            name: name.into(),
        };
        let dir_of = |wd: i32| match wd {
            1 => Some(PathBuf::from("src")),
            2 => Some(PathBuf::from(".git")),
            _ => None,
        };
        let events = [
            ev(1, sys::IN_MODIFY, "a.js"),
            ev(1, sys::IN_CLOSE_WRITE, "a.js"),
            // save-by-rename: the temporary file, then the name it lands on
            ev(1, sys::IN_CREATE, ".b.js.swp"),
            ev(1, sys::IN_MOVED_FROM, ".b.js.swp"),
            ev(1, sys::IN_MOVED_TO, "b.js"),
            ev(1, sys::IN_ATTRIB, "c.js"),
            ev(1, sys::IN_DELETE, "d.js"),
            ev(1, sys::IN_CREATE | sys::IN_ISDIR, "newdir"),
            ev(2, sys::IN_MODIFY, "index"),
            ev(3, sys::IN_MODIFY, "unknown"),
        ];
        assert_eq!(
            relayed(&events, &dir_of),
            [
                PathBuf::from("src/a.js"),
                PathBuf::from("src/.b.js.swp"),
                PathBuf::from("src/b.js")
            ]
        );
    }

    #[test]
    fn replaced_are_names_renamed_onto_or_made_outside_git() {
        let ev = |wd, mask, name: &str| Event {
            wd,
            mask,
            name: name.into(),
        };
        let dir_of = |wd: i32| match wd {
            1 => Some(PathBuf::from("")),
            2 => Some(PathBuf::from(".git")),
            _ => None,
        };
        let events = [
            // sed -i: its temporary file, written, renamed onto the name
            ev(1, sys::IN_CREATE, "sedAb12"),
            ev(1, sys::IN_MODIFY, "sedAb12"),
            ev(1, sys::IN_MOVED_FROM, "sedAb12"),
            ev(1, sys::IN_MOVED_TO, "script.js"),
            ev(1, sys::IN_MOVED_TO, "script.js"),
            ev(1, sys::IN_MODIFY, "in-place.js"),
            ev(1, sys::IN_MOVED_TO | sys::IN_ISDIR, "dir"),
            ev(2, sys::IN_MOVED_TO, "index"),
            ev(3, sys::IN_CREATE, "unknown"),
        ];
        assert_eq!(
            replaced(&events, &dir_of),
            [PathBuf::from("sedAb12"), PathBuf::from("script.js")]
        );
    }

    fn record(wd: i32, mask: u32, name: &str) -> Vec<u8> {
        let mut n = name.as_bytes().to_vec();
        if !n.is_empty() {
            n.resize(n.len().div_ceil(16) * 16, 0);
        }
        let mut b = Vec::new();
        b.extend_from_slice(&wd.to_ne_bytes());
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(n.len() as u32).to_ne_bytes());
        b.extend_from_slice(&n);
        b
    }

    #[test]
    fn parses_records_and_drops_a_truncated_tail() {
        let mut b = record(3, sys::IN_CREATE, "a.txt");
        b.extend(record(4, sys::IN_DELETE_SELF, ""));
        let full = b.len();
        b.extend(record(5, sys::IN_MODIFY, "long-name-here"));
        let evs = parse(&b[..b.len() - 3]);
        assert_eq!(evs.len(), 2);
        assert_eq!(
            evs[0],
            Event {
                wd: 3,
                mask: sys::IN_CREATE,
                name: "a.txt".into()
            }
        );
        assert_eq!(evs[1].name, OsString::new());
        assert_eq!(parse(&b[..full]).len(), 2);
        assert_eq!(parse(&b).len(), 3);
        assert!(parse(&[1, 2, 3]).is_empty());
    }

    #[test]
    fn plans_entry_and_inode_invalidations() {
        let dir_of = |wd: i32| match wd {
            1 => Some(PathBuf::from("")),
            2 => Some(PathBuf::from("src")),
            _ => None,
        };
        let node_of = |p: &Path| match p.to_str().unwrap() {
            "" => Some(1),
            "src" => Some(10),
            "src/a.rs" => Some(11),
            _ => None,
        };
        let ev = |wd, mask, name: &str| Event {
            wd,
            mask,
            name: name.into(),
        };
        // A content change: only the file's inode.
        assert_eq!(
            plan(&[ev(2, sys::IN_MODIFY, "a.rs")], &dir_of, &node_of),
            vec![Inval::Inode(11)]
        );
        // A new name: the entry and the directory (listing, mtime); no node yet.
        assert_eq!(
            plan(&[ev(2, sys::IN_CREATE, "b.rs")], &dir_of, &node_of),
            vec![
                Inval::Entry {
                    parent: 10,
                    name: "b.rs".into()
                },
                Inval::Inode(10)
            ]
        );
        // A removal of a known file: entry, directory and the file; repeats collapse.
        let del = ev(2, sys::IN_DELETE, "a.rs");
        assert_eq!(
            plan(&[del.clone(), del, ev(2, sys::IN_ATTRIB, "a.rs")], &dir_of, &node_of),
            vec![
                Inval::Entry {
                    parent: 10,
                    name: "a.rs".into()
                },
                Inval::Inode(10),
                Inval::Inode(11)
            ]
        );
        // Root directory, unknown watch, self events.
        assert_eq!(
            plan(&[ev(1, sys::IN_MOVED_TO, "src")], &dir_of, &node_of),
            vec![
                Inval::Entry {
                    parent: 1,
                    name: "src".into()
                },
                Inval::Inode(1),
                Inval::Inode(10)
            ]
        );
        assert!(plan(&[ev(9, sys::IN_CREATE, "x")], &dir_of, &node_of).is_empty());
        assert!(plan(&[ev(2, sys::IN_DELETE_SELF, "")], &dir_of, &node_of).is_empty());
        // Overflow: everything.
        assert_eq!(
            plan(
                &[ev(2, sys::IN_MODIFY, "a.rs"), ev(-1, sys::IN_Q_OVERFLOW, "")],
                &dir_of,
                &node_of
            ),
            vec![Inval::All]
        );
    }
}
