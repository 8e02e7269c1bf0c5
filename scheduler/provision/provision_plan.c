/*
 * provision_plan.c — how many agent jobs one provisioner pass submits or
 * cancels (provision_plan, provision.h). Pure: no lock, no I/O, so it is
 * tested directly (tests/unit/test_provision.c).
 *
 * Every provisioned agent offers agent_slots slots. A trial of W workers
 * of S slots fits one agent when W*S <= agent_slots; those are summed into
 * a single-node demand in slots. A larger gang needs ceil(W / (slots/S))
 * nodes and gets a job of its own (--nodes N), so its ranks are
 * co-scheduled. Demand is met first by the free slots of alive agents,
 * then by capacity on its way: PENDING jobs, and RUNNING jobs whose agents
 * have not all registered yet. Only what is left is submitted, within
 * max_agents nodes of live jobs; PENDING jobs no demand needs any more are
 * cancelled (a RUNNING one is left to its agent's idle timeout).
 */
#include "scheduler/provision/provision.h"

#include <string.h>

/* Nodes trial n needs on agents of A slots: 1, more for a gang, 0 = never fits. */
static int nodes_for(const prov_need *n, int A)
{
    if (n->spw < 1 || n->workers < 1 || n->spw > A) return 0;
    int per = A / n->spw;
    return (n->workers + per - 1) / per;
}

void provision_plan(const plan_input *in, plan_output *out)
{
    const int A = in->agent_slots > 0 ? in->agent_slots : 1;
    int live_nodes = 0, used[PROV_MAX_JOBS];
    int64_t single = 0, coming = 0;
    memset(out, 0, sizeof *out);
    memset(used, 0, sizeof used);
    for (int j = 0; j < in->njobs && j < PROV_MAX_JOBS; j++) live_nodes += in->jobs[j].nodes;
    int64_t free_slots = in->free_slots;
    /* gangs: a job on its way of as many nodes, else free slots, else a new job */
    for (int i = 0; i < in->nneeds; i++) {
        int nodes = nodes_for(&in->needs[i], A);
        if (nodes == 0) { out->unservable++; continue; }
        if (nodes == 1) { single += (int64_t)in->needs[i].workers * in->needs[i].spw; continue; }
        int matched = 0;
        for (int j = 0; j < in->njobs && j < PROV_MAX_JOBS && !matched; j++) {
            const prov_job *jb = &in->jobs[j];
            if (!used[j] && jb->nodes == nodes && jb->registered < jb->nodes) used[j] = matched = 1;
        }
        if (matched) continue;
        int64_t want = (int64_t)in->needs[i].workers * in->needs[i].spw;
        if (free_slots >= want) { free_slots -= want; continue; }   /* alive agents may hold it */
        out->demand_slots += want;
        if (out->ngang < PLAN_MAX_GANG && live_nodes + nodes <= in->max_agents) {
            out->gang[out->ngang++] = nodes;
            live_nodes += nodes;
        }
    }
    /* one-node jobs on their way cover single-node demand */
    for (int j = 0; j < in->njobs && j < PROV_MAX_JOBS; j++) {
        const prov_job *jb = &in->jobs[j];
        if (used[j] || jb->registered >= jb->nodes) continue;
        coming += (int64_t)(jb->nodes - jb->registered) * A;
    }
    int64_t deficit = single - free_slots - coming;
    if (deficit > 0) {
        out->demand_slots += deficit;
        int64_t jobs = (deficit + A - 1) / A;
        if (jobs > in->max_agents - live_nodes) jobs = in->max_agents - live_nodes;
        out->submit_single = jobs > 0 ? (int)jobs : 0;
        return;
    }
    /* surplus: cancel PENDING jobs (latest listed first) whose whole
     * capacity is not needed; a gang job nothing matched is not needed */
    int64_t surplus = -deficit;
    for (int j = in->njobs - 1; j >= 0 && out->ncancel < PLAN_MAX_CANCEL; j--) {
        const prov_job *jb = &in->jobs[j];
        if (j >= PROV_MAX_JOBS || used[j] || jb->state != PROV_PENDING) continue;
        int64_t cap = (int64_t)jb->nodes * A;
        if (jb->nodes > 1 || cap <= surplus) {
            out->cancel[out->ncancel++] = j;
            if (jb->nodes == 1) surplus -= cap;
        }
    }
}
