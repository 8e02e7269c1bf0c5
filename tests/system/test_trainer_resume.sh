#!/usr/bin/env bash
# test_trainer_resume.sh — checkpoints of hyperfarm-train on real
# Fashion-MNIST (a subset): a run interrupted (by --max-steps, then by
# SIGTERM) and resumed, with its newest checkpoint corrupted on the way,
# ends with exactly the bytes of an uninterrupted run's final checkpoint.
# Also: SIGTERM exits 143 after checkpointing, or 0 when control.json says
# the searcher asked for the stop.
source "$(dirname "$0")/lib.sh"
hf_setup
hf_need hyperfarm-train
DATA=/usr/share/datasets/fashion-mnist
[[ -r $DATA/train-images-idx3-ubyte.gz ]] || { echo "skip: $DATA not installed"; exit 77; }
T=$HF_BIN/hyperfarm-train
common=(--limit-train 12000 --val-size 1000 --limit-test 1000 --epochs 2 --batch-size 64 --threads 1
        --dropout 0.2 --optimizer adam --lr 0.002 --lr-schedule cosine --warmup-epochs 0.3 --clip-norm 5
        --checkpoint-every 25 --keep-checkpoints 3 --log-level warn)

hf_log "uninterrupted run"
"$T" "${common[@]}" --checkpoint-dir "$HF_TMP/a" >"$HF_TMP/a.out"
final=$(ls "$HF_TMP/a" | sort | tail -1)
[[ -n $final ]] || hf_fail "no checkpoint from the uninterrupted run"
grep -q '"test_acc"' "$HF_TMP/a.out" || hf_fail "no test_acc reported"

hf_log "interrupted by --max-steps 60, then resumed"
"$T" "${common[@]}" --checkpoint-dir "$HF_TMP/b" --max-steps 60 >"$HF_TMP/b1.out"
ls "$HF_TMP/b" | grep -q 'ckpt-000000000060.hfck' || hf_fail "no checkpoint at step 60"
# corrupt the newest checkpoint: resume must skip it (warning) and use the one before
newest=$(ls "$HF_TMP/b" | sort | tail -1)
printf '\xff\xff\xff\xff' | dd of="$HF_TMP/b/$newest" bs=1 seek=300 conv=notrunc status=none
"$T" "${common[@]}" --checkpoint-dir "$HF_TMP/b" --resume --log-level info >"$HF_TMP/b2.out" 2>"$HF_TMP/b2.err"
grep -q "skipping corrupt checkpoint" "$HF_TMP/b2.err" || hf_fail "corrupt checkpoint not reported: $(cat "$HF_TMP/b2.err")"
grep -q "resumed from .*ckpt-000000000050.hfck" "$HF_TMP/b2.err" || hf_fail "did not resume from step 50"
cmp "$HF_TMP/a/$final" "$HF_TMP/b/$final" || hf_fail "resumed run's final checkpoint differs from the uninterrupted one"
# the metric lines of the last epoch agree too (except the timing)
strip() { grep '"epoch":2.0,' "$1" | sed -E 's/"samples_per_s":[^,}]*,?//; s/"epoch_seconds":[^,}]*,?//; s/"checkpoint":"[^"]*"//'; }
[[ "$(strip "$HF_TMP/a.out")" == "$(strip "$HF_TMP/b2.out")" ]] || hf_fail "final metrics differ"

hf_log "SIGTERM mid-run: checkpoint, exit 143; resume; identical result"
"$T" "${common[@]}" --checkpoint-dir "$HF_TMP/c/ckpt" --log-every 5 >"$HF_TMP/c1.out" 2>&1 &
pid=$!
hf_track "$pid"
hf_wait_for 60 grep -q '"step":70' "$HF_TMP/c1.out"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ $rc == 143 ]] || hf_fail "SIGTERM exit status $rc, want 143"
grep -q '"checkpoint":' "$HF_TMP/c1.out" || hf_fail "no checkpoint line after SIGTERM"
"$T" "${common[@]}" --checkpoint-dir "$HF_TMP/c/ckpt" --resume >"$HF_TMP/c2.out"
cmp "$HF_TMP/a/$final" "$HF_TMP/c/ckpt/$final" || hf_fail "SIGTERM-resumed run differs from the uninterrupted one"

hf_log "SIGTERM requested by the searcher (control.json): exit 0"
rm -rf "$HF_TMP/c/ckpt"
echo '{"should_stop": true}' >"$HF_TMP/c/control.json"
"$T" "${common[@]}" --checkpoint-dir "$HF_TMP/c/ckpt" --log-every 5 >"$HF_TMP/c3.out" 2>&1 &
pid=$!
hf_track "$pid"
hf_wait_for 60 grep -q '"step":20' "$HF_TMP/c3.out"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[[ $rc == 0 ]] || hf_fail "searcher-requested stop exit status $rc, want 0"

hf_log "under an agent: HYPERFARM_CHECKPOINT_DIR + HYPERFARM_TRIAL_ID resume automatically, budget from HYPERFARM_MAX_EPOCHS"
HYPERFARM_TRIAL_ID=1 HYPERFARM_CHECKPOINT_DIR="$HF_TMP/b" HYPERFARM_MAX_EPOCHS=3 \
  "$T" "${common[@]}" --log-level info >"$HF_TMP/d.out" 2>"$HF_TMP/d.err"
grep -q "resumed from .*ckpt-" "$HF_TMP/d.err" || hf_fail "did not resume automatically"
grep -q '"epoch":3.0' "$HF_TMP/d.out" || hf_fail "budget of 3 epochs not reached"
grep -q '"epoch":2.0,' "$HF_TMP/d.out" && hf_fail "re-ran an epoch the checkpoint already had"
echo "PASS"
