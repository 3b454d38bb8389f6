#!/usr/bin/env bash
# The original pjdfstest (the C program and its sh test files, github.com/
# pjd/pjdfstest) against the workspace view and a plain bind, per
# assertion (issue 47, acceptance 3): as scripts/posix-suite.sh does with
# the Rust port, the suite runs inside gVisor twice in one invocation on the
# same host directory, through Lazaret's view and in a raw runsc sandbox
# whose /workspace is a plain bind (the bundle Lazaret generated, workspace
# source swapped back). Prints both totals, then every assertion the bind
# passes and the view does not, and exits 1 when one of them is not a
# documented refusal (scripts/posix-refusals.txt, by `DIR/NN.t#N`).
#
#   scripts/pjdfstest-original.sh [TEST...]   TEST: rename, rename/23.t, ...
#                                             (default: every test)
#
# PJDFSTEST_SRC names a checkout of the suite (pjdfstest.c and tests/;
# default /var/tmp/lazaret-tools/pjdfstest-orig); the program is compiled
# static with the host's cc. The script fetches nothing. LAZARET_BIN names
# the lazaret binary (default: the release build). Run as root, it re-runs
# itself as LAZARET_TEST_USER (default lazaret-test).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

src=${PJDFSTEST_SRC:-/var/tmp/lazaret-tools/pjdfstest-orig}
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}

if [ "$(id -u)" -eq 0 ]; then
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        PJDFSTEST_SRC="$src" LAZARET_BIN="$lz" PJDO_KEEP="${PJDO_KEEP:-}" bash "$0" "$@"
fi
[ -r "$src/pjdfstest.c" ] && [ -d "$src/tests" ] || {
    echo "pjdfstest-original: no pjdfstest sources at $src (set PJDFSTEST_SRC to a checkout of github.com/pjd/pjdfstest)" >&2
    exit 2
}
[ -x "$lz" ] || { echo "pjdfstest-original: no lazaret at $lz (set LAZARET_BIN)" >&2; exit 2; }

work=$(mktemp -d "$HOME/lazaret-pjdo.XXXXXX")
trap '[ -n "${PJDO_KEEP:-}" ] || rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws/.pjdo"
cp -r "$src/tests" "$ws/.pjdo/tests"
# configure's findings for Linux with glibc, by hand (no autotools needed).
: > "$work/config.h"
cc -O2 -static -I"$work" -D_GNU_SOURCE \
    -DHAVE_FACCESSAT -DHAVE_FCHMODAT -DHAVE_FCHOWNAT -DHAVE_FSTATAT -DHAVE_LINKAT -DHAVE_MKDIRAT \
    -DHAVE_MKFIFOAT -DHAVE_MKNODAT -DHAVE_OPENAT -DHAVE_POSIX_FALLOCATE -DHAVE_READLINKAT \
    -DHAVE_RENAMEAT -DHAVE_SYMLINKAT -DHAVE_UTIMENSAT -DHAVE_STRUCT_STAT_ST_ATIM \
    -DHAVE_STRUCT_STAT_ST_CTIM -DHAVE_STRUCT_STAT_ST_MTIM -DHAVE_SYS_SYSMACROS_H \
    -o "$ws/.pjdo/pjdfstest" "$src/pjdfstest.c" 2>"$work/cc.log" || {
    cat "$work/cc.log" >&2
    exit 2
}
cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
# .pjdo/run.sh DIR TEST...: every test file (or those named) in
# /workspace/DIR, one line per assertion: `DIR/NN.t#N ok|FAILED|todo`.
cat > .pjdo/run.sh <<'EOF'
d=/workspace/$1; shift
t=/workspace/.pjdo/tests
mkdir -p "$d" && cd "$d" || exit 2
if [ $# -eq 0 ]; then set -- $(cd $t && ls -d */ | tr -d /); fi
for a in "$@"; do
    for f in $(cd $t && find "$a" -name '*.t' | sort); do
        sh "$t/$f" 2>/dev/null | awk -v n="$f" '
            /^ok [0-9]+/ { print n "#" $2, ($0 ~ /# (TODO|SKIP)/ ? "todo" : "ok") }
            /^not ok [0-9]+/ { print n "#" $3, ($0 ~ /# (TODO|SKIP)/ ? "todo" : "FAILED"), $0 }'
    done
done
EOF

echo "pjdfstest (original) through the view ($*)" >&2
"$lz" run --quiet -- sh /workspace/.pjdo/run.sh t-view "$@" > "$work/view.out" &
lzpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid" || true

echo "pjdfstest (original) on a plain bind" >&2
python3 - "$work/bundle/template.json" "$work/bundle/config.json" "$ws" "$@" <<'EOF'
import json, sys
src, dst, ws, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
c = json.load(open(src))
for m in c["mounts"]:
    # The workspace view (bound at the workspace's own path inside)
    # becomes a plain bind at /workspace, a mount point the image has.
    if m["source"].endswith("/gen/view-workspace"):
        m["source"] = ws
        m["destination"] = "/workspace"
c["mounts"] = [m for m in c["mounts"] if "/gen/" not in m["source"] or m["destination"] == "/workspace"]
c["process"]["args"] = ["/bin/sh", "/workspace/.pjdo/run.sh", "t-bind"] + args
c["process"]["cwd"] = "/workspace"
c["process"]["terminal"] = False
json.dump(c, open(dst, "w"))
EOF
unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
    mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
    runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "pjdo-$$"' \
    sh "$work" | tr -d '\r' > "$work/bind.out" || true

verdicts() { awk '$1 ~ /\.t#[0-9]+$/ {print $1, $2}' "$1" | sort -u; }
verdicts "$work/view.out" > "$work/view.v"
verdicts "$work/bind.out" > "$work/bind.v"
count() { awk -v w="$2" '$2 == w' "$1" | wc -l; }
printf 'side  assertions  ok  failed  todo\n'
for s in bind view; do
    printf '%-5s %10d %5d %5d %5d\n' "$s" "$(wc -l < "$work/$s.v")" "$(count "$work/$s.v" ok)" \
        "$(count "$work/$s.v" FAILED)" "$(count "$work/$s.v" todo)"
done
refusals="$here/posix-refusals.txt"
join <(awk '$2 == "ok" {print $1}' "$work/bind.v") <(awk '$2 != "ok" {print $1}' "$work/view.v") > "$work/worse"
bad=0
while read -r name; do
    why=$(awk -v n="$name" '$1 == n {$1 = ""; print substr($0, 2)}' "$refusals" 2>/dev/null || true)
    if [ -n "$why" ]; then
        echo "refused by design: $name ($why)"
    else
        echo "worse than the bind: $(grep -m1 -F "$name " "$work/view.out" | cut -c1-300)"
        bad=1
    fi
done < "$work/worse"
[ -s "$work/view.v" ] && [ -s "$work/bind.v" ] || { echo "pjdfstest-original: a side produced no results" >&2; tail -n 20 "$work/view.out" "$work/bind.out" >&2; exit 2; }
exit "$bad"
