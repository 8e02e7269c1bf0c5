/*
 * search_asha.c — asynchronous successive halving (Li et al., "A System for
 * Massively Parallel Hyperparameter Tuning", MLSys 2020), with brackets
 * for asynchronous Hyperband.
 *
 * Budgets are epochs (HYPERFARM_MAX_EPOCHS). With r = min_epochs,
 * R = max_epochs and eta = reduction_factor, bracket s (0 <= s < brackets)
 * has rungs r*eta^s, r*eta^(s+1), ... below R, and a top rung R. Trial n
 * (creation index) goes to bracket n mod brackets, so the assignment
 * depends on n only.
 *
 * mode "promote" (the default; the algorithm of the paper):
 *   a new trial is granted its bracket's lowest rung budget; it trains to
 *   that many epochs and exits. Its objective at that epoch is its result
 *   for the rung. Whenever the dispatcher may place work, next() looks,
 *   from the highest rung down, for a finished trial that is in the top
 *   floor(n_k / eta) of the n_k results of its rung k and was not yet
 *   promoted; if there is one it is PROMOTED: next() returns it as
 *   resume_trial with the next rung's budget, and the dispatcher continues
 *   the same trial from its own checkpoint with the larger
 *   HYPERFARM_MAX_EPOCHS. Otherwise a new trial is created (hyperparameters
 *   from the priors, RNG from (seed, n)). on_report stops a trial that
 *   runs past the budget it was granted (a program that ignores
 *   HYPERFARM_MAX_EPOCHS). After max_trials trials exist, promotions still
 *   go on; next() answers WAIT while trials run and DONE when nothing runs
 *   and nothing can be promoted.
 * mode "stop" (Ray Tune's ASHAScheduler): every trial gets R epochs; when
 *   a report crosses a rung, the trial is stopped unless its value is in
 *   the top 1/eta of the values recorded at that rung so far (decided once
 *   at least eta values exist there).
 *
 * Replay: the scheduler replays on_created with each trial's *current*
 * budget, then its reports, then its end. A trial's rung results come from
 * its reports (the value at the first report with epoch >= rung budget;
 * failing that, the final value when it ended at that budget), and "was
 * promoted from rung k" is "its budget exceeds rung k's budget", so a
 * rebuilt searcher holds exactly the live one's state.
 *
 * sampler "tpe" (model-based, as in BOHB — Falkner et al. 2018 — and
 *   Optuna's TPESampler with a HyperbandPruner): once n_startup_trials
 *   trials have a rung result, a new trial's hyperparameters come from
 *   TPE fitted on all of them, ranked the way Optuna ranks pruned trials:
 *   the highest rung budget reached first, then the result there (so the
 *   "good" set is the trials ASHA promoted furthest, the "bad" set those it
 *   left behind). Fitting on one rung alone fails: a high rung holds only
 *   promoted trials, and TPE's prior then pulls proposals to the regions
 *   no trial there came from. Before that, the priors, like "random".
 *   Rung results are rebuilt by replay, so a rebuilt searcher proposes
 *   the same next trial.
 *
 * Several objectives or constraints (configure; docs/search.md): a rung
 *   result is then the vector of the trial's last reported objectives and
 *   constraint values at the report that reached the rung, and a rung is
 *   ordered by search_mo_order — feasible results by non-dominated rank,
 *   then crowding distance, then age; infeasible ones after, by violation
 *   — instead of by the one value. "Top floor(n_k / eta)" means the first
 *   so many in that order. The scheduler feeds a report's other metrics
 *   before its first objective, so the vector belongs to one report.
 *
 * Reports must carry "epoch" for the rungs to mean epochs (a trial that
 * reports only steps is judged against budgets in steps).
 *
 * Rungs in seconds ("time_metric", docs/search.md "Rungs in seconds"; Ray
 *   Tune's time_attr): a trial's resource is then the sum of its reports
 *   of time_metric (the trainer's epoch_seconds: what each epoch cost its
 *   slot), and bracket s has rungs min_time*eta^(s+k) below max_time, then
 *   max_time. Every trial is granted max_epochs; the report that brings
 *   the sum to a rung's time records the rung result there, and in promote
 *   mode stops the trial (SIGTERM: the trainer checkpoints where it is),
 *   which waits at that rung until it is promoted (continued with
 *   max_epochs again) or not. A trial that completes its max_epochs has
 *   its last value recorded for every rung above (it cannot train on).
 *   So rungs compare configurations at equal training time rather than
 *   equal epochs: a network that trains an epoch in 0.1 s is judged after
 *   as many epochs as fit in the time a large one spends on one. Replay:
 *   the sums and rung results come from the replayed reports, and a trial
 *   waits at its highest recorded rung while it is not running, so a
 *   rebuilt searcher holds the live one's state.
 */
