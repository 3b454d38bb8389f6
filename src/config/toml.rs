//! Reads TOML 1.0 into a tree that remembers the 1-based line of every key.
//! Supported: comments, bare/quoted/dotted keys, `[table]` and `[[array]]`
//! headers, basic/literal (multi-line) strings, booleans, arrays, inline
//! tables (newlines and a trailing comma are tolerated, as in TOML 1.1).
//! Numbers and date-times are recognised loosely; the schema has no such
//! fields, so they only need to be reported as the wrong type.

/// Maximum nesting of arrays and inline tables.
const MAX_DEPTH: usize = 32;

/// How a table came into being; decides whether it may be extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Root,
    /// `[a.b]`
    Header,
    /// `a` when only `[a.b]` was written.
    Implicit,
    /// `a` in `a.b = 1`.
    Dotted,
    /// `{ ... }`
    Inline,
    /// An element of `[[a]]`.
    ArrayElement,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub origin: Origin,
    /// In file order; keys are unique.
    pub entries: Vec<(String, Item)>,
}

impl Table {
    fn new(origin: Origin) -> Table {
        Table {
            origin,
            entries: Vec::new(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&Item> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, i)| i)
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.entries.iter().position(|(k, _)| k == key)
    }

    /// The entry `key`, first created (at the end, from `line`) as an
    /// empty table of `origin` when there is none: its index.
    fn position_or_new_table(&mut self, key: &str, line: usize, origin: Origin) -> usize {
        self.position(key).unwrap_or_else(|| {
            let item = Item {
                line,
                val: Val::Table(Table::new(origin)),
            };
            self.entries.push((key.to_string(), item));
            self.entries.len() - 1
        })
    }
}

/// `key` as (last segment, parent segments); an empty key is an error
/// naming `what` ("table header", "key").
fn split_key<'k>(key: &'k [String], line: usize, what: &str) -> Result<(&'k String, &'k [String]), SyntaxError> {
    key.split_last().ok_or_else(|| SyntaxError {
        line,
        message: format!("empty {what}"),
    })
}

/// A value and the 1-based line where it (or its key/header) appears.
#[derive(Debug, Clone)]
pub struct Item {
    pub line: usize,
    pub val: Val,
}

#[derive(Debug, Clone)]
pub enum Val {
    Str(String),
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Recognised only to be reported as the wrong type; the text is not kept.
    Datetime,
    Array(Vec<Item>),
    Table(Table),
    /// `[[a]]` elements; each is a `Val::Table`.
    TableArray(Vec<Item>),
}

