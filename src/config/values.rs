//! Single config values: sizes, CPU counts, image sources, volumes, IP
//! prefixes and guest paths, their parsing, printing and errors.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;

/// Guest paths owned by lazaret; `persist` and volume targets may not be or lie under them.
pub const RESERVED_GUEST_PATHS: &[&str] = &["/workspace", "/workspaces", "/.lazaret", "/proc", "/dev", "/sys"];

/// `[a-z0-9][a-z0-9_.-]{0,63}`, not `default` (the built-in image).
pub fn valid_image_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && name != "default"
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-'))
}

/// Parses `"4GiB"`, `"256MiB"`, `"512M"`, `"1024"` (bytes); binary units.
pub fn parse_size(s: &str) -> Result<u64, ValueError> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| ValueError::Size)?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        _ => return Err(ValueError::Size),
    };
    n.checked_mul(mult).filter(|v| *v > 0).ok_or(ValueError::Size)
}

/// Formats bytes the way limits are written (`4GiB`, `256MiB`, `1.5GiB`).
pub fn format_size(b: u64) -> String {
    const UNITS: &[(&str, u64)] = &[("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (u, m) in UNITS {
        if b >= *m {
            return if b.is_multiple_of(*m) {
                format!("{}{}", b / m, u)
            } else {
                format!("{:.1}{}", b as f64 / *m as f64, u)
            };
        }
    }
    format!("{b}B")
}

/// Parses a CPU count (`2`, `0.5`) into thousandths; 0.01..=1024.
pub fn parse_cpus(s: &str) -> Result<u64, ValueError> {
    let v: f64 = s.trim().parse().map_err(|_| ValueError::Cpus)?;
    if !(0.01..=1024.0).contains(&v) {
        return Err(ValueError::CpusRange);
    }
    Ok((v * 1000.0).round() as u64)
}

/// Where the root filesystem image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageSource {
    /// `"default"`: the built-in image.
    Default,
    /// `"oci:PATH:TAG"`: an OCI layout directory.
    Oci { path: PathBuf, tag: String },
    /// `"docker-archive:FILE"`: a `docker save` tarball.
    DockerArchive(PathBuf),
    /// `"docker://REF"`: a registry reference (stored without the `docker://` prefix).
    Docker(String),
    /// `"NAME"`: the image built from the recipe `[images.NAME]`.
    Named(String),
}

/// A bind mount from the host into the guest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Volume {
    /// Absolute host path.
    pub host: PathBuf,
    /// Absolute, normalized guest path outside the reserved paths.
    pub guest: String,
    pub read_only: bool,
}

/// An IP prefix (CIDR block) with all host bits zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl FromStr for ImageSource {
    type Err = ValueError;

    fn from_str(s: &str) -> Result<Self, ValueError> {
        if s == "default" {
            return Ok(ImageSource::Default);
        }
        if let Some(rest) = s.strip_prefix("oci:") {
            return match rest.rsplit_once(':') {
                Some((path, tag)) if path.starts_with('/') && !tag.is_empty() && !tag.contains('/') => {
                    Ok(ImageSource::Oci {
                        path: PathBuf::from(path),
                        tag: tag.to_string(),
                    })
                }
                _ => Err(ValueError::Oci),
            };
        }
        if let Some(rest) = s.strip_prefix("docker-archive:") {
            return if rest.starts_with('/') {
                Ok(ImageSource::DockerArchive(PathBuf::from(rest)))
            } else {
                Err(ValueError::DockerArchive)
            };
        }
        if let Some(rest) = s.strip_prefix("docker://") {
            return if !rest.is_empty() && !rest.chars().any(char::is_whitespace) {
                Ok(ImageSource::Docker(rest.to_string()))
            } else {
                Err(ValueError::Docker)
            };
        }
        if valid_image_name(s) {
            return Ok(ImageSource::Named(s.to_string()));
        }
        Err(ValueError::Image)
    }
}

impl fmt::Display for ImageSource {
    /// The config-file spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageSource::Default => f.write_str("default"),
            ImageSource::Oci { path, tag } => write!(f, "oci:{}:{}", path.display(), tag),
            ImageSource::DockerArchive(p) => write!(f, "docker-archive:{}", p.display()),
            ImageSource::Docker(r) => write!(f, "docker://{}", r),
            ImageSource::Named(n) => f.write_str(n),
        }
    }
}

impl FromStr for Volume {
    type Err = ValueError;

    /// Parses `HOSTPATH:GUESTPATH[:ro|:rw]` (read-write by default).
    fn from_str(s: &str) -> Result<Self, ValueError> {
        let parts: Vec<&str> = s.split(':').collect();
        let (host, guest, read_only) = match parts.as_slice() {
            [h, g] => (*h, *g, false),
            [h, g, "ro"] => (*h, *g, true),
            [h, g, "rw"] => (*h, *g, false),
            _ => return Err(ValueError::Volume),
        };
        if !host.starts_with('/') {
            return Err(ValueError::Volume);
        }
        if let Some(problem) = guest_path_problem(guest) {
            return Err(ValueError::VolumeGuest(problem));
        }
        Ok(Volume {
            host: PathBuf::from(host),
            guest: guest.to_string(),
            read_only,
        })
    }
}

impl fmt::Display for Volume {
    /// The config-file spelling.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.read_only { "ro" } else { "rw" };
        write!(f, "{}:{}:{}", self.host.display(), self.guest, mode)
    }
}

/// Why a guest path is unacceptable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathProblem {
    Relative,
    NotNormalized,
    Root,
    Reserved,
}

