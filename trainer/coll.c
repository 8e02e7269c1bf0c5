/*
 * coll.c — the embedded TCP collectives: rendezvous, a full mesh of
 * connections, a pipelined ring allreduce, recursive doubling for small
 * messages, chain broadcast, ring allgather, barrier, point-to-point
 * messages; and the dispatch to the mpi/nccl backends (coll_mpi.c,
 * coll_nccl.c).
 *
 * Everything that moves bytes goes through one engine, stream_run(): a
 * collective is a list of steps, each step sending one buffer to one peer
 * and receiving one buffer from another (either may be absent). Sends go
 * step after step, receives step after step, concurrently, on non-blocking
 * sockets: we read and write until the kernel says EAGAIN and only then
 * poll(). A step's send may be gated on an earlier receive (in a ring, what
 * we send at step s+1 is what we received and reduced at step s), byte by
 * byte, so a segment flows on to the next rank while its tail is still
 * arriving: sending, receiving and reducing overlap without threads.
 * Each step's stream begins with a 32-byte header that the receiver checks.
 *
 * Timeouts: the engine tracks the last time any byte moved; when nothing
 * moved for timeout_ms it fails, naming the peer it was waiting for. A
 * closed connection fails at once. Error messages always carry the op and
 * its sequence number, and the rank and host:port of the peer at fault.
 */
#include "coll_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HDR_MAGIC   0x31434648u   /* "HFC1" */
#define HELLO_MAGIC 0x4f4c4548u   /* "HELO" */
#define TABLE_MAGIC 0x4c424154u   /* "TABL" */
#define MAX_WORLD   4096
#define SOCKBUF     (16 << 20)
#define DEF_CHUNK   (512u << 10)
#define DEF_SMALL   (256u << 10)

enum { OP_ALLREDUCE = 1, OP_BCAST, OP_ALLGATHER, OP_BARRIER, OP_P2P };

static const char *op_name(int op)
{
    switch (op) {
    case OP_ALLREDUCE: return "allreduce";
    case OP_BCAST:     return "broadcast";
    case OP_ALLGATHER: return "allgather";
    case OP_BARRIER:   return "barrier";
    case OP_P2P:       return "message";
    default:           return "unknown-op";
    }
}

/* The header in front of every step's stream. */
typedef struct wire_hdr {
    uint32_t magic;
    uint16_t op;
    uint16_t step;
    uint32_t seq;
    uint32_t src;
    uint64_t bytes;   /* total payload bytes of the collective (p2p: of the message) */
    uint32_t aux;     /* allreduce: redop; broadcast: root; p2p: tag */
    uint32_t len;     /* bytes in this step's stream after the header */
} wire_hdr;
_Static_assert(sizeof(wire_hdr) == 32, "wire header is 32 bytes");

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

void tr_coll_config_init(tr_coll_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->backend = TR_COLL_TCP;
    cfg->world = 1;
    cfg->master_fd = -1;
    cfg->nccl_device = -1;
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
int tr_coll_backend(const tr_coll *c) { return c->backend; }
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

/* ---- sockets ----------------------------------------------------------- */

/* TCP_NODELAY (small collectives must not wait for Nagle) and large
 * socket buffers, so a rank that is descheduled for a moment does not stall
 * its neighbours. HF_COLL_SOCKBUF overrides the size (0: kernel autotuning). */
static void sock_tune(int fd)
{
    int one = 1, sz = SOCKBUF;
    const char *env = getenv("HF_COLL_SOCKBUF");
    if (env) sz = atoi(env);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sz > 0) {
        /* past net.core.[wr]mem_max only with CAP_NET_ADMIN: try, then cap */
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz))
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz))
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    }
}

static int sock_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return HF_EIO;
    return 0;
}

/* Split "host:port" (host may be [v6]). RET 0 or HF_EINVAL. */
static int addr_split(const char *hp, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon = strrchr(hp, ':');
    if (!colon || colon == hp || !colon[1]) return HF_EINVAL;
    const char *h = hp;
    size_t n = (size_t)(colon - hp);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') { h++; n -= 2; }
    if (n >= hlen || strlen(colon + 1) >= plen) return HF_EINVAL;
    memcpy(host, h, n);
    host[n] = 0;
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

static void addr_format(const struct sockaddr_storage *ss, char *out, size_t len)
{
    char h[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &s4->sin_addr, h, sizeof h);
        port = ntohs(s4->sin_port);
        snprintf(out, len, "%s:%d", h, port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &s6->sin6_addr, h, sizeof h);
        port = ntohs(s6->sin6_port);
        snprintf(out, len, "[%s]:%d", h, port);
    } else {
        snprintf(out, len, "?");
    }
}

/* Listen on host:port ("0" for any free port). RET fd or negative. */
static int listen_on(const char *host, const char *port)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host, port, &hints, &res) != 0) return HF_EINVAL;
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 256) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd >= 0 ? fd : HF_EIO;
}

/* Connect to host:port, retrying until deadline (the listener may not be up
 * yet). RET fd or HF_ETIMEOUT / HF_EINVAL. */
static int connect_retry(const char *hostport, int64_t deadline_ms)
{
    char host[256], port[32];
    if (addr_split(hostport, host, sizeof host, port, sizeof port)) return HF_EINVAL;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res) != 0) return HF_EINVAL;
    int fd = -1;
    int64_t backoff = 10;
    for (;;) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
            if (fd < 0) continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) goto end;
            close(fd);
            fd = -1;
        }
        if (hf_mono_ms() >= deadline_ms) { fd = HF_ETIMEOUT; goto end; }
        hf_sleep_ms(backoff);
        if (backoff < 200) backoff *= 2;
    }
end:
    freeaddrinfo(res);
    return fd;
}

