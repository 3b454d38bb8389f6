//! The Trust Anchor: an ephemeral per-generation certificate authority held
//! by the Host Coordinator in memory only (SR-9). It issues role-bound
//! certificates whose identity is one subjectAltName URI:
//!
//!   `lazaret:ROLE/DOMAIN/GENERATION/PROFILE/COMPONENT[/SESSION]`
//!
//! A certificate for one role, Domain, generation or session never
//! authorizes another: verification compares every field with what the
//! coordinator expects, and a session's certificate must also be the very
//! one issued at its registration.

use std::fmt;

use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::sign::{Signer, Verifier};
use openssl::x509::extension::{BasicConstraints, SubjectAlternativeName};
use openssl::x509::{X509NameBuilder, X509};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    SessionCoordinator,
    AgentSandbox,
    NetworkSidecar,
    ClientCli,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::SessionCoordinator => "session-coordinator",
            Role::AgentSandbox => "agent-sandbox",
            Role::NetworkSidecar => "network-sidecar",
            Role::ClientCli => "client-cli",
        }
    }
}

/// Who a certificate speaks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub role: String,
    pub domain: String,
    pub generation: u64,
    pub profile: String,
    pub component: String,
    pub session: Option<String>,
}

impl Identity {
    fn uri(&self) -> String {
        let mut u = format!(
            "lazaret:{}/{}/{}/{}/{}",
            self.role, self.domain, self.generation, self.profile, self.component
        );
        if let Some(s) = &self.session {
            u.push('/');
            u.push_str(s);
        }
        u
    }

    fn from_uri(uri: &str) -> Option<Identity> {
        let rest = uri.strip_prefix("lazaret:")?;
        let f: Vec<&str> = rest.split('/').collect();
        if !(5..=6).contains(&f.len()) || f.iter().any(|x| x.is_empty()) {
            return None;
        }
        Some(Identity {
            role: f[0].into(),
            domain: f[1].into(),
            generation: f[2].parse().ok()?,
            profile: f[3].into(),
            component: f[4].into(),
            session: f.get(5).map(|s| s.to_string()),
        })
    }
}

#[derive(Debug)]
pub enum TrustError {
    OpenSsl(openssl::error::ErrorStack),
    NotIssuedByAnchor,
    NoIdentity,
    WrongIdentity { expected: String, found: String },
    BadSignature,
}

impl fmt::Display for TrustError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            TrustError::OpenSsl(e) => write!(f, "openssl: {e}"),
            TrustError::NotIssuedByAnchor => write!(f, "certificate was not issued by this generation's trust anchor"),
            TrustError::NoIdentity => write!(f, "certificate carries no lazaret identity"),
            TrustError::WrongIdentity { expected, found } => {
                write!(f, "certificate speaks for {found}, expected {expected}")
            }
            TrustError::BadSignature => write!(f, "signature does not match the record"),
        }
    }
}

impl From<openssl::error::ErrorStack> for TrustError {
    fn from(e: openssl::error::ErrorStack) -> Self {
        TrustError::OpenSsl(e)
    }
}

pub struct Credential {
    pub key: PKey<Private>,
    pub cert: X509,
}

impl Credential {
    /// `base64(PKCS#8 key DER).base64(cert DER)`: how a session's guest
    /// process receives its signing credential.
    pub fn export(&self) -> Result<String, TrustError> {
        Ok(format!(
            "{}.{}",
            openssl::base64::encode_block(&self.key.private_key_to_pkcs8()?),
            openssl::base64::encode_block(&self.cert.to_der()?)
        ))
    }
}

pub struct TrustAnchor {
    ca: Credential,
    pub domain: String,
    pub generation: u64,
    pub profile: String,
}

fn new_key() -> Result<PKey<Private>, TrustError> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    Ok(PKey::from_ec_key(EcKey::generate(&group)?)?)
}

fn serial() -> Result<openssl::asn1::Asn1Integer, TrustError> {
    let mut bn = BigNum::new()?;
    bn.rand(127, MsbOption::MAYBE_ZERO, false)?;
    Ok(bn.to_asn1_integer()?)
}

impl TrustAnchor {
    pub fn new(domain: &str, generation: u64, profile: &str) -> Result<TrustAnchor, TrustError> {
        let key = new_key()?;
        let mut name = X509NameBuilder::new()?;
        name.append_entry_by_nid(Nid::COMMONNAME, &format!("lazaret trust anchor g{generation}"))?;
        let name = name.build();
        let mut b = X509::builder()?;
        b.set_version(2)?;
        let sn = serial()?;
        b.set_serial_number(&sn)?;
        b.set_subject_name(&name)?;
        b.set_issuer_name(&name)?;
        b.set_pubkey(&key)?;
        b.set_not_before(&*Asn1Time::days_from_now(0)?)?;
        b.set_not_after(&*Asn1Time::days_from_now(7)?)?;
        b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
        b.sign(&key, MessageDigest::sha256())?;
        Ok(TrustAnchor {
            ca: Credential { key, cert: b.build() },
            domain: domain.into(),
            generation,
            profile: profile.into(),
        })
    }

