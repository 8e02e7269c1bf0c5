#!/usr/bin/env bash
# test_e2e_context.sh — the user's code ships with the experiment
# (docs/cli.md "Shipping your code", docs/agent.md "Starting a trial"),
# with a real scheduler, a real agent whose --workdir is a fresh empty
# directory, and the real CLI:
#   - `hyperfarm submit exp.json --context DIR` where DIR holds train.py
#     (it imports lib/helper.py and prints HYPERFARM metric lines) and a
#     big file .hyperfarmignore leaves out: "command": ["python3",
#     "train.py"] runs on the agent, which never had the file, and every
#     trial completes with the metrics it computed from its hparams;
#   - a relative program with a '/' ("./run.sh") runs from the unpacked
#     copy too; the same directory submitted again is not uploaded again
#     (HEAD finds it: one object, "already on the scheduler");
#   - every trial's directory holds the unpacked files beside the
#     agent's own checkpoints/ and control.json;
#   - a context above --max-context-mb is refused by the CLI with exit
#     code 2 and the biggest file named; nothing is uploaded, no
#     experiment is created;
#   - POST /api/v1/experiments naming a context the store lacks is 422
#     and a malformed one 400, both with field "context"; PUT
#     /api/v1/contexts with a wrong hash is 422 and stores nothing;
#   - a context the agent refuses (an archive with a "../" entry, uploaded
#     with curl) fails its trials with "start failed" naming the entry,
#     and nothing lands outside the trial's directory.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm
hf_setup
command -v python3 >/dev/null || hf_fail "python3 is required"
command -v sha256sum >/dev/null || hf_fail "sha256sum is required"

hf_start_scheduler
hf_start_agent a1 --slots 2
WORK=$HF_TMP/agent-a1
OBJ=$HF_DB.checkpoints/objects
n_objects() { find "$OBJ" -type f | wc -l; }

# ---- the user's code ---------------------------------------------------------
SRC=$HF_TMP/src
mkdir -p "$SRC/lib" "$SRC/data"
cat >"$SRC/train.py" <<'EOF'
import json, os, sys
sys.path.insert(0, "lib")
from helper import score
hp = json.loads(os.environ["HYPERFARM_HPARAMS"])
for epoch in range(1, 4):
    print("HYPERFARM " + json.dumps({"step": epoch, "epoch": epoch, "acc": score(hp["lr"], epoch)}), flush=True)
EOF
printf 'def score(lr, epoch):\n    return round(lr * epoch, 6)\n' >"$SRC/lib/helper.py"
cat >"$SRC/run.sh" <<'EOF'
#!/bin/sh
echo "HYPERFARM {\"step\": 1, \"acc\": 42}"
EOF
chmod +x "$SRC/run.sh"
head -c $((3 << 20)) /dev/urandom >"$SRC/data/big.bin"
printf '# data stays home\ndata/\n*.pyc\n' >"$SRC/.hyperfarmignore"

exp() {  # NAME COMMAND_JSON
  cat <<EOF
{"name": "$1", "objective": {"metric": "acc", "goal": "maximize"},
 "searcher": {"name": "random", "max_trials": 3, "seed": 7},
 "hyperparameters": {"lr": {"type": "uniform", "min": 0.1, "max": 1.0}},
 "trial": {"command": $2, "max_restarts": 0}}
EOF
}
exp py '["python3", "train.py"]' >"$HF_TMP/py.json"
exp sh '["./run.sh"]' >"$HF_TMP/sh.json"
[[ ! -e $WORK/experiments ]] || hf_fail "the agent's work directory is not fresh"

# ---- python3 train.py from the context ----------------------------------------
E1=$(hf_cli submit "$HF_TMP/py.json" --context "$SRC" 2>"$HF_TMP/submit1.err") \
  || hf_fail "submit --context failed: $(cat "$HF_TMP/submit1.err")"
grep -q 'uploaded' "$HF_TMP/submit1.err" || hf_fail "first submit did not upload: $(cat "$HF_TMP/submit1.err")"
hf_assert_eq "$(n_objects)" 1 "objects after the first upload"
SHA=$(hf_get "/api/v1/experiments/$E1" | jq -r '.config.context // .context // empty')
hf_wait_experiment "$E1" 90
hf_get "/api/v1/experiments/$E1/trials" >"$HF_TMP/t1.json"
jq -e '.trials | length == 3 and all(.state == "COMPLETED")' "$HF_TMP/t1.json" >/dev/null \
  || hf_fail "python3 train.py trials did not all complete: $(jq -c '[.trials[] | {id, state}]' "$HF_TMP/t1.json")"
for T in $(jq -r '.trials[].id' "$HF_TMP/t1.json"); do
  hf_get "/api/v1/trials/$T" >"$HF_TMP/trial.json"
  jq -e '.objective != null and ((.objective - ((.hparams.lr * 3 * 1000000 | round) / 1000000)) | fabs) < 1e-6' \
    "$HF_TMP/trial.json" >/dev/null \
    || hf_fail "trial $T: objective is not 3*lr: $(jq -c '{hparams, objective, latest}' "$HF_TMP/trial.json")"
  D=$(find "$WORK/experiments" -type d -path "*/trials/$T" | head -1)
  [[ -f $D/train.py && -f $D/lib/helper.py && -d $D/checkpoints && -f $D/control.json ]] \
    || hf_fail "trial $T's directory lacks the context or the agent's files: $(ls -la "$D")"
  [[ ! -e $D/data ]] || hf_fail "trial $T got data/, which .hyperfarmignore leaves out"
  hf_get "/api/v1/trials/$T/logs" | jq -e '[.logs[].line] | any(test("code context [0-9a-f]{12}: 4 files"))' >/dev/null \
    || hf_fail "trial $T's log has no unpack note: $(hf_get "/api/v1/trials/$T/logs" | head -c 800)"
