/*
 * query.c — store scans for the API (see query.h).
 */
#include "scheduler/api/query.h"

#include "hf_err.h"
#include "scheduler/api/downsample.h"

#include <stdlib.h>
#include <string.h>

static json_t *col_num_or_null(sqlite3_stmt *st, int i, int as_int)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return json_null();
    return as_int ? json_integer(sqlite3_column_int64(st, i)) : json_real(sqlite3_column_double(st, i));
}

static json_t *col_str(sqlite3_stmt *st, int i)
{
    const char *p = (const char *)sqlite3_column_text(st, i);
    json_t *s = json_string(p ? p : "");
    return s ? s : json_string("?");   /* invalid UTF-8 never reaches the wire */
}

static json_t *metric_row(sqlite3_stmt *st)
{
    return json_pack("{sIsosososfsI}", "seq", (json_int_t)sqlite3_column_int64(st, 0), "name", col_str(st, 1),
                     "step", col_num_or_null(st, 2, 1), "epoch", col_num_or_null(st, 3, 0),
                     "value", sqlite3_column_double(st, 4), "time", (json_int_t)sqlite3_column_int64(st, 5));
}

typedef struct series {
    char    *name;
    size_t   n, cap;
    int64_t *seq, *step, *time;
    double  *x, *y, *epoch;
    unsigned char *has_step, *has_epoch;
} series;

static int series_add(series *s, sqlite3_stmt *st)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 256;
#define GROW(f) do { void *p = realloc(s->f, nc * sizeof *s->f); if (!p) return HF_ENOMEM; s->f = p; } while (0)
        GROW(seq); GROW(step); GROW(time); GROW(x); GROW(y); GROW(epoch); GROW(has_step); GROW(has_epoch);
#undef GROW
        s->cap = nc;
    }
    size_t i = s->n++;
    s->seq[i] = sqlite3_column_int64(st, 0);
    s->has_step[i] = sqlite3_column_type(st, 2) != SQLITE_NULL;
    s->step[i] = sqlite3_column_int64(st, 2);
    s->has_epoch[i] = sqlite3_column_type(st, 3) != SQLITE_NULL;
    s->epoch[i] = sqlite3_column_double(st, 3);
    s->y[i] = sqlite3_column_double(st, 4);
    s->time[i] = sqlite3_column_int64(st, 5);
    s->x[i] = s->has_step[i] ? (double)s->step[i] : (double)s->seq[i];
    /* LTTB needs x non-decreasing; a restarted trial may repeat steps. */
    if (i > 0 && s->x[i] < s->x[i - 1]) s->x[i] = s->x[i - 1];
    return 0;
}

static void series_free(series *s)
{
    free(s->name); free(s->seq); free(s->step); free(s->time); free(s->x); free(s->y); free(s->epoch);
    free(s->has_step); free(s->has_epoch);
}

int query_metrics(store *sto, int64_t trial_id, const char *name, int64_t after, int64_t limit,
                  int64_t max_points, json_t **out)
{
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    series *ser = NULL;
    size_t nser = 0;
    size_t *idx = NULL;
    int rc = HF_EDB;
    int64_t next = after, scanned = 0;
    json_t *arr = json_array();
    const char *sql = name ? "SELECT seq,name,step,epoch,value,time FROM metrics WHERE trial_id=? AND seq>? "
                             "AND name=? ORDER BY seq LIMIT ?"
                           : "SELECT seq,name,step,epoch,value,time FROM metrics WHERE trial_id=? AND seq>? "
                             "ORDER BY seq LIMIT ?";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_int64(st, 2, after);
    if (name) sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, name ? 4 : 3, max_points > 0 ? QUERY_MAX_SCAN : limit);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        next = sqlite3_column_int64(st, 0);
        scanned++;
        if (max_points <= 0) {
            json_array_append_new(arr, metric_row(st));
            continue;
        }
        const char *nm = (const char *)sqlite3_column_text(st, 1);
        size_t k = 0;
        while (k < nser && strcmp(ser[k].name, nm ? nm : "") != 0) k++;
        if (k == nser) {
            series *ns = realloc(ser, (nser + 1) * sizeof *ser);
            if (!ns) { rc = HF_ENOMEM; goto end; }
            ser = ns;
            memset(&ser[nser], 0, sizeof *ser);
            ser[nser].name = strdup(nm ? nm : "");
            nser++;
        }
        if ((rc = series_add(&ser[k], st))) goto end;
    }
    if (src != SQLITE_DONE) { rc = store_rc(src); goto end; }
    for (size_t k = 0; k < nser; k++) {
        series *s = &ser[k];
        free(idx);
        idx = malloc((s->n + 3) * sizeof *idx);
        if (!idx) { rc = HF_ENOMEM; goto end; }
        size_t m = downsample_lttb(s->x, s->y, s->n, (size_t)max_points, idx);
        for (size_t j = 0; j < m; j++) {
            size_t i = idx[j];
            json_array_append_new(arr, json_pack("{sIsssosososI}", "seq", (json_int_t)s->seq[i], "name", s->name,
                                                 "step", s->has_step[i] ? json_integer(s->step[i]) : json_null(),
                                                 "epoch", s->has_epoch[i] ? json_real(s->epoch[i]) : json_null(),
                                                 "value", json_real(s->y[i]), "time", (json_int_t)s->time[i]));
        }
    }
    *out = json_pack("{sosI}", "metrics", arr, "next", (json_int_t)next);
    if (max_points > 0) json_object_set_new(*out, "downsampled_from", json_integer(scanned));
    arr = NULL;
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(arr);
    for (size_t k = 0; k < nser; k++) series_free(&ser[k]);
    free(ser);
    free(idx);
    sqlite3_finalize(st);
    store_reader_put(sto, db);
    return rc;
}

