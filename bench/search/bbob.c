/*
 * bbob.c — the 24 noiseless BBOB functions and the held-out benchmark's
 * problems (bbob.h has the contract; docs/search.md, "Held-out benchmark:
 * BBOB", the split and the budgets). Plain C11 and libm only: it is built
 * into bench/search_bbob and, by bench/search/bbob_lib.py, into a shared
 * object for the Optuna side.
 *
 * Notation as in the definitions document: z the transformed variable,
 * T_osz the oscillation, T_asy^beta the asymmetry, Lambda^alpha the
 * diagonal conditioning alpha^(i/(2(D-1))) (0-based i), f_pen the
 * boundary penalty sum max(0, |x_i| - 5)^2, R and Q random rotations.
 */
#include "bbob.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---------------------------------------------------------------- random */

static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double rnd_u(uint64_t *s) { return (double)(rnd_next(s) >> 11) * 0x1.0p-53; }

static double rnd_n(uint64_t *s)
{
    double u1 = rnd_u(s), u2 = rnd_u(s);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* A random orthonormal (D, D) matrix: Gram-Schmidt on the rows of a
 * standard normal matrix. */
static void rnd_rotation(uint64_t *s, int D, double *M)
{
    for (int i = 0; i < D * D; i++) M[i] = rnd_n(s);
    for (int i = 0; i < D; i++) {
        for (int j = 0; j < i; j++) {
            double dot = 0;
            for (int k = 0; k < D; k++) dot += M[i * D + k] * M[j * D + k];
            for (int k = 0; k < D; k++) M[i * D + k] -= dot * M[j * D + k];
        }
        double nrm = 0;
        for (int k = 0; k < D; k++) nrm += M[i * D + k] * M[i * D + k];
        nrm = sqrt(nrm);
        for (int k = 0; k < D; k++) M[i * D + k] /= nrm;
    }
}

static void rnd_perm(uint64_t *s, int n, int *perm)
{
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd_u(s) * (i + 1));
        int t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
}

/* ------------------------------------------------------------ transforms */

static double t_osz1(double x)
{
    if (x == 0) return 0;
    double xh = log(fabs(x)), c1 = x > 0 ? 10 : 5.5, c2 = x > 0 ? 7.9 : 3.1;
    return (x > 0 ? 1 : -1) * exp(xh + 0.049 * (sin(c1 * xh) + sin(c2 * xh)));
}

static void t_osz(double *z, int D)
{
    for (int i = 0; i < D; i++) z[i] = t_osz1(z[i]);
}

static void t_asy(double *z, int D, double beta)
{
    for (int i = 0; i < D; i++)
        if (z[i] > 0) z[i] = pow(z[i], 1 + beta * i / (double)(D - 1) * sqrt(z[i]));
}

static double lam(double alpha, int i, int D) { return pow(alpha, 0.5 * i / (double)(D - 1)); }

static void lambda(double *z, int D, double alpha)
{
    for (int i = 0; i < D; i++) z[i] *= lam(alpha, i, D);
}

/* out = M in, M (D, D) row-major; out and in distinct. */
static void matvec(const double *M, const double *in, double *out, int D)
{
    for (int i = 0; i < D; i++) {
        double s = 0;
        for (int k = 0; k < D; k++) s += M[i * D + k] * in[k];
        out[i] = s;
    }
}

/* z = M z in place. */
static void rot(const double *M, double *z, int D)
{
    double t[BBOB_MAX_DIM];
    matvec(M, z, t, D);
    memcpy(z, t, (size_t)D * sizeof *z);
}

static double f_pen(const double *x, int D)
{
    double s = 0;
    for (int i = 0; i < D; i++) {
        double e = fabs(x[i]) - 5;
        if (e > 0) s += e * e;
    }
    return s;
}

static double rastrigin(const double *z, int D)
{
    double c = 0, q = 0;
    for (int i = 0; i < D; i++) { c += cos(2 * M_PI * z[i]); q += z[i] * z[i]; }
    return 10 * (D - c) + q;
}

