//! Where the workspace appears inside the sandbox (pure).
//!
//! Agents key their state by the absolute path of the project (Claude
//! Code's `~/.claude/projects/<path>` and its trust in `~/.claude.json`,
//! Codex's trust), and that state lives in volumes every project shares.
//! So each project appears inside at a path of its own, the same at every
//! start: its host path where that is safe ([`Placement::HostPath`]), else
//! `/workspaces/NAME-HASH` ([`Placement::Fallback`]). `/workspace` stays:
//! init makes it a symlink to that path at boot ([`Alias::Symlink`]), or,
//! on an image that has files of its own at `/workspace`, the workspace is
//! bound there as well ([`Alias::Bind`]).
//!
//! runsc makes a missing mount point on the host, in whatever backs its
//! parent; the image every Domain shares is never to get one. So the host
//! path is used only strictly under a `persist` path (the coordinator makes
//! the mount point in that path's persistent layer, Domain-side), and the
//! fallback's mount point is in a directory of the generation bound at
//! `/workspaces`.

use std::path::{Component, Path};

/// The fallback's parent inside (a read-only bind of a generation dir).
pub const GUEST_WORKSPACES: &str = "/workspaces";

/// Guest directories the workspace is never placed at or under: the
/// image's system directories, and what gVisor or Lazaret mounts
/// (`/tmp` is the Domain's scratch, `/proc`, `/dev`, `/sys`, `/run` the
/// sandbox's own).
pub const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/.lazaret",
    "/workspace",
    GUEST_WORKSPACES,
];

/// What the placement depends on (all of it from the host and the
/// profile, never from the image: the path is stable while they are).
pub struct Inputs<'a> {
    /// The canonical host workspace.
    pub host: &'a Path,
    /// The profile's `persist` paths.
    pub persist: &'a [String],
    /// The guest paths of every other mount of the bundle (volumes, the
    /// linked worktree's common directory, Lazaret's own binds).
    pub taken: &'a [String],
    /// The profile user's home (`/home/NAME`), if it has a `user`.
    pub home: Option<&'a str>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// At the host path, strictly under the persistent path `persist`.
    HostPath { persist: String },
    /// Under `/workspaces`, because of the reason.
    Fallback(Reason),
}

/// Why a workspace is not at its host path inside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The path is not UTF-8, or holds a control or format character.
    Unprintable,
    /// At or under a system directory.
    System(&'static str),
    /// Not strictly under a `persist` path.
    NotPersisted,
    /// At, under or over another mount's guest path.
    Overlaps(String),
    /// At, under or over the profile user's home.
    Home(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Reason::Unprintable => write!(f, "the path is not printable UTF-8"),
            Reason::System(d) => write!(f, "the path is a system directory inside ({d})"),
            Reason::NotPersisted => write!(f, "the path is not under a persist path"),
            Reason::Overlaps(p) => write!(f, "the path overlaps the mount at {}", crate::display::escape(p)),
            Reason::Home(p) => write!(f, "the path overlaps the user's home {p}"),
        }
    }
}

/// Where the workspace is inside, and why there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestWorkspace {
    pub path: String,
    pub placement: Placement,
}

impl GuestWorkspace {
    /// The directories to make below the persistent path for the mount
    /// point, in order (`/home` for `/home/u/src/app`: `u`, `src`, `app`).
    pub fn mount_point_below(&self) -> Option<(&str, Vec<&str>)> {
        let Placement::HostPath { persist } = &self.placement else {
            return None;
        };
        let rel = Path::new(&self.path).strip_prefix(persist).ok()?;
        Some((persist.as_str(), rel.iter().filter_map(|c| c.to_str()).collect()))
    }

