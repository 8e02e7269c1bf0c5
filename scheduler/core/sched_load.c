/*
 * sched_load.c — loading the scheduler core from the store (sched_int.h),
 * at start and after a failed transaction (txn_end), in steps: the
 * experiments (each rebuilt from its stored config), the agents, the
 * trials, the live allocations of current attempts (which rebuild agent
 * capacity and the live index), the count of deleted experiments whose
 * rows wait for the purge (sched_purge.c; never loaded), then each
 * experiment's searcher by replay (docs/scheduler.md, "Restart"); and the
 * core's construction (sched_new, which loads, and sched_free).
 *
 * Invariants: records are appended in id order (the statements order by
 * id), so the model's binary searches hold; agents that were alive get a
 * fresh grace period (last_hb_mono = now); an assignment that went out
 * gets the whole assign timeout from now.
 */
#include "scheduler/core/sched_int.h"

#include "hf_assert.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_time.h"
#include "scheduler/search/warmstart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int load_experiments(sched *s)
{
    sqlite3_stmt *q = row_scan(s, ROWS_EXPERIMENTS);
    experiment *x;
    int64_t id;
    hf_jerr e;
    int rc = 0;
    while (rc == 0 && row_exp_next(q, &x, &id, &e)) {
        if (!x)
            hf_error("experiment %lld: stored config no longer valid (%s: %s); skipped", (long long)id, e.field,
                     e.msg);
        else if (sched_grow((void **)&s->exps, &s->cexps, s->nexps + 1, sizeof *s->exps) == 0)
            s->exps[s->nexps++] = x;
        else { exp_free(x); rc = HF_ENOMEM; }
    }
    row_scan_end(q);
    return rc;
}

static int load_agents(sched *s, int64_t now_mono)
{
    sqlite3_stmt *q = row_scan(s, ROWS_AGENTS);
    agent *a;
    int rc = 0;
    while (rc == 0 && row_agent_next(q, &a, now_mono)) {
        if (a && sched_grow((void **)&s->agents, &s->cagents, s->nagents + 1, sizeof *s->agents) == 0)
            s->agents[s->nagents++] = a;
        else { agent_free(a); rc = HF_ENOMEM; }
    }
    row_scan_end(q);
    return rc;
}

static int load_trials(sched *s, int64_t now_mono)
{
    sqlite3_stmt *q = row_scan(s, ROWS_TRIALS);
    int64_t exp_id;
    int rc = 0;
    while (row_trial_next(q, &exp_id)) {
        experiment *x = exp_find(s, exp_id);
        if (!x) continue;
        trial *t = trial_alloc(s, x);
        if (!t) { rc = HF_ENOMEM; break; }
        row_trial_read(q, t);
        t->ready_mono = now_mono;
        trial_index(s, x, t);
        if (t->has_obj && (x->best_trial == 0 || exp_norm(x, t->obj) > x->best_norm)) {
            x->best_trial = t->id;
            x->best_norm = exp_norm(x, t->obj);
            x->best_raw = t->obj;
        }
        if (t->port >= s->next_port && t->port < s->cfg.port_base + s->cfg.port_count) s->next_port = t->port + 1;
    }
    row_scan_end(q);
    return rc;
}

/* One live allocation row: a rank of a placed trial's current attempt. */
static int load_rank(sched *s, const alloc_row *r, int64_t now_mono)
{
    trial *t = trial_find(s, r->trial_id);
    agent *a = agent_find(s, r->agent_id);
    if (!t || !a || t->attempt != r->attempt || !(t->state == T_ASSIGNED || t->state == T_RUNNING)) return 0;
    int W = (int)t->exp->spec.workers;
    if (r->rank < 0 || r->rank >= W) return 0;
    if (!t->ranks) {
        t->ranks = calloc((size_t)W, sizeof *t->ranks);
        if (!t->ranks) return HF_ENOMEM;
        t->nranks = W;
        live_add(s, t);
        for (int k = 0; k < W; k++) { t->ranks[k].rank = k; t->ranks[k].exited = 1; t->ranks[k].agent_id = 0; }
    }
    trial_rank *tr = &t->ranks[r->rank];
    tr->agent_id = a->id;
    tr->slots = r->slots;
    tr->st = r->started;
    /* When an assignment went out is not stored (a monotonic clock does
     * not survive a restart): the agent gets the whole assign timeout
     * from now. With 0 here the first tick failed every assignment that
     * was sent but not yet reported started ("assignment not
     * acknowledged") although the agent was running it. */
    tr->sent_mono = now_mono;
    tr->exited = r->exited;
    tr->exit_code = r->exit_code;
    tr->ngpu = r->ngpu;
    memcpy(tr->gpu, r->gpu, sizeof tr->gpu);
    a->pa.slots_used += tr->slots;
    for (int k = 0; k < tr->ngpu; k++)
        for (int q = 0; q < a->pa.ngpus; q++)
            if (a->pa.gpu_index[q] == tr->gpu[k]) a->pa.gpu_used |= 1ull << q;
    t->exp->slots_in_use += tr->slots;
    return 0;
}

