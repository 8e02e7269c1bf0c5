#!/usr/bin/env bash
# test_fault_scheduler_kill.sh — SIGKILL the scheduler mid-sweep, many times.
#
# One agent (4 slots) runs a 12-trial sweep of the fake trial (10 epochs of
# 0.6 s). $FAULT_KILLS times (default 20), after a random 0.3-2.5 s, the test
# records everything the API has acknowledged — experiment ids (201 on
# submit), trials, every metric row and every log row (by seq and value) —
# sometimes submits one more small experiment just before the kill, then
# SIGKILLs the scheduler and restarts it on the same database. After each
# restart nothing acknowledged may be missing or changed. A watchdog samples
# the trial processes every 0.1 s: no trial may ever run twice at once (two
# process groups, fault_lib.sh ft_trial_procs). At the end every trial must
# be COMPLETED without a restart (running trials were re-adopted, not
# requeued), and each must have its val_acc for every epoch 1..10 (the
# agent re-sent what the dead scheduler never acknowledged).
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

KILLS=${FAULT_KILLS:-20}
EPOCHS=10
RANDOM=${FAULT_SEED:-$$}
ft_log "seed $RANDOM, $KILLS kills"

ft_start_scheduler
ft_start_agent a1 4
ft_watch_doubles
main=$(ft_submit "$(ft_experiment sweep 12 4 0 --epochs $EPOCHS --sleep-ms 1500)")
exps=("$main")
ft_log "experiment $main submitted"
ft_wait 20 "a trial running" bash -c "curl -sf '$FT_URL/api/v1/experiments/$main/trials' | jq -e '[.trials[] | select(.state == \"RUNNING\")] | length > 0' >/dev/null"

snap=$FT_DIR/snap
mkdir -p "$snap"
# Snapshot everything acknowledged into $1: one "kind key value" line per row.
# (One curl for all URLs, one jq per kind: fast enough to run 40 times.)
snapshot() {
  local out=$1 d=$FT_DIR/snapdata e t args=()
  rm -rf "$d"; mkdir -p "$d"
  for e in "${exps[@]}"; do
    args+=("$FT_URL/api/v1/experiments/$e" -o "$d/exp.$e" "$FT_URL/api/v1/experiments/$e/trials" -o "$d/trials.$e")
  done
  curl -sf --fail-early -m 20 "${args[@]}" || return 1
  args=()
  for t in $(jq -r '.trials[].id' "$d"/trials.*); do
    args+=("$FT_URL/api/v1/trials/$t/metrics?limit=100000" -o "$d/m.$t" "$FT_URL/api/v1/trials/$t/logs?limit=100000" -o "$d/l.$t")
  done
  (( ${#args[@]} == 0 )) || curl -sf --fail-early -m 20 "${args[@]}" || return 1
  {
    jq -r '"exp \(.id) \(.name) \(.config.name)"' "$d"/exp.*
    jq -r '.trials[] | "trial \(.id) exp=\(.experiment_id) hparams=\(.hparams | tojson)"' "$d"/trials.*
    if compgen -G "$d/m.*" >/dev/null; then
      jq -r '(input_filename | sub(".*/m\\."; "")) as $t | .metrics[] | "metric \($t) seq=\(.seq) \(.name) step=\(.step) value=\(.value)"' "$d"/m.*
      jq -r '(input_filename | sub(".*/l\\."; "")) as $t | .logs[] | "log \($t) seq=\(.seq) \(.stream) \(.line)"' "$d"/l.*
    fi
  } | sort >"$out"
  [[ ${PIPESTATUS[0]} == 0 ]]
}

lost_total=0
for ((k = 1; k <= KILLS; k++)); do
  sleep "$(( RANDOM % 23 + 3 ))e-1"
  # Sometimes an experiment submitted right before the kill: a 201 is a promise.
  if (( RANDOM % 3 == 0 )); then
    ft_api POST /api/v1/experiments "$(ft_experiment "late-$k" 1 1 0 --epochs 2 --sleep-ms 100)"; b=$FT_BODY
    [[ $FT_STATUS == 201 ]] && exps+=("$(jq -r .id <<<"$b")")
  fi
  snapshot "$snap/before.$k" || ft_fail "kill $k: could not read the API before the kill"
  kill -KILL "$SCHED_PID"
  ft_wait_gone "$SCHED_PID" || ft_fail "the scheduler survived SIGKILL?"
  sleep "$(( RANDOM % 8 ))e-1"
  ft_start_scheduler
  snapshot "$snap/after.$k" || ft_fail "kill $k: could not read the API after the restart"
  # Every acknowledged line must still be there, unchanged.
  missing=$(comm -23 "$snap/before.$k" "$snap/after.$k")
  if [[ -n $missing ]]; then
    n=$(wc -l <<<"$missing"); lost_total=$((lost_total + n))
    ft_log "kill $k: $n acknowledged rows lost or changed, e.g.:"; head -5 <<<"$missing"
  fi
  ft_log "kill $k: $(grep -c '^metric' "$snap/before.$k") metric rows, $(grep -c '^log' "$snap/before.$k") log rows, $(grep -c '^trial' "$snap/before.$k") trials acknowledged; none lost: $([[ -z $missing ]] && echo yes || echo NO)"
done
(( lost_total == 0 )) || ft_fail "$lost_total acknowledged rows lost across $KILLS kills"

# Let the sweep finish.
done_all() {
  local e s
  for e in "${exps[@]}"; do
    s=$(curl -sf "$FT_URL/api/v1/experiments/$e" | jq -r .state) || return 1
    [[ $s == COMPLETED ]] || return 1
  done
}
ft_wait 90 "every experiment COMPLETED" done_all
ft_check_doubles || ft_fail "a trial ran twice at once"

# Re-adopted, not requeued: no restarts, all completed, every epoch's metric.
for e in "${exps[@]}"; do
  tr=$(ft_trials "$e")
  bad=$(jq -r '.trials[] | select(.state != "COMPLETED" or .restarts != 0) | "trial \(.id) state \(.state) restarts \(.restarts)"' <<<"$tr")
  [[ -z $bad ]] || ft_fail "experiment $e: trials not completed cleanly after scheduler kills: $bad"
  n=$(jq '.trials | length' <<<"$tr")
  want=$([[ $e == "$main" ]] && echo 12 || echo 1)
  [[ $n == "$want" ]] || ft_fail "experiment $e has $n trials, expected $want (duplicated or lost trials)"
  for t in $(jq -r '.trials[].id' <<<"$tr"); do
    ep=$([[ $e == "$main" ]] && echo $EPOCHS || echo 2)
    got=$(ft_get "/api/v1/trials/$t/metrics?name=val_acc&limit=100000" | jq '[.metrics[].step] | unique | length')
    [[ $got == "$ep" ]] || ft_fail "trial $t: val_acc for $got distinct steps, expected $ep (metrics lost)"
    dups=$(ft_get "/api/v1/trials/$t/metrics?name=val_acc&limit=100000" | jq '(.metrics | length) - ([.metrics[].step] | unique | length)')
    (( dups == 0 )) || ft_log "note: trial $t has $dups duplicated val_acc rows (re-sent after a kill)"
  done
done
ft_log "PASS: $KILLS scheduler kills, 0 acknowledged rows lost, no trial ran twice, all trials re-adopted"
