//! Issue 31 in the coordinator (docs/network.md, "Secrets"): the values
//! the starting CLI resolved arrive on the secrets pipe; each gets its
//! sentinel, derived from the Domain's sentinel key (the same at every
//! start until the key is rotated, `storage::sentinel_key`); the Domain's Trust Anchor issues a TLS
//! leaf per bound name; the egress gate gets bindings and leaves on the
//! lease pipe (the CA key stays here); every session gets the sentinels
//! and the CA bundle variables; the guest's CA bundle is the image's (or
//! the host's, with `ca_certs = "host"`) plus the Domain CA.
//!
//! INVARIANT: a real value is in this process's memory and on the two
//! pipes only: never in a file, a log line, an argv or an environment.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::{Coordinator, CoordinatorError};
use crate::config::secrets::{self as cfg, SecretValue};
use crate::config::Profile;
use crate::net::subst::Binding;
use crate::trust::TrustAnchor;
use crate::wire::supervisor::{GateBinding, GateLeaf, GateSecrets, LeaseMsg};
use crate::wire::Message;

/// Test-only knob, read from the coordinator's environment: a PEM file
/// whose CAs replace the host's system roots for the gate's upstream TLS
/// (the integration tests' test CA; no user setting uses it).
pub(super) const UPSTREAM_CA_ENV: &str = "LAZARET_TEST_UPSTREAM_CA";
/// The guest CA bundle in the generation directory (certificates only).
const GUEST_BUNDLE_FILE: &str = "ca-bundle.pem";
/// The largest CA bundle read from the image or the host.
const BUNDLE_MAX: u64 = 16 << 20;

/// A binding per secret of `profile`, with its sentinel derived from the
/// Domain's sentinel key in `root` (made at the first start with secrets);
/// every secret needs its value from the pipe (fail closed). The caller
/// holds the Domain lock.
pub(super) fn match_values(
    profile: &Profile,
    values: &[(String, SecretValue)],
    root: &Path,
    domain: &str,
) -> Result<Vec<Binding>, CoordinatorError> {
    let mut out: Vec<Binding> = Vec::new();
    if profile.secrets.is_empty() {
        return Ok(out);
    }
    let key = crate::storage::sentinel_key::load_or_create(root).map_err(|e| {
        CoordinatorError::Secrets(format!(
            "the sentinel key {}: {e}",
            crate::storage::sentinel_key::key_path(root).display()
        ))
    })?;
    for s in &profile.secrets {
        let Some((_, real)) = values.iter().find(|(k, _)| *k == s.var) else {
            return Err(CoordinatorError::Secrets(format!(
                "secret {} of profile {:?}: its value did not arrive from the starting lazaret",
                s.var, profile.name
            )));
        };
        // A sentinel copied back to the host as the value (from a file an
        // agent saved) would reach the host as itself: say so instead.
        if real.expose().starts_with(cfg::SENTINEL_PREFIX.as_bytes()) {
            return Err(CoordinatorError::Secrets(format!(
                "secret {} of profile {:?}: its value is a Lazaret sentinel (lzr-sk-...), not the real key: \
                 give its source the key itself",
                s.var, profile.name
            )));
        }
        let sentinel =
            cfg::derived_sentinel(&key, domain, &s.var).map_err(|e| CoordinatorError::TrustAnchor(e.into()))?;
        out.push(Binding {
            var: s.var.clone(),
            sentinel,
            real: real.clone(),
            hosts: s.hosts.clone(),
            headers: s.headers.clone(),
            plain_http: s.plain_http,
        });
    }
    Ok(out)
}

/// Writes one frame and overwrites the encoded bytes.
pub(super) fn send(fd: impl AsFd, msg: LeaseMsg) -> std::io::Result<()> {
    let mut buf = msg.encode();
    drop(msg);
    let r = crate::sys::write_all(fd, &buf);
    buf.iter_mut().for_each(|b| *b = 0);
    std::hint::black_box(&buf);
    r
}

