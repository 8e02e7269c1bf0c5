/*
 * agent_slurm.h — an agent started inside a Slurm job (--slurm; docs/agent.md
 * "Inside a Slurm job"): it offers exactly the job's CPUs and GPUs, names
 * itself after the job and node (the provisioner matches agents to jobs by
 * that name: scheduler/provision/provision.c), keeps its files in the
 * node's temporary directory, exits after --idle-timeout seconds without a
 * trial (ending the job, which gives the allocation back), and treats
 * SIGTERM (preemption, time limit, scancel) as a drain: the trials it
 * stops report "drained", and the scheduler requeues them from their
 * newest checkpoint without counting a restart.
 */
#ifndef AGENT_SLURM_H
#define AGENT_SLURM_H

#include "agent.h"

#include <stddef.h>
#include <stdint.h>

/* The job's resources into cfg (name, slots, gpus, workdir, each only when
 * the user left its default), from the environment Slurm gives a job's
 * processes; bufs holds the strings (must outlive cfg). RET 0, or -1 with
 * err filled when SLURM_JOB_ID is not set or a variable is malformed. */
typedef struct agent_slurm_bufs {
    char name[128], gpus[512], workdir[512];
} agent_slurm_bufs;
int agent_slurm_apply(agent_cfg *cfg, agent_slurm_bufs *bufs, char *err, size_t errlen);

/* CPUs of this node from SLURM_CPUS_ON_NODE, else the first count of
 * SLURM_JOB_CPUS_PER_NODE ("4(x2),2"). RET the count, 0 when absent, -1 malformed. */
int64_t agent_slurm_cpus(const char *on_node, const char *per_node);
/* The GPU list "0,1" from CUDA_VISIBLE_DEVICES, else SLURM_JOB_GPUS, into
 * out; "none" when neither names one. RET 0 or -1 malformed (not digits and commas). */
int agent_slurm_gpus(const char *cuda, const char *job_gpus, char *out, size_t outlen);

/* Draining: set once when the agent stops on SIGTERM in --slurm mode. */
void agent_drain_begin(void);
int  agent_draining(void);

/* The idle clock of --idle-timeout: call every loop with whether the agent
 * has work (trials running or being prepared). RET 1 once it has been idle
 * for timeout_s seconds (0 = never). */
typedef struct agent_idle {
    int64_t since;   /* mono ms idle since; 0 = busy */
} agent_idle;
int agent_idle_expired(agent_idle *st, int busy, int64_t timeout_s, int64_t now_ms);

#endif
