/*
 * sched_rows.c — the scheduler core's row mapping (see sched_int.h): every
 * bind of a model record into one of store.c's prepared statements, and
 * every column read back into a record at load. The SQL text lives in
 * store.c's statement table; a column added there is mapped here and
 * nowhere else.
 *
 * Writes run inside the core's current transaction, under s->lock (asserted
 * in row_exec and row_scan): the first failure is
 * kept in s->txn_rc and every later statement of that transaction is
 * skipped, so txn_end rolls the whole transaction back.
 */
#include "scheduler/core/sched_int.h"
#include "scheduler/store/repl.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run a write statement of the current transaction (skipped after a failure). */
static void row_exec(sched *s, sqlite3_stmt *st)
{
    HF_ASSERT(sched_lock_held(s));
    if (s->txn_rc) { sqlite3_reset(st); return; }
    int rc = store_exec_stmt(st);
    if (rc) s->txn_rc = rc;
}

/* The row id of an insert just run, 0 when the transaction failed. */
static int64_t row_inserted_id(sched *s)
{
    return s->txn_rc ? 0 : sqlite3_last_insert_rowid(store_db(s->st));
}

static void bind_opt_number(sqlite3_stmt *st, int i, const json_t *v)
{
    if (v) sqlite3_bind_double(st, i, json_number_value(v));
    else sqlite3_bind_null(st, i);
}

/* ---------- writes ---------- */

void row_event(sched *s, int64_t exp_id, int64_t trial_id, const char *type, const char *detail)
{
    row_event_at(s, hf_wall_ms(), exp_id, trial_id, type, detail);
}

void row_event_at(sched *s, int64_t time_ms, int64_t exp_id, int64_t trial_id, const char *type, const char *detail)
{
    HF_ASSERT(sched_lock_held(s));
    if (s->txn_rc) return;
    int rc = store_event_insert(s->st, time_ms, exp_id, trial_id, type, detail, s->actor[0] ? s->actor : NULL);
    if (rc) s->txn_rc = rc;
}

int64_t row_exp_insert(sched *s, const experiment *x, const char *config_text)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_EXP_INSERT);
    sqlite3_bind_text(st, 1, x->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, exp_state_names[x->state], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, config_text, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, x->max_trials);
    sqlite3_bind_int64(st, 5, x->created_at);
    char *tags = hf_json_dump(x->tags), *warm = x->warm ? hf_json_dump(x->warm) : NULL;
    store_bind_text(st, 6, x->description);
    store_bind_text(st, 7, tags ? tags : "[]");
    store_bind_opt_int(st, 8, x->parent_id > 0, x->parent_id);
    store_bind_text(st, 9, x->submitted_by);
    store_bind_text(st, 10, warm);
    row_exec(s, st);
    free(tags);
    free(warm);
    return row_inserted_id(s);
}

void row_exp_meta(sched *s, const experiment *x)
{
    char *tags = hf_json_dump(x->tags);
    sqlite3_stmt *st = store_stmt(s->st, ST_EXP_META);
    store_bind_text(st, 1, x->description);
    store_bind_text(st, 2, tags ? tags : "[]");
    sqlite3_bind_int64(st, 3, x->id);
    row_exec(s, st);
    free(tags);
}

void row_trial_notes(sched *s, const trial *t)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_TRIAL_NOTES);
    store_bind_text(st, 1, t->notes);
    sqlite3_bind_int64(st, 2, t->id);
    row_exec(s, st);
}

void row_exp_update(sched *s, const experiment *x)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_EXP_UPDATE);
    sqlite3_bind_text(st, 1, exp_state_names[x->state], -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, x->max_trials);
    sqlite3_bind_int(st, 3, x->searcher_done);
    store_bind_opt_int(st, 4, x->ended_at > 0, x->ended_at);
    sqlite3_bind_int(st, 5, x->archived);
    store_bind_text(st, 6, x->end_reason[0] ? x->end_reason : NULL);
    sqlite3_bind_int64(st, 7, x->id);
    row_exec(s, st);
}

