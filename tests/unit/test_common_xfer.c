/*
 * test_common_xfer.c — the streamed, SHA-256-verified transfers
 * (common/hf_xfer.c) against a real HTTP server on a loopback port
 * (libmicrohttpd in this process, a thread per connection): a good
 * download lands under its name with nothing else left in the folder;
 * corrupt bytes, a short and a long body are HF_ECORRUPT and leave
 * nothing; a 404 is HF_ENOTFOUND with the server's message; an upload is
 * verified by the server against X-Hyperfarm-Sha256 (a wrong hash is
 * HF_ECORRUPT); a server that refuses a 64 MiB upload at once (404 before
 * reading the body, then closes) is HF_ENOTFOUND, not HF_ECONN; a
 * download that stalls is HF_ETIMEOUT after the stall time; a wrong token
 * is HF_EAUTH; the SHA-256 fed piece by piece (hf_sha256.h) is the known
 * digest.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_sha256.h"
#include "hf_time.h"
#include "hf_xfer.h"
#include "tests/unit/unit_fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define OBJ_SIZE (1u << 20)
#define BIG_SIZE ((int64_t)64 << 20)

static struct MHD_Daemon *d;
static char base[64], dir[256];
static char *obj;                    /* OBJ_SIZE bytes served by /obj/... */
static char obj_sha[HF_SHA256_HEX];
static atomic_int stopping, refused_read;

static void sha_of(const void *p, size_t n, char hex[HF_SHA256_HEX])
{
    unsigned char dig[32];
    gnutls_hash_fast(GNUTLS_DIG_SHA256, p, n, dig);
    hf_sha256_hex(dig, hex);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *body, size_t n)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result reply_str(struct MHD_Connection *c, unsigned code, const char *body)
{
    return reply(c, code, body, strlen(body));
}

/* /obj/stall: 1000 bytes, then nothing for up to 5 s. */
static ssize_t stall_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)cls;
    if (pos == 0) {
        size_t n = max < 1000 ? max : 1000;
        memcpy(buf, obj, n);
        return (ssize_t)n;
    }
    for (int i = 0; i < 50 && !atomic_load(&stopping); i++) hf_sleep_ms(100);
    return MHD_CONTENT_READER_END_WITH_ERROR;
}

