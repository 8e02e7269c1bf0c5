/*
 * test_agent_outbox.c — the agent's outbox acknowledgement log
 * (agent/agent_outbox.h; docs/agent.md): at debug level, one line
 * "acknowledged report: trial T attempt A step S" (no " step S" for a
 * report without a step) per METRIC item a batch's acknowledgement pops,
 * none for events or logs, none for items queued after the batch was
 * taken, and nothing at info level. The log goes to a temporary file
 * (hf_log_set_fd) that the test reads back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "agent/agent_outbox.h"
#include "hf_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A metric report of trial t, attempt a, with step s (s < 0: none). */
static void put_metric(agent_outbox *ob, int64_t t, int64_t a, int64_t s)
{
    hf_metric_report r;
    memset(&r, 0, sizeof r);
    r.n = 1;
    snprintf(r.m[0].name, sizeof r.m[0].name, "loss");
    r.m[0].value = 0.5;
    if (s >= 0) {
        r.has_step = 1;
        r.step = s;
    }
    assert_int_equal(agent_outbox_metric(ob, t, a, 1000, &r), 0);
}

/* Everything written to fd so far (malloc'd, NUL-terminated). */
static char *slurp(int fd)
{
    off_t n = lseek(fd, 0, SEEK_END);
    char *s = calloc(1, (size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(pread(fd, s, (size_t)n, 0), n);
    return s;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_ack_log(void **state)
{
    (void)state;
    char path[] = "/tmp/hf-test-outbox-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    hf_log_set_fd(fd);
    hf_log_set_level(HF_LOG_DEBUG);

    agent_outbox *ob = agent_outbox_new(NULL);
    agent_outbox_mark m;
    put_metric(ob, 7, 2, 5);
    put_metric(ob, 7, 2, -1);
    assert_int_equal(agent_outbox_event(ob, json_pack("{s:I, s:I, s:s, s:I}", "trial_id", (json_int_t)7,
                                                      "attempt", (json_int_t)2, "type", "STARTED",
                                                      "time", (json_int_t)1000)), 0);
    agent_outbox_log(ob, 7, 2, 1000, 1, "hello", 5);
    json_t *b = agent_outbox_take(ob, &m);
    assert_non_null(b);
    json_decref(b);
    put_metric(ob, 8, 1, 9);                 /* after the batch was taken: not acknowledged yet */
    agent_outbox_ack(ob, &m);
    char *s = slurp(fd);
    assert_int_equal(count(s, "acknowledged report: "), 2);
    assert_int_equal(count(s, "acknowledged report: trial 7 attempt 2 step 5\n"), 1);
    assert_int_equal(count(s, "acknowledged report: trial 7 attempt 2\n"), 1);
    assert_int_equal(count(s, "trial 8"), 0);
    free(s);

    /* at info level: no such line */
    hf_log_set_level(HF_LOG_INFO);
    b = agent_outbox_take(ob, &m);
    json_decref(b);
    agent_outbox_ack(ob, &m);
    s = slurp(fd);
    assert_int_equal(count(s, "acknowledged report: "), 2);
    free(s);
    agent_outbox_free(ob);
    hf_log_set_fd(2);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ack_log),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