impl Val {
    /// "a string", "an array", ...
    pub fn kind(&self) -> &'static str {
        match self {
            Val::Str(_) => "a string",
            Val::Bool(_) => "a boolean",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a float",
            Val::Datetime => "a date-time",
            Val::Array(_) => "an array",
            Val::Table(_) => "a table",
            Val::TableArray(_) => "an array of tables",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

/// Appends `seg` to the dotted key `base`, quoting it unless it is a bare key.
pub fn join_key(base: &str, seg: &str) -> String {
    let bare = !seg.is_empty() && seg.chars().all(is_bare);
    let seg = if bare { seg.to_string() } else { format!("{:?}", seg) };
    if base.is_empty() {
        seg
    } else {
        format!("{}.{}", base, seg)
    }
}

fn display_key(segs: &[String]) -> String {
    segs.iter().fold(String::new(), |acc, s| join_key(&acc, s))
}

fn is_bare(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn describe(c: Option<char>) -> String {
    match c {
        None => "end of file".into(),
        Some('\n') | Some('\r') => "end of line".into(),
        Some(c) => format!("{:?}", c),
    }
}

/// Parses a whole document.
pub fn parse(text: &str) -> Result<Table, SyntaxError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        line: 1,
    };
    p.document()
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    line: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<char> {
        self.chars.get(self.pos + n).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn err(&self, message: impl Into<String>) -> SyntaxError {
        SyntaxError {
            line: self.line,
            message: message.into(),
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(' ') | Some('\t')) {
            self.bump();
        }
    }

    fn skip_comment(&mut self) -> Result<(), SyntaxError> {
        if self.peek() == Some('#') {
            while let Some(c) = self.peek() {
                if c == '\n' || (c == '\r' && self.peek_at(1) == Some('\n')) {
                    break;
                }
                if is_control(c) {
                    return Err(self.err("control character in comment"));
                }
                self.bump();
            }
        }
        Ok(())
    }

    /// Consumes a newline (`\n` or `\r\n`) if one is next.
    fn newline(&mut self) -> bool {
        match self.peek() {
            Some('\n') => {
                self.bump();
                true
            }
            Some('\r') if self.peek_at(1) == Some('\n') => {
                self.bump();
                self.bump();
                true
            }
            _ => false,
        }
    }

    /// Whitespace, comments and newlines (inside arrays and inline tables).
    fn skip_blank(&mut self) -> Result<(), SyntaxError> {
        loop {
            self.skip_ws();
            self.skip_comment()?;
            if !self.newline() {
                return Ok(());
            }
        }
    }

    /// Trailing whitespace and comment, then a newline or the end of the file.
    fn end_of_line(&mut self, after: &str) -> Result<(), SyntaxError> {
        self.skip_ws();
        self.skip_comment()?;
        if self.peek().is_none() || self.newline() {
            Ok(())
        } else {
            Err(self.err(format!(
                "expected end of line after {}, found {}",
                after,
                describe(self.peek())
            )))
        }
    }

    fn expect(&mut self, c: char, context: &str) -> Result<(), SyntaxError> {
        if self.peek() == Some(c) {
            self.bump();
            Ok(())
        } else {
            Err(self.err(format!("expected {:?} {}, found {}", c, context, describe(self.peek()))))
        }
    }

    fn document(&mut self) -> Result<Table, SyntaxError> {
        let mut root = Table::new(Origin::Root);
        let mut current: Vec<String> = Vec::new();
        loop {
            self.skip_ws();
            self.skip_comment()?;
            if self.newline() {
                continue;
            }
            match self.peek() {
                None => return Ok(root),
                Some('[') => {
                    let line = self.line;
                    self.bump();
                    let array = self.peek() == Some('[');
                    if array {
                        self.bump();
                    }
                    let key = self.key()?;
                    self.expect(']', "to close the table header")?;
                    if array {
                        self.expect(']', "to close the array-of-tables header")?;
                    }
                    self.end_of_line("the table header")?;
                    define_header(&mut root, &key, array, line)?;
                    current = key;
                }
                Some(_) => {
                    let line = self.line;
                    let key = self.key()?;
                    self.expect('=', "after the key")?;
                    self.skip_ws();
                    let val = self.value(0)?;
                    self.end_of_line("the value")?;
                    let table = navigate(&mut root, &current, line)?;
                    insert(table, &current, &key, Item { line, val })?;
                }
            }
        }
    }

    /// `a.b."c d"` with optional spaces around the dots; leaves trailing spaces consumed.
    fn key(&mut self) -> Result<Vec<String>, SyntaxError> {
        let mut segs = Vec::new();
        loop {
            self.skip_ws();
            segs.push(self.simple_key()?);
            self.skip_ws();
            if self.peek() != Some('.') {
                return Ok(segs);
            }
            self.bump();
        }
    }

    fn simple_key(&mut self) -> Result<String, SyntaxError> {
        match self.peek() {
            Some('"') if self.starts_with("\"\"\"") => Err(self.err("a multi-line string cannot be a key")),
            Some('\'') if self.starts_with("'''") => Err(self.err("a multi-line string cannot be a key")),
            Some('"') => {
                self.bump();
                self.basic_string()
            }
            Some('\'') => {
                self.bump();
                self.literal_string()
            }
            Some(c) if is_bare(c) => {
                let mut s = String::new();
                while let Some(c) = self.peek().filter(|c| is_bare(*c)) {
                    s.push(c);
                    self.bump();
                }
                Ok(s)
            }
            other => Err(self.err(format!("expected a key, found {}", describe(other)))),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Val, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(self.err("arrays or inline tables nested too deeply"));
        }
        match self.peek() {
            Some('"') if self.starts_with("\"\"\"") => {
                self.pos += 3;
                self.multiline_string(true).map(Val::Str)
            }
            Some('\'') if self.starts_with("'''") => {
                self.pos += 3;
                self.multiline_string(false).map(Val::Str)
            }
            Some('"') => {
                self.bump();
                self.basic_string().map(Val::Str)
            }
            Some('\'') => {
                self.bump();
                self.literal_string().map(Val::Str)
            }
            Some('[') => self.array(depth),
            Some('{') => self.inline_table(depth),
            Some(c) if c.is_ascii_alphanumeric() || "+-_.:".contains(c) => self.scalar(),
            other => Err(self.err(format!("expected a value, found {}", describe(other)))),
        }
    }

    /// Booleans, numbers and date-times.
    fn scalar(&mut self) -> Result<Val, SyntaxError> {
        let word = |p: &mut Parser| {
            let mut s = String::new();
            while let Some(c) = p.peek().filter(|c| c.is_ascii_alphanumeric() || "+-_.:".contains(*c)) {
                s.push(c);
                p.bump();
            }
            s
        };
        let mut tok = word(self);
        let is_date = |t: &str| {
            let b = t.as_bytes();
            b.len() >= 10 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-'
        };
        // "1979-05-27 07:32:00": a date, a space, a time.
        if is_date(&tok)
            && tok.len() == 10
            && self.peek() == Some(' ')
            && self.peek_at(1).is_some_and(|c| c.is_ascii_digit())
        {
            self.bump();
            tok.push(' ');
            tok.push_str(&word(self));
        }
        match tok.as_str() {
            "true" => return Ok(Val::Bool(true)),
            "false" => return Ok(Val::Bool(false)),
            "inf" | "+inf" => return Ok(Val::Float(f64::INFINITY)),
            "-inf" => return Ok(Val::Float(f64::NEG_INFINITY)),
            "nan" | "+nan" | "-nan" => return Ok(Val::Float(f64::NAN)),
            _ => {}
        }
        if is_date(&tok) || tok.contains(':') {
            return Ok(Val::Datetime);
        }
        let digits = tok.strip_prefix(['+', '-']).unwrap_or(&tok);
        if !digits.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.err(format!("invalid value {:?}; strings must be quoted", tok)));
        }
        let clean: String = tok.chars().filter(|c| *c != '_').collect();
        let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
            .into_iter()
            .find(|(p, _)| clean.starts_with(p));
        let parsed = match radix {
            Some((p, r)) => i64::from_str_radix(&clean[p.len()..], r).ok().map(Val::Int),
            None if clean.contains(['.', 'e', 'E']) => clean.parse::<f64>().ok().map(Val::Float),
            None => clean.parse::<i64>().ok().map(Val::Int),
        };
        parsed.ok_or_else(|| self.err(format!("invalid number {:?}", tok)))
    }

