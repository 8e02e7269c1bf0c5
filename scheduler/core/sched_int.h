/*
 * sched_int.h — the scheduler core's internal header: the in-memory model
 * (experiments, trials, ranks, agents, struct sched) and the functions the
 * core's files call in each other. Only scheduler/core/sched_*.c and
 * scheduler/core/dispatch.c include it (and unit tests of the core's
 * internals, e.g. tests/unit/test_scheduler_states.c); everything else
 * uses sched.h.
 *
 * The core is split by record and by activity (docs/scheduler.md, "Modules"):
 *
 *   sched_model.c    the model: lookups by id, the live and per-agent
 *                    indexes, building and freeing records, state names,
 *                    the core lock and its owner
 *   sched_feed.c     what the searchers and median rules are told: trial
 *                    ends, reports of non-objective metrics, metric sense
 *   sched_rows.c     the row mapping: every bind and column read between
 *                    the model and store.c's prepared statements
 *   sched_check.c    the invariants below, checked (abort mode)
 *   sched_load.c     load from the store at start and after a failed
 *                    transaction, the searchers' replay; sched_new/free
 *   sched_txn.c      transactions, group commit of heartbeats, events and
 *                    doorbells published after the commit
 *   sched_views.c    JSON views and the read-only public calls
 *   sched_purge.c    the purge of deleted experiments' rows, a bounded
 *                    transaction per tick (store/purge.h)
 *   sched_state.c    the trial/experiment state machine: the tables of
 *                    legal transitions, state changes, kills, rank exits,
 *                    restarts
 *   sched_report.c   objective and metric reports (may STOP a trial)
 *   sched_token.c    the agent token binding, AGENT_REFUSED events
 *   sched_ckpt.c     which stored checkpoint a trial starts from; who may
 *                    store one
 *   sched_proto.c    the agent protocol: validation of registration and
 *                    heartbeat bodies, the items' trial/rank, assignments
 *   dispatch.c       the dispatch pass: which experiment, which trial,
 *                    the searcher's next trial, gang placement, backfill
 *   sched_register.c registration; stale processes of an agent
 *   sched_heartbeat.c the heartbeat's steps and its reply
 *   sched_tick.c     the cron tick: heartbeat scaling, LOST agents,
 *                    assignment timeouts
 *   sched_pending.c  the doorbell hook and the long-poll's pending query
 *   sched_actions.c  submit, pause/resume/cancel, extend, kill, patch
 *   sched_pareto.c   the Pareto front of a multi-objective experiment
 *
 * Layers (no circles, docs/scheduler.md "Modules"): a file calls only
 * functions defined in files of a lower layer (or its own):
 *
 *   0  sched_model.c, sched_feed.c         (nothing of the core)
 *   1  sched_rows.c, sched_check.c         -> 0
 *   2  sched_load.c                        -> 0-1
 *   3  sched_txn.c                         -> 0-2 (reload after a failure)
 *   4  sched_views.c                       -> 0
 *      sched_purge.c                       -> 0-3
 *   5  sched_state.c                       -> 0-4
 *   6  sched_report.c, sched_token.c       -> 0-5
 *   7  sched_ckpt.c                        -> 0-6
 *   8  sched_proto.c                       -> 0-7
 *   9  dispatch.c                          -> 0-8
 *  10  sched_register.c                    -> 0-9
 *  11  sched_heartbeat.c, sched_tick.c, sched_pending.c, sched_actions.c,
 *      sched_pareto.c                      -> 0-10 (the public calls)
 *
 * Nothing lower calls back up: where a low layer once did (the model
 * loading itself in sched_new, the loader telling the searchers what the
 * state machine tells them, the views asking the state machine whether a
 * metric is minimized, the checkpoint rules asking the agents' file about
 * tokens) the function moved down to the layer both use.
 *
 * Invariants (all under s->lock; asserted by sched_check.c at the end of
 * every transaction in abort mode, hf_assert.h):
 *   - s->exps, s->trials and s->agents are ordered by id (ids only grow:
 *     new records are appended), so lookups are binary searches.
 *   - a trial is in s->live (at t->live_idx) and in the `on` list of each
 *     agent holding one of its ranks exactly while t->ranks != NULL.
 *   - x->counts[st] is the number of x's trials in state st; every state
 *     change goes through trial_set_state (sched_state.c), which refuses a
 *     transition its table does not list.
 *   - every change of a record is written to its row in the current
 *     transaction (sched_rows.c) before the transaction ends; s->txn_rc
 *     holds the first failure and later statements are skipped.
 *
 * The lock: taken and released only through sched_lock / sched_unlock,
 * which record the owning thread; every function declared below that
 * changes the model or the store runs under it, and those that must
 * (transactions, state changes, reports, the model's indexes) begin with
 * HF_ASSERT(sched_lock_held(s)). Public calls (sched.h) take it.
 */
