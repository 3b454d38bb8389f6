//! What this build is: its version, the commit it was built from (the
//! `LAZARET_COMMIT` environment variable at build time, which
//! scripts/package-deb.sh and scripts/test.sh set from Git; absent in a
//! plain `cargo build`) and the client protocol it speaks. Named in
//! `lazaret version`, in the basic answer every coordinator gives
//! (`wire::basic`) and in the refusal a client of another build gets.

use crate::wire::client;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit this binary was built from, if the build was told.
pub fn commit() -> Option<&'static str> {
    option_env!("LAZARET_COMMIT").filter(|c| !c.is_empty())
}

/// `0.1.0 (commit abc123def456)`, or `0.1.0` when the commit is unknown.
pub fn describe() -> String {
    match commit() {
        Some(c) => format!("{VERSION} (commit {c})"),
        None => VERSION.to_string(),
    }
}

/// The protocol version this process speaks (`wire::client`).
pub fn protocol() -> u32 {
    client::protocol_version()
}

/// Where a packaged `lazaret` (in `/usr/bin`) finds its sandbox-side
/// binaries: `/usr/lib/lazaret/` (scripts/package-deb.sh). A `lazaret`
/// anywhere else finds them beside itself only, never those of an
/// installed package (another build's `lazaret-init` would not speak its
/// protocol).
pub const PACKAGED_HELPERS: &str = "/usr/lib/lazaret";

/// The path of the sandbox-side binary `name` (`lazaret-init`,
/// `lazaret-escalate`) for the `lazaret` at `exe`: beside it, or for
/// `/usr/bin/lazaret` in [`PACKAGED_HELPERS`]. The first that is a file;
/// else the one beside `exe` (for the error that names it).
pub fn helper_binary(exe: &std::path::Path, name: &str) -> std::path::PathBuf {
    let beside = exe.with_file_name(name);
    if beside.is_file() || exe.parent() != Some(std::path::Path::new("/usr/bin")) {
        return beside;
    }
    let packaged = std::path::Path::new(PACKAGED_HELPERS).join(name);
    if packaged.is_file() {
        packaged
    } else {
        beside
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn helpers_are_beside_a_dev_build_and_in_usr_lib_for_the_package() {
        let dir = std::env::temp_dir().join(format!("lz-helpers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("lazaret-init"), b"").unwrap();
        assert_eq!(
            helper_binary(&dir.join("lazaret"), "lazaret-init"),
            dir.join("lazaret-init")
        );
        // Missing beside a dev build: named beside it, never looked up elsewhere.
        assert_eq!(
            helper_binary(&dir.join("lazaret"), "lazaret-escalate"),
            dir.join("lazaret-escalate")
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let usr = helper_binary(Path::new("/usr/bin/lazaret"), "lazaret-init");
        assert!(
            usr == Path::new("/usr/bin/lazaret-init") || usr == Path::new("/usr/lib/lazaret/lazaret-init"),
            "{usr:?}"
        );
    }

    #[test]
    fn describe_names_the_version() {
        assert!(describe().starts_with(VERSION));
        assert_eq!(commit().is_some(), describe().contains("(commit "));
    }
}
