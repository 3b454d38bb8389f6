//! Git Sentry: the sandbox must never make host `git` honour
//! configuration or hooks the sandbox chose.
//!
//! A layout of read-only binds cannot stop a sandbox from *creating*
//! `.git/commondir` in a writable `.git`, so the workspace is
//! not bound directly: the Runtime Supervisor serves it through a filtering
//! FUSE view (`fusefs`), and every mutating operation is checked here first.
//! This module is the pure policy plus the discovery of the repository
//! layout (plain `.git` directory or linked worktree); it makes no mounts.
//!
//! Protected (no create, write, truncate, chmod, rename from/to, unlink,
//! link from/to), in every Git directory of a view:
//! - `config`, `config.worktree`, `commondir`, `gitdir`, `hooks/**`,
//!   `objects/info/alternates`, `objects/info/http-alternates`, `info/exclude`;
//! - under `modules/**` (submodule Git directories): the same names;
//! - under `worktrees/NAME/` for every worktree the host has (made before
//!   or during the session; the sandbox's own are kept Domain-side by the
//!   view, see `gitshape`): the entry itself, `config.worktree`,
//!   `commondir`, `gitdir`, `hooks/**`;
//! - every `.git` entry at any depth of the workspace (file or directory),
//!   on the host (one the host lacks is made Domain-side by the view, see
//!   `gitshape`; without a store, creating it is refused).
//!
//! Inside a Git directory, symlinks cannot be created and directories cannot
//! be renamed in or out (a swapped `objects/info` or `hooks` directory would
//! otherwise carry sandbox-written files under a protected name).

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};

#[derive(Debug)]
pub enum GitError {
    Read(PathBuf, io::Error),
    BadGitFile(PathBuf),
    RelativeGitdir(PathBuf, PathBuf),
    CommonDirPlacement(PathBuf),
    UnsafePath(PathBuf),
}

impl fmt::Display for GitError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            GitError::Read(p, e) => write!(f, "reading {}: {e}", p.display()),
            GitError::BadGitFile(p) => write!(
                f,
                "{} is a file but not a `gitdir: PATH` pointer: repair it with `git worktree repair`",
                p.display()
            ),
            GitError::RelativeGitdir(p, g) => write!(
                f,
                "{} points to the relative Git directory {}: Lazaret needs absolute worktree paths \
                 (run `git worktree repair` with worktree.useRelativePaths=false)",
                p.display(),
                g.display()
            ),
            GitError::CommonDirPlacement(p) => write!(
                f,
                "the linked worktree's Git directory {} is not inside its common directory's `worktrees/`: \
                 move it with `git worktree move` or `git worktree repair`",
                p.display()
            ),
            GitError::UnsafePath(p) => write!(
                f,
                "the Git common directory {} cannot be mounted in the sandbox at that path \
                 (it contains a tab or newline, or overlaps /workspace, /workspaces, /proc, /dev, /sys or /.lazaret)",
                p.display()
            ),
        }
    }
}

impl std::error::Error for GitError {}

/// How the workspace's repository is laid out on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GitLayout {
    /// No `.git` entry: not a repository (creating `.git` is still refused).
    None,
    /// `WORKSPACE/.git` is the Git directory.
    Dir { git_dir: PathBuf },
    /// `WORKSPACE/.git` is a `gitdir:` file of a linked worktree. `common` is
    /// the path as Git will resolve it in the sandbox (lexical, as written),
    /// `common_real` the canonical host directory served at that path.
    Linked {
        git_dir: PathBuf,
        common: PathBuf,
        common_real: PathBuf,
        worktree_name: String,
    },
}

impl GitLayout {
    /// The directory holding `index` and `HEAD` of the workspace.
    pub fn git_dir(&self) -> Option<&Path> {
        match self {
            GitLayout::None => None,
            GitLayout::Dir { git_dir } | GitLayout::Linked { git_dir, .. } => Some(git_dir),
        }
    }
    /// The directory holding `config`, `objects`, `refs` and `info/exclude`.
    pub fn common_dir(&self) -> Option<&Path> {
        match self {
            GitLayout::None => None,
            GitLayout::Dir { git_dir } => Some(git_dir),
            GitLayout::Linked { common_real, .. } => Some(common_real),
        }
    }
}

