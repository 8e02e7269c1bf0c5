#!/usr/bin/env bash
# test_multiserver_slurm.sh — the Slurm provisioner on a real Slurm
# cluster (issue 32; docs/deploy.md "Slurm").
#
# Servers of tests/system/netns_lib.sh, each in its own network, mount,
# pid and UTS namespace (its own address and host name): "sched"
# (10.77.0.2) runs slurmctld (as host hfctl) and hyperfarm-scheduler
# --provisioner slurm; n1, n2, n3 (10.77.0.11-13) run slurmd with 2 CPUs
# each. munged runs once in the test's namespace; its socket, the key and
# slurm.conf lie in /srv/slurm, which every server sees (Debian's
# slurm-wlm with ProctrackType=proctrack/linuxproc, TaskPlugin=task/none:
# no cgroups). Agents are 1-CPU jobs with a 4 s idle timeout. Checks:
#   - an empty farm and a sweep of 4 trials: agent jobs appear in squeue
#     and the API, agents named slurm-JOB-NODE register, the trials
#     complete;
#   - a long trial whose job gets SIGTERM (scancel --signal=TERM --full, as
#     a preemption or the time limit sends it): its agent drains, the
#     trial is requeued without a restart (restarts 0), runs on another
#     agent and resumes from its checkpoint (fake_trial's "resuming after
#     epoch");
#   - idle allocations are released: when the queue is empty every job
#     leaves squeue, the provisioner counts them released;
#   - a 2-worker trial on 1-CPU agents gets one job of --nodes 2, and both
#     its ranks run on that job's agents.
# Skips (77) where slurm-wlm/munge are not installed or Slurm cannot start.
source "$(dirname "$0")/netns_lib.sh"
hf_need hyperfarm-scheduler hyperfarm-agent
for p in munged slurmctld slurmd sbatch squeue scancel sinfo; do
  command -v "$p" >/dev/null || netns_skip "$p not found: install slurm-wlm and munge (apt-get install slurm-wlm munge)"
done
netns_setup

S=/srv/slurm
mkdir -p "$S"
chmod 755 "$S"
export SLURM_CONF=$S/slurm.conf
head -c 1024 /dev/urandom >"$S/munge.key"
chmod 400 "$S/munge.key"
munged -F -f --socket="$S/munge.sock" --key-file="$S/munge.key" --log-file="$HF_TMP/munged.log" \
  --pid-file="$S/munged.pid" --seed-file="$S/munged.seed" >>"$HF_TMP/munged.out" 2>&1 &
hf_track $!
hf_wait_for 10 test -S "$S/munge.sock" || netns_skip "munged did not start: $(tail -3 "$HF_TMP/munged.log" "$HF_TMP/munged.out" 2>/dev/null)"

cat >"$SLURM_CONF" <<CONF
ClusterName=hf
SlurmctldHost=hfctl(10.77.0.2)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/srv/hf/slurmctld
SlurmdSpoolDir=/srv/hf/slurmd
SlurmctldPidFile=/srv/hf/slurmctld.pid
SlurmdPidFile=/srv/hf/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=2
MessageTimeout=5
NodeName=n1 NodeAddr=10.77.0.11 CPUs=2 State=UNKNOWN
NodeName=n2 NodeAddr=10.77.0.12 CPUs=2 State=UNKNOWN
NodeName=n3 NodeAddr=10.77.0.13 CPUs=2 State=UNKNOWN
PartitionName=hf Nodes=n1,n2,n3 Default=YES MaxTime=INFINITE State=UP
CONF

# slurmctld on "sched" as host hfctl; slurmd -N nX on each node server
netns_server sched 10.77.0.2
netns_spawn sched "$HF_TMP/slurmctld.log" unshare --uts sh -c 'hostname hfctl && mkdir -p /srv/hf/slurmctld && exec slurmctld -D -i'
i=1
for n in n1 n2 n3; do
  netns_server "$n" "10.77.0.1$i"
  # slurmd initialises its cgroup plugin and reads the CPU topology from
  # /sys even with proctrack/linuxproc: a machine without /sys mounted (a
  # chroot, CI's fresh root) gets sysfs in this server's own mount
  # namespace (nothing outside it sees it) and, at /sys/fs/cgroup, an empty
  # tmpfs with the named systemd hierarchy: cgroup v1, which Slurm then
  # only detects (no controller is used with linuxproc and task/none)
  netns_spawn "$n" "$HF_TMP/slurmd-$n.log" unshare --uts sh -c "hostname $n && mkdir -p /srv/hf/slurmd &&
    { mountpoint -q /sys || mount -t sysfs sysfs /sys; } &&
    { mountpoint -q /sys/fs/cgroup || { mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
      mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd; }; } && exec slurmd -D -N $n"
  i=$((i + 1))
