#!/usr/bin/env bash
# bench/standby/failover.sh — part b of bench/standby/run.sh: from the
# primary's power cut to the first trial dispatched by the new primary, with
# automatic promotion (issue #31), on the namespace harness
# tests/system/netns_lib.sh (run as root; it re-executes itself inside its
# own namespaces, like the multi-server tests).
#
# Each run: server "sched" (10.77.0.2, the primary), "stby" (10.77.0.3,
# --standby-of the primary, --failover-after SB_FAILOVER_AFTER), agents a1
# and a2 (two slots each, --scheduler PRIMARY,STANDBY: the witness) run a
# sweep of one-epoch fake trials (300 ms each, 4 at a time), so trials are
# dispatched all the time. Once 6 have completed and the primary is in
# state "sync", "sched" loses power (netns_poweroff: its pid namespace
# SIGKILLed). Measured on the standby's API: when it answers as primary
# (promotion), and the earliest ASSIGNED event of a trial that it assigned
# after the cut (the event's own time: no polling error). SB_RUNS runs
# (default 3), each on fresh servers. SB_DIAG_PROMOTE=1 (diagnosis only):
# a standby not promoted 20 s after the cut is promoted by command, and the
# run says so. Prints one line per run and
# STANDBY_FAILOVER {json} (median and max); exit 0 when every run measured.
source "$(dirname "$0")/../../tests/system/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
netns_setup
runs=${SB_RUNS:-3}
fa=${SB_FAILOVER_AFTER:-3}
P_URL=http://10.77.0.2:8080
S_URL=http://10.77.0.3:8080
TOKENS=/srv/hf/tokens-admin
FLAGS=(--checkpoint-dir /srv/hf/ck --token-file "$TOKENS" --agent-timeout 3000 --failover-after "$fa")
repl() { curl -fsS -m 2 "$1/api/v1/replication"; }
# each agent its own token: the witness counts agents by their token's name
TOK_A1=a1-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
TOK_A2=a2-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
tokens() { printf 'admin:%s\nagent:a1 %s\nagent:a2 %s\n' "$HF_TOKEN" "$TOK_A1" "$TOK_A2"; }
now_ms() { date +%s%3N; }

one_run() {   # RUN: sets RES="promote_ms dispatch_ms"
  local r=$1 id t_off t_prom="" t_disp="" deadline t tr a seen
  by_cmd=""
  netns_server sched 10.77.0.2
  tokens | netns_put sched "$TOKENS"
  netns_start_scheduler "${FLAGS[@]}"
  netns_server stby 10.77.0.3
  tokens | netns_put stby "$TOKENS"
  netns_spawn stby "$HF_TMP/standby-$r.log" "$HF_BIN/hyperfarm-scheduler" --listen 10.77.0.3:8080 --db /srv/hf/hf.db \
    "${FLAGS[@]}" --standby-of "$P_URL"
  hf_wait_for 30 bash -c "curl -fsS -m 2 $P_URL/api/v1/replication | jq -e '.state == \"sync\"' >/dev/null" ||
    hf_fail "run $r: the primary did not reach sync: $(repl "$P_URL")"
  NETNS_AGENT_URL=$P_URL,$S_URL
  HF_URL=$P_URL
  HF_AGENT_TOKEN=$TOK_A1 netns_start_agent a1 10.77.0.11 --slots 2
  HF_AGENT_TOKEN=$TOK_A2 netns_start_agent a2 10.77.0.12 --slots 2
  id=$(hf_submit "$(netns_fake_experiment "failover-$r" '{"name": "random", "max_trials": 2000, "max_concurrent_trials": 4, "seed": 1}' 0 \
    --epochs 1 --sleep-ms 300)")
  hf_wait_for 60 hf_exp_completed_at_least "$id" 6 || hf_fail "run $r: 6 trials did not complete in 60 s"
  hf_wait_for 10 bash -c "curl -fsS -m 2 $P_URL/api/v1/replication | jq -e '.state == \"sync\"' >/dev/null" ||
    hf_fail "run $r: the primary is not in sync: $(repl "$P_URL")"
  t_off=$(now_ms)
  netns_poweroff sched
  HF_URL=$S_URL
  deadline=$((t_off + 60000))
  declare -A seen=()
  while (( $(now_ms) < deadline )); do
    if [[ -z $t_prom ]] && repl "$S_URL" 2>/dev/null | jq -e '.role == "primary"' >/dev/null; then t_prom=$(now_ms); fi
    if [[ -z $t_prom && -n ${SB_DIAG_PROMOTE:-} && -z $by_cmd ]] && (( $(now_ms) - t_off > 20000 )); then
      by_cmd=1   # diagnosis: no automatic promotion in 20 s; promote by command to measure the rest
      curl -fsS -m 10 -X POST "$S_URL/api/v1/replication/promote" >/dev/null || true
    fi
    if [[ -n $t_prom ]]; then
      tr=$(curl -fsS -m 2 "$S_URL/api/v1/experiments/$id/trials" 2>/dev/null) || { sleep 0.1; continue; }
      for t in $(jq -r '.trials[] | select(.state != "QUEUED") | .id' <<<"$tr"); do
        [[ -n ${seen[$t]:-} ]] && continue
        a=$(curl -fsS -m 2 "$S_URL/api/v1/trials/$t" 2>/dev/null |
            jq -r --argjson o "$t_off" '[.events[]? | select(.type == "ASSIGNED" and .time > $o) | .time] | min // empty') || continue
        seen[$t]=1
        [[ -n $a ]] && { [[ -z $t_disp ]] || (( a < t_disp )); } && t_disp=$a
      done
      [[ -n $t_disp ]] && break
    fi
    sleep 0.1
  done
  [[ -n $t_prom && -n $t_disp ]] || hf_fail "run $r: promoted ${t_prom:+after $((t_prom - t_off)) ms}${t_prom:-never}, no trial dispatched in 60 s: $(repl "$S_URL" 2>&1); $(tail -5 "$HF_TMP/standby-$r.log")"
  RES="$((t_prom - t_off)) $((t_disp - t_off))${by_cmd:+ (promoted BY COMMAND after 20 s: SB_DIAG_PROMOTE)}"
  for n in a1 a2 stby; do netns_poweroff "$n"; done
  ip neigh flush all
}

out=()
any_cmd=""
for ((r = 1; r <= runs; r++)); do
  one_run "$r"
  res=$RES
  read -r pm dm note <<<"$res"
  echo "failover run $r (--failover-after $fa): promoted after $pm ms, first trial dispatched by the new primary after $dm ms (from the power cut)${note:+ $note}"
  out+=("$pm $dm")
  [[ -n $by_cmd ]] && any_cmd=1
done
pm=$(printf '%s\n' "${out[@]}" | cut -d' ' -f1 | sort -n)
dm=$(printf '%s\n' "${out[@]}" | cut -d' ' -f2 | sort -n)
med() { sed -n "$(( ($(wc -l <<<"$1") + 1) / 2 ))p" <<<"$1"; }
echo "STANDBY_FAILOVER {\"failover_after_s\": $fa, \"runs\": ${#out[@]}, \"promote_ms_median\": $(med "$pm"), \"promote_ms_max\": $(tail -1 <<<"$pm"), \"dispatch_ms_median\": $(med "$dm"), \"dispatch_ms_max\": $(tail -1 <<<"$dm")${any_cmd:+, \"by_command\": true}}"
hf_log "PASS"
