//! Stable sentinels (docs/network.md, "Secrets"): a secret's sentinel is
//! the same at every start of its Domain, so an agent that saved the key
//! it saw (Codex's `~/.codex/auth.json`, Claude Code's approval by the
//! key's last characters) keeps working after a restart; the gate still
//! swaps it (the test host records the real value), still refuses it
//! towards another host, and `lazaret state rotate-sentinels` and `state
//! reset --all` give a new one, after which the old one is worthless.
//!
//! Test safety: no packet leaves this machine. One test host namespace
//! (`net_names::NameHost`) serves api.test (and, for the leak refusal,
//! other.test: the gate refuses before it connects) and the DNS zone.

use crate::harness::GLOBAL;
use crate::require_env;

/// Inside: `$1` is a tag for this start's request paths, `$2` an earlier
/// sentinel to send as the key (or empty).
const INSIDE: &str = r#"
echo "S=$API_KEY"
echo "swap: $(curl -sS https://api.test/now-$1 -H "x-api-key: $API_KEY" 2>&1)"
if [ -n "$2" ]; then
  echo "old: $(curl -sS https://api.test/old-$1 -H "x-api-key: $2" 2>&1)"
fi
echo "other: $(curl -sS http://other.test/o-$1 -H "x-api-key: $API_KEY" -o /dev/null -w '%{http_code}' 2>&1)"
sleep 2
"#;

/// A test host serving api.test (TLS with a test CA's certificate, and
/// plain HTTP) and the DNS zone (api.test and other.test, both its own
/// address) with `secrets::SERVER`, which records every request in its
/// marker; `real` is what its `/leak` answers. Returns the host and the
/// test CA's PEM file (for `LAZARET_TEST_UPSTREAM_CA`).
pub(crate) fn api_host(
    env: &crate::harness::Env,
    base: &std::path::Path,
    k: u32,
    real: &str,
) -> (crate::net::names::NameHost, std::path::PathBuf) {
    use lazaret::trust::TrustAnchor;
    let pki = base.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let ca = TrustAnchor::new("lazaret-test-ca", 1, "it").unwrap();
    let leaf = ca.issue_tls_server("api.test", 2).unwrap();
    env.write(
        &pki.join("api.pem"),
        &String::from_utf8(leaf.cert.to_pem().unwrap()).unwrap(),
    );
    env.write(
        &pki.join("api.key"),
        &String::from_utf8(leaf.key.private_key_to_pem_pkcs8().unwrap()).unwrap(),
    );
    let ca_file = pki.join("ca.pem");
    env.write(&ca_file, &String::from_utf8(ca.ca_cert_pem().unwrap()).unwrap());
    let mut api = crate::net::names::NameHost::new(k);
    let zone = format!("api.test={a},other.test={a}", a = api.ip);
    let marker = pki.join("marker-api");
    let args = [
        api.ip.clone(),
        marker.display().to_string(),
        zone,
        real.to_string(),
        format!("api.test={}", pki.join("api").display()),
    ];
    api.serve_with(super::secrets::SERVER, marker, &args);
    (api, ca_file)
}

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    let p = format!("{name}: ");
    out.lines().find_map(|l| l.strip_prefix(&p)).unwrap_or("")
}

