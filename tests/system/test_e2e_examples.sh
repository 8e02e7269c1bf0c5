#!/usr/bin/env bash
# test_e2e_examples.sh — every ready-to-submit file in experiments/ is
# accepted by a real scheduler and RUNS: submitted with `hyperfarm submit
# FILE --watch` from the repository root to a real scheduler and agent
# (sandboxed trials), it ends COMPLETED with completed trials and the
# command exits 0 (experiments/README.md).
#
#   1. validation: each file (its "context" directory left out: the CLI
#      ships that) is accepted (201) by the scheduler's complete
#      validation, round-trips its name and searcher, and can be canceled,
#      so a searcher field renamed in the scheduler cannot leave a stale
#      example behind; every searcher and feature has an example;
#   2. files with a "context" (shell, C, PyTorch) run exactly as shipped:
#      the CLI packs the folder named relative to the file, the trials
#      start in their copy of it. pytorch.json is skipped, saying so, when
#      python3-torch is not installed; c-trial.json needs `make` (it builds
#      experiments/examples/c_trial);
#   3. the hyperfarm-train files run with small budgets: the same file
#      with fewer trials and epochs, and --limit-train 1500 --val-size 300
#      --limit-test 300 appended to the command (nothing else changed).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm hyperfarm-train
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)
hf_start_scheduler

# 1. validation
n=0
for f in "$root"/experiments/*.json; do
  name=$(jq -r .name "$f")
  hf_api POST /api/v1/experiments "$(jq 'if (.context | type) == "string" and (.context | test("^[0-9a-f]{64}$") | not)
                                          then del(.context) else . end' "$f")"
  [[ $HF_STATUS == 201 ]] || hf_fail "$(basename "$f") rejected ($HF_STATUS): $HF_BODY"
  id=$(jq -r .id <<<"$HF_BODY")
  hf_get "/api/v1/experiments/$id" | jq -e --arg n "$name" '.name == $n' >/dev/null \
    || hf_fail "$(basename "$f"): name not stored"
  searcher=$(jq -r .searcher.name "$f")
  hf_get "/api/v1/experiments/$id" | jq -e --arg s "$searcher" '.searcher == $s' >/dev/null \
    || hf_fail "$(basename "$f"): searcher is not '$searcher'"
  hf_post "/api/v1/experiments/$id/cancel" >/dev/null
  hf_log "ok: $(basename "$f") accepted as experiment $id ($searcher)"
  n=$((n + 1))
done
(( n >= 7 )) || hf_fail "expected at least 7 example files, found $n"
# every searcher has an example
for s in grid random tpe asha pbt; do
  grep -l "\"name\": \"$s\"" "$root"/experiments/*.json >/dev/null || hf_fail "no example for searcher $s"
done
grep -l '"median_stopping"' "$root"/experiments/*.json >/dev/null || hf_fail "no example of median stopping"
grep -l '"brackets"' "$root"/experiments/*.json >/dev/null || hf_fail "no Hyperband (ASHA brackets) example"
jq -e -s 'any(.[]; (.objective | type) == "array" and (.objective | length) >= 2)' "$root"/experiments/*.json >/dev/null \
  || hf_fail "no multi-objective example"
jq -e -s 'any(.[]; (.constraints | length) >= 1)' "$root"/experiments/*.json >/dev/null || hf_fail "no example with constraints"

# a "context" that is no directory: exit 2, naming it and where it was looked for
jq '.context = "no-such-dir"' "$root/experiments/shell-trial.json" >"$HF_TMP/badctx.json"
set +e
out=$(hf_cli submit "$HF_TMP/badctx.json" 2>&1); rc=$?
set -e
[[ $rc == 2 ]] && grep -qF "context: \"no-such-dir\" ($HF_TMP/no-such-dir): No such file or directory" <<<"$out" \
  || hf_fail "a missing context directory: exit $rc, $out"
hf_log "ok: a missing context directory: $out"
# a file handed to you cannot make submit pack a folder outside its own
# directory (a context is readable by every user): exit 2, nothing uploaded
for bad in /etc .. ../.. "examples/../.."; do
  jq --arg c "$bad" '.context = $c' "$root/experiments/shell-trial.json" >"$HF_TMP/badctx.json"
  mkdir -p "$HF_TMP/examples"
  set +e
  out=$(hf_cli submit "$HF_TMP/badctx.json" 2>&1); rc=$?
  set -e
  [[ $rc == 2 ]] && grep -qE "must be relative|lies outside the experiment file's directory" <<<"$out" \
    || hf_fail "context \"$bad\": exit $rc, $out"
done
hf_log "ok: a context outside the file's directory is refused: $out"

# 2. and 3. every file runs
hf_start_agent ex1 --slots 2
ran=0
run() {  # FILE (relative to the repository root) LABEL
  local out rc id
  set +e
  out=$(cd "$root" && "$HF_BIN/hyperfarm" --url "$HF_URL" submit "$1" --watch --plain --interval-ms 300 2>"$HF_TMP/err")
  rc=$?
  set -e
  id=$(head -1 <<<"$out")
  [[ $rc == 0 ]] || hf_fail "$2: hyperfarm submit $1 --watch exited $rc: $out $(cat "$HF_TMP/err")"
  [[ $id =~ ^[0-9]+$ ]] || hf_fail "$2: no experiment id printed: $out"
  hf_get "/api/v1/experiments/$id" | jq -e '.state == "COMPLETED" and .counts.completed >= 1' >/dev/null \
    || hf_fail "$2: experiment $id did not complete with completed trials: $(hf_get "/api/v1/experiments/$id" | jq -c '{state, end_reason, counts}')"
  hf_log "ok: $2 ran as experiment $id: $(hf_get "/api/v1/experiments/$id" | jq -c '{state, counts: .counts | with_entries(select(.value > 0))}')"
  ran=$((ran + 1))
}
mkdir -p "$HF_TMP/small"
for f in "$root"/experiments/*.json; do
  b=$(basename "$f")
  if jq -e '.context' "$f" >/dev/null; then
    if [[ $b == pytorch.json ]] && ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
      hf_log "SKIP: $b needs python3-torch (apt install python3-torch), which is not installed"
      continue
    fi
    if [[ $b == c-trial.json && ! -x $root/experiments/examples/c_trial ]]; then
      hf_fail "$b: experiments/examples/c_trial is missing (make builds it)"
    fi
    run "experiments/$b" "$b (as shipped)"
  else
    [[ $(jq -r '.trial.command[0]' "$f") == hyperfarm-train ]] || hf_fail "$b: a file that is neither hyperfarm-train nor has a context"
    jq '.searcher.max_concurrent_trials = 2
      | .trial.command += ["--limit-train", "1500", "--val-size", "300", "--limit-test", "300"]
      | if .hyperparameters.epochs != null then .hyperparameters.epochs = 1 else . end
      | if .searcher.name == "pbt" then .searcher.population_size = 2 | .searcher.max_trials = 4 | .searcher.max_epochs = 4
        elif .searcher.name == "asha" then .searcher.max_trials = (if .searcher.brackets then 4 else 3 end)
        elif .searcher.name == "grid" then .
        else .searcher.max_trials = 3 end' "$f" >"$HF_TMP/small/$b"
    run "$HF_TMP/small/$b" "$b (small budget)"
  fi
done
(( ran >= n - 1 )) || hf_fail "only $ran of $n files ran"
hf_log "PASS ($n files valid, $ran ran)"
