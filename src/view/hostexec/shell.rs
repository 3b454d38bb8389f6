//! A shell command line as the hook analysis reads it: words made of
//! literal text, variable expansions and command substitutions (kept
//! unexpanded, with where each came from), separators, subshell brackets
//! and redirections. An approximation of POSIX `sh` lexing that errs
//! towards seeing more words and more commands; pure (no file access).

/// One piece of a word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Part {
    /// Literal text (quotes removed).
    Lit(String),
    /// An unquoted glob character (`*`, `?`, `[`) or a brace expansion.
    Glob,
    /// `$(…)` or a backquoted command: its text.
    Cmd(String),
    /// `$NAME`, `${NAME}`, `$0`, `$@`…; `default`: the word of
    /// `${NAME:-word}` / `${NAME-word}` / `${NAME:=word}`.
    Var { name: String, default: Option<String> },
    /// An expansion the analysis does not model (`$((…))`, `${x%…}`).
    Unknown,
}

/// A word: its parts, where it starts and ends in the text, and the name
/// when it is an assignment (`NAME=value`: `parts` is the value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Word {
    pub parts: Vec<Part>,
    pub start: usize,
    pub end: usize,
    pub assign: Option<String>,
}

impl Word {
    /// The word's text when it is literal only.
    pub fn lit(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => s.push_str(l),
                _ => return None,
            }
        }
        if self.assign.is_some() {
            return None;
        }
        Some(s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    Word(Word),
    /// The target of a redirection (`> out`, `< in`, a here-document's
    /// delimiter).
    Redirect(Word),
    /// `;`, `&&`, `||`, `|`, `&`, a newline, `{`, `}`.
    Sep,
    /// `(`
    Open,
    /// `)`
    Close,
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}
fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Lexer<'a> {
    c: Vec<(usize, char)>,
    i: usize,
    text: &'a str,
}

impl Lexer<'_> {
    fn peek(&self, k: usize) -> Option<char> {
        self.c.get(self.i + k).map(|x| x.1)
    }
    fn pos(&self) -> usize {
        self.c.get(self.i).map_or(self.text.len(), |x| x.0)
    }
    /// Reads up to the `close` matching an already consumed `open`,
    /// through quotes; returns the text between.
    /// Inside `$(…)`, the `)` of a `case` pattern (`case x in a) …;;
    /// esac`) closes no parenthesis: `case`…`esac` are followed.
    fn balanced(&mut self, open: char, close: char) -> String {
        let start = self.pos();
        let mut depth = 1;
        let mut quote: Option<char> = None;
        // The depth at each open `case`, and the unquoted word being read.
        let mut cases: Vec<i32> = Vec::new();
        let mut word = String::new();
        while let Some(c) = self.peek(0) {
            self.i += 1;
            if quote.is_none() && open == '(' && (is_name(c)) {
                word.push(c);
                continue;
            }
            if open == '(' && !word.is_empty() {
                match word.as_str() {
                    "case" => cases.push(depth),
                    "esac" => {
                        cases.pop();
                    }
                    _ => {}
                }
                word.clear();
            }
            match (quote, c) {
                (Some('\''), '\'') => quote = None,
                (Some('\''), _) => {}
                (_, '\\') => self.i += 1,
                (Some('"'), '"') => quote = None,
                (None, '\'' | '"') => quote = Some(c),
                (None, c) if c == open => depth += 1,
                (None, c) if c == close && cases.last() == Some(&depth) => {}
                (None, c) if c == close => {
                    depth -= 1;
                    if depth == 0 {
                        let end = self.c.get(self.i - 1).map_or(self.text.len(), |x| x.0);
                        return self.text[start..end].to_string();
                    }
                }
                _ => {}
            }
        }
        self.text[start..].to_string()
    }
    /// After a `$`: the expansion.
    fn dollar(&mut self) -> Option<Part> {
        match self.peek(0) {
            Some('(') => {
                self.i += 1;
                if self.peek(0) == Some('(') {
                    self.i += 1;
                    self.balanced('(', ')');
                    if self.peek(0) == Some(')') {
                        self.i += 1;
                    }
                    return Some(Part::Unknown);
                }
                Some(Part::Cmd(self.balanced('(', ')')))
            }
            Some('{') => {
                self.i += 1;
                let inner = self.balanced('{', '}');
                Some(brace_var(&inner))
            }
            Some('\'') => {
                // `$'…'`: ANSI-C quoting, literal without escapes; an
                // escape (`\x2e`, `\056`, `\u…`) is not modelled.
                self.i += 1;
                let mut s = String::new();
                let mut escaped = false;
                while let Some(c) = self.peek(0) {
                    self.i += 1;
                    if c == '\\' {
                        escaped = true;
                        if self.peek(0).is_some() {
                            self.i += 1;
                        }
                    } else if c == '\'' {
                        break;
                    } else {
                        s.push(c);
                    }
                }
                Some(if escaped { Part::Unknown } else { Part::Lit(s) })
            }
            Some('"') => {
                // `$"…"`: bash's translated string, not modelled.
                self.i += 1;
                while let Some(c) = self.peek(0) {
                    self.i += 1;
                    if c == '\\' {
                        self.i += 1;
                    } else if c == '"' {
                        break;
                    }
                }
                Some(Part::Unknown)
            }
            Some(c) if is_name_start(c) => {
                let mut n = String::new();
                while let Some(c) = self.peek(0).filter(|c| is_name(*c)) {
                    n.push(c);
                    self.i += 1;
                }
                Some(Part::Var { name: n, default: None })
            }
            Some(c) if c.is_ascii_digit() || matches!(c, '@' | '*' | '#' | '?' | '$' | '!' | '-') => {
                self.i += 1;
                Some(Part::Var {
                    name: c.to_string(),
                    default: None,
                })
            }
            _ => None,
        }
    }
    fn backquote(&mut self) -> Part {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            self.i += 1;
            match c {
                '\\' => {
                    if let Some(n) = self.peek(0) {
                        self.i += 1;
                        s.push(n);
                    }
                }
                '`' => break,
                c => s.push(c),
            }
        }
        Part::Cmd(s)
    }
}

