#!/usr/bin/env bash
# test_e2e_objective.sh — issue 28 points 3 and 4 (docs/guide.md "The
# objective"): a deterministic trial (a shell script) reports acc 0.5, 0.9,
# 0.7, 0.6 at steps 1..4 and writes a checkpoint at each step, so
#   - objective.aggregate "best" (the default) gives each trial 0.9 and
#     "last" 0.6; `show` and GET /experiments/{id} say which;
#   - a 400 names objective.aggregate for anything else;
#   - with keep_latest 1 and keep_best_trials 0 retention keeps each trial's
#     newest and the checkpoint that scored its objective (step 2 with
#     "best"; with "last" the newest is the one), the list marks it
#     "scored" and carries the metrics of its step, and `download --best`
#     writes exactly its bytes;
#   - compare shows which way each metric's best was taken (an objective by
#     its goal, epoch_seconds minimized by its name);
#   - a multi-objective experiment (acc max, lat min): ls, show, export
#     --csv/--json and the submit --watch summary name every objective;
#   - the experiment.COMPLETED webhook carries the best trial's objective
#     (not null) and, with a list objective, every objective.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm
hf_setup

prog=$HF_TMP/obj_trial.sh
cat >"$prog" <<'EOF'
#!/usr/bin/env bash
# acc better early, worse last; lat from the hyperparameter; a checkpoint per step.
set -e
lat=$(jq -r '.lat // 10' <<<"$HYPERFARM_HPARAMS")
step=0
for acc in 0.5 0.9 0.7 0.6; do
  step=$((step + 1))
  f=$HYPERFARM_CHECKPOINT_DIR/ck-$step.bin
  printf 'trial %s step %s\n' "$HYPERFARM_TRIAL_ID" "$step" >"$f.tmp" && mv "$f.tmp" "$f"
  printf 'HYPERFARM {"step": %d, "acc": %s, "lat": %s, "epoch_seconds": %d, "checkpoint": "%s"}\n' \
    "$step" "$acc" "$lat" $((5 - step)) "$f"
done
EOF
chmod +x "$prog"

hf_start_scheduler --webhook-allow-private
hf_start_agent a1 --slots 2
RPORT=$(hf_free_port)
"${PYTHON:-python3}" "$(dirname "$0")/webhook_receiver.py" "$RPORT" "$HF_TMP/got.jsonl" >"$HF_TMP/recv.out" 2>&1 &
hf_track $!
hf_wait_for 10 grep -q ready "$HF_TMP/recv.out" || hf_fail "receiver did not start"
hf_post /api/v1/webhooks "{\"url\": \"http://127.0.0.1:$RPORT/h\", \"events\": [\"experiment.COMPLETED\"]}" >/dev/null

X_HP='{"x": {"type": "uniform", "min": 0, "max": 1}}'
RANDOM_SR='{"name": "random", "max_trials": 2, "max_concurrent_trials": 2, "seed": 5}'
exp_json() {  # NAME OBJECTIVE(JSON) [HPARAMS(JSON) [SEARCHER(JSON)]]
  jq -n --arg prog "$prog" --arg name "$1" --argjson obj "$2" --argjson hp "${3:-$X_HP}" \
    --argjson sr "${4:-$RANDOM_SR}" '{
    name: $name, objective: $obj, hyperparameters: $hp, searcher: $sr,
    checkpoint_policy: {keep_latest: 1, keep_best_trials: 0},
    trial: {command: [$prog], max_restarts: 0}}'
}

# ---- validation ---------------------------------------------------------------
hf_api POST /api/v1/experiments "$(exp_json bad '{"metric": "acc", "goal": "maximize", "aggregate": "mean"}')"
hf_assert_eq "$HF_STATUS" 400 "aggregate mean: $HF_BODY"
hf_assert_eq "$(jq -r .field <<<"$HF_BODY")" objective.aggregate "the field named"
hf_api POST /api/v1/experiments "$(exp_json bad '[{"metric": "acc", "goal": "maximize", "aggregate": "best"},
  {"metric": "lat", "goal": "minimize"}]')"