/// Reads the layout without running host `git` (its config is not trusted
/// to be free of commands).
pub fn discover(workspace: &Path) -> Result<GitLayout, GitError> {
    let dotgit = workspace.join(".git");
    let md = match std::fs::symlink_metadata(&dotgit) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(GitLayout::None),
        Err(e) => return Err(GitError::Read(dotgit, e)),
    };
    if md.is_dir() {
        return Ok(GitLayout::Dir { git_dir: dotgit });
    }
    if !md.is_file() {
        return Err(GitError::BadGitFile(dotgit));
    }
    let text = std::fs::read_to_string(&dotgit).map_err(|e| GitError::Read(dotgit.clone(), e))?;
    let git_dir = parse_gitdir_file(&text).ok_or_else(|| GitError::BadGitFile(dotgit.clone()))?;
    if !git_dir.is_absolute() {
        return Err(GitError::RelativeGitdir(dotgit, git_dir));
    }
    let cd_file = git_dir.join("commondir");
    let common = match std::fs::read_to_string(&cd_file) {
        Ok(t) => normalize(&git_dir.join(t.trim_end_matches(['\n', '\r']))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(GitLayout::Dir { git_dir }),
        Err(e) => return Err(GitError::Read(cd_file, e)),
    };
    let worktree_name = match git_dir.strip_prefix(common.join("worktrees")) {
        Ok(rel) if rel.components().count() == 1 => rel.to_string_lossy().into_owned(),
        _ => return Err(GitError::CommonDirPlacement(git_dir)),
    };
    let common_real = std::fs::canonicalize(&common).map_err(|e| GitError::Read(common.clone(), e))?;
    check_guest_path(&common)?;
    Ok(GitLayout::Linked {
        git_dir,
        common,
        common_real,
        worktree_name,
    })
}

/// `gitdir: PATH` → PATH.
pub fn parse_gitdir_file(text: &str) -> Option<PathBuf> {
    let line = text.lines().next()?;
    let p = line.strip_prefix("gitdir:")?.trim();
    (!p.is_empty()).then(|| PathBuf::from(p))
}

/// Lexical normalization: drops `.`, resolves `..` against the prefix.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c.as_os_str()),
        }
    }
    out
}

/// A common dir is mounted at its own absolute path inside the sandbox; it
/// must not shadow anything Lazaret mounts.
pub fn check_guest_path(p: &Path) -> Result<(), GitError> {
    let s = p.to_string_lossy();
    let bad = s.contains(['\t', '\n'])
        || !p.is_absolute()
        || p == Path::new("/")
        || ["/workspace", "/workspaces", "/proc", "/dev", "/sys", "/.lazaret"]
            .iter()
            .any(|r| p.starts_with(r) || Path::new(r).starts_with(p));
    if bad {
        return Err(GitError::UnsafePath(p.to_path_buf()));
    }
    Ok(())
}

// ---- the policy ----------------------------------------------------------

/// Which tree a FUSE view shows, for the policy.
#[derive(Clone, Debug)]
pub struct Sentry {
    /// The view's root is itself a Git directory (a linked worktree's common
    /// dir); otherwise it is a workspace whose `.git` entries are protected.
    root_is_git_dir: bool,
    /// Names under `worktrees/` that existed when the view started, as view
    /// paths (`.git/worktrees/NAME` or `worktrees/NAME`). Informational: every
    /// host worktree is protected, whenever it appeared.
    #[allow(dead_code)] // kept for diagnostics; nothing reads it yet
    existing_worktrees: HashSet<PathBuf>,
}

const SENSITIVE_FILES: &[&str] = &["config", "config.worktree", "commondir", "gitdir"];
const SENSITIVE_PATHS: &[&str] = &[
    "objects/info/alternates",
    "objects/info/http-alternates",
    "info/exclude",
];

impl Sentry {
    /// The policy for a workspace view (`root_is_git_dir = false`) or a common
    /// dir view, given the worktrees that exist now under its Git directory.
    pub fn new(root_is_git_dir: bool, existing_worktrees: impl IntoIterator<Item = PathBuf>) -> Sentry {
        Sentry {
            root_is_git_dir,
            existing_worktrees: existing_worktrees.into_iter().collect(),
        }
    }

    /// Scans `ROOT/.git/worktrees` (or `ROOT/worktrees`) for the view.
    pub fn for_view(root: &Path, root_is_git_dir: bool) -> Sentry {
        let rel = if root_is_git_dir {
            PathBuf::from("worktrees")
        } else {
            PathBuf::from(".git/worktrees")
        };
        let names = std::fs::read_dir(root.join(&rel))
            .map(|rd| rd.flatten().map(|e| rel.join(e.file_name())).collect::<Vec<_>>())
            .unwrap_or_default();
        Sentry::new(root_is_git_dir, names)
    }

