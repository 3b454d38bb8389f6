#!/usr/bin/env bash
# How long a host change takes to reach an inotify watcher inside the
# sandbox (docs/git.md, "Caching and host edits"). A python3 (ctypes)
# watcher inside a Domain of the `dev` image watches a directory the
# sandbox never listed; the host then makes, ROUNDS times, each of seven
# changes there (edit in place, append, create, save-by-rename, `sed -i`,
# copy over, move in) and waits for the event inside. Latency: the
# watcher's clock at the event minus the host's just before the change
# (one clock). Prints per change the median and maximum, and the maximum
# of all, with the load average. HOGS=N also runs N busy loops during the
# measurement (load: a 2-core machine at HOGS+2 or so).
#
#   [HOGS=N] scripts/bench-hostwatch.sh [ROUNDS]
#
# As root it builds and stages Lazaret and runs as the test user; as the
# user, LAZARET_BIN names the CLI (the user must have the dev image).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

rounds=${1:-5}
hogs=${HOGS:-0}
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
work=$(mktemp -d "$HOME/lazaret-bench-hostwatch.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    (cd "$work/ws" && XDG_CONFIG_HOME="$work/cfg" "$lz" stop -p w >/dev/null 2>&1 || true)
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ws/deep/dir" "$work/ws/elsewhere" "$work/cfg/lazaret"
printf '[profiles.w]\nimage = "dev"\n' > "$work/cfg/lazaret/config.toml"
cat > "$work/ws/watch.py" <<'EOF'
import ctypes, os, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
wd = libc.inotify_add_watch(fd, sys.argv[1].encode(), 0xfff)
print('ready', wd, flush=True)
while True:
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        w, mask, cookie, n = struct.unpack_from('iIII', buf, i)
        name = buf[i + 16:i + 16 + n].rstrip(b'\0').decode()
        i += 16 + n
        print('ev', int(time.time() * 1000), mask, name, flush=True)
EOF
d="$work/ws/deep/dir"
out="$work/events"
cd "$work/ws"
XDG_CONFIG_HOME="$work/cfg" "$lz" run -q -p w -- python3 /workspace/watch.py /workspace/deep/dir > "$out" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q '^ready' "$out" && break; sleep 0.2; done
grep -q '^ready [0-9]' "$out" || { echo "the watcher did not start: $(cat "$out")" >&2; exit 1; }
for _ in $(seq "$hogs"); do sh -c 'while :; do :; done' & pids+=($!); done

now() { date +%s%3N; }
# wait_for NAME SINCE-LINE: the time of the first event of NAME after line SINCE-LINE.
wait_for() {
    local t
    for _ in $(seq 2000); do
        t=$(tail -n +"$(( $2 + 1 ))" "$out" | awk -v n="$1" '$1 == "ev" && $4 == n { print $2; exit }')
        [ -n "$t" ] && { echo "$t"; return; }
        sleep 0.01
    done
    echo miss
}
declare -A lat
kinds="edit append create rename sed copy move"
for r in $(seq "$rounds"); do
    printf 'one\n' > "$d/a.txt"; printf 'one\n' > "$d/b.txt"; printf 'one\n' > "$d/c.txt"
    printf 'one\n' > "$d/d.txt"; printf 'one\n' > "$work/ws/elsewhere/e$r.txt"
    sleep 1
    for k in $kinds; do
        sleep 0.3
        n=$(wc -l < "$out")
        t0=$(now)
        case $k in
            edit) printf 'two\n' > "$d/a.txt"; name=a.txt ;;
            append) printf 'three\n' >> "$d/a.txt"; name=a.txt ;;
            create) printf 'new\n' > "$d/n$r.txt"; name=n$r.txt ;;
            rename) printf 'two\n' > "$d/.b.tmp" && mv "$d/.b.tmp" "$d/b.txt"; name=b.txt ;;
            sed) sed -i s/one/two/ "$d/c.txt"; name=c.txt ;;
            copy) cp "$work/ws/elsewhere/e$r.txt" "$d/d.txt"; name=d.txt ;;
            move) mv "$work/ws/elsewhere/e$r.txt" "$d/e$r.txt"; name=e$r.txt ;;
        esac
        t=$(wait_for "$name" "$n")
        if [ "$t" = miss ]; then lat[$k]+="miss "; else lat[$k]+="$(( t - t0 )) "; fi
        [ -n "${VERBOSE:-}" ] && echo "$k $name ${lat[$k]}" >&2
    done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (hogs: $hogs), $rounds rounds, ms from the host change to the event inside"
all=""
for k in $kinds; do
    v=${lat[$k]}
    misses=$(echo "$v" | tr ' ' '\n' | grep -c miss || true)
    nums=$(echo "$v" | tr ' ' '\n' | { grep -E '^-?[0-9]+$' || true; } | sort -n)
    all+="$nums"$'\n'
    med=$(echo "$nums" | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}')
    max=$(echo "$nums" | tail -1)
    printf '%-8s median %5s  max %5s  missed %s\n' "$k" "$med" "${max:--}" "$misses"
done
echo "all      max $(echo "$all" | { grep -E '^-?[0-9]+$' || true; } | sort -n | tail -1)"
