/*
 * coll_rdv.c — how the ranks of a tcp (or nccl) job find each other: the
 * rendezvous at the master address and the socket helpers it needs.
 *
 * Rank 0 listens at the master address; every other rank connects there
 * and announces (rank, world size, the port of its own listener); rank 0
 * checks them (a rank that appears twice, or a different world size, is an
 * error naming the address) and sends the full address table back; rank j
 * then connects to every rank 0 < i < j and accepts every j < k < world,
 * so every pair of ranks shares one TCP connection (the link to rank 0 is
 * the rendezvous connection itself). The last rank has no listener.
 *
 * Every wait is bounded by the communicator's timeout; failures name the
 * ranks that did not show up, or the address at fault. Connections come
 * out non-blocking, TCP_NODELAY, with c->sockbuf socket buffers.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_MAGIC 0x4f4c4548u   /* "HELO" */
#define TABLE_MAGIC 0x4c424154u   /* "TABL" */

/* ---- sockets ----------------------------------------------------------- */

/* TCP_NODELAY (small collectives must not wait for Nagle) and large
 * socket buffers (sz bytes; <= 0: kernel autotuning), so a rank that is
 * descheduled for a moment does not stall its neighbours. */
static void sock_tune(int fd, int sz)
{
    int one = 1;
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

int tr_coll_io_full(int fd, void *buf, size_t len, int writing, int64_t deadline_ms)
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

/* Wait until lfd has a connection or deadline passes. RET 1 ready, 0 not. */
static int accept_ready(int lfd, int64_t deadline)
{
    int64_t left = deadline - hf_mono_ms();
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    return left > 0 && poll(&pf, 1, (int)left) != 0;
}

/* Rank 0, on timeout: "ranks 2 5 did not connect". */
static int fail_missing(tr_coll *c, const tr_coll_config *cfg)
{
    char missing[256] = "";
    size_t ml = 0;
    for (int i = 1; i < c->world && ml + 16 < sizeof missing; i++)
        if (c->peers[i].fd < 0) ml += (size_t)snprintf(missing + ml, sizeof missing - ml, " %d", i);
    return tr_coll_fail(c, HF_ETIMEOUT, "rendezvous at %s: ranks%s did not connect within %d ms (timeout)",
                        cfg->master, missing, c->timeout_ms);
}

/*
 * Rank 0: accept every other rank's hello on lfd and fill tab with the
 * address each one listens at. RET 0 or HF_E* (message recorded).
 */
static int master_gather(tr_coll *c, const tr_coll_config *cfg, int lfd, int64_t deadline, table_ent *tab)
{
    int p = c->world;
    for (int got = 1; got < p;) {
        if (!accept_ready(lfd, deadline)) return fail_missing(c, cfg);
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        sock_tune(fd, c->sockbuf);
        hello h;
        char from[80];
        addr_format(&ss, from, sizeof from);
        if (tr_coll_io_full(fd, &h, sizeof h, 0, hf_mono_ms() + 5000) || h.magic != HELLO_MAGIC) {
            hf_warn("rendezvous: ignoring a connection from %s that is not a hyperfarm rank", from);
            close(fd);
            continue;
        }
        if (h.world != (uint32_t)p || h.rank == 0 || h.rank >= (uint32_t)p || c->peers[h.rank].fd >= 0) {
            close(fd);
            return tr_coll_fail(c, HF_EPEER,
                                "rendezvous: %s claims rank %u of world %u, but this job has world %d%s",
                                from, h.rank, h.world, p,
                                h.rank < (uint32_t)p && h.rank && c->peers[h.rank].fd >= 0
                                    ? " and that rank already joined" : "");
        }
        c->peers[h.rank].fd = fd;
        /* the host as rank 0 sees it, the port the rank listens on */
        char host[INET6_ADDRSTRLEN + 2] = "?";
        char *colon = strrchr(from, ':');
        size_t hl = colon ? (size_t)(colon - from) : sizeof host;
        if (hl < sizeof host) {
            memcpy(host, from, hl);
            host[hl] = 0;
        }
        /* the last rank has no listener: name it by its connection's address */
        if (h.port) snprintf(tab[h.rank].addr, sizeof tab[h.rank].addr, "%s:%u", host, h.port);
        else snprintf(tab[h.rank].addr, sizeof tab[h.rank].addr, "%s", from);
        got++;
    }
    return 0;
}

/* Rank 0: listen (or use cfg->master_fd), gather the ranks, send the table.
 * *lfd receives the listener (closed by the caller unless it is cfg's). */
static int rdv_master(tr_coll *c, const tr_coll_config *cfg, const char *mhost, const char *mport,
                      int64_t deadline, table_ent *tab, int *lfd)
{
    int p = c->world, rc;
    *lfd = cfg->master_fd >= 0 ? cfg->master_fd : listen_on(mhost, mport);
    if (*lfd < 0)
        return tr_coll_fail(c, HF_EIO, "rank 0 cannot listen on %s: %s", cfg->master, strerror(errno));
    sock_nonblock(*lfd);
    snprintf(tab[0].addr, sizeof tab[0].addr, "%s", cfg->master);
    if ((rc = master_gather(c, cfg, *lfd, deadline, tab))) return rc;
    table_hdr th = {.magic = TABLE_MAGIC, .world = (uint32_t)p};
    for (int i = 1; i < p; i++) {
        if (tr_coll_io_full(c->peers[i].fd, &th, sizeof th, 1, deadline) ||
            tr_coll_io_full(c->peers[i].fd, tab, sizeof *tab * (size_t)p, 1, deadline))
            return tr_coll_fail(c, HF_ECONN, "rendezvous: rank %d (%s) went away", i, tab[i].addr);
    }
    for (int i = 1; i < p; i++)
        snprintf(c->peers[i].addr, sizeof c->peers[i].addr, "%s", tab[i].addr);
    return 0;
}

/* The local address of a connected socket, without the port ("0.0.0.0"
 * when unknown): where a rank's own listener must be to be reachable. */
static void local_host(int fd, char *out, size_t len)
{
    struct sockaddr_storage me;
    socklen_t ml = sizeof me;
    snprintf(out, len, "0.0.0.0");
    if (getsockname(fd, (struct sockaddr *)&me, &ml) == 0) {
        char tmp[80];
        addr_format(&me, tmp, sizeof tmp);
        char *colon = strrchr(tmp, ':');
        if (colon) *colon = 0;
        char *h = tmp;
        if (*h == '[') { h++; h[strlen(h) - 1] = 0; }
        snprintf(out, len, "%s", h);
    }
}

/* Rank r > 0: connect to every 0 < i < r (their listeners queue us), then
 * accept r < j < p on lfd. */
static int join_mesh(tr_coll *c, const hello *h, const table_ent *tab, int lfd, int64_t deadline)
{
    int p = c->world, r = c->rank;
    for (int i = 1; i < r; i++) {
        int fd = connect_retry(tab[i].addr, deadline);
        if (fd < 0) return tr_coll_fail(c, HF_ETIMEOUT, "rank %d cannot connect to rank %d (%s)", r, i, tab[i].addr);
        sock_tune(fd, c->sockbuf);
        sock_nonblock(fd);
        c->peers[i].fd = fd;
        if (tr_coll_io_full(fd, (void *)h, sizeof *h, 1, deadline))
            return tr_coll_fail(c, HF_ECONN, "rank %d (%s) went away during rendezvous", i, tab[i].addr);
    }
    for (int got = r + 1; got < p;) {
        if (!accept_ready(lfd, deadline))
            return tr_coll_fail(c, HF_ETIMEOUT, "rank %d: higher ranks did not connect within %d ms", r,
                                c->timeout_ms);
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        sock_tune(fd, c->sockbuf);
        hello hh;
        if (tr_coll_io_full(fd, &hh, sizeof hh, 0, deadline) || hh.magic != HELLO_MAGIC ||
            hh.world != (uint32_t)p || hh.rank <= (uint32_t)r || hh.rank >= (uint32_t)p ||
            c->peers[hh.rank].fd >= 0) {
            close(fd);
            continue;
        }
        c->peers[hh.rank].fd = fd;
        got++;
    }
    return 0;
}

/* Rank r > 0: reach the master, open a listener for higher ranks (on the
 * interface that reaches the master), announce it, receive the table,
 * then connect the mesh. *lfd receives the listener. */
static int rdv_join(tr_coll *c, const tr_coll_config *cfg, int64_t deadline, table_ent *tab, int *lfd)
{
    int p = c->world, r = c->rank;
    int mfd = connect_retry(cfg->master, deadline);
    if (mfd < 0)
        return tr_coll_fail(c, mfd == HF_EINVAL ? HF_EINVAL : HF_ETIMEOUT,
                            "rank %d cannot reach master %s within %d ms", r, cfg->master, c->timeout_ms);
    sock_tune(mfd, c->sockbuf);
    sock_nonblock(mfd);
    c->peers[0].fd = mfd;
    char myhost[80];
    local_host(mfd, myhost, sizeof myhost);
    hello h = {.magic = HELLO_MAGIC, .rank = (uint32_t)r, .world = (uint32_t)p, .port = 0};
    if (r < p - 1) {
        *lfd = listen_on(myhost, "0");
        if (*lfd < 0) return tr_coll_fail(c, HF_EIO, "rank %d cannot listen on %s", r, myhost);
        struct sockaddr_storage ls;
        socklen_t ll = sizeof ls;
        getsockname(*lfd, (struct sockaddr *)&ls, &ll);
        h.port = ls.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ls)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&ls)->sin_port);
        sock_nonblock(*lfd);
    }
    table_hdr th;
    if (tr_coll_io_full(mfd, &h, sizeof h, 1, deadline) || tr_coll_io_full(mfd, &th, sizeof th, 0, deadline) ||
        th.magic != TABLE_MAGIC || th.world != (uint32_t)p ||
        tr_coll_io_full(mfd, tab, sizeof *tab * (size_t)p, 0, deadline))
        return tr_coll_fail(c, HF_ECONN,
                            "rank %d: rendezvous with master %s failed (master gone, timed out, or "
                            "world size differs)", r, cfg->master);
    for (int i = 0; i < p; i++) {
        tab[i].addr[sizeof tab[i].addr - 1] = 0;
        if (i) snprintf(c->peers[i].addr, sizeof c->peers[i].addr, "%s", tab[i].addr);
    }
    return join_mesh(c, &h, tab, *lfd, deadline);
}

int tr_coll_rendezvous(tr_coll *c, const tr_coll_config *cfg)
{
    int rc = 0, lfd = -1;
    int64_t deadline = hf_mono_ms() + c->timeout_ms;
    table_ent *tab = calloc((size_t)c->world, sizeof *tab);
    if (!tab) return tr_coll_fail(c, HF_ENOMEM, "out of memory");
    char mhost[256], mport[32];
    if (addr_split(cfg->master, mhost, sizeof mhost, mport, sizeof mport)) {
        rc = tr_coll_fail(c, HF_EINVAL, "bad master address '%s' (want host:port)", cfg->master);
        goto end;
    }
    snprintf(c->peers[0].addr, sizeof c->peers[0].addr, "%s", cfg->master);
    if (c->rank == 0) rc = rdv_master(c, cfg, mhost, mport, deadline, tab, &lfd);
    else rc = rdv_join(c, cfg, deadline, tab, &lfd);
    if (!rc) snprintf(c->peers[0].addr, sizeof c->peers[0].addr, "%s", cfg->master);
end:
    if (lfd >= 0 && lfd != cfg->master_fd) close(lfd);
    free(tab);
    return rc;
}
