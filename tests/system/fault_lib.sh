# tests/system/fault_lib.sh — helpers for the fault-injection tests
# (tests/system/test_fault_*.sh). Source it; it is not a test itself.
#
# Everything a test starts lives under one temporary directory $FT_DIR and
# is killed by the EXIT trap: the daemons by their recorded pids, trial
# processes (which an agent killed with SIGKILL leaves behind, as a dead
# machine would) by finding processes whose environment or working
# directory points into $FT_DIR — never by name — and whatever else still
# runs below the test's shell (proc_lib.sh).
#
# Conventions: ft_* functions; failures call ft_fail (prints, exits 1);
# a missing prerequisite calls ft_skip (exits 77, which tests/run reports as
# skipped). Programs come from $HF_BIN (default: the repository's bin/).

set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh"
FT_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HF_BIN=${HF_BIN:-$FT_ROOT/bin}
FT_DIR=$(mktemp -d /tmp/hf-fault-XXXXXX)
FT_PIDS=()
FT_MOUNTS=()
FT_T0=${EPOCHREALTIME/[,.]/}
FT_TEST=$(basename "$0" .sh)

ft_log()  { local now=${EPOCHREALTIME/[,.]/}; printf '[%6.1fs] %s\n' "$(( (now - FT_T0) / 100000 ))e-1" "$*"; }
# ft_fail works from command substitutions too: a subshell signals the test's shell.
ft_fail() {
  ft_log "FAIL: $*" >&2
  if (( BASH_SUBSHELL > 0 )); then kill -USR1 "$FT_MAIN_PID"; exit 1; fi
  ft_dump_logs; exit 1
}
FT_MAIN_PID=$$
ft_skip() { echo "SKIP: $*"; exit 77; }

ft_dump_logs() {
  local f
  for f in "$FT_DIR"/*.log; do
    [[ -f $f ]] || continue
    echo "---- last 25 lines of $(basename "$f") ----"; tail -25 "$f"
  done
}

# Pids of processes (other than ourselves) whose environment or cwd refer to $FT_DIR.
ft_stray_pids() {
  local p pid
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    if [[ $(readlink "$p/cwd" 2>/dev/null) == "$FT_DIR"* ]] ||
       tr '\0' '\n' 2>/dev/null <"$p/environ" | grep -q "^HYPERFARM_CHECKPOINT_DIR=$FT_DIR"; then
      echo "$pid"
    fi
  done
}

ft_cleanup() {
  local rc=$? pid m
  for pid in "${FT_PIDS[@]}"; do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  for pid in $(ft_stray_pids); do kill -KILL "$pid" 2>/dev/null; done
  # anything else the test started (a helper loop, a daemon by hand)
  for pid in $(hf_descendants); do kill -KILL "$pid" 2>/dev/null; done
  { wait; } 2>/dev/null
  for m in "${FT_MOUNTS[@]}"; do umount -l "$m" 2>/dev/null; done
  if [[ -n ${FT_KEEP:-} ]]; then echo "kept $FT_DIR"; else rm -rf "$FT_DIR"; fi
  exit "$rc"
}
trap ft_cleanup EXIT
trap 'exit 130' INT TERM
trap 'ft_dump_logs; exit 1' USR1

ft_require() {   # programs relative to $HF_BIN, or commands
  local p
  for p in "$@"; do
    if [[ $p == */* || $p == hyperfarm* ]]; then
      [[ -x $HF_BIN/$p ]] || ft_skip "$HF_BIN/$p is not built yet"
    else
      command -v "$p" >/dev/null || ft_skip "$p is not installed"
    fi
  done
}

# A free TCP port on 127.0.0.1 (bind to port 0 and read it back).
ft_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Wait until "$@" succeeds, polling every 0.2 s; fail after $1 seconds with message $2.
ft_wait() {
  local tmo=$1 what=$2; shift 2
  local end=$(( $(date +%s) + tmo ))
  until "$@"; do
    (( $(date +%s) >= end )) && ft_fail "timed out after ${tmo}s waiting for: $what"
    sleep 0.2
  done
}

