#!/usr/bin/env bash
# test_security_crowd.sh — no crowd, and no one token, locks anyone out
# (issue 27 point 5; docs/scheduler.md "Connections", docs/api.md).
#
#   1. 8 addresses (127.0.0.2-9) x 1,100 connections each trickle one
#      header byte every 3 s, reconnecting whenever the scheduler closes
#      them (bench/crowd). Meanwhile every NEW connection from 127.0.0.1 —
#      /healthz, a user's GET and an agent's heartbeat — must answer 2xx
#      within 1 s, every time, and the crowd must really have loaded the
#      server. Before the guard, the crowd filled all 8,192 slots and every
#      newcomer was closed unanswered. HF_CROWD_PER_ADDR scales the crowd
#      (default 1100; the sanitizer build holds it too).
#   2. A header that trickles a byte every 0.3 s (never idle) is closed at
#      --header-timeout; before, only the idle timeout existed and it
#      never fired.
#   3. A body at 5 bytes/s is cut once --header-timeout has passed (the
#      minimum is 1,024 bytes/s); a normal body still goes through.
#   4. Two Content-Length headers, or Content-Length with
#      Transfer-Encoding: 400 naming Content-Length (before: the first
#      length won).
#   5. 16 event streams on one token: the 17th is 429 with a clear
#      message, another user's token still gets a stream, and a closed
#      stream gives its slot back (before: 256 streams on one token shut
#      every dashboard out with 503).
source "$(dirname "$0")/lib.sh"
hf_setup
hf_need hyperfarm-scheduler bench/crowd
command -v python3 >/dev/null || hf_fail "python3 is needed (scripts/install-deps)"

PER_ADDR=${HF_CROWD_PER_ADDR:-1100}
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
(( $(ulimit -n) >= 8 * PER_ADDR + 256 )) || hf_fail "open-files limit $(ulimit -n) is below the crowd's $((8 * PER_ADDR + 256))"

U1=alice-token-0001; U2=bob-token-0002; AT=agent-token-0003
printf 'user:alice %s\nuser:bob %s\nagent:a1 %s\n' "$U1" "$U2" "$AT" >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"

# ---- 1. the trickling crowd, default limits --------------------------------
cfg=$("$HF_BIN/hyperfarm-scheduler" --print-config --db "$HF_TMP/cfg.db")
jq -e '."header-timeout" == 10 and ."min-body-rate" == 1024' <<<"$cfg" >/dev/null \
  || hf_fail "the defaults are not a 10 s header deadline and 1024 bytes/s: $cfg"
hf_start_scheduler --token-file "$HF_TMP/tokens" --agent-timeout 60000
auth() { curl -sS -m 10 -H "Authorization: Bearer $1" "${@:2}"; }
reg=$(auth "$AT" -X POST -H 'Content-Type: application/json' \
  --data-binary '{"name": "a1", "slots": 1, "host": "127.0.0.1", "version": "test"}' "$HF_URL/api/v1/agents")
AG=$(jq -r .id <<<"$reg")
[[ $AG =~ ^[0-9]+$ ]] || hf_fail "agent registration: $reg"

"$HF_BIN/bench/crowd" --to "127.0.0.1:$HF_PORT" --addrs 8 --per-addr "$PER_ADDR" --trickle-ms 3000 \
  --first-from 127.0.0.2 --probe-from 127.0.0.1 --idle-s 1 --crowd-s 12 \
  --token "$U1" --agent-token "$AT" --agent-id "$AG" --max-ms 1000 >"$HF_TMP/crowd.out" 2>&1 &
crowd=$!
hf_track "$crowd"
set +e
wait "$crowd"
rc=$?
set -e
cat "$HF_TMP/crowd.out" >&2
(( rc == 0 )) || hf_fail "a new connection waited more than 1 s, or got no answer, during the crowd (exit $rc)"
for k in healthz user-get heartbeat; do
  grep -q "^crowd $k .*fail=0" "$HF_TMP/crowd.out" || hf_fail "no clean '$k' series during the crowd"
done
read -r held opened < <(sed -n 's/^crowd held mean=\([0-9]*\) .*opened=\([0-9]*\) .*/\1 \2/p' "$HF_TMP/crowd.out")
(( held >= 8 * PER_ADDR / 4 )) || hf_fail "the crowd held only $held connections on average: it did not load the server"
(( opened > 8 * PER_ADDR )) || hf_fail "the scheduler never closed a trickling connection (opened $opened)"
hf_alive "$HF_SCHED_PID" || hf_fail "the scheduler died under the crowd"
hf_log "ok: newcomers answered within 1 s while the crowd held $held connections ($opened opened)"
hf_stop_scheduler

# ---- 2-5 with a 3 s header deadline ---------------------------------------
HT=3
hf_start_scheduler --token-file "$HF_TMP/tokens" --header-timeout $HT --agent-timeout 60000

