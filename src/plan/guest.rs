//! What makes the sandbox feel like a development box, planned on the
//! host: the profile's volumes as bundle binds, and a read-only
//! system-level Git config with the host's Git identity and the stat
//! comparison Git needs to agree with the host about the workspace.
//!
//! The file is written into the generation directory (host side, never
//! inside the sandbox's reach) and bound read-only at [`GUEST_GITCONFIG`];
//! sessions get `GIT_CONFIG_SYSTEM` pointing at it. It first includes the
//! image's own `/etc/gitconfig`, so the image's system settings still
//! apply, then sets [`GIT_STAT_SETTINGS`] and the identity, which win
//! (a user's global or repository config still wins over both).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::config::Volume;
use crate::plan::BindMount;

/// Where the generated Git config appears inside the sandbox.
pub const GUEST_GITCONFIG: &str = "/.lazaret/gitconfig";
/// The Git keys copied from the host, when set there.
pub const GIT_KEYS: &[&str] = &["user.name", "user.email", "init.defaultBranch"];
/// How Git inside compares the workspace with its index. The index of a
/// repository the host's Git wrote records host inode numbers and owners,
/// which the sandbox does not see (the view's own inode numbers, the
/// sandbox's root): with Git's default every file looks changed and the
/// first `git status` re-reads and hashes the whole tree (16 s for 20,000
/// files, against 1.9 s), then writes an index the host's Git in turn
/// finds changed everywhere. `minimal` compares what both sides see alike:
/// the size, the type and mode, and the whole second of the modification
/// time. The window it leaves (docs/git.md, "Git inside and the host's
/// index"): a change that keeps the size and sets the modification time
/// back to the second the index recorded is not seen inside.
pub const GIT_STAT_SETTINGS: &[(&str, &str)] = &[("core.checkStat", "minimal")];

/// The profile's volumes, in configuration order, as bundle binds.
pub fn volume_binds(volumes: &[Volume]) -> Vec<BindMount> {
    volumes
        .iter()
        .map(|v| BindMount {
            guest: v.guest.clone(),
            host: v.host.clone(),
            read_only: v.read_only,
        })
        .collect()
}

/// runsc creates a missing mount point on the host, inside whatever backs
/// its parent: in the prepared lower that would change the image every
/// Domain shares. So a volume's guest path must lie under one of the
/// profile's `persist` paths (its mount point is then made in the
/// Domain's own persistent layer), or already exist in the image as real
/// directories all the way (no symlink).
pub fn check_volume_targets(rootfs: &Path, volumes: &[Volume], persist: &[String]) -> Result<(), VolumeTargetError> {
    for v in volumes {
        let under_persist = persist
            .iter()
            .any(|p| Path::new(&v.guest).starts_with(p) && v.guest != *p);
        if under_persist || exists_real(rootfs, &v.guest) {
            continue;
        }
        return Err(VolumeTargetError {
            host: v.host.clone(),
            guest: v.guest.clone(),
            persist: persist.to_vec(),
        });
    }
    Ok(())
}

/// A volume whose guest path is neither in the image nor under a
/// `persist` path ([`check_volume_targets`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeTargetError {
    pub host: std::path::PathBuf,
    pub guest: String,
    pub persist: Vec<String>,
}

impl std::fmt::Display for VolumeTargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "volume {}:{}: {} does not exist in the image and is not under a persist path ({}): \
             choose a guest path under one of them (e.g. /root/...), or one the image has",
            self.host.display(),
            self.guest,
            self.guest,
            self.persist.join(", ")
        )
    }
}

impl std::error::Error for VolumeTargetError {}