impl PathProblem {
    pub(super) fn plural(self) -> &'static str {
        match self {
            PathProblem::Relative => "absolute paths",
            PathProblem::NotNormalized => "normalized paths (no \".\", \"..\", \"//\" or trailing \"/\")",
            PathProblem::Root => "paths other than \"/\"",
            PathProblem::Reserved => "paths outside /workspace, /workspaces, /.lazaret, /proc, /dev and /sys",
        }
    }

    pub(super) fn singular(self) -> &'static str {
        match self {
            PathProblem::Relative => "an absolute path",
            PathProblem::NotNormalized => "a normalized path (no \".\", \"..\", \"//\" or trailing \"/\")",
            PathProblem::Root => "a path other than \"/\"",
            PathProblem::Reserved => "a path outside /workspace, /workspaces, /.lazaret, /proc, /dev and /sys",
        }
    }
}

/// Checks a guest path used by `persist` or as a volume target.
pub(super) fn guest_path_problem(p: &str) -> Option<PathProblem> {
    if !p.starts_with('/') {
        return Some(PathProblem::Relative);
    }
    if p == "/" {
        return Some(PathProblem::Root);
    }
    if p.ends_with('/') || p[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Some(PathProblem::NotNormalized);
    }
    let reserved = RESERVED_GUEST_PATHS
        .iter()
        .any(|r| p == *r || (p.starts_with(r) && p.as_bytes().get(r.len()) == Some(&b'/')));
    reserved.then_some(PathProblem::Reserved)
}

impl Prefix {
    /// A prefix, or `None` when `len` is out of range or host bits are set.
    /// Only tests build prefixes from parts; the config parses them.
    #[cfg(test)]
    pub fn new(addr: IpAddr, len: u8) -> Option<Prefix> {
        let p = Prefix { addr, len };
        (len <= p.max_len() && p.network() == p).then_some(p)
    }

    /// 32 for IPv4, 128 for IPv6.
    pub fn max_len(&self) -> u8 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }

    /// This prefix with host bits cleared.
    pub fn network(&self) -> Prefix {
        let len = self.len.min(self.max_len());
        let bits = self.bits() & mask(len, self.max_len());
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(bits as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
        };
        Prefix { addr, len }
    }

    /// Whether every address of `other` is inside `self` (same family only;
    /// IPv4-mapped IPv6 addresses are not matched against IPv4 prefixes).
    pub fn contains(&self, other: &Prefix) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && self.len <= other.len
            && (self.bits() ^ other.bits()) & mask(self.len, self.max_len()) == 0
    }

    /// Whether the two prefixes share at least one address.
    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.contains(other) || other.contains(self)
    }

    fn bits(&self) -> u128 {
        match self.addr {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }
}

/// The top `len` of `max` bits set.
fn mask(len: u8, max: u8) -> u128 {
    if len == 0 {
        return 0;
    }
    let full: u128 = if max >= 128 { !0 } else { (1u128 << max) - 1 };
    (!0u128 << (max - len.min(max))) & full
}

impl FromStr for Prefix {
    type Err = ValueError;

    /// Parses `ADDR/LEN`; a bare address means a single host (`/32`, `/128`).
    fn from_str(s: &str) -> Result<Self, ValueError> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| ValueError::Prefix)?;
        let max = if addr.is_ipv4() { 32u8 } else { 128u8 };
        let len = match len {
            None => max,
            Some(l) => {
                if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(ValueError::Prefix);
                }
                match l.parse::<u8>() {
                    Ok(n) if n <= max => n,
                    _ => return Err(ValueError::PrefixLength { max }),
                }
            }
        };
        let p = Prefix { addr, len };
        let net = p.network();
        if net != p {
            return Err(ValueError::HostBits { network: net });
        }
        Ok(p)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A value that does not have the expected form; shows as the phrase
/// describing what was expected (the "expected" part of a message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    Size,
    Cpus,
    CpusRange,
    Oci,
    DockerArchive,
    Docker,
    Image,
    Volume,
    VolumeGuest(PathProblem),
    Prefix,
    PrefixLength { max: u8 },
    HostBits { network: Prefix },
    PortForward,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::Size => f.write_str("a size like \"4GiB\", \"256MiB\" or a number of bytes"),
            ValueError::Cpus => f.write_str("a number of CPUs like 2 or 0.5"),
            ValueError::CpusRange => f.write_str("a number of CPUs between 0.01 and 1024"),
            ValueError::Oci => f.write_str("\"oci:PATH:TAG\" with an absolute PATH and a non-empty TAG"),
            ValueError::DockerArchive => f.write_str("\"docker-archive:FILE\" with an absolute FILE"),
            ValueError::Docker => f.write_str("\"docker://REF\" with a non-empty REF without spaces"),
            ValueError::Image => f.write_str(
                "one of \"default\", an [images.NAME] recipe name, \"oci:/ABS/PATH:TAG\", \"docker-archive:/ABS/FILE\" or \"docker://REF\"",
            ),
            ValueError::Volume => f.write_str("\"HOSTPATH:GUESTPATH[:ro|:rw]\" with absolute paths"),
            ValueError::VolumeGuest(problem) => {
                write!(f, "\"HOSTPATH:GUESTPATH[:ro|:rw]\" with GUESTPATH {}", problem.singular())
            }
            ValueError::Prefix => f.write_str("a CIDR prefix like \"10.0.0.0/8\" or \"fd00::/8\""),
            ValueError::PrefixLength { max } => write!(f, "a prefix length between 0 and {}", max),
            ValueError::HostBits { network } => {
                write!(f, "a prefix whose host bits are zero, such as \"{}\"", network)
            }
            ValueError::PortForward => f.write_str(
                "\"[ADDR:]HOSTPORT:GUESTPORT\" (ADDR an IPv4 address, 127.0.0.1 by default; ports 1-65535)",
            ),
        }
    }
}

impl std::error::Error for ValueError {}
