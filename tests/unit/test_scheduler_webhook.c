/*
 * test_scheduler_webhook.c — webhooks (scheduler/webhook.c) without a
 * network: the HMAC-SHA256 signature against RFC 4231's test vectors, the
 * JSON and Slack bodies, a table of POST /webhooks bodies (each refusal
 * names its field), and the outbox trigger of schema/0009_insight.sql on
 * a real store (filters, per-experiment hooks, non-state events ignored).
 * Delivery over HTTP is tests/system/test_webhooks.sh.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/webhook.h"
#include "unit_fixture.h"

#include <string.h>

static char dir[256];
static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "webhook"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

static void test_sign(void **state)
{
    (void)state;
    char sig[72];
    /* RFC 4231 test case 2 */
    assert_int_equal(webhook_sign("Jefe", "what do ya want for nothing?", 28, sig), 0);
    assert_string_equal(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* the same key, one byte changed: another signature */
    assert_int_equal(webhook_sign("Jefe", "what do ya want for nothing!", 28, sig), 0);
    assert_string_not_equal(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_body(void **state)
{
    (void)state;
    webhook_event ev = {.delivery = 7, .event_id = 41, .time = 1000, .experiment_id = 3, .trial_id = 12,
                        .state = "COMPLETED", .detail = "exit 0", .experiment_name = "sweep \"A\"",
                        .has_objective = 1, .objective = 0.25};
    char *s = webhook_body(&ev, "json");
    json_t *v = json_loads(s, 0, NULL);
    assert_non_null(v);
    assert_string_equal(json_string_value(json_object_get(v, "event")), "trial.COMPLETED");
    assert_int_equal(json_integer_value(json_object_get(v, "trial_id")), 12);
    assert_int_equal(json_integer_value(json_object_get(v, "delivery")), 7);
    assert_true(json_real_value(json_object_get(v, "objective")) == 0.25);
    assert_string_equal(json_string_value(json_object_get(v, "experiment_name")), "sweep \"A\"");
    json_decref(v);
    free(s);
    ev.trial_id = 0;
    ev.has_objective = 0;
    ev.detail = NULL;
    s = webhook_body(&ev, "slack");
    v = json_loads(s, 0, NULL);
    assert_int_equal(json_object_size(v), 1);
    assert_string_equal(json_string_value(json_object_get(v, "text")), "hyperfarm: experiment 3 (sweep \"A\") is COMPLETED");
    json_decref(v);
    free(s);
}

static void test_spec(void **state)
{
    (void)state;
    static const struct { const char *body; const char *field; } cases[] = {
        {"{\"url\": \"http://h/x\"}", NULL},
        {"{\"url\": \"https://h/x\", \"secret\": \"k\", \"format\": \"slack\", \"events\": [\"*\", \"trial.FAILED\", "
         "\"experiment.*\"], \"experiment_id\": 4}", NULL},
        {"{}", "url"},
        {"{\"url\": 5}", "url"},
        {"{\"url\": \"gopher://h\"}", "url"},
        {"{\"url\": \"https://\"}", "url"},
        {"{\"url\": \"http://h/\\u0001\"}", "url"},
        {"{\"url\": \"http://h/\", \"format\": \"xml\"}", "format"},
        {"{\"url\": \"http://h/\", \"events\": \"*\"}", "events"},
        {"{\"url\": \"http://h/\", \"events\": []}", "events"},
        {"{\"url\": \"http://h/\", \"events\": [\"experiment.RUNNING\"]}", "events[0]"},
        {"{\"url\": \"http://h/\", \"events\": [\"*\", 3]}", "events[1]"},
        {"{\"url\": \"http://h/\", \"secret\": \"\"}", "secret"},
        {"{\"url\": \"http://h/\", \"secret\": \"a\\nb\"}", "secret"},
        {"{\"url\": \"http://h/\", \"experiment_id\": -1}", "experiment_id"},
        {"{\"url\": \"http://h/\", \"hook\": 1}", "hook"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *b = json_loads(cases[i].body, 0, NULL);
        assert_non_null(b);
        webhook_spec sp;
        hf_jerr e;
        hf_jerr_clear(&e);
        int rc = webhook_spec_parse(b, &sp, &e);
        if (!cases[i].field && rc) fail_msg("case %zu refused: %s: %s", i, e.field, e.msg);
        if (cases[i].field && (rc != HF_EINVAL || strcmp(e.field, cases[i].field)))
            fail_msg("case %zu: rc %d field '%s', want '%s'", i, rc, e.field, cases[i].field);
        json_decref(b);
    }
}

/* The trigger: which hooks get an outbox row for which event. */
static void test_outbox_trigger(void **state)
{
    (void)state;
    char path[300], err[256];
    store *s = NULL;
    snprintf(path, sizeof path, "%s/hf.db", dir);
    assert_int_equal(store_open(path, &s, err, sizeof err), 0);
    sqlite3 *db = store_db(s);
    assert_int_equal(sqlite3_exec(db,
        "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES (1,'a','ACTIVE','{}',1,0),"
        " (2,'b','ACTIVE','{}',1,0);"
        "INSERT INTO webhooks(id,url,secret,format,events,experiment_id,created_at) VALUES"
        " (1,'http://h/all','k','json','[\"*\"]',NULL,0),"
        " (2,'http://h/exp2','k','slack','[\"experiment.*\"]',2,0),"
        " (3,'http://h/failed','k','json','[\"trial.FAILED\",\"experiment.COMPLETED\"]',NULL,0);"
        "INSERT INTO events(time,experiment_id,trial_id,type,detail) VALUES"
        " (1,1,NULL,'ACTIVE','submitted'),"       /* hook 1 */
        " (2,2,NULL,'COMPLETED',NULL),"           /* hooks 1, 2, 3 */
        " (3,1,5,'FAILED','exit 3'),"             /* hooks 1, 3 */
        " (4,1,5,'KILL_REQUESTED','x'),"          /* not a state: none */
        " (5,NULL,NULL,'AGENT_LOST','a1'),"       /* not an experiment's: none */
        " (6,2,6,'RUNNING',NULL);",               /* hook 1 */
        NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox"), 7);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE hook_id=1"), 4);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE hook_id=2"), 1);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE hook_id=3"), 2);
    assert_int_equal(unit_one_int(db, "SELECT min(next_at) FROM webhook_outbox"), 1);
    /* deleting a hook drops its undelivered rows */
    assert_int_equal(sqlite3_exec(db, "DELETE FROM webhooks WHERE id=1", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox"), 3);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign),
        cmocka_unit_test(test_body),
        cmocka_unit_test(test_spec),
        cmocka_unit_test(test_outbox_trigger),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
