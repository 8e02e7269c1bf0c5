/*
 * dispatch.c — the scheduler core (see sched.h): the in-memory model of
 * experiments, trials and agents, mirrored row for row in the store, and
 * everything that moves a trial through its states:
 *
 *   QUEUED -> ASSIGNED -> RUNNING -> COMPLETED | FAILED | STOPPED | CANCELED
 *   (PAUSED while its experiment is paused; FAILED with restarts left goes
 *   back to QUEUED; an ASHA promotion sends a STOPPED/COMPLETED trial back
 *   to QUEUED with a larger budget, to resume from its own checkpoint.)
 *
 * Every state change goes through trial_set_state, which writes the trials
 * row and an events row in the current transaction and queues an SSE event
 * that is published only after the commit.
 *
 * The dispatch pass (dispatch_pass) runs after every change that may free
 * or need capacity: it picks experiments by priority, then by fair share
 * (slots in use divided by weight), places its queued trials, or asks the
 * searcher for a new one only when below max_concurrent_trials and
 * max_trials and when free slots can take it at once, and places each
 * trial as a gang (placement.c). Placed ranks are delivered in the agent's next
 * heartbeat reply; agents are told to heartbeat every heartbeat_fast_ms
 * while they have work, kills or queued trials, so an assignment or a
 * searcher STOP reaches the agent within that interval.
 *
 * Workload: thousands of agents heartbeating a few times a second, each
 * heartbeat carrying up to thousands of metric reports. Lookups by id are
 * binary searches over id-ordered arrays (ids only grow).
 */
#include "scheduler/sched.h"

#include "hf_err.h"
#include "hf_log.h"
#include "hf_metric.h"
#include "hf_time.h"
#include "scheduler/events.h"
#include "scheduler/experiment.h"
#include "scheduler/metrics.h"
#include "scheduler/placement.h"
#include "scheduler/search.h"
#include "scheduler/search_space.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_QUEUED, T_ASSIGNED, T_RUNNING, T_COMPLETED, T_FAILED, T_STOPPED, T_CANCELED, T_PAUSED, T__N };
const char *const sched_trial_state_names[8] = {"QUEUED", "ASSIGNED", "RUNNING", "COMPLETED",
                                                "FAILED", "STOPPED", "CANCELED", "PAUSED"};
enum { E_ACTIVE, E_PAUSED, E_COMPLETED, E_CANCELED };
static const char *const exp_state_names[] = {"ACTIVE", "PAUSED", "COMPLETED", "CANCELED"};

/* Rank state in allocations.started. */
enum { R_NEW = 0, R_SENT = 1, R_STARTED = 2 };

#define MAX_HB_ITEMS 200000
#define TRIAL_SIG_N  24       /* words of trial_sig() */

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
    int64_t     view_sig[TRIAL_SIG_N];  /* trial_sig() when view was built */
    int64_t     log_lines, logs_dropped;
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
} agent;

/* Group commit bounds: at most GRP_MAX heartbeats or GRP_MS of work share
 * one COMMIT; a deferred heartbeat commits itself after GRP_WAIT_MS. */
#define GRP_MAX     64
#define GRP_MS      10
#define GRP_WAIT_MS 20
#define GRP_RING    1024

struct sched {
    pthread_mutex_t lock;
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
    trial         **dirty;  size_t ndirty, cdirty;
    int64_t         hb_fast_eff, hb_idle_eff;   /* intervals scaled to the number of agents */
    /* Group commit of heartbeats (see hb_commit): a heartbeat that finds
     * others queued for the lock leaves its transaction open for them and
     * waits for the commit that ends its generation before it answers. */
    atomic_int      hb_queue;       /* heartbeats waiting for the core lock */
    int             grp_open;       /* the open transaction holds deferred heartbeats */
    int             grp_n;          /* how many */
    int64_t         grp_t0;         /* mono ms of the first */
    uint64_t        gen;            /* transactions ended so far; the open one is number gen */
    int             gen_rc[GRP_RING];   /* outcome of transaction g at g % GRP_RING */
    pthread_cond_t  grp_cv;         /* broadcast when a transaction ends */
};

/* ---------- small helpers ---------- */

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p) return HF_ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static trial *trial_find(sched *s, int64_t id)
{
    size_t lo = 0, hi = s->ntrials;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->trials[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->ntrials && s->trials[lo]->id == id ? s->trials[lo] : NULL;
}

/* Placed trials are also listed in s->live, so per-heartbeat and per-tick
 * work scales with what runs, not with the whole history. */
static void live_add(sched *s, trial *t)
{
    if (grow((void **)&s->live, &s->clive, s->nlive + 1, sizeof *s->live)) return;
    t->live_idx = s->nlive;
    s->live[s->nlive++] = t;
}

static void live_del(sched *s, trial *t)
{
    size_t i = t->live_idx;
    if (i >= s->nlive || s->live[i] != t) return;
    s->live[i] = s->live[--s->nlive];
    s->live[i]->live_idx = i;
}

/* A copy of the live list, for loops whose body may end trials. */
static trial **live_snapshot(sched *s, size_t *n)
{
    trial **v = malloc((s->nlive + 1) * sizeof *v);
    *n = 0;
    if (!v) return NULL;
    if (s->nlive) memcpy(v, s->live, s->nlive * sizeof *v);
    *n = s->nlive;
    return v;
}

static experiment *exp_find(sched *s, int64_t id)
{
    size_t lo = 0, hi = s->nexps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->exps[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->nexps && s->exps[lo]->id == id ? s->exps[lo] : NULL;
}

static agent *agent_find(sched *s, int64_t id)
{
    size_t lo = 0, hi = s->nagents;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->agents[mid]->id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->nagents && s->agents[lo]->id == id ? s->agents[lo] : NULL;
}

static agent *agent_by_name(sched *s, const char *name)
{
    for (size_t i = 0; i < s->nagents; i++)
        if (strcmp(s->agents[i]->name, name) == 0) return s->agents[i];
    return NULL;
}

/* Per-agent index of placed trials, so a heartbeat touches only its own. */
static void agent_link(sched *s, trial *t)
{
    for (int r = 0; r < t->nranks; r++) {
        agent *a = agent_find(s, t->ranks[r].agent_id);
        if (!a) continue;
        size_t k = 0;
        while (k < a->non && a->on[k] != t) k++;
        if (k < a->non || grow((void **)&a->on, &a->con, a->non + 1, sizeof *a->on)) continue;
        a->on[a->non++] = t;
    }
}

static void agent_unlink(sched *s, trial *t)
{
    for (int r = 0; r < t->nranks; r++) {
        agent *a = agent_find(s, t->ranks[r].agent_id);
        if (!a) continue;
        for (size_t k = 0; k < a->non; k++)
            if (a->on[k] == t) { a->on[k] = a->on[--a->non]; break; }
    }
}

/* A copy of an agent's list, for loops whose body may end trials. */
static trial **agent_snapshot_on(const agent *a, size_t *n)
{
    trial **v = malloc((a->non + 1) * sizeof *v);
    *n = 0;
    if (!v) return NULL;
    if (a->non) memcpy(v, a->on, a->non * sizeof *v);
    *n = a->non;
    return v;
}

static int is_terminal(int st) { return st == T_COMPLETED || st == T_FAILED || st == T_STOPPED || st == T_CANCELED; }
static int is_active(int st) { return st == T_QUEUED || st == T_ASSIGNED || st == T_RUNNING; }
static int exp_active_count(const experiment *x)
{
    return x->counts[T_QUEUED] + x->counts[T_ASSIGNED] + x->counts[T_RUNNING];
}

static int state_parse(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (s && strcmp(s, names[i]) == 0) return i;
    return -1;
}

/* Higher is better. */
static double norm(const experiment *x, double v) { return x->spec.goal_max ? v : -v; }

/* ---------- transactions ---------- */

static void db_exec(sched *s, sqlite3_stmt *st)
{
    if (s->txn_rc) { sqlite3_reset(st); return; }
    int rc = store_exec_stmt(st);
    if (rc) s->txn_rc = rc;
}

static void emit(sched *s, const char *type, json_t *data /* stolen */)
{
    if (!data) return;
    if (!s->ev || events_subscribers(s->ev) == 0) { json_decref(data); return; }
    json_array_append_new(s->pending, json_pack("[so]", type, data));
}

/* Remember to ring agent_id's doorbell when this transaction commits. */
static void ring_note(sched *s, int64_t agent_id)
{
    if (!s->bell) return;
    for (size_t i = 0; i < s->nrings; i++)
        if (s->rings[i] == agent_id) return;
    if (grow((void **)&s->rings, &s->crings, s->nrings + 1, sizeof *s->rings)) return;   /* heartbeat delivers it */
    s->rings[s->nrings++] = agent_id;
}

/* The reply being built for agent_id carries everything pending for it. */
static void ring_forget(sched *s, int64_t agent_id)
{
    for (size_t i = 0; i < s->nrings; i++)
        if (s->rings[i] == agent_id) {
            s->rings[i] = s->rings[--s->nrings];
            return;
        }
}

static int txn_end(sched *s);

static void txn_begin(sched *s)
{
    /* Deferred heartbeats wait for their COMMIT: give it to them before
     * work that may roll back its own transaction. */
    if (s->grp_open) txn_end(s);
    json_array_clear(s->pending);
    s->nrings = 0;
    for (size_t i = 0; i < s->ndirty; i++) s->dirty[i]->dirty_metrics = 0;
    s->ndirty = 0;
    s->txn_rc = store_begin(s->st);
}

/* A heartbeat's transaction: continue the open group when there is one. */
static void txn_join(sched *s)
{
    if (!s->grp_open) txn_begin(s);
}

static int sched_load(sched *s, char *err, size_t errlen);
static void sched_unload(sched *s);

/* Transaction number s->gen ended with rc: wake the heartbeats of its group. */
static void txn_ended(sched *s, int rc)
{
    s->gen_rc[s->gen % GRP_RING] = rc;
    s->gen++;
    s->grp_open = 0;
    s->grp_n = 0;
    pthread_cond_broadcast(&s->grp_cv);
}

/* Commit, or roll back and rebuild memory from the store. RET 0 or HF_E*. */
static int txn_end(sched *s)
{
    int rc = s->txn_rc;
    if (rc == 0) rc = store_commit(s->st);
    if (rc) {
        char err[256];
        atomic_fetch_add(&metrics.store_errors, 1);
        /* The statement that failed ran in this thread: whoever sets
         * txn_rc ends the transaction before releasing the lock (a
         * heartbeat defers only a clean one), so this is its message. */
        hf_error("store transaction failed (%s): %s; rolling back and reloading", hf_strerror(rc),
                 store_last_error());
        store_rollback(s->st);
        json_array_clear(s->pending);
        s->nrings = 0;
        s->ndirty = 0;
        sched_unload(s);
        if (sched_load(s, err, sizeof err)) hf_error("reload after failed transaction: %s", err);
        s->txn_rc = 0;
        txn_ended(s, rc);
        return rc;
    }
    size_t i;
    json_t *p;
    json_array_foreach(s->pending, i, p)
        events_publish(s->ev, json_string_value(json_array_get(p, 0)), json_array_get(p, 1));
    json_array_clear(s->pending);
    for (size_t k = 0; k < s->nrings && s->bell; k++) s->bell(s->bell_ctx, s->rings[k]);
    s->nrings = 0;
    txn_ended(s, 0);
    return 0;
}

/* Finish a heartbeat's transaction. Group commit: when other heartbeats
 * are queued for the core lock, this one leaves the transaction open,
 * releases the lock and waits for the COMMIT that includes its work (the
 * next heartbeat finds nobody behind it, or the group is full or old, or
 * GRP_WAIT_MS pass); only then is its reply sent, so nothing is
 * acknowledged before it is durable. One COMMIT (WAL frame writes of the
 * pages all of them touched) then serves up to GRP_MAX heartbeats. On a
 * failed COMMIT every heartbeat of the group gets the error and memory is
 * reloaded from the store (txn_end), so callers must not touch scheduler
 * objects after this returns. RET 0 or HF_E*. */
static int hb_commit(sched *s)
{
    int64_t mono = hf_mono_ms();
    if (s->txn_rc || atomic_load(&s->hb_queue) == 0 || s->grp_n >= GRP_MAX ||
        (s->grp_n > 0 && mono - s->grp_t0 >= GRP_MS))
        return txn_end(s);
    if (s->grp_n++ == 0) s->grp_t0 = mono;
    s->grp_open = 1;
    uint64_t mine = s->gen;
    atomic_fetch_add(&metrics.heartbeats_grouped, 1);
    while (s->gen <= mine) {
        struct timespec ts = hf_deadline(CLOCK_REALTIME, GRP_WAIT_MS);
        int w = pthread_cond_timedwait(&s->grp_cv, &s->lock, &ts);
        if (w == ETIMEDOUT && s->gen <= mine && s->grp_open) txn_end(s);
    }
    return s->gen - mine <= GRP_RING ? s->gen_rc[mine % GRP_RING] : HF_EDB;
}

static void event_row(sched *s, int64_t exp_id, int64_t trial_id, const char *type, const char *detail)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_EVENT_INSERT);
    sqlite3_bind_int64(st, 1, hf_wall_ms());
    store_bind_opt_int(st, 2, exp_id > 0, exp_id);
    store_bind_opt_int(st, 3, trial_id > 0, trial_id);
    sqlite3_bind_text(st, 4, type, -1, SQLITE_STATIC);
    store_bind_text(st, 5, detail);
    db_exec(s, st);
}

/* ---------- JSON views ---------- */

static json_t *opt_int(int has, int64_t v) { return has ? json_integer(v) : json_null(); }

