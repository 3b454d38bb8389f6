#!/usr/bin/env bash
# old-build.sh COMMIT DEST: builds lazaret, lazaret-init and
# lazaret-escalate of an earlier COMMIT of this repository (the previous
# release: the upgrade test's other build, tests/it/agents/upgrade.rs) and
# copies them to DEST, a directory it creates (mode 0755, the binaries
# 0755: the test user runs them from there).
#
# The source is `git archive COMMIT`, unpacked in
# $CARGO_TARGET_DIR/old-builds/SHA/src (in ${TMPDIR:-/var/tmp}/lazaret-
# old-builds/SHA/src when the target dir is below a .cargo/config, as the
# default target/ is: see below), and built with `cargo build --release
# --locked` into the same CARGO_TARGET_DIR as this checkout's build: the dependencies of an unchanged Cargo.lock are reused, only the
# lazaret crate is compiled again. The build is told its commit
# (LAZARET_COMMIT), so `lazaret version` and `ps` name it. Cached per
# commit: DEST holding that commit's binaries (DEST/commit names it) is
# left as it is.
#
# Needs the commit in this clone: a shallow clone that lacks it fails,
# naming `git fetch --unshallow`.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: scripts/old-build.sh COMMIT DEST" >&2
    exit 2
fi
want=$1 dest=$2
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/lib.sh

# Under sudo the checkout usually belongs to another user: git refuses
# such a repository unless told it is safe.
g() { git -c safe.directory="$repo" -C "$repo" "$@"; }

if ! g rev-parse --git-dir >/dev/null 2>&1; then
    echo "old-build.sh: $repo is not a git checkout: the previous release ($want) is built from the repository's history; use a \`git clone\` of the repository" >&2
    exit 1
fi
if ! sha=$(g rev-parse --verify --quiet "$want^{commit}"); then
    if [ "$(g rev-parse --is-shallow-repository)" = true ]; then
        echo "old-build.sh: commit $want (the previous release) is not in this shallow clone: run \`git fetch --unshallow\` in $repo (or clone without --depth), then run this again" >&2
    else
        echo "old-build.sh: commit $want (the previous release) is not in $repo: run \`git fetch origin\` (it must be an ancestor of a fetched branch), then run this again" >&2
    fi
    exit 1
fi

bins=(lazaret lazaret-init lazaret-escalate)
cached() {
    [ "$(cat "$dest/commit" 2>/dev/null)" = "$sha" ] || return 1
    local b
    for b in "${bins[@]}"; do [ -x "$dest/$b" ] || return 1; done
}
if cached; then
    echo "old-build.sh: $dest already holds the build of ${sha:0:12}"
    exit 0
fi

use_cargo "$repo"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
case $CARGO_TARGET_DIR in /*) ;; *) CARGO_TARGET_DIR=$repo/$CARGO_TARGET_DIR ;; esac
work=$CARGO_TARGET_DIR/old-builds/$sha
# cargo reads .cargo/config.toml from every directory above the one it
# runs in and joins their rustflags: below this checkout (a target dir in
# it, as cargo's default) the old build would get its flags twice, and so
# rebuild every dependency. The source goes elsewhere then.
d=$CARGO_TARGET_DIR
while [ "$d" != / ] && [ -n "$d" ]; do
    # (CARGO_HOME's config applies to every build alike.)
    if [ "$d/.cargo" != "${CARGO_HOME:-$HOME/.cargo}" ] && { [ -e "$d/.cargo/config.toml" ] || [ -e "$d/.cargo/config" ]; }; then
        work=${TMPDIR:-/var/tmp}/lazaret-old-builds/$sha
        break
    fi
    d=$(dirname "$d")
done
rm -rf "$work/src"
mkdir -p "$work/src"
g archive --format=tar "$sha" | tar -x -C "$work/src"

# cargo links every build's binaries to the same release directory: the
# checkout's are kept aside (hard links) and put back afterwards, so that
# this build never stands in for the checkout's (scripts/lib.sh's
# stage_binaries copies from there).
out=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release
keep=$CARGO_TARGET_DIR/old-builds/checkout-bins
rm -rf "$keep"
mkdir -p "$keep"
for f in "${bins[@]}" "${bins[@]/%/.d}"; do
    if [ -e "$out/$f" ]; then ln "$out/$f" "$keep/$f"; fi
done
restore() {
    local f
    for f in "$keep"/*; do
        [ -e "$f" ] && ln -f "$f" "$out/${f##*/}"
    done
    rm -rf "$keep"
}
trap restore EXIT

echo "old-build.sh: building ${sha:0:12} (only the lazaret crate compiles again when Cargo.lock is unchanged)"
start=$SECONDS
touch "$work/started"
# Its own checkout's .cargo/config.toml applies (cargo reads it from the
# working directory), as in a build of that commit.
(cd "$work/src" && LAZARET_COMMIT=${sha:0:12} cargo build --release --locked \
    --bin lazaret --bin lazaret-init --bin lazaret-escalate)
echo "old-build.sh: built ${sha:0:12} in $((SECONDS - start)) s"
# cargo names a path package's artifacts and fingerprints by a hash of its
# place in its workspace, the same for this source as for the checkout's:
# this build's lazaret units replaced the checkout's, and the checkout's
# next build of the same kind (`cargo build --release`, no features) would
# take them as its own and fresh, and put this commit's binaries in the
# release directory. They are removed: that build compiles the lazaret
# crate again.
find "$out/.fingerprint" -maxdepth 1 -name 'lazaret-*' -newer "$work/started" -exec rm -rf {} +
find "$out/deps" -maxdepth 1 \( -name 'lazaret[-_]*' -o -name 'liblazaret[-_]*' \) -newer "$work/started" -delete

tmp=$(mktemp -d "${dest%/}.new.XXXXXX")
for b in "${bins[@]}"; do
    install -m 0755 "$out/$b" "$tmp/$b"
done
printf '%s\n' "$sha" > "$tmp/commit"
chmod 0755 "$tmp"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "old-build.sh: the build of ${sha:0:12} is in $dest"
