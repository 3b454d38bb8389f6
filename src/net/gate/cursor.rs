//! A bounds-checked reader over a byte slice, for the ClientHello and DNS
//! parsers.

pub(super) struct Cursor<'a>(pub(super) &'a [u8], pub(super) usize);

impl<'a> Cursor<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.0.get(self.1..self.1.checked_add(n)?)?;
        self.1 += n;
        Some(s)
    }
    pub(super) fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }
    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(super) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
}
