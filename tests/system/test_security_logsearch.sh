#!/usr/bin/env bash
# test_security_logsearch.sh — issue 27 point 1: a log search never stalls
# anything else (docs/protocol.md "Log search").
#
# A real scheduler with a token file (users alice and bob, an agent token)
# and a trial whose log holds 200,000 lines of 200 'a's (written with the
# sqlite3 shell while the scheduler is stopped, as bench/logsearch.sh
# does). Then:
#   1. a back-reference pattern ((a*)*\1b) is 400 naming the construct;
#      a pattern that reaches the match limit is 400 "too costly";
#   2. 8 concurrent worst-case regex searches (4 per user) while /healthz
#      and an agent's heartbeat are timed every 50 ms: each stays < 1 s,
#      every search answers (200/400) or is refused (429 with
#      Retry-After) within 11 s, and the per-user limit refuses some;
#   3. two searches whose client hangs up after 1 s (curl --max-time 1)
#      free the user's slots: the user's next search is not refused;
#   4. SIGTERM while 8 searches run: the scheduler exits within 3 s.
# On the code before issue 27 (glibc regexec on the HTTP threads) the
# back-reference runs for minutes, 4 searches hold all 4 HTTP threads so
# /healthz and heartbeats wait seconds, and SIGTERM waits for them.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
command -v sqlite3 >/dev/null || hf_fail "needs the sqlite3 shell"
hf_setup

LINES=${HF_LOGSEARCH_LINES:-200000}
ALICE=alice-token-0123456789abcdef
BOB=bob-token-0123456789abcdef0
AGENT=agent-token-0123456789abcdef
printf 'user:alice %s\nuser:bob %s\nagent:%s\n' "$ALICE" "$BOB" "$AGENT" >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
HF_SCHED_ARGS="--token-file $HF_TMP/tokens --agent-timeout 60000"

hf_start_scheduler
exp=$(jq -n '{name: "logsearch-stall", objective: {metric: "loss", goal: "minimize"},
  searcher: {name: "random", max_trials: 1}, hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: ["/bin/true"]}}')
EXP=$(curl -fsS -m 10 -H "Authorization: Bearer $ALICE" -H 'Content-Type: application/json' \
  --data-binary "$exp" "$HF_URL/api/v1/experiments" | jq .id)
[[ $EXP =~ ^[0-9]+$ ]] || hf_fail "no experiment: $EXP"
hf_stop_scheduler
t0=$(date +%s)
sqlite3 "$HF_DB" <<SQL
PRAGMA journal_mode=WAL;
DELETE FROM trials WHERE experiment_id=$EXP;
INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES (1000, $EXP, 0, 'COMPLETED', '{"x":0.5}', 0, 0);
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < $LINES - 1)
INSERT INTO logs(trial_id,attempt,stream,line,time) SELECT 1000, 1, 'stdout', printf('%.200c', 'a'), i FROM n;
COMMIT;
SQL
hf_log "trial 1000: $LINES lines of 200 'a's written in $(( $(date +%s) - t0 )) s ($(du -h "$HF_DB" | cut -f1))"
hf_restart_scheduler
TRIAL=1000
AG=$(curl -fsS -m 10 -H "Authorization: Bearer $AGENT" -H 'Content-Type: application/json' \
  --data-binary '{"name":"probe","slots":1}' "$HF_URL/api/v1/agents" | jq .id)
[[ $AG =~ ^[0-9]+$ ]] || hf_fail "agent did not register: $AG"

# search TOKEN PATTERN OUT [CURL_ARGS...]: "status seconds" into OUT, body into OUT.body
search() {
  local tok=$1 pat=$2 out=$3; shift 3
  curl -sS -G -o "$out.body" -D "$out.hdr" -w '%{http_code} %{time_total}\n' -m 30 "$@" \
    -H "Authorization: Bearer $tok" --data-urlencode "grep=$pat" --data "regex=1" \
    "$HF_URL/api/v1/trials/$TRIAL/logs" >"$out" 2>/dev/null || echo "000 99" >"$out"
}

