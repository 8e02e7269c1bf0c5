#!/usr/bin/env bash
# test_scheduler_doorbell.sh — the agent doorbell (long-poll) and
# duplicate-safe heartbeats.
#
#   1. GET /agents/{id}/wait: {"pending": false} after timeout_ms when
#      nothing waits, 400 for a timeout out of range, 404 for an unknown agent.
#   2. A real agent with a fixed 5 s heartbeat interval: a submitted trial
#      still starts within 1 s (the scheduler rings the agent's doorbell,
#      the long-poll answers, the agent heartbeats at once); a kill over the
#      API reaches it and the trial is CANCELED within 2 s. Without the
#      doorbell both would take up to 5 s. The assignment arrives in the
#      long-poll's answer itself (the push, once). A correctness check with a
#      generous bound, not a benchmark.
#   3. Duplicate-safe heartbeats, driven with curl as a fake agent: the same
#      batch sent twice stores its logs and metrics once (row counts over
#      the API), its repeat carries the lost reply's assignment again, a
#      new batch is stored, and a new agent instance starts afresh.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

hf_start_scheduler
now_ms() { date +%s%3N; }

# ---- 1. the route itself
reg=$(curl -fsS -m 5 -X POST "$HF_URL/api/v1/agents" \
  -d '{"name": "probe", "slots": 0, "host": "127.0.0.1", "version": "t", "running": []}')
pid_probe=$(jq -r .id <<<"$reg")
t0=$(now_ms)
hf_api GET "/api/v1/agents/$pid_probe/wait?timeout_ms=300"
t1=$(now_ms)
hf_assert_eq "$HF_STATUS" 200 "wait status"
jq -e '.pending == false' <<<"$HF_BODY" >/dev/null || hf_fail "idle wait: $HF_BODY"
(( t1 - t0 >= 250 )) || hf_fail "wait answered after $((t1 - t0)) ms, before its 300 ms timeout"
(( t1 - t0 < 2000 )) || hf_fail "wait of 300 ms answered after $((t1 - t0)) ms (cron expiry broken)"
hf_api GET "/api/v1/agents/$pid_probe/wait?timeout_ms=999999"
hf_assert_eq "$HF_STATUS" 400 "timeout_ms out of range"
hf_api GET "/api/v1/agents/999/wait?timeout_ms=100"
hf_assert_eq "$HF_STATUS" 404 "unknown agent"

# ---- 2. a real agent with a 5 s heartbeat
hf_start_agent slow --slots 1 --heartbeat-ms 5000 --log-level debug
sleep 1   # registered, first heartbeat done, long-poll parked
exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "doorbell", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1},
  hyperparameters: {epochs: 1000, sleep_ms: 100},
  trial: {command: [$prog], max_restarts: 0}}')
id=$(hf_submit "$exp")
trial_json() { curl -fsS -m 2 "$HF_URL/api/v1/experiments/$id/trials" | jq '.trials[0]'; }
trial_state() { trial_json | jq -r '.state // empty'; }
hf_wait_for 10 bash -c "[[ \$(curl -fsS -m 2 '$HF_URL/api/v1/experiments/$id/trials' | jq -r '.trials[0].state // empty') == RUNNING ]]" \
  || hf_fail "trial did not start within 10 s"
t=$(trial_json)
lat=$(jq '.started_at - .created_at' <<<"$t")
hf_log "created -> started: $lat ms with a 5000 ms heartbeat interval"
(( lat < 1000 )) || hf_fail "trial started $lat ms after creation; the doorbell should make it < 1000 ms"
# the assignment came in the long-poll's answer itself (the push), once
grep -q 'long-poll pushed 1 assignments' "$HF_TMP/agent-slow.log" \
  || hf_fail "the agent did not take the assignment from the long-poll's answer (push): $(grep -i poll "$HF_TMP/agent-slow.log" | tail -3)"
jq -e '.attempt == 1 and .restarts == 0' <<<"$t" >/dev/null || hf_fail "pushed trial started twice: $t"

tid=$(jq .id <<<"$t")
sleep 0.3
t0=$(now_ms)
hf_post "/api/v1/trials/$tid/kill" >/dev/null
hf_wait_for 10 bash -c "[[ \$(curl -fsS -m 2 '$HF_URL/api/v1/trials/$tid' | jq -r .state) == CANCELED ]]" \
  || hf_fail "killed trial not CANCELED within 10 s"
t1=$(now_ms)
hf_log "kill -> CANCELED: $((t1 - t0)) ms"
(( t1 - t0 < 2000 )) || hf_fail "kill took $((t1 - t0)) ms to reach a 5 s-heartbeat agent; the doorbell should make it < 2000 ms"
hf_stop_agent slow

