/*
 * search_mo.c — multi-objective orderings shared by the searchers (see
 * search_mo.h): the objective/constraint part of an experiment file,
 * constraint violation, non-dominated sorting, crowding distance, exact
 * hypervolume and the two rankings built from them (ASHA's rung order and
 * MOTPE's good/bad split).
 *
 * Workload: a few hundred points of 2-4 objectives at most per call (a
 * rung, or the finished trials of one experiment), so the O(m n^2)
 * non-dominated sort and the O(n^(m-1) log n) slicing hypervolume are
 * plenty. Every ordering is total (ties broken by index), so the result
 * depends only on the points, not on the order they arrived in.
 */
#include "search_mo.h"
#include "hf_err.h"
#include "hf_metric.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MO_EPS 1e-12

void search_mo_last_set(search_mo_last *l, int k, double v)
{
    if (k < 0 || k >= SEARCH_MO_MAX_SLOT || !isfinite(v)) return;
    l->v[k] = v;
    l->seen |= 1u << k;
}

int search_mo_last_complete(const search_mo_last *l, const search_objectives *o)
{
    uint32_t need = (o->n_obj >= 32) ? ~0u : ((1u << o->n_obj) - 1);
    return (l->seen & need) == need;
}

double search_mo_violation(const search_objectives *o, const search_mo_last *l)
{
    double s = 0;
    for (int c = 0; c < o->n_con; c++) {
        int k = o->n_obj + c;
        if (!(l->seen & (1u << k))) return INFINITY;
        double v = l->v[k];
        if (v > o->con_max[c]) s += v - o->con_max[c];
        if (v < o->con_min[c]) s += o->con_min[c] - v;
    }
    return s;
}

int search_mo_dominates(const double *a, const double *b, int m)
{
    int strict = 0;
    for (int j = 0; j < m; j++) {
        if (a[j] < b[j]) return 0;
        if (a[j] > b[j]) strict = 1;
    }
    return strict;
}

int search_mo_nds(const double *y, size_t n, int m, int *rank)
{
    /* Deb's bookkeeping: for each point the count of points dominating it
     * and the list of points it dominates (as an n x n bit matrix would be
     * n^2 bytes; the lists total at most n^2/2 entries). */
    size_t *cnt = calloc(n ? n : 1, sizeof *cnt);
    size_t *front = malloc((n ? n : 1) * sizeof *front);
    size_t *next = malloc((n ? n : 1) * sizeof *next);
    int rc = HF_ENOMEM;
    if (!cnt || !front || !next) goto end;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (i != j && search_mo_dominates(y + j * m, y + i * m, m)) cnt[i]++;
    size_t nf = 0, done = 0;
    for (size_t i = 0; i < n; i++)
        if (cnt[i] == 0) { front[nf++] = i; rank[i] = 0; }
    for (int r = 0; nf; r++) {
        size_t nn = 0;
        done += nf;
        for (size_t a = 0; a < nf; a++) {
            size_t i = front[a];
            for (size_t j = 0; j < n; j++)
                if (cnt[j] && search_mo_dominates(y + i * m, y + j * m, m) && --cnt[j] == 0) {
                    rank[j] = r + 1;
                    next[nn++] = j;
                }
        }
        memcpy(front, next, nn * sizeof *front);
        nf = nn;
    }
    rc = done == n ? 0 : HF_EINVAL;   /* NaN components could leave points unranked */
end:
    free(cnt); free(front); free(next);
    return rc;
}

typedef struct { double v; size_t i; } mo_key;

