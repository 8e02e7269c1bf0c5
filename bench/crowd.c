/*
 * crowd.c — a trickling crowd against the scheduler, and what a newcomer
 * sees meanwhile (docs/scheduler.md "Connections"; bench/crowd.sh and
 * tests/system/test_security_crowd.sh run it).
 *
 *   crowd --to 127.0.0.1:PORT [--addrs 8] [--per-addr 1100] [--trickle-ms 3000]
 *         [--first-from 127.0.0.2] [--probe-from 127.0.0.1] [--idle-s 3] [--crowd-s 15]
 *         [--token T] [--agent-token T --agent-id N] [--max-ms M]
 *
 * The crowd: --addrs source addresses (127.0.0.2, .3, ...) each open
 * --per-addr connections that send a request header one byte every
 * --trickle-ms (never finishing it); a connection the server closes is
 * opened again at its next turn, as a determined attacker would. Probes,
 * on a thread of their own, each on a NEW connection from --probe-from
 * (Connection: close; a probe that gets no complete answer in 5 s fails):
 * GET /healthz, GET /api/v1/experiments with --token, and a heartbeat
 * POST /api/v1/agents/N/heartbeat with --agent-token. They run --idle-s
 * before the crowd and --crowd-s once the crowd has made its first
 * connection attempts, and each phase prints, per probe kind,
 *
 *   idle|crowd KIND n=N fail=F p50=X p99=Y max=Z     (milliseconds)
 *
 * then "crowd held mean=H max=M opened=O closed_by_server=C". Exit 0; 1
 * when --max-ms is given and a crowd probe failed or took longer; 2 on a
 * usage error. Targets are loopback only: the program refuses any other.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROBE_TIMEOUT_MS 5000
#define MAX_SAMPLES      100000

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int parse_addr(const char *s, struct sockaddr_in *sa, int need_port)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    size_t hl = colon ? (size_t)(colon - s) : strlen(s);
    if (hl == 0 || hl >= sizeof host || (need_port && !colon)) return -1;
    memcpy(host, s, hl);
    host[hl] = 0;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) return -1;
    if ((ntohl(sa->sin_addr.s_addr) >> 24) != 127) return -1;   /* loopback only */
    if (colon) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p < 1 || p > 65535) return -1;
        sa->sin_port = htons((uint16_t)p);
    }
    return 0;
}

/* ---------- the crowd ---------- */

typedef struct member {
    int     fd;          /* -1: closed, to be opened at next_us */
    int     connecting;
    int64_t next_us;     /* next byte (or reconnect) */
    size_t  sent;
} member;

static struct {
    struct sockaddr_in dst;
    int      addrs, per_addr, trickle_ms;
    uint32_t first_from;         /* host order */
    member  *m;
    struct pollfd *pf;
    atomic_int stop, attempted;  /* attempted: every member tried once */
    atomic_long opened, closed_by_server;
    atomic_int open_now;
} crowd;

static const char trickle_text[] = "GET /api/v1/experiments HTTP/1.1\r\nHost: crowd\r\nX-Slow: ";

static void member_open(int i)
{
    member *m = &crowd.m[i];
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(crowd.first_from + (uint32_t)(i / crowd.per_addr));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) { close(fd); return; }
    int rc = connect(fd, (struct sockaddr *)&crowd.dst, sizeof crowd.dst);
    if (rc != 0 && errno != EINPROGRESS) { close(fd); return; }
    m->fd = fd;
    m->connecting = rc != 0;
    m->sent = 0;
    atomic_fetch_add(&crowd.opened, 1);
}

static void member_close(int i, int by_server)
{
    member *m = &crowd.m[i];
    if (m->fd < 0) return;
    close(m->fd);
    m->fd = -1;
    if (by_server) atomic_fetch_add(&crowd.closed_by_server, 1);
}

/* One byte of the never-ending header (the request line, Host, then
 * "X-Slow: aaaa..."). */
