# Shared helpers for scripts/ (sourced, not run).

# ensure_user NAME: an unprivileged user with a home and subordinate ids.
ensure_user() {
    local u=$1
    if ! id "$u" >/dev/null 2>&1; then
        echo "creating user $u"
        useradd --create-home --shell /bin/bash "$u"
    fi
    if ! grep -q "^$u:" /etc/subuid || ! grep -q "^$u:" /etc/subgid; then
        local start
        start=$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' /etc/subuid /etc/subgid)
        echo "adding subordinate ids $start-$((start + 65535)) for $u"
        usermod --add-subuids "$start-$((start + 65535))" --add-subgids "$start-$((start + 65535))" "$u"
    fi
}

# run_as USER CMD...: runs CMD as USER with a clean, login-like environment.
run_as() {
    local u=$1; shift
    local home
    home=$(getent passwd "$u" | cut -d: -f6)
    setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- \
        env -i HOME="$home" USER="$u" LOGNAME="$u" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        TERM="${TERM:-xterm}" ${LAZARET_QUIET:+LAZARET_QUIET=1} "$@"
}

# stage_binaries USER: copies the release binaries (from $CARGO_TARGET_DIR
# when set, as cargo put them there) to a directory USER can read, prints
# its path; fails when one is missing (never stages an older build).
stage_binaries() {
    local dir=${LAZARET_BIN_DIR:-/tmp/lazaret-bin}
    install -d -m 0755 "$dir"
    local b
    for b in lazaret lazaret-init lazaret-escalate; do
        install -m 0755 "${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/$b" "$dir/$b" || return 1
    done
    printf '%s\n' "$dir"
}

# baseline_bin SCRIPT: prints $BENCH_BASELINE_BIN (empty when unset), or
# fails naming SCRIPT when it is set but holds no lazaret build.
baseline_bin() {
    local d=${BENCH_BASELINE_BIN:-}
    if [ -n "$d" ] && ! { [ -x "$d/lazaret" ] && [ -x "$d/lazaret-init" ]; }; then
        echo "$1: BENCH_BASELINE_BIN=$d: expected a directory with lazaret and lazaret-init this user can run" >&2
        return 2
    fi
    printf '%s\n' "$d"
}

# bench_as_user SCRIPTDIR SCRIPT ARGS...: run as root, a benchmark builds
# Lazaret, stages it where the test user can read it, makes sure the user
# has the default image, and re-executes itself as that user (returns at
# once when not root). BENCH_BASELINE_BIN (a directory holding another
# build's lazaret, lazaret-init and lazaret-escalate, readable by the
# user) is passed on for the scripts that measure a second build.
bench_as_user() {
    local here=$1 script=$2; shift 2
    [ "$(id -u)" -eq 0 ] || return 0
    cd "$here/.."
    local user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    use_cargo "$PWD"
    cargo build --release --locked
    local bindir
    bindir=$(stage_binaries "$user")
    # A cgroup the user may use (cgroup v1: the user can move its own
    # processes into it), without moving the benchmark itself.
    delegate_cgroup "$user" nomove >/dev/null 2>&1 || true
    install -m 0755 "scripts/$script" "$bindir/$script"
    install -m 0644 scripts/lib.sh "$bindir/lib.sh"
    # The inputs of scripts/bench-workloads.sh, where the user can read them.
    rm -rf "$bindir/fixtures-bench"
    cp -r tests/fixtures/bench "$bindir/fixtures-bench"
    chmod -R a+rX "$bindir/fixtures-bench"
    run_as "$user" "$bindir/lazaret" image build --quiet --if-missing
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        LAZARET_BIN="$bindir/lazaret" LAZARET_BENCH_CGROUPS="${DELEGATED_DIRS:-}" \
        BENCH_BASELINE_BIN="${BENCH_BASELINE_BIN:-}" BENCH_ROWS="${BENCH_ROWS:-}" bash "$bindir/$script" "$@"
}