#ifndef HF_SCHED_INT_H
#define HF_SCHED_INT_H

#include "scheduler/core/experiment.h"
#include "scheduler/core/placement.h"
#include "scheduler/core/sched.h"
#include "scheduler/search/search.h"
#include "scheduler/store/purge.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Trial states: indexes of sched_trial_state_names. */
enum { T_QUEUED, T_ASSIGNED, T_RUNNING, T_COMPLETED, T_FAILED, T_STOPPED, T_CANCELED, T_PAUSED, T__N };
/* Experiment states: indexes of exp_state_names. */
enum { E_ACTIVE, E_PAUSED, E_COMPLETED, E_CANCELED, E_FAILED, E__N };
extern const char *const exp_state_names[E__N];

/* Rank state in allocations.started. */
enum { R_NEW = 0, R_SENT = 1, R_STARTED = 2 };

#define TRIAL_SIG_N  24       /* words of a trial view's signature (sched_views.c) */
#define SCHED_REPORT_GAP_MIN_MS 20   /* report_gap_ms at a small farm (the agent's event gap) */

typedef struct trial_rank {
    int64_t    agent_id;
    int        rank, local_rank;
    int        slots;
    int        ngpu;
    int        gpu[PLACE_MAX_GPUS];
    int        st;            /* R_NEW | R_SENT | R_STARTED */
    int        exited;
    int        exit_code;
    int64_t    sent_mono;     /* when the assignment went out */
    int64_t    sent_batch;    /* heartbeat batch whose reply carried it (0 = none) */
    int        pushed;        /* R_SENT by a long-poll reply (sched_pending.c), row not written */
    int64_t    kill_sent_mono;
} trial_rank;

typedef struct experiment experiment;

typedef struct trial {
    int64_t     id, idx;
    experiment *exp;
    int         state;
    json_t     *hparams;      /* owned, immutable */
    int64_t     budget, parent, attempt, restarts;
    int64_t     agent_id;     /* rank 0's agent, 0 = none */
    int         port;
    int         has_exit, exit_code;
    int         has_obj;
    double      obj;          /* best raw objective */
    json_t     *latest, *best;  /* owned objects, mutated under the lock */
    int         dirty_metrics;  /* latest/best changed in this transaction */
    int         kill_state;   /* -1 = no kill pending */
    char        kill_reason[32];
    int64_t     fail_agent;
    int64_t     fail_streak;
    int64_t     created_at, started_at, ended_at;
    int64_t     ready_mono;   /* became QUEUED (dispatch latency) */
    int64_t     nreports;     /* objective reports seen (x axis fallback) */
    int64_t     mver;         /* bumped whenever latest/best change */
    char       *view;         /* cached trial_view() as compact JSON, NULL = none */
    size_t      view_len;
    int64_t     view_sig[TRIAL_SIG_N];  /* signature of the trial when view was built */
    int64_t     log_lines, logs_dropped;
    char       *notes;        /* Markdown (PATCH /trials/{id}), NULL = none; not in the cached view */
    int         nranks;
    trial_rank *ranks;        /* current attempt's workers, NULL when not placed */
    size_t      live_idx;     /* position in sched.live while placed */
} trial;

