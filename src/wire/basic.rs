//! The frozen basic exchange on the coordinator's socket: status and stop
//! across builds. Its bytes never change (protocol/README.md, "The frozen
//! basic exchange"): every build, whatever its [`PROTOCOL_VERSION`], answers
//! it, so that `lazaret ps` and `lazaret stop` of a newer or older build see
//! and stop the Domains this one started. Everything else on the socket
//! needs the same `PROTOCOL_VERSION` on both ends.
//!
//! Client → coordinator, as the first frame instead of `Hello`: tag
//! [`BASIC_TAG`] + [`BasicRequest`]. Coordinator → client: tag [`BASIC_TAG`] +
//! [`BasicInfo`], then the connection is closed (after a stop request, the
//! Domain's teardown has begun). A request with an op the coordinator does
//! not know is dropped without an answer.
//!
//! [`PROTOCOL_VERSION`]: crate::wire::client::PROTOCOL_VERSION

use crate::domain::{DomainId, Generation};
use crate::wire::codec::record;

/// The frame tag of both basic messages, outside every versioned tag range
/// (`ClientMsg` and `ServerMsg` tags stay below it).
// The `messages!` tables must write it as a literal; this is its one name.
#[cfg_attr(not(test), allow(dead_code))]
pub const BASIC_TAG: u8 = 0xb0;
/// The basic exchange's own version: 1 forever (a change would be a new tag).
pub const BASIC_VERSION: u32 = 1;
/// [`BasicRequest::op`]: the Domain's basic status.
pub const OP_STATUS: u8 = 1;
/// [`BasicRequest::op`]: stop the Domain (its sessions are told `reason`).
pub const OP_STOP: u8 = 2;

/// A client's basic request. Frozen: fields and their order never change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicRequest {
    /// [`BASIC_VERSION`].
    pub basic: u32,
    /// [`OP_STATUS`] or [`OP_STOP`].
    pub op: u8,
    /// For a stop, what the sessions are told (empty: the default).
    pub reason: String,
}

/// The coordinator's answer. Frozen: fields and their order never change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasicInfo {
    /// [`BASIC_VERSION`].
    pub basic: u32,
    /// The coordinator's `PROTOCOL_VERSION`: a client with the same one may
    /// use the full protocol.
    pub protocol: u32,
    /// The build that started the Domain, as `lazaret version` names it
    /// (`0.1.0 (commit abc123def456)`).
    pub build: String,
    pub domain_id: DomainId,
    pub profile: String,
    pub workspace: String,
    pub generation: Generation,
    /// The generation's phase word (`ready`, `stopping`, …).
    pub phase: String,
    pub coordinator_pid: i32,
    /// Unix seconds when the generation was published.
    pub started_at: i64,
    /// Sessions open now.
    pub sessions: u32,
    /// The Domain is stopping (true in the answer to a stop request).
    pub stopping: bool,
}

record!(BasicRequest { basic, op, reason });
record!(BasicInfo {
    basic,
    protocol,
    build,
    domain_id,
    profile,
    workspace,
    generation,
    phase,
    coordinator_pid,
    started_at,
    sessions,
    stopping,
});

impl BasicRequest {
    pub fn status() -> BasicRequest {
        BasicRequest {
            basic: BASIC_VERSION,
            op: OP_STATUS,
            reason: String::new(),
        }
    }
    pub fn stop(reason: &str) -> BasicRequest {
        BasicRequest {
            basic: BASIC_VERSION,
            op: OP_STOP,
            reason: reason.to_string(),
        }
    }
}

/// The frame of a basic message: tag [`BASIC_TAG`], then the record (the
/// same bytes `ClientMsg::Basic` and `ServerMsg::Basic` write).
#[cfg(test)]
pub fn frame<T: crate::wire::codec::Field>(record: &T) -> Vec<u8> {
    let mut e = crate::wire::codec::Enc::new(BASIC_TAG);
    record.put(&mut e);
    e.finish()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn info() -> BasicInfo {
        BasicInfo {
            basic: BASIC_VERSION,
            protocol: 3,
            build: "0.1.0 (commit e9aec42)".into(),
            domain_id: DomainId::parse("0123456789abcdef0123").unwrap(),
            profile: "default".into(),
            workspace: "/w".into(),
            generation: Generation::new(2).unwrap(),
            phase: "ready".into(),
            coordinator_pid: 77,
            started_at: 1_700_000_000,
            sessions: 1,
            stopping: false,
        }
    }

    pub(crate) fn hex(m: Vec<u8>) -> String {
        m.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The frozen bytes: every build must write and read exactly these.
    /// A change here strands the Domains of every other build.
    #[test]
    fn basic_frames_are_frozen() {
        assert_eq!(BASIC_TAG, 0xb0);
        assert_eq!(hex(frame(&BasicRequest::status())), "0a000000b0010000000100000000");
        assert_eq!(
            hex(frame(&BasicRequest::stop("bye"))),
            "0d000000b0010000000203000000627965"
        );
        assert_eq!(hex(frame(&info())), concat!(
                "6e000000b0010000000300000016000000302e312e302028636f6d6d6974206539616563343229140000003031323334353637383961626364",
                "6566303132330700000064656661756c74020000002f7702000000000000000500000072656164794d00000000f15365000000000100000000"
            ));
    }
}
