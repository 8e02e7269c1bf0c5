/*
 * coll_int.h — internals of the collectives (coll.h), shared by the front
 * end (coll.c), the backends (coll_tcp.c, coll_mpi.c, coll_nccl.c) and the
 * rendezvous (coll_rdv.c). Not part of the public interface.
 *
 * A backend is a table of operations (as libuv keeps one per platform):
 * coll.c checks the arguments and the communicator's state once, then
 * calls through c->ops and never asks which backend it is. An operation
 * left NULL is not offered by that backend (the front end answers
 * HF_EUNSUP). A backend's operations count their own sequence numbers
 * (c->seq, or per-peer for messages) and record errors with tr_coll_fail.
 *
 * nccl rides on the tcp mesh: its table points at tcp's functions for what
 * NCCL does not do here (allgather, barrier, messages), so those are
 * exported below with the tr_coll_tcp_ prefix.
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

typedef struct tr_coll_ops {
    int  backend;          /* TR_COLL_* it implements */
    /* Join the job (cfg as given to tr_coll_open). On failure the front
     * end calls close, so open may leave state half built. */
    int  (*open)(tr_coll *c, const tr_coll_config *cfg);
    /* Release the backend's own state (peer sockets are the front end's). */
    void (*close)(tr_coll *c);
    /* algo: see tr_coll_allreduce_algo (backends other than tcp ignore it) */
    int  (*allreduce)(tr_coll *c, float *buf, size_t n, int redop, char algo);
    int  (*broadcast)(tr_coll *c, void *buf, size_t bytes, int root);
    int  (*allgather)(tr_coll *c, const void *send, void *recv, size_t bytes);
    int  (*barrier)(tr_coll *c);
    /* messages: peer and tag already checked by the front end */
    int  (*send)(tr_coll *c, int peer, int tag, const void *buf, size_t bytes);
    int  (*recv)(tr_coll *c, int peer, int tag, void *buf, size_t max, int *tag_out, size_t *got);
    int  (*wait_any)(tr_coll *c, const int *peers, int n, int wait_ms, int *ready);
} tr_coll_ops;

extern const tr_coll_ops tr_coll_tcp_ops;
extern const tr_coll_ops tr_coll_mpi_ops;    /* open fails with HF_EUNSUP when not built */
extern const tr_coll_ops tr_coll_nccl_ops;   /* idem */

struct tr_coll {
    const tr_coll_ops *ops;
    int       rank, world;
    int       timeout_ms;
    size_t    small_bytes;
    size_t    chunk;
    char      large_algo;   /* 'r' ring or 'p' pairwise, at and above small_bytes */
    int       spin_us;      /* large allreduces: busy-poll this long before sleeping in poll() */
    int       spin_now;     /* spin_us applies to the collective in progress */
    int       sockbuf;      /* socket buffer bytes (<= 0: kernel autotuning) */
    size_t    scratch_want; /* staging bytes for received floats (0: two chunks) */
    uint32_t  seq;          /* next collective's sequence number */
    int       broken;       /* an error happened: every later call fails */
    int       rr;           /* round-robin cursor for tr_coll_wait_any */
    tr_peer  *peers;        /* [world]; NULL with mpi */
    char     *scratch;      /* ring reduce staging */
    size_t    scratch_len;
    void     *mpi;          /* coll_mpi.c state */
    void     *nccl;         /* coll_nccl.c state */
    char      err[TR_COLL_ERRLEN];
};

/* Record an error message on c (and log it), mark c broken; returns code. */
int tr_coll_fail(tr_coll *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* buf[0..n) /= world: TR_COLL_AVG for backends that only sum. */
void tr_coll_scale_avg(const tr_coll *c, float *buf, size_t n);

/* coll_tcp.c: the tcp backend's operations, for tables that reuse them. */
int tr_coll_tcp_open(tr_coll *c, const tr_coll_config *cfg);
int tr_coll_tcp_broadcast(tr_coll *c, void *buf, size_t bytes, int root);
int tr_coll_tcp_allgather(tr_coll *c, const void *send, void *recv, size_t bytes);
int tr_coll_tcp_barrier(tr_coll *c);
int tr_coll_tcp_send(tr_coll *c, int peer, int tag, const void *buf, size_t bytes);
int tr_coll_tcp_recv(tr_coll *c, int peer, int tag, void *buf, size_t max, int *tag_out, size_t *got);
int tr_coll_tcp_wait_any(tr_coll *c, const int *peers, int n, int wait_ms, int *ready);

/* coll_rdv.c: sockets and the rendezvous. */
/* Connect c->peers[] to every other rank (c->rank, c->world, c->peers set;
 * world > 1; cfg->master not NULL). RET 0 or HF_E* (message recorded). */
int tr_coll_rendezvous(tr_coll *c, const tr_coll_config *cfg);
/* Blocking-style full read (writing 0) or write (writing 1) on a
 * non-blocking fd until deadline_ms. RET 0, HF_ETIMEOUT, HF_ECONN. */
int tr_coll_io_full(int fd, void *buf, size_t len, int writing, int64_t deadline_ms);

#endif