    /// The fallback's directory name under `/workspaces`.
    pub fn fallback_leaf(&self) -> Option<&str> {
        match self.placement {
            Placement::Fallback(_) => self.path.strip_prefix(GUEST_WORKSPACES)?.strip_prefix('/'),
            Placement::HostPath { .. } => None,
        }
    }
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The rule: the host path when it is printable UTF-8, absolute and
/// canonical, outside every [`SYSTEM_DIRS`] entry, clear of every other
/// mount and of the user's home, and strictly under a `persist` path;
/// otherwise `/workspaces/NAME-HASH` ([`fallback_path`]).
pub fn place(i: &Inputs) -> GuestWorkspace {
    let fallback = |why| GuestWorkspace {
        path: fallback_path(i.host),
        placement: Placement::Fallback(why),
    };
    let host = i.host;
    let Some(s) = host.to_str() else {
        return fallback(Reason::Unprintable);
    };
    let canonical = host.is_absolute()
        && host.components().skip(1).all(|c| matches!(c, Component::Normal(_)))
        && host.components().collect::<std::path::PathBuf>().as_os_str() == host.as_os_str();
    if !canonical || s.chars().any(|c| c.is_control() || crate::display::is_unsafe(c)) {
        return fallback(Reason::Unprintable);
    }
    if host == Path::new("/") {
        return fallback(Reason::System("/"));
    }
    if let Some(d) = SYSTEM_DIRS.iter().find(|d| host.starts_with(d)) {
        return fallback(Reason::System(d));
    }
    if let Some(h) = i.home.filter(|h| overlaps(host, Path::new(h))) {
        return fallback(Reason::Home(h.to_string()));
    }
    if let Some(t) = i.taken.iter().find(|t| overlaps(host, Path::new(t))) {
        return fallback(Reason::Overlaps(t.clone()));
    }
    let under = i.persist.iter().find(|p| host.starts_with(p) && host != Path::new(p));
    let Some(under) = under else {
        return fallback(Reason::NotPersisted);
    };
    // Another persistent path below the workspace would be hidden by it.
    if let Some(q) = i.persist.iter().find(|q| Path::new(q).starts_with(host)) {
        return fallback(Reason::Overlaps(q.clone()));
    }
    GuestWorkspace {
        path: s.to_string(),
        placement: Placement::HostPath { persist: under.clone() },
    }
}

/// `/workspaces/NAME-HASH`: NAME is the host directory's name (letters,
/// digits, `.`, `_` and `-` kept, anything else `_`, at most 40 bytes),
/// HASH the first 10 hex digits of the SHA-256 of the host path's bytes.
pub fn fallback_path(host: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let raw = host.file_name().map(|n| n.as_bytes()).unwrap_or_default();
    let mut name: String = String::from_utf8_lossy(raw)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if name.starts_with('.') {
        name.replace_range(..1, "_");
    }
    if name.is_empty() {
        name.push_str("workspace");
    }
    let digest = openssl::sha::sha256(host.as_os_str().as_bytes());
    let hash: String = digest[..5].iter().map(|b| format!("{b:02x}")).collect();
    format!("{GUEST_WORKSPACES}/{name}-{hash}")
}

/// What the image has at `/workspace`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageEntry {
    Missing,
    EmptyDir,
    Symlink,
    /// A directory with entries, or a file.
    Other,
}

/// How `/workspace` reaches the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alias {
    /// Init replaces the image's (empty) `/workspace` with a symlink.
    Symlink,
    /// The image has files at `/workspace`: the workspace is bound there
    /// too (a second mount of the same view).
    Bind,
}

pub fn alias_for(image: ImageEntry) -> Alias {
    match image {
        ImageEntry::Other => Alias::Bind,
        ImageEntry::Missing | ImageEntry::EmptyDir | ImageEntry::Symlink => Alias::Symlink,
    }
}

