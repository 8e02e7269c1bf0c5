#!/usr/bin/env bash
# test_e2e_workflow.sh — the experiment workflow of issue #17 through the
# CLI, against a real scheduler (a token file with named users) and agent:
#
#   submit as alice (show: "submitted by alice"; events carry her name),
#   tag +/-, ls --tag, describe (argument and stdin), note, extend (more
#   trials run; the CLI refuses a bad usage), fork (the parent is recorded;
#   an unknown parent exits 3, a bad file 2 naming the field), warm start
#   (an unknown experiment and an enqueued value outside the space are
#   refused naming the field; the enqueued configuration runs first; the
#   history survives a scheduler restart), HYPERFARM_SEED in every trial's
#   environment equal to the trial's seed, and hyperfarm-train using it
#   when --seed is not given (same seed, same metrics).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler hyperfarm-agent hyperfarm-train tests/fake_trial
hf_setup

printf 'user:alice alice-token-01\nuser:legacy-user-token\nagent:agent-token-01\n' >"$HF_TMP/tokens"
printf 'agent-token-01\n' >"$HF_TMP/agent-token"
hf_start_scheduler --token-file "$HF_TMP/tokens"
mkdir -p "$HF_TMP/agent-w1"
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name w1 --slots 3 --gpus none \
  --workdir "$HF_TMP/agent-w1" --token-file "$HF_TMP/agent-token" >>"$HF_TMP/agent-w1.log" 2>&1 &
HF_AGENT_PIDS[w1]=$!
export HYPERFARM_TOKEN=alice-token-01

expect_rc() {  # WANT MESSAGE CMD...
  local want=$1 msg=$2 rc=0; shift 2
  "$@" >"$HF_TMP/out" 2>"$HF_TMP/err" || rc=$?
  (( rc == want )) || hf_fail "$msg: exit $rc, expected $want ($*): $(head -c 600 "$HF_TMP/err") $(head -c 600 "$HF_TMP/out")"
  hf_log "ok: $msg (exit $rc)"
}
grep_out() { grep -q -- "$1" "$HF_TMP/out" || hf_fail "stdout lacks '$1': $(head -c 1500 "$HF_TMP/out")"; }
grep_err() { grep -q -- "$1" "$HF_TMP/err" || hf_fail "stderr lacks '$1': $(head -c 1500 "$HF_TMP/err")"; }
api() { curl -fsS -m 5 -H "Authorization: Bearer alice-token-01" "$HF_URL$1"; }
wait_done() {  # EXP N: COMPLETED with N trials done
  hf_wait_for 60 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer alice-token-01' '$HF_URL/api/v1/experiments/$1' \
    | jq -e '.state == \"COMPLETED\" and (.counts.completed + .counts.stopped) == $2' >/dev/null" \
    || hf_fail "experiment $1 did not complete $2 trials: $(api "/api/v1/experiments/$1" | jq -c '{state, counts}')"
}

base=$HF_TMP/base.json
jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "wf-cli", objective: {metric: "val_acc", goal: "maximize"}, tags: ["baseline"],
  searcher: {name: "random", max_trials: 3, seed: 21},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, lr: {type: "log", min: 0.01, max: 1}},
  trial: {command: ["/bin/sh", "-c", "echo seed=$HYPERFARM_SEED; exec \"$0\" --epochs 2 --sleep-ms 20", $prog]}
}' >"$base"

# ---- submit as alice; who shows in show and in the events
expect_rc 0 "submit as alice" hf_cli submit "$base"
E=$(cat "$HF_TMP/out")
wait_done "$E" 3
expect_rc 0 "show" hf_cli show "$E"
grep_out "submitted  by alice"
grep_out "tags       baseline"
api "/api/v1/experiments/$E/events" | jq -e '.events[0] | .user == "alice" and .detail == "submitted"' >/dev/null \
  || hf_fail "the submission event does not name alice: $(api "/api/v1/experiments/$E/events")"
