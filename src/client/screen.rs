//! Whether the session's program has the terminal's alternate screen (a
//! full-screen UI: an editor, a pager, an agent's TUI) active, read from
//! its output as it passes to the terminal: `ESC [ ? 1049 h` (also 1047
//! and 47) turns it on, the same with `l` off, `ESC c` (a full reset)
//! off. A sequence may be split across reads at any byte. While it is on,
//! Lazaret's own notices wait (`client::answer::Terminal`) instead of
//! drawing over the program's screen.

/// The private modes that switch to the alternate screen.
const ALT_MODES: [&[u8]; 3] = [b"1049", b"1047", b"47"];
/// Longest parameter string kept: a longer one is no mode we track.
const PARAMS_MAX: usize = 32;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum State {
    #[default]
    Ground,
    /// After `ESC`.
    Escape,
    /// After `ESC [`: parameters until a final byte.
    Csi,
}

/// The tracker: fed every byte of the program's output, in order.
#[derive(Debug, Default)]
pub(super) struct AltScreen {
    on: bool,
    state: State,
    params: Vec<u8>,
    /// The sequence is no `ESC [ ? N(;N)* h|l` (an intermediate byte,
    /// another private marker, too long): its final byte changes nothing.
    other: bool,
}

impl AltScreen {
    /// The alternate screen is active.
    pub(super) fn full(&self) -> bool {
        self.on
    }

    /// Reads `data`, the next bytes of the program's output.
    pub(super) fn feed(&mut self, data: &[u8]) {
        for &b in data {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        match self.state {
            State::Ground => {
                if b == 0x1b {
                    self.state = State::Escape;
                }
            }
            State::Escape => match b {
                b'[' => {
                    self.state = State::Csi;
                    self.params.clear();
                    self.other = false;
                }
                // RIS: the terminal resets to its main screen.
                b'c' => {
                    self.on = false;
                    self.state = State::Ground;
                }
                0x1b => {}
                _ => self.state = State::Ground,
            },
            State::Csi => match b {
                0x1b => self.state = State::Escape,
                // CAN and SUB cancel a sequence.
                0x18 | 0x1a => self.state = State::Ground,
                // Other controls inside a sequence are acted on by the
                // terminal and leave the sequence going.
                0x00..=0x1f => {}
                b'0'..=b'9' | b';' | b'?' => {
                    if self.params.len() < PARAMS_MAX {
                        self.params.push(b);
                    } else {
                        self.other = true;
                    }
                }
                0x40..=0x7e => {
                    self.state = State::Ground;
                    if self.other || !(b == b'h' || b == b'l') {
                        return;
                    }
                    let Some(modes) = self.params.strip_prefix(b"?") else {
                        return;
                    };
                    if modes.split(|&c| c == b';').any(|m| ALT_MODES.contains(&m)) {
                        self.on = b == b'h';
                    }
                }
                // Intermediates, other private markers (`<`, `=`, `>`),
                // and anything else: not a mode we track.
                _ => self.other = true,
            },
        }
    }
}

/// Most notices held while the alternate screen is on, and most bytes.
const HELD_MAX: usize = 32;
const HELD_BYTES_MAX: usize = 16 * 1024;

/// Lazaret's notices held while the program has the alternate screen:
/// shown once, in order, when it leaves it or the session ends. Bounded:
/// past [`HELD_MAX`] notices (or [`HELD_BYTES_MAX`] bytes) only a count
/// is kept, and one line says how many were not shown (the egress gate's
/// refusals are all in `lazaret net log`).
#[derive(Debug, Default)]
pub(super) struct HeldNotices {
    held: Vec<Vec<u8>>,
    bytes: usize,
    dropped: usize,
}

impl HeldNotices {
    pub(super) fn hold(&mut self, data: Vec<u8>) {
        if self.held.len() >= HELD_MAX || self.bytes + data.len() > HELD_BYTES_MAX {
            self.dropped += 1;
            return;
        }
        self.bytes += data.len();
        self.held.push(data);
    }

