/*
 * test_agent_prep.c — the agent's preparation pool (agent/agent_prep.c):
 * restores and code contexts fetched on several workers, so a slow one
 * never delays another trial's start. The objects come from a real HTTP
 * server on a loopback port (libmicrohttpd in this process, serving
 * GET /api/v1/objects/SHA as the scheduler does), where two objects
 * trickle out slowly (about 2 s each). Submitted in the order slow
 * restore, slow context, fast context, fast restore, the two fast ones
 * must come back while both slow ones are still under way (one serial
 * preparation thread, as the agent had, fails this), then the slow ones
 * complete, verified, with the restore at its place and the context
 * unpacked. A restore of an object the server does not have comes back
 * as a restore failure naming the checkpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_prep.h"
#include "hf_err.h"
#include "hf_json.h"
#include "hf_sha256.h"
#include "hf_time.h"
#include "tests/unit/unit_fixture.h"

#include <archive.h>
#include <archive_entry.h>
#include <gnutls/crypto.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOW_CHUNK  4096
#define SLOW_CHUNKS 20            /* one chunk per 100 ms: about 2 s */

typedef struct obj {
    char   sha[HF_SHA256_HEX];
    char  *data;
    size_t len;
    int    slow;
} obj;

static obj objs[4];               /* slow restore, slow context, fast context, fast restore */
static size_t nobjs;
static struct MHD_Daemon *d;
static char dir[256], url[64];
static atomic_int stopping;

static void obj_add(char *data, size_t len, int slow)
{
    unsigned char dig[32];
    obj *o = &objs[nobjs++];
    gnutls_hash_fast(GNUTLS_DIG_SHA256, data, len, dig);
    hf_sha256_hex(dig, o->sha);
    o->data = data;
    o->len = len;
    o->slow = slow;
}

/* A gzip'd tar with one file name holding body, padded to at least min
 * bytes with an incompressible second file. RET malloc'd bytes, *len. */
static char *tarball(const char *name, const char *body, size_t min, size_t *len)
{
    size_t cap = min + 65536, used = 0;
    char *buf = malloc(cap);
    struct archive *a = archive_write_new();
    struct archive_entry *ae = archive_entry_new();
    archive_write_add_filter_gzip(a);
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_memory(a, buf, cap, &used), ARCHIVE_OK);
    archive_entry_set_pathname(ae, name);
    archive_entry_set_filetype(ae, AE_IFREG);
    archive_entry_set_perm(ae, 0644);
    archive_entry_set_size(ae, (la_int64_t)strlen(body));
    archive_write_header(a, ae);
    archive_write_data(a, body, strlen(body));
    if (min) {
        char *noise = malloc(min);
        uint64_t x = 88172645463325252ull;              /* xorshift64: gzip cannot shrink it */
        for (size_t i = 0; i < min; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise[i] = (char)(x >> 24);
        }
        archive_entry_clear(ae);
        archive_entry_set_pathname(ae, "noise.bin");
        archive_entry_set_filetype(ae, AE_IFREG);
        archive_entry_set_perm(ae, 0644);
        archive_entry_set_size(ae, (la_int64_t)min);
        archive_write_header(a, ae);
        archive_write_data(a, noise, min);
        free(noise);
    }
    archive_write_close(a);
    archive_write_free(a);
    archive_entry_free(ae);
    *len = used;
    return buf;
}