# an old "user:TOKEN" line acts as user "default", who does not own alice's
# experiment (docs/api.md "Roles"): refused, and recorded under that name
HYPERFARM_TOKEN=legacy-user-token expect_rc 5 "describe with a legacy token" hf_cli describe "$E" legacy
grep_err "owned by alice"
api "/api/v1/experiments/$E/events" | jq -e '.events[-1] | .user == "default" and .type == "REFUSED"' >/dev/null \
  || hf_fail "a legacy token's refused edit is not recorded as user default: $(api "/api/v1/experiments/$E/events")"
[[ $(api "/api/v1/experiments/$E" | jq -r .submitted_by) == alice ]] || hf_fail "submitted_by"

# ---- HYPERFARM_SEED: each trial's log says the seed its view says
for t in $(api "/api/v1/experiments/$E/trials" | jq -r '.trials[].id'); do
  want=$(api "/api/v1/trials/$t" | jq -r .seed)
  got=$(api "/api/v1/trials/$t/logs" | jq -r '.logs[] | select(.line | startswith("seed=")) | .line' | head -1)
  [[ $got == "seed=$want" ]] || hf_fail "trial $t: log says '$got', the trial's seed is $want"
done
hf_log "ok: HYPERFARM_SEED in every trial's environment"

# ---- tags, ls --tag, describe, note
expect_rc 0 "tag +/-" hf_cli tag "$E" +reviewed -baseline +lr:sweep
grep_out "tags: reviewed lr:sweep"
expect_rc 0 "ls --tag" hf_cli ls --tag lr:sweep --tsv
[[ $(tail -n +2 "$HF_TMP/out" | cut -f1) == "$E" ]] || hf_fail "ls --tag lr:sweep: $(cat "$HF_TMP/out")"
expect_rc 0 "ls --tag with no match" hf_cli ls --tag baseline
grep_out "no experiment is tagged 'baseline'"
expect_rc 2 "a bad tag" hf_cli tag "$E" "+has space"
grep_err "add_tags\[0\]"
expect_rc 0 "describe" hf_cli describe "$E" '## Baseline **Adam**'
printf '# From stdin\n\n- point one\n' | expect_rc 0 "describe from stdin" hf_cli describe "$E" -
[[ $(api "/api/v1/experiments/$E" | jq -r .description) == $'# From stdin\n\n- point one' ]] \
  || hf_fail "description from stdin: $(api "/api/v1/experiments/$E" | jq .description)"
T1=$(api "/api/v1/experiments/$E/trials" | jq -r '.trials[0].id')
expect_rc 0 "note" hf_cli note "t$T1" 'lr too high: **diverged**'
[[ $(api "/api/v1/trials/$T1" | jq -r .notes) == 'lr too high: **diverged**' ]] || hf_fail "notes not stored"
expect_rc 3 "note on a missing trial" hf_cli note t999999 x
expect_rc 0 "show after the edits" hf_cli show "$E"
grep_out "# From stdin"
grep_out "alice .*EDITED"
grep_out "alice .*trial $T1: NOTES"

# ---- extend
expect_rc 2 "extend without a count" hf_cli extend "$E"
expect_rc 0 "extend" hf_cli extend "$E" --add-trials 2
grep_out "max_trials 5"
wait_done "$E" 5
expect_rc 0 "extend to a total" hf_cli extend "$E" --max-trials 6 --json
jq -e '.max_trials == 6' "$HF_TMP/out" >/dev/null || hf_fail "extend --json: $(cat "$HF_TMP/out")"
wait_done "$E" 6

