#!/usr/bin/env bash
# test_fault_leaks.sh — the daemons run a small sweep with no leak and exit
# cleanly on SIGTERM.
#
# Mode (FT_LEAK_MODE, default: auto):
#   lsan      the programs in $HF_BIN are the sanitizer build (make
#             SANITIZE=address,undefined; they link libasan): run them as
#             they are, with detect_leaks=1 and tests/lsan.supp.
#   valgrind  otherwise, when valgrind is installed: the release programs
#             under valgrind --leak-check=full; a definite or indirect leak
#             or any memory error fails.
# The sweep: 4 trials of the fake trial (3 epochs each) on one agent with 2
# slots, plus one trial killed through the API and an invalid submission,
# so error paths run too. Then SIGTERM to the agent and to the scheduler:
# each must exit 0 within 30 s, and their logs must hold no sanitizer or
# valgrind report.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

mode=${FT_LEAK_MODE:-auto}
if [[ $mode == auto ]]; then
  libs=$(ldd "$HF_BIN/hyperfarm-scheduler" 2>/dev/null)   # (not piped into grep -q: pipefail + SIGPIPE)
  if [[ $libs == *libasan* ]]; then mode=lsan
  elif command -v valgrind >/dev/null; then mode=valgrind
  else ft_skip "neither a sanitizer build in \$HF_BIN nor valgrind"; fi
fi
ft_log "leak check mode: $mode ($HF_BIN)"
wrap=()
case $mode in
  lsan)
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=23:protect_shadow_gap=0:allocator_may_return_null=1"
    export LSAN_OPTIONS="suppressions=$FT_ROOT/tests/lsan.supp:print_suppressions=0:exitcode=23"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    ;;
  valgrind)
    wrap=(valgrind -q --leak-check=full --show-leak-kinds=definite,indirect
          --errors-for-leak-kinds=definite,indirect --error-exitcode=23
          --suppressions=/dev/null --trace-children=no)
    ;;
  *) ft_fail "unknown FT_LEAK_MODE $mode" ;;
esac

# Start the daemons through the wrapper (the fault_lib starters do not wrap).
slog=$FT_DIR/scheduler.log
"${wrap[@]}" "$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:$FT_PORT" --db "$FT_DB" >"$slog" 2>&1 &
SCHED_PID=$!; FT_PIDS+=("$SCHED_PID")
up() { kill -0 "$SCHED_PID" 2>/dev/null || ft_fail "the scheduler exited at start"; ft_healthy; }
ft_wait 60 "scheduler /healthz" up
mkdir -p "$FT_DIR/work"
"${wrap[@]}" "$HF_BIN/hyperfarm-agent" --scheduler "$FT_URL" --name leak-a1 --slots 2 --gpus none \
  --workdir "$FT_DIR/work" >"$FT_DIR/agent.log" 2>&1 &
APID=$!; FT_PIDS+=("$APID")

exp=$(ft_submit "$(ft_experiment leaks 4 2 1 --epochs 3 --sleep-ms 300)")
kexp=$(ft_submit "$(ft_experiment leaks-kill 1 1 0 --epochs 1000 --sleep-ms 200)")
ft_api POST /api/v1/experiments '{"name": "bad", "searcher": {"name": "nope"}}'; b=$FT_BODY
[[ $FT_STATUS == 400 ]] || ft_fail "invalid experiment answered $FT_STATUS: $b"
ft_api GET /api/v1/trials/999999 >/dev/null
ft_api GET "/api/v1/experiments/$exp/trials" >/dev/null
ft_wait 60 "a trial of $kexp running" bash -c "curl -sf '$FT_URL/api/v1/experiments/$kexp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"
ktid=$(ft_trials "$kexp" | jq -r '.trials[0].id')
ft_api POST "/api/v1/trials/$ktid/kill" >/dev/null
ft_wait 120 "sweep COMPLETED" bash -c "curl -sf '$FT_URL/api/v1/experiments/$exp' | jq -e '.state == \"COMPLETED\"' >/dev/null"
ft_wait 30 "killed trial ended" bash -c "curl -sf '$FT_URL/api/v1/trials/$ktid' | jq -e '.state == \"CANCELED\"' >/dev/null"
curl -sf "$FT_URL/api/v1/trials/$ktid/metrics" >/dev/null
curl -sf "$FT_URL/api/v1/trials/$ktid/logs" >/dev/null
curl -sf "$FT_URL/metrics" >/dev/null

stop() {   # pid name -> exit status
  local pid=$1 name=$2 i rc
  kill -TERM "$pid"
  for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    ft_log "$name did not exit within 30 s of SIGTERM"; kill -KILL "$pid"; wait "$pid" 2>/dev/null; return 124
  fi
  wait "$pid"; rc=$?
  return $rc
}
stop "$APID" agent; arc=$?
stop "$SCHED_PID" scheduler; src=$?
ft_log "agent exit $arc, scheduler exit $src"
reports=$(grep -hE 'ERROR: (Leak|Address)Sanitizer|runtime error:|definitely lost|indirectly lost|Invalid (read|write)|uninitialised|==[0-9]+== [A-Z].*(at|by) 0x' "$FT_DIR/agent.log" "$slog" | grep -v ' 0 bytes in 0 blocks' | head -20)
if [[ -n $reports ]]; then
  echo "$reports"
  ft_fail "leak or memory-error reports from the daemons (logs above)"
fi
(( arc == 0 )) || ft_fail "the agent exited $arc on SIGTERM (23 = leak/error report, 124 = did not exit)"
(( src == 0 )) || ft_fail "the scheduler exited $src on SIGTERM (23 = leak/error report, 124 = did not exit)"
ft_log "PASS: no leaks ($mode), both daemons exited 0 on SIGTERM"
