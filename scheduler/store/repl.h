/*
 * repl.h — the replication log of a primary scheduler (docs/scheduler.md,
 * "Replication"; the wire is docs/protocol.md, "Replication stream").
 *
 * Replication is logical: every connection that writes the database (the
 * core's writer in store.c, the checkpoint store's, retention's, the
 * webhook service's) records each of its transactions with an SQLite
 * session (repl_conn_begin at BEGIN IMMEDIATE, repl_conn_commit instead of
 * a bare COMMIT). A transaction that changed something bumps
 * repl_state.lsn inside itself, takes its changeset, COMMITs, and appends
 * {lsn, term, changeset} to an in-memory ring, all under one mutex, so the
 * ring's order is the commit order and a snapshot's repl_state row says
 * exactly which LSN it holds.
 *
 * Capture is lazy: until a standby first asks for a snapshot or the stream
 * (repl_capture_enable), transactions run without a session and do not
 * bump the LSN, so a lone scheduler pays one atomic load per transaction.
 * A standby that needs changes from before capture started gets "gone"
 * (410) and bootstraps from a snapshot, which is taken only after capture
 * is on.
 *
 * The standby side (scheduler/standby/) reads the role, term and the
 * primary hint through this header too; one replication log per process
 * (file-static state), any thread.
 */
#ifndef HF_REPL_H
#define HF_REPL_H

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

/* ---------- role and term (any thread) ---------- */

enum { REPL_PRIMARY = 0, REPL_STANDBY = 1, REPL_FENCED = 2 };

int         repl_role(void);
void        repl_set_role(int role);
/* "primary", "standby", "fenced". */
const char *repl_role_name(int role);
/* The term this process serves: repl_state.term read by repl_start (a
 * primary), or what the standby set with repl_set_term. */
int64_t     repl_term(void);
void        repl_set_term(int64_t t);
/* The last LSN committed (primary) or 0 before repl_start. */
int64_t     repl_lsn(void);
/* The cluster id (repl_state.cluster) into buf ("" before repl_start). */
void        repl_cluster(char *buf, size_t n);

/* A request carried X-Hyperfarm-Term: t. A PRIMARY that sees t greater
 * than its term becomes FENCED at once (hf_warn, event FENCED, metric);
 * other roles ignore it. */
void        repl_observe_term(int64_t t);

/* The standby's witness hook: the API calls it (repl_vote) for every
 * agent-token request on a non-primary, before its 503. holder: the agent
 * token's holder name; agent_id: the {id} of an /api/v1/agents/{id}/...
 * path, -1 for other paths; name: the "name" a registration's body claims
 * (NULL otherwise); lost_ms: X-Hyperfarm-Lost-Primary (0 when absent);
 * term: X-Hyperfarm-Term (-1 when absent). NULL hook: none. */
typedef void repl_vote_fn(const char *holder, int64_t agent_id, const char *name, int64_t lost_ms, int64_t term);
void        repl_set_vote_hook(repl_vote_fn *fn);
void        repl_vote(const char *holder, int64_t agent_id, const char *name, int64_t lost_ms, int64_t term);

/* The primary's URL that a standby's 503 bodies name (NULL: none). */
void        repl_set_primary_hint(const char *url);
/* Copy it into buf; RET 1 when there is one, 0 when not (buf = ""). */
int         repl_primary_hint(char *buf, size_t n);

/* ---------- the primary's log ---------- */

enum { REPL_SYNC = 0, REPL_ASYNC = 1 };
/* State of the primary's replication (GET /api/v1/replication "state"). */
enum { REPL_ST_NONE, REPL_ST_CATCHING_UP, REPL_ST_SYNC, REPL_ST_ASYNC, REPL_ST_DEGRADED };
const char *repl_state_name(int st);

