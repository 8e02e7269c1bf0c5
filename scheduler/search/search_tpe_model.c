/*
 * search_tpe_model.c — TPE's model and proposal step: the Parzen
 * estimators, the cost model (cost_metric), the choice of each group by
 * expected improvement, the tree walk of conditional spaces, and
 * search_tpe_propose, which the tpe searcher (search_tpe.c) and ASHA's
 * TPE sampler (search_asha.c) share. docs/search.md ("tpe") gives the
 * choices and the measurements behind them; search_tpe.c's header
 * describes the algorithm as a whole.
 */
#include "search_tpe_int.h"
#include "search_space.h"
#include "hf_err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TPE_MAX_GOOD 25      /* Optuna's default_gamma: min(ceil(0.1 n), 25) good */
#define TPE_RAMP_FLAT 25     /* default_weights: the newest 25 weigh 1 */
#define TPE_MAX_STEPS 1e6     /* integers modelled by their mass up to this many */
#define TPE_SPREAD_EXP 0.2     /* multivariate bandwidth x (spread / uniform's)^this (spread_factor) */
#define TPE_SPREAD_MIN 0.6     /* ... at least this fraction of Scott's rule */
#define TPE_LOCAL_BW_DIMS 2    /* multivariate with spread_bw: at most this many numeric dimensions
                                * take the neighbour rule's bandwidths (kde_build) */
#define TPE_CAND_BASE 24       /* n_candidates 0 (tpe_candidates): 3 to 5 numeric dimensions */
#define TPE_CAND_WIDE 96       /* ... at most TPE_LOCAL_BW_DIMS, and from 10 on */
#define TPE_UNIFORM_SD 0.28867513459481287   /* sqrt(1/12) */
#define TPE_BRANCH_PRIOR 3.0  /* a branch parameter's prior weight x this (tpe_branches) */

/* ---------------------------------------------------------------- Parzen */

/* One dimension of an estimator: a parameter on its unit scale. */
enum { DIM_REAL, DIM_STEP, DIM_CAT };
typedef struct tpe_dim {
    const space_param *p;
    int     kind;           /* DIM_REAL (uniform, log, log-int), DIM_STEP (linear int), DIM_CAT */
    size_t  K;              /* DIM_CAT: categories; DIM_STEP: integers in the range */
} tpe_dim;

/* A mixture of m components (observations, then the prior), each a product
 * over the nd dimensions of a Gaussian truncated to [0, 1] (numeric) or a
 * smoothed one-hot distribution (categorical). Row-major: [i * nd + d]. */
typedef struct tpe_kde {
    size_t   nd, m;
    double  *logw;          /* (m) log of the normalised component weights */
    double  *w;             /* (m) the weights themselves, for sampling */
    double  *mu, *sg;       /* (m, nd) numeric dimensions */
    double  *lz;            /* (m, nd) log of the truncated normal's mass in [0, 1] */
    double **cat;           /* [d] -> (m, K) probabilities; NULL for numeric d */
} tpe_kde;

static double norm_cdf(double z)
{
    return 0.5 * erfc(-z / M_SQRT2);
}

/* log(Phi(b) - Phi(a)), a < b, without cancellation in the upper tail. */
static double log_mass(double a, double b)
{
    double d = a > 0 ? norm_cdf(-a) - norm_cdf(-b) : norm_cdf(b) - norm_cdf(a);
    return log(d > 1e-300 ? d : 1e-300);
}

static void kde_free(tpe_kde *k)
{
    if (k->cat) for (size_t d = 0; d < k->nd; d++) free(k->cat[d]);
    free(k->cat); free(k->logw); free(k->w); free(k->mu); free(k->sg); free(k->lz);
    memset(k, 0, sizeof *k);
}

/* Optuna's default_weights: the 25 newest observations weigh 1, older ones
 * ramp linearly down to 1/n (x[] is in creation order, oldest first). */
static double age_weight(size_t i, size_t n)
{
    if (n < TPE_RAMP_FLAT || i >= n - TPE_RAMP_FLAT) return 1.0;
    size_t nr = n - TPE_RAMP_FLAT;                 /* np.linspace(1/n, 1, nr) */
    return nr == 1 ? 1.0 / (double)n : 1.0 / (double)n + (1.0 - 1.0 / (double)n) * (double)i / (double)(nr - 1);
}

typedef struct { double v; size_t i; } ranked;

