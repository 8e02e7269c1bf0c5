/*
 * sched_views.c — JSON views of the scheduler core (sched_int.h) and the
 * public calls that only read the model: experiment summaries, trial and
 * agent views, the trial table, top-k, export, and the /metrics gauges.
 * Shapes are docs/protocol.md's; every call takes the core lock and hands
 * the caller new references (deep copies of what the core keeps mutating).
 *
 * Cached views. GET /experiments/{id}/trials answers up to thousands of
 * trial views while heartbeats wait for the same lock, so each trial keeps
 * its view serialized (compact JSON, as api_http.c sends it) and rebuilds it
 * only when something the view shows has changed. Rather than trusting
 * every mutation site to clear a flag, the view remembers a signature of
 * all it was built from (scalars, kill reason, a hash of the ranks, and
 * mver, which every change of latest/best bumps; hparams, idx, parent and
 * agent names never change) and is rebuilt when the signature differs.
 */
#include "scheduler/core/sched_int.h"

#include "scheduler/core/expmeta.h"

#include "hf_err.h"
#include "hf_time.h"

#include <stdlib.h>
#include <string.h>

static json_t *opt_int(int has, int64_t v) { return has ? json_integer(v) : json_null(); }

json_t *exp_summary(const experiment *x)
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
    json_t *v = json_pack("{sIsssssss{ssss}sIsosososIsIsIsf}", "id", (json_int_t)x->id, "name", x->name,
                     "state", exp_state_names[x->state], "searcher", x->spec.searcher_name,
                     "objective", "metric", x->spec.metric, "goal", x->spec.goal_max ? "maximize" : "minimize",
                     "created_at", (json_int_t)x->created_at, "ended_at", opt_int(x->ended_at > 0, x->ended_at),
                     "counts", counts, "best", best, "max_trials", (json_int_t)x->max_trials,
                     "max_concurrent_trials", (json_int_t)x->spec.max_concurrent,
                     "priority", (json_int_t)x->spec.priority, "weight", x->spec.weight);
    if (!v) return NULL;
    /* How a trial's objective is computed, and every objective of a list
     * (docs/guide.md "The objective", docs/search.md "Multi-objective"). */
    json_object_set_new(json_object_get(v, "objective"), "aggregate",
                        json_string(x->spec.agg_last ? "last" : "best"));
    if (x->spec.mo.n_obj > 1) {
        json_t *objs = json_array();
        for (int k = 0; k < x->spec.mo.n_obj; k++)
            json_array_append_new(objs, json_pack("{ssss}", "metric", x->spec.obj_metric[k], "goal",
                                                  x->spec.obj_goal_max[k] ? "maximize" : "minimize"));
        json_object_set_new(v, "objectives", objs);
    }
    if (x->archived) json_object_set_new(v, "archived", json_true());
    /* Why it ended (docs/scheduler.md "End states"), null while it runs. */
    json_object_set_new(v, "end_reason", x->end_reason[0] ? json_string(x->end_reason) : json_null());
    /* Workflow members (docs/scheduler.md "Workflow"). */
    json_object_set_new(v, "description", x->description ? json_string(x->description) : json_null());
    json_object_set_new(v, "tags", x->tags ? json_deep_copy(x->tags) : json_array());
    json_object_set_new(v, "parent_experiment", opt_int(x->parent_id > 0, x->parent_id));
    json_object_set_new(v, "submitted_by", x->submitted_by ? json_string(x->submitted_by) : json_null());
    json_object_set_new(v, "seed", json_integer((json_int_t)(x->spec.seed & INT64_MAX)));
    if (x->warm || x->spec.n_enqueue)
        json_object_set_new(v, "warm_start", json_pack("{sIsI}", "observed", (json_int_t)json_array_size(x->warm),
                                                       "enqueued", (json_int_t)x->spec.n_enqueue));
    return v;
}

/* {"metric": "minimize"|"maximize"} for each metric in t's best: the
 * direction its best was taken in (docs/guide.md "The objective"). */
static json_t *trial_goals(const trial *t)
{
    json_t *g = json_object(), *v;
    const char *k;
    json_object_foreach(t->best, k, v)
        json_object_set_new(g, k, json_string(metric_minimized(t->exp, k) ? "minimize" : "maximize"));
    return g;
}

json_t *trial_view(sched *s, const trial *t)
{
    agent *a = t->agent_id ? agent_find(s, t->agent_id) : NULL;
    json_t *ranks = json_array();
    for (int r = 0; r < t->nranks; r++) {
        agent *ra = agent_find(s, t->ranks[r].agent_id);
        json_array_append_new(ranks, json_pack("{sisIss}", "rank", t->ranks[r].rank, "agent_id",
                                               (json_int_t)t->ranks[r].agent_id, "agent", ra ? ra->name : "?"));
    }
    int64_t budget = t->budget > 0 ? t->budget : t->exp->spec.max_epochs;
    json_t *v = json_pack("{sIsIsssOsosososIsIsosIsososososososIsIsssI}", "id", (json_int_t)t->id,
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
                     "kill_reason", t->kill_state >= 0 ? t->kill_reason : "",
                     "seed", (json_int_t)expmeta_trial_seed(t->exp->spec.seed, t->idx));
    if (v) json_object_set_new(v, "goals", trial_goals(t));
    return v;
}

