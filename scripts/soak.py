#!/usr/bin/env python3
"""The two workers of scripts/soak.sh: random file operations on one shared
tree, one worker on the host (which also runs the checkpoints) and one in
the sandbox (through the workspace view), at the same time.

    soak.py host ROOT SECONDS CHECK_EVERY SEED
    soak.py sandbox ROOT SECONDS SEED

ROOT is the workspace as each side sees it; the tree is ROOT/tree and the
control files ROOT/.soak/ctl. Ownership, so that the end state is
deterministic:
- tree/h and tree/s: each side's own subtree; only its owner creates,
  writes, renames or removes anything there (the other side only reads).
- tree/x/h-pub, tree/x/s-pub: each side's published files (its own, the
  other side reads them).
- tree/x/h-frozen, tree/x/s-frozen: files whose content never changes once
  they appear (named KEY.SHA256); either side hard-links them into its own
  area (cross-side hard links), only the owner removes the frozen name.
- tree/x/to-h, tree/x/to-s: inboxes. A side hands a file over by renaming
  it to the other's inbox as KEY.SHA256; the receiver checks the content
  and renames it into its own subtree.
Each side keeps a manifest of what it believes it wrote: per name, the
file's identity (KEY: names with one KEY are hard links of one another),
its content hash and owner mode bits; its symlinks and directories. At
each checkpoint both sides stop, the tree is read from the host and from
inside, and both are compared with the union of the manifests: content,
symlink targets, owner mode bits, directories, and hard-link identity
(st_ino equal exactly for the names of one KEY, st_nlink the number of its
names, and a KEY's inode number unchanged since the last checkpoint).
"""
import ast
import errno
import hashlib
import os
import random
import sys
import time

MAX_NAMES = 300
MAX_SIZE = 65536
SETTLE = 2.0


def sha(b):
    return hashlib.sha256(b).hexdigest()


def now():
    return time.strftime("%H:%M:%S")


# The default image's python3 has no json module: Python literals instead.
def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(repr(obj))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def read_json(path):
    with open(path) as f:
        return ast.literal_eval(f.read())


TRACE = None


def read_file(path):
    """The whole content of PATH (logged with its hash when tracing)."""
    with open(path, "rb") as f:
        try:
            data = f.read()
        except OSError as e:
            # Named, and told apart from a failed open.
            raise OSError(e.errno, "%s (in read, after open)" % e.strerror, path) from e
    if TRACE is not None:
        TRACE.write("%.3f read [%r] -> %d bytes %s\n" % (time.time(), path, len(data), sha(data)[:12]))
    return data


def wait_for(path, limit, step=0.05):
    """Whether PATH appeared within LIMIT seconds (False at once when the
    sandbox's side has ended: soak.sh marks that in the control directory)."""
    t = time.time()
    gone = os.path.join(os.path.dirname(path), "sandbox-exited")
    while time.time() - t < limit:
        if os.path.exists(path):
            return True
        if os.path.exists(gone):
            return False
        time.sleep(step)
    return False


