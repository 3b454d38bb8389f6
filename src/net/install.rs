//! The Network Sidecar role's install path, run by the Runtime Supervisor
//! the generation's sandbox and router network namespaces, the
//! veth between them, slirp4netns on the router, the routes of the install
//! plan, and the read-back of what the kernel actually holds. In two
//! halves: [`prepare`] (the namespaces and the sandbox's side, all runsc
//! reads when it starts) and [`finish`] (the router's side), which the
//! supervisor runs while `runsc run` boots, before init is given its boot
//! request.
//!
//! Topology (docs/network.md): gVisor runs in the *sandbox namespace*,
//! whose only NIC is `lzr0` with one route, `default via 169.254.255.2`,
//! besides `lo` (up, so gVisor gives the sandbox a loopback of its own).
//! `lzr1`, the other end, is in the *router namespace*, together with
//! slirp4netns's `tap0`. The router forwards between them (`ip_forward`,
//! proxy ARP on `tap0` so slirp4netns can answer the sandbox's address) and
//! its main table is the policy: denied prefixes are `local` routes, so the
//! router's own kernel answers a TCP connect with a RST. gVisor only ever
//! owns `lzr0`; nothing the sandbox does to its own routes reaches the
//! router's table.
//!
//! Route and link changes shell out to iproute2 (`ip -batch -`, one process
//! per namespace and step) rather than speaking rtnetlink: the commands are
//! ones verified on the supported hosts, they are easy to read in a log,
//! and the read-back parses `ip route` output that a human can compare.
//! Namespaces are joined with `setns` in the child before exec (the
//! supervisor is root of the user namespace that owns both namespaces).
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

use crate::net::policy::{self as netpolicy, Fault, Plan, RouteKind};
use crate::sys;

