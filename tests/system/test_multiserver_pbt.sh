#!/usr/bin/env bash
# test_multiserver_pbt.sh — PBT's exploit step lands on a different server
# and continues from the parent's weights (issue 15.2 and 15.5, on the
# multi-server harness tests/system/netns_lib.sh).
#
# Two agent servers with one slot each; PBT with population 2, quantile
# 0.5, perturb_interval 1, two generations. Generation 1 are two trials
# that both descend from generation 0's winner (the loser exploits it, the
# winner continues), and only one of them fits on the winner's server: the
# other starts on the server that never had the winner's checkpoint and
# must fetch it from the scheduler's store. The trial program is
# tests/progs/fake_trial with --report-weights: its checkpoint carries
# stand-in weights w, the id of the trial that wrote them, and it reports
# what its start checkpoint held. Checks, for every generation-1 trial:
#   - its first report says it started from its parent's checkpoint
#     (start_trial = parent, start_epoch = 1) and its start_w is exactly
#     the w in the parent's newest stored checkpoint (downloaded from the
#     store by its hash);
#   - its first w is start_w + its own lr + its own x / 2 (it trained on
#     from those weights with its own, perturbed, hyperparameters);
# and at least one of them ran on another server than its parent, logged
# the restore ("restored checkpoint ... of trial PARENT") and holds the
# parent's checkpoint in its object cache.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
netns_setup

netns_start_scheduler
netns_start_agent a1 10.77.0.11 --slots 1
netns_start_agent a2 10.77.0.12 --slots 1
id=$(hf_submit "$(netns_fake_experiment multiserver-pbt '{"name": "pbt", "max_trials": 4, "population_size": 2,
  "perturb_interval": 1, "quantile": 0.5, "max_concurrent_trials": 2, "seed": 3}' 0 --sleep-ms 400 --report-weights)")
hf_wait_experiment "$id" 90
trials=$(hf_get "/api/v1/experiments/$id/trials")
jq -e '(.trials | length) == 4 and all(.trials[]; .state == "COMPLETED")' <<<"$trials" >/dev/null ||
  hf_fail "expected 4 COMPLETED trials: $(jq -c '[.trials[] | {id, state, parent_trial, agent}]' <<<"$trials")"

first() {   # TRIAL NAME: the trial's first reported value of NAME
  hf_get "/api/v1/trials/$1/metrics?name=$2&limit=100" | jq -r '.metrics | min_by(.seq) | .value'
}
moved=0
children=$(jq -r '.trials[] | select(.parent_trial != null and .parent_trial > 0) | .id' <<<"$trials")
[[ $(wc -w <<<"$children") == 2 ]] || hf_fail "expected 2 generation-1 trials with a parent: $(jq -c '[.trials[] | {id, parent_trial}]' <<<"$trials")"
for c in $children; do
  ct=$(hf_get "/api/v1/trials/$c")
  p=$(jq -r .parent_trial <<<"$ct")
  ca=$(jq -r .agent <<<"$ct")
  pa=$(hf_get "/api/v1/trials/$p" | jq -r .agent)
  # the parent's newest stored checkpoint (generation 0 ran 1 epoch: step 100)
  pck=$(hf_get "/api/v1/trials/$p/checkpoints" | jq -c '.checkpoints | max_by(.step)')
  sha=$(jq -r .sha256 <<<"$pck")
  curl -fsS -m 10 -o "$HF_TMP/parent-$p.json" "$HF_URL/api/v1/checkpoints/$sha" || hf_fail "cannot download $sha"
  got=$(sha256sum "$HF_TMP/parent-$p.json" | cut -d' ' -f1)
  hf_assert_eq "$got" "$sha" "parent $p's checkpoint from the store hashes to its name"
  pw=$(jq .w "$HF_TMP/parent-$p.json")
  hf_assert_eq "$(jq .trial "$HF_TMP/parent-$p.json")/$(jq .epoch "$HF_TMP/parent-$p.json")" "$p/1" "the stored checkpoint was written by trial $p at epoch 1"
  st=$(first "$c" start_trial); se=$(first "$c" start_epoch); sw=$(first "$c" start_w); w=$(first "$c" w)
  hf_assert_eq "$st/$se" "$p/1" "child $c (on $ca) started from trial $p's epoch-1 checkpoint (start_trial/start_epoch)"
  jq -ne --argjson a "$sw" --argjson b "$pw" '($a - $b) | fabs <= 1e-12 * (1 + ($b | fabs))' >/dev/null ||
    hf_fail "child $c: start_w $sw, but parent $p's stored checkpoint has w $pw"
  x=$(jq -r .hparams.x <<<"$ct"); lr=$(jq -r .hparams.lr <<<"$ct")
  jq -ne --argjson w "$w" --argjson s "$sw" --argjson x "$x" --argjson lr "$lr" \
    '($w - ($s + $lr + $x / 2)) | fabs <= 1e-9' >/dev/null ||
    hf_fail "child $c: first w $w is not start_w $sw + lr $lr + x $x / 2"
  hf_log "ok: child $c on $ca continued from parent $p's weights (w $pw, parent on $pa)"
  if [[ $ca != "$pa" ]]; then
    moved=$((moved + 1))
    hf_get "/api/v1/trials/$c/logs?limit=1000" | jq -r '.logs[].line' |
      grep -q "restored checkpoint fake_trial.json (step 100 of trial $p" ||
      hf_fail "child $c on $ca: no 'restored checkpoint ... (step 100 of trial $p' in its log"
    netns_run "$ca" test -f "/srv/hf/work/objects/${sha:0:2}/$sha" || hf_fail "server $ca's object cache lacks $sha"
    hf_log "ok: child $c ran on $ca, not on its parent's server $pa: it fetched $sha from the store"
  fi
done
(( moved >= 1 )) || hf_fail "no generation-1 trial ran on another server than its parent: $(jq -c '[.trials[] | {id, parent_trial, agent}]' <<<"$trials")"
hf_log "PASS"
