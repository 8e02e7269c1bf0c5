#!/usr/bin/env bash
# test_scheduler_repl_snapshot.sh — the bootstrap snapshot off the HTTP
# threads, the standby's check of its hash, and the peers of GET
# /api/v1/replication (issue 31; docs/scheduler.md "Standby and failover",
# docs/protocol.md "Replication"):
#
#   1. with --threads 1 (one HTTP worker) and a database of 256 MiB, a
#      snapshot request does not hold the worker: /healthz is answered
#      while the copy runs (before the snapshot's first byte), a second
#      snapshot meanwhile is refused 503 with Retry-After, and the first
#      arrives whole with its X-Hyperfarm-Sha256;
#   2. a real standby bootstrapping from tests/system/fake_primary.py
#      waits the Retry-After of a busy primary's 503 (3 s, where it
#      retries after 1 s otherwise), refuses a snapshot whose bytes do not
#      match its X-Hyperfarm-Sha256 and one without the header (a log line
#      naming both hashes; no database renamed into place), then takes
#      the good one;
#   3. peers: the standby lists its primary URLs, following the one that
#      answers (the second); the primary lists its --peers as its peer
#      check saw them (the standby: role and term; a dead URL: its error)
#      and the standby that streamed from it (address, ack, state);
#   4. a primary stopped while a snapshot request is parked in a copy
#      exits at once (well within 10 s) and cleanly (exit 0; the sanitizer
#      build's leak check runs at that exit).
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
command -v sqlite3 >/dev/null || hf_fail "sqlite3 (the command-line shell) is required"
hf_setup

