#!/usr/bin/env bash
# Real workloads on the workspace view, against the same workloads under
# the same gVisor with a plain bind of the workspace, under the same
# gVisor with fuse-overlayfs over it (a C FUSE passthrough: the floor of
# any FUSE view), and on the host, in one invocation. Rows:
#   - the first `git status` in a new Domain on a repository of 20,000
#     tracked files (200 directories, 300 commits) cloned on the host just
#     before (Git inside meets an index the host's Git wrote), the second
#     `git status` in that Domain, and the host's `git status` right after
#     (timed on the host: Git inside may have rewritten the index with what
#     it saw); the host's own first and second `git status` on a fresh
#     clone are the host column. The repository is cloned again on the
#     host (untimed) before every run. The same first status again on a
#     clone the host's Git has used (its status a second after the clone:
#     the index is no longer "racily clean"), as a developer's repository
#     is, against the host's own status there;
#   - `git clone` of a local repository (5,000 files, 300 commits);
#   - `npm ci --offline` of tests/fixtures/bench/npm from a copied npm cache
#     into node_modules/;
#   - `python3 -m venv .venv`, then `pip install --no-index --find-links`
#     of flask, requests, rich and pytest (20 wheels) into it;
#   - `pytest` of a generated project (80 modules, 3 tests each);
#   - `cargo build --offline` of tests/fixtures/bench/crate with its
#     dependencies vendored, into target/ (made by cargo: a rename into an ignored name);
#   - `tar x` of 10,000 small files into a tracked and an ignored dir;
#   - `rg` over the run's tree (.gitignore respected).
# node_modules/, .venv/, target/, __pycache__/, .pytest_cache/ and ign/
# are Git-ignored in the workspace, as real projects ignore them.
#
# Columns: view (`lazaret run`, a new Domain per timed run, profile with
# `network.mode = "none"`), bind (raw runsc with the bundle Lazaret
# generated, its workspace swapped to a plain bind), floor (the same with
# fuse-overlayfs over the workspace, writes to an upper directory on the
# same disk), host (the host's Git for the first rows; for the others the
# bench image's own programs run natively, in a user namespace chroot of
# its root file system with the workspace bound, so every column runs the
# same npm, pip, cargo and Git). Each workload runs in a directory of its
# own, made on the host (untimed) before the run and removed after; each
# is timed inside with bash's clock, so sandbox start-up is not counted.
# Columns are interleaved (the order reverses every round); medians of
# ROUNDS rounds (default 5; 1 for a quick look), with the load.
#
# Nothing leaves the machine: the inputs come from scripts/install-deps.sh --bench
# (/var/tmp/lazaret-tools/bench: the npm cache, the wheels and the vendored
# crates), every sandbox has no network, and the host column runs in a
# network namespace of its own. The bench image (the built-in `dev` plus
# cargo and ripgrep) is built once with `lazaret image build` if it is
# missing, before anything is measured; that step is an installation and
# uses the Debian mirror, as every image build does.
#
# With BENCH_BASELINE_BIN=DIR (another build's lazaret, lazaret-init and
# lazaret-escalate, readable by the test user) every round also runs the
# view through that build, and each row shows it and this build against
# it: a before/after on one machine under the same load.
#
# BENCH_ROWS=git runs the git status rows only.
#
#   [BENCH_BASELINE_BIN=DIR] [BENCH_ROWS=git] [LAZARET_TEST_USER=U] scripts/bench-workloads.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}
only=${BENCH_ROWS:-all}
case $only in all | git) ;; *) echo "bench-workloads.sh: BENCH_ROWS is all or git, not $only" >&2; exit 2 ;; esac
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

started=$(date +%s)
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
base=$(baseline_bin bench-workloads.sh)
fixtures=$here/fixtures-bench
[ -d "$fixtures" ] || fixtures=$here/../tests/fixtures/bench
tools=${LAZARET_TOOLS:-/var/tmp/lazaret-tools}/bench
for d in npm-cache wheels crates; do
    [ -d "$tools/$d" ] || { echo "bench-workloads: no $tools/$d: run scripts/install-deps.sh --bench first" >&2; exit 2; }