static double rosenbrock(const double *z, int D)
{
    double s = 0;
    for (int i = 0; i + 1 < D; i++)
        s += 100 * (z[i] * z[i] - z[i + 1]) * (z[i] * z[i] - z[i + 1]) + (z[i] - 1) * (z[i] - 1);
    return s;
}

/* ------------------------------------------------------------ instances */

static double rosen_scale(int D) { return fmax(1.0, sqrt((double)D) / 8.0); }

/* Gallagher's peaks (f21: 101, f22: 21): peak 0 at xopt with weight 10. */
static void init_peaks(bbob_problem *p, uint64_t *s)
{
    int D = p->dim, n = p->fid == 21 ? 101 : 21, perm[BBOB_MAX_PEAKS], dp[BBOB_MAX_DIM];
    p->npeaks = n;
    rnd_perm(s, n - 1, perm);
    for (int i = 0; i < n; i++) {
        double a = i == 0 ? (p->fid == 21 ? 1000.0 : 1e6) : pow(1000.0, 2.0 * perm[i - 1] / (double)(n - 2));
        p->w[i] = i == 0 ? 10.0 : 1.1 + 8.0 * (i - 1) / (double)(n - 2);
        rnd_perm(s, D, dp);
        for (int k = 0; k < D; k++) p->cdiag[i * D + k] = lam(a, dp[k], D) / pow(a, 0.25);
        for (int k = 0; k < D; k++)
            p->y[i * D + k] = i == 0 ? p->xopt[k] : -4.9 + 9.8 * rnd_u(s);
    }
}

int bbob_shift_free(int fid)
{
    return fid >= 1 && fid <= 24 && fid != 5 && fid != 9 && fid != 19 && fid != 20 && fid != 24;
}

int bbob_init(bbob_problem *p, int fid, int dim, int instance)
{
    if (fid < 1 || fid > 24 || dim < 2 || dim > BBOB_MAX_DIM || instance < 1) return -1;
    memset(p, 0, sizeof *p);
    p->fid = fid; p->dim = dim; p->instance = instance;
    uint64_t s = 0x5BB0B0000ULL ^ ((uint64_t)fid << 40) ^ ((uint64_t)dim << 24) ^ (uint64_t)instance;
    rnd_next(&s);
    int D = dim;
    for (int i = 0; i < D; i++) {
        p->xopt[i] = 8 * floor(1e4 * rnd_u(&s)) / 1e4 - 4;
        if (p->xopt[i] == 0) p->xopt[i] = -1e-5;
        p->sign[i] = rnd_u(&s) < 0.5 ? -1 : 1;
    }
    double fo = 100 * rnd_n(&s) / (fabs(rnd_n(&s)) + 1e-12);   /* Cauchy, as the document's f_opt */
    p->fopt = fmin(1000, fmax(-1000, round(100 * fo) / 100));
    rnd_rotation(&s, D, p->R);
    rnd_rotation(&s, D, p->Q);
    double c = rosen_scale(D);
    switch (fid) {
    case 4:
        for (int i = 0; i < D; i += 2) p->xopt[i] = fabs(p->xopt[i]);
        break;
    case 5:
        for (int i = 0; i < D; i++) p->xopt[i] = 5 * p->sign[i];
        break;
    case 8:
        for (int i = 0; i < D; i++) p->xopt[i] *= 0.75;
        break;
    case 9: case 19:   /* z = c R x + 1/2 is 1 at x = R^T (1/(2c)) 1 */
        for (int i = 0; i < D; i++) {
            p->xopt[i] = 0;
            for (int k = 0; k < D; k++) p->xopt[i] += p->R[k * D + i] * 0.5 / c;
        }
        break;
    case 20:
        for (int i = 0; i < D; i++) p->xopt[i] = 4.2096874633 / 2 * p->sign[i];
        break;
    case 22:
        for (int i = 0; i < D; i++) p->xopt[i] *= 0.98;
        break;
    case 24:
        for (int i = 0; i < D; i++) p->xopt[i] = 2.5 / 2 * p->sign[i];
        break;
    default:
        break;
    }
    if (fid == 21 || fid == 22) init_peaks(p, &s);
    return 0;
}

