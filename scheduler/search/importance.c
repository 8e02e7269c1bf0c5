/*
 * importance.c — fANOVA hyperparameter importance over a random forest
 * (importance.h), following Optuna's optuna/importance/_fanova (which
 * fits scikit-learn's RandomForestRegressor and walks its trees).
 *
 * The forest (as RandomForestRegressor(n_estimators=64, max_depth=64,
 * min_samples_split=2, min_samples_leaf=1, bootstrap=True)): each tree is
 * grown on a bootstrap sample (n draws with replacement, kept as integer
 * weights); at a node every feature is tried in a random order, the
 * samples sorted along it, and the threshold between two distinct
 * neighbours (more than 1e-7 apart) that maximizes the weighted variance
 * reduction wins (ties: the first found); a node is a leaf at max_depth,
 * with fewer distinct samples than min_samples_split, with no valid split,
 * or when its targets are constant. Nodes are numbered in preorder, so a
 * child's index is larger than its parent's (the bottom-up passes rely on
 * it). A leaf predicts the weighted mean of its targets.
 *
 * fANOVA per tree (Optuna's _FanovaTree): every node's subspace of the
 * bounding box; leaf statistics (value, volume of the subspace), internal
 * nodes the volume-weighted average of their children; the tree's variance
 * is the volume-weighted variance of its leaf values. For feature F the
 * axis is cut at every threshold the tree uses on F; at each cell's
 * midpoint the prediction marginalized over every other feature is the
 * weighted mean of the leaves reachable with F fixed there, and the
 * variance of those over the cells (weighted by cell size) is F's marginal
 * variance. Importance(F) = mean over trees with variance > 0 of
 * marginal variance / tree variance, then normalized to sum 1.
 *
 * Workload: on demand from GET /experiments/{id}/importance, at most
 * IMP_MAX_TRIALS trials; 1,000 trials x 5 parameters take about a second
 * on one core (docs/search.md). Nothing here holds the scheduler's lock.
 */
#include "scheduler/search/importance.h"

#include "hf_err.h"
#include "hf_metric.h"
#include "scheduler/search/search_space.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FEATURE_THRESHOLD 1e-7   /* scikit-learn: closer values are not split */
#define CACHE_SLOTS 64

void imp_opts_default(imp_opts *o)
{
    o->n_trees = IMP_TREES;
    o->max_depth = IMP_MAX_DEPTH;
    o->min_samples_split = 2;
    o->min_samples_leaf = 1;
    o->seed = 0;
}

static uint64_t rng_next(uint64_t *s)
{
    return search_rng_next(s);
}

/* ---------- one regression tree ---------- */

typedef struct node {
    int    feature;     /* -1: leaf */
    double thr;         /* left: x[feature] <= thr */
    int    left, right;
    double value;       /* weighted mean of the node's targets */
} node;

typedef struct tree {
    node  *n;
    size_t len, cap;
} tree;

/* Growing one tree: the data, the bootstrap weights, scratch. */
typedef struct grower {
    const double *X, *y;
    size_t        d;
    const imp_opts *o;
    uint64_t     *rng;
    int          *idx;       /* samples with weight > 0 (permuted within nodes) */
    double       *w;         /* bootstrap weight per sample (n) */
    int          *feat;      /* feature order scratch (d) */
    double       *key;       /* sort keys scratch (n) */
    tree         *t;
} grower;

static int tree_push(tree *t)
{
    if (t->len == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 64;
        node *nn = realloc(t->n, nc * sizeof *nn);
        if (!nn) return -1;
        t->n = nn;
        t->cap = nc;
    }
    memset(&t->n[t->len], 0, sizeof t->n[0]);
    t->n[t->len].feature = -1;
    t->n[t->len].left = t->n[t->len].right = -1;
    return (int)t->len++;
}

/* qsort has no context argument: the keys of the node being split. */
static _Thread_local const double *sort_key;

