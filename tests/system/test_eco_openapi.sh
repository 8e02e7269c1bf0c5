#!/usr/bin/env bash
# test_eco_openapi.sh — docs/openapi.yaml against the real scheduler.
#
#   1. the route table in scheduler/api*.c and the YAML's paths list the
#      same (path, method) pairs, both ways;
#   2. every (path, method) of the YAML is called on a real scheduler (with a
#      token file, user and agent tokens, a fake agent speaking the agent
#      routes, a checkpoint uploaded and fetched) and answers a 2xx the YAML
#      documents; error cases (404, 400, 403, 409, 411, 413, 422, 401) are
#      provoked and each answer must be a status the
#      YAML documents for that operation, and the one the case expects;
#   3. a method a path does not document answers 405 with an Allow header
#      naming exactly the documented methods;
#   4. docs/api.md is what scripts/gen-api-doc makes of the YAML now;
#   0./5. the YAML passes a standard OpenAPI validator (swagger-parser from
#      npm, tests/openapi/check.mjs), and every answer of step 2 — success
#      and error, GET and POST — carries the content type its operation
#      documents, with a JSON body that validates against the documented
#      schema (Ajv).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)

# ---- 0. a standard validator accepts the document ---------------------------
command -v node >/dev/null || hf_fail "node is required (Debian package nodejs)"
[[ -d $root/tests/openapi/node_modules/@apidevtools/swagger-parser ]] \
  || hf_fail "tests/openapi/node_modules missing: run scripts/install-deps"
node "$root/tests/openapi/check.mjs" validate "$root/docs/openapi.yaml" "$HF_TMP/openapi.json" \
  || hf_fail "docs/openapi.yaml fails @apidevtools/swagger-parser validation"
py=""
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import yaml' 2>/dev/null; then py=$p; break; fi
done
[[ -n $py ]] || hf_fail "no python3 with the yaml module (apt-get install python3-yaml)"

# ---- 1. route table <-> YAML ----------------------------------------------
# rows {"/pattern", "GET, POST", ...} of scheduler/api/api_routes.c: '*' is an
# id segment, '@' an action, '#' a checkpoint's hash.
grep -hoE '^ *\{"/[^"]*", *"[A-Z][A-Z, ]*",' "$root"/scheduler/api/*.c \
  | sed -E 's/.*"([^"]+)", *"([^"]+)".*/\1\t\2/' >"$HF_TMP/routes.tsv"