void row_exp_purge_queue(sched *s, int64_t id)
{
    /* Rare (a user's delete): prepared on each call, not kept in store.c.
     * The rows themselves go later, in bounded batches (store/purge.h). */
    static const char *const sql[] = {
        /* remember the largest ids first: they are never handed out again */
        "INSERT INTO id_floor(name,id) VALUES('experiments',coalesce((SELECT max(id) FROM experiments),0)) "
        "ON CONFLICT(name) DO UPDATE SET id=max(id,excluded.id)",
        "INSERT INTO id_floor(name,id) VALUES('trials',coalesce((SELECT max(id) FROM trials),0)) "
        "ON CONFLICT(name) DO UPDATE SET id=max(id,excluded.id)",
        "INSERT INTO purge_queue(experiment_id,queued_at) VALUES(?1,?2)",
    };
    for (size_t i = 0; i < sizeof sql / sizeof sql[0] && !s->txn_rc; i++) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(store_db(s->st), sql[i], -1, &st, NULL) != SQLITE_OK) {
            s->txn_rc = HF_EDB;
            break;
        }
        if (sqlite3_bind_parameter_count(st) == 2) {
            sqlite3_bind_int64(st, 1, id);
            sqlite3_bind_int64(st, 2, hf_wall_ms());
        }
        row_exec(s, st);
        sqlite3_finalize(st);
    }
}

int64_t row_trial_insert(sched *s, const trial *t)
{
    char *hp = hf_json_dump(t->hparams);
    sqlite3_stmt *st = store_stmt(s->st, ST_TRIAL_INSERT);
    sqlite3_bind_int64(st, 1, t->exp->id);
    sqlite3_bind_int64(st, 2, t->idx);
    sqlite3_bind_text(st, 3, sched_trial_state_names[t->state], -1, SQLITE_STATIC);
    store_bind_text(st, 4, hp ? hp : "{}");
    sqlite3_bind_int64(st, 5, t->budget);
    store_bind_opt_int(st, 6, t->parent > 0, t->parent);
    sqlite3_bind_int64(st, 7, t->created_at);
    row_exec(s, st);
    free(hp);
    return row_inserted_id(s);
}

void row_trial_update(sched *s, const trial *t)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_TRIAL_UPDATE);
    sqlite3_bind_text(st, 1, sched_trial_state_names[t->state], -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, t->budget);
    sqlite3_bind_int64(st, 3, t->attempt);
    sqlite3_bind_int64(st, 4, t->restarts);
    store_bind_opt_int(st, 5, t->agent_id > 0, t->agent_id);
    store_bind_opt_int(st, 6, t->port > 0, t->port);
    store_bind_opt_int(st, 7, t->has_exit, t->exit_code);
    store_bind_text(st, 8, t->kill_state >= 0 ? sched_trial_state_names[t->kill_state] : NULL);
    store_bind_text(st, 9, t->kill_state >= 0 ? t->kill_reason : NULL);
    store_bind_opt_int(st, 10, t->fail_agent > 0, t->fail_agent);
    sqlite3_bind_int64(st, 11, t->fail_streak);
    store_bind_opt_int(st, 12, t->started_at > 0, t->started_at);
    store_bind_opt_int(st, 13, t->ended_at > 0, t->ended_at);
    sqlite3_bind_int64(st, 14, t->id);
    row_exec(s, st);
}

void row_trial_metrics(sched *s, trial *t)
{
    char *lj = hf_json_dump(t->latest), *bj = hf_json_dump(t->best);
    sqlite3_stmt *st = store_stmt(s->st, ST_TRIAL_METRICS);
    if (t->has_obj) sqlite3_bind_double(st, 1, t->obj);
    else sqlite3_bind_null(st, 1);
    store_bind_text(st, 2, lj);
    store_bind_text(st, 3, bj);
    sqlite3_bind_int64(st, 4, t->id);
    row_exec(s, st);
    free(lj);
    free(bj);
    t->dirty_metrics = 0;
}

