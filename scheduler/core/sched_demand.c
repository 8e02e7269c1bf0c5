/*
 * sched_demand.c — the provisioner's read-only view of the core
 * (demand.h): unplaced trials, and trials the searchers would create if
 * there were slots, with the size of each gang. Counting trials that do
 * not exist yet matters: the dispatch pass only asks a searcher for a new
 * trial when free slots can take it (dispatch.c), so an empty farm has a
 * queue of zero however much work is waiting.
 */
#include "scheduler/core/demand.h"
#include "scheduler/core/sched_int.h"

#include <stdio.h>
#include <string.h>

#define DEMAND_PER_EXP 1024   /* not-yet-created trials counted per experiment */

static void add(sched_demand_out *o, const experiment *x, int64_t k)
{
    for (int64_t i = 0; i < k && o->nneeds < DEMAND_MAX_NEEDS; i++)
        o->needs[o->nneeds++] = (demand_need){(int)x->spec.workers, (int)x->spec.slots_per_worker};
}

/* Experiments' demand in priority order (ties: creation order). */
static void exp_demand(sched *s, sched_demand_out *o)
{
    int64_t prio = INT64_MAX;
    for (;;) {
        int64_t next = INT64_MIN;   /* the highest priority below prio */
        for (size_t i = 0; i < s->nexps; i++)
            if (s->exps[i]->state == E_ACTIVE && s->exps[i]->spec.priority < prio && s->exps[i]->spec.priority > next)
                next = s->exps[i]->spec.priority;
        if (next == INT64_MIN) return;
        for (size_t i = 0; i < s->nexps; i++) {
            experiment *x = s->exps[i];
            if (x->state != E_ACTIVE || x->spec.priority != next) continue;
            add(o, x, x->counts[T_QUEUED]);
            if (x->searcher_done || x->waits_report) continue;
            int64_t room = x->max_trials - (int64_t)x->ntrials;
            int64_t conc = x->spec.max_concurrent > 0 ? x->spec.max_concurrent - exp_active_count(x) : room;
            if (conc < room) room = conc;
            if (room > DEMAND_PER_EXP) room = DEMAND_PER_EXP;
            if (room > 0) add(o, x, room);
        }
        prio = next;
        if (next == INT64_MIN + 1) return;
    }
}

int sched_demand(sched *s, const char *prefix, sched_demand_out *o)
{
    o->nneeds = 0;
    o->free_slots = 0;
    o->agents_alive = 0;
    o->nnames = 0;
    size_t pl = prefix ? strlen(prefix) : 0;
    sched_lock(s);
    exp_demand(s, o);
    for (size_t i = 0; i < s->nagents; i++) {
        const agent *a = s->agents[i];
        if (!a->alive) continue;
        o->agents_alive++;
        /* a draining agent (excluded: docs/scheduler.md "Drained attempts") takes nothing more */
        if (!a->pa.excluded && a->pa.slots > a->pa.slots_used) o->free_slots += a->pa.slots - a->pa.slots_used;
        if (prefix && a->name && strncmp(a->name, prefix, pl) == 0 && o->nnames < DEMAND_MAX_AGENTS)
            snprintf(o->names[o->nnames++], sizeof o->names[0], "%s", a->name);
    }
    sched_unlock(s);
    return 0;
}
