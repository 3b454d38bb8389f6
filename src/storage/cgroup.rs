//! Resource limits (memory, processes, CPU) for a Domain, enforced by the
//! host kernel's cgroups, rootless.
//!
//! Mechanisms, in the order they are tried:
//! 1. **Delegated**: the cgroup Lazaret runs in (from `/proc/self/cgroup`),
//!    or for cgroup v2 an ancestor of it, is writable by the user — as
//!    systemd's `Delegate=` leaves it (v2), or as an administrator prepared
//!    it (v1: one directory in each of the memory, pids and cpu
//!    hierarchies, owned by the user). Lazaret creates one child per
//!    generation, named after the runsc container id, sets the limits and
//!    moves the supervisor into it before it execs, so runsc, the gofer and
//!    the sandbox (and every systrap stub) are born inside.
//! 2. **Systemd scope**: cgroup v2 with a reachable user manager: the
//!    supervisor is started through `systemd-run --user --scope` with
//!    `MemoryMax=`, `MemorySwapMax=0`, `TasksMax=` and `CPUQuota=`.
//! 3. **Unavailable**: nothing bounds the Domain. `lazaret run` refuses
//!    explicitly configured limits (exit 2, naming the fix) and warns once
//!    per Domain start when only the defaults apply.
//!
//! runsc itself keeps `--ignore-cgroups`: the outer cgroup bounds it.
//!
//! Pure parts (parsing `/proc/self/cgroup` and mountinfo, the values
//! written) are separate from the thin syscall layer (mkdir, write).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::config::{format_size, Limits};

/// Default pids limit when a profile sets none.
pub const DEFAULT_PIDS: u64 = 8192;

/// The limits that apply to a Domain: the profile's, else the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effective {
    pub memory: u64,
    pub pids: u64,
    /// Thousandths of a CPU; `None`: all CPUs.
    pub cpu_millis: Option<u64>,
    /// Whether the user set any of them (then a missing mechanism is fatal).
    pub explicit: bool,
}

impl Effective {
    pub fn new(l: &Limits, host_mem: u64) -> Effective {
        Effective {
            memory: l.memory.unwrap_or(host_mem / 2).max(64 << 20),
            pids: l.pids.unwrap_or(DEFAULT_PIDS),
            cpu_millis: l.cpu_millis,
            explicit: l.explicit(),
        }
    }

    pub fn for_host(l: &Limits) -> Effective {
        Effective::new(l, host_memory().unwrap_or(8 << 30))
    }

    /// The guest's own task limit (RLIMIT_NPROC for the sandbox's
    /// processes, enforced by gVisor's sentry): sized so a guest flood
    /// stops inside the sandbox well before the host cgroup's `pids.max`,
    /// which stays the backstop. See [`guest_tasks`].
    pub fn guest_tasks(&self) -> u64 {
        guest_tasks(self.pids)
    }

    pub fn describe(&self) -> String {
        format!(
            "memory {}, pids {}, cpus {}",
            format_size(self.memory),
            self.pids,
            match self.cpu_millis {
                Some(m) => format!("{}", m as f64 / 1000.0),
                None => "all".into(),
            }
        )
    }
}

/// Host tasks kept back, before any guest task, for runsc, the sentry's
/// and the gofer's threads, slirp4netns, fuse-overlayfs and the
/// supervisor (an idle Domain uses about 50).
pub const HOST_TASK_RESERVE: u64 = 80;

/// Host tasks one guest task may cost under gVisor's systrap platform
/// (measured: about two — the task's stub thread and a share of stub
/// processes and sentry threads), with margin.
pub const HOST_TASKS_PER_GUEST_TASK: u64 = 3;

/// The guest task limit for a host `pids` limit: what is left after the
/// reserve, divided by the host cost of a guest task, and at least 16 so
/// a shell and a few commands always fit. gVisor counts every task
/// (thread) of a uid against RLIMIT_NPROC and refuses `fork`/`clone` with
/// EAGAIN beyond it; the sandbox's processes never hold CAP_SYS_ADMIN or
/// CAP_SYS_RESOURCE, which would exempt them.
pub fn guest_tasks(pids: u64) -> u64 {
    (pids.saturating_sub(HOST_TASK_RESERVE) / HOST_TASKS_PER_GUEST_TASK).max(16)
}