    /// Splits a view path into (git dir prefix, path inside it) when it lies
    /// inside a Git directory. A path that *is* a `.git` entry returns None
    /// here; see `is_protected`.
    fn git_split<'a>(&self, rel: &'a Path) -> Option<(PathBuf, Vec<&'a str>)> {
        let comps: Vec<&str> = rel
            .components()
            .map(|c| c.as_os_str().to_str().unwrap_or("\u{0}"))
            .collect();
        if self.root_is_git_dir {
            return Some((PathBuf::new(), comps));
        }
        let i = comps.iter().position(|c| *c == ".git")?;
        if i + 1 == comps.len() {
            return None;
        }
        let prefix: PathBuf = comps[..=i].iter().collect();
        Some((prefix, comps[i + 1..].to_vec()))
    }

    /// True when `rel` lies inside (strictly below) a Git directory.
    pub fn in_git_dir(&self, rel: &Path) -> bool {
        self.git_split(rel).is_some_and(|(_, sub)| !sub.is_empty())
    }

    /// True when the sandbox may not create, change, replace, rename or
    /// remove the entry at view path `rel`.
    pub fn is_protected(&self, rel: &Path) -> bool {
        if !self.root_is_git_dir && rel.file_name().is_some_and(|n| n == ".git") {
            return true;
        }
        let Some((_, sub)) = self.git_split(rel) else {
            return false;
        };
        if sub.is_empty() {
            return false;
        }
        if sensitive(&sub) {
            return true;
        }
        match sub[0] {
            "modules" => {
                let last = sub[sub.len() - 1];
                SENSITIVE_FILES.contains(&last)
                    || sub.contains(&"hooks")
                    || sub.len() >= 3 && sub[sub.len() - 3..] == ["objects", "info", "alternates"]
            }
            "worktrees" if sub.len() >= 2 => {
                // Any host worktree, also one added after the view started:
                // the view serves the sandbox's own worktrees Domain-side.
                sub.len() == 2 || sensitive(&sub[2..])
            }
            _ => false,
        }
    }
}

/// Sensitive names relative to one Git directory.
fn sensitive(sub: &[&str]) -> bool {
    if sub.first() == Some(&"hooks") {
        return true;
    }
    if sub.len() == 1 && SENSITIVE_FILES.contains(&sub[0]) {
        return true;
    }
    let joined = sub.join("/");
    SENSITIVE_PATHS.contains(&joined.as_str())
}

// ---- the views the supervisor serves ----------------------------------------

pub use crate::wire::plan::ViewSpec;

/// What the coordinator needs: the views, the bind source for `/workspace`
/// and extra binds for the sandbox bundle.
#[derive(Clone, Debug)]
pub struct ViewPlan {
    pub views: Vec<ViewSpec>,
    pub workspace_source: PathBuf,
    pub binds: Vec<crate::plan::BindMount>,
}

/// Plans the views of a workspace: the workspace itself through the
/// filtering view, plus the common Git directory of a linked worktree,
/// bound at the path its `.git` file names.
pub fn plan_views(
    workspace: &Path,
    layout: &GitLayout,
    gen_dir: &Path,
    ignored_store: Option<&Path>,
) -> Result<ViewPlan, GitError> {
    let bad = |p: &Path| p.to_string_lossy().contains(['\t', '\n']);
    if bad(workspace) || bad(gen_dir) || ignored_store.is_some_and(bad) {
        return Err(GitError::UnsafePath(workspace.to_path_buf()));
    }
    let ws_mnt = gen_dir.join("view-workspace");
    let mut views = vec![ViewSpec {
        source: workspace.to_path_buf(),
        mountpoint: ws_mnt.clone(),
        store: ignored_store.map(Path::to_path_buf),
        git_root: false,
        protect: Vec::new(),
        host_config: Vec::new(),
        host_writable: Vec::new(),
    }];
    let mut binds = Vec::new();
    if let GitLayout::Linked {
        common, common_real, ..
    } = layout
    {
        let mnt = gen_dir.join("view-common");
        views.push(ViewSpec {
            source: common_real.clone(),
            mountpoint: mnt.clone(),
            store: None,
            git_root: true,
            protect: Vec::new(),
            host_config: Vec::new(),
            host_writable: Vec::new(),
        });
        binds.push(crate::plan::BindMount {
            guest: common.to_string_lossy().into_owned(),
            host: mnt,
            read_only: false,
        });
    }
    Ok(ViewPlan {
        views,
        workspace_source: ws_mnt,
        binds,
    })
}

