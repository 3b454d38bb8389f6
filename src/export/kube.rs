//! `lazaret export kubernetes`: a profile as the objects a Kubernetes
//! cluster with kubernetes-sigs/agent-sandbox (v1beta1) and a gVisor
//! `RuntimeClass` runs. Pure: config in, objects out (docs/kubernetes.md).

use std::fmt;

use super::doc::Value;
use super::gateconf::{GateConfig, GateSecret};
use crate::config::{Config, ImageSource, Prefix, Profile};

/// How allow-by-name (`network.hosts`) is enforced in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Egress {
    /// The egress gate as a sidecar, the pod's egress redirected to it by
    /// an init container's iptables rules (the default).
    Gate,
    /// A `CiliumNetworkPolicy` with `toFQDNs` (no key swap: refused with
    /// secrets).
    Cilium,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub namespace: String,
    /// The agent's image; `None`: the profile's `docker://` reference.
    pub image: Option<String>,
    /// The sidecar gate's image (the static `lazaret` and `iptables-restore`).
    pub gate_image: String,
    pub runtime_class: String,
    pub replicas: u32,
    pub egress: Egress,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            namespace: "default".into(),
            image: None,
            gate_image: GATE_IMAGE.into(),
            runtime_class: "gvisor".into(),
            replicas: 1,
            egress: Egress::Gate,
        }
    }
}

pub const GATE_IMAGE: &str = "ghcr.io/lazaret/gate:latest";
/// The uid the sidecar gate runs as: its own traffic is not redirected.
pub const GATE_UID: i64 = 1337;
pub const GATE_PORT: u16 = 15001;
pub const GATE_DNS_PORT: u16 = 15053;
const GATE_CONF_DIR: &str = "/etc/lazaret-gate";
const GATE_RUN_DIR: &str = "/run/lazaret-gate";

/// What `plan` produces.
#[derive(Debug, Clone)]
pub struct Export {
    /// The template's name (`lazaret-PROFILE`), the files' stem.
    pub name: String,
    /// What does not carry over, one line each (the export's head comment).
    pub notes: Vec<String>,
    pub objects: Vec<Value>,
    /// With the gate: its configuration (also in the ConfigMap).
    pub gate: Option<GateConfig>,
    /// With the gate: the init container's `iptables-restore` input.
    pub redirect_rules: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportError {
    NoImage { profile: String },
    CiliumWithSecrets { profile: String },
    BadName { what: &'static str, value: String },
    Ipv6 { profile: String },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::NoImage { profile } => write!(
                f,
                "profile {profile:?}: its image is not in a registry; expected --image REF (push it first: lazaret image export NAME --archive FILE, then skopeo copy)"
            ),
            ExportError::CiliumWithSecrets { profile } => write!(
                f,
                "profile {profile:?} has secrets, which only the egress gate swaps; expected --egress gate (the default)"
            ),
            ExportError::BadName { what, value } => write!(
                f,
                "{what} {:?}: expected a Kubernetes name (lower-case letters, digits and -, at most 63)",
                crate::display::escape(value)
            ),
            ExportError::Ipv6 { profile } => write!(f, "profile {profile:?}: IPv6 is not exported (Lazaret's sandboxes are IPv4 only)"),
        }
    }
}

impl std::error::Error for ExportError {}

/// An RFC 1123 label.
pub fn valid_k8s_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The profile's name as a label part: lower-case, `_` as `-`.
fn k8s_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn s(x: impl Into<String>) -> Value {
    Value::str(x)
}

fn m(entries: Vec<(&str, Value)>) -> Value {
    Value::map(entries)
}

