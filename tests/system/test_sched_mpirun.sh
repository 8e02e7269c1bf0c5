#!/usr/bin/env bash
# test_sched_mpirun.sh — a multi-node trial launched by Open MPI's mpirun
# across the agents the scheduler placed it on (issue 8.2), on loopback.
#
# Two agents with one slot each that advertise different hosts (127.0.0.1
# and 127.0.0.2, both this machine). The experiment asks for 2 workers and
# "launcher": "mpirun", so the scheduler gang-places rank 0 on one agent and
# rank 1 on the other; rank 0's agent writes the host file
# (<trial dir>/hostfile, "host slots=N" per placed agent) and runs
#   mpirun --hostfile {hostfile} -np 2 ... hyperfarm-train --backend mpi
# with {hostfile} replaced by its path; rank 1's agent runs nothing and
# holds its slot. mpirun starts its daemon on the "other host" through
# Open MPI's own rsh launcher (plm_rsh_agent), here a fake ssh that runs
# the command locally (a real farm uses ssh between the agents' hosts).
# Checks:
#   - validation: trial.launcher other than "mpirun" is a 400;
#   - while it runs, GET /api/v1/agents shows both agents' slot used by the
#     trial (rank 0 on one, rank 1 on the other), the host file lists both
#     hosts, and the fake ssh was asked for the second host;
#   - the trial COMPLETES, ran one 2-rank mpi job, and its epoch-2 metrics
#     equal `hyperfarm-train --nproc 2` (tcp) within 1e-5 (the trainer's
#     documented tolerance for the same computation);
#   - afterwards both slots are free and the holder process is gone;
#   - an mpirun that fails ends the trial FAILED and releases both slots.
# The OMPI_ALLOW_RUN_AS_ROOT pair is for this test machine (root) only.
source "$(dirname "$0")/lib.sh"
# Open MPI allocates in components whose frames LSan names only with the slow
# unwinder; tests/lsan.supp suppresses them by library name.
[[ ${HF_VARIANT:-} == san ]] && export ASAN_OPTIONS="${ASAN_OPTIONS:-}:fast_unwind_on_malloc=0"
hf_need hyperfarm-scheduler hyperfarm-agent hyperfarm-train
if ! command -v mpirun >/dev/null || ! "$HF_BIN/hyperfarm-train" --help 2>&1 | grep -q "tcp|mpi"; then
  echo "skip: mpirun or the trainer's mpi backend is missing"
  exit 77
fi
hf_setup

flags=(--model mlp --hidden 64 --epochs 2 --batch-size 64 --lr 0.01 --optimizer adam --seed 5
       --limit-train 6000 --val-size 1000 --limit-test 1000 --threads 1 --mode sync --timeout 30)

# Reference: the trainer's own local launcher, 2 workers over tcp.
mkdir -p "$HF_TMP/ref"
( cd "$HF_TMP/ref" && exec "$HF_BIN/hyperfarm-train" "${flags[@]}" --backend tcp --nproc 2 >"$HF_TMP/ref/out" 2>"$HF_TMP/ref/err" ) &
ref=$!
hf_track "$ref"

# Open MPI starts its daemon on a remote host with "<agent> HOST COMMAND...",
# as with ssh; this one logs the host and runs the command here.
cat >"$HF_TMP/fake-rsh" <<EOF
#!/bin/sh
echo "\$*" >>"$HF_TMP/rsh.log"
shift
exec sh -c "\$*"
EOF
chmod +x "$HF_TMP/fake-rsh"

hf_start_scheduler
hf_start_agent a1 --slots 1 --advertise-host 127.0.0.1
hf_start_agent a2 --slots 1 --advertise-host 127.0.0.2

experiment() {  # NAME, then the program and its flags after mpirun's own
  local name=$1; shift
  jq -n --args '$ARGS.positional' -- \
    mpirun --hostfile "{hostfile}" -np 2 --mca plm_rsh_agent "$HF_TMP/fake-rsh" \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -x HYPERFARM_HPARAMS "$@" | jq --arg name "$name" '{
    name: ("mpirun-" + $name), objective: {metric: "val_acc", goal: "maximize"},
    searcher: {name: "random", max_trials: 1, seed: 1},
    hyperparameters: {},
    trial: {command: ., launcher: "mpirun", resources: {workers: 2, slots_per_worker: 1}, max_restarts: 0,
            env: {OMPI_ALLOW_RUN_AS_ROOT: "1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1"}}}'
}

# Validation: only "mpirun".
bad=$(experiment x true | jq '.trial.launcher = "srun"')
hf_api POST /api/v1/experiments "$bad"
[[ $HF_STATUS == 400 ]] && jq -e '.field == "trial.launcher"' >/dev/null <<<"$HF_BODY" \
  || hf_fail "launcher \"srun\" answered $HF_STATUS $HF_BODY, want 400 trial.launcher"
hf_log "ok: trial.launcher \"srun\" rejected (400 trial.launcher)"

id=$(hf_submit "$(experiment run hyperfarm-train "${flags[@]}" --backend mpi)")
t=""
hf_wait_for 20 bash -c "curl -fsS '$HF_URL/api/v1/experiments/$id/trials' | jq -e '.trials[0].state == \"RUNNING\"' >/dev/null" \
  || hf_fail "the mpirun trial did not start: $(hf_get "/api/v1/experiments/$id/trials" | jq -c '.trials[0] | {state, ranks}')"
