/*
 * test_scheduler_ckstore.c — the checkpoint store (scheduler/store/ckstore.c) on
 * real files in a scratch directory and a real migrated SQLite database:
 * an upload streamed in uneven chunks becomes one verified object and one
 * row; a wrong hash or size is refused with nothing visible (no object,
 * no temp file, no row); the same content twice is one object; an
 * interrupted upload and the temp files of a "crash" are removed; a
 * malformed hash can name no path; and a full or read-only filesystem
 * (a real tmpfs, mounted when the test may: root) gives an error and
 * leaves nothing behind.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/store/store.h"
#include "tests/unit/unit_fixture.h"

#include <dirent.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define ABC_SHA256 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define MAX_BYTES  (64 << 20)

static char dir[256], ckdir[300], dbpath[300];
static store *st;

static int setup(void **state)
{
    (void)state;
    char err[256];
    if (unit_tmpdir(dir, sizeof dir, "ckstore")) return -1;
    snprintf(dbpath, sizeof dbpath, "%s/t.db", dir);
    if (store_open(dbpath, &st, err, sizeof err)) return -1;
    /* One experiment with one trial (id 1) for the rows to point at. */
    return sqlite3_exec(store_db(st),
                        "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES(1,'e','ACTIVE','{}',1,0);"
                        "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) "
                        "VALUES(1,1,0,'RUNNING','{}',1,0);", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    store_close(st);
    return unit_rmtree(dir);
}

/* A fresh store directory per test: dir/<name>. */
static ckstore *open_ck(const char *name, const char *db)
{
    char err[256] = "";
    ckstore *ck = NULL;
    snprintf(ckdir, sizeof ckdir, "%s/%s", dir, name);
    if (ckstore_open(ckdir, db, MAX_BYTES, &ck, err, sizeof err)) fail_msg("ckstore_open %s: %s", ckdir, err);
    return ck;
}

/* Files in ckdir/sub (recursively for objects/), not counting folders. */
static int count_files(const char *sub)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", ckdir, sub);
    DIR *d = opendir(path);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char sub2[400];
        snprintf(sub2, sizeof sub2, "%s/%s", sub, e->d_name);
        int k = e->d_type == DT_DIR ? count_files(sub2) : 1;
        n += k > 0 ? k : 0;
    }
    closedir(d);
    return n;
}

