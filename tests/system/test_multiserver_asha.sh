#!/usr/bin/env bash
# test_multiserver_asha.sh — an ASHA promotion continues on a different
# server from the trial's own rung checkpoint (issue 15.2 and 15.5, on the
# multi-server harness tests/system/netns_lib.sh).
#
# ASHA with r = 1, R = 2, eta = 2 and two trials: both run rung 0 (one
# epoch) on server a1 (two slots); the better one is promoted to budget 2
# and, a1 holding its checkpoint, placed there again. While it runs its
# second epoch (3 s) a1 is powered off; server a2 (which joined after rung
# 0, and never had anything of the trial) must continue the promotion from
# the trial's rung-0 checkpoint in the scheduler's store. The trial program
# is tests/progs/fake_trial --report-weights (its checkpoint carries
# stand-in weights w and the id of the trial that wrote them). Checks:
#   - the promoted trial COMPLETES on a2 with budget 2; the other one stays
#     at its rung-0 result, not promoted and not run again;
#   - on a2 the trial logged the restore of its step-100 checkpoint and
#     resumed after epoch 1; its epoch-2 report is the first after the
#     power-off (nothing retrained) and says start_epoch = 1, start_trial =
#     itself, start_w = the w in that stored checkpoint (downloaded from
#     the store by hash), and w = start_w + lr + x/2;
#   - a2 holds that checkpoint in its object cache.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
netns_setup

netns_start_scheduler --agent-timeout 3000
netns_start_agent a1 10.77.0.11 --slots 2
id=$(hf_submit "$(netns_fake_experiment multiserver-asha '{"name": "asha", "max_trials": 2, "max_epochs": 2,
  "min_epochs": 1, "reduction_factor": 2, "max_concurrent_trials": 2, "seed": 5}' 2 --sleep-ms 3000 --report-weights)")
both_running() { hf_get "/api/v1/experiments/$id/trials" | jq -e '[.trials[] | select(.state == "RUNNING")] | length == 2'; }
hf_wait_for 30 both_running || hf_fail "the two rung-0 trials did not start on a1"
netns_start_agent a2 10.77.0.12 --slots 1

# The promotion: a trial whose budget is 2 running (on a1, the holder).
promoted() {
  hf_get "/api/v1/experiments/$id/trials" |
    jq -e '[.trials[] | select(.state == "RUNNING" and ((.budget // 0) >= 2 or (.max_epochs // 0) >= 2))] | length == 1'
}
hf_wait_for 60 promoted || hf_fail "no promoted trial running: $(hf_get "/api/v1/experiments/$id/trials" | jq -c '[.trials[] | {id, state, budget, agent}]')"
trials=$(hf_get "/api/v1/experiments/$id/trials")
t=$(jq -r '[.trials[] | select(.state == "RUNNING")][0].id' <<<"$trials")
where=$(jq -r '[.trials[] | select(.state == "RUNNING")][0].agent' <<<"$trials")
# at once: its second epoch takes 3 s
if [[ $where == a1 ]]; then netns_poweroff a1; else hf_log "note: the promotion went to $where directly"; fi
other=$(jq -r --argjson t "$t" '[.trials[] | select(.id != $t)][0].id' <<<"$trials")
hf_log "trial $t promoted (the other, $other, stays at rung 0), was running on $where"
ck=$(hf_get "/api/v1/trials/$t/checkpoints" | jq -c '.checkpoints | max_by(.step)')
hf_assert_eq "$(jq .step <<<"$ck")" "100" "trial $t's newest stored checkpoint is its rung-0 one (step 100)"
before=$(hf_get "/api/v1/trials/$t/metrics?limit=1000")

done_t() { hf_get "/api/v1/trials/$t" | jq -e '.state != "RUNNING" and .state != "QUEUED" and .state != "ASSIGNED"'; }
hf_wait_for 60 done_t || hf_fail "trial $t did not end after the power-off"
tr=$(hf_get "/api/v1/trials/$t")
jq -e '.state == "COMPLETED" and .agent == "a2"' <<<"$tr" >/dev/null ||
  hf_fail "trial $t: $(jq -c '{state, agent, restarts}' <<<"$tr"); log: $(hf_get "/api/v1/trials/$t/logs?limit=100" | jq -r '.logs[].line' | tail -10)"
hf_wait_experiment "$id" 30
hf_log "ok: promoted trial $t COMPLETED on a2"
hf_get "/api/v1/trials/$other/metrics?name=val_acc&limit=100" | jq -e '[.metrics[].epoch] == [1]' >/dev/null ||
  hf_fail "the other trial $other ran past rung 0"

logs=$(hf_get "/api/v1/trials/$t/logs?limit=1000" | jq -r '.logs[].line')
grep -q "restored checkpoint fake_trial.json (step 100 of trial $t" <<<"$logs" ||
  hf_fail "no 'restored checkpoint fake_trial.json (step 100 of trial $t' in its log: $(grep -i 'hyperfarm-agent\|resum' <<<"$logs" | tail -5)"
grep -q "^resuming after epoch 1 " <<<"$logs" || hf_fail "trial $t did not resume after epoch 1 on a2"
after=$(hf_get "/api/v1/trials/$t/metrics?limit=1000")
new=$(jq -c --argjson b "$before" '[.metrics[] | select(.seq > ([$b.metrics[].seq] | max))]' <<<"$after")
hf_assert_eq "$(jq -c '[.[] | select(.name == "val_acc") | .epoch]' <<<"$new")" "[2]" "after the power-off only epoch 2 was reported"
val() { jq -r --arg n "$1" '.[] | select(.name == $n) | .value' <<<"$new"; }
sha=$(jq -r .sha256 <<<"$ck")
curl -fsS -m 10 -o "$HF_TMP/ck.json" "$HF_URL/api/v1/checkpoints/$sha" || hf_fail "cannot download $sha"
hf_assert_eq "$(sha256sum "$HF_TMP/ck.json" | cut -d' ' -f1)" "$sha" "the stored checkpoint hashes to its name"
cw=$(jq .w "$HF_TMP/ck.json")
hf_assert_eq "$(val start_trial)/$(val start_epoch)" "$t/1" "epoch 2 on a2 started from trial $t's own epoch-1 checkpoint"
hp=$(jq -c .hparams <<<"$tr")
jq -ne --argjson sw "$(val start_w)" --argjson cw "$cw" --argjson w "$(val w)" --argjson hp "$hp" \
  '(($sw - $cw) | fabs <= 1e-12 * (1 + ($cw | fabs))) and (($w - ($sw + $hp.lr + $hp.x / 2)) | fabs <= 1e-9)' >/dev/null ||
  hf_fail "weights: start_w $(val start_w), stored w $cw, w $(val w), hparams $hp"
hf_log "ok: on a2 the promotion continued from the stored rung-0 weights (w $cw)"
netns_run a2 test -f "/srv/hf/work/objects/${sha:0:2}/$sha" || hf_fail "a2's object cache lacks $sha"
hf_log "PASS"
