#!/usr/bin/env bash
# bench/trainer/run.sh — hyperfarm-train vs PyTorch CPU on the same MLP
# 784-256-128-10, batch 128, Adam 1e-3, same threads, same Fashion-MNIST
# split, in one run. Prints each side's samples/s and test accuracy, the
# ratio (target >= 2x), and the fraction of the machine's measured sgemm
# GFLOP/s that our training reaches.
#
#   BENCH_EPOCHS (default 5)  BENCH_THREADS (default 2)  HF_BIN (default ./bin)
#
# Both sides run on OpenBLAS's fast kernel for this CPU: hyperfarm-train
# picks it itself (re-exec with OPENBLAS_CORETYPE); for PyTorch we export
# the same OPENBLAS_CORETYPE that tr_blas_wanted_core() chose (SkylakeX
# on AVX-512 CPUs).
set -euo pipefail
cd "$(dirname "$0")/../.."
HF_BIN=${HF_BIN:-$PWD/bin}
E=${BENCH_EPOCHS:-5}
T=${BENCH_THREADS:-2}
DATA=${BENCH_DATA:-/usr/share/datasets/fashion-mnist}
for p in "$HF_BIN/hyperfarm-train" "$HF_BIN/bench/trainer_sgemm"; do
  [[ -x $p ]] || { echo "trainer bench: $p not built (make)"; exit 1; }
done
[[ -r $DATA/train-images-idx3-ubyte.gz ]] || { echo "trainer bench: skipped, $DATA not installed"; exit 0; }

sg=$("$HF_BIN/bench/trainer_sgemm" "$T" 2048 2>/dev/null)
kernel=$(awk '{print $5}' <<<"$sg" | tr -d :)
gflops=$(awk '{print $(NF-1)}' <<<"$sg")
echo "machine: $sg"

out=$("$HF_BIN/hyperfarm-train" --model mlp --hidden 256,128 --batch-size 128 --optimizer adam --lr 0.001 \
        --epochs "$E" --threads "$T" --val-size 5000 --eval-test=false 2>/dev/null)
ours_sps=$(grep '^HYPERFARM ' <<<"$out" | sed 's/^HYPERFARM //' | jq -s '[.[].samples_per_s] | add / length')
ours_acc=$(grep '^HYPERFARM ' <<<"$out" | tail -1 | sed 's/^HYPERFARM //' | jq .test_acc)
# ~1.007 MFLOP per sample: forward 2*(784*256+256*128+128*10), backward the same for weight
# gradients plus input gradients of layers 2 and 3 (none for layer 1, whose input is data)
flop=$(( 2*(784*256+256*128+128*10)*2 + 2*(256*128+128*10) ))
printf 'hyperfarm-train  MLP 784-256-128-10 b128 %s threads: %8.0f samples/s  test_acc %.4f  (%d epochs, kernel %s)\n' \
  "$T" "$ours_sps" "$ours_acc" "$E" "$kernel"
frac=$(awk -v s="$ours_sps" -v f="$flop" -v g="$gflops" 'BEGIN { printf "%.1f GFLOP/s = %.0f%% of sgemm peak %.1f", s*f/1e9, 100*s*f/1e9/g, g }')
echo "hyperfarm-train  training rate $frac GFLOP/s"

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  theirs=$(OPENBLAS_CORETYPE=$kernel OMP_NUM_THREADS=$T /usr/bin/python3 bench/trainer/torch_mlp.py "$DATA" "$E" "$T")
  t_sps=$(awk '{print $3}' <<<"$theirs"); t_acc=$(awk '{print $5}' <<<"$theirs")
  printf 'pytorch (CPU)    MLP 784-256-128-10 b128 %s threads: %8.0f samples/s  test_acc %.4f  (%s)\n' \
    "$T" "$t_sps" "$t_acc" "$(awk '{print $NF}' <<<"$theirs")"
  awk -v a="$ours_sps" -v b="$t_sps" 'BEGIN { r = a / b; printf "ratio hyperfarm/pytorch samples/s: %.2fx (target >= 2x): %s\n", r, (r >= 2 ? "MET" : "NOT MET") }'
else
  echo "pytorch (CPU)    not installed (python3-torch): no peer figure"
fi
