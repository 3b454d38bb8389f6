//! The plans the Host Coordinator hands the Runtime Supervisor: one frame
//! per file in the generation dir (`netplan`, `views`, `anchor.plan`),
//! named on the supervisor's command line. The generation dir is the
//! user's, never the sandbox's.

use std::path::Path;

use super::{dec_abs_path, dec_path, enc_path, FileError, Message, UnexpectedMessage};
use std::path::PathBuf;

use crate::config::Prefix;
use crate::wire::codec::{Dec, DecodeError, Enc};

// The plans' vocabulary. Their behaviour lives with the roles that plan
// and install them (`net::policy`, `storage::anchor`, `view::sentry`
// re-export them and add methods); the types are here so that this edge
// depends on nothing above it.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// In the router: `P via 10.0.2.2 dev tap0` (forwarded to slirp4netns).
    Helper,
    /// In the router: `local P dev lo table main` (refused there).
    Reject,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRoute {
    pub prefix: Prefix,
    pub kind: RouteKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub enabled: bool,
    pub custom_dns: bool,
    pub routes: Vec<PlanRoute>,
    /// Allow-by-name mode: the router delivers the sandbox's traffic to the
    /// egress gate (`net::gate`) instead of forwarding it.
    pub gate: Option<GatePlan>,
}

/// The egress gate's part of the install plan (`net::policy::Policy::plan`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatePlan {
    /// `network.mode = "log"`: every name is allowed and logged.
    pub log_only: bool,
    /// The names the Domain may reach (`[network] hosts` and the profile's).
    pub hosts: Vec<crate::config::hosts::HostPattern>,
    /// Resolvers the gate asks, from the router namespace.
    pub upstream: Vec<std::net::Ipv4Addr>,
    /// Routes the router still forwards for the sandbox (its table
    /// `GATE_TABLE`): profile `allow` ranges and slirp4netns's gateway
    /// (`Helper`); denies inside them (`Reject`: back to the gate).
    pub forwarded: Vec<PlanRoute>,
    /// `network.idle_timeout_s`: the gate closes a relayed connection with
    /// no byte either way for this long.
    pub idle_timeout_s: u32,
}

/// The State Anchor's overlay driver for one persisted path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Kernel,
    Fuse,
}

/// One persisted path's overlay (`storage::anchor::prepare_generation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnchorMount {
    pub guest: String,
    pub key: String,
    /// Lower directory (the image's tree at `guest`, or an empty dir).
    pub lower: PathBuf,
    /// `anchor/KEY`: holds `upper`, `work` and `driver`.
    pub key_dir: PathBuf,
    /// Mount point in the generation dir, bound at `guest` in the bundle.
    pub target: PathBuf,
}

/// One FUSE view: `source` on the host, served at `mountpoint` (a directory
/// in the generation dir, visible only in the supervisor's mount namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewSpec {
    pub source: PathBuf,
    pub mountpoint: PathBuf,
    /// The ignored store (workspace view with `isolate_ignored`).
    pub store: Option<PathBuf>,
    /// The view's root is a Git directory (a linked worktree's common dir).
    pub git_root: bool,
    /// View paths host Git reads configuration or hooks from (its effective
    /// `core.hooksPath`, config files included from the workspace): read-only.
    pub protect: Vec<PathBuf>,
    /// The profile's `host_config`: view paths added to the host-tool
    /// table (`view::hosttool`), Domain-side with a store, read-only without.
    pub host_config: Vec<PathBuf>,
    /// The profile's `host_config_writable`: view paths at or below which
    /// nothing is a host-tool path.
    pub host_writable: Vec<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanMsg {
    /// The network install plan (`netpolicy::Policy::plan`).
    Network(Plan),
    /// The workspace views to serve (`gitsentry::prepare_views`) and the
    /// guest id the developer appears as in them (0, or a profile `user`'s).
    Views { owner: u32, views: Vec<ViewSpec> },
    /// The State Anchor's mounts (`anchor::prepare_generation`).
    Anchor { prefer: Driver, mounts: Vec<AnchorMount> },
}

fn enc_driver(e: &mut Enc, d: Driver) {
    e.u8(match d {
        Driver::Kernel => 1,
        Driver::Fuse => 2,
    });
}

fn dec_driver(d: &mut Dec) -> Result<Driver, DecodeError> {
    match d.u8()? {
        1 => Ok(Driver::Kernel),
        2 => Ok(Driver::Fuse),
        _ => Err(DecodeError::BadValue("driver")),
    }
}