void bbob_snap(bbob_problem *p, int i, const double *grid, int n)
{
    double best = grid[0];
    for (int k = 1; k < n; k++)
        if (fabs(grid[k] - p->xopt[i]) < fabs(best - p->xopt[i])) best = grid[k];
    p->xopt[i] = best;
    if (p->npeaks) p->y[i] = best;   /* peak 0 is the optimum */
}

/* ------------------------------------------------------------ functions */

/* z = x - xopt */
static void shifted(const bbob_problem *p, const double *x, double *z)
{
    for (int i = 0; i < p->dim; i++) z[i] = x[i] - p->xopt[i];
}

static double weighted_sq(const double *z, int D, double cond)
{
    double s = 0;
    for (int i = 0; i < D; i++) s += pow(cond, i / (double)(D - 1)) * z[i] * z[i];
    return s;
}

static double f_weierstrass(const bbob_problem *p, double *z)
{
    int D = p->dim;
    double f0 = 0, s = 0;
    rot(p->R, z, D); t_osz(z, D); rot(p->Q, z, D); lambda(z, D, 0.01); rot(p->R, z, D);
    for (int k = 0; k < 12; k++) f0 += pow(0.5, k) * cos(M_PI * pow(3, k));
    for (int i = 0; i < D; i++)
        for (int k = 0; k < 12; k++) s += pow(0.5, k) * cos(2 * M_PI * pow(3, k) * (z[i] + 0.5));
    double t = s / D - f0;
    return 10 * t * t * t;
}

static double f_schaffers(const bbob_problem *p, double *z, double cond)
{
    int D = p->dim;
    double s = 0;
    rot(p->R, z, D); t_asy(z, D, 0.5); rot(p->Q, z, D); lambda(z, D, cond);
    for (int i = 0; i + 1 < D; i++) {
        double si = sqrt(z[i] * z[i] + z[i + 1] * z[i + 1]), q = sqrt(si), sn = sin(50 * pow(si, 0.2));
        s += q + q * sn * sn;
    }
    s /= (D - 1);
    return s * s;
}

static double f_schwefel(const bbob_problem *p, const double *x)
{
    int D = p->dim;
    double xh[BBOB_MAX_DIM], z[BBOB_MAX_DIM], zs[BBOB_MAX_DIM], s = 0;
    for (int i = 0; i < D; i++) xh[i] = 2 * p->sign[i] * x[i];
    for (int i = 0; i < D; i++) z[i] = i == 0 ? xh[0] : xh[i] + 0.25 * (xh[i - 1] - 2 * fabs(p->xopt[i - 1]));
    for (int i = 0; i < D; i++) z[i] = 100 * (lam(10, i, D) * (z[i] - 2 * fabs(p->xopt[i])) + 2 * fabs(p->xopt[i]));
    for (int i = 0; i < D; i++) { s += z[i] * sin(sqrt(fabs(z[i]))); zs[i] = z[i] / 100; }
    return -s / (100.0 * D) + 4.189828872724339 + 100 * f_pen(zs, D);
}

static double f_gallagher(const bbob_problem *p, const double *x)
{
    int D = p->dim;
    double best = 0, d[BBOB_MAX_DIM], r[BBOB_MAX_DIM];
    for (int i = 0; i < p->npeaks; i++) {
        for (int k = 0; k < D; k++) d[k] = x[k] - p->y[i * D + k];
        matvec(p->R, d, r, D);
        double q = 0;
        for (int k = 0; k < D; k++) q += p->cdiag[i * D + k] * r[k] * r[k];
        double v = p->w[i] * exp(-q / (2.0 * D));
        if (v > best) best = v;
    }
    double t = t_osz1(10 - best);
    return t * t + f_pen(x, D);
}

