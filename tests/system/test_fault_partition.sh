#!/usr/bin/env bash
# test_fault_partition.sh — a network partition between agent and scheduler.
#
# Agent a1 talks to the scheduler through tests/system/fault_proxy.py;
# SIGSTOP on the proxy cuts the link (bytes silently stop, as on a dead
# network), SIGCONT heals it. Users still reach the scheduler directly.
#
# A. Short partition (6 s, under the scheduler's 10 s agent timeout): the
#    agent keeps its trial running (same pid before and after), buffers its
#    metrics, and delivers them when the link returns; the trial completes
#    with no restart and every epoch's val_acc present; never two copies.
# B. Long partition (until the trial has moved, then 3 s more; > the agent timeout): the scheduler declares
#    a1 LOST and requeues its trial, which agent a2 (direct link, shared
#    working directory) resumes from the checkpoint. When the link returns
#    a1 must reconcile: within 10 s its stale copy is gone (so exactly one
#    process runs the trial), a1 is back, and the trial completes.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

ft_start_scheduler
PPORT=$(ft_port)
/usr/bin/python3 "$FT_ROOT/tests/system/fault_proxy.py" "$PPORT" "$FT_PORT" >>"$FT_DIR/proxy.log" 2>&1 &
PROXY=$!; disown "$PROXY"; FT_PIDS+=("$PROXY")
sleep 0.3
FT_AGENT_URL=http://127.0.0.1:$PPORT ft_start_agent a1 1
ft_wait 10 "a1 registered through the proxy" bash -c "curl -sf '$FT_URL/api/v1/agents' | jq -e '[.agents[] | select(.name == \"a1\")] | length == 1' >/dev/null"

running_on() {   # experiment -> true when its first trial is RUNNING
  curl -sf "$FT_URL/api/v1/experiments/$1/trials" | jq -e '.trials[0].state == "RUNNING"' >/dev/null
}
max_step() { curl -sf "$FT_URL/api/v1/trials/$1/metrics?name=val_acc&limit=10000" | jq '[.metrics[].step] | max // 0'; }

# ---- A: short partition ----
ft_watch_doubles
expA=$(ft_submit "$(ft_experiment partA 1 1 1 --epochs 16 --sleep-ms 500)")
ft_wait 20 "A: trial running" running_on "$expA"
tA=$(ft_trials "$expA" | jq -r '.trials[0].id')
ft_wait 20 "A: epoch 2 reported" bash -c "(( \$(curl -sf '$FT_URL/api/v1/trials/$tA/metrics?name=val_acc' | jq '[.metrics[].step] | max // 0') >= 200 ))"
read -r pidA _ <<<"$(ft_trial_procs | head -1)"
ft_log "A: cutting the link for 6 s (trial $tA, pid $pidA, at step $(max_step "$tA"))"
kill -STOP "$PROXY"
sleep 6
during=$(max_step "$tA")
kill -CONT "$PROXY"
ft_log "A: link back; the API showed step $during during the partition"
kill -0 "$pidA" 2>/dev/null || ft_fail "A: the trial process died during a short partition"
ft_wait 40 "A: trial COMPLETED" bash -c "curl -sf '$FT_URL/api/v1/trials/$tA' | jq -e '.state == \"COMPLETED\"' >/dev/null"
tr=$(ft_get "/api/v1/trials/$tA")
jq -e '.restarts == 0' <<<"$tr" >/dev/null || ft_fail "A: the trial was restarted by a 6 s partition: $(jq -c '{restarts, agent}' <<<"$tr")"
n=$(ft_get "/api/v1/trials/$tA/metrics?name=val_acc&limit=10000" | jq '[.metrics[].step] | unique | length')
[[ $n == 16 ]] || ft_fail "A: $n of 16 epochs' val_acc arrived (metrics buffered during the partition lost)"
ft_check_doubles || ft_fail "A: a trial ran twice at once"
ft_log "A: PASS: trial kept running through the partition, all 16 epochs delivered, no restart"

# ---- B: long partition ----
expB=$(ft_submit "$(ft_experiment partB 1 1 2 --epochs 60 --sleep-ms 500)")
ft_wait 20 "B: trial running on a1" running_on "$expB"
tB=$(ft_trials "$expB" | jq -r '.trials[0].id')
onB=$(ft_get "/api/v1/trials/$tB" | jq -r .agent)
[[ $onB == a1 ]] || ft_fail "B: the trial runs on '$onB', but a1 is the only agent"
ft_start_agent a2 1      # idle, direct link: where the requeued trial can go
ft_wait 10 "a2 registered" bash -c "curl -sf '$FT_URL/api/v1/agents' | jq -e '[.agents[] | select(.name == \"a2\")] | length == 1' >/dev/null"
ft_log "B: cutting a1's link (trial $tB)"
kill -STOP "$PROXY"
ft_wait 30 "B: a1 declared LOST and the trial requeued onto a2" bash -c \
  "curl -sf '$FT_URL/api/v1/trials/$tB' | jq -e '.agent == \"a2\" and .state == \"RUNNING\"' >/dev/null"
ft_log "B: the trial runs on a2 now; copies alive: $(ft_trial_procs | awk -v t="$tB" '$2 == t' | wc -l)"
sleep 3
kill -CONT "$PROXY"
t_heal=$(date +%s)
one_copy() { [[ $(ft_trial_procs | awk -v t="$tB" '$2 == t' | wc -l) == 1 ]]; }
ft_wait 10 "B: a1's stale copy stopped after the link returned" one_copy
ft_log "B: one copy left $(( $(date +%s) - t_heal )) s after healing"
ft_wait 20 "B: a1 back" bash -c "curl -sf '$FT_URL/api/v1/agents' | jq -e '.agents[] | select(.name == \"a1\") | .state != \"LOST\"' >/dev/null"
ft_wait 40 "B: trial COMPLETED" bash -c "curl -sf '$FT_URL/api/v1/trials/$tB' | jq -e '.state == \"COMPLETED\"' >/dev/null"
ft_log "PASS: short partition rides through; long partition requeues, the returning agent reconciles"
