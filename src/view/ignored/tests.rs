//! The ignore rules, the sticky set and the Git index reader, on texts
//! and temporary directories.

use std::os::unix::ffi::OsStrExt;

use super::gitindex::blob_id;
use super::*;

fn rules() -> IgnoreRules {
    IgnoreRules::from_texts(
        Path::new("/w"),
        &[
            ("", "node_modules/\n.env\ntarget\n*.log\n!keep.log\n/build/\n"),
            ("pkg", "dist/\n!.env\n"),
        ],
        ".venv/\n",
    )
}

#[test]
fn matches_gitignore_semantics() {
    let r = rules();
    assert!(r.is_ignored(Path::new(".env"), false));
    assert!(r.is_ignored(Path::new("node_modules"), true));
    assert!(!r.is_ignored(Path::new("node_modules"), false), "dir-only pattern");
    assert!(r.is_ignored(Path::new("node_modules/x.js"), false));
    assert!(r.is_ignored(Path::new("a/b/node_modules/x/y.js"), false));
    assert!(r.is_ignored(Path::new("target/debug/x"), false));
    assert!(r.is_ignored(Path::new("a.log"), false));
    assert!(!r.is_ignored(Path::new("keep.log"), false));
    assert!(r.is_ignored(Path::new("build/x"), false));
    assert!(!r.is_ignored(Path::new("src/build/x"), false), "anchored");
    assert!(r.is_ignored(Path::new("pkg/dist/a"), false));
    assert!(!r.is_ignored(Path::new("pkg/.env"), false), "deeper .gitignore wins");
    assert!(r.is_ignored(Path::new(".venv/bin/python"), false), "info/exclude");
    assert!(!r.is_ignored(Path::new("src/main.rs"), false));
    assert!(!r.is_ignored(Path::new(".git/x.log"), false));
}

/// Inside an `AncestorMemo` scope every answer is the one given
/// outside it, whatever order paths come in (siblings, a parent's
/// verdict reused, another rules set at the same parent path).
#[test]
fn ancestor_memo_changes_no_answer() {
    let r = rules();
    let other = IgnoreRules::from_texts(Path::new("/ws"), &[("", "src/\n")], "");
    let paths = [
        "node_modules/x.js",
        "node_modules/y.js",
        "src/main.rs",
        "src/build",
        "src/build/x",
        "src/lib.rs",
        "build/x",
        "build/y",
        "a/b/node_modules/x/y.js",
        "a/b/node_modules/x/z.js",
        "big/e000001",
        "big/e000002",
        "pkg/.env",
        "pkg/dist",
        ".git/x.log",
        "a.log",
    ];
    let plain: Vec<_> = paths
        .iter()
        .map(|p| {
            let p = Path::new(p);
            (
                r.is_ignored_either(p),
                r.is_ignored(p, false),
                other.is_ignored(p, true),
            )
        })
        .collect();
    let _memo = AncestorMemo::enter();
    for _ in 0..2 {
        for (p, want) in paths.iter().zip(&plain) {
            let p = Path::new(p);
            let got = (
                r.is_ignored_either(p),
                r.is_ignored(p, false),
                other.is_ignored(p, true),
            );
            assert_eq!(&got, want, "{p:?}");
        }
    }
}