/* Blocking-style full read/write on a non-blocking fd with a deadline
 * (rendezvous only). RET 0, HF_ETIMEOUT, HF_ECONN. */
static int io_full(int fd, void *buf, size_t len, int writing, int64_t deadline_ms)
{
    char *p = buf;
    while (len) {
        ssize_t k = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k > 0) { p += k; len -= (size_t)k; continue; }
        if (k == 0) return HF_ECONN;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return HF_ECONN;
        int64_t left = deadline_ms - hf_mono_ms();
        if (left <= 0) return HF_ETIMEOUT;
        struct pollfd pf = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
        poll(&pf, 1, (int)(left > 1000 ? 1000 : left));
    }
    return 0;
}

/* ---- the streaming engine ---------------------------------------------- */

typedef struct step {
    int     send_peer;   /* -1: nothing to send in this step */
    const char *sptr;
    size_t  slen;
    int     gate;        /* recv step whose progress limits this send (-1 none) */
    int     recv_peer;   /* -1: nothing to receive */
    char   *rptr;
    size_t  rlen;
    int     reduce;      /* received floats are added into rptr (else copied) */
} step;

typedef struct stream_op {
    int      op;
    uint32_t seq;
    uint64_t bytes;
    uint32_t aux;
} stream_op;

static void hdr_fill(wire_hdr *h, const tr_coll *c, const stream_op *o, int s, size_t len)
{
    memset(h, 0, sizeof *h);
    h->magic = HDR_MAGIC;
    h->op = (uint16_t)o->op;
    h->step = (uint16_t)s;
    h->seq = o->seq;
    h->src = (uint32_t)c->rank;
    h->bytes = o->bytes;
    h->aux = o->aux;
    h->len = (uint32_t)len;
}

static int hdr_check(tr_coll *c, const stream_op *o, int s, const step *st, const wire_hdr *h)
{
    int pr = st->recv_peer;
    if (h->magic != HDR_MAGIC)
        return tr_coll_fail(c, HF_EPEER, "%s seq %u: rank %d (%s) sent garbage (bad magic 0x%08x)",
                            op_name(o->op), o->seq, pr, c->peers[pr].addr, h->magic);
    if (h->op != o->op || h->seq != o->seq || h->bytes != o->bytes || h->aux != o->aux ||
        h->src != (uint32_t)pr || h->step != (uint16_t)s || h->len != (uint32_t)st->rlen)
        return tr_coll_fail(c, HF_EPEER,
            "collective mismatch: rank %d (%s) is in %s seq %u (%llu bytes, arg %u, step %u) "
            "but rank %d is in %s seq %u (%llu bytes, arg %u, step %d)",
            pr, c->peers[pr].addr, op_name(h->op), h->seq, (unsigned long long)h->bytes, h->aux,
            h->step, c->rank, op_name(o->op), o->seq, (unsigned long long)o->bytes, o->aux, s);
    return 0;
}

/* dst += src, 8 floats at a time with GCC/clang vector extensions (-O2
 * does not vectorize a loop of unknown length on its own); the same
 * element-wise float adds as the scalar loop, so results do not change. */
typedef float v8f __attribute__((vector_size(32)));
static void add_floats(float *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f a, b;
        memcpy(&a, dst + i, sizeof a);
        memcpy(&b, src + i, sizeof b);
        a += b;
        memcpy(dst + i, &a, sizeof a);
    }
    for (; i < n; i++) dst[i] += src[i];
}

/*
 * Run the steps of one collective to completion. Receives of reduce steps
 * are staged through c->scratch (a ring of c->scratch_len bytes, a multiple
 * of 4) and added in as soon as whole floats are there.
 * RET 0 or HF_E* (message recorded).
 */