static json_t *exp_summary(const experiment *x)
{
    json_t *best = json_null();
    if (x->best_trial > 0) best = json_pack("{sIsf}", "trial_id", (json_int_t)x->best_trial, "value", x->best_raw);
    json_t *counts = json_pack("{sIsIsIsIsIsIsI}", "queued", (json_int_t)x->counts[T_QUEUED],
                               "running", (json_int_t)(x->counts[T_RUNNING] + x->counts[T_ASSIGNED]),
                               "completed", (json_int_t)x->counts[T_COMPLETED],
                               "failed", (json_int_t)x->counts[T_FAILED],
                               "stopped", (json_int_t)x->counts[T_STOPPED],
                               "canceled", (json_int_t)x->counts[T_CANCELED],
                               "paused", (json_int_t)x->counts[T_PAUSED]);
    return json_pack("{sIsssssss{ssss}sIsosososIsIsIsf}", "id", (json_int_t)x->id, "name", x->name,
                     "state", exp_state_names[x->state], "searcher", x->spec.searcher_name,
                     "objective", "metric", x->spec.metric, "goal", x->spec.goal_max ? "maximize" : "minimize",
                     "created_at", (json_int_t)x->created_at, "ended_at", opt_int(x->ended_at > 0, x->ended_at),
                     "counts", counts, "best", best, "max_trials", (json_int_t)x->max_trials,
                     "max_concurrent_trials", (json_int_t)x->spec.max_concurrent,
                     "priority", (json_int_t)x->spec.priority, "weight", x->spec.weight);
}

static json_t *trial_view(sched *s, const trial *t)
{
    agent *a = t->agent_id ? agent_find(s, t->agent_id) : NULL;
    json_t *ranks = json_array();
    for (int r = 0; r < t->nranks; r++) {
        agent *ra = agent_find(s, t->ranks[r].agent_id);
        json_array_append_new(ranks, json_pack("{sisIss}", "rank", t->ranks[r].rank, "agent_id",
                                               (json_int_t)t->ranks[r].agent_id, "agent", ra ? ra->name : "?"));
    }
    int64_t budget = t->budget > 0 ? t->budget : t->exp->spec.max_epochs;
    return json_pack("{sIsIsssOsosososIsIsosIsososososososIsIss}", "id", (json_int_t)t->id,
                     "experiment_id", (json_int_t)t->exp->id, "state", sched_trial_state_names[t->state],
                     "hparams", t->hparams, "agent_id", opt_int(t->agent_id > 0, t->agent_id),
                     "agent", a ? json_string(a->name) : json_null(), "exit_code", opt_int(t->has_exit, t->exit_code),
                     "restarts", (json_int_t)t->restarts, "attempt", (json_int_t)t->attempt,
                     "started_at", opt_int(t->started_at > 0, t->started_at),
                     "created_at", (json_int_t)t->created_at,
                     "ended_at", opt_int(t->ended_at > 0, t->ended_at), "ranks", ranks,
                     "latest", json_deep_copy(t->latest), "best", json_deep_copy(t->best),
                     "objective", t->has_obj ? json_real(t->obj) : json_null(),
                     "budget", budget > 0 ? json_integer(budget) : json_null(),
                     "idx", (json_int_t)t->idx, "parent_trial", (json_int_t)t->parent,
                     "kill_reason", t->kill_state >= 0 ? t->kill_reason : "");
}

/* Cached views. GET /experiments/{id}/trials answers up to thousands of
 * trial views while heartbeats wait for the same lock, so each trial keeps
 * its view serialized (compact JSON, as api.c sends it) and rebuilds it
 * only when something the view shows has changed. Rather than trusting
 * every mutation site to clear a flag, the view remembers a signature of
 * all it was built from (scalars, kill reason, a hash of the ranks, and
 * mver, which every change of latest/best bumps; hparams, idx, parent and
 * agent names never change) and is rebuilt when the signature differs. */
static uint64_t sig_mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static void trial_sig(const trial *t, int64_t sig[TRIAL_SIG_N])
{
    uint64_t rh = 0x243f6a8885a308d3ull;
    for (int r = 0; r < t->nranks; r++)
        rh = sig_mix(sig_mix(rh, (uint64_t)t->ranks[r].rank), (uint64_t)t->ranks[r].agent_id);
    memset(sig, 0, TRIAL_SIG_N * sizeof *sig);
    sig[0] = t->mver;
    sig[1] = t->state;
    sig[2] = t->agent_id;
    sig[3] = t->has_exit;
    sig[4] = t->exit_code;
    sig[5] = t->restarts;
    sig[6] = t->attempt;
    sig[7] = t->started_at;
    sig[8] = t->created_at;
    sig[9] = t->ended_at;
    sig[10] = t->nranks;
    sig[11] = (int64_t)rh;
    sig[12] = t->has_obj;
    memcpy(&sig[13], &t->obj, sizeof t->obj);
    sig[14] = t->budget;
    sig[15] = t->idx;
    sig[16] = t->parent;
    sig[17] = t->kill_state;
    sig[18] = t->exp->spec.max_epochs;
    if (t->kill_state >= 0) {   /* 32 bytes: sig[19..22] */
        _Static_assert(sizeof t->kill_reason == 4 * sizeof(int64_t), "kill_reason fills 4 signature words");
        memcpy(&sig[19], t->kill_reason, sizeof t->kill_reason);
    }
}

/* Make t->view current. RET 0 or HF_ENOMEM (the old view is dropped). */
static int trial_view_fresh(sched *s, trial *t)
{
    int64_t sig[TRIAL_SIG_N];
    trial_sig(t, sig);
    if (t->view && memcmp(sig, t->view_sig, sizeof sig) == 0) return 0;
    free(t->view);
    t->view = NULL;
    json_t *v = trial_view(s, t);
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    if (!text) return HF_ENOMEM;
    t->view = text;
    t->view_len = strlen(text);
    memcpy(t->view_sig, sig, sizeof sig);
    return 0;
}

static json_t *agent_view(sched *s, const agent *a)
{
    json_t *running = json_array();
    (void)s;
    for (size_t i = 0; i < a->non; i++) {
        trial *t = a->on[i];
        for (int r = 0; r < t->nranks; r++)
            if (t->ranks[r].agent_id == a->id && !t->ranks[r].exited)
                json_array_append_new(running, json_pack("{sIsIsi}", "trial_id", (json_int_t)t->id, "attempt",
                                                         (json_int_t)t->attempt, "rank", t->ranks[r].rank));
    }
    return json_pack("{sIsssssisisOsssIsIsoss}", "id", (json_int_t)a->id, "name", a->name, "host", a->host,
                     "slots", a->pa.slots, "slots_used", a->pa.slots_used, "gpus", a->gpus,
                     "state", a->alive ? "ALIVE" : "LOST", "last_heartbeat", (json_int_t)a->last_hb_wall,
                     "registered_at", (json_int_t)a->registered_at, "running", running,
                     "version", a->version ? a->version : "");
}

/* ---------- persistence of one trial ---------- */

static void trial_save(sched *s, trial *t)
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
    db_exec(s, st);
}

static void trial_save_metrics(sched *s, trial *t)
{
    char *lj = hf_json_dump(t->latest), *bj = hf_json_dump(t->best);
    sqlite3_stmt *st = store_stmt(s->st, ST_TRIAL_METRICS);
    if (t->has_obj) sqlite3_bind_double(st, 1, t->obj);
    else sqlite3_bind_null(st, 1);
    store_bind_text(st, 2, lj);
    store_bind_text(st, 3, bj);
    sqlite3_bind_int64(st, 4, t->id);
    db_exec(s, st);
    free(lj);
    free(bj);
    t->dirty_metrics = 0;
}

static void exp_save(sched *s, experiment *x)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_EXP_UPDATE);
    sqlite3_bind_text(st, 1, exp_state_names[x->state], -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, x->max_trials);
    sqlite3_bind_int(st, 3, x->searcher_done);
    store_bind_opt_int(st, 4, x->ended_at > 0, x->ended_at);
    sqlite3_bind_int64(st, 5, x->id);
    db_exec(s, st);
    s->dispatch_dirty = 1;
    emit(s, "experiment", exp_summary(x));
}

static void exp_set_state(sched *s, experiment *x, int st, const char *detail)
{
    if (x->state == st) return;
    x->state = st;
    s->dispatch_dirty = 1;
    if (st == E_COMPLETED || st == E_CANCELED) x->ended_at = hf_wall_ms();
    else x->ended_at = 0;
    exp_save(s, x);
    event_row(s, x->id, 0, exp_state_names[st], detail);
    hf_info("experiment %lld -> %s%s%s", (long long)x->id, exp_state_names[st], detail ? ": " : "",
            detail ? detail : "");
}

/* Every trial state change: memory, trials row, events row, SSE. */
static void trial_set_state(sched *s, trial *t, int st, const char *detail)
{
    int old = t->state;
    t->exp->counts[old]--;
    t->exp->counts[st]++;
    t->state = st;
    s->dispatch_dirty = 1;
    if (st == T_QUEUED) t->ready_mono = hf_mono_ms();
    if (is_terminal(st)) t->ended_at = hf_wall_ms();
    else if (old != st && is_terminal(old)) t->ended_at = 0;
    trial_save(s, t);
    event_row(s, t->exp->id, t->id, sched_trial_state_names[st], detail);
    emit(s, "trial", trial_view(s, t));
    hf_debug("trial %lld %s -> %s%s%s", (long long)t->id, sched_trial_state_names[old], sched_trial_state_names[st],
             detail ? ": " : "", detail ? detail : "");
}

/* ---------- allocation ---------- */

static void ranks_release(sched *s, trial *t)
{
    for (int r = 0; r < t->nranks; r++) {
        agent *a = agent_find(s, t->ranks[r].agent_id);
        if (!a) continue;
        place_rank pr = {.agent = 0, .ngpu = t->ranks[r].ngpu};
        memcpy(pr.gpu, t->ranks[r].gpu, sizeof pr.gpu);
        placement_release(&a->pa, 1, 1, t->ranks[r].slots, &pr);
        t->exp->slots_in_use -= t->ranks[r].slots;
    }
    if (t->nranks) {
        sqlite3_stmt *st = store_stmt(s->st, ST_ALLOC_RELEASE);
        sqlite3_bind_int64(st, 1, hf_wall_ms());
        sqlite3_bind_int64(st, 2, t->id);
        sqlite3_bind_int64(st, 3, t->attempt);
        db_exec(s, st);
    }
    if (t->ranks) { agent_unlink(s, t); live_del(s, t); }
    s->dispatch_dirty = 1;
    free(t->ranks);
    t->ranks = NULL;
    t->nranks = 0;
}

static void rank_save(sched *s, trial *t, trial_rank *r)
{
    sqlite3_stmt *st = store_stmt(s->st, ST_ALLOC_UPDATE);
    sqlite3_bind_int(st, 1, r->st);
    sqlite3_bind_int(st, 2, r->exited);
    store_bind_opt_int(st, 3, r->exited, r->exit_code);
    sqlite3_bind_int64(st, 4, t->id);
    sqlite3_bind_int64(st, 5, t->attempt);
    sqlite3_bind_int(st, 6, r->rank);
    db_exec(s, st);
}

/* ---------- trial lifecycle ---------- */

static void trial_done_notify(trial *t, int st)
{
    experiment *x = t->exp;
    int outcome = st == T_COMPLETED ? SEARCH_COMPLETED : st == T_FAILED ? SEARCH_FAILED
                : st == T_STOPPED ? SEARCH_STOPPED : SEARCH_CANCELED;
    double v = t->has_obj ? norm(x, t->obj) : NAN;
    if (x->srch && x->srch->ops->on_done) x->srch->ops->on_done(x->srch, t->id, outcome, v);
    if (x->med) search_median_on_done(x->med, t->id, outcome);
}

/* The attempt is over (all ranks exited, or it was never started). target
 * is the state asked for by a kill, or the outcome of the exit codes. */
static void trial_finish(sched *s, trial *t, int target, const char *detail)
{
    experiment *x = t->exp;
    int64_t agent_id = t->agent_id;
    ranks_release(s, t);
    t->kill_state = -1;
    t->kill_reason[0] = 0;
    if (target == T_FAILED) {
        if (agent_id > 0 && agent_id == t->fail_agent) t->fail_streak++;
        else { t->fail_agent = agent_id; t->fail_streak = 1; }
        if (t->restarts < x->spec.max_restarts && (x->state == E_ACTIVE || x->state == E_PAUSED)) {
            char d[160];
            trial_set_state(s, t, T_FAILED, detail);
            t->restarts++;
            snprintf(d, sizeof d, "restart %lld of %lld from the newest checkpoint", (long long)t->restarts,
                     (long long)x->spec.max_restarts);
            trial_set_state(s, t, x->state == E_PAUSED ? T_PAUSED : T_QUEUED, d);
            return;
        }
    } else if (target == T_COMPLETED) {
        t->fail_streak = 0;
    }
    if (target == T_PAUSED && x->state != E_PAUSED) target = T_QUEUED;
    if (target == T_QUEUED || target == T_PAUSED) {
        trial_set_state(s, t, target, detail);
        return;
    }
    trial_set_state(s, t, target, detail);
    trial_done_notify(t, target);
}

/* Is tr a holder rank of a launcher (mpirun) trial whose rank 0 still
 * runs? Such a rank is not sent kills yet: mpirun's daemons use its agent. */
static int holder_waits(const trial *t, const trial_rank *tr)
{
    return t->exp->spec.launcher_mpirun && tr->rank != 0 && t->ranks && !t->ranks[0].exited;
}

/* Ask for the trial to end in state target (STOPPED, CANCELED, PAUSED or
 * FAILED). Unplaced trials change at once; placed ones get a kill in
 * their agents' next heartbeat replies and change when they exit. */
