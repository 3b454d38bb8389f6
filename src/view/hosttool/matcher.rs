//! Whether a view path is a host-tool path (`table::TABLE`, plus a
//! profile's `host_config`, less its `host_config_writable`), matched over
//! the path's components at any depth. It runs on every lookup of the
//! workspace view: no allocation, and a name that does not begin with `.`
//! is tried against the few patterns that can match it only.

use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::table::{Depth, Row, Treatment, TABLE};

/// How a view path stands to the host-tool patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// No pattern covers it.
    None,
    /// A leading part of a multi-component pattern (`.cargo` for
    /// `.cargo/config.toml`): as a directory it stays host-side, but moving
    /// it, or a directory onto it, would move host content into or out of
    /// host-tool positions, and as a symlink it would redirect them.
    Prefix,
    /// At or below a host-tool path: Domain-side.
    Full,
}

/// One component of a pattern: a literal name, or a name with one `*`.
#[derive(Clone, Debug)]
enum Glob {
    Exact(Box<[u8]>),
    Star(Box<[u8]>, Box<[u8]>),
}

impl Glob {
    fn parse(s: &[u8]) -> Glob {
        match s.iter().position(|&b| b == b'*') {
            Some(i) => Glob::Star(s[..i].into(), s[i + 1..].into()),
            None => Glob::Exact(s.into()),
        }
    }

    #[inline]
    fn matches(&self, name: &[u8]) -> bool {
        match self {
            Glob::Exact(e) => **e == *name,
            Glob::Star(pre, suf) => name.len() >= pre.len() + suf.len() && name.starts_with(pre) && name.ends_with(suf),
        }
    }
}

/// A pattern's components, and its row of the table (None: the profile's).
#[derive(Clone, Debug)]
struct Pat(Box<[Glob]>, Option<usize>);

impl Pat {
    fn parse(s: &str, row: usize) -> Pat {
        Pat(
            s.trim_end_matches('/')
                .split('/')
                .filter(|c| !c.is_empty())
                .map(|c| Glob::parse(c.as_bytes()))
                .collect(),
            Some(row),
        )
    }

    /// The pattern against the path's components from `i` on.
    #[inline]
    fn at<'a>(&self, i: usize, n: usize, name: &impl Fn(usize) -> &'a [u8]) -> Cover {
        for (k, g) in self.0.iter().enumerate() {
            if i + k == n {
                return Cover::Prefix;
            }
            if !g.matches(name(i + k)) {
                return Cover::None;
            }
        }
        Cover::Full
    }
}

/// Patterns by the length of their first component's name (a literal
/// one), so a name is tried against the few of its length only; the rest
/// (a `*` first, or a long name) are tried always.
#[derive(Clone, Debug, Default)]
struct Index {
    by_len: Vec<Vec<Pat>>,
    other: Vec<Pat>,
}

/// Lengths with a bucket of their own.
const BUCKETS: usize = 48;

impl Index {
    fn add(&mut self, p: Pat) {
        if self.by_len.is_empty() {
            self.by_len = vec![Vec::new(); BUCKETS];
        }
        match &p.0[0] {
            Glob::Exact(e) if e.len() < BUCKETS => self.by_len[e.len()].push(p),
            _ => self.other.push(p),
        }
    }

    #[inline]
    fn candidates(&self, name: &[u8]) -> impl Iterator<Item = &Pat> {
        self.by_len.get(name.len()).into_iter().flatten().chain(&self.other)
    }

    fn all(&self) -> impl Iterator<Item = &Pat> {
        self.by_len.iter().flatten().chain(&self.other)
    }
}

/// The host-tool patterns of a profile.
#[derive(Clone, Debug, Default)]
pub struct Matcher {
    /// Patterns at any depth.
    any: Index,
    /// Patterns at the root only (root rows and the profile's additions).
    root: Index,
    /// `host_config_writable`: root-relative paths at or below which
    /// nothing is a host-tool path.
    writable: Vec<Vec<Box<[u8]>>>,
}

