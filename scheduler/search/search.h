/*
 * search.h — the searcher interface: how the scheduler asks a search
 * algorithm (grid, random, TPE, ASHA/Hyperband, PBT, with optional median
 * stopping) what to run next and whether a running trial should go on.
 *
 * The dispatcher (dispatch.c) knows nothing about any algorithm; it only
 * calls these operations. A searcher is a pure in-memory object rebuilt
 * from the store after a scheduler restart: the scheduler replays every
 * trial of the experiment in creation order through on_created, its
 * objective reports through on_report and its end through on_done. So a
 * searcher must not keep state that cannot be rebuilt from that replay,
 * and its random choices for the n-th trial must depend only on (seed, n)
 * and the replayed history (seed a fresh RNG from both), never on when the
 * scheduler last restarted.
 *
 * Ownership: json_t arguments are borrowed unless stated; json_t results
 * are new references owned by the caller.
 */
#ifndef HF_SEARCH_H
#define HF_SEARCH_H

#include "hf_json.h"

#include <stddef.h>
#include <stdint.h>

struct search_space;           /* search_space.h: parsed "hyperparameters" */
struct search_objectives;      /* search_mo.h: objectives and constraints */

/* What next() tells the dispatcher. */
enum search_next_rc {
    SEARCH_WAIT = 0,           /* nothing to create now (waiting for results) */
    SEARCH_CREATE = 1,         /* create the trial described in search_new */
    SEARCH_DONE = 2            /* the search is finished: no more trials, ever */
};

typedef struct search_new {
    json_t  *hparams;          /* new reference: the trial's hyperparameters */
    int64_t  budget;           /* epochs (HYPERFARM_MAX_EPOCHS) granted; 0 = searcher's max */
    int64_t  parent_trial;     /* PBT: copy this trial's newest checkpoint first; 0 = none */
    int64_t  resume_trial;     /* ASHA promotion: continue THIS existing trial with a
                                  larger budget instead of creating a new one; 0 = new trial */
} search_new;

/* What on_report() decides for a running trial. */
enum search_decision {
    SEARCH_CONTINUE = 0,
    SEARCH_STOP = 1            /* stop now (SIGTERM + grace); the trial ends STOPPED */
};

/* Trial outcome given to on_done. */
enum search_outcome { SEARCH_COMPLETED = 0, SEARCH_FAILED = 1, SEARCH_STOPPED = 2, SEARCH_CANCELED = 3 };

typedef struct searcher searcher;

typedef struct searcher_ops {
    const char *name;          /* "grid", "random", "tpe", "asha", "pbt" */
    /* Check the algorithm's own fields of the "searcher" object (the common
     * ones — name, max_trials, max_concurrent_trials, seed, max_epochs,
     * median_stopping — are checked by the caller). Field paths start at
     * "searcher". RET 0 or HF_EINVAL with e filled. */
    int  (*validate)(const json_t *searcher_cfg, const struct search_space *sp, hf_jerr *e);
    /* Build a searcher for one experiment. The searcher keeps its own
     * references to cfg; sp outlives it. RET NULL on OOM. */
    searcher *(*create)(const json_t *searcher_cfg, const struct search_space *sp,
                        int goal_maximize, uint64_t seed);
    void (*destroy)(searcher *s);
    /* n_created trials exist so far; n_active of them are QUEUED/RUNNING.
     * The dispatcher calls next() whenever it may place another trial of
     * this experiment (below max_concurrent_trials) and n_created < max_trials. */
    int  (*next)(searcher *s, int64_t n_created, int64_t n_active, search_new *out);
    /* A trial exists (new, or replayed after restart, in creation order). */
    void (*on_created)(searcher *s, int64_t trial_id, int64_t index, const json_t *hparams,
                       int64_t budget, int64_t parent_trial);
    /* An objective report from a running trial: epoch (x position: epochs
     * done, or steps when the trial reports no epoch) and the objective
     * metric's value, already sign-normalised so that HIGHER IS BETTER.
     * RET SEARCH_CONTINUE or SEARCH_STOP. */
    int  (*on_report)(searcher *s, int64_t trial_id, double epoch, double value);
    /* The trial finished; value is its final (higher-is-better) objective
     * or NAN when it never reported one. */
    void (*on_done)(searcher *s, int64_t trial_id, int outcome, double value);
    /* Optional: a JSON view of internal state for the API/dashboard (ASHA
     * rungs, PBT generations). May be NULL. New reference. */
    json_t *(*describe)(searcher *s);
    /* Optional (warm start, docs/search.md "Warm start"; Optuna's
     * add_trials): a finished trial of an earlier experiment whose
     * hyperparameters fit this space (borrowed; copy what is kept), its
     * objective already oriented so that HIGHER IS BETTER, and level, the
     * budget (epochs) it reached (0 = unknown). index < 0 orders it before
     * every trial of this experiment. Called after create() and before any
     * on_created, at submission and again at every replay. Searchers that
     * fit no model (grid, random, pbt) leave it NULL: history is ignored. */
    void (*observe)(searcher *s, int64_t index, const json_t *hparams, int64_t level, double value);
    /* Optional, multi-objective search and constraints (search_mo.h):
     * configure is called once right after create with the experiment's
     * objectives and constraints (RET 0, or HF_ENOMEM); on_metric receives
     * every report of slot k >= 1 of search_objectives (objective k,
     * sign-normalised so that higher is better, or a constraint's raw
     * value), in arrival order among the on_report calls, live and in
     * replay. A searcher without them ranks by objective 0 alone. When the
     * searcher object names a "cost_metric" (tpe, asha with the tpe
     * sampler), every report of that metric also arrives, raw, as slot
     * SEARCH_COST_SLOT(o) = n_obj + n_con (after the constraints; with no
     * configure call, 1); asha's "time_metric" likewise as
     * SEARCH_TIME_SLOT(o), one after the cost's slot. */
    int  (*configure)(searcher *s, const struct search_objectives *o);
    void (*on_metric)(searcher *s, int64_t trial_id, int slot, double epoch, double value);
} searcher_ops;