/// The `/proc/meminfo` runsc should read in the supervisor's mount
/// namespace: the host's, with `MemTotal` (and `MemFree`, `MemAvailable`)
/// no larger than the Domain's memory limit. runsc 20240729 derives the
/// sentry's total memory (`runsc boot --total-memory`) from `MemTotal`
/// when it manages no cgroup itself (`--ignore-cgroups`), so the guest's
/// `/proc/meminfo` then shows the limit. `None` when the host text has no
/// parsable `MemTotal`.
pub fn meminfo_view(host: &str, limit: u64) -> Option<String> {
    let kib = |l: &str| -> Option<u64> {
        let v = l.split_once(':')?.1.trim();
        v.strip_suffix("kB").unwrap_or(v).trim().parse().ok()
    };
    let total = host.lines().find(|l| l.starts_with("MemTotal:")).and_then(kib)?;
    let cap = total.min(limit / 1024);
    let mut out = String::new();
    for l in host.lines() {
        let key = l.split_once(':').map(|(k, _)| k).unwrap_or("");
        match (key, kib(l)) {
            ("MemTotal" | "MemFree" | "MemAvailable", Some(v)) => {
                let k = format!("{key}:");
                out.push_str(&format!("{k:<16}{:>8} kB\n", v.min(cap)));
            }
            _ => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    Some(out)
}

/// Why a Domain cgroup could not be made: a variant per step, with the io
/// error and the path.
#[derive(Debug)]
pub enum CgroupError {
    /// No mechanism (why, the fix).
    Unavailable(String, String),
    /// v2: enabling controllers (the `+ctl` list, the file).
    EnableControllers(String, PathBuf, std::io::Error),
    CreateDir(PathBuf, std::io::Error),
    /// Writing a limit (the value, the file).
    WriteLimit(String, PathBuf, std::io::Error),
    OpenProcs(PathBuf, std::io::Error),
}

impl std::fmt::Display for CgroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use CgroupError::*;
        match self {
            Unavailable(why, fix) => write!(f, "no cgroup for resource limits: {why}; fix: {fix}"),
            EnableControllers(ctls, p, e) => write!(
                f,
                "enabling {ctls} in {}: {e} (a cgroup with processes of its own cannot; start lazaret from a child cgroup)",
                p.display()
            ),
            CreateDir(p, e) => write!(f, "creating cgroup {}: {e}", p.display()),
            WriteLimit(v, p, e) => write!(f, "writing {v} to {}: {e}", p.display()),
            OpenProcs(p, e) => write!(f, "opening {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for CgroupError {}

/// Applies `--memory/--pids/--cpus` given on the command line (the set
/// fields of `o`) onto a profile's limits.
pub fn apply_overrides(mut l: Limits, o: &Limits) -> Limits {
    l.memory = o.memory.or(l.memory);
    l.pids = o.pids.or(l.pids);
    l.cpu_millis = o.cpu_millis.or(l.cpu_millis);
    l
}

/// The coordinator's flags for the CLI's overrides: `--memory-bytes N`,
/// `--pids N`, `--cpu-millis N` (plain integers, one flag per field;
/// `coordinator_overrides` parses them back).
pub const OVERRIDE_FLAGS: [&str; 3] = ["--memory-bytes", "--pids", "--cpu-millis"];

pub fn override_args(o: &Limits) -> Vec<String> {
    OVERRIDE_FLAGS
        .iter()
        .zip([o.memory, o.pids, o.cpu_millis])
        .filter_map(|(f, v)| v.map(|v| [f.to_string(), v.to_string()]))
        .flatten()
        .collect()
}

/// [`override_args`] parsed back (pico-args' `u64` parser; a bad value is a
/// usage error naming the flag).
pub fn coordinator_overrides(args: &mut pico_args::Arguments) -> Result<Limits, pico_args::Error> {
    Ok(Limits {
        memory: args.opt_value_from_str(OVERRIDE_FLAGS[0])?,
        pids: args.opt_value_from_str(OVERRIDE_FLAGS[1])?,
        cpu_millis: args.opt_value_from_str(OVERRIDE_FLAGS[2])?,
        ..Limits::default()
    })
}

/// MemTotal from /proc/meminfo, in bytes.
pub fn host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

// ---- detection (pure parsing + access checks) ----------------------------

/// One line of `/proc/self/cgroup`: hierarchy id, controllers, path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub controllers: Vec<String>,
    pub path: String,
}

pub fn parse_proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let _id = f.next()?;
            let ctl = f.next()?;
            let path = f.next()?;
            Some(Membership {
                controllers: ctl.split(',').filter(|c| !c.is_empty()).map(String::from).collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// A cgroup filesystem mount: v1 (with its controllers) or v2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgMount {
    pub v2: bool,
    pub controllers: Vec<String>,
    /// The mount's root inside the hierarchy (usually `/`).
    pub root: String,
    pub mountpoint: PathBuf,
}

pub fn parse_mountinfo(text: &str) -> Vec<CgMount> {
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            let fstype = *post.first()?;
            let (root, mp) = (*pre.get(3)?, *pre.get(4)?);
            let mountpoint = PathBuf::from(crate::storage::nospace::unescape_mountinfo(mp));
            match fstype {
                "cgroup2" => Some(CgMount {
                    v2: true,
                    controllers: Vec::new(),
                    root: crate::storage::nospace::unescape_mountinfo(root),
                    mountpoint,
                }),
                "cgroup" => Some(CgMount {
                    v2: false,
                    controllers: post
                        .get(2)?
                        .split(',')
                        .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                        .map(String::from)
                        .collect(),
                    root: crate::storage::nospace::unescape_mountinfo(root),
                    mountpoint,
                }),
                _ => None,
            }
        })
        .collect()
}

/// The directory of `path` (a cgroup path) under `m`, when `m` covers it.
fn dir_of(m: &CgMount, path: &str) -> Option<PathBuf> {
    let rel = if m.root == "/" {
        path
    } else {
        path.strip_prefix(m.root.as_str())?
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        m.mountpoint.clone()
    } else {
        m.mountpoint.join(rel)
    })
}

/// The v1 controllers Lazaret needs, and one it uses when it can (for
/// reporting CPU use).
pub const V1_REQUIRED: &[&str] = &["memory", "pids", "cpu"];
pub const V1_OPTIONAL: &[&str] = &["cpuacct"];
pub const V2_REQUIRED: &[&str] = &["memory", "pids", "cpu"];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// Directories (one per v1 hierarchy, or one v2 directory) the user may
    /// create children in.
    Delegated { v2: bool, dirs: Vec<(String, PathBuf)> },
    /// `systemd-run --user --scope`.
    SystemdScope,
    /// Nothing: why, and the exact fix.
    Unavailable { why: String, fix: String },
}

