#!/usr/bin/env bash
# Evaluation of a design that is NOT in the product: a seccomp
# user-notification filter on runsc's mutating syscalls, with the workspace
# bound directly, instead of the FUSE workspace view (docs/git.md,
# "Bypassing the view for undecided operations: evaluated"). Builds the
# standalone prototype scripts/notify-proto.rs with plain rustc and prints:
#
#  1. per-call cost on tmpfs (no gVisor): plain syscall; under the filter
#     with the supervisor deciding by identity and answering CONTINUE; the
#     supervisor doing the call and injecting the result (ADDFD); and the
#     same calls through a FUSE file system (fuse-overlayfs);
#  2. unpacking FILES small files into a fresh tracked directory inside a
#     sandbox: `lazaret run` (the view), raw runsc with a plain bind, and raw
#     runsc with a plain bind under the prototype's filter and supervisor,
#     INVOCATIONS times interleaved, ROUNDS rounds each; medians and ranges;
#  3. what runsc's processes asked the supervisor (runsc starts under the
#     extra filter; which process makes which workspace call).
#
#   scripts/bench-notify.sh [INVOCATIONS] [ROUNDS] [FILES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
invocations=${1:-3}
rounds=${2:-3}
files=${3:-2000}
. "$here/lib.sh"

if [ "$(id -u)" -eq 0 ]; then
    # The prototype is built here (root's toolchain) next to the staged
    # binaries; the rest runs as the test user.
    use_cargo "$here/.."
    dir=${LAZARET_BIN_DIR:-/tmp/lazaret-bin}
    install -d -m 0755 "$dir"
    rustc -O --edition 2021 -o "$dir/notify-proto" "$here/notify-proto.rs"
    chmod 0755 "$dir/notify-proto"
