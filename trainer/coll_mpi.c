/*
 * coll_mpi.c — the mpi backend of coll.h: Open MPI's collectives on
 * MPI_COMM_WORLD, for jobs launched by mpirun (rank and world come from
 * MPI, no rendezvous of ours). Built when the Makefile finds ompi-c and
 * defines HF_HAVE_MPI; otherwise every hook answers HF_EUNSUP.
 *
 * Open MPI has no per-operation timeout: a dead peer is detected by mpirun
 * (it aborts the job), not by us. Point-to-point messages are not offered.
 */
#include "coll_int.h"

#include "hf_err.h"
#include "hf_log.h"

#include <stdio.h>

#ifdef HF_HAVE_MPI
#include <mpi.h>

static int mpi_rc(tr_coll *c, int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return tr_coll_fail(c, HF_EPEER, "MPI %s seq %u: %s", what, c->seq, msg);
}

int tr_coll_mpi_open(tr_coll *c)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    /* SERIALIZED: the trainer's bucket thread calls MPI while the main
     * thread computes, but never two threads at once */
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return tr_coll_fail(c, HF_EIO, "MPI_Init failed");
    if (!inited && provided < MPI_THREAD_SERIALIZED)
        hf_warn("MPI gives thread level %d < MPI_THREAD_SERIALIZED: calls from the bucket thread may misbehave",
                provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world);
    /* remember whether we initialised MPI: then closing finalises it */
    c->mpi = inited ? (void *)1 : (void *)2;
    return 0;
}

void tr_coll_mpi_close(tr_coll *c)
{
    int fin = 0;
    if (c->mpi == (void *)2 && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
    c->mpi = NULL;
}

int tr_coll_mpi_allreduce(tr_coll *c, float *buf, size_t n, int redop)
{
    c->seq++;
    /* MPI counts are int: reduce in pieces of at most 1 Gi floats */
    for (size_t off = 0; off < n;) {
        size_t k = n - off > (1u << 30) ? (1u << 30) : n - off;
        int rc = mpi_rc(c, MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD), "allreduce");
        if (rc) return rc;
        off += k;
    }
    if (redop == TR_COLL_AVG && c->world > 1) {
        float inv = 1.0f / (float)c->world;
        for (size_t i = 0; i < n; i++) buf[i] *= inv;
    }
    return 0;
}

int tr_coll_mpi_broadcast(tr_coll *c, void *buf, size_t bytes, int root)
{
    c->seq++;
    if (bytes > (size_t)1 << 30) return tr_coll_fail(c, HF_ETOOBIG, "MPI broadcast of %zu bytes", bytes);
    return mpi_rc(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
}

int tr_coll_mpi_allgather(tr_coll *c, const void *send, void *recv, size_t bytes)
{
    c->seq++;
    if (bytes > (size_t)1 << 30) return tr_coll_fail(c, HF_ETOOBIG, "MPI allgather of %zu bytes", bytes);
    const char *in = (const char *)recv + (size_t)c->rank * bytes == send ? MPI_IN_PLACE : send;
    return mpi_rc(c, MPI_Allgather(in, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
                  "allgather");
}

int tr_coll_mpi_barrier(tr_coll *c)
{
    c->seq++;
    return mpi_rc(c, MPI_Barrier(MPI_COMM_WORLD), "barrier");
}

#else /* !HF_HAVE_MPI */

static int no_mpi(tr_coll *c)
{
    return tr_coll_fail(c, HF_EUNSUP, "this build has no MPI backend (install libopenmpi-dev and rebuild)");
}
int tr_coll_mpi_open(tr_coll *c) { return no_mpi(c); }
void tr_coll_mpi_close(tr_coll *c) { (void)c; }
int tr_coll_mpi_allreduce(tr_coll *c, float *buf, size_t n, int redop) { (void)buf; (void)n; (void)redop; return no_mpi(c); }
int tr_coll_mpi_broadcast(tr_coll *c, void *buf, size_t bytes, int root) { (void)buf; (void)bytes; (void)root; return no_mpi(c); }
int tr_coll_mpi_allgather(tr_coll *c, const void *send, void *recv, size_t bytes) { (void)send; (void)recv; (void)bytes; return no_mpi(c); }
int tr_coll_mpi_barrier(tr_coll *c) { return no_mpi(c); }

#endif