(( $(wc -l <"$HF_TMP/routes.tsv") >= 10 )) || hf_fail "could not read the route table from scheduler/api/*.c"
while IFS=$'\t' read -r pat methods; do
  path=$(sed -e 's/\*/{id}/g' -e 's/@/{action}/g' -e 's/#/{sha256}/g' <<<"$pat")
  for m in ${methods//,/ }; do
    [[ $m == HEAD ]] && continue
    printf '%s %s\n' "$m" "$path"
  done
done <"$HF_TMP/routes.tsv" | sort >"$HF_TMP/served.txt"
jq -r '.paths | to_entries[] | .key as $p | .value | keys[]
       | select(. == "get" or . == "post" or . == "put" or . == "patch" or . == "delete")
       | "\(ascii_upcase) \($p)"' "$HF_TMP/openapi.json" | sort >"$HF_TMP/documented.txt"
missing=$(comm -23 "$HF_TMP/served.txt" "$HF_TMP/documented.txt")
[[ -z $missing ]] || hf_fail "served by the scheduler but not in docs/openapi.yaml: $(tr '\n' ';' <<<"$missing")"
extra=$(comm -13 "$HF_TMP/served.txt" "$HF_TMP/documented.txt")
[[ -z $extra ]] || hf_fail "in docs/openapi.yaml but not in the scheduler's route table: $(tr '\n' ';' <<<"$extra")"
hf_log "ok: route table and openapi.yaml agree ($(wc -l <"$HF_TMP/served.txt") operations)"

# ---- 2. every operation answers documented statuses ------------------------
printf 'user:user-tok\nagent:agent-tok\nadmin:admin-tok\n' >"$HF_TMP/tokens"
# The fake agent below heartbeats only between calls: a long agent timeout
# keeps its trial RUNNING however slowly a loaded machine runs the calls.
hf_start_scheduler --token-file "$HF_TMP/tokens" --agent-timeout 120000 --webhook-allow-private
U='user-tok'
A='agent-tok'
declare -A ok2xx=()
ncalls=0
mkdir -p "$HF_TMP/bodies"
: >"$HF_TMP/answers.tsv"

# call TOKEN METHOD SPEC_PATH URL_PATH [BODY [EXPECT]]: the answer must be
# documented for (SPEC_PATH, METHOD); EXPECT (if given) must match exactly.
# CALL_ARGS: more curl arguments (a checkpoint upload's -T FILE and
# headers). Sets BODY_OUT.
CALL_ARGS=()
call() {
  local tok=$1 m=$2 spec=$3 url=$4 body=${5-} expect=${6-} code args=("${CALL_ARGS[@]}")
  [[ -n $tok ]] && args+=(-H "Authorization: Bearer $tok")
  [[ -n $body ]] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
  ncalls=$((ncalls + 1))
  local bf="$HF_TMP/bodies/$ncalls" ct
  ct=$(curl -s -m 3 -o "$bf" -w '%{http_code}\t%{content_type}' -X "$m" "${args[@]}" "$HF_URL$url" || true)
  code=${ct%%$'\t'*}; ct=${ct#*$'\t'}
  BODY_OUT=$(head -c 100000 "$bf")
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$spec" "$code" "$ct" "$bf" >>"$HF_TMP/answers.tsv"
  jq -e --arg p "$spec" --arg m "${m,,}" --arg c "$code" '.paths[$p][$m].responses | has($c)' \
    "$HF_TMP/openapi.json" >/dev/null \
    || hf_fail "$m $url answered $code, not documented for $m $spec in openapi.yaml (body: ${BODY_OUT:0:300})"
  if [[ -n $expect && $code != "$expect" ]]; then
    hf_fail "$m $url answered $code, expected $expect (body: ${BODY_OUT:0:300})"
  fi
  [[ $code == 2* ]] && ok2xx["$m $spec"]=1
  return 0
}

exp_body='{"name": "openapi", "objective": {"metric": "val_acc", "goal": "maximize"},
  "searcher": {"name": "random", "max_trials": 2, "seed": 1},
  "hyperparameters": {"x": {"type": "uniform", "min": 0, "max": 1}},
  "trial": {"command": ["true"], "max_restarts": 0}}'

call "" GET /healthz /healthz "" 200
call "$U" GET /metrics /metrics "" 200
call "" GET /metrics /metrics "" 401
# SSE: the status arrives at once, the stream then stays open (curl -m cuts it)
call "$U" GET /api/v1/events /api/v1/events "" 200
call "$U" POST /api/v1/experiments /api/v1/experiments "$exp_body" 201
E=$(jq -r .id <<<"$BODY_OUT")
call "$U" POST /api/v1/experiments /api/v1/experiments '{}' 400
call "$A" POST /api/v1/experiments /api/v1/experiments "$exp_body" 403
head -c 2000000 /dev/zero | tr '\0' ' ' >"$HF_TMP/big"
printf '{"name": "x"}' >>"$HF_TMP/big"
call "$U" POST /api/v1/experiments /api/v1/experiments "@$HF_TMP/big" 413
call "$U" GET /api/v1/experiments /api/v1/experiments "" 200
call "$A" GET /api/v1/experiments /api/v1/experiments "" 200
call "$U" GET '/api/v1/experiments/{id}' "/api/v1/experiments/$E" "" 200
call "$U" GET '/api/v1/experiments/{id}' /api/v1/experiments/999999 "" 404
for sub in trials top export pareto; do
  call "$U" GET "/api/v1/experiments/{id}/$sub" "/api/v1/experiments/$E/$sub" "" 200
  call "$U" GET "/api/v1/experiments/{id}/$sub" "/api/v1/experiments/999999/$sub" "" 404
done
call "$U" GET '/api/v1/experiments/{id}/top' "/api/v1/experiments/$E/top?k=0" "" 400
# several objectives and a constraint (docs/search.md): accepted, and its front answers
mo_body='{"name": "openapi-mo", "objective": [{"metric": "val_loss", "goal": "minimize"},
  {"metric": "latency_ms", "goal": "minimize"}], "constraints": [{"metric": "mem", "max": 2}],
  "searcher": {"name": "tpe", "max_trials": 1, "seed": 1},
  "hyperparameters": {"x": {"type": "uniform", "min": 0, "max": 1}},
  "trial": {"command": ["true"], "max_restarts": 0}}'
call "$U" POST /api/v1/experiments /api/v1/experiments "$mo_body" 201
EM=$(jq -r .id <<<"$BODY_OUT")
call "$U" GET '/api/v1/experiments/{id}/pareto' "/api/v1/experiments/$EM/pareto" "" 200
call "$U" POST '/api/v1/experiments/{id}/{action}' "/api/v1/experiments/$EM/cancel" "" 200
call "$U" GET '/api/v1/experiments/{id}/export' "/api/v1/experiments/$E/export?format=csv" "" 200
call "$U" GET '/api/v1/experiments/{id}/export' "/api/v1/experiments/$E/export?format=xml" "" 400

