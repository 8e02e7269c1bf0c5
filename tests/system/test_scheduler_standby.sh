#!/usr/bin/env bash
# test_scheduler_standby.sh — a standby scheduler on loopback (issue 31
# points 2-3; docs/scheduler.md "Standby and failover"): two real
# schedulers, a real agent, a token file with admin, user and agent tokens.
#
#   1. bootstrap: an empty standby of a primary whose first sweep finished
#      holds the same rows (sqlite3 .dump of experiments, trials,
#      checkpoints, contexts, metrics) and every checkpoint object;
#   2. live apply: while a second sweep with checkpoints runs, a checkpoint
#      the primary lists is present as an object on the standby;
#   3. read-only: a write to the standby is 503 with role "standby" and the
#      primary's URL; it serves a checkpoint download; a primary refuses
#      promotion (409);
#   4. promotion: the primary is killed, an admin promotes the standby
#      (202, term 2); it restarts itself as the primary of term 2 and the
#      second sweep finishes there (the agent follows its URL list);
#   5. fencing: the old primary restarted with --peers is fenced: it
#      refuses writes, its database is moved aside (hf.db.fenced-1-*), and
#      it rejoins as a standby of the new primary (bootstrapped, term 2);
#   6. a standby restarted with its database continues from its LSN: no
#      second bootstrap, and it catches up;
#   7. automatic promotion (--failover-after 2): the new primary is killed,
#      the two agents, both on the shared agent token (the witness counts
#      them by the agent id of their requests: two voters, a majority needs
#      both), reach the standby saying they lost the primary; the standby
#      promotes itself (term 3) and runs a sweep.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
command -v sqlite3 >/dev/null || hf_fail "sqlite3 (the command-line shell) is required"
hf_setup

AT=admin-token-0001 UT=user-token-00001 GT=agent-token-0001
printf 'admin:%s\nuser:%s\nagent:%s\n' "$AT" "$UT" "$GT" >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
printf '%s\n' "$GT" >"$HF_TMP/agent-token"

P_PORT=$(hf_free_port) S_PORT=$(hf_free_port)
while [[ $S_PORT == "$P_PORT" ]]; do S_PORT=$(hf_free_port); done
P=http://127.0.0.1:$P_PORT S=http://127.0.0.1:$S_PORT
P_DB=$HF_TMP/p/hf.db S_DB=$HF_TMP/s/hf.db
mkdir -p "$HF_TMP/p" "$HF_TMP/s"
COMMON=(--token-file "$HF_TMP/tokens" --agent-timeout 3000 --failover-after 0)

source "$(dirname "$0")/standby_lib.sh"

experiment() {  # NAME TRIALS EPOCHS SLEEP_MS
  jq -nc --arg n "$1" --argjson t "$2" --arg bin "$HF_BIN/tests/fake_trial" --arg e "$3" --arg s "$4" '{
    name: $n, objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: $t, max_concurrent_trials: 2, seed: 5},
    hyperparameters: {x: {type: "double", min: 0, max: 1}},
    trial: {command: [$bin, "--epochs", $e, "--sleep-ms", $s, "--ckpt-bytes", "4096"], max_restarts: 3},
    checkpoint_policy: {keep_latest: 1000, keep_best_trials: 1000}}'
}
exp_state() { call "$1" "$UT" GET "/api/v1/experiments/$2"; jq -r .state <<<"$HF_BODY"; }
exp_done() { [[ $(exp_state "$1" "$2") == COMPLETED ]]; }

TABLES="experiments trials checkpoints contexts metrics"
dump() { sqlite3 -readonly "$1" ".dump $TABLES" 2>/dev/null | grep -v '^PRAGMA\|^BEGIN\|^COMMIT'; }
same_rows() { [[ $(repl "$P" | jq .lsn) == $(repl "$S" | jq .applied_lsn) ]] && diff <(dump "$P_DB") <(dump "$S_DB") >/dev/null; }

