//! Unit tests of the configuration: the TOML subset, the profile model and its defaults, fingerprints, and that bad input is named and never panics.
use super::toml::{self, Val};
use super::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const FILE: &str = "/home/u/.config/lazaret/config.toml";

fn ok(text: &str) -> Config {
    match parse(Path::new(FILE), text) {
        Ok(c) if !c.broken_profiles.is_empty() => panic!("unexpected error: {:?}", c.broken_profiles),
        Ok(c) => c,
        Err(e) => panic!("unexpected error: {}", e),
    }
}

/// The error message; fails the test if parsing succeeds.
fn err(text: &str) -> String {
    match parse(Path::new(FILE), text) {
        // A wrong profile is reported as that profile's error.
        Ok(c) if !c.broken_profiles.is_empty() => c.broken_profiles.values().next().unwrap().to_string(),
        Ok(c) => panic!("expected an error, got {:?}", c),
        Err(e) => e.to_string(),
    }
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "message {:?} lacks {:?}", msg, p);
    }
}

/// The network and escalation tables the two large examples
/// (`full_example`, `garbage_never_panics`) share: a default deny list and
/// one auto-approve rule for `git --version`.
const NETWORK_AND_GIT_RULE: &str = r#"[network]
default_deny = ["10.0.0.0/8", "fd00::/8"]
[escalation]
enabled = true
[[escalation.auto_approve]]
argv = ["git", "--version"]
"#;

/// A config text: `runtime_dir`, then [`NETWORK_AND_GIT_RULE`], then `rest`.
fn example(runtime_dir: &str, rest: &str) -> String {
    format!("runtime_dir = \"{runtime_dir}\"\n{NETWORK_AND_GIT_RULE}{rest}")
}

fn pfx(s: &str) -> Prefix {
    s.parse().unwrap()
}

// --- TOML reader -------------------------------------------------------

#[test]
fn toml_dotted_headers_and_keys() {
    let t = toml::parse("[a.b]\nc.d = \"x\"\n[\"e.f\"]\ng = true\n").unwrap();
    let a = match &t.get("a").unwrap().val {
        Val::Table(a) => a,
        v => panic!("{:?}", v),
    };
    assert!(a.get("b").is_some());
    assert!(t.get("e.f").is_some(), "quoted key keeps its dot");
}

#[test]
fn toml_array_of_tables_does_not_swallow_later_tables() {
    let c = ok("[[escalation.auto_approve]]\nargv = [\"git\"]\n[profiles.dev2]\nipv6 = true\n");
    assert_eq!(c.escalation.auto_approve.len(), 1);
    assert!(c.profiles["dev2"].ipv6);
}

#[test]
fn toml_strings_and_escapes() {
    let c = ok(concat!(
        "[profiles.default.env]\n",
        "A = \"tab\\there \\\"q\\\" \\u00e9 \\U0001F600\"\n",
        "B = 'C:\\no\\escape'\n",
        "C = \"\"\"\nline1\nline2\"\"\"\n",
        "D = '''\nraw\\n'''\n",
        "E = \"\"\"a \\\n   b\"\"\"\n",
        "F = \"\"\"x\"\"\"\"\"\n",
        "G = \"\"\"a\\\nb\\\n\n  c\"\"\"\n",
    ));
    let env: BTreeMap<_, _> = c.profiles["default"].env.iter().cloned().collect();
    assert_eq!(env["A"], "tab\there \"q\" \u{e9} \u{1F600}");
    assert_eq!(env["B"], "C:\\no\\escape");
    assert_eq!(env["C"], "line1\nline2");
    assert_eq!(env["D"], "raw\\n");
    assert_eq!(env["E"], "a b");
    assert_eq!(env["F"], "x\"\"");
    assert_eq!(env["G"], "abc");
    assert!(ok("\u{feff}[profiles.bom]\n").profiles.contains_key("bom"));
}

#[test]
fn toml_multiline_arrays_comments_crlf() {
    let c = ok("# top\r\n[profiles.x] # c\r\npersist = [\r\n  \"/usr\", # one\r\n  \"/etc\",\r\n]\r\n");
    assert_eq!(c.profiles["x"].persist, vec!["/usr", "/etc"]);
}

#[test]
fn toml_syntax_errors_have_one_based_lines() {
    assert_has(&err("\n\n[profiles.x\n"), &[FILE, ":3: invalid TOML", "expected ']'"]);
    assert_has(&err("a = \"unterminated\n"), &[":1: invalid TOML: unterminated string"]);
    assert_has(
        &err("\nimage = default\n"),
        &[":2:", "invalid value \"default\"; strings must be quoted"],
    );
    assert_has(&err("x = 1 2\n"), &[":1:", "expected end of line after the value"]);
    assert_has(&err("= 1\n"), &[":1:", "expected a key"]);
    assert_has(&err("a = \"\\q\"\n"), &[":1:", "invalid escape \\q"]);
    assert_has(&err("a = [1,,]\n"), &[":1:", "expected a value, found ','"]);
}

#[test]
fn toml_duplicates_and_redefinitions() {
    assert_has(
        &err("[profiles.x]\nipv6 = true\nipv6 = false\n"),
        &[":3: invalid TOML: duplicate key profiles.x.ipv6 (first set on line 2)"],
    );
    assert_has(
        &err("[profiles.x]\n\n[profiles.x]\n"),
        &[":3:", "cannot define [profiles.x]", "line 1"],
    );
    assert_has(
        &err("[profiles.x]\nenv = { A = \"1\" }\n[profiles.x.env]\nB = \"2\"\n"),
        &[":3:", "cannot define [profiles.x.env]"],
    );
    assert_has(
        &err("a = 1\na.b = 2\n"),
        &[":2:", "cannot set a.b: a is already defined as an integer on line 1"],
    );
}

#[test]
fn toml_deep_nesting_is_an_error_not_a_crash() {
    let text = format!("a = {}", "[".repeat(100_000));
    assert_has(&err(&text), &[":1:", "nested too deeply"]);
    let text = format!("a = {}", "{b = ".repeat(10_000));
    assert_has(&err(&text), &["nested too deeply"]);
}

#[test]
fn toml_numbers_and_dates_are_values_of_the_wrong_type() {
    assert_has(
        &err("[profiles.x]\nipv6 = 1\n"),
        &[":2: profiles.x.ipv6: expected a boolean (true or false), got an integer"],
    );
    assert_has(&err("[profiles.x]\nipv6 = 1.5e3\n"), &["got a float"]);
    assert_has(&err("[profiles.x]\nipv6 = 1979-05-27 07:32:00\n"), &["got a date-time"]);
    assert_has(&err("[profiles.x]\nipv6 = 0xff\n"), &["got an integer"]);
    assert_has(&err("[profiles.x]\nipv6 = -inf\n"), &["got a float"]);
}

// --- whole config -----------------------------------------------------

#[test]
fn empty_file_gives_builtin_default() {
    let c = ok("");
    assert!(c.exists);
    assert_eq!(c.path, PathBuf::from(FILE));
    assert_eq!(c.profiles.len(), 1);
    assert_eq!(c.profiles["default"], Profile::builtin("default"));
    assert!(!c.escalation.enabled);
    assert_eq!(c.default_deny, None);
    assert_eq!(c.runtime_dir, None);
}

#[test]
fn builtin_defaults() {
    let p = Profile::builtin("default");
    assert_eq!(p.image, ImageSource::Default);
    assert_eq!(p.command, vec!["/bin/bash", "-l"]);
    assert_eq!(p.persist, vec!["/usr", "/etc", "/var", "/opt", "/root", "/home"]);
    assert!(p.isolate_ignored);
    assert!(!p.ipv6);
    assert!(p.volumes.is_empty() && p.env.is_empty() && p.allow.is_empty() && p.deny.is_empty());
}

#[test]
fn load_absent_file_gives_builtin() {
    let path = std::env::temp_dir().join("lazaret-config-test-definitely-absent/config.toml");
    let c = load(&path).unwrap();
    assert!(!c.exists);
    assert_eq!(c.path, path);
    assert!(c.profiles.contains_key("default"));
}

#[test]
fn load_unreadable_path_is_a_read_error() {
    let dir = std::env::temp_dir();
    let e = load(&dir).unwrap_err().to_string();
    assert_has(&e, &[&dir.display().to_string(), "cannot read config file"]);
}

