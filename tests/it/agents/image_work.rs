//! Image work as a new user meets it (issue 48 items 6 and 9): a recipe's
//! build names the steps it really runs, with the time it has run; the
//! first start of an image shows its unpack with an estimate; `image ls`
//! shows the disk each image and prepared lower takes as `du` counts it;
//! and without subordinate ids nothing of an image build or a first start
//! begins: exit 2 naming the file, the user and the fix.
//!
//! Test safety: nothing here reaches the network (the recipe has no
//! packages; its one step sleeps).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{sh_quote, Env, Tmux};
use crate::require_env;

/// `du -sB1 PATH`, as root.
fn du(p: &Path) -> u64 {
    let o = Command::new("du").arg("-sB1").arg(p).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("du {}: {o:?}", p.display()))
}

/// `display::human_size`, the test's oracle for the text listing.
fn human(b: u64) -> String {
    const U: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut i) = (b as f64, 0);
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    match i {
        0 => format!("{b} B"),
        _ if v < 10.0 => format!("{v:.1} {}", U[i]),
        _ => format!("{v:.0} {}", U[i]),
    }
}

/// A storage root of the test's own holding a copy of the default image.
fn data_with_default(env: &Env, base: &Path, uid: u32, gid: u32) -> PathBuf {
    let data = base.join("data");
    let images = data.join("lazaret/images");
    std::fs::create_dir_all(&images).unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(env.home.join(".local/share/lazaret/images/default"))
        .arg(&images)
        .status()
        .unwrap();
    assert!(st.success());
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{gid}")])
        .arg(&data)
        .status()
        .unwrap();
    assert!(st.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(data.join("lazaret"), std::fs::Permissions::from_mode(0o700)).unwrap();
    data
}

/// A tmux pane command running `lazaret ARGS` as the test user in `ws`
/// with its own config and storage, then `exit=N`.
fn pane(env: &Env, ws: &Path, cfg: &Path, data: &Path, args: &[&str]) -> String {
    let mut cmd = env.as_user().iter().map(|s| sh_quote(s)).collect::<Vec<_>>().join(" ");
    cmd.push_str(" env");
    for (k, v) in env.base_env() {
        cmd.push_str(&format!(" {k}={}", sh_quote(&v)));
    }
    for (k, v) in [("XDG_CONFIG_HOME", cfg), ("XDG_DATA_HOME", data)] {
        cmd.push_str(&format!(" {k}={}", sh_quote(&v.display().to_string())));
    }
    let lz = std::iter::once(env.bin.join("lazaret").display().to_string())
        .chain(args.iter().map(|s| s.to_string()))
        .map(|s| sh_quote(&s))
        .collect::<Vec<_>>()
        .join(" ");
    let inner = format!(
        "cd {}; {lz}; echo exit=$?; sleep 120",
        sh_quote(&ws.display().to_string())
    );
    cmd.push_str(" TERM=xterm-256color sh -c ");
    cmd.push_str(&sh_quote(&inner));
    cmd
}

/// Every screen line the pane showed until `exit=` (sampled every 100
/// ms), and the final screen.
fn watch(t: &Tmux, limit: Duration) -> (Vec<String>, String) {
    let mut seen: Vec<String> = Vec::new();
    let t0 = Instant::now();
    loop {
        let screen = t.capture();
        for l in screen.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
            if !seen.iter().any(|s| s == l) {
                seen.push(l.to_string());
            }
        }
        if screen.contains("exit=") || t0.elapsed() > limit {
            return (seen, screen);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn json_bytes_of(json: &str, name: &str) -> Option<u64> {
    let at = json.find(&format!(r#""name":"{name}""#))?;
    let obj_end = at + json[at..].find('}')?;
    let obj_start = json[..at].rfind('{')?;
    let obj = &json[obj_start..obj_end];
    let b = obj.find(r#""bytes":"#)? + 8;
    obj[b..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// A recipe on a built image runs no debootstrap: its progress names its
/// own steps with the time run; its step times are recorded for the next
/// build's estimate; its first start shows the unpack with an estimate;
/// `image ls` gives each image's and lower's disk as `du` counts it.
// Covers DX-2.
#[test]
fn a_recipe_names_its_steps_and_image_ls_its_disk() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("imgwork");
    let cfg = env.write_config(
        &base,
        "[images.tiny]\nbase = \"default\"\nrun = [\"sleep 4\"]\n[profiles.t]\nimage = \"tiny\"\n",
    );
    let data = data_with_default(env, &base, env.uid, env.gid);
    let ws = env.dir("imgwork-ws");

    let t = Tmux::new(
        "imgbuild",
        200,
        20,
        &pane(env, &ws, &cfg, &data, &["image", "build", "tiny"]),
    );
    let t0 = Instant::now();
    let (seen, screen) = watch(&t, Duration::from_secs(900));
    drop(t);
    // Shown with `--nocapture`: the lines a user saw, and how long.
    eprintln!("image build tiny, {:?}:\n{}", t0.elapsed(), seen.join("\n"));
    assert!(screen.contains("exit=0"), "{screen}\n{seen:#?}");
    for step in [
        "building tiny: unpacking the base image default [1/3], ",
        "building tiny: run step 1 of 1: sleep 4 [2/3], ",
        "building tiny: packing into an OCI layout [3/3], ",
    ] {
        assert!(seen.iter().any(|l| l.contains(step)), "no {step:?} in {seen:#?}");
    }
    assert!(
        seen.iter()
            .any(|l| l.contains(" elapsed, no estimate (first build of it here)")),
        "{seen:#?}"
    );
    assert!(!seen.iter().any(|l| l.contains("debootstrap")), "{seen:#?}");
    // The next build of it estimates from these.
    let layout = data.join("lazaret/images/tiny");
    let times = std::fs::read_to_string(layout.join("lazaret-build-times")).unwrap();
    let names: Vec<&str> = times.lines().filter_map(|l| l.split_once('\t').map(|p| p.1)).collect();
    assert_eq!(
        names,
        [
            "unpacking the base image default",
            "run step 1 of 1: sleep 4",
            "packing into an OCI layout"
        ],
        "{times}"
    );
    let slept: u64 = times
        .lines()
        .nth(1)
        .unwrap()
        .split('\t')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(slept >= 4, "the sleep step took {slept} s: {times}");

    // The first start of the image: its unpack, timed, with an estimate.
    let t = Tmux::new(
        "imgstart",
        200,
        20,
        &pane(env, &ws, &cfg, &data, &["run", "-p", "t", "--", "true"]),
    );
    let t0 = Instant::now();
    let (seen, screen) = watch(&t, Duration::from_secs(600));
    drop(t);
    eprintln!("first start of tiny, {:?}:\n{}", t0.elapsed(), seen.join("\n"));
    assert!(screen.contains("exit=0"), "{screen}\n{seen:#?}");
    assert!(
        seen.iter()
            .any(|l| l.contains("preparing image: ") && l.contains(" elapsed, ")),
        "no timed unpack line in {seen:#?}"
    );
    let lz = |args: &[&str]| {
        env.lz(&ws, args)
            .config_home(&cfg)
            .env("XDG_DATA_HOME", &data.display().to_string())
            .run()
    };
    let _ = lz(&["stop", "-p", "t"]);

    // `image ls`: each image's and the lower's disk, as du counts it.
    let j = lz(&["image", "ls", "--json"]);
    assert_eq!(j.code, 0, "{j:?}");
    let l = lz(&["image", "ls"]);
    assert_eq!(l.code, 0, "{l:?}");
    for name in ["default", "tiny"] {
        let want = du(&data.join("lazaret/images").join(name));
        assert_eq!(json_bytes_of(&j.stdout, name), Some(want), "{name}: {}", j.stdout);
        let line = l
            .stdout
            .lines()
            .find(|x| x.starts_with(&format!("image {name} ")))
            .unwrap_or("");
        assert!(line.contains(&human(want)), "{name} {want}: {}", l.stdout);
    }
    let lowers = data.join("lazaret/lowers");
    let id = std::fs::read_dir(&lowers)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.len() == 24)
        .expect("a prepared lower");
    let want = du(&lowers.join(&id));
    assert!(want > 50 << 20, "lower of {want} bytes");
    assert!(
        j.stdout.contains(&format!(r#""id":"{id}""#)) && j.stdout.contains(&format!(r#""bytes":{want}"#)),
        "{id} {want}: {}",
        j.stdout
    );
    let line = l.stdout.lines().find(|x| x.starts_with(&id)).unwrap_or("");
    assert!(
        line.contains(&human(want)) && line.contains("prepared from tiny"),
        "{}",
        l.stdout
    );
    assert!(
        l.stdout
            .lines()
            .any(|x| x.starts_with("total ") && x.ends_with(" on disk")),
        "{}",
        l.stdout
    );

    let _ = Command::new("setpriv")
        .args(env.as_user().iter().skip(1))
        .args(["unshare", "--map-auto", "--map-root-user", "--", "rm", "-rf"])
        .arg(&data)
        .status();
}

/// A user with no subordinate ids (a system user: `useradd --system`
/// adds none) is told at once, exit 2, which file lacks a range for whom
/// and the `usermod` that adds one; no image build, and no first start's
/// unpack, has begun (was: `unshare: … Success`, exit 125, after the
/// build had started).
#[test]
fn without_subordinate_ids_no_image_work_starts() {
    let (env, _g) = require_env!(shared);
    let user = "lazaret-nosub";
    let known = |u: &str| Command::new("id").arg(u).output().is_ok_and(|o| o.status.success());
    if !known(user) {
        let st = Command::new("useradd")
            .args(["--system", "--create-home", "--home-dir", "/home/lazaret-nosub"])
            .args(["--shell", "/usr/sbin/nologin", user])
            .status()
            .unwrap();
        assert!(st.success() || known(user), "useradd {user}");
    }
    for f in ["/etc/subuid", "/etc/subgid"] {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        assert!(
            !text.lines().any(|l| l.starts_with(&format!("{user}:"))),
            "{f} has a range for {user}: the test needs a user without"
        );
    }
    let id = |flag: &str| -> u32 {
        let o = Command::new("id").args([flag, user]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    let (uid, gid) = (id("-u"), id("-g"));
    let home = PathBuf::from("/home/lazaret-nosub");
    let base = home.join(format!("it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ws = base.join("ws");
    let cfg = base.join("cfg/lazaret");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), "[images.tiny]\npackages = [\"curl\"]\n").unwrap();
    let data = base.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{gid}")])
        .arg(&home)
        .status()
        .unwrap();
    assert!(st.success());
    let lz = |args: &[&str]| {
        let o = Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .args(["--clear-groups", "--", "env", "-i"])
            .arg(format!("HOME={}", home.display()))
            .arg(format!("USER={user}"))
            .arg("PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .arg(format!("XDG_CONFIG_HOME={}", base.join("cfg").display()))
            .arg(format!("XDG_DATA_HOME={}", data.display()))
            .arg(env.bin.join("lazaret"))
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let said = |what: &str, code: i32, err: &str| {
        assert_eq!(code, 2, "{what}: {err}");
        assert!(
            err.contains(&format!("no range for {user} (uid {uid}) in /etc/subuid")),
            "{what}: {err}"
        );
        assert!(
            err.contains("sudo usermod --add-subuids ") && err.contains(user),
            "{what}: {err}"
        );
        assert!(err.contains("nothing was started"), "{what}: {err}");
        assert!(!err.contains("unshare"), "{what}: {err}");
    };
    for args in [&["image", "build"][..], &["image", "build", "tiny"]] {
        let (code, err) = lz(args);
        said(&args.join(" "), code, &err);
        assert!(!data.join("lazaret/images").exists(), "{args:?} began image work");
    }
    // The first start: the image is there, its unpack never begins.
    let data = data_with_default(env, &base, uid, gid);
    let (code, err) = lz(&["run", "-q", "--", "true"]);
    said("run", code, &err);
    assert!(!data.join("lazaret/lowers").exists(), "the first start began unpacking");
    let _ = std::fs::remove_dir_all(&base);
}
