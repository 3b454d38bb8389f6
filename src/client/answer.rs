//! The escalation prompt in the developer's terminal during a session:
//! drawing it (the layout is `prompt.rs`'s), taking only a deliberate
//! answer, and holding session output while it is up.

use std::time::{Duration, Instant};

use crate::client::screen::{AltScreen, HeldNotices};
use crate::sys;
use crate::wire::client::{self as wire_client, ClientMsg};

/// The developer's terminal as the session pump sees it: while a prompt is
/// up the terminal is the prompt's. Session output that arrives meanwhile
/// (the coordinator sends none; this is the second line of defence) waits
/// here and is written once the prompt is decided or ended.
///
/// On a terminal, the program's output also tells whether it has the
/// alternate screen (`client::screen`): while it has, Lazaret's notices
/// (what arrives on stderr: on a terminal the program's own stderr is in
/// its output stream) wait and are written once when it leaves it or the
/// session ends, never over its full-screen UI.
#[derive(Default)]
pub(super) struct Terminal {
    pub(super) prompt: Option<Prompt>,
    /// Output held while a prompt is up: (stderr?, bytes).
    held: Vec<(bool, Vec<u8>)>,
    /// The session has a terminal.
    tty: bool,
    screen: AltScreen,
    notices: HeldNotices,
}

impl Terminal {
    pub(super) fn new(tty: bool) -> Terminal {
        Terminal {
            tty,
            ..Terminal::default()
        }
    }

    /// Writes session output, or holds it while a prompt is up (and
    /// Lazaret's notices while the program's screen is full). `Err` is
    /// the EPIPE of a closed stdout.
    pub(super) fn output(&mut self, err: bool, data: Vec<u8>) -> Result<(), ()> {
        if self.prompt.is_some() {
            self.held.push((err, data));
            return Ok(());
        }
        if err {
            if self.tty && self.screen.full() {
                self.notices.hold(data);
            } else {
                let _ = sys::write_all(sys::STDERR, &data);
            }
            return Ok(());
        }
        let r = match sys::write_all(sys::STDOUT, &data) {
            Err(e) if e.raw_os_error() == Some(sys::EPIPE) => Err(()),
            _ => Ok(()),
        };
        if self.tty {
            self.screen.feed(&data);
            if !self.screen.full() {
                self.show_notices();
            }
        }
        r
    }

    /// Writes the notices held while the screen was full (once).
    fn show_notices(&mut self) {
        let out = self.notices.take(if self.tty { "\r\n" } else { "\n" });
        if !out.is_empty() {
            let _ = sys::write_all(sys::STDERR, &out);
        }
    }

    /// The session is over: notices still held are written now.
    pub(super) fn finish(&mut self) {
        self.end_prompt();
        self.show_notices();
    }

    /// The prompt is over: what was held goes out now, after it.
    pub(super) fn end_prompt(&mut self) {
        self.prompt = None;
        for (err, data) in std::mem::take(&mut self.held) {
            let _ = self.output(err, data);
        }
    }

    /// Shows a prompt, or refuses it when the terminal cannot show it in
    /// full: the decision to send then.
    pub(super) fn show(&mut self, info: wire_client::PromptInfo) -> Option<ClientMsg> {
        let (p, refused) = Prompt::show(info);
        self.prompt = p;
        if refused.is_some() {
            self.end_prompt();
        }
        refused
    }

    /// The terminal was resized: the prompt is drawn again for its size.
    pub(super) fn redraw(&mut self) -> Option<ClientMsg> {
        let old = self.prompt.take()?;
        let refused = self.show(old.info);
        if let Some(p) = self.prompt.as_mut() {
            p.resume(old.stage);
        }
        refused
    }
}

/// An escalation prompt being answered in the developer's terminal (raw
/// mode). Only deliberate answers count: typeahead is flushed when the
/// prompt is drawn and keystrokes in the next [`PROMPT_GRACE`] are
/// discarded, and the line they began is no answer (the sandbox sees what
/// is typed to it, so it can time the prompt to appear in the middle of a
/// line that ends in `yes`); an answer is a whole line that is exactly `y`/`yes`,
/// `n`/`no` or `e`/`edit`, anything else asks again; an edited command is
/// shown in full and needs its own `yes`. Ctrl-C denies.
pub(super) struct Prompt {
    pub(super) info: wire_client::PromptInfo,
    /// Keystrokes read before this instant are discarded.
    ignore_until: Instant,
    stage: PromptStage,
    line: String,
    /// Keys were discarded in the grace and the last was not Enter: the
    /// line they began does not count when it ends.
    typed_early: bool,
}

enum PromptStage {
    Ask,
    Edit,
    Confirm(Vec<String>),
}

/// How long after the prompt appears keystrokes are thrown away.
const PROMPT_GRACE: Duration = Duration::from_millis(500);
/// Longest answer line kept.
const PROMPT_LINE_MAX: usize = 8192;

impl Prompt {
    fn say(s: &str) {
        // Unit tests drive the prompt without a terminal to draw on.
        if cfg!(test) {
            return;
        }
        let _ = sys::write_all(sys::STDOUT, s.as_bytes());
    }

