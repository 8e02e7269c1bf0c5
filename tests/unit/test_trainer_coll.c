/*
 * test_trainer_coll.c — the tcp collectives across real processes.
 *
 * Each case forks p ranks that rendezvous on a loopback listener the test
 * opened (port 0, so no port races) and run the same body; a rank reports
 * failure through its exit status and a message on stderr. Results are
 * checked against the plain serial computation: integer-valued floats (so
 * every summation order gives the same exact sum) and random floats
 * (within 1e-5 relative), with odd sizes that do not divide by p. Every rank
 * must also hold bitwise identical results. Failure cases: mismatched
 * collectives, a killed peer, a stalled peer, a rank that never shows up.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "trainer/coll.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*rank_fn)(tr_coll *c, int rank, int world, void *arg);

#define FAILF(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

static int listen_any(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 64) ||
        getsockname(fd, (struct sockaddr *)&a, &l))
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

/*
 * Fork `world` ranks (only the first `started` of them really start), run
 * fn in each, and return how many exited non-zero. timeout_ms goes to the
 * communicator; the whole case is killed after 60 s.
 */
static int run_world_ex(int world, int started, int timeout_ms, rank_fn fn, void *arg)
{
    int port = 0, lfd = listen_any(&port);
    assert_true(lfd >= 0);
    char master[64];
    snprintf(master, sizeof master, "127.0.0.1:%d", port);
    pid_t pids[16];
    for (int r = 0; r < started; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            alarm(60);
            tr_coll_config cfg;
            tr_coll_config_init(&cfg);
            cfg.rank = r;
            cfg.world = world;
            cfg.master = master;
            cfg.master_fd = r == 0 ? lfd : -1;
            if (r) close(lfd);
            cfg.timeout_ms = timeout_ms;
            tr_coll *c = NULL;
            char err[320];
            int rc = tr_coll_open(&cfg, &c, err, sizeof err);
            if (rc) {
                fprintf(stderr, "rank %d: open: %s\n", r, err);
                _exit(fn ? 2 : 0);   /* fn == NULL: the caller expects open to fail */
            }
            if (!fn) { fprintf(stderr, "rank %d: open succeeded unexpectedly\n", r); _exit(3); }
            int bad = fn(c, r, world, arg);
            tr_coll_close(c);
            _exit(bad ? 1 : 0);
        }
    }
    close(lfd);
    int failed = 0;
    for (int r = 0; r < started; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) failed++;
    }
    return failed;
}

static int run_world(int world, rank_fn fn, void *arg)
{
    return run_world_ex(world, world, 10000, fn, arg);
}

/* FNV-1a of a buffer, for "every rank holds the same bits". */
static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int same_everywhere(tr_coll *c, const void *buf, size_t bytes)
{
    int p = tr_coll_world(c);
    uint64_t mine = fnv(buf, bytes), all[16];
    if (tr_coll_allgather(c, &mine, all, sizeof mine)) FAILF("allgather: %s", tr_coll_errmsg(c));
    for (int i = 0; i < p; i++)
        if (all[i] != mine) FAILF("rank %d holds different bits than rank %d", tr_coll_rank(c), i);
    return 0;
}

/* value rank r contributes at index i: small integers, exact in any order */
static float ival(int r, size_t i) { return (float)((int)((i * 7 + (size_t)r * 13) % 101) - 50); }

static uint32_t lcg(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return *s; }
static float fval(int r, size_t i)
{
    uint32_t s = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503 + 17);
    lcg(&s); lcg(&s);
    return (float)(lcg(&s) >> 8) / (float)(1 << 24) * 2.0f - 1.0f;
}

static const size_t sizes[] = {1, 2, 3, 7, 31, 1000, 4099, 65537, 300001};

static int body_allreduce(tr_coll *c, int r, int p, void *arg)
{
    char algo = *(char *)arg;
    if (algo == 0) tr_coll_tune(c, 4096, 1024);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *buf = malloc(n * 4), *rnd = malloc(n * 4);
        for (size_t i = 0; i < n; i++) { buf[i] = ival(r, i); rnd[i] = fval(r, i); }
        if (tr_coll_allreduce_algo(c, buf, n, TR_COLL_SUM, algo))
            FAILF("allreduce(%c, n=%zu): %s", algo, n, tr_coll_errmsg(c));
        for (size_t i = 0; i < n; i++) {
            float want = 0;
            for (int q = 0; q < p; q++) want += ival(q, i);
            if (buf[i] != want) FAILF("p=%d n=%zu algo %c: [%zu] = %g, want %g", p, n, algo, i, (double)buf[i], (double)want);
        }
        if (tr_coll_allreduce_algo(c, rnd, n, TR_COLL_AVG, algo))
            FAILF("allreduce avg: %s", tr_coll_errmsg(c));
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int q = 0; q < p; q++) want += fval(q, i);
            want /= p;
            if (fabs(rnd[i] - want) > 1e-5 * (1 + fabs(want)))
                FAILF("avg p=%d n=%zu: [%zu] = %.9g, want %.9g", p, n, i, (double)rnd[i], want);
        }
        if (same_everywhere(c, rnd, n * 4)) return 1;
        free(buf);
        free(rnd);
    }
    return 0;
}