# ---- fork
jq '.name = "wf-fork" | .searcher.max_trials = 1' "$base" >"$HF_TMP/fork.json"
expect_rc 0 "fork" hf_cli fork "$E" "$HF_TMP/fork.json"
F=$(cat "$HF_TMP/out")
[[ $(api "/api/v1/experiments/$F" | jq -r .parent_experiment) == "$E" ]] || hf_fail "the fork's parent"
expect_rc 0 "show the fork" hf_cli show "$F"
grep_out "forked     from experiment $E"
expect_rc 3 "fork of a missing experiment" hf_cli fork 999999 "$HF_TMP/fork.json"
jq '.searcher.max_trials = 0' "$base" >"$HF_TMP/badfork.json"
expect_rc 2 "fork with a bad file" hf_cli fork "$E" "$HF_TMP/badfork.json"
grep_err "searcher.max_trials"

# ---- warm start
jq --argjson e "$E" '.name = "wf-warm" | .searcher = {name: "tpe", max_trials: 3, seed: 4, n_startup_trials: 4}
  | .warm_start = {experiments: [$e], enqueue: [{x: 0.5, lr: 0.1}]}' "$base" >"$HF_TMP/warm.json"
jq '.warm_start.experiments = [424242]' "$HF_TMP/warm.json" >"$HF_TMP/w-bad1.json"
expect_rc 2 "warm start from a missing experiment" hf_cli submit "$HF_TMP/w-bad1.json"
grep_err "warm_start.experiments\[0\]"
jq '.warm_start.enqueue = [{x: 2, lr: 0.1}]' "$HF_TMP/warm.json" >"$HF_TMP/w-bad2.json"
expect_rc 2 "an enqueued value outside the space" hf_cli submit "$HF_TMP/w-bad2.json"
grep_err "warm_start.enqueue\[0\].x"
expect_rc 0 "warm start" hf_cli submit "$HF_TMP/warm.json"
W=$(cat "$HF_TMP/out")
wait_done "$W" 3
api "/api/v1/experiments/$W/trials" | jq -e '.trials[0].hparams == {x: 0.5, lr: 0.1}' >/dev/null \
  || hf_fail "the enqueued configuration did not run first"
obs=$(api "/api/v1/experiments/$W" | jq '.searcher_state.observations')
[[ $obs == 9 ]] || hf_fail "TPE observes $obs, expected 6 earlier trials + 3 of its own"
hf_restart_scheduler --token-file "$HF_TMP/tokens"
[[ $(api "/api/v1/experiments/$W" | jq '.searcher_state.observations') == 9 ]] || hf_fail "history lost in a restart"
hf_log "ok: warm start observes the same history after a restart"

# ---- hyperfarm-train takes HYPERFARM_SEED when --seed is not given
DATA=/usr/share/datasets/fashion-mnist
if [[ -r $DATA/train-images-idx3-ubyte.gz ]]; then
  small=(--limit-train 1000 --val-size 200 --limit-test 200 --epochs 1 --threads 1)
  strip() { sed -E 's/"samples_per_s":[^,}]*,?//; s/"epoch_seconds":[^,}]*,?//' "$1"; }
  "$HF_BIN/hyperfarm-train" "${small[@]}" --seed 77 >"$HF_TMP/s1" 2>/dev/null || hf_fail "train --seed 77"
  HYPERFARM_SEED=77 "$HF_BIN/hyperfarm-train" "${small[@]}" >"$HF_TMP/s2" 2>/dev/null || hf_fail "train HYPERFARM_SEED=77"
  HYPERFARM_SEED=78 "$HF_BIN/hyperfarm-train" "${small[@]}" >"$HF_TMP/s3" 2>/dev/null || hf_fail "train HYPERFARM_SEED=78"
  [[ "$(strip "$HF_TMP/s1")" == "$(strip "$HF_TMP/s2")" ]] || hf_fail "HYPERFARM_SEED=77 differs from --seed 77"
  [[ "$(strip "$HF_TMP/s1")" != "$(strip "$HF_TMP/s3")" ]] || hf_fail "HYPERFARM_SEED=78 gave the metrics of 77"
  hf_log "ok: hyperfarm-train uses HYPERFARM_SEED"
else
  hf_log "skip: $DATA not installed (hyperfarm-train part)"
fi
hf_log "PASS"
