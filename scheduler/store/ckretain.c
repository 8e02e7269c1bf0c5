/*
 * ckretain.c — checkpoint retention and garbage collection (ckretain.h).
 *
 * A pass: a cheap signature (newest events row, newest checkpoints row,
 * number of stored rows) says whether anything changed; if so, every
 * experiment with stored rows is decided in its own BEGIN IMMEDIATE
 * transaction, which reads the experiment's config, trials, best steps and
 * rows and deletes the rows the policy drops, so the decision and the
 * delete see the same state (the core's writer waits for it like for any
 * other writer: it holds the lock for a few milliseconds per experiment).
 * After the commit the dropped rows' objects are released one by one
 * (ckstore_release removes an object only when no row names it).
 */
#include "scheduler/store/ckretain.h"
#include "scheduler/store/repl.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"
#include "scheduler/core/experiment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef char ckr_hash[CKSTORE_HASH_LEN + 1];

struct ckretain {
    ckstore        *ck;
    sqlite3        *db;        /* passes (under run_mu) */
    repl_conn      *repl;      /* db's transactions, captured for a standby (repl.h) */
    sqlite3        *qdb;       /* usage queries (under q_mu) */
    pthread_mutex_t run_mu, q_mu, mu;
    hf_thread      *th;        /* "hf-ckretain" once started: its wait is the kick / stop */
    int64_t         interval_ms, grace_ms;
    int64_t         sig[3];    /* under run_mu: the last pass's signature */
    int             have_sig;
    ckretain_stats  stats;     /* under mu */
};

/* ---------- the decision ---------- */

/* Is a a better trial than b? (ties: the older one) */
static int better(const ckr_trial *a, const ckr_trial *b)
{
    return a->norm > b->norm || (a->norm == b->norm && a->id < b->id);
}

void ckretain_decide(const ckretain_policy *p, int archived, const ckr_trial *trials, size_t ntrials, ckr_ckpt *ck,
                     size_t nck)
{
    /* best[]: the keep_best_trials best ended trials, by insertion (K is small). */
    size_t kbest = p->keep_best_trials > 0 ? (size_t)p->keep_best_trials : 0;
    if (kbest > ntrials) kbest = ntrials;
    size_t *best = kbest ? calloc(kbest, sizeof *best) : NULL, nb = 0;
    if (!best) kbest = 0;   /* out of memory: keep the bests through keep_latest only */
    for (size_t i = 0; i < ntrials && !archived; i++) {
        if (!trials[i].ended || !trials[i].has_obj || kbest == 0) continue;
        size_t at = nb;
        while (at > 0 && better(&trials[i], &trials[best[at - 1]])) at--;
        if (at >= kbest) continue;
        size_t last = nb < kbest ? nb : kbest - 1;
        memmove(best + at + 1, best + at, (last - at) * sizeof *best);
        best[at] = i;
        if (nb < kbest) nb++;
    }
    for (size_t a = 0; a < nck;) {
        size_t b = a;
        while (b < nck && ck[b].trial == ck[a].trial) b++;   /* [a, b): one trial, oldest first */
        const ckr_trial *t = &trials[ck[a].trial];
        int is_best = 0;
        for (size_t j = 0; j < nb; j++) is_best |= best[j] == ck[a].trial;
        /* The row that scored the trial's objective: the newest at the
         * step of the objective's report (docs/guide.md "The objective");
         * every ended trial keeps it, so download --best always works. */
        size_t score_at = b;
        for (size_t j = a; j < b && t->has_obj && t->best_step >= 0; j++)
            if (ck[j].step == t->best_step) score_at = j;
        size_t best_at = score_at < b ? score_at : b - 1;   /* else the newest */
        for (size_t j = a; j < b; j++) {
            int newest_k = (int64_t)(b - j) <= p->keep_latest;
            if (archived) ck[j].keep = 0;
            else if (!t->ended) ck[j].keep = 1;
            else ck[j].keep = newest_k || (j == b - 1 && t->needed) || (is_best && j == best_at) || j == score_at;
        }
        a = b;
    }
    free(best);
}