static int cmp_key(const void *a, const void *b)
{
    const mo_key *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

int search_mo_crowding(const double *y, const size_t *idx, size_t k, int m, double *cd)
{
    mo_key *s = malloc((k ? k : 1) * sizeof *s);
    if (!s) return HF_ENOMEM;
    for (size_t a = 0; a < k; a++) cd[a] = 0;
    for (int j = 0; j < m && k; j++) {
        for (size_t a = 0; a < k; a++) s[a] = (mo_key){y[idx[a] * m + j], a};
        qsort(s, k, sizeof *s, cmp_key);
        double span = s[k - 1].v - s[0].v;
        cd[s[0].i] = cd[s[k - 1].i] = INFINITY;
        for (size_t a = 1; a + 1 < k; a++)
            if (span > 0) cd[s[a].i] += (s[a + 1].v - s[a - 1].v) / span;
    }
    free(s);
    return 0;
}

static int cmp_last(const void *a, const void *b, void *m)
{
    int j = *(int *)m - 1;
    const double *x = a, *y = b;
    return x[j] < y[j] ? -1 : x[j] > y[j];
}

/* Insertion sort of n rows of m doubles by the last component (qsort_r is
 * not portable C11; fronts are small). */
static void sort_rows_last(double *p, size_t n, int m, double *tmp)
{
    for (size_t i = 1; i < n; i++) {
        memcpy(tmp, p + i * m, m * sizeof *tmp);
        size_t j = i;
        while (j > 0 && cmp_last(p + (j - 1) * m, tmp, &m) > 0) {
            memcpy(p + j * m, p + (j - 1) * m, m * sizeof *p);
            j--;
        }
        memcpy(p + j * m, tmp, m * sizeof *tmp);
    }
}

/* Hypervolume of n rows (already strictly inside ref) of m components. */
static double hv_rec(double *p, size_t n, int m, const double *ref)
{
    if (n == 0) return 0;
    if (m == 1) {
        double b = ref[0];
        for (size_t i = 0; i < n; i++) if (p[i] < b) b = p[i];
        return ref[0] - b;
    }
    double tmp[SEARCH_MO_MAX_OBJ];
    sort_rows_last(p, n, m, tmp);
    if (m == 2) {
        /* Sorted by y ascending: each point improving the best x so far
         * adds the strip between its y and ref's. */
        double hv = 0, bx = ref[0];
        for (size_t i = 0; i < n; i++) {
            double ny = i + 1 < n ? p[(i + 1) * 2 + 1] : ref[1];
            if (p[i * 2] < bx) bx = p[i * 2];
            hv += (ref[0] - bx) * (ny - p[i * 2 + 1]);
        }
        return hv;
    }
    /* Slice along the last component: between consecutive values the
     * cross-section is the (m-1)-volume of the points below. */
    double *q = malloc(n * (size_t)(m - 1) * sizeof *q);
    if (!q) return NAN;
    double hv = 0;
    for (size_t i = 0; i < n; i++) {
        double z0 = p[i * m + m - 1], z1 = i + 1 < n ? p[(i + 1) * m + m - 1] : ref[m - 1];
        if (z1 <= z0) continue;
        for (size_t a = 0; a <= i; a++) memcpy(q + a * (m - 1), p + a * m, (m - 1) * sizeof *q);
        double s = hv_rec(q, i + 1, m - 1, ref);
        if (isnan(s)) { free(q); return NAN; }
        hv += s * (z1 - z0);
    }
    free(q);
    return hv;
}

double search_mo_hypervolume(const double *pts, size_t n, int m, const double *ref)
{
    if (m < 1 || m > SEARCH_MO_MAX_OBJ) return NAN;
    double *p = malloc((n ? n : 1) * (size_t)m * sizeof *p);
    if (!p) return NAN;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int in = 1;
        for (int j = 0; j < m; j++) if (!(pts[i * m + j] < ref[j])) in = 0;
        if (in) memcpy(p + (k++) * m, pts + i * m, m * sizeof *p);
    }
    double hv = hv_rec(p, k, m, ref);
    free(p);
    return hv;
}

typedef struct { int feas; int rank; double cd; double viol; int64_t tie; size_t i; } mo_ord;

static int cmp_ord(const void *a, const void *b)
{
    const mo_ord *x = a, *y = b;
    if (x->feas != y->feas) return x->feas ? -1 : 1;
    if (x->feas) {
        if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
        if (x->cd != y->cd) return x->cd > y->cd ? -1 : 1;
    } else if (x->viol != y->viol) {
        return x->viol < y->viol ? -1 : 1;
    }
    return x->tie < y->tie ? -1 : x->tie > y->tie;
}

/* Copy the feasible rows of y into f (OUT fi: their indices). RET count. */
static size_t feasible_rows(const double *y, size_t n, int m, const double *viol, double *f, size_t *fi)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!viol || viol[i] == 0) {
            memcpy(f + k * m, y + i * m, m * sizeof *f);
            fi[k++] = i;
        }
    return k;
}

