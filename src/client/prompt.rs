//! The escalation prompt as the developer's terminal shows it, laid out by
//! the client for the terminal it has (pure: `render` takes the size).
//!
//! Bounded and unambiguous whatever the sandbox put into the request: the
//! justification has its whitespace runs collapsed and is shown on at most
//! [`WHY_LINES`] lines, cut with a marker; the command is shown in full up
//! to [`COMMAND_SHOW_MAX`] characters (then cut with a marker: the audit
//! log and `lazaret escalations` have all of it), continuation lines
//! indented under it; every string is escaped (`display::escape`); the
//! line right above the question repeats the command and the host
//! directory. The whole prompt never needs more rows than the terminal
//! has: on a terminal too small for it, [`render`] says so and the request
//! is refused instead of scrolling part of it away.

use crate::escalation::{neutralize, quote_argv};
use crate::wire::client::PromptInfo;

/// Puts the terminal into a known state before the prompt is drawn, so
/// nothing the sandbox wrote (a sequence left unfinished, scroll region,
/// origin mode, alternate screen, colours, hidden cursor, a graphics
/// character set) can hide or fake it: CAN and ST end whatever escape
/// sequence or string (OSC, DCS) the sandbox left open, so none swallows
/// the prompt; then soft reset (DECSTR), full-screen scroll region, origin mode
/// off, main screen, SGR reset, cursor shown, ASCII character set,
/// left/right margins, insert and newline modes off, mouse and focus
/// reporting off (no click or focus change types into the answer), then
/// the bottom line of the screen, where the prompt scrolls everything above
/// it up.
pub const TERMINAL_RESET: &str =
    "\x18\x1b\\\x1b[!p\x1b[r\x1b[?6l\x1b[?1049l\x1b[?47l\x1b[0m\x1b[?25h\x1b(B\x0f\x1b[?7h\
     \x1b[?69l\x1b[4l\x1b[20l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1004l\
     \x1b[9999;1H";

/// The question; answers are whole lines.
pub const QUESTION: &str = "run it? type yes, no or edit, then Enter: ";
/// Most lines the justification takes.
pub const WHY_LINES: usize = 3;
/// Most characters of the (quoted, escaped) command shown.
pub const COMMAND_SHOW_MAX: usize = 2048;
/// Fewest columns the prompt is drawn in.
pub const MIN_COLS: u16 = 50;

const HEADER: &str = "-- lazaret: the sandbox asks to run a command on the host --";
/// The header of an SSH agent signature's prompt (issue 51).
const SSH_HEADER: &str = "-- lazaret: the sandbox asks your SSH agent for a signature --";
/// The question of an SSH agent signature's prompt: no edit.
pub const SSH_QUESTION: &str = "sign it? type yes or no, then Enter: ";
const INDENT: &str = "         ";

/// Columns a character may take: 1 for ASCII, 2 for anything else (wide
/// characters take 2; counting every other one as 2 only leaves room).
fn width(c: char) -> usize {
    if c.is_ascii() {
        1
    } else {
        2
    }
}

fn text_width(s: &str) -> usize {
    s.chars().map(width).sum()
}

/// Most combining marks in a row shown as they are: a longer stack (the
/// "zalgo" trick) is drawn by many terminals over the rows above and
/// below, so the marks after these are written as visible `\u{…}`.
pub const MARKS_MAX: usize = 3;