/// The coordinator's part: discovers the layout, plans the views, creates
/// their mount points and the ignored store, and writes `GEN/views` for the
/// supervisor. `owner` is the guest id the developer appears as (the profile `user`'s,
/// or 0).
pub fn prepare_views(
    workspace: &Path,
    gen_dir: &Path,
    ignored_store: Option<&Path>,
    owner: u32,
    host_config: Vec<PathBuf>,
    host_writable: Vec<PathBuf>,
) -> Result<ViewPlan, GitError> {
    let layout = discover(workspace)?;
    let mut plan = plan_views(workspace, &layout, gen_dir, ignored_store)?;
    plan.views[0].protect = host_git_protected(workspace)?;
    plan.views[0].host_config = host_config;
    plan.views[0].host_writable = host_writable;
    let io = |p: &Path, e| GitError::Read(p.to_path_buf(), e);
    for v in &plan.views {
        std::fs::create_dir_all(&v.mountpoint).map_err(|e| io(&v.mountpoint, e))?;
        if let Some(s) = &v.store {
            std::fs::create_dir_all(s).map_err(|e| io(s, e))?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(s, std::fs::Permissions::from_mode(0o700));
        }
    }
    let f = gen_dir.join("views");
    let msg = crate::wire::plan::PlanMsg::Views {
        owner,
        views: plan.views.clone(),
    };
    crate::wire::plan::write_plan(&f, &msg).map_err(|e| io(&f, e))?;
    Ok(plan)
}

