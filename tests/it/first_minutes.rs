//! The first five minutes: the Quick start with a normal user's PATH, a
//! sandbox root that can do what package managers do (and still no network
//! administration), volumes, the host's Git identity, per-command help,
//! plain errors and exit codes, and one bad profile breaking only itself.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::harness::{eventually, Env, Run};
use crate::require_env;

/// PATH of a normal (non-root) Debian user: no sbin directories.
const USER_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn run_in(env: &Env, ws: &Path, cfg: &Path, args: &[&str]) -> Run {
    env.lz(ws, args).config_home(cfg).run()
}

fn stop(env: &Env, ws: &Path, cfg: &Path, profile: &str) {
    let _ = env.lz(ws, &["stop", "-p", profile]).config_home(cfg).run();
}

// ---- 1: Quick start with a normal user's PATH; doctor -------------------------

#[test]
fn image_build_works_with_a_normal_users_path_into_a_fresh_storage_root() {
    let (env, _g) = require_env!(shared);
    let data = env.dir("fresh-data");
    let r = env
        .lz(&data, &["image", "build", "--quiet"])
        .env("PATH", USER_PATH)
        .env("XDG_DATA_HOME", &data.display().to_string())
        .run();
    let built = data.join("lazaret/images/default/index.json").is_file();
    let _ = std::fs::remove_dir_all(&data);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(built, "the image is in the fresh storage root: {r:?}");
    assert!(!r.stderr.contains("Unable to execute target architecture"), "{r:?}");
}

