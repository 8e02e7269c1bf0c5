#!/usr/bin/env bash
# test_threads_doc.sh — every thread a hyperfarm program runs is named in
# docs/architecture.md ("Threads and locks"), and no name runs more often
# than the table's count allows.
#
# The table's rows are `| program | `name` | count | ... |`: the thread's
# name as /proc/PID/task/TID/comm shows it (hf_thread/hf_pool names; the
# main thread's is the program's name cut to 15 characters; libraries'
# threads under whatever name they show), and how many may carry it (a
# number; n: as many as configured; 1+blas: one plus OpenBLAS's threads,
# which this test pins to none). A thread started without a name inherits
# its starter's, so it shows up as one too many of that name.
#
# Statically, every name the code passes to hf_thread_start/hf_pool_new is
# in the table and every hf-* name of the table is in the code. What runs:
# a real scheduler and two agents; a 1-rank hyperfarm-train
# trial that checkpoints every epoch (uploads, large enough for the
# store's write-behind thread), is SIGKILLed once a checkpoint is stored
# and restarts from it (the agent's restore), a log search (the log-search
# pool), a webhook (delivery), and a 2-rank sync data-parallel run over
# tcp (the trainer's communication thread), with `hyperfarm watch`
# following the first. Every 0.2 s, all along, the threads of the
# scheduler, the agents, every hyperfarm-train process and the CLI are
# read; at the end each name seen is checked against the table.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train
DATA=/usr/share/datasets/fashion-mnist
[[ -r $DATA/train-images-idx3-ubyte.gz ]] || { echo "SKIP: $DATA not installed"; exit 77; }
hf_setup
DOC=${HF_THREADS_DOC:-$HF_REPO/docs/architecture.md}   # another copy: to see the test fail

# ---- the table: allowed[program/name] = count
declare -A allowed=()
while IFS= read -r row; do
  prog=$(cut -d'|' -f2 <<<"$row" | tr -d ' ')
  names=$(cut -d'|' -f3 <<<"$row")
  count=$(cut -d'|' -f4 <<<"$row" | tr -d ' ')
  while read -r n; do
    [[ -n $n ]] && allowed[$prog/$n]=$count
  done < <(grep -o '`[^`]*`' <<<"$names" | tr -d '`')