static void sha_hex(const void *data, size_t n, char out[CKSTORE_HASH_LEN + 1])
{
    unsigned char d[32];
    assert_int_equal(gnutls_hash_fast(GNUTLS_DIG_SHA256, data, n, d), 0);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Upload data in chunks of 1, 7, 4096, 65536, 1, ... bytes, declaring
 * (sha, size). RET commit's code; msg gets its message. */
static int upload(ckstore *ck, const char *sha, int64_t size, const unsigned char *data, size_t n, ckstore_info *info,
                  char *msg, size_t msglen)
{
    static const size_t steps[] = {1, 7, 4096, 65536, 333};
    ckstore_upload *up = NULL;
    int rc = ckstore_upload_begin(ck, sha, size, &up);
    if (rc) return rc;
    assert_int_equal(count_files("tmp"), 1);   /* streamed to a temp file */
    for (size_t off = 0, i = 0; off < n; i++) {
        size_t k = steps[i % 5];
        if (k > n - off) k = n - off;
        ckstore_upload_write(up, data + off, k);
        off += k;
    }
    return ckstore_upload_commit(up, info, msg, msglen);
}

/* upload() of the 3 bytes "abc"; the commit's message in abc_msg. */
static char abc_msg[256];
static int upload_abc(ckstore *ck, const char *sha, int64_t size)
{
    ckstore_info info;
    return upload(ck, sha, size, (const unsigned char *)"abc", 3, &info, abc_msg, sizeof abc_msg);
}

static unsigned char *random_bytes(size_t n)
{
    unsigned char *b = malloc(n);
    assert_non_null(b);
    srand(42);
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rand();
    return b;
}

static void test_known_vector(void **state)
{
    (void)state;
    ckstore *ck = open_ck("abc", NULL);
    ckstore_info info;
    char msg[256];
    assert_int_equal(upload(ck, ABC_SHA256, 3, (const unsigned char *)"abc", 3, &info, msg, sizeof msg), 0);
    assert_string_equal(info.sha256, ABC_SHA256);
    char path[400];
    snprintf(path, sizeof path, "%s/objects/ba/" ABC_SHA256, ckdir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 3);
    /* Without a database: files only. */
    json_t *out = NULL;
    assert_int_equal(ckstore_list(ck, 1, &out), HF_EUNSUP);
    assert_int_equal(ckstore_record(ck, 1, &info), HF_EUNSUP);
    ckstore_close(ck);
}

/* The object sha exists and holds exactly the n bytes of data. */
static void assert_object_is(ckstore *ck, const char *sha, const unsigned char *data, size_t n)
{
    int fd = -1;
    int64_t size = 0;
    assert_int_equal(ckstore_open_object(ck, sha, &fd, &size), 0);
    assert_int_equal(size, n);
    unsigned char *back = malloc(n);
    assert_non_null(back);
    size_t got = 0;
    ssize_t r;
    while (got < n && (r = read(fd, back + got, n - got)) > 0) got += (size_t)r;
    close(fd);
    assert_int_equal(got, n);
    assert_memory_equal(back, data, n);
    free(back);
}

static void test_stream_record_list_read(void **state)
{
    (void)state;
    size_t n = (3u << 20) + 12345;
    unsigned char *data = random_bytes(n);
    char sha[CKSTORE_HASH_LEN + 1], msg[256];
    sha_hex(data, n, sha);
    ckstore *ck = open_ck("stream", dbpath);
    ckstore_info info = {.step = 0};
    assert_int_equal(upload(ck, sha, (int64_t)n, data, n, &info, msg, sizeof msg), 0);
    assert_string_equal(info.sha256, sha);
    assert_int_equal(info.size, n);
    assert_int_equal(count_files("tmp"), 0);
    assert_int_equal(count_files("objects"), 1);
    info.step = 7;
    info.attempt = 2;
    assert_int_equal(ckstore_record(ck, 1, &info), 0);
    assert_true(info.time > 0);
    assert_int_equal(ckstore_record(ck, 999, &info), HF_ENOTFOUND);   /* no such trial */

    json_t *out = NULL;
    assert_int_equal(ckstore_list(ck, 1, &out), 0);
    json_t *arr = json_object_get(out, "checkpoints");
    assert_int_equal(json_array_size(arr), 1);
    json_t *c0 = json_array_get(arr, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "sha256")), sha);
    assert_int_equal(json_integer_value(json_object_get(c0, "size")), n);
    assert_int_equal(json_integer_value(json_object_get(c0, "step")), 7);
    assert_int_equal(json_integer_value(json_object_get(c0, "attempt")), 2);
    json_decref(out);

    assert_object_is(ck, sha, data, n);   /* the bytes read back are the bytes sent */

    int64_t objects, bytes;
    ckstore_stats(ck, &objects, &bytes);
    assert_int_equal(objects, 1);
    assert_int_equal(bytes, n);
    ckstore_close(ck);
    free(data);
}

/* Nothing of a refused upload is visible: no object, no temp file, no
 * change in the counters. */
static void assert_nothing_visible(ckstore *ck, int64_t objects_before)
{
    int64_t objects, bytes;
    ckstore_stats(ck, &objects, &bytes);
    assert_int_equal(objects, objects_before);
    assert_int_equal(count_files("tmp"), 0);
    assert_int_equal(count_files("objects"), objects_before);
}

static void test_hash_mismatch(void **state)
{
    (void)state;
    ckstore *ck = open_ck("badhash", dbpath);
    const char *wrong = "0000000000000000000000000000000000000000000000000000000000000000";
    assert_int_equal(upload_abc(ck, wrong, 3), HF_ECORRUPT);
    assert_non_null(strstr(abc_msg, "X-Hyperfarm-Sha256"));
    assert_non_null(strstr(abc_msg, ABC_SHA256));   /* says what the body's hash was */
    assert_nothing_visible(ck, 0);
    ckstore_close(ck);
}

