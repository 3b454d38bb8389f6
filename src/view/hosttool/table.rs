//! The host-tool table: which workspace files the developer's host tools
//! execute or obey, by tool. One row per tool: its path patterns, where in
//! the workspace they count, when the tool acts on them, and how the view
//! treats them. This table is the single source: the view's shadowing
//! (`matcher`), `lazaret changes`/`state diff`, the docs (docs/config.md
//! lists every row, checked by a test) and the integration test
//! (tests/it/view/host_tools.rs) all read it.
//!
//! A pattern names a path relative to a directory: one or more components
//! separated by `/`, each a literal name or a name with one `*` (any run of
//! characters, e.g. `*.code-workspace`). A trailing `/` says the tool reads
//! a directory; the pattern covers the entry and everything below it either
//! way. A component matches a whole name only: `x.vscode` and
//! `.envrc.bak` are not `.vscode` and `.envrc`.

/// Where in the workspace a row's patterns count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// At the workspace root only (`.gitmodules`: Git reads it at the top
    /// of the work tree).
    Root,
    /// In any directory: the tool may be started, or a folder opened, in
    /// any directory, and tools that look in every ancestor of where they
    /// run (mise, cargo, direnv) are covered by this too, since they can
    /// run anywhere.
    Any,
}

/// When the tool acts on the files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// When an editor opens the folder or a file in it.
    Open,
    /// When a shell changes into the directory (direnv, mise hooks).
    Cd,
    /// On a Git operation (commit, checkout, submodule update).
    Git,
    /// When an agent is started in the directory.
    AgentStart,
    /// On a build, install or the tool's own start command.
    Build,
}

impl When {
    pub fn words(self) -> &'static str {
        match self {
            When::Open => "on open",
            When::Cd => "on `cd`",
            When::Git => "on a Git operation",
            When::AgentStart => "on agent start",
            When::Build => "on build",
        }
    }
}

/// How the view treats a row's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Treatment {
    /// Served Domain-side: the sandbox reads and changes its own copy (taken
    /// from the host at the first start); the host's file never changes
    /// until `lazaret apply`.
    DomainSide,
    /// Left to Git's execution surface (`view::hostexec`): the files and the
    /// programs they run are read-only inside, so host hooks keep running
    /// the developer's own files. Not shadowed by this table.
    HostExec,
}

#[derive(Debug)]
pub struct Row {
    pub tool: &'static str,
    pub patterns: &'static [&'static str],
    pub depth: Depth,
    pub when: &'static [When],
    pub treatment: Treatment,
}

use Depth::{Any, Root};
use Treatment::{DomainSide, HostExec};
use When::{AgentStart, Build, Cd, Git, Open};

