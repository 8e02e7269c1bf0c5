#!/usr/bin/env bash
# test_e2e_sweep.sh — the foundation's main acceptance test.
#
# A real scheduler and two real agents on loopback ports with a temporary
# database; a 12-trial random sweep of tests/fake_trial with
# max_concurrent_trials 3 (the two agents have 2 slots each, so the cap and
# not the slots is what limits). Checks:
#   1. the sweep ends COMPLETED and every trial COMPLETED (exit 0) on one of
#      the two agents;
#   2. every trial's metrics and logs are queryable over the API;
#   3. never more than 3 trials RUNNING/ASSIGNED at once, both by sampling
#      the API while it runs and from the trials' start/end times and from
#      their event history;
#   4. after kill -9 of the scheduler and a restart on the same database,
#      the experiment, trials, metrics, logs and events read back identical.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

MAXC=3
hf_start_scheduler
hf_start_agent a1 --slots 2
hf_start_agent a2 --slots 2

exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" --argjson maxc $MAXC '{
  name: "e2e-sweep",
  objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 12, max_concurrent_trials: $maxc, seed: 7},
  hyperparameters: {
    x:  {type: "uniform", min: 0, max: 1},
    lr: {type: "log", min: 0.01, max: 1},
    epochs: 3, sleep_ms: 250
  },
  trial: {command: [$prog], max_restarts: 0}
}')
id=$(hf_submit "$exp")
hf_log "submitted experiment $id"

# Sample the number of placed trials while the sweep runs.
samples=$HF_TMP/samples
(
  while :; do
    curl -fsS -m 2 "$HF_URL/api/v1/experiments/$id/trials" 2>/dev/null \
      | jq '[.trials[] | select(.state == "RUNNING" or .state == "ASSIGNED")] | length' 2>/dev/null \
      >>"$samples" || true
    sleep 0.1
  done
) &
sampler=$!
hf_track "$sampler"
hf_wait_experiment "$id" 90
hf_kill_pid "$sampler"

nsamples=$(wc -l <"$samples")
maxseen=$(sort -n "$samples" | tail -1)
hf_log "sampled $nsamples times; most trials placed at once: $maxseen"
(( nsamples >= 10 )) || hf_fail "too few samples ($nsamples) to judge concurrency"
(( maxseen <= MAXC )) || hf_fail "API showed $maxseen trials running at once, max_concurrent_trials is $MAXC"
(( maxseen >= 2 )) || hf_fail "never more than $maxseen trial running: the sweep was not run concurrently"

hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED"' "experiment COMPLETED"
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.counts.completed == 12' "counts.completed == 12"
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.best.trial_id > 0 and (.best.value | type == "number")' \
  "experiment has a best trial with a value"

trials=$(hf_get "/api/v1/experiments/$id/trials")
jq -e '.trials | length == 12' <<<"$trials" >/dev/null || hf_fail "expected 12 trials: $(jq -c '[.trials[].id]' <<<"$trials")"
hf_jq_assert 'all(.trials[]; .state == "COMPLETED" and .exit_code == 0)' "every trial COMPLETED with exit code 0" <<<"$trials"
hf_jq_assert 'all(.trials[]; .agent == "a1" or .agent == "a2")' "every trial ran on a1 or a2" <<<"$trials"
hf_jq_assert 'all(.trials[]; .started_at > 0 and .ended_at >= .started_at)' "start/end times set" <<<"$trials"
hf_jq_assert 'all(.trials[]; (.objective | type) == "number")' "every trial has an objective" <<<"$trials"
hf_log "trials per agent: $(jq -c '[.trials[].agent] | group_by(.) | map({(.[0]): length}) | add' <<<"$trials")"

