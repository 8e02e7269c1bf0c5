#!/usr/bin/env bash
# test_multiserver_upload_fault.sh — a corrupted and a truncated checkpoint
# upload are refused and retried (issue 15.1 and 15.5, on the multi-server
# harness tests/system/netns_lib.sh).
#
# Agent server a1 reaches the scheduler through
# tests/system/upload_fault_proxy.py, run inside a1 (127.0.0.1:9080 there
# -> 10.77.0.2:8080): the first checkpoint upload (PUT
# .../checkpoints) gets one byte of its body inverted (same length: only
# the SHA-256 can tell), the second is cut after half its body and both
# connections are closed; everything else passes. The trial is
# tests/progs/fake_trial with 256 KiB checkpoints, 4 epochs. Checks:
#   - the proxy damaged two uploads, and the scheduler answered the
#     corrupted one with 422;
#   - the agent logged both failures and uploaded both checkpoints on a
#     retry; the trial COMPLETED (uploads run beside the trial, never stop
#     it);
#   - the store lists a checkpoint for every epoch, and each listed object
#     downloads with the listed size and hashes to its name: nothing
#     damaged was ever visible;
#   - on the scheduler's disk every object file hashes to its name, and
#     no temp file of the failed uploads is left;
#   - the newest stored checkpoint holds epoch 4 written by this trial.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
netns_setup

netns_start_scheduler
netns_server a1 10.77.0.11
netns_spawn a1 "$HF_TMP/proxy.log" python3 -u "$(cd "$(dirname "$0")" && pwd)/upload_fault_proxy.py" 127.0.0.1:9080 10.77.0.2:8080 corrupt,truncate
hf_track "$NETNS_PID"
hf_wait_for 10 grep -q listening "$HF_TMP/proxy.log" || hf_fail "the proxy did not start: $(cat "$HF_TMP/proxy.log")"
NETNS_AGENT_URL=http://127.0.0.1:9080 netns_start_agent a1 10.77.0.11 --slots 1

id=$(hf_submit "$(netns_fake_experiment multiserver-upload-fault '{"name": "random", "max_trials": 1, "seed": 1}' 0 \
  --epochs 4 --sleep-ms 700 --ckpt-bytes 262144)")
hf_wait_experiment "$id" 60
t=$(hf_get "/api/v1/experiments/$id/trials" | jq -er '.trials[0].id')
hf_get "/api/v1/trials/$t" | jq -e '.state == "COMPLETED"' >/dev/null || hf_fail "trial $t: $(hf_get "/api/v1/trials/$t" | jq -c '{state, exit_code}')"
hf_log "ok: trial $t COMPLETED"
all_stored() { hf_get "/api/v1/trials/$t/checkpoints" | jq -e '[.checkpoints[].step] | unique == [100, 200, 300, 400]'; }
hf_wait_for 60 all_stored || hf_fail "the store does not list steps 100..400: $(hf_get "/api/v1/trials/$t/checkpoints" | jq -c '[.checkpoints[] | {step, sha256: .sha256[0:12]}]')"
hf_log "ok: a checkpoint of every epoch is in the store"

grep -q "^fault 1: corrupt PUT /api/v1/trials/$t/checkpoints" "$HF_TMP/proxy.log" || hf_fail "the proxy corrupted no upload: $(cat "$HF_TMP/proxy.log")"
grep -q "^fault 2: truncate PUT /api/v1/trials/$t/checkpoints" "$HF_TMP/proxy.log" || hf_fail "the proxy truncated no upload: $(cat "$HF_TMP/proxy.log")"
grep -q "^fault 1: response HTTP/1.1 422" "$HF_TMP/proxy.log" ||
  hf_fail "the corrupted upload was not answered 422: $(grep '^fault' "$HF_TMP/proxy.log")"
hf_log "ok: proxy: $(grep '^fault' "$HF_TMP/proxy.log" | tr '\n' ';')"
failed=$(sed -n "s/.*WARN.*uploading checkpoint \([0-9a-f]\{12\}\) of trial $t: .*/\1/p" "$HF_TMP/agent-a1.log")
[[ $(wc -w <<<"$failed") == 2 ]] ||
  hf_fail "the agent logged $(wc -w <<<"$failed") failed uploads of trial $t (want 2): $(grep -i 'checkpoint' "$HF_TMP/agent-a1.log" | tail -6)"
# The agent logs an upload when the scheduler's answer is back, after the
# row the wait above saw was recorded.
for h in $failed; do
  hf_wait_for 10 grep -q "checkpoint fake_trial.json of trial $t (step [0-9]*) uploaded as $h" "$HF_TMP/agent-a1.log" ||
    hf_fail "checkpoint $h failed to upload and was never uploaded after"
done
hf_log "ok: the agent logged both failures and uploaded both checkpoints on a retry ($(tr '\n' ' ' <<<"$failed"))"

newest=$(hf_get "/api/v1/trials/$t/checkpoints" | jq -r '.checkpoints | max_by(.step) | .sha256')
curl -fsS -m 10 "$HF_URL/api/v1/checkpoints/$newest" | jq -e --argjson t "$t" '.epoch == 4 and .trial == $t' >/dev/null ||
  hf_fail "the newest stored checkpoint is not this trial's epoch 4"
netns_verify_store /srv/hf/hf.db.checkpoints "$t"
hf_log "PASS"
