#!/usr/bin/env bash
# test_e2e_cli.sh — the hyperfarm CLI against a real scheduler and agent.
#
# submit (good file -> id; invalid file -> exit 2 naming the field; bad
# JSON -> 2; missing file -> 3), ls, show, watch until done, logs (and -f
# on an ended trial returns), export --csv/--json, agents, kill trial /
# kill exp, pause/resume, every --json output parses with jq, not-found
# ids exit 3, an unreachable scheduler exits 4 with the URL and a hint,
# the completion script loads in bash, and `hyperfarm up` starts a farm
# that answers and stops cleanly on SIGINT, with the scheduler's and agent's
# logs in a file beside the database (not on the terminal) and the agent's
# work folder there too. Issue 28: `webhooks` add/list/test/delete against
# a real receiver (the test delivery signed with the hook's secret),
# `ls --all` marks archived experiments, `logs --grep` with no match says
# "0 matches" on stderr and exits 0.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler hyperfarm-agent tests/fake_trial
hf_setup

hf_start_scheduler --webhook-allow-private
hf_start_agent cli-a --slots 2

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
grep_out() { grep -q -- "$1" "$HF_TMP/out" || hf_fail "stdout lacks '$1': $(head -c 1500 "$HF_TMP/out")"; }
grep_err() { grep -q -- "$1" "$HF_TMP/err" || hf_fail "stderr lacks '$1': $(head -c 1500 "$HF_TMP/err")"; }

good=$HF_TMP/good.json
jq -n --arg prog "$HF_BIN/tests/fake_trial" '{
  name: "cli-sweep",
  objective: {metric: "val_acc", goal: "maximize"},
  searcher: {name: "random", max_trials: 4, max_concurrent_trials: 2, seed: 11},
  hyperparameters: {x: {type: "uniform", min: 0, max: 1}, lr: {type: "log", min: 0.01, max: 1},
                    epochs: 2, sleep_ms: 200},
  trial: {command: [$prog]}
}' >"$good"

# --- submit: bad input
jq '.hyperparameters.lr.min = 5' "$good" >"$HF_TMP/minmax.json"
expect_rc 2 "submit with min > max" hf_cli submit "$HF_TMP/minmax.json"
grep_err "hyperparameters.lr"
jq '.searcher.name = "bogus"' "$good" >"$HF_TMP/unknown.json"
expect_rc 2 "submit with an unknown searcher" hf_cli submit "$HF_TMP/unknown.json"
grep_err "searcher"
jq '.trial.command = []' "$good" >"$HF_TMP/empty.json"
expect_rc 2 "submit with an empty command" hf_cli submit "$HF_TMP/empty.json"
grep_err "trial.command"
printf '{"name": "x", ' >"$HF_TMP/malformed.json"
expect_rc 2 "submit malformed JSON" hf_cli submit "$HF_TMP/malformed.json"
grep_err "malformed JSON"
expect_rc 3 "submit a missing file" hf_cli submit "$HF_TMP/nope.json"
hf_get /api/v1/experiments | hf_jq_assert '.experiments | length == 0' "nothing was stored by the rejected submissions"

# --- submit: good, then watch it to the end
expect_rc 0 "submit a good file" hf_cli submit "$good"
id=$(cat "$HF_TMP/out")
[[ $id =~ ^[0-9]+$ ]] || hf_fail "submit printed '$id', not an id"
hf_log "experiment $id"
expect_rc 0 "watch until the experiment completes" hf_cli watch "$id" --interval-ms 200
grep_out "exp $id"
grep_out "COMPLETED"
grep_out "best trial"
# non-TTY output is plain lines, no carriage returns or escapes
if grep -q $'\r\|\033' "$HF_TMP/out"; then hf_fail "watch wrote control characters to a pipe"; fi
hf_log "ok: watch printed plain lines to a pipe ($(wc -l <"$HF_TMP/out") lines)"

# --- ls
expect_rc 0 "ls" hf_cli ls
grep_out "cli-sweep"
grep_out "COMPLETED"
grep_out "4/4"
expect_rc 0 "ls --json" hf_cli ls --json
jq -e --argjson id "$id" '.experiments[] | select(.id == $id) | .state == "COMPLETED"' "$HF_TMP/out" >/dev/null \
  || hf_fail "ls --json lacks experiment $id COMPLETED"