typedef struct repl_config {
    int     mode;               /* REPL_SYNC (default) or REPL_ASYNC: --replication */
    int     standby_timeout_s;  /* --standby-timeout (5): a standby silent this long is lost */
    int64_t buffer_bytes;       /* --repl-buffer-mb << 20 (64 MiB): the ring */
} repl_config;

/* "sync" / "async" -> REPL_SYNC / REPL_ASYNC. RET 0 or HF_EINVAL. */
int  repl_mode_parse(const char *name, int *mode);

/* Called by the log on a state change that the operator must see: type
 * "REPLICATION_DEGRADED" or "FENCED", detail a sentence. Runs on the
 * thread that noticed, holding no replication lock; must not block long
 * and must not write through a repl_conn that is inside a transaction.
 * NULL: log only. */
typedef void repl_event_fn(void *ctx, const char *type, const char *detail);
void repl_set_event_hook(repl_event_fn *fn, void *ctx);

/* Start the log on the migrated database db (any connection: read once
 * for repl_state). Role becomes PRIMARY unless a role was already set.
 * RET 0, HF_EDB (no repl_state row) with err filled, HF_EINVAL (cfg). */
int  repl_start(sqlite3 *db, const repl_config *cfg, char *err, size_t errlen);
/* Wake and release every waiter, free the ring. Capture stays possible
 * (repl_conn_* keep working and append nothing). */
void repl_stop(void);

/* ---------- capture (repl.c), one repl_conn per writing connection ---------- */

typedef struct repl_conn repl_conn;

/* A capture context for the writing connection db (which outlives it).
 * NULL on OOM. repl_conn_free accepts NULL. */
repl_conn *repl_conn_new(sqlite3 *db);
void       repl_conn_free(repl_conn *c);

/* Right after the connection's BEGIN IMMEDIATE succeeded (a deferred
 * BEGIN could wait on SQLite's write lock while holding the log's mutex).
 * RET 0, or HF_ENOMEM / HF_EDB (the session could not start: the caller
 * rolls back and calls repl_conn_abort). */
int  repl_conn_begin(repl_conn *c);

/* Commit the open transaction: commit(arg) runs the connection's COMMIT
 * and returns 0 or HF_E*. When a session recorded changes: under the log's
 * mutex, repl_state.lsn += 1, the changeset is taken, commit(arg) runs
 * and, when it succeeded, {lsn, term, changeset} is appended to the ring.
 * A failed commit appends nothing and the LSN stays. The role is not
 * checked here: a fenced primary refuses writes at the API (503), and what
 * its own housekeeping still commits stays in a database that is moved
 * aside when it steps down. The session is gone after this call, whatever
 * it returned. */
int  repl_conn_commit(repl_conn *c, int (*commit)(void *arg), void *arg);

/* The transaction was rolled back (or never began): drop its session. */
void repl_conn_abort(repl_conn *c);

/* Metric rows logged by the writer itself instead of the session: the
 * heartbeats' metric INSERTs are most of what the core writes, and the
 * session would record each row's key at the INSERT and read the row back
 * at the changeset (about half again the INSERT's own cost). Before the
 * transaction's first write to metrics, repl_conn_metric_log asks for it:
 * RET 1 — the session leaves metrics alone in this transaction and every
 * row inserted there must be passed to repl_conn_metric_row (its changes
 * go into the frame as one more table section, an INSERT per row, exactly
 * as the session would write them); 0 — capture is off, the table's
 * layout is not the one the log writes, or the session already has
 * metrics in this transaction: insert as usual. A transaction that logs
 * metrics must not otherwise change that table (repl_conn_metric_session
 * says whether another write may: the purge asks it). */
typedef struct repl_metric_row {
    int64_t     seq, trial_id, attempt, step, time;
    const char *name;
    int         has_step, has_epoch;
    double      epoch, value;
} repl_metric_row;
int repl_conn_metric_log(repl_conn *c);
/* RET 0 or HF_ENOMEM (the transaction must then fail), HF_ESTATE (not asked). */
int repl_conn_metric_row(repl_conn *c, const repl_metric_row *r);
/* A write to metrics other than a logged INSERT is coming: RET 0 (the
 * session captures it), HF_ESTATE (this transaction logs metrics). */