done
hf_log "ok: python3 train.py ran from the shipped context on a fresh agent, metrics as computed"

# ---- ./run.sh, and no second upload -------------------------------------------
E2=$(hf_cli submit "$HF_TMP/sh.json" --context "$SRC" 2>"$HF_TMP/submit2.err") \
  || hf_fail "second submit failed: $(cat "$HF_TMP/submit2.err")"
grep -q 'already on the scheduler' "$HF_TMP/submit2.err" || hf_fail "uploaded twice: $(cat "$HF_TMP/submit2.err")"
hf_assert_eq "$(n_objects)" 1 "objects after the same context again"
hf_wait_experiment "$E2" 60
hf_get "/api/v1/experiments/$E2/trials" | hf_jq_assert \
  '.trials | length == 3 and all(.state == "COMPLETED" and .objective == 42)' "./run.sh ran from the context"

# ---- over the cap: refused before anything is sent ------------------------------
printf '# nothing excluded\n' >"$HF_TMP/ignore.none"
cp "$HF_TMP/ignore.none" "$SRC/.hyperfarmignore"
nexp=$(hf_get /api/v1/experiments | jq '.experiments | length')
set +e
hf_cli submit "$HF_TMP/py.json" --context "$SRC" --max-context-mb 1 >"$HF_TMP/cap.out" 2>"$HF_TMP/cap.err"
rc=$?
set -e
hf_assert_eq "$rc" 2 "exit code of a context over the cap"
grep -q 'more than the cap of 1.0 MiB' "$HF_TMP/cap.err" || hf_fail "no cap message: $(cat "$HF_TMP/cap.err")"
grep -q 'data/big.bin' "$HF_TMP/cap.err" || hf_fail "the biggest file is not named: $(cat "$HF_TMP/cap.err")"
hf_assert_eq "$(n_objects)" 1 "objects after a refused context"
hf_assert_eq "$(hf_get /api/v1/experiments | jq '.experiments | length')" "$nexp" "experiments after a refused context"
hf_assert_eq "$(sqlite3 "$HF_DB" 'SELECT count(DISTINCT sha256) FROM contexts')" 1 "contexts rows after a refused context"
hf_log "ok: a context over the cap is refused with exit 2, nothing uploaded"

# ---- the API's checks -------------------------------------------------------------
missing=$(printf 'nothing' | sha256sum | cut -c1-64)
hf_api POST /api/v1/experiments "$(exp x '["true"]' | jq -c --arg c "$missing" '. + {context: $c}')"
hf_assert_eq "$HF_STATUS" 422 "a context the store lacks: $HF_BODY"
jq -e '.field == "context"' <<<"$HF_BODY" >/dev/null || hf_fail "422 does not name context: $HF_BODY"
hf_api POST /api/v1/experiments "$(exp x '["true"]' | jq -c '. + {context: "ABC"}')"
hf_assert_eq "$HF_STATUS" 400 "a malformed context: $HF_BODY"
jq -e '.field == "context"' <<<"$HF_BODY" >/dev/null || hf_fail "400 does not name context: $HF_BODY"
printf 'x' >"$HF_TMP/x"
st=$(curl -sS -m 10 -o "$HF_TMP/put.out" -w '%{http_code}' -T "$HF_TMP/x" -H "X-Hyperfarm-Sha256: $missing" \
  "$HF_URL/api/v1/contexts")
hf_assert_eq "$st" 422 "PUT /api/v1/contexts with a wrong hash: $(cat "$HF_TMP/put.out")"
hf_assert_eq "$(n_objects)" 1 "objects after a refused PUT"
st=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' -I "$HF_URL/api/v1/contexts/$missing")
hf_assert_eq "$st" 404 "HEAD of an unknown context"
hf_log "ok: the API refuses unknown and malformed contexts and wrong hashes"

# ---- a hostile context: refused by the agent, nothing outside -----------------------
EVIL=$HF_TMP/evil
mkdir -p "$EVIL/in"
printf 'pwned\n' >"$EVIL/in/x"
tar -C "$EVIL/in" -czf "$EVIL/evil.tar.gz" --transform 's|^x$|../../../../escaped|' x
EV=$(sha256sum "$EVIL/evil.tar.gz" | cut -c1-64)
st=$(curl -sS -m 10 -o "$HF_TMP/put.out" -w '%{http_code}' -T "$EVIL/evil.tar.gz" -H "X-Hyperfarm-Sha256: $EV" \
  "$HF_URL/api/v1/contexts")
hf_assert_eq "$st" 201 "PUT of the hostile archive (the scheduler stores any bytes): $(cat "$HF_TMP/put.out")"
E3=$(hf_submit "$(exp evil '["true"]' | jq -c --arg c "$EV" '. + {context: $c} | .searcher.max_trials = 1')")
hf_wait_experiment "$E3" 60
T3=$(hf_get "/api/v1/experiments/$E3/trials" | jq -r '.trials[0].id')
hf_get "/api/v1/trials/$T3" | hf_jq_assert \
  '.state == "FAILED" and any(.events[]; .detail | test("start failed: code context [0-9a-f]{12} refused: context entry \"../../../../escaped\": a \"..\" component"))' \
  "the hostile context failed its trial, naming the entry"
[[ -z $(find "$HF_TMP" -name escaped) ]] || hf_fail "the hostile entry was written: $(find "$HF_TMP" -name escaped)"
hf_log "ok: a hostile context is refused by the agent and writes nothing"