static void trial_request_kill(sched *s, trial *t, int target, const char *reason)
{
    if (is_terminal(t->state)) return;
    if (t->state == T_QUEUED || t->state == T_PAUSED) {
        trial_set_state(s, t, target == T_PAUSED ? T_PAUSED : target, reason);
        if (is_terminal(target)) trial_done_notify(t, target);
        return;
    }
    int any_sent = 0;
    for (int r = 0; r < t->nranks; r++)
        if (t->ranks[r].st != R_NEW && !t->ranks[r].exited) any_sent = 1;
    if (!any_sent) {                       /* nothing reached an agent yet */
        trial_finish(s, t, target, reason);
        return;
    }
    /* A pause or user kill overrides a weaker pending one (stop -> cancel),
     * except once mpirun (rank 0 of a launcher trial) has ended: its exit
     * decided the outcome, and only the holders are left to release. */
    if (t->kill_state >= 0 && !(target == T_CANCELED && t->kill_state != T_CANCELED)) return;
    if (t->kill_state >= 0 && t->exp->spec.launcher_mpirun && t->ranks && t->ranks[0].exited) return;
    t->kill_state = target;
    snprintf(t->kill_reason, sizeof t->kill_reason, "%s", reason);
    for (int r = 0; r < t->nranks; r++) {
        t->ranks[r].kill_sent_mono = 0;
        if (t->ranks[r].st != R_NEW && !t->ranks[r].exited && !holder_waits(t, &t->ranks[r]))
            ring_note(s, t->ranks[r].agent_id);
    }
    trial_save(s, t);
    event_row(s, t->exp->id, t->id, "KILL_REQUESTED", reason);
}

/* One rank ended (exit, start failure, lost agent). */
static void rank_exited(sched *s, trial *t, trial_rank *r, int code, const char *why)
{
    if (r->exited) return;
    r->exited = 1;
    r->exit_code = code;
    rank_save(s, t, r);
    int others = 0;
    for (int k = 0; k < t->nranks; k++)
        if (!t->ranks[k].exited && t->ranks[k].st != R_NEW) others = 1;
    if (t->exp->spec.launcher_mpirun && r->rank == 0 && others) {
        /* mpirun (rank 0) ended: its exit code is the trial's outcome, and
         * the holders on the other agents are released now. A kill already
         * pending (STOP, cancel, pause) was held back from them until now. */
        if (t->kill_state < 0)
            trial_request_kill(s, t, code == 0 ? T_COMPLETED : T_FAILED,
                               code == 0 ? "mpirun exited" : why ? why : "mpirun failed");
        for (int k = 0; k < t->nranks; k++)
            if (!t->ranks[k].exited && t->ranks[k].st != R_NEW) {
                t->ranks[k].kill_sent_mono = 0;
                ring_note(s, t->ranks[k].agent_id);
            }
    } else if (code != 0 && t->kill_state < 0 && others) {
        /* A failed worker fails the gang: stop the others, then restart. */
        trial_request_kill(s, t, T_FAILED, why ? why : "worker failed");
    }
    for (int k = 0; k < t->nranks; k++)
        if (!t->ranks[k].exited && t->ranks[k].st != R_NEW) return;   /* others still running */
    int all_ok = 1;
    for (int k = 0; k < t->nranks; k++)
        if (!t->ranks[k].exited || t->ranks[k].exit_code != 0) all_ok = 0;
    if (t->exp->spec.launcher_mpirun) all_ok = t->ranks[0].exited && t->ranks[0].exit_code == 0;
    t->has_exit = 1;
    t->exit_code = t->ranks[0].exited ? t->ranks[0].exit_code : code;
    char d[160];
    snprintf(d, sizeof d, "%s%sexit code %d", why ? why : "", why ? ", " : "", code);
    int target = t->kill_state >= 0 ? t->kill_state : all_ok ? T_COMPLETED : T_FAILED;
    trial_finish(s, t, target, t->kill_state >= 0 ? t->kill_reason : d);
}

/* ---------- placement ---------- */

static int pick_port(sched *s)
{
    int64_t p = s->next_port;
    s->next_port = s->cfg.port_base + ((s->next_port - s->cfg.port_base + 1) % s->cfg.port_count);
    return (int)p;
}

/* An agent that failed trial t twice in a row is avoided while another
 * agent is alive. */
static int avoid_agent(const sched *s, const trial *t, const agent *a)
{
    if (!t || t->fail_streak < 2 || t->fail_agent != a->id) return 0;
    for (size_t i = 0; i < s->nagents; i++)
        if (s->agents[i] != a && s->agents[i]->alive) return 1;
    return 0;
}

/* Alive agents as a placement array; out_map[i] = agent pointer. */
static place_agent *agents_snapshot(sched *s, const trial *t, agent ***map, int *n)
{
    place_agent *pa = calloc(s->nagents + 1, sizeof *pa);
    agent **m = calloc(s->nagents + 1, sizeof *m);
    int k = 0;
    if (!pa || !m) { free(pa); free(m); *n = 0; *map = NULL; return NULL; }
    int spw = t ? (int)t->exp->spec.slots_per_worker : 1;
    for (size_t i = 0; i < s->nagents; i++) {
        agent *a = s->agents[i];
        /* Agents that cannot take a worker change nothing in placement_gang
         * (relative order is kept), and a busy farm has few that can. */
        if (!a->alive || placement_capacity(&a->pa, spw) == 0) continue;
        pa[k] = a->pa;
        pa[k].excluded = avoid_agent(s, t, a);
        m[k++] = a;
    }
    *n = k;
    *map = m;
    return pa;
}

/* Free slots of alive agents, counted once per pass and after each
 * placement or hold: an upper bound that rejects most checks at once. */
static int64_t pass_free(sched *s)
{
    if (s->pass_free < 0) {
        int64_t f = 0;
        for (size_t i = 0; i < s->nagents; i++) {
            const place_agent *p = &s->agents[i]->pa;
            if (s->agents[i]->alive && p->slots > p->slots_used) f += p->slots - p->slots_used;
        }
        s->pass_free = f;
    }
    return s->pass_free;
}

static int capacity_for(sched *s, const experiment *x)
{
    int64_t need = x->spec.workers, got = 0;
    if (pass_free(s) < need * x->spec.slots_per_worker) return 0;
    for (size_t i = 0; i < s->nagents && got < need; i++)
        if (s->agents[i]->alive) got += placement_capacity(&s->agents[i]->pa, (int)x->spec.slots_per_worker);
    return got >= need;
}

static int trial_place(sched *s, trial *t)
{
    experiment *x = t->exp;
    int n = 0, W = (int)x->spec.workers, S = (int)x->spec.slots_per_worker;
    agent **map = NULL;
    place_agent *pa = NULL;
    place_rank *pr = calloc((size_t)W, sizeof *pr);
    trial_rank *ranks = calloc((size_t)W, sizeof *ranks);
    int rc = HF_ENOMEM;
    if (!pr || !ranks) goto end;
    /* Fast path, the common case: the gang fits on one agent. That is
     * placement_gang's first choice too (the agent with the least capacity
     * that still fits, first in order on a tie), found here without
     * copying every agent: at submission a pass places thousands of trials
     * over a thousand agents. */
    {
        agent *one = NULL;
        int best_cap = 0;
        for (size_t i = 0; i < s->nagents; i++) {
            agent *a = s->agents[i];
            if (!a->alive || avoid_agent(s, t, a)) continue;
            int c = placement_capacity(&a->pa, S);
            if (c >= W && (!one || c < best_cap)) { one = a; best_cap = c; }
        }
        if (one) {
            map = malloc(sizeof *map);
            if (!map) goto end;
            map[0] = one;
            n = 1;
            rc = placement_gang(&one->pa, 1, W, S, pr);
            if (rc) goto end;
        }
    }
    if (!map) {
        pa = agents_snapshot(s, t, &map, &n);
        if (!pa) { rc = HF_ENOMEM; goto end; }
        rc = placement_gang(pa, n, W, S, pr);
        if (rc) goto end;
        for (int i = 0; i < n; i++) map[i]->pa = pa[i], map[i]->pa.excluded = 0;
    }
    t->ranks = ranks;
    ranks = NULL;
    s->pass_free = -1;
    t->nranks = W;
    live_add(s, t);
    t->attempt++;
    t->port = pick_port(s);
    t->has_exit = 0;
    t->agent_id = map[pr[0].agent]->id;
    char detail[256] = "";
    for (int r = 0; r < W; r++) {
        trial_rank *tr = &t->ranks[r];
        tr->agent_id = map[pr[r].agent]->id;
        tr->rank = r;
        tr->local_rank = 0;
        for (int q = 0; q < r; q++)
            if (t->ranks[q].agent_id == tr->agent_id) tr->local_rank++;
        tr->slots = S;
        tr->ngpu = pr[r].ngpu;
        memcpy(tr->gpu, pr[r].gpu, sizeof tr->gpu);
        tr->st = R_NEW;
        ring_note(s, tr->agent_id);
        x->slots_in_use += S;
        json_t *g = json_array();
        for (int k = 0; k < tr->ngpu; k++) json_array_append_new(g, json_integer(tr->gpu[k]));
        char *gs = hf_json_dump(g);
        json_decref(g);
        sqlite3_stmt *st = store_stmt(s->st, ST_ALLOC_INSERT);
        sqlite3_bind_int64(st, 1, t->id);
        sqlite3_bind_int64(st, 2, t->attempt);
        sqlite3_bind_int(st, 3, r);
        sqlite3_bind_int64(st, 4, tr->agent_id);
        sqlite3_bind_int(st, 5, S);
        store_bind_text(st, 6, gs ? gs : "[]");
        sqlite3_bind_int64(st, 7, hf_wall_ms());
        db_exec(s, st);
        free(gs);
        size_t dl = strlen(detail);
        if (dl < sizeof detail - 80)
            snprintf(detail + dl, sizeof detail - dl, "%srank %d on %s", r ? ", " : "", r, map[pr[r].agent]->name);
    }
    agent_link(s, t);
    trial_set_state(s, t, T_ASSIGNED, detail);
    rc = 0;
end:
    free(pa);
    free(map);
    free(pr);
    free(ranks);
    return rc;
}

/* ---------- searcher ---------- */

static trial *trial_new_mem(sched *s, experiment *x)
{
    trial *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (grow((void **)&s->trials, &s->ctrials, s->ntrials + 1, sizeof *s->trials) ||
        grow((void **)&x->trials, &x->cap, x->ntrials + 1, sizeof *x->trials)) {
        free(t);
        return NULL;
    }
    t->exp = x;
    t->kill_state = -1;
    t->latest = json_object();
    t->best = json_object();
    return t;
}

/* Insert t into s->trials keeping id order (ids only grow: append). */
static void trial_index(sched *s, experiment *x, trial *t)
{
    s->trials[s->ntrials++] = t;
    x->trials[x->ntrials++] = t;
    x->counts[t->state]++;
}

static trial *trial_create(sched *s, experiment *x, search_new *nw)
{
    trial *t = trial_new_mem(s, x);
    if (!t) return NULL;
    char *hp = hf_json_dump(nw->hparams);
    t->idx = (int64_t)x->ntrials;
    t->hparams = nw->hparams;
    nw->hparams = NULL;
    t->budget = nw->budget;
    t->parent = nw->parent_trial;
    t->created_at = hf_wall_ms();
    t->state = T_QUEUED;
    t->ready_mono = hf_mono_ms();
    sqlite3_stmt *st = store_stmt(s->st, ST_TRIAL_INSERT);
    sqlite3_bind_int64(st, 1, x->id);
    sqlite3_bind_int64(st, 2, t->idx);
    sqlite3_bind_text(st, 3, "QUEUED", -1, SQLITE_STATIC);
    store_bind_text(st, 4, hp ? hp : "{}");
    sqlite3_bind_int64(st, 5, t->budget);
    store_bind_opt_int(st, 6, t->parent > 0, t->parent);
    sqlite3_bind_int64(st, 7, t->created_at);
    db_exec(s, st);
    free(hp);
    t->id = sqlite3_last_insert_rowid(store_db(s->st));
    if (s->txn_rc || (s->ntrials && s->trials[s->ntrials - 1]->id >= t->id)) {
        json_decref(t->hparams);
        json_decref(t->latest);
        json_decref(t->best);
        free(t);
        if (!s->txn_rc) s->txn_rc = HF_EDB;
        return NULL;
    }
    trial_index(s, x, t);
    event_row(s, x->id, t->id, "QUEUED", t->parent ? "created (exploit of a parent)" : "created");
    emit(s, "trial", trial_view(s, t));
    if (x->srch->ops->on_created)
        x->srch->ops->on_created(x->srch, t->id, t->idx, t->hparams, t->budget, t->parent);
    atomic_fetch_add(&metrics.trials_created, 1);
    return t;
}

/* The QUEUED trial to place next: one that ran before (an ASHA promotion,
 * a restart, a trial resumed after a pause) before one never placed, each
 * in creation order. */
static trial *first_queued(experiment *x)
{
    trial *fresh = NULL;
    if (x->counts[T_QUEUED] == 0) return NULL;
    for (size_t i = 0; i < x->ntrials; i++) {
        trial *t = x->trials[i];
        if (t->state != T_QUEUED) continue;
        if (t->attempt > 0) return t;
        if (!fresh) fresh = t;
    }
    return fresh;
}

