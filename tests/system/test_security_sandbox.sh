#!/usr/bin/env bash
# test_security_sandbox.sh — a trial holds no farm secret and sees no one
# else's work (issue 27 point 2; docs/agent.md "Sandbox").
#
# A real scheduler with a token file and a real agent with --token-file,
# --config and secrets in its environment (HYPERFARM_TOKEN, the token
# file's path in HYPERFARM_AGENT_TOKEN_FILE). A "victim" experiment's trial
# (the fake trial, writing checkpoints) runs on the agent; then a "probe"
# experiment's trial — a shell script — tries every route a hostile trial
# has to the agent's token and to the victim's files:
#   /proc/$PPID/cmdline, every /proc/*/cmdline and /proc/*/environ, the
#   token file and the config file by their paths, its own environment,
#   the agent's work directory (object cache, uploads, other trials'
#   directories and checkpoints), its inherited descriptors, writing
#   outside its own directory (/usr, /etc, the agent's work directory).
# The agent binds the test's temp directory (read-only, made traversable),
# which holds the token file, the config file and the work directory: the
# hard case, where the sandbox must mask them (the token file is even
# world-readable here, an operator's slip, so that only the mask protects
# it from the unprivileged trial user; test_agent_spawn covers the case
# where they are simply absent).
# It prints FOUND lines for what it reached; the test asserts there are
# none, that nothing it wrote outside its directory reached the host, that
# it ran as the trial user when the agent is root, and that both trials
# still COMPLETED with their metrics (the sandbox breaks nothing).
# On the code before the sandbox the probe finds the token (the agent's
# command line names --token-file, the file is readable) and the victim's
# checkpoint.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
command -v bwrap >/dev/null || hf_fail "bwrap is required (Debian package bubblewrap; scripts/install-deps)"
hf_setup

secret=agent-secret-$RANDOM$RANDOM-sbx
printf 'user:alice alice-token-sbx\nagent:%s\n' "$secret" >"$HF_TMP/tokens"
printf '%s\n' "$secret" >"$HF_TMP/agent-token"
chmod 600 "$HF_TMP/tokens"
chmod 644 "$HF_TMP/agent-token"
chmod 755 "$HF_TMP"
work=$HF_TMP/agent-s1
conf=$HF_TMP/agent.conf
printf 'slots = 2\ngpus = none\n# the token: %s\n' "$secret" >"$conf"
hf_start_scheduler --token-file "$HF_TMP/tokens"
mkdir -p "$work"
HYPERFARM_TOKEN=alice-token-sbx HYPERFARM_AGENT_TOKEN_FILE=$HF_TMP/agent-token \
  "$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name s1 --config "$conf" --workdir "$work" \
  --token-file "$HF_TMP/agent-token" --sandbox-bind "$HF_TMP:ro" >>"$HF_TMP/agent-s1.log" 2>&1 &
HF_AGENT_PIDS[s1]=$!
api() { curl -fsS -m 5 -H "Authorization: Bearer alice-token-sbx" "$HF_URL$1"; }
submit() {
  curl -fsS -m 5 -H "Authorization: Bearer alice-token-sbx" -H 'Content-Type: application/json' \
    -d "$1" "$HF_URL/api/v1/experiments" | jq -r .id
}
hf_wait_for 15 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer alice-token-sbx' '$HF_URL/api/v1/agents' \
  | jq -e '[.agents[] | select(.name == \"s1\")] | length > 0' >/dev/null" || hf_fail "agent s1 did not register"

# ---- the victim: another experiment's trial with checkpoints on this agent
victim=$(submit "$(jq -n --arg p "$HF_BIN/tests/fake_trial" '{
  name: "victim", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1, seed: 1}, hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: [$p, "--epochs", "30", "--sleep-ms", "150"], max_restarts: 0}}')")