#include "search.h"
#include "search_mo.h"
#include "search_space.h"
#include "hf_err.h"
#include "hf_metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ASHA_MAX_RUNGS   32
#define ASHA_MAX_BRACKETS 16

typedef struct asha_trial {
    int64_t  id;
    int64_t  index;
    int      bracket;
    int64_t  budget;               /* current budget (epochs) */
    int      active;               /* created/resumed and not ended */
    int      outcome;              /* last on_done outcome (valid when !active) */
    int      stopped_by_us;
    json_t  *hparams;              /* own reference, handed back on promotion */
    int      nres;                 /* rungs with a recorded result */
    double   res[ASHA_MAX_RUNGS];  /* result at rung k, k < nres */
    double   last;                 /* last reported value */
    search_mo_last  mlast;         /* multi-objective: last value of every slot */
    search_mo_last *mres;          /* multi-objective: mlast at rung k, k < nres (own) */
    search_cost     cost;          /* reports of cost_metric (cost_on) */
    double          elapsed;       /* time_on: sum of the time_metric reports */
} asha_trial;

typedef struct asha_bracket {
    int      nrungs;
    int64_t  budget[ASHA_MAX_RUNGS];
    double   tb[ASHA_MAX_RUNGS];    /* time_on: rung k's time (time_metric's unit) */
} asha_bracket;

typedef struct asha_searcher {
    searcher             base;
    const search_space  *sp;
    uint64_t             seed;
    int64_t              max_trials;
    int64_t              min_epochs, max_epochs, eta;
    int                  stop_mode;
    int                  sampler_tpe;      /* "sampler": "tpe" */
    int64_t              n_startup;        /* trials with a rung result before TPE proposes */
    int                  nbrackets;
    asha_bracket         br[ASHA_MAX_BRACKETS];
    asha_trial          *t;
    size_t               n, cap;
    search_tpe_obs      *hist;             /* warm start: observed history (hparams owned) */
    size_t               nhist, chist;
    search_objectives    mo;
    int                  mo_on;            /* several objectives or constraints */
    int                  cost_on;          /* "cost_metric" (sampler tpe): SEARCH_COST_SLOT is the cost */
    int                  cost_cooling;     /* "cost_cooling": the cost's weight falls to 0 at max_trials */
    int                  time_on;          /* "time_metric": rungs in its summed reports, not epochs */
    double               min_time, max_time;
} asha_searcher;

/* Rungs of bracket s: tmin*eta^(s+k) while < tmax, then tmax (time_metric's
 * unit, or epochs through asha_rungs). RET count. */
static int asha_rungs_time(double tmin, double tmax, int64_t eta, int s, double *out)
{
    int n = 0;
    double b = tmin;
    for (int i = 0; i < s; i++) b *= (double)eta;
    while (b < tmax * (1 - 1e-9) && n < ASHA_MAX_RUNGS - 1) {
        out[n++] = b;
        b *= (double)eta;
    }
    out[n++] = tmax;
    return n;
}

/* Rungs of bracket s in epochs: r*eta^(s+k) while < R, then R. RET count. */
static int asha_rungs(int64_t r, int64_t R, int64_t eta, int s, int64_t *out)
{
    double t[ASHA_MAX_RUNGS];
    int n = asha_rungs_time((double)r, (double)R, eta, s, t);
    for (int k = 0; k < n; k++) out[k] = (int64_t)t[k];
    return n;
}

