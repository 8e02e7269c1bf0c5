/*
 * coll.c — the front end of the collectives (coll.h): configuration,
 * open/close, and every public operation, each of which checks its
 * arguments and the communicator's state once and then calls the
 * backend's table (coll_int.h): tcp (coll_tcp.c), mpi (coll_mpi.c) or
 * nccl (coll_nccl.c). Nothing here knows how a backend moves bytes.
 *
 * Invariants: c->ops is set before the backend's open runs and never
 * changes; after any error c->broken is set and every later operation
 * fails with HF_ESTATE (the first error's message stays in c->err).
 */
#include "coll_int.h"

#include "hf_err.h"
#include "hf_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SOCKBUF     (16 << 20)
#define DEF_CHUNK   (512u << 10)
#define DEF_SMALL   (256u << 10)
#define DEF_SPIN_US 200

int tr_coll_fail(tr_coll *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    c->broken = 1;
    hf_error("rank %d: %s", c->rank, c->err);
    return code;
}

void tr_coll_scale_avg(const tr_coll *c, float *buf, size_t n)
{
    if (c->world <= 1) return;
    float inv = 1.0f / (float)c->world;
    for (size_t i = 0; i < n; i++) buf[i] *= inv;
}

/* ---- configuration -------------------------------------------------------- */

/* The HF_COLL_* knobs (docs/distributed.md): read once, into cfg. */
static void config_from_env(tr_coll_config *cfg)
{
    const char *v;
    if ((v = getenv("HF_COLL_ALGO")) && (v[0] == 'p' || v[0] == 'r')) cfg->large_algo = v[0];
    if ((v = getenv("HF_COLL_CHUNK"))) cfg->chunk_bytes = (size_t)atol(v);
    if ((v = getenv("HF_COLL_SPIN_US"))) cfg->spin_us = atoi(v) > 0 ? atoi(v) : 0;
    if ((v = getenv("HF_COLL_SOCKBUF"))) cfg->sockbuf = atoi(v);
    if ((v = getenv("HF_COLL_SCRATCH")) && atol(v) > 0) cfg->scratch_bytes = (size_t)atol(v);
}

void tr_coll_config_init(tr_coll_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->backend = TR_COLL_TCP;
    cfg->world = 1;
    cfg->master_fd = -1;
    cfg->nccl_device = -1;
    cfg->large_algo = 'r';
    cfg->spin_us = -1;
    cfg->sockbuf = SOCKBUF;
    config_from_env(cfg);
}

int tr_coll_backend_parse(const char *s, int *backend)
{
    if (!s) return HF_EINVAL;
    if (!strcmp(s, "tcp")) *backend = TR_COLL_TCP;
    else if (!strcmp(s, "mpi")) *backend = TR_COLL_MPI;
    else if (!strcmp(s, "nccl")) *backend = TR_COLL_NCCL;
    else return HF_EINVAL;
    return 0;
}

const char *tr_coll_backend_name(int backend)
{
    return backend == TR_COLL_MPI ? "mpi" : backend == TR_COLL_NCCL ? "nccl" : "tcp";
}

int tr_coll_rank(const tr_coll *c) { return c->rank; }
int tr_coll_world(const tr_coll *c) { return c->world; }
int tr_coll_backend(const tr_coll *c) { return c->ops->backend; }
const char *tr_coll_errmsg(const tr_coll *c) { return c->err; }
uint32_t tr_coll_seq(const tr_coll *c) { return c->seq; }

const char *tr_coll_peer_addr(const tr_coll *c, int rank)
{
    if (rank < 0 || rank >= c->world || !c->peers) return "?";
    return c->peers[rank].addr;
}

void tr_coll_set_timeout(tr_coll *c, int timeout_ms)
{
    if (timeout_ms > 0) c->timeout_ms = timeout_ms;
}

void tr_coll_tune(tr_coll *c, size_t chunk_bytes, size_t small_bytes)
{
    if (chunk_bytes) c->chunk = chunk_bytes & ~(size_t)3;
    if (c->chunk < 4096) c->chunk = 4096;
    if (small_bytes) c->small_bytes = small_bytes;
}

/* ---- open / close ----------------------------------------------------------- */

static const tr_coll_ops *ops_of(int backend)
{
    switch (backend) {
    case TR_COLL_MPI:  return &tr_coll_mpi_ops;
    case TR_COLL_NCCL: return &tr_coll_nccl_ops;
    default:           return &tr_coll_tcp_ops;
    }
}