static int stream_run(tr_coll *c, const stream_op *o, step *steps, int nsteps)
{
    enum { HL = sizeof(wire_hdr) };
    int si = 0, ri = 0;           /* current send / recv step */
    size_t soff = 0, roff = 0;    /* offsets in the step's stream (header included) */
    size_t rdone = 0;             /* payload bytes of recv step ri fully processed */
    size_t *done = calloc((size_t)nsteps, sizeof *done);  /* processed payload per recv step */
    wire_hdr shdr, rhdr;
    int rc = 0;
    int64_t last = hf_mono_ms();
    if (!done) return tr_coll_fail(c, HF_ENOMEM, "out of memory");

    for (;;) {
        while (si < nsteps && steps[si].send_peer < 0) si++;
        while (ri < nsteps && steps[ri].recv_peer < 0) ri++;
        if (si >= nsteps && ri >= nsteps) break;
        int moved = 0, sblocked = 0, rblocked = 0;

        /* receive as much as is there */
        while (ri < nsteps) {
            step *st = &steps[ri];
            int fd = c->peers[st->recv_peer].fd;
            char *dst;
            size_t want;
            if (roff < HL) {
                dst = (char *)&rhdr + roff;
                want = HL - roff;
            } else if (st->reduce) {
                size_t pos = (roff - HL) % c->scratch_len;
                dst = c->scratch + pos;
                want = st->rlen - (roff - HL);
                if (want > c->scratch_len - pos) want = c->scratch_len - pos;
            } else {
                dst = st->rptr + (roff - HL);
                want = st->rlen - (roff - HL);
            }
            if (want > c->chunk) want = c->chunk;
            ssize_t k = want ? recv(fd, dst, want, 0) : 0;
            if (want && k == 0) {
                rc = tr_coll_fail(c, HF_ECONN, "%s seq %u: rank %d (%s) closed the connection (died?)",
                                  op_name(o->op), o->seq, st->recv_peer, c->peers[st->recv_peer].addr);
                goto end;
            }
            if (k < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) { rblocked = 1; break; }
                rc = tr_coll_fail(c, HF_ECONN, "%s seq %u: receiving from rank %d (%s): %s",
                                  op_name(o->op), o->seq, st->recv_peer, c->peers[st->recv_peer].addr,
                                  strerror(errno));
                goto end;
            }
            size_t before = roff;
            roff += (size_t)k;
            moved = 1;
            if (before < HL && roff == HL && (rc = hdr_check(c, o, ri, st, &rhdr))) goto end;
            if (roff > HL) {
                size_t got = roff - HL;
                if (st->reduce) {
                    size_t upto = got == st->rlen ? got : got & ~(size_t)3;
                    if (upto > rdone) {
                        size_t pos = rdone % c->scratch_len;
                        add_floats((float *)(st->rptr + rdone), (const float *)(c->scratch + pos),
                                   (upto - rdone) / 4);
                        rdone = upto;
                    }
                } else {
                    rdone = got;
                }
                done[ri] = rdone;
            }
            if (roff == HL + st->rlen) {
                done[ri] = st->rlen;
                ri++;
                roff = 0;
                rdone = 0;
                while (ri < nsteps && steps[ri].recv_peer < 0) ri++;
            }
            if ((size_t)k < want) { rblocked = 1; break; }
            /* let the sender forward what just arrived */
            break;
        }

        /* send as much as is allowed */
        while (si < nsteps) {
            step *st = &steps[si];
            int fd = c->peers[st->send_peer].fd;
            size_t avail = st->slen;
            if (st->gate >= 0) {
                avail = st->gate < ri ? steps[st->gate].rlen : st->gate == ri ? done[ri] : 0;
                if (avail > st->slen) avail = st->slen;
            }
            const char *src;
            size_t want;
            if (soff == 0) hdr_fill(&shdr, c, o, si, st->slen);
            if (soff < HL) {
                src = (const char *)&shdr + soff;
                want = HL - soff;
            } else {
                src = st->sptr + (soff - HL);
                want = avail > soff - HL ? avail - (soff - HL) : 0;
            }
            if (want > c->chunk) want = c->chunk;
            if (!want) break;   /* gated: wait for the receive side */
            ssize_t k = send(fd, src, want, MSG_NOSIGNAL);
            if (k < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) { sblocked = 1; break; }
                rc = tr_coll_fail(c, HF_ECONN, "%s seq %u: sending to rank %d (%s): %s (died?)",
                                  op_name(o->op), o->seq, st->send_peer, c->peers[st->send_peer].addr,
                                  strerror(errno));
                goto end;
            }
            soff += (size_t)k;
            moved = 1;
            if (soff == HL + st->slen) {
                si++;
                soff = 0;
                while (si < nsteps && steps[si].send_peer < 0) si++;
            }
            if ((size_t)k < want) { sblocked = 1; break; }
            break;
        }

        if (moved) { last = hf_mono_ms(); continue; }

        /* nothing moved: wait for the sockets */
        struct pollfd pf[2];
        int np = 0;
        if (ri < nsteps) pf[np++] = (struct pollfd){.fd = c->peers[steps[ri].recv_peer].fd, .events = POLLIN};
        if (si < nsteps && sblocked) {
            int fd = c->peers[steps[si].send_peer].fd;
            if (np && pf[0].fd == fd) pf[0].events |= POLLOUT;
            else pf[np++] = (struct pollfd){.fd = fd, .events = POLLOUT};
        }
        (void)rblocked;
        int64_t left = last + c->timeout_ms - hf_mono_ms();
        if (left <= 0 || np == 0) {
            int who = ri < nsteps ? steps[ri].recv_peer : steps[si].send_peer;
            const char *what = ri < nsteps ? "no data from" : "cannot send to";
            rc = tr_coll_fail(c, HF_ETIMEOUT,
                              "%s seq %u: %s rank %d (%s) for %d ms (timeout): it is dead, stalled or "
                              "in a different collective",
                              op_name(o->op), o->seq, what, who, c->peers[who].addr, c->timeout_ms);
            goto end;
        }
        int pr = 0;
        if (c->spin_now && c->spin_us > 0) {   /* a peer on another core answers within microseconds */
            int64_t until = hf_mono_us() + c->spin_us;
            while ((pr = poll(pf, (nfds_t)np, 0)) == 0 && hf_mono_us() < until) {}
        }
        if (pr == 0) pr = poll(pf, (nfds_t)np, (int)left);
        if (pr < 0 && errno != EINTR) {
            rc = tr_coll_fail(c, HF_EIO, "poll: %s", strerror(errno));
            goto end;
        }
    }
end:
    free(done);
    return rc;
}

static int scratch_ensure(tr_coll *c, size_t need)
{
    need = (need + 3) & ~(size_t)3;
    if (need < 4) need = 4;
    if (c->scratch_len >= need) return 0;
    char *p = realloc(c->scratch, need);
    if (!p) return tr_coll_fail(c, HF_ENOMEM, "out of memory for %zu scratch bytes", need);
    c->scratch = p;
    c->scratch_len = need;
    return 0;
}

/* Staging for received floats before they are added: they are added as
 * soon as they arrive, so a few chunks suffice; keeping it small keeps it in
 * L2 (writes to fresh lines would cost a read from memory first). */
static size_t scratch_size(const tr_coll *c, size_t seg_bytes)
{
    size_t want = 2 * c->chunk;
    const char *env = getenv("HF_COLL_SCRATCH");
    if (env && atol(env) > 0) want = (size_t)atol(env);
    return seg_bytes < want ? seg_bytes : want;
}

static int check_usable(tr_coll *c, const char *what)
{
    if (c->broken)
        return HF_ESTATE;   /* message of the first error stays in c->err */
    (void)what;
    return 0;
}

