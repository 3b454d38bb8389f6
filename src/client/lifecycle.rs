//! Lifecycle commands of the Client CLI: `ps`, `stop ID|--all`, `rm` and
//! `exec ID`. Running Domains are found through the runtime dir (one
//! directory per Domain ID with a published `hc.sock`) and asked for their
//! status as status-only observers; Domains with state are found in the
//! Storage Root. A Domain is named on the command line by its ID or any
//! unique prefix of it (as `ps` prints it), or by `--profile`/`--workspace`.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::client::args::{finish_args, refuse_root, utf8_argv};
use crate::client::failure::Failure;
use crate::client::otherbuild::{self, BasicAnswer, Foreign};
use crate::client::resolve::{resolve, warn_broken_profiles, Resolved};
use crate::client::select;
use crate::client::session::{session, Outcome};
use crate::config;
use crate::display::{escape, human_size};
use crate::domain::{self, DomainId};
use crate::plan::Json;
use crate::storage::paths::{self, DomainPaths};
use crate::storage::state::{self, StateError};
use crate::storage::statefs::{self, Op};
use crate::wire::basic::BasicRequest;
use crate::wire::client::{self as wire_client, ClientMsg, ServerMsg, StatusInfo};
use crate::wire::codec::{self, FrameReader};

/// How many hex digits of a Domain ID `ps` prints.
pub const ID_PREFIX_LEN: usize = 12;

// ---- finding Domains ----------------------------------------------------------

fn runtime_root() -> Result<PathBuf, Failure> {
    let cfg = config::load(&config::config_path())?;
    warn_broken_profiles(&cfg, None);
    Ok(paths::runtime_root(cfg.runtime_dir.as_deref()))
}

/// What a published coordinator answered an observer's question.
enum Observed {
    Answer(Box<ServerMsg>),
    /// It refused the `Hello`: a coordinator of another protocol version.
    Refused,
    /// No answer (none in time, no connection, a malformed one).
    Nothing,
}

/// Asks a published coordinator one question as an observer: a Hello
/// without profile, then `ask`; its first answer.
fn observe(sock: &Path, ask: &ClientMsg) -> Observed {
    let Ok(mut s) = UnixStream::connect(sock) else {
        return Observed::Nothing;
    };
    if s.set_read_timeout(Some(Duration::from_secs(5))).is_err() {
        return Observed::Nothing;
    }
    // A Hello without profile is an observer's: it may only ask for status.
    let hello = ClientMsg::Hello {
        version: wire_client::protocol_version(),
        client_id: domain::random_id(8),
        profile: String::new(),
        fingerprint: String::new(),
    };
    if codec::send(&mut s, &hello).is_err() {
        return Observed::Nothing;
    }
    // A coordinator of another build refuses the Hello and closes at once:
    // the question may then meet a closed socket, and its refusal is
    // still there to read.
    let _ = codec::send(&mut s, ask);
    match FrameReader::default().recv::<ServerMsg>(&mut s) {
        Ok(ServerMsg::Refused { .. }) => Observed::Refused,
        Ok(m) => Observed::Answer(Box::new(m)),
        Err(_) => Observed::Nothing,
    }
}

fn ask_as_observer(sock: &Path, ask: &ClientMsg) -> Option<ServerMsg> {
    match observe(sock, ask) {
        Observed::Answer(m) => Some(*m),
        _ => None,
    }
}

/// Asks a published coordinator for its status.
pub fn query_status(sock: &Path) -> Option<StatusInfo> {
    match ask_as_observer(sock, &ClientMsg::Status)? {
        ServerMsg::Status(st) => Some(st),
        _ => None,
    }
}

/// Asks a published coordinator for the escalation requests waiting for a
/// decision.
pub fn query_escalations(sock: &Path) -> Option<Vec<wire_client::PendingInfo>> {
    match ask_as_observer(sock, &ClientMsg::Escalations)? {
        ServerMsg::Escalations(list) => Some(list),
        _ => None,
    }
}

/// The waiting requests of one Domain as `lazaret escalations` prints them
/// (pure): every argument on its own line, escaped, in full.
pub fn escalations_text(st: &StatusInfo, list: &[wire_client::PendingInfo]) -> String {
    let mut out = format!(
        "Domain {} (profile {}, {}): {} waiting\n",
        &st.domain_id.as_str()[..ID_PREFIX_LEN],
        escape(&st.profile),
        escape(&st.workspace),
        list.len()
    );
    for p in list {
        let i = &p.prompt;
        out.push_str(&format!(
            "  request {}  session {}  {}, {} s left\n",
            escape(&i.request_id),
            escape(&i.session_id),
            if p.shown { "on screen" } else { "queued" },
            i.timeout_s
        ));
        for l in &i.ssh {
            out.push_str(&format!("    ssh:  {}\n", escape(l)));
        }
        out.push_str(&format!("    cwd:  {}\n", escape(&i.cwd)));
        out.push_str(&format!(
            "    why:  {}\n",
            crate::client::prompt::collapse(&i.justification)
        ));
        out.push_str(&format!("    command: {}\n", crate::escalation::quote_argv(&i.argv)));
        for (n, a) in i.argv.iter().enumerate() {
            out.push_str(&format!("    argv[{n}] = {}\n", escape(a)));
        }
    }
    out
}