/* Ask the searcher for work. RET a QUEUED trial, or NULL (x->pass set). */
static trial *searcher_next(sched *s, experiment *x, int *finished)
{
    search_new nw;
    *finished = 0;
    if (x->searcher_done) {
        *finished = 1;
        return NULL;
    }
    memset(&nw, 0, sizeof nw);
    int64_t n_created = (int64_t)x->ntrials, n_active = exp_active_count(x);
    int rc = x->srch->ops->next(x->srch, n_created, n_active, &nw);
    if (rc == SEARCH_DONE) {
        json_decref(nw.hparams);
        x->searcher_done = 1;
        exp_save(s, x);
        *finished = 1;
        return NULL;
    }
    if (rc != SEARCH_CREATE) {
        json_decref(nw.hparams);
        if (n_active == 0 && x->counts[T_PAUSED] == 0) *finished = 1;   /* waiting on nothing */
        return NULL;
    }
    if (nw.resume_trial > 0) {
        trial *t = trial_find(s, nw.resume_trial);
        json_decref(nw.hparams);
        if (!t || t->exp != x || !(t->state == T_STOPPED || t->state == T_COMPLETED)) {
            hf_warn("searcher of experiment %lld asked to resume trial %lld, which cannot resume", (long long)x->id,
                    (long long)nw.resume_trial);
            return NULL;
        }
        char d[96];
        t->budget = nw.budget;
        snprintf(d, sizeof d, "promoted: resume with budget %lld", (long long)nw.budget);
        trial_set_state(s, t, T_QUEUED, d);
        return t;
    }
    if (n_created >= x->max_trials) {
        json_decref(nw.hparams);
        if (n_active == 0 && x->counts[T_PAUSED] == 0) *finished = 1;
        return NULL;
    }
    if (!nw.hparams) return NULL;
    return trial_create(s, x, &nw);
}

/* Pick the next experiment to serve: highest priority, then least slots in
 * use per unit of weight, then oldest. */
static experiment *pick_experiment(sched *s)
{
    experiment *best = NULL;
    double best_share = 0;
    for (size_t i = 0; i < s->nexps; i++) {
        experiment *x = s->exps[i];
        if (x->state != E_ACTIVE || x->pass == s->pass) continue;
        double share = (double)x->slots_in_use / x->spec.weight;
        if (!best || x->spec.priority > best->spec.priority ||
            (x->spec.priority == best->spec.priority && share < best_share)) {
            best = x;
            best_share = share;
        }
    }
    return best;
}

/* Backfill: the head-of-line experiment x cannot place its next trial.
 * Reserve where that gang will run (placement_reserve) by holding the free
 * slots it needs there for the rest of this pass (hold[i] per agent in
 * s->agents order), so trials behind it in the order only take slots that
 * do not delay it. RET 1 when something was reserved. */
static int reserve_for(sched *s, const experiment *x, int *hold)
{
    place_agent *pa = calloc(s->nagents + 1, sizeof *pa);
    int *res = calloc(s->nagents + 1, sizeof *res), *idx = calloc(s->nagents + 1, sizeof *idx);
    int n = 0, any = 0;
    if (!pa || !res || !idx) goto end;
    for (size_t i = 0; i < s->nagents; i++)
        if (s->agents[i]->alive) { pa[n] = s->agents[i]->pa; pa[n].excluded = 0; idx[n++] = (int)i; }
    if (placement_reserve(pa, n, (int)x->spec.workers, (int)x->spec.slots_per_worker, res)) goto end;
    for (int k = 0; k < n; k++) {
        place_agent *a = &s->agents[idx[k]]->pa;
        int free_slots = a->slots - a->slots_used;
        int h = res[k] < free_slots ? res[k] : free_slots;
        if (h <= 0) continue;
        a->slots_used += h;
        hold[idx[k]] = h;
        s->pass_free = -1;
        any = 1;
    }
end:
    free(pa);
    free(res);
    free(idx);
    return any;
}

static void dispatch_pass(sched *s)
{
    if (!s->dispatch_dirty) return;
    int *hold = calloc(s->nagents + 1, sizeof *hold);   /* backfill holds, released at the end */
    int reserved = 0, placed = 0;
    s->pass++;
    s->pass_free = -1;
    s->last_pass_mono = hf_mono_ms();
    for (int iter = 0; iter < 10000 && s->txn_rc == 0; iter++) {
        experiment *x = pick_experiment(s);
        if (!x) break;
        trial *t = first_queued(x);
        if (!t) {
            int finished = 0;
            int64_t act = exp_active_count(x);
            if (act >= x->spec.max_concurrent && act > 0) { x->pass = s->pass; continue; }
            /* Ask the searcher only for a trial that can be placed now: a
             * trial decided with more results in hand is a better trial,
             * and a freed slot then goes to whatever the searcher wants
             * most (ASHA: a promotion) instead of to a queue decided
             * earlier. Capacity is counted after the backfill holds of
             * this pass. Once max_trials exist next() can only finish the
             * search or promote, so it is asked anyway (to end it). */
            if (!capacity_for(s, x) && (int64_t)x->ntrials < x->max_trials) {
                x->pass = s->pass;
                /* No free slot at all: a reservation would hold nothing. */
                if (!reserved && hold && !x->searcher_done && pass_free(s) > 0) reserved = reserve_for(s, x, hold);
                continue;
            }
            t = searcher_next(s, x, &finished);
            x->waits_report = !t && !finished;
            if (!t) {
                if (finished && exp_active_count(x) == 0 && x->counts[T_PAUSED] == 0)
                    exp_set_state(s, x, E_COMPLETED, "search finished");
                x->pass = s->pass;
                continue;
            }
        }
        if (trial_place(s, t)) {
            x->pass = s->pass;
            if (!reserved && hold && pass_free(s) > 0) reserved = reserve_for(s, x, hold);
        } else {
            placed++;
        }
    }
    for (size_t i = 0; hold && i < s->nagents; i++) s->agents[i]->pa.slots_used -= hold[i];
    free(hold);
    s->pass_free = -1;
    /* Changes made by this pass are its own outcome; only a later change
     * (a freed slot, a new trial state, an agent...) needs another pass. */
    if (s->txn_rc == 0) s->dispatch_dirty = 0;
    int64_t dt = hf_mono_ms() - s->last_pass_mono;
    if (dt >= 50) hf_info("dispatch pass %llu: %d trials placed in %lld ms", (unsigned long long)s->pass, placed, (long long)dt);
}

/* ---------- objective and metric ingestion ---------- */

static int lower_is_better(const char *name)
{
    return strstr(name, "loss") || strstr(name, "err") || strstr(name, "time") || strstr(name, "perplexity");
}

static void trial_report(sched *s, trial *t, const char *name, double v, double x_pos)
{
    experiment *x = t->exp;
    json_object_set_new(t->latest, name, json_real(v));
    t->mver++;
    json_t *b = json_object_get(t->best, name);
    int is_obj = strcmp(name, x->spec.metric) == 0;
    int lower = is_obj ? !x->spec.goal_max : lower_is_better(name);
    if (!b || (lower ? v < json_number_value(b) : v > json_number_value(b)))
        json_object_set_new(t->best, name, json_real(v));
    if (!t->dirty_metrics && !grow((void **)&s->dirty, &s->cdirty, s->ndirty + 1, sizeof *s->dirty)) {
        t->dirty_metrics = 1;
        s->dirty[s->ndirty++] = t;
    }
    if (!is_obj) return;
    if (x->waits_report) s->dispatch_dirty = 1;   /* the searcher may want to run something now */
    if (!t->has_obj || norm(x, v) > norm(x, t->obj)) {
        t->has_obj = 1;
        t->obj = v;
    }
    if (x->best_trial == 0 || norm(x, v) > x->best_norm) {
        x->best_trial = t->id;
        x->best_norm = norm(x, v);
        x->best_raw = v;
        emit(s, "experiment", exp_summary(x));
    }
    if (t->state != T_RUNNING || t->kill_state >= 0) return;
    int d = SEARCH_CONTINUE;
    const char *why = x->spec.searcher_name;
    if (x->srch->ops->on_report) d = x->srch->ops->on_report(x->srch, t->id, x_pos, norm(x, v));
    if (d == SEARCH_CONTINUE && x->med) {
        d = search_median_on_report(x->med, t->id, x_pos, norm(x, v));
        why = "median";
    }
    if (d == SEARCH_STOP) {
        atomic_fetch_add(&metrics.searcher_stops, 1);
        trial_request_kill(s, t, T_STOPPED, why);
    }
}

/* ---------- load / unload ---------- */

static void trial_free(trial *t)
{
    if (!t) return;
    json_decref(t->hparams);
    json_decref(t->latest);
    json_decref(t->best);
    free(t->ranks);
    free(t->view);
    free(t);
}

static void exp_free(experiment *x)
{
    if (!x) return;
    if (x->srch) x->srch->ops->destroy(x->srch);
    search_median_free(x->med);
    experiment_spec_free(&x->spec);
    json_decref(x->config);
    free(x->name);
    free(x->trials);
    free(x);
}

static void agent_free(agent *a)
{
    if (!a) return;
    free(a->name);
    free(a->host);
    free(a->version);
    json_decref(a->gpus);
    free(a->on);
    free(a);
}

static void sched_unload(sched *s)
{
    for (size_t i = 0; i < s->ntrials; i++) trial_free(s->trials[i]);
    for (size_t i = 0; i < s->nexps; i++) exp_free(s->exps[i]);
    for (size_t i = 0; i < s->nagents; i++) agent_free(s->agents[i]);
    s->ntrials = s->nexps = s->nagents = s->nlive = 0;
}

static void agent_set_gpus(agent *a, json_t *gpus /* stolen */)
{
    json_decref(a->gpus);
    a->gpus = gpus ? gpus : json_array();
    a->pa.ngpus = 0;
    size_t i;
    json_t *g;
    json_array_foreach(a->gpus, i, g) {
        if (a->pa.ngpus >= PLACE_MAX_GPUS) break;
        a->pa.gpu_index[a->pa.ngpus++] = (int)json_integer_value(json_object_get(g, "index"));
    }
}

/* Build an experiment's runtime from its stored config. */
static experiment *exp_build(json_t *config /* stolen */, hf_jerr *e)
{
    experiment *x = calloc(1, sizeof *x);
    if (!x) { json_decref(config); return NULL; }
    x->config = config;
    if (experiment_parse(x->config, &x->spec, e)) goto fail;
    x->name = strdup(x->spec.name);
    x->srch = x->spec.ops->create(x->spec.searcher_cfg, x->spec.sp, x->spec.goal_max, x->spec.seed);
    if (!x->srch || !x->name) goto fail;
    /* The base's ops pointer is the dispatcher's to set (search.h leaves it
     * open); setting it here works whether or not create() did. */
    x->srch->ops = x->spec.ops;
    if (x->spec.median_cfg && !(x->med = search_median_new(x->spec.median_cfg))) goto fail;
    x->max_trials = x->spec.max_trials;
    return x;
fail:
    exp_free(x);
    return NULL;
}

static const char *col_text(sqlite3_stmt *st, int i)
{
    const unsigned char *p = sqlite3_column_text(st, i);
    return p ? (const char *)p : "";
}

static json_t *col_json(sqlite3_stmt *st, int i)
{
    const char *p = col_text(st, i);
    json_t *v = json_loads(p, JSON_DECODE_ANY, NULL);
    return v;
}

