/*
 * search_pbt.c — population-based training (Jaderberg et al. 2017), in
 * synchronous generations.
 *
 * How generations map to trials: a PBT run is population_size (P) members
 * trained for G generations of perturb_interval (I) epochs each. Every
 * (generation g, member m) segment is ONE trial, of creation index
 * n = g*P + m, so the store holds P*G trials and each trial's lineage is
 * its parent_trial chain:
 *   - generation 0: member m is a fresh trial, hyperparameters from the
 *     priors (RNG from (seed, n)), budget I epochs, no parent;
 *   - generation g > 0 waits until every trial of generation g-1 ended
 *     (next() answers WAIT meanwhile). The members of g-1 are ranked by
 *     their objective (final value, else last report; failed ones last).
 *     Member m's previous segment is trial (g-1, m):
 *       * in the bottom `quantile` of the ranking -> EXPLOIT + EXPLORE:
 *         parent_trial = a trial drawn from the top `quantile` (RNG from
 *         (seed, n)), hyperparameters = search_space_perturb(parent's):
 *         numeric ones times 0.8 or 1.2, any one resampled from its prior
 *         with probability resample_probability;
 *       * otherwise -> continue: parent_trial = its own previous segment,
 *         same hyperparameters.
 *     The budget is (g+1)*I: HYPERFARM_MAX_EPOCHS counts epochs from the
 *     start of training, and the trial resumes from the parent's newest
 *     checkpoint (at epoch g*I), so it trains I more epochs.
 * G = floor(max_trials / P), further capped by max_epochs / I when
 * max_epochs is given. After P*G trials next() answers DONE.
 *
 * Everything depends only on (seed, n) and the results of generation g-1,
 * so replaying the store rebuilds the same decisions.
 */
#include "search.h"
#include "search_space.h"
#include "hf_err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct pbt_trial {
    int64_t  id, index, parent;
    json_t  *hparams;
    double   last, final;
    int      done, outcome;
} pbt_trial;

typedef struct pbt_searcher {
    searcher             base;
    const search_space  *sp;
    uint64_t             seed;
    int64_t              pop, interval, generations;
    double               quantile, resample_p;
    pbt_trial           *t;
    size_t               n, cap;
} pbt_searcher;

static int pbt_validate(const json_t *cfg, const search_space *sp, hf_jerr *e)
{
    static const char *const own[] = {"population_size", "perturb_interval", "quantile",
                                      "resample_probability", NULL};
    int64_t pop = 8, it = 1, mt = 0;
    double d;
    int rc;
    (void)sp;
    if ((rc = search_cfg_only_keys(cfg, own, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "population_size", 0, 2, 10000, &pop, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "perturb_interval", 0, 1, 1000000, &it, e))) return rc;
    if ((rc = hf_json_get_number(cfg, "searcher", "quantile", 0, 0, 0.5, &d, e))) return rc;
    if (json_object_get(cfg, "quantile") && d <= 0)
        return hf_jerr_set(e, "searcher", "quantile", "must be > 0 and <= 0.5, got %g", d);
    if ((rc = hf_json_get_number(cfg, "searcher", "resample_probability", 0, 0, 1, &d, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "max_trials", 0, 1, INT64_MAX, &mt, e))) return rc;
    if (mt && mt < 2 * pop)
        return hf_jerr_set(e, "searcher", "max_trials",
                           "must be at least 2 x population_size (%lld) for pbt: one trial per member per generation",
                           (long long)pop);
    int64_t me = search_cfg_int(cfg, "max_epochs", 0);
    if (me && me < 2 * it)
        return hf_jerr_set(e, "searcher", "perturb_interval",
                           "must be at most half of max_epochs (%lld): at least two generations", (long long)me);
    return 0;
}

