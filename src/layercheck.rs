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

/// Checks every layer of the manifest `digest` in `layout`.
pub fn check_layout(layout: &Path, manifest_digest: &str, bound: Bound) -> Result<(), LayerError> {
    let mpath = blob_path(layout, manifest_digest)?;
    let text = std::fs::read_to_string(&mpath).map_err(|e| LayerError::Bad(format!("{}: {e}", mpath.display())))?;
    let m = Manifest::deserialize_json(&text).map_err(|e| LayerError::Bad(format!("{}: {e}", mpath.display())))?;
    for l in &m.layers {
        check_blob(&blob_path(layout, &l.digest)?, &l.digest, bound)?;
    }
    Ok(())
}

/// Checks one layer blob.
pub fn check_blob(path: &Path, name: &str, bound: Bound) -> Result<(), LayerError> {
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
        Ok(Scan::Within(_)) => Ok(()),
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

fn octal(field: &[u8]) -> u64 {
    // GNU base-256 for large values.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = (field[0] & 0x7f) as u64;
        for &b in &field[1..] {
            v = v.saturating_mul(256).saturating_add(b as u64);
        }
        return v;
    }
    let s: String = field.iter().take_while(|&&b| b != 0).map(|&b| b as char).collect();
    u64::from_str_radix(s.trim(), 8).unwrap_or(0)
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
pub fn scan(mut r: impl Read, limit: u64) -> io::Result<Scan> {
    let mut total: u64 = 0;
    let mut biggest = (0u64, String::new());
    let mut next_pax: Vec<(String, String)> = Vec::new();
    let mut long_name: Option<String> = None;
    let mut hdr = [0u8; 512];
    loop {
        match r.read_exact(&mut hdr) {
            Ok(()) => {}
            // A stream that ends without the two zero blocks still ends.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        if hdr.iter().all(|&b| b == 0) {
            break;
        }
        let stored = octal(&hdr[124..136]);
        let typ = hdr[156];
        let padded = stored.div_ceil(512).saturating_mul(512);
        match typ {
            b'x' | b'g' | b'L' | b'K' => {
                // Metadata records: bounded, read in full.
                if stored > 1 << 20 {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "oversized tar metadata record",
                    ));
                }
                let mut data = vec![0u8; padded as usize];
                r.read_exact(&mut data)?;
                data.truncate(stored as usize);
                match typ {
                    b'x' => next_pax = pax(&data),
                    b'L' => long_name = Some(cstr(&data)),
                    _ => {}
                }
                continue;
            }
            _ => {}
        }
        let mut name = long_name.take().unwrap_or_else(|| cstr(&hdr[0..100]));
        let mut size = stored;
        let mut real = 0u64;
        for (k, v) in next_pax.drain(..) {
            match k.as_str() {
                "path" | "GNU.sparse.name" => name = v,
                "size" => size = v.parse().unwrap_or(size),
                "GNU.sparse.realsize" | "GNU.sparse.size" => real = real.max(v.parse().unwrap_or(0)),
                _ => {}
            }
        }
        if typ == b'S' {
            // Old GNU sparse: the real size sits in the header.
            real = real.max(octal(&hdr[483..495]));
        }
        let padded = size.div_ceil(512).saturating_mul(512);
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
        skip(&mut r, padded)?;
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
        h
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
}
