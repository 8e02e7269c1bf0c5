/*
 * provision.h — the agent provisioner (docs/deploy.md "Slurm"): a thread
 * (hf-provision) that sizes a pool of agents to the queue. Every few
 * seconds it asks the core what the active experiments could run now and
 * cannot place (sched_demand, scheduler/core/demand.h), compares that with
 * the agents alive and the jobs it already submitted, and submits or
 * cancels jobs through a backend. Agents started by a job exit on their
 * own after their idle timeout, which ends the job and gives the
 * allocation back; the provisioner only cancels jobs still PENDING that
 * are no longer needed.
 *
 * A backend is three calls (prov_ops): submit a job of N nodes, cancel a
 * job, list this provisioner's jobs. Slurm (provision_slurm.c) is the
 * first; docs/deploy.md describes a Kubernetes one over the same calls.
 *
 * Invariants: jobs live at once never span more than max_agents nodes;
 * a job is submitted only for demand that neither an alive agent's free
 * slots nor a job already pending or starting covers.
 *
 * Concurrency: one mutex (prov.lock) guards the job table and the
 * counters; the thread holds it only while it copies, never across a
 * backend call or a core call. provision_state_json / provision_get_stats
 * may be called from any thread.
 */
#ifndef HF_PROVISION_H
#define HF_PROVISION_H

#include "hf_json.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sched sched;

#define PROV_JOB_ID_MAX 32   /* Slurm job ids are decimal; longer is refused */
#define PROV_MAX_JOBS   1024 /* jobs tracked at once (max_agents is bounded below it) */

enum { PROV_PENDING, PROV_RUNNING, PROV_GONE };
extern const char *const prov_state_names[3];

typedef struct prov_job {
    char    id[PROV_JOB_ID_MAX];
    int     nodes;
    int     state;           /* PROV_PENDING | PROV_RUNNING | PROV_GONE */
    int     registered;      /* its agents alive at the scheduler now (named slurm-ID-NODE) */
} prov_job;

/* A backend. Every call may block (it runs a program); err is filled on
 * failure. submit: one job of nodes nodes whose every node runs one agent;
 * its id into id. cancel: the job id. list: the backend's live jobs of
 * this provisioner (at most max) into jobs, *n of them. RET 0 or HF_E*. */
typedef struct prov_ops {
    const char *name;
    int  (*submit)(void *be, int nodes, char *id, size_t idlen, char *err, size_t errlen);
    int  (*cancel)(void *be, const char *id, char *err, size_t errlen);
    int  (*list)(void *be, prov_job *jobs, int max, int *n, char *err, size_t errlen);
    void (*free)(void *be);
} prov_ops;

/* The settings (scheduler/options.c, --provisioner and --slurm-*). The
 * strings are borrowed and must outlive the provisioner. */
typedef struct provision_config {
    const char *kind;            /* "none" | "slurm" */
    const char *partition, *account, *gres, *mem, *sbatch_args, *job_name;
    const char *agent_cmd;       /* the agent program a job runs */
    const char *agent_args;      /* further agent arguments, space-separated */
    const char *scheduler_url;   /* the URL agents reach this scheduler at */
    const char *sbatch, *squeue, *scancel;   /* the programs (default: on PATH) */
    int64_t cpus;                /* CPUs per agent (--cpus-per-task) */
    int64_t gpus;                /* GPUs per agent (from gres gpu:N; 0 = CPU agents) */
    int64_t max_agents;          /* nodes of live jobs at most */
    int64_t idle_timeout_s;      /* agent --idle-timeout */
    int64_t time_limit_min;      /* sbatch --time (0 = the partition's) */
    int64_t interval_ms;         /* between passes */
} provision_config;

/* The counts of the last pass, for /metrics. */
typedef struct provision_stats {
    int     enabled;
    int64_t pending, running;     /* jobs in each state now */
    int64_t nodes;                /* nodes of live jobs */
    int64_t submitted, released, canceled, errors;   /* since start */
    int64_t demand_slots;         /* slots the queue wants that no agent offers */
} provision_stats;

/* What one pass should do, decided from the demand (plan_input): a pure
 * function, unit-tested (tests/unit/test_provision.c). */
typedef struct prov_need {
    int workers, spw;             /* a trial: workers of spw slots each */
} prov_need;

typedef struct plan_input {
    const prov_need *needs;  int nneeds;    /* unplaced trials, highest priority first */
    int64_t free_slots;                     /* free slots of alive agents */
    int     agent_slots;                    /* slots one provisioned agent offers */
    const prov_job *jobs;    int njobs;     /* live jobs (PENDING/RUNNING), .registered filled */
    int     max_agents;
} plan_input;

#define PLAN_MAX_GANG   64
#define PLAN_MAX_CANCEL 64

typedef struct plan_output {
    int submit_single;                      /* one-node jobs to submit */
    int gang[PLAN_MAX_GANG];  int ngang;    /* multi-node jobs to submit: their node counts */
    int cancel[PLAN_MAX_CANCEL]; int ncancel;   /* indexes into jobs: PENDING jobs no longer needed */
    int unservable;                         /* trials whose worker needs more slots than one agent has */
    int64_t demand_slots;                   /* slots wanted beyond free and coming ones */
} plan_output;

void provision_plan(const plan_input *in, plan_output *out);

/* Start the provisioner (a no-op returning 0 for kind "none"). s is
 * borrowed and outlives it. RET 0, HF_EINVAL (err says which setting) or
 * HF_ENOMEM. One provisioner per process. */
int  provision_start(const provision_config *cfg, sched *s, char *err, size_t errlen);
/* Stop the thread (jobs are left running: their agents exit when idle). */
void provision_stop(void);
/* {"provisioner": "slurm"|"none", "jobs": [{"id","nodes","state"}], counters}. New reference. */
json_t *provision_state_json(void);
void provision_get_stats(provision_stats *out);
/* The hyperfarm_provision_* lines of /metrics into b (none when disabled). RET 0 or HF_ENOMEM. */
typedef struct hf_buf hf_buf;
int provision_render_metrics(hf_buf *b);

#endif
