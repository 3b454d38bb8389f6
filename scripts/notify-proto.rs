//! Prototype, not part of the product: what a seccomp user-notification
//! filter on the mutating syscalls would cost as a replacement for the
//! workspace view's FUSE data path (see docs/git.md, "Bypassing the view
//! for undecided operations: evaluated"). Built and run by
//! `scripts/bench-notify.sh` with plain `rustc` (std only, no crates), so
//! `cargo build` never sees it.
//!
//!   notify-proto calls DIR N ROUNDS [plain-only]
//!       per-call cost of creating a file / a directory in DIR: plain, under
//!       the filter with the supervisor deciding and answering CONTINUE, and
//!       with the supervisor doing the call itself and injecting the result
//!       (SECCOMP_IOCTL_NOTIF_ADDFD); medians of ROUNDS rounds of N calls.
//!   notify-proto supervise LOG -- CMD ARGS...
//!       runs CMD (runsc) under the filter, decides and CONTINUEs every
//!       notification, and writes to LOG what each process asked for.
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::io::Write;
use std::time::Instant;

#[allow(non_camel_case_types)]
type c_int = i32;
extern "C" {
    fn syscall(n: i64, ...) -> i64;
    fn ioctl(fd: c_int, req: u64, ...) -> c_int;
    fn prctl(op: c_int, ...) -> c_int;
    fn fork() -> c_int;
    fn pipe(fds: *mut c_int) -> c_int;
    fn read(fd: c_int, b: *mut u8, n: usize) -> isize;
    fn write(fd: c_int, b: *const u8, n: usize) -> isize;
    fn close(fd: c_int) -> c_int;
    fn open(p: *const i8, f: c_int, ...) -> c_int;
    fn openat(d: c_int, p: *const i8, f: c_int, ...) -> c_int;
    fn mkdirat(d: c_int, p: *const i8, m: u32) -> c_int;
    fn pread(fd: c_int, b: *mut u8, n: usize, off: i64) -> isize;
    fn fstatat(d: c_int, p: *const i8, st: *mut u8, fl: c_int) -> c_int;
    fn waitpid(p: c_int, st: *mut c_int, o: c_int) -> c_int;
    fn execvp(f: *const i8, a: *const *const i8) -> c_int;
    fn poll(fds: *mut PollFd, n: u64, t: c_int) -> c_int;
    fn _exit(c: c_int) -> !;
    fn __errno_location() -> *mut c_int;
}
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}
fn errno() -> c_int {
    unsafe { *__errno_location() }
}

const SYS_SECCOMP: i64 = 317;
const SYS_PIDFD_OPEN: i64 = 434;
const SYS_PIDFD_GETFD: i64 = 438;
const NOTIF_RECV: u64 = 0xc050_2100;
const NOTIF_SEND: u64 = 0xc018_2101;
const NOTIF_ID_VALID: u64 = 0x4008_2102;
const NOTIF_ADDFD: u64 = 0x4018_2103;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_USER_NOTIF: u32 = 0x7fc0_0000;
const FLAG_CONTINUE: u32 = 1;
const ADDFD_FLAG_SEND: u32 = 2;
const O_CLOEXEC: c_int = 0o2000000;
const O_PATH: c_int = 0o10000000;
const O_WRONLY: c_int = 1;
const O_CREAT: c_int = 0o100;
const AT_FDCWD: c_int = -100;
const AT_SYMLINK_NOFOLLOW: c_int = 0x100;
/// Open flags that make an open a mutation: write access, create,
/// truncate, append, O_TMPFILE.
const MUTATING_OPEN: u32 = 0x1 | 0x2 | 0x40 | 0x200 | 0x400 | 0x40_0000;
const NR_OPEN: u32 = 2;
const NR_OPENAT: u32 = 257;
/// Syscalls that always need a decision (x86_64): openat2, creat, mkdir(at),
/// mknod(at), rename*, unlink(at), rmdir, symlink(at), link(at), chmod
/// family, chown family, truncate family, xattr writes, utime family,
/// fallocate, io_uring_setup.
const ALWAYS: &[u32] = &[
    437, 85, 83, 258, 133, 259, 82, 264, 316, 87, 263, 84, 88, 266, 86, 265, 90, 91, 268, 452, 92, 93, 94, 260, 76, 77,
    188, 189, 190, 197, 198, 199, 280, 132, 235, 261, 285, 425,
];

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    nr: i32,
    arch: u32,
    ip: u64,
    args: [u64; 6],
}
#[repr(C)]
struct Resp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}
#[repr(C)]
struct AddFd {
    id: u64,
    flags: u32,
    srcfd: u32,
    newfd: u32,
    newfd_flags: u32,
}
#[repr(C)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