static int cmp_by_key(const void *a, const void *b)
{
    double x = sort_key[*(const int *)a], y = sort_key[*(const int *)b];
    return x < y ? -1 : x > y ? 1 : *(const int *)a - *(const int *)b;
}

/* Best split of idx[lo, hi): feature and threshold, RET 1 when found. */
static int best_split(grower *g, int lo, int hi, int *bf, double *bthr)
{
    size_t d = g->d;
    double wsum = 0, ysum = 0;
    for (int i = lo; i < hi; i++) {
        wsum += g->w[g->idx[i]];
        ysum += g->w[g->idx[i]] * g->y[g->idx[i]];
    }
    for (size_t j = 0; j < d; j++) g->feat[j] = (int)j;
    for (size_t j = d; j > 1; j--) {   /* random order: decides ties as scikit-learn's draws do */
        size_t r = (size_t)(rng_next(g->rng) % j);
        int tmp = g->feat[j - 1];
        g->feat[j - 1] = g->feat[r];
        g->feat[r] = tmp;
    }
    double best = -INFINITY;
    int found = 0;
    int minleaf = g->o->min_samples_leaf;
    for (size_t fj = 0; fj < d; fj++) {
        int f = g->feat[fj];
        for (int i = lo; i < hi; i++) g->key[g->idx[i]] = g->X[(size_t)g->idx[i] * d + (size_t)f];
        sort_key = g->key;
        qsort(g->idx + lo, (size_t)(hi - lo), sizeof *g->idx, cmp_by_key);
        if (g->key[g->idx[hi - 1]] <= g->key[g->idx[lo]] + FEATURE_THRESHOLD) continue;   /* constant here */
        double wl = 0, yl = 0;
        for (int p = lo + 1; p < hi; p++) {
            int s = g->idx[p - 1];
            wl += g->w[s];
            yl += g->w[s] * g->y[s];
            double xa = g->key[s], xb = g->key[g->idx[p]];
            if (xb <= xa + FEATURE_THRESHOLD) continue;
            if (p - lo < minleaf || hi - p < minleaf) continue;
            double wr = wsum - wl, yr = ysum - yl;
            if (wl <= 0 || wr <= 0) continue;
            double proxy = yl * yl / wl + yr * yr / wr;
            if (proxy > best) {
                best = proxy;
                *bf = f;
                double thr = xa / 2.0 + xb / 2.0;
                if (thr == xb || isinf(thr)) thr = xa;
                *bthr = thr;
                found = 1;
            }
        }
    }
    return found;
}

/* Grow the subtree of idx[lo, hi) at depth; RET its node index or -1 (OOM). */
static int grow(grower *g, int lo, int hi, int depth)
{
    int me = tree_push(g->t);
    if (me < 0) return -1;
    double wsum = 0, ysum = 0, yy = 0;
    for (int i = lo; i < hi; i++) {
        double wi = g->w[g->idx[i]], yi = g->y[g->idx[i]];
        wsum += wi;
        ysum += wi * yi;
        yy += wi * yi * yi;
    }
    double mean = ysum / wsum;
    g->t->n[me].value = mean;
    double impurity = yy / wsum - mean * mean;
    int n = hi - lo;
    if (depth >= g->o->max_depth || n < g->o->min_samples_split || n < 2 * g->o->min_samples_leaf ||
        impurity <= DBL_EPSILON)
        return me;
    int f = -1;
    double thr = 0;
    if (!best_split(g, lo, hi, &f, &thr)) return me;
    /* partition: x <= thr first */
    int m = lo;
    for (int i = lo; i < hi; i++) {
        int s = g->idx[i];
        if (g->X[(size_t)s * g->d + (size_t)f] <= thr) {
            g->idx[i] = g->idx[m];
            g->idx[m++] = s;
        }
    }
    if (m == lo || m == hi) return me;   /* cannot happen with a threshold between distinct values */
    int l = grow(g, lo, m, depth + 1);
    if (l < 0) return -1;
    int r = grow(g, m, hi, depth + 1);
    if (r < 0) return -1;
    g->t->n[me].feature = f;   /* g->t->n may have moved: index, never a pointer */
    g->t->n[me].thr = thr;
    g->t->n[me].left = l;
    g->t->n[me].right = r;
    return me;
}

