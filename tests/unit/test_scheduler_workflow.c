/*
 * test_scheduler_workflow.c — the experiment workflow of issue #17
 * (docs/scheduler.md "Workflow"): tags, PATCH bodies and the trial seed
 * (expmeta.c), warm_start validation (warmstart.c), named users in the
 * token file (auth.c), and, on a real core over a real SQLite file:
 * submitted_by and who-did-what in events, PATCH of experiments and
 * trials, the tag filter, fork, warm start (history observed by TPE,
 * enqueued configurations first, the same after a restart), extend that
 * lets the searcher go on (also after a restart), and the seed (HYPERFARM_SEED) in
 * the assignments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/api/auth.h"
#include "scheduler/core/expmeta.h"
#include "scheduler/search/search_space.h"
#include "scheduler/search/warmstart.h"
#include "unit_fixture.h"

#include <string.h>

static char dir[256];
static int setup(void **st) { (void)st; return unit_tmpdir(dir, sizeof dir, "workflow"); }
static int teardown(void **st) { (void)st; return unit_rmtree(dir); }

static json_t *J(const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
    if (!v) fail_msg("bad test JSON %s: %s", text, je.text);
    return v;
}

/* ---------- pure functions ---------- */

static void test_tags_and_patch_bodies(void **state)
{
    (void)state;
    static const char *const good[] = {"a", "baseline", "lr:sweep", "v1.2", "team/ml", "k=v", "c++", "x-y_z"};
    static const char *const bad[] = {"", "has space", "tab\t", "ü", "<b>", "a,b"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) assert_true(expmeta_tag_ok(good[i]));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) assert_false(expmeta_tag_ok(bad[i]));
    char longtag[80];
    memset(longtag, 'a', 65);
    longtag[65] = 0;
    assert_false(expmeta_tag_ok(longtag));

    static const struct { const char *body, *field; } errs[] = {
        {"{}", ""},
        {"{\"tags\": \"x\"}", "tags"},
        {"{\"add_tags\": [\"ok\", \"not ok\"]}", "add_tags[1]"},
        {"{\"remove_tags\": [3]}", "remove_tags[0]"},
        {"{\"description\": 7}", "description"},
        {"{\"colour\": \"red\"}", "colour"},
    };
    json_t *cur = J("[\"a\", \"b\"]");
    for (size_t i = 0; i < sizeof errs / sizeof *errs; i++) {
        json_t *b = J(errs[i].body), *tags = NULL;
        const char *d;
        int ds;
        hf_jerr e;
        hf_jerr_clear(&e);
        if (expmeta_patch_experiment(b, cur, &tags, &ds, &d, &e) != HF_EINVAL) fail_msg("%s accepted", errs[i].body);
        assert_string_equal(e.field, errs[i].field);
        assert_null(tags);
        json_decref(b);
    }
    /* tags replaces, add appends (no duplicates), remove removes. */
    json_t *b = J("{\"tags\": [\"z\", \"a\"], \"add_tags\": [\"a\", \"n\"], \"remove_tags\": [\"z\"], \"description\": null}");
    json_t *tags = NULL;
    const char *d = "x";
    int ds = 0;
    hf_jerr e;
    assert_int_equal(expmeta_patch_experiment(b, cur, &tags, &ds, &d, &e), 0);
    json_t *want = J("[\"a\", \"n\"]");
    assert_true(json_equal(tags, want));
    assert_true(ds);
    assert_null(d);
    json_decref(want);
    json_decref(tags);
    json_decref(b);
    /* description only: tags untouched (NULL). */
    b = J("{\"description\": \"# hi\"}");
    assert_int_equal(expmeta_patch_experiment(b, cur, &tags, &ds, &d, &e), 0);
    assert_null(tags);
    assert_string_equal(d, "# hi");
    json_decref(b);
    json_decref(cur);

    const char *notes = NULL;
    b = J("{\"notes\": \"**n**\"}");
    assert_int_equal(expmeta_patch_trial(b, &notes, &e), 0);
    assert_string_equal(notes, "**n**");
    json_decref(b);
    b = J("{\"notes\": null}");
    assert_int_equal(expmeta_patch_trial(b, &notes, &e), 0);
    assert_null(notes);
    json_decref(b);
    b = J("{}");
    assert_int_equal(expmeta_patch_trial(b, &notes, &e), HF_EINVAL);
    assert_string_equal(e.field, "notes");
    json_decref(b);
}