/// `rootfs` + `guest`, read only if no component of it is a symbolic
/// link (an image's link would otherwise read a host file).
fn read_image_file(rootfs: &Path, guest: &str) -> Option<Vec<u8>> {
    let mut p = rootfs.to_path_buf();
    for c in Path::new(guest).components().skip(1) {
        p.push(c);
        let m = std::fs::symlink_metadata(&p).ok()?;
        if m.file_type().is_symlink() {
            return None;
        }
    }
    read_bounded(&p)
}

fn read_bounded(p: &Path) -> Option<Vec<u8>> {
    let f = std::fs::File::open(p).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    f.take(BUNDLE_MAX).read_to_end(&mut buf).ok()?;
    Some(buf)
}

impl Coordinator {
    /// Issues the leaves, writes the guest CA bundle, and keeps what the
    /// gate and the sessions get. Returns the bundle's bind.
    pub(super) fn prepare_secrets(
        &mut self,
        anchor: &TrustAnchor,
        bindings: Vec<Binding>,
        rootfs: &Path,
        gen_dir: &Path,
    ) -> Result<crate::plan::BindMount, CoordinatorError> {
        let ca_pem = anchor.ca_cert_pem()?;
        let mut hosts: Vec<String> = bindings.iter().flat_map(|b| b.hosts.iter().cloned()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let mut leaves = Vec::new();
        for h in hosts {
            let leaf = anchor.issue_tls_server(&h, crate::net::tls::LEAF_HOURS)?;
            leaves.push(GateLeaf {
                host: h,
                cert_pem: leaf
                    .cert
                    .to_pem()
                    .map_err(|e| CoordinatorError::TrustAnchor(e.into()))?,
                key_pem: leaf
                    .key
                    .private_key_to_pem_pkcs8()
                    .map_err(|e| CoordinatorError::TrustAnchor(e.into()))?,
            });
        }
        // The base bundle: the host's with `ca_certs = "host"` (its bind
        // is replaced by this one), else the image's own.
        let guest = crate::config::GUEST_CA_BUNDLE;
        let base = match self.profile.volumes.iter().find(|v| v.guest == guest) {
            Some(v) => read_bounded(&v.host),
            None => read_image_file(rootfs, guest),
        };
        let bundle = crate::net::tls::guest_bundle(base.as_deref(), &ca_pem);
        let file: PathBuf = gen_dir.join(GUEST_BUNDLE_FILE);
        std::fs::write(&file, bundle).map_err(|e| CoordinatorError::GenDir(file.clone(), e))?;
        let upstream_ca = std::env::var(UPSTREAM_CA_ENV).ok().filter(|s| !s.is_empty());
        if let Some(p) = &upstream_ca {
            log::warn!("secrets: upstream TLS verified against {p} instead of the system roots ({UPSTREAM_CA_ENV}, tests only)");
        }
        let mut env: Vec<(String, String)> = bindings.iter().map(|b| (b.var.clone(), b.sentinel.clone())).collect();
        for name in crate::config::CA_ENV {
            if !self.profile.env.iter().any(|(k, _)| k == name) {
                env.push((name.to_string(), guest.to_string()));
            }
        }
        self.secret_env = env;
        log::info!(
            "secrets: {} bound ({}), sentinels derived from the Domain's sentinel key",
            bindings.len(),
            bindings.iter().map(|b| b.var.as_str()).collect::<Vec<_>>().join(", ")
        );
        self.gate_secrets = Some(GateSecrets {
            bindings: bindings
                .into_iter()
                .map(|b| GateBinding {
                    var: b.var.clone(),
                    sentinel: b.sentinel.clone(),
                    real: b.real.clone(),
                    hosts: b.hosts.clone(),
                    headers: b.headers.clone(),
                    plain_http: b.plain_http,
                })
                .collect(),
            leaves,
            ca_pem,
            upstream_ca,
        });
        Ok(crate::plan::BindMount {
            guest: guest.to_string(),
            host: file,
            read_only: true,
        })
    }
}