static void test_size_mismatch(void **state)
{
    (void)state;
    ckstore *ck = open_ck("badsize", dbpath);
    /* Fewer bytes than declared. */
    assert_int_equal(upload_abc(ck, ABC_SHA256, 10), HF_ECORRUPT);
    assert_non_null(strstr(abc_msg, "Content-Length"));
    assert_nothing_visible(ck, 0);
    /* More bytes than declared: refused at the write that overflows. */
    ckstore_upload *up = NULL;
    assert_int_equal(ckstore_upload_begin(ck, ABC_SHA256, 2, &up), 0);
    assert_int_equal(ckstore_upload_write(up, "abc", 3), HF_ETOOBIG);
    assert_int_equal(count_files("tmp"), 0);   /* removed at once */
    assert_int_equal(ckstore_upload_write(up, "a", 1), HF_ETOOBIG);
    ckstore_info info;
    assert_int_equal(ckstore_upload_commit(up, &info, abc_msg, sizeof abc_msg), HF_ETOOBIG);
    assert_nothing_visible(ck, 0);
    /* Over the store's limit: refused before a temp file exists. */
    assert_int_equal(ckstore_upload_begin(ck, ABC_SHA256, (int64_t)MAX_BYTES + 1, &up), HF_ETOOBIG);
    assert_null(up);
    assert_int_equal(ckstore_upload_begin(ck, ABC_SHA256, -1, &up), HF_EINVAL);
    assert_nothing_visible(ck, 0);
    ckstore_close(ck);
}

static void test_dedup(void **state)
{
    (void)state;
    ckstore *ck = open_ck("dedup", dbpath);
    ckstore_info info = {.step = 1};
    char msg[256];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(upload(ck, ABC_SHA256, 3, (const unsigned char *)"abc", 3, &info, msg, sizeof msg), 0);
        info.step = i + 1;
        info.attempt = 0;
        assert_int_equal(ckstore_record(ck, 1, &info), 0);
    }
    int64_t objects, bytes;
    ckstore_stats(ck, &objects, &bytes);
    assert_int_equal(objects, 1);
    assert_int_equal(bytes, 3);
    assert_int_equal(count_files("objects"), 1);
    assert_int_equal(count_files("tmp"), 0);
    ckstore_close(ck);
}

static void test_abort_and_restart_cleans_temps(void **state)
{
    (void)state;
    ckstore *ck = open_ck("restart", NULL);
    assert_int_equal(upload_abc(ck, ABC_SHA256, 3), 0);
    /* An interrupted request: abort removes its temp file. */
    ckstore_upload *up = NULL;
    assert_int_equal(ckstore_upload_begin(ck, ABC_SHA256, 3, &up), 0);
    assert_int_equal(ckstore_upload_write(up, "ab", 2), 0);
    assert_int_equal(count_files("tmp"), 1);
    ckstore_upload_abort(up);
    assert_int_equal(count_files("tmp"), 0);
    ckstore_upload_abort(NULL);
    /* A crash: an upload's temp file stays (the process never aborted it),
     * and so does a stray file of an older run. */
    assert_int_equal(ckstore_upload_begin(ck, ABC_SHA256, 3, &up), 0);
    assert_int_equal(ckstore_upload_write(up, "ab", 2), 0);
    char stray[400];
    snprintf(stray, sizeof stray, "%s/tmp/up-old", ckdir);
    FILE *f = fopen(stray, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(count_files("tmp"), 2);
    ckstore *again = open_ck("restart", NULL);
    assert_int_equal(count_files("tmp"), 0);
    int64_t objects, bytes;
    ckstore_stats(again, &objects, &bytes);   /* the objects are counted again */
    assert_int_equal(objects, 1);
    assert_int_equal(bytes, 3);
    ckstore_close(again);
    ckstore_upload_abort(up);                 /* its file is gone already */
    ckstore_close(ck);
}

static void test_hash_validation(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "abc", ABC_SHA256 "0", "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
        "../../../../../../../../../../../../../../../../../../etc/passwd",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015a/",
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ag",
    };
    ckstore *ck = open_ck("hashes", NULL);
    ckstore_upload *up = NULL;
    int fd = -1;
    int64_t size;
    assert_true(ckstore_hash_valid(ABC_SHA256));
    assert_false(ckstore_hash_valid(NULL));
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(ckstore_hash_valid(bad[i]));
        assert_int_equal(ckstore_upload_begin(ck, bad[i], 3, &up), HF_EINVAL);
        assert_int_equal(ckstore_open_object(ck, bad[i], &fd, &size), HF_EINVAL);
    }
    assert_int_equal(ckstore_open_object(ck, ABC_SHA256, &fd, &size), HF_ENOTFOUND);
    assert_int_equal(count_files("tmp"), 0);
    ckstore_close(ck);
}

