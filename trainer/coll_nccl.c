/*
 * coll_nccl.c — the nccl backend of coll.h: ncclAllReduce / ncclBroadcast
 * between one GPU per rank. The unique id is made by rank 0 and sent over
 * the tcp mesh opened by the rendezvous (which stays up for barriers,
 * allgather and point-to-point messages). Buffers handed to the public API
 * are host memory: they are staged through one device buffer per
 * communicator (the trainer's CUDA path can pass device pointers later).
 *
 * The table tr_coll_nccl_ops (coll_int.h) takes allreduce and broadcast
 * from NCCL and everything else (open's first half, allgather, barrier,
 * messages) from the tcp backend. Built when the Makefile defines
 * HF_HAVE_NCCL (CUDA toolkit with NCCL); otherwise the table's open
 * answers HF_EUNSUP with a message.
 */
#include "coll_int.h"

#include "hf_err.h"
#include "hf_log.h"

#include <stdlib.h>
#include <stdio.h>

#if defined(HF_HAVE_NCCL) && defined(HF_HAVE_CUDA)
/* nccl.h declares f() without (void): keep our strict flags for our code only */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime.h>
#include <nccl.h>
#pragma GCC diagnostic pop

typedef struct nccl_state {
    ncclComm_t   comm;
    cudaStream_t stream;
    void        *dev;
    size_t       dev_len;
} nccl_state;

#define CUDA_OK(c, call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) \
    return tr_coll_fail((c), HF_EIO, "%s: %s", #call, cudaGetErrorString(e_)); } while (0)
#define NCCL_OK(c, call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) \
    return tr_coll_fail((c), HF_EPEER, "%s: %s", #call, ncclGetErrorString(r_)); } while (0)

static int nccl_open(tr_coll *c, const tr_coll_config *cfg)
{
    int ndev = 0, device = cfg->nccl_device;
    int rc = tr_coll_tcp_open(c, cfg);   /* the mesh first: the unique id travels over it */
    if (rc) return rc;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
        return tr_coll_fail(c, HF_EUNSUP, "nccl backend: no usable CUDA device on this host");
    if (device < 0) device = c->rank % ndev;
    CUDA_OK(c, cudaSetDevice(device));
    ncclUniqueId id;
    if (c->rank == 0) NCCL_OK(c, ncclGetUniqueId(&id));
    rc = tr_coll_tcp_broadcast(c, &id, sizeof id, 0);
    if (rc) return rc;
    nccl_state *s = calloc(1, sizeof *s);
    if (!s) return HF_ENOMEM;
    c->nccl = s;
    CUDA_OK(c, cudaStreamCreate(&s->stream));
    NCCL_OK(c, ncclCommInitRank(&s->comm, c->world, id, c->rank));
    hf_info("nccl: rank %d of %d on CUDA device %d", c->rank, c->world, device);
    return 0;
}

static void nccl_close(tr_coll *c)
{
    nccl_state *s = c->nccl;
    if (!s) return;
    if (s->comm) ncclCommDestroy(s->comm);
    if (s->dev) cudaFree(s->dev);
    if (s->stream) cudaStreamDestroy(s->stream);
    free(s);
    c->nccl = NULL;
}

static int stage(tr_coll *c, nccl_state *s, size_t bytes)
{
    if (s->dev_len >= bytes) return 0;
    if (s->dev) cudaFree(s->dev);
    s->dev = NULL;
    s->dev_len = 0;
    CUDA_OK(c, cudaMalloc(&s->dev, bytes ? bytes : 4));
    s->dev_len = bytes;
    return 0;
}

static int nccl_allreduce(tr_coll *c, float *buf, size_t n, int redop, char algo)
{
    (void)algo;
    nccl_state *s = c->nccl;
    c->seq++;
    if (!s) return tr_coll_fail(c, HF_ESTATE, "nccl backend not open");
    int rc = stage(c, s, n * 4);
    if (rc) return rc;
    CUDA_OK(c, cudaMemcpyAsync(s->dev, buf, n * 4, cudaMemcpyHostToDevice, s->stream));
    NCCL_OK(c, ncclAllReduce(s->dev, s->dev, n, ncclFloat, redop == TR_COLL_AVG ? ncclAvg : ncclSum,
                             s->comm, s->stream));
    CUDA_OK(c, cudaMemcpyAsync(buf, s->dev, n * 4, cudaMemcpyDeviceToHost, s->stream));
    CUDA_OK(c, cudaStreamSynchronize(s->stream));
    return 0;
}

static int nccl_broadcast(tr_coll *c, void *buf, size_t bytes, int root)
{
    nccl_state *s = c->nccl;
    c->seq++;
    if (!s) return tr_coll_fail(c, HF_ESTATE, "nccl backend not open");
    int rc = stage(c, s, bytes);
    if (rc) return rc;
    CUDA_OK(c, cudaMemcpyAsync(s->dev, buf, bytes, cudaMemcpyHostToDevice, s->stream));
    NCCL_OK(c, ncclBroadcast(s->dev, s->dev, bytes, ncclChar, root, s->comm, s->stream));
    CUDA_OK(c, cudaMemcpyAsync(buf, s->dev, bytes, cudaMemcpyDeviceToHost, s->stream));
    CUDA_OK(c, cudaStreamSynchronize(s->stream));
    return 0;
}

const tr_coll_ops tr_coll_nccl_ops = {
    .backend = TR_COLL_NCCL, .open = nccl_open, .close = nccl_close,
    .allreduce = nccl_allreduce, .broadcast = nccl_broadcast,
    .allgather = tr_coll_tcp_allgather, .barrier = tr_coll_tcp_barrier,
    .send = tr_coll_tcp_send, .recv = tr_coll_tcp_recv, .wait_any = tr_coll_tcp_wait_any,
};

#else /* no NCCL in this build */

static int no_nccl(tr_coll *c, const tr_coll_config *cfg)
{
    (void)cfg;
    return tr_coll_fail(c, HF_EUNSUP,
                        "this build has no nccl backend (needs the CUDA toolkit with NCCL at build time)");
}

/* Only open is reached: it fails, and the communicator is never handed out. */
const tr_coll_ops tr_coll_nccl_ops = {.backend = TR_COLL_NCCL, .open = no_nccl};

#endif