/// Where the namespaces are bound, relative to the generation directory.
pub const SANDBOX_FILE: &str = "netns-sandbox";
pub const ROUTER_FILE: &str = "netns-router";
/// slirp4netns finds its ready pipe here.
const SLIRP_READY_FD: i32 = 3;
const SLIRP_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The installed network of one generation.
pub struct Network {
    /// The namespace runsc (and so gVisor) runs in, held for the
    /// generation's life (runsc was started on `SandboxSide`'s).
    #[allow(dead_code)] // held, not read: the fd keeps the namespace
    pub sandbox: OwnedFd,
    /// The enforcement hop: forwards to slirp4netns or refuses.
    pub router: OwnedFd,
    pub slirp: Child,
    pub slirp_start: u64,
    /// Identity of the sandbox namespace.
    pub inode: u64,
    /// Identity of the router namespace.
    pub router_inode: u64,
    /// Allow-by-name mode: the egress gate's threads in the router.
    pub gate: Option<crate::net::gate::Handle>,
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

/// Why the network could not be installed: a variant per step, with the
/// io error (and path) where there is one.
#[derive(Debug)]
pub enum InstallError {
    /// Creating a namespace (`sandbox` or `router`).
    NewNs(&'static str, std::io::Error),
    /// Creating the file a namespace is bound to.
    CreateNsFile(PathBuf, std::io::Error),
    BindNs(PathBuf, std::io::Error),
    /// A named step (sysctls, `ip -batch`) failed with an io error.
    Step(&'static str, std::io::Error),
    /// `ip -batch` could not be started for a named step.
    IpSpawn(&'static str, std::io::Error),
    /// `ip -batch` failed for a named step (its stderr).
    IpFailed(&'static str, String),
    /// `ip` could not be started.
    RunIp(std::io::Error),
    /// Log mode: `nft` could not be started (not installed?).
    NftSpawn(std::io::Error),
    /// Log mode: `nft` failed, or its rule does not read back (the detail).
    NftFailed(String),
    /// `ip ARGS` failed (its args, its stderr).
    IpShow(String, String),
    SlirpPipe(std::io::Error),
    SlirpSpawn(std::io::Error),
    SlirpTimeout,
    SlirpExited,
    NsIdentity(std::io::Error),
    /// The router's own decision for a planned route is not the plan's.
    Lookup(crate::config::Prefix, netpolicy::RouteMismatch),
    /// The installed routes are not the plan's.
    Readiness(netpolicy::RouteMismatch),
    /// IPv6 addresses remain in a namespace (its name, the addresses).
    Ipv6Remains(&'static str, String),
    SlirpGone,
}

impl std::fmt::Display for InstallError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use InstallError::*;
        match self {
            NewNs(which, e) => write!(f, "creating the {which} network namespace: {e}"),
            CreateNsFile(p, e) => write!(f, "creating {}: {e}", p.display()),
            BindNs(p, e) => write!(f, "binding the network namespace to {}: {e}", p.display()),
            Step(what, e) => write!(f, "{what}: {e}"),
            IpSpawn(what, e) => write!(f, "{what}: cannot run ip (install iproute2): {e}"),
            IpFailed(what, err) => write!(f, "{what}: ip failed: {err}"),
            RunIp(e) => write!(f, "cannot run ip: {e}"),
            NftSpawn(e) => write!(
                f,
                "network.mode = \"log\" needs nft (nftables) to hand every TCP port to the egress gate, \
                 and it cannot be run ({e}): install nftables (scripts/install-deps.sh; `lazaret doctor` checks it)"
            ),
            NftFailed(err) => write!(
                f,
                "installing log mode's catch-all rule in the router: nft failed: {err}"
            ),
            IpShow(args, err) => write!(f, "ip {args}: {err}"),
            SlirpPipe(e) => write!(f, "pipe: {e}"),
            SlirpSpawn(e) => write!(
                f,
                "cannot start slirp4netns (install slirp4netns; run `lazaret doctor`): {e}"
            ),
            SlirpTimeout => write!(f, "slirp4netns did not become ready in 10 s"),
            SlirpExited => write!(
                f,
                "slirp4netns exited before it was ready (is /dev/net/tun usable? run `lazaret doctor`)"
            ),
            NsIdentity(e) => write!(f, "netns identity: {e}"),
            Lookup(p, e) => write!(f, "network readiness: route for {p}: {e}"),
            Readiness(e) => write!(f, "network readiness: {e}"),
            Ipv6Remains(name, a) => write!(
                f,
                "network readiness: IPv6 addresses remain in the {name} namespace: {a}"
            ),
            SlirpGone => write!(f, "network readiness: slirp4netns is not running"),
        }
    }
}

impl std::error::Error for InstallError {}

fn bind_ns(fd: &OwnedFd, target: &Path) -> Result<(), InstallError> {
    std::fs::File::create(target).map_err(|e| InstallError::CreateNsFile(target.to_path_buf(), e))?;
    let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
    sys::mount(&src, target, "", sys::MS_BIND, None).map_err(|e| InstallError::BindNs(target.to_path_buf(), e))
}

/// Runs `ip -batch -` in namespace `ns` with `cmds` on stdin.
fn ip_batch(ns: &OwnedFd, what: &'static str, cmds: &[String]) -> Result<(), InstallError> {
    let mut cmd = Command::new(tool("ip"));
    cmd.args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    sys::command_in_netns(&mut cmd, ns);
    let mut child = cmd.spawn().map_err(|e| InstallError::IpSpawn(what, e))?;
    let text = cmds.join("\n") + "\n";
    let _ = child.stdin.take().unwrap().write_all(text.as_bytes());
    let out = child.wait_with_output().map_err(|e| InstallError::Step(what, e))?;
    if !out.status.success() {
        return Err(InstallError::IpFailed(
            what,
            String::from_utf8_lossy(&out.stderr).trim().replace('\n', "; "),
        ));
    }
    Ok(())
}

/// Output of `ip ARGS` in namespace `ns`.
fn ip_show(ns: &OwnedFd, args: &[&str]) -> Result<String, InstallError> {
    IpShow::start(ns, args)?.output()
}

/// `ip ARGS` in namespace `ns`, started; [`IpShow::output`] collects it.
/// The readiness checks start all their readings first, so the `ip`
/// processes (about 2 ms each to start) run side by side. Dropped
/// uncollected (an earlier check failed), the process is killed and
/// reaped.
struct IpShow {
    child: Option<std::process::Child>,
    args: String,
}

impl IpShow {
    fn start(ns: &OwnedFd, args: &[&str]) -> Result<IpShow, InstallError> {
        let mut cmd = Command::new(tool("ip"));
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sys::command_in_netns(&mut cmd, ns);
        let child = cmd.spawn().map_err(InstallError::RunIp)?;
        Ok(IpShow {
            child: Some(child),
            args: args.join(" "),
        })
    }

    /// Waits for the process; its output, whatever its status.
    fn wait(mut self) -> std::io::Result<std::process::Output> {
        self.child.take().expect("collected once").wait_with_output()
    }

    fn output(self) -> Result<String, InstallError> {
        let args = self.args.clone();
        let out = self.wait().map_err(InstallError::RunIp)?;
        if !out.status.success() {
            return Err(InstallError::IpShow(
                args,
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for IpShow {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes `value` to each `/proc/sys/net/...` file of `ns` (paths relative
/// to `/proc/sys/net/`); with `mask_core`, then masks `/proc/sys/net/core`.
fn sysctls(ns: &OwnedFd, what: &'static str, settings: &[(&str, &str)], mask_core: bool) -> Result<(), InstallError> {
    let settings: Vec<(String, String)> = settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    sys::in_netns(ns, move || {
        for (k, v) in &settings {
            std::fs::write(format!("/proc/sys/net/{k}"), v)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{k}: {e}")))?;
        }
        if mask_core {
            // runsc ≤ 20240729 takes any netns in which this directory has
            // rmem_default for the host's. The mount must be
            // made from inside the namespace: /proc/sys/net is per netns.
            sys::mount("lzmask", Path::new("/proc/sys/net/core"), "tmpfs", 0, Some("size=16k"))?;
        }
        Ok(())
    })
    .map_err(|e| InstallError::Step(what, e))
}

/// `ETHTOOL_STSO` (linux/ethtool.h): set TCP segmentation offload.
const ETHTOOL_STSO: u32 = 0x1f;

/// Sets one legacy ethtool flag (`ETHTOOL_S*`) of interface `name` in `ns`.
fn ethtool_set(ns: &OwnedFd, name: &str, cmd: u32, on: bool) -> std::io::Result<()> {
    let owned = name.to_string();
    sys::in_netns(ns, move || sys::ethtool_set(&owned, cmd, on))
}

/// IPv6 off for every interface that exists or will be created:
/// then no inet6 address is left for gVisor to take.
const IPV6_OFF: [(&str, &str); 2] = [
    ("ipv6/conf/all/disable_ipv6", "1"),
    ("ipv6/conf/default/disable_ipv6", "1"),
];

fn start_slirp(router_path: &Path, custom_dns: bool) -> Result<(Child, u64), InstallError> {
    let (rd, wr) = sys::pipe().map_err(InstallError::SlirpPipe)?;
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
    // Host port forwards are added through it (crate::config::ports).
    cmd.arg(format!(
        "--api-socket={}",
        router_path.with_file_name(crate::config::ports::API_SOCKET).display()
    ));
    cmd.arg(router_path)
        .arg(netpolicy::TAP)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    sys::command_coupled(&mut cmd, &[(wr.as_raw_fd(), SLIRP_READY_FD)]);
    let mut child = cmd.spawn().map_err(InstallError::SlirpSpawn)?;
    drop(wr);
    let start = sys::proc_start_time(child.id() as i32).unwrap_or(0);
    let deadline = Instant::now() + SLIRP_READY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(InstallError::SlirpTimeout);
        }
        if sys::wait_readable(&rd, left.min(Duration::from_secs(1))).unwrap_or(false) {
            break;
        }
    }
    let mut buf = [0u8; 8];
    let n = std::fs::File::from(rd).read(&mut buf).unwrap_or(0);
    if n == 0 {
        let _ = child.kill();
        let _ = child.wait();
        return Err(InstallError::SlirpExited);
    }
    Ok((child, start))
}

/// The sandbox's half of a generation's network, made by [`prepare`]:
/// both namespaces, bound in the generation directory, and `lzr0` in the
/// sandbox namespace with its address and its one route. It is all runsc
/// reads when it starts (gVisor copies the namespace's interfaces,
/// addresses and routes into its netstack), so `runsc run` may start on
/// it while [`finish`] installs the router's half. Nothing leaves the
/// sandbox through it yet: the router's end is down, slirp4netns is not
/// there and the router holds no route out.
pub struct SandboxSide {
    sandbox: OwnedFd,
    router: OwnedFd,
    router_path: PathBuf,
}

impl SandboxSide {
    /// The namespace runsc (and so gVisor) runs in.
    pub fn sandbox(&self) -> &OwnedFd {
        &self.sandbox
    }
}

/// The sandbox's half ([`SandboxSide`]): the namespaces, both with IPv6
/// off (before any interface exists in them), the router's sysctls, the
/// veth with the sandbox's address and default route, TSO off on it.
pub fn prepare(gen_dir: &Path) -> Result<SandboxSide, InstallError> {
    let sandbox = sys::new_netns().map_err(|e| InstallError::NewNs("sandbox", e))?;
    let router = sys::new_netns().map_err(|e| InstallError::NewNs("router", e))?;
    let router_path = gen_dir.join(ROUTER_FILE);
    bind_ns(&sandbox, &gen_dir.join(SANDBOX_FILE))?;
    bind_ns(&router, &router_path)?;
    sysctls(&sandbox, "configuring the sandbox network namespace", &IPV6_OFF, true)?;
    let mut router_conf = IPV6_OFF.to_vec();
    router_conf.extend([
        ("ipv4/ip_forward", "1"),
        // Refusals of UDP (port unreachable) must not turn into time-outs.
        ("ipv4/icmp_ratelimit", "0"),
        // Denied destinations are the router's own: it must not answer pings for them.
        ("ipv4/icmp_echo_ignore_all", "1"),
        // No source-routed packets, no redirects towards the sandbox.
        ("ipv4/conf/all/accept_source_route", "0"),
        ("ipv4/conf/default/accept_source_route", "0"),
        ("ipv4/conf/all/send_redirects", "0"),
        ("ipv4/conf/default/send_redirects", "0"),
    ]);
    sysctls(&router, "configuring the router network namespace", &router_conf, false)?;
    let (s, r) = (netpolicy::SANDBOX_ADDR, netpolicy::ROUTER_ADDR);
    let (sif, rif, mtu) = (netpolicy::SANDBOX_IF, netpolicy::ROUTER_IF, netpolicy::MTU);
    ip_batch(
        &sandbox,
        "creating the router link",
        &[
            format!(
                "link add {sif} type veth peer name {rif} netns {}",
                router_path.display()
            ),
            format!("addr add {s}/30 dev {sif}"),
            format!("link set {sif} mtu {mtu} up"),
            // gVisor builds its own loopback (127.0.0.1/8) only from an
            // `lo` that is up here; its packets never leave gVisor's stack.
            "link set lo up".into(),
            // In the same `ip` run (each costs about 2 ms to start): the
            // link is up with its /30, so the gateway is on-link, whether
            // or not the router's end is up yet.
            format!("route add default via {r} dev {sif}"),
        ],
    )?;
    // TSO off on gVisor's NIC: with it on, runsc hands the kernel 64 KiB
    // GSO packets, which cost about a third of the throughput through the
    // router and tap0 (no offloads); off, gVisor segments itself, as it did
    // on slirp4netns's tap0 (scripts/bench-net.sh). Performance only.
    // Before runsc starts: it reads the NIC's offloads when it takes it.
    if let Err(e) = ethtool_set(&sandbox, sif, ETHTOOL_STSO, false) {
        log::warn!("network: cannot turn TSO off on {sif} (throughput may suffer): ethtool on {sif}: {e}");
    }
    // Read back now what runsc will copy into gVisor's stack: the sandbox
    // namespace's table (its link and one default route to the router) and
    // no IPv6 address. Now, not in `finish`: runsc takes the addresses off
    // `lzr0` when it takes the NIC, and it may already have by then.
    let sroutes = IpShow::start(&sandbox, &["-4", "route", "show"])?;
    let v6 = IpShow::start(&sandbox, &["-6", "-o", "addr", "show"])?;
    netpolicy::verify_sandbox_routes(&sroutes.output()?).map_err(InstallError::Readiness)?;
    let v6 = v6.output()?;
    if !v6.trim().is_empty() {
        return Err(InstallError::Ipv6Remains("sandbox", v6.trim().to_string()));
    }
    Ok(SandboxSide {
        sandbox,
        router,
        router_path,
    })
}

/// The router's half, on a [`SandboxSide`], as the plan says: its end of
/// the veth, slirp4netns (reported as `Slirp { pid, start }` as soon as it
/// exists, so the coordinator owns it exactly), the plan's routes and
/// their read-back, and in allow-by-name mode the egress gate (`secrets`
/// go to it; a plan without a gate takes none). On failure slirp4netns is
/// stopped.
pub fn finish(
    side: SandboxSide,
    plan: &Plan,
    gen_dir: &Path,
    secrets: Option<crate::net::terminate::Secrets>,
    fault: Option<Fault>,
    report: &dyn Fn(&crate::wire::supervisor::StatusMsg),
) -> Result<Network, InstallError> {
    let SandboxSide {
        sandbox,
        router,
        router_path,
    } = side;
    let (r, rif, mtu) = (netpolicy::ROUTER_ADDR, netpolicy::ROUTER_IF, netpolicy::MTU);
    ip_batch(
        &router,
        "preparing the router namespace",
        &[
            "link set lo up".into(),
            format!("addr add {r}/30 dev {rif}"),
            format!("link set {rif} mtu {mtu} up"),
        ],
    )?;
    if fault == Some(Fault::SlowRouter) {
        log::warn!("fault injection: the router's half of the network waits before slirp4netns starts");
        std::thread::sleep(netpolicy::SLOW_ROUTER);
    }
    let (slirp, slirp_start) = start_slirp(&router_path, plan.custom_dns)?;
    report(&crate::wire::supervisor::StatusMsg::Slirp {
        pid: slirp.id() as i32,
        start: slirp_start,
    });
    let mut net = Network {
        inode: sys::fd_inode(&sandbox).map_err(InstallError::NsIdentity)?,
        router_inode: sys::fd_inode(&router).map_err(InstallError::NsIdentity)?,
        sandbox,
        router,
        slirp,
        slirp_start,
        gate: None,
    };
    let result = install_routes(&net, plan, fault).and_then(|()| match &plan.gate {
        // Fail closed: secrets without a gate would have no swap point.
        None if secrets.is_some() => Err(InstallError::Step(
            "starting the egress gate",
            std::io::Error::other("the profile has secrets but no egress gate (network.hosts)"),
        )),
        None => Ok(None),
        Some(_) => {
            let log = gen_dir.parent().unwrap_or(gen_dir).join(crate::net::gate::LOG_FILE);
            install_gate(&net, plan).and_then(|()| {
                let gate = crate::net::gate::start(&net.router, plan, log, secrets, fault == Some(Fault::GateDies))
                    .map_err(|e| InstallError::Step("starting the egress gate", e))?;
                if let (Some(port), Some(g)) = (gate.catch_all(), &plan.gate) {
                    install_catch_all(&net.router, g, port, fault)?;
                }
                Ok(Some(gate))
            })
        }
    });
    let result = result.map(|g| net.gate = g);
    if let Err(e) = result {
        stop_slirp(&mut net);
        return Err(e);
    }
    Ok(net)
}

fn install_routes(net: &Network, plan: &Plan, fault: Option<Fault>) -> Result<(), InstallError> {
    // slirp4netns answers ARP only for its own network: the router answers
    // for the sandbox's address on tap0 (at once, not after proxy_delay).
    let tap = netpolicy::TAP;
    sysctls(
        &net.router,
        "configuring the router's tap0",
        &[
            (&format!("ipv4/conf/{tap}/proxy_arp"), "1"),
            (&format!("ipv4/neigh/{tap}/proxy_delay"), "0"),
        ],
        false,
    )?;
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
        let skip = matches!(fault, Some(Fault::SkipOneDeny | Fault::SkipOneDenyVisible));
        if skip && Some(r.prefix) == victim {
            log::warn!(
                "fault injection: not installing the deny route for {} in the router",
                r.prefix
            );
            if fault == Some(Fault::SkipOneDeny) {
                expected.routes.retain(|x| x.prefix != r.prefix);
            }
            continue;
        }
        cmds.push(format!("route replace {}", r.ip_args().join(" ")));
    }
    ip_batch(&net.router, "installing the network policy in the router", &cmds)?;
    attest(net, &expected)
}

/// The router's rules in allow-by-name mode, in order: the sandbox's
/// packets (`iif lzr1`) first see what is still forwarded (table
/// `GATE_TABLE`), then the local table, where `local 0.0.0.0/0` makes
/// every other destination the router's own (the gate's listeners, or a
/// RST); everything else (the gate's own connections, replies from
/// slirp4netns) sees the local table without that route, then main.
pub const GATE_RULES: [&str; 4] = [
    "10:\tfrom all iif lzr1 lookup 100",
    "11:\tfrom all iif lzr1 lookup local",
    "20:\tfrom all lookup local suppress_prefixlength 0",
    "32766:\tfrom all lookup main",
];

fn install_gate(net: &Network, plan: &Plan) -> Result<(), InstallError> {
    let Some(gate) = &plan.gate else { return Ok(()) };
    let (rif, t) = (netpolicy::ROUTER_IF, netpolicy::GATE_TABLE);
    // The forwarded routes first: once `local 0.0.0.0/0` is in the local
    // table, the kernel takes slirp4netns's gateway for a local address and
    // refuses it as a next hop.
    let mut cmds = Vec::new();
    for r in &gate.forwarded {
        let p = r.prefix;
        cmds.push(match r.kind {
            RouteKind::Helper if p.len == 32 && p.addr == std::net::IpAddr::V4(netpolicy::SLIRP_GATEWAY) => {
                format!("route add {p} dev {} table {t}", netpolicy::TAP)
            }
            RouteKind::Helper => format!(
                "route add {p} via {} dev {} onlink table {t}",
                netpolicy::SLIRP_GATEWAY,
                netpolicy::TAP
            ),
            RouteKind::Reject => format!("route add throw {p} table {t}"),
        });
    }
    cmds.extend([
        format!("rule add pref 10 iif {rif} lookup {t}"),
        format!("rule add pref 11 iif {rif} lookup local"),
        "rule add pref 20 lookup local suppress_prefixlength 0".to_string(),
        "rule del pref 0".to_string(),
        "rule del pref 32767".to_string(),
        "route add local 0.0.0.0/0 dev lo table local".to_string(),
    ]);
    ip_batch(&net.router, "installing the egress gate's routes in the router", &cmds)?;
    // Read-back: exactly these rules, and the router's own decision for a
    // packet from the sandbox to a sample of every planned route.
    let rules = ip_show(&net.router, &["-4", "rule", "show"])?;
    let got: Vec<String> = rules
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replacen(' ', "\t", 1)
        })
        .collect();
    let want: Vec<String> = GATE_RULES
        .iter()
        .map(|r| {
            r.replace("lzr1", rif)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replacen(' ', "\t", 1)
        })
        .collect();
    if got != want {
        return Err(InstallError::Readiness(netpolicy::RouteMismatch::Unreadable(format!(
            "the router's rules are {got:?}, expected {want:?}"
        ))));
    }
    let mut samples: Vec<(std::net::Ipv4Addr, RouteKind, crate::config::Prefix)> = plan
        .lookups()
        .into_iter()
        .map(|(a, r)| (a, plan.sandbox_kind(a), r.prefix))
        .collect();
    for r in &gate.forwarded {
        if let std::net::IpAddr::V4(a) = r.prefix.addr {
            samples.push((a, plan.sandbox_kind(a), r.prefix));
        }
    }
    for (a, kind, prefix) in samples {
        let out = ip_show(
            &net.router,
            &[
                "-o",
                "route",
                "get",
                &a.to_string(),
                "from",
                &netpolicy::SANDBOX_ADDR.to_string(),
                "iif",
                rif,
            ],
        );
        let out = match &out {
            Ok(o) => Ok(o.as_str()),
            Err(InstallError::IpShow(_, e)) => Err(e.as_str()),
            Err(_) => return out.map(|_| ()),
        };
        netpolicy::verify_lookup(a, kind, out).map_err(|e| InstallError::Lookup(prefix, e))?;
    }
    Ok(())
}

/// The netfilter table of log mode's catch-all (`nft -f -` input): every
/// TCP SYN arriving from the sandbox for a port the gate does not listen
/// on goes to the gate's transparent catch-all listener at
/// `GATE_ADDR:port` (`tproxy`: no address translation, no connection
/// tracking; the accepted socket's local address is the sandbox's chosen
/// destination), when it is for a synthetic address of the gate's
/// resolver, or for an address the router's main table (the policy)
/// would send to slirp4netns (`fib daddr oif`) and no forwarded route
/// (profile `allow` ranges, slirp4netns's gateway) takes. So a denied
/// address is still refused by the router's kernel, as in enforcing mode.
/// Pure.
pub fn catch_all_rules(gate: &netpolicy::GatePlan, port: u16) -> String {
    let ports: Vec<String> = crate::net::gate::ports(gate).iter().map(u16::to_string).collect();
    let forwarded: Vec<String> = gate
        .forwarded
        .iter()
        .filter(|r| r.kind == RouteKind::Helper)
        .map(|r| {
            if r.prefix.len == 32 {
                r.prefix.addr.to_string()
            } else {
                r.prefix.to_string()
            }
        })
        .collect();
    let daddr = if forwarded.is_empty() {
        String::new()
    } else {
        format!(" ip daddr != {{ {} }}", forwarded.join(", "))
    };
    let (syn_net, syn_len) = crate::net::gate::SYNTHETIC_NET;
    let head = format!(
        "iifname \"{}\" tcp flags & (syn | ack) == syn tcp dport != {{ {} }}",
        netpolicy::ROUTER_IF,
        ports.join(", ")
    );
    let to = format!("tproxy ip to {}:{port}", netpolicy::GATE_ADDR);
    format!(
        "table ip {CATCH_ALL_TABLE} {{\n  chain gate {{\n    type filter hook prerouting priority mangle; policy accept;\n    \
         {head} ip daddr {syn_net}/{syn_len} {to}\n    \
         {head}{daddr} fib daddr oif \"{tap}\" {to}\n  }}\n}}\n",
        tap = netpolicy::TAP,
    )
}

/// The router's netfilter table of log mode (docs/network.md).
pub const CATCH_ALL_TABLE: &str = "lazaret";

/// Log mode: installs [`catch_all_rules`] in the router and reads the
/// table back (two rules, each a `tproxy` to the catch-all). Without `nft` the
/// start fails: log mode never runs with ports the gate cannot see.
fn install_catch_all(
    router: &OwnedFd,
    gate: &netpolicy::GatePlan,
    port: u16,
    fault: Option<Fault>,
) -> Result<(), InstallError> {
    let nft = if fault == Some(Fault::NoNft) {
        PathBuf::from("/nonexistent/nft")
    } else {
        tool("nft")
    };
    let mut cmd = Command::new(&nft);
    cmd.args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    sys::command_in_netns(&mut cmd, router);
    let mut child = cmd.spawn().map_err(InstallError::NftSpawn)?;
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all(catch_all_rules(gate, port).as_bytes());
    let out = child
        .wait_with_output()
        .map_err(|e| InstallError::Step("installing log mode's catch-all rule", e))?;
    if !out.status.success() {
        return Err(InstallError::NftFailed(
            String::from_utf8_lossy(&out.stderr).trim().replace('\n', "; "),
        ));
    }
    let mut cmd = Command::new(tool("nft"));
    cmd.args(["list", "table", "ip", CATCH_ALL_TABLE]).stdin(Stdio::null());
    sys::command_in_netns(&mut cmd, router);
    let out = cmd.output().map_err(InstallError::NftSpawn)?;
    let listed = String::from_utf8_lossy(&out.stdout);
    let target = format!("to {}:{port}", netpolicy::GATE_ADDR);
    let rules: Vec<&str> = listed.lines().filter(|l| l.contains("tproxy")).collect();
    let each = |r: &&str| r.contains(&target) && r.contains(netpolicy::ROUTER_IF);
    if !out.status.success() || rules.len() != 2 || !rules.iter().all(each) {
        return Err(InstallError::NftFailed(format!(
            "the router's table {CATCH_ALL_TABLE} reads back as {:?}, expected two tproxy rules {target}",
            listed.trim()
        )));
    }
    Ok(())
}

/// The router's own route lookups for `plan` (a packet from the sandbox
/// arriving on lzr1), started: `ip -batch` has them all on its stdin.
fn start_lookups(net: &Network, plan: &Plan) -> Result<IpShow, InstallError> {
    let from = netpolicy::SANDBOX_ADDR;
    let cmds: Vec<String> = plan
        .lookups()
        .iter()
        .map(|(a, _)| format!("route get {a} from {from} iif {}", netpolicy::ROUTER_IF))
        .collect();
    let mut cmd = Command::new(tool("ip"));
    cmd.args(["-o", "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    sys::command_in_netns(&mut cmd, &net.router);
    let mut child = cmd.spawn().map_err(InstallError::RunIp)?;
    let _ = child
        .stdin
        .take()
        .unwrap()
        .write_all((cmds.join("\n") + "\n").as_bytes());
    Ok(IpShow {
        child: Some(child),
        args: "-o -force -batch -".into(),
    })
}

/// Each of the started lookups ([`start_lookups`]) checked against its
/// planned decision.
fn attest_lookups(started: IpShow, plan: &Plan) -> Result<usize, InstallError> {
    let lookups = plan.lookups();
    let out = started.wait().map_err(|e| InstallError::Step("ip route get", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    for (addr, route) in &lookups {
        // One line per answered lookup: `[TYPE] ADDR from …`.
        let a = addr.to_string();
        let line = text.lines().find(|l| {
            let f: Vec<&str> = l.split_whitespace().take(2).collect();
            f.first() == Some(&a.as_str()) || f.get(1) == Some(&a.as_str())
        });
        let result = match line {
            Some(l) => netpolicy::verify_lookup(*addr, route.kind, Ok(l)),
            None => netpolicy::verify_lookup(*addr, route.kind, Err(errors.trim())),
        };
        result.map_err(|e| InstallError::Lookup(route.prefix, e))?;
    }
    Ok(lookups.len())
}

/// Readiness from observed state: the router's table against the plan and its
/// own decision for a sample of every planned route, no IPv6 address in
/// the router, and the helper alive (the sandbox's table and its IPv6 were
/// read back by [`prepare`], before runsc took its NIC).
///
/// Every reading is started before the first is judged (they only read),
/// and they are judged in this order, so the first failure is the one
/// reported, as when they ran one after another. A reading left unjudged
/// by an earlier failure is reaped when its handle drops.
fn attest(net: &Network, expected: &Plan) -> Result<(), InstallError> {
    let routes = IpShow::start(&net.router, &["-4", "route", "show", "table", "main"])?;
    let lookups = start_lookups(net, expected)?;
    let v6 = [("router", IpShow::start(&net.router, &["-6", "-o", "addr", "show"])?)];
    expected
        .verify_routes(&routes.output()?)
        .map_err(InstallError::Readiness)?;
    let n = attest_lookups(lookups, expected)?;
    log::info!("network readiness: the router's own lookups agree with the plan for {n} routes");
    for (name, reading) in v6 {
        let v6 = reading.output()?;
        if !v6.trim().is_empty() {
            return Err(InstallError::Ipv6Remains(name, v6.trim().to_string()));
        }
    }
    if !sys::same_process(net.slirp.id() as i32, net.slirp_start) {
        return Err(InstallError::SlirpGone);
    }
    Ok(())
}

pub fn stop_slirp(net: &mut Network) {
    if sys::same_process(net.slirp.id() as i32, net.slirp_start) {
        let _ = net.slirp.kill();
    }
    let _ = net.slirp.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catch_all_spares_gate_ports_and_forwarded_ranges() {
        let gate = netpolicy::GatePlan {
            log_only: true,
            hosts: vec!["git.test:22".parse().unwrap()],
            upstream: vec![],
            idle_timeout_s: crate::config::DEFAULT_IDLE_TIMEOUT_S,
            forwarded: vec![
                netpolicy::PlanRoute {
                    prefix: "203.0.113.0/24".parse().unwrap(),
                    kind: RouteKind::Helper,
                },
                netpolicy::PlanRoute {
                    prefix: "203.0.113.7/32".parse().unwrap(),
                    kind: RouteKind::Reject,
                },
                netpolicy::PlanRoute {
                    prefix: "10.0.2.2/32".parse().unwrap(),
                    kind: RouteKind::Helper,
                },
            ],
        };
        let r = catch_all_rules(&gate, 40000);
        let head = "iifname \"lzr1\" tcp flags & (syn | ack) == syn tcp dport != { 22, 80, 443, 3128 }";
        // A synthetic address (a name the gate's resolver gave) on any
        // other port goes to the catch-all.
        assert!(
            r.contains(&format!(
                "{head} ip daddr 100.127.0.0/16 tproxy ip to 169.254.255.2:40000"
            )),
            "{r}"
        );
        // So does an address the router would send to slirp4netns, but not
        // one of the forwarded ranges (a reject route inside one is not a
        // forward) and never one the policy rejects (the fib condition).
        assert!(
            r.contains(&format!(
                "{head} ip daddr != {{ 203.0.113.0/24, 10.0.2.2 }} fib daddr oif \"tap0\" tproxy ip to 169.254.255.2:40000"
            )),
            "{r}"
        );
        assert!(!r.contains("203.0.113.7"), "{r}");
        assert!(
            r.starts_with("table ip lazaret {") && r.contains("hook prerouting"),
            "{r}"
        );
        let bare = netpolicy::GatePlan {
            forwarded: vec![],
            ..gate
        };
        let b = catch_all_rules(&bare, 1);
        assert!(
            b.contains("== syn tcp dport") && !b.contains("daddr != {"),
            "no empty set: {b}"
        );
    }
}
