#!/usr/bin/env python3
"""A seeded random exerciser of one file, checked against a model.

    fsx.py [options] FILE

Runs N random operations on FILE (created or emptied first) and keeps in
memory what its bytes must be. Every read (plain, through a shared
mapping, with O_DIRECT) and, after every operation, the file's size are
compared with that model; so is the whole file at the end. On the first
difference it prints the last operations, the offset and the expected and
found bytes, and exits 1 ("BAD DATA" or "BAD SIZE"). Exit 0: no difference.

Operations: read, write, mapread (MAP_SHARED read), mapwrite (MAP_SHARED
store, then msync), truncate (grow or shrink), fallocate
(posix_fallocate, and fallocate(2) with KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE
and ZERO_RANGE where libc has it), O_DIRECT reads and writes (block
aligned, from page-aligned buffers), close and reopen, fsync. A kind the
filesystem refuses (EOPNOTSUPP, or EINVAL for O_DIRECT) is noted once and
not tried again; that is not a failure.

Bytes written by operation n at file offset o are (7 * o + n) mod 256, so
a wrong byte tells which operation (mod 256) wrote what was found.

--corrupt K changes one byte of the file behind the model's back (through
a second descriptor) before operation K, then checks the whole file: a
run that does not end with BAD DATA means the checker is broken.
"""

import argparse
import collections
import errno
import os
import random
import sys

try:
    import ctypes
    import mmap
except ImportError as e:
    # Debian's python3-minimal (Lazaret's default image) has neither.
    print("fsx: this Python lacks %s: use a full python3 (the dev image has one)" % e.name, file=sys.stderr)
    sys.exit(2)

PAGE = mmap.PAGESIZE
DIO_ALIGN = 4096

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10


class Bad(Exception):
    """A difference between the file and the model."""