struct experiment {
    int64_t       id;
    char         *name;
    int           state;
    json_t       *config;     /* owned */
    exp_spec      spec;       /* borrows from config */
    searcher     *srch;
    search_median *med;
    int64_t       max_trials;
    int           searcher_done;
    int           archived;   /* hidden from the default list, checkpoints dropped (ckretain.h) */
    int64_t       created_at, ended_at;
    int64_t       counts[T__N];
    int64_t       slots_in_use;
    int64_t       best_trial;
    double        best_norm;  /* higher is better */
    double        best_raw;
    trial       **trials;     /* creation order */
    size_t        ntrials, cap;
    int64_t       pass;       /* dispatch pass in which it was found blocked */
    int           waits_report;  /* searcher had nothing to run: a result may change that */
    /* Workflow (docs/scheduler.md "Workflow"; columns of 0008_workflow). */
    char         *description;   /* Markdown, NULL = none (editable) */
    json_t       *tags;          /* owned array of strings (editable) */
    int64_t       parent_id;     /* forked from this experiment, 0 = none */
    char         *submitted_by;  /* user name of the submitting token, NULL = unknown */
    json_t       *warm;          /* owned warm-start history snapshot (warmstart.h), NULL = none */
    int64_t       context_size;  /* bytes of spec.context's object; 0 = not looked up yet */
    /* End states (docs/scheduler.md "End states"; 0013_end_reason). */
    char          end_reason[256];  /* why it ended, "" while ACTIVE or PAUSED */
    int64_t       fail_run;      /* trials that finally FAILED in a row (trial.max_failures) */
    char          last_fail[160];/* the last one's detail (in memory only) */
};

typedef struct agent {
    int64_t     id;
    char       *name, *host, *version;
    json_t     *gpus;         /* owned */
    int         alive;
    int64_t     last_hb_mono, last_hb_wall, registered_at;
    char        hb_instance[65];   /* agent process run of the last committed batch */
    int64_t     hb_batch;          /* its number */
    int         stale_slots;       /* slots held by processes of attempts it must kill (in pa.slots_used) */
    trial     **on;  size_t non, con;  /* placed trials with a rank here (subset of sched.live) */
    place_agent pa;
    json_t     *cached;       /* owned: the object hashes its cache holds (as last reported), or NULL */
    /* The holder name of the agent token it registered with (agents.holder,
     * schema 0011; "" = none: no token file). Read from its row on first
     * use (holder_known 0), kept here after. */
    char        holder[65];
    int         holder_known;
} agent;

/* Group commit bounds: at most GRP_MAX heartbeats or GRP_MS of work share
 * one COMMIT; a deferred heartbeat commits itself after GRP_WAIT_MS. */
#define GRP_MAX     64
#define GRP_MS      10
#define GRP_WAIT_MS 20
#define GRP_RING    1024   /* outcomes of the last GRP_RING transactions */
#define GRP_FAILS   256
#define SCHED_POSTED_MAX 32   /* operator events waiting for the tick (sched_post_event) */    /* and the last GRP_FAILS failed ones, for waiters older than that */