/* Live allocations rebuild agent capacity, the live index, the per-agent
 * index and each rank's local rank. */
static int load_allocations(sched *s, int64_t now_mono)
{
    sqlite3_stmt *q = row_scan(s, ROWS_ALLOCATIONS);
    alloc_row r;
    int rc = 0;
    while (rc == 0 && row_alloc_next(q, &r)) rc = load_rank(s, &r, now_mono);
    row_scan_end(q);
    if (rc) return rc;
    for (size_t i = 0; i < s->nlive; i++) agent_link(s, s->live[i]);
    for (size_t i = 0; i < s->ntrials; i++) {
        trial *t = s->trials[i];
        for (int r2 = 0; r2 < t->nranks; r2++)
            for (int k = 0; k < r2; k++)
                if (t->ranks[k].agent_id == t->ranks[r2].agent_id) t->ranks[r2].local_rank++;
    }
    return 0;
}

/* Replay x's history through its fresh searcher and median rule: its
 * warm-start history (warmstart.h), trials in
 * creation order (on_created), the objective's reports in arrival order
 * (on_report; other objectives, constraints and the cost metric through
 * on_metric, in the same order), then the finished trials (on_done). */
static int by_ended_at(const void *a, const void *b)
{
    const trial *ta = *(trial *const *)a, *tb = *(trial *const *)b;
    return ta->ended_at < tb->ended_at ? -1 : ta->ended_at > tb->ended_at;
}

/* trial.max_failures counts on across a restart: the failures in a row are
 * those after the last trial that ended COMPLETED or STOPPED (by ended_at;
 * CANCELED trials neither count nor break the run). */
static void load_fail_run(experiment *x)
{
    x->fail_run = 0;
    if (exp_state_ended(x->state) || !x->ntrials) return;
    trial **v = malloc(x->ntrials * sizeof *v);
    size_t n = 0;
    if (!v) return;
    for (size_t k = 0; k < x->ntrials; k++)
        if (trial_state_terminal(x->trials[k]->state)) v[n++] = x->trials[k];
    qsort(v, n, sizeof *v, by_ended_at);
    for (size_t k = n; k-- > 0;) {
        if (v[k]->state == T_COMPLETED || v[k]->state == T_STOPPED) break;
        if (v[k]->state == T_FAILED) x->fail_run++;
    }
    free(v);
}

static void load_replay(sched *s, experiment *x)
{
    /* The warm-start history first: it is older than every trial, and the
     * snapshot stored at submission is what the searcher saw then. */
    if (x->warm) warm_observe(x->srch, x->warm, x->spec.goal_max);
    for (size_t k = 0; k < x->ntrials; k++) {
        trial *t = x->trials[k];
        if (x->srch->ops->on_created)
            x->srch->ops->on_created(x->srch, t->id, t->idx, t->hparams, t->budget, t->parent);
    }
    sqlite3_stmt *q = row_report_scan(s, x);
    report_row r;
    while (row_report_next(q, &r)) {
        trial *t = trial_find(s, r.trial_id);
        if (!t) continue;
        double xp = r.has_epoch ? r.epoch : r.has_step ? (double)r.step : (double)(t->nreports + 1);
        if (r.name) exp_feed_slots(x, t->id, r.name, xp, r.value);
        if (r.name && strcmp(r.name, x->spec.metric)) continue;   /* not the objective */
        t->nreports++;
        double v = exp_norm(x, r.value);
        if (x->srch->ops->on_report) x->srch->ops->on_report(x->srch, t->id, xp, v);
        if (x->med) search_median_on_report(x->med, t->id, xp, v);
    }
    row_scan_end(q);
    for (size_t k = 0; k < x->ntrials; k++)
        if (trial_state_terminal(x->trials[k]->state)) trial_done_notify(x->trials[k], x->trials[k]->state);
    load_fail_run(x);
}

