/*
 * test_scheduler_webhook.c — webhooks (scheduler/notify/webhook.c) without a
 * network: the HMAC-SHA256 signature against RFC 4231's test vectors, the
 * JSON and Slack bodies, a table of POST /webhooks bodies (each refusal
 * names its field), and the outbox trigger of schema/0009_insight.sql on
 * a real store (filters, per-experiment hooks, non-state events ignored).
 * Where a hook may point (issue 27: loopback, private, link-local and the
 * scheduler's own addresses refused unless allowed), resolved for real
 * from numeric hosts (no traffic), and a hook that reuses a deleted one's
 * id not inheriting its retry delay, against a real loopback receiver,
 * which also sees that delivered rows are not kept and ids not reused.
 * Delivery over HTTP is tests/system/test_webhooks.sh.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "thread_fixture.h"

#include "hf_err.h"
#include "scheduler/notify/webhook.h"
#include "unit_fixture.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    /* An experiment event: its best trial's objective, and with a list
     * objective every objective of that trial. */
    ev.trial_id = 0;
    ev.objective_trial = 12;
    ev.objectives = "{\"acc\":0.25,\"lat\":null}";
    s = webhook_body(&ev, "json");
    v = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(v, "event")), "experiment.COMPLETED");
    assert_true(json_is_null(json_object_get(v, "trial_id")));
    assert_true(json_real_value(json_object_get(v, "objective")) == 0.25);
    assert_int_equal(json_integer_value(json_object_get(v, "objective_trial")), 12);
    assert_true(json_real_value(json_object_get(json_object_get(v, "objectives"), "acc")) == 0.25);
    assert_true(json_is_null(json_object_get(json_object_get(v, "objectives"), "lat")));
    json_decref(v);
    free(s);
    s = webhook_body(&ev, "slack");
    v = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(v, "text")),
                        "hyperfarm: experiment 3 (sweep \"A\") is COMPLETED, best objective 0.25 (trial 12): exit 0");
    json_decref(v);
    free(s);
    ev.objectives = NULL;
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

/* A store at DIR/name.db (made or migrated by store_open). */
static sqlite3 *open_db(store **st, const char *name)
{
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    assert_int_equal(store_open(path, st, err, sizeof err), 0);
    return store_db(*st);
}

/* An events row through store_event_insert, as the core writes it (its
 * webhook_outbox rows in the same transaction). */
static void event_at(store *st, int64_t time_ms, int64_t exp_id, int64_t trial_id, const char *type, const char *detail)
{
    assert_int_equal(store_event_insert(st, time_ms, exp_id, trial_id, type, detail, NULL), 0);
}

/* store_event_insert: which hooks get an outbox row for which event. */
static void test_outbox_rows(void **state)
{
    (void)state;
    store *s = NULL;
    sqlite3 *db = open_db(&s, "hf");
    assert_int_equal(sqlite3_exec(db,
        "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES (1,'a','ACTIVE','{}',1,0),"
        " (2,'b','ACTIVE','{}',1,0);"
        "INSERT INTO webhooks(id,url,secret,format,events,experiment_id,created_at) VALUES"
        " (1,'http://h/all','k','json','[\"*\"]',NULL,0),"
        " (2,'http://h/exp2','k','slack','[\"experiment.*\"]',2,0),"
        " (3,'http://h/failed','k','json','[\"trial.FAILED\",\"experiment.COMPLETED\"]',NULL,0);",
        NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(store_begin(s), 0);
    event_at(s, 1, 1, 0, "ACTIVE", "submitted");   /* hook 1 */
    event_at(s, 2, 2, 0, "COMPLETED", NULL);       /* hooks 1, 2, 3 */
    event_at(s, 3, 1, 5, "FAILED", "exit 3");      /* hooks 1, 3 */
    event_at(s, 4, 1, 5, "KILL_REQUESTED", "x");   /* not a state: none */
    event_at(s, 5, 0, 0, "AGENT_LOST", "a1");      /* not an experiment's: none */
    event_at(s, 6, 2, 6, "RUNNING", NULL);         /* hook 1 */
    assert_int_equal(store_commit(s), 0);
    /* each row names its own event */
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox o JOIN events e ON e.id=o.event_id "
                                      "WHERE e.time=o.next_at"), 7);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox o JOIN events e ON e.id=o.event_id "
                                      "WHERE o.hook_id=3 AND e.type IN ('FAILED','COMPLETED')"), 2);
    /* no trigger does it behind the core's back: a raw insert queues nothing */
    assert_int_equal(sqlite3_exec(db, "INSERT INTO events(time,experiment_id,type) VALUES(7,1,'PAUSED')", NULL, NULL,
                                  NULL), SQLITE_OK);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox"), 7);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE hook_id=1"), 4);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE hook_id=2"), 1);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE hook_id=3"), 2);
    assert_int_equal(unit_one_int(db, "SELECT min(next_at) FROM webhook_outbox"), 1);
    /* deleting a hook drops its undelivered rows */
    assert_int_equal(sqlite3_exec(db, "DELETE FROM webhooks WHERE id=1", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox"), 3);
    /* no hook left: a state change queues nothing */
    assert_int_equal(sqlite3_exec(db, "DELETE FROM webhooks", NULL, NULL, NULL), SQLITE_OK);
    event_at(s, 8, 2, 0, "COMPLETED", NULL);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox"), 0);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM events"), 8);
    store_close(s);
}

