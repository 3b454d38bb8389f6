//! Escalation: the request the sandbox puts into the mailbox and the
//! outcome the Host Coordinator writes back (their records are frames of
//! the common codec, `crate::wire::mailbox`), plus auto-approval rule
//! matching and the quoting used in prompts. Pure and std-only: the
//! `lazaret-escalate` binary links it (`lazaret::escalation`).

/// Largest request record accepted from the sandbox.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Most bytes the mailbox's `requests/` holds (256 full-size records):
/// the supervisor mounts it as a tmpfs of this size, and the broker keeps
/// it below this by deleting what is over the record limit or the cap.
pub const REQUESTS_MAX_BYTES: u64 = 256 * MAX_REQUEST_BYTES as u64;
/// Largest result record the client accepts.
pub const MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;
pub const MAX_ARGS: usize = 256;
/// Host command output kept per stream; the rest is dropped and reported.
pub const OUTPUT_MAX_BYTES: usize = 1024 * 1024;
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// Exit codes of `lazaret-escalate` when the host command did not complete.
pub const EXIT_TIMED_OUT: i32 = 124;
pub const EXIT_FAILED: i32 = 125;
pub const EXIT_DENIED: i32 = 126;
pub const EXIT_CANCELLED: i32 = 130;
pub const EXIT_EXPIRED: i32 = 123;

/// Default and largest `[escalation] prompt_timeout_s`: how long an
/// accepted request may wait for the developer's decision.
pub const DEFAULT_PROMPT_TIMEOUT_SECS: u64 = 300;
pub const MAX_PROMPT_TIMEOUT_SECS: u64 = 86_400;
/// Environment variable telling the client how long a decision may take.
pub const PROMPT_TIMEOUT_ENV: &str = "LAZARET_ESCALATION_PROMPT_TIMEOUT";

/// Guest paths of the mailbox.
pub const GUEST_REQUESTS: &str = "/.lazaret/mailbox/requests";
pub const GUEST_RESULTS: &str = "/.lazaret/mailbox/results";
/// On the default PATH, which login shells reset.
pub const GUEST_ESCALATE: &str = "/usr/local/bin/lazaret-escalate";
/// Environment variable naming the file that holds the session's signing
/// credential (the path is no secret; the file is readable by the
/// session's uid only when that is root, see docs/threat-model.md).
pub const CREDENTIAL_FILE_ENV: &str = "LAZARET_ESCALATION_CREDENTIAL_FILE";
/// Guest directory of the sessions' credential files (read-only, not
/// listable by other uids).
pub const GUEST_KEYS: &str = "/.lazaret/keys";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: String,
    pub domain: String,
    pub generation: u64,
    pub session: String,
    pub client: String,
    /// Working directory relative to the workspace ("" = its top).
    pub cwd: String,
    pub timeout_secs: u64,
    pub justification: String,
    pub argv: Vec<String>,
    /// DER of the session certificate that signed the request.
    pub cert: Vec<u8>,
}

/// One SSH agent message from a session's agent socket (issue 51): the
/// same identity tuple and certificate as a [`Request`], the agent
/// connection it came on, and the message body (type byte and contents,
/// without the agent protocol's length).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRequest {
    pub id: String,
    pub domain: String,
    pub generation: u64,
    pub session: String,
    pub client: String,
    /// The agent connection inside (16 hex, random per connection): the
    /// host keeps each connection's session bindings apart.
    pub conn: String,
    pub body: Vec<u8>,
    /// DER of the session certificate that signed the request.
    pub cert: Vec<u8>,
}

/// Largest agent message body a record carries: twice what the host's
/// parser accepts (`sshagent::proto::MAX_REQUEST`), so an oversized message
/// reaches it and is refused there, and the record stays far under
/// [`MAX_REQUEST_BYTES`].
pub const MAX_AGENT_BODY: usize = 32 * 1024;
/// Largest agent answer a result carries (`sshagent::proto::MAX_ANSWER`).
pub const MAX_AGENT_ANSWER: usize = 256 * 1024;
/// The variable naming the session's agent socket, in the sessions of a
/// profile with `[ssh_agent]`.
pub const AGENT_SOCK_ENV: &str = "SSH_AUTH_SOCK";
/// Where a session's agent socket is: `/tmp/lazaret-ssh-SESSION/agent`.
pub fn guest_agent_socket(session: &str) -> String {
    format!("/tmp/lazaret-ssh-{session}/agent")
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Completed(i32),
    Denied,
    TimedOut,
    Cancelled,
    Failed,
    /// Nobody decided within `prompt_timeout_s`; nothing ran.
    Expired,
}