static double f_katsuura(const bbob_problem *p, double *z)
{
    int D = p->dim;
    double prod = 1;
    rot(p->R, z, D); lambda(z, D, 100); rot(p->Q, z, D);
    for (int i = 0; i < D; i++) {
        double s = 0;
        for (int j = 1; j <= 32; j++) {
            double t = ldexp(z[i], j);
            s += fabs(t - nearbyint(t)) / ldexp(1.0, j);
        }
        prod *= pow(1 + (i + 1) * s, 10.0 / pow(D, 1.2));
    }
    return 10.0 / (D * D) * prod - 10.0 / (D * D);
}

static double f_lunacek(const bbob_problem *p, const double *x)
{
    int D = p->dim;
    double mu0 = 2.5, sc = 1 - 1 / (2 * sqrt(D + 20.0) - 8.2), mu1 = -sqrt((mu0 * mu0 - 1) / sc);
    double xh[BBOB_MAX_DIM], z[BBOB_MAX_DIM], a = 0, b = 0, c = 0;
    for (int i = 0; i < D; i++) {
        xh[i] = 2 * p->sign[i] * x[i];
        a += (xh[i] - mu0) * (xh[i] - mu0);
        b += (xh[i] - mu1) * (xh[i] - mu1);
        z[i] = xh[i] - mu0;
    }
    rot(p->R, z, D); lambda(z, D, 100); rot(p->Q, z, D);
    for (int i = 0; i < D; i++) c += cos(2 * M_PI * z[i]);
    return fmin(a, D + sc * b) + 10 * (D - c) + 1e4 * f_pen(x, D);
}

/* Functions 1-14 (the separable, moderate, ill-conditioned groups). */
static double eval_low(const bbob_problem *p, const double *x, double *z)
{
    int D = p->dim;
    double s = 0, c = rosen_scale(D);
    switch (p->fid) {
    case 1: shifted(p, x, z); for (int i = 0; i < D; i++) s += z[i] * z[i]; return s;
    case 2: shifted(p, x, z); t_osz(z, D); return weighted_sq(z, D, 1e6);
    case 3: shifted(p, x, z); t_osz(z, D); t_asy(z, D, 0.2); lambda(z, D, 10); return rastrigin(z, D);
    case 4:
        shifted(p, x, z); t_osz(z, D);
        for (int i = 0; i < D; i++) z[i] *= (z[i] > 0 && i % 2 == 0 ? 10 : 1) * lam(10, i, D);
        return rastrigin(z, D) + 100 * f_pen(x, D);
    case 5:
        for (int i = 0; i < D; i++) {
            double si = (p->xopt[i] > 0 ? 1 : -1) * pow(10, i / (double)(D - 1));
            double zi = p->xopt[i] * x[i] < 25 ? x[i] : p->xopt[i];
            s += 5 * fabs(si) - si * zi;
        }
        return s;
    case 6:
        shifted(p, x, z); rot(p->R, z, D); lambda(z, D, 10); rot(p->Q, z, D);
        for (int i = 0; i < D; i++) { double f = z[i] * p->xopt[i] > 0 ? 100 : 1; s += f * z[i] * f * z[i]; }
        return pow(t_osz1(s), 0.9);
    case 7: {
        double zh[BBOB_MAX_DIM];
        shifted(p, x, zh); rot(p->R, zh, D); lambda(zh, D, 10);
        for (int i = 0; i < D; i++) z[i] = fabs(zh[i]) > 0.5 ? floor(0.5 + zh[i]) : floor(0.5 + 10 * zh[i]) / 10;
        rot(p->Q, z, D);
        return 0.1 * fmax(fabs(zh[0]) / 1e4, weighted_sq(z, D, 100)) + f_pen(x, D);
    }
    case 8: shifted(p, x, z); for (int i = 0; i < D; i++) z[i] = c * z[i] + 1; return rosenbrock(z, D);
    case 9: matvec(p->R, x, z, D); for (int i = 0; i < D; i++) z[i] = c * z[i] + 0.5; return rosenbrock(z, D);
    case 10: shifted(p, x, z); rot(p->R, z, D); t_osz(z, D); return weighted_sq(z, D, 1e6);
    case 11:
        shifted(p, x, z); rot(p->R, z, D); t_osz(z, D);
        for (int i = 1; i < D; i++) s += z[i] * z[i];
        return 1e6 * z[0] * z[0] + s;
    case 12:
        shifted(p, x, z); rot(p->R, z, D); t_asy(z, D, 0.5); rot(p->R, z, D);
        for (int i = 1; i < D; i++) s += z[i] * z[i];
        return z[0] * z[0] + 1e6 * s;
    case 13:
        shifted(p, x, z); rot(p->R, z, D); lambda(z, D, 10); rot(p->Q, z, D);
        for (int i = 1; i < D; i++) s += z[i] * z[i];
        return z[0] * z[0] + 100 * sqrt(s);
    default:   /* 14 */
        shifted(p, x, z); rot(p->R, z, D);
        for (int i = 0; i < D; i++) s += pow(fabs(z[i]), 2 + 4 * i / (double)(D - 1));
        return sqrt(s);
    }
}

