/*
 * coll.h — collectives for distributed training: allreduce, broadcast,
 * allgather, barrier and point-to-point messages between the ranks of one
 * job, over TCP (embedded), Open MPI or NCCL.
 *
 * The library stands on its own (it needs only common/): a program opens a
 * communicator with its rank, the world size and the master's host:port,
 * and every rank then calls the same collectives in the same order, as with
 * MPI. The workload it is built for: a handful to a few dozen ranks, one
 * allreduce of a few KiB to a few hundred MiB of float32 gradients per
 * training step, plus small control messages.
 *
 * Rendezvous (tcp, and nccl for its unique id): rank 0 listens at the
 * master address; every other rank connects there and announces its rank,
 * the world size and the port of its own listener; rank 0 checks them and
 * sends the full address table back; then rank j connects to every rank
 * 0 < i < j, so every pair of ranks shares one TCP connection (the link to
 * rank 0 is the rendezvous connection itself).
 *
 * Invariants and guarantees:
 *  - Every collective and every message carries a 32-byte header (op,
 *    sequence number, byte count, root/reduction/tag, sender rank, step).
 *    The receiver compares it with what it is itself doing and fails with
 *    HF_EPEER and a message naming both sides instead of mixing data.
 *  - No call waits forever: a peer that sends nothing (and accepts
 *    nothing) for timeout_ms, or closes its connection, fails the call with
 *    HF_ETIMEOUT or HF_ECONN and a message naming the rank, its host:port
 *    and the operation's sequence number (tr_coll_errmsg). After any error
 *    the communicator is broken: every later call fails at once.
 *  - Allreduce results are bitwise identical on every rank (each element
 *    is reduced in one place, then copied), so data-parallel replicas stay
 *    identical. The summation order differs from a serial loop, so results
 *    match a plain sum only within float rounding.
 *  - A communicator is used by one thread at a time.
 *
 * The mpi backend needs no rendezvous (mpirun provides it) and does not
 * implement timeouts (Open MPI has none: a watchdog ends a stalled rank);
 * nccl needs HF_HAVE_NCCL and a GPU. coll.c is the front end; each backend
 * is a table of operations in its own file (coll_tcp.c, coll_mpi.c,
 * coll_nccl.c), the rendezvous is coll_rdv.c.
 * Wire integers are in host byte order: all hosts of a job must share it.
 */
#ifndef TR_COLL_H
#define TR_COLL_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_coll tr_coll;

enum tr_coll_backend { TR_COLL_TCP = 0, TR_COLL_MPI, TR_COLL_NCCL };
enum tr_coll_redop   { TR_COLL_SUM = 0, TR_COLL_AVG };

typedef struct tr_coll_config {
    int         backend;      /* TR_COLL_TCP (default), _MPI, _NCCL */
    int         rank;         /* 0..world-1 (ignored for mpi: taken from MPI) */
    int         world;        /* >= 1 (ignored for mpi) */
    const char *master;       /* "host:port" of rank 0's rendezvous listener */
    int         master_fd;    /* rank 0 only: an already listening socket to use
                                 instead of binding master (-1: bind it) */
    int         timeout_ms;   /* inactivity limit per operation; <= 0: 60000 */
    size_t      small_bytes;  /* allreduce below this uses recursive doubling;
                                 0: default (256 KiB) */
    int         nccl_device;  /* CUDA device for nccl (-1: local rank) */
    /* tuning of the tcp engine (docs/distributed.md, "Collectives") */
    size_t      chunk_bytes;  /* bytes per read/write call; 0: default (512 KiB) */
    char        large_algo;   /* allreduce at and above small_bytes: 'r' ring
                                 (default) or 'p' pairwise */
    int         spin_us;      /* large allreduces busy-poll this long before
                                 sleeping in poll(); < 0: 200 when the world
                                 fits this host's cores, else 0 */
    int         sockbuf;      /* socket buffer bytes; <= 0: kernel autotuning */
    size_t      scratch_bytes;/* staging for received floats; 0: two chunks */
} tr_coll_config;

/*
 * Fill cfg with defaults (tcp, rank 0, world 1, master_fd -1, 16 MiB
 * socket buffers), then the tuning from the environment, read here once
 * so a program's config carries it from startup on: HF_COLL_ALGO=p|r,
 * HF_COLL_CHUNK, HF_COLL_SPIN_US, HF_COLL_SOCKBUF, HF_COLL_SCRATCH.
 */
