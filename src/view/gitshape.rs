//! The repository-shape rule of the workspace view: no sequence of
//! creates, writes, renames, links or symlinks from inside may leave, on the
//! host, a directory host Git would take as a Git directory, other than the
//! Git directories the host already has. Pure policy; `fusefs` applies it.
//!
//! Host Git takes directory `D` as a Git directory (`setup.c`,
//! `is_git_directory`) when `D/HEAD` is a valid HEAD and, in `D`'s common
//! directory (`D/commondir` if present, else `D`), `objects` and `refs`
//! are accessible; discovery also follows a `.git` entry (directory, or a
//! `gitdir:` file) in every directory it walks through. So, by name:
//!
//! - **shape**: a directory holding `HEAD` and (`commondir`, or both
//!   `objects` and `refs`), whatever their types;
//! - **`.git`**: an entry named `.git`, whatever its type.
//!
//! The view keeps both Domain-side: a `.git` entry the host does not have
//! and the name that would complete a shape in a host directory are created
//! in the Domain's store instead (inside they work as usual), and new
//! entries directly under a host Git directory's `worktrees/` or `modules/`
//! too (linked worktrees and submodule Git directories the sandbox makes).
//! Names compare ASCII case-insensitively (a case-folding directory would
//! resolve `head` as `HEAD`). Host shapes, made before or during the
//! session, are detected at access time and get the Git Sentry's protection
//! (`sensitive_anchors`).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Names that make up a repository shape.
pub const SHAPE_NAMES: [&str; 4] = ["HEAD", "objects", "refs", "commondir"];

fn eq(name: &OsStr, want: &str) -> bool {
    name.as_encoded_bytes().eq_ignore_ascii_case(want.as_bytes())
}

/// An entry named `.git` (any case).
pub fn is_dotgit(name: &OsStr) -> bool {
    eq(name, ".git")
}

/// One of `HEAD`, `objects`, `refs`, `commondir` (any case).
pub fn is_shape_name(name: &OsStr) -> bool {
    SHAPE_NAMES.iter().any(|n| eq(name, n))
}

/// True when a directory whose entries satisfy `has` (by exact canonical
/// name) is a repository shape.
pub fn is_shape(has: &dyn Fn(&str) -> bool) -> bool {
    has("HEAD") && (has("commondir") || (has("objects") && has("refs")))
}

/// True when adding `name` to a host directory whose entries satisfy `has`
/// makes it a repository shape.
pub fn completes_shape(name: &OsStr, has: &dyn Fn(&str) -> bool) -> bool {
    is_shape_name(name) && is_shape(&|n| eq(name, n) || has(n))
}

/// True when `rel` (a view path) is a new entry directly under a Git
/// directory's `worktrees/` or `modules/`: a linked worktree or submodule
/// Git directory, made Domain-side. `in_git_dir` says whether a path lies
/// inside a Git directory.
pub fn is_new_gitdir_slot(rel: &Path, in_git_dir: &dyn Fn(&Path) -> bool) -> bool {
    let Some(parent) = rel.parent() else { return false };
    let Some(last) = parent.file_name() else { return false };
    (last == "worktrees" || last == "modules") && in_git_dir(parent)
}