/* ---------- SQL helpers ---------- */

static int open_conn(const char *path, sqlite3 **db, char *err, size_t errlen)
{
    int src = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
    if (src == SQLITE_OK) {
        sqlite3_busy_timeout(*db, 5000);
        src = sqlite3_exec(*db, "PRAGMA foreign_keys=ON", NULL, NULL, NULL);
    }
    if (src == SQLITE_OK) return 0;
    snprintf(err, errlen, "checkpoint retention: cannot open %s: %s", path,
             *db ? sqlite3_errmsg(*db) : sqlite3_errstr(src));
    return HF_EDB;
}

static const char *trial_ended_states[] = {"COMPLETED", "FAILED", "STOPPED", "CANCELED", NULL};

static int state_ended(const char *s)
{
    for (const char *const *p = trial_ended_states; s && *p; p++)
        if (strcmp(s, *p) == 0) return 1;
    return 0;
}

/* What a pass needs of an experiment's stored config (validated at submit). */
typedef struct exp_facts {
    ckretain_policy pol;
    int  goal_max;
    int  agg_last;      /* objective.aggregate "last" (the default with a list) */
    int  reuses;        /* ASHA or PBT, still ACTIVE or PAUSED */
    char metric[80];
} exp_facts;

static void exp_facts_read(const char *config, const char *state, exp_facts *f)
{
    json_t *cfg = json_loads(config ? config : "{}", 0, NULL);
    json_t *pol = json_object_get(cfg, "checkpoint_policy");
    json_t *kl = json_object_get(pol, "keep_latest"), *kb = json_object_get(pol, "keep_best_trials");
    /* The first objective of a list is the trial's objective (docs/search.md). */
    json_t *obj = json_object_get(cfg, "objective");
    if (json_is_array(obj)) obj = json_array_get(obj, 0);
    const char *goal = json_string_value(json_object_get(obj, "goal"));
    const char *metric = json_string_value(json_object_get(obj, "metric"));
    const char *agg = json_string_value(json_object_get(obj, "aggregate"));
    f->agg_last = agg ? strcmp(agg, "last") == 0 : json_is_array(json_object_get(cfg, "objective"));
    const char *srch = json_string_value(json_object_get(json_object_get(cfg, "searcher"), "name"));
    f->pol.keep_latest = json_is_integer(kl) ? json_integer_value(kl) : EXP_DEFAULT_KEEP_LATEST;
    f->pol.keep_best_trials = json_is_integer(kb) ? json_integer_value(kb) : EXP_DEFAULT_KEEP_BEST;
    f->goal_max = goal && strcmp(goal, "maximize") == 0;
    snprintf(f->metric, sizeof f->metric, "%s", metric ? metric : "");
    int open = state && (strcmp(state, "ACTIVE") == 0 || strcmp(state, "PAUSED") == 0);
    f->reuses = open && srch && (strcmp(srch, "asha") == 0 || strcmp(srch, "pbt") == 0);
    json_decref(cfg);
}

static int cmp_trial_id(const void *key, const void *el)
{
    int64_t k = *(const int64_t *)key, v = ((const ckr_trial *)el)->id;
    return k < v ? -1 : k > v;
}

/* One experiment's rows, read in the open transaction. */
typedef struct exp_rows {
    ckr_trial *tr;  size_t ntr;
    ckr_ckpt  *ck;  size_t nck;
    ckr_hash  *sha;             /* parallel to ck */
} exp_rows;

static void exp_rows_free(exp_rows *r)
{
    free(r->tr);
    free(r->ck);
    free(r->sha);
    memset(r, 0, sizeof *r);
}

