#!/usr/bin/env bash
# test_ckpt_queue.sh — the agent's upload queue survives a crash (docs/agent.md,
# "Checkpoints travel": the queue on disk, <workdir>/uploads/).
#
# A trial checkpointing every epoch runs on agent a1; once its first
# checkpoint is stored, the scheduler is frozen (SIGSTOP), so the
# checkpoints of the next epochs can only wait in a1's queue. With at
# least two of them queued, a1 and the trial are SIGKILLed and the frozen
# scheduler too; the test notes each queued record's step and the SHA-256
# of its staged copy (the trial rewrites one file name every epoch, so only
# the staged hard link still holds those bytes). The scheduler restarts on
# the same --db and a1 on the same --workdir: every queued step must become
# a stored row of attempt 1 with exactly those bytes, and uploads/ must end
# empty. The trial itself resumes from the newest stored checkpoint.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl sha256sum

FT_SCHED_ARGS=(--agent-timeout 3000)
ft_start_scheduler
W=$FT_DIR/work-a1
FT_WORK=$W ft_start_agent a1 1 --keep-trial-dirs-s -1
exp=$(ft_submit "$(ft_experiment queue 1 1 1 --epochs 12 --sleep-ms 300)")
ft_wait 20 "trial running on a1" bash -c "curl -sf '$FT_URL/api/v1/experiments/$exp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"
tid=$(ft_trials "$exp" | jq -r '.trials[0].id')
ft_wait 20 "the first checkpoint stored" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid/checkpoints' | jq -e '.checkpoints | length >= 1' >/dev/null"

kill -STOP "$SCHED_PID"
ft_log "scheduler frozen; waiting for checkpoints to queue on a1"
queued() { local n; n=$(compgen -G "$W/uploads/*.json" | wc -l); (( n >= 3 )); }
ft_wait 20 "3 checkpoints queued in $W/uploads" queued
read -r tpid _ <<<"$(ft_trial_procs | head -1)"
[[ -n $tpid ]] || ft_fail "no fake_trial process for trial $tid"
kill -KILL "${AGENT_PID[a1]}" "$tpid"
kill -KILL "$SCHED_PID"
kill -CONT "$SCHED_PID" 2>/dev/null || true
ft_wait_gone "${AGENT_PID[a1]}" 10 && ft_wait_gone "$SCHED_PID" 10 || ft_fail "a1 or the scheduler survived SIGKILL"

# What waits on a1's disk: "step sha256" per record, from the staged links.
want=$FT_DIR/queued.txt
: >"$want"
for r in "$W"/uploads/*.json; do
  n=${r%.json}
  jq -e --argjson t "$tid" '.trial == $t and .attempt == 1 and (.path | startswith("/"))' "$r" >/dev/null \
    || ft_fail "unexpected upload record $r: $(cat "$r")"
  [[ -f $n.ckpt ]] || ft_fail "record $r has no staged link $n.ckpt"
  echo "$(jq .step "$r") $(sha256sum <"$n.ckpt" | cut -d' ' -f1)" >>"$want"
done
sort -n -o "$want" "$want"
nq=$(wc -l <"$want")
(( nq >= 2 )) || ft_fail "expected at least 2 queued checkpoints, found $nq"
# every queued step is not stored yet (the scheduler was frozen)
ft_log "queued on a1 at the crash: $(cut -d' ' -f1 "$want" | tr '\n' ' ')"

ft_start_scheduler
FT_WORK=$W ft_start_agent a1 1 --keep-trial-dirs-s -1
all_stored() {
  local rows step sha
  rows=$(curl -sf "$FT_URL/api/v1/trials/$tid/checkpoints") || return 1
  while read -r step sha; do
    jq -e --argjson s "$step" --arg h "$sha" 'any(.checkpoints[]; .step == $s and .attempt == 1 and .sha256 == $h)' \
      <<<"$rows" >/dev/null || return 1
  done <"$want"
}
ft_wait 30 "every queued step stored as a row of attempt 1 with its staged bytes" all_stored
grep -q "$nq checkpoints reported before this start are not uploaded yet" "$FT_DIR/agent-a1.log" \
  || ft_fail "a1 did not read its queue back: $(grep -i upload "$FT_DIR/agent-a1.log" | tail -5)"
ft_wait 15 "a1's upload queue empty" bash -c "! compgen -G '$W/uploads/*' >/dev/null"
ft_wait 60 "trial $tid COMPLETED" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid' | jq -e '.state == \"COMPLETED\"' >/dev/null"
ft_log "PASS: $nq checkpoints queued across an agent and scheduler crash were uploaded after the restart"
