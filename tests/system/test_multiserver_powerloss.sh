#!/usr/bin/env bash
# test_multiserver_powerloss.sh — a server loses power mid-trial and the
# trial finishes on another server without retraining finished epochs
# (issue 15.2 and 15.5, on the multi-server harness tests/system/netns_lib.sh;
# the loopback version with separate work directories is test_ckpt_travel.sh).
#
# The scheduler (its database and checkpoint store on its own disk) and
# agent server a1 (one slot); the real trainer, hyperfarm-train on
# Fashion-MNIST (6 epochs of about a second, a checkpoint every epoch),
# starts on a1; then server a2 joins. As soon as the store holds a1's
# checkpoint of epoch 2 or later, a1 is powered off (its whole pid
# namespace SIGKILLed: the trainer, the agent, its disk with every local
# checkpoint). Checks:
#   - the scheduler declares a1 LOST and the trial COMPLETES on a2, with one
#     restart;
#   - a2's agent restored the newest stored checkpoint (its log line names
#     its step), and the trainer's "resumed from ... epoch E" names the
#     epoch of that checkpoint;
#   - every epoch up to E was reported once, before the power loss; after
#     it exactly E+1..6 are reported: nothing finished was trained again;
#   - the final metrics equal an uninterrupted run of the same command
#     (the trainer resumes bit for bit: the weights that travelled are the
#     ones a1 wrote);
#   - a2 holds the checkpoint in its object cache, under its hash.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train
netns_setup

flags=(--model mlp --epochs 6 --batch-size 64 --lr 0.01 --optimizer adam --seed 5
       --limit-train 24000 --val-size 1000 --limit-test 1000 --threads 1)

# The uninterrupted run, for the weights' sake (in the background, here).
mkdir -p "$HF_TMP/ref"
( cd "$HF_TMP/ref" && HYPERFARM_CHECKPOINT_DIR=$HF_TMP/ref/ck exec "$HF_BIN/hyperfarm-train" "${flags[@]}" >out 2>err ) &
ref=$!
hf_track "$ref"

netns_start_scheduler --agent-timeout 3000
netns_start_agent a1 10.77.0.11 --slots 1
id=$(hf_submit "$(hf_train_experiment multiserver-powerloss 1 2 "${flags[@]}")")
running() { hf_get "/api/v1/experiments/$id/trials" | jq -e '.trials[0].state == "RUNNING"'; }
hf_wait_for 30 running || hf_fail "the trial did not start on a1 in 30 s"
t=$(hf_get "/api/v1/experiments/$id/trials" | jq -er '.trials[0].id')
hf_assert_eq "$(hf_get "/api/v1/trials/$t" | jq -r .agent)" "a1" "trial $t runs on a1"
netns_start_agent a2 10.77.0.12 --slots 1