    fn array(&mut self, depth: usize) -> Result<Val, SyntaxError> {
        self.bump(); // '['
        let mut items = Vec::new();
        loop {
            self.skip_blank()?;
            if self.peek() == Some(']') {
                self.bump();
                return Ok(Val::Array(items));
            }
            let line = self.line;
            let val = self.value(depth + 1)?;
            items.push(Item { line, val });
            self.skip_blank()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some(']') => {}
                other => return Err(self.err(format!("expected ',' or ']' in array, found {}", describe(other)))),
            }
        }
    }

    fn inline_table(&mut self, depth: usize) -> Result<Val, SyntaxError> {
        self.bump(); // '{'
        let mut table = Table::new(Origin::Inline);
        loop {
            self.skip_blank()?;
            if self.peek() == Some('}') {
                self.bump();
                return Ok(Val::Table(table));
            }
            let line = self.line;
            let key = self.key()?;
            self.expect('=', "after the key")?;
            self.skip_ws();
            let val = self.value(depth + 1)?;
            insert(&mut table, &[], &key, Item { line, val })?;
            self.skip_blank()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some('}') => {}
                other => {
                    return Err(self.err(format!(
                        "expected ',' or '}}' in inline table, found {}",
                        describe(other)
                    )))
                }
            }
        }
    }

    /// After the opening `"`.
    fn basic_string(&mut self) -> Result<String, SyntaxError> {
        self.one_line_string(true)
    }

    /// After the opening `'`.
    fn literal_string(&mut self) -> Result<String, SyntaxError> {
        self.one_line_string(false)
    }

    /// After the opening `"` (`basic`: with escapes) or `'`.
    fn one_line_string(&mut self, basic: bool) -> Result<String, SyntaxError> {
        let quote = if basic { '"' } else { '\'' };
        let mut s = String::new();
        loop {
            match self.peek() {
                None | Some('\n') => return Err(self.err("unterminated string")),
                Some(c) if c == quote => {
                    self.bump();
                    return Ok(s);
                }
                Some('\\') if basic => {
                    self.bump();
                    s.push(self.escape()?);
                }
                Some(c) if is_control(c) && basic => return Err(self.err("control character in string; use an escape")),
                Some(c) if is_control(c) => return Err(self.err("control character in string")),
                Some(c) => {
                    s.push(c);
                    self.bump();
                }
            }
        }
    }

    /// After the opening `"""` (`basic`) or `'''`.
    fn multiline_string(&mut self, basic: bool) -> Result<String, SyntaxError> {
        let quote = if basic { '"' } else { '\'' };
        let start = self.line;
        self.newline(); // a newline right after the delimiter is trimmed
        let mut s = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(SyntaxError {
                        line: start,
                        message: "unterminated multi-line string".into(),
                    })
                }
                Some(c) if c == quote && self.peek_at(1) == Some(quote) && self.peek_at(2) == Some(quote) => {
                    let mut n = 0;
                    while self.peek() == Some(quote) {
                        n += 1;
                        self.bump();
                    }
                    if n > 5 {
                        return Err(self.err("too many quotes closing a multi-line string"));
                    }
                    s.extend(std::iter::repeat_n(quote, n - 3));
                    return Ok(s);
                }
                Some('\\') if basic => {
                    self.bump();
                    // A backslash ending a line trims the newline and leading whitespace.
                    let mut k = 0;
                    while matches!(self.peek_at(k), Some(' ') | Some('\t')) {
                        k += 1;
                    }
                    if matches!(self.peek_at(k), Some('\n') | Some('\r')) {
                        while matches!(self.peek(), Some(' ') | Some('\t')) {
                            self.bump();
                        }
                        loop {
                            if self.newline() {
                                continue;
                            }
                            if !matches!(self.peek(), Some(' ') | Some('\t')) {
                                break;
                            }
                            self.bump();
                        }
                    } else {
                        s.push(self.escape()?);
                    }
                }
                Some(_) if self.newline() => s.push('\n'),
                Some(c) if is_control(c) => return Err(self.err("control character in string")),
                Some(c) => {
                    s.push(c);
                    self.bump();
                }
            }
        }
    }

    /// After a backslash in a basic string.
    fn escape(&mut self) -> Result<char, SyntaxError> {
        let c = self.peek();
        let simple = match c {
            Some('b') => Some('\u{8}'),
            Some('t') => Some('\t'),
            Some('n') => Some('\n'),
            Some('f') => Some('\u{c}'),
            Some('r') => Some('\r'),
            Some('e') => Some('\u{1b}'),
            Some('"') => Some('"'),
            Some('\\') => Some('\\'),
            _ => None,
        };
        if let Some(ch) = simple {
            self.bump();
            return Ok(ch);
        }
        let digits = match c {
            Some('u') => 4,
            Some('U') => 8,
            _ => return Err(self.err(format!("invalid escape \\{}", c.map(String::from).unwrap_or_default()))),
        };
        self.bump();
        let mut code = 0u32;
        for _ in 0..digits {
            match self.peek().and_then(|h| h.to_digit(16)) {
                Some(d) => {
                    code = code * 16 + d;
                    self.bump();
                }
                None => return Err(self.err(format!("expected {} hex digits in a unicode escape", digits))),
            }
        }
        char::from_u32(code).ok_or_else(|| self.err(format!("invalid unicode escape U+{:X}", code)))
    }
}

