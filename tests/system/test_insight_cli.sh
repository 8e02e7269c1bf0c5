#!/usr/bin/env bash
# test_insight_cli.sh — issue 17 points 4-6 end to end, through the real
# scheduler, agent and CLI: a random sweep of fake_trial (val_acc depends
# on x, hardly on lr, not at all on the categorical z) then
#   importance: the API and `hyperfarm importance` rank x first, the values
#     sum to 1, a second call comes from the cache, --tsv/--json agree;
#     ?objective= / --objective: a two-objective sweep (f1 depends only on
#     x, f2 only on y) ranks y first by f2; a name not an objective is a
#     400 naming objective (exit 2);
#   compare: `hyperfarm compare` shows both trials, marks hp.x as
#     different and hp.epochs as not; bad ids exit 2, unknown ones 3;
#   logs --grep: one trial and a whole experiment, fixed / case-insensitive
#     / regex, the API and the CLI agree on the count; a bad regex is a 400
#     naming grep (exit 2); a pattern over 256 bytes is refused.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup
hf_start_scheduler
hf_start_agent ins-a --slots 4
export HYPERFARM_URL=$HF_URL
H="$HF_BIN/hyperfarm"

expect_rc() {  # WANT MESSAGE CMD...
  local want=$1 msg=$2 rc=0; shift 2
  "$@" >"$HF_TMP/out" 2>"$HF_TMP/err" || rc=$?
  if (( rc != want )); then
    hf_log "stdout: $(head -c 1500 "$HF_TMP/out")"; hf_log "stderr: $(head -c 1500 "$HF_TMP/err")"
    hf_fail "$msg: exit code $rc, expected $want ($*)"
  fi
  hf_log "ok: $msg (exit $rc)"
}

exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "insight", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 16, max_concurrent_trials: 4, seed: 5},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, lr: {type: "log", min: 0.001, max: 0.01},
                    z: {type: "categorical", values: ["a", "b", "c"]}, epochs: 2, sleep_ms: 20, stderr_lines: 2},
  trial: {command: [$prog]}}')
id=$(hf_submit "$exp")
hf_wait_experiment "$id" 240

# ---- importance ----
imp=$(hf_get "/api/v1/experiments/$id/importance")
hf_jq_assert '.trials == 16 and .params[0] == "x" and (.importance | keys | sort) == ["lr", "x", "z"]' \
  "importance of x first over 16 trials" <<<"$imp"
hf_jq_assert '([.importance[]] | add) > 0.999 and ([.importance[]] | add) < 1.001 and .importance.x > 0.8' \
  "importance sums to 1 and x dominates" <<<"$imp"
hf_jq_assert '.cached == false' "first answer computed" <<<"$imp"
hf_get "/api/v1/experiments/$id/importance" | hf_jq_assert '.cached == true' "second answer from the cache"
expect_rc 0 "hyperfarm importance" "$H" importance "$id"
head -2 "$HF_TMP/out" | tail -1 | grep -q '^  x ' || hf_fail "the first bar is not x: $(cat "$HF_TMP/out")"
grep -q '█' "$HF_TMP/out" || hf_fail "no bar drawn: $(cat "$HF_TMP/out")"
expect_rc 0 "importance --tsv" "$H" importance "$id" --tsv
[[ $(sed -n 2p "$HF_TMP/out" | cut -f1) == x && $(wc -l <"$HF_TMP/out") == 4 ]] || hf_fail "tsv: $(cat "$HF_TMP/out")"
expect_rc 3 "importance of an unknown experiment" "$H" importance 99999
expect_rc 2 "importance of a bad id" "$H" importance t3
hf_jq_assert '.objective == "val_acc" and .goal == "maximize"' "the answer names its objective" <<<"$imp"
hf_get "/api/v1/experiments/$id/importance?objective=val_acc" \
  | hf_jq_assert '.cached == true and .params[0] == "x"' "objective=the first one is the default's answer"
code=$(curl -s -o "$HF_TMP/bad" -w '%{http_code}' "$HF_URL/api/v1/experiments/$id/importance?objective=nope")
[[ $code == 400 ]] && jq -e '.field == "objective" and (.error | test("val_acc"))' "$HF_TMP/bad" >/dev/null \
  || hf_fail "objective=nope: $code $(cat "$HF_TMP/bad")"

# ---- importance by objective: f1 depends only on x, f2 only on y ----
prog=$HF_TMP/mo_trial.sh
cat >"$prog" <<'EOF'
#!/usr/bin/env bash
x=$(jq -r .x <<<"$HYPERFARM_HPARAMS"); y=$(jq -r .y <<<"$HYPERFARM_HPARAMS")
awk -v x="$x" -v y="$y" 'BEGIN { printf "HYPERFARM {\"epoch\": 1, \"f1\": %.6f, \"f2\": %.6f}\n", 3 * x, (y - 0.2) ^ 2 }'
EOF
chmod +x "$prog"
mo=$(hf_submit "$(jq -n --arg prog "$prog" '{
  name: "insight-mo", objective: [{metric: "f1", goal: "maximize"}, {metric: "f2", goal: "minimize"}],
  searcher: {name: "random", max_trials: 16, max_concurrent_trials: 4, seed: 3},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, y: {type: "uniform", min: 0, max: 1}},
  trial: {command: [$prog], max_restarts: 0}}')")
hf_wait_experiment "$mo" 120
hf_get "/api/v1/experiments/$mo/importance" \
  | hf_jq_assert '.trials == 16 and .params[0] == "x" and .objective == "f1" and .goal == "maximize"' "f1 ranks x first"