hf_assert_eq "$HF_STATUS" 400 "a list with aggregate best: $HF_BODY"
hf_assert_eq "$(jq -r .field <<<"$HF_BODY")" 'objective[0].aggregate' "the field named"
hf_log "ok: objective.aggregate validated (400 naming the field)"

# ---- best (the default) and last ----------------------------------------------
B=$(hf_submit "$(exp_json agg-best '{"metric": "acc", "goal": "maximize"}')")
L=$(hf_submit "$(exp_json agg-last '{"metric": "acc", "goal": "maximize", "aggregate": "last"}')")
hf_wait_experiment "$B" 60
hf_wait_experiment "$L" 60
hf_assert_eq "$(hf_get "/api/v1/experiments/$B" | jq -c '[.state, .objective.aggregate, .best.value]')" \
  '["COMPLETED","best",0.9]' "experiment B (aggregate best)"
hf_assert_eq "$(hf_get "/api/v1/experiments/$L" | jq -c '[.state, .objective.aggregate, .best.value]')" \
  '["COMPLETED","last",0.6]' "experiment L (aggregate last)"
hf_assert_eq "$(hf_get "/api/v1/experiments/$B/trials" | jq -c '[.trials[].objective]')" '[0.9,0.9]' "B's objectives"
hf_assert_eq "$(hf_get "/api/v1/experiments/$L/trials" | jq -c '[.trials[].objective]')" '[0.6,0.6]' "L's objectives"
hf_cli show "$B" | grep -q '^  aggregate  best' || hf_fail "show B: $(hf_cli show "$B" | head -6)"
hf_cli show "$L" | grep -q '^  aggregate  last' || hf_fail "show L: $(hf_cli show "$L" | head -6)"
hf_log "ok: aggregate best gives 0.9 (epoch 2), last 0.6 (epoch 4), shown in show and the API"

# ---- the checkpoint that scored -------------------------------------------------
TB=$(hf_get "/api/v1/experiments/$B/trials" | jq -r '.trials[0].id')
TL=$(hf_get "/api/v1/experiments/$L/trials" | jq -r '.trials[0].id')
rows_of() { hf_get "/api/v1/trials/$1/checkpoints" | jq -c '[.checkpoints[].step]'; }
kept_is() { [[ $(rows_of "$1") == "$2" ]]; }   # re-read at every try of hf_wait_for
hf_wait_for 30 kept_is "$TB" '[2,4]' || hf_fail "trial $TB kept $(rows_of "$TB"), expected [2,4]"
hf_wait_for 30 kept_is "$TL" '[4]' || hf_fail "trial $TL kept $(rows_of "$TL"), expected [4]"
hf_get "/api/v1/trials/$TB/checkpoints" >"$HF_TMP/ckb"
hf_assert_eq "$(jq -c '[.scored_step, [.checkpoints[] | [.step, .scored, .metrics.acc]]]' "$HF_TMP/ckb")" \
  '[2,[[2,true,0.9],[4,false,0.6]]]' "trial $TB's checkpoint list"
hf_cli download "$TB" --best -o "$HF_TMP/dlb" >/dev/null || hf_fail "download --best of $TB failed"
hf_assert_eq "$(cat "$HF_TMP"/dlb/*)" "trial $TB step 2" "the bytes of download --best (aggregate best)"
hf_cli download "$TL" --best -o "$HF_TMP/dll" >/dev/null || hf_fail "download --best of $TL failed"
hf_assert_eq "$(cat "$HF_TMP"/dll/*)" "trial $TL step 4" "the bytes of download --best (aggregate last)"
hf_cli checkpoints "$TB" | grep -Eq '^ *2 .* \* +acc=0\.9' || hf_fail "checkpoints table: $(hf_cli checkpoints "$TB")"
set +e
err=$(hf_cli download "$TB" --best --step 4 -o "$HF_TMP/dlx" 2>&1); rc=$?
set -e
hf_assert_eq "$rc" 2 "download --best --step: $err"
hf_log "ok: retention kept the scoring checkpoints, listed with their metrics; download --best fetched their bytes"

