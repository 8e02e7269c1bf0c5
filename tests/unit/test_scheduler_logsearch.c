/*
 * test_scheduler_logsearch.c — log search (scheduler/api/logsearch.c): pattern
 * checks with the field named, fixed / case-insensitive / regex matching,
 * the literal handed to the trigram index (a table of regexes), and
 * searches on a real store: one trial, a whole experiment with and
 * without the index agreeing, paging with after/next, the limit, and the
 * time budget cutting a scan so that after=next loses no match.
 * Issue 27: constructs that are no regular language (back-references
 * first) are refused naming the construct; catastrophic patterns over
 * long lines end within the bounds (match limit per line, the deadline,
 * the stop callback); the search pool (logpool.h) runs searches off the
 * caller's thread, refuses beyond the per-user and global limits with a
 * Retry-After, and its stop ends a running search at once.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "thread_fixture.h"

#include "hf_err.h"
#include "hf_time.h"
#include "scheduler/api/logpool.h"
#include "scheduler/api/logsearch.h"
#include "unit_fixture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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
        /* ERE as glibc reads it, on PCRE2 */
        {"[[:digit:]]+ms", 1, 0, "took 12ms", 1},
        {"[[:digit:]]+ms", 1, 0, "took ms", 0},
        {"\\<loss\\>", 1, 0, "the loss is", 1},
        {"\\<loss\\>", 1, 0, "the glossy", 0},
        {"ab{,2}c", 1, 0, "xabbc", 1},
        {"ab{,2}c", 1, 0, "xabbbc", 0},
        {"(a|b)+c", 1, 0, "ababc", 1},
        {"(?:ab)+c", 1, 0, "ababc", 1},
        {"a[]b]c", 1, 0, "a]c", 1},
        {"x{2}", 1, 0, "axxb", 1},
        {"ERROR", 1, 1, "an error", 1},
        {"h\\.5", 1, 0, "h.5", 1},
        {"h\\.5", 1, 0, "hx5", 0},
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

/* What is no regular language (or no ERE) is refused at compile time with
 * the construct named; the same text as a fixed string is fine. */
static void test_refused_constructs(void **state)
{
    (void)state;
    static const struct { const char *pat; const char *named; } cases[] = {
        {"(a*)*\\1b", "back-references (\\1"},
        {"(a)\\9", "back-references"},
        {"(a)\\g1", "\\g"},
        {"(a)\\g{-1}", "\\g"},
        {"a\\k<n>", "named back-references"},
        {"(?P<n>a)(?P=n)", "(?...) extensions"},   /* the named group is met first */
        {"x(?P=n)", "named back-references"},
        {"(a|b(?R))", "recursion"},
        {"(a)(?1)", "recursion"},
        {"(?&x)", "recursion"},
        {"(?=a)b", "lookahead"},
        {"(?!a)b", "lookahead"},
        {"(?<=a)b", "lookbehind"},
        {"(?(1)a|b)", "conditional"},
        {"(?C1)a", "callouts"},
        {"(*LIMIT_MATCH=99999999)a", "verbs"},
        {"(*ACCEPT)", "verbs"},
        {"(?>a+)b", "atomic"},
        {"(?i)abc", "(?...) extensions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        logsearch_pat *p = NULL;
        hf_jerr e;
        hf_jerr_clear(&e);
        if (logsearch_compile(cases[i].pat, 1, 0, &p, &e) != HF_EINVAL) fail_msg("'%s' was accepted", cases[i].pat);
        assert_null(p);
        assert_string_equal(e.field, "grep");
        if (!strstr(e.msg, cases[i].named) || !strstr(e.msg, "not supported"))
            fail_msg("'%s': message '%s' does not name '%s'", cases[i].pat, e.msg, cases[i].named);
        assert_int_equal(logsearch_compile(cases[i].pat, 0, 0, &p, &e), 0);   /* a fixed string */
        logsearch_pat_free(p);
    }
    /* escaped, or inside brackets, the same characters are plain */
    static const char *fine[] = {"\\\\1", "[\\1]", "a\\(\\?=b", "[(?=]x", "\\Q(?=\\1\\E"};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        logsearch_pat *p = NULL;
        hf_jerr e;
        if (logsearch_compile(fine[i], 1, 0, &p, &e)) fail_msg("'%s' refused: %s", fine[i], e.msg);
        logsearch_pat_free(p);
    }
}

