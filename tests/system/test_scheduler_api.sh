#!/usr/bin/env bash
# test_scheduler_api.sh — the real scheduler on a free loopback port, fed
# bad input over HTTP with curl: malformed JSON, wrong types, missing
# fields, min > max, unknown searcher, empty command, a 10 MB body, unknown
# routes and methods (405 + Allow), ids that do not exist or are not ids,
# path traversal against --web, wrong-role and missing tokens. Each must
# get the right status and a JSON error (with the field when one is to
# blame), and the scheduler must still answer /healthz afterwards.
source "$(dirname "$0")/lib.sh"
hf_setup
hf_need hyperfarm-scheduler

WEB=$HF_TMP/web
mkdir -p "$WEB/js"
echo '<html>dash</html>' > "$WEB/index.html"
echo 'console.log(1)' > "$WEB/js/app.js"
echo 'top secret' > "$HF_TMP/secret.txt"
ln -s "$HF_TMP/secret.txt" "$WEB/leak.txt"
ln -s .. "$WEB/up"

# req METHOD PATH [BODY|@FILE] [TOKEN]: sets ST (status), BODY, HDRS.
req() {
  local m=$1 p=$2 b=${3-} tok=${4-}
  local args=(-sS -m 20 --path-as-is -o "$HF_TMP/body" -D "$HF_TMP/hdrs" -w '%{http_code}' -X "$m")
  [[ -n $tok ]] && args+=(-H "Authorization: Bearer $tok")
  if [[ -n $b ]]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$b")
  fi
  ST=$(curl "${args[@]}" "$HF_URL$p") || hf_fail "$m $p: no answer"
  BODY=$(cat "$HF_TMP/body")
  HDRS=$(cat "$HF_TMP/hdrs")
}
# expect STATUS [FIELD]: the last answer had STATUS and a JSON error (naming FIELD).
expect() {
  local want=$1 field=${2-} what="$M $P"
  [[ $ST == "$want" ]] || hf_fail "$what: status $ST, expected $want: $BODY"
  if [[ $want -ge 400 ]]; then
    jq -e 'has("error") and (.error|type=="string") and (.error|length>0)' >/dev/null <<<"$BODY" \
      || hf_fail "$what: not a JSON error: $BODY"
    if [[ -n $field ]]; then
      [[ $(jq -r '.field // ""' <<<"$BODY") == "$field" ]] || hf_fail "$what: field $(jq -r .field <<<"$BODY"), expected $field"
    fi
  fi
}
t() { M=$1; P=$2; req "$@"; }

hf_start_scheduler --web "$WEB" --agent-timeout 60000

GOOD='{"name":"ok","objective":{"metric":"val_acc","goal":"maximize"},
  "searcher":{"name":"random","max_trials":2,"max_concurrent_trials":1,"seed":1},
  "hyperparameters":{"lr":{"type":"log","min":0.0001,"max":0.1}},
  "trial":{"command":["true"]}}'
mk() { jq -c "$1" <<<"$GOOD"; }

hf_log "bad experiment files"
t POST /api/v1/experiments '{"name": "x",'                 ; expect 400
t POST /api/v1/experiments '[1,2]'                         ; expect 400
t POST /api/v1/experiments ''                              ; expect 400
t POST /api/v1/experiments "$(mk '.name=5')"               ; expect 400 name
t POST /api/v1/experiments "$(mk 'del(.objective)')"       ; expect 400 objective
t POST /api/v1/experiments "$(mk '.searcher.max_trials="8"')" ; expect 400 searcher.max_trials
t POST /api/v1/experiments "$(mk '.hyperparameters.lr.min=1')" ; expect 400 hyperparameters.lr.max
t POST /api/v1/experiments "$(mk '.searcher.name="genetic"')"  ; expect 400 searcher.name
t POST /api/v1/experiments "$(mk '.trial.command=[]')"     ; expect 400 trial.command
t POST /api/v1/experiments "$(mk '.trial.command="rm -rf /"')" ; expect 400 trial.command
t POST /api/v1/experiments "$(mk '.trial.resources={"workers":-2}')" ; expect 400 trial.resources.workers
t POST /api/v1/experiments "$(printf '%.0s[' {1..200})"    ; expect 400
head -c $((10 * 1024 * 1024)) /dev/zero | tr '\0' 'a' > "$HF_TMP/big.json"
t POST /api/v1/experiments "@$HF_TMP/big.json"             ; expect 413
hf_api GET /api/v1/experiments
[[ $(jq '.experiments|length' <<<"$HF_BODY") == 0 ]] || hf_fail "a rejected experiment was stored"

