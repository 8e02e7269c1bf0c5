/*
 * coll_tcp.c — the embedded tcp backend of coll.h: a pipelined ring
 * allreduce, pairwise and recursive-doubling allreduce, chain broadcast,
 * ring allgather, barrier and point-to-point messages over the full mesh
 * of connections that the rendezvous (coll_rdv.c) built.
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

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HDR_MAGIC   0x31434648u   /* "HFC1" */
#define MAX_WORLD   4096

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

/* Where stream_run is: the current send and receive steps and the offsets
 * in their streams (header included). */
typedef struct stream_pos {
    int      si, ri;        /* current send / recv step */
    size_t   soff, roff;    /* offsets in the step's stream */
    size_t   rdone;         /* payload bytes of recv step ri fully processed */
    size_t  *done;          /* [nsteps] processed payload per recv step */
    wire_hdr shdr, rhdr;
} stream_pos;

enum { HL = sizeof(wire_hdr) };

/* After send() or recv() returned -1 for peer: RET 1 to retry (EINTR), 0
 * when the socket is full or empty (*blocked set), else HF_ECONN with
 * "op seq N: <what> rank R (addr): <errno text><tail>" recorded. */
static int io_failed(tr_coll *c, const stream_op *o, const char *what, int peer, const char *tail, int *blocked)
{
    if (errno == EINTR) return 1;
    if (errno == EAGAIN || errno == EWOULDBLOCK) { *blocked = 1; return 0; }
    return tr_coll_fail(c, HF_ECONN, "%s seq %u: %s rank %d (%s): %s%s", op_name(o->op), o->seq, what, peer,
                        c->peers[peer].addr, strerror(errno), tail);
}

static void skip_idle(const step *steps, int nsteps, stream_pos *sp)
{
    while (sp->si < nsteps && steps[sp->si].send_peer < 0) sp->si++;
    while (sp->ri < nsteps && steps[sp->ri].recv_peer < 0) sp->ri++;
}

/* Receive at most one chunk of the current recv step (header, then payload
 * straight into place or through the scratch ring and added in).
 * OUT *moved: bytes came; *blocked: the socket had nothing. RET 0 or HF_E*. */
static int stream_recv(tr_coll *c, const stream_op *o, step *steps, int nsteps, stream_pos *sp, int *moved,
                       int *blocked)
{
    while (sp->ri < nsteps) {
        step *st = &steps[sp->ri];
        int fd = c->peers[st->recv_peer].fd;
        char *dst;
        size_t want;
        if (sp->roff < HL) {
            dst = (char *)&sp->rhdr + sp->roff;
            want = HL - sp->roff;
        } else if (st->reduce) {
            size_t pos = (sp->roff - HL) % c->scratch_len;
            dst = c->scratch + pos;
            want = st->rlen - (sp->roff - HL);
            if (want > c->scratch_len - pos) want = c->scratch_len - pos;
        } else {
            dst = st->rptr + (sp->roff - HL);
            want = st->rlen - (sp->roff - HL);
        }
        if (want > c->chunk) want = c->chunk;
        ssize_t k = want ? recv(fd, dst, want, 0) : 0;
        if (want && k == 0)
            return tr_coll_fail(c, HF_ECONN, "%s seq %u: rank %d (%s) closed the connection (died?)",
                                op_name(o->op), o->seq, st->recv_peer, c->peers[st->recv_peer].addr);
        if (k < 0) {
            int rc = io_failed(c, o, "receiving from", st->recv_peer, "", blocked);
            if (rc > 0) continue;
            return rc;
        }
        size_t before = sp->roff;
        sp->roff += (size_t)k;
        *moved = 1;
        int rc;
        if (before < HL && sp->roff == HL && (rc = hdr_check(c, o, sp->ri, st, &sp->rhdr))) return rc;
        if (sp->roff > HL) {
            size_t got = sp->roff - HL;
            if (st->reduce) {
                size_t upto = got == st->rlen ? got : got & ~(size_t)3;
                if (upto > sp->rdone) {
                    size_t pos = sp->rdone % c->scratch_len;
                    add_floats((float *)(st->rptr + sp->rdone), (const float *)(c->scratch + pos),
                               (upto - sp->rdone) / 4);
                    sp->rdone = upto;
                }
            } else {
                sp->rdone = got;
            }
            sp->done[sp->ri] = sp->rdone;
        }
        if (sp->roff == HL + st->rlen) {
            sp->done[sp->ri] = st->rlen;
            sp->ri++;
            sp->roff = 0;
            sp->rdone = 0;
            while (sp->ri < nsteps && steps[sp->ri].recv_peer < 0) sp->ri++;
        }
        if ((size_t)k < want) *blocked = 1;
        /* one chunk at a time: let the sender forward what just arrived */
        return 0;
    }
    return 0;
}

/* Send at most one chunk of the current send step, as far as its gate
 * allows. OUT *moved, *blocked as stream_recv. RET 0 or HF_E*. */