expect_rc 0 "ls --tsv" hf_cli ls --tsv
head -1 "$HF_TMP/out" | grep -q $'^ID\tNAME\tSTATE' || hf_fail "ls --tsv header: $(head -1 "$HF_TMP/out")"
[[ $(awk -F'\t' 'NR == 2 {print NF}' "$HF_TMP/out") == 11 ]] || hf_fail "ls --tsv rows do not have 11 fields"

# --- show
expect_rc 0 "show" hf_cli show "$id"
grep_out "experiment $id"
grep_out "best"
grep_out "TRIAL"
[[ $(grep -c ' COMPLETED ' "$HF_TMP/out") -ge 4 ]] || hf_fail "show lists fewer than 4 COMPLETED trials"
expect_rc 0 "show --json" hf_cli show "e$id" --json
jq -e '.experiment.state == "COMPLETED" and (.trials | length == 4) and .experiment.best.trial_id > 0' "$HF_TMP/out" >/dev/null \
  || hf_fail "show --json shape: $(head -c 800 "$HF_TMP/out")"
tid=$(jq '.trials[0].id' "$HF_TMP/out")
best=$(jq '.experiment.best.trial_id' "$HF_TMP/out")
expect_rc 3 "show of a missing experiment" hf_cli show 999999
grep_err "404\|not found\|no such"

# --- logs
expect_rc 0 "logs" hf_cli logs "$tid"
grep_out "epoch 1 done"
nlines=$(wc -l <"$HF_TMP/out")
expect_rc 0 "logs --tail 1" hf_cli logs "$tid" --tail 1
[[ $(wc -l <"$HF_TMP/out") == 1 ]] || hf_fail "logs --tail 1 printed $(wc -l <"$HF_TMP/out") lines"
expect_rc 0 "logs -f on an ended trial returns" timeout 20 "$HF_BIN/hyperfarm" --url "$HF_URL" logs "t$tid" -f --interval-ms 100
[[ $(wc -l <"$HF_TMP/out") == "$nlines" ]] || hf_fail "logs -f printed a different number of lines than logs"
expect_rc 0 "logs --json" hf_cli logs "$tid" --json
jq -se 'length >= 2 and all(.[]; has("seq") and has("line"))' "$HF_TMP/out" >/dev/null || hf_fail "logs --json is not one object per line"
expect_rc 3 "logs of a missing trial" hf_cli logs 999999
expect_rc 0 "logs --grep with no match" hf_cli logs "$tid" --grep 'no-such-line-anywhere'
[[ ! -s $HF_TMP/out ]] || hf_fail "logs --grep with no match printed on stdout: $(head -c 300 "$HF_TMP/out")"
grep -qx "0 matches" "$HF_TMP/err" || hf_fail "logs --grep with no match: stderr is '$(cat "$HF_TMP/err")', not '0 matches'"
expect_rc 0 "logs --experiment --grep with no match" hf_cli logs --experiment "$id" --grep 'no-such-line-anywhere'
grep -qx "0 matches" "$HF_TMP/err" || hf_fail "logs --experiment --grep: no '0 matches'"
expect_rc 0 "logs --grep with a match" hf_cli logs "$tid" --grep 'EPOCH 1' -i
grep_out "epoch 1 done"
grep -q "matches" "$HF_TMP/err" && hf_fail "logs --grep with matches printed a count on stderr"

# --- export
expect_rc 0 "export --csv" hf_cli export "$id" --csv
head -1 "$HF_TMP/out" | grep -q '^trial_id,state,agent' || hf_fail "CSV header: $(head -1 "$HF_TMP/out")"
head -1 "$HF_TMP/out" | grep -q 'hp.x' || hf_fail "CSV lacks the hp.x column"
head -1 "$HF_TMP/out" | grep -q 'best.val_acc' || hf_fail "CSV lacks best.val_acc"
[[ $(wc -l <"$HF_TMP/out") == 5 ]] || hf_fail "CSV has $(wc -l <"$HF_TMP/out") lines, expected header + 4"
grep -q "^$best,COMPLETED,cli-a," "$HF_TMP/out" || hf_fail "CSV lacks the best trial's row"
expect_rc 0 "export --json" hf_cli export "$id" --json
jq -e '(.trials | length) == 4 and .experiment.name == "cli-sweep"' "$HF_TMP/out" >/dev/null || hf_fail "export --json shape"