# ---- compare: each metric's direction --------------------------------------------
TB2=$(hf_get "/api/v1/experiments/$B/trials" | jq -r '.trials[1].id')
out=$(hf_cli compare "$TB" "$TB2" --tsv)
grep -qP '^ \tbest\.acc \(max\)\t0\.9\t0\.9$' <<<"$out" || hf_fail "compare acc: $out"
grep -qP '^ \tbest\.epoch_seconds \(min\)\t1\t1$' <<<"$out" || hf_fail "compare epoch_seconds (minimized): $out"
grep -qP '^ \tbest\.lat \(max\)\t10\t10$' <<<"$out" || hf_fail "compare lat (no rule: maximized): $out"
hf_log "ok: compare shows each best's direction, epoch_seconds minimized"

# ---- multi-objective: ls, show, export, submit --watch ----------------------------
MO='[{"metric": "acc", "goal": "maximize"}, {"metric": "lat", "goal": "minimize"}]'
HP='{"lat": {"type": "categorical", "values": [3, 7]}}'
exp_json multi "$MO" "$HP" '{"name": "grid", "max_concurrent_trials": 2}' >"$HF_TMP/multi.json"
hf_cli submit "$HF_TMP/multi.json" --watch >"$HF_TMP/watch.out" 2>&1 \
  || hf_fail "submit --watch: $(cat "$HF_TMP/watch.out")"
M=$(hf_get /api/v1/experiments | jq -r '.experiments[] | select(.name == "multi") | .id')
grep -q '^objectives: max acc, min lat$' "$HF_TMP/watch.out" || hf_fail "watch summary: $(cat "$HF_TMP/watch.out")"
grep -Eq '^  trial [0-9]+: acc = 0.6, lat = 3$' "$HF_TMP/watch.out" || hf_fail "watch front: $(cat "$HF_TMP/watch.out")"
hf_assert_eq "$(hf_get "/api/v1/experiments/$M" | jq -c '[.objective.aggregate, [.objectives[].metric]]')" \
  '["last",["acc","lat"]]' "experiment M's objectives"
hf_cli ls | grep -Eq "^ *$M +multi .* max acc, min lat " || hf_fail "ls: $(hf_cli ls)"
show=$(hf_cli show "$M")
grep -Eq '^ *TRIAL .* acc, lat ' <<<"$show" || hf_fail "show's objectives column: $show"
grep -Eq '^ +[0-9]+ +COMPLETED .* 0\.6, 3 ' <<<"$show" || hf_fail "show's trial values: $show"
grep -Eq '^ +[0-9]+ +COMPLETED .* 0\.6, 7 ' <<<"$show" || hf_fail "show's trial values: $show"
csv=$(hf_cli export "$M" --csv)
head -1 <<<"$csv" | grep -q ',objective,objective.acc,objective.lat,' || hf_fail "export header: $(head -1 <<<"$csv")"
grep -Eq ',0\.6,0\.6,3,' <<<"$csv" && grep -Eq ',0\.6,0\.6,7,' <<<"$csv" || hf_fail "export rows: $csv"
hf_assert_eq "$(hf_cli export "$M" --json | jq -c '[.experiment.objectives[].metric]')" '["acc","lat"]' "export --json"
hf_log "ok: multi-objective: ls, show, export and the watch summary name every objective"

# ---- the experiment.COMPLETED webhook --------------------------------------------
hf_wait_for 30 bash -c "[[ \$(grep -c . '$HF_TMP/got.jsonl' 2>/dev/null) -ge 3 ]]" \
  || hf_fail "3 experiment.COMPLETED deliveries expected: $(cat "$HF_TMP/got.jsonl" 2>/dev/null)"
body() { jq -c --argjson e "$1" '.body | fromjson | select(.experiment_id == $e)' "$HF_TMP/got.jsonl"; }
hf_assert_eq "$(body "$B" | jq -c '[.event, .trial_id, .objective, (.objective_trial != null)]')" \
  '["experiment.COMPLETED",null,0.9,true]' "B's COMPLETED webhook"
hf_assert_eq "$(body "$L" | jq -c '.objective')" 0.6 "L's COMPLETED webhook objective"
hf_assert_eq "$(body "$M" | jq -c '[.objective, .objectives]')" '[0.6,{"acc":0.6,"lat":3}]' "M's COMPLETED webhook"
hf_log "ok: the COMPLETED webhook carries the best trial's objective (and every objective of a list)"
hf_log "PASS"
