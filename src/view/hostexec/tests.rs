//! The surface of temporary repositories: config parsing, includes, hooks,
//! programs, hook managers, and the live recomputation.

use super::config::parse_config;
use super::programs::command_paths;
use super::*;

impl Entry {
    /// `section.sub.name` (or `section.name`), as Git spells the key.
    pub fn key(&self) -> String {
        match &self.sub {
            Some(s) => format!("{}.{s}.{}", self.section, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("lz-hx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::canonicalize(&d).unwrap()
}

fn repo(name: &str) -> PathBuf {
    let d = tmp(name);
    for sub in ["objects", "refs", "hooks"] {
        std::fs::create_dir_all(d.join(".git").join(sub)).unwrap();
    }
    std::fs::write(d.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    d
}

fn no_scopes() -> Scopes {
    Scopes::default()
}

fn rels(root: &Path) -> Vec<String> {
    let s = compute(root, &no_scopes());
    view_paths(&s, root).iter().map(|p| p.display().to_string()).collect()
}

#[test]
fn parses_git_config_syntax() {
    let e = parse_config(
        b"# c\n[core]\n\tfsmonitor = \"./fs mon.sh\" ; note\n  bare\n[filter \"x\"]\nclean = tools/a.sh \\\n --fast\n[includeIf \"onbranch:evil\"]\npath = ../inc.cfg\n[Alias]\n st = !sh -c 'echo hi'\n[branch.Main]\nx=1\n",
    );
    let get = |k: &str| e.iter().find(|x| x.key() == k).and_then(|x| x.value.clone());
    assert_eq!(get("core.fsmonitor").as_deref(), Some("./fs mon.sh"));
    assert!(e.iter().any(|x| x.key() == "core.bare" && x.value.is_none()));
    assert_eq!(get("filter.x.clean").as_deref(), Some("tools/a.sh  --fast"));
    assert_eq!(get("includeif.onbranch:evil.path").as_deref(), Some("../inc.cfg"));
    assert_eq!(get("alias.st").as_deref(), Some("!sh -c 'echo hi'"));
    assert_eq!(get("branch.main.x").as_deref(), Some("1"));
}

#[test]
fn exec_keys_cover_the_surface() {
    let is = |t: &str| parse_config(t.as_bytes()).iter().all(is_exec_key);
    assert!(is("[core]\nfsmonitor=x\nsshCommand=x\neditor=x\npager=x\n"));
    assert!(is("[filter \"a\"]\nclean=x\nsmudge=x\nprocess=x\n[diff]\nexternal=x\n"));
    assert!(is("[diff \"d\"]\ncommand=x\ntextconv=x\n[merge \"m\"]\ndriver=x\n"));
    assert!(is(
        "[sequence]\neditor=x\n[credential]\nhelper=x\n[gpg]\nprogram=x\n[gpg \"ssh\"]\nprogram=x\n"
    ));
    assert!(is("[alias]\nx=!y\n[credential \"https://h\"]\nhelper=x\n"));
    assert!(!parse_config(b"[alias]\nst=status\n[user]\nname=x\n")
        .iter()
        .any(is_exec_key));
}

#[test]
fn includes_count_whether_or_not_they_exist_or_apply() {
    let d = repo("inc");
    std::fs::write(
        d.join(".git/config"),
        "[include]\npath = ../later.cfg\n[includeIf \"onbranch:never\"]\npath = ../team/branch.cfg\n[includeIf \"gitdir:/nowhere/\"]\npath = extra.cfg\n",
    )
    .unwrap();
    std::fs::create_dir_all(d.join("team")).unwrap();
    let r = rels(&d);
    for want in ["later.cfg", "team/branch.cfg", ".git/extra.cfg", ".git/config"] {
        assert!(r.contains(&want.to_string()), "{want} in {r:?}");
    }
    // A target that exists is read, and what it names counts.
    std::fs::write(
        d.join("later.cfg"),
        "[filter \"x\"]\nclean = ./tools/strip.sh\n[include]\npath=deeper.cfg\n",
    )
    .unwrap();
    let r = rels(&d);
    assert!(r.contains(&"tools/strip.sh".to_string()), "{r:?}");
    assert!(r.contains(&"deeper.cfg".to_string()), "{r:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn symlinked_hooks_and_hook_dirs_protect_their_targets() {
    let d = repo("hooks");
    std::fs::create_dir_all(d.join("scripts")).unwrap();
    std::fs::write(d.join("scripts/pre-commit"), "#!/bin/sh\n./scripts/lint.sh\n").unwrap();
    std::os::unix::fs::symlink("../../scripts/pre-commit", d.join(".git/hooks/pre-commit")).unwrap();
    let r = rels(&d);
    assert!(r.contains(&"scripts/pre-commit".to_string()), "{r:?}");
    assert!(r.contains(&"scripts/lint.sh".to_string()), "named by the hook: {r:?}");
    // The whole hooks directory a symlink.
    std::fs::remove_dir_all(d.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(d.join("githooks")).unwrap();
    std::os::unix::fs::symlink("../githooks", d.join(".git/hooks")).unwrap();
    let r = rels(&d);
    assert!(r.contains(&"githooks".to_string()), "{r:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn husky_protects_its_directory_and_managers_are_named() {
    let d = repo("husky");
    std::fs::create_dir_all(d.join(".husky/_")).unwrap();
    std::fs::write(
        d.join(".husky/_/pre-commit"),
        "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n",
    )
    .unwrap();
    std::fs::write(d.join(".git/config"), "[core]\nhooksPath = .husky/_\n").unwrap();
    let s = compute(&d, &no_scopes());
    let r = view_paths(&s, &d);
    assert!(r.contains(&PathBuf::from(".husky")), "{r:?}");
    assert!(s.managers.iter().any(|m| m.name == "husky"));
    std::fs::write(
        d.join(".git/hooks/pre-commit"),
        "#!/usr/bin/env bash\n# File generated by pre-commit: https://pre-commit.com\nARGS=(hook-impl --config=.pre-commit-config.yaml)\n",
    )
    .unwrap();
    std::fs::write(d.join(".git/config"), "").unwrap();
    let s = compute(&d, &no_scopes());
    assert!(view_paths(&s, &d).contains(&PathBuf::from(".pre-commit-config.yaml")));
    assert!(s.managers.iter().any(|m| m.name == "pre-commit"));
    std::fs::write(
        d.join(".git/hooks/pre-push"),
        "#!/bin/sh\nif lefthook -h >/dev/null 2>&1; then exec lefthook run \"pre-push\" \"$@\"; fi\n",
    )
    .unwrap();
    let s = compute(&d, &no_scopes());
    let r = view_paths(&s, &d);
    for want in ["lefthook.yml", ".lefthook.yml", "lefthook-local.yml", ".lefthook"] {
        assert!(r.contains(&PathBuf::from(want)), "{want} in {r:?}");
    }
    assert!(s.managers.iter().any(|m| m.name == "lefthook"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn programs_named_by_config_are_protected() {
    let d = repo("prog");
    let glob = d.join("global.cfg");
    std::fs::write(
        &glob,
        format!(
            "[filter \"x\"]\nclean = ./tools/strip.sh\n[alias]\nfix = !sh tools/fix.sh --all\n[core]\nfsmonitor = true\npager = less\n[diff \"d\"]\ntextconv = {}/bin/conv\n",
            d.display()
        ),
    )
    .unwrap();
    let scopes = Scopes {
        files: vec![glob.clone()],
        home: None,
    };
    let s = compute(&d, &scopes);
    let r = view_paths(&s, &d);
    for want in ["tools/strip.sh", "tools/fix.sh", "bin/conv", "global.cfg"] {
        assert!(r.contains(&PathBuf::from(want)), "{want} in {r:?}");
    }
    assert!(
        !r.iter().any(|p| p == Path::new("less") || p == Path::new("true")),
        "{r:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn core_worktree_and_submodules_move_the_base() {
    let d = repo("sub");
    let m = d.join(".git/modules/lib");
    for sub in ["objects", "refs", "hooks"] {
        std::fs::create_dir_all(m.join(sub)).unwrap();
    }
    std::fs::write(m.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        m.join("config"),
        "[core]\nworktree = ../../../lib\n[filter \"f\"]\nsmudge = ./bin/smudge\n",
    )
    .unwrap();
    std::fs::create_dir_all(d.join("lib")).unwrap();
    let r = rels(&d);
    assert!(r.contains(&"lib/bin/smudge".to_string()), "{r:?}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn command_lines() {
    let b = Path::new("/w");
    let p = |c: &str| command_paths(c, b, None);
    assert_eq!(p("./x.sh %f"), vec![PathBuf::from("/w/x.sh")]);
    assert_eq!(
        p("FOO=1 tools/y --in=cfg/z"),
        vec![PathBuf::from("/w/tools/y"), PathBuf::from("/w/cfg/z")]
    );
    assert_eq!(p("bash run.sh; cat"), vec![PathBuf::from("/w/run.sh")]);
    assert_eq!(p("f() { ./a/b; }; f"), vec![PathBuf::from("/w/a/b")]);
    assert!(p("git-lfs smudge -- %f").is_empty());
}

#[test]
fn live_notices_a_hook_created_later() {
    let d = repo("live");
    let live = Live::new(&d, &d, no_scopes());
    assert!(!live.protects(Path::new("scripts/late")));
    std::fs::create_dir_all(d.join("scripts")).unwrap();
    std::os::unix::fs::symlink("../../scripts/late", d.join(".git/hooks/post-commit")).unwrap();
    std::thread::sleep(RECHECK + Duration::from_millis(20));
    assert!(live.protects(Path::new("scripts/late")));
    assert!(live.protects(Path::new("scripts")), "ancestor names");
    assert!(!live.protects(Path::new("scripts/other")));
    let _ = std::fs::remove_dir_all(&d);
}
