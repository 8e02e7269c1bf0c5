#!/usr/bin/env bash
# test_agent_follow.sh — an agent given several scheduler URLs follows the
# primary (docs/agent.md, "Several schedulers"). Real scheduler, real
# agents; tests/system/fake_standby.py stands in for a standby (503
# role standby naming the primary) — the real standby is
# test_scheduler_standby.sh's.
#
#   A. --scheduler DEAD,LIVE,FAKE: the agent passes the dead URL, registers
#      on the live scheduler, and runs a trial to completion there.
#   B. --scheduler FAKE,DEAD,LIVE: the standby's 503 names LIVE, so the
#      agent goes there at once (never to DEAD) and registers.
#   C. the live scheduler SIGKILLed while a trial runs: the agent searches
#      (LIVE fails, FAKE sends it back to LIVE, ...), the trial keeps its
#      pid; after two heartbeat intervals its requests carry
#      X-Hyperfarm-Lost-Primary (>= 2 intervals) and X-Hyperfarm-Term (the
#      term the fake answered); restarted on the same port, the scheduler
#      hears the running trial at re-registration and it completes with
#      every epoch reported once, no restart. A standby's 503 to a
#      heartbeat is never read as "unknown agent".
#   D. a power cut of the primary (its URL drops SYNs: requests time out,
#      nothing is refused) while the standby names it as the primary: the
#      agent does not follow that hint back to the dead URL each time
#      (hf_follow.h, avoid time) and a dead URL costs the short connect
#      timeout, so the standby hears the agent, with
#      X-Hyperfarm-Lost-Primary, at about the heartbeat interval.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup
FAKE=$HF_BIN/tests/fake_trial
HB=200

hf_start_scheduler
LIVE=$HF_URL
DEAD=http://127.0.0.1:$(hf_free_port)
start_fake() {  # NAME PRIMARY|-: sets FAKE_URL
  local port
  port=$(hf_free_port)
  python3 "$HF_REPO/tests/system/fake_standby.py" "$port" "$HF_TMP/$1.jsonl" "$2" 1 >"$HF_TMP/$1.out" 2>&1 &
  hf_track "$!"
  hf_wait_for 10 grep -q ready "$HF_TMP/$1.out" || hf_fail "fake standby $1 did not start"
  FAKE_URL=http://127.0.0.1:$port
}
start_fake standby "$LIVE"
STANDBY=$FAKE_URL

experiment() {  # NAME EPOCHS SLEEP_MS
  jq -cn --arg name "$1" --argjson e "$2" --argjson s "$3" --arg f "$FAKE" '{
    name: $name, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1, max_concurrent_trials: 1, seed: 1},
    hyperparameters: {x: {type: "uniform", min: 0, max: 1}, epochs: $e, sleep_ms: $s},
    trial: {command: [$f], max_restarts: 0}}'
}
trial_of() { hf_get "/api/v1/experiments/$1/trials" | jq -r '.trials[0].id'; }
trial_pid() {  # TRIAL: the fake_trial process running it, below this test
  # (found among this shell's descendants, not by the trial's cwd, which a
  # sandboxed trial in a chroot does not show as this side's path)
  local p
  for p in $(hf_descendants); do
    [[ /proc/$p/exe -ef $FAKE ]] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "HYPERFARM_TRIAL_ID=$1" && { echo "$p"; return 0; }
  done
  return 1
}

# ---------------------------------------------------------------- A
hf_start_agent a1 --scheduler "$DEAD,$LIVE,$STANDBY" --slots 1 --gpus none --heartbeat-ms $HB
grep -q "registered with $LIVE as agent" "$HF_TMP/agent-a1.log" \
  || hf_fail "A: a1 should register with $LIVE: $(grep registered "$HF_TMP/agent-a1.log")"
id=$(hf_submit "$(experiment quick 2 50)")
hf_wait_experiment "$id" 30
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "COMPLETED" and .counts.completed == 1' "A: trial completed"
hf_log "ok: A: past a dead URL to the live scheduler, trial completed"

# ---------------------------------------------------------------- B
hf_start_agent a2 --scheduler "$STANDBY,$DEAD,$LIVE" --slots 1 --gpus none --heartbeat-ms $HB
grep -q "registered with $LIVE as agent" "$HF_TMP/agent-a2.log" \
  || hf_fail "B: a2 should register with $LIVE: $(grep registered "$HF_TMP/agent-a2.log")"
grep -q "scheduler $DEAD unreachable" "$HF_TMP/agent-a2.log" && hf_fail "B: a2 tried $DEAD although the standby named $LIVE"
jq -e 'select(.method == "POST" and .path == "/api/v1/agents")' "$HF_TMP/standby.jsonl" >/dev/null \
  || hf_fail "B: a2's registration did not go to the standby first"
hf_stop_agent a2
hf_log "ok: B: a standby's 503 sent the agent to the primary it named"