/* A slow object: a chunk every 100 ms (until the test stops). */
static ssize_t slow_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    const obj *o = cls;
    if (pos >= o->len) return MHD_CONTENT_READER_END_OF_STREAM;
    if (atomic_load(&stopping)) return MHD_CONTENT_READER_END_WITH_ERROR;
    hf_sleep_ms(100);
    size_t n = o->len - pos < SLOW_CHUNK ? o->len - pos : SLOW_CHUNK;
    if (n > max) n = max;
    memcpy(buf, o->data + pos, n);
    return (ssize_t)n;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *u, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **ptr)
{
    (void)cls; (void)method; (void)version; (void)upload; (void)upload_size; (void)ptr;
    struct MHD_Response *r = NULL;
    unsigned code = 200;
    for (size_t i = 0; i < nobjs && !r; i++) {
        if (strncmp(u, "/api/v1/objects/", 16) || strcmp(u + 16, objs[i].sha)) continue;
        r = objs[i].slow ? MHD_create_response_from_callback(objs[i].len, SLOW_CHUNK, slow_reader, &objs[i], NULL)
                         : MHD_create_response_from_buffer(objs[i].len, objs[i].data, MHD_RESPMEM_PERSISTENT);
    }
    if (!r) {
        static const char nf[] = "{\"error\": \"no such object\"}";
        r = MHD_create_response_from_buffer(sizeof nf - 1, (void *)nf, MHD_RESPMEM_PERSISTENT);
        code = 404;
    }
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static int setup(void **state)
{
    (void)state;
    size_t len;
    if (unit_tmpdir(dir, sizeof dir, "prep")) return -1;
    char *slow_ck = malloc(SLOW_CHUNK * SLOW_CHUNKS);
    for (size_t i = 0; i < SLOW_CHUNK * SLOW_CHUNKS; i++) slow_ck[i] = (char)(i % 251);
    obj_add(slow_ck, SLOW_CHUNK * SLOW_CHUNKS, 1);
    char *slow_ctx = tarball("slow.py", "slow = 1\n", SLOW_CHUNK * (SLOW_CHUNKS - 1), &len);
    obj_add(slow_ctx, len, 1);
    char *fast_ctx = tarball("fast.py", "fast = 1\n", 0, &len);
    obj_add(fast_ctx, len, 0);
    obj_add(strdup("fast checkpoint\n"), 16, 0);
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL, handler,
                         NULL, MHD_OPTION_END);
    if (!d) return -1;
    snprintf(url, sizeof url, "http://127.0.0.1:%u", MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    atomic_store(&stopping, 1);
    MHD_stop_daemon(d);
    for (size_t i = 0; i < nobjs; i++) free(objs[i].data);
    return unit_rmtree(dir);
}

/* An assignment of trial tid with a restore (o) and/or a context (c). */
static agent_spec *spec(int64_t tid, const obj *restore, const obj *context)
{
    char cd[64];
    hf_jerr e;
    snprintf(cd, sizeof cd, "experiments/3/trials/%lld/checkpoints", (long long)tid);
    json_t *a = json_pack("{sIsIsIs[s]ss}", "trial_id", (json_int_t)tid, "attempt", (json_int_t)1, "experiment_id",
                          (json_int_t)3, "argv", "./run.sh", "checkpoint_dir", cd);
    if (restore)
        json_object_set_new(a, "restore", json_pack("{sssIsssIsI}", "sha256", restore->sha, "size",
                                                    (json_int_t)restore->len, "name", "ck.bin", "step", (json_int_t)5,
                                                    "trial", (json_int_t)tid));
    if (context)
        json_object_set_new(a, "context", json_pack("{sssI}", "sha256", context->sha, "size", (json_int_t)context->len));
    agent_spec *sp = agent_spec_parse(a, "assign[0]", &e);
    if (!sp) fail_msg("spec: %s: %s", e.field, e.msg);
    json_decref(a);
    return sp;
}

/* Take what is prepared into got[] (by trial id 1..4, when it came back). */
static void collect(agent_prep *p, int64_t t0, int64_t when[8], agent_prep_done got[8])
{
    agent_prep_done *dn = NULL;
    size_t n = 0;
    agent_prep_take(p, &dn, &n);
    for (size_t i = 0; i < n; i++) {
        int64_t t = dn[i].spec->trial_id;
        assert_true(t >= 1 && t < 8);
        got[t] = dn[i];
        when[t] = hf_mono_ms() - t0;
    }
    free(dn);
}

static void test_slow_does_not_block(void **state)
{
    (void)state;
    char err[256], work[400], p[600];
    agent_objects *ao = NULL;
    agent_prep_done got[8];
    int64_t when[8] = {0};
    memset(got, 0, sizeof got);
    snprintf(work, sizeof work, "%s/work", dir);
    mkdir(work, 0755);
    assert_int_equal(agent_objects_open(work, url, NULL, 0, &ao, err, sizeof err), 0);
    agent_prep *prep = agent_prep_new(work, ao, -1);
    assert_non_null(prep);
    int64_t t0 = hf_mono_ms();
    assert_int_equal(agent_prep_submit(prep, spec(1, &objs[0], NULL), AGENT_PREP_RESTORE), 0);
    assert_int_equal(agent_prep_submit(prep, spec(2, NULL, &objs[1]), AGENT_PREP_CONTEXT), 0);
    assert_int_equal(agent_prep_submit(prep, spec(3, NULL, &objs[2]), AGENT_PREP_CONTEXT), 0);
    assert_int_equal(agent_prep_submit(prep, spec(4, &objs[3], NULL), AGENT_PREP_RESTORE), 0);
    /* the fast ones come back while the slow ones still trickle */
    while ((!got[3].spec || !got[4].spec) && hf_mono_ms() - t0 < 10000) {
        collect(prep, t0, when, got);
        hf_sleep_ms(10);
    }
    if (!got[3].spec || !got[4].spec || got[1].spec || got[2].spec)
        fail_msg("fast ones at %lld/%lld ms, slow ones at %lld/%lld ms", (long long)when[3], (long long)when[4],
                 (long long)when[1], (long long)when[2]);
    assert_true(when[3] < 1000 && when[4] < 1000);
    assert_int_equal(agent_prep_pending(prep), 2);
    while ((!got[1].spec || !got[2].spec) && hf_mono_ms() - t0 < 20000) {
        collect(prep, t0, when, got);
        hf_sleep_ms(10);
    }
    for (int t = 1; t <= 4; t++) {
        if (!got[t].spec || got[t].rc) fail_msg("trial %d: rc %d (%s)", t, got[t].rc, got[t].err);
        agent_spec_free(got[t].spec);
    }
    if (when[1] < 1500 || when[2] < 1500)
        fail_msg("slow ones at %lld/%lld ms (%zu/%zu bytes)", (long long)when[1], (long long)when[2], objs[0].len,
                 objs[1].len);
    assert_non_null(strstr(got[1].restore_note, "restored checkpoint ck.bin (step 5 of trial 1"));
    assert_non_null(strstr(got[2].note, "2 files"));
    snprintf(p, sizeof p, "%s/experiments/3/trials/4/checkpoints/ck.bin", work);
    assert_int_equal(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/experiments/3/trials/2/slow.py", work);
    assert_int_equal(access(p, R_OK), 0);
    snprintf(p, sizeof p, "%s/experiments/3/trials/3/fast.py", work);
    assert_int_equal(access(p, R_OK), 0);

    /* an object the server does not have: a restore failure */
    obj missing = {.len = 3};
    memset(missing.sha, 'e', 64);
    assert_int_equal(agent_prep_submit(prep, spec(5, &missing, NULL), AGENT_PREP_RESTORE), 0);
    while (!got[5].spec && hf_mono_ms() - t0 < 30000) {
        collect(prep, t0, when, got);
        hf_sleep_ms(10);
    }
    assert_non_null(got[5].spec);
    assert_int_equal(got[5].rc, HF_ENOTFOUND);
    assert_true(got[5].restore_failed);
    assert_non_null(strstr(got[5].err, "cannot restore checkpoint ck.bin (step 5 of trial 5)"));
    agent_spec_free(got[5].spec);
    agent_prep_free(prep);
    agent_objects_close(ao);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_does_not_block),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