class Fsx:
    def __init__(self, path, args):
        self.path = path
        self.a = args
        self.rng = random.Random(args.seed)
        self.model = bytearray()
        self.log = collections.deque(maxlen=args.log)
        self.opno = 0
        self.refused = set()
        self.counts = collections.Counter()
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.dfd = None
        self.libc_fallocate = None
        if args.fallocate_modes:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                f = libc.fallocate
                f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
                f.restype = ctypes.c_int
                self.libc_fallocate = f
            except (OSError, AttributeError):
                self.note("fallocate(2)", "not in libc: only posix_fallocate is used")
        # Patterns: TABLE[j] = 7 * j mod 256, shifted per operation.
        self.table = bytes((7 * j) & 0xFF for j in range(256)) * (args.oplen // 256 + 2)
        self.shift = [bytes((k + n) & 0xFF for k in range(256)) for n in range(256)]

    # ---- bookkeeping ---------------------------------------------------

    def note(self, what, why):
        if what not in self.refused:
            self.refused.add(what)
            print("fsx: note: %s %s" % (what, why), flush=True)

    def logop(self, text):
        self.log.append("%6d %s" % (self.opno, text))

    def pattern(self, off, n):
        start = (off & 0xFF)
        return self.table[start:start + n].translate(self.shift[self.opno & 0xFF])

    def set_bytes(self, off, data):
        end = off + len(data)
        if end > len(self.model):
            self.model.extend(bytes(end - len(self.model)))
        self.model[off:end] = data

    def resize(self, size):
        if size < len(self.model):
            del self.model[size:]
        else:
            self.model.extend(bytes(size - len(self.model)))

    def fail(self, kind, what, off, expected, got):
        print("fsx: %s: %s" % (kind, what), flush=True)
        print("fsx: seed %d, op %d, file %s, size in model %d" % (self.a.seed, self.opno, self.path, len(self.model)))
        if expected is not None:
            first = next(i for i in range(min(len(expected), len(got)) + 1)
                         if i == min(len(expected), len(got)) or expected[i] != got[i])
            at = off + first
            print("fsx: first bad byte at offset %d (0x%x), %d bytes compared" % (at, at, len(expected)))
            lo = max(0, first - 8)
            print("fsx: expected @%d: %s" % (off + lo, expected[lo:lo + 32].hex(" ")))
            print("fsx: got      @%d: %s" % (off + lo, got[lo:lo + 32].hex(" ")))
            if first < len(got):
                b = got[first]
                print("fsx: the byte found would have been written by an op = %d mod 256 (0 also: a hole)"
                      % ((b - 7 * at) & 0xFF))
            bad = sum(1 for x, y in zip(expected, got) if x != y) + abs(len(expected) - len(got))
            print("fsx: %d of %d bytes differ" % (bad, max(len(expected), len(got))))
            self.reread(off, len(expected))
        else:
            self.save_expected()
        print("fsx: last operations (op number, what):")
        for line in self.log:
            print("  " + line)
        raise Bad(kind)

    def reread(self, off, n):
        """After a bad read: the same range read again, plainly and through
        a new mapping (is the file wrong, or what one path showed?)."""
        want = bytes(self.model[off:off + n])
        try:
            again = os.pread(self.fd, n, off)
            print("fsx: read again with pread: %s" % ("as expected" if again == want else "still different"))
            if os.fstat(self.fd).st_size < off + n:
                return print("fsx: the file is now shorter than the range: not mapped again")
            base = off - off % PAGE
            m = mmap.mmap(self.fd, off + n - base, mmap.MAP_SHARED, mmap.PROT_READ, offset=base)
            try:
                again = m[off - base:off - base + n]
            finally:
                m.close()
            print("fsx: read again through a new mapping: %s" % ("as expected" if again == want else "still different"))
        except (OSError, ValueError) as e:
            print("fsx: read again: %s" % e)
        finally:
            self.save_expected()

    def save_expected(self):
        # What the file should hold, for a comparison from outside.
        try:
            with open(self.path + ".expected", "wb") as f:
                f.write(self.model)
            print("fsx: the expected content is in %s.expected" % self.path)
        except OSError as e:
            print("fsx: could not save the expected content: %s" % e)

    def compare(self, what, off, got):
        expected = bytes(self.model[off:off + len(got)])
        if got != expected:
            self.fail("READ BAD DATA", what, off, expected, got)

    def check_size(self, what):
        size = os.fstat(self.fd).st_size
        if size != len(self.model):
            self.fail("BAD SIZE", "%s: the file is %d bytes, the model %d" % (what, size, len(self.model)),
                      0, None, None)

    # ---- operations ----------------------------------------------------

    def span(self, limit):
        """An offset below the file length limit and a length from there."""
        off = self.rng.randrange(limit)
        n = self.rng.randrange(1, self.a.oplen + 1)
        return off, min(n, limit - off)

    def op_read(self):
        size = len(self.model)
        if size == 0:
            return self.logop("read skipped (empty)")
        off, n = self.span(size)
        self.logop("read %d +%d" % (off, n))
        got = os.pread(self.fd, n, off)
        self.compare("read %d +%d" % (off, n), off, got)

    def op_write(self):
        off, n = self.span(self.a.maxlen)
        data = self.pattern(off, n)
        self.logop("write %d +%d (size %d -> %d)" % (off, n, len(self.model), max(len(self.model), off + n)))
        done = os.pwrite(self.fd, data, off)
        if done != n:
            self.fail("SHORT WRITE", "write %d +%d wrote %d" % (off, n, done), off, None, None)
        self.set_bytes(off, data)

    def op_mapread(self):
        size = len(self.model)
        if size == 0:
            return self.logop("mapread skipped (empty)")
        off, n = self.span(size)
        base = off - off % PAGE
        maplen = off + n - base
        self.logop("mapread %d +%d" % (off, n))
        m = mmap.mmap(self.fd, maplen, mmap.MAP_SHARED, mmap.PROT_READ, offset=base)
        try:
            got = m[off - base:off - base + n]
        finally:
            m.close()
        self.compare("mapread %d +%d" % (off, n), off, got)
        if off + n == size and size % PAGE:
            self.check_eof_page()

    def check_eof_page(self):
        """The rest of the file's last page, past its end, reads zeros
        through a mapping (Python's mmap stops at the length: libc's)."""
        size = len(self.model)
        base = size - size % PAGE
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        addr = libc.mmap(None, PAGE, mmap.PROT_READ, mmap.MAP_SHARED, self.fd, base)
        if addr in (None, ctypes.c_void_p(-1).value):
            e = ctypes.get_errno()
            raise OSError(e, "mmap of the last page: " + os.strerror(e))
        try:
            page = ctypes.string_at(addr, PAGE)
        finally:
            libc.munmap(addr, PAGE)
        self.compare("mapread of the last page", base, page[:size - base])
        if page[size - base:] != bytes(PAGE - (size - base)):
            self.fail("READ BAD DATA", "the last page past the end of the file (%d) is not zero" % size,
                      size, bytes(PAGE - (size - base)), page[size - base:])

    def op_mapwrite(self):
        off, n = self.span(self.a.maxlen)
        size = len(self.model)
        end = off + n
        if end > size:
            # A mapping cannot grow a file: extend it first, as a program would.
            self.logop("mapwrite extends %d -> %d (ftruncate)" % (size, end))
            os.ftruncate(self.fd, end)
            self.resize(end)
        data = self.pattern(off, n)
        base = off - off % PAGE
        self.logop("mapwrite %d +%d" % (off, n))
        m = mmap.mmap(self.fd, end - base, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=base)
        try:
            m[off - base:off - base + n] = data
            m.flush()
        finally:
            m.close()
        self.set_bytes(off, data)

    def op_truncate(self):
        size = self.rng.randrange(self.a.maxlen + 1)
        self.logop("truncate %d -> %d" % (len(self.model), size))
        os.ftruncate(self.fd, size)
        self.resize(size)

    def op_fallocate(self):
        off, n = self.span(self.a.maxlen)
        modes = ["posix"]
        if self.libc_fallocate is not None:
            modes += ["keep", "punch", "zero"]
        modes = [m for m in modes if "fallocate " + m not in self.refused]
        mode = self.rng.choice(modes)
        size = len(self.model)
        if mode == "posix":
            self.logop("posix_fallocate %d +%d (size %d)" % (off, n, size))
            try:
                os.posix_fallocate(self.fd, off, n)
            except OSError as e:
                if e.errno in (errno.EOPNOTSUPP, errno.ENOSYS):
                    return self.note("fallocate posix", "refused (%s): not used" % os.strerror(e.errno))
                raise
            if off + n > size:
                self.resize(off + n)
            return
        flags = {"keep": FALLOC_FL_KEEP_SIZE,
                 "punch": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                 "zero": FALLOC_FL_ZERO_RANGE}[mode]
        self.logop("fallocate %s %d +%d (size %d)" % (mode, off, n, size))
        if self.libc_fallocate(self.fd, flags, off, n) != 0:
            e = ctypes.get_errno()
            if e in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                return self.note("fallocate " + mode, "refused (%s): not used" % os.strerror(e))
            raise OSError(e, os.strerror(e))
        if mode == "punch":
            end = min(off + n, size)
            if end > off:
                self.model[off:end] = bytes(end - off)
        elif mode == "zero":
            end = off + n
            if end > size:
                self.resize(end)
            self.model[off:end] = bytes(end - off)

    def direct_fd(self):
        if self.dfd is None:
            try:
                self.dfd = os.open(self.path, os.O_RDWR | os.O_DIRECT)
            except OSError as e:
                if e.errno == errno.EINVAL:
                    self.note("O_DIRECT", "refused at open (EINVAL): not used")
                    return None
                raise
        return self.dfd

    def dio_span(self, limit):
        blocks = max(1, limit // DIO_ALIGN)
        off = self.rng.randrange(blocks) * DIO_ALIGN
        n = self.rng.randrange(1, max(1, self.a.oplen // DIO_ALIGN) + 1) * DIO_ALIGN
        return off, n

    def op_dread(self):
        size = len(self.model)
        if size == 0:
            return self.logop("dread skipped (empty)")
        fd = self.direct_fd()
        if fd is None:
            return
        off, n = self.dio_span(size)
        self.logop("dread %d +%d (size %d)" % (off, n, size))
        buf = mmap.mmap(-1, n)
        try:
            try:
                got_n = os.preadv(fd, [buf], off)
            except OSError as e:
                if e.errno == errno.EINVAL:
                    return self.note("O_DIRECT", "read refused (EINVAL): not used")
                raise
            got = buf[:got_n]
        finally:
            buf.close()
        want = max(0, min(n, size - off))
        if got_n != want:
            self.fail("READ BAD DATA", "dread %d +%d returned %d bytes, the model has %d" % (off, n, got_n, want),
                      off, bytes(self.model[off:off + want]), got)
        self.compare("dread %d +%d" % (off, n), off, got)

    def op_dwrite(self):
        fd = self.direct_fd()
        if fd is None:
            return
        off, n = self.dio_span(self.a.maxlen)
        n = min(n, max(DIO_ALIGN, (self.a.maxlen - off) // DIO_ALIGN * DIO_ALIGN))
        data = self.pattern(off, n)
        self.logop("dwrite %d +%d (size %d -> %d)" % (off, n, len(self.model), max(len(self.model), off + n)))
        buf = mmap.mmap(-1, n)
        try:
            buf[:] = data
            try:
                done = os.pwritev(fd, [buf], off)
            except OSError as e:
                if e.errno == errno.EINVAL:
                    return self.note("O_DIRECT", "write refused (EINVAL): not used")
                raise
        finally:
            buf.close()
        if done != n:
            self.fail("SHORT WRITE", "dwrite %d +%d wrote %d" % (off, n, done), off, None, None)
        self.set_bytes(off, data)

    def op_reopen(self):
        self.logop("close and reopen")
        os.close(self.fd)
        self.fd = os.open(self.path, os.O_RDWR)
        if self.dfd is not None:
            os.close(self.dfd)
            self.dfd = None

    def op_fsync(self):
        self.logop("fsync")
        os.fsync(self.fd)

    def corrupt(self):
        """Changes one byte through another descriptor, unknown to the model."""
        if not self.model:
            self.op_write()
        at = self.rng.randrange(len(self.model))
        other = os.open(self.path, os.O_RDWR)
        try:
            b = os.pread(other, 1, at)
            os.pwrite(other, bytes([b[0] ^ 0x5A]), at)
        finally:
            os.close(other)
        self.logop("(corrupt: byte %d changed behind the model's back)" % at)
        self.check_all("after the deliberate corruption")

    def check_all(self, what):
        self.check_size(what)
        off = 0
        while off < len(self.model):
            got = os.pread(self.fd, min(1 << 20, len(self.model) - off), off)
            if not got:
                break
            self.compare("%s: whole-file read at %d" % (what, off), off, got)
            off += len(got)

    # ---- the run -------------------------------------------------------

    def run(self):
        kinds = [
            ("read", self.op_read, self.a.reads),
            ("write", self.op_write, self.a.writes),
            ("mapread", self.op_mapread, self.a.mapread),
            ("mapwrite", self.op_mapwrite, self.a.mapwrite),
            ("truncate", self.op_truncate, self.a.truncate),
            ("fallocate", self.op_fallocate, self.a.fallocate),
            ("dread", self.op_dread, self.a.direct),
            ("dwrite", self.op_dwrite, self.a.direct),
            ("reopen", self.op_reopen, self.a.reopen),
            ("fsync", self.op_fsync, self.a.fsync),
        ]
        # Reads and writes are the common case; the rest one share each.
        weights = {"read": 4, "write": 4, "mapread": 2, "mapwrite": 2, "dread": 2, "dwrite": 2}
        pool = [(name, f) for name, f, enabled in kinds if enabled for _ in range(weights.get(name, 1))]
        if not pool:
            print("fsx: every operation is turned off", file=sys.stderr)
            return 2
        if self.a.all_direct:
            # As with a file opened O_DIRECT: every read and write is one.
            direct = {"read": ("dread", self.op_dread), "write": ("dwrite", self.op_dwrite)}
            pool = [direct.get(name, (name, f)) for name, f in pool]
        for self.opno in range(1, self.a.ops + 1):
            if self.opno == self.a.corrupt:
                self.corrupt()
            name, f = self.rng.choice(pool)
            self.counts[name] += 1
            f()
            self.check_size(self.log[-1].split(None, 1)[1] if self.log else name)
        self.opno += 1
        self.logop("final whole-file check")
        self.check_all("final check")
        return 0


def main():
    p = argparse.ArgumentParser(description="Seeded random operations on one file, checked against a model.")
    p.add_argument("file")
    p.add_argument("-N", dest="ops", type=int, default=2000, help="operations (default 2000)")
    p.add_argument("-S", dest="seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("-l", dest="maxlen", type=int, default=256 * 1024, help="largest file length (default 256 KiB)")
    p.add_argument("-o", dest="oplen", type=int, default=64 * 1024, help="largest operation length (default 64 KiB)")
    p.add_argument("--log", type=int, default=40, help="operations shown on failure (default 40)")
    for name, what in [("reads", "plain reads"), ("writes", "plain writes"), ("mapread", "mapped reads"),
                       ("mapwrite", "mapped writes"), ("truncate", "truncates"), ("fallocate", "fallocate"),
                       ("direct", "O_DIRECT reads and writes"), ("reopen", "close and reopen"),
                       ("fsync", "fsync")]:
        p.add_argument("--no-" + name, dest=name, action="store_false", help="no " + what)
    p.add_argument("-Z", dest="all_direct", action="store_true",
                   help="plain reads and writes are O_DIRECT too (block aligned)")
    p.add_argument("--no-fallocate-modes", dest="fallocate_modes", action="store_false",
                   help="posix_fallocate only (no KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE)")
    p.add_argument("--corrupt", type=int, default=0, metavar="K",
                   help="self-test: change a byte behind the model's back before op K (must end in BAD DATA)")
    p.add_argument("--keep", action="store_true", help="keep the file after a clean run")
    a = p.parse_args()
    if a.maxlen < DIO_ALIGN or a.oplen < 1 or a.oplen > a.maxlen:
        p.error("need -l >= %d and 1 <= -o <= -l" % DIO_ALIGN)
    try:
        fsx = Fsx(a.file, a)
    except OSError as e:
        print("fsx: %s: %s" % (a.file, e), file=sys.stderr)
        return 2
    try:
        rc = fsx.run()
    except Bad:
        return 1
    except OSError as e:
        print("fsx: seed %d, op %d: unexpected error: %s" % (a.seed, fsx.opno, e), flush=True)
        print("fsx: last operations (op number, what):")
        for line in fsx.log:
            print("  " + line)
        return 1
    counts = " ".join("%s=%d" % kv for kv in sorted(fsx.counts.items()))
    print("fsx: seed %d: %d operations, all reads matched (%s)" % (a.seed, a.ops, counts), flush=True)
    if not a.keep:
        os.unlink(a.file)
    return rc


if __name__ == "__main__":
    sys.exit(main())