/// The one-walk forms answer exactly what the per-type calls do: the
/// shortcut by first component never misses a host-tool path.
#[test]
fn either_type_and_host_tool_shortcut_agree_with_the_plain_walk() {
    let tools = std::sync::Arc::new(crate::view::hosttool::Matcher::new(
        &[PathBuf::from("tools/hook.sh")],
        &[PathBuf::from(".claude/other")],
    ));
    let r = rules().with_host_tool(tools.clone());
    let paths = [
        "",
        ".env",
        "node_modules",
        "node_modules/x.js",
        "a/b/node_modules/x/y.js",
        "target",
        "a.log",
        "keep.log",
        "build",
        "build/x",
        "src/build",
        "pkg/dist",
        "pkg/.env",
        ".venv",
        "src/main.rs",
        ".git/x.log",
        ".vscode",
        ".vscode/tasks.json",
        ".vscodex",
        ".claude",
        ".claude/settings.json",
        ".claude/settings.json/x",
        ".claude/other",
        "sub/.envrc",
        "sub/.cargo",
        "sub/.cargo/config.toml",
        "tools",
        "tools/hook.sh",
        "tools/hook.shx",
        "big/e000001",
    ];
    for p in paths {
        let p = Path::new(p);
        assert_eq!(
            r.is_ignored_either(p),
            r.is_ignored(p, false) || r.is_ignored(p, true),
            "{p:?}"
        );
        let covered = tools.covers(p);
        if covered {
            assert!(
                r.is_ignored(p, false) && r.is_ignored(p, true),
                "{p:?} is a host-tool path"
            );
        }
    }
    assert!(r.is_ignored(Path::new(".vscode/tasks.json"), false));
    assert!(r.is_ignored(Path::new(".claude/settings.json"), false));
    assert!(!r.is_ignored(Path::new(".claude/other"), false), "writable");
    assert!(!r.is_ignored(Path::new(".vscodex"), false));
    assert!(!r.is_ignored(Path::new("tools/hook.shx"), false));
    assert!(r.is_ignored(Path::new("sub/.envrc"), false));
    assert!(r.is_ignored(Path::new("sub/.cargo/config.toml"), false));
    // A leading name of a multi-component pattern: Domain-side as a
    // symlink or file, host-side as a directory.
    assert!(r.is_ignored(Path::new("sub/.cargo"), false));
    assert!(!r.is_ignored(Path::new("sub/.cargo"), true));
    // A host-tool path naming the workspace itself covers everything.
    let all = rules().with_host_tool(std::sync::Arc::new(crate::view::hosttool::Matcher::new(
        &[PathBuf::new()],
        &[],
    )));
    assert!(all.is_ignored(Path::new("src/main.rs"), false));
}

#[test]
fn parent_exclusion_cannot_be_undone() {
    let r = IgnoreRules::from_texts(Path::new("/w"), &[("", "out/\n!out/keep\n")], "");
    assert!(r.is_ignored(Path::new("out/keep"), false));
}

#[test]
fn verified_tracked_paths_pass_through() {
    let mut r = rules();
    r.add_verified(PathBuf::from("build/tracked.txt"));
    assert!(!r.is_ignored(Path::new("build"), true));
    assert!(!r.is_ignored(Path::new("build/tracked.txt"), false));
    assert!(r.is_ignored(Path::new("build/other.txt"), false));
}

#[test]
fn parses_index_v2_and_v4() {
    // Built by hand: two entries, version 2.
    fn entry_v2(path: &str, oid: u8) -> Vec<u8> {
        let mut e = vec![0u8; 40];
        e.extend_from_slice(&[oid; 20]);
        e.extend_from_slice(&(path.len() as u16).to_be_bytes());
        e.extend_from_slice(path.as_bytes());
        let len = e.len();
        e.resize((len + 8) & !7, 0);
        e
    }
    let mut d = b"DIRC".to_vec();
    d.extend_from_slice(&2u32.to_be_bytes());
    d.extend_from_slice(&2u32.to_be_bytes());
    d.extend(entry_v2("a.txt", 1));
    d.extend(entry_v2("dir/b", 2));
    let v = parse_index(&d, 20).unwrap();
    assert_eq!(v[0].0, PathBuf::from("a.txt"));
    assert_eq!(v[1], (PathBuf::from("dir/b"), vec![2u8; 20]));

    let mut d = b"DIRC".to_vec();
    d.extend_from_slice(&4u32.to_be_bytes());
    d.extend_from_slice(&2u32.to_be_bytes());
    for (strip, suffix) in [(0u8, "dir/a"), (1, "b")] {
        d.extend(vec![0u8; 40]);
        d.extend([7u8; 20]);
        d.extend(5u16.to_be_bytes());
        d.push(strip);
        d.extend(suffix.as_bytes());
        d.push(0);
    }
    let v = parse_index(&d, 20).unwrap();
    assert_eq!(v[1].0, PathBuf::from("dir/b"));
    assert!(parse_index(b"nope", 20).is_none());
}