static void test_trial_seed(void **state)
{
    (void)state;
    /* Deterministic, 31 bits, different per trial and per experiment seed. */
    assert_int_equal(expmeta_trial_seed(42, 7), expmeta_trial_seed(42, 7));
    assert_int_not_equal(expmeta_trial_seed(42, 7), expmeta_trial_seed(43, 7));
    static uint32_t seen[2000];
    for (int i = 0; i < 2000; i++) {
        seen[i] = expmeta_trial_seed(5, i + 1);
        assert_true(seen[i] <= 0x7fffffffu);
        for (int k = 0; k < i; k++) assert_int_not_equal(seen[k], seen[i]);
    }
}

static void test_warm_start_validation(void **state)
{
    (void)state;
    search_space *sp = NULL;
    hf_jerr e;
    json_t *hp = J("{\"lr\": {\"type\": \"log\", \"min\": 0.001, \"max\": 1},"
                   " \"layers\": {\"type\": \"int\", \"min\": 1, \"max\": 4},"
                   " \"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]},"
                   " \"momentum\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1,"
                   "              \"condition\": {\"param\": \"opt\", \"values\": [\"sgd\"]}},"
                   " \"epochs\": 3}");
    assert_int_equal(search_space_parse(hp, &sp, &e), 0);
    static const struct { const char *ws, *field; } cases[] = {
        {"{\"warm_start\": 3}", "warm_start"},
        {"{\"warm_start\": {\"from\": [1]}}", "warm_start.from"},
        {"{\"warm_start\": {\"experiments\": [0]}}", "warm_start.experiments[0]"},
        {"{\"warm_start\": {\"experiments\": [2, 2]}}", "warm_start.experiments[1]"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 2, \"layers\": 1, \"opt\": \"adam\"}]}}", "warm_start.enqueue[0].lr"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"layers\": 1.5, \"opt\": \"adam\"}]}}",
         "warm_start.enqueue[0].layers"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"layers\": 1, \"opt\": \"rmsprop\"}]}}",
         "warm_start.enqueue[0].opt"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"opt\": \"adam\"}]}}", "warm_start.enqueue[0]"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"layers\": 1, \"opt\": \"sgd\"}]}}", "warm_start.enqueue[0]"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"layers\": 1, \"opt\": \"adam\", \"momentum\": 0.9}]}}",
         "warm_start.enqueue[0].momentum"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"layers\": 1, \"opt\": \"adam\", \"wd\": 0}]}}",
         "warm_start.enqueue[0].wd"},
        {"{\"warm_start\": {\"enqueue\": [{\"lr\": 0.1, \"layers\": 1, \"opt\": \"adam\", \"epochs\": 4}]}}",
         "warm_start.enqueue[0].epochs"},
        {"{\"warm_start\": {\"enqueue\": [7]}}", "warm_start.enqueue[0]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *cfg = J(cases[i].ws);
        int64_t n = -1;
        hf_jerr_clear(&e);
        if (warm_parse(cfg, sp, &n, &e) != HF_EINVAL) fail_msg("case %zu accepted", i);
        if (strcmp(e.field, cases[i].field))
            fail_msg("case %zu: field %s (%s), expected %s", i, e.field, e.msg, cases[i].field);
        json_decref(cfg);
    }
    /* Good: a constant left out is filled in; conditions honoured. */
    json_t *cfg = J("{\"warm_start\": {\"experiments\": [4, 9], \"enqueue\": ["
                    "{\"lr\": 0.01, \"layers\": 2, \"opt\": \"sgd\", \"momentum\": 0.9},"
                    "{\"lr\": 1, \"layers\": 4, \"opt\": \"adam\", \"epochs\": 3}]}}");
    int64_t n = 0;
    assert_int_equal(warm_parse(cfg, sp, &n, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(warm_enqueue(cfg), 0), "epochs")), 3);
    assert_int_equal(json_array_size(warm_experiments(cfg)), 2);
    json_decref(cfg);
    cfg = J("{}");
    assert_int_equal(warm_parse(cfg, sp, &n, &e), 0);
    assert_int_equal(n, 0);
    assert_null(warm_enqueue(cfg));
    json_decref(cfg);
    search_space_free(sp);
    json_decref(hp);
}