/// Whether `guest` exists under `rootfs` with no symlink on the way.
fn exists_real(rootfs: &Path, guest: &str) -> bool {
    let mut cur = rootfs.to_path_buf();
    for part in guest.split('/').filter(|p| !p.is_empty()) {
        cur.push(part);
        match std::fs::symlink_metadata(&cur) {
            Ok(md) if md.file_type().is_symlink() => return false,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    true
}

/// The first volume whose host path does not exist.
pub fn missing_volume(volumes: &[Volume]) -> Option<&Volume> {
    volumes.iter().find(|v| std::fs::symlink_metadata(&v.host).is_err())
}

/// The host's effective values of [`GIT_KEYS`] at user and system level
/// (never a repository's own config: the command runs in `/`, outside any
/// repo), read by one `git config` started when the generation's planning
/// begins and collected when its identity file is written, so Git's own
/// start (about 1.5 ms) overlaps the planning in between. Dropped unread
/// (a failed start), the child is killed and reaped.
pub struct HostGitIdentity(Option<std::process::Child>);

impl HostGitIdentity {
    /// Starts the read (nothing when Git cannot be started: no identity).
    pub fn start() -> HostGitIdentity {
        let child = Command::new("git")
            .args(["config", "--null", "--get-regexp", &git_keys_regex()])
            .current_dir("/")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_CONFIG_PARAMETERS")
            .env_remove("GIT_CONFIG_COUNT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        HostGitIdentity(child)
    }

    /// The values read, in [`GIT_KEYS`] order. Git exits 1 when none is
    /// set; any other failure counts as none set.
    fn values(mut self) -> Vec<(&'static str, String)> {
        let Some(child) = self.0.take() else { return Vec::new() };
        match child.wait_with_output() {
            Ok(out) if out.status.success() => parse_git_values(&out.stdout),
            _ => Vec::new(),
        }
    }
}

impl Drop for HostGitIdentity {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `^(user\.name|...)$` over the keys as Git names them in its output
/// (section and key lowercased).
fn git_keys_regex() -> String {
    let keys: Vec<String> = GIT_KEYS
        .iter()
        .map(|k| k.to_ascii_lowercase().replace('.', "\\."))
        .collect();
    format!("^({})$", keys.join("|"))
}

/// Parses `git config --null --get-regexp` output (`KEY\nVALUE\0` per
/// entry, in the order Git read them): for each of [`GIT_KEYS`] the last
/// value, as `git config --get` would give it; an empty value, one that
/// spans lines or is not UTF-8 counts as unset.
pub fn parse_git_values(out: &[u8]) -> Vec<(&'static str, String)> {
    let mut last: Vec<Option<&[u8]>> = vec![None; GIT_KEYS.len()];
    for entry in out.split(|b| *b == 0) {
        let Some(nl) = entry.iter().position(|b| *b == b'\n') else {
            continue;
        };
        let (key, value) = (&entry[..nl], &entry[nl + 1..]);
        if let Some(i) = GIT_KEYS.iter().position(|k| k.as_bytes().eq_ignore_ascii_case(key)) {
            last[i] = Some(value);
        }
    }
    GIT_KEYS
        .iter()
        .zip(last)
        .filter_map(|(k, v)| {
            let v = std::str::from_utf8(v?).ok()?;
            (!v.is_empty() && !v.contains('\n')).then(|| (*k, v.to_string()))
        })
        .collect()
}

/// Renders the generated Git config: [`GIT_STAT_SETTINGS`], then `values`
/// ((key, value) pairs, the host's identity).
pub fn render_gitconfig(values: &[(&str, String)]) -> String {
    let mut out = String::from(
        "# Written by Lazaret: how Git compares the workspace, and the host's Git identity (read-only).\n[include]\n\tpath = /etc/gitconfig\n",
    );
    let stat = GIT_STAT_SETTINGS.iter().map(|(k, v)| (*k, v.to_string()));
    for (key, value) in stat.chain(values.iter().map(|(k, v)| (*k, v.clone()))) {
        let Some((section, name)) = key.split_once('.') else {
            continue;
        };
        out.push_str(&format!("[{section}]\n\t{name} = {}\n", quote_value(&value)));
    }
    out
}

/// A Git config value in double quotes with `"` and `\` escaped; control
/// characters are dropped (a value never spans lines).
fn quote_value(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\t' => s.push_str("\\t"),
            c if c.is_control() => {}
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Writes `DIR/gitconfig` with the host's identity read by `host` (none
/// without one: the profile's `git_identity = false`); returns its bind.
pub fn gitconfig_bind(gen_dir: &Path, host: Option<HostGitIdentity>) -> std::io::Result<BindMount> {
    let values = host.map(HostGitIdentity::values).unwrap_or_default();
    let path: PathBuf = gen_dir.join("gitconfig");
    std::fs::write(&path, render_gitconfig(&values))?;
    Ok(BindMount {
        guest: GUEST_GITCONFIG.into(),
        host: path,
        read_only: true,
    })
}

/// The session variable that makes Git read the generated file as its
/// system config.
pub fn git_env() -> String {
    format!("GIT_CONFIG_SYSTEM={GUEST_GITCONFIG}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitconfig_quotes_and_never_breaks_lines() {
        let s = render_gitconfig(&[
            ("user.name", "A \"B\" \\ C\n[core]\n\thooksPath = /x".into()),
            ("init.defaultBranch", "main".into()),
        ]);
        assert!(
            s.contains("[user]\n\tname = \"A \\\"B\\\" \\\\ C[core]\\thooksPath = /x\"\n"),
            "{s}"
        );
        assert!(s.contains("[init]\n\tdefaultBranch = \"main\"\n"), "{s}");
        assert!(s.starts_with("# Written by Lazaret"));
        assert!(s.contains("[core]\n\tcheckStat = \"minimal\"\n"), "{s}");
        assert_eq!(s.lines().filter(|l| l.starts_with('[')).count(), 4, "{s}");
        // The identity comes after the stat settings and the include: a
        // host value never changes how Git compares.
        let include = s.find("[include]").unwrap();
        assert!(include < s.find("[core]").unwrap() && s.find("[core]").unwrap() < s.find("[user]").unwrap());
    }

    #[test]
    fn one_git_read_gives_each_keys_last_value_and_skips_what_get_would_not_give() {
        // As `git config --null --get-regexp` prints them: lowercased keys,
        // several scopes (the later wins), and values --get would refuse.
        let out = b"user.name\nSystem Name\0init.defaultbranch\ntrunk\0user.name\nA \"B\"\0\
                    user.email\n\0init.defaultbranch\nmain\nx\0junk-without-newline\0";
        let v = parse_git_values(out);
        assert_eq!(v, vec![("user.name", "A \"B\"".to_string())], "{v:?}");
        let v = parse_git_values(b"init.defaultbranch\nmain\0user.email\na@b\0");
        assert_eq!(
            v,
            vec![
                ("user.email", "a@b".to_string()),
                ("init.defaultBranch", "main".to_string())
            ],
            "in GIT_KEYS order: {v:?}"
        );
        assert!(parse_git_values(b"").is_empty());
        assert!(parse_git_values(b"user.name\n\xff\xfe\0").is_empty(), "not UTF-8");
        assert_eq!(git_keys_regex(), "^(user\\.name|user\\.email|init\\.defaultbranch)$");
    }
}
