//! Unit tests of `domain.json` and of Domain IDs and times.

use super::*;

#[test]
fn meta_round_trips() {
    let d = std::env::temp_dir().join(format!("lazaret-meta-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let m = DomainMeta {
        domain_id: "0123456789abcdef0123".into(),
        profile: "dev".into(),
        workspace: "/home/u/p \"q\"".into(),
        persist: vec!["/usr".into(), "/etc".into()],
        artifact: "abc".into(),
        digest: "sha256:x".into(),
        last_used: 1_700_000_000,
    };
    write_meta(&d, &m).unwrap();
    assert_eq!(read_meta(&d), Some(m));
    std::fs::remove_file(d.join(META_FILE)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", d.join(META_FILE)).unwrap();
    assert_eq!(read_meta(&d), None, "never follows a symlink");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn ids_and_times() {
    assert!(is_domain_id("0123456789abcdef0123"));
    assert!(!is_domain_id("../../etc/passwd00000"));
    assert!(!is_domain_id("0123456789ABCDEF0123"));
    assert_eq!(format_time(0), "1970-01-01 00:00");
    assert_eq!(format_time(1_700_000_000), "2023-11-14 22:13");
}
