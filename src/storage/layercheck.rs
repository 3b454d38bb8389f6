//! Bounded image preparation: before a layer is unpacked, its tar headers
//! are read (through `gzip -dc` / `zstd -dc` for compressed blobs) and the
//! size it would expand to is added up — the real size of sparse files
//! included (PAX `GNU.sparse.realsize`/`GNU.sparse.size`, old GNU `S`
//! headers). A layer whose expanded size exceeds the bound (by default
//! 8× its compressed size or 20 GiB, whichever is larger) is refused,
//! naming the layer, before anything is written.
//!
//! The tar reader is pure: it sees bytes, never the file system.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nanoserde::DeJson;

/// Default bound: this many times the compressed size...
pub const DEFAULT_RATIO: u64 = 8;
/// ...or this many bytes, whichever is larger.
pub const DEFAULT_FLOOR: u64 = 20 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub ratio: u64,
    pub floor: u64,
}

impl Default for Bound {
    fn default() -> Bound {
        Bound {
            ratio: DEFAULT_RATIO,
            floor: DEFAULT_FLOOR,
        }
    }
}

impl Bound {
    pub fn for_compressed(&self, compressed: u64) -> u64 {
        compressed.saturating_mul(self.ratio).max(self.floor)
    }
}

#[derive(Debug)]
pub enum LayerError {
    /// The layer would expand beyond the bound.
    TooLarge {
        layer: String,
        compressed: u64,
        expanded_at_least: u64,
        bound: u64,
        biggest: String,
    },
    /// The layout, manifest or a blob cannot be read or parsed.
    Bad(String),
}

impl std::fmt::Display for LayerError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        use crate::config::format_size;
        match self {
            LayerError::TooLarge {
                layer,
                compressed,
                expanded_at_least,
                bound,
                biggest,
            } => write!(
                f,
                "image layer {layer} ({} compressed) expands to at least {}, over the bound of {} \
                 ({}x the compressed size or the profile's limits.image_layer, whichever is larger); \
                 largest entry {biggest:?}: refusing to unpack it",
                format_size(*compressed),
                format_size(*expanded_at_least),
                format_size(*bound),
                DEFAULT_RATIO,
            ),
            LayerError::Bad(why) => write!(f, "{why}"),
        }
    }
}

#[derive(DeJson)]
struct Manifest {
    layers: Vec<Descriptor>,
}

#[derive(DeJson)]
struct Descriptor {
    digest: String,
}

fn blob_path(layout: &Path, digest: &str) -> Result<PathBuf, LayerError> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| LayerError::Bad(format!("malformed digest {digest:?}")))?;
    Ok(layout.join("blobs/sha256").join(hex))
}

/// What the layers of a checked manifest hold: the basis of the unpack's
/// progress estimate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    /// The layer blobs as stored.
    pub compressed: u64,
    /// What their tar streams expand to.
    pub expanded: u64,
}

/// Checks every layer of the manifest `digest` in `layout`.
pub fn check_layout(layout: &Path, manifest_digest: &str, bound: Bound) -> Result<Sizes, LayerError> {
    let mpath = blob_path(layout, manifest_digest)?;
    let text = std::fs::read_to_string(&mpath).map_err(|e| LayerError::Bad(format!("{}: {e}", mpath.display())))?;
    let m = Manifest::deserialize_json(&text).map_err(|e| LayerError::Bad(format!("{}: {e}", mpath.display())))?;
    let mut sizes = Sizes::default();
    for l in &m.layers {
        let path = blob_path(layout, &l.digest)?;
        sizes.expanded += check_blob(&path, &l.digest, bound)?;
        sizes.compressed += std::fs::metadata(&path).map_or(0, |m| m.len());
    }
    Ok(sizes)
}