static int cmp_ranked(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Univariate bandwidths of one numeric dimension (Optuna's rule): the prior
 * mean 0.5 joins the sorted centres, each gets the larger gap to its
 * neighbours with the domain ends [0, 1] as outer neighbours, except that
 * the outermost two take their inner gap (consider_endpoints = false).
 * Equal centres (several observations at one integer) are ordered by
 * component, i.e. by age (cmp_ranked): the oldest of a tie takes the gap
 * below, the newest the gap above, the middle ones the clipped minimum.
 * Optuna 3.1 sorts with numpy's unstable argsort, so its order of a tie is
 * its sort's internals; with age weights that moves g (docs/search.md,
 * "tpe against Optuna 3.1, candidate by candidate"). */
static int univariate_sigma(tpe_kde *k, size_t d)
{
    size_t m = k->m, nd = k->nd;
    ranked *r = malloc(m * sizeof *r);
    if (!r) return HF_ENOMEM;
    for (size_t i = 0; i < m; i++) r[i] = (ranked){k->mu[i * nd + d], i};
    qsort(r, m, sizeof *r, cmp_ranked);
    for (size_t j = 0; j < m; j++) {
        double lo = j > 0 ? r[j - 1].v : 0.0, hi = j + 1 < m ? r[j + 1].v : 1.0;
        double s = fmax(r[j].v - lo, hi - r[j].v);
        if (m >= 2 && j == 0) s = r[1].v - r[0].v;
        if (m >= 2 && j == m - 1) s = r[m - 1].v - r[m - 2].v;
        k->sg[r[j].i * nd + d] = s;
    }
    free(r);
    return 0;
}

/* The spread factor of numeric dimension d of the n observations x (n, nd)
 * under the component weights w: (weighted standard deviation / that of a
 * uniform on [0, 1])^TPE_SPREAD_EXP, clipped to [TPE_SPREAD_MIN, 1].
 * Scott's rule with Optuna's fixed 0.2 assumes the observations spread
 * over the whole range; when the good trials have gathered in a narrow
 * part of a dimension the kernels narrow with them (by at most
 * TPE_SPREAD_MIN), so the proposals refine that region instead of
 * re-sampling its surroundings. Only a mild exponent pays: with 48
 * candidates the suite (200 seeds, docs/search.md) gained on 9 of 11
 * functions with 0.15 but lost on the multimodal Levy-6 from about 0.3
 * on; with 24 candidates (the default since 2026-11-25) 0.2 was better
 * than 0.15 and 0.25 (mean log regret over the suite, 200 seeds). */
static double spread_factor(const double *x, const double *w, size_t n, size_t nd, size_t d)
{
    double sw = 0, mean = 0, var = 0;
    for (size_t i = 0; i < n; i++) { sw += w[i]; mean += w[i] * x[i * nd + d]; }
    mean /= sw;
    for (size_t i = 0; i < n; i++) var += w[i] * (x[i * nd + d] - mean) * (x[i * nd + d] - mean);
    double f = pow(sqrt(var / sw) / TPE_UNIFORM_SD, TPE_SPREAD_EXP);
    return fmin(fmax(f, TPE_SPREAD_MIN), 1.0);
}

/* Build the estimator of the n observations x (n, nd) in creation order.
 * multivariate: one Scott-rule bandwidth 0.2 * n^(-1/(nd+4)) for every
 * numeric dimension (BOHB's and Optuna's multivariate choice), with
 * o->spread_bw and nd > 1 times spread_factor of that dimension; otherwise
 * the univariate neighbour rule. With o->spread_bw (the tpe searcher, one
 * objective) a group of at most TPE_LOCAL_BW_DIMS numeric dimensions keeps
 * the joint components (a candidate takes all its coordinates from one
 * observation) but each component's bandwidths are the neighbour rule's,
 * narrow where observations crowd and wide where they are isolated:
 * chosen on issue 29's tuning half (docs/search.md, "Defaults by
 * evidence"): the 24 two-dimensional problems' median regret x 0.67
 * (seeds 0..19), x 0.69 (seeds 20..39), x 0.60 at 4 in flight; in 3, 5
 * and 10 dimensions the same rule was worse (x 1.1 to 2.5), where the
 * gaps along one axis shrink much faster than the distances between
 * points. Both are clipped to [1/min(100, m+1), 1]
 * ("magic clip"); the prior component is N(0.5, 1) / uniform categories.
 * Components weigh wt[i] when wt is given (MOTPE's contributions or the
 * improvement weights of tpe_ei_weights), else by age.
 * RET 0 or HF_ENOMEM. */
static int kde_build(tpe_kde *k, const tpe_dim *dims, size_t nd, const double *x, const double *wt, size_t n,
                     const search_tpe_opts *o)
{
    size_t m = n + 1;
    memset(k, 0, sizeof *k);
    k->nd = nd; k->m = m;
    k->logw = malloc(m * sizeof *k->logw);
    k->w = malloc(m * sizeof *k->w);
    k->mu = malloc(m * nd * sizeof *k->mu);
    k->sg = malloc(m * nd * sizeof *k->sg);
    k->lz = malloc(m * nd * sizeof *k->lz);
    k->cat = calloc(nd, sizeof *k->cat);
    if (!k->logw || !k->w || !k->mu || !k->sg || !k->lz || !k->cat) goto oom;
    double tot = o->prior_weight;
    for (size_t i = 0; i < n; i++) tot += (k->w[i] = wt ? wt[i] : age_weight(i, n));
    k->w[n] = o->prior_weight;
    for (size_t i = 0; i < m; i++) { k->w[i] /= tot; k->logw[i] = log(k->w[i]); }
    double scott = 0.2 * pow((double)(n ? n : 1), -1.0 / ((double)nd + 4.0));
    double minsg = 1.0 / (double)(m + 1 < 100 ? m + 1 : 100);
    size_t nnum = 0;
    for (size_t d = 0; d < nd; d++) nnum += dims[d].kind != DIM_CAT;
    int local = !o->multivariate || (o->spread_bw && nnum <= TPE_LOCAL_BW_DIMS);
    for (size_t d = 0; d < nd; d++) {
        if (dims[d].kind == DIM_CAT) {
            size_t K = dims[d].K;
            double *c = k->cat[d] = malloc(m * K * sizeof *c);
            if (!c) goto oom;
            double base = o->prior_weight / (double)m;
            for (size_t i = 0; i < m; i++) {
                for (size_t j = 0; j < K; j++) c[i * K + j] = i < n ? base : 1.0;
                if (i < n) c[i * K + (size_t)x[i * nd + d]] += 1.0;
                double s = 0;
                for (size_t j = 0; j < K; j++) s += c[i * K + j];
                for (size_t j = 0; j < K; j++) c[i * K + j] = log(c[i * K + j] / s);
            }
            continue;
        }
        for (size_t i = 0; i < n; i++) k->mu[i * nd + d] = x[i * nd + d];
        k->mu[n * nd + d] = 0.5;
        if (!local) {
            double f = o->spread_bw && nd > 1 && n >= 2 ? spread_factor(x, k->w, n, nd, d) : 1.0;
            for (size_t i = 0; i < m; i++) k->sg[i * nd + d] = scott * f;
        }
        else if (univariate_sigma(k, d)) goto oom;
        for (size_t i = 0; i < m; i++) {
            double *s = &k->sg[i * nd + d], mu = k->mu[i * nd + d];
            *s = i == n ? 1.0 : fmin(fmax(*s, minsg), 1.0);
            k->lz[i * nd + d] = log_mass(-mu / *s, (1.0 - mu) / *s);
        }
    }
    return 0;
oom:
    kde_free(k);
    return HF_ENOMEM;
}

/* s plus the log kernel of component i at c (kde_logpdf's terms, added in
 * the order kde_logpdf always added them). */
static double kde_comp_logpdf(const tpe_kde *k, const tpe_dim *dims, size_t i, const double *c, double s)
{
    for (size_t d = 0; d < k->nd; d++) {
        if (dims[d].kind == DIM_CAT) { s += k->cat[d][i * dims[d].K + (size_t)c[d]]; continue; }
        double mu = k->mu[i * k->nd + d], sg = k->sg[i * k->nd + d], z = (c[d] - mu) / sg;
        if (dims[d].kind == DIM_STEP) {
            double h = 0.5 / (double)dims[d].K;
            double lo = fmax(c[d] - h, 0.0), hi = fmin(c[d] + h, 1.0);
            s += log_mass((lo - mu) / sg, (hi - mu) / sg);
        } else {
            s += -0.5 * z * z - 0.5 * log(2 * M_PI);   /* no -log(sg): see kde_logpdf's comment */
        }
        s -= k->lz[i * k->nd + d];
    }
    return s;
}

/* log "density" of point c: the mixture of the components' kernels, a
 * probability mass for DIM_STEP and DIM_CAT; for DIM_REAL each Gaussian is
 * normalised to mass 1 on [0, 1] but NOT divided by its bandwidth, which
 * is what Optuna 3.1's _truncnorm.logpdf computes (it leaves out
 * -log(scale)). A narrow kernel then scores a near point ~1, like a wide
 * one: log l - log g compares kernel-weighted counts of good and bad
 * points rather than densities, so the many narrow kernels of g (more
 * observations, smaller bandwidth) do not outvote l. Measured on the
 * bench/search_synthetic suite, 20 seeds: Hartmann-6 median regret 0.38
 * with the normalised density, 0.23 without; Rosenbrock-5 405 -> 180,
 * Levy-6 2.4 -> 1.7, Branin 0.27 -> 0.15 (docs/search.md). */
static double kde_logpdf(const tpe_kde *k, const tpe_dim *dims, const double *c)
{
    double mx = -INFINITY, acc = 0;
    double *lp = malloc(k->m * sizeof *lp);
    if (!lp) return 0;
    for (size_t i = 0; i < k->m; i++) {
        double s = kde_comp_logpdf(k, dims, i, c, k->logw[i]);
        lp[i] = s;
        if (s > mx) mx = s;
    }
    for (size_t i = 0; i < k->m; i++) acc += exp(lp[i] - mx);
    free(lp);
    return mx + log(acc);
}


/* The unit position of the integer that u proposes (a log-scale integer,
 * or a linear one too wide for DIM_STEP): the candidate is scored where
 * it will be evaluated, as Optuna 3.1 scores its rounded sample. Without
 * this the score was that of the continuous draw, and two draws rounding
 * to the same integer could rank apart. */
static double snap_int(const space_param *p, double u)
{
    json_t *v = search_space_from_unit(p, u);
    double x = v ? search_space_to_unit(p, v) : u;
    json_decref(v);
    return x;
}

/* Draw one point c (nd) from the mixture: a component by weight, then each
 * dimension from it (truncated normal by rejection, clamped after 64
 * misses so the number of draws stays bounded; DIM_STEP rounded to the
 * centre of its integer's cell, other integers to their integer's
 * position, snap_int). */
static void kde_sample(const tpe_kde *k, const tpe_dim *dims, uint64_t *rng, double *c)
{
    double u = search_rng_uniform(rng), acc = 0;
    size_t i = k->m - 1;
    for (size_t j = 0; j < k->m; j++) {
        acc += k->w[j];
        if (u < acc) { i = j; break; }
    }
    for (size_t d = 0; d < k->nd; d++) {
        if (dims[d].kind == DIM_CAT) {
            double v = search_rng_uniform(rng), a = 0;
            size_t K = dims[d].K, pick = K - 1;
            for (size_t j = 0; j < K; j++) {
                a += exp(k->cat[d][i * K + j]);
                if (v < a) { pick = j; break; }
            }
            c[d] = (double)pick;
            continue;
        }
        double mu = k->mu[i * k->nd + d], sg = k->sg[i * k->nd + d], x = mu;
        for (int tries = 0; tries < 64; tries++) {
            double y = mu + sg * search_rng_normal(rng);
            if (y >= 0 && y <= 1) { x = y; break; }
        }
        if (dims[d].kind == DIM_STEP) {
            double K = (double)dims[d].K, b = floor(x * K);
            x = (fmin(b, K - 1) + 0.5) / K;
        } else if (dims[d].p->kind == SPACE_INT) {
            x = snap_int(dims[d].p, x);
        }
        c[d] = x;
    }
}

/* ---------------------------------------------------------------- proposal */

/* Optuna's TPESampler has gamma 0.1, 24 candidates, prior weight 1 and
 * multivariate off; the bench/search_synthetic suite (11 functions, 100
 * seeds, docs/search.md) is better on 10 of 11 with multivariate on, gamma
 * 0.2 and 48 candidates (and 5 startup trials, TPE_DEFAULT_STARTUP).
 * These are ASHA's sampler's settings; the tpe searcher itself now
 * defaults to TPE_DEFAULT_CANDIDATES (24), measured with its spread
 * factor, which ASHA's sampler does not use. */
const search_tpe_opts search_tpe_defaults = {.gamma = 0.2, .n_candidates = 48, .prior_weight = 1.0,
                                             .multivariate = 1};

/* search_tpe_int.h: min(ceil(gamma N), 25), at least 1. */
size_t search_tpe_n_good(const search_tpe_opts *o, size_t N)
{
    size_t ng = (size_t)ceil(o->gamma * (double)N);
    if (ng > TPE_MAX_GOOD) ng = TPE_MAX_GOOD;
    if (ng < 1) ng = 1;
    return ng > N ? N : ng;
}

static int cmp_obs_value_desc(const void *a, const void *b)
{
    const search_tpe_obs *x = a, *y = b;
    if (x->level != y->level) return x->level > y->level ? -1 : 1;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;   /* ties: older first */
}

static int cmp_obs_index(const void *a, const void *b)
{
    const search_tpe_obs *x = a, *y = b;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Rows (n, nd) of the trials in hps[0..n) in which every parameter of the
 * group is present; RET the number of rows written to x. */
static size_t group_rows(const tpe_dim *dims, size_t nd, const json_t *const *hps, size_t n, double *x,
                         const double *win, double *wout)
{
    size_t r = 0;
    for (size_t j = 0; j < n; j++) {
        size_t d;
        for (d = 0; d < nd; d++) {
            const json_t *v = json_object_get(hps[j], dims[d].p->name);
            if (!v) break;
            double u = search_space_to_unit(dims[d].p, v);
            if (dims[d].kind == DIM_CAT) u = fmin(floor(u * (double)dims[d].K), (double)dims[d].K - 1);
            x[r * nd + d] = u;
        }
        if (d == nd) {
            if (win) wout[r] = win[j];
            r++;
        }
    }
    return r;
}

/* ---------------------------------------------------------------- cost */

/* The cost model of one group ("cost_metric"; docs/search.md "Cost-aware
 * proposals"): a Nadaraya-Watson regression of log cost over the
 * observations of the group that have a cost,
 *   log c^(x) = sum_i K_i(x) lc_i / sum_i K_i(x),
 * with K_i the kernel of observation i's component in an estimator built
 * over those observations by kde_build (the same kernels and bandwidth
 * rules as l and g; the prior component is left out: it has no cost).
 * lc_i is log cost minus its mean, so only ratios of costs matter. n < 2:
 * no model (one cost says nothing about which region is cheaper). */
typedef struct tpe_costm {
    tpe_kde  k;
    size_t   n;             /* observations with a cost in the group; 0: no model */
    double  *lc;            /* (n) centred log cost */
    double  *lk;            /* (n) scratch: log kernels at x */
} tpe_costm;

static void costm_free(tpe_costm *cm)
{
    kde_free(&cm->k);
    free(cm->lc); free(cm->lk);
    memset(cm, 0, sizeof *cm);
}

/* Build cm from hps[0..n) with cost[0..n) (unknown: NAN or <= 0). RET 0
 * (cm->n may be 0) or HF_ENOMEM. */
static int costm_build(tpe_costm *cm, const tpe_dim *dims, size_t nd, const json_t *const *hps, const double *cost,
                       size_t n, const search_tpe_opts *o)
{
    memset(cm, 0, sizeof *cm);
    const json_t **ch = malloc((n ? n : 1) * sizeof *ch);
    double *lin = malloc((n ? n : 1) * sizeof *lin), *x = malloc((n ? n : 1) * nd * sizeof *x);
    int rc = HF_ENOMEM;
    cm->lc = malloc((n ? n : 1) * sizeof *cm->lc);
    cm->lk = malloc((n ? n : 1) * sizeof *cm->lk);
    if (!ch || !lin || !x || !cm->lc || !cm->lk) goto end;
    size_t k = 0;
    for (size_t j = 0; j < n; j++)
        if (isfinite(cost[j]) && cost[j] > 0) { ch[k] = hps[j]; lin[k++] = log(cost[j]); }
    size_t r = group_rows(dims, nd, ch, k, x, lin, cm->lc);
    rc = 0;
    if (r < 2) goto end;
    double mean = 0;
    for (size_t i = 0; i < r; i++) mean += cm->lc[i];
    mean /= (double)r;
    for (size_t i = 0; i < r; i++) cm->lc[i] -= mean;
    if ((rc = kde_build(&cm->k, dims, nd, x, NULL, r, o))) goto end;
    cm->n = r;
end:
    free(ch); free(lin); free(x);
    if (rc) costm_free(cm);
    return rc;
}

/* log c^(c), the predicted (centred) log cost at the point c. */
static double costm_log(const tpe_costm *cm, const tpe_dim *dims, const double *c)
{
    double mx = -INFINITY, num = 0, den = 0;
    for (size_t i = 0; i < cm->n; i++) {
        cm->lk[i] = kde_comp_logpdf(&cm->k, dims, i, c, 0.0);
        if (cm->lk[i] > mx) mx = cm->lk[i];
    }
    for (size_t i = 0; i < cm->n; i++) {
        double w = exp(cm->lk[i] - mx);
        num += w * cm->lc[i];
        den += w;
    }
    return den > 0 ? num / den : 0.0;
}

/* log EI under TPE up to a constant (Bergstra et al. 2011, eq. 6):
 * EI(x) is proportional to 1 / (gam + (1 - gam) g(x) / l(x)), so with
 * r = log l(x) - log g(x) this is -log(gam + (1 - gam) exp(-r)), computed
 * as a log-sum-exp. Monotone in r, so without a cost it would choose what
 * r alone chooses; with one, it flattens where l already dominates g,
 * which is what lets a cheaper candidate win among the good ones. */
static double tpe_log_ei(double gam, double r)
{
    double a = log(gam), b = log1p(-gam) - r;
    if (b == -INFINITY) return -a;
    double m = fmax(a, b);
    return -(m + log1p(exp(fmin(a, b) - m)));
}

/* ---------------------------------------------------------------- choice */

/* How many candidates a joint group of nnum numeric dimensions draws:
 * o->n_candidates when set; else (the tpe searcher's default, one
 * objective) by nnum, chosen on issue 29's tuning half (docs/search.md,
 * "Candidates by dimension"): 96 for at most TPE_LOCAL_BW_DIMS numeric
 * dimensions, whose neighbour-rule kernels are narrow (median regret of
 * the 24 two-dimensional problems x 0.64 and x 0.89 against 24
 * candidates, seeds 0..39 and 40..79; x 0.89 at 4 in flight), 24 for 3 to
 * 5 (there 48 and 96 were worse: 5 dimensions x 1.02 to 1.11), and from
 * 5 on growing to 96 at 10 (10 dimensions x 0.885 and x 0.887, 4 in
 * flight x 0.89; Scott's kernels are wide there and a better draw among
 * more of them pays), the dimensions between on the geometric line
 * (not measured). Without multivariate (one dimension at a time) 24. */
static int64_t tpe_candidates(const search_tpe_opts *o, size_t nnum)
{
    if (o->n_candidates > 0) return o->n_candidates;
    if (!o->multivariate || !o->spread_bw) return TPE_CAND_BASE;
    if (nnum <= TPE_LOCAL_BW_DIMS) return TPE_CAND_WIDE;
    if (nnum <= 5) return TPE_CAND_BASE;
    double c = TPE_CAND_BASE * pow((double)TPE_CAND_WIDE / TPE_CAND_BASE, ((double)nnum - 5.0) / 5.0);
    return c >= TPE_CAND_WIDE ? TPE_CAND_WIDE : (int64_t)lround(c);
}

/* Choose values for the parameters dims[0..nd) jointly: tpe_candidates draws
 * from l (good), keep the one maximising log l - log g, set them in hp.
 * hps[0..ng) are the good trials, hps[ng..ng+nb) the bad, each in creation
 * order. cost[0..ng+nb) (NULL: none) are their costs: when at least 2 of
 * the group's observations have one, the score is log EI - log c^ instead
 * (EI per unit of cost; Snoek, Larochelle and Adams 2012), with gam =
 * ng / (ng + nb), the good fraction l and g were fitted with (running
 * trials count among the bad). RET 0 or HF_ENOMEM. */
static int tpe_choose(const search_tpe_opts *o, const tpe_dim *dims, size_t nd, const json_t *const *hps,
                      const double *wg, const double *ei, const double *cost, size_t ng, size_t nb, uint64_t *rng,
                      json_t *hp)
{
    tpe_kde l = {0}, g = {0};
    tpe_costm cm = {0};
    size_t nmax = (ng > nb ? ng : nb) + 1, nnum = 0;
    for (size_t d = 0; d < nd; d++) nnum += dims[d].kind != DIM_CAT;
    if (!wg && nnum > TPE_LOCAL_BW_DIMS) wg = ei;   /* NULL unless o->ei_weights: tpe_sets_build */
    double *x = malloc(nmax * nd * sizeof *x), *c = malloc(2 * nd * sizeof *c), *w = malloc(nmax * sizeof *w);
    int rc = HF_ENOMEM;
    if (!x || !c || !w) goto end;
    size_t nl = group_rows(dims, nd, hps, ng, x, wg, w);
    if ((rc = kde_build(&l, dims, nd, x, wg ? w : NULL, nl, o))) goto end;
    if ((rc = kde_build(&g, dims, nd, x, NULL, group_rows(dims, nd, hps + ng, nb, x, NULL, NULL), o))) goto end;
    /* Fully cooled: no cost model, so the choice is exactly the cost-free
     * one (log EI saturates where l dominates, which would break ties). */
    if (cost && o->cost_cooled < 1.0 && (rc = costm_build(&cm, dims, nd, hps, cost, ng + nb, o))) goto end;
    double gam = (double)ng / (double)(ng + nb);
    double best = -INFINITY, *bc = c + nd;
    int64_t ncand = tpe_candidates(o, nnum);
    for (int64_t k = 0; k < ncand; k++) {
        kde_sample(&l, dims, rng, c);
        double score = kde_logpdf(&l, dims, c) - kde_logpdf(&g, dims, c);
        if (cm.n) score = tpe_log_ei(gam, score) - (1.0 - o->cost_cooled) * costm_log(&cm, dims, c);
        if (score > best || k == 0) { best = score; memcpy(bc, c, nd * sizeof *c); }
    }
    for (size_t d = 0; d < nd; d++) {
        double u = dims[d].kind == DIM_CAT ? (bc[d] + 0.5) / (double)dims[d].K : bc[d];
        json_t *v = search_space_from_unit(dims[d].p, u);
        if (!v || json_object_set_new(hp, dims[d].p->name, v)) { rc = HF_ENOMEM; goto end; }
    }
    rc = 0;
end:
    kde_free(&l); kde_free(&g);
    costm_free(&cm);
    free(x); free(c); free(w);
    return rc;
}

static tpe_dim dim_of(const space_param *p)
{
    tpe_dim d = {p, DIM_REAL, 0};
    if (p->kind == SPACE_CATEGORICAL) { d.kind = DIM_CAT; d.K = json_array_size(p->values); }
    /* A linear integer is a step of 1/K on the unit scale; past TPE_MAX_STEPS
     * integers a step's mass is below what doubles resolve, so it is
     * modelled as continuous (the rounding stays in from_unit). */
    else if (p->kind == SPACE_INT && !p->int_log && p->max - p->min < TPE_MAX_STEPS) {
        d.kind = DIM_STEP;
        d.K = (size_t)(p->max - p->min) + 1;
    }
    return d;
}


static int cmp_wobs_value_desc(const void *a, const void *b)
{
    return cmp_obs_value_desc(&((const tpe_wobs *)a)->o, &((const tpe_wobs *)b)->o);
}

static int cmp_wobs_index(const void *a, const void *b)
{
    return cmp_obs_index(&((const tpe_wobs *)a)->o, &((const tpe_wobs *)b)->o);
}

/* Is parameter pi the parent of a condition? */
static int is_branch_param(const search_space *sp, size_t pi)
{
    for (size_t q = 0; q < sp->n; q++)
        if (sp->p[q].cond_parent == (int)pi) return 1;
    return 0;
}

/* Does trial hparams h agree with every value chosen so far in hp? */
static int agrees(const json_t *hp, const json_t *h)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)hp, k, v) {
        const json_t *w = json_object_get(h, k);
        if (!w || !json_equal(v, w)) return 0;
    }
    return 1;
}

