#!/usr/bin/env bash
# bench/standby/run.sh — what a standby scheduler costs, and how fast it takes
# over (issue #31; docs/scheduler.md "Standby and failover",
# docs/operations.md "Standby, failover and fail-back"). Same machine, same
# run, one after the other:
#
#   a. a primary alone vs a primary with a synchronous standby
#      (--replication sync, the default; the standby a second
#      hyperfarm-scheduler --standby-of on loopback, its own directory on the
#      same disk): bin/bench/loadgen in ingestion mode (agents heartbeat back
#      to back, SB_PER_HB reports each): acknowledged reports/s and heartbeat
#      p50/p99; then paced agents (100, a heartbeat every 250 ms, one report):
#      heartbeat p99; then light load (4 agents, a heartbeat every 50 ms):
#      heartbeat p50/p99, where a write waits for one replication round
#      trip beside a cheap commit. Printed side by side with the ratio
#      (goal: within 20 %).
#      The primary's replication state is checked to be "sync" at the end
#      (a degraded primary would not be measuring the standby).
#   b. bench/standby/failover.sh (the namespace harness of
#      tests/system/netns_lib.sh: primary, standby --failover-after
#      SB_FAILOVER_AFTER, two real agents with both URLs running a sweep of
#      short fake trials): from the primary's power cut (its server's pid
#      namespace SIGKILLed) to the first trial the promoted standby assigns
#      (the trial's ASSIGNED event time), SB_RUNS times (goal: < 10 s).
#
# On one machine the standby would take the primary's CPU, which on its
# own server it never does: with SB_PIN=1 (the default where there are 2
# to 7 CPUs) the primary runs on CPU 0 alone and the standby and the
# load generator share the others, in both modes of part a, so "alone"
# and "sync" give the primary the same CPU and differ only by the
# replication (capture, streaming, the wait). SB_PIN=3 (the default from
# 8 CPUs): each process its own cores, as on three servers — the primary
# the first quarter of the CPUs, the standby the second, the load
# generator the other half. SB_PIN=0: no pinning, every process on every
# CPU (the standby's apply then competes with the primary: the 2-core
# figures of docs/operations.md §8 show both).
#
# `bench/run standby` runs it. Environment: HF_BIN (default ./bin),
# SB_AGENTS (ingestion agents, 10), SB_REPORTS (reports per trial, 600),
# SB_SKIP_PACED (set: no paced agents; their row says null),
# SB_PER_HB (100), SB_TMP (default /tmp: the disk under test), SB_KEEP (set:
# keep its directory, logs included), SB_SKIP_A /
# SB_SKIP_B (set: skip that part), SB_FAILOVER_AFTER (3), SB_RUNS (3).
# Exit 0 when all ran, 2 when something could not run.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
HF_BIN=${HF_BIN:-$PWD/bin}
export HF_BIN
agents=${SB_AGENTS:-10}
reports=${SB_REPORTS:-600}
per_hb=${SB_PER_HB:-100}
LG=$HF_BIN/bench/loadgen
[[ -x $LG && -x $HF_BIN/hyperfarm-scheduler ]] || { echo "standby: SKIP: build first (make)"; exit 2; }
ncpu=$(nproc)
pin=${SB_PIN:-$(( ncpu >= 8 ? 3 : ncpu >= 2 ? 1 : 0 ))}
(( pin == 3 && ncpu < 4 )) && pin=1
q=$(( ncpu / 4 ))
# pin_to ROLE: the taskset prefix for primary | standby | loadgen (empty: no pinning)
pin_to() {
  (( pin )) || return 0
  if (( pin == 3 )); then
    case $1 in
      primary) echo "taskset -c 0-$((q - 1))" ;;
      standby) echo "taskset -c $q-$((2 * q - 1))" ;;
      *) echo "taskset -c $((2 * q))-$((ncpu - 1))" ;;
    esac
  elif [[ $1 == primary ]]; then echo "taskset -c 0"; else echo "taskset -c 1-$((ncpu - 1))"; fi
}
tmp=$(mktemp -d "${SB_TMP:-/tmp}/hf-standby-XXXXXX")
pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  pids=()
}
cleanup() {
  stop_all
  if [[ -n ${SB_KEEP:-} ]]; then echo "standby: kept $tmp (the schedulers' logs and databases)"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
rc=0

ADM=adm-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
AGT=agt-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf 'admin:%s\nagent:%s\n' "$ADM" "$AGT" >"$tmp/tokens"
chmod 600 "$tmp/tokens"
field() { local v; v=$(sed -n 's/^LOADGEN //p' "$1" | jq -r ".$2"); echo "${v:-null}"; }   # null: no such figure
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) print "-"; else if (b > 0) printf "%.2f", a / b; else print "inf" }'; }
repl() { curl -fsS -m 3 -H "Authorization: Bearer $ADM" "$1/api/v1/replication"; }

