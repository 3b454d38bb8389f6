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
use crate::wire::show::NetReadiness;
use crate::wire::FileError;

/// A published file's content; missing is `None`, and so is a malformed one
/// (said on stderr): nothing unverified is shown.
fn read<T>(what: Result<T, FileError>) -> Option<T> {
    match what {
        Ok(v) => Some(v),
        Err(FileError::Read(_, e)) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            eprintln!("lazaret: warning: {e}");
            None
        }
    }
}

/// The readiness as `(key, value)` lines, in the order they are shown
/// (`probe` once per check).
fn fields(r: &NetReadiness) -> Vec<(String, String)> {
    let mut kv: Vec<(String, String)> = vec![
        ("generation".into(), r.generation.to_string()),
        ("network-sidecar".into(), r.sidecar_id.clone()),
        ("policy-digest".into(), r.policy_digest.clone()),
        ("netns-inode".into(), r.netns_inode.to_string()),
        ("fingerprint".into(), r.fingerprint.clone()),
    ];
    if let Some(p) = r.helper_pid {
        kv.push(("helper-pid".into(), p.to_string()));
    }
    kv.extend(r.probe.iter().map(|l| ("probe".to_string(), l.clone())));
    if let Some(f) = r.router {
        kv.push(("router-netns-inode".into(), f.netns_inode.to_string()));
        kv.push((
            "enforced-at".into(),
            format!(
                "router namespace (host kernel): {} refused, {} forwarded to slirp4netns; \
                 the sandbox has one route, to the router",
                f.refused, f.forwarded
            ),
        ));
    }
    kv
}

