//! What hooks and configured programs lead to: the hooks of a hooks
//! directory, the files a command line or hook script runs, and the hook
//! managers a hook runs; and, where that cannot be decided, a [`Finding`].
//!
//! A hook or a configured command line is read as the shell would run it
//! (`shell::lex`), with what can be known substituted:
//! `$(git rev-parse --show-toplevel | --git-dir | --git-common-dir)` and
//! their backquoted forms, `GIT_DIR`, `GIT_WORK_TREE`, `GIT_COMMON_DIR`,
//! `HOME`, `$0`, `${NAME:-default}` (every alternative counts), variables
//! the script assigned from those, `dirname`/`basename`/`realpath`/`pwd`
//! of them; the current directory follows `cd`/`pushd`/`popd` (a subshell
//! restores it), and `PATH` entries the script adds. Relative paths resolve
//! against the current directory, which starts at the work tree's top (Git
//! runs hooks there). Programs named by a path, the script of `sh`/`bash`/
//! `.`/`source`, `python FILE`, `python -m pkg.mod`, `node FILE` are
//! protected whether they exist or not, and workspace shell scripts are
//! followed [`MAX_SCRIPT_DEPTH`] levels deep.
//!
//! What cannot be decided becomes a finding: an expansion the analysis
//! cannot resolve where a program or script is named, `eval`, inline
//! interpreter code, a package manager or build tool ([`PROJECT_RUNNERS`]),
//! a script nested deeper than the bound, a binary or oversized script in
//! the workspace.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::paths::symlink_hops;
use super::shell::{lex, Part, Tok, Word};
use super::{Finding, Manager, Surface};
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
/// How many levels of scripts a hook or configured program is followed
/// through: the hook is level 0, a script it runs level 1, …; a script at a
/// deeper level is protected but not read, and reported.
pub const MAX_SCRIPT_DEPTH: usize = 4;
/// The largest script read; a larger one is protected and reported.
const SCRIPT_MAX: usize = 64 * 1024;
/// Alternatives a word may evaluate to before it counts as unknown.
const MAX_ALTS: usize = 16;

/// Programs that run code the project defines (package scripts, build
/// files, test suites, configured hooks): what they run cannot be decided
/// from the command line.
pub const PROJECT_RUNNERS: &[&str] = &[
    "npm",
    "yarn",
    "pnpm",
    "npx",
    "pnpx",
    "bun",
    "bunx",
    "deno",
    "corepack",
    "make",
    "gmake",
    "bmake",
    "just",
    "cargo",
    "mvn",
    "mvnw",
    "gradle",
    "gradlew",
    "ant",
    "sbt",
    "lein",
    "mix",
    "rake",
    "bundle",
    "composer",
    "poetry",
    "pipenv",
    "uv",
    "uvx",
    "hatch",
    "pdm",
    "rye",
    "tox",
    "nox",
    "invoke",
    "task",
    "mage",
    "go",
    "dotnet",
    "bazel",
    "bazelisk",
    "buck",
    "buck2",
    "cmake",
    "ninja",
    "meson",
    "scons",
    "nx",
    "turbo",
    "lerna",
    "rush",
    "pre-commit",
    "prek",
    "lefthook",
    "lint-staged",
    "overcommit",
    "commitlint",
    "eslint",
    "prettier",
    "stylelint",
    "jest",
    "vitest",
    "mocha",
    "pytest",
    "mypy",
    "direnv",
    "mise",
    "asdf",
    "nix",
    "earthly",
];
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"];
/// Interpreters that take a script and run inline code with `-e`.
const OTHER_INTERPRETERS: &[&str] = &[
    "perl", "ruby", "php", "lua", "luajit", "tclsh", "wish", "pwsh", "Rscript",
];
/// Shell builtins and keywords: never looked up in `PATH`.
const BUILTINS: &[&str] = &[
    "[", "[[", "]]", "test", "echo", "printf", "exit", "return", "export", "local", "set", "unset", "shift", "read",
    "cd", "pushd", "popd", "true", "false", ":", ".", "source", "eval", "exec", "command", "type", "hash", "trap",
    "wait", "break", "continue", "readonly", "declare", "typeset", "alias", "let", "getopts", "umask", "builtin",
];
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "time", "esac", "in",
];
/// Node's built-in modules (a `require` of one loads nothing from disk).
const NODE_BUILTINS: &[&str] = &[
    "assert",
    "buffer",
    "child_process",
    "cluster",
    "console",
    "constants",
    "crypto",
    "dgram",
    "dns",
    "events",
    "fs",
    "fs/promises",
    "http",
    "http2",
    "https",
    "module",
    "net",
    "os",
    "path",
    "perf_hooks",
    "process",
    "punycode",
    "querystring",
    "readline",
    "repl",
    "stream",
    "string_decoder",
    "timers",
    "tls",
    "tty",
    "url",
    "util",
    "v8",
    "vm",
    "worker_threads",
    "zlib",
];

/// Where one repository's hooks and programs run.
pub(super) struct RepoCtx<'a> {
    /// The workspace root.
    pub root: &'a Path,
    /// The work tree's top: hooks and `!` commands start there.
    pub wt: &'a Path,
    pub git_dir: &'a Path,
    pub common: &'a Path,
    pub home: Option<&'a Path>,
}

/// What a shell knows while the analysis walks a script.
#[derive(Clone, Debug)]
struct St {
    /// The current directory (`None`: a `cd` the analysis could not follow).
    cwd: Option<PathBuf>,
    /// Variables assigned so far (`None`: to something unknown).
    vars: HashMap<String, Option<Vec<String>>>,
    /// `$0`.
    zero: Option<PathBuf>,
    /// `PATH` entries the script added, as written (relative ones resolve
    /// against the directory a program is looked up from).
    path_extra: Vec<String>,
    dirstack: Vec<Option<PathBuf>>,
    /// Aliases defined so far (`None`: to something unknown): `sh` (dash)
    /// expands them in scripts too.
    aliases: HashMap<String, Option<String>>,
    /// Functions defined so far, with the directory their body was read
    /// in (relative paths in it were resolved there).
    functions: HashMap<String, Option<PathBuf>>,
}

impl St {
    fn new(cwd: &Path) -> St {
        St {
            cwd: Some(cwd.to_path_buf()),
            vars: HashMap::new(),
            zero: None,
            path_extra: Vec::new(),
            dirstack: Vec::new(),
            aliases: HashMap::new(),
            functions: HashMap::new(),
        }
    }
}

/// One analysis of a hook or configured command line.
struct Ana<'a, 'b> {
    s: &'a mut Surface,
    cx: &'a RepoCtx<'b>,
    origin: String,
    visited: HashSet<PathBuf>,
    /// Every path protected, in order (for `command_paths`).
    found: Vec<PathBuf>,
}

fn within(p: &Path, dirs: &[&Path]) -> bool {
    dirs.iter().any(|d| p.starts_with(d))
}

fn dirname(v: &str) -> String {
    let t = v.trim_end_matches('/');
    if t.is_empty() {
        return "/".into();
    }
    match t.rfind('/') {
        Some(i) => {
            let d = t[..i].trim_end_matches('/');
            if d.is_empty() {
                "/".into()
            } else {
                d.to_string()
            }
        }
        None => ".".into(),
    }
}

fn basename(v: &str) -> String {
    let t = v.trim_end_matches('/');
    t.rsplit('/').next().unwrap_or(t).to_string()
}

/// The program name of a word (`/usr/bin/python3` → `python3`).
fn prog_name(v: &str) -> &str {
    v.rsplit('/').next().unwrap_or(v)
}