impl Status {
    pub fn name(&self) -> &'static str {
        match self {
            Status::Completed(_) => "completed",
            Status::Denied => "denied",
            Status::TimedOut => "timed-out",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
            Status::Expired => "expired",
        }
    }
    /// What `lazaret-escalate` exits with.
    pub fn exit_code(&self) -> i32 {
        match self {
            Status::Completed(c) => *c,
            Status::Denied => EXIT_DENIED,
            Status::TimedOut => EXIT_TIMED_OUT,
            Status::Cancelled => EXIT_CANCELLED,
            Status::Failed => EXIT_FAILED,
            Status::Expired => EXIT_EXPIRED,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub id: String,
    pub status: Status,
    /// The argv that ran (after an edit), or was asked for.
    pub argv: Vec<String>,
    pub reason: String,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// One class of programs no auto-approval rule may name, and why.
pub struct RunnerClass {
    /// What the programs are ("a package manager or task runner").
    pub class: &'static str,
    /// Why a rule for one of them could run the sandbox's code.
    pub why: &'static str,
    /// Base names, lower case, without a version suffix.
    pub programs: &'static [&'static str],
}

/// The closed list of programs that run a command string or, by
/// convention, files of the workspace (the sandbox's files): never
/// auto-approved, whatever their arguments. A program is matched by its base
/// name (also given as a path), lower-cased, as written, without a version
/// suffix (`python3.12`, `node18`, `pip-3`), by the last `-` part of
/// that (`x86_64-linux-gnu-gcc`), and, for the classes whose plugins are
/// `PROGRAM-NAME` programs, by the first (`cargo-nextest`, `npm-run-all`). docs/escalation.md lists this table
/// ([`runner_table_markdown`], checked by a test).
pub const RUNNER_CLASSES: &[RunnerClass] = &[
    RunnerClass {
        class: "shell",
        why: "it runs any command string or script it is given",
        programs: &[
            "sh",
            "bash",
            "dash",
            "zsh",
            "ksh",
            "mksh",
            "pdksh",
            "yash",
            "fish",
            "csh",
            "tcsh",
            "ash",
            "rbash",
            "busybox",
            "toybox",
            "pwsh",
            "powershell",
            "nu",
            "xonsh",
            "elvish",
        ],
    },
    RunnerClass {
        class: "interpreter",
        why: "it runs the script, module or program text it is named, a file the sandbox can write",
        programs: &[
            "python",
            "pypy",
            "ipython",
            "jupyter",
            "perl",
            "ruby",
            "irb",
            "node",
            "nodejs",
            "deno",
            "bun",
            "ts-node",
            "tsx",
            "php",
            "lua",
            "luajit",
            "tclsh",
            "wish",
            "awk",
            "gawk",
            "mawk",
            "nawk",
            "sed",
            "java",
            "jshell",
            "rscript",
            "r",
            "julia",
            "guile",
            "racket",
            "runghc",
            "runhaskell",
            "elixir",
            "erl",
            "escript",
            "scala",
            "kotlin",
            "groovy",
            "clojure",
            "clj",
            "bb",
            "osascript",
            "expect",
            "gnuplot",
            "octave",
        ],
    },
    RunnerClass {
        class: "package manager or task runner",
        why: "it runs the scripts the workspace's manifest or task file names (package.json, pyproject.toml, \
              Gemfile, Rakefile, composer.json, Taskfile, tasks.py, …)",
        programs: &[
            "npm", "npx", "yarn", "pnpm", "pnpx", "bunx", "corepack", "pip", "pipx", "uv", "uvx", "poetry", "pdm",
            "hatch", "pipenv", "conda", "mamba", "tox", "nox", "invoke", "bundle", "bundler", "gem", "rake",
            "composer", "task", "lein", "mix", "rebar3", "cabal", "stack", "dub", "nimble", "rye", "mage", "nx",
            "turbo", "lerna", "rush", "moon",
        ],
    },
    RunnerClass {
        class: "build tool",
        why: "it runs the workspace's build files (Makefile, justfile, build.rs, go:generate, build.gradle, \
              pom.xml, CMakeLists.txt, …) and the code they name",
        programs: &[
            "make",
            "gmake",
            "bmake",
            "just",
            "ninja",
            "cmake",
            "meson",
            "scons",
            "waf",
            "bazel",
            "bazelisk",
            "buck",
            "buck2",
            "pants",
            "cargo",
            "go",
            "mvn",
            "mvnw",
            "gradle",
            "gradlew",
            "ant",
            "sbt",
            "earthly",
            "dotnet",
            "msbuild",
            "xcodebuild",
            "swift",
            "zig",
        ],
    },
    RunnerClass {
        class: "compiler",
        why: "it compiles the sandbox's source, which can read any host file (include!, #include) or run code \
              while it builds (proc macros, annotation processors)",
        programs: &[
            "rustc", "gcc", "cc", "c++", "g++", "clang", "clang++", "javac", "kotlinc", "scalac", "tsc", "ghc",
        ],
    },
    RunnerClass {
        class: "test runner",
        why: "it runs the workspace's tests and the configuration that loads them",
        programs: &[
            "pytest", "py.test", "jest", "vitest", "mocha", "ava", "rspec", "phpunit", "ctest",
        ],
    },
    RunnerClass {
        class: "tool whose configuration is code",
        why: "it loads the workspace's configuration, which is a program or names plugins it runs \
              (eslint.config.js, .rubocop.yml require, conf.py, Vagrantfile, .tf external data)",
        programs: &[
            "eslint",
            "prettier",
            "stylelint",
            "webpack",
            "vite",
            "rollup",
            "babel",
            "next",
            "nuxt",
            "rubocop",
            "mypy",
            "pylint",
            "sphinx-build",
            "mkdocs",
            "terraform",
            "tofu",
            "pulumi",
            "ansible-playbook",
            "vagrant",
        ],
    },
    RunnerClass {
        class: "hook or environment runner",
        why: "it runs the hooks or environment scripts the workspace configures (.pre-commit-config.yaml, \
              .envrc, mise.toml, flake.nix, …)",
        programs: &[
            "pre-commit",
            "prek",
            "overcommit",
            "commitlint",
            "lint-staged",
            "husky",
            "lefthook",
            "direnv",
            "mise",
            "asdf",
            "rtx",
            "nix",
            "nix-shell",
            "nix-build",
            "devbox",
            "devenv",
            "rustup",
            "pyenv",
            "rbenv",
            "nodenv",
            "goenv",
            "jenv",
            "volta",
            "fnm",
            "nvm",
            "proto",
        ],
    },
    RunnerClass {
        class: "container tool",
        why: "it builds or starts what the workspace's Dockerfile or compose file describes, with the host \
              mounts that file names",
        programs: &[
            "docker",
            "docker-compose",
            "podman",
            "podman-compose",
            "nerdctl",
            "buildah",
        ],
    },
    RunnerClass {
        class: "editor or agent",
        why: "it opens the workspace and runs what its settings name (tasks, modelines, .exrc, hooks, MCP servers)",
        programs: &[
            "vi", "vim", "nvim", "ex", "emacs", "code", "codium", "cursor", "zed", "claude", "codex", "aider", "gemini",
        ],
    },
    RunnerClass {
        class: "command wrapper",
        why: "it runs another program named in its arguments or opens a file with whatever program the host \
              associates with it",
        programs: &[
            "env",
            "xargs",
            "nohup",
            "timeout",
            "nice",
            "ionice",
            "setsid",
            "stdbuf",
            "time",
            "sudo",
            "doas",
            "su",
            "runuser",
            "chroot",
            "unshare",
            "nsenter",
            "flock",
            "watch",
            "script",
            "ssh",
            "eval",
            "exec",
            "command",
            "builtin",
            "find",
            "strace",
            "ltrace",
            "gdb",
            "valgrind",
            "taskset",
            "chrt",
            "prlimit",
            "systemd-run",
            "firejail",
            "bwrap",
            "parallel",
            "entr",
            "watchexec",
            "nodemon",
            "run-parts",
            "xdg-open",
            "open",
            "gio",
            "setpriv",
            "tmux",
            "screen",
            "at",
            "batch",
            "dbus-run-session",
            "xvfb-run",
            "fakeroot",
            "faketime",
            "proot",
            "sg",
        ],
    },
];

/// Classes whose programs take plugins named `PROGRAM-NAME` that they run
/// (`cargo-nextest`, `npm-run-all`, `python3-coverage`): such a name is
/// theirs too.
const PLUGIN_CLASSES: &[&str] = &[
    "interpreter",
    "package manager or task runner",
    "build tool",
    "test runner",
];

/// `Some((name, class))` when `program` (a name or a path) is on
/// [`RUNNER_CLASSES`]: `name` is the listed name it matched.
pub fn command_runner(program: &str) -> Option<(&'static str, &'static RunnerClass)> {
    let base = program.rsplit('/').next().unwrap_or(program).to_ascii_lowercase();
    let stem = base.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    let last = stem.rsplit('-').next().unwrap_or(stem);
    let first = stem.split('-').next().unwrap_or(stem);
    let first = first.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    RUNNER_CLASSES.iter().find_map(|c| {
        let plugin = PLUGIN_CLASSES.contains(&c.class);
        c.programs
            .iter()
            .copied()
            .find(|p| *p == base || *p == stem || *p == last || (plugin && *p == first))
            .map(|p| (p, c))
    })
}

/// The list docs/escalation.md carries, one line per class.
pub fn runner_table_markdown() -> String {
    RUNNER_CLASSES
        .iter()
        .map(|c| {
            let progs = c
                .programs
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("- **{}** ({}): {progs}\n", c.class, c.why)
        })
        .collect()
}

/// Why a rule's program is refused when the config is loaded: a listed
/// runner, or a relative path (a file of the workspace, the sandbox's).
pub fn refused_program(program: &str) -> Option<String> {
    if let Some((name, c)) = command_runner(program) {
        let article = if c.class.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        return Some(format!(
            "{} is {article} {} ({name}): {}; approve such commands each time",
            quote_argv(&[program.to_string()]),
            c.class,
            c.why
        ));
    }
    if program.contains('/') && !program.starts_with('/') {
        return Some(format!(
            "{} is a path relative to the working directory, a file of the workspace that the sandbox can \
             write; name a program outside the workspace",
            quote_argv(&[program.to_string()])
        ));
    }
    None
}

/// Configuration given to host Git on its command line, ahead of the
/// repository's own: implicit bare repositories (a shape the sandbox can
/// create in the workspace) are refused, no fsmonitor command runs, no hook
/// runs, no pager runs, `core.sshCommand` is plain `ssh`, the `ext::`
/// transport is off.
pub const GIT_HARDENING: &[&str] = &[
    "--no-pager",
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.pager=cat",
    "-c",
    "core.sshCommand=ssh",
    "-c",
    "protocol.ext.allow=never",
];

/// A configuration key `(section, subsection, name)` (lowercase section and
/// name) that some scope or include of the repository sets.
pub type GitKey = (String, Option<String>, String);

/// The value that neutralizes `key` on host Git's command line, for the keys
/// that make Git run a program: filters become `cat` (identity) and lose
/// `process`, textconv becomes `cat`, external diff and diff drivers become
/// empty (Git then refuses to diff through them, running nothing), merge
/// drivers `false`, `!` aliases empty. None for keys left alone.
fn neutral(key: &GitKey) -> Option<&'static str> {
    let (sec, sub, name) = (key.0.as_str(), key.1.is_some(), key.2.as_str());
    // Signing programs (`git log --format=%G?` verifies through them) are
    // the host's own; editors fail; credential helpers are reset.
    match (sec, key.1.as_deref(), name) {
        ("gpg", None | Some("openpgp"), "program") => return Some("gpg"),
        ("gpg", Some("x509"), "program") => return Some("gpgsm"),
        ("gpg", Some("ssh"), "program") => return Some("ssh-keygen"),
        ("gpg", Some(_), "program") => return Some("gpg"),
        ("core" | "sequence", None, "editor") => return Some("false"),
        ("credential", _, "helper") => return Some(""),
        ("mergetool" | "difftool", Some(_), "cmd") => return Some("false"),
        _ => {}
    }
    Some(match (sec, sub, name) {
        ("filter", true, "clean" | "smudge") => "cat",
        ("filter", true, "process") => "",
        ("filter", true, "required") => "false",
        ("diff", true, "textconv") => "cat",
        ("diff", true, "command") => "",
        ("diff", false, "external") => "",
        ("merge", true, "driver") => "false",
        ("alias", _, _) => "",
        ("core", false, "askpass" | "gitproxy") => "",
        ("remote", true, "uploadpack") => "git-upload-pack",
        ("remote", true, "receivepack") => "git-receive-pack",
        ("interactive", false, "difffilter") => "cat",
        _ => return None,
    })
}