/// Maps a client's host working directory into the sandbox: inside the
/// workspace it keeps its relative place below `guest`, anywhere else (or
/// a name that is not printable UTF-8) it is `guest`.
pub fn guest_cwd(workspace: &Path, guest: &str, cwd: &Path) -> String {
    let rel = match cwd.strip_prefix(workspace) {
        Ok(rel) if rel.components().all(|c| matches!(c, Component::Normal(_))) => rel,
        _ => return guest.to_string(),
    };
    match rel.to_str() {
        Some("") => guest.to_string(),
        Some(r) if !r.chars().any(|c| c.is_control() || crate::display::is_unsafe(c)) => {
            format!("{guest}/{r}")
        }
        _ => guest.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    fn persist() -> Vec<String> {
        ["/usr", "/etc", "/var", "/opt", "/root", "/home"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn place_at(host: &Path, taken: &[&str], home: Option<&str>) -> GuestWorkspace {
        let taken: Vec<String> = taken.iter().map(|s| s.to_string()).collect();
        place(&Inputs {
            host,
            persist: &persist(),
            taken: &taken,
            home,
        })
    }

    #[test]
    fn a_project_under_a_persist_path_is_at_its_host_path() {
        let g = place_at(Path::new("/home/u/src/app"), &["/root/.claude"], Some("/home/dev"));
        assert_eq!(g.path, "/home/u/src/app");
        assert_eq!(
            g.placement,
            Placement::HostPath {
                persist: "/home".into()
            }
        );
        assert_eq!(g.mount_point_below(), Some(("/home", vec!["u", "src", "app"])));
        assert_eq!(g.fallback_leaf(), None);
        // Spaces and other printable characters are kept.
        let g = place_at(Path::new("/home/u/my project (2)"), &[], None);
        assert_eq!(g.path, "/home/u/my project (2)");
        assert_eq!(place_at(Path::new("/opt/proj/x"), &[], None).path, "/opt/proj/x");
    }

    #[test]
    fn system_dirs_and_tmp_fall_back() {
        for (host, dir) in [
            ("/tmp/proj", "/tmp"),
            ("/tmp", "/tmp"),
            ("/usr/local/src/app", "/usr"),
            ("/etc/app", "/etc"),
            ("/root/app", "/root"),
            ("/var/www/app", "/var"),
            ("/proc/self", "/proc"),
            ("/workspace", "/workspace"),
            ("/workspace/x", "/workspace"),
            ("/workspaces/a", "/workspaces"),
            ("/.lazaret/x", "/.lazaret"),
            ("/run/user/1000/p", "/run"),
        ] {
            let g = place_at(Path::new(host), &[], None);
            assert_eq!(g.placement, Placement::Fallback(Reason::System(dir)), "{host}");
            assert!(g.path.starts_with("/workspaces/"), "{host}: {}", g.path);
        }
        assert_eq!(
            place_at(Path::new("/"), &[], None).placement,
            Placement::Fallback(Reason::System("/"))
        );
        // A name that only starts like a system dir is not one.
        assert!(matches!(
            place_at(Path::new("/usrx/p"), &[], None).placement,
            Placement::Fallback(Reason::NotPersisted)
        ));
        assert!(matches!(
            place_at(Path::new("/home/tmp"), &[], None).placement,
            Placement::HostPath { .. }
        ));
    }

    #[test]
    fn outside_persist_overlapping_mounts_or_the_home_fall_back() {
        for host in ["/srv/app", "/data/p", "/build/x", "/home", "/opt"] {
            assert_eq!(
                place_at(Path::new(host), &[], None).placement,
                Placement::Fallback(Reason::NotPersisted),
                "{host}"
            );
        }
        // A volume inside the workspace, or the workspace inside a volume.
        let g = place_at(Path::new("/home/u/app"), &["/home/u/app/cache"], None);
        assert_eq!(
            g.placement,
            Placement::Fallback(Reason::Overlaps("/home/u/app/cache".into()))
        );
        let g = place_at(Path::new("/home/u/app"), &["/home/u"], None);
        assert_eq!(g.placement, Placement::Fallback(Reason::Overlaps("/home/u".into())));
        // The profile user's home is made at boot; the workspace stays out.
        let g = place_at(Path::new("/home/dev/app"), &[], Some("/home/dev"));
        assert_eq!(g.placement, Placement::Fallback(Reason::Home("/home/dev".into())));
        // Another persistent path below the workspace.
        let p = vec!["/home".to_string(), "/home/u/app/keep".to_string()];
        let g = place(&Inputs {
            host: Path::new("/home/u/app"),
            persist: &p,
            taken: &[],
            home: None,
        });
        assert_eq!(
            g.placement,
            Placement::Fallback(Reason::Overlaps("/home/u/app/keep".into()))
        );
        // Nothing persisted: every project falls back.
        let g = place(&Inputs {
            host: Path::new("/home/u/app"),
            persist: &[],
            taken: &[],
            home: None,
        });
        assert_eq!(g.placement, Placement::Fallback(Reason::NotPersisted));
    }

    #[test]
    fn unprintable_or_uncanonical_paths_fall_back() {
        let bad = OsStr::from_bytes(b"/home/u/caf\xe9");
        let g = place_at(Path::new(bad), &[], None);
        assert_eq!(g.placement, Placement::Fallback(Reason::Unprintable));
        assert!(g.path.starts_with("/workspaces/caf_-"), "{}", g.path);
        for host in [
            "/home/u/a\nb",
            "/home/u/a\u{202e}b",
            "/home/u/../x",
            "home/u/x",
            "/home/u/./x",
        ] {
            assert_eq!(
                place_at(Path::new(host), &[], None).placement,
                Placement::Fallback(Reason::Unprintable),
                "{host:?}"
            );
        }
    }

    #[test]
    fn the_fallback_is_stable_unique_and_tame() {
        let a = fallback_path(Path::new("/tmp/x/app"));
        assert_eq!(a, fallback_path(Path::new("/tmp/x/app")));
        assert_ne!(a, fallback_path(Path::new("/tmp/y/app")));
        assert!(
            a.starts_with("/workspaces/app-") && a.len() == "/workspaces/app-".len() + 10,
            "{a}"
        );
        let g = GuestWorkspace {
            path: a.clone(),
            placement: Placement::Fallback(Reason::NotPersisted),
        };
        assert_eq!(g.fallback_leaf(), a.strip_prefix("/workspaces/"));
        assert_eq!(g.mount_point_below(), None);
        for (host, prefix) in [
            ("/srv/my project", "/workspaces/my_project-"),
            ("/srv/.hidden", "/workspaces/_hidden-"),
            ("/", "/workspaces/workspace-"),
            ("/srv/a\u{1b}[2Jb", "/workspaces/a__2Jb-"),
        ] {
            let p = fallback_path(Path::new(host));
            assert!(p.starts_with(prefix), "{host:?}: {p}");
            assert!(!p.contains(['\n', '\u{1b}', ' ']), "{p:?}");
        }
        let long = format!("/srv/{}", "n".repeat(300));
        let p = fallback_path(Path::new(&long));
        assert_eq!(p.len(), "/workspaces/".len() + 40 + 1 + 10, "{p}");
    }

    #[test]
    fn workspace_alias_is_a_symlink_unless_the_image_has_files_there() {
        assert_eq!(alias_for(ImageEntry::Missing), Alias::Symlink);
        assert_eq!(alias_for(ImageEntry::EmptyDir), Alias::Symlink);
        assert_eq!(alias_for(ImageEntry::Symlink), Alias::Symlink);
        assert_eq!(alias_for(ImageEntry::Other), Alias::Bind);
    }

    #[test]
    fn cwd_maps_inside_the_workspace_only() {
        let w = Path::new("/home/u/p");
        let g = "/home/u/p";
        assert_eq!(guest_cwd(w, g, Path::new("/home/u/p")), "/home/u/p");
        assert_eq!(guest_cwd(w, g, Path::new("/home/u/p/src/x")), "/home/u/p/src/x");
        assert_eq!(guest_cwd(w, g, Path::new("/home/u")), "/home/u/p");
        assert_eq!(guest_cwd(w, g, Path::new("/home/u/pq")), "/home/u/p");
        let f = "/workspaces/p-0123456789";
        assert_eq!(
            guest_cwd(w, f, Path::new("/home/u/p/a b")),
            "/workspaces/p-0123456789/a b"
        );
        assert_eq!(guest_cwd(w, f, Path::new(OsStr::from_bytes(b"/home/u/p/\xff"))), f);
        assert_eq!(guest_cwd(w, f, Path::new("/home/u/p/a\nb")), f);
    }
}
