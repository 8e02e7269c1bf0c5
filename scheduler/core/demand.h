/*
 * demand.h — a read-only query of the scheduler core for the provisioner
 * (scheduler/provision/provision.h): what the active experiments could run
 * now and cannot place, and which agents are alive. It changes nothing.
 */
#ifndef HF_DEMAND_H
#define HF_DEMAND_H

#include <stdint.h>

typedef struct sched sched;

#define DEMAND_MAX_NEEDS  4096   /* trials listed at most */
#define DEMAND_MAX_AGENTS 1024   /* agent names listed at most */

typedef struct demand_need {
    int workers, spw;            /* one trial: workers of spw slots each */
} demand_need;

typedef struct sched_demand_out {
    demand_need needs[DEMAND_MAX_NEEDS];
    int         nneeds;
    int64_t     free_slots;      /* free slots of alive agents */
    int         agents_alive;
    char        names[DEMAND_MAX_AGENTS][64];   /* alive agents' names starting with the prefix */
    int         nnames;
} sched_demand_out;

/* Fill out (caller-owned, large: allocate it) under the core lock: the
 * QUEUED trials of ACTIVE experiments, then for each the trials its
 * searcher could still create now (below max_concurrent_trials and
 * max_trials, unless it is done or waits for a result), highest priority
 * first; free slots of alive agents; the names of alive agents that start
 * with prefix (NULL = none listed). RET 0. */
int sched_demand(sched *s, const char *prefix, sched_demand_out *out);

#endif