# ---- a primary with a finished sweep
start_sched P "$P_PORT" "$P_DB" --checkpoint-dir "$HF_TMP/p/ck"
for a in a1 a2; do   # both on the shared agent token: two voters all the same
  "$HF_BIN/hyperfarm-agent" --scheduler "$P,$S" --name $a --slots 1 --workdir "$HF_TMP/agent-$a" \
    --token-file "$HF_TMP/agent-token" --sandbox-bind "$HF_TMP" --sandbox-bind "$HF_REPO:ro" \
    $([[ $HF_BIN/ == "$HF_REPO"/* ]] || echo --sandbox-bind "$HF_BIN:ro") >>"$HF_TMP/agent-$a.log" 2>&1 &
  hf_track "$!"
done
chmod 1777 "$HF_TMP"
call "$P" "$UT" POST /api/v1/experiments "$(experiment first 2 3 50)"
hf_assert_eq "$HF_STATUS" 201 "submit the first sweep: $HF_BODY"
E1=$(jq -r .id <<<"$HF_BODY")
hf_wait_for 40 exp_done "$P" "$E1" || hf_fail "the first sweep did not complete on the primary in 40 s"
role_is "$P" "primary 1" || hf_fail "the primary says $(repl "$P")"

# ---- 1. bootstrap of an empty standby
start_sched S "$S_PORT" "$S_DB" --checkpoint-dir "$HF_TMP/s/ck" --standby-of "$P"
role_is "$S" "standby 1" || hf_fail "the standby says $(repl "$S")"
grep -q "bootstrapping" "$HF_TMP/S.log" || hf_fail "the empty standby did not bootstrap"
# it names itself host:port in its stream requests (the host name's other
# characters as "-"): the primary lists it so
SB_NAME=$(hostname | tr -c 'A-Za-z0-9.\n-' '-'):$S_PORT
sb_listed() { repl "$P" | jq -e --arg n "$SB_NAME" '[.peers[] | select(.kind == "standby" and .name == $n)] | length == 1' >/dev/null; }
hf_wait_for 10 sb_listed || hf_fail "the primary does not list the standby as $SB_NAME: $(repl "$P" | jq -c .peers)"
hf_wait_for 15 same_rows || hf_fail "the standby's rows differ from the primary's: $(diff <(dump "$P_DB") <(dump "$S_DB") | head -5)"
n_ck=$(sqlite3 -readonly "$S_DB" "SELECT COUNT(*) FROM checkpoints WHERE sha256 IS NOT NULL")
(( n_ck > 0 )) || hf_fail "the first sweep left no checkpoint to replicate"
for sha in $(sqlite3 -readonly "$S_DB" "SELECT DISTINCT sha256 FROM checkpoints WHERE sha256 IS NOT NULL"); do
  f=$HF_TMP/s/ck/objects/${sha:0:2}/$sha
  [[ -f $f && $(sha256sum "$f" | cut -d' ' -f1) == "$sha" ]] || hf_fail "bootstrap: object $sha missing or wrong on the standby"
done
applied=$(repl "$S" | jq .applied_lsn)   # the agent's heartbeats keep committing: the metric is read after
curl -fsS -m 5 -H "Authorization: Bearer $UT" "$S/metrics" >"$HF_TMP/s.metrics" || hf_fail "the standby's /metrics"
grep -q '^hyperfarm_standby_bootstraps_total 1$' "$HF_TMP/s.metrics" || hf_fail "standby metrics: $(grep standby "$HF_TMP/s.metrics")"
m=$(awk '$1 == "hyperfarm_standby_applied_lsn" {print $2}' "$HF_TMP/s.metrics")
[[ -n $m && $applied =~ ^[0-9]+$ ]] && (( m >= applied )) ||
  hf_fail "hyperfarm_standby_applied_lsn $m, GET /replication applied_lsn $applied"
hf_log "ok: bootstrap ($n_ck checkpoints, rows identical)"

# ---- 2. live apply while a sweep with checkpoints runs
call "$P" "$UT" POST /api/v1/experiments "$(experiment second 4 8 300)"
hf_assert_eq "$HF_STATUS" 201 "submit the second sweep: $HF_BODY"
E2=$(jq -r .id <<<"$HF_BODY")
new_ck() {
  sqlite3 -readonly "$P_DB" "SELECT sha256 FROM checkpoints c JOIN trials t ON t.id = c.trial_id
    WHERE t.experiment_id = $E2 AND c.sha256 IS NOT NULL LIMIT 1" 2>/dev/null | grep -q .
}
hf_wait_for 30 new_ck || hf_fail "no checkpoint of the second sweep on the primary in 30 s"
sha=$(sqlite3 -readonly "$P_DB" "SELECT sha256 FROM checkpoints c JOIN trials t ON t.id = c.trial_id
  WHERE t.experiment_id = $E2 AND c.sha256 IS NOT NULL LIMIT 1")
hf_wait_for 3 test -f "$HF_TMP/s/ck/objects/${sha:0:2}/$sha" || hf_fail "checkpoint $sha of the primary is not on the standby"
hf_wait_for 5 eval '[[ $(sqlite3 -readonly "$S_DB" "SELECT COUNT(*) FROM checkpoints WHERE sha256 = '"'$sha'"'") -ge 1 ]]' ||
  hf_fail "the standby has no row of checkpoint $sha"
hf_log "ok: live apply (checkpoint $sha on the standby)"

# ---- 3. read-only standby
call "$S" "$UT" POST /api/v1/experiments "$(experiment refused 1 1 1)"
hf_assert_eq "$HF_STATUS" 503 "a write to the standby: $HF_BODY"
jq -e --arg p "$P" '.role == "standby" and .primary == $p and .term == 1' <<<"$HF_BODY" >/dev/null ||
  hf_fail "the standby's 503 body: $HF_BODY"
curl -fsS -m 5 -H "Authorization: Bearer $UT" -o "$HF_TMP/dl" "$S/api/v1/checkpoints/$sha" ||
  hf_fail "the standby does not serve checkpoint $sha"
hf_assert_eq "$(sha256sum "$HF_TMP/dl" | cut -d' ' -f1)" "$sha" "the checkpoint the standby serves"
call "$P" "$AT" POST /api/v1/replication/promote
hf_assert_eq "$HF_STATUS" 409 "promoting a primary: $HF_BODY"
hf_log "ok: read-only standby"

# ---- 4. the primary dies; an admin promotes the standby
kill -KILL "$PID_P"; wait "$PID_P" 2>/dev/null || true
call "$S" "$UT" POST /api/v1/replication/promote
hf_assert_eq "$HF_STATUS" 403 "promotion with a user token: $HF_BODY"
call "$S" "$AT" POST /api/v1/replication/promote
hf_assert_eq "$HF_STATUS" 202 "promotion: $HF_BODY"
hf_assert_eq "$(jq .term <<<"$HF_BODY")" 2 "the new term"
hf_wait_for 20 role_is "$S" "primary 2" || hf_fail "the promoted standby is not primary of term 2: $(repl "$S" || true)"
hf_alive "$PID_S" || hf_fail "the promoted scheduler's process is gone (it should re-execute itself)"
hf_wait_for 60 exp_done "$S" "$E2" || hf_fail "the second sweep did not finish on the new primary: $(exp_state "$S" "$E2")"
hf_log "ok: promoted to term 2, the sweep finished there"

# ---- 5. the old primary returns with --peers: fenced, moved aside, a standby of the new one
start_sched P "$P_PORT" "$P_DB" --checkpoint-dir "$HF_TMP/p/ck" --peers "$S"
hf_wait_for 20 role_is "$P" "standby 2" || hf_fail "the old primary did not rejoin as a standby of term 2: $(repl "$P" || true)"
ls "$HF_TMP"/p/hf.db.fenced-1-* >/dev/null 2>&1 || hf_fail "the old primary's database was not moved aside: $(ls "$HF_TMP/p")"
call "$P" "$UT" POST /api/v1/experiments "$(experiment refused 1 1 1)"
hf_assert_eq "$HF_STATUS" 503 "a write to the fenced old primary: $HF_BODY"
jq -e --arg s "$S" '.primary == $s' <<<"$HF_BODY" >/dev/null || hf_fail "the fenced one names another primary: $HF_BODY"
P_AGAIN_SAME() { [[ $(repl "$S" | jq .lsn) == $(repl "$P" | jq .applied_lsn) ]]; }
hf_wait_for 15 P_AGAIN_SAME || hf_fail "the old primary does not catch up as a standby"
hf_log "ok: fenced and rejoined as a standby"

# ---- 6. a standby restarted with its database continues from its LSN
boots=$(grep -c "bootstrapping" "$HF_TMP/P.log")
hf_kill_pid "$PID_P"
start_sched P "$P_PORT" "$P_DB" --checkpoint-dir "$HF_TMP/p/ck" --peers "$S" --standby-of "$S" --failover-after 2
hf_wait_for 15 role_is "$P" "standby 2" || hf_fail "the restarted standby says $(repl "$P" || true)"
hf_assert_eq "$(grep -c "bootstrapping" "$HF_TMP/P.log")" "$boots" "a restarted standby bootstrapped again"
call "$S" "$UT" POST /api/v1/experiments "$(experiment third 1 1 10)"
hf_assert_eq "$HF_STATUS" 201 "a write to the new primary: $HF_BODY"
hf_wait_for 15 P_AGAIN_SAME || hf_fail "the restarted standby does not catch up"
grep -q "follows $S from lsn" "$HF_TMP/P.log" || hf_fail "the restarted standby did not continue from its LSN"
hf_log "ok: a restarted standby continues from its LSN"

# ---- 7. automatic promotion: the primary dies, the agents (two live
# witnesses on one shared token) tell the standby they lost it too; the
# standby promotes itself
kill -KILL "$PID_S"; wait "$PID_S" 2>/dev/null || true
hf_wait_for 30 role_is "$P" "primary 3" || hf_fail "the standby did not promote itself on the agent's vote: $(repl "$P" || true)"
grep -q "2 of 2 live agents lost it too: promoting" "$HF_TMP/P.log" ||
  hf_fail "no witness promotion by both agents in the log: $(grep 'live agents' "$HF_TMP/P.log" | tail -3)"
call "$P" "$UT" POST /api/v1/experiments "$(experiment fourth 1 2 10)"
hf_assert_eq "$HF_STATUS" 201 "a write to the automatically promoted primary: $HF_BODY"
hf_wait_for 30 exp_done "$P" "$(jq -r .id <<<"$HF_BODY")" || hf_fail "a sweep did not finish on the automatically promoted primary"
hf_log "ok: automatic promotion on the witness's vote (term 3)"