/// A combining mark of the blocks stacking text uses (general diacritics,
/// Cyrillic, Hebrew, Arabic, Syriac, Thaana, NKo, Thai, Lao, Tibetan,
/// extended and supplementary diacritics, symbols' marks, half marks,
/// variation selectors, musical symbols).
fn is_mark(c: char) -> bool {
    matches!(c as u32,
        0x0300..=0x036F | 0x0483..=0x0489 | 0x0591..=0x05BD | 0x05BF | 0x05C1..=0x05C2
        | 0x05C4..=0x05C5 | 0x05C7 | 0x0610..=0x061A | 0x064B..=0x065F | 0x0670
        | 0x06D6..=0x06DC | 0x06DF..=0x06E4 | 0x06E7..=0x06E8 | 0x06EA..=0x06ED | 0x0711
        | 0x0730..=0x074A | 0x07A6..=0x07B0 | 0x07EB..=0x07F3 | 0x0816..=0x082D | 0x0859..=0x085B
        | 0x0898..=0x089F | 0x08CA..=0x08FF | 0x0E31 | 0x0E34..=0x0E3A | 0x0E47..=0x0E4E | 0x0EB1
        | 0x0EB4..=0x0EBC | 0x0EC8..=0x0ECE | 0x0F18..=0x0F19 | 0x0F35 | 0x0F37 | 0x0F39
        | 0x0F71..=0x0F84 | 0x0F86..=0x0F87 | 0x0F8D..=0x0FBC | 0x135D..=0x135F | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0x2CEF..=0x2CF1 | 0x2DE0..=0x2DFF | 0x302A..=0x302F
        | 0x3099..=0x309A | 0xA66F..=0xA672 | 0xA674..=0xA67D | 0xA69E..=0xA69F | 0xFE00..=0xFE0F
        | 0xFE20..=0xFE2F | 0x1D165..=0x1D169 | 0x1D16D..=0x1D172 | 0x1D17B..=0x1D182
        | 0x1D185..=0x1D18B | 0x1D1AA..=0x1D1AD | 0xE0100..=0xE01EF)
}

/// `s` (already escaped) with every combining mark after the first
/// [`MARKS_MAX`] of a run written as `\u{…}`.
fn cap_marks(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut run = 0;
    for c in s.chars() {
        if is_mark(c) {
            run += 1;
            if run > MARKS_MAX {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
                continue;
            }
        } else {
            run = 0;
        }
        out.push(c);
    }
    out
}

/// `s` (already escaped) with every character that is not ASCII written
/// as `\u{…}`: the line above the question reads the same on every
/// terminal, whatever its widths, bidi reordering, combining or
/// look-alike letters (a Cyrillic `һ` in `gitһub.com`).
pub fn ascii(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    out
}

/// Hard-wraps `text` after `label` (the first line) and [`INDENT`] (the
/// rest) so that no line is wider than `cols`.
fn wrap(label: &str, text: &str, cols: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = label.to_string();
    let mut w = text_width(label);
    for c in text.chars() {
        if w + width(c) > cols {
            lines.push(std::mem::replace(&mut cur, INDENT.to_string()));
            w = INDENT.len();
        }
        cur.push(c);
        w += width(c);
    }
    lines.push(cur);
    lines
}

/// The first characters of `s` that fit in `cols` columns.
fn head(s: &str, cols: usize) -> String {
    let mut w = 0;
    s.chars()
        .take_while(|c| {
            w += width(*c);
            w <= cols
        })
        .collect()
}

/// The last characters of `s` that fit in `cols` columns.
fn tail(s: &str, cols: usize) -> String {
    let mut w = 0;
    let v: Vec<char> = s
        .chars()
        .rev()
        .take_while(|c| {
            w += width(*c);
            w <= cols
        })
        .collect();
    v.into_iter().rev().collect()
}

/// The justification as shown: whitespace runs (newlines, tabs, any
/// number of spaces) collapsed into one space, then escaped.
pub fn collapse(why: &str) -> String {
    let words: Vec<&str> = why.split(char::is_whitespace).filter(|w| !w.is_empty()).collect();
    neutralize(&words.join(" "))
}

/// The command as shown: quoted and escaped, cut after
/// [`COMMAND_SHOW_MAX`] characters with a marker.
pub fn command_text(argv: &[String]) -> String {
    let full = quote_argv(argv);
    let n = full.chars().count();
    if n <= COMMAND_SHOW_MAX {
        return full;
    }
    let shown: String = full.chars().take(COMMAND_SHOW_MAX).collect();
    format!(
        "{shown} [cut: {} more characters; the audit log and `lazaret escalations` show all of it]",
        n - COMMAND_SHOW_MAX
    )
}