fn is_python(n: &str) -> bool {
    n.strip_prefix("python")
        .is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
        || n == "pypy"
        || n == "pypy3"
}

/// Cartesian concatenation of alternatives, bounded.
fn concat(acc: Vec<String>, alts: &[String]) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for a in &acc {
        for b in alts {
            out.push(format!("{a}{b}"));
            if out.len() > MAX_ALTS {
                return None;
            }
        }
    }
    Some(out)
}

impl Ana<'_, '_> {
    fn roots(&self) -> [&Path; 4] {
        [self.cx.root, self.cx.wt, self.cx.git_dir, self.cx.common]
    }

    fn protect(&mut self, p: PathBuf) {
        if !self.found.contains(&p) {
            self.found.push(p.clone());
        }
        self.s.protect.insert(p);
    }

    fn finding(&mut self, command: &str, file: Option<&Path>, reason: &str) {
        let f = Finding {
            origin: self.origin.clone(),
            command: command.trim().to_string(),
            file: file.map(Path::to_path_buf),
            reason: reason.to_string(),
        };
        if !self.s.findings.contains(&f) {
            self.s.findings.push(f);
        }
    }

    /// A value as a path: absolute, or relative to the current directory.
    fn path_of(&self, v: &str, st: &St) -> Option<PathBuf> {
        if Path::new(v).is_absolute() {
            Some(normalize(Path::new(v)))
        } else {
            st.cwd.as_ref().map(|c| normalize(&c.join(v)))
        }
    }

    fn var(&self, name: &str, st: &St) -> Option<Vec<String>> {
        if let Some(v) = st.vars.get(name) {
            return v.clone();
        }
        let s = |p: &Path| Some(vec![p.to_string_lossy().into_owned()]);
        match name {
            "GIT_DIR" => s(self.cx.git_dir),
            "GIT_WORK_TREE" => s(self.cx.wt),
            "GIT_COMMON_DIR" => s(self.cx.common),
            "HOME" => self.cx.home.and_then(s),
            "PWD" => st.cwd.as_deref().and_then(s),
            "0" => st.zero.as_deref().and_then(s),
            // Whatever PATH the developer has: its entries are host
            // directories; only what a script adds is tracked.
            "PATH" => Some(vec!["\u{0}PATH\u{0}".into()]),
            "XDG_CONFIG_HOME" => std::env::var_os("XDG_CONFIG_HOME")
                .filter(|v| !v.is_empty())
                .map(|v| vec![v.to_string_lossy().into_owned()])
                .or_else(|| {
                    self.cx
                        .home
                        .map(|h| vec![h.join(".config").to_string_lossy().into_owned()])
                }),
            _ => None,
        }
    }

    /// Every value a word may have, or `None` when it cannot be known.
    fn eval(&mut self, w: &Word, st: &St, depth: usize) -> Option<Vec<String>> {
        let mut acc = vec![String::new()];
        for p in &w.parts {
            let alts: Vec<String> = match p {
                Part::Lit(l) => vec![l.clone()],
                Part::Glob | Part::Unknown => return None,
                Part::Cmd(c) => self.subst(c, st, depth)?,
                Part::Var { name, default } => {
                    let mut alts = self.var(name, st).unwrap_or_default();
                    let known = self.var(name, st).is_some();
                    if let Some(d) = default {
                        let dw = lex(d);
                        let mut dv = vec![String::new()];
                        for t in &dw {
                            if let Tok::Word(w) = t {
                                dv = concat(dv, &self.eval(w, st, depth)?)?;
                            }
                        }
                        alts.extend(dv);
                    } else if !known {
                        return None;
                    }
                    alts.sort();
                    alts.dedup();
                    alts
                }
            };
            acc = concat(acc, &alts)?;
        }
        Some(acc)
    }

    /// The output of a command substitution, when it is one the analysis
    /// knows: `git rev-parse`'s directories, `pwd`, `dirname`, `basename`,
    /// `realpath`, `readlink -f`, `echo`, after `cd`s.
    fn subst(&mut self, inner: &str, st: &St, depth: usize) -> Option<Vec<String>> {
        if depth > MAX_SCRIPT_DEPTH + 4 {
            return None;
        }
        let mut st = st.clone();
        let mut out: Vec<String> = Vec::new();
        let mut cur: Vec<Word> = Vec::new();
        let toks = lex(inner);
        let mut cmds = Vec::new();
        for t in toks {
            match t {
                Tok::Word(w) => cur.push(w),
                Tok::Redirect(_) => {}
                Tok::Sep | Tok::Open | Tok::Close => cmds.push(std::mem::take(&mut cur)),
            }
        }
        cmds.push(cur);
        for words in cmds.into_iter().filter(|c| !c.is_empty()) {
            if words.iter().all(|w| w.assign.is_some()) {
                continue;
            }
            let name = words[0].lit()?;
            let mut args = Vec::new();
            for w in &words[1..] {
                if w.lit().as_deref() == Some("--") {
                    continue;
                }
                args.push(self.eval(w, &st, depth + 1)?);
            }
            let first = |args: &[Vec<String>]| -> Option<Vec<String>> {
                args.iter().find(|a| !a.iter().any(|v| v.starts_with('-'))).cloned()
            };
            let abs = |v: &str, st: &St| -> Option<String> {
                let p = if Path::new(v).is_absolute() {
                    normalize(Path::new(v))
                } else {
                    normalize(&st.cwd.as_ref()?.join(v))
                };
                Some(p.to_string_lossy().into_owned())
            };
            match name.as_str() {
                "git" => {
                    let flat: Vec<&str> = args.iter().filter_map(|a| a.first().map(String::as_str)).collect();
                    if flat.first() != Some(&"rev-parse") {
                        return None;
                    }
                    for f in &flat[1..] {
                        let p = match *f {
                            "--show-toplevel" => self.cx.wt,
                            "--git-dir" | "--absolute-git-dir" => self.cx.git_dir,
                            "--git-common-dir" => self.cx.common,
                            "--path-format=absolute" | "--path-format=relative" => continue,
                            _ => return None,
                        };
                        out.push(p.to_string_lossy().into_owned());
                    }
                }
                "pwd" => out.push(st.cwd.as_ref()?.to_string_lossy().into_owned()),
                "dirname" => out.extend(first(&args)?.iter().map(|v| dirname(v))),
                "basename" => out.extend(first(&args)?.iter().map(|v| basename(v))),
                "realpath" | "readlink" => {
                    for v in first(&args)? {
                        let a = abs(&v, &st)?;
                        // Resolved as they do, through symlinks (a hook
                        // linked from `scripts/hooks/`); each hop is
                        // protected so the resolution holds.
                        self.symlinks(Path::new(&a));
                        if let Some(r) = symlink_hops(Path::new(&a)).last() {
                            out.push(r.to_string_lossy().into_owned());
                        }
                        if let Ok(r) = std::fs::canonicalize(&a) {
                            out.push(r.to_string_lossy().into_owned());
                        }
                        out.push(a);
                    }
                }
                "echo" if args.len() == 1 => out.extend(args[0].iter().cloned()),
                "cd" | "pushd" => {
                    let t = first(&args)?;
                    if t.len() != 1 {
                        return None;
                    }
                    st.cwd = Some(PathBuf::from(abs(&t[0], &st)?));
                }
                _ => return None,
            }
        }
        out.sort();
        out.dedup();
        if out.is_empty() || out.len() > MAX_ALTS {
            return None;
        }
        Some(out)
    }

