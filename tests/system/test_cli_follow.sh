#!/usr/bin/env bash
# test_cli_follow.sh — the CLI given several scheduler URLs (docs/cli.md,
# "Several scheduler URLs"), `hyperfarm replication` and `hyperfarm
# promote`, against a real scheduler and tests/system/fake_standby.py (a
# stand-in that answers as a standby: 503 naming the primary, its status,
# a promotion) — the real standby is test_scheduler_standby.sh's.
#
#   A. reads: --url DEAD,LIVE lists experiments (first that answers).
#   B. writes: --url STANDBY,LIVE submits: the standby's 503 names LIVE,
#      the CLI sends the submission there (once: one experiment).
#   C. HYPERFARM_URL works like --url; a list where nothing answers as a
#      primary (DEAD,STANDBY naming an unlisted URL) exits 4 naming the list.
#   D. replication: a standby's role, term, lsn, state, lag and the primary
#      it follows (peers) in text and --json; with several URLs every scheduler's section, exit 0 while one
#      answers, 4 when none does; the real primary's status; a bad URL in
#      the list exits 2.
#   E. promote: with LIVE,STANDBY the standby is found and promoted, the
#      CLI waits until it says primary of term 2 (exit 0); the real primary
#      and the promoted one refuse (409, exit 6); none answers: exit 4.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm hyperfarm-scheduler
hf_setup

hf_start_scheduler
LIVE=$HF_URL
DEAD=http://127.0.0.1:$(hf_free_port)
DEAD2=http://127.0.0.1:$(hf_free_port)
start_fake() {  # NAME PRIMARY|-: sets FAKE_URL
  local port
  port=$(hf_free_port)
  python3 "$HF_REPO/tests/system/fake_standby.py" "$port" "$HF_TMP/$1.jsonl" "$2" 1 >"$HF_TMP/$1.out" 2>&1 &
  hf_track "$!"
  hf_wait_for 10 grep -q ready "$HF_TMP/$1.out" || hf_fail "fake standby $1 did not start"
  FAKE_URL=http://127.0.0.1:$port
}
start_fake standby "$LIVE"
STANDBY=$FAKE_URL
start_fake orphan "http://127.0.0.1:1"
ORPHAN=$FAKE_URL

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
cli() { "$HF_BIN/hyperfarm" "$@"; }
exp=$HF_TMP/exp.json
jq -n '{name: "follow", objective: {metric: "val_acc", goal: "maximize"},
        searcher: {name: "random", max_trials: 1, max_concurrent_trials: 1, seed: 1},
        hyperparameters: {x: {type: "uniform", min: 0, max: 1}}, trial: {command: ["/bin/true"]}}' >"$exp"

# ---------------------------------------------------------------- A
expect_rc 0 "A: ls past a dead URL" cli --url "$DEAD,$LIVE" ls --json

# ---------------------------------------------------------------- B
expect_rc 0 "B: submit through a standby's 503" cli --url "$STANDBY,$LIVE" submit "$exp"
id=$(cat "$HF_TMP/out")
hf_get "/api/v1/experiments/$id" | hf_jq_assert '.name == "follow"' "B: the experiment is on the primary"
hf_get "/api/v1/experiments" | hf_jq_assert '[.experiments[] | select(.name == "follow")] | length == 1' "B: submitted once"
jq -se 'map(select(.method == "POST" and .path == "/api/v1/experiments")) | length == 1' "$HF_TMP/standby.jsonl" >/dev/null \
  || hf_fail "B: the submission should have gone to the standby first, once"

# ---------------------------------------------------------------- C
HYPERFARM_URL="$STANDBY,$LIVE" expect_rc 0 "C: HYPERFARM_URL list" cli show "$id" --json
expect_rc 4 "C: no primary among DEAD,ORPHAN" cli --url "$DEAD,$ORPHAN" --timeout-ms 1000 submit "$exp"
grep -q "is a standby scheduler (read-only); the primary is http://127.0.0.1:1: add it" "$HF_TMP/err" \
  || hf_fail "C: the hint should name the primary: $(cat "$HF_TMP/err")"
expect_rc 4 "C: nothing answers" cli --url "$DEAD,$DEAD2" --timeout-ms 1000 ls
grep -q "any of $DEAD,$DEAD2" "$HF_TMP/err" || hf_fail "C: the message should name the list: $(cat "$HF_TMP/err")"

# ---------------------------------------------------------------- D
expect_rc 0 "D: replication of a standby" cli --url "$STANDBY" replication
grep -qx "role      standby" "$HF_TMP/out" || hf_fail "D: role line: $(cat "$HF_TMP/out")"
grep -qx "primary   $LIVE" "$HF_TMP/out" || hf_fail "D: primary line: $(cat "$HF_TMP/out")"
grep -qx "applied   lsn 41, lag 12 ms" "$HF_TMP/out" || hf_fail "D: lag line: $(cat "$HF_TMP/out")"
grep -qx "peers     primary $LIVE (following)" "$HF_TMP/out" || hf_fail "D: peers line: $(cat "$HF_TMP/out")"
expect_rc 0 "D: replication --json" cli --url "$STANDBY" replication --json
jq -e '.role == "standby" and .lag_ms == 12' "$HF_TMP/out" >/dev/null || hf_fail "D: --json: $(cat "$HF_TMP/out")"
expect_rc 0 "D: replication of a list" cli --url "$DEAD,$STANDBY" replication --json
jq -e --arg d "$DEAD" --arg s "$STANDBY" '.schedulers | length == 2 and .[0].url == $d and .[0].replication == null
     and (.[0].error | length > 0) and .[1].url == $s and .[1].replication.role == "standby"' "$HF_TMP/out" >/dev/null \
  || hf_fail "D: list --json: $(cat "$HF_TMP/out")"
expect_rc 0 "D: replication of a list, text" cli --url "$DEAD,$STANDBY" replication
grep -qx "== $STANDBY" "$HF_TMP/out" && grep -qx "== $DEAD" "$HF_TMP/out" || hf_fail "D: sections: $(cat "$HF_TMP/out")"
expect_rc 0 "D: replication of the real primary" cli --url "$LIVE" replication
grep -qx "role      primary" "$HF_TMP/out" && grep -qx "standby   none" "$HF_TMP/out" \
  || hf_fail "D: the real primary's status: $(cat "$HF_TMP/out")"
expect_rc 4 "D: replication, none answers" cli --url "$DEAD,$DEAD2" --timeout-ms 1000 replication
expect_rc 2 "D: a bad URL in the list" cli --url "$LIVE,ftp://x" replication

# ---------------------------------------------------------------- E
expect_rc 4 "E: promote, none answers" cli --url "$DEAD,$DEAD2" --timeout-ms 1000 promote
expect_rc 0 "E: promote finds the standby" cli --url "$LIVE,$STANDBY" promote
grep -qx "$STANDBY is the primary of term 2" "$HF_TMP/out" || hf_fail "E: $(cat "$HF_TMP/out" "$HF_TMP/err")"
jq -se 'map(select(.method == "POST" and .path == "/api/v1/replication/promote")) | length == 1' "$HF_TMP/standby.jsonl" >/dev/null \
  || hf_fail "E: one promote request should have reached the standby"
expect_rc 6 "E: promoting the real primary" cli --url "$LIVE" promote
expect_rc 6 "E: promoting a primary" cli --url "$STANDBY" promote
grep -q "only a standby can be promoted" "$HF_TMP/err" || hf_fail "E: hint: $(cat "$HF_TMP/err")"
hf_log "PASS"
