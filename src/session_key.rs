//! The session's side of the Trust Anchor: the signing key the escalation
//! client parses from [`crate::trust::Credential::export`] and signs its
//! requests with. The host checks each signature with OpenSSL
//! ([`crate::trust::TrustAnchor::verify`]); nothing here links OpenSSL.
//!
//! Why not OpenSSL here too: the client is a new process inside gVisor for
//! every request, where each system call, trapped `cpuid` and page fault is
//! tens of microseconds. A client that links the static OpenSSL starts
//! about 3 ms later than one that does not (its constructor probes the CPU,
//! its tables are relocated and faulted in), and OpenSSL's own start and
//! signing add 2 ms more: together more than the rest of the request
//! (docs/escalation.md measures each). The signature is plain ECDSA P-256
//! over SHA-256 with a deterministic nonce (RFC 6979), by the `p256` crate;
//! only its DER encoding, SEQUENCE { INTEGER r, INTEGER s }, is written
//! here.

use std::fmt;

use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};

/// Version tag that starts an exported session credential.
pub const CREDENTIAL_TAG: &str = "lzc2:";

/// What is wrong with a credential the client was given.
#[derive(Debug, PartialEq, Eq)]
pub struct MalformedCredential(pub &'static str);

impl fmt::Display for MalformedCredential {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "malformed session credential: {}", self.0)
    }
}

impl std::error::Error for MalformedCredential {}

/// A Domain, session or client id as a credential carries it: one or
/// more of `[A-Za-z0-9_-]`.
pub fn is_credential_field(f: &str) -> bool {
    !f.is_empty() && f.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A session's signing key as the escalation client holds it.
pub struct SessionKey {
    key: SigningKey,
    pub domain: String,
    pub generation: u64,
    pub session: String,
    pub client: String,
    /// The certificate DER, forwarded with each request.
    pub cert: Vec<u8>,
}

impl SessionKey {
    /// Parses `lzc2:KEY.DOMAIN.GENERATION.SESSION.CLIENT.CERT`: KEY the
    /// private scalar in 64 hex digits (a valid P-256 scalar: not zero,
    /// below the group order), CERT the certificate DER in standard
    /// base64 with padding.
    pub fn parse(cred: &str) -> Result<SessionKey, MalformedCredential> {
        let bad = MalformedCredential;
        let rest = cred.strip_prefix(CREDENTIAL_TAG).ok_or(bad("unknown format"))?;
        let f: Vec<&str> = rest.split('.').collect();
        let [key, domain, generation, session, client, cert] = f.as_slice() else {
            return Err(bad("wrong number of fields"));
        };
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("key"));
        }
        let mut scalar = [0u8; 32];
        for (i, b) in scalar.iter_mut().enumerate() {
            *b = u8::from_str_radix(&key[2 * i..2 * i + 2], 16).map_err(|_| bad("key"))?;
        }
        let key = SigningKey::from_bytes(&scalar.into()).map_err(|_| bad("key"))?;
        if ![domain, session, client].iter().all(|f| is_credential_field(f)) {
            return Err(bad("identity"));
        }
        if generation.is_empty() || !generation.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("generation"));
        }
        let generation = generation.parse().map_err(|_| bad("generation"))?;
        let cert = base64_decode(cert.as_bytes()).ok_or(bad("certificate"))?;
        Ok(SessionKey {
            key,
            domain: domain.to_string(),
            generation,
            session: session.to_string(),
            client: client.to_string(),
            cert,
        })
    }

    /// A DER ECDSA signature over SHA-256(`data`), what
    /// [`crate::trust::TrustAnchor::verify`] checks.
    pub fn sign(&self, data: &[u8]) -> Vec<u8> {
        let sig: Signature = self.key.sign(data);
        let (r, s) = sig.split_bytes();
        der_ecdsa_sig(&r, &s)
    }
}

