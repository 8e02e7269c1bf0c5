#!/usr/bin/env bash
# test_e2e_seeds.sh — reproducible seeds (issue 28, point 5; docs/search.md
# "Reproducibility and restart"): HYPERFARM_SEED derives from the
# experiment's searcher seed and the trial's index within the experiment,
# so the same file submitted twice gives trial k the same seed, the same
# hyperparameters and — with a deterministic trial (hyperfarm-train on 1000
# Fashion-MNIST images, 1 thread, seeded by HYPERFARM_SEED) — the same
# results. Another experiment submitted in between moves the farm-wide
# trial ids, which the seed must not depend on. Different trials of one
# experiment get different seeds.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train tests/fake_trial
hf_setup
hf_start_scheduler
hf_start_agent s1 --slots 2

exp=$(jq -n '{name: "seeded", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 3, max_concurrent_trials: 2, seed: 11},
  hyperparameters: {lr: {type: "log", min: 0.01, max: 0.3}, dropout: {type: "uniform", min: 0, max: 0.5}},
  trial: {command: ["hyperfarm-train", "--model", "mlp", "--hidden", "32", "--epochs", "1", "--limit-train", "1000",
                    "--val-size", "200", "--limit-test", "200", "--threads", "1", "--batch-size", "32"]}}')
filler=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{name: "filler", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 2, seed: 5}, hyperparameters: {x: 0.5, epochs: 1, sleep_ms: 10},
  trial: {command: [$prog]}}')

per_index() {  # EXP -> [{idx, seed, hparams, val_acc}] by index
  hf_get "/api/v1/experiments/$1/trials" |
    jq -c '[.trials[] | {idx, seed, hparams, val_acc: .latest.val_acc, state}] | sort_by(.idx)'
}

a=$(hf_submit "$exp")
hf_wait_experiment "$a" 180
f=$(hf_submit "$filler")
hf_wait_experiment "$f" 60
b=$(hf_submit "$exp")
hf_wait_experiment "$b" 180
per_index "$a" >"$HF_TMP/a.json"
per_index "$b" >"$HF_TMP/b.json"
hf_log "first:  $(cat "$HF_TMP/a.json")"
hf_log "second: $(cat "$HF_TMP/b.json")"
hf_jq_assert 'length == 3 and all(.state == "COMPLETED" and .val_acc != null)' "3 trials completed with results" <"$HF_TMP/a.json"
hf_jq_assert '[.[].idx] == [0, 1, 2] and ([.[].seed] | unique | length) == 3' \
  "trial indexes 0..2, each with its own seed" <"$HF_TMP/a.json"
ta=$(hf_get "/api/v1/experiments/$a/trials" | jq '[.trials[].id] | min')
tb=$(hf_get "/api/v1/experiments/$b/trials" | jq '[.trials[].id] | min')
(( tb - ta >= 5 )) || hf_fail "the trial ids did not move ($ta, $tb)"
jq -e -n --slurpfile a "$HF_TMP/a.json" --slurpfile b "$HF_TMP/b.json" \
  '[$a[0][] | {idx, seed, hparams, val_acc}] == [$b[0][] | {idx, seed, hparams, val_acc}]' >/dev/null \
  || hf_fail "the same file gave different seeds, hyperparameters or results per trial index"
hf_log "ok: same file, same seeds and the same val_acc per trial index (trial ids $ta.. and $tb..)"

# The seed is what the trial got: HYPERFARM_SEED in fake_trial's --print-env.
pe=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{name: "env", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 2, seed: 11}, hyperparameters: {x: 0.5, epochs: 1, sleep_ms: 10},
  trial: {command: [$prog, "--print-env"]}}')
c=$(hf_submit "$pe")
hf_wait_experiment "$c" 60
for t in $(hf_get "/api/v1/experiments/$c/trials" | jq '.trials[].id'); do
  want=$(hf_get "/api/v1/trials/$t" | jq .seed)
  hf_get "/api/v1/trials/$t/logs" | jq -e --arg w "env HYPERFARM_SEED=$want" 'any(.logs[]; .line == $w)' >/dev/null \
    || hf_fail "trial $t: no 'env HYPERFARM_SEED=$want' in its log"
done
# seed 11 in both: trial k of this experiment has the seed of trial k above
hf_get "/api/v1/experiments/$c/trials" | jq -e --slurpfile a "$HF_TMP/a.json" \
  '[.trials[] | {idx, seed}] | sort_by(.idx) == [$a[0][:2][] | {idx, seed}]' >/dev/null \
  || hf_fail "experiment $c: seeds differ from experiment $a's at the same index"
hf_log "ok: HYPERFARM_SEED in the trial's environment is the trial's seed"
hf_log "PASS"
