#!/usr/bin/env bash
# test_security_owners.sh — issue 27 point 4, "Owners and roles", against a
# real scheduler with a token file (admin root, users alice and bob, viewer
# wall, agent gpu1) and a real agent running alice's trials:
#   1. bob cannot pause, resume, kill, extend, edit, cancel, archive or
#      delete alice's experiment, nor kill or annotate its trial: 403 each
#      naming the owner, nothing changed, and the events table records
#      bob's tries (type REFUSED, user bob);
#   2. the viewer reads everything and changes nothing (403, recorded);
#      an agent token changes nothing and cannot read webhooks;
#   3. alice and the admin can; bob forks alice's experiment and owns the
#      fork (alice cannot cancel it);
#   4. webhooks: bob and the viewer see alice's hook URL (with its
#      credentials) redacted, alice and the admin see it whole; only an
#      admin creates or deletes a global hook; bob cannot delete alice's;
#   5. hooks to 127.0.0.1, 10.0.0.1, 169.254.169.254 and the scheduler's
#      own URL are refused without --webhook-allow-private; with no token
#      file a hook aimed at the scheduler's own cancel route is refused,
#      even with --webhook-allow-private.
# No traffic ever goes to a non-loopback address: refused hooks are refused
# before anything is stored; the one hook with a public (numeric) URL is on
# a CANCELED experiment and only fires on experiment.COMPLETED, which a
# canceled experiment never reaches; the admin's global hook lives for two
# requests while nothing can complete.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

ROOT_T=root-secret-0001 ALICE_T=alice-secret-01 BOB_T=bob-secret-0001 WALL_T=wall-secret-001 AGENT_T=gpu1-secret-001
cat >"$HF_TMP/tokens" <<EOF
admin:root $ROOT_T
user:alice $ALICE_T
user:bob $BOB_T
viewer:wall $WALL_T
agent:gpu1 $AGENT_T
EOF
printf '%s\n' "$AGENT_T" >"$HF_TMP/agent-token"
hf_start_scheduler --token-file "$HF_TMP/tokens" --agent-timeout 60000

S="" B=""  # status and body of the last call
call() {  # TOKEN METHOD PATH [BODY]
  local tok=$1 method=$2 path=$3 body=${4-} out
  out=$(mktemp "$HF_TMP/resp.XXXXXX")
  local args=(-sS -m 10 -o "$out" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $tok")
  [[ -n $body ]] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
  S=$(curl "${args[@]}" "$HF_URL$path") || hf_fail "$method $path: no answer"
  B=$(cat "$out")
  rm -f "$out"
}
expect() {  # STATUS TOKEN METHOD PATH [BODY]
  local want=$1; shift
  call "$@"
  [[ $S == "$want" ]] || hf_fail "$2 $3 as token ${1%%-*}: $S, expected $want ($B)"
}
refused() {  # WHO-PATTERN TOKEN METHOD PATH [BODY]: 403 whose error matches WHO-PATTERN
  local pat=$1; shift
  expect 403 "$@"
  jq -e --arg p "$pat" '.error | test($p)' >/dev/null <<<"$B" || hf_fail "$2 $3: the 403 does not say why: $B"
}

whoami() { expect 200 "$1" GET /api/v1/whoami; jq -c '[.user, .role]' <<<"$B"; }
hf_assert_eq "$(whoami "$ALICE_T")" '["alice","user"]' "whoami alice"
hf_assert_eq "$(whoami "$ROOT_T")" '["root","admin"]' "whoami root"
hf_assert_eq "$(whoami "$WALL_T")" '["wall","viewer"]' "whoami wall"
hf_assert_eq "$(whoami "$AGENT_T")" '["gpu1","agent"]' "whoami gpu1"

exp_json() {  # NAME MAX_TRIALS: trials that run far longer than this test
  jq -nc --arg prog "$HF_BIN/tests/fake_trial" --arg n "$1" --argjson m "$2" '{name: $n,
    objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: $m, max_concurrent_trials: 1, seed: 3},
    hyperparameters: {x: {type: "uniform", min: 0, max: 1}, epochs: 100000, sleep_ms: 200},
    trial: {command: [$prog]}}'
}
expect 201 "$ALICE_T" POST /api/v1/experiments "$(exp_json alice-exp 3)"
A=$(jq .id <<<"$B")
expect 200 "$BOB_T" GET "/api/v1/experiments/$A"
jq -e '.owner == "alice" and .submitted_by == "alice"' >/dev/null <<<"$B" || hf_fail "owner of $A: $B"

