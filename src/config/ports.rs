//! Host port forwards into a Domain (`ports = [...]` in a profile,
//! `--publish` on `lazaret run`).
//!
//! slirp4netns runs in the host's network namespace, so it can listen on a
//! host address; its API socket (`--api-socket`, in the generation dir)
//! takes `add_hostfwd` requests. The coordinator sends one per forward after
//! the network is attested and before it publishes the Domain: a forward
//! that cannot be added (port in use, privileged port) fails the start.
//! slirp4netns connects each accepted connection to the sandbox's address
//! (169.254.255.1, gVisor's NIC) at the guest port: slirp4netns's own guest
//! address (10.0.2.100) is the router namespace's tap0, and the router
//! answers ARP for the sandbox's address on tap0 and routes it to the
//! sandbox's link (docs/network.md). The
//! listening sockets belong to slirp4netns, so they close when it stops at
//! teardown: nothing is left to remove.
//!
//! Forwards listen on 127.0.0.1 unless the entry names another address.
//! HOSTPORT 0 asks for any free host port: the coordinator picks one that
//! is free (binding port 0 itself) and asks slirp4netns for it, again with
//! another if it was taken meanwhile; `ps` and `net show` list the port it
//! got. A port another running Domain forwards is refused with a sentence
//! naming that Domain (its `gen/ports`).

use std::fmt;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::config::ValueError;

/// Name of the slirp4netns API socket in the generation dir.
pub const API_SOCKET: &str = "slirp.sock";
/// The installed forwards for `net show` (generation dir;
/// `wire::show::ShowMsg::Ports`).
pub const PORTS_FILE: &str = "ports";

/// One TCP forward: `ADDR:HOSTPORT` on the host to `GUESTPORT` in the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortForward {
    pub addr: Ipv4Addr,
    pub host: u16,
    pub guest: u16,
}

impl FromStr for PortForward {
    /// Shows as the phrase describing what was expected.
    type Err = ValueError;

    /// `[ADDR:]HOSTPORT:GUESTPORT`, ADDR an IPv4 address (127.0.0.1 when
    /// left out), ports 1..=65535; HOSTPORT 0: any free host port.
    fn from_str(s: &str) -> Result<Self, ValueError> {
        const FORM: ValueError = ValueError::PortForward;
        let parts: Vec<&str> = s.split(':').collect();
        let (addr, host, guest) = match parts.as_slice() {
            [h, g] => (Ipv4Addr::LOCALHOST, *h, *g),
            [a, h, g] => (a.parse::<Ipv4Addr>().map_err(|_| FORM)?, *h, *g),
            _ => return Err(FORM),
        };
        let port = |p: &str, min: u32| -> Result<u16, ValueError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 5 {
                return Err(FORM);
            }
            match p.parse::<u32>() {
                Ok(n) if (min..=65535).contains(&n) => Ok(n as u16),
                _ => Err(FORM),
            }
        };
        Ok(PortForward {
            addr,
            host: port(host, 0)?,
            guest: port(guest, 1)?,
        })
    }
}

impl fmt::Display for PortForward {
    /// The config-file spelling, always with the address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.addr, self.host, self.guest)
    }
}

/// Why a forward's text on the coordinator socket is refused: that text is
/// exactly what [`PortForward`]'s `Display` writes (`ADDR:HOSTPORT:GUESTPORT`,
/// the address always there, each number in canonical decimal), so one
/// forward has one encoding and a decoded one re-encodes to the same bytes
/// ([`PortForward::from_canonical`]; the config's and `--publish`'s looser
/// spellings are [`PortForward`]'s `FromStr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanonicalError {
    /// Not three `:`-separated parts but this many: 2 when the address is
    /// left out, 4 or more with a second port (`127.0.0.1:9:42:7`).
    Parts(usize),
    /// ADDR is not an IPv4 address in dotted decimal (four numbers
    /// 0..=255, no leading zero).
    Address,
    /// HOSTPORT is not a number 0..=65535 in canonical decimal (no sign, no
    /// space, no leading zero).
    HostPort,
    /// GUESTPORT is not a number 1..=65535 in canonical decimal.
    GuestPort,
}

