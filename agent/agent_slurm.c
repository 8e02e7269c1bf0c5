/*
 * agent_slurm.c — the agent inside a Slurm job (agent_slurm.h). Slurm
 * tells a job's processes what they were given in their environment:
 * SLURM_CPUS_ON_NODE (or SLURM_JOB_CPUS_PER_NODE, "4(x2),2"), the GPUs in
 * CUDA_VISIBLE_DEVICES (what the job's processes see) or SLURM_JOB_GPUS,
 * SLURM_JOB_ID and SLURMD_NODENAME. Those values are parsed as untrusted
 * text: digits and commas only, bounded lengths.
 */
#include "agent_slurm.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int draining;

void agent_drain_begin(void) { atomic_store(&draining, 1); }
int  agent_draining(void) { return atomic_load(&draining); }

int64_t agent_slurm_cpus(const char *on_node, const char *per_node)
{
    const char *s = on_node && *on_node ? on_node : per_node;
    if (!s || !*s) return 0;
    int64_t n = 0;
    size_t i = 0;
    for (; s[i] >= '0' && s[i] <= '9' && i < 7; i++) n = n * 10 + (s[i] - '0');
    if (i == 0 || (s[i] && s[i] != '(' && s[i] != ',') || n < 1) return -1;
    return n;
}

int agent_slurm_gpus(const char *cuda, const char *job_gpus, char *out, size_t outlen)
{
    const char *s = cuda && *cuda ? cuda : job_gpus;
    if (!s || !*s || strcmp(s, "NoDevFiles") == 0) {
        snprintf(out, outlen, "none");
        return 0;
    }
    size_t n = strlen(s);
    if (n >= outlen) return -1;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] == ',' && i > 0 && s[i - 1] != ',' && i + 1 < n))) return -1;
    memcpy(out, s, n + 1);
    return 0;
}

/* Is v a short name of letters, digits, '-', '_' and '.'? */
static int word_ok(const char *v, size_t max)
{
    if (!v || !*v || strlen(v) > max) return 0;
    for (; *v; v++)
        if (!((*v >= 'a' && *v <= 'z') || (*v >= 'A' && *v <= 'Z') || (*v >= '0' && *v <= '9') || *v == '-' ||
              *v == '_' || *v == '.'))
            return 0;
    return 1;
}

int agent_slurm_apply(agent_cfg *cfg, agent_slurm_bufs *b, char *err, size_t errlen)
{
    const char *job = getenv("SLURM_JOB_ID"), *node = getenv("SLURMD_NODENAME");
    if (!word_ok(job, 20)) { snprintf(err, errlen, "--slurm: SLURM_JOB_ID is not set (not inside a Slurm job?)"); return -1; }
    if (!word_ok(node, 60)) node = getenv("HOSTNAME");
    if (!word_ok(node, 60)) node = "node";
    if (!cfg->name) {
        snprintf(b->name, sizeof b->name, "slurm-%s-%s", job, node);
        cfg->name = b->name;
    }
    int64_t cpus = agent_slurm_cpus(getenv("SLURM_CPUS_ON_NODE"), getenv("SLURM_JOB_CPUS_PER_NODE"));
    if (cpus < 0) { snprintf(err, errlen, "--slurm: SLURM_CPUS_ON_NODE / SLURM_JOB_CPUS_PER_NODE malformed"); return -1; }
    if (cfg->gpus && strcmp(cfg->gpus, "auto") == 0) {
        if (agent_slurm_gpus(getenv("CUDA_VISIBLE_DEVICES"), getenv("SLURM_JOB_GPUS"), b->gpus, sizeof b->gpus)) {
            snprintf(err, errlen, "--slurm: CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS is not a list of indices");
            return -1;
        }
        cfg->gpus = b->gpus;
    }
    /* a CPU agent offers the job's CPUs; a GPU agent one slot per GPU (slots 0) */
    if (cfg->slots == 0 && cpus > 0 && strcmp(cfg->gpus, "none") == 0) cfg->slots = cpus;
    if (!cfg->workdir || strcmp(cfg->workdir, AGENT_DEFAULT_WORKDIR) == 0) {
        const char *tmp = getenv("TMPDIR");
        if (!tmp || tmp[0] != '/' || strlen(tmp) > 200) tmp = "/tmp";
        snprintf(b->workdir, sizeof b->workdir, "%s/hyperfarm-agent-%s-%s", tmp, job, node);
        cfg->workdir = b->workdir;
    }
    return 0;
}

int agent_idle_expired(agent_idle *st, int busy, int64_t timeout_s, int64_t now_ms)
{
    if (busy || timeout_s <= 0) {
        st->since = 0;
        return 0;
    }
    if (st->since == 0) st->since = now_ms;
    return now_ms - st->since >= timeout_s * 1000;
}