/* webhook_addr_private on numeric addresses. */
static void test_addr_class(void **state)
{
    (void)state;
    static const struct { const char *ip; int private; } t[] = {
        {"127.0.0.1", 1},      {"127.9.9.9", 1},     {"10.0.0.1", 1},         {"172.16.0.1", 1},
        {"172.31.255.255", 1}, {"172.32.0.1", 0},    {"192.168.1.1", 1},      {"169.254.169.254", 1},
        {"0.0.0.0", 1},        {"100.64.0.1", 1},    {"224.0.0.1", 1},        {"255.255.255.255", 1},
        {"8.8.8.8", 0},        {"93.184.216.34", 0}, {"::1", 1},              {"::", 1},
        {"fd00::1", 1},        {"fc12::1", 1},       {"fe80::1", 1},          {"ff02::1", 1},
        {"::ffff:127.0.0.1", 1}, {"::ffff:10.1.2.3", 1}, {"::ffff:8.8.8.8", 0}, {"2001:4860:4860::8888", 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        struct sockaddr_storage ss = {0};
        if (strchr(t[i].ip, ':')) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            a->sin6_family = AF_INET6;
            assert_int_equal(inet_pton(AF_INET6, t[i].ip, &a->sin6_addr), 1);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            a->sin_family = AF_INET;
            assert_int_equal(inet_pton(AF_INET, t[i].ip, &a->sin_addr), 1);
        }
        const char *why = webhook_addr_private((struct sockaddr *)&ss);
        if ((why != NULL) != t[i].private) fail_msg("%s: %s", t[i].ip, why ? why : "public");
    }
}

static webhook_svc *open_svc(store **st, const char *name)
{
    char path[300], err[256];
    webhook_svc *w = NULL;
    open_db(st, name);
    snprintf(path, sizeof path, "%s/%s.db", dir, name);
    assert_int_equal(webhook_open(path, &w, err, sizeof err), 0);
    return w;
}

/* webhook_url_check under both policies (numeric hosts: no DNS, no traffic). */
static void test_url_policy(void **state)
{
    (void)state;
    store *st = NULL;
    webhook_svc *w = open_svc(&st, "policy");
    assert_int_equal(unit_threads_named("hf-webhook"), 1);   /* the delivery thread */
    assert_true(unit_threads_named("hf-ckpt") >= 1);         /* the store's checkpointer */
    static const char *const refused[] = {
        "http://127.0.0.1:9/hook", "http://10.0.0.1/", "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:8080/", "http://[fd00::1]/", "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0:8080/api/v1/experiments/1/cancel", "https://192.168.0.10/x", "http://user:pw@172.20.0.1/",
        "http://localhost:8080/"};
    hf_jerr e;
    webhook_set_policy(w, 0, 8080);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        hf_jerr_clear(&e);
        if (webhook_url_check(w, refused[i], &e) != HF_EINVAL) fail_msg("%s accepted", refused[i]);
        assert_string_equal(e.field, "url");
        assert_non_null(strstr(e.msg, "may not target"));
    }
    hf_jerr_clear(&e);
    assert_int_equal(webhook_url_check(w, "http://93.184.216.34/hook", &e), 0);
    /* allowed: private targets pass, but never the scheduler's own port on its own machine */
    webhook_set_policy(w, 1, 8080);
    assert_int_equal(webhook_url_check(w, "http://127.0.0.1:9/hook", &e), 0);
    assert_int_equal(webhook_url_check(w, "http://10.0.0.1/", &e), 0);
    hf_jerr_clear(&e);
    assert_int_equal(webhook_url_check(w, "http://127.0.0.1:8080/api/v1/experiments/1/cancel", &e), HF_EINVAL);
    assert_non_null(strstr(e.msg, "the scheduler itself"));
    webhook_close(w);
    assert_int_equal(unit_threads_settle("hf-webhook", 0), 0);
    store_close(st);
}

