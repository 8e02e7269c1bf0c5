/*
 * dispatch.c — the dispatch pass of the scheduler core (sched_int.h): which
 * experiment is served next, which of its trials, when to ask its searcher
 * for a new one, and where each trial's gang is placed.
 *
 * The pass (dispatch_pass) runs after every change that may free or need
 * capacity (s->dispatch_dirty; the tick forces one every second): it picks
 * experiments by priority, then by fair share (slots in use divided by
 * weight), places their queued trials, or asks the searcher for a new one
 * only when below max_concurrent_trials and max_trials and when free slots
 * can take it at once, and places each trial as a gang (placement.c). A
 * head-of-line experiment that cannot place reserves the slots it will run
 * on for the rest of the pass (backfill), so trials behind it only take
 * slots that do not delay it. Placed ranks are delivered in the agent's
 * next heartbeat reply (or at once through its doorbell); agents are told
 * to heartbeat every heartbeat_fast_ms while they have work, kills or
 * queued trials, so an assignment or a searcher STOP reaches the agent
 * within that interval.
 *
 * Workload: at a submission a pass places thousands of trials over a
 * thousand agents; most passes place nothing and must cost little. Such a
 * burst goes in chunks of DISPATCH_CHUNK trials when the cron can go on
 * with it (sched_set_kick; docs/scheduler.md "Cold dispatch"): each
 * chunk's commit rings its agents, and the kicked thread places the rest
 * (sched_dispatch_more), letting heartbeats and long-polls have the core
 * lock between chunks.
 */
#include "scheduler/core/sched_int.h"
#include "scheduler/search/warmstart.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/api/metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------- placement ---------- */

static int pick_port(sched *s)
{
    int64_t p = s->next_port;
    s->next_port = s->cfg.port_base + ((s->next_port - s->cfg.port_base + 1) % s->cfg.port_count);
    return (int)p;
}

/* Trial t failed twice in a row on one agent (t->fail_agent), which it
 * then avoids while another agent is alive (avoid_agent). */
static int avoids_an_agent(const trial *t)
{
    return t && t->fail_streak >= 2;
}

