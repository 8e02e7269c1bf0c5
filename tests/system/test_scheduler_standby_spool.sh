#!/usr/bin/env bash
# test_scheduler_standby_spool.sh — the standby acknowledges what it has
# spooled and applies it behind (docs/scheduler.md "Receive, spool,
# acknowledge"), on loopback with two real schedulers:
#
#   1. while another process holds the replica's write lock (as a long
#      backup or a stuck reader-writer would), the standby cannot apply:
#      submissions to the synchronous primary are still answered (the
#      spool is fsynced), the primary stays in sync with the standby's ack
#      at its LSN, and the standby's applied LSN stays behind;
#   2. the standby is killed (SIGKILL) with those frames only in its spool
#      and restarted: it says it applies them first, catches up without a
#      second bootstrap, and its replica holds every acknowledged
#      experiment;
#   3. the same again, then the primary is killed and the standby promoted
#      while the lock still holds: the promotion waits for the spool to be
#      applied, and the new primary has every experiment the old one
#      acknowledged; no spool is left behind.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
command -v python3 >/dev/null || hf_fail "python3 is required (it holds the replica's write lock)"
hf_setup

AT=admin-token-0001 UT=user-token-00001
printf 'admin:%s\nuser:%s\n' "$AT" "$UT" >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
P_PORT=$(hf_free_port) S_PORT=$(hf_free_port)
while [[ $S_PORT == "$P_PORT" ]]; do S_PORT=$(hf_free_port); done
P=http://127.0.0.1:$P_PORT S=http://127.0.0.1:$S_PORT
P_DB=$HF_TMP/p/hf.db S_DB=$HF_TMP/s/hf.db
mkdir -p "$HF_TMP/p" "$HF_TMP/s"
COMMON=(--token-file "$HF_TMP/tokens" --failover-after 0 --standby-timeout 5)

source "$(dirname "$0")/standby_lib.sh"
experiment() {
  jq -nc --arg n "$1" '{name: $n, objective: {metric: "loss", goal: "minimize"},
    searcher: {name: "random", max_trials: 2, max_concurrent_trials: 1, seed: 3},
    hyperparameters: {x: {type: "double", min: 0, max: 1}}, trial: {command: ["true"]}}'
}
# Hold the replica's write lock from another process until killed.
LOCK_PID=
lock_replica() {
  rm -f "$HF_TMP/locked"
  python3 - "$S_DB" "$HF_TMP/locked" <<'EOF' &
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN IMMEDIATE")
open(sys.argv[2], "w").close()
time.sleep(600)
EOF
  LOCK_PID=$!
  hf_track "$LOCK_PID"
  hf_wait_for 30 test -f "$HF_TMP/locked" || hf_fail "could not take the replica's write lock"
}
unlock_replica() { kill "$LOCK_PID" 2>/dev/null; wait "$LOCK_PID" 2>/dev/null || true; }
submit() {  # NAME...: submit each to the primary, append the ids to IDS
  local n t0
  for n in "$@"; do
    t0=$(date +%s%N)
    call "$P" "$UT" POST /api/v1/experiments "$(experiment "$n")"
    hf_assert_eq "$HF_STATUS" 201 "submit $n while the replica is locked: $HF_BODY"
    IDS+=("$(jq -r .id <<<"$HF_BODY")")
    hf_log "submitted $n in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
}
# Every experiment the primary acknowledged is in the replica's rows
# (a standby answers the core's reads 503), or served by BASE (a primary).
has_all() {  # BASE | db
  local ids
  if [[ $1 == db ]]; then
    ids=$(python3 -c 'import sqlite3, sys; c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
for (i,) in c.execute("SELECT id FROM experiments"): print(i)' "$S_DB") || return 1
  else
    ids=$(curl -fsS -m 5 -H "Authorization: Bearer $UT" "$1/api/v1/experiments" | jq -r '.experiments[].id') || return 1
  fi
  for i in "${IDS[@]}"; do grep -qx "$i" <<<"$ids" || return 1; done
}
caught_up() { [[ $(repl "$P" | jq .lsn) == $(repl "$S" | jq .applied_lsn) ]]; }

start_sched P "$P_PORT" "$P_DB"
start_sched S "$S_PORT" "$S_DB" --standby-of "$P"
IDS=()
submit warm
hf_wait_for 20 eval '[[ $(repl "$P" | jq -r .state) == sync ]]' || hf_fail "the primary never reached sync: $(repl "$P")"
hf_wait_for 10 caught_up || hf_fail "the standby did not catch up: $(repl "$S")"

# ---- 1. the replica locked: acknowledged from the spool
lock_replica
submit one two three four five
st=$(repl "$P")
jq -e '.state == "sync" and .standby.acked_lsn == .lsn' <<<"$st" >/dev/null ||
  hf_fail "the primary is not in sync with the standby's ack at its LSN: $st"
applied=$(repl "$S" | jq .applied_lsn)
(( applied < $(jq .lsn <<<"$st") )) || hf_fail "the standby applied under the lock? applied $applied, primary $st"
[[ -s $S_DB.spool ]] || hf_fail "no spool beside the replica"
hf_log "ok: 5 submissions acknowledged while the replica could not apply (acked $(jq .standby.acked_lsn <<<"$st"), applied $applied)"

# ---- 2. the standby killed with them only in its spool
kill -KILL "$PID_S"; wait "$PID_S" 2>/dev/null || true
unlock_replica
start_sched S "$S_PORT" "$S_DB" --standby-of "$P"
hf_wait_for 15 caught_up || hf_fail "the restarted standby did not catch up: $(repl "$S")"
grep -q "received but not applied: applying them first" "$HF_TMP/S.log" ||
  hf_fail "the restarted standby did not apply its spool first: $(grep standby "$HF_TMP/S.log" | tail -5)"
hf_assert_eq "$(grep -c 'bootstrapping' "$HF_TMP/S.log")" 1 "bootstraps (only the first start's)"
hf_wait_for 10 has_all db || hf_fail "the replica lacks an acknowledged experiment (ids ${IDS[*]})"
hf_log "ok: a killed standby applied its spool at restart (applied $(repl "$S" | jq .applied_lsn))"

# ---- 3. promotion while the spool holds acknowledged frames
lock_replica
submit six seven eight
applied=$(repl "$S" | jq .applied_lsn) plsn=$(repl "$P" | jq .lsn)
(( applied < plsn )) || hf_fail "the standby applied under the lock? applied $applied, primary $plsn"
kill -KILL "$PID_P"; wait "$PID_P" 2>/dev/null || true
( sleep 2; kill "$LOCK_PID" 2>/dev/null ) &
call "$S" "$AT" POST /api/v1/replication/promote
hf_assert_eq "$HF_STATUS" 202 "promotion with frames still in the spool: $HF_BODY"
hf_wait_for 30 role_is "$S" "primary 2" || hf_fail "the standby is not primary of term 2: $(repl "$S" || true)"
has_all "$S" || hf_fail "the promoted primary lacks an experiment the old one acknowledged (ids ${IDS[*]})"
[[ ! -e $S_DB.spool ]] || hf_fail "the promoted primary kept its spool"
hf_log "ok: promoted after applying its spool; all ${#IDS[@]} acknowledged experiments there"
