//! Goldens of `lazaret export kubernetes` for three profiles in both
//! formats, every exported object walked against the API shapes kept as
//! data (tests/fixtures/k8s-api/v1beta1.txt), and no secret value in any
//! exported file. `LAZARET_UPDATE_GOLDEN=1` rewrites the goldens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::doc::Value;
use super::kube::{self, Egress, Format, Options};
use crate::config::Config;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn config() -> Config {
    let dir = fixtures().join("k8s");
    let text = std::fs::read_to_string(dir.join("config.toml"))
        .unwrap()
        .replace("/FIXTURE", dir.to_str().unwrap());
    crate::config::parse(&dir.join("config.toml"), &text).unwrap()
}

fn options() -> Options {
    Options {
        namespace: "agents".into(),
        ..Options::default()
    }
}

fn export(profile: &str, o: &Options) -> kube::Export {
    let c = config();
    kube::plan(&c, c.profile(profile).unwrap(), o).unwrap()
}

const PROFILES: [&str; 3] = ["plain", "limits", "secrets"];

#[test]
fn goldens_byte_for_byte() {
    let update = std::env::var_os("LAZARET_UPDATE_GOLDEN").is_some();
    let dir = fixtures().join("k8s");
    for p in PROFILES {
        let e = export(p, &options());
        for f in [Format::Yaml, Format::Json] {
            for (name, text) in e.files(f) {
                let path = dir.join(&name);
                if update {
                    std::fs::write(&path, &text).unwrap();
                    continue;
                }
                let want = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(want == text, "{} differs from the export:\n{text}", path.display());
            }
        }
    }
}

// ---- the API shapes ------------------------------------------------------------

#[derive(Debug)]
struct Field {
    kind: String,
    required: bool,
}

struct Schema {
    /// KIND -> (apiVersion, type)
    objects: BTreeMap<String, String>,
    types: BTreeMap<String, BTreeMap<String, Field>>,
}

fn schema() -> Schema {
    let text = std::fs::read_to_string(fixtures().join("k8s-api/v1beta1.txt")).unwrap();
    let mut s = Schema {
        objects: BTreeMap::new(),
        types: BTreeMap::new(),
    };
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split(' ').collect();
        match w[..] {
            ["object", kind, version] => {
                s.objects.insert(kind.into(), version.into());
            }
            [ty, field, kind] | [ty, field, kind, "required"] => {
                let old = s.types.entry(ty.into()).or_default().insert(
                    field.into(),
                    Field {
                        kind: kind.into(),
                        required: w.len() == 4,
                    },
                );
                assert!(old.is_none(), "line {}: {ty}.{field} twice", i + 1);
            }
            _ => panic!("line {}: {line:?}", i + 1),
        }
    }
    // Every named type a field refers to is described.
    for fields in s.types.values() {
        for f in fields.values() {
            let base = f.kind.trim_start_matches("[]");
            let builtin = ["string", "int", "bool", "quantity", "intorstring"].contains(&base)
                || base.starts_with("map:")
                || base.starts_with("enum:");
            assert!(builtin || s.types.contains_key(base), "undescribed type {base}");
        }
    }
    s
}

fn is_quantity(v: &str) -> bool {
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &v[digits.len()..];
    !digits.is_empty()
        && digits.parse::<f64>().is_ok()
        && ["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"].contains(&suffix)
}

fn check(s: &Schema, kind: &str, v: &Value, at: &str, errs: &mut Vec<String>) {
    let mut bad = |why: &str| errs.push(format!("{at}: {why} (expected {kind})"));
    if let Some(inner) = kind.strip_prefix("[]") {
        match v {
            Value::List(l) => {
                for (i, x) in l.iter().enumerate() {
                    check(s, inner, x, &format!("{at}[{i}]"), errs);
                }
            }
            _ => bad("not a list"),
        }
        return;
    }
    if let Some(values) = kind.strip_prefix("enum:") {
        match v {
            Value::Str(x) if values.split('|').any(|e| e == x) => {}
            _ => bad("not one of the values"),
        }
        return;
    }
    if let Some(inner) = kind.strip_prefix("map:") {
        match v {
            Value::Map(m) => {
                for (k, x) in m {
                    check(s, inner, x, &format!("{at}.{k}"), errs);
                }
            }
            _ => bad("not a map"),
        }
        return;
    }
    match (kind, v) {
        ("string", Value::Str(_)) | ("int", Value::Int(_)) | ("bool", Value::Bool(_)) => {}
        ("intorstring", Value::Int(_) | Value::Str(_)) => {}
        ("quantity", Value::Int(_)) => {}
        ("quantity", Value::Str(q)) if is_quantity(q) => {}
        ("string" | "int" | "bool" | "intorstring" | "quantity", _) => bad("wrong type"),
        (ty, Value::Map(m)) => {
            let Some(fields) = s.types.get(ty) else {
                return bad("undescribed type");
            };
            for (k, x) in m {
                match fields.get(k) {
                    Some(f) => check(s, &f.kind, x, &format!("{at}.{k}"), errs),
                    None => errs.push(format!("{at}.{k}: unknown field of {ty}")),
                }
            }
            for (k, f) in fields {
                if f.required && !m.iter().any(|(n, _)| n == k) {
                    errs.push(format!("{at}.{k}: required field of {ty} missing"));
                }
            }
        }
        _ => bad("not an object"),
    }
}

