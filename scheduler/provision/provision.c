/*
 * provision.c — the provisioner's thread and state (provision.h). One
 * pass every interval_ms: list the backend's jobs, ask the core for its
 * demand (sched_demand), match alive agents to jobs by name (an agent
 * started with --slurm names itself slurm-JOBID-NODE: agent_slurm.c),
 * plan (provision_plan.c), then submit and cancel. A job that leaves the
 * list ended: its agents exited when idle, or it was preempted, cancelled
 * or hit its time limit; it is counted released.
 *
 * A backend error is logged (at most once a minute per kind of call),
 * counted, and the pass ends; the next one retries. One process-wide
 * provisioner (a static), like the backup service.
 */
#include "scheduler/provision/provision.h"
#include "scheduler/provision/provision_slurm.h"

#include "hf_buf.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"
#include "scheduler/core/demand.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const prov_state_names[3] = {"pending", "running", "released"};

#define PROV_HISTORY 32   /* released jobs kept for the API */

static struct prov {
    pthread_mutex_t lock;      /* guards everything below */
    int             enabled;
    const char     *kind;
    prov_job        jobs[PROV_MAX_JOBS];   /* live jobs as of the last list */
    int             njobs;
    prov_job        gone[PROV_HISTORY];    /* the last released, newest at (ngone - 1) % PROV_HISTORY */
    int64_t         ngone;
    provision_stats st;
    char            last_error[256];
    /* the thread's own, not under the lock */
    provision_config cfg;
    const prov_ops  *ops;
    void            *be;
    sched           *s;
    hf_thread       *th;
    int64_t          last_err_log;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .kind = "none"};

static void note_error(const char *what, int rc, const char *err)
{
    int64_t now = hf_mono_ms();
    pthread_mutex_lock(&P.lock);
    P.st.errors++;
    snprintf(P.last_error, sizeof P.last_error, "%s: %s", what, err[0] ? err : hf_strerror(rc));
    pthread_mutex_unlock(&P.lock);
    if (now - P.last_err_log >= 60000) {
        P.last_err_log = now;
        hf_warn("provision: %s: %s", what, err[0] ? err : hf_strerror(rc));
    }
}

/* Fill each job's registered count from the alive agents' names. */
static void match_agents(prov_job *jobs, int n, const sched_demand_out *d)
{
    char pre[64];
    for (int j = 0; j < n; j++) {
        jobs[j].registered = 0;
        int l = snprintf(pre, sizeof pre, "slurm-%s-", jobs[j].id);
        for (int k = 0; k < d->nnames; k++)
            if (strncmp(d->names[k], pre, (size_t)l) == 0) jobs[j].registered++;
    }
}

/* Jobs of the previous list that are not in the new one were released. */
static void note_released(const prov_job *now, int n)
{
    for (int i = 0; i < P.njobs; i++) {
        int found = 0;
        for (int j = 0; j < n && !found; j++) found = strcmp(P.jobs[i].id, now[j].id) == 0;
        if (found) continue;
        prov_job g = P.jobs[i];
        g.state = PROV_GONE;
        g.registered = 0;
        P.gone[P.ngone++ % PROV_HISTORY] = g;
        P.st.released++;
        hf_info("provision: job %s (%d node%s) released", g.id, g.nodes, g.nodes > 1 ? "s" : "");
    }
}

static void publish(const prov_job *jobs, int n, const plan_output *po)
{
    pthread_mutex_lock(&P.lock);
    note_released(jobs, n);
    memcpy(P.jobs, jobs, (size_t)n * sizeof *jobs);
    P.njobs = n;
    P.st.pending = P.st.running = P.st.nodes = 0;
    for (int j = 0; j < n; j++) {
        if (jobs[j].state == PROV_PENDING) P.st.pending++;
        else P.st.running++;
        P.st.nodes += jobs[j].nodes;
    }
    P.st.demand_slots = po->demand_slots;
    pthread_mutex_unlock(&P.lock);
}

