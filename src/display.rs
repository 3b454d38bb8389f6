//! Escaping for text that came from the sandbox (file names, argv, output)
//! before it reaches the user's terminal, a log or a `--json` document.
//!
//! Everything in Unicode's Cc (C0, DEL, C1) and Cf (format: bidi overrides
//! and isolates, zero-width joiners, BOM, tags, …) categories, plus the line
//! and paragraph separators, is written as a visible `\u{…}` (or `\xNN` for a
//! byte that is not UTF-8), so the sandbox can neither move the cursor,
//! recolour, reorder nor hide what the user reads.

/// True for a character that must never reach a terminal raw.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || is_format(c) || c == '\u{2028}' || c == '\u{2029}'
}

/// Unicode general category Cf (format characters), Unicode 15.
fn is_format(c: char) -> bool {
    matches!(c as u32,
        0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891
        | 0x08E2 | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064
        | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD
        | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001
        | 0xE0020..=0xE007F)
}

/// `s` with every unsafe character (and the backslash, so the result is
/// unambiguous) escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_char(&mut out, c);
    }
    out
}

/// Like [`escape`] for bytes that may not be UTF-8: invalid bytes become
/// `\xNN`.
pub fn escape_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            push_char(&mut out, c);
        }
        for x in chunk.invalid() {
            out.push_str(&format!("\\x{x:02x}"));
        }
    }
    out
}

/// Escapes an OS path for display.
pub fn escape_path(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    escape_bytes(p.as_os_str().as_bytes())
}

fn push_char(out: &mut String, c: char) {
    if c == '\\' {
        out.push_str("\\\\");
    } else if is_unsafe(c) {
        if (c as u32) < 0x100 {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    } else {
        out.push(c);
    }
}

/// Human size: `0 B`, `12 KiB`, `3.4 MiB`.
pub fn human_size(b: u64) -> String {
    const U: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", U[i])
    } else {
        format!("{v:.0} {}", U[i])
    }
}

/// A path shortened to `max` characters with an ellipsis in the middle.
/// `s` for the terminal: control and bidi characters escaped (it may be a
/// name the sandbox chose), then shortened to `max` characters.
pub fn fit(s: &str, max: usize) -> String {
    let escaped = escape(s);
    let s = escaped.as_str();
    let n = s.chars().count();
    if n <= max || max < 5 {
        return s.to_string();
    }
    let head = (max - 1) / 2;
    let tail = max - 1 - head;
    let a: String = s.chars().take(head).collect();
    let b: String = s.chars().skip(n - tail).collect();
    format!("{a}…{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_bidi_and_bad_bytes_are_visible() {
        assert_eq!(escape("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape("x\u{202e}y\u{2066}"), "x\\u{202e}y\\u{2066}");
        assert_eq!(
            escape("\u{200b}\u{feff}\u{2028}\u{85}"),
            "\\u{200b}\\u{feff}\\u{2028}\\x85"
        );
        assert_eq!(escape("a\\x1b"), "a\\\\x1b");
        assert_eq!(escape_bytes(b"n\xff\x07\xc3\xa9"), "n\\xff\\x07\u{e9}");
        assert_eq!(escape("plain-name_1.txt é 日本"), "plain-name_1.txt é 日本");
        for c in escape("\u{1b}\u{9b}\u{202a}\u{e0041}").chars() {
            assert!(!is_unsafe(c));
        }
    }
}
