/*
 * test_trainer_ckpt.c — checkpoint encode/decode round trip, every kind of
 * corruption detected (each byte region flipped, truncation, padding),
 * atomic files in a temp dir, pruning, and load_latest skipping a corrupt
 * newest file for the older valid one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "trainer/ckpt.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hf-ckpt-test-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static float P[7] = {1, 2, 3, 4, 5, 6, 7}, Bf[2] = {0.5f, -0.5f}, S[14];

static tr_ckpt sample(int64_t step)
{
    for (int i = 0; i < 14; i++) S[i] = (float)i / 3.0f;
    tr_ckpt c = {.arch_hash = 0xABCDEF, .epoch = 2, .batch = 17, .step = step, .loss_sum = 12.5, .loss_count = 40,
                 .correct = 30, .seen = 40, .rng = {1, 2, 3, 4}, .optim_t = 99, .n_params = 7, .n_bufs = 2,
                 .n_state = 14, .params = P, .bufs = Bf, .state = S};
    return c;
}

static void test_roundtrip(void **state)
{
    (void)state;
    tr_ckpt c = sample(1234), d;
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(tr_ckpt_encode(&c, &buf, &len), 0);
    assert_int_equal(tr_ckpt_decode(buf, len, &d, err, sizeof err), 0);
    assert_int_equal(d.arch_hash, c.arch_hash);
    assert_int_equal(d.epoch, 2);
    assert_int_equal(d.batch, 17);
    assert_int_equal(d.step, 1234);
    assert_float_equal(d.loss_sum, 12.5, 0);
    assert_int_equal(d.loss_count, 40);
    assert_int_equal(d.rng[3], 4);
    assert_int_equal(d.optim_t, 99);
    assert_memory_equal(d.params, P, sizeof P);
    assert_memory_equal(d.bufs, Bf, sizeof Bf);
    assert_memory_equal(d.state, S, sizeof S);
    tr_ckpt_clear(&d);
    /* any single flipped byte anywhere is detected */
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x20;
        assert_int_not_equal(tr_ckpt_decode(buf, len, &d, err, sizeof err), 0);
        buf[i] ^= 0x20;
    }
    /* truncated at every length, and padded */
    for (size_t n = 0; n < len; n++) assert_int_not_equal(tr_ckpt_decode(buf, n, &d, err, sizeof err), 0);
    uint8_t *pad = malloc(len + 1);
    memcpy(pad, buf, len);
    pad[len] = 0;
    assert_int_equal(tr_ckpt_decode(pad, len + 1, &d, err, sizeof err), HF_ECORRUPT);
    free(pad);
    free(buf);
}

static int count_files(const char *where)
{
    DIR *d = opendir(where);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_files_prune_and_skip_corrupt(void **state)
{
    (void)state;
    char path[1024], err[256], sub[512];
    snprintf(sub, sizeof sub, "%s/a/b", dir);   /* created on demand */
    for (int64_t s = 100; s <= 400; s += 100) {
        tr_ckpt c = sample(s);
        P[0] = (float)s;
        assert_int_equal(tr_ckpt_write(sub, &c, 3, path, sizeof path, err, sizeof err), 0);
    }
    assert_non_null(strstr(path, "ckpt-000000000400.hfck"));
    assert_int_equal(count_files(sub), 3);   /* keep = 3: step 100 pruned */
    /* corrupt the newest: load_latest warns and takes step 300 */
    FILE *f = fopen(path, "r+b");
    fseek(f, 200, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(byte ^ 0xFF, f);
    fclose(f);
    tr_ckpt d;
    char got[1024];
    assert_int_equal(tr_ckpt_load_latest(sub, 0xABCDEF, 7, 2, 14, &d, got, sizeof got), 0);
    assert_int_equal(d.step, 300);
    assert_float_equal(d.params[0], 300, 0);
    assert_non_null(strstr(got, "000000000300"));
    tr_ckpt_clear(&d);
    /* a different architecture is never loaded */
    assert_int_equal(tr_ckpt_load_latest(sub, 0x1234, 7, 2, 14, &d, got, sizeof got), HF_ENOTFOUND);
    assert_int_equal(tr_ckpt_load_latest(sub, 0xABCDEF, 8, 2, 14, &d, got, sizeof got), HF_ENOTFOUND);
    /* reading the corrupt one directly names the problem */
    assert_int_equal(tr_ckpt_read(path, &d, err, sizeof err), HF_ECORRUPT);
    assert_non_null(strstr(err, "checksum"));
    /* empty or missing dir */
    snprintf(sub, sizeof sub, "%s/none", dir);
    assert_int_equal(tr_ckpt_load_latest(sub, 0xABCDEF, 7, 2, 14, &d, got, sizeof got), HF_ENOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_files_prune_and_skip_corrupt),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