    /// Runs a script's text.
    fn run_text(&mut self, text: &str, st: &mut St, file: Option<&Path>, depth: usize) {
        let toks = lex(text);
        let mut stack: Vec<St> = Vec::new();
        // For each open `case`, the subshell depth at its start: a `)`
        // with no `(` opened since ends a pattern, not a subshell.
        let mut cases: Vec<usize> = Vec::new();
        let mut cur: Vec<Word> = Vec::new();
        let flush = |a: &mut Self, cur: &mut Vec<Word>, st: &mut St, cases: &mut Vec<usize>, depth_now: usize| {
            if !cur.is_empty() {
                let words = std::mem::take(cur);
                let first = words
                    .iter()
                    .find_map(|w| w.lit().filter(|l| l == "esac" || !KEYWORDS.contains(&l.as_str())));
                match first.as_deref() {
                    Some("case") => cases.push(depth_now),
                    Some("esac") => {
                        cases.pop();
                    }
                    _ => {}
                }
                for w in &words {
                    a.substitutions(w, st, file, depth);
                }
                a.exec(&words, text, st, file, depth);
            }
        };
        let mut toks = toks.into_iter().peekable();
        while let Some(t) = toks.next() {
            match t {
                Tok::Word(w) => cur.push(w),
                Tok::Redirect(w) => {
                    self.substitutions(&w, st, file, depth);
                    self.redirect(&w, st, depth)
                }
                Tok::Sep => flush(self, &mut cur, st, &mut cases, stack.len()),
                // `name() …`: a function definition; its body follows and
                // is read where it stands.
                Tok::Open if cur.len() == 1 && toks.peek() == Some(&Tok::Close) && cur[0].lit().is_some() => {
                    toks.next();
                    let name = cur.pop().and_then(|w| w.lit()).unwrap_or_default();
                    st.functions.insert(name, st.cwd.clone());
                }
                Tok::Open => {
                    flush(self, &mut cur, st, &mut cases, stack.len());
                    stack.push(st.clone());
                }
                Tok::Close => {
                    flush(self, &mut cur, st, &mut cases, stack.len());
                    if cases.last().is_some_and(|&d| stack.len() <= d) {
                        // `pattern)`.
                        continue;
                    }
                    // A subshell's `cd` and variables end with it.
                    if let Some(saved) = stack.pop() {
                        *st = saved;
                    }
                }
            }
        }
        flush(self, &mut cur, st, &mut cases, stack.len());
    }

    /// Runs one simple command.
    fn exec(&mut self, words: &[Word], text: &str, st: &mut St, file: Option<&Path>, depth: usize) {
        let cmd_text = &text[words[0].start.min(text.len())..words[words.len() - 1].end.min(text.len())];
        let mut i = 0;
        // Keywords.
        while i < words.len() && words[i].lit().is_some_and(|l| KEYWORDS.contains(&l.as_str())) {
            i += 1;
        }
        if i < words.len()
            && words[i]
                .lit()
                .is_some_and(|l| matches!(l.as_str(), "for" | "case" | "select" | "function"))
        {
            if words[i].lit().as_deref() == Some("function") {
                if let Some(name) = words.get(i + 1).and_then(Word::lit) {
                    st.functions.insert(name, st.cwd.clone());
                }
            }
            return;
        }
        // Assignments alone set variables; before a program, its environment.
        let start = i;
        while i < words.len() && words[i].assign.is_some() {
            i += 1;
        }
        if i == words.len() {
            for w in &words[start..] {
                self.assign(w, st, depth, cmd_text, file);
            }
            return;
        }
        for w in &words[start..i] {
            // `VAR=path prog`: a path named there is protected.
            self.arg(w, st, depth);
            self.loader_var(w, st, depth, cmd_text, file);
        }
        // `PATH=bin:$PATH prog`: looked up there.
        if words[start..i].iter().any(|w| w.assign.as_deref() == Some("PATH")) {
            let mut st2 = st.clone();
            for w in words[start..i].iter().filter(|w| w.assign.as_deref() == Some("PATH")) {
                self.assign(w, &mut st2, depth, cmd_text, file);
            }
            self.program(&words[i..], cmd_text, &mut st2, file, depth);
            return;
        }
        self.program(&words[i..], cmd_text, st, file, depth);
    }

    /// `BASH_ENV=…`, `NODE_OPTIONS=--require=…`, `PYTHONPATH=…`: a file
    /// or directory the programs run later load, protected (a directory
    /// whole; the work tree's top, which cannot be, is reported).
    fn loader_var(&mut self, w: &Word, st: &St, depth: usize, cmd_text: &str, file: Option<&Path>) {
        let Some(name) = w.assign.as_deref() else { return };
        if !LOADER_VARS.contains(&name) {
            return;
        }
        let Some(vals) = self.eval(w, st, depth) else {
            self.finding(
                cmd_text,
                file,
                &format!("sets {name}, which makes programs load files, to a value the analysis cannot resolve"),
            );
            return;
        };
        for v in vals {
            for piece in v.split([':', ' ', '=', ',', ';']) {
                if piece.is_empty() || piece.starts_with('-') || piece.contains('\u{0}') {
                    continue;
                }
                let Some(p) = self.path_of(piece, st) else {
                    self.finding(
                        cmd_text,
                        file,
                        &format!("sets {name} relative to a directory the analysis cannot resolve"),
                    );
                    continue;
                };
                if !(p.starts_with(self.cx.root) || p.starts_with(self.cx.wt)) {
                    continue;
                }
                if p == self.cx.root || p == self.cx.wt || self.cx.wt.starts_with(&p) {
                    self.finding(
                        cmd_text,
                        file,
                        &format!("{name} names the work tree's top, where the sandbox writes what programs load"),
                    );
                } else {
                    self.symlinks(&p);
                    self.protect(p);
                }
            }
        }
    }

    fn assign(&mut self, w: &Word, st: &mut St, depth: usize, cmd_text: &str, file: Option<&Path>) {
        self.loader_var(w, st, depth, cmd_text, file);
        let Some(name) = w.assign.clone() else { return };
        let v = self.eval(w, st, depth);
        if name == "PATH" {
            match &v {
                Some(alts) => {
                    for a in alts {
                        for e in a.split(':') {
                            if e != "\u{0}PATH\u{0}" && !st.path_extra.iter().any(|x| x == e) {
                                st.path_extra.push(e.to_string());
                            }
                        }
                    }
                }
                None => self.finding(cmd_text, file, "PATH set to a value the analysis cannot resolve"),
            }
        }
        st.vars.insert(name, v);
    }

    /// An argument: a path it names (with a `/`) in the work tree is
    /// protected, unless it is a directory.
    fn arg(&mut self, w: &Word, st: &St, depth: usize) {
        let Some(vals) = self.eval(w, st, depth) else { return };
        for v in vals {
            // `--in=cfg/z`: the value; an assignment's word is its value.
            let v = match v.split_once('=') {
                Some((k, val)) if w.assign.is_none() && k.starts_with('-') => val.to_string(),
                _ => v,
            };
            if v.is_empty() || v.starts_with('-') || !v.contains('/') || v.contains('\u{0}') {
                continue;
            }
            let Some(p) = self.path_of(&v, st) else { continue };
            if p.starts_with(self.cx.wt) && p != self.cx.wt && !p.is_dir() {
                self.protect(p);
            }
        }
    }

