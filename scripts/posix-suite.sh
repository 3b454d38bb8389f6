#!/usr/bin/env bash
# POSIX behaviour of the workspace view against a plain bind (issue 28):
# pjdfstest (crates.io `pjdfstest` 0.2.2) runs inside gVisor twice in one
# invocation, on the same host directory: once with /workspace served by
# Lazaret's view, once in a raw runsc sandbox whose /workspace is a plain
# bind (the bundle Lazaret generated, workspace source swapped back, as
# scripts/bench-git.sh does). Prints both totals, then every case the bind
# passes and the view does not, and exits 1 when one of them is not a
# documented refusal (docs/git.md, "POSIX suite").
#
#   scripts/posix-suite.sh [PATTERN...]   no pattern: the full suite
#
# PJDFSTEST names the runner (default: $LAZARET_TOOLS/bin/pjdfstest, with
# LAZARET_TOOLS=/var/tmp/lazaret-tools; as root it is installed there with
# `cargo install pjdfstest --version 0.2.2` when missing). LAZARET_BIN names
# the lazaret binary (default: the release build). Run as root, it re-runs
# itself as LAZARET_TEST_USER (default lazaret-test).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

tools=${LAZARET_TOOLS:-/var/tmp/lazaret-tools}
pjd=${PJDFSTEST:-$tools/bin/pjdfstest}
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}

if [ "$(id -u)" -eq 0 ]; then
    if [ ! -x "$pjd" ]; then
        use_cargo "$here/.."
        cargo install --locked pjdfstest --version 0.2.2 --root "$tools" >&2
    fi
    chmod -R a+rX "$tools" 2>/dev/null || true
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        PJDFSTEST="$pjd" LAZARET_BIN="$lz" bash "$0" "$@"
fi
[ -x "$pjd" ] || { echo "posix-suite: no pjdfstest at $pjd (run as root to install it)" >&2; exit 2; }
[ -x "$lz" ] || { echo "posix-suite: no lazaret at $lz (set LAZARET_BIN)" >&2; exit 2; }

work=$(mktemp -d "$HOME/lazaret-posix.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws/.pjd"
cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
cp "$pjd" .pjd/pjdfstest
# Debian's second unprivileged user is daemon:daemon (no `tests` user).
cat > .pjd/pjd.toml <<'EOF'
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
[settings]
naptime = 0.001
allow_remount = false
[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
EOF
# .pjd/run.sh DIR PATTERN...: the suite in /workspace/DIR.
cat > .pjd/run.sh <<'EOF'
d=/workspace/$1; shift
mkdir -p "$d" && cd "$d" && exec /workspace/.pjd/pjdfstest -c /workspace/.pjd/pjd.toml -p "$d" "$@" 2>&1
EOF

echo "pjdfstest through the view ($*)" >&2
"$lz" run --quiet -- sh /workspace/.pjd/run.sh t-view "$@" > "$work/view.out" &
lzpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid" || true

echo "pjdfstest on a plain bind" >&2
bind_bundle "$work/bundle/template.json" "$work/bundle" "$ws" /bin/sh /workspace/.pjd/run.sh t-bind "$@"
run_bind "$work/bundle" "$work/root" "posix-$$" | tr -d '\r' > "$work/bind.out" || true

# "name   ok|FAILED|..." lines: the verdict is the last word.
verdicts() { awk '$1 ~ /::/ && NF >= 2 {print $1, $NF}' "$1" | sort -u; }
verdicts "$work/view.out" > "$work/view.v"
verdicts "$work/bind.out" > "$work/bind.v"
count() { awk -v w="$2" '$2 == w' "$1" | wc -l; }
printf 'side  cases  ok  failed\n'
for s in bind view; do
    printf '%-5s %5d %5d %5d\n' "$s" "$(wc -l < "$work/$s.v")" "$(count "$work/$s.v" ok)" "$(count "$work/$s.v" FAILED)"
done
# Cases the bind passes and the view does not; the documented refusals
# (Git Sentry, ignored paths: docs/git.md) are listed with their reason.
refusals="$here/posix-refusals.txt"
join <(awk '$2 == "ok" {print $1}' "$work/bind.v") <(awk '$2 != "ok" {print $1}' "$work/view.v") > "$work/worse"
bad=0
while read -r name; do
    why=$(awk -v n="$name" '$1 == n {$1 = ""; print substr($0, 2)}' "$refusals" 2>/dev/null || true)
    if [ -n "$why" ]; then
        echo "refused by design: $name ($why)"
    else
        echo "worse than the bind: $name"
        grep -A6 -F "$name" "$work/view.out" | head -n 8 | sed 's/^/    /'
        bad=1
    fi
done < "$work/worse"
[ -s "$work/view.v" ] && [ -s "$work/bind.v" ] || { echo "posix-suite: a side produced no results" >&2; tail -n 20 "$work/view.out" "$work/bind.out" >&2; exit 2; }
exit "$bad"
