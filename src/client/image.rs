//! `lazaret image`: `build` (the default image or a recipe), `list` and
//! `prune`.

use crate::client::args::{finish_args, refuse_root};
use crate::client::failure::Failure;
use crate::config;
use crate::storage::image;
use crate::storage::paths;

pub(super) fn cmd_image(mut raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    match sub.as_ref().and_then(|s| s.to_str()) {
        Some("build") => {
            let mut args = pico_args::Arguments::from_vec(raw);
            let quiet = args.contains(["-q", "--quiet"]);
            let if_missing = args.contains("--if-missing");
            let name: Option<String> = args.opt_free_from_str()?;
            finish_args(args)?;
            refuse_root()?;
            if let Some(name) = name.filter(|n| n != "default") {
                return build_recipe(&name, quiet, if_missing);
            }
            let storage = paths::storage_root()?;
            paths::ensure_private_dir(&storage)?;
            let layout = image::images_dir(&storage).join("default");
            if if_missing && layout.join("index.json").exists() {
                return Ok(0);
            }
            let mut progress = image::Progress::new(quiet);
            let digest = image::build_default(&storage, &mut progress)?;
            if !quiet {
                println!("built the default image {digest}");
            }
            Ok(0)
        }
        Some(sub @ ("list" | "prune")) => {
            let mut args = pico_args::Arguments::from_vec(raw);
            let json = args.contains("--json");
            let dry_run = sub == "prune" && args.contains("--dry-run");
            let all = sub == "prune" && args.contains("--all");
            finish_args(args)?;
            refuse_root()?;
            let r = if sub == "list" {
                crate::storage::gc::cmd_list(json)
            } else {
                crate::storage::gc::cmd_prune(json, dry_run, all)
            };
            r.map_err(Failure::from)
        }
        Some(other) => Err(Failure::UnknownImageCommand(other.to_string())),
        None => Err(Failure::NeedsSubcommand {
            cmd: "image",
            choices: "build, list or prune",
        }),
    }
}

/// `lazaret image build NAME`: builds the recipe `[images.NAME]` into
/// `images/NAME`. A recipe identical to the one the image was built from
/// is not rebuilt, so the image's digest changes only when the recipe does.
fn build_recipe(name: &str, quiet: bool, if_missing: bool) -> Result<i32, Failure> {
    let cfg = config::load(&config::config_path())?;
    let recipe = cfg.images.get(name).ok_or_else(|| Failure::NoRecipe {
        name: name.to_string(),
        config: cfg.path.clone(),
        known: cfg.images.keys().cloned().collect(),
    })?;
    let storage = paths::storage_root()?;
    paths::ensure_private_dir(&storage)?;
    let layout = crate::storage::image::images_dir(&storage).join(name);
    let built = layout.join("index.json").exists();
    if if_missing && built {
        return Ok(0);
    }
    let host = match &recipe.suite {
        Some(s) => s.clone(),
        None => crate::storage::image::host_codename()?,
    };
    // `base = "NAME"`: that image must be built; its digest is part of
    // this recipe's fingerprint (a rebuilt base rebuilds this one).
    let base_layout = recipe
        .from
        .as_ref()
        .map(|b| crate::storage::image::images_dir(&storage).join(b));
    let base_digest = match (&recipe.from, &base_layout) {
        (Some(b), Some(l)) => Some(
            crate::storage::image::manifest_digest(l, crate::storage::image::DEFAULT_TAG).map_err(|_| {
                Failure::BaseNotBuilt {
                    recipe: name.to_string(),
                    base: b.to_string(),
                }
            })?,
        ),
        _ => None,
    };
    let fp = recipe.fingerprint(&host, base_digest.as_deref());
    if built && crate::storage::image::built_recipe(&storage, name).as_deref() == Some(fp.as_str()) {
        let digest = crate::storage::image::manifest_digest(&layout, crate::storage::image::DEFAULT_TAG)?;
        if !quiet {
            println!("image {name} is up to date with its recipe: {digest}");
        }
        return Ok(0);
    }
    let mut progress = crate::storage::image::Progress::new(quiet);
    let digest = crate::storage::image::build_image(
        &storage,
        name,
        Some(&host),
        &recipe.packages,
        &crate::storage::image::Layers {
            from: base_layout.as_deref(),
            steps: &recipe.run,
        },
        Some(&fp),
        &mut progress,
    )?;
    if !quiet {
        println!("built the image {name} {digest}");
    }
    Ok(0)
}