/* x's searcher and median rule built afresh, with the searcher's
 * max_trials raised to x->max_trials: /extend raises it above what the
 * file says, and searchers end the search at their own max_trials. The
 * config in memory says the new value too (the dashboard's fork editor
 * starts from it). RET 0 or HF_ENOMEM (x unchanged). */
static int searcher_renew(experiment *x)
{
    exp_spec *sp = &x->spec;
    json_object_set_new(sp->searcher_cfg, "max_trials", json_integer((json_int_t)x->max_trials));
    searcher *n = sp->ops->create(sp->searcher_cfg, sp->sp, sp->goal_max, sp->seed);
    search_median *m = NULL;
    if (!n || (sp->median_cfg && !(m = search_median_new(sp->median_cfg)))) {
        if (n) sp->ops->destroy(n);
        return HF_ENOMEM;
    }
    n->ops = sp->ops;
    x->srch->ops->destroy(x->srch);
    x->srch = n;
    search_median_free(x->med);
    x->med = m;
    return 0;
}

int sched_searcher_rebuild(sched *s, experiment *x)
{
    HF_ASSERT(sched_lock_held(s));
    int rc = searcher_renew(x);
    if (rc) return rc;
    for (size_t k = 0; k < x->ntrials; k++) x->trials[k]->nreports = 0;
    load_replay(s, x);
    return 0;
}

int sched_load(sched *s, char *err, size_t errlen)
{
    HF_ASSERT(sched_lock_held(s));
    int64_t now_mono = hf_mono_ms();
    int rc = load_experiments(s);
    if (rc == 0) rc = load_agents(s, now_mono);
    if (rc == 0) rc = load_trials(s, now_mono);
    if (rc == 0) rc = load_allocations(s, now_mono);
    /* Deleted experiments (left out above) whose rows the tick purges;
     * the purge starts over from its first step (store/purge.h). */
    if (rc == 0) rc = purge_queued(store_db(s->st), &s->npurge);
    s->purge_cur = (purge_cursor){0};
    if (rc) {
        snprintf(err, errlen, "loading state: %s", hf_strerror(rc));
        return rc;
    }
    s->dispatch_dirty = 1;
    for (size_t i = 0; i < s->nexps; i++) {
        experiment *x = s->exps[i];
        /* An extended experiment's searcher must know its new max_trials. */
        if (x->max_trials != x->spec.max_trials && (rc = searcher_renew(x))) {
            snprintf(err, errlen, "rebuilding the searcher of experiment %lld: %s", (long long)x->id,
                     hf_strerror(rc));
            return rc;
        }
        load_replay(s, x);
    }
    return 0;
}

/* ---------- construction ---------- */

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
    c->ck_shared_dir = NULL;
    c->pbt_parent_wait_ms = 120000;
}

int sched_new(const sched_config *cfg, store *st, events_hub *ev, sched **out, char *err, size_t errlen)
{
    *out = NULL;
    sched *s = calloc(1, sizeof *s);
    if (!s) return HF_ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->post_mu, NULL);
    pthread_cond_init(&s->grp_cv, NULL);
    s->cfg = *cfg;
    if (s->cfg.port_count <= 0) s->cfg.port_count = 10000;
    s->st = st;
    s->ev = ev;
    s->pending = json_array();
    s->next_port = s->cfg.port_base;
    s->hb_fast_eff = s->cfg.heartbeat_fast_ms;
    s->hb_idle_eff = s->cfg.heartbeat_ms;
    s->hb_report_gap = SCHED_REPORT_GAP_MIN_MS;
    /* Nobody else can see s yet, but the functions loading calls check
     * that their caller holds the lock (sched_int.h): it does. */
    sched_lock(s);
    int rc = sched_load(s, err, errlen);
    sched_unlock(s);
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
    pthread_mutex_destroy(&s->post_mu);
    pthread_cond_destroy(&s->grp_cv);
    free(s);
}