static int stream_send(tr_coll *c, const stream_op *o, const step *steps, int nsteps, stream_pos *sp, int *moved,
                       int *blocked)
{
    while (sp->si < nsteps) {
        const step *st = &steps[sp->si];
        int fd = c->peers[st->send_peer].fd;
        size_t avail = st->slen;
        if (st->gate >= 0) {
            avail = st->gate < sp->ri ? steps[st->gate].rlen : st->gate == sp->ri ? sp->done[sp->ri] : 0;
            if (avail > st->slen) avail = st->slen;
        }
        const char *src;
        size_t want;
        if (sp->soff == 0) hdr_fill(&sp->shdr, c, o, sp->si, st->slen);
        if (sp->soff < HL) {
            src = (const char *)&sp->shdr + sp->soff;
            want = HL - sp->soff;
        } else {
            src = st->sptr + (sp->soff - HL);
            want = avail > sp->soff - HL ? avail - (sp->soff - HL) : 0;
        }
        if (want > c->chunk) want = c->chunk;
        if (!want) return 0;   /* gated: wait for the receive side */
        ssize_t k = send(fd, src, want, MSG_NOSIGNAL);
        if (k < 0) {
            int rc = io_failed(c, o, "sending to", st->send_peer, " (died?)", blocked);
            if (rc > 0) continue;
            return rc;
        }
        sp->soff += (size_t)k;
        *moved = 1;
        if (sp->soff == HL + st->slen) {
            sp->si++;
            sp->soff = 0;
            while (sp->si < nsteps && steps[sp->si].send_peer < 0) sp->si++;
        }
        if ((size_t)k < want) *blocked = 1;
        return 0;
    }
    return 0;
}

/* Nothing moved: wait (spinning first when c->spin_now) until a socket is
 * ready, or fail when nothing moved since last for timeout_ms. */
static int stream_wait(tr_coll *c, const stream_op *o, const step *steps, int nsteps, const stream_pos *sp,
                       int sblocked, int64_t last)
{
    struct pollfd pf[2];
    int np = 0;
    if (sp->ri < nsteps) pf[np++] = (struct pollfd){.fd = c->peers[steps[sp->ri].recv_peer].fd, .events = POLLIN};
    if (sp->si < nsteps && sblocked) {
        int fd = c->peers[steps[sp->si].send_peer].fd;
        if (np && pf[0].fd == fd) pf[0].events |= POLLOUT;
        else pf[np++] = (struct pollfd){.fd = fd, .events = POLLOUT};
    }
    int64_t left = last + c->timeout_ms - hf_mono_ms();
    if (left <= 0 || np == 0) {
        int who = sp->ri < nsteps ? steps[sp->ri].recv_peer : steps[sp->si].send_peer;
        const char *what = sp->ri < nsteps ? "no data from" : "cannot send to";
        return tr_coll_fail(c, HF_ETIMEOUT,
                            "%s seq %u: %s rank %d (%s) for %d ms (timeout): it is dead, stalled or "
                            "in a different collective",
                            op_name(o->op), o->seq, what, who, c->peers[who].addr, c->timeout_ms);
    }
    int pr = 0;
    if (c->spin_now && c->spin_us > 0) {   /* a peer on another core answers within microseconds */
        int64_t until = hf_mono_us() + c->spin_us;
        while ((pr = poll(pf, (nfds_t)np, 0)) == 0 && hf_mono_us() < until) {}
    }
    if (pr == 0) pr = poll(pf, (nfds_t)np, (int)left);
    if (pr < 0 && errno != EINTR) return tr_coll_fail(c, HF_EIO, "poll: %s", strerror(errno));
    return 0;
}

/*
 * Run the steps of one collective to completion. Receives of reduce steps
 * are staged through c->scratch (a ring of c->scratch_len bytes, a multiple
 * of 4) and added in as soon as whole floats are there.
 * RET 0 or HF_E* (message recorded).
 */
static int stream_run(tr_coll *c, const stream_op *o, step *steps, int nsteps)
{
    stream_pos sp = {0};
    int rc = 0;
    int64_t last = hf_mono_ms();
    sp.done = calloc((size_t)nsteps, sizeof *sp.done);
    if (!sp.done) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    for (;;) {
        skip_idle(steps, nsteps, &sp);
        if (sp.si >= nsteps && sp.ri >= nsteps) break;
        int moved = 0, sblocked = 0, rblocked = 0;
        if ((rc = stream_recv(c, o, steps, nsteps, &sp, &moved, &rblocked))) break;
        if ((rc = stream_send(c, o, steps, nsteps, &sp, &moved, &sblocked))) break;
        if (moved) { last = hf_mono_ms(); continue; }
        if ((rc = stream_wait(c, o, steps, nsteps, &sp, sblocked, last))) break;
    }
    free(sp.done);
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
    size_t want = c->scratch_want ? c->scratch_want : 2 * c->chunk;
    return seg_bytes < want ? seg_bytes : want;
}

/* ---- collectives (tcp) -------------------------------------------------- */

