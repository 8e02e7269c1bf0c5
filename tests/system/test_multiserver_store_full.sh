#!/usr/bin/env bash
# test_multiserver_store_full.sh — the scheduler's checkpoint store fills
# up (issue 15.1 and 15.5, on the multi-server harness
# tests/system/netns_lib.sh).
#
# The scheduler's --checkpoint-dir is a 1 MiB tmpfs of its own (its
# database stays on its normal disk); two trials of
# tests/progs/fake_trial write 256 KiB checkpoints every epoch, 6 epochs,
# on two agent servers, so the store is full after a few uploads. Checks:
#   - both trials keep running and COMPLETE with every epoch reported (a
#     full store never stops or fails a trial);
#   - the failure is visible: the uploads were answered 507 and the
#     agents' logs say so ("HTTP 507: the scheduler's disk is full"), the
#     scheduler logs a WARN naming the full store and counts the refusals
#     in /metrics (hyperfarm_checkpoint_store_full_total);
#   - nothing half-written: every object file in the store hashes to its
#     name and has the size its row lists, every listed checkpoint
#     downloads complete, and no temp file is left in the store's tmp/;
#   - the scheduler keeps serving (health, listing) throughout.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
netns_setup

netns_server sched 10.77.0.2
netns_run sched sh -c 'mkdir -p /srv/hf/ckstore && mount -t tmpfs -o size=1m,mode=0700 hf-ckstore-full /srv/hf/ckstore' ||
  hf_fail "cannot mount the store's tmpfs"
netns_start_scheduler --checkpoint-dir /srv/hf/ckstore
netns_start_agent a1 10.77.0.11 --slots 1
netns_start_agent a2 10.77.0.12 --slots 1
id=$(hf_submit "$(netns_fake_experiment multiserver-store-full '{"name": "random", "max_trials": 2, "max_concurrent_trials": 2,
  "seed": 1}' 0 --epochs 6 --sleep-ms 600 --ckpt-bytes 262144)")
hf_wait_experiment "$id" 90
trials=$(hf_get "/api/v1/experiments/$id/trials")
jq -e '(.trials | length) == 2 and all(.trials[]; .state == "COMPLETED")' <<<"$trials" >/dev/null ||
  hf_fail "trials did not complete: $(jq -c '[.trials[] | {id, state, agent, exit_code}]' <<<"$trials")"
for t in $(jq -r '.trials[].id' <<<"$trials"); do
  e=$(hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=100" | jq -c '[.metrics[].epoch] | sort')
  hf_assert_eq "$e" "[1,2,3,4,5,6]" "trial $t reported every epoch"
done
hf_log "ok: both trials COMPLETED on a full store, on $(jq -r '[.trials[].agent] | unique | join(" and ")' <<<"$trials")"
hf_log "store: $(netns_run sched df -k /srv/hf/ckstore | awk 'NR == 2 {print $3 " kB used, " $4 " kB free"}'); listed: $(for t in $(jq -r '.trials[].id' <<<"$trials"); do hf_get "/api/v1/trials/$t/checkpoints" | jq -c '[.checkpoints[].step]'; done | tr '\n' ' ')"

# Visible: the agents' logs name the full store for the uploads refused.
n=0
for a in a1 a2; do
  k=$(grep -c "WARN.*uploading checkpoint [0-9a-f]* of trial [0-9]*: HTTP 507: .*full" "$HF_TMP/agent-$a.log" || true)
  n=$((n + k))
done
(( n >= 1 )) || hf_fail "no agent logged an upload refused with 507 (store full): $(grep -h -i checkpoint "$HF_TMP"/agent-a*.log | tail -5)"
hf_log "ok: the agents logged $n uploads refused with 507 ($(grep -h -m1 -o 'HTTP 507: [^;]*' "$HF_TMP"/agent-a*.log | head -1))"
full=$(curl -fsS -H "Authorization: Bearer $HF_TOKEN" "$HF_URL/metrics" | awk '$1 == "hyperfarm_checkpoint_store_full_total" {print $2}')
(( ${full:-0} >= 1 )) || hf_fail "/metrics does not count the refused uploads: hyperfarm_checkpoint_store_full_total '${full:-}'"
grep -q "WARN.*checkpoint store .* is full: upload of [0-9a-f]* .*refused with 507" "$HF_TMP/scheduler.log" \
  || hf_fail "the scheduler's log does not say its store is full"
hf_log "ok: the scheduler logged the full store and counted $full refusals in /metrics"
hf_wait_http "$HF_URL/healthz" 2 || hf_fail "the scheduler stopped answering"

# Nothing half-written: what the store lists is complete, what it holds is verified, tmp/ is empty.
# shellcheck disable=SC2046
netns_verify_store /srv/hf/ckstore $(jq -r '.trials[].id' <<<"$trials")
hf_log "PASS"