hf_log "1. refused constructs"
search "$ALICE" '(a*)*\1b' "$HF_TMP/br"
read -r st secs <"$HF_TMP/br"
[[ $st == 400 ]] || hf_fail "back-reference: $st $(cat "$HF_TMP/br.body")"
jq -e '.field == "grep" and (.error | test("back-references"))' "$HF_TMP/br.body" >/dev/null \
  || hf_fail "back-reference error does not name the construct: $(cat "$HF_TMP/br.body")"
awk -v s="$secs" 'BEGIN { exit !(s < 1) }' || hf_fail "back-reference refusal took $secs s"
search "$ALICE" '([a-z]+)*[0-9]' "$HF_TMP/costly"
read -r st secs <"$HF_TMP/costly"
[[ $st == 400 ]] && jq -e '.error | test("too costly")' "$HF_TMP/costly.body" >/dev/null \
  || hf_fail "a pattern over the match limit: $st $(cat "$HF_TMP/costly.body")"
hf_log "ok: 400 naming back-references; 400 too costly after $secs s"
for pat in '(a|aa)*b' '(a*)*b' '(x+x+)+y'; do
  search "$BOB" "$pat" "$HF_TMP/nested"
  read -r st secs <"$HF_TMP/nested"
  [[ $st == 200 ]] && jq -e '.logs == [] and .truncated == false' "$HF_TMP/nested.body" >/dev/null \
    || hf_fail "'$pat': $st $(cat "$HF_TMP/nested.body")"
  awk -v s="$secs" 'BEGIN { exit !(s < 11) }' || hf_fail "'$pat' took $secs s"
  hf_log "ok: '$pat' over the whole trial: no match, $secs s"
done

# probe OUT: /healthz and a heartbeat every 50 ms until $HF_TMP/probe.stop exists
probe() {
  local out=$1
  : >"$out"
  while [[ ! -e $HF_TMP/probe.stop ]]; do
    curl -sS -o /dev/null -m 5 -w 'healthz %{http_code} %{time_total}\n' "$HF_URL/healthz" >>"$out" 2>/dev/null \
      || echo "healthz 000 5" >>"$out"
    curl -sS -o /dev/null -m 5 -w 'heartbeat %{http_code} %{time_total}\n' -H "Authorization: Bearer $AGENT" \
      -H 'Content-Type: application/json' --data-binary '{}' "$HF_URL/api/v1/agents/$AG/heartbeat" \
      >>"$out" 2>/dev/null || echo "heartbeat 000 5" >>"$out"
    sleep 0.05
  done
}
# The worst case now: a polynomial pattern that stays under the match
# limit on every line (0.2 ms a line: the whole trial would take 40 s, so
# each search runs its full budget); then nested repetition.
PATS=('a.*a.*a.*[0-9]' 'a.*a.*a.*[0-9]' 'a.*a.*a.*[0-9]' 'a.*a.*a.*[0-9]' '(a|aa)*b' '(a*)*b' '(x+x+)+y' '(a|a?)+c')

hf_log "2. 8 concurrent worst-case searches while /healthz and heartbeats are timed"
rm -f "$HF_TMP/probe.stop"
probe "$HF_TMP/probe.txt" &
PROBE=$!
sleep 0.5
pids=()
for i in 0 1 2 3 4 5 6 7; do
  tok=$ALICE; ((i % 2)) && tok=$BOB
  search "$tok" "${PATS[i]}" "$HF_TMP/s$i" &
  pids+=($!)
  sleep 0.02   # in this order (slow ones first)
