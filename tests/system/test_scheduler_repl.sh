#!/usr/bin/env bash
# test_scheduler_repl.sh — the primary's replication log over HTTP
# (docs/scheduler.md "Replication", docs/protocol.md "Replication"), with
# curl playing the standby:
#
#   1. every answer carries X-Hyperfarm-Term and X-Hyperfarm-Role; state
#      "none" before any standby: a write is answered at once;
#   2. snapshot (X-Hyperfarm-LSN, -Cluster, -Sha256 = the body's hash), a
#      stream request with no new frame answers 204 after about 1 s and
#      brings the state to sync;
#   3. in sync a write's answer is held until a stream request
#      acknowledges its LSN: not answered while nobody acks, answered
#      right after the ack; the frames of that stream are consecutive from
#      after+1;
#   4. no ack for --standby-timeout: the held write is answered, the state
#      is degraded (/metrics says so, degraded_total 1; the standby is
#      "lost" among the peers), later writes do not wait; a returning
#      standby brings it back to sync (the peers list it by address, with
#      its ack and state sync);
#   5. 409 for another cluster, a standby ahead; 400 without after;
#   6. a request with a higher X-Hyperfarm-Term fences the primary: that
#      request and later writes answer 503 role fenced, GETs needing the
#      core too, /healthz and /api/v1/replication still answer;
#   7. REPLICATION_SYNC, REPLICATION_DEGRADED and FENCED are rows of the
#      events table, in that order.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
command -v sqlite3 >/dev/null || hf_fail "sqlite3 (the command-line shell) is required"
hf_setup

hf_start_scheduler --standby-timeout 3   # section 3 leaves about 1 s of margin under load
now_ms() { date +%s%3N; }
reg() { curl -sS -m 10 -o /dev/null -w '%{http_code}' -X POST "$HF_URL/api/v1/agents" \
  -d "{\"name\": \"$1\", \"slots\": 1, \"host\": \"127.0.0.1\"}"; }
repl() { curl -fsS -m 5 "$HF_URL/api/v1/replication"; }
stream() {  # AFTER OUT: prints the status
  curl -sS -m 5 -o "$2" -w '%{http_code}' "$HF_URL/api/v1/replication/stream?cluster=$CL&term=1&after=$1"
}

# ---- 1. headers, state none ---------------------------------------------------
curl -sS -m 5 -D "$HF_TMP/h1" -o /dev/null "$HF_URL/healthz"
grep -qi '^X-Hyperfarm-Term: 1' "$HF_TMP/h1" || hf_fail "no X-Hyperfarm-Term: $(cat "$HF_TMP/h1")"
grep -qi '^X-Hyperfarm-Role: primary' "$HF_TMP/h1" || hf_fail "no X-Hyperfarm-Role: $(cat "$HF_TMP/h1")"
repl | hf_jq_assert '.role == "primary" and .state == "none" and .standby == null and .mode == "sync"' \
  "a lone primary's replication status"
t0=$(now_ms); [[ $(reg a0) == 201 ]] || hf_fail "register a0"; t1=$(now_ms)
(( t1 - t0 < 1000 )) || hf_fail "a write waited $((t1 - t0)) ms with no standby"
hf_log "ok: headers, state none, writes do not wait"

# ---- 2. snapshot and an idle stream -------------------------------------------
curl -fsS -m 10 -D "$HF_TMP/sh" -o "$HF_TMP/snap.db" "$HF_URL/api/v1/replication/snapshot" || hf_fail "snapshot"
hdr() { tr -d '\r' <"$HF_TMP/sh" | awk -F': ' -v k="$1" 'tolower($1) == k {print $2}'; }
CL=$(hdr x-hyperfarm-cluster); L=$(hdr x-hyperfarm-lsn); SHA=$(hdr x-hyperfarm-sha256)
[[ -n $CL && -n $L ]] || hf_fail "snapshot headers: $(cat "$HF_TMP/sh")"
[[ $(sha256sum "$HF_TMP/snap.db" | cut -c1-64) == "$SHA" ]] || hf_fail "the snapshot's SHA-256 is not its header's"
[[ $(sqlite3 "$HF_TMP/snap.db" 'SELECT lsn FROM repl_state') == "$L" ]] || hf_fail "the snapshot's repl_state.lsn is not $L"
t0=$(now_ms); code=$(stream "$L" "$HF_TMP/f0"); t1=$(now_ms)
[[ $code == 204 ]] || hf_fail "an idle stream answered $code"
(( t1 - t0 >= 800 && t1 - t0 < 3000 )) || hf_fail "an idle stream answered after $((t1 - t0)) ms (expected about 1 s)"
repl | hf_jq_assert '.state == "sync" and .standby.connected and .standby.acked_lsn == '"$L" "sync after the stream"
hf_log "ok: snapshot at lsn $L, idle stream 204 after $((t1 - t0)) ms, state sync"