/* ---------- fANOVA over one tree ---------- */

typedef struct fan {
    const tree   *t;
    size_t        d;
    const double *bounds;     /* (d, 2) */
    double       *sval, *sw;  /* per node: statistics (value, volume) */
    unsigned char *active;    /* (nodes, d): does the subtree split on column j? */
    double        variance;
} fan;

static void fan_stats(fan *F, int nd, double *lo, double *hi)
{
    const node *x = &F->t->n[nd];
    if (x->feature < 0) {
        double v = 1;
        for (size_t j = 0; j < F->d; j++) v *= hi[j] - lo[j];
        F->sval[nd] = x->value;
        F->sw[nd] = v;
        return;
    }
    int f = x->feature;
    double save = hi[f];
    hi[f] = x->thr;
    fan_stats(F, x->left, lo, hi);
    hi[f] = save;
    save = lo[f];
    lo[f] = x->thr;
    fan_stats(F, x->right, lo, hi);
    lo[f] = save;
    double wl = F->sw[x->left], wr = F->sw[x->right];
    F->sw[nd] = wl + wr;
    F->sval[nd] = wl + wr > 0 ? (F->sval[x->left] * wl + F->sval[x->right] * wr) / (wl + wr)
                              : (F->sval[x->left] + F->sval[x->right]) / 2;
}

static int fan_init(fan *F, const tree *t, size_t d, const double *bounds)
{
    memset(F, 0, sizeof *F);
    F->t = t;
    F->d = d;
    F->bounds = bounds;
    size_t nn = t->len;
    F->sval = malloc(nn * sizeof *F->sval);
    F->sw = malloc(nn * sizeof *F->sw);
    F->active = calloc(nn * d, 1);
    double *lo = malloc(d * sizeof *lo), *hi = malloc(d * sizeof *hi);
    int rc = HF_ENOMEM;
    if (!F->sval || !F->sw || !F->active || !lo || !hi) goto end;
    for (size_t j = 0; j < d; j++) {
        lo[j] = bounds[2 * j];
        hi[j] = bounds[2 * j + 1];
    }
    fan_stats(F, 0, lo, hi);
    for (size_t k = nn; k-- > 0;) {   /* children after parents (preorder) */
        const node *x = &t->n[k];
        if (x->feature < 0) continue;
        unsigned char *a = F->active + k * d;
        a[x->feature] = 1;
        for (size_t j = 0; j < d; j++) a[j] |= F->active[(size_t)x->left * d + j] | F->active[(size_t)x->right * d + j];
    }
    double ws = 0, vs = 0;
    for (size_t k = 0; k < nn; k++)
        if (t->n[k].feature < 0) {
            ws += F->sw[k];
            vs += F->sw[k] * F->sval[k];
        }
    double mean = ws > 0 ? vs / ws : 0, var = 0;
    for (size_t k = 0; k < nn; k++)
        if (t->n[k].feature < 0 && ws > 0) var += F->sw[k] * (F->sval[k] - mean) * (F->sval[k] - mean) / ws;
    F->variance = var;
    rc = 0;
end:
    free(lo);
    free(hi);
    return rc;
}

static void fan_free(fan *F)
{
    free(F->sval);
    free(F->sw);
    free(F->active);
}