mkdir -p "$HF_TMP/agent-gpu1"
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name gpu1 --slots 1 --workdir "$HF_TMP/agent-gpu1" \
  --token-file "$HF_TMP/agent-token" >>"$HF_TMP/agent-gpu1.log" 2>&1 &
hf_track $!
trial_running() {
  call "$ALICE_T" GET "/api/v1/experiments/$A/trials"
  T=$(jq -r '[.trials[] | select(.state == "RUNNING")][0].id // empty' <<<"$B")
  [[ -n $T ]]
}
hf_wait_for 30 trial_running || hf_fail "no trial of $A ran in 30 s"
trial_running
hf_log "experiment $A (alice) runs trial $T on agent gpu1"

# ---- 1. bob cannot change alice's experiment -----------------------------------
why="experiment $A is owned by alice; only its owner or an admin may"
refused "$why pause"     "$BOB_T" POST "/api/v1/experiments/$A/pause"
refused "$why resume"    "$BOB_T" POST "/api/v1/experiments/$A/resume"
refused "$why cancel"    "$BOB_T" POST "/api/v1/experiments/$A/cancel"
refused "$why extend"    "$BOB_T" POST "/api/v1/experiments/$A/extend" '{"add_trials": 5}'
refused "$why archive"   "$BOB_T" POST "/api/v1/experiments/$A/archive"
refused "$why edit"      "$BOB_T" PATCH "/api/v1/experiments/$A" '{"description": "mine now", "tags": ["bob"]}'
refused "$why delete"    "$BOB_T" DELETE "/api/v1/experiments/$A"
refused "trial $T of experiment $A is owned by alice; only its owner or an admin may kill" \
  "$BOB_T" POST "/api/v1/trials/$T/kill"
refused "trial $T of experiment $A is owned by alice; only its owner or an admin may edit the notes of" \
  "$BOB_T" PATCH "/api/v1/trials/$T" '{"notes": "bob was here"}'
expect 200 "$BOB_T" GET "/api/v1/experiments/$A"
jq -e '.state == "ACTIVE" and .max_trials == 3 and .description == null and .tags == []' >/dev/null <<<"$B" \
  || hf_fail "bob's refused requests changed experiment $A: $B"
expect 200 "$BOB_T" GET "/api/v1/trials/$T"
jq -e '.state == "RUNNING" and .notes == null' >/dev/null <<<"$B" || hf_fail "bob's refused requests changed trial $T: $B"
expect 200 "$ALICE_T" GET "/api/v1/experiments/$A/events"
n=$(jq '[.events[] | select(.type == "REFUSED" and .user == "bob")] | length' <<<"$B")
(( n == 9 )) || hf_fail "the events table holds $n of bob's 9 refused tries: $B"
jq -e --arg t "$T" '[.events[] | select(.type == "REFUSED" and .user == "bob" and (.trial_id|tostring) == $t)] | length == 2' \
  >/dev/null <<<"$B" || hf_fail "bob's tries on trial $T are not recorded with it: $B"
hf_log "ok: bob's 9 changes to alice's experiment refused (403 naming the owner), nothing changed, all recorded"

# ---- 2. the viewer reads, the agent reads (not webhooks) -------------------------
for p in "/api/v1/experiments" "/api/v1/experiments/$A" "/api/v1/experiments/$A/trials" "/api/v1/trials/$T" \
         "/api/v1/agents" "/api/v1/webhooks" "/api/v1/experiments/$A/events"; do
  expect 200 "$WALL_T" GET "$p"