/* The base every searcher struct begins with. */
struct searcher {
    const searcher_ops *ops;
};

/* Observe one history point through ops->observe (nothing when NULL). */
void search_observe(searcher *s, int64_t index, const json_t *hparams, int64_t level, double value);

/* Registry: every algorithm registers here (search.c). NULL if unknown. */
const searcher_ops *search_find(const char *name);
/* NULL-terminated list of names, for error messages ("one of grid, random, ..."). */
const char *const *search_names(void);

/* Median stopping rule, combinable with any searcher ("median_stopping":
 * {"min_trials": 5, "warmup_epochs": 1}): stop a trial whose best objective
 * so far at epoch e is below the median of the other trials' running
 * averages at the same epoch. Implemented in search_median.c; the
 * dispatcher consults it after the searcher's own on_report. */
typedef struct search_median search_median;
int  search_median_validate(const json_t *cfg, hf_jerr *e);   /* path "searcher.median_stopping" */
search_median *search_median_new(const json_t *cfg);
void search_median_free(search_median *m);
int  search_median_on_report(search_median *m, int64_t trial_id, double epoch, double value);
void search_median_on_done(search_median *m, int64_t trial_id, int outcome);

/* ---- Added for the implementations and the API (additions only) ---- */

/* Calling next() once max_trials exist: a promotion (resume_trial != 0)
 * creates no trial, so ASHA can answer SEARCH_CREATE with resume_trial
 * set when n_created >= max_trials. A dispatcher should keep calling
 * next() (below max_concurrent_trials) until it answers SEARCH_DONE;
 * every searcher answers SEARCH_DONE (or SEARCH_WAIT while promotions are
 * still possible) once n_created >= max_trials, so this never creates more
 * than max_trials trials. On a resume the dispatcher requeues that trial
 * (COMPLETED or STOPPED) with HYPERFARM_MAX_EPOCHS = budget and its own
 * checkpoint dir, keeps its hyperparameters (hparams is a copy of them),
 * stores the new budget (replay passes the current budget to on_created),
 * and calls on_done again when it ends. A SEARCH_CREATE answer must be
 * acted on: searchers record the decision when they make it. */

/* Default max_concurrent_trials of the adaptive searchers (tpe, asha);
 * grid and random default to max_trials, pbt to population_size, all
 * capped at max_trials (experiment.c). */
#define SEARCH_DEFAULT_CONCURRENCY 16

/* Cost-aware proposals ("cost_metric", docs/search.md "Cost-aware
 * proposals"): a trial's cost per unit of budget is the mean of its
 * reports of the cost metric; non-finite and non-positive values are
 * ignored. Summed in arrival order, which replay repeats. */
typedef struct search_cost { double sum; int64_t n; } search_cost;
void   search_cost_add(search_cost *c, double v);
double search_cost_mean(const search_cost *c);   /* NAN when none */
/* The on_metric slot of the cost metric (after objectives and constraints). */
#define SEARCH_COST_SLOT(o) ((o)->n_obj + (o)->n_con)
/* The on_metric slot of asha's "time_metric" (rungs in its summed
 * reports, docs/search.md "Rungs in seconds"): after the cost's. */