fn enc_route(e: &mut Enc, r: &PlanRoute) {
    let a = match r.prefix.addr {
        std::net::IpAddr::V4(a) => a.octets(),
        // Never planned (`Policy::routes` is IPv4 only); an
        // unmatchable prefix the decoder refuses.
        std::net::IpAddr::V6(_) => [255; 4],
    };
    for b in a {
        e.u8(b);
    }
    e.u8(r.prefix.len).u8(match r.kind {
        RouteKind::Helper => 1,
        RouteKind::Reject => 2,
    });
}

fn dec_gate(d: &mut Dec) -> Result<Option<GatePlan>, DecodeError> {
    if !d.flag()? {
        return Ok(None);
    }
    let log_only = d.flag()?;
    let mut hosts = Vec::new();
    for s in d.strs()? {
        let h: crate::config::hosts::HostPattern = s.parse().map_err(|_| DecodeError::BadValue("host pattern"))?;
        // Only the canonical spelling (what the encoder writes): a pattern
        // the parser would normalize (case, a trailing dot) is malformed.
        if h.to_string() != s {
            return Err(DecodeError::BadValue("host pattern"));
        }
        hosts.push(h);
    }
    let mut upstream = Vec::new();
    for _ in 0..d.count()? {
        let b: [u8; 4] = d.bytes()?.try_into().map_err(|_| DecodeError::BadValue("resolver"))?;
        upstream.push(std::net::Ipv4Addr::from(b));
    }
    let mut forwarded = Vec::new();
    for _ in 0..d.count()? {
        let r = dec_route(d, &forwarded)?;
        forwarded.push(r);
    }
    let idle_timeout_s = d.u32()?;
    if !(1..=crate::config::MAX_IDLE_TIMEOUT_S).contains(&idle_timeout_s) {
        return Err(DecodeError::BadValue("idle timeout"));
    }
    Ok(Some(GatePlan {
        log_only,
        hosts,
        upstream,
        forwarded,
        idle_timeout_s,
    }))
}

/// An IPv4 prefix with its host bits zero, no route twice.
fn dec_route(d: &mut Dec, seen: &[PlanRoute]) -> Result<PlanRoute, DecodeError> {
    let a: [u8; 4] = d.take(4)?.try_into().unwrap();
    let len = d.u8()?;
    let prefix = Prefix {
        addr: std::net::Ipv4Addr::from(a).into(),
        len,
    };
    if len > 32 || prefix.network() != prefix || seen.iter().any(|r| r.prefix == prefix) {
        return Err(DecodeError::BadValue("route prefix"));
    }
    let kind = match d.u8()? {
        1 => RouteKind::Helper,
        2 => RouteKind::Reject,
        _ => return Err(DecodeError::BadValue("route kind")),
    };
    Ok(PlanRoute { prefix, kind })
}

