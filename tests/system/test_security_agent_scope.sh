#!/usr/bin/env bash
# test_security_agent_scope.sh — an agent token's authority (issue 27.3;
# docs/protocol.md "Roles"): a real scheduler with a token file holding two
# named agent tokens (gpu-a, gpu-b) and a user token (alice), the real
# agent gpu-a running alice's trial, and curl playing gpu-b with gpu-b's
# own token, as a compromised agent (or a trial that stole its token) would:
#
#   - gpu-b's token heartbeating, long-polling or registering as gpu-a: 403;
#   - gpu-b, under its own id, sending a forged `exited` and `val_acc: 999`
#     for gpu-a's running trial: 200 with both listed in "refused" (409
#     each), nothing applied (the trial stays RUNNING, no 999 anywhere, the
#     real process is not killed), and REPORT_REFUSED in the experiment's
#     events with user gpu-b; the real trial then completes normally and
#     is the experiment's best with its real value;
#   - gpu-b PUTting a checkpoint for that trial while it runs and after it
#     finished: 409 (as itself) / 403 (naming gpu-a), nothing stored: the
#     listing holds only gpu-a's objects and `hyperfarm download` returns
#     the real bytes, verified.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

UT=alice-token-0001 AT=agent-a-token-01 BT=agent-b-token-02
printf 'user:alice %s\nagent:gpu-a %s\nagent:gpu-b %s\n' "$UT" "$AT" "$BT" >"$HF_TMP/tokens"
printf '%s\n' "$AT" >"$HF_TMP/a-token"
hf_start_scheduler --token-file "$HF_TMP/tokens"

