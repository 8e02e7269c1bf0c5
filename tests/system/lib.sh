# tests/system/lib.sh — shared bash helpers for the system tests.
#
# Source it at the top of a test (it sets -euo pipefail and a trap):
#
#     source "$(dirname "$0")/lib.sh"
#     hf_setup                       # temp dir, cleanup trap, checks $HF_BIN
#     hf_start_scheduler             # free loopback port, temp database
#     hf_start_agent a1 --slots 2
#     id=$(hf_submit "$json")        # POST an experiment, print its id
#     hf_wait_experiment "$id" 60    # until COMPLETED, CANCELED or FAILED
#     hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED"' "sweep completed"
#
# Everything a test starts is tracked and killed on exit (normal end,
# failure, Ctrl-C): every scheduler and agent these helpers start
# (restarted ones included), whatever hf_track names, then any other
# process still below the test's shell, and stray trial processes
# orphaned by a SIGKILLed agent (found by their working directory inside
# $HF_TMP). tests/run fails a test that leaves anything running anyway
# (tests/reap). Logs of the daemons are in $HF_TMP/*.log and are printed
# when a test fails.
#
# Stable interface (other engineers' tests source this; add, don't change):
#   variables  HF_BIN HF_TMP HF_URL HF_PORT HF_DB HF_SCHED_PID HF_STATUS HF_BODY
#              HF_AGENT_PIDS[name]
#   setup      hf_setup, hf_need PROG..., hf_track PID, hf_cleanup, hf_alive PID,
#              hf_kill_pid PID [SIGNAL]
#   ports      hf_free_port
#   daemons    hf_start_scheduler [ARGS...], hf_stop_scheduler [SIGNAL],
#              hf_restart_scheduler [ARGS...] (stops the running one, then
#              the same port and db),
#              hf_start_agent NAME [ARGS...], hf_stop_agent NAME [SIGNAL]
#   waiting    hf_wait_http URL [TIMEOUT_S], hf_wait_for TIMEOUT_S CMD...,
#              hf_wait_experiment ID [TIMEOUT_S]
#   HTTP       hf_api METHOD PATH [BODY] (sets HF_STATUS and HF_BODY),
#              hf_get PATH, hf_post PATH [BODY] (fail unless 2xx), hf_submit JSON
#   asserts    hf_jq_assert FILTER MESSAGE (stdin JSON, jq -e), hf_assert_eq A B MSG,
#              hf_fail MESSAGE, hf_log MESSAGE
#   training   hf_reference_metrics OUT_FILE (sets HF_WANT),
#              hf_assert_metrics_equal TRIAL EPOCH WANT REL WHAT (sets HF_GOT)
#   CLI        hf_cli ARGS... (bin/hyperfarm with --url $HF_URL)
#   bodies     hf_train_experiment NAME WORKERS MAX_RESTARTS FLAGS... (prints JSON)
#   gang       hf_assert_gang_trial TRIAL (a 2-rank tcp run on agents a1 and a2)
#
# Environment knobs: HF_BIN (programs; default ./bin), HF_KEEP_TMP=1 keeps
# the temp dir, HF_SCHED_ARGS / HF_AGENT_ARGS add flags to every start.

set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh"

: "${HF_BIN:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bin}"
# The repository (examples and test programs that trials run; under the
# sanitizer build HF_BIN is build/san/bin, inside it).
HF_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HF_TMP=""
HF_URL=""
HF_PORT=""
HF_DB=""
HF_SCHED_PID=""
HF_STATUS=""
HF_BODY=""
declare -gA HF_AGENT_PIDS=()
HF_TRACKED=()
HF_T0=$(date +%s)

hf_log() { printf '[%s +%ss] %s\n' "${HF_TEST_NAME:-$(basename "$0" .sh)}" "$(( $(date +%s) - HF_T0 ))" "$*" >&2; }

hf_fail() {
  hf_log "FAIL: $*"
  exit 1
}

# Make sure the programs exist (a missing program is a failure, not a skip:
# these are acceptance tests of programs `make` builds).
hf_need() {
  local p
  for p in "$@"; do
    [[ -x $HF_BIN/$p ]] || hf_fail "missing program $HF_BIN/$p (run make first)"
  done
  command -v jq >/dev/null || hf_fail "jq is required"
  command -v curl >/dev/null || hf_fail "curl is required"
}

