//! Each project is inside at a path of its own (docs/usage.md, "Where the
//! workspace is inside"): agents that key their state by the absolute
//! path (Claude Code's `~/.claude/projects/…` and trust, Codex's trust)
//! keep one project's state apart from another's, though the volume that
//! holds it is shared.

use crate::harness::Run;
use crate::require_env;

/// The lines of a run's stdout.
fn lines(r: &Run) -> Vec<&str> {
    r.stdout.lines().collect()
}

#[test]
fn each_project_is_inside_at_its_own_path_with_workspace_leading_there() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("paths");
    let state = base.join("agent-state");
    std::fs::create_dir(&state).unwrap();
    env.chown(&state);
    // One profile, one volume shared by every project (like an agent's
    // credential and history volume).
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.default]\nvolumes = [\"{}:/root/.agent-state\"]\n\n[profiles.bare]\npersist = []\n",
            state.display()
        ),
    );
    let one = base.join("one");
    let two = base.join("two words");
    for d in [&one, &two, &one.join("sub"), &one.join("sub/dir")] {
        std::fs::create_dir(d).unwrap();
        env.chown(d);
    }
    env.write(&two.join("host-file"), "from the host of two\n");
    let script = "pwd; readlink /workspace; echo \"$LAZARET_WORKSPACE\"; \
                  echo \"$(pwd)\" >> /root/.agent-state/seen; \
                  echo written > here-$(basename \"$(pwd)\")";

    // Project one, at its root.
    let r = env.lz_sh(&one, script).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    let p1 = one.to_str().unwrap();
    assert_eq!(lines(&r), [p1, p1, p1], "pwd, /workspace and LAZARET_WORKSPACE: {r:?}");
    assert_eq!(
        std::fs::read_to_string(one.join("here-one")).unwrap(),
        "written\n",
        "the write at the project's own path reached the host workspace"
    );

    // Project two (a name with a space): its own path, its own files only.
    let check = format!(
        "{script}; cat /workspace/host-file; test -e {q}/here-one && echo LEAK || echo no-leak; ls /workspace",
        q = crate::harness::sh_quote(p1)
    );
    let r = env.lz_sh(&two, &check).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    let p2 = two.to_str().unwrap();
    let l = lines(&r);
    assert_eq!(l[..3], [p2, p2, p2], "{r:?}");
    assert_eq!(l[3], "from the host of two", "/workspace reaches two's files: {r:?}");
    assert_eq!(l[4], "no-leak", "project one's file is visible in project two: {r:?}");
    assert!(
        l[5..].contains(&"here-two words") && !l[5..].contains(&"here-one"),
        "{r:?}"
    );
    assert!(two.join("here-two words").is_file());
    assert!(!two.join("here-one").exists() && !one.join("here-two words").exists());

    // A start in a subdirectory of the workspace (named, as it is not a Git
    // repository) lands in the same subdirectory inside.
    let sub = one.join("sub/dir");
    let wsarg = format!("--workspace={p1}");
    let r = env
        .lz(
            &sub,
            &[
                "run",
                &wsarg,
                "--",
                "sh",
                "-c",
                "pwd; ls /workspace; cat /workspace/here-one",
            ],
        )
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let l = lines(&r);
    assert_eq!(l[0], sub.to_str().unwrap(), "{r:?}");
    assert!(
        l.contains(&"sub") && l.contains(&"here-one") && l.contains(&"written"),
        "{r:?}"
    );

    // A later start of project one: the same path again.
    let r = env.lz_sh(&one, "pwd; cat here-one").config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(lines(&r), [p1, "written"], "{r:?}");

    // What the shared volume recorded: one path per project.
    let seen = std::fs::read_to_string(state.join("seen")).unwrap();
    assert_eq!(seen, format!("{p1}\n{p2}\n"));

    // With nothing persisted, the host path would need a mount point in
    // the shared image: the project is at /workspaces/NAME-HASH instead,
    // the same at every start, and /workspace leads there too.
    let fallback = "pwd; readlink /workspace; cat /workspace/here-one; ls -a /workspaces";
    let r1 = env.lz_in(&one, "bare", &["sh", "-c", fallback]).config_home(&cfg).run();
    assert_eq!(r1.code, 0, "{r1:?}");
    let l = lines(&r1);
    let leaf = l[0]
        .strip_prefix("/workspaces/one-")
        .unwrap_or_else(|| panic!("{r1:?}"));
    assert!(
        leaf.len() == 10 && leaf.bytes().all(|b| b.is_ascii_hexdigit()),
        "{r1:?}"
    );
    assert_eq!(l[1], l[0], "{r1:?}");
    assert_eq!(l[2], "written", "{r1:?}");
    let own = format!("one-{leaf}");
    assert_eq!(
        l[3..],
        [".", "..", own.as_str()],
        "only this project under /workspaces: {r1:?}"
    );
    let r2 = env.lz_in(&one, "bare", &["sh", "-c", "pwd"]).config_home(&cfg).run();
    assert_eq!(lines(&r2), [l[0]], "{r2:?}");
    // The image every Domain shares got no mount point of a project.
    let lowers = env.home.join(".local/share/lazaret/lowers");
    let artifacts = crate::fixtures::lower_artifacts(&lowers);
    assert!(!artifacts.is_empty(), "no lowers at {}", lowers.display());
    for a in artifacts {
        let rootfs = lowers.join(a).join("rootfs");
        for p in [&one, &two] {
            let inside = rootfs.join(p.strip_prefix("/").unwrap());
            assert!(!inside.exists(), "{} was made in the shared image", inside.display());
        }
        let ws = rootfs.join("workspaces");
        if ws.is_dir() {
            assert_eq!(std::fs::read_dir(&ws).unwrap().count(), 0, "{}", ws.display());
        }
    }
}
