/*
 * dist.c — tr_dist_main, the entry of distributed training (dist.h): it
 * parses the mode once (tr_options_mode), reads the tuning and the rank's
 * environment once, and either hands over to the launcher
 * (dist_launch.c) or joins the job as one rank and runs the mode
 * (dist_sync.c, dist_async.c, dist_pipeline.c). Those files call nothing
 * here; what they share is in dist_rank.h (docs/distributed.md).
 */
#include "trainer/dist/dist.h"
#include "trainer/dist/dist_modes.h"

#include "trainer/blas.h"
#include "hf_err.h"
#include "hf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a rank learns from its launcher (dist_launch.c, mpirun, or an
 * agent's launcher), read once. */
typedef struct rank_env {
    const char *master;      /* HYPERFARM_MASTER: host:port of rank 0 */
    int         master_fd;   /* HYPERFARM_MASTER_FD: rank 0's inherited listener (-1) */
    int         local_rank;  /* HYPERFARM_LOCAL_RANK (-1: unknown) */
    int         under_mpi;   /* OMPI_COMM_WORLD_SIZE is set */
} rank_env;

static void rank_env_read(rank_env *e, int rank)
{
    const char *mfd = getenv("HYPERFARM_MASTER_FD");
    const char *lr = getenv("HYPERFARM_LOCAL_RANK");
    e->master = getenv("HYPERFARM_MASTER");
    e->master_fd = rank == 0 && mfd ? atoi(mfd) : -1;
    e->local_rank = lr ? atoi(lr) : -1;
    e->under_mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL;
}

/* Open the communicator of this rank. RET 0 or TR_EXIT_ERROR (printed). */
static int rank_open(const tr_options *o, int backend, const rank_env *e, tr_coll **out)
{
    tr_coll_config cfg;
    tr_coll_config_init(&cfg);
    cfg.backend = backend;
    cfg.rank = o->rank;
    cfg.world = o->world > 0 ? o->world : 1;
    cfg.master = e->master;
    cfg.master_fd = e->master_fd;
    cfg.timeout_ms = (int)(o->timeout * 1000);
    cfg.nccl_device = e->local_rank;
    if (cfg.world > 1 && backend != TR_COLL_MPI && !cfg.master) {
        fprintf(stderr, "hyperfarm-train: rank %d of %d: HYPERFARM_MASTER (host:port of rank 0) is not set\n",
                o->rank, cfg.world);
        return TR_EXIT_ERROR;
    }
    tr_signals_install();
    tr_blas_threads(o->threads);
    char err[320];
    if (tr_coll_open(&cfg, out, err, sizeof err)) {
        fprintf(stderr, "hyperfarm-train: rank %d: %s\n", o->rank, err);
        return TR_EXIT_ERROR;
    }
    return 0;
}

static int run_mode(tr_rank *r)
{
    switch (r->mode) {
    case TR_MODE_PIPELINE: return dist_pipeline_run(r);
    case TR_MODE_ASYNC:    return dist_async_run(r);
    default:               return dist_sync_run(r);
    }
}

int tr_dist_main(const tr_options *opt)
{
    tr_options o = *opt;
    int mode, backend;
    if (tr_options_mode(&o, &mode)) {
        fprintf(stderr, "hyperfarm-train: --mode '%s': want sync, async or pipeline\n", o.mode);
        return TR_EXIT_ERROR;
    }
    if (tr_coll_backend_parse(o.backend, &backend)) {
        fprintf(stderr, "hyperfarm-train: --backend '%s': want tcp, mpi or nccl\n", o.backend);
        return TR_EXIT_ERROR;
    }
    if (backend != TR_COLL_TCP && mode != TR_MODE_SYNC) {
        fprintf(stderr, "hyperfarm-train: --mode %s runs over --backend tcp only\n", tr_options_mode_name(mode));
        return TR_EXIT_ERROR;
    }
    rank_env env;
    rank_env_read(&env, o.rank);
    if (o.world <= 1 && !env.under_mpi) {
        if (o.nproc > 1 || mode == TR_MODE_ASYNC) return dist_launch(&o, mode);   /* async: + servers */
        /* a --mode with one process: run it as a world of one */
    }
    if (mode == TR_MODE_ASYNC && o.ps <= 0) o.ps = 1;

    tr_rank r;
    memset(&r, 0, sizeof r);
    r.mode = mode;
    tr_options_tuning(&r.tune);
    if (rank_open(&o, backend, &env, &r.coll)) return TR_EXIT_ERROR;
    int status = TR_EXIT_ERROR;
    r.rank = tr_coll_rank(r.coll);
    r.world = tr_coll_world(r.coll);
    o.rank = r.rank;
    o.world = r.world;
    if (mode == TR_MODE_ASYNC && o.ps >= r.world) {
        fprintf(stderr, "hyperfarm-train: --ps %d leaves no worker in a world of %d\n", o.ps, r.world);
        goto end;
    }
    if (dist_setup(&r, &o, o.batch_size)) goto end;
    status = run_mode(&r);
    /* leave together, so no rank sees its peers vanish as a failure */
    if ((status == TR_EXIT_OK || status == TR_EXIT_SIGTERM) && tr_coll_barrier(r.coll)) status = TR_EXIT_ERROR;
end:
    dist_free(&r);
    tr_coll_close(r.coll);
    return status;
}