# ---- 3. duplicate-safe heartbeats (curl plays the agent), on a fresh
# database so the only agent is the fake one
hf_stop_scheduler
HF_DB=$HF_TMP/dup.db
hf_start_scheduler
reg=$(curl -fsS -m 5 -X POST "$HF_URL/api/v1/agents" \
  -d '{"name": "dup", "slots": 1, "host": "127.0.0.1", "version": "t", "running": []}')
aid=$(jq -r .id <<<"$reg")
exp2=$(jq -n '{name: "dup", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1}, hyperparameters: {x: 1},
  trial: {command: ["true"], max_restarts: 0}}')
id2=$(hf_submit "$exp2")
hb() { hf_api POST "/api/v1/agents/$aid/heartbeat" "$1"; [[ $HF_STATUS == 200 ]] || hf_fail "heartbeat: $HF_STATUS $HF_BODY"; }
hb '{"instance": "aaaa", "batch": 1, "running": [], "events": [], "metrics": [], "logs": []}'
as=$(jq '.assign[0]' <<<"$HF_BODY")
tid2=$(jq .trial_id <<<"$as")
att=$(jq .attempt <<<"$as")
[[ $tid2 =~ ^[0-9]+$ ]] || hf_fail "no assignment in the first reply: $HF_BODY"
# the reply of batch 1 was "lost": the repeat must carry the assignment again
hb '{"instance": "aaaa", "batch": 1, "running": [], "events": [], "metrics": [], "logs": []}'
jq -e --argjson t "$tid2" '[.assign[] | select(.trial_id == $t)] | length == 1' <<<"$HF_BODY" >/dev/null \
  || hf_fail "repeated batch 1 did not re-send the assignment: $HF_BODY"
now=$(now_ms)
body2=$(jq -n --argjson t "$tid2" --argjson a "$att" --argjson now "$now" '{instance: "aaaa", batch: 2,
  running: [{trial_id: $t, attempt: $a, pid: 4242}],
  events: [{trial_id: $t, attempt: $a, type: "started", time: $now, pid: 4242}],
  metrics: [{trial_id: $t, attempt: $a, time: $now, step: 1, values: {val_acc: 0.5}}],
  logs: [{trial_id: $t, attempt: $a, time: $now, stream: "stdout", line: "one"},
         {trial_id: $t, attempt: $a, time: $now, stream: "stdout", line: "two"}]}')
hb "$body2"
hb "$body2"    # the same batch again: acknowledged, not stored
jq -e '.assign | length == 0' <<<"$HF_BODY" >/dev/null || hf_fail "repeat of batch 2 assigned again: $HF_BODY"
count() {
  nl=$(hf_get "/api/v1/trials/$tid2/logs" | jq '.logs | length')
  nm=$(hf_get "/api/v1/trials/$tid2/metrics" | jq '.metrics | length')
}
count
hf_assert_eq "$nl" 2 "log rows after batch 2 sent twice"
hf_assert_eq "$nm" 1 "metric rows after batch 2 sent twice"
# the experiment-wide metrics route (dashboard learning curves) sees it once too
hf_get "/api/v1/experiments/$id2/metrics?name=val_acc&max_points=100" \
  | hf_jq_assert ".name == \"val_acc\" and (.series | length) == 1 and .series[0].trial_id == $tid2
      and .series[0].points == [[1, 0.5]] and .next > 0 and .truncated == false" "experiment metrics route"
body3=$(jq '.batch = 3 | .events = [] | .metrics = [] | .logs = [.logs[0] | .line = "three"]' <<<"$body2")
hb "$body3"
count
hf_assert_eq "$nl" 3 "log rows after batch 3"
# an older batch number of the same instance is a repeat too
hb "$(jq '.batch = 2' <<<"$body3")"
count
hf_assert_eq "$nl" 3 "log rows after a stale batch number"
# a restarted agent process (new instance) starts its numbering afresh
hb "$(jq '.instance = "bbbb" | .batch = 1' <<<"$body3")"
count
hf_assert_eq "$nl" 4 "log rows after batch 1 of a new instance"
# the counter shows the repeats
prom=$(curl -fsS -m 5 "$HF_URL/metrics")
grep -q '^hyperfarm_heartbeats_repeated_total 3$' <<<"$prom" \
  || hf_fail "hyperfarm_heartbeats_repeated_total is not 3: $(grep repeated <<<"$prom")"
# malformed: batch without instance
hf_api POST "/api/v1/agents/$aid/heartbeat" '{"batch": 5, "running": []}'
hf_assert_eq "$HF_STATUS" 400 "batch without instance"
# survives a restart (a crash: kill -9): the last batch is in the database.
# (The old process must be gone first: hf_restart_scheduler reuses the port,
# and a scheduler still listening there would answer in its place.)
hf_stop_scheduler KILL
hf_restart_scheduler
hb "$(jq '.instance = "bbbb" | .batch = 1' <<<"$body3")"
count
hf_assert_eq "$nl" 4 "log rows after a repeat sent to a restarted scheduler"

hf_log "PASS"
