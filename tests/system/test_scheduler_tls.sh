#!/usr/bin/env bash
# test_scheduler_tls.sh — HTTPS end to end with a pinned CA.
#
# A self-signed certificate (openssl, SAN IP:127.0.0.1) is generated; the
# scheduler serves HTTPS with --tls-cert/--tls-key (and a token file, as a
# real deployment would). Checks:
#   1. curl with --cacert reaches /healthz; without it the handshake is refused;
#   2. the CLI with --ca-file lists experiments and submits one; without
#      --ca-file it fails with "unreachable" (exit 4), not with data;
#   3. an agent with --ca-file registers, long-polls and runs a trial to
#      COMPLETED; an agent without it never registers and logs the
#      certificate problem;
#   4. plain http:// to the TLS port gets nothing useful.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm tests/fake_trial
hf_setup
command -v openssl >/dev/null || hf_fail "openssl is required (Debian package openssl; scripts/install-deps)"

cert=$HF_TMP/cert.pem key=$HF_TMP/key.pem
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$key" -out "$cert" 2>"$HF_TMP/openssl.log" \
  || hf_fail "openssl req failed: $(cat "$HF_TMP/openssl.log")"
printf 'user:tls-user-token\nagent:tls-agent-token\n' >"$HF_TMP/tokens"
printf 'tls-agent-token\n' >"$HF_TMP/agent-token"
chmod 600 "$HF_TMP/tokens" "$HF_TMP/agent-token" "$key"
U=tls-user-token

HF_PORT=$(hf_free_port)
HF_URL=https://127.0.0.1:$HF_PORT
"$HF_BIN/hyperfarm-scheduler" --listen "127.0.0.1:$HF_PORT" --db "$HF_DB" --token-file "$HF_TMP/tokens" \
  --tls-cert "$cert" --tls-key "$key" >>"$HF_TMP/scheduler.log" 2>&1 &
HF_SCHED_PID=$!
hf_track "$HF_SCHED_PID"
hf_wait_for 15 curl -fsS -m 2 --cacert "$cert" "$HF_URL/healthz" -o /dev/null \
  || hf_fail "scheduler did not answer $HF_URL/healthz with the pinned CA in 15 s"
hf_log "scheduler pid $HF_SCHED_PID on $HF_URL"

# ---- 1. curl
curl -fsS -m 5 --cacert "$cert" "$HF_URL/healthz" | hf_jq_assert '.ok == true' "healthz over TLS with the pinned CA"
rc=0; curl -sS -m 5 "$HF_URL/healthz" -o /dev/null 2>"$HF_TMP/curl.err" || rc=$?
(( rc == 60 || rc == 35 )) || hf_fail "curl without the CA: exit $rc (expected 60, certificate not trusted): $(cat "$HF_TMP/curl.err")"
hf_log "ok: curl without the CA refused (exit $rc)"
rc=0; curl -sS -m 5 "http://127.0.0.1:$HF_PORT/healthz" -o /dev/null 2>/dev/null || rc=$?
(( rc != 0 )) || hf_fail "plain HTTP to the TLS port answered"

# ---- 2. the CLI
cli() { "$HF_BIN/hyperfarm" --url "$HF_URL" --token "$U" "$@"; }
cli --ca-file "$cert" ls --json | hf_jq_assert 'type == "array" or type == "object"' "CLI ls with --ca-file"
rc=0; cli ls >"$HF_TMP/cli.out" 2>&1 || rc=$?
[[ $rc == 4 ]] || hf_fail "CLI without --ca-file: exit $rc (expected 4, unreachable): $(cat "$HF_TMP/cli.out")"
hf_log "ok: CLI without --ca-file refused (exit 4: $(head -c 200 "$HF_TMP/cli.out"))"
# HYPERFARM_CA_FILE works too
HYPERFARM_CA_FILE=$cert cli agents >/dev/null || hf_fail "CLI with HYPERFARM_CA_FILE failed"

# ---- 3. agents
mkdir -p "$HF_TMP/agent-bad" "$HF_TMP/agent-good"
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name bad --slots 1 --workdir "$HF_TMP/agent-bad" \
  --token-file "$HF_TMP/agent-token" >>"$HF_TMP/agent-bad.log" 2>&1 &
HF_AGENT_PIDS[bad]=$!
hf_track $!
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name good --slots 1 --workdir "$HF_TMP/agent-good" \
  --token-file "$HF_TMP/agent-token" --ca-file "$cert" >>"$HF_TMP/agent-good.log" 2>&1 &
HF_AGENT_PIDS[good]=$!
hf_track $!
agents() { curl -fsS -m 2 --cacert "$cert" -H "Authorization: Bearer $U" "$HF_URL/api/v1/agents"; }
hf_wait_for 15 bash -c "curl -fsS -m 2 --cacert '$cert' -H 'Authorization: Bearer $U' '$HF_URL/api/v1/agents' \
  | jq -e '[.agents[] | select(.name == \"good\")] | length == 1' >/dev/null" || hf_fail "agent with --ca-file did not register"
hf_log "ok: agent with --ca-file registered"
exp=$(jq -n --arg prog "$HF_BIN/tests/fake_trial" '{name: "tls", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1}, hyperparameters: {epochs: 2, sleep_ms: 50},
  trial: {command: [$prog], max_restarts: 0}}')
jq . <<<"$exp" >"$HF_TMP/exp.json"
id=$(cli --ca-file "$cert" submit "$HF_TMP/exp.json" 2>"$HF_TMP/submit.err" | grep -o '[0-9]\+' | head -1) \
  || hf_fail "CLI submit over TLS failed: $(cat "$HF_TMP/submit.err")"
hf_wait_for 30 bash -c "curl -fsS -m 2 --cacert '$cert' -H 'Authorization: Bearer $U' '$HF_URL/api/v1/experiments/$id' \
  | jq -e '.state == \"COMPLETED\"' >/dev/null" || hf_fail "experiment $id did not complete over TLS"
curl -fsS -m 2 --cacert "$cert" -H "Authorization: Bearer $U" "$HF_URL/api/v1/experiments/$id/trials" \
  | hf_jq_assert '.trials[0].state == "COMPLETED" and .trials[0].agent == "good"' "trial ran on the pinned agent"
agents | hf_jq_assert '[.agents[] | select(.name == "bad")] | length == 0' "agent without --ca-file never registered"
hf_alive "${HF_AGENT_PIDS[bad]}" || hf_fail "agent without --ca-file exited instead of retrying"
grep -qi 'certificate\|SSL' "$HF_TMP/agent-bad.log" || hf_fail "agent without --ca-file did not log the certificate problem"
hf_log "ok: agent without --ca-file refused: $(grep -i -m1 'certificate\|SSL' "$HF_TMP/agent-bad.log" | cut -c1-200)"
hf_log "PASS"