/// The argv the broker runs: host Git gets [`GIT_HARDENING`] and, for every
/// key in `keys` (every scope and include of the repository, whether or not
/// the include applies today) that runs a program, a neutral value. A key
/// that cannot be written as `-c KEY=VALUE` (a subsection holding `=`)
/// makes Git refuse to start (`-c =`, "empty config key").
pub fn harden_git(argv: &[String], keys: &[GitKey]) -> Vec<String> {
    let base = argv[0].rsplit('/').next().unwrap_or(&argv[0]);
    if base != "git" {
        return argv.to_vec();
    }
    let mut v = vec![argv[0].clone()];
    v.extend(GIT_HARDENING.iter().map(|s| s.to_string()));
    let mut seen = std::collections::BTreeSet::new();
    for k in keys {
        let Some(val) = neutral(k) else { continue };
        let mut ks = vec![(k.0.clone(), k.1.clone(), k.2.clone())];
        if k.0 == "filter" && k.1.is_some() {
            ks.push((k.0.clone(), k.1.clone(), "required".into()));
        }
        for k in ks {
            let val = neutral(&k).unwrap_or(val);
            let name = match &k.1 {
                Some(s) if s.contains(['=', '\n', '\0']) => {
                    v.extend(["-c".to_string(), "=".to_string()]);
                    continue;
                }
                Some(s) => format!("{}.{s}.{}", k.0, k.2),
                None => format!("{}.{}", k.0, k.2),
            };
            if seen.insert(name.clone()) {
                v.push("-c".into());
                v.push(format!("{name}={val}"));
            }
        }
    }
    v.extend(argv[1..].iter().cloned());
    v
}

