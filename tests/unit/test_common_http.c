/*
 * test_common_http.c — the libcurl client against a real HTTP server on a
 * loopback port (libmicrohttpd in this process): JSON round trip, bearer
 * token, retries with backoff on 503 for GET, no retry for POST, timeouts,
 * the response-size bound, and connection-refused errors; with several
 * base URLs (hf_follow.h), the headers of the follow rule: a dead URL
 * skipped (refused, or its connect timed out: a POST too; that timeout
 * short, HF_FOLLOW_CONNECT_MS), a standby's
 * 503 sent on to the primary it names, the term of
 * answers sent back in X-Hyperfarm-Term (the rule itself:
 * test_common_follow.c); a streamed answer's header lines handed to the
 * caller (the follow set's capture kept).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_follow.h"
#include "hf_http.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int hits_flaky, hits_post, hits_standby;
static struct MHD_Daemon *d;
static char base[64];

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* Base URL .../sb is a standby of term 3 naming .../pr, the primary of
 * term 4, which echoes the request's X-Hyperfarm-Term. */
static enum MHD_Result follow_reply(struct MHD_Connection *c, const char *url)
{
    char buf[256];
    int standby = !strncmp(url, "/sb/", 4);
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Hyperfarm-Term");
    if (standby) {
        atomic_fetch_add(&hits_standby, 1);
        snprintf(buf, sizeof buf, "{\"error\": \"standby\", \"role\": \"standby\", \"primary\": \"%spr\", \"term\": 3}",
                 base);
    } else snprintf(buf, sizeof buf, "{\"term_seen\": \"%s\"}", t ? t : "");
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(buf), buf, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "X-Hyperfarm-Role", standby ? "standby" : "primary");
    MHD_add_response_header(r, "X-Hyperfarm-Term", standby ? "3" : "4");
    enum MHD_Result ret = MHD_queue_response(c, standby ? 503 : 200, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **ptr)
{
    (void)cls; (void)version;
    static int marker;
    if (*ptr == NULL) { *ptr = &marker; return MHD_YES; }
    if (*upload_size) { *upload_size = 0; return MHD_YES; }   /* body consumed; answer on the last call */
    (void)upload;
    if (!strcmp(url, "/echo-auth")) {
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        char buf[256];
        snprintf(buf, sizeof buf, "{\"auth\": \"%s\", \"method\": \"%s\"}", a ? a : "", method);
        return reply(c, 200, buf);
    }
    if (!strcmp(url, "/flaky")) {
        int n = atomic_fetch_add(&hits_flaky, 1);
        return n < 2 ? reply(c, 503, "{\"error\": \"busy\"}") : reply(c, 200, "{\"ok\": true}");
    }
    if (!strcmp(url, "/post503")) {
        atomic_fetch_add(&hits_post, 1);
        return reply(c, 503, "{\"error\": \"busy\"}");
    }
    if (!strcmp(url, "/slow")) {
        hf_sleep_ms(1500);
        return reply(c, 200, "{}");
    }
    if (!strcmp(url, "/big")) {
        size_t n = HF_HTTP_MAX_BODY + 100;
        char *p = malloc(n);
        memset(p, 'x', n);
        struct MHD_Response *r = MHD_create_response_from_buffer(n, p, MHD_RESPMEM_MUST_FREE);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (!strcmp(url, "/text")) return reply(c, 200, "not json");
    if (!strncmp(url, "/sb/", 4) || !strncmp(url, "/pr/", 4)) return follow_reply(c, url);
    return reply(c, 404, "{\"error\": \"no such route\"}");
}

static int setup(void **state)
{
    (void)state;
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
                         handler, NULL, MHD_OPTION_END);
    assert_non_null(d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(base, sizeof base, "http://127.0.0.1:%u/", info->port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    MHD_stop_daemon(d);
    return 0;
}

static void test_json_and_token(void **state)
{
    (void)state;
    hf_http *c = hf_http_new(base, "s3cret", 5000, 0);
    long st;
    json_t *resp, *body = json_pack("{s:i}", "x", 1);
    char err[256];
    assert_int_equal(hf_http_request(c, "POST", "/echo-auth", body, &st, &resp, err, sizeof err), 0);
    assert_int_equal(st, 200);
    assert_string_equal(json_string_value(json_object_get(resp, "auth")), "Bearer s3cret");
    assert_string_equal(json_string_value(json_object_get(resp, "method")), "POST");
    json_decref(resp);
    /* keep-alive: a second request on the same handle */
    assert_int_equal(hf_http_request(c, "GET", "/nothing", NULL, &st, &resp, err, sizeof err), 0);
    assert_int_equal(st, 404);
    assert_string_equal(json_string_value(json_object_get(resp, "error")), "no such route");
    json_decref(resp);
    assert_int_equal(hf_http_request(c, "GET", "/text", NULL, &st, &resp, err, sizeof err), 0);
    assert_int_equal(st, 200);
    assert_null(resp);
    json_decref(body);
    hf_http_free(c);
}

static void test_retries(void **state)
{
    (void)state;
    hf_http *c = hf_http_new(base, NULL, 5000, 3);
    long st;
    json_t *resp;
    char err[256];
    atomic_store(&hits_flaky, 0);
    assert_int_equal(hf_http_request(c, "GET", "/flaky", NULL, &st, &resp, err, sizeof err), 0);
    assert_int_equal(st, 200);
    assert_int_equal(atomic_load(&hits_flaky), 3);
    json_decref(resp);
    /* a POST is not retried on 503: it may have had effects */
    atomic_store(&hits_post, 0);
    assert_int_equal(hf_http_request(c, "POST", "/post503", NULL, &st, &resp, err, sizeof err), 0);
    assert_int_equal(st, 503);
    assert_int_equal(atomic_load(&hits_post), 1);
    json_decref(resp);
    hf_http_free(c);
}

static void test_failures(void **state)
{
    (void)state;
    long st;
    json_t *resp;
    char err[256];
    hf_http *c = hf_http_new(base, NULL, 500, 0);
    int64_t t0 = hf_mono_ms();
    assert_int_equal(hf_http_request(c, "GET", "/slow", NULL, &st, &resp, err, sizeof err), HF_ETIMEOUT);
    assert_true(hf_mono_ms() - t0 < 1400);
    assert_non_null(strstr(err, "/slow"));
    hf_http_free(c);

    c = hf_http_new(base, NULL, 5000, 0);
    assert_int_equal(hf_http_request(c, "GET", "/big", NULL, &st, &resp, err, sizeof err), HF_ETOOBIG);
    hf_http_free(c);

    /* nothing listens on port 1 */
    c = hf_http_new("http://127.0.0.1:1", NULL, 1000, 2);
    t0 = hf_mono_ms();
    assert_int_equal(hf_http_request(c, "GET", "/x", NULL, &st, &resp, err, sizeof err), HF_ECONN);
    assert_true(hf_mono_ms() - t0 >= 250);    /* 100 + 200 ms of backoff */
    assert_non_null(strstr(err, "127.0.0.1:1"));
    hf_http_free(c);
}

static void test_follow(void **state)
{
    (void)state;
    char list[256], err[256], pr[96];
    long st;
    json_t *resp;
    /* a dead URL, the standby, the primary; no retries of the client's own */
    snprintf(list, sizeof list, "http://127.0.0.1:1,%ssb,%spr", base, base);
    snprintf(pr, sizeof pr, "%spr", base);
    hf_http *c = hf_http_new(list, NULL, 2000, 0);
    assert_non_null(hf_http_follow(c));
    atomic_store(&hits_standby, 0);
    /* a POST: the dead URL made no connection, the standby refused it: both
     * safe to pass, so it arrives at the primary within this one call */
    assert_int_equal(hf_http_request(c, "POST", "/x", NULL, &st, &resp, err, sizeof err), 0);
    assert_int_equal(st, 200);
    assert_string_equal(hf_http_base(c), pr);
    assert_int_equal(atomic_load(&hits_standby), 1);
    /* the standby's term (3) was sent to the primary */
    assert_string_equal(json_string_value(json_object_get(resp, "term_seen")), "3");
    json_decref(resp);
    assert_int_equal(hf_follow_term(hf_http_follow(c)), 4);
    /* another client of the same list starts where the first is */
    hf_http *c2 = hf_http_new(list, NULL, 2000, 0);
    assert_int_equal(hf_http_request(c2, "GET", "/y", NULL, &st, &resp, err, sizeof err), 0);
    assert_string_equal(json_string_value(json_object_get(resp, "term_seen")), "4");
    assert_string_equal(hf_http_base(c2), pr);
    assert_int_equal(atomic_load(&hits_standby), 1);
    json_decref(resp);
    hf_http_free(c2);
    hf_http_free(c);
}

/* A port whose connections hang: a listening socket that never accepts,
 * its queue filled (SYNs beyond it are dropped). *fds gets the sockets to
 * close. RET the port. */
static int blackhole(int fds[4])
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    fds[0] = socket(AF_INET, SOCK_STREAM, 0);
    assert_int_equal(bind(fds[0], (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fds[0], 0), 0);
    assert_int_equal(getsockname(fds[0], (struct sockaddr *)&a, &al), 0);
    for (int i = 1; i < 4; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        (void)connect(fds[i], (struct sockaddr *)&a, sizeof a);
    }
    hf_sleep_ms(50);
    return ntohs(a.sin_port);
}

/* A POST whose connection timed out before it was made sent nothing: with
 * several URLs it goes on to the next at once (a dead primary that drops
 * packets, then the standby that counts the agent's vote). */
static void test_follow_connect_timeout(void **state)
{
    (void)state;
    int fds[4];
    char list[256], err[256], pr[96];
    long st;
    json_t *resp;
    int port = blackhole(fds);
    snprintf(list, sizeof list, "http://127.0.0.1:%d,%spr", port, base);
    snprintf(pr, sizeof pr, "%spr", base);
    hf_http *c = hf_http_new(list, NULL, 600, 0);
    int64_t t0 = hf_mono_ms();
    int rc = hf_http_request(c, "POST", "/x", NULL, &st, &resp, err, sizeof err);
    int64_t took = hf_mono_ms() - t0;
    for (int i = 0; i < 4; i++) close(fds[i]);
    if (took < 500) {   /* the kernel accepted the connection after all: nothing to test here */
        json_decref(resp);
        hf_http_free(c);
        skip();
    }
    assert_int_equal(rc, 0);
    assert_int_equal(st, 200);
    assert_string_equal(hf_http_base(c), pr);
    json_decref(resp);
    hf_http_free(c);
}

/* With several URLs a dead host costs the short connect timeout
 * (HF_FOLLOW_CONNECT_MS), not the client's request timeout: a power cut of
 * the primary must not hold an agent's requests to the standby back. */
static void test_follow_dead_is_cheap(void **state)
{
    (void)state;
    int fds[4];
    char list[256], err[256];
    long st;
    json_t *resp = NULL;
    int port = blackhole(fds);
    snprintf(list, sizeof list, "http://127.0.0.1:%d,%spr", port, base);
    hf_http *c = hf_http_new(list, NULL, 5000, 0);   /* the agent's default request timeout */
    int64_t t0 = hf_mono_ms();
    int rc = hf_http_request(c, "POST", "/x", NULL, &st, &resp, err, sizeof err);
    int64_t took = hf_mono_ms() - t0;
    for (int i = 0; i < 4; i++) close(fds[i]);
    json_decref(resp);
    hf_http_free(c);
    if (took < 500) skip();   /* the kernel accepted the connection after all */
    assert_int_equal(rc, 0);
    assert_int_equal(st, 200);
    if (took > 2500) fail_msg("a dead URL cost %lld ms (connect timeout should be %d)", (long long)took,
                              HF_FOLLOW_CONNECT_MS);
}

/* A streamed answer's header lines reach the caller's header callback,
 * the status line first; with several URLs the follow set still sees the
 * answer's term. */
typedef struct hdr_seen {
    char lines[2048];
    int  n;
} hdr_seen;

static void on_hdr(void *ud, const char *line)
{
    hdr_seen *h = ud;
    size_t l = strlen(h->lines);
    snprintf(h->lines + l, sizeof h->lines - l, "%s\n", line);
    h->n++;
}

static int body_sink(void *ud, const void *p, size_t n)
{
    (void)p;
    *(size_t *)ud += n;
    return 0;
}

static void test_stream_header(void **state)
{
    (void)state;
    char list[256], err[256];
    for (int follow = 0; follow < 2; follow++) {
        hdr_seen h = {.n = 0};
        size_t got = 0;
        if (follow) snprintf(list, sizeof list, "%spr,http://127.0.0.1:1", base);
        else snprintf(list, sizeof list, "%spr", base);
        hf_http *c = hf_http_new(list, NULL, 2000, 0);
        hf_http_stream s = {.method = "GET", .path = "/h", .body_fd = -1, .sink = body_sink, .sink_ud = &got,
                            .header = on_hdr, .header_ud = &h};
        assert_int_equal(hf_http_stream_run(c, &s, err, sizeof err), 0);
        assert_int_equal(s.status, 200);
        assert_true(got > 0);
        assert_true(h.n >= 3);
        assert_memory_equal(h.lines, "HTTP/1.", 7);
        assert_non_null(strstr(h.lines, "\nX-Hyperfarm-Role: primary\n"));
        assert_non_null(strstr(h.lines, "\nX-Hyperfarm-Term: 4\n"));
        assert_null(strchr(h.lines, '\r'));
        if (follow) assert_int_equal(hf_follow_term(hf_http_follow(c)), 4);
        free(s.answer);
        hf_http_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_and_token),
        cmocka_unit_test(test_retries),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_follow),
        cmocka_unit_test(test_follow_connect_timeout),
        cmocka_unit_test(test_follow_dead_is_cheap),
        cmocka_unit_test(test_stream_header),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