/* Catastrophic patterns over a 10,000-byte line of 'a': every match is
 * decided (or refused as too costly) within the limits, fast. */
static void test_catastrophic_bounded(void **state)
{
    (void)state;
    static const char *pats[] = {"(a|aa)*b", "(a*)*b", "(x+x+)+y", "(a+)+$b", "([a-z]+)*[0-9]", "(a|a?)+c",
                                 "(.*a){12}x", "((a+)+)+[^a]"};
    size_t n = 10000;
    char *line = malloc(n + 1);
    assert_non_null(line);
    memset(line, 'a', n);
    line[n] = '\0';
    for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
        logsearch_pat *p = NULL;
        hf_jerr e;
        assert_int_equal(logsearch_compile(pats[i], 1, 0, &p, &e), 0);
        int64_t t0 = hf_mono_ms();
        for (int k = 0; k < 10; k++) {
            int m = logsearch_match(p, line, n);
            if (m != 0 && m != HF_ETOOBIG) fail_msg("'%s': %d", pats[i], m);
        }
        int64_t ms = hf_mono_ms() - t0;
        /* the match limit: ~3 ms a line with the JIT, ~30 without (sanitizers) */
        if (ms > 2000) fail_msg("'%s': 10 matches took %lld ms", pats[i], (long long)ms);
        logsearch_pat_free(p);
    }
    free(line);
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
    logsearch_query q = {.trial_id = trial, .exp_id = exp, .after = after, .limit = limit,
                         .deadline_ms = budget ? hf_mono_ms() + budget : 0};
    assert_int_equal(logsearch_run(s, p, &q, &out, &e), 0);
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


/* A store whose trial 1 (experiment 1) has n lines of len 'a's. */
static store *long_lines_store(const char *name, int n, int len)
{
    char path[300], sql[1024], err[256];
    store *s = NULL;
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    assert_int_equal(store_open(path, &s, err, sizeof err), 0);
    snprintf(sql, sizeof sql,
             "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES (1,'a','ACTIVE','{}',10,0);"
             "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,created_at) VALUES"
             " (1,1,0,'RUNNING','{}',0,0);"
             "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < %d)"
             " INSERT INTO logs(trial_id,attempt,stream,line,time)"
             " SELECT 1, 1, 'stdout', substr(hex(zeroblob(%d)), 1, %d), i FROM n;"
             "UPDATE logs SET line = replace(line, '0', 'a');",
             n - 1, len, len);
    assert_int_equal(sqlite3_exec(store_db(s), sql, NULL, NULL, NULL), SQLITE_OK);
    return s;
}

/* Over a trial of long 'a' lines: a catastrophic pattern that reaches the
 * match limit ends the search at once, naming the line; one whose every
 * line is cheap finishes; a deadline and a stop callback end a scan of
 * costly lines within one line's match. */
static int stop_after;
static int stop_calls(void *arg) { (void)arg; return ++stop_after > 50; }