#[test]
fn secrets_sentinel_is_stable_across_starts_until_rotated() {
    let env = require_env!();
    if !crate::agents::profiles::dev_image_built(env) {
        return;
    }
    let _g = GLOBAL.read();
    let base = env.dir("sentinels");
    let mut b = [0u8; 12];
    openssl::rand::rand_bytes(&mut b).unwrap();
    let real = format!("sk-it-{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>());
    let key = base.join("api-key");
    env.write(&key, &format!("{real}\n"));
    let k = (std::process::id() * 4 + 52) % 16000;
    let (api, ca_file) = api_host(env, &base, k, &real);

    let fixture = crate::agents::profiles::fixture_text();
    let recipe = fixture
        .lines()
        .skip_while(|l| *l != "[images.dev]")
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    let cfg = env.write_config(
        &base,
        &format!(
            "{recipe}\n[profiles.st]\nimage = \"dev\"\n[profiles.st.network]\ndns = [\"{a}\"]\n\
             hosts = [\"api.test\", \"other.test\"]\n\
             [profiles.st.secrets.API_KEY]\nfrom = \"file:{key}\"\nhosts = [\"api.test\"]\n",
            a = api.ip,
            key = key.display()
        ),
    );
    let ws = env.dir("sentinels-ws");
    let id = env.domain_id("st", &ws);
    let key_file = env
        .home
        .join(".local/share/lazaret/domains")
        .join(&id)
        .join("sentinel.key");
    // One start (a new generation: the Domain is stopped after it).
    let start = |tag: &str, old: &str| -> (String, String) {
        let r = env
            .lz(
                &ws,
                &["run", "-p", "st", "--", "bash", "-c", INSIDE, "inside", tag, old],
            )
            .config_home(&cfg)
            .env("LAZARET_TEST_UPSTREAM_CA", &ca_file.display().to_string())
            .run();
        assert_eq!(r.code, 0, "{tag}: {r:?}");
        assert!(!r.stdout.contains(&real) && !r.stderr.contains(&real), "{tag}: {r:?}");
        let s = r
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("S="))
            .unwrap_or_else(|| panic!("{tag}: no API_KEY inside: {r:?}"))
            .to_string();
        assert!(
            s.len() == 47 && s.starts_with("lzr-sk-") && s[7..].bytes().all(|c| c.is_ascii_alphanumeric()),
            "{tag}: {s:?}"
        );
        // Swapped at the gate: the host got the real value, the sandbox
        // its echo as the sentinel.
        let marked = api.marked();
        let req = marked
            .lines()
            .find(|l| l.starts_with(&format!("REQ 443 GET /now-{tag} ")))
            .unwrap_or_else(|| panic!("{tag}: {marked}"));
        assert!(
            req.contains(&format!("x-api-key: {real}")) && !req.contains(&s),
            "{tag}: {req}"
        );
        assert_eq!(line(&r.stdout, "swap"), format!("auth= key={s}"), "{tag}: {r:?}");
        // Towards another host: still a leak refusal, before the gate connects.
        assert_eq!(line(&r.stdout, "other"), "403", "{tag}: {r:?}");
        assert!(!marked.contains(&format!("/o-{tag}")), "{tag}: {marked}");
        assert!(
            r.stderr
                .contains("lazaret: egress to other.test:80 refused (leak attempt: the sentinel of API_KEY"),
            "{tag}: {r:?}"
        );
        let st = env.lz(&ws, &["stop", &id[..12]]).config_home(&cfg).run();
        assert!(st.code == 0 || st.stderr.contains("no running Domain"), "{st:?}");
        assert!(crate::harness::eventually(std::time::Duration::from_secs(20), || {
            crate::harness::processes_mentioning(&id).is_empty()
        }));
        (s, r.stdout)
    };
    let (first, _) = start("g1", "");
    // The key is the Domain's, private, and holds no value.
    let md = std::fs::metadata(&key_file).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777,
        0o600
    );
    assert_eq!(md.len(), 32);
    // Restart: the same sentinel, and the one an agent saved still works.
    let (second, out) = start("g2", &first);
    assert_eq!(second, first, "the sentinel changed across a restart");
    assert_eq!(line(&out, "old"), format!("auth= key={first}"), "{out}");
    let marked = api.marked();
    assert!(
        marked
            .lines()
            .any(|l| l.starts_with("REQ 443 GET /old-g2 ") && l.contains(&format!("x-api-key: {real}"))),
        "{marked}"
    );
    // Rotation: a new sentinel; the old one is no longer swapped (the host
    // gets it as it is, worthless).
    let r = env
        .lz(&ws, &["state", "rotate-sentinels", "-p", "st"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("sentinels: rotated"), "{r:?}");
    let (third, out) = start("g3", &first);
    assert_ne!(third, first, "rotate-sentinels kept the sentinel");
    assert_eq!(line(&out, "old"), format!("auth= key={first}"), "{out}");
    let marked = api.marked();
    let old = marked
        .lines()
        .find(|l| l.starts_with("REQ 443 GET /old-g3 "))
        .unwrap_or_else(|| panic!("{marked}"));
    assert!(
        old.contains(&format!("x-api-key: {first}")) && !old.contains(&real),
        "{old}"
    );
    // `state reset --all` rotates too.
    let r = env
        .lz(&ws, &["state", "reset", "-p", "st", "--all", "--yes"])
        .config_home(&cfg)
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("sentinels: rotated"), "{r:?}");
    let (fourth, _) = start("g4", "");
    assert!(
        fourth != third && fourth != first,
        "state reset --all kept the sentinel"
    );
}