fn check_object(s: &Schema, o: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let (Some(Value::Str(kind)), Some(Value::Str(version))) = (o.get("kind"), o.get("apiVersion")) else {
        return vec!["no kind or apiVersion".into()];
    };
    match s.objects.get(kind) {
        Some(v) if v == version => check(s, kind, o, kind, &mut errs),
        _ => errs.push(format!("{kind} {version}: not a described object")),
    }
    errs
}

#[test]
fn every_export_matches_the_api_shapes() {
    let s = schema();
    let mut kinds = Vec::new();
    for p in PROFILES {
        for egress in [Egress::Gate, Egress::Cilium] {
            let o = Options { egress, ..options() };
            let c = config();
            let mut prof = c.profile(p).unwrap().clone();
            if egress == Egress::Cilium {
                // Cilium swaps no keys: the profile without its secrets.
                prof.secrets.clear();
            }
            let e = kube::plan(&c, &prof, &o).unwrap();
            for obj in &e.objects {
                let errs = check_object(&s, obj);
                assert!(errs.is_empty(), "{p}: {errs:#?}");
                kinds.push(format!("{:?}", obj.get("kind")));
            }
        }
    }
    for k in ["SandboxTemplate", "SandboxWarmPool", "ConfigMap", "CiliumNetworkPolicy"] {
        assert!(kinds.iter().any(|x| x.contains(k)), "no {k} exported");
    }
}

#[test]
fn the_walk_fails_what_the_api_does_not_have() {
    let s = schema();
    let e = export("limits", &options());
    let Value::Map(top) = &e.objects[0] else { panic!() };
    // An unknown field deep in the pod.
    let mut bad = Value::Map(top.clone());
    set(
        &mut bad,
        &["spec", "podTemplate", "spec", "hostNetwork"],
        Value::Bool(true),
    );
    assert!(check_object(&s, &bad)
        .iter()
        .any(|x| x.contains("unknown field of PodSpec")));
    // A wrong type.
    let mut bad = Value::Map(top.clone());
    set(
        &mut bad,
        &["spec", "podTemplate", "spec", "runtimeClassName"],
        Value::Int(1),
    );
    assert!(check_object(&s, &bad).iter().any(|x| x.contains("wrong type")));
    // A required field missing.
    let mut bad = Value::Map(top.clone());
    if let Value::Map(t) = &mut bad {
        if let Some((_, Value::Map(spec))) = t.iter_mut().find(|(k, _)| k == "spec") {
            spec.retain(|(k, _)| k != "podTemplate");
        }
    }
    assert!(check_object(&s, &bad).iter().any(|x| x.contains("required field")));
    // A value outside an enum.
    let mut bad = e.objects[0].clone();
    set(&mut bad, &["spec", "networkPolicyManagement"], Value::str("Sometimes"));
    assert!(!check_object(&s, &bad).is_empty());
    assert!(!is_quantity("1.5 Gi") && is_quantity("1500m") && is_quantity("2Gi"));
}

/// Sets `path` in maps, adding the last key when absent.
fn set(v: &mut Value, path: &[&str], x: Value) {
    let Value::Map(m) = v else {
        panic!("not a map at {path:?}")
    };
    if path.len() == 1 {
        m.retain(|(k, _)| k != path[0]);
        m.push((path[0].into(), x));
        return;
    }
    let next = m.iter_mut().find(|(k, _)| k == path[0]).map(|(_, v)| v).unwrap();
    set(next, &path[1..], x)
}

// ---- what the export says -----------------------------------------------------

