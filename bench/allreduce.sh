#!/usr/bin/env bash
# bench/allreduce.sh — what `make bench` (bench/run) runs for allreduce:
# every size from 4 KiB to 256 MiB at p = 2 and 4, our tcp ring beside
# Open MPI over TCP and Gloo, about 200 MB moved per size, best of 2 rounds,
# so the whole table fits bench/run's time limit on 2 cores.
# For the full-length measurement run bin/bench/allreduce without options.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${HF_BIN:=$PWD/bin}"
export HF_ROOT=$PWD
exec "$HF_BIN/bench/allreduce" --np 2,4 --sizes 4K,16K,64K,256K,1M,4M,16M,64M,256M --min-bytes 2e8 --min-iters 3 --rounds 2 "$@"
