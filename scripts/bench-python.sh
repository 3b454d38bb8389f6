#!/usr/bin/env bash
# Python tooling through the workspace view, without network: the small
# files pip and test runners write and replace by rename (`.pyc` in
# `__pycache__`, pip's RECORD and its uninstall stash), in a tracked
# directory (the host's files, served by the view) and in a Git-ignored one
# (the Domain-side store), against the same gVisor with /workspace a plain
# bind of the host directory and through fuse-overlayfs (a C FUSE
# passthrough: the floor of any FUSE view). Rows, each timed inside the
# sandbox:
#   - venv:       `python3 -m venv .venv` (ensurepip installs Debian's pip
#                 and setuptools wheels: ~1,000 files, and compiles them);
#   - reinstall:  `pip install --no-index --no-deps --force-reinstall` of
#                 the same two wheels (pip's uninstall stashes every file by
#                 rename, then installs and compiles again);
#   - test:       `python3 -m unittest` of a generated project, 80 modules
#                 and 80 test modules of 3 tests (imports write every
#                 `.pyc`: a create and a rename each);
#   - retest:     the same after every source changed (each `.pyc` is
#                 rewritten: a rename over the existing file);
#   - compileall: `compileall -f` of the venv's site-packages (every `.pyc`
#                 replaced by rename).
# Method: one sandbox (a new Domain for the view) per side, directory kind
# and round, sides interleaved (the order rotates per round), `sync`
# before each. Prints per-row medians, view/bind and view/floor, and the
# load. With BENCH_BASELINE_BIN=DIR (another build's lazaret and
# lazaret-init) every round also runs that build: before and after on one
# machine under one load. LAZARET_VIEW_COUNTS=FILE keeps the view's
# request counts (src/view/counts.rs) of every view run in FILE.
# Needs the `dev` image for the user. Run as root, it re-runs itself as
# LAZARET_TEST_USER (default lazaret-test) with LAZARET_BIN (default: the
# release build, staged where the user can read it).
#
#   scripts/bench-python.sh [ROUNDS]        (default 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

if [ "$(id -u)" -eq 0 ]; then
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    stage=$(mktemp -d /tmp/lazaret-bench-python.XXXXXX)
    trap 'rm -rf "$stage"' EXIT
    cp "$here/bench-python.sh" "$here/lib.sh" "$stage/"
    if [ -z "${LAZARET_BIN:-}" ]; then
        LAZARET_BIN_DIR=${LAZARET_BIN_DIR:-$stage/bin} stage_binaries "$user" >/dev/null
        LAZARET_BIN=${LAZARET_BIN_DIR:-$stage/bin}/lazaret
    fi
    chmod -R a+rX "$stage"
    setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LAZARET_BIN="$LAZARET_BIN" \
        BENCH_BASELINE_BIN="${BENCH_BASELINE_BIN:-}" LAZARET_VIEW_COUNTS="${LAZARET_VIEW_COUNTS:-}" \
        bash "$stage/bench-python.sh" "$@"
    exit
fi
rounds=${1:-3}
case $rounds in '' | *[!0-9]*) echo "bench-python: ROUNDS is a number" >&2; exit 2 ;; esac
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
base=$(baseline_bin bench-python.sh)
[ -x "$lz" ] || { echo "bench-python: no lazaret at $lz (set LAZARET_BIN)" >&2; exit 2; }
[ -e "$HOME/.local/share/lazaret/images/dev/index.json" ] || {
    echo "bench-python: no dev image for $(id -un) (lazaret image build dev)" >&2
    exit 2
}

work=$(mktemp -d "$HOME/lazaret-bench-python.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws" "$work/cfg/lazaret"
printf '[profiles.dev]\nimage = "dev"\n' > "$work/cfg/lazaret/config.toml"
export XDG_CONFIG_HOME="$work/cfg"
cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
printf 'ign/\n' > .gitignore
mkdir trk && : > trk/.keep
# .bench.sh TAG DIR: the workloads in /workspace/DIR/TAG, one "ROW ms" line
# each, timed with bash's clock.
cat > .bench.sh <<'EOF'
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
tag=$1 dir=$2
d=/workspace/$dir/$tag
rm -rf "$d"; mkdir -p "$d" && cd "$d" || exit 1
python3 - <<'PY'
import os
os.makedirs("proj/app"); os.makedirs("proj/tests")
open("proj/app/__init__.py", "w").close(); open("proj/tests/__init__.py", "w").close()
for i in range(80):
    with open(f"proj/app/mod{i}.py", "w") as f:
        f.write(f"VALUE = {i}\n\ndef double(x):\n    return 2 * x + VALUE - VALUE\n\n"
                + "".join(f"def f{j}(x):\n    return x + {j}\n\n" for j in range(20)))
    with open(f"proj/tests/test_mod{i}.py", "w") as f:
        f.write(f"import unittest\nfrom app import mod{i}\n\nclass T(unittest.TestCase):\n"
                + "".join(f"    def test_{j}(self):\n        self.assertEqual(mod{i}.double({j}), {2 * j})\n" for j in range(3)))
PY
wheels=$(ls /usr/share/python-wheels/pip-*.whl /usr/share/python-wheels/setuptools-*.whl)
row() { local name=$1 t0 t1; shift; t0=$(ms); "$@" >/tmp/out 2>&1 || { echo "FAIL $name"; tail -5 /tmp/out; }; t1=$(ms); echo "$name $((t1 - t0))"; }
row venv python3 -m venv .venv
# shellcheck disable=SC2086 # one argument per wheel
row reinstall .venv/bin/python -m pip install -q --no-index --no-deps --force-reinstall --disable-pip-version-check $wheels
cd proj
row test python3 -m unittest discover -q -s tests -t .
find . -name '*.py' -exec touch -d '+1 minute' {} +
row retest python3 -m unittest discover -q -s tests -t .
cd ..
row compileall .venv/bin/python -m compileall -q -f .venv/lib
cd / && rm -rf "$d"
EOF
git add -A && git -c user.name=bench -c user.email=bench@localhost commit -q -m bench

fresh() {
    local bin=$1 err
    err=$("$bin" rm --yes -p dev 2>&1 >/dev/null) && return 0
    case $err in *"has no state to remove"*) return 0 ;; esac
    echo "bench-python: could not remove the Domain: $err" >&2
    exit 1
}
# run_lz BIN TAG DIR: the workloads through the view of a new Domain.
run_lz() {
    fresh "$1"; sync
    "$1" run --quiet --profile dev -- bash /workspace/.bench.sh "$2" "$3"
}