impl fmt::Display for CanonicalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanonicalError::Parts(2) => f.write_str("\"HOSTPORT:GUESTPORT\" without its address"),
            CanonicalError::Parts(n) => write!(f, "{n} colon-separated parts instead of ADDR:HOSTPORT:GUESTPORT"),
            CanonicalError::Address => f.write_str("ADDR is not a dotted-decimal IPv4 address"),
            CanonicalError::HostPort => f.write_str("HOSTPORT is not a canonical number in 0..=65535"),
            CanonicalError::GuestPort => f.write_str("GUESTPORT is not a canonical number in 1..=65535"),
        }
    }
}

impl std::error::Error for CanonicalError {}

/// `p` as a canonical decimal number in `min..=65535`: digits only, no
/// leading zero (but "0" itself).
fn canonical_port(p: &str, min: u16) -> Option<u16> {
    let digits = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    if !digits || (p.len() > 1 && p.starts_with('0')) {
        return None;
    }
    let n: u32 = p.parse().ok()?;
    (u32::from(min)..=65535).contains(&n).then_some(n as u16)
}

impl PortForward {
    /// The forward `s` names in its one canonical spelling (what `Display`
    /// writes), else why not: how the coordinator socket reads a forward
    /// (`wire::client`), so that decoding then encoding gives the same bytes.
    pub fn from_canonical(s: &str) -> Result<PortForward, CanonicalError> {
        let parts: Vec<&str> = s.split(':').collect();
        let [a, h, g] = parts[..] else {
            return Err(CanonicalError::Parts(parts.len()));
        };
        let addr: Ipv4Addr = a.parse().map_err(|_| CanonicalError::Address)?;
        if addr.to_string() != a {
            return Err(CanonicalError::Address);
        }
        Ok(PortForward {
            addr,
            host: canonical_port(h, 0).ok_or(CanonicalError::HostPort)?,
            guest: canonical_port(g, 1).ok_or(CanonicalError::GuestPort)?,
        })
    }
}

/// Why forwards could not be merged or installed.
#[derive(Debug)]
pub enum PortError {
    /// Two forwards for one host address and port (the first, the second).
    Twice(PortForward, PortForward),
    /// slirp4netns's API socket is unreachable.
    Connect(PathBuf, io::Error),
    /// Sending the request for a forward.
    Send(PortForward, io::Error),
    /// slirp4netns refused the forward.
    Refused(PortForward, Refusal),
    /// Another running Domain (its ID) forwards that host port.
    Held(PortForward, String),
    /// Another program on the host listens on that host port.
    InUse(PortForward),
    /// No free host port could be had for an "any port" forward.
    NoFreePort(PortForward, io::Error),
    /// The Domain has no network (`network.mode = "none"`).
    NoNetwork(PortForward),
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortError::Twice(q, p) => write!(f, "host port {}:{} is forwarded twice ({q} and {p})", p.addr, p.host),
            PortError::Connect(sock, e) => {
                write!(f, "cannot reach slirp4netns's API socket {}: {e}", sock.display())
            }
            PortError::Send(p, e) => write!(f, "forwarding {p}: {e}"),
            PortError::Refused(p, why) => write!(
                f,
                "cannot forward host port {}:{} to guest port {}: {why}",
                p.addr, p.host, p.guest
            ),
            PortError::Held(p, id) => write!(
                f,
                "host port {}:{} is already forwarded by the running Domain {id} (`lazaret ps` lists it): \
                 stop that Domain (`lazaret stop {id}`), or ask for any free host port with \"{}:0:{}\"",
                p.addr, p.host, p.addr, p.guest
            ),
            PortError::InUse(p) => write!(
                f,
                "host port {}:{} is in use by another program on this host: free it, or ask for any free \
                 host port with \"{}:0:{}\"",
                p.addr, p.host, p.addr, p.guest
            ),
            PortError::NoFreePort(p, e) => write!(f, "no free host port on {} for guest port {}: {e}", p.addr, p.guest),
            PortError::NoNetwork(p) => write!(
                f,
                "cannot forward {p}: the Domain has no network (network.mode = \"none\")"
            ),
        }
    }
}