/* The good and bad sets of one choice, as tpe_choose takes them: hps[0..ng)
 * good, hps[ng..ng+nb) bad (liars last), the good ones' weights (NULL: by
 * age), their improvement weights (NULL: none; tpe_ei_weights) and
 * everyone's cost (NULL: none). */
typedef struct tpe_sets {
    const json_t **hps;
    double        *wg, *ei, *cost;
    size_t         ng, nb;
} tpe_sets;

static void tpe_sets_free(tpe_sets *t)
{
    free(t->hps); free(t->wg); free(t->ei); free(t->cost);
    memset(t, 0, sizeof *t);
}

/* Improvement weights (Watanabe 2023, "Tree-Structured Parzen Estimator:
 * Understanding Its Algorithm Components", its EI weighting): good
 * observation j's component in l weighs by how far its value is beyond the
 * split, v_j - v_split (v_split the best bad value), scaled to a mean of 1
 * so the prior keeps its share; l then concentrates on the best of the
 * good instead of spreading evenly over them. Age weights are all 1 in the
 * good set anyway (at most 25). obs[0..M) sorted best first, t->ng set;
 * fills t->ei in the order the good set is sorted to next (by index).
 * None (t->ei NULL) when every observation is good, when any weight is
 * given (MOTPE), when the values do not all share one level (ASHA's rungs:
 * values of different rungs do not compare), or when the good values do
 * not differ from the split. Used where tpe_choose draws 3 or more numeric
 * dimensions jointly; chosen on issue 29's tuning half (docs/search.md,
 * "Improvement weights"). RET 0 or HF_ENOMEM. */