done
nodes_idle() { [[ $(netns_run sched sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle') == 3 ]]; }
if ! hf_wait_for 30 nodes_idle; then
  hf_log "sinfo: $(netns_run sched sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ';')"
  hf_log "slurmctld: $(tail -5 "$HF_TMP/slurmctld.log" | tr '\n' ';')"
  hf_log "slurmd n1: $(tail -5 "$HF_TMP/slurmd-n1.log" | tr '\n' ';')"
  netns_skip "Slurm could not start here (slurmctld and 3 slurmd not idle within 30 s; logs above)"
fi
hf_log "Slurm up: $(netns_run sched sinfo -h -N -o '%N %T' | tr '\n' ' ')"

# the scheduler; its agents' token where every node reads it
HF_AGENT_TOKEN=a-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
printf 'agent:%s\n' "$HF_AGENT_TOKEN" >"$S/agent-token"
chmod 600 "$S/agent-token"
TMPDIR=/tmp netns_start_scheduler --agent-timeout 2000 --provisioner slurm \
  --provision-scheduler-url http://10.77.0.2:8080 --provision-agent "$HF_BIN/hyperfarm-agent" \
  --provision-agent-args "--token-file $S/agent-token --sandbox off --heartbeat-ms 200" \
  --provision-interval-ms 500 --slurm-cpus 1 --slurm-max-agents 6 --slurm-idle-timeout 4 \
  --slurm-sbatch-args "--output=/tmp/slurm-%j.out --chdir=/tmp"
hf_get /api/v1/provisioner | hf_jq_assert '.provisioner == "slurm" and .enabled and (.jobs | length) == 0' \
  "provisioner slurm, no job on an empty queue"

squeue_jobs() { netns_run sched squeue -h -n hyperfarm-agent -o '%i %T %D' 2>/dev/null; }
trials() { hf_get "/api/v1/experiments/$1/trials"; }

# 1. a sweep of 4 on an empty farm
exp() {   # NAME MAX_TRIALS EPOCHS SLEEP_MS [RESOURCES_JSON]
  netns_fake_experiment "$1" "{\"name\": \"random\", \"max_trials\": $2, \"max_concurrent_trials\": $2}" 0 \
    --epochs "$3" --sleep-ms "$4" | jq -c --argjson r "${5:-null}" 'if $r then .trial.resources = $r else . end'
}
a=$(hf_submit "$(exp sweep 4 2 300)")
jobs_seen() { [[ $(squeue_jobs | wc -l) -ge 1 ]]; }
hf_wait_for 15 jobs_seen || hf_fail "no agent job in squeue 15 s after the sweep; provisioner: $(hf_get /api/v1/provisioner)"
hf_log "agent jobs: $(squeue_jobs | tr '\n' ';')"
hf_get /api/v1/provisioner | hf_jq_assert '.counts.submitted >= 1 and .counts.submitted <= 4' \
  "the provisioner submitted between 1 and 4 jobs for 4 one-slot trials"
hf_wait_experiment "$a" 60
trials "$a" | hf_jq_assert '[.trials[] | select(.state == "COMPLETED")] | length == 4' "the 4 trials completed"
hf_get /api/v1/agents | hf_jq_assert '[.agents[] | select(.name | test("^slurm-[0-9]+-n[123]$"))] | length >= 1' \
  "agents named slurm-JOB-NODE registered"
curl -fsS -m 5 "$HF_URL/metrics" | grep -q '^hyperfarm_provision_submitted_total [1-9]' ||
  hf_fail "/metrics has no hyperfarm_provision_submitted_total"

# 2. preemption: SIGTERM to the job of a running trial
b=$(hf_submit "$(exp preempt 1 8 700)")
running() { trials "$b" | jq -e '.trials[0].state == "RUNNING"' >/dev/null; }
hf_wait_for 30 running || hf_fail "the long trial did not start in 30 s"
t=$(trials "$b" | jq -er '.trials[0].id')
stored() { hf_get "/api/v1/trials/$t/checkpoints" | jq -e '([.checkpoints[].step] | max // 0) >= 200' >/dev/null; }
hf_wait_for 30 stored || hf_fail "trial $t stored no checkpoint of epoch 2 in 30 s"
ag=$(hf_get "/api/v1/trials/$t" | jq -r .agent)
job=$(sed -E 's/^slurm-([0-9]+)-.*/\1/' <<<"$ag")
[[ $job =~ ^[0-9]+$ ]] || hf_fail "trial $t runs on agent '$ag', not one of a Slurm job"
hf_log "trial $t runs on $ag: scancel --signal=TERM --full $job (a preemption)"
netns_run sched scancel --signal=TERM --full "$job" || hf_fail "scancel failed"
done_b() { trials "$b" | jq -e '.trials[0].state == "COMPLETED" or .trials[0].state == "FAILED"' >/dev/null; }
hf_wait_for 60 done_b || hf_fail "trial $t did not end within 60 s of the preemption: $(hf_get "/api/v1/trials/$t")"
tr=$(hf_get "/api/v1/trials/$t")
jq -e --arg a "$ag" '.state == "COMPLETED" and .restarts == 0 and .agent != $a' <<<"$tr" >/dev/null ||
  hf_fail "after the preemption trial $t: $(jq -c '{state, agent, restarts, attempt}' <<<"$tr") (want COMPLETED elsewhere, restarts 0)"
hf_get "/api/v1/trials/$t/logs?limit=10000" | jq -r '.logs[].line' >"$HF_TMP/preempt.log"
grep -q 'resuming after epoch [1-9]' "$HF_TMP/preempt.log" ||
  hf_fail "trial $t did not resume from its checkpoint: $(grep -i 'resum\|drain\|stop' "$HF_TMP/preempt.log" | tail -5)"
hf_log "preempted trial $t: $(grep -o 'resuming after epoch [0-9]*' "$HF_TMP/preempt.log" | tail -1) on $(jq -r .agent <<<"$tr"), restarts 0"

# 3. idle allocations are released
no_jobs() { [[ -z $(squeue_jobs) ]]; }
hf_wait_for 30 no_jobs || hf_fail "agent jobs still in squeue 30 s after the queue emptied: $(squeue_jobs | tr '\n' ';')"
released() { hf_get /api/v1/provisioner | jq -e '.counts.pending == 0 and .counts.running == 0 and .counts.released >= 2' >/dev/null; }
hf_wait_for 10 released || hf_fail "the provisioner does not count the jobs released: $(hf_get /api/v1/provisioner | jq -c .counts)"
hf_log "idle jobs released: $(hf_get /api/v1/provisioner | jq -c .counts)"

# 4. a 2-node trial in one allocation (1-CPU agents, 2 workers of 1 slot)
lost() { hf_get /api/v1/agents | jq -e '[.agents[] | select(.state == "ALIVE")] | length == 0' >/dev/null; }
hf_wait_for 10 lost || hf_fail "agents still alive after their jobs ended"
c=$(hf_submit "$(exp gang 1 2 300 '{"workers": 2, "slots_per_worker": 1}')")
gjob() { hf_get /api/v1/provisioner | jq -er '[.jobs[] | select(.nodes == 2)][0].id'; }
hf_wait_for 15 gjob || hf_fail "no 2-node job for the gang trial: $(hf_get /api/v1/provisioner | jq -c .jobs)"
g=$(gjob)
hf_wait_experiment "$c" 60
gt=$(trials "$c" | jq -er '.trials[0].id')
trials "$c" | hf_jq_assert '.trials[0].state == "COMPLETED"' "the 2-node trial completed"
hf_get /api/v1/agents | jq -r --arg p "slurm-$g-" '.agents[] | select(.name | startswith($p)) | .name' >"$HF_TMP/gang-agents"
hf_assert_eq "$(wc -l <"$HF_TMP/gang-agents")" 2 "job $g (--nodes 2) started 2 agents: $(tr '\n' ' ' <"$HF_TMP/gang-agents")"
ga=$(hf_get "/api/v1/trials/$gt" | jq -r .agent)
[[ $ga == "slurm-$g-"* ]] || hf_fail "gang trial $gt ran on $ga, not in job $g"
hf_wait_for 30 no_jobs || hf_fail "the gang job was not released"
hf_log "ok: Slurm provisioner: jobs sized to the queue, preemption drained and resumed, idle jobs released, 2-node gang in job $g"
