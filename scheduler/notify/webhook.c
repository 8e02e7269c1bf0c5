/*
 * webhook.c — webhook registration (webhook.h; docs/protocol.md
 * "Webhooks"): validating a hook's spec, storing, listing and deleting
 * hooks, and queueing a test delivery. Delivery itself is
 * webhook_outbox.c's; this file only writes hooks and, for a test, one
 * events row and its outbox row, and tells the outbox to look.
 *
 * Invariants: the outbox rows are written by store_event_insert
 * (scheduler/store/store.c), in the transaction of the state change, and
 * by webhook_test (a test row, with its own events row). Every call takes
 * w->mu around its statements on the service's one connection (foreign
 * keys on, 5 s busy timeout like the core's writer).
 *
 * Workload: a few hooks, created and listed by hand.
 */
#include "scheduler/notify/webhook_int.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/store/store.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- validation ---------- */

static int filter_ok(const char *f)
{
    if (strcmp(f, "*") == 0) return 1;
    if (strncmp(f, "experiment.", 11) == 0) return strcmp(f + 11, "*") == 0 || store_event_hookable(0, f + 11);
    if (strncmp(f, "trial.", 6) == 0) return strcmp(f + 6, "*") == 0 || store_event_hookable(1, f + 6);
    return 0;
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
    return 1;
}

int webhook_spec_parse(const json_t *body, webhook_spec *out, hf_jerr *e)
{
    static const char *const keys[] = {"url", "secret", "format", "events", "experiment_id", NULL};
    int rc;
    memset(out, 0, sizeof *out);
    out->format = "json";
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "url", 1, WEBHOOK_URL_MAX, &out->url, e))) return rc;
    if (strncmp(out->url, "http://", 7) && strncmp(out->url, "https://", 8))
        return hf_jerr_set(e, "", "url", "must start with http:// or https://");
    const char *host = out->url + (out->url[4] == 's' ? 8 : 7);
    if (!*host || *host == '/') return hf_jerr_set(e, "", "url", "has no host");
    for (const char *c = out->url; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) return hf_jerr_set(e, "", "url", "contains a space or control character");
    if ((rc = hf_json_get_string(body, "", "secret", 0, WEBHOOK_SECRET_MAX, &out->secret, e))) return rc;
    if (out->secret && (!*out->secret || !printable(out->secret)))
        return hf_jerr_set(e, "", "secret", "must be 1 to %d printable characters", WEBHOOK_SECRET_MAX);
    if ((rc = hf_json_get_string(body, "", "format", 0, 16, &out->format, e))) return rc;
    if (!out->format) out->format = "json";
    if (strcmp(out->format, "json") && strcmp(out->format, "slack"))
        return hf_jerr_set(e, "", "format", "must be \"json\" or \"slack\"");
    json_t *ev = NULL;
    if ((rc = hf_json_get_array(body, "", "events", 0, WEBHOOK_EVENTS_MAX, &ev, e))) return rc;
    if (ev) {
        if (json_array_size(ev) == 0) return hf_jerr_set(e, "", "events", "must name at least one filter");
        size_t i;
        json_t *f;
        json_array_foreach(ev, i, f) {
            char p[32];
            snprintf(p, sizeof p, "events[%zu]", i);
            if (!json_is_string(f) || !filter_ok(json_string_value(f)))
                return hf_jerr_set(e, p, NULL, "must be \"*\", \"experiment.*\", \"trial.*\", \"experiment.STATE\" "
                                   "(ACTIVE, PAUSED, COMPLETED, CANCELED, FAILED) or \"trial.STATE\" (QUEUED, ASSIGNED, "
                                   "RUNNING, COMPLETED, FAILED, STOPPED, CANCELED, PAUSED)");
        }
        out->events = ev;
    }
    if ((rc = hf_json_get_int(body, "", "experiment_id", 0, 1, INT64_MAX, &out->experiment_id, e))) return rc;
    return 0;
}

/* ---------- the hooks ---------- */

/* Columns id,url,format,events,experiment_id,created_at,created_by. */
static json_t *hook_row(sqlite3_stmt *st)
{
    json_t *ev = json_loads((const char *)sqlite3_column_text(st, 3), 0, NULL);
    const char *by = (const char *)sqlite3_column_text(st, 6);
    return json_pack("{sIsssssosos Iso}", "id", (json_int_t)sqlite3_column_int64(st, 0), "url",
                     (const char *)sqlite3_column_text(st, 1), "format", (const char *)sqlite3_column_text(st, 2),
                     "events", ev ? ev : json_array(),
                     "experiment_id", sqlite3_column_type(st, 4) == SQLITE_NULL ? json_null()
                                                                                : json_integer(sqlite3_column_int64(st, 4)),
                     "created_at", (json_int_t)sqlite3_column_int64(st, 5), "owner",
                     by ? json_string(by) : json_null());
}