static void test_allreduce_ring(void **state)
{
    (void)state;
    char algo = 'r';
    for (int p = 2; p <= 5; p++) assert_int_equal(run_world(p, body_allreduce, &algo), 0);
}

static void test_allreduce_pairwise(void **state)
{
    (void)state;
    char algo = 'p';
    for (int p = 2; p <= 5; p++) assert_int_equal(run_world(p, body_allreduce, &algo), 0);
}

static void test_allreduce_doubling(void **state)
{
    (void)state;
    char algo = 'd';
    for (int p = 2; p <= 5; p++) assert_int_equal(run_world(p, body_allreduce, &algo), 0);
}

static void test_allreduce_auto_small_chunks(void **state)
{
    (void)state;
    /* default algorithm choice, with tiny chunks so every step is cut up */
    char algo = 0;
    assert_int_equal(run_world(1, body_allreduce, &algo), 0);
    for (int p = 3; p <= 4; p++) assert_int_equal(run_world(p, body_allreduce, &algo), 0);
}

static int body_bcast_gather(tr_coll *c, int r, int p, void *arg)
{
    (void)arg;
    static const size_t bsz[] = {0, 1, 5, 4097, 1000003};
    for (size_t k = 0; k < sizeof bsz / sizeof *bsz; k++) {
        size_t n = bsz[k];
        for (int root = 0; root < p; root++) {
            unsigned char *b = malloc(n + 1);
            for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(r == root ? (i * 31 + (size_t)root) : 0xEE);
            if (tr_coll_broadcast(c, b, n, root)) FAILF("broadcast: %s", tr_coll_errmsg(c));
            for (size_t i = 0; i < n; i++)
                if (b[i] != (unsigned char)(i * 31 + (size_t)root)) FAILF("bcast root %d n %zu: byte %zu wrong", root, n, i);
            free(b);
        }
        unsigned char *all = malloc(n * (size_t)p + 1), *mine = malloc(n + 1);
        for (size_t i = 0; i < n; i++) mine[i] = (unsigned char)(i + (size_t)r * 77);
        if (tr_coll_allgather(c, mine, all, n)) FAILF("allgather: %s", tr_coll_errmsg(c));
        for (int q = 0; q < p; q++)
            for (size_t i = 0; i < n; i++)
                if (all[(size_t)q * n + i] != (unsigned char)(i + (size_t)q * 77))
                    FAILF("allgather n %zu: rank %d's byte %zu wrong", n, q, i);
        free(all);
        free(mine);
    }
    return 0;
}

static void test_broadcast_allgather(void **state)
{
    (void)state;
    for (int p = 2; p <= 5; p++) assert_int_equal(run_world(p, body_bcast_gather, NULL), 0);
}

static int body_barrier(tr_coll *c, int r, int p, void *arg)
{
    (void)arg;
    int64_t t0 = hf_mono_ms();
    if (r == p - 1) hf_sleep_ms(300);
    if (tr_coll_barrier(c)) FAILF("barrier: %s", tr_coll_errmsg(c));
    int64_t dt = hf_mono_ms() - t0;
    if (dt < 250) FAILF("rank %d left the barrier after %lld ms, before the late rank entered", r, (long long)dt);
    return 0;
}

static void test_barrier(void **state)
{
    (void)state;
    for (int p = 2; p <= 5; p++) assert_int_equal(run_world(p, body_barrier, NULL), 0);
}

static int body_mismatch(tr_coll *c, int r, int p, void *arg)
{
    (void)p;
    int kind = *(int *)arg;
    float buf[200] = {0};
    int rc;
    if (kind == 0) rc = tr_coll_allreduce(c, buf, r == 1 ? 101 : 100, TR_COLL_SUM);
    else rc = r == 1 ? tr_coll_broadcast(c, buf, 400, 0) : tr_coll_allreduce(c, buf, 100, TR_COLL_SUM);
    if (rc != HF_EPEER && rc != HF_ECONN)
        FAILF("rank %d: mismatch not detected (rc %d)", r, rc);
    /* the rank that saw the bad header must say what differs */
    if (rc == HF_EPEER && !strstr(tr_coll_errmsg(c), "mismatch")) FAILF("unclear message: %s", tr_coll_errmsg(c));
    /* a broken communicator refuses further work */
    if (tr_coll_barrier(c) == 0) FAILF("barrier after an error succeeded");
    return 0;
}

