//! `lazaret image`: `build` (the default image or a recipe), `list` and
//! `prune` (what they find is `storage::gc`'s; printing it is here).

use crate::client::args::{finish_args, refuse_root};
use crate::client::failure::Failure;
use std::path::Path;

use crate::config;
use crate::display::{fit, human_size};
use crate::plan::Json;
use crate::storage::gc::{self, Listed, Pruned};
use crate::storage::image::{self, ImportState};
use crate::storage::imagegc::ImageItem;
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
            let layout = image::images_dir(&storage).join("default");
            if if_missing && layout.join("index.json").exists() {
                return Ok(0);
            }
            // Before any image work: the build's namespace maps them.
            crate::client::doctor::require_subids()?;
            paths::ensure_private_dir(&storage)?;
            let mut progress = image::Progress::new(quiet);
            let digest = image::build_default(&storage, &mut progress)?;
            if !quiet {
                println!("built the default image {digest}");
            }
            Ok(0)
        }
        Some(sub @ ("list" | "ls" | "prune")) => {
            let mut args = pico_args::Arguments::from_vec(raw);
            let json = args.contains("--json");
            let dry_run = sub == "prune" && args.contains("--dry-run");
            let all = sub == "prune" && args.contains("--all");
            finish_args(args)?;
            refuse_root()?;
            if sub != "prune" {
                let (listed, lowers) = gc::list()?;
                print_list(&listed, &lowers, json);
            } else {
                print_pruned(&gc::prune(dry_run, all)?, dry_run, json);
            }
            Ok(0)
        }
        Some("export") => {
            let mut args = pico_args::Arguments::from_vec(raw);
            let oci: Option<std::path::PathBuf> = args.opt_value_from_str("--oci")?;
            let archive: Option<std::path::PathBuf> = args.opt_value_from_str("--archive")?;
            let name: String = args.opt_free_from_str()?.ok_or_else(|| {
                Failure::Export("image export: expected the image's NAME (default, or a recipe's)".into())
            })?;
            finish_args(args)?;
            refuse_root()?;
            let target = match (oci, archive) {
                (Some(d), None) => {
                    // A directory that is something else is refused, not added to.
                    let used = std::fs::read_dir(&d).map(|mut r| r.next().is_some()).unwrap_or(false);
                    if used && !d.join("index.json").exists() {
                        return Err(Failure::Export(format!(
                            "--oci {}: not empty and not an OCI layout; expected a new directory or a layout",
                            crate::display::escape_path(&d)
                        )));
                    }
                    image::ExportTarget::Oci(d)
                }
                (None, Some(f)) => {
                    if std::fs::symlink_metadata(&f).is_ok() {
                        return Err(Failure::Export(format!(
                            "--archive {}: exists; expected a new file",
                            crate::display::escape_path(&f)
                        )));
                    }
                    image::ExportTarget::Archive(f)
                }
                _ => {
                    return Err(Failure::Export(
                        "image export: expected one of --oci DIR or --archive FILE".into(),
                    ))
                }
            };
            if !config::valid_image_name(&name) && name != "default" {
                return Err(Failure::Export(format!(
                    "image export: {:?} is not an image name",
                    crate::display::escape(&name)
                )));
            }
            let storage = paths::storage_root()?;
            let digest = image::export(&storage, &name, &target)?;
            println!("{digest}");
            Ok(0)
        }
        Some(other) => Err(Failure::UnknownImageCommand(other.to_string())),
        None => Err(Failure::NeedsSubcommand {
            cmd: "image",
            choices: "build, export, list or prune",
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
    // Before any image work: the build's namespace maps them.
    crate::client::doctor::require_subids()?;
    paths::ensure_private_dir(&storage)?;
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

/// `image list`: a line per entry with the disk it takes (as `du -s`
/// counts it) and their total, or one JSON array (`bytes` of each).
fn print_list(listed: &[Listed], lowers: &Path, json: bool) {
    let mut arr = Vec::new();
    let mut out = String::new();
    let mut total = 0u64;
    for l in listed {
        total += match l {
            Listed::Image { bytes, .. }
            | Listed::Import { bytes, .. }
            | Listed::Artifact { bytes, .. }
            | Listed::ImageDir { bytes, .. } => *bytes,
            _ => 0,
        };
        match l {
            Listed::Image { name, bytes } => {
                arr.push(Json::Obj(vec![
                    ("kind", Json::s("image")),
                    ("name", Json::s(name)),
                    ("bytes", Json::Num(*bytes as i64)),
                ]));
                out.push_str(&format!("image {}  {:>8}\n", fit(name, 40), human_size(*bytes)));
            }
            Listed::Import {
                name,
                state: st,
                bytes,
                profiles,
            } => {
                let state = match st {
                    ImportState::Complete => "imported",
                    ImportState::Importing => "importing",
                    ImportState::Failed => "failed",
                };
                arr.push(Json::Obj(vec![
                    ("kind", Json::s("import")),
                    ("name", Json::s(name)),
                    ("state", Json::s(state)),
                    ("bytes", Json::Num(*bytes as i64)),
                ]));
                let users = match profiles {
                    Some(p) => format!("  image of profile {}", p.join(", ")),
                    None if *st == ImportState::Complete => "  no profile uses it".to_string(),
                    None => String::new(),
                };
                let prunable =
                    *st == ImportState::Failed || (*st == ImportState::Complete && users.contains("no profile"));
                out.push_str(&format!(
                    "image {name}  {:>8}  {state}{}{users}\n",
                    human_size(*bytes),
                    if prunable {
                        " (`lazaret image prune` removes it)"
                    } else {
                        ""
                    }
                ));
            }
            Listed::Artifact {
                id,
                digest,
                source,
                bytes,
                leased_by,
                active,
                profiles,
            } => {
                arr.push(Json::Obj(vec![
                    ("kind", Json::s("artifact")),
                    ("id", Json::s(id)),
                    ("digest", Json::s(digest)),
                    ("source", Json::s(source)),
                    ("bytes", Json::Num(*bytes as i64)),
                    ("leased_by", Json::strs(leased_by)),
                    ("active", Json::strs(active)),
                    ("profiles", Json::strs(profiles)),
                ]));
                // The image it was unpacked from (its first start).
                let from = Path::new(source)
                    .file_name()
                    .map(|n| format!("  prepared from {}", crate::display::escape(&n.to_string_lossy())))
                    .unwrap_or_default();
                out.push_str(&format!(
                    "{id}  {:>8}  {} lease(s), {} active  {}{from}{}\n",
                    human_size(*bytes),
                    leased_by.len(),
                    active.len(),
                    &digest[..digest.len().min(19)],
                    if profiles.is_empty() {
                        String::new()
                    } else {
                        format!("  image of profile {}", profiles.join(", "))
                    }
                ));
            }
            Listed::Preparing { name, live } => {
                arr.push(Json::Obj(vec![
                    ("kind", Json::s("preparing")),
                    ("name", Json::s(name)),
                    ("live", Json::Bool(*live)),
                ]));
                out.push_str(&format!(
                    "{}  being prepared{}\n",
                    fit(name, 50),
                    if *live { "" } else { " (preparer is gone)" }
                ));
            }
            Listed::Trash(n) => {
                arr.push(Json::Obj(vec![("kind", Json::s("trash")), ("name", Json::s(n))]));
                out.push_str(&format!("{}  being deleted\n", fit(n, 60)));
            }
            Listed::Foreign(n) => {
                arr.push(Json::Obj(vec![("kind", Json::s("foreign")), ("name", Json::s(n))]));
                out.push_str(&format!("{}  not Lazaret's: never touched\n", fit(n, 50)));
            }
            Listed::ImageDir { item, path, bytes } => {
                let (kind, what) = match item {
                    ImageItem::Build { live: true, .. } => ("build", "image build in progress".to_string()),
                    ImageItem::Build { live: false, .. } => (
                        "build",
                        "interrupted image build (builder is gone): `image prune` removes it".to_string(),
                    ),
                    ImageItem::Old { .. } => (
                        "old",
                        "old image left by an interrupted rebuild: `image prune` removes it".to_string(),
                    ),
                    ImageItem::Import { profiles, .. } if profiles.is_empty() => (
                        "import",
                        "imported image no profile uses: `image prune` removes it".to_string(),
                    ),
                    ImageItem::Import { profiles, .. } => {
                        ("import", format!("imported image of profile {}", profiles.join(", ")))
                    }
                };
                arr.push(Json::Obj(vec![
                    ("kind", Json::s(kind)),
                    ("name", Json::s(item.name())),
                    ("path", Json::s(path.to_string_lossy())),
                    ("bytes", Json::Num(*bytes as i64)),
                    ("removable", Json::Bool(item.removable())),
                ]));
                out.push_str(&format!(
                    "images/{}  {:>8}  {what}\n",
                    fit(item.name(), 40),
                    human_size(*bytes)
                ));
            }
        }
    }
    if json {
        println!("{}", Json::Arr(arr).render());
    } else if out.is_empty() {
        println!("no prepared lowers in {}", lowers.display());
    } else {
        print!("{out}");
        println!("total {} on disk", human_size(total));
    }
}

/// `image prune`: what went (or would), what stayed and why.
fn print_pruned(p: &Pruned, dry_run: bool, json: bool) {
    if json {
        println!(
            "{}",
            Json::Obj(vec![
                ("dry_run", Json::Bool(dry_run)),
                ("removed", Json::strs(&p.removed)),
                ("kept", Json::strs(&p.kept)),
                ("foreign", Json::strs(&p.foreign)),
            ])
            .render()
        );
        return;
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for r in &p.removed {
        println!("{verb} {r}");
    }
    for k in &p.kept {
        println!("kept {k} (leased, an image a profile uses, or being prepared)");
    }
    for f in &p.foreign {
        println!("left {f} alone (not Lazaret's)");
    }
    if p.removed.is_empty() && p.kept.is_empty() {
        println!("nothing to prune");
    }
}