static void test_token_users(void **state)
{
    (void)state;
    const char *txt = "user:alice alice-secret-1\nuser:old-user-secret\nagent:gpu-box-3\tagent-secret-1\n"
                      "agent:old-agent-secret\n# comment\nuser:bob.smith@lab  bob-secret-01\n";
    auth *a = NULL;
    char err[200];
    const char *u = "?";
    assert_int_equal(auth_parse(txt, strlen(txt), &a, err, sizeof err), 0);
    assert_int_equal(auth_count(a), 5);
    static const struct { const char *token; int role; const char *user; } want[] = {
        {"alice-secret-1", AUTH_USER, "alice"},       {"old-user-secret", AUTH_USER, "default"},
        {"agent-secret-1", AUTH_AGENT, "gpu-box-3"},  {"old-agent-secret", AUTH_AGENT, "agent"},
        {"bob-secret-01", AUTH_USER, "bob.smith@lab"}, {"alice", AUTH_NONE, ""},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        assert_int_equal(auth_check_user(a, want[i].token, &u), want[i].role);
        assert_string_equal(u, want[i].user);
    }
    auth_free(a);
    static const char *const bad[] = {"user:al ice tok-secret-1\n", "user:a/b tok-secret-1\n", "user:alice short\n",
                                      "user: tok-secret-1\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = 0;
        if (auth_parse(bad[i], strlen(bad[i]), &a, err, sizeof err) == 0) fail_msg("case %zu accepted", i);
        assert_non_null(strstr(err, "line 1"));
    }
}

/* ---------- a real core ---------- */

/* Heartbeats of agent aid until one brings no assignment: every
 * assignment is run at once (started, one report of m = value(trial id),
 * exited 0, all in the next heartbeat). RET the number of trials run.
 * assigned[] collects the assignments when not NULL. */
static int drive_exit_code;   /* the exit code drive's trials end with (0 unless a test sets it) */

static int drive(sched *c, int64_t aid, double (*value)(int64_t), json_t *assigned)
{
    int done = 0;
    json_t *items = json_pack("{s:[], s:[], s:[]}", "running", "events", "metrics");
    for (int round = 0; round < 100; round++) {
        json_t *out = NULL;
        hf_jerr e;
        assert_int_equal(sched_agent_heartbeat(c, aid, items, &out, &e), 0);
        json_decref(items);
        items = json_pack("{s:[], s:[], s:[]}", "running", "events", "metrics");
        size_t i;
        json_t *as;
        json_array_foreach(json_object_get(out, "assign"), i, as) {
            json_int_t t = json_integer_value(json_object_get(as, "trial_id"));
            json_int_t at = json_integer_value(json_object_get(as, "attempt"));
            if (assigned) json_array_append(assigned, as);
            json_array_append_new(json_object_get(items, "events"),
                                  json_pack("{sIsIsssisi}", "trial_id", t, "attempt", at, "type", "started",
                                            "time", 1, "pid", 100));
            json_array_append_new(json_object_get(items, "metrics"),
                                  json_pack("{sIsIsisis{sf}}", "trial_id", t, "attempt", at, "step", 1, "epoch", 1,
                                            "values", "m", value(t)));
            json_array_append_new(json_object_get(items, "events"),
                                  json_pack("{sIsIsssisisi}", "trial_id", t, "attempt", at, "type", "exited",
                                            "time", 2, "pid", 100, "exit_code", drive_exit_code));
            done++;
        }
        size_t n = json_array_size(json_object_get(out, "assign"));
        json_decref(out);
        if (n == 0) break;
    }
    json_decref(items);
    return done;
}

