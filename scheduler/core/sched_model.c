/*
 * sched_model.c — the scheduler core's in-memory model (sched_int.h):
 * lookups of experiments, trials and agents by id, the index of placed
 * trials (s->live) and its per-agent subset (agent.on), building and
 * freeing records, the names of states, and the core lock with its
 * owner (sched_lock, sched_unlock, sched_lock_held).
 *
 * Workload: thousands of agents heartbeating a few times a second and
 * dispatch passes over thousands of trials. Lookups by id are binary
 * searches over id-ordered arrays (ids only grow); per-heartbeat and
 * per-tick work walks s->live or an agent's `on`, which scale with what
 * runs, not with the whole history.
 *
 * The bottom layer of the core (sched_int.h, "Layers"): it calls no other
 * file of the core.
 */
#include "scheduler/core/sched_int.h"

#include "scheduler/core/expmeta.h"

#include "hf_assert.h"
#include "hf_err.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *const sched_trial_state_names[8] = {"QUEUED", "ASSIGNED", "RUNNING", "COMPLETED",
                                                "FAILED", "STOPPED", "CANCELED", "PAUSED"};
const char *const exp_state_names[E__N] = {"ACTIVE", "PAUSED", "COMPLETED", "CANCELED", "FAILED"};

int sched_grow(void **arr, size_t *cap, size_t need, size_t elem)
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

/* The record with this id in the id-ordered array arr of n records, or
 * NULL: a binary search (a macro, as the three arrays differ in type). */
#define FIND_BY_ID(arr, n, want)                                         \
    do {                                                                 \
        size_t lo_ = 0, hi_ = (n);                                       \
        while (lo_ < hi_) {                                              \
            size_t mid_ = (lo_ + hi_) / 2;                               \
            if ((arr)[mid_]->id < (want)) lo_ = mid_ + 1;                \
            else hi_ = mid_;                                             \
        }                                                                \
        return lo_ < (n) && (arr)[lo_]->id == (want) ? (arr)[lo_] : NULL; \
    } while (0)

trial *trial_find(sched *s, int64_t id) { FIND_BY_ID(s->trials, s->ntrials, id); }
experiment *exp_find(sched *s, int64_t id) { FIND_BY_ID(s->exps, s->nexps, id); }
agent *agent_find(sched *s, int64_t id) { FIND_BY_ID(s->agents, s->nagents, id); }

agent *agent_by_name(sched *s, const char *name)
{
    for (size_t i = 0; i < s->nagents; i++)
        if (strcmp(s->agents[i]->name, name) == 0) return s->agents[i];
    return NULL;
}

void live_add(sched *s, trial *t)
{
    HF_ASSERT(sched_lock_held(s));
    if (sched_grow((void **)&s->live, &s->clive, s->nlive + 1, sizeof *s->live)) return;
    t->live_idx = s->nlive;
    s->live[s->nlive++] = t;
}

void live_del(sched *s, trial *t)
{
    HF_ASSERT(sched_lock_held(s));
    size_t i = t->live_idx;
    if (i >= s->nlive || s->live[i] != t) return;
    s->live[i] = s->live[--s->nlive];
    s->live[i]->live_idx = i;
}

trial **trials_copy(trial *const *v, size_t n, size_t *out_n)
{
    trial **c = malloc((n + 1) * sizeof *c);
    *out_n = 0;
    if (!c) return NULL;
    if (n) memcpy(c, v, n * sizeof *c);
    *out_n = n;
    return c;
}

trial **live_snapshot(sched *s, size_t *n) { return trials_copy(s->live, s->nlive, n); }

void agent_link(sched *s, trial *t)
{
    HF_ASSERT(sched_lock_held(s));
    for (int r = 0; r < t->nranks; r++) {
        agent *a = agent_find(s, t->ranks[r].agent_id);
        if (!a) continue;
        size_t k = 0;
        while (k < a->non && a->on[k] != t) k++;
        if (k < a->non || sched_grow((void **)&a->on, &a->con, a->non + 1, sizeof *a->on)) continue;
        a->on[a->non++] = t;
    }
}

void agent_unlink(sched *s, trial *t)
{
    HF_ASSERT(sched_lock_held(s));
    for (int r = 0; r < t->nranks; r++) {
        agent *a = agent_find(s, t->ranks[r].agent_id);
        if (!a) continue;
        for (size_t k = 0; k < a->non; k++)
            if (a->on[k] == t) { a->on[k] = a->on[--a->non]; break; }
    }
}

trial *trial_alloc(sched *s, experiment *x)
{
    trial *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (sched_grow((void **)&s->trials, &s->ctrials, s->ntrials + 1, sizeof *s->trials) ||
        sched_grow((void **)&x->trials, &x->cap, x->ntrials + 1, sizeof *x->trials)) {
        free(t);
        return NULL;
    }
    t->exp = x;
    t->kill_state = -1;
    t->latest = json_object();
    t->best = json_object();
    return t;
}

