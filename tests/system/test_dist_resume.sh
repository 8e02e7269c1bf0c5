#!/usr/bin/env bash
# test_dist_resume.sh — fault tolerance of distributed training, with the
# real hyperfarm-train launcher and real worker processes on loopback:
#
#  1. a 3-worker sync run is killed (SIGKILL of rank 1) mid-epoch, after a
#     mid-epoch checkpoint: the launcher must exit non-zero within seconds,
#     naming the dead rank;
#  2. relaunched with --resume it finishes, with the same final test
#     accuracy and val_loss as an uninterrupted run (the resumed run replays
#     the same batches from the checkpoint: it must match to 1e-6);
#  3. a stalled worker (SIGSTOP) turns into a timeout error within
#     --timeout that names the rank, its address and the sequence number.
set -euo pipefail
: "${HF_BIN:?HF_BIN must point at the programs}"
TRAIN=$HF_BIN/hyperfarm-train
DATA=/usr/share/datasets/fashion-mnist
[[ -r $DATA/train-images-idx3-ubyte.gz ]] || { echo "skip: $DATA missing"; exit 77; }
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do pkill -KILL -P "$p" 2>/dev/null || true; kill -KILL "$p" 2>/dev/null || true; done; [[ -n ${KEEP:-} ]] || rm -rf "$T"; }
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1
ARGS=(--model mlp --hidden 128,64 --epochs 2 --limit-train 31000 --val-size 1000 --limit-test 2000
      --batch-size 50 --seed 11 --threads 1 --lr 0.05 --optimizer sgd --momentum 0.9
      --checkpoint-every 40 --keep-checkpoints 5 --log-level warn)

fail() { echo "FAIL: $*"; exit 1; }
rank_pid() {   # launcher pid, rank -> pid of that rank
  local c
  for c in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$c/environ" 2>/dev/null | grep -qx "HYPERFARM_RANK=$2"; then echo "$c"; return; fi
  done
}
wait_for_ckpt() {   # dir: until a checkpoint file shows up (max 30 s)
  for _ in $(seq 300); do compgen -G "$1/ckpt-*.hfck" >/dev/null && return 0; sleep 0.1; done
  return 1
}

echo "== uninterrupted reference run"
"$TRAIN" "${ARGS[@]}" --nproc 3 --mode sync --checkpoint-dir "$T/ref" >"$T/ref.out" 2>"$T/ref.err" \
  || { cat "$T/ref.err"; fail "reference run failed"; }
ref_acc=$(sed 's/^HYPERFARM //' <(grep '"test_acc"' "$T/ref.out" | tail -1) | jq -r '.test_acc')
ref_loss=$(sed 's/^HYPERFARM //' <(grep '"val_loss"' "$T/ref.out" | tail -1) | jq -r '.val_loss')
echo "reference: test_acc $ref_acc val_loss $ref_loss"
[[ -n $ref_acc && $ref_acc != null ]] || fail "no test_acc in the reference run"

echo "== kill rank 1 mid-epoch"
"$TRAIN" "${ARGS[@]}" --nproc 3 --mode sync --checkpoint-dir "$T/run" >"$T/a.out" 2>"$T/a.err" &
L=$!; pids+=("$L")
wait_for_ckpt "$T/run" || fail "no mid-epoch checkpoint appeared"
victim=$(rank_pid "$L" 1)
[[ -n $victim ]] || fail "rank 1 not found among the launcher's children"
kill -KILL "$victim"
t0=$(date +%s%N)
set +e; wait "$L"; rc=$?; set -e
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "launcher exit $rc after ${dt} ms"; grep -v INFO "$T/a.err" | head -5
(( rc != 0 )) || fail "the launcher exited 0 although a worker died"
(( dt < 10000 )) || fail "took ${dt} ms to notice the dead worker"
grep -q "rank 1 (pid $victim) was killed by signal 9" "$T/a.err" || fail "the launcher did not name the dead rank"
pgrep -P "$L" >/dev/null 2>&1 && fail "ranks left behind"
grep -q '"val_acc"' "$T/a.out" && fail "the run was not killed mid-way (it finished an epoch before the kill)" || true

echo "== resume"
"$TRAIN" "${ARGS[@]}" --nproc 3 --mode sync --checkpoint-dir "$T/run" --resume >"$T/b.out" 2>"$T/b.err" \
  || { cat "$T/b.err"; fail "resumed run failed"; }
acc=$(sed 's/^HYPERFARM //' <(grep '"test_acc"' "$T/b.out" | tail -1) | jq -r '.test_acc')
loss=$(sed 's/^HYPERFARM //' <(grep '"val_loss"' "$T/b.out" | tail -1) | jq -r '.val_loss')
echo "resumed: test_acc $acc val_loss $loss"
awk -v a="$acc" -v b="$ref_acc" -v c="$loss" -v d="$ref_loss" \
  'BEGIN { if (a != b || (c - d > 1e-6 || d - c > 1e-6)) exit 1 }' || fail "resumed run differs from the uninterrupted one"

echo "== stalled rank 2 -> timeout naming it"
"$TRAIN" "${ARGS[@]}" --nproc 3 --mode sync --timeout 2 --checkpoint-dir "$T/stall" >"$T/c.out" 2>"$T/c.err" &
L=$!; pids+=("$L")
wait_for_ckpt "$T/stall" || fail "no checkpoint in the stall run"
victim=$(rank_pid "$L" 2)
kill -STOP "$victim"
t0=$(date +%s%N)
set +e; wait "$L"; rc=$?; set -e
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
kill -KILL "$victim" 2>/dev/null || true
echo "launcher exit $rc after ${dt} ms"; grep -v INFO "$T/c.err" | head -5
(( rc != 0 )) || fail "a stalled worker did not fail the run"
(( dt < 12000 )) || fail "took ${dt} ms with --timeout 2"
grep -Eq "rank 2 \(127\.0\.0\.1:[0-9]+\) for 2000 ms \(timeout\)" "$T/c.err" || fail "no timeout message naming rank 2 and its address"
grep -Eq "seq [0-9]+" "$T/c.err" || fail "no sequence number in the error"
echo "ok"