static int asha_validate(const json_t *cfg, const search_space *sp, hf_jerr *e)
{
    static const char *const own[] = {"reduction_factor", "min_epochs", "brackets", "mode", "sampler",
                                      "n_startup_trials", "cost_metric", "cost_cooling", "time_metric",
                                      "min_time", "max_time", NULL};
    int64_t eta = 3, r = 1, R = 0, br = 1, ns = 0;
    const char *mode = NULL, *sampler = NULL;
    int rc;
    (void)sp;
    if ((rc = search_cfg_only_keys(cfg, own, e))) return rc;
    if ((rc = hf_json_get_int(cfg, "searcher", "reduction_factor", 0, INT64_MIN, INT64_MAX, &eta, e))) return rc;
    if (eta < 2 || eta > 100)
        return hf_jerr_set(e, "searcher", "reduction_factor", "must be >= 2 and <= 100, got %lld", (long long)eta);
    if ((rc = hf_json_get_int(cfg, "searcher", "max_epochs", 1, 1, 1000000, &R, e))) {
        if (!json_object_get(cfg, "max_epochs"))
            hf_jerr_set(e, "searcher", "max_epochs", "required by asha: the largest budget in epochs");
        return rc;
    }
    if ((rc = hf_json_get_int(cfg, "searcher", "min_epochs", 0, 1, 1000000, &r, e))) return rc;
    if (r >= R)
        return hf_jerr_set(e, "searcher", "min_epochs", "must be < max_epochs (%lld), got %lld",
                           (long long)R, (long long)r);
    if ((rc = hf_json_get_int(cfg, "searcher", "brackets", 0, 1, ASHA_MAX_BRACKETS, &br, e))) return rc;
    /* Bracket s starts at r*eta^s: there are as many brackets as rungs in
     * bracket 0 (the last one runs every trial to max_epochs, as in
     * Hyperband). */
    int64_t tmp[ASHA_MAX_RUNGS];
    double ttmp[ASHA_MAX_RUNGS], tmin = 0, tmax = 0;
    const char *tm = NULL;
    if ((rc = hf_json_get_string(cfg, "searcher", "time_metric", 0, HF_METRIC_NAME_MAX, &tm, e))) return rc;
    if (tm && !hf_metric_name_ok(tm))
        return hf_jerr_set(e, "searcher", "time_metric", "not a valid metric name ([A-Za-z0-9_.:/-], 1..64 bytes)");
    if (!tm && (json_object_get(cfg, "min_time") || json_object_get(cfg, "max_time")))
        return hf_jerr_set(e, "searcher", json_object_get(cfg, "min_time") ? "min_time" : "max_time",
                           "only with \"time_metric\" (the metric whose summed reports the rungs measure)");
    if (tm) {
        if ((rc = hf_json_get_number(cfg, "searcher", "min_time", 1, 1e-6, 1e9, &tmin, e))) {
            if (!json_object_get(cfg, "min_time"))
                hf_jerr_set(e, "searcher", "min_time", "required with \"time_metric\": the first rung's time, "
                            "in the metric's unit (seconds for epoch_seconds)");
            return rc;
        }
        tmax = tmin * (double)R / (double)r;
        if ((rc = hf_json_get_number(cfg, "searcher", "max_time", 0, 1e-6, 1e12, &tmax, e))) return rc;
        if (tmax <= tmin)
            return hf_jerr_set(e, "searcher", "max_time", "must be > min_time (%g), got %g", tmin, tmax);
    }
    int max_br = tm ? asha_rungs_time(tmin, tmax, eta, 0, ttmp) : asha_rungs(r, R, eta, 0, tmp);
    if (max_br > ASHA_MAX_BRACKETS) max_br = ASHA_MAX_BRACKETS;
    if (br > max_br && tm)
        return hf_jerr_set(e, "searcher", "brackets", "at most %d with min_time %g, max_time %g and "
                           "reduction_factor %lld", max_br, tmin, tmax, (long long)eta);
    if (br > max_br)
        return hf_jerr_set(e, "searcher", "brackets",
                           "at most %d with min_epochs %lld, max_epochs %lld and reduction_factor %lld",
                           max_br, (long long)r, (long long)R, (long long)eta);
    if ((rc = hf_json_get_string(cfg, "searcher", "mode", 0, 16, &mode, e))) return rc;
    if (mode && strcmp(mode, "promote") && strcmp(mode, "stop"))
        return hf_jerr_set(e, "searcher", "mode", "must be \"promote\" or \"stop\", got \"%s\"", mode);
    if ((rc = hf_json_get_string(cfg, "searcher", "sampler", 0, 16, &sampler, e))) return rc;
    if (sampler && strcmp(sampler, "random") && strcmp(sampler, "tpe"))
        return hf_jerr_set(e, "searcher", "sampler", "must be \"random\" or \"tpe\", got \"%s\"", sampler);
    if ((rc = hf_json_get_int(cfg, "searcher", "n_startup_trials", 0, 2, 100000, &ns, e))) return rc;
    if (json_object_get(cfg, "n_startup_trials") && !(sampler && !strcmp(sampler, "tpe")))
        return hf_jerr_set(e, "searcher", "n_startup_trials", "only with \"sampler\": \"tpe\"");
    /* The cost only weighs TPE's proposals (search_validate checked the name). */
    if (json_object_get(cfg, "cost_metric") && !(sampler && !strcmp(sampler, "tpe")))
        return hf_jerr_set(e, "searcher", "cost_metric", "only with \"sampler\": \"tpe\" (the random sampler "
                           "has no model to weigh the cost against)");
    return 0;
}