fi
bench_as_user "$here" "$(basename "$0")" "$@"

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
proto=$here/notify-proto
[ -x "$proto" ] || { echo "no $proto: run this script as root (it builds the prototype)" >&2; exit 1; }
work=$(mktemp -d "$HOME/lazaret-bench-notify.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "load: $(uptime)"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo
echo "== 1. per call, tmpfs, $files calls x 5 rounds, medians =="
unshare --map-root-user --mount -- sh -c '
    set -e
    mount -t tmpfs -o size=512m t "$1"
    mkdir "$1/a" "$1/l" "$1/u" "$1/w" "$1/m"
    "$2" calls "$1/a" "$3" 5
    fuse-overlayfs -o timeout=0,lowerdir="$1/l",upperdir="$1/u",workdir="$1/w" "$1/m" 2>/dev/null
    "$2" calls "$1/m" "$3" 5 plain-only | sed -E "s/^plain {17}/FUSE (fuse-overlayfs) /"
    fusermount3 -u "$1/m" 2>/dev/null || umount "$1/m"' sh "$work" "$proto" "$files"

echo
echo "== 2. unpack $files files into a fresh tracked directory =="
ws="$work/ws"; mkdir -p "$ws"; cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
git config user.name bench; git config user.email bench@example.test
mkdir src && echo keep > src/keep && printf 'ign/\n.env\n' > .gitignore
echo SECRET-TOKEN > .env
# Section 4: what the filter can and cannot enforce.
cat > .guar.sh <<'EOF'
cd /workspace
echo "  read the host's ignored .env: $(cat .env 2>&1)"
(echo evil > .git/commondir) 2>/dev/null; echo "  create .git/commondir: rc=$?"
(echo x >> .git/config) 2>/dev/null; echo "  append to .git/config: rc=$?"
(mv .git .git-x) 2>/dev/null; echo "  mv .git .git-x: rc=$?"
(mkdir -p sub && cd sub && git init -q .) 2>/dev/null; echo "  git init in sub/: rc=$?"
EOF
cat > .bench.sh <<EOF
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ms() { local t=\${EPOCHREALTIME/./}; echo \$(( t / 1000 )); }
mkdir -p /tmp/src && cd /tmp/src
for f in \$(seq 0 $((files - 1))); do echo \$f > f\$f; done
tar -cf /tmp/files.tar . && cd /workspace
sync
for i in \$(seq $rounds); do
    mkdir -p src/\$1-\$i
    t0=\$(ms); tar -xf /tmp/files.tar -C src/\$1-\$i; t1=\$(ms); echo "unpack \$((t1 - t0))"
    sync
done
EOF
git add -A && git commit -q -m bench

mkdir -p "$work/bundle"
raw() { # raw VARIANT PREFIX [notify|trace] [SCRIPT]
    python3 - "$work/bundle/config.json" "$2" "${4:-.bench.sh}" <<'EOF'
import json, sys
p, prefix, script = sys.argv[1], sys.argv[2], sys.argv[3]
c = json.load(open(p))
c["process"]["args"] = ["/bin/bash", "/workspace/" + script, prefix]
json.dump(c, open(p, "w"))
EOF
    local wrap="" trace=""
    [ -n "${3:-}" ] && wrap="$proto supervise $work/notify-$2.log --"
    [ "${3:-}" = trace ] && trace=1
    rm -rf "$work/root"; mkdir -p "$work/root"
    env NOTIFY_GUARD="$ws" ${trace:+NOTIFY_TRACE=1} unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
        exec $2 runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "bench-notify-$3"' \
        sh "$work" "$wrap" "$2" >> "$work/$1"
}
for inv in $(seq "$invocations"); do
    echo "invocation $inv: lazaret" >&2
    "$lz" run --quiet -- bash /workspace/.bench.sh "lz$inv" > "$work/lz.$inv" &
    lzpid=$!
    if [ "$inv" = 1 ]; then
        gen=$(domain_bundle "$lz" "$ws")
        cp "$gen/config.json" "$work/bundle/config.json"
    fi
    wait "$lzpid"
    cat "$work/lz.$inv" >> "$work/lz.out"
    if [ "$inv" = 1 ]; then
        python3 - "$work/bundle/config.json" "$ws" <<'EOF'
import json, sys
p, ws = sys.argv[1], sys.argv[2]
c = json.load(open(p))
for m in c["mounts"]:
    # The workspace view (bound at the workspace's own path inside)
    # becomes a plain bind at /workspace, a mount point the image has.
    if m["source"].endswith("/gen/view-workspace"):
        m["source"] = ws
        m["destination"] = "/workspace"
c["mounts"] = [m for m in c["mounts"] if "/gen/" not in m["source"] or m["destination"] == "/workspace"]
c["process"]["cwd"] = "/workspace"
json.dump(c, open(p, "w"))
EOF
    fi
    echo "invocation $inv: raw runsc, plain bind" >&2
    : > "$work/raw.$inv"; raw "raw.$inv" "raw$inv"; cat "$work/raw.$inv" >> "$work/raw.out"
    echo "invocation $inv: raw runsc, plain bind + notify filter" >&2
    : > "$work/notify.$inv"; raw "notify.$inv" "nt$inv" notify; cat "$work/notify.$inv" >> "$work/notify.out"
done

# One more run under the filter, logging every notification (section 3).
raw trace.out tr trace
echo "load: $(uptime)"
range() { # per-invocation medians, min-max
    local v i m
    for i in $(seq "$invocations"); do
        awk '$1 == "unpack" {print $2}' "$work/$1.$i" | median
    done | sort -n | awk '{a[NR]=$1} END {printf "%s-%s", a[1], a[NR]}'
}
row() {
    local m
    m=$(awk '$1 == "unpack" {print $2}' "$work/$1.out" | median)
    printf '%-34s median %6s ms  (invocations %s ms)' "$2" "$m" "$(range "$1")"
    awk -v a="$m" -v b="$3" 'BEGIN { if (b > 0) printf "  %.2fx plain bind", a / b }'
    echo
}
base=$(awk '$1 == "unpack" {print $2}' "$work/raw.out" | median)
echo "rounds: $invocations invocations x $rounds, files per round: $files"
row lz "lazaret (workspace view)" "$base"
row raw "raw runsc, plain bind" "$base"
row notify "raw runsc, bind + notify filter" "$base"

echo
echo "== 3. what the filter saw =="
echo "notifications in one timed run (by syscall number):"
sed -n '/^---/,$p' "$work/notify-nt$invocations.log"
echo "a traced run (by process and syscall number):"
sed -n '/^---/,$p' "$work/notify-tr.log"
echo "workspace calls, by syscall (sample of the first 20000 notifications):"
grep -F '/workspace' "$work/notify-tr.log" | awk '{print $3, $4, $5}' | sort | uniq -c | sort -rn | head
echo "a stretch of the workspace calls (tar creating files):"
grep -F '/workspace' "$work/notify-tr.log" | sed -n '301,316p' | cut -c1-160

echo
echo "== 4. guarantees with a plain bind + the filter (prototype policy: refuse"
echo "   config, commondir and .git as names; the view's full policy would be"
echo "   decided the same way, by the directory's identity and the name) =="
raw guar.out gu notify .guar.sh
cat "$work/guar.out"
echo "  on the host: .git/commondir $(test -e "$ws/.git/commondir" && echo exists || echo absent)," \
    ".git $(test -d "$ws/.git" && echo in place || echo moved), sub/.git $(test -e "$ws/sub/.git" && echo exists || echo absent)"