static int load_trials(sqlite3 *db, int64_t xid, const exp_facts *f, exp_rows *r)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    size_t cap = 0;
    if (sqlite3_prepare_v2(db, "SELECT id,state,objective,parent_trial FROM trials WHERE experiment_id=? ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, xid);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (r->ntr == cap) {
            cap = cap ? 2 * cap : 64;
            ckr_trial *n = realloc(r->tr, cap * sizeof *n);
            if (!n) { rc = HF_ENOMEM; goto end; }
            r->tr = n;
        }
        ckr_trial *t = &r->tr[r->ntr++];
        memset(t, 0, sizeof *t);
        t->id = sqlite3_column_int64(st, 0);
        t->ended = state_ended((const char *)sqlite3_column_text(st, 1));
        t->has_obj = sqlite3_column_type(st, 2) != SQLITE_NULL;
        t->norm = f->goal_max ? sqlite3_column_double(st, 2) : -sqlite3_column_double(st, 2);
        t->needed = f->reuses;
        t->best_step = -1;
    }
    if (src != SQLITE_DONE) goto end;
    /* A trial that has not ended may start from its parent's newest (PBT). */
    sqlite3_reset(st);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t parent = sqlite3_column_int64(st, 3);
        if (!parent || state_ended((const char *)sqlite3_column_text(st, 1))) continue;
        ckr_trial *p = bsearch(&parent, r->tr, r->ntr, sizeof *r->tr, cmp_trial_id);
        if (p) p->needed = 1;
    }
    rc = src == SQLITE_DONE ? 0 : HF_EDB;
end:
    sqlite3_finalize(st);
    return rc;
}

/* The step of each trial's report that scored its objective: the first
 * report of its best value, with aggregate "last" its last report. */
static int load_best_steps(sqlite3 *db, int64_t xid, const exp_facts *f, exp_rows *r)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    if (sqlite3_prepare_v2(db, f->agg_last
                               ? "SELECT m.trial_id, m.step, MAX(m.seq) FROM metrics m JOIN trials t ON t.id=m.trial_id "
                                 "WHERE t.experiment_id=?1 AND m.name=?2 AND m.step IS NOT NULL AND m.value=t.objective "
                                 "GROUP BY m.trial_id"
                               : "SELECT m.trial_id, m.step, MIN(m.seq) FROM metrics m JOIN trials t ON t.id=m.trial_id "
                                 "WHERE t.experiment_id=?1 AND m.name=?2 AND m.step IS NOT NULL AND m.value=t.objective "
                                 "GROUP BY m.trial_id", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, xid);
    sqlite3_bind_text(st, 2, f->metric, -1, SQLITE_STATIC);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t tid = sqlite3_column_int64(st, 0);
        ckr_trial *t = bsearch(&tid, r->tr, r->ntr, sizeof *r->tr, cmp_trial_id);
        if (t) t->best_step = sqlite3_column_int64(st, 1);
    }
    rc = src == SQLITE_DONE ? 0 : HF_EDB;
end:
    sqlite3_finalize(st);
    return rc;
}

static int load_ckpts(sqlite3 *db, int64_t xid, exp_rows *r)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    size_t cap = 0;
    if (sqlite3_prepare_v2(db, "SELECT c.id, c.trial_id, IFNULL(c.step,-1), c.sha256 FROM checkpoints c "
                               "JOIN trials t ON t.id=c.trial_id WHERE t.experiment_id=? AND c.state='stored' "
                               "ORDER BY c.trial_id, IFNULL(c.step,-1), c.id", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, xid);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t tid = sqlite3_column_int64(st, 1);
        const char *sha = (const char *)sqlite3_column_text(st, 3);
        ckr_trial *t = bsearch(&tid, r->tr, r->ntr, sizeof *r->tr, cmp_trial_id);
        if (!t || !ckstore_hash_valid(sha)) continue;
        if (r->nck == cap) {
            cap = cap ? 2 * cap : 64;
            ckr_ckpt *n = realloc(r->ck, cap * sizeof *n);
            ckr_hash *h = n ? realloc(r->sha, cap * sizeof *h) : NULL;
            if (n) r->ck = n;
            if (!h) { rc = HF_ENOMEM; goto end; }
            r->sha = h;
        }
        r->ck[r->nck] = (ckr_ckpt){.trial = (size_t)(t - r->tr), .row_id = sqlite3_column_int64(st, 0),
                                   .step = sqlite3_column_int64(st, 2), .keep = 1};
        memcpy(r->sha[r->nck++], sha, sizeof(ckr_hash));
    }
    rc = src == SQLITE_DONE ? 0 : HF_EDB;