void row_alloc_insert(sched *s, const trial *t, const trial_rank *tr)
{
    json_t *g = json_array();
    for (int k = 0; k < tr->ngpu; k++) json_array_append_new(g, json_integer(tr->gpu[k]));
    char *gs = hf_json_dump(g);
    json_decref(g);
    sqlite3_stmt *st = store_stmt(s->st, ST_ALLOC_INSERT);
    sqlite3_bind_int64(st, 1, t->id);
    sqlite3_bind_int64(st, 2, t->attempt);
    sqlite3_bind_int(st, 3, tr->rank);
    sqlite3_bind_int64(st, 4, tr->agent_id);
    sqlite3_bind_int(st, 5, tr->slots);
    store_bind_text(st, 6, gs ? gs : "[]");
    sqlite3_bind_int64(st, 7, hf_wall_ms());
    row_exec(s, st);
    free(gs);
}

void row_alloc_update(sched *s, const trial *t, const trial_rank *tr)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_ALLOC_UPDATE);
    sqlite3_bind_int(st, 1, tr->st);
    sqlite3_bind_int(st, 2, tr->exited);
    store_bind_opt_int(st, 3, tr->exited, tr->exit_code);
    sqlite3_bind_int64(st, 4, t->id);
    sqlite3_bind_int64(st, 5, t->attempt);
    sqlite3_bind_int(st, 6, tr->rank);
    row_exec(s, st);
}

void row_alloc_release(sched *s, const trial *t)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_ALLOC_RELEASE);
    sqlite3_bind_int64(st, 1, hf_wall_ms());
    sqlite3_bind_int64(st, 2, t->id);
    sqlite3_bind_int64(st, 3, t->attempt);
    row_exec(s, st);
}

/* The registration columns of the agents row, bound from index i:
 * host, slots, gpus, version, state (ALIVE), registered_at, last_heartbeat. */
static void bind_agent_registration(sqlite3_stmt *st, int i, const char *host, int64_t slots,
                                    const char *gpus_json, const char *version, int64_t now)
{
    sqlite3_bind_text(st, i, host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, i + 1, slots);
    store_bind_text(st, i + 2, gpus_json ? gpus_json : "[]");
    store_bind_text(st, i + 3, version);
    sqlite3_bind_text(st, i + 4, "ALIVE", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, i + 5, now);
    sqlite3_bind_int64(st, i + 6, now);
}

int64_t row_agent_insert(sched *s, const char *name, const char *host, int64_t slots, const char *gpus_json,
                         const char *version, int64_t now)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_INSERT);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    bind_agent_registration(st, 2, host, slots, gpus_json, version, now);
    row_exec(s, st);
    return row_inserted_id(s);
}

void row_agent_update(sched *s, int64_t id, const char *host, int64_t slots, const char *gpus_json,
                      const char *version, int64_t now)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_UPDATE);
    bind_agent_registration(st, 1, host, slots, gpus_json, version, now);
    sqlite3_bind_int64(st, 8, id);
    row_exec(s, st);
}

/* An UPDATE of two columns of agent id (ST_AGENT_HB, ST_AGENT_BATCH). */
static void row_agent_set(sched *s, int stmt, const char *text, int64_t value, int64_t id)
{
    sqlite3_stmt *st = store_stmt(s->st, stmt);
    sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, value);
    sqlite3_bind_int64(st, 3, id);
    row_exec(s, st);
}

void row_agent_state(sched *s, int64_t id, const char *state, int64_t last_heartbeat)
{
    row_agent_set(s, ST_AGENT_HB, state, last_heartbeat, id);
}

void row_agent_batch(sched *s, int64_t id, const char *instance, int64_t batch)
{
    row_agent_set(s, ST_AGENT_BATCH, instance, batch, id);
}

