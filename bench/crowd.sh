#!/usr/bin/env bash
# bench/crowd.sh — issue 27's "new-connection /healthz latency while 8
# addresses x 1,100 connections trickle: goal under 100 ms" (not a test: it
# prints figures). A scheduler with a token file on loopback; bench/crowd
# measures new connections from 127.0.0.1 — /healthz, a user's GET, an
# agent's heartbeat, each on a fresh connection — first idle, then while
# 127.0.0.2-9 each hold 1,100 connections that trickle one header byte
# every 3 s and reconnect whenever the scheduler closes them
# (docs/scheduler.md "Connections"). Prints p50/p99/max of both phases in
# the same run, the ratio of the p99s, and the verdict against 100 ms.
#   HF_BIN=$PWD/bin bash bench/crowd.sh [PER_ADDR] [CROWD_S]   (1100, 20)
source "$(dirname "$0")/../tests/system/lib.sh"
hf_need hyperfarm-scheduler bench/crowd
hf_setup
PER_ADDR=${1:-1100}
CROWD_S=${2:-20}
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
printf 'user:alice bench-user-token-1\nagent:a1 bench-agent-token-1\n' >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
hf_start_scheduler --token-file "$HF_TMP/tokens" --agent-timeout 600000
AG=$(curl -sS -m 10 -H 'Authorization: Bearer bench-agent-token-1' -H 'Content-Type: application/json' \
  --data-binary '{"name": "a1", "slots": 1, "host": "127.0.0.1", "version": "bench"}' "$HF_URL/api/v1/agents" | jq -r .id)
"$HF_BIN/bench/crowd" --to "127.0.0.1:$HF_PORT" --addrs 8 --per-addr "$PER_ADDR" --trickle-ms 3000 \
  --idle-s 5 --crowd-s "$CROWD_S" --token bench-user-token-1 --agent-token bench-agent-token-1 --agent-id "$AG" \
  | tee "$HF_TMP/out"
p99() { awk -v ph="$1" -v k="$2" '$1 == ph && $2 == k { for (i = 3; i <= NF; i++) if ($i ~ /^p99=/) { sub("p99=", "", $i); print $i } }' "$HF_TMP/out"; }
for k in healthz user-get heartbeat; do
  idle=$(p99 idle "$k"); crowd=$(p99 crowd "$k")
  [[ -n $idle && -n $crowd ]] || { echo "crowd: no $k figures"; continue; }
  verdict=$(awk -v c="$crowd" 'BEGIN { print (c + 0 < 100 && c >= 0) ? "meets" : "misses" }')
  printf 'crowd: new-connection %-9s p99 idle %s ms, under the crowd %s ms (ratio %s): %s the 100 ms target\n' \
    "$k" "$idle" "$crowd" "$(awk -v a="$idle" -v b="$crowd" 'BEGIN { printf "%.1f", (a > 0 ? b / a : 0) }')" "$verdict"
done
grep -q '^crowd .*fail=[1-9]' "$HF_TMP/out" && echo "crowd: some newcomers got no answer (see above)"
hf_alive "$HF_SCHED_PID" || hf_fail "the scheduler died"
