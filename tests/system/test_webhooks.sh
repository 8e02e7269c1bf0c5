#!/usr/bin/env bash
# test_webhooks.sh — issue 17 point 7 against a real local HTTP receiver
# (tests/system/webhook_receiver.py):
#   1. POST /webhooks validation: every bad body is a 400 naming its field;
#      GET never shows a secret; a generated secret is returned once;
#   2. a global JSON hook (all events) and a per-experiment Slack hook
#      (experiment.*) on a receiver that is DOWN while a sweep runs: the
#      outbox holds the deliveries (pending, last_error recorded);
#   3. the scheduler is killed (-9) and restarted, then the receiver comes
#      up answering 500 to its first 3 requests: every state-change event
#      of the events table arrives (at least once) on the JSON hook, every
#      experiment event on the Slack hook as {"text": ...}, and every
#      X-Hyperfarm-Signature verifies (HMAC-SHA256 of the body);
#   4. DELETE removes a hook (404 the second time), unknown ids 404.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
command -v sqlite3 >/dev/null || hf_fail "needs the sqlite3 shell"
hf_setup
hf_start_scheduler --webhook-allow-private   # the receiver is on loopback (docs/scheduler.md)
RPORT=$(hf_free_port)
RURL=http://127.0.0.1:$RPORT
post_code() {  # BODY -> prints the status; body in $HF_TMP/resp
  curl -s -m 5 -o "$HF_TMP/resp" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$1" \
    "$HF_URL/api/v1/webhooks"
}
bad() {  # BODY FIELD
  local code; code=$(post_code "$1")
  [[ $code == 400 ]] && jq -e --arg f "$2" '.field == $f' "$HF_TMP/resp" >/dev/null \
    || hf_fail "POST /webhooks $1: $code $(cat "$HF_TMP/resp"), expected 400 naming $2"
}
bad '{"url": "ftp://x/y"}' url
bad '{"url": "http://"}' url
bad '{"url": "http://a b/"}' url
bad '{}' url
bad '{"url": "http://x/", "events": ["trial.EXPLODED"]}' 'events[0]'
bad '{"url": "http://x/", "events": []}' events
bad '{"url": "http://x/", "format": "xml"}' format
bad '{"url": "http://x/", "secret": ""}' secret
bad '{"url": "http://x/", "experiment_id": 0}' experiment_id
bad '{"url": "http://x/", "experiment_id": 999}' experiment_id
bad '{"url": "http://x/", "colour": 1}' colour
hf_log "ok: invalid hooks refused, each naming its field"

code=$(post_code "{\"url\": \"$RURL/json\", \"secret\": \"s3cret\", \"events\": [\"*\"]}")
[[ $code == 201 ]] || hf_fail "create: $code $(cat "$HF_TMP/resp")"
H1=$(jq .id "$HF_TMP/resp")
jq -e 'has("secret") | not' "$HF_TMP/resp" >/dev/null || hf_fail "a given secret was echoed: $(cat "$HF_TMP/resp")"
exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{name: "hooked", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 3, max_concurrent_trials: 2, seed: 2},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, epochs: 2, sleep_ms: 100},
  trial: {command: [$prog]}}')
