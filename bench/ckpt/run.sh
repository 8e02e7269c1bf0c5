#!/usr/bin/env bash
# bench/ckpt/run.sh — issue 15's "Numbers" for checkpoints that travel with
# the trial (docs/scheduler.md, "The checkpoint store"), each printed beside
# a baseline from the same run and the ratio. Not a test: figures only.
#
#   upload   a 256 MiB checkpoint through the agent's upload code
#            (agent_objects_upload) into a real scheduler on loopback, MB/s,
#            beside a raw loopback TCP copy of the same bytes (target >= 500
#            MB/s); then 4 such uploads at once and the scheduler's peak RSS
#            growth (target < 32 MiB). Program: $HF_BIN/bench/ckpt_upload.
#   trainer  hyperfarm-train run by a real agent on Fashion-MNIST,
#            checkpointing every epoch: samples/s with the checkpoints
#            uploaded beside the same run with --no-checkpoint-upload
#            (target: within 10 %).
#   resume   a trial with a 64 MiB checkpoint on agent b1; b1 and the trial
#            are SIGKILLed; from the scheduler declaring b1 lost (its
#            AGENT_LOST event) to the trial running again on b2 from the
#            checkpoint (the new attempt's RUNNING event; the agent sends it
#            only after the restore was fetched and verified), beside the same
#            with a checkpoint of a few bytes (target < 2 s).
#
#   HF_BIN=$PWD/bin bash bench/ckpt/run.sh [upload|trainer|resume ...]
#   CKPT_MIB (256)  CKPT_RESUME_MIB (64)  CKPT_TRAIN_EPOCHS (4)
#   CKPT_TRAIN_LIMIT (20000 training samples)  CKPT_TRAIN_HIDDEN (512,256)
#   BENCH_DATA (/usr/share/datasets/fashion-mnist)
# The machine's load average is printed first: figures from a shared,
# loaded machine say so.
source "$(dirname "$0")/../../tests/system/lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train tests/fake_trial bench/ckpt_upload
hf_setup
parts=("$@")
(( ${#parts[@]} )) || parts=(upload trainer resume)
want() { local p; for p in "${parts[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
DATA=${BENCH_DATA:-/usr/share/datasets/fashion-mnist}
FAKE=$HF_BIN/tests/fake_trial
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) (before the run)"

cancel() { curl -fsS -X POST "$HF_URL/api/v1/experiments/$1/cancel" >/dev/null || true; }
first_trial() { hf_get "/api/v1/experiments/$1/trials" | jq -r '.trials[0].id // empty'; }
running() { hf_get "/api/v1/experiments/$1/trials" | jq -e '.trials[0].state == "RUNNING"' >/dev/null; }

# ---------------------------------------------------------------- upload
if want upload; then
  hf_start_scheduler
  hf_start_agent u0 --slots 1
  exp=$(hf_submit "$(jq -n --arg ft "$FAKE" '{name: "ckpt-upload-bench", objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1}, hyperparameters: {x: 0.3},
    trial: {command: [$ft, "--epochs", "100000", "--sleep-ms", "60000"], max_restarts: 0}}')")
  hf_wait_for 30 running "$exp" || hf_fail "upload: no trial running"
  tid=$(first_trial "$exp")
  mkdir -p "$HF_TMP/up"
  "$HF_BIN/bench/ckpt_upload" --url "$HF_URL" --trial "$tid" --sched-pid "$HF_SCHED_PID" --dir "$HF_TMP/up" \
    --size-mib "${CKPT_MIB:-256}" --streams 4 || hf_fail "ckpt_upload failed"
  cancel "$exp"
  hf_stop_agent u0
  hf_stop_scheduler
  rm -rf "$HF_TMP/up" "$HF_DB".checkpoints
  echo "load average after upload: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

# ---------------------------------------------------------------- trainer
# One trial of hyperfarm-train per setting, on the same agent options but
# for the upload; samples/s is the mean of the trainer's per-epoch
# samples_per_s. Off runs first, then on, then off again (the load of a
# shared machine drifts: the baseline is the mean of the two off runs).
train_sps() {   # NAME [AGENT ARGS...] -> mean samples/s, checkpoints stored
  local name=$1; shift
  # a scheduler of its own: a stopped agent stays placeable until it is
  # declared lost
  rm -rf "$HF_DB" "$HF_DB"-* "$HF_DB".checkpoints
  hf_start_scheduler >&2
  hf_start_agent "$name" --slots 1 "$@"
  local exp tid
  exp=$(hf_submit "$(jq -n --arg n "$name" --argjson e "${CKPT_TRAIN_EPOCHS:-4}" --arg data "$DATA" \
      --argjson lim "${CKPT_TRAIN_LIMIT:-20000}" --arg hid "${CKPT_TRAIN_HIDDEN:-512,256}" '{
    name: ("ckpt-train-" + $n), objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1}, hyperparameters: {lr: 0.001},
    trial: {command: ["hyperfarm-train", "--model", "mlp", "--hidden", $hid, "--optimizer", "adam",
                      "--batch-size", "128", "--threads", "1", "--data", $data, "--limit-train", ($lim | tostring),
                      "--val-size", "2000", "--eval-test=false", "--epochs", ($e | tostring)], max_restarts: 0}}')")
  hf_wait_experiment "$exp" 600
  tid=$(first_trial "$exp")
  hf_get "/api/v1/trials/$tid" | hf_jq_assert '.state == "COMPLETED"' "trainer run $name completed"
  local sps n
  sps=$(hf_get "/api/v1/trials/$tid/metrics?name=samples_per_s&limit=100000" | jq '[.metrics[].value] | add / length')
  n=$(curl -fsS "$HF_URL/api/v1/trials/$tid/checkpoints" | jq '.checkpoints | length')
  local ck
  ck=$(du -sb "$HF_DB".checkpoints/objects 2>/dev/null | cut -f1)
  hf_stop_agent "$name"
  hf_stop_scheduler
  echo "$sps $n ${ck:-0}"
}
if want trainer; then
  if [[ ! -r $DATA/train-images-idx3-ubyte.gz ]]; then
    echo "trainer: skipped, $DATA not installed"
  else
    read -r off1 n_off1 _ < <(train_sps off1 --no-checkpoint-upload)
    read -r on n_on ck < <(train_sps on)
    read -r off2 n_off2 _ < <(train_sps off2 --no-checkpoint-upload)
    (( n_on > 0 )) || hf_fail "trainer: the upload run stored no checkpoint"
    (( n_off1 == 0 && n_off2 == 0 )) || hf_fail "trainer: --no-checkpoint-upload stored checkpoints"
    awk -v on="$on" -v a="$off1" -v b="$off2" -v n="$n_on" -v ck="${ck:-0}" 'BEGIN {
      off = (a + b) / 2; r = on / off
      printf "hyperfarm-train MLP %s, 1 thread, checkpoint every epoch, uploaded (%d checkpoints, %.1f MB stored): %.0f samples/s\n", ENVIRON["CKPT_TRAIN_HIDDEN"] ? ENVIRON["CKPT_TRAIN_HIDDEN"] : "512,256", n, ck / 1e6, on
      printf "same run, --no-checkpoint-upload (baseline, mean of a run before and after): %.0f samples/s (%.0f, %.0f)\n", off, a, b
      printf "ratio upload/no-upload samples/s: %.3f; target within 10 %%: %s\n", r, (r >= 0.9 ? "met" : "MISSED") }'
  fi
  echo "load average after trainer: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

# ---------------------------------------------------------------- resume
# ms from the trial's "agent lost" event to its next RUNNING event, for a
# checkpoint of BYTES (fake_trial --ckpt-bytes; 0 = its few-byte JSON).
resume_ms() {   # BYTES
  local bytes=$1 exp tid tpid newest resumed logs ms
  # a fresh database and fresh agent disks (trial ids start at 1 again)
  rm -rf "$HF_DB" "$HF_DB"-* "$HF_DB".checkpoints "$HF_TMP/agent-b1" "$HF_TMP/agent-b2"
  hf_start_scheduler --agent-timeout 500
  hf_start_agent b1 --slots 1 --heartbeat-ms 100 --keep-trial-dirs-s -1
  exp=$(hf_submit "$(jq -n --arg ft "$FAKE" --argjson b "$bytes" '{name: "ckpt-resume-bench",
    objective: {metric: "val_acc", goal: "maximize"}, searcher: {name: "random", max_trials: 1},
    hyperparameters: {x: 0.3},
    trial: {command: [$ft, "--epochs", "1000", "--sleep-ms", "1500", "--ckpt-bytes", ($b | tostring)], max_restarts: 3}}')")
  hf_wait_for 30 running "$exp" || hf_fail "resume: trial not running"
  tid=$(first_trial "$exp")
  hf_wait_for 60 bash -c "curl -fsS '$HF_URL/api/v1/trials/$tid/checkpoints' | jq -e '.checkpoints | length >= 1'" \
    || hf_fail "resume: no checkpoint of trial $tid stored in 60 s"
  hf_start_agent b2 --slots 1 --heartbeat-ms 100 --keep-trial-dirs-s -1
  # the trial's process: its working directory is inside b1's workdir
  tpid=$(for d in /proc/[0-9]*; do [[ $(readlink "$d/cwd" 2>/dev/null) == "$HF_TMP/agent-b1"/* ]] && echo "${d#/proc/}"; done | head -1) || true
  kill -KILL "${HF_AGENT_PIDS[b1]}" ${tpid:+"$tpid"}
  wait "${HF_AGENT_PIDS[b1]}" 2>/dev/null || true
  unset 'HF_AGENT_PIDS[b1]'
  hf_wait_for 60 bash -c "curl -fsS '$HF_URL/api/v1/trials/$tid' | jq -e '.state == \"RUNNING\" and .agent == \"b2\"'" \
    || hf_fail "resume: trial $tid not running on b2 in 60 s"

  hf_wait_for 30 bash -c "curl -fsS '$HF_URL/api/v1/trials/$tid/logs?limit=100000' | jq -e '[.logs[].line | select(startswith(\"resuming after epoch\"))] | length > 0'" \
    || hf_fail "resume: trial $tid did not resume from its checkpoint on b2"
  logs=$(hf_get "/api/v1/trials/$tid/logs?limit=100000")
  # attempt 1's newest stored checkpoint (b1 may have finished an upload
  # between the start of b2 and the kill)
  newest=$(hf_get "/api/v1/trials/$tid/checkpoints" | jq '[.checkpoints[] | select(.attempt == 1) | .step] | max')
  resumed=$(jq -r '[.logs[].line | select(startswith("resuming after epoch"))][-1]' <<<"$logs" | awk '{print $4}')
  (( resumed * 100 == newest )) || hf_fail "resume: resumed after epoch $resumed, the store's newest was step $newest"
  # the trial's own events: FAILED "agent lost" is written in the same
  # step as AGENT_LOST; RUNNING comes once b2 started the process (after
  # fetching and verifying the restore)
  hf_get "/api/v1/trials/$tid" | jq -r '[.events[] | select(.type == "FAILED" and (.detail | startswith("agent lost")))][-1].time as $l
      | [.events[] | select(.type == "RUNNING")][-1].time as $r | "\($r - $l) \($l)"' >"$HF_TMP/resume_ms"
  read -r ms _ <"$HF_TMP/resume_ms"
  echo "$ms" >"$HF_TMP/resume_ms"
  hf_stop_agent b2
  hf_stop_scheduler
}
if want resume; then
  mib=${CKPT_RESUME_MIB:-64}
  if [[ -z ${CKPT_SKIP_BIG:-} ]]; then resume_ms $(( mib << 20 )); big=$(<"$HF_TMP/resume_ms"); else big=-1; fi
  resume_ms 0; small=$(<"$HF_TMP/resume_ms")
  echo "resume on another agent, agent declared lost -> trial running again from its $mib MiB checkpoint (fetched, verified): $big ms"
  echo "same with a checkpoint of a few bytes (baseline: requeue, placement, spawn): $small ms"
  awk -v a="$big" -v b="$small" 'BEGIN { printf "ratio %d MiB / few bytes: %.2f; target < 2000 ms: %s\n", '"$mib"', (b > 0 ? a / b : 0), (a < 2000 ? "met" : "MISSED") }'
  echo "load average after resume: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