static searcher *asha_create(const json_t *cfg, const search_space *sp, int goal_maximize, uint64_t seed)
{
    (void)goal_maximize;
    asha_searcher *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    const char *mode = json_string_value(json_object_get(cfg, "mode"));
    s->sp = sp;
    s->seed = seed;
    s->max_trials = search_cfg_int(cfg, "max_trials", 0);
    s->eta = search_cfg_int(cfg, "reduction_factor", 3);
    s->max_epochs = search_cfg_int(cfg, "max_epochs", 27);
    s->min_epochs = search_cfg_int(cfg, "min_epochs", 1);
    s->stop_mode = mode && !strcmp(mode, "stop");
    const char *sampler = json_string_value(json_object_get(cfg, "sampler"));
    s->sampler_tpe = sampler && !strcmp(sampler, "tpe");
    s->n_startup = search_cfg_int(cfg, "n_startup_trials", 10);
    s->cost_on = s->sampler_tpe && json_object_get(cfg, "cost_metric") != NULL;
    s->cost_cooling = s->cost_on && json_is_true(json_object_get(cfg, "cost_cooling"));
    s->mo.n_obj = 1;    /* until configure: the cost's slot is then 1 */
    if (s->n_startup < 2) s->n_startup = 2;
    if (s->eta < 2) s->eta = 2;
    if (s->max_epochs < 1) s->max_epochs = 1;
    if (s->min_epochs < 1 || s->min_epochs > s->max_epochs) s->min_epochs = 1;
    int64_t nb = search_cfg_int(cfg, "brackets", 1);
    s->nbrackets = nb < 1 ? 1 : nb > ASHA_MAX_BRACKETS ? ASHA_MAX_BRACKETS : (int)nb;
    s->time_on = json_is_string(json_object_get(cfg, "time_metric"));
    s->min_time = search_cfg_num(cfg, "min_time", 1.0);
    if (!(s->min_time > 0)) s->min_time = 1.0;
    s->max_time = search_cfg_num(cfg, "max_time", s->min_time * (double)s->max_epochs / (double)s->min_epochs);
    if (!(s->max_time > s->min_time)) s->max_time = s->min_time * (double)s->eta;
    for (int b = 0; b < s->nbrackets; b++) {
        s->br[b].nrungs = asha_rungs(s->min_epochs, s->max_epochs, s->eta, b, s->br[b].budget);
        if (!s->time_on) continue;
        /* Every trial is granted max_epochs; the rungs are times. */
        s->br[b].nrungs = asha_rungs_time(s->min_time, s->max_time, s->eta, b, s->br[b].tb);
        for (int k = 0; k < s->br[b].nrungs; k++) s->br[b].budget[k] = s->max_epochs;
    }
    return &s->base;
}

static void asha_destroy(searcher *base)
{
    asha_searcher *s = (asha_searcher *)base;
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) { json_decref(s->t[i].hparams); free(s->t[i].mres); }
    for (size_t i = 0; i < s->nhist; i++) json_decref((json_t *)s->hist[i].hparams);
    free(s->t);
    free(s->hist);
    free(s);
}

static asha_trial *asha_find(asha_searcher *s, int64_t id)
{
    for (size_t i = s->n; i-- > 0;)
        if (s->t[i].id == id) return &s->t[i];
    return NULL;
}

/* Rung index whose budget equals b in bracket br, or -1. */
static int rung_of_budget(const asha_bracket *br, int64_t b)
{
    for (int k = 0; k < br->nrungs; k++)
        if (br->budget[k] == b) return k;
    return -1;
}

/* Multi-objective: the members of rung k of bracket b in search_mo_order's
 * order. OUT mem[0..*nk) (trial pointers, best first). RET 0 or HF_ENOMEM. */
static int asha_mo_rung(const asha_searcher *s, int b, int k, const asha_trial **mem, int64_t *nk)
{
    int m = s->mo.n_obj, rc = HF_ENOMEM;
    size_t n = 0;
    size_t cap = s->n ? s->n : 1;
    double *y = calloc(cap * (size_t)m, sizeof *y), *viol = calloc(cap, sizeof *viol);
    int64_t *tie = calloc(cap, sizeof *tie);
    size_t *ord = malloc((s->n ? s->n : 1) * sizeof *ord);
    const asha_trial **tmp = malloc((s->n ? s->n : 1) * sizeof *tmp);
    if (!y || !viol || !tie || !ord || !tmp) goto end;
    for (size_t i = 0; i < s->n; i++) {
        const asha_trial *o = &s->t[i];
        if (o->bracket != b || o->nres <= k || !o->mres) continue;
        const search_mo_last *r = &o->mres[k];
        for (int j = 0; j < m; j++) y[n * m + j] = (r->seen & (1u << j)) ? r->v[j] : -1e300;
        viol[n] = search_mo_violation(&s->mo, r);
        tie[n] = o->index;
        tmp[n++] = o;
    }
    if ((rc = search_mo_order(y, n, m, viol, tie, ord))) goto end;
    for (size_t i = 0; i < n; i++) mem[i] = tmp[ord[i]];
    *nk = (int64_t)n;
end:
    free(y); free(viol); free(tie); free(ord); free(tmp);
    return rc;
}

/* Multi-objective asha_in_top: t's position in rung k's order < n_k / eta. */
static int asha_mo_in_top(const asha_searcher *s, const asha_trial *t, int k)
{
    const asha_trial **mem = malloc((s->n ? s->n : 1) * sizeof *mem);
    int64_t nk = 0, top = 0;
    if (mem && asha_mo_rung(s, t->bracket, k, mem, &nk) == 0)
        for (int64_t i = 0; i < nk / s->eta; i++) top |= mem[i] == t;
    free(mem);
    return (int)top;
}