done
work=$(mktemp -d "$HOME/lazaret-bench-wl.XXXXXX")
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
# Removes a tree whatever uid the sandbox gave its files.
purge() { unshare --map-auto --map-root-user -- rm -rf "$@"; }
cleanup() {
    local w
    for w in "$work/ws" "$work/g1"; do
        "$lz" rm -p bench -w "$w" --yes >/dev/null 2>&1 || true
    done
    purge "$work"
}
trap cleanup EXIT

# The bench profile and image, in a configuration of the bench's own.
export XDG_CONFIG_HOME=$work/config
mkdir -p "$XDG_CONFIG_HOME/lazaret"
cat > "$XDG_CONFIG_HOME/lazaret/config.toml" <<'EOF'
[images.bench]
base = "dev"
packages = ["cargo", "ripgrep"]

[profiles.bench]
image = "bench"
[profiles.bench.network]
mode = "none"
EOF
"$lz" image build --quiet --if-missing dev
"$lz" image build --quiet --if-missing bench

echo "generating the repositories" >&2
# gen_repo DIR FILES DIRS COMMITS: a bare repository, one commit adding
# FILES files in DIRS directories (one in ten holds "needle"), then
# COMMITS-1 commits changing 10 files each.
gen_repo() {
    git init -q --bare -b main "$1"
    python3 - "$2" "$3" "$4" <<'PY' | git -C "$1" fast-import --quiet
import sys
files, dirs, commits = map(int, sys.argv[1:])
per = files // dirs
out = sys.stdout.buffer
def data(b):
    out.write(b"data %d\n" % len(b) + b + b"\n")
for c in range(commits):
    out.write(b"commit refs/heads/main\ncommitter bench <bench@example.test> %d +0000\n" % (1700000000 + 60 * c))
    data(b"commit %d" % c)
    changed = range(files) if c == 0 else [(c * 7919 + k * 104729) % files for k in range(10)]
    for i in changed:
        d, f = divmod(i, per)
        out.write(b"M 100644 inline src/d%d/f%d.txt\n" % (d, f))
        body = b"file %d %d, version %d\n" % (d, f, c) * 4
        data(body + (b"needle\n" if i % 10 == 0 else b""))
    out.write(b"\n")
PY
}
gen_repo "$work/origin.git" 20000 200 300

# The workspace of the other rows, a Git repository whose fixtures (fx/,
# not ignored) every column reads: the clone source, the npm cache, the
# wheels, the tarball; and proto/, copied to r/TAG before each run.
ws=$work/ws
mkdir -p "$ws/fx" "$work/proto"
git -C "$ws" init -q -b main
printf '%s\n' node_modules/ target/ .venv/ __pycache__/ .pytest_cache/ ign/ > "$ws/.gitignore"
git -C "$ws" add .gitignore
git -C "$ws" -c user.name=bench -c user.email=bench@example.test commit -q -m bench
gen_repo "$ws/fx/small.git" 5000 50 300
cp -r "$tools/npm-cache" "$ws/fx/npm-cache"
cp -r "$tools/wheels" "$ws/fx/wheels"
mkdir -p "$work/files"
python3 - "$work/files" <<'PY'
import os, sys
for d in range(100):
    os.mkdir(os.path.join(sys.argv[1], "d%d" % d))
    for f in range(100):
        with open(os.path.join(sys.argv[1], "d%d" % d, "f%d.txt" % f), "w") as fh:
            fh.write("small file %d %d\n" % (d, f) + ("needle\n" if f % 10 == 0 else ""))
