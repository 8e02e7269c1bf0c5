/*
 * store.c — SQLite store of the scheduler (see store.h).
 *
 * Invariants: one writer connection, used only under the scheduler core's
 * lock; PRAGMA journal_mode=WAL, synchronous=FULL as opened (each COMMIT
 * fsyncs the WAL before it returns). store_set_sync(STORE_SYNC_FULL), the
 * scheduler's default, keeps that promise with the group flush instead
 * (repl.h; docs/scheduler.md, "Durability"): the writer commits with
 * synchronous=NORMAL (an append to the WAL, no fsync, so the core's lock
 * is never held across a disk flush) and the "hf-flush" thread fsyncs the
 * WAL after every batch of commits; a write's answer waits until the
 * flush covers it (api_http.c), so an acknowledged write survives a power
 * cut or a kernel crash. NORMAL when the operator chooses it: a commit
 * survives a process kill, a power cut may lose the transactions since
 * the last WAL checkpoint, never corrupts. foreign_keys=ON,
 * busy_timeout so readers and the writer never fail on a transient lock.
 * A database file created here has its directory fsynced, so its name
 * survives a power cut too (SQLite syncs the directory of a new WAL, not
 * of a new database). Migrations run in one transaction each and
 * bump user_version in the same transaction, so a crash mid-migration
 * leaves the previous version intact. Every transaction of the writer
 * after the migrations is recorded for a standby (repl.h, store_begin /
 * store_commit).
 */
#include "scheduler/store/store.h"
#include "scheduler/store/repl.h"

#include "hf_err.h"
#include "hf_file.h"
#include "hf_log.h"
#include "hf_thread.h"
#include "hf_time.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define STORE_READERS 8
/* WAL size (pages) at which the checkpointer thread is woken: SQLite's own
 * auto-checkpoint threshold, but run off the writer's path (see below). */
#define STORE_CKPT_PAGES 1000

