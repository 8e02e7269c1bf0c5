/*
 * placement.h — gang placement of one trial onto agents (pure: no store,
 * no lock, so it is unit-tested directly).
 *
 * A trial asks for `workers` processes of `slots_per_worker` slots each.
 * An agent offers `slots` (its GPUs when it has any, else CPU slots); a
 * worker's slots all come from one agent. The trial is placed whole or not
 * at all. Packing: when one agent can take every worker, the agent with the
 * least free capacity that fits is chosen (best fit, which keeps large
 * holes for large gangs); otherwise agents are taken largest-free first so
 * the gang spans as few agents as possible. GPUs are handed out lowest
 * index first.
 */
#ifndef HF_PLACEMENT_H
#define HF_PLACEMENT_H

#include <stdint.h>

#define PLACE_MAX_GPUS 64

typedef struct place_agent {
    int64_t  id;
    int      slots;              /* total slots */
    int      slots_used;
    int      ngpus;              /* 0 = CPU agent */
    int      gpu_index[PLACE_MAX_GPUS];  /* device indices as reported */
    uint64_t gpu_used;           /* bit i = gpu_index[i] is taken */
    int      excluded;           /* never place here (e.g. it keeps failing this trial) */
} place_agent;

typedef struct place_rank {
    int agent;                   /* index into the agents array */
    int ngpu;
    int gpu[PLACE_MAX_GPUS];     /* device indices (gpu_index values) */
} place_rank;

/* Free worker capacity of a for workers of spw slots. */
int placement_capacity(const place_agent *a, int spw);

/* Place workers x spw over a[0..n). On success fill out[0..workers) (rank
 * order; rank 0 first), mark the slots/GPUs used in a[], RET 0. When it does
 * not fit RET HF_ENOTFOUND and a[] is unchanged. HF_EINVAL for bad sizes. */
int placement_gang(place_agent *a, int n, int workers, int spw, place_rank *out);

/* Locality (docs/scheduler.md, "The checkpoint store"): among the agents
 * with holds[i] != 0 (they already hold the checkpoint the trial starts
 * from) one that can take every worker now, the best fit as in
 * placement_gang. RET its index, or -1 (none: place as usual; a gang over
 * several agents is not steered). */
int placement_prefer(const place_agent *a, int n, const int *holds, int workers, int spw);

/* Backfill reservation (Slurm-style) for a gang that does not fit now:
 * plan it over the agents as if they were idle, preferring agents with the
 * most free capacity now (least to drain), one agent when one can take it
 * all (the one with most free now), else as few as possible. reserve[i] =
 * slots of agent i the gang will use; the caller lets other trials use only
 * an agent's free slots beyond reserve[i], so none delays the gang.
 * RET 0, HF_ENOTFOUND when the gang cannot fit even on an idle farm (then
 * nothing is reserved), HF_EINVAL for bad sizes. */
int placement_reserve(const place_agent *a, int n, int workers, int spw, int *reserve);

/* Give back what out[0..workers) took (the inverse of placement_gang). */
void placement_release(place_agent *a, int n, int workers, int spw, const place_rank *out);

#endif
