/*
 * webhook_outbox.c — the webhook service's life and its delivery thread
 * "hf-webhook" (webhook.h; docs/protocol.md "Webhooks").
 *
 * The thread drains the durable outbox: a round reads up to WEBHOOK_ROUND
 * due rows oldest first (under w->mu), POSTs each with libcurl without
 * any lock, and records the outcome (under w->mu again), so a slow
 * receiver delays neither registrations nor the scheduler core. It runs
 * rounds back to back while rows are due, else sleeps WEBHOOK_POLL_MS or
 * until kicked (a test delivery) or stopped; stopping abandons an attempt
 * in progress (curl's progress callback), and that row stays due.
 * Backoff is per hook and in memory (w->bo under w->bo_mu): rows of a
 * hook that just failed are skipped until its retry time, which keeps
 * their order and spares a receiver that is down a storm of attempts;
 * after a restart every due row is tried at once.
 *
 * Workload: a few hooks; at most one row per (hook, state change), i.e.
 * a handful per trial.
 */
#include "scheduler/notify/webhook_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static backoff *bo_find(webhook_svc *w, int64_t hook, int create)
{
    backoff *free_slot = NULL;
    for (int i = 0; i < HOOK_SLOTS; i++) {
        if (w->bo[i].hook_id == hook) return &w->bo[i];
        if (!free_slot && w->bo[i].hook_id == 0) free_slot = &w->bo[i];
    }
    if (create && free_slot) {
        memset(free_slot, 0, sizeof *free_slot);
        free_slot->hook_id = hook;
        return free_slot;
    }
    return NULL;
}

/* webhook_int.h */
void webhook_forget_backoff(webhook_svc *w, int64_t id)
{
    pthread_mutex_lock(&w->bo_mu);
    atomic_fetch_add(&w->gen, 1);
    backoff *b = bo_find(w, id, 0);
    if (b) b->hook_id = 0;
    pthread_mutex_unlock(&w->bo_mu);
}

static size_t discard(char *p, size_t sz, size_t n, void *u)
{
    (void)p;
    (void)u;
    return sz * n;   /* the receiver's answer is not kept */
}

static int on_xfer(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a; (void)b; (void)c; (void)d;
    return hf_thread_stopping(((webhook_svc *)u)->th);
}

/* Every address curl is about to connect to (after its own DNS lookup,
 * for each address it tries): refused under the policy -> no socket, so
 * the attempt fails before any byte is sent (DNS may have changed since
 * the hook was created). */
static curl_socket_t open_checked(void *u, curlsocktype purpose, struct curl_sockaddr *addr)
{
    webhook_svc *w = u;
    (void)purpose;
    const char *why = webhook_addr_refused(&addr->addr, atomic_load(&w->allow_private), atomic_load(&w->self_port));
    if (why) {
        char ip[INET6_ADDRSTRLEN] = "?";
        const void *in = addr->family == AF_INET ? (const void *)&((struct sockaddr_in *)&addr->addr)->sin_addr
                                                 : (const void *)&((struct sockaddr_in6 *)&addr->addr)->sin6_addr;
        inet_ntop(addr->family, in, ip, sizeof ip);
        snprintf(w->refused, sizeof w->refused, "address %s refused: %s (--webhook-allow-private)", ip, why);
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

/* POST body to url; RET the HTTP status (0: no answer, err says why). */
static long post(webhook_svc *w, const char *url, const char *body, const char *sig, const char *event,
                 int64_t delivery, char *err, size_t errlen)
{
    char h1[100], h2[120], h3[64];
    struct curl_slist *hd = NULL;
    snprintf(h1, sizeof h1, "X-Hyperfarm-Signature: %s", sig);
    snprintf(h2, sizeof h2, "X-Hyperfarm-Event: %.90s", event);
    snprintf(h3, sizeof h3, "X-Hyperfarm-Delivery: %lld", (long long)delivery);
    hd = curl_slist_append(hd, "Content-Type: application/json");
    hd = curl_slist_append(hd, h1);
    hd = curl_slist_append(hd, h2);
    hd = curl_slist_append(hd, h3);
    hd = curl_slist_append(hd, "Expect:");
    CURL *c = w->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "hyperfarm-scheduler");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)WEBHOOK_TIMEOUT_MS);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xfer);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, w);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");   /* straight to the checked address, never via a proxy */
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, w);
    w->refused[0] = 0;
    long status = 0;
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    else snprintf(err, errlen, "%s", w->refused[0] ? w->refused : curl_easy_strerror(cc));
    if (cc == CURLE_OK && (status < 200 || status > 299)) snprintf(err, errlen, "HTTP %ld", status);
    curl_slist_free_all(hd);
    return status;
}

