#!/usr/bin/env bash
# bench/search/bbob.sh — the held-out search benchmark in one command
# (docs/search.md, "Held-out benchmark: BBOB"; issue 29): our TPE (the
# default and univariate, bin/bench/search_bbob) and Optuna 3.1's
# RandomSampler, TPESampler default, multivariate and multivariate with
# constant_liar (bench/search/optuna_bbob.py; the same C functions through
# ctypes) on the BBOB problems of one half, the same budgets (15 D + 50
# trials) and seeds 0..S-1, then the table (bench/search/bbob_table.py):
# per problem the median regret, ours / the better Optuna, the paired
# per-seed comparison with a bootstrap interval, geometric means.
#
#   bench/search/bbob.sh [--half heldout|tune] [--seeds 20] [--concurrency 1|4|1,4]
#                        [--jobs N] [--case NAME[,NAME..]] [--out DIR]
#                        [--ours-searcher JSON]   (our column with other settings: tuning, tune half only)
#
# Work is split into one job per (problem, method, concurrency), run N at
# a time (--jobs; default: the number of CPUs); each job's lines go to
# DIR/raw/, and a job whose file is complete is not run again, so an
# interrupted run resumes where it stopped. Default DIR:
# build/bbob/<half>-s<seeds>. Needs bin/bench/search_bbob (make) and
# Debian's python3-optuna (/usr/bin/python3).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
half=heldout seeds=20 concs=1,4 jobs=$(nproc) cases= out= oursjson=
while (($#)); do
  case $1 in
    --half) half=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --concurrency) concs=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --case) cases=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ours-searcher) oursjson=$2; shift 2 ;;
    *) sed -n '2,21p' "$0" >&2; exit 2 ;;
  esac
done
[[ $half == heldout || $half == tune ]] || { echo "--half heldout|tune" >&2; exit 2; }
if [[ -n $oursjson && $half == heldout ]]; then
  echo "--ours-searcher is for tuning: the held-out half reports the defaults only (docs/search.md)" >&2; exit 2
fi
HF_BIN=${HF_BIN:-$PWD/bin}
BB=$HF_BIN/bench/search_bbob
PY=/usr/bin/python3
[[ -x $BB ]] || make -j2 "$BB" >/dev/null || { echo "cannot build $BB" >&2; exit 2; }
$PY -c 'import optuna' 2>/dev/null || { echo "python3-optuna not installed (apt-get install python3-optuna)" >&2; exit 2; }
$PY -c 'import sys; sys.path.insert(0, "bench/search"); import bbob_lib; bbob_lib.build()' || exit 2
out=${out:-build/bbob/$half-s$seeds}
mkdir -p "$out/raw"
export BB PY seeds out oursjson
# one thread per job: --jobs processes, not jobs x BLAS threads
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

# One job: "method conc case budget"; writes $out/raw/case.method.cN.tsv.
job() {
  local m=$1 c=$2 k=$3 f="$out/raw/$3.$1.c$2.tsv"
  [[ -f $f ]] && (( $(grep -c '^raw' "$f") >= seeds )) && return 0
  case $m in
    ours-tpe) if [[ -n $oursjson ]]; then
                "$BB" --half all --case "$k" --seeds "$seeds" --concurrency "$c" --searcher "$oursjson" --label ours-tpe
              else "$BB" --half all --case "$k" --seeds "$seeds" --concurrency "$c" --method tpe; fi ;;
    ours-tpe-univariate) "$BB" --half all --case "$k" --seeds "$seeds" --concurrency "$c" --method tpe-univariate ;;
    *) $PY bench/search/optuna_bbob.py --half all --case "$k" --seeds "$seeds" --concurrency "$c" --sampler "$m" ;;
  esac > "$f.tmp" && mv "$f.tmp" "$f"
}
export -f job

list=$("$BB" --list --half "$half" ${cases:+--case "$cases"}) || exit 2
n=$(wc -l <<<"$list")
t0=$(date +%s)
echo "== $n problems ($half half), $seeds seeds, in flight: $concs, $jobs jobs, raw lines in $out/raw"
{
  for c in ${concs//,/ }; do
    if ((c == 1)); then methods="tpe tpe-mv random"; else methods="tpe tpe-mv tpe-mv-cl random"; fi
    while IFS=$'\t' read -r k _ budget _; do
      for m in $methods; do echo "$budget $m $c $k"; done
      for m in ours-tpe ours-tpe-univariate; do echo "0 $m $c $k"; done
    done <<<"$list"
  done
} | sort -k1,1nr | cut -d' ' -f2- | xargs -P "$jobs" -L 1 bash -c 'job "$@"' _
echo "== runs took $(( $(date +%s) - t0 )) s"
$PY bench/search/bbob_table.py "$out"/raw/*.tsv