# a fake agent: register, heartbeat until it is assigned a trial
reg='{"name": "fake-1", "slots": 1, "host": "127.0.0.1", "version": "test"}'
call "$A" POST /api/v1/agents /api/v1/agents "$reg" 201
AG=$(jq -r .id <<<"$BODY_OUT")
call "$U" POST /api/v1/agents /api/v1/agents "$reg" 403
call "$A" POST /api/v1/agents /api/v1/agents '{"slots": 1}' 400
T=""
for _ in $(seq 1 50); do
  call "$A" POST '/api/v1/agents/{id}/heartbeat' "/api/v1/agents/$AG/heartbeat" '{"running": []}' 200
  T=$(jq -r '.assign[0].trial_id // empty' <<<"$BODY_OUT")
  [[ -n $T ]] && break
  sleep 0.1
done
[[ -n $T ]] || hf_fail "the fake agent was never assigned a trial"
att=$(jq -r '.assign[0].attempt' <<<"$BODY_OUT")
now=$(( $(date +%s) * 1000 ))
hb=$(jq -nc --argjson t "$T" --argjson a "$att" --argjson now "$now" '{
  running: [{trial_id: $t, attempt: $a, pid: 4242}],
  events: [{trial_id: $t, attempt: $a, type: "started", time: $now, pid: 4242}],
  metrics: [{trial_id: $t, attempt: $a, time: $now, step: 1, epoch: 1, values: {val_acc: 0.5}}],
  logs: [{trial_id: $t, attempt: $a, time: $now, stream: "stdout", line: "hello"}]}')
call "$A" POST '/api/v1/agents/{id}/heartbeat' "/api/v1/agents/$AG/heartbeat" "$hb" 200
call "$A" POST '/api/v1/agents/{id}/heartbeat' "/api/v1/agents/$AG/heartbeat" '{"bogus": 1}' 400
call "$A" POST '/api/v1/agents/{id}/heartbeat' /api/v1/agents/999999/heartbeat '{"running": []}' 404
call "$U" GET /api/v1/agents /api/v1/agents "" 200
wait_p='/api/v1/agents/{id}/wait'
call "$A" GET "$wait_p" "/api/v1/agents/$AG/wait?timeout_ms=0" "" 200
call "$A" GET "$wait_p" "/api/v1/agents/$AG/wait?timeout_ms=-1" "" 400
call "$U" GET "$wait_p" "/api/v1/agents/$AG/wait?timeout_ms=0" "" 403
call "$A" GET "$wait_p" "/api/v1/agents/999999/wait?timeout_ms=0" "" 404

