#!/usr/bin/env bash
# test_scheduler_repl_schema.sh — a standby follows only a primary of its
# own schema version (issue 31; docs/scheduler.md "Standby and failover",
# docs/operations.md "Upgrading"). Migrations are not streamed (each side
# runs its own at start) and SQLite skips a changeset's table whose columns
# differ from the replica's, so a standby of another version would lose
# rows without a word. Checked:
#   1. a real primary says its schema version in GET /replication, and its
#      stream answers a standby of another version 409 reason "schema"
#      (nothing captured for it), one of its own version or one that does
#      not say (an older standby) as before;
#   2. a real standby whose primary (tests/system/fake_primary.py) is at
#      another schema version, or does not say it, neither bootstraps nor
#      follows: it logs why and waits, no snapshot asked, no database
#      written;
#   3. a real standby that follows and then gets the stream's 409 "schema"
#      (its primary was upgraded) stops applying and starts again without
#      moving its replica aside or bootstrapping again;
#   4. no migration after the replication's own (0015) uses the clock or
#      randomness, since each side runs it separately;
#   5. a frame over the standby's bound (64 MiB: one huge transaction) is
#      not retried forever: the standby stops reading at its header and
#      bootstraps, the snapshot holding that transaction.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
hf_setup

AT=admin-token-0001
printf 'admin:%s\n' "$AT" >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
ports=()
while (( ${#ports[@]} < 3 )); do
  p=$(hf_free_port)
  [[ " ${ports[*]} " == *" $p "* ]] || ports+=("$p")
done
P=http://127.0.0.1:${ports[0]} S=http://127.0.0.1:${ports[1]} F=http://127.0.0.1:${ports[2]}
mkdir -p "$HF_TMP/p" "$HF_TMP/s"
S_DB=$HF_TMP/s/hf.db
A=(-H "Authorization: Bearer $AT")
repl() { curl -fsS -m 5 "${A[@]}" "$1/api/v1/replication"; }
hdr() { tr -d '\r' <"$1" | awk -F': ' -v k="$2" 'tolower($1) == k {print $2}'; }

# ---- 1. the primary's side
"$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:${ports[0]}" --db "$HF_TMP/p/hf.db" --token-file "$HF_TMP/tokens" \
  >>"$HF_TMP/P.log" 2>&1 &
PID_P=$!
hf_track "$PID_P"
hf_wait_http "$P/healthz" 30 || hf_fail "the primary did not start"
V=$(repl "$P" | jq -r .schema)
[[ $V =~ ^[0-9]+$ ]] && (( V >= 15 )) || hf_fail "GET /replication's schema: '$V'"
curl -fsS -m 30 "${A[@]}" -D "$HF_TMP/g.h" -o "$HF_TMP/good.db" "$P/api/v1/replication/snapshot" || hf_fail "snapshot"
CL=$(hdr "$HF_TMP/g.h" x-hyperfarm-cluster) L=$(hdr "$HF_TMP/g.h" x-hyperfarm-lsn)
[[ $(sqlite3 -readonly "$HF_TMP/good.db" 'PRAGMA user_version') == "$V" ]] || hf_fail "the snapshot's user_version is not $V"
stream() {   # SCHEMA-PARAM -> status
  curl -sS -m 10 "${A[@]}" -o "$HF_TMP/st.body" -w '%{http_code}' \
    "$P/api/v1/replication/stream?cluster=$CL&term=1&after=$L$1"
}
code=$(stream "&schema=$((V + 1))")
[[ $code == 409 ]] || hf_fail "a standby of schema $((V + 1)) got $code from a primary of $V"
hf_jq_assert '.reason == "schema"' "the 409's reason" <"$HF_TMP/st.body"
grep -q "schema version $V, the standby's binary at $((V + 1))" "$HF_TMP/st.body" || hf_fail "the 409 says: $(cat "$HF_TMP/st.body")"
[[ $(stream "&schema=$((V - 1))") == 409 ]] || hf_fail "an older standby was not refused"
[[ $(stream "&schema=$V") == 204 ]] || hf_fail "a standby of the same schema: $(head -c 300 "$HF_TMP/st.body")"
[[ $(stream "") == 204 ]] || hf_fail "a standby that does not say its schema: $(head -c 300 "$HF_TMP/st.body")"
[[ $(stream "&schema=x") == 400 ]] || hf_fail "schema=x was not a 400"
hf_kill_pid "$PID_P"
hf_log "ok: the primary says schema $V and refuses a standby of another"

# ---- 2. a standby that never starts against another version
fake() {   # SCHEMA STREAM-MODE
  : >"$HF_TMP/fake.jsonl"
  FAKE_SCHEMA=$1 FAKE_STREAM=$2 python3 "$HF_REPO/tests/system/fake_primary.py" "${ports[2]}" "$HF_TMP/good.db" \
    "$HF_TMP/good.db" "$CL" "$L" good "$HF_TMP/fake.jsonl" >"$HF_TMP/fake.log" 2>&1 &
  PID_F=$!
  hf_track "$PID_F"
  hf_wait_http "$F/api/v1/replication" 10 || hf_fail "the fake primary did not start"
}
standby() {
  "$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:${ports[1]}" --db "$S_DB" --token-file "$HF_TMP/tokens" \
    --standby-of "$F" --failover-after 0 >>"$HF_TMP/S.log" 2>&1 &
  PID_S=$!
  hf_track "$PID_S"
}
snapshots() { jq -s '[.[] | select(.path == "/api/v1/replication/snapshot")] | length' "$HF_TMP/fake.jsonl"; }
for s in $((V + 1)) ""; do
  fake "$s" ""
  : >"$HF_TMP/S.log"
  standby
  hf_wait_for 15 grep -q "this standby's binary at $V: a standby follows only a primary of the same" "$HF_TMP/S.log" ||
    hf_fail "the standby did not refuse a primary at schema '${s:-unsaid}': $(tail -5 "$HF_TMP/S.log")"
  [[ -z $s ]] && { grep -q "(it does not say: an older hyperfarm)" "$HF_TMP/S.log" || hf_fail "an unsaid schema"; }
  sleep 1.5
  kill -0 "$PID_S" 2>/dev/null || hf_fail "the standby exited instead of waiting"
  [[ $(snapshots) == 0 ]] || hf_fail "it asked for a snapshot of another version"
  [[ ! -e $S_DB ]] || hf_fail "it wrote a database"
  curl -s -m 2 "$S/healthz" >/dev/null && hf_fail "it serves while its primary is of another version"
  hf_kill_pid "$PID_S"
  hf_kill_pid "$PID_F"
done
hf_log "ok: a standby waits, untouched, for a primary of its own version"

# ---- 3. a following standby whose primary turns into another version
fake "$V" schema409
: >"$HF_TMP/S.log"
standby
hf_wait_for 30 grep -q "applying stopped, the replica kept as it is" "$HF_TMP/S.log" ||
  hf_fail "the standby did not stop on the stream's 409 schema: $(tail -5 "$HF_TMP/S.log")"
hf_wait_for 15 eval '(( $(grep -c "follows .* from lsn" "$HF_TMP/S.log") >= 1 ))' ||
  hf_fail "it did not start again on its replica: $(tail -5 "$HF_TMP/S.log")"
sleep 2
[[ $(snapshots) == 1 ]] || hf_fail "it bootstrapped again ($(snapshots) snapshots)"
compgen -G "$S_DB.diverged-*" >/dev/null && hf_fail "the replica was moved aside: $(ls "$HF_TMP/s")"
[[ -e $S_DB ]] || hf_fail "the replica is gone"
grep -q "re-bootstrapping" "$HF_TMP/S.log" && hf_fail "it treated another version as divergence"
hf_kill_pid "$PID_S"
hf_kill_pid "$PID_F"
hf_log "ok: the replica kept and not bootstrapped again when the primary's version changed"

# ---- 4. migrations after 0015 are the same on both sides
for f in "$HF_REPO"/schema/*.sql; do
  n=$(basename "$f" | cut -c1-4)
  (( 10#$n > 15 )) || continue
  if grep -v '^ *--' "$f" | grep -qiE "'now'|random\(|current_(time|date|timestamp)"; then
    hf_fail "$f uses the clock or randomness: each side runs migrations on its own, so they must be deterministic"
  fi
done
hf_log "ok: migrations after 0015 use neither the clock nor randomness"

# ---- 5. a frame over the bound: bootstrap, not an endless retry
rm -rf "$HF_TMP/s"; mkdir -p "$HF_TMP/s"
fake "$V" toobig
: >"$HF_TMP/S.log"
standby
hf_wait_for 30 grep -q "the frame after lsn $L is over 64 MiB: bootstrapping from a snapshot instead" "$HF_TMP/S.log" ||
  hf_fail "the standby did not take the oversized frame for a bootstrap: $(tail -5 "$HF_TMP/S.log")"
hf_wait_for 30 eval '(( $(snapshots) >= 2 ))' || hf_fail "no second snapshot after the oversized frame ($(snapshots))"
compgen -G "$S_DB.diverged-*" >/dev/null || hf_fail "the replica that could not follow was not moved aside"
hf_kill_pid "$PID_S"
hf_kill_pid "$PID_F"
hf_log "ok: an oversized frame makes the standby bootstrap"