static int tpe_ei_weights(tpe_sets *t, tpe_wobs *obs, size_t M)
{
    size_t ng = t->ng;
    if (ng < 2 || ng >= M || obs[0].o.level != obs[ng].o.level) return 0;
    double split = obs[ng].o.value, sum = 0;
    for (size_t j = 0; j < ng; j++) {
        if (obs[j].w > 0 || !isfinite(obs[j].o.value)) return 0;
        sum += obs[j].o.value - split;
    }
    if (!(sum > 0) || !isfinite(sum)) return 0;
    /* in the order tpe_sets_build sorts the good set to: by index */
    tpe_wobs *tmp = malloc(ng * sizeof *tmp);
    if (!tmp || !(t->ei = malloc(ng * sizeof *t->ei))) { free(tmp); return HF_ENOMEM; }
    memcpy(tmp, obs, ng * sizeof *tmp);
    qsort(tmp, ng, sizeof *tmp, cmp_wobs_index);
    for (size_t j = 0; j < ng; j++) t->ei[j] = (double)ng * (tmp[j].o.value - split) / sum + 1e-12;
    free(tmp);
    return 0;
}

/* Split obs[0..M) into good and bad, sorting it in place: by (level,
 * value, index), a total order, so the split is the same whatever order
 * the observations arrived in; then each side in creation order (the age
 * weights). The liars that agree with `agree` (all of them when NULL) join
 * the bad, newest. use_cost: fill t->cost (the liars' unknown). RET 0 or
 * HF_ENOMEM (t empty). */