struct sched {
    pthread_mutex_t lock;     /* the core lock: sched_lock / sched_unlock only */
    _Atomic(char *) lock_owner;  /* the holder's thread token (sched_model.c), NULL = free */
    sched_config    cfg;
    store          *st;
    events_hub     *ev;
    experiment    **exps;  size_t nexps, cexps;
    trial         **trials; size_t ntrials, ctrials;
    trial         **live;   size_t nlive, clive;    /* placed trials (ranks != NULL) */
    agent         **agents; size_t nagents, cagents;
    int             txn_rc;
    json_t         *pending;  /* [[type, data]...] published after commit */
    int64_t         pass;
    int64_t         next_port;
    /* Doorbell: agents that got an assignment or a kill in the current
     * transaction, rung after it commits (sched_set_doorbell). */
    void          (*bell)(void *ctx, int64_t agent_id);
    void           *bell_ctx;
    int64_t        *rings;  size_t nrings, crings;
    /* Incremental work: the dispatch pass runs only after something that
     * can change its outcome (dispatch_dirty), at least every second from
     * the tick; trials whose latest/best changed in this transaction. */
    int             dispatch_dirty;
    int64_t         last_pass_mono;
    int64_t         pass_free;      /* free slots of alive agents in this pass, -1 = recount */
    /* Within one pass capacities only fall (placements, backfill holds;
     * nothing is released or registered under a pass), so: every agent
     * before s->agents[pass_scan] is dead or full, and pass_fit, the first
     * agent with room for a gang of pass_fit_w workers of pass_fit_s
     * slots when the last scan looked, stays the first while it has room
     * for one (dispatch.c). Both are reset at the start of each pass. */
    size_t          pass_scan;
    struct agent   *pass_fit;
    int             pass_fit_w, pass_fit_s;
    atomic_int      lock_waiters;   /* threads blocked in sched_lock (sched_dispatch_more yields to them) */
    /* A pass that stopped at DISPATCH_CHUNK (dispatch_more) is continued
     * by the thread that kick wakes (cron.c), not by a request's thread:
     * libmicrohttpd pins each connection to one thread, and a burst placed
     * there would stall every agent connection pinned beside it. */
    int             dispatch_more;
    void          (*kick)(void *ctx);
    void           *kick_ctx;
    trial         **dirty;  size_t ndirty, cdirty;
    int64_t         hb_fast_eff, hb_idle_eff;   /* intervals scaled to the number of agents */
    int64_t         hb_report_gap;              /* least gap of report-triggered heartbeats (same scaling) */
    /* Group commit of heartbeats (see txn_end_grouped): a heartbeat that
     * finds others queued for the lock leaves its transaction open for them
     * and waits for the commit that ends its generation before it answers. */
    atomic_int      hb_queue;       /* heartbeats waiting for the core lock */
    int             grp_open;       /* the open transaction holds deferred heartbeats */
    int             grp_n;          /* how many */
    int64_t         grp_t0;         /* mono ms of the first */
    uint64_t        gen;            /* transactions ended so far; the open one is number gen */
    int             gen_rc[GRP_RING];     /* outcome of transaction g at g % GRP_RING */
    uint64_t        fail_gen[GRP_FAILS];  /* the last GRP_FAILS failed transactions' numbers */
    int             fail_rc[GRP_FAILS];   /* ... and their errors, at nfails % GRP_FAILS */
    uint64_t        nfails;               /* failed transactions so far */
    pthread_cond_t  grp_cv;         /* broadcast when a transaction ends */
    /* Who the current transaction acts for (a user name from the token
     * file), written into every events row it adds; "" = the scheduler
     * itself. Set by actor_set at the start of a user's request, under the
     * lock, and cleared before the lock is released. */
    char            actor[65];
    /* Events posted from outside the core (sched_post_event: the
     * replication log's operator events), under post_mu, never the core
     * lock; the tick writes them as events rows. At most SCHED_POSTED_MAX
     * wait; beyond that the oldest are dropped and counted. */
    pthread_mutex_t post_mu;
    struct sched_posted { int64_t time; char type[32]; char detail[224]; } posted[SCHED_POSTED_MAX];
    int             nposted;
    uint64_t        posted_dropped;
    /* Deleted experiments whose rows are still being removed (sched_purge.c;
     * docs/scheduler.md "Deleting an experiment"): how many wait in
     * purge_queue (none is in the model), where the purge of the first
     * stands, when a batch may run again after a failed one, the first
     * batch's time and the rows deleted so far (for the log line at its
     * end), and the hook that frees the checkpoint objects of the rows a
     * batch deleted (sched_set_release). */
    int64_t         npurge;
    purge_cursor    purge_cur;
    int64_t         purge_retry_mono;
    int64_t         purge_t0_mono, purge_rows;
    void          (*release)(void *ctx, const char (*hashes)[SCHED_HASH_LEN + 1], size_t n);
    void           *release_ctx;
};

/* ---------- small predicates ---------- */

static inline int trial_state_terminal(int st)
{
    return st == T_COMPLETED || st == T_FAILED || st == T_STOPPED || st == T_CANCELED;
}
static inline int trial_state_active(int st) { return st == T_QUEUED || st == T_ASSIGNED || st == T_RUNNING; }
static inline int64_t exp_active_count(const experiment *x)
{
    return x->counts[T_QUEUED] + x->counts[T_ASSIGNED] + x->counts[T_RUNNING];
}
/* An objective value oriented so that higher is better. */
static inline double exp_norm(const experiment *x, double v) { return x->spec.goal_max ? v : -v; }

/* The user the current transaction acts for (s->actor); NULL or "" = none.
 * Every public call made for a user (submit, pause, resume, cancel, kill,
 * extend, fork, patch, and any later one such as delete) sets it after
 * taking the lock and clears it (actor_set(s, NULL)) before unlocking. */
static inline void actor_set(sched *s, const char *user)
{
    size_t n = user ? strlen(user) : 0;
    if (n >= sizeof s->actor) n = sizeof s->actor - 1;
    if (n) memcpy(s->actor, user, n);
    s->actor[n] = 0;
}

/* ---------- sched_model.c ---------- */

