#!/usr/bin/env bash
# test_dist_mpi.sh — --mode sync under mpirun, with the mpi backend
# (MPI_Allreduce over Open MPI's TCP transport) and with our tcp backend
# (rank/world from OMPI_COMM_WORLD_*, rendezvous at HYPERFARM_MASTER):
# both must match the single-process run (val_loss within 1e-5 relative,
# same accuracy). Then a stalled rank under the mpi backend: rank 1 is
# SIGSTOPped mid-training; rank 0's watchdog must end it after --timeout
# with a message naming the collective and its sequence number, and
# mpirun must end the whole job non-zero (no hang). Skips when mpirun is
# not installed.
set -euo pipefail
: "${HF_BIN:?HF_BIN must point at the programs}"
TRAIN=$HF_BIN/hyperfarm-train
DATA=/usr/share/datasets/fashion-mnist
command -v mpirun >/dev/null || { echo "skip: no mpirun"; exit 77; }
[[ -r $DATA/train-images-idx3-ubyte.gz ]] || { echo "skip: $DATA missing"; exit 77; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OPENBLAS_NUM_THREADS=1
ARGS=(--model mlp --hidden 64,32 --epochs 1 --limit-train 4000 --val-size 500 --limit-test 500
      --batch-size 50 --seed 4 --threads 1 --lr 0.05 --optimizer sgd --momentum 0.9 --log-level warn)
MPIRUN=(mpirun -np 2 --oversubscribe --bind-to none --mca btl tcp,self --mca btl_tcp_if_include lo)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
metric() { sed 's/^HYPERFARM //' <(grep "\"$2\"" "$1" | tail -1) | jq -r ".$2"; }
fail() { echo "FAIL: $*"; exit 1; }

"$TRAIN" "${ARGS[@]}" >"$T/single.out" 2>"$T/single.err" || { cat "$T/single.err"; fail "single run"; }
ref=$(metric "$T/single.out" val_loss); ref_acc=$(metric "$T/single.out" val_acc)
echo "single: val_loss $ref val_acc $ref_acc"

# Open MPI unloads its plugins at MPI_Finalize, so LeakSanitizer cannot
# attribute their process-lifetime allocations ("<unknown module>"): no
# leak checking for the ranks that initialise MPI (ASan's other checks stay).
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
"${MPIRUN[@]}" "$TRAIN" "${ARGS[@]}" --mode sync --backend mpi >"$T/mpi.out" 2>"$T/mpi.err" \
  || { tail -20 "$T/mpi.err"; fail "mpirun with --backend mpi"; }
v=$(metric "$T/mpi.out" val_loss); a=$(metric "$T/mpi.out" val_acc)
echo "mpi backend: val_loss $v val_acc $a"
awk -v x="$v" -v y="$ref" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= 1e-5 * y) }' || fail "mpi run differs"
[[ $a == "$ref_acc" ]] || fail "mpi accuracy differs"
(( $(grep -c '^HYPERFARM' "$T/mpi.out") >= 1 )) || fail "no metric line from the chief"

# a free loopback port: one nothing listens on (ss), rank 0 binds it at once
for _ in $(seq 50); do
  port=$(( 20000 + RANDOM % 20000 ))
  ss -ltn "sport = :$port" 2>/dev/null | grep -q ":$port" || break
done
"${MPIRUN[@]}" -x HYPERFARM_MASTER=127.0.0.1:$port "$TRAIN" "${ARGS[@]}" --mode sync --backend tcp \
  >"$T/tcp.out" 2>"$T/tcp.err" || { tail -20 "$T/tcp.err"; fail "mpirun with --backend tcp"; }
v=$(metric "$T/tcp.out" val_loss)
echo "tcp backend under mpirun: val_loss $v"
awk -v x="$v" -v y="$ref" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= 1e-5 * y) }' || fail "tcp run differs"

# A stalled rank (SIGSTOP: alive, silent) under the mpi backend.
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
"${MPIRUN[@]}" "$TRAIN" "${ARGS[@]}" --epochs 200 --mode sync --backend mpi --timeout 2 \
  >"$T/stall.out" 2>"$T/stall.err" &
mp=$!
rank1=""
for _ in $(seq 200); do   # rank 1 is the hyperfarm-train whose environment says so
  for p in $(pgrep -f "$TRAIN" || true); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && rank1=$p
  done
  [[ -n $rank1 ]] && grep -q '^HYPERFARM' "$T/stall.out" 2>/dev/null && break
  sleep 0.1
done
[[ -n $rank1 ]] || { kill "$mp" 2>/dev/null; fail "rank 1 of the stall run not found"; }
sleep 0.5
kill -STOP "$rank1"
t0=$(date +%s%N)
deadline=$(( $(date +%s) + 30 ))
while kill -0 "$mp" 2>/dev/null && (( $(date +%s) < deadline )); do sleep 0.1; done
if kill -0 "$mp" 2>/dev/null; then
  kill -KILL "$rank1" 2>/dev/null; kill "$mp" 2>/dev/null
  fail "mpirun still running 30 s after rank 1 stalled (timeout 2 s)"
fi
set +e; wait "$mp"; rc=$?; set -e
kill -KILL "$rank1" 2>/dev/null || true
el=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "stalled rank 1: job ended after ${el} ms, exit $rc"
(( rc != 0 )) || fail "mpirun exited 0 although rank 1 stalled"
grep -E 'rank 0 of 2: MPI (allreduce|barrier|broadcast|allgather) seq [0-9]+ has not completed after 2000 ms' \
  "$T/stall.err" || { tail -20 "$T/stall.err"; fail "no watchdog message naming the stuck collective"; }
echo ok