PY
# Owned by root, as a sandbox's root unpacks them (tar as root restores owners).
tar --owner=0 --group=0 --numeric-owner -cf "$ws/fx/files.tar" -C "$work/files" . && rm -rf "$work/files"
p=$work/proto
mkdir -p "$p/npm" "$p/py/pkg" "$p/py/tests" "$p/crate/.cargo"
cp "$fixtures/npm/package.json" "$fixtures/npm/package-lock.json" "$p/npm/"
cp -r "$fixtures/crate/Cargo.toml" "$fixtures/crate/Cargo.lock" "$fixtures/crate/src" "$p/crate/"
cp "$fixtures/crate/cargo-config.toml" "$p/crate/.cargo/config.toml"
cp -r "$tools/crates" "$p/crate/vendor"
rm -f "$p/crate/vendor/.lazaret-fixture"
python3 - "$p/py" <<'PY'
import os, sys
root = sys.argv[1]
open(os.path.join(root, "pkg", "__init__.py"), "w").close()
open(os.path.join(root, "pytest.ini"), "w").write("[pytest]\ntestpaths = tests\n")
for m in range(80):
    with open(os.path.join(root, "pkg", "mod%02d.py" % m), "w") as f:
        f.write("def add(a, b):\n    return a + b + %d\n\n\ndef words(s):\n    return [w for w in s.split() if w]\n\n\nCONST = %d\n" % (m, m))
    with open(os.path.join(root, "tests", "test_mod%02d.py" % m), "w") as f:
        f.write("from pkg import mod%02d as m\n\n\ndef test_add():\n    assert m.add(1, 2) == 3 + %d\n\n\n"
                "def test_words():\n    assert m.words(' a b  c ') == ['a', 'b', 'c']\n\n\n"
                "def test_const():\n    assert m.CONST == %d\n" % (m, m, m))
PY
npm_pkgs=$(python3 -c 'import json, sys; print(sum(1 for k in json.load(open(sys.argv[1]))["packages"] if k))' "$p/npm/package-lock.json")
wheels=$(ls "$ws/fx/wheels" | grep -c '\.whl$')
crates=$(ls "$p/crate/vendor" | wc -l)

# .bench.sh TAG: workloads 2-7 in r/TAG, each timed with bash's clock.
cat > "$ws/.bench.sh" <<'EOF'
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 npm_config_update_notifier=false
ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
t() {
    local name=$1 t0 t1; shift
    t0=$(ms)
    "$@" > /tmp/bench-out 2>&1 || { echo "bench-workloads: $name failed: $*" >&2; tail -20 /tmp/bench-out >&2; exit 1; }
    t1=$(ms)
    echo "$name $((t1 - t0))"
}
top=$PWD
cd "r/$1" || exit 1
# Untimed: the first unpack in a new sandbox pays gVisor a one-time cost,
# which would fall on whichever row came first; npm writes to its cache.
mkdir -p /tmp/warm && tar -xf "$top/fx/files.tar" -C /tmp/warm ./d1 ./d2 ./d3 ./d4 ./d5 && rm -rf /tmp/warm
rm -rf /tmp/npm-cache && cp -r "$top/fx/npm-cache" /tmp/npm-cache
t clone git clone -q "file://$top/fx/small.git" clone
cd npm && t npm npm ci --offline --cache /tmp/npm-cache --ignore-scripts --no-audit --no-fund --loglevel=error && cd .. || exit 1
cd py || exit 1
t venv python3 -m venv .venv
t pip .venv/bin/pip install -q --no-index --find-links "$top/fx/wheels" flask requests rich pytest
t pytest .venv/bin/python -m pytest -q
cd ../crate && t cargo cargo build --offline -q && cd .. || exit 1
mkdir trk ign
t tar tar -xf "$top/fx/files.tar" -C trk
t tar-ign tar -xf "$top/fx/files.tar" -C ign
t0=$(ms); n=$(rg -l needle . | wc -l); t1=$(ms); echo "rg $((t1 - t0))"
[ "$n" -gt 1000 ] || { echo "bench-workloads: rg found needle in $n files only" >&2; exit 1; }
EOF
# The first rows: two `git status` in the sandbox, timed there.
status_script='export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
t0=$(ms); git status >/dev/null || exit 1; t1=$(ms); echo "st1 $((t1 - t0))"
t0=$(ms); git status >/dev/null || exit 1; t1=$(ms); echo "st2 $((t1 - t0))"'

ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# fresh LZ WS: a new Domain for the next run (the previous one removed,
# untimed), as scripts/bench-git.sh does.
fresh() {
    local err
    err=$("$1" rm -p bench -w "$2" --yes 2>&1 >/dev/null) && return 0
    case $err in *"has no state to remove"*) return 0 ;; esac
    echo "bench-workloads: could not remove the Domain: $err" >&2
    exit 1
}
# in_view LZ WS CMD...: CMD in a new Domain of WS.
in_view() {
    local l=$1 w=$2; shift 2
    fresh "$l" "$w"; sync
    (cd "$w" && "$l" run -p bench -w "$w" --quiet -- "$@")
}