# NAME ARGS...: start a scheduler on a free loopback port in $tmp/NAME;
# sets URL (and appends its pid to pids).
start_sched() {   # NAME ROLE ARGS...
  local name=$1 role=$2 port="" i; shift 2
  mkdir -p "$tmp/$name"
  $(pin_to "$role") "$HF_BIN/hyperfarm-scheduler" --listen 127.0.0.1:0 --db "$tmp/$name/hf.db" --token-file "$tmp/tokens" \
    --max-conns-per-ip 0 "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
  SPID=$!
  for ((i = 0; i < 150; i++)); do
    port=$(sed -n 's/.*ready on port \([0-9]*\).*/\1/p' "$tmp/$name.log" 2>/dev/null | tail -1)
    [[ -n $port ]] && break
    sleep 0.1
  done
  [[ -n $port ]] || { echo "standby: scheduler $name did not start:"; tail -5 "$tmp/$name.log"; return 1; }
  URL=http://127.0.0.1:$port
}

# ---- a. heartbeat p99 and ingestion, with and without a synchronous standby ----
declare -A rps p50 p99 pp99 lp50 lp99 state
run_a() {   # MODE: none | sync
  local mode=$1 purl ppid i
  start_sched "p-$mode" primary || return 1
  purl=$URL; ppid=$SPID
  if [[ $mode == sync ]]; then
    start_sched "s-$mode" standby --standby-of "$purl" || return 1
    for ((i = 0; i < 300; i++)); do
      repl "$purl" 2>/dev/null | jq -e '.state == "sync"' >/dev/null && break
      sleep 0.1
    done
    repl "$purl" | jq -e '.state == "sync"' >/dev/null || { echo "standby: the primary never reached sync: $(repl "$purl")"; return 1; }
  fi
  echo "standby: $mode: ingestion, $agents agents x 8 trials x $reports reports ($per_hb per heartbeat) ..."
  $(pin_to loadgen) "$LG" --url "$purl" --pid "$ppid" --agent-token "$AGT" --user-token "$ADM" --agents "$agents" --slots 8 \
    --trials $((agents * 8)) --reports "$reports" --per-hb "$per_hb" --values 1 --hb-ms 0 --threads 4 --probe-hz 5 \
    --max-seconds 90 --name-prefix "ing-$mode" >"$tmp/ing-$mode" 2>&1
  [[ $(field "$tmp/ing-$mode" reports_per_s) != null ]] || { tail -20 "$tmp/ing-$mode"; return 1; }
  rps[$mode]=$(field "$tmp/ing-$mode" reports_per_s)
  p50[$mode]=$(field "$tmp/ing-$mode" hb_p50_ms)
  p99[$mode]=$(field "$tmp/ing-$mode" hb_p99_ms)
  if [[ -n ${SB_SKIP_PACED:-} ]]; then
    pp99[$mode]=null
  else
  echo "standby: $mode: paced agents (100 x 2 slots, a heartbeat every 250 ms) ..."
  $(pin_to loadgen) "$LG" --url "$purl" --pid "$ppid" --agent-token "$AGT" --user-token "$ADM" --agents 100 --slots 2 --trials 200 \
    --reports 40 --per-hb 1 --values 4 --hb-ms 250 --threads 4 --probe-hz 5 --max-seconds 60 \
    --name-prefix "paced-$mode" >"$tmp/paced-$mode" 2>&1
  pp99[$mode]=$(field "$tmp/paced-$mode" hb_p99_ms)
  fi
  echo "standby: $mode: light load (4 agents x 1 slot, a heartbeat every 50 ms) ..."
  $(pin_to loadgen) "$LG" --url "$purl" --pid "$ppid" --agent-token "$AGT" --user-token "$ADM" --agents 4 --slots 1 --trials 4 \
    --reports 100 --per-hb 1 --values 1 --hb-ms 50 --threads 4 --probe-hz 0 --max-seconds 60 \
    --name-prefix "light-$mode" >"$tmp/light-$mode" 2>&1
  lp50[$mode]=$(field "$tmp/light-$mode" hb_p50_ms)
  lp99[$mode]=$(field "$tmp/light-$mode" hb_p99_ms)
  state[$mode]=$(repl "$purl" | jq -c '{state, lsn, standby: (.standby // null | if . then {acked_lsn, lag_ms} else null end)}')
  echo "standby: $mode: replication at the end: ${state[$mode]}"
  if [[ $mode == sync ]] && ! jq -e '.state == "sync"' <<<"${state[$mode]}" >/dev/null; then
    echo "standby: WARNING: the primary was not in sync at the end: the figures do not measure a synchronous standby"
    rc=2
  fi
  curl -fsS -m 3 -H "Authorization: Bearer $ADM" "$purl/metrics" | grep '^hyperfarm_replication_wait' >"$tmp/wait-$mode" || true
  stop_all
}
if [[ -z ${SB_SKIP_A:-} ]]; then
  if (( pin == 3 )); then echo "standby: pinned: the primary on CPUs 0-$((q - 1)), the standby on $q-$((2 * q - 1)), the load generator on $((2 * q))-$((ncpu - 1)) (SB_PIN=0: not)"
  elif (( pin )); then echo "standby: pinned: the primary on CPU 0, the standby and the load generator on CPUs 1-$((ncpu - 1)) (SB_PIN=0: not)"
  else echo "standby: not pinned: the primary, the standby and the load generator share all $ncpu CPUs"; fi
  if run_a none && run_a sync; then
    echo
    printf '%-44s %14s %14s %8s\n' "" "alone" "sync standby" "ratio"
    printf '%-44s %14s %14s %8s\n' "ingestion, acknowledged reports/s" "${rps[none]}" "${rps[sync]}" "$(ratio "${rps[sync]}" "${rps[none]}")"
    printf '%-44s %14s %14s %8s\n' "ingestion, heartbeat p50 ms" "${p50[none]}" "${p50[sync]}" "$(ratio "${p50[sync]}" "${p50[none]}")"
    printf '%-44s %14s %14s %8s\n' "ingestion, heartbeat p99 ms" "${p99[none]}" "${p99[sync]}" "$(ratio "${p99[sync]}" "${p99[none]}")"
    printf '%-44s %14s %14s %8s\n' "paced agents, heartbeat p99 ms" "${pp99[none]}" "${pp99[sync]}" "$(ratio "${pp99[sync]}" "${pp99[none]}")"
    printf '%-44s %14s %14s %8s\n' "light load, heartbeat p50 ms" "${lp50[none]}" "${lp50[sync]}" "$(ratio "${lp50[sync]}" "${lp50[none]}")"
    printf '%-44s %14s %14s %8s\n' "light load, heartbeat p99 ms" "${lp99[none]}" "${lp99[sync]}" "$(ratio "${lp99[sync]}" "${lp99[none]}")"
    [[ -s $tmp/wait-sync ]] && { echo "primary's commit waits for the standby (/metrics):"; sed 's/^/  /' "$tmp/wait-sync" | head -20; }
    echo "STANDBY_SYNC {\"alone_reports_per_s\": ${rps[none]}, \"sync_reports_per_s\": ${rps[sync]}, \"alone_hb_p99_ms\": ${p99[none]}, \"sync_hb_p99_ms\": ${p99[sync]}, \"alone_paced_hb_p99_ms\": ${pp99[none]}, \"sync_paced_hb_p99_ms\": ${pp99[sync]}, \"alone_light_hb_p50_ms\": ${lp50[none]}, \"sync_light_hb_p50_ms\": ${lp50[sync]}}"
  else
    echo "standby: part a did not run to the end"
    rc=2
  fi
fi

# ---- b. power cut to the first trial dispatched by the promoted standby -------
if [[ -z ${SB_SKIP_B:-} ]]; then
  echo
  echo "standby: failover on the namespace harness (--failover-after ${SB_FAILOVER_AFTER:-3}, ${SB_RUNS:-3} runs) ..."
  SB_FAILOVER_AFTER=${SB_FAILOVER_AFTER:-3} SB_RUNS=${SB_RUNS:-3} HF_TEST_NAME=standby-failover \
    bash bench/standby/failover.sh 2>"$tmp/failover.err" | tee "$tmp/failover.out"
  frc=${PIPESTATUS[0]}
  if [[ $frc -ne 0 ]]; then
    echo "standby: failover part failed (exit $frc):"; tail -15 "$tmp/failover.err"
    rc=2
  fi
fi
exit "$rc"