# delegate_cgroup USER: as systemd's Delegate= would, gives USER a cgroup
# of its own below this shell's and moves this shell into it, so that
# everything started from here (tests, run_as) can create per-Domain
# children with memory, pids and cpu limits. cgroup v1 (one directory in
# each of the memory, pids, cpu and cpuacct hierarchies) or v2 (a
# directory with the controllers enabled for its children, and a leaf for
# this shell). Prints what it did; returns 1 when it cannot.
delegate_cgroup() {
    local u=$1 name="lazaret-$1" gid move=${2:-move}
    # The directories made (v1), for a caller that moves processes itself.
    DELEGATED_DIRS=""
    gid=$(id -g "$u")
    if grep -q ' - cgroup cgroup ' /proc/self/mountinfo; then
        local ctl mnt cur dir
        for ctl in memory pids cpu cpuacct; do
            mnt=$(awk -v c="$ctl" '$0 ~ / - cgroup cgroup / { n=split($NF, o, ","); for (i=1;i<=n;i++) if (o[i]==c) print $5 }' /proc/self/mountinfo | head -n1)
            [ -n "$mnt" ] || { [ "$ctl" = cpuacct ] && continue; echo "delegate_cgroup: no $ctl hierarchy" >&2; return 1; }
            cur=$(awk -F: -v c="$ctl" '{ n=split($2, o, ","); for (i=1;i<=n;i++) if (o[i]==c) print $3 }' /proc/self/cgroup | head -n1)
            # Already inside the user's delegated cgroup: reuse it.
            case "$cur" in */"$name") dir="$mnt$cur" ;; *) dir="$mnt${cur%/}/$name" ;; esac
            mkdir -p "$dir"
            chown "$u:$gid" "$dir" "$dir/cgroup.procs" "$dir/tasks"
            DELEGATED_DIRS="$DELEGATED_DIRS $dir"
            [ "$move" = nomove ] || echo "$BASHPID" > "$dir/cgroup.procs"
        done
        echo "delegated cgroup (v1) for $u: $name in memory, pids, cpu, cpuacct"
        return 0
    fi
    local mnt cur base
    mnt=$(awk '$0 ~ / - cgroup2 / { print $5; exit }' /proc/self/mountinfo)
    [ -n "$mnt" ] || { echo "delegate_cgroup: no cgroup hierarchy" >&2; return 1; }
    cur=$(awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup)
    case "$cur" in */"$name"/shell) base="$mnt${cur%/shell}" ;; *) base="$mnt$(dirname "$cur" | sed 's|^/$||')/$name" ;; esac
    mkdir -p "$base/shell"
    echo "$BASHPID" > "$base/shell/cgroup.procs"
    echo "+memory +pids +cpu" > "$base/cgroup.subtree_control"
    chown -R "$u:$gid" "$base"
    echo "delegated cgroup (v2) for $u: $base"
}

# use_cargo: puts a cargo on PATH that can build Lazaret, or says exactly
# what to do and fails. Under sudo, root's PATH usually has no cargo: the
# invoking user's rustup toolchain (~/.cargo/bin) is used then.
use_cargo() {
    local repo=$1 h min have
    if ! command -v cargo >/dev/null 2>&1; then
        for h in ${SUDO_USER:+"$(getent passwd "$SUDO_USER" | cut -d: -f6)"} "${HOME:-}"; do
            if [ -n "$h" ] && [ -x "$h/.cargo/bin/cargo" ]; then
                export PATH="$h/.cargo/bin:$PATH"
                export RUSTUP_HOME=${RUSTUP_HOME:-$h/.rustup}
                break
            fi
        done
    fi
    min=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' "$repo/Cargo.toml")
    if ! command -v cargo >/dev/null 2>&1; then
        echo "no cargo found (PATH=$PATH${SUDO_USER:+, nor in ~$SUDO_USER/.cargo/bin})." >&2
        echo "Lazaret needs Rust $min or newer: install rustup (https://rustup.rs, or 'sudo apt-get install rustup' on Debian 13+), then 'rustup default stable', and run this again." >&2
        return 1
    fi
    have=$(cargo --version | awk '{print $2}')
    if [ "$(printf '%s\n%s\n' "$min" "$have" | sort -V | head -n1)" != "$min" ]; then
        echo "$(command -v cargo) is version $have; Lazaret needs Rust $min or newer (rust-version in Cargo.toml)." >&2
        echo "Debian's packaged Rust is older: install rustup (https://rustup.rs), then 'rustup default stable' (or 'rustup update'), and run this again." >&2
        return 1
    fi
}