#[test]
fn full_example() {
    let c = ok(&example(
        "/run/user/1000/lazaret",
        r#"[[escalation.auto_approve]]
argv = ["gh", "pr", "view"]
trailing_args = ["--json", "title", "1*"]
cwd = "./sub/dir"

[profiles.dev]
image = "oci:/srv/images/dev:latest"
command = ["claude", "--yes"]
persist = ["/usr", "/home/agent"]
volumes = ["/home/u/.cache/pip:/root/.cache/pip", "/data:/data:ro"]
env = { ZED = "1", ALPHA = "two" }
isolate_ignored = false
ipv6 = true
[profiles.dev.network]
allow = ["198.18.0.0/15"]
deny = ["198.18.0.0/15", "2001:db8::/32"]
"#,
    ));
    assert_eq!(c.runtime_dir, Some(PathBuf::from("/run/user/1000/lazaret")));
    assert_eq!(c.default_deny, Some(vec![pfx("10.0.0.0/8"), pfx("fd00::/8")]));
    assert!(c.escalation.enabled);
    assert_eq!(
        c.escalation.auto_approve,
        vec![
            AutoRule {
                argv: vec!["git".into(), "--version".into()],
                allow_trailing_args: false,
                trailing_args: vec![],
                cwd: String::new(),
                harden_git: true,
            },
            AutoRule {
                argv: vec!["gh".into(), "pr".into(), "view".into()],
                allow_trailing_args: true,
                trailing_args: vec!["--json".into(), "title".into(), "1*".into()],
                cwd: "sub/dir".into(),
                harden_git: true,
            },
        ]
    );
    assert_eq!(c.profiles.len(), 2);
    let p = c.profile("dev").unwrap();
    assert_eq!(p.name, "dev");
    assert_eq!(
        p.image,
        ImageSource::Oci {
            path: "/srv/images/dev".into(),
            tag: "latest".into()
        }
    );
    assert_eq!(p.command, vec!["claude", "--yes"]);
    assert_eq!(p.persist, vec!["/usr", "/home/agent"]);
    assert_eq!(
        p.volumes,
        vec![
            Volume {
                host: "/home/u/.cache/pip".into(),
                guest: "/root/.cache/pip".into(),
                read_only: false
            },
            Volume {
                host: "/data".into(),
                guest: "/data".into(),
                read_only: true
            },
        ]
    );
    assert_eq!(p.env, vec![("ALPHA".into(), "two".into()), ("ZED".into(), "1".into())]);
    assert!(!p.isolate_ignored);
    assert!(p.ipv6);
    assert_eq!(p.allow, vec![pfx("198.18.0.0/15")]);
    assert_eq!(p.deny, vec![pfx("198.18.0.0/15"), pfx("2001:db8::/32")]);
    assert_eq!(c.profile("default").unwrap(), &Profile::builtin("default"));
}

#[test]
fn default_profile_overrides_fields_individually() {
    let c = ok("[profiles.default]\nipv6 = true\n[profiles.other]\n");
    let d = &c.profiles["default"];
    assert!(d.ipv6);
    assert_eq!(d.persist, Profile::builtin("default").persist);
    assert_eq!(d.command, Profile::builtin("default").command);
    // Other profiles start from the built-in values, not from [profiles.default].
    assert_eq!(c.profiles["other"], Profile::builtin("other"));
}

#[test]
fn inline_auto_approve_and_profile_as_dotted_keys() {
    let c = ok("escalation.auto_approve = [{ argv = [\"ls\"] }]\nprofiles.x.ipv6 = true\n");
    assert_eq!(c.escalation.auto_approve[0].argv, vec!["ls"]);
    assert!(c.profiles["x"].ipv6);
}

#[test]
fn unknown_keys_name_file_line_and_key() {
    assert_eq!(
        err("\nruntime_dri = \"/x\"\n"),
        format!(
            "{}:2: runtime_dri: unknown key; expected one of: runtime_dir, network, escalation, images, profiles",
            FILE
        )
    );
    assert_has(
        &err("[profiles.dev]\nimage = \"default\"\nimgae = \"x\"\n"),
        &[":3: profiles.dev.imgae: unknown key", "image, command"],
    );
    assert_has(
        &err("[network]\nallow = []\n"),
        &[":2: network.allow: unknown key; expected one of: default_deny"],
    );
    assert_has(
        &err("[escalation]\nenable = true\n"),
        &[":2: escalation.enable: unknown key"],
    );
    assert_has(
            &err("[[escalation.auto_approve]]\nargv = [\"a\"]\n[[escalation.auto_approve]]\nargv = [\"b\"]\ntrailing = true\n"),
            &[":5: escalation.auto_approve[1].trailing: unknown key; expected one of: argv, allow_trailing_args, trailing_args, cwd, harden_git"],
        );
    assert_has(
        &err("[profiles.dev.network]\nalow = []\n"),
        &[":2: profiles.dev.network.alow: unknown key"],
    );
    assert_has(
        &err("[profiles.\"my.dev\"]\nx = 1\n"),
        &[":2: profiles.\"my.dev\".x: unknown key"],
    );
}

#[test]
fn wrong_types() {
    assert_has(
        &err("runtime_dir = 3\n"),
        &[":1: runtime_dir: expected an absolute path, got an integer"],
    );
    assert_has(
        &err("runtime_dir = \"rel\"\n"),
        &[":1: runtime_dir: expected an absolute path, got \"rel\""],
    );
    assert_has(
        &err("network = 1\n"),
        &[":1: network: expected a table, got an integer"],
    );
    assert_has(
        &err("profiles = []\n"),
        &[":1: profiles: expected a table, got an empty array"],
    );
    assert_has(
        &err("profiles.x = \"y\"\n"),
        &[":1: profiles.x: expected a table, got \"y\""],
    );
    assert_has(
        &err("[escalation]\nenabled = \"yes\"\n"),
        &[":2: escalation.enabled: expected a boolean (true or false), got \"yes\""],
    );
    assert_has(
        &err("[profiles.d]\npersist = \"/usr\"\n"),
        &[":2: profiles.d.persist: expected an array of absolute paths, got \"/usr\""],
    );
    assert_has(
        &err("[profiles.d]\ncommand = [\"a\", 1]\n"),
        &[":2: profiles.d.command: expected a non-empty array of strings (argv), got an integer"],
    );
    assert_has(
        &err("[profiles.d]\nenv = [\"A=1\"]\n"),
        &[":2: profiles.d.env: expected a table, got an array"],
    );
    assert_has(
        &err("[profiles.d]\nisolate_ignored = \"no\"\n"),
        &[":2: profiles.d.isolate_ignored: expected a boolean"],
    );
    assert_has(
        &err("[profiles.d]\nnetwork = []\n"),
        &[":2: profiles.d.network: expected a table"],
    );
    assert_has(
        &err("[profiles.d]\nimage = [\"default\"]\n"),
        &[":2: profiles.d.image: expected an image string, got an array"],
    );
    assert_has(
        &err("[escalation]\nauto_approve = \"git\"\n"),
        &[":2: escalation.auto_approve: expected an array of tables"],
    );
    assert_has(
        &err("[escalation]\nauto_approve = [\"git\"]\n"),
        &[":2: escalation.auto_approve[0]: expected an array of tables"],
    );
}

#[test]
fn nul_characters_are_rejected() {
    assert_has(
        &err("[profiles.d]\ncommand = [\"a\\u0000b\"]\n"),
        &[":2: profiles.d.command: expected a string without NUL characters"],
    );
}

#[test]
fn persist_paths() {
    assert_eq!(
        err("[profiles.dev]\n\n\n\n\n\npersist = [\"usr\"]\n"),
        format!(
            "{}:7: profiles.dev.persist: expected an array of absolute paths, got \"usr\"",
            FILE
        )
    );
    for (bad, what) in [
        ("/", "paths other than \"/\""),
        ("/usr/", "normalized paths"),
        ("/usr/../etc", "normalized paths"),
        ("/usr/./lib", "normalized paths"),
        ("//usr", "normalized paths"),
        ("/workspace", "outside /workspace"),
        ("/workspace/sub", "outside /workspace"),
        ("/workspaces", "outside /workspace, /workspaces,"),
        ("/workspaces/a", "outside /workspace, /workspaces,"),
        ("/.lazaret/x", "outside /workspace"),
        ("/proc", "outside /workspace"),
        ("/dev/shm", "outside /workspace"),
        ("/sys", "outside /workspace"),
    ] {
        let msg = err(&format!("[profiles.d]\npersist = [\n  \"/etc\",\n  {:?},\n]\n", bad));
        assert_has(
            &msg,
            &[
                ":4: profiles.d.persist: expected an array of ",
                what,
                &format!("got {:?}", bad),
            ],
        );
    }
    // Near misses of reserved names are fine.
    let c = ok("[profiles.d]\npersist = [\"/workspacesx\", \"/devx\", \"/system\", \"/.lazaretx\"]\n");
    assert_eq!(c.profiles["d"].persist.len(), 4);
    assert!(ok("[profiles.d]\npersist = []\n").profiles["d"].persist.is_empty());
    assert_has(
        &err("[profiles.d]\npersist = [\"/usr\",\n\"/usr\"]\n"),
        &[":3: profiles.d.persist: \"/usr\" is listed twice (first on line 2)"],
    );
}