int repl_conn_metric_session(repl_conn *c);

/* The same for a connection that writes outside the core (checkpoint
 * store, retention, webhooks): BEGIN IMMEDIATE then repl_conn_begin. RET 0
 * or HF_E* (nothing is open then). */
int  repl_txn_begin(repl_conn *c);
/* repl_conn_commit with the connection's own COMMIT; a failed commit is
 * rolled back. RET 0 or HF_E* (HF_ENOSPC for a full disk). */
int  repl_txn_commit(repl_conn *c);
/* ROLLBACK (if a transaction is open) and repl_conn_abort. */
void repl_txn_rollback(repl_conn *c);

/* The replacement of an autocommit write of one statement st (on c's
 * connection, no rows returned): BEGIN IMMEDIATE, step, repl_txn_commit.
 * RET SQLITE_DONE, or the extended SQLite code of the step (e.g.
 * SQLITE_CONSTRAINT_FOREIGNKEY), BEGIN or COMMIT that failed (rolled
 * back, st reset); repl_errmsg() then holds SQLite's message. */
int  repl_step1(repl_conn *c, sqlite3_stmt *st);
/* This thread's last repl_step1 failure message ("" when none). */
const char *repl_errmsg(void);

/* Writes that escaped the log (committed on a repl_conn's connection
 * outside repl_conn_commit while capture was on: a bug, logged). */
int64_t repl_escaped_total(void);
/* Metric rows committed through repl_conn_metric_row (/metrics). */
int64_t repl_metric_rows_logged(void);

/* Turn capture on (idempotent): from now on every transaction that begins
 * is recorded; returns once every transaction that began without a
 * session has ended, so a snapshot read after it holds all of them. */
void repl_capture_enable(void);
int  repl_capture_on(void);

/* ---------- the bootstrap snapshot and its thread (repl_snap.c) ---------- */

/* Turn capture on, then copy the database db_path with SQLite's online
 * backup (one read transaction) into a temp file beside it, unlinked once
 * open. RET 0 with *fd (read-only, at offset 0; the caller closes it),
 * *size, *lsn (its repl_state.lsn) and sha (its SHA-256, 64 hex), or
 * HF_ENOSPC / HF_EIO / HF_EDB with err. */
int  repl_snapshot(const char *db_path, int *fd, int64_t *size, int64_t *lsn, char sha[65], char *err, size_t errlen);

/* The service that takes them off the HTTP threads: repl_snapshot on the
 * thread "hf-snapshot" (started by the first submit), one copy at a time.
 * A request's handler submits a job, suspends its connection, arms the
 * job; done(arg) is called once, from the thread (or from repl_snap_arm
 * or repl_snap_stop when stopping), and must only resume the connection;
 * the handler, called again, takes the result and releases the job. A
 * job has two owners: the service until done has returned, the caller
 * until repl_snap_release. */
#define REPL_SNAP_POLL_MS 100   /* a running copy checks its client's socket this often */
typedef struct repl_snap_job repl_snap_job;
typedef void repl_snap_done_fn(void *arg);

/* Take submits (the API's start). */
void repl_snap_start(void);
/* Refuse submits from now on (HF_ESTATE); the running copy stops at its
 * next slice and is answered HF_ESTATE, as is an armed job not yet begun;
 * join the thread. Idempotent. */
void repl_snap_stop(void);
/* Queue a copy of db_path for the client who (an address, for the log;
 * copied), whose socket client_fd is polled for a hang-up (-1: none).
 * OUT *out: the job (the caller's reference: repl_snap_release);
 *     *retry_s on HF_ETOOBIG: seconds until the running copy should end
 *     (1..60, from the last copy's duration).
 * RET 0; HF_ETOOBIG (a copy is queued or running: one at a time);
 *     HF_ESTATE (not started, or stopping); HF_ENOMEM; HF_EINVAL (path).
 *     The job runs only once armed. */