impl Mechanism {
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::Delegated { v2: false, .. } => "delegated cgroup (v1)",
            Mechanism::Delegated { v2: true, .. } => "delegated cgroup (v2)",
            Mechanism::SystemdScope => "systemd user scope",
            Mechanism::Unavailable { .. } => "none",
        }
    }

    #[cfg(test)]
    pub fn available(&self) -> bool {
        !matches!(self, Mechanism::Unavailable { .. })
    }

    /// One line for `doctor` and warnings.
    pub fn describe(&self) -> String {
        match self {
            Mechanism::Delegated { dirs, .. } => format!(
                "{}: {}",
                self.name(),
                dirs.iter()
                    .map(|(c, d)| if c.is_empty() {
                        d.display().to_string()
                    } else {
                        format!("{c} {}", d.display())
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Mechanism::SystemdScope => "systemd user scope (systemd-run --user --scope)".into(),
            Mechanism::Unavailable { why, fix } => format!("none: {why}; fix: {fix}"),
        }
    }
}

fn writable(p: &Path) -> bool {
    crate::sys::writable(p)
}

fn user_name() -> String {
    std::env::var("USER").unwrap_or_else(|_| crate::sys::getuid().to_string())
}

/// Which mechanism applies to this process.
pub fn detect() -> Mechanism {
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    detect_from(
        &parse_proc_cgroup(&cg),
        &parse_mountinfo(&mi),
        &writable,
        &|p| std::fs::read_to_string(p).ok(),
        systemd_user_manager(),
    )
}

/// [`detect`] with the world passed in.
pub fn detect_from(
    members: &[Membership],
    mounts: &[CgMount],
    writable: &dyn Fn(&Path) -> bool,
    read: &dyn Fn(&Path) -> Option<String>,
    systemd: bool,
) -> Mechanism {
    let user = user_name();
    // v1: every required controller has its own hierarchy and our cgroup
    // in each is writable.
    let v1_dir = |ctl: &str| -> Option<PathBuf> {
        let m = mounts
            .iter()
            .find(|m| !m.v2 && m.controllers.iter().any(|c| c == ctl))?;
        let mem = members.iter().find(|x| x.controllers.iter().any(|c| c == ctl))?;
        dir_of(m, &mem.path)
    };
    let v1_found: Vec<(String, Option<PathBuf>)> = V1_REQUIRED.iter().map(|c| (c.to_string(), v1_dir(c))).collect();
    let v1_present = v1_found.iter().all(|(_, d)| d.is_some());
    if v1_present {
        let ok = |d: &Path| writable(d) && writable(&d.join("cgroup.procs"));
        if v1_found.iter().all(|(_, d)| d.as_deref().is_some_and(ok)) {
            let mut dirs: Vec<(String, PathBuf)> =
                v1_found.into_iter().map(|(c, d)| (c, d.unwrap_or_default())).collect();
            for c in V1_OPTIONAL {
                if let Some(d) = v1_dir(c).filter(|d| ok(d)) {
                    if !dirs.iter().any(|(_, x)| *x == d) {
                        dirs.push((c.to_string(), d));
                    }
                }
            }
            return Mechanism::Delegated { v2: false, dirs };
        }
        let dirs: Vec<String> = v1_found
            .iter()
            .filter_map(|(_, d)| {
                d.as_ref()
                    .map(|d| d.join(format!("lazaret-{user}")).display().to_string())
            })
            .collect();
        return Mechanism::Unavailable {
            why: "cgroup v1 without a cgroup this user may write (memory, pids, cpu)".into(),
            fix: format!(
                "as root: for each of {}: mkdir it, chown {user} it and its cgroup.procs and tasks, and start lazaret from a shell moved into it (echo $$ > cgroup.procs), as systemd's Delegate= would",
                dirs.join(", ")
            ),
        };
    }
    // v2: our cgroup or an ancestor that is writable and can give children
    // memory, pids and cpu.
    if let (Some(m), Some(mem)) = (
        mounts.iter().find(|m| m.v2),
        members.iter().find(|x| x.controllers.is_empty()),
    ) {
        let avail = read(&m.mountpoint.join("cgroup.controllers")).unwrap_or_default();
        let has_all = V2_REQUIRED.iter().all(|c| avail.split_whitespace().any(|a| a == *c));
        if has_all && systemd {
            return Mechanism::SystemdScope;
        }
        if has_all {
            let own = dir_of(m, &mem.path);
            let mut dir = own.clone();
            let all = |text: Option<String>| {
                let t = text.unwrap_or_default();
                V2_REQUIRED.iter().all(|c| t.split_whitespace().any(|a| a == *c))
            };
            while let Some(d) = dir {
                if !d.starts_with(&m.mountpoint) || d == m.mountpoint {
                    break;
                }
                // Our own cgroup holds processes, so it can only give its
                // children controllers that are already enabled.
                let usable = all(read(&d.join("cgroup.controllers")))
                    && (Some(&d) != own.as_ref() || all(read(&d.join("cgroup.subtree_control"))));
                if usable
                    && writable(&d)
                    && writable(&d.join("cgroup.procs"))
                    && writable(&d.join("cgroup.subtree_control"))
                {
                    return Mechanism::Delegated {
                        v2: true,
                        dirs: vec![(String::new(), d)],
                    };
                }
                dir = d.parent().map(Path::to_path_buf);
            }
            return Mechanism::Unavailable {
                why: "cgroup v2 without a delegated cgroup or a reachable systemd user manager".into(),
                fix: format!(
                    "log in through a session with a systemd user manager (`loginctl enable-linger {user}`; check `systemctl --user status`), or as root create a cgroup with +memory +pids +cpu in its parent's cgroup.subtree_control, chown -R {user} it, and start lazaret from a shell moved into it"
                ),
            };
        }
    }
    Mechanism::Unavailable {
        why: "no cgroup hierarchy with the memory, pids and cpu controllers".into(),
        fix:
            "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or mount the v1 memory, pids and cpu controllers"
                .into(),
    }
}

/// A systemd user manager we could ask for a scope: `systemd-run` exists
/// and the manager's private socket or the user bus is there.
fn systemd_user_manager() -> bool {
    let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR") else {
        return false;
    };
    let rt = PathBuf::from(rt);
    let sock = rt.join("systemd/private").exists() || rt.join("bus").exists();
    let bin = ["/usr/bin/systemd-run", "/bin/systemd-run"]
        .iter()
        .any(|p| Path::new(p).exists());
    sock && bin
}

// ---- the per-generation cgroup (thin syscall layer) -----------------------

/// What goes into each cgroup file, as (file, value) in write order.
pub fn v1_settings(ctl: &str, e: &Effective) -> Vec<(&'static str, String)> {
    match ctl {
        "memory" => vec![
            ("memory.limit_in_bytes", e.memory.to_string()),
            // Swap counts too, where the kernel accounts it.
            ("memory.memsw.limit_in_bytes", e.memory.to_string()),
        ],
        "pids" => vec![("pids.max", e.pids.to_string())],
        "cpu" => match e.cpu_millis {
            Some(m) => vec![
                ("cpu.cfs_period_us", "100000".into()),
                ("cpu.cfs_quota_us", (m * 100).to_string()),
            ],
            None => vec![],
        },
        _ => vec![],
    }
}

pub fn v2_settings(e: &Effective) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("memory.max", e.memory.to_string()),
        ("memory.swap.max", "0".into()),
        ("pids.max", e.pids.to_string()),
    ];
    if let Some(m) = e.cpu_millis {
        v.push(("cpu.max", format!("{} 100000", m * 100)));
    }
    v
}