/* Grow *arr (elements of elem bytes) to hold need. RET 0 or HF_ENOMEM. */
int sched_grow(void **arr, size_t *cap, size_t need, size_t elem);
trial *trial_find(sched *s, int64_t id);
experiment *exp_find(sched *s, int64_t id);
agent *agent_find(sched *s, int64_t id);
agent *agent_by_name(sched *s, const char *name);
/* A malloc'ed copy of the n trials of v (*out_n entries; NULL on ENOMEM),
 * for loops whose body may end trials (and so change v). */
trial **trials_copy(trial *const *v, size_t n, size_t *out_n);
/* s->live: placed trials; live_snapshot = trials_copy of it. */
void live_add(sched *s, trial *t);
void live_del(sched *s, trial *t);
trial **live_snapshot(sched *s, size_t *n);
/* The per-agent index of placed trials (agent.on), from t->ranks. */
void agent_link(sched *s, trial *t);
void agent_unlink(sched *s, trial *t);
/* A fresh trial of x with room reserved in s->trials and x->trials (not
 * listed yet: trial_index does that once it has its id). NULL on ENOMEM. */
trial *trial_alloc(sched *s, experiment *x);
void trial_index(sched *s, experiment *x, trial *t);
void trial_free(trial *t);
/* Drop x and its trials from the model and free them (after its rows were
 * deleted and committed). None of its trials may be placed (ranks NULL). */
void exp_forget(sched *s, experiment *x);
void agent_free(agent *a);
/* An experiment's runtime (spec, searcher, median rule) from its config
 * (stolen). NULL with e set (invalid config) or e empty (ENOMEM). */
experiment *exp_build(json_t *config, hf_jerr *e);
void exp_free(experiment *x);
void agent_set_gpus(agent *a, json_t *gpus /* stolen; NULL = none */);
/* Free every record (the arrays stay allocated for a reload). */
void sched_unload(sched *s);
/* The core lock with its owner recorded: sched_lock_held(s) is 1 only in
 * the thread that holds it. sched_lock_wait waits on cv (s->lock
 * released meanwhile, owner cleared and restored): pthread_cond_timedwait's
 * result. */
void sched_lock(sched *s);
void sched_unlock(sched *s);
int  sched_lock_held(sched *s);
int  sched_lock_wait(sched *s, pthread_cond_t *cv, const struct timespec *deadline);

/* ---------- sched_feed.c ---------- */

/* Tell t's searcher and median rule that t ended in st. */
void trial_done_notify(trial *t, int st);
/* Feed a report of metric name to x's searcher's on_metric for every
 * slot >= 1 it fills (another objective, sign-normalised, a constraint, or
 * the cost metric, raw, as SEARCH_COST_SLOT). */
void exp_feed_slots(experiment *x, int64_t trial_id, const char *name, double x_pos, double v);
/* Is metric name of x minimized (its "best" the lowest)? An objective by
 * its goal, any other by its name (docs/guide.md "The objective"). */
int  metric_minimized(const experiment *x, const char *name);

/* ---------- sched_check.c ---------- */

/* HF_ASSERT every invariant listed at the top of this file (abort mode
 * only; a no-op in release). Under s->lock. */
void sched_check_invariants(sched *s);

/* ---------- sched_txn.c ---------- */

/* Start a transaction (committing an open heartbeat group first). */
void txn_begin(sched *s);
/* A heartbeat's transaction: continue the open group, else begin one. */
void txn_join(sched *s);
/* Commit, or roll back and rebuild memory from the store. RET 0 or HF_E*. */
int txn_end(sched *s);
/* End a heartbeat's transaction, possibly sharing a later COMMIT with the
 * heartbeats queued behind it; memory may be reloaded meanwhile, so the
 * caller holds no record pointer across it. RET 0 or HF_E*. */
int txn_end_grouped(sched *s);
/* Drop a transaction that a validation error ended (nothing to publish). */
void txn_abort(sched *s);
/* End a transaction that changed rows the model does not hold (the purge
 * of deleted experiments): commit, or on failure roll back without the
 * reload txn_end does (memory holds nothing of those rows). RET 0 or HF_E*. */
int txn_end_rows(sched *s);
/* Queue an SSE event (data stolen) published after the commit. */
void txn_emit(sched *s, const char *type, json_t *data);
/* Has the events hub a subscriber (would txn_emit publish)? A hot caller
 * asks first and builds no view nobody reads (a pass creates thousands). */