/// Checks one layer blob; what it expands to.
pub fn check_blob(path: &Path, name: &str, bound: Bound) -> Result<u64, LayerError> {
    let bad = |e: io::Error| LayerError::Bad(format!("reading layer {name} ({}): {e}", path.display()));
    let compressed = std::fs::metadata(path).map_err(bad)?.len();
    let limit = bound.for_compressed(compressed);
    let mut magic = [0u8; 4];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut magic))
        .map_err(bad)?;
    let tool = match &magic[..n] {
        [0x1f, 0x8b, ..] => Some("gzip"),
        [0x28, 0xb5, 0x2f, 0xfd] => Some("zstd"),
        _ => None,
    };
    let result = match tool {
        None => scan(std::fs::File::open(path).map_err(bad)?, limit),
        Some(t) => {
            let mut child = Command::new(t)
                .args(["-dc"])
                .stdin(std::fs::File::open(path).map_err(bad)?)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| LayerError::Bad(format!("cannot run {t} to read layer {name}: {e}")))?;
            let r = scan(child.stdout.take().expect("piped"), limit);
            // Stop early: the rest of the stream is not needed.
            let _ = child.kill();
            let _ = child.wait();
            r
        }
    };
    match result {
        Ok(Scan::Within(total)) => Ok(total),
        Ok(Scan::Over { total, biggest }) => Err(LayerError::TooLarge {
            layer: name.to_string(),
            compressed,
            expanded_at_least: total,
            bound: limit,
            biggest,
        }),
        Err(e) => Err(LayerError::Bad(format!(
            "layer {name} is not a readable tar stream: {e}"
        ))),
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    Within(u64),
    Over { total: u64, biggest: String },
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// A numeric header field as Go's archive/tar (umoci) reads it: GNU
/// base-256 when the high bit is set (negative values refused), else octal
/// with spaces and NULs trimmed at both ends; anything else is an error.
fn octal(field: &[u8]) -> io::Result<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        if field[0] & 0x40 != 0 {
            return Err(invalid("negative number in a tar header"));
        }
        let mut v: u64 = (field[0] & 0x3f) as u64;
        for &b in &field[1..] {
            v = v
                .checked_mul(256)
                .and_then(|v| v.checked_add(b as u64))
                .ok_or_else(|| invalid("number out of range in a tar header"))?;
        }
        return Ok(v);
    }
    let start = field.iter().position(|&b| b != b' ' && b != 0).unwrap_or(field.len());
    let end = field
        .iter()
        .rposition(|&b| b != b' ' && b != 0)
        .map_or(start, |e| e + 1);
    let digits = &field[start..end.max(start)];
    if digits.is_empty() {
        return Ok(0);
    }
    std::str::from_utf8(digits)
        .ok()
        .filter(|d| d.bytes().all(|b| (b'0'..=b'7').contains(&b)))
        .and_then(|d| u64::from_str_radix(d, 8).ok())
        .ok_or_else(|| invalid("malformed number in a tar header"))
}

/// The header checksum (field at 148..156) matches the block, counted with
/// unsigned or signed bytes as tar implementations do: garbage is refused.
fn checksum_ok(hdr: &[u8; 512]) -> bool {
    let Ok(want) = octal(&hdr[148..156]) else {
        return false;
    };
    let (mut unsigned, mut signed) = (0u64, 0i64);
    for (i, &b) in hdr.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += b as u64;
        signed += (b as i8) as i64;
    }
    want == unsigned || want as i64 == signed
}

