//! The view's nodes: which node a path is, registering the kernel's
//! lookups (hard links as one node), what the guest saw of a file, and
//! keeping the table in step with renames, removals and forgets.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuser::{Errno, FileAttr, INodeNo};

use super::host::{is_dir, Side};
use super::table::{
    after_own, after_own_meta, may_be_same, proven_same, told, unchanged_between, version, Node, Proof, Tables,
};
use super::{View, PINNED_MAX};

impl View {
    /// The node id of the entry at `rel`, if the kernel knows it.
    pub(super) fn known(&self, side: Side, rel: &Path) -> Option<u64> {
        self.t.lock().unwrap().by_key.get(&(side, rel.to_path_buf())).copied()
    }

    pub(super) fn node(&self, ino: INodeNo) -> Result<(Side, PathBuf, bool), Errno> {
        let (side, rel, protected, gone) = self.node_any(ino)?;
        if gone {
            return Err(Errno::ENOENT);
        }
        Ok((side, rel, protected))
    }

    /// Like `node`, for a node whose names are gone too (its handle still
    /// serves it): side, last path, protected, gone. Protected when any of
    /// its paths is.
    pub(super) fn node_any(&self, ino: INodeNo) -> Result<(Side, PathBuf, bool, bool), Errno> {
        let mut t = self.t.lock().unwrap();
        let n = t.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
        n.used = true;
        let (side, rel, sticky, gone, aliases) = (n.side, n.rel.clone(), n.protected, n.gone, n.aliases.clone());
        drop(t);
        let protected = sticky || self.protected_at(side, &rel) || aliases.iter().any(|a| self.protected_at(side, a));
        Ok((side, rel, protected, gone))
    }

    /// Registers one kernel lookup of the entry at `rel` and returns its
    /// attributes under its node id.
    pub(super) fn remember(&self, side: Side, rel: &Path) -> Result<FileAttr, Errno> {
        let (st, handle, proof) = self.stat_handle(side, rel)?;
        self.remember_stat(side, rel, &st, handle, proof)
    }

    /// A lookup's `find` and `remember` on one stat: the entry's side and
    /// its attributes under its node id. The stat `find` decides by is the
    /// one the node records (no second stat that could see another file).
    /// Its `O_PATH` handle is taken whatever the bound, for the file's
    /// proof (`table::Proof`), and kept only while the node table may keep
    /// one (`handles_max`).
    pub(super) fn look_up(&self, parent_side: Side, rel: &Path) -> Result<(Side, FileAttr), Errno> {
        let (side, st, handle, proof) = self.find_with(parent_side, rel, true)?;
        Ok((side, self.remember_stat(side, rel, &st, handle, proof)?))
    }

