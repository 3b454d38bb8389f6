//! The Network Sidecar role's install path, run by the Runtime Supervisor
//! (SPEC §9): the generation's enforcement and reject network namespaces,
//! the veth between them, slirp4netns, the routes of the install plan, and
//! the read-back of what the kernel actually holds (FR-18).
//!
//! Route and link changes shell out to iproute2 (`ip -batch -`, one process
//! per namespace and step) rather than speaking rtnetlink: the commands are
//! the ones PLATFORM §4 verified, they are easy to read in a log, and the
//! read-back parses `ip route` output that a human can compare. Namespaces
//! are joined with `setns` in the child before exec (the supervisor is
//! root of the user namespace that owns both namespaces).
//!
//! Neither namespace has a holder process: each is created by a thread that
//! unshares and opens `/proc/thread-self/ns/net`, then bind-mounted onto a
//! file in the generation directory inside the supervisor's private mount
//! namespace (so `ip … netns PATH`, slirp4netns `--netns-type=path` and
//! runsc's `config.json` can name it). The mounts vanish with that mount
//! namespace; the namespaces vanish with their last user.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::netpolicy::{self, Fault, Plan, RouteKind};
use crate::sys;

/// Where the namespaces are bound, relative to the generation directory.
pub const ENFORCE_FILE: &str = "netns-enforce";
pub const REJECT_FILE: &str = "netns-reject";
/// slirp4netns finds its ready pipe here.
const SLIRP_READY_FD: i32 = 3;
const SLIRP_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The installed network of one generation.
pub struct Network {
    pub enforce: OwnedFd,
    pub reject: OwnedFd,
    pub slirp: Child,
    pub slirp_start: u64,
    pub inode: u64,
    pub enforce_path: PathBuf,
}

/// First existing path of a host tool (the supervisor's PATH may lack sbin).
pub fn tool(name: &str) -> PathBuf {
    for d in [
        "/usr/sbin",
        "/sbin",
        "/usr/bin",
        "/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
    ] {
        let p = Path::new(d).join(name);
        if p.is_file() {
            return p;
        }
    }
    PathBuf::from(name)
}

fn bind_ns(fd: &OwnedFd, target: &Path) -> Result<(), String> {
    std::fs::File::create(target).map_err(|e| format!("creating {}: {e}", target.display()))?;
    let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
    sys::mount(&src, target, "", libc::MS_BIND, None)
        .map_err(|e| format!("binding the network namespace to {}: {e}", target.display()))
}

/// Runs `ip -batch -` in namespace `ns` with `cmds` on stdin.
fn ip_batch(ns: &OwnedFd, what: &str, cmds: &[String]) -> Result<(), String> {
    let mut cmd = Command::new(tool("ip"));
    cmd.args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    sys::command_in_netns(&mut cmd, ns.as_raw_fd());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{what}: cannot run ip (install iproute2): {e}"))?;
    let text = cmds.join("\n") + "\n";
    let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: ip failed: {}",
            String::from_utf8_lossy(&out.stderr).trim().replace('\n', "; ")
        ));
    }
    Ok(())
}

