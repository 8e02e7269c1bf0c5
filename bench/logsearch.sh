#!/usr/bin/env bash
# bench/logsearch.sh — log search on 1,000 trials x 10,000 lines (issue 17,
# docs/protocol.md "Log search"): a real scheduler on a database whose
# logs table holds TRIALS x LINES rows (written with the sqlite3 shell
# behind the scheduler's back while it is stopped: ingesting 10 M lines
# through heartbeats would take the bench an hour), then timed searches
# through the API: a rare fixed string, a regex and a case-insensitive
# string over the whole experiment, and a string in one trial. Peer
# figure: `grep -c` over the same lines exported to a text file.
#   HF_BIN=$PWD/bin bash bench/logsearch.sh [TRIALS] [LINES]   (default 1000 10000)
source "$(dirname "$0")/../tests/system/lib.sh"
hf_need hyperfarm-scheduler
command -v sqlite3 >/dev/null || { echo "bench/logsearch.sh: needs the sqlite3 shell" >&2; exit 1; }
hf_setup
T=${1:-1000}
L=${2:-10000}
hf_start_scheduler
exp=$(jq -n '{name: "logsearch", objective: {metric: "loss", goal: "minimize"},
  searcher: {name: "random", max_trials: 1000000}, hyperparameters: {x: {type: "uniform", min: 0, max: 1}},
  trial: {command: ["/bin/true"]}}')
id=$(hf_submit "$exp")
hf_stop_scheduler
t0=$(date +%s)
sqlite3 "$HF_DB" <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < $T)
INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at)
  SELECT i, $id, i-1, 'COMPLETED', '{"x":0.5}', 0, 0 FROM n;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < $T * $L - 1)
INSERT INTO logs(trial_id,attempt,stream,line,time)
  SELECT 1 + i / $L, 1, 'stdout',
         CASE WHEN i % 99991 = 7 THEN 'step ' || (i % $L) || ': ERROR loss is NaN, stopping'
              ELSE 'epoch ' || (i % $L / 100) || ' step ' || (i % $L) || ' loss=0.' || (i * 7919 % 100000) ||
                   ' acc=0.' || (i * 104729 % 10000) || ' lr=0.001' END, i FROM n;
COMMIT;
SQL
echo "database: $T trials x $L lines = $((T * L)) log rows, $(du -h "$HF_DB" | cut -f1) (written in $(( $(date +%s) - t0 )) s)"
hf_restart_scheduler
q() {  # LABEL PATH
  local s e body
  s=$(date +%s%N)
  body=$(curl -fsS -m 120 "$HF_URL$2")
  e=$(date +%s%N)
  printf '%-46s %6d ms  matches %5d  scanned %9d  truncated %s\n' "$1" $(( (e - s) / 1000000 )) \
    "$(jq '.logs | length' <<<"$body")" "$(jq .scanned <<<"$body")" "$(jq .truncated <<<"$body")"
}
q "experiment, fixed 'ERROR loss is NaN'"        "/api/v1/experiments/$id/logs?grep=ERROR%20loss%20is%20NaN"
q "experiment, regex 'ERROR.*N[a]N'"             "/api/v1/experiments/$id/logs?grep=ERROR.*N%5Ba%5DN&regex=1"
q "experiment, icase 'error loss'"               "/api/v1/experiments/$id/logs?grep=error%20loss&icase=1"
q "experiment, 'loss=0.5' (many, limit 1000)"    "/api/v1/experiments/$id/logs?grep=loss%3D0.5"
q "one trial, fixed 'ERROR'"                     "/api/v1/trials/$((T / 2))/logs?grep=ERROR"
sqlite3 "$HF_DB" "SELECT line FROM logs" >"$HF_TMP/all.txt"
s=$(date +%s%N)
c=$(grep -c 'ERROR loss is NaN' "$HF_TMP/all.txt")
e=$(date +%s%N)
echo "peer: grep -c over the same $((T * L)) lines as a text file: $(( (e - s) / 1000000 )) ms ($c matches)"