/* Functions 15-24 (the multi-modal groups). */
static double eval_high(const bbob_problem *p, const double *x, double *z)
{
    int D = p->dim;
    double s = 0, c = rosen_scale(D);
    switch (p->fid) {
    case 15:
        shifted(p, x, z); rot(p->R, z, D); t_osz(z, D); t_asy(z, D, 0.2); rot(p->Q, z, D); lambda(z, D, 10);
        rot(p->R, z, D);
        return rastrigin(z, D);
    case 16: shifted(p, x, z); return f_weierstrass(p, z) + 10.0 / D * f_pen(x, D);
    case 17: shifted(p, x, z); return f_schaffers(p, z, 10) + 10 * f_pen(x, D);
    case 18: shifted(p, x, z); return f_schaffers(p, z, 1000) + 10 * f_pen(x, D);
    case 19:
        matvec(p->R, x, z, D);
        for (int i = 0; i < D; i++) z[i] = c * z[i] + 0.5;
        for (int i = 0; i + 1 < D; i++) {
            double si = 100 * (z[i] * z[i] - z[i + 1]) * (z[i] * z[i] - z[i + 1]) + (z[i] - 1) * (z[i] - 1);
            s += si / 4000 - cos(si);
        }
        return 10.0 / (D - 1) * s + 10;
    case 20: return f_schwefel(p, x);
    case 21: case 22: return f_gallagher(p, x);
    case 23: shifted(p, x, z); return f_katsuura(p, z) + f_pen(x, D);
    default: return f_lunacek(p, x);   /* 24 */
    }
}

double bbob_eval(const bbob_problem *p, const double *x)
{
    double z[BBOB_MAX_DIM];
    return (p->fid <= 14 ? eval_low(p, x, z) : eval_high(p, x, z)) + p->fopt;
}

/* ---------------------------------------------------------------- suite
 *
 * The split (docs/search.md, written before any tuning): the tuning half
 * is the odd function ids, instances 1 and 2; the held-out half the even
 * ids, instances 3 and 4. Mixed and conditional problems follow their
 * function id the same way (odd: tuning, instance 1; even: held out,
 * instance 3). The budget of a problem with D coordinates is 15 D + 50
 * trials (80, 95, 125 and 200 for D = 2, 3, 5, 10).
 */