static double value_of(int64_t tid) { return 0.1 * (double)(tid % 7); }

/* drive, then a tick (which ends a search
 * that has nothing left to run). */
static void drain(sched *c, int64_t aid)
{
    drive(c, aid, value_of, NULL);
    sched_tick(c);
}

static json_t *exp_get(sched *c, int64_t id)
{
    json_t *out = NULL;
    assert_int_equal(sched_experiment_get(c, id, &out), 0);
    return out;
}

static json_t *trials_of(sched *c, int64_t id)
{
    json_t *out = NULL;
    assert_int_equal(sched_experiment_trials(c, id, &out), 0);
    return out;
}

#define SPACE "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}," \
              " \"k\": {\"type\": \"int\", \"min\": 1, \"max\": 8}}, \"trial\": {\"command\": [\"true\"]}"

static int64_t submit_as(sched *c, const char *json, const char *user, int64_t parent, int want_rc, hf_jerr *e)
{
    json_t *cfg = J(json);
    int64_t id = 0;
    hf_jerr_clear(e);
    int rc = sched_experiment_submit_as(c, cfg, user, parent, &id, e);
    if (rc != want_rc) fail_msg("submit: rc %d, expected %d (%s: %s)", rc, want_rc, e->field, e->msg);
    json_decref(cfg);
    return id;
}

/* A core on dir/NAME.db (path receives it) with one agent of slots slots; RET the agent's id. */
static int64_t open_farm(const char *name, int slots, char *path, size_t len, store **s, sched **c)
{
    snprintf(path, len, "%s/%s.db", dir, name);
    unit_open_core(path, NULL, s, c);
    return unit_register(*c, "a1", slots);
}

static void reopen(const char *path, store **s, sched **c)
{
    sched_free(*c);
    store_close(*s);
    unit_open_core(path, NULL, s, c);
}

#define HPS "\"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}"

/* End states (docs/scheduler.md "End states"): all trials failed ->
 * FAILED with the reason; trial.max_failures stops a broken sweep; a good
 * one COMPLETED ("search finished"); state and reason survive a reopen.
 * Seeds: the same file twice gives trial k the same seed. */
