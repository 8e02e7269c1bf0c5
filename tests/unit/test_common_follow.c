/*
 * test_common_follow.c — the follow set of a client given several
 * scheduler URLs (common/hf_follow.h; docs/agent.md, "Several
 * schedulers"): list checking, the URL choice after a transport failure
 * or a standby's 503 (to the named primary when it is configured, else
 * round-robin), one move when two threads fail on the same URL, the term
 * (highest seen, never lowered, from headers and 503 bodies), the
 * lost-primary header after lost_after_ms, and the registry that shares
 * one set per list. No server: the rule is fed what requests saw.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_follow.h"
#include "hf_time.h"

#include <stdio.h>
#include <string.h>

#define A "http://127.0.0.1:1"
#define B "http://127.0.0.1:2"
#define C "http://127.0.0.1:3"

static const char *cur(hf_follow *f)
{
    static char u[HF_FOLLOW_URL_MAX + 1];
    hf_follow_current(f, u, sizeof u);
    return u;
}

static int failed(hf_follow *f, const char *used)
{
    hf_follow_answer a = {.transport_failed = 1};
    return hf_follow_observe(f, used, &a);
}

static int answer(hf_follow *f, const char *used, long status, int64_t term, const char *role, const char *body)
{
    hf_follow_answer a = {.status = status, .term = term, .role = role, .body = body,
                          .body_len = body ? strlen(body) : 0};
    return hf_follow_observe(f, used, &a);
}

static void test_check(void **state)
{
    (void)state;
    char err[128];
    static const struct { const char *urls; int ok; } cases[] = {
        {A, 1}, {A "," B, 1}, {A "/, " B "/ ", 1}, {"https://x:1,http://y", 1},
        {A ",", 0}, {"," A, 0}, {A ",ftp://x", 0}, {A ",127.0.0.1:8080", 0}, {"", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = hf_follow_check(cases[i].urls, err, sizeof err);
        if ((rc == 0) != cases[i].ok) fail_msg("hf_follow_check(\"%s\") = %d (%s)", cases[i].urls, rc, err);
    }
    assert_int_equal(hf_follow_check(NULL, err, sizeof err), HF_EINVAL);
    assert_true(hf_follow_is_list(A "," B));
    assert_false(hf_follow_is_list(A));
}

/* Trailing slashes and blanks go; the first URL is in use at first. */
static void test_open_normalises(void **state)
{
    (void)state;
    hf_follow *f = hf_follow_open(A "/ , " B "//");
    assert_non_null(f);
    assert_int_equal(hf_follow_count(f), 2);
    assert_string_equal(cur(f), A);
    assert_int_equal(failed(f, A), 1);
    assert_string_equal(cur(f), B);
    hf_follow_close(f);
    assert_null(hf_follow_open(A ",nope"));
}

/* A transport failure moves round-robin; answers that are not "not
 * here" do not move; a standby's 503 follows its named primary. */
static void test_choice(void **state)
{
    (void)state;
    hf_follow *f = hf_follow_open(A "," B "," C);
    hf_follow_set_avoid(f, 0);               /* the plain rule (test_avoid_failed: with it) */
    assert_int_equal(failed(f, A), 1);
    assert_string_equal(cur(f), B);
    assert_int_equal(failed(f, B), 1);
    assert_string_equal(cur(f), C);
    assert_int_equal(failed(f, C), 1);
    assert_string_equal(cur(f), A);          /* round-robin */
    assert_int_equal(hf_follow_generation(f), 3);

    /* ordinary answers, errors included, keep the URL */
    assert_int_equal(answer(f, A, 200, 0, "primary", NULL), 0);
    assert_int_equal(answer(f, A, 500, 0, NULL, "{\"error\":\"x\"}"), 0);
    assert_int_equal(answer(f, A, 503, 0, "primary", "{\"error\":\"busy\"}"), 0);
    assert_int_equal(answer(f, A, 503, 0, NULL, "not json"), 0);
    assert_string_equal(cur(f), A);

    /* a standby names the primary: go there, skipping B */
    assert_int_equal(answer(f, A, 503, 1, "standby", "{\"error\":\"standby\",\"role\":\"standby\",\"primary\":\"" C "/\",\"term\":1}"), 1);
    assert_string_equal(cur(f), C);
    /* the role in the body alone is enough (no header) */
    assert_int_equal(answer(f, C, 503, 0, NULL, "{\"role\":\"fenced\",\"primary\":\"" A "\",\"term\":2}"), 1);
    assert_string_equal(cur(f), A);
    /* a primary that is not configured, or none: the next URL */
    assert_int_equal(answer(f, A, 503, 0, "standby", "{\"role\":\"standby\",\"primary\":\"http://elsewhere:9\"}"), 1);
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, B, 503, 0, "standby", "{\"role\":\"standby\",\"primary\":null}"), 1);
    assert_string_equal(cur(f), C);
    /* a standby that names itself: the next URL, not a loop */
    assert_int_equal(answer(f, C, 503, 0, "standby", "{\"role\":\"standby\",\"primary\":\"" C "\"}"), 1);
    assert_string_equal(cur(f), A);
    hf_follow_close(f);
}

/* After a power cut the standby names the dead primary: a URL that failed
 * at transport level is not followed again until the avoid time is over
 * or it answered; with nothing else to go to, a standby's 503 keeps the
 * set on the standby (it answers: votes land) instead of sending it back
 * to wait out a timeout. */
