/*
 * test_scheduler_logsearch.c — log search (scheduler/logsearch.c): pattern
 * checks with the field named, fixed / case-insensitive / regex matching,
 * the literal handed to the trigram index (a table of regexes), and
 * searches on a real store: one trial, a whole experiment with and
 * without the index agreeing, paging with after/next, the limit, and the
 * time budget cutting a scan so that after=next loses no match.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/logsearch.h"
#include "unit_fixture.h"

#include <string.h>

static char dir[256];
static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "logsearch"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

static int matches(const char *pat, int regex, int icase, const char *line)
{
    logsearch_pat *p = NULL;
    hf_jerr e;
    assert_int_equal(logsearch_compile(pat, regex, icase, &p, &e), 0);
    int m = logsearch_match(p, line, strlen(line));
    logsearch_pat_free(p);
    return m;
}

static void test_match(void **state)
{
    (void)state;
    static const struct { const char *pat; int regex, icase; const char *line; int want; } cases[] = {
        {"loss", 0, 0, "epoch 1 loss=0.3", 1},
        {"LOSS", 0, 0, "epoch 1 loss=0.3", 0},
        {"LOSS", 0, 1, "epoch 1 loss=0.3", 1},
        {"a.b", 0, 0, "axb", 0},                 /* fixed: '.' is a dot */
        {"a.b", 1, 0, "axb", 1},
        {"^epoch [0-9]+ loss", 1, 0, "epoch 12 loss=1", 1},
        {"^epoch [0-9]+ loss", 1, 0, " epoch 12 loss=1", 0},
        {"nan|inf", 1, 1, "loss is NaN", 1},
        {"100%", 0, 0, "done 100%", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (matches(cases[i].pat, cases[i].regex, cases[i].icase, cases[i].line) != cases[i].want)
            fail_msg("case %zu: '%s' on '%s'", i, cases[i].pat, cases[i].line);
}