int  repl_snap_submit(const char *db_path, const char *who, int client_fd, repl_snap_done_fn *done, void *arg,
                      repl_snap_job **out, int *retry_s);
/* The caller is ready for done (its connection is suspended). */
void repl_snap_arm(repl_snap_job *j);
/* After done: repl_snapshot's result; *fd is handed over (the caller
 * closes it). RET 0, or the copy's HF_E* with err (HF_ESTATE: stopping;
 * HF_ECONN: the client hung up). */
int  repl_snap_result(repl_snap_job *j, int *fd, int64_t *size, int64_t *lsn, char sha[65], char *err, size_t errlen);
/* The caller is done with j (NULL is fine): a copy not yet done is
 * cancelled at its next slice, its file closed; a job never armed frees
 * the slot at once and done is never called. */
void repl_snap_release(repl_snap_job *j);

/* ---------- the stream and acknowledgements (repl_ring.c) ---------- */

#define REPL_FRAME_HDR     24               /* u64 lsn, u64 term, u32 flags, u32 len; big-endian */
#define REPL_STREAM_MAX    (8u << 20)       /* bytes of one stream answer (at least one frame) */

/* Write a frame header for (lsn, term, flags 0, len) into hdr. */
void repl_frame_header(uint8_t hdr[REPL_FRAME_HDR], int64_t lsn, int64_t term, uint32_t len);

/* The frames after LSN after, consecutive, at most max bytes (at least one
 * frame whatever its size), waiting up to wait_ms for the first. RET the
 * number of frames (>0) with *buf (malloc'd, caller frees) of *len bytes;
 * 0 when none came in wait_ms; HF_ENOTFOUND when after+1 is older than the
 * ring holds (410: bootstrap again); HF_EINVAL when after > repl_lsn()
 * (409 "ahead"); HF_ESTATE after repl_stop; HF_ENOMEM. */
int  repl_stream_read(int64_t after, int wait_ms, size_t max, uint8_t **buf, size_t *len);

/* A stream request arrived from addr (the standby's address as this
 * primary sees it; NULL: "") with name (what the standby calls itself,
 * its host and port; NULL: "", an older standby): the standby holds every
 * LSN <= acked. Marks it connected (now), moves the state and wakes the
 * waiters, and records its ack in the list of standbys
 * (repl_status.standbys), one entry per address and name. */
void repl_standby_ack(int64_t acked, const char *addr, const char *name);

/* The wait before a write's answer: in state sync, block until the
 * standby acknowledged lsn, or until the state degrades (the standby is
 * silent for --standby-timeout, or this wait lasted that long). Never call
 * it holding the core's lock. RET 0, or HF_ETIMEOUT when the wait ended by
 * degrading (the write is durable here, not on the standby). */
int  repl_wait(int64_t lsn);

/* The group flush (docs/scheduler.md, "Durability"): with it on, the
 * writer's COMMIT only appends to the WAL (synchronous=NORMAL) and the
 * store's "hf-flush" thread fsyncs the WAL after it, once for every commit
 * made meanwhile, off the core's lock; an answer that acknowledges a
 * write waits (parked, below) until the flush covers the writer's commits
 * made before it. The store numbers the commits (repl_note_commit, under
 * the core's lock) and reports each flush (repl_flushed). A failed flush
 * is sticky: nothing is acknowledged any more (503) until a restart, as a
 * failed fsync may have dropped the pages it was to write. */
void     repl_flush_enable(int on);
int      repl_flush_on(void);
uint64_t repl_note_commit(void);              /* RET the commit's number */
uint64_t repl_commit_seq(void);               /* the last commit's number */
void     repl_flushed(uint64_t seq, int failed);
/* Block until commit seq is durable. RET 0, or HF_EIO (the flush failed,
 * or the flusher stopped before covering it). */