    /// `remember` for an entry already stat'ed (`handle`: its `O_PATH`
    /// handle from the same stat, if taken; `proof`: its file handle).
    fn remember_stat(
        &self,
        side: Side,
        rel: &Path,
        st: &rustix::fs::Stat,
        handle: Option<OwnedFd>,
        proof: Option<Proof>,
    ) -> Result<FileAttr, Errno> {
        let st = *st;
        let dir = is_dir(&st);
        if dir && side == Side::Host {
            // Watched before the kernel can cache anything below it.
            if let Some(w) = &self.watch {
                if !w.is_watched(rel) {
                    if let Ok(d) = self.dir(side, rel) {
                        w.watch(d.as_fd(), rel);
                    }
                }
            }
        }
        let protected = self.protected_at(side, rel);
        let key = (side, rel.to_path_buf());
        let ikey = (side, st.st_dev, st.st_ino);
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let existing = t.by_key.get(&key).copied();
        let id = match existing {
            // The same file as before.
            Some(id) if is_file_of(t, id, &st, proof.as_deref(), false) => id,
            _ => {
                if let Some(old) = existing {
                    // Another file now has this path (replaced on the host).
                    t.detach(old, side, rel);
                }
                // Another name of a file the kernel knows: the same node.
                // Only a node holding a handle, or one whose proof is this
                // file's, is sure to be that file (an inode number is
                // reused once its file is freed).
                let linked = if dir {
                    None
                } else {
                    t.by_ino
                        .get(&ikey)
                        .copied()
                        .filter(|id| is_file_of(t, *id, &st, proof.as_deref(), true))
                };
                // A file the view gave an id before: that id again, its
                // node forgotten since (or a name not joined by `by_ino`).
                let known = match (linked, &proof) {
                    (None, Some(p)) => t
                        .ids
                        .get(&ikey)
                        .filter(|(_, q)| q == p)
                        .map(|(id, _)| *id)
                        .filter(|id| t.nodes.get(id).is_none_or(|n| !dir && !n.dir)),
                    _ => linked,
                };
                match known {
                    Some(id) if t.nodes.contains_key(&id) => {
                        let n = t.nodes.get_mut(&id).expect("node of a known inode");
                        if n.gone {
                            n.gone = false;
                            n.rel = rel.to_path_buf();
                        } else if n.rel != rel {
                            // The name just looked up reaches the file now;
                            // an older one may not (the host renamed or
                            // removed it): operations by path take this one.
                            let old = std::mem::replace(&mut n.rel, rel.to_path_buf());
                            n.aliases.retain(|a| a != rel);
                            n.aliases.push(old);
                        }
                        t.by_key.insert(key, id);
                        if !dir {
                            t.by_ino.insert(ikey, id);
                        }
                        id
                    }
                    known => {
                        let id = known.unwrap_or_else(|| {
                            let id = t.next_id;
                            t.next_id += 1;
                            id
                        });
                        t.by_key.insert(key, id);
                        t.nodes.insert(id, Node::new(side, rel.to_path_buf(), &st));
                        if !dir {
                            t.by_ino.insert(ikey, id);
                        }
                        t.remember_id(id, side, st.st_dev, st.st_ino, proof);
                        id
                    }
                }
            }
        };
        let n = t.nodes.get_mut(&id).expect("node of a known key");
        n.protected |= protected;
        // Used again; a new node starts unused, its place at the end of the
        // handle clock's round guarding it for one round.
        n.used = n.lookups > 0;
        n.lookups += 1;
        n.told = Some(told(&st));
        n.end = st.st_size;
        // Past the bound, the least recently used file gives its handle
        // up for this one (a file the guest is using keeps its own).
        if n.file.is_none() && handle.is_some() {
            let dir = n.dir;
            let keep =
                t.handles_held < self.handles_max || (self.handles_max > 0 && !dir && t.release_named_handle(id, true));
            if let (true, Some(h)) = (keep, handle) {
                t.give_handle(id, Arc::new(h));
            }
        }
        Ok(self.shown(id, side, &st))
    }