# --- agents
expect_rc 0 "agents" hf_cli agents
grep_out "cli-a"
expect_rc 0 "agents --json" hf_cli agents --json
jq -e '.agents | any(.name == "cli-a")' "$HF_TMP/out" >/dev/null || hf_fail "agents --json lacks cli-a"

# --- ls --all marks an archived experiment
expect_rc 0 "archive" hf_cli archive "$id"
expect_rc 0 "ls after archive" hf_cli ls
grep -q "cli-sweep" "$HF_TMP/out" && hf_fail "ls still lists the archived experiment"
expect_rc 0 "ls --all" hf_cli ls --all
grep -q "cli-sweep.*COMPLETED (archived)" "$HF_TMP/out" || hf_fail "ls --all does not mark it archived: $(cat "$HF_TMP/out")"
expect_rc 0 "ls --all --tsv" hf_cli ls --all --tsv
awk -F'\t' -v id="$id" '$1 == id && $3 == "COMPLETED (archived)" {ok = 1} END {exit !ok}' "$HF_TMP/out" \
  || hf_fail "ls --all --tsv: no 'COMPLETED (archived)' state cell for $id"

# --- webhooks: add, list, test (a real, signed delivery), delete
rport=$(hf_free_port)
"${PYTHON:-python3}" "$(dirname "$0")/webhook_receiver.py" "$rport" "$HF_TMP/hooks.jsonl" >"$HF_TMP/receiver.log" 2>&1 &
hf_track $!
hf_wait_for 10 grep -q ready "$HF_TMP/receiver.log" || hf_fail "webhook receiver did not start"
expect_rc 0 "webhooks (none yet)" hf_cli webhooks
grep_out "no webhooks"
expect_rc 0 "webhooks add" hf_cli webhooks add "http://127.0.0.1:$rport/hook" --events 'experiment.*, trial.FAILED'
hid=$(cat "$HF_TMP/out")
[[ $hid =~ ^[0-9]+$ ]] || hf_fail "webhooks add printed '$hid', not an id"
secret=$(sed -n 's/^signing secret .*: \([0-9a-f]*\)$/\1/p' "$HF_TMP/err")
[[ ${#secret} == 64 ]] || hf_fail "webhooks add did not show the generated secret: $(cat "$HF_TMP/err")"
expect_rc 0 "webhooks list" hf_cli webhooks list
grep -q "^$hid .*http://127.0.0.1:$rport/hook .*all .*experiment\.\*,trial\.FAILED" "$HF_TMP/out" \
  || hf_fail "webhooks list lacks hook $hid: $(cat "$HF_TMP/out")"
expect_rc 0 "webhooks test" hf_cli webhooks test "$hid"
grep_out "test delivery"
hf_wait_for 15 bash -c "jq -se 'any(.[]; (.body | fromjson | .event) == \"webhook.test\")' '$HF_TMP/hooks.jsonl'" \
  || hf_fail "the receiver got no webhook.test delivery: $(cat "$HF_TMP/hooks.jsonl" 2>/dev/null | head -c 800)"
jq -c 'select((.body | fromjson | .event) == "webhook.test")' "$HF_TMP/hooks.jsonl" | head -1 >"$HF_TMP/test-delivery.json"
python3 - "$HF_TMP/test-delivery.json" "$secret" <<'PY' || hf_fail "the test delivery's signature or headers are wrong"
import hashlib, hmac, json, sys
d = json.loads(open(sys.argv[1]).read())
h = {k.lower(): v for k, v in d["headers"].items()}
want = "sha256=" + hmac.new(sys.argv[2].encode(), d["body"].encode(), hashlib.sha256).hexdigest()
assert h["x-hyperfarm-signature"] == want, (h["x-hyperfarm-signature"], want)
assert h["x-hyperfarm-event"] == "webhook.test", h["x-hyperfarm-event"]
b = json.loads(d["body"])
assert b["kind"] == "webhook" and b["experiment_id"] is None and "test delivery" in b["detail"], b
PY
hf_log "ok: the test delivery arrived, signed with the hook's secret"
hf_wait_for 10 bash -c "'$HF_BIN/hyperfarm' --url '$HF_URL' webhooks --json | jq -e '.webhooks[] | select(.id == $hid) | .delivered >= 1 and .last_status == 200'" \
  || hf_fail "webhooks list does not count the test delivery: $(hf_cli webhooks --json)"
expect_rc 0 "webhooks --tsv" hf_cli webhooks --tsv
head -1 "$HF_TMP/out" | grep -q $'^ID\tURL\tEXPERIMENT' || hf_fail "webhooks --tsv header: $(head -1 "$HF_TMP/out")"
expect_rc 2 "webhooks add of a URL that is not http(s)" hf_cli webhooks add "ftp://127.0.0.1/x"
grep_err "url"
expect_rc 2 "webhooks add with an empty event filter" hf_cli webhooks add "http://127.0.0.1:$rport/x" --events 'trial.FAILED,,'
expect_rc 2 "webhooks test without an id" hf_cli webhooks test
expect_rc 2 "webhooks delete of a non-id" hf_cli webhooks delete abc
expect_rc 3 "webhooks test of a missing hook" hf_cli webhooks test 999999
expect_rc 0 "webhooks delete" hf_cli webhooks delete "$hid"
grep_out "deleted"
expect_rc 3 "webhooks delete again" hf_cli webhooks delete "$hid"
expect_rc 0 "webhooks after delete" hf_cli webhooks
grep_out "no webhooks"

# --- kill trial, pause/resume, kill exp on a slow experiment
slow=$HF_TMP/slow.json
jq '.name = "cli-slow" | .searcher.max_trials = 6 | .searcher.max_concurrent_trials = 1
    | .hyperparameters.epochs = 100 | .hyperparameters.sleep_ms = 300' "$good" >"$slow"
expect_rc 0 "submit --json" hf_cli submit "$slow" --json
sid=$(jq -e .id "$HF_TMP/out") || hf_fail "submit --json did not print {\"id\": N}"
running_trial() {
  curl -fsS "$HF_URL/api/v1/experiments/$sid/trials" | jq -e '[.trials[] | select(.state == "RUNNING")][0].id'
}
hf_wait_for 20 running_trial || hf_fail "no trial of the slow experiment started"
rt=$(running_trial)
expect_rc 2 "kill with a bare number is refused" hf_cli kill "$rt"
grep_err "ambiguous"
expect_rc 0 "kill trial N" hf_cli kill trial "$rt"
grep_out "trial $rt"
hf_wait_for 20 bash -c "curl -fsS '$HF_URL/api/v1/trials/$rt' | jq -e '.state == \"CANCELED\"'" \
  || hf_fail "trial $rt not CANCELED after kill: $(hf_get "/api/v1/trials/$rt" | jq -c '{state, events: [.events[].type]}')"
hf_log "ok: trial $rt CANCELED"
expect_rc 0 "pause" hf_cli pause "$sid"
grep_out "PAUSED"
hf_get "/api/v1/experiments/$sid" | hf_jq_assert '.state == "PAUSED"' "experiment PAUSED"
sleep 1
hf_get "/api/v1/experiments/$sid/trials" | hf_jq_assert '[.trials[] | select(.state == "RUNNING" or .state == "ASSIGNED")] | length == 0' \
  "no trial runs while paused"
expect_rc 0 "resume --json" hf_cli resume "$sid" --json
jq -e '.state == "ACTIVE"' "$HF_TMP/out" >/dev/null || hf_fail "resume --json: $(head -c 300 "$HF_TMP/out")"
hf_wait_for 20 running_trial || hf_fail "no trial runs after resume"
hf_log "ok: a trial runs again after resume"
expect_rc 0 "kill exp N" hf_cli kill exp "$sid"
grep_out "CANCELED"
hf_wait_for 20 bash -c "curl -fsS '$HF_URL/api/v1/experiments/$sid/trials' | jq -e 'all(.trials[]; .state != \"RUNNING\" and .state != \"ASSIGNED\")'" \
  || hf_fail "trials still running after kill exp"
expect_rc 1 "watch of a CANCELED experiment exits 1" hf_cli watch "$sid" --interval-ms 100
expect_rc 3 "kill of a missing trial" hf_cli kill t999999

# --- unreachable scheduler
dead=http://127.0.0.1:$(hf_free_port)
expect_rc 4 "ls against an unreachable scheduler" "$HF_BIN/hyperfarm" --url "$dead" ls
grep_err "$dead"
grep_err "hyperfarm up"
expect_rc 4 "HYPERFARM_URL is honoured" env HYPERFARM_URL="$dead" "$HF_BIN/hyperfarm" agents
grep_err "$dead"

# --- completion script loads and registers
"$HF_BIN/hyperfarm" completion bash >"$HF_TMP/compl.bash"
bash -c "source '$HF_TMP/compl.bash' && complete -p hyperfarm" | grep -q _hyperfarm \
  || hf_fail "completion script does not register"
hf_log "ok: completion script loads"

# --- hyperfarm up: a farm that answers and stops on SIGINT; its children
# log to farm/up.log beside the database, the agent works in
# farm/hyperfarm-work, and the terminal gets only up's own lines.
uport=$(hf_free_port)
mkdir -p "$HF_TMP/farm"
(cd "$HF_TMP" && exec "$HF_BIN/hyperfarm" up --listen "127.0.0.1:$uport" --db farm/up.db \
   --slots 1) >"$HF_TMP/up.log" 2>&1 &
up=$!
hf_track "$up"
hf_wait_http "http://127.0.0.1:$uport/healthz" 20 || hf_fail "hyperfarm up: no scheduler on port $uport"
hf_wait_for 15 bash -c "'$HF_BIN/hyperfarm' --url http://127.0.0.1:$uport agents --json | jq -e '.agents | length == 1'" \
  || hf_fail "hyperfarm up: no agent registered"
hf_wait_for 5 grep -q "dashboard  http://127.0.0.1:$uport/" "$HF_TMP/up.log" || hf_fail "hyperfarm up did not print the dashboard URL"
hf_log "ok: hyperfarm up serves on $uport with one agent"
grep -q "logs       farm/up.log" "$HF_TMP/up.log" || hf_fail "hyperfarm up does not say where the logs are: $(cat "$HF_TMP/up.log")"
grep -q "export HYPERFARM_URL=http://127.0.0.1:$uport" "$HF_TMP/up.log" || hf_fail "hyperfarm up's hint lacks the URL"
[[ -d $HF_TMP/farm/hyperfarm-work ]] || hf_fail "the agent's work folder is not next to the database: $(ls "$HF_TMP" "$HF_TMP/farm")"
[[ ! -e $HF_TMP/hyperfarm-work ]] || hf_fail "hyperfarm up made a work folder in the current directory"
grep -q "hyperfarm-scheduler" "$HF_TMP/farm/up.log" || hf_fail "the scheduler's lines are not in farm/up.log"
grep -q "hyperfarm-agent" "$HF_TMP/farm/up.log" || hf_fail "the agent's lines are not in farm/up.log"
grep -q "hyperfarm-scheduler\|hyperfarm-agent" "$HF_TMP/up.log" && hf_fail "the children still log to up's terminal: $(head -20 "$HF_TMP/up.log")"
kill -INT "$up"
rc=0
for ((i = 0; i < 200; i++)); do hf_alive "$up" || break; sleep 0.1; done
hf_alive "$up" && hf_fail "hyperfarm up still running 20 s after SIGINT"
wait "$up" || rc=$?
(( rc == 0 )) || hf_fail "hyperfarm up exited $rc after SIGINT: $(tail -5 "$HF_TMP/up.log")"
curl -fsS -m 1 "http://127.0.0.1:$uport/healthz" >/dev/null 2>&1 && hf_fail "the scheduler still answers after up stopped"
hf_log "ok: hyperfarm up stopped the agent and the scheduler on SIGINT"
hf_log "PASS"