/* Is trial t among the top floor(n_k / eta) results of rung k of its bracket? */
static int asha_in_top(const asha_searcher *s, const asha_trial *t, int k)
{
    if (s->mo_on) return asha_mo_in_top(s, t, k);
    int64_t nk = 0, better = 0;
    double v = t->res[k];
    for (size_t i = 0; i < s->n; i++) {
        const asha_trial *o = &s->t[i];
        if (o->bracket != t->bracket || o->nres <= k) continue;
        nk++;
        /* Ties go to the older trial, so the order is total. */
        if (o != t && (o->res[k] > v || (o->res[k] == v && o->index < t->index))) better++;
    }
    return better < nk / s->eta;
}

/* May t be promoted from its current rung (finished there, not by us)? RET the rung or -1. */
static int asha_waiting_rung(const asha_searcher *s, const asha_trial *t)
{
    if (t->active || (t->outcome != SEARCH_COMPLETED && t->outcome != SEARCH_STOPPED) || t->stopped_by_us) return -1;
    const asha_bracket *br = &s->br[t->bracket];
    /* In time: a trial that stopped at a rung waits at its highest one
     * (one that completed its epochs has every rung recorded). */
    if (s->time_on) return t->nres >= 1 && t->nres < br->nrungs ? t->nres - 1 : -1;
    int k = rung_of_budget(br, t->budget);
    return k < 0 || k >= br->nrungs - 1 || t->nres <= k ? -1 : k;
}

/* Multi-objective asha_promotable: in each bracket and non-top rung, the
 * first waiting trial among the rung's top floor(n_k / eta); the highest
 * rung wins, then the better position, then the older trial. */
static asha_trial *asha_mo_promotable(asha_searcher *s, int64_t *new_budget)
{
    const asha_trial **mem = malloc((s->n ? s->n : 1) * sizeof *mem);
    const asha_trial *best = NULL;
    int best_k = -1;
    int64_t best_pos = 0;
    for (int b = 0; mem && b < s->nbrackets; b++)
        for (int k = s->br[b].nrungs - 2; k >= 0 && k >= best_k; k--) {
            int64_t nk = 0;
            if (asha_mo_rung(s, b, k, mem, &nk)) goto end;
            for (int64_t i = 0; i < nk / s->eta; i++) {
                if (asha_waiting_rung(s, mem[i]) != k) continue;
                if (!best || k > best_k || i < best_pos || (i == best_pos && mem[i]->index < best->index)) {
                    best = mem[i]; best_k = k; best_pos = i;
                }
                break;
            }
        }
end:
    free(mem);
    if (best) *new_budget = s->br[best->bracket].budget[best_k + 1];
    return (asha_trial *)best;
}

/* A finished, not yet promoted trial of some non-top rung that deserves
 * promotion: highest rung first, then best value, then oldest. */
static asha_trial *asha_promotable(asha_searcher *s, int64_t *new_budget)
{
    if (s->mo_on) return asha_mo_promotable(s, new_budget);
    asha_trial *best = NULL;
    int best_k = -1;
    for (size_t i = 0; i < s->n; i++) {
        asha_trial *t = &s->t[i];
        int k = asha_waiting_rung(s, t);
        if (k < 0 || !asha_in_top(s, t, k)) continue;
        if (!best || k > best_k || (k == best_k && (t->res[k] > best->res[k] ||
                                   (t->res[k] == best->res[k] && t->index < best->index)))) {
            best = t;
            best_k = k;
        }
    }
    if (best) *new_budget = s->br[best->bracket].budget[best_k + 1];
    return best;
}

/* Trials with at least one rung result (what the TPE sampler models). */
static int64_t asha_n_results(const asha_searcher *s)
{
    int64_t n = (int64_t)s->nhist;   /* warm-start history counts as results */
    for (size_t i = 0; i < s->n; i++) n += s->t[i].nres > 0;
    return n;
}

/* Several objectives: within each level (highest rung budget reached),
 * value = minus the position in search_mo_order of the results there, so
 * TPE's split follows ASHA's multi-objective ranking. obs[i].index is a
 * trial's creation index. RET 0 or HF_ENOMEM. */