# ---- scheduler ----
FT_PORT=${FT_PORT:-$(ft_port)}
FT_URL=http://127.0.0.1:$FT_PORT
FT_DB=$FT_DIR/hf.db
SCHED_PID=
FT_SCHED_STARTS=0
FT_SCHED_ARGS=()

ft_healthy() { curl -sf -m 2 "$FT_URL/healthz" >/dev/null 2>&1; }

# ft_start_scheduler [extra args...]: start on $FT_PORT with $FT_DB, wait for /healthz.
ft_start_scheduler() {
  FT_SCHED_STARTS=$((FT_SCHED_STARTS + 1))
  local log=$FT_DIR/scheduler.log
  echo "==== start $FT_SCHED_STARTS ====" >>"$log"
  "$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:$FT_PORT" --db "$FT_DB" "${FT_SCHED_ARGS[@]}" "$@" >>"$log" 2>&1 &
  SCHED_PID=$!
  disown "$SCHED_PID"        # no "Killed" job reports when a test kills it
  FT_PIDS+=("$SCHED_PID")
  local i
  for ((i = 0; i < 100; i++)); do
    ft_healthy && return 0
    kill -0 "$SCHED_PID" 2>/dev/null || ft_fail "scheduler exited at start (see scheduler.log)"
    sleep 0.1
  done
  ft_fail "scheduler did not answer /healthz within 10 s"
}

# ---- agents ----
declare -A AGENT_PID
FT_AGENT_ARGS=()
# ft_start_agent NAME SLOTS [extra args...]; scheduler URL $FT_AGENT_URL (default
# $FT_URL), working directory $FT_WORK (default $FT_DIR/work, shared by all
# agents like a shared filesystem, so checkpoints survive a dead agent).
ft_start_agent() {
  local name=$1 slots=$2 url=${FT_AGENT_URL:-$FT_URL} work=${FT_WORK:-$FT_DIR/work}; shift 2
  mkdir -p "$work"
  "$HF_BIN/hyperfarm-agent" --scheduler "$url" --name "$name" --slots "$slots" --gpus none \
    --workdir "$work" "${FT_AGENT_ARGS[@]}" "$@" >>"$FT_DIR/agent-$name.log" 2>&1 &
  AGENT_PID[$name]=$!
  disown "$!"
  FT_PIDS+=("$!")
}

# ---- API ----
# ft_api METHOD PATH [BODY]: sets $FT_STATUS (0 when no answer) and $FT_BODY.
# Call it directly, not in $(...), or the variables are lost.
FT_STATUS=0
FT_BODY=
ft_api() {
  local out
  if out=$(curl -s -m 10 -X "$1" -H 'Content-Type: application/json' ${3:+--data-binary "$3"} \
           -w '\n%{http_code}' "$FT_URL$2" 2>/dev/null); then
    FT_STATUS=${out##*$'\n'}
    FT_BODY=${out%$'\n'*}
  else
    FT_STATUS=0; FT_BODY=
    return 1
  fi
}
ft_get() {   # GET that must answer 200; prints the body
  ft_api GET "$1" && [[ $FT_STATUS == 200 ]] || ft_fail "GET $1 -> HTTP $FT_STATUS: $FT_BODY"
  printf '%s' "$FT_BODY"
}

# An experiment running the fake trial. ft_experiment NAME MAX_TRIALS CONCURRENT MAX_RESTARTS fake_trial-args...
# $FT_TRIAL_EXTRA (a JSON object) is merged into "trial", e.g. {"grace_period_ms": 2000}.
ft_experiment() {
  local name=$1 n=$2 conc=$3 restarts=$4; shift 4
  local argv
  argv=$(printf '%s\n' "$HF_BIN/tests/fake_trial" "$@" | jq -R . | jq -sc .)
  jq -cn --arg name "$name" --argjson n "$n" --argjson c "$conc" --argjson r "$restarts" --argjson argv "$argv" \
    --argjson extra "${FT_TRIAL_EXTRA:-{\}}" '{
    name: $name,
    objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: $n, max_concurrent_trials: $c},
    hyperparameters: {x: {type: "double", min: 0, max: 1}, lr: {type: "log", min: 0.01, max: 1}},
    trial: ({command: $argv, resources: {workers: 1, slots_per_worker: 1}, max_restarts: $r} + $extra)}'
}