/* ---- collectives (tcp) -------------------------------------------------- */

static void seg_bounds(size_t n, int p, int i, size_t *off, size_t *cnt)
{
    size_t base = n / (size_t)p, rem = n % (size_t)p;
    *off = (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
    *cnt = base + ((size_t)i < rem ? 1 : 0);
}

static int ring_allreduce(tr_coll *c, float *buf, size_t n, const stream_op *o)
{
    int p = c->world, r = c->rank;
    int next = (r + 1) % p, prev = (r + p - 1) % p;
    int ns = 2 * (p - 1);
    step *st = calloc((size_t)ns, sizeof *st);
    if (!st) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    size_t maxseg = n / (size_t)p + 1;
    int rc = scratch_ensure(c, scratch_size(c, maxseg * 4));
    if (rc) goto end;
    for (int s = 0; s < ns; s++) {
        int sseg = ((r - s) % p + p) % p, rseg = ((r - s - 1) % p + p) % p;
        size_t off, cnt;
        seg_bounds(n, p, sseg, &off, &cnt);
        st[s].send_peer = next;
        st[s].sptr = (const char *)(buf + off);
        st[s].slen = cnt * 4;
        st[s].gate = s - 1;
        seg_bounds(n, p, rseg, &off, &cnt);
        st[s].recv_peer = prev;
        st[s].rptr = (char *)(buf + off);
        st[s].rlen = cnt * 4;
        st[s].reduce = s < p - 1;
    }
    rc = stream_run(c, o, st, ns);
end:
    free(st);
    return rc;
}

/*
 * Direct (pairwise) reduce-scatter + allgather: rank r owns segment r; at
 * step k it sends segment r+k to rank r+k and adds rank r-k's copy of
 * segment r into its own; then it sends its finished segment to every
 * other rank and receives theirs. The same bytes per rank as the ring, but
 * no forwarding chain: everything a rank sends in the first half is ready
 * at once, which helps when ranks outnumber cores and run in turns. The
 * allgather sends are gated byte by byte on the last reduce step (steps
 * are received in order, so its progress means every earlier one is done).
 */
static int pairwise_allreduce(tr_coll *c, float *buf, size_t n, const stream_op *o)
{
    int p = c->world, r = c->rank;
    int ns = 2 * (p - 1);
    step *st = calloc((size_t)ns, sizeof *st);
    if (!st) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    size_t maxseg = n / (size_t)p + 1;
    int rc = scratch_ensure(c, scratch_size(c, maxseg * 4));
    if (rc) goto end;
    size_t moff, mcnt;
    seg_bounds(n, p, r, &moff, &mcnt);
    for (int k = 1; k < p; k++) {
        int to = (r + k) % p, from = (r - k + p) % p;
        size_t off, cnt;
        seg_bounds(n, p, to, &off, &cnt);
        st[k - 1] = (step){.send_peer = to, .sptr = (const char *)(buf + off), .slen = cnt * 4, .gate = -1,
                           .recv_peer = from, .rptr = (char *)(buf + moff), .rlen = mcnt * 4, .reduce = 1};
        seg_bounds(n, p, from, &off, &cnt);
        st[p - 2 + k] = (step){.send_peer = to, .sptr = (const char *)(buf + moff), .slen = mcnt * 4,
                               .gate = p - 2, .recv_peer = from, .rptr = (char *)(buf + off),
                               .rlen = cnt * 4, .reduce = 0};
    }
    rc = stream_run(c, o, st, ns);
end:
    free(st);
    return rc;
}

/* Exchange with one partner: send sbuf, receive into rbuf (same length). */
static int xchg(tr_coll *c, const stream_op *o, int stepno, int sp, const void *sbuf, size_t slen,
                int rp, void *rbuf, size_t rlen)
{
    /* the step number in the header is checked; pad earlier steps as absent */
    step st[1] = {{.send_peer = sp, .sptr = sbuf, .slen = slen, .gate = -1,
                   .recv_peer = rp, .rptr = rbuf, .rlen = rlen, .reduce = 0}};
    (void)stepno;
    return stream_run(c, o, st, 1);
}

/*
 * Recursive doubling (MPICH's algorithm for non-powers of two: the first
 * 2*(p - pof2) ranks pair up, the even one hands its vector to the odd one
 * and sits out, then pof2 ranks double, then the result is handed back).
 */
static int doubling_allreduce(tr_coll *c, float *buf, size_t n, const stream_op *o)
{
    int p = c->world, r = c->rank, rc = 0;
    int pof2 = 1;
    while (pof2 * 2 <= p) pof2 *= 2;
    int rem = p - pof2;
    size_t bytes = n * 4;
    float *tmp = malloc(bytes ? bytes : 4);
    if (!tmp) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    int newrank;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            if ((rc = xchg(c, o, 0, r + 1, buf, bytes, -1, NULL, 0))) goto end;
            newrank = -1;
        } else {
            if ((rc = xchg(c, o, 0, -1, NULL, 0, r - 1, tmp, bytes))) goto end;
            add_floats(buf, tmp, n);
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }
    if (newrank >= 0) {
        for (int mask = 1; mask < pof2; mask <<= 1) {
            int nd = newrank ^ mask;
            int dst = nd < rem ? nd * 2 + 1 : nd + rem;
            if ((rc = xchg(c, o, 0, dst, buf, bytes, dst, tmp, bytes))) goto end;
            /* a+b == b+a exactly, so both partners hold identical sums */
            add_floats(buf, tmp, n);
        }
    }
    if (r < 2 * rem) {
        if (r % 2) rc = xchg(c, o, 0, r - 1, buf, bytes, -1, NULL, 0);
        else rc = xchg(c, o, 0, -1, NULL, 0, r + 1, buf, bytes);
    }
end:
    free(tmp);
    return rc;
}