    pub fn identity(&self, role: Role, component: &str, session: Option<&str>) -> Identity {
        Identity {
            role: role.name().into(),
            domain: self.domain.clone(),
            generation: self.generation,
            profile: self.profile.clone(),
            component: component.into(),
            session: session.map(String::from),
        }
    }

    /// Issues a fresh key and certificate for one role and component.
    pub fn issue(&self, role: Role, component: &str, session: Option<&str>) -> Result<Credential, TrustError> {
        let key = new_key()?;
        let id = self.identity(role, component, session);
        let mut name = X509NameBuilder::new()?;
        name.append_entry_by_nid(Nid::COMMONNAME, component)?;
        let name = name.build();
        let mut b = X509::builder()?;
        b.set_version(2)?;
        let sn = serial()?;
        b.set_serial_number(&sn)?;
        b.set_subject_name(&name)?;
        b.set_issuer_name(self.ca.cert.subject_name())?;
        b.set_pubkey(&key)?;
        b.set_not_before(&*Asn1Time::days_from_now(0)?)?;
        b.set_not_after(&*Asn1Time::days_from_now(7)?)?;
        let san = SubjectAlternativeName::new()
            .uri(&id.uri())
            .build(&b.x509v3_context(Some(&self.ca.cert), None))?;
        b.append_extension(san)?;
        b.sign(&self.ca.key, MessageDigest::sha256())?;
        Ok(Credential { key, cert: b.build() })
    }

    /// Checks that `cert_der` was issued by this anchor for exactly
    /// `expected`, and that `sig` by its key covers `data`.
    pub fn verify(&self, cert_der: &[u8], expected: &Identity, data: &[u8], sig: &[u8]) -> Result<(), TrustError> {
        let cert = X509::from_der(cert_der).map_err(|_| TrustError::NotIssuedByAnchor)?;
        let ca_key = self.ca.cert.public_key()?;
        if !cert.verify(&ca_key).unwrap_or(false) {
            return Err(TrustError::NotIssuedByAnchor);
        }
        let found = identity_of(&cert).ok_or(TrustError::NoIdentity)?;
        if &found != expected {
            return Err(TrustError::WrongIdentity {
                expected: expected.uri(),
                found: found.uri(),
            });
        }
        let key = cert.public_key()?;
        let mut v = Verifier::new(MessageDigest::sha256(), &key)?;
        v.update(data)?;
        if !v.verify(sig).unwrap_or(false) {
            return Err(TrustError::BadSignature);
        }
        Ok(())
    }
}

/// The lazaret identity a certificate carries.
pub fn identity_of(cert: &X509) -> Option<Identity> {
    let sans = cert.subject_alt_names()?;
    let uris: Vec<&str> = sans.iter().filter_map(|g| g.uri()).collect();
    match uris.as_slice() {
        [one] => Identity::from_uri(one),
        _ => None,
    }
}

/// Signs `data` with a credential's key (the escalation client's side).
pub fn sign(key: &PKey<Private>, data: &[u8]) -> Result<Vec<u8>, TrustError> {
    let mut s = Signer::new(MessageDigest::sha256(), key)?;
    s.update(data)?;
    Ok(s.sign_to_vec()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_certificate_authorizes_only_its_own_identity() {
        let ta = TrustAnchor::new(&"d".repeat(20), 4, "default").unwrap();
        let cred = ta.issue(Role::ClientCli, "c1", Some("s1")).unwrap();
        let der = cred.cert.to_der().unwrap();
        let sig = sign(&cred.key, b"hello").unwrap();
        let me = ta.identity(Role::ClientCli, "c1", Some("s1"));
        ta.verify(&der, &me, b"hello", &sig).unwrap();
        // Tampered data, another session, another role, another generation.
        assert!(matches!(
            ta.verify(&der, &me, b"hellO", &sig),
            Err(TrustError::BadSignature)
        ));
        let other = ta.identity(Role::ClientCli, "c1", Some("s2"));
        assert!(matches!(
            ta.verify(&der, &other, b"hello", &sig),
            Err(TrustError::WrongIdentity { .. })
        ));
        let role = ta.identity(Role::AgentSandbox, "c1", Some("s1"));
        assert!(matches!(
            ta.verify(&der, &role, b"hello", &sig),
            Err(TrustError::WrongIdentity { .. })
        ));
        // A certificate from another anchor (another Domain or generation).
        let other_ta = TrustAnchor::new(&"d".repeat(20), 5, "default").unwrap();
        let foreign = other_ta.issue(Role::ClientCli, "c1", Some("s1")).unwrap();
        let fsig = sign(&foreign.key, b"hello").unwrap();
        assert!(matches!(
            ta.verify(&foreign.cert.to_der().unwrap(), &me, b"hello", &fsig),
            Err(TrustError::NotIssuedByAnchor)
        ));
        assert!(matches!(
            ta.verify(b"garbage", &me, b"hello", &sig),
            Err(TrustError::NotIssuedByAnchor)
        ));
    }

    #[test]
    fn credentials_export_as_one_line() {
        let ta = TrustAnchor::new(&"d".repeat(20), 1, "p").unwrap();
        let c = ta.issue(Role::ClientCli, "c", Some("s")).unwrap().export().unwrap();
        assert_eq!(c.split('.').count(), 2);
        assert!(!c.contains('\n'));
    }
}