# ft_submit JSON: prints the new experiment id (fails unless 201).
ft_submit() {
  ft_api POST /api/v1/experiments "$1"
  [[ $FT_STATUS == 201 ]] || ft_fail "submit -> HTTP $FT_STATUS: $FT_BODY"
  jq -r .id <<<"$FT_BODY"
}

ft_trials() { ft_get "/api/v1/experiments/$1/trials"; }
ft_exp_state() { ft_get "/api/v1/experiments/$1" | jq -r .state; }

# The running trials under $FT_DIR, one line per run: "pid trial_id attempt
# pgrp". A run is one process group (the agent starts each trial in its own;
# the pgrp is the pid its log says the trial started as): its other
# processes are not second runs — a --spawn-child grandchild, or under the
# sanitizers LeakSanitizer's tracer, which a fake_trial clones at exit
# (same memory, so the same argv and environment) for a moment; the lowest
# pid of the group, its first process, stands for it.
ft_trial_procs() {
  local p pid env tid att argv0 pgrp rest
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    argv0=
    { IFS= read -r -d '' argv0 <"$p/cmdline"; } 2>/dev/null
    [[ $argv0 == */fake_trial ]] || continue
    env=$(tr '\0' '\n' 2>/dev/null <"$p/environ") || continue
    grep -q "^HYPERFARM_CHECKPOINT_DIR=$FT_DIR" <<<"$env" || continue
    { read -r _ _ _ _ pgrp rest <"$p/stat"; } 2>/dev/null || continue   # gone meanwhile
    tid=$(sed -n 's/^HYPERFARM_TRIAL_ID=//p' <<<"$env")
    att=$(sed -n 's/^HYPERFARM_ATTEMPT=//p' <<<"$env")
    echo "$pid ${tid:-?} ${att:-?} $pgrp"
  done | sort -n | awk '!seen[$4]++'
}

# Background watchdog: every 0.1 s, record any trial id run by two live
# runs (process groups) at once into $FT_DIR/double_runs. Start with
# ft_watch_doubles; check with ft_check_doubles.
ft_watch_doubles() {
  ( while :; do
      ft_trial_procs | awk '{c[$2]++; p[$2]=p[$2] " " $1 "/a" $3 "/pgrp " $4} END {for (t in c) if (c[t] > 1) print t ":" p[t]}' |
        while read -r l; do echo "$(date +%s.%N) trial $l" >>"$FT_DIR/double_runs"; done
      sleep 0.1
    done ) &
  disown "$!"
  FT_PIDS+=("$!")
}
ft_check_doubles() {
  [[ -s $FT_DIR/double_runs ]] || return 0
  ft_log "a trial ran twice at once (time, trial: pid/attempt/pgrp ...):"; sort -u -k2 "$FT_DIR/double_runs" | head -5
  # What the daemons said about those trials (the first 5), for the diagnosis.
  local t f
  for t in $(awk '{sub(":", "", $3); print $3}' "$FT_DIR/double_runs" | sort -un | head -5); do
    for f in "$FT_DIR"/*.log; do
      [[ -f $f ]] || continue
      echo "---- $(basename "$f"): trial $t ----"
      grep -E "trial $t( |:|,|\)|$)|\<$t\>.*(assign|kill|stale|adopt)" "$f" | grep -v "checkpoint .* uploaded" | tail -40
    done
  done
  return 1
}

# Wait until pid $1 is gone (at most $2 seconds, default 10). RET 1 if still alive.
ft_wait_gone() {
  local i n=$(( ${2:-10} * 10 ))
  for ((i = 0; i < n; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

# RSS in kB of a pid (0 when gone).
ft_rss() { awk '/^VmRSS:/ {print $2; f=1} END {if (!f) print 0}' "/proc/$1/status" 2>/dev/null || echo 0; }