static void submit(int nodes)
{
    char id[PROV_JOB_ID_MAX], err[512] = "";
    int rc = P.ops->submit(P.be, nodes, id, sizeof id, err, sizeof err);
    if (rc) { note_error("submit", rc, err); return; }
    hf_info("provision: submitted job %s (%d node%s)", id, nodes, nodes > 1 ? "s" : "");
    pthread_mutex_lock(&P.lock);
    P.st.submitted++;
    if (P.njobs < PROV_MAX_JOBS) {   /* shown until the next list has it */
        P.jobs[P.njobs] = (prov_job){.nodes = nodes, .state = PROV_PENDING};
        snprintf(P.jobs[P.njobs++].id, sizeof P.jobs[0].id, "%s", id);
    }
    pthread_mutex_unlock(&P.lock);
}

/* One pass. jobs and d are the thread's scratch (large). */
static void pass(prov_job *jobs, sched_demand_out *d)
{
    char err[512] = "";
    int n = 0, rc;
    if ((rc = P.ops->list(P.be, jobs, PROV_MAX_JOBS, &n, err, sizeof err)) && rc != HF_ETOOBIG) {
        note_error("list", rc, err);
        return;
    }
    sched_demand(P.s, "slurm-", d);
    match_agents(jobs, n, d);
    prov_need needs[DEMAND_MAX_NEEDS];
    for (int i = 0; i < d->nneeds; i++) needs[i] = (prov_need){d->needs[i].workers, d->needs[i].spw};
    int A = (int)(P.cfg.gpus > 0 ? P.cfg.gpus : P.cfg.cpus);
    plan_input in = {.needs = needs, .nneeds = d->nneeds, .free_slots = d->free_slots, .agent_slots = A,
                     .jobs = jobs, .njobs = n, .max_agents = (int)P.cfg.max_agents};
    plan_output po;
    provision_plan(&in, &po);
    publish(jobs, n, &po);
    for (int i = 0; i < po.ncancel; i++) {
        err[0] = 0;
        if ((rc = P.ops->cancel(P.be, jobs[po.cancel[i]].id, err, sizeof err))) { note_error("cancel", rc, err); continue; }
        hf_info("provision: cancelled pending job %s (no longer needed)", jobs[po.cancel[i]].id);
        pthread_mutex_lock(&P.lock);
        P.st.canceled++;
        pthread_mutex_unlock(&P.lock);
    }
    for (int i = 0; i < po.ngang; i++) submit(po.gang[i]);
    for (int i = 0; i < po.submit_single; i++) submit(1);
}

static void prov_main(hf_thread *t, void *arg)
{
    (void)arg;
    prov_job *jobs = calloc(PROV_MAX_JOBS, sizeof *jobs);
    sched_demand_out *d = calloc(1, sizeof *d);
    if (!jobs || !d) { hf_error("provision: out of memory"); goto end; }
    while (!hf_thread_stopping(t)) {
        pass(jobs, d);
        hf_thread_wait(t, P.cfg.interval_ms);
    }
end:
    free(jobs);
    free(d);
}

int provision_start(const provision_config *cfg, sched *s, char *err, size_t errlen)
{
    if (!cfg->kind || strcmp(cfg->kind, "none") == 0) return 0;
    if (strcmp(cfg->kind, "slurm")) { snprintf(err, errlen, "--provisioner %s: expected none or slurm", cfg->kind); return HF_EINVAL; }
    if (cfg->max_agents < 1 || cfg->max_agents >= PROV_MAX_JOBS) { snprintf(err, errlen, "--slurm-max-agents: 1 to %d", PROV_MAX_JOBS - 1); return HF_EINVAL; }
    P.cfg = *cfg;
    if (P.cfg.interval_ms < 100) P.cfg.interval_ms = 100;
    if (!(P.be = slurm_backend_new(&P.cfg, err, errlen))) return HF_EINVAL;
    P.ops = &slurm_ops;
    P.s = s;
    pthread_mutex_lock(&P.lock);
    P.enabled = P.st.enabled = 1;
    P.kind = P.ops->name;
    pthread_mutex_unlock(&P.lock);
    if (hf_thread_start(&P.th, "hf-provision", prov_main, NULL)) {
        snprintf(err, errlen, "cannot start the hf-provision thread");
        return HF_ENOMEM;
    }
    hf_info("provision: %s, up to %lld agents of %lld %s, idle timeout %lld s", P.kind, (long long)cfg->max_agents,
            (long long)(cfg->gpus > 0 ? cfg->gpus : cfg->cpus), cfg->gpus > 0 ? "GPUs" : "CPUs",
            (long long)cfg->idle_timeout_s);
    return 0;
}

