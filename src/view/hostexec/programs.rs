//! What hooks and configured programs lead to: the hooks of a hooks
//! directory, the files a command line or hook script names, and the hook
//! managers a hook runs.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::paths::{expand, read_small, symlink_hops};
use super::{Manager, Surface};
use crate::view::sentry::normalize;

/// Hook names Git runs (`githooks(5)`).
const HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];
/// Interpreters whose first argument is a script (`sh tools/x.sh`).
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "python", "python3", "perl", "ruby", "node", "deno", "bun", "php",
    "lua", "tclsh", "pwsh", "npx", "env", "exec", "source", ".",
];

/// Protects a program and what it leads to: symlink hops, and for a hook
/// script, the files and hook managers it names.
pub(super) fn protect_program(s: &mut Surface, p: &Path, wt: &Path) {
    s.protect.insert(p.to_path_buf());
    s.input(p);
    for hop in symlink_hops(p) {
        s.input(&hop);
        s.protect.insert(hop);
    }
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let Some(text) = read_small(&real) else { return };
    if text.len() > 64 * 1024 || text.contains(&0) {
        return;
    }
    let text = String::from_utf8_lossy(&text);
    // Hook managers the script runs, and their configuration.
    let lower = text.to_ascii_lowercase();
    let managers: &[(&'static str, &str, &[&str])] = &[
        (
            "pre-commit",
            "pre-commit.com",
            &[".pre-commit-config.yaml", ".pre-commit-config.yml"],
        ),
        (
            "pre-commit",
            "pre_commit",
            &[".pre-commit-config.yaml", ".pre-commit-config.yml"],
        ),
        (
            "lefthook",
            "lefthook",
            &[
                "lefthook.yml",
                ".lefthook.yml",
                "lefthook.yaml",
                ".lefthook.yaml",
                "lefthook.toml",
                ".lefthook.toml",
                "lefthook.json",
                ".lefthook.json",
                "lefthook-local.yml",
                ".lefthook-local.yml",
                "lefthook-local.yaml",
                ".lefthook-local.yaml",
                ".lefthook",
                ".lefthook-local",
                ".config/lefthook.yml",
                ".config/lefthook.yaml",
            ],
        ),
        ("overcommit", "overcommit", &[".overcommit.yml", ".git-hooks"]),
        ("husky", "husky", &[".husky"]),
        (
            "simple-git-hooks",
            "simple-git-hooks",
            &[".simple-git-hooks.json", ".simple-git-hooks.js"],
        ),
    ];
    for (name, mark, files) in managers {
        if lower.contains(mark) {
            let protects: Vec<PathBuf> = files.iter().map(|f| wt.join(f)).collect();
            s.protect.extend(protects.iter().cloned());
            if !s.managers.iter().any(|m| m.name == *name) {
                s.managers.push(Manager { name, protects });
            }
        }
    }
    // Relative paths the script names (hooks run at the worktree's top).
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with('#') {
            continue;
        }
        for p in command_paths(line, wt, None) {
            // Directories a hook merely mentions (`cargo fmt -- src/`) stay
            // writable; hook managers' directories are named above.
            if p.starts_with(wt) && p != *wt && !p.is_dir() {
                s.protect.insert(p);
            }
        }
    }
}

pub(super) fn hooks_surface(s: &mut Surface, root: &Path, dir: &Path, wt: &Path) {
    s.input(dir);
    s.protect.insert(dir.to_path_buf());
    let mut dirs = vec![dir.to_path_buf()];
    for hop in symlink_hops(dir) {
        s.input(&hop);
        s.protect.insert(hop.clone());
        dirs.push(hop);
    }
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    s.input(&real);
    dirs.push(real.clone());
    // A hooks directory named `_` is husky's: the hooks it holds run the
    // scripts of the directory above (`.husky/pre-commit`).
    for d in &dirs {
        if d.file_name().is_some_and(|n| n == "_") {
            if let Some(parent) = d.parent() {
                if parent != root {
                    s.protect.insert(parent.to_path_buf());
                    if !s.managers.iter().any(|m| m.name == "husky") {
                        s.managers.push(Manager {
                            name: "husky",
                            protects: vec![parent.to_path_buf()],
                        });
                    }
                }
            }
        }
    }
    // The workspace root as a hooks directory: its hook names only.
    if real == root {
        for h in HOOK_NAMES {
            s.protect.insert(root.join(h));
        }
    }
    let names: Vec<std::ffi::OsString> = std::fs::read_dir(&real)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    for n in names {
        let hook = real.join(&n);
        let known = HOOK_NAMES.iter().any(|h| n.as_bytes() == h.as_bytes());
        // `*.sample` and other names Git never runs need no scan: below a
        // workspace hooks directory they are protected with it.
        if known {
            protect_program(s, &hook, wt);
        }
    }
}

/// Files a command line names: a first word with a `/`, every argument
/// with a `/`, and the script argument of an interpreter. Relative to `base` (Git runs these at the
/// worktree's top level).
pub(super) fn command_paths(cmd: &str, base: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for words in simple_commands(cmd) {
        let mut first = true;
        let mut after_interp = false;
        for w in words {
            let w = match w.split_once('=') {
                Some((k, v)) if k.starts_with('-') || (first && !k.contains('/')) => {
                    if first {
                        // `VAR=value prog`: still the first word next.
                        if !v.is_empty() && (v.contains('/')) {
                            out.push(expand(v, home, base));
                        }
                        continue;
                    }
                    v.to_string()
                }
                _ => w,
            };
            if w.is_empty() || w.contains(['$', '%', '*', '?', '`']) || w.starts_with('-') {
                first = false;
                continue;
            }
            let has_slash = w.contains('/');
            let p = if Path::new(&w).is_absolute() {
                normalize(Path::new(&w))
            } else {
                expand(&w, home, base)
            };
            // A first word without a `/` is found through PATH, not here.
            if has_slash || after_interp {
                out.push(p);
            }
            let base_name = w.rsplit('/').next().unwrap_or(&w);
            after_interp = first && INTERPRETERS.contains(&base_name);
            first = false;
            if w.contains(char::is_whitespace) {
                // `sh -c 'tools/x.sh --fix'`: the string is a command too.
                out.extend(command_paths(&w, base, home));
            }
        }
    }
    out
}

/// Splits a shell command line into simple commands' words (quotes
/// removed; operators separate commands). An approximation of the shell:
/// it errs towards seeing more words.
fn simple_commands(cmd: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = cmd.chars().peekable();
    let mut has = false;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                has = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    has = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if has || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            (None, ';' | '|' | '&' | '(' | ')' | '{' | '}' | '<' | '>' | '\n') => {
                if has || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                    has = false;
                }
                if !words.is_empty() {
                    out.push(std::mem::take(&mut words));
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if has || !cur.is_empty() {
        words.push(cur);
    }
    if !words.is_empty() {
        out.push(words);
    }
    // Redirection targets and function bodies are words too; keywords are
    // not programs.
    for w in out.iter_mut() {
        while w
            .first()
            .is_some_and(|f| matches!(f.as_str(), "then" | "do" | "else" | "if" | "while" | "!" | "time"))
        {
            w.remove(0);
        }
    }
    out.retain(|w| !w.is_empty());
    out
}