static int tcp_allreduce(tr_coll *c, float *buf, size_t n, int redop, char algo)
{
    stream_op o = {.op = OP_ALLREDUCE, .seq = c->seq++, .bytes = (uint64_t)n * 4, .aux = (uint32_t)redop};
    int rc = 0;
    if (c->world > 1 && n > 0) {
        if (!algo) algo = n * 4 >= c->small_bytes && n >= (size_t)c->world ? c->large_algo : 'd';
        c->spin_now = algo == 'r' || algo == 'p';
        if (algo == 'r') rc = ring_allreduce(c, buf, n, &o);
        else if (algo == 'p') rc = pairwise_allreduce(c, buf, n, &o);
        else rc = doubling_allreduce(c, buf, n, &o);
        c->spin_now = 0;
    }
    if (!rc && redop == TR_COLL_AVG && c->world > 1) {
        float inv = 1.0f / (float)c->world;
        for (size_t i = 0; i < n; i++) buf[i] *= inv;
    }
    return rc;
}

int tr_coll_allreduce_algo(tr_coll *c, float *buf, size_t n, int redop, char algo)
{
    int rc = check_usable(c, "allreduce");
    if (rc) return rc;
    if (redop != TR_COLL_SUM && redop != TR_COLL_AVG) return HF_EINVAL;
    if (c->backend == TR_COLL_MPI) return tr_coll_mpi_allreduce(c, buf, n, redop);
    if (c->backend == TR_COLL_NCCL) return tr_coll_nccl_allreduce(c, buf, n, redop);
    return tcp_allreduce(c, buf, n, redop, algo);
}

int tr_coll_allreduce(tr_coll *c, float *buf, size_t n, int redop)
{
    return tr_coll_allreduce_algo(c, buf, n, redop, 0);
}

int tr_coll_broadcast(tr_coll *c, void *buf, size_t bytes, int root)
{
    int rc = check_usable(c, "broadcast");
    if (rc) return rc;
    if (root < 0 || root >= c->world) return HF_EINVAL;
    if (c->backend == TR_COLL_MPI) return tr_coll_mpi_broadcast(c, buf, bytes, root);
    if (c->backend == TR_COLL_NCCL) return tr_coll_nccl_broadcast(c, buf, bytes, root);
    stream_op o = {.op = OP_BCAST, .seq = c->seq++, .bytes = bytes, .aux = (uint32_t)root};
    if (c->world == 1) return 0;
    /* chain root -> root+1 -> ...: each rank forwards bytes as they arrive */
    int p = c->world, r = c->rank;
    int next = (r + 1) % p, prev = (r + p - 1) % p;
    step st = {.send_peer = next == root ? -1 : next, .sptr = buf, .slen = bytes,
               .gate = r == root ? -1 : 0, .recv_peer = r == root ? -1 : prev,
               .rptr = buf, .rlen = bytes, .reduce = 0};
    return stream_run(c, &o, &st, 1);
}

int tr_coll_allgather(tr_coll *c, const void *send, void *recv, size_t bytes)
{
    int rc = check_usable(c, "allgather");
    if (rc) return rc;
    if (c->backend == TR_COLL_MPI) return tr_coll_mpi_allgather(c, send, recv, bytes);
    int p = c->world, r = c->rank;
    char *out = recv;
    if (send != out + (size_t)r * bytes) memmove(out + (size_t)r * bytes, send, bytes);
    /* nccl: allgather runs on the tcp mesh, which stays up beside it */
    stream_op o = {.op = OP_ALLGATHER, .seq = c->seq++, .bytes = bytes * (uint64_t)p, .aux = 0};
    if (p == 1) return 0;
    int next = (r + 1) % p, prev = (r + p - 1) % p;
    int ns = p - 1;
    step *st = calloc((size_t)ns, sizeof *st);
    if (!st) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    for (int s = 0; s < ns; s++) {
        int sb = ((r - s) % p + p) % p, rb = ((r - s - 1) % p + p) % p;
        st[s] = (step){.send_peer = next, .sptr = out + (size_t)sb * bytes, .slen = bytes,
                       .gate = s - 1, .recv_peer = prev, .rptr = out + (size_t)rb * bytes,
                       .rlen = bytes, .reduce = 0};
    }
    rc = stream_run(c, &o, st, ns);
    free(st);
    return rc;
}

int tr_coll_barrier(tr_coll *c)
{
    int rc = check_usable(c, "barrier");
    if (rc) return rc;
    if (c->backend == TR_COLL_MPI) return tr_coll_mpi_barrier(c);
    stream_op o = {.op = OP_BARRIER, .seq = c->seq++, .bytes = 4, .aux = 0};
    if (c->world == 1) return 0;
    float one = 1.0f;
    rc = doubling_allreduce(c, &one, 1, &o);
    if (!rc && one != (float)c->world)
        rc = tr_coll_fail(c, HF_EPEER, "barrier seq %u: counted %g ranks, expected %d", o.seq,
                          (double)one, c->world);
    return rc;
}

/* ---- point to point ------------------------------------------------------ */

int tr_coll_send(tr_coll *c, int peer, int tag, const void *buf, size_t bytes)
{
    int rc = check_usable(c, "send");
    if (rc) return rc;
    if (c->backend != TR_COLL_TCP && !c->peers) return HF_EUNSUP;
    if (peer < 0 || peer >= c->world || peer == c->rank || tag < 0 || bytes > UINT32_MAX)
        return HF_EINVAL;
    stream_op o = {.op = OP_P2P, .seq = c->peers[peer].tx_seq++, .bytes = bytes, .aux = (uint32_t)tag};
    step st = {.send_peer = peer, .sptr = buf, .slen = bytes, .gate = -1, .recv_peer = -1};
    return stream_run(c, &o, &st, 1);
}