hf_log "routes, methods, ids"
t GET /api/v1/nope                                ; expect 404
t GET /api/v2/experiments                         ; expect 404
t DELETE /api/v1/experiments                      ; expect 405
grep -qi '^Allow: GET, POST' <<<"$HDRS" || hf_fail "405 without Allow header: $HDRS"
t PUT /api/v1/trials/1/kill                       ; expect 405
grep -qi '^Allow: POST' <<<"$HDRS" || hf_fail "405 without Allow: POST"
t GET /api/v1/trials/424242                       ; expect 404
t GET /api/v1/trials/424242/metrics               ; expect 404
t GET '/api/v1/experiments/424242/metrics?name=val_acc' ; expect 404
t GET /api/v1/experiments/1/metrics               ; expect 400 name
t GET '/api/v1/experiments/1/metrics?name=val_acc&max_points=-1' ; expect 400 max_points
t POST '/api/v1/experiments/1/metrics?name=val_acc' ; expect 405
t GET '/api/v1/agents/424242/wait?timeout_ms=10'  ; expect 404
t GET '/api/v1/agents/1/wait?timeout_ms=abc'      ; expect 400 timeout_ms
t GET /api/v1/trials/424242/logs                  ; expect 404
t POST /api/v1/trials/424242/kill                 ; expect 404
t GET /api/v1/trials/abc                          ; expect 400 id
t GET /api/v1/trials/-1                           ; expect 400 id
t GET /api/v1/experiments/99999999999999999999    ; expect 400 id
t POST /api/v1/experiments/77/pause               ; expect 404
t POST /api/v1/experiments/77/explode             ; expect 404
t POST /api/v1/agents/5/heartbeat '{}'            ; expect 404
t POST /api/v1/agents '{"name":"../etc","slots":2}'   ; expect 400 name
t POST /api/v1/agents '{"name":"a1","slots":"two"}'   ; expect 400 slots
t POST /api/v1/agents '{"name":"a1","slots":2,"gpus":[{"index":"x"}]}' ; expect 400 'gpus[0].index'