int      repl_flush_wait(uint64_t seq);
int      repl_flush_failed(void);

/* A parked HTTP request (libmicrohttpd suspend/resume, so a waiter holds
 * no thread): a write's answer waiting for the standby's ack and the
 * group flush (ACK), or a
 * stream long-poll waiting for a frame (STREAM). The caller owns it (in its
 * request context) and sets kind, lsn, wake, arg; wake(arg) runs once,
 * under the log's ring lock (it must only resume the request), when:
 *   ACK     the standby acknowledged lsn, or the state left sync (a
 *           waiter of --standby-timeout degrades it), and the flush
 *           covers seq (or failed: w->failed), or repl_stop (w->failed
 *           when seq was not flushed yet);
 *   STREAM  a frame after lsn was appended, wait_ms passed, or repl_stop.
 * The timer thread "hf-repl" (started at the first park) expires them. */
enum { REPL_W_ACK = 1, REPL_W_STREAM = 2 };
typedef struct repl_waiter {
    int      kind;
    int64_t  lsn;
    uint64_t seq;                  /* ACK: the writer's commit to be flushed too (repl_commit_seq; 0 none) */
    int      failed;               /* ACK, set at the wake: seq is not durable (the flush failed, or repl_stop) */
    int64_t  wait_ms;              /* STREAM: how long at most */
    void   (*wake)(void *arg);
    void    *arg;
    /* set by repl_park */
    int      parked;
    int64_t  t0_us, deadline_ms;
    struct repl_waiter *prev, *next;
} repl_waiter;

/* Park w unless there is nothing to wait for; park(arg) is called under the
 * ring lock right after linking (suspend the request there: a wake can
 * then never come before the suspend). RET 1 parked, 0 not (answer now). */
int  repl_park(repl_waiter *w, void (*park)(void *arg));
/* Unlink w if it is still parked (its connection closed). */
void repl_unpark(repl_waiter *w);

/* One standby as the primary saw it (GET /api/v1/replication "peers"):
 * one entry per address and name that asked for the stream, the newest
 * REPL_STANDBYS_MAX, each kept REPL_STANDBY_FORGET_S after its last
 * request. The log's own state follows whichever asked last; two
 * standbys on one address are two entries when they send their names
 * (an older standby sends none: two of those on one address are one). */
#define REPL_STANDBYS_MAX      8
#define REPL_STANDBY_NAME_MAX  63   /* a standby's name= (api_h_repl.c checks it) */
#define REPL_STANDBY_FORGET_S  3600
typedef struct repl_standby_info {
    char        address[64];
    char        name[REPL_STANDBY_NAME_MAX + 1];   /* its stream requests' name= ("": none, an older standby) */
    int64_t     acked_lsn;
    int64_t     last_seen_ms_ago;
    const char *state;   /* "lost" (silent for --standby-timeout), "catching_up" (its ack below the LSN
                          * current when it (re)connected), else "sync" or "async" (the mode) */
} repl_standby_info;

typedef struct repl_status {
    int     role, mode, state;
    int64_t term, lsn;
    char    cluster[40];
    int     capture;             /* capture on */
    int     standby_seen;        /* a standby ever connected */
    int     connected;
    int64_t acked_lsn, lag_lsn, lag_ms, last_seen_ms_ago;
    int64_t ring_first, ring_frames, ring_bytes;
    int64_t degraded_total, fenced_total, gone_total;
    int64_t waits, wait_p99_us, wait_max_us;   /* commit waits (recent window) */
    int     flush_on, flush_failed;              /* the group flush */
    int64_t flushes, flush_commits;              /* its fsyncs, and the commits they covered */
    int     nstandbys;                           /* standbys[0..nstandbys), the last seen first */
    repl_standby_info standbys[REPL_STANDBYS_MAX];
} repl_status;
void repl_status_get(repl_status *st);

#endif