static void test_end_states_and_seeds(void **state)
{
    (void)state;
    char path[320];
    store *s;
    sched *c;
    hf_jerr e;
    int64_t aid = open_farm("ends", 2, path, sizeof path, &s, &c);
    drive_exit_code = 3;
    int64_t a = submit_as(c, "{\"name\": \"all-fail\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                             " \"searcher\": {\"name\": \"random\", \"max_trials\": 3, \"seed\": 3}, " HPS
                             ", \"trial\": {\"command\": [\"true\"], \"max_failures\": 0}}", "alice", 0, 0, &e);
    drain(c, aid);
    int64_t b = submit_as(c, "{\"name\": \"broken\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                             " \"searcher\": {\"name\": \"random\", \"max_trials\": 30, \"max_concurrent_trials\": 1},"
                             " " HPS ", \"trial\": {\"command\": [\"true\"], \"max_failures\": 4}}", "alice", 0, 0, &e);
    drain(c, aid);
    drive_exit_code = 0;
    int64_t g = submit_as(c, "{\"name\": \"good\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                             " \"searcher\": {\"name\": \"random\", \"max_trials\": 3, \"seed\": 3}, " SPACE "}",
                          "alice", 0, 0, &e);
    drain(c, aid);
    submit_as(c, "{\"name\": \"bad\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                 " \"searcher\": {\"name\": \"random\", \"max_trials\": 3}, " HPS
                 ", \"trial\": {\"command\": [\"true\"], \"max_failures\": -1}}", "alice", 0, HF_EINVAL, &e);
    assert_string_equal(e.field, "trial.max_failures");
    for (int pass = 0; pass < 2; pass++) {
        json_t *x = exp_get(c, a);
        assert_string_equal(json_string_value(json_object_get(x, "state")), "FAILED");
        assert_non_null(strstr(json_string_value(json_object_get(x, "end_reason")), "all 3 trials failed; the last: "));
        json_decref(x);
        x = exp_get(c, b);
        assert_string_equal(json_string_value(json_object_get(x, "state")), "FAILED");
        assert_non_null(strstr(json_string_value(json_object_get(x, "end_reason")),
                               "4 trials failed in a row (trial.max_failures)"));
        json_t *cn = json_object_get(x, "counts");
        assert_int_equal(json_integer_value(json_object_get(cn, "failed")), 4);
        assert_int_equal(json_integer_value(json_object_get(cn, "queued")), 0);
        json_decref(x);
        x = exp_get(c, g);
        assert_string_equal(json_string_value(json_object_get(x, "state")), "COMPLETED");
        assert_string_equal(json_string_value(json_object_get(x, "end_reason")), "search finished");
        json_decref(x);
        /* Same seed and index, same HYPERFARM_SEED, whatever the trial ids. */
        json_t *ta = trials_of(c, a), *tg = trials_of(c, g);
        for (size_t k = 0; k < 3; k++) {
            json_t *u = json_array_get(json_object_get(ta, "trials"), k), *v = json_array_get(json_object_get(tg, "trials"), k);
            assert_int_not_equal(json_integer_value(json_object_get(u, "id")), json_integer_value(json_object_get(v, "id")));
            assert_int_equal(json_integer_value(json_object_get(u, "idx")), json_integer_value(json_object_get(v, "idx")));
            assert_int_equal(json_integer_value(json_object_get(u, "seed")),
                             expmeta_trial_seed(3, json_integer_value(json_object_get(u, "idx"))));
            assert_int_equal(json_integer_value(json_object_get(u, "seed")), json_integer_value(json_object_get(v, "seed")));
        }
        json_decref(ta);
        json_decref(tg);
        reopen(path, &s, &c);
    }
    sched_free(c);
    store_close(s);
}