static const char *const stmt_sql[ST__COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    /* ids start above id_floor (schema/0010_id_floor.sql): never reused after a delete */
    [ST_EXP_INSERT] = "INSERT INTO experiments(id,name,state,config,max_trials,created_at,description,tags,"
                      "parent_experiment,submitted_by,warm_history) VALUES(1+max(coalesce((SELECT max(id) FROM "
                      "experiments),0),coalesce((SELECT id FROM id_floor WHERE name='experiments'),0)),"
                      "?,?,?,?,?,?,?,?,?,?)",
    [ST_EXP_UPDATE] = "UPDATE experiments SET state=?,max_trials=?,searcher_done=?,ended_at=?,archived=?,end_reason=? "
                      "WHERE id=?",
    [ST_TRIAL_INSERT] = "INSERT INTO trials(id,experiment_id,idx,state,hparams,budget,parent_trial,created_at) "
                        "VALUES(1+max(coalesce((SELECT max(id) FROM trials),0),coalesce((SELECT id FROM id_floor "
                        "WHERE name='trials'),0)),?,?,?,?,?,?,?)",
    [ST_TRIAL_UPDATE] = "UPDATE trials SET state=?,budget=?,attempt=?,restarts=?,agent_id=?,port=?,exit_code=?,"
                        "kill_state=?,kill_reason=?,fail_agent=?,fail_streak=?,started_at=?,ended_at=? WHERE id=?",
    [ST_TRIAL_METRICS] = "UPDATE trials SET objective=?,latest=?,best=? WHERE id=?",
    [ST_METRIC_INSERT] = "INSERT INTO metrics(trial_id,attempt,name,step,epoch,value,time) VALUES(?,?,?,?,?,?,?)",
    [ST_LOG_INSERT] = "INSERT INTO logs(trial_id,attempt,stream,line,time) VALUES(?,?,?,?,?)",
    [ST_CKPT_INSERT] = "INSERT INTO checkpoints(trial_id,attempt,path,step,time) VALUES(?,?,?,?,?)",
    [ST_EVENT_INSERT] = "INSERT INTO events(time,experiment_id,trial_id,type,detail,user_name) VALUES(?,?,?,?,?,?)",
    [ST_AGENT_INSERT] = "INSERT INTO agents(name,host,slots,gpus,version,state,registered_at,last_heartbeat) "
                        "VALUES(?,?,?,?,?,?,?,?)",
    [ST_AGENT_UPDATE] = "UPDATE agents SET host=?,slots=?,gpus=?,version=?,state=?,registered_at=?,"
                        "last_heartbeat=? WHERE id=?",
    [ST_AGENT_HB] = "UPDATE agents SET state=?,last_heartbeat=? WHERE id=?",
    [ST_AGENT_BATCH] = "UPDATE agents SET hb_instance=?,hb_batch=? WHERE id=?",
    [ST_ALLOC_INSERT] = "INSERT INTO allocations(trial_id,attempt,rank,agent_id,slots,gpus,created_at) "
                        "VALUES(?,?,?,?,?,?,?)",
    [ST_ALLOC_UPDATE] = "UPDATE allocations SET started=?,exited=?,exit_code=? WHERE trial_id=? AND attempt=? AND rank=?",
    [ST_ALLOC_RELEASE] = "UPDATE allocations SET released_at=? WHERE trial_id=? AND attempt=? AND released_at IS NULL",
    [ST_EXP_META] = "UPDATE experiments SET description=?,tags=? WHERE id=?",
    [ST_TRIAL_NOTES] = "UPDATE trials SET notes=? WHERE id=?",
    /* Run for every assignment of a trial that ran before or has a parent,
     * pushed ones included: prepared once, not per call. */
    [ST_CKPT_NEWEST] = "SELECT sha256,size,name,step,agent_id FROM checkpoints WHERE trial_id=? "
                       "AND state='stored' ORDER BY id DESC LIMIT 1",
    [ST_HOOKS_ANY] = "SELECT 1 FROM webhooks LIMIT 1",
    /* ?1 event id, ?2 its time, ?3 experiment, ?4 'trial' or 'experiment', ?5 type */
    [ST_EVENT_OUTBOX] = "INSERT INTO webhook_outbox(hook_id,event_id,next_at) SELECT h.id,?1,?2 FROM webhooks h "
                        "WHERE (h.experiment_id IS NULL OR h.experiment_id=?3) AND EXISTS (SELECT 1 FROM "
                        "json_each(h.events) j WHERE j.value IN ('*',?4||'.*',?4||'.'||?5))",
    [ST_LOAD_EXPERIMENTS] = "SELECT id,state,config,max_trials,searcher_done,created_at,ended_at,archived,"
                            "description,tags,parent_experiment,submitted_by,warm_history,end_reason "
                            /* a deleted experiment waits for the purge of its rows: never loaded */
                            "FROM experiments WHERE id NOT IN (SELECT experiment_id FROM purge_queue) ORDER BY id",
    [ST_LOAD_AGENTS] = "SELECT id,name,host,slots,gpus,version,state,registered_at,last_heartbeat,"
                       "hb_instance,hb_batch FROM agents ORDER BY id",
    [ST_LOAD_TRIALS] = "SELECT id,experiment_id,idx,state,hparams,budget,parent_trial,attempt,restarts,"
                       "agent_id,port,exit_code,objective,latest,best,kill_state,kill_reason,fail_agent,"
                       "fail_streak,created_at,started_at,ended_at,notes FROM trials ORDER BY id",
    /* Live allocations of current attempts rebuild agent capacity. */
    [ST_LOAD_ALLOCATIONS] = "SELECT trial_id,attempt,rank,agent_id,slots,gpus,started,exited,exit_code "
                            "FROM allocations WHERE released_at IS NULL ORDER BY trial_id,rank",
    /* An experiment's objective reports, replayed through its searcher. */
    [ST_LOAD_REPORTS] = "SELECT m.trial_id,m.step,m.epoch,m.value FROM metrics m JOIN trials t "
                        "ON t.id=m.trial_id WHERE t.experiment_id=? AND m.name=? ORDER BY m.seq",
    [ST_LOAD_REPORTS_NAMED] = "SELECT m.trial_id,m.step,m.epoch,m.value,m.name FROM metrics m JOIN trials t "
                              "ON t.id=m.trial_id WHERE t.experiment_id=? AND m.name IN "
                              "(SELECT value FROM json_each(?)) ORDER BY m.seq",
};