AT=admin-token-0001
printf 'admin:%s\n' "$AT" >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
ports=()
while (( ${#ports[@]} < 4 )); do
  p=$(hf_free_port)
  [[ " ${ports[*]} " == *" $p "* ]] || ports+=("$p")
done
P=http://127.0.0.1:${ports[0]} S=http://127.0.0.1:${ports[1]} F=http://127.0.0.1:${ports[2]}
DEAD=http://127.0.0.1:${ports[3]}   # nothing listens there
P_DB=$HF_TMP/p/hf.db S_DB=$HF_TMP/s/hf.db
mkdir -p "$HF_TMP/p" "$HF_TMP/s"
now_ms() { date +%s%3N; }
A=(-H "Authorization: Bearer $AT")
repl() { curl -fsS -m 5 "${A[@]}" "$1/api/v1/replication"; }

start_p() {
  "$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:${ports[0]}" --db "$P_DB" --token-file "$HF_TMP/tokens" \
    --threads 1 --peers "$S,$DEAD" >>"$HF_TMP/P.log" 2>&1 &
  PID_P=$!
  hf_track "$PID_P"
  hf_wait_http "$P/healthz" 30 || hf_fail "the primary did not answer /healthz in 30 s"
}
copies() { grep -c 'snapshot for 127.0.0.1: copying' "$HF_TMP/P.log" || true; }

# ---- a small snapshot for the fake primary, then a primary of 256 MiB
start_p
curl -fsS -m 30 "${A[@]}" -D "$HF_TMP/g.h" -o "$HF_TMP/good.db" "$P/api/v1/replication/snapshot" || hf_fail "small snapshot"
hdr() { tr -d '\r' <"$1" | awk -F': ' -v k="$2" 'tolower($1) == k {print $2}'; }
CL=$(hdr "$HF_TMP/g.h" x-hyperfarm-cluster) L=$(hdr "$HF_TMP/g.h" x-hyperfarm-lsn)
GOOD_SHA=$(sha256sum "$HF_TMP/good.db" | cut -c1-64)
SCHEMA=$(repl "$P" | jq -r .schema)   # what a standby of this binary follows
[[ $(hdr "$HF_TMP/g.h" x-hyperfarm-sha256) == "$GOOD_SHA" ]] || hf_fail "the small snapshot's hash is not its header's"
hf_kill_pid "$PID_P"
sqlite3 "$P_DB" "CREATE TABLE pad(b BLOB);
  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 256) INSERT INTO pad SELECT zeroblob(1048576) FROM n;
  PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null || hf_fail "cannot pad the primary's database"
start_p
hf_log "primary of $(( $(stat -c %s "$P_DB") >> 20 )) MiB on $P (--threads 1)"

# ---- 1. the copy holds no HTTP worker; one copy at a time
d0=$(grep -c 'copied and hashed in' "$HF_TMP/P.log" || true)
t0=$(now_ms)
curl -sS -m 120 "${A[@]}" -D "$HF_TMP/s1.h" -o >(sha256sum | cut -c1-64 >"$HF_TMP/s1.sha") \
  -w '%{http_code} %{time_starttransfer} %{size_download}\n' "$P/api/v1/replication/snapshot" >"$HF_TMP/s1" &
s1=$!
hf_wait_for 30 eval '(( $(copies) >= 1 ))' || hf_fail "the snapshot copy did not start"
code=$(curl -sS -m 30 -o /dev/null -w '%{http_code}' "$P/healthz") || code=000
t_health_end=$(now_ms)
t_health=$(( t_health_end - t0 ))
code2=$(curl -sS -m 30 "${A[@]}" -D "$HF_TMP/s2.h" -o "$HF_TMP/s2" -w '%{http_code}' "$P/api/v1/replication/snapshot") || code2=000
wait "$s1"
read -r c1 first_s n1 <"$HF_TMP/s1"
t_first=$(awk -v s="$first_s" 'BEGIN {printf "%d", s * 1000}')
hf_log "snapshot: $c1 after $t_first ms ($n1 bytes); /healthz $code at +$t_health ms; a second snapshot $code2"
[[ $c1 == 200 ]] || hf_fail "the snapshot answered $c1"
[[ $code == 200 ]] || hf_fail "/healthz answered $code during the copy"
done_line=$(grep 'copied and hashed in' "$HF_TMP/P.log" | sed -n "$(( d0 + 1 ))p")   # this copy's end
ms=$(grep -o 'copied and hashed in [0-9]* ms' <<<"$done_line" | grep -o '[0-9]*' || true)
[[ -n $ms ]] && (( ms >= 300 )) || hf_fail "the copy took ${ms:-?} ms: too short to show anything (make the database larger)"
copy_end=$(hf_log_ms "$done_line")
(( t_health_end < copy_end )) ||
  hf_fail "/healthz was answered $(( t_health_end - copy_end )) ms after the copy ended, not while it ran: the copy held the one HTTP worker"
(( t_health < t_first )) || hf_fail "/healthz was answered at +$t_health ms, after the snapshot's first byte (+$t_first ms)"
[[ $code2 == 503 ]] || hf_fail "a second snapshot during the copy answered $code2: $(cat "$HF_TMP/s2")"
ra=$(hdr "$HF_TMP/s2.h" retry-after)
[[ $ra =~ ^[0-9]+$ ]] && (( ra >= 1 && ra <= 60 )) || hf_fail "the 503 has no Retry-After: $(cat "$HF_TMP/s2.h")"
jq -e '.error | test("one at a time")' "$HF_TMP/s2" >/dev/null || hf_fail "the 503's body: $(cat "$HF_TMP/s2")"
hf_wait_for 10 test -s "$HF_TMP/s1.sha" || hf_fail "no hash of the big snapshot's body"
[[ $(cat "$HF_TMP/s1.sha") == $(hdr "$HF_TMP/s1.h" x-hyperfarm-sha256) ]] || hf_fail "the big snapshot's body is not its hash"
(( n1 > 256 << 20 )) || hf_fail "the big snapshot has $n1 bytes"
hf_log "ok: copy of $ms ms off the worker, /healthz answered $(( copy_end - t_health_end )) ms before it ended, a second copy 503 (Retry-After $ra)"

# ---- 2. a real standby refuses bad snapshots from a fake primary
python3 - "$HF_TMP/good.db" "$HF_TMP/bad.db" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[len(b) // 2] ^= 0x5A   # one byte changed in transit
open(sys.argv[2], "wb").write(b)
EOF
BAD_SHA=$(sha256sum "$HF_TMP/bad.db" | cut -c1-64)
FAKE_SCHEMA=$SCHEMA python3 "$HF_REPO/tests/system/fake_primary.py" "${ports[2]}" "$HF_TMP/good.db" "$HF_TMP/bad.db" "$CL" "$L" \
  busy,corrupt,nohash,good "$HF_TMP/fake.jsonl" >"$HF_TMP/fake.log" 2>&1 &
hf_track "$!"
hf_wait_http "$F/api/v1/replication" 10 || hf_fail "the fake primary did not start"
"$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:${ports[1]}" --db "$S_DB" --token-file "$HF_TMP/tokens" \
  --standby-of "$DEAD,$F" --failover-after 0 >>"$HF_TMP/S.log" 2>&1 &
PID_S=$!
hf_track "$PID_S"
refused() { grep -c 'is refused' "$HF_TMP/S.log" || true; }
hf_wait_for 30 eval '(( $(refused) >= 2 ))' || hf_fail "the standby did not refuse the two bad snapshots"
[[ ! -e $S_DB ]] || hf_fail "a refused snapshot was renamed into place"
grep -q "SHA-256 $BAD_SHA, X-Hyperfarm-Sha256 says $GOOD_SHA" "$HF_TMP/S.log" ||
  hf_fail "the corrupted snapshot's refusal does not name both hashes: $(grep refused "$HF_TMP/S.log")"
grep -q "SHA-256 $GOOD_SHA, no valid X-Hyperfarm-Sha256" "$HF_TMP/S.log" ||
  hf_fail "the refusal of a snapshot without its hash: $(grep refused "$HF_TMP/S.log")"
hf_wait_http "$S/healthz" 30 || hf_fail "the standby did not start from the good snapshot"
[[ $(jq -s '[.[] | select(.path == "/api/v1/replication/snapshot")] | map(.mode) | join(",")' -r "$HF_TMP/fake.jsonl") == busy,corrupt,nohash,good ]] ||
  hf_fail "the fake served: $(cat "$HF_TMP/fake.jsonl")"
# after the 503 the standby came back when Retry-After said, not before
gap=$(jq -s '[.[] | select(.path == "/api/v1/replication/snapshot")] | ((.[1].t - .[0].t) * 1000 | floor)' "$HF_TMP/fake.jsonl")
(( gap >= 2900 && gap < 10000 )) || hf_fail "the snapshot request after the busy 503 (Retry-After: 3) came after $gap ms"
grep -q 'Retry-After: 3 s); retrying in 3 s' "$HF_TMP/S.log" || hf_fail "no log line of the busy primary: $(grep -i retry "$HF_TMP/S.log")"
grep -q "as announced) is $S_DB" "$HF_TMP/S.log" || hf_fail "no bootstrap from the good snapshot in the log"
hf_assert_eq "$(sqlite3 -readonly "$S_DB" 'SELECT cluster FROM repl_state')" "$CL" "the standby's cluster"
hf_log "ok: a busy primary's Retry-After kept ($gap ms), corrupted and unhashed snapshots refused, the good one taken"

# ---- 3. peers
following() { repl "$S" | jq -e --arg d "$DEAD" --arg f "$F" '.role == "standby" and .peers ==
  [{kind: "primary", url: $d, following: false}, {kind: "primary", url: $f, following: true}]' >/dev/null; }
hf_wait_for 15 following || hf_fail "the standby's peers: $(repl "$S" | jq -c .peers)"
p_peers() { repl "$P" | jq -e --arg s "$S" --arg d "$DEAD" '[.peers[] | select(.kind == "peer")] as $p |
  ($p | length) == 2 and $p[0].url == $s and $p[0].role == "standby" and $p[0].term == 1 and $p[0].error == null
  and $p[0].checked_ms_ago < 5000 and $p[1].url == $d and $p[1].role == null and ($p[1].error | length) > 0
  and ([.peers[] | select(.kind == "standby" and .address == "127.0.0.1")] | length) == 0' >/dev/null; }
hf_wait_for 15 p_peers || hf_fail "the primary's peers: $(repl "$P" | jq -c .peers)"
# a standby (curl) streams from the primary: listed by address, with its ack
CLP=$(repl "$P" | jq -r .cluster) LP=$(repl "$P" | jq .lsn)
[[ $(curl -sS -m 5 "${A[@]}" -o /dev/null -w '%{http_code}' \
  "$P/api/v1/replication/stream?cluster=$CLP&term=1&after=$LP") == 204 ]] || hf_fail "the primary's stream"
repl "$P" | hf_jq_assert '[.peers[] | select(.kind == "standby")] == [.peers[] | select(.kind == "standby")
  | select(.address == "127.0.0.1" and .acked_lsn == '"$LP"' and .state == "sync")] and
  ([.peers[] | select(.kind == "standby")] | length) == 1' "the streaming standby among the primary's peers"
hf_log "ok: peers of the standby, of the primary"

# ---- 4. stopping with a snapshot request parked
n0=$(copies)
curl -sS -m 60 "${A[@]}" -o /dev/null -w '%{http_code}' "$P/api/v1/replication/snapshot" >"$HF_TMP/s3" 2>/dev/null &
s3=$!
hf_wait_for 30 eval '(( $(copies) > n0 ))' || hf_fail "the third copy did not start"
t0=$(now_ms)
kill -TERM "$PID_P"
rc=0
wait "$PID_P" || rc=$?
took=$(( $(now_ms) - t0 ))
wait "$s3" || true
hf_log "the primary exited $rc in $took ms with a copy running; the client got $(cat "$HF_TMP/s3")"
(( rc == 0 )) || hf_fail "the primary exited $rc"
(( took < 10000 )) || hf_fail "stopping took $took ms with a snapshot copy running"
grep -q 'snapshot for 127.0.0.1 failed after [0-9]* ms: .*stopping' "$HF_TMP/P.log" ||
  hf_fail "the running copy was not ended by the stop: $(grep 'snapshot for' "$HF_TMP/P.log" | tail -2)"
hf_log "ok: stopped in $took ms"