#[test]
fn volumes() {
    let c = ok("[profiles.d]\nvolumes = [\"/a:/b\", \"/c:/d:rw\", \"/e:/f:ro\"]\n");
    let v = &c.profiles["d"].volumes;
    assert_eq!(
        v[0],
        Volume {
            host: "/a".into(),
            guest: "/b".into(),
            read_only: false
        }
    );
    assert!(!v[1].read_only);
    assert!(v[2].read_only);
    assert_eq!(v[2].to_string(), "/e:/f:ro");
    for bad in ["a:/b", "/a", "/a:/b:rx", "/a:/b:ro:x", ":/b", "/a:"] {
        let msg = err(&format!("[profiles.d]\nvolumes = [{:?}]\n", bad));
        assert_has(
            &msg,
            &[
                ":2: profiles.d.volumes: expected \"HOSTPATH:GUESTPATH[:ro|:rw]\"",
                &format!("got {:?}", bad),
            ],
        );
    }
    assert_has(
        &err("[profiles.d]\nvolumes = [\"/a:/workspace/x\"]\n"),
        &[":2: profiles.d.volumes: expected \"HOSTPATH:GUESTPATH[:ro|:rw]\" with GUESTPATH a path outside /workspace"],
    );
    assert_has(
        &err("[profiles.d]\nvolumes = [\"/a:b\"]\n"),
        &["with GUESTPATH an absolute path, got \"/a:b\""],
    );
    assert_has(
        &err("[profiles.d]\nvolumes = [\"/a:/x\", \"/b:/x:ro\"]\n"),
        &[":2: profiles.d.volumes: \"guest path /x\" is listed twice (first on line 2)"],
    );
}

#[test]
fn env_forms_and_validation() {
    let a = ok("[profiles.d]\nenv = { B = \"2\", A = \"1\", _x9 = \"\" }\n");
    let b = ok("[profiles.d.env]\n_x9 = \"\"\nA = \"1\"\nB = \"2\"\n");
    assert_eq!(a.profiles["d"].env, b.profiles["d"].env);
    assert_eq!(a.profiles["d"].env[0], ("A".to_string(), "1".to_string()));
    assert_has(
            &err("[profiles.d.env]\nOK = \"1\"\n9LIVES = \"x\"\n"),
            &[":3: profiles.d.env.9LIVES: expected an environment variable name matching [A-Za-z_][A-Za-z0-9_]*, got \"9LIVES\""],
        );
    assert_has(
        &err("[profiles.d.env]\n\"A-B\" = \"x\"\n"),
        &[":2: profiles.d.env.A-B: expected an environment variable name"],
    );
    assert_has(
        &err("[profiles.d.env]\n\"A=B\" = \"x\"\n"),
        &["profiles.d.env.\"A=B\": expected an environment variable name"],
    );
    assert_has(
        &err("[profiles.d.env]\nA = 1\n"),
        &[":2: profiles.d.env.A: expected a string, got an integer"],
    );
    assert_has(
        &err("[profiles.d]\nenv = { A = { B = \"x\" } }\n"),
        &[":2: profiles.d.env.A: expected a string, got a table"],
    );
}

#[test]
fn profile_user() {
    let c = ok("[profiles.a]\nuser = \"dev\"\n");
    assert_eq!(c.profiles["a"].user.as_deref(), Some("dev"));
    assert_eq!(c.profiles["default"].user, None);
    assert_ne!(c.profiles["a"].fingerprint(), Profile::builtin("a").fingerprint());
    for bad in ["root", "Dev", "1x", "a b", ""] {
        assert_has(
            &err(&format!("[profiles.a]\nuser = {bad:?}\n")),
            &[":2: profiles.a.user: expected a user name matching"],
        );
    }
    assert_has(
        &err("[profiles.a]\nuser = \"dev\"\npersist = [\"/usr\"]\n"),
        &["profiles.a.user: expected a user whose home /home/dev lies under a persist path"],
    );
    let c = ok("[profiles.a]\nuser = \"dev\"\npersist = [\"/home/dev\"]\n");
    assert_eq!(c.profiles["a"].user.as_deref(), Some("dev"));
}