#[test]
fn no_secret_value_in_any_exported_file() {
    let dir = fixtures().join("k8s");
    let values: Vec<String> = ["api-key.value", "token.value"]
        .iter()
        .map(|f| std::fs::read_to_string(dir.join(f)).unwrap().trim().to_string())
        .collect();
    let mut files = 0;
    for p in PROFILES {
        for egress in [Egress::Gate, Egress::Cilium] {
            let c = config();
            let Ok(e) = kube::plan(&c, c.profile(p).unwrap(), &Options { egress, ..options() }) else {
                continue;
            };
            for f in [Format::Yaml, Format::Json] {
                for (name, text) in e.files(f) {
                    files += 1;
                    for v in &values {
                        assert!(!text.contains(v.as_str()), "{name} holds a secret value");
                    }
                }
            }
        }
    }
    // And the goldens on disk.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "value") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for v in &values {
            assert!(!text.contains(v.as_str()), "{} holds a secret value", path.display());
        }
        files += 1;
    }
    assert!(files >= 12, "{files}");
}

#[test]
fn the_template_keeps_what_lazaret_grants() {
    let e = export("limits", &options());
    let t = &e.objects[0];
    let pod = t
        .get("spec")
        .and_then(|s| s.get("podTemplate"))
        .and_then(|p| p.get("spec"))
        .unwrap();
    assert_eq!(pod.get("runtimeClassName"), Some(&Value::str("gvisor")));
    let Some(Value::List(cs)) = pod.get("containers") else {
        panic!()
    };
    let sc = cs[0].get("securityContext").unwrap();
    assert_eq!(sc.get("allowPrivilegeEscalation"), Some(&Value::Bool(false)));
    assert_eq!(sc.get("runAsNonRoot"), Some(&Value::Bool(true)));
    assert_eq!(sc.get("capabilities").and_then(|c| c.get("add")), None);
    let limits = cs[0].get("resources").and_then(|r| r.get("limits")).unwrap();
    assert_eq!(limits.get("cpu"), Some(&Value::str("1500m")));
    assert_eq!(limits.get("memory"), Some(&Value::str("2Gi")));
    // The default denies, and the profile's allow range with its own deny.
    let np = t.get("spec").and_then(|s| s.get("networkPolicy")).unwrap();
    let text = super::doc::json(np);
    for want in [
        "169.254.0.0/16",
        "10.0.0.0/8",
        "192.168.0.0/16",
        "203.0.113.0/24",
        "10.20.0.0/16",
        "10.20.5.0/24",
    ] {
        assert!(text.contains(want), "{want} missing in {text}");
    }
    assert_eq!(np.get("ingress"), Some(&Value::List(vec![])));
}

#[test]
fn allow_by_name_and_secrets() {
    // The gate by default: its config lists the names and names each
    // secret by the variable the gate's container gets from the Secret.
    let e = export("secrets", &options());
    let g = e.gate.as_ref().unwrap();
    assert_eq!(g.hosts.len(), 3);
    assert_eq!(g.secrets[0].env, "LAZARET_SECRET_API_KEY");
    let back = super::gateconf::parse(&g.render()).unwrap();
    assert_eq!(&back, g);
    assert!(e
        .redirect_rules
        .as_ref()
        .unwrap()
        .contains("--uid-owner 1337 -j RETURN"));
    // The agent holds the sentinel, the same at every export.
    assert_eq!(e.objects, export("secrets", &options()).objects);
    // Cilium: refused with secrets, toFQDNs without.
    let c = config();
    let o = Options {
        egress: Egress::Cilium,
        ..options()
    };
    assert!(matches!(
        kube::plan(&c, c.profile("secrets").unwrap(), &o),
        Err(kube::ExportError::CiliumWithSecrets { .. })
    ));
    let mut p = c.profile("secrets").unwrap().clone();
    p.secrets.clear();
    let e = kube::plan(&c, &p, &o).unwrap();
    let cnp = super::doc::json(e.objects.last().unwrap());
    assert!(
        cnp.contains("\"matchPattern\": \"*.github.com\"") && cnp.contains("\"port\": \"22\""),
        "{cnp}"
    );
    // Without a gate the network policy gives no public internet.
    let np = super::doc::json(e.objects[0].get("spec").and_then(|s| s.get("networkPolicy")).unwrap());
    assert!(!np.contains("0.0.0.0/0"), "{np}");
}

#[test]
fn names_are_checked() {
    let c = config();
    let p = c.profile("plain").unwrap();
    for bad in ["Agents", "-x", "a_b", ""] {
        let o = Options {
            namespace: bad.into(),
            ..options()
        };
        assert!(kube::plan(&c, p, &o).is_err(), "{bad}");
    }
    let mut q = p.clone();
    q.image = crate::config::ImageSource::Default;
    assert!(matches!(
        kube::plan(&c, &q, &options()),
        Err(kube::ExportError::NoImage { .. })
    ));
}
