/*
 * test_agent_objects.c — the agent's object cache and transfers
 * (agent/agent_objects.c) against a real scheduler HTTP server started in
 * this process (api_start on a loopback port, a real migrated SQLite
 * store, a real checkpoint store on disk): a file added to one agent's
 * cache uploads (streamed PUT) and is recorded with its name; a second
 * agent with its own work directory fetches it by hash, verified, as a
 * hard link of its cache file; an object corrupted in the store is
 * refused with nothing cached; a cache object whose bytes changed is
 * refused by the scheduler (HF_ECORRUPT); unknown objects and trials
 * answer HF_ENOTFOUND; the LRU bound evicts the least recently used
 * objects and survives a reopen; shared_fs mode writes the object into
 * the shared store, registers it (the scheduler hashes it) and a fetch
 * copies it from there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agent/agent_objects.h"
#include "hf_err.h"
#include "scheduler/api/api.h"
#include "scheduler/store/ckstore.h"
#include "scheduler/notify/events.h"
#include "tests/unit/unit_fixture.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ABC_SHA256 "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

static char dir[256], ckdir[300], url[64];
static store *st;
static sched *core;
static events_hub *ev;
static ckstore *ck;
static api *srv;
static int64_t trial;

static int setup(void **state)
{
    (void)state;
    char err[256], db[300];
    if (unit_tmpdir(dir, sizeof dir, "aobj")) return -1;
    snprintf(db, sizeof db, "%s/s.db", dir);
    snprintf(ckdir, sizeof ckdir, "%s/store", dir);
    unit_open_core(db, NULL, &st, &core);
    int64_t ag = unit_register(core, "a1", 1);
    unit_submit(core, "{\"name\": \"o\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                      "\"searcher\": {\"name\": \"random\", \"max_trials\": 1},"
                      "\"hyperparameters\": {\"x\": 1}, \"trial\": {\"command\": [\"true\"]}}");
    json_t *hb = json_pack("{s[]}", "running"), *out = NULL;
    hf_jerr je;
    if (sched_agent_heartbeat(core, ag, hb, &out, &je)) return -1;   /* places the trial: it exists now */
    json_decref(hb);
    json_decref(out);
    trial = unit_one_int(store_db(st), "SELECT min(id) FROM trials");
    if (trial <= 0) return -1;
    if (ckstore_open(ckdir, db, 64 << 20, &ck, err, sizeof err)) return -1;
    if (!(ev = events_new())) return -1;
    api_config ac = {.listen = "127.0.0.1:0", .threads = 2, .ck = ck};
    if (api_start(&ac, core, st, ev, NULL, &srv, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    snprintf(url, sizeof url, "http://127.0.0.1:%d", api_port(srv));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    api_stop(srv);
    sched_free(core);
    events_free(ev);
    ckstore_close(ck);
    store_close(st);
    return unit_rmtree(dir);
}

static void write_file(const char *path, const char *fill, size_t n)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) fputc(fill[i % strlen(fill)], f);
    fclose(f);
}

static size_t read_file(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, len, f);
    fclose(f);
    return n;
}

static agent_objects *open_ao(const char *name, int64_t max)
{
    char wd[400], err[256];
    agent_objects *ao = NULL;
    snprintf(wd, sizeof wd, "%s/%s", dir, name);
    mkdir(wd, 0755);
    int rc = agent_objects_open(wd, url, NULL, max, &ao, err, sizeof err);
    if (rc) fail_msg("agent_objects_open: %s", err);
    return ao;
}

static void test_hash_file(void **state)
{
    (void)state;
    char p[300], hex[65], err[256];
    int64_t n = 0;
    snprintf(p, sizeof p, "%s/abc", dir);
    write_file(p, "abc", 3);
    assert_int_equal(agent_objects_hash_file(p, hex, &n, err, sizeof err), 0);
    assert_string_equal(hex, ABC_SHA256);
    assert_int_equal(n, 3);
    snprintf(p, sizeof p, "%s/nope", dir);
    assert_int_equal(agent_objects_hash_file(p, hex, &n, err, sizeof err), HF_ENOTFOUND);
}