hf_track() { HF_TRACKED+=("$1"); }

hf_setup() {
  HF_TMP=$(mktemp -d "${TMPDIR:-/tmp}/hf-$(basename "$0" .sh)-XXXXXX")
  HF_DB=$HF_TMP/hf.db
  trap 'hf_cleanup $?' EXIT
  trap 'exit 130' INT TERM
  hf_log "temp dir $HF_TMP, programs from $HF_BIN"
}

# Is pid alive (and not a zombie waiting to be reaped)?
hf_alive() {
  local st
  [[ -r /proc/$1/stat ]] || return 1
  st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $st != Z && $st != X ]]
}

# Anything still running below the test's shell once the tracked daemons
# are stopped (a daemon a test started by hand, a helper loop): TERM, up
# to 2 s, then KILL.
hf_kill_descendants() {
  local pids i
  pids=$(hf_descendants)
  [[ -n $pids ]] || return 0
  hf_log "cleanup: stopping leftover processes: $pids"
  kill -TERM $pids 2>/dev/null
  for ((i = 0; i < 20; i++)); do
    pids=$(hf_descendants)
    [[ -n $pids ]] || break
    sleep 0.1
  done
  [[ -n $pids ]] && kill -KILL $pids 2>/dev/null
  { wait; } 2>/dev/null
  return 0
}

# Stop one pid: SIGNAL (default TERM), up to 5 s, then KILL; reap it.
hf_kill_pid() {
  local pid=$1 sig=${2:-TERM} i
  [[ -n $pid ]] || return 0
  if hf_alive "$pid"; then
    kill -"$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      hf_alive "$pid" || break
      sleep 0.1
    done
    hf_alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null || true
  return 0
}

