#!/usr/bin/env bash
# Benchmark of the workspace view (Git Sentry + ignored state, src/fusefs.rs):
# `git status` on a generated repository of ~20,000 tracked files, and
# unpacking ~5,000 small files into an ignored directory, inside `lazaret run`
# against the same inside a raw runsc sandbox whose /workspace is a plain bind
# of the host directory (bundle = the config.json Lazaret generated, workspace
# source swapped back to the host path). Timings are taken inside the sandbox,
# so sandbox start-up is not counted. Prints medians and ratios.
#
#   scripts/bench-git.sh [ROUNDS] [FILES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-7}
files=${2:-20000}
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
work=$(mktemp -d "$HOME/lazaret-bench-git.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws"
cd "$ws"

echo "generating a repository of $files tracked files" >&2
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
git config user.name bench; git config user.email bench@example.test
per_dir=100
for d in $(seq 0 $(( files / per_dir - 1 ))); do
    mkdir -p "src/d$d"
    for f in $(seq 0 $(( per_dir - 1 ))); do echo "$d $f" > "src/d$d/f$f.txt"; done
done
printf 'ign/\n' > .gitignore
cat > .bench.sh <<EOF
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# bash's clock: no process started per reading.
ms() { local t=\${EPOCHREALTIME/./}; echo \$(( t / 1000 )); }
mkdir -p /tmp/src && cd /tmp/src
for d in \$(seq 0 49); do mkdir d\$d; for f in \$(seq 0 99); do echo \$d\$f > d\$d/f\$f; done; done
tar -cf /tmp/files.tar . && cd /workspace
git status --porcelain >/dev/null
for i in \$(seq $rounds); do
    t0=\$(ms); git status --porcelain >/dev/null; t1=\$(ms); echo "status \$((t1 - t0))"
done
# A fresh directory per round and no deletion until the end: on an ext4
# without a journal, creating inodes right after deleting thousands makes
# the allocator skip "recently deleted" ones, a cost that would land on
# whichever side ran after a deletion. The unpacked files are removed once
# both sides are done.
rm -rf ign
for i in \$(seq $rounds); do
    mkdir -p ign/u\$i
    t0=\$(ms); tar -xf /tmp/files.tar -C ign/u\$i; t1=\$(ms); echo "unpack \$((t1 - t0))"
done
EOF
git add -A && git commit -q -m bench

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "running inside lazaret" >&2
"$lz" run --quiet -- bash /workspace/.bench.sh > "$work/lz.out" &
lzpid=$!
# Capture the bundle Lazaret generated while the Domain is up.
gen=""
for _ in $(seq 600); do
    gen=$(ls -d /tmp/lazaret-"$(id -u)"/*/gen/bundle 2>/dev/null | head -n1 || true)
    [ -n "$gen" ] && [ -f "$gen/config.json" ] && break
    sleep 0.05
done
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/config.json"
wait "$lzpid"

# Baseline: plain bind of the host workspace, the bench script as the root process.
python3 - "$work/bundle/config.json" "$ws" <<'EOF'
import json, sys
p, ws = sys.argv[1], sys.argv[2]
c = json.load(open(p))
for m in c["mounts"]:
    if m["destination"] == "/workspace":
        m["source"] = ws
# The generation's files (State Anchor overlays, which only exist in the
# supervisor's mount namespace, resolv.conf) are gone once Lazaret exits:
# the raw sandbox takes /usr, /etc, ... from the image rootfs instead.
c["mounts"] = [m for m in c["mounts"] if "/gen/" not in m["source"] or m["destination"] == "/workspace"]
c["process"]["args"] = ["/bin/bash", "/workspace/.bench.sh"]
c["process"]["cwd"] = "/workspace"
json.dump(c, open(p, "w"))
EOF
echo "running in raw runsc" >&2
unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
    mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
    runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" bench-git' \
    sh "$work" > "$work/raw.out"

report() {
    local what=$1 label=$2
    local a b
    a=$(awk -v w="$what" '$1 == w {print $2}' "$work/lz.out" | median)
    b=$(awk -v w="$what" '$1 == w {print $2}' "$work/raw.out" | median)
    echo "$label: lazaret median ${a} ms, raw runsc median ${b} ms"
    awk -v a="$a" -v b="$b" -v l="$label" 'BEGIN { printf "  ratio lazaret/raw: %.2fx (target <= 1.5x)\n", a / b }'
}
# The Domain's ignored store keeps what the sandbox unpacked: clear it.
"$lz" run --quiet -- rm -rf /workspace/ign
echo "rounds: $rounds, tracked files: $files, unpacked files: 5000"
report status "git status (~$files tracked files)"
report unpack "unpack 5000 files into an ignored dir"
