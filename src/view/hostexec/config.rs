//! Git's config syntax: a file's `key = value` entries, parsed as Git
//! parses them, and which keys name a program host Git runs.

/// One `key = value` of a config file. `section` and `name` are lowercase,
/// `sub` is kept as written; a bare `key` has no value (boolean true).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub section: String,
    pub sub: Option<String>,
    pub name: String,
    pub value: Option<String>,
}

impl Entry {
    /// `section.sub.name` (or `section.name`), as Git spells the key.
    pub fn key(&self) -> String {
        match &self.sub {
            Some(s) => format!("{}.{s}.{}", self.section, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }
}

/// Parses Git's config syntax. Lines Git would reject are skipped (Git
/// then refuses the whole file and runs nothing from it).
pub(super) fn parse_config(text: &[u8]) -> Vec<Entry> {
    let text = String::from_utf8_lossy(text);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut out = Vec::new();
    let (mut section, mut sub) = (String::new(), None::<String>);
    let mut lines = text.split('\n').peekable();
    while let Some(raw) = lines.next() {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut rest = line;
        if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = header_end(r) else { continue };
            let head = &r[..end];
            rest = r[end + 1..].trim_start();
            match head.find(|c: char| c.is_ascii_whitespace()) {
                Some(sp) => {
                    section = head[..sp].to_ascii_lowercase();
                    let s = head[sp..].trim();
                    sub = Some(unquote_sub(s));
                }
                None => match head.split_once('.') {
                    Some((a, b)) => {
                        section = a.to_ascii_lowercase();
                        sub = Some(b.to_ascii_lowercase());
                    }
                    None => {
                        section = head.to_ascii_lowercase();
                        sub = None;
                    }
                },
            }
            if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                continue;
            }
        }
        if section.is_empty() {
            continue;
        }
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        if name_end == 0 {
            continue;
        }
        let name = rest[..name_end].to_ascii_lowercase();
        let after = rest[name_end..].trim_start();
        let value = if let Some(v) = after.strip_prefix('=') {
            let mut buf = v.to_string();
            // Continuation lines: a backslash at the end of the line.
            while ends_with_continuation(&buf) {
                buf.pop();
                if buf.ends_with('\r') {
                    buf.pop();
                }
                match lines.next() {
                    Some(next) => buf.push_str(next),
                    None => break,
                }
            }
            Some(parse_value(&buf))
        } else {
            None
        };
        out.push(Entry {
            section: section.clone(),
            sub: sub.clone(),
            name,
            value,
        });
    }
    out
}

fn header_end(r: &str) -> Option<usize> {
    let mut quoted = false;
    let mut esc = false;
    for (i, c) in r.char_indices() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

fn unquote_sub(s: &str) -> String {
    let s = s.strip_prefix('"').unwrap_or(s);
    let s = s.strip_suffix('"').unwrap_or(s);
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

fn ends_with_continuation(s: &str) -> bool {
    let t = s.trim_end_matches('\r');
    let n = t.bytes().rev().take_while(|&b| b == b'\\').count();
    n % 2 == 1
}

fn parse_value(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut esc = false;
    let mut pending_ws = String::new();
    for c in v.trim_start().chars() {
        if esc {
            esc = false;
            out.push_str(&pending_ws);
            pending_ws.clear();
            out.push(match c {
                'n' => '\n',
                't' => '\t',
                'b' => '\u{8}',
                c => c,
            });
            continue;
        }
        match c {
            '\\' => esc = true,
            '"' => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                quoted = !quoted;
            }
            '#' | ';' if !quoted => break,
            '\r' | '\n' if !quoted => {}
            c if c.is_whitespace() && !quoted => pending_ws.push(c),
            c => {
                out.push_str(&pending_ws);
                pending_ws.clear();
                out.push(c);
            }
        }
    }
    out
}

/// True for a key whose value host Git runs as a program or shell command.
pub(super) fn is_exec_key(e: &Entry) -> bool {
    let n = e.name.as_str();
    match (e.section.as_str(), e.sub.is_some()) {
        ("core", false) => matches!(
            n,
            "fsmonitor" | "sshcommand" | "editor" | "pager" | "askpass" | "gitproxy" | "hookspath"
        ),
        ("filter", true) => matches!(n, "clean" | "smudge" | "process"),
        ("diff", false) => n == "external",
        ("diff", true) => matches!(n, "command" | "textconv"),
        ("merge", true) => n == "driver",
        ("mergetool" | "difftool", true) => matches!(n, "cmd" | "path"),
        ("sequence", false) => n == "editor",
        ("credential", _) => n == "helper",
        ("gpg", _) => n == "program",
        ("alias", _) => e.value.as_deref().is_some_and(|v| v.trim_start().starts_with('!')),
        ("pager", _) | ("interactive", false) => n != "singlekey",
        ("uploadpack", false) => n == "packobjectshook",
        ("remote", true) => matches!(n, "receivepack" | "uploadpack" | "vcs"),
        ("ssh", false) => n == "variant",
        ("web", false) => n == "browser",
        ("browser" | "man", true) => matches!(n, "cmd" | "path"),
        ("sendemail", _) => matches!(n, "sendmailcmd" | "smtpserver" | "tocmd" | "cccmd" | "headercmd"),
        ("core", true) | ("protocol", _) => false,
        _ => false,
    }
}