/// A quantity of bytes: `NGi`, `NMi`, `NKi` when exact, else bytes.
pub fn bytes_quantity(b: u64) -> String {
    for (u, f) in [("Gi", 1u64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if b >= f && b.is_multiple_of(f) {
            return format!("{}{u}", b / f);
        }
    }
    b.to_string()
}

/// Thousandths of a CPU as a quantity: `2`, `500m`.
pub fn cpu_quantity(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// The name the sidecar gate reads secret `var`'s real value from.
pub fn gate_env(var: &str) -> String {
    format!("LAZARET_SECRET_{var}")
}

/// The sentinel the agent holds for `var`: derived from the namespace,
/// the template and the variable, so that an export is reproducible. A
/// sentinel is no secret (the sandbox holds it; the value never enters
/// the pod's agent container), it only must not occur by chance.
pub fn export_sentinel(namespace: &str, template: &str, var: &str) -> String {
    let key = openssl::sha::sha256(format!("lazaret export sentinel v1\0{namespace}\0{template}").as_bytes());
    crate::config::secrets::derived_sentinel(&key, template, var).unwrap_or_else(|_| {
        // HMAC-SHA256 does not fail on a 32-byte key; a fixed sentinel
        // keeps the export working (it is still no value).
        format!("lzs_{}", crate::net::policy::hex(&key[..16]))
    })
}

/// The objects for `profile`. `config` gives `[network] default_deny` and
/// `[network] hosts`.
pub fn plan(config: &Config, profile: &Profile, o: &Options) -> Result<Export, ExportError> {
    for (what, v) in [("namespace", &o.namespace), ("runtime class", &o.runtime_class)] {
        if !valid_k8s_name(v) {
            return Err(ExportError::BadName { what, value: v.clone() });
        }
    }
    if profile.ipv6 {
        return Err(ExportError::Ipv6 {
            profile: profile.name.clone(),
        });
    }
    let name = format!("lazaret-{}", k8s_part(&profile.name));
    if !valid_k8s_name(&name) {
        return Err(ExportError::BadName {
            what: "profile",
            value: profile.name.clone(),
        });
    }
    let image = match (&o.image, &profile.image) {
        (Some(i), _) => i.clone(),
        (None, ImageSource::Docker(r)) => r.clone(),
        (None, _) => {
            return Err(ExportError::NoImage {
                profile: profile.name.clone(),
            })
        }
    };
    let hosts = profile.hosts.clone();
    // Log mode without hosts exports as open egress.
    let by_name = profile.egress.networked() && !hosts.is_empty();
    let egress = if by_name { Some(o.egress) } else { None };
    if egress == Some(Egress::Cilium) && !profile.secrets.is_empty() {
        return Err(ExportError::CiliumWithSecrets {
            profile: profile.name.clone(),
        });
    }
    let denies: Vec<Prefix> = match &config.default_deny {
        Some(l) => l.iter().copied().filter(|p| p.addr.is_ipv4()).collect(),
        None => crate::net::policy::DEFAULT_DENY
            .iter()
            .filter_map(|(p, _)| p.parse().ok())
            .collect(),
    };
    let mut denies = denies;
    denies.extend(profile.deny.iter().copied().filter(|p| p.addr.is_ipv4()));
    let allow: Vec<Prefix> = profile.allow.iter().copied().filter(|p| p.addr.is_ipv4()).collect();
    let profile_label = k8s_part(&profile.name);
    let labels = |extra: bool| {
        let mut l = vec![("lazaret.dev/profile", s(&profile_label))];
        if extra {
            l.insert(0, ("app.kubernetes.io/managed-by", s("lazaret")));
        }
        m(l)
    };
    let meta = |n: &str| {
        m(vec![
            ("name", s(n)),
            ("namespace", s(&o.namespace)),
            ("labels", labels(true)),
        ])
    };
    let secret_name = format!("{name}-env");

    // ---- the gate
    let gate = (egress == Some(Egress::Gate)).then(|| GateConfig {
        listen: std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, GATE_PORT),
        dns: std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, GATE_DNS_PORT),
        ca_dir: GATE_RUN_DIR.into(),
        idle_timeout_s: profile.idle_timeout_s.clamp(1, 86400),
        hosts: hosts.clone(),
        deny: denies.clone(),
        allow: allow.clone(),
        secrets: profile
            .secrets
            .iter()
            .map(|x| GateSecret {
                var: x.var.clone(),
                env: gate_env(&x.var),
                sentinel: export_sentinel(&o.namespace, &name, &x.var),
                hosts: x.hosts.clone(),
                headers: x.headers.clone(),
                plain_http: x.plain_http,
            })
            .collect(),
    });
    let redirect_rules = gate.as_ref().map(redirect_rules);

    // ---- the agent container
    let mut env: Vec<Value> = profile
        .env
        .iter()
        .map(|(k, v)| m(vec![("name", s(k)), ("value", s(v))]))
        .collect();
    let from_secret = |var: &str, key: &str| {
        m(vec![
            ("name", s(var)),
            (
                "valueFrom",
                m(vec![(
                    "secretKeyRef",
                    m(vec![("name", s(&secret_name)), ("key", s(key))]),
                )]),
            ),
        ])
    };
    for var in &profile.pass_env {
        env.push(from_secret(var, var));
    }
    if let Some(g) = &gate {
        for x in &g.secrets {
            env.push(m(vec![("name", s(&x.var)), ("value", s(&x.sentinel))]));
        }
        // The gate's CA, for TLS to names with a secret bound.
        // The names a Domain sets (`config::CA_ENV`), unless the profile's env does.
        for var in crate::config::CA_ENV {
            if !profile.env.iter().any(|(k, _)| k == var) {
                env.push(m(vec![
                    ("name", s(*var)),
                    ("value", s(format!("{GATE_RUN_DIR}/ca-bundle.pem"))),
                ]));
            }
        }
    }
    let mut limits = Vec::new();
    if let Some(c) = profile.limits.cpu_millis {
        limits.push(("cpu", s(cpu_quantity(c))));
    }
    if let Some(b) = profile.limits.memory {
        limits.push(("memory", s(bytes_quantity(b))));
    }
    if let Some(b) = profile.limits.disk {
        limits.push(("ephemeral-storage", s(bytes_quantity(b))));
    }
    let mut mounts = vec![m(vec![("name", s("workspace")), ("mountPath", s("/workspace"))])];
    let mut volumes = vec![m(vec![("name", s("workspace")), ("emptyDir", Value::Map(vec![]))])];
    for (i, v) in profile.volumes.iter().enumerate() {
        let vname = format!("volume-{i}");
        mounts.push(m(vec![
            ("name", s(&vname)),
            ("mountPath", s(&v.guest)),
            ("readOnly", Value::Bool(v.read_only)),
        ]));
        volumes.push(m(vec![
            ("name", s(&vname)),
            (
                "persistentVolumeClaim",
                m(vec![
                    ("claimName", s(format!("{name}-{vname}"))),
                    ("readOnly", Value::Bool(v.read_only)),
                ]),
            ),
        ]));
    }
    if gate.is_some() {
        mounts.push(m(vec![
            ("name", s("gate-run")),
            ("mountPath", s(GATE_RUN_DIR)),
            ("readOnly", Value::Bool(true)),
        ]));
    }
    let mut agent_sc = vec![("allowPrivilegeEscalation", Value::Bool(false))];
    agent_sc.push(("capabilities", m(vec![("drop", Value::strs(&["ALL"]))])));
    if profile.user.is_some() {
        agent_sc.push(("runAsNonRoot", Value::Bool(true)));
        agent_sc.push(("runAsUser", Value::Int(crate::config::GUEST_USER_UID.into())));
        agent_sc.push(("runAsGroup", Value::Int(crate::config::GUEST_USER_UID.into())));
    }
    let mut agent = vec![
        ("name", s("agent")),
        ("image", s(&image)),
        ("command", Value::strs(&profile.command)),
        ("workingDir", s("/workspace")),
    ];
    if !env.is_empty() {
        agent.push(("env", Value::List(env)));
    }
    if !limits.is_empty() {
        agent.push(("resources", m(vec![("limits", m(limits))])));
    }
    agent.push(("securityContext", m(agent_sc)));
    agent.push(("volumeMounts", Value::List(mounts)));

    // ---- the gate's containers
    let mut init = Vec::new();
    if let Some(g) = &gate {
        volumes.push(m(vec![
            ("name", s("gate-conf")),
            ("configMap", m(vec![("name", s(format!("{name}-gate")))])),
        ]));
        volumes.push(m(vec![("name", s("gate-run")), ("emptyDir", Value::Map(vec![]))]));
        init.push(m(vec![
            ("name", s("lazaret-egress-init")),
            ("image", s(&o.gate_image)),
            (
                "command",
                Value::strs(&["iptables-restore", &format!("{GATE_CONF_DIR}/redirect.rules")]),
            ),
            (
                "securityContext",
                m(vec![
                    ("runAsUser", Value::Int(0)),
                    ("runAsNonRoot", Value::Bool(false)),
                    ("allowPrivilegeEscalation", Value::Bool(false)),
                    (
                        "capabilities",
                        m(vec![
                            ("drop", Value::strs(&["ALL"])),
                            ("add", Value::strs(&["NET_ADMIN", "NET_RAW"])),
                        ]),
                    ),
                ]),
            ),
            (
                "volumeMounts",
                Value::List(vec![m(vec![
                    ("name", s("gate-conf")),
                    ("mountPath", s(GATE_CONF_DIR)),
                    ("readOnly", Value::Bool(true)),
                ])]),
            ),
        ]));
        let mut gate_env: Vec<Value> = g.secrets.iter().map(|x| from_secret(&x.env, &x.var)).collect();
        gate_env.insert(0, m(vec![("name", s("RUST_LOG")), ("value", s("info"))]));
        init.push(m(vec![
            ("name", s("lazaret-gate")),
            ("image", s(&o.gate_image)),
            ("restartPolicy", s("Always")),
            (
                "command",
                Value::strs(&["/lazaret", "gate", "--config", &format!("{GATE_CONF_DIR}/gate.conf")]),
            ),
            ("env", Value::List(gate_env)),
            (
                "startupProbe",
                m(vec![
                    (
                        "exec",
                        m(vec![(
                            "command",
                            Value::strs(&["/lazaret", "gate", "--ready", &format!("{GATE_RUN_DIR}/ca-bundle.pem")]),
                        )]),
                    ),
                    ("periodSeconds", Value::Int(1)),
                    ("failureThreshold", Value::Int(30)),
                ]),
            ),
            (
                "securityContext",
                m(vec![
                    ("runAsUser", Value::Int(GATE_UID)),
                    ("runAsGroup", Value::Int(GATE_UID)),
                    ("runAsNonRoot", Value::Bool(true)),
                    ("allowPrivilegeEscalation", Value::Bool(false)),
                    ("readOnlyRootFilesystem", Value::Bool(true)),
                    ("capabilities", m(vec![("drop", Value::strs(&["ALL"]))])),
                ]),
            ),
            (
                "volumeMounts",
                Value::List(vec![
                    m(vec![
                        ("name", s("gate-conf")),
                        ("mountPath", s(GATE_CONF_DIR)),
                        ("readOnly", Value::Bool(true)),
                    ]),
                    m(vec![("name", s("gate-run")), ("mountPath", s(GATE_RUN_DIR))]),
                ]),
            ),
        ]));
    }

    // ---- the pod
    let mut pod = vec![
        ("runtimeClassName", s(&o.runtime_class)),
        ("automountServiceAccountToken", Value::Bool(false)),
        ("enableServiceLinks", Value::Bool(false)),
    ];
    if profile.user.is_some() {
        let uid = Value::Int(crate::config::GUEST_USER_UID.into());
        pod.push((
            "securityContext",
            m(vec![
                ("runAsNonRoot", Value::Bool(true)),
                ("runAsUser", uid.clone()),
                ("runAsGroup", uid.clone()),
                ("fsGroup", uid),
            ]),
        ));
    }
    if !profile.dns.is_empty() {
        pod.push(("dnsPolicy", s("None")));
        let ns: Vec<String> = profile.dns.iter().map(|p| p.addr.to_string()).collect();
        pod.push(("dnsConfig", m(vec![("nameservers", Value::strs(&ns))])));
    }
    if !init.is_empty() {
        pod.push(("initContainers", Value::List(init)));
    }
    pod.push(("containers", Value::List(vec![m(agent)])));
    pod.push(("volumes", Value::List(volumes)));

    // ---- the template's network policy
    let mut egress_rules = Vec::new();
    if profile.egress.networked() {
        let dns_ports = Value::List(vec![
            m(vec![("protocol", s("UDP")), ("port", Value::Int(53))]),
            m(vec![("protocol", s("TCP")), ("port", Value::Int(53))]),
        ]);
        if profile.dns.is_empty() {
            egress_rules.push(m(vec![
                (
                    "to",
                    Value::List(vec![m(vec![
                        (
                            "namespaceSelector",
                            m(vec![(
                                "matchLabels",
                                m(vec![("kubernetes.io/metadata.name", s("kube-system"))]),
                            )]),
                        ),
                        (
                            "podSelector",
                            m(vec![("matchLabels", m(vec![("k8s-app", s("kube-dns"))]))]),
                        ),
                    ])]),
                ),
                ("ports", dns_ports),
            ]));
        }
        // The public internet (every address but the denies): without
        // names, and with the gate (which connects only to the listed
        // names' addresses, never to a denied one).
        if egress != Some(Egress::Cilium) {
            let except: Vec<String> = denies.iter().map(|p| p.to_string()).collect();
            egress_rules.push(m(vec![(
                "to",
                Value::List(vec![m(vec![(
                    "ipBlock",
                    m(vec![("cidr", s("0.0.0.0/0")), ("except", Value::strs(&except))]),
                )])]),
            )]));
        }
        for a in &allow {
            let inner: Vec<String> = profile
                .deny
                .iter()
                .filter(|d| a.contains(d) && *d != a)
                .map(|d| d.to_string())
                .collect();
            let mut block = vec![("cidr", s(a.to_string()))];
            if !inner.is_empty() {
                block.push(("except", Value::strs(&inner)));
            }
            egress_rules.push(m(vec![("to", Value::List(vec![m(vec![("ipBlock", m(block))])]))]));
        }
    }
    let mut spec = vec![(
        "podTemplate",
        m(vec![("metadata", m(vec![("labels", labels(false))])), ("spec", m(pod))]),
    )];
    let mut np = vec![("ingress", Value::List(vec![]))];
    np.push(("egress", Value::List(egress_rules)));
    spec.push(("networkPolicy", m(np)));
    spec.push(("networkPolicyManagement", s("Managed")));
    spec.push(("envVarsInjectionPolicy", s("Disallowed")));

    let mut template_meta = meta(&name);
    if let Value::Map(entries) = &mut template_meta {
        entries.push((
            "annotations".into(),
            m(vec![(
                "lazaret.dev/not-carried-over",
                s(notes(profile, egress, &secret_name).join(" ")),
            )]),
        ));
    }
    let mut objects = vec![m(vec![
        ("apiVersion", s("extensions.agents.x-k8s.io/v1beta1")),
        ("kind", s("SandboxTemplate")),
        ("metadata", template_meta),
        ("spec", m(spec)),
    ])];
    objects.push(m(vec![
        ("apiVersion", s("extensions.agents.x-k8s.io/v1beta1")),
        ("kind", s("SandboxWarmPool")),
        ("metadata", meta(&name)),
        (
            "spec",
            m(vec![
                ("replicas", Value::Int(o.replicas.into())),
                ("sandboxTemplateRef", m(vec![("name", s(&name))])),
            ]),
        ),
    ]));
    if let (Some(g), Some(r)) = (&gate, &redirect_rules) {
        objects.push(m(vec![
            ("apiVersion", s("v1")),
            ("kind", s("ConfigMap")),
            ("metadata", meta(&format!("{name}-gate"))),
            ("data", m(vec![("gate.conf", s(g.render())), ("redirect.rules", s(r))])),
        ]));
    }
    if egress == Some(Egress::Cilium) {
        objects.push(cilium_policy(
            &name,
            &profile_label,
            &o.namespace,
            &hosts,
            meta(&format!("{name}-fqdn")),
        ));
    }
    Ok(Export {
        notes: notes(profile, egress, &secret_name),
        name,
        objects,
        gate,
        redirect_rules,
    })
}

