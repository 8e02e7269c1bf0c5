#!/usr/bin/env bash
# bench/loadgen_ab.sh — bin/bench/loadgen against two schedulers in one run,
# before and after a change (docs/operations.md, "bench/loadgen"): the
# scheduler of git revision REV (default HEAD), built in a temporary git
# worktree, and this tree's bin/hyperfarm-scheduler. The same loadgen (this
# tree's, which asks the long-poll for the push; an older scheduler ignores
# assign=1 and its agents heartbeat to fetch their work) runs with the same
# arguments against each, one after the other, and a table of both is
# printed: dispatch p50/p99 over all trials, on the refill path and on the
# cold path, heartbeat p99, scheduler RSS, and what was lost (trials not
# completed or failed, acknowledged points missing from the database).
#
#   bench/loadgen_ab.sh [-r REV] [-b DIR] [LOADGEN ARGS...]
#     -r REV   the "before" revision (default HEAD)
#     -b DIR   use DIR/hyperfarm-scheduler as "before" (no build)
#     LOADGEN ARGS  default: --full --reports 10
# Heavy at --full (1,000 agents, 100,000 trials: minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=HEAD before_dir=
while (( $# )); do
  case $1 in
    -r) rev=$2; shift 2 ;;
    -b) before_dir=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
args=("$@")
(( ${#args[@]} )) || args=(--full --reports 10)
lg=$root/bin/bench/loadgen
after=$root/bin/hyperfarm-scheduler
[[ -x $lg && -x $after ]] || { echo "loadgen_ab: build first (make -j2)" >&2; exit 2; }
wt=
cleanup() { [[ -n $wt ]] && git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true; }
trap cleanup EXIT
if [[ -z $before_dir ]]; then
  wt=$(mktemp -d /tmp/hf-ab-XXXXXX)
  rmdir "$wt"
  git -C "$root" worktree add --detach "$wt" "$rev" >/dev/null
  echo "loadgen_ab: building the scheduler of $(git -C "$wt" rev-parse --short HEAD) in $wt"
  make -C "$wt" -j2 bin/hyperfarm-scheduler >"$wt.build.log" 2>&1 \
    || { tail -20 "$wt.build.log"; exit 1; }
  before_dir=$wt/bin
fi
run() {  # NAME SCHEDULER -> the LOADGEN json line in $out/NAME
  echo "loadgen_ab: $1: $lg ${args[*]} --scheduler $2"
  "$lg" "${args[@]}" --scheduler "$2" | tee "$out/$1.log" | grep -E '^loadgen: +[0-9]+ s|^dispatch|^  slot|STALL' || true
  grep '^LOADGEN ' "$out/$1.log" | sed 's/^LOADGEN //' >"$out/$1.json"
}
out=$(mktemp -d /tmp/hf-ab-out-XXXXXX)
run before "$before_dir/hyperfarm-scheduler"
run after "$after"
row() {  # LABEL JQ-EXPR
  printf '%-44s %22s %22s\n' "$1" "$(jq -r "$2" "$out/before.json")" "$(jq -r "$2" "$out/after.json")"
}
echo
echo "== loadgen before -> after (${args[*]}) =="
printf '%-44s %22s %22s\n' "" "before ($rev)" "after (this tree)"
row "dispatch, all trials p50 / p99 (ms)" '"\(.dispatch_p50_ms) / \(.dispatch_p99_ms)"'
row "  refill (work waits, slot frees) p50 / p99" '"\(.dispatch_refill_p50_ms // "-") / \(.dispatch_refill_p99_ms)"'
row "  cold (slot idle at submit) p50 / p99" '"\(.dispatch_cold_p50_ms) / \(.dispatch_cold_p99_ms)"'
row "  cold trials" '.dispatch_cold_n'
row "heartbeat p50 / p99 (ms)" '"\(.hb_p50_ms) / \(.hb_p99_ms)"'
row "API GET p50 / p99 (ms)" '"\(.api_p50_ms) / \(.api_p99_ms)"'
row "reports/s sustained (best 5 s)" '"\(.reports_per_s) (\(.best5_reports_per_s))"'
row "scheduler RSS peak / VmHWM (MiB)" '"\(.rss_peak_kb / 1024 | floor) / \(.rss_hwm_kb / 1024 | floor)"'
row "trials completed / failed (of trials)" '"\(.trials_done) / \(.sched_failed) (\(.trials))"'
row "points acked / rows in db" '"\(.points) / \(.db_metric_rows)"'
row "heartbeats failed" '.hb_failed'
row "assignments pushed by the long-poll" '.pushes // 0'
row "seconds" '.seconds'
echo "(logs: $out)"
