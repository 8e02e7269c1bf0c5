#!/usr/bin/env bash
# test_search_cost.sh — cost-aware TPE end to end (docs/search.md
# "Cost-aware proposals (cost_metric)").
#
# A real scheduler and agent; a TPE sweep with "cost_metric": "sec" over a
# bash trial program whose objective has two peaks, at x = 0.25 and
# x = 0.75, the expensive one (x >= 0.5) better by 0.01, and which reports
# a cost sec of 1 for x < 0.5 and 10 above (what epoch_seconds is for the
# trainer).
#   1. the scheduler is killed (-9) halfway and restarted: the sweep goes
#      on and completes; after a second restart the replayed searcher has
#      every trial's cost (observations_with_cost: the cost reports were
#      read back from the store, not only the objective's);
#   2. the model preferred the cheap peak: of the 16 trials after the 4
#      startup ones at least 12 have x < 0.5 (16 here; the same sweep
#      without cost_metric: 2, and 2 with seed 4, where the cost gave 14).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm
hf_setup

prog=$HF_TMP/cost_trial.sh
cat >"$prog" <<'EOF'
#!/usr/bin/env bash
x=$(jq -r .x <<<"$HYPERFARM_HPARAMS"); y=$(jq -r .y <<<"$HYPERFARM_HPARAMS")
awk -v x="$x" -v y="$y" 'BEGIN { a = (x - 0.25) ^ 2 + 0.01; b = (x - 0.75) ^ 2;
  printf "HYPERFARM {\"epoch\": 1, \"f\": %.6f, \"sec\": %d}\n", (a < b ? a : b) + (y - 0.5) ^ 2, x < 0.5 ? 1 : 10 }'
EOF
chmod +x "$prog"

hf_start_scheduler
hf_start_agent a1 --slots 2

exp=$(jq -n --arg prog "$prog" '{
  name: "cost-sweep",
  objective: {metric: "f", goal: "minimize"},
  searcher: {name: "tpe", max_trials: 20, max_concurrent_trials: 2, seed: 5, n_startup_trials: 4,
             cost_metric: "sec"},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, y: {type: "uniform", min: 0, max: 1}},
  trial: {command: [$prog], max_restarts: 0}
}')
id=$(hf_submit "$exp")
hf_log "submitted experiment $id"
hf_crash_scheduler_after "$id" 10
hf_wait_experiment "$id" 120
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED" and .counts.completed == 20' \
  "20 trials completed"

# ---- 1. the costs come back with a restart -----------------------------------
hf_stop_scheduler KILL
hf_restart_scheduler
st=$(hf_get "/api/v1/experiments/$id")
if ! jq -e '.searcher_state.observations == 20 and .searcher_state.observations_with_cost == 20' \
     >/dev/null <<<"$st"; then
  # Seen once and not reproduced since (360 runs): leave what explains it.
  hf_log "searcher_state: $(jq -c .searcher_state <<<"$st")"
  hf_log "per trial in the store (idx state f-rows sec-rows):"
  sqlite3 "$HF_DB" "SELECT t.idx, t.state, (SELECT count(*) FROM metrics m WHERE m.trial_id = t.id AND m.name = 'f'),
    (SELECT count(*) FROM metrics m WHERE m.trial_id = t.id AND m.name = 'sec') FROM trials t
    WHERE t.experiment_id = $id ORDER BY t.idx" | while read -r l; do hf_log "  $l"; done
  hf_fail "the replayed searcher does not have all 20 costs"
fi
hf_log "ok: the replayed searcher has all 20 costs"

# ---- 2. the cheap peak -------------------------------------------------------
trials=$(hf_get "/api/v1/experiments/$id/trials")
cheap=$(jq '[.trials[] | select(.idx >= 4) | select(.hparams.x < 0.5)] | length' <<<"$trials")
hf_log "model trials with x < 0.5 (cost 1 against 10): $cheap of 16"
(( cheap >= 12 )) || hf_fail "only $cheap of 16 model trials chose the cheap peak"
hf_log "ok"