static int tpe_sets_build(tpe_sets *t, const search_tpe_opts *o, tpe_wobs *obs, size_t M,
                          const json_t *const *liars, size_t nl, const json_t *agree, int use_cost)
{
    memset(t, 0, sizeof *t);
    t->hps = malloc((M + nl + 1) * sizeof *t->hps);
    if (use_cost) t->cost = malloc((M + nl + 1) * sizeof *t->cost);
    if (!t->hps || (use_cost && !t->cost)) goto oom;
    qsort(obs, M, sizeof *obs, cmp_wobs_value_desc);
    size_t ng = t->ng = search_tpe_n_good(o, M);
    if (o->ei_weights && tpe_ei_weights(t, obs, M)) goto oom;
    qsort(obs, ng, sizeof *obs, cmp_wobs_index);
    qsort(obs + ng, M - ng, sizeof *obs, cmp_wobs_index);
    for (size_t j = 0; j < M; j++) t->hps[j] = obs[j].o.hparams;
    t->nb = M - ng;
    for (size_t j = 0; j < nl; j++)
        if (!agree || agrees(agree, liars[j])) t->hps[ng + t->nb++] = liars[j];
    for (size_t j = 0; j < ng && !t->wg; j++)
        if (obs[j].w > 0 && !(t->wg = malloc(ng * sizeof *t->wg))) goto oom;
    for (size_t j = 0; t->wg && j < ng; j++) t->wg[j] = obs[j].w > 0 ? obs[j].w : 1e-12;
    for (size_t j = 0; t->cost && j < ng + t->nb; j++) t->cost[j] = j < M ? obs[j].o.cost : NAN;
    return 0;
oom:
    tpe_sets_free(t);
    return HF_ENOMEM;
}

