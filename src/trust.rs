//! The Trust Anchor: an ephemeral per-generation certificate authority held
//! by the Host Coordinator in memory only. It issues role-bound
//! certificates whose identity is one subjectAltName URI:
//!
//!   `lazaret:ROLE/DOMAIN/GENERATION/PROFILE/COMPONENT[/SESSION]`
//!
//! A certificate for one role, Domain, generation or session never
//! authorizes another: verification compares every field with what the
//! coordinator expects, and a session's certificate must also be the very
//! one issued at its registration.
//!
//! The session's side is [`crate::session_key::SessionKey`]: what the
//! escalation client parses from [`Credential::export`] and signs with,
//! without OpenSSL (a fresh process inside gVisor pays milliseconds for
//! linking and starting it).

use std::fmt;

use crate::session_key::{is_credential_field, CREDENTIAL_TAG};

use openssl::asn1::{Asn1Time, Asn1TimeRef};
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private, Public};
use openssl::sign::Verifier;
use openssl::x509::extension::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName, SubjectKeyIdentifier,
};
use openssl::x509::{X509Builder, X509NameBuilder, X509NameRef, X509};

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
    MalformedCredential(&'static str),
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
            TrustError::MalformedCredential(what) => write!(f, "malformed session credential: {what}"),
        }
    }
}

