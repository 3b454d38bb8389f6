//! The user the checks are for (themselves, `$SUDO_USER` under sudo, or
//! root), found from /etc/passwd and /etc/group, and the not-root check.

use std::env;
use std::fs;

use crate::client::doctor::check::Check;
use crate::sys::hostenv::{passwd_by_name, passwd_by_uid};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    /// An unprivileged user runs doctor for themselves.
    User,
    /// Root via sudo: checks are for `$SUDO_USER`.
    Sudo,
    /// Root with no `$SUDO_USER`: checks are for root itself.
    Root,
}

pub(super) struct Target {
    pub(super) mode: Mode,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) name: Option<String>,
    /// Supplementary groups from /etc/group (plus the primary gid).
    pub(super) groups: Vec<u32>,
}

impl Target {
    pub(super) fn detect() -> Target {
        let uid = rustix::process::getuid().as_raw();
        let passwd = read_optional("/etc/passwd").unwrap_or_default();
        let group = read_optional("/etc/group").unwrap_or_default();
        if uid == 0 {
            let sudo_user = env::var("SUDO_USER").ok().filter(|s| !s.is_empty() && s != "root");
            if let Some(name) = sudo_user {
                let env_id = |k: &str| env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
                let ids = passwd_by_name(&passwd, &name).or_else(|| Some((env_id("SUDO_UID")?, env_id("SUDO_GID")?)));
                if let Some((uid, gid)) = ids.filter(|&(u, _)| u != 0) {
                    let groups = groups_of(&group, &name, gid);
                    return Target {
                        mode: Mode::Sudo,
                        uid,
                        gid,
                        name: Some(name),
                        groups,
                    };
                }
            }
            let groups = groups_of(&group, "root", 0);
            return Target {
                mode: Mode::Root,
                uid: 0,
                gid: 0,
                name: Some("root".into()),
                groups,
            };
        }
        let gid = rustix::process::getgid().as_raw();
        let name = passwd_by_uid(&passwd, uid)
            .map(|(n, _)| n)
            .or_else(|| env::var("USER").ok().filter(|s| !s.is_empty()));
        let groups = match &name {
            Some(n) => groups_of(&group, n, gid),
            None => vec![gid],
        };
        Target {
            mode: Mode::User,
            uid,
            gid,
            name,
            groups,
        }
    }

    /// How reports name the user: `alice (uid 1000)`.
    pub(super) fn display(&self) -> String {
        match &self.name {
            Some(n) => format!("{n} (uid {})", self.uid),
            None => format!("uid {}", self.uid),
        }
    }

    /// The user argument for commands such as `usermod`.
    pub(super) fn arg(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => "\"$(id -un)\"".into(),
        }
    }
}

pub(super) fn read_optional(path: &str) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The primary gid plus every gid in /etc/group that lists `name` as a
/// member, sorted and deduplicated.
fn groups_of(group: &str, name: &str, primary: u32) -> Vec<u32> {
    let mut out = vec![primary];
    for line in group.lines() {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 4 {
            continue;
        }
        if let Ok(gid) = f[2].parse::<u32>() {
            if f[3].split(',').any(|m| m.trim() == name) {
                out.push(gid);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

pub(super) fn check_not_root(t: &Target) -> Check {
    match t.mode {
        Mode::User => Check::pass("not-root", format!("running as {}", t.display())),
        Mode::Sudo => Check::pass(
            "not-root",
            format!(
                "running as root via sudo; lazaret itself refuses to run as root, so the \
                 checks below are for {}",
                t.display()
            ),
        ),
        Mode::Root => Check::fail(
            "not-root",
            "running as root and $SUDO_USER is not set; lazaret itself refuses to run as root, \
             so the checks below are for root",
            "run as your normal user",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_and_group_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\nbad:x:zz:1\n";
        assert_eq!(passwd_by_name(passwd, "alice"), Some((1000, 1000)));
        assert_eq!(passwd_by_name(passwd, "bob"), None);
        assert_eq!(passwd_by_name(passwd, "bad"), None);
        assert_eq!(passwd_by_uid(passwd, 1000), Some(("alice".to_string(), 1000)));
        assert_eq!(passwd_by_uid(passwd, 5), None);
        let group = "root:x:0:\nkvm:x:104:alice,bob\nusers:x:100:bob\nalice:x:1000:\n";
        assert_eq!(groups_of(group, "alice", 1000), vec![104, 1000]);
        assert_eq!(groups_of(group, "bob", 1001), vec![100, 104, 1001]);
    }
}