/// `ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }` in DER, from
/// the two 32-byte big-endian values: each integer without leading zero
/// bytes but one before a high bit (INTEGERs are signed). Both fit short
/// lengths: at most 2 × (2 + 33) = 70 bytes of content.
fn der_ecdsa_sig(r: &[u8], s: &[u8]) -> Vec<u8> {
    fn integer(out: &mut Vec<u8>, v: &[u8]) {
        let first = v.iter().position(|b| *b != 0).unwrap_or(v.len() - 1);
        let v = &v[first..];
        let pad = v[0] & 0x80 != 0;
        out.push(0x02);
        out.push((v.len() + usize::from(pad)) as u8);
        if pad {
            out.push(0);
        }
        out.extend_from_slice(v);
    }
    let mut body = Vec::with_capacity(70);
    integer(&mut body, r);
    integer(&mut body, s);
    let mut out = Vec::with_capacity(72);
    out.push(0x30);
    out.push(body.len() as u8);
    out.extend_from_slice(&body);
    out
}

/// Standard base64 (RFC 4648 section 4) with its `=` padding, strictly:
/// no other bytes, no line breaks, the length a multiple of four and the
/// bits after the last whole byte zero. `None` for anything else.
pub fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let quads = text.len() / 4;
    for (i, q) in text.chunks_exact(4).enumerate() {
        let pad = if i + 1 == quads {
            q.iter().rev().take_while(|c| **c == b'=').count()
        } else {
            0
        };
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for c in &q[..4 - pad] {
            n = (n << 6) | value(*c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        // The bits the padding stands for must be zero (one encoding per value).
        if bytes[3 - pad..].iter().any(|b| *b != 0) {
            return None;
        }
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_openssl_encodes_and_nothing_looser() {
        let mut data = Vec::new();
        for len in 0..70usize {
            data.push((len * 37 + 11) as u8);
            let enc = openssl::base64::encode_block(&data[..len]);
            assert_eq!(base64_decode(enc.as_bytes()).as_deref(), Some(&data[..len]), "{enc}");
        }
        let all: Vec<u8> = (0..=255u8).collect();
        let enc = openssl::base64::encode_block(&all);
        assert_eq!(base64_decode(enc.as_bytes()), Some(all));
        for bad in [
            &b"QUJD\n"[..],
            b"QUJ",
            b"QU==QUJD",
            b"Q===",
            b"QUI=a===",
            b"QUJ-",
            b"QR==", // non-zero bits under the padding
            b"QUK=",
            b" QUJD",
        ] {
            assert_eq!(base64_decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn der_integers_are_minimal_and_positive() {
        let mut r = [0u8; 32];
        r[31] = 1;
        let s = [0xffu8; 32];
        let d = der_ecdsa_sig(&r, &s);
        assert_eq!(&d[..5], &[0x30, 3 + 35, 0x02, 1, 1]);
        assert_eq!(&d[5..8], &[0x02, 33, 0]);
        assert_eq!(d.len(), 2 + 3 + 35);
        // Each DER form parses back, through OpenSSL, to the same values.
        for (r, s) in [([0x80u8; 32], [0x01u8; 32]), ([0u8; 32], [0x7fu8; 32])] {
            let mut r = r;
            r[31] |= 1; // not zero
            let sig = openssl::ecdsa::EcdsaSig::from_der(&der_ecdsa_sig(&r, &s)).unwrap();
            assert_eq!(sig.r().to_vec_padded(32).unwrap(), r);
            assert_eq!(sig.s().to_vec_padded(32).unwrap(), s);
        }
    }

    #[test]
    fn a_scalar_outside_the_group_is_refused() {
        let cert = openssl::base64::encode_block(b"x");
        let zero = format!("{CREDENTIAL_TAG}{}.d.1.s.c.{cert}", "0".repeat(64));
        assert_eq!(SessionKey::parse(&zero).err(), Some(MalformedCredential("key")));
        let over = format!("{CREDENTIAL_TAG}{}.d.1.s.c.{cert}", "f".repeat(64));
        assert_eq!(SessionKey::parse(&over).err(), Some(MalformedCredential("key")));
        let one = format!("{CREDENTIAL_TAG}{}1.d.1.s.c.{cert}", "0".repeat(63));
        assert!(SessionKey::parse(&one).is_ok());
    }
}