echo "bench-python: warm-up through the view" >&2
run_lz "$lz" warm ign > /dev/null &
lzpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid"

# run_raw TAG DIR [floor]: the workloads on a plain bind, or (floor) through
# fuse-overlayfs over the host workspace with its upper directory on the
# same disk, in a raw runsc sandbox (scripts/lib.sh bind_bundle, run_bind).
run_raw() {
    local tag=$1 dir=$2 floor=${3:-}
    bind_bundle "$work/bundle/template.json" "$work/bundle" "$ws" bash /workspace/.bench.sh "$tag" "$dir"
    sync
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core || exit 1
        if [ "$3" = floor ]; then
            rm -rf "$1/fup" "$1/fwk"
            mkdir -p "$1/floor" "$1/fup" "$1/fwk" &&
                fuse-overlayfs -o "lowerdir=$4,upperdir=$1/fup,workdir=$1/fwk" "$1/floor" || exit 1
            sed "s|\"source\": *\"$4\"|\"source\": \"$1/floor\"|" "$1/bundle/config.json" > "$1/bundle/floor.json" &&
                mv "$1/bundle/floor.json" "$1/bundle/config.json"
        fi
        runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "bench-python-$2"
        rc=$?
        [ "$3" != floor ] || { umount "$1/floor" && rm -rf "$1/fup" "$1/fwk"; } || rc=1
        exit $rc' \
        sh "$work" "$tag-$dir" "$floor" "$ws" | tr -d '\r'
}

floor=false
command -v fuse-overlayfs >/dev/null && floor=true
sides="view bind"
$floor && sides="$sides floor"
[ -z "$base" ] || sides="$sides base"
: > "$work/out"
echo "bench-python: $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$rounds"); do
    # Rotate the order of the sides each round.
    order=$(echo $sides | tr ' ' '\n' | awk -v r="$r" '{a[NR]=$0} END {for (i = 0; i < NR; i++) print a[(i + r) % NR + 1]}')
    for dir in trk ign; do
        for s in $order; do
            echo "bench-python: round $r, $dir, $s" >&2
            case $s in
                view) run_lz "$lz" "r$r" "$dir" ;;
                base) run_lz "$base/lazaret" "r$r" "$dir" ;;
                bind) run_raw "r$r" "$dir" ;;
                floor) run_raw "r$r" "$dir" floor ;;
            esac | awk -v s="$s" -v d="$dir" '{print s, d, $0}' >> "$work/out"
        done
    done
done
if grep ' FAIL ' "$work/out" >&2; then
    echo "bench-python: a workload failed" >&2
    exit 1
fi

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
med() { awk -v s="$1" -v d="$2" -v w="$3" '$1 == s && $2 == d && $3 == w {print $4}' "$work/out" | median; }
each() { awk -v s="$1" -v d="$2" -v w="$3" '$1 == s && $2 == d && $3 == w {printf " %s", $4}' "$work/out"; }
echo "rounds: $rounds; load average $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
printf '%-22s %8s %8s %8s %8s %10s %11s\n' row view bind floor base view/bind view/floor
for dir in trk ign; do
    for w in venv reinstall test retest compileall total; do
        if [ "$w" = total ]; then
            sum() { local x t=0; for x in venv reinstall test retest compileall; do t="$t $(med "$1" "$dir" "$x")"; done; echo $t | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; print s}'; }
            v=$(sum view); b=$(sum bind); f=$(sum floor); o=$(sum base)
        else
            v=$(med view "$dir" "$w"); b=$(med bind "$dir" "$w"); f=$(med floor "$dir" "$w"); o=$(med base "$dir" "$w")
        fi
        $floor || f=-
        [ -n "$base" ] || o=-
        awk -v n="$w ($dir)" -v v="$v" -v b="$b" -v f="$f" -v o="$o" 'BEGIN {
            printf "%-22s %8s %8s %8s %8s %9.2fx %10s\n", n, v, b, f, o, (b > 0 ? v / b : 0), (f > 0 ? sprintf("%.2fx", v / f) : "-") }'
        bench_row "python: $w ($dir)" "$v" "$f" ms "<=1.2x"
    done
done
echo "every round (ms):"
for dir in trk ign; do
    for w in venv reinstall test retest compileall; do
        line="  $w ($dir):"
        for s in $sides; do line="$line $s$(each "$s" "$dir" "$w");"; done
        echo "$line"
    done
done