/* The sorted distinct thresholds this tree uses on column j. */
static size_t split_values(const tree *t, int j, double *out)
{
    size_t n = 0;
    for (size_t k = 0; k < t->len; k++)
        if (t->n[k].feature == j) out[n++] = t->n[k].thr;
    for (size_t a = 1; a < n; a++) {   /* insertion sort: a tree has few splits per column */
        double v = out[a];
        size_t b = a;
        while (b > 0 && out[b - 1] > v) { out[b] = out[b - 1]; b--; }
        out[b] = v;
    }
    size_t u = 0;
    for (size_t a = 0; a < n; a++)
        if (u == 0 || out[a] != out[u - 1]) out[u++] = out[a];
    return u;
}

/* Scratch for the marginal walks of one tree and one group of columns. */
typedef struct walk {
    int    *stack;        /* node per entry */
    double *rng;          /* (entries, m, 2): the active columns' ranges */
} walk;

/* Prediction with columns cols[0..m) fixed at v[], marginalized over the
 * rest: (*value, *weight) as Optuna's _get_marginalized_statistics. */
static void marginal_at(const fan *F, walk *W, const int *cols, size_t m, const double *v, double *value,
                        double *weight)
{
    const tree *t = F->t;
    size_t sp = 0;
    W->stack[0] = 0;
    for (size_t c = 0; c < m; c++) {
        W->rng[2 * c] = F->bounds[2 * cols[c]];
        W->rng[2 * c + 1] = F->bounds[2 * cols[c] + 1];
    }
    sp = 1;
    double vs = 0, ws = 0;
    while (sp > 0) {
        sp--;
        int nd = W->stack[sp];
        double *r = W->rng + sp * 2 * m;
        const node *x = &t->n[nd];
        if (x->feature >= 0) {
            size_t c = 0;
            while (c < m && cols[c] != x->feature) c++;
            if (c < m) {   /* splits on a fixed column: follow the side v is on */
                int left = v[c] <= x->thr;
                W->stack[sp] = left ? x->left : x->right;
                r[2 * c + (left ? 1 : 0)] = x->thr;
                sp++;
                continue;
            }
            int any = 0;
            for (size_t k = 0; k < m && !any; k++) any = F->active[(size_t)nd * F->d + (size_t)cols[k]];
            if (any) {   /* both children, same ranges */
                memcpy(W->rng + (sp + 1) * 2 * m, r, 2 * m * sizeof *r);
                W->stack[sp] = x->left;
                W->stack[sp + 1] = x->right;
                sp += 2;
                continue;
            }
        }
        double card = 1;
        for (size_t c = 0; c < m; c++) card *= r[2 * c + 1] - r[2 * c];
        double w = F->sw[nd] * card;
        vs += F->sval[nd] * w;
        ws += w;
    }
    *value = ws > 0 ? vs / ws : 0;
    *weight = ws;
}