int tr_coll_open(const tr_coll_config *cfg, tr_coll **out, char *errbuf, size_t errlen)
{
    int rc = 0;
    *out = NULL;
    tr_coll *c = calloc(1, sizeof *c);
    if (!c) return HF_ENOMEM;
    c->ops = ops_of(cfg->backend);
    c->rank = cfg->rank;
    c->world = cfg->world;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
    c->small_bytes = cfg->small_bytes ? cfg->small_bytes : DEF_SMALL;
    c->chunk = DEF_CHUNK;
    if (cfg->chunk_bytes) tr_coll_tune(c, cfg->chunk_bytes, 0);
    c->large_algo = cfg->large_algo == 'p' ? 'p' : 'r';
    /* Busy-polling (up to 200 us before sleeping in poll()) between the
     * chunks of a large allreduce pays when every rank has a core: a sleep
     * and wake-up per chunk costs more than the wait. With more ranks than
     * cores it would take the peers' CPU, so it is off then (and on other
     * hosts' ranks counted as local: conservative). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    c->spin_us = cfg->spin_us >= 0 ? cfg->spin_us : ncpu > 0 && c->world <= ncpu ? DEF_SPIN_US : 0;
    c->sockbuf = cfg->sockbuf;
    c->scratch_want = cfg->scratch_bytes;
    c->seq = 1;
    rc = c->ops->open ? c->ops->open(c, cfg) : HF_EUNSUP;
    if (rc) {
        if (errbuf && errlen) snprintf(errbuf, errlen, "%s", c->err[0] ? c->err : hf_strerror(rc));
        tr_coll_close(c);
        return rc;
    }
    c->broken = 0;
    *out = c;
    return 0;
}

void tr_coll_close(tr_coll *c)
{
    if (!c) return;
    if (c->ops->close) c->ops->close(c);
    if (c->peers)
        for (int i = 0; i < c->world; i++)
            if (c->peers[i].fd >= 0) close(c->peers[i].fd);
    free(c->peers);
    free(c->scratch);
    free(c);
}

/* ---- operations ------------------------------------------------------------- */

/* After an error the communicator is unusable: the peers may be anywhere
 * in their own sequence of collectives. */
static int check_usable(const tr_coll *c)
{
    return c->broken ? HF_ESTATE : 0;
}

int tr_coll_allreduce_algo(tr_coll *c, float *buf, size_t n, int redop, char algo)
{
    int rc = check_usable(c);
    if (rc) return rc;
    if (redop != TR_COLL_SUM && redop != TR_COLL_AVG) return HF_EINVAL;
    return c->ops->allreduce(c, buf, n, redop, algo);
}

int tr_coll_allreduce(tr_coll *c, float *buf, size_t n, int redop)
{
    return tr_coll_allreduce_algo(c, buf, n, redop, 0);
}

int tr_coll_broadcast(tr_coll *c, void *buf, size_t bytes, int root)
{
    int rc = check_usable(c);
    if (rc) return rc;
    if (root < 0 || root >= c->world) return HF_EINVAL;
    return c->ops->broadcast(c, buf, bytes, root);
}

int tr_coll_allgather(tr_coll *c, const void *send, void *recv, size_t bytes)
{
    int rc = check_usable(c);
    if (rc) return rc;
    return c->ops->allgather(c, send, recv, bytes);
}

int tr_coll_barrier(tr_coll *c)
{
    int rc = check_usable(c);
    if (rc) return rc;
    return c->ops->barrier(c);
}

int tr_coll_send(tr_coll *c, int peer, int tag, const void *buf, size_t bytes)
{
    int rc = check_usable(c);
    if (rc) return rc;
    if (!c->ops->send) return HF_EUNSUP;
    if (peer < 0 || peer >= c->world || peer == c->rank || tag < 0 || bytes > UINT32_MAX) return HF_EINVAL;
    return c->ops->send(c, peer, tag, buf, bytes);
}

int tr_coll_recv(tr_coll *c, int peer, int tag, void *buf, size_t max, int *tag_out, size_t *got)
{
    int rc = check_usable(c);
    if (rc) return rc;
    if (!c->ops->recv) return HF_EUNSUP;
    if (peer < 0 || peer >= c->world || peer == c->rank) return HF_EINVAL;
    return c->ops->recv(c, peer, tag, buf, max, tag_out, got);
}

int tr_coll_wait_any(tr_coll *c, const int *peers, int n, int wait_ms, int *ready)
{
    int rc = check_usable(c);
    if (rc) return rc;
    if (n <= 0 || n > c->world) return HF_EINVAL;
    if (!c->ops->wait_any) return HF_EUNSUP;
    return c->ops->wait_any(c, peers, n, wait_ms, ready);
}