echo "warm-up run inside lazaret" >&2
in_view "$lz" "$ws" sleep 8 &
lzpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid"
[ -z "$base" ] || { echo "warm-up run inside the baseline build" >&2; in_view "$base/lazaret" "$ws" true; }
rootfs=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["root"]["path"])' "$work/bundle/template.json")

# in_raw bind|floor WS CMD...: CMD in raw runsc with the bundle Lazaret
# generated, /workspace a plain bind of WS (bind) or fuse-overlayfs over
# it with an upper directory on the host disk (floor), /tmp a fresh host
# directory (Lazaret's /tmp is on the host disk too).
in_raw() {
    local mode=$1 w=$2; shift 2
    purge "$work/rtmp"; mkdir -p "$work/rtmp"
    local src=$w
    [ "$mode" = bind ] || src=$work/floor
    python3 - "$work/bundle/template.json" "$work/bundle/config.json" "$src" "$work/rtmp" "$@" <<'PY'
import json, os, sys
tpl, dst, ws, tmp, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
c = json.load(open(tpl))
mounts = []
for m in c["mounts"]:
    if m.get("source", "").endswith("/gen/view-workspace"):
        m["source"], m["destination"] = ws, "/workspace"
    elif m["destination"] == "/tmp":
        m["source"] = tmp
    elif "/gen/" in m.get("source", "") or (m.get("type") == "bind" and not os.path.exists(m["source"])):
        # The generation's files exist only while that Domain runs: /usr,
        # /etc, ... come from the image root file system instead.
        continue
    mounts.append(m)
c["mounts"] = mounts
c["process"]["args"] = args
c["process"]["cwd"] = "/workspace"
c["process"]["terminal"] = False
json.dump(c, open(dst, "w"))
PY
    sync
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core || exit 1
        if [ "$3" = floor ]; then
            rm -rf "$1/fup" "$1/fwk"
            mkdir -p "$1/floor" "$1/fup" "$1/fwk" &&
                fuse-overlayfs -o "lowerdir=$4,upperdir=$1/fup,workdir=$1/fwk" "$1/floor" || exit 1
        fi
        runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "$2"
        rc=$?
        [ "$3" != floor ] || { umount "$1/floor" && rm -rf "$1/fup" "$1/fwk"; } || rc=1
        exit $rc' \
        sh "$work" "bw-$mode-$$-$RANDOM" "$mode" "$w" | tr -d '\r'
}

# in_host WS CMD...: CMD natively (no sandbox) with the bench image's
# programs: a chroot of its root file system (read-only) in a user, mount,
# PID and network namespace, WS at /workspace, /tmp and /root fresh host
# directories.
in_host() {
    local w=$1; shift
    purge "$work/htmp" "$work/hroot"; mkdir -p "$work/htmp" "$work/hroot" "$work/hmnt"
    sync
    unshare --map-root-user --mount --pid --net --fork -- sh -c '
        r=$1 w=$2 m=$3/hmnt t=$3/htmp h=$3/hroot; shift 3
        mount --bind "$r" "$m" && mount -o remount,bind,ro "$m" &&
            mount -t proc proc "$m/proc" && mount --rbind /dev "$m/dev" &&
            mount --bind "$t" "$m/tmp" && mount --bind "$h" "$m/root" &&
            mount --bind "$w" "$m/workspace" || exit 1
        exec chroot "$m" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            /bin/sh -c "cd /workspace && exec \"\$@\"" sh "$@"' \
        sh "$rootfs" "$w" "$work" "$@"
}

