//! Unit tests of the syscall layer, and the check that `unsafe` and `libc` stay inside `sys/`.
use super::*;

#[test]
fn start_time_skips_comm_with_spaces_and_parens() {
    let stat = "123 (a b) c) S 1 123 123 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
    assert_eq!(parse_start_time(stat), Some(98765));
}

#[test]
fn own_start_time_is_readable_and_stable() {
    let a = proc_start_time(getpid()).unwrap();
    assert!(same_process(getpid(), a));
    assert!(!same_process(getpid(), a + 1));
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("lazaret-sys-{name}-{}", getpid()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn write_durable_replaces_whole_and_leaves_no_temp() {
    let d = scratch("durable");
    let (p, tmp) = (d.join("f"), d.join(".f.tmp"));
    write_durable(&p, &tmp, b"one", 0o600).unwrap();
    write_durable(&p, &tmp, b"two", 0o600).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    assert!(!tmp.exists());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    // A symlink planted at the temp name is replaced, never written through.
    std::os::unix::fs::symlink(d.join("victim"), &tmp).unwrap();
    write_durable(&p, &tmp, b"three", 0o600).unwrap();
    assert!(!d.join("victim").exists());
    assert_eq!(std::fs::read(&p).unwrap(), b"three");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn write_replace_replaces_whole_and_leaves_no_temp() {
    let d = scratch("replace");
    let (p, tmp) = (d.join("f"), d.join(".f.tmp"));
    write_replace(&p, &tmp, b"one", 0o600).unwrap();
    write_replace(&p, &tmp, b"two", 0o640).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"two");
    assert!(!tmp.exists());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
    // A symlink planted at the temp name is replaced, never written through.
    std::os::unix::fs::symlink(d.join("victim"), &tmp).unwrap();
    write_replace(&p, &tmp, b"three", 0o600).unwrap();
    assert!(!d.join("victim").exists());
    assert_eq!(std::fs::read(&p).unwrap(), b"three");
    // A temp name that cannot be written (a directory there) fails and
    // leaves the old file whole.
    let _ = std::fs::remove_file(&tmp);
    std::fs::create_dir(&tmp).unwrap();
    assert!(write_replace(&p, &tmp, b"four", 0o600).is_err());
    assert_eq!(std::fs::read(&p).unwrap(), b"three");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn wait_deadline_reaps_or_kills() {
    let mut quick = std::process::Command::new("true").spawn().unwrap();
    assert!(wait_deadline(&mut quick, Duration::from_secs(30)).unwrap().success());
    let mut slow = std::process::Command::new("sleep").arg("60").spawn().unwrap();
    assert!(wait_deadline(&mut slow, Duration::from_millis(50)).is_none());
    // Killed and reaped: nothing left to wait for.
    assert!(slow.try_wait().unwrap().is_some());
}

#[test]
fn poll_set_reports_tokens_not_indexes() {
    let (r1, w1) = pipe().unwrap();
    let (r2, _w2) = pipe().unwrap();
    write_all(&w1, b"x").unwrap();
    let mut set = PollSet::new();
    set.read(&r2, 'b');
    set.read(&r1, 'a');
    assert_eq!(set.wait(Some(Duration::from_secs(5))).unwrap(), 1);
    let ready: Vec<char> = set.ready().map(|(t, _)| t).collect();
    assert_eq!(ready, ['a']);
    assert!(set.is_readable('a') && !set.is_readable('b'));
    assert!(wait_readable(&r1, Duration::from_millis(1)).unwrap());
    assert!(!wait_readable(&r2, Duration::from_millis(1)).unwrap());
}

use std::time::Duration;

// ---- the repository rule: no `unsafe` / `libc::` outside src/sys/ ---------

/// Files outside `src/sys/` allowed to use `unsafe` or `libc::`, each with
/// its reason. Keep it short.
const ALLOWED: &[(&str, &str)] = &[
    // A separate binary (its own crate root); it shares OpenSSL's RNG hook
    // through FFI callbacks (`unsafe extern "C" fn`) that have no safe form,
    // and its C entry point (`no_main`) sets SIGPIPE's disposition itself.
    (
        "bin/lazaret-escalate.rs",
        "OpenSSL RAND_METHOD callbacks are FFI; the C entry point ignores SIGPIPE",
    ),
];

/// `src` with comments, string literals and char literals blanked out, so
/// that words inside them do not count.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(b' ');
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) && !ident_before(b, i) {
            // Raw string r"…" / r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && b[j + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.extend_from_slice(b"\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.extend_from_slice(b"\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&b'\\') {
                b.get(i + 3..)
                    .and_then(|r| r.iter().position(|&x| x == b'\''))
                    .map(|p| i + 3 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.extend_from_slice(b"' '");
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The uses of `unsafe` (as a word) and `libc::` in `src`, by line.
fn forbidden_uses(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let b = line.as_bytes();
        let word = |w: &str| {
            line.match_indices(w).any(|(i, _)| {
                let after = b.get(i + w.len()).copied().unwrap_or(b' ');
                !(ident_before(b, i) || after.is_ascii_alphanumeric() || after == b'_')
            })
        };
        if word("unsafe") || line.match_indices("libc::").any(|(i, _)| !ident_before(b, i)) {
            found.push((n + 1, line.trim().to_string()));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_scanner_sees_code_not_comments_or_strings() {
    let src = "// unsafe libc::x\nlet s = \"unsafe { libc::y }\";\nlet r = r#\"libc::z\"#;\n\
               /* unsafe /* nested */ libc::w */\nfn is_unsafe(c: char) -> bool { c == '\"' }\n\
               let a: &'static str = \"\"; x.unsafe_thing();\n";
    assert_eq!(forbidden_uses(src), vec![]);
    let bad = "fn f() {\n    let n = unsafe { g() };\n}\nconst X: i32 = libc::SIGKILL;\nlet y = '\\'';unsafe{}\n";
    let lines: Vec<usize> = forbidden_uses(bad).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, [2, 4, 5]);
}

/// The crate root and every Rust file under its `src/` and `bin/`.
fn product_sources() -> (&'static Path, Vec<std::path::PathBuf>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("bin"), &mut files);
    assert!(
        files.len() > 10,
        "the source tree was not found under {}",
        root.display()
    );
    (root, files)
}

/// Every `unsafe` and `libc::` of the product lives under `src/sys/`.
#[test]
fn no_unsafe_or_libc_outside_sys() {
    let (root, files) = product_sources();
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if rel.starts_with("src/sys/") || ALLOWED.iter().any(|(a, _)| *a == rel) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in forbidden_uses(&text) {
            bad.push(format!("{rel}:{n}: {line}"));
        }
    }
    assert!(
        bad.is_empty(),
        "`unsafe` / `libc::` outside src/sys/ (add a safe wrapper there):\n{}",
        bad.join("\n")
    );
}

// ---- the repository rule: no `Result<_, String>` outside tests -------------

/// Places allowed a `String` error, each with its reason: the text is data
/// from another process, not an error of ours. Keep it short.
const STRING_ERRORS_ALLOWED: &[(&str, &str, &str)] = &[(
    "src/storage/statefs.rs",
    "pub removed:",
    "the state helper's errno text per trash tree, as its wire message carries it",
)];

/// Byte ranges of `code` (from [`code_only`]) that are test items: each
/// `#[cfg(test)]` item, through its `;` or its closing brace.
fn test_items(code: &str) -> Vec<std::ops::Range<usize>> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for (at, tag) in code.match_indices("#[cfg(test)]") {
        let mut i = at + tag.len();
        while i < b.len() && b[i] != b';' && b[i] != b'{' {
            i += 1;
        }
        if b.get(i) == Some(&b'{') {
            let mut depth = 0;
            while i < b.len() {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        out.push(at..i + 1);
    }
    out
}

/// Whether the generic arguments starting at `code[from..]` (just after
/// `Result<`) end with `String` as the error type.
fn error_is_string(code: &str, from: usize) -> bool {
    let b = code.as_bytes();
    let (mut depth, mut last) = (1, from);
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'<' | b'(' | b'[' => depth += 1,
            // `->` inside a bound is not a closing bracket.
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' | b')' | b']' => {
                depth -= 1;
                if depth == 0 {
                    let e = code[last..i].trim();
                    return last != from && matches!(e, "String" | "std::string::String");
                }
            }
            b',' if depth == 1 => last = i + 1,
            b';' | b'{' | b'}' => return false,
            _ => {}
        }
        i += 1;
    }
    false
}