fn filter() -> Vec<SockFilter> {
    const LD: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const JSET: u16 = 0x45;
    const RET: u16 = 0x06;
    let ins = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    // Layout: 0 ld arch; 1 jeq x86_64; 2 ld nr; 3 jeq open; 4 jeq openat;
    // 5.. jeq ALWAYS; then ret ALLOW; ld args[1]; jset; ld args[2]; jset;
    // ret NOTIF; ret ALLOW.
    let n = ALWAYS.len();
    let allow0 = 5 + n; // index of the first ret ALLOW
    let open_chk = allow0 + 1;
    let openat_chk = open_chk + 2;
    let notify = openat_chk + 2;
    let allow = notify + 1;
    let rel = |from: usize, to: usize| (to - from - 1) as u8;
    let mut p = vec![
        ins(LD, 0, 0, 4),
        ins(JEQ, 0, rel(1, allow), 0xc000_003e),
        ins(LD, 0, 0, 0),
        ins(JEQ, rel(3, open_chk), 0, NR_OPEN),
        ins(JEQ, rel(4, openat_chk), 0, NR_OPENAT),
    ];
    for (i, nr) in ALWAYS.iter().enumerate() {
        p.push(ins(JEQ, rel(5 + i, notify), 0, *nr));
    }
    p.push(ins(RET, 0, 0, RET_ALLOW));
    p.push(ins(LD, 0, 0, 24)); // args[1] (low half): open's flags
    p.push(ins(
        JSET,
        rel(open_chk + 1, notify),
        rel(open_chk + 1, allow),
        MUTATING_OPEN,
    ));
    p.push(ins(LD, 0, 0, 32)); // args[2]: openat's flags
    p.push(ins(
        JSET,
        rel(openat_chk + 1, notify),
        rel(openat_chk + 1, allow),
        MUTATING_OPEN,
    ));
    p.push(ins(RET, 0, 0, RET_USER_NOTIF));
    p.push(ins(RET, 0, 0, RET_ALLOW));
    p
}

/// Installs the filter on the calling thread; returns the listener fd.
fn install() -> c_int {
    let p = filter();
    let prog = SockFprog {
        len: p.len() as u16,
        filter: p.as_ptr(),
    };
    // NEW_LISTENER | WAIT_KILLABLE_RECV: once the supervisor has received a
    // notification, only a fatal signal interrupts the waiting thread (Go's
    // preemption signals would otherwise restart the call, and with it the
    // decision, again and again).
    let flags = 8i64 | 32;
    let mut fd = unsafe { syscall(SYS_SECCOMP, 1i64, flags, &prog as *const SockFprog) };
    if fd < 0 && errno() == 13 {
        // No CAP_SYS_ADMIN in our user namespace: no_new_privs is required.
        unsafe { prctl(38, 1u64, 0u64, 0u64, 0u64) };
        fd = unsafe { syscall(SYS_SECCOMP, 1i64, flags, &prog as *const SockFprog) };
    }
    if fd < 0 {
        eprintln!("seccomp(NEW_LISTENER): errno {}", errno());
        unsafe { _exit(2) };
    }
    fd as c_int
}

/// Takes the child's listener into this process.
fn take_listener(pid: c_int, fdnum: c_int) -> c_int {
    let pidfd = unsafe { syscall(SYS_PIDFD_OPEN, pid as i64, 0i64) };
    let fd = unsafe { syscall(SYS_PIDFD_GETFD, pidfd, fdnum as i64, 0i64) };
    assert!(pidfd >= 0 && fd >= 0, "pidfd_getfd: errno {}", errno());
    unsafe { close(pidfd as c_int) };
    fd as c_int
}

