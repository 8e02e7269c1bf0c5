/*
 * test_scheduler_api_guard.c — the HTTP server's guard (scheduler/api/api_guard.h)
 * on a real libmicrohttpd daemon and real loopback sockets:
 *
 *   - half-open share: with a table of 8 (4 half-open slots), 7 silent
 *     connections leave the 4 newest open and the 3 oldest closed by the
 *     server, and a newcomer that sends its request at once is answered;
 *   - header deadline: a connection that trickles a byte every 200 ms is
 *     closed at the 1 s deadline, not kept by its steady trickle;
 *   - event streams per token: 16 slots per token, the 17th refused,
 *     another token unaffected, a slot given back is reusable;
 *   - /metrics: the guard's counts and failed self-checks appear in the
 *     scrape (metrics_scrape), and the reaper runs as thread "hf-guard".
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "thread_fixture.h"

#include "hf_err.h"
#include "hf_time.h"
#include "hf_assert.h"
#include "hf_buf.h"
#include "scheduler/api/api_guard.h"
#include "scheduler/api/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)url; (void)method; (void)version; (void)upload;
    api_guard *g = cls;
    if (!*con_cls) {
        *con_cls = g;
        api_guard_headers(g, c, 0);
        return MHD_YES;
    }
    *upload_size = 0;
    static char ok[] = "ok";
    struct MHD_Response *r = MHD_create_response_from_buffer(2, ok, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    api_guard_request_done(cls, c);
    *con_cls = NULL;
}

typedef struct server {
    api_guard *g;
    struct MHD_Daemon *d;
    int port;
} server;

static void server_start(server *s, unsigned max_conns, int header_timeout_s)
{
    api_guard_config cfg = {.max_conns = max_conns, .header_timeout_s = header_timeout_s, .min_body_rate = 1024};
    s->g = api_guard_new(&cfg);
    assert_non_null(s->g);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, on_request, s->g,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_LIMIT, max_conns,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60,
                            MHD_OPTION_NOTIFY_CONNECTION, api_guard_notify, s->g,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s->g,
                            MHD_OPTION_END);
    assert_non_null(s->d);
    s->port = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT)->port;
}

static void server_stop(server *s)
{
    MHD_stop_daemon(s->d);
    api_guard_free(s->g);
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

/* Has the server closed fd (EOF or reset) within ms? */
static int closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return 0;
    char b[64];
    return recv(fd, b, sizeof b, MSG_DONTWAIT) <= 0;
}

static void test_half_open_share(void **state)
{
    (void)state;
    server s;
    server_start(&s, 8, 30);
    int fd[7];
    for (int i = 0; i < 7; i++) {
        fd[i] = dial(s.port);
        usleep(50000);   /* accepted in order: the oldest is the first */
    }
    for (int i = 0; i < 3; i++) assert_true(closed_within(fd[i], 2000));
    for (int i = 3; i < 7; i++) assert_false(closed_within(fd[i], 100));
    api_guard_stats st;
    api_guard_get_stats(s.g, &st);
    assert_int_equal(st.evicted, 3);
    assert_int_equal(st.half_open, 4);
    /* A newcomer with its whole request is answered (and evicts the oldest silent one). */
    int n = dial(s.port);
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(send(n, req, sizeof req - 1, 0), (ssize_t)(sizeof req - 1));
    char buf[256] = "";
    struct pollfd p = {.fd = n, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 2000), 1);
    assert_true(recv(n, buf, sizeof buf - 1, 0) > 12);
    assert_memory_equal(buf, "HTTP/1.1 200", 12);
    close(n);
    for (int i = 0; i < 7; i++) close(fd[i]);
    server_stop(&s);
}

static void test_header_deadline(void **state)
{
    (void)state;
    server s;
    server_start(&s, 64, 1);
    int fd = dial(s.port);
    static const char head[] = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    int64_t t0 = hf_mono_ms(), closed_at = -1;
    for (size_t i = 0; i < sizeof head - 1 && hf_mono_ms() - t0 < 5000; i++) {
        if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1 || closed_within(fd, 200)) {
            closed_at = hf_mono_ms() - t0;
            break;
        }
    }
    assert_true(closed_at >= 900 && closed_at < 2000);
    api_guard_stats st;
    api_guard_get_stats(s.g, &st);
    assert_int_equal(st.deadline, 1);
    close(fd);
    server_stop(&s);
}

static void test_sse_per_token(void **state)
{
    (void)state;
    api_guard_config cfg = {.max_conns = 64, .header_timeout_s = 10};
    api_guard *g = api_guard_new(&cfg);
    uint64_t k[API_SSE_PER_TOKEN + 1], other, anon;
    for (int i = 0; i < API_SSE_PER_TOKEN; i++) assert_int_equal(api_guard_sse_take(g, "alice-token", &k[i]), 0);
    assert_int_equal(api_guard_sse_take(g, "alice-token", &k[API_SSE_PER_TOKEN]), HF_ETOOBIG);
    assert_int_equal(api_guard_sse_take(g, "bob-token", &other), 0);
    assert_int_equal(api_guard_sse_take(g, NULL, &anon), 0);
    api_guard_sse_give(g, k[0]);
    assert_int_equal(api_guard_sse_take(g, "alice-token", &k[0]), 0);
    api_guard_stats st;
    api_guard_get_stats(g, &st);
    assert_int_equal(st.sse_refused, 1);
    api_guard_free(g);
    api_guard_free(NULL);
}

static void test_metrics_exported(void **state)
{
    (void)state;
    api_guard_config cfg = {.max_conns = 64, .header_timeout_s = 10};
    api_guard *g = api_guard_new(&cfg);
    assert_int_equal(unit_threads_named("hf-guard"), 1);
    uint64_t k[API_SSE_PER_TOKEN + 2];
    for (int i = 0; i < API_SSE_PER_TOKEN + 2; i++) api_guard_sse_take(g, "alice-token", &k[i]);   /* 2 refused */
    int was = hf_assert_set_abort(0);
    uint64_t before = hf_assert_failures();
    HF_ASSERT(state == (void **)1);   /* false on purpose: counted, not aborted */
    hf_assert_set_abort(was);
    sched_stats ss;
    memset(&ss, 0, sizeof ss);
    metrics_sources src = {.guard = g};
    hf_buf b;
    hf_buf_init(&b, 1u << 20);
    assert_int_equal(metrics_scrape(&b, &ss, &src), 0);
    size_t len;
    char *text = hf_buf_take(&b, &len), want[96];
    assert_non_null(strstr(text, "hyperfarm_http_sse_refused_total 2\n"));
    assert_non_null(strstr(text, "hyperfarm_http_guard_closed_total{reason=\"header_deadline\"} 0\n"));
    assert_non_null(strstr(text, "hyperfarm_http_guard_closed_total{reason=\"half_open_evicted\"} 0\n"));
    assert_non_null(strstr(text, "hyperfarm_http_guard_closed_total{reason=\"slow_body\"} 0\n"));
    assert_non_null(strstr(text, "hyperfarm_http_half_open_connections 0\n"));
    snprintf(want, sizeof want, "hyperfarm_assert_failures_total %llu\n", (unsigned long long)before + 1);
    assert_non_null(strstr(text, want));
    free(text);
    hf_buf_free(&b);
    api_guard_free(g);
    assert_int_equal(unit_threads_settle("hf-guard", 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_open_share),
        cmocka_unit_test(test_header_deadline),
        cmocka_unit_test(test_sse_per_token),
        cmocka_unit_test(test_metrics_exported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
