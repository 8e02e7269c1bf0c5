/*
 * search_mo.h — multi-objective and constrained search: what a searcher
 * is told about an experiment's objectives and constraints, and the
 * orderings it needs (non-dominated sorting, crowding distance,
 * hypervolume, constraint violation). docs/search.md ("Multi-objective
 * search and constraints") gives the choices.
 *
 * Conventions: objective vectors are sign-normalised so that HIGHER IS
 * BETTER in every component (as search.h's values), except in
 * search_mo_hypervolume, which takes the usual minimisation form.
 * Constraint values are the raw reported values; the violation of a
 * trial is the sum over constraints of how far its value lies outside
 * [min, max] (0 = feasible; +inf when a constraint metric was never
 * reported). Points are rows of a row-major n x m array.
 */
#ifndef HF_SEARCH_MO_H
#define HF_SEARCH_MO_H

#include "search.h"

#include <stddef.h>
#include <stdint.h>

#define SEARCH_MO_MAX_OBJ 8    /* objectives in one experiment */
#define SEARCH_MO_MAX_CON 16   /* constraints in one experiment */
#define SEARCH_MO_MAX_SLOT (SEARCH_MO_MAX_OBJ + SEARCH_MO_MAX_CON)

/* What a searcher is told at creation (searcher_ops.configure). Slot k of
 * on_metric: k < n_obj is objective k (value sign-normalised, higher is
 * better; slot 0 also arrives through on_report), n_obj <= k < n_obj +
 * n_con is constraint k - n_obj (raw value). */
typedef struct search_objectives {
    int    n_obj;                          /* 1..SEARCH_MO_MAX_OBJ */
    int    n_con;                          /* 0..SEARCH_MO_MAX_CON */
    double con_min[SEARCH_MO_MAX_CON];     /* -INFINITY when absent */
    double con_max[SEARCH_MO_MAX_CON];     /* +INFINITY when absent */
} search_objectives;

/* The last reported value of every slot of one trial. */
typedef struct search_mo_last {
    double   v[SEARCH_MO_MAX_SLOT];
    uint32_t seen;                         /* bit k: slot k reported */
} search_mo_last;

/* Record a report of slot k (ignored when k is out of range or v is not finite). */
void   search_mo_last_set(search_mo_last *l, int k, double v);
/* 1 when every objective slot has a value. */
int    search_mo_last_complete(const search_mo_last *l, const search_objectives *o);
/* Constraint violation of l's constraint slots (see above). */
double search_mo_violation(const search_objectives *o, const search_mo_last *l);

/* Does a dominate b (higher is better, m components)? */
int    search_mo_dominates(const double *a, const double *b, int m);

/* Fast non-dominated sort (Deb et al. 2002). IN y: n x m, higher is
 * better. OUT rank[n]: 0 for the first front, 1 for the next, ...
 * RET 0 or HF_ENOMEM. */
int    search_mo_nds(const double *y, size_t n, int m, int *rank);

/* Crowding distance of the k points idx[0..k) of one front (NSGA-II):
 * boundary points +inf, others the sum over objectives of the normalised
 * gap between their neighbours. OUT cd[0..k) in idx order. RET 0 or HF_ENOMEM. */
int    search_mo_crowding(const double *y, const size_t *idx, size_t k, int m, double *cd);

/* Hypervolume dominated by the n points (MINIMISATION form) inside the
 * box bounded by ref; points not strictly better than ref in every
 * component add nothing. Exact (sweep for m = 2, slicing above). RET the
 * volume, NAN on OOM. */
double search_mo_hypervolume(const double *pts, size_t n, int m, const double *ref);

/* A total order of n points for ranking (ASHA's rungs): feasible points
 * (viol[i] == 0, or viol NULL) first, by non-dominated rank, then larger
 * crowding distance, then smaller tie[i]; infeasible ones after, by
 * smaller violation, then smaller tie[i]. OUT order[0..n): point indices,
 * best first. RET 0 or HF_ENOMEM. */
int    search_mo_order(const double *y, size_t n, int m, const double *viol, const int64_t *tie, size_t *order);

/* MOTPE's ranking of n observations for TPE's good/bad split (Optuna's
 * TPESampler with several objectives and a constraints_func): feasible
 * observations by non-dominated rank, the front that straddles the first
 * n_good filled by greedy hypervolume subset selection; infeasible ones
 * after, by violation. OUT level[n], value[n]: the (level, value) pairs
 * search_tpe_propose sorts by (higher first); weight[n]: for the n_good
 * first in that order, each one's hypervolume contribution among the
 * feasible good ones over the largest (1e-12 for an infeasible one), 0
 * for the rest. RET 0 or HF_ENOMEM. */
int    search_mo_tpe_rank(const double *y, size_t n, int m, const double *viol, size_t n_good,
                          int64_t *level, double *value, double *weight);

/* The level of infeasible observations in search_tpe_propose's order:
 * below every feasible one (feasible levels are >= -2^31). */
#define SEARCH_MO_INFEASIBLE_LEVEL (-((int64_t)1 << 40))

/* Parse an experiment's "objective" (an object, or a list of 1..8
 * objects, each {"metric", "goal"}) and "constraints" (a list of 0..16
 * {"metric", "min"?, "max"?}, at least one bound, min <= max).
 * OUT metrics[n_obj] / cmetrics[n_con] borrowed from the JSON, goal_max[k],
 * o. RET 0, or HF_EINVAL with e naming the field ("objective[1].goal",
 * "constraints[0].max"). */
int    search_mo_parse(const json_t *objective, const json_t *constraints, const char **metrics, int *goal_max,
                       const char **cmetrics, search_objectives *o, hf_jerr *e);

#endif