/// A decision typed at the prompt: a whole line that is exactly one of
/// the documented answers; anything else is `None` and the prompt asks
/// again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    Edit,
}

pub fn parse_answer(line: &str) -> Option<Answer> {
    match line.trim_matches(' ') {
        "y" | "yes" | "Y" | "YES" | "Yes" => Some(Answer::Yes),
        "n" | "no" | "N" | "NO" | "No" => Some(Answer::No),
        "e" | "edit" | "E" | "EDIT" | "Edit" => Some(Answer::Edit),
        _ => None,
    }
}

// ---- rules and display -------------------------------------------------------------

/// How an auto-approval rule treats a request's argv.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleMatch {
    /// Not this rule's command.
    No,
    /// Approved without asking.
    Yes,
    /// The rule's command with trailing arguments it does not grant.
    /// Refused, never prompted for.
    Refused(Refusal),
}

/// Why a rule does not grant a request's trailing arguments (or, for
/// `RuleSubcommand`, why the config refuses a Git rule). Shown as one
/// line, the sandbox's text escaped ([`quote_argv`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A rule for a Git subcommand that takes no trailing arguments.
    RuleSubcommand(String),
    /// The same, found at request time.
    Subcommand(String),
    /// A Git option before the request's subcommand.
    GlobalOption(String),
    /// A Git subcommand a plain `git` rule does not grant.
    NotGranted(String),
    /// A Git option off the closed lists.
    GitOption(String),
    /// A Git argument naming a path outside the repository, or `-`.
    GitPath(String),
    /// A trailing argument (1-based place) matching none of the patterns.
    Pattern(usize, String),
    /// Trailing arguments for a program other than Git, without patterns.
    NoPatterns,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = |a: &String| quote_argv(std::slice::from_ref(a));
        match self {
            Refusal::RuleSubcommand(sub) => write!(
                f,
                "git {} takes no trailing arguments in a rule (only {} do: they read the repository and nothing \
                 else); list each command in full instead",
                q(sub),
                GIT_TRAILING_SUBCOMMANDS.join(", ")
            ),
            Refusal::Subcommand(sub) => write!(f, "git {} takes no trailing arguments", q(sub)),
            Refusal::GlobalOption(a) => write!(
                f,
                "git option {} before the subcommand is refused (it can name a directory, a configuration or a \
                 program)",
                q(a)
            ),
            Refusal::NotGranted(a) => write!(
                f,
                "git {} is not granted by this rule (it grants only {})",
                q(a),
                GIT_TRAILING_SUBCOMMANDS.join(", ")
            ),
            Refusal::GitOption(a) => write!(
                f,
                "git option {} is refused: only options that neither read nor write a file outside the \
                 repository nor run a program are granted (docs/escalation.md lists them; an abbreviation \
                 counts as the option it abbreviates)",
                q(a)
            ),
            Refusal::GitPath(a) => write!(
                f,
                "git argument {} names a path outside the repository (or standard input); refused",
                q(a)
            ),
            Refusal::Pattern(n, a) => write!(
                f,
                "trailing argument {n} ({}) matches none of the rule's trailing_args patterns",
                q(a)
            ),
            Refusal::NoPatterns => f.write_str("the rule declares no trailing_args patterns"),
        }
    }
}