static void seg_bounds(size_t n, int p, int i, size_t *off, size_t *cnt)
{
    size_t base = n / (size_t)p, rem = n % (size_t)p;
    *off = (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
    *cnt = base + ((size_t)i < rem ? 1 : 0);
}

/* The 2(p-1) steps of a segmented allreduce of n floats, and scratch for
 * its largest segment. RET the steps (caller frees) or NULL (error recorded). */
static step *reduce_steps(tr_coll *c, size_t n)
{
    step *st = calloc((size_t)(2 * (c->world - 1)), sizeof *st);
    if (!st) {
        tr_coll_fail(c, HF_ENOMEM, "out of memory");
        return NULL;
    }
    size_t maxseg = n / (size_t)c->world + 1;
    if (scratch_ensure(c, scratch_size(c, maxseg * 4))) {
        free(st);
        return NULL;
    }
    return st;
}

static int ring_allreduce(tr_coll *c, float *buf, size_t n, const stream_op *o)
{
    int p = c->world, r = c->rank;
    int next = (r + 1) % p, prev = (r + p - 1) % p;
    int ns = 2 * (p - 1);
    step *st = reduce_steps(c, n);
    if (!st) return HF_ENOMEM;
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
    int rc = stream_run(c, o, st, ns);
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
    step *st = reduce_steps(c, n);
    if (!st) return HF_ENOMEM;
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
    int rc = stream_run(c, o, st, ns);
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
    if (!rc && redop == TR_COLL_AVG) tr_coll_scale_avg(c, buf, n);
    return rc;
}

int tr_coll_tcp_broadcast(tr_coll *c, void *buf, size_t bytes, int root)
{
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

int tr_coll_tcp_allgather(tr_coll *c, const void *send, void *recv, size_t bytes)
{
    int p = c->world, r = c->rank, rc;
    char *out = recv;
    if (send != out + (size_t)r * bytes) memmove(out + (size_t)r * bytes, send, bytes);
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

int tr_coll_tcp_barrier(tr_coll *c)
{
    stream_op o = {.op = OP_BARRIER, .seq = c->seq++, .bytes = 4, .aux = 0};
    if (c->world == 1) return 0;
    float one = 1.0f;
    int rc = doubling_allreduce(c, &one, 1, &o);
    if (!rc && one != (float)c->world)
        rc = tr_coll_fail(c, HF_EPEER, "barrier seq %u: counted %g ranks, expected %d", o.seq,
                          (double)one, c->world);
    return rc;
}

/* ---- point to point ------------------------------------------------------ */

int tr_coll_tcp_send(tr_coll *c, int peer, int tag, const void *buf, size_t bytes)
{
    stream_op o = {.op = OP_P2P, .seq = c->peers[peer].tx_seq++, .bytes = bytes, .aux = (uint32_t)tag};
    step st = {.send_peer = peer, .sptr = buf, .slen = bytes, .gate = -1, .recv_peer = -1};
    return stream_run(c, &o, &st, 1);
}

int tr_coll_tcp_recv(tr_coll *c, int peer, int tag, void *buf, size_t max, int *tag_out, size_t *got)
{
    tr_peer *pe = &c->peers[peer];
    wire_hdr h;
    uint32_t seq = pe->rx_seq++;
    /* read the header first: the message length is the sender's to choose */
    int64_t deadline = hf_mono_ms() + c->timeout_ms;
    int rc = tr_coll_io_full(pe->fd, &h, sizeof h, 0, deadline);
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

int tr_coll_tcp_wait_any(tr_coll *c, const int *peers, int n, int wait_ms, int *ready)
{
    int rc = 0;
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

/* ---- open ------------------------------------------------------------------ */

/* Check rank/world, then join the mesh; the joining barrier is seq 0, so
 * users' collectives count from 1. Also the first half of nccl's open. */
int tr_coll_tcp_open(tr_coll *c, const tr_coll_config *cfg)
{
    int rc;
    if (c->world < 1 || c->world > MAX_WORLD || c->rank < 0 || c->rank >= c->world)
        return tr_coll_fail(c, HF_EINVAL, "bad rank %d / world %d", c->rank, c->world);
    c->peers = calloc((size_t)c->world, sizeof *c->peers);
    if (!c->peers) return HF_ENOMEM;
    for (int i = 0; i < c->world; i++) c->peers[i].fd = -1;
    snprintf(c->peers[c->rank].addr, sizeof c->peers[c->rank].addr, "self");
    if (c->world == 1) return 0;
    if (!cfg->master) return tr_coll_fail(c, HF_EINVAL, "no master address for a world of %d", c->world);
    if ((rc = tr_coll_rendezvous(c, cfg))) return rc;
    c->seq = 0;
    return tr_coll_tcp_barrier(c);
}

const tr_coll_ops tr_coll_tcp_ops = {
    .backend = TR_COLL_TCP, .open = tr_coll_tcp_open, .close = NULL,
    .allreduce = tcp_allreduce, .broadcast = tr_coll_tcp_broadcast,
    .allgather = tr_coll_tcp_allgather, .barrier = tr_coll_tcp_barrier,
    .send = tr_coll_tcp_send, .recv = tr_coll_tcp_recv, .wait_any = tr_coll_tcp_wait_any,
};