static int asha_mo_levels(const asha_searcher *s, search_tpe_obs *obs, size_t n)
{
    int m = s->mo.n_obj, rc = HF_ENOMEM;
    double *y = calloc((n ? n : 1) * (size_t)m, sizeof *y), *viol = calloc(n ? n : 1, sizeof *viol);
    int64_t *tie = calloc(n ? n : 1, sizeof *tie);
    size_t *grp = malloc((n ? n : 1) * sizeof *grp), *ord = malloc((n ? n : 1) * sizeof *ord);
    char *done = calloc(n ? n : 1, 1);
    if (!y || !viol || !tie || !grp || !ord || !done) goto end;
    for (size_t a = 0; a < n; a++) {
        if (done[a]) continue;
        size_t k = 0;
        for (size_t b = a; b < n; b++) {
            if (obs[b].level != obs[a].level) continue;
            done[b] = 1;
            const asha_trial *t = NULL;
            for (size_t i = 0; i < s->n && !t; i++) if (s->t[i].index == obs[b].index) t = &s->t[i];
            const search_mo_last *r = t && t->mres ? &t->mres[t->nres - 1] : NULL;
            for (int j = 0; j < m; j++) y[k * m + j] = r && (r->seen & (1u << j)) ? r->v[j] : -1e300;
            viol[k] = r ? search_mo_violation(&s->mo, r) : INFINITY;
            tie[k] = obs[b].index;
            grp[k++] = b;
        }
        if ((rc = search_mo_order(y, k, m, viol, tie, ord))) goto end;
        for (size_t p = 0; p < k; p++) obs[grp[ord[p]]].value = -(double)p;
    }
    rc = 0;
end:
    free(y); free(viol); free(tie); free(grp); free(ord); free(done);
    return rc;
}

/* The level TPE ranks trial t's result by: its highest rung's budget, in
 * epochs, or in milliseconds of time_metric's unit with time rungs. */
static int64_t asha_level(const asha_searcher *s, const asha_trial *t)
{
    const asha_bracket *br = &s->br[t->bracket];
    return s->time_on ? (int64_t)llround(br->tb[t->nres - 1] * 1000.0) : br->budget[t->nres - 1];
}

/* Hyperparameters of a new trial: the priors, or TPE over the rung results. */
static json_t *asha_sample(asha_searcher *s, int64_t n_created, uint64_t *rng)
{
    if (!s->sampler_tpe || asha_n_results(s) < s->n_startup) return search_space_sample(s->sp, rng);
    search_tpe_obs *obs = malloc((s->n + s->nhist) * sizeof *obs);
    if (!obs) return NULL;
    size_t n = s->nhist;
    if (n) memcpy(obs, s->hist, n * sizeof *obs);
    for (size_t i = 0; i < s->n; i++) {
        const asha_trial *t = &s->t[i];
        if (t->nres < 1 || !isfinite(t->res[t->nres - 1])) continue;
        /* The cost per epoch of the trial so far: what a new trial near it
         * would cost per epoch of whatever budget ASHA grants it. */
        obs[n++] = (search_tpe_obs){t->hparams, asha_level(s, t), t->res[t->nres - 1], t->index,
                                    search_cost_mean(&t->cost)};
    }
    if (s->mo_on && asha_mo_levels(s, obs, n)) { free(obs); return NULL; }
    /* No constant liar: a running trial here is often a promoted, good one. */
    search_tpe_opts o = search_tpe_defaults;
    /* Cooling counts the random start-up trials as CArBO's initial design. */
    o.cost_cooled = search_cost_cooled(s->cost_cooling, n_created, s->n_startup, s->max_trials);
    json_t *hp = search_tpe_propose(s->sp, &o, obs, n, NULL, 0, rng);
    free(obs);
    return hp;
}

static int asha_next(searcher *base, int64_t n_created, int64_t n_active, search_new *out)
{
    asha_searcher *s = (asha_searcher *)base;
    out->hparams = NULL;
    out->parent_trial = 0;
    out->resume_trial = 0;
    if (!s->stop_mode) {
        int64_t nb = 0;
        asha_trial *t = asha_promotable(s, &nb);
        if (t) {
            /* Promote now: the dispatcher requeues it with the new budget.
             * The same state results from replay (budget > rung budget). */
            t->budget = nb;
            t->active = 1;
            out->resume_trial = t->id;
            out->budget = nb;
            out->hparams = t->hparams ? json_deep_copy(t->hparams) : json_object();  /* unchanged */
            return SEARCH_CREATE;
        }
    }
    if (s->max_trials > 0 && n_created >= s->max_trials)
        return (!s->stop_mode && n_active > 0) ? SEARCH_WAIT : SEARCH_DONE;
    uint64_t rng = search_rng_derive(s->seed, (uint64_t)n_created);
    out->hparams = asha_sample(s, n_created, &rng);
    if (!out->hparams) return SEARCH_WAIT;
    int b = (int)(n_created % s->nbrackets);
    out->budget = s->stop_mode ? s->max_epochs : s->br[b].budget[0];
    return SEARCH_CREATE;
}