/// A host port a forward cannot have because something else holds it:
/// another running Domain (its ID) or another program on the host (none).
/// Bad input, not a failure of Lazaret (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub port: PortForward,
    pub holder: Option<crate::domain::DomainId>,
}

impl PortError {
    /// Whether the port is taken, and by which Domain ([`Taken`]).
    pub fn taken(&self) -> Option<Taken> {
        match self {
            PortError::Held(p, id) => crate::domain::DomainId::parse(id).ok().map(|id| Taken {
                port: *p,
                holder: Some(id),
            }),
            PortError::InUse(p) => Some(Taken { port: *p, holder: None }),
            _ => None,
        }
    }
}

impl std::error::Error for PortError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PortError::Connect(_, e) | PortError::Send(_, e) | PortError::NoFreePort(_, e) => Some(e),
            PortError::Twice(..)
            | PortError::Refused(..)
            | PortError::Held(..)
            | PortError::InUse(..)
            | PortError::NoNetwork(..) => None,
        }
    }
}

/// slirp4netns's description of why it refused a request (its text,
/// escaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The forwards of a Domain: the profile's, then `--publish` ones; a later
/// entry for the same host address and port is refused (pure).
pub fn merge(profile: &[PortForward], extra: &[PortForward]) -> Result<Vec<PortForward>, PortError> {
    let mut out: Vec<PortForward> = Vec::new();
    for p in profile.iter().chain(extra) {
        // Each "any port" entry gets a port of its own.
        if let Some(q) = out.iter().find(|q| q.host != 0 && q.addr == p.addr && q.host == p.host) {
            if q == p {
                continue;
            }
            return Err(PortError::Twice(*q, *p));
        }
        out.push(*p);
    }
    Ok(out)
}

/// The `add_hostfwd` request for one forward (pure).
pub fn request(p: &PortForward, guest_addr: Ipv4Addr) -> String {
    format!(
        "{{\"execute\": \"add_hostfwd\", \"arguments\": {{\"proto\": \"tcp\", \"host_addr\": \"{}\", \"host_port\": {}, \"guest_addr\": \"{guest_addr}\", \"guest_port\": {}}}}}",
        p.addr, p.host, p.guest
    )
}

/// Reads slirp4netns's answer (pure): `Ok` for `{"return": …}`, the
/// error's description otherwise.
pub fn parse_reply(text: &str) -> Result<(), Refusal> {
    let t = text.trim();
    if t.starts_with("{\"return\"") || t.starts_with("{ \"return\"") {
        return Ok(());
    }
    let desc = t
        .split("\"desc\"")
        .nth(1)
        .and_then(|r| r.split('"').nth(1))
        .unwrap_or(t);
    Err(Refusal(crate::display::escape(desc)))
}

/// One `add_hostfwd` request (one connection).
fn add_one(api_socket: &Path, p: &PortForward, guest_addr: Ipv4Addr) -> Result<(), PortError> {
    let mut s = UnixStream::connect(api_socket).map_err(|e| PortError::Connect(api_socket.to_path_buf(), e))?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    s.set_write_timeout(Some(Duration::from_secs(5))).ok();
    s.write_all(request(p, guest_addr).as_bytes())
        .map_err(|e| PortError::Send(*p, e))?;
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = String::new();
    let _ = s.take(64 * 1024).read_to_string(&mut reply);
    parse_reply(&reply).map_err(|why| PortError::Refused(*p, why))?;
    log::info!("forwarding host {}:{} to guest port {}", p.addr, p.host, p.guest);
    Ok(())
}

/// How often an "any port" forward is tried with a newly picked port.
const ANY_PORT_TRIES: usize = 5;

