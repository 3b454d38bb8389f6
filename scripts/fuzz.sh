#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: coverage-guided fuzzing of every
# parser the sandbox or a remote host feeds (docs/fuzzing.md). Builds the
# libFuzzer harness in tests/fuzz (stable toolchain; no sanitizer: the
# targets are safe Rust, a bug shows as a panic), then runs each target
# (default: all of them) for SECONDS (default 60), one at a time, on one
# core, at low priority. Starts from the committed seeds in
# tests/fuzz/corpus/TARGET; what it finds on the way stays in
# tests/fuzz/target/corpus/TARGET (not committed; FUZZ_MERGE=1 folds the
# inputs that add coverage into the committed corpus). A crash's input is
# written to tests/fuzz/artifacts/TARGET/; the script then says which
# target and where, and exits 1 after the other targets ran.
#
# Environment: FUZZ_MAX_LEN (default 16384 bytes per input),
# FUZZ_MERGE=1 (see above), FUZZ_KEEP_GOING=1: go on after a crash
# (libFuzzer's fork mode, still one core) to find the bugs behind a known
# one; its crash inputs go to tests/fuzz/target/crashes/TARGET/ and the
# script lists one line per distinct panic (location and message).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

secs=${1:-60}
shift || true
case $secs in
    '' | *[!0-9]*)
        echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
        exit 2
        ;;
esac
use_cargo "$PWD"
if ! command -v c++ >/dev/null 2>&1; then
    echo "fuzz.sh: no C++ compiler (c++): libfuzzer-sys builds libFuzzer with it; install g++ (apt-get install g++)" >&2
    exit 2
fi

triple=x86_64-unknown-linux-gnu
tdir=$PWD/tests/fuzz/target
# libFuzzer's coverage: SanitizerCoverage instrumentation, all stable
# rustc flags. RUSTFLAGS replaces .cargo/config.toml's target rustflags
# (`+crt-static`, which the harness does not want) for this build only.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cforce-frame-pointers=yes"
echo "fuzz.sh: building the harness (tests/fuzz, release with overflow checks)"
nice -n 19 cargo build --release --locked --manifest-path tests/fuzz/Cargo.toml \
    --target "$triple" --target-dir "$tdir" -j 1
bin=$tdir/$triple/release/lazaret-fuzz

if [ $# -eq 0 ]; then
    set -- $(ls tests/fuzz/corpus)
fi

# CPU seconds the shell's children used so far (user + system), into
# $cpu: `times` in this shell (a subshell has its own children).
child_cpu() {
    times >"$tdir/times"
    cpu=$(tail -n1 "$tdir/times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
}

failed=()
for t in "$@"; do
    seeds=tests/fuzz/corpus/$t
    work=$tdir/corpus/$t
    art=tests/fuzz/artifacts/$t
    if [ ! -d "$seeds" ]; then
        echo "fuzz.sh: no corpus tests/fuzz/corpus/$t (targets: $(ls tests/fuzz/corpus | tr '\n' ' '))" >&2
        exit 2
    fi
    mkdir -p "$work" "$art"
    before=$(ls "$art")
    echo "fuzz.sh: $t for ${secs} s (seeds: $(ls "$seeds" | wc -l))"
    start=$SECONDS
    child_cpu
    cpu0=$cpu
    rc=0
    mode=()
    if [ "${FUZZ_KEEP_GOING:-0}" = 1 ]; then
        art=$tdir/crashes/$t
        rm -rf "$art"
        mkdir -p "$art"
        before=
        mode=(-fork=1 -ignore_crashes=1)
    fi
    LAZARET_FUZZ_TARGET=$t nice -n 19 "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -max_len="${FUZZ_MAX_LEN:-16384}" -use_value_profile=1 -print_final_stats=1 "${mode[@]}" \
        -artifact_prefix="$art/" "$work" "$seeds" >"$tdir/$t.log" 2>&1 || rc=$?
    if [ ${#mode[@]} -gt 0 ] && [ -n "$(ls "$art")" ]; then
        echo "fuzz.sh: $t: $(ls "$art" | wc -l) crash inputs in $art; distinct panics (count, where, what):"
        for f in "$art"/*; do
            LAZARET_FUZZ_TARGET=$t "$bin" "$f" 2>&1 | grep -m1 -A1 'panicked at' | sed 's/^thread .* panicked at //' | paste -sd' ' - || true
        done | sort | uniq -c | sort -rn | sed "s/^/fuzz.sh: $t:   /"
        rc=1
    fi
    child_cpu
    echo "fuzz.sh: $t: $((SECONDS - start)) s, $((cpu - cpu0)) CPU seconds; $(grep -E '^#[0-9]+' "$tdir/$t.log" | tail -n1)"
    if [ $rc -ne 0 ]; then
        new=$(comm -13 <(echo "$before") <(ls "$art") | head -n1)
        new=${new:+$art/$new}
        if [ ${#mode[@]} -eq 0 ]; then
            grep -m1 -E "panicked at|ERROR: libFuzzer" -A3 "$tdir/$t.log" | sed "s/^/fuzz.sh: $t: /" || true
        fi
        echo "fuzz.sh: $t FAILED after $((SECONDS - start)) s (exit $rc): input ${new:-not written}; log $tdir/$t.log" >&2
        echo "fuzz.sh: replay: LAZARET_FUZZ_TARGET=$t $bin ${new:-INPUT}" >&2
        failed+=("$t")
    elif [ "${FUZZ_MERGE:-0}" = 1 ]; then
        LAZARET_FUZZ_TARGET=$t nice -n 19 "$bin" -merge=1 -max_len="${FUZZ_MAX_LEN:-16384}" "$seeds" "$work" \
            >>"$tdir/$t.log" 2>&1
        echo "fuzz.sh: $t: merged, $(ls "$seeds" | wc -l) inputs in $seeds"
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz.sh: crashes in: ${failed[*]} (inputs under tests/fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz.sh: $# targets ran ${secs} s each, no crash"