#[test]
fn image_recipes() {
    let c = ok("[images.web]\nbase = \"debian:bookworm\"\npackages = [\"nodejs\", \"curl\", \"nodejs\"]\n[profiles.d]\nimage = \"web\"\n");
    assert_eq!(c.images["web"].suite.as_deref(), Some("bookworm"));
    assert_eq!(c.images["web"].packages, ["curl", "nodejs"]);
    assert_eq!(c.profiles["d"].image, ImageSource::Named("web".into()));
    assert!(c.images.contains_key("dev"), "the built-in dev recipe");
    let d = ok("[profiles.d]\nimage = \"dev\"\n");
    assert!(d.images["dev"].packages.contains(&"nodejs".to_string()));
    let fp = c.images["web"].fingerprint("bookworm", None);
    assert_eq!(fp, c.images["web"].fingerprint("trixie", None), "explicit suite");
    assert_ne!(fp, d.images["dev"].fingerprint("bookworm", None));
    // Layered recipes: a base image and build steps, fingerprinted with
    // the base's digest and the steps in order.
    let l = ok("[images.agents]
base = \"dev\"
packages = [\"tmux\"]
run = [\"npm install -g x\", \"echo ok\"]
");
    let a = &l.images["agents"];
    assert_eq!((a.from.as_deref(), a.run.len()), (Some("dev"), 2));
    let fa = a.fingerprint("bookworm", Some("sha256:1"));
    assert_ne!(fa, a.fingerprint("bookworm", Some("sha256:2")), "a rebuilt base");
    let mut swapped = a.clone();
    swapped.run.reverse();
    assert_ne!(fa, swapped.fingerprint("bookworm", Some("sha256:1")), "step order");
    assert_has(
        &err("[images.a]\nbase = \"nope\"\n"),
        &[":2: images.a.base: expected \"default\" or an image recipe", "\"nope\""],
    );
    assert_has(
        &err("[images.a]\nbase = \"b\"\n[images.b]\nbase = \"a\"\n"),
        &["images.a.base: expected bases that end at a Debian suite"],
    );
    assert_has(
        &err("[images.a]\nbase = \"a\"\n"),
        &["images.a.base: expected another image"],
    );
    assert_has(
        &err("[images.a]\nrun = [\" \"]\n"),
        &["images.a.run: expected an array of non-empty"],
    );
    assert!(ok("[images.a]\nbase = \"default\"\nrun = [\"true\"]\n").images["a"]
        .from
        .is_some());
    assert_has(
        &err("[profiles.d]\nimage = \"nope\"\n"),
        &[
            ":2: profiles.d.image: expected an image recipe name defined as [images.NAME]",
            "\"nope\"",
        ],
    );
    assert_has(&err("[images.default]\n"), &["images.default: expected an image name"]);
    assert_has(
        &err("[images.x]\nbase = \"ubuntu:jammy\"\n"),
        &[":2: images.x.base: expected \"debian:SUITE\""],
    );
    assert_has(&err("[images.x]\npackages = [\"a b\"]\n"), &["images.x.packages"]);
    assert_has(&err("[images.x]\nsuite = \"x\"\n"), &["images.x.suite: unknown key"]);
}

#[test]
fn port_forwards() {
    let c = ok("[profiles.d]\nports = [\"127.0.0.1:3000:3000\", \"18000:8000\"]\n");
    assert_eq!(c.profiles["d"].ports.len(), 2);
    assert_eq!(c.profiles["d"].ports[1].to_string(), "127.0.0.1:18000:8000");
    assert_has(
        &err("[profiles.d]\nports = [\"3000\"]\n"),
        &[":2: profiles.d.ports: expected \"[ADDR:]HOSTPORT:GUESTPORT\""],
    );
    assert_has(
        &err("[profiles.d]\nports = [\"3000:1\", \"127.0.0.1:3000:2\"]\n"),
        &["profiles.d.ports", "host port 127.0.0.1:3000"],
    );
}

#[test]
fn pass_env_names() {
    let c = ok("[profiles.d]\npass_env = [\"ANTHROPIC_API_KEY\", \"_X\"]\n");
    assert_eq!(c.profiles["d"].pass_env, ["ANTHROPIC_API_KEY", "_X"]);
    assert_eq!(
        c.profiles["d"].fingerprint(),
        ok("[profiles.d]\n").profiles["d"].fingerprint(),
        "client-side only"
    );
    assert_has(
        &err("[profiles.d]\npass_env = [\"A=B\"]\n"),
        &[":2: profiles.d.pass_env: expected an array of environment variable names"],
    );
    assert_has(
        &err("[profiles.d]\npass_env = [\"LAZARET_SESSION\"]\n"),
        &["profiles.d.pass_env", "not LAZARET_*"],
    );
    assert_has(
        &err("[profiles.d]\npass_env = [\"A\", \"A\"]\n"),
        &["profiles.d.pass_env"],
    );
    assert_has(&err("[profiles.d]\npass_env = \"A\"\n"), &["profiles.d.pass_env"]);
}

#[test]
fn image_sources() {
    let cases = [
        ("default", ImageSource::Default),
        (
            "oci:/srv/img:v1.2",
            ImageSource::Oci {
                path: "/srv/img".into(),
                tag: "v1.2".into(),
            },
        ),
        (
            "oci:/srv/a:b/img:v1",
            ImageSource::Oci {
                path: "/srv/a:b/img".into(),
                tag: "v1".into(),
            },
        ),
        (
            "docker-archive:/tmp/img.tar",
            ImageSource::DockerArchive("/tmp/img.tar".into()),
        ),
        (
            "docker://docker.io/library/debian:12",
            ImageSource::Docker("docker.io/library/debian:12".into()),
        ),
    ];
    for (s, want) in cases {
        let c = ok(&format!("[profiles.d]\nimage = {:?}\n", s));
        assert_eq!(c.profiles["d"].image, want);
        assert_eq!(want.to_string(), s, "display round-trips");
    }
    for (bad, expected) in [
        (
            "debian",
            "expected an image recipe name defined as [images.NAME] (known: dev)",
        ),
        (
            "Debian",
            "expected one of \"default\", an [images.NAME] recipe name, \"oci:/ABS/PATH:TAG\"",
        ),
        (
            "oci:/srv/img",
            "expected \"oci:PATH:TAG\" with an absolute PATH and a non-empty TAG",
        ),
        ("oci:/srv/img:", "expected \"oci:PATH:TAG\""),
        ("oci:rel:tag", "expected \"oci:PATH:TAG\""),
        (
            "docker-archive:img.tar",
            "expected \"docker-archive:FILE\" with an absolute FILE",
        ),
        ("docker://", "expected \"docker://REF\""),
        ("Default", "expected one of"),
    ] {
        let msg = err(&format!("\n[profiles.d]\nimage = {:?}\n", bad));
        assert_has(
            &msg,
            &[FILE, ":3: profiles.d.image: ", expected, &format!("got {:?}", bad)],
        );
    }
}

#[test]
fn command_validation() {
    assert_has(
        &err("[profiles.d]\ncommand = []\n"),
        &[":2: profiles.d.command: expected a non-empty array of strings (argv), got an empty array"],
    );
    assert_has(
        &err("[profiles.d]\ncommand = [\n\"\", \"x\"]\n"),
        &[":3: profiles.d.command: expected a non-empty program name as the first element"],
    );
    assert_has(
        &err("[profiles.d]\ncommand = \"bash\"\n"),
        &["expected a non-empty array of strings (argv), got \"bash\""],
    );
    assert_eq!(
        ok("[profiles.d]\ncommand = [\"sh\", \"\"]\n").profiles["d"].command,
        vec!["sh", ""]
    );
}

#[test]
fn auto_approve_validation() {
    assert_has(
        &err("[escalation]\n[[escalation.auto_approve]]\nallow_trailing_args = true\n"),
        &[":2: escalation.auto_approve[0].argv: expected a non-empty array of strings, got no value"],
    );
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = []\n"),
        &[":2: escalation.auto_approve[0].argv: expected a non-empty array of strings, got an empty array"],
    );
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"\"]\n"),
        &[":2: escalation.auto_approve[0].argv: expected a non-empty program name"],
    );
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"a\"]\nallow_trailing_args = 1\n"),
        &[":3: escalation.auto_approve[0].allow_trailing_args: expected a boolean"],
    );
    // A program that runs the workspace's files by convention: the file,
    // the rule (index and argv) and why, in one message.
    for (argv, want) in [
        (
            r#"["npm", "test"]"#,
            "escalation.auto_approve[0].argv: expected a program that runs no file of the workspace (npm is a \
             package manager or task runner (npm): it runs the scripts the workspace's manifest or task file \
             names (package.json, pyproject.toml, Gemfile, Rakefile, composer.json, Taskfile, tasks.py, …); \
             approve such commands each time), got argv npm test",
        ),
        (
            r#"["make"]"#,
            "escalation.auto_approve[0].argv: expected a program that runs no file of the workspace (make is a \
             build tool (make): it runs the workspace's build files (Makefile, justfile, build.rs, go:generate, \
             build.gradle, pom.xml, CMakeLists.txt, …) and the code they name; approve such commands each time), \
             got argv make",
        ),
        (
            r#"["python3", "-m", "x"]"#,
            "escalation.auto_approve[0].argv: expected a program that runs no file of the workspace (python3 is \
             an interpreter (python): it runs the script, module or program text it is named, a file the sandbox \
             can write; approve such commands each time), got argv python3 -m x",
        ),
        (
            r#"["sh", "-c", "x"]"#,
            "escalation.auto_approve[0].argv: expected a program that runs no file of the workspace (sh is a \
             shell (sh): it runs any command string or script it is given; approve such commands each time), \
             got argv sh -c x",
        ),
    ] {
        let e = err(&format!("[[escalation.auto_approve]]\nargv = {argv}\n"));
        assert_eq!(e, format!("{FILE}:2: {want}"), "{argv}");
    }
    for prog in [
        "bash",
        "/bin/dash",
        "perl",
        "env",
        "/usr/bin/npm",
        "npx",
        "yarn",
        "pnpm",
        "node18",
        "python3.12",
        "cargo",
        "go",
        "mvn",
        "gradle",
        "pytest",
        "pre-commit",
        "lint-staged",
        "direnv",
        "docker",
        "xargs",
        "sudo",
        "./gradlew",
        "scripts/x.sh",
        "rustc",
        "gcc-12",
        "eslint",
        "terraform",
        "claude",
        "vim",
    ] {
        let e = err(&format!("[[escalation.auto_approve]]\nargv = [{prog:?}, \"x\"]\n"));
        assert_has(
            &e,
            &[":2: escalation.auto_approve[0].argv: expected a program that runs no file of the workspace ("],
        );
        assert!(e.contains(&format!("got argv {prog} x")), "{e}");
    }
    // Trailing arguments: patterns for any program but Git; Git only for
    // a subcommand that inspects.
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"touch\"]\nallow_trailing_args = true\n"),
        &[
            ":3: escalation.auto_approve[0].allow_trailing_args: expected trailing_args patterns for argv touch \
           (any trailing argument could name a host file or an option that writes one; only Git's are checked by \
           Lazaret), got true without patterns",
        ],
    );
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"git\", \"push\"]\nallow_trailing_args = true\n"),
        &[":3: escalation.auto_approve[0].argv: expected a Git command that inspects (git push takes no trailing"],
    );
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"gh\"]\nallow_trailing_args = false\ntrailing_args = [\"x\"]\n"),
        &[":3: escalation.auto_approve[0].allow_trailing_args: expected true (or no value) with trailing_args"],
    );
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"gh\"]\ntrailing_args = []\n"),
        &[":3: escalation.auto_approve[0].trailing_args: expected a non-empty array"],
    );
    let c = ok(
        "[[escalation.auto_approve]]\nargv = [\"gh\"]\ntrailing_args = [\"*\"]\n\
                [[escalation.auto_approve]]\nargv = [\"git\", \"log\"]\nallow_trailing_args = true\n\
                [[escalation.auto_approve]]\nargv = [\"git\"]\nallow_trailing_args = true\n",
    );
    assert!(c.escalation.auto_approve[0].allow_trailing_args);
    assert_eq!(c.escalation.auto_approve[0].trailing_args, vec!["*"]);
    assert!(c.escalation.auto_approve[1].allow_trailing_args);
    assert_has(
        &err("[[escalation.auto_approve]]\nargv = [\"git\"]\ncwd = \"../x\"\n"),
        &[":3: escalation.auto_approve[0].cwd: expected a directory relative to the workspace"],
    );
    assert_has(
        &err("[escalation]\nprompt_timeout_s = 0\n"),
        &[":2: escalation.prompt_timeout_s: expected a whole number of seconds"],
    );
    let c =
        ok("[escalation]\nprompt_timeout_s = 7\n[[escalation.auto_approve]]\nargv = [\"git\"]\nharden_git = false\n");
    assert_eq!(c.escalation.prompt_timeout_s, 7);
    assert!(!c.escalation.auto_approve[0].harden_git);
    assert_eq!(ok("").escalation.prompt_timeout_s, 300);
}