static int sched_load(sched *s, char *err, size_t errlen)
{
    sqlite3 *db = store_db(s->st);
    sqlite3_stmt *st = NULL;
    int rc = HF_EDB;
    hf_jerr e;
    int64_t now_mono = hf_mono_ms();

    if (sqlite3_prepare_v2(db, "SELECT id,state,config,max_trials,searcher_done,created_at,ended_at "
                               "FROM experiments ORDER BY id", -1, &st, NULL) != SQLITE_OK) goto dberr;
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *cfg = col_json(st, 2);
        experiment *x = cfg ? exp_build(cfg, &e) : NULL;
        if (!x) {
            hf_error("experiment %lld: stored config no longer valid (%s: %s); skipped",
                     (long long)sqlite3_column_int64(st, 0), e.field, e.msg);
            continue;
        }
        x->id = sqlite3_column_int64(st, 0);
        x->state = state_parse(col_text(st, 1), exp_state_names, 4);
        if (x->state < 0) x->state = E_CANCELED;
        x->max_trials = sqlite3_column_int64(st, 3);
        x->searcher_done = sqlite3_column_int(st, 4);
        x->created_at = sqlite3_column_int64(st, 5);
        x->ended_at = sqlite3_column_int64(st, 6);
        if (grow((void **)&s->exps, &s->cexps, s->nexps + 1, sizeof *s->exps)) { exp_free(x); rc = HF_ENOMEM; goto end; }
        s->exps[s->nexps++] = x;
    }
    sqlite3_finalize(st);

    if (sqlite3_prepare_v2(db, "SELECT id,name,host,slots,gpus,version,state,registered_at,last_heartbeat "
                               ",hb_instance,hb_batch FROM agents ORDER BY id", -1, &st, NULL) != SQLITE_OK) goto dberr;
    while (sqlite3_step(st) == SQLITE_ROW) {
        agent *a = calloc(1, sizeof *a);
        if (!a || grow((void **)&s->agents, &s->cagents, s->nagents + 1, sizeof *s->agents)) {
            free(a);
            rc = HF_ENOMEM;
            goto end;
        }
        a->id = sqlite3_column_int64(st, 0);
        a->pa.id = a->id;
        a->name = strdup(col_text(st, 1));
        a->host = strdup(col_text(st, 2));
        a->pa.slots = sqlite3_column_int(st, 3);
        agent_set_gpus(a, col_json(st, 4));
        a->version = strdup(col_text(st, 5));
        /* Agents that were alive get a full timeout to report back. */
        a->alive = strcmp(col_text(st, 6), "ALIVE") == 0;
        a->registered_at = sqlite3_column_int64(st, 7);
        a->last_hb_wall = sqlite3_column_int64(st, 8);
        a->last_hb_mono = now_mono;
        snprintf(a->hb_instance, sizeof a->hb_instance, "%s", col_text(st, 9));
        a->hb_batch = sqlite3_column_int64(st, 10);
        s->agents[s->nagents++] = a;
    }
    sqlite3_finalize(st);

    if (sqlite3_prepare_v2(db, "SELECT id,experiment_id,idx,state,hparams,budget,parent_trial,attempt,restarts,"
                               "agent_id,port,exit_code,objective,latest,best,kill_state,kill_reason,fail_agent,"
                               "fail_streak,created_at,started_at,ended_at FROM trials ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK) goto dberr;
    while (sqlite3_step(st) == SQLITE_ROW) {
        experiment *x = exp_find(s, sqlite3_column_int64(st, 1));
        if (!x) continue;
        trial *t = trial_new_mem(s, x);
        if (!t) { rc = HF_ENOMEM; goto end; }
        t->id = sqlite3_column_int64(st, 0);
        t->idx = sqlite3_column_int64(st, 2);
        t->state = state_parse(col_text(st, 3), sched_trial_state_names, T__N);
        if (t->state < 0) t->state = T_FAILED;
        t->hparams = col_json(st, 4);
        if (!t->hparams) t->hparams = json_object();
        t->budget = sqlite3_column_int64(st, 5);
        t->parent = sqlite3_column_int64(st, 6);
        t->attempt = sqlite3_column_int64(st, 7);
        t->restarts = sqlite3_column_int64(st, 8);
        t->agent_id = sqlite3_column_int64(st, 9);
        t->port = sqlite3_column_int(st, 10);
        t->has_exit = sqlite3_column_type(st, 11) != SQLITE_NULL;
        t->exit_code = sqlite3_column_int(st, 11);
        t->has_obj = sqlite3_column_type(st, 12) != SQLITE_NULL;
        t->obj = sqlite3_column_double(st, 12);
        json_t *l = col_json(st, 13), *b = col_json(st, 14);
        if (json_is_object(l)) { json_decref(t->latest); t->latest = l; } else json_decref(l);
        if (json_is_object(b)) { json_decref(t->best); t->best = b; } else json_decref(b);
        t->kill_state = sqlite3_column_type(st, 15) == SQLITE_NULL ? -1
                      : state_parse(col_text(st, 15), sched_trial_state_names, T__N);
        snprintf(t->kill_reason, sizeof t->kill_reason, "%s", col_text(st, 16));
        t->fail_agent = sqlite3_column_int64(st, 17);
        t->fail_streak = sqlite3_column_int64(st, 18);
        t->created_at = sqlite3_column_int64(st, 19);
        t->started_at = sqlite3_column_int64(st, 20);
        t->ended_at = sqlite3_column_int64(st, 21);
        t->ready_mono = now_mono;
        trial_index(s, x, t);
        if (t->has_obj && (x->best_trial == 0 || norm(x, t->obj) > x->best_norm)) {
            x->best_trial = t->id;
            x->best_norm = norm(x, t->obj);
            x->best_raw = t->obj;
        }
        if (t->port >= s->next_port && t->port < s->cfg.port_base + s->cfg.port_count) s->next_port = t->port + 1;
    }
    sqlite3_finalize(st);

    /* Live allocations of current attempts rebuild agent capacity. */
    if (sqlite3_prepare_v2(db, "SELECT trial_id,attempt,rank,agent_id,slots,gpus,started,exited,exit_code "
                               "FROM allocations WHERE released_at IS NULL ORDER BY trial_id,rank",
                           -1, &st, NULL) != SQLITE_OK) goto dberr;
    while (sqlite3_step(st) == SQLITE_ROW) {
        trial *t = trial_find(s, sqlite3_column_int64(st, 0));
        agent *a = agent_find(s, sqlite3_column_int64(st, 3));
        if (!t || !a || t->attempt != sqlite3_column_int64(st, 1) || !(t->state == T_ASSIGNED || t->state == T_RUNNING))
            continue;
        int W = (int)t->exp->spec.workers, r = sqlite3_column_int(st, 2);
        if (r < 0 || r >= W) continue;
        if (!t->ranks) {
            t->ranks = calloc((size_t)W, sizeof *t->ranks);
            if (!t->ranks) { rc = HF_ENOMEM; goto end; }
            t->nranks = W;
            live_add(s, t);
            for (int k = 0; k < W; k++) { t->ranks[k].rank = k; t->ranks[k].exited = 1; t->ranks[k].agent_id = 0; }
        }
        trial_rank *tr = &t->ranks[r];
        tr->agent_id = a->id;
        tr->slots = sqlite3_column_int(st, 4);
        tr->st = sqlite3_column_int(st, 6);
        /* When an assignment went out is not stored (a monotonic clock does
         * not survive a restart): the agent gets the whole assign timeout
         * from now. With 0 here the first tick failed every assignment that
         * was sent but not yet reported started ("assignment not
         * acknowledged") although the agent was running it. */
        tr->sent_mono = now_mono;
        tr->exited = sqlite3_column_int(st, 7);
        tr->exit_code = sqlite3_column_int(st, 8);
        json_t *g = col_json(st, 5);
        size_t gi;
        json_t *gv;
        tr->ngpu = 0;
        json_array_foreach(g, gi, gv) if (tr->ngpu < PLACE_MAX_GPUS) tr->gpu[tr->ngpu++] = (int)json_integer_value(gv);
        json_decref(g);
        place_rank pr = {.agent = 0, .ngpu = tr->ngpu};
        memcpy(pr.gpu, tr->gpu, sizeof pr.gpu);
        a->pa.slots_used += tr->slots;
        for (int k = 0; k < tr->ngpu; k++)
            for (int q = 0; q < a->pa.ngpus; q++)
                if (a->pa.gpu_index[q] == tr->gpu[k]) a->pa.gpu_used |= 1ull << q;
        t->exp->slots_in_use += tr->slots;
    }
    sqlite3_finalize(st);
    for (size_t i = 0; i < s->nlive; i++) agent_link(s, s->live[i]);
    s->dispatch_dirty = 1;
    for (size_t i = 0; i < s->ntrials; i++) {
        trial *t = s->trials[i];
        for (int r = 0; r < t->nranks; r++)
            for (int q = 0; q < r; q++)
                if (t->ranks[q].agent_id == t->ranks[r].agent_id) t->ranks[r].local_rank++;
    }

    /* Replay each experiment's history through a fresh searcher. */
    st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT m.trial_id,m.step,m.epoch,m.value FROM metrics m JOIN trials t "
                               "ON t.id=m.trial_id WHERE t.experiment_id=? AND m.name=? ORDER BY m.seq",
                           -1, &st, NULL) != SQLITE_OK) goto dberr;
    for (size_t i = 0; i < s->nexps; i++) {
        experiment *x = s->exps[i];
        for (size_t k = 0; k < x->ntrials; k++) {
            trial *t = x->trials[k];
            if (x->srch->ops->on_created)
                x->srch->ops->on_created(x->srch, t->id, t->idx, t->hparams, t->budget, t->parent);
        }
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, x->id);
        sqlite3_bind_text(st, 2, x->spec.metric, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            trial *t = trial_find(s, sqlite3_column_int64(st, 0));
            if (!t) continue;
            t->nreports++;
            double xp = sqlite3_column_type(st, 2) != SQLITE_NULL ? sqlite3_column_double(st, 2)
                      : sqlite3_column_type(st, 1) != SQLITE_NULL ? (double)sqlite3_column_int64(st, 1)
                      : (double)t->nreports;
            double v = norm(x, sqlite3_column_double(st, 3));
            if (x->srch->ops->on_report) x->srch->ops->on_report(x->srch, t->id, xp, v);
            if (x->med) search_median_on_report(x->med, t->id, xp, v);
        }
        for (size_t k = 0; k < x->ntrials; k++)
            if (is_terminal(x->trials[k]->state)) trial_done_notify(x->trials[k], x->trials[k]->state);
    }
    rc = 0;
    goto end;
dberr:
    snprintf(err, errlen, "loading state: %s", sqlite3_errmsg(db));
    rc = HF_EDB;
end:
    sqlite3_finalize(st);
    if (rc && rc != HF_EDB) snprintf(err, errlen, "loading state: %s", hf_strerror(rc));
    return rc;
}

/* ---------- public API ---------- */

void sched_config_defaults(sched_config *c)
{
    c->agent_timeout_ms = 10000;
    c->heartbeat_ms = 1000;
    c->heartbeat_fast_ms = 250;
    c->heartbeat_rate = 1000;
    c->assign_timeout_ms = 60000;
    c->max_log_lines = 100000;
    c->max_log_line = 8192;
    c->max_metric_names = 256;
    c->port_base = 29500;
    c->port_count = 10000;
}

int sched_new(const sched_config *cfg, store *st, events_hub *ev, sched **out, char *err, size_t errlen)
{
    *out = NULL;
    sched *s = calloc(1, sizeof *s);
    if (!s) return HF_ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->grp_cv, NULL);
    s->cfg = *cfg;
    if (s->cfg.port_count <= 0) s->cfg.port_count = 10000;
    s->st = st;
    s->ev = ev;
    s->pending = json_array();
    s->next_port = s->cfg.port_base;
    s->hb_fast_eff = s->cfg.heartbeat_fast_ms;
    s->hb_idle_eff = s->cfg.heartbeat_ms;
    int rc = sched_load(s, err, errlen);
    if (rc) { sched_free(s); return rc; }
    *out = s;
    return 0;
}

void sched_free(sched *s)
{
    if (!s) return;
    sched_unload(s);
    free(s->exps);
    free(s->trials);
    free(s->live);
    free(s->agents);
    free(s->rings);
    free(s->dirty);
    json_decref(s->pending);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->grp_cv);
    free(s);
}

int sched_experiment_submit(sched *s, const json_t *cfg_in, int64_t *id, hf_jerr *e)
{
    json_t *cfg = json_deep_copy(cfg_in);
    if (!cfg) return HF_ENOMEM;
    experiment *x = exp_build(cfg, e);   /* validates; cfg now owned by x */
    if (!x) return e->msg[0] ? HF_EINVAL : HF_ENOMEM;
    char *text = hf_json_dump(x->config);
    if (!text) { exp_free(x); return HF_ENOMEM; }
    pthread_mutex_lock(&s->lock);
    int rc = grow((void **)&s->exps, &s->cexps, s->nexps + 1, sizeof *s->exps);
    if (rc) goto end;
    txn_begin(s);
    x->created_at = hf_wall_ms();
    x->state = E_ACTIVE;
    sqlite3_stmt *st = store_stmt(s->st, ST_EXP_INSERT);
    sqlite3_bind_text(st, 1, x->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, "ACTIVE", -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, x->max_trials);
    sqlite3_bind_int64(st, 5, x->created_at);
    db_exec(s, st);
    if (s->txn_rc == 0) {
        x->id = sqlite3_last_insert_rowid(store_db(s->st));
        s->exps[s->nexps++] = x;
        x = NULL;
        experiment *nx = s->exps[s->nexps - 1];
        *id = nx->id;
        event_row(s, nx->id, 0, "ACTIVE", "submitted");
        emit(s, "experiment", exp_summary(nx));
        s->dispatch_dirty = 1;
        dispatch_pass(s);
    }
    rc = txn_end(s);   /* on failure the reload drops the unsaved experiment */
end:
    pthread_mutex_unlock(&s->lock);
    if (x) exp_free(x);
    free(text);
    return rc;
}

int sched_experiment_list(sched *s, json_t **out)
{
    pthread_mutex_lock(&s->lock);
    json_t *a = json_array();
    for (size_t i = 0; i < s->nexps; i++) json_array_append_new(a, exp_summary(s->exps[i]));
    pthread_mutex_unlock(&s->lock);
    *out = json_pack("{so}", "experiments", a);
    return *out ? 0 : HF_ENOMEM;
}