call "$U" GET '/api/v1/trials/{id}' "/api/v1/trials/$T" "" 200
call "$U" GET '/api/v1/trials/{id}' /api/v1/trials/999999 "" 404
call "$U" GET '/api/v1/trials/{id}/metrics' "/api/v1/trials/$T/metrics?name=val_acc" "" 200
jq -e '.metrics | length == 1' >/dev/null <<<"$BODY_OUT" || hf_fail "the fake agent's metric is not stored: $BODY_OUT"
call "$U" GET '/api/v1/trials/{id}/metrics' "/api/v1/trials/$T/metrics?limit=0" "" 400
call "$U" GET '/api/v1/trials/{id}/metrics' /api/v1/trials/999999/metrics "" 404
xm='/api/v1/experiments/{id}/metrics'
call "$U" GET "$xm" "/api/v1/experiments/$E/metrics?name=val_acc&max_points=10" "" 200
call "$U" GET "$xm" "/api/v1/experiments/$E/metrics" "" 400
call "$U" GET "$xm" "/api/v1/experiments/999999/metrics?name=val_acc" "" 404
call "$U" GET '/api/v1/trials/{id}/logs' "/api/v1/trials/$T/logs" "" 200
call "$U" GET '/api/v1/trials/{id}/logs' "/api/v1/trials/$T/logs?limit=0" "" 400
call "$U" GET '/api/v1/trials/{id}/logs' /api/v1/trials/999999/logs "" 404
call "$U" GET '/api/v1/trials/{id}/logs' "/api/v1/trials/$T/logs?grep=epoch&icase=1" "" 200
call "$U" GET '/api/v1/trials/{id}/logs' "/api/v1/trials/$T/logs?grep=a(b&regex=1" "" 400
xl='/api/v1/experiments/{id}/logs'
call "$U" GET "$xl" "/api/v1/experiments/$E/logs?grep=epoch" "" 200
call "$U" GET "$xl" "/api/v1/experiments/$E/logs?grep=%5B&regex=1" "" 400
call "$U" GET "$xl" "/api/v1/experiments/$E/logs" "" 400
call "$U" GET "$xl" "/api/v1/experiments/999999/logs?grep=x" "" 404
xi='/api/v1/experiments/{id}/importance'
call "$U" GET "$xi" "/api/v1/experiments/$E/importance" "" 200
call "$U" GET "$xi" "/api/v1/experiments/999999/importance" "" 404
call "$U" GET "$xi" "/api/v1/experiments/$E/importance?objective=no_such_metric" "" 400
# checkpoints: upload (streamed PUT), list, download by hash
printf 'checkpoint bytes\n' >"$HF_TMP/ckpt"
CKS=$(sha256sum "$HF_TMP/ckpt" | cut -c1-64)
ckp='/api/v1/trials/{id}/checkpoints'
ckq="/api/v1/trials/$T/checkpoints?step=1&attempt=$att"
CALL_ARGS=(-T "$HF_TMP/ckpt" -H 'Content-Type: application/octet-stream' -H "X-Hyperfarm-Sha256: $CKS")
call "$A" PUT "$ckp" "$ckq" "" 201
jq -e --arg s "$CKS" '.sha256 == $s and .size == 17' >/dev/null <<<"$BODY_OUT" || hf_fail "PUT checkpoint: $BODY_OUT"
call "$U" PUT "$ckp" "$ckq" "" 403
call "" PUT "$ckp" "$ckq" "" 401
call "$A" PUT "$ckp" "/api/v1/trials/999999/checkpoints?step=1&attempt=$att" "" 404
call "$A" PUT "$ckp" "/api/v1/trials/$T/checkpoints?attempt=$att" "" 400
CALL_ARGS=(-T "$HF_TMP/ckpt" -H 'Transfer-Encoding: chunked' -H "X-Hyperfarm-Sha256: $CKS")
call "$A" PUT "$ckp" "$ckq" "" 411
CALL_ARGS=(-T "$HF_TMP/ckpt" -H "X-Hyperfarm-Sha256: $(printf x | sha256sum | cut -c1-64)")
call "$A" PUT "$ckp" "$ckq" "" 422
CALL_ARGS=(-T "$HF_TMP/ckpt")
call "$A" PUT "$ckp" "$ckq" "" 400
truncate -s 9G "$HF_TMP/ckpt-huge"   # sparse: over the default --max-checkpoint-mb 8192
CALL_ARGS=(-T "$HF_TMP/ckpt-huge" -H "X-Hyperfarm-Sha256: $CKS")
call "$A" PUT "$ckp" "$ckq" "" 413
CALL_ARGS=()
call "$U" GET "$ckp" "/api/v1/trials/$T/checkpoints" "" 200
jq -e --arg s "$CKS" '.checkpoints == [.checkpoints[0]] and .checkpoints[0].sha256 == $s' >/dev/null <<<"$BODY_OUT" \
  || hf_fail "the refused uploads are listed, or the stored one is not: $BODY_OUT"
call "$A" GET "$ckp" "/api/v1/trials/$T/checkpoints" "" 200
call "$U" GET "$ckp" /api/v1/trials/999999/checkpoints "" 404
call "$U" GET '/api/v1/checkpoints/{sha256}' "/api/v1/checkpoints/$CKS" "" 200
[[ $BODY_OUT == 'checkpoint bytes' ]] || hf_fail "GET checkpoint: '$BODY_OUT'"
call "$U" GET '/api/v1/checkpoints/{sha256}' "/api/v1/checkpoints/${CKS^^}" "" 400
call "$U" GET '/api/v1/checkpoints/{sha256}' "/api/v1/checkpoints/$(printf y | sha256sum | cut -c1-64)" "" 404
# any object by hash (agents fetch restores with it); name/agent on upload;
# registering an object already in the store (POST, metadata only)
call "$A" GET '/api/v1/objects/{sha256}' "/api/v1/objects/$CKS" "" 200
[[ $BODY_OUT == 'checkpoint bytes' ]] || hf_fail "GET object: '$BODY_OUT'"
call "$U" GET '/api/v1/objects/{sha256}' "/api/v1/objects/${CKS^^}" "" 400
call "$U" GET '/api/v1/objects/{sha256}' "/api/v1/objects/$(printf y | sha256sum | cut -c1-64)" "" 404
CALL_ARGS=(-T "$HF_TMP/ckpt" -H "X-Hyperfarm-Sha256: $CKS")
call "$A" PUT "$ckp" "$ckq&name=ckpt-000000000001.hfck&agent=1" "" 201
call "$A" PUT "$ckp" "$ckq&name=a/b" "" 400
CALL_ARGS=()
call "$A" POST "$ckp" "/api/v1/trials/$T/checkpoints" "{\"sha256\": \"$CKS\", \"size\": 17, \"step\": 2, \"attempt\": $att, \"name\": \"c2\"}" 201
call "$A" POST "$ckp" "/api/v1/trials/$T/checkpoints" "{\"sha256\": \"$(printf y | sha256sum | cut -c1-64)\", \"size\": 1, \"step\": 2, \"attempt\": $att}" 409
call "$A" POST "$ckp" "/api/v1/trials/$T/checkpoints" "{\"sha256\": \"$CKS\", \"size\": 18, \"step\": 2, \"attempt\": $att}" 422
call "$A" POST "$ckp" "/api/v1/trials/$T/checkpoints" "{\"sha256\": \"$CKS\"}" 400
call "$A" POST "$ckp" /api/v1/trials/999999/checkpoints "{\"sha256\": \"$CKS\", \"size\": 17, \"step\": 2, \"attempt\": 1}" 404
call "$U" GET "$ckp" "/api/v1/trials/$T/checkpoints" "" 200
jq -e '[.checkpoints[].name] == [null, "ckpt-000000000001.hfck", "c2"] and .checkpoints[1].agent_id == 1' >/dev/null <<<"$BODY_OUT" \
  || hf_fail "names/agents of the checkpoints: $BODY_OUT"