int  txn_watched(const sched *s);
/* Ring agent_id's doorbell after the commit / not (its reply carries all). */
void txn_ring_note(sched *s, int64_t agent_id);
void txn_ring_forget(sched *s, int64_t agent_id);

/* ---------- sched_rows.c ---------- */

/* Writes in the current transaction; a failure is kept in s->txn_rc. */
void row_event(sched *s, int64_t exp_id, int64_t trial_id, const char *type, const char *detail);
void row_event_at(sched *s, int64_t time_ms, int64_t exp_id, int64_t trial_id, const char *type, const char *detail);
/* RET the new experiment's id, 0 when the insert failed (s->txn_rc set). */
int64_t row_exp_insert(sched *s, const experiment *x, const char *config_text);
void row_exp_update(sched *s, const experiment *x);
/* Queue experiment id for the purge of its rows (purge_queue, schema
 * 0016; store/purge.h), after keeping the largest experiment and trial
 * ids in id_floor (schema 0010: ids are never handed out again). */
void row_exp_purge_queue(sched *s, int64_t id);
int64_t row_trial_insert(sched *s, const trial *t);
void row_trial_update(sched *s, const trial *t);
/* Description and tags of x; notes of t (0008_workflow). */
void row_exp_meta(sched *s, const experiment *x);
void row_trial_notes(sched *s, const trial *t);
/* Objective, latest and best of t; clears t->dirty_metrics. */
void row_trial_metrics(sched *s, trial *t);
void row_alloc_insert(sched *s, const trial *t, const trial_rank *tr);
void row_alloc_update(sched *s, const trial *t, const trial_rank *tr);
void row_alloc_release(sched *s, const trial *t);
/* The agents row: registration (gpus_json NULL = "[]"; insert RET its id
 * or 0), state and heartbeat time, the last committed heartbeat batch. */
int64_t row_agent_insert(sched *s, const char *name, const char *host, int64_t slots, const char *gpus_json,
                         const char *version, int64_t now);
void row_agent_update(sched *s, int64_t id, const char *host, int64_t slots, const char *gpus_json,
                      const char *version, int64_t now);
void row_agent_state(sched *s, int64_t id, const char *state, int64_t last_heartbeat);
void row_agent_batch(sched *s, int64_t id, const char *instance, int64_t batch);
/* One metric point, log line or checkpoint of t's current attempt; step,
 * epoch NULL when absent (JSON numbers). */
void row_metric_insert(sched *s, const trial *t, const char *name, const json_t *step, const json_t *epoch,
                       double value, int64_t time);
void row_log_insert(sched *s, const trial *t, const char *stream, const char *line, size_t len, int64_t time);
void row_ckpt_insert(sched *s, const trial *t, const char *path, const json_t *step, int64_t time);

/* Reads, for sched_load.c: each table's stored rows in id order, through
 * store.c's ST_LOAD_* statements. row_scan gives the statement (reset);
 * row_*_next decodes the next row (RET 1) or ends the scan (RET 0). */
enum row_table { ROWS_EXPERIMENTS, ROWS_AGENTS, ROWS_TRIALS, ROWS_ALLOCATIONS };
sqlite3_stmt *row_scan(sched *s, enum row_table table);
/* The experiment is built from its stored config (exp_build): *x = NULL
 * with e set when that config is no longer valid (or e empty: ENOMEM). */
int row_exp_next(sqlite3_stmt *q, experiment **x, int64_t *id, hf_jerr *e);
/* *a: a new agent (NULL on ENOMEM), given a grace period from now_mono. */
int row_agent_next(sqlite3_stmt *q, agent **a, int64_t now_mono);
/* row_trial_next reads the experiment id; row_trial_read the rest into t. */
int row_trial_next(sqlite3_stmt *q, int64_t *exp_id);
void row_trial_read(sqlite3_stmt *q, trial *t);
typedef struct alloc_row {
    int64_t trial_id, attempt, agent_id;
    int     rank, slots, started, exited, exit_code;
    int     ngpu, gpu[PLACE_MAX_GPUS];
} alloc_row;
int row_alloc_next(sqlite3_stmt *q, alloc_row *r);
/* The objective reports of experiment x in arrival order: trial id, step
 * and epoch (has_* 0 when NULL) and the raw value; with several
 * objectives, constraints or a cost metric, the reports of each of those
 * metrics, named. */
