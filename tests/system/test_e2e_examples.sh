#!/usr/bin/env bash
# test_e2e_examples.sh — every ready-to-submit file in experiments/ is
# accepted by a real scheduler (201), round-trips its name and searcher,
# and can be canceled. No agent runs, so nothing is trained: this checks
# the files against the scheduler's complete validation, so a searcher
# field renamed in the scheduler cannot leave a stale example behind.
# Also checks that `hyperfarm submit` agrees (exit 0, prints the id).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm
hf_setup
root=$(cd "$(dirname "$0")/../.." && pwd)
hf_start_scheduler

n=0
for f in "$root"/experiments/*.json; do
  name=$(jq -r .name "$f")
  hf_api POST /api/v1/experiments "$(cat "$f")"
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
id=$(hf_cli submit "$root/experiments/demo.json")
[[ $id =~ ^[0-9]+$ ]] || hf_fail "hyperfarm submit printed '$id'"
hf_log "ok: hyperfarm submit experiments/demo.json -> $id"
hf_log "PASS ($n files)"