void provision_stop(void)
{
    hf_thread_stop_join(P.th);
    P.th = NULL;
    if (P.ops && P.be) P.ops->free(P.be);
    P.be = NULL;
}

static json_t *job_json(const prov_job *j)
{
    return json_pack("{sssisssi}", "id", j->id, "nodes", j->nodes, "state", prov_state_names[j->state],
                     "agents", j->registered);
}

json_t *provision_state_json(void)
{
    pthread_mutex_lock(&P.lock);
    json_t *jobs = json_array();
    for (int i = 0; i < P.njobs; i++) json_array_append_new(jobs, job_json(&P.jobs[i]));
    int64_t k = P.ngone < PROV_HISTORY ? P.ngone : PROV_HISTORY;
    for (int64_t i = 0; i < k; i++) json_array_append_new(jobs, job_json(&P.gone[(P.ngone - 1 - i) % PROV_HISTORY]));
    json_t *o = json_pack("{sssbs{sIsIsIsIsIsIsI}soso}", "provisioner", P.kind, "enabled", P.enabled, "counts",
                          "pending", (json_int_t)P.st.pending, "running", (json_int_t)P.st.running, "nodes",
                          (json_int_t)P.st.nodes, "submitted", (json_int_t)P.st.submitted, "released",
                          (json_int_t)P.st.released, "canceled", (json_int_t)P.st.canceled, "errors",
                          (json_int_t)P.st.errors, "jobs", jobs, "last_error",
                          P.last_error[0] ? json_string(P.last_error) : json_null());
    pthread_mutex_unlock(&P.lock);
    return o;
}

void provision_get_stats(provision_stats *out)
{
    pthread_mutex_lock(&P.lock);
    *out = P.st;
    pthread_mutex_unlock(&P.lock);
}

int provision_render_metrics(hf_buf *b)
{
    provision_stats s;
    provision_get_stats(&s);
    if (!s.enabled) return 0;
    return hf_buf_printf(b,
        "# HELP hyperfarm_provision_jobs Agent jobs of the provisioner by state (released: since start).\n"
        "# TYPE hyperfarm_provision_jobs gauge\n"
        "hyperfarm_provision_jobs{state=\"pending\"} %lld\nhyperfarm_provision_jobs{state=\"running\"} %lld\n"
        "hyperfarm_provision_jobs{state=\"released\"} %lld\n"
        "# HELP hyperfarm_provision_nodes Nodes of the provisioner's live jobs.\n"
        "# TYPE hyperfarm_provision_nodes gauge\nhyperfarm_provision_nodes %lld\n"
        "# HELP hyperfarm_provision_submitted_total Agent jobs submitted.\n"
        "# TYPE hyperfarm_provision_submitted_total counter\nhyperfarm_provision_submitted_total %lld\n"
        "# HELP hyperfarm_provision_canceled_total Pending agent jobs cancelled as no longer needed.\n"
        "# TYPE hyperfarm_provision_canceled_total counter\nhyperfarm_provision_canceled_total %lld\n"
        "# HELP hyperfarm_provision_errors_total Backend calls (submit, list, cancel) that failed.\n"
        "# TYPE hyperfarm_provision_errors_total counter\nhyperfarm_provision_errors_total %lld\n"
        "# HELP hyperfarm_provision_demand_slots Slots the queue wants beyond free and coming ones.\n"
        "# TYPE hyperfarm_provision_demand_slots gauge\nhyperfarm_provision_demand_slots %lld\n",
        (long long)s.pending, (long long)s.running, (long long)s.released, (long long)s.nodes,
        (long long)s.submitted, (long long)s.canceled, (long long)s.errors, (long long)s.demand_slots);
}
