#!/usr/bin/env bash
# test_fault_agent_kill.sh — SIGKILL an agent mid-trial.
#
# Agent a1 (1 slot) runs a trial of the fake trial (12 epochs of 0.5 s,
# max_restarts 2). After its third epoch is reported the test SIGKILLs a1
# and the trial process with it (a dead machine: nothing is left running,
# nothing says goodbye) and starts agent a2 on the same shared working
# directory. The scheduler must notice a1 is gone (no heartbeats for
# --agent-timeout, 3 s here), requeue the trial, and place it on a2,
# where the fake trial resumes from its checkpoint: it must log "resuming
# after epoch N" with N >= 3 and never report an epoch below N again. The
# trial completes with restarts = 1; a1 is shown LOST.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

# A 3 s heartbeat timeout keeps the test short (default 10 s works, slower).
FT_SCHED_ARGS=(--agent-timeout 3000)
ft_start_scheduler
ft_start_agent a1 1
ft_watch_doubles
exp=$(ft_submit "$(ft_experiment agentkill 1 1 2 --epochs 12 --sleep-ms 500)")
ft_wait 20 "trial running on a1" bash -c "curl -sf '$FT_URL/api/v1/experiments/$exp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"
tid=$(ft_trials "$exp" | jq -r '.trials[0].id')
epoch_at_least() { curl -sf "$FT_URL/api/v1/trials/$tid/metrics?name=val_acc&limit=1000" | jq -e "([.metrics[].step] | max // 0) >= $1" >/dev/null; }
ft_wait 20 "epoch 3 reported" epoch_at_least 300

read -r tpid _ <<<"$(ft_trial_procs | head -1)"
[[ -n $tpid ]] || ft_fail "no fake_trial process found for trial $tid"
ft_log "killing agent a1 (pid ${AGENT_PID[a1]}) and its trial process $tpid"
kill -KILL "${AGENT_PID[a1]}" "$tpid"
t_kill=$(date +%s)
ft_start_agent a2 1

on_a2_done() {
  curl -sf "$FT_URL/api/v1/trials/$tid" | jq -e '.state == "COMPLETED"' >/dev/null
}
ft_wait 60 "trial $tid COMPLETED after the agent died" on_a2_done
ft_log "trial completed $(( $(date +%s) - t_kill )) s after the kill"
tr=$(ft_get "/api/v1/trials/$tid")
jq -e '.restarts == 1' <<<"$tr" >/dev/null || ft_fail "expected restarts = 1: $(jq -c '{state, restarts, agent}' <<<"$tr")"
jq -e '.agent == "a2"' <<<"$tr" >/dev/null || ft_fail "expected the trial to finish on a2: $(jq -c '{agent}' <<<"$tr")"
logs=$(ft_get "/api/v1/trials/$tid/logs?limit=100000")
resumed=$(jq -r '.logs[].line' <<<"$logs" | sed -n 's/^resuming after epoch \([0-9]*\).*/\1/p' | tail -1)
[[ -n $resumed ]] || ft_fail "the second attempt did not resume from a checkpoint (no 'resuming after epoch' log line)"
(( resumed >= 3 )) || ft_fail "resumed after epoch $resumed, expected >= 3"
ft_log "the trial resumed on a2 after epoch $resumed"
steps=$(ft_get "/api/v1/trials/$tid/metrics?name=val_acc&limit=100000" | jq -c '[.metrics[].step]')
# Epochs 1..3 (acknowledged before the kill) and resumed+1..12 must all be
# there; the epoch in flight on the dead machine may be missing.
want=$(jq -cn --argjson r "$resumed" '[range(1; 4), range($r + 1; 13)] | map(. * 100)')
jq -e --argjson w "$want" '(unique) as $u | $w - $u == []' <<<"$steps" >/dev/null ||
  ft_fail "val_acc steps $steps miss some of $want"
agents=$(ft_get /api/v1/agents)
jq -e '.agents[] | select(.name == "a1") | .state == "LOST"' <<<"$agents" >/dev/null ||
  ft_fail "a1 is not shown LOST: $(jq -c '[.agents[] | {name, state}]' <<<"$agents")"
ft_check_doubles || ft_fail "the trial ran twice at once"
ft_log "PASS: agent SIGKILL -> trial requeued to a2, resumed after epoch $resumed, completed"
