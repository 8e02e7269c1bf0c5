#!/usr/bin/env bash
# test_multiserver_harness.sh — the guarantees of the multi-server harness
# (tests/system/netns_lib.sh) that the other test_multiserver_* tests rely
# on, checked with plain tools (no hyperfarm program needed):
#   - a server's disk (/srv/hf) is its own: another server, and the test's
#     outer namespace, do not see a file written there;
#   - the test's temp dir is hidden from servers; each has its own /tmp;
#   - a server sees only its own processes (pid namespace);
#   - servers reach each other only over the bridge, by address: an HTTP
#     server on 10.77.0.11 answers 10.77.0.12 and the test (10.77.0.1);
#   - nothing leaves the machine: no default route anywhere, a connection to
#     a public address fails at once;
#   - netns_poweroff kills every process of the server at once (a process
#     ignoring SIGTERM included), the address stops answering, and a server
#     started again under the same name comes up with an empty disk.
source "$(dirname "$0")/netns_lib.sh"
command -v curl >/dev/null || hf_fail "curl is required"
command -v python3 >/dev/null || hf_fail "python3 is required"
netns_setup

netns_server s1 10.77.0.11 16
netns_server s2 10.77.0.12 16

echo "disk of s1" | netns_put s1 /srv/hf/www/secret
netns_run s1 test -f /srv/hf/www/secret || hf_fail "s1 does not see its own file"
netns_run s2 test ! -e /srv/hf/www/secret || hf_fail "s2 sees s1's disk"
[[ ! -e /srv/hf/www/secret ]] || hf_fail "the outer namespace sees s1's disk"
hf_log "ok: /srv/hf is private to each server"

touch "$HF_TMP/marker"
netns_run s1 test ! -e "$HF_TMP/marker" || hf_fail "s1 sees the test's temp dir $HF_TMP"
if [[ $(readlink -f "$HF_BIN") != /tmp/* ]]; then
  netns_run s1 sh -c 'echo s1 >/tmp/t'
  netns_run s2 test ! -e /tmp/t || hf_fail "s2 sees s1's /tmp"
  hf_log "ok: the test's temp dir is hidden, /tmp is per server"
else
  hf_log "ok: the test's temp dir is hidden (/tmp is shared: the programs live under /tmp)"
fi

netns_spawn s1 "$HF_TMP/s1-sleep.log" bash -c 'trap "" TERM; exec -a hf-sleeper-s1 sleep 600'
sleeper=$NETNS_PID
n=$(netns_run s2 sh -c 'ls -d /proc/[0-9]* | wc -l')
(( n <= 6 )) || hf_fail "s2 sees $n processes (expected its init, its sleep and this command: at most 6)"
netns_run s2 sh -c '! grep -qs "hf-sleeper-[s]1" /proc/[0-9]*/cmdline' || hf_fail "s2 sees s1's processes"
netns_run s1 sh -c 'grep -qs "hf-sleeper-[s]1" /proc/[0-9]*/cmdline' || hf_fail "s1 does not see its own process"
hf_log "ok: pid namespaces: s2 sees $n processes, none of s1's"

netns_spawn s1 "$HF_TMP/s1-http.log" python3 -m http.server --bind 10.77.0.11 --directory /srv/hf/www 8000
http=$NETNS_PID
hf_wait_for 10 curl -fsS -m 1 http://10.77.0.11:8000/secret || hf_fail "s1's HTTP server did not answer the test"
got=$(netns_run s2 curl -fsS -m 2 http://10.77.0.11:8000/secret) || hf_fail "s2 cannot reach s1 over the bridge"
hf_assert_eq "$got" "disk of s1" "s2 reads s1's file over HTTP through the bridge"

for where in outer s1; do
  if [[ $where == outer ]]; then routes=$(ip route); else routes=$(netns_run s1 ip route); fi
  ! grep -q '^default' <<<"$routes" || hf_fail "$where has a default route: $routes"
done
if netns_run s1 curl -sS -m 2 -o /dev/null http://192.0.2.1/ 2>"$HF_TMP/out.err"; then
  hf_fail "s1 reached 192.0.2.1"
fi
if curl -sS -m 2 -o /dev/null http://192.0.2.1/ 2>>"$HF_TMP/out.err"; then hf_fail "the test reached 192.0.2.1"; fi
hf_log "ok: no route out of the machine ($(head -1 "$HF_TMP/out.err"))"

netns_poweroff s1
for p in "$sleeper" "$http"; do
  ! hf_alive "$p" || hf_fail "process $p of s1 survived the power-off"
done
if netns_run s2 curl -sS -m 2 -o /dev/null http://10.77.0.11:8000/secret 2>/dev/null; then
  hf_fail "10.77.0.11 still answers after the power-off"
fi
hf_log "ok: power-off killed every process of s1 (one ignored SIGTERM) and its address went away"
netns_server s1 10.77.0.11 16
netns_run s1 test ! -e /srv/hf/www/secret || hf_fail "s1's disk survived the power-off"
hf_log "ok: s1 powered on again with an empty disk"
hf_log "PASS"