/* Close one trial's series into the "series" array. */
static int series_emit(json_t *arr, int64_t trial_id, series *s, int64_t max_points, size_t **idx)
{
    size_t m = s->n, *ix = NULL;
    if (max_points > 0) {
        free(*idx);
        if (!(*idx = malloc((s->n + 3) * sizeof **idx))) return HF_ENOMEM;
        m = downsample_lttb(s->x, s->y, s->n, (size_t)max_points, *idx);
        ix = *idx;
    }
    json_t *pts = json_array();
    for (size_t j = 0; pts && j < m; j++) {
        size_t i = ix ? ix[j] : j;
        json_t *x = s->has_step[i] ? json_integer(s->step[i]) : s->has_epoch[i] ? json_real(s->epoch[i])
                                                                               : json_integer(s->seq[i]);
        json_array_append_new(pts, json_pack("[of]", x, s->y[i]));
    }
    json_t *o = json_pack("{sIsosI}", "trial_id", (json_int_t)trial_id, "points", pts, "downsampled_from",
                          (json_int_t)s->n);
    if (!o || json_array_append_new(arr, o)) return HF_ENOMEM;
    s->n = 0;
    return 0;
}

int query_experiment_metrics(store *sto, int64_t exp_id, const char *name, int64_t after, int64_t max_points,
                             json_t **out)
{
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    series ser;
    size_t *idx = NULL;
    int rc = HF_EDB, src;
    int64_t next = after, scanned = 0, cur = 0;
    json_t *arr = json_array();
    memset(&ser, 0, sizeof ser);
    /* trials_exp then metrics_trial_name: rows come grouped by trial, in seq order */
    if (sqlite3_prepare_v2(db, "SELECT m.trial_id,m.seq,m.step,m.epoch,m.value,m.time FROM trials t "
                               "JOIN metrics m ON m.trial_id=t.id AND m.name=?2 AND m.seq>?3 "
                               "WHERE t.experiment_id=?1 ORDER BY t.id, m.seq LIMIT ?4",
                           -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_int64(st, 1, exp_id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, after);
    sqlite3_bind_int64(st, 4, QUERY_MAX_SCAN + 1);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (++scanned > QUERY_MAX_SCAN) break;
        int64_t tid = sqlite3_column_int64(st, 0);
        if (tid != cur && ser.n && (rc = series_emit(arr, cur, &ser, max_points, &idx))) goto end;
        cur = tid;
        /* series_add reads seq,?,step,epoch,value,time at columns 0,2,3,4,5: shift by one */
        if (ser.n == ser.cap) {
            size_t nc = ser.cap ? ser.cap * 2 : 256;
#define GROW(f) do { void *p = realloc(ser.f, nc * sizeof *ser.f); if (!p) { rc = HF_ENOMEM; goto end; } ser.f = p; } while (0)
            GROW(seq); GROW(step); GROW(time); GROW(x); GROW(y); GROW(epoch); GROW(has_step); GROW(has_epoch);
#undef GROW
            ser.cap = nc;
        }
        size_t i = ser.n++;
        ser.seq[i] = sqlite3_column_int64(st, 1);
        ser.has_step[i] = sqlite3_column_type(st, 2) != SQLITE_NULL;
        ser.step[i] = sqlite3_column_int64(st, 2);
        ser.has_epoch[i] = sqlite3_column_type(st, 3) != SQLITE_NULL;
        ser.epoch[i] = sqlite3_column_double(st, 3);
        ser.y[i] = sqlite3_column_double(st, 4);
        ser.time[i] = sqlite3_column_int64(st, 5);
        ser.x[i] = ser.has_step[i] ? (double)ser.step[i] : ser.has_epoch[i] ? ser.epoch[i] : (double)ser.seq[i];
        if (i > 0 && ser.x[i] < ser.x[i - 1]) ser.x[i] = ser.x[i - 1];   /* LTTB wants x non-decreasing */
        if (ser.seq[i] > next) next = ser.seq[i];
    }
    if (src != SQLITE_ROW && src != SQLITE_DONE) { rc = store_rc(src); goto end; }
    if (ser.n && (rc = series_emit(arr, cur, &ser, max_points, &idx))) goto end;
    *out = json_pack("{sssosIsb}", "name", name, "series", arr, "next", (json_int_t)next, "truncated",
                     scanned > QUERY_MAX_SCAN);
    arr = NULL;
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(arr);
    series_free(&ser);
    free(idx);
    sqlite3_finalize(st);
    store_reader_put(sto, db);
    return rc;
}

int query_logs(store *sto, int64_t trial_id, int64_t after, int64_t limit, json_t **out)
{
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    int64_t next = after;
    json_t *arr = json_array();
    if (sqlite3_prepare_v2(db, "SELECT seq,stream,line,time FROM logs WHERE trial_id=? AND seq>? ORDER BY seq LIMIT ?",
                           -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    sqlite3_bind_int64(st, 2, after);
    sqlite3_bind_int64(st, 3, limit);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        next = sqlite3_column_int64(st, 0);
        json_array_append_new(arr, json_pack("{sIsososI}", "seq", (json_int_t)next, "stream", col_str(st, 1),
                                             "line", col_str(st, 2), "time", (json_int_t)sqlite3_column_int64(st, 3)));
    }
    if (src != SQLITE_DONE) { rc = store_rc(src); goto end; }
    *out = json_pack("{sosI}", "logs", arr, "next", (json_int_t)next);
    arr = NULL;
    rc = 0;
end:
    json_decref(arr);
    sqlite3_finalize(st);
    store_reader_put(sto, db);
    return rc;
}

static json_t *col_str_or_null(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? json_null() : col_str(st, i);
}

int query_trial_details(store *sto, int64_t trial_id, json_t *t)
{
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    json_t *ev = json_array(), *ck = json_array();
    if (sqlite3_prepare_v2(db, "SELECT time,type,detail,user_name FROM events WHERE trial_id=? ORDER BY id "
                               "LIMIT 10000", -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_append_new(ev, json_pack("{sIsososo}", "time", (json_int_t)sqlite3_column_int64(st, 0),
                                            "type", col_str(st, 1), "detail", col_str(st, 2), "user", col_str_or_null(st, 3)));
    sqlite3_finalize(st);
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT path,step,time,attempt FROM checkpoints WHERE trial_id=? ORDER BY id DESC "
                               "LIMIT 1000", -1, &st, NULL) != SQLITE_OK) goto end;
    sqlite3_bind_int64(st, 1, trial_id);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_insert_new(ck, 0, json_pack("{sosososI}", "path", col_str(st, 0), "step", col_num_or_null(st, 1, 1),
                                               "time", json_integer(sqlite3_column_int64(st, 2)),
                                               "attempt", (json_int_t)sqlite3_column_int64(st, 3)));
    json_object_set(t, "events", ev);
    json_object_set(t, "checkpoints", ck);
    rc = 0;
end:
    json_decref(ev);
    json_decref(ck);
    sqlite3_finalize(st);
    store_reader_put(sto, db);
    return rc;
}

static int csv_field(hf_buf *b, const char *s)
{
    if (!strpbrk(s, ",\"\n\r")) return hf_buf_addstr(b, s);
    int rc = hf_buf_addstr(b, "\"");
    for (const char *p = s; *p && rc == 0; p++) rc = *p == '"' ? hf_buf_addstr(b, "\"\"") : hf_buf_add(b, p, 1);
    return rc ? rc : hf_buf_addstr(b, "\"");
}

static int csv_value(hf_buf *b, const json_t *v)
{
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) return csv_field(b, json_string_value(v));
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
    int rc = s ? csv_field(b, s) : HF_ENOMEM;
    free(s);
    return rc;
}

static void collect_keys(const json_t *trials, const char *member, json_t *set)
{
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(t, member), k, v) json_object_set_new(set, k, json_true());
    }
}

