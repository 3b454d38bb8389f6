//! Fingerprints of configuration: a recipe's, a profile's, and the one a
//! session must match to join a running Domain.

use super::defaults::DEFAULT_CAPS;
use super::model::*;
use super::values::Prefix;

impl Recipe {
    /// Identity of the recipe: a rebuild of the same recipe is skipped, so
    /// the image's digest changes only when the recipe does. `base_digest`:
    /// the manifest digest of the `from` image (a rebuilt base changes it).
    /// A recipe without `from` and `run` keeps its v1 fingerprint.
    pub fn fingerprint(&self, host_suite: &str, base_digest: Option<&str>) -> String {
        let mut buf = Vec::new();
        let layered = self.from.is_some() || !self.run.is_empty();
        put_field(
            &mut buf,
            if layered {
                b"lazaret-recipe-v2"
            } else {
                b"lazaret-recipe-v1"
            },
        );
        put_field(&mut buf, self.suite.as_deref().unwrap_or(host_suite).as_bytes());
        for p in &self.packages {
            put_field(&mut buf, p.as_bytes());
        }
        if layered {
            put_field(&mut buf, self.from.as_deref().unwrap_or("").as_bytes());
            put_field(&mut buf, base_digest.unwrap_or("").as_bytes());
            for step in &self.run {
                put_field(&mut buf, step.as_bytes());
            }
        }
        crate::domain::hex(&openssl::sha::sha256(&buf)[..8])
    }
}

