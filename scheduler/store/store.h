/*
 * store.h — the scheduler's SQLite store: one database file in WAL mode
 * with foreign keys on, migrated at open from the schema/NNNN_name.sql
 * files embedded in the binary (PRAGMA user_version holds the number of
 * the newest applied migration).
 *
 * Workload: one writer (the scheduler core, under its lock) doing many
 * small batched transactions (a heartbeat's metrics and logs, a dispatch
 * pass), plus readers of metrics/logs that open their own read-only
 * connections (store_reader) so long scans never hold the writer's lock.
 * Every statement is prepared once with bound parameters (store_stmt).
 *
 * Errors: SQLite result codes are turned into HF_E* by store_rc():
 * SQLITE_FULL -> HF_ENOSPC (the API answers 507), everything else
 * HF_EDB. After a failed statement inside a transaction the caller rolls
 * back; nothing is half-written.
 */
#ifndef HF_STORE_H
#define HF_STORE_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

typedef struct store_migration {
    int         version;   /* the NNNN of the file name */
    const char *name;      /* "0001_init" */
    const char *sql;
} store_migration;

/* Generated from schema/NNNN_name.sql by schema/embed.sh; ends with {0, NULL, NULL}. */
extern const store_migration store_migrations[];

/* Prepared statements, one per query the core runs; the core's row
 * mapping (binds and column reads) is scheduler/core/sched_rows.c. */
enum store_stmt_id {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
    ST_EXP_INSERT, ST_EXP_UPDATE,
    ST_TRIAL_INSERT, ST_TRIAL_UPDATE, ST_TRIAL_METRICS,
    ST_METRIC_INSERT, ST_LOG_INSERT, ST_CKPT_INSERT, ST_EVENT_INSERT,
    ST_AGENT_INSERT, ST_AGENT_UPDATE, ST_AGENT_HB, ST_AGENT_BATCH,
    ST_ALLOC_INSERT, ST_ALLOC_UPDATE, ST_ALLOC_RELEASE,
    ST_EXP_META, ST_TRIAL_NOTES,   /* 0008_workflow: PATCH of experiments and trials */
    ST_CKPT_NEWEST,            /* a trial's newest stored checkpoint (scheduler/core/sched_ckpt.c) */
    ST_HOOKS_ANY, ST_EVENT_OUTBOX,   /* store_event_insert's webhook rows */
    /* Loading the core at start (scheduler/core/sched_load.c): */
    ST_LOAD_EXPERIMENTS, ST_LOAD_AGENTS, ST_LOAD_TRIALS, ST_LOAD_ALLOCATIONS, ST_LOAD_REPORTS,
    ST_LOAD_REPORTS_NAMED,     /* reports of a JSON list of metric names (several objectives, constraints) */
    ST__COUNT
};

typedef struct store store;

/* Open (creating if needed) and migrate path. RET 0 with *out, or an
 * HF_E* code with a message in err. */
int  store_open(const char *path, store **out, char *err, size_t errlen);
void store_close(store *s);
sqlite3 *store_db(store *s);
/* The writer's capture context (repl.h), e.g. for repl_conn_metric_log. */
struct repl_conn *store_repl(store *s);
const char *store_path(const store *s);
/* The prepared statement id, reset and with bindings cleared. */
sqlite3_stmt *store_stmt(store *s, int id);

/* One events row (exp_id, trial_id 0 and detail, user NULL for none) in
 * the caller's transaction and, when it is an experiment's or a trial's
 * state change, one webhook_outbox row per hook that listens for it
 * (docs/protocol.md "Webhooks"), so a committed change has its deliveries
 * on disk. The outbox is written here, not by a trigger on events: a
 * trigger made every events insert about 15 us dearer on a 2-core VM
 * (statement journal, AUTOINCREMENT bookkeeping), hooks or not
 * (schema/0019_outbox_by_core.sql). RET 0 or HF_E*. */
int store_event_insert(store *s, int64_t time_ms, int64_t exp_id, int64_t trial_id, const char *type,
                       const char *detail, const char *user);
/* 1 when a webhook can listen for events of this type: the state changes
 * of a trial (trial 1) or of an experiment (trial 0) that "trial.STATE"
 * and "experiment.STATE" filters name (docs/protocol.md "Webhooks"; the
 * hook's spec is checked against the same list, scheduler/notify/webhook.c). */
int store_event_hookable(int trial, const char *type);

int store_begin(store *s);
int store_commit(store *s);
int store_rollback(store *s);

/* Step a statement that returns no rows, then reset it. RET 0 or HF_E*. */
int store_exec_stmt(sqlite3_stmt *st);
/* SQLite's message (and the statement's first words) of this thread's last
 * failed store_exec_stmt: read it before the next statement. */
const char *store_last_error(void);
/* Map an SQLite result code to HF_E* (SQLITE_FULL -> HF_ENOSPC). */
int store_rc(int sqlite_rc);
/* Last error message of the writer connection. */
const char *store_errmsg(store *s);
/* Schema version applied (by store_open's migrations; fixed from then
 * on). Safe from any thread: it does not touch the writer connection. */
int store_version(store *s);
/* The newest schema version this binary's embedded migrations reach: what
 * store_open brings every database to. A standby follows only a primary
 * whose database is at this version (docs/scheduler.md "Standby and
 * failover": migrations run on each side, not through the stream). */
int store_schema_newest(void);

/* Durability of a COMMIT (docs/scheduler.md, "Durability"). As
 * store_open leaves it, every COMMIT of the writer fsyncs the WAL.
 * store_set_sync(FULL) turns on the group flush instead (repl.h): the
 * COMMIT only appends to the WAL and the "hf-flush" thread fsyncs it
 * after, once per batch of commits; whoever acknowledges a write must
 * first wait for that flush (store_wait_durable, or the HTTP layer's
 * parked answers), and then what was acknowledged survives a power cut.
 * NORMAL fsyncs only at WAL checkpoints (a power cut may lose the last
 * transactions, a process kill loses nothing). The writer connection's
 * mode; the checkpoint store's own connection always runs FULL.
 * RET 0, HF_EINVAL (unknown mode), HF_EDB. */
enum { STORE_SYNC_NORMAL = 1, STORE_SYNC_FULL = 2 };
int store_set_sync(store *s, int mode);
int store_sync_mode(const store *s);
/* Block until every commit of the writer so far is durable (immediate
 * without the group flush). RET 0 or HF_EIO (the flush failed: not durable). */
int store_wait_durable(store *s);
/* "full" or "normal" -> STORE_SYNC_*. RET 0 or HF_EINVAL. */
int store_sync_parse(const char *name, int *mode);


/* WAL checkpoints run by the store's checkpointer thread "hf-ckpt" (PASSIVE, on its
 * own connection, woken when the WAL passes 1000 pages) and how many
 * failed (e.g. disk full). */
void store_checkpoint_stats(store *s, int64_t *runs, int64_t *fails);

/* Bind helpers: NULL / negative-means-null conveniences. */
void store_bind_text(sqlite3_stmt *st, int i, const char *s);
void store_bind_opt_int(sqlite3_stmt *st, int i, int has, int64_t v);

/* Borrow a read-only connection from a small pool (opened on demand) and
 * give it back with store_reader_put. Readers see the last committed
 * state (WAL snapshot) and never block the writer. NULL on failure. */
sqlite3 *store_reader_get(store *s);
void     store_reader_put(store *s, sqlite3 *db);

/* /healthz: can a reader connection read the experiments table? RET 0, or
 * HF_EDB (no reader, or the query failed). */
int store_health(store *s);

#endif
