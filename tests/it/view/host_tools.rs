//! The host-tool table (src/view/hosttool/table.rs), row by row: a file
//! the sandbox writes at every location a row covers, directly, through a
//! renamed or symlinked parent, by a rename or hard link onto it, leaves
//! the host's file as it was; `lazaret changes` lists it and `lazaret
//! apply` copies it; a symlink or a 1 GiB file in its place is refused by
//! both, one line each; `state diff` of a symlink to /dev/zero returns at
//! once. One Domain, every row in one script per run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lazaret::hosttool::table::{Depth, Treatment, TABLE};
use lazaret::hosttool::Matcher;

use crate::fixtures::git_repo;
use crate::harness::{sh_quote, wait_bounded, Run};
use crate::require_env;

/// One file per (row, pattern, location): the row's tool, the file's
/// workspace path, the first component of the pattern at that location
/// (the "parent" the attacks rename or symlink) and the rest below it.
struct Target {
    tool: &'static str,
    path: String,
    base: String,
    head: String,
    rest: String,
}

fn targets() -> Vec<Target> {
    let mut out: Vec<Target> = Vec::new();
    for row in TABLE.iter().filter(|r| r.treatment == Treatment::DomainSide) {
        let bases: &[&str] = match row.depth {
            Depth::Root => &[""],
            Depth::Any => &["", "sub/"],
        };
        for p in row.patterns {
            let dir = p.ends_with('/');
            let mut comps: Vec<String> = p
                .trim_end_matches('/')
                .split('/')
                .map(|c| c.replace('*', "x"))
                .collect();
            if dir {
                comps.push("f.json".into());
            }
            for base in bases {
                let path = format!("{base}{}", comps.join("/"));
                if out.iter().any(|t| t.path == path) {
                    continue;
                }
                out.push(Target {
                    tool: row.tool,
                    path,
                    base: base.to_string(),
                    head: comps[0].clone(),
                    rest: comps[1..].join("/"),
                });
            }
        }
    }
    out
}

/// Every host entry the table covers, with its content (a symlink as
/// `-> target`), outside `.git`.
fn covered_on_host(ws: &Path) -> BTreeMap<PathBuf, String> {
    let m = Matcher::new(&[], &[]);
    let mut out = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(ws.join(&d)).unwrap().flatten() {
            let rel = d.join(e.file_name());
            if e.file_name() == ".git" {
                continue;
            }
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(rel);
            } else if m.covers(&rel) || ft.is_symlink() {
                let c = if ft.is_symlink() {
                    format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
                } else {
                    String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned()
                };
                out.insert(rel, c);
            }
        }
    }
    out
}

/// The attacks on one target. Failures are expected (EXDEV, EEXIST) and
/// ignored; the direct writes (`direct`) come after every target's attacks,
/// so a later target's attack on a shared parent (`.cargo`) leaves the
/// Domain's copies as `SANDBOX direct PATH`.
fn attacks(t: &Target) -> String {
    let q = |s: &str| sh_quote(s);
    let head = format!("{}{}", t.base, t.head);
    let path = q(&t.path);
    let mut s = String::new();
    let rest_of = |root: &str| {
        if t.rest.is_empty() {
            root.to_string()
        } else {
            format!("{root}/{}", t.rest)
        }
    };
    // A symlinked parent (or the name itself): `ln -s evil .claude`.
    s.push_str(&format!(
        "rm -rf {h}; mkdir -p evil; mkdir -p \"$(dirname {e})\"; ln -s \"$PWD/evil\" {h}; printf 'SANDBOX via symlink\\n' > {p}\nrm -f {h} 2>/dev/null\n",
        h = q(&head),
        e = q(&rest_of("evil")),
        p = path
    ));
    // A renamed parent: `mv .claude x; mkdir z; … > z/settings.json; mv z .claude`.
    s.push_str(&format!(
        "mv {h} {h}.old; rm -rf z; mkdir -p \"$(dirname {z})\"; printf 'SANDBOX via rename\\n' > {z}; mv z {h}\n",
        h = q(&head),
        z = q(&rest_of("z"))
    ));
    // Onto it: a rename, a hard link.
    s.push_str(&format!(
        "mkdir -p \"$(dirname {p})\"; printf 'SANDBOX rename onto\\n' > ro; mv -f ro {p}\nprintf 'SANDBOX link onto\\n' > hl; ln -f hl {p}; rm -f hl ro\n",
        p = path
    ));
    s
}

