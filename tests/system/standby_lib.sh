# tests/system/standby_lib.sh — helpers of the loopback tests of a primary
# and its standby (test_scheduler_standby.sh, test_scheduler_standby_spool.sh),
# sourced after lib.sh. The caller sets AT (an admin token), COMMON (the
# arguments every scheduler gets) and HF_TMP (hf_setup).

# BASE TOKEN METHOD PATH [BODY]: sets HF_STATUS and HF_BODY.
call() {
  local base=$1 tok=$2 method=$3 path=$4 body=${5-}
  local args=(-sS -m 10 -o "$HF_TMP/body" -w '%{http_code}' -X "$method" -H "Authorization: Bearer $tok")
  [[ -n $body ]] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
  HF_STATUS=$(curl "${args[@]}" "$base$path") || HF_STATUS=000
  HF_BODY=$(cat "$HF_TMP/body" 2>/dev/null || true)
}
repl() { curl -fsS -m 3 -H "Authorization: Bearer $AT" "$1/api/v1/replication"; }
role_is() { [[ $(repl "$1" | jq -r "\"\(.role) \(.term)\"") == "$2" ]]; }

start_sched() {  # NAME PORT DB ARGS...: sets PID_<NAME>
  local name=$1 port=$2 db=$3; shift 3
  "$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:$port" --db "$db" "${COMMON[@]}" "$@" \
    >>"$HF_TMP/$name.log" 2>&1 &
  printf -v "PID_$name" %s "$!"
  hf_track "$!"
  hf_wait_http "http://127.0.0.1:$port/healthz" 30 || hf_fail "$name did not answer /healthz in 30 s"
  hf_log "$name pid $! on port $port: $*"
}