/* Agent A adds and uploads; agent B (its own workdir) fetches by hash. */
static void test_upload_then_fetch(void **state)
{
    (void)state;
    char p[300], dest[400], hex[65], err[512], buf[4 << 20];
    int64_t size = 0;
    struct stat sb;
    agent_objects *a = open_ao("wa", 0), *b = open_ao("wb", 0);
    snprintf(p, sizeof p, "%s/ckpt-000000000003.hfck", dir);
    write_file(p, "weights-", 3 << 20);                 /* 3 MiB: several read chunks */
    assert_int_equal(agent_objects_add(a, p, hex, &size, err, sizeof err), 0);
    assert_int_equal(size, 3 << 20);
    assert_true(agent_objects_has(a, hex));
    assert_false(agent_objects_has(b, hex));
    int rc = agent_objects_upload(a, hex, trial, 3, 1, "ckpt-000000000003.hfck", err, sizeof err);
    if (rc) fail_msg("upload: %s", err);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM checkpoints WHERE sha256='%s' AND state='stored' AND step=3", hex);
    assert_int_equal(unit_one_int(store_db(st), sql), 1);

    snprintf(dest, sizeof dest, "%s/wb/restored.hfck", dir);
    rc = agent_objects_get(b, hex, size, dest, err, sizeof err);
    if (rc) fail_msg("get: %s", err);
    assert_true(agent_objects_has(b, hex));
    assert_int_equal(read_file(dest, buf, sizeof buf), (size_t)(3 << 20));
    assert_memory_equal(buf, "weights-weights-", 16);
    assert_int_equal(stat(dest, &sb), 0);
    assert_int_equal(sb.st_nlink, 2);                   /* a hard link of the cache file */
    /* again, from the cache: replaces dest */
    assert_int_equal(agent_objects_get(b, hex, size, dest, err, sizeof err), 0);
    /* wrong size for a cached object */
    assert_int_equal(agent_objects_get(b, hex, size + 1, dest, err, sizeof err), HF_ECORRUPT);

    json_t *l = agent_objects_list(b, 10);
    assert_int_equal(json_array_size(l), 1);
    assert_string_equal(json_string_value(json_array_get(l, 0)), hex);
    json_decref(l);

    /* unknown object, unknown trial, malformed hash */
    assert_int_equal(agent_objects_get(b, ABC_SHA256, 3, dest, err, sizeof err), HF_ENOTFOUND);
    assert_int_equal(agent_objects_upload(a, hex, 999999, 1, 1, "x", err, sizeof err), HF_ENOTFOUND);
    assert_int_equal(agent_objects_get(b, "../../etc/passwd", 3, dest, err, sizeof err), HF_EINVAL);
    agent_objects_close(a);
    agent_objects_close(b);
}

/* Corruption both ways: a store object with other bytes is refused by the
 * fetcher (nothing cached, nothing at dest); a cache object whose bytes
 * changed is refused by the scheduler. */
static void test_corruption(void **state)
{
    (void)state;
    char p[300], obj[400], dest[400], hex[65], err[512];
    int64_t size = 0;
    agent_objects *a = open_ao("ca", 0), *b = open_ao("cb", 0);
    snprintf(p, sizeof p, "%s/c1", dir);
    write_file(p, "corrupt-me", 100000);
    assert_int_equal(agent_objects_add(a, p, hex, &size, err, sizeof err), 0);
    assert_int_equal(agent_objects_upload(a, hex, trial, 5, 1, "c1", err, sizeof err), 0);
    /* flip bytes of the store's object (same size) */
    snprintf(obj, sizeof obj, "%s/objects/%.2s/%s", ckdir, hex, hex);
    int fd = open(obj, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "XXXX", 4, 500), 4);
    close(fd);
    snprintf(dest, sizeof dest, "%s/cb/dest", dir);
    assert_int_equal(agent_objects_get(b, hex, size, dest, err, sizeof err), HF_ECORRUPT);
    assert_non_null(strstr(err, "SHA-256"));
    assert_false(agent_objects_has(b, hex));
    assert_int_equal(access(dest, F_OK), -1);
    unlink(obj);

    /* the cache file (a hard link of p) rewritten in place: the upload is refused */
    snprintf(obj, sizeof obj, "%s/ca/objects/%.2s/%s", dir, hex, hex);
    fd = open(obj, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "YYYY", 4, 10), 4);
    close(fd);
    assert_int_equal(agent_objects_upload(a, hex, trial, 6, 1, "c1", err, sizeof err), HF_ECORRUPT);
    assert_non_null(strstr(err, "422"));
    agent_objects_close(a);
    agent_objects_close(b);
}