int search_mo_order(const double *y, size_t n, int m, const double *viol, const int64_t *tie, size_t *order)
{
    mo_ord *o = malloc((n ? n : 1) * sizeof *o);
    double *f = malloc((n ? n : 1) * (size_t)m * sizeof *f), *cd = malloc((n ? n : 1) * sizeof *cd);
    size_t *fi = malloc((n ? n : 1) * sizeof *fi), *fr = malloc((n ? n : 1) * sizeof *fr);
    int *rank = malloc((n ? n : 1) * sizeof *rank);
    int rc = HF_ENOMEM;
    if (!o || !f || !cd || !fi || !fr || !rank) goto end;
    size_t k = feasible_rows(y, n, m, viol, f, fi);
    if ((rc = search_mo_nds(f, k, m, rank))) goto end;
    for (size_t i = 0; i < n; i++)
        o[i] = (mo_ord){.feas = 0, .viol = viol ? viol[i] : 0, .tie = tie ? tie[i] : (int64_t)i, .i = i};
    for (int r = 0;; r++) {
        size_t nf = 0;
        for (size_t a = 0; a < k; a++) if (rank[a] == r) fr[nf++] = a;
        if (!nf) break;
        if ((rc = search_mo_crowding(f, fr, nf, m, cd))) goto end;
        for (size_t a = 0; a < nf; a++) {
            mo_ord *x = &o[fi[fr[a]]];
            x->feas = 1; x->rank = r; x->cd = cd[a];
        }
    }
    qsort(o, n, sizeof *o, cmp_ord);
    for (size_t i = 0; i < n; i++) order[i] = o[i].i;
    rc = 0;
end:
    free(o); free(f); free(cd); free(fi); free(fr); free(rank);
    return rc;
}

/* Greedy hypervolume subset selection (Optuna's _solve_hssp): pick want
 * of the k points lv[idx[.]] (minimisation form) one at a time, each the
 * one adding the most hypervolume to those picked (ties: lower position).
 * OUT pick[0..want): positions in idx, in picking order. RET 0 or HF_ENOMEM. */
static int hssp_greedy(const double *lv, const size_t *idx, size_t k, int m, const double *ref, size_t want,
                       size_t *pick)
{
    double *sel = malloc((want + 1) * (size_t)m * sizeof *sel);
    char *used = calloc(k ? k : 1, 1);
    int rc = HF_ENOMEM;
    if (!sel || !used) goto end;
    for (size_t s = 0; s < want; s++) {
        double best = -1;
        size_t bi = 0;
        for (size_t c = 0; c < k; c++) {
            if (used[c]) continue;
            memcpy(sel + s * m, lv + idx[c] * m, m * sizeof *sel);
            double hv = search_mo_hypervolume(sel, s + 1, m, ref);
            if (isnan(hv)) goto end;
            if (hv > best) { best = hv; bi = c; }
        }
        used[bi] = 1;
        pick[s] = bi;
        memcpy(sel + s * m, lv + idx[bi] * m, m * sizeof *sel);
    }
    rc = 0;
end:
    free(sel); free(used);
    return rc;
}

/* Optuna's reference point for the k rows idx[.] of lv (minimisation):
 * the worst point pushed out by 10 % (EPS where it is 0). */
static void mo_ref_point(const double *lv, const size_t *idx, size_t k, int m, double *ref)
{
    for (int j = 0; j < m; j++) {
        double w = -INFINITY;
        for (size_t a = 0; a < k; a++) if (lv[idx[a] * m + j] > w) w = lv[idx[a] * m + j];
        ref[j] = fmax(1.1 * w, 0.9 * w);
        if (ref[j] == 0) ref[j] = MO_EPS;
    }
}

/* MOTPE's weights of the good set g[0..k) (rows of lv, minimisation):
 * hypervolume contribution + EPS over the largest. RET 0 or HF_ENOMEM. */
static int mo_contrib_weights(const double *lv, const size_t *g, size_t k, int m, double *w)
{
    if (k == 1) { w[0] = 1; return 0; }
    double ref[SEARCH_MO_MAX_OBJ], *p = malloc(k * (size_t)m * sizeof *p);
    if (!p) return HF_ENOMEM;
    mo_ref_point(lv, g, k, m, ref);
    for (size_t a = 0; a < k; a++) memcpy(p + a * m, lv + g[a] * m, m * sizeof *p);
    double all = search_mo_hypervolume(p, k, m, ref), mx = 0;
    for (size_t a = 0; a < k; a++) {
        /* Without point a: swap it to the end and leave it out. */
        double *pa = p + a * m, *pl = p + (k - 1) * m, t[SEARCH_MO_MAX_OBJ];
        memcpy(t, pa, m * sizeof *t); memcpy(pa, pl, m * sizeof *t); memcpy(pl, t, m * sizeof *t);
        w[a] = all - search_mo_hypervolume(p, k - 1, m, ref) + MO_EPS;
        memcpy(pl, pa, m * sizeof *t); memcpy(pa, t, m * sizeof *t);
        if (isnan(w[a])) { free(p); return HF_ENOMEM; }
        if (w[a] > mx) mx = w[a];
    }
    for (size_t a = 0; a < k; a++) w[a] = fmin(fmax(w[a] / mx, 0), 1);
    free(p);
    return 0;
}