done
refused "viewer wall may only read" "$WALL_T" POST "/api/v1/experiments/$A/pause"
refused "viewer wall may only read" "$WALL_T" DELETE "/api/v1/experiments/$A"
refused "viewer wall may only read" "$WALL_T" PATCH "/api/v1/trials/$T" '{"notes": "x"}'
refused "viewer wall may only read" "$WALL_T" POST "/api/v1/trials/$T/kill"
refused "viewer wall may only read" "$WALL_T" POST /api/v1/experiments "$(exp_json wall 1)"
refused "viewer wall may only read" "$WALL_T" POST "/api/v1/experiments/$A/fork" "$(exp_json wall 1)"
refused "viewer wall may only read" "$WALL_T" POST /api/v1/webhooks \
  "{\"url\": \"https://93.184.216.34/x\", \"experiment_id\": $A}"
expect 200 "$ALICE_T" GET "/api/v1/experiments/$A/events"
jq -e '[.events[] | select(.type == "REFUSED" and .user == "wall")] | length == 4' >/dev/null <<<"$B" \
  || hf_fail "the viewer's refused changes are not recorded: $B"
expect 403 "$AGENT_T" GET /api/v1/webhooks
expect 403 "$AGENT_T" POST "/api/v1/experiments/$A/cancel"
expect 200 "$AGENT_T" GET "/api/v1/experiments/$A"
hf_log "ok: the viewer reads everything and changes nothing; an agent cannot read webhooks"

# ---- 3. alice and the admin can; forks --------------------------------------------
expect 200 "$ALICE_T" PATCH "/api/v1/experiments/$A" '{"description": "alice edits"}'
expect 200 "$ALICE_T" PATCH "/api/v1/trials/$T" '{"notes": "alice notes"}'
expect 200 "$ROOT_T" POST "/api/v1/experiments/$A/extend" '{"add_trials": 1}'
jq -e '.max_trials == 4' >/dev/null <<<"$B" || hf_fail "admin extend: $B"
expect 200 "$ALICE_T" POST "/api/v1/experiments/$A/pause"
expect 200 "$ALICE_T" POST "/api/v1/experiments/$A/resume"
expect 201 "$BOB_T" POST "/api/v1/experiments/$A/fork" "$(exp_json bob-fork 1)"
F=$(jq .id <<<"$B")
expect 200 "$ALICE_T" GET "/api/v1/experiments/$F"
jq -e --argjson a "$A" '.owner == "bob" and .parent_experiment == $a' >/dev/null <<<"$B" || hf_fail "fork $F: $B"
refused "experiment $F is owned by bob" "$ALICE_T" POST "/api/v1/experiments/$F/cancel"
expect 200 "$BOB_T" POST "/api/v1/experiments/$F/cancel"
expect 200 "$ROOT_T" POST "/api/v1/experiments/$A/cancel"
idle() { call "$ALICE_T" POST "/api/v1/experiments/$A/archive"; [[ $S == 200 ]]; }
hf_wait_for 30 idle || hf_fail "alice cannot archive her canceled experiment: $S $B"
expect 200 "$ROOT_T" DELETE "/api/v1/experiments/$A"
hf_log "ok: the owner and the admin change it; bob owns his fork of it"

# ---- 4. webhook URLs, global hooks --------------------------------------------------
expect 201 "$ALICE_T" POST /api/v1/experiments "$(exp_json alice-hooked 1)"
W=$(jq .id <<<"$B")
expect 200 "$ALICE_T" POST "/api/v1/experiments/$W/cancel"   # never COMPLETED: the hook below never fires
secret_url="https://alice:s3cr3t-pw@93.184.216.34:8443/hooks/T0001/B0002?key=k3y"
expect 201 "$ALICE_T" POST /api/v1/webhooks \
  "{\"url\": \"$secret_url\", \"events\": [\"experiment.COMPLETED\"], \"experiment_id\": $W}"
H=$(jq .id <<<"$B")
jq -e '.owner == "alice"' >/dev/null <<<"$B" || hf_fail "hook owner: $B"
for tok in "$BOB_T" "$WALL_T"; do
  expect 200 "$tok" GET /api/v1/webhooks
  grep -q 's3cr3t\|k3y\|T0001' <<<"$B" && hf_fail "alice's hook URL leaks to ${tok%%-*}: $B"
  jq -e --argjson h "$H" '.webhooks[] | select(.id == $h) | .url == "https://93.184.216.34:8443/..." and .url_redacted' \
    >/dev/null <<<"$B" || hf_fail "alice's hook is not listed redacted: $B"
