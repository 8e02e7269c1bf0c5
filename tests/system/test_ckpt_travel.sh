#!/usr/bin/env bash
# test_ckpt_travel.sh — checkpoints travel with the trial (docs/agent.md,
# "Checkpoints travel"): agents on loopback, each with its OWN --workdir
# (nothing shared but the wire).
#
# A: a trial checkpointing every epoch runs on agent a1; once its epoch-2
#    checkpoint is in the scheduler's store, a1 and the trial are SIGKILLed
#    (a dead machine). The scheduler declares a1 LOST and requeues the
#    trial on a2 (its own workdir), whose agent fetches the newest stored
#    checkpoint: the fake trial must log "resuming after epoch N" with N >=
#    2, report no finished epoch <= N again, and complete. a2's object
#    cache holds the checkpoint, and its trial directory is removed once
#    the trial is over (--keep-trial-dirs-s 0).
# B: PBT (population 2, quantile 0.5): both generation-1 trials descend
#    from the winner; only one fits on the winner's agent, so one starts
#    on the other agent and must restore the parent's newest checkpoint
#    from the store (log "restored checkpoint ... (step S of trial
#    PARENT", then "resuming after epoch S/100") — never from scratch.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

FT_SCHED_ARGS=(--agent-timeout 3000)
ft_start_scheduler
FT_WORK=$FT_DIR/work-a1 ft_start_agent a1 1 --keep-trial-dirs-s 0
exp=$(ft_submit "$(ft_experiment travel 1 1 2 --epochs 10 --sleep-ms 400)")
ft_wait 20 "trial running on a1" bash -c "curl -sf '$FT_URL/api/v1/experiments/$exp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"
tid=$(ft_trials "$exp" | jq -r '.trials[0].id')
stored_at_least() { curl -sf "$FT_URL/api/v1/trials/$tid/checkpoints" | jq -e "([.checkpoints[].step] | max // 0) >= $1" >/dev/null; }
ft_wait 20 "the epoch-2 checkpoint stored" stored_at_least 200
read -r tpid _ <<<"$(ft_trial_procs | head -1)"
[[ -n $tpid ]] || ft_fail "no fake_trial process for trial $tid"
kill -KILL "${AGENT_PID[a1]}" "$tpid"
newest=$(ft_get "/api/v1/trials/$tid/checkpoints" | jq '[.checkpoints[].step] | max')
ck=$(ft_get "/api/v1/trials/$tid/checkpoints" | jq -c '.checkpoints[-1]')
ft_log "killed a1 and trial $tid; newest stored checkpoint: $ck"
jq -e '.name == "fake_trial.json" and .agent_id > 0' <<<"$ck" >/dev/null || ft_fail "checkpoint row without name/agent: $ck"
FT_WORK=$FT_DIR/work-a2 ft_start_agent a2 1 --keep-trial-dirs-s 0
ft_wait 60 "trial $tid COMPLETED on a2" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid' | jq -e '.state == \"COMPLETED\" and .agent == \"a2\"' >/dev/null"
logs=$(ft_get "/api/v1/trials/$tid/logs?limit=100000" | jq -r '.logs[].line')
grep -q "restored checkpoint fake_trial.json (step $newest of trial $tid" <<<"$logs" || ft_fail "a2 did not restore the step-$newest checkpoint: $(grep hyperfarm-agent <<<"$logs")"
resumed=$(sed -n 's/^resuming after epoch \([0-9]*\).*/\1/p' <<<"$logs" | tail -1)
[[ -n $resumed ]] || ft_fail "the trial trained from scratch on a2 (no 'resuming after epoch')"
(( resumed * 100 == newest )) || ft_fail "resumed after epoch $resumed, the store's newest was step $newest"
att2=$(ft_get "/api/v1/trials/$tid" | jq .attempt)
# attempt 2 reports only epochs after the resume: nothing retrained
steps2=$(ft_get "/api/v1/trials/$tid/metrics?name=val_acc&limit=100000" | jq -c '[.metrics[].step]')
# Epochs up to the resumed checkpoint are never trained again (each is
# reported once); every epoch is there. Epochs the dead agent finished
# after its newest *uploaded* checkpoint are trained again: that work died
# with the machine.
jq -e --argjson r "$resumed" '(map(select(. <= $r * 100)) | length == (unique | length)) and
    (([range(1; 11)] | map(. * 100)) - . == [])' <<<"$steps2" >/dev/null \
  || ft_fail "epochs retrained or missing after the resume at $resumed: $steps2 (attempt $att2)"
sha=$(jq -r .sha256 <<<"$ck")
[[ -f $FT_DIR/work-a2/objects/${sha:0:2}/$sha ]] || ft_fail "a2's object cache lacks $sha"
ft_wait 15 "a2 removed the finished trial's directory" bash -c "! compgen -G '$FT_DIR/work-a2/experiments/$exp/trials/$tid' >/dev/null"
ft_log "A ok: resumed on a2 after epoch $resumed (store had step $newest), nothing retrained, trial dir cleaned"

# ---------------------------------------------------------------- B
FT_WORK=$FT_DIR/work-a3 ft_start_agent a3 1 --keep-trial-dirs-s 0
pbt=$(jq -cn --arg ft "$HF_BIN/tests/fake_trial" '{
  name: "pbt-travel", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "pbt", max_trials: 4, population_size: 2, perturb_interval: 2, quantile: 0.5, max_concurrent_trials: 2},
  hyperparameters: {x: {type: "double", min: 0, max: 1}, lr: {type: "log", min: 0.01, max: 1}},
  trial: {command: [$ft, "--epochs", "4", "--sleep-ms", "300"], max_restarts: 0}}')
pexp=$(ft_submit "$pbt")
ft_wait 90 "PBT experiment completed" bash -c "curl -sf '$FT_URL/api/v1/experiments/$pexp' | jq -e '.state == \"COMPLETED\"' >/dev/null"
trials=$(ft_trials "$pexp")
moved=0
for t in $(jq -r '.trials[] | select(.parent_trial != null and .parent_trial > 0) | .id' <<<"$trials"); do
  p=$(jq -r --argjson t "$t" '.trials[] | select(.id == $t) | .parent_trial' <<<"$trials")
  ta=$(ft_get "/api/v1/trials/$t" | jq -r .agent)
  pa=$(ft_get "/api/v1/trials/$p" | jq -r .agent)
  tl=$(ft_get "/api/v1/trials/$t/logs?limit=100000" | jq -r '.logs[].line')
  rstep=$(sed -n "s/.*restored checkpoint fake_trial.json (step \([0-9]*\) of trial $p,.*/\1/p" <<<"$tl" | head -1)
  [[ -n $rstep ]] || ft_fail "PBT child $t (parent $p, on $ta) did not restore the parent's checkpoint: $(grep hyperfarm-agent <<<"$tl")"
  grep -q "resuming after epoch $((rstep / 100)) " <<<"$tl" || ft_fail "PBT child $t did not resume from the parent's step $rstep"
  if [[ $ta != "$pa" ]]; then
    moved=$((moved + 1))
    ft_log "B: child $t on $ta restored parent $p's step-$rstep checkpoint (the parent ran on $pa)"
  fi
done
(( moved >= 1 )) || ft_fail "no PBT child ran on another agent than its parent: $(jq -c '[.trials[] | {id, parent_trial, agent}]' <<<"$trials")"
ft_log "PASS: checkpoints travel: resume on another agent, PBT child on another agent"