static searcher *pbt_create(const json_t *cfg, const search_space *sp, int goal_maximize, uint64_t seed)
{
    (void)goal_maximize;
    pbt_searcher *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->sp = sp;
    s->seed = seed;
    s->pop = search_cfg_int(cfg, "population_size", 8);
    s->interval = search_cfg_int(cfg, "perturb_interval", 1);
    s->quantile = search_cfg_num(cfg, "quantile", 0.25);
    s->resample_p = search_cfg_num(cfg, "resample_probability", 0.25);
    if (s->pop < 2) s->pop = 2;
    if (s->interval < 1) s->interval = 1;
    int64_t mt = search_cfg_int(cfg, "max_trials", 0), me = search_cfg_int(cfg, "max_epochs", 0);
    s->generations = mt > 0 ? mt / s->pop : INT64_MAX / (s->pop + 1);
    if (me > 0 && me / s->interval < s->generations) s->generations = me / s->interval;
    if (s->generations < 1) s->generations = 1;
    return &s->base;
}

static void pbt_destroy(searcher *base)
{
    pbt_searcher *s = (pbt_searcher *)base;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) json_decref(s->t[i].hparams);
    free(s->t);
    free(s);
}

static pbt_trial *pbt_by_id(pbt_searcher *s, int64_t id)
{
    for (size_t i = s->n; i-- > 0;)
        if (s->t[i].id == id) return &s->t[i];
    return NULL;
}

static pbt_trial *pbt_by_index(pbt_searcher *s, int64_t index)
{
    if (index >= 0 && (size_t)index < s->n && s->t[index].index == index) return &s->t[index];
    for (size_t i = 0; i < s->n; i++)
        if (s->t[i].index == index) return &s->t[i];
    return NULL;
}

static double trial_score(const pbt_trial *t)
{
    if (t->outcome == SEARCH_FAILED || t->outcome == SEARCH_CANCELED) return -INFINITY;
    if (isfinite(t->final)) return t->final;
    return isfinite(t->last) ? t->last : -INFINITY;
}

/* Rank of each member of generation g (0 = best) into rank[P]; members
 * in rank order into order[P]. RET 0, or -1 if a member is missing or
 * still running. */
static int pbt_rank(pbt_searcher *s, int64_t g, pbt_trial **order, int64_t *rank)
{
    int64_t P = s->pop;
    for (int64_t m = 0; m < P; m++) {
        pbt_trial *t = pbt_by_index(s, g * P + m);
        if (!t || !t->done) return -1;
        order[m] = t;
    }
    /* Insertion sort: best first, ties to the lower member index. */
    for (int64_t i = 1; i < P; i++) {
        pbt_trial *x = order[i];
        int64_t j = i - 1;
        while (j >= 0 && (trial_score(order[j]) < trial_score(x) ||
                          (trial_score(order[j]) == trial_score(x) && order[j]->index > x->index))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = x;
    }
    for (int64_t r = 0; r < P; r++) rank[order[r]->index - g * P] = r;
    return 0;
}

static int pbt_next(searcher *base, int64_t n_created, int64_t n_active, search_new *out)
{
    pbt_searcher *s = (pbt_searcher *)base;
    (void)n_active;
    out->hparams = NULL;
    out->parent_trial = 0;
    out->resume_trial = 0;
    if (n_created >= s->pop * s->generations) return SEARCH_DONE;
    int64_t g = n_created / s->pop, m = n_created % s->pop;
    uint64_t rng = search_rng_derive(s->seed, (uint64_t)n_created);
    out->budget = (g + 1) * s->interval;
    if (g == 0) {
        out->hparams = search_space_sample(s->sp, &rng);
        return out->hparams ? SEARCH_CREATE : SEARCH_WAIT;
    }
    pbt_trial **order = malloc((size_t)s->pop * sizeof *order);
    int64_t *rank = malloc((size_t)s->pop * sizeof *rank);
    int rc = SEARCH_WAIT;
    if (!order || !rank || pbt_rank(s, g - 1, order, rank)) goto end;
    int64_t nq = (int64_t)floor((double)s->pop * s->quantile);
    if (nq < 1) nq = 1;
    pbt_trial *prev = order[rank[m]];
    if (!isfinite(trial_score(order[0]))) {
        /* Nothing of the previous generation has a result: start afresh. */
        out->hparams = search_space_sample(s->sp, &rng);
        out->budget = s->interval;
    } else if (rank[m] >= s->pop - nq && isfinite(trial_score(order[0]))) {
        int64_t pick = (int64_t)(search_rng_uniform(&rng) * (double)nq);
        if (pick >= nq) pick = nq - 1;
        pbt_trial *src = order[pick];
        if (!isfinite(trial_score(src))) src = order[0];
        out->parent_trial = src->id;
        out->hparams = search_space_perturb(s->sp, src->hparams, s->resample_p, &rng);
    } else {
        out->parent_trial = prev->id;
        out->hparams = json_deep_copy(prev->hparams);
    }
    rc = out->hparams ? SEARCH_CREATE : SEARCH_WAIT;
end:
    free(order);
    free(rank);
    return rc;
}

static void pbt_on_created(searcher *base, int64_t trial_id, int64_t index, const json_t *hp,
                           int64_t budget, int64_t parent)
{
    pbt_searcher *s = (pbt_searcher *)base;
    (void)budget;
    if (pbt_by_id(s, trial_id)) return;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 32;
        pbt_trial *nt = realloc(s->t, nc * sizeof *nt);
        if (!nt) return;
        s->t = nt; s->cap = nc;
    }
    pbt_trial *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    t->id = trial_id;
    t->index = index;
    t->parent = parent;
    t->hparams = json_deep_copy(hp);
    t->last = t->final = NAN;
}