done
for tok in "$ALICE_T" "$ROOT_T"; do
  expect 200 "$tok" GET /api/v1/webhooks
  jq -e --argjson h "$H" --arg u "$secret_url" '.webhooks[] | select(.id == $h) | .url == $u' >/dev/null <<<"$B" \
    || hf_fail "${tok%%-*} does not see the whole URL: $B"
done
refused "owned by alice" "$BOB_T" DELETE "/api/v1/webhooks/$H"
refused "owned by alice" "$BOB_T" POST /api/v1/webhooks "{\"url\": \"https://93.184.216.34/b\", \"experiment_id\": $W}"
global='{"url": "https://93.184.216.34/global", "events": ["experiment.COMPLETED"]}'
refused "only an admin may create a global webhook" "$BOB_T" POST /api/v1/webhooks "$global"
refused "only an admin may create a global webhook" "$ALICE_T" POST /api/v1/webhooks "$global"
expect 201 "$ROOT_T" POST /api/v1/webhooks "$global"
G=$(jq .id <<<"$B")
refused "webhook $G is global; only an admin may delete it" "$ALICE_T" DELETE "/api/v1/webhooks/$G"
expect 200 "$ROOT_T" DELETE "/api/v1/webhooks/$G"
expect 200 "$ALICE_T" DELETE "/api/v1/webhooks/$H"
expect 200 "$ALICE_T" GET "/api/v1/experiments/$W/events"
jq -e '[.events[] | select(.type == "REFUSED" and .user == "bob")] | length == 2' >/dev/null <<<"$B" \
  || hf_fail "bob's webhook tries on $W are not recorded: $B"
hf_log "ok: hook URLs redacted for others, global hooks admin-only, others' hooks not deletable"

# ---- 5. private and self targets ----------------------------------------------------
for u in "http://127.0.0.1:9/hook" "http://10.0.0.1/hook" "http://169.254.169.254/latest/meta-data/" \
         "$HF_URL/api/v1/experiments/$W/cancel" "http://[::1]:$HF_PORT/x" "http://localhost:$HF_PORT/x"; do
  expect 403 "$ROOT_T" POST /api/v1/webhooks "{\"url\": \"$u\", \"experiment_id\": $W}"
  jq -e '.field == "url" and (.error | test("may not target"))' >/dev/null <<<"$B" || hf_fail "$u: $B"
done
expect 200 "$ROOT_T" GET /api/v1/webhooks
jq -e '.webhooks | length == 0' >/dev/null <<<"$B" || hf_fail "a refused hook was stored: $B"
hf_log "ok: loopback, private, link-local and self targets refused"

# ---- 6. no token file: a hook at the scheduler's own cancel route -------------------
hf_stop_scheduler
HF_DB=$HF_TMP/open.db
hf_start_scheduler
id=$(hf_submit "$(exp_json open 1)")
hf_api GET /api/v1/whoami
jq -e '.user == "local" and .role == "admin" and .tokens == false' >/dev/null <<<"$HF_BODY" || hf_fail "whoami: $HF_BODY"
hf_api POST /api/v1/webhooks "{\"url\": \"$HF_URL/api/v1/experiments/$id/cancel\", \"events\": [\"*\"]}"
[[ $HF_STATUS == 403 ]] || hf_fail "a hook at the scheduler's cancel route: $HF_STATUS $HF_BODY"
hf_stop_scheduler
hf_restart_scheduler --webhook-allow-private
hf_api POST /api/v1/webhooks "{\"url\": \"http://127.0.0.1:$HF_PORT/api/v1/experiments/$id/cancel\", \"events\": [\"*\"]}"
[[ $HF_STATUS == 403 ]] && jq -e '.error | test("the scheduler itself")' >/dev/null <<<"$HF_BODY" \
  || hf_fail "with --webhook-allow-private, a hook at the scheduler itself: $HF_STATUS $HF_BODY"
hf_post "/api/v1/experiments/$id/pause" >/dev/null
hf_post "/api/v1/experiments/$id/resume" >/dev/null
sleep 1
[[ $(hf_exp_state "$id") == ACTIVE ]] || hf_fail "experiment $id was changed by a webhook"
hf_log "ok: without a token file a hook cannot reach the scheduler itself"
hf_log "PASS"
