#!/usr/bin/env bash
# Soak of the workspace view (issue 47, acceptance 4): random file
# operations from the host and from the sandbox at once, on one shared tree
# of tracked paths in a workspace, for MINUTES minutes; at every checkpoint
# and at the end both sides stop and the tree, read from the host and from
# inside, is compared with what each side believes it wrote (content, owner
# mode bits, symlinks, directories, and hard-link identity: st_ino equal
# exactly for the names of one file, on each side, and stable over time).
# The operations, the ownership protocol that makes the end state
# deterministic and the comparison are in scripts/soak.py. Prints every
# difference and every failed operation; exits 1 when there is any.
#
#   scripts/soak.sh [MINUTES] [--minutes N] [--check-every SECONDS] [--seed N]
#
# MINUTES defaults to 120, checkpoints to every 600 s. Run as root, it
# creates and prepares its own unprivileged user (LAZARET_SOAK_USER,
# default lazaret-soak: subordinate ids, a delegated cgroup, the release
# binaries staged in /tmp/lazaret-bin-soak, the default image) and re-runs
# itself as that user; LAZARET_BIN names an already staged lazaret instead
# of building this checkout. Logs stay in the user's home when it fails
# (SOAK_KEEP=1: always). SOAK_TRACE=1 logs every changing call of both
# sides, in order, to ws/.soak/trace-{host,sandbox}.log.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

minutes=120 check=600 seed=${SOAK_SEED:-$(( $(date +%s) % 100000 ))}
args=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --minutes) minutes=$2; shift 2 ;;
        --check-every) check=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        [0-9]*) minutes=$1; shift ;;
        *) echo "usage: scripts/soak.sh [MINUTES] [--minutes N] [--check-every SECONDS] [--seed N]" >&2; exit 2 ;;
    esac
done
case $minutes$check$seed in *[!0-9]*) echo "soak: MINUTES, SECONDS and the seed are whole numbers" >&2; exit 2 ;; esac

if [ "$(id -u)" -eq 0 ]; then
    user=${LAZARET_SOAK_USER:-lazaret-soak}
    ensure_user "$user" >/dev/null
    if [ -z "${LAZARET_BIN:-}" ]; then
        cd "$here/.."
        use_cargo "$PWD"
        # A target directory shared between checkouts can take another
        # checkout's build for this one's: the crate is rebuilt from here.
        touch src/lib.rs src/main.rs bin/*.rs
        cargo build --release --locked >&2
        LAZARET_BIN=$(LAZARET_BIN_DIR=${LAZARET_BIN_DIR:-/tmp/lazaret-bin-soak} stage_binaries "$user")/lazaret
        echo "soak: testing $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-80) (lazaret $(md5sum < "$LAZARET_BIN" | cut -c1-12))" >&2
    fi
    delegate_cgroup "$user" >&2 || echo "soak: no delegated cgroup (the sandbox runs without resource limits)" >&2
    run_as "$user" "$LAZARET_BIN" image build --quiet --if-missing >&2
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" LOGNAME="$user" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin SOAK_KEEP="${SOAK_KEEP:-}" SOAK_TRACE="${SOAK_TRACE:-}" \
        LAZARET_BIN="$LAZARET_BIN" bash "$here/soak.sh" "${args[@]}"
fi
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
py=$here/soak.py
[ -x "$lz" ] || { echo "soak: no lazaret at $lz (set LAZARET_BIN)" >&2; exit 2; }
[ -r "$py" ] || { echo "soak: cannot read $py" >&2; exit 2; }

work=$(mktemp -d "$HOME/lazaret-soak.XXXXXX")
ws="$work/ws"
mkdir -p "$ws/.soak/ctl" "$ws/tree"
cp "$py" "$ws/.soak/soak.py"
cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
printf 'soak\n' > README
git add README .soak/soak.py && git -c user.name=soak -c user.email=soak@localhost commit -qm soak
lzpid=
finish() {
    local rc=$?
    [ -n "$lzpid" ] && kill "$lzpid" 2>/dev/null && wait "$lzpid" 2>/dev/null
    (cd "$ws" && "$lz" stop -w "$ws" >/dev/null 2>&1) || true
    if [ "$rc" -eq 0 ] && [ -z "${SOAK_KEEP:-}" ]; then
        rm -rf "$work"
    else
        echo "soak: logs and the tree are in $work (sandbox.log, host.log, ws/.soak/ctl)" >&2
    fi
    exit "$rc"
}
trap finish EXIT

secs=$((minutes * 60))
echo "soak: $minutes minutes, a checkpoint every $check s, seed $seed; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# The sandbox's worker may run past the host's end (it stops on the host's
# word); its own bound only ends a run whose host side died.
{
    src=0
    "$lz" run --quiet ${SOAK_TRACE:+-e SOAK_TRACE} -- python3 /workspace/.soak/soak.py sandbox /workspace $((secs + 1800)) $((seed + 1)) \
        >"$work/sandbox.log" 2>&1 || src=$?
    : > "$ws/.soak/ctl/sandbox-exited"
    exit "$src"
} &
lzpid=$!
set +e
python3 "$ws/.soak/soak.py" host "$ws" "$secs" "$check" "$seed" 2>&1 | tee "$work/host.log"
rc=${PIPESTATUS[0]}
set -e
wait "$lzpid" || { echo "soak: the sandbox side ended with an error:"; tail -n 20 "$work/sandbox.log"; rc=1; }
lzpid=
grep '^ERROR' "$work/sandbox.log" | head -n 40 | sed 's/^/  sandbox /' || true
echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$rc"