#[test]
fn join_fingerprint_covers_escalation_and_global_network() {
    let base = ok("[escalation]\nenabled = true\n");
    let fp = |c: &Config| join_fingerprint(c, c.profile("default").unwrap());
    let mut seen = std::collections::HashSet::new();
    seen.insert(fp(&base));
    for v in [
        "",
        "[escalation]\nenabled = true\nprompt_timeout_s = 5\n",
        "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"git\"]\n",
        "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"git\"]\ncwd = \"a\"\n",
        "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"gh\"]\ntrailing_args = [\"a\"]\n",
        "[escalation]\nenabled = true\n[[escalation.auto_approve]]\nargv = [\"gh\"]\ntrailing_args = [\"b\"]\n",
        "[escalation]\nenabled = true\n[network]\ndefault_deny = [\"10.0.0.0/8\"]\n",
    ] {
        assert!(seen.insert(fp(&ok(v))), "{v:?} collides");
    }
    assert_eq!(fp(&base), fp(&ok("[escalation]\nenabled = true\n")));
}

#[test]
fn profile_names() {
    let long = "a".repeat(64);
    assert!(ok(&format!(
        "[profiles.{}]\n[profiles.A-b_c]\n[profiles.\"v1.2\"]\n[profiles.9]\n",
        long
    ))
    .profiles
    .contains_key("v1.2"));
    for bad in [
        "\"-x\"",
        "\"_x\"",
        "\"a b\"",
        "\"\"",
        "\"é\"",
        &format!("\"{}\"", "a".repeat(65)),
    ] {
        let msg = err(&format!("\n[profiles.{}]\n", bad));
        assert_has(
            &msg,
            &[
                ":2: profiles.",
                "expected a profile name matching [A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
            ],
        );
    }
}

#[test]
fn unknown_profile_lists_known_ones() {
    let c = ok("[profiles.dev]\n[profiles.ci]\n");
    let e = c.profile("prod").unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: unknown profile \"prod\"; expected one of: ci, default, dev (define it as [profiles.prod])",
            FILE
        )
    );
}

// --- prefixes ---------------------------------------------------------

#[test]
fn prefix_parsing() {
    assert_eq!(
        pfx("10.0.0.0/8"),
        Prefix {
            addr: "10.0.0.0".parse().unwrap(),
            len: 8
        }
    );
    assert_eq!(pfx("fd00::/8").to_string(), "fd00::/8");
    assert_eq!(pfx("0.0.0.0/0").len, 0);
    assert_eq!(pfx("::/0").len, 0);
    assert_eq!(pfx("192.0.2.1").to_string(), "192.0.2.1/32");
    assert_eq!(pfx("2001:db8::1").to_string(), "2001:db8::1/128");
    assert_eq!(pfx("::1/128").to_string(), "::1/128");
    let e = |s: &str| s.parse::<Prefix>().unwrap_err().to_string();
    assert_eq!(
        e("10.1.2.3/8"),
        "a prefix whose host bits are zero, such as \"10.0.0.0/8\""
    );
    assert_eq!(
        e("fd00::1/8"),
        "a prefix whose host bits are zero, such as \"fd00::/8\""
    );
    assert_eq!(e("10.0.0.0/33"), "a prefix length between 0 and 32");
    assert_eq!(e("::/129"), "a prefix length between 0 and 128");
    assert_eq!(e("::/999"), "a prefix length between 0 and 128");
    for bad in [
        "",
        "10.0.0.0/",
        "10.0.0.0/+8",
        "10.0.0.0/-1",
        "10.0.0/8",
        "example.com/8",
        "10.0.0.0/8/8",
        "/8",
        "10.0.0.0/0008",
    ] {
        assert!(e(bad).starts_with("a CIDR prefix"), "{:?}", bad);
    }
    assert_eq!(Prefix::new("10.0.0.0".parse().unwrap(), 8), Some(pfx("10.0.0.0/8")));
    assert_eq!(Prefix::new("10.0.0.1".parse().unwrap(), 8), None);
    assert_eq!(Prefix::new("10.0.0.0".parse().unwrap(), 33), None);
}

#[test]
fn prefix_contains_and_overlaps() {
    let a = pfx("10.0.0.0/8");
    let b = pfx("10.1.0.0/16");
    let c = pfx("11.0.0.0/8");
    assert!(a.contains(&b) && !b.contains(&a));
    assert!(a.contains(&a));
    assert!(a.overlaps(&b) && b.overlaps(&a));
    assert!(!a.overlaps(&c) && !a.contains(&c));
    assert!(pfx("0.0.0.0/0").contains(&c));
    assert!(!pfx("0.0.0.0/0").overlaps(&pfx("::/0")), "families never overlap");
    assert!(pfx("::/0").contains(&pfx("2001:db8::/32")));
    assert!(pfx("2001:db8::/32").contains(&pfx("2001:db8:1::1/128")));
    assert!(!pfx("2001:db8::/32").overlaps(&pfx("2001:db9::/32")));
    assert!(pfx("255.255.255.255/32").contains(&pfx("255.255.255.255")));
}

#[test]
fn prefix_list_errors() {
    assert_eq!(
        err("[profiles.d.network]\ndeny = [\n  \"10.0.0.0/8\",\n  \"10.1.0.0/16\",\n]\n"),
        format!(
            "{}:4: profiles.d.network.deny: \"10.0.0.0/8\" (line 3) and \"10.1.0.0/16\" overlap; \
                 expected non-overlapping prefixes in one list, keep only one of them",
            FILE
        )
    );
    assert_has(
        &err("[network]\ndefault_deny = [\"10.1.0.0/16\", \"10.0.0.0/8\"]\n"),
        &[":2: network.default_deny: \"10.1.0.0/16\" (line 2) and \"10.0.0.0/8\" overlap"],
    );
    assert_has(
        &err("[profiles.d.network]\nallow = [\"fd00::/8\", \"fd00:0::/8\"]\n"),
        &[":2: profiles.d.network.allow: \"fd00::/8\" is listed twice (first on line 2)"],
    );
    assert_has(
            &err("[profiles.d.network]\nallow = [\"10.0.0.1/8\"]\n"),
            &[":2: profiles.d.network.allow: expected a prefix whose host bits are zero, such as \"10.0.0.0/8\", got \"10.0.0.1/8\""],
        );
    assert_has(
        &err("[network]\ndefault_deny = [\"nope\"]\n"),
        &[":2: network.default_deny: expected a CIDR prefix", "got \"nope\""],
    );
    assert_has(
        &err("[network]\ndefault_deny = \"10.0.0.0/8\"\n"),
        &["expected an array of CIDR prefixes"],
    );
    // The same prefix in allow and deny is resolved by the network layer, not here.
    let c = ok("[profiles.d.network]\nallow = [\"10.0.0.0/8\"]\ndeny = [\"10.0.0.0/8\", \"11.0.0.0/8\"]\n");
    assert_eq!(c.profiles["d"].allow, vec![pfx("10.0.0.0/8")]);
    assert_eq!(ok("[network]\ndefault_deny = []\n").default_deny, Some(vec![]));
    let c = ok("[profiles.d.network]\ndns = [\"198.18.0.2\"]\nmode = \"none\"\n");
    assert_eq!(c.profiles["d"].dns, vec![pfx("198.18.0.2/32")]);
    assert!(c.profiles["d"].egress == EgressMode::None && c.profiles["default"].egress == EgressMode::Open);
    assert_has(
        &err("[profiles.d.network]\ndns = [\"10.0.0.0/8\"]\n"),
        &[":2: profiles.d.network.dns: expected IPv4 host addresses"],
    );
    assert_has(
        &err("[profiles.d.network]\nmode = \"host\"\n"),
        &[":2: profiles.d.network.mode: expected \"slirp\", \"none\" or \"log\", got \"host\""],
    );
}

// --- fingerprint ------------------------------------------------------