/// `${…}`'s inside: a plain name, or one with a default; anything else is
/// not modelled.
fn brace_var(inner: &str) -> Part {
    let name_end = inner
        .char_indices()
        .find(|&(i, c)| {
            !(if i == 0 {
                is_name_start(c) || c.is_ascii_digit()
            } else {
                is_name(c)
            })
        })
        .map_or(inner.len(), |(i, _)| i);
    if name_end == 0 {
        return Part::Unknown;
    }
    let (name, rest) = inner.split_at(name_end);
    let default = if rest.is_empty() {
        None
    } else if let Some(d) = rest
        .strip_prefix(":-")
        .or_else(|| rest.strip_prefix(":="))
        .or_else(|| rest.strip_prefix('-'))
        .or_else(|| rest.strip_prefix('='))
    {
        Some(d.to_string())
    } else {
        return Part::Unknown;
    };
    Part::Var {
        name: name.to_string(),
        default,
    }
}

/// Lexes `text` into tokens.
// The word-ending macro resets state also after the last word.
#[allow(unused_assignments)]
pub(super) fn lex(text: &str) -> Vec<Tok> {
    let mut lx = Lexer {
        c: text.char_indices().collect(),
        i: 0,
        text,
    };
    let mut out = Vec::new();
    let mut parts: Vec<Part> = Vec::new();
    let mut lit = String::new();
    let mut has = false;
    let mut start = 0;
    let mut assign: Option<String> = None;
    let mut quoted_seen = false;
    let mut redirect_next = false;
    // The redirection is a here-document (its word a delimiter) or a
    // here-string (its word data): no file.
    let mut heredoc = false;
    let mut dquote = false;
    macro_rules! flush_lit {
        () => {
            if !lit.is_empty() {
                parts.push(Part::Lit(std::mem::take(&mut lit)));
            }
        };
    }
    macro_rules! end_word {
        () => {
            flush_lit!();
            if has {
                let w = Word {
                    parts: std::mem::take(&mut parts),
                    start,
                    end: lx.pos(),
                    assign: assign.take(),
                };
                // `{` and `}` alone are grouping, not words.
                let group = w.assign.is_none() && matches!(w.parts.as_slice(), [Part::Lit(l)] if l == "{" || l == "}");
                if group {
                    out.push(Tok::Sep);
                } else if redirect_next {
                    if !heredoc {
                        out.push(Tok::Redirect(w));
                    }
                    redirect_next = false;
                    heredoc = false;
                } else {
                    out.push(Tok::Word(w));
                }
            }
            has = false;
            quoted_seen = false;
            assign = None;
        };
    }
    while let Some(c) = lx.peek(0) {
        if !has {
            start = lx.pos();
        }
        if dquote {
            lx.i += 1;
            match c {
                '"' => dquote = false,
                '\\' => match lx.peek(0) {
                    Some(n @ ('"' | '\\' | '$' | '`')) => {
                        lx.i += 1;
                        lit.push(n);
                    }
                    Some('\n') => lx.i += 1,
                    _ => lit.push('\\'),
                },
                '$' => match lx.dollar() {
                    Some(p) => {
                        flush_lit!();
                        parts.push(p);
                    }
                    None => lit.push('$'),
                },
                '`' => {
                    flush_lit!();
                    let p = lx.backquote();
                    parts.push(p);
                }
                c => lit.push(c),
            }
            continue;
        }
        match c {
            '#' if !has => {
                while lx.peek(0).is_some_and(|c| c != '\n') {
                    lx.i += 1;
                }
            }
            '\'' => {
                lx.i += 1;
                has = true;
                quoted_seen = true;
                while let Some(c) = lx.peek(0) {
                    lx.i += 1;
                    if c == '\'' {
                        break;
                    }
                    lit.push(c);
                }
            }
            '"' => {
                lx.i += 1;
                has = true;
                quoted_seen = true;
                dquote = true;
            }
            '\\' => {
                lx.i += 1;
                match lx.peek(0) {
                    Some('\n') => lx.i += 1,
                    Some(n) => {
                        lx.i += 1;
                        lit.push(n);
                        has = true;
                        quoted_seen = true;
                    }
                    None => {}
                }
            }
            '$' => {
                lx.i += 1;
                has = true;
                match lx.dollar() {
                    Some(p) => {
                        flush_lit!();
                        parts.push(p);
                    }
                    None => lit.push('$'),
                }
            }
            '`' => {
                lx.i += 1;
                has = true;
                flush_lit!();
                let p = lx.backquote();
                parts.push(p);
            }
            '=' if has && assign.is_none() && !quoted_seen && parts.is_empty() && {
                let mut ch = lit.chars();
                ch.next().is_some_and(is_name_start) && ch.all(is_name)
            } =>
            {
                lx.i += 1;
                assign = Some(std::mem::take(&mut lit));
            }
            '~' if (!has || (assign.is_some() && parts.is_empty() && lit.is_empty()))
                && lx.peek(1).is_some_and(|c| is_name_start(c) || c == '+' || c == '-') =>
            {
                // `~user/…`, `~+`, `~-`: another user's home, `$PWD`,
                // `$OLDPWD`: not modelled.
                lx.i += 2;
                while lx.peek(0).is_some_and(|c| is_name(c) || c == '-' || c == '.') {
                    lx.i += 1;
                }
                has = true;
                flush_lit!();
                parts.push(Part::Unknown);
            }
            '~' if (!has || (assign.is_some() && parts.is_empty() && lit.is_empty()))
                && matches!(lx.peek(1), None | Some('/')) =>
            {
                lx.i += 1;
                has = true;
                parts.push(Part::Var {
                    name: "HOME".into(),
                    default: None,
                });
            }
            '[' if !has
                && (matches!(lx.peek(1), None | Some(' ' | '\t' | '\n'))
                    || (lx.peek(1) == Some('[') && matches!(lx.peek(2), None | Some(' ' | '\t' | '\n')))) =>
            {
                // `[` and `[[`: the test command, not a glob.
                lx.i += 1;
                has = true;
                lit.push('[');
                if lx.peek(0) == Some('[') {
                    lx.i += 1;
                    lit.push('[');
                }
            }
            '*' | '?' | '[' => {
                lx.i += 1;
                has = true;
                flush_lit!();
                parts.push(Part::Glob);
            }
            '{' if has && text[lx.pos()..].contains('}') && {
                // Brace expansion `a{b,c}`: a glob for this purpose.
                let rest = &text[lx.pos()..];
                rest.find('}')
                    .is_some_and(|e| rest[..e].contains(',') && !rest[..e].contains(char::is_whitespace))
            } =>
            {
                lx.i += 1;
                flush_lit!();
                parts.push(Part::Glob);
            }
            // Blanks and newlines only: sh keeps `\r` and other spaces in the word.
            c @ (' ' | '\t' | '\n') => {
                end_word!();
                lx.i += 1;
                if c == '\n' {
                    out.push(Tok::Sep);
                }
            }
            ';' | '&' | '|' => {
                if c == '&' && lx.peek(1) == Some('>') {
                    // `&>file`, `&>>file`
                    end_word!();
                    lx.i += 2;
                    if lx.peek(0) == Some('>') {
                        lx.i += 1;
                    }
                    redirect_next = true;
                    continue;
                }
                end_word!();
                lx.i += 1;
                while lx.peek(0).is_some_and(|n| matches!(n, ';' | '&' | '|')) {
                    lx.i += 1;
                }
                out.push(Tok::Sep);
            }
            '(' | ')' => {
                end_word!();
                // `<(…)`, `>(…)`: a process substitution, read as a
                // subshell, not a file.
                redirect_next = false;
                heredoc = false;
                lx.i += 1;
                out.push(if c == '(' { Tok::Open } else { Tok::Close });
            }
            '<' | '>' => {
                // An fd number before the operator is not a word.
                if parts.is_empty() && !quoted_seen && !lit.is_empty() && lit.chars().all(|d| d.is_ascii_digit()) {
                    lit.clear();
                    has = false;
                }
                end_word!();
                lx.i += 1;
                let mut op = String::from(c);
                while let Some(n) = lx.peek(0).filter(|n| matches!(n, '<' | '>' | '|' | '-')) {
                    op.push(n);
                    lx.i += 1;
                }
                if lx.peek(0) == Some('&') {
                    // `>&2`, `<&-`: a descriptor, not a file.
                    lx.i += 1;
                    while lx.peek(0).is_some_and(|n| n.is_ascii_digit() || n == '-') {
                        lx.i += 1;
                    }
                    continue;
                }
                redirect_next = true;
                heredoc = op.starts_with("<<");
            }
            c => {
                lx.i += 1;
                has = true;
                lit.push(c);
            }
        }
    }
    end_word!();
    out
}