/* A tmpfs of size at ckdir (root only). RET 0, or -1: the caller skips. */
static int mount_tmpfs(const char *name, const char *size)
{
    snprintf(ckdir, sizeof ckdir, "%s/%s", dir, name);
    if (mkdir(ckdir, 0700) != 0) return -1;
    return mount("hf-ckstore-test", ckdir, "tmpfs", 0, size);
}

static void test_full_disk(void **state)
{
    (void)state;
    if (mount_tmpfs("full", "size=1m")) { skip(); return; }
    char err[256];
    ckstore *ck = NULL;
    assert_int_equal(ckstore_open(ckdir, dbpath, MAX_BYTES, &ck, err, sizeof err), 0);
    size_t n = 2u << 20;
    unsigned char *data = random_bytes(n);
    char sha[CKSTORE_HASH_LEN + 1], msg[256];
    sha_hex(data, n, sha);
    /* A small upload (written on the caller's thread) fails at the write
     * that finds the disk full, and its partial file is gone at once: a
     * first object of 768 KiB fits, a second does not. */
    size_t small = 768u << 10;
    char sha_a[CKSTORE_HASH_LEN + 1], sha_b[CKSTORE_HASH_LEN + 1];
    sha_hex(data, small, sha_a);
    sha_hex(data + small, small, sha_b);
    ckstore_info info;
    assert_int_equal(upload(ck, sha_a, (int64_t)small, data, small, &info, msg, sizeof msg), 0);
    ckstore_upload *up = NULL;
    assert_int_equal(ckstore_upload_begin(ck, sha_b, (int64_t)small, &up), 0);
    int rc = 0;
    size_t off;
    for (off = 0; off < small; off += 65536)
        if ((rc = ckstore_upload_write(up, data + small + off, 65536))) break;
    assert_int_equal(rc, HF_ENOSPC);
    assert_int_equal(count_files("tmp"), 0);
    assert_int_equal(ckstore_upload_commit(up, &info, msg, sizeof msg), HF_ENOSPC);
    assert_nothing_visible(ck, 1);
    /* A large upload (write-behind thread): the writer's ENOSPC reaches the
     * caller at a later write or at the latest at the commit. */
    assert_int_equal(ckstore_upload_begin(ck, sha, (int64_t)n, &up), 0);
    rc = 0;
    for (off = 0; off < n; off += 65536)
        if ((rc = ckstore_upload_write(up, data + off, 65536))) break;
    assert_true(rc == 0 || rc == HF_ENOSPC);
    if (rc) assert_int_equal(count_files("tmp"), 0);   /* the partial file is gone at once */
    assert_int_equal(ckstore_upload_commit(up, &info, msg, sizeof msg), HF_ENOSPC);
    assert_nothing_visible(ck, 1);
    ckstore_close(ck);
    free(data);
    assert_int_equal(umount(ckdir), 0);
}

