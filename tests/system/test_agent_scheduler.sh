#!/usr/bin/env bash
# test_agent_scheduler.sh — the real agent against the real scheduler.
#
#   A. trial contract: a fake_trial sweep (2 trials, 2 slots) completes; each
#      trial saw HYPERFARM_* from its assignment, HYPERFARM_CHECKPOINT_DIR =
#      <agent workdir>/experiments/E/trials/T/checkpoints, its cwd one level
#      up, CUDA_VISIBLE_DEVICES empty (CPU trial), PATH starting with the
#      agent's own directory; metrics, logs and checkpoints reach the API.
#   B. "hyperfarm-train" as argv[0] resolves to the sibling program.
#   C. the scheduler frozen (SIGSTOP, 3 s): the trial keeps its pid,
#      completes with no restart, every epoch reported exactly once.
#   D. the scheduler SIGKILLed and restarted on the same port and database:
#      the agent keeps the trial running (same pid), re-registers listing it,
#      the scheduler re-adopts it (no restart, never two copies), it completes.
#   E. kill over the API: control.json says should_stop, the trial saves its
#      checkpoint on SIGTERM, the trial ends CANCELED.
#   F. a plain shell-script trial (experiments/examples/shell_trial.sh).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train tests/fake_trial
hf_setup
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FAKE=$HF_BIN/tests/fake_trial

hf_start_scheduler
hf_start_agent a1 --slots 2 --gpus none --grace-ms 5000
WORK=$HF_TMP/agent-a1