/* Marginal variance of the group cols[0..m) in this tree. */
static int marginal_variance(const fan *F, const int *cols, size_t m, double *out)
{
    int rc = HF_ENOMEM;
    size_t nn = F->t->len;
    double **mid = calloc(m, sizeof *mid), **size = calloc(m, sizeof *size);
    size_t *cnt = calloc(m, sizeof *cnt), *pos = calloc(m, sizeof *pos);
    double *v = calloc(m, sizeof *v), *sv = malloc((nn + 2) * sizeof *sv);
    walk W = {malloc((nn + 2) * sizeof(int)), malloc((nn + 2) * 2 * m * sizeof(double))};
    double *vals = NULL, *wts = NULL;
    if (!mid || !size || !cnt || !pos || !v || !sv || !W.stack || !W.rng) goto end;
    size_t combos = 1;
    for (size_t c = 0; c < m; c++) {
        size_t k = split_values(F->t, cols[c], sv);
        double lo = F->bounds[2 * cols[c]], hi = F->bounds[2 * cols[c] + 1];
        mid[c] = malloc((k + 1) * sizeof **mid);
        size[c] = malloc((k + 1) * sizeof **size);
        if (!mid[c] || !size[c]) goto end;
        for (size_t a = 0; a <= k; a++) {
            double x0 = a == 0 ? lo : sv[a - 1], x1 = a == k ? hi : sv[a];
            mid[c][a] = 0.5 * (x0 + x1);
            size[c][a] = x1 - x0;
        }
        cnt[c] = k + 1;
        combos *= cnt[c];
    }
    vals = malloc(combos * sizeof *vals);
    wts = malloc(combos * sizeof *wts);
    if (!vals || !wts) goto end;
    for (size_t q = 0; q < combos; q++) {
        double sz = 1;
        for (size_t c = 0; c < m; c++) {
            v[c] = mid[c][pos[c]];
            sz *= size[c][pos[c]];
        }
        marginal_at(F, &W, cols, m, v, &vals[q], &wts[q]);
        wts[q] *= sz;
        for (size_t c = 0; c < m && ++pos[c] == cnt[c]; c++) pos[c] = 0;   /* odometer */
    }
    double ws = 0, vs = 0;
    for (size_t q = 0; q < combos; q++) {
        ws += wts[q];
        vs += wts[q] * vals[q];
    }
    double mean = ws > 0 ? vs / ws : 0, var = 0;
    for (size_t q = 0; q < combos && ws > 0; q++) var += wts[q] * (vals[q] - mean) * (vals[q] - mean) / ws;
    *out = var > 0 ? var : 0;
    rc = 0;
end:
    for (size_t c = 0; mid && size && c < m; c++) {
        free(mid[c]);
        free(size[c]);
    }
    free(mid);
    free(size);
    free(cnt);
    free(pos);
    free(v);
    free(sv);
    free(W.stack);
    free(W.rng);
    free(vals);
    free(wts);
    return rc;
}

int imp_fanova(const double *X, const double *y, size_t n, size_t d, const double *bounds, const int *group,
               size_t ngroups, const imp_opts *o, double *imp)
{
    imp_opts def;
    if (!o) {
        imp_opts_default(&def);
        o = &def;
    }
    if (n == 0 || d == 0 || ngroups == 0) return HF_EINVAL;
    for (size_t j = 0; j < d; j++)
        if (group[j] < 0 || (size_t)group[j] >= ngroups) return HF_EINVAL;
    for (size_t g = 0; g < ngroups; g++) imp[g] = 0;
    if (n < 2) return 0;
    int rc = HF_ENOMEM;
    uint64_t rng = o->seed ^ 0x5851F42D4C957F2DULL;
    grower G = {.X = X, .y = y, .d = d, .o = o, .rng = &rng};
    tree t = {0};
    G.t = &t;
    G.idx = malloc(n * sizeof *G.idx);
    G.w = malloc(n * sizeof *G.w);
    G.feat = malloc(d * sizeof *G.feat);
    G.key = malloc(n * sizeof *G.key);
    double *sum = calloc(ngroups, sizeof *sum);
    int *cols = malloc(d * sizeof *cols);
    int used = 0;
    if (!G.idx || !G.w || !G.feat || !G.key || !sum || !cols) goto end;
    for (int k = 0; k < o->n_trees; k++) {
        for (size_t i = 0; i < n; i++) G.w[i] = 0;
        for (size_t i = 0; i < n; i++) G.w[rng_next(&rng) % n] += 1;
        int m = 0;
        for (size_t i = 0; i < n; i++)
            if (G.w[i] > 0) G.idx[m++] = (int)i;
        t.len = 0;
        if (grow(&G, 0, m, 0) < 0) goto end;
        fan F;
        if (fan_init(&F, &t, d, bounds)) { fan_free(&F); goto end; }
        if (F.variance > 0) {
            used++;
            for (size_t g = 0; g < ngroups; g++) {
                size_t mc = 0;
                for (size_t j = 0; j < d; j++)
                    if ((size_t)group[j] == g) cols[mc++] = (int)j;
                double mv = 0;
                if (mc && marginal_variance(&F, cols, mc, &mv)) { fan_free(&F); goto end; }
                sum[g] += mv / F.variance;
            }
        }
        fan_free(&F);
    }
    double total = 0;
    for (size_t g = 0; g < ngroups; g++) total += used ? sum[g] / used : 0;
    for (size_t g = 0; g < ngroups; g++) imp[g] = total > 0 ? sum[g] / used / total : 0;
    rc = 0;
end:
    free(t.n);
    free(G.idx);
    free(G.w);
    free(G.feat);
    free(G.key);
    free(sum);
    free(cols);
    return rc;
}

