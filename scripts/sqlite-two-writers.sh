#!/usr/bin/env bash
# Two SQLite writers on one WAL database in the workspace (issue 28,
# acceptance 2, second half): a host process and a sandbox process insert
# ROWS rows each, one transaction per row, at the same time. gVisor shares
# no file locks with the host, so neither side sees the other's locks and
# rows can be lost on any workspace; what the view must do is keep at least
# as many as a plain bind does. One invocation runs ROUNDS rounds on each
# side, interleaved: through Lazaret's view (`lazaret run --profile dev`),
# and in a raw runsc sandbox whose /workspace is a plain bind of the same
# host directory (the bundle Lazaret generated, workspace source swapped
# back, as scripts/posix-suite.sh does). Prints, per round and side, the
# rows kept of each writer against the rows whose commit it was told
# succeeded, each writer's exit status, and `pragma integrity_check`; then
# the totals with the committed rows lost on each side.
#
#   scripts/sqlite-two-writers.sh [ROUNDS] [ROWS]
#
# Needs the `dev` image (python3 with sqlite3) for the test user. Run as
# root: it re-runs itself as LAZARET_TEST_USER (default lazaret-test).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
rounds=${1:-5}
rows=${2:-300}
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}

if [ "$(id -u)" -eq 0 ]; then
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        LAZARET_BIN="$lz" bash "$0" "$@"
fi
[ -x "$lz" ] || { echo "sqlite-two-writers: no lazaret at $lz (set LAZARET_BIN)" >&2; exit 2; }
[ -e "$HOME/.local/share/lazaret/images/dev/index.json" ] || {
    echo "sqlite-two-writers: no dev image for $(id -un) (lazaret image build dev)" >&2
    exit 2
}

work=$(mktemp -d "$HOME/lazaret-sqlite2.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws" "$work/cfg/lazaret"
printf '[profiles.dev]\nimage = "dev"\n' > "$work/cfg/lazaret/config.toml"
export XDG_CONFIG_HOME="$work/cfg"
cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
# w.py DB TAG ROWS [READY GO]: inserts ROWS rows tagged TAG; with READY
# and GO, says it is ready and waits for the go file first. Exit 0 when
# every insert committed, 3 when some failed (counted, not fatal).
cat > w.py <<'EOF'
import os, sqlite3, sys, time
db, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if len(sys.argv) > 5:
    open(sys.argv[4], "w").close()
    t = time.time()
    while not os.path.exists(sys.argv[5]) and time.time() - t < 120:
        time.sleep(0.005)
failed = 0
c = sqlite3.connect(db, timeout=10)
for attempt in range(50):
    try:
        c.execute("pragma journal_mode=wal")
        c.execute("create table if not exists t(id integer primary key, w text, v text)")
        c.commit()
        break
    except sqlite3.Error:
        time.sleep(0.05)
for i in range(n):
    try:
        c.execute("insert into t(w, v) values (?, ?)", (tag, "row%d" % i))
        c.commit()
    except sqlite3.Error:
        failed += 1
        try:
            c.rollback()
        except sqlite3.Error:
            pass
    time.sleep(0.002)
try:
    c.close()
except sqlite3.Error:
    pass
print("WRITER", tag, "failed", failed)
sys.exit(3 if failed else 0)
EOF

# The raw runsc bundle: one run through Lazaret, its generated config.
"$lz" run --quiet --profile dev -- sleep 2 &
lzpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid" || true
python3 - "$work/bundle/template.json" "$work/bundle/config.json" "$ws" "$rows" <<'EOF'
import json, sys
src, dst, ws, rows = sys.argv[1:5]
c = json.load(open(src))
for m in c["mounts"]:
    # The workspace view (bound at the workspace's own path inside)
    # becomes a plain bind at /workspace, a mount point the image has.
    if m["source"].endswith("/gen/view-workspace"):
        m["source"] = ws
        m["destination"] = "/workspace"
c["mounts"] = [m for m in c["mounts"] if "/gen/" not in m["source"] or m["destination"] == "/workspace"]
c["process"]["args"] = ["python3", "/workspace/w.py", "/workspace/db.sqlite", "s", rows,
                        "/workspace/ready", "/workspace/go"]
c["process"]["cwd"] = "/workspace"
c["process"]["terminal"] = False
json.dump(c, open(dst, "w"))
EOF

count() {
    python3 - "$ws/db.sqlite" <<'EOF'
import sqlite3, sys
try:
    c = sqlite3.connect(sys.argv[1])
    h = c.execute("select count(*) from t where w = 'h'").fetchone()[0]
    s = c.execute("select count(*) from t where w = 's'").fetchone()[0]
    ok = c.execute("pragma integrity_check").fetchone()[0]
    print(h, s, ok)
except Exception as e:
    print(0, 0, "unreadable:" + str(e).replace(" ", "_"))
EOF
}

one() {
    local side=$1 sbx
    rm -f db.sqlite db.sqlite-wal db.sqlite-shm ready go
    if [ "$side" = view ]; then
        "$lz" run --quiet --profile dev -- python3 /workspace/w.py /workspace/db.sqlite s "$rows" /workspace/ready /workspace/go \
            >"$work/sbx.out" 2>&1 &
    else
        unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
            mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
            runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "sq-$$"' \
            sh "$work" >"$work/sbx.out" 2>&1 &
    fi
    sbx=$!
    for _ in $(seq 2400); do [ -e ready ] && break; sleep 0.05; done
    : > go
    local hs=0
    python3 w.py "$ws/db.sqlite" h "$rows" >"$work/host.out" 2>&1 || hs=$?
    local ss=0
    wait "$sbx" || ss=$?
    read -r h s ok < <(count)
    # Committed: the inserts whose commit returned success (the writer's
    # own count of failures; a writer that died committed nothing we know).
    local hf sf hc sc
    hf=$(sed -n 's/^WRITER h failed //p' "$work/host.out"); sf=$(sed -n 's/^WRITER s failed //p' "$work/sbx.out")
    hc=$((rows - ${hf:-$rows})); sc=$((rows - ${sf:-$rows}))
    printf '%-5s host %4d kept of %4d committed (exit %d)  sandbox %4d kept of %4d committed (exit %d)  integrity %s\n' \
        "$side" "$h" "$hc" "$hs" "$s" "$sc" "$ss" "$ok"
    echo "$side $h $s $ok $hc $sc" >>"$work/totals"
}

: >"$work/totals"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $rows rows per writer per side"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then one bind; one view; else one view; one bind; fi
done
awk '{t[$1] += $2 + $3; h[$1] += $2; s[$1] += $3; hc[$1] += $5; sc[$1] += $6; if ($4 != "ok") bad[$1]++
      if ($5 > $2) hl[$1] += $5 - $2; if ($6 > $3) sl[$1] += $6 - $3}
     END {for (k in t) printf "%-5s rows kept: %d (host %d of %d committed, sandbox %d of %d committed) of %d inserted; committed rows lost: host %d, sandbox %d; rounds with a damaged database: %d\n",
          k, t[k], h[k], hc[k], s[k], sc[k], 2 * ROWS * ROUNDS, hl[k] + 0, sl[k] + 0, bad[k] + 0}' ROWS="$rows" ROUNDS="$rounds" "$work/totals"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
