/*
 * test_trainer_data.c — IDX parsing and loading from crafted files in a
 * temporary directory (plain and gzip), every error path (missing, wrong
 * magic, truncated, mismatched counts, corrupt gzip), the loader's
 * determinism from (seed, epoch) and its sharding across ranks; the
 * decoded-file cache (used, verified against the gzip trailer, rewritten
 * when corrupted, keyed by the source file, off on request); plus the real
 * Fashion-MNIST files when the Debian package is installed. The whole test
 * runs with HYPERFARM_DATA_CACHE in a temporary directory of its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "trainer/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char dir[256], cache[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hf-data-test-XXXXXX");
    snprintf(cache, sizeof cache, "/tmp/hf-data-cache-XXXXXX");
    if (!mkdtemp(dir) || !mkdtemp(cache)) return -1;
    return setenv("HYPERFARM_DATA_CACHE", cache, 1);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", dir, cache);
    return system(cmd) == 0 ? 0 : -1;
}

/* IDX bytes: images (n, h, w) with pixel value (i*7+j)%256, or labels i%10. */
static size_t make_idx(uint8_t *buf, int dims, int n, int h, int w)
{
    size_t k = 0;
    buf[k++] = 0; buf[k++] = 0; buf[k++] = 8; buf[k++] = (uint8_t)dims;
    int d[3] = {n, h, w};
    for (int i = 0; i < dims; i++) {
        buf[k++] = (uint8_t)(d[i] >> 24); buf[k++] = (uint8_t)(d[i] >> 16);
        buf[k++] = (uint8_t)(d[i] >> 8); buf[k++] = (uint8_t)d[i];
    }
    size_t per = dims == 3 ? (size_t)h * w : 1;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < per; j++) buf[k++] = dims == 3 ? (uint8_t)((i * 7 + j) % 256) : (uint8_t)(i % 10);
    return k;
}

static void write_file(const char *name, const uint8_t *b, size_t n, int gz)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (gz) {
        gzFile f = gzopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, b, (unsigned)n), (int)n);
        gzclose(f);
    } else {
        FILE *f = fopen(p, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b, 1, n, f), n);
        fclose(f);
    }
}

static uint8_t big[64 * 1024];

static void write_set(int n_train, int n_train_labels, int n_test, int gz)
{
    const char *sfx = gz ? ".gz" : "";
    char name[128];
    size_t k;
    k = make_idx(big, 3, n_train, 28, 28);
    snprintf(name, sizeof name, "train-images-idx3-ubyte%s", sfx); write_file(name, big, k, gz);
    k = make_idx(big, 1, n_train_labels, 0, 0);
    snprintf(name, sizeof name, "train-labels-idx1-ubyte%s", sfx); write_file(name, big, k, gz);
    k = make_idx(big, 3, n_test, 28, 28);
    snprintf(name, sizeof name, "t10k-images-idx3-ubyte%s", sfx); write_file(name, big, k, gz);
    k = make_idx(big, 1, n_test, 0, 0);
    snprintf(name, sizeof name, "t10k-labels-idx1-ubyte%s", sfx); write_file(name, big, k, gz);
}

static void clear_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_load_plain_and_gz(void **state)
{
    (void)state;
    for (int gz = 0; gz <= 1; gz++) {
        clear_dir();
        write_set(40, 40, 12, gz);
        tr_dataset tr, te;
        char err[512];
        assert_int_equal(tr_data_load(dir, &tr, &te, err, sizeof err), 0);
        assert_int_equal(tr.n, 40);
        assert_int_equal(te.n, 12);
        assert_int_equal(tr.h, 28);
        assert_int_equal(tr.n_classes, 10);
        assert_int_equal(tr.images[3 * 784 + 5], (3 * 7 + 5) % 256);
        assert_int_equal(tr.labels[13], 3);
        assert_true(tr.std > 0);
        tr_dataset_free(&tr);
        tr_dataset_free(&te);
    }
}

typedef struct bad_case {
    const char *what;
    int         mutate;   /* 0 missing file, 1 wrong magic, 2 truncated, 3 mismatched counts, 4 extra bytes, 5 corrupt gzip */
    int         want;
    const char *needle;   /* must appear in the message */
} bad_case;

