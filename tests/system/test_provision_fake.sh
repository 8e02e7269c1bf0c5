#!/usr/bin/env bash
# test_provision_fake.sh — the Slurm provisioner's scheduler side without
# Slurm (docs/deploy.md "Slurm"): sbatch, squeue and scancel are small
# stand-ins on PATH that record what they were given, so this runs
# everywhere (the real cluster: test_multiserver_slurm.sh). Checks:
#   - sbatch gets an argv (no shell): --parsable, --nodes=1,
#     --cpus-per-task, --gres, --partition, --account, --time and each word
#     of --slurm-sbatch-args as its own argument; the job script on stdin
#     execs the agent with --slurm --idle-timeout and single-quoted
#     arguments (a quote inside one stays inside it);
#   - no more jobs than --slurm-max-agents for a larger queue; the API and
#     /metrics show them pending;
#   - lines squeue prints that are not ID|STATE|NODES are skipped;
#   - when the queue empties (the experiment is cancelled), the pending
#     jobs are cancelled with scancel and counted released.
source "$(dirname "$0")/lib.sh"
hf_need hyperfarm-scheduler
hf_setup

B=$HF_TMP/fakebin J=$HF_TMP/jobs
mkdir -p "$B" "$J"
cat >"$B/sbatch" <<EOS
#!/bin/sh
n=\$(( \$(ls "$J" | grep -c '\.args\$') + 100 ))
printf '%s\n' "\$@" >"$J/\$n.args"
cat >"$J/\$n.sh"
echo "sbatch: warning: a warning line first" >&2
echo "\$n"
EOS
cat >"$B/squeue" <<EOS
#!/bin/sh
echo "garbage line from a wrapper"
for f in "$J"/*.sh; do
  [ -e "\$f" ] || continue
  id=\$(basename "\$f" .sh)
  nodes=\$(sed -n 's/^--nodes=//p' "$J/\$id.args")
  echo "\$id|PENDING|\$nodes"
done
EOS
cat >"$B/scancel" <<EOS
#!/bin/sh
mv "$J/\$1.sh" "$J/\$1.cancelled"
EOS
chmod +x "$B"/*

PATH=$B:$PATH hf_start_scheduler --provisioner slurm --provision-scheduler-url http://10.0.0.1:8080 \
  --provision-agent /opt/hf/hyperfarm-agent --provision-agent-args "--token-file /x/it's --sandbox off" \
  --provision-interval-ms 200 --slurm-cpus 2 --slurm-max-agents 3 --slurm-gres gpu:1 --slurm-partition p1 \
  --slurm-account lab --slurm-time 60 --slurm-sbatch-args "--qos=low  --exclusive"

exp='{"name": "fake", "objective": {"metric": "m", "goal": "maximize"},
      "searcher": {"name": "random", "max_trials": 10, "max_concurrent_trials": 10},
      "hyperparameters": {"x": {"type": "double", "min": 0, "max": 1}}, "trial": {"command": ["true"]}}'
id=$(hf_submit "$exp")
three() { [[ $(ls "$J" | grep -c '\.sh$') -ge 3 ]]; }
hf_wait_for 10 three || hf_fail "no 3 jobs submitted in 10 s: $(ls "$J"); $(grep -i provision "$HF_TMP/scheduler.log" | tail -3)"
sleep 1
hf_assert_eq "$(ls "$J" | grep -c '\.sh$')" 3 "10 one-GPU trials, --slurm-max-agents 3: 3 jobs"
want=$(printf '%s\n' --parsable --job-name=hyperfarm-agent --nodes=1 --ntasks-per-node=1 --cpus-per-task=2 \
  --gres gpu:1 --partition p1 --account lab --time=60 --qos=low --exclusive)
hf_assert_eq "$(cat "$J/100.args")" "$want" "sbatch's argv"
grep -qxF "exec '/opt/hf/hyperfarm-agent' '--scheduler' 'http://10.0.0.1:8080' '--slurm' '--idle-timeout' '300' '--token-file' '/x/it'\\''s' '--sandbox' 'off'" "$J/100.sh" ||
  hf_fail "the job script: $(cat "$J/100.sh")"
head -1 "$J/100.sh" | grep -qx '#!/bin/sh' || hf_fail "the job script has no #!/bin/sh line"
hf_get /api/v1/provisioner | hf_jq_assert '.counts.pending == 3 and .counts.submitted == 3 and ([.jobs[] | select(.state == "pending")] | length) == 3' \
  "the API lists 3 pending jobs"
curl -fsS -m 5 "$HF_URL/metrics" | grep -qx 'hyperfarm_provision_jobs{state="pending"} 3' ||
  hf_fail "/metrics: $(curl -fsS -m 5 "$HF_URL/metrics" | grep provision)"
grep -q 'squeue printed 1 line' "$HF_TMP/scheduler.log" || hf_fail "the garbage squeue line was not reported as skipped"

hf_post "/api/v1/experiments/$id/cancel" >/dev/null
cancelled() { [[ $(ls "$J" | grep -c '\.cancelled$') -eq 3 ]]; }
hf_wait_for 10 cancelled || hf_fail "the pending jobs were not cancelled: $(ls "$J")"
released() { hf_get /api/v1/provisioner | jq -e '.counts.canceled == 3 and .counts.released == 3 and .counts.pending == 0' >/dev/null; }
hf_wait_for 5 released || hf_fail "the provisioner's counts: $(hf_get /api/v1/provisioner | jq -c .counts)"
hf_log "ok: sbatch argv and script, max agents, API and /metrics, garbage skipped, pending jobs cancelled when the queue emptied"