[[ $victim =~ ^[0-9]+$ ]] || hf_fail "victim not submitted: $victim"
vck=""
find_ck() { vck=$(find "$work/experiments" -name fake_trial.json 2>/dev/null | head -1); [[ -n $vck ]]; }
hf_wait_for 20 find_ck || hf_fail "the victim wrote no checkpoint under $work/experiments"
vdir=$(dirname "$(dirname "$vck")")
hf_log "victim trial directory $vdir, checkpoint $vck"

# ---- the probe
read -r -d '' probe <<'EOF' || true
found() { echo "FOUND: $*"; }
echo "probe: uid $(id -u) pid $$ ppid $PPID"
# What it looks for travels reversed, so that its own environment and this
# script's text (in its processes' /proc entries) do not match.
secret=$(rev <<<"$P_SECRET_REV"); tokenfile=$(rev <<<"$P_TOKENFILE_REV")
flag=--token; flag+=-file; agent=hyperfarm; agent+="-agent --scheduler"
# 1. the parent's and every visible process's command line and environment
for f in /proc/$PPID/cmdline /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
  [[ -r $f ]] || continue
  c=$(tr '\0' ' ' <"$f" 2>/dev/null) || continue
  [[ $c == *"$secret"* ]] && found "the token in $f"
  [[ $c == *"$flag"* || $c == *"$tokenfile"* ]] && found "the token file's path in $f: ${c:0:300}"
  [[ $c == *"$agent"* ]] && found "the agent's process in $f"
done
# 2. the token file and the config file by their paths
for f in "$tokenfile" "$P_CONFIG"; do
  c=$(cat "$f" 2>/dev/null) && [[ -n $c ]] && found "readable: $f: $c"
done
# 3. its own environment
env | grep -e "$secret" -e "$tokenfile" -e '^HYPERFARM_AGENT_' -e '^HYPERFARM_TOKEN' \
  | sed 's/^/FOUND: env: /'
# 4. the agent's work directory and the victim's trial
for d in "$P_WORKDIR/objects" "$P_WORKDIR/uploads" "$P_VICTIMDIR" "$P_VICTIMDIR/checkpoints"; do
  ls -A "$d" >/dev/null 2>&1 && found "listable: $d: $(ls -A "$d" 2>/dev/null | head -3 | tr '\n' ' ')"