typedef struct report_row {
    int64_t trial_id, step;
    int     has_step, has_epoch;
    double  epoch, value;
    const char *name;     /* the metric (valid until the next step); NULL: the objective */
} report_row;
sqlite3_stmt *row_report_scan(sched *s, const experiment *x);
int row_report_next(sqlite3_stmt *q, report_row *r);
/* Reset a scan's statement (releases its read snapshot). */
void row_scan_end(sqlite3_stmt *q);

/* ---------- sched_load.c ---------- */

/* Load every record from the store and replay the searchers. RET 0 or
 * HF_E* with a message in err (the records loaded so far stay; the caller
 * unloads). */
int sched_load(sched *s, char *err, size_t errlen);
/* Rebuild x's searcher and median rule for its current max_trials and
 * replay its history into them (after /extend). RET 0 or HF_ENOMEM. */
int sched_searcher_rebuild(sched *s, experiment *x);

/* ---------- sched_purge.c ---------- */

/* One bounded batch of the purge of deleted experiments (store/purge.h),
 * in its own transaction (txn_end_rows), when any wait: called by the
 * tick WITHOUT the core lock, which it takes for the batch alone; the
 * checkpoint objects of the rows the batch deleted are released after the
 * commit is durable, the lock released (sched_set_release). */
void exp_purge_step(sched *s);

/* ---------- sched_state.c ---------- */

/* Is from -> to a legal trial / experiment transition (the tables of
 * docs/scheduler.md "State machine")? */
int trial_transition_ok(int from, int to);
int exp_transition_ok(int from, int to);
/* Write x's row (state, max_trials, searcher_done) and emit its summary. */
void exp_save(sched *s, experiment *x);
/* Every experiment state change. Same state: a no-op (RET 0). A
 * transition exp_transition_ok refuses: HF_ESTATE, nothing changed (and an
 * HF_ASSERT failure). */
int exp_set_state(sched *s, experiment *x, int st, const char *detail);
/* The search finished: COMPLETED, or FAILED when every ended trial failed. */
void exp_search_finished(sched *s, experiment *x);
static inline int exp_state_ended(int st) { return st == E_COMPLETED || st == E_CANCELED || st == E_FAILED; }
/* Every trial state change: memory, trials row, events row, SSE. RET 0, or
 * HF_ESTATE (nothing changed; an HF_ASSERT failure) when st is not a legal
 * next state (trial_transition_ok; the same state is not). */
int trial_set_state(sched *s, trial *t, int st, const char *detail);
/* Ask for t to end in target (STOPPED, CANCELED, PAUSED, FAILED). */
void trial_request_kill(sched *s, trial *t, int target, const char *reason);
/* One rank ended (exit, start failure, lost agent). */
void rank_exited(sched *s, trial *t, trial_rank *r, int code, const char *why);
/* Is tr a holder rank of an mpirun trial whose rank 0 still runs? */
int trial_holder_waits(const trial *t, const trial_rank *tr);

/* ---------- sched_report.c ---------- */

/* Take one reported metric value into latest/best, the objective, the
 * experiment's best, and the searcher/median decision (may STOP t). */
void trial_report(sched *s, trial *t, const char *name, double v, double x_pos);

/* ---------- sched_views.c ---------- */

json_t *exp_summary(const experiment *x);
json_t *trial_view(sched *s, const trial *t);
json_t *agent_view(sched *s, const agent *a);

/* ---------- sched_proto.c ---------- */

/* A validated heartbeat body: its arrays (borrowed from the body; NULL when
 * absent) and the agent process's batch number (instance NULL = none). */
typedef struct hb_items {
    json_t     *running, *events, *metrics, *logs;
    json_t     *cached;       /* the agent's object cache, NULL when not sent (unchanged) */
    const char *instance;
    int64_t     batch;
} hb_items;
/* A validated registration body (strings and arrays borrowed from it). */
typedef struct reg_body {
    const char *name, *host, *version;
    int64_t     slots;
    json_t     *gpus, *running;   /* borrowed; gpus NULL when absent */
    json_t     *cached;           /* borrowed; NULL when absent */
} reg_body;
/* Validate a whole registration / heartbeat body before applying any of it.
 * RET 0 or HF_EINVAL with the offending field's path in e. */