/// An auto-approval rule against a request's argv: the argv exactly, or
/// the rule's argv followed by trailing arguments when the rule grants
/// them (`allow_trailing`). Trailing arguments of host Git pass
/// [`git_trailing`]; every other program's (and Git's too, when the rule
/// declares any) must each match one of the rule's `patterns`
/// ([`pattern_matches`]); without patterns nothing trails a program other
/// than Git (the config refuses such a rule; this fails closed as well).
/// Never a shell.
pub fn rule_match(rule_argv: &[String], allow_trailing: bool, patterns: &[String], argv: &[String]) -> RuleMatch {
    if argv == rule_argv {
        return RuleMatch::Yes;
    }
    if !allow_trailing || argv.len() <= rule_argv.len() || argv[..rule_argv.len()] != *rule_argv {
        return RuleMatch::No;
    }
    let trailing = &argv[rule_argv.len()..];
    if is_git(&rule_argv[0]) {
        if let Err(why) = git_trailing(rule_argv, trailing) {
            return RuleMatch::Refused(why);
        }
    } else if patterns.is_empty() {
        return RuleMatch::Refused(Refusal::NoPatterns);
    }
    if !patterns.is_empty() {
        for (i, a) in trailing.iter().enumerate() {
            if !patterns.iter().any(|p| pattern_matches(p, a)) {
                return RuleMatch::Refused(Refusal::Pattern(i + 1, a.clone()));
            }
        }
    }
    RuleMatch::Yes
}

/// Whether `program` (a name or a path) is Git.
pub fn is_git(program: &str) -> bool {
    program.rsplit('/').next() == Some("git")
}

/// A `trailing_args` pattern against one argument: `*` matches any run of
/// characters and `?` any one character, except `/` and except a `.` that
/// begins the argument or follows a `/` (so no pattern's `*` reaches
/// another directory, `..` or a hidden file); every other character stands
/// for itself. The whole argument must match.
pub fn pattern_matches(pattern: &str, arg: &str) -> bool {
    fn wild_ok(arg: &[char], i: usize) -> bool {
        arg[i] != '/' && !(arg[i] == '.' && (i == 0 || arg[i - 1] == '/'))
    }
    let p: Vec<char> = pattern.chars().collect();
    let a: Vec<char> = arg.chars().collect();
    if a.len() > 4096 || p.len() > 4096 {
        return false;
    }
    // at[i]: the pattern read so far matches the first i characters.
    let mut at = vec![false; a.len() + 1];
    at[0] = true;
    for pc in p {
        let mut next = vec![false; a.len() + 1];
        for i in 0..=a.len() {
            next[i] = match pc {
                '*' => at[i] || (i > 0 && next[i - 1] && wild_ok(&a, i - 1)),
                '?' => i > 0 && at[i - 1] && wild_ok(&a, i - 1),
                c => i > 0 && at[i - 1] && a[i - 1] == c,
            };
        }
        at = next;
    }
    at[a.len()]
}

/// Git subcommands a rule may grant trailing arguments to: they inspect
/// the repository and, with the options of [`GIT_LONG_OPTIONS`] and
/// [`GIT_SHORT_OPTIONS`], neither read nor write a file outside it nor run
/// a program.
pub const GIT_TRAILING_SUBCOMMANDS: &[&str] = &[
    "status",
    "log",
    "show",
    "diff",
    "shortlog",
    "describe",
    "rev-parse",
    "rev-list",
    "ls-files",
    "ls-tree",
    "grep",
    "blame",
    "show-ref",
    "merge-base",
    "name-rev",
    "for-each-ref",
    "whatchanged",
    "diff-tree",
    "count-objects",
    "version",
];

/// The long options accepted in Git's trailing arguments, by exact name
/// (an `=VALUE` after it is allowed; none of them names a file or a
/// program). Git also accepts any unique prefix of a long option
/// (`--outp=FILE` is `--output=FILE`): an abbreviation is not an exact
/// name here, so it is refused, whatever it abbreviates.
pub const GIT_LONG_OPTIONS: &[&str] = &[
    "--oneline",
    "--graph",
    "--stat",
    "--shortstat",
    "--numstat",
    "--summary",
    "--name-only",
    "--name-status",
    "--patch",
    "--no-patch",
    "--raw",
    "--all",
    "--branches",
    "--tags",
    "--remotes",
    "--max-count",
    "--skip",
    "--since",
    "--until",
    "--after",
    "--before",
    "--author",
    "--committer",
    "--grep",
    "--invert-grep",
    "--all-match",
    "--regexp-ignore-case",
    "--decorate",
    "--no-decorate",
    "--abbrev-commit",
    "--no-abbrev-commit",
    "--abbrev",
    "--reverse",
    "--first-parent",
    "--merges",
    "--no-merges",
    "--date",
    "--relative-date",
    "--format",
    "--pretty",
    "--color",
    "--no-color",
    "--follow",
    "--full-history",
    "--simplify-by-decoration",
    "--left-right",
    "--cherry-pick",
    "--cherry-mark",
    "--boundary",
    "--topo-order",
    "--date-order",
    "--author-date-order",
    "--ancestry-path",
    "--parents",
    "--children",
    "--log-size",
    "--cached",
    "--staged",
    "--unified",
    "--word-diff",
    "--color-words",
    "--ignore-space-change",
    "--ignore-all-space",
    "--ignore-blank-lines",
    "--ignore-space-at-eol",
    "--diff-filter",
    "--find-renames",
    "--find-copies",
    "--no-renames",
    "--minimal",
    "--patience",
    "--histogram",
    "--function-context",
    "--exit-code",
    "--quiet",
    "--check",
    "--dirstat",
    "--no-ext-diff",
    "--no-textconv",
    "--src-prefix",
    "--dst-prefix",
    "--no-prefix",
    "--ignore-submodules",
    "--short",
    "--long",
    "--porcelain",
    "--branch",
    "--untracked-files",
    "--ignored",
    "--show-stash",
    "--ahead-behind",
    "--no-ahead-behind",
    "--verbose",
    "--null",
    "--exact-match",
    "--contains",
    "--always",
    "--dirty",
    "--match",
    "--exclude",
    "--candidates",
    "--first-match",
    "--show-toplevel",
    "--show-prefix",
    "--show-cdup",
    "--abbrev-ref",
    "--symbolic-full-name",
    "--verify",
    "--is-inside-work-tree",
    "--is-bare-repository",
    "--line-number",
    "--ignore-case",
    "--fixed-strings",
    "--extended-regexp",
    "--basic-regexp",
    "--word-regexp",
    "--invert-match",
    "--files-with-matches",
    "--files-without-match",
    "--count",
    "--heading",
    "--break",
    "--full-name",
    "--max-depth",
    "--others",
    "--exclude-standard",
    "--modified",
    "--deleted",
    "--stage",
    "--error-unmatch",
    "--directory",
    "--sort",
    "--points-at",
    "--merged",
    "--no-merged",
    "--full-tree",
    "--show-email",
    "--line-porcelain",
    "--numbered",
    "--email",
    "--max-parents",
    "--min-parents",
    "--no-walk",
    "--root",
    "--mailmap",
    "--use-mailmap",
    "--no-mailmap",
    "--no-column",
    "--text",
];