done < <(grep -E '^\| (scheduler|agent|trainer|cli) \| `' "$DOC")
(( ${#allowed[@]} >= 6 )) || hf_fail "no thread table in $DOC (rows '| program | \`name\` | count | ...')"
hf_log "the doc names ${#allowed[@]} threads: ${!allowed[*]}"

# ---- the names the code gives (hf_thread_start*, hf_pool_new), both ways:
# every one in the table (also those this run does not start, such as the
# MPI watchdog), and every hf-* name of the table still in the code.
code_names=$(cd "$HF_REPO" && grep -rhoE --include='*.c' --include='*.cu' \
    '(hf_thread_start(_stack)?\([^,]*,( *[^,]*,)? *"[^"]+"|hf_pool_new\( *"[^"]+")' common scheduler agent trainer cli |
  grep -oE '"[^"]+"' | tr -d '"' | sort -u)
[[ -n $code_names ]] || hf_fail "found no hf_thread_start/hf_pool_new name in the sources"
doc_names=$(printf '%s\n' "${!allowed[@]}" | sed 's|^[^/]*/||' | sort -u)
for n in $code_names; do
  grep -qxF -- "$n" <<<"$doc_names" || hf_fail "the code starts thread '$n' (hf_thread/hf_pool) but $DOC's table does not name it"
done
for n in $(grep '^hf-' <<<"$doc_names"); do
  grep -qxF -- "$n" <<<"$code_names" || hf_fail "$DOC names thread '$n', which no hf_thread_start/hf_pool_new in the code starts"
done
hf_log "ok: the code's thread names ($(echo $code_names)) are the table's"

# ---- sample the threads of every program, every 0.2 s, into $HF_TMP/threads
# (lines "program pid name name ..."), until $HF_TMP/stop-sampling exists.
comms() {   # PID: the comm of each of its threads, one line
  local t c out=()
  for t in /proc/$1/task/*; do
    read -r c 2>/dev/null <"$t/comm" && out+=("$c")
  done
  (( ${#out[@]} )) && echo "${out[*]}"
}
trainers() {   # pids of hyperfarm-train processes below the agents
  # By descent (proc_lib.sh), not by readlink of /proc/PID/cwd: a sandboxed
  # trial's cwd is named from its own mount namespace, which in a chroot
  # (CI's fresh root) is not our path.
  local p c
  for p in $(hf_descendants); do
    read -r c 2>/dev/null <"/proc/$p/comm" || continue
    [[ $c == hyperfarm-train ]] && echo "$p"
  done
  return 0
}
sample() {
  local p c
  while [[ ! -e $HF_TMP/stop-sampling ]]; do
    c=$(comms "$HF_SCHED_PID") && echo "scheduler $HF_SCHED_PID $c"
    for p in "${HF_AGENT_PIDS[@]}"; do c=$(comms "$p") && echo "agent $p $c"; done
    for p in $(trainers); do c=$(comms "$p") && echo "trainer $p $c"; done
    # (the CLI once it has exec'd: before, its process is still a bash)
    read -r p 2>/dev/null <"$HF_TMP/cli.pid" && c=$(comms "$p") && [[ $c == hyperfarm* ]] && echo "cli $p $c"
    sleep 0.2
  done >>"$HF_TMP/threads"
}

hf_start_scheduler --checkpoint-gc-grace 0 --webhook-allow-private
hf_start_agent a1 --slots 2 --gpus none
hf_start_agent a2 --slots 1 --gpus none
sample &
SAMPLER=$!

# ---- a 1-rank trial: checkpoints travel up, then it restarts from one
flags=(--model mlp --hidden 256 --epochs 8 --batch-size 64 --lr 0.01 --optimizer adam --seed 5
       --limit-train 20000 --val-size 500 --limit-test 500 --threads 1)
blas1() { jq -c '.trial.env = {OPENBLAS_NUM_THREADS: "1"}'; }   # no OpenBLAS threads: each name counts
one=$(hf_submit "$(hf_train_experiment threads-one 1 1 "${flags[@]}" | blas1)")
t1=$(hf_get "/api/v1/experiments/$one/trials" | jq -er '.trials[0].id')
"$HF_BIN/hyperfarm" --url "$HF_URL" watch "$one" >"$HF_TMP/watch.out" 2>&1 &   # the CLI, following it live
CLI_PID=$!
echo "$CLI_PID" >"$HF_TMP/cli.pid"
stored() { curl -fsS -m 2 "$HF_URL/api/v1/trials/$t1/checkpoints" | jq -e '.checkpoints | length > 0' >/dev/null; }
hf_wait_for 60 stored || hf_fail "no checkpoint of trial $t1 stored in 60 s"
tp=$(trainers); tp=${tp%%$'\n'*}   # the first (no head in a pipe: pipefail)
[[ -n $tp ]] && kill -KILL "$tp"
hf_log "trial $t1: checkpoint stored; trainer $tp killed (restarts from it)"

# ---- a log search and a webhook while it runs
hf_api GET "/api/v1/trials/$t1/logs?grep=epoch&limit=5"
hf_log "log search -> $HF_STATUS"
hf_api POST /api/v1/webhooks '{"url": "http://127.0.0.1:9/hook", "events": ["trial.COMPLETED"]}'
hf_log "webhook -> $HF_STATUS"

# ---- a 2-rank sync data-parallel run over tcp
dflags=(--model mlp --hidden 64 --epochs 2 --batch-size 64 --lr 0.01 --optimizer adam --seed 5
        --limit-train 12000 --val-size 500 --limit-test 500 --threads 1 --mode sync --backend tcp --timeout 30)
two=$(hf_submit "$(hf_train_experiment threads-two 2 0 "${dflags[@]}" | blas1)")
hf_wait_experiment "$two" 120
hf_wait_experiment "$one" 120
hf_get "/api/v1/experiments/$one/trials" | jq -e '.trials[0].attempt >= 2' >/dev/null ||
  hf_log "note: trial $t1 did not restart (the kill came late); the restore path was not sampled"
sleep 1
touch "$HF_TMP/stop-sampling"
wait "$SAMPLER" 2>/dev/null || true
wait "$CLI_PID" 2>/dev/null || true

# ---- compare
[[ -s $HF_TMP/threads ]] || hf_fail "no thread was sampled"
# A count holds when two samples of the same process in a row show it: a
# thread between its clone and the pthread_setname_np its first line calls
# (common/hf_thread.c, trampoline) carries its starter's name for the
# microseconds in between, which one 0.2 s sample can catch (it did once,
# under the sanitizers: the trainer's 'hyperfarm-train' twice while
# hf-bucketer started) but two in a row cannot; a thread started without a
# name keeps its starter's for life and is caught. A name outside the table
# counts the same way, from two samples in a row (one sample caught a
# trainer mid-exec, its one thread called 'exe', in a loaded make test).
declare -A seen=() most=() peak=() bad=() last=() where=()
while read -r prog pid names; do
  declare -A n=() p=()   # this sample's count of each name, and the process's previous sample's
  for c in $names; do n[$c]=$(( ${n[$c]:-0} + 1 )); done
  for c in ${last[$pid]:-}; do p[$c]=$(( ${p[$c]:-0} + 1 )); done
  for c in "${!n[@]}"; do
    seen[$prog/$c]=1
    [[ -n ${where[$prog/$c]:-} ]] || where[$prog/$c]="$prog $pid $names"
    (( n[$c] > ${peak[$prog/$c]:-0} )) && peak[$prog/$c]=${n[$c]}
    held=$(( n[$c] < ${p[$c]:-0} ? n[$c] : ${p[$c]:-0} ))
    if (( held > ${most[$prog/$c]:-0} )); then most[$prog/$c]=$held; where[$prog/$c]="$prog $pid $names"; fi
  done
  last[$pid]=$names
  unset n p
done <"$HF_TMP/threads"
for k in $(printf '%s\n' "${!seen[@]}" | sort); do
  want=${allowed[$k]:-}
  [[ $want == 1+blas ]] && want=1   # the trials run with OPENBLAS_NUM_THREADS=1 (below)
  if [[ -z $want ]] && (( ${most[$k]:-0} > 0 )); then
    bad[$k]="thread '${k#*/}' of the ${k%%/*} (up to ${peak[$k]} at once) is not in $DOC's table"
  elif [[ $want =~ ^[0-9]+$ ]] && (( ${most[$k]:-0} > want )); then
    bad[$k]="${most[$k]} threads of the ${k%%/*} are called '${k#*/}', the table allows $want (a thread started without a name takes its starter's)"
  fi
done
hf_log "threads seen (most at once, held over two samples): $(for k in $(printf '%s\n' "${!seen[@]}" | sort); do printf '%s=%s ' "$k" "${most[$k]:-0}"; done)"
for k in "${!bad[@]}"; do
  hf_log "FAIL: ${bad[$k]}; e.g. ${where[$k]}"
done
(( ${#bad[@]} == 0 )) || hf_fail "${#bad[@]} thread name(s) disagree with docs/architecture.md"
for p in scheduler agent trainer cli; do   # (no grep -q in a pipe: pipefail and SIGPIPE)
  found=0
  for k in "${!seen[@]}"; do [[ $k == "$p"/* ]] && found=1; done
  (( found )) || hf_fail "no $p thread was sampled"
done
hf_log "PASS: every thread seen is in docs/architecture.md"