impl std::error::Error for TrustError {}

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
    /// How a session's guest process receives its signing credential, one
    /// line:
    ///
    ///   `lzc2:KEY.DOMAIN.GENERATION.SESSION.CLIENT.CERT`
    ///
    /// KEY is the raw P-256 private scalar (64 hex digits), the next four
    /// fields are the certificate's identity in plain text, CERT is the
    /// certificate DER in base64. The client forwards CERT untouched and
    /// never parses it; the coordinator still checks it against the very
    /// certificate issued at registration, and the signature against its
    /// key. The key is the first `.`-separated field, so `${CRED%%.*}` is
    /// the tag and the secret.
    pub fn export(&self) -> Result<String, TrustError> {
        let id = identity_of(&self.cert).ok_or(TrustError::NoIdentity)?;
        let session = id.session.as_deref().ok_or(TrustError::NoIdentity)?;
        if ![id.domain.as_str(), session, id.component.as_str()]
            .iter()
            .all(|f| is_credential_field(f))
        {
            return Err(TrustError::MalformedCredential("identity field not exportable"));
        }
        let scalar = self.key.ec_key()?.private_key().to_vec_padded(32)?;
        let key: String = scalar.iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!(
            "{CREDENTIAL_TAG}{key}.{}.{}.{session}.{}.{}",
            id.domain,
            id.generation,
            id.component,
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

/// A v3 certificate builder for `key`, named `cn`, with a random serial,
/// issued by `issuer` (itself when `None`), valid `from` … `until`.
fn cert_builder(
    cn: &str,
    issuer: Option<&X509NameRef>,
    key: &PKey<Private>,
    from: &Asn1TimeRef,
    until: &Asn1TimeRef,
) -> Result<X509Builder, TrustError> {
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(Nid::COMMONNAME, cn)?;
    let name = name.build();
    let mut b = X509::builder()?;
    b.set_version(2)?;
    let sn = serial()?;
    b.set_serial_number(&sn)?;
    b.set_subject_name(&name)?;
    match issuer {
        Some(i) => b.set_issuer_name(i)?,
        None => b.set_issuer_name(&name)?,
    }
    b.set_pubkey(key)?;
    b.set_not_before(from)?;
    b.set_not_after(until)?;
    Ok(b)
}

impl TrustAnchor {
    pub fn new(domain: &str, generation: u64, profile: &str) -> Result<TrustAnchor, TrustError> {
        let key = new_key()?;
        let cn = format!("lazaret trust anchor g{generation}");
        let (from, until) = (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(7)?);
        let mut b = cert_builder(&cn, None, &key, &from, &until)?;
        b.append_extension(BasicConstraints::new().critical().ca().build()?)?;
        // What strict verifiers (Python 3.13's VERIFY_X509_STRICT) require
        // of a CA that TLS clients inside the sandbox trust (issue 31).
        b.append_extension(KeyUsage::new().critical().key_cert_sign().crl_sign().build()?)?;
        let ski = SubjectKeyIdentifier::new().build(&b.x509v3_context(None, None))?;
        b.append_extension(ski)?;
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
        let (from, until) = (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(7)?);
        let mut b = cert_builder(component, Some(self.ca.cert.subject_name()), &key, &from, &until)?;
        let san = SubjectAlternativeName::new()
            .uri(&id.uri())
            .build(&b.x509v3_context(Some(&self.ca.cert), None))?;
        b.append_extension(san)?;
        b.sign(&self.ca.key, MessageDigest::sha256())?;
        Ok(Credential { key, cert: b.build() })
    }

    /// A TLS server certificate for the DNS name `host` (issue 31: the
    /// egress gate terminates the sandbox's TLS with it for a host that has
    /// a secret bound), valid from five minutes ago for `hours`: a fresh
    /// key, `serverAuth` only, never a CA. The anchor's key signs it and
    /// never leaves this process.
    pub fn issue_tls_server(&self, host: &str, hours: u32) -> Result<Credential, TrustError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.issue_tls_server_valid(host, now - 300, now + i64::from(hours) * 3600)
    }

    /// [`TrustAnchor::issue_tls_server`] for the window `from..until` (Unix seconds).
    pub fn issue_tls_server_valid(&self, host: &str, from: i64, until: i64) -> Result<Credential, TrustError> {
        let key = new_key()?;
        let (from, until) = (Asn1Time::from_unix(from)?, Asn1Time::from_unix(until)?);
        let mut b = cert_builder(host, Some(self.ca.cert.subject_name()), &key, &from, &until)?;
        b.append_extension(BasicConstraints::new().critical().build()?)?;
        b.append_extension(KeyUsage::new().critical().digital_signature().build()?)?;
        b.append_extension(ExtendedKeyUsage::new().server_auth().build()?)?;
        let ctx = b.x509v3_context(Some(&self.ca.cert), None);
        let san = SubjectAlternativeName::new().dns(host).build(&ctx)?;
        let aki = AuthorityKeyIdentifier::new().keyid(true).build(&ctx)?;
        b.append_extension(san)?;
        b.append_extension(aki)?;
        b.sign(&self.ca.key, MessageDigest::sha256())?;
        Ok(Credential { key, cert: b.build() })
    }

    /// The anchor's own certificate (PEM): what the guest trust store adds.
    pub fn ca_cert_pem(&self) -> Result<Vec<u8>, TrustError> {
        Ok(self.ca.cert.to_pem()?)
    }

    /// Checks that `cert_der` was issued by this anchor for exactly
    /// `expected`, and that `sig` by its key covers `data`.
    pub fn verify(&self, cert_der: &[u8], expected: &Identity, data: &[u8], sig: &[u8]) -> Result<(), TrustError> {
        self.check_cert(cert_der, expected)?.verify(data, sig)
    }

    /// Checks that `cert_der` was issued by this anchor for exactly
    /// `expected`; the result verifies signatures by its key without
    /// checking the certificate again (a caller that keeps it must compare
    /// the certificate bytes and identity of each later use with it:
    /// [`CheckedCert::is`]).
    pub fn check_cert(&self, cert_der: &[u8], expected: &Identity) -> Result<CheckedCert, TrustError> {
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
        Ok(CheckedCert {
            der: cert_der.to_vec(),
            identity: found,
            key: cert.public_key()?,
        })
    }
}

/// A certificate this anchor issued, checked once (issuer and identity),
/// with its public key ready: the broker keeps one per session, so each
/// later request of the session costs one signature check.
pub struct CheckedCert {
    der: Vec<u8>,
    identity: Identity,
    key: PKey<Public>,
}

impl CheckedCert {
    /// Whether this is exactly the certificate `der`, checked for `identity`.
    pub fn is(&self, der: &[u8], identity: &Identity) -> bool {
        self.der == der && &self.identity == identity
    }

    /// Checks that `sig` by this certificate's key covers `data`.
    pub fn verify(&self, data: &[u8], sig: &[u8]) -> Result<(), TrustError> {
        let mut v = Verifier::new(MessageDigest::sha256(), &self.key)?;
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

/// Signs `data` with a credential's key through EVP (tests: the reference
/// for [`crate::session_key::SessionKey::sign`]).
#[cfg(test)]
pub fn sign(key: &PKey<Private>, data: &[u8]) -> Result<Vec<u8>, TrustError> {
    let mut s = openssl::sign::Signer::new(MessageDigest::sha256(), key)?;
    s.update(data)?;
    Ok(s.sign_to_vec()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_key::SessionKey;

    // Covers SR-9, FR-10.
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
        let cred = ta.issue(Role::ClientCli, "c", Some("s")).unwrap();
        let c = cred.export().unwrap();
        assert!(c.starts_with(CREDENTIAL_TAG));
        assert_eq!(c.split('.').count(), 6);
        assert!(!c.contains('\n'));
        // The first field is the private scalar and nothing else.
        let scalar = cred.key.ec_key().unwrap().private_key().to_vec_padded(32).unwrap();
        let hex: String = scalar.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(c.split('.').next().unwrap(), format!("{CREDENTIAL_TAG}{hex}"));
        // Only sessions' certificates are exported.
        assert!(ta.issue(Role::ClientCli, "c", None).unwrap().export().is_err());
    }

    #[test]
    fn a_session_key_parsed_from_the_export_signs_what_the_anchor_verifies() {
        let ta = TrustAnchor::new(&"d".repeat(20), 9, "default").unwrap();
        let cred = ta
            .issue(Role::ClientCli, "0123456789abcdef", Some("fedcba9876543210"))
            .unwrap();
        let sk = SessionKey::parse(&cred.export().unwrap()).unwrap();
        assert_eq!(sk.domain, "d".repeat(20));
        assert_eq!(sk.generation, 9);
        assert_eq!(sk.client, "0123456789abcdef");
        assert_eq!(sk.session, "fedcba9876543210");
        assert_eq!(sk.cert, cred.cert.to_der().unwrap());
        let me = ta.identity(Role::ClientCli, &sk.client, Some(&sk.session));
        let data = b"LZESC1\nid 00\n";
        // Nonces are derived from the key and the data (RFC 6979): the
        // same input signs the same, other inputs differently.
        assert_eq!(sk.sign(data), sk.sign(data));
        for i in 0..8u8 {
            let data = &[&data[..], &[i]].concat()[..];
            let sig = sk.sign(data);
            ta.verify(&sk.cert, &me, data, &sig).unwrap();
            assert!(matches!(
                ta.verify(&sk.cert, &me, b"LZESC1\nid 01\n\0", &sig),
                Err(TrustError::BadSignature)
            ));
        }
        // And the EVP reference signature verifies through the same path.
        ta.verify(&sk.cert, &me, data, &sign(&cred.key, data).unwrap()).unwrap();
        // Another session's key cannot sign for this certificate.
        let other = SessionKey::parse(
            &ta.issue(Role::ClientCli, "0123456789abcdef", Some("s2"))
                .unwrap()
                .export()
                .unwrap(),
        )
        .unwrap();
        assert!(matches!(
            ta.verify(&sk.cert, &me, data, &other.sign(data)),
            Err(TrustError::BadSignature)
        ));
    }

    #[test]
    fn the_anchor_refuses_a_client_signature_in_any_other_encoding() {
        // The client now writes the DER itself: the host must accept only
        // the one canonical encoding of a valid signature, whatever bytes
        // a sandbox puts in the record's signature field.
        let ta = TrustAnchor::new(&"d".repeat(20), 3, "default").unwrap();
        let cred = ta.issue(Role::ClientCli, "c", Some("s")).unwrap();
        let sk = SessionKey::parse(&cred.export().unwrap()).unwrap();
        let me = ta.identity(Role::ClientCli, "c", Some("s"));
        let data = b"LZESC1\nid 02\n";
        let sig = sk.sign(data);
        ta.verify(&sk.cert, &me, data, &sig).unwrap();
        let (r_len, s_at) = (sig[3] as usize, 4 + sig[3] as usize);
        let r = &sig[4..s_at];
        let s_int = &sig[s_at + 2..];
        let der = |r: &[u8], s: &[u8]| {
            let mut body = vec![0x02, r.len() as u8];
            body.extend_from_slice(r);
            body.extend_from_slice(&[0x02, s.len() as u8]);
            body.extend_from_slice(s);
            let mut out = vec![0x30, body.len() as u8];
            out.extend_from_slice(&body);
            out
        };
        assert_eq!(
            der(r, s_int),
            sig,
            "the test rebuilds the client's DER ({r_len} byte r)"
        );
        let padded_r = [&[0u8][..], r].concat();
        let mut trailing = sig.clone();
        trailing.push(0);
        let mut long_form = vec![0x30, 0x81, sig[1]];
        long_form.extend_from_slice(&sig[2..]);
        let mut flipped = sig.clone();
        *flipped.last_mut().unwrap() ^= 1;
        for (what, bad) in [
            ("r with a needless leading zero", der(&padded_r, s_int)),
            ("r and s swapped", der(s_int, r)),
            ("a trailing byte", trailing),
            ("a long-form length", long_form),
            ("one bit of s flipped", flipped),
            ("nothing", Vec::new()),
            ("the raw r || s", [r, s_int].concat()),
        ] {
            assert!(ta.verify(&sk.cert, &me, data, &bad).is_err(), "accepted {what}");
        }
    }

    #[test]
    fn malformed_credentials_are_refused() {
        let ta = TrustAnchor::new(&"d".repeat(20), 1, "p").unwrap();
        let good = ta.issue(Role::ClientCli, "c", Some("s")).unwrap().export().unwrap();
        assert!(SessionKey::parse(&good).is_ok());
        let f: Vec<String> = good[CREDENTIAL_TAG.len()..].split('.').map(String::from).collect();
        let with = |i: usize, v: &str| {
            let mut g = f.clone();
            g[i] = v.to_string();
            format!("{CREDENTIAL_TAG}{}", g.join("."))
        };
        let bads = [
            String::new(),
            // The old `base64(PKCS#8).base64(cert)` format.
            format!("{}.{}", f[0], f[5]),
            good.replacen(CREDENTIAL_TAG, "lzc3:", 1),
            format!("{good}.x"),
            format!("{CREDENTIAL_TAG}{}", f[..5].join(".")),
            with(0, &format!("zz{}", &f[0][2..])),
            with(0, &f[0][1..]),
            with(0, &format!("+{}", &f[0][1..])),
            with(0, &format!("é{}", &f[0][..62])),
            with(2, "+1"),
            with(1, ""),
            with(2, "-1"),
            with(3, "a/b"),
            with(4, "c d"),
            with(5, "not base64!"),
        ];
        for bad in &bads {
            assert!(SessionKey::parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