/// Reads one 512-byte block. `Ok(false)` when the stream ended exactly
/// before it (a clean end); a partial block is an error.
fn block(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "tar stream ends inside a block",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The padding after `n` bytes of entry data. Like Go's archive/tar, a
/// stream that ends right after the data (no padding, no end-of-archive
/// blocks) has ended; a stream that ends inside the padding has not.
fn padding(r: &mut impl Read, n: u64) -> io::Result<bool> {
    let pad = (512 - n % 512) % 512;
    if pad == 0 {
        return Ok(true);
    }
    let mut buf = [0u8; 512];
    block(r, &mut buf[..pad as usize])
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// PAX records `LEN KEY=VALUE\n`: the keys that change sizes and names.
fn pax(data: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Some(sp) = rest.iter().position(|&b| b == b' ') else {
            break;
        };
        let Ok(len) = std::str::from_utf8(&rest[..sp]).unwrap_or("x").parse::<usize>() else {
            break;
        };
        if len <= sp || len > rest.len() {
            break;
        }
        let rec = &rest[sp + 1..len];
        let rec = rec.strip_suffix(b"\n").unwrap_or(rec);
        if let Some(eq) = rec.iter().position(|&b| b == b'=') {
            out.push((
                String::from_utf8_lossy(&rec[..eq]).into_owned(),
                String::from_utf8_lossy(&rec[eq + 1..]).into_owned(),
            ));
        }
        rest = &rest[len..];
    }
    out
}

fn skip(r: &mut impl Read, mut n: u64) -> io::Result<()> {
    let mut buf = [0u8; 8192];
    while n > 0 {
        let want = n.min(buf.len() as u64) as usize;
        r.read_exact(&mut buf[..want])?;
        n -= want as u64;
    }
    Ok(())
}

/// Reads tar headers from `r` and adds up the expanded size of the
/// entries, stopping as soon as it exceeds `limit`.
///
/// It accepts what umoci (Go's archive/tar) unpacks: a stream may end
/// before a header, after one zero block, or right after an entry's data
/// without its padding. A header with a bad checksum or malformed number,
/// a short entry, a stream ending inside a block or padding, or a zero
/// block followed by a non-zero one is an error.
pub fn scan(mut r: impl Read, limit: u64) -> io::Result<Scan> {
    let mut total: u64 = 0;
    let mut biggest = (0u64, String::new());
    let mut next_pax: Vec<(String, String)> = Vec::new();
    let mut long_name: Option<String> = None;
    let mut hdr = [0u8; 512];
    loop {
        if !block(&mut r, &mut hdr)? {
            break;
        }
        if hdr.iter().all(|&b| b == 0) {
            // End of archive: a second zero block or the end of the stream.
            if block(&mut r, &mut hdr)? && hdr.iter().any(|&b| b != 0) {
                return Err(invalid("data after an end-of-archive block"));
            }
            break;
        }
        if !checksum_ok(&hdr) {
            return Err(invalid("tar header checksum mismatch"));
        }
        let stored = octal(&hdr[124..136])?;
        let typ = hdr[156];
        match typ {
            b'x' | b'g' | b'L' | b'K' => {
                // Metadata records: bounded, read in full.
                if stored > 1 << 20 {
                    return Err(invalid("oversized tar metadata record"));
                }
                let mut data = vec![0u8; stored as usize];
                r.read_exact(&mut data)?;
                match typ {
                    b'x' => next_pax = pax(&data),
                    b'L' => long_name = Some(cstr(&data)),
                    _ => {}
                }
                if !padding(&mut r, stored)? {
                    break;
                }
                continue;
            }
            _ => {}
        }
        let mut name = long_name.take().unwrap_or_else(|| cstr(&hdr[0..100]));
        let mut size = stored;
        let mut real = 0u64;
        let num = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| invalid("malformed number in a PAX record"))
        };
        for (k, v) in next_pax.drain(..) {
            match k.as_str() {
                "path" | "GNU.sparse.name" => name = v,
                "size" => size = num(&v)?,
                "GNU.sparse.realsize" | "GNU.sparse.size" => real = real.max(num(&v)?),
                _ => {}
            }
        }
        if typ == b'S' {
            // Old GNU sparse: the real size sits in the header, and more
            // of the sparse map may follow in extension blocks.
            real = real.max(octal(&hdr[483..495])?);
            let mut extended = hdr[482] != 0;
            let mut ext = [0u8; 512];
            while extended {
                if !block(&mut r, &mut ext)? {
                    return Err(invalid("tar stream ends inside a sparse map"));
                }
                extended = ext[504] != 0;
            }
        }
        let expanded = size.max(real);
        // Directories, links and devices occupy no data.
        let counts = matches!(typ, b'0' | 0 | b'7' | b'S');
        if counts {
            total = total.saturating_add(expanded).saturating_add(512);
            if expanded > biggest.0 {
                biggest = (expanded, name);
            }
        } else {
            total = total.saturating_add(512);
        }
        if total > limit {
            return Ok(Scan::Over {
                total,
                biggest: biggest.1,
            });
        }
        skip(&mut r, size)?;
        if !padding(&mut r, size)? {
            break;
        }
    }
    Ok(Scan::Within(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, size: u64, typ: u8) -> Vec<u8> {
        let mut h = vec![0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let s = format!("{:011o}\0", size);
        h[124..136].copy_from_slice(s.as_bytes());
        h[156] = typ;
        seal(&mut h);
        h
    }

    fn seal(h: &mut [u8]) {
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }

    fn record(k: &str, v: &str) -> String {
        let body = format!(" {k}={v}\n");
        let len = (1..10)
            .map(|d| body.len() + d)
            .find(|l| l.to_string().len() + body.len() == *l)
            .unwrap();
        format!("{len}{body}")
    }

    #[test]
    fn pax_sparse_real_size_counts() {
        let rec = record("GNU.sparse.realsize", &(3u64 << 30).to_string()) + &record("GNU.sparse.name", "big");
        let mut t = header("./PaxHeaders/big", rec.len() as u64, b'x');
        let mut data = rec.into_bytes();
        data.resize(512, 0);
        t.extend(data);
        t.extend(header("big", 512, b'0'));
        t.extend(vec![0u8; 512]);
        t.extend(vec![0u8; 1024]);
        match scan(&t[..], 1 << 30).unwrap() {
            Scan::Over { total, biggest } => {
                assert!(total >= 3 << 30);
                assert_eq!(biggest, "big");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(scan(&t[..], 4 << 30).unwrap(), Scan::Within(_)));
    }

    #[test]
    fn plain_entries_add_up_and_bounds_pick_the_larger() {
        let mut t = header("a", 1000, b'0');
        t.extend(vec![1u8; 1024]);
        t.extend(header("d/", 0, b'5'));
        t.extend(vec![0u8; 1024]);
        assert_eq!(scan(&t[..], 1 << 20).unwrap(), Scan::Within(1000 + 512 + 512));
        let b = Bound::default();
        assert_eq!(b.for_compressed(1 << 30), 20 << 30);
        assert_eq!(b.for_compressed(4 << 30), 32 << 30);
    }

    /// umoci insert writes layers that end right after the last file's
    /// data: no padding, no end-of-archive blocks. umoci unpacks them, so
    /// the check accepts them and still counts what they hold.
    #[test]
    fn a_stream_ending_after_unpadded_data_is_accepted() {
        let mut t = header("opt/lz/", 0, b'5');
        t.extend(header("opt/lz/edited.txt", 3, b'0'));
        t.extend(b"v1\n".iter().copied());
        t.extend(vec![0u8; 509]);
        t.extend(header("opt/lz/untouched.txt", 3, b'0'));
        t.extend(b"v1\n".iter().copied());
        assert_eq!(t.len(), 2051);
        assert_eq!(scan(&t[..], 1 << 20).unwrap(), Scan::Within(512 + (3 + 512) * 2));
        // The bound still holds for such a stream.
        assert!(matches!(scan(&t[..], 600).unwrap(), Scan::Over { .. }));
        // One zero block, then the end: also an end.
        let mut one = t[..512].to_vec();
        one.extend(vec![0u8; 512]);
        assert_eq!(scan(&one[..], 1 << 20).unwrap(), Scan::Within(512));
    }

    #[test]
    fn truncated_or_garbage_streams_fail_closed() {
        let mut t = header("a", 1000, b'0');
        t.extend(vec![1u8; 1024]);
        // Ends inside the data, inside the padding, inside a header.
        for cut in [512 + 999, 512 + 1001, 512 + 1024 + 100] {
            let mut s = t.clone();
            if cut > s.len() {
                s.extend(header("b", 0, b'0'));
            }
            s.truncate(cut);
            assert!(scan(&s[..], 1 << 20).is_err(), "cut at {cut}");
        }
        // Garbage: not a tar header.
        let junk: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        assert!(scan(&junk[..], 1 << 20).is_err());
        // A flipped byte breaks the checksum.
        let mut bad = t.clone();
        bad[130] ^= 1;
        assert!(scan(&bad[..], 1 << 20).is_err());
        // Entries hidden after a single zero block.
        let mut hidden = t.clone();
        hidden.extend(vec![0u8; 512]);
        hidden.extend(header("late", 1 << 32, b'0'));
        assert!(scan(&hidden[..], 1 << 20).is_err());
    }

    /// Old GNU sparse with extension blocks: the map blocks are skipped,
    /// not read as headers, and the real size counts.
    #[test]
    fn old_gnu_sparse_with_extension_blocks_counts_the_real_size() {
        let mut h = header("sparse", 512, b'S');
        h[483..495].copy_from_slice(format!("{:011o}\0", 5u64 << 30).as_bytes());
        h[482] = 1;
        seal(&mut h);
        let mut t = h;
        let mut ext = vec![0u8; 512];
        ext[504] = 1;
        t.extend(ext);
        t.extend(vec![7u8; 512]);
        t.extend(vec![0u8; 1024]);
        match scan(&t[..], 1 << 30).unwrap() {
            Scan::Over { total, biggest } => {
                assert!(total >= 5 << 30);
                assert_eq!(biggest, "sparse");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(scan(&t[..], 6 << 30).unwrap(), Scan::Within(_)));
    }
}
