/*
 * test_cli_fmt.c — the CLI's text rendering (cli/cli_fmt.c) and the CSV
 * export and watch line built on it: exact output for given JSON input.
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

/* Render into a string through a memstream. */
typedef struct { char *buf; size_t len; FILE *f; } mem_out;
static void mem_open(mem_out *m) { m->buf = NULL; m->len = 0; m->f = open_memstream(&m->buf, &m->len); }
static char *mem_close(mem_out *m) { fclose(m->f); return m->buf; }

static void test_bytes(void **state)
{
    (void)state;
    static const struct { int64_t n; const char *want; } cases[] = {
        {-1, "-"}, {0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {1536, "1.50 KiB"},
        {10 * 1024 + 512, "10.5 KiB"}, {1023 * 1024, "1.00 MiB"}, {12 * 1048576 + 314573, "12.3 MiB"},
        {256 * 1048576LL, "256 MiB"}, {3LL << 30, "3.00 GiB"}, {INT64_MAX, "8192 PiB"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_fmt_bytes(buf, sizeof buf, cases[i].n);
        if (strcmp(buf, cases[i].want)) fail_msg("%lld: \"%s\", expected \"%s\"", (long long)cases[i].n, buf, cases[i].want);
    }
}

static void test_duration(void **state)
{
    (void)state;
    static const struct { int64_t ms; const char *want; } cases[] = {
        {-1, "-"}, {0, "0ms"}, {850, "850ms"}, {1000, "1s"}, {59999, "59s"}, {60000, "1m00s"},
        {185000, "3m05s"}, {3600000, "1h00m"}, {3720000, "1h02m"}, {86400000, "1d00h"},
        {2 * 86400000 + 3 * 3600000, "2d03h"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_fmt_duration(buf, sizeof buf, cases[i].ms);
        assert_string_equal(buf, cases[i].want);
    }
}

static void test_ago(void **state)
{
    (void)state;
    char buf[32];
    int64_t now = 1700000000000;
    cli_fmt_ago(buf, sizeof buf, now, 0);            assert_string_equal(buf, "-");
    cli_fmt_ago(buf, sizeof buf, now, now - 300);    assert_string_equal(buf, "just now");
    cli_fmt_ago(buf, sizeof buf, now, now - 5000);   assert_string_equal(buf, "5s ago");
    cli_fmt_ago(buf, sizeof buf, now, now - 180000); assert_string_equal(buf, "3m ago");
    cli_fmt_ago(buf, sizeof buf, now, now - 7200000); assert_string_equal(buf, "2h ago");
    cli_fmt_ago(buf, sizeof buf, now, now - 3 * 86400000LL); assert_string_equal(buf, "3d ago");
}

static void test_number_and_scalar(void **state)
{
    (void)state;
    char buf[64];
    cli_fmt_number(buf, sizeof buf, 0.87123456); assert_string_equal(buf, "0.8712");
    cli_fmt_number(buf, sizeof buf, 128.0);      assert_string_equal(buf, "128");
    cli_fmt_number(buf, sizeof buf, 1e-4);       assert_string_equal(buf, "0.0001");
    cli_fmt_number(buf, sizeof buf, -2.5);       assert_string_equal(buf, "-2.5");
    json_t *v = json_string("adam");
    cli_fmt_json_scalar(buf, sizeof buf, v);     assert_string_equal(buf, "adam");
    json_decref(v);
    cli_fmt_json_scalar(buf, sizeof buf, NULL);  assert_string_equal(buf, "-");
    v = json_null();
    cli_fmt_json_scalar(buf, sizeof buf, v);     assert_string_equal(buf, "-");
    v = json_loads("[64,128]", 0, NULL);
    cli_fmt_json_scalar(buf, sizeof buf, v);     assert_string_equal(buf, "[64,128]");
    json_decref(v);
}

static void test_hparams(void **state)
{
    (void)state;
    char buf[256], small[16];
    json_t *h = json_loads("{\"lr\": 0.0123456, \"hidden\": 128, \"optimizer\": \"adam\", \"bn\": true}", 0, NULL);
    cli_fmt_hparams(buf, sizeof buf, h);
    assert_string_equal(buf, "lr=0.01235 hidden=128 optimizer=adam bn=true");
    cli_fmt_hparams(small, sizeof small, h);   /* cut, never overflowing */
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_string_equal(small + sizeof small - 4, "...");
    cli_fmt_hparams(buf, sizeof buf, NULL);
    assert_string_equal(buf, "");
    json_decref(h);
}

static void test_table_aligned_and_tsv(void **state)
{
    (void)state;
    static const char *const head[] = {"ID", "NAME", "BEST"};
    cli_table t;
    mem_out m;
    assert_int_equal(cli_table_init(&t, 3, head), 0);
    cli_table_align(&t, 0, CLI_ALIGN_RIGHT);
    cli_table_maxw(&t, 1, 8);
    cli_table_cell(&t, "7");
    cli_table_cell(&t, "mlp");
    cli_table_cell(&t, "0.88");
    cli_table_cell(&t, "12");
    cli_table_cell(&t, "a-very-long-name");
    cli_table_cell(&t, NULL);
    assert_int_equal(t.nrows, 2);

    mem_open(&m);
    cli_table_print(&t, m.f, 0);
    char *s = mem_close(&m);
    assert_string_equal(s,
        "ID  NAME      BEST\n"
        " 7  mlp       0.88\n"
        "12  a-very-~  -\n");
    free(s);

    mem_open(&m);
    cli_table_print(&t, m.f, 1);
    s = mem_close(&m);
    assert_string_equal(s, "ID\tNAME\tBEST\n7\tmlp\t0.88\n12\ta-very-long-name\t-\n");
    free(s);
    cli_table_free(&t);
}

static void test_table_utf8_and_tsv_escaping(void **state)
{
    (void)state;
    static const char *const head[] = {"A", "B"};
    cli_table t;
    mem_out m;
    cli_table_init(&t, 2, head);
    cli_table_cell(&t, "\xc3\xa9t\xc3\xa9");   /* "été": 3 code points, 5 bytes */
    cli_table_cell(&t, "x");
    cli_table_cell(&t, "tab\there");
    cli_table_cell(&t, "new\nline");
    cli_table_cell(&t, "esc\033[2J");
    cli_table_cell(&t, "y");
    mem_open(&m);
    cli_table_print(&t, m.f, 0);
    char *s = mem_close(&m);
    /* Column A is as wide as "tab\there" (8); "été" is padded by 5, not 3. */
    assert_non_null(strstr(s, "\xc3\xa9t\xc3\xa9       x\n"));
    assert_null(strchr(s, '\033'));
    assert_non_null(strstr(s, "tab here  new line\n"));
    free(s);
    mem_open(&m);
    cli_table_print(&t, m.f, 1);
    s = mem_close(&m);
    assert_non_null(strstr(s, "tab here\tnew line\n"));
    free(s);
    cli_table_free(&t);
    assert_int_equal(cli_table_init(&t, CLI_TABLE_MAX_COLS + 1, head), HF_EINVAL);
}

static void test_counts_and_bar(void **state)
{
    (void)state;
    cli_counts c;
    char bar[64];
    json_t *j = json_loads("{\"queued\": 4, \"running\": 2, \"completed\": 5, \"failed\": 1, "
                           "\"stopped\": 0, \"canceled\": 0}", 0, NULL);
    cli_counts_from_json(&c, j);
    assert_int_equal(cli_counts_done(&c), 6);
    cli_fmt_bar(bar, sizeof bar, &c, 12, 12);
    assert_string_equal(bar, "[######>>....]");
    /* total unknown: the counts' sum */
    cli_fmt_bar(bar, sizeof bar, &c, 0, 6);
    assert_string_equal(bar, "[###>..]");
    /* one running trial of a thousand is still visible */
    memset(&c, 0, sizeof c);
    c.running = 1;
    cli_fmt_bar(bar, sizeof bar, &c, 1000, 10);
    assert_string_equal(bar, "[>.........]");
    /* never overflows a small buffer */
    char tiny[6];
    cli_fmt_bar(tiny, sizeof tiny, &c, 1000, 50);
    assert_int_equal(strlen(tiny), 5);
    cli_counts_from_json(&c, NULL);
    assert_int_equal(cli_counts_done(&c), 0);
    json_decref(j);
}

static void test_csv_field(void **state)
{
    (void)state;
    hf_buf b;
    hf_buf_init(&b, 1024);
    cli_csv_field(&b, "plain");
    hf_buf_addstr(&b, "|");
    cli_csv_field(&b, "a,b");
    hf_buf_addstr(&b, "|");
    cli_csv_field(&b, "say \"hi\"");
    hf_buf_addstr(&b, "|");
    cli_csv_field(&b, "two\nlines");
    hf_buf_addstr(&b, "|");
    cli_csv_field(&b, NULL);
    assert_string_equal(b.data, "plain|\"a,b\"|\"say \"\"hi\"\"\"|\"two\nlines\"|");
    hf_buf_free(&b);
}

static void test_export_csv(void **state)
{
    (void)state;
    json_t *trials = json_loads(
        "[{\"id\": 1, \"state\": \"COMPLETED\", \"agent\": \"a\", \"restarts\": 0, \"exit_code\": 0,"
        "  \"started_at\": 1000, \"ended_at\": 3500, \"objective\": 0.5,"
        "  \"hparams\": {\"lr\": 0.1, \"opt\": \"sgd\"}, \"best\": {\"val_acc\": 0.5}},"
        " {\"id\": 2, \"state\": \"RUNNING\", \"agent\": \"b,c\", \"restarts\": 1, \"exit_code\": null,"
        "  \"started_at\": 2000, \"ended_at\": null, \"objective\": null,"
        "  \"hparams\": {\"lr\": 0.01, \"hidden\": 64}, \"best\": {}}]", 0, NULL);
    assert_non_null(trials);
    mem_out m;
    mem_open(&m);
    assert_int_equal(cli_export_csv(m.f, NULL, trials), 0);
    char *s = mem_close(&m);
    assert_string_equal(s,
        "trial_id,state,agent,restarts,exit_code,started_at,ended_at,duration_s,objective,"
        "hp.lr,hp.opt,hp.hidden,best.val_acc\n"
        "1,COMPLETED,a,0,0,1000,3500,2.500,0.5,0.1,sgd,,0.5\n"
        "2,RUNNING,\"b,c\",1,,2000,,,,0.01,,64,\n");
    free(s);
    /* A list objective: one objective.<metric> column each (the others' last values). */
    json_t *exp = json_loads("{\"objectives\": [{\"metric\": \"val_acc\", \"goal\": \"maximize\"},"
                             " {\"metric\": \"lat\", \"goal\": \"minimize\"}]}", 0, NULL);
    json_object_set_new(json_array_get(trials, 0), "latest", json_pack("{sfsf}", "val_acc", 0.4, "lat", 12.5));
    mem_open(&m);
    assert_int_equal(cli_export_csv(m.f, exp, trials), 0);
    s = mem_close(&m);
    assert_string_equal(s,
        "trial_id,state,agent,restarts,exit_code,started_at,ended_at,duration_s,objective,"
        "objective.val_acc,objective.lat,hp.lr,hp.opt,hp.hidden,best.val_acc\n"
        "1,COMPLETED,a,0,0,1000,3500,2.500,0.5,0.5,12.5,0.1,sgd,,0.5\n"
        "2,RUNNING,\"b,c\",1,,2000,,,,,,0.01,,64,\n");
    free(s);
    json_decref(exp);
    json_decref(trials);
}

static void test_watch_line(void **state)
{
    (void)state;
    char line[512];
    json_t *e = json_loads(
        "{\"id\": 3, \"state\": \"ACTIVE\", \"max_trials\": 12,"
        " \"objective\": {\"metric\": \"val_acc\", \"goal\": \"maximize\"},"
        " \"counts\": {\"queued\": 5, \"running\": 2, \"completed\": 4, \"failed\": 1},"
        " \"best\": {\"trial_id\": 2, \"value\": 0.8712}}", 0, NULL);
    cli_watch_line(line, sizeof line, e, 0);
    assert_string_equal(line, "exp 3 ACTIVE  5/12 done  2 running  5 queued  1 failed  best val_acc 0.8712 (trial 2)");
    cli_watch_line(line, sizeof line, e, 1);
    assert_non_null(strstr(line, "exp 3 ACTIVE [##########>>>>..........]  5/12 done"));
    /* the terminal line fits the terminal: the bar shrinks, never below 10 */
    cli_watch_tty_line(line, sizeof line, e, 95000, 80);
    assert_true(strlen(line) <= 79);
    assert_non_null(strstr(line, "] 5/12 done  2 running  5 queued  1 failed  best 0.8712 (t2)  1m35s"));
    cli_watch_tty_line(line, sizeof line, e, 95000, 200);
    assert_non_null(strstr(line, "[" "################" ">>>>>>>" "................." "] "));
    cli_watch_tty_line(line, sizeof line, e, 95000, 20);
    assert_non_null(strstr(line, "[####>.....]"));
    json_object_set_new(e, "best", json_null());
    cli_watch_line(line, sizeof line, e, 0);
    assert_non_null(strstr(line, "best val_acc -"));
    json_decref(e);
}

/* The one cleaner of text users wrote (docs/cli.md "Text from the
 * scheduler"): what a hostile name, note or log line may hold, and what
 * the terminal gets. */
static void test_clean_text(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int flags;
        const char *want;
    } cases[] = {
        {"plain name", 0, "plain name"},
        {"\xc3\xa9t\xc3\xa9 \xe2\x9c\x93", 0, "\xc3\xa9t\xc3\xa9 \xe2\x9c\x93"},            /* UTF-8 stays */
        {"red\033[31mALERT\033[0m", 0, "redALERT"},                                      /* CSI, whole */
        {"a\033[2J\033[H\033[?25lb", 0, "ab"},                                           /* clear, home, hide cursor */
        {"t\033]0;owned\007x", 0, "tx"},                                                 /* OSC title, BEL */
        {"t\033]8;;http://evil\033\\link\033]8;;\033\\", 0, "tlink"},                     /* OSC 8 hyperlink, ST */
        {"a\033Pq#0;2;0;0;0\033\\b", 0, "ab"},                                           /* DCS (sixel) */
        {"a\033(Bb\033c", 0, "ab"},                                                      /* charset, reset */
        {"a\xc2\x9b" "31mb", 0, "ab"},                                                   /* C1 CSI (U+009B) */
        {"a\xc2\x9d" "0;t\xc2\x9c" "b", 0, "ab"},                                        /* C1 OSC .. ST */
        {"a\xc2\x85" "b", 0, "ab"},                                                      /* other C1 (NEL) */
        {"a\x9b" "b", 0, "a?b"},                                                         /* raw 8-bit byte */
        {"a\xe2\x80\xae" "gnp.exe", 0, "agnp.exe"},                                      /* RLO override */
        {"tab\there\nnew\rret\x7f" "del\x01", 0, "tab here new ret del "},
        {"tab\there\nnew\rret", CLI_CLEAN_MULTILINE, "tab\there\nnew ret"},
        {"cut\033[", 0, "cut"},                                                          /* unfinished */
        {"cut\033]0;never ends", 0, "cut"},
        {"\033", 0, ""},
        {"", 0, ""},
    };
    char buf[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = cli_clean_text(buf, sizeof buf, cases[i].in, strlen(cases[i].in), cases[i].flags);
        if (strcmp(buf, cases[i].want)) fail_msg("case %zu: got '%s', want '%s'", i, buf, cases[i].want);
        assert_int_equal(n, strlen(buf));
    }
    /* Bounded, and never a split character. */
    assert_int_equal(cli_clean_text(buf, 4, "ab\xc3\xa9", 4, 0), 2);
    assert_string_equal(buf, "ab");
    assert_int_equal(cli_clean_text(buf, 1, "abc", 3, 0), 0);
    assert_int_equal(cli_clean_text(buf, sizeof buf, NULL, 5, 0), 0);
    /* len bounds the read even without a NUL. */
    assert_int_equal(cli_clean_text(buf, sizeof buf, "abcdef", 3, 0), 3);
    /* cli_fmt_clean and cli_put_text are the same cleaner. */
    cli_fmt_clean(buf, sizeof buf, "x\033[1my\nz");
    assert_string_equal(buf, "xy z");
    mem_out m;
    mem_open(&m);
    char big[10000];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = i % 7 == 0 ? '\033' : i % 7 == 1 ? 'c' : 'a';
    big[sizeof big - 1] = 0;
    cli_put_text(m.f, big, 0);
    char *s = mem_close(&m);
    assert_null(strchr(s, '\033'));
    assert_int_equal(strlen(s), (size_t)(9999 / 7) * 5 + (9999 % 7 > 2 ? 9999 % 7 - 2 : 0));
    free(s);
    /* A table cell is cleaned before its width is counted. */
    static const char *const head[] = {"N", "M"};
    cli_table t;
    cli_table_init(&t, 2, head);
    cli_table_cell(&t, "\033[31mred\033[0m");
    cli_table_cell(&t, "x");
    mem_open(&m);
    cli_table_print(&t, m.f, 0);
    s = mem_close(&m);
    assert_non_null(strstr(s, "red  x\n"));
    free(s);
    cli_table_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_ago),
        cmocka_unit_test(test_number_and_scalar),
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_table_aligned_and_tsv),
        cmocka_unit_test(test_table_utf8_and_tsv_escaping),
        cmocka_unit_test(test_clean_text),
        cmocka_unit_test(test_counts_and_bar),
        cmocka_unit_test(test_csv_field),
        cmocka_unit_test(test_export_csv),
        cmocka_unit_test(test_watch_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