fn stat_id(dir: c_int, name: &CStr, flags: c_int) -> Option<(u64, u64)> {
    let mut st = [0u8; 144];
    if unsafe { fstatat(dir, name.as_ptr(), st.as_mut_ptr(), flags) } != 0 {
        return None;
    }
    let dev = u64::from_ne_bytes(st[0..8].try_into().unwrap());
    let ino = u64::from_ne_bytes(st[8..16].try_into().unwrap());
    Some((dev, ino))
}

/// The supervisor's side: what a decision needs per notification.
struct Supervisor {
    listener: c_int,
    mems: HashMap<u32, c_int>,
    /// Directory identities whose entries need a decision (the Git
    /// directories, the ignored directories); everything else CONTINUEs.
    guarded: HashMap<(u64, u64), ()>,
    /// Every directory on this device is treated as guarded too (the
    /// workspace's file system: the worst case, a full check per call).
    guard_dev: Option<u64>,
    /// Identities hidden by the view (the sticky hidden set).
    hidden: HashMap<(u64, u64), ()>,
    log: Option<std::fs::File>,
    stats: BTreeMap<(String, i32), u64>,
    samples: u32,
    /// Log every notification (process, directory, name); off for timing.
    trace: bool,
}

impl Supervisor {
    fn mem(&mut self, pid: u32) -> c_int {
        *self.mems.entry(pid).or_insert_with(|| {
            let p = CString::new(format!("/proc/{pid}/mem")).unwrap();
            unsafe { open(p.as_ptr(), O_CLOEXEC) }
        })
    }

    /// Reads the NUL-terminated string at `addr` in `pid`'s memory.
    fn string(&mut self, pid: u32, addr: u64) -> Option<CString> {
        let mem = self.mem(pid);
        let mut out = Vec::new();
        let mut a = addr;
        while out.len() < 4096 {
            let room = 4096 - (a as usize & 4095);
            let mut buf = vec![0u8; room.min(256)];
            let n = unsafe { pread(mem, buf.as_mut_ptr(), buf.len(), a as i64) };
            if n <= 0 {
                return None;
            }
            buf.truncate(n as usize);
            if let Some(z) = buf.iter().position(|b| *b == 0) {
                out.extend_from_slice(&buf[..z]);
                return CString::new(out).ok();
            }
            out.extend_from_slice(&buf);
            a += n as u64;
        }
        None
    }

    fn valid(&self, id: u64) -> bool {
        unsafe { ioctl(self.listener, NOTIF_ID_VALID, &id as *const u64) == 0 }
    }

    fn respond(&self, id: u64, val: i64, error: i32, flags: u32) {
        let r = Resp { id, val, error, flags };
        // ENOENT: the caller was interrupted (a signal); nothing to do.
        unsafe { ioctl(self.listener, NOTIF_SEND, &r as *const Resp) };
    }

