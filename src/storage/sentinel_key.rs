//! The Domain's sentinel key (docs/network.md, "Secrets"): 32 random
//! bytes in `sentinel.key` in the Domain Root (mode 0600, the Root is
//! 0700), from which every start derives each secret's sentinel
//! (`config::secrets::derived_sentinel`). The sentinels stay the same
//! across generations until the key is rotated (`lazaret state
//! rotate-sentinels`, `lazaret state reset --all`) or the Domain is
//! removed. The key has nothing to do with any real value; it never
//! enters the sandbox.

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The key's file in the Domain Root.
pub const KEY_FILE: &str = "sentinel.key";
/// The key's length in bytes.
pub const KEY_LEN: usize = 32;

/// The key's path in the Domain Root `root`.
pub fn key_path(root: &Path) -> PathBuf {
    root.join(KEY_FILE)
}

/// The Domain's key: read, or made (and kept) when there is none or what
/// is there is not a key of ours (wrong size or owner, not a regular file:
/// replaced, so the sentinels change once). The caller holds the Domain
/// lock.
pub fn load_or_create(root: &Path) -> io::Result<[u8; KEY_LEN]> {
    let path = key_path(root);
    match read_key(&path) {
        Ok(Some(k)) => return Ok(k),
        Ok(None) => {}
        Err(e) => log::warn!(
            "sentinel key {}: {e}: making a new one (the sentinels change)",
            path.display()
        ),
    }
    let mut key = [0u8; KEY_LEN];
    openssl::rand::rand_bytes(&mut key).map_err(io::Error::other)?;
    let tmp = root.join(format!("{KEY_FILE}.tmp-{}", crate::domain::random_id(4)));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(crate::sys::O_NOFOLLOW | crate::sys::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&key)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(root)?.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(key)
}

/// `Ok(None)`: no key yet. `Err`: something is there that is not a key.
fn read_key(path: &Path) -> io::Result<Option<[u8; KEY_LEN]>> {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(crate::sys::O_NOFOLLOW | crate::sys::O_CLOEXEC | crate::sys::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    if md.uid() != crate::sys::geteuid() || md.mode() & 0o077 != 0 {
        return Err(io::Error::other("not private to this user"));
    }
    let mut buf = Vec::with_capacity(KEY_LEN + 1);
    f.take(KEY_LEN as u64 + 1).read_to_end(&mut buf)?;
    let key: [u8; KEY_LEN] = buf
        .as_slice()
        .try_into()
        .map_err(|_| io::Error::other(format!("{} bytes, not {KEY_LEN}", buf.len())))?;
    Ok(Some(key))
}

/// Forgets the key: the next start makes a new one, so every sentinel of
/// the Domain changes. True if there was one. The caller holds the Domain
/// lock (the Domain is stopped).
pub fn rotate(root: &Path) -> io::Result<bool> {
    match std::fs::remove_file(key_path(root)) {
        Ok(()) => {
            std::fs::File::open(root)?.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("lazaret-sentinel-key-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        p
    }

    #[test]
    fn a_key_is_kept_private_and_rotation_replaces_it() {
        let root = scratch("keep");
        let a = load_or_create(&root).unwrap();
        let md = std::fs::metadata(key_path(&root)).unwrap();
        assert_eq!(md.mode() & 0o777, 0o600);
        assert_eq!(md.len(), KEY_LEN as u64);
        assert_eq!(load_or_create(&root).unwrap(), a, "the key is stable across loads");
        assert!(rotate(&root).unwrap());
        assert!(!rotate(&root).unwrap(), "nothing left to rotate");
        let b = load_or_create(&root).unwrap();
        assert_ne!(a, b, "rotation makes a new key");
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![KEY_FILE.to_string()]);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Something that is not a key of ours (truncated, a symlink to a
    /// file someone else chose, too open) is never used: it is replaced.
    #[test]
    fn what_is_not_a_key_is_replaced() {
        let root = scratch("bad");
        std::fs::write(key_path(&root), b"short").unwrap();
        let a = load_or_create(&root).unwrap();
        assert_ne!(&a[..5], b"short");
        assert_eq!(std::fs::metadata(key_path(&root)).unwrap().len(), KEY_LEN as u64);
        // A symlink to a 32-byte file: not followed.
        let other = root.join("other");
        std::fs::write(&other, [7u8; KEY_LEN]).unwrap();
        std::fs::remove_file(key_path(&root)).unwrap();
        std::os::unix::fs::symlink(&other, key_path(&root)).unwrap();
        let b = load_or_create(&root).unwrap();
        assert_ne!(b, [7u8; KEY_LEN]);
        assert!(std::fs::symlink_metadata(key_path(&root)).unwrap().is_file());
        // Readable by others: replaced.
        std::fs::set_permissions(key_path(&root), std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = load_or_create(&root).unwrap();
        assert_ne!(b, c);
        let _ = std::fs::remove_dir_all(&root);
    }
}