/* ---------- experiments: encoding the trials ---------- */

/* The value t is ranked by (importance_compute_of), NULL when it has none. */
static const json_t *trial_value(const json_t *t, const char *metric)
{
    const json_t *v = metric ? json_object_get(json_object_get(t, "latest"), metric) : json_object_get(t, "objective");
    return json_is_number(v) && isfinite(json_number_value(v)) ? v : NULL;
}

static int trial_used(const json_t *t, const char *metric)
{
    const char *st = json_string_value(json_object_get(t, "state"));
    return st && strcmp(st, "COMPLETED") == 0 && trial_value(t, metric) &&
           json_is_object(json_object_get(t, "hparams"));
}

uint64_t importance_signature_of(const json_t *trials, const char *metric)
{
    uint64_t h = 1469598103934665603ULL;
    size_t i;
    const json_t *t;
    json_array_foreach(trials, i, t) {
        if (!trial_used(t, metric)) continue;
        double ob = json_number_value(trial_value(t, metric));
        uint64_t bits;
        memcpy(&bits, &ob, sizeof bits);
        uint64_t id = (uint64_t)json_integer_value(json_object_get(t, "id"));
        h = (h ^ id) * 1099511628211ULL;
        h = (h ^ bits) * 1099511628211ULL;
    }
    return h;
}

uint64_t importance_signature(const json_t *trials)
{
    return importance_signature_of(trials, NULL);
}

/* The column a value of parameter p takes: numbers as they are, a
 * categorical value's index; RET 0 or -1 when v does not fit p. */
static int encode(const space_param *p, const json_t *v, double *num, size_t *cat)
{
    if (p->kind == SPACE_CATEGORICAL) {
        for (size_t k = 0; k < json_array_size(p->values); k++)
            if (json_equal(json_array_get(p->values, k), (json_t *)v)) {
                *cat = k;
                return 0;
            }
        return -1;
    }
    if (!json_is_number(v)) return -1;
    *num = json_number_value(v);
    return isfinite(*num) ? 0 : -1;
}

static int param_varies(const space_param *p)
{
    if (p->kind == SPACE_CONST) return 0;
    if (p->kind == SPACE_CATEGORICAL) return json_array_size(p->values) > 1;
    return p->max > p->min;
}

int importance_compute(const json_t *hparams, const json_t *trials, const imp_opts *o, json_t **out,
                       uint64_t *sig, hf_jerr *e)
{
    return importance_compute_of(hparams, trials, NULL, o, out, sig, e);
}

/* Which parameters enter the forest: those that vary and that every used
 * trial has with a value fitting the space (keep[j]); *d columns (one per
 * categorical value, one per number) in *ng groups. */
static void select_params(const search_space *sp, const json_t *const *rows, size_t nt, int *keep, size_t *d,
                          size_t *ng)
{
    *d = *ng = 0;
    for (size_t j = 0; j < sp->n; j++) {
        const space_param *p = &sp->p[j];
        keep[j] = param_varies(p);
        for (size_t r = 0; r < nt && keep[j]; r++) {
            double num;
            size_t cat;
            keep[j] = encode(p, json_object_get(json_object_get(rows[r], "hparams"), p->name), &num, &cat) == 0;
        }
        if (!keep[j]) continue;
        (*ng)++;
        *d += p->kind == SPACE_CATEGORICAL ? json_array_size(p->values) : 1;
    }
}

