//! `lazaret image export NAME --oci DIR | --archive FILE`: the built image
//! as an OCI layout and an OCI archive that skopeo and umoci accept, and
//! the digest printed is the one the written index names, whose manifest
//! hashes to it.
//!
//! Test safety: nothing here reaches the network (skopeo copies between
//! local layouts).

use std::process::Command;

use crate::require_env;

fn sha256_hex(path: &std::path::Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn image_export_writes_a_layout_and_an_archive_skopeo_and_umoci_read() {
    let env = require_env!();
    let ws = env.dir("imgexp-ws");
    let out = env.dir("imgexp-out");
    let layout = out.join("layout");

    // The layout.
    let r = env
        .lz(&ws, &["image", "export", "default", "--oci", layout.to_str().unwrap()])
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    let digest = r.stdout.trim().to_string();
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{r:?}");
    // The index names the manifest by that digest, under the tag NAME.
    let index = std::fs::read_to_string(layout.join("index.json")).unwrap();
    assert!(
        index.contains(&digest) && index.contains("org.opencontainers.image.ref.name") && index.contains("\"default\""),
        "{index}"
    );
    // The manifest blob hashes to its digest.
    let blob = layout.join("blobs/sha256").join(&digest["sha256:".len()..]);
    assert_eq!(
        sha256_hex(&blob),
        digest["sha256:".len()..],
        "the manifest blob's content"
    );
    // skopeo reads it and names the same digest.
    let o = Command::new("skopeo")
        .args(["inspect", &format!("oci:{}:default", layout.display())])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "skopeo inspect: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains(&format!("\"Digest\": \"{digest}\"")), "{text}");
    // umoci lists the tag and stats the image.
    let o = Command::new("umoci")
        .args(["ls", "--layout"])
        .arg(&layout)
        .output()
        .unwrap();
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).lines().any(|l| l == "default"),
        "{o:?}"
    );
    let o = Command::new("umoci")
        .args(["stat", "--image", &format!("{}:default", layout.display())])
        .output()
        .unwrap();
    assert!(o.status.success(), "umoci stat: {o:?}");

    // The archive: the same manifest.
    let archive = out.join("default.tar");
    let r = env
        .lz(
            &ws,
            &["image", "export", "default", "--archive", archive.to_str().unwrap()],
        )
        .run();
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout.trim(), digest, "the archive's manifest is the layout's");
    let o = Command::new("skopeo")
        .args(["inspect", &format!("oci-archive:{}:default", archive.display())])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "skopeo inspect archive: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains(&digest));
    // An existing archive is not overwritten; an unknown image is refused.
    let r = env
        .lz(
            &ws,
            &["image", "export", "default", "--archive", archive.to_str().unwrap()],
        )
        .run();
    assert_eq!(r.code, 2, "{r:?}");
    let r = env
        .lz(
            &ws,
            &["image", "export", "nosuch", "--oci", out.join("x").to_str().unwrap()],
        )
        .run();
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!out.join("x").join("index.json").exists());
    let _ = std::fs::remove_dir_all(&out);
}