/// The init container's `iptables-restore` input: every TCP connection
/// and DNS query of the pod but the gate's own (uid [`GATE_UID`]), to
/// loopback, and to the profile's `allow` ranges goes to the gate; what
/// else leaves is refused.
pub fn redirect_rules(g: &GateConfig) -> String {
    let mut r = String::from("# lazaret: the pod's egress through the sidecar gate\n*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n");
    r.push_str(&format!("-A OUTPUT -m owner --uid-owner {GATE_UID} -j RETURN\n"));
    r.push_str("-A OUTPUT -o lo -j RETURN\n");
    for d in &g.deny {
        // A deny inside an allow range stays the gate's (which refuses it).
        if g.allow.iter().any(|a| a.contains(d)) {
            r.push_str(&format!(
                "-A OUTPUT -d {d} -p tcp -j REDIRECT --to-ports {}\n",
                g.listen.port()
            ));
        }
    }
    for a in &g.allow {
        r.push_str(&format!("-A OUTPUT -d {a} -j RETURN\n"));
    }
    r.push_str(&format!(
        "-A OUTPUT -p udp --dport 53 -j REDIRECT --to-ports {}\n",
        g.dns.port()
    ));
    r.push_str(&format!(
        "-A OUTPUT -p tcp -j REDIRECT --to-ports {}\n",
        g.listen.port()
    ));
    r.push_str("COMMIT\n*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n");
    r.push_str(&format!("-A OUTPUT -m owner --uid-owner {GATE_UID} -j ACCEPT\n"));
    r.push_str("-A OUTPUT -o lo -j ACCEPT\n");
    // What the nat table sent to the gate: this chain still sees the
    // interface it was routed to first (`-o` is not the loopback's).
    r.push_str("-A OUTPUT -m conntrack --ctstate DNAT -j ACCEPT\n");
    for d in &g.deny {
        if g.allow.iter().any(|a| a.contains(d)) {
            r.push_str(&format!("-A OUTPUT -d {d} -j REJECT\n"));
        }
    }
    for a in &g.allow {
        r.push_str(&format!("-A OUTPUT -d {a} -j ACCEPT\n"));
    }
    r.push_str("-A OUTPUT -p tcp -j REJECT --reject-with tcp-reset\n-A OUTPUT -j REJECT\nCOMMIT\n");
    r
}