void row_metric_insert(sched *s, const trial *t, const char *name, const json_t *step, const json_t *epoch,
                       double value, int64_t time)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_METRIC_INSERT);
    /* With a standby, the row goes to the replication log from here, not
     * through the session (repl.h, repl_conn_metric_log): asked before the
     * INSERT, which is the table's first write in the transaction. */
    repl_conn *rc = store_repl(s->st);
    int logged = s->txn_rc == 0 && repl_conn_metric_log(rc);
    sqlite3_bind_int64(st, 1, t->id);
    sqlite3_bind_int64(st, 2, t->attempt);
    sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
    store_bind_opt_int(st, 4, step != NULL, json_integer_value(step));
    bind_opt_number(st, 5, epoch);
    sqlite3_bind_double(st, 6, value);
    sqlite3_bind_int64(st, 7, time);
    row_exec(s, st);
    if (logged && s->txn_rc == 0) {
        repl_metric_row r = {.seq = sqlite3_last_insert_rowid(store_db(s->st)), .trial_id = t->id,
                             .attempt = t->attempt, .name = name, .has_step = step != NULL,
                             .step = json_integer_value(step), .has_epoch = epoch != NULL,
                             .epoch = json_number_value(epoch), .value = value, .time = time};
        if (repl_conn_metric_row(rc, &r)) s->txn_rc = HF_ENOMEM;
    }
}

void row_log_insert(sched *s, const trial *t, const char *stream, const char *line, size_t len, int64_t time)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_LOG_INSERT);
    sqlite3_bind_int64(st, 1, t->id);
    sqlite3_bind_int64(st, 2, t->attempt);
    sqlite3_bind_text(st, 3, stream, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, line, (int)len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, time);
    row_exec(s, st);
}

void row_ckpt_insert(sched *s, const trial *t, const char *path, const json_t *step, int64_t time)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_CKPT_INSERT);
    sqlite3_bind_int64(st, 1, t->id);
    sqlite3_bind_int64(st, 2, t->attempt);
    sqlite3_bind_text(st, 3, path, -1, SQLITE_STATIC);
    store_bind_opt_int(st, 4, step != NULL, json_integer_value(step));
    sqlite3_bind_int64(st, 5, time);
    row_exec(s, st);
}

/* ---------- reads (load) ---------- */

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *p = sqlite3_column_text(st, i);
    return p ? (const char *)p : "";
}

static json_t *col_json(sqlite3_stmt *st, int i)
{
    return json_loads(col_text(st, i), JSON_DECODE_ANY, NULL);
}

/* The index of name in names[n], -1 when absent. */
static int state_parse(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (s && strcmp(s, names[i]) == 0) return i;
    return -1;
}

sqlite3_stmt *row_scan(sched *s, enum row_table table)
{
    HF_ASSERT(sched_lock_held(s));
    static const int ids[] = {
        [ROWS_EXPERIMENTS] = ST_LOAD_EXPERIMENTS, [ROWS_AGENTS] = ST_LOAD_AGENTS,
        [ROWS_TRIALS] = ST_LOAD_TRIALS, [ROWS_ALLOCATIONS] = ST_LOAD_ALLOCATIONS,
    };
    return store_stmt(s->st, ids[table]);
}

void row_scan_end(sqlite3_stmt *q)
{
    if (q) sqlite3_reset(q);
}