static void test_catastrophic_search(void **state)
{
    (void)state;
    store *s = long_lines_store("long", 20000, 1000);
    logsearch_pat *p = NULL;
    hf_jerr e;
    json_t *out = NULL;
    /* every line reaches the limit: HF_ETOOBIG at the first one */
    assert_int_equal(logsearch_compile("([a-z]+)*[0-9]", 1, 0, &p, &e), 0);
    logsearch_query q = {.trial_id = 1, .limit = 1000};
    int64_t t0 = hf_mono_ms();
    hf_jerr_clear(&e);
    assert_int_equal(logsearch_run(s, p, &q, &out, &e), HF_ETOOBIG);
    assert_null(out);
    assert_string_equal(e.field, "grep");
    assert_non_null(strstr(e.msg, "too costly"));
    assert_non_null(strstr(e.msg, "seq 1"));
    assert_true(hf_mono_ms() - t0 < 1000);
    logsearch_pat_free(p);
    /* cheap per line (the required 'b' is absent): the whole trial, no match */
    const char *cheap[] = {"(a|aa)*b", "(a*)*b", "(x+x+)+y"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(logsearch_compile(cheap[i], 1, 0, &p, &e), 0);
        t0 = hf_mono_ms();
        assert_int_equal(logsearch_run(s, p, &q, &out, &e), 0);
        assert_int_equal(nlogs(out), 0);
        assert_true(json_is_false(json_object_get(out, "truncated")));
        assert_int_equal(json_integer_value(json_object_get(out, "scanned")), 20000);
        if (hf_mono_ms() - t0 > 5000) fail_msg("'%s' took %lld ms", cheap[i], (long long)(hf_mono_ms() - t0));
        json_decref(out);
        logsearch_pat_free(p);
    }
    /* costly lines under the limit (a polynomial pattern): a 100 ms
     * deadline ends the scan truncated, well before the whole trial */
    assert_int_equal(logsearch_compile("a.*a.*[0-9]", 1, 0, &p, &e), 0);
    q.deadline_ms = hf_mono_ms() + 100;
    t0 = hf_mono_ms();
    int rc = logsearch_run(s, p, &q, &out, &e);
    int64_t ms = hf_mono_ms() - t0;
    if (rc == 0) {
        assert_true(json_is_true(json_object_get(out, "truncated")));
        assert_true(json_integer_value(json_object_get(out, "scanned")) < 20000);
        json_decref(out);
    } else {
        assert_int_equal(rc, HF_ETOOBIG);   /* no JIT: the interpreter's limit came first */
    }
    if (ms > 1500) fail_msg("a 100 ms deadline took %lld ms", (long long)ms);
    /* the stop callback ends it: no answer */
    q.deadline_ms = 0;
    q.stop = stop_calls;
    stop_after = 0;
    t0 = hf_mono_ms();
    rc = logsearch_run(s, p, &q, &out, &e);
    assert_true(rc == HF_ECONN || rc == HF_ETOOBIG);
    assert_true(hf_mono_ms() - t0 < 1500);
    logsearch_pat_free(p);
    store_close(s);
}

/* ---- the search pool ---- */

typedef struct done_box {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             n;
} done_box;

static done_box box = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void on_done(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&box.mu);
    box.n++;
    pthread_cond_broadcast(&box.cv);
    pthread_mutex_unlock(&box.mu);
}

/* Wait until want jobs are done (at most ms). RET the count. */
static int wait_done(int want, int ms)
{
    int64_t end = hf_mono_ms() + ms;
    pthread_mutex_lock(&box.mu);
    while (box.n < want && hf_mono_ms() < end) {
        pthread_mutex_unlock(&box.mu);
        usleep(5000);
        pthread_mutex_lock(&box.mu);
    }
    int n = box.n;
    pthread_mutex_unlock(&box.mu);
    return n;
}

static logjob *submit(logpool *lp, const char *user, const char *pat, int fd, int *rc, int *retry)
{
    logsearch_pat *p = NULL;
    hf_jerr e;
    logjob *j = NULL;
    assert_int_equal(logsearch_compile(pat, 1, 0, &p, &e), 0);
    logsearch_query q = {.trial_id = 1, .limit = 1000};
    hf_jerr_clear(&e);
    *rc = logpool_submit(lp, user, p, &q, fd, on_done, NULL, &j, retry, &e);
    if (*rc == HF_ETOOBIG) assert_non_null(strstr(e.msg, "too many log searches"));
    return j;
}