    /// One notification: read the name, resolve the directory by identity,
    /// look the existing target up by identity, decide, answer. `emulate`:
    /// do the open/mkdir here and hand the result back (ADDFD for opens).
    fn serve_one(&mut self, emulate: bool) -> bool {
        let mut n = Notif::default();
        if unsafe { ioctl(self.listener, NOTIF_RECV, &mut n as *mut Notif) } != 0 {
            return errno() == 4 || errno() == 2; // EINTR / ENOENT: retry
        }
        let nr = n.nr as u32;
        // (dirfd, path pointer) for the *at calls this prototype decides
        // on; others are just counted and continued.
        let (dirfd, path) = match nr {
            // renameat/renameat2/linkat: the source (dirfd, name).
            NR_OPENAT | 258 | 263 | 259 | 260 | 268 | 280 | 264 | 316 | 265 => (n.args[0] as i32, n.args[1]),
            NR_OPEN | 83 | 87 | 84 | 85 | 90 => (AT_FDCWD, n.args[0]),
            _ => (i32::MIN, 0),
        };
        let name = if path != 0 { self.string(n.pid, path) } else { None };
        let dir_path = if dirfd == AT_FDCWD {
            format!("/proc/{}/cwd", n.pid)
        } else if dirfd >= 0 {
            format!("/proc/{}/fd/{}", n.pid, dirfd)
        } else {
            String::new()
        };
        // The directory the call is relative to, opened here: its identity
        // is what the decision is about, and it is what an emulated call
        // uses (not the caller's fd number, which could change meaning).
        let dir = if dir_path.is_empty() {
            -1
        } else {
            let p = CString::new(dir_path.clone()).unwrap();
            unsafe { open(p.as_ptr(), O_PATH | O_CLOEXEC) }
        };
        let mut refuse = false;
        if dir >= 0 {
            if let Some(id) = stat_id(dir, c"", 0x1000 /* AT_EMPTY_PATH */) {
                if self.guard_dev == Some(id.0) || self.guarded.contains_key(&id) {
                    // The name's current identity (hidden by identity?).
                    if let Some(name) = &name {
                        if let Some(t) = stat_id(dir, name, AT_SYMLINK_NOFOLLOW) {
                            refuse = self.hidden.contains_key(&t);
                        }
                        // Stand-in for the view's policy: a few protected
                        // names (any directory on the guarded device).
                        refuse |= matches!(name.to_bytes(), b"config" | b"commondir" | b".git");
                    }
                }
            }
        }
        if !self.valid(n.id) {
            if dir >= 0 {
                unsafe { close(dir) };
            }
            return true;
        }
        if self.log.is_some() && !self.trace {
            *self.stats.entry((String::new(), n.nr)).or_default() += 1;
        }
        if let Some(log) = self.log.as_mut().filter(|_| self.trace) {
            let comm = std::fs::read_to_string(format!("/proc/{}/comm", n.pid)).unwrap_or_default();
            let comm = comm.trim().to_string();
            *self.stats.entry((comm.clone(), n.nr)).or_default() += 1;
            if self.samples < 20000 {
                self.samples += 1;
                let target = std::fs::read_link(&dir_path)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let _ = writeln!(
                    log,
                    "pid {} {} nr {} dirfd {} -> {:?} name {:?} a2 {:#x}",
                    n.pid, comm, n.nr, dirfd, target, name, n.args[2]
                );
            }
        }
        if refuse {
            self.respond(n.id, 0, -1, 0); // EPERM
        } else if emulate && dir >= 0 && name.is_some() && (nr == NR_OPENAT || nr == 258) {
            let name = name.unwrap();
            if nr == NR_OPENAT {
                let fd = unsafe { openat(dir, name.as_ptr(), n.args[2] as c_int | O_CLOEXEC, n.args[3] as u32) };
                if fd < 0 {
                    self.respond(n.id, 0, -errno(), 0);
                } else {
                    let cloexec = (n.args[2] as c_int & O_CLOEXEC) as u32;
                    let a = AddFd {
                        id: n.id,
                        flags: ADDFD_FLAG_SEND,
                        srcfd: fd as u32,
                        newfd: 0,
                        newfd_flags: cloexec,
                    };
                    unsafe { ioctl(self.listener, NOTIF_ADDFD, &a as *const AddFd) };
                    unsafe { close(fd) };
                }
            } else {
                let r = unsafe { mkdirat(dir, name.as_ptr(), n.args[2] as u32) };
                if r < 0 {
                    self.respond(n.id, 0, -errno(), 0)
                } else {
                    self.respond(n.id, 0, 0, 0)
                }
            }
        } else {
            self.respond(n.id, 0, 0, FLAG_CONTINUE);
        }
        if dir >= 0 {
            unsafe { close(dir) };
        }
        true
    }
}