/// Adds one forward; HOSTPORT 0 becomes a free port. A refusal is said
/// as who holds the port: `holder` names a running Domain that forwards
/// it, else a port the host's own programs hold is `InUse`. Returns the
/// forward as installed.
pub fn add(
    api_socket: &Path,
    p: &PortForward,
    guest_addr: Ipv4Addr,
    holder: &dyn Fn(&PortForward) -> Option<String>,
) -> Result<PortForward, PortError> {
    if p.host != 0 {
        return match add_one(api_socket, p, guest_addr) {
            Err(PortError::Refused(..)) if holder(p).is_some() => Err(PortError::Held(*p, holder(p).unwrap())),
            Err(PortError::Refused(..)) if std::net::TcpListener::bind((p.addr, p.host)).is_err() => {
                Err(PortError::InUse(*p))
            }
            r => r.map(|()| *p),
        };
    }
    let mut last = None;
    for _ in 0..ANY_PORT_TRIES {
        let picked = std::net::TcpListener::bind((p.addr, 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| PortError::NoFreePort(*p, e))?
            .port();
        let q = PortForward { host: picked, ..*p };
        match add_one(api_socket, &q, guest_addr) {
            Ok(()) => return Ok(q),
            // Taken between our probe and slirp4netns's bind: another one.
            Err(e @ PortError::Refused(..)) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or(PortError::NoFreePort(*p, io::Error::from(io::ErrorKind::AddrInUse))))
}

/// Asks slirp4netns to add every forward; returns them as installed.
pub fn install(
    api_socket: &Path,
    forwards: &[PortForward],
    guest_addr: Ipv4Addr,
    holder: &dyn Fn(&PortForward) -> Option<String>,
) -> Result<Vec<PortForward>, PortError> {
    forwards
        .iter()
        .map(|p| add(api_socket, p, guest_addr, holder))
        .collect()
}

/// Whether two forwards' host sockets collide: the same port on the same
/// address, or on any address when one of them is `0.0.0.0` (pure).
pub fn same_host_port(a: &PortForward, b: &PortForward) -> bool {
    a.host == b.host && (a.addr == b.addr || a.addr.is_unspecified() || b.addr.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let p: PortForward = "18000:8000".parse().unwrap();
        assert_eq!((p.addr, p.host, p.guest), (Ipv4Addr::LOCALHOST, 18000, 8000));
        assert_eq!(p.to_string(), "127.0.0.1:18000:8000");
        let p: PortForward = "0.0.0.0:3000:3000".parse().unwrap();
        assert_eq!(p.addr, Ipv4Addr::UNSPECIFIED);
        // Any free host port.
        let p: PortForward = "0:3000".parse().unwrap();
        assert_eq!((p.host, p.guest), (0, 3000));
        assert_eq!(p.to_string(), "127.0.0.1:0:3000");
        for bad in [
            "",
            "80",
            "80:0",
            "65536:1",
            "a:1",
            "1:2:3:4",
            "localhost:1:2",
            "+1:2",
            "1 :2",
            "::1:2:3",
        ] {
            assert!(bad.parse::<PortForward>().is_err(), "{bad:?}");
        }
    }

    /// The socket's spelling: exactly what `Display` writes, each other
    /// spelling refused with its own reason.
    #[test]
    fn canonical_form_is_the_one_display_writes() {
        for good in [
            "127.0.0.1:9:42",
            "0.0.0.0:0:1",
            "10.20.30.40:65535:65535",
            "255.255.255.255:1:8000",
        ] {
            let p = PortForward::from_canonical(good).unwrap();
            assert_eq!(p.to_string(), good);
        }
        for (bad, why) in [
            ("9:42", CanonicalError::Parts(2)),
            ("127.0.0.1:9:42:7", CanonicalError::Parts(4)),
            ("127.0.0.1:9:42:", CanonicalError::Parts(4)),
            ("1.2.3.4:5:6:7:8", CanonicalError::Parts(5)),
            ("", CanonicalError::Parts(1)),
            ("127.0.0.1", CanonicalError::Parts(1)),
            ("::1:2:3", CanonicalError::Parts(5)),
            ("localhost:9:42", CanonicalError::Address),
            ("127.0.0.01:9:42", CanonicalError::Address),
            ("127.0.0:9:42", CanonicalError::Address),
            ("127.0.0.256:9:42", CanonicalError::Address),
            (" 127.0.0.1:9:42", CanonicalError::Address),
            (":9:42", CanonicalError::Address),
            ("127.0.0.1:09:42", CanonicalError::HostPort),
            ("127.0.0.1:00:42", CanonicalError::HostPort),
            ("127.0.0.1:+9:42", CanonicalError::HostPort),
            ("127.0.0.1::42", CanonicalError::HostPort),
            ("127.0.0.1:65536:42", CanonicalError::HostPort),
            ("127.0.0.1:9 :42", CanonicalError::HostPort),
            ("127.0.0.1:9:042", CanonicalError::GuestPort),
            ("127.0.0.1:9:0", CanonicalError::GuestPort),
            ("127.0.0.1:9:", CanonicalError::GuestPort),
            ("127.0.0.1:9:65536", CanonicalError::GuestPort),
            ("127.0.0.1:9:42\n", CanonicalError::GuestPort),
        ] {
            assert_eq!(PortForward::from_canonical(bad), Err(why), "{bad:?}");
            assert!(!why.to_string().is_empty());
        }
        // The config's short form stays a user's spelling, never the socket's.
        assert!("9:42".parse::<PortForward>().is_ok());
    }

    #[test]
    fn merge_refuses_two_targets_for_one_host_port() {
        let a: PortForward = "3000:3000".parse().unwrap();
        let b: PortForward = "3000:4000".parse().unwrap();
        let c: PortForward = "127.0.0.2:3000:4000".parse().unwrap();
        assert_eq!(merge(&[a], &[a, c]).unwrap(), vec![a, c]);
        assert!(merge(&[a], &[b]).unwrap_err().to_string().contains("twice"));
        let any: PortForward = "0:3000".parse().unwrap();
        let any2: PortForward = "0:4000".parse().unwrap();
        assert_eq!(merge(&[any], &[any2]).unwrap(), vec![any, any2]);
    }

    #[test]
    fn collisions_and_their_sentences() {
        let a: PortForward = "3000:3000".parse().unwrap();
        let all: PortForward = "0.0.0.0:3000:80".parse().unwrap();
        let other: PortForward = "127.0.0.2:3000:3000".parse().unwrap();
        assert!(same_host_port(&a, &all) && same_host_port(&all, &other));
        assert!(!same_host_port(&a, &other));
        let held = PortError::Held(a, "3f2a9c1b0d12".into()).to_string();
        assert!(
            held.contains("127.0.0.1:3000")
                && held.contains("Domain 3f2a9c1b0d12")
                && held.contains("\"127.0.0.1:0:3000\""),
            "{held}"
        );
        assert!(PortError::InUse(a).to_string().contains("another program"));
    }

    #[test]
    fn request_and_reply() {
        let p: PortForward = "18000:8000".parse().unwrap();
        let r = request(&p, Ipv4Addr::new(10, 0, 2, 100));
        assert_eq!(
            r,
            r#"{"execute": "add_hostfwd", "arguments": {"proto": "tcp", "host_addr": "127.0.0.1", "host_port": 18000, "guest_addr": "10.0.2.100", "guest_port": 8000}}"#
        );
        assert!(parse_reply("{\"return\": {\"id\": 1}}\n").is_ok());
        assert_eq!(
            parse_reply("{\"error\": {\"desc\": \"bad request: add_hostfwd: slirp_add_hostfwd failed\"}}"),
            Err(Refusal("bad request: add_hostfwd: slirp_add_hostfwd failed".into()))
        );
        assert!(parse_reply("").is_err());
    }
}