# ---------------------------------------------------------------- C
id=$(hf_submit "$(experiment long 30 200)")
hf_wait_for 20 bash -c "[[ \$(curl -fsS '$LIVE/api/v1/experiments/$id/trials' | jq -r '.trials[0].state') == RUNNING ]]" \
  || hf_fail "C: trial not running"
t=$(trial_of "$id")
hf_wait_for 10 trial_pid "$t" || hf_fail "C: no process for trial $t"
pid=$(trial_pid "$t")
: >"$HF_TMP/standby.jsonl"
hf_stop_scheduler KILL
hf_log "C: scheduler killed (trial $t pid $pid)"
hf_wait_for 10 jq -se 'map(select(.lost != null)) | length > 0' "$HF_TMP/standby.jsonl" \
  || hf_fail "C: no request with X-Hyperfarm-Lost-Primary reached the standby: $(tail -3 "$HF_TMP/standby.jsonl")"
jq -se --argjson min $((2 * HB)) 'map(select(.lost != null)) | all(.lost | tonumber >= $min)' "$HF_TMP/standby.jsonl" >/dev/null \
  || hf_fail "C: X-Hyperfarm-Lost-Primary below two heartbeat intervals: $(grep -v '"lost": null' "$HF_TMP/standby.jsonl" | head -2)"
jq -se 'map(select(.lost != null)) | all(.term == "1")' "$HF_TMP/standby.jsonl" >/dev/null \
  || hf_fail "C: requests should carry X-Hyperfarm-Term: 1: $(tail -2 "$HF_TMP/standby.jsonl")"
jq -se 'map(select(.lost == null)) | length > 0' "$HF_TMP/standby.jsonl" >/dev/null \
  || hf_fail "C: the first requests after the loss should not carry X-Hyperfarm-Lost-Primary yet"
sleep 1.5
hf_alive "$pid" || hf_fail "C: the trial died while the agent searched for a primary"
HF_FIXED_PORT=${LIVE##*:} hf_start_scheduler
hf_wait_for 15 bash -c "[[ \$(grep -c 'registered with $LIVE' '$HF_TMP/agent-a1.log') -ge 2 ]]" \
  || hf_fail "C: the agent did not re-register with $LIVE"
grep "registered with" "$HF_TMP/agent-a1.log" | tail -1 | grep -q "(1 running" \
  || hf_fail "C: re-registration should list the running trial: $(grep 'registered with' "$HF_TMP/agent-a1.log" | tail -1)"
hf_wait_experiment "$id" 40
hf_get "/api/v1/trials/$t" | hf_jq_assert '.state == "COMPLETED" and .restarts == 0' "C: completed without restart"
hf_get "/api/v1/trials/$t/metrics?name=val_acc&limit=1000" \
  | hf_jq_assert '[.metrics[].epoch] | sort == [range(1; 31)]' "C: epochs 1..30 reported exactly once"
grep -q "does not know agent id" "$HF_TMP/agent-a1.log" \
  && hf_fail "C: a standby's 503 was read as an unknown agent: $(grep 'does not know agent id' "$HF_TMP/agent-a1.log" | head -1)"
hf_log "ok: C: the trial ran on while the agent searched; lost-primary and term headers sent"

# ---------------------------------------------------------------- D
# a dead host: a listening socket that never accepts, its queue filled
python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0)
port = s.getsockname()[1]
fill = []
for _ in range(3):
    c = socket.socket(); c.setblocking(False); c.connect_ex(("127.0.0.1", port)); fill.append(c)
print(port, flush=True)
time.sleep(3600)' >"$HF_TMP/hole.out" 2>&1 &
hf_track "$!"
hf_wait_for 10 grep -q '^[0-9]' "$HF_TMP/hole.out" || hf_fail "D: no dead port"
HOLE=http://127.0.0.1:$(head -1 "$HF_TMP/hole.out")
start_fake cut "$HOLE"
CUT=$FAKE_URL
mkdir -p "$HF_TMP/agent-a3"
"$HF_BIN/hyperfarm-agent" --scheduler "$HOLE,$CUT" --name a3 --workdir "$HF_TMP/agent-a3" --slots 1 --gpus none \
  --heartbeat-ms 500 --log-level debug >>"$HF_TMP/agent-a3.log" 2>&1 &
a3=$!
hf_track "$a3"
sleep 7
hf_kill_pid "$a3"
n=$(jq -s 'map(select(.lost != null)) | length' "$HF_TMP/cut.jsonl")
[[ $n -ge 6 ]] || hf_fail "D: only $n requests with X-Hyperfarm-Lost-Primary reached the standby in 7 s (heartbeat 500 ms): $(tail -5 "$HF_TMP/agent-a3.log")"
grep -q "does not know agent id" "$HF_TMP/agent-a3.log" && hf_fail "D: a standby's 503 was read as an unknown agent"
hf_log "ok: D: dead primary named by the standby: $n lost-primary requests in 7 s"
hf_log "PASS"