t=$(hf_get "/api/v1/experiments/$id/trials" | jq -er '.trials[0].id')

# While it runs: each agent's only slot is used by this trial, one rank each.
held() {
  curl -fsS -m 2 "$HF_URL/api/v1/agents" | jq -e --argjson t "$t" '
    [.agents[] | select(.slots_used == 1 and ([.running[] | select(.trial_id == $t)] | length) == 1)
     | .running[] | select(.trial_id == $t) | .rank] | sort == [0, 1]' >/dev/null
}
hf_wait_for 10 held || hf_fail "agents do not both hold a slot for trial $t: $(hf_get /api/v1/agents | jq -c '[.agents[] | {name, slots_used, running}]')"
[[ $(hf_get "/api/v1/trials/$t" | jq -r .state) == RUNNING ]] \
  || hf_fail "trial $t ended before both holds were seen (run too short to check)"
hf_log "ok: while trial $t runs, a1 and a2 each use their slot for it (ranks 0 and 1)"

rank0=$(hf_get "/api/v1/trials/$t" | jq -r '.ranks[] | select(.rank == 0) | .agent')
rank1=$(hf_get "/api/v1/trials/$t" | jq -r '.ranks[] | select(.rank == 1) | .agent')
host0=127.0.0.1; host1=127.0.0.2
[[ $rank0 == a2 ]] && { host0=127.0.0.2; host1=127.0.0.1; }
hostfile="$HF_TMP/agent-$rank0/experiments/$id/trials/$t/hostfile"
[[ -f $hostfile ]] || hf_fail "no host file at $hostfile"
hf_assert_eq "$(cat "$hostfile")" "$host0 slots=1
$host1 slots=1" "host file of trial $t"
[[ ! -e "$HF_TMP/agent-$rank1/experiments/$id/trials/$t/hostfile" ]] || hf_fail "the holder's agent wrote a host file"
grep -q "holding 1 slot(s) on this agent for the mpirun started by rank 0" <(hf_get "/api/v1/trials/$t/logs?limit=100" | jq -r '.logs[].line') \
  || hf_fail "no holder note in trial $t's log"
hf_log "ok: rank 0 on $rank0 wrote the host file ($host0, $host1), rank 1 on $rank1 holds"

hf_wait_experiment "$id" 120
trial=$(hf_get "/api/v1/trials/$t")
jq -e '.state == "COMPLETED" and .exit_code == 0' >/dev/null <<<"$trial" \
  || hf_fail "trial $t ended $(jq -c '{state, exit_code}' <<<"$trial"): $(hf_get "/api/v1/trials/$t/logs?limit=200" | jq -r '.logs[].line' | tail -20)"
grep -q "^$host1 .*orted" "$HF_TMP/rsh.log" || hf_fail "mpirun did not launch its daemon on $host1 through plm_rsh_agent: $(cat "$HF_TMP/rsh.log" 2>/dev/null)"
hf_get "/api/v1/trials/$t/logs?limit=2000" | jq -r '.logs[].line' >"$HF_TMP/trial.log"
n=$(grep -c "sync data parallel: 2 ranks.*backend mpi" "$HF_TMP/trial.log" || true)
hf_assert_eq "$n" 1 "2-rank mpi jobs in trial $t's log"
hf_log "ok: trial $t COMPLETED: one 2-rank mpi job, daemon started on $host1 via plm_rsh_agent"

hf_wait_for 5 bash -c "curl -fsS '$HF_URL/api/v1/agents' | jq -e '[.agents[].slots_used] == [0, 0]' >/dev/null" \
  || hf_fail "slots not released: $(hf_get /api/v1/agents | jq -c '[.agents[] | {name, slots_used, running}]')"
grep -q "trial $t attempt 1 exited" "$HF_TMP/agent-$rank1.log" || hf_fail "the holder on $rank1 never exited"
hf_log "ok: both slots released, the holder on $rank1 exited"

wait "$ref" || hf_fail "reference hyperfarm-train --nproc 2 failed: $(tail -5 "$HF_TMP/ref/err")"
hf_reference_metrics "$HF_TMP/ref/out"
hf_assert_metrics_equal "$t" 2 "$HF_WANT" 1e-5 "mpirun trial $t over two agents (reference: hyperfarm-train --nproc 2)"
hf_log "ok: epoch 2 metrics equal the local --nproc 2 run's (val_acc $(jq -r .val_acc <<<"$HF_GOT"))"

# A failing mpirun job: the trial fails, both slots come back.
id2=$(hf_submit "$(experiment fail false)")
hf_wait_experiment "$id2" 60
hf_get "/api/v1/experiments/$id2/trials" | jq -e '.trials[0].state == "FAILED" and .trials[0].exit_code != 0' >/dev/null \
  || hf_fail "failing mpirun: $(hf_get "/api/v1/experiments/$id2/trials" | jq -c '.trials[0] | {state, exit_code}')"
hf_wait_for 5 bash -c "curl -fsS '$HF_URL/api/v1/agents' | jq -e '[.agents[].slots_used] == [0, 0]' >/dev/null" \
  || hf_fail "slots not released after a failed mpirun: $(hf_get /api/v1/agents | jq -c '[.agents[] | {name, slots_used}]')"
hf_log "ok: a failing mpirun ends the trial FAILED and releases both slots"
hf_log "PASS"