/// The lines of non-test code in `src` with a `Result<…, String>` (or a
/// `type Err = String`), by line.
fn string_errors(src: &str) -> Vec<(usize, String)> {
    let code = code_only(src);
    let skip = test_items(&code);
    let b = code.as_bytes();
    let mut found: Vec<usize> = Vec::new();
    for (at, w) in code.match_indices("Result<") {
        if !ident_before(b, at) && !skip.iter().any(|r| r.contains(&at)) && error_is_string(&code, at + w.len()) {
            found.push(at);
        }
    }
    for (at, w) in code.match_indices("type Err") {
        let rest = code[at + w.len()..].trim_start();
        if !skip.iter().any(|r| r.contains(&at))
            && rest.strip_prefix('=').is_some_and(|r| {
                r.trim_start().starts_with("String") && r.trim_start()[6..].trim_start().starts_with(';')
            })
        {
            found.push(at);
        }
    }
    let lines: Vec<&str> = code.lines().collect();
    let mut out: Vec<(usize, String)> = found
        .into_iter()
        .map(|at| {
            let n = code[..at].matches('\n').count();
            (n + 1, lines.get(n).map_or("", |l| l.trim()).to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn the_string_error_scanner_sees_signatures_not_tests_or_text() {
    let src = "fn a() -> Result<(), String> {}\n\
               fn b() -> io::Result<String> {}\n\
               fn c() -> Result<Vec<(String, String)>, String> {}\n\
               fn d() -> Result<String, Error> {}\n\
               // fn e() -> Result<(), String>\n\
               let s = \"Result<(), String>\";\n\
               fn f() -> Result<(), (Option<String>, String)> {}\n\
               impl FromStr for X {\n    type Err = String;\n}\n\
               fn g(h: impl Fn() -> u8) -> Result<u8, std::string::String> {}\n\
               #[cfg(test)]\nmod tests {\n    fn t() -> Result<(), String> { Ok(()) }\n}\n\
               fn i() -> MyResult<(), String> {}\n";
    let lines: Vec<usize> = string_errors(src).into_iter().map(|(n, _)| n).collect();
    assert_eq!(lines, [1, 3, 9, 11]);
}

/// Process roles and their modules return typed errors (an enum per
/// layer), not sentences: no `Result<…, String>` in src/ or bin/ outside
/// tests.
#[test]
fn no_string_errors_outside_tests() {
    let (root, files) = product_sources();
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        if f.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for (n, line) in string_errors(&text) {
            if STRING_ERRORS_ALLOWED
                .iter()
                .any(|(a, l, _)| *a == rel && line.contains(l))
            {
                continue;
            }
            bad.push(format!("{rel}:{n}: {line}"));
        }
    }
    assert!(
        bad.is_empty(),
        "`Result<_, String>` outside tests (give the layer an error enum with a variant per step):\n{}",
        bad.join("\n")
    );
}

#[test]
fn remove_tree_opens_closed_dirs_and_never_follows_links() {
    use std::os::unix::fs::PermissionsExt;
    let d = scratch("rmtree");
    let outside = d.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("keep"), "k").unwrap();
    let t = d.join("t");
    std::fs::create_dir_all(t.join("a/b")).unwrap();
    std::fs::write(t.join("a/b/f"), "x").unwrap();
    std::os::unix::fs::symlink(&outside, t.join("a/link")).unwrap();
    std::fs::write(t.join("ro"), "").unwrap();
    for (p, m) in [(t.join("a/b"), 0o000), (t.join("a"), 0o500), (t.clone(), 0o000)] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    remove_tree_nofollow(&d, std::ffi::OsStr::new("t")).unwrap();
    assert!(!t.exists());
    assert!(outside.join("keep").exists(), "a symlink was followed");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn lock_and_write_probes_see_other_open_files_only() {
    use std::os::fd::AsRawFd;
    let d = scratch("probes");
    let p = d.join("f");
    std::fs::write(&p, "x").unwrap();
    let probe = std::fs::File::open(&p).unwrap();
    assert!(!locked_elsewhere(&probe));
    assert!(!open_for_write_elsewhere(&probe), "nobody writes it");
    // Another open file holds an OFD lock: seen.
    let holder = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    // SAFETY: zeroed flock is valid; fcntl with a pointer to it.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_RDLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = 128;
    fl.l_len = 1;
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fcntl(holder.as_raw_fd(), libc::F_OFD_SETLK, &fl) }, 0);
    assert!(locked_elsewhere(&probe), "a lock on one byte is seen");
    assert!(open_for_write_elsewhere(&probe), "open for writing elsewhere");
    drop(holder);
    assert!(!locked_elsewhere(&probe));
    assert!(!open_for_write_elsewhere(&probe));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ofd_range_locks_exclude_other_open_files_and_appends_land_at_the_end() {
    let d = scratch("ofdlocks");
    let p = d.join("f");
    std::fs::write(&p, "0123").unwrap();
    let rw = || std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let (a, b) = (rw(), rw());
    assert!(ofd_lock(&a, RangeLock::Write, 0, 0).unwrap(), "free");
    assert!(
        !ofd_lock(&b, RangeLock::Read, 1 << 30, 1).unwrap(),
        "a's whole-file lock conflicts"
    );
    assert!(range_locked_elsewhere(&b, 0, 1));
    assert!(!range_locked_elsewhere(&a, 0, 1), "not a conflict with itself");
    // Downgraded to a read lock of one range: others may read-lock it, not
    // write-lock it, and anything else is free again.
    assert!(ofd_lock(&a, RangeLock::Read, 10, 2).unwrap());
    assert!(ofd_lock(&a, RangeLock::Unlock, 0, 10).unwrap());
    assert!(ofd_lock(&a, RangeLock::Unlock, 12, 0).unwrap());
    assert!(ofd_lock(&b, RangeLock::Read, 10, 2).unwrap());
    assert!(ofd_lock(&b, RangeLock::Unlock, 10, 2).unwrap());
    assert!(!ofd_lock(&b, RangeLock::Write, 11, 1).unwrap());
    assert!(ofd_lock(&b, RangeLock::Write, 12, 0).unwrap());
    assert!(ofd_lock(&b, RangeLock::Unlock, 0, 0).unwrap());
    drop(a);
    assert!(ofd_lock(&b, RangeLock::Write, 0, 0).unwrap(), "closing drops the lock");
    // An append through an fd without O_APPEND lands at the current end.
    let mut other = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    std::io::Write::write_all(&mut other, b"host").unwrap();
    write_at_end(&b, b"+guest").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "0123host+guest");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_write_to_a_closed_pipe_fails_with_epipe_instead_of_ending_the_process() {
    // SIGPIPE's disposition is the whole process's: the body runs in a
    // child of this test binary, so no other test's writes share it.
    const CHILD: &str = "LAZARET_SIGPIPE_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        use std::io::Write;
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        let mut w = std::fs::File::from(std::os::fd::OwnedFd::from(w));
        // SIGPIPE at its default, as every command that only prints has
        // it: this process dies here if the signal gets through.
        default_signal(SIGPIPE);
        let got = without_sigpipe(|| w.write_all(b"rules"));
        let again = without_sigpipe(|| w.write_all(b"more"));
        assert_eq!(got.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
        assert_eq!(again.unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
        println!("survived");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sys::tests::a_write_to_a_closed_pipe_fails_with_epipe_instead_of_ending_the_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("survived"),
        "{:?}: {text}",
        out.status
    );
}
