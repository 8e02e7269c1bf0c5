#!/usr/bin/env bash
# test_scheduler_ckstore.sh — the scheduler's checkpoint store over HTTP
# (docs/scheduler.md, "The checkpoint store"), with a real scheduler and
# curl:
#   - a 64 MiB random file uploaded with its sha256sum is listed for its
#     trial and downloads byte for byte, with its hash header;
#   - a wrong hash is answered 422 naming X-Hyperfarm-Sha256, and the list,
#     the objects and the temp folder are unchanged;
#   - the same content again is one object (dedup), listed twice;
#   - a body over --max-checkpoint-mb is refused 413 before it is read;
#   - an upload cut mid-body (curl rate-limited, then killed) leaves no
#     object and no temp file once the connection has dropped;
#   - the scheduler's peak RSS (VmHWM) grows by less than 32 MiB while it
#     receives a 256 MiB upload (the body is streamed to disk);
#   - after a restart the objects and rows are still there, and the
#     /metrics gauges count them;
#   - a store on a full filesystem (an 8 MiB tmpfs, root only) answers 507
#     and keeps no part of the upload, then accepts one that fits.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
hf_setup
command -v sha256sum >/dev/null || hf_fail "sha256sum is required (coreutils)"

CK=$HF_TMP/ckstore
hf_start_scheduler --checkpoint-dir "$CK" --max-checkpoint-mb 300

# A trial to upload to: an experiment, and a fake agent (curl) heartbeating
# until it is assigned the trial.
E=$(hf_submit '{"name": "ck", "objective": {"metric": "acc", "goal": "maximize"},
  "searcher": {"name": "random", "max_trials": 1, "seed": 1},
  "hyperparameters": {"x": {"type": "uniform", "min": 0, "max": 1}},
  "trial": {"command": ["true"], "max_restarts": 0},
  "checkpoint_policy": {"keep_latest": 100, "keep_best_trials": 0}}')   # the store, not retention, is tested here
AG=$(hf_post /api/v1/agents '{"name": "fake", "slots": 1, "host": "127.0.0.1", "version": "test"}' | jq -r .id)
T=""
for _ in $(seq 1 50); do
  T=$(hf_post "/api/v1/agents/$AG/heartbeat" '{"running": []}' | jq -r '.assign[0].trial_id // empty')
  [[ -n $T ]] && break
  sleep 0.1
done
[[ -n $T ]] || hf_fail "no trial was created for experiment $E"
hf_log "trial $T of experiment $E"

# put FILE SHA [STEP] [EXTRA CURL ARGS...]: PUT FILE as a checkpoint of
# trial T; sets HF_STATUS and HF_BODY.
put() {
  local file=$1 sha=$2 step=${3:-1} out
  shift 3
  out=$(mktemp "$HF_TMP/resp.XXXXXX")
  HF_STATUS=$(curl -sS -m 120 -o "$out" -w '%{http_code}' -T "$file" -H "X-Hyperfarm-Sha256: $sha" \
    -H 'Content-Type: application/octet-stream' "$@" "$HF_URL/api/v1/trials/$T/checkpoints?step=$step&attempt=1") \
    || hf_fail "PUT $file: no answer"
  HF_BODY=$(cat "$out")
  rm -f "$out"
}
n_objects() { find "$CK/objects" -type f | wc -l; }
n_temps() { find "$CK/tmp" -type f | wc -l; }
temps_are() { (( $(n_temps) == $1 )); }
list() { hf_get "/api/v1/trials/$T/checkpoints"; }

# ---- a 64 MiB upload, listed and downloaded ---------------------------------
head -c $((64 << 20)) /dev/urandom >"$HF_TMP/c64"
S64=$(sha256sum "$HF_TMP/c64" | cut -c1-64)
put "$HF_TMP/c64" "$S64" 5
hf_assert_eq "$HF_STATUS" 201 "PUT 64 MiB: $HF_BODY"
jq -e --arg s "$S64" '.sha256 == $s and .size == 67108864 and .step == 5 and .attempt == 1' <<<"$HF_BODY" >/dev/null \
  || hf_fail "PUT answer: $HF_BODY"