static int avoid_agent(const sched *s, const trial *t, const agent *a)
{
    if (!avoids_an_agent(t) || t->fail_agent != a->id) return 0;
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

/* Can a take the whole gang of t (W workers of S slots)? */
static int gang_fits(const sched *s, const trial *t, const agent *a, int W, int S)
{
    return a->alive && !avoid_agent(s, t, a) && placement_capacity(&a->pa, S) >= W;
}

/* Free slots of a, 0 when it is not alive. */
static int64_t alive_free(const agent *a)
{
    return a->alive && a->pa.slots > a->pa.slots_used ? a->pa.slots - a->pa.slots_used : 0;
}

/* Free slots of alive agents, counted once per pass and after each
 * backfill hold (a placement subtracts what it took): an upper bound that
 * rejects most checks at once. */
static int64_t pass_free(sched *s)
{
    if (s->pass_free < 0) {
        int64_t f = 0;
        for (size_t i = 0; i < s->nagents; i++) f += alive_free(s->agents[i]);
        s->pass_free = f;
    }
    return s->pass_free;
}

/* Index of the first agent of the pass that may have a free slot (see
 * pass_scan in sched_int.h): at submission the agents fill one after the
 * other, and the scans below would otherwise walk the full ones for every
 * trial (1,000 agents x 8,000 trials in loadgen --full's cold start). */
static size_t scan_start(sched *s)
{
    while (s->pass_scan < s->nagents && alive_free(s->agents[s->pass_scan]) == 0) s->pass_scan++;
    return s->pass_scan;
}

static int capacity_for(sched *s, const experiment *x)
{
    int64_t need = x->spec.workers, got = 0;
    if (pass_free(s) < need * x->spec.slots_per_worker) return 0;
    for (size_t i = scan_start(s); i < s->nagents && got < need; i++)
        if (s->agents[i]->alive) got += placement_capacity(&s->agents[i]->pa, (int)x->spec.slots_per_worker);
    return got >= need;
}

/* An alive agent holding ref's object with room for t's whole gang (the
 * best fit of them, placement_prefer), or NULL. */
static agent *holder_for(sched *s, const trial *t, const ckpt_ref *ref, int W, int S)
{
    place_agent *pa = calloc(s->nagents + 1, sizeof *pa);
    int *holds = calloc(s->nagents + 1, sizeof *holds);
    agent *pick = NULL;
    if (pa && holds) {
        for (size_t i = 0; i < s->nagents; i++) {
            agent *a = s->agents[i];
            pa[i] = a->pa;
            pa[i].excluded = !a->alive || avoid_agent(s, t, a);
            holds[i] = ckpt_agent_holds(a, ref);
        }
        int k = placement_prefer(pa, (int)s->nagents, holds, W, S);
        if (k >= 0) pick = s->agents[k];
    }
    free(pa);
    free(holds);
    return pick;
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
    /* A trial that starts from a stored checkpoint (sched_ckpt.c) goes,
     * when one has room for the whole gang, to an agent that already holds
     * it: no copy at all. A PBT child waits here for its parent's. */
    agent *near = NULL;
    if (t->attempt > 0 || t->parent > 0) {
        ckpt_ref ref;
        int found = ckpt_restore_of(s, t, &ref);
        if (ckpt_pbt_wait(s, t, &ref, found)) { rc = HF_ENOTFOUND; goto end; }
        if (found) near = holder_for(s, t, &ref, W, S);
        /* No holder of a stored checkpoint has room (or none is stored
         * yet: an ASHA promotion is decided by the report that comes
         * before the upload of the checkpoint beside it): the chief's
         * agent of the last attempt, where that attempt's newest
         * checkpoint is on disk in the trial's directory, when it has
         * room for the whole gang. Elsewhere the trial would start from
         * the older stored one, or from scratch. */
        if (!near && t->attempt > 0 && t->agent_id > 0) {
            agent *last = agent_find(s, t->agent_id);
            if (last && gang_fits(s, t, last, W, S)) near = last;
        }
    }
    /* Fast path, the common case: the gang fits on one agent: the first
     * one in order with room for it (first fit, so a burst fills agents
     * one after the other), found without copying every agent: at
     * submission a pass places thousands of trials over a thousand agents.
     * The last scan's choice is kept for the next gang of the same shape
     * (pass_fit, sched_int.h): every agent before it lacked room for that
     * gang and capacities only fall within a pass, so while it still has
     * room it is still the first. A trial that avoids an agent
     * (avoid_agent) or goes to its checkpoint's holder scans (or not) and
     * leaves the kept choice alone. */
    {
        agent *one = near;
        int mine = !near && !avoids_an_agent(t);
        if (mine && s->pass_fit && s->pass_fit_w == W && s->pass_fit_s == S &&
            placement_capacity(&s->pass_fit->pa, S) >= W)
            one = s->pass_fit;
        for (size_t i = scan_start(s); i < s->nagents && !one; i++)
            if (gang_fits(s, t, s->agents[i], W, S)) one = s->agents[i];
        if (mine) {
            s->pass_fit = one;
            s->pass_fit_w = W;
            s->pass_fit_s = S;
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
    if (s->pass_free >= 0) s->pass_free -= (int64_t)W * S;   /* the slots just taken, all of alive agents */
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
        txn_ring_note(s, tr->agent_id);
        x->slots_in_use += S;
        row_alloc_insert(s, t, tr);
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

/* ---------- the searcher ---------- */

/* A new QUEUED trial of x from the searcher's proposal (nw->hparams is
 * taken). NULL when its row could not be written (s->txn_rc set). */
static trial *trial_create(sched *s, experiment *x, search_new *nw)
{
    trial *t = trial_alloc(s, x);
    if (!t) return NULL;
    t->idx = (int64_t)x->ntrials;
    t->hparams = nw->hparams;
    nw->hparams = NULL;
    t->budget = nw->budget;
    t->parent = nw->parent_trial;
    t->created_at = hf_wall_ms();
    t->state = T_QUEUED;
    t->ready_mono = hf_mono_ms();
    t->id = row_trial_insert(s, t);
    if (s->txn_rc || (s->ntrials && s->trials[s->ntrials - 1]->id >= t->id)) {
        trial_free(t);
        if (!s->txn_rc) s->txn_rc = HF_EDB;
        return NULL;
    }
    trial_index(s, x, t);
    row_event(s, x->id, t->id, "QUEUED", t->parent ? "created (exploit of a parent)"
                                         : t->idx < x->spec.n_enqueue ? "created (enqueued by warm_start)" : "created");
    if (txn_watched(s)) txn_emit(s, "trial", trial_view(s, t));
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
    /* warm_start.enqueue (docs/search.md "Warm start"): the first
     * n_enqueue trials run those configurations. The searcher still
     * decides the rest of each (ASHA's bracket and budget, PBT's member),
     * only the hyperparameters are replaced, and it learns them through
     * on_created as if it had proposed them. Grid is the exception: its
     * n-th trial is the n-th point, so the enqueued trials are created
     * beside it and it is asked with its own count. */
    int64_t nq = x->spec.n_enqueue, seen = n_created;
    int enq = n_created < nq, grid = strcmp(x->spec.searcher_name, "grid") == 0;
    int rc;
    if (grid && enq) rc = SEARCH_CREATE;
    else rc = x->srch->ops->next(x->srch, grid ? n_created - nq : n_created, n_active, &nw);
    if (rc == SEARCH_CREATE && enq && nw.resume_trial == 0 && nw.parent_trial == 0) {
        json_decref(nw.hparams);
        nw.hparams = json_deep_copy(json_array_get(warm_enqueue(x->config), (size_t)seen));
    }
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

int dispatch_pass(sched *s)
{
    HF_ASSERT(sched_lock_held(s));
    if (!s->dispatch_dirty) return 0;
    /* What the pass does is the scheduler's doing, not the user's whose
     * request ran it: its events carry no user (sched_int.h, actor_set). */
    char actor[sizeof s->actor];
    memcpy(actor, s->actor, sizeof actor);
    s->actor[0] = 0;
    int *hold = calloc(s->nagents + 1, sizeof *hold);   /* backfill holds, released at the end */
    int reserved = 0, placed = 0, more = 0;
    s->pass++;
    s->pass_free = -1;
    s->pass_scan = 0;
    s->pass_fit = NULL;
    s->last_pass_mono = hf_mono_ms();
    for (int iter = 0; iter < 10000 && s->txn_rc == 0; iter++) {
        if (s->kick && placed >= DISPATCH_CHUNK) {
            more = 1;
            break;
        }
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
                    exp_search_finished(s, x);
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
    s->pass_fit = NULL;
    /* Changes made by this pass are its own outcome; only a later change
     * (a freed slot, a new trial state, an agent...) needs another pass,
     * or the rest of a pass stopped at DISPATCH_CHUNK. */
    if (s->txn_rc == 0 && !more) s->dispatch_dirty = 0;
    s->dispatch_more = more;
    int64_t dt = hf_mono_ms() - s->last_pass_mono;
    if (dt >= 50) hf_info("dispatch pass %llu: %d trials placed in %lld ms", (unsigned long long)s->pass, placed, (long long)dt);
    memcpy(s->actor, actor, sizeof actor);
    return more;
}

/* Let the threads queued for the core lock have it (at most
 * DRAIN_YIELD_US): a released mutex is usually taken again by the thread
 * that released it before a woken waiter runs, and the agents just rung
 * want it for their heartbeats. */
#define DRAIN_YIELD_US 2000
static void drain_yield(sched *s)
{
    sched_unlock(s);
    int64_t t0 = hf_mono_us();
    while (atomic_load(&s->lock_waiters) > 0 && hf_mono_us() - t0 < DRAIN_YIELD_US) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    sched_lock(s);
}

void sched_set_kick(sched *s, void (*kick)(void *ctx), void *ctx)
{
    sched_lock(s);
    s->kick = kick;
    s->kick_ctx = ctx;
    sched_unlock(s);
}

void sched_dispatch_more(sched *s)
{
    sched_lock(s);
    while (s->dispatch_more && s->dispatch_dirty) {
        txn_begin(s);
        dispatch_pass(s);
        if (txn_end(s)) break;
        if (s->dispatch_more) drain_yield(s);
    }
    sched_unlock(s);
}