class Worker:
    def __init__(self, side, root, seed):
        self.side = side
        self.other = "s" if side == "h" else "h"
        self.root = root
        self.tree = os.path.join(root, "tree")
        self.ctl = os.path.join(root, ".soak", "ctl")
        self.r = random.Random(seed)
        self.n = 0
        # relpath -> KEY (regular files), KEY -> group
        self.names = {}
        self.groups = {}
        self.links = {}
        self.dirs = set()
        self.inflight = {}  # inbox relpath -> (KEY, sha, mode)
        self.base = {side, "x/%s-pub" % side}
        self.frozen_dir = "x/%s-frozen" % side
        self.inbox = "x/to-%s" % side
        self.outbox = "x/to-%s" % self.other
        self.errors = []
        self.nerrors = 0
        self.ops = {}

    # --- helpers
    def p(self, rel):
        return os.path.join(self.tree, rel)

    def fresh(self, prefix):
        self.n += 1
        return "%s%s%d" % (prefix, self.side, self.n)

    def key(self):
        self.n += 1
        return "%s%d" % (self.side, self.n)

    def error(self, what):
        self.nerrors += 1
        line = "%s %s: %s" % (now(), self.side, what)
        if len(self.errors) < 200:
            self.errors.append(line)
        print("ERROR " + line, flush=True)

    def names_of(self, key):
        return [n for n, k in self.names.items() if k == key]

    def mutable_names(self):
        return [n for n, k in self.names.items() if not self.groups[k]["frozen"]]

    def pick_dir(self):
        return self.r.choice(sorted(self.dirs))

    def new_path(self, prefix):
        return self.pick_dir() + "/" + self.fresh(prefix)

    def drop_name(self, name):
        key = self.names.pop(name)
        if not self.names_of(key):
            del self.groups[key]

    def randdata(self):
        n = self.r.choice([0, 1, 17, 512, 4096, 4097, 8192, 20000, 65536])
        n = min(n, self.r.randint(0, n)) if self.r.random() < 0.5 else n
        return self.r.randbytes(n)

    def resync(self, key):
        """After an operation failed: what the file holds now becomes the
        expectation (the failure itself is already counted)."""
        g = self.groups.get(key)
        if g is None or g["frozen"]:
            return
        for n in self.names_of(key):
            try:
                g["data"] = bytearray(read_file(self.p(n)))
                return
            except OSError:
                continue

    def under(self, d):
        pre = d + "/"
        return [n for n in list(self.names) + list(self.links) + list(self.dirs) if n.startswith(pre)]

    # --- operations
    def op_create(self):
        path = self.new_path("f")
        data = self.randdata()
        fd = os.open(self.p(path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        key = self.key()
        self.groups[key] = {"data": bytearray(data), "mode": 0o644, "frozen": False}
        self.names[path] = key

    def op_write(self, via_fd=None):
        names = self.mutable_names()
        if not names:
            return
        name = self.r.choice(names)
        g = self.groups[self.names[name]]
        off = self.r.randint(0, len(g["data"]) + 1000)
        data = self.r.randbytes(self.r.randint(1, 8192))
        fd = os.open(self.p(name), os.O_WRONLY)
        try:
            if os.pwrite(fd, data, off) != len(data):
                self.error("short pwrite on %s" % name)
        finally:
            os.close(fd)
        self.apply_write(g, off, data)

    @staticmethod
    def apply_write(g, off, data):
        d = g["data"]
        if off > len(d):
            d.extend(b"\0" * (off - len(d)))
        d[off:off + len(data)] = data

    def op_append(self):
        names = self.mutable_names()
        if not names:
            return
        name = self.r.choice(names)
        g = self.groups[self.names[name]]
        data = self.r.randbytes(self.r.randint(1, 3000))
        fd = os.open(self.p(name), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        g["data"].extend(data)

    def op_truncate(self):
        names = self.mutable_names()
        if not names:
            return
        name = self.r.choice(names)
        g = self.groups[self.names[name]]
        n = self.r.randint(0, min(MAX_SIZE, 2 * len(g["data"]) + 100))
        os.truncate(self.p(name), n)
        d = g["data"]
        if n < len(d):
            del d[n:]
        else:
            d.extend(b"\0" * (n - len(d)))

    def own_entries(self):
        return [n for n in list(self.names) + list(self.links) if not n.startswith(self.frozen_dir + "/")]

    def op_rename(self, over=False):
        ents = self.own_entries()
        if not ents:
            return
        src = self.r.choice(ents)
        if over and len(ents) > 1:
            dst = self.r.choice([e for e in ents if e != src])
        else:
            dst = self.new_path("r")
        os.rename(self.p(src), self.p(dst))
        if src in self.names and dst in self.names and self.names[src] == self.names[dst]:
            return  # two names of one file: rename does nothing
        if dst in self.names:
            self.drop_name(dst)
        self.links.pop(dst, None)
        if src in self.names:
            self.names[dst] = self.names.pop(src)
        else:
            self.links[dst] = self.links.pop(src)

    def op_link(self):
        if not self.names:
            return
        src = self.r.choice(sorted(self.names))
        dst = self.new_path("k")
        os.link(self.p(src), self.p(dst))
        self.names[dst] = self.names[src]

    def op_unlink(self):
        ents = list(self.names) + list(self.links)
        if not ents:
            return
        name = self.r.choice(ents)
        os.unlink(self.p(name))
        if name in self.names:
            self.drop_name(name)
        else:
            del self.links[name]

    def op_mkdir(self):
        d = self.pick_dir()
        if d.count("/") >= 4:
            return
        new = d + "/" + self.fresh("d")
        os.mkdir(self.p(new))
        self.dirs.add(new)

    def removable_dirs(self):
        return [d for d in self.dirs if d not in self.base]

    def op_rmdir(self):
        empty = [d for d in self.removable_dirs() if not self.under(d)]
        if not empty:
            return
        d = self.r.choice(sorted(empty))
        os.rmdir(self.p(d))
        self.dirs.discard(d)

    def op_rename_dir(self):
        ds = self.removable_dirs()
        if not ds:
            return
        d = self.r.choice(sorted(ds))
        targets = [t for t in self.dirs if t != d and not t.startswith(d + "/") and t.count("/") < 3]
        if not targets:
            return
        new = self.r.choice(sorted(targets)) + "/" + self.fresh("d")
        os.rename(self.p(d), self.p(new))

        def mv(n):
            return new + n[len(d):] if n == d or n.startswith(d + "/") else n

        self.names = {mv(n): k for n, k in self.names.items()}
        self.links = {mv(n): t for n, t in self.links.items()}
        self.dirs = {mv(n) for n in self.dirs}

    def op_chmod(self):
        names = self.mutable_names()
        if not names:
            return
        name = self.r.choice(names)
        mode = self.r.choice([0o644, 0o755, 0o600, 0o700, 0o640, 0o744])
        os.chmod(self.p(name), mode)
        self.groups[self.names[name]]["mode"] = mode

    def op_symlink(self):
        target = self.r.choice(["../x/none", "f", "../../" + self.other + "/q"])
        if self.names and self.r.random() < 0.5:
            target = "/workspace/tree/" + self.r.choice(sorted(self.names))
        path = self.new_path("y")
        os.symlink(target, self.p(path))
        self.links[path] = target

    def op_read_own(self):
        if not self.names:
            return
        name = self.r.choice(sorted(self.names))
        key = self.names[name]
        g = self.groups[key]
        got = read_file(self.p(name))
        want = sha(bytes(g["data"])) if not g["frozen"] else g["sha"]
        if sha(got) != want:
            self.error("read of own file %s (%s) gives %d bytes of other content than written" % (name, key, len(got)))
            self.resync(key)

    def op_read_other(self):
        d = self.r.choice([self.other, "x/%s-pub" % self.other, "x/%s-frozen" % self.other])
        try:
            for _ in range(5):
                ents = os.listdir(self.p(d))
                if not ents:
                    return
                d = d + "/" + self.r.choice(ents)
                if not os.path.isdir(self.p(d)) or os.path.islink(self.p(d)):
                    break
            if os.path.islink(self.p(d)):
                os.readlink(self.p(d))
                return
            if os.path.isfile(self.p(d)):
                got = read_file(self.p(d))
                if d.startswith("x/%s-frozen/" % self.other):
                    want = d.rsplit(".", 1)[-1]
                    if sha(got) != want:
                        self.error("the other side's frozen file %s reads other content (%d bytes)" % (d, len(got)))
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise

    def op_handoff(self):
        singles = [n for n in self.mutable_names()
                   if len(self.names_of(self.names[n])) == 1 and not n.startswith("x/")]
        if not singles:
            return
        name = self.r.choice(sorted(singles))
        key = self.names[name]
        g = self.groups[key]
        digest = sha(bytes(g["data"]))
        dst = "%s/%s.%s" % (self.outbox, key, digest)
        os.rename(self.p(name), self.p(dst))
        del self.names[name]
        del self.groups[key]
        self.inflight[dst] = (key, digest, g["mode"])

    def op_adopt(self):
        for ent in sorted(os.listdir(self.p(self.inbox))):
            if ent.endswith(".tmp"):
                continue
            src = self.inbox + "/" + ent
            key, want = ent.split(".", 1)
            got = read_file(self.p(src))
            if sha(got) != want:
                self.error("file handed over as %s arrived with other content (%d bytes)" % (src, len(got)))
            dst = self.new_path("a")
            os.rename(self.p(src), self.p(dst))
            os.chmod(self.p(dst), 0o644)
            self.groups[key] = {"data": bytearray(got), "mode": 0o644, "frozen": False}
            self.names[dst] = key

    def op_freeze(self):
        data = self.randdata()
        key = self.key()
        digest = sha(data)
        tmp = self.new_path("t")
        fd = os.open(self.p(tmp), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        dst = "%s/%s.%s" % (self.frozen_dir, key, digest)
        os.rename(self.p(tmp), self.p(dst))
        self.groups[key] = {"data": None, "sha": digest, "mode": 0o644, "frozen": True}
        self.names[dst] = key

    def op_link_frozen(self):
        d = self.r.choice(["x/h-frozen", "x/s-frozen"])
        ents = [e for e in os.listdir(self.p(d)) if "." in e]
        if not ents:
            return
        ent = self.r.choice(sorted(ents))
        key, digest = ent.split(".", 1)
        dst = self.new_path("z")
        try:
            os.link(self.p(d + "/" + ent), self.p(dst))
        except FileNotFoundError:
            return  # the owner removed it meanwhile
        if key not in self.groups:
            self.groups[key] = {"data": None, "sha": digest, "mode": 0o644, "frozen": True}
        self.names[dst] = key
        got = read_file(self.p(dst))
        if sha(got) != digest:
            self.error("new hard link %s of frozen %s/%s reads other content (%d bytes)" % (dst, d, ent, len(got)))

    def op_fd_link_write(self):
        """Hard-link a file while it is open, then write through the open
        descriptor (an editor's backup link, `ln` then edit)."""
        names = self.mutable_names()
        if not names:
            return
        name = self.r.choice(sorted(names))
        g = self.groups[self.names[name]]
        fd = os.open(self.p(name), os.O_RDWR)
        try:
            dst = self.new_path("k")
            os.link(self.p(name), self.p(dst))
            self.names[dst] = self.names[name]
            off = self.r.randint(0, len(g["data"]))
            data = self.r.randbytes(self.r.randint(1, 4096))
            os.pwrite(fd, data, off)
            self.apply_write(g, off, data)
        finally:
            os.close(fd)

    def op_fd_unlink_write(self):
        """Unlink a name of an open file, then write through the descriptor
        (a scratch file: mkstemp + unlink, or one of several hard links)."""
        names = self.mutable_names()
        if not names:
            return
        name = self.r.choice(sorted(names))
        key = self.names[name]
        g = self.groups[key]
        fd = os.open(self.p(name), os.O_RDWR)
        try:
            os.unlink(self.p(name))
            self.drop_name(name)
            data = self.r.randbytes(self.r.randint(1, 4096))
            os.pwrite(fd, data, 0)
            want = bytearray(g["data"])
            want[0:len(data)] = data
            if key in self.groups:
                g["data"] = want
            got = os.pread(fd, len(want) + 1, 0)
            if got != bytes(want):
                self.error("an unlinked open file (%s) reads back other content than written" % name)
        finally:
            os.close(fd)

    def op_tempfile(self):
        """Python's tempfile.TemporaryFile(dir=...): create, unlink, write,
        seek(0), rewrite, read back."""
        path = self.new_path("t")
        fd = os.open(self.p(path), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.unlink(self.p(path))
            a = self.r.randbytes(self.r.randint(1, 20000))
            os.write(fd, a)
            os.lseek(fd, 0, os.SEEK_SET)
            b = self.r.randbytes(self.r.randint(1, 20000))
            os.write(fd, b)
            want = b + a[len(b):]
            os.lseek(fd, 0, os.SEEK_SET)
            got = os.read(fd, len(want) + 1)
            if got != want:
                self.error("a temporary file (created, unlinked, rewritten) reads back other content")
        finally:
            os.close(fd)

    OPS = [
        ("create", 10), ("write", 14), ("append", 8), ("truncate", 5),
        ("rename", 6), ("rename_over", 4), ("link", 6), ("unlink", 8),
        ("mkdir", 3), ("rmdir", 2), ("rename_dir", 1), ("chmod", 4),
        ("symlink", 3), ("read_own", 10), ("read_other", 6), ("handoff", 3),
        ("adopt", 2), ("freeze", 2), ("link_frozen", 3), ("fd_link_write", 2),
        ("fd_unlink_write", 2), ("tempfile", 1),
    ]

    def step(self):
        names = [o for o, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        op = self.r.choices(names, weights)[0]
        if len(self.names) + len(self.links) > MAX_NAMES and op in ("create", "link", "link_frozen", "symlink", "fd_link_write", "freeze"):
            op = "unlink"
        self.ops[op] = self.ops.get(op, 0) + 1
        fn = {"rename_over": lambda: self.op_rename(over=True)}.get(op) or getattr(self, "op_" + op)
        before = dict(self.names)
        try:
            fn()
        except OSError as e:
            self.error("%s failed: %s (%s)" % (op, os.strerror(e.errno or 0), e.filename or ""))
            # Whatever the failed operation left is what is expected now.
            for k in set(before.values()) | set(self.names.values()):
                self.resync(k)
            self.rescan_names()

    def rescan_names(self):
        """After a failure, what exists of this side's names decides."""
        for n in list(self.names):
            if not os.path.lexists(self.p(n)):
                self.drop_name(n)
        for n in list(self.links):
            if not os.path.lexists(self.p(n)):
                del self.links[n]

    def setup(self):
        for d in sorted(self.base):
            os.makedirs(self.p(d), exist_ok=True)
            self.dirs.add(d)
        os.makedirs(self.p(self.frozen_dir), exist_ok=True)
        # Files that are never touched again: their inode numbers must
        # hold for the Domain's life (a hard link among them too).
        for i in range(8):
            path = "%s/stable%d" % (self.side, i)
            data = ("stable %s %d\n" % (self.side, i)).encode() * (i + 1)
            with open(self.p(path), "wb") as f:
                f.write(data)
            key = "%sstable%d" % (self.side, i)
            self.groups[key] = {"data": None, "sha": sha(data), "mode": 0o644, "frozen": True}
            self.names[path] = key
            if i % 2 == 0:
                os.link(self.p(path), self.p(path + "-link"))
                self.names[path + "-link"] = key

    def manifest(self):
        # A handed-over file still in the other's inbox is still this side's.
        for dst in list(self.inflight):
            if not os.path.lexists(self.p(dst)):
                del self.inflight[dst]
        files = {}
        for n, k in self.names.items():
            g = self.groups[k]
            files[n] = [k, g["sha"] if g["frozen"] else sha(bytes(g["data"])), g["mode"]]
        for n, (k, digest, mode) in self.inflight.items():
            files[n] = [k, digest, mode]
        dirs = sorted(self.dirs | {self.frozen_dir} | ({"x", "x/to-h", "x/to-s"} if self.side == "h" else set()))
        return {"side": self.side, "files": files, "symlinks": dict(self.links), "dirs": dirs,
                "errors": self.errors, "nerrors": self.nerrors, "ops": self.ops}


def scan(tree):
    """The tree as this side sees it: relpath -> entry."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(tree):
        rel = os.path.relpath(dirpath, tree)
        for d in list(dirnames):
            full = os.path.join(dirpath, d)
            r = d if rel == "." else rel + "/" + d
            if os.path.islink(full):
                dirnames.remove(d)
                out[r] = {"t": "l", "target": os.readlink(full)}
            else:
                out[r] = {"t": "d"}
        for f in filenames:
            full = os.path.join(dirpath, f)
            r = f if rel == "." else rel + "/" + f
            try:
                st = os.lstat(full)
                if os.path.islink(full):
                    out[r] = {"t": "l", "target": os.readlink(full)}
                    continue
                with open(full, "rb") as fh:
                    data = fh.read()
                out[r] = {"t": "f", "sha": sha(data), "size": len(data), "ino": st.st_ino,
                          "nlink": st.st_nlink, "mode": st.st_mode & 0o7777}
            except OSError as e:
                out[r] = {"t": "error", "error": os.strerror(e.errno or 0)}
    return out


def compare(man_h, man_s, scans, last_ino):
    """Differences of each scan from the union of the manifests."""
    diffs = []
    want = {}
    for m in (man_h, man_s):
        for n, (k, digest, mode) in m["files"].items():
            if n in want:
                diffs.append("both sides claim %s" % n)
            want[n] = {"t": "f", "key": k, "sha": digest, "mode": mode}
        for n, t in m["symlinks"].items():
            if n in want:
                diffs.append("both sides claim %s" % n)
            want[n] = {"t": "l", "target": t}
        for n in m["dirs"]:
            want[n] = {"t": "d"}
    count = {}
    for e in want.values():
        if e["t"] == "f":
            count[e["key"]] = count.get(e["key"], 0) + 1
    for side, got in scans.items():
        keyino = {}
        inokeys = {}
        for n in sorted(set(want) | set(got)):
            w, g = want.get(n), got.get(n)
            if w is None:
                diffs.append("%s: %s exists (%s), written by neither side" % (side, n, g["t"]))
                continue
            if g is None:
                diffs.append("%s: %s is missing (a %s)" % (side, n, {"f": "file", "l": "symlink", "d": "directory"}[w["t"]]))
                continue
            if g["t"] != w["t"]:
                diffs.append("%s: %s is a %s, written as a %s %s" % (side, n, g["t"], w["t"], g.get("error", "")))
                continue
            if w["t"] == "l" and g["target"] != w["target"]:
                diffs.append("%s: symlink %s points to %r, not %r" % (side, n, g["target"], w["target"]))
            if w["t"] != "f":
                continue
            if g["sha"] != w["sha"]:
                diffs.append("%s: %s (%s) has other content than written (%d bytes)" % (side, n, w["key"], g["size"]))
            if g["mode"] & 0o700 != w["mode"] & 0o700:
                diffs.append("%s: %s has owner mode %o, set %o" % (side, n, g["mode"] & 0o700, w["mode"] & 0o700))
            if g["nlink"] != count[w["key"]]:
                diffs.append("%s: %s (%s) has %d links, has %d names" % (side, n, w["key"], g["nlink"], count[w["key"]]))
            keyino.setdefault(w["key"], {}).setdefault(g["ino"], []).append(n)
            inokeys.setdefault(g["ino"], set()).add(w["key"])
        for k, inos in keyino.items():
            if len(inos) > 1:
                diffs.append("%s: the names of one file (%s) show %d inode numbers: %s" % (
                    side, k, len(inos), "; ".join("%d: %s" % (i, " ".join(ns)) for i, ns in sorted(inos.items()))))
            prev = last_ino.get(side, {}).get(k)
            if len(inos) == 1:
                ino = next(iter(inos))
                if prev is not None and prev != ino:
                    diffs.append("%s: the inode number of %s (%s) changed from %d to %d" % (side, k, next(iter(inos.values()))[0], prev, ino))
                last_ino.setdefault(side, {})[k] = ino
        for ino, ks in inokeys.items():
            if len(ks) > 1:
                diffs.append("%s: distinct files %s share inode number %d" % (side, " ".join(sorted(ks)), ino))
    return diffs


def run_sandbox(root, seconds, seed):
    w = Worker("s", root, seed)
    w.setup()
    ctl = w.ctl
    print("%s sandbox worker ready" % now(), flush=True)
    open(os.path.join(ctl, "ready-s"), "w").close()
    deadline = time.time() + seconds
    n = 0
    last_poll = 0
    while time.time() < deadline:
        if time.time() - last_poll > 0.3:
            last_poll = time.time()
            if os.path.exists(os.path.join(ctl, "pause-%d" % n)):
                # Quiescent: adopt what arrived, write the manifest, then
                # scan whenever the host asks, until it says resume.
                try:
                    w.op_adopt()
                except OSError as e:
                    w.error("adopt at checkpoint failed: %s" % e)
                write_json(os.path.join(ctl, "man-s-%d.txt" % n), w.manifest())
                open(os.path.join(ctl, "ack-s-%d" % n), "w").close()
                r = 0
                while True:
                    if os.path.exists(os.path.join(ctl, "scan-%d-%d" % (n, r))):
                        write_json(os.path.join(ctl, "scanned-s-%d-%d.txt" % (n, r)), scan(w.tree))
                        r += 1
                    if os.path.exists(os.path.join(ctl, "resume-%d" % n)):
                        break
                    if os.path.exists(os.path.join(ctl, "stop")):
                        print("%s sandbox worker stops: %d errors, ops %s" % (now(), w.nerrors, repr(w.ops)), flush=True)
                        return 0
                    time.sleep(0.05)
                n += 1
                continue
        w.step()
        time.sleep(0.003)
    print("%s sandbox worker: out of time without a stop" % now(), flush=True)
    return 1


def run_host(root, seconds, check_every, seed):
    w = Worker("h", root, seed)
    ctl = w.ctl
    os.makedirs(w.p("x/to-h"), exist_ok=True)
    os.makedirs(w.p("x/to-s"), exist_ok=True)
    os.makedirs(w.p("x/s-frozen"), exist_ok=True)
    w.setup()
    if not wait_for(os.path.join(ctl, "ready-s"), 600):
        print("soak: the sandbox worker never started", flush=True)
        return 2
    print("%s host worker: both sides running (seed %d, %d s, a checkpoint every %d s)" % (now(), seed, seconds, check_every), flush=True)
    start = time.time()
    last_ino = {}
    n = 0
    failed = []
    transient = 0
    while True:
        # CHECK_EVERY seconds of work after each checkpoint (comparing
        # takes time), until the end.
        next_check = min(start + seconds, time.time() + check_every)
        while time.time() < next_check:
            w.step()
            time.sleep(0.003)
        final = time.time() - start >= seconds - 0.5
        # Checkpoint n: the host stops first (so the sandbox's manifest
        # sees the host's last handover), then the sandbox.
        try:
            w.op_adopt()
        except OSError as e:
            w.error("adopt at checkpoint failed: %s" % e)
        time.sleep(SETTLE / 2)
        open(os.path.join(ctl, "pause-%d" % n), "w").close()
        if not wait_for(os.path.join(ctl, "ack-s-%d" % n), 600):
            print("soak: the sandbox did not reach checkpoint %d" % n, flush=True)
            return 2
        man_s = read_json(os.path.join(ctl, "man-s-%d.txt" % n))
        man_h = w.manifest()
        write_json(os.path.join(ctl, "man-h-%d.txt" % n), man_h)
        diffs = None
        for r, wait in enumerate([SETTLE, 3, 15]):
            time.sleep(wait)
            open(os.path.join(ctl, "scan-%d-%d" % (n, r)), "w").close()
            if not wait_for(os.path.join(ctl, "scanned-s-%d-%d.txt" % (n, r)), 600):
                print("soak: the sandbox did not scan at checkpoint %d" % n, flush=True)
                return 2
            inside = read_json(os.path.join(ctl, "scanned-s-%d-%d.txt" % (n, r)))
            host = scan(w.tree)
            trial = dict((k, dict(v)) for k, v in last_ino.items())
            diffs = compare(man_h, man_s, {"host": host, "inside": inside}, trial)
            if not diffs:
                last_ino = trial
                break
            if r == 0:
                transient_first = diffs
        if not diffs and r > 0:
            transient += 1
            print("%s checkpoint %d: %d differences were gone %d s later (late, not lost): %s" % (
                now(), n, len(transient_first), [SETTLE, 3, 15][r], "; ".join(transient_first[:5])), flush=True)
        elapsed = int(time.time() - start)
        nfiles = len(man_h["files"]) + len(man_s["files"])
        print("%s checkpoint %d (%d s): %d files, %d symlinks, %d directories; host ops %d (%d errors), sandbox ops %d (%d errors); %d differences" % (
            now(), n, elapsed, nfiles, len(man_h["symlinks"]) + len(man_s["symlinks"]),
            len(man_h["dirs"]) + len(man_s["dirs"]), sum(man_h["ops"].values()), man_h["nerrors"],
            sum(man_s["ops"].values()), man_s["nerrors"], len(diffs)), flush=True)
        for d in diffs:
            print("  DIFF " + d, flush=True)
        if diffs:
            failed.append(n)
        n += 1
        if final:
            break
        open(os.path.join(ctl, "resume-%d" % (n - 1)), "w").close()
    open(os.path.join(ctl, "stop"), "w").close()
    errs = man_h["errors"] + man_s["errors"]
    nerr = man_h["nerrors"] + man_s["nerrors"]
    print("soak: %d checkpoints, %d with differences, %d late only; failed operations: host %d, sandbox %d" % (
        n, len(failed), transient, man_h["nerrors"], man_s["nerrors"]), flush=True)
    print("soak: operations host %s" % repr(dict(sorted(man_h["ops"].items()))), flush=True)
    print("soak: operations sandbox %s" % repr(dict(sorted(man_s["ops"].items()))), flush=True)
    for e in errs[:40]:
        print("  FAILED " + e, flush=True)
    if failed or nerr:
        print("soak: DIFFERENCES FOUND", flush=True)
        return 1
    print("soak: no difference", flush=True)
    return 0


def trace_to(path):
    """SOAK_TRACE=1: every changing call, in order, to PATH (to find what
    led to a difference)."""
    global TRACE
    log = open(path, "a", buffering=1 << 16)
    TRACE = log

    def wrap(name, fn):
        def call(*a, **k):
            shown = [("<%d bytes>" % len(x)) if isinstance(x, (bytes, bytearray)) else x for x in a]
            try:
                r = fn(*a, **k)
            except OSError as e:
                log.write("%.3f %s %r -> %s\n" % (time.time(), name, shown, errno.errorcode.get(e.errno, e.errno)))
                raise
            log.write("%.3f %s %r -> %r\n" % (time.time(), name, shown, r if isinstance(r, int) else "ok"))
            return r
        return call

    for name in ("open", "close", "rename", "link", "unlink", "chmod", "truncate", "mkdir", "rmdir",
                 "symlink", "pwrite", "write", "lseek"):
        setattr(os, name, wrap(name, getattr(os, name)))
    return log


def main():
    role, root = sys.argv[1], sys.argv[2]
    os.umask(0o022)
    if os.environ.get("SOAK_TRACE") == "1":
        trace_to(os.path.join(root, ".soak", "trace-%s.log" % role))
    if role == "host":
        return run_host(root, float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    return run_sandbox(root, float(sys.argv[3]), int(sys.argv[4]))


if __name__ == "__main__":
    sys.exit(main())