// Covers DX-5.
#[test]
fn doctor_fails_for_a_helper_missing_from_its_path_and_for_a_config_error() {
    let env = require_env!();
    let (ws, cfg) = env.workspace_with_config("doctor", "[profiles.a]\ncomand = [\"/bin/true\"]\n");
    // A PATH without /usr/bin: umoci, skopeo, git... are not found there,
    // and doctor names the fix.
    let pre = env.as_user();
    let out = Command::new("/usr/bin/setpriv")
        .args(&pre[1..])
        .arg(env.bin.join("lazaret"))
        .arg("doctor")
        .env_clear()
        .envs(env.base_env())
        .env("PATH", "/nonexistent-dir")
        .current_dir(&ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let r = Run::from(out);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("FAIL umoci: umoci"), "{r:?}");
    assert!(r.stdout.contains("not found on PATH=/nonexistent-dir"), "{r:?}");
    // The checks that run helpers name their programs by absolute path:
    // the user's PATH does not decide them.
    assert!(r.stdout.contains("egress-log-mode"), "{r:?}");
    assert!(!r.stdout.contains("failed to execute"), "{r:?}");
    assert!(
        r.stdout.contains("add /usr/bin to PATH"),
        "the fix names the directory: {r:?}"
    );
    // chroot lives in /usr/sbin: found on the PATH Lazaret uses, even when
    // the user's own PATH has no sbin directory.
    let r = env.lz(&ws, &["doctor"]).env("PATH", USER_PATH).run();
    assert!(r.stdout.contains("ok   chroot: found /usr/sbin/chroot"), "{r:?}");
    assert!(r.stdout.contains("ok   arch-test"), "{r:?}");
    assert!(r.stdout.contains("ok   config"), "no config file is fine: {r:?}");
    // A config error: exit 1, the file and line in the report.
    let r = run_in(env, &ws, &cfg, &["doctor"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("FAIL config:"), "{r:?}");
    assert!(
        r.stdout.contains("config.toml:2: profiles.a.comand: unknown key"),
        "{r:?}"
    );
}

// ---- 2: capabilities ----------------------------------------------------------------

// Covers SR-5.
#[test]
fn sandbox_root_can_chown_setuid_and_su_but_not_administer_the_network() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("caps", "");
    let script = r#"
set -e
touch /tmp/owned && chown 1000:1000 /tmp/owned && echo "chown $(stat -c %u:%g /tmp/owned)"
python3 -c 'import os; os.setgroups([]); os.setegid(42); os.seteuid(42); print("seteuid", os.geteuid(), os.getegid())'
su -s /bin/true nobody && echo su-ok
"#;
    let r = run_in(env, &ws, &cfg, &["run", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("chown 1000:1000"), "{r:?}");
    assert!(r.stdout.contains("seteuid 42 42"), "{r:?}");
    assert!(r.stdout.contains("su-ok"), "{r:?}");

    // No CAP_NET_RAW: raw and packet sockets are refused.
    let raw = r#"
import socket
for fam, typ, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                        (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
                        (socket.AF_PACKET, socket.SOCK_RAW, 0)]:
    try:
        socket.socket(fam, typ, proto)
        print("RAW-SOCKET-OPENED", fam, proto)
    except OSError as e:
        print("refused", e.errno)
"#;
    let r = run_in(env, &ws, &cfg, &["run", "--", "python3", "-c", raw]);
    assert!(!r.stdout.contains("RAW-SOCKET-OPENED"), "{r:?}");
    assert_eq!(r.stdout.matches("refused").count(), 3, "{r:?}");

    // No CAP_NET_ADMIN: adding a route over rtnetlink fails, and the route
    // (the marker) never appears.
    let route = r#"
import socket, struct, os
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
s.bind((0, 0))
rtm = struct.pack("BBBBBBBBI", socket.AF_INET, 32, 0, 0, 254, 4, 0, 1, 0)
dst = struct.pack("HH", 8, 1) + bytes([198, 18, 99, 7])
oif = struct.pack("HHi", 8, 4, 1)
body = rtm + dst + oif
# RTM_NEWROUTE, NLM_F_REQUEST|NLM_F_ACK|NLM_F_CREATE|NLM_F_EXCL
msg = struct.pack("IHHII", 16 + len(body), 24, 0x1 | 0x4 | 0x400 | 0x200, 1, 0) + body
try:
    s.send(msg)
    data = s.recv(4096)
    err = struct.unpack("i", data[16:20])[0] if struct.unpack("H", data[4:6])[0] == 2 else 0
    print("netlink-error", err)
except OSError as e:
    print("netlink-refused", e.errno)
try:
    with open("/proc/net/route") as f:
        table = f.read()
except OSError:
    table = ""
print("ROUTE-ADDED" if "076312C6" in table.upper() else "no-route")
"#;
    let r = run_in(env, &ws, &cfg, &["run", "--", "python3", "-c", route]);
    assert!(r.stdout.contains("no-route"), "{r:?}");
    assert!(!r.stdout.contains("ROUTE-ADDED"), "{r:?}");
    assert!(
        !r.stdout.contains("netlink-error 0"),
        "the kernel accepted the route: {r:?}"
    );
    stop(env, &ws, &cfg, "default");

    // A profile narrows the set: without CHOWN, chown fails again.
    let (ws, cfg) = env.workspace_with_config("caps-narrow", "[profiles.default]\ncaps = [\"KILL\", \"SETUID\"]\n");
    let r = run_in(
        env,
        &ws,
        &cfg,
        &["run", "--", "sh", "-c", "touch /tmp/x && chown 1000 /tmp/x"],
    );
    assert_ne!(r.code, 0, "{r:?}");
    stop(env, &ws, &cfg, "default");
    // And can never widen it.
    let (ws, cfg) = env.workspace_with_config("caps-wide", "[profiles.default]\ncaps = [\"NET_ADMIN\"]\n");
    let r = run_in(env, &ws, &cfg, &["run", "--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("profiles.default.caps"), "{r:?}");
}

// ---- 3: volumes ----------------------------------------------------------------------

// Covers SR-3.
#[test]
fn volumes_are_mounted_read_only_and_read_write() {
    let (env, _g) = require_env!(shared);
    let base = env.dir("volumes");
    let ro = base.join("ro");
    let rw = base.join("rw");
    for d in [&ro, &rw] {
        std::fs::create_dir(d).unwrap();
        env.chown(d);
    }
    env.write(&ro.join("hello"), "read only\n");
    env.write(&rw.join("from-host"), "host wrote\n");
    let config = format!(
        "[profiles.default]\nvolumes = [\"{}:/mnt:ro\", \"{}:/root/rw\"]\n",
        ro.display(),
        rw.display()
    );
    let (ws, cfg) = env.workspace_with_config("volumes-ws", &config);
    let script = "cat /mnt/hello; cat /root/rw/from-host; \
                  if echo x > /mnt/MARKER 2>/dev/null; then echo RO-WRITTEN; else echo ro-refused; fi; \
                  echo inside > /root/rw/from-sandbox";
    let r = run_in(env, &ws, &cfg, &["run", "--", "sh", "-c", script]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("read only\n"), "{r:?}");
    assert!(r.stdout.contains("host wrote\n"), "{r:?}");
    assert!(r.stdout.contains("ro-refused"), "{r:?}");
    assert!(!ro.join("MARKER").exists(), "the read-only volume was written");
    assert_eq!(std::fs::read_to_string(rw.join("from-sandbox")).unwrap(), "inside\n");
    stop(env, &ws, &cfg, "default");

    // A guest path neither in the image nor under a persist path would make
    // runsc create it in the shared lower: refused, and the lower untouched.
    let config = format!("[profiles.default]\nvolumes = [\"{}:/data/x\"]\n", rw.display());
    let (ws, cfg) = env.workspace_with_config("volumes-nowhere", &config);
    let r = run_in(env, &ws, &cfg, &["run", "--", "true"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("/data/x does not exist in the image"), "{r:?}");
    for lower in std::fs::read_dir(env.home.join(".local/share/lazaret/lowers"))
        .unwrap()
        .flatten()
    {
        assert!(!lower.path().join("rootfs/data").exists(), "the lower was changed");
        assert!(!lower.path().join("rootfs/root/rw").exists(), "the lower was changed");
    }
    stop(env, &ws, &cfg, "default");

    // A missing host path is bad input, named.
    let missing = base.join("not-there");
    let config = format!("[profiles.default]\nvolumes = [\"{}:/data/x\"]\n", missing.display());
    let (ws, cfg) = env.workspace_with_config("volumes-missing", &config);
    let r = run_in(env, &ws, &cfg, &["run", "--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains(&missing.display().to_string()), "{r:?}");
}

// ---- 4: Git identity --------------------------------------------------------------------

#[test]
fn host_git_identity_is_visible_and_read_only_inside() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("gitid", "[profiles.anon]\ngit_identity = false\n");
    let gitcfg = cfg.join("host.gitconfig");
    env.write(
        &gitcfg,
        "[user]\n\tname = Host Person\n\temail = host@example.invalid\n[init]\n\tdefaultBranch = trunk\n",
    );
    let script = "cd /tmp && git config user.name && git config user.email && git config init.defaultBranch; \
                  if git config --system user.name Sandbox 2>/dev/null; then echo SYSTEM-WRITTEN; fi; \
                  if echo '[core]' >> /.lazaret/gitconfig 2>/dev/null; then echo FILE-WRITTEN; fi; \
                  git config user.name";
    let r = env
        .lz_sh(&ws, script)
        .config_home(&cfg)
        .env("GIT_CONFIG_GLOBAL", &gitcfg.display().to_string())
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout, "Host Person\nhost@example.invalid\ntrunk\nHost Person\n",
        "{r:?}"
    );
    stop(env, &ws, &cfg, "default");
    // Turned off per profile.
    let r = env
        .lz(
            &ws,
            &["run", "-p", "anon", "--", "sh", "-c", "cd /tmp && git config user.name"],
        )
        .config_home(&cfg)
        .env("GIT_CONFIG_GLOBAL", &gitcfg.display().to_string())
        .run();
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!r.stdout.contains("Host Person"), "{r:?}");
    stop(env, &ws, &cfg, "anon");
}

// ---- 5: CLI --------------------------------------------------------------------------------

#[test]
fn per_command_help_short_options_and_run_without_double_dash() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("cli", "");
    for args in [
        &["run", "--help"][..],
        &["help", "run"],
        &["run", "-h"],
        &["run", "-q", "--help"],
    ] {
        let r = run_in(env, &ws, &cfg, args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(r.stdout.starts_with("usage: lazaret run"), "{args:?}: {r:?}");
        assert!(r.stdout.contains("--profile"), "{r:?}");
    }
    for cmd in ["ps", "stop", "image", "net", "state", "doctor"] {
        let r = run_in(env, &ws, &cfg, &[cmd, "--help"]);
        assert_eq!(r.code, 0, "{cmd}: {r:?}");
        assert!(r.stdout.starts_with(&format!("usage: lazaret {cmd}")), "{r:?}");
    }
    let r = run_in(env, &ws, &cfg, &["-V"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("lazaret "), "{r:?}");

    let r = run_in(env, &ws, &cfg, &["run", "ls", "/"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.lines().any(|l| l == "workspace"), "{r:?}");
    // --opt=value and short forms; the command's own options stay its own.
    let wsarg = format!("--workspace={}", ws.display());
    let r = run_in(
        env,
        &ws,
        &cfg,
        &[
            "run",
            "-q",
            "--profile=default",
            &wsarg,
            "sh",
            "-c",
            "echo \"$@\"",
            "sh",
            "--help",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "--help\n", "{r:?}");
    let r = run_in(
        env,
        Path::new("/"),
        &cfg,
        &["run", "-w", &ws.display().to_string(), "pwd"],
    );
    assert_eq!(r.stdout, format!("{}\n", ws.display()), "{r:?}");
    stop(env, &ws, &cfg, "default");
}

// ---- 6: errors and exit codes ------------------------------------------------------------------

/// Runs `args` with stdout on a pipe whose reader is already gone.
fn with_closed_stdout(env: &Env, ws: &Path, cfg: &Path, args: &[&str]) -> std::process::ExitStatus {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fds; we own both.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing the read end we just created.
    unsafe { libc::close(fds[0]) };
    // SAFETY: the write end is ours; Stdio takes it over.
    let out = unsafe { <Stdio as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
    let mut c = env.lz(ws, args).config_home(cfg).command();
    c.stdin(Stdio::null()).stdout(out).stderr(Stdio::piped());
    c.output().unwrap().status
}

#[test]
fn plain_exit_codes_and_quiet_broken_pipes() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("codes", "");
    let r = run_in(env, &ws, &cfg, &["run", "--", "no-such-cmd"]);
    assert_eq!(r.code, 127, "{r:?}");
    assert!(r.stderr.contains("no-such-cmd: command not found"), "{r:?}");
    for leak in ["runsc", "container", "urpc", "executing processes"] {
        assert!(!r.stderr.contains(leak), "{leak}: {r:?}");
    }
    let r = run_in(env, &ws, &cfg, &["run", "--", "/etc/passwd"]);
    assert_eq!(r.code, 126, "{r:?}");
    let r = run_in(env, &ws, &cfg, &["run", "--", "/no/such/file"]);
    assert_eq!(r.code, 127, "{r:?}");

    // Output into a closed pipe ends quietly: status 0 or SIGPIPE, never an abort.
    for args in [
        &["net", "show"][..],
        &["state", "inspect", "--json"],
        &["state", "list"],
        &["ps"],
        &["ps", "--json"],
        &["help"],
        &["doctor"],
    ] {
        let st = with_closed_stdout(env, &ws, &cfg, args);
        assert!(
            st.code() == Some(0) || st.signal() == Some(libc::SIGPIPE) || (args[0] == "doctor" && st.code() == Some(1)),
            "{args:?}: {st:?}"
        );
    }
    // `lazaret run -- yes | head -1`: the client ends (141) and the session
    // with it, instead of pumping into a closed pipe forever.
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fds; we own both.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing the read end we just created.
    unsafe { libc::close(fds[0]) };
    // SAFETY: the write end is ours; Stdio takes it over.
    let out = unsafe { <Stdio as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
    let mut c = env.lz(&ws, &["run", "--", "yes"]).config_home(&cfg).command();
    let mut child = c
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let st = st.expect("run -- yes into a closed pipe never ended");
    assert!(st.code() == Some(141) || st.signal() == Some(libc::SIGPIPE), "{st:?}");
    stop(env, &ws, &cfg, "default");

    // A bad image path is bad input.
    let (ws, cfg) = env.workspace_with_config(
        "badimage",
        "[profiles.default]\nimage = \"oci:/nonexistent/layout:latest\"\n",
    );
    let r = run_in(env, &ws, &cfg, &["run", "--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("/nonexistent/layout"), "{r:?}");
}

/// A small tmpfs owned by the test user, unmounted on drop.
struct SmallFs(PathBuf);

impl SmallFs {
    fn new(env: &Env, name: &str, size: &str) -> Option<SmallFs> {
        let d = env.dir(name);
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},uid={},gid={},mode=0700", env.uid, env.gid))
            .arg("tmpfs")
            .arg(&d)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then_some(SmallFs(d))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_full_storage_filesystem_says_no_space_left() {
    let (env, _g) = require_env!(shared);
    let Some(fs) = SmallFs::new(env, "full-build", "6m") else {
        if std::env::var("LAZARET_MUST_WORK").as_deref() == Ok("1") {
            panic!("cannot mount a tmpfs");
        }
        eprintln!("skipping: cannot mount a tmpfs");
        return;
    };
    let data = fs.0.display().to_string();
    let r = env
        .lz(&fs.0, &["image", "build", "--quiet"])
        .env("PATH", USER_PATH)
        .env("XDG_DATA_HOME", &data)
        .run();
    assert_eq!(r.code, 125, "{r:?}");
    assert!(r.stderr.contains("no space left on tmpfs ("), "{r:?}");
    assert!(
        r.stderr.lines().count() <= 2,
        "one plain message, not the helper's log: {r:?}"
    );
    drop(fs);

    // Room for the image, not for its unpacked lower: `run` says so.
    let Some(fs) = SmallFs::new(env, "full-run", "140m") else {
        return;
    };
    let images = fs.0.join("lazaret/images");
    std::fs::create_dir_all(&images).unwrap();
    env.copy_default_image(&images, &fs.0.join("lazaret"));
    let _ = Command::new("chmod").arg("0700").arg(fs.0.join("lazaret")).status();
    let (ws, cfg) = env.workspace_with_config("full-run-ws", "");
    let r = env
        .lz(&ws, &["run", "--", "true"])
        .config_home(&cfg)
        .env("XDG_DATA_HOME", &fs.0.display().to_string())
        .run();
    assert_eq!(r.code, 125, "{r:?}");
    assert!(r.stderr.contains("no space left on tmpfs ("), "{r:?}");
}

// ---- 7: a bad profile breaks only itself --------------------------------------------------------

#[test]
fn a_typo_in_one_profile_leaves_the_others_working() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config(
        "typo",
        "[profiles.a]\nenv = { A = \"1\" }\n\n[profiles.b]\nimage = \"default\"\ncomand = [\"sh\"]\n",
    );
    let r = run_in(env, &ws, &cfg, &["run", "-p", "a", "--", "sh", "-c", "echo $A"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, "1\n", "{r:?}");
    let warning = "config.toml:6: profiles.b.comand: unknown key";
    assert_eq!(
        r.stderr.matches(warning).count(),
        1,
        "one warning naming file and line: {r:?}"
    );
    // A running session of `a`: `ps` lists it, `stop` stops it.
    let bg = env
        .lz(&ws, &["run", "-p", "a", "--", "sleep", "120"])
        .config_home(&cfg)
        .spawn_bg();
    let mut last = None;
    let listed = eventually(std::time::Duration::from_secs(60), || {
        let r = run_in(env, &ws, &cfg, &["ps"]);
        let ok = r.code == 0 && r.stdout.contains("  a  ") && r.stdout.contains("sleep");
        last = Some(r);
        ok
    });
    let r = last.unwrap();
    assert!(listed, "{r:?}");
    assert_eq!(r.stderr.matches(warning).count(), 1, "{r:?}");
    for args in [&["state", "list"][..], &["image", "list"]] {
        let r = run_in(env, &ws, &cfg, args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
    }
    let r = run_in(env, &ws, &cfg, &["run", "-p", "b", "--", "true"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains(warning), "{r:?}");
    let r = run_in(env, &ws, &cfg, &["stop", "-p", "a"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("stopped Domain"), "{r:?}");
    drop(bg);
}

// ---- 2 (attack): the new capabilities do not open the Git Sentry ----------------------------------

// Covers SR-4.
#[test]
fn chown_chmod_mknod_and_dac_override_do_not_reach_protected_git_paths() {
    let (env, _g) = require_env!(shared);
    let (ws, cfg) = env.workspace_with_config("caps-sentry", "");
    let git = |args: &[&str]| {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(&env.as_user()[1..])
            .arg("git")
            .args(args)
            .env_clear()
            .envs(env.base_env())
            .current_dir(&ws);
        assert!(c.status().unwrap().success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    let config_before = std::fs::read(ws.join(".git/config")).unwrap();
    env.write(&ws.join("mine.txt"), "host file\n");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = |p: &str| std::fs::metadata(ws.join(p)).unwrap().permissions().mode() & 0o7777;
    let modes_before: Vec<u32> = [".git", ".git/config", ".git/hooks"].iter().map(|p| mode(p)).collect();
    // gVisor may report some refused attribute changes as done; what counts
    // is the host side, checked below.
    let script = r#"
cd /workspace
for t in .git/config .git/hooks .git; do
  chown 4242:4242 "$t" 2>/dev/null
  chmod 0777 "$t" 2>/dev/null
done
printf '[core]\n\thooksPath = /tmp/evil\n' >> .git/config 2>/dev/null && echo CONFIG-WRITTEN
printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit 2>/dev/null && echo HOOK-WRITTEN
mknod .git/hooks/post-checkout p 2>/dev/null
ln -s /etc/passwd .git/hooks/post-merge 2>/dev/null && echo LINKED
chown 4242:4242 mine.txt 2>/dev/null && echo WORKSPACE-CHOWNED
chown 0:0 mine.txt && echo own-chown-ok
echo checked
"#;
    let r = run_in(env, &ws, &cfg, &["run", "--", "sh", "-c", script]);
    assert!(r.stdout.contains("checked"), "{r:?}");
    assert!(r.stdout.contains("own-chown-ok"), "{r:?}");
    for marker in ["CONFIG-WRITTEN", "HOOK-WRITTEN", "LINKED"] {
        assert!(!r.stdout.contains(marker), "{marker}: {r:?}");
    }
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), config_before);
    for hook in ["pre-commit", "post-checkout", "post-merge"] {
        assert!(
            std::fs::symlink_metadata(ws.join(".git/hooks").join(hook)).is_err(),
            "{hook}"
        );
    }
    for p in [".git", ".git/config", ".git/hooks", "mine.txt"] {
        assert_eq!(
            std::fs::metadata(ws.join(p)).unwrap().uid(),
            env.uid,
            "{p} changed owner on the host"
        );
    }
    let modes_after: Vec<u32> = [".git", ".git/config", ".git/hooks"].iter().map(|p| mode(p)).collect();
    assert_eq!(modes_before, modes_after, "protected modes changed on the host");
    stop(env, &ws, &cfg, "default");
}

// ---- issue 29 item 8: from $HOME ---------------------------------------------------

#[test]
fn run_from_the_home_directory_says_it_is_the_home_directory() {
    let env = require_env!();
    // The real home, with the real config location under it (no
    // XDG_CONFIG_HOME): the sentence must be about the home, not about
    // the config file or the storage root it contains.
    let r = env.lz(&env.home, &["run", "--", "true"]).run();
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("is your home directory"), "{r:?}");
    assert!(r.stderr.contains("-w DIR"), "names the way out: {r:?}");
    assert!(
        !r.stderr.contains("storage root") && !r.stderr.contains("config file"),
        "{r:?}"
    );
}
