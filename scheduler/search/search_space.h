/*
 * search_space.h — the "hyperparameters" object of an experiment file:
 * parsing with field-path errors, sampling, and the encodings searchers
 * need (unit-cube coordinates for TPE, perturbation for PBT, the grid).
 *
 * Parameter kinds (docs/design.md §5):
 *   {"type": "uniform", "min": a, "max": b}            (alias "double", "float")
 *   {"type": "log", "min": a, "max": b}                 a > 0 (alias "loguniform")
 *   {"type": "int", "min": a, "max": b, "log": false}   integers, inclusive
 *   {"type": "categorical", "values": [...]}            strings, numbers or bools
 *   {"type": "const", "value": v}   or a bare JSON value: a constant
 *   any kind may add "condition": {"param": "optimizer", "values": ["sgd"]}:
 *   the parameter exists only when that (categorical/const) parameter takes
 *   one of those values. Conditions may not form cycles.
 *   grid: "count": n on uniform/log/int gives n evenly spaced points.
 */
#ifndef HF_SEARCH_SPACE_H
#define HF_SEARCH_SPACE_H

#include "hf_json.h"

#include <stddef.h>
#include <stdint.h>

enum space_kind { SPACE_UNIFORM, SPACE_LOG, SPACE_INT, SPACE_CATEGORICAL, SPACE_CONST };

typedef struct space_param {
    char    *name;
    int      kind;
    double   min, max;         /* UNIFORM/LOG/INT */
    int      int_log;          /* INT sampled on a log scale */
    int      grid_count;       /* points per axis for grid; 0 = default */
    json_t  *values;           /* CATEGORICAL: array (owned); CONST: the value (owned) */
    int      cond_parent;      /* index of the parent parameter, -1 = unconditional */
    json_t  *cond_values;      /* values of the parent that enable this one (owned) */
} space_param;

typedef struct search_space {
    size_t       n;
    space_param *p;            /* topologically ordered: parents before children */
} search_space;

/* Parse and validate obj (path "hyperparameters"). RET 0 with *out, or
 * HF_EINVAL with e naming the field. */
int  search_space_parse(const json_t *obj, search_space **out, hf_jerr *e);
void search_space_free(search_space *sp);

/* Is parameter i active given the values chosen so far in hp? */
int  search_space_active(const search_space *sp, size_t i, const json_t *hp);

/* A uniformly random point (each active parameter from its prior). rng is a
 * splitmix64/xoshiro state advanced by the call. New reference. */
json_t *search_space_sample(const search_space *sp, uint64_t *rng);
/* Sample one parameter's value from its prior. New reference. */
json_t *search_space_sample_param(const space_param *p, uint64_t *rng);

/* Map a value of parameter p to [0,1] (log scale for LOG, category index
 * for CATEGORICAL -> (k+0.5)/K) and back. */
double  search_space_to_unit(const space_param *p, const json_t *v);
json_t *search_space_from_unit(const space_param *p, double u);

/* Number of points in the full grid (0 if > limit). And the k-th point. */
uint64_t search_space_grid_size(const search_space *sp, uint64_t limit);
json_t  *search_space_grid_point(const search_space *sp, uint64_t k);

/* RNG helpers shared by all searchers: splitmix64 seeding, uniform double
 * in [0,1), and a seed derived from (seed, n) for the n-th trial. */
uint64_t search_rng_next(uint64_t *state);
double   search_rng_uniform(uint64_t *state);
double   search_rng_normal(uint64_t *state);
uint64_t search_rng_derive(uint64_t seed, uint64_t n);

/* ---- Additions (see docs/search.md) ---- */

/* Index of the parameter called name, or -1. */
int search_space_find(const search_space *sp, const char *name);

/* PBT's explore step: a copy of hp where each active numeric parameter is
 * multiplied by 0.8 or 1.2 (on its unit scale for log/int it moves by the
 * same factor, clamped to the range) and, with probability resample_p,
 * any parameter (categorical included) is resampled from its prior.
 * Parameters that become active through a change are sampled; ones that
 * become inactive are removed. New reference. */
json_t *search_space_perturb(const search_space *sp, const json_t *hp, double resample_p,
                             uint64_t *rng);

#endif