end:
    sqlite3_finalize(st);
    return rc;
}

static int delete_rows(sqlite3 *db, const exp_rows *r, size_t *ndel)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    *ndel = 0;
    if (sqlite3_prepare_v2(db, "DELETE FROM checkpoints WHERE id=?", -1, &st, NULL) != SQLITE_OK) return HF_EDB;
    for (size_t i = 0; i < r->nck && rc == 0; i++) {
        if (r->ck[i].keep) continue;
        sqlite3_bind_int64(st, 1, r->ck[i].row_id);
        int src = sqlite3_step(st);
        sqlite3_reset(st);
        if (src != SQLITE_DONE) rc = src == SQLITE_FULL ? HF_ENOSPC : HF_EDB;
        else (*ndel)++;
    }
    sqlite3_finalize(st);
    return rc;
}

static void stats_add(ckretain *cr, int64_t rows, int64_t objects, int64_t bytes)
{
    pthread_mutex_lock(&cr->mu);
    cr->stats.rows_deleted += rows;
    cr->stats.objects_freed += objects;
    cr->stats.bytes_freed += bytes;
    pthread_mutex_unlock(&cr->mu);
}

/* Release n objects; *bytes: what was freed. RET 0 or the first HF_E*. */
static int release_hashes(ckretain *cr, const ckr_hash *hashes, size_t n, int64_t *bytes)
{
    int rc = 0;
    int64_t objects = 0;
    *bytes = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t freed = 0;
        int r = ckstore_release(cr->ck, hashes[i], &freed);
        if (r && !rc) rc = r;
        if (freed) { objects++; *bytes += freed; }
    }
    stats_add(cr, 0, objects, *bytes);
    return rc;
}

int ckretain_release(ckretain *cr, const char (*hashes)[CKSTORE_HASH_LEN + 1], size_t n)
{
    int64_t bytes;
    return release_hashes(cr, hashes, n, &bytes);
}

/* Store the metrics of each kept row's step (schema/0014) once its trial
 * has ended: every report is in by then. RET 0 or HF_EDB / HF_ENOSPC. */
