//! The start-time side of a profile's `secrets` (docs/config.md,
//! docs/network.md "Secrets"): each source must resolve on the host, the
//! profile needs the egress gate as its swap point, and the values go to
//! the coordinator on a pipe.

use crate::client::failure::Failure;
use crate::client::resolve::Resolved;
use crate::config::secret_sources::{Fence, Reach};
use crate::config::{secrets, Config};
use crate::net::tls::SelfCheckError;
use crate::trust::TrustError;
use std::path::{Path, PathBuf};

/// Resolves every secret of the profile and refuses the start when one
/// does not, naming the secret and its source (exit 2, nothing started).
/// A profile whose network has no egress gate (`network.mode = "none"`)
/// cannot swap its secrets in and is refused too. The values go to the
/// coordinator this CLI may start, on a pipe only ([`send`]).
pub(crate) fn check_start(r: &Resolved) -> Result<Vec<(String, secrets::SecretValue)>, Failure> {
    if r.profile.secrets.is_empty() {
        return Ok(Vec::new());
    }
    let host = crate::config::secret_sources::SourceHost::here(
        &r.cfg,
        fence(&r.cfg, Some(&r.workspace), Some(&r.storage), r.paths.run.parent()),
    );
    let mut out = Vec::new();
    for s in &r.profile.secrets {
        let v = secrets::resolve(&r.profile.name, s, &host).map_err(|e| match e {
            secrets::SourceError::Config(c) => Failure::Config(c),
            secrets::SourceError::Resolve(e) => Failure::Secret(e),
        })?;
        out.push((s.var.clone(), v));
    }
    let policy = crate::net::policy::derive(&r.cfg.path, r.cfg.default_deny.as_deref(), &r.profile, &[])
        .map_err(Failure::Policy)?
        .by_name(&r.profile);
    if !policy.egress.gated() {
        return Err(no_gate(&r.profile.name, &r.profile.secrets));
    }
    Ok(out)
}

fn no_gate(profile: &str, s: &[secrets::Secret]) -> Failure {
    Failure::NoGate {
        profile: profile.to_string(),
        vars: s.iter().map(|s| s.var.clone()).collect(),
    }
}

/// Writes the resolved values to the coordinator's secrets pipe from a
/// thread of its own (the coordinator reads them as it starts); the
/// encoded frame is overwritten once written. The thread ends when the
/// pipe is written or its reader is gone.
pub(crate) fn send(
    values: &[(String, secrets::SecretValue)],
    pipe: std::os::fd::OwnedFd,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    use crate::wire::Message;
    let msg = crate::wire::start::SecretsMsg::Values(values.to_vec());
    std::thread::spawn(move || {
        let mut buf = msg.encode();
        drop(msg);
        let r = crate::sys::write_all(&pipe, &buf);
        buf.iter_mut().for_each(|b| *b = 0);
        std::hint::black_box(&buf);
        r
    })
}

/// The swap path on this host, with the real value in memory only: a
/// sentinel in a header the secret names, in a request to the secret's
/// first host over verified TLS, becomes the value; over plain HTTP it is
/// refused as a downgrade (unless `plain_http`); the value in a response
/// becomes the sentinel, the sentinel towards another host is refused, and
/// a TLS leaf for the host verifies by name.
pub(crate) fn swap_self_check(s: &secrets::Secret, value: secrets::SecretValue) -> Result<(), SelfCheckError> {
    use crate::net::subst::{Binding, Refusal, RequestSide, ResponseSide, Upstream};
    use std::collections::VecDeque;
    let host = &s.hosts[0];
    let sentinel = secrets::sentinel().map_err(|e| SelfCheckError::Trust(TrustError::OpenSsl(e)))?;
    let b = [Binding {
        var: s.var.clone(),
        sentinel: sentinel.clone(),
        real: value,
        hosts: s.hosts.clone(),
        headers: s.headers.clone(),
        plain_http: s.plain_http,
    }];
    let has = |h: &[u8], n: &[u8]| h.windows(n.len()).any(|w| w == n);
    let header = s.headers.first().map_or("authorization", String::as_str);
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n{header}: {sentinel}\r\n\r\n");
    let (mut out, mut ex) = (Vec::new(), VecDeque::new());
    let swap = SelfCheckError::Swap;
    RequestSide::new(host, &b, Upstream::Verified)
        .feed(req.as_bytes(), &mut out, &mut ex)
        .map_err(|_| swap("a request with a sentinel was refused"))?;
    if !has(&out, b[0].real.expose()) || has(&out, sentinel.as_bytes()) {
        return Err(swap("the sentinel was not replaced in a request"));
    }
    let plain = RequestSide::new(host, &b, Upstream::Plain).feed(req.as_bytes(), &mut Vec::new(), &mut VecDeque::new());
    match (plain, s.plain_http) {
        (Err(Refusal::Downgrade { .. }), false) | (Ok(()), true) => {}
        _ => return Err(swap("plain HTTP was not handled as the secret's plain_http says")),
    }
    let mut resp = b"HTTP/1.1 200 OK\r\nContent-Length: ".to_vec();
    resp.extend_from_slice(format!("{}\r\n\r\n", b[0].real.expose().len()).as_bytes());
    resp.extend_from_slice(b[0].real.expose());
    let mut back = Vec::new();
    ResponseSide::new(host, &b)
        .feed(&resp, &mut back, &mut ex)
        .map_err(|_| swap("a response was refused"))?;
    if has(&back, b[0].real.expose()) || !has(&back, sentinel.as_bytes()) {
        return Err(swap("the value was not replaced in a response"));
    }
    let other = "not-a-secret-host.invalid";
    let leak = format!("GET / HTTP/1.1\r\nHost: {other}\r\nx-api-key: {sentinel}\r\n\r\n");
    match RequestSide::new(other, &b, Upstream::Verified).feed(leak.as_bytes(), &mut Vec::new(), &mut VecDeque::new()) {
        Err(Refusal::Leak { .. }) => {}
        _ => return Err(swap("a sentinel towards another host was not refused")),
    }
    crate::net::tls::self_check(host)?;
    // The gate's side: a leaf per bound name, the system roots load.
    let anchor = crate::trust::TrustAnchor::new("selfcheck", 1, "selfcheck")?;
    crate::net::terminate::Secrets::build(b.to_vec(), &anchor, None)?;
    Ok(())
}

