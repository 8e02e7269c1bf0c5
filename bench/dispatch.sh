#!/usr/bin/env bash
# bench/dispatch.sh — docs/design.md §8's "dispatch: trial ready -> process
# running, p99 < 100 ms on loopback", with real processes (not a test: it
# prints figures; no peer is named for this row). A scheduler and 2 agents
# (2 slots each) on loopback run N short fake_trial trials (4 at a time);
# for every trial the API's created_at -> started_at is taken (started_at
# is when the agent reported the process spawned; a trial is created when
# a slot is free: the searcher is asked only for what can be placed now),
# and p50/p90/p99/max are printed with the target verdict. Extra agent
# flags via HF_AGENT_ARGS (e.g. --heartbeat-ms 5000). bench/loadgen has the
# same figure for 1,000 simulated agents (no process started).
#   HF_BIN=$PWD/bin bash bench/dispatch.sh [N]        (default 200)
source "$(dirname "$0")/../tests/system/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup
N=${1:-200}
hf_start_scheduler
hf_start_agent m1 --slots 2
hf_start_agent m2 --slots 2
exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" --argjson n "$N" '{
  name: "dispatch-latency", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: $n, max_concurrent_trials: 4, seed: 1},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, epochs: 2, sleep_ms: 50},
  trial: {command: [$prog], max_restarts: 0}}')
id=$(hf_submit "$exp")
hf_wait_experiment "$id" 300
hf_get "/api/v1/experiments/$id/trials" | jq -r '.trials[] | (.started_at - .created_at)' | sort -n >"$HF_TMP/lat"
n=$(wc -l <"$HF_TMP/lat")
pct() { awk -v p="$1" -v n="$n" 'NR == int((n - 1) * p / 100) + 1 { print; exit }' "$HF_TMP/lat"; }
p99=$(pct 99)
echo "dispatch latency (created_at -> started_at) over $n trials, 2 agents: p50 $(pct 50) ms, p90 $(pct 90) ms, p99 $p99 ms, max $(tail -1 "$HF_TMP/lat") ms"
if (( n > 0 && p99 < 100 )); then verdict=met; else verdict=MISSED; fi
echo "dispatch, trial ready -> process running, real agents on loopback: p99 $p99 ms (target p99 < 100 ms: $verdict)"
prom=$(curl -fsS "$HF_URL/metrics" | grep '^hyperfarm_dispatch_latency_seconds' | head -30)
echo "$prom" | grep -E '_count|_sum' || true
