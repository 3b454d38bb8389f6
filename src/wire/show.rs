//! What a running Domain publishes for the CLI to show (`lazaret net
//! show`): one frame per file in the generation dir, written durably by the
//! Host Coordinator (`net-readiness` once the network is attested, `ports`
//! once the forwards are installed), and by the Runtime Supervisor
//! (`disk`, the disk budget its views count, for `lazaret ps`). The CLI
//! never opens the store; it reads these. The generation dir is the user's, never the sandbox's.

use std::net::Ipv4Addr;
use std::path::Path;

use super::{dec_pid, FileError, Message, UnexpectedMessage};
use crate::config::ports::PortForward;
use crate::wire::codec::{Dec, DecodeError, Enc};

/// The network readiness the coordinator attested before publication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetReadiness {
    pub generation: u64,
    pub sidecar_id: String,
    pub policy_digest: String,
    pub netns_inode: u64,
    pub fingerprint: String,
    /// slirp4netns's pid, with a network.
    pub helper_pid: Option<i32>,
    /// The probe's report, one line per check (already escaped).
    pub probe: Vec<String>,
    /// Where the policy is enforced, with a network.
    pub router: Option<RouterFacts>,
}

/// The router namespace and what its routes do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterFacts {
    pub netns_inode: u64,
    /// Destinations the router refuses (local routes).
    pub refused: u32,
    /// Destinations the router forwards to slirp4netns.
    pub forwarded: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShowMsg {
    /// `net-readiness`.
    NetReadiness(NetReadiness),
    /// `ports`: the installed host port forwards.
    Ports(Vec<PortForward>),
    /// `disk`: the Domain's disk budget as the supervisor's views count it
    /// (`view::budget`), for `lazaret ps`.
    Disk { used: u64, cap: u64 },
}

impl Message for ShowMsg {
    fn encode(&self) -> Vec<u8> {
        match self {
            ShowMsg::NetReadiness(r) => {
                let mut e = Enc::new(1);
                e.u64(r.generation)
                    .str(&r.sidecar_id)
                    .str(&r.policy_digest)
                    .u64(r.netns_inode)
                    .str(&r.fingerprint);
                match r.helper_pid {
                    Some(p) => e.u8(1).i32(p),
                    None => e.u8(0),
                };
                e.strs(&r.probe);
                match r.router {
                    Some(f) => e.u8(1).u64(f.netns_inode).u32(f.refused).u32(f.forwarded),
                    None => e.u8(0),
                };
                e.finish()
            }
            ShowMsg::Ports(ports) => {
                let mut e = Enc::new(2);
                e.u32(ports.len() as u32);
                for p in ports {
                    e.u32(u32::from(p.addr)).u16(p.host).u16(p.guest);
                }
                e.finish()
            }
            ShowMsg::Disk { used, cap } => {
                let mut e = Enc::new(3);
                e.u64(*used).u64(*cap);
                e.finish()
            }
        }
    }

    fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut d = Dec::new(payload);
        let m = match d.u8()? {
            1 => ShowMsg::NetReadiness(NetReadiness {
                generation: d.u64()?,
                sidecar_id: d.str()?,
                policy_digest: d.str()?,
                netns_inode: d.u64()?,
                fingerprint: d.str()?,
                helper_pid: if d.flag()? { Some(dec_pid(&mut d)?) } else { None },
                probe: d.strs()?,
                router: if d.flag()? {
                    Some(RouterFacts {
                        netns_inode: d.u64()?,
                        refused: d.u32()?,
                        forwarded: d.u32()?,
                    })
                } else {
                    None
                },
            }),
            2 => {
                let n = d.count()?;
                let mut ports = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    let addr = Ipv4Addr::from(d.u32()?);
                    let (host, guest) = (d.u16()?, d.u16()?);
                    if host == 0 || guest == 0 {
                        return Err(DecodeError::BadValue("port"));
                    }
                    ports.push(PortForward { addr, host, guest });
                }
                ShowMsg::Ports(ports)
            }
            3 => {
                let (used, cap) = (d.u64()?, d.u64()?);
                if cap == 0 {
                    return Err(DecodeError::BadValue("disk cap"));
                }
                ShowMsg::Disk { used, cap }
            }
            t => return Err(DecodeError::UnknownTag(t)),
        };
        d.end()?;
        Ok(m)
    }

    fn name(&self) -> &'static str {
        match self {
            ShowMsg::NetReadiness(_) => "NetReadiness",
            ShowMsg::Ports(_) => "Ports",
            ShowMsg::Disk { .. } => "Disk",
        }
    }
}

