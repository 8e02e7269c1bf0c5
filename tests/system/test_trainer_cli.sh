#!/usr/bin/env bash
# test_trainer_cli.sh — hyperfarm-train as a trial sees it: HYPERFARM_HPARAMS
# errors name the key and exit 1, data errors name the file, --device cuda
# without a usable GPU says so and exits non-zero, --device auto falls back,
# the OpenBLAS kernel is logged, metric lines parse as JSON, and the same
# seed and threads give identical metrics.
source "$(dirname "$0")/lib.sh"
hf_setup
hf_need hyperfarm-train
T=$HF_BIN/hyperfarm-train
DATA=/usr/share/datasets/fashion-mnist

expect_fail() {   # needle, command...
  local needle=$1; shift
  local rc=0
  "$@" >"$HF_TMP/out" 2>"$HF_TMP/err" || rc=$?
  [[ $rc != 0 ]] || hf_fail "expected failure: $*"
  grep -qF -- "$needle" "$HF_TMP/err" || hf_fail "message lacks '$needle': $(cat "$HF_TMP/err")"
}

expect_fail "key 'learning_rate': unknown" env HYPERFARM_HPARAMS='{"learning_rate": 0.1}' "$T"
expect_fail "key 'lr': expected a number, got a string" env HYPERFARM_HPARAMS='{"lr": "big"}' "$T"
expect_fail "key 'batch_size': expected an integer" env HYPERFARM_HPARAMS='{"batch_size": 1.5}' "$T"
expect_fail "HYPERFARM_HPARAMS: not a JSON object" env HYPERFARM_HPARAMS='[1]' "$T"
expect_fail "unknown flag '--bogus'" "$T" --bogus 1
expect_fail "HYPERFARM_MAX_EPOCHS" env HYPERFARM_MAX_EPOCHS=many "$T"
mkdir -p "$HF_TMP/empty"
expect_fail "train-images-idx3-ubyte.gz: missing" "$T" --data "$HF_TMP/empty"
printf 'garbage, not IDX at all' >"$HF_TMP/empty/train-images-idx3-ubyte"
for f in train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do cp "$HF_TMP/empty/train-images-idx3-ubyte" "$HF_TMP/empty/$f"; done
expect_fail "wrong magic" "$T" --data "$HF_TMP/empty"

"$T" --help | grep -q -- "--batch-size" || hf_fail "--help lacks --batch-size"

[[ -r $DATA/train-images-idx3-ubyte.gz ]] || { echo "skip: $DATA not installed (rest of the test)"; exit 0; }
small=(--limit-train 4000 --val-size 500 --limit-test 500 --epochs 2 --threads 2 --dropout 0.1 --seed 11)

if ! "$T" --device cuda "${small[@]}" --epochs 1 >"$HF_TMP/out" 2>"$HF_TMP/err"; then
  grep -q "no usable CUDA GPU" "$HF_TMP/err" || hf_fail "--device cuda failure not explained: $(cat "$HF_TMP/err")"
  "$T" --device auto "${small[@]}" --epochs 1 >"$HF_TMP/out" 2>"$HF_TMP/err" || hf_fail "--device auto did not fall back"
  grep -q "using the CPU" "$HF_TMP/err" || hf_fail "--device auto fallback not logged"
fi

hf_log "determinism: same seed and threads, identical metrics"
"$T" "${small[@]}" >"$HF_TMP/r1.out" 2>"$HF_TMP/r1.err"
"$T" "${small[@]}" >"$HF_TMP/r2.out" 2>/dev/null
grep -q "OpenBLAS kernel" "$HF_TMP/r1.err" || hf_fail "kernel not logged"
strip() { sed -E 's/"samples_per_s":[^,}]*,?//; s/"epoch_seconds":[^,}]*,?//' "$1"; }
[[ $(wc -l <"$HF_TMP/r1.out") == 2 ]] || hf_fail "want 2 metric lines, got: $(cat "$HF_TMP/r1.out")"
[[ "$(strip "$HF_TMP/r1.out")" == "$(strip "$HF_TMP/r2.out")" ]] || hf_fail "same seed, different metrics"
"$T" "${small[@]}" --seed 12 >"$HF_TMP/r3.out" 2>/dev/null
[[ "$(strip "$HF_TMP/r1.out")" != "$(strip "$HF_TMP/r3.out")" ]] || hf_fail "different seed, same metrics"
# every line is a HYPERFARM metric line with the contract's members
while read -r line; do
  [[ $line == "HYPERFARM {"* ]] || hf_fail "not a metric line: $line"
  echo "${line#HYPERFARM }" | jq -e 'has("epoch") and has("step") and has("train_loss") and has("val_loss")
     and has("val_acc") and has("test_acc") and has("samples_per_s") and (.epoch_seconds > 0)' >/dev/null || hf_fail "members missing: $line"
done <"$HF_TMP/r1.out"
acc=$(tail -1 "$HF_TMP/r1.out" | sed 's/^HYPERFARM //' | jq .val_acc)
awk -v a="$acc" 'BEGIN { exit !(a > 0.7) }' || hf_fail "val_acc $acc after 2 small epochs: not learning"

hf_log "HPARAMS drive the run: CNN with SGD+Nesterov, step schedule"
HYPERFARM_HPARAMS='{"model": "cnn", "channels": [4, 8], "fc": 16, "optimizer": "sgd", "nesterov": true,
  "momentum": 0.9, "lr": 0.05, "lr_schedule": "step", "step_size": 1, "batch_norm": true, "epochs": 1,
  "limit_train": 2000, "val_size": 500, "limit_test": 500, "shift": 2, "flip": true}' \
  "$T" --threads 2 >"$HF_TMP/cnn.out" 2>"$HF_TMP/cnn.err" || hf_fail "cnn run failed: $(cat "$HF_TMP/cnn.err")"
grep -q "model .*conv4" "$HF_TMP/cnn.err" || hf_fail "hparams did not select the CNN: $(cat "$HF_TMP/cnn.err")"
echo "PASS"