int proto_register_check(const json_t *body, reg_body *out, hf_jerr *e);
int proto_heartbeat_check(const json_t *body, hb_items *out, hf_jerr *e);
/* Does running[] list (tid, attempt) at rank (any rank when one is here)? */
int proto_running_has(const json_t *running, int64_t tid, int64_t attempt, int rank, int nranks_here);
/* The current trial an item (trial_id, attempt) names on agent a, or NULL. */
trial *proto_item_trial(sched *s, const agent *a, const json_t *it);
/* The rank an item refers to: explicit "rank", else the first live rank of
 * t on agent_id (not yet started when want_unstarted). */
trial_rank *proto_item_rank(trial *t, int64_t agent_id, const json_t *it, int want_unstarted);
/* The assignment object for rank tr of t (docs/protocol.md). */
json_t *proto_assignment(sched *s, trial *t, trial_rank *tr);

/* ---------- sched_token.c: the agent token binding (docs/protocol.md, "Agent tokens") ---------- */

/* Is h the shared agent token's holder (SCHED_SHARED_AGENT_HOLDER)? */
int agent_holder_shared(const char *h);
/* May the agent token of holder speak for a (sched_agent_register_as)?
 * holder NULL (no token file): yes. RET 0, or HF_EPERM with e naming why. */
int agent_may_speak_locked(sched *s, agent *a, const char *holder, hf_jerr *e);
/* May the token of holder register the agent named name? RET 0 or HF_EPERM. */
int agent_may_register(sched *s, const char *name, const char *holder, hf_jerr *e);
/* Bind a to holder (row, in the open transaction, and record; NULL = no
 * token file). */
void agent_bind_holder(sched *s, agent *a, const char *holder);
/* Was attempt att of trial tid ever assigned to agent aid (a row of
 * allocations)? RET 1, 0, or -1 when the store could not say. */
int alloc_was_assigned(sched *s, int64_t tid, int64_t att, int64_t aid);
/* A 403 of the binding: an AGENT_REFUSED events row, at most one a second
 * (its own transaction; ends an open group first). */
void agent_refused_note(sched *s, const char *what, const hf_jerr *e);

/* ---------- sched_register.c: stale processes ---------- */

/* Does a still have a live rank of (tid, att)? *out = the trial or NULL. */
int agent_runs_attempt(sched *s, const agent *a, int64_t tid, int64_t att, trial **out);
/* Count the slots of the stale processes in running[] as used on a. */
void agent_stale_update(sched *s, agent *a, const json_t *running);

/* ---------- sched_ckpt.c ---------- */

/* A stored checkpoint a trial starts from (docs/protocol.md "restore"). */
typedef struct ckpt_ref {
    char    sha256[65];
    int64_t size, step;
    char    name[256];
    int64_t trial_id;         /* whose checkpoint: t itself or its PBT parent */
    int64_t agent_id;         /* the agent that uploaded it, 0 = unknown */
} ckpt_ref;
/* The checkpoint t must start from: its own newest stored one, else (a
 * PBT child) its parent's newest. RET 1 with *out, 0 = none. */
int ckpt_restore_of(sched *s, const trial *t, ckpt_ref *out);
/* Does agent a hold ref's object (it uploaded it, or lists it cached)? */
int ckpt_agent_holds(const agent *a, const ckpt_ref *ref);
/* A PBT child without a checkpoint to start from (found == 0) is not
 * placed: RET 1 while it waits; after cfg.pbt_parent_wait_ms it is FAILED
 * here (RET 1 too). RET 0: place it. */
int ckpt_pbt_wait(sched *s, trial *t, const ckpt_ref *ref, int found);
/* The assignment's "restore" object. */
json_t *ckpt_restore_json(const ckpt_ref *ref);

/* ---------- dispatch.c ---------- */

/* Place queued trials and ask searchers for new ones, when something
 * changed since the last pass (s->dispatch_dirty). With a kick set
 * (sched_set_kick) one pass places at most DISPATCH_CHUNK trials, then
 * leaves dispatch_dirty and dispatch_more set: its commit rings the agents
 * of that chunk and kicks the thread that places the rest in further
 * chunks (sched_dispatch_more). RET 1 when it stopped there, else 0. */
#define DISPATCH_CHUNK 64
int  dispatch_pass(sched *s);

#endif
