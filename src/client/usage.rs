//! Per-command usage texts and the small argument conventions shared by
//! every public command: `lazaret help CMD`, `lazaret CMD --help`, and
//! `lazaret run [OPTIONS] CMD ARGS...` without `--`.

use std::ffi::OsString;

pub const RUN: &str = "\
usage: lazaret run [OPTIONS] [--] [CMD ARGS...]

Opens the profile's command (a login shell unless configured) in the sandbox
of (profile, workspace), or runs CMD there. Joins the running sandbox when
there is one. The exit status is the command's: 127 when CMD is not found
inside, 126 when it cannot be executed.

options:
  -p, --profile P      the profile from config.toml (default: default)
  -w, --workspace DIR  the workspace (default: the current directory, or its
                       Git repository's top level)
  -q, --quiet          no progress output while the sandbox starts
  --memory SIZE        memory limit of a new Domain (\"4GiB\"; docs/limits.md)
  --pids N             process limit of a new Domain
  --cpus N             CPU limit of a new Domain (2, 0.5)
  -e, --env KEY[=VALUE]
                       pass a host variable (KEY: its value here) to this
                       session only; never in argv, the store or logs
  --publish [ADDR:]HOSTPORT:GUESTPORT
                       forward a host port (127.0.0.1 unless ADDR) to a port
                       of the Domain; a running Domain gets it added, as
                       `lazaret port add` does (docs/agents.md); `-p` is
                       --profile
  --root               run as root when the profile names a `user`
  -h, --help           this text

`--` is needed only when CMD starts with `-`. Options may also be written
as --opt=value.
";

pub const PS: &str = "\
usage: lazaret ps [--json]

Lists running Domains: ID prefix, profile, workspace, age, sessions,
pending escalations and published ports.
";

pub const STOP: &str = "\
usage: lazaret stop [ID | --all | -p P -w DIR]

Stops the Domain with ID (a prefix as `lazaret ps` prints it), every
running Domain (--all), or the Domain of (profile, workspace); its
sessions are told why.

options:
  -p, --profile P      the profile (default: default)
  -w, --workspace DIR  the workspace (default: the current directory)
";

pub const PORT: &str = "\
usage: lazaret port add ID [ADDR:]HOSTPORT:GUESTPORT

Forwards one more host port (127.0.0.1 unless ADDR) to GUESTPORT of the
running Domain with ID (a prefix as `lazaret ps` prints it), without
restarting it. HOSTPORT 0 asks for any free host port; the forward it got
is printed and `lazaret ps` lists it. The forward lasts until the Domain
stops (add it to the profile's `ports` to have it at every start).
";

pub const EXEC: &str = "\
usage: lazaret exec ID [-e KEY[=VALUE]]... [--root] [-- CMD ARGS...]

Joins the running Domain with ID (a prefix as `lazaret ps` prints it) from
any directory: a session running the profile's command, or CMD. --root runs
it as root when the profile names a `user`.
";

pub const RM: &str = "\
usage: lazaret rm [ID | -p P -w DIR] [--yes] [--json]

Deletes a stopped Domain's state (upper, ignored state, store) after showing
what goes; asks first unless --yes. Refuses a running Domain.
";

pub const IMAGE: &str = "\
usage: lazaret image build [NAME] [-q] [--if-missing]
       lazaret image export NAME (--oci DIR | --archive FILE)
       lazaret image list|ls [--json]
       lazaret image prune [--all] [--dry-run] [--json]

build   builds the default base image (debootstrap of the host's Debian
        release + umoci), or the recipe [images.NAME] (built-in: dev);
        takes a minute or more; an unchanged recipe is not rebuilt
        -q, --quiet     no progress output
        --if-missing    do nothing when the image exists
export  writes the built image NAME (default, or a recipe's: its steps
        applied) as an OCI layout DIR or an OCI archive FILE (a tar of one)
        that skopeo copy can push; prints the manifest digest it wrote
list    lists images, prepared lowers (the image each was unpacked from at
        its first start), their leases, interrupted builds and imports,
        each with the disk it takes, and the total
prune   deletes prepared lowers no Domain leases (keeping those of images a
        profile refers to unless --all), interrupted builds, failed imports
";

pub const EXPORT: &str = "\
usage: lazaret export kubernetes [-p P] [--namespace NS] [--image REF]
           [--gate-image REF] [--runtime-class NAME] [--replicas N]
           [--egress gate|cilium] [--format yaml|json] [--out DIR]

Writes the profile as what a Kubernetes cluster with agent-sandbox and a
gVisor RuntimeClass runs: a SandboxTemplate (the image, limits, env, volumes
as claims, the network policy), a SandboxWarmPool, and with network.hosts
the egress gate as a sidecar (a ConfigMap with its config and the init
container's redirect rules) or, with --egress cilium, a CiliumNetworkPolicy
with toFQDNs (no key swap: refused when the profile has secrets). No secret
value is written: values come from a Secret the team creates. What does not
carry over is printed first. See docs/kubernetes.md.

options:
  -p, --profile P      the profile (default: default)
  --namespace NS       the objects' namespace (default: default)
  --image REF          the agent's image (default: the profile's docker://)
  --gate-image REF     the sidecar gate's image
  --runtime-class NAME the pods' RuntimeClass (default: gvisor)
  --replicas N         the warm pool's size (default: 1)
  --egress gate|cilium how network.hosts is kept (default: gate)
  --format yaml|json   (default: yaml)
  --out DIR            write NAME.yaml|json (and the gate's files) there;
                       without it the objects go to standard output
";

pub const GATE: &str = "\
usage: lazaret gate --config FILE
       lazaret gate --ready FILE

Runs the egress gate stand-alone, as the sidecar of a Kubernetes pod
(`lazaret export kubernetes` writes FILE): it takes the pod's redirected
TCP connections and DNS queries, lets only the listed names through and
swaps each bound secret's sentinel for its value, read from the
environment variable FILE names. Logs go to standard error.
--ready FILE exits 0 when FILE exists and is not empty (a startup probe).
";

pub const NET: &str = "\
usage: lazaret net show [-p P] [-w DIR] [--json]
       lazaret net log [-p P] [-w DIR] [--all] [--json]

show: the Domain's derived network policy and its readiness.
log:  what the egress gate refused (and, in network.mode = \"log\", what it
      allowed), by name, newest first, with counts, and the `hosts` line
      that would allow the refused names. Only the sandbox's own traffic:
      --all adds the Domain's own start-up checks (the readiness probe's
      packets), marked as such.
";

pub const STATE: &str = "\
usage: lazaret state list [--json]
       lazaret state inspect|verify [DOMAIN] [--json]
       lazaret state diff [DOMAIN] PATH
       lazaret state reset [DOMAIN] (--path P | --all) [--yes] [--json]
       lazaret state rotate-sentinels [DOMAIN] [--json]

DOMAIN is [-p P] [-w DIR] or --domain ID.
list      Domains with persistent state
inspect   persistent changes (metadata only), host-tool copies that differ
diff      a host-tool file: the host's against the Domain's copy (bounded
          as `lazaret changes` is)
verify    checks persistent state
reset     empties persistent state (asks first unless --yes); --all also
          rotates the sentinel key
rotate-sentinels
          new sentinels for the Domain's secrets from its next start (a
          stopped Domain; agents that saved the old one must be given
          the new one)
";

pub const CHANGES: &str = "\
usage: lazaret changes [DOMAIN] [--json]

DOMAIN is [-p P] [-w DIR] or --domain ID (default: this directory's).
Lists every Domain-side copy of a host-tool file (an editor's, direnv's,
an agent's, a build tool's configuration: docs/config.md) that differs
from the host's file, new, changed or removed, each with a line diff of
the host's file against the Domain's. No symlink is followed and no file
is read past 256 KiB: a symlink, device, FIFO or larger file is one line.
Everything shown is escaped. Copy a reviewed one with `lazaret apply`.
";

pub const APPLY: &str = "\
usage: lazaret apply [DOMAIN] PATH...

DOMAIN is [-p P] [-w DIR] or --domain ID (default: this directory's).
Copies the Domain's copies of the host-tool files at or below each PATH
(workspace-relative, or absolute inside the workspace) that differ from
the host's to the host: each file is written beside the host's, synced
and renamed over it (keeping the host file's mode), a removed one is
removed. Refuses, one line each, a symlink, device, FIFO or file over
256 KiB, and a host directory on the way that is a symlink; exits 1 when
any was refused. Review first with `lazaret changes`.
";

pub const ESCALATIONS: &str = "\
usage: lazaret escalations [ID]

Lists the escalation requests waiting for a decision in every running
Domain (or the one with ID, a prefix as `lazaret ps` prints it): for a
second look from another terminal at what a prompt asks. Each request is
shown with its session, the host directory it would run in, its
justification and every argument of its command on a line of its own
(escaped), in full.
";

pub const DOCTOR: &str = "\
usage: lazaret doctor [--json]

Checks the host prerequisites, every helper program on the PATH Lazaret
uses, and the config file; prints the fix for each problem. Exits 1 when
something needs fixing.
";

pub const VERSION: &str = "\
usage: lazaret version [--json]   (or lazaret -V, lazaret --version)

The version, the commit it was built from (when the build was told), the
client protocol version and the basic one every build answers, and the
runsc on the PATH with its version. --json: one object (version, commit,
protocol, basic_protocol, runsc_found, runsc_path, runsc_version).
";

pub const COMPLETION: &str = "\
usage: lazaret completion bash|zsh|fish

Prints the shell completion script, generated from the same command table
and usage texts as `lazaret help`. The package installs them where each
shell looks; by hand: `source <(lazaret completion bash)`.
";

pub const HELP: &str = "\
usage: lazaret help [CMD]   (or lazaret CMD --help)
";

/// The usage text of a public command.
pub const GIT: &str = "\
usage: lazaret git show [--profile P] [--workspace DIR] [--json]

Git's execution surface of the workspace, as host Git sees it now
(docs/git.md): every path the sandbox may not change because host Git runs
it or reads its configuration there (hooks, the scripts they run, followed
up to 4 levels deep, programs configuration names, config files and their
includes), the hook managers found, and every hook or configured program
whose command line cannot be decided (a package manager or build tool, an
expansion the analysis cannot resolve, `eval`): a host Git command runs
what the sandbox wrote there. A Domain start warns about those in one
line, or refuses to start under `host_hooks = \"refuse\"`. Exit status 2
when the workspace could not be searched for its repositories.

options:
  -p, --profile P      the profile (default: default)
  -w, --workspace DIR  the workspace (default: the current directory)
  --json               one JSON object: paths, managers, findings, error
";

pub fn of(cmd: &str) -> Option<&'static str> {
    Some(match cmd {
        "run" => RUN,
        "ps" => PS,
        "stop" => STOP,
        "exec" => EXEC,
        "port" => PORT,
        "rm" => RM,
        "image" => IMAGE,
        "net" => NET,
        "export" => EXPORT,
        "gate" => GATE,
        "git" => GIT,
        "state" => STATE,
        "changes" => CHANGES,
        "apply" => APPLY,
        "escalations" => ESCALATIONS,
        "doctor" => DOCTOR,
        "version" => VERSION,
        "completion" => COMPLETION,
        "help" => HELP,
        _ => return None,
    })
}

/// Options of `run` that take a value (the next argument, unless written
/// as `--opt=value`).
const RUN_VALUE_OPTS: &[&str] = &[
    "-p",
    "--profile",
    "-w",
    "--workspace",
    "--memory",
    "--pids",
    "--cpus",
    "-e",
    "--env",
    "--publish",
];

/// Splits `run`'s arguments into its options and the command: the command
/// starts after `--`, or at the first argument that is neither an option
/// nor an option's value.
pub fn split_run(raw: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    let mut i = 0;
    while i < raw.len() {
        let a = raw[i].to_string_lossy();
        if a == "--" {
            let mut opts = raw;
            let cmd = opts.split_off(i + 1);
            opts.pop();
            return (opts, cmd);
        }
        if !a.starts_with('-') || a == "-" {
            let mut opts = raw;
            let cmd = opts.split_off(i);
            return (opts, cmd);
        }
        i += if RUN_VALUE_OPTS.contains(&a.as_ref()) { 2 } else { 1 };
    }
    (raw, Vec::new())
}

/// Whether the options ask for help.
pub fn wants_help(opts: &[OsString]) -> bool {
    opts.iter().any(|a| a == "--help" || a == "-h")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn run_command_starts_at_first_non_option() {
        assert_eq!(split_run(v(&["ls", "-l", "/"])), (v(&[]), v(&["ls", "-l", "/"])));
        assert_eq!(
            split_run(v(&["-p", "dev", "-q", "ls", "--help"])),
            (v(&["-p", "dev", "-q"]), v(&["ls", "--help"]))
        );
        assert_eq!(
            split_run(v(&["--profile=dev", "--", "-x"])),
            (v(&["--profile=dev"]), v(&["-x"]))
        );
        assert_eq!(
            split_run(v(&["-w", "/a", "--quiet"])),
            (v(&["-w", "/a", "--quiet"]), v(&[]))
        );
        assert_eq!(split_run(v(&["--", "--"])), (v(&[]), v(&["--"])));
        assert_eq!(
            split_run(v(&["-e", "K", "--publish", "18000:8000", "python3"])),
            (v(&["-e", "K", "--publish", "18000:8000"]), v(&["python3"]))
        );
        assert!(wants_help(&split_run(v(&["-q", "--help"])).0));
        assert!(!wants_help(&split_run(v(&["ls", "--help"])).0));
    }

    #[test]
    fn every_command_has_usage() {
        for c in [
            "run",
            "ps",
            "stop",
            "exec",
            "rm",
            "image",
            "net",
            "state",
            "changes",
            "apply",
            "doctor",
            "version",
            "help",
            "escalations",
            "git",
        ] {
            assert!(of(c).unwrap().starts_with("usage: lazaret"), "{c}");
        }
        assert!(RUN.contains("--profile"));
    }
}