/// The table. Keep `patterns` lower-case where the tool is (names are
/// matched exactly, as the host's case-sensitive filesystem does).
pub const TABLE: &[Row] = &[
    Row {
        tool: "VS Code and its forks",
        patterns: &[".vscode/", "*.code-workspace", ".devcontainer/", ".devcontainer.json"],
        depth: Any,
        when: &[Open],
        treatment: DomainSide,
    },
    Row {
        tool: "Cursor",
        patterns: &[".cursor/"],
        depth: Any,
        when: &[Open, AgentStart],
        treatment: DomainSide,
    },
    Row {
        tool: "Windsurf",
        patterns: &[".windsurf/"],
        depth: Any,
        when: &[Open, AgentStart],
        treatment: DomainSide,
    },
    Row {
        tool: "JetBrains IDEs",
        patterns: &[".idea/"],
        depth: Any,
        when: &[Open],
        treatment: DomainSide,
    },
    Row {
        tool: "Zed",
        patterns: &[".zed/"],
        depth: Any,
        when: &[Open],
        treatment: DomainSide,
    },
    Row {
        tool: "Helix",
        patterns: &[".helix/"],
        depth: Any,
        when: &[Open],
        treatment: DomainSide,
    },
    Row {
        tool: "Neovim and Vim",
        patterns: &[".nvim.lua", ".nvimrc", ".exrc"],
        depth: Any,
        when: &[Open],
        treatment: DomainSide,
    },
    Row {
        tool: "direnv",
        patterns: &[".envrc"],
        depth: Any,
        when: &[Cd],
        treatment: DomainSide,
    },
    Row {
        tool: "mise and asdf",
        patterns: &[
            "mise.toml",
            ".mise.toml",
            "mise.local.toml",
            ".mise.local.toml",
            "mise.*.toml",
            ".mise.*.toml",
            "mise/config.toml",
            ".mise/",
            ".config/mise.toml",
            ".config/mise/",
            ".tool-versions",
        ],
        depth: Any,
        when: &[Cd],
        treatment: DomainSide,
    },
    Row {
        tool: "Claude Code",
        patterns: &[".claude/", ".mcp.json"],
        depth: Any,
        when: &[AgentStart],
        treatment: DomainSide,
    },
    Row {
        tool: "Codex",
        patterns: &[".codex/"],
        depth: Any,
        when: &[AgentStart],
        treatment: DomainSide,
    },
    Row {
        tool: "Gemini CLI",
        patterns: &[".gemini/"],
        depth: Any,
        when: &[AgentStart],
        treatment: DomainSide,
    },
    Row {
        tool: "cargo and rust-analyzer",
        // rustup reads `rust-toolchain.toml` in every ancestor of where
        // cargo runs; its `path` names the toolchain whose `rustc` runs.
        patterns: &[
            ".cargo/config.toml",
            ".cargo/config",
            "rust-toolchain.toml",
            "rust-toolchain",
        ],
        depth: Any,
        when: &[Build, Open],
        treatment: DomainSide,
    },
    Row {
        tool: "npm, yarn and pnpm",
        patterns: &[".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ".pnpmfile.mjs"],
        depth: Any,
        when: &[Build],
        treatment: DomainSide,
    },
    Row {
        tool: "pre-commit",
        patterns: &[".pre-commit-config.yaml"],
        depth: Any,
        when: &[Git],
        treatment: DomainSide,
    },
    Row {
        tool: "lefthook",
        patterns: &[
            "lefthook.yml",
            "lefthook.yaml",
            "lefthook.toml",
            "lefthook.json",
            ".lefthook.yml",
            ".lefthook.yaml",
            ".lefthook.toml",
            ".lefthook.json",
            "lefthook-local.yml",
            "lefthook-local.yaml",
            "lefthook-local.toml",
            "lefthook-local.json",
            ".lefthook-local.yml",
            ".lefthook-local.yaml",
            ".lefthook-local.toml",
            ".lefthook-local.json",
            ".lefthook/",
            ".lefthook-local/",
        ],
        depth: Any,
        when: &[Git],
        treatment: DomainSide,
    },
    Row {
        tool: "husky",
        patterns: &[".husky/"],
        depth: Root,
        when: &[Git],
        treatment: HostExec,
    },
    Row {
        tool: "DDEV",
        patterns: &[".ddev/"],
        depth: Any,
        when: &[Build],
        treatment: DomainSide,
    },
    Row {
        // bazelisk runs the workspace's `tools/bazel` in place of Bazel and
        // fetches the Bazel `.bazelversion` names (a fork's release too);
        // `.bazelrc` can name a `--workspace_status_command` to run and
        // imports `user.bazelrc` by convention (other imports it names are
        // project code, not covered).
        tool: "Bazel and bazelisk",
        patterns: &[".bazelrc", "user.bazelrc", ".bazelversion", "tools/bazel"],
        depth: Any,
        when: &[Build],
        treatment: DomainSide,
    },
    Row {
        tool: "Git submodules",
        patterns: &[".gitmodules"],
        depth: Root,
        when: &[Git],
        treatment: DomainSide,
    },
];
