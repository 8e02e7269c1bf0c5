#!/usr/bin/env bash
# tests/web/run.sh — the dashboard in a real browser against a real farm.
#
# Starts a real hyperfarm-scheduler (serving its built-in copy of web/, with a token file so the
# login prompt is exercised) and a real hyperfarm-agent on loopback, then
# runs the node:test suites in tests/web/*.test.js, which drive Debian's
# headless Chromium through playwright-core (no browser is ever downloaded)
# while the agent runs small sweeps of bin/tests/fake_trial. Screenshots of
# every page go to $HF_TEST_OUT/web-shots/ (HF_UPDATE_DOCS_IMG=1 also copies
# them to docs/img/). Everything started is killed on exit (tests/system/lib.sh).
#
#   tests/web/run.sh [TEST_NAME_PATTERN]
#   HF_WEB_TESTS=layout tests/web/run.sh     (only tests/web/layout.test.js)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
source "$root/tests/system/lib.sh"
HF_TEST_NAME=web
: "${HF_TEST_OUT:=$root/build/rel/test-out}"
: "${CHROMIUM:=/usr/bin/chromium}"

hf_setup
hf_need hyperfarm-scheduler hyperfarm-agent tests/fake_trial
command -v node >/dev/null || hf_fail "node is required (Debian package nodejs)"
[[ -x $CHROMIUM ]] || hf_fail "chromium is required at $CHROMIUM (Debian package chromium)"
if [[ ! -d $here/node_modules/playwright-core ]]; then
  hf_log "npm ci in tests/web"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || hf_fail "npm ci in tests/web failed"
fi
"$root/web/build.sh" || hf_fail "web/build.sh failed (run: cd web && npm ci)"

shots=$HF_TEST_OUT/web-shots
rm -rf "$shots"; mkdir -p "$shots"

user_token=web-user-$RANDOM$RANDOM
agent_token=web-agent-$RANDOM$RANDOM
alice_token=web-alice-$RANDOM$RANDOM   # a named user (docs/operations.md, "Tokens and users")
viewer_token=web-wall-$RANDOM$RANDOM   # a read-only viewer (docs/api.md "Roles")
printf 'user:%s\nagent:%s\nuser:alice %s\nviewer:wall %s\n' "$user_token" "$agent_token" "$alice_token" \
  "$viewer_token" >"$HF_TMP/tokens"
printf '%s\n' "$agent_token" >"$HF_TMP/agent-token"
chmod 600 "$HF_TMP/tokens" "$HF_TMP/agent-token"

# The dashboard built into the scheduler, as users get it; HF_WEB_DIR=web
# serves the files on disk instead (editing the page without rebuilding).
hf_start_scheduler ${HF_WEB_DIR:+--web "$HF_WEB_DIR"} --token-file "$HF_TMP/tokens"

# The agent, started by hand: lib.sh's registration check has no token.
# It does not upload checkpoints: checkpoints.test.js puts exactly the ones
# it checks into the store (uploads are tested in tests/system).
# Trials run in the agent's sandbox (docs/agent.md "Sandbox") as user nobody
# when the tests run as root: the programs the tests write go to
# $HF_TMP/tmp (TMPDIR of the node tests below), bound into the sandbox.
mkdir -p "$HF_TMP/agent-a1" "$HF_TMP/tmp"
chmod 1777 "$HF_TMP" "$HF_TMP/tmp"
"$HF_BIN/hyperfarm-agent" --scheduler "$HF_URL" --name web-a1 --slots 4 --gpus none --no-checkpoint-upload \
  --sandbox-bind "$HF_TMP/tmp:ro" \
  --workdir "$HF_TMP/agent-a1" --token-file "$HF_TMP/agent-token" >>"$HF_TMP/agent-a1.log" 2>&1 &
HF_AGENT_PIDS[a1]=$!
agent_up() {
  curl -fsS -m 2 -H "Authorization: Bearer $user_token" "$HF_URL/api/v1/agents" \
    | jq -e '[.agents[] | select(.name == "web-a1")] | length == 1' >/dev/null
}
hf_wait_for 15 agent_up || hf_fail "agent did not register in 15 s"
hf_log "agent web-a1 registered"

export HF_URL HF_BIN HF_USER_TOKEN=$user_token HF_ALICE_TOKEN=$alice_token HF_AGENT_TOKEN=$agent_token HF_SHOTS=$shots CHROMIUM
export HF_VIEWER_TOKEN=$viewer_token
export HF_FAKE_TRIAL=$HF_BIN/tests/fake_trial
args=(--test --test-concurrency=1 --test-reporter=spec)
[[ -n ${1:-} ]] && args+=(--test-name-pattern "$1")
rc=0
TMPDIR=$HF_TMP/tmp node "${args[@]}" "$here"/${HF_WEB_TESTS:-*}.test.js || rc=$?

hf_log "screenshots in $shots: $(cd "$shots" && ls | tr '\n' ' ')"
if [[ -n ${HF_UPDATE_DOCS_IMG:-} && $rc -eq 0 ]]; then
  mkdir -p "$root/docs/img"
  cp "$shots"/dashboard-*.png "$shots"/workflow-*.png "$shots"/insight-*.png "$root/docs/img/"
  hf_log "copied screenshots to docs/img/"
fi
exit $rc