/// The Fence of this host: `workspace` (the one being started, when
/// there is one) and its Git common directory, every volume of every
/// profile of `cfg`, the workspace of every Domain recorded under
/// `storage` (`domains/ID/domain.json`), and `storage` and `runtime`
/// themselves: what a secret source may not touch
/// (`config::secret_sources`).
pub(crate) fn fence(cfg: &Config, workspace: Option<&Path>, storage: Option<&Path>, runtime: Option<&Path>) -> Fence {
    fn add_workspace(f: &mut Fence, ws: &Path, what: Reach) {
        f.add(ws, what);
        if let Ok(crate::view::sentry::GitLayout::Linked { common_real, .. }) = crate::view::sentry::discover(ws) {
            f.add(&common_real, Reach::GitCommon);
        }
    }
    let mut f = Fence::default();
    if let Some(ws) = workspace {
        add_workspace(&mut f, ws, Reach::Workspace);
    }
    for p in cfg.profiles.values() {
        for v in &p.volumes {
            f.add(
                &v.host,
                Reach::Volume {
                    profile: p.name.clone(),
                    guest: v.guest.clone(),
                },
            );
        }
    }
    if let Some(storage) = storage {
        let mut roots: Vec<PathBuf> = std::fs::read_dir(storage.join("domains"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        roots.sort();
        for root in roots {
            if let Some(m) = crate::storage::state::read_meta(&root) {
                add_workspace(&mut f, Path::new(&m.workspace), Reach::OtherWorkspace);
            }
        }
        f.add(storage, Reach::Storage);
    }
    if let Some(r) = runtime {
        f.add(r, Reach::Runtime);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_self_check_passes_and_names_the_step() {
        let s = secrets::Secret {
            var: "K".into(),
            source: secrets::Source::Env("K".into()),
            hosts: vec!["api.test".into()],
            ttl_s: None,
            headers: vec!["x-goog-api-key".into()],
            plain_http: false,
            line: 1,
        };
        let v = secrets::SecretValue::new(b"sk-test-value-123".to_vec()).unwrap();
        swap_self_check(&s, v).unwrap();
        let msg = no_gate("claude", std::slice::from_ref(&s)).to_string();
        assert!(
            msg.contains("\"claude\"") && msg.contains("(K)") && msg.contains("network.hosts"),
            "{msg}"
        );
    }

    #[test]
    fn gather_finds_volumes_other_domains_and_lazarets_dirs() {
        // A scratch tree of canonical paths (nothing outside it is touched).
        struct Scratch(PathBuf);
        impl Scratch {
            fn p(&self, rel: &str) -> PathBuf {
                self.0.join(rel)
            }
        }
        let root = std::env::temp_dir().join(format!("lzfence-gather-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["ws", "vol"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let s = Scratch(std::fs::canonicalize(&root).unwrap());
        let cfg = crate::config::parse(
            Path::new("/cfg.toml"),
            &format!(
                "[profiles.a]\nvolumes = [\"{}:/data:ro\"]\n[profiles.b]\nvolumes = [\"/nonexistent-lz/v:/v\"]\n",
                s.p("vol").display()
            ),
        )
        .unwrap();
        let storage = s.p("outside/storage");
        let other = s.p("outside/otherws");
        std::fs::create_dir_all(storage.join("domains/0123456789abcdef0123")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(
            storage.join("domains/0123456789abcdef0123/domain.json"),
            format!(
                "{{\"domain_id\":\"0123456789abcdef0123\",\"profile\":\"a\",\"workspace\":\"{}\",\"persist\":[]}}",
                other.display()
            ),
        )
        .unwrap();
        let f = fence(
            &cfg,
            Some(&s.p("ws")),
            Some(&storage),
            Some(Path::new("/nonexistent-lz/run")),
        );
        let whats: Vec<(PathBuf, Reach)> = f.places().iter().map(|p| (p.path.clone(), p.what.clone())).collect();
        assert_eq!(
            whats,
            [
                (s.p("ws"), Reach::Workspace),
                (
                    s.p("vol"),
                    Reach::Volume {
                        profile: "a".into(),
                        guest: "/data".into()
                    }
                ),
                (
                    PathBuf::from("/nonexistent-lz/v"),
                    Reach::Volume {
                        profile: "b".into(),
                        guest: "/v".into()
                    }
                ),
                (other, Reach::OtherWorkspace),
                (storage, Reach::Storage),
                (PathBuf::from("/nonexistent-lz/run"), Reach::Runtime),
            ]
        );
    }
}
