//! `lazaret export kubernetes`: writes a profile as the objects of a
//! cluster with agent-sandbox and gVisor (`export::kube`; docs/kubernetes.md).

use std::path::PathBuf;

use crate::client::args::finish_args;
use crate::client::failure::Failure;
use crate::config;
use crate::export::kube::{self, Egress, Format, Options};

pub(super) fn cmd_export(mut raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    if sub.as_ref().and_then(|s| s.to_str()) != Some("kubernetes") {
        return Err(Failure::NeedsSubcommand {
            cmd: "export",
            choices: "kubernetes",
        });
    }
    let mut args = pico_args::Arguments::from_vec(raw);
    let profile: Option<String> = args.opt_value_from_str(["-p", "--profile"])?;
    let mut o = Options::default();
    if let Some(ns) = args.opt_value_from_str::<_, String>("--namespace")? {
        o.namespace = ns;
    }
    o.image = args.opt_value_from_str("--image")?;
    if let Some(g) = args.opt_value_from_str::<_, String>("--gate-image")? {
        o.gate_image = g;
    }
    if let Some(r) = args.opt_value_from_str::<_, String>("--runtime-class")? {
        o.runtime_class = r;
    }
    if let Some(n) = args.opt_value_from_str::<_, u32>("--replicas")? {
        o.replicas = n;
    }
    let egress: Option<String> = args.opt_value_from_str("--egress")?;
    o.egress = match egress.as_deref() {
        None | Some("gate") => Egress::Gate,
        Some("cilium") => Egress::Cilium,
        Some(x) => {
            return Err(Failure::Export(format!(
                "--egress {:?}: expected gate or cilium",
                crate::display::escape(x)
            )))
        }
    };
    let format: Option<String> = args.opt_value_from_str("--format")?;
    let format = match format.as_deref() {
        None | Some("yaml") => Format::Yaml,
        Some("json") => Format::Json,
        Some(x) => {
            return Err(Failure::Export(format!(
                "--format {:?}: expected yaml or json",
                crate::display::escape(x)
            )))
        }
    };
    let out: Option<PathBuf> = args.opt_value_from_str("--out")?;
    finish_args(args)?;
    let cfg = config::load(&config::config_path()).map_err(Failure::Config)?;
    let name = profile.unwrap_or_else(|| config::DEFAULT_PROFILE.to_string());
    let p = cfg.profile(&name).map_err(Failure::Config)?;
    let e = kube::plan(&cfg, p, &o).map_err(|e| Failure::Export(e.to_string()))?;
    let files = e.files(format);
    match out {
        None => {
            // The objects only: the gate's files are in its ConfigMap.
            print!("{}", files[0].1);
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).map_err(|err| {
                Failure::ExportFailed(format!("cannot create {}: {err}", crate::display::escape_path(&dir)))
            })?;
            for (f, text) in &files {
                let path = dir.join(f);
                std::fs::write(&path, text).map_err(|err| {
                    Failure::ExportFailed(format!("cannot write {}: {err}", crate::display::escape_path(&path)))
                })?;
                eprintln!("wrote {}", crate::display::escape_path(&path));
            }
        }
    }
    for n in &e.notes {
        eprintln!("{n}");
    }
    Ok(0)
}
