//! The Client CLI's entry: the top-level usage, the public preamble
//! (`--help`, SIGPIPE), dispatch by command to each command family, and the
//! hidden subcommands `__coordinator`, `__supervisor` and `__state-helper`
//! by which Lazaret re-executes itself in its other process roles.

use std::path::PathBuf;

use crate::client::args::{finish_args, refuse_root};
use crate::client::failure::{plain_failure, Failure};
use crate::client::resolve::warn_broken_profiles;
use crate::client::session::restore_terminal;
use crate::config;
use crate::coordinator;
use crate::supervisor;
use crate::sys;

const USAGE: &str = "\
usage: lazaret <command> [options]

commands:
  run [-p P] [-w DIR] [-q] [--memory SIZE] [--pids N] [--cpus N]
      [-e KEY[=VALUE]]... [--publish [ADDR:]HOSTPORT:GUESTPORT]... [--root]
      [CMD ARGS...]    open a shell (or run CMD) in the Domain's sandbox;
                       -e passes a host variable to this session only;
                       --publish forwards a host port (127.0.0.1 by default;
                       added to a running Domain as `port add` does);
                       --root runs as root when the profile names a user
  ps [--json]          list running Domains: ID prefix, age, sessions, ports
  escalations [ID]     escalation requests waiting for a decision, with
                       their full command (a second look from elsewhere)
  stop [ID | --all | -p P -w DIR]
                       stop running Domains (their sessions are told why)
  exec ID [-e KEY[=VALUE]]... [--root] [-- CMD ARGS...]
                       join a running Domain by ID (prefix) from anywhere
  port add ID [ADDR:]HOSTPORT:GUESTPORT
                       forward one more host port to a running Domain
                       (HOSTPORT 0: any free port)
  rm [ID | -p P -w DIR] [--yes] [--json]
                       delete a stopped Domain's state (asks first)
  image build [NAME] [--quiet] [--if-missing]
                       build the default image (debootstrap + umoci), or the
                       recipe [images.NAME] (built-in: dev); an unchanged
                       recipe is not rebuilt
  net show [--profile P] [--workspace DIR] [--json]
                       the Domain's derived network policy and readiness
  net log [--profile P] [--workspace DIR] [--all] [--json]
                       egress refusals by name (allow-by-name mode), newest
                       first, and the hosts line that would allow them
                       (--all: the Domain's own start-up checks too)
  git show [--profile P] [--workspace DIR] [--json]
                       Git's execution surface: what stays read-only
                       inside, hook managers, and hooks or programs that
                       run project code (warned about at each start)
  image list [--json]  list images and prepared lowers with the disk each
                       takes, their leases and foreign dirs (also: ls)
  image prune [--dry-run] [--all] [--json]
                       delete prepared lowers no Domain leases (the lowers
                       of images a profile uses stay unless --all) and
                       interrupted builds
  state list [--json]  list Domains with persistent state
  state inspect|verify [DOMAIN] [--json]
                       show persistent changes (metadata only) / check them
  state reset [DOMAIN] (--path P | --all) [--yes] [--json]
                       empty persistent state (asks first unless --yes)
  state unhide [DOMAIN] (--path P | --all) [--json]
                       forget hidden ignored host files (docs/git.md)
                       DOMAIN: [--profile P] [--workspace DIR] | --domain ID
  export kubernetes [-p P] [--namespace NS] [--image REF] [--egress gate|cilium]
      [--format yaml|json] [--out DIR]
                       the profile as agent-sandbox objects for a cluster
                       with gVisor (docs/kubernetes.md)
  image export NAME (--oci DIR | --archive FILE)
                       write a built image as an OCI layout or archive
  gate --config FILE   run the egress gate stand-alone (a pod's sidecar)
  changes [DOMAIN] [--json]
                       host-tool files the Domain's copy changed, with diffs
  apply [DOMAIN] PATH...
                       copy reviewed host-tool files back to the host
  doctor [--json]      check host prerequisites and print fixes
  completion bash|zsh|fish
                       the shell completion script (the package installs
                       them; man lazaret has every command's usage)
  version [--json]     the version, commit, protocol and the runsc found
                       (also -V, --version)
  help [CMD]           this text, or CMD's usage (also CMD --help)

options may be written --opt=value; -p, -w and -q stand for --profile,
--workspace and --quiet
";

pub fn main() -> i32 {
    // Every helper (debootstrap's chroot, newuidmap, ip, ...) is found on
    // one PATH: the caller's plus the sbin directories.
    crate::sys::hostenv::set_helper_path();
    let mut raw: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let cmd = raw.first().and_then(|a| a.to_str()).map(String::from);
    if cmd.is_some() {
        raw.remove(0);
    }
    if let Some(code) = public_preamble(cmd.as_deref(), &raw) {
        return code;
    }
    // The internal roles log to stderr (the coordinator log file).
    if matches!(cmd.as_deref(), Some("__coordinator") | Some("__supervisor")) {
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
            .format_timestamp_millis()
            .init();
    }
    let public = cmd.as_deref().and_then(|c| COMMANDS.iter().find(|(n, _)| *n == c));
    let result = match cmd.as_deref() {
        _ if public.is_some() => public.map_or(Ok(0), |(_, entry)| entry(raw)),
        Some("--version") | Some("-V") => crate::client::version::cmd(raw),
        Some("--help") | Some("-h") => cmd_help(raw),
        Some("completion") => cmd_completion(raw),
        Some("man") => finish_args(pico_args::Arguments::from_vec(raw)).map(|()| {
            print!("{}", man_page());
            0
        }),
        Some("__coordinator") => internal_coordinator(raw),
        Some("__supervisor") => internal_supervisor(raw),
        Some("__state-helper") => Ok(crate::storage::statefs::helper_main(raw)),
        Some(other) => Err(Failure::UnknownCommand(other.to_string())),
        None => Err(Failure::NoCommand(USAGE)),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            restore_terminal();
            let f = plain_failure(f);
            eprintln!("lazaret: {f}");
            f.code()
        }
    }
}

type Entry = fn(Vec<std::ffi::OsString>) -> Result<i32, Failure>;

/// Every public command and its entry, in the order `lazaret help` lists
/// them. The completions and the man page are generated from this table
/// and the usage texts (`client::completion`): a command added here is in
/// both (a unit test checks it).
pub const COMMANDS: &[(&str, Entry)] = &[
    ("run", crate::client::run::cmd_run),
    ("ps", crate::client::lifecycle::cmd_ps),
    ("escalations", crate::client::lifecycle::cmd_escalations),
    ("stop", crate::client::lifecycle::cmd_stop),
    ("exec", crate::client::lifecycle::cmd_exec),
    ("port", crate::client::lifecycle::cmd_port),
    ("rm", crate::client::lifecycle::cmd_rm),
    ("image", crate::client::image::cmd_image),
    ("net", crate::client::net::cmd_net),
    ("git", crate::client::git::cmd_git),
    ("export", crate::client::export::cmd_export),
    ("gate", crate::client::gate::cmd_gate),
    ("state", |raw| refuse_root().and_then(|()| super::state::cmd_state(raw))),
    ("changes", |raw| {
        refuse_root().and_then(|()| super::state::cmd_changes(raw))
    }),
    ("apply", |raw| refuse_root().and_then(|()| super::state::cmd_apply(raw))),
    ("doctor", crate::client::doctor::cmd),
    ("completion", cmd_completion),
    ("version", crate::client::version::cmd),
    ("help", cmd_help),
];

fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|(n, _)| *n).collect()
}