# code contexts: upload (streamed PUT, user token), HEAD/GET by hash, named by an experiment
CALL_ARGS=(-T "$HF_TMP/ckpt" -H "X-Hyperfarm-Sha256: $CKS")
call "$U" PUT /api/v1/contexts /api/v1/contexts "" 201
jq -e --arg s "$CKS" '.sha256 == $s and .size == 17' >/dev/null <<<"$BODY_OUT" || hf_fail "PUT context: $BODY_OUT"
call "$A" PUT /api/v1/contexts /api/v1/contexts "" 403
call "" PUT /api/v1/contexts /api/v1/contexts "" 401
CALL_ARGS=(-T "$HF_TMP/ckpt" -H 'Transfer-Encoding: chunked' -H "X-Hyperfarm-Sha256: $CKS")
call "$U" PUT /api/v1/contexts /api/v1/contexts "" 411
CALL_ARGS=(-T "$HF_TMP/ckpt" -H "X-Hyperfarm-Sha256: $(printf x | sha256sum | cut -c1-64)")
call "$U" PUT /api/v1/contexts /api/v1/contexts "" 422
CALL_ARGS=(-T "$HF_TMP/ckpt")
call "$U" PUT /api/v1/contexts /api/v1/contexts "" 400
CALL_ARGS=(-T "$HF_TMP/ckpt-huge" -H "X-Hyperfarm-Sha256: $CKS")
call "$U" PUT /api/v1/contexts /api/v1/contexts "" 413
CALL_ARGS=()
call "$U" GET '/api/v1/contexts/{sha256}' "/api/v1/contexts/$CKS" "" 200
call "$U" GET '/api/v1/contexts/{sha256}' "/api/v1/contexts/${CKS^^}" "" 400
call "$U" GET '/api/v1/contexts/{sha256}' "/api/v1/contexts/$(printf y | sha256sum | cut -c1-64)" "" 404
call "$U" POST /api/v1/experiments /api/v1/experiments \
  "$(jq -c --arg c "$(printf y | sha256sum | cut -c1-64)" '. + {context: $c}' <<<"$exp_body")" 422

wh='{"url": "http://127.0.0.1:9/hook", "events": ["experiment.*"]}'
call "$U" POST /api/v1/webhooks /api/v1/webhooks "$wh" 403   # a global hook: admins only
call admin-tok POST /api/v1/webhooks /api/v1/webhooks "$wh" 201
WH=$(jq .id <<<"$BODY_OUT")
call "$U" POST /api/v1/webhooks /api/v1/webhooks '{"url": "ftp://x"}' 400
call "$A" POST /api/v1/webhooks /api/v1/webhooks "$wh" 403
call "" POST /api/v1/webhooks /api/v1/webhooks "$wh" 401
call "$U" POST /api/v1/webhooks /api/v1/webhooks "@$HF_TMP/big" 413
call "$U" GET /api/v1/webhooks /api/v1/webhooks "" 200
jq -e '.webhooks | length == 1 and (.[0] | has("secret") | not)' >/dev/null <<<"$BODY_OUT" || hf_fail "GET /webhooks: $BODY_OUT"
call "$U" POST '/api/v1/webhooks/{id}/test' "/api/v1/webhooks/$WH/test" "" 403   # admin's global hook
call admin-tok POST '/api/v1/webhooks/{id}/test' "/api/v1/webhooks/$WH/test" "" 202
call admin-tok POST '/api/v1/webhooks/{id}/test' /api/v1/webhooks/999999/test "" 404
call "$A" DELETE '/api/v1/webhooks/{id}' "/api/v1/webhooks/$WH" "" 403
call "$U" DELETE '/api/v1/webhooks/{id}' "/api/v1/webhooks/$WH" "" 403
call admin-tok DELETE '/api/v1/webhooks/{id}' "/api/v1/webhooks/$WH" "" 200
call admin-tok DELETE '/api/v1/webhooks/{id}' "/api/v1/webhooks/$WH" "" 404
call "$U" GET /api/v1/whoami /api/v1/whoami "" 200
call "$U" GET /api/v1/provisioner /api/v1/provisioner "" 200