/* The design matrix X (nt, d) with one-hot categoricals, each column's
 * bounds (2 per column) and group (its parameter's index among the kept). */
static void fill_matrix(const search_space *sp, const json_t *const *rows, size_t nt, const int *keep, size_t d,
                        double *X, double *bounds, int *group)
{
    size_t col = 0, g = 0;
    for (size_t j = 0; j < sp->n; j++) {
        if (!keep[j]) continue;
        const space_param *p = &sp->p[j];
        size_t width = p->kind == SPACE_CATEGORICAL ? json_array_size(p->values) : 1;
        for (size_t c = 0; c < width; c++) {
            bounds[2 * (col + c)] = p->kind == SPACE_CATEGORICAL ? 0 : p->min;
            bounds[2 * (col + c) + 1] = p->kind == SPACE_CATEGORICAL ? 1 : p->max;
            group[col + c] = (int)g;
        }
        for (size_t r = 0; r < nt; r++) {
            double num = 0;
            size_t cat = 0;
            encode(p, json_object_get(json_object_get(rows[r], "hparams"), p->name), &num, &cat);
            if (p->kind == SPACE_CATEGORICAL) {
                X[r * d + col + cat] = 1;
            } else {   /* a value outside the (since narrowed) range widens the box */
                X[r * d + col] = num;
                if (num < bounds[2 * col]) bounds[2 * col] = num;
                if (num > bounds[2 * col + 1]) bounds[2 * col + 1] = num;
            }
        }
        col += width;
        g++;
    }
}

/* The kept parameters' importances imp[ng] into res and names, largest
 * first (imp is consumed: each emitted entry is set to -1). */
static void emit_ranked(const search_space *sp, const int *keep, size_t ng, double *imp, json_t *res, json_t *names)
{
    for (size_t k = 0; k < ng; k++) {
        size_t best = ng;
        size_t gg = 0;
        for (size_t j = 0; j < sp->n; j++) {
            if (!keep[j]) continue;
            if (imp[gg] >= 0 && (best == ng || imp[gg] > imp[best])) best = gg;
            gg++;
        }
        gg = 0;
        for (size_t j = 0; j < sp->n; j++) {
            if (!keep[j]) continue;
            if (gg == best) {
                json_object_set_new(res, sp->p[j].name, json_real(imp[gg]));
                json_array_append_new(names, json_string(sp->p[j].name));
            }
            gg++;
        }
        imp[best] = -1;
    }
}

int importance_compute_of(const json_t *hparams, const json_t *trials, const char *metric, const imp_opts *o,
                          json_t **out, uint64_t *sig, hf_jerr *e)
{
    int rc;
    search_space *sp = NULL;
    const json_t **rows = NULL;
    int *keep = NULL, *group = NULL;
    double *X = NULL, *y = NULL, *bounds = NULL, *imp = NULL;
    *out = NULL;
    *sig = importance_signature_of(trials, metric);
    rc = search_space_parse(hparams, &sp, e);
    if (rc) goto end;
    size_t nt = 0, i;
    const json_t *t;
    rows = malloc((json_array_size(trials) + 1) * sizeof *rows);
    keep = calloc(sp->n + 1, sizeof *keep);
    rc = HF_ENOMEM;
    if (!rows || !keep) goto end;
    json_array_foreach(trials, i, t)
        if (trial_used(t, metric)) rows[nt++] = t;
    if (nt > IMP_MAX_TRIALS) {   /* the newest */
        memmove(rows, rows + (nt - IMP_MAX_TRIALS), IMP_MAX_TRIALS * sizeof *rows);
        nt = IMP_MAX_TRIALS;
    }
    size_t d, ng;
    select_params(sp, rows, nt, keep, &d, &ng);
    json_t *res = json_object();
    json_t *names = json_array();
    if (!res || !names) { json_decref(res); json_decref(names); goto end; }
    *out = json_pack("{soso sI}", "importance", res, "params", names, "trials", (json_int_t)nt);
    if (!*out || ng == 0 || nt < 2) { rc = *out ? 0 : HF_ENOMEM; goto end; }
    X = calloc(nt * d, sizeof *X);
    y = malloc(nt * sizeof *y);
    bounds = malloc(2 * d * sizeof *bounds);
    group = malloc(d * sizeof *group);
    imp = calloc(ng, sizeof *imp);
    if (!X || !y || !bounds || !group || !imp) goto end;
    fill_matrix(sp, rows, nt, keep, d, X, bounds, group);
    for (size_t r = 0; r < nt; r++) y[r] = json_number_value(trial_value(rows[r], metric));
    rc = imp_fanova(X, y, nt, d, bounds, group, ng, o, imp);
    if (rc) goto end;
    emit_ranked(sp, keep, ng, imp, res, names);
    rc = 0;
end:
    if (rc) {
        json_decref(*out);
        *out = NULL;
    }
    search_space_free(sp);
    free(rows);
    free(keep);
    free(group);
    free(X);
    free(y);
    free(bounds);
    free(imp);
    return rc;
}

