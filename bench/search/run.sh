#!/usr/bin/env bash
# bench/search/run.sh — the search benchmarks for bench/run:
#   1. ours: TPE (multivariate, the default), TPE univariate and random on
#      the 11-function suite, 30 seeds, sequential and 4 in flight
#      ($HF_BIN/bench/search_synthetic, pure C, seconds);
#   2. the peer, when python3-optuna is installed: Optuna's RandomSampler,
#      TPESampler and TPESampler(multivariate=True) on the same suite, with
#      ours beside it and the ratio ours/Optuna. Optuna needs about 10
#      minutes for 30 seeds on 2 cores, more than bench/run's limit, so
#      here it runs HF_BENCH_SEARCH_SEEDS seeds (default 3: a smoke run);
#      the docs/search.md table is the 30-seed run (command there);
#   3. multi-objective: our MOTPE and random by hypervolume on ZDT1, ZDT2,
#      DTLZ2 ($HF_BIN/bench/search_mo), and Optuna's NSGA-II / MOTPE beside
#      it with HF_BENCH_SEARCH_SEEDS seeds (bench/search/mo_optuna.py);
#   4. with HF_BENCH_BBOB=1, the held-out BBOB benchmark (bench/search/bbob.sh,
#      arguments in HF_BENCH_BBOB_ARGS; hours);
#   5. with HF_BENCH_FMNIST=1, the Fashion-MNIST comparison (minutes).
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
PY=python3
$PY -c 'import optuna' 2>/dev/null || PY=/usr/bin/python3   # Debian's python3-optuna
if $PY -c 'import optuna' 2>/dev/null; then
  echo "== peer: Optuna TPESampler (default, multivariate) and RandomSampler, same functions, budgets and seeds"
  args=(--seeds "${HF_BENCH_SEARCH_SEEDS:-3}")
  [[ -x $HF_BIN/bench/search_synthetic ]] && args+=(--ours "$HF_BIN/bench/search_synthetic")
  $PY bench/search/optuna_synthetic.py "${args[@]}" || rc=1
else
  echo "== peer: python3-optuna not installed; peer figures skipped"
fi
# Multi-objective: hypervolume on ZDT1, ZDT2 and DTLZ2 (docs/search.md).
if [[ -x $HF_BIN/bench/search_mo ]]; then
  echo "== ours: bench/search_mo (MOTPE vs random, hypervolume)"
  "$HF_BIN/bench/search_mo" --seeds 10 || rc=1
  if $PY -c 'import optuna' 2>/dev/null; then
    echo "== peer: Optuna NSGAIISampler and TPESampler with several objectives (smoke: HF_BENCH_SEARCH_SEEDS seeds)"
    $PY bench/search/mo_optuna.py --seeds "${HF_BENCH_SEARCH_SEEDS:-3}" --ours "$HF_BIN/bench/search_mo" || rc=1
  fi
fi
# The held-out BBOB benchmark (issue 29, docs/search.md "Held-out benchmark:
# BBOB"): about 14 CPU-hours a half, so only when asked.
if [[ ${HF_BENCH_BBOB:-0} == 1 ]]; then
  echo "== held-out BBOB: ours vs Optuna 3.1 (bench/search/bbob.sh ${HF_BENCH_BBOB_ARGS:-})"
  bench/search/bbob.sh ${HF_BENCH_BBOB_ARGS:-} || rc=1
fi
if [[ ${HF_BENCH_FMNIST:-0} == 1 ]]; then
  echo "== Fashion-MNIST: random vs ASHA vs TPE"
  bench/search/fmnist.sh ${HF_BENCH_FMNIST_ARGS:-} || rc=1
fi
exit $rc