# Trial processes whose agent was SIGKILLed keep running; they are ours if
# their working directory lies inside $HF_TMP.
hf_kill_strays() {
  [[ -n $HF_TMP ]] || return 0
  local d pid cwd
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [[ $pid == "$$" ]] && continue
    cwd=$(readlink "$d/cwd" 2>/dev/null) || continue
    [[ $cwd == "$HF_TMP"/* ]] && kill -KILL "$pid" 2>/dev/null
  done
  return 0
}

hf_cleanup() {
  local rc=${1:-0} name f
  trap - EXIT
  set +e
  for name in "${!HF_AGENT_PIDS[@]}"; do hf_kill_pid "${HF_AGENT_PIDS[$name]}"; done
  hf_kill_pid "$HF_SCHED_PID"
  for f in "${HF_TRACKED[@]}"; do hf_kill_pid "$f"; done
  hf_kill_descendants
  hf_kill_strays
  if (( rc != 0 )) && [[ -n $HF_TMP ]]; then
    for f in "$HF_TMP"/*.log; do
      [[ -f $f ]] || continue
      echo "---- last 30 lines of $(basename "$f") ----" >&2
      tail -30 "$f" >&2
    done
  fi
  if [[ -n $HF_TMP && -z ${HF_KEEP_TMP:-} ]]; then rm -rf "$HF_TMP"; fi
  [[ -n ${HF_KEEP_TMP:-} ]] && echo "kept $HF_TMP" >&2
  exit "$rc"
}

# A TCP port on 127.0.0.1 nothing listens on right now (bind 0, read, close).
hf_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null && return 0
  local p
  while :; do
    p=$(( 20000 + RANDOM % 40000 ))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo "$p"; return 0; }
  done
}

hf_log_ms() { date -d "${1%% *}" +%s%3N; }   # LINE: a daemon log line's leading time (UTC), in ms

hf_wait_for() {   # TIMEOUT_S CMD...: poll every 0.1 s until CMD succeeds
  local tmo=$1; shift
  local end=$(( $(date +%s%N) / 1000000 + tmo * 1000 ))
  until "$@" >/dev/null 2>&1; do
    (( $(date +%s%N) / 1000000 < end )) || return 1
    sleep 0.1
  done
}

hf_wait_http() {  # URL [TIMEOUT_S]
  hf_wait_for "${2:-15}" curl -fsS -m 1 -o /dev/null "$1"
}

# Start the scheduler on a free port with $HF_DB (retrying with another port
# if it loses a race for the port). Extra args are passed through.
hf_start_scheduler() {
  local try
  for try in 1 2 3; do
    HF_PORT=${HF_FIXED_PORT:-$(hf_free_port)}
    HF_URL=http://127.0.0.1:$HF_PORT
    # shellcheck disable=SC2086
    "$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:$HF_PORT" --db "$HF_DB" ${HF_SCHED_ARGS:-} "$@" \
      >>"$HF_TMP/scheduler.log" 2>&1 &
    HF_SCHED_PID=$!
    hf_track "$HF_SCHED_PID"
    # Another process may answer on a port we lost the race for: the
    # answer counts only while our scheduler runs.
    if hf_wait_http "$HF_URL/healthz" 15 && hf_alive "$HF_SCHED_PID"; then
      hf_log "scheduler pid $HF_SCHED_PID on $HF_URL"
      return 0
    fi
    hf_alive "$HF_SCHED_PID" && hf_fail "scheduler did not answer $HF_URL/healthz in 15 s"
    wait "$HF_SCHED_PID" 2>/dev/null || true
    [[ -n ${HF_FIXED_PORT:-} ]] && break
  done
  hf_fail "scheduler did not start (see scheduler.log)"
}

hf_stop_scheduler() {  # [SIGNAL] (default TERM; KILL for a crash)
  local sig=${1:-TERM}
  [[ -n $HF_SCHED_PID ]] || return 0
  if [[ $sig == KILL ]]; then
    kill -KILL "$HF_SCHED_PID" 2>/dev/null || true
    wait "$HF_SCHED_PID" 2>/dev/null || true
  else
    hf_kill_pid "$HF_SCHED_PID" "$sig"
  fi
  HF_SCHED_PID=""
}

# Restart on the same port and database (agents keep their URL): a
# running scheduler is stopped first (SIGTERM), as an operator would.
hf_restart_scheduler() {
  local port=$HF_PORT
  hf_stop_scheduler
  HF_FIXED_PORT=$port hf_start_scheduler "$@"
}

hf_start_agent() {  # NAME [ARGS...]
  local name=$1; shift
  mkdir -p "$HF_TMP/agent-$name"
  # The trial sandbox (docs/agent.md "Sandbox") shows a trial the system
  # and its own directory; these tests' trials also run programs and
  # scripts from the temp dir (writable) and the repository (read-only),
  # as user nobody when the tests run as root: the temp dir lets them in.
  chmod 1777 "$HF_TMP"
  # shellcheck disable=SC2086
  "$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name "$name" --workdir "$HF_TMP/agent-$name" \
    --sandbox-bind "$HF_TMP" --sandbox-bind "$HF_REPO:ro" \
    $([[ $HF_BIN/ == "$HF_REPO"/* ]] || echo --sandbox-bind "$HF_BIN:ro") \
    ${HF_AGENT_ARGS:-} "$@" >>"$HF_TMP/agent-$name.log" 2>&1 &
  HF_AGENT_PIDS[$name]=$!
  hf_track "$!"
  hf_log "agent $name pid $! (--slots etc: $*)"
  # registered when GET /agents lists it
  hf_wait_for 15 hf_agent_registered "$name" || hf_fail "agent $name did not register in 15 s"
}

hf_agent_registered() {
  curl -fsS -m 2 "$HF_URL/api/v1/agents" | jq -e --arg n "$1" '[.agents[] | select(.name == $n)] | length > 0' >/dev/null
}

hf_stop_agent() {  # NAME [SIGNAL]
  local name=$1 sig=${2:-TERM}
  local pid=${HF_AGENT_PIDS[$name]:-}
  [[ -n $pid ]] || return 0
  if [[ $sig == KILL ]]; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  else
    hf_kill_pid "$pid" "$sig"
  fi
  unset "HF_AGENT_PIDS[$name]"
}

# METHOD PATH [BODY]: sets HF_STATUS (HTTP status) and HF_BODY (response
# body) in the calling shell; prints nothing. Never fails on HTTP errors
# (check HF_STATUS); fails the test when nothing answered. Do not call it
# in $(...): the variables would be lost with the subshell.
hf_api() {
  local method=$1 path=$2 body=${3-} out
  out=$(mktemp "$HF_TMP/resp.XXXXXX")
  if [[ -n $body ]]; then
    HF_STATUS=$(curl -sS -m 10 -o "$out" -w '%{http_code}' -X "$method" -H 'Content-Type: application/json' \
      --data-binary "$body" "$HF_URL$path") || { rm -f "$out"; hf_fail "$method $path: no answer"; }
  else
    HF_STATUS=$(curl -sS -m 10 -o "$out" -w '%{http_code}' -X "$method" "$HF_URL$path") \
      || { rm -f "$out"; hf_fail "$method $path: no answer"; }
  fi
  HF_BODY=$(cat "$out")
  rm -f "$out"
}

hf_get() {  # PATH: print the body; fail unless 2xx
  hf_api GET "$1"
  [[ $HF_STATUS == 2* ]] || hf_fail "GET $1 -> $HF_STATUS: $HF_BODY"
  printf '%s\n' "$HF_BODY"
}

hf_post() {  # PATH [BODY]: print the body; fail unless 2xx
  hf_api POST "$1" "${2-}"
  [[ $HF_STATUS == 2* ]] || hf_fail "POST $1 -> $HF_STATUS: $HF_BODY"
  printf '%s\n' "$HF_BODY"
}

hf_submit() {  # JSON -> prints the experiment id; fail unless 201
  hf_api POST /api/v1/experiments "$1"
  [[ $HF_STATUS == 201 ]] || hf_fail "submit -> $HF_STATUS: $HF_BODY"
  jq -er .id <<<"$HF_BODY"
}

hf_exp_state() { curl -fsS -m 5 "$HF_URL/api/v1/experiments/$1" | jq -r .state; }

hf_exp_ended() {
  local s
  s=$(hf_exp_state "$1") || return 1
  [[ $s == COMPLETED || $s == CANCELED || $s == FAILED ]]
}

hf_wait_experiment() {  # ID [TIMEOUT_S]
  hf_wait_for "${2:-60}" hf_exp_ended "$1" \
    || hf_fail "experiment $1 did not end in ${2:-60} s (state $(hf_exp_state "$1" 2>/dev/null || echo '?'))"
  hf_log "experiment $1 ended: $(hf_exp_state "$1")"
}

hf_exp_completed_at_least() {  # ID N: does experiment ID have N completed trials?
  [[ $(curl -fsS -m 5 "$HF_URL/api/v1/experiments/$1" | jq .counts.completed) -ge $2 ]]
}

# A scheduler crash mid-sweep: once experiment ID has N completed trials
# (within TIMEOUT_S, default 90), kill -9 the scheduler and restart it on
# the same port and database.
hf_crash_scheduler_after() {  # ID N [TIMEOUT_S]
  hf_wait_for "${3:-90}" hf_exp_completed_at_least "$1" "$2" \
    || hf_fail "$2 trials did not complete in ${3:-90} s"
  hf_stop_scheduler KILL
  hf_restart_scheduler
  hf_log "scheduler restarted with $(hf_get "/api/v1/experiments/$1" | jq .counts.completed) trials completed"
}

hf_jq_assert() {  # FILTER MESSAGE, JSON on stdin
  local filter=$1 msg=$2 in
  in=$(cat)
  if jq -e "$filter" >/dev/null 2>&1 <<<"$in"; then
    hf_log "ok: $msg"
  else
    hf_log "FAIL: $msg"
    hf_log "  filter: $filter"
    hf_log "  input:  $(head -c 2000 <<<"$in")"
    exit 1
  fi
}

hf_assert_eq() {  # ACTUAL EXPECTED MESSAGE
  if [[ $1 == "$2" ]]; then hf_log "ok: $3"; else hf_fail "$3: got '$1', expected '$2'"; fi
}

hf_cli() { "$HF_BIN/hyperfarm" --url "$HF_URL" "$@"; }

# TRIAL: a 2-worker hyperfarm-train trial (hf_train_experiment NAME 2 ...,
# 2 epochs) COMPLETED with one rank started on agent a1 and one on a2
# (their logs: the trial's ranks may be cleared once it ends), rank 0 ran
# sync data parallel over 2 ranks with the tcp backend, and reported
# val_acc for epochs 1 and 2.
hf_assert_gang_trial() {
  local t=$1 trial n1 n2 epochs
  trial=$(hf_get "/api/v1/trials/$t")
  jq -e '.state == "COMPLETED"' >/dev/null <<<"$trial" ||
    hf_fail "trial $t ended $(jq -r .state <<<"$trial"): $(hf_get "/api/v1/trials/$t/logs?limit=50" | jq -r '.logs[].line' | tail -20)"
  hf_log "ok: 2-worker trial $t COMPLETED"
  n1=$(grep -c "trial $t attempt 1 .*started" "$HF_TMP/agent-a1.log" || true)
  n2=$(grep -c "trial $t attempt 1 .*started" "$HF_TMP/agent-a2.log" || true)
  (( n1 == 1 && n2 == 1 )) || hf_fail "expected one rank started on each of a1 and a2, got a1=$n1 a2=$n2"
  hf_log "ok: one rank on a1, one on a2"
  hf_get "/api/v1/trials/$t/logs?limit=2000" | jq -r '.logs[].line' >"$HF_TMP/trial.log"
  grep -q "sync data parallel: 2 ranks.*backend tcp" "$HF_TMP/trial.log" ||
    hf_fail "rank 0's log does not show a 2-rank tcp run: $(tail -5 "$HF_TMP/trial.log")"
  hf_log "ok: rank 0 ran sync data parallel over 2 ranks, backend tcp"
  epochs=$(hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=100" | jq -r '[.metrics[].epoch] | sort | map(tostring) | join(",")')
  hf_assert_eq "$epochs" "1,2" "val_acc for epochs 1 and 2 (rank 0 reports once per epoch)"
}

# NAME WORKERS MAX_RESTARTS FLAGS...: print an experiment of one trial of
# `hyperfarm-train FLAGS` (no hyperparameters); with WORKERS > 1 it is
# gang-placed, one slot per worker, sync data parallel over tcp.
hf_train_experiment() {
  local name=$1 workers=$2 restarts=$3
  shift 3
  jq -n --args '$ARGS.positional' -- hyperfarm-train "$@" |
    jq --arg n "$name" --argjson w "$workers" --argjson r "$restarts" '{
      name: $n, objective: {metric: "val_acc", goal: "maximize"},
      searcher: {name: "random", max_trials: 1, seed: 1}, hyperparameters: {},
      trial: ({command: ., max_restarts: $r} + if $w > 1 then
        {resources: {workers: $w, slots_per_worker: 1}, distributed: {mode: "sync", backend: "tcp"}} else {} end)}'
}

# HF_WANT = the last metric line carrying val_acc that a hyperfarm-train run
# printed to OUT_FILE (the JSON after "HYPERFARM "): a reference run's result.
hf_reference_metrics() {  # OUT_FILE
  HF_WANT=$(grep '^HYPERFARM .*"val_acc"' "$1" | tail -1 | sed 's/^HYPERFARM //')
  [[ -n $HF_WANT ]] || hf_fail "reference run $1 reported no val_acc"
}

# Trial TRIAL's val_acc, val_loss and train_loss at EPOCH equal those of
# WANT (JSON) within REL * (1 + |want|); WHAT names the run in a failure.
# HF_GOT = the trial's metrics at EPOCH ({name: value}).
hf_assert_metrics_equal() {  # TRIAL EPOCH WANT REL WHAT
  local m a b
  HF_GOT=$(hf_get "/api/v1/trials/$1/metrics?limit=1000" | jq -c --argjson e "$2" \
    '[.metrics[] | select(.epoch == $e)] | map({(.name): .value}) | add')
  for m in val_acc val_loss train_loss; do
    a=$(jq -r --arg m "$m" '.[$m]' <<<"$HF_GOT")
    b=$(jq -r --arg m "$m" '.[$m]' <<<"$3")
    jq -ne --argjson a "$a" --argjson b "$b" --argjson r "$4" '($a - $b) | fabs <= $r * (1 + ($b | fabs))' >/dev/null \
      || hf_fail "$5: epoch $2 $m is $a, the reference run gives $b"
  done
}