pub fn cmd_escalations(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let id: Option<String> = args.opt_free_from_str()?;
    finish_args(args)?;
    let root = runtime_root()?;
    let mut all = running(&root);
    if let Some(prefix) = &id {
        let ids: Vec<DomainId> = all.iter().map(|s| s.domain_id.clone()).collect();
        let one = select::match_prefix(prefix, &ids, "running")?.clone();
        all.retain(|s| s.domain_id == one);
    }
    let mut any = false;
    for st in &all {
        let sock = root.join(st.domain_id.as_str()).join("hc.sock");
        let Some(list) = query_escalations(&sock).or_else(|| query_escalations(&sock)) else {
            continue;
        };
        if list.is_empty() {
            continue;
        }
        any = true;
        print!("{}", escalations_text(st, &list));
    }
    if !any {
        println!("no escalation requests waiting");
    }
    Ok(0)
}

/// The running Domain whose ID starts with `id` (refused as root): the
/// runtime root and the Domain's status.
fn running_one(id: &str) -> Result<(PathBuf, StatusInfo), Failure> {
    refuse_root()?;
    let root = runtime_root()?;
    let live = running(&root);
    let ids: Vec<DomainId> = live.iter().map(|s| s.domain_id.clone()).collect();
    let one = select::match_prefix(id, &ids, "running")?.clone();
    let st = live.into_iter().find(|s| s.domain_id == one).unwrap();
    Ok((root, st))
}

/// Every running Domain of the user that answers, sorted by ID.
fn running(root: &Path) -> Vec<StatusInfo> {
    scan(root).0
}