int sched_experiment_get(sched *s, int64_t id, json_t **out)
{
    int rc = HF_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (x) {
        *out = exp_summary(x);
        json_object_set_new(*out, "config", json_deep_copy(x->config));
        if (x->srch && x->srch->ops->describe) {
            json_t *d = x->srch->ops->describe(x->srch);
            if (d) json_object_set_new(*out, "searcher_state", d);
        }
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_experiment_action(sched *s, int64_t id, const char *action, json_t **out, hf_jerr *e)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (!x) { rc = HF_ENOTFOUND; goto end; }
    txn_begin(s);
    if (strcmp(action, "pause") == 0) {
        if (x->state != E_ACTIVE && x->state != E_PAUSED) {
            rc = hf_jerr_set(e, "", NULL, "experiment is %s; only an ACTIVE experiment can be paused",
                             exp_state_names[x->state]);
            rc = HF_ESTATE;
        } else if (x->state == E_ACTIVE) {
            exp_set_state(s, x, E_PAUSED, "paused by user");
            for (size_t i = 0; i < x->ntrials; i++)
                if (is_active(x->trials[i]->state)) trial_request_kill(s, x->trials[i], T_PAUSED, "pause");
        }
    } else if (strcmp(action, "resume") == 0) {
        if (x->state != E_ACTIVE && x->state != E_PAUSED) {
            hf_jerr_set(e, "", NULL, "experiment is %s; only a PAUSED experiment can be resumed (use extend)",
                        exp_state_names[x->state]);
            rc = HF_ESTATE;
        } else if (x->state == E_PAUSED) {
            exp_set_state(s, x, E_ACTIVE, "resumed by user");
            for (size_t i = 0; i < x->ntrials; i++)
                if (x->trials[i]->state == T_PAUSED) trial_set_state(s, x->trials[i], T_QUEUED, "resume");
            s->dispatch_dirty = 1;
            dispatch_pass(s);
        }
    } else if (strcmp(action, "cancel") == 0) {
        if (x->state == E_COMPLETED || x->state == E_CANCELED) {
            hf_jerr_set(e, "", NULL, "experiment is already %s", exp_state_names[x->state]);
            rc = HF_ESTATE;
        } else {
            exp_set_state(s, x, E_CANCELED, "canceled by user");
            for (size_t i = 0; i < x->ntrials; i++)
                if (!is_terminal(x->trials[i]->state)) trial_request_kill(s, x->trials[i], T_CANCELED, "cancel");
            s->dispatch_dirty = 1;
            dispatch_pass(s);
        }
    } else {
        hf_jerr_set(e, "", NULL, "unknown action \"%s\"", action);
        rc = HF_ENOTFOUND;
    }
    if (rc) { store_rollback(s->st); json_array_clear(s->pending); goto end; }
    rc = txn_end(s);
    x = exp_find(s, id);
    if (rc == 0 && x) *out = exp_summary(x);
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_experiment_extend(sched *s, int64_t id, const json_t *body, json_t **out, hf_jerr *e)
{
    static const char *const keys[] = {"max_trials", "add_trials", NULL};
    int64_t mt = 0, add = 0;
    int rc;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "max_trials", 0, 1, 1000000, &mt, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "add_trials", 0, 1, 1000000, &add, e))) return rc;
    if (!mt && !add) return hf_jerr_set(e, "", "max_trials", "give max_trials (new total) or add_trials");
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (!x) { rc = HF_ENOTFOUND; goto end; }
    if (x->state == E_CANCELED) {
        hf_jerr_set(e, "", NULL, "a CANCELED experiment cannot be extended");
        rc = HF_ESTATE;
        goto end;
    }
    int64_t nm = mt ? mt : x->max_trials + add;
    if (nm <= x->max_trials) {
        rc = hf_jerr_set(e, "", "max_trials", "must exceed the current max_trials (%lld)", (long long)x->max_trials);
        goto end;
    }
    txn_begin(s);
    x->max_trials = nm;
    x->searcher_done = 0;
    if (x->state == E_COMPLETED) exp_set_state(s, x, E_ACTIVE, "extended");
    else exp_save(s, x);
    char d[64];
    snprintf(d, sizeof d, "max_trials %lld", (long long)nm);
    event_row(s, x->id, 0, "EXTENDED", d);
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    rc = txn_end(s);
    x = exp_find(s, id);
    if (rc == 0 && x) *out = exp_summary(x);
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_experiment_trials(sched *s, int64_t id, json_t **out)
{
    int rc = HF_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (x) {
        json_t *a = json_array();
        for (size_t i = 0; i < x->ntrials; i++) json_array_append_new(a, trial_view(s, x->trials[i]));
        *out = json_pack("{so}", "trials", a);
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_experiment_trials_text(sched *s, int64_t id, char **out, size_t *len)
{
    static const char head[] = "{\"trials\":[", tail[] = "]}";
    int rc = HF_ENOTFOUND;
    char *text = NULL;
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (!x) goto end;
    size_t n = sizeof head - 1 + sizeof tail;   /* tail's NUL included */
    for (size_t i = 0; i < x->ntrials; i++) {
        if ((rc = trial_view_fresh(s, x->trials[i]))) goto end;
        n += x->trials[i]->view_len + 1;
    }
    rc = HF_ENOMEM;
    if (!(text = malloc(n))) goto end;
    char *p = text;
    memcpy(p, head, sizeof head - 1);
    p += sizeof head - 1;
    for (size_t i = 0; i < x->ntrials; i++) {
        if (i) *p++ = ',';
        memcpy(p, x->trials[i]->view, x->trials[i]->view_len);
        p += x->trials[i]->view_len;
    }
    memcpy(p, tail, sizeof tail);
    *len = (size_t)(p - text) + sizeof tail - 1;
    *out = text;
    text = NULL;
    rc = 0;
end:
    pthread_mutex_unlock(&s->lock);
    free(text);
    return rc;
}

static const experiment *sort_exp;
static int by_objective(const void *a, const void *b)
{
    const trial *x = *(trial *const *)a, *y = *(trial *const *)b;
    double vx = norm(sort_exp, x->obj), vy = norm(sort_exp, y->obj);
    return vx > vy ? -1 : vx < vy ? 1 : (x->id > y->id) - (x->id < y->id);
}

int sched_experiment_top(sched *s, int64_t id, int64_t k, json_t **out)
{
    int rc = HF_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (x) {
        trial **v = malloc((x->ntrials + 1) * sizeof *v);
        size_t n = 0;
        rc = HF_ENOMEM;
        if (v) {
            for (size_t i = 0; i < x->ntrials; i++)
                if (x->trials[i]->has_obj) v[n++] = x->trials[i];
            sort_exp = x;   /* under the core lock: single sorter at a time */
            qsort(v, n, sizeof *v, by_objective);
            json_t *a = json_array();
            for (size_t i = 0; i < n && (int64_t)i < k; i++) json_array_append_new(a, trial_view(s, v[i]));
            *out = json_pack("{so}", "trials", a);
            free(v);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_experiment_export(sched *s, int64_t id, json_t **summary, json_t **trials)
{
    int rc = HF_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    experiment *x = exp_find(s, id);
    if (x) {
        *summary = exp_summary(x);
        json_object_set_new(*summary, "config", json_deep_copy(x->config));
        json_t *a = json_array();
        for (size_t i = 0; i < x->ntrials; i++) json_array_append_new(a, trial_view(s, x->trials[i]));
        *trials = a;
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_trial_exists(sched *s, int64_t id)
{
    pthread_mutex_lock(&s->lock);
    int ok = trial_find(s, id) != NULL;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

int sched_trial_get(sched *s, int64_t id, json_t **out)
{
    int rc = HF_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    trial *t = trial_find(s, id);
    if (t) {
        *out = trial_view(s, t);
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_trial_kill(sched *s, int64_t id, json_t **out, hf_jerr *e)
{
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    trial *t = trial_find(s, id);
    if (!t) { rc = HF_ENOTFOUND; goto end; }
    if (is_terminal(t->state)) {
        hf_jerr_set(e, "", NULL, "trial is already %s", sched_trial_state_names[t->state]);
        rc = HF_ESTATE;
        goto end;
    }
    txn_begin(s);
    trial_request_kill(s, t, T_CANCELED, "user");
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    rc = txn_end(s);
    t = trial_find(s, id);
    if (rc == 0 && t) *out = trial_view(s, t);
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---------- agents ---------- */

static int name_ok(const char *n)
{
    if (!*n) return 0;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') || *n == '-' ||
              *n == '_' || *n == '.' || *n == ':'))
            return 0;
    return 1;
}

/* Validate a "running" array (registration and heartbeat). */
static int check_running(const json_t *body, hf_jerr *e, json_t **out)
{
    int rc;
    *out = NULL;
    if ((rc = hf_json_get_array(body, "", "running", 0, 100000, out, e))) return rc;
    size_t i;
    json_t *it;
    json_array_foreach(*out, i, it) {
        char p[48];
        int64_t x;
        hf_jpath_index(p, sizeof p, "running", i);
        if (!json_is_object(it)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(it, p, "trial_id", 1, 1, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "attempt", 1, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "pid", 0, 0, INT32_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "rank", 0, 0, 100000, &x, e))) return rc;
    }
    return 0;
}

static int running_has(const json_t *running, int64_t tid, int64_t attempt, int rank, int nranks_here)
{
    size_t i;
    json_t *it;
    json_array_foreach(running, i, it) {
        if (json_integer_value(json_object_get(it, "trial_id")) != tid) continue;
        if (json_integer_value(json_object_get(it, "attempt")) != attempt) continue;
        json_t *r = json_object_get(it, "rank");
        if (r && json_integer_value(r) != rank && nranks_here > 1) continue;
        return 1;
    }
    return 0;
}

/* Does a still have a live rank of (tid, att)? Processes it lists that
 * fail this are stale: they get a kill and hold their slots until gone. */
static int agent_knows(sched *s, const agent *a, int64_t tid, int64_t att, trial **out)
{
    trial *t = trial_find(s, tid);
    *out = t;
    if (t && t->attempt == att && t->ranks)
        for (int r = 0; r < t->nranks; r++)
            if (t->ranks[r].agent_id == a->id && !t->ranks[r].exited) return 1;
    return 0;
}

/* Count the slots of the stale processes in running[] as used on a. */
static void agent_stale_update(sched *s, agent *a, const json_t *running)
{
    size_t i;
    json_t *it;
    int stale = 0;
    json_array_foreach(running, i, it) {
        trial *t;
        if (agent_knows(s, a, json_integer_value(json_object_get(it, "trial_id")),
                        json_integer_value(json_object_get(it, "attempt")), &t)) continue;
        stale += t ? (int)t->exp->spec.slots_per_worker : 1;
    }
    if (stale == a->stale_slots) return;
    a->pa.slots_used += stale - a->stale_slots;
    if (a->pa.slots_used < 0) a->pa.slots_used = 0;
    a->stale_slots = stale;
    s->dispatch_dirty = 1;
}

int sched_agent_register(sched *s, const json_t *body, const char *peer_ip, json_t **out, hf_jerr *e)
{
    static const char *const keys[] = {"name", "slots", "gpus", "host", "version", "running", "labels", NULL};
    const char *name = NULL, *host = NULL, *version = NULL;
    int64_t slots = 0;
    json_t *gpus = NULL, *running = NULL;
    int rc;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "name", 1, 128, &name, e))) return rc;
    if (!name_ok(name)) return hf_jerr_set(e, "", "name", "must be 1-128 characters of [A-Za-z0-9._:-]");
    if ((rc = hf_json_get_int(body, "", "slots", 1, 0, 4096, &slots, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "host", 0, 255, &host, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "version", 0, 64, &version, e))) return rc;
    if ((rc = hf_json_get_array(body, "", "gpus", 0, PLACE_MAX_GPUS, &gpus, e))) return rc;
    size_t i;
    json_t *g;
    json_array_foreach(gpus, i, g) {
        char p[32];
        int64_t x;
        const char *gn;
        hf_jpath_index(p, sizeof p, "gpus", i);
        if (!json_is_object(g)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(g, p, "index", 1, 0, 1023, &x, e))) return rc;
        if ((rc = hf_json_get_string(g, p, "name", 0, 128, &gn, e))) return rc;
        if ((rc = hf_json_get_int(g, p, "memory_mb", 0, 0, INT64_MAX, &x, e))) return rc;
    }
    if ((rc = check_running(body, e, &running))) return rc;
    if (!host || !*host) host = peer_ip ? peer_ip : "127.0.0.1";

    int64_t aid = 0;
    pthread_mutex_lock(&s->lock);
    txn_begin(s);
    int64_t now = hf_wall_ms();
    agent *a = agent_by_name(s, name);
    json_t *no_gpus = json_array();
    char *gj = hf_json_dump(gpus ? gpus : no_gpus);
    if (!a) {
        if ((rc = grow((void **)&s->agents, &s->cagents, s->nagents + 1, sizeof *s->agents))) goto fail;
        a = calloc(1, sizeof *a);
        if (!a) { rc = HF_ENOMEM; goto fail; }
        sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_INSERT);
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, host, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, slots);
        store_bind_text(st, 4, gj ? gj : "[]");
        store_bind_text(st, 5, version);
        sqlite3_bind_text(st, 6, "ALIVE", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 7, now);
        sqlite3_bind_int64(st, 8, now);
        db_exec(s, st);
        if (s->txn_rc) { free(a); goto fail_txn; }
        a->id = sqlite3_last_insert_rowid(store_db(s->st));
        a->pa.id = a->id;
        a->name = strdup(name);
        s->agents[s->nagents++] = a;
    } else {
        sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_UPDATE);
        sqlite3_bind_text(st, 1, host, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, slots);
        store_bind_text(st, 3, gj ? gj : "[]");
        store_bind_text(st, 4, version);
        sqlite3_bind_text(st, 5, "ALIVE", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 6, now);
        sqlite3_bind_int64(st, 7, now);
        sqlite3_bind_int64(st, 8, a->id);
        db_exec(s, st);
    }
    free(a->host);
    a->host = xstrdup(host);
    free(a->version);
    a->version = xstrdup(version ? version : "");
    a->pa.slots = (int)slots;
    agent_set_gpus(a, json_deep_copy(gpus ? gpus : no_gpus));
    a->alive = 1;
    a->last_hb_mono = hf_mono_ms();
    a->last_hb_wall = now;
    a->registered_at = now;
    event_row(s, 0, 0, "AGENT_REGISTERED", name);
    /* Reconcile: ranks it still runs are re-adopted; placed ranks it does
     * not list were lost with it (unsent ones are sent again). */
    size_t nsnap = 0;
    trial **snap = live_snapshot(s, &nsnap);
    for (size_t k = 0; k < nsnap; k++) {
        trial *t = snap[k];
        int here = 0;
        for (int r = 0; r < t->nranks; r++) here += t->ranks[r].agent_id == a->id && !t->ranks[r].exited;
        for (int r = 0; r < t->nranks && t->ranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != a->id || tr->exited) continue;
            if (running_has(running, t->id, t->attempt, tr->rank, here)) {
                if (tr->st != R_STARTED) {
                    tr->st = R_STARTED;
                    rank_save(s, t, tr);
                    if (t->state == T_ASSIGNED) {
                        if (!t->started_at) t->started_at = now;
                        trial_set_state(s, t, T_RUNNING, "re-adopted");
                    }
                }
            } else if (tr->st == R_STARTED) {
                rank_exited(s, t, tr, -1, "lost: agent restarted without it");
                if (!t->ranks) break;
            } else {
                tr->st = R_NEW;   /* send the assignment again */
                ring_note(s, a->id);
            }
        }
    }
    free(snap);
    agent_stale_update(s, a, running);
    emit(s, "agent", agent_view(s, a));
    s->dispatch_dirty = 1;
    dispatch_pass(s);
    aid = a->id;
fail_txn:
    rc = txn_end(s);
    if (rc == 0)
        *out = json_pack("{sIsIso}", "id", (json_int_t)aid, "heartbeat_interval_ms", (json_int_t)s->hb_fast_eff,
                         "token", json_null());
    goto end;
fail:
    store_rollback(s->st);
    json_array_clear(s->pending);
end:
    free(gj);
    json_decref(no_gpus);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Validate the whole heartbeat before applying any of it. */
static int heartbeat_check(const json_t *body, hf_jerr *e, json_t **running, json_t **events, json_t **mets,
                           json_t **logs)
{
    static const char *const keys[] = {"running", "events", "metrics", "logs", "time", "slots_free",
                                       "instance", "batch", NULL};
    int rc;
    const char *inst = NULL;
    int64_t batch = 0;
    if (!json_is_object(body)) return hf_jerr_set(e, "", NULL, "expected a JSON object");
    if ((rc = hf_json_only_keys(body, "", keys, e))) return rc;
    if ((rc = hf_json_get_string(body, "", "instance", 0, 64, &inst, e))) return rc;
    if ((rc = hf_json_get_int(body, "", "batch", 0, 1, INT64_MAX, &batch, e))) return rc;
    if (inst && !*inst) return hf_jerr_set(e, "", "instance", "must not be empty");
    if (!inst != !json_object_get(body, "batch")) return hf_jerr_set(e, "", inst ? "batch" : "instance",
                                                                      "instance and batch go together");
    if ((rc = check_running(body, e, running))) return rc;
    if ((rc = hf_json_get_array(body, "", "events", 0, MAX_HB_ITEMS, events, e))) return rc;
    if ((rc = hf_json_get_array(body, "", "metrics", 0, MAX_HB_ITEMS, mets, e))) return rc;
    if ((rc = hf_json_get_array(body, "", "logs", 0, MAX_HB_ITEMS, logs, e))) return rc;
    size_t i;
    json_t *it;
    json_array_foreach(*events, i, it) {
        char p[48];
        int64_t x;
        const char *type, *err;
        hf_jpath_index(p, sizeof p, "events", i);
        if (!json_is_object(it)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(it, p, "trial_id", 1, 1, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "attempt", 1, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_string(it, p, "type", 1, 32, &type, e))) return rc;
        if (strcmp(type, "started") && strcmp(type, "exited") && strcmp(type, "start_failed"))
            return hf_jerr_set(e, p, "type", "must be started, exited or start_failed");
        if ((rc = hf_json_get_int(it, p, "time", 0, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "pid", 0, 0, INT32_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "rank", 0, 0, 100000, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "exit_code", 0, -1000, 1000, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "signal", 0, 0, 1000, &x, e))) return rc;
        if ((rc = hf_json_get_string(it, p, "error", 0, 4096, &err, e))) return rc;
    }
    json_array_foreach(*mets, i, it) {
        char p[48], pv[64];
        int64_t x;
        double d;
        const char *ck, *k;
        json_t *vals, *v;
        hf_jpath_index(p, sizeof p, "metrics", i);
        if (!json_is_object(it)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(it, p, "trial_id", 1, 1, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "attempt", 1, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "time", 0, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "step", 0, INT64_MIN, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_number(it, p, "epoch", 0, -1e18, 1e18, &d, e))) return rc;
        if ((rc = hf_json_get_string(it, p, "checkpoint", 0, HF_METRIC_PATH_MAX, &ck, e))) return rc;
        if ((rc = hf_json_get_object(it, p, "values", 1, &vals, e))) return rc;
        if (json_object_size(vals) > HF_METRIC_MAX_NAMES)
            return hf_jerr_set(e, p, "values", "more than %d metrics", HF_METRIC_MAX_NAMES);
        snprintf(pv, sizeof pv, "%s.values", p);
        json_object_foreach(vals, k, v) {
            if (!hf_metric_name_ok(k)) return hf_jerr_set(e, pv, k, "not a valid metric name");
            if (!json_is_number(v)) return hf_jerr_set(e, pv, k, "must be a number");
        }
    }
    json_array_foreach(*logs, i, it) {
        char p[48];
        int64_t x;
        const char *str;
        hf_jpath_index(p, sizeof p, "logs", i);
        if (!json_is_object(it)) return hf_jerr_set(e, p, NULL, "must be an object");
        if ((rc = hf_json_get_int(it, p, "trial_id", 1, 1, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "attempt", 1, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_int(it, p, "time", 0, 0, INT64_MAX, &x, e))) return rc;
        if ((rc = hf_json_get_string(it, p, "stream", 1, 16, &str, e))) return rc;
        if (strcmp(str, "stdout") && strcmp(str, "stderr"))
            return hf_jerr_set(e, p, "stream", "must be stdout or stderr");
        if ((rc = hf_json_get_string(it, p, "line", 1, 1u << 20, &str, e))) return rc;
    }
    return 0;
}

/* The rank an item refers to: explicit "rank", else the first rank of the
 * trial on this agent matching want (a predicate on rank state). */
static trial_rank *item_rank(trial *t, int64_t agent_id, const json_t *it, int want_unstarted)
{
    json_t *r = json_object_get(it, "rank");
    for (int k = 0; k < t->nranks; k++) {
        trial_rank *tr = &t->ranks[k];
        if (tr->agent_id != agent_id || tr->exited) continue;
        if (r) {
            if (tr->rank == json_integer_value(r)) return tr;
            continue;
        }
        if (want_unstarted && tr->st == R_STARTED) continue;
        return tr;
    }
    return NULL;
}

/* Is item (trial_id, attempt) current and placed on agent a? */
static trial *item_trial(sched *s, const agent *a, const json_t *it)
{
    trial *t = trial_find(s, json_integer_value(json_object_get(it, "trial_id")));
    if (!t || t->attempt != json_integer_value(json_object_get(it, "attempt")) || !t->ranks) return NULL;
    for (int k = 0; k < t->nranks; k++)
        if (t->ranks[k].agent_id == a->id) return t;
    return NULL;
}

static void utf8_truncate(const char *s, size_t *len, size_t max)
{
    if (*len <= max) return;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    *len = n;
}

static json_t *assignment(sched *s, trial *t, trial_rank *tr)
{
    experiment *x = t->exp;
    agent *a0 = agent_find(s, t->ranks[0].agent_id);
    char buf[64], master[300], ckdir[128];
    json_t *env = json_object();
    char *hp = hf_json_dump(t->hparams);
#define SETENV(k, v) json_object_set_new(env, k, json_string(v))
#define SETENVI(k, v) do { snprintf(buf, sizeof buf, "%lld", (long long)(v)); SETENV(k, buf); } while (0)
    if (x->spec.env) json_object_update(env, x->spec.env);
    SETENVI("HYPERFARM_TRIAL_ID", t->id);
    SETENVI("HYPERFARM_EXPERIMENT_ID", x->id);
    SETENV("HYPERFARM_HPARAMS", hp ? hp : "{}");
    SETENVI("HYPERFARM_RANK", tr->rank);
    SETENVI("HYPERFARM_WORLD_SIZE", t->nranks);
    SETENVI("HYPERFARM_LOCAL_RANK", tr->local_rank);
    SETENVI("HYPERFARM_ATTEMPT", t->attempt);
    snprintf(master, sizeof master, "%s:%d", a0 ? a0->host : "127.0.0.1", t->port);
    SETENV("HYPERFARM_MASTER", master);
    int64_t budget = t->budget > 0 ? t->budget : x->spec.max_epochs;
    if (budget > 0) {
        SETENVI("HYPERFARM_MAX_EPOCHS", budget);
        SETENVI("HYPERFARM_BUDGET", budget);
    }
    json_t *dist = json_object_get(json_object_get(x->config, "trial"), "distributed");
    const char *dk;
    json_t *dv;
    json_object_foreach(dist, dk, dv) {
        char name[64];
        snprintf(name, sizeof name, "HYPERFARM_DIST_%s", dk);
        for (char *c = name; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        if (json_is_string(dv)) SETENV(name, json_string_value(dv));
        else if (json_is_integer(dv)) SETENVI(name, json_integer_value(dv));
    }
#undef SETENV
#undef SETENVI
    free(hp);
    json_t *gpus = json_array();
    for (int k = 0; k < tr->ngpu; k++) json_array_append_new(gpus, json_integer(tr->gpu[k]));
    snprintf(ckdir, sizeof ckdir, "experiments/%lld/trials/%lld/checkpoints", (long long)x->id, (long long)t->id);
    json_t *as = json_pack("{sIsIsIsisOsosssisosI}", "trial_id", (json_int_t)t->id, "attempt", (json_int_t)t->attempt,
                           "experiment_id", (json_int_t)x->id, "rank", tr->rank, "argv", x->spec.argv, "env", env,
                           "checkpoint_dir", ckdir, "slots", tr->slots, "gpus", gpus,
                           "grace_ms", (json_int_t)x->spec.grace_ms);
    /* Launcher trials: rank 0 runs the command (mpirun) with a host file
     * of the placement, one entry per agent in rank order with as many
     * slots as ranks placed there; the other ranks hold their slots. */
    if (x->spec.launcher_mpirun) {
        json_object_set_new(as, "launcher", json_string("mpirun"));
        if (tr->rank == 0) {
            json_t *hosts = json_array();
            for (int r = 0; r < t->nranks; r++) {
                int seen = 0, n = 0;
                for (int q = 0; q < r; q++) seen |= t->ranks[q].agent_id == t->ranks[r].agent_id;
                if (seen) continue;
                for (int q = r; q < t->nranks; q++) n += t->ranks[q].agent_id == t->ranks[r].agent_id;
                agent *ra = agent_find(s, t->ranks[r].agent_id);
                json_array_append_new(hosts, json_pack("{sssi}", "host", ra ? ra->host : "127.0.0.1", "slots", n));
            }
            json_object_set_new(as, "hosts", hosts);
        } else {
            json_object_set_new(as, "hold", json_true());
        }
    }
    /* PBT exploit: start from a copy of the parent's newest checkpoint
     * (first attempt only; restarts resume from the trial's own). */
    if (t->parent > 0 && t->attempt == 1 && t->restarts == 0) {
        char pdir[128];
        snprintf(pdir, sizeof pdir, "experiments/%lld/trials/%lld/checkpoints", (long long)x->id, (long long)t->parent);
        json_object_set_new(as, "copy_checkpoint_from", json_string(pdir));
    }
    return as;
}

int sched_agent_heartbeat(sched *s, int64_t agent_id, const json_t *body, json_t **out, hf_jerr *e)
{
    json_t *running = NULL, *events = NULL, *mets = NULL, *logs = NULL;
    int rc = heartbeat_check(body, e, &running, &events, &mets, &logs);
    if (rc) return rc;
    atomic_fetch_add(&s->hb_queue, 1);
    pthread_mutex_lock(&s->lock);
    atomic_fetch_sub(&s->hb_queue, 1);
    agent *a = agent_find(s, agent_id);
    if (!a) {
        hf_jerr_set(e, "", NULL, "unknown agent %lld: register again", (long long)agent_id);
        rc = HF_ENOTFOUND;
        goto end;
    }
    atomic_fetch_add(&metrics.heartbeats, 1);
    int64_t now = hf_wall_ms(), mono = hf_mono_ms();
    txn_join(s);
    a->last_hb_mono = mono;
    a->last_hb_wall = now;
    {
        sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_HB);
        sqlite3_bind_text(st, 1, "ALIVE", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, now);
        sqlite3_bind_int64(st, 3, a->id);
        db_exec(s, st);
    }
    if (!a->alive) {
        a->alive = 1;
        s->dispatch_dirty = 1;
        event_row(s, 0, 0, "AGENT_BACK", a->name);
        emit(s, "agent", agent_view(s, a));
    }
    size_t i;
    json_t *it;
    uint64_t dropped = 0, reports = 0, points = 0, nlogs = 0;
    int64_t rej_metrics = 0, rej_points = 0, rej_logs = 0;   /* answered in "rejected": not stored */

    /* Duplicate-safe: a batch this agent process already got committed
     * (its reply was lost, e.g. a timeout) is acknowledged without storing
     * its items again; the assignments of that lost reply are sent again. */
    const char *inst = json_string_value(json_object_get(body, "instance"));
    int64_t batch = inst ? json_integer_value(json_object_get(body, "batch")) : 0;
    int repeated = inst && strcmp(inst, a->hb_instance) == 0 && batch <= a->hb_batch;
    if (repeated) {
        atomic_fetch_add(&metrics.heartbeats_repeated, 1);
        hf_info("agent %s: heartbeat batch %lld of instance %s already stored; acknowledging it again",
                a->name, (long long)batch, inst);
        mets = logs = events = NULL;   /* the loops below skip them */
    } else if (inst) {
        snprintf(a->hb_instance, sizeof a->hb_instance, "%s", inst);
        a->hb_batch = batch;
        sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_BATCH);
        sqlite3_bind_text(st, 1, inst, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, batch);
        sqlite3_bind_int64(st, 3, a->id);
        db_exec(s, st);
    }

    /* Metrics and logs first: a trial's last reports arrive in the same
     * heartbeat as its exit and must be stored before it is finished. */
    json_array_foreach(mets, i, it) {
        trial *t = item_trial(s, a, it);
        if (!t || is_terminal(t->state)) { dropped++; rej_metrics++; continue; }
        json_t *vals = json_object_get(it, "values"), *stj = json_object_get(it, "step"),
               *epj = json_object_get(it, "epoch"), *tj = json_object_get(it, "time");
        const char *ck = json_string_value(json_object_get(it, "checkpoint"));
        int64_t tm = tj ? json_integer_value(tj) : now;
        t->nreports++;
        double xp = epj ? json_number_value(epj) : stj ? (double)json_integer_value(stj) : (double)t->nreports;
        const char *k;
        json_t *v;
        sqlite3_stmt *st = store_stmt(s->st, ST_METRIC_INSERT);
        json_object_foreach(vals, k, v) {
            if (!json_object_get(t->best, k) && (int64_t)json_object_size(t->best) >= s->cfg.max_metric_names) {
                dropped++;
                rej_points++;
                continue;
            }
            sqlite3_bind_int64(st, 1, t->id);
            sqlite3_bind_int64(st, 2, t->attempt);
            sqlite3_bind_text(st, 3, k, -1, SQLITE_STATIC);
            store_bind_opt_int(st, 4, stj != NULL, json_integer_value(stj));
            if (epj) sqlite3_bind_double(st, 5, json_number_value(epj));
            else sqlite3_bind_null(st, 5);
            sqlite3_bind_double(st, 6, json_number_value(v));
            sqlite3_bind_int64(st, 7, tm);
            db_exec(s, st);
            points++;
        }
        if (stj) json_object_set_new(t->latest, "step", json_integer(json_integer_value(stj)));
        if (epj) json_object_set_new(t->latest, "epoch", json_real(json_number_value(epj)));
        t->mver++;
        json_object_foreach(vals, k, v)
            if (json_object_get(t->best, k) || (int64_t)json_object_size(t->best) < s->cfg.max_metric_names)
                trial_report(s, t, k, json_number_value(v), xp);
        if (ck && *ck) {
            sqlite3_stmt *cs = store_stmt(s->st, ST_CKPT_INSERT);
            sqlite3_bind_int64(cs, 1, t->id);
            sqlite3_bind_int64(cs, 2, t->attempt);
            sqlite3_bind_text(cs, 3, ck, -1, SQLITE_STATIC);
            store_bind_opt_int(cs, 4, stj != NULL, json_integer_value(stj));
            sqlite3_bind_int64(cs, 5, tm);
            db_exec(s, cs);
        }
        reports++;
        if (s->ev && events_subscribers(s->ev))
            emit(s, "metric", json_pack("{sIsIsOsOsO}", "trial_id", (json_int_t)t->id, "experiment_id",
                                        (json_int_t)t->exp->id, "step", stj ? stj : json_null(),
                                        "epoch", epj ? epj : json_null(), "values", vals));
    }
    json_array_foreach(logs, i, it) {
        trial *t = item_trial(s, a, it);
        if (!t || is_terminal(t->state)) { dropped++; rej_logs++; continue; }
        if (t->log_lines >= s->cfg.max_log_lines) { t->logs_dropped++; dropped++; rej_logs++; continue; }
        json_t *lj = json_object_get(it, "line"), *tj = json_object_get(it, "time");
        const char *line = json_string_value(lj);
        size_t len = json_string_length(lj);
        utf8_truncate(line, &len, (size_t)s->cfg.max_log_line);
        sqlite3_stmt *st = store_stmt(s->st, ST_LOG_INSERT);
        sqlite3_bind_int64(st, 1, t->id);
        sqlite3_bind_int64(st, 2, t->attempt);
        sqlite3_bind_text(st, 3, json_string_value(json_object_get(it, "stream")), -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, line, (int)len, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, tj ? json_integer_value(tj) : now);
        db_exec(s, st);
        t->log_lines++;
        nlogs++;
    }
    /* One UPDATE per trial whose latest/best changed. */
    for (size_t k = 0; k < s->ndirty; k++)
        if (s->dirty[k]->dirty_metrics) trial_save_metrics(s, s->dirty[k]);
    s->ndirty = 0;

    json_array_foreach(events, i, it) {
        trial *t = item_trial(s, a, it);
        if (!t) { dropped++; continue; }
        const char *type = json_string_value(json_object_get(it, "type"));
        if (strcmp(type, "started") == 0) {
            trial_rank *tr = item_rank(t, a->id, it, 1);
            if (!tr || tr->st == R_STARTED) continue;
            tr->st = R_STARTED;
            rank_save(s, t, tr);
            if (t->state == T_ASSIGNED) {
                t->started_at = now;
                metrics_observe(&metrics.dispatch_latency, (mono - t->ready_mono) * 1000);
                char d[64];
                snprintf(d, sizeof d, "pid %lld", (long long)json_integer_value(json_object_get(it, "pid")));
                trial_set_state(s, t, T_RUNNING, d);
            }
        } else {
            trial_rank *tr = item_rank(t, a->id, it, 0);
            if (!tr) continue;
            int code;
            char why[200];
            if (strcmp(type, "start_failed") == 0) {
                code = 127;
                snprintf(why, sizeof why, "start failed: %.150s",
                         json_string_value(json_object_get(it, "error")) ? json_string_value(json_object_get(it, "error"))
                                                                          : "?");
            } else {
                int sig = (int)json_integer_value(json_object_get(it, "signal"));
                code = (int)json_integer_value(json_object_get(it, "exit_code"));
                if (sig && !code) code = 128 + sig;
                if (sig) snprintf(why, sizeof why, "signal %d", sig);
                else why[0] = 0;
            }
            if (tr->st != R_STARTED) { tr->st = R_STARTED; }
            rank_exited(s, t, tr, code, why[0] ? why : NULL);
        }
    }

    /* Build the reply: new assignments, kills (re-sent every 2 s until the
     * rank exits), and kills for processes of attempts we no longer know.
     * Slots those stale processes hold stay used until the agent stops
     * listing them, so nothing new is placed on top of them. */
    json_t *assign = json_array(), *kill = json_array();
    int busy = 0;
    agent_stale_update(s, a, running);
    dispatch_pass(s);
    for (size_t k = 0; k < a->non; k++) {
        trial *t = a->on[k];
        if (!t->ranks) continue;
        int killed_here = 0;
        for (int r = 0; r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != a->id || tr->exited) continue;
            busy = 1;
            if (t->kill_state >= 0) {
                /* A holder of a launcher trial keeps its slots until mpirun
                 * (rank 0) has exited: mpirun's daemons run there. */
                if (holder_waits(t, tr)) continue;
                if (!killed_here && tr->st != R_NEW && (tr->kill_sent_mono == 0 || mono - tr->kill_sent_mono > 2000)) {
                    json_array_append_new(kill, json_pack("{sIsIsssI}", "trial_id", (json_int_t)t->id, "attempt",
                                                          (json_int_t)t->attempt, "reason", t->kill_reason,
                                                          "grace_ms", (json_int_t)t->exp->spec.grace_ms));
                    killed_here = 1;
                }
                if (tr->st != R_NEW) tr->kill_sent_mono = mono;
                continue;
            }
            if (tr->st == R_NEW || (repeated && tr->st == R_SENT && batch > 0 && tr->sent_batch == batch)) {
                json_array_append_new(assign, assignment(s, t, tr));
                if (tr->st == R_NEW) {
                    tr->st = R_SENT;
                    rank_save(s, t, tr);
                }
                tr->sent_mono = mono;
                tr->sent_batch = batch;
            }
        }
    }
    json_array_foreach(running, i, it) {
        trial *t;
        int64_t att = json_integer_value(json_object_get(it, "attempt"));
        int known = agent_knows(s, a, json_integer_value(json_object_get(it, "trial_id")), att, &t);
        if (!known)
            json_array_append_new(kill, json_pack("{sOsIsssi}", "trial_id", json_object_get(it, "trial_id"),
                                                  "attempt", (json_int_t)att, "reason", "stale attempt",
                                                  "grace_ms", 0));
    }
    for (size_t k = 0; k < s->nexps && !busy; k++)
        if (s->exps[k]->state == E_ACTIVE && s->exps[k]->counts[T_QUEUED] > 0) busy = 1;
    ring_forget(s, a->id);   /* this reply carries all of it */
    a = NULL;                /* hb_commit may reload memory: no scheduler object past here */
    rc = hb_commit(s);
    if (rc == 0) {
        atomic_fetch_add(&metrics.metric_reports, reports);
        atomic_fetch_add(&metrics.metric_points, points);
        atomic_fetch_add(&metrics.log_lines, nlogs);
        atomic_fetch_add(&metrics.items_dropped, dropped);
        *out = json_pack("{sososIs{sIsIsI}}", "assign", assign, "kill", kill, "heartbeat_interval_ms",
                         (json_int_t)(busy || json_array_size(kill) ? s->hb_fast_eff : s->hb_idle_eff),
                         "rejected", "metrics", (json_int_t)rej_metrics, "points", (json_int_t)rej_points,
                         "logs", (json_int_t)rej_logs);
    } else {
        json_decref(assign);
        json_decref(kill);
    }
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void sched_set_doorbell(sched *s, void (*ring)(void *ctx, int64_t agent_id), void *ctx)
{
    pthread_mutex_lock(&s->lock);
    s->bell = ring;
    s->bell_ctx = ctx;
    pthread_mutex_unlock(&s->lock);
}

int sched_agent_pending(sched *s, int64_t agent_id, int *pending)
{
    int rc = 0;
    *pending = 0;
    pthread_mutex_lock(&s->lock);
    if (!agent_find(s, agent_id)) {
        rc = HF_ENOTFOUND;
        goto end;
    }
    agent *a = agent_find(s, agent_id);
    for (size_t k = 0; k < a->non && !*pending; k++) {
        trial *t = a->on[k];
        for (int r = 0; r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->agent_id != agent_id || tr->exited) continue;
            if (t->kill_state >= 0 ? tr->st != R_NEW && tr->kill_sent_mono == 0 : tr->st == R_NEW) *pending = 1;
        }
    }
end:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int sched_agent_list(sched *s, json_t **out)
{
    pthread_mutex_lock(&s->lock);
    json_t *a = json_array();
    for (size_t i = 0; i < s->nagents; i++) json_array_append_new(a, agent_view(s, s->agents[i]));
    pthread_mutex_unlock(&s->lock);
    *out = json_pack("{so}", "agents", a);
    return 0;
}

void sched_tick(sched *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t mono = hf_mono_ms();
    int changed = 0;
    {   /* Heartbeat load stays near heartbeat_rate/s however many agents
         * there are; the doorbell keeps dispatch prompt regardless. */
        int64_t alive = 0, scaled = 0;
        for (size_t i = 0; i < s->nagents; i++) alive += s->agents[i]->alive;
        if (s->cfg.heartbeat_rate > 0) scaled = alive * 1000 / s->cfg.heartbeat_rate;
        if (scaled > s->cfg.agent_timeout_ms / 4) scaled = s->cfg.agent_timeout_ms / 4;
        s->hb_fast_eff = s->cfg.heartbeat_fast_ms > scaled ? s->cfg.heartbeat_fast_ms : scaled;
        s->hb_idle_eff = s->cfg.heartbeat_ms > scaled ? s->cfg.heartbeat_ms : scaled;
    }
    txn_begin(s);
    for (size_t i = 0; i < s->nagents; i++) {
        agent *a = s->agents[i];
        if (!a->alive || mono - a->last_hb_mono <= s->cfg.agent_timeout_ms) continue;
        a->alive = 0;
        changed = 1;
        s->dispatch_dirty = 1;
        hf_warn("agent %s (%lld) lost: no heartbeat for %lld ms", a->name, (long long)a->id,
                (long long)(mono - a->last_hb_mono));
        sqlite3_stmt *st = store_stmt(s->st, ST_AGENT_HB);
        sqlite3_bind_text(st, 1, "LOST", -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, a->last_hb_wall);
        sqlite3_bind_int64(st, 3, a->id);
        db_exec(s, st);
        event_row(s, 0, 0, "AGENT_LOST", a->name);
        size_t nsnap = 0;
        int stale = 0;
        trial **snap = agent_snapshot_on(a, &nsnap);
        for (size_t k = 0; k < nsnap; k++) {
            trial *t = snap[k];
            for (int r = 0; t->ranks && r < t->nranks; r++) {
                trial_rank *tr = &t->ranks[r];
                if (tr->agent_id != a->id || tr->exited) continue;
                if (tr->st == R_NEW) tr->st = R_STARTED;   /* count it as gone */
                else stale += tr->slots;   /* it may still run there */
                rank_exited(s, t, tr, -1, "agent lost");
                if (!t->ranks) break;
            }
        }
        free(snap);
        /* Its processes may outlive the silence (a partition): their slots
         * stay used until a heartbeat or registration lists what runs. */
        a->stale_slots += stale;
        a->pa.slots_used += stale;
        emit(s, "agent", agent_view(s, a));
    }
    /* Assignments an agent never started: fail the attempt. */
    size_t nsnap = 0;
    trial **snap = live_snapshot(s, &nsnap);
    for (size_t k = 0; k < nsnap; k++) {
        trial *t = snap[k];
        for (int r = 0; t->ranks && r < t->nranks; r++) {
            trial_rank *tr = &t->ranks[r];
            if (tr->st == R_SENT && !tr->exited && mono - tr->sent_mono > s->cfg.assign_timeout_ms) {
                changed = 1;
                tr->st = R_STARTED;
                rank_exited(s, t, tr, -1, "assignment not acknowledged");
                break;
            }
        }
    }
    free(snap);
    /* The pass runs after changes; the tick also runs one every second
     * whatever happened (nothing should need it; it bounds a miss). */
    if (mono - s->last_pass_mono >= 1000) s->dispatch_dirty = 1;
    dispatch_pass(s);
    (void)changed;
    txn_end(s);
    pthread_mutex_unlock(&s->lock);
}

void sched_get_stats(sched *s, sched_stats *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&s->lock);
    int64_t mono = hf_mono_ms();
    for (size_t i = 0; i < s->nexps; i++) {
        experiment *x = s->exps[i];
        for (int k = 0; k < T__N; k++) o->trials_by_state[k] += x->counts[k];
        if (x->state == E_ACTIVE) o->experiments_active++;
    }
    o->queued = o->trials_by_state[T_QUEUED];
    for (size_t i = 0; i < s->nagents; i++) {
        agent *a = s->agents[i];
        if (a->alive) {
            o->agents_alive++;
            double lag = (double)(mono - a->last_hb_mono) / 1000.0;
            if (lag > o->max_heartbeat_lag_s) o->max_heartbeat_lag_s = lag;
        } else {
            o->agents_lost++;
        }
    }
    pthread_mutex_unlock(&s->lock);
}