int search_mo_tpe_rank(const double *y, size_t n, int m, const double *viol, size_t n_good,
                       int64_t *level, double *value, double *weight)
{
    double *f = malloc((n ? n : 1) * (size_t)m * sizeof *f);
    size_t *fi = malloc((n ? n : 1) * sizeof *fi), *fr = malloc((n ? n : 1) * sizeof *fr);
    size_t *pick = malloc((n ? n : 1) * sizeof *pick), *good = malloc((n ? n : 1) * sizeof *good);
    double *gw = malloc((n ? n : 1) * sizeof *gw);
    int *rank = malloc((n ? n : 1) * sizeof *rank);
    int rc = HF_ENOMEM;
    size_t ngood = 0;   /* feasible good ones, as rows of f */
    if (!f || !fi || !fr || !pick || !rank || !good || !gw) goto end;
    for (size_t i = 0; i < n; i++) {
        double v = viol ? viol[i] : 0;
        level[i] = SEARCH_MO_INFEASIBLE_LEVEL;
        value[i] = isfinite(v) ? -v : -1e300;
        weight[i] = 0;
    }
    size_t k = feasible_rows(y, n, m, viol, f, fi);
    if ((rc = search_mo_nds(f, k, m, rank))) goto end;
    /* Minimisation form for the hypervolume. */
    for (size_t a = 0; a < k * (size_t)m; a++) f[a] = -f[a];
    size_t count = 0;
    for (int r = 0;; r++) {
        size_t nf = 0;
        for (size_t a = 0; a < k; a++) if (rank[a] == r) fr[nf++] = a;
        if (!nf) break;
        for (size_t a = 0; a < nf; a++) { level[fi[fr[a]]] = -(int64_t)r; value[fi[fr[a]]] = 0; }
        if (count < n_good && count + nf > n_good) {
            /* The front that straddles the split: its most useful members
             * by hypervolume go first (reference point as Optuna's: the
             * front's worst point, pushed out by 10%). */
            double ref[SEARCH_MO_MAX_OBJ];
            mo_ref_point(f, fr, nf, m, ref);
            size_t want = n_good - count;
            if ((rc = hssp_greedy(f, fr, nf, m, ref, want, pick))) goto end;
            for (size_t s = 0; s < want; s++) {
                value[fi[fr[pick[s]]]] = (double)(want - s);
                good[ngood++] = fr[pick[s]];
            }
        } else if (count < n_good) {
            for (size_t a = 0; a < nf; a++) good[ngood++] = fr[a];
        }
        count += nf;
    }
    /* The good set's weights: hypervolume contributions (Optuna's
     * _calculate_weights_below_for_multi_objective); infeasible good ones
     * (too few feasible) get EPS. */
    if (ngood && (rc = mo_contrib_weights(f, good, ngood, m, gw))) goto end;
    for (size_t a = 0; a < ngood; a++) weight[fi[good[a]]] = gw[a];
    for (size_t i = 0, extra = ngood; i < n && extra < n_good; i++)
        if (level[i] == SEARCH_MO_INFEASIBLE_LEVEL) weight[i] = MO_EPS, extra++;
    rc = 0;
end:
    free(f); free(fi); free(fr); free(pick); free(rank); free(good); free(gw);
    return rc;
}

/* ---------- the experiment file's "objective" and "constraints" ---------- */

static const char *const objective_keys[] = {"metric", "goal", "aggregate", NULL};   /* experiment.c reads aggregate */
static const char *const constraint_keys[] = {"metric", "min", "max", NULL};