static enum MHD_Result get_obj(struct MHD_Connection *c, const char *url)
{
    if (!strcmp(url, "/obj/good")) return reply(c, 200, obj, OBJ_SIZE);
    if (!strcmp(url, "/obj/short")) return reply(c, 200, obj, OBJ_SIZE - 1);
    if (!strcmp(url, "/obj/long")) {
        char *p = malloc(OBJ_SIZE + 10);
        memcpy(p, obj, OBJ_SIZE);
        memset(p + OBJ_SIZE, 'x', 10);
        struct MHD_Response *r = MHD_create_response_from_buffer(OBJ_SIZE + 10, p, MHD_RESPMEM_MUST_FREE);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (!strcmp(url, "/obj/corrupt")) {
        char *p = malloc(OBJ_SIZE);
        memcpy(p, obj, OBJ_SIZE);
        p[OBJ_SIZE / 2] ^= 1;
        struct MHD_Response *r = MHD_create_response_from_buffer(OBJ_SIZE, p, MHD_RESPMEM_MUST_FREE);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    if (!strcmp(url, "/obj/stall")) {
        struct MHD_Response *r = MHD_create_response_from_callback(OBJ_SIZE, 4096, stall_reader, NULL, NULL);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    return reply_str(c, 404, "{\"error\": \"no such object\"}");
}

/* A PUT's state: the hash of the body so far. */
typedef struct put_state {
    gnutls_hash_hd_t h;
    int64_t          n;
} put_state;

static enum MHD_Result put_done(struct MHD_Connection *c, put_state *ps)
{
    unsigned char dig[32];
    char hex[HF_SHA256_HEX], body[200];
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Hyperfarm-Sha256");
    gnutls_hash_output(ps->h, dig);
    hf_sha256_hex(dig, hex);
    if (!want || strcmp(want, hex)) {
        snprintf(body, sizeof body, "{\"error\": \"body hashes to %.12s\"}", hex);
        return reply_str(c, 422, body);
    }
    snprintf(body, sizeof body, "{\"sha256\": \"%s\", \"size\": %lld}", hex, (long long)ps->n);
    return reply_str(c, 201, body);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **ptr)
{
    (void)cls; (void)version;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!auth || strcmp(auth, "Bearer tok")) return reply_str(c, 401, "{\"error\": \"who are you\"}");
    if (!strcmp(method, "GET")) return get_obj(c, url);
    if (!strcmp(url, "/refuse")) {                  /* answer before reading a byte of the body */
        if (*upload_size) atomic_store(&refused_read, 1);
        return reply_str(c, 404, "{\"error\": \"no such trial\"}");
    }
    put_state *ps = *ptr;
    if (!ps) {
        ps = calloc(1, sizeof *ps);
        gnutls_hash_init(&ps->h, GNUTLS_DIG_SHA256);
        *ptr = ps;
        return MHD_YES;
    }
    if (*upload_size) {
        gnutls_hash(ps->h, upload, *upload_size);
        ps->n += (int64_t)*upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    return put_done(c, ps);
}

static void completed(void *cls, struct MHD_Connection *c, void **ptr, enum MHD_RequestTerminationCode toe)
{
    (void)cls; (void)c; (void)toe;
    put_state *ps = *ptr;
    if (!ps) return;
    gnutls_hash_deinit(ps->h, NULL);
    free(ps);
    *ptr = NULL;
}

static int setup(void **state)
{
    (void)state;
    if (unit_tmpdir(dir, sizeof dir, "xfer")) return -1;
    obj = malloc(OBJ_SIZE);
    for (size_t i = 0; i < OBJ_SIZE; i++) obj[i] = (char)(i * 7 + i / 4096);
    sha_of(obj, OBJ_SIZE, obj_sha);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL, handler,
                         NULL, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
    if (!d) return -1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(base, sizeof base, "http://127.0.0.1:%u", info->port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    atomic_store(&stopping, 1);
    MHD_stop_daemon(d);
    free(obj);
    return unit_rmtree(dir);
}

/* Files in dir other than keep (NULL: any). */
static int others_in(const char *d_path, const char *keep)
{
    DIR *dd = opendir(d_path);
    struct dirent *de;
    int n = 0;
    assert_non_null(dd);
    while ((de = readdir(dd)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && (!keep || strcmp(de->d_name, keep))) n++;
    closedir(dd);
    return n;
}

static void test_download_good(void **state)
{
    (void)state;
    char dest[400], err[512], got[HF_SHA256_HEX], sub[300];
    long st = 0;
    int64_t n = 0;
    snprintf(sub, sizeof sub, "%s/good", dir);
    mkdir(sub, 0755);
    snprintf(dest, sizeof dest, "%s/obj.bin", sub);
    hf_http *c = hf_http_new(base, "tok", 5000, 0);
    int rc = hf_xfer_get(c, "/obj/good", obj_sha, OBJ_SIZE, dest, NULL, &st, NULL, err, sizeof err);
    if (rc) fail_msg("hf_xfer_get: %s", err);
    assert_int_equal(st, 200);
    int fd = open(dest, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(hf_sha256_fd(fd, -1, got, &n), 0);
    close(fd);
    assert_string_equal(got, obj_sha);
    assert_int_equal(n, OBJ_SIZE);
    assert_int_equal(others_in(sub, "obj.bin"), 0);          /* no temp file left */
    hf_http_free(c);
}

static void test_download_refused(void **state)
{
    (void)state;
    static const struct { const char *path; int rc; long status; const char *msg; } cases[] = {
        {"/obj/corrupt", HF_ECORRUPT, 200, "SHA-256"},
        {"/obj/short", HF_ECORRUPT, 200, "1048575 bytes"},
        {"/obj/long", HF_ECORRUPT, 200, "more than the expected"},
        {"/obj/none", HF_ENOTFOUND, 404, "no such object"},
    };
    char dest[400], err[512], sub[300];
    snprintf(sub, sizeof sub, "%s/bad", dir);
    mkdir(sub, 0755);
    snprintf(dest, sizeof dest, "%s/obj.bin", sub);
    hf_http *c = hf_http_new(base, "tok", 5000, 0);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long st = 0;
        json_t *resp = NULL;
        err[0] = 0;
        int rc = hf_xfer_get(c, cases[i].path, obj_sha, OBJ_SIZE, dest, NULL, &st, &resp, err, sizeof err);
        if (rc != cases[i].rc || !strstr(err, cases[i].msg))
            fail_msg("%s: rc %d (%s), want %d with \"%s\"", cases[i].path, rc, err, cases[i].rc, cases[i].msg);
        assert_int_equal(st, cases[i].status);
        if (cases[i].status == 404) assert_non_null(json_object_get(resp, "error"));
        json_decref(resp);
        assert_int_equal(others_in(sub, NULL), 0);           /* nothing under any name */
    }
    hf_http_free(c);
    /* a wrong token: the server's 401 */
    c = hf_http_new(base, "nope", 5000, 0);
    long st = 0;
    assert_int_equal(hf_xfer_get(c, "/obj/good", obj_sha, OBJ_SIZE, dest, NULL, &st, NULL, err, sizeof err), HF_EAUTH);
    assert_non_null(strstr(err, "who are you"));
    hf_http_free(c);
}

static void test_download_stall(void **state)
{
    (void)state;
    char dest[400], err[512];
    long st = 0;
    snprintf(dest, sizeof dest, "%s/stall.bin", dir);
    hf_http *c = hf_http_new(base, "tok", 5000, 0);
    hf_xfer_opts o = {.stall_bytes = 100000, .stall_s = 1};   /* below 100 kB/s for 1 s */
    int64_t t0 = hf_mono_ms();
    int rc = hf_xfer_get(c, "/obj/stall", obj_sha, OBJ_SIZE, dest, &o, &st, NULL, err, sizeof err);
    int64_t took = hf_mono_ms() - t0;
    if (rc != HF_ETIMEOUT) fail_msg("stall: rc %d (%s)", rc, err);
    assert_true(took >= 900 && took < 4000);
    assert_int_equal(access(dest, F_OK), -1);
    hf_http_free(c);
}

/* A file of n bytes (zeros past what is given). */
static int make_file(const char *path, const void *p, size_t len, int64_t n)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    if (len) assert_int_equal(write(fd, p, len), (ssize_t)len);
    assert_int_equal(ftruncate(fd, n), 0);
    lseek(fd, 0, SEEK_SET);
    return fd;
}

static void test_upload(void **state)
{
    (void)state;
    char path[400], err[512], wrong[HF_SHA256_HEX];
    long st = 0;
    json_t *resp = NULL;
    snprintf(path, sizeof path, "%s/up.bin", dir);
    hf_http *c = hf_http_new(base, "tok", 5000, 0);
    int fd = make_file(path, obj, OBJ_SIZE, OBJ_SIZE);
    int rc = hf_xfer_put(c, "PUT", "/up", fd, OBJ_SIZE, obj_sha, NULL, &st, &resp, err, sizeof err);
    if (rc) fail_msg("hf_xfer_put: %s", err);
    assert_int_equal(st, 201);
    assert_string_equal(json_string_value(json_object_get(resp, "sha256")), obj_sha);
    json_decref(resp);
    /* the declared hash is not the bytes': the server's 422 */
    memcpy(wrong, obj_sha, sizeof wrong);
    wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
    lseek(fd, 0, SEEK_SET);
    rc = hf_xfer_put(c, "PUT", "/up", fd, OBJ_SIZE, wrong, NULL, &st, &resp, err, sizeof err);
    assert_int_equal(rc, HF_ECORRUPT);
    assert_int_equal(st, 422);
    assert_non_null(strstr(err, "body hashes to"));
    json_decref(resp);
    /* the file is shorter than the size given: HF_EIO, not a hang */
    lseek(fd, 0, SEEK_SET);
    rc = hf_xfer_put(c, "PUT", "/up", fd, OBJ_SIZE + 100, obj_sha, NULL, &st, NULL, err, sizeof err);
    assert_int_equal(rc, HF_EIO);
    close(fd);
    hf_http_free(c);
}

/* A bare server for one connection: reads the request's headers, answers
 * 404 at once, waits a moment and closes with the body unread (a reset),
 * as a scheduler that refuses an upload for an unknown trial may. */
static void *rst_server(void *arg)
{
    int ls = *(int *)arg, fd = accept(ls, NULL, NULL);
    char buf[4096];
    size_t n = 0;
    static const char ans[] = "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                              "Content-Length: 27\r\nConnection: close\r\n\r\n{\"error\": \"no such trial\"}";
    if (fd < 0) return NULL;
    while (n < sizeof buf - 1) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r <= 0) break;
        n += (size_t)r;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n")) break;
    }
    if (write(fd, ans, sizeof ans - 1) < 0) {}
    hf_sleep_ms(50);
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
    return NULL;
}

/* The server answers 404 before reading the body and closes: the 404 is
 * the answer, whatever curl saw while it was still sending (libmicrohttpd
 * closing politely, and a bare server closing with a reset). */
static void test_upload_early_refusal(void **state)
{
    (void)state;
    char path[400], err[512], sha[HF_SHA256_HEX], rst_base[64];
    memset(sha, 'a', 64);
    sha[64] = 0;
    snprintf(path, sizeof path, "%s/big.bin", dir);
    for (int i = 0; i < 4; i++) {
        long st = 0;
        pthread_t th;
        int ls = -1;
        hf_http *c = NULL;
        if (i % 2 == 0) {
            c = hf_http_new(base, "tok", 5000, 0);
        } else {
            struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
            socklen_t sl = sizeof sa;
            ls = socket(AF_INET, SOCK_STREAM, 0);
            assert_int_equal(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
            assert_int_equal(listen(ls, 1), 0);
            getsockname(ls, (struct sockaddr *)&sa, &sl);
            snprintf(rst_base, sizeof rst_base, "http://127.0.0.1:%d", ntohs(sa.sin_port));
            assert_int_equal(pthread_create(&th, NULL, rst_server, &ls), 0);
            c = hf_http_new(rst_base, "tok", 5000, 0);
        }
        int fd = make_file(path, NULL, 0, BIG_SIZE);
        int rc = hf_xfer_put(c, "PUT", "/refuse", fd, BIG_SIZE, sha, NULL, &st, NULL, err, sizeof err);
        close(fd);
        if (ls >= 0) {
            pthread_join(th, NULL);
            close(ls);
        }
        if (rc != HF_ENOTFOUND) fail_msg("early refusal %d: rc %d (%s)", i, rc, err);
        assert_int_equal(st, 404);
        assert_non_null(strstr(err, "no such trial"));
        hf_http_free(c);
    }
    unlink(path);
}

/* The hash fed piece by piece (hf_sha256_begin/update/end) is the known
 * digest, and hf_sha256_fd's over the same bytes. */
static void test_sha256_pieces(void **state)
{
    (void)state;
    char hex[HF_SHA256_HEX], fhex[HF_SHA256_HEX];
    hf_sha256_ctx *h = NULL;
    assert_int_equal(hf_sha256_begin(&h), 0);
    hf_sha256_update(h, "a", 1);
    hf_sha256_update(h, "", 0);
    hf_sha256_update(h, "bc", 2);
    hf_sha256_end(h, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    int p[2];
    int64_t n = 0;
    assert_int_equal(pipe(p), 0);
    assert_int_equal(write(p[1], "abc", 3), 3);
    close(p[1]);
    assert_int_equal(hf_sha256_fd(p[0], -1, fhex, &n), 0);
    close(p[0]);
    assert_string_equal(fhex, hex);
    assert_int_equal(n, 3);
    hf_sha256_end(NULL, hex);
    assert_string_equal(hex, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_download_good),
        cmocka_unit_test(test_download_refused),
        cmocka_unit_test(test_download_stall),
        cmocka_unit_test(test_upload),
        cmocka_unit_test(test_upload_early_refusal),
        cmocka_unit_test(test_sha256_pieces),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
