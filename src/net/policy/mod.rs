//! The derived network policy, everything about it pure: what each file
//! holds is below; this file re-exports them and keeps the readiness
//! fingerprint and the test-only fault switch.
//!
//! * `rules`: the fixed addresses, the default deny list and the policy's
//!   types (rules, their sources, the gate, derivation errors);
//! * `derive`: derivation from trusted config (and the host's own
//!   addresses), and what allow-by-name mode still forwards;
//! * `plan`: the install plan handed to the Runtime Supervisor, its
//!   canonical text and digest, and the router decisions it implies;
//! * `checks`: the read-back checks of installed routes and the router's
//!   route-lookup attestation;
//! * `probe`: the probe's sample addresses and request;
//! * `describe`: what `lazaret net show` prints.
//!
//!
//! Where a decision is enforced (docs/network.md). The sandbox (gVisor's
//! netstack) has one NIC, `lzr0`, and one route: `default via
//! 169.254.255.2`. Its other end, `lzr1`, lives in the generation's
//! **router namespace**, a plain host-kernel network namespace that also
//! holds slirp4netns's `tap0` and forwards between them. The policy is the
//! router's main route table:
//!
//! * `helper` routes go `via 10.0.2.2 dev tap0` (slirp4netns);
//! * `reject` routes are `local P dev lo table main`: the router takes the
//!   packet for itself, nothing listens, a TCP connect gets a RST
//!   (connection refused) at once, UDP gets an ICMP port unreachable.
//!
//! The sandbox can change gVisor's routes (a nested user namespace gives it
//! CAP_NET_ADMIN inside gVisor), but every packet it sends still arrives at
//! `lzr1` and is routed by the router's kernel, which it cannot configure.
//! Reject routes sit in the main table (not `local`, which is consulted
//! before main) so the longest prefix decides across allows and denies.
//!
//! slirp4netns's own network `10.0.2.0/24` (tap0's connected route in the
//! router) lies inside the `10.0.0.0/8` deny and is more specific, so by
//! itself it would open all of it. More specific reject routes close it
//! again except for exactly the gateway `10.0.2.2` (the next hop; host
//! loopback is disabled, so it refuses connections) and the DNS forwarder
//! `10.0.2.3` when it is the Domain's resolver: `10.0.2.0/31`,
//! `10.0.2.4/30`, `10.0.2.8/29`, …, `10.0.2.128/25` (and `10.0.2.3/32`
//! with custom resolvers). Every IPv4 address of the host's interfaces at
//! Domain start is denied with a `/32` (slirp4netns connects from the host,
//! so a service bound on `0.0.0.0` would otherwise be reachable); a profile
//! `allow` of exactly that `/32` opens it. Longest prefix wins; an allow
//! and a deny of the very same prefix end as deny, with a warning.

mod checks;
mod derive;
mod describe;
mod plan;
mod probe;
mod rules;
#[cfg(test)]
mod tests;

pub use self::checks::*;
pub use self::derive::*;
pub use self::plan::*;
pub use self::rules::*;

// ---- readiness ------------------------------------------------------------------------

/// Digest over Domain ID, generation, config fingerprint, Network
/// Sidecar ID, policy digest and the identities of the sandbox's and the
/// router's network namespaces (length-prefixed fields).
pub fn readiness_fingerprint(
    domain_id: &str,
    generation: u64,
    config_fp: &str,
    sidecar_id: &str,
    policy_digest: &str,
    netns_inode: u64,
    router_inode: u64,
) -> String {
    let mut buf = Vec::new();
    for f in [
        "lazaret-net-readiness-v2",
        domain_id,
        &generation.to_string(),
        config_fp,
        sidecar_id,
        policy_digest,
        &netns_inode.to_string(),
        &router_inode.to_string(),
    ] {
        buf.extend_from_slice(f.len().to_string().as_bytes());
        buf.push(b':');
        buf.extend_from_slice(f.as_bytes());
        buf.push(b',');
    }
    hex(&openssl::sha::sha256(&buf))
}

/// The test-only fault switch (`LAZARET_FAULT`), honored only in builds
/// with the `fault-injection` cargo feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The installer skips one deny route in the router (192.168.0.0/16
    /// when planned) and its self-check (route read-back and route lookups)
    /// is blind to it: only the pre-publication probe can catch it.
    SkipOneDeny,
    /// The installer skips one deny route; the route read-back catches it.
    SkipOneDenyVisible,
    /// The egress gate's listener thread ends after its first connection:
    /// the supervisor must fail the generation.
    GateDies,
    /// Log mode: `nft` is not found; the start must fail with one sentence.
    NoNft,
    /// The router's half of the network (`install::finish`) waits
    /// [`SLOW_ROUTER`] before slirp4netns starts, while runsc boots: init
    /// must wait for its boot request, and its probe meet the whole policy.
    SlowRouter,
}

/// How long [`Fault::SlowRouter`] holds the router's half back.
pub const SLOW_ROUTER: std::time::Duration = std::time::Duration::from_millis(1500);

pub fn fault() -> Option<Fault> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    match std::env::var("LAZARET_FAULT").ok()?.as_str() {
        "skip-one-deny" => Some(Fault::SkipOneDeny),
        "skip-one-deny-visible" => Some(Fault::SkipOneDenyVisible),
        "gate-dies" => Some(Fault::GateDies),
        "no-nft" => Some(Fault::NoNft),
        "slow-router" => Some(Fault::SlowRouter),
        _ => None,
    }
}
