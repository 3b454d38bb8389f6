//! The profile's user, at init's boot (a `BootCmd::User` frame of its boot
//! request): makes the unprivileged user exist in the guest, as root,
//! before any session of the generation. Idempotent:
//! an existing entry of NAME with UID is kept, a missing one is appended to
//! `/etc/passwd`, `/etc/group` (and `/etc/shadow` when the image has one),
//! and the home `/home/NAME` is made (from `/etc/skel`) when missing. Both
//! live under persisted paths by default, so this happens once per Domain.
//! Written without the image's tools (an image need not have `useradd`).
//! Reports one `lazaret::guest::InitMsg::UserReady` or `UserFailed` frame
//! on init's stdout.

use std::fmt;
use std::io::{self, Write};

use lazaret::guest::{InitMsg, MAX_SETUP_REASON};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Why the user could not be set up; shows as the reason of
/// `InitMsg::UserFailed`.
#[derive(Debug)]
enum SetupError {
    /// The image has the user with another uid (its uid, the wanted one).
    OtherUid(u32, u32),
    /// The uid is another user's of the image (that user).
    UidTaken(u32, String),
    Write(String, io::Error),
    NotADirectory(String),
    CreateHome(String, io::Error),
    Chown(String, io::Error),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        use SetupError::*;
        match self {
            OtherUid(id, uid) => write!(f, "the image has this user with uid {id}, not {uid}"),
            UidTaken(uid, other) => write!(
                f,
                "uid {uid} is already the image's user {other:?}: set `user = \"{other}\"` in the profile"
            ),
            Write(path, e) => write!(f, "cannot write {path}: {e}"),
            NotADirectory(home) => write!(f, "{home} exists and is not a directory"),
            CreateHome(home, e) => write!(f, "cannot create {home}: {e}"),
            Chown(path, e) => write!(f, "cannot chown {path}: {e}"),
        }
    }
}

/// Sets up user `name` with `uid` and reports the outcome.
pub fn at_boot(name: &str, uid: u32) {
    let valid = !name.is_empty()
        && name.len() <= 32
        && name != "root"
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-');
    let outcome = if !valid || uid == 0 {
        Err("not a valid user name and uid".to_string())
    } else {
        setup(name, uid).map_err(|e| {
            // stderr is for the log.
            eprintln!("lazaret: user {name}: {e}");
            e.to_string()
        })
    };
    let msg = match outcome {
        Ok(()) => InitMsg::UserReady,
        Err(e) => {
            let mut end = e.len().min(MAX_SETUP_REASON);
            while !e.is_char_boundary(end) {
                end -= 1;
            }
            InitMsg::UserFailed {
                reason: e[..end].to_string(),
            }
        }
    };
    crate::report(&msg);
}

/// (name, id) of the entries of a passwd- or group-style file.
fn entries(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((f.first()?.to_string(), f.get(2)?.parse().ok()?))
        })
        .collect()
}

fn append(path: &str, line: &str) -> Result<(), SetupError> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)
        .map_err(|e| SetupError::Write(path.into(), e))?;
    let text = std::fs::read(path).unwrap_or_default();
    let sep = if text.is_empty() || text.ends_with(b"\n") {
        ""
    } else {
        "\n"
    };
    f.write_all(format!("{sep}{line}\n").as_bytes())
        .map_err(|e| SetupError::Write(path.into(), e))
}

fn setup(name: &str, uid: u32) -> Result<(), SetupError> {
    let home = format!("/home/{name}");
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let users = entries(&passwd);
    match users.iter().find(|(n, _)| n == name) {
        Some((_, id)) if *id == uid => {}
        Some((_, id)) => return Err(SetupError::OtherUid(*id, uid)),
        None => {
            if let Some((other, _)) = users.iter().find(|(_, id)| *id == uid) {
                return Err(SetupError::UidTaken(uid, other.clone()));
            }
            let shell = if Path::new("/bin/bash").exists() {
                "/bin/bash"
            } else {
                "/bin/sh"
            };
            append("/etc/passwd", &format!("{name}:x:{uid}:{uid}::{home}:{shell}"))?;
            if Path::new("/etc/shadow").exists() {
                append("/etc/shadow", &format!("{name}:!:::::::"))?;
            }
        }
    }
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let groups = entries(&group);
    if !groups.iter().any(|(n, id)| n == name || *id == uid) {
        append("/etc/group", &format!("{name}:x:{uid}:"))?;
    }
    let _ = std::fs::DirBuilder::new().mode(0o755).create("/home");
    match std::fs::symlink_metadata(&home) {
        Ok(md) if md.is_dir() => {
            // A volume under the home makes runsc create the home as root
            // before this runs: the home itself is the user's.
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            if md.uid() == 0 {
                chown(&home, uid)?;
                let _ = std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755));
            }
        }
        Ok(_) => return Err(SetupError::NotADirectory(home)),
        Err(_) => {
            std::fs::DirBuilder::new()
                .mode(0o755)
                .create(&home)
                .map_err(|e| SetupError::CreateHome(home.clone(), e))?;
            copy_skel(Path::new("/etc/skel"), Path::new(&home), uid);
            chown(&home, uid)?;
        }
    }
    Ok(())
}

fn chown(path: &str, uid: u32) -> Result<(), SetupError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).map_err(|e| SetupError::Chown(path.into(), e))
}

/// Regular files and directories of `/etc/skel` (no symlinks followed).
fn copy_skel(from: &Path, to: &Path, uid: u32) {
    let Ok(rd) = std::fs::read_dir(from) else { return };
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        let dest = to.join(e.file_name());
        if ft.is_dir() {
            if std::fs::create_dir(&dest).is_ok() {
                copy_skel(&e.path(), &dest, uid);
            }
        } else if ft.is_file() {
            if std::fs::copy(e.path(), &dest).is_err() {
                continue;
            }
        } else {
            continue;
        }
        let _ = std::os::unix::fs::lchown(&dest, Some(uid), Some(uid));
    }
}
