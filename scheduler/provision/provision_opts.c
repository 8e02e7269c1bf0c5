/*
 * provision_opts.c — the provisioner's settings from the scheduler's
 * option table (scheduler/options.h): main.c calls provision_setup once
 * the core runs. The GPU count of an agent comes from --slurm-gres
 * (gpu:N or gpu:TYPE:N).
 */
#include "scheduler/provision/provision.h"
#include "scheduler/provision/provision_opts.h"

#include "hf_log.h"

#include <stdlib.h>
#include <string.h>

/* N of "gpu:N" / "gpu:TYPE:N" in a comma list of GRES, 0 when none. RET 0 or -1 malformed. */
int provision_gres_gpus(const char *gres, int64_t *gpus)
{
    *gpus = 0;
    if (!gres) return 0;
    for (const char *p = gres; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 4 && strncmp(p, "gpu:", 4) == 0) {
            const char *c = p + n;
            while (c > p && c[-1] >= '0' && c[-1] <= '9') c--;
            if (c == p + n || c[-1] != ':' || p + n - c > 4) return -1;
            *gpus = strtol(c, NULL, 10);
            if (*gpus < 1) return -1;
        } else if (n == 3 && strncmp(p, "gpu", 3) == 0) {
            *gpus = 1;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

int provision_setup(const sched_options *o, sched *s)
{
    static provision_config c;   /* the thread reads it until provision_stop */
    char err[512] = "";
    c = (provision_config){.kind = o->provisioner, .partition = o->slurm_partition, .account = o->slurm_account,
                           .gres = o->slurm_gres, .mem = o->slurm_mem, .sbatch_args = o->slurm_sbatch_args,
                           .job_name = o->slurm_job_name, .agent_cmd = o->prov_agent,
                           .agent_args = o->prov_agent_args, .scheduler_url = o->prov_url, .sbatch = "sbatch",
                           .squeue = "squeue", .scancel = "scancel", .cpus = o->slurm_cpus,
                           .max_agents = o->slurm_max_agents, .idle_timeout_s = o->slurm_idle_timeout,
                           .time_limit_min = o->slurm_time, .interval_ms = o->prov_interval_ms};
    if (provision_gres_gpus(c.gres, &c.gpus)) {
        hf_error("--slurm-gres %s: expected a comma list of NAME[:TYPE]:COUNT", c.gres);
        return -1;
    }
    if (provision_start(&c, s, err, sizeof err)) {
        hf_error("provision: %s", err);
        return -1;
    }
    return 0;
}