typedef struct due {
    webhook_event ev;
    int64_t hook_id;
    char   *url, *secret, *format, *state, *detail, *name, *objectives;
} due;

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

static void due_free(due *d)
{
    free(d->url);
    free(d->secret);
    free(d->format);
    free(d->state);
    free(d->detail);
    free(d->name);
    free(d->objectives);
}

/* With a list objective: {"metric": value, ...} of every objective of a
 * trial (its last value, as the Pareto front ranks them; null when not
 * reported) as malloc'ed JSON text; NULL with one objective or on error. */
static char *objectives_text(const char *config, const char *latest)
{
    json_t *cfg = config ? json_loads(config, 0, NULL) : NULL, *objs = json_object_get(cfg, "objective");
    char *out = NULL;
    if (json_is_array(objs) && json_array_size(objs) > 0) {
        json_t *vals = latest ? json_loads(latest, 0, NULL) : NULL, *o = json_object(), *m;
        size_t i;
        json_array_foreach(objs, i, m) {
            const char *name = json_string_value(json_object_get(m, "metric"));
            json_t *v = json_object_get(vals, name ? name : "");
            if (name) json_object_set_new(o, name, json_is_number(v) ? json_real(json_number_value(v)) : json_null());
        }
        out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
        json_decref(o);
        json_decref(vals);
    }
    json_decref(cfg);
    return out;
}

/* Read up to WEBHOOK_ROUND due rows (oldest first). RET how many. */
static int load_due(webhook_svc *w, due *out)
{
    static const char *const q =
        "SELECT o.id,o.hook_id,h.url,h.secret,h.format,e.id,e.time,e.experiment_id,e.trial_id,e.type,e.detail,"
        "x.name,t.objective,t.id,x.config,t.latest FROM webhook_outbox o JOIN webhooks h ON h.id=o.hook_id "
        "JOIN events e ON e.id=o.event_id LEFT JOIN experiments x ON x.id=e.experiment_id "
        /* A trial event: its trial; an experiment event: its best trial
         * by the (first) objective (docs/protocol.md "Webhooks"). */
        "LEFT JOIN trials t ON t.id=CASE WHEN e.trial_id>0 THEN e.trial_id ELSE (SELECT b.id FROM trials b "
        "JOIN experiments bx ON bx.id=b.experiment_id WHERE b.experiment_id=e.experiment_id AND b.objective IS NOT NULL "
        "ORDER BY CASE WHEN COALESCE(json_extract(bx.config,'$.objective.goal'),"
        "json_extract(bx.config,'$.objective[0].goal'))='maximize' "
        "THEN -b.objective ELSE b.objective END, b.id LIMIT 1) END "
        "WHERE o.delivered_at IS NULL AND o.next_at<=?1 ORDER BY o.id LIMIT ?2";
    sqlite3_stmt *st = NULL;
    int n = 0;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, q, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, hf_wall_ms());
        sqlite3_bind_int(st, 2, WEBHOOK_ROUND);
        while (n < WEBHOOK_ROUND && sqlite3_step(st) == SQLITE_ROW) {
            due *d = &out[n];
            memset(d, 0, sizeof *d);
            d->ev.delivery = sqlite3_column_int64(st, 0);
            d->hook_id = sqlite3_column_int64(st, 1);
            d->url = col_dup(st, 2);
            d->secret = col_dup(st, 3);
            d->format = col_dup(st, 4);
            d->ev.event_id = sqlite3_column_int64(st, 5);
            d->ev.time = sqlite3_column_int64(st, 6);
            d->ev.experiment_id = sqlite3_column_int64(st, 7);
            d->ev.trial_id = sqlite3_column_int64(st, 8);
            d->state = col_dup(st, 9);
            d->detail = col_dup(st, 10);
            d->name = col_dup(st, 11);
            d->ev.has_objective = sqlite3_column_type(st, 12) != SQLITE_NULL;
            d->ev.objective = sqlite3_column_double(st, 12);
            d->ev.objective_trial = sqlite3_column_int64(st, 13);
            d->objectives = objectives_text((const char *)sqlite3_column_text(st, 14),
                                            (const char *)sqlite3_column_text(st, 15));
            d->ev.objectives = d->objectives;
            d->ev.state = d->state ? d->state : "?";
            d->ev.detail = d->detail;
            d->ev.experiment_name = d->name;
            if (!d->url || !d->secret || !d->format) { due_free(d); continue; }
            n++;
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    return n;
}