    fn new(info: wire_client::PromptInfo) -> Prompt {
        Prompt {
            info,
            ignore_until: Instant::now() + PROMPT_GRACE,
            stage: PromptStage::Ask,
            line: String::new(),
            typed_early: false,
        }
    }

    /// The prompt was drawn again (a resize): it goes on at the stage it
    /// was at, so a `yes` means what it meant before (an edited command
    /// still needs its own confirmation, never the original's).
    fn resume(&mut self, stage: PromptStage) {
        match &stage {
            PromptStage::Ask => {}
            PromptStage::Edit => Self::say("\r\n\x1b[2Kcommand to run instead: "),
            PromptStage::Confirm(argv) => Self::say(&format!(
                "\r\n\x1b[2Kedited command: {}\r\n\x1b[2Krun the edited command? type yes or no, then Enter: ",
                crate::escalation::quote_argv(argv)
            )),
        }
        self.stage = stage;
    }

    /// Draws the prompt for this terminal's size (the text starts by
    /// resetting the terminal state) and throws away whatever was typed
    /// before it. On a terminal too small to show all of it, says so and
    /// returns the refusal to send instead.
    fn show(info: wire_client::PromptInfo) -> (Option<Prompt>, Option<ClientMsg>) {
        let size = sys::get_winsize(sys::STDOUT).or_else(|| sys::get_winsize(sys::STDIN));
        let (rows, cols) = size.map_or((24, 80), |w| (w.rows, w.cols));
        let _ = sys::flush_input(sys::STDIN);
        match crate::client::prompt::render(&info, rows, cols) {
            Ok(text) => {
                Self::say(&text);
                (Some(Prompt::new(info)), None)
            }
            Err(small) => {
                Self::say(&crate::client::prompt::too_small_text(&small));
                let d = ClientMsg::Decision {
                    request_id: info.request_id,
                    verdict: wire_client::VERDICT_TOO_SMALL,
                    argv: Vec::new(),
                };
                (None, Some(d))
            }
        }
    }

    fn decide(&self, verdict: u8, argv: Vec<String>, word: &str) -> ClientMsg {
        Self::say(&format!("{word}\r\n"));
        ClientMsg::Decision {
            request_id: self.info.request_id.clone(),
            verdict,
            argv,
        }
    }

