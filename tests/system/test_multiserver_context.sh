#!/usr/bin/env bash
# test_multiserver_context.sh — the user's code ships with the experiment
# (issue 15.4 on the multi-server harness, tests/system/netns_lib.sh).
#
# A client server (10.77.0.20, the user's laptop) has a project directory
# on its own disk: train.py, a data file it reads, a .hyperfarmignore and
# a large file that file excludes. From there the user runs
#     hyperfarm submit exp.json --context /srv/hf/proj
# with "command": ["python3", "train.py"], a relative path no server has.
# Two agent servers (one slot each) run four trials. Checks:
#   - before the run neither agent server has the project (private disks);
#   - every trial COMPLETES, on both servers, and reports the value train.py
#     computes from the shipped data file and its hyperparameter (so the
#     code and its data arrived, and ran in the trial's working directory);
#   - the ignored file did not travel (train.py reports whether it sees it);
#   - each agent server now holds the context once, in its object cache,
#     under the hash the experiment names, and an unpacked copy per trial.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm
netns_setup

netns_start_scheduler
netns_start_agent a1 10.77.0.11 --slots 1
netns_start_agent a2 10.77.0.12 --slots 1
netns_server client 10.77.0.20

# The project, written on the client's disk only.
netns_put client /srv/hf/proj/train.py <<'PY'
import json, os, sys
hp = json.loads(os.environ.get("HYPERFARM_HPARAMS", "{}"))
with open("data/table.txt") as f:
    base = float(f.read().split()[0])
ignored = 1 if os.path.exists("big/blob.bin") else 0
print("train.py running in %s, base %g, ignored file present: %d" % (os.getcwd(), base, ignored))
for e in (1, 2):
    val = base + hp.get("k", 0) / 1000.0 + e / 100.0
    print("HYPERFARM " + json.dumps({"step": e, "epoch": e, "val_acc": val, "ignored_present": ignored}))
    sys.stdout.flush()
PY
echo "0.5 the base value train.py reads" | netns_put client /srv/hf/proj/data/table.txt
printf 'big/\n*.tmp\n' | netns_put client /srv/hf/proj/.hyperfarmignore
netns_run client sh -c 'mkdir -p /srv/hf/proj/big && head -c 8388608 /dev/urandom >/srv/hf/proj/big/blob.bin'
jq -n '{name: "multiserver-context", objective: {metric: "val_acc", goal: "maximize"},
        searcher: {name: "grid", max_concurrent_trials: 2},
        hyperparameters: {k: {type: "categorical", values: [1, 2, 3, 4]}},
        trial: {command: ["python3", "train.py"], max_restarts: 0}}' | netns_put client /srv/hf/proj/exp.json

for a in a1 a2; do
  netns_run "$a" sh -c '! find /srv/hf /tmp -name train.py | grep -q . && ! test -e /srv/hf/proj' ||
    hf_fail "server $a has train.py or the project on its disk before the run"
done
hf_log "ok: neither agent server has train.py or the project on its disk"

id=$(netns_run client env HYPERFARM_TOKEN="$HF_TOKEN" "$HF_BIN/hyperfarm" --url "$HF_URL" \
       submit /srv/hf/proj/exp.json --context /srv/hf/proj 2>"$HF_TMP/submit.err") ||
  hf_fail "hyperfarm submit --context failed: $(cat "$HF_TMP/submit.err")"
hf_log "submitted experiment $id from the client server ($(tr '\n' ' ' <"$HF_TMP/submit.err"))"
ctx=$(hf_get "/api/v1/experiments/$id" | jq -r '.config.context // .context // empty')
[[ $ctx =~ ^[0-9a-f]{64}$ ]] || hf_fail "the experiment names no context hash: $(hf_get "/api/v1/experiments/$id" | head -c 600)"
hf_log "ok: the experiment's context is $ctx"
hf_wait_experiment "$id" 90

trials=$(hf_get "/api/v1/experiments/$id/trials")
jq -e '[.trials[] | select(.state == "COMPLETED")] | length == 4' <<<"$trials" >/dev/null ||
  hf_fail "not every trial completed: $(jq -c '[.trials[] | {id, state, agent}]' <<<"$trials")"
servers=$(jq -r '[.trials[].agent] | unique | join(",")' <<<"$trials")
hf_assert_eq "$servers" "a1,a2" "the trials ran on both agent servers"
for t in $(jq -r '.trials[].id' <<<"$trials"); do
  k=$(hf_get "/api/v1/trials/$t" | jq -r '.hparams.k')
  want=$(jq -n --argjson k "$k" '0.5 + $k / 1000 + 2 / 100')
  got=$(hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=10" | jq -r '[.metrics[] | select(.epoch == 2)][0].value')
  jq -ne --argjson a "$got" --argjson b "$want" '($a - $b) | fabs < 1e-9' >/dev/null ||
    hf_fail "trial $t (k=$k): val_acc at epoch 2 is $got, train.py with the shipped data gives $want"
  ign=$(hf_get "/api/v1/trials/$t/metrics?name=ignored_present&limit=10" | jq -r '[.metrics[].value] | max')
  hf_assert_eq "$ign" "0" "trial $t: the .hyperfarmignore'd file did not travel"
  hf_get "/api/v1/trials/$t/logs?limit=100" | jq -r '.logs[].line' | grep -q "^train.py running in /srv/hf/work/" ||
    hf_fail "trial $t: no 'train.py running in /srv/hf/work/...' line in its log"
done
hf_log "ok: 4 trials ran train.py from the context, read its data file, computed the expected values"

for a in a1 a2; do
  n=$(netns_run "$a" sh -c "find /srv/hf/work -name train.py | wc -l")
  (( n >= 1 )) || hf_fail "server $a has no unpacked train.py"
  netns_run "$a" sh -c "test -f /srv/hf/work/objects/${ctx:0:2}/$ctx" ||
    hf_fail "server $a has no cached object $ctx ($(netns_run "$a" find /srv/hf/work/objects -type f | head -5))"
  got=$(netns_run "$a" sha256sum "/srv/hf/work/objects/${ctx:0:2}/$ctx" | cut -d' ' -f1)
  hf_assert_eq "$got" "$ctx" "server $a's cached context hashes to its name"
  netns_run "$a" sh -c '! find /srv/hf/work -name blob.bin | grep -q .' || hf_fail "server $a has the ignored file"
done
hf_log "PASS"
