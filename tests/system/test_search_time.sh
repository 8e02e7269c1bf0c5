#!/usr/bin/env bash
# test_search_time.sh — ASHA with rungs in seconds of training end to end
# (docs/search.md "Rungs in seconds (time_metric)").
#
# A real scheduler and agent (2 slots); ASHA with "time_metric":
# "epoch_seconds", min_time 0.2 s, max_time 1.8 s (rungs 0.2, 0.6, 1.8),
# eta 3, 9 trials of at most 200 epochs, over tests/progs/fake_trial
# --report-seconds, whose epoch takes the hyperparameter sleep_ms (20 or
# 150 ms) and reports its measured seconds. The scheduler is killed (-9)
# once 4 trials have stopped at a rung, and restarted. Checks:
#   1. the sweep completes; every run of a trial ended (the trial's log:
#      "stop requested") soon after the report whose summed epoch_seconds
#      reached a rung (0.2, 0.6 or 1.8 s): within 0.3 s of training, though
#      agents heartbeat only every second here (--heartbeat-fast-ms 1000):
#      the assignments name the objective as "prompt_metric", so the agent
#      sends each report of it at once and the stop comes back in that
#      heartbeat's reply (measured:
#      at most one 20 ms epoch past the rung); a 20 ms trial's first rung
#      came after more epochs than any 150 ms trial's. A run alive while the
#      scheduler was down (from the kill until the agent registered again)
#      can get its stop only after that: it must stop at or past a rung,
#      and it may have passed more than one (the restarted scheduler sees
#      them in one report);
#   2. a promoted trial continued from its checkpoint: its val_acc epochs
#      are 1, 2, ... n with none repeated or skipped, across its runs. The
#      checkpoints are padded to 200 kB (--ckpt-bytes), so a promotion
#      often comes while the upload of the stopped run's last checkpoint
#      is still under way and the store's newest is older: the agent then
#      keeps the trial's newer local file of the same name (fake_trial
#      keeps one file) rather than restoring the older one over it, which
#      would repeat epochs (docs/agent.md, "Checkpoints travel");
#   3. the searcher's rungs: 9 results at 0.2 s, 3 at 0.6 s, 1 at 1.8 s
#      (one in three promoted), "resource": "time"; each the trials whose
#      seconds reached it (a run that passed two rungs while the scheduler
#      was down adds one result to the upper one);
#   4. after another kill -9 and restart the replayed searcher's state
#      equals the live one's.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup
HF_SCHED_ARGS="${HF_SCHED_ARGS:-} --heartbeat-fast-ms 1000"

hf_start_scheduler
hf_start_agent a1 --slots 2

exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "time-rungs",
  objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "asha", max_trials: 9, max_concurrent_trials: 2, seed: 3, max_epochs: 200,
             reduction_factor: 3, time_metric: "epoch_seconds", min_time: 0.2, max_time: 1.8},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, lr: {type: "log", min: 0.01, max: 1},
                    sleep_ms: {type: "categorical", values: [20, 150]}},
  trial: {command: [$prog, "--report-seconds", "--ckpt-bytes", "200000"], max_restarts: 0}
}')
id=$(hf_submit "$exp")
hf_log "submitted experiment $id"
stopped_4() { hf_get "/api/v1/experiments/$id" | jq -e '.counts.stopped >= 4' >/dev/null; }
hf_wait_for 60 stopped_4 || hf_fail "4 trials did not stop at a rung in 60 s"
t_kill=$(date +%s%3N)
hf_stop_scheduler KILL
hf_restart_scheduler
t_ready=$(date +%s%3N)
hf_log "scheduler restarted with $(hf_get "/api/v1/experiments/$id" | jq -c .counts)"
hf_wait_experiment "$id" 120
x=$(hf_get "/api/v1/experiments/$id")
jq -e '.state == "COMPLETED"' <<<"$x" >/dev/null || hf_fail "experiment: $(jq -c '{state, counts}' <<<"$x")"