# The first rows, for one column: a new clone on the host (untimed), the
# two statuses inside, then the host's status (timed here).
g1=$work/g1
host_status() { local t0 t1; t0=$(ms); git -C "$g1" status >/dev/null; t1=$(ms); echo "$1 $((t1 - t0))"; }
reclone() { purge "$g1"; git clone -q "$work/origin.git" "$g1"; }
# A clone the developer has used: a second later the host's own status
# wrote an index whose entries are older than it (not "racily clean": Git
# inside need not read those files again to trust them).
settle() { sleep 1.1; git -C "$g1" status >/dev/null; }
status_run() {
    case $1 in
        view) reclone; in_view "$lz" "$g1" bash -c "$status_script"; host_status after
              reclone; settle; in_view "$lz" "$g1" bash -c "$status_script" | sed 's/^st/settled-st/' ;;
        base) reclone; in_view "$base/lazaret" "$g1" bash -c "$status_script"; host_status after
              reclone; settle; in_view "$base/lazaret" "$g1" bash -c "$status_script" | sed 's/^st/settled-st/' ;;
        bind) reclone; in_raw bind "$g1" bash -c "$status_script"; host_status after
              reclone; settle; in_raw bind "$g1" bash -c "$status_script" | sed 's/^st/settled-st/' ;;
        floor) reclone; in_raw floor "$g1" bash -c "$status_script"
               reclone; settle; in_raw floor "$g1" bash -c "$status_script" | sed 's/^st/settled-st/' ;;
        host) reclone; host_status st1; host_status st2
              reclone; settle; host_status settled-st1 ;;
    esac
}
# The other rows, for one column, in r/TAG.
work_run() {
    local col=$1 tag=$1$2
    mkdir -p "$ws/r"
    cp -r "$work/proto" "$ws/r/$tag"
    case $col in
        view) in_view "$lz" "$ws" bash .bench.sh "$tag" ;;
        base) in_view "$base/lazaret" "$ws" bash .bench.sh "$tag" ;;
        bind | floor) in_raw "$col" "$ws" bash .bench.sh "$tag" ;;
        host) in_host "$ws" bash .bench.sh "$tag" ;;
    esac
    purge "$ws/r/$tag"
}