/* ---------- the cached trial table (see the top of this file) ---------- */

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

json_t *agent_view(sched *s, const agent *a)
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

/* ---------- read-only public calls ---------- */

int sched_experiment_list(sched *s, int with_archived, json_t **out)
{
    return sched_experiment_list_tagged(s, with_archived, NULL, out);
}

int sched_experiment_list_tagged(sched *s, int with_archived, const char *tag, json_t **out)
{
    sched_lock(s);
    json_t *a = json_array();
    for (size_t i = 0; i < s->nexps; i++)
        if ((with_archived || !s->exps[i]->archived) && (!tag || expmeta_has_tag(s->exps[i]->tags, tag)))
            json_array_append_new(a, exp_summary(s->exps[i]));
    sched_unlock(s);
    *out = json_pack("{so}", "experiments", a);
    return *out ? 0 : HF_ENOMEM;
}

int sched_experiment_get(sched *s, int64_t id, json_t **out)
{
    int rc = HF_ENOTFOUND;
    sched_lock(s);
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
    sched_unlock(s);
    return rc;
}

/* The views of all x's trials, in creation order. */
static json_t *exp_trial_views(sched *s, const experiment *x)
{
    json_t *a = json_array();
    for (size_t i = 0; i < x->ntrials; i++) json_array_append_new(a, trial_view(s, x->trials[i]));
    return a;
}

int sched_experiment_trials(sched *s, int64_t id, json_t **out)
{
    sched_lock(s);
    experiment *x = exp_find(s, id);
    if (x) *out = json_pack("{so}", "trials", exp_trial_views(s, x));
    sched_unlock(s);
    return x ? 0 : HF_ENOTFOUND;
}

int sched_experiment_trials_text(sched *s, int64_t id, char **out, size_t *len)
{
    static const char head[] = "{\"trials\":[", tail[] = "]}";
    int rc = HF_ENOTFOUND;
    char *text = NULL;
    sched_lock(s);
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
    sched_unlock(s);
    free(text);
    return rc;
}

static const experiment *sort_exp;
static int by_objective(const void *a, const void *b)
{
    const trial *x = *(trial *const *)a, *y = *(trial *const *)b;
    double vx = exp_norm(sort_exp, x->obj), vy = exp_norm(sort_exp, y->obj);
    return vx > vy ? -1 : vx < vy ? 1 : (x->id > y->id) - (x->id < y->id);
}

int sched_experiment_top(sched *s, int64_t id, int64_t k, json_t **out)
{
    int rc = HF_ENOTFOUND;
    sched_lock(s);
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
    sched_unlock(s);
    return rc;
}

int sched_experiment_export(sched *s, int64_t id, json_t **summary, json_t **trials)
{
    int rc = HF_ENOTFOUND;
    sched_lock(s);
    experiment *x = exp_find(s, id);
    if (x) {
        *summary = exp_summary(x);
        json_object_set_new(*summary, "config", json_deep_copy(x->config));
        *trials = exp_trial_views(s, x);
        rc = 0;
    }
    sched_unlock(s);
    return rc;
}

int sched_trial_exists(sched *s, int64_t id)
{
    sched_lock(s);
    int ok = trial_find(s, id) != NULL;
    sched_unlock(s);
    return ok;
}

int sched_trial_get(sched *s, int64_t id, json_t **out)
{
    sched_lock(s);
    trial *t = trial_find(s, id);
    if (t) {
        *out = trial_view(s, t);
        json_object_set_new(*out, "notes", t->notes ? json_string(t->notes) : json_null());
    }
    sched_unlock(s);
    return t ? 0 : HF_ENOTFOUND;
}

int sched_agent_list(sched *s, json_t **out)
{
    sched_lock(s);
    json_t *a = json_array();
    for (size_t i = 0; i < s->nagents; i++) json_array_append_new(a, agent_view(s, s->agents[i]));
    sched_unlock(s);
    *out = json_pack("{so}", "agents", a);
    return 0;
}

void sched_get_stats(sched *s, sched_stats *o)
{
    memset(o, 0, sizeof *o);
    sched_lock(s);
    int64_t mono = hf_mono_ms();
    for (size_t i = 0; i < s->nexps; i++) {
        experiment *x = s->exps[i];
        for (int k = 0; k < T__N; k++) o->trials_by_state[k] += x->counts[k];
        if (x->state == E_ACTIVE) o->experiments_active++;
    }
    o->queued = o->trials_by_state[T_QUEUED];
    o->experiments_purging = s->npurge;
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
    sched_unlock(s);
}
