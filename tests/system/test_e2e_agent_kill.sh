#!/usr/bin/env bash
# test_e2e_agent_kill.sh — losing an agent loses no work, and max_restarts
# is respected.
#
# Part 1: agent a1 alone receives the first trials of a sweep; a2 joins;
# a1 is SIGKILLed while it runs trials. The scheduler must notice (heartbeat
# timeout), mark a1 LOST, requeue its trials, and a2 must complete them and
# the rest of the sweep.
# Part 2: a trial that always exits 3 with max_restarts 2 is attempted
# exactly 3 times and ends FAILED; the experiment still ends.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

# A short heartbeat timeout keeps the test quick (default 10 s also works,
# just slower). The flag takes milliseconds.
if "$HF_BIN/hyperfarm-scheduler" --help 2>&1 | grep -q -- '--agent-timeout'; then
  hf_start_scheduler --agent-timeout "${HF_AGENT_TIMEOUT_MS:-3000}"
else
  hf_start_scheduler
fi
hf_start_agent a1 --slots 2

exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "e2e-agent-kill",
  objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 6, max_concurrent_trials: 4, seed: 3},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, lr: 0.5, epochs: 4, sleep_ms: 700},
  trial: {command: [$prog], max_restarts: 2}
}')
id=$(hf_submit "$exp")

on_a1() {
  curl -fsS -m 2 "$HF_URL/api/v1/experiments/$id/trials" \
    | jq -e '[.trials[] | select(.agent == "a1" and .state == "RUNNING")] | length == 2'
}
hf_wait_for 20 on_a1 || hf_fail "a1 never ran 2 trials: $(hf_get "/api/v1/experiments/$id/trials" | jq -c '[.trials[] | {id, state, agent}]')"
hf_start_agent a2 --slots 2
sleep 0.5
victims=$(hf_get "/api/v1/experiments/$id/trials" | jq -c '[.trials[] | select(.agent == "a1" and .state == "RUNNING") | .id]')
hf_log "killing a1 (SIGKILL) while it runs trials $victims"
hf_stop_agent a1 KILL

hf_wait_for 30 bash -c "curl -fsS '$HF_URL/api/v1/agents' | jq -e '.agents[] | select(.name == \"a1\") | .state | ascii_upcase == \"LOST\"'" \
  || hf_fail "a1 not marked LOST: $(hf_get /api/v1/agents | jq -c '[.agents[] | {name, state}]')"
hf_log "ok: a1 marked LOST"

hf_wait_experiment "$id" 90
trials=$(hf_get "/api/v1/experiments/$id/trials")
hf_jq_assert '.trials | length == 6' "6 trials" <<<"$trials"
hf_jq_assert 'all(.trials[]; .state == "COMPLETED")' "every trial COMPLETED despite the lost agent" <<<"$trials"
jq -e --argjson v "$victims" '[.trials[] | select(.id as $i | $v | index($i))]
       | length == ($v | length) and all(.[]; .agent == "a2" and .restarts >= 1)' <<<"$trials" >/dev/null \
  || hf_fail "trials of a1 ($victims) were not re-run on a2 with restarts >= 1: $(jq -c '[.trials[] | {id, state, agent, restarts}]' <<<"$trials")"
hf_log "ok: a1's trials $victims completed on a2 with restarts >= 1"
for tid in $(jq -r '.[]' <<<"$victims"); do
  hf_get "/api/v1/trials/$tid" | hf_jq_assert '[.events[] | select(.type == "RUNNING")] | length >= 2' \
    "trial $tid has two RUNNING events (first attempt on a1, then a2)"
done

# Part 2: max_restarts.
fail=$(jq -n '{
  name: "e2e-always-fails",
  objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1, max_concurrent_trials: 1},
  hyperparameters: {x: 1},
  trial: {command: ["/bin/sh", "-c", "echo attempt for trial $HYPERFARM_TRIAL_ID; exit 3"], max_restarts: 2}
}')
fid=$(hf_submit "$fail")
hf_wait_experiment "$fid" 60
ft=$(hf_get "/api/v1/experiments/$fid/trials")
hf_jq_assert '.trials | length == 1' "one trial (a failed trial is retried, not replaced)" <<<"$ft"
tid=$(jq '.trials[0].id' <<<"$ft")
t=$(hf_get "/api/v1/trials/$tid")
hf_jq_assert '.state == "FAILED"' "the always-failing trial ends FAILED" <<<"$t"
hf_jq_assert '.restarts == 2' "restarts == max_restarts (2)" <<<"$t"
hf_jq_assert '.exit_code == 3' "exit code 3 recorded" <<<"$t"
hf_jq_assert '[.events[] | select(.type == "RUNNING")] | length == 3' "exactly 3 attempts (max_restarts + 1) ran" <<<"$t"
hf_get "/api/v1/trials/$tid/logs" | hf_jq_assert '[.logs[] | select(.line | startswith("attempt for trial"))] | length >= 1' \
  "the failing trial's output is kept"
hf_get "/api/v1/experiments/$fid" | hf_jq_assert '.counts.failed == 1' "experiment counts 1 failed trial"
hf_log "PASS"
