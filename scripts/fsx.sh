#!/usr/bin/env bash
# Random file operations checked against a model (scripts/fsx.py), inside
# gVisor twice in one invocation on the same host directory: through the
# workspace view (a tracked directory of a Git workspace) and in a raw runsc
# sandbox whose /workspace is a plain bind (the bundle Lazaret generated,
# workspace source swapped back: scripts/lib.sh bind_bundle). Every run
# mixes plain, O_DIRECT and mapped reads and writes, truncates, fallocate,
# fsync and reopens; a run fails on the first read that differs from what
# was written (READ BAD DATA), a wrong size, or an unexpected error. Each
# side first proves the checker: a byte changed behind its back must be
# reported (fsx.py --corrupt), or the script stops (exit 2).
#
#   scripts/fsx.sh [RUNS] [SEEDS...]     default: 3 runs of seed 3
#
# Prints each failing run's report, then the passes and failures per seed
# and side; exits 1 when the view fails more runs of a seed than the bind
# (2 when a side produced no results). FSX_OPS sets the operations per run
# (default 10000), FSX_ARGS more fsx.py options (e.g. -Z: every read and
# write O_DIRECT). Needs the `dev` image (python3 with mmap and ctypes) for
# the test user. LAZARET_BIN names the lazaret binary (default: the release
# build). Run as root, it re-runs itself as LAZARET_TEST_USER (default
# lazaret-test).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}

if [ "$(id -u)" -eq 0 ]; then
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    # The user reads the scripts from a copy (the checkout may be private).
    stage=$(mktemp -d /tmp/lazaret-fsx-scripts.XXXXXX)
    trap 'rm -rf "$stage"' EXIT
    cp "$here/fsx.sh" "$here/fsx.py" "$here/lib.sh" "$stage/"
    chmod -R a+rX "$stage"
    setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        LAZARET_BIN="$lz" FSX_OPS="${FSX_OPS:-}" FSX_ARGS="${FSX_ARGS:-}" bash "$stage/fsx.sh" "$@"
    exit
fi
runs=${1:-3}
[ $# -gt 0 ] && shift
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(3)
ops=${FSX_OPS:-10000}
case "$runs$ops${seeds[*]}" in *[!0-9\ ]*) echo "fsx: RUNS, SEEDS and FSX_OPS are numbers" >&2; exit 2 ;; esac
[ -x "$lz" ] || { echo "fsx: no lazaret at $lz (set LAZARET_BIN)" >&2; exit 2; }
[ -e "$HOME/.local/share/lazaret/images/dev/index.json" ] || {
    echo "fsx: no dev image for $(id -un) (lazaret image build dev)" >&2
    exit 2
}

work=$(mktemp -d "$HOME/lazaret-fsx.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws" "$work/cfg/lazaret"
printf '[profiles.dev]\nimage = "dev"\n' > "$work/cfg/lazaret/config.toml"
export XDG_CONFIG_HOME="$work/cfg"
cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
# t/ is tracked: its files are the host's, served by the view itself (not
# the ignored store).
mkdir t .fsx
: > t/.keep
git add t/.keep
git -c user.name=fsx -c user.email=fsx@localhost commit -q -m fsx
cp "$here/fsx.py" .fsx/fsx.py
# .fsx/run.sh SIDE RUNS OPS ARGS SEED...: the runs, one line each
# ("FSX side seed run pass|fail"), a failing run's report indented below.
cat > .fsx/run.sh <<'EOF'
side=$1 runs=$2 ops=$3 args=$4; shift 4
# First the checker itself: a byte changed behind the model's back must be
# reported ("FSX-CHECK side caught").
out=/workspace/.fsx/$side-check.out
if python3 /workspace/.fsx/fsx.py -N 600 -S 1 --corrupt 300 "/workspace/t/$side-check" > "$out" 2>&1; then
    echo "FSX-CHECK $side missed"
elif grep -q "READ BAD DATA" "$out"; then
    echo "FSX-CHECK $side caught"
else
    echo "FSX-CHECK $side error"
    sed 's/^/    /' "$out"
fi
for seed in "$@"; do
    r=1
    while [ "$r" -le "$runs" ]; do
        out=/workspace/.fsx/$side-$seed-$r.out
        # shellcheck disable=SC2086 # ARGS are options, split on purpose
        if python3 /workspace/.fsx/fsx.py $args -N "$ops" -S "$seed" "/workspace/t/$side-$seed-$r" > "$out" 2>&1; then
            echo "FSX $side $seed $r pass"
        else
            echo "FSX $side $seed $r fail"
            sed 's/^/    /' "$out"
        fi
        r=$((r + 1))
    done
done
EOF

echo "fsx: $runs runs of seeds ${seeds[*]}, $ops operations each${FSX_ARGS:+ ($FSX_ARGS)}; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "fsx: through the view" >&2
"$lz" run --quiet --profile dev -- sh /workspace/.fsx/run.sh view "$runs" "$ops" "${FSX_ARGS:-}" "${seeds[@]}" \
    > "$work/view.out" 2>&1 &
lzpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid" || true

echo "fsx: on a plain bind" >&2
bind_bundle "$work/bundle/template.json" "$work/bundle" "$ws" \
    sh /workspace/.fsx/run.sh bind "$runs" "$ops" "${FSX_ARGS:-}" "${seeds[@]}"
run_bind "$work/bundle" "$work/root" "fsx-$$" > "$work/bind.out" 2>&1 || true

for s in view bind; do
    if grep -q "^FSX $s .* fail$" "$work/$s.out"; then
        echo "== failures, $s"
        awk -v s="$s" '/^FSX / {show = ($2 == s && $5 == "fail")} show' "$work/$s.out"
        # The host file against what the run expected (saved on failure).
        for e in "$ws"/t/"$s"-*.expected; do
            case $e in *-check.expected) continue ;; esac
            [ -e "$e" ] || continue
            f=${e%.expected}
            printf 'host file %s: ' "${f#"$ws"/}"
            cmp "$f" "$e" 2>&1 && echo "holds what was written" || true
        done
    fi
done
for s in view bind; do
    if grep -q "^FSX-CHECK $s caught$" "$work/$s.out"; then
        echo "checker ($s): caught a byte changed behind its back"
    else
        echo "fsx: the checker missed a byte changed behind its back ($s)" >&2
        grep -A 30 "^FSX-CHECK $s" "$work/$s.out" >&2 || tail -n 20 "$work/$s.out" >&2
        exit 2
    fi
done
printf 'seed  side  runs  pass  fail\n'
bad=0
for seed in "${seeds[@]}"; do
    for s in bind view; do
        p=$(grep -c "^FSX $s $seed [0-9]* pass$" "$work/$s.out" || true)
        f=$(grep -c "^FSX $s $seed [0-9]* fail$" "$work/$s.out" || true)
        printf '%-5s %-5s %4d %5d %5d\n' "$seed" "$s" $((p + f)) "$p" "$f"
        eval "${s}_p=$p ${s}_f=$f"
    done
    # shellcheck disable=SC2154 # set by the eval above
    if [ $((view_p + view_f)) -ne "$runs" ] || [ $((bind_p + bind_f)) -ne "$runs" ]; then
        echo "fsx: seed $seed: a side did not report every run" >&2
        tail -n 20 "$work/view.out" "$work/bind.out" >&2
        exit 2
    fi
    [ "$view_f" -le "$bind_f" ] || bad=1
done
echo "fsx: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$bad"
