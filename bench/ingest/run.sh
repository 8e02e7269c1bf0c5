#!/usr/bin/env bash
# bench/ingest/run.sh — metric ingestion: hyperfarm beside Optuna 3.1 + SQLite.
#
# Same machine, same run, one after the other (so they never share the CPU):
#   1. Optuna: bench/ingest/optuna_ingest.py, trial.report(value, step) per
#      step into an RDB storage on a sqlite:/// file (one value per report).
#   2. hyperfarm: bin/bench/loadgen against a freshly spawned scheduler, in
#      ingestion mode: agents heartbeat back to back (--hb-ms 0), each
#      heartbeat carrying --per-hb reports for each of 8 running trials, one
#      value per report so a report is the same unit as Optuna's.
# A report counts only once the scheduler acknowledged it (HTTP 200 on the
# heartbeat, whose metrics are written in one transaction).
#
# Environment: HF_BIN (default ./bin), INGEST_SECONDS (Optuna's measuring
# time, default 15), INGEST_AGENTS (default 50), INGEST_REPORTS (reports per
# trial, default 1500), INGEST_PER_HB (default 100), INGEST_THREADS (default 4).
# Prints both figures, the ratio and the target (>= 100x); exits 0 when both
# ran (1 when the target is missed, 2 when something could not run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
HF_BIN=${HF_BIN:-$PWD/bin}
PY=/usr/bin/python3
secs=${INGEST_SECONDS:-15}
agents=${INGEST_AGENTS:-50}
reports=${INGEST_REPORTS:-1500}
per_hb=${INGEST_PER_HB:-100}
threads=${INGEST_THREADS:-4}
log=$(mktemp -d /tmp/hf-ingest-XXXXXX)
trap 'rm -rf "$log"' EXIT

if ! $PY -c 'import optuna' 2>/dev/null; then
  echo "ingest: SKIP optuna: python3-optuna is not installed (scripts/install-deps --bench)"; exit 2
fi
if [[ ! -x $HF_BIN/bench/loadgen || ! -x $HF_BIN/hyperfarm-scheduler ]]; then
  echo "ingest: SKIP: $HF_BIN/bench/loadgen or $HF_BIN/hyperfarm-scheduler not built"; exit 2
fi

echo "ingest: Optuna $($PY -c 'import optuna; print(optuna.__version__)') with SQLite, ${secs} s ..."
$PY bench/ingest/optuna_ingest.py --seconds "$secs" >"$log/optuna" 2>&1 || { cat "$log/optuna"; exit 2; }
grep -v '^OPTUNA ' "$log/optuna"
optuna=$(sed -n 's/^OPTUNA //p' "$log/optuna" | jq -r .reports_per_s)

trials=$((agents * 8))
echo "ingest: hyperfarm scheduler, $agents agents x 8 trials x $reports reports ($per_hb per heartbeat, back to back) ..."
"$HF_BIN/bench/loadgen" --agents "$agents" --slots 8 --trials "$trials" --reports "$reports" \
  --per-hb "$per_hb" --values 1 --hb-ms 0 --threads "$threads" --probe-hz 5 --max-seconds 120 \
  --name-prefix ingest >"$log/hf" 2>&1
lrc=$?
grep -E 'metric reports acked|heartbeat latency|user GET latency|scheduler RSS|database|metrics rows|shutdown|STALLED|stopping' "$log/hf"
line=$(sed -n 's/^LOADGEN //p' "$log/hf")
if [[ -z $line ]]; then echo "ingest: loadgen produced no result (exit $lrc):"; tail -20 "$log/hf"; exit 2; fi
hf=$(jq -r .reports_per_s <<<"$line")
ratio=$(awk -v a="$hf" -v b="$optuna" 'BEGIN{ if (b > 0) printf "%.0f", a / b; else print "inf" }')
echo
printf '%-44s %12s reports/s\n' "hyperfarm scheduler (SQLite WAL, batched)" "$hf"
printf '%-44s %12s reports/s\n' "Optuna $($PY -c 'import optuna; print(optuna.__version__)') RDBStorage sqlite:///" "$optuna"
ok=$(awk -v r="$ratio" 'BEGIN{ print (r >= 100) ? 1 : 0 }')
printf '%-44s %12sx  (target >= 100x: %s)\n' "ratio" "$ratio" "$([[ $ok == 1 ]] && echo met || echo MISSED)"
echo "INGEST {\"hyperfarm_reports_per_s\": $hf, \"optuna_reports_per_s\": $optuna, \"ratio\": $ratio, \"loadgen_exit\": $lrc}"
[[ $lrc == 0 || $lrc == 3 ]] || { echo "ingest: loadgen exit $lrc (4 = acknowledged points missing from the db)"; exit 1; }
[[ $ok == 1 ]]
