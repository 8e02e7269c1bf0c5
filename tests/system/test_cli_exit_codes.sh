#!/usr/bin/env bash
# test_cli_exit_codes.sh — every exit code of docs/cli.md "Exit codes",
# walked against real schedulers (one open, one with a token file) and a
# real agent:
#   0 success; 1 other failure (a file that cannot be read, output that
#   cannot be written); 2 bad usage or input; 3 not found; 4 unreachable;
#   5 unauthorized (no token, a wrong token, a viewer's change); 6 wrong
#   state (resume of an ACTIVE experiment, pause of a PAUSED one, delete and
#   archive of a running one, up on a taken address); 130 watch interrupted.
#   With roles: webhooks add/list/test/delete as docs/api.md "Roles" says.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

hf_start_scheduler
hf_start_agent codes-a --slots 1

expect_rc() {  # WANT MESSAGE CMD... : run CMD, check its exit code
  local want=$1 msg=$2 rc=0; shift 2
  "$@" >"$HF_TMP/out" 2>"$HF_TMP/err" || rc=$?
  if (( rc != want )); then
    hf_log "stdout: $(head -c 1500 "$HF_TMP/out")"
    hf_log "stderr: $(head -c 1500 "$HF_TMP/err")"
    hf_fail "$msg: exit code $rc, expected $want ($*)"
  fi
  hf_log "ok: $msg (exit $rc)"
}
grep_err() { grep -q -- "$1" "$HF_TMP/err" || hf_fail "stderr lacks '$1': $(head -c 1500 "$HF_TMP/err")"; }

slow=$HF_TMP/slow.json
jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "codes-slow",
  objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 3, max_concurrent_trials: 1, seed: 5},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, epochs: 200, sleep_ms: 300},
  trial: {command: [$prog]}
}' >"$slow"

# --- 0
expect_rc 0 "ls" hf_cli ls
expect_rc 0 "version" hf_cli version
expect_rc 0 "submit" hf_cli submit "$slow"
id=$(cat "$HF_TMP/out")

# --- 1: I/O errors
expect_rc 1 "submit of a directory (a read error)" hf_cli submit "$HF_TMP"
grep_err "reading"
expect_rc 1 "ls into a full disk (a write error)" bash -c "'$HF_BIN/hyperfarm' --url '$HF_URL' ls >/dev/full"
grep_err "cannot write the output"

# --- 2: usage and input
expect_rc 2 "an unknown command" hf_cli frobnicate
expect_rc 2 "an unknown flag" hf_cli ls --bogus
expect_rc 2 "a missing argument" hf_cli show
expect_rc 2 "an id that is not one" hf_cli show abc
expect_rc 2 "a bare number to kill" hf_cli kill 7
expect_rc 2 "delete without --yes" hf_cli delete "$id"
jq '.hyperparameters.x.min = 5' "$slow" >"$HF_TMP/bad.json"
expect_rc 2 "an invalid experiment file (400)" hf_cli submit "$HF_TMP/bad.json"
grep_err "hyperparameters.x"
expect_rc 2 "a webhooks action that does not exist" hf_cli webhooks frob

# --- 3: not found
expect_rc 3 "show of a missing experiment (404)" hf_cli show 999999
expect_rc 3 "logs of a missing trial" hf_cli logs t999999
expect_rc 3 "submit of a missing file" hf_cli submit "$HF_TMP/nope.json"
expect_rc 3 "delete of a missing webhook" hf_cli webhooks delete 999

# --- 6: wrong state
running() { curl -fsS "$HF_URL/api/v1/experiments/$id/trials" | jq -e '[.trials[] | select(.state == "RUNNING")] | length > 0' >/dev/null; }
hf_wait_for 20 running || hf_fail "no trial of experiment $id runs"
expect_rc 6 "resume of an ACTIVE experiment" hf_cli resume "$id"
grep_err "already ACTIVE"
expect_rc 6 "delete of a running experiment (409)" hf_cli delete "$id" --yes
expect_rc 6 "archive of a running experiment (409)" hf_cli archive "$id"
expect_rc 0 "pause" hf_cli pause "$id"
expect_rc 6 "pause of a PAUSED experiment" hf_cli pause "$id"
grep_err "already PAUSED"
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "PAUSED"' "still PAUSED after the refused pause"
expect_rc 0 "resume of the PAUSED experiment" hf_cli resume "$id"
expect_rc 6 "up where a scheduler answers" hf_cli up --listen "127.0.0.1:$HF_PORT" --db "$HF_TMP/other.db"
grep_err "already answers"