static void test_users_patch_fork_on_a_core(void **state)
{
    (void)state;
    char path[320];
    store *s;
    sched *c;
    hf_jerr e;
    int64_t aid = open_farm("users", 4, path, sizeof path, &s, &c);
    int64_t x = submit_as(c, "{\"name\": \"base\", \"tags\": [\"baseline\"], \"description\": \"first\","
                             " \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                             " \"searcher\": {\"name\": \"random\", \"max_trials\": 2, \"seed\": 3}, " SPACE "}",
                          "alice", 0, 0, &e);
    submit_as(c, "{\"name\": \"t\", \"tags\": [\"bad tag\"], \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                 " \"searcher\": {\"name\": \"random\", \"max_trials\": 2}, " SPACE "}", "alice", 0, HF_EINVAL, &e);
    assert_string_equal(e.field, "tags[0]");
    json_t *assigned = json_array();
    assert_int_equal(drive(c, aid, value_of, assigned), 2);
    /* HYPERFARM_SEED in every assignment, from the experiment seed and the
     * trial's index within the experiment (its ids count from x's first). */
    size_t i;
    json_t *as;
    int64_t first = INT64_MAX;
    json_array_foreach(assigned, i, as) {
        int64_t id = json_integer_value(json_object_get(as, "trial_id"));
        if (id < first) first = id;
    }
    json_array_foreach(assigned, i, as) {
        uint32_t want = expmeta_trial_seed(3, json_integer_value(json_object_get(as, "trial_id")) - first);
        assert_int_equal(json_integer_value(json_object_get(as, "seed")), want);   /* HYPERFARM_SEED */
    }
    json_decref(assigned);

    json_t *b = J("{\"add_tags\": [\"reviewed\"], \"description\": \"## learned\"}"), *out = NULL;
    assert_int_equal(sched_experiment_patch(c, x, b, "bob", &out, &e), 0);
    json_decref(out);
    json_decref(b);
    b = J("{\"tags\": 1}");
    assert_int_equal(sched_experiment_patch(c, x, b, "bob", &out, &e), HF_EINVAL);
    json_decref(b);
    b = J("{\"description\": null}");
    assert_int_equal(sched_experiment_patch(c, 999, b, "bob", &out, &e), HF_ENOTFOUND);
    json_decref(b);
    json_t *tr = trials_of(c, x);
    int64_t t1 = json_integer_value(json_object_get(json_array_get(json_object_get(tr, "trials"), 0), "id"));
    json_decref(tr);
    b = J("{\"notes\": \"diverged\"}");
    assert_int_equal(sched_trial_patch(c, t1, b, "carol", &out, &e), 0);
    assert_string_equal(json_string_value(json_object_get(out, "notes")), "diverged");
    json_decref(out);
    assert_int_equal(sched_trial_patch(c, 999999, b, "carol", &out, &e), HF_ENOTFOUND);
    json_decref(b);

    /* Fork: unknown parent refused, the fork records its parent. */
    const char *fork = "{\"name\": \"fork\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                       " \"searcher\": {\"name\": \"random\", \"max_trials\": 1}, " SPACE "}";
    submit_as(c, fork, "alice", 999, HF_ENOTFOUND, &e);
    int64_t f = submit_as(c, fork, "alice", x, 0, &e);

    /* Tag filter. */
    assert_int_equal(sched_experiment_list_tagged(c, 0, "reviewed", &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "experiments")), 1);
    json_decref(out);
    assert_int_equal(sched_experiment_list_tagged(c, 0, "nope", &out), 0);
    assert_int_equal(json_array_size(json_object_get(out, "experiments")), 0);
    json_decref(out);

    /* Everything survives a restart. */
    reopen(path, &s, &c);
    json_t *v = exp_get(c, x);
    assert_string_equal(json_string_value(json_object_get(v, "submitted_by")), "alice");
    assert_string_equal(json_string_value(json_object_get(v, "description")), "## learned");
    json_t *want = J("[\"baseline\", \"reviewed\"]");
    assert_true(json_equal(json_object_get(v, "tags"), want));
    json_decref(want);
    json_decref(v);
    v = exp_get(c, f);
    assert_int_equal(json_integer_value(json_object_get(v, "parent_experiment")), x);
    json_decref(v);
    assert_int_equal(sched_trial_get(c, t1, &v), 0);
    assert_string_equal(json_string_value(json_object_get(v, "notes")), "diverged");
    json_decref(v);

    /* Who did what: the users' own events carry their names, the
     * scheduler's (trials created and placed by the dispatch pass) none. */
    sqlite3 *db = store_db(s);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type='ACTIVE' AND user_name='alice'"), 2);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type='EDITED' AND user_name='bob'"), 1);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type='NOTES' AND user_name='carol'"), 1);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type='QUEUED' AND user_name IS NOT NULL"), 0);
    b = J("{}");
    assert_int_equal(sched_experiment_action_as(c, f, "cancel", "dave", &out, &e), 0);
    json_decref(out);
    json_decref(b);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events WHERE type='CANCELED' AND user_name='dave'"
                                     " AND trial_id IS NULL"), 1);
    sched_free(c);
    store_close(s);
}