/// Replaces `path` with `msg` atomically (a reader sees the old or the
/// new file, never a torn one). Not durably: these are files of a live
/// Domain's runtime dir (`gen/`), read only while it runs and removed
/// with it, so no fsync is on the start's path.
pub fn write(path: &Path, msg: &ShowMsg) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    crate::sys::write_replace(path, Path::new(&tmp), &msg.encode(), 0o600)
}

/// The CLI's side: the readiness in `path`.
pub fn read_readiness(path: &Path) -> Result<NetReadiness, FileError> {
    match super::read_one::<ShowMsg>(path)? {
        ShowMsg::NetReadiness(r) => Ok(r),
        m => Err(FileError::Unexpected(
            path.to_path_buf(),
            UnexpectedMessage::of("NetReadiness", &m),
        )),
    }
}

/// The CLI's side: (used, cap) of the disk budget in `path`.
pub fn read_disk(path: &Path) -> Result<(u64, u64), FileError> {
    match super::read_one::<ShowMsg>(path)? {
        ShowMsg::Disk { used, cap } => Ok((used, cap)),
        m => Err(FileError::Unexpected(
            path.to_path_buf(),
            UnexpectedMessage::of("Disk", &m),
        )),
    }
}

/// The CLI's side: the installed forwards in `path`.
pub fn read_ports(path: &Path) -> Result<Vec<PortForward>, FileError> {
    match super::read_one::<ShowMsg>(path)? {
        ShowMsg::Ports(p) => Ok(p),
        m => Err(FileError::Unexpected(
            path.to_path_buf(),
            UnexpectedMessage::of("Ports", &m),
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn samples() -> Vec<ShowMsg> {
        vec![
            ShowMsg::NetReadiness(NetReadiness {
                generation: 3,
                sidecar_id: "a1b2c3d4".into(),
                policy_digest: "sha256:00ff".into(),
                netns_inode: 4026532001,
                fingerprint: "f00d".into(),
                helper_pid: Some(4242),
                probe: vec!["ok dns 10.0.2.3: answered in 2 ms".into()],
                router: Some(RouterFacts {
                    netns_inode: 4026532002,
                    refused: 7,
                    forwarded: 2,
                }),
            }),
            ShowMsg::NetReadiness(NetReadiness {
                generation: 1,
                sidecar_id: "x".into(),
                policy_digest: "d".into(),
                netns_inode: 1,
                fingerprint: "f".into(),
                helper_pid: None,
                probe: vec!["skipped: network.mode = \"none\"".into()],
                router: None,
            }),
            ShowMsg::Ports(vec![PortForward {
                addr: Ipv4Addr::LOCALHOST,
                host: 8080,
                guest: 80,
            }]),
            ShowMsg::Ports(Vec::new()),
            ShowMsg::Disk {
                used: 5 << 20,
                cap: 64 << 20,
            },
        ]
    }

    #[test]
    fn files_round_trip_and_refuse_the_wrong_message_or_old_text() {
        let dir = std::env::temp_dir().join(format!("lz-show-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (r, p) = (dir.join("net-readiness"), dir.join("ports"));
        let s = samples();
        write(&r, &s[0]).unwrap();
        write(&p, &s[2]).unwrap();
        assert_eq!(ShowMsg::NetReadiness(read_readiness(&r).unwrap()), s[0]);
        assert_eq!(ShowMsg::Ports(read_ports(&p).unwrap()), s[2]);
        assert!(matches!(read_ports(&r), Err(FileError::Unexpected(..))));
        std::fs::write(&p, "127.0.0.1:8080:80\n").unwrap();
        assert!(matches!(read_ports(&p), Err(FileError::Malformed(..))));
        assert!(matches!(read_readiness(&dir.join("none")), Err(FileError::Read(..))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
