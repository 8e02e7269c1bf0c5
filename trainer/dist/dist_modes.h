/*
 * dist_modes.h — the entry points that tr_dist_main (dist.c) dispatches
 * to: the launcher and the three modes. Each runs to the end of training
 * and returns an exit status of train.h. The modes call back into nothing
 * of dist.c; what they share is in dist_rank.h.
 */
#ifndef TR_DIST_MODES_H
#define TR_DIST_MODES_H

#include "trainer/dist/dist_rank.h"

/* dist_launch.c: fork/exec --nproc workers (and, for async, --ps servers)
 * as ranks of one job on this host, supervise them, return rank 0's
 * status (or TR_EXIT_ERROR when any rank failed). */
int dist_launch(const tr_options *o, int mode);

/* dist_sync.c: data parallel, bucketed allreduce overlapping backward. */
int dist_sync_run(tr_rank *r);
/* dist_async.c: parameter servers with an SSP staleness bound. */
int dist_async_run(tr_rank *r);
/* dist_pipeline.c: GPipe micro-batches over consecutive layer ranges. */
int dist_pipeline_run(tr_rank *r);

#endif
