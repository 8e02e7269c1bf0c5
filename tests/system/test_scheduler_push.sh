#!/usr/bin/env bash
# test_scheduler_push.sh — the long-poll push (GET /agents/{id}/wait?assign=1,
# docs/protocol.md; docs/scheduler.md "Cold dispatch"), curl playing the
# agents over HTTP.
#
#   1. assign out of range: 400; without assign=1 the answer is the old
#      {"pending": ...} alone.
#   2. 3 idle agents × 4 slots park a wait with assign=1; an experiment of
#      12 trials is submitted: every wait is answered with its agent's 4
#      assignments (12 distinct trials in all, none twice), with no
#      heartbeat sent; one heartbeat per agent reports them started and
#      all 12 trials are RUNNING; that heartbeat's reply sends nothing again.
#   3. an agent whose long-poll did not ask for the push (an older agent)
#      is answered {"pending": true} alone and gets its assignment in its
#      heartbeat's reply, as before.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
hf_setup
hf_start_scheduler

register() {
  curl -fsS -m 5 -X POST "$HF_URL/api/v1/agents" \
    -d "{\"name\": \"$1\", \"slots\": $2, \"host\": \"127.0.0.1\", \"version\": \"t\", \"running\": []}" | jq -r .id
}

# ---- 1. the parameter
a0=$(register probe 0)
hf_api GET "/api/v1/agents/$a0/wait?timeout_ms=100&assign=2"
hf_assert_eq "$HF_STATUS" 400 "assign out of range"
hf_api GET "/api/v1/agents/$a0/wait?timeout_ms=100&assign=1"
hf_assert_eq "$HF_STATUS" 200 "idle wait with assign=1"
jq -e '.pending == false and (has("assign") | not)' <<<"$HF_BODY" >/dev/null || hf_fail "idle push wait: $HF_BODY"

# ---- 2. three idle agents with a push wait parked
ids=()
for n in 1 2 3; do ids+=("$(register "push$n" 4)"); done
wpids=()
for k in 0 1 2; do
  curl -fsS -m 20 "$HF_URL/api/v1/agents/${ids[$k]}/wait?timeout_ms=15000&assign=1" >"$HF_TMP/wait$k" &
  wpids+=($!)
done
sleep 0.5   # parked
exp=$(jq -n '{name: "push", objective: {metric: "m", goal: "maximize"},
  searcher: {name: "random", max_trials: 12, max_concurrent_trials: 16, seed: 1},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: ["true"], max_restarts: 0}}')
t0=$(date +%s%3N)
id=$(hf_submit "$exp")
wait "${wpids[@]}"
t1=$(date +%s%3N)
hf_log "submitted -> 3 pushes answered: $((t1 - t0)) ms"
(( t1 - t0 < 10000 )) || hf_fail "the waits were not answered by the push ($((t1 - t0)) ms: they expired)"
all=$(cat "$HF_TMP"/wait0 "$HF_TMP"/wait1 "$HF_TMP"/wait2 | jq -s '[.[].assign[]]')
jq -e 'length == 12 and ([.[].trial_id] | unique | length) == 12' <<<"$all" >/dev/null \
  || hf_fail "the pushes did not carry 12 distinct assignments: $(cat "$HF_TMP"/wait*)"
for k in 0 1 2; do
  jq -e '.pending == true and (.assign | length) == 4' "$HF_TMP/wait$k" >/dev/null \
    || hf_fail "agent $k's push: $(cat "$HF_TMP/wait$k")"
done
hf_get "/api/v1/experiments/$id/trials" | jq -e '[.trials[] | select(.state == "ASSIGNED")] | length == 12' >/dev/null \
  || hf_fail "not 12 trials ASSIGNED before any heartbeat"
now=$(date +%s%3N)
for k in 0 1 2; do
  body=$(jq --argjson now "$now" --arg k "$k" '{instance: ("p" + $k), batch: 1,
    running: [.assign[] | {trial_id, attempt, pid: 100}],
    events: [.assign[] | {trial_id, attempt, type: "started", time: $now, pid: 100}],
    metrics: [], logs: []}' "$HF_TMP/wait$k")
  hf_api POST "/api/v1/agents/${ids[$k]}/heartbeat" "$body"
  hf_assert_eq "$HF_STATUS" 200 "heartbeat $k"
  jq -e '.assign | length == 0' <<<"$HF_BODY" >/dev/null || hf_fail "pushed assignments sent again: $HF_BODY"
done
hf_get "/api/v1/experiments/$id/trials" | jq -e '[.trials[] | select(.state == "RUNNING")] | length == 12' >/dev/null \
  || hf_fail "not all 12 trials RUNNING after one heartbeat per agent"

# ---- 3. an agent without the push: as before
a4=$(register old 1)
curl -fsS -m 20 "$HF_URL/api/v1/agents/$a4/wait?timeout_ms=15000" >"$HF_TMP/wait_old" &
wpid=$!
sleep 0.5
t1=$(date +%s%3N)
hf_post "/api/v1/experiments/$id/extend" '{"max_trials": 13}' >/dev/null
wait "$wpid"
t2=$(date +%s%3N)
hf_log "extend -> the old agent's wait answered: $((t2 - t1)) ms"
(( t2 - t1 < 5000 )) || hf_fail "the old agent's wait was not rung (answered after $((t2 - t1)) ms)"
jq -e '.pending == true and (has("assign") | not)' "$HF_TMP/wait_old" >/dev/null \
  || hf_fail "a wait without assign=1 answered: $(cat "$HF_TMP/wait_old")"
hf_api POST "/api/v1/agents/$a4/heartbeat" '{"running": [], "events": [], "metrics": [], "logs": []}'
hf_assert_eq "$HF_STATUS" 200 "old agent's heartbeat"
jq -e '.assign | length == 1' <<<"$HF_BODY" >/dev/null || hf_fail "old agent's heartbeat reply: $HF_BODY"

hf_log "PASS"