/* Large uploads go through the write-behind thread: more of them at once
 * than there are writer threads (the rest write on the caller's thread),
 * interleaved, in odd-sized pieces; each becomes exactly its bytes. An
 * upload abandoned with buffers queued leaves nothing. */
static void test_write_behind(void **state)
{
    (void)state;
    enum { N = 11 };                   /* > UP_MAX_PIPES (8) */
    size_t n = (2u << 20) + 4097;      /* two full buffers and a partial one */
    unsigned char *data = random_bytes(n * N);
    char sha[N][CKSTORE_HASH_LEN + 1], msg[256];
    ckstore *ck = open_ck("behind", NULL);
    ckstore_upload *up[N];
    for (int i = 0; i < N; i++) {
        sha_hex(data + (size_t)i * n, n, sha[i]);
        assert_int_equal(ckstore_upload_begin(ck, sha[i], (int64_t)n, &up[i]), 0);
    }
    static const size_t steps[] = {32768, 1, 65536 - 17, 333, 1 << 20};
    size_t off[N] = {0};
    for (int round = 0, left = N; left; round++) {
        left = 0;
        for (int i = 0; i < N; i++) {
            if (off[i] == n) continue;
            size_t k = steps[(round + i) % 5];
            if (k > n - off[i]) k = n - off[i];
            assert_int_equal(ckstore_upload_write(up[i], data + (size_t)i * n + off[i], k), 0);
            off[i] += k;
            left += off[i] < n;
        }
    }
    /* the last one is abandoned with everything queued */
    ckstore_upload_abort(up[N - 1]);
    for (int i = 0; i < N - 1; i++) {
        ckstore_info info;
        assert_int_equal(ckstore_upload_commit(up[i], &info, msg, sizeof msg), 0);
        assert_object_is(ck, sha[i], data + (size_t)i * n, n);
    }
    assert_int_equal(count_files("tmp"), 0);
    assert_int_equal(count_files("objects"), N - 1);
    /* a corrupted large upload is refused after the writer finished */
    ckstore_upload *bad = NULL;
    assert_int_equal(ckstore_upload_begin(ck, sha[0], (int64_t)n, &bad), 0);
    data[n / 2] ^= 1;
    for (size_t o = 0; o < n; o += 65536)
        assert_int_equal(ckstore_upload_write(bad, data + o, o + 65536 <= n ? 65536 : n - o), 0);
    ckstore_info info;
    assert_int_equal(ckstore_upload_commit(bad, &info, msg, sizeof msg), HF_ECORRUPT);
    assert_int_equal(count_files("tmp"), 0);
    assert_int_equal(count_files("objects"), N - 1);
    ckstore_close(ck);
    free(data);
}

static void test_read_only(void **state)
{
    (void)state;
    if (mount_tmpfs("ro", "size=1m")) { skip(); return; }
    char err[256] = "";
    ckstore *ck = NULL;
    assert_int_equal(ckstore_open(ckdir, NULL, MAX_BYTES, &ck, err, sizeof err), 0);
    assert_int_equal(mount(NULL, ckdir, NULL, MS_REMOUNT | MS_RDONLY, NULL), 0);
    ckstore_upload *up = NULL;
    assert_int_not_equal(ckstore_upload_begin(ck, ABC_SHA256, 3, &up), 0);
    assert_null(up);
    ckstore_close(ck);
    /* A store that cannot be created is an error at open, with a message. */
    char sub[400];
    snprintf(sub, sizeof sub, "%s/new", ckdir);
    assert_int_not_equal(ckstore_open(sub, NULL, MAX_BYTES, &ck, err, sizeof err), 0);
    assert_null(ck);
    assert_non_null(strstr(err, sub));
    assert_int_equal(umount(ckdir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_vector),
        cmocka_unit_test(test_stream_record_list_read),
        cmocka_unit_test(test_hash_mismatch),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_dedup),
        cmocka_unit_test(test_abort_and_restart_cleans_temps),
        cmocka_unit_test(test_hash_validation),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_write_behind),
        cmocka_unit_test(test_read_only),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