# use_lint_tools: makes sure `cargo fmt` and `cargo clippy` work (the test
# suite's style and lint gates). A rustup toolchain without them (rustup's
# "minimal" profile) gets the components, added as the toolchain's owner so
# a user's ~/.rustup stays theirs under sudo.
use_lint_tools() {
    local missing=() rustup owner home
    cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)
    [ ${#missing[@]} -eq 0 ] && return 0
    rustup=$(command -v rustup || true)
    if [ -z "$rustup" ]; then
        echo "cargo has no ${missing[*]} and there is no rustup to add it: install Rust with rustup (https://rustup.rs), then 'rustup component add ${missing[*]}'." >&2
        return 1
    fi
    echo "adding the Rust components ${missing[*]} (the style and lint gates need them)"
    owner=$(stat -c %U "$rustup")
    if [ "$owner" = "$(id -un)" ]; then
        rustup component add "${missing[@]}"
    else
        home=$(getent passwd "$owner" | cut -d: -f6)
        setpriv --reuid="$owner" --regid="$(id -g "$owner")" --init-groups -- \
            env HOME="$home" RUSTUP_HOME="${RUSTUP_HOME:-$home/.rustup}" "$rustup" component add "${missing[@]}"
    fi || {
        echo "'rustup component add ${missing[*]}' failed (as $owner); run it, then run this again." >&2
        return 1
    }
}

# bench_row NAME LAZARET BASELINE UNIT GOAL: one machine-readable result
# line for scripts/bench-all.sh (tab-separated, after the word ROW). GOAL
# is a ratio bound ("<=1.3x", ">=0.5x") or a difference bound ("<=+2ms");
# "-" when the row has none.
bench_row() {
    printf 'ROW\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5"
}

# domain_bundle LAZARET WORKSPACE [SECONDS]: prints the runtime bundle
# directory of the Domain ready for WORKSPACE (any profile), waiting up to
# SECONDS (default 300) for it. Finds the Domain by `lazaret ps --json`,
# never by listing the runtime root: the same user's other Domains come
# and go there.
domain_bundle() {
    local lz=$1 ws secs=${3:-300} id dir
    ws=$(realpath "$2")
    for _ in $(seq $((secs * 10))); do
        id=$("$lz" ps --json 2>/dev/null | python3 -c '
import json, sys
for d in json.load(sys.stdin):
    if d.get("workspace") == sys.argv[1] and d.get("phase") == "ready":
        print(d["domain_id"]); break
' "$ws" 2>/dev/null || true)
        dir=/tmp/lazaret-$(id -u)/$id/gen/bundle
        if [ -n "$id" ] && [ -f "$dir/config.json" ]; then
            echo "$dir"
            return 0
        fi
        sleep 0.1
    done
    echo "domain_bundle: no Domain ready for $ws within ${secs}s" >&2
    return 1
}

# bind_bundle TEMPLATE DIR WORKSPACE ARG...: writes DIR/config.json, a raw
# runsc bundle from TEMPLATE (the config.json of a bundle Lazaret
# generated, see domain_bundle) whose /workspace is a plain bind of
# WORKSPACE instead of the view, running ARG... in /workspace: the
# reference the view is compared with (scripts/posix-suite.sh,
# scripts/fsx.sh).
bind_bundle() {
    local template=$1 dir=$2 ws=$3; shift 3
    mkdir -p "$dir"
    python3 - "$template" "$dir/config.json" "$ws" "$@" <<'PY'
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
c["process"]["args"] = args
c["process"]["cwd"] = "/workspace"
c["process"]["terminal"] = False
json.dump(c, open(dst, "w"))
PY
}

# run_bind DIR ROOT NAME: runs the bundle in DIR (bind_bundle) as container
# NAME with runsc state in ROOT, in a user, mount and network namespace of
# its own (no network), as Lazaret runs its sandboxes; its output on stdout.
run_bind() {
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
        runsc --root="$2" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1" "$3"' \
        sh "$1" "$2" "$3"
}