int tr_coll_recv(tr_coll *c, int peer, int tag, void *buf, size_t max, int *tag_out, size_t *got)
{
    int rc = check_usable(c, "recv");
    if (rc) return rc;
    if (c->backend != TR_COLL_TCP && !c->peers) return HF_EUNSUP;
    if (peer < 0 || peer >= c->world || peer == c->rank) return HF_EINVAL;
    tr_peer *pe = &c->peers[peer];
    wire_hdr h;
    uint32_t seq = pe->rx_seq++;
    /* read the header first: the message length is the sender's to choose */
    int64_t deadline = hf_mono_ms() + c->timeout_ms;
    rc = io_full(pe->fd, &h, sizeof h, 0, deadline);
    if (rc == HF_ETIMEOUT)
        return tr_coll_fail(c, rc, "message seq %u: no data from rank %d (%s) for %d ms (timeout)",
                            seq, peer, pe->addr, c->timeout_ms);
    if (rc)
        return tr_coll_fail(c, rc, "message seq %u: rank %d (%s) closed the connection (died?)",
                            seq, peer, pe->addr);
    if (h.magic != HDR_MAGIC || h.op != OP_P2P || h.seq != seq || h.src != (uint32_t)peer ||
        h.len != h.bytes)
        return tr_coll_fail(c, HF_EPEER,
                            "message seq %u from rank %d (%s): peer is in %s seq %u instead",
                            seq, peer, pe->addr, op_name(h.op), h.seq);
    if ((tag >= 0 && h.aux != (uint32_t)tag) || h.bytes > max)
        return tr_coll_fail(c, HF_EPEER,
                            "message seq %u from rank %d (%s): tag %u, %llu bytes; expected tag %d, "
                            "at most %zu bytes",
                            seq, peer, pe->addr, h.aux, (unsigned long long)h.bytes, tag, max);
    /* the body: stream_run with a header-less receive would re-check; read directly,
     * resetting the deadline whenever bytes move */
    char *p = buf;
    size_t left = (size_t)h.bytes;
    int64_t last = hf_mono_ms();
    while (left) {
        ssize_t k = recv(pe->fd, p, left, 0);
        if (k > 0) { p += k; left -= (size_t)k; last = hf_mono_ms(); continue; }
        if (k == 0)
            return tr_coll_fail(c, HF_ECONN, "message seq %u: rank %d (%s) closed the connection (died?)",
                                seq, peer, pe->addr);
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return tr_coll_fail(c, HF_ECONN, "message seq %u: rank %d (%s): %s", seq, peer, pe->addr,
                                strerror(errno));
        int64_t wait = last + c->timeout_ms - hf_mono_ms();
        if (wait <= 0)
            return tr_coll_fail(c, HF_ETIMEOUT, "message seq %u: no data from rank %d (%s) for %d ms (timeout)",
                                seq, peer, pe->addr, c->timeout_ms);
        struct pollfd pf = {.fd = pe->fd, .events = POLLIN};
        poll(&pf, 1, (int)wait);
    }
    if (tag_out) *tag_out = (int)h.aux;
    if (got) *got = (size_t)h.bytes;
    return 0;
}

int tr_coll_wait_any(tr_coll *c, const int *peers, int n, int wait_ms, int *ready)
{
    int rc = check_usable(c, "wait");
    if (rc) return rc;
    if (n <= 0 || n > c->world) return HF_EINVAL;
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    if (!pf) return HF_ENOMEM;
    if (wait_ms < 0) wait_ms = c->timeout_ms;
    for (int i = 0; i < n; i++) {
        if (peers[i] < 0 || peers[i] >= c->world || peers[i] == c->rank) { rc = HF_EINVAL; goto end; }
        pf[i] = (struct pollfd){.fd = c->peers[peers[i]].fd, .events = POLLIN};
    }
    int64_t deadline = hf_mono_ms() + wait_ms;
    for (;;) {
        int64_t left = deadline - hf_mono_ms();
        if (left < 0) left = 0;
        int k = poll(pf, (nfds_t)n, (int)left);
        if (k > 0) {
            for (int j = 0; j < n; j++) {
                int i = (c->rr + j) % n;
                if (pf[i].revents) {
                    *ready = peers[i];
                    c->rr = (i + 1) % n;
                    goto end;
                }
            }
        }
        if (k < 0 && errno != EINTR) { rc = tr_coll_fail(c, HF_EIO, "poll: %s", strerror(errno)); goto end; }
        if (k == 0) {
            rc = HF_ETIMEOUT;   /* not an error of the communicator: caller decides */
            snprintf(c->err, sizeof c->err, "no message from any of %d peers for %d ms", n, wait_ms);
            goto end;
        }
    }
end:
    free(pf);
    return rc;
}

/* ---- rendezvous ----------------------------------------------------------- */

typedef struct hello {
    uint32_t magic;
    uint32_t rank;
    uint32_t world;
    uint32_t port;      /* its listener's port (0: none) */
} hello;

typedef struct table_hdr {
    uint32_t magic;
    uint32_t world;
} table_hdr;

typedef struct table_ent {
    char addr[80];
} table_ent;

