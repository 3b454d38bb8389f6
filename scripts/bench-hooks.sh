#!/usr/bin/env bash
# Benchmark of Git's execution surface (src/view/hostexec/): the time
# `lazaret git show --json` takes to compute it (the same computation every
# Domain start makes in the client, and the view once more) on a workspace
# of FILES empty files in directories of 1,000, with 20 nested
# repositories (each with a core.hooksPath of its own). Prints the median
# of ROUNDS runs and the number of paths and repositories found. Run as a
# user (Lazaret refuses root); LAZARET is the binary (default: the release
# build).
#
#   scripts/bench-hooks.sh [ROUNDS] [FILES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}
files=${2:-200000}
bin=${LAZARET:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
ws=$(mktemp -d "${TMPDIR:-/tmp}/lz-bench-hooks.XXXXXX")
trap 'rm -rf "$ws"' EXIT
git init -q "$ws"
dirs=$(( (files + 999) / 1000 ))
for d in $(seq 1 "$dirs"); do
    mkdir -p "$ws/tree/d$d"
    (cd "$ws/tree/d$d" && seq -f f%g 1 1000 | xargs touch)
done
for n in $(seq 1 20); do
    git init -q "$ws/tree/d$n/repo$n"
    git -C "$ws/tree/d$n/repo$n" config core.hooksPath .githooks
done
sync
times=()
for _ in $(seq 1 "$rounds"); do
    t0=$(date +%s%N)
    out=$("$bin" git show --json -w "$ws")
    t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000000 )))
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
median=$(echo "$sorted" | sed -n "$(( (rounds + 1) / 2 ))p")
repos=$(grep -o '/\.githooks"' <<<"$out" | wc -l)
echo "git surface of $files files, 20 nested repositories: median ${median} ms over $rounds runs (all: $(echo $sorted)); hooks directories found: $repos"
