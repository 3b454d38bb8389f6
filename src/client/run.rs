//! `lazaret run`: its options, the checks that refuse a run before anything
//! starts, and joining (or starting) the Domain for one session.

use std::path::PathBuf;
use std::time::Duration;

use crate::client::args::{finish_args, refuse_root, utf8_argv};
use crate::client::failure::{Expected, Failure};
use crate::client::resolve::{resolve, Resolved};
use crate::client::session::{session, Outcome};
use crate::client::start::connect_or_start;
use crate::config::{self, ImageSource};
use crate::storage::image;

/// `--memory SIZE`, `--pids N`, `--cpus N` of `lazaret run`.
fn limit_flags(args: &mut pico_args::Arguments) -> Result<config::Limits, Failure> {
    let mut l = config::Limits::default();
    if let Some(v) = args.opt_value_from_str::<_, String>("--memory")? {
        l.memory = Some(
            config::parse_size(&v)
                .ok()
                .filter(|m| *m >= 64 << 20)
                .ok_or_else(|| Failure::BadValue {
                    flag: "--memory",
                    value: v.clone(),
                    expected: Expected::Memory,
                })?,
        );
    }
    if let Some(v) = args.opt_value_from_str::<_, String>("--pids")? {
        l.pids = Some(
            v.parse::<u64>()
                .ok()
                .filter(|n| (32..=4_194_304).contains(n))
                .ok_or_else(|| Failure::BadValue {
                    flag: "--pids",
                    value: v.clone(),
                    expected: Expected::Pids,
                })?,
        );
    }
    if let Some(v) = args.opt_value_from_str::<_, String>("--cpus")? {
        l.cpu_millis = Some(config::parse_cpus(&v).map_err(|e| Failure::BadValue {
            flag: "--cpus",
            value: v.clone(),
            expected: Expected::Value(e),
        })?);
    }
    Ok(l)
}

/// Explicit limits need a cgroup mechanism: refuse (exit 2) with the fix
/// when there is none, before anything starts.
fn check_limits(r: &Resolved) -> Result<(), Failure> {
    let explicit = r.profile.limits.explicit() || r.limit_overrides.explicit();
    if !explicit {
        return Ok(());
    }
    match crate::storage::cgroup::detect() {
        crate::storage::cgroup::Mechanism::Unavailable { why, fix } => Err(Failure::LimitsUnenforceable {
            profile: r.profile.name.clone(),
            why,
            fix,
        }),
        _ => Ok(()),
    }
}

// ---- run ------------------------------------------------------------------------

pub(super) fn cmd_run(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let (opts, cmd) = crate::client::usage::split_run(raw);
    let mut args = pico_args::Arguments::from_vec(opts);
    let profile: Option<String> = args.opt_value_from_str(["-p", "--profile"])?;
    let workspace: Option<PathBuf> = args.opt_value_from_str(["-w", "--workspace"])?;
    let quiet = args.contains(["-q", "--quiet"]);
    let overrides = limit_flags(&mut args)?;
    let env_flags: Vec<String> = args.values_from_str(["-e", "--env"])?;
    let publish: Vec<String> = args.values_from_str("--publish")?;
    let as_root = args.contains("--root");
    finish_args(args)?;
    let publish = publish
        .iter()
        .map(|p| {
            p.parse::<crate::config::ports::PortForward>()
                .map_err(|e| Failure::BadValue {
                    flag: "--publish",
                    value: crate::display::escape(p),
                    expected: Expected::Value(e),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let argv = utf8_argv(cmd)?;
    refuse_root()?;
    let mut r = resolve(profile, workspace)?;
    r.pass = crate::config::passenv::resolve(&r.profile.pass_env, &env_flags, |k| std::env::var(k).ok())?;
    crate::config::ports::merge(&r.profile.ports, &publish)?;
    r.publish = publish;
    r.root = as_root;
    r.limit_overrides = overrides;
    check_limits(&r)?;
    // A network policy the config cannot yield is bad input too.
    crate::net::policy::derive(&r.cfg.path, r.cfg.default_deny.as_deref(), &r.profile, &[]).map_err(Failure::Policy)?;
    preflight(&r)?;
    r.secrets = crate::client::secrets::check_start(&r)?;
    // A missing image is bad input, reported before anything starts; a
    // published Domain already runs on its prepared lower and needs none.
    if matches!(r.profile.image, ImageSource::Default)
        && !image::images_dir(&r.storage).join("default/index.json").exists()
        && !r.paths.socket().exists()
    {
        return Err(Failure::DefaultImageMissing(
            image::images_dir(&r.storage).join("default"),
        ));
    }
    if let ImageSource::Named(n) = &r.profile.image {
        if !image::images_dir(&r.storage).join(n).join("index.json").exists() {
            return Err(Failure::ImageMissing {
                image: n.clone(),
                profile: r.profile.name.clone(),
            });
        }
    }
    // A connection that closes before Welcome opened nothing: the Domain
    // was going down as we joined. Start over (a bounded number of times).
    for _ in 0..5 {
        let stream = connect_or_start(&r, quiet)?;
        crate::client::lifecycle::publish_on_join(&r)?;
        match session(stream, &r, argv.clone())? {
            Outcome::Exited(code) => return Ok(code),
            Outcome::Retry => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Err(Failure::KeptStopping)
}

/// Bad input a `run` can be refused for before anything starts (exit 2): a
/// volume whose host path does not exist, an image path that is not there.
fn preflight(r: &Resolved) -> Result<(), Failure> {
    if let Some(v) = crate::plan::guest::missing_volume(&r.profile.volumes) {
        return Err(Failure::MissingVolume {
            config: r.cfg.path.clone(),
            profile: r.profile.name.clone(),
            host: v.host.clone(),
            guest: v.guest.clone(),
        });
    }
    // Where a volume may be mounted is known once the lower exists (the
    // coordinator checks again after preparing it).
    if matches!(r.profile.image, ImageSource::Default) && !r.profile.volumes.is_empty() {
        let layout = image::images_dir(&r.storage).join("default");
        if let Ok(digest) = image::manifest_digest(&layout, image::DEFAULT_TAG) {
            let rootfs = image::lowers_dir(&r.storage)
                .join(image::artifact_id(&digest))
                .join("rootfs");
            if rootfs.is_dir() {
                crate::plan::guest::check_volume_targets(&rootfs, &r.profile.volumes, &r.profile.persist).map_err(
                    |err| Failure::VolumeTarget {
                        config: r.cfg.path.clone(),
                        profile: r.profile.name.clone(),
                        err,
                    },
                )?;
            }
        }
    }
    match &r.profile.image {
        ImageSource::Oci { path, .. } if !path.join("index.json").is_file() => Err(Failure::NotOciLayout {
            config: r.cfg.path.clone(),
            profile: r.profile.name.clone(),
            image: r.profile.image.clone(),
            path: path.clone(),
        }),
        ImageSource::DockerArchive(file) if !file.is_file() => Err(Failure::NotAFile {
            config: r.cfg.path.clone(),
            profile: r.profile.name.clone(),
            image: r.profile.image.clone(),
            file: file.clone(),
        }),
        _ => Ok(()),
    }
}