/// The short options accepted in Git's trailing arguments, as whole
/// arguments (no clusters, no attached values), besides `-NUMBER`. Not
/// `-c`, `-C`, `-o`, `-O`, `-x`, `-f`, `-F`, `-L`: somewhere they name a
/// configuration, a directory, a file or a program.
pub const GIT_SHORT_OPTIONS: &[&str] = &[
    "-p", "-u", "-s", "-v", "-q", "-n", "-w", "-b", "-i", "-l", "-r", "-e", "-E", "-z", "-t", "-M", "-a", "-d", "-W",
    "-h",
];

/// The subcommand of a Git argv (`argv[0]` is Git): the first word that
/// is not a global option or the value of one.
fn git_subcommand(argv: &[String]) -> Option<(usize, &str)> {
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        if !a.starts_with('-') {
            return Some((i, a));
        }
        // Global options that take their value as the next argument.
        if matches!(
            a,
            "-C" | "-c"
                | "--git-dir"
                | "--work-tree"
                | "--namespace"
                | "--exec-path"
                | "--super-prefix"
                | "--config-env"
                | "--list-cmds"
                | "--attr-source"
        ) {
            i += 1;
        }
        i += 1;
    }
    None
}

/// For the config: a Git rule that grants trailing arguments must name no
/// subcommand, or one of [`GIT_TRAILING_SUBCOMMANDS`].
pub fn git_rule_subcommand_ok(rule_argv: &[String]) -> Result<(), Refusal> {
    match git_subcommand(rule_argv) {
        Some((_, sub)) if !GIT_TRAILING_SUBCOMMANDS.contains(&sub) => Err(Refusal::RuleSubcommand(sub.to_string())),
        _ => Ok(()),
    }
}

/// Git's trailing arguments, checked against the closed lists above: the
/// subcommand (named by the rule, or else the first trailing argument)
/// is on [`GIT_TRAILING_SUBCOMMANDS`]; every option is on
/// [`GIT_LONG_OPTIONS`] (by its name before any `=`) or
/// [`GIT_SHORT_OPTIONS`], or is `-NUMBER`; every other argument (a
/// revision, a path, a value, anything after `--`) is neither absolute nor
/// has a `..` component, so no path names a file outside the repository
/// (`git diff A B` with a path outside the work tree is `--no-index`,
/// which reads any host file).
pub fn git_trailing(rule_argv: &[String], trailing: &[String]) -> Result<(), Refusal> {
    let mut rest = trailing;
    match git_subcommand(rule_argv) {
        Some((_, sub)) if !GIT_TRAILING_SUBCOMMANDS.contains(&sub) => {
            return Err(Refusal::Subcommand(sub.to_string()));
        }
        Some(_) => {}
        None => {
            let first = &trailing[0];
            if first.starts_with('-') {
                return Err(Refusal::GlobalOption(first.clone()));
            }
            if !GIT_TRAILING_SUBCOMMANDS.contains(&first.as_str()) {
                return Err(Refusal::NotGranted(first.clone()));
            }
            rest = &trailing[1..];
        }
    }
    let mut paths_only = false;
    for a in rest {
        if !paths_only && a == "--" {
            paths_only = true;
            continue;
        }
        if !paths_only && a.starts_with('-') && a.len() > 1 {
            let name = a.split('=').next().unwrap_or(a);
            let ok = if a.starts_with("--") {
                GIT_LONG_OPTIONS.contains(&name)
            } else {
                GIT_SHORT_OPTIONS.contains(&a.as_str()) || a[1..].bytes().all(|b| b.is_ascii_digit())
            };
            if !ok {
                return Err(Refusal::GitOption(a.clone()));
            }
            continue;
        }
        if a == "-" || a.starts_with('/') || a.split('/').any(|c| c == "..") {
            return Err(Refusal::GitPath(a.clone()));
        }
    }
    Ok(())
}

/// Makes sandbox-chosen text safe to print: every Cc and Cf character
/// (terminal escapes, bidi overrides, zero-width characters) and the
/// backslash become visible escapes (`\\x1b`, `\\u{202e}`, `\\\\`), so a
/// prompt can be neither repainted nor reordered by what it displays.
pub fn neutralize(s: &str) -> String {
    crate::display::escape(s)
}