/* The LRU bound: 3 objects of 1000 bytes fit in 3500; the fourth evicts
 * the least recently used; the order survives a reopen. */
static void test_lru(void **state)
{
    (void)state;
    char p[300], hex[4][65], err[256], fill[2] = "a";
    int64_t size;
    agent_objects *a = open_ao("lru", 3500);
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/lru-%d", dir, i);
        fill[0] = (char)('a' + i);
        write_file(p, fill, 1000);
        assert_int_equal(agent_objects_add(a, p, hex[i], &size, err, sizeof err), 0);
        usleep(20000);      /* distinct mtimes for the reopen */
    }
    assert_true(agent_objects_has(a, hex[0]));   /* 0 is now the most recent */
    usleep(20000);
    snprintf(p, sizeof p, "%s/lru-3", dir);
    write_file(p, "d", 1000);
    assert_int_equal(agent_objects_add(a, p, hex[3], &size, err, sizeof err), 0);
    assert_false(agent_objects_has(a, hex[1]));  /* the least recently used */
    assert_true(agent_objects_has(a, hex[0]));
    usleep(20000);
    assert_true(agent_objects_has(a, hex[2]));
    usleep(20000);
    assert_true(agent_objects_has(a, hex[3]));
    int64_t n, bytes;
    agent_objects_stats(a, &n, &bytes);
    assert_int_equal(n, 3);
    assert_int_equal(bytes, 3000);
    agent_objects_close(a);
    /* reopen with a smaller bound: the oldest by use goes first (the
     * has() calls above used 0, then 2, then 3) */
    a = open_ao("lru", 2500);
    agent_objects_stats(a, &n, &bytes);
    assert_int_equal(n, 2);
    assert_false(agent_objects_has(a, hex[0]));
    assert_true(agent_objects_has(a, hex[2]));
    assert_true(agent_objects_has(a, hex[3]));
    agent_objects_close(a);
}

/* shared_fs: the object is written into the store's directory by the
 * agent and registered (POST: the scheduler hashes it); another agent
 * fetches it by copying from the shared directory; a shared object whose
 * bytes do not match its name is refused (and removed) at registration. */
static void test_shared_fs(void **state)
{
    (void)state;
    char p[300], obj[400], dest[400], hex[65], err[512], sql[256];
    int64_t size = 0;
    ckstore_set_shared(ck, 1);
    agent_objects *a = open_ao("sa", 0), *b = open_ao("sb", 0);
    assert_int_equal(agent_objects_set_shared(a, ckdir), 0);
    assert_int_equal(agent_objects_set_shared(b, ckdir), 0);
    snprintf(p, sizeof p, "%s/shared-ckpt", dir);
    write_file(p, "shared-", 200000);
    assert_int_equal(agent_objects_add(a, p, hex, &size, err, sizeof err), 0);
    int rc = agent_objects_upload(a, hex, trial, 7, 1, "shared-ckpt", err, sizeof err);
    if (rc) fail_msg("shared upload: %s", err);
    snprintf(obj, sizeof obj, "%s/objects/%.2s/%s", ckdir, hex, hex);
    assert_int_equal(access(obj, F_OK), 0);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM checkpoints WHERE sha256='%s' AND step=7 AND name='shared-ckpt'", hex);
    assert_int_equal(unit_one_int(store_db(st), sql), 1);
    snprintf(dest, sizeof dest, "%s/sb/x", dir);
    assert_int_equal(agent_objects_get(b, hex, size, dest, err, sizeof err), 0);
    assert_true(agent_objects_has(b, hex));

    /* a corrupt object in the shared store: registration refused, file removed */
    int fd = open(obj, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "ZZ", 2, 100), 2);
    close(fd);
    assert_int_equal(agent_objects_upload(a, hex, trial, 8, 1, "shared-ckpt", err, sizeof err), HF_ECORRUPT);
    assert_int_equal(access(obj, F_OK), -1);
    /* the next attempt writes it again from the (intact) cache */
    assert_int_equal(agent_objects_upload(a, hex, trial, 8, 1, "shared-ckpt", err, sizeof err), 0);
    agent_objects_close(a);
    agent_objects_close(b);
    ckstore_set_shared(ck, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_file),
        cmocka_unit_test(test_upload_then_fetch),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_lru),
        cmocka_unit_test(test_shared_fs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
