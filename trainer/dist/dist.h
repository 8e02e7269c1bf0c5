/*
 * dist.h — distributed training for hyperfarm-train (docs/distributed.md).
 *
 * tr_dist_main is what main.c calls when the options ask for more than one
 * process (--nproc > 1, a --mode, or a world size > 1 in the environment):
 *
 *  - as a launcher (--nproc N and no rank in the environment): binds the
 *    rendezvous port, fork/execs the workers (and, for --mode async, --ps
 *    parameter-server processes) with HYPERFARM_RANK / WORLD_SIZE /
 *    LOCAL_RANK / MASTER set, like torchrun; forwards SIGTERM/SIGINT;
 *    when any process dies, stops the others and exits non-zero;
 *  - as one rank (rank and world from HYPERFARM_* or OMPI_COMM_WORLD_*):
 *    runs --mode sync (data parallel, bucketed ring allreduce overlapping
 *    backward), async (parameter servers, SSP staleness bound) or pipeline
 *    (GPipe micro-batches over consecutive layer ranges).
 *
 * Rank 0 is the chief: it evaluates, prints the metric lines and writes
 * the checkpoints of the whole job. In async mode the world is the workers
 * followed by the --ps parameter servers (ranks world-ps .. world-1).
 * RET an exit status of train.h.
 */
#ifndef TR_DIST_H
#define TR_DIST_H

#include "trainer/options.h"

int tr_dist_main(const tr_options *opt);

#endif