impl Profile {
    /// First 16 lowercase hex chars of the SHA-256 of a canonical serialization
    /// of every field except `name`. Order-insensitive lists (`persist`,
    /// `allow`, `deny`) are sorted first; `volumes` keep their (mount) order.
    ///
    /// Every field is named below: a new one does not compile until it is
    /// either hashed or marked as not part of the fingerprint.
    pub fn fingerprint(&self) -> String {
        let Profile {
            name: _,
            image,
            command,
            persist,
            volumes,
            env,
            // Client-side only.
            pass_env: _,
            ports,
            allow,
            deny,
            ipv6,
            isolate_ignored,
            dns,
            egress,
            // Hashed below: the profile's own here, `[network] hosts` in
            // the join fingerprint.
            hosts: _,
            global_hosts: _,
            idle_timeout_s,
            caps,
            git_identity,
            limits,
            user,
            host_config,
            host_config_writable,
            host_hooks,
            secrets,
            // Host-side only.
            ssh_agent: _,
        } = self;
        let mut buf = Vec::new();
        let mut put = |tag: &str, items: &[&str]| {
            put_field(&mut buf, tag.as_bytes());
            put_field(&mut buf, items.len().to_string().as_bytes());
            for s in items {
                put_field(&mut buf, s.as_bytes());
            }
        };
        put("lazaret-profile", &["1"]);
        put("image", &[&image.to_string()]);
        put("command", &command.iter().map(String::as_str).collect::<Vec<_>>());
        let mut persist: Vec<&str> = persist.iter().map(String::as_str).collect();
        persist.sort_unstable();
        put("persist", &persist);
        let volumes: Vec<String> = volumes
            .iter()
            .map(|v| {
                let mut s = Vec::new();
                put_field(&mut s, v.host.to_string_lossy().as_bytes());
                put_field(&mut s, v.guest.as_bytes());
                put_field(&mut s, if v.read_only { b"ro" } else { b"rw" });
                String::from_utf8_lossy(&s).into_owned()
            })
            .collect();
        put("volumes", &volumes.iter().map(String::as_str).collect::<Vec<_>>());
        let env: Vec<String> = env.iter().map(|(k, v)| format!("{}={}", k, v)).collect();
        put("env", &env.iter().map(String::as_str).collect::<Vec<_>>());
        for (tag, list) in [("allow", allow), ("deny", deny)] {
            let mut v: Vec<Prefix> = list.clone();
            v.sort_unstable();
            let v: Vec<String> = v.iter().map(Prefix::to_string).collect();
            put(tag, &v.iter().map(String::as_str).collect::<Vec<_>>());
        }
        put("ipv6", &[if *ipv6 { "true" } else { "false" }]);
        put("isolate_ignored", &[if *isolate_ignored { "true" } else { "false" }]);
        // Added after the pin below: only non-default values are hashed, so
        // existing fingerprints stay what they were.
        if !dns.is_empty() {
            let dns: Vec<String> = dns.iter().map(Prefix::to_string).collect();
            put("dns", &dns.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if *egress == EgressMode::None {
            put("network", &["none"]);
        }
        if !ports.is_empty() {
            let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
            put("ports", &ports.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if caps.iter().map(String::as_str).ne(DEFAULT_CAPS.iter().copied()) {
            put("caps", &caps.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if !git_identity {
            put("git_identity", &["false"]);
        }
        let Limits {
            memory,
            pids,
            cpu_millis,
            disk,
            image_layer,
        } = limits;
        for (tag, v) in [
            ("memory", memory),
            ("pids", pids),
            ("cpus", cpu_millis),
            ("disk", disk),
            ("image_layer", image_layer),
        ] {
            if let Some(v) = v {
                put(&format!("limits.{tag}"), &[&v.to_string()]);
            }
        }
        if let Some(u) = user {
            put("user", &[u]);
        }
        for (tag, list) in [
            ("host_config", host_config),
            ("host_config_writable", host_config_writable),
        ] {
            if !list.is_empty() {
                let mut v: Vec<&str> = list.iter().map(String::as_str).collect();
                v.sort_unstable();
                put(tag, &v);
            }
        }
        if *host_hooks == HostHooks::Refuse {
            put("host_hooks", &["refuse"]);
        }
        if !secrets.is_empty() {
            let s: Vec<String> = secrets.iter().map(|s| s.fingerprint_item()).collect();
            put("secrets", &s.iter().map(String::as_str).collect::<Vec<_>>());
        }
        // The profile's own `network.hosts`; `[network] hosts` enters the
        // join fingerprint.
        if !self.own_hosts().is_empty() {
            let mut h: Vec<String> = self.own_hosts().iter().map(|p| p.to_string()).collect();
            h.sort_unstable();
            put("hosts", &h.iter().map(String::as_str).collect::<Vec<_>>());
        }
        if *egress == EgressMode::Log {
            put("network", &["log"]);
        }
        if *idle_timeout_s != crate::config::DEFAULT_IDLE_TIMEOUT_S {
            put("network.idle_timeout_s", &[&idle_timeout_s.to_string()]);
        }
        let digest = openssl::sha::sha256(&buf);
        digest[..8].iter().map(|b| format!("{:02x}", b)).collect()
    }
}

/// The fingerprint a session's configuration must match to join a running
/// Domain: the profile's, plus everything of `[escalation]` and the global
/// `[network]` section, which the coordinator also applies.
pub fn join_fingerprint(cfg: &Config, profile: &Profile) -> String {
    let mut buf = Vec::new();
    put_field(&mut buf, profile.fingerprint().as_bytes());
    let e = &cfg.escalation;
    put_field(&mut buf, if e.enabled { b"escalation-on" } else { b"escalation-off" });
    put_field(&mut buf, e.prompt_timeout_s.to_string().as_bytes());
    for r in &e.auto_approve {
        put_field(&mut buf, b"rule");
        put_field(&mut buf, r.argv.len().to_string().as_bytes());
        for a in &r.argv {
            put_field(&mut buf, a.as_bytes());
        }
        put_field(&mut buf, &[r.allow_trailing_args as u8, r.harden_git as u8]);
        put_field(&mut buf, r.trailing_args.len().to_string().as_bytes());
        for p in &r.trailing_args {
            put_field(&mut buf, p.as_bytes());
        }
        put_field(&mut buf, r.cwd.as_bytes());
    }
    match &cfg.default_deny {
        None => put_field(&mut buf, b"default-deny-builtin"),
        Some(list) => {
            put_field(&mut buf, b"default-deny");
            for p in list {
                put_field(&mut buf, p.to_string().as_bytes());
            }
        }
    }
    if !profile.global_hosts().is_empty() {
        put_field(&mut buf, b"hosts");
        let mut h: Vec<String> = profile.global_hosts().iter().map(|p| p.to_string()).collect();
        h.sort_unstable();
        for p in h {
            put_field(&mut buf, p.as_bytes());
        }
    }
    let digest = openssl::sha::sha256(&buf);
    digest[..8].iter().map(|b| format!("{:02x}", b)).collect()
}

/// Appends `len:bytes,` so concatenations are unambiguous.
fn put_field(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(bytes.len().to_string().as_bytes());
    buf.push(b':');
    buf.extend_from_slice(bytes);
    buf.push(b',');
}