    /// The commands a word's substitutions run (`V=$(./scripts/v.sh)`,
    /// `${X:-$(…)}`), each in a subshell of the current state.
    fn substitutions(&mut self, w: &Word, st: &St, file: Option<&Path>, depth: usize) {
        for p in &w.parts {
            match p {
                Part::Cmd(c) => self.run_text(c, &mut st.clone(), file, depth),
                Part::Var { default: Some(d), .. } => {
                    for t in lex(d) {
                        if let Tok::Word(dw) | Tok::Redirect(dw) = t {
                            self.substitutions(&dw, st, file, depth);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// A redirection's file (`< scripts/x.py`: an interpreter may read its
    /// program from it): protected when it is in the work tree, also
    /// without a `/`.
    fn redirect(&mut self, w: &Word, st: &St, depth: usize) {
        let Some(vals) = self.eval(w, st, depth) else { return };
        for v in vals {
            if v.is_empty() || v.contains('\u{0}') {
                continue;
            }
            let Some(p) = self.path_of(&v, st) else { continue };
            if p.starts_with(self.cx.wt) && p != self.cx.wt && !p.is_dir() {
                self.symlinks(&p);
                self.protect(p);
            }
        }
    }

    /// A script path that is standard input or an inherited descriptor
    /// (`/dev/stdin`, `/dev/fd/3`, `/proc/self/fd/0`): what it reads was
    /// redirected from somewhere the analysis does not follow.
    fn via_descriptor(&mut self, p: &Path, cmd_text: &str, file: Option<&Path>) -> bool {
        let d = p.starts_with("/dev") || p.starts_with("/proc");
        if d {
            self.finding(
                cmd_text,
                file,
                "runs a script read from standard input or a descriptor, which the analysis does not follow",
            );
        }
        d
    }

    fn program(&mut self, words: &[Word], cmd_text: &str, st: &mut St, file: Option<&Path>, depth: usize) {
        let Some(first) = words.first() else { return };
        let Some(vals) = self.eval(first, st, depth) else {
            self.finding(
                cmd_text,
                file,
                "runs a program named by an expansion the analysis cannot resolve",
            );
            return;
        };
        let rest = &words[1..];
        for v in vals {
            self.program_named(&v, rest, cmd_text, st, file, depth);
        }
    }

    fn program_named(
        &mut self,
        v: &str,
        rest: &[Word],
        cmd_text: &str,
        st: &mut St,
        file: Option<&Path>,
        depth: usize,
    ) {
        let name = prog_name(v).to_string();
        if v.contains('/') {
            let Some(p) = self.path_of(v, st) else {
                self.finding(
                    cmd_text,
                    file,
                    "runs a program relative to a directory the analysis cannot resolve",
                );
                return;
            };
            self.protect(p.clone());
            let interp = is_python(&name)
                || name == "node"
                || SHELLS.contains(&name.as_str())
                || OTHER_INTERPRETERS.contains(&name.as_str());
            // An interpreter the work tree holds (`.venv/bin/python`)
            // loads what the sandbox wrote.
            let in_ws = p.starts_with(self.cx.root) || p.starts_with(self.cx.wt);
            if PROJECT_RUNNERS.contains(&name.as_str()) {
                // Reported below.
            } else if interp && in_ws {
                self.symlinks(&p);
                self.finding(
                    cmd_text,
                    file,
                    "runs an interpreter the work tree holds, which loads what the sandbox wrote",
                );
                return;
            } else if !interp {
                self.run_file(&p, st, false, depth + 1, cmd_text, file);
                // A host program named by its path (`/usr/bin/env`,
                // `/usr/bin/find`) is read as its name is, below.
                if in_ws || !HOST_WRAPPERS.contains(&name.as_str()) {
                    for w in rest {
                        self.arg(w, st, depth);
                    }
                    return;
                }
            }
        } else {
            // A name: `PATH` entries the script added come first.
            if !BUILTINS.contains(&name.as_str()) {
                for e in st.path_extra.clone() {
                    let d = if e.is_empty() { ".".to_string() } else { e };
                    match self.path_of(&d, st) {
                        Some(dir) => {
                            let p = dir.join(&name);
                            self.protect(p.clone());
                            self.run_file(&p, st, false, depth + 1, cmd_text, file);
                        }
                        None => self.finding(
                            cmd_text,
                            file,
                            "looks a program up in a PATH entry the analysis cannot resolve",
                        ),
                    }
                }
            }
        }
        if !v.contains('/') {
            if let Some(at) = st.functions.get(&name) {
                if at.is_none() || *at != st.cwd {
                    self.finding(
                        cmd_text,
                        file,
                        "calls a function from another directory than the one its body was read in",
                    );
                }
            }
            if let Some(def) = st.aliases.remove(&name) {
                // The alias's text runs in its place (not itself again).
                match &def {
                    Some(t) => self.run_text(t, st, file, depth),
                    None => self.finding(cmd_text, file, "runs an alias the analysis cannot resolve"),
                }
                st.aliases.insert(name, def);
                for w in rest {
                    self.arg(w, st, depth);
                }
                return;
            }
        }
        let n = name.as_str();
        let lit = |w: &Word| w.lit();
        match n {
            "alias" => {
                for w in rest {
                    let Some(a) = w.assign.clone() else { continue };
                    let def = match self.eval(w, st, depth).as_deref() {
                        Some([one]) => Some(one.clone()),
                        _ => None,
                    };
                    if def.is_none() {
                        self.finding(cmd_text, file, "defines an alias the analysis cannot resolve");
                    }
                    st.aliases.insert(a, def);
                }
            }
            "exec" | "command" | "builtin" | "nohup" | "time" | "setsid" | "stdbuf" | "chronic" | "unbuffer" => {
                if n == "command" && rest.first().and_then(lit).is_some_and(|l| l == "-v" || l == "-V") {
                    return;
                }
                let skip = rest
                    .iter()
                    .take_while(|w| lit(w).is_some_and(|l| l.starts_with('-')))
                    .count();
                let skip = if n == "exec" && rest.first().and_then(lit).as_deref() == Some("-a") {
                    2
                } else {
                    skip
                };
                self.program(&rest[skip.min(rest.len())..], cmd_text, st, file, depth);
            }
            "env" | "sudo" | "doas" | "nice" | "ionice" | "timeout" | "xargs" => {
                let mut i = 0;
                let mut st2 = st.clone();
                while i < rest.len() {
                    let w = &rest[i];
                    if w.assign.is_some() {
                        if w.assign.as_deref() == Some("PATH") {
                            self.assign(w, &mut st2, depth, cmd_text, file);
                        } else {
                            self.arg(w, st, depth);
                            self.loader_var(w, st, depth, cmd_text, file);
                        }
                        i += 1;
                        continue;
                    }
                    let Some(l) = lit(w) else { break };
                    if l == "--" {
                        i += 1;
                        break;
                    }
                    if !l.starts_with('-') {
                        if n == "timeout" {
                            i += 1;
                        }
                        break;
                    }
                    if n == "env" && (l == "-S" || l == "--split-string") {
                        if let Some(s) = rest.get(i + 1).and_then(|w| self.eval(w, st, depth)) {
                            for s in s {
                                self.run_text(&s, &mut st2.clone(), file, depth + 1);
                            }
                        }
                        return;
                    }
                    if n == "env" && (l == "-C" || l == "--chdir") {
                        let t = rest.get(i + 1).and_then(|w| self.eval(w, st, depth));
                        st2.cwd = match t.as_deref() {
                            Some([one]) => self.path_of(one, st),
                            _ => None,
                        };
                        i += 2;
                        continue;
                    }
                    // Options that take a value.
                    let takes = matches!(
                        (n, l.as_str()),
                        ("env", "-u")
                            | ("sudo", "-u" | "-g" | "-C" | "-h" | "-p" | "-r" | "-t" | "-U")
                            | ("nice", "-n")
                            | ("ionice", "-c" | "-n" | "-p")
                            | ("timeout", "-s" | "-k")
                            | ("xargs", "-I" | "-n" | "-P" | "-d" | "-a" | "-E" | "-L" | "-s")
                    );
                    i += if takes { 2 } else { 1 };
                }
                let rest = &rest[i.min(rest.len())..];
                if rest.is_empty() {
                    if n == "xargs" {
                        // xargs runs `echo`: nothing.
                    }
                    return;
                }
                self.program(rest, cmd_text, &mut st2, file, depth);
            }
            "eval" => self.finding(cmd_text, file, "`eval` runs text the analysis cannot follow"),
            "export" | "local" | "readonly" | "declare" | "typeset" => {
                for w in rest {
                    self.assign(w, st, depth, cmd_text, file);
                }
            }
            "cd" | "pushd" | "popd" => {
                let target = rest
                    .iter()
                    .find(|w| !lit(w).is_some_and(|l| l.starts_with('-') && l != "-"));
                let old = st.cwd.clone();
                let new = match (n, target) {
                    ("popd", _) => st.dirstack.pop().flatten(),
                    (_, None) => self.cx.home.map(Path::to_path_buf),
                    (_, Some(w)) => match self.eval(w, st, depth).as_deref() {
                        Some([one]) if one != "-" => self.path_of(one, st),
                        _ => None,
                    },
                };
                if n == "pushd" {
                    st.dirstack.push(old);
                }
                st.cwd = new;
            }
            "trap" => {
                if let Some(w) = rest.first() {
                    if let Some(vals) = self.eval(w, st, depth) {
                        for v in vals {
                            self.run_text(&v, &mut st.clone(), file, depth + 1);
                        }
                    }
                }
            }
            "." | "source" => {
                let Some(w) = rest.first() else {
                    self.finding(cmd_text, file, "sources a script the analysis cannot read");
                    return;
                };
                match self.eval(w, st, depth) {
                    Some(vals) => {
                        for v in vals {
                            match self.path_of(&v, st) {
                                Some(p) => {
                                    self.protect(p.clone());
                                    if !self.via_descriptor(&p, cmd_text, file) {
                                        self.run_file(&p, st, true, depth + 1, cmd_text, file);
                                    }
                                }
                                None => self.finding(
                                    cmd_text,
                                    file,
                                    "sources a script relative to a directory the analysis cannot resolve",
                                ),
                            }
                        }
                    }
                    None => self.finding(
                        cmd_text,
                        file,
                        "sources a script named by an expansion the analysis cannot resolve",
                    ),
                }
            }
            n if SHELLS.contains(&n) => self.shell(rest, cmd_text, st, file, depth),
            n if is_python(n) => self.python(rest, cmd_text, st, file, depth),
            "node" | "nodejs" => self.node(rest, cmd_text, st, file, depth),
            n if OTHER_INTERPRETERS.contains(&n) => {
                let mut i = 0;
                while i < rest.len() {
                    match lit(&rest[i]) {
                        Some(l)
                            if l == "-e"
                                || l == "-E"
                                || l == "-c"
                                || l == "-r"
                                || l == "-Command"
                                // A cluster with one of them: `perl -lne …`.
                                // (`-Mstrict`, `-Ilib`: a value, not flags.)
                                || (l.len() > 2
                                    && l.starts_with('-')
                                    && !l.starts_with("--")
                                    && !["-M", "-m", "-I"].iter().any(|p| l.starts_with(p))
                                    && l[1..].contains(['e', 'E', 'c', 'r'])) =>
                        {
                            self.finding(
                                cmd_text,
                                file,
                                "runs inline interpreter code the analysis does not follow",
                            );
                            return;
                        }
                        Some(l) if l == "-I" || l == "-S" => i += 2,
                        Some(l) if l.starts_with('-') => i += 1,
                        _ => break,
                    }
                }
                match rest.get(i) {
                    Some(w) if w.lit().as_deref() != Some("-") => {
                        self.script_arg(w, cmd_text, st, file, depth, false);
                    }
                    _ if asks_version(rest) => {}
                    _ => self.finding(cmd_text, file, "an interpreter reading its program from standard input"),
                }
            }
            "busybox" | "toybox" => {
                // The applet runs.
                let skip = rest
                    .iter()
                    .take_while(|w| w.lit().is_some_and(|l| l.starts_with('-')))
                    .count();
                self.program(&rest[skip.min(rest.len())..], cmd_text, st, file, depth);
            }
            "awk" | "gawk" | "mawk" | "nawk" | "sed" | "gsed" => {
                // A program file (`-f FILE`) can run anything (`system()`,
                // sed's `e`): protected, and reported.
                let mut k = 0;
                while k < rest.len() {
                    let l = rest[k].lit().unwrap_or_default();
                    let f = if l == "-f" || l == "--file" {
                        k += 1;
                        rest.get(k).cloned()
                    } else if let Some(v) = l.strip_prefix("--file=").or_else(|| l.strip_prefix("-f")) {
                        let mut w = rest[k].clone();
                        w.parts = vec![Part::Lit(v.to_string())];
                        Some(w)
                    } else {
                        None
                    };
                    if let Some(w) = f {
                        self.script_arg(&w, cmd_text, st, file, depth, false);
                        self.finding(
                            cmd_text,
                            file,
                            "runs an awk or sed program file, which can run commands the analysis does not follow",
                        );
                    }
                    k += 1;
                }
                for w in rest {
                    self.arg(w, st, depth);
                }
            }
            "find"
                if rest
                    .iter()
                    .any(|w| matches!(w.lit().as_deref(), Some("-exec" | "-execdir" | "-ok" | "-okdir"))) =>
            {
                self.finding(
                    cmd_text,
                    file,
                    "find runs a command on each file it finds, which the analysis does not follow",
                );
            }
            "git" if git_runs_command(rest) => self.finding(
                cmd_text,
                file,
                "git runs a command named on its command line, which the analysis does not follow",
            ),
            n if UNFOLLOWED_WRAPPERS.contains(&n) => self.finding(
                cmd_text,
                file,
                "runs a program that runs other commands, which the analysis does not follow",
            ),
            n if PROJECT_RUNNERS.contains(&n) => {
                self.finding(
                    cmd_text,
                    file,
                    "a package manager or build tool runs code the project defines",
                );
            }
            _ => {
                for w in rest {
                    self.arg(w, st, depth);
                }
            }
        }
    }

    /// The script argument of an interpreter: protected; followed when a
    /// shell runs it.
    fn script_arg(
        &mut self,
        w: &Word,
        cmd_text: &str,
        st: &mut St,
        file: Option<&Path>,
        depth: usize,
        shell: bool,
    ) -> Vec<PathBuf> {
        let mut out = Vec::new();
        match self.eval(w, st, depth) {
            Some(vals) => {
                for v in vals {
                    match self.path_of(&v, st) {
                        Some(p) => {
                            self.protect(p.clone());
                            if self.via_descriptor(&p, cmd_text, file) {
                                continue;
                            }
                            if shell {
                                self.run_file(&p, st, false, depth + 1, cmd_text, file);
                            } else {
                                self.symlinks(&p);
                            }
                            out.push(p);
                        }
                        None => self.finding(
                            cmd_text,
                            file,
                            "runs a script relative to a directory the analysis cannot resolve",
                        ),
                    }
                }
            }
            None => self.finding(
                cmd_text,
                file,
                "runs a script named by an expansion the analysis cannot resolve",
            ),
        }
        out
    }

    fn shell(&mut self, rest: &[Word], cmd_text: &str, st: &mut St, file: Option<&Path>, depth: usize) {
        let mut i = 0;
        while i < rest.len() {
            let Some(l) = rest[i].lit() else { break };
            if l == "--" {
                i += 1;
                break;
            }
            if !(l.starts_with('-') || l.starts_with('+')) || l == "-" {
                break;
            }
            if l.starts_with('-') && !l.starts_with("--") && l.contains('c') {
                match rest.get(i + 1).and_then(|w| self.eval(w, st, depth)) {
                    Some(vals) => {
                        for v in vals {
                            self.run_text(&v, &mut st.clone(), file, depth + 1);
                        }
                    }
                    None => self.finding(cmd_text, file, "runs a shell command the analysis cannot resolve"),
                }
                return;
            }
            if l.starts_with('-') && !l.starts_with("--") && l.contains('s') {
                self.finding(cmd_text, file, "a shell reading its commands from standard input");
                return;
            }
            // `-o NAME`, `-O NAME`, also at the end of a cluster
            // (`-euo pipefail`).
            i += if !l.starts_with("--") && (l.ends_with('o') || l.ends_with('O')) {
                2
            } else {
                1
            };
        }
        match rest.get(i) {
            Some(w) => {
                self.script_arg(w, cmd_text, st, file, depth, true);
            }
            None => self.finding(cmd_text, file, "a shell reading its commands from standard input"),
        }
    }

    /// `python FILE` (the script and its directory, first on the module
    /// path) and `python -m pkg.mod`.
    fn python(&mut self, rest: &[Word], cmd_text: &str, st: &mut St, file: Option<&Path>, depth: usize) {
        let mut i = 0;
        while i < rest.len() {
            let Some(mut l) = rest[i].lit() else { break };
            // A cluster of flags (`-Bc`, `-Im mod`, `-BW ignore`): the
            // first that takes a value decides.
            if l.len() > 2 && l.starts_with('-') && !l.starts_with("--") {
                if let Some(k) = l[1..].find(['c', 'm', 'W', 'X']) {
                    l = format!("-{}", &l[1 + k..]);
                }
            }
            if l == "-c" || (l.starts_with("-c") && !l.starts_with("--")) {
                self.finding(
                    cmd_text,
                    file,
                    "runs inline interpreter code the analysis does not follow",
                );
                return;
            }
            let module = if l == "-m" {
                rest.get(i + 1).and_then(|w| self.eval(w, st, depth))
            } else if let Some(m) = l.strip_prefix("-m") {
                Some(vec![m.to_string()])
            } else if l.starts_with('-') {
                i += if l == "-W" || l == "-X" { 2 } else { 1 };
                continue;
            } else {
                break;
            };
            let Some(mods) = module else {
                self.finding(
                    cmd_text,
                    file,
                    "runs a Python module named by an expansion the analysis cannot resolve",
                );
                return;
            };
            let Some(cwd) = st.cwd.clone() else {
                self.finding(
                    cmd_text,
                    file,
                    "runs a Python module relative to a directory the analysis cannot resolve",
                );
                return;
            };
            for m in mods {
                let parts: Vec<&str> = m.split('.').collect();
                let mut dir = cwd.clone();
                for (k, part) in parts.iter().enumerate() {
                    if k + 1 < parts.len() {
                        dir = dir.join(part);
                        self.protect(dir.join("__init__.py"));
                        self.protect(dir.join("__pycache__"));
                    } else {
                        self.protect(dir.join(format!("{part}.py")));
                        self.protect(dir.join(format!("{part}.pyc")));
                        self.protect(dir.join(part).join("__main__.py"));
                        self.protect(dir.join(part).join("__init__.py"));
                        self.protect(dir.join(part).join("__pycache__"));
                        self.protect(dir.join("__pycache__"));
                    }
                }
            }
            self.python_path_dir(&cwd, cmd_text, file);
            return;
        }
        match rest.get(i) {
            Some(w) if w.lit().as_deref() != Some("-") => {
                for p in self.script_arg(w, cmd_text, st, file, depth, false) {
                    if let Some(d) = p.parent() {
                        self.python_path_dir(d, cmd_text, file);
                    }
                }
            }
            _ if asks_version(rest) => {}
            _ => self.finding(cmd_text, file, "an interpreter reading its program from standard input"),
        }
    }

    /// Python puts the script's directory (or, with `-m`, the current one)
    /// first on its module path: any module there shadows an import. The
    /// directory is protected whole, unless it is the work tree's top or
    /// the workspace root (which cannot be), which is reported.
    fn python_path_dir(&mut self, d: &Path, cmd_text: &str, file: Option<&Path>) {
        let inside = d.starts_with(self.cx.root) || d.starts_with(self.cx.wt);
        if !inside {
            return;
        }
        if d == self.cx.root || d == self.cx.wt || self.cx.wt.starts_with(d) {
            self.finding(
                cmd_text,
                file,
                "Python puts the work tree's top first on its module path: a module the sandbox writes there shadows an import",
            );
        } else {
            self.protect(d.to_path_buf());
        }
    }

    /// `node FILE`: the file, and the modules it requires by relative path;
    /// a package it loads from `node_modules` is reported.
    fn node(&mut self, rest: &[Word], cmd_text: &str, st: &mut St, file: Option<&Path>, depth: usize) {
        let mut i = 0;
        while i < rest.len() {
            let Some(l) = rest[i].lit() else { break };
            let cluster = l.len() > 2 && l.starts_with('-') && !l.starts_with("--") && l[1..].contains(['e', 'p']);
            if cluster || matches!(l.as_str(), "-e" | "--eval" | "-p" | "--print") {
                self.finding(
                    cmd_text,
                    file,
                    "runs inline interpreter code the analysis does not follow",
                );
                return;
            }
            if matches!(
                l.as_str(),
                "-r" | "--require" | "--import" | "--loader" | "--experimental-loader"
            ) {
                if let Some(w) = rest.get(i + 1) {
                    self.arg(w, st, depth);
                }
                i += 2;
                continue;
            }
            if let Some((_, v)) = l.split_once('=').filter(|(k, _)| k.starts_with("--")) {
                // `--require=./x.js`: also without a `/`.
                if let Some(p) = self
                    .path_of(v, st)
                    .filter(|p| p.starts_with(self.cx.wt) && *p != self.cx.wt)
                {
                    self.protect(p);
                }
            }
            if !l.starts_with('-') {
                break;
            }
            i += 1;
        }
        let Some(w) = rest.get(i) else {
            self.finding(cmd_text, file, "node reading its program from standard input");
            return;
        };
        for p in self.script_arg(w, cmd_text, st, file, depth, false) {
            self.node_requires(&p, cmd_text, file, 0);
        }
    }

    fn node_requires(&mut self, p: &Path, cmd_text: &str, file: Option<&Path>, level: usize) {
        let Some(text) = read_script(p) else { return };
        let text = String::from_utf8_lossy(&text).into_owned();
        let dir = p.parent().unwrap_or(Path::new("/")).to_path_buf();
        for spec in js_specifiers(&text) {
            let bare = spec.strip_prefix("node:").unwrap_or(&spec);
            if spec.starts_with("node:") || NODE_BUILTINS.contains(&bare) {
                continue;
            }
            if spec.starts_with("./") || spec.starts_with("../") || spec.starts_with('/') {
                let base = normalize(&dir.join(&spec));
                let mut cands = vec![base.clone()];
                for ext in ["js", "mjs", "cjs", "json", "ts", "node"] {
                    let mut s = base.clone().into_os_string();
                    s.push(format!(".{ext}"));
                    cands.push(PathBuf::from(s));
                }
                cands.push(base.join("index.js"));
                cands.push(base.join("package.json"));
                for c in cands {
                    self.protect(c.clone());
                    if level < MAX_SCRIPT_DEPTH && c.is_file() && self.visited.insert(c.clone()) {
                        self.node_requires(&c, cmd_text, file, level + 1);
                    }
                }
            } else {
                self.finding(
                    cmd_text,
                    file,
                    "node loads a package from node_modules, which the sandbox can write",
                );
                return;
            }
        }
    }

    fn symlinks(&mut self, p: &Path) {
        self.s.input(p);
        for hop in symlink_hops(p) {
            self.s.input(&hop);
            self.protect(hop);
        }
    }

    /// A program or script file: protected with every symlink hop, and,
    /// when it is a workspace (or hook) script, read and followed.
    fn run_file(&mut self, p: &Path, st: &mut St, sourced: bool, depth: usize, cmd_text: &str, file: Option<&Path>) {
        self.protect(p.to_path_buf());
        self.symlinks(p);
        let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        // Host programs outside the workspace are the host's: only a hook
        // itself (level 0) is read wherever it is.
        if depth > 0 && !within(&real, &self.roots()) && !within(p, &self.roots()) {
            return;
        }
        let Some(text) = read_script(&real) else { return };
        let shown = p.to_string_lossy();
        if depth > MAX_SCRIPT_DEPTH {
            self.finding(
                cmd_text,
                file,
                &format!("runs scripts nested deeper than {MAX_SCRIPT_DEPTH} levels ({shown} is not read)"),
            );
            return;
        }
        if !self.visited.insert(real.clone()) && !sourced {
            return;
        }
        let runs_config = self.managers(&text);
        if let Some(name) = runs_config {
            // A hook manager that runs the commands its configuration names
            // (local hooks, `run:` entries): not decided, whatever the
            // hook's own text says.
            let before = self.s.findings.len();
            self.analyse_text(&text, p, &interp_of(&text), st, sourced, depth, cmd_text, file);
            let named = self.s.findings[before..]
                .iter()
                .any(|f| f.file.as_deref() == Some(p) && f.origin == self.origin);
            if !named {
                let shown = p.strip_prefix(self.cx.wt).unwrap_or(p).to_string_lossy().into_owned();
                self.finding(
                    &shown,
                    Some(p),
                    &format!("the hook manager {name} runs the commands its configuration names"),
                );
            }
            return;
        }
        self.analyse_text(&text, p, &interp_of(&text), st, sourced, depth, cmd_text, file);
    }

    /// A script's text, by its interpreter.
    #[allow(clippy::too_many_arguments)] // the state of one step of the walk
    fn analyse_text(
        &mut self,
        text: &[u8],
        p: &Path,
        interp: &Option<String>,
        st: &mut St,
        sourced: bool,
        depth: usize,
        cmd_text: &str,
        file: Option<&Path>,
    ) {
        let shown = p.to_string_lossy();
        if text.len() > SCRIPT_MAX {
            self.finding(cmd_text, file, &format!("{shown} is over 64 KiB: not analysed"));
            return;
        }
        if text.contains(&0) || text.starts_with(b"\x7fELF") {
            self.finding(
                cmd_text,
                file,
                &format!("{shown} is a binary program: what it runs cannot be read"),
            );
            return;
        }
        let text = String::from_utf8_lossy(text).into_owned();
        match interp.as_deref() {
            None => {}
            Some(i) if SHELLS.contains(&i) => {}
            Some(i) if is_python(i) => {
                if let Some(d) = p.parent() {
                    self.python_path_dir(d, cmd_text, file);
                }
                return;
            }
            Some("node") | Some("nodejs") => {
                self.node_requires(p, cmd_text, file, 0);
                return;
            }
            Some(i) if PROJECT_RUNNERS.contains(&i) => {
                self.finding(
                    cmd_text,
                    file,
                    "a package manager or build tool runs code the project defines",
                );
                return;
            }
            Some(_) => return,
        }
        // husky's own runner (`.husky/_/h`, `husky.sh`) is sourced with
        // the hook's `$0`; it is read like any script.
        if sourced {
            self.run_text(&text, st, Some(p), depth);
        } else {
            let mut st2 = St {
                cwd: st.cwd.clone(),
                vars: HashMap::new(),
                zero: Some(p.to_path_buf()),
                path_extra: st.path_extra.clone(),
                dirstack: Vec::new(),
                aliases: HashMap::new(),
                functions: HashMap::new(),
            };
            self.run_text(&text, &mut st2, Some(p), depth);
        }
    }

    /// Hook managers a script runs, and their configuration; the name of
    /// one that runs the commands its configuration names.
    fn managers(&mut self, text: &[u8]) -> Option<&'static str> {
        let lower = String::from_utf8_lossy(text).to_ascii_lowercase();
        let wt = self.cx.wt;
        let mut runs = None;
        for (name, mark, files) in MANAGERS {
            if lower.contains(mark) {
                let protects: Vec<PathBuf> = files.iter().map(|f| wt.join(f)).collect();
                self.s.protect.extend(protects.iter().cloned());
                if !self.s.managers.iter().any(|m| m.name == *name) {
                    self.s.managers.push(Manager { name, protects });
                }
                if matches!(*name, "pre-commit" | "lefthook" | "overcommit") {
                    runs = Some(*name);
                }
            }
        }
        runs
    }
}

/// Variables that make programs load the files or directories they name
/// (shell startup files, preloaded libraries, module paths, interpreter
/// options).
const LOADER_VARS: &[&str] = &[
    "BASH_ENV",
    "ZDOTDIR",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PERL5LIB",
    "PERLLIB",
    "PERL5OPT",
    "RUBYOPT",
    "RUBYLIB",
    "GEM_HOME",
    "GEM_PATH",
    "CLASSPATH",
    "JAVA_TOOL_OPTIONS",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG",
    "XDG_CONFIG_HOME",
];

/// Host programs that run the command or files they are given: named by
/// their path (`/usr/bin/env`), read as by their name.
const HOST_WRAPPERS: &[&str] = &[
    "env",
    "exec",
    "command",
    "nohup",
    "time",
    "setsid",
    "stdbuf",
    "chronic",
    "unbuffer",
    "sudo",
    "doas",
    "nice",
    "ionice",
    "timeout",
    "xargs",
    "busybox",
    "toybox",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "gsed",
    "find",
    "git",
    "run-parts",
    "parallel",
    "flock",
    "watch",
    "script",
    "su",
    "runuser",
    "chroot",
    "unshare",
    "nsenter",
    "setpriv",
    "taskset",
    "chrt",
    "prlimit",
    "systemd-run",
    "entr",
    "watchexec",
    "nodemon",
    "tmux",
    "screen",
    "strace",
    "ltrace",
    "gdb",
    "valgrind",
    "firejail",
    "bwrap",
    "at",
    "batch",
    "dbus-run-session",
    "xvfb-run",
    "fakeroot",
    "faketime",
    "proot",
    "sg",
];

/// Programs that run a command or the files of a directory in a way the
/// analysis does not model: a finding.
pub(super) const UNFOLLOWED_WRAPPERS: &[&str] = &[
    "run-parts",
    "parallel",
    "flock",
    "watch",
    "script",
    "su",
    "runuser",
    "chroot",
    "unshare",
    "nsenter",
    "setpriv",
    "taskset",
    "chrt",
    "prlimit",
    "systemd-run",
    "entr",
    "watchexec",
    "nodemon",
    "tmux",
    "screen",
    "strace",
    "ltrace",
    "gdb",
    "valgrind",
    "firejail",
    "bwrap",
    "at",
    "batch",
    "dbus-run-session",
    "xvfb-run",
    "fakeroot",
    "faketime",
    "proot",
    "sg",
];

/// Git subcommands that run a command their arguments name:
/// `submodule foreach`, `bisect run`, `rebase --exec`, `difftool --extcmd`,
/// `filter-branch`.
fn git_runs_command(rest: &[Word]) -> bool {
    let l: Vec<String> = rest.iter().map(|w| w.lit().unwrap_or_default()).collect();
    // Configuration given on the command line (`-c KEY=VALUE`,
    // `--config-env=KEY=VAR`) that names a program or hooks directory, or
    // given by an expansion.
    let runs_key = |kv: &str| {
        let key = kv.split('=').next().unwrap_or(kv).to_ascii_lowercase();
        key.is_empty()
            || [
                "core.hookspath",
                "core.fsmonitor",
                "core.sshcommand",
                "core.pager",
                "core.editor",
            ]
            .contains(&key.as_str())
            || [
                "alias.",
                "filter.",
                "diff.",
                "merge.",
                "pager.",
                "gpg.",
                "credential.",
                "sequence.",
                "remote.",
            ]
            .iter()
            .any(|p| key.starts_with(p))
    };
    for (k, a) in rest.iter().enumerate() {
        let v = match a.lit().as_deref() {
            Some("-c") => rest.get(k + 1).and_then(Word::lit),
            Some(x) if x.starts_with("--config-env=") => Some(x["--config-env=".len()..].to_string()),
            Some("--config-env") => rest.get(k + 1).and_then(Word::lit),
            _ => continue,
        };
        match v {
            Some(kv) if !runs_key(&kv) => {}
            _ => return true,
        }
    }
    let has = |a: &str| l.iter().any(|x| x == a);
    let opt = |a: &str| l.iter().any(|x| x == a || x.starts_with(&format!("{a}=")));
    (has("submodule") && has("foreach"))
        || (has("bisect") && has("run"))
        || has("filter-branch")
        || (has("rebase") && (opt("--exec") || l.iter().any(|x| x.starts_with("-x"))))
        || (has("difftool") && (opt("--extcmd") || l.iter().any(|x| x.starts_with("-x"))))
}

/// `--version`, `-V`, `--help`, `-h` among an interpreter's arguments: it
/// runs no program.
fn asks_version(rest: &[Word]) -> bool {
    rest.iter()
        .any(|w| matches!(w.lit().as_deref(), Some("--version" | "-V" | "-v" | "--help" | "-h")))
}

/// The interpreter a `#!` line names (through `env`), if any.
fn interp_of(text: &[u8]) -> Option<String> {
    let rest = text.strip_prefix(b"#!")?;
    let line = rest.split(|&b| b == b'\n').next().unwrap_or(b"");
    let line = String::from_utf8_lossy(line);
    let mut w = line.split_whitespace();
    let mut prog = w.next().map(prog_name).unwrap_or("").to_string();
    if prog == "env" {
        prog = w.find(|a| !a.starts_with('-')).map(prog_name).unwrap_or("").to_string();
    }
    Some(prog)
}

/// Hook managers: (name, a mark in the hook's text, their files).
const MANAGERS: &[(&str, &str, &[&str])] = &[
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

/// A regular file's first bytes (up to one more than [`SCRIPT_MAX`]),
/// opened without blocking (a FIFO in its place is not waited on).
fn read_script(p: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(p)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    f.take(SCRIPT_MAX as u64 + 1).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// The module specifiers of `require("…")`, `import … from "…"`,
/// `import("…")` and `import "…"` in JavaScript text.
fn js_specifiers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        let after = if rest.starts_with("require(") {
            Some(i + 8)
        } else if rest.starts_with("import(") {
            Some(i + 7)
        } else if rest.starts_with("from ") || rest.starts_with("from\"") || rest.starts_with("from'") {
            Some(i + 4)
        } else if rest.starts_with("import ") || rest.starts_with("import\"") || rest.starts_with("import'") {
            Some(i + 6)
        } else {
            None
        };
        if let Some(mut j) = after {
            while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                j += 1;
            }
            if j < b.len() && matches!(b[j], b'"' | b'\'' | b'`') {
                let q = b[j];
                if let Some(end) = b[j + 1..].iter().position(|&c| c == q || c == b'\n') {
                    if b[j + 1 + end] == q {
                        out.push(text[j + 1..j + 1 + end].to_string());
                    }
                }
            } else if rest.starts_with("require(") || rest.starts_with("import(") {
                // A computed specifier.
                out.push(String::from("\u{0}computed"));
            }
            i = j.max(i + 1);
            continue;
        }
        i += text[i..].chars().next().map_or(1, char::len_utf8);
    }
    out
}

/// Analyses a hook (level 0) as Git runs it: from the work tree's top.
pub(super) fn analyze_hook(s: &mut Surface, cx: &RepoCtx, hook: &Path, origin: &str, depth: usize) {
    let mut a = Ana {
        s,
        cx,
        origin: origin.to_string(),
        visited: HashSet::new(),
        found: Vec::new(),
    };
    let mut st = St::new(cx.wt);
    let shown = hook.strip_prefix(cx.wt).unwrap_or(hook).to_string_lossy().into_owned();
    a.run_file(hook, &mut st, false, depth, &shown, None);
}

/// Analyses a configured command line (`filter.x.clean`, `alias.y = !…`)
/// as Git runs it: a shell command at the work tree's top. Returns the
/// paths it protected.
pub(super) fn analyze_command(s: &mut Surface, cx: &RepoCtx, origin: &str, cmd: &str) -> Vec<PathBuf> {
    let mut a = Ana {
        s,
        cx,
        origin: origin.to_string(),
        visited: HashSet::new(),
        found: Vec::new(),
    };
    let mut st = St::new(cx.wt);
    a.run_text(cmd, &mut st, None, 0);
    a.found
}

pub(super) fn hooks_surface(s: &mut Surface, cx: &RepoCtx, dir: &Path) {
    let root = cx.root;
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
    let mut husky_dirs = BTreeSet::new();
    for d in &dirs {
        if d.file_name().is_some_and(|n| n == "_") {
            if let Some(parent) = d.parent() {
                if parent != root {
                    s.protect.insert(parent.to_path_buf());
                    husky_dirs.insert(parent.to_path_buf());
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
            analyze_hook(s, cx, &hook, &n.to_string_lossy(), 0);
        }
    }
    // husky's scripts, read even where its runner is not there to name
    // them (one level down: the runner is level 0).
    for d in husky_dirs {
        for h in HOOK_NAMES {
            let p = d.join(h);
            if p.is_file() {
                analyze_hook(s, cx, &p, h, 1);
            }
        }
    }
}

/// Files a command line names (the program, the script of an interpreter,
/// arguments with a `/` in the work tree), relative to `base` (Git runs
/// these at the work tree's top level).
#[cfg_attr(not(test), allow(dead_code))] // also the fuzz target's entry (`hostexec::fuzz_command`)
pub(super) fn command_paths(cmd: &str, base: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut s = Surface::default();
    let git = base.join(".git");
    let cx = RepoCtx {
        root: base,
        wt: base,
        git_dir: &git,
        common: &git,
        home,
    };
    analyze_command(&mut s, &cx, "test", cmd)
}