# python3 drives the byte-level clients: prints "closed after MS" or "open after MS".
slow() {   # MODE: header | body
  python3 - "$HF_PORT" "$1" "$U1" <<'EOF'
import socket, sys, time
port, mode, tok = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = socket.create_connection(("127.0.0.1", port))
if mode == "header":
    data = b"GET /api/v1/experiments HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
    step = 0.3
else:
    s.sendall(b"POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
    data = b" " * 1000
    step = 0.2     # 5 bytes/s
s.settimeout(step)   # one byte, then wait step for the server's close
t0 = time.time()
i = 0
while time.time() - t0 < 12:
    try:
        s.sendall(data[i:i + 1])
        i += 1
        if not s.recv(4096):
            break
    except socket.timeout:
        pass
    except OSError:
        break
print(("closed" if time.time() - t0 < 12 else "open") + " after %d" % int((time.time() - t0) * 1000))
EOF
}
line=$(slow header)
hf_log "trickled header: $line"
[[ $line == closed* ]] || hf_fail "a header trickling a byte every 0.3 s was never closed (deadline $HT s): $line"
ms=${line##* }
(( ms >= HT * 1000 - 300 && ms < HT * 1000 + 2500 )) || hf_fail "the trickled header was closed after $ms ms (deadline $HT s)"
line=$(slow body)
hf_log "slow body: $line"
[[ $line == closed* ]] || hf_fail "a body at 5 bytes/s was never cut: $line"
ms=${line##* }
(( ms >= HT * 1000 - 300 && ms < HT * 1000 + 3500 )) || hf_fail "the slow body was cut after $ms ms (grace $HT s)"
EXP='{"name": "ok", "objective": {"metric": "acc", "goal": "maximize"},
  "searcher": {"name": "random", "max_trials": 1, "seed": 1},
  "hyperparameters": {"x": {"type": "uniform", "min": 0, "max": 1}},
  "trial": {"command": ["true"], "max_restarts": 0}}'
code=$(auth "$U1" -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' --data-binary "$EXP" \
  "$HF_URL/api/v1/experiments")
[[ $code == 201 ]] || hf_fail "a normal submission answered $code"
hf_log "ok: trickled header closed at the deadline, slow body cut, a normal body accepted"

# A valid submission framed ambiguously: before, libmicrohttpd took the
# first length (or the chunks) and the experiment was created (201).
python3 - "$HF_PORT" "$U1" >"$HF_TMP/framing.out" <<'EOF'
import socket, sys
port, tok = int(sys.argv[1]), sys.argv[2]
B = (b'{"name":"framed","objective":{"metric":"acc","goal":"maximize"},"searcher":{"name":"random",'
     b'"max_trials":1,"seed":1},"hyperparameters":{"x":{"type":"uniform","min":0,"max":1}},'
     b'"trial":{"command":["true"],"max_restarts":0}}')
L = len(B)
cases = [("two lengths", b"Content-Length: %d\r\nContent-Length: %d\r\n" % (L, L + 100), B),
         ("one length twice", b"Content-Length: %d\r\nContent-Length: %d\r\n" % (L, L), B),
         ("length and chunked", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
          b"%x\r\n" % L + B + b"\r\n0\r\n\r\n")]
for name, h, body in cases:
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    s.sendall(b"POST /api/v1/experiments HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tok.encode() +
              b"\r\nContent-Type: application/json\r\n" + h + b"Connection: close\r\n\r\n" + body)
    r = b""
    try:
        while True:
            k = s.recv(65536)
            if not k:
                break
            r += k
    except OSError:
        pass
    lines = r.decode(errors="replace").split("\r\n")
    print("%s|%s|%s" % (name, lines[0], lines[-1]))
EOF
while IFS='|' read -r name status body; do
  [[ $status == "HTTP/1.1 400"* ]] || hf_fail "$name: $status $body"
  jq -e '.field == "Content-Length" and (.error | test("Content-Length"))' <<<"$body" >/dev/null \
    || hf_fail "$name: the 400 does not name Content-Length: $body"
done <"$HF_TMP/framing.out"
(( $(wc -l <"$HF_TMP/framing.out") == 3 )) || hf_fail "framing checks: $(cat "$HF_TMP/framing.out")"
hf_log "ok: duplicate Content-Length and Content-Length + Transfer-Encoding are 400"

# ---- 5. event streams per token -------------------------------------------
pids=()
for i in $(seq 1 16); do
  curl -s -N -m 40 -D "$HF_TMP/sse$i.h" -o /dev/null -H "Authorization: Bearer $U1" "$HF_URL/api/v1/events" &
  pids+=($!); hf_track $!
done
all_open() { for i in $(seq 1 16); do grep -q '^HTTP/1.1 200' "$HF_TMP/sse$i.h" 2>/dev/null || return 1; done; }
hf_wait_for 15 all_open || hf_fail "16 event streams on one token did not all open"
code=$(auth "$U1" -o "$HF_TMP/sse17" -w '%{http_code}' -m 3 "$HF_URL/api/v1/events" || true)
[[ $code == 429 ]] || hf_fail "the 17th event stream of one token answered $code"
grep -q 'per token' "$HF_TMP/sse17" || hf_fail "the 429 does not say why: $(cat "$HF_TMP/sse17")"
set +e
curl -s -N -m 2 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $U2" "$HF_URL/api/v1/events" >"$HF_TMP/bob"
set -e
[[ $(cat "$HF_TMP/bob") == 200 ]] || hf_fail "another user's event stream answered $(cat "$HF_TMP/bob") while alice held 16"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
# A dead stream is noticed at its next write: an event (a submission) or
# the 15 s keepalive.
auth "$U2" -o /dev/null -X POST -H 'Content-Type: application/json' --data-binary "$EXP" "$HF_URL/api/v1/experiments"
again() { [[ $(curl -s -N -m 1 -o /dev/null -w '%{http_code}' "$HF_URL/api/v1/events?token=$U1" || true) == 200 ]]; }
hf_wait_for 10 again || hf_fail "a closed stream did not give its slot back"
for p in "${pids[@]:1}"; do kill "$p" 2>/dev/null || true; done
hf_log "ok: the 17th stream of a token is 429, another token still streams, closing one frees its slot"

hf_alive "$HF_SCHED_PID" || hf_fail "the scheduler died"
hf_log "PASS"
