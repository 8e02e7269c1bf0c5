#!/usr/bin/env bash
# test_fault_flood.sh — a trial that floods stdout.
#
# The fake trial first writes $FLOOD_MB MiB (default 1500) of 80-byte log
# lines as fast as a pipe takes them, then one 20 MB line without a newline,
# then trains 2 epochs normally. While it runs the test samples, every
# 0.2 s: the agent's and the scheduler's RSS, and /healthz plus
# GET /api/v1/experiments with a 2 s limit. It must hold that
#   - the agent's RSS stays under $AGENT_RSS_MB (default 100) MiB: lines are
#     bounded and logs are shipped or dropped, never buffered without limit;
#   - the scheduler's RSS stays under 256 MiB and it answers every probe;
#   - the database stays small (log lines bounded in count per trial);
#   - the trial completes and both epochs' metric lines still arrive.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

FLOOD_MB=${FLOOD_MB:-1500}
AGENT_RSS_MB=${AGENT_RSS_MB:-100}
ft_start_scheduler
ft_start_agent a1 1
exp=$(ft_submit "$(ft_experiment flood 1 1 0 --flood-bytes $((FLOOD_MB << 20)) --long-line 20000000 --epochs 2 --sleep-ms 200)")
ft_log "experiment $exp: trial floods ${FLOOD_MB} MiB of stdout"

max_agent=0; max_sched=0; probe_fail=0; probes=0; max_ms=0; saw_running=0
deadline=$(( $(date +%s) + 90 ))
while :; do
  a=$(ft_rss "${AGENT_PID[a1]}"); s=$(ft_rss "$SCHED_PID")
  (( a > max_agent )) && max_agent=$a
  (( s > max_sched )) && max_sched=$s
  kill -0 "${AGENT_PID[a1]}" 2>/dev/null || ft_fail "the agent died during the flood"
  kill -0 "$SCHED_PID" 2>/dev/null || ft_fail "the scheduler died during the flood"
  t0=${EPOCHREALTIME/[,.]/}
  if curl -sf -m 2 "$FT_URL/healthz" >/dev/null && st=$(curl -sf -m 2 "$FT_URL/api/v1/experiments/$exp"); then
    ms=$(( (${EPOCHREALTIME/[,.]/} - t0) / 1000 )); (( ms > max_ms )) && max_ms=$ms
    state=$(jq -r '.counts.completed' <<<"$st")
    [[ $(jq -r '.counts.running' <<<"$st") != 0 ]] && saw_running=1
    [[ $state == 1 ]] && break
  else
    probe_fail=$((probe_fail + 1))
  fi
  probes=$((probes + 1))
  (( $(date +%s) > deadline )) && ft_fail "the flooding trial did not complete in 90 s (agent RSS max ${max_agent} kB)"
  sleep 0.2
done
ft_log "flood done: agent RSS max $((max_agent / 1024)) MiB, scheduler RSS max $((max_sched / 1024)) MiB, $probes probes, $probe_fail failed, slowest $max_ms ms"
(( probe_fail == 0 )) || ft_fail "$probe_fail of $probes API probes failed or took > 2 s during the flood"
(( max_agent < AGENT_RSS_MB * 1024 )) || ft_fail "agent RSS reached $((max_agent / 1024)) MiB (bound $AGENT_RSS_MB MiB)"
(( max_sched < 256 * 1024 )) || ft_fail "scheduler RSS reached $((max_sched / 1024)) MiB"
tid=$(ft_trials "$exp" | jq -r '.trials[0].id')
ft_get "/api/v1/trials/$tid" | jq -e '.state == "COMPLETED"' >/dev/null || ft_fail "trial $tid did not complete"
steps=$(ft_get "/api/v1/trials/$tid/metrics?name=val_acc&limit=1000" | jq -c '[.metrics[].step] | unique')
[[ $steps == "[100,200]" ]] || ft_fail "metric lines after the flood were lost: val_acc steps $steps"
# Page through the stored log (100000 rows a page, at most 20 pages).
nlogs=0; longest=0; after=0
for ((pg = 0; ; pg++)); do
  (( pg < 20 )) || ft_fail "more than 2,000,000 log rows stored for one trial: logs are not bounded per trial"
  page=$(ft_get "/api/v1/trials/$tid/logs?after=$after&limit=100000")
  n=$(jq '.logs | length' <<<"$page")
  (( n > 0 )) || break
  nlogs=$((nlogs + n))
  l=$(jq '[.logs[].line | length] | max' <<<"$page"); (( l > longest )) && longest=$l
  after=$(jq '.next' <<<"$page")
done
dbsize=$(du -sk "$FT_DIR" --exclude=work | cut -f1)
ft_log "stored: $nlogs log rows, longest line $longest bytes, database directory $((dbsize / 1024)) MiB"
(( longest <= 65536 )) || ft_fail "a $longest-byte log line was stored (lines must be bounded)"
(( dbsize < FLOOD_MB * 1024 / 2 )) || ft_fail "the database grew to $((dbsize / 1024)) MiB: logs are not bounded per trial"
ft_log "PASS: flood of ${FLOOD_MB} MiB: agent and scheduler bounded, API served, metrics kept"