#[test]
fn fingerprint_is_stable() {
    let fp = Profile::builtin("default").fingerprint();
    assert_eq!(fp.len(), 16);
    assert!(fp.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    // Pinned: a change here silently invalidates every recorded fingerprint.
    assert_eq!(fp, "b78eed2f2854e2da");
}

#[test]
fn fingerprint_covers_every_sandbox_field() {
    let base = Profile::builtin("x");
    assert_eq!(
        base.fingerprint(),
        Profile::builtin("y").fingerprint(),
        "name is not part of it"
    );
    // One change per field, named by the field: a field added to `Profile`
    // without a change here fails to compile (the pattern has no `..`);
    // fields outside the fingerprint are marked so.
    let Profile {
        name: _,
        image: _,
        command: _,
        persist: _,
        volumes: _,
        env: _,
        pass_env: _,
        ports: _,
        allow: _,
        deny: _,
        ipv6: _,
        isolate_ignored: _,
        dns: _,
        egress: _,
        hosts: _,
        global_hosts: _,
        idle_timeout_s: _,
        caps: _,
        git_identity: _,
        limits: _,
        user: _,
        host_config: _,
        host_config_writable: _,
        host_hooks: _,
        secrets: _,
        ssh_agent: _,
    } = &base;
    let outside = ["name", "pass_env", "ssh_agent", "global_hosts"];
    // Covered by config::secrets's `headers_and_plain_http_parse_and_enter_the_fingerprint`.
    let elsewhere = ["secrets"];
    type Variant = (&'static str, fn(&mut Profile));
    let variants: Vec<Variant> = vec![
        ("image", |p| p.image = ImageSource::Docker("debian".into())),
        ("command", |p| p.command = vec!["/bin/bash".into()]),
        ("command", |p| {
            p.command = vec!["/bin/bash".into(), "-l".into(), "".into()]
        }),
        ("persist", |p| {
            p.persist.pop();
        }),
        ("volumes", |p| p.volumes.push("/a:/b".parse().unwrap())),
        ("volumes", |p| p.volumes.push("/a:/b:ro".parse().unwrap())),
        ("env", |p| p.env.push(("A".into(), "1".into()))),
        ("env", |p| p.env.push(("A".into(), "".into()))),
        ("allow", |p| p.allow.push(pfx("10.0.0.0/8"))),
        ("deny", |p| p.deny.push(pfx("10.0.0.0/8"))),
        ("ipv6", |p| p.ipv6 = true),
        ("isolate_ignored", |p| p.isolate_ignored = false),
        ("dns", |p| p.dns.push(pfx("198.18.0.2/32"))),
        ("egress", |p| p.egress = EgressMode::None),
        ("egress", |p| p.egress = EgressMode::Log),
        ("ports", |p| p.ports.push("18000:8000".parse().unwrap())),
        ("hosts", |p| {
            p.hosts.push("a.example".parse().unwrap());
            p.egress = EgressMode::ByName;
        }),
        ("idle_timeout_s", |p| p.idle_timeout_s = 5),
        ("caps", |p| {
            p.caps.pop();
        }),
        ("git_identity", |p| p.git_identity = false),
        ("limits", |p| p.limits.memory = Some(1 << 30)),
        ("limits", |p| p.limits.pids = Some(100)),
        ("limits", |p| p.limits.cpu_millis = Some(500)),
        ("limits", |p| p.limits.disk = Some(1 << 30)),
        ("limits", |p| p.limits.image_layer = Some(1 << 30)),
        ("user", |p| p.user = Some("agent".into())),
        ("host_config", |p| p.host_config.push("tools/x".into())),
        ("host_config_writable", |p| p.host_config_writable.push("out".into())),
        ("host_hooks", |p| p.host_hooks = HostHooks::Refuse),
    ];
    let mut seen = BTreeSet::new();
    seen.insert(base.fingerprint());
    for (n, (field, f)) in variants.iter().enumerate() {
        let mut p = base.clone();
        f(&mut p);
        assert!(seen.insert(p.fingerprint()), "variant {n} ({field}) collides");
    }
    // Every field of the pattern above has a variant or is outside; the
    // names come from the pattern's text, so a marked-but-forgotten field
    // fails here.
    let src = include_str!("tests.rs");
    let pattern = &src[src.find("    let Profile {\n        name: _,").unwrap()..];
    let pattern = &pattern[..pattern.find("} = &base;").unwrap()];
    for field in pattern.lines().filter_map(|l| l.trim().strip_suffix(": _,")) {
        assert!(
            outside.contains(&field) || elsewhere.contains(&field) || variants.iter().any(|(f, _)| *f == field),
            "profile field {field} has no fingerprint variant in this test"
        );
    }
}

#[test]
fn fingerprint_ignores_order_where_order_is_meaningless() {
    let a = ok("[profiles.d]\npersist = [\"/a\", \"/b\"]\nenv = { A = \"1\", B = \"2\" }\n[profiles.d.network]\ndeny = [\"10.0.0.0/8\", \"fd00::/8\"]\n");
    let b = ok("[profiles.d]\npersist = [\"/b\", \"/a\"]\nenv = { B = \"2\", A = \"1\" }\n[profiles.d.network]\ndeny = [\"fd00::/8\", \"10.0.0.0/8\"]\n");
    assert_eq!(a.profiles["d"].fingerprint(), b.profiles["d"].fingerprint());
    let c = ok("[profiles.d]\nvolumes = [\"/a:/x\", \"/b:/y\"]\n");
    let d = ok("[profiles.d]\nvolumes = [\"/b:/y\", \"/a:/x\"]\n");
    assert_ne!(
        c.profiles["d"].fingerprint(),
        d.profiles["d"].fingerprint(),
        "mount order matters"
    );
}

// --- location and paths -----------------------------------------------

#[test]
fn config_path_from_env() {
    let p = |x: Option<&str>, h: Option<&str>| config_path_from(x.map(OsStr::new), h.map(OsStr::new));
    assert_eq!(p(Some("/x"), Some("/home/u")), PathBuf::from("/x/lazaret/config.toml"));
    assert_eq!(
        p(None, Some("/home/u")),
        PathBuf::from("/home/u/.config/lazaret/config.toml")
    );
    assert_eq!(
        p(Some(""), Some("/home/u")),
        PathBuf::from("/home/u/.config/lazaret/config.toml")
    );
    assert_eq!(
        p(Some("rel"), Some("/home/u")),
        PathBuf::from("/home/u/.config/lazaret/config.toml")
    );
    assert_eq!(p(None, None), PathBuf::from("/.config/lazaret/config.toml"));
    assert!(config_path().ends_with("lazaret/config.toml"));
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("lazaret-config-{}-{}-{}", tag, std::process::id(), nanos));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// Covers SR-2.
#[test]
fn check_location_refuses_config_inside_workspace() {
    let tmp = TempDir::new("ws");
    let ws = tmp.0.join("proj");
    std::fs::create_dir_all(ws.join(".config/lazaret")).unwrap();
    let inside = ws.join(".config/lazaret/config.toml");
    std::fs::write(&inside, "").unwrap();
    let e = check_location(&inside, &ws, &[]).unwrap_err();
    assert!(matches!(e, ConfigError::InsideWorkspace { .. }));
    assert_has(
        &e.to_string(),
        &[
            &inside.display().to_string(),
            "lies inside the workspace",
            &ws.display().to_string(),
            "XDG_CONFIG_HOME",
        ],
    );
    // Not yet existing files and `..` tricks are caught too.
    assert!(check_location(&ws.join("nope/config.toml"), &ws, &[]).is_err());
    assert!(check_location(&tmp.0.join("other/../proj/config.toml"), &ws, &[]).is_err());
    // A symlink outside the workspace pointing into it is resolved.
    let link = tmp.0.join("link.toml");
    std::os::unix::fs::symlink(&inside, &link).unwrap();
    assert!(check_location(&link, &ws, &[]).is_err());
    // The workspace given through a symlink is resolved as well.
    let ws_link = tmp.0.join("ws-link");
    std::os::unix::fs::symlink(&ws, &ws_link).unwrap();
    assert!(check_location(&inside, &ws_link, &[]).is_err());
    // Outside: fine; a sibling whose name merely starts the same is outside.
    let outside = tmp.0.join("config.toml");
    std::fs::write(&outside, "").unwrap();
    assert_eq!(check_location(&outside, &ws, &[]), Ok(()));
    assert_eq!(check_location(&tmp.0.join("proj2/config.toml"), &ws, &[]), Ok(()));
}

// Covers SR-2.
#[test]
fn check_location_refuses_config_under_a_volume() {
    let tmp = TempDir::new("vol");
    let ws = tmp.0.join("proj");
    let home = tmp.0.join("home");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(home.join(".config/lazaret")).unwrap();
    let cfg = home.join(".config/lazaret/config.toml");
    std::fs::write(&cfg, "").unwrap();
    let vols = vec![
        Volume {
            host: tmp.0.join("elsewhere"),
            guest: "/e".into(),
            read_only: false,
        },
        Volume {
            host: home.join(".config"),
            guest: "/root/.config".into(),
            read_only: true,
        },
    ];
    let e = check_location(&cfg, &ws, &vols).unwrap_err();
    assert_has(
        &e.to_string(),
        &[
            &cfg.display().to_string(),
            "under volume host path",
            &home.join(".config").display().to_string(),
            "/root/.config",
        ],
    );
    assert_eq!(check_location(&cfg, &ws, &vols[..1]), Ok(()));
    let root = vec![Volume {
        host: "/".into(),
        guest: "/host".into(),
        read_only: true,
    }];
    assert!(check_location(&cfg, &ws, &root).is_err());
}

// --- robustness -------------------------------------------------------

/// xorshift64*: deterministic pseudo-random numbers without a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn garbage_never_panics() {
    let seed_text = example(
        "/r",
        r#"allow_trailing_args = false
[profiles.dev]
image = "oci:/a:b"
command = ["bash", "-l"]
persist = ["/usr"]
volumes = ["/a:/b:ro"]
env = { K = "v", 'L' = """x""" }
isolate_ignored = true
ipv6 = false
[profiles.dev.network]
allow = ["198.18.0.0/15"]
deny = ["::/0"]
"#,
    );
    assert!(parse(Path::new(FILE), &seed_text).is_ok());
    let alphabet: Vec<char> = "[]{}=,.\"'\\#\n\r\t :/-_0123456789abcdefxyzAZ\u{0}\u{7f}é😀truefalse"
        .chars()
        .collect();
    let seed: Vec<char> = seed_text.chars().collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut errors = 0;
    for round in 0..3000 {
        let text: String = if round % 3 == 0 {
            (0..rng.below(200))
                .map(|_| alphabet[rng.below(alphabet.len())])
                .collect()
        } else {
            let mut t = seed.clone();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(t.len() + 1);
                match rng.below(3) {
                    0 if at < t.len() => {
                        t.remove(at);
                    }
                    1 if at < t.len() => t[at] = alphabet[rng.below(alphabet.len())],
                    _ => t.insert(at, alphabet[rng.below(alphabet.len())]),
                }
            }
            t.into_iter().collect()
        };
        if let Err(e) = parse(Path::new(FILE), &text) {
            errors += 1;
            let msg = e.to_string();
            assert!(msg.starts_with(FILE), "{:?}", msg);
            if let Some(line) = msg[FILE.len()..].strip_prefix(':').and_then(|r| r.split(':').next()) {
                let n: usize = line.parse().unwrap_or(0);
                assert!(
                    n >= 1 && n <= text.split('\n').count(),
                    "line {} out of range in {:?}",
                    n,
                    msg
                );
            }
        }
    }
    assert!(errors > 1000, "mutations should mostly fail ({} did)", errors);
}

