/*
 * coll_int.h — internals shared by coll.c (tcp, rendezvous, dispatch),
 * coll_mpi.c and coll_nccl.c. Not part of the public interface.
 */
#ifndef TR_COLL_INT_H
#define TR_COLL_INT_H

#include "coll.h"

#include <stddef.h>
#include <stdint.h>

#define TR_COLL_ERRLEN 320

typedef struct tr_peer {
    int  fd;               /* connection to this rank (-1 for self) */
    char addr[80];         /* host:port it announced */
    uint32_t tx_seq;       /* point-to-point messages sent to it */
    uint32_t rx_seq;       /* point-to-point messages received from it */
} tr_peer;

struct tr_coll {
    int       backend;
    int       rank, world;
    int       timeout_ms;
    size_t    small_bytes;
    size_t    chunk;
    char      large_algo;   /* 'r' ring or 'p' pairwise, at and above small_bytes */
    int       spin_us;      /* large allreduces: busy-poll this long before sleeping in poll() */
    int       spin_now;     /* spin_us applies to the collective in progress */
    uint32_t  seq;          /* next collective's sequence number */
    int       broken;       /* an error happened: every later call fails */
    int       rr;           /* round-robin cursor for tr_coll_wait_any */
    tr_peer  *peers;        /* [world] */
    char     *scratch;      /* ring reduce staging, chunk*? bytes */
    size_t    scratch_len;
    void     *mpi;          /* coll_mpi.c state */
    void     *nccl;         /* coll_nccl.c state */
    char      err[TR_COLL_ERRLEN];
};

/* Record an error message on c (and log it); returns code. */
int tr_coll_fail(tr_coll *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Backend hooks: each returns 0 or HF_E*. Defined in coll_mpi.c /
 * coll_nccl.c; when the backend is not built they return HF_EUNSUP. */
int tr_coll_mpi_open(tr_coll *c);
void tr_coll_mpi_close(tr_coll *c);
int tr_coll_mpi_allreduce(tr_coll *c, float *buf, size_t n, int redop);
int tr_coll_mpi_broadcast(tr_coll *c, void *buf, size_t bytes, int root);
int tr_coll_mpi_allgather(tr_coll *c, const void *send, void *recv, size_t bytes);
int tr_coll_mpi_barrier(tr_coll *c);

/* nccl: open after the tcp rendezvous (the unique id travels over it). */
int tr_coll_nccl_open(tr_coll *c, int device);
void tr_coll_nccl_close(tr_coll *c);
int tr_coll_nccl_allreduce(tr_coll *c, float *buf, size_t n, int redop);
int tr_coll_nccl_broadcast(tr_coll *c, void *buf, size_t bytes, int root);

#endif
