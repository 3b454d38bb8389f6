//! `lazaret net`: `show` (the Domain's derived network policy and
//! readiness) and `log` (egress refusals by name).

use std::path::PathBuf;

use crate::client::args::finish_args;
use crate::client::failure::Failure;
use crate::client::resolve::resolve;

pub(super) fn cmd_net(mut raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let sub = if raw.is_empty() { None } else { Some(raw.remove(0)) };
    let sub = sub.as_ref().and_then(|s| s.to_str());
    if sub != Some("show") && sub != Some("log") {
        return Err(Failure::NeedsSubcommand {
            cmd: "net",
            choices: "show or log",
        });
    }
    let mut args = pico_args::Arguments::from_vec(raw);
    let profile: Option<String> = args.opt_value_from_str(["-p", "--profile"])?;
    let workspace: Option<PathBuf> = args.opt_value_from_str(["-w", "--workspace"])?;
    let json = args.contains("--json");
    // `net log --all`: the Domain's own start-up checks too.
    let all = sub == Some("log") && args.contains("--all");
    finish_args(args)?;
    let r = resolve(profile, workspace)?;
    if sub == Some("log") {
        let run = r.paths.gen_dir();
        let run = run.parent().unwrap_or(&run);
        return Ok(crate::net::show::log(&r.profile, r.domain_id.as_str(), run, all, json));
    }
    let published = r.paths.socket().exists();
    crate::net::show::show(
        &r.cfg,
        &r.profile,
        r.domain_id.as_str(),
        &r.workspace,
        &r.paths.gen_dir(),
        published,
        json,
    )
    .map_err(Failure::NetShow)
}