/* A loopback receiver answering 200 to every request; counts them and
 * keeps the largest X-Hyperfarm-Delivery seen. */
typedef struct receiver {
    int fd, port;
    atomic_int hits, stop;
    atomic_llong max_delivery;
    pthread_t th;
} receiver;

static void *recv_main(void *arg)
{
    receiver *r = arg;
    while (!atomic_load(&r->stop)) {
        int c = accept(r->fd, NULL, NULL);
        if (c < 0) continue;
        char buf[8192];
        size_t n = 0;
        long want = -1;
        for (;;) {   /* headers, then Content-Length bytes of body */
            ssize_t k = recv(c, buf + n, sizeof buf - 1 - n, 0);
            if (k <= 0) break;
            n += (size_t)k;
            buf[n] = 0;
            char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "content-length:");
            if (end && want < 0) want = (long)(end + 4 - buf) + (cl ? atol(cl + 15) : 0);
            if (want >= 0 && (long)n >= want) break;
            if (n >= sizeof buf - 1) break;
        }
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        const char *dh = strcasestr(buf, "x-hyperfarm-delivery:");
        long long id = dh ? atoll(dh + 21) : 0;
        if (id > atomic_load(&r->max_delivery)) atomic_store(&r->max_delivery, id);
        if (write(c, ok, sizeof ok - 1) < 0) { /* the hook records the failure */ }
        close(c);
        atomic_fetch_add(&r->hits, 1);
    }
    return NULL;
}

static void receiver_start(receiver *r)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    r->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(r->fd >= 0);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};   /* accept returns now and then: stop is seen */
    setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    assert_int_equal(bind(r->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(r->fd, 16), 0);
    assert_int_equal(getsockname(r->fd, (struct sockaddr *)&a, &al), 0);
    r->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&r->th, NULL, recv_main, r), 0);
}