impl Message for PlanMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            PlanMsg::Network(p) => {
                let mut e = Enc::new(1);
                e.u8(p.enabled as u8).u8(p.custom_dns as u8).u32(p.routes.len() as u32);
                for r in &p.routes {
                    enc_route(&mut e, r);
                }
                match &p.gate {
                    None => {
                        e.u8(0);
                    }
                    Some(g) => {
                        e.u8(1).u8(g.log_only as u8);
                        e.strs(&g.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>());
                        e.u32(g.upstream.len() as u32);
                        for a in &g.upstream {
                            e.bytes(&a.octets());
                        }
                        e.u32(g.forwarded.len() as u32);
                        for r in &g.forwarded {
                            enc_route(&mut e, r);
                        }
                        e.u32(g.idle_timeout_s);
                    }
                }
                e.finish()
            }
            PlanMsg::Views { owner, views } => {
                let mut e = Enc::new(2);
                e.u32(*owner).u32(views.len() as u32);
                for v in views {
                    e.u8(v.git_root as u8);
                    enc_path(&mut e, &v.source);
                    enc_path(&mut e, &v.mountpoint);
                    match &v.store {
                        Some(s) => {
                            e.u8(1);
                            enc_path(&mut e, s);
                        }
                        None => {
                            e.u8(0);
                        }
                    }
                    e.u32(v.protect.len() as u32);
                    for p in &v.protect {
                        enc_path(&mut e, p);
                    }
                    e.u32(v.host_config.len() as u32);
                    for p in &v.host_config {
                        enc_path(&mut e, p);
                    }
                    e.u32(v.host_writable.len() as u32);
                    for p in &v.host_writable {
                        enc_path(&mut e, p);
                    }
                }
                e.finish()
            }
            PlanMsg::Anchor { prefer, mounts } => {
                let mut e = Enc::new(3);
                enc_driver(&mut e, *prefer);
                e.u32(mounts.len() as u32);
                for m in mounts {
                    e.str(&m.guest);
                    enc_path(&mut e, &m.lower);
                    enc_path(&mut e, &m.key_dir);
                    enc_path(&mut e, &m.target);
                }
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => {
                let (enabled, custom_dns) = (d.flag()?, d.flag()?);
                let mut routes = Vec::new();
                for _ in 0..d.count()? {
                    let r = dec_route(&mut d, &routes)?;
                    routes.push(r);
                }
                let gate = dec_gate(&mut d)?;
                PlanMsg::Network(Plan {
                    enabled,
                    custom_dns,
                    routes,
                    gate,
                })
            }
            2 => {
                let owner = d.u32()?;
                let mut views = Vec::new();
                for _ in 0..d.count()? {
                    let git_root = d.flag()?;
                    let source = dec_abs_path(&mut d)?;
                    let mountpoint = dec_abs_path(&mut d)?;
                    let store = if d.flag()? { Some(dec_abs_path(&mut d)?) } else { None };
                    let protect = (0..d.count()?).map(|_| dec_path(&mut d)).collect::<Result<_, _>>()?;
                    let host_config = (0..d.count()?).map(|_| dec_path(&mut d)).collect::<Result<_, _>>()?;
                    let host_writable = (0..d.count()?).map(|_| dec_path(&mut d)).collect::<Result<_, _>>()?;
                    views.push(ViewSpec {
                        source,
                        mountpoint,
                        store,
                        git_root,
                        protect,
                        host_config,
                        host_writable,
                    });
                }
                PlanMsg::Views { owner, views }
            }
            3 => {
                let prefer = dec_driver(&mut d)?;
                let mut mounts = Vec::new();
                for _ in 0..d.count()? {
                    let guest = d.str()?;
                    if !guest.starts_with('/') {
                        return Err(DecodeError::BadValue("guest path"));
                    }
                    let lower = dec_abs_path(&mut d)?;
                    let key_dir = dec_abs_path(&mut d)?;
                    let target = dec_abs_path(&mut d)?;
                    let key = key_dir
                        .file_name()
                        .map(|n| n.to_string_lossy().to_string())
                        .ok_or(DecodeError::BadValue("key dir"))?;
                    mounts.push(AnchorMount {
                        guest,
                        key,
                        lower,
                        key_dir,
                        target,
                    });
                }
                PlanMsg::Anchor { prefer, mounts }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            PlanMsg::Network(_) => "Network",
            PlanMsg::Views { .. } => "Views",
            PlanMsg::Anchor { .. } => "Anchor",
        }
    }
}

/// Writes one plan file (the coordinator's side).
pub fn write_plan(path: &Path, plan: &PlanMsg) -> std::io::Result<()> {
    std::fs::write(path, plan.encode())
}

fn unexpected(path: &Path, expected: &'static str, m: &PlanMsg) -> FileError {
    FileError::Unexpected(path.to_path_buf(), UnexpectedMessage::of(expected, m))
}

/// The supervisor's side: the network plan in `path`.
pub fn read_network(path: &Path) -> Result<Plan, FileError> {
    match super::read_one::<PlanMsg>(path)? {
        PlanMsg::Network(p) => Ok(p),
        m => Err(unexpected(path, "Network", &m)),
    }
}

/// The supervisor's side: the view owner and the views in `path`.
pub fn read_views(path: &Path) -> Result<(u32, Vec<ViewSpec>), FileError> {
    match super::read_one::<PlanMsg>(path)? {
        PlanMsg::Views { owner, views } => Ok((owner, views)),
        m => Err(unexpected(path, "Views", &m)),
    }
}