/* Choose the parameters dims[0..nd) (jointly when nd > 1) from the
 * observations and liars that agree with the values already in hp, ranked
 * and split among themselves. o2 may differ from o (the branch prior).
 * use_cost: pass the observations' costs to tpe_choose. RET 0 or
 * HF_ENOMEM. */
static int tpe_choose_within(const search_tpe_opts *o2, const tpe_dim *dims, size_t nd, const tpe_wobs *obs,
                             size_t N, const json_t *const *liars, size_t nl, int use_cost, uint64_t *rng,
                             json_t *hp)
{
    tpe_wobs *sub = malloc((N ? N : 1) * sizeof *sub);
    tpe_sets t;
    size_t M = 0;
    if (!sub) return HF_ENOMEM;
    for (size_t j = 0; j < N; j++)
        if (agrees(hp, obs[j].o.hparams)) sub[M++] = obs[j];
    int rc = tpe_sets_build(&t, o2, sub, M, liars, nl, hp, use_cost);
    if (!rc) rc = tpe_choose(o2, dims, nd, t.hps, t.wg, t.ei, t.cost, t.ng, t.nb, rng, hp);
    tpe_sets_free(&t);
    free(sub);
    return rc;
}

/* The multivariate proposal, for the parameters it models jointly.
 *
 * No conditions in the space: one joint group of all parameters, the good
 * and bad sets split over all observations (the rows that reach here are
 * exactly what the former single joint group used, so nothing changes).
 *
 * With conditions, a tree: first the parameters that are the parent of a
 * condition ("branch" parameters: an optimizer choice), each alone, from
 * the observations that agree with the branch chosen so far, with
 * TPE_BRANCH_PRIOR times the prior weight; repeated while choosing them
 * enables further branch parameters. Then all other parameters active in
 * that branch jointly, from the observations of that branch only, ranked
 * and split among themselves (gamma applies to the branch's trials). A
 * joint group over the unconditional parameters alone mixes branches: on
 * the conditional test space the joint kernels of one optimizer were
 * scored against the trials of the other, and the best learning rate of
 * each differs by a factor of 30. The heavier branch prior keeps the
 * branch choice from locking onto the branch that led early (the branch
 * decides what everything after it is fitted to). Measured, conditional
 * space, 400 seeds, median regret, sequential / 4 in flight: 0.0072 /
 * 0.0066 before, 0.0031 / 0.0034 now, Optuna's univariate TPE 0.0045 /
 * 0.0048; runs stuck in the worse branch 18 -> 41 of 400 (Optuna's 58);
 * held-out seeds 400-799 the same (docs/search.md). */