/* Record one attempt's outcome, in one transaction: the hook's last
 * status and attempt time; on a 2xx its delivered count goes up and the
 * row is deleted (schema/0018_webhook_counts.sql: delivered rows are not
 * kept), otherwise the row's next attempt. A failed transaction (the
 * core's writer busy for over 5 s, a full disk) leaves the row due: it is
 * sent again. */
static void record(webhook_svc *w, int64_t hook_id, int64_t id, int ok, long status, const char *err,
                   int64_t next_at)
{
    static const char *const hook_sql =
        "UPDATE webhooks SET delivered=delivered+?2,last_status=?3,last_attempt_at=?4 WHERE id=?1";
    static const char *const row_sql[2] = {
        "UPDATE webhook_outbox SET next_at=?2,attempts=attempts+1,last_status=?3,last_error=?4 WHERE id=?1",
        "DELETE FROM webhook_outbox WHERE id=?1"};
    sqlite3_stmt *hs = NULL, *rs = NULL;
    int64_t now = hf_wall_ms();
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if (repl_txn_begin(w->repl) == 0) {
        if (sqlite3_prepare_v2(w->db, hook_sql, -1, &hs, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(w->db, row_sql[ok != 0], -1, &rs, NULL) == SQLITE_OK) {
            sqlite3_bind_int64(hs, 1, hook_id);
            sqlite3_bind_int(hs, 2, ok != 0);
            sqlite3_bind_int64(hs, 3, status);
            sqlite3_bind_int64(hs, 4, now);
            sqlite3_bind_int64(rs, 1, id);
            if (!ok) {
                sqlite3_bind_int64(rs, 2, next_at);
                sqlite3_bind_int64(rs, 3, status);
                sqlite3_bind_text(rs, 4, err, -1, SQLITE_TRANSIENT);
            }
            if (sqlite3_step(hs) == SQLITE_DONE && sqlite3_step(rs) == SQLITE_DONE) rc = 0;
        }
        sqlite3_finalize(hs);
        sqlite3_finalize(rs);
        if (rc == 0) rc = repl_txn_commit(w->repl);
        else repl_txn_rollback(w->repl);
    }
    if (rc)
        hf_warn("webhook: cannot record delivery %lld: %s (it will be sent again)", (long long)id,
                sqlite3_errmsg(w->db));
    pthread_mutex_unlock(&w->mu);
}

/* One round: every due row whose hook is not backing off. RET rows tried. */
static int round_once(webhook_svc *w)
{
    due d[WEBHOOK_ROUND];
    int64_t gen = atomic_load(&w->gen);   /* before the rows: a hook deleted since is not backed off */
    int n = load_due(w, d), tried = 0;
    for (int i = 0; i < n && !hf_thread_stopping(w->th); i++) {
        pthread_mutex_lock(&w->bo_mu);
        backoff *b = bo_find(w, d[i].hook_id, 0);
        int64_t now = hf_mono_ms();
        int wait = b && b->retry_at > now;
        pthread_mutex_unlock(&w->bo_mu);
        if (wait) continue;   /* this hook failed a moment ago: keep its order */
        char *body = webhook_body(&d[i].ev, d[i].format), sig[72], err[256] = "", ebuf[80];
        if (!body || webhook_sign(d[i].secret, body, strlen(body), sig)) { free(body); continue; }
        const char *event = webhook_event_name(&d[i].ev, ebuf, sizeof ebuf);
        long status = post(w, d[i].url, body, sig, event, d[i].ev.delivery, err, sizeof err);
        free(body);
        tried++;
        if (hf_thread_stopping(w->th) && status == 0) break;   /* abandoned: stays due */
        int ok = status >= 200 && status <= 299;
        if (ok) {
            atomic_fetch_add(&w->delivered, 1);
            pthread_mutex_lock(&w->bo_mu);
            if ((b = bo_find(w, d[i].hook_id, 0))) b->hook_id = 0;
            pthread_mutex_unlock(&w->bo_mu);
            record(w, d[i].hook_id, d[i].ev.delivery, 1, status, NULL, 0);
        } else {
            atomic_fetch_add(&w->failed, 1);
            int fails = 1;
            int64_t delay = WEBHOOK_BACKOFF_MS;
            pthread_mutex_lock(&w->bo_mu);
            /* A hook created or deleted since the rows were read may be
             * another hook under the same id: it inherits nothing. */
            b = atomic_load(&w->gen) == gen ? bo_find(w, d[i].hook_id, 1) : NULL;
            if (b) fails = ++b->fails;
            for (int k = 1; k < fails && delay < WEBHOOK_BACKOFF_MAX_MS; k++) delay *= 2;
            if (delay > WEBHOOK_BACKOFF_MAX_MS) delay = WEBHOOK_BACKOFF_MAX_MS;
            if (b) b->retry_at = hf_mono_ms() + delay;
            pthread_mutex_unlock(&w->bo_mu);
            hf_info("webhook %lld: delivery %lld to %s failed (%s); retry in %lld ms", (long long)d[i].hook_id,
                    (long long)d[i].ev.delivery, d[i].url, err, (long long)delay);
            record(w, d[i].hook_id, d[i].ev.delivery, 0, status, err, hf_wall_ms() + delay);
        }
    }
    for (int i = 0; i < n; i++) due_free(&d[i]);
    return tried;
}

/* The "hf-webhook" thread: rounds back to back while rows are due, else
 * a sleep of WEBHOOK_POLL_MS that a kick or the stop cuts short. */
static void deliver_main(hf_thread *t, void *arg)
{
    webhook_svc *w = arg;
    while (!hf_thread_stopping(t)) {
        if (round_once(w) > 0) continue;   /* more may be due at once */
        if (hf_thread_wait(t, WEBHOOK_POLL_MS)) break;
    }
}

void webhook_outbox_kick(webhook_svc *w)
{
    hf_thread_kick(w->th);
}

int webhook_open(const char *db_path, webhook_svc **out, char *err, size_t errlen)
{
    *out = NULL;
    webhook_svc *w = calloc(1, sizeof *w);
    if (!w) return HF_ENOMEM;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->bo_mu, NULL);
    int rc = HF_EDB;
    if (sqlite3_open_v2(db_path, &w->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "webhooks: cannot open %s: %s", db_path, w->db ? sqlite3_errmsg(w->db) : "?");
        goto fail;
    }
    sqlite3_busy_timeout(w->db, 5000);
    if (sqlite3_exec(w->db, "PRAGMA foreign_keys=ON", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(err, errlen, "webhooks: %s", sqlite3_errmsg(w->db));
        goto fail;
    }
    rc = HF_ENOMEM;
    if (!(w->repl = repl_conn_new(w->db))) { snprintf(err, errlen, "webhooks: out of memory"); goto fail; }
    if (!(w->curl = curl_easy_init())) { snprintf(err, errlen, "webhooks: curl_easy_init failed"); goto fail; }
    if ((rc = hf_thread_start(&w->th, "hf-webhook", deliver_main, w))) {
        snprintf(err, errlen, "webhooks: cannot start the delivery thread: %s", hf_strerror(rc));
        goto fail;
    }
    *out = w;
    return 0;
fail:
    webhook_close(w);
    return rc;
}

void webhook_close(webhook_svc *w)
{
    if (!w) return;
    hf_thread_stop_join(w->th);
    if (w->curl) curl_easy_cleanup(w->curl);
    repl_conn_free(w->repl);
    sqlite3_close_v2(w->db);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->bo_mu);
    free(w);
}

void webhook_stats(webhook_svc *w, int64_t *delivered, int64_t *failed)
{
    *delivered = atomic_load(&w->delivered);
    *failed = atomic_load(&w->failed);
}
