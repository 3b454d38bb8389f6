#!/usr/bin/env bash
# The whole test suite: installs what is missing, creates the unprivileged
# test user, builds, prepares the default image for that user, then runs
# unit and integration tests. Integration tests run the CLI as that user.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E -- "$0" "$@"
fi

scripts/install-deps.sh
. scripts/lib.sh

user=${LAZARET_TEST_USER:-lazaret-test}
ensure_user "$user"
export LAZARET_TEST_USER=$user

# Earlier runs' leftovers in the dedicated test user's home: the harness's
# workspaces and config dirs (`it-*`) and the Domains they made. Nothing
# else of that user is touched (its images and lowers are kept).
home=$(getent passwd "$user" | cut -d: -f6)
if [ -n "$home" ] && [ -d "$home" ] && [ "$home" != / ]; then
    find "$home" -maxdepth 1 -name 'it-*' -exec rm -rf {} +
    rm -rf "$home/.local/share/lazaret/domains"
fi

# The test-only fault switch (LAZARET_FAULT) is compiled in for the tests.
use_cargo "$PWD"
use_lint_tools
# Style gate: cheap, so it runs before the build.
if ! cargo fmt --check; then
    echo "test.sh: the source is not formatted: run \`cargo fmt\` (the diff is above)" >&2
    exit 1
fi
# Lint gate: clippy over every target (tests included), with the test
# feature and without (what is dead code differs), warnings denied; the
# [lints] table in Cargo.toml applies.
for features in --features=fault-injection --no-default-features; do
    if ! cargo clippy --release --locked --all-targets "$features" -- -D warnings; then
        echo "test.sh: clippy ($features) found warnings (above): fix them (\`cargo clippy --fix\` does the mechanical ones); a local #[allow] needs a one-line reason" >&2
        exit 1
    fi
done
echo "test.sh: building (release; the first build takes a few minutes)"
cargo build --release --locked --features fault-injection

# The integration tests need the binaries where the test user can read them.
bindir=$(stage_binaries "$user")
export LAZARET_TEST_BIN=$bindir

# The previous release, built from its commit (scripts/old-build.sh; only
# the lazaret crate compiles, the dependencies are this build's) while the
# images below are built: the upgrade test (tests/it/agents/upgrade.rs)
# starts Domains with it and lists, stops and removes them with this build.
# Bump the commit when a release is made. Cached per commit in old_bin.
previous_release=6573f43afb3fa260483468f7e4ccde780f65d7bb
old_bin=${LAZARET_OLD_BIN_DIR:-/tmp/lazaret-bin-old}
echo "test.sh: building the previous release (${previous_release:0:12}) in the background"
( set -o pipefail; scripts/old-build.sh "$previous_release" "$old_bin" 2>&1 | sed -u 's/^/[previous release] /' ) &
old_build=$!

if ! run_as "$user" "$bindir/lazaret" image build --quiet --if-missing; then
    echo "test.sh: building the default image for $user failed" >&2
    exit 1
fi

# The `dev` image agents use (tests/fixtures/agents: the recipe
# docs/agents.md documents). The first build downloads its Debian packages
# and takes several minutes; an unchanged recipe is not rebuilt.
fixture=$(run_as "$user" mktemp -d)
install -d -o "$user" -m 0700 "$fixture/lazaret"
# The stand-in profile's credential directory (@CREDS@) is unused by an
# image build; an absolute path keeps the profile valid (no warning).
sed "s|@CREDS@|$fixture/creds|" tests/fixtures/agents/lazaret/config.toml |
    install -o "$user" -m 0600 /dev/stdin "$fixture/lazaret/config.toml"
echo "test.sh: building the dev image for $user (the first time takes several minutes)"
build_start=$SECONDS
( while sleep 60; do echo "test.sh: still building the dev image ($((SECONDS - build_start)) s)"; done ) &
heartbeat=$!
if ! run_as "$user" env XDG_CONFIG_HOME="$fixture" "$bindir/lazaret" image build dev; then
    kill "$heartbeat" 2>/dev/null || true
    echo "test.sh: building the dev image for $user failed" >&2
    exit 1
fi
kill "$heartbeat" 2>/dev/null || true
wait "$heartbeat" 2>/dev/null || true
echo "test.sh: the dev image is ready ($((SECONDS - build_start)) s)"
rm -rf "$fixture"

# Prepare the lower once, so tests do not all wait on the first unpack.
warm=$(run_as "$user" mktemp -d)
(cd "$warm" && run_as "$user" "$bindir/lazaret" run --quiet -- true) || { echo "test.sh: a first sandbox did not start" >&2; exit 1; }
rm -rf "$warm"

# The package, end to end: built from these binaries, linted, installed
# with apt, used by a fresh user as README.md says, then removed again
# (scripts/deb-test.sh; about a minute with the default image above).
if ! LAZARET_TEST_BIN=$bindir scripts/deb-test.sh; then
    echo "test.sh: the package check failed (above)" >&2
    exit 1
fi

# Resource limits are enforced with cgroups: give the test user a
# delegated cgroup, as systemd's Delegate= would, and run the tests in it.
delegate_cgroup "$user" || echo "test.sh: no delegated cgroup; resource-limit tests will skip or fail" >&2

echo "test.sh: waiting for the previous release's build"
if wait "$old_build"; then
    export LAZARET_TEST_OLD_BIN_DIR=$old_bin
elif [ "${LAZARET_MUST_WORK:-}" = 1 ]; then
    echo "test.sh: building the previous release failed (above); the upgrade test needs it" >&2
    exit 1
else
    echo "test.sh: building the previous release failed (above); the upgrade test will skip" >&2
fi

echo "test.sh: running tests"
cargo test --release --locked --features fault-injection -- --test-threads="${LAZARET_TEST_THREADS:-4}" "$@"