/// Every running Domain of the user, sorted by ID: those whose coordinator
/// speaks this build's protocol (their full status), and those of another
/// build (`otherbuild`: through the frozen basic exchange, or found on disk
/// for a build from before it).
fn scan(root: &Path) -> (Vec<StatusInfo>, Vec<Foreign>) {
    let storage = paths::storage_root().ok();
    let mut all = Vec::new();
    let mut foreign = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let Ok(id) = DomainId::parse(&name) else {
                continue;
            };
            let sock = e.path().join("hc.sock");
            if !sock.exists() {
                continue;
            }
            // A coordinator busy past the timeout (a loaded machine)
            // gets a second chance before it counts as not running.
            let mut seen = observe(&sock, &ClientMsg::Status);
            if matches!(seen, Observed::Nothing) {
                seen = observe(&sock, &ClientMsg::Status);
            }
            match seen {
                // The answer must be about the Domain whose directory it came from.
                Observed::Answer(m) => match *m {
                    ServerMsg::Status(st) if st.domain_id == name => all.push(st),
                    _ => {}
                },
                Observed::Refused => match otherbuild::ask(&sock, BasicRequest::status()) {
                    BasicAnswer::Info(i) if i.domain_id == name => foreign.push(Foreign::from(i)),
                    BasicAnswer::Silent => {
                        if let Some(storage) = &storage {
                            let dp = DomainPaths::new(storage, root, &id);
                            foreign.extend(otherbuild::pre_basic(&id, &e.path(), &dp.root));
                        }
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    all.sort_by(|a, b| a.domain_id.cmp(&b.domain_id));
    foreign.sort_by(|a, b| a.domain_id.cmp(&b.domain_id));
    (all, foreign)
}

// ---- ps ---------------------------------------------------------------------------

/// `45s`, `12m`, `3h`, `2d`.
pub fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A running Domain's disk budget, (used, cap), as its supervisor
/// publishes it (`gen/disk`); None without a cap.
fn disk_of(root: &Path, st: &StatusInfo) -> Option<(u64, u64)> {
    crate::wire::show::read_disk(&root.join(st.domain_id.as_str()).join("gen/disk")).ok()
}

/// `12.0MiB/64.0MiB`, or `-` without a cap.
fn disk_cell(disk: Option<(u64, u64)>) -> String {
    match disk {
        Some((used, cap)) => format!(
            "{}/{}",
            crate::config::format_size(used),
            crate::config::format_size(cap)
        ),
        None => "-".into(),
    }
}

/// The `ps` table (pure): a header and one row per Domain, with its disk
/// budget (used/cap) if it has one.
pub fn ps_table(all: &[(StatusInfo, Option<(u64, u64)>)], now: i64) -> String {
    let head = [
        "DOMAIN",
        "PROFILE",
        "STATUS",
        "AGE",
        "SESSIONS",
        "ESCALATIONS",
        "PORTS",
        "EGRESS",
        "DISK",
        "WORKSPACE",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for (st, disk) in all {
        let cmds: Vec<String> = st.sessions.iter().map(|s| escape(&s.argv0)).collect();
        let sessions = if cmds.is_empty() {
            "0".to_string()
        } else {
            format!("{} ({})", cmds.len(), cmds.join(","))
        };
        rows.push(vec![
            st.domain_id.as_str()[..ID_PREFIX_LEN].to_string(),
            escape(&st.profile),
            escape(&st.phase),
            age(now - st.started_at),
            sessions,
            st.pending_escalations.to_string(),
            if st.ports.is_empty() {
                "-".into()
            } else {
                st.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
            },
            escape(&st.egress),
            disk_cell(*disk),
            escape(&st.workspace),
        ]);
    }
    let n = head.len();
    let widths: Vec<usize> = (0..n)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    push_rows(&mut out, &rows, &widths);
    out
}

/// Appends `rows` to `out`, one line each, columns padded to `widths`
/// (the last one not).
fn push_rows(out: &mut String, rows: &[Vec<String>], widths: &[usize]) {
    let n = widths.len();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == n {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

pub fn cmd_ps(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let json = args.contains("--json");
    finish_args(args)?;
    let root = runtime_root()?;
    let (ours, foreign) = scan(&root);
    let all: Vec<(StatusInfo, Option<(u64, u64)>)> = ours
        .into_iter()
        .map(|st| {
            let d = disk_of(&root, &st);
            (st, d)
        })
        .collect();
    if json {
        println!("{}", status_json(&all, &foreign, state::now()));
    } else if all.is_empty() && foreign.is_empty() {
        println!("no running Domains");
    } else {
        if !all.is_empty() {
            print!("{}", ps_table(&all, state::now()));
        }
        if !foreign.is_empty() {
            print!("{}", foreign_table(&foreign, state::now()));
        }
    }
    Ok(0)
}

/// The `ps` rows of Domains started by another build (pure): which build,
/// and that `stop` reaches them while nothing else does.
pub fn foreign_table(all: &[Foreign], now: i64) -> String {
    let mut rows: Vec<Vec<String>> = vec![["DOMAIN", "PROFILE", "AGE", "SESSIONS", "BUILD", "WORKSPACE"]
        .iter()
        .map(|s| s.to_string())
        .collect()];
    for f in all {
        rows.push(vec![
            f.domain_id.as_str()[..ID_PREFIX_LEN].to_string(),
            escape(&f.profile),
            if f.started_at > 0 {
                age(now - f.started_at)
            } else {
                "?".into()
            },
            f.sessions.map_or("?".into(), |n| n.to_string()),
            match f.protocol {
                Some(p) => format!("{} (protocol {p})", escape(&f.build)),
                None => escape(&f.build),
            },
            escape(&f.workspace),
        ]);
    }
    let n = rows[0].len();
    let widths: Vec<usize> = (0..n)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "started by another lazaret build (this one: {}, protocol {}); `lazaret stop ID` stops them, \
         then `lazaret run` restarts them with this build:\n",
        crate::build_info::describe(),
        crate::build_info::protocol()
    );
    push_rows(&mut out, &rows, &widths);
    out
}

/// `ps --json` (pure): the Domains of this build, then those of others.
pub(crate) fn status_json(all: &[(StatusInfo, Option<(u64, u64)>)], foreign: &[Foreign], now: i64) -> String {
    let num = |v: Option<u64>| v.map_or(Json::Null, |n| Json::Num(n as i64));
    // A Domain of another build has fewer fields: those it told (or what
    // is on disk), its build and `other_build: true`.
    let others = foreign.iter().map(|f| {
        Json::Obj(vec![
            ("domain_id", Json::s(&f.domain_id)),
            ("profile", Json::s(&f.profile)),
            ("workspace", Json::s(&f.workspace)),
            ("coordinator_pid", Json::Num(f.coordinator_pid as i64)),
            ("started_at", Json::Num(f.started_at)),
            ("sessions_count", f.sessions.map_or(Json::Null, |n| Json::Num(n as i64))),
            ("build", Json::s(&f.build)),
            ("protocol", f.protocol.map_or(Json::Null, |p| Json::Num(p as i64))),
            ("other_build", Json::Bool(true)),
        ])
    });
    Json::Arr(
        all.iter()
            .map(|(st, disk)| {
                Json::Obj(vec![
                    ("domain_id", Json::s(&st.domain_id)),
                    ("profile", Json::s(&st.profile)),
                    ("workspace", Json::s(&st.workspace)),
                    ("generation", Json::Num(st.generation.get() as i64)),
                    ("phase", Json::s(&st.phase)),
                    ("coordinator_id", Json::s(&st.coordinator_id)),
                    ("coordinator_pid", Json::Num(st.coordinator_pid as i64)),
                    ("supervisor_pid", Json::Num(st.supervisor_pid as i64)),
                    ("runsc_pid", Json::Num(st.runsc_pid as i64)),
                    ("sandbox_id", Json::s(&st.sandbox_id)),
                    ("started_at", Json::Num(st.started_at)),
                    ("age_seconds", Json::Num((now - st.started_at).max(0))),
                    ("pending_escalations", Json::Num(st.pending_escalations as i64)),
                    (
                        "ports",
                        Json::strs(&st.ports.iter().map(|p| p.to_string()).collect::<Vec<_>>()),
                    ),
                    ("egress", Json::s(&st.egress)),
                    ("disk_used", num(disk.map(|d| d.0))),
                    ("disk_cap", num(disk.map(|d| d.1))),
                    (
                        "sessions",
                        Json::Arr(
                            st.sessions
                                .iter()
                                .map(|s| {
                                    Json::Obj(vec![
                                        ("session_id", Json::s(&s.session_id)),
                                        ("argv0", Json::s(&s.argv0)),
                                        ("client_pid", Json::Num(s.client_pid as i64)),
                                        ("exec_pid", Json::Num(s.exec_pid as i64)),
                                        ("tty", Json::Bool(s.tty)),
                                    ])
                                })
                                .collect(),
                        ),
                    ),
                    ("other_build", Json::Bool(false)),
                ])
            })
            .chain(others)
            .collect(),
    )
    .render()
}

// ---- stop -------------------------------------------------------------------------

/// Sends Stop to the Domain published at `run/hc.sock`. `Ok(false)`: not
/// running. The coordinator lets any client of our uid stop a Domain, also
/// one whose configuration differs (that is how it picks up a new one),
/// and one of another build: a coordinator that refuses this build's
/// `Hello` is stopped through the frozen basic exchange, and one from
/// before it by SIGTERM (`otherbuild`).
fn send_stop(run: &Path, profile: &str) -> Result<bool, Failure> {
    let mut s = match UnixStream::connect(run.join("hc.sock")) {
        Ok(s) => s,
        Err(_) => return Ok(false),
    };
    let lost = Failure::Unreachable;
    let hello = ClientMsg::Hello {
        version: wire_client::protocol_version(),
        client_id: domain::random_id(8),
        profile: profile.to_string(),
        fingerprint: "stop".into(),
    };
    codec::send(&mut s, &hello).map_err(lost)?;
    // A coordinator of another build refuses the Hello and closes at once:
    // the Stop may then meet a closed socket; its refusal is read below.
    let _ = codec::send(
        &mut s,
        &ClientMsg::Stop {
            reason: STOP_REASON.into(),
        },
    );
    // The coordinator answers a Stop only by closing; anything else is a refusal.
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    match FrameReader::default().recv::<ServerMsg>(&mut s) {
        Ok(ServerMsg::Refused { reason }) => stop_other_build(run, reason),
        Ok(other) => Err(Failure::UnexpectedReply(crate::wire::UnexpectedMessage::of(
            "Welcome", &other,
        ))),
        Err(_) => Ok(true),
    }
}

const STOP_REASON: &str = "the Domain was stopped with `lazaret stop`";

/// Stops a Domain whose coordinator refused this build's `Hello` (with
/// `refused`): through the basic exchange, or, for a build from before
/// it, by SIGTERM to the coordinator that holds the Domain's lock.
fn stop_other_build(run: &Path, refused: String) -> Result<bool, Failure> {
    match otherbuild::ask(&run.join("hc.sock"), BasicRequest::stop(STOP_REASON)) {
        BasicAnswer::Info(i) => {
            println!(
                "Domain {} was started by lazaret {} (protocol {}): stopping it",
                i.domain_id,
                escape(&i.build),
                i.protocol
            );
            Ok(true)
        }
        BasicAnswer::Silent => match otherbuild::coordinator_holding(&run.join("lock")) {
            Some(pid) => {
                println!(
                    "the Domain at {} was started by {}: stopping its coordinator (pid {pid}) with SIGTERM",
                    escape(&run.to_string_lossy()),
                    otherbuild::PRE_BASIC
                );
                otherbuild::terminate_pre_basic(run, pid).map_err(Failure::Unreachable)
            }
            None => Err(Failure::StopRefused(refused)),
        },
        BasicAnswer::Unknown => Err(Failure::StopRefused(refused)),
    }
}

/// Waits until the Domain's socket is gone (teardown began) and its lock
/// is free (teardown finished), up to `deadline`.
fn wait_stopped(run: &Path, deadline: Instant) {
    let sock = run.join("hc.sock");
    let lock = run.join("lock");
    while sock.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The coordinator unlinks the lock file as its last act; a crashed one
    // leaves it unlocked.
    while Instant::now() < deadline && !lock_free(&lock) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // INVARIANT: never unlink the lock file here: only its holder may.
}

/// Whether nobody holds the Domain lock at `path`. Never creates the
/// file (a waiter must not leave a lock file behind in a runtime dir the
/// coordinator is about to remove).
fn lock_free(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(crate::sys::O_CLOEXEC | crate::sys::O_NOFOLLOW)
        .open(path)
    {
        Err(e) => e.kind() == io::ErrorKind::NotFound,
        Ok(f) => matches!(crate::sys::try_lock_exclusive(&f), Ok(true)),
    }
}

pub fn cmd_stop(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let names = select::name_args(&mut args)?;
    let all = args.contains("--all");
    let id: Option<String> = args.opt_free_from_str()?;
    finish_args(args)?;
    let named = match select::named(id, names) {
        Ok(select::Named::Derived {
            profile: None,
            workspace: None,
        }) if all => None,
        Ok(_) if all => return Err(Failure::NameOneWay { all: true }),
        Err(Failure::NameOneWay { .. }) => return Err(Failure::NameOneWay { all: true }),
        n => Some(n?),
    };
    refuse_root()?;
    let root = runtime_root()?;
    paths::ensure_private_dir(&root)?;
    let targets: Vec<(DomainId, String, String)> = match named {
        None | Some(select::Named::Id(_)) => {
            // Domains of every build: those of another one are stopped
            // through the basic exchange or by SIGTERM (`send_stop`).
            let (live, foreign) = scan(&root);
            let mut all: Vec<(DomainId, String, String)> = live
                .into_iter()
                .map(|s| (s.domain_id, s.profile, s.workspace))
                .chain(foreign.into_iter().map(|f| (f.domain_id, f.profile, f.workspace)))
                .collect();
            if let Some(select::Named::Id(p)) = &named {
                let ids: Vec<DomainId> = all.iter().map(|s| s.0.clone()).collect();
                let one = select::match_prefix(p, &ids, "running")?.clone();
                all.retain(|s| s.0 == one);
            }
            all
        }
        // The Domain ID is derived: the profile need not be valid in the
        // current configuration to stop what runs under its name.
        Some(select::Named::Derived { profile, workspace }) => {
            let (id, name, ws) = select::derived(profile, workspace)?;
            vec![(id, name, ws.to_string_lossy().into_owned())]
        }
    };
    if targets.is_empty() {
        println!("no running Domains");
        return Ok(0);
    }
    // Ask every Domain first, then wait for them together.
    let mut asked = Vec::new();
    for (id, profile, ws) in targets {
        let run = root.join(id.as_str());
        if send_stop(&run, &profile)? {
            asked.push((id, profile, ws));
        } else {
            println!("Domain {id} ({} on {}) is not running", escape(&profile), escape(&ws));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    for (id, profile, ws) in asked {
        wait_stopped(&root.join(id.as_str()), deadline);
        println!("stopped Domain {id} ({} on {})", escape(&profile), escape(&ws));
    }
    Ok(0)
}

// ---- port add ---------------------------------------------------------------------

/// `lazaret port add ID [ADDR:]HOSTPORT:GUESTPORT`: one more host port
/// forward on a running Domain (HOSTPORT 0: any free port); prints the
/// forward it got.
pub fn cmd_port(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let sub: Option<String> = args.opt_free_from_str()?;
    let id: Option<String> = args.opt_free_from_str()?;
    let spec: Option<String> = args.opt_free_from_str()?;
    finish_args(args)?;
    if sub.as_deref() != Some("add") {
        return Err(Failure::PortUsage);
    }
    let (Some(id), Some(spec)) = (id, spec) else {
        return Err(Failure::PortNeedsArgs);
    };
    let fwd: crate::config::ports::PortForward =
        spec.parse()
            .map_err(|err: crate::config::ValueError| Failure::BadForward {
                spec: spec.clone(),
                err,
            })?;
    let (root, st) = running_one(&id)?;
    let got = add_forward(&root, &st, fwd)?;
    println!("Domain {}: forwarding {got}", &st.domain_id.as_str()[..ID_PREFIX_LEN]);
    Ok(0)
}

/// Whether the installed forward `have` is what `want` asks for: the same
/// address and guest port, and the same host port unless `want` asks for
/// any (pure).
fn forward_satisfies(have: &crate::config::ports::PortForward, want: &crate::config::ports::PortForward) -> bool {
    have.addr == want.addr && have.guest == want.guest && (want.host == 0 || have.host == want.host)
}

/// `lazaret port add`, and `--publish` joining a running Domain: asks the
/// running Domain `st` (its runtime dir under `root`) for one more forward
/// and returns it as installed. The same host
/// port to another guest port of this Domain is bad input before anything
/// is asked; a host port taken by another Domain or program is
/// [`Failure::PortTaken`], naming the Domain.
fn add_forward(
    root: &Path,
    st: &StatusInfo,
    fwd: crate::config::ports::PortForward,
) -> Result<crate::config::ports::PortForward, Failure> {
    let one = &st.domain_id;
    crate::config::ports::merge(&st.ports, &[fwd])?;
    let mut s = UnixStream::connect(root.join(one.as_str()).join("hc.sock"))
        .map_err(|_| Failure::NotRunningAnyMore(one.clone()))?;
    let lost = Failure::Unreachable;
    let hello = ClientMsg::Hello {
        version: wire_client::protocol_version(),
        client_id: domain::random_id(8),
        profile: st.profile.clone(),
        fingerprint: "port".into(),
    };
    codec::send(&mut s, &hello).map_err(lost)?;
    codec::send(&mut s, &ClientMsg::AddPort(fwd)).map_err(lost)?;
    s.set_read_timeout(Some(Duration::from_secs(15))).ok();
    match FrameReader::default().recv::<ServerMsg>(&mut s) {
        Ok(ServerMsg::Status(after)) => Ok(after
            .ports
            .iter()
            .rev()
            .find(|q| forward_satisfies(q, &fwd))
            .copied()
            .unwrap_or(fwd)),
        Ok(ServerMsg::PortTaken(t)) => Err(port_taken(root, t)),
        Ok(ServerMsg::Refused { reason }) => Err(Failure::PortRefused(reason)),
        Ok(other) => Err(Failure::UnexpectedReply(crate::wire::UnexpectedMessage::of(
            "Status", &other,
        ))),
        Err(e) => Err(Failure::NoAnswer(e)),
    }
}

/// A taken host port as the failure says it: the holding Domain asked for
/// its workspace (runtime dir `root`; not said when it does not answer,
/// or answers for another ID).
pub fn port_taken(root: &Path, t: crate::config::ports::Taken) -> Failure {
    let holder = t.holder.map(|id| {
        let ws = query_status(&root.join(id.as_str()).join("hc.sock"))
            .filter(|st| st.domain_id == id)
            .map(|st| st.workspace);
        (id, ws)
    });
    Failure::PortTaken { port: t.port, holder }
}

// ---- exec -------------------------------------------------------------------------

pub fn cmd_exec(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let (opts, cmd) = match raw.iter().position(|a| a == "--") {
        Some(i) => (raw[..i].to_vec(), raw[i + 1..].to_vec()),
        None => (raw, Vec::new()),
    };
    let mut args = pico_args::Arguments::from_vec(opts);
    let env_flags: Vec<String> = args.values_from_str(["-e", "--env"])?;
    let as_root = args.contains("--root");
    let id: Option<String> = args.opt_free_from_str()?;
    finish_args(args)?;
    let Some(id) = id else {
        return Err(Failure::ExecNeedsId);
    };
    let argv = utf8_argv(cmd)?;
    let (_, st) = running_one(&id)?;
    // The Domain's own profile and workspace, resolved as `run` would: a
    // profile changed since the Domain started is refused by its
    // coordinator, as for `run`.
    let mut r = resolve(Some(st.profile.clone()), Some(PathBuf::from(&st.workspace)))?;
    r.pass = crate::config::passenv::resolve(&r.profile.pass_env, &env_flags, |k| std::env::var(k).ok())?;
    r.root = as_root;
    if r.domain_id != st.domain_id {
        return Err(Failure::Mismatch(st.domain_id));
    }
    let stream = UnixStream::connect(r.paths.socket()).map_err(|_| Failure::NotRunningAnyMore(st.domain_id.clone()))?;
    match session(stream, &r, argv)? {
        Outcome::Exited(code) => Ok(code),
        Outcome::Retry => Err(Failure::StoppedWhileJoining(st.domain_id)),
    }
}

/// After joining: every `--publish` forward this client asked for that the
/// running Domain lacks is added to it, as `lazaret port add` does (same
/// message, same checks), and said on stderr. A Domain this client just
/// started has them all already.
pub fn publish_on_join(r: &Resolved) -> Result<(), Failure> {
    if r.publish.is_empty() {
        return Ok(());
    }
    let st = query_status(&r.paths.socket()).ok_or(Failure::NoPorts)?;
    let root = r.paths.run.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut have = st.ports.clone();
    for want in &r.publish {
        if have.iter().any(|q| forward_satisfies(q, want)) {
            continue;
        }
        let mut now = st.clone();
        now.ports = have.clone();
        let got = add_forward(&root, &now, *want)?;
        eprintln!(
            "lazaret: Domain {} is running: added the forward {got} (as `lazaret port add` does; it lasts until the Domain stops)",
            &st.domain_id.as_str()[..ID_PREFIX_LEN],
        );
        have.push(got);
    }
    Ok(())
}

// ---- rm ---------------------------------------------------------------------------

pub fn cmd_rm(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let names = select::name_args(&mut args)?;
    let yes = args.contains("--yes");
    let json = args.contains("--json");
    let id: Option<String> = args.opt_free_from_str()?;
    finish_args(args)?;
    let named = select::named(id, names)?;
    refuse_root()?;
    let cfg = config::load(&config::config_path())?;
    let storage = paths::storage_root()?;
    let runtime = paths::runtime_root(cfg.runtime_dir.as_deref());
    let id = select::stored(named, &storage)?;
    let dp = DomainPaths::new(&storage, &runtime, &id);
    match std::fs::symlink_metadata(&dp.root) {
        Ok(md) if md.is_dir() => {}
        _ => return Err(Failure::NoStateToRemove { id, root: dp.root }),
    }
    remove_domain(&dp, &id, yes, json).map_err(Failure::from)
}

/// Names under the Domain Root `rm` deletes with host rights once the
/// uppers and ignored state are gone (everything there is Lazaret's own).
const STORE_FILES: &[&str] = &[
    "store.sqlite",
    "store.sqlite-wal",
    "store.sqlite-shm",
    "store.sqlite-journal",
];

/// Directories of the Domain Root other than the anchor: the ignored
/// state, scratch and whatever else is there. The sandbox may have shaped
/// what is inside them, so only the state helper deletes them.
fn sandbox_shaped_dirs(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != crate::storage::anchor::ANCHOR_DIR)
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn remove_domain(dp: &DomainPaths, id: &DomainId, yes: bool, json: bool) -> Result<i32, StateError> {
    // Refuses a running Domain (published or locked by a coordinator).
    let lock = state::lock_for_maintenance(dp, id)?;
    crate::storage::anchor::finish_reset(&dp.root).map_err(StateError::FinishReset)?;
    let meta = state::read_meta(&dp.root).unwrap_or_default();
    let keys = state::keys_on_disk(&dp.root);
    let ignored = dp.root.join(state::IGNORED_DIR);
    let has_ignored = std::fs::symlink_metadata(&ignored).map(|m| m.is_dir()).unwrap_or(false);
    let mut ops: Vec<Op> = statefs::anchor_sizes(&keys);
    if has_ignored {
        ops.push(statefs::root_size(state::IGNORED_DIR));
    }
    let sizes = statefs::run_helper(&dp.root, None, &ops).map_err(StateError::Helper)?;
    let size_of = |k: &str| sizes.size_of(k);
    let store_bytes: u64 = STORE_FILES
        .iter()
        .filter_map(|f| std::fs::symlink_metadata(dp.root.join(f)).ok())
        .map(|m| m.len())
        .sum();
    if !json || !yes {
        let mut out = format!(
            "rm deletes Domain {id} ({} on {}):\n",
            escape(if meta.profile.is_empty() { "?" } else { &meta.profile }),
            escape(if meta.workspace.is_empty() {
                "?"
            } else {
                &meta.workspace
            })
        );
        for k in &keys {
            let (n, b) = size_of(k);
            out.push_str(&format!(
                "  persistent {}  ({n} entries, {})\n",
                state::guest(k),
                human_size(b)
            ));
        }
        if has_ignored {
            let (n, b) = size_of(state::IGNORED_DIR);
            out.push_str(&format!(
                "  ignored workspace state  ({n} entries, {})\n",
                human_size(b)
            ));
        }
        out.push_str(&format!(
            "  store and metadata  ({})  {}\n",
            human_size(store_bytes),
            dp.root.display()
        ));
        out.push_str("kept: the workspace, images and prepared lowers\n");
        eprint!("{out}");
    }
    if !yes && !crate::storage::state::confirm("removing", "remove", "not removed")? {
        return Ok(1);
    }
    // 1. Uppers, ignored state, scratch and any other directory become
    //    trash in anchor/ (renames within the Domain Root), then the state
    //    helper deletes them inside a user namespace, where files of any
    //    subordinate id, mode and depth can be removed.
    let anchor = crate::storage::anchor::anchor_dir(&dp.root);
    let nonce = domain::random_id(4);
    let fail = |name: &str, err: io::Error| StateError::Trash {
        name: name.to_string(),
        err,
    };
    paths::ensure_private_dir(&anchor).map_err(StateError::AnchorDir)?;
    for k in &keys {
        let to = anchor.join(format!("{}{k}-{nonce}", crate::storage::anchor::TRASH_PREFIX));
        std::fs::rename(anchor.join(k), to).map_err(|e| fail(k, e))?;
    }
    for name in sandbox_shaped_dirs(&dp.root) {
        statefs::set_aside(&dp.root, &name).map_err(|e| fail(&name, e))?;
    }
    let left = statefs::empty_trash(&dp.root).map_err(StateError::Helper)?;
    if !left.is_empty() {
        return Err(StateError::Undeleted(left));
    }
    // 2. What is left is Lazaret's own host files: the store first, the
    //    metadata (which names the Domain in `state list`) with the rest.
    for f in STORE_FILES {
        let _ = std::fs::remove_file(dp.root.join(f));
    }
    std::fs::remove_dir_all(&dp.root).map_err(|e| fail(&dp.root.display().to_string(), e))?;
    // 3. The runtime dir: the lock goes with the Maintenance guard.
    drop(lock);
    let _ = std::fs::remove_dir(dp.runsc_root());
    // The egress gate's log (allow-by-name mode) outlives generations, not the Domain.
    for f in crate::net::gate::LOG_FILES {
        let _ = std::fs::remove_file(dp.run.join(f));
    }
    let _ = std::fs::remove_dir(&dp.run);
    if json {
        println!(
            "{}",
            Json::Obj(vec![
                ("domain_id", Json::s(id)),
                ("profile", Json::s(&meta.profile)),
                ("workspace", Json::s(&meta.workspace)),
                (
                    "removed",
                    Json::strs(&keys.iter().map(|k| state::guest(k)).collect::<Vec<_>>()),
                ),
                ("ignored", Json::Bool(has_ignored)),
            ])
            .render()
        );
    } else {
        println!("removed Domain {id}");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(id: &str, started: i64, argv0: &[&str]) -> StatusInfo {
        StatusInfo {
            domain_id: DomainId::parse(id).unwrap(),
            profile: "default".into(),
            workspace: "/home/u/p\u{1b}[2J".into(),
            generation: domain::Generation::FIRST,
            phase: "ready".into(),
            coordinator_id: String::new(),
            coordinator_pid: 0,
            supervisor_pid: 0,
            runsc_pid: 0,
            sandbox_id: String::new(),
            started_at: started,
            sessions: argv0
                .iter()
                .map(|a| wire_client::SessionInfo {
                    session_id: wire_client::SessionId::random(),
                    client_pid: 0,
                    exec_pid: 0,
                    argv0: a.to_string(),
                    tty: false,
                })
                .collect(),
            pending_escalations: 0,
            ports: Vec::new(),
            egress: "none".into(),
        }
    }

    #[test]
    fn escalations_show_every_argument_in_full_and_escaped() {
        let long = "z".repeat(5000);
        let p = wire_client::PendingInfo {
            prompt: wire_client::PromptInfo {
                request_id: "r1".into(),
                profile: "default".into(),
                session_id: "0123456789abcdef".into(),
                argv: vec!["touch".into(), "a\nb\u{1b}[2J".into(), long.clone()],
                cwd: "/home/u/p".into(),
                justification: "pad    \n\n  me".into(),
                timeout_s: 42,
                ssh: Vec::new(),
            },
            shown: true,
        };
        let t = escalations_text(&st("0123456789abcdef0123", 0, &[]), &[p]);
        assert!(t.contains("argv[0] = touch\n"), "{t}");
        assert!(t.contains("argv[1] = a\\x0ab\\x1b[2J\n"), "{t}");
        assert!(t.contains(&format!("argv[2] = {long}\n")), "{t}");
        assert!(
            t.contains("why:  pad me\n") && t.contains("on screen, 42 s left"),
            "{t}"
        );
        assert!(!t.contains('\u{1b}'), "{t}");
    }

    #[test]
    fn ps_table_has_header_ages_and_escapes() {
        let t = ps_table(
            &[
                (
                    st("0123456789abcdef0123", 1000, &["bash", "sleep"]),
                    Some((5 << 20, 64 << 20)),
                ),
                (st("1123456789abcdef0123", 1000, &["sh"]), None),
            ],
            1000 + 3700,
        );
        let mut lines = t.lines();
        let head = lines.next().unwrap();
        assert!(
            head.starts_with("DOMAIN") && head.contains("AGE") && head.contains("ESCALATIONS"),
            "{t}"
        );
        let row = lines.next().unwrap();
        assert!(row.starts_with("0123456789ab "), "{row}");
        assert!(!row.contains("0123456789abc"), "prefix only: {row}");
        assert!(row.contains(" 1h ") && row.contains("2 (bash,sleep)"), "{row}");
        assert!(head.contains("DISK") && row.contains(" 5MiB/64MiB "), "{t}");
        assert!(lines.next().unwrap().contains(" - "), "no cap: {t}");
        assert!(!t.contains('\u{1b}'), "escaped: {t}");
        assert_eq!(age(59), "59s");
        assert_eq!(age(120), "2m");
        assert_eq!(age(2 * 86_400 + 5), "2d");
        assert_eq!(age(-5), "0s");
    }
}