static int tpe_branches(const search_space *sp, const search_tpe_opts *o, const tpe_wobs *obs, size_t N,
                        const json_t *const *liars, size_t nl, int use_cost, uint64_t *rng, json_t *hp)
{
    search_tpe_opts ob = *o;
    ob.prior_weight *= TPE_BRANCH_PRIOR;
    for (int more = 1; more;) {
        more = 0;
        for (size_t pi = 0; pi < sp->n; pi++) {
            const space_param *p = &sp->p[pi];
            if (p->kind == SPACE_CONST || json_object_get(hp, p->name) || !is_branch_param(sp, pi) ||
                !search_space_active(sp, pi, hp))
                continue;
            tpe_dim d = dim_of(p);
            if (tpe_choose_within(&ob, &d, 1, obs, N, liars, nl, use_cost, rng, hp)) return HF_ENOMEM;
            more = 1;
        }
    }
    tpe_dim *dims = malloc((sp->n + 1) * sizeof *dims);
    size_t nd = 0;
    if (!dims) return HF_ENOMEM;
    for (size_t pi = 0; pi < sp->n; pi++)
        if (sp->p[pi].kind != SPACE_CONST && !json_object_get(hp, sp->p[pi].name) && search_space_active(sp, pi, hp))
            dims[nd++] = dim_of(&sp->p[pi]);
    int rc = nd ? tpe_choose_within(o, dims, nd, obs, N, liars, nl, use_cost, rng, hp) : 0;
    free(dims);
    return rc;
}