done
cat "$P_VICTIMCK" >/dev/null 2>&1 && found "readable: $P_VICTIMCK"
others=$(find "$P_WORKDIR" -mindepth 1 2>/dev/null | grep -v -e "^$PWD" | while read -r p; do
  [[ $PWD == "$p"/* ]] || echo "$p"; done)
[[ -n $others ]] && found "in the work directory besides its own: $(head -5 <<<"$others" | tr '\n' ' ')"
# 5. inherited descriptors beyond stdin, stdout, stderr
# (listed by a child into a file: a glob or $(...) here would open one)
ls -l /proc/$$/fd >fds.txt
while read -r _ _ _ _ _ _ _ _ n _ target; do
  [[ $n =~ ^[0-9]+$ ]] && (( n > 2 )) && found "inherited descriptor $n -> $target"
done <fds.txt
# 6. writing outside its own directory (the test checks the host too)
for f in /usr/sbx-probe /etc/sbx-probe "$P_WORKDIR/sbx-probe" "$P_VICTIMDIR/sbx-probe"; do
  ( echo x >"$f" ) 2>/dev/null && echo "wrote (checked on the host): $f"
done
# its own directory still works: a checkpoint and a metric
echo ok >"$HYPERFARM_CHECKPOINT_DIR/probe.ckpt" || found "cannot write its own checkpoint directory"
echo "probe: done"
echo "HYPERFARM {\"epoch\": 1, \"step\": 100, \"val_acc\": 0.5, \"checkpoint\": \"$HYPERFARM_CHECKPOINT_DIR/probe.ckpt\"}"
EOF
body=$(jq -n --arg s "$probe" --arg sec "$(rev <<<"$secret")" --arg tf "$(rev <<<"$HF_TMP/agent-token")" --arg cf "$conf" \
  --arg w "$work" --arg vd "$vdir" --arg vc "$vck" '{
  name: "probe", objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 1, seed: 1}, hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: ["/bin/bash", "-c", $s], max_restarts: 0,
          env: {P_SECRET_REV: $sec, P_TOKENFILE_REV: $tf, P_CONFIG: $cf, P_WORKDIR: $w, P_VICTIMDIR: $vd, P_VICTIMCK: $vc}}}')
probe_exp=$(submit "$body")
[[ $probe_exp =~ ^[0-9]+$ ]] || hf_fail "probe not submitted: $probe_exp"
hf_wait_for 60 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer alice-token-sbx' '$HF_URL/api/v1/experiments/$probe_exp' \
  | jq -e '.state == \"COMPLETED\"' >/dev/null" || hf_fail "the probe experiment did not complete"
pt=$(api "/api/v1/experiments/$probe_exp/trials" | jq -r '.trials[0].id')
logs=$(api "/api/v1/trials/$pt/logs?limit=10000" | jq -r '.logs[].line')
hf_log "probe's output:"$'\n'"$logs"
grep -q '^probe: done' <<<"$logs" || hf_fail "the probe did not run to its end"
if grep -q '^FOUND' <<<"$logs"; then
  hf_fail "the trial reached what it must not: $(grep '^FOUND' <<<"$logs")"
fi
api "/api/v1/trials/$pt" | hf_jq_assert '.state == "COMPLETED"' "the probe trial COMPLETED"
api "/api/v1/trials/$pt/metrics?name=val_acc" | hf_jq_assert '.metrics | length == 1 and .[0].value == 0.5' \
  "the probe's metric arrived"
if [[ $(id -u) == 0 ]]; then
  grep -q "^probe: uid $(id -u nobody) " <<<"$logs" || hf_fail "the agent is root: the trial must run as nobody: $(grep '^probe: uid' <<<"$logs")"
  hf_log "ok: the trial ran as nobody (uid $(id -u nobody)), not as the agent's root"
fi
for f in /usr/sbx-probe /etc/sbx-probe "$work/sbx-probe" "$vdir/sbx-probe"; do
  [[ -e $f ]] && { rm -f "$f"; hf_fail "the trial wrote $f on the host"; }
done
hf_log "ok: no token, token path, config, agent process, other trial's files or extra descriptor reachable; no write outside its directory"

# ---- the victim is unharmed and completes
hf_wait_for 60 bash -c "curl -fsS -m 2 -H 'Authorization: Bearer alice-token-sbx' '$HF_URL/api/v1/experiments/$victim' \
  | jq -e '.state == \"COMPLETED\"' >/dev/null" || hf_fail "the victim experiment did not complete"
vt=$(api "/api/v1/experiments/$victim/trials" | jq -r '.trials[0].id')
api "/api/v1/trials/$vt" | hf_jq_assert '.state == "COMPLETED"' "the victim trial COMPLETED"
api "/api/v1/trials/$vt/metrics?name=val_acc&limit=1000" | hf_jq_assert '.metrics | length == 30' \
  "the victim reported its 30 epochs"

# ---- --sandbox off says what it costs; a missing bwrap is a clear start-up error
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name s2 --workdir "$HF_TMP/agent-s2" --token-file "$HF_TMP/agent-token" \
  --bwrap /nonexistent/bwrap >"$HF_TMP/s2.log" 2>&1 && hf_fail "an agent without bwrap started"
grep -q -- "--sandbox on: /nonexistent/bwrap: No such file or directory (install the Debian package bubblewrap" \
  "$HF_TMP/s2.log" || hf_fail "no clear error without bwrap: $(tail -3 "$HF_TMP/s2.log")"
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --sandbox maybe >"$HF_TMP/s3.log" 2>&1 && hf_fail "--sandbox maybe accepted"
grep -q -- "--sandbox: expected on or off, got 'maybe'" "$HF_TMP/s3.log" || hf_fail "bad --sandbox: $(cat "$HF_TMP/s3.log")"
hf_log "ok: a missing bwrap and a bad --sandbox are start-up errors naming the fix"
hf_log "PASS"