/// Adds plain views (no ignored store, no host Git protections beyond the
/// view's own) of the volume directories `volumes` as (host dir, mount
/// point) to `GEN/views`, written by [`prepare_views`] before: a profile
/// `user` owns its volumes inside as it owns the workspace.
pub fn add_volume_views(gen_dir: &Path, volumes: &[(PathBuf, PathBuf)]) -> Result<(), GitError> {
    let io = |p: &Path, e| GitError::Read(p.to_path_buf(), e);
    let f = gen_dir.join("views");
    let (owner, mut views) = crate::wire::plan::read_views(&f)
        .map_err(|e| GitError::Read(f.clone(), std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    for (src, mnt) in volumes {
        std::fs::create_dir_all(mnt).map_err(|e| io(mnt, e))?;
        views.push(ViewSpec {
            source: src.clone(),
            mountpoint: mnt.clone(),
            store: None,
            git_root: false,
            protect: Vec::new(),
            host_config: Vec::new(),
            host_writable: Vec::new(),
        });
    }
    let msg = crate::wire::plan::PlanMsg::Views { owner, views };
    crate::wire::plan::write_plan(&f, &msg).map_err(|e| io(&f, e))
}

/// The (directory, name) a file volume is served from: the file's real
/// location, symlinks resolved on the host (the developer's own path), so
/// the view of that directory holds the file itself.
pub fn file_volume_source(host: &Path) -> Result<(PathBuf, std::ffi::OsString), GitError> {
    let real = std::fs::canonicalize(host).map_err(|e| GitError::Read(host.to_path_buf(), e))?;
    match (real.parent(), real.file_name()) {
        (Some(dir), Some(name)) => Ok((dir.to_path_buf(), name.to_os_string())),
        _ => Err(GitError::Read(
            host.to_path_buf(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a file volume needs a directory to be served from",
            ),
        )),
    }
}

/// What host Git reads from inside the workspace besides `.git`: its
/// effective `core.hooksPath` and every configuration file it includes
/// (`git config --list --show-origin` run on the host as the user, which
/// reads configuration and runs nothing). Returned as view paths. Without a
/// host `git` there is nothing to protect. A path Lazaret cannot express
/// fails the start.
pub fn host_git_protected(workspace: &Path) -> Result<Vec<PathBuf>, GitError> {
    // Both readings start before either is collected: they only read, and
    // each `git` costs about 1.5 ms to start.
    let start = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()
    };
    let collect = |child: Option<std::process::Child>| -> Option<Vec<u8>> {
        let o = child?.wait_with_output().ok()?;
        o.status.success().then_some(o.stdout)
    };
    let hooks = start(&["config", "--path", "--get", "core.hooksPath"]);
    let list = start(&["config", "--list", "--show-origin", "-z"]);
    let mut found = Vec::new();
    if let Some(out) = collect(hooks) {
        let v = String::from_utf8_lossy(&out).trim_end_matches('\n').to_string();
        if !v.is_empty() {
            found.push(workspace.join(v));
        }
    }
    if let Some(out) = collect(list) {
        found.extend(config_origins(&out).into_iter().map(|p| workspace.join(p)));
    }
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let mut rels = Vec::new();
    for p in found {
        let real = canonical_prefix(&normalize(&p));
        if let Ok(rel) = real.strip_prefix(&ws) {
            if rel.starts_with(".git") {
                continue;
            }
            if rel.to_string_lossy().contains(['\t', '\n']) {
                return Err(GitError::UnsafePath(real.clone()));
            }
            if !rels.contains(&rel.to_path_buf()) {
                rels.push(rel.to_path_buf());
            }
        }
    }
    Ok(rels)
}

/// The `file:` origins of `git config --list --show-origin -z` output
/// (records: `ORIGIN\0KEY\nVALUE\0`).
fn config_origins(out: &[u8]) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut v = Vec::new();
    for (i, rec) in out.split(|&b| b == 0).enumerate() {
        if i % 2 == 0 {
            if let Some(p) = rec.strip_prefix(b"file:") {
                let p = PathBuf::from(std::ffi::OsStr::from_bytes(p));
                if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
    }
    v
}

/// `p` with its longest existing prefix resolved (symlinks included).
fn canonical_prefix(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(c) = std::fs::canonicalize(&cur) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match (cur.file_name().map(|n| n.to_os_string()), cur.parent()) {
            (Some(n), Some(par)) => {
                rest.push(n);
                cur = par.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> Sentry {
        Sentry::new(false, [PathBuf::from(".git/worktrees/old")])
    }

    #[test]
    fn protects_config_hooks_and_redirections() {
        let s = ws();
        for p in [
            ".git",
            ".git/config",
            ".git/hooks",
            ".git/hooks/pre-commit",
            ".git/hooks/sub/x",
            ".git/commondir",
            ".git/gitdir",
            ".git/config.worktree",
            ".git/objects/info/alternates",
            ".git/objects/info/http-alternates",
            ".git/info/exclude",
            ".git/modules/sub/config",
            ".git/modules/a/b/hooks/post-checkout",
            ".git/modules/sub/objects/info/alternates",
            ".git/worktrees/old",
            ".git/worktrees/old/commondir",
            ".git/worktrees/old/gitdir",
            ".git/worktrees/old/config.worktree",
            "sub/.git",
            "sub/.git/config",
            "a/b/.git/hooks/pre-push",
        ] {
            assert!(s.is_protected(Path::new(p)), "{p} must be protected");
        }
    }

    #[test]
    fn leaves_what_git_writes_writable() {
        let s = ws();
        for p in [
            "src/config",
            "hooks/x",
            ".gitignore",
            ".git/index",
            ".git/index.lock",
            ".git/HEAD",
            ".git/ORIG_HEAD",
            ".git/refs/heads/config",
            ".git/refs/heads/hooks",
            ".git/logs/refs/heads/hooks",
            ".git/objects/ab/cdef",
            ".git/objects/info/commit-graph",
            ".git/objects/info/packs",
            ".git/packed-refs",
            ".git/rebase-merge/done",
            ".git/refs/stash",
            ".git/worktrees/old/HEAD",
            ".git/worktrees/old/index",
        ] {
            assert!(!s.is_protected(Path::new(p)), "{p} must stay writable");
        }
    }

    #[test]
    fn common_dir_view_protects_its_root_names() {
        let s = Sentry::new(true, [PathBuf::from("worktrees/wt")]);
        assert!(s.is_protected(Path::new("config")));
        assert!(s.is_protected(Path::new("hooks/pre-commit")));
        assert!(s.is_protected(Path::new("commondir")));
        assert!(s.is_protected(Path::new("worktrees/wt/gitdir")));
        assert!(s.is_protected(Path::new("worktrees/wt")));
        assert!(
            s.is_protected(Path::new("worktrees/late/commondir")),
            "added on the host later"
        );
        assert!(!s.is_protected(Path::new("worktrees/wt/HEAD")));
        assert!(!s.is_protected(Path::new("refs/heads/main")));
        assert!(s.in_git_dir(Path::new("objects")));
    }

    #[test]
    fn git_dir_membership() {
        let s = ws();
        assert!(s.in_git_dir(Path::new(".git/objects/info")));
        assert!(s.in_git_dir(Path::new("x/.git/refs")));
        assert!(!s.in_git_dir(Path::new(".git")));
        assert!(!s.in_git_dir(Path::new("src/a")));
    }

    fn views_round_trip(v: &[ViewSpec]) -> Vec<ViewSpec> {
        use crate::wire::plan::PlanMsg;
        let bytes = crate::wire::codec::Message::encode(&PlanMsg::Views {
            owner: 0,
            views: v.to_vec(),
        });
        match crate::wire::decode_one::<PlanMsg>(&bytes).unwrap() {
            PlanMsg::Views { views, .. } => views,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn plans_views_for_plain_and_linked_workspaces() {
        let p = plan_views(
            Path::new("/h/ws"),
            &GitLayout::Dir {
                git_dir: "/h/ws/.git".into(),
            },
            Path::new("/r/gen"),
            Some(Path::new("/s/d/ignored")),
        )
        .unwrap();
        assert_eq!(p.workspace_source, PathBuf::from("/r/gen/view-workspace"));
        assert!(p.binds.is_empty());
        assert_eq!(views_round_trip(&p.views), p.views);
        let linked = GitLayout::Linked {
            git_dir: "/h/m/.git/worktrees/w".into(),
            common: "/h/m/.git".into(),
            common_real: "/real/m/.git".into(),
            worktree_name: "w".into(),
        };
        let p = plan_views(Path::new("/h/w"), &linked, Path::new("/r/gen"), None).unwrap();
        assert_eq!(p.views.len(), 2);
        assert!(p.views[1].git_root && p.views[1].source == Path::new("/real/m/.git"));
        assert_eq!(p.binds[0].guest, "/h/m/.git");
        assert_eq!(views_round_trip(&p.views), p.views);
        assert!(plan_views(Path::new("/h/a\tb"), &GitLayout::None, Path::new("/r"), None).is_err());
    }

    #[test]
    fn protected_paths_round_trip_and_config_origins() {
        let mut p = plan_views(Path::new("/h/ws"), &GitLayout::None, Path::new("/r/gen"), None).unwrap();
        p.views[0].protect = vec![PathBuf::from(".githooks"), PathBuf::from("team/gitconfig")];
        assert_eq!(views_round_trip(&p.views), p.views);
        let out = b"file:/home/u/.gitconfig\0user.name\nU\0file:.git/config\0core.bare\nfalse\0command line:\0a.b\nc\0file:/home/u/.gitconfig\0x.y\nz\0";
        assert_eq!(
            config_origins(out),
            vec![PathBuf::from("/home/u/.gitconfig"), PathBuf::from(".git/config")]
        );
    }

    #[test]
    fn gitdir_files_and_paths() {
        assert_eq!(
            parse_gitdir_file("gitdir: /h/m/.git/worktrees/w\n"),
            Some(PathBuf::from("/h/m/.git/worktrees/w"))
        );
        assert_eq!(parse_gitdir_file("nope"), None);
        assert_eq!(
            normalize(Path::new("/h/m/.git/worktrees/w/../..")),
            PathBuf::from("/h/m/.git")
        );
        assert!(check_guest_path(Path::new("/home/u/m/.git")).is_ok());
        assert!(check_guest_path(Path::new("/workspace/.git")).is_err());
        assert!(check_guest_path(Path::new("/")).is_err());
    }

    #[test]
    fn discovers_plain_and_linked_layouts() {
        let d = std::env::temp_dir().join(format!("lz-gs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("main/.git/worktrees/wt")).unwrap();
        std::fs::create_dir_all(d.join("wt")).unwrap();
        std::fs::write(d.join("main/.git/worktrees/wt/commondir"), "../..\n").unwrap();
        let gd = d.join("main/.git/worktrees/wt");
        std::fs::write(d.join("wt/.git"), format!("gitdir: {}\n", gd.display())).unwrap();
        assert_eq!(
            discover(&d.join("main")).unwrap(),
            GitLayout::Dir {
                git_dir: d.join("main/.git")
            }
        );
        match discover(&d.join("wt")).unwrap() {
            GitLayout::Linked {
                common, worktree_name, ..
            } => {
                assert_eq!(common, d.join("main/.git"));
                assert_eq!(worktree_name, "wt");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(discover(&d).unwrap(), GitLayout::None);
        std::fs::write(d.join("wt/.git"), "gitdir: ../main/.git/worktrees/wt\n").unwrap();
        assert!(matches!(discover(&d.join("wt")), Err(GitError::RelativeGitdir(..))));
        let _ = std::fs::remove_dir_all(&d);
    }
}