call "$U" POST '/api/v1/trials/{id}/kill' "/api/v1/trials/$T/kill" "" 200
call "$U" POST '/api/v1/trials/{id}/kill' /api/v1/trials/999999/kill "" 404

# the workflow routes (issue #17): PATCH, fork, events
call "$U" PATCH '/api/v1/experiments/{id}' "/api/v1/experiments/$E" '{"description": "**md**", "add_tags": ["a1"]}' 200
jq -e '.tags == ["a1"] and .description == "**md**"' >/dev/null <<<"$BODY_OUT" || hf_fail "PATCH experiment: $BODY_OUT"
call "$U" PATCH '/api/v1/experiments/{id}' "/api/v1/experiments/$E" '{"tags": ["bad tag"]}' 400
call "$U" PATCH '/api/v1/experiments/{id}' "/api/v1/experiments/$E" '{}' 400
call "$A" PATCH '/api/v1/experiments/{id}' "/api/v1/experiments/$E" '{"description": null}' 403
call "$U" PATCH '/api/v1/experiments/{id}' /api/v1/experiments/999999 '{"description": null}' 404
call "$U" GET /api/v1/experiments "/api/v1/experiments?tag=a1" "" 200
jq -e --argjson e "$E" '[.experiments[].id] == [$e]' >/dev/null <<<"$BODY_OUT" || hf_fail "?tag=a1: $BODY_OUT"
call "$U" GET /api/v1/experiments "/api/v1/experiments?tag=no%20space" "" 400
call "$U" POST '/api/v1/experiments/{id}/fork' "/api/v1/experiments/$E/fork" "$exp_body" 201
jq -e --argjson e "$E" '.parent_experiment == $e' >/dev/null <<<"$BODY_OUT" || hf_fail "fork: $BODY_OUT"
call "$U" POST '/api/v1/experiments/{id}/fork' "/api/v1/experiments/$E/fork" '{"name": "x"}' 400
call "$U" POST '/api/v1/experiments/{id}/fork' /api/v1/experiments/999999/fork "$exp_body" 404
call "$A" POST '/api/v1/experiments/{id}/fork' "/api/v1/experiments/$E/fork" "$exp_body" 403
call "$U" GET '/api/v1/experiments/{id}/events' "/api/v1/experiments/$E/events" "" 200
call "$U" GET '/api/v1/experiments/{id}/events' "/api/v1/experiments/$E/events?limit=0" "" 400
call "$U" GET '/api/v1/experiments/{id}/events' /api/v1/experiments/999999/events "" 404
call "$U" PATCH '/api/v1/trials/{id}' "/api/v1/trials/$T" '{"notes": "# learned"}' 200
jq -e '.notes == "# learned"' >/dev/null <<<"$BODY_OUT" || hf_fail "PATCH trial: $BODY_OUT"
call "$U" PATCH '/api/v1/trials/{id}' "/api/v1/trials/$T" '{"notes": 3}' 400
call "$U" PATCH '/api/v1/trials/{id}' /api/v1/trials/999999 '{"notes": null}' 404
call "$A" PATCH '/api/v1/trials/{id}' "/api/v1/trials/$T" '{"notes": null}' 403

