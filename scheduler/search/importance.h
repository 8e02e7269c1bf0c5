/*
 * importance.h — hyperparameter importance of an experiment by fANOVA
 * over a random forest (docs/search.md, "Hyperparameter importance"), as
 * Optuna's FanovaImportanceEvaluator computes it: a forest of regression
 * trees fit on (hyperparameters -> objective) of the finished trials, then
 * for each parameter the variance of the forest's marginal prediction
 * along that parameter as a fraction of each tree's total variance,
 * averaged over the trees and normalized to sum 1.
 *
 * Two layers: imp_fanova() on a dense matrix (pure, unit-tested against
 * known functions and against Optuna), and importance_compute() on an
 * experiment's config and trial views (the encoding: numbers as they are,
 * categoricals one-hot, constants and single-valued parameters left out).
 * importance_cache keeps the last answer per (experiment, objective) and
 * recomputes only when the set of finished trials (or a value of one)
 * changed.
 */
#ifndef HF_IMPORTANCE_H
#define HF_IMPORTANCE_H

#include "hf_json.h"

#include <stddef.h>
#include <stdint.h>

/* Optuna's defaults (FanovaImportanceEvaluator, optuna/importance/_fanova). */
#define IMP_TREES      64
#define IMP_MAX_DEPTH  64
#define IMP_MAX_TRIALS 20000   /* the newest finished trials beyond are not used */

typedef struct imp_opts {
    int      n_trees;          /* IMP_TREES */
    int      max_depth;        /* IMP_MAX_DEPTH */
    int      min_samples_split;/* 2 */
    int      min_samples_leaf; /* 1 */
    uint64_t seed;
} imp_opts;

void imp_opts_default(imp_opts *o);

/* fANOVA of y over X.
 * IN  X (n, d) row-major, y (n), bounds (d, 2) [lo, hi] of every column,
 *     group (d): the feature (0..ngroups-1) a column belongs to (a
 *     categorical's one-hot columns share one), o (NULL = defaults).
 * OUT imp (ngroups): importance of every feature, summing to 1 (all 0 when
 *     y is constant or n < 2).
 * RET 0, HF_EINVAL (n or d is 0, a group out of range), HF_ENOMEM. */
int imp_fanova(const double *X, const double *y, size_t n, size_t d, const double *bounds, const int *group,
               size_t ngroups, const imp_opts *o, double *imp);

/* Importance of an experiment.
 * IN  hparams: the config's "hyperparameters" object; trials: an array of
 *     trial views ({"id", "state", "hparams", "objective", "latest"});
 *     metric: the objective ranked, NULL for the trial's "objective" (the
 *     first objective), else that metric's last value (the view's
 *     "latest", as a list's objectives are taken, docs/search.md
 *     "Multi-objective search and constraints"); only COMPLETED trials
 *     with that value are used, and only parameters every one of them has
 *     (Optuna's intersection search space).
 * OUT *out = {"importance": {name: value...} (largest first), "trials": n,
 *     "params": [names]}, a new reference; *sig = a signature of the
 *     trials used (ids and values), for the cache.
 * RET 0, HF_EINVAL (a bad space, e naming it), HF_ENOMEM. */
int importance_compute_of(const json_t *hparams, const json_t *trials, const char *metric, const imp_opts *o,
                          json_t **out, uint64_t *sig, hf_jerr *e);
/* importance_compute_of by the trials' "objective". */
int importance_compute(const json_t *hparams, const json_t *trials, const imp_opts *o, json_t **out,
                       uint64_t *sig, hf_jerr *e);

/* The signature importance_compute_of would report, without fitting. */
uint64_t importance_signature_of(const json_t *trials, const char *metric);
uint64_t importance_signature(const json_t *trials);

typedef struct importance_cache importance_cache;

importance_cache *importance_cache_new(void);
void importance_cache_free(importance_cache *c);
/* The experiment's importance by metric (as importance_compute_of; NULL:
 * the trials' "objective"), from the cache when its trials are those of
 * the cached answer for (exp_id, metric), else computed (outside the
 * cache's lock) and kept. *out gets "cached": true|false. Thread-safe.
 * RET as importance_compute_of. */
int importance_cache_get(importance_cache *c, int64_t exp_id, const char *metric, const json_t *hparams,
                         const json_t *trials, json_t **out, hf_jerr *e);

#endif
