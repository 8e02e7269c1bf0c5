#!/usr/bin/env bash
# test_scheduler_ckretain.sh — checkpoint retention and access
# (docs/scheduler.md, "Checkpoint retention"), with a real scheduler, a
# real agent running fake_trial, the CLI, and curl uploading checkpoints as
# an agent does:
#   - after the trials of an experiment ended, only its policy's
#     checkpoints remain (keep_latest 1, keep_best_trials 1: each trial's
#     newest, plus each trial's checkpoint that scored its objective), rows and
#     object files alike, and the experiment's bytes are in its summary,
#     in /metrics and in `hyperfarm show`;
#   - `hyperfarm checkpoints` lists them; `hyperfarm download` writes the
#     exact bytes (verified), `--best` the scored one, and exits 3 for a
#     step that is not stored;
#   - deleting or archiving a running experiment is refused (409 / exit 6),
#     `delete` without --yes changes nothing;
#   - archiving frees every byte of the experiment (directory, /metrics),
#     hides it from the list (?archived=1 shows it);
#   - deleting an experiment makes it (its trials, their metrics and
#     checkpoints) 404 and unlisted at once; its trials and rows go within
#     a few ticks (the purge, /metrics counts them) and then its objects,
#     but not an object another experiment still names;
#   - at start, an object no row names is removed once older than the
#     grace period, a younger one is kept.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm tests/fake_trial
hf_setup
command -v sha256sum >/dev/null || hf_fail "sha256sum is required (coreutils)"
command -v sqlite3 >/dev/null || hf_fail "sqlite3 is required"

CK=$HF_TMP/store
hf_start_scheduler --checkpoint-dir "$CK"
hf_start_agent a1 --slots 3 --no-checkpoint-upload   # only the checkpoints this test uploads

exp_json() {  # NAME EPOCHS SLEEP_MS [POLICY]
  jq -n --arg prog "$HF_BIN/tests/fake_trial" --arg name "$1" --argjson ep "$2" --argjson sl "$3" \
    --argjson pol "${4:-null}" '{
    name: $name, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 3, max_concurrent_trials: 3, seed: 7},
    hyperparameters: {x: {type: "uniform", min: 0, max: 1}, lr: 0.5},
    trial: {command: [$prog, "--epochs", ($ep | tostring), "--sleep-ms", ($sl | tostring)], max_restarts: 0}
  } + (if $pol then {checkpoint_policy: $pol} else {} end)'
}

# put TRIAL STEP FILE: upload FILE as the trial's checkpoint at STEP (201 expected).
put() {
  local sha
  sha=$(sha256sum "$3" | cut -c1-64)
  code=$(curl -sS -m 60 -o "$HF_TMP/put.out" -w '%{http_code}' -T "$3" -H "X-Hyperfarm-Sha256: $sha" \
    "$HF_URL/api/v1/trials/$1/checkpoints?step=$2&attempt=1") || hf_fail "PUT: no answer"
  [[ $code == 201 ]] || hf_fail "PUT trial $1 step $2 -> $code: $(cat "$HF_TMP/put.out")"
}
n_objects() { find "$CK/objects" -type f | wc -l; }
n_objects_is() { (( $(n_objects) == $1 )); }   # re-counted at every try of hf_wait_for
store_bytes() { find "$CK/objects" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}'; }
metric_bytes() {  # EXP: hyperfarm_checkpoint_experiment_bytes of EXP, or "none"
  curl -fsS "$HF_URL/metrics" | awk -v e="hyperfarm_checkpoint_experiment_bytes{experiment=\"$1\"}" \
    '$1 == e {print $2; f = 1} END {if (!f) print "none"}'
}
rows_of() { hf_get "/api/v1/trials/$1/checkpoints" | jq -c '[.checkpoints[].step]'; }
MiB=1048576