/// `systemd-run` arguments placing a command in a transient scope.
pub fn systemd_run_args(unit: &str, e: &Effective) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--user".into(),
        "--scope".into(),
        "--quiet".into(),
        "--collect".into(),
        format!("--unit={unit}"),
        "-p".into(),
        format!("MemoryMax={}", e.memory),
        "-p".into(),
        "MemorySwapMax=0".into(),
        "-p".into(),
        format!("TasksMax={}", e.pids),
    ];
    if let Some(m) = e.cpu_millis {
        v.push("-p".into());
        v.push(format!("CPUQuota={}%", m.div_ceil(10)));
    }
    v.push("--".into());
    v
}

/// The generation's cgroup: directories created, and the `cgroup.procs`
/// files opened for the supervisor to join between fork and exec.
pub struct DomainCgroup {
    pub v2: bool,
    pub dirs: Vec<(String, PathBuf)>,
    procs: Vec<OwnedFd>,
    pub systemd_unit: Option<String>,
}

impl DomainCgroup {
    /// Creates `NAME` under each delegated directory and writes the limits,
    /// or plans the systemd scope. Removes what it made on error.
    pub fn create(mech: &Mechanism, name: &str, e: &Effective) -> Result<DomainCgroup, CgroupError> {
        match mech {
            Mechanism::Unavailable { why, fix } => Err(CgroupError::Unavailable(why.to_string(), fix.to_string())),
            Mechanism::SystemdScope => Ok(DomainCgroup {
                v2: true,
                dirs: Vec::new(),
                procs: Vec::new(),
                systemd_unit: Some(format!("lazaret-{name}")),
            }),
            Mechanism::Delegated { v2, dirs } => {
                let mut cg = DomainCgroup {
                    v2: *v2,
                    dirs: Vec::new(),
                    procs: Vec::new(),
                    systemd_unit: None,
                };
                if let Err(err) = cg.make(*v2, dirs, name, e) {
                    cg.remove();
                    return Err(err);
                }
                Ok(cg)
            }
        }
    }