int row_exp_next(sqlite3_stmt *q, experiment **out, int64_t *id, hf_jerr *e)
{
    *out = NULL;
    if (sqlite3_step(q) != SQLITE_ROW) return 0;
    *id = sqlite3_column_int64(q, 0);
    memset(e, 0, sizeof *e);
    json_t *cfg = col_json(q, 2);
    experiment *x = cfg ? exp_build(cfg, e) : NULL;
    if (!x) return 1;
    x->id = *id;
    x->state = state_parse(col_text(q, 1), exp_state_names, E__N);
    if (x->state < 0) x->state = E_CANCELED;
    x->max_trials = sqlite3_column_int64(q, 3);
    x->searcher_done = sqlite3_column_int(q, 4);
    x->created_at = sqlite3_column_int64(q, 5);
    x->ended_at = sqlite3_column_int64(q, 6);
    x->archived = sqlite3_column_int(q, 7);
    /* 0008_workflow: NULL in rows from before keeps what the config says. */
    if (sqlite3_column_type(q, 8) != SQLITE_NULL) {
        free(x->description);
        x->description = strdup(col_text(q, 8));
    }
    json_t *tags = sqlite3_column_type(q, 9) != SQLITE_NULL ? col_json(q, 9) : NULL;
    if (json_is_array(tags)) { json_decref(x->tags); x->tags = tags; } else json_decref(tags);
    x->parent_id = sqlite3_column_int64(q, 10);
    if (sqlite3_column_type(q, 11) != SQLITE_NULL) x->submitted_by = strdup(col_text(q, 11));
    x->warm = sqlite3_column_type(q, 12) != SQLITE_NULL ? col_json(q, 12) : NULL;
    if (sqlite3_column_type(q, 13) != SQLITE_NULL)   /* 0013_end_reason */
        snprintf(x->end_reason, sizeof x->end_reason, "%s", col_text(q, 13));
    *out = x;
    return 1;
}

int row_agent_next(sqlite3_stmt *q, agent **out, int64_t now_mono)
{
    if (sqlite3_step(q) != SQLITE_ROW) return 0;
    agent *a = *out = calloc(1, sizeof *a);
    if (!a) return 1;
    a->id = sqlite3_column_int64(q, 0);
    a->pa.id = a->id;
    a->name = strdup(col_text(q, 1));
    a->host = strdup(col_text(q, 2));
    a->pa.slots = sqlite3_column_int(q, 3);
    agent_set_gpus(a, col_json(q, 4));
    a->version = strdup(col_text(q, 5));
    /* Agents that were alive get a full timeout to report back. */
    a->alive = strcmp(col_text(q, 6), "ALIVE") == 0;
    a->registered_at = sqlite3_column_int64(q, 7);
    a->last_hb_wall = sqlite3_column_int64(q, 8);
    a->last_hb_mono = now_mono;
    snprintf(a->hb_instance, sizeof a->hb_instance, "%s", col_text(q, 9));
    a->hb_batch = sqlite3_column_int64(q, 10);
    return 1;
}

int row_trial_next(sqlite3_stmt *q, int64_t *exp_id)
{
    if (sqlite3_step(q) != SQLITE_ROW) return 0;
    *exp_id = sqlite3_column_int64(q, 1);
    return 1;
}

void row_trial_read(sqlite3_stmt *q, trial *t)
{
    t->id = sqlite3_column_int64(q, 0);
    t->idx = sqlite3_column_int64(q, 2);
    t->state = state_parse(col_text(q, 3), sched_trial_state_names, T__N);
    if (t->state < 0) t->state = T_FAILED;
    t->hparams = col_json(q, 4);
    if (!t->hparams) t->hparams = json_object();
    t->budget = sqlite3_column_int64(q, 5);
    t->parent = sqlite3_column_int64(q, 6);
    t->attempt = sqlite3_column_int64(q, 7);
    t->restarts = sqlite3_column_int64(q, 8);
    t->agent_id = sqlite3_column_int64(q, 9);
    t->port = sqlite3_column_int(q, 10);
    t->has_exit = sqlite3_column_type(q, 11) != SQLITE_NULL;
    t->exit_code = sqlite3_column_int(q, 11);
    t->has_obj = sqlite3_column_type(q, 12) != SQLITE_NULL;
    t->obj = sqlite3_column_double(q, 12);
    json_t *l = col_json(q, 13), *b = col_json(q, 14);
    if (json_is_object(l)) { json_decref(t->latest); t->latest = l; } else json_decref(l);
    if (json_is_object(b)) { json_decref(t->best); t->best = b; } else json_decref(b);
    t->kill_state = sqlite3_column_type(q, 15) == SQLITE_NULL ? -1
                  : state_parse(col_text(q, 15), sched_trial_state_names, T__N);
    snprintf(t->kill_reason, sizeof t->kill_reason, "%s", col_text(q, 16));
    t->fail_agent = sqlite3_column_int64(q, 17);
    t->fail_streak = sqlite3_column_int64(q, 18);
    t->created_at = sqlite3_column_int64(q, 19);
    t->started_at = sqlite3_column_int64(q, 20);
    t->ended_at = sqlite3_column_int64(q, 21);
    if (sqlite3_column_type(q, 22) != SQLITE_NULL) t->notes = strdup(col_text(q, 22));
}