/* Append t (ids only grow, so id order is kept). */
void trial_index(sched *s, experiment *x, trial *t)
{
    HF_ASSERT(sched_lock_held(s));
    HF_ASSERT(s->ntrials == 0 || s->trials[s->ntrials - 1]->id < t->id);   /* ids only grow */
    s->trials[s->ntrials++] = t;
    x->trials[x->ntrials++] = t;
    x->counts[t->state]++;
}

void trial_free(trial *t)
{
    if (!t) return;
    json_decref(t->hparams);
    json_decref(t->latest);
    json_decref(t->best);
    free(t->ranks);
    free(t->view);
    free(t->notes);
    free(t);
}

void exp_free(experiment *x)
{
    if (!x) return;
    if (x->srch) x->srch->ops->destroy(x->srch);
    search_median_free(x->med);
    experiment_spec_free(&x->spec);
    json_decref(x->config);
    json_decref(x->tags);
    json_decref(x->warm);
    free(x->description);
    free(x->submitted_by);
    free(x->name);
    free(x->trials);
    free(x);
}

void exp_forget(sched *s, experiment *x)
{
    size_t j = 0;
    for (size_t i = 0; i < s->ntrials; i++) {
        trial *t = s->trials[i];
        if (t->exp == x) trial_free(t);
        else s->trials[j++] = t;
    }
    s->ntrials = j;
    j = 0;
    for (size_t i = 0; i < s->nexps; i++)
        if (s->exps[i] != x) s->exps[j++] = s->exps[i];
    s->nexps = j;
    exp_free(x);
}

void agent_free(agent *a)
{
    if (!a) return;
    free(a->name);
    free(a->host);
    free(a->version);
    json_decref(a->gpus);
    json_decref(a->cached);
    free(a->on);
    free(a);
}

void sched_unload(sched *s)
{
    for (size_t i = 0; i < s->ntrials; i++) trial_free(s->trials[i]);
    for (size_t i = 0; i < s->nexps; i++) exp_free(s->exps[i]);
    for (size_t i = 0; i < s->nagents; i++) agent_free(s->agents[i]);
    s->ntrials = s->nexps = s->nagents = s->nlive = 0;
}

void agent_set_gpus(agent *a, json_t *gpus)
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

experiment *exp_build(json_t *config, hf_jerr *e)
{
    experiment *x = calloc(1, sizeof *x);
    if (!x) { json_decref(config); return NULL; }
    x->config = config;
    if (experiment_parse(x->config, &x->spec, e)) goto fail;
    x->name = strdup(x->spec.name);
    x->srch = x->spec.ops->create(x->spec.searcher_cfg, x->spec.sp, x->spec.goal_max, x->spec.seed);
    if (!x->srch || !x->name) goto fail;
    /* The base's ops pointer is the core's to set (search.h leaves it
     * open); setting it here works whether or not create() did. */
    x->srch->ops = x->spec.ops;
    if (x->srch->ops->configure && x->srch->ops->configure(x->srch, &x->spec.mo)) goto fail;
    if (x->spec.median_cfg && !(x->med = search_median_new(x->spec.median_cfg))) goto fail;
    x->max_trials = x->spec.max_trials;
    const char *d = json_string_value(json_object_get(x->config, "description"));
    if ((d && !(x->description = strdup(d))) || !(x->tags = expmeta_tags_from_config(x->config))) goto fail;
    return x;
fail:
    exp_free(x);
    return NULL;
}

/* ---------- the core lock ---------- */

/* The owner of s->lock is recorded as the address of a thread-local byte:
 * unique per live thread, compared atomically, with no pthread_t races. */
static _Thread_local char lock_me;

void sched_lock(sched *s)
{
    atomic_fetch_add(&s->lock_waiters, 1);
    pthread_mutex_lock(&s->lock);
    atomic_fetch_sub(&s->lock_waiters, 1);
    HF_ASSERT(atomic_load(&s->lock_owner) == NULL);
    atomic_store(&s->lock_owner, &lock_me);
}

void sched_unlock(sched *s)
{
    HF_ASSERT(atomic_load(&s->lock_owner) == &lock_me);
    atomic_store(&s->lock_owner, NULL);
    pthread_mutex_unlock(&s->lock);
}

int sched_lock_held(sched *s)
{
    return atomic_load(&s->lock_owner) == &lock_me;
}

int sched_lock_wait(sched *s, pthread_cond_t *cv, const struct timespec *deadline)
{
    HF_ASSERT(sched_lock_held(s));
    atomic_store(&s->lock_owner, NULL);
    int w = pthread_cond_timedwait(cv, &s->lock, deadline);
    atomic_store(&s->lock_owner, &lock_me);
    return w;
}
