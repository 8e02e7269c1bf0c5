#!/usr/bin/env bash
# test_e2e_failure.sh — failure looks like failure (issue 28, point 2;
# docs/scheduler.md "End states"), with a real scheduler, agent, webhook
# receiver (tests/system/webhook_receiver.py) and CLI:
#   1. a sweep whose trials all fail (each after one restart) ends FAILED,
#      its end_reason says so and quotes the last failure; trial.FAILED is
#      delivered once per trial (not per attempt: the failed attempt is an
#      ATTEMPT_FAILED event); experiment.FAILED carries state and reason;
#   2. `hyperfarm watch` and `submit --watch` exit 1 for a FAILED experiment
#      and print the reason; 0 for a COMPLETED one;
#   3. trial.max_failures stops a broken sweep of 40 trials after 4 failed
#      in a row, canceling what is left; 0 turns the rule off;
#   4. the scheduler killed (-9) and restarted keeps the states and reasons,
#      and the failures in a row counted so far (the rule fires on the
#      third failure when two happened before the restart).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm tests/fake_trial
hf_setup
hf_start_scheduler --webhook-allow-private
RPORT=$(hf_free_port)
"${PYTHON:-python3}" "$(dirname "$0")/webhook_receiver.py" "$RPORT" "$HF_TMP/got.jsonl" >"$HF_TMP/recv.out" 2>&1 &
hf_track $!
hf_wait_for 10 grep -q ready "$HF_TMP/recv.out" || hf_fail "receiver did not start"
hf_post /api/v1/webhooks "{\"url\": \"http://127.0.0.1:$RPORT/json\", \"secret\": \"s\", \"events\": [\"*\"]}" >/dev/null
hf_start_agent f1 --slots 2

failing() {  # NAME MAX_TRIALS MAX_RESTARTS [MAX_FAILURES] [SLEEP_S]
  jq -n --arg n "$1" --argjson mt "$2" --argjson mr "$3" --argjson mf "${4:-null}" --arg sl "${5:-0}" '{
    name: $n, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: $mt, max_concurrent_trials: 2, seed: 1},
    hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
    trial: ({command: ["/bin/sh", "-c", ("sleep " + $sl + "; echo no such file >&2; exit 3")], max_restarts: $mr}
            + (if $mf == null then {} else {max_failures: $mf} end))}'
}

# 1. all trials fail: FAILED with the reason
a=$(hf_submit "$(failing all-fail 3 1 0)")
hf_wait_experiment "$a" 60
hf_get "/api/v1/experiments/$a" >"$HF_TMP/a.json"
hf_jq_assert '.state == "FAILED" and .counts.failed == 3 and .ended_at != null' "all-failed sweep ends FAILED" <"$HF_TMP/a.json"
hf_jq_assert '.end_reason | test("^all 3 trials failed; the last: .*exit code 3")' \
  "end_reason names the failures and the last one" <"$HF_TMP/a.json"
hf_log "ok: experiment $a FAILED: $(jq -r .end_reason "$HF_TMP/a.json")"
t1=$(hf_get "/api/v1/experiments/$a/trials" | jq '.trials[0].id')
hf_get "/api/v1/trials/$t1" | hf_jq_assert \
  '.restarts == 1 and ([.events[] | select(.type == "ATTEMPT_FAILED")] | length) == 1
   and ([.events[] | select(.type == "FAILED")] | length) == 1' "a restarted trial: one ATTEMPT_FAILED, one FAILED"

# 2. watch / submit --watch exit codes
set +e
out=$(hf_cli watch "$a" --plain 2>&1); rc=$?
set -e
[[ $rc == 1 ]] || hf_fail "watch of a FAILED experiment exited $rc, expected 1: $out"
grep -q "experiment $a FAILED" <<<"$out" && grep -q "reason: all 3 trials failed" <<<"$out" \
  || hf_fail "watch did not print the state and reason: $out"
failing submit-watch 2 0 >"$HF_TMP/sw.json"
set +e
out=$(hf_cli submit "$HF_TMP/sw.json" --watch --plain --interval-ms 200 2>&1); rc=$?
set -e
[[ $rc == 1 ]] || hf_fail "submit --watch of a failing sweep exited $rc, expected 1: $out"
grep -q "FAILED" <<<"$out" || hf_fail "submit --watch: no FAILED in $out"
jq -n --arg prog "$HF_BIN/tests/fake_trial" '{name: "ok", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 2, max_concurrent_trials: 2, seed: 1},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, epochs: 1, sleep_ms: 20},
  trial: {command: [$prog]}}' >"$HF_TMP/ok.json"