# ---- 3. a write waits for the ack ---------------------------------------------
( t0=$(now_ms); c=$(reg a1); echo "$c $(( $(now_ms) - t0 ))" >"$HF_TMP/w1" ) &
wpid=$!
sleep 0.7
[[ ! -s $HF_TMP/w1 ]] || hf_fail "a write was answered before the standby acknowledged it: $(cat "$HF_TMP/w1")"
code=$(stream "$L" "$HF_TMP/f1")
[[ $code == 200 ]] || hf_fail "the stream after the write answered $code"
first=$(od -An -tu1 -N8 "$HF_TMP/f1" | awk '{v = 0; for (i = 1; i <= NF; i++) v = v * 256 + $i; print v}')
[[ $first == $((L + 1)) ]] || hf_fail "the first frame is LSN $first, expected $((L + 1))"
N=$(repl | jq .lsn)
[[ ! -s $HF_TMP/w1 ]] || hf_fail "a write was answered before its LSN was acknowledged"
stream "$N" "$HF_TMP/f2" >/dev/null &
spid=$!
sleep 0.3
wait "$wpid"
read -r c1 ms1 <"$HF_TMP/w1"
[[ $c1 == 201 ]] || hf_fail "the held write answered $c1"
(( ms1 >= 700 && ms1 < 1900 )) || hf_fail "the held write took $ms1 ms"
wait "$spid"
hf_log "ok: a write was held until acknowledged ($ms1 ms), frames from $((L + 1))"

# ---- 4. degrade and come back ---------------------------------------------------
t0=$(now_ms); c=$(reg a2); ms=$(( $(now_ms) - t0 ))
[[ $c == 201 ]] || hf_fail "register a2 answered $c"
(( ms >= 500 && ms < 5000 )) || hf_fail "a write with a silent standby took $ms ms (--standby-timeout 3)"
repl | hf_jq_assert '.state == "degraded" and ([.peers[] | select(.kind == "standby")][0].state == "lost")' \
  "degraded after the standby went silent, the standby lost among the peers"
curl -fsS -m 5 "$HF_URL/metrics" >"$HF_TMP/metrics"
grep -q '^hyperfarm_replication_state{state="degraded"} 1' "$HF_TMP/metrics" || hf_fail "/metrics: not degraded"
grep -q '^hyperfarm_replication_degraded_total 1' "$HF_TMP/metrics" || hf_fail "/metrics: degraded_total"
t0=$(now_ms); [[ $(reg a3) == 201 ]] || hf_fail "register a3"; ms=$(( $(now_ms) - t0 ))
(( ms < 1000 )) || hf_fail "a degraded primary still waited $ms ms"
# The REPLICATION_DEGRADED row is written by the core's next tick, so it
# may land after N is read: the standby is then one frame short of the
# target it came back to (catching_up). Like a real standby it asks again
# from what it has (at most 3 times) until the primary says sync.
for _ in 1 2 3; do
  N=$(repl | jq .lsn)
  code=$(stream "$N" "$HF_TMP/f3")
  [[ $code == 20[04] ]] || hf_fail "the returning standby's stream answered $code"
  [[ $(repl | jq -r .state) == sync ]] && break
done
repl | hf_jq_assert '.state == "sync" and ([.peers[] | select(.kind == "standby")] | length == 1 and
  .[0].address == "127.0.0.1" and .[0].acked_lsn == '"$N"' and .[0].state == "sync" and .[0].last_seen_ms_ago < 2000)' \
  "sync again once the standby caught up, and so is the standby among the peers"
hf_log "ok: degraded, later writes free ($ms ms), back to sync"

# ---- 5. refusals --------------------------------------------------------------
[[ $(curl -sS -m 5 -o "$HF_TMP/e" -w '%{http_code}' "$HF_URL/api/v1/replication/stream?cluster=x&term=1&after=0") == 409 ]] &&
  jq -e '.reason == "cluster"' "$HF_TMP/e" >/dev/null || hf_fail "another cluster: $(cat "$HF_TMP/e")"
[[ $(stream 99999999 "$HF_TMP/e") == 409 ]] && jq -e '.reason == "ahead"' "$HF_TMP/e" >/dev/null ||
  hf_fail "ahead: $(cat "$HF_TMP/e")"