fn direct(t: &Target) -> String {
    format!(
        "rm -rf {p}; mkdir -p \"$(dirname {p})\"; printf 'SANDBOX direct %s\\n' {p} > {p}\n",
        p = sh_quote(&t.path)
    )
}

#[test]
fn every_row_stays_domain_side_until_applied() {
    let (env, _g) = require_env!(shared);
    let ts = targets();
    // The developer's files at every root location (a `sub/` one is absent
    // on the host, so `sub` exists but holds none).
    let files: Vec<(String, String)> = ts
        .iter()
        .filter(|t| t.base.is_empty())
        .map(|t| (t.path.clone(), format!("developer's {}\n", t.path)))
        .chain([("sub/keep".to_string(), "keep\n".to_string())])
        .collect();
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let ws = git_repo(env, "tools-table", &refs);
    let before = covered_on_host(&ws);
    assert!(
        before.len() >= ts.iter().filter(|t| t.base.is_empty()).count(),
        "{before:?}"
    );

    // In runs of at most 40 KiB of script (a session spec is at most 60).
    let mut parts: Vec<String> = ts.iter().map(attacks).collect();
    parts.push("rm -rf evil z *.old .*.old sub/*.old sub/.*.old\n".to_string());
    parts.extend(ts.iter().map(direct));
    let mut scripts = vec![String::new()];
    for p in parts {
        if scripts.last().unwrap().len() + p.len() > 40 << 10 {
            scripts.push(String::new());
        }
        scripts.last_mut().unwrap().push_str(&p);
    }
    let mut r = None;
    for script in scripts {
        let run = env.run_sh(&ws, &format!("{script}echo finished\n"));
        assert!(run.stdout.contains("finished"), "{run:?}");
        env.wait_unpublished("default", &ws, Duration::from_secs(30));
        r = Some(run);
    }
    let r = r.unwrap();
    env.wait_unpublished("default", &ws, Duration::from_secs(30));
    // No covered host file changed, and none appeared (nor a symlink).
    let after = covered_on_host(&ws);
    assert_eq!(after, before, "a host-tool file on the host changed: {r:?}");

    // `changes` lists every one.
    let c = env.lz(&ws, &["changes"]).run();
    assert_eq!(c.code, 0, "{c:?}");
    for t in &ts {
        let word = if t.base.is_empty() { "changed" } else { "added" };
        assert!(
            c.stdout.contains(&format!("{word} {} ({}", t.path, t.tool)),
            "changes does not list {} ({}): {c:?}",
            t.path,
            t.tool
        );
        assert!(
            c.stdout.contains(&format!("+SANDBOX direct {}", t.path)),
            "{}: {c:?}",
            t.path
        );
    }

    // `apply` copies them.
    let mut args = vec!["apply"];
    args.extend(ts.iter().map(|t| t.path.as_str()));
    let a = env.lz(&ws, &args).run();
    assert_eq!(a.code, 0, "{a:?}");
    for t in &ts {
        assert_eq!(
            std::fs::read_to_string(ws.join(&t.path)).unwrap(),
            format!("SANDBOX direct {}\n", t.path),
            "{} not applied: {a:?}",
            t.path
        );
    }
    let c = env.lz(&ws, &["changes"]).run();
    assert!(c.stdout.contains("no host-tool file differs"), "{c:?}");

    // A symlink to /dev/zero or a sparse 1 GiB file in each place: refused
    // by both commands, one line each, the host's file unchanged.
    let applied = covered_on_host(&ws);
    let mut script = String::new();
    for (i, t) in ts.iter().enumerate() {
        let p = sh_quote(&t.path);
        if i % 2 == 0 {
            script.push_str(&format!("rm -f {p}; ln -s /dev/zero {p}\n"));
        } else {
            script.push_str(&format!("rm -f {p}; truncate -s 1G {p}\n"));
        }
    }
    script.push_str("echo replaced\n");
    let r = env.run_sh(&ws, &script);
    assert!(r.stdout.contains("replaced"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(30));
    let c = env.lz(&ws, &["changes"]).run();
    assert_eq!(c.code, 0, "{c:?}");
    for (i, t) in ts.iter().enumerate() {
        let note = if i % 2 == 0 {
            "  domain: a symlink to /dev/zero (not followed)\n".to_string()
        } else {
            "  domain: a file of 1073741824 bytes, larger than the 256 KiB read limit (not read)\n".to_string()
        };
        assert!(c.stdout.contains(&format!("changed {} (", t.path)), "{}: {c:?}", t.path);
        assert!(c.stdout.contains(&note), "{}: {c:?}", t.path);
    }
    assert!(
        c.stdout.len() < 64 << 10,
        "changes read what it should not: {} bytes",
        c.stdout.len()
    );
    let mut args = vec!["apply"];
    args.extend(ts.iter().map(|t| t.path.as_str()));
    let a = env.lz(&ws, &args).run();
    assert_eq!(a.code, 1, "{a:?}");
    for (i, t) in ts.iter().enumerate() {
        let why = if i % 2 == 0 {
            "a symlink to /dev/zero"
        } else {
            "larger than the 256 KiB"
        };
        let line = a
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("refused {}: ", t.path)))
            .unwrap_or_else(|| panic!("apply did not refuse {}: {a:?}", t.path));
        assert!(line.contains(why), "{line}");
    }
    assert_eq!(covered_on_host(&ws), applied, "a refused copy reached the host");

    // `state diff` of the symlink to /dev/zero: one line, promptly.
    let t = &ts[0];
    let mut child = env
        .lz(&ws, &["state", "diff", &t.path])
        .command()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let st = wait_bounded(
        &mut child,
        Duration::from_secs(20),
        "state diff of a symlink to /dev/zero",
    );
    let out = Run::from(std::process::Output {
        status: st,
        stdout: {
            use std::io::Read;
            let mut v = Vec::new();
            child.stdout.take().unwrap().read_to_end(&mut v).unwrap();
            v
        },
        stderr: Vec::new(),
    });
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout.contains("  domain: a symlink to /dev/zero (not followed)\n") && out.stdout.len() < 4096,
        "{out:?}"
    );
}