list | jq -e --arg s "$S64" '.checkpoints | length == 1 and .[0].sha256 == $s and .[0].size == 67108864' >/dev/null \
  || hf_fail "the upload is not listed: $(list)"
[[ -f $CK/objects/${S64:0:2}/$S64 ]] || hf_fail "no object file objects/${S64:0:2}/$S64"
hdr=$(curl -sS -m 60 -D - -o "$HF_TMP/c64.back" "$HF_URL/api/v1/checkpoints/$S64" | tr -d '\r')
cmp -s "$HF_TMP/c64" "$HF_TMP/c64.back" || hf_fail "the download differs from the upload"
grep -qi "^X-Hyperfarm-Sha256: $S64\$" <<<"$hdr" || hf_fail "download without its hash header: $hdr"
grep -qi '^Content-Length: 67108864$' <<<"$hdr" || hf_fail "download without its Content-Length: $hdr"
hf_log "ok: 64 MiB uploaded, listed, downloaded identical"

# ---- a wrong hash: 422, nothing visible --------------------------------------
before=$(list)
put "$HF_TMP/c64" "$(printf x | sha256sum | cut -c1-64)" 6
hf_assert_eq "$HF_STATUS" 422 "PUT with a wrong hash: $HF_BODY"
jq -e '.field == "X-Hyperfarm-Sha256"' <<<"$HF_BODY" >/dev/null || hf_fail "422 does not name the header: $HF_BODY"
hf_assert_eq "$(list)" "$before" "the list after a refused upload"
hf_assert_eq "$(n_objects)" 1 "objects after a refused upload"
hf_assert_eq "$(n_temps)" 0 "temp files after a refused upload"
put "$HF_TMP/c64" "not-a-hash" 6
hf_assert_eq "$HF_STATUS" 400 "PUT with a malformed hash: $HF_BODY"
hf_log "ok: a wrong hash is refused (422) and leaves nothing"

# ---- dedup, and the size limit ------------------------------------------------
put "$HF_TMP/c64" "$S64" 7
hf_assert_eq "$HF_STATUS" 201 "PUT the same content again: $HF_BODY"
hf_assert_eq "$(n_objects)" 1 "objects after the same content twice"
list | hf_jq_assert '[.checkpoints[].step] == [5, 7]' "both checkpoints listed, newest last"
truncate -s 301M "$HF_TMP/sparse"
put "$HF_TMP/sparse" "$S64" 8
hf_assert_eq "$HF_STATUS" 413 "PUT over --max-checkpoint-mb: $HF_BODY"
hf_assert_eq "$(n_temps)" 0 "temp files after a 413"
hf_log "ok: same content = one object; over the limit = 413"

# ---- an upload cut mid-body ----------------------------------------------------
curl -sS -m 120 -o /dev/null --limit-rate 2M -T "$HF_TMP/c64" -H "X-Hyperfarm-Sha256: $S64" \
  "$HF_URL/api/v1/trials/$T/checkpoints?step=9&attempt=1" 2>/dev/null &
cpid=$!
hf_wait_for 10 temps_are 1 || hf_fail "the rate-limited upload never started a temp file"
sleep 1
size=$(find "$CK/tmp" -type f -printf '%s\n')
(( size > 0 && size < 64 << 20 )) || hf_fail "the temp file has $size bytes mid-upload"
kill -KILL "$cpid"
wait "$cpid" 2>/dev/null || true
hf_wait_for 10 temps_are 0 || hf_fail "the temp file of the cut upload stays: $(ls -l "$CK/tmp")"
hf_assert_eq "$(n_objects)" 1 "objects after a cut upload"
list | hf_jq_assert '.checkpoints | length == 2' "a cut upload is not listed"
grep -q "checkpoint upload interrupted" "$HF_TMP/scheduler.log" || hf_fail "the scheduler did not log the interruption"
hf_log "ok: a cut upload leaves no object and no temp file ($size bytes had arrived)"