[[ $(curl -sS -m 5 -o /dev/null -w '%{http_code}' "$HF_URL/api/v1/replication/stream?cluster=$CL&term=1") == 400 ]] ||
  hf_fail "no after: not 400"
for bad in '' 'a%20b' 'x%3Cb%3E' "$(printf 'h%.0s' {1..64})" 'a/b'; do
  [[ $(curl -sS -m 5 -o "$HF_TMP/e" -w '%{http_code}' "$HF_URL/api/v1/replication/stream?cluster=$CL&term=1&after=0&name=$bad") == 400 ]] &&
    jq -e '.field == "name"' "$HF_TMP/e" >/dev/null || hf_fail "name=$bad: $(cat "$HF_TMP/e")"
done
hf_log "ok: 409 cluster/ahead, 400 (no after; names that are not host:port)"

# ---- 5b. two standbys behind one address: listed apart by their names ----------
N=$(repl | jq .lsn)
for nm in sb-one:9001 sb-two:9002; do
  [[ $(curl -sS -m 5 -o /dev/null -w '%{http_code}' "$HF_URL/api/v1/replication/stream?cluster=$CL&term=1&after=$N&name=$nm") == 20[04] ]] ||
    hf_fail "the stream with name=$nm"
done
repl | hf_jq_assert '[.peers[] | select(.kind == "standby" and .address == "127.0.0.1" and (.name == "sb-one:9001" or .name == "sb-two:9002"))] | length == 2' \
  "two standbys of one address, two entries"
"$HF_BIN/hyperfarm" --url "$HF_URL" replication >"$HF_TMP/cli-repl" || hf_fail "hyperfarm replication: $(cat "$HF_TMP/cli-repl")"
for nm in sb-one:9001 sb-two:9002; do
  grep -q " standby 127.0.0.1 ($nm): sync" "$HF_TMP/cli-repl" || hf_fail "hyperfarm replication does not list $nm: $(cat "$HF_TMP/cli-repl")"
done
hf_log "ok: two standbys behind one address are two entries (API and CLI)"

# ---- 6. fencing ---------------------------------------------------------------
code=$(curl -sS -m 5 -o "$HF_TMP/e" -w '%{http_code}' -H 'X-Hyperfarm-Term: 7' -X POST "$HF_URL/api/v1/agents" \
  -d '{"name": "a4", "slots": 1, "host": "127.0.0.1"}')
[[ $code == 503 ]] || hf_fail "a request of a higher term answered $code"
hf_jq_assert '.role == "fenced" and .term == 1' "the fenced 503 body" <"$HF_TMP/e"
[[ $(reg a5) == 503 ]] || hf_fail "a fenced primary took a write"
[[ $(curl -sS -m 5 -o /dev/null -w '%{http_code}' "$HF_URL/api/v1/experiments") == 503 ]] ||
  hf_fail "a fenced primary served a GET that needs the core"
curl -sS -m 5 -D "$HF_TMP/h2" -o /dev/null "$HF_URL/healthz"
grep -qi '^X-Hyperfarm-Role: fenced' "$HF_TMP/h2" || hf_fail "/healthz of a fenced primary: $(cat "$HF_TMP/h2")"
repl | hf_jq_assert '.role == "fenced"' "the status says fenced"
grep -q 'fenced, every write refused' "$HF_TMP/scheduler.log" || hf_fail "the fencing is not logged"
hf_log "ok: fenced by a higher term"

# ---- 7. the operator events are rows of the events table ------------------------
ev() { sqlite3 -readonly "$HF_DB" "SELECT count(*) FROM events WHERE type = '$1' AND experiment_id IS NULL"; }
hf_wait_for 5 eval '(( $(ev FENCED) == 1 ))' || hf_fail "no FENCED events row ($(ev FENCED))"
(( $(ev REPLICATION_DEGRADED) == 1 )) || hf_fail "REPLICATION_DEGRADED rows: $(ev REPLICATION_DEGRADED)"
(( $(ev REPLICATION_SYNC) == 1 )) || hf_fail "REPLICATION_SYNC rows (back after the degrade; not the first sync): $(ev REPLICATION_SYNC)"
order=$(sqlite3 -readonly "$HF_DB" "SELECT group_concat(type, ' ') FROM (SELECT type FROM events WHERE type IN
  ('REPLICATION_SYNC', 'REPLICATION_DEGRADED', 'FENCED') ORDER BY time, id)")
[[ $order == *"REPLICATION_DEGRADED REPLICATION_SYNC"*FENCED ]] || hf_fail "the operator events' order: $order"
hf_log "ok: operator events as rows: $order"
hf_stop_scheduler