static int parse_one_objective(const json_t *obj, const char *path, const char **metric, int *goal_max,
                               hf_jerr *e)
{
    const char *goal = NULL;
    int rc;
    if (!json_is_object(obj)) return hf_jerr_set(e, path, NULL, "must be an object {\"metric\", \"goal\"}");
    if ((rc = hf_json_only_keys(obj, path, objective_keys, e))) return rc;
    if ((rc = hf_json_get_string(obj, path, "metric", 1, HF_METRIC_NAME_MAX, metric, e))) return rc;
    if (!hf_metric_name_ok(*metric))
        return hf_jerr_set(e, path, "metric", "not a valid metric name ([A-Za-z0-9_.:/-], 1..64 bytes)");
    if ((rc = hf_json_get_string(obj, path, "goal", 1, 16, &goal, e))) return rc;
    if (strcmp(goal, "maximize") && strcmp(goal, "minimize"))
        return hf_jerr_set(e, path, "goal", "must be \"maximize\" or \"minimize\"");
    *goal_max = strcmp(goal, "maximize") == 0;
    return 0;
}

int search_mo_parse(const json_t *objective, const json_t *constraints, const char **metrics, int *goal_max,
                    const char **cmetrics, search_objectives *o, hf_jerr *e)
{
    int rc;
    char path[64];
    memset(o, 0, sizeof *o);
    if (json_is_object(objective)) {
        o->n_obj = 1;
        if ((rc = parse_one_objective(objective, "objective", &metrics[0], &goal_max[0], e))) return rc;
    } else if (json_is_array(objective)) {
        size_t n = json_array_size(objective);
        if (n < 1 || n > SEARCH_MO_MAX_OBJ)
            return hf_jerr_set(e, "objective", NULL, "a list of 1 to %d objectives, got %zu", SEARCH_MO_MAX_OBJ, n);
        o->n_obj = (int)n;
        for (size_t k = 0; k < n; k++) {
            hf_jpath_index(path, sizeof path, "objective", k);
            if ((rc = parse_one_objective(json_array_get(objective, k), path, &metrics[k], &goal_max[k], e)))
                return rc;
            for (size_t j = 0; j < k; j++)
                if (!strcmp(metrics[j], metrics[k]))
                    return hf_jerr_set(e, path, "metric", "\"%s\" is already objective[%zu]", metrics[k], j);
        }
    } else {
        return hf_jerr_set(e, "objective", NULL,
                           "required: an object {\"metric\", \"goal\"} or a list of them");
    }
    if (!constraints || json_is_null(constraints)) return 0;
    if (!json_is_array(constraints))
        return hf_jerr_set(e, "constraints", NULL, "must be a list of {\"metric\", \"min\", \"max\"}");
    size_t n = json_array_size(constraints);
    if (n > SEARCH_MO_MAX_CON) return hf_jerr_set(e, "constraints", NULL, "at most %d constraints", SEARCH_MO_MAX_CON);
    o->n_con = (int)n;
    for (size_t c = 0; c < n; c++) {
        const json_t *x = json_array_get(constraints, c);
        int has_min, has_max;
        hf_jpath_index(path, sizeof path, "constraints", c);
        if (!json_is_object(x)) return hf_jerr_set(e, path, NULL, "must be an object {\"metric\", \"min\", \"max\"}");
        if ((rc = hf_json_only_keys(x, path, constraint_keys, e))) return rc;
        if ((rc = hf_json_get_string(x, path, "metric", 1, HF_METRIC_NAME_MAX, &cmetrics[c], e))) return rc;
        if (!hf_metric_name_ok(cmetrics[c]))
            return hf_jerr_set(e, path, "metric", "not a valid metric name ([A-Za-z0-9_.:/-], 1..64 bytes)");
        o->con_min[c] = -INFINITY;
        o->con_max[c] = INFINITY;
        has_min = json_object_get(x, "min") != NULL;
        has_max = json_object_get(x, "max") != NULL;
        if (!has_min && !has_max) return hf_jerr_set(e, path, NULL, "needs \"min\", \"max\" or both");
        if ((rc = hf_json_get_number(x, path, "min", 0, -1e300, 1e300, &o->con_min[c], e))) return rc;
        if ((rc = hf_json_get_number(x, path, "max", 0, -1e300, 1e300, &o->con_max[c], e))) return rc;
        if (o->con_min[c] > o->con_max[c])
            return hf_jerr_set(e, path, "max", "must be >= min (%g), got %g", o->con_min[c], o->con_max[c]);
        for (size_t j = 0; j < c; j++)
            if (!strcmp(cmetrics[j], cmetrics[c]))
                return hf_jerr_set(e, path, "metric", "\"%s\" is already constrained by constraints[%zu]",
                                   cmetrics[c], j);
    }
    return 0;
}
