#!/usr/bin/env bash
# test_ckpt_shared_fs.sh — checkpoint storage shared_fs (docs/scheduler.md,
# "The checkpoint store"; docs/agent.md, "Checkpoints travel"): the
# scheduler runs with --checkpoint-storage shared_fs --checkpoint-dir D (an
# absolute path every agent sees), two agents with separate workdirs talk
# to it through tests/system/fault_proxy.py, which logs every request line
# they send.
#
# A trial checkpointing every epoch runs on a1; once its epoch-2 checkpoint
# is a stored row, a1 and the trial are SIGKILLed; the trial must resume on
# a2 from the newest stored checkpoint ("resuming after epoch N", nothing
# up to N trained again) and complete. Nothing went over HTTP as a
# checkpoint body: the agents registered their checkpoints (POST
# /api/v1/trials/T/checkpoints) and never PUT one, a2 never downloaded an
# object (no GET /api/v1/objects/ nor /api/v1/checkpoints/); every stored
# row's object is in D/objects, written there by the agents, and a2's
# cache holds the one it resumed from.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

D=$FT_DIR/shared-store
FT_SCHED_ARGS=(--agent-timeout 3000 --checkpoint-storage shared_fs --checkpoint-dir "$D")
ft_start_scheduler
REQ=$FT_DIR/requests.log
PPORT=$(ft_port)
/usr/bin/python3 "$FT_ROOT/tests/system/fault_proxy.py" "$PPORT" "$FT_PORT" "$REQ" >>"$FT_DIR/proxy.log" 2>&1 &
FT_PIDS+=("$!")
disown "$!"
ft_wait 10 "proxy listening" bash -c "curl -sf -m 2 http://127.0.0.1:$PPORT/healthz >/dev/null"
export FT_AGENT_URL=http://127.0.0.1:$PPORT

FT_WORK=$FT_DIR/work-a1 ft_start_agent a1 1 --keep-trial-dirs-s 0
# keep every checkpoint (retention would race the checks below)
exp=$(ft_submit "$(ft_experiment shared 1 1 2 --epochs 8 --sleep-ms 400 |
  jq -c '. + {checkpoint_policy: {keep_latest: 1000, keep_best_trials: 1}}')")
ft_wait 20 "trial running on a1" bash -c "curl -sf '$FT_URL/api/v1/experiments/$exp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"
tid=$(ft_trials "$exp" | jq -r '.trials[0].id')
ft_wait 20 "the epoch-2 checkpoint stored" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid/checkpoints' | jq -e '([.checkpoints[].step] | max // 0) >= 200' >/dev/null"
grep -q "checkpoint storage: shared_fs at $D" "$FT_DIR/agent-a1.log" || ft_fail "a1 did not learn the shared store: $(tail -5 "$FT_DIR/agent-a1.log")"
read -r tpid _ <<<"$(ft_trial_procs | head -1)"
[[ -n $tpid ]] || ft_fail "no fake_trial process for trial $tid"
kill -KILL "${AGENT_PID[a1]}" "$tpid"
rows=$(ft_get "/api/v1/trials/$tid/checkpoints")
newest=$(jq '[.checkpoints[].step] | max' <<<"$rows")
nsha=$(jq -r '.checkpoints | max_by(.step) | .sha256' <<<"$rows")
ft_log "killed a1 and trial $tid; newest stored step $newest ($nsha)"
# a1 wrote it into D itself (the scheduler only hashed and recorded it)
[[ -f $D/objects/${nsha:0:2}/$nsha ]] || ft_fail "the newest checkpoint is not in the shared store D"
grep -q "(step 100) uploaded as" "$FT_DIR/agent-a1.log" || ft_fail "a1's log does not show its step-100 checkpoint stored"

FT_WORK=$FT_DIR/work-a2 ft_start_agent a2 1 --keep-trial-dirs-s 0
ft_wait 60 "trial $tid COMPLETED on a2" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid' | jq -e '.state == \"COMPLETED\" and .agent == \"a2\"' >/dev/null"
logs=$(ft_get "/api/v1/trials/$tid/logs?limit=100000" | jq -r '.logs[].line')
resumed=$(sed -n 's/^resuming after epoch \([0-9]*\).*/\1/p' <<<"$logs" | tail -1)
[[ -n $resumed ]] || ft_fail "the trial trained from scratch on a2 (no 'resuming after epoch')"
(( resumed * 100 == newest )) || ft_fail "resumed after epoch $resumed, the store had step $newest when a1 died"
steps=$(ft_get "/api/v1/trials/$tid/metrics?name=val_acc&limit=100000" | jq -c '[.metrics[].step]')
jq -e --argjson r "$resumed" '(map(select(. <= $r * 100)) | length == (unique | length)) and
    (([range(1; 9)] | map(. * 100)) - . == [])' <<<"$steps" >/dev/null \
  || ft_fail "epochs retrained or missing after the resume at $resumed: $steps"

# the bytes: a row for every epoch, each naming an object in D
rows=$(ft_get "/api/v1/trials/$tid/checkpoints")
nrows=$(jq '.checkpoints | length' <<<"$rows")
jq -e '[.checkpoints[].step] | unique == ([range(1; 9)] | map(. * 100))' <<<"$rows" >/dev/null \
  || ft_fail "expected a stored checkpoint for each of the 8 epochs: $(jq -c '[.checkpoints[].step]' <<<"$rows")"
for sha in $(jq -r '.checkpoints[].sha256' <<<"$rows"); do
  f=$D/objects/${sha:0:2}/$sha
  [[ -f $f ]] || ft_fail "stored checkpoint $sha is not in the shared store $f"
  [[ $(sha256sum <"$f" | cut -d' ' -f1) == "$sha" ]] || ft_fail "$f does not hash to its name"
done
[[ -f $FT_DIR/work-a2/objects/${nsha:0:2}/$nsha ]] || ft_fail "a2's cache lacks the checkpoint it resumed from ($nsha)"
grep -q "fetching checkpoint fake_trial.json (${nsha:0:12}" "$FT_DIR/agent-a2.log" || ft_fail "a2 did not fetch $nsha"

# the wire: registrations only, no checkpoint body either way
puts=$(grep -c '^PUT /api/v1/trials/[0-9]*/checkpoints' "$REQ" || true)
posts=$(grep -c "^POST /api/v1/trials/$tid/checkpoints" "$REQ" || true)
gets=$(grep -cE '^GET /api/v1/(objects|checkpoints)/' "$REQ" || true)
ft_log "agent requests: $(wc -l <"$REQ") in all; checkpoint PUT $puts, register POST $posts, object GET $gets"
(( puts == 0 )) || ft_fail "an agent uploaded a checkpoint over HTTP in shared_fs mode: $(grep '^PUT' "$REQ" | head -3)"
(( gets == 0 )) || ft_fail "an agent downloaded an object over HTTP in shared_fs mode: $(grep -E '^GET /api/v1/(objects|checkpoints)/' "$REQ" | head -3)"
# every epoch's checkpoint was registered: 1..newest/100 by a1, the rest by a2
(( posts >= nrows )) || ft_fail "expected $nrows checkpoint registrations (POST), saw $posts"
(( $(grep -c '^POST /api/v1/agents$' "$REQ") == 2 )) || ft_fail "the request log missed the agents' registrations: $(head -3 "$REQ")"
ft_log "PASS: shared_fs: resumed on a2 after epoch $resumed from the shared store; $posts registrations, no checkpoint bytes over HTTP"