/// The directories that, if they are Git directories, make `rel` one of
/// their protected paths: for `D/config`, `D/config.worktree`,
/// `D/commondir`, `D/gitdir`, `D/hooks/**`, `D/objects/info/alternates`,
/// `D/objects/info/http-alternates`, `D/info/exclude` and `D/worktrees/N`
/// the candidate is `D` (a worktree's or submodule's own files anchor at
/// its own Git directory, itself a shape). The view checks each candidate
/// on the host (`is_shape`) at access time.
pub fn sensitive_anchors(rel: &Path) -> Vec<PathBuf> {
    let comps: Vec<&OsStr> = rel.iter().collect();
    let n = comps.len();
    let mut out = Vec::new();
    let anchor = |k: usize| comps[..k].iter().collect::<PathBuf>();
    if n >= 1 {
        let last = comps[n - 1];
        if ["config", "config.worktree", "commondir", "gitdir"]
            .iter()
            .any(|s| eq(last, s))
        {
            out.push(anchor(n - 1));
        }
    }
    for (i, c) in comps.iter().enumerate() {
        // `D/modules/NAME` is a Git directory itself: its files anchor there.
        if eq(c, "hooks") || (eq(c, "worktrees") && i + 2 == n) {
            out.push(anchor(i));
        }
    }
    if n >= 3 && eq(comps[n - 3], "objects") && eq(comps[n - 2], "info") {
        let l = comps[n - 1];
        if eq(l, "alternates") || eq(l, "http-alternates") {
            out.push(anchor(n - 3));
        }
    }
    if n >= 2 && eq(comps[n - 2], "info") && eq(comps[n - 1], "exclude") {
        out.push(anchor(n - 2));
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |n| names.contains(&n)
    }

    #[test]
    fn shapes_follow_is_git_directory() {
        assert!(is_shape(&set(&["HEAD", "objects", "refs"])));
        assert!(is_shape(&set(&["HEAD", "commondir"])));
        assert!(!is_shape(&set(&["HEAD", "objects"])));
        assert!(!is_shape(&set(&["objects", "refs", "config"])));
        assert!(!is_shape(&set(&["refs", "commondir"])));
    }

    #[test]
    fn the_completing_name_is_caught_in_any_order_and_case() {
        let os = OsStr::new;
        assert!(completes_shape(os("HEAD"), &set(&["objects", "refs"])));
        assert!(completes_shape(os("head"), &set(&["objects", "refs"])));
        assert!(completes_shape(os("refs"), &set(&["HEAD", "objects"])));
        assert!(completes_shape(os("objects"), &set(&["HEAD", "refs"])));
        assert!(completes_shape(os("commondir"), &set(&["HEAD"])));
        assert!(completes_shape(os("HEAD"), &set(&["commondir"])));
        assert!(!completes_shape(os("HEAD"), &set(&["objects"])));
        assert!(!completes_shape(os("config"), &set(&["HEAD", "objects", "refs"])));
        assert!(!completes_shape(os("refs"), &set(&["objects"])));
        assert!(is_dotgit(os(".git")) && is_dotgit(os(".GIT")) && !is_dotgit(os(".gitignore")));
    }

    /// Every order of creating a shape's names: the last one is caught, so
    /// the host never holds a complete shape the sandbox made.
    #[test]
    fn no_creation_order_completes_a_host_shape() {
        let names = ["HEAD", "objects", "refs", "commondir"];
        for mask in 1u32..16 {
            let chosen: Vec<&str> = names
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, n)| *n)
                .collect();
            // all permutations of `chosen`
            let mut perms = vec![vec![]];
            for _ in 0..chosen.len() {
                let mut next = vec![];
                for p in &perms {
                    for c in &chosen {
                        if !p.contains(c) {
                            let mut q: Vec<&str> = p.clone();
                            q.push(c);
                            next.push(q);
                        }
                    }
                }
                perms = next;
            }
            for p in perms {
                let mut host: Vec<&str> = vec![];
                for n in p {
                    let h = host.clone();
                    if !completes_shape(OsStr::new(n), &|x| h.contains(&x)) {
                        host.push(n);
                    }
                }
                assert!(!is_shape(&|x| host.contains(&x)), "{host:?}");
            }
        }
    }

    #[test]
    fn anchors_of_sensitive_paths() {
        let a = |p: &str| sensitive_anchors(Path::new(p));
        assert_eq!(a("vendor/x.git/config"), vec![PathBuf::from("vendor/x.git")]);
        assert_eq!(a("x/hooks/pre-commit"), vec![PathBuf::from("x")]);
        assert_eq!(a("x/objects/info/alternates"), vec![PathBuf::from("x")]);
        assert_eq!(a("x/info/exclude"), vec![PathBuf::from("x")]);
        assert_eq!(a("x/worktrees/w/commondir"), vec![PathBuf::from("x/worktrees/w")]);
        assert_eq!(a("x/worktrees/w"), vec![PathBuf::from("x")]);
        assert_eq!(a("x/modules/m/config"), vec![PathBuf::from("x/modules/m")]);
        assert!(a("x/modules/m/HEAD").is_empty() && a(".git/modules").is_empty());
        assert_eq!(a("config"), vec![PathBuf::new()]);
        assert!(a("src/main.rs").is_empty());
        assert!(a("x/worktrees").is_empty());
    }

    #[test]
    fn gitdir_slots() {
        let in_git = |p: &Path| p.starts_with(".git");
        assert!(is_new_gitdir_slot(Path::new(".git/worktrees/wt"), &in_git));
        assert!(is_new_gitdir_slot(Path::new(".git/modules/sub"), &in_git));
        assert!(!is_new_gitdir_slot(Path::new(".git/worktrees/wt/HEAD"), &in_git));
        assert!(!is_new_gitdir_slot(Path::new("src/modules/x"), &in_git));
    }
}