static int fill_metrics(sqlite3 *db, int64_t xid)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    if (sqlite3_prepare_v2(db, "UPDATE checkpoints SET metrics="
                               CKSTORE_STEP_METRICS_SQL("checkpoints.trial_id", "checkpoints.step")
                               " WHERE metrics IS NULL AND step IS NOT NULL "
                               "AND state='stored' AND trial_id IN (SELECT id FROM trials WHERE experiment_id=?1 AND "
                               "state IN ('COMPLETED','FAILED','STOPPED','CANCELED'))", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, xid);
    int src = sqlite3_step(st);
    rc = src == SQLITE_DONE ? 0 : src == SQLITE_FULL ? HF_ENOSPC : HF_EDB;
end:
    if (rc) hf_error("checkpoint retention: storing checkpoint metrics: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return rc;
}

/* Decide experiment xid and delete what its policy drops. */
static int sweep_experiment(ckretain *cr, int64_t xid, const char *state, const char *config, int archived)
{
    exp_facts f;
    exp_rows r = {0};
    size_t ndel = 0;
    int rc;
    exp_facts_read(config, state, &f);
    if ((rc = repl_txn_begin(cr->repl))) return rc;
    if ((rc = load_trials(cr->db, xid, &f, &r)) || (rc = load_best_steps(cr->db, xid, &f, &r)) ||
        (rc = load_ckpts(cr->db, xid, &r)))
        goto end;
    ckretain_decide(&f.pol, archived, r.tr, r.ntr, r.ck, r.nck);
    if ((rc = delete_rows(cr->db, &r, &ndel))) goto end;
    if (!archived && (rc = fill_metrics(cr->db, xid))) goto end;
    rc = repl_txn_commit(cr->repl);
end:
    if (rc) {
        hf_error("checkpoint retention: experiment %lld: %s", (long long)xid, hf_strerror(rc));
        repl_txn_rollback(cr->repl);
    } else if (ndel) {
        /* The dropped rows' objects, compacted to the front of r.sha. */
        size_t k = 0;
        for (size_t i = 0; i < r.nck; i++)
            if (!r.ck[i].keep) memmove(r.sha[k++], r.sha[i], sizeof(ckr_hash));
        int64_t freed = 0;
        release_hashes(cr, (const ckr_hash *)r.sha, k, &freed);
        stats_add(cr, (int64_t)ndel, 0, 0);
        hf_info("checkpoint retention: experiment %lld%s: %zu checkpoint%s deleted, %lld bytes freed", (long long)xid,
                archived ? " (archived)" : "", ndel, ndel == 1 ? "" : "s", (long long)freed);
    }
    exp_rows_free(&r);
    return rc;
}

/* Did anything change since the last pass? Fills sig. RET 1 changed, 0
 * not, HF_EDB. */
static int signature_changed(ckretain *cr, int64_t sig[3])
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    if (sqlite3_prepare_v2(cr->db, "SELECT (SELECT IFNULL(MAX(id),0) FROM events), "
                                   "(SELECT IFNULL(MAX(id),0) FROM checkpoints), "
                                   "(SELECT COUNT(*) FROM checkpoints WHERE state='stored')", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < 3; i++) sig[i] = sqlite3_column_int64(st, i);
        rc = !cr->have_sig || memcmp(sig, cr->sig, sizeof cr->sig) != 0;
    }
    sqlite3_finalize(st);
    return rc;
}

int ckretain_sweep(ckretain *cr, int force)
{
    sqlite3_stmt *st = NULL;
    int64_t sig[3];
    int rc = 0, src;
    pthread_mutex_lock(&cr->run_mu);
    int changed = signature_changed(cr, sig);
    if (changed < 0) { rc = changed; goto end; }
    if (!changed && !force) goto end;
    pthread_mutex_lock(&cr->mu);
    cr->stats.sweeps++;
    pthread_mutex_unlock(&cr->mu);
    /* The experiments to decide, copied out first: each is decided in its
     * own transaction. A deleted one waiting for the purge of its rows
     * (store/purge.h) is left to the purge. */
    if (sqlite3_prepare_v2(cr->db, "SELECT e.id, e.state, e.config, e.archived FROM experiments e WHERE EXISTS "
                                   "(SELECT 1 FROM trials t JOIN checkpoints c ON c.trial_id=t.id "
                                   "WHERE t.experiment_id=e.id AND c.state='stored') "
                                   "AND e.id NOT IN (SELECT experiment_id FROM purge_queue) ORDER BY e.id",
                           -1, &st, NULL) != SQLITE_OK) {
        rc = HF_EDB;
        goto end;
    }
    json_t *todo = json_array();
    while (todo && (src = sqlite3_step(st)) == SQLITE_ROW)
        json_array_append_new(todo, json_pack("[Issi]", (json_int_t)sqlite3_column_int64(st, 0),
                                              (const char *)sqlite3_column_text(st, 1),
                                              (const char *)sqlite3_column_text(st, 2), sqlite3_column_int(st, 3)));
    sqlite3_finalize(st);
    st = NULL;
    if (!todo) { rc = HF_ENOMEM; goto end; }
    size_t i;
    json_t *row;
    json_array_foreach(todo, i, row) {
        int r = sweep_experiment(cr, json_integer_value(json_array_get(row, 0)),
                                 json_string_value(json_array_get(row, 1)), json_string_value(json_array_get(row, 2)),
                                 (int)json_integer_value(json_array_get(row, 3)));
        if (r && !rc) rc = r;
    }
    json_decref(todo);
    /* The signature from before this pass: the next pass runs again when
     * anything changed since, our own deletes included. Taking it after
     * the deletes lost a checkpoint recorded while the pass ran (it lay
     * past the policy until a restart): the signature then already held
     * it, so no later pass looked. A pass after one that deleted finds
     * nothing left to do and leaves the signature still. */
    if (rc == 0) {
        memcpy(cr->sig, sig, sizeof cr->sig);
        cr->have_sig = 1;
    }
end:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&cr->run_mu);
    return rc;
}