/// Control characters TOML does not allow raw in strings and comments.
/// The table a header or a dotted key walks into: a table, or the last
/// element of an array of tables; `None` for any other value.
fn table_of(val: &mut Val) -> Option<&mut Table> {
    match val {
        Val::Table(sub) => Some(sub),
        Val::TableArray(elems) => match elems.last_mut() {
            Some(Item {
                val: Val::Table(sub), ..
            }) => Some(sub),
            _ => None,
        },
        _ => None,
    }
}

fn is_control(c: char) -> bool {
    (c < ' ' && c != '\t') || c == '\u{7f}'
}

/// Defines `[key]` or `[[key]]` (header on `line`).
fn define_header(root: &mut Table, key: &[String], array: bool, line: usize) -> Result<(), SyntaxError> {
    let header = if array {
        format!("[[{}]]", display_key(key))
    } else {
        format!("[{}]", display_key(key))
    };
    let (last, parents) = split_key(key, line, "table header")?;
    let mut t = root;
    for (n, seg) in parents.iter().enumerate() {
        let idx = t.position_or_new_table(seg, line, Origin::Implicit);
        let item = &mut t.entries[idx].1;
        let extensible = match &item.val {
            Val::Table(sub) => sub.origin != Origin::Inline,
            Val::TableArray(_) => true,
            _ => false,
        };
        if !extensible {
            return Err(SyntaxError {
                line,
                message: format!(
                    "cannot define {}: {} is already defined as {} on line {}",
                    header,
                    display_key(&key[..=n]),
                    item.val.kind(),
                    item.line
                ),
            });
        }
        t = match table_of(&mut item.val) {
            Some(sub) => sub,
            None => {
                return Err(SyntaxError {
                    line,
                    message: format!("cannot define {}", header),
                })
            }
        };
    }
    let new_table = |origin| Item {
        line,
        val: Val::Table(Table::new(origin)),
    };
    match t.position(last) {
        None => {
            let item = if array {
                Item {
                    line,
                    val: Val::TableArray(vec![new_table(Origin::ArrayElement)]),
                }
            } else {
                new_table(Origin::Header)
            };
            t.entries.push((last.clone(), item));
            Ok(())
        }
        Some(idx) => {
            let item = &mut t.entries[idx].1;
            match (&mut item.val, array) {
                (Val::Table(sub), false) if sub.origin == Origin::Implicit => {
                    sub.origin = Origin::Header;
                    item.line = line;
                    Ok(())
                }
                (Val::TableArray(elems), true) => {
                    elems.push(new_table(Origin::ArrayElement));
                    Ok(())
                }
                (other, _) => Err(SyntaxError {
                    line,
                    message: format!(
                        "cannot define {}: {} is already defined as {} on line {}",
                        header,
                        display_key(key),
                        other.kind(),
                        item.line
                    ),
                }),
            }
        }
    }
}

