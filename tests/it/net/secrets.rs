//! Issue 31, "keys that never enter the sandbox": what this build wires.
//! Acceptance 8 (bad sources and hosts: one sentence, exit 2, nothing
//! started), the refusal of a profile with secrets until the gate swaps
//! them, and `net show` listing secrets without their values.

use crate::harness::{processes_mentioning, GLOBAL};
use crate::require_env;

const REAL: &str = "sk-it-REALVALUE-5f3a9c1e";

#[test]
fn secrets_bad_sources_and_hosts_refuse_the_start_with_one_sentence() {
    let env = require_env!();
    let _g = GLOBAL.read();
    let (base, ws) = env.base_and_workspace("secrets-bad");
    let empty = base.join("empty-key");
    env.write(&empty, "  \n");
    let good = base.join("good-key");
    env.write(&good, &format!("{REAL}\n"));
    let profile = |name: &str, from: &str, host: &str| {
        format!(
            "[profiles.{name}.network]\nhosts = [\"api.test\", \"other.test\"]\n\
             [profiles.{name}.secrets.API_KEY]\nfrom = \"{from}\"\nhosts = [\"{host}\"]\n"
        )
    };
    let text = [
        profile("unset", "env:LZ_IT_SECRET_UNSET", "api.test"),
        profile("emptyfile", &format!("file:{}", empty.display()), "api.test"),
        profile(
            "missingfile",
            &format!("file:{}", base.join("nope").display()),
            "api.test",
        ),
        profile("failcmd", "cmd:false", "api.test"),
        profile("silentcmd", "cmd:true", "api.test"),
        profile("good", &format!("file:{}", good.display()), "api.test"),
        profile("goodenv", "env:LZ_IT_SECRET", "api.test"),
    ]
    .concat();
    let cfg = env.write_config(&base, &text);
    // A broken profile warns in every other run: it gets its own file.
    let badcfg = env.write_config(&base.join("bad"), &profile("badhost", "env:LZ_IT_SECRET", "evil.test"));
    let cases: [(&str, &[&str]); 8] = [
        ("unset", &["secret API_KEY", "env:LZ_IT_SECRET_UNSET", "not set"]),
        ("emptyfile", &["secret API_KEY", "file:", "is empty"]),
        ("missingfile", &["secret API_KEY", "file:", "cannot be read"]),
        ("failcmd", &["secret API_KEY", "cmd:false", "exit status 1"]),
        ("silentcmd", &["secret API_KEY", "cmd:true", "is empty"]),
        (
            "badhost",
            &[
                "profiles.badhost.secrets.API_KEY.hosts",
                "\"evil.test\", which is not in network.hosts",
            ],
        ),
        ("good", &["binds secrets (API_KEY)", "cannot swap them in yet"]),
        ("goodenv", &["binds secrets (API_KEY)", "cannot swap them in yet"]),
    ];
    for (p, want) in cases {
        let r = env
            .lz(&ws, &["run", "-p", p, "--", "true"])
            .config_home(if p == "badhost" { &badcfg } else { &cfg })
            .env("LZ_IT_SECRET", REAL)
            .run();
        assert_eq!(r.code, 2, "{p}: {r:?}");
        for w in want {
            assert!(r.stderr.contains(w), "{p}: expected {w:?}: {r:?}");
        }
        // One sentence, never the value.
        assert_eq!(r.stderr.trim_end().lines().count(), 1, "{p}: {r:?}");
        assert!(!r.stderr.contains(REAL) && !r.stdout.contains(REAL), "{p}: {r:?}");
        // Nothing was started.
        let id = env.domain_id(p, &ws);
        assert!(!env.runtime_root().join(&id).join("hc.sock").exists(), "{p}");
        assert!(processes_mentioning(&id).is_empty(), "{p}");
    }
}

#[test]
fn secrets_net_show_and_doctor_name_them_without_values() {
    let env = require_env!();
    let _g = GLOBAL.read();
    let (base, ws) = env.base_and_workspace("secrets-show");
    let key = base.join("key");
    env.write(&key, REAL);
    let cfg = env.write_config(
        &base,
        &format!(
            "[profiles.s.network]\nhosts = [\"api.test\"]\n\
             [profiles.s.secrets.ANTHROPIC_API_KEY]\nfrom = \"file:{}\"\nhosts = [\"api.test\"]\n\
             [profiles.s.secrets.GH_TOKEN]\nfrom = \"cmd:echo {REAL}-gh\"\nhosts = [\"api.test\"]\nttl_s = 60\n",
            key.display()
        ),
    );
    let r = env.lz(&ws, &["net", "show", "-p", "s"]).config_home(&cfg).run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("ANTHROPIC_API_KEY from file -> api.test"), "{r:?}");
    assert!(r.stdout.contains("GH_TOKEN from cmd -> api.test"), "{r:?}");
    assert!(
        !r.stdout.contains(REAL) && !r.stdout.contains(&key.display().to_string()),
        "{r:?}"
    );
    let r = env
        .lz(&ws, &["net", "show", "-p", "s", "--json"])
        .config_home(&cfg)
        .run();
    assert!(r.stdout.contains("\"secrets\"") && !r.stdout.contains(REAL), "{r:?}");
    let r = env.lz(&ws, &["doctor"]).config_home(&cfg).run();
    assert!(!r.stdout.contains(REAL) && !r.stderr.contains(REAL), "{r:?}");
    assert!(r.stdout.contains("2 secret source(s) resolve"), "{r:?}");
}
