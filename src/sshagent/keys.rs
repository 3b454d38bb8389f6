//! Public key blobs (RFC 4253 §6.6, RFC 5656, RFC 8709), their
//! fingerprints, and the check of a server's signature over an SSH session
//! id with its host key (`session-bind@openssh.com`).

use std::fmt;

use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey, EcPoint};
use openssl::ecdsa::EcdsaSig;
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{Id, PKey};
use openssl::rsa::Rsa;
use openssl::sign::Verifier;

use super::proto::Reader;

/// Why a host key's signature does not bind a session id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyError {
    /// A key or signature blob that does not parse.
    Malformed,
    /// A key type other than ed25519, ECDSA P-256/P-384 and RSA (also
    /// certificates, and RSA under 2048 bits).
    Unsupported,
    /// The signature's algorithm does not belong to the key, or SHA-1 RSA.
    WrongAlgorithm,
    /// The signature does not verify.
    BadSignature,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyError::Malformed => "a malformed key or signature",
            KeyError::Unsupported => "an unsupported host key type",
            KeyError::WrongAlgorithm => "a signature algorithm that does not fit the key",
            KeyError::BadSignature => "a host key signature that does not verify",
        })
    }
}

impl std::error::Error for KeyError {}

impl From<super::proto::ParseError> for KeyError {
    fn from(_: super::proto::ParseError) -> KeyError {
        KeyError::Malformed
    }
}

/// `SHA256:` and the unpadded base64 of the blob's SHA-256, as
/// `ssh-add -l` and `ssh-keygen -l` print it.
pub fn fingerprint(blob: &[u8]) -> String {
    let b64 = openssl::base64::encode_block(&openssl::sha::sha256(blob));
    format!("SHA256:{}", b64.trim_end_matches('='))
}

/// The key type named at the start of a blob, when it is printable ASCII.
pub fn key_type(blob: &[u8]) -> Option<&str> {
    let t = Reader::new(blob).string().ok()?;
    let t = std::str::from_utf8(t).ok()?;
    (!t.is_empty() && t.len() <= 64 && t.bytes().all(|c| c.is_ascii_graphic())).then_some(t)
}

/// An SSH `mpint` as a positive BigNum (no negative values, no needless
/// leading zero byte).
fn mpint(b: &[u8]) -> Result<BigNum, KeyError> {
    if b.is_empty() || b[0] & 0x80 != 0 || (b.len() > 1 && b[0] == 0 && b[1] & 0x80 == 0) {
        return Err(KeyError::Malformed);
    }
    BigNum::from_slice(b).map_err(|_| KeyError::Malformed)
}

/// Checks that `signature` (an SSH signature blob: string algorithm,
/// string bytes) is `host_key`'s signature over `data`.
pub fn verify(host_key: &[u8], data: &[u8], signature: &[u8]) -> Result<(), KeyError> {
    let mut k = Reader::new(host_key);
    let ktype = k.string()?;
    let mut s = Reader::new(signature);
    let alg = s.string()?;
    let sig = s.string()?;
    s.end()?;
    let ok = match ktype {
        b"ssh-ed25519" => {
            let pk = k.string()?;
            k.end()?;
            if alg != b"ssh-ed25519" {
                return Err(KeyError::WrongAlgorithm);
            }
            if pk.len() != 32 || sig.len() != 64 {
                return Err(KeyError::Malformed);
            }
            let key = PKey::public_key_from_raw_bytes(pk, Id::ED25519).map_err(|_| KeyError::Malformed)?;
            let mut v = Verifier::new_without_digest(&key).map_err(|_| KeyError::Malformed)?;
            v.verify_oneshot(sig, data).unwrap_or(false)
        }
        b"ecdsa-sha2-nistp256" | b"ecdsa-sha2-nistp384" => {
            let (curve, nid, md) = if ktype == b"ecdsa-sha2-nistp256" {
                (&b"nistp256"[..], Nid::X9_62_PRIME256V1, MessageDigest::sha256())
            } else {
                (&b"nistp384"[..], Nid::SECP384R1, MessageDigest::sha384())
            };
            if k.string()? != curve {
                return Err(KeyError::Malformed);
            }
            let q = k.string()?;
            k.end()?;
            if alg != ktype {
                return Err(KeyError::WrongAlgorithm);
            }
            let group = EcGroup::from_curve_name(nid).map_err(|_| KeyError::Malformed)?;
            let mut ctx = openssl::bn::BigNumContext::new().map_err(|_| KeyError::Malformed)?;
            let point = EcPoint::from_bytes(&group, q, &mut ctx).map_err(|_| KeyError::Malformed)?;
            let key = EcKey::from_public_key(&group, &point).map_err(|_| KeyError::Malformed)?;
            key.check_key().map_err(|_| KeyError::Malformed)?;
            let mut rs = Reader::new(sig);
            let r = mpint(rs.string()?)?;
            let s = mpint(rs.string()?)?;
            rs.end()?;
            let esig = EcdsaSig::from_private_components(r, s).map_err(|_| KeyError::Malformed)?;
            let digest = openssl::hash::hash(md, data).map_err(|_| KeyError::Malformed)?;
            esig.verify(&digest, &key).unwrap_or(false)
        }
        b"ssh-rsa" => {
            let e = mpint(k.string()?)?;
            let n = mpint(k.string()?)?;
            k.end()?;
            let md = match alg {
                b"rsa-sha2-256" => MessageDigest::sha256(),
                b"rsa-sha2-512" => MessageDigest::sha512(),
                _ => return Err(KeyError::WrongAlgorithm),
            };
            if n.num_bits() < 2048 || n.num_bits() > 16384 {
                return Err(KeyError::Unsupported);
            }
            let rsa = Rsa::from_public_components(n, e).map_err(|_| KeyError::Malformed)?;
            let key = PKey::from_rsa(rsa).map_err(|_| KeyError::Malformed)?;
            let mut v = Verifier::new(md, &key).map_err(|_| KeyError::Malformed)?;
            v.update(data).map_err(|_| KeyError::Malformed)?;
            v.verify(sig).unwrap_or(false)
        }
        _ => return Err(KeyError::Unsupported),
    };
    if ok {
        Ok(())
    } else {
        Err(KeyError::BadSignature)
    }
}
