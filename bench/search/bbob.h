/*
 * bbob.h — the 24 noiseless BBOB functions (Hansen, Finck, Ros and Auger
 * 2009, "Real-Parameter Black-Box Optimization Benchmarking: Noiseless
 * Functions Definitions"), written from that document, and the problems
 * of the held-out search benchmark built on them (docs/search.md,
 * "Held-out benchmark: BBOB"). One implementation serves both sides: our
 * C bench (bench/search_bbob.c links it) and the Optuna side
 * (bench/search/bbob_lib.py loads it as a shared object through ctypes),
 * so both evaluate the identical function.
 *
 * Instances: the shifts x_opt, the optimal values f_opt, the rotations R
 * and Q and the other random parts are drawn from a seed derived from
 * (function id, dimension, instance) with our own generator (splitmix64,
 * Box-Muller, Gram-Schmidt); they follow the document's distributions but
 * are NOT bit-identical to COCO's instances (COCO is not installable
 * here). Everything is deterministic: the same (id, dimension, instance)
 * gives the same function on every machine with IEEE doubles.
 *
 * Search domain [-5, 5]^D. Every function has its global minimum f_opt at
 * bbob_problem.xopt (f20, Schwefel, only up to the document's constant
 * 4.189828872724339: |f(x_opt) - f_opt| < 1e-8).
 */
#ifndef HF_BENCH_BBOB_H
#define HF_BENCH_BBOB_H

#include <stddef.h>

#define BBOB_MAX_DIM   40
#define BBOB_MAX_PEAKS 101

typedef struct bbob_problem {
    int    fid, dim, instance;
    double fopt;
    double xopt[BBOB_MAX_DIM];
    double R[BBOB_MAX_DIM * BBOB_MAX_DIM];     /* (dim, dim) row-major, orthonormal */
    double Q[BBOB_MAX_DIM * BBOB_MAX_DIM];
    double sign[BBOB_MAX_DIM];                 /* 1_+^- (f20, f24) */
    /* f21, f22 (Gallagher): peak 0 is the global one, at xopt */
    int    npeaks;
    double w[BBOB_MAX_PEAKS];
    double y[BBOB_MAX_PEAKS * BBOB_MAX_DIM];
    double cdiag[BBOB_MAX_PEAKS * BBOB_MAX_DIM];   /* Lambda^alpha_i / alpha_i^(1/4), permuted */
} bbob_problem;

/* Set p to function fid (1..24) in dimension dim (2..BBOB_MAX_DIM) for
 * instance (>= 1). RET 0, or -1 for an id or dimension out of range. */
int bbob_init(bbob_problem *p, int fid, int dim, int instance);

/* f(x), x of p->dim coordinates (any reals; the domain is [-5, 5]^D and
 * the functions with f_pen penalise leaving it). */
double bbob_eval(const bbob_problem *p, const double *x);

/* Move coordinate i of the optimum onto the nearest of the n values
 * grid[0..n) (integer or categorical coordinates of a mixed problem).
 * Only for functions whose optimum is a free shift (bbob_shift_free);
 * f(x_opt) = f_opt still holds afterwards. */
void bbob_snap(bbob_problem *p, int i, const double *grid, int n);

/* Is fid's optimum x_opt a free shift (not tied to R, a sign pattern or a
 * fixed constant)? All but 5, 9, 19, 20 and 24. */
int bbob_shift_free(int fid);

/* ------------------------------------------------------------ the suite */

enum { BBOB_PURE, BBOB_MIXED, BBOB_COND };

#define BBOB_CAT_LEVELS 5
#define BBOB_MAX_PARAMS (2 * BBOB_MAX_DIM + 1)

/* One problem of the benchmark: a search space in the project's
 * "hyperparameters" JSON, a budget and a regret function. */
typedef struct bbob_case {
    char   name[48];
    int    kind;              /* BBOB_PURE, BBOB_MIXED, BBOB_COND */
    int    fid, dim, instance;
    int    heldout;           /* 1: the held-out half; 0: the tuning half (docs/search.md) */
    int    budget;            /* trials */
    int    nparam;            /* parameters, in the order of the space and of v[] */
    int    n_int, n_cat, n_log;   /* BBOB_MIXED: x1.. integer, then categorical, then log, then float */
    int    cat_perm[BBOB_MAX_DIM][BBOB_CAT_LEVELS];   /* category k -> level index */
    bbob_problem a, b;        /* BBOB_COND: branch "a" and branch "b" */
} bbob_case;

/* Number of cases in the suite, both halves. */
int bbob_suite_count(void);

/* Case k (0 <= k < bbob_suite_count()) into *c. RET 0 or -1. */
int bbob_suite_case(int k, bbob_case *c);

/* The space of c as a JSON object in buf (n bytes). RET the length, or -1
 * when it does not fit. */
int bbob_case_space(const bbob_case *c, char *buf, size_t n);

/* The name of parameter j (0 <= j < c->nparam) into buf; RET 0 or -1. */
int bbob_case_param(const bbob_case *c, int j, char *buf, size_t n);

/* Regret (>= 0) of the point v[0..nparam): numbers for numeric
 * parameters (the integer or the log-scale value itself), the index of
 * the category for categorical ones, NAN for inactive ones. */
double bbob_case_regret(const bbob_case *c, const double *v);

/* sizeof(bbob_case), for the ctypes loader. */
size_t bbob_case_size(void);

#endif