/// With `host_config_writable = [".vscode"]` the sandbox writes the host's
/// `.vscode/` directly; renaming a directory out of it (`mv .vscode/x
/// sub2` with `.vscode/x/.envrc`) must not put the sandbox's `.envrc` at
/// `sub2/.envrc` on the host, where direnv runs it on `cd`.
#[test]
fn nothing_moves_out_of_a_writable_exception_into_a_host_tool_position() {
    let (env, _g) = require_env!(shared);
    let ws = git_repo(
        env,
        "tools-writable",
        &[(".vscode/settings.json", "{}\n"), ("keep", "k\n")],
    );
    let cfg = env.write_config(
        &env.dir("tools-writable-cfg"),
        "[profiles.default]\nhost_config_writable = [\".vscode\"]\n",
    );
    let marker = ws.with_extension("marker");
    let script = format!(
        "mkdir -p .vscode/x .vscode/y/.cargo\nprintf 'touch {m}\\n' > .vscode/x/.envrc\nprintf '[build]\\nrustc-wrapper = \"{m}\"\\n' > .vscode/y/.cargo/config.toml\nmv .vscode/x sub2; mv .vscode/y sub3\n[ -f sub2/.envrc ] && echo moved\necho finished\n",
        m = marker.display()
    );
    let r = env.run_sh_with_config(&ws, &cfg, &script);
    assert!(r.stdout.contains("finished") && r.stdout.contains("moved"), "{r:?}");
    env.wait_unpublished("default", &ws, Duration::from_secs(30));
    assert!(
        !ws.join("sub2/.envrc").exists(),
        "the sandbox's .envrc reached the host at sub2/.envrc: {r:?}"
    );
    assert!(
        !ws.join("sub3/.cargo/config.toml").exists(),
        "the sandbox's cargo config reached the host: {r:?}"
    );
    // The exception itself still works: the host's `.vscode/` is written.
    assert_eq!(
        std::fs::read_to_string(ws.join(".vscode/settings.json")).unwrap(),
        "{}\n"
    );
    assert!(!marker.exists());
}