    fn make(&mut self, v2: bool, parents: &[(String, PathBuf)], name: &str, e: &Effective) -> Result<(), CgroupError> {
        for (ctl, parent) in parents {
            if v2 {
                enable_controllers(parent)?;
            }
            let dir = parent.join(name);
            std::fs::create_dir(&dir).map_err(|err| CgroupError::CreateDir(dir.clone(), err))?;
            self.dirs.push((ctl.clone(), dir.clone()));
            let settings = if v2 { v2_settings(e) } else { v1_settings(ctl, e) };
            for (file, value) in settings {
                let p = dir.join(file);
                match std::fs::write(&p, &value) {
                    Ok(()) => {}
                    // Swap accounting is optional in the kernel.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound && file.contains("sw") => {}
                    Err(err) => return Err(CgroupError::WriteLimit(value.to_string(), p, err)),
                }
            }
            let procs = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags_cloexec()
                .open(dir.join("cgroup.procs"))
                .map_err(|err| CgroupError::OpenProcs(dir.join("cgroup.procs"), err))?;
            self.procs.push(procs.into());
        }
        Ok(())
    }

    /// Closes the `cgroup.procs` files once the supervisor has joined;
    /// the directories stay for the counters and teardown.
    pub fn close_procs(&mut self) {
        self.procs.clear();
    }