void tr_coll_config_init(tr_coll_config *cfg);

/* Parse "tcp" | "mpi" | "nccl". RET 0 or HF_EINVAL. */
int tr_coll_backend_parse(const char *s, int *backend);
const char *tr_coll_backend_name(int backend);

/*
 * Join the job: rendezvous and connect to every peer (tcp).
 * IN cfg (strings copied). OUT *out: the communicator, owned by the caller.
 * RET 0; HF_EINVAL (bad config), HF_ETIMEOUT (a rank did not show up
 * within timeout_ms), HF_ECONN, HF_EPEER (ranks disagree on world size or
 * a rank appeared twice), HF_EUNSUP (backend not built in). On failure
 * *out is NULL and, when errbuf is not NULL, the reason is copied there.
 */
int tr_coll_open(const tr_coll_config *cfg, tr_coll **out, char *errbuf, size_t errlen);
/* Close connections and free (NULL is fine). With the mpi backend, calls
 * MPI_Finalize when tr_coll_open was the one that initialised MPI. */
void tr_coll_close(tr_coll *c);

int tr_coll_rank(const tr_coll *c);
int tr_coll_world(const tr_coll *c);
int tr_coll_backend(const tr_coll *c);
/* The last error's message ("" when none). Pointer valid until next call. */
const char *tr_coll_errmsg(const tr_coll *c);
/* "host:port" of a rank's endpoint as known from the rendezvous. */
const char *tr_coll_peer_addr(const tr_coll *c, int rank);
/* Change the inactivity timeout (ms, > 0). */
void tr_coll_set_timeout(tr_coll *c, int timeout_ms);
/* Ring chunk (bytes read or written per call) and the small-message
 * threshold; for benchmarks and tests. 0 keeps the current value. */
void tr_coll_tune(tr_coll *c, size_t chunk_bytes, size_t small_bytes);

/*
 * In-place allreduce of n float32 values on every rank: buf becomes the
 * element-wise sum (or average) over ranks. Ring reduce-scatter+allgather
 * (chunked, send/receive/reduce overlapped) for n*4 >= small_bytes,
 * recursive doubling below. RET 0 or HF_E* (see tr_coll_errmsg).
 */
int tr_coll_allreduce(tr_coll *c, float *buf, size_t n, int redop);
/* Force one algorithm (tests and benchmarks): 'r' ring, 'p' pairwise
 * (direct reduce-scatter + allgather), 'd' recursive doubling; 0 chooses
 * by size (cfg.large_algo picks the large-message one). */
int tr_coll_allreduce_algo(tr_coll *c, float *buf, size_t n, int redop, char algo);
/* Copy bytes of root's buf into every rank's buf (pipelined chain). */
int tr_coll_broadcast(tr_coll *c, void *buf, size_t bytes, int root);
/* recv[r*bytes .. (r+1)*bytes) = rank r's send (bytes each); send may alias
 * recv + rank*bytes. */
int tr_coll_allgather(tr_coll *c, const void *send, void *recv, size_t bytes);
/* Return once every rank has entered the barrier. */
int tr_coll_barrier(tr_coll *c);

/*
 * Point-to-point messages (tcp, and nccl over its tcp mesh; mpi answers
 * HF_EUNSUP), for parameter servers and pipeline stages. A message is (tag, bytes); per pair of ranks messages arrive in
 * order and carry their own sequence numbers, checked on receipt.
 * tr_coll_send blocks until the bytes are handed to the kernel.
 * tr_coll_recv waits for the next message from peer: it must carry tag
 * (tag < 0 accepts any) and at most max bytes; OUT *tag_out, *got may be
 * NULL. tr_coll_wait_any waits until one of peers[0..n) has a message (or
 * has closed its link) and returns it in *ready (round-robin fair); with
 * wait_ms < 0 it uses the communicator's timeout.
 */
int tr_coll_send(tr_coll *c, int peer, int tag, const void *buf, size_t bytes);
int tr_coll_recv(tr_coll *c, int peer, int tag, void *buf, size_t max,
                 int *tag_out, size_t *got);
int tr_coll_wait_any(tr_coll *c, const int *peers, int n, int wait_ms, int *ready);

/* Sequence number of the next collective (starts at 1). */
uint32_t tr_coll_seq(const tr_coll *c);

#endif