/// The terminal cannot show the whole prompt.
#[derive(Debug, PartialEq, Eq)]
pub struct TooSmall {
    pub rows: u16,
    pub cols: u16,
    /// Rows the prompt needs at this width (0: too narrow for any).
    pub needed: usize,
}

impl std::fmt::Display for TooSmall {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "lazaret: the sandbox asked to run a command on the host, but this terminal ({} rows, {} columns) \
             is too small to show the request in full (it needs ",
            self.rows, self.cols
        )?;
        if self.needed == 0 {
            write!(f, "at least {MIN_COLS} columns")?;
        } else {
            write!(f, "{} rows", self.needed)?;
        }
        write!(
            f,
            "): the request was refused and nothing ran. Enlarge the terminal and ask again \
             (`lazaret escalations` lists waiting requests)."
        )
    }
}

/// The prompt's lines for a terminal `cols` wide, the question last.
pub fn lines(p: &PromptInfo, cols: u16) -> Vec<String> {
    if !p.ssh.is_empty() {
        return ssh_lines(p, cols as usize);
    }
    let cols = cols as usize;
    let cmd = cap_marks(&command_text(&p.argv));
    let cwd = cap_marks(&neutralize(&p.cwd));
    let mut out = vec![head(HEADER, cols), who(p, cols)];
    out.extend(wrap("command: ", &cmd, cols));
    out.extend(wrap("cwd:     ", &cwd, cols));
    let why = match cap_marks(&collapse(&p.justification)) {
        w if w.is_empty() => "(none given)".to_string(),
        w => w,
    };
    let mut why_lines = wrap("why:     ", &why, cols);
    if why_lines.len() > WHY_LINES {
        why_lines.truncate(WHY_LINES);
        let marker = " [cut]";
        let last = why_lines.last_mut().expect("WHY_LINES > 0");
        let keep = head(last, cols - marker.len());
        *last = format!("{keep}{marker}");
    }
    out.extend(why_lines);
    out.push(head(&format!("(no answer within {} s denies it)", p.timeout_s), cols));
    out.push(repeat_line(&ascii(&cmd), &ascii(&cwd), cols));
    out.push(QUESTION.to_string());
    out
}

/// The prompt's second line: the asking profile and session.
fn who(p: &PromptInfo, cols: usize) -> String {
    head(
        &format!(
            "profile: {}   session: {}",
            cap_marks(&neutralize(&p.profile)),
            cap_marks(&neutralize(&p.session_id))
        ),
        cols,
    )
}

/// An SSH agent signature's prompt: what is signed, one item a line (the
/// coordinator's text, escaped again here), the key repeated in ASCII
/// above the question.
fn ssh_lines(p: &PromptInfo, cols: usize) -> Vec<String> {
    let mut out = vec![head(SSH_HEADER, cols), who(p, cols)];
    for l in p.ssh.iter().take(8) {
        out.extend(wrap("", &cap_marks(&neutralize(l)), cols));
    }
    out.push(head(&format!("(no answer within {} s denies it)", p.timeout_s), cols));
    out.push(head(&format!("=> {}", ascii(&neutralize(&p.ssh[0]))), cols));
    out.push(SSH_QUESTION.to_string());
    out
}

/// The line above the question: the command and the host directory again,
/// on one line, in ASCII ([`ascii`]; each cut with a marker when both do
/// not fit).
fn repeat_line(cmd: &str, cwd: &str, cols: usize) -> String {
    let full = format!("=> {cmd}   in {cwd}");
    if text_width(&full) <= cols {
        return full;
    }
    // The directory keeps its last part, the command its first.
    let cwd_room = (cols / 2).min(text_width(cwd));
    let cwd_shown = if cwd_room < text_width(cwd) {
        format!("[...]{}", tail(cwd, cwd_room.saturating_sub(5)))
    } else {
        cwd.to_string()
    };
    let fixed = "=> ".len() + "[...]   in ".len() + text_width(&cwd_shown);
    let cmd_shown = head(cmd, cols.saturating_sub(fixed));
    format!("=> {cmd_shown}[...]   in {cwd_shown}")
}