# ---- RSS during a 256 MiB upload ------------------------------------------------
head -c $((256 << 20)) /dev/urandom >"$HF_TMP/c256"
S256=$(sha256sum "$HF_TMP/c256" | cut -c1-64)
hwm() { awk '/^VmHWM:/ {print $2}' "/proc/$HF_SCHED_PID/status"; }
h0=$(hwm)
put "$HF_TMP/c256" "$S256" 10
hf_assert_eq "$HF_STATUS" 201 "PUT 256 MiB: $HF_BODY"
h1=$(hwm)
hf_log "scheduler VmHWM ${h0} kB -> ${h1} kB during a 256 MiB upload"
(( h1 - h0 < 32 * 1024 )) || hf_fail "the scheduler's peak RSS grew by $(( (h1 - h0) / 1024 )) MiB (limit 32)"
rm -f "$HF_TMP/c256" "$HF_TMP/sparse"
hf_log "ok: peak RSS grew by $(( (h1 - h0) / 1024 )) MiB for a 256 MiB upload"

# ---- a restart keeps objects and rows -------------------------------------------
before=$(list)
hf_stop_scheduler TERM
hf_restart_scheduler --checkpoint-dir "$CK" --max-checkpoint-mb 300
hf_assert_eq "$(list)" "$before" "the list after a restart"
curl -sS -m 60 -o "$HF_TMP/c64.back2" "$HF_URL/api/v1/checkpoints/$S64"
cmp -s "$HF_TMP/c64" "$HF_TMP/c64.back2" || hf_fail "the download after a restart differs"
m=$(hf_get /metrics)
grep -qx 'hyperfarm_checkpoint_objects 2' <<<"$m" || hf_fail "metrics: $(grep checkpoint <<<"$m")"
grep -qx "hyperfarm_checkpoint_store_bytes $(( (64 + 256) << 20 ))" <<<"$m" || hf_fail "metrics: $(grep checkpoint <<<"$m")"
hf_api GET "/api/v1/checkpoints/$(printf y | sha256sum | cut -c1-64)"
hf_assert_eq "$HF_STATUS" 404 "GET of an absent object"
hf_api GET "/api/v1/checkpoints/${S64^^}"
hf_assert_eq "$HF_STATUS" 400 "GET of an upper-case hash"
hf_api GET "/api/v1/checkpoints/..%2F..%2F..%2Fetc%2Fpasswd"
[[ $HF_STATUS == 400 || $HF_STATUS == 404 ]] || hf_fail "GET of a path, not a hash: $HF_STATUS $HF_BODY"
hf_log "ok: a restart keeps the objects and the rows; /metrics counts them"

# ---- a full store: 507, nothing left, and it goes on --------------------------
full=$HF_TMP/ckfull
mkdir -p "$full"
if mount -t tmpfs -o size=8m,mode=0700 hf-ckstore-full "$full" 2>"$HF_TMP/mount.err"; then
  trap 'rc=$?; umount -l "$full" 2>/dev/null; hf_cleanup $rc' EXIT
  hf_stop_scheduler TERM
  hf_restart_scheduler --checkpoint-dir "$full"
  before=$(list)
  head -c $((16 << 20)) /dev/urandom >"$HF_TMP/c16"
  put "$HF_TMP/c16" "$(sha256sum "$HF_TMP/c16" | cut -c1-64)" 11
  hf_assert_eq "$HF_STATUS" 507 "PUT 16 MiB into an 8 MiB store: $HF_BODY"
  hf_assert_eq "$(find "$full" -type f | wc -l)" 0 "files in the full store after the 507"
  hf_assert_eq "$(list)" "$before" "the list after a 507"
  head -c $((1 << 20)) /dev/urandom >"$HF_TMP/c1"
  put "$HF_TMP/c1" "$(sha256sum "$HF_TMP/c1" | cut -c1-64)" 12
  hf_assert_eq "$HF_STATUS" 201 "PUT 1 MiB after the 507: $HF_BODY"
  hf_log "ok: a full store answers 507, keeps nothing of the upload, and takes the next one that fits"
else
  hf_log "skipped the full-store case: cannot mount a tmpfs ($(cat "$HF_TMP/mount.err")); the unit test covers ENOSPC"
fi
hf_log "PASS"