# ---- retention after the trials ended ----------------------------------------
A=$(hf_submit "$(exp_json keep 3 30 '{"keep_latest": 1, "keep_best_trials": 1}')")
hf_wait_experiment "$A" 60
mapfile -t TR < <(hf_get "/api/v1/experiments/$A/trials" | jq -r '.trials[].id')
(( ${#TR[@]} == 3 )) || hf_fail "expected 3 trials, got ${TR[*]}"
BEST=$(hf_get "/api/v1/experiments/$A" | jq -r .best.trial_id)
# fake_trial reports val_acc at steps 100, 200, 300 (rising with the epoch:
# the best at 300); a checkpoint at 400 has no report, so for every trial
# the checkpoint that scored its objective (300) and the newest (400) differ.
for t in "${TR[@]}"; do
  for s in 100 200 300 400; do
    head -c $MiB /dev/urandom >"$HF_TMP/ck-$t-$s"
    put "$t" "$s" "$HF_TMP/ck-$t-$s"
  done
done
hf_log "uploaded 12 checkpoints of 1 MiB to trials ${TR[*]} (best $BEST)"
want_rows() { for t in "${TR[@]}"; do [[ $(rows_of "$t") == '[300,400]' ]] || return 1; done; }
hf_wait_for 15 want_rows || hf_fail "retention did not apply: $(for t in "${TR[@]}"; do echo "$t: $(rows_of "$t")"; done)"
hf_wait_for 5 n_objects_is 6 || hf_fail "expected 6 object files, found $(n_objects)"
for t in "${TR[@]}"; do
  s=$(sha256sum "$HF_TMP/ck-$t-400" | cut -c1-64)
  [[ -f $CK/objects/${s:0:2}/$s ]] || hf_fail "trial $t's newest object is gone"
  s=$(sha256sum "$HF_TMP/ck-$t-100" | cut -c1-64)
  [[ ! -e $CK/objects/${s:0:2}/$s ]] || hf_fail "trial $t's step-100 object is still there"
done
hf_assert_eq "$(store_bytes)" $((6 * MiB)) "bytes on disk"
hf_assert_eq "$(hf_get "/api/v1/experiments/$A" | jq .checkpoint_bytes)" $((6 * MiB)) "checkpoint_bytes"
hf_assert_eq "$(hf_get /api/v1/experiments | jq --argjson a "$A" '.experiments[] | select(.id == $a) | .checkpoint_bytes')" \
  $((6 * MiB)) "checkpoint_bytes in the list"
hf_assert_eq "$(metric_bytes "$A")" $((6 * MiB)) "/metrics experiment bytes"
hf_cli show "$A" | grep -q 'storage    6.00 MiB of checkpoints' || hf_fail "show: $(hf_cli show "$A" | head -8)"
hf_log "ok: retention kept 6 of 12 checkpoints (rows, files, summary, /metrics, show)"

# ---- access: checkpoints and download -----------------------------------------
out=$(hf_cli checkpoints "$BEST")
grep -q '^ *300  1.00 MiB' <<<"$out" && grep -q '^ *400  1.00 MiB' <<<"$out" || hf_fail "checkpoints table: $out"
s300=$(sha256sum "$HF_TMP/ck-$BEST-300" | cut -c1-12)
grep -q "$s300" <<<"$out" || hf_fail "checkpoints table without the short hash $s300: $out"
hf_cli download "$BEST" --step 300 -o "$HF_TMP/dl" >/dev/null || hf_fail "download --step 300 failed"
f=$(find "$HF_TMP/dl" -type f)
[[ $(wc -l <<<"$f") == 1 ]] || hf_fail "download left more than one file: $f"
cmp -s "$f" "$HF_TMP/ck-$BEST-300" || hf_fail "the downloaded step 300 differs"
hf_cli download "$BEST" -o "$HF_TMP/dl2" >/dev/null || hf_fail "download (newest) failed"
cmp -s "$HF_TMP"/dl2/* "$HF_TMP/ck-$BEST-400" || hf_fail "the downloaded newest differs"
hf_cli download "$BEST" --best -o "$HF_TMP/dl4" >/dev/null || hf_fail "download --best failed"
cmp -s "$HF_TMP"/dl4/* "$HF_TMP/ck-$BEST-300" || hf_fail "download --best did not fetch the step-300 checkpoint"
set +e
err=$(hf_cli download "$BEST" --step 100 -o "$HF_TMP/dl3" 2>&1 >/dev/null); rc=$?
set -e
hf_assert_eq "$rc" 3 "download of a step that is not stored: $err"
grep -q 'no stored checkpoint at step 100 (stored steps: 300, 400)' <<<"$err" || hf_fail "download error: $err"
[[ -z $(find "$HF_TMP/dl3" -type f 2>/dev/null) ]] || hf_fail "a failed download left a file"
hf_log "ok: checkpoints table, download verified, missing step exits 3"

# ---- refusals while running ---------------------------------------------------
B=$(hf_submit "$(exp_json running 100 200)")
hf_wait_for 15 bash -c "curl -fsS $HF_URL/api/v1/experiments/$B | jq -e '.counts.running > 0' >/dev/null"
hf_api DELETE "/api/v1/experiments/$B"
hf_assert_eq "$HF_STATUS" 409 "DELETE of a running experiment: $HF_BODY"
hf_api POST "/api/v1/experiments/$B/archive"
hf_assert_eq "$HF_STATUS" 409 "archive of a running experiment: $HF_BODY"
set +e
hf_cli delete "$B" --yes 2>/dev/null; rc=$?
hf_cli delete "$A" 2>/dev/null; rc2=$?
set -e
hf_assert_eq "$rc" 6 "CLI delete of a running experiment"
hf_assert_eq "$rc2" 2 "CLI delete without --yes"
hf_get "/api/v1/experiments/$A" >/dev/null
hf_post "/api/v1/experiments/$B/cancel" >/dev/null
hf_wait_experiment "$B" 30
hf_log "ok: running experiments are neither deleted nor archived (409, exit 6); --yes is required"

# ---- archive ------------------------------------------------------------------
# C shares one object with A: after A is archived it must stay.
C=$(hf_submit "$(exp_json other 1 10 '{"keep_latest": 2, "keep_best_trials": 0}')")
hf_wait_experiment "$C" 60
TC=$(hf_get "/api/v1/experiments/$C/trials" | jq -r '.trials[0].id')
put "$TC" 1 "$HF_TMP/ck-$BEST-400"
head -c $((2 * MiB)) /dev/urandom >"$HF_TMP/ck-c"
put "$TC" 2 "$HF_TMP/ck-c"
hf_wait_for 10 n_objects_is 7 || hf_fail "expected 7 objects, found $(n_objects)"
arch=$(hf_cli archive "$A") || hf_fail "archive failed"
grep -q 'archived experiment' <<<"$arch" || hf_fail "archive said: $arch"
hf_assert_eq "$(hf_get "/api/v1/experiments/$A" | jq -c '[.archived, .checkpoint_bytes]')" '[true,0]' "archived summary"
hf_assert_eq "$(n_objects)" 2 "objects left after archiving (C's two, one shared with A)"
hf_assert_eq "$(store_bytes)" $((3 * MiB)) "bytes left after archiving"
hf_assert_eq "$(metric_bytes "$A")" none "/metrics of the archived experiment"
for t in "${TR[@]}"; do hf_assert_eq "$(rows_of "$t")" '[]' "rows of archived trial $t"; done
hf_get /api/v1/experiments | jq -e --argjson a "$A" 'all(.experiments[]; .id != $a)' >/dev/null \
  || hf_fail "the archived experiment is still listed"
hf_get '/api/v1/experiments?archived=1' | jq -e --argjson a "$A" 'any(.experiments[]; .id == $a)' >/dev/null \
  || hf_fail "?archived=1 does not list it"
hf_cli ls --all | grep -q '^ *'"$A"' ' || hf_fail "ls --all does not list it"
hf_get "/api/v1/experiments/$A/trials" | jq -e '.trials | length == 3' >/dev/null || hf_fail "archived trials are gone"
hf_log "ok: archive freed A's 5 MiB of its own, kept the shared object, hid A from the list"

# ---- delete -------------------------------------------------------------------
before=$(store_bytes)
del=$(hf_cli delete "$C" --yes) || hf_fail "delete failed"
grep -q "deleted experiment $C (3.00 MiB of checkpoints freed)" <<<"$del" || hf_fail "delete said: $del"
# Gone from the API at once; its rows, then its objects, go in the tick's
# bounded batches (docs/scheduler.md "Deleting an experiment").
for path in "/api/v1/experiments/$C" "/api/v1/experiments/$C/trials" "/api/v1/trials/$TC" \
            "/api/v1/trials/$TC/metrics" "/api/v1/trials/$TC/checkpoints"; do
  hf_api GET "$path"
  hf_assert_eq "$HF_STATUS" 404 "GET $path of a deleted experiment"
done
hf_api DELETE "/api/v1/experiments/$C"
hf_assert_eq "$HF_STATUS" 404 "DELETE of a deleted experiment"
hf_get '/api/v1/experiments?archived=1' | jq -e --argjson c "$C" 'all(.experiments[]; .id != $c)' >/dev/null \
  || hf_fail "the deleted experiment is still listed"
hf_assert_eq "$(metric_bytes "$C")" none "/metrics of the deleted experiment"
rows_left() {
  sqlite3 "$HF_DB" "SELECT (SELECT COUNT(*) FROM experiments WHERE id=$C) + (SELECT COUNT(*) FROM trials WHERE
    experiment_id=$C) + (SELECT COUNT(*) FROM metrics WHERE trial_id=$TC) + (SELECT COUNT(*) FROM logs WHERE
    trial_id=$TC) + (SELECT COUNT(*) FROM checkpoints WHERE trial_id=$TC) + (SELECT COUNT(*) FROM events WHERE
    experiment_id=$C OR trial_id=$TC) + (SELECT COUNT(*) FROM purge_queue)"
}
rows_gone() { [[ $(rows_left) == 0 ]]; }
hf_wait_for 10 rows_gone || hf_fail "rows left of the deleted experiment: $(rows_left)"
hf_wait_for 10 n_objects_is 0 || hf_fail "objects after deleting C: $(n_objects)"
hf_assert_eq "$(store_bytes)" 0 "bytes after deleting C (was $before)"
m=$(curl -fsS "$HF_URL/metrics")
grep -qx 'hyperfarm_experiments_purging 0' <<<"$m" || hf_fail "/metrics: $(grep purg <<<"$m")"
awk '$1 == "hyperfarm_purged_rows_total" && $2 > 0 {f = 1} END {exit !f}' <<<"$m" \
  || hf_fail "/metrics counted no purged rows: $(grep purg <<<"$m")"
hf_assert_eq "$(sqlite3 "$HF_DB" "SELECT COUNT(*) FROM events WHERE type='DELETED' AND experiment_id IS NULL
  AND detail LIKE 'experiment $C (%) deleted' AND user_name IS NOT NULL")" 1 "the DELETED event (who deleted it) stays"
hf_log "ok: delete removed C's rows and freed its objects"
# C was the newest experiment: its ids must not come back (schema 0010:
# SQLite reuses the largest rowid once it is deleted, and the agent still
# knows trial TC's attempt), and the next experiment must run.
D=$(hf_submit "$(exp_json after-delete 1 10)")
(( D > C )) || hf_fail "experiment id $D reused after deleting $C"
hf_wait_experiment "$D" 60
TD=$(hf_get "/api/v1/experiments/$D/trials" | jq -r '[.trials[].id] | min')
(( TD > TC )) || hf_fail "trial id $TD reused after deleting trial $TC"
hf_assert_eq "$(hf_get "/api/v1/experiments/$D" | jq -r .state)" COMPLETED "experiment submitted after a delete"
hf_log "ok: ids are not reused after a delete (experiment $D > $C, trial $TD > $TC) and the new sweep ran"

# ---- start-up GC of unnamed objects ------------------------------------------
old=$(printf old | sha256sum | cut -c1-64)
young=$(printf young | sha256sum | cut -c1-64)
mkdir -p "$CK/objects/${old:0:2}" "$CK/objects/${young:0:2}"
printf old >"$CK/objects/${old:0:2}/$old"
printf young >"$CK/objects/${young:0:2}/$young"
touch -d '2 hours ago' "$CK/objects/${old:0:2}/$old"
hf_stop_scheduler
hf_restart_scheduler --checkpoint-dir "$CK"
hf_wait_for 10 test ! -e "$CK/objects/${old:0:2}/$old" || hf_fail "the old unnamed object was not collected"
[[ -f $CK/objects/${young:0:2}/$young ]] || hf_fail "the young unnamed object was collected"
# The line is written after the whole walk, so it can trail the unlink.
hf_wait_for 10 grep -q 'removed 1 object no row names' "$HF_TMP/scheduler.log" ||
  hf_fail "no log line for the collection"
hf_log "ok: start-up GC removed the old orphan, kept the young one"
hf_log "PASS"
