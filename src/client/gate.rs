//! `lazaret gate --config FILE`: the egress gate stand-alone, as the
//! sidecar of a Kubernetes pod (docs/kubernetes.md). The same gate code as
//! a Domain's (`net::gate`, `net::terminate`, `net::subst`), started by
//! `net::gate::start_sidecar` in the current network namespace; its
//! configuration is `export::gateconf`'s, written by `lazaret export
//! kubernetes`. Secret values come from the environment variables the
//! config names (a Kubernetes Secret's keys), never from the file.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::client::args::finish_args;
use crate::client::failure::Failure;
use crate::config::secrets::SecretValue;
use crate::export::gateconf::{self, GateConfig};
use crate::net::policy::{GatePlan, Plan, PlanRoute, RouteKind};
use crate::net::subst::Binding;

/// The test-only upstream CA knob the coordinator reads too.
const UPSTREAM_CA_ENV: &str = "LAZARET_TEST_UPSTREAM_CA";
/// The system roots the agent's bundle starts from, when present.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub(super) fn cmd_gate(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let ready: Option<PathBuf> = args.opt_value_from_str("--ready")?;
    let config: Option<PathBuf> = args.opt_value_from_str("--config")?;
    finish_args(args)?;
    if let Some(f) = ready {
        // The startup probe: the gate wrote its CA bundle once it listens.
        return Ok(if std::fs::metadata(f).is_ok_and(|m| m.len() > 0) {
            0
        } else {
            1
        });
    }
    let Some(path) = config else {
        return Err(Failure::Export("gate: expected --config FILE".into()));
    };
    let text = std::fs::read(&path)
        .map_err(|e| Failure::Export(format!("gate: cannot read {}: {e}", crate::display::escape_path(&path))))?;
    let text = String::from_utf8(text).map_err(|_| {
        Failure::Export(format!(
            "gate: {}: expected UTF-8 text",
            crate::display::escape_path(&path)
        ))
    })?;
    let c = gateconf::parse(&text)
        .map_err(|e| Failure::Export(format!("gate: {}: {e}", crate::display::escape_path(&path))))?;
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let bindings = bindings(&c, |k| std::env::var_os(k).map(|v| v.into_encoded_bytes()))?;
    let plan = plan(
        &c,
        upstream(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()),
    );
    if plan.gate.as_ref().is_some_and(|g| g.upstream.is_empty()) {
        return Err(Failure::ExportFailed(
            "gate: no IPv4 nameserver in /etc/resolv.conf".into(),
        ));
    }
    let dir = Path::new(&c.ca_dir);
    let secrets = if bindings.is_empty() {
        None
    } else {
        let anchor = crate::trust::TrustAnchor::new("lazaret-gate", 1, "sidecar")
            .map_err(|e| Failure::ExportFailed(format!("gate: the CA: {e}")))?;
        let upstream_ca = std::env::var(UPSTREAM_CA_ENV).ok().filter(|s| !s.is_empty());
        if let Some(p) = &upstream_ca {
            log::warn!("upstream TLS verified against {p} instead of the system roots ({UPSTREAM_CA_ENV}, tests only)");
        }
        let s = crate::net::terminate::Secrets::build(bindings, &anchor, upstream_ca.as_deref().map(Path::new))
            .map_err(|e| Failure::ExportFailed(format!("gate: the TLS leaves: {e}")))?;
        let ca = anchor
            .ca_cert_pem()
            .map_err(|e| Failure::ExportFailed(format!("gate: the CA: {e}")))?;
        write_file(&dir.join("ca.pem"), &ca)?;
        Some((s, ca))
    };
    let (secrets, ca) = match secrets {
        Some((s, ca)) => (Some(s), ca),
        None => (None, Vec::new()),
    };
    let handle = crate::net::gate::start_sidecar(&plan, c.listen, c.dns, dir.join("egress.log"), secrets)
        .map_err(|e| Failure::ExportFailed(format!("gate: {e}")))?;
    // Ready: the agent's bundle (the system roots and the gate's CA) last,
    // so that the startup probe passes only once the gate listens.
    let mut bundle = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with(b"\n") {
        bundle.push(b'\n');
    }
    bundle.extend_from_slice(&ca);
    if bundle.is_empty() {
        bundle.extend_from_slice(b"# lazaret gate: no secrets, no CA\n");
    }
    write_file(&dir.join("ca-bundle.pem"), &bundle)?;
    log::info!(
        "egress gate listening on {} (DNS {}), {} names, {} secrets",
        c.listen,
        c.dns,
        c.hosts.len(),
        c.secrets.len()
    );
    while !handle.ended() {
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    Err(Failure::ExportFailed("gate: a gate thread ended".into()))
}