impl Matcher {
    /// The table's Domain-side rows, the profile's `host_config` additions
    /// (root-relative literal paths) and its `host_config_writable`
    /// exceptions (root-relative literal paths: everything at or below one
    /// stays host-side).
    pub fn new(additions: &[PathBuf], writable: &[PathBuf]) -> Matcher {
        let mut m = Matcher::default();
        for (i, row) in TABLE.iter().enumerate() {
            if row.treatment != Treatment::DomainSide {
                continue;
            }
            for p in row.patterns {
                let pat = Pat::parse(p, i);
                match row.depth {
                    Depth::Root => m.root.add(pat),
                    Depth::Any => m.any.add(pat),
                }
            }
        }
        for a in additions {
            let comps: Box<[Glob]> = a
                .components()
                .map(|c| Glob::Exact(c.as_os_str().as_bytes().into()))
                .collect();
            if comps.is_empty() {
                // The workspace itself: everything.
                m.root
                    .add(Pat(Box::new([Glob::Star(Box::default(), Box::default())]), None));
            } else {
                m.root.add(Pat(comps, None));
            }
        }
        m.writable = writable
            .iter()
            .map(|w| w.components().map(|c| c.as_os_str().as_bytes().into()).collect())
            .collect();
        m
    }

    /// The table alone (no profile), shared.
    pub fn table() -> Arc<Matcher> {
        static M: OnceLock<Arc<Matcher>> = OnceLock::new();
        M.get_or_init(|| Arc::new(Matcher::new(&[], &[]))).clone()
    }

    /// How the path with these components (all normal) stands.
    pub fn classify(&self, comps: &[Component]) -> Cover {
        let name = |i: usize| comps[i].as_os_str().as_bytes();
        self.classify_with(comps.len(), &name)
    }

    /// `classify` of a relative path.
    pub fn classify_path(&self, rel: &Path) -> Cover {
        let comps: Vec<Component> = rel.components().collect();
        self.classify(&comps)
    }

    /// True when `rel` is at or below a host-tool path.
    pub fn covers(&self, rel: &Path) -> bool {
        self.classify_path(rel) == Cover::Full
    }