static const int dims[] = {2, 3, 5, 10};
#define N_DIMS 4
#define N_PURE (24 * N_DIMS * 2)
static const int mix_dims[] = {5, 10};
#define N_MIX_DIMS 2
/* The conditional problems' function ids (two branches of dimension 3). */
static const int cond_fids[] = {3, 7, 15, 21, 4, 6, 16, 22};
#define N_COND 8
#define COND_DIM 3
#define COND_B_INSTANCE 50   /* branch b: the same function, instance + this */
#define COND_B_OFFSET 1.0    /* branch b's regret is its function's + this */
static const double cat_levels[BBOB_CAT_LEVELS] = {-4, -2, 0, 2, 4};

static int budget_of(int D) { return 15 * D + 50; }

/* The shift-free ids in order: the mixed problems' function ids. */
static int mix_fid(int j)
{
    for (int fid = 1; fid <= 24; fid++)
        if (bbob_shift_free(fid) && j-- == 0) return fid;
    return -1;
}

static int n_mix_fids(void)
{
    int n = 0;
    for (int fid = 1; fid <= 24; fid++) n += bbob_shift_free(fid);
    return n;
}

int bbob_suite_count(void) { return N_PURE + n_mix_fids() * N_MIX_DIMS + N_COND; }

size_t bbob_case_size(void) { return sizeof(bbob_case); }

/* The layout of a mixed problem of D coordinates: integers, categoricals,
 * one log-scale, the rest floats; the optimum moved onto the grid of each
 * integer and categorical coordinate. */
static void mixed_layout(bbob_case *c)
{
    int D = c->dim;
    double ints[11];
    c->n_int = 2 * D / 5;
    c->n_cat = D / 5;
    c->n_log = 1;
    for (int k = 0; k < 11; k++) ints[k] = k - 5;
    uint64_t s = 0xCA7ULL ^ ((uint64_t)c->fid << 32) ^ ((uint64_t)D << 16) ^ (uint64_t)c->instance;
    for (int i = 0; i < c->n_int; i++) bbob_snap(&c->a, i, ints, 11);
    for (int i = c->n_int; i < c->n_int + c->n_cat; i++) {
        bbob_snap(&c->a, i, cat_levels, BBOB_CAT_LEVELS);
        rnd_perm(&s, BBOB_CAT_LEVELS, c->cat_perm[i]);
    }
}

int bbob_suite_case(int k, bbob_case *c)
{
    if (k < 0 || k >= bbob_suite_count()) return -1;
    memset(c, 0, sizeof *c);
    if (k < N_PURE) {
        c->kind = BBOB_PURE;
        c->fid = k / (N_DIMS * 2) + 1;
        c->dim = dims[k / 2 % N_DIMS];
        c->heldout = c->fid % 2 == 0;
        c->instance = (c->heldout ? 3 : 1) + k % 2;
        c->nparam = c->dim;
        snprintf(c->name, sizeof c->name, "f%02d-d%d-i%d", c->fid, c->dim, c->instance);
        bbob_init(&c->a, c->fid, c->dim, c->instance);
    } else if ((k -= N_PURE) < n_mix_fids() * N_MIX_DIMS) {
        c->kind = BBOB_MIXED;
        c->fid = mix_fid(k / N_MIX_DIMS);
        c->dim = mix_dims[k % N_MIX_DIMS];
        c->heldout = c->fid % 2 == 0;
        c->instance = c->heldout ? 3 : 1;
        c->nparam = c->dim;
        snprintf(c->name, sizeof c->name, "mix-f%02d-d%d-i%d", c->fid, c->dim, c->instance);
        bbob_init(&c->a, c->fid, c->dim, c->instance);
        mixed_layout(c);
    } else {
        k -= n_mix_fids() * N_MIX_DIMS;
        c->kind = BBOB_COND;
        c->fid = cond_fids[k];
        c->dim = COND_DIM;
        c->heldout = c->fid % 2 == 0;
        c->instance = c->heldout ? 3 : 1;
        c->nparam = 1 + 2 * c->dim;
        snprintf(c->name, sizeof c->name, "cond-f%02d-d%d-i%d", c->fid, c->dim, c->instance);
        bbob_init(&c->a, c->fid, c->dim, c->instance);
        bbob_init(&c->b, c->fid, c->dim, c->instance + COND_B_INSTANCE);
    }
    c->budget = budget_of(c->kind == BBOB_COND ? c->dim + 1 : c->dim);
    return 0;
}