/* ---------- orphans ---------- */

typedef struct orphan_walk {
    ckretain *cr;
    int64_t   now, grace_ms, n, bytes;
    int       rc;
} orphan_walk;

static void orphan_one(void *ctx, const char *sha, const struct stat *sb)
{
    orphan_walk *w = ctx;
    int64_t mtime = (int64_t)sb->st_mtim.tv_sec * 1000 + sb->st_mtim.tv_nsec / 1000000, freed = 0;
    if (w->now - mtime < w->grace_ms) return;   /* an upload about to record its row, a context before submit */
    int r = ckstore_release(w->cr->ck, sha, &freed);
    if (r && !w->rc) w->rc = r;
    if (freed) { w->n++; w->bytes += freed; }
}

int ckretain_gc_orphans(ckretain *cr, int64_t grace_ms, int64_t *objects, int64_t *bytes)
{
    orphan_walk w = {.cr = cr, .now = hf_wall_ms(), .grace_ms = grace_ms};
    int rc = ckstore_foreach_object(cr->ck, orphan_one, &w);
    if (!rc) rc = w.rc;
    stats_add(cr, 0, w.n, w.bytes);
    if (w.n) hf_info("checkpoint store: removed %lld object%s no row names (%lld bytes)", (long long)w.n,
                     w.n == 1 ? "" : "s", (long long)w.bytes);
    if (objects) *objects = w.n;
    if (bytes) *bytes = w.bytes;
    return rc;
}

/* ---------- usage ---------- */

/* A deleted experiment waiting for the purge (store/purge.h) has none. */
#define USAGE_SQL "SELECT e, COUNT(*), SUM(size) FROM (SELECT DISTINCT t.experiment_id AS e, c.sha256, c.size " \
                  "FROM checkpoints c JOIN trials t ON t.id=c.trial_id WHERE c.state='stored' " \
                  "AND t.experiment_id NOT IN (SELECT experiment_id FROM purge_queue) %s) GROUP BY e ORDER BY e"

static int usage_query(ckretain *cr, int64_t xid, ckretain_usage **out, size_t *n)
{
    char sql[512];
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    snprintf(sql, sizeof sql, USAGE_SQL, xid ? "AND t.experiment_id=?" : "");
    pthread_mutex_lock(&cr->q_mu);
    if (sqlite3_prepare_v2(cr->qdb, sql, -1, &st, NULL) != SQLITE_OK) goto end;
    if (xid) sqlite3_bind_int64(st, 1, xid);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ckretain_usage *u = realloc(*out, cap * sizeof *u);
            if (!u) { rc = HF_ENOMEM; goto end; }
            *out = u;
        }
        (*out)[(*n)++] = (ckretain_usage){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
                                          sqlite3_column_int64(st, 2)};
    }
    rc = src == SQLITE_DONE ? 0 : HF_EDB;
end:
    if (rc == HF_EDB) hf_error("checkpoint usage: %s", sqlite3_errmsg(cr->qdb));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&cr->q_mu);
    if (rc) { free(*out); *out = NULL; *n = 0; }
    return rc;
}

int ckretain_usage_all(ckretain *cr, ckretain_usage **out, size_t *n) { return usage_query(cr, 0, out, n); }

