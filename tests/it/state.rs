//! The State Anchor and `lazaret state …` / `lazaret image list|prune`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::fixtures::lower_artifacts;
use crate::harness::{eventually, Env};
use crate::require_env;

fn domain_root(env: &Env, data: Option<&Path>, profile: &str, ws: &Path) -> PathBuf {
    let base = data.map_or_else(|| env.home.join(".local/share"), Path::to_path_buf);
    base.join("lazaret/domains").join(env.domain_id(profile, ws))
}

fn upper(root: &Path, key: &str) -> PathBuf {
    root.join("anchor").join(key).join("upper")
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).map(|mut d| d.next().is_none()).unwrap_or(false)
}

// Covers SR-14, FR-1, FR-4, FR-11, DX-6.
#[test]
fn changes_persist_inspect_lists_them_and_reset_is_scoped() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("persist");
    env.write(&ws.join("keep.txt"), "workspace file\n");
    // 1. Create, edit, delete; non-persisted paths vanish.
    let r = env.run_sh(
        &ws,
        "set -e; mkdir -p /usr/local/bin; printf 'SECRET-CONTENT-4711\\n' > /usr/local/bin/tool; \
         chmod 755 /usr/local/bin/tool; echo edited-host > /etc/hostname; rm /etc/motd; \
         echo gone > /srv/not-persisted; echo gone > /tmp/not-persisted",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run_sh(
        &ws,
        "cat /usr/local/bin/tool /etc/hostname; test -e /etc/motd && echo MOTD-STILL-THERE; \
         test -e /srv/not-persisted && echo SRV-PERSISTED; test -e /tmp/not-persisted && echo TMP-PERSISTED; true",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("SECRET-CONTENT-4711") && r.stdout.contains("edited-host"),
        "{r:?}"
    );
    for bad in ["MOTD-STILL-THERE", "SRV-PERSISTED", "TMP-PERSISTED"] {
        assert!(!r.stdout.contains(bad), "{bad}: {r:?}");
    }

    // 3. inspect --json: the three changes with their kinds, no content.
    let j = env.lz(&ws, &["state", "inspect", "--json"]).run();
    assert_eq!(j.code, 0, "{j:?}");
    for want in [
        r#""kind":"added","path":"/usr/local/bin/tool","type":"file""#,
        r#""kind":"modified","path":"/etc/hostname","type":"file""#,
        r#""kind":"deleted","path":"/etc/motd","type":"whiteout""#,
    ] {
        assert!(j.stdout.contains(want), "{want} missing: {j:?}");
    }
    assert!(
        !j.stdout.contains("SECRET-CONTENT") && !j.stdout.contains("edited-host"),
        "{j:?}"
    );
    assert!(!j.stdout.contains("/tmp/") && !j.stdout.contains("/srv/"), "{j:?}");
    let h = env.lz(&ws, &["state", "inspect"]).run();
    assert_eq!(h.code, 0, "{h:?}");
    assert!(
        h.stdout.contains("/usr/local/bin/tool") && h.stdout.contains("deleted"),
        "{h:?}"
    );
    let l = env.lz(&ws, &["state", "list"]).run();
    assert_eq!(l.code, 0, "{l:?}");
    assert!(l.stdout.contains(&env.domain_id("default", &ws)), "{l:?}");
    for out in [&h.stdout, &l.stdout] {
        for line in out.lines() {
            assert!(line.chars().count() <= 80, "wider than 80 columns: {line:?}");
        }
    }
    assert!(!h.stdout.contains("SECRET-CONTENT"), "{h:?}");
    let lj = env.lz(&ws, &["state", "list", "--json"]).run();
    assert!(
        lj.stdout.contains(r#""path":"/usr""#) && lj.stdout.contains(r#""active":false"#),
        "{lj:?}"
    );
    let v = env.lz(&ws, &["state", "verify", "--json"]).run();
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.stdout.contains(r#""ok":true"#), "{v:?}");

    // 4. Reset while a session runs: refused, even with --yes; nothing changed.
    let root = domain_root(env, None, "default", &ws);
    let mut bg = env.lz(&ws, &["run", "--", "sleep", "6"]).spawn();
    env.wait_published("default", &ws, Duration::from_secs(30));
    let r = env.lz(&ws, &["state", "reset", "--path", "/usr", "--yes"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("running") || r.stderr.contains("in use"), "{r:?}");
    let v = env.lz(&ws, &["state", "verify"]).run();
    assert_eq!(v.code, 2, "verify needs an inactive Domain: {v:?}");
    assert!(upper(&root, "usr").join("local/bin/tool").exists());
    let _ = bg.wait();
    // Without --yes and without a terminal: nothing happens.
    let r = env.lz(&ws, &["state", "reset", "--path", "/usr"]).run();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(upper(&root, "usr").join("local/bin/tool").exists());
    // After the stop: /usr emptied, /etc intact, the workspace untouched.
    let r = env.lz(&ws, &["state", "reset", "--path", "/usr", "--yes"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(&env.domain_id("default", &ws)),
        "shows the Domain: {r:?}"
    );
    assert!(
        r.stderr.contains("/usr") && r.stderr.contains("kept: /etc"),
        "shows the scope: {r:?}"
    );
    assert!(is_empty_dir(&upper(&root, "usr")), "the /usr upper is empty");
    let r = env.run_sh(
        &ws,
        "test -e /usr/local/bin/tool && echo TOOL-STILL-THERE; cat /etc/hostname; \
         test -e /etc/motd || echo motd-deleted; cat /workspace/keep.txt",
    );
    assert!(!r.stdout.contains("TOOL-STILL-THERE"), "{r:?}");
    assert!(
        r.stdout.contains("edited-host") && r.stdout.contains("motd-deleted"),
        "{r:?}"
    );
    assert!(r.stdout.contains("workspace file"), "{r:?}");
}

// Covers OR-5.
#[test]
fn reset_is_crash_consistent_at_every_step() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("crash");
    let root = domain_root(env, None, "default", &ws);
    for step in 1..=5 {
        let r = env.run_sh(
            &ws,
            "echo x > /usr/crash-x; echo y > /etc/crash-y; mkdir -p /var/d/e; echo z > /var/d/e/f",
        );
        assert_eq!(r.code, 0, "{r:?}");
        let fault = format!("reset-step-{step}");
        let r = env
            .lz(&ws, &["state", "reset", "--all", "--yes"])
            .env("LAZARET_FAULT", &fault)
            .run();
        assert_ne!(
            r.code, 0,
            "{fault} did not fire: build with `--features fault-injection` (scripts/test.sh does): {r:?}"
        );
        let v = env.lz(&ws, &["state", "verify"]).run();
        assert_eq!(v.code, 0, "after {fault}: {v:?}");
        // The scope (all paths) is fully old or fully empty: here, rolled
        // forward, every upper is empty and nothing is half there.
        let have: Vec<bool> = [("usr", "crash-x"), ("etc", "crash-y"), ("var", "d/e/f")]
            .iter()
            .map(|(k, f)| upper(&root, k).join(f).exists())
            .collect();
        assert!(
            have.iter().all(|&h| h) || have.iter().all(|&h| !h),
            "half reset after {fault}: {have:?}"
        );
        for k in ["usr", "etc", "var"] {
            assert!(upper(&root, k).is_dir(), "{k} upper missing after {fault}");
        }
        let names: Vec<String> = std::fs::read_dir(root.join("anchor"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with('.') || n == "reset-journal"),
            "leftovers after {fault}: {names:?}"
        );
        let r = env.run_sh(&ws, "test -e /usr/crash-x && echo X-THERE; true");
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.stdout.contains("X-THERE"), have[0], "{r:?}");
    }
}

// Covers SR-14.
#[test]
fn symlinks_in_the_upper_are_never_followed() {
    let (env, _g) = require_env!(shared);
    let ws = env.dir("symlink");
    let outside = env.dir("outside");
    let target = outside.join("precious.txt");
    env.write(&target, "PRECIOUS\n");
    env.write(&outside.join("sub/inner.txt"), "INNER\n");
    let script = format!(
        "ln -s {t} /usr/evil-link && ln -s {d} /etc/evil-dir && ln -s / /var/evil-root",
        t = target.display(),
        d = outside.display()
    );
    let r = env.run_sh(&ws, &script);
    assert_eq!(r.code, 0, "{r:?}");
    // Also one planted directly in the upper by the host user.
    let root = domain_root(env, None, "default", &ws);
    let planted = upper(&root, "root").join("planted");
    std::os::unix::fs::symlink(&outside, &planted).unwrap();
    std::os::unix::fs::lchown(&planted, Some(env.uid), Some(env.gid)).unwrap();

    let j = env.lz(&ws, &["state", "inspect", "--json"]).run();
    assert_eq!(j.code, 0, "{j:?}");
    assert!(
        j.stdout.contains(r#""path":"/usr/evil-link","type":"symlink""#),
        "{j:?}"
    );
    assert!(j.stdout.contains(r#""path":"/etc/evil-dir","type":"symlink""#), "{j:?}");
    assert!(
        !j.stdout.contains("inner.txt") && !j.stdout.contains("PRECIOUS"),
        "followed: {j:?}"
    );
    assert!(!j.stdout.contains("/var/evil-root/"), "followed: {j:?}");
    let v = env.lz(&ws, &["state", "verify"]).run();
    assert_eq!(v.code, 0, "symlinks are fine as entries: {v:?}");
    let r = env.lz(&ws, &["state", "reset", "--all", "--yes"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "PRECIOUS\n");
    assert_eq!(
        std::fs::read_to_string(outside.join("sub/inner.txt")).unwrap(),
        "INNER\n"
    );
    assert!(
        std::fs::symlink_metadata(&planted).is_err(),
        "the planted link itself is gone"
    );
}

// Covers SR-11.
#[test]
fn two_domains_never_see_each_others_upper() {
    let (env, _g) = require_env!(shared);
    let a = env.dir("iso-a");
    let b = env.dir("iso-b");
    let r = env.run_sh(&a, "echo A > /usr/only-in-a; echo A > /root/a-note");
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run_sh(&b, "ls /usr/only-in-a /root/a-note 2>&1; echo B > /usr/only-in-b");
    assert!(r.stdout.contains("No such file"), "{r:?}");
    assert!(!r.stdout.contains("\n/usr/only-in-a\n"), "{r:?}");
    let r = env.run_sh(&a, "cat /usr/only-in-a; test -e /usr/only-in-b && echo SAW-B; true");
    assert!(r.stdout.contains('A') && !r.stdout.contains("SAW-B"), "{r:?}");
    let ib = env.lz(&b, &["state", "inspect", "--json"]).run();
    assert!(
        !ib.stdout.contains("only-in-a") && ib.stdout.contains("only-in-b"),
        "{ib:?}"
    );
    assert_ne!(env.domain_id("default", &a), env.domain_id("default", &b));
}

// ---- a private storage root and OCI layout ------------------------------------------------

struct Private {
    data: PathBuf,
    cfg: PathBuf,
    layout: PathBuf,
}

/// A storage root of its own (so prune and rebuilt images never touch the
/// shared one) with a copy of the default image as an OCI layout.
fn private(env: &Env, name: &str) -> Private {
    let base = env.dir(name);
    let data = base.join("data");
    let cfg = base.join("cfg");
    let layout = base.join("layout");
    let src = env.home.join(".local/share/lazaret/images/default");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&layout)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", env.uid, env.gid))
        .arg(&layout)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    env.write(
        &cfg.join("lazaret/config.toml"),
        &format!("[profiles.default]\nimage = \"oci:{}:latest\"\n", layout.display()),
    );
    Private { data, cfg, layout }
}

fn plz<'a>(env: &'a Env, p: &Private, ws: &Path, args: &[&str]) -> crate::harness::Lz<'a> {
    env.lz(ws, args)
        .config_home(&p.cfg)
        .env("XDG_DATA_HOME", &p.data.display().to_string())
}

/// Adds `dir` at `dest` in the image as a new layer (a rebuilt image).
fn umoci_insert(env: &Env, p: &Private, dir: &Path, dest: &str) {
    let mut c = Command::new(&env.as_user()[0]);
    c.args(&env.as_user()[1..])
        .args(["umoci", "insert", "--rootless", "--image"])
        .arg(format!("{}:latest", p.layout.display()))
        .arg(dir)
        .arg(dest)
        .env_clear()
        .envs(env.base_env())
        .current_dir(&env.home);
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "umoci insert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// Covers SR-15, FR-4, FR-22.
#[test]
fn a_new_lower_keeps_the_upper() {
    let (env, _g) = require_env!(shared);
    let p = private(env, "rebuild");
    let ws = env.dir("rebuild-ws");
    let v1 = env.dir("img-v1");
    env.write(&v1.join("untouched.txt"), "v1\n");
    env.write(&v1.join("edited.txt"), "v1\n");
    umoci_insert(env, &p, &v1, "/opt/lz");
    let r = plz(
        env,
        &p,
        &ws,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "cat /opt/lz/untouched.txt; echo domain > /opt/lz/edited.txt",
        ],
    )
    .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "v1\n");
    // Rebuild: both files change in the image.
    let v2 = env.dir("img-v2");
    env.write(&v2.join("untouched.txt"), "v2\n");
    env.write(&v2.join("edited.txt"), "v2\n");
    umoci_insert(env, &p, &v2, "/opt/lz");
    let r = plz(
        env,
        &p,
        &ws,
        &["run", "--", "sh", "-c", "cat /opt/lz/untouched.txt /opt/lz/edited.txt"],
    )
    .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout, "v2\ndomain\n",
        "untouched follows the new lower, edited keeps the Domain's"
    );
    let lst = plz(env, &p, &ws, &["image", "list", "--json"]).run();
    assert_eq!(lst.stdout.matches(r#""kind":"artifact""#).count(), 2, "{lst:?}");
    let v = plz(env, &p, &ws, &["state", "verify"]).run();
    assert_eq!(v.code, 0, "{v:?}");
}

// Covers OR-7.
#[test]
fn prune_reclaims_only_unleased_artifacts_and_never_foreign_dirs() {
    let (env, _g) = require_env!(shared);
    let p = private(env, "prune");
    let a = env.dir("prune-a");
    let b = env.dir("prune-b");
    for ws in [&a, &b] {
        let r = plz(env, &p, ws, &["run", "--", "true"]).run();
        assert_eq!(r.code, 0, "{r:?}");
    }
    // `run` returns when its command ends; the Domain's teardown goes on
    // after it (under load, for seconds). Below, exactly one Domain is
    // active at a time: first both of these are gone.
    let mut l = plz(env, &p, &a, &["image", "list", "--json"]).run();
    assert!(
        eventually(Duration::from_secs(90), || {
            l = plz(env, &p, &a, &["image", "list", "--json"]).run();
            l.stdout.contains(r#""active":[]"#)
        }),
        "the two Domains never ended: {l:?}"
    );
    let lowers = p.data.join("lazaret/lowers");
    let foreign = lowers.join("not-lazarets");
    env.write(&foreign.join("file"), "mine\n");
    let artifacts = |_: ()| lower_artifacts(&lowers);
    let arts = artifacts(());
    assert_eq!(arts.len(), 1, "two Domains share one artifact: {arts:?}");
    // A live preparer's tree (this test process stands in for it).
    let me = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .to_string();
    let prep = lowers.join(format!(".prep-{}-{me}-{start}-abcd", arts[0]));
    env.write(&prep.join("rootfs/x"), "half\n");

    // One Domain active: the artifact is kept.
    let mut bg = plz(env, &p, &a, &["run", "--", "sleep", "8"]).spawn();
    let sock = env.runtime_root().join(env.domain_id("default", &a)).join("hc.sock");
    assert!(eventually(Duration::from_secs(30), || sock.exists()));
    let r = plz(env, &p, &a, &["image", "prune"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(artifacts(()), arts, "kept while leased: {r:?}");
    let l = plz(env, &p, &a, &["image", "list", "--json"]).run();
    assert!(
        l.stdout
            .contains(&format!(r#""active":["{}"]"#, env.domain_id("default", &a))),
        "{l:?}"
    );
    let _ = bg.wait();
    // The coordinator unlinks its lock as the last step of teardown; until
    // then the Domain is active and prune (rightly) keeps its artifact.
    let lock = sock.with_file_name("lock");
    assert!(
        eventually(Duration::from_secs(30), || !lock.exists()),
        "teardown did not finish"
    );
    // None leased: kept while a profile uses the image, reclaimed with
    // --all; the foreign dir and the live preparer survive.
    let r = plz(env, &p, &a, &["image", "prune", "--json"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(artifacts(()), arts, "the default profile's lower is kept: {r:?}");
    let r = plz(env, &p, &a, &["image", "prune", "--all", "--json"]).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(artifacts(()).is_empty(), "unleased artifact reclaimed: {r:?}");
    assert_eq!(std::fs::read_to_string(foreign.join("file")).unwrap(), "mine\n");
    assert!(prep.join("rootfs/x").exists(), "a live preparer's tree survives");
    // The Domains still start (the lower is prepared again).
    let r = plz(env, &p, &b, &["run", "--", "true"]).run();
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn both_overlay_drivers_persist_and_verify() {
    let (env, _g) = require_env!(shared);
    for driver in ["kernel", "fuse"] {
        let ws = env.dir(&format!("driver-{driver}"));
        let r = env
            .lz_sh(
                &ws,
                "echo v > /opt/new; rm /etc/motd; rm -rf /etc/apt/apt.conf.d; mkdir /etc/apt/apt.conf.d; \
                     touch /etc/apt/apt.conf.d/mine",
            )
            .env("LAZARET_OVERLAY_DRIVER", driver)
            .run();
        assert_eq!(r.code, 0, "{driver}: {r:?}");
        let root = domain_root(env, None, "default", &ws);
        let rec = std::fs::read_to_string(root.join("anchor/etc/driver")).unwrap();
        assert_eq!(rec.trim(), driver);
        // The recorded driver wins over the knob for an existing upper.
        let other = if driver == "kernel" { "fuse" } else { "kernel" };
        let r = env
            .lz_sh(&ws, "cat /opt/new; ls /etc/apt/apt.conf.d; ls /etc/motd 2>&1; true")
            .env("LAZARET_OVERLAY_DRIVER", other)
            .run();
        assert_eq!(r.code, 0, "{driver}: {r:?}");
        assert_eq!(
            r.stdout.lines().take(2).collect::<Vec<_>>(),
            ["v", "mine"],
            "{driver}: {r:?}"
        );
        assert!(r.stdout.contains("No such file"), "{driver}: {r:?}");
        let j = env.lz(&ws, &["state", "inspect", "--json"]).run();
        assert!(
            j.stdout.contains(r#""kind":"opaque","path":"/etc/apt/apt.conf.d""#),
            "{driver}: {j:?}"
        );
        assert!(
            j.stdout.contains(r#""kind":"deleted","path":"/etc/motd""#),
            "{driver}: {j:?}"
        );
        assert!(
            j.stdout.contains(r#""kind":"added","path":"/opt/new""#),
            "{driver}: {j:?}"
        );
        assert!(!j.stdout.contains(".wh."), "markers are not changes: {driver}: {j:?}");
        let v = env.lz(&ws, &["state", "verify"]).run();
        assert_eq!(v.code, 0, "{driver}: {v:?}");
    }
}