fn pipe2() -> (c_int, c_int) {
    let mut p = [0; 2];
    assert_eq!(unsafe { pipe(p.as_mut_ptr()) }, 0);
    (p[0], p[1])
}
fn send_u64(fd: c_int, v: u64) {
    unsafe { write(fd, v.to_ne_bytes().as_ptr(), 8) };
}
fn recv_u64(fd: c_int) -> Option<u64> {
    let mut b = [0u8; 8];
    (unsafe { read(fd, b.as_mut_ptr(), 8) } == 8).then(|| u64::from_ne_bytes(b))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// One round: N file creates and N mkdirs in a fresh subdirectory, ns/call.
fn round(dir: &str, tag: &str, r: usize, n: usize) -> (f64, f64, f64, f64) {
    let sub = CString::new(format!("{dir}/{tag}{r}")).unwrap();
    unsafe { mkdirat(AT_FDCWD, sub.as_ptr(), 0o755) };
    let d = unsafe { open(sub.as_ptr(), O_PATH | O_CLOEXEC | 0o200000) };
    assert!(d >= 0, "open {sub:?}: errno {}", errno());
    let names: Vec<CString> = (0..n).map(|i| CString::new(format!("f{i}")).unwrap()).collect();
    let dnames: Vec<CString> = (0..n).map(|i| CString::new(format!("d{i}")).unwrap()).collect();
    let t = Instant::now();
    for nm in &names {
        let fd = unsafe { openat(d, nm.as_ptr(), O_CREAT | O_WRONLY | O_CLOEXEC, 0o644) };
        assert!(fd >= 0, "create: errno {}", errno());
        unsafe { close(fd) };
    }
    let create = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    for nm in &dnames {
        assert_eq!(unsafe { mkdirat(d, nm.as_ptr(), 0o755) }, 0, "mkdir: errno {}", errno());
    }
    let mkdir = t.elapsed().as_nanos() as f64 / n as f64;
    // A read-only open: not trapped by the filter (the "no decision" path).
    let t = Instant::now();
    for nm in &names {
        let fd = unsafe { openat(d, nm.as_ptr(), O_CLOEXEC, 0) };
        unsafe { close(fd) };
    }
    let ropen = t.elapsed().as_nanos() as f64 / n as f64;
    // A stat by name: never filtered; through FUSE with `timeout=0`, one
    // LOOKUP round trip each.
    let t = Instant::now();
    for nm in &names {
        stat_id(d, nm, AT_SYMLINK_NOFOLLOW);
    }
    let lstat = t.elapsed().as_nanos() as f64 / n as f64;
    unsafe { close(d) };
    (create, mkdir, ropen, lstat)
}

fn report(label: &str, rs: Vec<(f64, f64, f64, f64)>) {
    let m = |f: fn(&(f64, f64, f64, f64)) -> f64| median(rs.iter().map(f).collect()) / 1e3;
    println!(
        "{label:<22} create+close {:>6.1} us  mkdirat {:>6.1} us  read-only open+close {:>6.1} us  fstatat {:>6.1} us",
        m(|r| r.0),
        m(|r| r.1),
        m(|r| r.2),
        m(|r| r.3)
    );
}

fn calls(dir: &str, n: usize, rounds: usize, plain_only: bool) {
    let plain: Vec<_> = (0..rounds).map(|r| round(dir, "plain", r, n)).collect();
    report("plain", plain);
    if plain_only {
        return;
    }
    for (mode, emulate) in [("notify-continue", false), ("notify-addfd", true)] {
        let (to_sup, from_child) = pipe2();
        let (go_rd, go_wr) = pipe2();
        let (res_rd, res_wr) = pipe2();
        let pid = unsafe { fork() };
        if pid == 0 {
            let l = install();
            send_u64(from_child, l as u64);
            recv_u64(go_rd);
            let rs: Vec<_> = (0..rounds).map(|r| round(dir, mode, r, n)).collect();
            for r in rs {
                for v in [r.0, r.1, r.2, r.3] {
                    send_u64(res_wr, v.to_bits());
                }
            }
            unsafe { _exit(0) };
        }
        let fdnum = recv_u64(to_sup).unwrap() as c_int;
        let listener = take_listener(pid, fdnum);
        let mut sup = Supervisor {
            listener,
            mems: HashMap::new(),
            guarded: HashMap::new(),
            guard_dev: stat_id(AT_FDCWD, &CString::new(dir).unwrap(), 0).map(|i| i.0),
            hidden: HashMap::new(),
            log: None,
            stats: BTreeMap::new(),
            samples: 0,
            trace: false,
        };
        // Every directory of this run is "guarded" (worst case: every call
        // pays the full identity check).
        let d = CString::new(dir).unwrap();
        if let Some(id) = stat_id(AT_FDCWD, &d, 0) {
            sup.guarded.insert(id, ());
        }
        for r in 0..rounds {
            let s = CString::new(format!("{dir}/{mode}{r}")).unwrap();
            unsafe { mkdirat(AT_FDCWD, s.as_ptr(), 0o755) };
            if let Some(id) = stat_id(AT_FDCWD, &s, 0) {
                sup.guarded.insert(id, ());
            }
        }
        send_u64(go_wr, 1);
        let mut pfd = PollFd {
            fd: listener,
            events: 1,
            revents: 0,
        };
        loop {
            pfd.revents = 0;
            unsafe { poll(&mut pfd, 1, -1) };
            if pfd.revents & 1 == 0 {
                break; // POLLHUP: the child is gone
            }
            sup.serve_one(emulate);
        }
        let mut st = 0;
        unsafe { waitpid(pid, &mut st, 0) };
        let mut rs = Vec::new();
        for _ in 0..rounds {
            let a = f64::from_bits(recv_u64(res_rd).unwrap());
            let b = f64::from_bits(recv_u64(res_rd).unwrap());
            let c = f64::from_bits(recv_u64(res_rd).unwrap());
            let e = f64::from_bits(recv_u64(res_rd).unwrap());
            rs.push((a, b, c, e));
        }
        report(mode, rs);
        for fd in [to_sup, from_child, go_rd, go_wr, res_rd, res_wr, listener] {
            unsafe { close(fd) };
        }
    }
}

fn supervise(log: &str, cmd: &[String]) -> i32 {
    let (to_sup, from_child) = pipe2();
    let (ack_rd, ack_wr) = pipe2();
    let pid = unsafe { fork() };
    if pid == 0 {
        let l = install();
        send_u64(from_child, l as u64);
        // Once the supervisor holds the listener, the exec'd program must
        // not inherit it (with no listener left, filtered calls fail ENOSYS).
        recv_u64(ack_rd);
        unsafe { close(l) };
        let args: Vec<CString> = cmd.iter().map(|a| CString::new(a.as_str()).unwrap()).collect();
        let mut argv: Vec<*const i8> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        unsafe { execvp(argv[0], argv.as_ptr()) };
        eprintln!("exec {}: errno {}", cmd[0], errno());
        unsafe { _exit(127) };
    }
    let fdnum = recv_u64(to_sup).unwrap() as c_int;
    let listener = take_listener(pid, fdnum);
    send_u64(ack_wr, 1);
    let mut sup = Supervisor {
        listener,
        mems: HashMap::new(),
        guarded: HashMap::new(),
        guard_dev: std::env::var("NOTIFY_GUARD")
            .ok()
            .and_then(|d| stat_id(AT_FDCWD, &CString::new(d).unwrap(), 0))
            .map(|i| i.0),
        hidden: HashMap::new(),
        log: Some(std::fs::File::create(log).unwrap()),
        stats: BTreeMap::new(),
        samples: 0,
        trace: std::env::var_os("NOTIFY_TRACE").is_some(),
    };
    let t = Instant::now();
    let mut total = 0u64;
    let mut pfd = PollFd {
        fd: listener,
        events: 1,
        revents: 0,
    };
    loop {
        pfd.revents = 0;
        let r = unsafe { poll(&mut pfd, 1, 200) };
        if r > 0 && pfd.revents & 1 != 0 {
            sup.serve_one(false);
            total += 1;
            continue;
        }
        if r > 0 && pfd.revents & 0x10 != 0 {
            break; // POLLHUP: nothing under the filter is left
        }
        let mut st = 0;
        if unsafe {
            waitpid(pid, &mut st, 1 /* WNOHANG */)
        } == pid
        {
            break;
        }
    }
    let mut st = 0;
    unsafe { waitpid(pid, &mut st, 0) };
    let log = sup.log.as_mut().unwrap();
    let _ = writeln!(
        log,
        "--- {total} notifications in {:?}; by process and syscall:",
        t.elapsed()
    );
    for ((comm, nr), c) in &sup.stats {
        let _ = writeln!(log, "{comm:>16} nr {nr:>4}: {c}");
    }
    (st >> 8) & 0xff
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("calls") => calls(&a[2], a[3].parse().unwrap(), a[4].parse().unwrap(), a.get(5).is_some()),
        Some("supervise") => std::process::exit(supervise(&a[2], &a[4..])),
        _ => {
            eprintln!("usage: notify-proto calls DIR N ROUNDS [plain-only] | supervise LOG -- CMD ...");
            std::process::exit(2)
        }
    }
}