# --- 130: watch interrupted (the experiment keeps running)
"$HF_BIN/hyperfarm" --url "$HF_URL" watch "$id" --plain --interval-ms 100 >"$HF_TMP/watch.out" 2>&1 &
w=$!
hf_track "$w"
sleep 1
kill -INT "$w"
rc=0
wait "$w" || rc=$?
(( rc == 130 )) || hf_fail "watch interrupted by SIGINT exited $rc, expected 130: $(tail -3 "$HF_TMP/watch.out")"
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.state == "ACTIVE"' "the experiment runs on after watch was interrupted"
hf_log "ok: watch interrupted (exit 130)"
expect_rc 0 "kill exp" hf_cli kill exp "$id"

# --- 4: unreachable
dead=http://127.0.0.1:$(hf_free_port)
expect_rc 4 "a scheduler that does not answer" "$HF_BIN/hyperfarm" --url "$dead" ls
grep_err "cannot reach"

# --- 5: unauthorized, on a scheduler with a token file
hf_stop_agent codes-a
hf_stop_scheduler
printf 'admin:root tok-admin\nuser:alice tok-alice\nviewer:vic tok-viewer\nagent:tok-agent\n' >"$HF_TMP/tokens"
chmod 600 "$HF_TMP/tokens"
hf_start_scheduler --token-file "$HF_TMP/tokens" --webhook-allow-private
expect_rc 5 "no token" hf_cli ls
grep_err "HYPERFARM_TOKEN"
expect_rc 5 "a wrong token" hf_cli --token nope ls
expect_rc 0 "a user's token" hf_cli --token tok-alice ls
expect_rc 5 "a viewer submits (403)" hf_cli --token tok-viewer submit "$slow"
expect_rc 0 "alice submits" hf_cli --token tok-alice submit "$slow"
aid=$(cat "$HF_TMP/out")
expect_rc 5 "a viewer cancels alice's experiment (403)" hf_cli --token tok-viewer kill exp "$aid"
expect_rc 0 "alice cancels it" env HYPERFARM_TOKEN=tok-alice "$HF_BIN/hyperfarm" --url "$HF_URL" kill exp "$aid"
# webhooks under roles (docs/api.md "Roles"); the hooks point at a closed
# port: their deliveries fail and wait, which is all these checks need.
hook=http://127.0.0.1:$(hf_free_port)/secret-path
expect_rc 5 "alice adds a global webhook (admins only)" hf_cli --token tok-alice webhooks add "$hook"
expect_rc 0 "alice adds one on her experiment" hf_cli --token tok-alice webhooks add "$hook" --experiment "$aid"
ahid=$(cat "$HF_TMP/out")
expect_rc 0 "root adds a global webhook" hf_cli --token tok-admin webhooks add "$hook"
ghid=$(cat "$HF_TMP/out")
expect_rc 0 "alice lists the webhooks" hf_cli --token tok-alice webhooks
grep -q "^$ghid .*http://127.0.0.1:[0-9]*/\.\.\." "$HF_TMP/out" || hf_fail "alice sees root's URL unredacted: $(cat "$HF_TMP/out")"
grep -q "^$ahid .*secret-path" "$HF_TMP/out" || hf_fail "alice does not see her own URL: $(cat "$HF_TMP/out")"
expect_rc 0 "a viewer lists the webhooks (as a user)" hf_cli --token tok-viewer webhooks
grep -q "secret-path" "$HF_TMP/out" && hf_fail "a viewer sees a full webhook URL: $(cat "$HF_TMP/out")"
expect_rc 5 "an agent token lists the webhooks (403)" hf_cli --token tok-agent webhooks
expect_rc 5 "alice tests root's global webhook (403)" hf_cli --token tok-alice webhooks test "$ghid"
grep_err "only an admin may test it"
expect_rc 5 "a viewer tests alice's webhook (403)" hf_cli --token tok-viewer webhooks test "$ahid"
expect_rc 0 "alice tests her webhook" hf_cli --token tok-alice webhooks test "$ahid"
expect_rc 0 "root tests alice's webhook" hf_cli --token tok-admin webhooks test "$ahid"
expect_rc 5 "alice deletes root's webhook (403)" hf_cli --token tok-alice webhooks delete "$ghid"
expect_rc 0 "alice deletes hers" hf_cli --token tok-alice webhooks delete "$ahid"
hf_log "PASS"