static void test_bad_patterns(void **state)
{
    (void)state;
    logsearch_pat *p = NULL;
    hf_jerr e;
    char longp[LOGSEARCH_MAX_PAT + 2];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    const char *bad[][2] = {{"", "0"}, {NULL, "0"}, {"a(b", "1"}, {"[z-a]", "1"}, {"tab\there", "0"}, {longp, "0"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hf_jerr_clear(&e);
        assert_int_equal(logsearch_compile(bad[i][0], bad[i][1][0] == '1', 0, &p, &e), HF_EINVAL);
        assert_null(p);
        assert_string_equal(e.field, "grep");
    }
    assert_int_equal(logsearch_compile("a(b", 1, 0, &p, &e), HF_EINVAL);
    assert_non_null(strstr(e.msg, "a(b"));   /* the message names the pattern */
    assert_int_equal(logsearch_compile("a(b", 0, 0, &p, &e), 0);   /* as a fixed string it is fine */
    logsearch_pat_free(p);
}

static void test_needle(void **state)
{
    (void)state;
    static const struct { const char *re; const char *needle; } cases[] = {
        {"ERROR.*NaN", "ERROR"},
        {"loss is (nan|inf)", ""},          /* any '|': no literal is sure */
        {"a|bcdef", ""},
        {"colou?r value", "r value"},
        {"step [0-9]+: done", ": done"},
        {"x\\.y\\.zz", "x.y.zz"},
        {"abcd*", "abc"},
        {"ab{2}cdef", "cdef"},
        {"(optional)? text", " text"},
        {"\\w+ said", " said"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        logsearch_pat *p = NULL;
        hf_jerr e;
        assert_int_equal(logsearch_compile(cases[i].re, 1, 0, &p, &e), 0);
        if (strcmp(logsearch_needle(p), cases[i].needle))
            fail_msg("'%s': needle '%s', want '%s'", cases[i].re, logsearch_needle(p), cases[i].needle);
        logsearch_pat_free(p);
    }
}

/* Two experiments; experiment 1 has trials 1..3, experiment 2 trial 4.
 * Every 10th line of every trial says "ERROR code N". */
static void fill(store *s)
{
    sqlite3 *db = store_db(s);
    assert_int_equal(sqlite3_exec(db,
        "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES"
        " (1,'a','ACTIVE','{}',10,0),(2,'b','ACTIVE','{}',10,0);"
        "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES"
        " (1,1,0,'RUNNING','{}',0,0),(2,1,1,'RUNNING','{}',0,0),(3,1,2,'RUNNING','{}',0,0),(4,2,0,'RUNNING','{}',0,0);"
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < 3999)"
        " INSERT INTO logs(trial_id,attempt,stream,line,time) SELECT 1 + i % 4, 1, 'stdout',"
        " CASE WHEN i % 40 < 4 THEN 'ERROR code ' || i ELSE 'step ' || i || ' loss=0.' || i END, i FROM n;",
        NULL, NULL, NULL), SQLITE_OK);
}

static json_t *run(store *s, int64_t trial, int64_t exp, const char *pat, int regex, int icase, int64_t after,
                   int64_t limit, int64_t budget)
{
    logsearch_pat *p = NULL;
    hf_jerr e;
    json_t *out = NULL;
    assert_int_equal(logsearch_compile(pat, regex, icase, &p, &e), 0);
    assert_int_equal(logsearch_run(s, trial, exp, p, after, limit, budget, &out), 0);
    logsearch_pat_free(p);
    return out;
}

static size_t nlogs(const json_t *o) { return json_array_size(json_object_get(o, "logs")); }

static void test_store(void **state)
{
    (void)state;
    char path[300];
    store *s = NULL;
    char err[256];
    snprintf(path, sizeof path, "%s/hf.db", dir);
    assert_int_equal(store_open(path, &s, err, sizeof err), 0);
    fill(s);
    /* 4,000 lines, 400 ERROR lines, 100 per trial */
    json_t *o = run(s, 2, 0, "ERROR", 0, 0, 0, 1000, 0);
    assert_int_equal(nlogs(o), 100);
    assert_int_equal(json_integer_value(json_object_get(o, "scanned")), 1000);   /* only trial 2's rows */
    assert_true(json_is_false(json_object_get(o, "truncated")));
    json_decref(o);
    /* experiment 1: trials 1-3, indexed (needle "ERROR") and not (regex with no literal) agree */
    o = run(s, 0, 1, "error", 0, 1, 0, 1000, 0);
    assert_int_equal(nlogs(o), 300);
    assert_true(json_is_true(json_object_get(o, "indexed")));
    assert_true(json_integer_value(json_object_get(o, "scanned")) <= 400);   /* the index chose the rows */
    json_t *r = run(s, 0, 1, "^[Ee][Rr][Rr]", 1, 0, 0, 1000, 0);
    assert_true(json_is_false(json_object_get(r, "indexed")));
    assert_int_equal(nlogs(r), 300);
    for (size_t i = 0; i < 300; i++) {
        json_t *a = json_array_get(json_object_get(o, "logs"), i), *b = json_array_get(json_object_get(r, "logs"), i);
        assert_int_equal(json_integer_value(json_object_get(a, "seq")), json_integer_value(json_object_get(b, "seq")));
        assert_int_not_equal(json_integer_value(json_object_get(a, "trial_id")), 4);
        json_t *pa = i ? json_array_get(json_object_get(o, "logs"), i - 1) : NULL;
        if (pa) assert_true(json_integer_value(json_object_get(a, "seq")) > json_integer_value(json_object_get(pa, "seq")));
    }
    json_decref(r);
    json_decref(o);
    /* case matters without icase */
    o = run(s, 0, 1, "error", 0, 0, 0, 1000, 0);
    assert_int_equal(nlogs(o), 0);
    json_decref(o);
    /* paging: limit 64, then after=next until done: every match once, in order */
    int64_t after = 0, total = 0, prev = 0;
    for (int page = 0; page < 20; page++) {
        o = run(s, 0, 1, "ERROR code", 0, 0, after, 64, 0);
        size_t i;
        json_t *l;
        json_array_foreach(json_object_get(o, "logs"), i, l) {
            assert_true(json_integer_value(json_object_get(l, "seq")) > prev);
            prev = json_integer_value(json_object_get(l, "seq"));
            total++;
        }
        int more = json_is_true(json_object_get(o, "truncated"));
        after = json_integer_value(json_object_get(o, "next"));
        json_decref(o);
        if (!more) break;
    }
    assert_int_equal(total, 300);
    /* a budget of 1 ms still ends (truncated or complete) and resuming finds every match */
    after = 0;
    total = 0;
    for (int page = 0; page < 100000; page++) {
        o = run(s, 0, 1, "ERROR code [0-9]+$", 1, 0, after, 1000, 1);
        total += (int64_t)nlogs(o);
        int more = json_is_true(json_object_get(o, "truncated"));
        int64_t next = json_integer_value(json_object_get(o, "next"));
        json_decref(o);
        if (!more) break;
        assert_true(next >= after);
        after = next;
    }
    assert_int_equal(total, 300);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_bad_patterns),
        cmocka_unit_test(test_needle),
        cmocka_unit_test(test_store),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