/// The table the current header names (last element for arrays of tables).
fn navigate<'t>(root: &'t mut Table, path: &[String], line: usize) -> Result<&'t mut Table, SyntaxError> {
    let mut t = root;
    for seg in path {
        let idx = t.position(seg).ok_or_else(|| SyntaxError {
            line,
            message: "internal: lost table".into(),
        })?;
        t = match table_of(&mut t.entries[idx].1.val) {
            Some(sub) => sub,
            None => {
                return Err(SyntaxError {
                    line,
                    message: "internal: lost table".into(),
                })
            }
        };
    }
    Ok(t)
}

/// Inserts `key = item` (key possibly dotted) into `table`, whose own key is `prefix`.
fn insert(table: &mut Table, prefix: &[String], key: &[String], item: Item) -> Result<(), SyntaxError> {
    let line = item.line;
    let full = || display_key(&[prefix, key].concat());
    let (last, parents) = split_key(key, line, "key")?;
    let mut t = table;
    for (n, seg) in parents.iter().enumerate() {
        let idx = t.position_or_new_table(seg, line, Origin::Dotted);
        let sub = &mut t.entries[idx].1;
        if !matches!(&sub.val, Val::Table(st) if st.origin == Origin::Dotted) {
            return Err(SyntaxError {
                line,
                message: format!(
                    "cannot set {}: {} is already defined as {} on line {}",
                    full(),
                    display_key(&[prefix, &key[..=n]].concat()),
                    sub.val.kind(),
                    sub.line
                ),
            });
        }
        t = match &mut sub.val {
            Val::Table(st) => st,
            _ => {
                return Err(SyntaxError {
                    line,
                    message: format!("cannot set {}", full()),
                })
            }
        };
    }
    if let Some(idx) = t.position(last) {
        return Err(SyntaxError {
            line,
            message: format!("duplicate key {} (first set on line {})", full(), t.entries[idx].1.line),
        });
    }
    t.entries.push((last.clone(), item));
    Ok(())
}