static void test_avoid_failed(void **state)
{
    (void)state;
    const char *hint_a = "{\"role\":\"standby\",\"primary\":\"" A "\",\"term\":1}";
    hf_follow *f = hf_follow_open(A "," B);
    hf_follow_set_avoid(f, 300);
    assert_int_equal(failed(f, A), 1);
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 0);   /* A just failed: stay */
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 0);
    assert_int_equal(hf_follow_generation(f), 1);
    hf_sleep_ms(350);                        /* avoid time over: one probe of A */
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 1);
    assert_string_equal(cur(f), A);
    assert_int_equal(failed(f, A), 1);       /* still dead: back to B, passed over again */
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 0);
    assert_string_equal(cur(f), B);
    hf_follow_close(f);

    /* three URLs: the hint is avoided, the next one not avoided is taken;
     * an answer from a URL clears its mark at once */
    f = hf_follow_open(A "," B "," C);
    hf_follow_set_avoid(f, 60000);
    assert_int_equal(failed(f, A), 1);
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 1);   /* A avoided: C */
    assert_string_equal(cur(f), C);
    assert_int_equal(failed(f, C), 1);       /* C dead too: past A (avoided) to B */
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 0);   /* A and C avoided: stay */
    assert_string_equal(cur(f), B);
    assert_int_equal(answer(f, A, 200, 1, "primary", NULL), 0);    /* A answers (a late one): mark gone */
    assert_int_equal(answer(f, B, 503, 1, "standby", hint_a), 1);   /* so the hint is followed */
    assert_string_equal(cur(f), A);
    hf_follow_close(f);
}

/* Two threads failing on the same URL move the set once: the second
 * observation is about a URL no longer in use. */
static void test_one_move_per_failure(void **state)
{
    (void)state;
    hf_follow *f = hf_follow_open(A "," B "," C);
    assert_int_equal(failed(f, A), 1);
    assert_int_equal(failed(f, A), 1);      /* retry at once: B is in use now */
    assert_string_equal(cur(f), B);
    assert_int_equal(hf_follow_generation(f), 1);
    /* a late standby 503 from A does not move away from B either */
    assert_int_equal(answer(f, A, 503, 0, "standby", "{\"role\":\"standby\",\"primary\":\"" C "\"}"), 1);
    assert_string_equal(cur(f), B);
    hf_follow_close(f);
}

/* The term: highest seen, from headers and 503 bodies, never lowered;
 * no header before one is known. */
static void test_term(void **state)
{
    (void)state;
    char t[64], l[80];
    hf_follow *f = hf_follow_open(A "," B);
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_string_equal(t, "");
    answer(f, A, 200, 3, "primary", NULL);
    assert_int_equal(hf_follow_term(f), 3);
    answer(f, A, 200, 2, "primary", NULL);   /* an older primary's answer */
    assert_int_equal(hf_follow_term(f), 3);
    answer(f, A, 503, 0, NULL, "{\"role\":\"standby\",\"primary\":null,\"term\":5}");
    assert_int_equal(hf_follow_term(f), 5);
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_string_equal(t, "X-Hyperfarm-Term: 5");
    hf_follow_close(f);
}

/* X-Hyperfarm-Lost-Primary: absent while a primary answers, present
 * with the elapsed ms after lost_after_ms without one; a standby's
 * answers (200 or 503) do not count as a primary's; a primary's does. */
static void test_lost_primary(void **state)
{
    (void)state;
    char t[64], l[80];
    long long ms = 0;
    hf_follow *f = hf_follow_open(A "," B "," C);
    hf_follow_set_lost_after(f, 100);
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_string_equal(l, "");
    hf_sleep_ms(60);
    answer(f, A, 200, 1, "primary", NULL);
    hf_sleep_ms(60);                          /* 60 ms since the primary: not lost */
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_string_equal(l, "");
    failed(f, A);
    answer(f, B, 200, 1, "standby", "{}");    /* a standby's read: still no primary */
    answer(f, B, 503, 1, "standby", "{\"role\":\"standby\",\"primary\":null}");
    hf_sleep_ms(60);
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_int_equal(sscanf(l, "X-Hyperfarm-Lost-Primary: %lld", &ms), 1);
    assert_true(ms >= 100 && ms < 5000);
    assert_true(hf_follow_lost_ms(f) >= ms);
    answer(f, C, 200, 2, "primary", NULL);
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_string_equal(l, "");
    hf_follow_set_lost_after(f, 0);           /* never */
    hf_sleep_ms(20);
    hf_follow_headers(f, t, sizeof t, l, sizeof l);
    assert_string_equal(l, "");
    hf_follow_close(f);
}

/* Clients opened with the same list share one set; the last close frees
 * it (a new open starts afresh). */
static void test_registry(void **state)
{
    (void)state;
    hf_follow *f = hf_follow_open(A "," B), *g = hf_follow_open(A "," B), *h = hf_follow_open(B "," A);
    assert_ptr_equal(f, g);
    assert_ptr_not_equal(f, h);
    failed(f, A);
    assert_string_equal(cur(g), B);
    assert_string_equal(cur(h), B);           /* h's own first URL */
    hf_follow_close(f);
    assert_string_equal(cur(g), B);           /* still alive */
    hf_follow_close(g);
    hf_follow_close(h);
    f = hf_follow_open(A "," B);
    assert_string_equal(cur(f), A);
    hf_follow_close(f);
    hf_follow_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_open_normalises),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_avoid_failed),
        cmocka_unit_test(test_one_move_per_failure),
        cmocka_unit_test(test_term),
        cmocka_unit_test(test_lost_primary),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