struct store {
    sqlite3        *db;
    char           *path;
    sqlite3_stmt   *stmt[ST__COUNT];
    pthread_mutex_t rlock;                 /* guards the reader pool */
    sqlite3        *readers[STORE_READERS];
    int             nreaders;
    /* Checkpointer: SQLite's auto-checkpoint runs inside the COMMIT that
     * crosses the threshold, with an fsync, under the scheduler's core
     * lock, so one heartbeat in a thousand paid ~10 ms for everyone behind
     * it. Instead the writer's WAL hook only wakes this thread, which runs a
     * PASSIVE checkpoint on its own connection: it copies committed frames
     * into the database file while the writer keeps appending. */
    hf_thread      *ckpt_thread;           /* "hf-ckpt", or NULL: SQLite's auto-checkpoint */
    pthread_mutex_t ckpt_mu;               /* guards ckpt_wanted and the counters */
    int             ckpt_wanted;
    int64_t         ckpt_runs, ckpt_fails;
    int             sync;                  /* STORE_SYNC_FULL or STORE_SYNC_NORMAL */
    int             version;               /* user_version after the migrations (fixed from then on) */
    /* The group flush (store_set_sync FULL): "hf-flush" fsyncs the WAL
     * (the writer's own sqlite3_file, through the VFS) after commits. */
    hf_thread      *flush_thread;
    sqlite3_file   *wal;
    uint64_t        flushed;               /* flush thread only */
    repl_conn      *repl;                  /* the writer's replication capture (repl.h) */
};

int store_rc(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK: case SQLITE_DONE: case SQLITE_ROW: return HF_OK;
    case SQLITE_FULL: return HF_ENOSPC;
    case SQLITE_NOMEM: return HF_ENOMEM;
    case SQLITE_CORRUPT: case SQLITE_NOTADB: return HF_ECORRUPT;
    case SQLITE_CONSTRAINT: return HF_EINVAL;
    default: return HF_EDB;
    }
}

static int exec_sql(sqlite3 *db, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        if (err) snprintf(err, errlen, "%s", msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
        return store_rc(rc);
    }
    return HF_OK;
}

static int user_version(sqlite3 *db)
{
    sqlite3_stmt *st = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Apply every embedded migration newer than user_version, each in its own
 * transaction together with the version bump. */
static int migrate(sqlite3 *db, char *err, size_t errlen)
{
    int cur = user_version(db);
    if (cur < 0) { snprintf(err, errlen, "cannot read user_version: %s", sqlite3_errmsg(db)); return HF_EDB; }
    int newest = 0;
    for (const store_migration *m = store_migrations; m->sql; m++) newest = m->version;
    if (cur > newest) {
        snprintf(err, errlen, "database schema version %d is newer than this scheduler (%d)", cur, newest);
        return HF_EINVAL;
    }
    for (const store_migration *m = store_migrations; m->sql; m++) {
        if (m->version <= cur) continue;
        char pragma[64];
        int rc = exec_sql(db, "BEGIN IMMEDIATE", err, errlen);
        if (rc) return rc;
        rc = exec_sql(db, m->sql, err, errlen);
        if (rc == 0) {
            snprintf(pragma, sizeof pragma, "PRAGMA user_version=%d", m->version);
            rc = exec_sql(db, pragma, err, errlen);
        }
        if (rc == 0) rc = exec_sql(db, "COMMIT", err, errlen);
        if (rc) {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", err);
            snprintf(err, errlen, "migration %s: %s", m->name, tmp);
            exec_sql(db, "ROLLBACK", NULL, 0);
            return rc;
        }
        hf_info("applied migration %s", m->name);
    }
    return HF_OK;
}

/* After every COMMIT of the writer that appended to the WAL (inside it):
 * number the commit for the group flush and wake the flusher; wake the
 * checkpointer when the WAL is long. */
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)db;
    (void)name;
    store *s = arg;
    repl_note_commit();
    if (s->flush_thread) hf_thread_kick(s->flush_thread);
    if (!s->ckpt_thread) {   /* SQLite's own auto-checkpoint, which this hook replaced */
        if (pages >= STORE_CKPT_PAGES) sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        return SQLITE_OK;
    }
    if (pages >= STORE_CKPT_PAGES) {
        pthread_mutex_lock(&s->ckpt_mu);
        int was = s->ckpt_wanted;
        s->ckpt_wanted = 1;
        pthread_mutex_unlock(&s->ckpt_mu);
        if (!was) hf_thread_kick(s->ckpt_thread);
    }
    return SQLITE_OK;
}