# step of each epoch, from the trial's own reports
epoch2_step() { hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=100" | jq -e '[.metrics[] | select(.epoch == 2)][0].step'; }
stored_epoch2() {
  local s
  s=$(epoch2_step) || return 1
  hf_get "/api/v1/trials/$t/checkpoints" | jq -e --argjson s "$s" '([.checkpoints[].step] | max // 0) >= $s'
}
hf_wait_for 60 stored_epoch2 || hf_fail "no checkpoint of epoch 2 in the scheduler's store within 60 s"
netns_poweroff a1
t_off=$(date +%s%N)
state=$(hf_get "/api/v1/trials/$t" | jq -r .state)
[[ $state == RUNNING ]] || hf_fail "trial $t was $state at the power-off (epochs too fast for this machine?)"
# What a1 reported is read once the scheduler has declared a1 LOST: a
# report a1 sent just before the power-off may still be in the scheduler's
# hands (read, not yet stored) for a moment, and read too early it would
# count as a report "after" the power-off. Between LOST and a2's first
# report lie a2's checkpoint fetch and at least one epoch of training.
a1_lost() { hf_get /api/v1/agents | jq -e '.agents[] | select(.name == "a1") | .state == "LOST"'; }
hf_wait_for 30 a1_lost || hf_fail "a1 was not declared LOST within 30 s of the power-off"
before=$(hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=1000")
ck=$(hf_get "/api/v1/trials/$t/checkpoints" | jq -c '.checkpoints | max_by(.step)')
spe=$(epoch2_step); spe=$(( spe / 2 ))                       # steps per epoch
e_ck=$(( $(jq .step <<<"$ck") / spe ))
e_before=$(jq '[.metrics[].epoch] | max' <<<"$before")
hf_log "a1 powered off: newest stored checkpoint $(jq -c '{step, name, size, sha256: .sha256[0:12]}' <<<"$ck") = epoch $e_ck; epochs reported so far: $e_before"
(( e_ck >= 2 )) || hf_fail "the newest stored checkpoint is of epoch $e_ck"

done_on_a2() { hf_get "/api/v1/trials/$t" | jq -e '.state == "COMPLETED" or .state == "FAILED" or .state == "CANCELED"'; }
hf_wait_for 90 done_on_a2 || hf_fail "trial $t did not end within 90 s of the power-off"
tr=$(hf_get "/api/v1/trials/$t")
jq -e '.state == "COMPLETED" and .agent == "a2" and .restarts == 1' <<<"$tr" >/dev/null ||
  hf_fail "trial $t: $(jq -c '{state, agent, restarts}' <<<"$tr"); log: $(hf_get "/api/v1/trials/$t/logs?limit=100" | jq -r '.logs[].line' | tail -15)"
hf_log "ok: trial $t COMPLETED on a2 with 1 restart, $(( ($(date +%s%N) - t_off) / 1000000 )) ms after the power-off"

hf_get "/api/v1/trials/$t/logs?limit=10000" | jq -r '.logs[].line' >"$HF_TMP/trial.log"
step=$(jq .step <<<"$ck")
grep -q "restored checkpoint $(jq -r .name <<<"$ck") (step $step of trial $t" "$HF_TMP/trial.log" ||
  hf_fail "a2 did not log restoring the step-$step checkpoint: $(grep -i 'hyperfarm-agent\|resum' "$HF_TMP/trial.log" | tail -5)"
resumed=$(grep -o 'resumed from [^ ]*: epoch [0-9]*' "$HF_TMP/trial.log" | tail -1)
[[ -n $resumed ]] || hf_fail "the trainer did not resume on a2 (no 'resumed from' line): $(tail -5 "$HF_TMP/trial.log")"
hf_assert_eq "${resumed##* }" "$e_ck" "the trainer on a2 $resumed (the stored checkpoint's epoch)"

after=$(hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=1000")
new=$(jq -c --argjson b "$before" '[.metrics[] | select(.seq > ([$b.metrics[].seq] | max)) | .epoch]' <<<"$after")
want=$(jq -cn --argjson e "$e_ck" '[range($e + 1; 7)]')
hf_assert_eq "$new" "$want" "after the power-off exactly epochs $e_ck+1..6 were reported (nothing retrained)"
old=$(jq -c '[.metrics[].epoch] | sort' <<<"$before")
jq -e --argjson e "$e_ck" '(. == (unique)) and ([range(1; $e + 1)] - . == [])' <<<"$old" >/dev/null ||
  hf_fail "epochs 1..$e_ck were not each reported once before the power-off: $old"

wait "$ref" || hf_fail "reference run failed: $(tail -3 "$HF_TMP/ref/err")"
hf_reference_metrics "$HF_TMP/ref/out"
hf_assert_metrics_equal "$t" 6 "$HF_WANT" 1e-5 "trial $t resumed on a2 (reference: one uninterrupted run)"
hf_log "ok: epoch 6 equals the uninterrupted run's (val_acc $(jq -r .val_acc <<<"$HF_GOT"))"

sha=$(jq -r .sha256 <<<"$ck")
netns_run a2 test -f "/srv/hf/work/objects/${sha:0:2}/$sha" || hf_fail "a2's object cache lacks $sha"
hf_log "PASS"
