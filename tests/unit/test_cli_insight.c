/*
 * test_cli_insight.c — the pure helpers of cli/cli_insight.c: importance
 * bars (width, eighths, clamping, buffer bound), query-string escaping of
 * --grep patterns, and the compare table (rows, the '*' marker where
 * trials differ, hyperparameters and metrics present in only some trials).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "cli/cli.h"
#include "cli/cli_fmt.h"
#include "hf_err.h"

#include <stdlib.h>
#include <string.h>

static size_t cells(const char *s)   /* UTF-8 characters */
{
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static void test_bar(void **state)
{
    (void)state;
    char b[256];
    assert_int_equal(cli_importance_bar(b, sizeof b, 1.0, 10), 0);
    assert_int_equal(cells(b), 10);
    assert_int_equal(cli_importance_bar(b, sizeof b, 0.5, 10), 0);
    assert_int_equal(cells(b), 5);
    assert_int_equal(cli_importance_bar(b, sizeof b, 0.0625, 10), 0);   /* 5 eighths: one partial block */
    assert_string_equal(b, "▋");
    assert_int_equal(cli_importance_bar(b, sizeof b, -3, 10), 0);
    assert_string_equal(b, "");
    assert_int_equal(cli_importance_bar(b, sizeof b, 7, 4), 0);        /* clamped to 1 */
    assert_int_equal(cells(b), 4);
    assert_int_equal(cli_importance_bar(b, 8, 1.0, 10), HF_ETOOBIG);
}

static void test_escape(void **state)
{
    (void)state;
    char b[64];
    assert_int_equal(cli_url_escape(b, sizeof b, "loss is NaN"), 0);
    assert_string_equal(b, "loss%20is%20NaN");
    assert_int_equal(cli_url_escape(b, sizeof b, "a&b=c+d/é"), 0);
    assert_string_equal(b, "a%26b%3Dc%2Bd%2F%C3%A9");
    assert_int_equal(cli_url_escape(b, sizeof b, "A-z_0.9~"), 0);
    assert_string_equal(b, "A-z_0.9~");
    assert_int_equal(cli_url_escape(b, 4, "abcd"), HF_ETOOBIG);
}

static void test_compare_table(void **state)
{
    (void)state;
    json_t *tr[2];
    tr[0] = json_pack("{sisisssfs{sfsssi}s{sf}}", "id", 3, "experiment_id", 1, "state", "COMPLETED", "objective", 0.5,
                      "hparams", "lr", 0.1, "opt", "adam", "epochs", 3, "best", "acc", 0.5);
    tr[1] = json_pack("{sisisssfs{sfsssisi}s{sfsf}}", "id", 4, "experiment_id", 1, "state", "COMPLETED", "objective", 0.7,
                      "hparams", "lr", 0.2, "opt", "adam", "epochs", 3, "depth", 2, "best", "acc", 0.7, "loss", 0.1);
    /* The scheduler's "goals": which way each best was taken. */
    json_object_set_new(tr[1], "goals", json_pack("{ssss}", "acc", "maximize", "loss", "minimize"));
    cli_table t;
    char heads[CLI_COMPARE_MAX][32];
    assert_int_equal(cli_compare_table(&t, tr, 2, heads), 0);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    cli_table_print(&t, f, 1);
    fclose(f);
    cli_table_free(&t);
    /* tsv: marker, label, one column per trial */
    assert_non_null(strstr(out, "\ttrial 3\ttrial 4\n"));
    assert_non_null(strstr(out, " \tstate\tCOMPLETED\tCOMPLETED\n"));
    assert_non_null(strstr(out, "*\tobjective\t0.5\t0.7\n"));
    assert_non_null(strstr(out, "*\thp.lr\t0.1\t0.2\n"));
    assert_non_null(strstr(out, " \thp.opt\tadam\tadam\n"));
    assert_non_null(strstr(out, " \thp.epochs\t3\t3\n"));
    assert_non_null(strstr(out, "*\thp.depth\t-\t2\n"));        /* only one trial has it */
    assert_non_null(strstr(out, "*\tbest.loss (min)\t-\t0.1\n"));
    assert_non_null(strstr(out, "*\tbest.acc (max)\t0.5\t0.7\n"));
    free(out);
    assert_int_equal(cli_compare_table(&t, tr, 0, heads), HF_EINVAL);
    json_decref(tr[0]);
    json_decref(tr[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bar),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_compare_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