fn cilium_policy(
    _name: &str,
    label: &str,
    _ns: &str,
    hosts: &[crate::config::hosts::HostPattern],
    meta: Value,
) -> Value {
    // One rule per port set, in the order the ports first appear.
    let mut groups: Vec<(Vec<u16>, Vec<Value>)> = Vec::new();
    for h in hosts {
        let ports = h.ports();
        let sel = if h.wildcard {
            m(vec![("matchPattern", s(format!("*.{}", &*h.name)))])
        } else {
            m(vec![("matchName", s(h.name.to_string()))])
        };
        match groups.iter_mut().find(|(p, _)| *p == ports) {
            Some((_, v)) => v.push(sel),
            None => groups.push((ports, vec![sel])),
        }
    }
    let mut egress = vec![m(vec![
        (
            "toEndpoints",
            Value::List(vec![m(vec![(
                "matchLabels",
                m(vec![
                    ("k8s:io.kubernetes.pod.namespace", s("kube-system")),
                    ("k8s-app", s("kube-dns")),
                ]),
            )])]),
        ),
        (
            "toPorts",
            Value::List(vec![m(vec![
                (
                    "ports",
                    Value::List(vec![m(vec![("port", s("53")), ("protocol", s("ANY"))])]),
                ),
                (
                    "rules",
                    m(vec![("dns", Value::List(vec![m(vec![("matchPattern", s("*"))])]))]),
                ),
            ])]),
        ),
    ])];
    for (ports, sels) in groups {
        let ps: Vec<Value> = ports
            .iter()
            .map(|p| m(vec![("port", s(p.to_string())), ("protocol", s("TCP"))]))
            .collect();
        egress.push(m(vec![
            ("toFQDNs", Value::List(sels)),
            ("toPorts", Value::List(vec![m(vec![("ports", Value::List(ps))])])),
        ]));
    }
    m(vec![
        ("apiVersion", s("cilium.io/v2")),
        ("kind", s("CiliumNetworkPolicy")),
        ("metadata", meta),
        (
            "spec",
            m(vec![
                (
                    "endpointSelector",
                    m(vec![("matchLabels", m(vec![("lazaret.dev/profile", s(label))]))]),
                ),
                ("egress", Value::List(egress)),
            ]),
        ),
    ])
}