/// Output of `ip ARGS` in namespace `ns`.
fn ip_show(ns: &OwnedFd, args: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(tool("ip"));
    cmd.args(args).stdin(Stdio::null());
    sys::command_in_netns(&mut cmd, ns.as_raw_fd());
    let out = cmd.output().map_err(|e| format!("cannot run ip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// IPv6 off for every interface that exists or will be created (PLATFORM
/// §4: then no inet6 address is left for gVisor to take).
fn disable_ipv6(ns: &OwnedFd, mask_core: bool) -> Result<(), String> {
    sys::in_netns(ns.as_raw_fd(), move || {
        for f in ["all", "default"] {
            std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6"), "1")?;
        }
        if mask_core {
            // runsc ≤ 20240729 takes any netns in which this directory has
            // rmem_default for the host's (PLATFORM §2). The mount must be
            // made from inside the namespace: /proc/sys/net is per netns.
            sys::mount("lzmask", Path::new("/proc/sys/net/core"), "tmpfs", 0, Some("size=16k"))?;
        }
        Ok(())
    })
    .map_err(|e| format!("configuring the network namespace: {e}"))
}

fn start_slirp(enforce_path: &Path, custom_dns: bool) -> Result<(Child, u64), String> {
    let (rd, wr) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
    let mut cmd = Command::new(tool("slirp4netns"));
    cmd.args([
        "--configure",
        &format!("--mtu={}", netpolicy::MTU),
        "--disable-host-loopback",
        &format!("--ready-fd={SLIRP_READY_FD}"),
        "--netns-type=path",
    ]);
    if custom_dns {
        cmd.arg("--disable-dns");
    }
    // Host port forwards are added through it (crate::ports).
    cmd.arg(format!(
        "--api-socket={}",
        enforce_path.with_file_name(crate::ports::API_SOCKET).display()
    ));
    cmd.arg(enforce_path)
        .arg(netpolicy::TAP)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    sys::command_coupled(&mut cmd, vec![(wr.as_raw_fd(), SLIRP_READY_FD)]);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start slirp4netns (install slirp4netns; run `lazaret doctor`): {e}"))?;
    drop(wr);
    let start = sys::proc_start_time(child.id() as i32).unwrap_or(0);
    let deadline = Instant::now() + SLIRP_READY_TIMEOUT;
    let mut p = [sys::PollFd::new(rd.as_raw_fd(), libc::POLLIN)];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err("slirp4netns did not become ready in 10 s".into());
        }
        if sys::poll(&mut p, left.as_millis().min(1000) as i32).unwrap_or(0) > 0 {
            break;
        }
    }
    let mut buf = [0u8; 8];
    let n = std::fs::File::from(rd).read(&mut buf).unwrap_or(0);
    if n == 0 {
        let _ = child.kill();
        let _ = child.wait();
        return Err("slirp4netns exited before it was ready (is /dev/net/tun usable? run `lazaret doctor`)".into());
    }
    Ok((child, start))
}

/// Prepares the generation's network as the plan says, reporting
/// `slirp PID START` as soon as the helper exists (so the coordinator owns
/// it exactly), then reads back what was installed. Returns the network
/// and a line for the coordinator's readiness record.
pub fn install(plan: &Plan, gen_dir: &Path, fault: Option<Fault>, report: &dyn Fn(&str)) -> Result<Network, String> {
    let enforce = sys::new_netns().map_err(|e| format!("creating the enforcement network namespace: {e}"))?;
    let reject = sys::new_netns().map_err(|e| format!("creating the reject network namespace: {e}"))?;
    let enforce_path = gen_dir.join(ENFORCE_FILE);
    let reject_path = gen_dir.join(REJECT_FILE);
    bind_ns(&enforce, &enforce_path)?;
    bind_ns(&reject, &reject_path)?;
    disable_ipv6(&enforce, true)?;
    disable_ipv6(&reject, false)?;
    let (l, p) = (netpolicy::REJECT_LOCAL, netpolicy::REJECT_PEER);
    ip_batch(
        &enforce,
        "creating the reject link",
        &[
            format!(
                "link add {} type veth peer name {} netns {}",
                netpolicy::REJECT_IF,
                netpolicy::REJECT_PEER_IF,
                reject_path.display()
            ),
            format!("addr add {l}/30 dev {}", netpolicy::REJECT_IF),
            format!("link set {} up", netpolicy::REJECT_IF),
        ],
    )?;
    ip_batch(
        &reject,
        "preparing the reject namespace",
        &[
            "link set lo up".into(),
            format!("addr add {p}/30 dev {}", netpolicy::REJECT_PEER_IF),
            format!("link set {} up", netpolicy::REJECT_PEER_IF),
            // Everything terminates on loopback unicast: no listener, RST.
            "route add local 0.0.0.0/0 dev lo".into(),
        ],
    )?;
    let (slirp, slirp_start) = start_slirp(&enforce_path, plan.custom_dns)?;
    report(&format!("slirp {} {slirp_start}", slirp.id()));
    let mut net = Network {
        inode: sys::fd_inode(enforce.as_raw_fd()).map_err(|e| format!("netns identity: {e}"))?,
        enforce,
        reject,
        slirp,
        slirp_start,
        enforce_path,
    };
    let result = install_routes(&net, plan, fault);
    if let Err(e) = result {
        stop_slirp(&mut net);
        return Err(e);
    }
    Ok(net)
}

fn install_routes(net: &Network, plan: &Plan, fault: Option<Fault>) -> Result<(), String> {
    // `replace`: slirp4netns already added the default route.
    let mut cmds = Vec::new();
    let mut expected = plan.clone();
    // The fault skips the 192.168.0.0/16 deny (a home LAN), else the first.
    let lan: crate::config::Prefix = "192.168.0.0/16".parse().unwrap();
    let victim = plan
        .routes
        .iter()
        .filter(|r| r.kind == RouteKind::Reject)
        .find(|r| r.prefix == lan)
        .or_else(|| plan.routes.iter().find(|r| r.kind == RouteKind::Reject))
        .map(|r| r.prefix);
    for r in &plan.routes {
        if fault.is_some() && Some(r.prefix) == victim {
            log::warn!("fault injection: not installing the deny route for {}", r.prefix);
            if fault == Some(Fault::SkipOneDeny) {
                expected.routes.retain(|x| x.prefix != r.prefix);
            }
            continue;
        }
        cmds.push(format!("route replace {}", r.ip_args().join(" ")));
    }
    ip_batch(&net.enforce, "installing the network policy", &cmds)?;
    attest(net, &expected)
}

/// FR-18 from observed state: the kernel's route table against the plan,
/// the reject table, no IPv6 address, and the helper alive.
fn attest(net: &Network, expected: &Plan) -> Result<(), String> {
    let routes = ip_show(&net.enforce, &["-4", "route", "show"])?;
    expected
        .verify_routes(&routes)
        .map_err(|e| format!("network readiness: {e}"))?;
    let local = ip_show(&net.reject, &["-4", "route", "show", "table", "local"])?;
    netpolicy::verify_reject_table(&local).map_err(|e| format!("network readiness: {e}"))?;
    let v6 = ip_show(&net.enforce, &["-6", "-o", "addr", "show"])?;
    if !v6.trim().is_empty() {
        return Err(format!(
            "network readiness: IPv6 addresses remain in the enforcement namespace: {}",
            v6.trim()
        ));
    }
    if !sys::same_process(net.slirp.id() as i32, net.slirp_start) {
        return Err("network readiness: slirp4netns is not running".into());
    }
    Ok(())
}

pub fn stop_slirp(net: &mut Network) {
    if sys::same_process(net.slirp.id() as i32, net.slirp_start) {
        let _ = net.slirp.kill();
    }
    let _ = net.slirp.wait();
}