experiment() {  # NAME MAX_TRIALS CONC HPARAMS_JSON ARGV_JSON
  jq -cn --arg name "$1" --argjson n "$2" --argjson c "$3" --argjson hp "$4" --argjson argv "$5" '{
    name: $name, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: $n, max_concurrent_trials: $c, seed: 3},
    hyperparameters: ({x: {type: "uniform", min: 0, max: 1}} + $hp),
    trial: {command: $argv, max_restarts: 0}}'
}
trial_ids() { hf_get "/api/v1/experiments/$1/trials" | jq -r '.trials[].id'; }
trial_state() { curl -fsS -m 3 "$HF_URL/api/v1/trials/$1" | jq -r .state; }
# pid of the fake_trial process running trial T (from its environment; only
# ours: other tests may run fake_trial with the same trial ids at the same time)
# Ours: the fake trial's program, running in a trial folder of this agent.
# Compared as files (-ef: device and inode), not as paths: readlink of
# /proc/PID/exe names a sandboxed process's file as seen from its own mount
# namespace, which inside a chroot (CI's fresh root) is not our path.
ours() {
  [[ $1/exe -ef $FAKE ]] || return 1
  local t
  for t in "$WORK"/experiments/*/trials/*; do [[ $1/cwd -ef $t ]] && return 0; done
  return 1
}
trial_pid() {
  local d
  for d in /proc/[0-9]*; do
    ours "$d" || continue
    tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "HYPERFARM_TRIAL_ID=$1" && { echo "${d#/proc/}"; return 0; }
  done
  return 1
}
copies() {   # number of live processes running trial T
  local d n=0
  for d in /proc/[0-9]*; do
    ours "$d" || continue
    hf_alive "${d#/proc/}" || continue
    tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx "HYPERFARM_TRIAL_ID=$1" && n=$((n + 1))
  done
  echo "$n"
}
epochs_once() {  # TRIAL N: val_acc reported for epochs 1..N, each exactly once
  hf_get "/api/v1/trials/$1/metrics?name=val_acc&limit=100000" \
    | jq -e --argjson n "$2" '[.metrics[].epoch] | sort == [range(1; $n + 1)]' >/dev/null
}

# ---------------------------------------------------------------- A
id=$(hf_submit "$(experiment contract 2 2 '{"epochs": 3, "sleep_ms": 100, "print_env": 1}' "[\"$FAKE\"]")")
hf_wait_experiment "$id" 60
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED" and .counts.completed == 2' "A: sweep completed"
for t in $(trial_ids "$id"); do
  logs=$(hf_get "/api/v1/trials/$t/logs?limit=1000" | jq -r '.logs[].line')
  ck="$WORK/experiments/$id/trials/$t/checkpoints"
  grep -qx "env HYPERFARM_CHECKPOINT_DIR=$ck" <<<"$logs" || hf_fail "A: trial $t: HYPERFARM_CHECKPOINT_DIR not $ck: $(grep CHECKPOINT <<<"$logs")"
  grep -qx "cwd $WORK/experiments/$id/trials/$t" <<<"$logs" || hf_fail "A: trial $t: wrong cwd: $(grep ^cwd <<<"$logs")"
  grep -qx "env HYPERFARM_TRIAL_ID=$t" <<<"$logs" || hf_fail "A: trial $t: HYPERFARM_TRIAL_ID missing"
  grep -qx "env HYPERFARM_EXPERIMENT_ID=$id" <<<"$logs" || hf_fail "A: trial $t: HYPERFARM_EXPERIMENT_ID missing"
  grep -q '^env HYPERFARM_HPARAMS={.*"x"' <<<"$logs" || hf_fail "A: trial $t: HYPERFARM_HPARAMS missing"
  grep -qx "env CUDA_VISIBLE_DEVICES=" <<<"$logs" || hf_fail "A: trial $t: CUDA_VISIBLE_DEVICES should be empty"
  grep -q "^env PATH=$HF_BIN:" <<<"$logs" || hf_fail "A: trial $t: PATH does not start with $HF_BIN"
  grep -qx "epoch 3 done" <<<"$logs" || hf_fail "A: trial $t: log line 'epoch 3 done' missing"
  if grep -q '^HYPERFARM {' <<<"$logs"; then hf_fail "A: metric lines should arrive as metrics, not logs"; fi
  epochs_once "$t" 3 || hf_fail "A: trial $t: val_acc of epochs 1..3 not there exactly once"
  [[ -f $ck/fake_trial.json ]] || hf_fail "A: trial $t: no checkpoint file in $ck"
  jq -e '.should_stop == false' "$WORK/experiments/$id/trials/$t/control.json" >/dev/null || hf_fail "A: control.json"
  hf_get "/api/v1/trials/$t" | hf_jq_assert '.exit_code == 0 and (.checkpoints | length) >= 1' "A: trial $t exit 0, checkpoints registered"
done
hf_get /api/v1/agents | hf_jq_assert '.agents[] | select(.name == "a1") | .slots == 2' "A: agent a1 offers 2 slots"

# ---------------------------------------------------------------- B
id=$(hf_submit "$(experiment path 1 1 '{}' '["hyperfarm-train", "--help"]')")
hf_wait_experiment "$id" 30
hf_get "/api/v1/experiments/$id/trials" | hf_jq_assert '.trials[0].state == "COMPLETED" and .trials[0].exit_code == 0' \
  "B: argv[0] hyperfarm-train found on the agent's PATH"

# ---------------------------------------------------------------- C
# 100 epochs of 200 ms: on a loaded machine the freeze may come late (the
# waits above scan /proc), and a trial that ends during the 3 s freeze
# would look as if it had died.
id=$(hf_submit "$(experiment freeze 1 1 '{"epochs": 100, "sleep_ms": 200}' "[\"$FAKE\"]")")
hf_wait_for 20 bash -c "[[ \$(curl -fsS '$HF_URL/api/v1/experiments/$id/trials' | jq -r '.trials[0].state') == RUNNING ]]" \
  || hf_fail "C: trial not running"
t=$(trial_ids "$id")
hf_wait_for 10 trial_pid "$t" || hf_fail "C: no process for trial $t"
pid=$(trial_pid "$t")
ckf=$WORK/experiments/$id/trials/$t/checkpoints/fake_trial.json
hf_wait_for 10 test -f "$ckf" || hf_fail "C: no checkpoint"
kill -STOP "$HF_SCHED_PID"
e0=$(jq .epoch "$ckf")
hf_log "C: scheduler frozen (trial $t pid $pid at epoch $e0)"
sleep 3
e1=$(jq .epoch "$ckf")
hf_alive "$pid" || { kill -CONT "$HF_SCHED_PID"; hf_fail "C: the trial died while the scheduler was frozen"; }
kill -CONT "$HF_SCHED_PID"
(( e1 >= e0 + 5 )) || hf_fail "C: the trial advanced only from epoch $e0 to $e1 in 3 s: blocked by the frozen scheduler?"
hf_wait_experiment "$id" 60
[[ $(copies "$t") == 0 ]] || hf_fail "C: trial process still there after completion: $(trial_pid "$t"; ps -ef | grep fake_tria[l])"
hf_get "/api/v1/trials/$t" | hf_jq_assert '.state == "COMPLETED" and .restarts == 0' "C: completed without restart"
epochs_once "$t" 100 || hf_fail "C: epochs 1..100 not reported exactly once"
hf_log "ok: C: trial rode through a frozen scheduler (epoch $e0 -> $e1 while frozen)"

# ---------------------------------------------------------------- D
agent_id=$(hf_get /api/v1/agents | jq '.agents[] | select(.name == "a1") | .id')
id=$(hf_submit "$(experiment restart 1 1 '{"epochs": 40, "sleep_ms": 200}' "[\"$FAKE\"]")")
hf_wait_for 20 bash -c "[[ \$(curl -fsS '$HF_URL/api/v1/experiments/$id/trials' | jq -r '.trials[0].state') == RUNNING ]]" \
  || hf_fail "D: trial not running"
t=$(trial_ids "$id")
hf_wait_for 10 trial_pid "$t" || hf_fail "D: no process for trial $t"
pid=$(trial_pid "$t")
hf_stop_scheduler KILL
hf_log "D: scheduler killed (trial $t pid $pid)"
sleep 1.5
hf_alive "$pid" || hf_fail "D: the trial died with the scheduler"
grep -q "unreachable" "$HF_TMP/agent-a1.log" || hf_fail "D: the agent did not notice the scheduler was gone"
hf_restart_scheduler
hf_wait_for 15 bash -c "grep -q 'running trials listed' '$HF_TMP/agent-a1.log' && [[ \$(grep -c 'registered with' '$HF_TMP/agent-a1.log') -ge 2 ]]" \
  || hf_fail "D: the agent did not re-register"
grep 'registered with' "$HF_TMP/agent-a1.log" | tail -1 | grep -q "as agent $agent_id (1 running" \
  || hf_fail "D: re-registration should keep id $agent_id and list 1 running trial: $(grep 'registered with' "$HF_TMP/agent-a1.log" | tail -1)"
hf_wait_experiment "$id" 40
hf_get "/api/v1/trials/$t" | hf_jq_assert '.state == "COMPLETED" and .restarts == 0' "D: re-adopted and completed, no restart"
epochs_once "$t" 40 || hf_fail "D: epochs 1..40 not reported exactly once"
[[ $(grep -c "trial $t attempt 1 started" "$HF_TMP/agent-a1.log") == 1 ]] || hf_fail "D: trial $t was started twice"
hf_log "ok: D: trial survived a scheduler crash and was re-adopted (pid $pid)"

# ---------------------------------------------------------------- E
id=$(hf_submit "$(experiment kill 1 1 '{"epochs": 1000, "sleep_ms": 100}' "[\"$FAKE\"]")")
hf_wait_for 20 bash -c "[[ \$(curl -fsS '$HF_URL/api/v1/experiments/$id/trials' | jq -r '.trials[0].state') == RUNNING ]]" \
  || hf_fail "E: trial not running"
t=$(trial_ids "$id")
hf_wait_for 10 bash -c "curl -fsS '$HF_URL/api/v1/trials/$t/metrics?name=val_acc' | jq -e '.metrics | length >= 2'" \
  || hf_fail "E: no metrics"
t0=$(date +%s%N)
hf_post "/api/v1/trials/$t/kill" >/dev/null
hf_wait_for 10 bash -c "[[ \$(curl -fsS '$HF_URL/api/v1/trials/$t' | jq -r .state) == CANCELED ]]" || hf_fail "E: trial not CANCELED"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
jq -e '.should_stop == true' "$WORK/experiments/$id/trials/$t/control.json" >/dev/null || hf_fail "E: control.json not set"
hf_wait_for 5 bash -c "curl -fsS '$HF_URL/api/v1/trials/$t/logs?limit=10000' | jq -e '[.logs[].line | select(test(\"checkpoint at epoch\"))] | length == 1'" \
  || hf_fail "E: the trial did not checkpoint on SIGTERM"
[[ $(copies "$t") == 0 ]] || hf_fail "E: trial process still alive: $(copies "$t"; ps -eo pid,stat,args | grep fake_tria[l])"
hf_log "ok: E: killed over the API in $ms ms, checkpointed on SIGTERM"

# ---------------------------------------------------------------- F
id=$(hf_submit "$(experiment shell 2 2 '{"sleep_ms": 40}' "[\"bash\", \"$ROOT/experiments/examples/shell_trial.sh\"]")")
hf_wait_experiment "$id" 40
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED" and .counts.completed == 2' "F: shell trials completed"
for t in $(trial_ids "$id"); do
  epochs_once "$t" 5 || hf_fail "F: shell trial $t: epochs 1..5 not reported exactly once"
done
hf_log "PASS"