/// What does not carry over, and what a team uses instead.
fn notes(profile: &Profile, egress: Option<Egress>, secret: &str) -> Vec<String> {
    let mut n = vec![
        format!("Exported by lazaret from profile {:?}. Not carried over (docs/kubernetes.md):", profile.name),
        "- host escalation (lazaret-escalate, approvals): no host to run commands on; run them in CI or review the agent's pushed branch.".to_string(),
        "- host Git protection (the workspace view's guards of .git and host-tool files): the pod clones its own workspace; push with a token scoped to one repository.".to_string(),
        "- ignored-path isolation: the pod's workspace is its own clone; nothing of a developer's host is in it.".to_string(),
        "- the per-terminal session model: one Sandbox per SandboxClaim; attach with kubectl exec -it.".to_string(),
        "- persist paths: the pod's root filesystem is ephemeral; keep state on volumes (volumeClaimTemplates).".to_string(),
        "- ports: no host port forwards; use kubectl port-forward.".to_string(),
        "- limits.pids and limits.image_layer: set the node's podPidsLimit; image layers are the registry's.".to_string(),
    ];
    if !profile.volumes.is_empty() {
        n.push(
            "- volumes: each host path becomes a PersistentVolumeClaim (volume-N) the team creates and fills.".into(),
        );
    }
    if egress == Some(Egress::Cilium) {
        n.push("- allow-by-name: a CiliumNetworkPolicy (toFQDNs); no key swap and no egress log.".into());
    }
    if egress == Some(Egress::Gate) {
        n.push("- the egress log: the gate logs to its container's output (kubectl logs -c lazaret-gate).".into());
    }
    if !profile.pass_env.is_empty() || (!profile.secrets.is_empty() && egress == Some(Egress::Gate)) {
        n.push(format!(
            "Values come from the Secret {secret:?} the team creates (kubectl create secret generic {secret} --from-literal=NAME=...), never from this file."
        ));
    }
    n
}

