//! `lazaret doctor`: checks that this host can run rootless gVisor sandboxes
//! and prints the exact command that fixes each problem it finds.
//!
//! Every check is independent; pure parts (version parsing, subordinate id
//! files, passwd/group lookups, JSON output) are separate functions with unit
//! tests. See docs/doctor.md.

use std::env;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Oldest runsc release Lazaret supports.
pub const MIN_RUNSC_DATE: u32 = 20240729;
/// Size of the subordinate id range Lazaret maps (1..=65536 inside).
const SUBID_COUNT: u64 = 65536;
/// Lowest start suggested for a new subordinate range (shadow-utils' default).
const SUBID_FLOOR: u64 = 100000;
/// Highest id shadow-utils accepts (`(uid_t)-1` is reserved).
const SUBID_MAX: u64 = 4_294_967_294;
/// Where a helper that is not on the `PATH` may be, to name it in the fix.
const FALLBACK_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The result of one check.
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }

    /// Passes, but prints its fix: a hardening the user should apply.
    fn warning(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub(crate) fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name,
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Runs every check and prints the report; returns the process exit code
/// (0 when every check passed, 1 otherwise).
pub fn run(json: bool) -> i32 {
    let checks = checks();
    if json {
        println!("{}", to_json(&checks));
    } else {
        print!("{}", to_text(&checks));
    }
    if checks.iter().all(|c| c.ok) {
        crate::exit::Exit::Success.code()
    } else {
        crate::exit::Exit::Problem.code()
    }
}

/// Runs every check, in report order.
pub fn checks() -> Vec<Check> {
    let target = Target::detect();
    let subuid = read_optional("/etc/subuid");
    let subgid = read_optional("/etc/subgid");
    let mut all_ranges = parse_subids(subuid.as_deref().unwrap_or(""));
    all_ranges.extend(parse_subids(subgid.as_deref().unwrap_or("")));
    let free = free_subid_start(&all_ranges);

    let mut out = vec![
        check_not_root(&target),
        check_subid(
            "subuid",
            "/etc/subuid",
            subuid.as_deref(),
            "--add-subuids",
            &target,
            free,
        ),
        check_subid(
            "subgid",
            "/etc/subgid",
            subgid.as_deref(),
            "--add-subgids",
            &target,
            free,
        ),
        check_idmap("newuidmap"),
        check_idmap("newgidmap"),
        check_userns(&target),
        check_device("dev-net-tun", "/dev/net/tun", (10, 200), &target),
        check_device("dev-fuse", "/dev/fuse", (10, 229), &target),
        check_runsc(),
    ];
    for h in crate::sys::hostenv::HELPERS {
        out.push(check_tool(h.prog, h.package, h.used_by));
    }
    out.push(check_xdg_runtime_dir(&target));
    out.push(check_config());
    out.push(crate::client::secrets::doctor_check());
    out.push(check_egress_by_name());
    out.push(check_egress_log_mode());
    out.push(check_resource_limits());
    out.push(check_git_bare_repository(std::process::Command::new("git")));
    if let Ok(cwd) = std::env::current_dir() {
        out.push(check_git_surface(&cwd));
    }
    out
}

/// Git's execution surface of the current directory as a workspace
/// (`view::hostexec`): the hook managers found and what the view keeps
/// read-only for host Git.
fn check_git_surface(dir: &std::path::Path) -> Check {
    if !matches!(
        crate::view::sentry::discover(dir),
        Ok(crate::view::sentry::GitLayout::Dir { .. } | crate::view::sentry::GitLayout::Linked { .. })
    ) {
        return Check::pass("git-execution-surface", "the current directory is not a Git workspace");
    }
    let (paths, managers) = crate::view::hostexec::describe(dir);
    let mut detail = String::new();
    for m in &managers {
        let list: Vec<String> = m.protects.iter().map(|p| crate::display::escape_path(p)).collect();
        detail.push_str(&format!(
            "hook manager {} found: read-only inside: {}; ",
            m.name,
            list.join(", ")
        ));
    }
    let shown: Vec<String> = paths
        .iter()
        .filter(|p| !p.starts_with(".git"))
        .take(12)
        .map(|p| crate::display::escape_path(p))
        .collect();
    if shown.is_empty() {
        detail.push_str("host Git runs nothing from the workspace outside .git");
    } else {
        detail.push_str(&format!("read-only inside for host Git: {}", shown.join(", ")));
    }
    Check::pass("git-execution-surface", detail)
}

/// Allow-by-name mode (`network.hosts`) needs the router namespace's
/// policy rules and a `local 0.0.0.0/0` route in its local table (docs/
/// network.md, "Egress by name"): tried in a throwaway user and network
/// namespace (`unshare -Urn`), no packet sent. Which profiles use it.
fn check_egress_by_name() -> Check {
    let users: Vec<String> = crate::config::load(&crate::config::config_path())
        .map(|cfg| {
            cfg.profiles
                .values()
                .filter(|p| p.network && (!p.hosts.is_empty() || !cfg.hosts.is_empty() || p.egress_log))
                .map(|p| p.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let ip = crate::net::install::tool("ip");
    let script = format!(
        "{ip} rule add pref 20 lookup local suppress_prefixlength 0 && {ip} rule del pref 0 && \
         {ip} route add local 0.0.0.0/0 dev lo table local",
        ip = ip.display()
    );
    let tried = std::process::Command::new(crate::net::install::tool("unshare"))
        .args(["-Urn", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    let used = if users.is_empty() {
        "no profile uses it".to_string()
    } else {
        format!("used by profiles {}", users.join(", "))
    };
    match tried {
        Ok(o) if o.status.success() => Check::pass(
            "egress-by-name",
            format!("policy rules and a local default route work in a user-owned network namespace ({used})"),
        ),
        Ok(o) => {
            let detail = format!(
                "allow-by-name mode (network.hosts) cannot install its router rules: {} ({used})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            if users.is_empty() {
                Check::warning(
                    "egress-by-name",
                    detail,
                    "install iproute2 with policy routing (ip rule)",
                )
            } else {
                Check::fail(
                    "egress-by-name",
                    detail,
                    "install iproute2 with policy routing (ip rule)",
                )
            }
        }
        Err(e) => Check::warning(
            "egress-by-name",
            format!("cannot try allow-by-name mode's router rules (unshare: {e}) ({used})"),
            "install util-linux (unshare) to check",
        ),
    }
}

/// `network.mode = "log"` needs `nft` and the kernel's `tproxy` for its
/// catch-all (docs/network.md, "Egress by name"): the rule is installed
/// in a throwaway user and network namespace (`unshare -Urn`, `nft -f -`),
/// no packet sent. Which profiles use log mode.
fn check_egress_log_mode() -> Check {
    let users: Vec<String> = crate::config::load(&crate::config::config_path())
        .map(|cfg| {
            cfg.profiles
                .values()
                .filter(|p| p.network && p.egress_log)
                .map(|p| p.name.clone())
                .collect()
        })
        .unwrap_or_default();
    let used = if users.is_empty() {
        "no profile uses it".to_string()
    } else {
        format!("used by profiles {}", users.join(", "))
    };
    let sample = crate::net::policy::GatePlan {
        log_only: true,
        hosts: vec![],
        upstream: vec![],
        forwarded: vec![],
    };
    // The rule names the router's links: a veth pair stands in for them.
    let script = format!(
        "{ip} link add {tap} type veth peer name {rif} && {nft} -f -",
        ip = crate::net::install::tool("ip").display(),
        nft = crate::net::install::tool("nft").display(),
        tap = crate::net::policy::TAP,
        rif = crate::net::policy::ROUTER_IF,
    );
    let tried = std::process::Command::new(crate::net::install::tool("unshare"))
        .args(["-Urn", "sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            let rules = crate::net::install::catch_all_rules(&sample, 1);
            let _ = c.stdin.take().map(|mut i| i.write_all(rules.as_bytes()));
            c.wait_with_output()
        });
    let fix = "install nftables (scripts/install-deps.sh) on a kernel with nft_tproxy";
    match tried {
        Ok(o) if o.status.success() => Check::pass(
            "egress-log-mode",
            format!("nft can install log mode's catch-all (tproxy) in a user-owned network namespace ({used})"),
        ),
        Ok(o) => {
            let detail = format!(
                "network.mode = \"log\" cannot install its catch-all rule, so a Domain in log mode will not start: {} ({used})",
                String::from_utf8_lossy(&o.stderr).trim().replace('\n', "; ")
            );
            if users.is_empty() {
                Check::warning("egress-log-mode", detail, fix)
            } else {
                Check::fail("egress-log-mode", detail, fix)
            }
        }
        Err(e) => {
            let detail = format!(
                "network.mode = \"log\" needs nft, which cannot be run, so a Domain in log mode will not start ({e}) ({used})"
            );
            if users.is_empty() {
                Check::warning("egress-log-mode", detail, fix)
            } else {
                Check::fail("egress-log-mode", detail, fix)
            }
        }
    }
}

/// The config file parses and every profile in it is valid.
fn check_config() -> Check {
    let path = crate::config::config_path();
    match crate::config::load(&path) {
        Err(e) => Check::fail("config", e.to_string(), format!("correct {}", path.display())),
        Ok(cfg) => match cfg.broken_profiles.values().next() {
            Some(e) => Check::fail(
                "config",
                e.to_string(),
                format!("correct {} (only that profile is unusable until then)", path.display()),
            ),
            None if cfg.exists => Check::pass("config", format!("{} is valid", path.display())),
            None => Check::pass("config", format!("no {} (built-in defaults)", path.display())),
        },
    }
}

/// Which cgroup mechanism would bound a Domain started from here
/// (`cgroup::detect`), or why none and the exact fix (a warning: Domains
/// run without limits).
fn check_resource_limits() -> Check {
    let m = crate::storage::cgroup::detect();
    match &m {
        // Sandboxes still run (unbounded, with a warning): a warning, not
        // a failure; only profiles that set [limits] are refused.
        crate::storage::cgroup::Mechanism::Unavailable { why, fix } => Check::warning(
            "resource-limits",
            format!("no mechanism to enforce memory/pids/cpus limits: {why}; profiles that set [limits] are refused"),
            fix.clone(),
        ),
        _ => Check::pass("resource-limits", m.describe()),
    }
}

/// Host Git should not take a bare repository found by discovery as one
/// (`safe.bareRepository = explicit`): a second line of defence behind the
/// workspace view's shape rule (docs/git.md).
fn check_git_bare_repository(mut git: std::process::Command) -> Check {
    let out = git
        .args(["config", "--get", "safe.bareRepository"])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    let value = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Err(_) => return Check::pass("git-safe-bare-repository", "no host git"),
    };
    git_bare_repository_check(&value)
}

fn git_bare_repository_check(value: &str) -> Check {
    if value.eq_ignore_ascii_case("explicit") {
        Check::pass("git-safe-bare-repository", "safe.bareRepository = explicit")
    } else {
        Check::warning(
            "git-safe-bare-repository",
            format!(
                "host git takes a bare repository it finds as one (safe.bareRepository is {})",
                if value.is_empty() { "unset" } else { "not `explicit`" }
            ),
            "git config --global safe.bareRepository explicit",
        )
    }
}

// ---------------------------------------------------------------------------
// The user the checks are for.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// An unprivileged user runs doctor for themselves.
    User,
    /// Root via sudo: checks are for `$SUDO_USER`.
    Sudo,
    /// Root with no `$SUDO_USER`: checks are for root itself.
    Root,
}

struct Target {
    mode: Mode,
    uid: u32,
    gid: u32,
    name: Option<String>,
    /// Supplementary groups from /etc/group (plus the primary gid).
    groups: Vec<u32>,
}

impl Target {
    fn detect() -> Target {
        let uid = rustix::process::getuid().as_raw();
        let passwd = read_optional("/etc/passwd").unwrap_or_default();
        let group = read_optional("/etc/group").unwrap_or_default();
        if uid == 0 {
            let sudo_user = env::var("SUDO_USER").ok().filter(|s| !s.is_empty() && s != "root");
            if let Some(name) = sudo_user {
                let env_id = |k: &str| env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
                let ids = passwd_by_name(&passwd, &name).or_else(|| Some((env_id("SUDO_UID")?, env_id("SUDO_GID")?)));
                if let Some((uid, gid)) = ids.filter(|&(u, _)| u != 0) {
                    let groups = groups_of(&group, &name, gid);
                    return Target {
                        mode: Mode::Sudo,
                        uid,
                        gid,
                        name: Some(name),
                        groups,
                    };
                }
            }
            let groups = groups_of(&group, "root", 0);
            return Target {
                mode: Mode::Root,
                uid: 0,
                gid: 0,
                name: Some("root".into()),
                groups,
            };
        }
        let gid = rustix::process::getgid().as_raw();
        let name = passwd_by_uid(&passwd, uid)
            .map(|(n, _)| n)
            .or_else(|| env::var("USER").ok().filter(|s| !s.is_empty()));
        let groups = match &name {
            Some(n) => groups_of(&group, n, gid),
            None => vec![gid],
        };
        Target {
            mode: Mode::User,
            uid,
            gid,
            name,
            groups,
        }
    }

    /// How reports name the user: `alice (uid 1000)`.
    fn display(&self) -> String {
        match &self.name {
            Some(n) => format!("{n} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }

    /// The user argument for commands such as `usermod`.
    fn arg(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => "\"$(id -un)\"".into(),
        }
    }
}

fn read_optional(path: &str) -> Option<String> {
    fs::read_to_string(path).ok()
}

use crate::sys::hostenv::{passwd_by_name, passwd_by_uid};

/// The primary gid plus every gid in /etc/group that lists `name` as a
/// member, sorted and deduplicated.
fn groups_of(group: &str, name: &str, primary: u32) -> Vec<u32> {
    let mut out = vec![primary];
    for line in group.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 4 {
            continue;
        }
        if let Ok(gid) = f[2].parse::<u32>() {
            if f[3].split(',').any(|m| m.trim() == name) {
                out.push(gid);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

// ---------------------------------------------------------------------------
// not-root

fn check_not_root(t: &Target) -> Check {
    match t.mode {
        Mode::User => Check::pass("not-root", format!("running as {}", t.display())),
        Mode::Sudo => Check::pass(
            "not-root",
            format!(
                "running as root via sudo; lazaret itself refuses to run as root, so the \
                 checks below are for {}",
                t.display()
            ),
        ),
        Mode::Root => Check::fail(
            "not-root",
            "running as root and $SUDO_USER is not set; lazaret itself refuses to run as root, \
             so the checks below are for root",
            "run as your normal user",
        ),
    }
}

// ---------------------------------------------------------------------------
// subuid / subgid

use crate::sys::hostenv::{parse_subids, subid_owner_matches, SubidRange};

/// The user's largest single range.
fn best_subid_range<'a>(ranges: &'a [SubidRange], name: Option<&str>, uid: u32) -> Option<&'a SubidRange> {
    ranges
        .iter()
        .filter(|r| subid_owner_matches(&r.owner, name, uid))
        .max_by_key(|r| r.count)
}

/// First id after every existing range, and at least [`SUBID_FLOOR`].
fn free_subid_start(ranges: &[SubidRange]) -> u64 {
    ranges
        .iter()
        .map(|r| r.start.saturating_add(r.count))
        .fold(SUBID_FLOOR, u64::max)
}

/// `start-end` (inclusive) for a new range of [`SUBID_COUNT`] ids, or `None`
/// when it would not fit below the highest valid id.
fn subid_range_arg(start: u64) -> Option<String> {
    let end = start.checked_add(SUBID_COUNT - 1)?;
    (end <= SUBID_MAX).then(|| format!("{start}-{end}"))
}

fn check_subid(name: &'static str, path: &str, contents: Option<&str>, flag: &str, t: &Target, free: u64) -> Check {
    let fix = match subid_range_arg(free) {
        Some(range) => format!("sudo usermod {flag} {range} {}", t.arg()),
        None => format!("edit {path} by hand: no free range of {SUBID_COUNT} ids is left"),
    };
    let Some(contents) = contents else {
        return Check::fail(name, format!("{path} does not exist or is unreadable"), fix);
    };
    // The name the runtime matches by: the passwd entry of the uid.
    let owner = crate::sys::hostenv::user_name(t.uid);
    let ranges = parse_subids(contents);
    let used = crate::sys::hostenv::find_subrange(contents, owner.as_deref(), t.uid);
    let used = used.and_then(|u| ranges.iter().find(|r| (r.start, r.count) == (u.start, u.count)));
    match used.or_else(|| best_subid_range(&ranges, owner.as_deref(), t.uid)) {
        Some(r) if r.count >= SUBID_COUNT => Check::pass(
            name,
            format!(
                "{} has {}-{} ({} ids) in {path}",
                t.display(),
                r.start,
                r.start + r.count - 1,
                r.count
            ),
        ),
        Some(r) => Check::fail(
            name,
            format!(
                "largest range for {} in {path} has {} ids, need at least {SUBID_COUNT}",
                t.display(),
                r.count
            ),
            fix,
        ),
        None => Check::fail(name, format!("no range for {} in {path}", t.display()), fix),
    }
}

// ---------------------------------------------------------------------------
// newuidmap / newgidmap

/// Finds an executable on the `PATH` Lazaret runs its helpers with (the
/// caller's plus the sbin directories, see `hostenv`). A program that is
/// only in one of [`FALLBACK_DIRS`] is not found: Lazaret would not find it
/// either.
fn find_program(prog: &str) -> Option<(PathBuf, bool)> {
    crate::sys::hostenv::find(prog).map(|p| (p, true))
}

/// Where `prog` is when it is not on the `PATH`, to say so in the fix.
fn find_off_path(prog: &str) -> Option<PathBuf> {
    FALLBACK_DIRS
        .iter()
        .map(|d| Path::new(d).join(prog))
        .find(|c| is_executable(c))
}

/// The fix for a helper that is not on the `PATH`.
fn missing_fix(prog: &str, pkg: &str) -> String {
    match find_off_path(prog) {
        Some(p) => format!(
            "{} is not on your PATH: add {} to PATH (export PATH=\"$PATH:{}\")",
            p.display(),
            p.parent().unwrap_or(Path::new("/")).display(),
            p.parent().unwrap_or(Path::new("/")).display()
        ),
        None => format!("sudo apt-get install {pkg}"),
    }
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p)
        .map(|m| m.is_file() && m.mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// `/usr/bin/x` or `/usr/sbin/x (not in $PATH)`.
fn describe_location(path: &Path, in_path: bool) -> String {
    if in_path {
        path.display().to_string()
    } else {
        format!("{} (not in $PATH)", path.display())
    }
}

fn has_file_caps(path: &Path) -> bool {
    rustix::fs::getxattr(path, "security.capability", &mut []).is_ok()
}

fn check_idmap(prog: &'static str) -> Check {
    let Some((path, in_path)) = find_program(prog) else {
        return Check::fail(
            prog,
            format!("{prog} not found on {}", path_text()),
            missing_fix(prog, "uidmap"),
        );
    };
    let loc = describe_location(&path, in_path);
    let meta = match fs::metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            return Check::fail(
                prog,
                format!("cannot stat {loc}: {}", err_text(&e)),
                "sudo apt-get install uidmap",
            )
        }
    };
    if meta.mode() & 0o4000 != 0 && meta.uid() == 0 {
        Check::pass(prog, format!("{loc} is setuid root"))
    } else if has_file_caps(&path) {
        Check::pass(prog, format!("{loc} has file capabilities"))
    } else {
        Check::fail(
            prog,
            format!(
                "{loc} is neither setuid root nor has file capabilities (mode {:04o}, owner {})",
                meta.mode() & 0o7777,
                meta.uid()
            ),
            "sudo apt-get install --reinstall uidmap",
        )
    }
}

// ---------------------------------------------------------------------------
// userns

fn read_sysctl(path: &str) -> Option<i64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn check_userns(t: &Target) -> Check {
    let mut problems: Vec<String> = Vec::new();
    let mut settings: Vec<&str> = Vec::new();

    match read_sysctl("/proc/sys/user/max_user_namespaces") {
        Some(n) if n > 0 => {}
        Some(n) => {
            problems.push(format!("user.max_user_namespaces is {n}"));
            settings.push("user.max_user_namespaces=15000");
        }
        None => problems.push("cannot read /proc/sys/user/max_user_namespaces".into()),
    }
    if let Some(v) = read_sysctl("/proc/sys/kernel/unprivileged_userns_clone") {
        if v != 1 {
            problems.push(format!("kernel.unprivileged_userns_clone is {v}"));
            settings.push("kernel.unprivileged_userns_clone=1");
        }
    }
    if let Some(v) = read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") {
        if v != 0 {
            problems.push(format!("kernel.apparmor_restrict_unprivileged_userns is {v}"));
            settings.push("kernel.apparmor_restrict_unprivileged_userns=0");
        }
    }

    let drop_to = (t.mode == Mode::Sudo).then_some((t.uid, t.gid));
    let probe = userns_probe(drop_to);
    match &probe {
        ProbeResult::Ok => {}
        ProbeResult::Failed { step, errno } => {
            problems.push(format!("{} failed: {}", probe_step_name(*step), errno_text(*errno)))
        }
        ProbeResult::Error(e) => problems.push(format!("probe could not run: {e}")),
    }

    if problems.is_empty() {
        let who = if t.mode == Mode::Root {
            "root"
        } else {
            "an unprivileged user"
        };
        return Check::pass("userns", format!("{who} can create user, mount and network namespaces"));
    }
    let fix = if !settings.is_empty() {
        sysctl_fix(&settings)
    } else {
        match probe {
            ProbeResult::Failed {
                errno: crate::sys::ENOSPC,
                ..
            } => "too many user namespaces: raise user.max_user_namespaces, or end stale sandboxes".into(),
            _ => "unprivileged user namespaces are blocked by the environment (e.g. a container's \
                  seccomp or lsm policy); run lazaret on a host or vm that allows them"
                .into(),
        }
    };
    Check::fail("userns", problems.join("; "), fix)
}

/// `sudo sysctl -w a=1 b=0 && printf 'a=1\nb=0\n' | sudo tee /etc/sysctl.d/60-lazaret.conf`
fn sysctl_fix(settings: &[&str]) -> String {
    let mut lines = String::new();
    for s in settings {
        lines.push_str(s);
        lines.push_str("\\n");
    }
    format!(
        "sudo sysctl -w {} && printf '{lines}' | sudo tee /etc/sysctl.d/60-lazaret.conf",
        settings.join(" ")
    )
}

#[derive(Debug)]
enum ProbeResult {
    Ok,
    Failed { step: u8, errno: i32 },
    Error(String),
}

const STEP_SETGROUPS: u8 = crate::sys::NS_STEP_SETGROUPS;
const STEP_SETGID: u8 = crate::sys::NS_STEP_SETGID;
const STEP_SETUID: u8 = crate::sys::NS_STEP_SETUID;
const STEP_USERNS: u8 = crate::sys::NS_STEP_USERNS;
const STEP_MNT_NET: u8 = crate::sys::NS_STEP_MNT_NET;

fn probe_step_name(step: u8) -> &'static str {
    match step {
        STEP_SETGROUPS => "setgroups() to drop to the user",
        STEP_SETGID => "setresgid() to the user",
        STEP_SETUID => "setresuid() to the user",
        STEP_USERNS => "unshare(CLONE_NEWUSER)",
        STEP_MNT_NET => "unshare(CLONE_NEWNS|CLONE_NEWNET) inside the new user namespace",
        _ => "probe",
    }
}

/// Forks a child that (optionally) drops to `drop_to = (uid, gid)`, then
/// creates a user namespace and, inside it, mount and network namespaces
/// (what the supervisor does). AppArmor's userns restriction lets the first
/// unshare succeed but denies the second, so both are tried.
fn userns_probe(drop_to: Option<(u32, u32)>) -> ProbeResult {
    match crate::sys::probe_namespaces(drop_to) {
        Ok(crate::sys::NsProbe::Ok) => ProbeResult::Ok,
        Ok(crate::sys::NsProbe::Failed { step, errno }) => ProbeResult::Failed { step, errno },
        Ok(crate::sys::NsProbe::Died(what)) => ProbeResult::Error(what),
        Err(e) => ProbeResult::Error(format!("pipe, fork or wait: {}", err_text(&e))),
    }
}

/// `EPERM (operation not permitted)`.
fn errno_text(errno: i32) -> String {
    let name = match errno {
        crate::sys::EPERM => "EPERM",
        crate::sys::EACCES => "EACCES",
        crate::sys::EINVAL => "EINVAL",
        crate::sys::ENOSPC => "ENOSPC",
        crate::sys::ENOMEM => "ENOMEM",
        crate::sys::ENOSYS => "ENOSYS",
        crate::sys::EUSERS => "EUSERS",
        _ => return err_text(&io::Error::from_raw_os_error(errno)),
    };
    format!("{name} ({})", err_text(&io::Error::from_raw_os_error(errno)))
}

/// An io::Error as a lowercase message without the `(os error N)` suffix.
fn err_text(e: &io::Error) -> String {
    let s = e.to_string();
    let s = match s.find(" (os error") {
        Some(i) => &s[..i],
        None => &s[..],
    };
    lowercase_first(s)
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

// ---------------------------------------------------------------------------
// dev-net-tun / dev-fuse

/// Whether a file with `mode`/`owner`/`group` grants read+write to a user
/// with `uid` and `groups`, using the kernel's rule: the owner class applies
/// if the user owns the file, else the group class if in the group, else
/// other. (Root is not special-cased: the caller decides.)
fn mode_allows_rw(mode: u32, owner: u32, group: u32, uid: u32, groups: &[u32]) -> bool {
    let bits = if owner == uid {
        (mode >> 6) & 0o7
    } else if groups.contains(&group) {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    bits & 0o6 == 0o6
}

fn check_device(name: &'static str, path: &str, (major, minor): (u32, u32), t: &Target) -> Check {
    let note = "stock udev distros ship it 0666; without udev redo this after each boot";
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            let parent = Path::new(path).parent().map(|p| p.display().to_string());
            let mkdir = match parent.as_deref() {
                Some("/dev") | None => String::new(),
                Some(p) => format!("sudo mkdir -p {p} && "),
            };
            return Check::fail(
                name,
                format!("{path}: {}", err_text(&e)),
                format!("{mkdir}sudo mknod -m 0666 {path} c {major} {minor}"),
            );
        }
    };
    if !meta.file_type().is_char_device() {
        return Check::fail(
            name,
            format!("{path} is not a character device"),
            format!("sudo rm -f {path} && sudo mknod -m 0666 {path} c {major} {minor}"),
        );
    }
    let mode = meta.mode() & 0o7777;
    let (ok, who) = match t.mode {
        Mode::User => (
            rustix::fs::access(path, rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK).is_ok(),
            t.display(),
        ),
        Mode::Sudo => (
            mode_allows_rw(mode, meta.uid(), meta.gid(), t.uid, &t.groups),
            t.display(),
        ),
        // Root can open anything; what matters is a normal user, so look at
        // the "other" bits.
        Mode::Root => (mode & 0o006 == 0o006, "other users".to_string()),
    };
    if ok {
        Check::pass(
            name,
            format!("{path} is readable and writable by {who} (mode {mode:04o})"),
        )
    } else {
        Check::fail(
            name,
            format!(
                "{path} is not readable and writable by {who} (mode {mode:04o}, owner {}:{})",
                meta.uid(),
                meta.gid()
            ),
            format!("sudo chmod 0666 {path}  # {note}"),
        )
    }
}

// ---------------------------------------------------------------------------
// runsc

/// The release date in `runsc --version` output: the first run of exactly
/// eight digits (`runsc version 0.0~20240729.0`, `release-20240729.0`).
fn parse_runsc_date(output: &str) -> Option<u32> {
    let line = output.lines().find(|l| l.contains("version"))?;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if i - start == 8 {
                return line[start..i].parse().ok();
            }
        } else {
            i += 1;
        }
    }
    None
}

/// `VERSION_CODENAME` from /etc/os-release contents.
fn os_release_codename(contents: &str) -> Option<String> {
    contents.lines().find_map(|l| {
        let v = l.trim().strip_prefix("VERSION_CODENAME=")?;
        let v = v.trim_matches(|c| c == '"' || c == '\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

fn runsc_fix(codename: Option<&str>) -> String {
    match codename {
        Some("bookworm") => "sudo apt-get install -t bookworm-backports runsc (with bookworm-backports \
                             enabled), or run scripts/install-deps.sh"
            .into(),
        Some(_) => "run scripts/install-deps.sh (or: sudo apt-get install runsc)".into(),
        None => format!("run scripts/install-deps.sh, or install runsc >= {MIN_RUNSC_DATE} from gvisor.dev"),
    }
}

fn check_runsc() -> Check {
    let codename = read_optional("/etc/os-release").and_then(|c| os_release_codename(&c));
    let fix = runsc_fix(codename.as_deref());
    let Some((path, in_path)) = find_program("runsc") else {
        let fix = if find_off_path("runsc").is_some() {
            missing_fix("runsc", "runsc")
        } else {
            fix
        };
        return Check::fail("runsc", format!("runsc not found on {}", path_text()), fix);
    };
    let loc = describe_location(&path, in_path);
    let out = match Command::new(&path).arg("--version").stdin(Stdio::null()).output() {
        Ok(o) => o,
        Err(e) => return Check::fail("runsc", format!("cannot run {loc} --version: {}", err_text(&e)), fix),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    match parse_runsc_date(&text) {
        Some(d) if d >= MIN_RUNSC_DATE => Check::pass(
            "runsc",
            format!("{loc} is release {d} (systrap platform; /dev/kvm is not used)"),
        ),
        Some(d) => Check::fail(
            "runsc",
            format!("{loc} is release {d}, need {MIN_RUNSC_DATE} or newer"),
            fix,
        ),
        None => {
            let first = text.lines().next().unwrap_or("").trim();
            Check::fail(
                "runsc",
                format!("cannot read a release date from `{loc} --version` (got {first:?})"),
                fix,
            )
        }
    }
}

// ---------------------------------------------------------------------------
// plain tools

fn check_tool(tool: &'static str, pkg: &str, used_by: &str) -> Check {
    match find_program(tool) {
        Some((path, in_path)) => Check::pass(tool, format!("found {}", describe_location(&path, in_path))),
        None => Check::fail(
            tool,
            format!("{tool} (needed for {used_by}) not found on {}", path_text()),
            missing_fix(tool, pkg),
        ),
    }
}

/// `PATH=...` as Lazaret uses it, for messages.
fn path_text() -> String {
    format!("PATH={}", env::var_os("PATH").unwrap_or_default().to_string_lossy())
}

// ---------------------------------------------------------------------------
// xdg-runtime-dir

/// What is wrong with a runtime directory.
#[derive(Debug, PartialEq, Eq)]
enum RuntimeDirProblem {
    NotDir,
    Owner(u32),
    Writable(u32),
}

impl RuntimeDirProblem {
    fn describe(&self, uid: u32) -> String {
        match self {
            RuntimeDirProblem::NotDir => "is not a directory".into(),
            RuntimeDirProblem::Owner(o) => format!("is owned by uid {o}, not {uid}"),
            RuntimeDirProblem::Writable(m) => format!("is group- or world-writable (mode {m:04o})"),
        }
    }
}

/// Checks a runtime directory's metadata (from lstat, so a symlink is not a
/// directory); `None` when it is fine.
fn runtime_dir_problem(is_dir: bool, owner: u32, mode: u32, uid: u32) -> Option<RuntimeDirProblem> {
    if !is_dir {
        Some(RuntimeDirProblem::NotDir)
    } else if owner != uid {
        Some(RuntimeDirProblem::Owner(owner))
    } else if mode & 0o022 != 0 {
        Some(RuntimeDirProblem::Writable(mode & 0o7777))
    } else {
        None
    }
}

fn check_xdg_runtime_dir(t: &Target) -> Check {
    const NAME: &str = "xdg-runtime-dir";
    if t.mode == Mode::Sudo {
        return Check::pass(
            NAME,
            format!(
                "not checked under sudo (the environment is root's); run `lazaret doctor` as {} \
                 to check it",
                t.arg()
            ),
        );
    }
    match env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let shown = PathBuf::from(dir).display().to_string();
            let not_mine = format!(
                "unset XDG_RUNTIME_DIR, or point it at a directory you own (mode 0700), \
                 e.g. /run/user/{}",
                t.uid
            );
            match fs::symlink_metadata(&shown) {
                Err(e) => Check::fail(
                    NAME,
                    format!("XDG_RUNTIME_DIR={shown}: {}", err_text(&e)),
                    format!("mkdir -m 0700 -p {shown}, or unset XDG_RUNTIME_DIR"),
                ),
                Ok(m) => match runtime_dir_problem(m.is_dir(), m.uid(), m.mode(), t.uid) {
                    None => Check::pass(
                        NAME,
                        format!(
                            "XDG_RUNTIME_DIR={shown} is owned by {} and not group- or world-writable",
                            t.display()
                        ),
                    ),
                    Some(p @ RuntimeDirProblem::Writable(_)) => Check::fail(
                        NAME,
                        format!("XDG_RUNTIME_DIR={shown} {}", p.describe(t.uid)),
                        format!("chmod go-w {shown}"),
                    ),
                    Some(p) => Check::fail(NAME, format!("XDG_RUNTIME_DIR={shown} {}", p.describe(t.uid)), not_mine),
                },
            }
        }
        None => {
            let fallback = format!("/tmp/lazaret-{}", t.uid);
            match fs::symlink_metadata(&fallback) {
                Ok(m) => match runtime_dir_problem(m.is_dir(), m.uid(), m.mode(), t.uid) {
                    None => Check::pass(NAME, format!("XDG_RUNTIME_DIR is unset; lazaret uses {fallback}")),
                    Some(p @ RuntimeDirProblem::Writable(_)) => Check::fail(
                        NAME,
                        format!(
                            "XDG_RUNTIME_DIR is unset and the fallback {fallback} {}",
                            p.describe(t.uid)
                        ),
                        format!("chmod 0700 {fallback}"),
                    ),
                    // Squatted (another user's, or not a directory):
                    // lazaret uses its private fallback instead.
                    Some(p) => match crate::storage::paths::private_runtime_root() {
                        Some(private) => Check::warning(
                            NAME,
                            format!(
                                "XDG_RUNTIME_DIR is unset and {fallback} {}{}: lazaret uses {} instead",
                                p.describe(t.uid),
                                crate::sys::hostenv::user_name(m.uid())
                                    .map(|n| format!(" ({})", crate::display::escape(&n)))
                                    .unwrap_or_default(),
                                private.display()
                            ),
                            format!(
                                "nothing needed; to use /tmp again: sudo rm -rf {fallback} (someone else \
                                 created it), or set XDG_RUNTIME_DIR to a directory you own"
                            ),
                        ),
                        None => Check::fail(
                            NAME,
                            format!(
                                "XDG_RUNTIME_DIR is unset and the fallback {fallback} {}",
                                p.describe(t.uid)
                            ),
                            format!(
                                "sudo rm -rf {fallback} (someone else created it), or set \
                                 XDG_RUNTIME_DIR to a directory you own"
                            ),
                        ),
                    },
                },
                Err(_) => Check::pass(
                    NAME,
                    format!("XDG_RUNTIME_DIR is unset; lazaret uses {fallback} (not created yet)"),
                ),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// output

/// The human report: `ok   name: detail` or `FAIL name: detail` plus an
/// indented `  fix: ...` line.
fn to_text(checks: &[Check]) -> String {
    let mut out = String::new();
    for c in checks {
        let tag = match (c.ok, c.fix.is_some()) {
            (true, false) => "ok  ",
            (true, true) => "warn",
            (false, _) => "FAIL",
        };
        out.push_str(&format!("{tag} {}: {}\n", c.name, c.detail));
        if !c.ok || c.fix.is_some() {
            if let Some(fix) = &c.fix {
                out.push_str(&format!("  fix: {fix}\n"));
            }
        }
    }
    out
}

/// A JSON string literal (with quotes) for `s`, by the one JSON writer.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::plan::quote(&mut out, s);
    out
}

/// `{"ok":bool,"checks":[{"name":..,"ok":..,"detail":..,"fix":..|null}]}`
fn to_json(checks: &[Check]) -> String {
    let all_ok = checks.iter().all(|c| c.ok);
    let items: Vec<String> = checks
        .iter()
        .map(|c| {
            let fix = match &c.fix {
                Some(f) => json_string(f),
                None => "null".to_string(),
            };
            format!(
                "{{\"name\":{},\"ok\":{},\"detail\":{},\"fix\":{}}}",
                json_string(c.name),
                c.ok,
                json_string(&c.detail),
                fix
            )
        })
        .collect();
    format!("{{\"ok\":{all_ok},\"checks\":[{}]}}", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_without_safe_bare_repository() {
        let w = git_bare_repository_check("");
        assert!(w.ok && w.fix.as_deref() == Some("git config --global safe.bareRepository explicit"));
        assert!(to_text(&[w]).starts_with("warn git-safe-bare-repository"));
        assert!(git_bare_repository_check("all").fix.is_some());
        assert!(git_bare_repository_check("explicit").fix.is_none());
    }

    #[test]
    fn runsc_date_debian_format() {
        assert_eq!(
            parse_runsc_date("runsc version 0.0~20240729.0\nspec: 1.0.2-dev\n"),
            Some(20240729)
        );
        assert_eq!(parse_runsc_date("runsc version 0.0~20221219.0\n"), Some(20221219));
    }

    #[test]
    fn runsc_date_release_format() {
        assert_eq!(
            parse_runsc_date("runsc version release-20240729.0\nspec: 1.1.0\n"),
            Some(20240729)
        );
        assert_eq!(parse_runsc_date("runsc version release-20250113.0"), Some(20250113));
    }

    #[test]
    fn runsc_date_rejects_non_dates() {
        assert_eq!(parse_runsc_date("runsc version google-123456"), None);
        assert_eq!(parse_runsc_date("runsc version 123456789"), None);
        assert_eq!(parse_runsc_date("spec: 20240729\n"), None);
        assert_eq!(parse_runsc_date(""), None);
    }

    #[test]
    fn runsc_version_comparison() {
        let ok = |s: &str| parse_runsc_date(s).is_some_and(|d| d >= MIN_RUNSC_DATE);
        assert!(ok("runsc version 0.0~20240729.0"));
        assert!(!ok("runsc version 0.0~20221219.0"));
        assert!(!ok("runsc version 0.0~20240728.0"));
    }

    #[test]
    fn subid_parsing_skips_junk() {
        let f = "# comment\n\nalice:100000:65536\nbroken\nbob:x:1\n1001:165536:65536\n  carol:231072:10  \n";
        assert_eq!(
            parse_subids(f),
            vec![
                SubidRange {
                    owner: "alice".into(),
                    start: 100000,
                    count: 65536
                },
                SubidRange {
                    owner: "1001".into(),
                    start: 165536,
                    count: 65536
                },
                SubidRange {
                    owner: "carol".into(),
                    start: 231072,
                    count: 10
                },
            ]
        );
    }

    #[test]
    fn subid_matching_by_name_or_uid() {
        let r = parse_subids("alice:100000:1000\n1000:200000:65536\nbob:300000:65536\n");
        let best = best_subid_range(&r, Some("alice"), 1000).unwrap();
        assert_eq!((best.start, best.count), (200000, 65536));
        let best = best_subid_range(&r, Some("alice"), 1002).unwrap();
        assert_eq!((best.start, best.count), (100000, 1000));
        assert!(best_subid_range(&r, Some("carol"), 1003).is_none());
        assert!(best_subid_range(&r, None, 1000).is_some());
        assert!(!subid_owner_matches("1000x", None, 1000));
    }

    #[test]
    fn free_range_is_past_highest_end() {
        assert_eq!(free_subid_start(&[]), 100000);
        assert_eq!(free_subid_start(&parse_subids("a:100000:65536\n")), 165536);
        assert_eq!(free_subid_start(&parse_subids("a:1000:10\n")), 100000);
        assert_eq!(
            free_subid_start(&parse_subids("a:300000:65536\nb:100000:65536\n")),
            365536
        );
        assert_eq!(subid_range_arg(165536).as_deref(), Some("165536-231071"));
        assert_eq!(subid_range_arg(100000).as_deref(), Some("100000-165535"));
        assert_eq!(subid_range_arg(SUBID_MAX), None);
    }

    #[test]
    fn passwd_and_group_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\nbad:x:zz:1\n";
        assert_eq!(passwd_by_name(passwd, "alice"), Some((1000, 1000)));
        assert_eq!(passwd_by_name(passwd, "bob"), None);
        assert_eq!(passwd_by_name(passwd, "bad"), None);
        assert_eq!(passwd_by_uid(passwd, 1000), Some(("alice".to_string(), 1000)));
        assert_eq!(passwd_by_uid(passwd, 5), None);
        let group = "root:x:0:\nkvm:x:104:alice,bob\nusers:x:100:bob\nalice:x:1000:\n";
        assert_eq!(groups_of(group, "alice", 1000), vec![104, 1000]);
        assert_eq!(groups_of(group, "bob", 1001), vec![100, 104, 1001]);
    }

    #[test]
    fn device_mode_classes() {
        assert!(mode_allows_rw(0o666, 0, 0, 1000, &[1000]));
        assert!(!mode_allows_rw(0o600, 0, 0, 1000, &[1000]));
        assert!(mode_allows_rw(0o660, 0, 104, 1000, &[104, 1000]));
        assert!(mode_allows_rw(0o600, 1000, 0, 1000, &[1000]));
        // The owner class wins even when "other" would allow it.
        assert!(!mode_allows_rw(0o066, 1000, 0, 1000, &[1000]));
        assert!(!mode_allows_rw(0o644, 0, 0, 1000, &[1000]));
    }

    #[test]
    fn os_release_and_runsc_fix() {
        let c = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\nID=debian\n";
        assert_eq!(os_release_codename(c).as_deref(), Some("bookworm"));
        assert_eq!(
            os_release_codename("VERSION_CODENAME=\"noble\"\n").as_deref(),
            Some("noble")
        );
        assert_eq!(os_release_codename("ID=arch\n"), None);
        assert!(runsc_fix(Some("bookworm")).starts_with("sudo apt-get install -t bookworm-backports runsc"));
        assert!(runsc_fix(Some("trixie")).contains("scripts/install-deps.sh"));
    }

    #[test]
    fn sysctl_fix_text() {
        assert_eq!(
            sysctl_fix(&["kernel.apparmor_restrict_unprivileged_userns=0"]),
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 && printf \
             'kernel.apparmor_restrict_unprivileged_userns=0\\n' | sudo tee /etc/sysctl.d/60-lazaret.conf"
        );
    }

    #[test]
    fn runtime_dir_rules() {
        assert_eq!(runtime_dir_problem(true, 1000, 0o40700, 1000), None);
        assert_eq!(runtime_dir_problem(true, 1000, 0o40755, 1000), None);
        let p = runtime_dir_problem(true, 0, 0o40700, 1000).unwrap();
        assert_eq!(p, RuntimeDirProblem::Owner(0));
        assert_eq!(p.describe(1000), "is owned by uid 0, not 1000");
        let p = runtime_dir_problem(true, 1000, 0o41777, 1000).unwrap();
        assert_eq!(p.describe(1000), "is group- or world-writable (mode 1777)");
        assert_eq!(
            runtime_dir_problem(true, 1000, 0o40720, 1000),
            Some(RuntimeDirProblem::Writable(0o720))
        );
        assert_eq!(
            runtime_dir_problem(false, 1000, 0o100600, 1000),
            Some(RuntimeDirProblem::NotDir)
        );
    }

    #[test]
    fn json_escaping() {
        assert_eq!(json_string("plain"), "\"plain\"");
        assert_eq!(json_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(json_string("l1\nl2\t\r"), "\"l1\\nl2\\t\\r\"");
        assert_eq!(json_string("\u{1}\u{1f}\u{7f}"), "\"\\u0001\\u001f\\u007f\"");
        assert_eq!(json_string("ü→"), "\"ü→\"");
        assert_eq!(json_string("\u{8}\u{c}a\u{202e}b"), "\"\\u0008\\u000ca\\u202eb\"");
    }

    #[test]
    fn json_document() {
        let checks = vec![
            Check::pass("git", "found /usr/bin/git"),
            Check::fail("runsc", "runsc not \"found\"", "run scripts/install-deps.sh"),
        ];
        assert_eq!(
            to_json(&checks),
            "{\"ok\":false,\"checks\":[{\"name\":\"git\",\"ok\":true,\"detail\":\"found /usr/bin/git\",\"fix\":null},\
             {\"name\":\"runsc\",\"ok\":false,\"detail\":\"runsc not \\\"found\\\"\",\"fix\":\"run scripts/install-deps.sh\"}]}"
        );
        assert!(to_json(&checks[..1]).starts_with("{\"ok\":true,"));
    }

    #[test]
    fn text_report() {
        let checks = vec![
            Check::pass("git", "found /usr/bin/git"),
            Check::fail("umoci", "umoci not found", "sudo apt-get install umoci"),
        ];
        assert_eq!(
            to_text(&checks),
            "ok   git: found /usr/bin/git\nFAIL umoci: umoci not found\n  fix: sudo apt-get install umoci\n"
        );
    }

    #[test]
    fn error_text_is_lowercase_without_suffix() {
        assert_eq!(errno_text(crate::sys::EPERM), "EPERM (operation not permitted)");
        assert_eq!(
            err_text(&io::Error::from_raw_os_error(crate::sys::ENOENT)),
            "no such file or directory"
        );
    }

    #[test]
    fn userns_probe_runs() {
        // Whatever the host allows, the fork/pipe machinery must work.
        let r = userns_probe(None);
        assert!(!matches!(r, ProbeResult::Error(_)), "{r:?}");
    }

    #[test]
    fn every_check_has_a_fix_when_failing() {
        let all = checks();
        // Shown with `--nocapture`.
        print!("{}", to_text(&all));
        for c in all {
            assert!(c.ok || c.fix.as_deref().is_some_and(|f| !f.is_empty()), "{}", c.name);
            assert!(!c.detail.ends_with('.'), "{}", c.name);
        }
    }
}