hf_log "a good experiment, an agent, bad heartbeats, queries"
t POST /api/v1/experiments "$GOOD"                ; expect 201
EXP=$(jq .id <<<"$BODY")
t POST /api/v1/agents '{"name":"a1","slots":1}'   ; expect 201
AG=$(jq .id <<<"$BODY")
t POST /api/v1/agents/$AG/heartbeat '{"events":[{"trial_id":"1"}]}' ; expect 400 'events[0].trial_id'
t POST /api/v1/agents/$AG/heartbeat '{"metrics":[{"trial_id":1,"attempt":1,"values":{"bad name":1}}]}' ; expect 400 'metrics[0].values.bad name'
t POST /api/v1/agents/$AG/heartbeat '{"logs":[{"trial_id":1,"attempt":1,"stream":"stdin","line":"x"}]}' ; expect 400 'logs[0].stream'
t POST /api/v1/agents/$AG/heartbeat '{"running":{}}' ; expect 400 running
t POST /api/v1/agents/$AG/heartbeat '{}'           ; expect 200
TR=$(jq '.assign[0].trial_id' <<<"$BODY")
[[ $TR =~ ^[0-9]+$ ]] || hf_fail "no assignment after registering: $BODY"
# A stale attempt is dropped, the current one stored.
t POST /api/v1/agents/$AG/heartbeat "{\"events\":[{\"trial_id\":$TR,\"attempt\":1,\"type\":\"started\",\"pid\":9}],
  \"metrics\":[{\"trial_id\":$TR,\"attempt\":1,\"step\":1,\"values\":{\"val_acc\":0.5}},
               {\"trial_id\":$TR,\"attempt\":7,\"step\":2,\"values\":{\"val_acc\":0.9}}]}" ; expect 200
t GET "/api/v1/trials/$TR/metrics?name=val_acc"    ; expect 200
[[ $(jq '.metrics|length' <<<"$BODY") == 1 ]] || hf_fail "stale-attempt metric stored: $BODY"
t GET "/api/v1/trials/$TR/metrics?after=x"        ; expect 400 after
t GET "/api/v1/trials/$TR/metrics?max_points=-5"  ; expect 400 max_points
t GET "/api/v1/trials/$TR/logs?limit=0"           ; expect 400 limit
t GET "/api/v1/experiments/$EXP/export?format=xml" ; expect 400 format
t GET "/api/v1/experiments/$EXP/export?format=csv" ; expect 200
t POST /api/v1/experiments/$EXP/extend '{"max_trials":1}' ; expect 400 max_trials
t POST /api/v1/experiments/$EXP/extend '{"max_trials":"x"}' ; expect 400 max_trials
t POST /api/v1/experiments/$EXP/cancel            ; expect 200
t POST /api/v1/experiments/$EXP/cancel            ; expect 409
t POST /api/v1/experiments/$EXP/pause             ; expect 409

hf_log "static files and traversal"
t GET /                          ; expect 200
grep -q dash <<<"$BODY" || hf_fail "index.html not served"
t GET /js/app.js                 ; expect 200
grep -qi '^Content-Type: text/javascript' <<<"$HDRS" || hf_fail "wrong content type for js"
for p in /../secret.txt /js/../../secret.txt /%2e%2e/secret.txt /%2E%2E/%2E%2E/etc/passwd /..%2fsecret.txt \
         '/%252e%252e/secret.txt' '/js/..\..\secret.txt'; do
  t GET "$p"
  [[ $ST == 400 || $ST == 404 ]] || hf_fail "GET $p -> $ST"
  grep -q 'top secret\|root:' <<<"$BODY" && hf_fail "GET $p leaked a file"
  expect "$ST"
done
t GET "$HF_TMP/secret.txt"       ; expect 404
t GET /leak.txt                  ; expect 404
t GET /up/secret.txt             ; expect 404
t POST /index.html '{}'          ; expect 405

hf_api GET /healthz
[[ $HF_STATUS == 200 ]] || hf_fail "healthz after bad input: $HF_STATUS"

hf_log "tokens and roles"
hf_stop_scheduler
printf '# test tokens\nuser:user-token-123\nagent:agent-token-456\n' > "$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
hf_start_scheduler --token-file "$HF_TMP/tokens" --agent-timeout 60000
U=user-token-123; A=agent-token-456
t GET /api/v1/experiments                        ; expect 401
grep -qi '^WWW-Authenticate: Bearer' <<<"$HDRS" || hf_fail "401 without WWW-Authenticate"
t GET /api/v1/experiments '' wrong-token-xxxx    ; expect 401
t GET /api/v1/experiments '' "$U"                ; expect 200
t GET /api/v1/experiments '' "$A"                ; expect 200
t POST /api/v1/experiments "$GOOD" "$A"          ; expect 403
t POST /api/v1/experiments/1/cancel '' "$A"      ; expect 403
t POST /api/v1/agents '{"name":"u1","slots":1}' "$U" ; expect 403
t POST /api/v1/agents/1/heartbeat '{}' "$U"      ; expect 403
t GET '/api/v1/agents/1/wait?timeout_ms=0' '' "$U" ; expect 403
t POST /api/v1/agents '{"name":"a2","slots":1}' "$A" ; expect 201
t GET /metrics                                   ; expect 401
t GET /metrics '' "$U"                           ; expect 200
grep -q '^hyperfarm_trials{state="QUEUED"}' <<<"$BODY" || hf_fail "/metrics lacks trial gauges"
grep -q '^hyperfarm_http_request_duration_seconds_bucket' <<<"$BODY" || hf_fail "/metrics lacks latency histogram"
t GET /healthz                                   ; expect 200
# The data of the first run survived the restart.
t GET /api/v1/experiments/1 '' "$U"              ; expect 200
[[ $(jq -r .state <<<"$BODY") == CANCELED ]] || hf_fail "experiment state lost across restart: $BODY"
# EventSource may pass the token in the query string.
code=$(curl -s -m 2 -o "$HF_TMP/sse" -w '%{http_code}' "$HF_URL/api/v1/events?token=$U" || true)
[[ $code == 200 ]] || hf_fail "SSE with ?token=: $code"
grep -q '^retry:' "$HF_TMP/sse" || hf_fail "SSE stream did not start"

hf_api GET /healthz
[[ $HF_STATUS == 200 ]] || hf_fail "healthz at the end: $HF_STATUS"
hf_log "ok"