done
for p in "${pids[@]}"; do wait "$p"; done
touch "$HF_TMP/probe.stop"
wait "$PROBE"
n429=0; n200=0
for i in 0 1 2 3 4 5 6 7; do
  read -r st secs <"$HF_TMP/s$i"
  hf_log "  search $i '${PATS[i]}': $st in $secs s $(jq -c '{truncated, scanned, ms, error}' "$HF_TMP/s$i.body" 2>/dev/null)"
  awk -v s="$secs" 'BEGIN { exit !(s < 11) }' || hf_fail "search $i answered after $secs s (limit 11 s)"
  case $st in
    200|400) n200=$((n200 + 1)) ;;
    429) n429=$((n429 + 1))
         grep -qi '^Retry-After: [0-9]' "$HF_TMP/s$i.hdr" || hf_fail "429 without Retry-After"
         jq -e '.field == "grep" and (.error | test("too many log searches"))' "$HF_TMP/s$i.body" >/dev/null \
           || hf_fail "429 body: $(cat "$HF_TMP/s$i.body")" ;;
    *) hf_fail "search $i: status $st $(cat "$HF_TMP/s$i.body")" ;;
  esac
done
((n429 >= 2)) || hf_fail "the per-user limit (2) refused only $n429 of 8"
((n200 >= 2)) || hf_fail "only $n200 of 8 searches ran"
for what in healthz heartbeat; do
  stats=$(awk -v w=$what '$1 == w { n++; if ($2 != 200) bad++; if ($3 > max) max = $3 } END { printf "%d %d %.3f", n, bad, max }' \
    "$HF_TMP/probe.txt")
  read -r n bad max <<<"$stats"
  hf_log "  $what: $n probes, $bad not 200, slowest $max s"
  ((n >= 10)) || hf_fail "$what: only $n probes"
  ((bad == 0)) || hf_fail "$what: $bad probes failed while searches ran"
  awk -v s="$max" 'BEGIN { exit !(s < 1) }' || hf_fail "$what took $max s while searches ran (limit 1 s)"
done
hf_log "ok: $n200 answered, $n429 refused with Retry-After, all within 11 s; probes < 1 s"

hf_log "3. a client that hangs up frees its slot"
sleep 1   # the searches above are over (each answered)
search "$ALICE" 'a.*a.*a.*[0-9]' "$HF_TMP/h1" --max-time 1 &
h1=$!
search "$ALICE" 'a.*a.*a.*[0-9]' "$HF_TMP/h2" --max-time 1 &
h2=$!
sleep 0.5
search "$ALICE" 'b' "$HF_TMP/h3"
read -r st _ <"$HF_TMP/h3"
[[ $st == 429 ]] || hf_fail "a third search of alice's while two run: $st, want 429"
wait "$h1" "$h2" || true
sleep 0.6   # the pool notices a hang-up within 100 ms of the next line
search "$ALICE" 'b' "$HF_TMP/h4"
read -r st secs <"$HF_TMP/h4"
[[ $st == 200 ]] || hf_fail "after two hang-ups alice's search is $st: $(cat "$HF_TMP/h4.body")"
hf_log "ok: 429 while two ran; 200 ($secs s) once their clients hung up"

hf_log "4. SIGTERM while 8 searches run"
pids=()
for i in 0 1 2 3 4 5 6 7; do
  tok=$ALICE; ((i % 2)) && tok=$BOB
  search "$tok" 'a.*a.*a.*[0-9]' "$HF_TMP/t$i" &
  pids+=($!)
done
sleep 1
t0=$(date +%s%N)
kill -TERM "$HF_SCHED_PID"
for ((i = 0; i < 100; i++)); do hf_alive "$HF_SCHED_PID" || break; sleep 0.05; done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
hf_alive "$HF_SCHED_PID" && hf_fail "the scheduler still runs $ms ms after SIGTERM"
wait "$HF_SCHED_PID" 2>/dev/null || true
HF_SCHED_PID=""
((ms < 3000)) || hf_fail "SIGTERM took $ms ms (limit 3 s)"
for p in "${pids[@]}"; do wait "$p" || true; done
hf_log "ok: exited $ms ms after SIGTERM"
hf_log "PASS"
