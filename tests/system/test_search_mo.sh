#!/usr/bin/env bash
# test_search_mo.sh — multi-objective search with a constraint, end to end
# (docs/search.md "Multi-objective search and constraints").
#
# A real scheduler and agent; a TPE sweep over a bash trial program that
# reports two objectives f1, f2 (both minimised, a ZDT1-like trade-off in
# x, worse with y) and a constrained metric mem = 4y (max 2, so y <= 0.5).
#   1. GET /experiments/{id}/pareto equals the front computed here (jq)
#      from every trial's last values: completed, feasible, non-dominated;
#   2. `hyperfarm show` prints the objectives, the constraint and the front
#      size, and marks exactly the front's trials with "*";
#   3. the scheduler is killed (-9) halfway and restarted: the sweep goes
#      on from the replayed searcher and completes; after a second restart
#      the front reads back the same and the replayed searcher counts every
#      trial as an observation (so the second objective and the constraint
#      were replayed too: without them a trial is no observation);
#   4. the model preferred feasible configurations: most trials after the
#      startup ones have y <= 0.5.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm
hf_setup

prog=$HF_TMP/mo_trial.sh
cat >"$prog" <<'EOF'
#!/usr/bin/env bash
x=$(jq -r .x <<<"$HYPERFARM_HPARAMS"); y=$(jq -r .y <<<"$HYPERFARM_HPARAMS")
awk -v x="$x" -v y="$y" 'BEGIN { g = 1 + 4 * y * y;
  printf "HYPERFARM {\"epoch\": 1, \"f1\": %.6f, \"f2\": %.6f, \"mem\": %.6f}\n", x, g * (1 - sqrt(x / g)), 4 * y }'
EOF
chmod +x "$prog"

hf_start_scheduler
hf_start_agent a1 --slots 2

exp=$(jq -n --arg prog "$prog" '{
  name: "mo-sweep",
  objective: [{metric: "f1", goal: "minimize"}, {metric: "f2", goal: "minimize"}],
  constraints: [{metric: "mem", max: 2}],
  searcher: {name: "tpe", max_trials: 16, max_concurrent_trials: 2, seed: 5, n_startup_trials: 4},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, y: {type: "uniform", min: 0, max: 1}},
  trial: {command: [$prog], max_restarts: 0}
}')
id=$(hf_submit "$exp")
hf_log "submitted experiment $id"
hf_crash_scheduler_after "$id" 8
hf_wait_experiment "$id" 120
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED" and .counts.completed == 16' \
  "16 trials completed"

# ---- 1. the front, recomputed from the trials -------------------------------
front_of() {  # trials JSON on stdin -> sorted ids of the front
  jq -c '[.trials[] | select(.state == "COMPLETED" and .latest.mem <= 2)
          | {id, a: .latest.f1, b: .latest.f2}] as $f
         | [$f[] | . as $p | select(all($f[]; (.a <= $p.a and .b <= $p.b and (.a < $p.a or .b < $p.b)) | not)) | .id]
         | sort'
}
trials=$(hf_get "/api/v1/experiments/$id/trials")
want=$(front_of <<<"$trials")
pareto=$(hf_get "/api/v1/experiments/$id/pareto")
got=$(jq -c '[.trials[].trial_id] | sort' <<<"$pareto")
hf_assert_eq "$got" "$want" "the API's front equals the front computed from the trials"
hf_jq_assert '(.trials | length) >= 2 and .completed == 16 and .feasible <= 16' "a front of >= 2 trials" <<<"$pareto"
hf_jq_assert '.objectives == [{"metric":"f1","goal":"minimize"},{"metric":"f2","goal":"minimize"}]
              and .constraints == [{"metric":"mem","min":null,"max":2}]' "objectives and constraints" <<<"$pareto"
hf_jq_assert 'all(.trials[]; .constraints.mem <= 2 and (.values | length) == 2)' "front trials feasible" <<<"$pareto"
hf_jq_assert '[.trials[].values[0]] == ([.trials[].values[0]] | sort)' "front sorted by f1" <<<"$pareto"
hf_log "front: $got of $(jq .feasible <<<"$pareto") feasible trials"
feas=$(jq '[.trials[] | select(.idx >= 4) | select(.hparams.y <= 0.5)] | length' <<<"$trials")

# ---- 2. the CLI marks the front ------------------------------------------------
out=$(hf_cli show "$id")
grep -q "objectives minimize f1, minimize f2" <<<"$out" || hf_fail "show lacks the objectives line: $out"
grep -q "constraint mem <= 2" <<<"$out" || hf_fail "show lacks the constraint line: $out"
grep -qE "pareto +$(jq 'length' <<<"$want") trials? on the front" <<<"$out" || hf_fail "show lacks the front size: $out"
marked=$(hf_cli show "$id" --tsv | awk -F'\t' 'NR > 1 && $8 == "*" { print $1 }' | sort -n | jq -sc .)
hf_assert_eq "$marked" "$want" "hyperfarm show marks exactly the front's trials"
hf_cli show "$id" --json | jq -e --argjson want "$want" '(.pareto.trials | length) == ($want | length)' >/dev/null \
  || hf_fail "show --json lacks the front"

# ---- 3. restart: replay of every objective and the constraint ----------------
hf_stop_scheduler KILL
hf_restart_scheduler
pareto2=$(hf_get "/api/v1/experiments/$id/pareto")
hf_assert_eq "$(jq -c .trials <<<"$pareto2")" "$(jq -c .trials <<<"$pareto")" "the front reads back the same"
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.searcher_state.observations == 16 and .searcher_state.objectives == 2
  and .searcher_state.constraints == 1 and .searcher_state.model' "the replayed searcher has all 16 observations"

# ---- 4. feasible proposals ----------------------------------------------------
hf_log "model trials with y <= 0.5: $feas of 12"
(( feas >= 8 )) || hf_fail "only $feas of 12 model trials were feasible (prior: 6 expected)"
hf_log "ok"