static int pbt_on_report(searcher *base, int64_t trial_id, double epoch, double value)
{
    pbt_searcher *s = (pbt_searcher *)base;
    pbt_trial *t = pbt_by_id(s, trial_id);
    if (!t || !isfinite(value)) return SEARCH_CONTINUE;
    t->last = value;
    /* A segment that trains past its generation is stopped. */
    int64_t g = t->index / s->pop;
    if (isfinite(epoch) && epoch > (double)((g + 1) * s->interval) + 1e-9) return SEARCH_STOP;
    return SEARCH_CONTINUE;
}

static void pbt_on_done(searcher *base, int64_t trial_id, int outcome, double value)
{
    pbt_searcher *s = (pbt_searcher *)base;
    pbt_trial *t = pbt_by_id(s, trial_id);
    if (!t) return;
    t->done = 1;
    t->outcome = outcome;
    if (isfinite(value)) t->final = value;
}

static json_t *pbt_describe(searcher *base)
{
    pbt_searcher *s = (pbt_searcher *)base;
    json_t *gens = json_array();
    int64_t ng = s->n ? ((int64_t)s->n - 1) / s->pop + 1 : 0;
    for (int64_t g = 0; g < ng; g++) {
        json_t *members = json_array();
        double best = -INFINITY;
        for (int64_t m = 0; m < s->pop; m++) {
            pbt_trial *t = pbt_by_index(s, g * s->pop + m);
            if (!t) continue;
            double v = trial_score(t);
            if (v > best) best = v;
            json_array_append_new(members, json_pack("{s:I, s:I, s:b, s:o}", "trial_id", (json_int_t)t->id,
                                                     "parent_trial", (json_int_t)t->parent, "done", t->done,
                                                     "value", isfinite(v) ? json_real(v) : json_null()));
        }
        json_array_append_new(gens, json_pack("{s:I, s:I, s:o, s:o}", "generation", (json_int_t)g,
                                              "budget", (json_int_t)((g + 1) * s->interval),
                                              "best", isfinite(best) ? json_real(best) : json_null(),
                                              "members", members));
    }
    return json_pack("{s:s, s:I, s:I, s:I, s:o}", "algorithm", "pbt", "population_size", (json_int_t)s->pop,
                     "perturb_interval", (json_int_t)s->interval, "generations_total",
                     (json_int_t)s->generations, "generations", gens);
}

const searcher_ops search_pbt_ops = {
    .name = "pbt",
    .validate = pbt_validate,
    .create = pbt_create,
    .destroy = pbt_destroy,
    .next = pbt_next,
    .on_created = pbt_on_created,
    .on_report = pbt_on_report,
    .on_done = pbt_on_done,
    .describe = pbt_describe,
};