static int rendezvous(tr_coll *c, const tr_coll_config *cfg)
{
    int p = c->world, r = c->rank, rc = 0;
    int64_t deadline = hf_mono_ms() + c->timeout_ms;
    int lfd = -1;
    table_ent *tab = calloc((size_t)p, sizeof *tab);
    if (!tab) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    char mhost[256], mport[32];
    if (addr_split(cfg->master, mhost, sizeof mhost, mport, sizeof mport)) {
        rc = tr_coll_fail(c, HF_EINVAL, "bad master address '%s' (want host:port)", cfg->master);
        goto end;
    }
    snprintf(c->peers[0].addr, sizeof c->peers[0].addr, "%s", cfg->master);

    if (r == 0) {
        lfd = cfg->master_fd >= 0 ? cfg->master_fd : listen_on(mhost, mport);
        if (lfd < 0) {
            rc = tr_coll_fail(c, HF_EIO, "rank 0 cannot listen on %s: %s", cfg->master, strerror(errno));
            goto end;
        }
        sock_nonblock(lfd);
        snprintf(tab[0].addr, sizeof tab[0].addr, "%s", cfg->master);
        for (int got = 1; got < p;) {
            int64_t left = deadline - hf_mono_ms();
            struct pollfd pf = {.fd = lfd, .events = POLLIN};
            if (left <= 0 || poll(&pf, 1, (int)left) == 0) {
                char missing[256] = "";
                size_t ml = 0;
                for (int i = 1; i < p && ml + 16 < sizeof missing; i++)
                    if (c->peers[i].fd < 0) ml += (size_t)snprintf(missing + ml, sizeof missing - ml, " %d", i);
                rc = tr_coll_fail(c, HF_ETIMEOUT,
                                  "rendezvous at %s: ranks%s did not connect within %d ms (timeout)",
                                  cfg->master, missing, c->timeout_ms);
                goto end;
            }
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) continue;
            sock_tune(fd);
            hello h;
            char from[80];
            addr_format(&ss, from, sizeof from);
            if (io_full(fd, &h, sizeof h, 0, hf_mono_ms() + 5000) || h.magic != HELLO_MAGIC) {
                hf_warn("rendezvous: ignoring a connection from %s that is not a hyperfarm rank", from);
                close(fd);
                continue;
            }
            if (h.world != (uint32_t)p || h.rank == 0 || h.rank >= (uint32_t)p || c->peers[h.rank].fd >= 0) {
                close(fd);
                rc = tr_coll_fail(c, HF_EPEER,
                                  "rendezvous: %s claims rank %u of world %u, but this job has world %d%s",
                                  from, h.rank, h.world, p,
                                  h.rank < (uint32_t)p && h.rank && c->peers[h.rank].fd >= 0
                                      ? " and that rank already joined" : "");
                goto end;
            }
            c->peers[h.rank].fd = fd;
            /* the host as rank 0 sees it, the port the rank listens on */
            char host[INET6_ADDRSTRLEN + 2] = "?";
            char *colon = strrchr(from, ':');
            if (colon) { size_t hl = (size_t)(colon - from); if (hl < sizeof host) { memcpy(host, from, hl); host[hl] = 0; } }
            /* the last rank has no listener: name it by its connection's address */
            if (h.port) snprintf(tab[h.rank].addr, sizeof tab[h.rank].addr, "%s:%u", host, h.port);
            else snprintf(tab[h.rank].addr, sizeof tab[h.rank].addr, "%s", from);
            got++;
        }
        table_hdr th = {.magic = TABLE_MAGIC, .world = (uint32_t)p};
        for (int i = 1; i < p; i++) {
            if ((rc = io_full(c->peers[i].fd, &th, sizeof th, 1, deadline)) ||
                (rc = io_full(c->peers[i].fd, tab, sizeof *tab * (size_t)p, 1, deadline))) {
                rc = tr_coll_fail(c, HF_ECONN, "rendezvous: rank %d (%s) went away", i, tab[i].addr);
                goto end;
            }
        }
        for (int i = 1; i < p; i++)
            snprintf(c->peers[i].addr, sizeof c->peers[i].addr, "%s", tab[i].addr);
    } else {
        /* my own listener for higher ranks, on the interface that reaches master */
        int mfd = connect_retry(cfg->master, deadline);
        if (mfd < 0) {
            rc = tr_coll_fail(c, mfd == HF_EINVAL ? HF_EINVAL : HF_ETIMEOUT,
                              "rank %d cannot reach master %s within %d ms", r, cfg->master, c->timeout_ms);
            goto end;
        }
        sock_tune(mfd);
        sock_nonblock(mfd);
        c->peers[0].fd = mfd;
        struct sockaddr_storage me;
        socklen_t ml = sizeof me;
        char myhost[80] = "0.0.0.0";
        if (getsockname(mfd, (struct sockaddr *)&me, &ml) == 0) {
            char tmp[80];
            addr_format(&me, tmp, sizeof tmp);
            char *colon = strrchr(tmp, ':');
            if (colon) *colon = 0;
            char *h = tmp;
            if (*h == '[') { h++; h[strlen(h) - 1] = 0; }
            snprintf(myhost, sizeof myhost, "%s", h);
        }
        hello h = {.magic = HELLO_MAGIC, .rank = (uint32_t)r, .world = (uint32_t)p, .port = 0};
        if (r < p - 1) {
            lfd = listen_on(myhost, "0");
            if (lfd < 0) { rc = tr_coll_fail(c, HF_EIO, "rank %d cannot listen on %s", r, myhost); goto end; }
            struct sockaddr_storage ls;
            socklen_t ll = sizeof ls;
            getsockname(lfd, (struct sockaddr *)&ls, &ll);
            h.port = ls.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ls)->sin6_port)
                                              : ntohs(((struct sockaddr_in *)&ls)->sin_port);
            sock_nonblock(lfd);
        }
        table_hdr th;
        if (io_full(mfd, &h, sizeof h, 1, deadline) || io_full(mfd, &th, sizeof th, 0, deadline) ||
            th.magic != TABLE_MAGIC || th.world != (uint32_t)p ||
            io_full(mfd, tab, sizeof *tab * (size_t)p, 0, deadline)) {
            rc = tr_coll_fail(c, HF_ECONN,
                              "rank %d: rendezvous with master %s failed (master gone, timed out, or "
                              "world size differs)", r, cfg->master);
            goto end;
        }
        for (int i = 0; i < p; i++) {
            tab[i].addr[sizeof tab[i].addr - 1] = 0;
            if (i) snprintf(c->peers[i].addr, sizeof c->peers[i].addr, "%s", tab[i].addr);
        }
        /* connect to every 0 < i < r (their listeners queue us), then accept r < j < p */
        for (int i = 1; i < r; i++) {
            int fd = connect_retry(tab[i].addr, deadline);
            if (fd < 0) { rc = tr_coll_fail(c, HF_ETIMEOUT, "rank %d cannot connect to rank %d (%s)", r, i, tab[i].addr); goto end; }
            sock_tune(fd);
            sock_nonblock(fd);
            c->peers[i].fd = fd;
            if (io_full(fd, &h, sizeof h, 1, deadline)) {
                rc = tr_coll_fail(c, HF_ECONN, "rank %d (%s) went away during rendezvous", i, tab[i].addr);
                goto end;
            }
        }
        for (int got = r + 1; got < p;) {
            int64_t left = deadline - hf_mono_ms();
            struct pollfd pf = {.fd = lfd, .events = POLLIN};
            if (left <= 0 || poll(&pf, 1, (int)left) == 0) {
                rc = tr_coll_fail(c, HF_ETIMEOUT, "rank %d: higher ranks did not connect within %d ms", r,
                                  c->timeout_ms);
                goto end;
            }
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd < 0) continue;
            sock_tune(fd);
            hello hh;
            if (io_full(fd, &hh, sizeof hh, 0, deadline) || hh.magic != HELLO_MAGIC ||
                hh.world != (uint32_t)p || hh.rank <= (uint32_t)r || hh.rank >= (uint32_t)p ||
                c->peers[hh.rank].fd >= 0) {
                close(fd);
                continue;
            }
            c->peers[hh.rank].fd = fd;
            got++;
        }
    }
    snprintf(c->peers[0].addr, sizeof c->peers[0].addr, "%s", cfg->master);