    /// Consumes keystrokes; returns the decision once there is one.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Option<ClientMsg> {
        if Instant::now() < self.ignore_until {
            if let Some(&last) = bytes.last() {
                self.typed_early = !matches!(last, b'\r' | b'\n');
            }
            return None;
        }
        let text = String::from_utf8_lossy(bytes).into_owned();
        for c in text.chars() {
            match c {
                '\r' | '\n' => {
                    let line = std::mem::take(&mut self.line);
                    Self::say("\r\n");
                    if std::mem::take(&mut self.typed_early) {
                        Self::say("(this line was begun before the prompt appeared, so it is no answer) ");
                        Self::say(match self.stage {
                            PromptStage::Confirm(_) => "type yes or no, then Enter: ",
                            PromptStage::Edit => "command to run instead: ",
                            PromptStage::Ask => "type yes, no or edit, then Enter: ",
                        });
                        continue;
                    }
                    if let Some(d) = self.enter(&line) {
                        return Some(d);
                    }
                }
                '\u{3}' => return Some(self.decide(wire_client::VERDICT_DENY, Vec::new(), "\r\ndenied")),
                '\u{7f}' | '\u{8}' => {
                    let erased = self.line.pop().is_some();
                    if erased {
                        Self::say("\u{8} \u{8}");
                    }
                }
                '\u{15}' => {
                    for _ in 0..self.line.chars().count() {
                        Self::say("\u{8} \u{8}");
                    }
                    self.line.clear();
                }
                c if !crate::display::is_unsafe(c) && self.line.len() < PROMPT_LINE_MAX => {
                    self.line.push(c);
                    Self::say(&c.to_string());
                }
                _ => {}
            }
        }
        None
    }

    /// "edit" was answered: asks for the command to run instead.
    fn ask_for_edit(&mut self) -> Option<ClientMsg> {
        Self::say("command to run instead: ");
        self.stage = PromptStage::Edit;
        None
    }

    /// A whole line was entered.
    fn enter(&mut self, line: &str) -> Option<ClientMsg> {
        use crate::escalation::{parse_answer, quote_argv, split_words, Answer};
        match &self.stage {
            PromptStage::Ask => match parse_answer(line) {
                Some(Answer::Yes) => Some(self.decide(wire_client::VERDICT_APPROVE, Vec::new(), "approved")),
                Some(Answer::No) => Some(self.decide(wire_client::VERDICT_DENY, Vec::new(), "denied")),
                // A signature cannot be edited: yes or no.
                Some(Answer::Edit) | None if !self.info.ssh.is_empty() => {
                    Self::say("please type yes or no (the whole word), then Enter: ");
                    None
                }
                Some(Answer::Edit) => self.ask_for_edit(),
                None => {
                    Self::say("please type yes, no or edit (the whole word), then Enter: ");
                    None
                }
            },
            PromptStage::Edit => match split_words(line) {
                Some(argv) if !argv.is_empty() => {
                    Self::say(&format!(
                        "\x1b[2Kedited command: {}\r\n\x1b[2Krun the edited command? type yes or no, then Enter: ",
                        quote_argv(&argv)
                    ));
                    self.stage = PromptStage::Confirm(argv);
                    None
                }
                _ => {
                    Self::say("unbalanced quotes or empty command; command to run instead: ");
                    None
                }
            },
            PromptStage::Confirm(argv) => match parse_answer(line) {
                Some(Answer::Yes) => Some(self.decide(wire_client::VERDICT_EDIT, argv.clone(), "approved (edited)")),
                Some(Answer::No) => Some(self.decide(wire_client::VERDICT_DENY, Vec::new(), "denied")),
                Some(Answer::Edit) => self.ask_for_edit(),
                None => {
                    Self::say("please type yes or no (the whole word), then Enter: ");
                    None
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt() -> Prompt {
        let info = wire_client::PromptInfo {
            request_id: "r1".into(),
            profile: "default".into(),
            session_id: "0123456789abcdef".into(),
            argv: vec!["touch".into(), "/m".into()],
            cwd: "/w".into(),
            justification: String::new(),
            timeout_s: 300,
            ssh: Vec::new(),
        };
        let mut p = Prompt::new(info);
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        p
    }

    fn verdict(d: Option<ClientMsg>) -> Option<(u8, Vec<String>)> {
        d.map(|d| match d {
            ClientMsg::Decision { verdict, argv, .. } => (verdict, argv),
            m => panic!("{m:?}"),
        })
    }

    #[test]
    fn a_line_begun_before_the_prompt_appeared_is_no_answer() {
        // The sandbox saw "please go ahead, " typed to it and had the
        // prompt appear: the grace swallows the keys that arrive in it,
        // and the "yes" that finishes the line must not approve.
        let mut p = prompt();
        p.ignore_until = Instant::now() + Duration::from_secs(60);
        assert!(p.feed(b"ahead, ").is_none());
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        assert_eq!(verdict(p.feed(b"yes\r")), None);
        // A line typed after the prompt appeared is an answer.
        assert_eq!(verdict(p.feed(b"yes\r")), Some((wire_client::VERDICT_APPROVE, vec![])));
        // A line that ended (Enter) in the grace leaves the next one whole.
        let mut p = prompt();
        p.ignore_until = Instant::now() + Duration::from_secs(60);
        assert!(p.feed(b"ok\r").is_none());
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        assert_eq!(verdict(p.feed(b"y\r")), Some((wire_client::VERDICT_APPROVE, vec![])));
        // Ctrl-C and garbage before the grace ends do nothing.
        let mut p = prompt();
        assert_eq!(verdict(p.feed(b"yess\r")), None);
        assert_eq!(verdict(p.feed(b"\x1b[Myes\r")), None);
        assert_eq!(verdict(p.feed(b"no\r")), Some((wire_client::VERDICT_DENY, vec![])));
    }

    #[test]
    fn a_resize_keeps_an_edited_command_waiting_for_its_own_yes() {
        let mut term = Terminal {
            prompt: Some(prompt()),
            ..Terminal::default()
        };
        let p = term.prompt.as_mut().unwrap();
        assert!(p.feed(b"edit\r").is_none());
        assert!(p.feed(b"ls -l\r").is_none());
        assert!(matches!(p.stage, PromptStage::Confirm(_)));
        // The terminal is resized: the prompt is drawn again, for the
        // same request, still asking about the edited command.
        assert!(term.redraw().is_none() || term.prompt.is_none());
        let p = term.prompt.as_mut().expect("a 24x80 default fits the prompt");
        assert!(matches!(&p.stage, PromptStage::Confirm(a) if a == &["ls", "-l"]));
        p.ignore_until = Instant::now() - Duration::from_secs(1);
        assert_eq!(
            verdict(p.feed(b"yes\r")),
            Some((wire_client::VERDICT_EDIT, vec!["ls".to_string(), "-l".to_string()]))
        );
    }

    /// Issue 51: a signature's prompt takes yes or no; `edit` is no answer.
    #[test]
    fn a_signature_cannot_be_edited_only_approved_or_denied() {
        let mut p = prompt();
        p.info.ssh = vec!["ssh-keygen -Y sign, namespace \"git\", with key SHA256:k".into()];
        assert_eq!(verdict(p.feed(b"edit\r")), None);
        assert!(matches!(p.stage, PromptStage::Ask));
        assert_eq!(verdict(p.feed(b"e\r")), None);
        assert_eq!(verdict(p.feed(b"yes\r")), Some((wire_client::VERDICT_APPROVE, vec![])));
        let mut p = prompt();
        p.info.ssh = vec!["x".into()];
        assert_eq!(verdict(p.feed(b"no\r")), Some((wire_client::VERDICT_DENY, vec![])));
    }
}
