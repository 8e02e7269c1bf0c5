#!/usr/bin/env bash
# test_eco_trials.sh — "any program is a trial" (issue 8.1), through a real
# scheduler and agent, for the three examples in experiments/examples/:
#
#   python  pytorch_fmnist.py  the user's own PyTorch script (Debian's
#                              python3-torch, CPU), no hyperfarm library
#   c       c_trial.c          built here with common/hf_client.h
#   shell   shell_trial.sh     plain bash
#
# Each runs as the single trial of its own experiment (3 epochs, a pause
# after each epoch so the test can act between epochs). Once epoch 1's
# checkpoint is on disk, the trial's process is SIGKILLed (a crash: no
# chance to save anything). The agent reports the exit, the
# scheduler requeues the trial (max_restarts), the agent starts attempt 2
# in the same checkpoint directory, and the trial must resume: the test
# checks that
#   - the experiment completes, the trial is COMPLETED with restarts = 1;
#   - val_acc arrives for epochs 1, 2, 3 and epoch 1 exactly once (the
#     restart did not start over) and the log says it resumed;
#   - for python and C, the final metrics equal those of an uninterrupted
#     run of the same program outside hyperfarm (same seed, checkpoints
#     carry the RNG and optimizer state): resuming changes nothing.
#
# PyTorch part: 6000 training and 2000 validation images, MLP 784-64-10,
# 1 thread. If /usr/bin/python3 cannot import torch and numpy the python
# part is skipped with a loud message (the C and shell parts still run).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)
ex=$root/experiments/examples
EPOCHS=3

langs=(c shell)
if /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
  langs=(python c shell)
else
  hf_log "SKIP python part: /usr/bin/python3 cannot import torch and numpy (apt-get install python3-torch)"
fi

cc -std=c11 -O2 -Wall -Wextra -Werror -I"$root/common" -o "$HF_TMP/c_trial" "$ex/c_trial.c" -lm \
  || hf_fail "c_trial.c does not build against common/hf_client.h"

declare -A cmd hp
cmd[python]=$(jq -cn --arg s "$ex/pytorch_fmnist.py" '["/usr/bin/python3", $s]')
hp[python]='{"train_size": 6000, "val_size": 2000, "hidden": 64, "lr": 0.05, "batch_size": 64,
             "optimizer": "sgd", "threads": 1, "seed": 3, "epoch_sleep": 4}'
cmd[c]=$(jq -cn --arg s "$HF_TMP/c_trial" '[$s]')
hp[c]='{"lr": 0.2, "l2": 0.001, "batch_size": 32, "sleep_ms": 4000}'
cmd[shell]=$(jq -cn --arg s "$ex/shell_trial.sh" '["bash", $s]')
hp[shell]='{"x": 0.25, "lr": 0.5, "sleep_ms": 3000}'

# Uninterrupted reference runs, outside hyperfarm, started now so they
# overlap with the sweep.
declare -A ref_pid
for l in python c; do
  [[ " ${langs[*]} " == *" $l "* ]] || continue
  mkdir -p "$HF_TMP/ref-$l"
  argv=$(jq -r '.[]' <<<"${cmd[$l]}" | tr '\n' ' ')
  # the reference does not pause between epochs
  h=$(jq -c 'del(.epoch_sleep, .sleep_ms)' <<<"${hp[$l]}")
  ( cd "$HF_TMP/ref-$l" && HYPERFARM_CHECKPOINT_DIR=$HF_TMP/ref-$l HYPERFARM_MAX_EPOCHS=$EPOCHS \
      HYPERFARM_HPARAMS=$h exec $argv >"$HF_TMP/ref-$l/out" 2>&1 ) &
  ref_pid[$l]=$!
  hf_track "${ref_pid[$l]}"
done

hf_start_scheduler
hf_start_agent a1 --slots 3

declare -A exp trial
for l in "${langs[@]}"; do
  body=$(jq -n --arg n "eco-$l" --argjson c "${cmd[$l]}" --argjson h "${hp[$l]}" --argjson e "$EPOCHS" '{
    name: $n, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1, max_epochs: $e, seed: 1},
    hyperparameters: $h,
    trial: {command: $c, max_restarts: 2, grace_period_ms: 5000}}')
  exp[$l]=$(hf_submit "$body")
  hf_log "$l: experiment ${exp[$l]}"
