//! The SSH agent the sandbox sees (issue 51, docs/agents.md "SSH"): the
//! host side's pure parts.
//!
//! - [`proto`]: the agent protocol's messages, parsed strictly: only
//!   `REQUEST_IDENTITIES`, `SIGN_REQUEST` and the
//!   `session-bind@openssh.com` extension; every other message, a trailing
//!   byte or an oversized field is refused. Also what is being signed: an
//!   SSH user-authentication request or an `ssh-keygen -Y sign` blob.
//! - [`keys`]: public key blobs, their `SHA256:` fingerprints, and the
//!   verification (OpenSSL) of a server host key's signature over an SSH
//!   session id, which binds a session id to the server's host key.
//! - [`known_hosts`]: which names the developer's known_hosts lists a host
//!   key for (plain, hashed, `[name]:port`; `@revoked` excludes).
//! - [`decide`]: the per-connection binding state and the decision for
//!   one request: refuse, approve by rule, approve by an earlier answer for
//!   this (session, key), or ask the developer.

pub mod decide;
pub mod host;
pub mod keys;
pub mod known_hosts;
pub mod proto;
#[cfg(test)]
mod tests;