hf_start_agent wh-a --slots 2
id=$(hf_submit "$exp")
code=$(post_code "{\"url\": \"$RURL/slack\", \"format\": \"slack\", \"events\": [\"experiment.*\"], \"experiment_id\": $id}")
[[ $code == 201 ]] || hf_fail "create slack: $code $(cat "$HF_TMP/resp")"
H2=$(jq .id "$HF_TMP/resp")
H2_AT=$(jq .created_at "$HF_TMP/resp")
SECRET2=$(jq -r .secret "$HF_TMP/resp")
[[ ${#SECRET2} == 64 ]] || hf_fail "no generated secret returned: $(cat "$HF_TMP/resp")"
hf_get /api/v1/webhooks >"$HF_TMP/list"
jq -e '[.webhooks[] | has("secret")] == [false, false] and (.webhooks | length) == 2' "$HF_TMP/list" >/dev/null \
  || hf_fail "GET /webhooks: $(cat "$HF_TMP/list")"
hf_log "ok: two hooks; GET shows no secret"

hf_wait_experiment "$id" 120
hf_wait_for 10 bash -c "curl -fsS '$HF_URL/api/v1/webhooks' | jq -e '.webhooks[0].pending > 0 and .webhooks[0].last_error != null' >/dev/null" \
  || hf_fail "no pending delivery with an error while the receiver is down: $(curl -s "$HF_URL/api/v1/webhooks")"
hf_log "ok: receiver down: $(curl -s "$HF_URL/api/v1/webhooks" | jq -c '[.webhooks[] | {pending, last_error}]')"

hf_stop_scheduler KILL
hf_restart_scheduler --webhook-allow-private
"${PYTHON:-python3}" "$(dirname "$0")/webhook_receiver.py" "$RPORT" "$HF_TMP/got.jsonl" --fail-first 3 >"$HF_TMP/recv.out" 2>&1 &
hf_track $!
hf_wait_for 10 grep -q ready "$HF_TMP/recv.out" || hf_fail "receiver did not start"
hf_wait_for 90 bash -c "curl -fsS '$HF_URL/api/v1/webhooks' | jq -e '[.webhooks[].pending] == [0, 0]' >/dev/null" \
  || hf_fail "deliveries still pending: $(curl -s "$HF_URL/api/v1/webhooks")"

# every state-change event in the store arrived on the JSON hook
sqlite3 "$HF_DB" "SELECT id FROM events WHERE experiment_id IS NOT NULL AND type IN
  ('QUEUED','ASSIGNED','RUNNING','COMPLETED','FAILED','STOPPED','CANCELED','PAUSED','ACTIVE') ORDER BY id" >"$HF_TMP/want"
jq -r 'select(.path == "/json" and .status == 200) | .body | fromjson | .event_id' "$HF_TMP/got.jsonl" | sort -n -u >"$HF_TMP/got"
nwant=$(wc -l <"$HF_TMP/want")
(( nwant >= 10 )) || hf_fail "only $nwant state-change events recorded"
missing=$(comm -23 <(sort "$HF_TMP/want") <(sort "$HF_TMP/got"))
[[ -z $missing ]] || hf_fail "events never delivered: $(tr '\n' ' ' <<<"$missing")"
jq -e -s 'map(select(.path == "/json" and .status == 200) | .body | fromjson)
          | any(.event == "experiment.COMPLETED") and any(.event == "trial.COMPLETED" and .objective != null)' \
  "$HF_TMP/got.jsonl" >/dev/null || hf_fail "no experiment.COMPLETED / trial.COMPLETED with objective"
grep -q '"status": 500' "$HF_TMP/got.jsonl" || hf_fail "the receiver never answered 500 (the retry was not tested)"
# the Slack hook: the experiment's events since it was created, as text
nexp=$(sqlite3 "$HF_DB" "SELECT count(*) FROM events WHERE experiment_id=$id AND trial_id IS NULL AND time >= $H2_AT
                         AND type IN ('ACTIVE','PAUSED','COMPLETED','CANCELED')")
(( nexp >= 1 )) || hf_fail "no experiment event after the slack hook was made"
nslack=$(jq -r 'select(.path == "/slack" and .status == 200) | .headers["X-Hyperfarm-Delivery"]' "$HF_TMP/got.jsonl" | sort -u | wc -l)
(( nslack == nexp )) || hf_fail "slack hook: $nslack deliveries for $nexp experiment events"
jq -e -s 'map(select(.path == "/slack")) | all(.body | fromjson | keys == ["text"]) and any(.body | test("is COMPLETED"))' \
  "$HF_TMP/got.jsonl" >/dev/null || hf_fail "slack bodies: $(grep slack "$HF_TMP/got.jsonl" | head -2)"
# every signature verifies
"${PYTHON:-python3}" - "$HF_TMP/got.jsonl" s3cret "$SECRET2" <<'PY' || hf_fail "a signature does not verify"
import hashlib, hmac, json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = sys.argv[2] if r["path"] == "/json" else sys.argv[3]
    want = "sha256=" + hmac.new(key.encode(), r["body"].encode(), hashlib.sha256).hexdigest()
    if r["headers"].get("X-Hyperfarm-Signature") != want:
        sys.exit("bad signature on %s delivery %s" % (r["path"], r["headers"].get("X-Hyperfarm-Delivery")))
    n += 1
print("verified", n, "signatures")
PY
hf_log "ok: $nwant events delivered after downtime, a 500 and a kill -9; $nslack slack messages; signatures verify"

code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$HF_URL/api/v1/webhooks/$H2")
[[ $code == 200 ]] || hf_fail "DELETE: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$HF_URL/api/v1/webhooks/$H2")
[[ $code == 404 ]] || hf_fail "DELETE again: $code"
hf_get /api/v1/webhooks | hf_jq_assert "[.webhooks[].id] == [$H1]" "one hook left"
hf_log "PASS"