static void member_trickle(int i)
{
    member *m = &crowd.m[i];
    char ch = m->sent < sizeof trickle_text - 1 ? trickle_text[m->sent] : 'a';
    if (send(m->fd, &ch, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1) m->sent++;
    else if (errno != EAGAIN) member_close(i, 1);
}

static void *crowd_main(void *arg)
{
    (void)arg;
    int n = crowd.addrs * crowd.per_addr;
    int64_t t0 = now_us(), period = (int64_t)crowd.trickle_ms * 1000;
    /* Openings spread over the first 500 ms, trickles over the period. */
    for (int i = 0; i < n; i++) {
        crowd.m[i].fd = -1;
        crowd.m[i].next_us = t0 + (int64_t)i * 500000 / n;
    }
    int all_tried = 0;
    while (!atomic_load(&crowd.stop)) {
        int64_t now = now_us();
        int open = 0;
        for (int i = 0; i < n; i++) {
            member *m = &crowd.m[i];
            if (m->fd < 0 && now >= m->next_us) {
                member_open(i);
                m->next_us = now + period;
                if (m->fd >= 0 && !m->connecting) member_trickle(i);
            } else if (m->fd >= 0 && !m->connecting && now >= m->next_us) {
                member_trickle(i);
                m->next_us += period;
                if (m->next_us < now) m->next_us = now + period;
            }
            crowd.pf[i].fd = m->fd;
            crowd.pf[i].events = m->fd >= 0 ? (m->connecting ? POLLOUT : POLLIN) : 0;
            crowd.pf[i].revents = 0;
            if (m->fd >= 0) open++;
        }
        atomic_store(&crowd.open_now, open);
        if (!all_tried && now - t0 > 600000) {
            all_tried = 1;
            atomic_store(&crowd.attempted, 1);
        }
        int r = poll(crowd.pf, (nfds_t)n, 20);
        if (r <= 0) continue;
        for (int i = 0; i < n; i++) {
            member *m = &crowd.m[i];
            short re = crowd.pf[i].revents;
            if (!re || m->fd < 0) continue;
            if (m->connecting) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(m->fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (err || (re & (POLLERR | POLLHUP))) { member_close(i, 1); continue; }
                m->connecting = 0;
                member_trickle(i);
                continue;
            }
            char buf[512];
            ssize_t k = recv(m->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k <= 0 || (re & (POLLHUP | POLLERR))) member_close(i, 1);   /* EOF, reset, or an answer + close */
        }
    }
    for (int i = 0; i < n; i++) member_close(i, 0);
    return NULL;
}

/* ---------- probes ---------- */

typedef struct series {
    const char *name;
    double ms[MAX_SAMPLES];
    int n, fail;
} series;

static struct sockaddr_in probe_src;

/* req on a new connection; RET the milliseconds to a complete answer
 * with status 2xx, or -1. */
static double probe(const char *req, size_t len)
{
    int64_t t0 = now_us();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = PROBE_TIMEOUT_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char buf[8192];
    size_t got = 0;
    double ms = -1;
    if (bind(fd, (struct sockaddr *)&probe_src, sizeof probe_src) != 0) goto end;
    if (connect(fd, (struct sockaddr *)&crowd.dst, sizeof crowd.dst) != 0) goto end;
    if (send(fd, req, len, MSG_NOSIGNAL) != (ssize_t)len) goto end;
    for (;;) {   /* Connection: close -> the answer ends at EOF */
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
        if (got == sizeof buf - 1) break;
        if ((now_us() - t0) / 1000 > PROBE_TIMEOUT_MS) break;
    }
    buf[got] = 0;
    if (got > 12 && strncmp(buf, "HTTP/1.1 2", 10) == 0 && strstr(buf, "\r\n\r\n")) ms = (double)(now_us() - t0) / 1000.0;
end:
    close(fd);
    return ms;
}

static void series_add(series *s, double ms)
{
    if (ms < 0) s->fail++;
    else if (s->n < MAX_SAMPLES) s->ms[s->n++] = ms;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(series *s, double p)
{
    if (!s->n) return -1;
    int i = (int)(p * (s->n - 1) + 0.5);
    return s->ms[i];
}

static double series_print(const char *phase, series *s)
{
    qsort(s->ms, (size_t)s->n, sizeof s->ms[0], cmp_d);
    double mx = s->n ? s->ms[s->n - 1] : -1;
    printf("%-5s %-9s n=%d fail=%d p50=%.2f p99=%.2f max=%.2f\n", phase, s->name, s->n, s->fail, pct(s, 0.5),
           pct(s, 0.99), mx);
    fflush(stdout);
    return mx;
}

typedef struct probe_kind {
    char req[1024];
    size_t len;
} probe_kind;

/* Rounds of every kind until seconds have passed. */
static void run_probes(probe_kind *k, int nk, series *out, int seconds)
{
    int64_t end = now_us() + (int64_t)seconds * 1000000;
    while (now_us() < end)
        for (int j = 0; j < nk; j++) {
            series_add(&out[j], probe(k[j].req, k[j].len));
            usleep(5000);
        }
}

static void usage(void)
{
    fprintf(stderr, "usage: crowd --to 127.0.0.1:PORT [--addrs N] [--per-addr N] [--trickle-ms MS] "
                    "[--first-from ADDR] [--probe-from ADDR] [--idle-s S] [--crowd-s S] [--token T] "
                    "[--agent-token T --agent-id N] [--max-ms M]\n");
}

int main(int argc, char **argv)
{
    const char *to = NULL, *first = "127.0.0.2", *pfrom = "127.0.0.1", *token = NULL, *atoken = NULL;
    int idle_s = 3, crowd_s = 15, agent_id = 0;
    double max_ms = 0;
    crowd.addrs = 8;
    crowd.per_addr = 1100;
    crowd.trickle_ms = 3000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { usage(); return 2; }
        i++;
        if (!strcmp(a, "--to")) to = v;
        else if (!strcmp(a, "--addrs")) crowd.addrs = atoi(v);
        else if (!strcmp(a, "--per-addr")) crowd.per_addr = atoi(v);
        else if (!strcmp(a, "--trickle-ms")) crowd.trickle_ms = atoi(v);
        else if (!strcmp(a, "--first-from")) first = v;
        else if (!strcmp(a, "--probe-from")) pfrom = v;
        else if (!strcmp(a, "--idle-s")) idle_s = atoi(v);
        else if (!strcmp(a, "--crowd-s")) crowd_s = atoi(v);
        else if (!strcmp(a, "--token")) token = v;
        else if (!strcmp(a, "--agent-token")) atoken = v;
        else if (!strcmp(a, "--agent-id")) agent_id = atoi(v);
        else if (!strcmp(a, "--max-ms")) max_ms = atof(v);
        else { usage(); return 2; }
    }
    struct sockaddr_in first_sa;
    if (!to || parse_addr(to, &crowd.dst, 1) || parse_addr(first, &first_sa, 0) || parse_addr(pfrom, &probe_src, 0) ||
        crowd.addrs < 1 || crowd.addrs > 64 || crowd.per_addr < 1 || crowd.per_addr > 20000 ||
        crowd.trickle_ms < 10 || idle_s < 0 || crowd_s < 1 || (atoken && agent_id < 1)) {
        fprintf(stderr, "crowd: bad arguments (targets and sources must be 127.x.x.x)\n");
        usage();
        return 2;
    }
    crowd.first_from = ntohl(first_sa.sin_addr.s_addr);
    int n = crowd.addrs * crowd.per_addr;
    struct rlimit rl;
    rlim_t want = (rlim_t)n + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
        if (rl.rlim_cur < want)
            fprintf(stderr, "crowd: open-files limit %llu < %llu: fewer connections will be held\n",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)want);
    }
    crowd.m = calloc((size_t)n, sizeof *crowd.m);
    crowd.pf = calloc((size_t)n, sizeof *crowd.pf);
    static series idle[3], busy[3];
    static probe_kind kinds[3];
    if (!crowd.m || !crowd.pf) return 1;
    char host[64];
    snprintf(host, sizeof host, "%s", to);
    int nk = 0;
    kinds[nk].len = (size_t)snprintf(kinds[nk].req, sizeof kinds[nk].req,
                                     "GET /healthz HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host);
    idle[nk].name = busy[nk].name = "healthz";
    nk++;
    if (token) {
        kinds[nk].len = (size_t)snprintf(kinds[nk].req, sizeof kinds[nk].req,
                                         "GET /api/v1/experiments HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                                         "Connection: close\r\n\r\n", host, token);
        idle[nk].name = busy[nk].name = "user-get";
        nk++;
    }
    if (atoken) {
        static const char body[] = "{\"running\": []}";
        kinds[nk].len = (size_t)snprintf(kinds[nk].req, sizeof kinds[nk].req,
                                         "POST /api/v1/agents/%d/heartbeat HTTP/1.1\r\nHost: %s\r\n"
                                         "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                                         "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                                         agent_id, host, atoken, sizeof body - 1, body);
        idle[nk].name = busy[nk].name = "heartbeat";
        nk++;
    }
    if (idle_s) {
        run_probes(kinds, nk, idle, idle_s);
        for (int j = 0; j < nk; j++) series_print("idle", &idle[j]);
    }
    pthread_t th;
    if (pthread_create(&th, NULL, crowd_main, NULL) != 0) return 1;
    while (!atomic_load(&crowd.attempted)) usleep(10000);
    /* Hold figures sampled while the probes run. */
    int64_t end = now_us() + (int64_t)crowd_s * 1000000;
    long held_sum = 0, held_n = 0;
    int held_max = 0;
    while (now_us() < end) {
        for (int j = 0; j < nk; j++) {
            series_add(&busy[j], probe(kinds[j].req, kinds[j].len));
            int o = atomic_load(&crowd.open_now);
            held_sum += o;
            held_n++;
            if (o > held_max) held_max = o;
            usleep(5000);
        }
    }
    atomic_store(&crowd.stop, 1);
    pthread_join(th, NULL);
    int bad = 0;
    for (int j = 0; j < nk; j++) {
        double mx = series_print("crowd", &busy[j]);
        if (max_ms > 0 && (busy[j].fail || busy[j].n == 0 || mx > max_ms)) bad = 1;
    }
    printf("crowd held mean=%ld max=%d opened=%ld closed_by_server=%ld (%d addresses x %d, a byte every %d ms)\n",
           held_n ? held_sum / held_n : 0, held_max, atomic_load(&crowd.opened), atomic_load(&crowd.closed_by_server),
           crowd.addrs, crowd.per_addr, crowd.trickle_ms);
    free(crowd.m);
    free(crowd.pf);
    return bad;
}
