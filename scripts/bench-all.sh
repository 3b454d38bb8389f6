#!/usr/bin/env bash
# Every benchmark in one invocation, one table: each bench script runs in
# turn (as root: each switches to the test user itself), its full output
# goes to a log, and the rows it reports (`bench_row` in scripts/lib.sh)
# are printed as: row, Lazaret, baseline, unit, ratio (or difference),
# goal, whether it is met, and the load average when the script finished.
# Each script measures its baseline in the same invocation, interleaved
# with Lazaret, so the ratios compare like with like under the same load.
#
#   scripts/bench-all.sh [SCRIPT...]     (default: run escalate git workloads net state)
#
# The logs stay in $BENCH_LOGS (default: a new directory under /tmp, named
# at the end). bench-notify.sh evaluates a design that is not in the
# product and is not part of the table.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scripts=("$@")
[ ${#scripts[@]} -gt 0 ] || scripts=(run escalate git workloads net state)
logs=${BENCH_LOGS:-$(mktemp -d /tmp/lazaret-bench-all.XXXXXX)}
mkdir -p "$logs"
rows="$logs/rows"
: >"$rows"
failed=()
tty=false
[ -t 2 ] && tty=true
for s in "${scripts[@]}"; do
    f="$here/bench-$s.sh"
    [ -x "$f" ] || [ -f "$f" ] || { echo "bench-all: no script $f" >&2; exit 2; }
    $tty && printf 'bench-all: running bench-%s.sh (log: %s)\n' "$s" "$logs/$s.log" >&2
    start=$(date +%s)
    if bash "$f" >"$logs/$s.log" 2>&1; then
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        grep '^ROW' "$logs/$s.log" | awk -F'\t' -v s="$s" -v l="$load" 'BEGIN{OFS="\t"} {print s, $2, $3, $4, $5, $6, l}' >>"$rows"
        $tty && printf 'bench-all: bench-%s.sh done in %d s\n' "$s" $(( $(date +%s) - start )) >&2
    else
        failed+=("$s")
        echo "bench-all: bench-$s.sh failed; last lines of $logs/$s.log:" >&2
        tail -5 "$logs/$s.log" >&2
    fi
done

printf '%-8s %-62s %10s %10s %6s %10s %9s %4s  %s\n' script row lazaret baseline unit ratio goal met "load (1/5/15 min)"
awk -F'\t' '
function met(r, d, g,   op, v) {
    if (g == "-" || g == "") return "-"
    op = substr(g, 1, 2); v = substr(g, 3)
    if (v ~ /ms$/) { sub(/ms$/, "", v); return (op == "<=" ? d <= v + 0 : d >= v + 0) ? "yes" : "no" }
    sub(/x$/, "", v)
    return (op == "<=" ? r <= v + 0 : r >= v + 0) ? "yes" : "no"
}
{
    a = $3 + 0; b = $4 + 0; r = (b > 0) ? a / b : 0; d = a - b
    shown = ($6 ~ /ms$/) ? sprintf("%+.2f ms", d) : sprintf("%.3fx", r)
    printf "%-8s %-62s %10s %10s %6s %10s %9s %4s  %s\n", $1, $2, $3, $4, $5, shown, $6, met(r, d, $6), $7
}' "$rows"
echo "logs: $logs"
if [ ${#failed[@]} -gt 0 ]; then
    echo "bench-all: failed: ${failed[*]}" >&2
    exit 1
fi