int query_export_csv(const json_t *trials, hf_buf *b)
{
    json_t *hp = json_object(), *mt = json_object();
    collect_keys(trials, "hparams", hp);
    collect_keys(trials, "best", mt);
    int rc = hf_buf_addstr(b, "trial_id,state,restarts,objective,agent");
    const char *k;
    json_t *v;
    json_object_foreach(hp, k, v) { if (rc == 0) rc = hf_buf_addstr(b, ","); if (rc == 0) rc = csv_field(b, k); }
    json_object_foreach(mt, k, v) {
        char col[128];
        snprintf(col, sizeof col, "best_%s", k);
        if (rc == 0) rc = hf_buf_addstr(b, ",");
        if (rc == 0) rc = csv_field(b, col);
    }
    if (rc == 0) rc = hf_buf_addstr(b, "\n");
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        if (rc) break;
        rc = hf_buf_printf(b, "%lld,%s,%lld,", (long long)json_integer_value(json_object_get(t, "id")),
                           json_string_value(json_object_get(t, "state")),
                           (long long)json_integer_value(json_object_get(t, "restarts")));
        if (rc == 0) rc = csv_value(b, json_object_get(t, "objective"));
        if (rc == 0) rc = hf_buf_addstr(b, ",");
        if (rc == 0) rc = csv_value(b, json_object_get(t, "agent"));
        json_object_foreach(hp, k, v) {
            if (rc == 0) rc = hf_buf_addstr(b, ",");
            if (rc == 0) rc = csv_value(b, json_object_get(json_object_get(t, "hparams"), k));
        }
        json_object_foreach(mt, k, v) {
            if (rc == 0) rc = hf_buf_addstr(b, ",");
            if (rc == 0) rc = csv_value(b, json_object_get(json_object_get(t, "best"), k));
        }
        if (rc == 0) rc = hf_buf_addstr(b, "\n");
    }
    json_decref(hp);
    json_decref(mt);
    return rc;
}