/* search_tpe_int.h */
json_t *search_tpe_propose_w(const search_space *sp, const search_tpe_opts *o, tpe_wobs *obs, size_t N,
                            const json_t *const *liars, size_t nl, uint64_t *rng)
{
    /* Costs only when 2 are known: otherwise every choice is exactly the
     * cost-free one. */
    size_t nc = 0;
    for (size_t j = 0; j < N; j++) nc += isfinite(obs[j].o.cost) && obs[j].o.cost > 0;
    tpe_sets t;
    json_t *hp = json_object();
    if (!hp || tpe_sets_build(&t, o, obs, N, liars, nl, NULL, nc >= 2)) { json_decref(hp); return NULL; }

    /* Multivariate: in a space without conditions, all parameters form one
     * joint group (Optuna's multivariate TPE on the intersection search
     * space). With conditions, tpe_branches chooses the branch first and
     * models the branch's parameters jointly. The rest (univariate) one at
     * a time once their parent is chosen, split over all observations. */
    if (o->multivariate && tpe_branches(sp, o, obs, N, liars, nl, t.cost != NULL, rng, hp)) goto fail;
    for (size_t pi = 0; pi < sp->n; pi++) {
        const space_param *p = &sp->p[pi];
        if (json_object_get(hp, p->name) || !search_space_active(sp, pi, hp)) continue;
        if (p->kind == SPACE_CONST) {
            json_t *v = json_deep_copy(p->values);
            if (!v || json_object_set_new(hp, p->name, v)) goto fail;
            continue;
        }
        tpe_dim d = dim_of(p);
        if (tpe_choose(o, &d, 1, t.hps, t.wg, t.ei, t.cost, t.ng, t.nb, rng, hp)) goto fail;
    }
    tpe_sets_free(&t);
    return hp;
fail:
    tpe_sets_free(&t);
    json_decref(hp);
    return NULL;
}

json_t *search_tpe_propose(const search_space *sp, const search_tpe_opts *o, search_tpe_obs *obs, size_t N,
                           const json_t *const *liars, size_t nl, uint64_t *rng)
{
    tpe_wobs *w = malloc((N ? N : 1) * sizeof *w);
    if (!w) return NULL;
    for (size_t i = 0; i < N; i++) w[i] = (tpe_wobs){obs[i], 0};
    json_t *hp = search_tpe_propose_w(sp, o, w, N, liars, nl, rng);
    for (size_t i = 0; i < N; i++) obs[i] = w[i].o;   /* sorted, as documented */
    free(w);
    return hp;
}