int webhook_create(webhook_svc *w, const webhook_spec *sp, json_t **out)
{
    char gen[65];
    const char *secret = sp->secret;
    *out = NULL;
    if (!secret) {
        unsigned char r[32];
        static const char hex[] = "0123456789abcdef";
        if (gnutls_rnd(GNUTLS_RND_KEY, r, sizeof r) < 0) return HF_EINVAL;
        for (int i = 0; i < 32; i++) {
            gen[2 * i] = hex[r[i] >> 4];
            gen[2 * i + 1] = hex[r[i] & 15];
        }
        gen[64] = '\0';
        secret = gen;
    }
    char *events = sp->events ? json_dumps(sp->events, JSON_COMPACT) : strdup("[\"*\"]");
    if (!events) return HF_ENOMEM;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if ((rc = repl_txn_begin(w->repl))) goto end;
    rc = HF_EDB;
    if (sqlite3_prepare_v2(w->db, "INSERT INTO webhooks(url,secret,format,events,experiment_id,created_at,created_by) "
                                  "VALUES(?,?,?,?,?,?,?) RETURNING id,url,format,events,experiment_id,created_at,"
                                  "created_by",
                           -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_text(st, 1, sp->url, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, secret, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, sp->format, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, events, -1, SQLITE_STATIC);
    store_bind_opt_int(st, 5, sp->experiment_id > 0, sp->experiment_id);
    sqlite3_bind_int64(st, 6, hf_wall_ms());
    store_bind_text(st, 7, sp->owner);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) *out = hook_row(st);
    src = sqlite3_reset(st);   /* the statement's outcome (RETURNING: the row comes before the write ends) */
    if (src != SQLITE_OK) {
        hf_warn("webhook: insert: %s", sqlite3_errmsg(w->db));
        json_decref(*out);
        *out = NULL;
        rc = store_rc(src);
        goto end;
    }
    if (!*out) { rc = HF_ENOMEM; goto end; }
    sqlite3_finalize(st);
    st = NULL;
    if ((rc = repl_txn_commit(w->repl))) { json_decref(*out); *out = NULL; goto end; }
    if (!sp->secret) json_object_set_new(*out, "secret", json_string(secret));
    webhook_forget_backoff(w, json_integer_value(json_object_get(*out, "id")));
end:
    sqlite3_finalize(st);
    if (rc) repl_txn_rollback(w->repl);   /* nothing open: a no-op */
    pthread_mutex_unlock(&w->mu);
    free(events);
    return rc;
}

int webhook_list(webhook_svc *w, json_t **out)
{
    static const char *const q =
        "SELECT h.id,h.url,h.format,h.events,h.experiment_id,h.created_at,h.created_by,"
        /* delivered rows are deleted, counted on the hook (schema/0018_webhook_counts.sql) */
        "h.delivered,(SELECT count(*) FROM webhook_outbox o WHERE o.hook_id=h.id),h.last_status,"
        "(SELECT o.last_error FROM webhook_outbox o WHERE o.hook_id=h.id AND o.attempts>0 "
        "  ORDER BY o.id LIMIT 1),h.last_attempt_at FROM webhooks h "
        /* a deleted experiment's hooks wait for the purge (store/purge.h): gone already */
        "WHERE h.experiment_id IS NULL OR h.experiment_id NOT IN (SELECT experiment_id FROM purge_queue) "
        "ORDER BY h.id";
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    json_t *arr = json_array();
    *out = NULL;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, q, -1, &st, NULL) != SQLITE_OK) goto end;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *h = hook_row(st);
        if (!h) continue;
        json_object_set_new(h, "delivered", json_integer(sqlite3_column_int64(st, 7)));
        json_object_set_new(h, "pending", json_integer(sqlite3_column_int64(st, 8)));
        json_object_set_new(h, "last_status", sqlite3_column_type(st, 9) == SQLITE_NULL
                                                  ? json_null() : json_integer(sqlite3_column_int64(st, 9)));
        const char *le = (const char *)sqlite3_column_text(st, 10);
        json_object_set_new(h, "last_error", le ? json_string(le) : json_null());
        json_object_set_new(h, "last_attempt_at", sqlite3_column_type(st, 11) == SQLITE_NULL
                                                      ? json_null() : json_integer(sqlite3_column_int64(st, 11)));
        json_array_append_new(arr, h);
    }
    if (src != SQLITE_DONE) { rc = store_rc(src); goto end; }
    *out = json_pack("{sO}", "webhooks", arr);
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(arr);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int webhook_delete(webhook_svc *w, int64_t id)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if (repl_txn_begin(w->repl) == 0 &&
        sqlite3_prepare_v2(w->db, "DELETE FROM webhooks WHERE id=?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        int src = sqlite3_step(st);
        rc = src == SQLITE_DONE ? (sqlite3_changes(w->db) ? 0 : HF_ENOTFOUND) : store_rc(src);
    }
    sqlite3_finalize(st);
    if (rc == 0) rc = repl_txn_commit(w->repl);
    else repl_txn_rollback(w->repl);
    pthread_mutex_unlock(&w->mu);
    if (rc == 0) webhook_forget_backoff(w, id);
    return rc;
}

