/*
 * test_common_http.c — the libcurl client against a real HTTP server on a
 * loopback port (libmicrohttpd in this process): JSON round trip, bearer
 * token, retries with backoff on 503 for GET, no retry for POST, timeouts,
 * the response-size bound, and connection-refused errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_http.h"
#include "hf_time.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int hits_flaky, hits_post;
static struct MHD_Daemon *d;
static char base[64];

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_and_token),
        cmocka_unit_test(test_retries),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
