#!/usr/bin/env bash
# bench/logsearch_stall.sh — does a log search stall anything else? (issue
# 27, docs/protocol.md "Log search"). A real scheduler with a token file
# (4 users, an agent token) and a trial of LINES lines of 200 'a's
# (written with the sqlite3 shell while the scheduler is stopped, as
# bench/logsearch.sh does). /healthz and an agent heartbeat are timed back
# to back for DURATION s idle, then while 8 worst-case regex searches
# (2 per user; a polynomial pattern under the match limit, so each runs
# its whole budget) run; printed: p50/p99/max of each, idle beside busy,
# and how long each search took to answer or be refused. Goal: p99 under
# 100 ms, every search answered within 11 s.
#   HF_BIN=$PWD/bin bash bench/logsearch_stall.sh [LINES] [DURATION]   (default 200000 12)
# Peer: the same run against a scheduler built from the code before
# issue 27 (HF_BIN=/path/to/old/bin), where searches ran on the HTTP threads.
source "$(dirname "$0")/../tests/system/lib.sh"
hf_need hyperfarm-scheduler
command -v sqlite3 >/dev/null || { echo "bench/logsearch_stall.sh: needs the sqlite3 shell" >&2; exit 1; }
hf_setup
LINES=${1:-200000}
DUR=${2:-12}
AGENT=agent-token-0123456789abcdef
: >"$HF_TMP/tokens"
for u in u1 u2 u3 u4; do printf 'user:%s %s-token-0123456789abcdef\n' "$u" "$u" >>"$HF_TMP/tokens"; done
printf 'agent:%s\n' "$AGENT" >>"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
HF_SCHED_ARGS="--token-file $HF_TMP/tokens --agent-timeout 60000"
hf_start_scheduler
exp=$(jq -n '{name: "stall", objective: {metric: "loss", goal: "minimize"},
  searcher: {name: "random", max_trials: 1}, hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: ["/bin/true"]}}')
EXP=$(curl -fsS -m 10 -H "Authorization: Bearer u1-token-0123456789abcdef" -H 'Content-Type: application/json' \
  --data-binary "$exp" "$HF_URL/api/v1/experiments" | jq .id)
hf_stop_scheduler
sqlite3 "$HF_DB" >/dev/null <<SQL
PRAGMA journal_mode=WAL;
DELETE FROM trials WHERE experiment_id=$EXP;
INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES (1000, $EXP, 0, 'COMPLETED', '{"x":0.5}', 0, 0);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < $LINES - 1)
INSERT INTO logs(trial_id,attempt,stream,line,time) SELECT 1000, 1, 'stdout', printf('%.200c', 'a'), i FROM n;
COMMIT;
SQL
hf_restart_scheduler
AG=$(curl -fsS -m 10 -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \
  --data-binary '{"name":"probe","slots":1}' "$HF_URL/api/v1/agents" | jq .id)

probe() {  # OUT SECONDS
  local out=$1 end=$(( $(date +%s) + $2 ))
  : >"$out"
  while (( $(date +%s) < end )); do
    curl -sS -o /dev/null -m 30 -w 'healthz %{http_code} %{time_total}\n' "$HF_URL/healthz" >>"$out" 2>/dev/null \
      || echo "healthz 000 30" >>"$out"
    curl -sS -o /dev/null -m 30 -w 'heartbeat %{http_code} %{time_total}\n' -H "Authorization: Bearer $AGENT" \
      -H 'Content-Type: application/json' --data-binary '{}' "$HF_URL/api/v1/agents/$AG/heartbeat" \
      >>"$out" 2>/dev/null || echo "heartbeat 000 30" >>"$out"
    sleep 0.02
  done
}
pct() {  # FILE WHAT: "n p50 p99 max" in ms
  awk -v w="$2" '$1 == w { print $3 * 1000 }' "$1" | sort -n | awk '{ v[NR] = $1 } END {
    if (!NR) { print "0 - - -"; exit }
    i50 = int(NR * 0.50 + 0.999); i99 = int(NR * 0.99 + 0.999); if (i99 > NR) i99 = NR
    printf "%d %.1f %.1f %.1f\n", NR, v[i50], v[i99], v[NR] }'
}

echo "scheduler $HF_BIN/hyperfarm-scheduler; trial of $LINES lines x 200 'a'; $(nproc) CPUs"
probe "$HF_TMP/idle.txt" "$DUR"
PAT='a.*a.*a.*[0-9]'
pids=()
for i in 0 1 2 3 4 5 6 7; do
  u=u$(( i % 4 + 1 ))
  curl -sS -G -o "$HF_TMP/s$i.body" -w '%{http_code} %{time_total}\n' -m 120 \
    -H "Authorization: Bearer $u-token-0123456789abcdef" --data-urlencode "grep=$PAT" --data regex=1 \
    "$HF_URL/api/v1/trials/1000/logs" >"$HF_TMP/s$i" 2>/dev/null &
  pids+=($!)
done
probe "$HF_TMP/busy.txt" "$DUR"
for p in "${pids[@]}"; do wait "$p" || true; done
printf '%-10s %-6s %6s %9s %9s %9s\n' probe state n p50_ms p99_ms max_ms
for w in healthz heartbeat; do
  read -r n a b c <<<"$(pct "$HF_TMP/idle.txt" $w)"; printf '%-10s %-6s %6s %9s %9s %9s\n' $w idle "$n" "$a" "$b" "$c"
  read -r n a b c <<<"$(pct "$HF_TMP/busy.txt" $w)"; printf '%-10s %-6s %6s %9s %9s %9s\n' $w busy "$n" "$a" "$b" "$c"
done
for i in 0 1 2 3 4 5 6 7; do
  read -r st secs <"$HF_TMP/s$i"
  printf "search %d (u%d) '%s': %s in %.2f s %s\n" "$i" $(( i % 4 + 1 )) "$PAT" "$st" "$secs" \
    "$(jq -c '{truncated, scanned, error}' "$HF_TMP/s$i.body" 2>/dev/null)"
done