fn cmd_help(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    match raw.first().and_then(|a| a.to_str()) {
        None => {
            print!("{USAGE}");
            Ok(0)
        }
        Some(c) => match crate::client::usage::of(c) {
            Some(u) => {
                print!("{u}");
                Ok(0)
            }
            None => Err(Failure::UnknownCommand(c.to_string())),
        },
    }
}

/// The completion script for `shell`, from [`COMMANDS`] (pure).
pub fn completion_script(shell: &str) -> Option<String> {
    let cmds = crate::client::completion::commands(&names());
    Some(match shell {
        "bash" => crate::client::completion::bash(&cmds),
        "zsh" => crate::client::completion::zsh(&cmds),
        "fish" => crate::client::completion::fish(&cmds),
        _ => return None,
    })
}

/// lazaret(1), from [`USAGE`] and every command's usage text (pure).
pub fn man_page() -> String {
    let cmds = crate::client::completion::commands(&names());
    crate::client::completion::man(USAGE, &cmds, crate::build_info::VERSION)
}

fn cmd_completion(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let shell: Option<String> = args.opt_free_from_str()?;
    finish_args(args)?;
    match shell.as_deref().and_then(completion_script) {
        Some(s) => {
            print!("{s}");
            Ok(0)
        }
        None => {
            print!("{}", crate::client::usage::COMPLETION);
            Ok(2)
        }
    }
}