int ckretain_usage_of(ckretain *cr, int64_t experiment_id, ckretain_usage *out)
{
    ckretain_usage *u = NULL;
    size_t n = 0;
    int rc = usage_query(cr, experiment_id, &u, &n);
    *out = (ckretain_usage){experiment_id, 0, 0};
    if (rc == 0 && n == 1) *out = u[0];
    free(u);
    return rc;
}

int ckretain_objects_of(ckretain *cr, int64_t experiment_id, char (**out)[CKSTORE_HASH_LEN + 1], size_t *n)
{
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB, src;
    size_t cap = 0;
    ckr_hash *v = NULL;
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&cr->q_mu);
    if (sqlite3_prepare_v2(cr->qdb, "SELECT DISTINCT c.sha256 FROM checkpoints c JOIN trials t ON t.id=c.trial_id "
                                    "WHERE t.experiment_id=? AND c.state='stored'", -1, &st, NULL) != SQLITE_OK)
        goto end;
    sqlite3_bind_int64(st, 1, experiment_id);
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        const char *sha = (const char *)sqlite3_column_text(st, 0);
        if (!ckstore_hash_valid(sha)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            ckr_hash *nv = realloc(v, cap * sizeof *nv);
            if (!nv) { rc = HF_ENOMEM; goto end; }
            v = nv;
        }
        memcpy(v[(*n)++], sha, sizeof(ckr_hash));
    }
    rc = src == SQLITE_DONE ? 0 : HF_EDB;
end:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&cr->q_mu);
    if (rc) { free(v); *n = 0; }
    else *out = v;
    return rc;
}

/* ---------- lifecycle ---------- */

void ckretain_get_stats(ckretain *cr, ckretain_stats *out)
{
    pthread_mutex_lock(&cr->mu);
    *out = cr->stats;
    pthread_mutex_unlock(&cr->mu);
}

int ckretain_open(ckstore *ck, const char *db_path, int64_t interval_ms, int64_t grace_ms, ckretain **out,
                  char *err, size_t errlen)
{
    int rc;
    *out = NULL;
    ckretain *cr = calloc(1, sizeof *cr);
    if (!cr) return HF_ENOMEM;
    cr->ck = ck;
    cr->interval_ms = interval_ms > 0 ? interval_ms : 2000;
    cr->grace_ms = grace_ms;
    pthread_mutex_init(&cr->run_mu, NULL);
    pthread_mutex_init(&cr->q_mu, NULL);
    pthread_mutex_init(&cr->mu, NULL);
    if ((rc = open_conn(db_path, &cr->db, err, errlen)) || (rc = open_conn(db_path, &cr->qdb, err, errlen))) {
        ckretain_close(cr);
        return rc;
    }
    if (!(cr->repl = repl_conn_new(cr->db))) {
        ckretain_close(cr);
        return HF_ENOMEM;
    }
    *out = cr;
    return 0;
}

/* The "hf-ckretain" thread: the startup GC, then a pass every interval,
 * or at once after a kick (hf_thread_wait keeps a kick given during a
 * pass), until stopped. */
static void retain_main(hf_thread *t, void *arg)
{
    ckretain *cr = arg;
    ckretain_gc_orphans(cr, cr->grace_ms, NULL, NULL);
    if (hf_thread_stopping(t)) return;
    do ckretain_sweep(cr, 0);
    while (!hf_thread_wait(t, cr->interval_ms));
}

int ckretain_start(ckretain *cr)
{
    return hf_thread_start(&cr->th, "hf-ckretain", retain_main, cr);
}

void ckretain_kick(ckretain *cr)
{
    if (!cr) return;
    hf_thread_kick(cr->th);
}

void ckretain_close(ckretain *cr)
{
    if (!cr) return;
    hf_thread_stop_join(cr->th);
    repl_conn_free(cr->repl);
    if (cr->db) sqlite3_close_v2(cr->db);
    if (cr->qdb) sqlite3_close_v2(cr->qdb);
    pthread_mutex_destroy(&cr->run_mu);
    pthread_mutex_destroy(&cr->q_mu);
    pthread_mutex_destroy(&cr->mu);
    free(cr);
}