static void receiver_stop(receiver *r)
{
    atomic_store(&r->stop, 1);
    pthread_join(r->th, NULL);
    close(r->fd);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* r's request count once it reaches want, waiting up to 5 s. */
static int wait_hits(receiver *r, int want)
{
    int64_t end = now_ms() + 5000;
    while (atomic_load(&r->hits) < want && now_ms() < end) usleep(20000);
    return atomic_load(&r->hits);
}

static json_t *spec_body(const char *url)
{
    return json_pack("{ss}", "url", url);
}

/* A webhook service on DIR/name.db with one hook ("*") to a real loopback
 * receiver r, loopback allowed. */
static webhook_svc *open_hooked(store **st, const char *name, receiver *r)
{
    webhook_svc *w = open_svc(st, name);
    receiver_start(r);
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", r->port);
    webhook_set_policy(w, 1, 0);
    hf_jerr e;
    assert_int_equal(webhook_url_check(w, url, &e), 0);
    webhook_spec sp;
    json_t *body = spec_body(url), *out = NULL;
    assert_int_equal(webhook_spec_parse(body, &sp, &e), 0);
    assert_int_equal(webhook_create(w, &sp, &out), 0);
    json_decref(out);
    json_decref(body);
    return w;
}

/* Hook 1 fails (nothing listens on its port) until its backoff is 4 s;
 * it is deleted and a new hook gets id 1 again: its first delivery must
 * not wait for the deleted hook's retry time (issue 27). */
static void test_backoff_not_inherited(void **state)
{
    (void)state;
    store *st = NULL;
    webhook_svc *w = open_svc(&st, "reuse");
    webhook_set_policy(w, 1, 0);
    sqlite3 *db = store_db(st);
    receiver r = {0};
    receiver_start(&r);
    int dead = socket(AF_INET, SOCK_STREAM, 0);   /* a bound port nobody listens on: refused at once */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(dead, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(dead, (struct sockaddr *)&a, &al), 0);
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/dead", ntohs(a.sin_port));

    webhook_spec sp;
    hf_jerr e;
    json_t *body = spec_body(url), *out = NULL;
    assert_int_equal(webhook_spec_parse(body, &sp, &e), 0);
    sp.owner = "alice";
    assert_int_equal(webhook_create(w, &sp, &out), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "id")), 1);
    assert_string_equal(json_string_value(json_object_get(out, "owner")), "alice");
    json_decref(out);
    json_decref(body);
    assert_int_equal(sqlite3_exec(db, "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES "
                                      "(1,'a','ACTIVE','{}',1,0)",
                                  NULL, NULL, NULL), SQLITE_OK);
    event_at(st, now_ms(), 1, 0, "PAUSED", NULL);
    /* 5 failures: 250 + 500 + 1000 + 2000 ms apart; the next retry is 4 s away */
    int64_t end = now_ms() + 15000;
    while (unit_one_int(db, "SELECT coalesce(max(attempts),0) FROM webhook_outbox") < 5 && now_ms() < end)
        usleep(20000);
    assert_true(unit_one_int(db, "SELECT max(attempts) FROM webhook_outbox") >= 5);
    assert_int_equal(webhook_delete(w, 1), 0);

    snprintf(url, sizeof url, "http://127.0.0.1:%d/live", r.port);
    body = spec_body(url);
    assert_int_equal(webhook_spec_parse(body, &sp, &e), 0);
    assert_int_equal(webhook_create(w, &sp, &out), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "id")), 1);   /* the same id again */
    json_decref(out);
    json_decref(body);
    int64_t t0 = now_ms();
    event_at(st, now_ms(), 1, 0, "ACTIVE", NULL);
    while (atomic_load(&r.hits) == 0 && now_ms() - t0 < 5000) usleep(10000);
    int64_t took = now_ms() - t0;
    assert_int_equal(atomic_load(&r.hits), 1);
    if (took > 3000) fail_msg("the new hook's first delivery took %lld ms: it inherited the deleted hook's backoff",
                              (long long)took);
    webhook_close(w);
    receiver_stop(&r);
    close(dead);
    store_close(st);
}

/* A hook accepted while private targets were allowed (or whose name
 * resolved elsewhere then) is checked again at delivery: with the policy
 * closed, curl is given no socket for 127.0.0.1, the receiver sees no
 * connection, and the outbox row records why. */
static void test_delivery_checked(void **state)
{
    (void)state;
    store *st = NULL;
    receiver r = {0};
    webhook_svc *w = open_hooked(&st, "deliver", &r);
    sqlite3 *db = store_db(st);
    webhook_set_policy(w, 0, 0);   /* as if the name now pointed at a private address */
    assert_int_equal(sqlite3_exec(db, "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES "
                                      "(1,'a','ACTIVE','{}',1,0)",
                                  NULL, NULL, NULL), SQLITE_OK);
    event_at(st, now_ms(), 1, 0, "PAUSED", NULL);
    int64_t end = now_ms() + 5000;
    while (unit_one_int(db, "SELECT coalesce(max(attempts),0) FROM webhook_outbox") < 1 && now_ms() < end)
        usleep(20000);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox WHERE attempts>0 AND delivered_at IS NULL "
                                      "AND last_error LIKE 'address 127.0.0.1 refused: a loopback address%'"), 1);
    assert_int_equal(atomic_load(&r.hits), 0);
    /* opened again: the same row is delivered */
    webhook_set_policy(w, 1, 0);
    assert_int_equal(wait_hits(&r, 1), 1);
    webhook_close(w);
    receiver_stop(&r);
    store_close(st);
}

/* A delivered row is not kept (schema/0018_webhook_counts.sql): it is
 * counted on its hook, with the last status and attempt time, and a later
 * delivery gets a new id although the table was empty (receivers
 * deduplicate on X-Hyperfarm-Delivery). */