    /// Raw fds of the `cgroup.procs` files, written after fork
    /// (`sys::ChildSetup::write_each`).
    pub fn procs_fds(&self) -> Vec<i32> {
        self.procs.iter().map(|f| f.as_raw_fd()).collect()
    }

    /// The memory directory (v1 memory hierarchy, or the v2 directory).
    pub fn memory_dir(&self) -> Option<&Path> {
        self.dirs
            .iter()
            .find(|(c, _)| c == "memory" || c.is_empty())
            .map(|(_, d)| d.as_path())
    }

    /// Number of OOM kills in the cgroup so far.
    pub fn oom_kills(&self) -> u64 {
        match self.memory_dir() {
            Some(d) => oom_kills_in(d, self.v2),
            None => 0,
        }
    }

    /// How often a fork failed at the pids limit (`pids.events` max).
    pub fn pids_max_events(&self) -> u64 {
        let dir = self
            .dirs
            .iter()
            .find(|(c, _)| c == "pids" || c.is_empty())
            .map(|(_, d)| d);
        dir.and_then(|d| std::fs::read_to_string(d.join("pids.events")).ok())
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("max ").and_then(|v| v.trim().parse().ok()))
            })
            .unwrap_or(0)
    }

    /// Removes the directories (they must be empty of processes).
    pub fn remove(&mut self) {
        self.procs.clear();
        for (_, d) in self.dirs.drain(..).rev() {
            // A killed sandbox's processes may take a moment to leave.
            for _ in 0..50 {
                match std::fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
        }
    }
}