int row_alloc_next(sqlite3_stmt *q, alloc_row *r)
{
    if (sqlite3_step(q) != SQLITE_ROW) return 0;
    r->trial_id = sqlite3_column_int64(q, 0);
    r->attempt = sqlite3_column_int64(q, 1);
    r->rank = sqlite3_column_int(q, 2);
    r->agent_id = sqlite3_column_int64(q, 3);
    r->slots = sqlite3_column_int(q, 4);
    r->started = sqlite3_column_int(q, 6);
    r->exited = sqlite3_column_int(q, 7);
    r->exit_code = sqlite3_column_int(q, 8);
    json_t *g = col_json(q, 5), *gv;
    size_t gi;
    r->ngpu = 0;
    json_array_foreach(g, gi, gv) if (r->ngpu < PLACE_MAX_GPUS) r->gpu[r->ngpu++] = (int)json_integer_value(gv);
    json_decref(g);
    return 1;
}

sqlite3_stmt *row_report_scan(sched *s, const experiment *x)
{
    const exp_spec *sp = &x->spec;
    if (sp->mo.n_obj > 1 || sp->mo.n_con > 0 || sp->cost_metric || sp->time_metric) {
        /* Every objective, constrained, cost and time metric, in arrival order. */
        json_t *names = json_array();
        for (int k = 0; k < sp->mo.n_obj; k++) json_array_append_new(names, json_string(sp->obj_metric[k]));
        for (int c = 0; c < sp->mo.n_con; c++) json_array_append_new(names, json_string(sp->con_metric[c]));
        if (sp->cost_metric) json_array_append_new(names, json_string(sp->cost_metric));
        if (sp->time_metric) json_array_append_new(names, json_string(sp->time_metric));
        char *txt = hf_json_dump(names);
        json_decref(names);
        sqlite3_stmt *q = store_stmt(s->st, ST_LOAD_REPORTS_NAMED);
        sqlite3_bind_int64(q, 1, x->id);
        sqlite3_bind_text(q, 2, txt ? txt : "[]", -1, SQLITE_TRANSIENT);
        free(txt);
        return q;
    }
    sqlite3_stmt *q = store_stmt(s->st, ST_LOAD_REPORTS);
    sqlite3_bind_int64(q, 1, x->id);
    sqlite3_bind_text(q, 2, x->spec.metric, -1, SQLITE_STATIC);
    return q;
}

int row_report_next(sqlite3_stmt *q, report_row *r)
{
    if (sqlite3_step(q) != SQLITE_ROW) return 0;
    r->trial_id = sqlite3_column_int64(q, 0);
    r->has_step = sqlite3_column_type(q, 1) != SQLITE_NULL;
    r->step = sqlite3_column_int64(q, 1);
    r->has_epoch = sqlite3_column_type(q, 2) != SQLITE_NULL;
    r->epoch = sqlite3_column_double(q, 2);
    r->value = sqlite3_column_double(q, 3);
    r->name = sqlite3_column_count(q) > 4 ? (const char *)sqlite3_column_text(q, 4) : NULL;
    return 1;
}