/// Shell-quotes an argv for display, neutralising control characters.
pub fn quote_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let a = neutralize(a);
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits an edited command line into words: whitespace separates, single
/// quotes are literal, double quotes allow `\"` and `\\`, a backslash
/// escapes the next character. No expansion of any kind.
pub fn split_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => cur.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => cur.push(chars.next()?),
                        c => cur.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    // Covers SR-8.
    #[test]
    fn rules_match_exactly_unless_trailing_args_are_granted() {
        let rule = v(&["git", "--version"]);
        assert_eq!(rule_match(&rule, false, &[], &v(&["git", "--version"])), RuleMatch::Yes);
        assert_eq!(
            rule_match(&rule, false, &[], &v(&["git", "--version", "--foo"])),
            RuleMatch::No
        );
        assert_eq!(rule_match(&rule, false, &[], &v(&["git"])), RuleMatch::No);
        assert!(matches!(
            rule_match(&rule, true, &[], &v(&["git", "--version", "--foo"])),
            RuleMatch::Refused(_)
        ));
        assert_eq!(rule_match(&rule, true, &[], &v(&["git", "status"])), RuleMatch::No);
        let log = v(&["git", "log"]);
        assert_eq!(
            rule_match(&log, true, &[], &v(&["git", "log", "--oneline", "-5"])),
            RuleMatch::Yes
        );
        // Another program: only what the declared patterns match.
        let pats = v(&["--json", "title*", "1*"]);
        let gh = v(&["gh", "pr", "view"]);
        assert_eq!(
            rule_match(&gh, true, &pats, &v(&["gh", "pr", "view", "12", "--json", "title"])),
            RuleMatch::Yes
        );
        assert_eq!(
            rule_match(&gh, true, &pats, &v(&["gh", "pr", "view", "--web"])),
            RuleMatch::Refused(Refusal::Pattern(1, "--web".into()))
        );
        assert_eq!(
            rule_match(&v(&["touch"]), true, &[], &v(&["touch", "/home/u/.bashrc"])),
            RuleMatch::Refused(Refusal::NoPatterns)
        );
        // The escaped argument, on one line.
        let RuleMatch::Refused(why) = rule_match(&gh, true, &pats, &v(&["gh", "pr", "view", "a\nb\u{1b}"])) else {
            panic!()
        };
        let why = why.to_string();
        assert_eq!(
            Refusal::Pattern(1, "--web".into()).to_string(),
            "trailing argument 1 (--web) matches none of the rule's trailing_args patterns"
        );
        assert!(!why.contains('\n') && !why.contains('\u{1b}'), "{why}");
    }

    #[test]
    fn patterns_never_reach_another_directory_or_a_dot_file() {
        for (p, a, want) in [
            ("*", "abc", true),
            ("*", "", true),
            ("*", "a/b", false),
            ("*", "..", false),
            ("*", ".env", false),
            ("src/*", "src/main.rs", true),
            ("src/*", "src/..", false),
            ("src/*", "src/a/b", false),
            ("src/*.rs", "src/x.rs", true),
            ("src/*.rs", "src/x.rsx", false),
            ("--limit=*", "--limit=10", true),
            ("--limit=*", "--limit=/etc/passwd", false),
            ("?", "a", true),
            ("?", "ab", false),
            ("?", ".", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("-v", "-v", true),
            ("-v", "-vv", false),
        ] {
            assert_eq!(pattern_matches(p, a), want, "{p:?} {a:?}");
        }
        // Many stars on a long argument stay cheap.
        let t = std::time::Instant::now();
        assert!(!pattern_matches(&("*a".repeat(50) + "b"), &"a".repeat(4000)));
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn git_options_that_reach_host_files_or_run_programs_are_refused_in_every_form() {
        let under = |rule: &[&str], trailing: &[&str]| git_trailing(&v(rule), &v(trailing)).map_err(|e| e.to_string());
        for bad in [
            "--output=/home/u/marker",
            "--output",
            "--outp=/home/u/marker",
            "--out=/x",
            "--no-index",
            "--no-ind",
            "-c",
            "-C",
            "--git-dir=/x",
            "--git-d=/x",
            "--work-tree=/x",
            "--exec-path=/x",
            "--upload-pack=evil",
            "--receive-pack=evil",
            "--ext-diff",
            "--textconv",
            "--open-files-in-pager",
            "--open-files-in-pager=vim",
            "-O",
            "-Ovim",
            "--config-env=a=b",
            "--namespace=x",
            "--exec=x",
            "-x",
            "--template=/x",
            "--separate-git-dir=/x",
            "--output-directory=/x",
            "-o",
            "--contents=/home/u/secret",
            "--pathspec-from-file=/home/u/secret",
            "-f",
            "-F",
            "--show-signature",
            "--recurse-submodules",
            "-pn",
            "-U3",
        ] {
            let e = under(&["git", "log"], &[bad]).expect_err(bad);
            assert!(e.starts_with("git option ") && !e.contains('\n'), "{bad}: {e}");
        }
        for bad in [
            &["/home/u/secret", "/dev/null"][..],
            &["--", "../../x"],
            &["a/../../b"],
            &["-"],
        ] {
            let e = under(&["git", "diff"], bad).expect_err(&format!("{bad:?}"));
            assert!(e.contains("outside the repository"), "{e}");
        }
        // Git chosen by the request: only a listed subcommand, no global option.
        assert!(under(&["git"], &["log", "--oneline"]).is_ok());
        for bad in [
            &["-C", "/x", "log"][..],
            &["--no-pager", "log"],
            &["config", "--global", "x", "y"],
            &["bisect"],
        ] {
            assert!(under(&["git"], bad).is_err(), "{bad:?}");
        }
        assert!(under(&["git", "commit"], &["-m", "x"]).is_err());
        for ok in [
            &["--oneline", "-5", "--format=%h %s", "main..HEAD", "--", "src/x.rs"][..],
            &["--stat", "HEAD~3"],
            &["-p", "--no-ext-diff", "--", "-odd-name"],
        ] {
            assert_eq!(under(&["git", "log"], ok), Ok(()), "{ok:?}");
        }
        assert!(git_rule_subcommand_ok(&v(&["git", "log"])).is_ok());
        assert!(git_rule_subcommand_ok(&v(&["git"])).is_ok());
        assert!(git_rule_subcommand_ok(&v(&["git", "-C", "sub", "status"])).is_ok());
        assert!(git_rule_subcommand_ok(&v(&["git", "push"])).is_err());
        assert!(git_rule_subcommand_ok(&v(&["git", "-c", "x=y", "config"])).is_err());
    }

    #[test]
    fn runners_are_recognised_by_base_name_and_version_suffix() {
        for (p, name) in [
            ("sh", "sh"),
            ("/bin/bash", "bash"),
            ("python3", "python"),
            ("python3.12", "python"),
            ("/usr/bin/python3", "python"),
            ("node18", "node"),
            ("/usr/bin/npm", "npm"),
            ("npx", "npx"),
            ("make", "make"),
            ("gmake", "gmake"),
            ("cargo", "cargo"),
            ("go", "go"),
            ("pip3", "pip"),
            ("pre-commit", "pre-commit"),
            ("x86_64-linux-gnu-gcc-12", "gcc"),
            ("docker", "docker"),
            ("env", "env"),
            ("/usr/bin/env", "env"),
            ("Python3", "python"),
        ] {
            assert_eq!(command_runner(p).map(|r| r.0), Some(name), "{p}");
        }
        for p in [
            "git",
            "gh",
            "ls",
            "echo",
            "true",
            "shellcheck",
            "touch",
            "head",
            "sleep",
            "rg",
        ] {
            assert!(command_runner(p).is_none(), "{p}");
        }
        assert!(refused_program("./x.sh")
            .unwrap()
            .contains("relative to the working directory"));
        assert!(refused_program("scripts/x").is_some());
        assert!(refused_program("/usr/bin/gh").is_none());
        // One table: no program is listed twice.
        let mut all: Vec<&str> = RUNNER_CLASSES.iter().flat_map(|c| c.programs.iter().copied()).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "a program is listed twice");
    }

    #[test]
    fn docs_list_the_runner_table() {
        let docs = include_str!("../docs/escalation.md");
        let unwrapped = docs.replace("\n  ", " ");
        let table = runner_table_markdown();
        assert!(
            table.lines().all(|l| unwrapped.contains(l)),
            "docs/escalation.md must list the table, one line per class (wrapped lines indented by two):\n{table}"
        );
        for l in [GIT_TRAILING_SUBCOMMANDS, GIT_LONG_OPTIONS, GIT_SHORT_OPTIONS] {
            for o in l {
                assert!(docs.contains(&format!("`{o}`")), "docs/escalation.md lacks `{o}`");
            }
        }
    }

    #[test]
    fn git_is_hardened_and_nothing_else_is() {
        let g = harden_git(&v(&["git", "status"]), &[]);
        assert_eq!(g[0], "git");
        assert_eq!(g.last().unwrap(), "status");
        assert!(g.contains(&"safe.bareRepository=explicit".to_string()));
        assert!(g.contains(&"--no-pager".to_string()) && g.contains(&"core.pager=cat".to_string()));
        assert_eq!(harden_git(&v(&["ls", "-l"]), &[]), v(&["ls", "-l"]));
        let k = |a: &str, b: Option<&str>, c: &str| (a.to_string(), b.map(str::to_string), c.to_string());
        let g = harden_git(
            &v(&["git", "status"]),
            &[
                k("filter", Some("X.y"), "clean"),
                k("diff", None, "external"),
                k("merge", Some("m"), "driver"),
                k("user", None, "name"),
            ],
        );
        for want in [
            "filter.X.y.clean=cat",
            "filter.X.y.required=false",
            "diff.external=",
            "merge.m.driver=false",
        ] {
            assert!(g.contains(&want.to_string()), "{want} in {g:?}");
        }
        assert!(!g.iter().any(|a| a.starts_with("user.")));
        let g = harden_git(
            &v(&["git", "log"]),
            &[
                k("gpg", None, "program"),
                k("gpg", Some("ssh"), "program"),
                k("core", None, "editor"),
                k("credential", Some("https://h"), "helper"),
            ],
        );
        for want in [
            "gpg.program=gpg",
            "gpg.ssh.program=ssh-keygen",
            "core.editor=false",
            "credential.https://h.helper=",
        ] {
            assert!(g.contains(&want.to_string()), "{want} in {g:?}");
        }
        let g = harden_git(&v(&["git", "status"]), &[k("filter", Some("a=b"), "clean")]);
        assert!(g.windows(2).any(|w| w[0] == "-c" && w[1] == "="), "{g:?}");
    }

    #[test]
    fn only_whole_documented_answers_decide() {
        assert_eq!(parse_answer("y"), Some(Answer::Yes));
        assert_eq!(parse_answer("yes"), Some(Answer::Yes));
        assert_eq!(parse_answer("no"), Some(Answer::No));
        assert_eq!(parse_answer("edit"), Some(Answer::Edit));
        for l in ["a", "aaaa", "ye", "yess", "make tests pass", "e x", "", "approve"] {
            assert_eq!(parse_answer(l), None, "{l}");
        }
    }

    #[test]
    fn edited_lines_split_without_expansion() {
        assert_eq!(
            split_words(r#"git commit -m "a \"b\"" 'c d' e\ f $HOME"#).unwrap(),
            ["git", "commit", "-m", "a \"b\"", "c d", "e f", "$HOME"]
        );
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
        assert!(split_words("'open").is_none());
    }
}