/// Before a public command runs: `CMD --help` prints its usage (exit 0);
/// commands that only print get the default SIGPIPE, so `| head` ends them
/// quietly (status 141) instead of a panic on EPIPE; the config's broken
/// profiles are named once for commands that need no profile.
fn public_preamble(cmd: Option<&str>, raw: &[std::ffi::OsString]) -> Option<i32> {
    let cmd = cmd?;
    if matches!(cmd, "-h" | "--help" | "-V" | "--version") {
        sigpipe_default();
        return None;
    }
    let usage = crate::client::usage::of(cmd)?;
    let opts: &[std::ffi::OsString] = if cmd == "run" {
        &crate::client::usage::split_run(raw.to_vec()).0
    } else if cmd == "exec" {
        // `exec ID -- CMD --help` asks CMD.
        &raw[..raw.iter().position(|a| a == "--").unwrap_or(raw.len())]
    } else {
        raw
    };
    if cmd != "help" && crate::client::usage::wants_help(opts) {
        sigpipe_default();
        print!("{usage}");
        return Some(0);
    }
    if cmd != "run" {
        sigpipe_default();
    }
    if matches!(cmd, "image" | "state" | "changes" | "apply") {
        if let Ok(cfg) = config::load(&config::config_path()) {
            warn_broken_profiles(&cfg, None);
        }
    }
    None
}

/// The default action for SIGPIPE: a closed reader ends the process the
/// way it ends `cat` (Rust ignores SIGPIPE, and `println!` then panics on
/// EPIPE, which the release profile turns into an abort).
fn sigpipe_default() {
    sys::default_signal(sys::SIGPIPE);
}

// ---- internal roles ------------------------------------------------------------------------

fn internal_coordinator(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let a = coordinator::Args {
        profile: args.value_from_str("--profile")?,
        workspace: args.value_from_str("--workspace")?,
        config: args.value_from_str("--config")?,
        publish: args.values_from_str("--publish")?,
        limits: crate::storage::cgroup::coordinator_overrides(&mut args)?,
        secrets: args.contains("--secrets"),
        secret_values: Vec::new(),
    };
    finish_args(args)?;
    Ok(coordinator::main(a))
}

fn internal_supervisor(raw: Vec<std::ffi::OsString>) -> Result<i32, Failure> {
    let mut args = pico_args::Arguments::from_vec(raw);
    let runsc_root: PathBuf = args.value_from_str("--runsc-root")?;
    let a = supervisor::Args {
        runsc_args: crate::plan::runsc_global_args(&runsc_root),
        runsc_root,
        bundle: args.value_from_str("--bundle")?,
        container_id: args.value_from_str("--id")?,
        net_plan: args.opt_value_from_str("--net-plan")?,
        boot_request: args.opt_value_from_str("--boot-request")?,
        views: args.opt_value_from_str("--views")?,
        guest_workspace: args.opt_value_from_str("--guest-workspace")?,
        anchor_plan: args.opt_value_from_str("--anchor-plan")?,
        scratch: args.opt_value_from_str("--scratch")?,
        meminfo: args.opt_value_from_str("--meminfo")?,
        mailbox_requests: args.opt_value_from_str("--mailbox-requests")?,
        secrets: args.contains("--secrets"),
        disk_cap: args.opt_value_from_str("--disk-cap")?,
        disk_used: args.opt_value_from_str("--disk-used")?.unwrap_or(0),
        disk_tmp: args.opt_value_from_str("--disk-tmp")?,
        scratch_size: args.opt_value_from_str("--scratch-size")?,
    };
    finish_args(args)?;
    Ok(supervisor::main(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command of the dispatch table is in `lazaret help`, in each
    /// completion script and in the man page, with its usage text.
    #[test]
    fn every_command_is_in_help_completions_and_man_page() {
        let man = man_page();
        let scripts: Vec<(&str, String)> = ["bash", "zsh", "fish"]
            .into_iter()
            .map(|s| (s, completion_script(s).unwrap()))
            .collect();
        for (name, _) in COMMANDS {
            let usage = crate::client::usage::of(name).unwrap_or_else(|| panic!("{name} has no usage"));
            assert!(USAGE.contains(&format!("\n  {name} ")), "{name} not in lazaret help");
            assert!(
                man.contains(&format!(".SS lazaret {name}\n")),
                "{name} not in the man page"
            );
            let first = usage.lines().next().unwrap().replace('-', "\\-");
            assert!(man.contains(&first), "{name}'s usage not in the man page");
            for (shell, s) in &scripts {
                let listed = s.lines().any(|l| {
                    (l.contains("cmds=(") || l.contains("compgen -W \"") || l.contains("__fish_use_subcommand"))
                        && l.split(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                            .any(|w| w == *name)
                });
                assert!(listed, "{name} not among {shell}'s commands");
                assert!(
                    s.contains(&format!("{name})")) || *shell == "fish",
                    "{name} has no {shell} case"
                );
            }
        }
        assert!(completion_script("csh").is_none());
        assert!(scripts[0].1.contains("build export list ls prune"));
    }
}