/// The supervisor's side: the State Anchor plan in `path`.
pub fn read_anchor(path: &Path) -> Result<(Driver, Vec<AnchorMount>), FileError> {
    match super::read_one::<PlanMsg>(path)? {
        PlanMsg::Anchor { prefer, mounts } => Ok((prefer, mounts)),
        m => Err(unexpected(path, "Anchor", &m)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;

    pub(crate) fn samples() -> Vec<PlanMsg> {
        let route = |s: &str, kind| PlanRoute {
            prefix: s.parse().unwrap(),
            kind,
        };
        vec![
            PlanMsg::Network(Plan {
                enabled: true,
                custom_dns: false,
                routes: vec![
                    route("0.0.0.0/0", RouteKind::Helper),
                    route("10.0.0.0/8", RouteKind::Reject),
                    route("198.18.0.7/32", RouteKind::Helper),
                ],
                gate: None,
            }),
            PlanMsg::Network(Plan {
                enabled: false,
                custom_dns: true,
                routes: vec![],
                gate: None,
            }),
            PlanMsg::Network(Plan {
                enabled: true,
                custom_dns: true,
                routes: vec![route("0.0.0.0/0", RouteKind::Helper)],
                gate: Some(GatePlan {
                    log_only: false,
                    hosts: vec!["a.test".parse().unwrap(), "*.b.test:22".parse().unwrap()],
                    upstream: vec!["198.18.0.2".parse().unwrap()],
                    forwarded: vec![
                        route("198.18.4.0/24", RouteKind::Helper),
                        route("198.18.4.8/29", RouteKind::Reject),
                    ],
                    idle_timeout_s: 90,
                }),
            }),
            PlanMsg::Views {
                owner: 1000,
                views: vec![
                    ViewSpec {
                        source: PathBuf::from(std::ffi::OsStr::from_bytes(b"/home/u/p\t\n\xff")),
                        mountpoint: "/run/g/view-workspace".into(),
                        store: Some("/d/ignored".into()),
                        git_root: false,
                        protect: vec![".githooks".into(), "conf/x".into()],
                        host_config: vec![".vscode".into()],
                        host_writable: vec![".idea".into()],
                    },
                    ViewSpec {
                        source: "/home/u/repo/.git".into(),
                        mountpoint: "/run/g/view-common".into(),
                        store: None,
                        git_root: true,
                        protect: vec![],
                        host_config: vec![],
                        host_writable: vec![],
                    },
                ],
            },
            PlanMsg::Anchor {
                prefer: Driver::Fuse,
                mounts: vec![AnchorMount {
                    guest: "/home/agent".into(),
                    key: "home%2fagent".into(),
                    lower: "/s/lowers/a/rootfs/home/agent".into(),
                    key_dir: "/d/anchor/home%2fagent".into(),
                    target: "/run/g/anchor/home%2fagent".into(),
                }],
            },
            PlanMsg::Anchor {
                prefer: Driver::Kernel,
                mounts: vec![],
            },
        ]
    }

    #[test]
    fn plans_refuse_what_the_supervisor_must_not_do() {
        let bad_prefix = {
            let mut e = Enc::new(1);
            e.u8(1).u8(0).u32(1).u8(10).u8(0).u8(0).u8(1).u8(8).u8(1);
            e.finish()
        };
        assert_eq!(
            PlanMsg::decode(&bad_prefix[4..]),
            Err(DecodeError::BadValue("route prefix")),
            "host bits set"
        );
        let twice = {
            let mut e = Enc::new(1);
            e.u8(1).u8(0).u32(2);
            for _ in 0..2 {
                e.u8(10).u8(0).u8(0).u8(0).u8(8).u8(1);
            }
            e.finish()
        };
        assert_eq!(PlanMsg::decode(&twice[4..]), Err(DecodeError::BadValue("route prefix")));
        let relative = {
            let mut e = Enc::new(3);
            e.u8(1).u32(1).str("/a").str("lower").str("/k/a").str("/t/a");
            e.finish()
        };
        assert_eq!(
            PlanMsg::decode(&relative[4..]),
            Err(DecodeError::BadValue("absolute path"))
        );
    }

    /// The gate's host patterns (a name and a port, as the client's port
    /// forwards are an address and ports) read only in the spelling the
    /// encoder writes: a second port, a leading zero, upper case or a
    /// trailing dot are refused, never normalized into other bytes.
    #[test]
    fn gate_hosts_read_only_their_canonical_spelling() {
        let plan = samples().swap_remove(2);
        let bytes = plan.encode()[4..].to_vec();
        let at = bytes.windows(10).position(|w| w == b"\x06\0\0\0a.test").unwrap();
        let with = |host: &str| {
            let mut b = bytes[..at].to_vec();
            b.extend_from_slice(&(host.len() as u32).to_le_bytes());
            b.extend_from_slice(host.as_bytes());
            b.extend_from_slice(&bytes[at + 10..]);
            b
        };
        for good in ["a.test", "a.test:8443", "*.a.test:1"] {
            let m = PlanMsg::decode(&with(good)).unwrap();
            assert_eq!(&m.encode()[4..], &with(good)[..], "{good}");
        }
        for bad in [
            "a.test:8443:1",
            "a.test:08443",
            "a.test:0",
            "A.test",
            "a.test.",
            "a.test:",
            "[::1]:80",
        ] {
            assert_eq!(
                PlanMsg::decode(&with(bad)),
                Err(DecodeError::BadValue("host pattern")),
                "{bad}"
            );
        }
    }

    #[test]
    fn each_reader_takes_only_its_plan() {
        let dir = std::env::temp_dir().join(format!("lz-wire-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("netplan");
        write_plan(&f, &samples()[0]).unwrap();
        assert_eq!(PlanMsg::Network(read_network(&f).unwrap()), samples()[0]);
        let e = read_views(&f).unwrap_err().to_string();
        assert!(e.ends_with("expected Views, received Network"), "{e}");
        assert!(read_anchor(&f).is_err());
        std::fs::write(&f, "lazaret-netplan 2\nmode slirp\n").unwrap();
        assert!(read_network(&f).unwrap_err().to_string().contains("malformed"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