set +e
out=$(hf_cli submit "$HF_TMP/ok.json" --watch --plain --interval-ms 200 2>&1); rc=$?
set -e
[[ $rc == 0 ]] || hf_fail "submit --watch of a good sweep exited $rc: $out"
okid=$(head -1 <<<"$out")
hf_get "/api/v1/experiments/$okid" | hf_jq_assert '.state == "COMPLETED" and .end_reason == "search finished"' \
  "a good sweep COMPLETED (search finished)"
hf_log "ok: watch / submit --watch exit 1 for FAILED, 0 for COMPLETED"

# 3. max_failures stops a broken sweep early
b=$(hf_submit "$(failing broken 40 0 4)")
hf_wait_experiment "$b" 60
hf_get "/api/v1/experiments/$b" >"$HF_TMP/b.json"
hf_jq_assert '.state == "FAILED" and (.end_reason | test("^4 trials failed in a row \\(trial.max_failures\\); the last: "))' \
  "max_failures ends the sweep FAILED with the reason" <"$HF_TMP/b.json"
hf_jq_assert '.counts.failed >= 4 and (.counts.failed + .counts.canceled) <= 6 and .counts.queued == 0 and .counts.running == 0' \
  "the sweep stopped after about 4 trials, not 40" <"$HF_TMP/b.json"
hf_log "ok: max_failures 4: $(jq -c '{state, end_reason, counts}' "$HF_TMP/b.json")"
# default 20, 0 = off: all-fail above ran 3 trials with max_failures 0; a bad value is refused
hf_api POST /api/v1/experiments "$(failing bad 3 0 -1)"
[[ $HF_STATUS == 400 ]] && jq -e '.field == "trial.max_failures"' <<<"$HF_BODY" >/dev/null \
  || hf_fail "max_failures -1: $HF_STATUS $HF_BODY"

# 4. restart keeps the state, the reason, and the failures counted so far
c=$(hf_submit "$(failing restart 20 0 3 1)")
hf_wait_for 30 bash -c "curl -fsS '$HF_URL/api/v1/experiments/$c' | jq -e '.counts.failed >= 2' >/dev/null" \
  || hf_fail "experiment $c: no 2 failures"
hf_stop_scheduler KILL
hf_restart_scheduler --webhook-allow-private
hf_wait_experiment "$c" 60
hf_get "/api/v1/experiments/$c" >"$HF_TMP/c.json"
hf_jq_assert '.state == "FAILED" and (.end_reason | startswith("3 trials failed in a row"))' \
  "after a restart the rule fires at the third failure in a row" <"$HF_TMP/c.json"
hf_jq_assert '.counts.failed <= 4' "no more than the concurrency past the third failure" <"$HF_TMP/c.json"
for x in a b; do
  want=$(cat "$HF_TMP/$x.json")
  hf_get "/api/v1/experiments/$(jq .id <<<"$want")" | jq -e --argjson w "$want" \
    '.state == $w.state and .end_reason == $w.end_reason' >/dev/null || hf_fail "restart lost the state or reason of $x"
done
hf_log "ok: restart keeps FAILED and end_reason; the run of failures survives it"

# webhook payloads
hf_wait_for 30 bash -c "jq -e -s --argjson a $a 'map(.body | fromjson) | any(.event == \"experiment.FAILED\" and .experiment_id == \$a)' '$HF_TMP/got.jsonl' >/dev/null" \
  || hf_fail "no experiment.FAILED delivered"
jq -s --argjson a "$a" 'map(.body | fromjson) | map(select(.experiment_id == $a))' "$HF_TMP/got.jsonl" >"$HF_TMP/ah.json"
hf_jq_assert 'map(select(.event == "experiment.FAILED")) | length == 1 and (.[0].state == "FAILED") and (.[0].detail | test("^all 3 trials failed"))' \
  "experiment.FAILED carries the state and the reason" <"$HF_TMP/ah.json"
hf_jq_assert '[.[] | select(.event == "trial.FAILED")] | length == 3 and ([.[].trial_id] | unique | length) >= 3' \
  "trial.FAILED once per trial (3), not once per attempt (6)" <"$HF_TMP/ah.json"
hf_log "ok: webhooks: $(jq -c '[.[] | .event] | group_by(.) | map({(.[0]): length}) | add' "$HF_TMP/ah.json")"
hf_log "PASS"