static void test_warm_start_and_extend(void **state)
{
    (void)state;
    char path[320];
    store *s;
    sched *c;
    hf_jerr e;
    int64_t aid = open_farm("warm", 2, path, sizeof path, &s, &c);
    /* The source: 6 random trials, finished. */
    int64_t src = submit_as(c, "{\"name\": \"src\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                               " \"searcher\": {\"name\": \"random\", \"max_trials\": 6, \"seed\": 1}, " SPACE "}",
                            NULL, 0, 0, &e);
    drain(c, aid);
    json_t *v = exp_get(c, src);
    assert_string_equal(json_string_value(json_object_get(v, "state")), "COMPLETED");
    json_decref(v);

    /* Unknown experiment, named. */
    const char *head = "{\"name\": \"warm\", \"objective\": {\"metric\": \"m\", \"goal\": \"maximize\"},"
                       " \"searcher\": {\"name\": \"tpe\", \"max_trials\": 4, \"seed\": 2, \"n_startup_trials\": 3}, "
                       SPACE ", \"warm_start\": ";
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s{\"experiments\": [%lld, 4242]}}", head, (long long)src);
    submit_as(c, cfg, NULL, 0, HF_EINVAL, &e);
    assert_string_equal(e.field, "warm_start.experiments[1]");

    /* TPE observes the 6 trials before its own; the enqueued point runs first. */
    snprintf(cfg, sizeof cfg, "%s{\"experiments\": [%lld], \"enqueue\": [{\"x\": 0.25, \"k\": 3}]}}", head,
             (long long)src);
    int64_t w = submit_as(c, cfg, "alice", 0, 0, &e);
    v = exp_get(c, w);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "warm_start"), "observed")), 6);
    json_t *ss = json_object_get(v, "searcher_state");
    assert_int_equal(json_integer_value(json_object_get(ss, "observations")), 6);
    assert_true(json_is_true(json_object_get(ss, "model")));   /* 6 >= n_startup_trials: TPE from the start */
    json_decref(v);
    drain(c, aid);
    json_t *tr = trials_of(c, w);
    json_t *first = json_object_get(json_array_get(json_object_get(tr, "trials"), 0), "hparams");
    json_t *want = J("{\"x\": 0.25, \"k\": 3}");
    assert_true(json_equal(first, want));
    json_decref(want);
    assert_int_equal(json_array_size(json_object_get(tr, "trials")), 4);
    json_decref(tr);

    /* After a restart: the same history (the stored snapshot), plus the 4 trials. */
    reopen(path, &s, &c);
    v = exp_get(c, w);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "searcher_state"), "observations")), 10);
    json_decref(v);

    /* Extend: the searcher goes on past the file's max_trials, also after
     * a restart (it is rebuilt with the stored max_trials). */
    json_t *b = J("{\"add_trials\": 2}"), *out = NULL;
    assert_int_equal(sched_experiment_extend_as(c, w, b, "alice", &out, &e), 0);
    assert_string_equal(json_string_value(json_object_get(out, "state")), "ACTIVE");
    json_decref(out);
    drain(c, aid);
    tr = trials_of(c, w);
    assert_int_equal(json_array_size(json_object_get(tr, "trials")), 6);
    json_decref(tr);
    reopen(path, &s, &c);
    assert_int_equal(sched_experiment_extend_as(c, w, b, "alice", &out, &e), 0);
    json_decref(out);
    json_decref(b);
    drain(c, aid);
    tr = trials_of(c, w);
    assert_int_equal(json_array_size(json_object_get(tr, "trials")), 8);
    json_decref(tr);
    v = exp_get(c, w);
    assert_string_equal(json_string_value(json_object_get(v, "state")), "COMPLETED");
    assert_int_equal(json_integer_value(json_object_get(v, "max_trials")), 8);
    json_decref(v);
    sched_free(c);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tags_and_patch_bodies),
        cmocka_unit_test(test_trial_seed),
        cmocka_unit_test(test_warm_start_validation),
        cmocka_unit_test(test_token_users),
        cmocka_unit_test(test_users_patch_fork_on_a_core),
        cmocka_unit_test(test_end_states_and_seeds),
        cmocka_unit_test(test_warm_start_and_extend),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