#define SEARCH_TIME_SLOT(o) ((o)->n_obj + (o)->n_con + 1)

/* Keys of the "searcher" object common to every algorithm; an algorithm's
 * validate rejects keys that are neither these nor its own. */
#define SEARCH_COMMON_KEYS "name", "max_trials", "max_concurrent_trials", "seed", \
                           "max_epochs", "median_stopping", "metric", "goal"

/* Validate a whole "searcher" object: name (one of search_names()), the
 * common fields, the algorithm's own fields (ops->validate) and
 * median_stopping. Field paths start at "searcher". A convenience for the
 * API; the dispatcher may equally check the common fields itself.
 * RET 0 or HF_EINVAL with e filled. */
int search_validate(const json_t *searcher_cfg, const struct search_space *sp, hf_jerr *e);

/* Read an optional integer/number member of cfg, dflt when absent or of
 * the wrong type (validate has already rejected wrong types). */
int64_t search_cfg_int(const json_t *cfg, const char *key, int64_t dflt);
/* "cost_cooling" (docs/search.md "Cost-aware proposals"): how much of the
 * cost term is gone when trial n_created (0-based) is proposed, as in
 * CArBO (Lee et al. 2020): 0 up to the n_startup random trials, then
 * rising linearly to 1 at max_trials. 0 when cooling is off. */
double search_cost_cooled(int cooling, int64_t n_created, int64_t n_startup, int64_t max_trials);
double  search_cfg_num(const json_t *cfg, const char *key, double dflt);
/* hf_json_only_keys over SEARCH_COMMON_KEYS plus own (NULL-terminated). */
int     search_cfg_only_keys(const json_t *cfg, const char *const *own, hf_jerr *e);

/* TPE's proposal step (search_tpe_model.c), shared by the tpe searcher and
 * ASHA's model-based sampler (asha "sampler": "tpe", as in BOHB). obs[0..n)
 * are finished observations (hyperparameters borrowed, value finite and
 * higher-is-better, index = creation order for a total order), ranked by
 * level (higher first: ASHA's highest rung budget reached; 0 for plain
 * TPE), then value, then index; they are sorted in place. liars[0..nl)
 * are hyperparameters counted among the bad ones (running trials; nl may
 * be 0). The best ceil(gamma * n) (at most 25) observations form l(x), the
 * rest g(x); with multivariate all parameters are drawn jointly (with
 * conditions: the branch parameters first, then the branch's parameters
 * jointly from that branch's observations), otherwise each active
 * parameter alone, each time the best of n_candidates samples of l by
 * log l - log g. With costs (obs[i].cost,
 * at least 2 known among the observations of a group) the choice is by
 * log EI - log c instead (docs/search.md "Cost-aware proposals"). Same
 * inputs and rng state, same result.
 * RET a new hyperparameter object, or NULL on OOM. */
typedef struct search_tpe_obs {
    const json_t *hparams;
    int64_t level;
    double  value;
    int64_t index;
    double  cost;              /* cost per unit of budget ("cost_metric"); NAN (or <= 0): unknown */
} search_tpe_obs;
typedef struct search_tpe_opts {
    double  gamma;             /* fraction of observations that are "good" (at most 25) */
    int64_t n_candidates;      /* draws from l per choice; 0: by the group's numeric dimensions
                                * (the tpe searcher's default; search_tpe_model.c tpe_candidates) */
    double  prior_weight;      /* weight of the prior component */
    int     multivariate;      /* 1: one joint kernel over the unconditional parameters */
    int     spread_bw;         /* 1: multivariate bandwidths narrow with the observations' spread
                                * (the tpe searcher with one objective; 0 in the defaults, which
                                * ASHA's sampler uses, and with several objectives) */
    int     ei_weights;        /* 1: in a joint group of 3 or more numeric dimensions the good
                                * components weigh by their improvement on the split (the tpe
                                * searcher with one objective; search_tpe_model.c tpe_sets_build) */
    double  cost_cooled;       /* "cost_cooling": how much of the cost term is gone, 0 (all of
                                * it weighs) to 1 (none: plain EI); docs/search.md */
} search_tpe_opts;
extern const search_tpe_opts search_tpe_defaults;   /* Optuna's: 0.1, 24, 1.0; multivariate on */
json_t *search_tpe_propose(const struct search_space *sp, const search_tpe_opts *o, search_tpe_obs *obs,
                           size_t n, const json_t *const *liars, size_t nl, uint64_t *rng);

#endif
