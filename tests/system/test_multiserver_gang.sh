#!/usr/bin/env bash
# test_multiserver_gang.sh — a two-worker trial gang-placed across two
# separate servers (issue 15.5; the loopback version is
# test_eco_multinode.sh).
#
# Three servers of tests/system/netns_lib.sh: the scheduler (10.77.0.2)
# and two agents with one slot each (10.77.0.11, 10.77.0.12), each in its
# own network, mount and pid namespace with its own disk; the only path
# between them is the bridge. The experiment asks for resources.workers =
# 2, so the scheduler must place rank 0 on one server and rank 1 on the
# other; hyperfarm-train's tcp ring then runs between the two addresses.
# Checks:
#   - the trial COMPLETES; one rank started on each server (agent logs);
#   - rank 0 reports a 2-rank tcp sync run and val_acc for both epochs;
#   - while the trial runs, the two servers' addresses (10.77.0.11 and
#     10.77.0.12, not loopback) hold an established TCP connection: the
#     rendezvous/ring at rank 0's server's master address;
#   - the result equals a standalone `hyperfarm-train --nproc 2` run with the
#     same flags: the two-server run is the same computation.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train
netns_setup

# 24,000 samples: long enough (seconds) for the check below to see the ranks' TCP
# connection while the trial runs; with 6,000 a fast trainer finished first.
flags=(--model mlp --hidden 64 --epochs 2 --batch-size 64 --lr 0.01 --optimizer adam --seed 5
       --limit-train 24000 --val-size 1000 --limit-test 1000 --threads 1 --mode sync --backend tcp
       --timeout 30)

netns_start_scheduler
netns_start_agent a1 10.77.0.11 --slots 1
netns_start_agent a2 10.77.0.12 --slots 1

id=$(hf_submit "$(hf_train_experiment multiserver-gang 2 0 "${flags[@]}")")

# While it runs: where do the ranks live, and do they talk over the bridge?
running() { hf_get "/api/v1/experiments/$id/trials" | jq -e '.trials[0].state == "RUNNING"'; }
hf_wait_for 30 running || hf_fail "the trial did not start running in 30 s"
t=$(hf_get "/api/v1/experiments/$id/trials" | jq -er '.trials[0].id')
hf_get "/api/v1/trials/$t" >"$HF_TMP/trial-running.json"
hf_log "trial $t running: $(jq -c '{agent, ranks}' "$HF_TMP/trial-running.json")"
peer_conn=""
conn_seen() {   # an established connection between the two servers' addresses
  local a
  for a in a1 a2; do
    netns_alive "$a" || continue
    peer_conn=$(netns_run "$a" ss -Htn state established 2>/dev/null |
                awk '$3 ~ /^10\.77\.0\.1[12]:/ && $4 ~ /^10\.77\.0\.1[12]:/' | head -1)
    [[ -n $peer_conn ]] && { peer_conn="$a: $peer_conn"; return 0; }
  done
  return 1
}
hf_wait_for 30 conn_seen || hf_fail "no TCP connection between 10.77.0.11 and 10.77.0.12 while the trial ran"
hf_log "ok: rank-to-rank connection over the bridge ($peer_conn)"

hf_wait_experiment "$id" 120
hf_assert_gang_trial "$t"

# Reference: the trainer's own launcher, 2 workers on this namespace's loopback.
mkdir -p "$HF_TMP/ref"
( cd "$HF_TMP/ref" && "$HF_BIN/hyperfarm-train" "${flags[@]}" --nproc 2 >"$HF_TMP/ref/out" 2>"$HF_TMP/ref/err" ) ||
  hf_fail "reference hyperfarm-train --nproc 2 failed: $(tail -5 "$HF_TMP/ref/err")"
hf_reference_metrics "$HF_TMP/ref/out"
hf_assert_metrics_equal "$t" 2 "$HF_WANT" 1e-5 "trial $t over two servers (reference: hyperfarm-train --nproc 2)"
hf_log "ok: epoch 2 metrics equal the local --nproc 2 run's (val_acc $(jq -r .val_acc <<<"$HF_GOT"))"
hf_log "PASS"
