#!/usr/bin/env bash
# bench/durability/run.sh — what durability and online backups cost (issue #31;
# docs/scheduler.md "Durability", docs/operations.md "Backup and restore").
# Same machine, same run, one after the other:
#
#   1. --synchronous normal vs full: bin/bench/loadgen in ingestion mode
#      (agents heartbeat back to back, DUR_PER_HB reports each) against a
#      fresh scheduler of each mode: acknowledged reports/s and heartbeat
#      p50/p99; then paced agents (a heartbeat every 250 ms, one report):
#      heartbeat p99 — what a farm's agents see.
#   2. an online backup: a scheduler whose database holds DUR_POINTS metric
#      points and DUR_CKPT_MB MiB of checkpoints; paced agents' heartbeat p99
#      without a backup, then while `hyperfarm backup` runs back to back;
#      each backup's duration and size.
#
# `bench/run durability` runs it (give it BENCH_TIMEOUT_DURABILITY=900 with
# larger settings). Environment: HF_BIN (default ./bin), DUR_AGENTS
# (ingestion agents, 10), DUR_REPORTS (reports per trial in ingestion, 600),
# DUR_PER_HB (100),
# DUR_SKIP_SYNC (set: only part 2), DUR_POINTS (prefill for 2, 1000000), DUR_CKPT_MB (checkpoint MiB for 2,
# 256, in 64 MiB objects), DUR_TMP (default /tmp: the disk under test),
# DUR_SCHED_ARGS (more scheduler flags for 2, e.g. --backup-rate-mb 16),
# DUR_PACED_REPORTS (reports per paced trial in 2, 40: a paced run lasts
# about DUR_PACED_REPORTS/4 s; make it cover a whole backup of a large
# store, e.g. 1500 for 10 GiB at the default rate),
# DUR_COVER_BACKUP (set: instead of backups back to back during one paced
# run, one backup with paced runs back to back for all of it; the figure is
# the worst run's p99),
# DUR_FILL_SECONDS (the prefill's time limit, default 300 + DUR_POINTS/20000:
# the issue's 10 million points take about 10 minutes here).
# Prints the figures side by side with the ratios; exit 0 when all ran, 2
# when something could not run.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
HF_BIN=${HF_BIN:-$PWD/bin}
agents=${DUR_AGENTS:-10}
reports=${DUR_REPORTS:-600}
per_hb=${DUR_PER_HB:-100}
points=${DUR_POINTS:-1000000}
ckmb=${DUR_CKPT_MB:-256}
fill_s=${DUR_FILL_SECONDS:-$(( 300 + points / 20000 ))}
LG=$HF_BIN/bench/loadgen
[[ -x $LG && -x $HF_BIN/hyperfarm-scheduler && -x $HF_BIN/hyperfarm ]] || { echo "durability: SKIP: build first (make)"; exit 2; }
tmp=$(mktemp -d "${DUR_TMP:-/tmp}/hf-durability-XXXXXX")
spid=""
cleanup() { [[ -n $spid ]] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

field() { sed -n 's/^LOADGEN //p' "$1" | jq -r ".$2"; }

# ---- 1. synchronous normal vs full ----------------------------------------
declare -A rps p99 p50 pp99
for mode in ${DUR_SKIP_SYNC:+none} normal full; do
  [[ $mode == none ]] && break
  echo "durability: --synchronous $mode: ingestion, $agents agents x 8 trials x $reports reports ($per_hb per heartbeat) ..."
  "$LG" --agents "$agents" --slots 8 --trials $((agents * 8)) --reports "$reports" --per-hb "$per_hb" --values 1 \
    --hb-ms 0 --threads 4 --probe-hz 5 --max-seconds 90 --name-prefix "ing-$mode" \
    --sched-arg --synchronous --sched-arg "$mode" >"$tmp/ing-$mode" 2>&1
  [[ -n $(field "$tmp/ing-$mode" reports_per_s) ]] || { tail -20 "$tmp/ing-$mode"; exit 2; }
  rps[$mode]=$(field "$tmp/ing-$mode" reports_per_s)
  p50[$mode]=$(field "$tmp/ing-$mode" hb_p50_ms)
  p99[$mode]=$(field "$tmp/ing-$mode" hb_p99_ms)
  echo "durability: --synchronous $mode: paced agents (100 x 2 slots, a heartbeat every 250 ms) ..."
  "$LG" --agents 100 --slots 2 --trials 200 --reports 40 --per-hb 1 --values 4 --hb-ms 250 --threads 4 \
    --probe-hz 5 --max-seconds 60 --name-prefix "paced-$mode" \
    --sched-arg --synchronous --sched-arg "$mode" >"$tmp/paced-$mode" 2>&1
  pp99[$mode]=$(field "$tmp/paced-$mode" hb_p99_ms)
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2f", a / b; else print "inf" }'; }
if [[ -z ${DUR_SKIP_SYNC:-} ]]; then
echo
printf '%-44s %14s %14s %8s\n' "" "normal" "full" "full/normal"
printf '%-44s %14s %14s %8s\n' "ingestion, acknowledged reports/s" "${rps[normal]}" "${rps[full]}" "$(ratio "${rps[full]}" "${rps[normal]}")"
printf '%-44s %14s %14s %8s\n' "ingestion, heartbeat p50 ms" "${p50[normal]}" "${p50[full]}" "$(ratio "${p50[full]}" "${p50[normal]}")"
printf '%-44s %14s %14s %8s\n' "ingestion, heartbeat p99 ms" "${p99[normal]}" "${p99[full]}" "$(ratio "${p99[full]}" "${p99[normal]}")"
printf '%-44s %14s %14s %8s\n' "paced agents, heartbeat p99 ms" "${pp99[normal]}" "${pp99[full]}" "$(ratio "${pp99[full]}" "${pp99[normal]}")"
echo "DURABILITY_SYNC {\"normal_reports_per_s\": ${rps[normal]}, \"full_reports_per_s\": ${rps[full]}, \"normal_hb_p99_ms\": ${p99[normal]}, \"full_hb_p99_ms\": ${p99[full]}, \"normal_paced_hb_p99_ms\": ${pp99[normal]}, \"full_paced_hb_p99_ms\": ${pp99[full]}}"
fi

# ---- 2. heartbeats during an online backup --------------------------------
db=$tmp/big.db
# shellcheck disable=SC2086
"$HF_BIN/hyperfarm-scheduler" --listen 127.0.0.1:0 --db "$db" --max-conns-per-ip 0 --max-checkpoint-mb 1024 \
  ${DUR_SCHED_ARGS:-} >"$tmp/sched.log" 2>&1 &
spid=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*ready on port \([0-9]*\).*/\1/p' "$tmp/sched.log")
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { echo "durability: the scheduler did not start"; cat "$tmp/sched.log"; exit 2; }
URL=http://127.0.0.1:$port
echo "durability: prefill: $ckmb MiB of checkpoints (one trial on an agent of its own) ..."
E=$(curl -sf -X POST -H 'Content-Type: application/json' "$URL/api/v1/experiments" -d '{"name": "ck",
  "objective": {"metric": "m", "goal": "maximize"}, "searcher": {"name": "random", "max_trials": 1, "seed": 1},
  "hyperparameters": {"x": {"type": "uniform", "min": 0, "max": 1}}, "trial": {"command": ["true"]},
  "checkpoint_policy": {"keep_latest": 100000, "keep_best_trials": 0}}' | jq -r .id)
AG=$(curl -sf -X POST -H 'Content-Type: application/json' "$URL/api/v1/agents" \
  -d '{"name": "ck", "slots": 1, "host": "127.0.0.1", "version": "bench"}' | jq -r .id)
T=""
for _ in $(seq 1 50); do
  T=$(curl -sf -X POST -H 'Content-Type: application/json' "$URL/api/v1/agents/$AG/heartbeat" -d '{"running": []}' \
      | jq -r '.assign[0].trial_id // empty')
  [[ -n $T ]] && break
  sleep 0.1
done
[[ -n $T ]] || { echo "durability: no trial for the checkpoints (experiment $E)"; exit 2; }
for i in $(seq 1 $(( ckmb / 64 ))); do
  head -c $((64 << 20)) /dev/urandom >"$tmp/obj"
  sha=$(sha256sum "$tmp/obj" | cut -c1-64)
  curl -sf -o /dev/null -T "$tmp/obj" -H "X-Hyperfarm-Sha256: $sha" -H 'Content-Type: application/octet-stream' \
    "$URL/api/v1/trials/$T/checkpoints?step=$i&attempt=1" || { echo "durability: checkpoint upload failed"; exit 2; }
done
rm -f "$tmp/obj"
echo "durability: prefill: checkpoints done after ${SECONDS}s"
per_trial=$(( points / 160 ))
echo "durability: prefill: $points metric points ..."
"$LG" --url "$URL" --pid "$spid" --agents 20 --slots 8 --trials 160 --reports "$per_trial" --per-hb 500 --values 1 \
  --hb-ms 0 --threads 4 --probe-hz 0 --max-seconds "$fill_s" --name-prefix fill >"$tmp/fill" 2>&1
echo "durability: prefill: metric points done after ${SECONDS}s: $(sed -n 's/^LOADGEN //p' "$tmp/fill" | jq -c '{reports_per_s, seconds}' 2>/dev/null)"
mkdir -p "$tmp/backups"
paced() {   # name
  "$LG" --url "$URL" --pid "$spid" --agents 100 --slots 2 --trials 200 --reports "${DUR_PACED_REPORTS:-40}" --per-hb 1 \
    --values 4 --hb-ms 250 --threads 4 --probe-hz 5 --max-seconds $(( 60 + ${DUR_PACED_REPORTS:-40} / 2 )) \
    --name-prefix "$1" >"$tmp/$1" 2>&1
}
echo "durability: paced agents, no backup ..."
paced quiet
if [[ -n ${DUR_COVER_BACKUP:-} ]]; then
  # One backup, and paced runs back to back for as long as it runs: every
  # moment of it is measured (a paced run is ~30 s, a backup of 10 GiB
  # several minutes). The figure is the highest of the runs' p99s.
  echo "durability: one backup, paced agents back to back while it runs ..."
  "$HF_BIN/hyperfarm" --url "$URL" backup "$tmp/backups" --json >"$tmp/backups.json" 2>"$tmp/backup.err" &
  bpid=$!
  n=1; i=0
  : >"$tmp/busy-p99s"
  while kill -0 "$bpid" 2>/dev/null; do
    paced "busy$i"
    field "$tmp/busy$i" hb_p99_ms >>"$tmp/busy-p99s"
    i=$((i + 1))
  done
  wait "$bpid" || { echo "durability: backup failed: $(cat "$tmp/backup.err")"; exit 2; }
  cp "$tmp/busy$((i - 1))" "$tmp/busy"
  echo "durability: $i paced runs during the backup, heartbeat p99 each: $(tr '\n' ' ' <"$tmp/busy-p99s")ms"
  b99_worst=$(sort -g "$tmp/busy-p99s" | tail -1)
else
echo "durability: paced agents while backups run back to back ..."
paced busy &
lpid=$!
n=0
: >"$tmp/backups.json"
while kill -0 "$lpid" 2>/dev/null; do
  rm -rf "$tmp"/backups/hf-*   # one snapshot on the disk at a time: every backup copies everything
  "$HF_BIN/hyperfarm" --url "$URL" backup "$tmp/backups" --json >>"$tmp/backups.json" 2>"$tmp/backup.err" \
    || { echo "durability: backup failed: $(cat "$tmp/backup.err")"; break; }
  n=$((n + 1))
done
wait "$lpid"
fi
q99=$(field "$tmp/quiet" hb_p99_ms); b99=${b99_worst:-$(field "$tmp/busy" hb_p99_ms)}
dur=$(jq -s 'map(.duration_ms) | add / length | floor' "$tmp/backups.json")
dbb=$(jq -s '.[0].db_bytes' "$tmp/backups.json")
obj=$(jq -s '.[0].bytes_copied' "$tmp/backups.json")
rows=$(sqlite3 "file:$db?mode=ro" 'SELECT count(*) FROM metrics' 2>/dev/null || echo "?")
echo
echo "database: $rows metric rows, $dbb bytes; checkpoints: $obj bytes; $n backups during the run, mean $dur ms each"
printf '%-44s %14s %14s %8s\n' "" "no backup" "backup" "ratio"
printf '%-44s %14s %14s %8s\n' "paced agents, heartbeat p99 ms" "$q99" "$b99" "$(ratio "$b99" "$q99")"
echo "paced runs: $(field "$tmp/quiet" seconds) s without, $(field "$tmp/busy" seconds) s with backups (the last backup ended after the run)"
echo "DURABILITY_BACKUP {\"metric_rows\": $rows, \"db_bytes\": $dbb, \"object_bytes\": $obj, \"backups\": $n, \"backup_ms\": $dur, \"quiet_hb_p99_ms\": $q99, \"backup_hb_p99_ms\": $b99}"