static void test_errors(void **state)
{
    (void)state;
    static const bad_case cases[] = {
        {"missing", 0, HF_ENOTFOUND, "missing"},
        {"wrong magic", 1, HF_EPARSE, "magic"},
        {"truncated", 2, HF_ECORRUPT, "truncated"},
        {"mismatched counts", 3, HF_ECORRUPT, "mismatched counts"},
        {"extra bytes", 4, HF_ECORRUPT, "after"},
        {"corrupt gzip", 5, HF_ECORRUPT, "gzip"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        clear_dir();
        write_set(20, c->mutate == 3 ? 19 : 20, 5, 1);
        size_t k = make_idx(big, 3, 20, 28, 28);
        if (c->mutate == 0) {
            char p[512];
            snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", dir);
            unlink(p);
        } else if (c->mutate == 1) {
            big[0] = 0x1f; big[2] = 0x42;
            write_file("train-images-idx3-ubyte.gz", big, k, 1);
        } else if (c->mutate == 2) {
            write_file("train-images-idx3-ubyte.gz", big, k - 100, 1);
        } else if (c->mutate == 4) {
            write_file("train-images-idx3-ubyte.gz", big, k + 3, 1);
        } else if (c->mutate == 5) {
            /* a valid gzip, cut in half */
            char p[512];
            snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
            FILE *f = fopen(p, "rb");
            uint8_t gzb[70000];
            size_t n = fread(gzb, 1, sizeof gzb, f);
            fclose(f);
            f = fopen(p, "wb");
            fwrite(gzb, 1, n / 2, f);
            fclose(f);
        }
        tr_dataset tr, te;
        char err[512] = "";
        int rc = tr_data_load(dir, &tr, &te, err, sizeof err);
        if (rc != c->want || !strstr(err, c->needle))
            fprintf(stderr, "case %s: rc %d (want %d), message '%s'\n", c->what, rc, c->want, err);
        assert_int_equal(rc, c->want);
        assert_non_null(strstr(err, c->needle));
        assert_non_null(strstr(err, dir));   /* names the file */
    }
}

static void test_idx_parse_bounds(void **state)
{
    (void)state;
    uint8_t *d;
    int dims[3];
    char err[256];
    uint8_t hdr[16] = {0, 0, 8, 3, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1};
    assert_int_not_equal(tr_idx_parse(hdr, sizeof hdr, 3, &d, dims, err, sizeof err), 0);
    assert_null(d);
    assert_int_equal(tr_idx_parse(hdr, 3, 3, &d, dims, err, sizeof err), HF_ECORRUPT);
    uint8_t wrongdims[8] = {0, 0, 8, 2, 0, 0, 0, 1};
    assert_int_equal(tr_idx_parse(wrongdims, 8, 1, &d, dims, err, sizeof err), HF_EPARSE);
    uint8_t wrongtype[8] = {0, 0, 0x0d, 1, 0, 0, 0, 1};
    assert_int_equal(tr_idx_parse(wrongtype, 8, 1, &d, dims, err, sizeof err), HF_EPARSE);
}

static void test_loader_order_and_shards(void **state)
{
    (void)state;
    tr_dataset ds = {.n = 103, .c = 1, .h = 2, .w = 2, .n_classes = 10, .view = 1, .mean = 0, .std = 1};
    uint8_t img[103 * 4];
    int32_t lab[103];
    for (int i = 0; i < 103; i++) { lab[i] = i; for (int j = 0; j < 4; j++) img[i * 4 + j] = (uint8_t)i; }
    ds.images = img;
    ds.labels = lab;
    tr_loader a, b;
    assert_int_equal(tr_loader_init(&a, &ds, 10, 0, 1, 7, 1), 0);
    assert_int_equal(tr_loader_init(&b, &ds, 10, 0, 1, 7, 1), 0);
    assert_int_equal(tr_loader_batches(&a), 11);
    float x[40];
    int32_t ya[200], yb[10];
    int rows, gb;
    int64_t base;
    /* epoch 0 is a permutation; identical for the same seed; epoch 1 differs */
    int seen[103] = {0}, k = 0;
    while (tr_loader_next(&a, x, ya + k, &rows, &gb, &base)) k += rows;
    assert_int_equal(k, 103);
    for (int i = 0; i < 103; i++) seen[ya[i]]++;
    for (int i = 0; i < 103; i++) assert_int_equal(seen[i], 1);
    int same_as_identity = 1;
    for (int i = 0; i < 103; i++) same_as_identity &= ya[i] == i;
    assert_false(same_as_identity);
    tr_loader_seek(&b, 0, 4);   /* resume mid-epoch: batch 4 is rows 40..49 of the same order */
    assert_int_equal(tr_loader_next(&b, x, yb, &rows, &gb, &base), 1);
    assert_memory_equal(yb, ya + 40, 10 * sizeof(int32_t));
    tr_loader_seek(&b, 1, 0);
    tr_loader_next(&b, x, yb, &rows, &gb, &base);
    assert_memory_not_equal(yb, ya, 10 * sizeof(int32_t));
    /* three ranks together produce each global batch exactly */
    for (int64_t bi = 0; bi < 11; bi++) {
        int32_t cat[10];
        int n = 0;
        for (int r = 0; r < 3; r++) {
            tr_loader s;
            assert_int_equal(tr_loader_init(&s, &ds, 10, r, 3, 7, 1), 0);
            tr_loader_seek(&s, 0, bi);
            assert_int_equal(tr_loader_next(&s, x, cat + n, &rows, &gb, &base), 1);
            assert_int_equal(base, n);
            n += rows;
            tr_loader_free(&s);
        }
        assert_int_equal(n, bi == 10 ? 3 : 10);
        assert_memory_equal(cat, ya + bi * 10, n * sizeof(int32_t));
    }
    tr_loader_free(&a);
    tr_loader_free(&b);
}

static void test_real_fashion_mnist(void **state)
{
    (void)state;
    const char *d = "/usr/share/datasets/fashion-mnist";
    if (access(d, R_OK) != 0) {
        fprintf(stderr, "skipped: %s not installed (dataset-fashion-mnist)\n", d);
        skip();
    }
    tr_dataset tr, te;
    char err[512];
    assert_int_equal(tr_data_load(d, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.n, 60000);
    assert_int_equal(te.n, 10000);
    assert_int_equal(tr.n_classes, 10);
    assert_float_equal(tr.mean, 0.286, 0.002);   /* Fashion-MNIST's known pixel mean/std */
    assert_float_equal(tr.std, 0.353, 0.002);
    tr_dataset a, v;
    tr_dataset_split(&tr, 5000, &a, &v);
    assert_int_equal(a.n, 55000);
    assert_int_equal(v.n, 5000);
    assert_ptr_equal(v.labels, tr.labels + 55000);
    tr_dataset_free(&tr);
    tr_dataset_free(&te);
}

/* Regular files in the cache directory. */
static int cache_files(char names[][1024], int max)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null", cache);
    FILE *f = popen(cmd, "r");
    int n = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (n < max) snprintf(names[n], 1024, "%.256s/%.700s", cache, line);
        n++;
    }
    if (f) pclose(f);
    return n;
}