int query_export_json(store *sto, json_t *summary, json_t *trials, json_t **out)
{
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        json_t *m = NULL;
        int rc = query_metrics(sto, json_integer_value(json_object_get(t, "id")), NULL, 0, QUERY_MAX_SCAN, 0, &m);
        if (rc) return rc;
        json_object_set(t, "metrics", json_object_get(m, "metrics"));
        json_decref(m);
    }
    *out = json_pack("{sOsO}", "experiment", summary, "trials", trials);
    return *out ? 0 : HF_ENOMEM;
}

int query_experiment_events(store *sto, int64_t exp_id, int64_t limit, json_t **out)
{
    sqlite3 *db = store_reader_get(sto);
    if (!db) return HF_EDB;
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    json_t *ev = json_array();
    /* The newest `limit`, returned oldest first (events_exp index). */
    if (!ev || sqlite3_prepare_v2(db, "SELECT * FROM (SELECT id,time,trial_id,type,detail,user_name FROM events "
                                      "WHERE experiment_id=? AND (trial_id IS NULL OR user_name IS NOT NULL) "
                                      "ORDER BY id DESC LIMIT ?) ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, exp_id);
    sqlite3_bind_int64(st, 2, limit);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(ev, json_pack("{sIsosososo}", "time", (json_int_t)sqlite3_column_int64(st, 1),
                                            "trial_id", col_num_or_null(st, 2, 1), "type", col_str(st, 3),
                                            "detail", col_str(st, 4), "user", col_str_or_null(st, 5)));
    if (src != SQLITE_DONE) { rc = store_rc(src); goto end; }
    *out = json_pack("{so}", "events", ev);
    ev = NULL;
    rc = *out ? 0 : HF_ENOMEM;
end:
    json_decref(ev);
    sqlite3_finalize(st);
    store_reader_put(sto, db);
    return rc;
}