hf_get "/api/v1/experiments/$mo/importance?objective=f2" \
  | hf_jq_assert '.trials == 16 and .params[0] == "y" and .importance.y > 0.8 and .objective == "f2"
                  and .goal == "minimize" and .cached == false' "objective=f2 ranks y first"
hf_get "/api/v1/experiments/$mo/importance" | hf_jq_assert '.cached == true and .params[0] == "x"' \
  "f1's answer is still cached beside f2's"
code=$(curl -s -o "$HF_TMP/bad" -w '%{http_code}' "$HF_URL/api/v1/experiments/$mo/importance?objective=f3")
[[ $code == 400 ]] && jq -e '.field == "objective" and (.error | test("f1, f2"))' "$HF_TMP/bad" >/dev/null \
  || hf_fail "objective=f3: $code $(cat "$HF_TMP/bad")"
expect_rc 0 "importance --objective f2" "$H" importance "$mo" --objective f2
head -1 "$HF_TMP/out" | grep -q 'for f2 (min)' && head -2 "$HF_TMP/out" | tail -1 | grep -q '^  y ' \
  || hf_fail "importance --objective f2: $(cat "$HF_TMP/out")"
expect_rc 2 "importance --objective of no objective" "$H" importance "$mo" --objective f3
grep -q 'objective' "$HF_TMP/err" || hf_fail "the error does not name objective: $(cat "$HF_TMP/err")"

# ---- compare ----
read -r t1 t2 < <(hf_get "/api/v1/experiments/$id/trials" | jq -r '[.trials[0].id, .trials[1].id] | @tsv')
expect_rc 0 "compare two trials" "$H" compare "$t1" "t$t2"
grep -q "trial $t1" "$HF_TMP/out" && grep -q "trial $t2" "$HF_TMP/out" || hf_fail "compare: $(cat "$HF_TMP/out")"
grep -qE '^\*  hp\.x ' "$HF_TMP/out" || hf_fail "hp.x not marked different: $(cat "$HF_TMP/out")"
grep -qE '^   hp\.epochs ' "$HF_TMP/out" || hf_fail "hp.epochs marked or missing: $(cat "$HF_TMP/out")"
grep -q 'best.val_acc' "$HF_TMP/out" || hf_fail "no best.val_acc row: $(cat "$HF_TMP/out")"
expect_rc 0 "compare --json" "$H" compare "$t1" "$t2" --json
jq -e '.trials | length == 2' "$HF_TMP/out" >/dev/null || hf_fail "compare --json: $(head -c 300 "$HF_TMP/out")"
expect_rc 2 "compare needs two trials" "$H" compare "$t1"
expect_rc 3 "compare an unknown trial" "$H" compare "$t1" 999999

# ---- logs --grep ----
# every trial printed "stderr line 0" and "stderr line 1" (stderr_lines: 2)
n=$(hf_get "/api/v1/experiments/$id/logs?grep=stderr%20line%201" | jq '.logs | length')
[[ $n == 16 ]] || hf_fail "experiment grep found $n lines, expected 16"
hf_get "/api/v1/experiments/$id/logs?grep=STDERR%20LINE&icase=1&limit=5" \
  | hf_jq_assert '(.logs | length) == 5 and .truncated == true and .indexed == true' "icase, limit 5, indexed"
hf_get "/api/v1/experiments/$id/logs?grep=%5Estderr%20line%20%5B01%5D%24&regex=1" \
  | hf_jq_assert '(.logs | length) == 32' "regex over the experiment"
hf_get "/api/v1/trials/$t1/logs?grep=line%200" | hf_jq_assert '(.logs | length) == 1 and .logs[0].trial_id == '"$t1" "trial grep"
code=$(curl -s -o "$HF_TMP/bad" -w '%{http_code}' "$HF_URL/api/v1/experiments/$id/logs?grep=a(b&regex=1")
[[ $code == 400 ]] && jq -e '.field == "grep" and (.error | test("a\\(b"))' "$HF_TMP/bad" >/dev/null \
  || hf_fail "bad regex: $code $(cat "$HF_TMP/bad")"
long=$(head -c 300 /dev/zero | tr '\0' a)
code=$(curl -s -o "$HF_TMP/bad" -w '%{http_code}' "$HF_URL/api/v1/trials/$t1/logs?grep=$long")
[[ $code == 400 ]] && grep -q 'too long' "$HF_TMP/bad" || hf_fail "long pattern: $code $(cat "$HF_TMP/bad")"
expect_rc 0 "logs --experiment --grep" "$H" logs --experiment "$id" --grep 'stderr line 1'
[[ $(wc -l <"$HF_TMP/out") == 16 ]] && grep -q "^t$t1: stderr line 1$" "$HF_TMP/out" || hf_fail "cli grep: $(cat "$HF_TMP/out")"
expect_rc 0 "logs TRIAL --grep -i --regex" "$H" logs "$t1" --grep 'STDERR LINE [0-9]$' --regex -i
[[ $(wc -l <"$HF_TMP/out") == 2 ]] || hf_fail "trial grep: $(cat "$HF_TMP/out")"
expect_rc 0 "logs --limit" "$H" logs --experiment "$id" --grep stderr --limit 3 --json
[[ $(wc -l <"$HF_TMP/out") == 3 ]] && jq -e .trial_id "$HF_TMP/out" >/dev/null || hf_fail "limit: $(cat "$HF_TMP/out")"
expect_rc 2 "bad regex through the CLI" "$H" logs --experiment "$id" --grep 'a(b' --regex
grep -q 'grep' "$HF_TMP/err" || hf_fail "the error does not name grep: $(cat "$HF_TMP/err")"
expect_rc 2 "logs with neither trial nor experiment" "$H" logs --grep x
expect_rc 2 "logs --experiment without --grep" "$H" logs --experiment "$id"
hf_log "PASS"