    /// Records the attributes about to be sent for node `id`.
    pub(super) fn note(&self, id: u64, st: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.told = Some(told(st));
            n.end = st.st_size;
        }
    }

    /// Held across one guest change of node `id` (a read takes it shared,
    /// `in_order_to_read`): the stats around it and what they record
    /// (`read_between`, `changed`) are one step.
    /// The kernel sends requests for one file on both server threads at
    /// once (pages written back while the guest writes through its
    /// descriptor); unordered, one request's stat taken before the other's
    /// write and recorded after it made the guest's own change look like a
    /// host edit, and the next overwrite was refused (`fresh_for_write`).
    pub(super) fn in_order(&self, id: u64) -> std::sync::RwLockWriteGuard<'_, ()> {
        self.order[id as usize % self.order.len()]
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The same for a read, which changes nothing the other reads of the
    /// file compare: reads of one file run side by side, never beside a
    /// change of it.
    pub(super) fn in_order_to_read(&self, id: u64) -> std::sync::RwLockReadGuard<'_, ()> {
        self.order[id as usize % self.order.len()]
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The guest read node `id` between two stats of it, `pre` and `post`:
    /// what it read is current only if no change fell between them. A host
    /// write that lands during the read leaves `seen` where it was, so the
    /// guest's next overwrite of the possibly stale bytes is refused
    /// (`fresh_for_write`) instead of being let through on the later stat.
    pub(super) fn read_between(&self, id: u64, pre: &rustix::fs::Stat, post: &rustix::fs::Stat) {
        if unchanged_between(pre, post) {
            self.saw(id, post);
        }
    }

    /// The guest has read node `id` as it is now (`st`, a stat taken
    /// before the table is locked: one older than what the guest is known
    /// to know, by its change time, changes nothing).
    pub(super) fn saw(&self, id: u64, st: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            let v = version(st);
            if (v[3], v[4]) < (n.seen[3], n.seen[4]) {
                return;
            }
            n.seen = v;
            n.host_wrote = false;
        }
    }

    /// The guest changed node `id` from `pre` to `post`: what it knew
    /// stays current if it was current (its own change), and stays stale if
    /// a host change came first (an append to, or a `touch` of, a file the
    /// host rewrote does not make the guest's copy of it fresh), unless the
    /// change left it empty (`table::after_own`).
    pub(super) fn changed(&self, id: u64, pre: &rustix::fs::Stat, post: &rustix::fs::Stat) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.seen = after_own(n.seen, pre, post);
            n.host_wrote &= n.seen != version(post);
        }
    }

    /// The view itself changed the names or attributes of a file on `side`
    /// from `pre` to `post` (an unlink, link or rename of it, or over it):
    /// the guest's knowledge of it follows (`table::after_own_meta`), for
    /// node `id` (the one at the name changed, if known) and the node its
    /// inode has, so `fresh_for_write` never takes this for a host edit.
    pub(super) fn changed_meta(&self, side: Side, id: Option<u64>, pre: &rustix::fs::Stat, post: &rustix::fs::Stat) {
        if (pre.st_dev, pre.st_ino) != (post.st_dev, post.st_ino) {
            return;
        }
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let other = t.by_ino.get(&(side, post.st_dev, post.st_ino)).copied();
        for i in id.into_iter().chain(other.filter(|o| Some(*o) != id)) {
            if let Some(n) = t.nodes.get_mut(&i) {
                if n.side == side && (n.host_dev, n.host_ino) == (post.st_dev, post.st_ino) {
                    n.seen = after_own_meta(n.seen, pre, post);
                    n.host_wrote &= n.seen != version(post);
                }
            }
        }
    }

    /// The file `st` (on `side`) as it is now, through the handle or fd of
    /// node `id` or of the node its inode has: after an unlink or a rename
    /// over it, when its name no longer reaches it.
    pub(super) fn inode_stat(&self, side: Side, id: Option<u64>, st: &rustix::fs::Stat) -> Option<rustix::fs::Stat> {
        let other = self
            .t
            .lock()
            .unwrap()
            .by_ino
            .get(&(side, st.st_dev, st.st_ino))
            .copied();
        id.into_iter()
            .chain(other)
            .filter_map(|i| self.handle_stat(INodeNo(i)).and_then(Result::ok))
            .map(|(_, _, post, _)| post)
            .find(|post| (post.st_dev, post.st_ino) == (st.st_dev, st.st_ino))
    }

    /// The file `st` lost its last name through the view: its inode number
    /// may be reused by another file, which gets an id of its own.
    pub(super) fn forget_id(&self, side: Side, st: &rustix::fs::Stat) {
        self.t.lock().unwrap().ids.remove(&(side, st.st_dev, st.st_ino));
    }

    /// Node `id` was just made through the view: its host IN_CREATE tells
    /// the kernel nothing it does not know (src/view/watch.rs).
    pub(super) fn made(&self, id: u64) {
        if let Some(n) = self.t.lock().unwrap().nodes.get_mut(&id) {
            n.made_here = true;
        }
    }

    /// Stats a node's path and checks it still names the node's file (or
    /// another name of it does, `refind`).
    pub(super) fn node_stat(&self, ino: INodeNo) -> Result<(Side, PathBuf, rustix::fs::Stat), Errno> {
        let (side, rel, _) = self.node(ino)?;
        let want = self.t.lock().unwrap().nodes.get(&ino.0).map(|n| n.host_ino);
        match self.stat(side, &rel) {
            Ok(st) if want == Some(st.st_ino) => Ok((side, rel, st)),
            Err(e) if e != Errno::ENOENT && e != Errno::ENOTDIR => Err(e),
            other => {
                let Some((a, st)) = self.refind(ino) else {
                    return Err(other.err().unwrap_or(Errno::ESTALE));
                };
                Ok((side, a, st))
            }
        }
    }

    /// A node served by its path (it holds no handle) whose path no longer
    /// names its file: a host rename or removal of that name the view has
    /// not heard of yet, while another name the guest reached it by (a
    /// hard link, `Node::aliases`) still does. That name becomes the
    /// node's path, with its stat. None when no name the node knows is
    /// its file.
    pub(super) fn refind(&self, ino: INodeNo) -> Option<(PathBuf, rustix::fs::Stat)> {
        let (side, rel, aliases, dev, host_ino) = {
            let t = self.t.lock().unwrap();
            let n = t.nodes.get(&ino.0)?;
            if n.gone || n.file.is_some() {
                return None;
            }
            (n.side, n.rel.clone(), n.aliases.clone(), n.host_dev, n.host_ino)
        };
        for a in aliases {
            let Ok(st) = self.stat(side, &a) else { continue };
            if st.st_ino != host_ino || st.st_dev != dev {
                continue;
            }
            let mut t = self.t.lock().unwrap();
            if let Some(n) = t.nodes.get_mut(&ino.0) {
                if n.rel == rel {
                    if let Some(i) = n.aliases.iter().position(|x| *x == a) {
                        n.aliases[i] = std::mem::replace(&mut n.rel, a.clone());
                    }
                }
            }
            return Some((a, st));
        }
        None
    }

    /// Before `rel` stops naming its file (unlink, rename over it): the
    /// node the kernel knows there gets a handle if it has none (beyond
    /// `HANDLES_MAX`, up to `PINNED_MAX` more), so an open fd keeps reading
    /// and writing the file until the kernel forgets it, as on a plain bind.
    pub(super) fn pin(&self, side: Side, rel: &Path) {
        let Some(id) = self.known(side, rel) else { return };
        {
            let mut t = self.t.lock().unwrap();
            match t.nodes.get_mut(&id) {
                // Its handle stays until the name is gone: lookups past
                // the bound take the handles of files not in use, and
                // this one, open inside, is about to need its own.
                Some(n) if !n.dir => {
                    n.pinned = Some(std::time::Instant::now());
                    if n.file.is_some() {
                        return;
                    }
                }
                _ => return,
            }
            // At the cap, a file that still has a name gives its handle up
            // (it is served by name, as files looked up beyond
            // `HANDLES_MAX` are): a file losing its last name needs one
            // more, or an open fd of it fails ESTALE.
            if t.handles_held >= self.handles_max + PINNED_MAX && !t.release_named_handle(id, false) {
                if !self.warned_pins.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    log::warn!(
                        "view: {} file handles held ({} nodes, {} cached fds), none by a file with a name: a file unlinked while open is served by name only now",
                        t.handles_held,
                        t.nodes.len(),
                        t.cached_fds
                    );
                }
                return;
            }
        }
        let Ok((st, Some(h), _)) = self.stat_handle(side, rel) else {
            return;
        };
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        if t.nodes
            .get(&id)
            .is_some_and(|n| n.file.is_none() && n.host_ino == st.st_ino && n.host_dev == st.st_dev)
        {
            t.give_handle(id, Arc::new(h));
        }
    }

    /// After a rename: every node at or below `from` moves to `to`; a node
    /// that was at `to` is gone.
    pub(super) fn renamed(&self, side: Side, from: &Path, to: &Path) {
        if let (Side::Host, Some(w)) = (side, &self.watch) {
            w.renamed(from, to);
        }
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let moved_id = t.by_key.get(&(side, from.to_path_buf())).copied();
        self.renamed_below(t, side, from, to, moved_id);
    }

    /// After a rename of a file that is no directory over no directory
    /// (or nothing): the node at `from` moves to `to`, a node that was at
    /// `to` is gone. Only those two names change, so the table is not
    /// walked (`renamed` is: O(nodes), milliseconds per rename with the
    /// tens of thousands of nodes a `git status` leaves, once per `.pyc`
    /// a Python import writes). Names below `from` or `to` could only be
    /// left from directories the host replaced by a file since; they
    /// reach nothing on the host, and a lookup that reaches a file there
    /// again checks that file (`remember_stat`), as after any host change.
    pub(super) fn renamed_file(&self, side: Side, from: &Path, to: &Path) {
        let mut t = self.t.lock().unwrap();
        let t = &mut *t;
        let from_key = (side, from.to_path_buf());
        let to_key = (side, to.to_path_buf());
        let moved_id = t.by_key.get(&from_key).copied();
        if let Some(old) = t.by_key.get(&to_key).copied().filter(|o| Some(*o) != moved_id) {
            t.detach(old, side, to);
        }
        let Some(id) = moved_id else { return };
        t.by_key.remove(&from_key);
        if let Some(n) = t.nodes.get_mut(&id) {
            if n.rel == from {
                n.rel = to.to_path_buf();
            } else if let Some(a) = n.aliases.iter_mut().find(|a| **a == from) {
                *a = to.to_path_buf();
            }
        }
        t.by_key.insert(to_key, id);
    }

    /// `renamed`'s walk of the table: every node at or below `from`
    /// (`moved_id` is the one at `from`) moves to `to`; any other node at
    /// or below `to` is gone.
    fn renamed_below(&self, t: &mut Tables, side: Side, from: &Path, to: &Path, moved_id: Option<u64>) {
        // (node, old path, new path or none: no longer names the node).
        let mut changes: Vec<(u64, PathBuf, Option<PathBuf>)> = Vec::new();
        // A path at or below another starts with its bytes (view paths are
        // joined names): the cheap test first.
        let under = |p: &Path, top: &Path| {
            p.as_os_str().as_bytes().starts_with(top.as_os_str().as_bytes()) && p.starts_with(top)
        };
        for (id, n) in t.nodes.iter() {
            if n.side != side || n.gone {
                continue;
            }
            for p in std::iter::once(&n.rel).chain(n.aliases.iter()) {
                let below_from = under(p, from);
                if Some(*id) != moved_id && !below_from && under(p, to) {
                    changes.push((*id, p.clone(), None));
                } else if let Some(rest) = below_from.then(|| p.strip_prefix(from).ok()).flatten() {
                    let new = if rest.as_os_str().is_empty() {
                        to.to_path_buf()
                    } else {
                        to.join(rest)
                    };
                    changes.push((*id, p.clone(), Some(new)));
                }
            }
        }
        for (id, old, new) in &changes {
            if new.is_none() {
                t.detach(*id, side, old);
                continue;
            }
            let key = (side, old.clone());
            if t.by_key.get(&key) == Some(id) {
                t.by_key.remove(&key);
            }
        }
        for (id, old, new) in changes {
            let Some(new) = new else { continue };
            if let Some(n) = t.nodes.get_mut(&id) {
                if n.rel == old {
                    n.rel = new.clone();
                } else if let Some(a) = n.aliases.iter_mut().find(|a| **a == old) {
                    *a = new.clone();
                }
            }
            t.by_key.insert((side, new), id);
        }
    }

    /// After an unlink or rmdir: the entry at `rel` no longer names its
    /// node (gone unless another link of it is known).
    pub(super) fn removed(&self, side: Side, rel: &Path) {
        let mut t = self.t.lock().unwrap();
        if let Some(id) = t.by_key.get(&(side, rel.to_path_buf())).copied() {
            t.detach(id, side, rel);
        }
    }

    /// FORGET of node `ino` (`nlookup` lookups): the node goes with its
    /// last lookup.
    pub(super) fn forget_node(&self, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        let mut t = self.t.lock().unwrap();
        let drop_it = match t.nodes.get_mut(&ino.0) {
            Some(n) => {
                n.lookups = n.lookups.saturating_sub(nlookup);
                n.lookups == 0
            }
            None => false,
        };
        if drop_it {
            if let Some(n) = t.nodes.remove(&ino.0) {
                if n.fd.is_some() {
                    t.cached_fds -= 1;
                }
                t.writers.remove(&ino.0);
                if n.file.is_some() {
                    t.handles_held -= 1;
                }
                let ikey = (n.side, n.host_dev, n.host_ino);
                if t.by_ino.get(&ikey) == Some(&ino.0) {
                    t.by_ino.remove(&ikey);
                }
                for a in n.aliases {
                    let key = (n.side, a);
                    if t.by_key.get(&key) == Some(&ino.0) {
                        t.by_key.remove(&key);
                    }
                }
                let key = (n.side, n.rel);
                if t.by_key.get(&key) == Some(&ino.0) {
                    t.by_key.remove(&key);
                    if let (true, Side::Host, Some(w)) = (n.dir, key.0, &self.watch) {
                        w.unwatch(&key.1);
                    }
                }
            }
        }
    }
}

/// Whether live node `id` stands for the file `st` with proof `proof`: the
/// same device and inode number, and either a handle that holds the file
/// (its number cannot be reused while it is held) or a proof that shows the
/// same file (`proven`), or at least does not show another (`!proven`:
/// the path's own node, kept as before when a proof is missing).
fn is_file_of(t: &Tables, id: u64, st: &rustix::fs::Stat, proof: Option<&[u8]>, proven: bool) -> bool {
    let Some(n) = t.nodes.get(&id) else { return false };
    if (n.host_dev, n.host_ino) != (st.st_dev, st.st_ino) {
        return false;
    }
    if n.file.is_some() {
        return true;
    }
    let known = t.proof_of(id, n.side, n.host_dev, n.host_ino);
    if proven {
        proven_same(known, proof)
    } else {
        may_be_same(known, proof)
    }
}

#[cfg(test)]
#[path = "tests_hostnames.rs"]
mod tests_hostnames;
