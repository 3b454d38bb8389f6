//! `lazaret net show`: the derived network policy of a Domain and, when it
//! runs, its attested readiness — in words a user can check.
//!
//! The CLI never opens the store (only the lock holder does): readiness
//! comes from the summary the coordinator writes into the generation dir
//! once the probe passed, and only while the Domain is published.

use std::path::Path;

use crate::config::{Config, Profile};
use crate::net::policy as netpolicy;
use crate::net::sidecar;
use crate::plan::Json;

pub fn show(
    cfg: &Config,
    profile: &Profile,
    domain_id: &str,
    workspace: &Path,
    gen_dir: &Path,
    published: bool,
    json: bool,
) -> Result<i32, sidecar::SidecarError> {
    let (host, nets) = if profile.network {
        (sidecar::host_ipv4_addrs()?, sidecar::host_local_nets()?)
    } else {
        (Vec::new(), Vec::new())
    };
    let policy = netpolicy::derive_with_host_nets(&cfg.path, cfg.default_deny.as_deref(), profile, &host, &nets)
        .map_err(sidecar::SidecarError::Policy)?;
    let readiness = if published {
        std::fs::read_to_string(gen_dir.join(sidecar::READINESS_FILE))
            .ok()
            .map(|t| sidecar::parse_readiness(&t))
    } else {
        None
    };
    // Host port forwards: the installed ones while running, else the profile's.
    let ports: Vec<String> = match published
        .then(|| std::fs::read_to_string(gen_dir.join(crate::config::ports::PORTS_FILE)).ok())
        .flatten()
    {
        Some(t) => t
            .lines()
            .map(|l| crate::display::escape(l.trim()))
            .filter(|l| !l.is_empty())
            .collect(),
        None => profile.ports.iter().map(|p| p.to_string()).collect(),
    };
    if json {
        let ready = match &readiness {
            None => Json::Null,
            Some(kv) => Json::Obj(vec![
                (
                    "fields",
                    Json::Arr(
                        kv.iter()
                            .filter(|(k, _)| k != "probe")
                            .map(|(k, v)| Json::Arr(vec![Json::s(k), Json::s(v)]))
                            .collect(),
                    ),
                ),
                (
                    "probe",
                    Json::strs(
                        &kv.iter()
                            .filter(|(k, _)| k == "probe")
                            .map(|(_, v)| v.clone())
                            .collect::<Vec<_>>(),
                    ),
                ),
            ]),
        };
        let out = Json::Obj(vec![
            ("domain_id", Json::s(domain_id)),
            ("profile", Json::s(&profile.name)),
            ("workspace", Json::s(workspace.to_string_lossy())),
            ("running", Json::Bool(published)),
            ("policy", policy.to_json()),
            ("ports", Json::strs(&ports)),
            ("readiness", ready),
        ]);
        println!("{}", out.render());
        return Ok(0);
    }
    println!(
        "Domain {domain_id} (profile {} on {})",
        profile.name,
        crate::display::escape_path(workspace)
    );
    print!("{}", policy.describe());
    if ports.is_empty() {
        println!("port forwards: none");
    } else {
        println!("port forwards (host ADDR:PORT -> guest port), by slirp4netns:");
        for p in &ports {
            if let Some((host, guest)) = p.rsplit_once(':') {
                println!("  {host} -> {guest}");
            }
        }
    }
    match readiness {
        None if published => println!("readiness: the Domain is starting; not attested yet"),
        None => println!("readiness: the Domain is not running (the policy above applies when it starts)"),
        Some(kv) => {
            println!("readiness: attested and probed before publication");
            for (k, v) in kv {
                let (k, v) = (crate::display::escape(&k), crate::display::escape(&v));
                if k == "probe" {
                    println!("  probe {v}");
                } else {
                    println!("  {k}: {v}");
                }
            }
        }
    }
    Ok(0)
}
