//! Git's record of tracked files: the paths and object ids of an index,
//! and the blob id of a file as Git would hash it.

use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// Git's blob id of the regular file at `rel` beneath `root` (no symlinks
/// followed), hashed as it is read.
pub(super) fn hash_beneath(root: BorrowedFd, rel: &Path, sha256: bool) -> Option<Vec<u8>> {
    use std::io::Read;
    let fd = rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if st.st_mode & crate::sys::S_IFMT != crate::sys::S_IFREG {
        return None;
    }
    let header = format!("blob {}\0", st.st_size);
    let mut f = std::fs::File::from(fd);
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    let mut h1 = openssl::sha::Sha1::new();
    let mut h2 = openssl::sha::Sha256::new();
    if sha256 {
        h2.update(header.as_bytes())
    } else {
        h1.update(header.as_bytes())
    }
    loop {
        let n = f.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if sha256 {
            h2.update(&buf[..n])
        } else {
            h1.update(&buf[..n])
        }
    }
    if total != st.st_size as u64 {
        return None;
    }
    Some(if sha256 {
        h2.finish().to_vec()
    } else {
        h1.finish().to_vec()
    })
}

/// Git's object id of a blob with this content.
#[allow(dead_code)] // the reference for `hash_beneath`, in tests
pub fn blob_id(content: &[u8], sha256: bool) -> Vec<u8> {
    let mut data = format!("blob {}\0", content.len()).into_bytes();
    data.extend_from_slice(content);
    if sha256 {
        openssl::sha::sha256(&data).to_vec()
    } else {
        openssl::sha::sha1(&data).to_vec()
    }
}

/// Paths and object ids of a Git index (versions 2, 3 and 4). None when the
/// file is not an index Lazaret understands.
pub fn parse_index(data: &[u8], hash_len: usize) -> Option<Vec<(PathBuf, Vec<u8>)>> {
    let be32 = |o: usize| -> Option<u32> { Some(u32::from_be_bytes(data.get(o..o + 4)?.try_into().ok()?)) };
    if data.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut out = Vec::with_capacity(count.min(1 << 20));
    let mut off = 12;
    let mut prev: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = off;
        let oid = data.get(off + 40..off + 40 + hash_len)?.to_vec();
        off += 40 + hash_len;
        let flags = u16::from_be_bytes(data.get(off..off + 2)?.try_into().ok()?);
        off += 2;
        if version >= 3 && flags & 0x4000 != 0 {
            off += 2;
        }
        let path = if version == 4 {
            let (strip, n) = varint(data.get(off..)?)?;
            off += n;
            let end = off + data.get(off..)?.iter().position(|&b| b == 0)?;
            let keep = prev.len().checked_sub(strip as usize)?;
            let mut p = prev[..keep].to_vec();
            p.extend_from_slice(&data[off..end]);
            off = end + 1;
            p
        } else {
            let end = off + data.get(off..)?.iter().position(|&b| b == 0)?;
            let p = data[off..end].to_vec();
            let len = end - start;
            off = start + ((len + 8) & !7);
            p
        };
        prev = path.clone();
        out.push((PathBuf::from(std::ffi::OsStr::from_bytes(&path)), oid));
    }
    Some(out)
}

/// Git's offset varint (index v4).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut i = 0;
    let mut c = *b.first()?;
    let mut val = (c & 0x7f) as u64;
    while c & 0x80 != 0 {
        i += 1;
        c = *b.get(i)?;
        val = ((val + 1) << 7) | (c & 0x7f) as u64;
    }
    Some((val, i + 1))
}