fn write_file(p: &Path, data: &[u8]) -> Result<(), Failure> {
    std::fs::write(p, data)
        .map_err(|e| Failure::ExportFailed(format!("gate: cannot write {}: {e}", crate::display::escape_path(p))))
}

/// A binding per secret, its value from the variable the config names;
/// a missing or empty one refuses the start (fail closed).
fn bindings(c: &GateConfig, var: impl Fn(&str) -> Option<Vec<u8>>) -> Result<Vec<Binding>, Failure> {
    c.secrets
        .iter()
        .map(|s| {
            let raw = var(&s.env)
                .ok_or_else(|| Failure::Export(format!("gate: secret {}: the variable {} is not set", s.var, s.env)))?;
            let real = SecretValue::new(raw)
                .map_err(|e| Failure::Export(format!("gate: secret {}: the variable {}: {e}", s.var, s.env)))?;
            Ok(Binding {
                var: s.var.clone(),
                sentinel: s.sentinel.clone(),
                real,
                hosts: s.hosts.clone(),
                headers: s.headers.clone(),
                plain_http: s.plain_http,
            })
        })
        .collect()
}

/// The IPv4 nameservers of a resolv.conf.
fn upstream(resolv: &str) -> Vec<Ipv4Addr> {
    resolv
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse().ok())
        .collect()
}

/// The gate's plan: every address (the pod's network policy and the
/// redirect rules keep the rest) but the denies, with the allow ranges
/// back inside them; the listed names.
fn plan(c: &GateConfig, upstream: Vec<Ipv4Addr>) -> Plan {
    let mut routes = vec![PlanRoute {
        prefix: "0.0.0.0/0".parse().expect("a prefix"),
        kind: RouteKind::Helper,
    }];
    routes.extend(c.deny.iter().map(|p| PlanRoute {
        prefix: *p,
        kind: RouteKind::Reject,
    }));
    routes.extend(c.allow.iter().filter(|a| !c.deny.contains(a)).map(|p| PlanRoute {
        prefix: *p,
        kind: RouteKind::Helper,
    }));
    Plan {
        enabled: true,
        custom_dns: false,
        routes,
        gate: Some(GatePlan {
            log_only: false,
            hosts: c.hosts.clone(),
            upstream,
            forwarded: Vec::new(),
            idle_timeout_s: c.idle_timeout_s,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONF: &str = "lazaret-gate 1\nlisten 127.0.0.1:15001\ndns 127.0.0.1:15053\nca-dir /run/lazaret-gate\nidle-timeout 900\nhost api.example.com\ndeny 10.0.0.0/8\ndeny 10.20.5.0/24\nallow 10.20.0.0/16\nsecret API_KEY env=LAZARET_SECRET_API_KEY sentinel=lzr-sk-0123456789abcdef hosts=api.example.com headers=authorization plain-http=no\n";

    #[test]
    fn plan_keeps_the_denies_and_the_allow_ranges() {
        let c = gateconf::parse(CONF).unwrap();
        let p = plan(&c, vec![Ipv4Addr::new(198, 18, 0, 1)]);
        assert!(p.gate_may_connect(Ipv4Addr::new(93, 184, 216, 34)));
        assert!(!p.gate_may_connect(Ipv4Addr::new(10, 1, 2, 3)));
        assert!(p.gate_may_connect(Ipv4Addr::new(10, 20, 1, 1)));
        assert!(!p.gate_may_connect(Ipv4Addr::new(10, 20, 5, 1)));
        assert!(!p.gate_may_connect(Ipv4Addr::new(127, 0, 0, 1)));
    }

    #[test]
    fn a_missing_value_refuses_the_start() {
        let c = gateconf::parse(CONF).unwrap();
        assert!(bindings(&c, |_| None).is_err());
        assert!(bindings(&c, |_| Some(Vec::new())).is_err());
        let b = bindings(&c, |k| (k == "LAZARET_SECRET_API_KEY").then(|| b"sk-value".to_vec())).unwrap();
        assert_eq!(b[0].real.expose(), b"sk-value");
        assert_eq!(
            upstream("# x\nnameserver 10.96.0.10\nnameserver ::1\nsearch a\n"),
            vec![Ipv4Addr::new(10, 96, 0, 10)]
        );
    }
}
