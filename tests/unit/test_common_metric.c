/*
 * test_common_metric.c — the HYPERFARM metric-line parser, table-driven.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_metric.h"

#include <stdlib.h>
#include <string.h>

struct bad_case { const char *line; int rc; const char *field; const char *msg_part; };

static void test_good_line(void **state)
{
    (void)state;
    hf_metric_report r;
    hf_jerr e;
    const char *l = "HYPERFARM {\"step\": 1200, \"epoch\": 2, \"train_loss\": 0.41, \"val_acc\": 0.871, \"note\": \"x\"}\n";
    assert_int_equal(hf_metric_parse(l, strlen(l), &r, &e), HF_OK);
    assert_true(r.has_step);
    assert_int_equal(r.step, 1200);
    assert_true(r.has_epoch);
    assert_true(r.epoch == 2.0);
    /* epoch, train_loss, val_acc are metrics; step is the x position; "note" ignored */
    assert_int_equal(r.n, 3);
    int found = 0;
    for (size_t i = 0; i < r.n; i++)
        if (!strcmp(r.m[i].name, "val_acc")) { found = 1; assert_true(r.m[i].value == 0.871); }
    assert_true(found);
    assert_string_equal(r.checkpoint, "");
}

static void test_checkpoint(void **state)
{
    (void)state;
    hf_metric_report r;
    hf_jerr e;
    const char *l = "HYPERFARM {\"step\": 3, \"checkpoint\": \"ckpt/step-3.bin\"}";
    assert_int_equal(hf_metric_parse(l, strlen(l), &r, &e), HF_OK);
    assert_string_equal(r.checkpoint, "ckpt/step-3.bin");
    assert_int_equal(r.n, 0);
}

static void test_not_a_metric_line(void **state)
{
    (void)state;
    hf_metric_report r;
    hf_jerr e;
    const char *cases[] = {"", "hello", "HYPERFARM", "hyperfarm {\"a\":1}", " HYPERFARM {\"a\":1}", "HYPERFARM{\"a\":1}"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        assert_int_equal(hf_metric_parse(cases[i], strlen(cases[i]), &r, &e), HF_ENOTFOUND);
}

static void test_bad_lines(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        {"HYPERFARM ", HF_EPARSE, "", "empty"},
        {"HYPERFARM {", HF_EPARSE, "", "malformed JSON"},
        {"HYPERFARM [1,2]", HF_EPARSE, "", "object"},
        {"HYPERFARM {\"a b\": 1}", HF_EPARSE, "a b", "metric name"},
        {"HYPERFARM {\"step\": -1}", HF_EPARSE, "step", "between 0"},
        {"HYPERFARM {\"step\": 1.5}", HF_EPARSE, "step", "integer"},
        {"HYPERFARM {\"epoch\": -2}", HF_EPARSE, "epoch", ">= 0"},
        {"HYPERFARM {\"note\": \"only text\"}", HF_EPARSE, "", "no numeric"},
        {"HYPERFARM {\"checkpoint\": 5}", HF_EPARSE, "checkpoint", "path"},
        {"HYPERFARM {\"a\": 1, \"a\": 2}", HF_EPARSE, "", "duplicate"},
        {"HYPERFARM {\"a\": {\"b\": {\"c\": {\"d\": {\"e\": 1}}}}}", HF_EPARSE, "", "deeper"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hf_metric_report r;
        hf_jerr e;
        int rc = hf_metric_parse(cases[i].line, strlen(cases[i].line), &r, &e);
        if (rc != cases[i].rc || strcmp(e.field, cases[i].field) || !strstr(e.msg, cases[i].msg_part))
            fail_msg("case %zu '%s': rc %d field '%s' msg '%s'", i, cases[i].line, rc, e.field, e.msg);
    }
}

static void test_bounds(void **state)
{
    (void)state;
    hf_metric_report r;
    hf_jerr e;
    /* too many metrics */
    char line[8192] = "HYPERFARM {";
    for (int i = 0; i < HF_METRIC_MAX_NAMES + 1; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, "%s\"m%d\": %d", i ? "," : "", i, i);
        strcat(line, kv);
    }
    strcat(line, "}");
    assert_int_equal(hf_metric_parse(line, strlen(line), &r, &e), HF_EPARSE);
    assert_non_null(strstr(e.msg, "more than"));
    /* too long */
    size_t n = HF_METRIC_MAX_LINE + 10;
    char *big = malloc(n + 1);
    memcpy(big, "HYPERFARM {\"a\": \"", 17);
    memset(big + 17, 'x', n - 17);
    big[n] = 0;
    assert_int_equal(hf_metric_parse(big, n, &r, &e), HF_ETOOBIG);
    free(big);
    /* a 65-byte name */
    char name[128] = "HYPERFARM {\"";
    memset(name + strlen(name), 'n', 65);
    strcpy(name + 12 + 65, "\": 1}");
    assert_int_equal(hf_metric_parse(name, strlen(name), &r, &e), HF_EPARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_line),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_not_a_metric_line),
        cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