/* The "hf-ckpt" thread: a passive checkpoint each time the WAL hook asks
 * (kicked), until stopped. */
static void ckpt_main(hf_thread *t, void *arg)
{
    store *s = arg;
    sqlite3 *db = NULL;
    int64_t last_warn = 0;
    if (sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        hf_warn("checkpointer: cannot open %s: %s; the WAL is checkpointed at shutdown only", s->path,
                db ? sqlite3_errmsg(db) : "?");
        sqlite3_close_v2(db);
        db = NULL;
    } else {
        sqlite3_busy_timeout(db, 1000);
        /* A connection enters WAL mode when it first reads the database;
         * until then a checkpoint call does nothing (log = -1). */
        if (sqlite3_exec(db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) != SQLITE_OK)
            hf_warn("checkpointer: %s: %s", s->path, sqlite3_errmsg(db));
    }
    pthread_mutex_lock(&s->ckpt_mu);
    for (;;) {
        pthread_mutex_unlock(&s->ckpt_mu);
        int stop = hf_thread_wait(t, 60000);   /* a kick ends it; the period only bounds a lost wake */
        pthread_mutex_lock(&s->ckpt_mu);
        if (stop) break;
        if (!s->ckpt_wanted) continue;
        s->ckpt_wanted = 0;
        if (!db) continue;
        pthread_mutex_unlock(&s->ckpt_mu);
        int log = 0, done = 0;
        int rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_runs++;
        if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
            s->ckpt_fails++;
            int64_t now = hf_mono_ms();
            if (last_warn == 0 || now - last_warn >= 10000) {   /* e.g. a full disk: not 1000 times a second */
                hf_warn("checkpoint of %s failed: %s (WAL kept; retried on the next commits)", s->path,
                        sqlite3_errmsg(db));
                last_warn = now;
            }
        }
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    sqlite3_close_v2(db);
}

/* The "hf-flush" thread: whenever the writer committed since the last
 * flush, fsync the WAL once and report every commit made before it as
 * durable (repl_flushed). A failed fsync is reported and sticky (repl.h).
 * On stop, one last flush covers the last commits. */
static void flush_main(hf_thread *t, void *arg)
{
    store *s = arg;
    int stop = 0;
    for (;;) {
        uint64_t seq = repl_commit_seq();
        if (seq == s->flushed) {
            if (stop) break;
            stop = hf_thread_wait(t, 1000);   /* a commit kicks it */
            continue;
        }
        int src = s->wal->pMethods->xSync(s->wal, SQLITE_SYNC_NORMAL);
        if (src != SQLITE_OK) {
            hf_error("store: fsync of %s-wal failed (SQLite code %d): nothing more is acknowledged; restart the "
                     "scheduler once the disk is mended (docs/scheduler.md, \"Durability\")", s->path, src);
            repl_flushed(seq, 1);
            while (!hf_thread_wait(t, 60000)) {}
            break;
        }
        s->flushed = seq;
        repl_flushed(seq, 0);
    }
}