static void test_mismatch_detected(void **state)
{
    (void)state;
    int kind = 0;
    assert_int_equal(run_world(2, body_mismatch, &kind), 0);
    assert_int_equal(run_world(3, body_mismatch, &kind), 0);
    kind = 1;
    assert_int_equal(run_world(2, body_mismatch, &kind), 0);
}

/* rank 2 dies (SIGKILL) after two good allreduces, in the middle of the third. */
static int body_killed(tr_coll *c, int r, int p, void *arg)
{
    (void)p; (void)arg;
    size_t n = 1 << 20;
    float *buf = calloc(n, 4);
    for (int it = 0; it < 2; it++)
        if (tr_coll_allreduce(c, buf, n, TR_COLL_SUM)) FAILF("good allreduce: %s", tr_coll_errmsg(c));
    if (r == 2) raise(SIGKILL);
    int64_t t0 = hf_mono_ms();
    int rc = tr_coll_allreduce(c, buf, n, TR_COLL_SUM);
    int64_t dt = hf_mono_ms() - t0;
    const char *m = tr_coll_errmsg(c);
    fprintf(stderr, "rank %d after %lld ms: %s\n", r, (long long)dt, m);
    if (rc == 0) FAILF("allreduce with a dead peer succeeded");
    if (dt > 3000) FAILF("took %lld ms to notice", (long long)dt);
    if (!strstr(m, "seq 3") || !strstr(m, "127.0.0.1:")) FAILF("message lacks seq/address: %s", m);
    if (r == 0 && !strstr(m, "rank 2")) FAILF("rank 0 should name rank 2: %s", m);
    free(buf);
    return 0;
}

static void test_killed_peer(void **state)
{
    (void)state;
    /* rank 2's own exit status is a signal: 1 failure expected */
    assert_int_equal(run_world_ex(3, 3, 2000, body_killed, NULL), 1);
}

/* rank 2 stalls (alive, silent): the others time out naming it */
static int body_stalled(tr_coll *c, int r, int p, void *arg)
{
    (void)p; (void)arg;
    /* large enough for the ring: rank 0 receives from rank 2 */
    size_t n = 300000;
    float *buf = calloc(n, 4);
    if (r == 2) { hf_sleep_ms(2500); free(buf); return 0; }
    int64_t t0 = hf_mono_ms();
    int rc = tr_coll_allreduce(c, buf, n, TR_COLL_SUM);
    free(buf);
    int64_t dt = hf_mono_ms() - t0;
    const char *m = tr_coll_errmsg(c);
    fprintf(stderr, "rank %d after %lld ms: %s\n", r, (long long)dt, m);
    if (dt > 2000) FAILF("gave up after %lld ms, limit is 800", (long long)dt);
    if (!strstr(m, "seq 1") || !strstr(m, "127.0.0.1:")) FAILF("unclear: %s", m);
    /* rank 0 waits on rank 2 directly; rank 1 waits on rank 0, which may
     * fail first and close its link: then rank 1 sees a closed connection */
    if (r == 0 && (rc != HF_ETIMEOUT || !strstr(m, "rank 2") || !strstr(m, "timeout")))
        FAILF("rank 0 should time out naming rank 2: rc %d %s", rc, m);
    if (r == 1 && rc != HF_ETIMEOUT && rc != HF_ECONN) FAILF("rc %d", rc);
    if (dt < 700 && rc == HF_ETIMEOUT) FAILF("timed out early, after %lld ms", (long long)dt);
    return 0;
}

static void test_stalled_peer(void **state)
{
    (void)state;
    assert_int_equal(run_world_ex(3, 3, 800, body_stalled, NULL), 0);
}

static void test_rank_missing_at_rendezvous(void **state)
{
    (void)state;
    /* world 3, only ranks 0 and 1 start: both fail to open (fn NULL) */
    int64_t t0 = hf_mono_ms();
    assert_int_equal(run_world_ex(3, 2, 700, NULL, NULL), 0);
    assert_true(hf_mono_ms() - t0 < 5000);
}