# ---- 1 and 2: stops at the rung times, continued from checkpoints ------------
trials=$(hf_get "/api/v1/experiments/$id/trials")
hf_assert_eq "$(jq '.trials | length' <<<"$trials")" 9 "9 trials"
# Back: the restarted scheduler answered, and the agent registered again
# if it noticed the outage (a heartbeat in it failed).
t_back=$t_ready
while read -r line; do
  t=$(hf_log_ms "$line"); (( t > t_kill )) && { (( t > t_back )) && t_back=$t; break; }
done < <(grep 'registered with' "$HF_TMP/agent-a1.log")
hf_log "the scheduler was out for the agent $((t_back - t_kill)) ms"
# run_exempt T: one boolean per run (attempt) of trial T, in order: was it
# alive while the scheduler was down?
run_exempt() {
  local a s e
  for a in $(grep -oE " trial $1 attempt [0-9]+ started:" "$HF_TMP/agent-a1.log" | awk '{print $4}'); do
    s=$(hf_log_ms "$(grep -m1 " trial $1 attempt $a started:" "$HF_TMP/agent-a1.log")")
    e=$(grep -m1 " trial $1 attempt $a exited:" "$HF_TMP/agent-a1.log") || hf_fail "trial $1 attempt $a never exited"
    e=$(hf_log_ms "$e")
    (( s < t_back && e > t_kill )) && echo true || echo false
  done | jq -sc .
}
firsts=()
nexempt=0
reach=()  # per trial: how many rungs its summed seconds reached
free=()   # per exempt run that passed more than one rung: the rungs passed beyond its first
for t in $(jq -r '.trials[].id' <<<"$trials"); do
  m=$(hf_get "/api/v1/trials/$t/metrics?limit=10000")
  eps=$(jq -c '[.metrics[] | select(.name == "val_acc") | .epoch]' <<<"$m")
  jq -e '. == [range(1; length + 1)]' <<<"$eps" >/dev/null || hf_fail "trial $t: val_acc epochs $eps (repeated or skipped)"
  secs=$(jq -c '[.metrics[] | select(.name == "epoch_seconds") | .value]' <<<"$m")
  sleep_ms=$(jq -r --argjson t "$t" '.trials[] | select(.id == $t) | .hparams.sleep_ms' <<<"$trials")
  # The rungs reached: each the first epoch whose running sum of seconds reaches it.
  hits=$(jq -c '[foreach .[] as $s (0; . + $s; .)] as $c
    | [0.2, 0.6, 1.8] | map(. as $r | ($c | map(. >= $r * (1 - 1e-9)) | index(true)) | if . == null then null else . + 1 end)
    | map(select(. != null))' <<<"$secs")
  # Where each of its runs stopped, from its log.
  stops=$(hf_get "/api/v1/trials/$t/logs?limit=10000" | jq -r '.logs[].line' |
    sed -n 's/^stop requested: checkpoint at epoch \([0-9]*\) saved.*/\1/p' | jq -sc .)
  # Run i stops at or past the next rung not yet passed, within 0.3 s of
  # training after it unless the run was alive while the scheduler was down.
  ex=$(run_exempt "$t")
  chk=$(jq -c --argjson h "$hits" --argjson s "$secs" --argjson x "$ex" '. as $st | (length == ($x | length)) as $n |
    reduce range(length) as $i ({j: 0, ok: $n, free: []}; if .ok | not then . else $h[.j] as $r |
      if $r == null or $st[$i] < $r then .ok = false
      elif $x[$i] then ([$h[] | select(. <= $st[$i])] | length) as $j2 | .free += [range(.j + 1; $j2)] | .j = $j2
      else .ok = (($s[$r:$st[$i]] | add // 0) < 0.3) | .j += 1 end end)
    | .ok = (.ok and .j == ($h | length))' <<<"$stops")
  jq -e .ok <<<"$chk" >/dev/null ||
    hf_fail "trial $t ($sleep_ms ms): runs stopped at epochs $stops, rungs reached at epochs $hits, runs alive while the scheduler was down $ex (seconds $secs)"
  nexempt=$((nexempt + $(jq '[.[] | select(.)] | length' <<<"$ex")))
  free+=($(jq -r '.free[]' <<<"$chk"))
  reach+=("$(jq length <<<"$hits")")
  first=$(jq 'first' <<<"$hits")
  firsts+=("$sleep_ms $first")
  hf_log "trial $t: sleep $sleep_ms ms, rungs at epochs $hits, runs stopped at epochs $stops"
done
# Equal time, unequal epochs: every 20 ms trial reached the first rung at a
# later epoch than any 150 ms trial (how many depends on the machine's load).
cheap=$(printf '%s\n' "${firsts[@]}" | awk '$1 == 20 { if (m == "" || $2 < m) m = $2 } END { print m }')
dear=$(printf '%s\n' "${firsts[@]}" | awk '$1 == 150 { if ($2 > m) m = $2 } END { print m + 0 }')
[[ -n $cheap && $dear -gt 0 ]] || hf_fail "the sweep drew only one of the two costs: ${firsts[*]}"
(( cheap > dear )) || hf_fail "a 20 ms trial reached the first rung at epoch $cheap, a 150 ms one at $dear"
hf_log "ok: first rung after at least $cheap epochs of 20 ms, at most $dear of 150 ms"
kept=$(grep -c "kept its own checkpoint" "$HF_TMP/agent-a1.log" || true)
hf_log "promotions that kept the newer local checkpoint over the store's older one: $kept"
hf_log "ok: every run stopped within 0.3 s of training after its summed seconds reached a rung ($nexempt alive while the scheduler was down: at or past one), epochs contiguous across runs"
jq -e 'all(.trials[]; .state == "STOPPED")' <<<"$trials" >/dev/null ||
  hf_fail "not every trial ended STOPPED (at a rung or at max_time): $(jq -c '[.trials[].state]' <<<"$trials")"

# ---- 3. the rungs --------------------------------------------------------------
# A rung holds a result of every trial whose seconds reached it, and ASHA
# promoted the top third of the rung below: 9/3/1. A run that passed two
# rungs while the scheduler was down reached the upper one unpromoted, so
# that rung may hold up to one more result per such run.
st=$(hf_get "/api/v1/experiments/$id" | jq -c .searcher_state)
reach_j=$(printf '%s\n' "${reach[@]}" | jq -sc '[range(3) as $k | map(select(. > $k)) | length]')
free_j=$(printf '%s\n' "${free[@]}" | jq -sc '[range(3) as $k | map(select(. == $k)) | length]')
jq -e --argjson reach "$reach_j" --argjson free "$free_j" '.resource == "time" and
  ([.brackets[0].rungs[] | .results] as $r | $r == $reach and $r[0] == 9 and
   all(range(1; 3); ($r[. - 1] / 3 | floor) as $p | $r[.] >= $p and $r[.] <= $p + $free[.]))
  and ([.brackets[0].rungs[] | .time] == [0.2, 0.6000000000000001, 1.8] or
       ([.brackets[0].rungs[] | .time] | map(. * 10 | round)) == [2, 6, 18])' <<<"$st" >/dev/null ||
  hf_fail "searcher state: $st (rungs reached by the trials' seconds: $reach_j, passed unpromoted: $free_j)"
hf_log "ok: rungs 0.2/0.6/1.8 s hold $(jq -c '[.brackets[0].rungs[] | .results]' <<<"$st") results, as the trials' seconds reached them ($(jq -c . <<<"$free_j") passed while the scheduler was down)"

# ---- 4. replay -----------------------------------------------------------------
hf_stop_scheduler KILL
hf_restart_scheduler
st2=$(hf_get "/api/v1/experiments/$id" | jq -c .searcher_state)
hf_assert_eq "$st2" "$st" "the replayed searcher's state equals the live one's"
hf_log "ok"