end:
    if (lfd >= 0 && lfd != cfg->master_fd) close(lfd);
    free(tab);
    return rc;
}

/* ---- open / close ----------------------------------------------------------- */

int tr_coll_open(const tr_coll_config *cfg, tr_coll **out, char *errbuf, size_t errlen)
{
    int rc = 0;
    *out = NULL;
    tr_coll *c = calloc(1, sizeof *c);
    if (!c) return HF_ENOMEM;
    /* nccl rides on the tcp mesh until its own communicator is up */
    c->backend = cfg->backend == TR_COLL_NCCL ? TR_COLL_TCP : cfg->backend;
    c->rank = cfg->rank;
    c->world = cfg->world;
    c->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
    c->small_bytes = cfg->small_bytes ? cfg->small_bytes : DEF_SMALL;
    c->chunk = DEF_CHUNK;
    c->large_algo = 'r';
    if (getenv("HF_COLL_ALGO") && (getenv("HF_COLL_ALGO")[0] == 'p' || getenv("HF_COLL_ALGO")[0] == 'r'))
        c->large_algo = getenv("HF_COLL_ALGO")[0];
    if (getenv("HF_COLL_CHUNK")) tr_coll_tune(c, (size_t)atol(getenv("HF_COLL_CHUNK")), 0);
    /* Busy-polling (up to 200 us before sleeping in poll()) between the
     * chunks of a large allreduce pays when every rank has a core: a sleep
     * and wake-up per chunk costs more than the wait. With more ranks than
     * cores it would take the peers' CPU, so it is off then (and on other
     * hosts' ranks counted as local: conservative). HF_COLL_SPIN_US sets it. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    c->spin_us = ncpu > 0 && c->world <= ncpu ? 200 : 0;
    if (getenv("HF_COLL_SPIN_US")) c->spin_us = atoi(getenv("HF_COLL_SPIN_US"));
    c->seq = 1;
    if (c->backend == TR_COLL_MPI) {
        rc = tr_coll_mpi_open(c);
        goto end;
    }
    if (c->world < 1 || c->world > MAX_WORLD || c->rank < 0 || c->rank >= c->world) {
        rc = tr_coll_fail(c, HF_EINVAL, "bad rank %d / world %d", c->rank, c->world);
        goto end;
    }
    c->peers = calloc((size_t)c->world, sizeof *c->peers);
    if (!c->peers) { rc = HF_ENOMEM; goto end; }
    for (int i = 0; i < c->world; i++) c->peers[i].fd = -1;
    snprintf(c->peers[c->rank].addr, sizeof c->peers[c->rank].addr, "self");
    if (c->world > 1) {
        if (!cfg->master) {
            rc = tr_coll_fail(c, HF_EINVAL, "no master address for a world of %d", c->world);
            goto end;
        }
        if ((rc = rendezvous(c, cfg))) goto end;
        c->seq = 0;   /* the joining barrier is seq 0: users' collectives count from 1 */
        rc = tr_coll_barrier(c);
        if (rc) goto end;
    }
    if (cfg->backend == TR_COLL_NCCL) {
        if ((rc = tr_coll_nccl_open(c, cfg->nccl_device))) goto end;
        c->backend = TR_COLL_NCCL;
    }
end:
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
    if (c->backend == TR_COLL_MPI) tr_coll_mpi_close(c);
    tr_coll_nccl_close(c);
    if (c->peers)
        for (int i = 0; i < c->world; i++)
            if (c->peers[i].fd >= 0) close(c->peers[i].fd);
    free(c->peers);
    free(c->scratch);
    free(c);
}
