//! Streaming replacement: byte patterns replaced (or only detected) in a
//! stream cut at arbitrary points, a partial match held back only while
//! it can still become one.

/// Replaces (or, with no replacement, detects) byte patterns in a stream
/// cut at arbitrary points.
#[derive(Debug, Clone)]
pub(super) struct Replacer {
    /// (pattern, replacement); `None`: finding it is an error (its index).
    pub(super) pats: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    first: [bool; 256],
    /// Bytes held back: a proper prefix of some pattern.
    pub(super) held: Vec<u8>,
}

impl Replacer {
    pub fn new(pats: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Replacer {
        let mut first = [false; 256];
        let pats: Vec<_> = pats.into_iter().filter(|(p, _)| !p.is_empty()).collect();
        for (p, _) in &pats {
            first[p[0] as usize] = true;
        }
        Replacer {
            pats,
            first,
            held: Vec::new(),
        }
    }

    /// Appends the replaced `input` to `out`; `Err(i)`: detect-only
    /// pattern `i` was found (nothing of the match is written).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), usize> {
        self.run(input, out, false)
    }

    /// [`Replacer::feed`]; `last`: nothing follows `input` (nothing is
    /// held back). Where patterns overlap the longest match wins: a value
    /// that begins with another (shorter) one is replaced whole, and
    /// bytes that could still become the longer one are held back even
    /// when the shorter one is complete.
    fn run(&mut self, input: &[u8], out: &mut Vec<u8>, last: bool) -> Result<(), usize> {
        if self.pats.is_empty() {
            out.extend_from_slice(input);
            return Ok(());
        }
        let joined;
        let buf: &[u8] = if self.held.is_empty() {
            input
        } else {
            let mut j = std::mem::take(&mut self.held);
            j.extend_from_slice(input);
            joined = j;
            &joined
        };
        let mut i = 0;
        let mut copied = 0;
        while i < buf.len() {
            // Skip to the next byte that can start a pattern.
            match buf[i..].iter().position(|b| self.first[*b as usize]) {
                None => break,
                Some(k) => i += k,
            }
            let rest = &buf[i..];
            let mut matched: Option<usize> = None;
            let mut partial = false;
            for (n, (p, _)) in self.pats.iter().enumerate() {
                if rest.len() >= p.len() {
                    if rest[..p.len()] == p[..] && matched.is_none_or(|m| p.len() > self.pats[m].0.len()) {
                        matched = Some(n);
                    }
                } else if !last && p.starts_with(rest) {
                    partial = true;
                }
            }
            if partial {
                // A longer match may still come: hold from here.
                out.extend_from_slice(&buf[copied..i]);
                self.held = rest.to_vec();
                return Ok(());
            }
            if let Some(n) = matched {
                out.extend_from_slice(&buf[copied..i]);
                match &self.pats[n].1 {
                    Some(r) => out.extend_from_slice(r),
                    None => return Err(n),
                }
                i += self.pats[n].0.len();
                copied = i;
            } else {
                i += 1;
            }
        }
        out.extend_from_slice(&buf[copied..]);
        Ok(())
    }

    /// End of stream: whatever was held back, replaced as it stands (a
    /// shorter complete match in it is replaced; the rest never became
    /// one).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let held = std::mem::take(&mut self.held);
        if self.run(&held, out, true).is_err() {
            // Only a detect-only pattern errs; nothing follows a find.
            self.held.clear();
        }
    }

    /// Replaces in one complete buffer.
    pub fn once(&self, input: &[u8]) -> Result<Vec<u8>, usize> {
        let mut r = Replacer {
            pats: self.pats.clone(),
            first: self.first,
            held: Vec::new(),
        };
        let mut out = Vec::with_capacity(input.len());
        r.run(input, &mut out, true)?;
        Ok(out)
    }
}