/// The bytes that draw the prompt on a terminal of `rows` x `cols`: reset,
/// then each line on a cleared line, the question last (no newline after
/// it). Refused when it would not fit.
pub fn render(p: &PromptInfo, rows: u16, cols: u16) -> Result<String, TooSmall> {
    if cols < MIN_COLS {
        return Err(TooSmall { rows, cols, needed: 0 });
    }
    let lines = lines(p, cols);
    // The first `\r\n` moves the bottom line up: each line takes one row
    // (none is wider than the terminal), the question the last.
    if lines.len() > rows as usize {
        return Err(TooSmall {
            rows,
            cols,
            needed: lines.len(),
        });
    }
    let mut out = String::from(TERMINAL_RESET);
    out.push_str("\r\n");
    let n = lines.len();
    for (i, l) in lines.into_iter().enumerate() {
        // Each line starts on a cleared line: nothing drawn before shows through.
        out.push_str("\x1b[2K");
        if i == 0 {
            out.push_str(&format!("\x1b[1m{l}\x1b[0m"));
        } else {
            out.push_str(&l);
        }
        if i + 1 < n {
            out.push_str("\r\n");
        }
    }
    Ok(out)
}

/// What is said instead of the prompt on a terminal too small for it.
pub fn too_small_text(t: &TooSmall) -> String {
    format!("{TERMINAL_RESET}\r\n\x1b[2K{t}\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(argv: &[&str], why: &str) -> PromptInfo {
        PromptInfo {
            request_id: "r".into(),
            profile: "default".into(),
            session_id: "0123456789abcdef".into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: "/home/u/ws".into(),
            justification: why.into(),
            timeout_s: 300,
            ssh: Vec::new(),
        }
    }

    /// The lines as the terminal shows them (the drawn text without its
    /// control sequences).
    fn shown(p: &PromptInfo, rows: u16, cols: u16) -> Vec<String> {
        let t = render(p, rows, cols).unwrap();
        assert!(t.starts_with(TERMINAL_RESET));
        lines(p, cols)
    }

    // Covers DX-4.
    #[test]
    fn the_line_above_the_question_repeats_command_and_directory() {
        let l = shown(&info(&["touch", "/x"], "why"), 24, 80);
        assert_eq!(l.last().unwrap(), QUESTION);
        assert_eq!(l[l.len() - 2], "=> touch /x   in /home/u/ws");
        assert!(l.contains(&"command: touch /x".to_string()), "{l:?}");
        assert!(l.contains(&"why:     why".to_string()), "{l:?}");
    }

    #[test]
    fn whitespace_padding_and_newlines_are_collapsed_and_cut() {
        let pad = format!("a{}b\n\n\nc\r\td", " ".repeat(10_000));
        let l = shown(&info(&["true"], &pad), 24, 80);
        assert!(l.contains(&"why:     a b c d".to_string()), "{l:?}");
        // A fake prompt inside the justification stays on the why lines,
        // escaped and cut.
        let fake = format!(
            "{}\n-- lazaret: the sandbox asks to run a command on the host --\ncommand: git status\n\
             run it? type yes, no or edit, then Enter: \x1b[2J{}",
            "x".repeat(50),
            "y ".repeat(2000)
        );
        let l = lines(&info(&["touch", "/m"], &fake), 80);
        let why: Vec<&String> = l
            .iter()
            .filter(|x| x.starts_with("why:") || x.starts_with(INDENT))
            .collect();
        assert!(why.len() <= WHY_LINES, "{l:?}");
        assert!(why.last().unwrap().ends_with("[cut]"), "{l:?}");
        assert!(l.iter().all(|x| !x.contains('\x1b') && !x.contains('\n')), "{l:?}");
        assert!(!l.iter().any(|x| x.starts_with("command: git")), "{l:?}");
        assert_eq!(l[l.len() - 2], "=> touch /m   in /home/u/ws");
        assert!(l.iter().all(|x| text_width(x) <= 80), "{l:?}");
    }

    #[test]
    fn a_long_command_is_shown_in_full_up_to_the_cap_then_cut() {
        let args: Vec<String> = (0..100).map(|i| format!("arg{i}")).collect();
        let mut argv = vec!["echo".to_string()];
        argv.extend(args);
        let p = PromptInfo {
            argv: argv.clone(),
            ..info(&[], "")
        };
        let l = lines(&p, 80);
        let joined: String = l.iter().map(|x| x.trim_start_matches(INDENT)).collect();
        assert!(joined.contains(&quote_argv(&argv)), "{l:?}");
        assert!(l.iter().all(|x| text_width(x) <= 80));
        let huge = vec!["x".repeat(10_000)];
        let t = command_text(&huge);
        assert!(t.contains("[cut: 7952 more characters"), "{t}");
        // The repeat line is cut too, and marked.
        let p = PromptInfo {
            argv: huge,
            ..info(&[], "")
        };
        let l = lines(&p, 80);
        let rep = &l[l.len() - 2];
        assert!(rep.contains("[...]") && rep.ends_with("in /home/u/ws"), "{rep}");
        assert!(text_width(rep) <= 80);
    }

    #[test]
    fn a_small_terminal_is_refused_not_scrolled() {
        let p = info(&["touch", "/x"], "why");
        let need = lines(&p, 80).len();
        assert!(render(&p, need as u16, 80).is_ok());
        assert_eq!(
            render(&p, need as u16 - 1, 80),
            Err(TooSmall {
                rows: need as u16 - 1,
                cols: 80,
                needed: need
            })
        );
        assert_eq!(render(&p, 50, 20).unwrap_err().needed, 0);
        let msg = render(&p, 5, 80).unwrap_err().to_string();
        assert!(msg.contains("too small") && msg.contains("nothing ran"), "{msg}");
    }

    #[test]
    fn escapes_and_wide_characters_never_overflow_a_line() {
        let p = info(&["echo", &"界\u{202e}\x1b[2J".repeat(40)], "界 \u{200b}");
        for cols in [50u16, 51, 80, 133] {
            let l = lines(&p, cols);
            assert!(l.iter().all(|x| text_width(x) <= cols as usize), "{cols}: {l:?}");
            assert!(
                l.iter().all(|x| !x.contains('\x1b') && !x.contains('\u{202e}')),
                "{l:?}"
            );
        }
    }

    #[test]
    fn look_alike_letters_and_rtl_text_are_spelled_out_on_the_line_above_the_question() {
        // A Cyrillic shha in the host name, Hebrew names bidi would swap.
        let p = PromptInfo {
            cwd: "/home/u/ws/\u{5e9}\u{5dc}".into(),
            ..info(
                &["git", "push", "https://git\u{4bb}ub.com/me/r", "\u{5d0}", "\u{5d1}"],
                "",
            )
        };
        let l = lines(&p, 120);
        let rep = &l[l.len() - 2];
        assert_eq!(
            rep,
            "=> git push 'https://git\\u{4bb}ub.com/me/r' '\\u{5d0}' '\\u{5d1}'   in /home/u/ws/\\u{5e9}\\u{5dc}"
        );
        assert!(rep.is_ascii());
        // The command line above keeps the text as written.
        assert!(l.iter().any(|x| x.contains("https://git\u{4bb}ub.com/me/r")), "{l:?}");
    }

    #[test]
    fn a_stack_of_combining_marks_is_cut_to_a_few() {
        let zalgo: String = std::iter::once('a')
            .chain((0..60).map(|i| char::from_u32(0x0300 + i).unwrap()))
            .collect();
        let p = PromptInfo {
            cwd: format!("/w/{zalgo}"),
            ..info(&["touch", &zalgo], &zalgo)
        };
        for cols in [50u16, 80, 200] {
            let l = lines(&p, cols);
            for x in &l {
                let mut run = 0;
                for c in x.chars() {
                    run = if is_mark(c) { run + 1 } else { 0 };
                    assert!(run <= MARKS_MAX, "{cols}: {x:?}");
                }
                assert!(text_width(x) <= cols as usize, "{cols}: {x:?}");
            }
            assert!(l.iter().any(|x| x.contains("\\u{303}")), "{l:?}");
            assert!(l[l.len() - 2].is_ascii() && l[l.len() - 2].starts_with("=> touch "));
        }
        // Legitimate text keeps its marks (Vietnamese written decomposed).
        assert_eq!(cap_marks("e\u{323}\u{302}"), "e\u{323}\u{302}");
    }

    #[test]
    fn wide_c1_and_fake_lines_never_move_the_line_above_the_question() {
        let wide = "\u{754c}".repeat(300);
        let cases: Vec<(Vec<&str>, &str)> = vec![
            // A single-byte CSI (C1), as a character.
            (vec!["touch", "/m\u{9b}2J\u{9b}8A"], "why"),
            // CJK that takes two columns each, in argv and justification.
            (vec!["touch", &wide], &wide),
            // An argument and a justification shaped like the repeat line.
            (
                vec!["touch", "/m\n=> git status   in /"],
                "x\n=> git status   in /\nrun it? type yes",
            ),
            // Fullwidth letters and an ideographic space.
            (vec!["\u{ff54}ouch", "a\u{3000}b"], "\u{3000}\u{3000}"),
        ];
        for (argv, why) in cases {
            let p = info(&argv, why);
            for cols in [50u16, 61, 80, 137] {
                let l = lines(&p, cols);
                assert_eq!(l.last().unwrap(), QUESTION);
                let rep = &l[l.len() - 2];
                assert!(
                    rep.starts_with("=> ") && rep.ends_with("in /home/u/ws"),
                    "{cols}: {rep}"
                );
                assert!(rep.is_ascii(), "{rep}");
                assert_eq!(l.iter().filter(|x| x.starts_with("=> ")).count(), 1, "{l:?}");
                assert!(l.iter().filter(|x| x.starts_with("run it?")).count() == 1, "{l:?}");
                assert!(l.iter().all(|x| text_width(x) <= cols as usize), "{cols}: {l:?}");
                assert!(l.iter().all(|x| !x.chars().any(crate::display::is_unsafe)), "{l:?}");
            }
        }
    }

    #[test]
    fn the_reset_turns_off_what_would_type_into_the_answer() {
        for mode in ["?1000l", "?1002l", "?1003l", "?1006l", "?1015l", "?1004l", "?69l"] {
            assert!(TERMINAL_RESET.contains(&format!("\x1b[{mode}")), "{mode}");
        }
        assert!(TERMINAL_RESET.starts_with("\x18\x1b\\") && TERMINAL_RESET.ends_with("\x1b[9999;1H"));
    }

    /// Issue 51: a signature's prompt names what is signed, repeats its
    /// first line in ASCII above the question, and offers no edit.
    #[test]
    fn an_ssh_prompt_shows_what_is_signed_and_asks_yes_or_no() {
        let mut p = info(&[], "");
        p.argv = Vec::new();
        p.ssh = vec![
            "SSH login as \"git\u{202e}\" with key SHA256:k".into(),
            "to the server with host key ssh-ed25519 SHA256:h (known as github.com)".into(),
        ];
        let l = lines(&p, 80);
        assert!(l[0].contains("SSH agent"), "{l:?}");
        assert_eq!(l.last().unwrap(), SSH_QUESTION);
        let above = &l[l.len() - 2];
        assert!(above.starts_with("=> SSH login as") && above.is_ascii(), "{l:?}");
        assert!(!l.concat().contains('\u{202e}'), "{l:?}");
        assert!(l.iter().any(|x| x.contains("known as github.com")), "{l:?}");
        assert!(!l.iter().any(|x| x.starts_with("command:")), "{l:?}");
    }
}