# Concurrency from the recorded times: +1 at start, -1 at end, ends first on ties.
overlap=$(jq '[.trials[] | ([.started_at, 1], [.ended_at, -1])] | sort_by(.[0], .[1])
              | reduce .[] as $e ({c: 0, m: 0}; .c += $e[1] | .m = ([.m, .c] | max)) | .m' <<<"$trials")
hf_log "max overlap of [started_at, ended_at]: $overlap"
(( overlap <= MAXC )) || hf_fail "start/end times overlap $overlap deep, max_concurrent_trials is $MAXC"

# Per trial: events, metrics, logs.
evspans=()
for tid in $(jq -r '.trials[].id' <<<"$trials"); do
  t=$(hf_get "/api/v1/trials/$tid")
  jq -e '[.events[].type] | index("RUNNING") != null and index("COMPLETED") != null' <<<"$t" >/dev/null \
    || hf_fail "trial $tid events lack RUNNING/COMPLETED: $(jq -c '[.events[].type]' <<<"$t")"
  jq -e '[.events[].time] | . == sort' <<<"$t" >/dev/null || hf_fail "trial $tid events not in time order"
  evspans+=("$(jq -c '[(.events | map(select(.type == "RUNNING")) | first.time),
                       (.events | map(select(.type == "COMPLETED")) | last.time)]' <<<"$t")")
  m=$(hf_get "/api/v1/trials/$tid/metrics?name=val_acc")
  jq -e '.metrics | length == 3 and all(.[]; .name == "val_acc" and (.value | type) == "number")' <<<"$m" >/dev/null \
    || hf_fail "trial $tid: expected 3 val_acc reports: $(head -c 500 <<<"$m")"
  m=$(hf_get "/api/v1/trials/$tid/metrics")
  jq -e '[.metrics[].name] | index("train_loss") != null' <<<"$m" >/dev/null || hf_fail "trial $tid: no train_loss metric"
  jq -e '[.metrics[].seq] | . == sort and length == (unique | length)' <<<"$m" >/dev/null \
    || hf_fail "trial $tid: metric seq not increasing"
  l=$(hf_get "/api/v1/trials/$tid/logs")
  # fake_trial prints "epoch N done" once per epoch (metric lines may or may not be kept as log lines)
  jq -e '[.logs[] | select(.line | test("^epoch [0-9]+ done"))] | length == 3' <<<"$l" >/dev/null \
    || hf_fail "trial $tid: logs lack the 3 'epoch N done' lines: $(head -c 500 <<<"$l")"
  jq -e '[.logs[].seq] | . == sort' <<<"$l" >/dev/null || hf_fail "trial $tid: log seq not increasing"
  # paging: after=<first seq> skips it
  first=$(jq '.logs[0].seq' <<<"$l")
  hf_get "/api/v1/trials/$tid/logs?after=$first" \
    | jq -e --argjson f "$first" 'all(.logs[]; .seq > $f)' >/dev/null || hf_fail "trial $tid: logs?after= not honoured"
done
hf_log "ok: every trial has RUNNING/COMPLETED events, 3 val_acc reports, train_loss, its 3 log lines"
evoverlap=$(printf '%s\n' "${evspans[@]}" | jq -s '[.[] | ([.[0], 1], [.[1], -1])] | sort_by(.[0], .[1])
              | reduce .[] as $e ({c: 0, m: 0}; .c += $e[1] | .m = ([.m, .c] | max)) | .m')
hf_log "max overlap of RUNNING..COMPLETED events: $evoverlap"
(( evoverlap <= MAXC )) || hf_fail "event history shows $evoverlap trials running at once (cap $MAXC)"

# Everything survives kill -9 of the scheduler.
snapshot() {
  {
    hf_get "/api/v1/experiments/$id" | jq -S 'del(.config.searcher.seed_used?)'
    hf_get "/api/v1/experiments/$id/trials" | jq -S .
    for tid in $(jq -r '.trials[].id' <<<"$trials"); do
      hf_get "/api/v1/trials/$tid" | jq -S .
      hf_get "/api/v1/trials/$tid/metrics" | jq -S .
      hf_get "/api/v1/trials/$tid/logs" | jq -S .
    done
  } >"$1"
}
snapshot "$HF_TMP/before.json"
hf_stop_scheduler KILL
hf_log "scheduler killed with SIGKILL; restarting on the same database"
hf_restart_scheduler
snapshot "$HF_TMP/after.json"
if ! cmp -s "$HF_TMP/before.json" "$HF_TMP/after.json"; then
  diff <(head -c 200000 "$HF_TMP/before.json") <(head -c 200000 "$HF_TMP/after.json") | head -40 >&2
  hf_fail "rows differ after a scheduler restart"
fi
hf_log "ok: experiment, 12 trials, their events, metrics and logs identical after kill -9 + restart ($(wc -c <"$HF_TMP/before.json") bytes compared)"
# The agents come back to the restarted scheduler.
hf_wait_for 15 bash -c "curl -fsS '$HF_URL/api/v1/agents' | jq -e '[.agents[] | select(.state == \"ALIVE\" or .state == \"alive\" or .state == \"IDLE\" or .state == \"BUSY\")] | length == 2'" \
  || hf_log "note: agents' states after restart: $(hf_get /api/v1/agents | jq -c '[.agents[] | {name, state}]')"
hf_log "PASS"