#[test]
fn blob_ids_match_git() {
    // `printf hello | git hash-object --stdin`
    assert_eq!(
        crate::domain::hex(&blob_id(b"hello", false)),
        "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"
    );
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lz-ign-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bom_and_non_utf8_rules_still_hide() {
    let r = IgnoreRules::from_texts(Path::new("/w"), &[], "");
    let _ = r;
    let m = build_matcher(
        Path::new("/w"),
        b"\xef\xbb\xbf.env\nsecret-\xff.txt\n!\xfe.env\r\nkey\\\xfe\n",
    )
    .unwrap();
    let ig = |p: &[u8]| {
        matches!(
            m.matched(Path::new(std::ffi::OsStr::from_bytes(p)), false),
            Match::Ignore(_)
        )
    };
    assert!(ig(b"/w/.env"), "BOM stripped");
    assert!(ig(b"/w/secret-\xff.txt"), "non-UTF-8 line kept");
    assert!(ig(b"/w/key\xfe"), "escaped invalid byte");
    assert!(!ig(b"/w/other"));
    assert!(build_matcher(Path::new("/w"), b"a[\xff]\n").is_err(), "fails closed");
}

#[test]
fn unsafe_gitignore_files_make_their_directory_opaque() {
    let d = scratch("opaque");
    std::fs::create_dir_all(d.join("a")).unwrap();
    std::fs::create_dir_all(d.join("b")).unwrap();
    std::fs::create_dir_all(d.join("c")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("a/.gitignore")).unwrap();
    std::fs::write(d.join("b/.gitignore"), vec![b'x'; (RULES_MAX + 1) as usize]).unwrap();
    std::fs::create_dir(d.join("c/.gitignore")).unwrap();
    std::fs::write(d.join(".gitignore"), "\u{feff}.env\n").unwrap();
    std::fs::write(d.join("a/x"), "x").unwrap();
    let r = IgnoreRules::load(&d, None, None, &[]).unwrap();
    assert!(r.is_ignored(Path::new("a/x"), false));
    assert!(r.is_ignored(Path::new("b/y"), false));
    assert!(r.is_ignored(Path::new("c/z"), false));
    assert!(!r.is_ignored(Path::new("a"), true), "the directory itself stays");
    assert!(r.is_ignored(Path::new(".env"), false));
    assert!(!r.is_ignored(Path::new("src/main.rs"), false));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_new_file_on_a_hidden_files_inode_number_is_not_hidden() {
    use std::os::unix::fs::MetadataExt;
    let d = scratch("reuse");
    std::fs::write(d.join(".gitignore"), "/secret\n").unwrap();
    std::fs::write(d.join("secret"), "s").unwrap();
    let r = IgnoreRules::load(&d, None, None, &[]).unwrap();
    let md = std::fs::metadata(d.join("secret")).unwrap();
    let (dev, ino, b) = (md.dev(), md.ino(), btime_of(&md));
    assert!(r.is_hidden_id(dev, ino, b));
    assert!(r.is_hidden_id(dev, ino, 0), "an unknown birth time hides (fail closed)");
    assert_eq!(r.sticky()[0].btime, b);
    if b != 0 {
        // The filesystem gave the inode number to a file born later.
        assert!(!r.is_hidden_id(dev, ino, b + 1));
        let prev = [StickyEntry {
            dev,
            ino,
            btime: b + 1,
            rel: PathBuf::from("old"),
        }];
        std::fs::write(d.join(".gitignore"), "").unwrap();
        let r2 = IgnoreRules::load(&d, None, None, &prev).unwrap();
        assert!(!r2.is_hidden_id(dev, ino, b), "a sticky record of another file's birth");
    }
    // Records written before birth times were kept: unknown, so hidden.
    let f = d.join("ignored.sticky");
    std::fs::write(&f, format!("5 6 {}\n", crate::domain::hex(b"a/b"))).unwrap();
    let old = read_sticky(&f).unwrap();
    assert_eq!((old[0].dev, old[0].ino, old[0].btime), (5, 6, 0));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn hidden_identities_are_sticky_across_rule_edits_and_renames() {
    use std::os::unix::fs::MetadataExt;
    let d = scratch("sticky");
    std::fs::create_dir_all(d.join("config")).unwrap();
    std::fs::write(d.join("config/master.key"), "k").unwrap();
    std::fs::write(d.join(".env"), "e").unwrap();
    std::fs::write(d.join(".gitignore"), "/config/master.key\n.env\n").unwrap();
    let r = IgnoreRules::load(&d, None, None, &[]).unwrap();
    let md = std::fs::metadata(d.join("config/master.key")).unwrap();
    assert!(r.is_hidden_id(md.dev(), md.ino(), btime_of(&md)));
    assert_eq!(r.sticky().len(), 2);
    let f = d.join("ignored.sticky");
    write_sticky(&f, r.sticky()).unwrap();
    let prev = read_sticky(&f).unwrap();
    assert_eq!(prev, r.sticky());
    // From inside: rules emptied, directory renamed.
    std::fs::write(d.join(".gitignore"), "").unwrap();
    std::fs::rename(d.join("config"), d.join("c2")).unwrap();
    let r2 = IgnoreRules::load(&d, None, None, &prev).unwrap();
    assert!(r2.is_hidden_id(md.dev(), md.ino(), btime_of(&md)));
    let env = std::fs::metadata(d.join(".env")).unwrap();
    assert!(r2.is_hidden_id(env.dev(), env.ino(), btime_of(&env)));
    assert!(r2.sticky().iter().any(|e| e.rel == Path::new("c2/master.key")));
    // Replaced on the host at the same path (a new inode, rules still
    // emptied): hidden by its path.
    std::fs::write(d.join(".env.tmp"), "v2").unwrap();
    std::fs::rename(d.join(".env.tmp"), d.join(".env")).unwrap();
    let r2 = IgnoreRules::load(&d, None, None, r2.sticky()).unwrap();
    let env2 = std::fs::metadata(d.join(".env")).unwrap();
    assert!(r2.is_hidden_id(env2.dev(), env2.ino(), btime_of(&env2)));
    assert!(r2.is_ignored(Path::new(".env"), false));
    // Deleted on the host: forgotten.
    std::fs::remove_file(d.join(".env")).unwrap();
    let r3 = IgnoreRules::load(&d, None, None, r2.sticky()).unwrap();
    assert_eq!(r3.sticky().len(), 1);
    std::fs::write(&f, "1 2 zz\n").unwrap();
    assert!(read_sticky(&f).is_err(), "malformed is an error, not empty");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn rules_emptied_between_generations_still_hide_later_files() {
    let d = scratch("history");
    std::fs::write(d.join(".gitignore"), ".env\n").unwrap();
    let r = IgnoreRules::load_with_history(&d, None, None, &[], &[]).unwrap();
    let f = d.join("ignored.rules");
    write_rules_history(&f, r.rules_history()).unwrap();
    // From inside: rules emptied. Later the host creates .env.
    std::fs::write(d.join(".gitignore"), "").unwrap();
    let h = read_rules_history(&f).unwrap();
    assert_eq!(h, r.rules_history());
    let r2 = IgnoreRules::load_with_history(&d, None, None, &[], &h).unwrap();
    write_rules_history(&f, r2.rules_history()).unwrap();
    std::fs::write(d.join(".env"), "secret").unwrap();
    let r3 = IgnoreRules::load_with_history(&d, None, None, &[], &read_rules_history(&f).unwrap()).unwrap();
    assert!(r3.is_ignored(Path::new(".env"), false));
    assert!(!r3.is_ignored(Path::new("src.rs"), false));
    std::fs::write(&f, "zz\n").unwrap();
    assert!(read_rules_history(&f).is_err(), "malformed is an error, not empty");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn hashes_regular_files_only() {
    let d = scratch("hash");
    std::fs::write(d.join("f"), "hello").unwrap();
    std::os::unix::fs::symlink("/dev/zero", d.join("z")).unwrap();
    let root = rustix::fs::open(&d, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    assert_eq!(
        hash_beneath(root.as_fd(), Path::new("f"), false),
        Some(blob_id(b"hello", false))
    );
    assert_eq!(hash_beneath(root.as_fd(), Path::new("z"), false), None);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn usage_counts_files_and_dirs() {
    let d = std::env::temp_dir().join(format!("lz-ign-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("a/node_modules")).unwrap();
    std::fs::write(d.join("a/node_modules/x.js"), "x").unwrap();
    std::fs::write(d.join(".env"), "y").unwrap();
    let u = usage(&d).unwrap();
    assert_eq!((u.files, u.dirs), (2, 2));
    assert_eq!(usage(&d.join("missing")).unwrap(), Usage::default());
    let _ = std::fs::remove_dir_all(&d);
}

/// What the host-tool matcher adds to a verdict on the listing path, for
/// the record: `cargo test --release --lib host_tool_verdict_cost --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn host_tool_verdict_cost() {
    let paths: Vec<PathBuf> = (0..100_000).map(|i| PathBuf::from(format!("big/e{i:06}"))).collect();
    let time = |r: &IgnoreRules| {
        let _memo = AncestorMemo::enter();
        let t = std::time::Instant::now();
        let n = paths
            .iter()
            .filter(|p| r.is_ignored(std::hint::black_box(p), false))
            .count();
        (t.elapsed().as_secs_f64() * 1e3, n)
    };
    let plain = rules();
    let tools = rules().with_host_tool(std::sync::Arc::new(crate::view::hosttool::Matcher::new(&[], &[])));
    for _ in 0..3 {
        let (a, na) = time(&plain);
        let (b, nb) = time(&tools);
        assert_eq!(na, nb);
        println!("100,000 verdicts: without the matcher {a:.1} ms, with it {b:.1} ms");
    }
}

/// A host-tool file the developer adds on the host inside a directory
/// copied at an earlier start (`.vscode/launch.json` after `.vscode/`)
/// appears inside at the next start; one the sandbox removed stays
/// removed.
#[test]
fn host_tool_files_added_on_the_host_later_are_copied() {
    let d = std::env::temp_dir().join(format!("lz-ign-later-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let (host, store) = (d.join("ws"), d.join("ignored"));
    std::fs::create_dir_all(host.join(".vscode")).unwrap();
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(host.join(".vscode/settings.json"), "{}\n").unwrap();
    let start = || {
        let r = IgnoreRules::load(&host, None, None, &[]).unwrap();
        crate::view::hosttool::seed(&host, &store, r.host_tool_found(), &|_: &Path, _, _| false).unwrap();
    };
    start();
    assert_eq!(std::fs::read(store.join(".vscode/settings.json")).unwrap(), b"{}\n");
    std::fs::remove_file(store.join(".vscode/settings.json")).unwrap();
    std::fs::write(host.join(".vscode/launch.json"), "{\"v\":1}\n").unwrap();
    start();
    assert_eq!(
        std::fs::read(store.join(".vscode/launch.json")).unwrap(),
        b"{\"v\":1}\n",
        "a host file added later is not seen inside"
    );
    assert!(
        !store.join(".vscode/settings.json").exists(),
        "a copy the sandbox removed came back"
    );
    let _ = std::fs::remove_dir_all(&d);
}