    /// What to write now (`eol` ends the line about dropped notices),
    /// emptying the queue.
    pub(super) fn take(&mut self, eol: &str) -> Vec<u8> {
        let mut out: Vec<u8> = std::mem::take(&mut self.held).concat();
        if self.dropped > 0 {
            out.extend_from_slice(
                format!(
                    "lazaret: {} more notice(s) not shown while the screen was full (`lazaret net log` lists refusals){eol}",
                    self.dropped
                )
                .as_bytes(),
            );
        }
        self.bytes = 0;
        self.dropped = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_notices_are_bounded_and_given_once() {
        let mut h = HeldNotices::default();
        assert!(h.take("\r\n").is_empty());
        h.hold(b"one\r\n".to_vec());
        h.hold(b"two\r\n".to_vec());
        assert_eq!(h.take("\r\n"), b"one\r\ntwo\r\n");
        assert!(h.take("\r\n").is_empty(), "given once");
        for i in 0..HELD_MAX + 5 {
            h.hold(format!("n{i}\r\n").into_bytes());
        }
        let out = String::from_utf8(h.take("\r\n")).unwrap();
        assert_eq!(out.matches("\r\n").count(), HELD_MAX + 1, "{out}");
        assert!(out.ends_with(
            "lazaret: 5 more notice(s) not shown while the screen was full (`lazaret net log` lists refusals)\r\n"
        ));
        h.hold(vec![b'x'; HELD_BYTES_MAX + 1]);
        assert!(String::from_utf8(h.take("\n")).unwrap().starts_with("lazaret: 1 more"));
    }

    fn after(chunks: &[&[u8]]) -> bool {
        let mut s = AltScreen::default();
        for c in chunks {
            s.feed(c);
        }
        s.full()
    }

    #[test]
    fn the_alternate_screen_modes_turn_it_on_and_off() {
        for m in ["1049", "1047", "47"] {
            let on = format!("\x1b[?{m}h");
            let off = format!("\x1b[?{m}l");
            assert!(after(&[on.as_bytes()]), "{m}");
            assert!(!after(&[on.as_bytes(), b"drawing", off.as_bytes()]), "{m}");
            assert!(after(&[on.as_bytes(), b"text", off.as_bytes(), on.as_bytes()]), "{m}");
        }
        // Several modes in one sequence.
        assert!(after(&[b"\x1b[?1;1049;25h"]));
        assert!(!after(&[b"\x1b[?1049h\x1b[?25;1049l"]));
        // RIS resets to the main screen.
        assert!(!after(&[b"\x1b[?1049h", b"\x1bc"]));
    }

    #[test]
    fn other_sequences_change_nothing() {
        for s in [
            &b"\x1b[1049h"[..], // not private: a standard mode
            b"\x1b[?1048h",     // save cursor
            b"\x1b[?10490h",
            b"\x1b[?104h",
            b"\x1b[>1049h",
            b"\x1b[?1049$h", // an intermediate byte
            b"\x1b[?1049p",
            b"\x1b]0;\x1b[?1049h", // OSC: its ESC ends it, then a real CSI
            b"?1049h",
        ] {
            let want = s == b"\x1b]0;\x1b[?1049h";
            assert_eq!(after(&[s]), want, "{:?}", String::from_utf8_lossy(s));
        }
        // Too long a parameter string is no mode.
        let long = format!("\x1b[?{}1049h", "0;".repeat(20));
        assert!(!after(&[long.as_bytes()]));
        // CAN cancels; ESC restarts.
        assert!(!after(&[b"\x1b[?10\x1849h"]));
        assert!(after(&[b"\x1b[?10\x1b[?1049h"]));
        assert!(after(&[b"\x1b\x1b[?1049h"]));
        // A control inside the sequence does not break it.
        assert!(after(&[b"\x1b[?10\r49h"]));
    }

    #[test]
    fn a_sequence_split_across_reads_at_any_byte_is_seen() {
        let stream: &[u8] = b"abc\x1b[?1049hTUI\x1b[2J\x1b[?1049lafter";
        let on_at = stream.windows(8).position(|w| w == b"\x1b[?1049h").unwrap() + 8;
        let off_at = stream.windows(8).position(|w| w == b"\x1b[?1049l").unwrap() + 8;
        for cut in 0..=stream.len() {
            let mut s = AltScreen::default();
            s.feed(&stream[..cut]);
            assert_eq!(s.full(), cut >= on_at && cut < off_at, "cut {cut}");
            s.feed(&stream[cut..]);
            assert!(!s.full(), "cut {cut}");
        }
        // Byte by byte.
        let mut s = AltScreen::default();
        for b in b"\x1b[?1049h" {
            s.feed(&[*b]);
        }
        assert!(s.full());
    }
}