    /// The tool whose row covers `rel` (None: not covered, or covered by
    /// the profile's `host_config` only). For messages, not hot paths.
    pub fn tool_of(&self, rel: &Path) -> Option<&'static Row> {
        let comps: Vec<&[u8]> = rel.components().map(|c| c.as_os_str().as_bytes()).collect();
        let name = |i: usize| comps[i];
        let n = comps.len();
        let root = self.root.all().filter(|p| p.at(0, n, &name) == Cover::Full);
        let any = (0..n).flat_map(|i| self.any.all().filter(move |p| p.at(i, n, &name) == Cover::Full));
        root.chain(any).find_map(|p| p.1).map(|i| &TABLE[i])
    }

    /// True when renaming `from` to `to` on the host would take content
    /// out of a `host_config_writable` exception into a position the
    /// table covers: `from` at or below an exception and `to` not, or
    /// `from` a directory above one (`mv .vscode/x sub` with
    /// `.vscode/x/.envrc`, or `mv a b` with `a/tools` exempt, would put a
    /// host-side file the sandbox wrote at `sub/.envrc` or under `b/` on
    /// the host). With `exchange` both names move.
    pub fn leaves_writable(&self, from: &Path, to: &Path, exchange: bool) -> bool {
        if self.writable.is_empty() {
            return false;
        }
        let out = |a: &Path, b: &Path| (self.exempt(a) && !self.exempt(b)) || self.above_exempt(a);
        out(from, to) || (exchange && out(to, from))
    }

    fn comps(rel: &Path) -> Vec<&[u8]> {
        rel.components().map(|c| c.as_os_str().as_bytes()).collect()
    }

    /// At or below a `host_config_writable` path.
    fn exempt(&self, rel: &Path) -> bool {
        let c = Self::comps(rel);
        self.writable
            .iter()
            .any(|w| w.len() <= c.len() && w.iter().zip(&c).all(|(a, b)| **a == **b))
    }

    /// Strictly above a `host_config_writable` path (or the root).
    fn above_exempt(&self, rel: &Path) -> bool {
        let c = Self::comps(rel);
        self.writable
            .iter()
            .any(|w| w.len() > c.len() && w.iter().zip(&c).all(|(a, b)| **a == **b))
    }

    fn classify_with<'a>(&self, n: usize, name: &impl Fn(usize) -> &'a [u8]) -> Cover {
        if n == 0 {
            return Cover::None;
        }
        let mut cover = Cover::None;
        for p in self.root.candidates(name(0)) {
            match p.at(0, n, name) {
                Cover::Full => return self.unless_writable(n, name),
                Cover::Prefix => cover = Cover::Prefix,
                Cover::None => {}
            }
        }
        for i in 0..n {
            for p in self.any.candidates(name(i)) {
                match p.at(i, n, name) {
                    Cover::Full => return self.unless_writable(n, name),
                    Cover::Prefix => cover = Cover::Prefix,
                    Cover::None => {}
                }
            }
        }
        cover
    }

    fn unless_writable<'a>(&self, n: usize, name: &impl Fn(usize) -> &'a [u8]) -> Cover {
        let exempt = self
            .writable
            .iter()
            .any(|w| w.len() <= n && w.iter().enumerate().all(|(i, c)| **c == *name(i)));
        if exempt {
            Cover::None
        } else {
            Cover::Full
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::table::{Depth, Treatment, TABLE};
    use super::*;

    fn m() -> Matcher {
        Matcher::new(&[], &[])
    }

    /// An example name for a pattern component (`*` filled in).
    fn example(c: &str) -> String {
        c.replace('*', "local")
    }

    #[test]
    fn every_row_at_its_depths() {
        let m = m();
        for row in TABLE {
            for p in row.patterns {
                let rel: String = p
                    .trim_end_matches('/')
                    .split('/')
                    .map(example)
                    .collect::<Vec<_>>()
                    .join("/");
                let shadowed = row.treatment == Treatment::DomainSide;
                for (path, want) in [
                    (rel.clone(), shadowed),
                    (format!("{rel}/x/y"), shadowed),
                    (format!("sub/{rel}"), shadowed && row.depth == Depth::Any),
                    (format!("a/b/c/{rel}/d"), shadowed && row.depth == Depth::Any),
                ] {
                    assert_eq!(m.covers(Path::new(&path)), want, "{} {p}: {path}", row.tool);
                }
                // Every leading part of a multi-component pattern is a prefix.
                let parts: Vec<&str> = p.trim_end_matches('/').split('/').collect();
                for k in 1..parts.len() {
                    let lead = parts[..k].join("/");
                    if shadowed {
                        assert_eq!(m.classify_path(Path::new(&lead)), Cover::Prefix, "{lead}");
                        if row.depth == Depth::Any {
                            assert_eq!(m.classify_path(&Path::new("x/y").join(&lead)), Cover::Prefix, "{lead}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn whole_names_only() {
        let m = m();
        for p in [
            "x.vscode",
            ".vscodex",
            ".envrc.bak",
            "envrc",
            ".env",
            "sub/.env",
            "a.code-workspacex",
            ".cargo/config.toml.orig",
            ".cargo/other.toml",
            "cargo/config.toml",
            "src/main.rs",
            "sub/.gitmodules",
            ".husky/pre-commit",
            ".config/other",
            "mise/other.toml",
            "",
        ] {
            assert_eq!(m.classify_path(Path::new(p)), Cover::None, "{p}");
        }
        for p in [
            ".code-workspace",
            "a/b.code-workspace",
            "sub/.claude/skills/x/SKILL.md",
            "sub/.mcp.json",
            "deep/er/.cargo/config",
            "x/mise.production.toml",
            ".config/mise/config.toml",
            // The top of a nested repository's work tree (pre-commit,
            // lefthook), and where ddev looks upward from.
            "vendor/lib/.pre-commit-config.yaml",
            "vendor/lib/lefthook.yml",
            "sub/.ddev/config.yaml",
        ] {
            assert_eq!(m.classify_path(Path::new(p)), Cover::Full, "{p}");
        }
        for p in [".cargo", "a/.cargo", ".config", "x/.config", "mise", "x/.config/mise/"] {
            let want = if p.ends_with("mise/") {
                Cover::Full
            } else {
                Cover::Prefix
            };
            assert_eq!(m.classify_path(Path::new(p)), want, "{p}");
        }
    }

    #[test]
    fn profile_additions_and_writable() {
        let m = Matcher::new(&["tools/run.json".into()], &[".vscode".into(), "sub/.envrc".into()]);
        assert!(m.covers(Path::new("tools/run.json")));
        assert_eq!(m.classify_path(Path::new("tools")), Cover::Prefix);
        assert!(!m.covers(Path::new("x/tools/run.json")), "additions are root-relative");
        assert!(!m.covers(Path::new(".vscode/tasks.json")));
        assert!(
            m.covers(Path::new("sub/.vscode/tasks.json")),
            "writable is root-relative"
        );
        assert!(!m.covers(Path::new("sub/.envrc")));
        assert!(m.covers(Path::new(".envrc")));
        let all = Matcher::new(&[PathBuf::new()], &[]);
        assert!(all.covers(Path::new("src/main.rs")));
    }

    /// Host-side content of a `host_config_writable` exception (which the
    /// sandbox writes freely) never moves out of it on the host.
    #[test]
    fn moves_out_of_writable() {
        let m = Matcher::new(&[], &[".vscode".into(), "a/tools".into()]);
        let p = Path::new;
        // `.vscode/x/.envrc` is host-side (exempt): moving `x` out would
        // put it at `sub/.envrc` on the host.
        assert!(m.covers(p("sub/.envrc")) && !m.covers(p(".vscode/x/.envrc")));
        assert!(m.leaves_writable(p(".vscode/x"), p("sub"), false));
        assert!(m.leaves_writable(p(".vscode"), p("y"), false));
        assert!(m.leaves_writable(p("a"), p("b"), false), "a directory above one");
        assert!(m.leaves_writable(p("other"), p(".vscode/x"), true), "exchanged");
        // Within an exception, and into one: as before.
        assert!(!m.leaves_writable(p(".vscode/a.tmp"), p(".vscode/settings.json"), false));
        assert!(!m.leaves_writable(p("tmp"), p(".vscode/settings.json"), false));
        assert!(!m.leaves_writable(p("src/x"), p("src/y"), false));
        assert!(!Matcher::new(&[], &[]).leaves_writable(p("a"), p("b"), true));
    }

    /// The cost of one verdict on the lookup path, for the record:
    /// `cargo test --release --lib classify_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn classify_cost() {
        let m = m();
        let paths: Vec<Vec<Component>> = [
            "src/d12/f3.txt",
            "node_modules/pkg/lib/index.js",
            "a/b/c/d/e/f/g.rs",
            ".github/workflows/ci.yml",
            "sub/.envrc",
            "README",
        ]
        .iter()
        .map(|p| Path::new(p).components().collect())
        .collect();
        let n = 1_000_000;
        let t = std::time::Instant::now();
        let mut hits = 0;
        for i in 0..n {
            if m.classify(std::hint::black_box(&paths[i % paths.len()])) != Cover::None {
                hits += 1;
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / n as f64;
        println!("classify: {ns:.1} ns a path ({hits} covered)");
        assert!(hits > 0);
    }
}