pub fn show(
    cfg: &Config,
    profile: &Profile,
    domain_id: &str,
    workspace: &Path,
    gen_dir: &Path,
    published: bool,
    json: bool,
) -> Result<i32, sidecar::SidecarError> {
    let (host, nets) = if profile.egress.networked() {
        (sidecar::host_ipv4_addrs()?, sidecar::host_local_nets()?)
    } else {
        (Vec::new(), Vec::new())
    };
    let policy = netpolicy::derive_with_host_nets(&cfg.path, cfg.default_deny.as_deref(), profile, &host, &nets)
        .map_err(sidecar::SidecarError::Policy)?
        .by_name(profile);
    let readiness = published
        .then(|| {
            read(crate::wire::show::read_readiness(
                &gen_dir.join(sidecar::READINESS_FILE),
            ))
        })
        .flatten()
        .map(|r| fields(&r));
    // Host port forwards: the installed ones while running, else the profile's.
    let ports: Vec<String> = published
        .then(|| {
            read(crate::wire::show::read_ports(
                &gen_dir.join(crate::config::ports::PORTS_FILE),
            ))
        })
        .flatten()
        .unwrap_or_else(|| profile.ports.clone())
        .iter()
        .map(|p| p.to_string())
        .collect();
    if json {
        let out = show_json(
            domain_id,
            profile,
            workspace,
            published,
            &policy,
            &ports,
            readiness.as_deref(),
        );
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
    print!("{}", describe_secrets(&profile.secrets));
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

/// `net show --json` (pure): the Domain, its policy, ports, secrets and,
/// while it runs, its readiness fields.
pub(crate) fn show_json(
    domain_id: &str,
    profile: &Profile,
    workspace: &Path,
    published: bool,
    policy: &netpolicy::Policy,
    ports: &[String],
    readiness: Option<&[(String, String)]>,
) -> Json {
    let ready = match readiness {
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
    Json::Obj(vec![
        ("domain_id", Json::s(domain_id)),
        ("profile", Json::s(&profile.name)),
        ("workspace", Json::s(workspace.to_string_lossy())),
        ("running", Json::Bool(published)),
        ("policy", policy.to_json()),
        ("ports", Json::strs(ports)),
        ("secrets", secrets_json(&profile.secrets)),
        ("readiness", ready),
    ])
}

/// `secrets` of the profile: name, source kind and hosts; never a value
/// (none is read here).
fn secrets_json(secrets: &[crate::config::secrets::Secret]) -> Json {
    Json::Arr(
        secrets
            .iter()
            .map(|s| {
                Json::Obj(vec![
                    ("name", Json::s(&s.var)),
                    ("source", Json::s(s.source.kind())),
                    ("hosts", Json::strs(&s.hosts)),
                    ("headers", Json::strs(&s.headers)),
                    ("plain_http", Json::Bool(s.plain_http)),
                ])
            })
            .collect(),
    )
}

fn describe_secrets(secrets: &[crate::config::secrets::Secret]) -> String {
    if secrets.is_empty() {
        return "secrets: none\n".into();
    }
    let mut out =
        String::from("secrets (the sandbox sees a sentinel; the value is swapped in only for these hosts):\n");
    for s in secrets {
        out.push_str(&format!(
            "  {} from {} -> {} (in {}{})\n",
            s.var,
            s.source.kind(),
            crate::display::escape(&s.hosts.join(", ")),
            s.headers.join(", "),
            if s.plain_http {
                "; also over plain HTTP, in cleartext"
            } else {
                ""
            }
        ));
    }
    out
}

/// `lazaret net log` lists at most this many rows (leak attempts and
/// downgrades first, then newest first); `--json` has them all.
pub const LOG_ROWS_MAX: usize = 200;

/// The rows `lazaret net log` lists, at most [`LOG_ROWS_MAX`]: leak
/// attempts and downgrades first (no flood of newer refusals pushes one
/// out), then the rest, each part newest first as `rows` is.
fn listed(rows: &[(crate::net::gate::LogEntry, u64)]) -> Vec<&(crate::net::gate::LogEntry, u64)> {
    let (alarms, rest): (Vec<_>, Vec<_>) = rows.iter().partition(|(e, _)| crate::net::gate::alarm(&e.why));
    alarms.into_iter().chain(rest).take(LOG_ROWS_MAX).collect()
}

/// The rows `net log` shows (pure): the sandbox's own traffic, and the
/// Domain's start-up checks only with `all`; and how many log lines of
/// checks were left out.
pub fn shown_rows(
    rows: Vec<(crate::net::gate::LogEntry, u64)>,
    all: bool,
) -> (Vec<(crate::net::gate::LogEntry, u64)>, u64) {
    use crate::net::gate::Origin;
    let (shown, hidden): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(e, _)| all || e.origin == Origin::Sandbox);
    (shown, hidden.iter().map(|(_, n)| n).sum())
}

/// How a row of the Domain's own start-up checks is marked in the text.
const CHECK_MARK: &str = "[the Domain's own start-up check]";

/// `lazaret net log`: the egress gate's log of the Domain (its runtime dir
/// `run`: the log and the file before its last rotation), aggregated,
/// newest first, how many older refusals the rotations dropped, and the
/// `hosts` line that would allow the most refused names. The Domain's own
/// start-up checks (the readiness probe's refused packets) are shown, and
/// marked, only with `all`. Names came from the sandbox: printed escaped.
pub fn log(profile: &Profile, domain_id: &str, run: &Path, all: bool, json: bool) -> i32 {
    use crate::net::gate;
    let (text, dropped) = gate::read_log(run);
    let (rows, hidden) = shown_rows(gate::summarize(&gate::parse_log(&text)), all);
    let current: Vec<crate::config::hosts::HostPattern> = profile.hosts.clone();
    // Only the sandbox's refusals make the suggestion.
    let own: Vec<(gate::LogEntry, u64)> = rows
        .iter()
        .filter(|(e, _)| e.origin == gate::Origin::Sandbox)
        .cloned()
        .collect();
    let suggestion = gate::suggest_capped(&current, &own);
    if json {
        let out = Json::Obj(vec![
            ("domain_id", Json::s(domain_id)),
            ("profile", Json::s(&profile.name)),
            ("all", Json::Bool(all)),
            (
                "entries",
                Json::Arr(
                    rows.iter()
                        .map(|(e, n)| {
                            Json::Obj(vec![
                                ("last_ms", Json::s(e.ms.to_string())),
                                ("action", Json::s(&e.action)),
                                ("proto", Json::s(&e.proto)),
                                ("name", Json::s(&e.what)),
                                ("port", Json::s(e.port.to_string())),
                                ("reason", Json::s(&e.why)),
                                ("count", Json::s(n.to_string())),
                                ("origin", Json::s(e.origin.as_str())),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("checks_hidden", Json::s(hidden.to_string())),
            (
                "dropped",
                Json::Obj(vec![
                    ("entries", Json::s(dropped.entries.to_string())),
                    ("refusals", Json::s(dropped.refusals.to_string())),
                    ("alarms", Json::s(dropped.alarms.to_string())),
                ]),
            ),
            (
                "suggestion",
                suggestion.as_ref().map_or(Json::Null, |s| Json::s(&s.line)),
            ),
            (
                "suggestion_more",
                Json::s(suggestion.as_ref().map_or(0, |s| s.more).to_string()),
            ),
        ]);
        println!("{}", out.render());
        return 0;
    }
    let dropped_line = (dropped.entries > 0).then(|| {
        let other = dropped.entries - dropped.refusals;
        let also = if other > 0 {
            format!(" and {other} other entries")
        } else {
            String::new()
        };
        let alarms = if dropped.alarms > 0 {
            format!(
                ", {} of them LEAK ATTEMPTS OR DOWNGRADES (a secret's sentinel)",
                dropped.alarms
            )
        } else {
            String::new()
        };
        format!(
            "{} older refusals{also} dropped{alarms} (the log keeps its newest {} MiB)",
            dropped.refusals,
            (2 * gate::LOG_MAX) >> 20
        )
    });
    let hidden_line = (hidden > 0)
        .then(|| format!("({hidden} entries of the Domain's own start-up checks not shown: lazaret net log --all)"));
    if rows.is_empty() {
        println!("egress log of Domain {domain_id} (profile {}): empty", profile.name);
        for l in dropped_line.iter().chain(&hidden_line) {
            println!("{l}");
        }
        return 0;
    }
    println!(
        "egress log of Domain {domain_id} (profile {}), newest first:",
        profile.name
    );
    for (e, n) in listed(&rows) {
        let esc = crate::display::escape;
        let mark = match e.origin {
            gate::Origin::Check => format!(" {CHECK_MARK}"),
            gate::Origin::Sandbox => String::new(),
        };
        println!(
            "  {:<8} {:<3} {}:{} x{n} ({}){mark}",
            esc(&e.action),
            esc(&e.proto),
            esc(&e.what),
            e.port,
            esc(&e.why)
        );
    }
    if rows.len() > LOG_ROWS_MAX {
        println!(
            "  ... and {} older rows (lazaret net log --json lists them all)",
            rows.len() - LOG_ROWS_MAX
        );
    }
    for l in dropped_line.iter().chain(&hidden_line) {
        println!("{l}");
    }
    if let Some(s) = suggestion {
        println!(
            "to allow the refused names, in [profiles.{}.network]:\n  {}",
            profile.name,
            crate::display::escape(&s.line)
        );
        if s.more > 0 {
            println!(
                "  ({} more refused names not listed: the {} most refused are, most first)",
                s.more,
                gate::SUGGEST_MAX
            );
        }
    }
    0
}

#[cfg(test)]
mod json_snapshots {
    use std::path::Path;

    /// `net show --json` of one Domain per egress mode (the policy derived
    /// with fixed host addresses), and a running one with readiness:
    /// tests/snapshots/net-show-json.txt.
    #[test]
    fn net_show_json_snapshot() {
        let cfg = crate::config::parse(
            Path::new("/c.toml"),
            "[network]\nhosts = [\"api.test\"]\n\
             [profiles.open.network]\nallow = [\"198.18.4.0/24\"]\n\
             [profiles.byname]\nports = [\"18000:8000\"]\n[profiles.byname.network]\nhosts = [\"*.example.com\", \"git.example:22\"]\n\
             [profiles.byname.secrets.API_KEY]\nfrom = \"env:API_KEY\"\nhosts = [\"api.test\"]\n\
             [profiles.log.network]\nmode = \"log\"\n\
             [profiles.none.network]\nmode = \"none\"\n",
        )
        .unwrap();
        let host = ["192.0.2.10".parse().unwrap()];
        let nets = ["192.0.2.0/24".parse().unwrap()];
        let mut out = String::new();
        for name in ["open", "byname", "log", "none"] {
            let mut p = cfg.profile(name).unwrap().clone();
            if name == "open" {
                // The global hosts would make every profile allow-by-name.
                p = crate::config::Profile {
                    hosts: vec![],
                    global_hosts: 0,
                    ..p
                }
                .with_global_hosts(&[]);
            }
            let policy = crate::net::policy::derive_with_host_nets(&cfg.path, None, &p, &host, &nets)
                .unwrap()
                .by_name(&p);
            let ports: Vec<String> = p.ports.iter().map(|x| x.to_string()).collect();
            let running = name == "byname";
            let kv: Vec<(String, String)> = vec![
                ("generation".into(), "3".into()),
                ("policy-digest".into(), policy.digest()),
                (
                    "probe".into(),
                    "deny 10.0.0.1 (10.0.0.0/8): refused by the router".into(),
                ),
            ];
            let j = super::show_json(
                "3f2a9c1b4d5e6f708192",
                &p,
                Path::new("/home/me/src/api"),
                running,
                &policy,
                &ports,
                running.then_some(&kv[..]),
            );
            out.push_str(&format!("{name}: {}\n", j.render()));
        }
        crate::snapshot::check("net-show-json.txt", &out);
    }
}

#[cfg(test)]
mod secret_tests {
    #[test]
    fn secrets_are_listed_without_values() {
        let cfg = crate::config::parse(
            std::path::Path::new("/c.toml"),
            "[network]\nhosts = [\"api.test\"]\n[profiles.c.secrets.API_KEY]\nfrom = \"file:/k/secret-file\"\nhosts = [\"api.test\"]\n",
        )
        .unwrap();
        let p = cfg.profile("c").unwrap();
        let text = super::describe_secrets(&p.secrets);
        assert!(
            text.contains("API_KEY from file -> api.test (in authorization, x-api-key, proxy-authorization)\n"),
            "{text}"
        );
        assert!(!text.contains("/k/secret-file"), "{text}");
        let j = super::secrets_json(&p.secrets).render();
        assert!(
            j.contains("\"API_KEY\"") && j.contains("\"file\"") && j.contains("api.test"),
            "{j}"
        );
        assert_eq!(super::describe_secrets(&[]), "secrets: none\n");
    }
}

#[cfg(test)]
mod log_tests {
    use crate::net::gate;

    /// `net log` hides the Domain's own start-up checks unless `--all`,
    /// counting them; the sandbox's refusals are in both.
    #[test]
    fn the_checks_are_shown_only_with_all() {
        let text = "1\trefused\ttcp\t10.0.0.1\t9\ta denied address\tcheck\n\
                    2\trefused\ttcp\t10.0.0.1\t9\ta denied address\tcheck\n\
                    3\trefused\ttcp\t192.168.0.1\t9\ta denied address\tcheck\n\
                    4\trefused\ttcp\t10.0.0.1\t9\ta denied address\tsandbox\n\
                    5\trefused\tdns\tother.test\t53\tnot in network.hosts\tsandbox\n";
        let rows = || gate::summarize(&gate::parse_log(text));
        let (some, hidden) = super::shown_rows(rows(), false);
        let names: Vec<(&str, gate::Origin)> = some.iter().map(|(e, _)| (e.what.as_str(), e.origin)).collect();
        assert_eq!(
            names,
            [
                ("other.test", gate::Origin::Sandbox),
                ("10.0.0.1", gate::Origin::Sandbox)
            ]
        );
        assert_eq!(hidden, 3);
        let (every, hidden) = super::shown_rows(rows(), true);
        assert_eq!((every.len(), hidden), (4, 0));
        assert_eq!(every.iter().filter(|(e, _)| e.origin == gate::Origin::Check).count(), 2);
    }

    /// Attack: one leak attempt, then a flood of newer refusals of
    /// made-up names: `net log` still lists the leak attempt, first.
    #[test]
    fn a_flood_does_not_push_a_leak_attempt_out_of_the_listing() {
        let mut text = String::from("1\trefused\ttcp\tother.test\t80\tleak attempt: the sentinel of K\n");
        for i in 0..1000 {
            text.push_str(&format!(
                "{}\trefused\tdns\tn{i}.test\t53\tnot in network.hosts\n",
                i + 2
            ));
        }
        let rows = gate::summarize(&gate::parse_log(&text));
        let l = super::listed(&rows);
        assert_eq!(l.len(), super::LOG_ROWS_MAX);
        assert_eq!(l[0].0.what, "other.test");
        assert_eq!(l[1].0.what, "n999.test");
    }
}