/// The OOM kill counter of a memory cgroup directory (v1 `memory.oom_control`,
/// v2 `memory.events`).
pub fn oom_kills_in(dir: &Path, v2: bool) -> u64 {
    let file = if v2 { "memory.events" } else { "memory.oom_control" };
    std::fs::read_to_string(dir.join(file))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("oom_kill ").and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

/// v2: make memory, pids and cpu available to children of `dir`.
fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
    let p = dir.join("cgroup.subtree_control");
    let have = std::fs::read_to_string(&p).unwrap_or_default();
    let missing: Vec<String> = V2_REQUIRED
        .iter()
        .filter(|c| !have.split_whitespace().any(|h| h == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    std::fs::write(&p, missing.join(" ")).map_err(|e| CgroupError::EnableControllers(missing.join(" "), p.clone(), e))
}

trait CloexecExt {
    fn custom_flags_cloexec(&mut self) -> &mut Self;
}

impl CloexecExt for std::fs::OpenOptions {
    fn custom_flags_cloexec(&mut self) -> &mut Self {
        std::os::unix::fs::OpenOptionsExt::custom_flags(self, crate::sys::O_CLOEXEC)
    }
}

/// Leftover generation cgroups named `name` under the mechanism's
/// directories (recovery after a crash): removes the empty ones.
pub fn remove_leftover(mech: &Mechanism, name: &str) {
    if let Mechanism::Delegated { dirs, .. } = mech {
        for (_, d) in dirs {
            let _ = std::fs::remove_dir(d.join(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CG: &str = "9:name=systemd:/\n8:pids:/u\n4:memory:/pa/x/u\n2:cpuacct:/u\n1:cpu:/u\n0::/\n";
    const V1_MI: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_delegation_is_found_from_proc_self_cgroup() {
        let m = detect_from(
            &parse_proc_cgroup(V1_CG),
            &parse_mountinfo(V1_MI),
            &|_| true,
            &|_| None,
            false,
        );
        assert_eq!(
            m,
            Mechanism::Delegated {
                v2: false,
                dirs: vec![
                    ("memory".into(), "/sys/fs/cgroup/memory/pa/x/u".into()),
                    ("pids".into(), "/sys/fs/cgroup/pids/u".into()),
                    ("cpu".into(), "/sys/fs/cgroup/cpu/u".into()),
                    ("cpuacct".into(), "/sys/fs/cgroup/cpuacct/u".into()),
                ]
            }
        );
        // One hierarchy not writable: nothing, with a fix naming the dirs.
        let m = detect_from(
            &parse_proc_cgroup(V1_CG),
            &parse_mountinfo(V1_MI),
            &|p| !p.starts_with("/sys/fs/cgroup/pids"),
            &|_| None,
            true,
        );
        match m {
            Mechanism::Unavailable { fix, .. } => assert!(fix.contains("/sys/fs/cgroup/pids/u/lazaret-"), "{fix}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn v2_walks_up_to_a_writable_ancestor_else_systemd() {
        let cg = "0::/user.slice/user@1000.service/app.slice/t.scope\n";
        let mi = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let read = |p: &Path| {
            (!p.ends_with("t.scope/cgroup.subtree_control")).then(|| "cpuset cpu io memory pids".to_string())
        };
        let m = detect_from(
            &parse_proc_cgroup(cg),
            &parse_mountinfo(mi),
            &|p| p.starts_with("/sys/fs/cgroup/user.slice/user@1000.service/app.slice"),
            &read,
            false,
        );
        assert_eq!(
            m,
            Mechanism::Delegated {
                v2: true,
                dirs: vec![(
                    String::new(),
                    "/sys/fs/cgroup/user.slice/user@1000.service/app.slice".into()
                )]
            }
        );
        let m = detect_from(&parse_proc_cgroup(cg), &parse_mountinfo(mi), &|_| false, &read, true);
        assert_eq!(m, Mechanism::SystemdScope);
        let m = detect_from(&parse_proc_cgroup(cg), &parse_mountinfo(mi), &|_| false, &read, false);
        assert!(!m.available());
    }

    #[test]
    fn settings_and_overrides() {
        let e = Effective::new(
            &Limits {
                memory: Some(256 << 20),
                pids: Some(200),
                cpu_millis: Some(500),
                disk: None,
                image_layer: None,
            },
            8 << 30,
        );
        assert!(e.explicit);
        assert_eq!(v1_settings("cpu", &e)[1], ("cpu.cfs_quota_us", "50000".into()));
        assert_eq!(v2_settings(&e)[3], ("cpu.max", "50000 100000".into()));
        assert!(systemd_run_args("u", &e).contains(&"CPUQuota=50%".to_string()));
        let d = Effective::new(&Limits::default(), 8 << 30);
        assert_eq!(
            (d.memory, d.pids, d.cpu_millis, d.explicit),
            (4 << 30, 8192, None, false)
        );
        assert!(v1_settings("cpu", &d).is_empty());
        let o = Limits {
            memory: Some(1048576000),
            cpu_millis: Some(250),
            ..Limits::default()
        };
        let base = Limits {
            pids: Some(64),
            cpu_millis: Some(1000),
            ..Limits::default()
        };
        let l = apply_overrides(base, &o);
        assert_eq!(
            (l.memory, l.cpu_millis, l.pids),
            (Some(1048576000), Some(250), Some(64))
        );
        let argv = override_args(&o);
        assert_eq!(argv, ["--memory-bytes", "1048576000", "--cpu-millis", "250"]);
        let mut a = pico_args::Arguments::from_vec(argv.iter().map(Into::into).collect());
        assert_eq!(coordinator_overrides(&mut a).unwrap(), o);
        let mut a = pico_args::Arguments::from_vec(vec!["--pids".into(), "2e3".into()]);
        assert!(coordinator_overrides(&mut a).is_err());
    }
}

// ---- disk: persisted state has a cap, checked at start -------------------

/// Bytes on disk (allocated blocks) under `p`, without following symlinks.
/// Directories this user cannot read (owned by another subordinate id) are
/// not counted: an estimate from below.
pub fn disk_use(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            if let Ok(md) = e.path().symlink_metadata() {
                total += md.blocks() * 512;
                if md.is_dir() {
                    stack.push(e.path());
                }
            }
        }
    }
    total
}

/// The persisted state of a Domain: State Anchor uppers and ignored state.
pub fn persisted_use(domain_root: &Path) -> u64 {
    disk_use(&domain_root.join(crate::storage::anchor::ANCHOR_DIR)) + disk_use(&domain_root.join("ignored"))
}

/// Under a disk cap, the root filesystem's non-persisted writes outside
/// `/tmp`, the persisted paths and the workspace (`/srv`, `/run`, a new
/// top-level directory) go to runsc's overlay filestore on a tmpfs of
/// this size: the cap, but at most a quarter of the memory limit (whose
/// cgroup the tmpfs is charged to), and at least 16 MiB.
pub fn scratch_size(cap: u64, memory: u64) -> u64 {
    cap.min(memory / 4).max(16 << 20)
}

/// What a start does about the `disk` cap: refuse at or over it, warn
/// from 90 %.
#[derive(Debug, PartialEq, Eq)]
pub enum DiskVerdict {
    Ok,
    Warn(String),
    Refuse(String),
}

pub fn disk_verdict(used: u64, cap: Option<u64>, profile: &str) -> DiskVerdict {
    let Some(cap) = cap else { return DiskVerdict::Ok };
    let (u, c) = (format_size(used), format_size(cap));
    if used >= cap {
        DiskVerdict::Refuse(format!(
            "the Domain's persisted state uses {u}, at or over profile {profile:?}'s disk cap of {c}: \
             free space with `lazaret state reset` (or remove files inside), or raise [profiles.{profile}.limits] disk"
        ))
    } else if used.saturating_mul(10) >= cap.saturating_mul(9) {
        DiskVerdict::Warn(format!(
            "the Domain's persisted state uses {u} of its {c} disk cap; at the cap the next start is refused"
        ))
    } else {
        DiskVerdict::Ok
    }
}

#[cfg(test)]
mod disk_tests {
    use super::*;

    #[test]
    fn the_root_overlay_store_is_bounded_by_the_cap_and_the_memory_limit() {
        assert_eq!(scratch_size(64 << 20, 4 << 30), 64 << 20);
        assert_eq!(scratch_size(20 << 30, 4 << 30), 1 << 30);
        assert_eq!(scratch_size(1 << 20, 4 << 30), 16 << 20);
    }

    #[test]
    fn disk_cap_warns_at_ninety_percent_and_refuses_at_the_cap() {
        assert_eq!(disk_verdict(10, None, "p"), DiskVerdict::Ok);
        assert_eq!(disk_verdict(89, Some(100), "p"), DiskVerdict::Ok);
        assert!(matches!(disk_verdict(90, Some(100), "p"), DiskVerdict::Warn(_)));
        assert!(matches!(disk_verdict(100, Some(100), "p"), DiskVerdict::Refuse(m) if m.contains("state reset")));
    }

    #[test]
    fn meminfo_view_caps_total_free_and_available() {
        let host = "MemTotal:       24683652 kB\nMemFree:        20000000 kB\nMemAvailable:     100000 kB\nBuffers:            1234 kB\n";
        let v = meminfo_view(host, 256 << 20).unwrap();
        assert!(v.starts_with("MemTotal:         262144 kB\n"), "{v}");
        assert!(v.contains("MemFree:          262144 kB\n"), "{v}");
        assert!(v.contains("MemAvailable:     100000 kB\n"), "{v}");
        assert!(v.contains("Buffers:            1234 kB\n"), "{v}");
        // A limit above the host's RAM changes nothing but the spacing.
        assert!(meminfo_view(host, 64 << 30)
            .unwrap()
            .starts_with("MemTotal:       24683652 kB"));
        assert_eq!(meminfo_view("Buffers: 1 kB\n", 1 << 30), None);
        assert_eq!(meminfo_view("MemTotal: lots\n", 1 << 30), None);
    }

    #[test]
    fn guest_tasks_leave_the_host_limit_a_margin() {
        assert_eq!(guest_tasks(200), 40);
        assert_eq!(guest_tasks(8192), 2704);
        assert_eq!(guest_tasks(10), 16);
        for p in [200u64, 500, 4096, 8192, 100_000] {
            assert!(HOST_TASK_RESERVE + HOST_TASKS_PER_GUEST_TASK * guest_tasks(p) <= p);
        }
    }
}