act='/api/v1/experiments/{id}/{action}'
call "$U" POST "$act" "/api/v1/experiments/$E/pause" "" 200
call "$U" POST "$act" "/api/v1/experiments/$E/resume" "" 200
call "$U" POST "$act" "/api/v1/experiments/$E/extend" '{"add_trials": 1}' 200
call "$U" POST "$act" "/api/v1/experiments/$E/extend" '{"add_trials": 0}' 400
call "$U" POST "$act" "/api/v1/experiments/$E/cancel" "" 200
call "$U" POST "$act" "/api/v1/experiments/$E/pause" "" 409
call "$U" POST "$act" /api/v1/experiments/999999/cancel "" 404
# archive and delete: refused while E's killed trial still waits for its
# agent; E2 gets no trial (the agent's slot is taken), so once canceled it
# runs nothing.
call "$U" POST "$act" "/api/v1/experiments/$E/archive" "" 409
call "$U" DELETE '/api/v1/experiments/{id}' "/api/v1/experiments/$E" "" 409
call "$U" POST /api/v1/experiments /api/v1/experiments "$exp_body" 201
E2=$(jq -r .id <<<"$BODY_OUT")
call "$U" POST "$act" "/api/v1/experiments/$E2/cancel" "" 200
call "$U" POST "$act" "/api/v1/experiments/$E2/archive" "" 200
jq -e '.archived == true and .checkpoint_bytes == 0' >/dev/null <<<"$BODY_OUT" || hf_fail "archive: $BODY_OUT"
call "$U" GET /api/v1/experiments "/api/v1/experiments?archived=1" "" 200
call "$U" GET /api/v1/experiments "/api/v1/experiments?archived=2" "" 400
call "$U" POST "$act" "/api/v1/experiments/$E2/unarchive" "" 200
call "$A" DELETE '/api/v1/experiments/{id}' "/api/v1/experiments/$E2" "" 403
call "$U" DELETE '/api/v1/experiments/{id}' "/api/v1/experiments/$E2" "" 200
call "$U" DELETE '/api/v1/experiments/{id}' "/api/v1/experiments/$E2" "" 404
mkdir -p "$HF_TMP/backups"
call admin-tok POST /api/v1/backups /api/v1/backups "{\"dir\": \"$HF_TMP/backups\"}" 202
BK=$(jq -r .id <<<"$BODY_OUT")
call "$U" POST /api/v1/backups /api/v1/backups "{\"dir\": \"$HF_TMP/backups\"}" 403
call admin-tok POST /api/v1/backups /api/v1/backups '{"dir": "relative"}' 400
call admin-tok GET '/api/v1/backups/{id}' "/api/v1/backups/$BK" "" 200
call admin-tok GET '/api/v1/backups/{id}' /api/v1/backups/999999 "" 404
call "$U" GET '/api/v1/backups/{id}' "/api/v1/backups/$BK" "" 403
# replication (docs/scheduler.md "Replication"): last, as a stream request
# makes this primary wait for a standby's acks (one that never comes)
call "$A" GET /api/v1/replication /api/v1/replication "" 200
call "$U" GET /api/v1/replication/snapshot /api/v1/replication/snapshot "" 403
call "$A" GET /api/v1/replication/snapshot /api/v1/replication/snapshot "" 403
call "$U" GET /api/v1/replication/stream "/api/v1/replication/stream?cluster=x&term=1&after=0" "" 403
call "$A" GET /api/v1/replication/stream "/api/v1/replication/stream?cluster=x&term=1&after=0" "" 403
CALL_ARGS=(-D "$HF_TMP/snap.hdr")
call admin-tok GET /api/v1/replication/snapshot /api/v1/replication/snapshot "" 200
CALL_ARGS=()
RCL=$(tr -d '\r' <"$HF_TMP/snap.hdr" | awk -F': ' 'tolower($1) == "x-hyperfarm-cluster" {print $2}')
RLSN=$(tr -d '\r' <"$HF_TMP/snap.hdr" | awk -F': ' 'tolower($1) == "x-hyperfarm-lsn" {print $2}')
[[ -n $RCL && -n $RLSN ]] || hf_fail "the snapshot has no X-Hyperfarm-Cluster / -LSN: $(cat "$HF_TMP/snap.hdr")"
call "$U" POST /api/v1/experiments /api/v1/experiments "$exp_body" 201
call admin-tok GET /api/v1/replication/stream "/api/v1/replication/stream?cluster=other&term=1&after=$RLSN" "" 409
call admin-tok GET /api/v1/replication/stream "/api/v1/replication/stream?cluster=$RCL&term=1&after=999999" "" 409
call admin-tok GET /api/v1/replication/stream "/api/v1/replication/stream?cluster=$RCL&term=1" "" 400
call admin-tok GET /api/v1/replication/stream "/api/v1/replication/stream?cluster=$RCL&term=1&after=$RLSN" "" 200
call admin-tok GET '/api/v1/replication/objects/{sha256}' "/api/v1/replication/objects/$CKS" "" 200
call admin-tok GET '/api/v1/replication/objects/{sha256}' "/api/v1/replication/objects/$(printf '0%.0s' {1..64})" "" 404
call "$U" GET '/api/v1/replication/objects/{sha256}' "/api/v1/replication/objects/$CKS" "" 403
# promotion (docs/scheduler.md "Standby and failover"): 409 on this primary,
# 403 for a user; a real standby of it, promoted by an admin: 202 (it then
# re-executes itself as a primary of its own, and is stopped)
call admin-tok POST /api/v1/replication/promote /api/v1/replication/promote "" 409
call "$U" POST /api/v1/replication/promote /api/v1/replication/promote "" 403
SB_PORT=$(hf_free_port)
"$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:$SB_PORT" --db "$HF_TMP/standby.db" --token-file "$HF_TMP/tokens" \
  --standby-of "$HF_URL" --failover-after 0 >>"$HF_TMP/standby.log" 2>&1 &
