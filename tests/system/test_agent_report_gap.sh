#!/usr/bin/env bash
# test_agent_report_gap.sh — the heartbeats an agent sends at once for a
# report a searcher may stop on (the assignment's "prompt_metric") are
# spaced by the scheduler's "report_gap_ms", which scales with the farm as
# the heartbeat interval does (docs/protocol.md, docs/agent.md).
#
# A real scheduler and agent; a random sweep with median stopping (so the
# assignment names val_acc as prompt_metric) of one fake_trial that reports
# val_acc every ~10 ms for 200 epochs and is never stopped (min_trials 5).
#   1. default --heartbeat-rate (1000/s, one agent): report_gap_ms is 20, so
#      the agent heartbeats on nearly every other report: more than 40
#      heartbeats while the trial runs;
#   2. the scheduler restarted with --heartbeat-rate 2: one agent gets
#      report_gap_ms 500 (and a 500 ms interval), so the same trial may
#      cause at most about 2 report-triggered heartbeats a second: fewer
#      than 4 per second of the trial's run, all heartbeats counted, and
#      under a third of phase 1's.
# Both phases count hyperfarm_heartbeats_total (/metrics) from the
# submission to the end of the sweep: the load is what the cap is for.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

hf_start_scheduler
hf_start_agent a1 --slots 1

beats() { hf_get /metrics | awk '$1 == "hyperfarm_heartbeats_total" {print $2}'; }

# Runs one sweep of one trial; prints "HEARTBEATS SECONDS".
run_phase() {
  local name=$1 exp id b0 b1 t0 t1
  exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" --arg name "$name" '{
    name: $name,
    objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1, seed: 1, median_stopping: {min_trials: 5}},
    hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
    trial: {command: [$prog, "--epochs", "200", "--sleep-ms", "10"], max_restarts: 0}
  }')
  b0=$(beats)
  t0=$(date +%s.%N)
  id=$(hf_submit "$exp")
  hf_wait_experiment "$id" 60
  t1=$(date +%s.%N)
  b1=$(beats)
  hf_assert_eq "$(hf_exp_state "$id")" COMPLETED "phase $name: experiment state"
  awk -v n=$((b1 - b0)) -v a="$t0" -v b="$t1" 'BEGIN { printf "%d %.2f\n", n, b - a }'
}

read -r n1 s1 < <(run_phase default)
hf_log "default rate: $n1 heartbeats in ${s1} s"
(( n1 > 40 )) || hf_fail "with report_gap_ms 20 the agent sent only $n1 heartbeats in ${s1} s (prompt reports not sent at once?)"

hf_stop_scheduler
hf_restart_scheduler --heartbeat-rate 2
hf_wait_for 15 hf_agent_registered a1 || hf_fail "agent a1 did not come back"
read -r n2 s2 < <(run_phase capped)
hf_log "--heartbeat-rate 2: $n2 heartbeats in ${s2} s"
awk -v n="$n2" -v s="$s2" 'BEGIN { exit !(n < 4 * s + 2) }' ||
  hf_fail "with report_gap_ms 500 the agent sent $n2 heartbeats in ${s2} s (over 4 a second)"
(( n2 * 3 < n1 )) || hf_fail "capped phase sent $n2 heartbeats, not under a third of the default's $n1"
hf_log "ok"