done

trial_id() { hf_get "/api/v1/experiments/$1/trials" | jq -er '.trials[0].id'; }
# epochs (sorted, with repeats) for which val_acc reached the scheduler
epochs_seen() {
  hf_get "/api/v1/trials/$1/metrics?name=val_acc&limit=1000" | jq -r '[.metrics[].epoch] | sort | map(tostring) | join(",")'
}
has_epoch1() { [[ $(epochs_seen "$1") == 1* ]]; }
# The trial's process-group leader: its working directory is the trial
# directory the agent made, and it leads its own process group.
# One find over /proc, not a readlink per process: on a loaded machine the
# per-process scan took seconds, and the trial could end before the kill.
trial_leader() {
  local dir=$1 f pid rest
  for f in $(find /proc -mindepth 2 -maxdepth 2 -name cwd -lname "$dir" 2>/dev/null); do
    pid=${f#/proc/}; pid=${pid%/cwd}
    [[ $pid =~ ^[0-9]+$ ]] || continue
    rest=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
    [[ $(cut -d' ' -f3 <<<"$rest") == "$pid" ]] && { echo "$pid"; return 0; }
  done
  return 1
}

for l in "${langs[@]}"; do
  hf_wait_for 60 trial_id "${exp[$l]}" || hf_fail "$l: no trial created"
  trial[$l]=$(trial_id "${exp[$l]}")
done
# Kill each trial as soon as its first checkpoint is on disk (all three run
# at once; the trial then pauses for epoch_sleep/sleep_ms before epoch 2).
# Watching the file, not the API, keeps the timing independent of how fast
# metrics travel to the scheduler.
has_ckpt() { compgen -G "$1/checkpoints/*" | grep -qvE '\.tmp(\.[0-9]+)?$'; }
declare -A killed=()
nkilled=0
end=$(( $(date +%s) + 60 ))
while (( nkilled < ${#langs[@]} )); do
  (( $(date +%s) < end )) || hf_fail "no checkpoint within 60 s for all of: ${langs[*]} (killed: $nkilled)"
  for l in "${langs[@]}"; do
    [[ -z ${killed[$l]:-} ]] || continue
    t=${trial[$l]}
    dir=$HF_TMP/agent-a1/experiments/${exp[$l]}/trials/$t
    has_ckpt "$dir" || continue
    pid=$(trial_leader "$dir") || hf_fail "$l: no process runs in $dir (finished before the kill?)"
    kill -KILL "$pid"
    killed[$l]=$pid
    nkilled=$((nkilled + 1))
    hf_log "$l: trial $t: SIGKILLed pid $pid after its first checkpoint ($(ls "$dir/checkpoints" | tr '\n' ' '))"
  done
  sleep 0.05
done

for l in "${langs[@]}"; do
  hf_wait_experiment "${exp[$l]}" 90
  t=${trial[$l]}
  hf_get "/api/v1/trials/$t" | hf_jq_assert '.state == "COMPLETED" and .restarts == 1' \
    "$l: trial COMPLETED after 1 restart"
  hf_assert_eq "$(epochs_seen "$t")" "1,2,3" "$l: val_acc for epochs 1,2,3, epoch 1 once (resumed, not restarted)"
  hf_get "/api/v1/trials/$t/logs?limit=1000" | hf_jq_assert '[.logs[].line | select(test("resuming"))] | length == 1' \
    "$l: the second attempt says it resumed"
  hf_get "/api/v1/trials/$t" | hf_jq_assert '[.checkpoints[]?] | length >= 1' "$l: checkpoints registered"
done

# Resuming changes nothing: final metrics equal an uninterrupted run's.
for l in "${!ref_pid[@]}"; do
  wait "${ref_pid[$l]}" || hf_fail "$l: reference run failed: $(tail -5 "$HF_TMP/ref-$l/out")"
  hf_reference_metrics "$HF_TMP/ref-$l/out"
  hf_assert_metrics_equal "${trial[$l]}" "$EPOCHS" "$HF_WANT" 1e-9 "$l after kill+resume (reference: an uninterrupted run)"
  hf_log "ok: $l: epoch $EPOCHS metrics after kill+resume equal the uninterrupted run's ($(jq -r .val_acc <<<"$HF_WANT"))"
done
hf_log "PASS (${langs[*]})"