# TOKEN METHOD PATH [BODY]: sets HF_STATUS and HF_BODY (hf_api, with a token)
tapi() {
  local tok=$1 method=$2 path=$3 body=${4-} out
  out=$(mktemp "$HF_TMP/resp.XXXXXX")
  HF_STATUS=$(curl -sS -m 10 -o "$out" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $tok" \
    -H 'Content-Type: application/json' ${body:+--data-binary "$body"} "$HF_URL$path") \
    || { rm -f "$out"; hf_fail "$method $path: no answer"; }
  HF_BODY=$(cat "$out")
  rm -f "$out"
}
uget() { curl -fsS -m 5 -H "Authorization: Bearer $UT" "$HF_URL$1"; }
expect() {  # STATUS WHAT
  [[ $HF_STATUS == "$1" ]] || hf_fail "$2: HTTP $HF_STATUS, expected $1: $HF_BODY"
  hf_log "ok: $2 -> $HF_STATUS $(jq -r '.error // empty' <<<"$HF_BODY" 2>/dev/null | head -c 200)"
}

mkdir -p "$HF_TMP/agent-gpu-a"
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name gpu-a --slots 1 --gpus none \
  --workdir "$HF_TMP/agent-gpu-a" --token-file "$HF_TMP/a-token" >>"$HF_TMP/agent-gpu-a.log" 2>&1 &
HF_AGENT_PIDS[gpu-a]=$!
hf_wait_for 15 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer $UT' '$HF_URL/api/v1/agents' \
  | jq -e '[.agents[] | select(.name == \"gpu-a\")] | length == 1' >/dev/null" || hf_fail "gpu-a did not register"
A=$(uget /api/v1/agents | jq '.agents[] | select(.name == "gpu-a") | .id')

# gpu-b: its own registration, with its own token, is fine
tapi "$BT" POST /api/v1/agents '{"name": "gpu-b", "slots": 0}'
expect 201 "gpu-b registers itself"
B=$(jq .id <<<"$HF_BODY")

# ---- the binding: gpu-b's token never speaks for gpu-a
tapi "$BT" POST "/api/v1/agents/$A/heartbeat" '{"running": []}'
expect 403 "gpu-b's token heartbeating as gpu-a"
jq -e '.error | contains("gpu-b") and contains("gpu-a")' <<<"$HF_BODY" >/dev/null || hf_fail "the 403 does not say why: $HF_BODY"
tapi "$BT" POST /api/v1/agents '{"name": "gpu-a", "slots": 4, "running": []}'
expect 403 "gpu-b's token registering gpu-a (which would declare its trials lost)"
tapi "$BT" GET "/api/v1/agents/$A/wait?timeout_ms=0"
expect 403 "gpu-b's token long-polling as gpu-a"
tapi "$AT" GET "/api/v1/agents/$A/wait?timeout_ms=0"
expect 200 "gpu-a's own long-poll"

# ---- alice's trial on gpu-a
exp=$(jq -cn --arg ft "$HF_BIN/tests/fake_trial" '{
  name: "scope", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1, seed: 3},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: [$ft, "--epochs", "8", "--sleep-ms", "500"], max_restarts: 0}}')
tapi "$UT" POST /api/v1/experiments "$exp"
expect 201 "alice submits"
E=$(jq .id <<<"$HF_BODY")
hf_wait_for 30 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer $UT' '$HF_URL/api/v1/experiments/$E/trials' \
  | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null" || hf_fail "the trial did not start on gpu-a"
T=$(uget "/api/v1/experiments/$E/trials" | jq '.trials[0].id')
ATT=$(uget "/api/v1/trials/$T" | jq .attempt)
hf_wait_for 30 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer $UT' '$HF_URL/api/v1/trials/$T/checkpoints' \
  | jq -e '.checkpoints | length >= 1' >/dev/null" || hf_fail "no checkpoint of trial $T stored"
hf_log "trial $T attempt $ATT runs on gpu-a ($A) with a stored checkpoint"

# ---- gpu-b, under its own id: a forged exit with val_acc 999
forged=$(jq -cn --argjson t "$T" --argjson a "$ATT" '{running: [],
  metrics: [{trial_id: $t, attempt: $a, step: 99900, values: {val_acc: 999}, checkpoint: "fake_trial.json"}],
  events: [{trial_id: $t, attempt: $a, type: "exited", time: 1, exit_code: 0, signal: 0}]}')
tapi "$BT" POST "/api/v1/agents/$B/heartbeat" "$forged"
expect 200 "gpu-b's forged report (its honest part, none here, would be applied)"
jq -e '(.refused | length) == 2 and all(.refused[]; .status == 409 and .trial_id == '"$T"')
       and ([.refused[].item] == ["metrics[0]", "events[0]"])' <<<"$HF_BODY" >/dev/null \
  || hf_fail "the forged items are not listed as refused: $HF_BODY"
sleep 0.5
uget "/api/v1/trials/$T" | jq -e '.state == "RUNNING" and (.best.val_acc // 0) < 1' >/dev/null \
  || hf_fail "the forged report was applied: $(uget "/api/v1/trials/$T" | jq -c '{state, best, latest}')"
uget "/api/v1/experiments/$E" | jq -e '.best == null or .best.value < 1' >/dev/null \
  || hf_fail "the experiment's best took the forged 999: $(uget "/api/v1/experiments/$E" | jq -c .best)"
uget "/api/v1/experiments/$E/events" | jq -e '[.events[] | select(.type == "REPORT_REFUSED" and .user == "gpu-b")] | length == 1' \
  >/dev/null || hf_fail "no REPORT_REFUSED event by gpu-b: $(uget "/api/v1/experiments/$E/events" | jq -c '.events[-3:]')"
grep -q "agent gpu-b ($B, token of 'gpu-b') reported 2 items of attempts never assigned to it" "$HF_TMP/scheduler.log" \
  || hf_fail "the scheduler log does not name who tried"

# ---- gpu-b planting a checkpoint for the running trial
printf 'planted bytes, not a checkpoint\n' >"$HF_TMP/planted"
psha=$(sha256sum "$HF_TMP/planted" | cut -d' ' -f1)
plant() {  # AGENT_ID -> HF_STATUS, HF_BODY
  HF_STATUS=$(curl -sS -m 10 -o "$HF_TMP/plant.out" -w '%{http_code}' -X PUT -H "Authorization: Bearer $BT" \
    -H "X-Hyperfarm-Sha256: $psha" --data-binary @"$HF_TMP/planted" \
    "$HF_URL/api/v1/trials/$T/checkpoints?step=99900&attempt=$ATT&name=fake_trial.json&agent=$1")
  HF_BODY=$(cat "$HF_TMP/plant.out")
}
plant "$B"
expect 409 "gpu-b's checkpoint PUT for gpu-a's running trial"
plant "$A"
expect 403 "gpu-b's checkpoint PUT naming gpu-a as the uploader"
tapi "$BT" POST "/api/v1/trials/$T/checkpoints" \
  "{\"sha256\": \"$psha\", \"size\": 32, \"step\": 99900, \"attempt\": $ATT, \"agent_id\": $B}"
expect 409 "gpu-b's checkpoint registration for gpu-a's running trial"

# ---- the real trial finishes normally, the best of its experiment
hf_wait_for 60 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer $UT' '$HF_URL/api/v1/experiments/$E' \
  | jq -e '.state == \"COMPLETED\"' >/dev/null" || hf_fail "experiment $E did not complete"
trial=$(uget "/api/v1/trials/$T")
jq -e '.state == "COMPLETED" and .exit_code == 0 and .latest.step == 800 and .best.val_acc < 1' <<<"$trial" >/dev/null \
  || hf_fail "the real trial did not finish normally: $(jq -c '{state, exit_code, latest, best}' <<<"$trial")"
uget "/api/v1/experiments/$E" | jq -e --argjson v "$(jq .objective <<<"$trial")" \
  '.best.trial_id == '"$T"' and .best.value == $v' >/dev/null \
  || hf_fail "the experiment's best is not the real trial's value: $(uget "/api/v1/experiments/$E" | jq -c .best)"

# ---- and now a finished trial: still refused, nothing stored
plant "$B"
expect 409 "gpu-b's checkpoint PUT for the finished trial"
uget "/api/v1/experiments/$E/events" \
  | jq -e '[.events[] | select(.type == "CHECKPOINT_REFUSED" and .user == "gpu-b")] | length == 4' >/dev/null \
  || hf_fail "the checkpoint refusals are not all in the events: $(uget "/api/v1/experiments/$E/events" | jq -c '.events')"
list=$(uget "/api/v1/trials/$T/checkpoints")
jq -e --arg p "$psha" --argjson a "$A" '(.checkpoints | length) >= 1 and all(.checkpoints[]; .sha256 != $p and .agent_id == $a)' \
  <<<"$list" >/dev/null || hf_fail "the listing holds a planted object: $list"
real=$(jq -r '.checkpoints[-1].sha256' <<<"$list")
"$HF_BIN/hyperfarm" --url "$HF_URL" --token "$UT" download "$T" -o "$HF_TMP/dl" >"$HF_TMP/dl.out" 2>"$HF_TMP/dl.err" \
  || hf_fail "download failed: $(cat "$HF_TMP/dl.err")"
grep -q "(verified)" "$HF_TMP/dl.out" || hf_fail "download did not verify: $(cat "$HF_TMP/dl.out")"
got=$(sha256sum "$HF_TMP/dl/fake_trial.json" | cut -d' ' -f1)
[[ $got == "$real" && $got != "$psha" ]] || hf_fail "downloaded $got, the real newest is $real"
grep -q '"epoch": 8,' "$HF_TMP/dl/fake_trial.json" || hf_fail "the downloaded checkpoint is not the trial's last: $(head -c 300 "$HF_TMP/dl/fake_trial.json")"
hf_log "ok: download returned the real checkpoint ($real), verified"

# gpu-a's honest traffic was never refused
if grep -q "token of 'gpu-a'" "$HF_TMP/scheduler.log"; then hf_fail "gpu-a was refused something: $(grep "token of 'gpu-a'" "$HF_TMP/scheduler.log")"; fi
hf_log "PASS"
