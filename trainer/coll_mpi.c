/*
 * coll_mpi.c — the mpi backend of coll.h: Open MPI's collectives on
 * MPI_COMM_WORLD, for jobs launched by mpirun (rank and world come from
 * MPI, no rendezvous of ours), as the table tr_coll_mpi_ops (coll_int.h).
 * Built when the Makefile finds ompi-c and defines HF_HAVE_MPI; otherwise
 * the table's open answers HF_EUNSUP.
 *
 * Open MPI has no per-operation timeout: a peer that dies is detected by
 * mpirun (it aborts the job), but one that stalls (stopped, swapping, stuck
 * in other code) would hang every other rank forever. So every collective
 * runs under a watchdog: a thread ("hf-mpi-wd") that, when one call has not returned
 * after --timeout, says which operation and sequence number is stuck and
 * ends this rank with exit status 1 — mpirun then ends the job, as for a
 * dead rank. (MPI_Abort is not called from the watchdog: with
 * MPI_THREAD_SERIALIZED another thread is inside MPI at that moment.)
 * Point-to-point messages are not offered.
 */
#include "coll_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <stdio.h>

#ifdef HF_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#include "hf_thread.h"

/* One MPI_COMM_WORLD per process, so one watchdog: the thread "hf-mpi-wd",
 * started by the first open with a timeout and stopped by close (both on
 * the main thread, which alone touches th). mu guards the rest: what the
 * collective in progress is, and since when. */
static struct {
    pthread_mutex_t mu;
    hf_thread      *th;
    int             timeout_ms, rank, world;
    const char     *what;      /* collective in progress, NULL when none */
    unsigned        seq;
    int64_t         since;     /* hf_mono_ms() when it began */
} wd = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void watchdog_main(hf_thread *t, void *arg)
{
    (void)arg;
    while (!hf_thread_wait(t, 100)) {   /* look ten times a second */
        pthread_mutex_lock(&wd.mu);
        if (wd.what && hf_mono_ms() - wd.since >= wd.timeout_ms) {
            char msg[256];
            int n = snprintf(msg, sizeof msg,
                             "hyperfarm-train: rank %d of %d: MPI %s seq %u has not completed after %d ms "
                             "(--timeout): a rank is dead, stalled or in a different collective; ending this "
                             "rank so that mpirun ends the job\n",
                             wd.rank, wd.world, wd.what, wd.seq, wd.timeout_ms);
            if (n > 0) {
                ssize_t w = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
                (void)w;
            }
            _exit(1);
        }
        pthread_mutex_unlock(&wd.mu);
    }
}

static void watch_begin(const char *what, unsigned seq)
{
    pthread_mutex_lock(&wd.mu);
    wd.what = what;
    wd.seq = seq;
    wd.since = hf_mono_ms();
    pthread_mutex_unlock(&wd.mu);
}

static void watch_end(void)
{
    pthread_mutex_lock(&wd.mu);
    wd.what = NULL;
    pthread_mutex_unlock(&wd.mu);
}

static int mpi_rc(tr_coll *c, int rc, const char *what)
{
    if (rc == MPI_SUCCESS) return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return tr_coll_fail(c, HF_EPEER, "MPI %s seq %u: %s", what, c->seq, msg);
}

static int mpi_open(tr_coll *c, const tr_coll_config *cfg)
{
    (void)cfg;   /* rank and world come from MPI */
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
    pthread_mutex_lock(&wd.mu);
    wd.timeout_ms = c->timeout_ms;
    wd.rank = c->rank;
    wd.world = c->world;
    pthread_mutex_unlock(&wd.mu);
    if (!wd.th && c->timeout_ms > 0 && hf_thread_start(&wd.th, "hf-mpi-wd", watchdog_main, NULL))
        hf_warn("cannot start the MPI watchdog thread: a stalled rank will not be detected");
    /* remember whether we initialised MPI: then closing finalises it */
    c->mpi = inited ? (void *)1 : (void *)2;
    return 0;
}

static void mpi_close(tr_coll *c)
{
    hf_thread_stop_join(wd.th);
    wd.th = NULL;
    int fin = 0;
    if (c->mpi == (void *)2 && MPI_Finalized(&fin) == MPI_SUCCESS && !fin) MPI_Finalize();
    c->mpi = NULL;
}

static int mpi_allreduce(tr_coll *c, float *buf, size_t n, int redop, char algo)
{
    (void)algo;
    c->seq++;
    /* MPI counts are int: reduce in pieces of at most 1 Gi floats */
    for (size_t off = 0; off < n;) {
        size_t k = n - off > (1u << 30) ? (1u << 30) : n - off;
        watch_begin("allreduce", c->seq);
        int rc = mpi_rc(c, MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)k, MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD), "allreduce");
        watch_end();
        if (rc) return rc;
        off += k;
    }
    if (redop == TR_COLL_AVG) tr_coll_scale_avg(c, buf, n);
    return 0;
}

static int mpi_broadcast(tr_coll *c, void *buf, size_t bytes, int root)
{
    c->seq++;
    if (bytes > (size_t)1 << 30) return tr_coll_fail(c, HF_ETOOBIG, "MPI broadcast of %zu bytes", bytes);
    watch_begin("broadcast", c->seq);
    int rc = mpi_rc(c, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
    watch_end();
    return rc;
}

static int mpi_allgather(tr_coll *c, const void *send, void *recv, size_t bytes)
{
    c->seq++;
    if (bytes > (size_t)1 << 30) return tr_coll_fail(c, HF_ETOOBIG, "MPI allgather of %zu bytes", bytes);
    const char *in = (const char *)recv + (size_t)c->rank * bytes == send ? MPI_IN_PLACE : send;
    watch_begin("allgather", c->seq);
    int rc = mpi_rc(c, MPI_Allgather(in, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
                    "allgather");
    watch_end();
    return rc;
}

static int mpi_barrier(tr_coll *c)
{
    c->seq++;
    watch_begin("barrier", c->seq);
    int rc = mpi_rc(c, MPI_Barrier(MPI_COMM_WORLD), "barrier");
    watch_end();
    return rc;
}

/* Messages are not offered: the front end answers HF_EUNSUP. */
const tr_coll_ops tr_coll_mpi_ops = {
    .backend = TR_COLL_MPI, .open = mpi_open, .close = mpi_close,
    .allreduce = mpi_allreduce, .broadcast = mpi_broadcast, .allgather = mpi_allgather, .barrier = mpi_barrier,
};

#else /* !HF_HAVE_MPI */

static int no_mpi(tr_coll *c, const tr_coll_config *cfg)
{
    (void)cfg;
    return tr_coll_fail(c, HF_EUNSUP, "this build has no MPI backend (install libopenmpi-dev and rebuild)");
}

/* Only open is reached: it fails, and the communicator is never handed out. */
const tr_coll_ops tr_coll_mpi_ops = {.backend = TR_COLL_MPI, .open = no_mpi};

#endif