/* ---------- the cache ---------- */

typedef struct slot {
    int64_t  exp_id;
    char     metric[HF_METRIC_NAME_MAX + 1];   /* "": the trials' "objective" */
    uint64_t sig;
    uint64_t used;      /* LRU clock */
    json_t  *v;
} slot;

struct importance_cache {
    pthread_mutex_t mu;
    slot            s[CACHE_SLOTS];
    uint64_t        clock;
};

importance_cache *importance_cache_new(void)
{
    importance_cache *c = calloc(1, sizeof *c);
    if (c) pthread_mutex_init(&c->mu, NULL);
    return c;
}

void importance_cache_free(importance_cache *c)
{
    if (!c) return;
    for (int i = 0; i < CACHE_SLOTS; i++) json_decref(c->s[i].v);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Does slot s hold an answer for (exp_id, key)? */
static int slot_is(const slot *s, int64_t exp_id, const char *key)
{
    return s->v && s->exp_id == exp_id && strcmp(s->metric, key) == 0;
}

int importance_cache_get(importance_cache *c, int64_t exp_id, const char *metric, const json_t *hparams,
                         const json_t *trials, json_t **out, hf_jerr *e)
{
    const char *key = metric ? metric : "";
    *out = NULL;
    if (strlen(key) > HF_METRIC_NAME_MAX) return hf_jerr_set(e, "", "objective", "longer than %d bytes",
                                                             HF_METRIC_NAME_MAX);
    uint64_t sig = importance_signature_of(trials, metric);
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < CACHE_SLOTS; i++)
        if (slot_is(&c->s[i], exp_id, key) && c->s[i].sig == sig) {
            c->s[i].used = ++c->clock;
            *out = json_deep_copy(c->s[i].v);
        }
    pthread_mutex_unlock(&c->mu);
    if (*out) {
        json_object_set_new(*out, "cached", json_true());
        return 0;
    }
    imp_opts o;
    imp_opts_default(&o);
    json_t *v = NULL;
    int rc = importance_compute_of(hparams, trials, metric, &o, &v, &sig, e);
    if (rc) return rc;
    pthread_mutex_lock(&c->mu);
    int victim = 0;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        if (slot_is(&c->s[i], exp_id, key)) { victim = i; break; }   /* replace the stale answer */
        if (!c->s[i].v || c->s[i].used < c->s[victim].used) victim = i;
    }
    json_decref(c->s[victim].v);
    c->s[victim] = (slot){.exp_id = exp_id, .sig = sig, .used = ++c->clock, .v = json_deep_copy(v)};
    snprintf(c->s[victim].metric, sizeof c->s[victim].metric, "%s", key);
    pthread_mutex_unlock(&c->mu);
    json_object_set_new(v, "cached", json_false());
    *out = v;
    return 0;
}