static void test_pool(void **state)
{
    (void)state;
    store *s = long_lines_store("pool", 20000, 1000);
    logpool *lp = logpool_new(s);
    assert_non_null(lp);
    assert_int_equal(unit_threads_named("hf-logsearch"), LOGPOOL_THREADS);
    int rc, retry;
    box.n = 0;
    /* per user: 2 running or queued; beyond, HF_ETOOBIG with a Retry-After */
    logjob *a1 = submit(lp, "alice", "(a|aa)*b", -1, &rc, &retry);
    assert_int_equal(rc, 0);
    logjob *a2 = submit(lp, "alice", "a.*a.*[0-9]", -1, &rc, &retry);
    assert_int_equal(rc, 0);
    assert_null(submit(lp, "alice", "x", -1, &rc, &retry));
    assert_int_equal(rc, HF_ETOOBIG);
    assert_true(retry >= 1 && retry <= LOGSEARCH_BUDGET_MS / 1000);
    /* globally: LOGPOOL_MAX_JOBS */
    logjob *js[LOGPOOL_MAX_JOBS];
    int nj = 0;
    char user[32];
    for (int i = 0; i < LOGPOOL_MAX_JOBS - 2; i++) {
        snprintf(user, sizeof user, "u%d", i);
        js[nj++] = submit(lp, user, "(a|aa)*b", -1, &rc, &retry);
        assert_int_equal(rc, 0);
    }
    assert_null(submit(lp, "zed", "x", -1, &rc, &retry));
    assert_int_equal(rc, HF_ETOOBIG);
    assert_int_equal(logpool_jobs(lp), LOGPOOL_MAX_JOBS);
    /* nothing runs before it is armed */
    usleep(300 * 1000);
    assert_int_equal(wait_done(1, 0), 0);
    for (int i = 0; i < nj; i++) logjob_arm(lp, js[i]);
    assert_int_equal(wait_done(nj, 20000), nj);
    for (int i = 0; i < nj; i++) {
        json_t *out = NULL;
        hf_jerr e;
        assert_int_equal(logjob_result(js[i], &out, &e), 0);
        assert_int_equal(nlogs(out), 0);
        json_decref(out);
        logjob_release(js[i]);
    }
    /* alice's two slots: a client that hangs up frees its slot */
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    logjob_release(a2);   /* dropped before it was armed: never runs, its slot is free */
    assert_int_equal(logpool_jobs(lp), 1);
    logjob_arm(lp, a1);
    int64_t t0 = hf_mono_ms();
    assert_int_equal(wait_done(nj + 1, 15000), nj + 1);
    assert_true(hf_mono_ms() - t0 < 5000);
    logjob_release(a1);
    assert_int_equal(logpool_jobs(lp), 0);
    logjob *h = submit(lp, "bob", "a.*a.*[0-9]", sv[0], &rc, &retry);
    assert_int_equal(rc, 0);
    logjob_arm(lp, h);
    usleep(200 * 1000);
    t0 = hf_mono_ms();
    close(sv[1]);   /* the client hangs up */
    assert_int_equal(wait_done(nj + 2, 5000), nj + 2);
    assert_true(hf_mono_ms() - t0 < 1000);
    json_t *out = NULL;
    hf_jerr e;
    rc = logjob_result(h, &out, &e);
    assert_true(rc == HF_ECONN || rc == HF_ETOOBIG);   /* HF_ETOOBIG: no JIT, the limit came first */
    logjob_release(h);
    close(sv[0]);
    /* stop ends a running search at once and answers the queued ones */
    logjob *r1 = submit(lp, "carol", "a.*a.*[0-9]", -1, &rc, &retry);
    logjob *r2 = submit(lp, "dave", "a.*a.*[0-9]", -1, &rc, &retry);
    logjob *r3 = submit(lp, "erin", "a.*a.*[0-9]", -1, &rc, &retry);
    logjob_arm(lp, r1);
    logjob_arm(lp, r2);
    logjob_arm(lp, r3);
    usleep(200 * 1000);
    t0 = hf_mono_ms();
    logpool_stop(lp);
    assert_true(hf_mono_ms() - t0 < 1000);
    assert_int_equal(wait_done(nj + 5, 1000), nj + 5);
    logjob *rs[] = {r1, r2, r3};
    for (int i = 0; i < 3; i++) {
        rc = logjob_result(rs[i], &out, &e);
        assert_true(rc == HF_ESTATE || rc == HF_ETOOBIG);
        json_decref(out);
        logjob_release(rs[i]);
    }
    assert_null(submit(lp, "frank", "x", -1, &rc, &retry));
    assert_int_equal(rc, HF_ESTATE);
    logpool_free(lp);
    assert_int_equal(unit_threads_settle("hf-logsearch", 0), 0);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_bad_patterns),
        cmocka_unit_test(test_needle),
        cmocka_unit_test(test_store),
        cmocka_unit_test(test_refused_constructs),
        cmocka_unit_test(test_catastrophic_bounded),
        cmocka_unit_test(test_catastrophic_search),
        cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