#[test]
fn a_broken_profile_breaks_only_itself() {
    let c = parse(
        Path::new(FILE),
        "[profiles.a]\nipv6 = false\n[profiles.b]\ncomand = [\"sh\"]\n",
    )
    .unwrap();
    assert!(c.profile("a").is_ok());
    assert!(c.profile("default").is_ok());
    let e = c.profile("b").unwrap_err().to_string();
    assert_has(&e, &[FILE, ":4:", "profiles.b.comand", "unknown key"]);
    let w = c.warnings(Some("a"));
    assert_eq!(w.len(), 1);
    assert_has(&w[0], &["profile \"b\"", ":4:"]);
    assert!(c.warnings(Some("b")).is_empty());
    // Outside a profile an error still fails the whole file.
    assert!(parse(Path::new(FILE), "runtime_dir = \"rel\"\n[profiles.a]\n").is_err());
}

#[test]
fn caps_narrow_the_default_set_and_never_widen_it() {
    let c = ok("[profiles.d]\ncaps = [\"setuid\", \"CAP_CHOWN\"]\n");
    assert_eq!(c.profile("d").unwrap().caps, ["CAP_CHOWN", "CAP_SETUID"]);
    assert_eq!(c.profile("default").unwrap().caps.len(), DEFAULT_CAPS.len());
    for bad in ["NET_ADMIN", "CAP_NET_RAW", "SYS_ADMIN", "SYS_PTRACE", "ALL"] {
        let e = err(&format!("[profiles.d]\ncaps = [\"{bad}\"]\n"));
        assert_has(
            &e,
            &[
                ":2:",
                "profiles.d.caps",
                "expected an array of capabilities from: CHOWN",
            ],
        );
    }
    assert_has(
        &err("[profiles.d]\ncaps = [\"KILL\", \"CAP_KILL\"]\n"),
        &["listed twice"],
    );
    assert!(
        !ok("[profiles.d]\ngit_identity = false\n")
            .profile("d")
            .unwrap()
            .git_identity
    );
    assert_ne!(
        ok("[profiles.d]\ncaps = [\"KILL\"]\n")
            .profile("d")
            .unwrap()
            .fingerprint(),
        Profile::builtin("d").fingerprint()
    );
}

#[test]
fn ca_certs_host_binds_the_bundle_read_only_and_points_the_tools_at_it() {
    let mut p = Profile::builtin("a");
    p.env.push(("PIP_CERT".into(), "/mine.pem".into()));
    with_host_ca(&mut p, Path::new("/etc/pki/tls/certs/ca-bundle.crt")).unwrap();
    let v = p.volumes.last().unwrap();
    assert_eq!(v.host, Path::new("/etc/pki/tls/certs/ca-bundle.crt"));
    assert_eq!((v.guest.as_str(), v.read_only), (GUEST_CA_BUNDLE, true));
    for name in CA_ENV {
        let want = if *name == "PIP_CERT" {
            "/mine.pem"
        } else {
            GUEST_CA_BUNDLE
        };
        assert!(p.env.iter().any(|(k, v)| k == name && v == want), "{name}: {:?}", p.env);
    }
    assert!(p.env.windows(2).all(|w| w[0].0 < w[1].0), "env stays sorted");
    // A volume of the profile's own at that guest path is refused.
    let mut q = Profile::builtin("b");
    q.volumes
        .push("/x.pem:/etc/ssl/certs/ca-certificates.crt:ro".parse().unwrap());
    assert_eq!(with_host_ca(&mut q, Path::new("/y.pem")), Err(GUEST_CA_BUNDLE));
    // In a file: a wrong value names the key and what is accepted.
    assert_has(
        &err("[profiles.a]\nca_certs = \"yes\"\n"),
        &["profiles.a.ca_certs", "\"host\"", "\"image\""],
    );
    let c = ok("[profiles.a]\nca_certs = \"image\"\n");
    assert!(c.profiles["a"].volumes.is_empty());
    if let Ok(bundle) = host_ca_bundle() {
        let c = ok("[profiles.a]\nca_certs = \"host\"\n");
        assert_eq!(c.profiles["a"].volumes[0].host, bundle);
    }
}

#[test]
fn the_host_bundle_is_ssl_cert_file_when_set_and_never_a_fallback_from_it() {
    use std::ffi::OsStr;
    let files = [
        "/etc/pki/tls/certs/ca-bundle.crt",
        "/etc/ssl/cert.pem",
        "/home/me/corp.pem",
    ];
    let is_file = |p: &Path| files.iter().any(|f| Path::new(f) == p);
    // Unset or empty: the first system bundle that exists.
    for named in [None, Some(OsStr::new(""))] {
        assert_eq!(
            host_ca_bundle_from(named, is_file),
            Ok(PathBuf::from("/etc/pki/tls/certs/ca-bundle.crt"))
        );
    }
    // Set: that file, as OpenSSL on the host reads it.
    assert_eq!(
        host_ca_bundle_from(Some(OsStr::new("/home/me/corp.pem")), is_file),
        Ok(PathBuf::from("/home/me/corp.pem"))
    );
    // Set to no file or a relative path: an error naming it, never a
    // system bundle the host's own tools do not use.
    for bad in ["/home/me/missing.pem", "corp.pem"] {
        let e = host_ca_bundle_from(Some(OsStr::new(bad)), is_file)
            .unwrap_err()
            .to_string();
        assert!(e.contains("SSL_CERT_FILE") && e.contains(bad), "{e}");
    }
    // No bundle at all: the paths tried.
    let e = host_ca_bundle_from(None, |_| false).unwrap_err().to_string();
    assert!(
        e.contains("/etc/ssl/certs/ca-certificates.crt") && e.contains("/etc/ssl/cert.pem"),
        "{e}"
    );
}

