#!/usr/bin/env bash
# test_fault_sigterm.sh — a trial that ignores SIGTERM.
#
# The fake trial runs with --ignore-sigterm --spawn-child (a grandchild in
# its process group) and the experiment's grace period is 3 s. The test
# kills the trial through the API (POST /api/v1/trials/{id}/kill). The agent
# must send SIGTERM, wait the grace period, then SIGKILL the whole process
# group: the trial must still be alive 1.5 s after the kill request (SIGTERM
# was ignored and the agent waited), both processes must be gone within
# grace + heartbeat + 4 s, and the trial must end CANCELED. The agent and
# scheduler keep running.
source "$(dirname "$0")/fault_lib.sh"
ft_require hyperfarm-scheduler hyperfarm-agent tests/fake_trial jq curl

GRACE_MS=3000
ft_start_scheduler
ft_start_agent a1 1
exp=$(ft_submit "$(FT_TRIAL_EXTRA="{\"grace_period_ms\": $GRACE_MS}" ft_experiment stubborn 1 1 0 --ignore-sigterm --spawn-child --epochs 1000 --sleep-ms 200)")
ft_wait 20 "trial running" bash -c "curl -sf '$FT_URL/api/v1/experiments/$exp/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null"
tid=$(ft_trials "$exp" | jq -r '.trials[0].id')
has_proc() { [[ -n $(ft_trial_procs) ]]; }
ft_wait 10 "the trial process visible" has_proc
read -r tpid _ <<<"$(ft_trial_procs | head -1)"
[[ -n $tpid ]] || ft_fail "no fake_trial process for trial $tid"
gchild=$(ft_stray_pids | grep -vx "$tpid" | while read -r p; do [[ $(awk '{print $4}' /proc/$p/stat 2>/dev/null) == "$tpid" ]] && echo "$p"; done | head -1)
ft_log "trial $tid runs as pid $tpid (grandchild ${gchild:-none}); killing it via the API, grace ${GRACE_MS} ms"
ft_api POST "/api/v1/trials/$tid/kill"; b=$FT_BODY
[[ $FT_STATUS == 200 ]] || ft_fail "POST /api/v1/trials/$tid/kill -> HTTP $FT_STATUS: $b"
t0=${EPOCHREALTIME/[,.]/}
sleep 1.5
kill -0 "$tpid" 2>/dev/null || ft_fail "the trial was gone 1.5 s after the kill although it ignores SIGTERM and the grace period is ${GRACE_MS} ms"
gone() { ! kill -0 "$tpid" 2>/dev/null && { [[ -z $gchild ]] || ! kill -0 "$gchild" 2>/dev/null; }; }
ft_wait $(( GRACE_MS / 1000 + 5 )) "the trial and its grandchild SIGKILLed after the grace period" gone
ms=$(( (${EPOCHREALTIME/[,.]/} - t0) / 1000 ))
ft_log "trial processes gone ~${ms} ms after the kill request"
ft_wait 10 "trial CANCELED" bash -c "curl -sf '$FT_URL/api/v1/trials/$tid' | jq -e '.state == \"CANCELED\"' >/dev/null"
kill -0 "${AGENT_PID[a1]}" 2>/dev/null || ft_fail "the agent died"
ft_healthy || ft_fail "the scheduler stopped answering"
ft_log "PASS: SIGTERM ignored -> SIGKILL to the process group after the grace period, trial CANCELED"