/* Turn the group flush on (or off): see the header. RET 0 or HF_EDB. */
static int flush_set(store *s, int on)
{
    if (!on) {
        if (!s->flush_thread) return 0;
        hf_thread_stop_join(s->flush_thread);   /* its last flush covers every commit */
        s->flush_thread = NULL;
        repl_flush_enable(0);
        return exec_sql(s->db, "PRAGMA synchronous=FULL", NULL, 0);
    }
    if (s->flush_thread) return 0;
    /* The writer has read the database (migrations), so its WAL is open. */
    if (sqlite3_file_control(s->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &s->wal) != SQLITE_OK || !s->wal ||
        !s->wal->pMethods) {
        hf_warn("store: no WAL file to flush; every COMMIT fsyncs instead");
        return 0;
    }
    int rc = exec_sql(s->db, "PRAGMA synchronous=NORMAL", NULL, 0);
    if (rc) return rc;
    s->flushed = repl_commit_seq();
    repl_flush_enable(1);
    if (hf_thread_start(&s->flush_thread, "hf-flush", flush_main, s)) {
        hf_warn("store: cannot start the flush thread; every COMMIT fsyncs instead");
        repl_flush_enable(0);
        return exec_sql(s->db, "PRAGMA synchronous=FULL", NULL, 0);
    }
    return 0;
}

int store_open(const char *path, store **out, char *err, size_t errlen)
{
    int rc = HF_OK;
    *out = NULL;
    struct stat sb;
    int created = stat(path, &sb) != 0;
    store *s = calloc(1, sizeof *s);
    if (!s) return HF_ENOMEM;
    pthread_mutex_init(&s->rlock, NULL);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    s->path = strdup(path);
    if (!s->path) { rc = HF_ENOMEM; goto end; }
    int src = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                              SQLITE_OPEN_NOMUTEX, NULL);
    if (src != SQLITE_OK) {
        snprintf(err, errlen, "cannot open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(src));
        rc = store_rc(src);
        goto end;
    }
    sqlite3_busy_timeout(s->db, 5000);
    rc = exec_sql(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;"
                         /* 32 MiB: 64 MiB added 35 MiB of RSS at full scale and no
                          * measurable ingestion (docs/operations.md "bench/loadgen") */
                         "PRAGMA cache_size=-32768; PRAGMA temp_store=MEMORY;", err, errlen);
    if (rc) goto end;
    s->sync = STORE_SYNC_FULL;
    if (created && (rc = hf_file_fsync_parent(path))) {
        snprintf(err, errlen, "cannot fsync the directory of %s: %s", path, hf_strerror(rc));
        goto end;
    }
    rc = migrate(s->db, err, errlen);
    if (rc) goto end;
    s->version = user_version(s->db);
    if (!(s->repl = repl_conn_new(s->db))) { rc = HF_ENOMEM; goto end; }   /* after the migrations: not replicated */
    for (int i = 0; i < ST__COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->stmt[i], NULL) != SQLITE_OK) {
            snprintf(err, errlen, "prepare %d: %s", i, sqlite3_errmsg(s->db));
            rc = HF_EDB;
            goto end;
        }
    }
    if (hf_thread_start(&s->ckpt_thread, "hf-ckpt", ckpt_main, s))
        hf_warn("cannot start the checkpointer thread; checkpoints run in the committing thread");
    sqlite3_wal_hook(s->db, wal_hook, s);   /* replaces the auto-checkpoint */
    *out = s;
    s = NULL;
end:
    store_close(s);
    return rc;
}