int bbob_case_param(const bbob_case *c, int j, char *buf, size_t n)
{
    int w;
    if (j < 0 || j >= c->nparam) return -1;
    if (c->kind != BBOB_COND) w = snprintf(buf, n, "x%d", j + 1);
    else if (j == 0) w = snprintf(buf, n, "branch");
    else w = snprintf(buf, n, "%c%d", j <= c->dim ? 'a' : 'b', (j - 1) % c->dim + 1);
    return w < 0 || (size_t)w >= n ? -1 : 0;
}

/* Parameter j's JSON ("name": {...}) into buf; RET its length or -1. */
static int param_json(const bbob_case *c, int j, char *buf, size_t n)
{
    char nm[16];
    if (bbob_case_param(c, j, nm, sizeof nm)) return -1;
    const char *def = "{\"type\": \"uniform\", \"min\": -5, \"max\": 5}";
    if (c->kind == BBOB_COND && j == 0) def = "{\"type\": \"categorical\", \"values\": [\"a\", \"b\"]}";
    else if (c->kind == BBOB_COND)
        return snprintf(buf, n, "\"%s\": {\"type\": \"uniform\", \"min\": -5, \"max\": 5, \"condition\": "
                        "{\"param\": \"branch\", \"values\": [\"%c\"]}}", nm, nm[0]);
    else if (c->kind == BBOB_MIXED && j < c->n_int) def = "{\"type\": \"int\", \"min\": -5, \"max\": 5}";
    else if (c->kind == BBOB_MIXED && j < c->n_int + c->n_cat)
        def = "{\"type\": \"categorical\", \"values\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}";
    else if (c->kind == BBOB_MIXED && j < c->n_int + c->n_cat + c->n_log)
        def = "{\"type\": \"log\", \"min\": 0.001, \"max\": 10000000}";
    return snprintf(buf, n, "\"%s\": %s", nm, def);
}

int bbob_case_space(const bbob_case *c, char *buf, size_t n)
{
    size_t len = 0;
    for (int j = 0; j <= c->nparam; j++) {
        int w = j == c->nparam ? snprintf(buf + len, n - len, "}")
                               : snprintf(buf + len, n - len, "%s", j ? ", " : "{");
        if (w < 0 || (size_t)w >= n - len) return -1;
        len += (size_t)w;
        if (j == c->nparam) break;
        w = param_json(c, j, buf + len, n - len);
        if (w < 0 || (size_t)w >= n - len) return -1;
        len += (size_t)w;
    }
    return (int)len;
}

double bbob_case_regret(const bbob_case *c, const double *v)
{
    double x[BBOB_MAX_DIM];
    if (c->kind == BBOB_COND) {
        int b = v[0] >= 0.5;
        const bbob_problem *p = b ? &c->b : &c->a;
        for (int i = 0; i < c->dim; i++) x[i] = v[1 + b * c->dim + i];
        return bbob_eval(p, x) - p->fopt + (b ? COND_B_OFFSET : 0.0);
    }
    for (int i = 0; i < c->dim; i++) {
        x[i] = v[i];
        if (c->kind != BBOB_MIXED || i < c->n_int) continue;
        if (i < c->n_int + c->n_cat) {
            int k = (int)v[i];
            x[i] = cat_levels[c->cat_perm[i][k < 0 ? 0 : k >= BBOB_CAT_LEVELS ? BBOB_CAT_LEVELS - 1 : k]];
        } else if (i < c->n_int + c->n_cat + c->n_log) {
            x[i] = log10(v[i]) - 2;   /* [1e-3, 1e7] -> [-5, 5] */
        }
    }
    return bbob_eval(&c->a, x) - c->a.fopt;
}
