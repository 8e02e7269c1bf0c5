#!/usr/bin/env bash
# bench/search/run.sh — the search benchmarks for bench/run:
#   1. TPE vs random on Branin and Hartmann-6 over 30 seeds
#      ($HF_BIN/bench/search_synthetic, pure C, a second or two);
#   2. the peer: Optuna's TPESampler vs its RandomSampler on the same
#      functions and budgets, when python3-optuna is installed;
#   3. with HF_BENCH_FMNIST=1, the Fashion-MNIST comparison (minutes).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
HF_BIN=${HF_BIN:-$PWD/bin}
rc=0
if [[ -x $HF_BIN/bench/search_synthetic ]]; then
  echo "== ours: bench/search_synthetic (TPE vs random, sequential and 4 in flight)"
  "$HF_BIN/bench/search_synthetic" --seeds 30 || rc=1
  "$HF_BIN/bench/search_synthetic" --seeds 30 --concurrency 4 || rc=1
else
  echo "search_synthetic not built ($HF_BIN/bench/search_synthetic)"; rc=2
fi
if python3 -c 'import optuna' 2>/dev/null; then
  echo "== peer: Optuna TPESampler vs RandomSampler, same functions, budgets and seeds"
  python3 bench/search/optuna_synthetic.py --seeds 30 || rc=1
else
  echo "== peer: python3-optuna not installed; peer figures skipped"
fi
if [[ ${HF_BENCH_FMNIST:-0} == 1 ]]; then
  echo "== Fashion-MNIST: random vs ASHA vs TPE"
  bench/search/fmnist.sh ${HF_BENCH_FMNIST_ARGS:-} || rc=1
fi
exit $rc