void store_close(store *s)
{
    if (!s) return;
    flush_set(s, 0);
    hf_thread_stop_join(s->ckpt_thread);
    repl_conn_free(s->repl);
    for (int i = 0; i < ST__COUNT; i++) sqlite3_finalize(s->stmt[i]);
    for (int i = 0; i < s->nreaders; i++) sqlite3_close_v2(s->readers[i]);
    if (s->db) sqlite3_close_v2(s->db);
    pthread_mutex_destroy(&s->rlock);
    pthread_mutex_destroy(&s->ckpt_mu);
    free(s->path);
    free(s);
}

sqlite3 *store_db(store *s) { return s->db; }
struct repl_conn *store_repl(store *s) { return s->repl; }
const char *store_path(const store *s) { return s->path; }
const char *store_errmsg(store *s) { return sqlite3_errmsg(s->db); }
/* Read from HTTP threads without the core's lock, so never the writer
 * connection (SQLITE_OPEN_NOMUTEX): only migrations change it, at open. */
int store_version(store *s) { return s->version; }

int store_schema_newest(void)
{
    int newest = 0;
    for (const store_migration *m = store_migrations; m->sql; m++) newest = m->version;
    return newest;
}

int store_set_sync(store *s, int mode)
{
    if (mode != STORE_SYNC_FULL && mode != STORE_SYNC_NORMAL) return HF_EINVAL;
    int rc = flush_set(s, 0);
    if (rc == 0 && mode == STORE_SYNC_NORMAL) rc = exec_sql(s->db, "PRAGMA synchronous=NORMAL", NULL, 0);
    if (rc == 0 && mode == STORE_SYNC_FULL) rc = flush_set(s, 1);
    if (rc == 0) s->sync = mode;
    return rc;
}

int store_wait_durable(store *s)
{
    (void)s;
    return repl_flush_wait(repl_commit_seq());
}

int store_sync_mode(const store *s) { return s->sync; }

int store_sync_parse(const char *name, int *mode)
{
    if (name && strcmp(name, "full") == 0) *mode = STORE_SYNC_FULL;
    else if (name && strcmp(name, "normal") == 0) *mode = STORE_SYNC_NORMAL;
    else return HF_EINVAL;
    return 0;
}

void store_checkpoint_stats(store *s, int64_t *runs, int64_t *fails)
{
    pthread_mutex_lock(&s->ckpt_mu);
    *runs = s->ckpt_runs;
    *fails = s->ckpt_fails;
    pthread_mutex_unlock(&s->ckpt_mu);
}