static int body_p2p(tr_coll *c, int r, int p, void *arg)
{
    (void)arg;
    /* every rank > 0 sends two messages to rank 0, which serves them in any order */
    if (r == 0) {
        int seen[16] = {0}, peers[16];
        for (int k = 0; k < 2 * (p - 1); k++) {
            int who, tag, np = 0;
            size_t got;
            double v[100];
            /* only ranks with messages still to come (the others move on to the barrier) */
            for (int i = 1; i < p; i++) if (seen[i] < 2) peers[np++] = i;
            if (tr_coll_wait_any(c, peers, np, -1, &who)) FAILF("wait_any: %s", tr_coll_errmsg(c));
            if (tr_coll_recv(c, who, -1, v, sizeof v, &tag, &got)) FAILF("recv: %s", tr_coll_errmsg(c));
            if (tag != 10 + seen[who] || got != (size_t)(who * 8) || (got && v[0] != who))
                FAILF("from %d: tag %d, %zu bytes", who, tag, got);
            seen[who]++;
            double reply = who * 2.0;
            if (tr_coll_send(c, who, 99, &reply, sizeof reply)) FAILF("send: %s", tr_coll_errmsg(c));
        }
    } else {
        double v[100];
        for (int i = 0; i < 100; i++) v[i] = r;
        for (int k = 0; k < 2; k++) {
            if (tr_coll_send(c, 0, 10 + k, v, (size_t)r * 8)) FAILF("send: %s", tr_coll_errmsg(c));
            double reply = 0;
            size_t got;
            if (tr_coll_recv(c, 0, 99, &reply, sizeof reply, NULL, &got) || reply != r * 2.0)
                FAILF("reply: %s", tr_coll_errmsg(c));
        }
        /* wrong tag is refused with a message */
    }
    if (tr_coll_barrier(c)) FAILF("barrier: %s", tr_coll_errmsg(c));
    return 0;
}

static void test_point_to_point(void **state)
{
    (void)state;
    assert_int_equal(run_world(4, body_p2p, NULL), 0);
}

static void test_config_errors(void **state)
{
    (void)state;
    tr_coll_config cfg;
    tr_coll *c = NULL;
    char err[200];
    tr_coll_config_init(&cfg);
    cfg.world = 2;
    cfg.rank = 5;
    assert_int_equal(tr_coll_open(&cfg, &c, err, sizeof err), HF_EINVAL);
    assert_null(c);
    cfg.rank = 1;
    cfg.master = "nocolon";
    assert_int_equal(tr_coll_open(&cfg, &c, err, sizeof err), HF_EINVAL);
    assert_non_null(strstr(err, "nocolon"));
    int b;
    assert_int_equal(tr_coll_backend_parse("gloo", &b), HF_EINVAL);
    assert_int_equal(tr_coll_backend_parse("mpi", &b), 0);
    assert_int_equal(b, TR_COLL_MPI);
    /* world 1 needs no master and every op is the identity */
    tr_coll_config_init(&cfg);
    assert_int_equal(tr_coll_open(&cfg, &c, err, sizeof err), 0);
    float x[3] = {1, 2, 3};
    assert_int_equal(tr_coll_allreduce(c, x, 3, TR_COLL_AVG), 0);
    assert_true(x[0] == 1 && x[2] == 3);
    assert_int_equal(tr_coll_barrier(c), 0);
    tr_coll_close(c);
}

static void test_nccl_backend(void **state)
{
    (void)state;
    tr_coll_config cfg;
    tr_coll *c = NULL;
    char err[320];
    tr_coll_config_init(&cfg);
    cfg.backend = TR_COLL_NCCL;
    int rc = tr_coll_open(&cfg, &c, err, sizeof err);
    if (rc == HF_EUNSUP) {
        print_message("nccl skipped: %s\n", err);
        skip();
    }
    assert_int_equal(rc, 0);
    float x[1000];
    for (int i = 0; i < 1000; i++) x[i] = (float)i;
    assert_int_equal(tr_coll_allreduce(c, x, 1000, TR_COLL_SUM), 0);
    assert_true(x[999] == 999.0f);
    tr_coll_close(c);
}

int main(void)
{
    hf_log_init("test_trainer_coll");
    hf_log_set_level(getenv("HF_DEBUG") ? HF_LOG_DEBUG : HF_LOG_OFF);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_allreduce_ring),
        cmocka_unit_test(test_allreduce_pairwise),
        cmocka_unit_test(test_allreduce_doubling),
        cmocka_unit_test(test_allreduce_auto_small_chunks),
        cmocka_unit_test(test_broadcast_allgather),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_point_to_point),
        cmocka_unit_test(test_mismatch_detected),
        cmocka_unit_test(test_killed_peer),
        cmocka_unit_test(test_stalled_peer),
        cmocka_unit_test(test_rank_missing_at_rendezvous),
        cmocka_unit_test(test_nccl_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