static void test_delivered_not_kept(void **state)
{
    (void)state;
    store *st = NULL;
    receiver r = {0};
    webhook_svc *w = open_hooked(&st, "kept", &r);
    sqlite3 *db = store_db(st);
    assert_int_equal(sqlite3_exec(db, "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES "
                                      "(1,'a','ACTIVE','{}',1,0)",
                                  NULL, NULL, NULL), SQLITE_OK);
    event_at(st, 1, 1, 0, "PAUSED", NULL);
    event_at(st, 2, 1, 0, "ACTIVE", NULL);
    event_at(st, 3, 1, 0, "PAUSED", NULL);
    int64_t end = now_ms() + 5000;
    while ((atomic_load(&r.hits) < 3 || unit_one_int(db, "SELECT count(*) FROM webhook_outbox")) && now_ms() < end)
        usleep(20000);
    assert_int_equal(atomic_load(&r.hits), 3);
    assert_int_equal(atomic_load(&r.max_delivery), 3);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM webhook_outbox"), 0);
    json_t *out = NULL;
    assert_int_equal(webhook_list(w, &out), 0);
    json_t *h = json_array_get(json_object_get(out, "webhooks"), 0);
    assert_int_equal(json_integer_value(json_object_get(h, "delivered")), 3);
    assert_int_equal(json_integer_value(json_object_get(h, "pending")), 0);
    assert_int_equal(json_integer_value(json_object_get(h, "last_status")), 200);
    assert_true(json_integer_value(json_object_get(h, "last_attempt_at")) > 0);
    json_decref(out);
    /* the next delivery is number 4, not 1 again */
    event_at(st, 4, 1, 0, "ACTIVE", NULL);
    assert_int_equal(wait_hits(&r, 4), 4);
    assert_int_equal(atomic_load(&r.max_delivery), 4);
    webhook_close(w);
    receiver_stop(&r);
    store_close(st);
}

/* Schema 0018 on a database an older scheduler wrote: delivered rows are
 * counted on their hook and deleted, the pending one stays, and the next
 * row's id is above every id handed out before, the deleted newest one
 * included. */
static void test_counts_migrated(void **state)
{
    (void)state;
    store *st = NULL;
    sqlite3 *db = open_db(&st, "counts");
    assert_int_equal(sqlite3_exec(db,
                                  "ALTER TABLE webhooks DROP COLUMN delivered;"
                                  "ALTER TABLE webhooks DROP COLUMN last_status;"
                                  "ALTER TABLE webhooks DROP COLUMN last_attempt_at;"
                                  "INSERT INTO experiments(id,name,state,config,max_trials,created_at) VALUES"
                                  " (1,'a','ACTIVE','{}',1,0);"
                                  "INSERT INTO webhooks(id,url,secret,format,events,created_at) VALUES"
                                  " (9,'https://192.0.2.3/','s','json','[\"*\"]',1);"
                                  "INSERT INTO webhook_outbox(id,hook_id,event_id,next_at,attempts,delivered_at,"
                                  "last_status,last_error) VALUES(1,9,1,1,1,10,200,NULL),(2,9,2,1,1,20,200,NULL),"
                                  "(3,9,3,1,1,30,200,NULL),(4,9,4,9000000000000,2,NULL,500,'x'),"
                                  "(5,9,5,1,1,50,204,NULL);"
                                  "PRAGMA user_version=17",
                                  NULL, NULL, NULL), SQLITE_OK);
    store_close(st);
    db = open_db(&st, "counts");
    assert_int_equal(unit_one_int(db, "SELECT group_concat(id) FROM webhook_outbox"), 4);
    assert_int_equal(unit_one_int(db, "SELECT delivered FROM webhooks WHERE id=9"), 4);
    assert_int_equal(unit_one_int(db, "SELECT last_status FROM webhooks WHERE id=9"), 500);
    event_at(st, 6, 1, 0, "PAUSED", NULL);
    assert_int_equal(unit_one_int(db, "SELECT max(id) FROM webhook_outbox"), 6);
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM sqlite_schema WHERE name IN ('webhook_outbox_due',"
                                      "'webhook_outbox_hook','webhook_outbox_event')"), 3);
    /* 0019: the trigger is gone (the core writes the outbox rows) */
    assert_int_equal(unit_one_int(db, "SELECT count(*) FROM sqlite_schema WHERE type='trigger' AND "
                                      "tbl_name='events'"), 0);
    store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sign),
        cmocka_unit_test(test_body),
        cmocka_unit_test(test_spec),
        cmocka_unit_test(test_outbox_rows),
        cmocka_unit_test(test_addr_class),
        cmocka_unit_test(test_url_policy),
        cmocka_unit_test(test_backoff_not_inherited),
        cmocka_unit_test(test_delivery_checked),
        cmocka_unit_test(test_delivered_not_kept),
        cmocka_unit_test(test_counts_migrated),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