sqlite3_stmt *store_stmt(store *s, int id)
{
    sqlite3_stmt *st = s->stmt[id];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

static _Thread_local char last_error[200];

const char *store_last_error(void) { return last_error[0] ? last_error : "no error recorded"; }

/* A step of st failed with rc: record and log why, reset st. RET HF_E*. */
static int stmt_failed(sqlite3_stmt *st, int rc)
{
    /* the connection's message before reset/rollback overwrite it */
    const char *sql = sqlite3_sql(st);
    snprintf(last_error, sizeof last_error, "%s (%.60s)", sqlite3_errmsg(sqlite3_db_handle(st)), sql ? sql : "?");
    sqlite3_reset(st);
    hf_warn("sqlite: %s", last_error);
    return store_rc(rc);
}

int store_exec_stmt(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return stmt_failed(st, rc);
    sqlite3_reset(st);
    return HF_OK;
}

int store_event_hookable(int trial, const char *type)
{
    static const char *const exp_states[] = {"ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "FAILED", NULL};
    static const char *const trial_states[] = {"QUEUED", "ASSIGNED", "RUNNING", "COMPLETED", "FAILED",
                                               "STOPPED", "CANCELED", "PAUSED", NULL};
    for (const char *const *l = trial ? trial_states : exp_states; *l; l++)
        if (strcmp(type, *l) == 0) return 1;
    return 0;
}

int store_event_insert(store *s, int64_t time_ms, int64_t exp_id, int64_t trial_id, const char *type,
                       const char *detail, const char *user)
{
    sqlite3_stmt *st = store_stmt(s, ST_EVENT_INSERT);
    sqlite3_bind_int64(st, 1, time_ms);
    store_bind_opt_int(st, 2, exp_id > 0, exp_id);
    store_bind_opt_int(st, 3, trial_id > 0, trial_id);
    sqlite3_bind_text(st, 4, type, -1, SQLITE_STATIC);
    store_bind_text(st, 5, detail);
    store_bind_text(st, 6, user);
    int rc = store_exec_stmt(st);
    if (rc || exp_id <= 0 || !store_event_hookable(trial_id > 0, type)) return rc;
    /* Most farms have no hook: one probe of an empty table, not the insert. */
    st = store_stmt(s, ST_HOOKS_ANY);
    int any = sqlite3_step(st);
    if (any != SQLITE_ROW && any != SQLITE_DONE) return stmt_failed(st, any);
    sqlite3_reset(st);
    if (any == SQLITE_DONE) return HF_OK;
    st = store_stmt(s, ST_EVENT_OUTBOX);
    sqlite3_bind_int64(st, 1, sqlite3_last_insert_rowid(s->db));
    sqlite3_bind_int64(st, 2, time_ms);
    sqlite3_bind_int64(st, 3, exp_id);
    sqlite3_bind_text(st, 4, trial_id > 0 ? "trial" : "experiment", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, type, -1, SQLITE_STATIC);
    return store_exec_stmt(st);
}

/* Every transaction of the writer is captured for the standby (repl.h):
 * the session starts after BEGIN, and the COMMIT runs inside
 * repl_conn_commit (LSN bump, changeset, ring append). */
int store_begin(store *s)
{
    int rc = store_exec_stmt(store_stmt(s, ST_BEGIN));
    if (rc == 0 && (rc = repl_conn_begin(s->repl))) store_rollback(s);
    return rc;
}

static int commit_stmt(void *arg) { return store_exec_stmt(store_stmt(arg, ST_COMMIT)); }

int store_commit(store *s)
{
    int rc = repl_conn_commit(s->repl, commit_stmt, s);
    /* A failed COMMIT may leave the transaction open: roll it back so the
     * connection is usable again and nothing half-written remains. */
    if (rc && !sqlite3_get_autocommit(s->db)) store_rollback(s);
    return rc;
}
int store_rollback(store *s)
{
    repl_conn_abort(s->repl);
    if (sqlite3_get_autocommit(s->db)) return HF_OK;
    return store_exec_stmt(store_stmt(s, ST_ROLLBACK));
}

void store_bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s) sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, i);
}

void store_bind_opt_int(sqlite3_stmt *st, int i, int has, int64_t v)
{
    if (has) sqlite3_bind_int64(st, i, v);
    else sqlite3_bind_null(st, i);
}

sqlite3 *store_reader_get(store *s)
{
    sqlite3 *db = NULL;
    pthread_mutex_lock(&s->rlock);
    if (s->nreaders > 0) db = s->readers[--s->nreaders];
    pthread_mutex_unlock(&s->rlock);
    if (db) return db;
    if (sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        hf_warn("cannot open reader on %s: %s", s->path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_close_v2(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 5000);
    return db;
}

void store_reader_put(store *s, sqlite3 *db)
{
    if (!db) return;
    pthread_mutex_lock(&s->rlock);
    if (s->nreaders < STORE_READERS) {
        s->readers[s->nreaders++] = db;
        db = NULL;
    }
    pthread_mutex_unlock(&s->rlock);
    if (db) sqlite3_close_v2(db);
}

int store_health(store *s)
{
    sqlite3 *db = store_reader_get(s);
    sqlite3_stmt *st = NULL;
    int ok = db && sqlite3_prepare_v2(db, "SELECT count(*) FROM experiments", -1, &st, NULL) == SQLITE_OK &&
             sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    store_reader_put(s, db);
    return ok ? 0 : HF_EDB;
}