static void asha_on_created(searcher *base, int64_t trial_id, int64_t index, const json_t *hp,
                            int64_t budget, int64_t parent)
{
    asha_searcher *s = (asha_searcher *)base;
    (void)parent;
    asha_trial *t = asha_find(s, trial_id);
    if (!t) {
        if (s->n == s->cap) {
            size_t nc = s->cap ? s->cap * 2 : 32;
            asha_trial *nt = realloc(s->t, nc * sizeof *nt);
            if (!nt) return;
            s->t = nt; s->cap = nc;
        }
        t = &s->t[s->n++];
        memset(t, 0, sizeof *t);
        t->id = trial_id;
    }
    t->index = index;
    t->bracket = (int)(index % s->nbrackets);
    t->budget = budget > 0 ? budget : (s->stop_mode ? s->max_epochs : s->br[t->bracket].budget[0]);
    t->active = 1;
    t->last = NAN;
    if (!t->hparams) t->hparams = json_deep_copy(hp);
    if (s->mo_on && !t->mres) t->mres = calloc(ASHA_MAX_RUNGS, sizeof *t->mres);
}

static void asha_on_metric(searcher *base, int64_t trial_id, int slot, double epoch, double value)
{
    asha_searcher *s = (asha_searcher *)base;
    asha_trial *t = asha_find(s, trial_id);
    (void)epoch;
    if (!t) return;
    if (s->time_on && slot == SEARCH_TIME_SLOT(&s->mo)) {
        if (isfinite(value) && value > 0) t->elapsed += value;
    } else if (s->cost_on && slot == SEARCH_COST_SLOT(&s->mo)) {
        search_cost_add(&t->cost, value);
    } else {
        search_mo_last_set(&t->mlast, slot, value);
    }
}

static int asha_configure(searcher *base, const search_objectives *mo)
{
    asha_searcher *s = (asha_searcher *)base;
    s->mo = *mo;
    s->mo_on = mo->n_obj > 1 || mo->n_con > 0;
    return 0;
}

/* Has t's report at epoch reached rung k (its epochs, or its time)? */
static int asha_reached(const asha_searcher *s, const asha_trial *t, int k, double epoch)
{
    const asha_bracket *br = &s->br[t->bracket];
    if (s->time_on) return t->elapsed >= br->tb[k] * (1 - 1e-9);
    return epoch >= (double)br->budget[k] - 1e-9;
}

/* Record results for every rung whose budget the report reached. RET the
 * highest rung recorded by this call, or -1. */
static int asha_record(asha_searcher *s, asha_trial *t, double epoch, double value)
{
    const asha_bracket *br = &s->br[t->bracket];
    int hit = -1;
    while (t->nres < br->nrungs && asha_reached(s, t, t->nres, epoch)) {
        t->res[t->nres] = value;
        if (t->mres) t->mres[t->nres] = t->mlast;
        hit = t->nres++;
    }
    return hit;
}

static int asha_on_report(searcher *base, int64_t trial_id, double epoch, double value)
{
    asha_searcher *s = (asha_searcher *)base;
    asha_trial *t = asha_find(s, trial_id);
    if (!t || !isfinite(value) || !isfinite(epoch)) return SEARCH_CONTINUE;
    t->last = value;
    search_mo_last_set(&t->mlast, 0, value);
    if (t->stopped_by_us) return SEARCH_STOP;
    int k = asha_record(s, t, epoch, value);
    const asha_bracket *br = &s->br[t->bracket];
    if (s->time_on && k >= 0) {
        /* A trial at its last epoch completes rather than stop. */
        if (epoch >= (double)s->max_epochs - 1e-9) return SEARCH_CONTINUE;
        /* Promote mode: it waits at rung k. Both modes: max_time is the end. */
        if (!s->stop_mode || k == br->nrungs - 1) return SEARCH_STOP;
    }
    if (s->stop_mode) {
        if (k < 0 || k >= br->nrungs - 1) return SEARCH_CONTINUE;
        int64_t nk = 0;
        for (size_t i = 0; i < s->n; i++)
            if (s->t[i].bracket == t->bracket && s->t[i].nres > k) nk++;
        if (nk < s->eta) return SEARCH_CONTINUE;
        if (!asha_in_top(s, t, k) && nk / s->eta > 0) {
            t->stopped_by_us = 1;
            return SEARCH_STOP;
        }
        return SEARCH_CONTINUE;
    }
    /* Promote mode: a trial past its granted budget is stopped; it keeps
     * its rung result and may still be promoted (as a STOPPED trial). */
    if (epoch > (double)t->budget + 1e-9) return SEARCH_STOP;
    return SEARCH_CONTINUE;
}