/// The export's output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Export {
    /// The files an export writes: `NAME.yaml` (the notes as its head
    /// comment, one document per object) or `NAME.json` (a `v1` `List`;
    /// JSON has no comments: the notes are the template's
    /// `lazaret.dev/not-carried-over` annotation, in both formats), and
    /// with the gate `NAME.gate.conf` and `NAME.redirect.rules` (the
    /// ConfigMap's two keys, for `lazaret gate --config` outside a
    /// cluster).
    pub fn files(&self, f: Format) -> Vec<(String, String)> {
        let mut out = Vec::new();
        match f {
            Format::Yaml => {
                let mut text = String::new();
                for (i, o) in self.objects.iter().enumerate() {
                    let head: &[String] = if i == 0 { &self.notes } else { &[] };
                    if i > 0 {
                        text.push_str("---\n");
                    }
                    text.push_str(&super::doc::yaml(head, o));
                }
                out.push((format!("{}.yaml", self.name), text));
            }
            Format::Json => {
                let list = Value::map(vec![
                    ("apiVersion", s("v1")),
                    ("kind", s("List")),
                    ("items", Value::List(self.objects.clone())),
                ]);
                out.push((format!("{}.json", self.name), super::doc::json(&list)));
            }
        }
        if let (Some(g), Some(r)) = (&self.gate, &self.redirect_rules) {
            out.push((format!("{}.gate.conf", self.name), g.render()));
            out.push((format!("{}.redirect.rules", self.name), r.clone()));
        }
        out
    }
}