SB_PID=$!
hf_track "$SB_PID"
hf_wait_http "http://127.0.0.1:$SB_PORT/healthz" 30 || hf_fail "the standby did not start (standby.log)"
PRIMARY_URL=$HF_URL HF_URL=http://127.0.0.1:$SB_PORT
call admin-tok POST /api/v1/replication/promote /api/v1/replication/promote "" 202
HF_URL=$PRIMARY_URL
hf_kill_pid "$SB_PID"
hf_log "ok: every call answered a status documented for its operation (and the expected one)"

while read -r m p; do
  [[ -n ${ok2xx["$m $p"]:-} ]] || hf_fail "$m $p was never answered with a documented 2xx"
done <"$HF_TMP/documented.txt"
hf_log "ok: all $(wc -l <"$HF_TMP/documented.txt") documented operations answered 2xx"

# ---- 3. undocumented methods: 405 with the documented Allow ----------------
jq -r '.paths | keys[]' "$HF_TMP/openapi.json" | while read -r p; do
  url=$(sed -e "s/{id}/$E/" -e 's/{action}/pause/' -e "s/{sha256}/$CKS/" <<<"$p")
  want=$(jq -r --arg p "$p" '.paths[$p] | keys | map(select(. == "get" or . == "post" or . == "put" or . == "delete" or . == "patch")) | map(ascii_upcase) | sort | join(",")' \
    "$HF_TMP/openapi.json")
  hdr=$(curl -s -m 3 -o /dev/null -D - -X PURGE -H "Authorization: Bearer $U" "$HF_URL$url" | tr -d '\r')
  code=$(head -1 <<<"$hdr" | awk '{print $2}')
  [[ $code == 405 ]] || hf_fail "PURGE $url answered $code, expected 405"
  allow=$(sed -n 's/^[Aa]llow: *//p' <<<"$hdr" | tr -d ' ' | tr ',' '\n' | grep -vx HEAD | sort | paste -sd, -)
  [[ $allow == "$want" ]] || hf_fail "PURGE $url: Allow '$allow', openapi.yaml documents '$want'"
done
hf_log "ok: undocumented methods answer 405 with Allow = the documented methods"

# ---- 5. every answer's body matches the documented schema ------------------
node "$root/tests/openapi/check.mjs" responses "$root/docs/openapi.yaml" "$HF_TMP/answers.tsv" >&2 \
  || hf_fail "answers of the live scheduler do not match docs/openapi.yaml's schemas (above)"
hf_log "ok: all $ncalls answers match the content types and schemas of docs/openapi.yaml"
# The check can fail: the experiments list without its required field, a
# trial whose state is not one of the documented ones, and an error body
# answered where the document names no content type, are each refused.
echo '{"count": 1}' >"$HF_TMP/bad1"
jq '.trials[0].state = "EXPLODED"' "$(awk -F'\t' '$1 == "GET" && $2 ~ /trials$/ && $3 == 200 {print $5; exit}' "$HF_TMP/answers.tsv")" >"$HF_TMP/bad2"
printf 'GET\t/api/v1/experiments\t200\tapplication/json\t%s\n' "$HF_TMP/bad1" >"$HF_TMP/bad.tsv"
printf 'GET\t/api/v1/experiments/{id}/trials\t200\tapplication/json\t%s\n' "$HF_TMP/bad2" >>"$HF_TMP/bad.tsv"
printf 'GET\t/metrics\t200\tapplication/json\t%s\n' "$HF_TMP/bad1" >>"$HF_TMP/bad.tsv"
out=$(node "$root/tests/openapi/check.mjs" responses "$root/docs/openapi.yaml" "$HF_TMP/bad.tsv" 2>&1) \
  && hf_fail "the schema check accepted broken bodies: $out"
[[ $(grep -c '^FAIL' <<<"$out") == 3 ]] || hf_fail "the schema check did not refuse all three broken bodies: $out"
hf_log "ok: the schema check refuses a missing required field, a bad enum value and an undocumented type"

# ---- 4. docs/api.md is generated from the YAML -----------------------------
PATH=$(dirname "$py"):$PATH "$py" "$root/scripts/gen-api-doc" --check || hf_fail "docs/api.md is stale: run scripts/gen-api-doc"
hf_log "ok: docs/api.md matches scripts/gen-api-doc output"
hf_log "PASS"