cols=(view)
[ -z "$base" ] || cols+=(base)
cols+=(bind)
floor=false
if command -v fuse-overlayfs >/dev/null; then floor=true; cols+=(floor); fi
cols+=(host)
for c in "${cols[@]}"; do : > "$work/$c.out"; done
for r in $(seq "$rounds"); do
    order=("${cols[@]}")
    if [ $((r % 2)) -eq 0 ]; then
        order=()
        for ((i = ${#cols[@]} - 1; i >= 0; i--)); do order+=("${cols[i]}"); done
    fi
    for c in "${order[@]}"; do
        echo "round $r of $rounds: git status, $c" >&2
        status_run "$c" >> "$work/$c.out"
    done
    [ "$only" = git ] && continue
    for c in "${order[@]}"; do
        echo "round $r of $rounds: workloads, $c" >&2
        work_run "$c" "$r" >> "$work/$c.out"
    done
done

# The table: medians in seconds, each column's ratio.
med() { awk -v w="$2" '$1 == w {print $2}' "$work/$1.out" | median; }
each() { awk -v w="$2" '$1 == w {printf " %.2f", $2 / 1000}' "$work/$1.out"; }
secs() { awk -v v="$1" 'BEGIN { if (v == "nan" || v == "") printf "%8s", "-"; else printf "%8.2f", v / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b <= 0) printf "%7s", "-"; else printf "%6.2fx", a / b }'; }
printf '%-52s %8s' "workload (seconds, medians of $rounds)" view
[ -z "$base" ] || printf ' %8s' baseline
printf ' %8s %8s %8s %7s %7s %7s' bind floor host v/bind v/floor v/host
[ -z "$base" ] || printf ' %7s' v/base
echo
# row LABEL NAME [HOSTNAME] [NOFLOOR] [GOAL-AGAINST GOAL]
row() {
    local label=$1 name=$2 hname=${3:-$2} nofloor=${4:-} against=${5:-} goal=${6:-} v b f h c
    v=$(med view "$name"); b=$(med bind "$name"); h=$(med host "$hname")
    f=nan
    $floor && [ -z "$nofloor" ] && f=$(med floor "$name")
    printf '%-52s %s' "$label" "$(secs "$v")"
    [ -z "$base" ] || { c=$(med base "$name"); printf ' %s' "$(secs "$c")"; }
    printf ' %s %s %s %s %s %s' "$(secs "$b")" "$(secs "$f")" "$(secs "$h")" "$(ratio "$v" "$b")" "$(ratio "$v" "$f")" "$(ratio "$v" "$h")"
    [ -z "$base" ] || printf ' %s' "$(ratio "$v" "$c")"
    echo
    local others=""
    [ -z "$base" ] || others="; baseline$(each base "$name")"
    others="$others; bind$(each bind "$name")"
    [ "$f" = nan ] || others="$others; floor$(each floor "$name")"
    echo "  rounds: view$(each view "$name")$others; host$(each host "$hname")"
    # The rows for scripts/bench-all.sh, printed after the table.
    {
        bench_row "workloads: $label (vs bind)" "$v" "$b" ms "$([ "$against" = bind ] && echo "$goal" || echo -)"
        [ "$f" = nan ] || bench_row "workloads: $label (vs floor)" "$v" "$f" ms "$([ "$against" = floor ] && echo "$goal" || echo -)"
        bench_row "workloads: $label (vs host)" "$v" "$h" ms "$([ "$against" = host ] && echo "$goal" || echo -)"
        [ -z "$base" ] || {
            bench_row "workloads, baseline build: $label (vs bind)" "$c" "$b" ms -
            bench_row "workloads: $label (vs the baseline build)" "$v" "$c" ms "<=1.05x"
        }
    } >> "$work/rows"
}
: > "$work/rows"
row "first git status, new Domain, host clone (20000 files)" st1 st1 "" host "<=2.0x"
row "second git status in that Domain" st2
row "host git status right after the sandbox's" after st1 nofloor host "<=1.5x"
row "first git status, new Domain, used host clone" settled-st1 settled-st1 "" host "<=2.0x"
if [ "$only" = all ]; then
row "git clone, 5000 files, 300 commits" clone
row "npm ci --offline, $npm_pkgs packages, into node_modules/" npm "" "" bind "<=1.3x"
row "python3 -m venv .venv" venv
row "pip install --no-index, $wheels wheels, into .venv/" pip "" "" floor "<=1.2x"
row "pytest, 80 modules x 3 tests" pytest "" "" floor "<=1.2x"
row "cargo build, $crates vendored crates, into target/" cargo "" "" bind "<=1.3x"
row "tar x 10000 small files, tracked dir" tar "" "" bind "<=1.3x"
row "tar x 10000 small files, ignored dir" tar-ign "" "" bind "<=1.3x"
row "rg over the run's tree" rg
fi
echo "host column: the host's Git for the git status rows (first and second status on a fresh clone), the image's programs run natively for the others"
cat "$work/rows"
echo "load: $(uptime | sed 's/.*load average: //'); $rounds rounds in $(( ($(date +%s) - started) / 60 )) min"