static void asha_on_done(searcher *base, int64_t trial_id, int outcome, double value)
{
    asha_searcher *s = (asha_searcher *)base;
    asha_trial *t = asha_find(s, trial_id);
    if (!t) return;
    t->active = 0;
    t->outcome = outcome;
    /* A trial that ended at its budget without a report at exactly that
     * epoch: its final value is the rung result. In time, a trial that
     * completed its epochs cannot train on: its last value stands for
     * every rung above. */
    if ((!s->stop_mode || s->time_on) && outcome == SEARCH_COMPLETED) {
        const asha_bracket *br = &s->br[t->bracket];
        int k = s->time_on ? br->nrungs - 1 : rung_of_budget(br, t->budget);
        double v = isfinite(value) ? value : t->last;
        if (k >= 0 && isfinite(v))
            while (t->nres <= k) {
                if (t->mres) {
                    t->mres[t->nres] = t->mlast;
                    search_mo_last_set(&t->mres[t->nres], 0, v);
                }
                t->res[t->nres++] = v;
            }
    }
}

/* Warm start: history for the TPE sampler only (never a rung result, so
 * never promoted), ranked by the budget it reached like a rung result. */
static void asha_observe(searcher *base, int64_t index, const json_t *hp, int64_t level, double value)
{
    asha_searcher *s = (asha_searcher *)base;
    if (s->nhist == s->chist) {
        size_t nc = s->chist ? s->chist * 2 : 32;
        search_tpe_obs *nh = realloc(s->hist, nc * sizeof *nh);
        if (!nh) return;
        s->hist = nh; s->chist = nc;
    }
    json_t *c = json_deep_copy(hp);
    if (c) s->hist[s->nhist++] = (search_tpe_obs){c, level, value, index, NAN};   /* cost unknown */
}

static json_t *asha_describe(searcher *base)
{
    asha_searcher *s = (asha_searcher *)base;
    json_t *brs = json_array();
    for (int b = 0; b < s->nbrackets; b++) {
        json_t *rungs = json_array();
        for (int k = 0; k < s->br[b].nrungs; k++) {
            int64_t nres = 0, promoted = 0, running = 0;
            for (size_t i = 0; i < s->n; i++) {
                const asha_trial *t = &s->t[i];
                if (t->bracket != b) continue;
                if (t->nres > k) nres++;
                if (s->time_on) {
                    /* Past rung k with a result beyond it, or running towards the next. */
                    promoted += t->nres > k + 1 || (t->active && t->nres == k + 1 && k + 1 < s->br[b].nrungs);
                    running += t->active && t->nres == k;
                    continue;
                }
                if (t->budget > s->br[b].budget[k]) promoted++;
                if (t->active && t->budget == s->br[b].budget[k]) running++;
            }
            json_t *rung = json_pack("{s:I, s:I, s:I, s:I}", "budget", (json_int_t)s->br[b].budget[k],
                                     "results", (json_int_t)nres, "promoted", (json_int_t)promoted,
                                     "running", (json_int_t)running);
            if (rung && s->time_on) json_object_set_new(rung, "time", json_real(s->br[b].tb[k]));
            json_array_append_new(rungs, rung);
        }
        json_array_append_new(brs, json_pack("{s:i, s:o}", "bracket", b, "rungs", rungs));
    }
    json_t *d = json_pack("{s:s, s:s, s:I, s:o, s:s}", "algorithm", "asha", "mode",
                          s->stop_mode ? "stop" : "promote", "reduction_factor", (json_int_t)s->eta,
                          "brackets", brs, "sampler", s->sampler_tpe ? "tpe" : "random");
    if (d && s->mo_on) {
        json_object_set_new(d, "objectives", json_integer(s->mo.n_obj));
        json_object_set_new(d, "constraints", json_integer(s->mo.n_con));
    }
    if (d && s->sampler_tpe) {
        /* Whether new trials come from the model yet, and from how many results. */
        int64_t n = asha_n_results(s);
        json_object_set_new(d, "model", json_boolean(n >= s->n_startup));
        json_object_set_new(d, "observations", json_integer(n));
    }
    if (d && s->time_on) {
        /* Trials that report the objective but not time_metric never reach
         * a rung (they train to max_epochs): a misnamed metric shows here. */
        int64_t untimed = 0;
        for (size_t i = 0; i < s->n; i++) untimed += isfinite(s->t[i].last) && !(s->t[i].elapsed > 0);
        json_object_set_new(d, "resource", json_string("time"));
        json_object_set_new(d, "without_time", json_integer(untimed));
    }
    if (d && s->cost_on) {
        /* Rung results with a cost: the cost model applies from 2. */
        int64_t k = 0;
        for (size_t i = 0; i < s->n; i++) k += s->t[i].nres > 0 && s->t[i].cost.n > 0;
        json_object_set_new(d, "observations_with_cost", json_integer(k));
    }
    return d;
}

const searcher_ops search_asha_ops = {
    .name = "asha",
    .validate = asha_validate,
    .create = asha_create,
    .destroy = asha_destroy,
    .next = asha_next,
    .on_created = asha_on_created,
    .on_report = asha_on_report,
    .on_done = asha_on_done,
    .describe = asha_describe,
    .observe = asha_observe,
    .configure = asha_configure,
    .on_metric = asha_on_metric,
};