int webhook_test(webhook_svc *w, int64_t id, const char *user, json_t **out)
{
    char detail[200];
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    int64_t now = hf_wall_ms(), delivery = 0;
    *out = NULL;
    snprintf(detail, sizeof detail, "test delivery of webhook %lld, asked by %.64s", (long long)id,
             user && *user ? user : "an anonymous user");
    pthread_mutex_lock(&w->mu);
    if ((rc = repl_txn_begin(w->repl))) goto end;
    rc = HF_EDB;
    /* The hook must exist: its outbox row references it. */
    if (sqlite3_prepare_v2(w->db, "SELECT 1 FROM webhooks WHERE id=?", -1, &st, NULL) != SQLITE_OK) goto rollback;
    sqlite3_bind_int64(st, 1, id);
    src = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (src != SQLITE_ROW) { rc = src == SQLITE_DONE ? HF_ENOTFOUND : store_rc(src); goto rollback; }
    /* An events row with no experiment (store_event_insert would queue nothing for it). */
    if (sqlite3_prepare_v2(w->db, "INSERT INTO events(time,experiment_id,trial_id,type,detail,user_name) "
                                  "VALUES(?,NULL,NULL,?,?,?)", -1, &st, NULL) != SQLITE_OK) goto rollback;
    sqlite3_bind_int64(st, 1, now);
    sqlite3_bind_text(st, 2, WEBHOOK_TEST_EVENT, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, detail, -1, SQLITE_STATIC);
    store_bind_text(st, 4, user && *user ? user : NULL);
    src = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (src != SQLITE_DONE) { rc = store_rc(src); goto rollback; }
    int64_t event_id = sqlite3_last_insert_rowid(w->db);
    if (sqlite3_prepare_v2(w->db, "INSERT INTO webhook_outbox(hook_id,event_id,next_at) VALUES(?,?,?)", -1, &st,
                           NULL) != SQLITE_OK) goto rollback;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, event_id);
    sqlite3_bind_int64(st, 3, now);
    src = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (src != SQLITE_DONE) { rc = store_rc(src); goto rollback; }
    delivery = sqlite3_last_insert_rowid(w->db);
    if ((rc = repl_txn_commit(w->repl))) goto end;   /* rolled back */
    goto end;
rollback:
    if (rc == HF_EDB) hf_warn("webhook %lld: cannot queue a test delivery: %s", (long long)id, sqlite3_errmsg(w->db));
    repl_txn_rollback(w->repl);
end:
    pthread_mutex_unlock(&w->mu);
    if (rc) return rc;
    webhook_outbox_kick(w);
    *out = json_pack("{sIsIss}", "webhook", (json_int_t)id, "delivery", (json_int_t)delivery, "event",
                     WEBHOOK_TEST_EVENT);
    return *out ? 0 : HF_ENOMEM;
}

int webhook_owner(webhook_svc *w, int64_t id, char *owner, size_t len, int64_t *experiment_id)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    pthread_mutex_lock(&w->mu);
    if (sqlite3_prepare_v2(w->db, "SELECT created_by,experiment_id FROM webhooks WHERE id=?", -1, &st, NULL) ==
        SQLITE_OK) {
        sqlite3_bind_int64(st, 1, id);
        int src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            const char *by = (const char *)sqlite3_column_text(st, 0);
            snprintf(owner, len, "%s", by ? by : "");
            *experiment_id = sqlite3_column_int64(st, 1);
            rc = 0;
        } else {
            rc = src == SQLITE_DONE ? HF_ENOTFOUND : store_rc(src);
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&w->mu);
    return rc;
}