#[test]
fn hosts_patterns_and_their_errors_name_file_line_and_pattern() {
    let c = ok("[network]\nhosts = [\"api.example.com\"]\n[profiles.d.network]\nhosts = [\n  \"*.GitHub.com\",\n  \"github.com:22\",\n]\nmode = \"log\"\n");
    let d = &c.profiles["d"];
    assert_eq!(d.global_hosts().len(), 1);
    let h: Vec<String> = d.own_hosts().iter().map(|h| h.to_string()).collect();
    assert_eq!(h, ["*.github.com", "github.com:22"]);
    assert!(d.egress == EgressMode::Log);
    for (pattern, why) in [
        ("*", "a bare \"*\""),
        ("*.com", "top-level domain"),
        ("198.18.0.1", "not an address"),
        ("example.com:99999", ":PORT"),
        ("bücher.example", "IDNA"),
        ("a_b.example", "labels"),
    ] {
        let e = err(&format!(
            "[profiles.d.network]\nhosts = [\n  \"ok.example\",\n  \"{pattern}\",\n]\n"
        ));
        assert_has(
            &e,
            &[
                FILE,
                ":4: profiles.d.network.hosts: expected",
                why,
                &format!("got {pattern:?}"),
            ],
        );
    }
    assert_has(
        &err("[network]\nhosts = [\"a.example\", \"A.example\"]\n"),
        &[":2: network.hosts: \"A.example\" is listed twice"],
    );
    // The lists are part of what a joining session must match.
    let a = ok("[profiles.d.network]\nhosts = [\"a.example\"]\n");
    let b = ok("[profiles.d.network]\nhosts = [\"b.example\"]\n");
    assert_ne!(a.profiles["d"].fingerprint(), b.profiles["d"].fingerprint());
    let g = ok("[network]\nhosts = [\"a.example\"]\n[profiles.d]\n");
    let n = ok("[profiles.d]\n");
    assert_ne!(
        join_fingerprint(&g, &g.profiles["d"]),
        join_fingerprint(&n, &n.profiles["d"])
    );
    assert_eq!(g.profiles["d"].fingerprint(), n.profiles["d"].fingerprint());
}

/// The built-in `dev` recipe is the one the tests build and docs/agents.md
/// documents (tests/fixtures/agents; the integration test
/// `the_dev_recipe_the_tests_build_is_the_documented_one` holds the docs
/// to the fixture): Node 22 pinned by SHA-256, python3-venv and tmux.
#[test]
fn the_builtin_dev_recipe_is_the_fixture() {
    let fixture = include_str!("../../tests/fixtures/agents/lazaret/config.toml");
    let start = fixture.find("[images.dev]\n").unwrap();
    let end = start + fixture[start..].find("\n\n").unwrap();
    let from_file = ok(&fixture[start..end]);
    let builtin = Config::builtin(Path::new("/nonexistent/config.toml"));
    assert_eq!(from_file.images["dev"], builtin.images["dev"]);
    let dev = &builtin.images["dev"];
    for p in ["nodejs", "npm", "python3-venv", "tmux"] {
        assert!(dev.packages.iter().any(|x| x == p), "{p}");
    }
    assert!(dev
        .run
        .iter()
        .any(|s| s.contains(DEV_NODE_SHA256) && s.contains("sha256sum -c")));
}

// --- [profiles.NAME.ssh_agent] -------------------------------------------

const FP1: &str = "SHA256:3gDkNH9tD2dIcozx6wwmy2GCemLiCLW/WrpiXeOARCw";
const FP2: &str = "SHA256:+DiY3wvvV6TuJJhbpZisF/zLDA0zPMSvHdkr4UvCOqU";

#[test]
fn ssh_agent_parses_keys_approve_and_rules() {
    use super::ssh_agent::{Approve, RuleUse, SshRule};
    let c = ok(&format!(
        "[profiles.dev.ssh_agent]\nkeys = [\"{FP1}\", \"{FP2}\"]\napprove = \"session\"\nrules = [\n  \
         {{ key = \"{FP1}\", host = \"github.com\", user = \"git\" }},\n  \
         {{ key = \"{FP2}\", host = \"[git.example.test]:2222\", user = \"me\" }},\n  \
         {{ key = \"{FP1}\", namespace = \"git\" }},\n]\n"
    ));
    let a = c.profiles["dev"].ssh_agent.clone().unwrap();
    assert_eq!(a.keys, vec![FP1.to_string(), FP2.to_string()]);
    assert_eq!(a.approve, Approve::Session);
    assert_eq!(
        a.rules,
        vec![
            SshRule {
                key: FP1.into(),
                what: RuleUse::Login {
                    host: "github.com".into(),
                    user: "git".into()
                }
            },
            SshRule {
                key: FP2.into(),
                what: RuleUse::Login {
                    host: "[git.example.test]:2222".into(),
                    user: "me".into()
                }
            },
            SshRule {
                key: FP1.into(),
                what: RuleUse::Namespace("git".into())
            },
        ]
    );
    let c = ok(&format!("[profiles.dev.ssh_agent]\nkeys = [\"{FP1}\"]\n"));
    assert_eq!(c.profiles["dev"].ssh_agent.as_ref().unwrap().approve, Approve::Each);
    assert_eq!(c.profiles["dev"].ssh_agent.as_ref().unwrap().rules, vec![]);
    assert_eq!(ok("[profiles.dev]\n").profiles["dev"].ssh_agent, None);
}

#[test]
fn ssh_agent_errors_name_file_line_and_key() {
    let t = |body: &str| err(&format!("[profiles.dev.ssh_agent]\n{body}"));
    let k = format!("keys = [\"{FP1}\"]\n");
    for (body, parts) in [
        ("approve = \"each\"\n".to_string(), vec![":1:", "profiles.dev.ssh_agent.keys", "no value"]),
        ("keys = []\n".into(), vec![":2:", "profiles.dev.ssh_agent.keys", "an empty array"]),
        ("keys = [\"SHA256:short\"]\n".into(), vec![":2:", "ssh_agent.keys", "SHA256:"]),
        ("keys = [\"MD5:aa:bb\"]\n".into(), vec![":2:", "ssh_agent.keys"]),
        (format!("keys = [\"{FP1}\",\n \"{FP1}\"]\n"), vec![":3:", "listed twice", "first on line 2"]),
        (format!("{k}approve = \"always\"\n"), vec![":3:", "ssh_agent.approve", "\"each\", \"session\" or \"rule\""]),
        (format!("{k}approve = \"rule\"\n"), vec![":3:", "ssh_agent.approve", "without rules"]),
        (format!("{k}agent = \"/tmp/sock\"\n"), vec![":3:", "ssh_agent.agent", "unknown key"]),
        (
            format!("{k}rules = [{{ key = \"{FP2}\", namespace = \"git\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].key", "one of the keys listed"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", host = \"github.com\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0]", "either host and user"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", host = \"github.com\", user = \"git\", namespace = \"git\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0]", "either host and user"],
        ),
        (
            format!("{k}rules = [{{ host = \"github.com\", user = \"git\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].key", "no value"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", host = \"*.github.com\", user = \"git\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].host"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", host = \"[a.test]:22\", user = \"git\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].host"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", host = \"GitHub.com\", user = \"git\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].host"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", host = \"a.test\", user = \"-oProxyCommand\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].user"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", namespace = \"\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].namespace"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", namespace = \"git\" }},\n {{ key = \"{FP1}\", namespace = \"git\" }}]\n"),
            vec![":4:", "ssh_agent.rules[1]", "each rule once"],
        ),
        (
            format!("{k}rules = [{{ key = \"{FP1}\", namespace = \"git\", when = \"x\" }}]\n"),
            vec![":3:", "ssh_agent.rules[0].when", "unknown key"],
        ),
    ] {
        let msg = t(&body);
        let mut parts = parts;
        parts.push(FILE);
        assert_has(&msg, &parts);
    }
    assert_has(
        &err("[profiles.dev]\nssh_agent = 1\n"),
        &["profiles.dev.ssh_agent", "a table"],
    );
}

/// The sentences a wrong config file gets, one per kind of mistake:
/// tests/snapshots/config-errors.txt (`crate::snapshot`).
#[test]
fn config_error_sentences_snapshot() {
    let cases = [
        "runtime_dir = \"relative\"\n",
        "[profiles.dev]\ncomand = [\"/bin/true\"]\n",
        "[profiles.dev]\ncommand = \"claude\"\n",
        "[profiles.dev]\npersist = [\"/usr\", \"/usr\"]\n",
        "[profiles.dev.network]\ndeny = [\"10.0.0.0/8\", \"10.1.0.0/16\"]\n",
        "[profiles.dev.network]\nmode = \"host\"\n",
        "[profiles.dev.network]\nhosts = [\"*.com\"]\n",
        "[profiles.dev.network]\nidle_timeout_s = 0\n",
        "[profiles.dev]\nimage = \"web\"\n",
        "[profiles.dev.limits]\nmemory = \"1KiB\"\n",
        "[escalation]\nprompt_timeout_s = 0\n",
        "[images.web]\nbase = \"web\"\n",
        "[profiles.dev\n",
        "[network]\nhosts = [\"a.example\", \"A.example\"]\n",
    ];
    let mut out = String::new();
    for text in cases {
        out.push_str(&format!("{}=> {}\n\n", text, err(text)));
    }
    let c = ok("[profiles.a]\n");
    out.push_str(&format!("=> {}\n", c.profile("b").unwrap_err()));
    crate::snapshot::check("config-errors.txt", &out);
}