/* Load dir's set and check its bytes; RET 1 when the training images came
 * from the cache file's mapping, 0 when they were decompressed. */
static int assert_set_loads(int n_train)
{
    tr_dataset tr, te;
    char err[512];
    assert_int_equal(tr_data_load(dir, &tr, &te, err, sizeof err), 0);
    assert_int_equal(tr.n, n_train);
    for (int i = 0; i < n_train; i += 7)
        for (int j = 0; j < 784; j += 97) assert_int_equal(tr.images[(size_t)i * 784 + j], (i * 7 + j) % 256);
    assert_int_equal(tr.labels[n_train - 1], (n_train - 1) % 10);
    int mapped = tr.map != NULL;
    if (mapped) assert_ptr_equal(tr.images, (uint8_t *)tr.map + 16);   /* past the IDX header */
    tr_dataset_free(&tr);
    tr_dataset_free(&te);
    return mapped;
}

static void test_decoded_cache(void **state)
{
    (void)state;
    char names[8][1024], cmd[700];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*", cache);
    assert_int_equal(system(cmd), 0);
    clear_dir();
    write_set(50, 50, 12, 1);
    assert_false(assert_set_loads(50));         /* decompressed, then cached */
    assert_int_equal(cache_files(names, 8), 4);
    assert_true(assert_set_loads(50));          /* from the cache, mapped */
    assert_int_equal(cache_files(names, 8), 4);

    /* A cached copy of the same length but other bytes (a torn write, a
     * disk error) is not trusted: the source is decompressed again and the
     * copy rewritten. */
    char img[1024] = "";
    for (int i = 0; i < 4; i++)
        if (strstr(names[i], "train-images")) snprintf(img, sizeof img, "%.1000s", names[i]);
    assert_true(img[0]);
    FILE *f = fopen(img, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 16 + 3 * 784 + 5, SEEK_SET), 0);
    assert_int_equal(fputc(0xAB, f), 0xAB);
    fclose(f);
    assert_false(assert_set_loads(50));         /* the checksum refused the copy */
    f = fopen(img, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 16 + 3 * 784 + 5, SEEK_SET), 0);
    assert_int_equal(fgetc(f), (3 * 7 + 5) % 256);
    fclose(f);

    /* A replaced source (other size, new inode) gets its own entry. */
    clear_dir();
    write_set(60, 60, 12, 1);
    assert_set_loads(60);
    assert_true(cache_files(names, 8) >= 6);

    /* Off: nothing is written; plain (not gzip) files are never cached. */
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*", cache);
    assert_int_equal(system(cmd), 0);
    char d[256];
    assert_int_equal(setenv("HYPERFARM_DATA_CACHE", "off", 1), 0);
    assert_int_equal(tr_data_cache_dir(d, sizeof d), -1);
    assert_set_loads(60);
    assert_int_equal(cache_files(names, 8), 0);
    assert_int_equal(setenv("HYPERFARM_DATA_CACHE", cache, 1), 0);
    clear_dir();
    write_set(30, 30, 12, 0);
    assert_set_loads(30);
    assert_int_equal(cache_files(names, 8), 0);

    /* Where it goes without the variable. */
    unsetenv("HYPERFARM_DATA_CACHE");
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    assert_int_equal(tr_data_cache_dir(d, sizeof d), 0);
    assert_string_equal(d, "/x/cache/hyperfarm/data");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/u", 1);
    assert_int_equal(tr_data_cache_dir(d, sizeof d), 0);
    assert_string_equal(d, "/home/u/.cache/hyperfarm/data");
    assert_int_equal(setenv("HYPERFARM_DATA_CACHE", cache, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_plain_and_gz),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_idx_parse_bounds),
        cmocka_unit_test(test_loader_order_and_shards),
        cmocka_unit_test(test_real_fashion_mnist),
        cmocka_unit_test(test_decoded_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
