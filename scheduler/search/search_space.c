/*
 * search_space.c — the "hyperparameters" object: parsing with field-path
 * errors, priors, the unit-cube encoding, the grid, and the RNG helpers
 * every searcher shares (see search_space.h for the kinds).
 *
 * Invariants after a successful parse:
 *   - p[] is topologically ordered (a conditional parameter comes after its
 *     parent), and otherwise in the order the keys appear in the file, so
 *     sampling in index order is deterministic and sees parents first;
 *   - a parent is CATEGORICAL or CONST; every cond_values item is one of
 *     the parent's values, so a condition can be satisfied;
 *   - each parameter has at most one parent: the conditions form a forest,
 *     which is what makes the grid enumeration below a simple recursion.
 *
 * Workload: an experiment has a handful to a few dozen parameters; the
 * searchers call the sampling and encoding functions a few thousand times
 * per decision at most. Nothing here is on a hot path.
 */
#include "search_space.h"
#include "hf_err.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPACE_MAX_PARAMS      256
#define SPACE_MAX_NAME        64
#define SPACE_MAX_VALUES      1024
#define SPACE_MAX_TOTAL_VALUES 4096  /* all categorical + condition values: bounds grid work */
#define SPACE_MAX_GRID_COUNT  10000
#define SPACE_DEFAULT_COUNT   5      /* grid points on a numeric axis without "count" */
#define SPACE_PATH            "hyperparameters"

/* ---------------------------------------------------------------- RNG */

/* splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, full period,
 * good enough statistically for sampling and trivially reproducible. */
uint64_t search_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double search_rng_uniform(uint64_t *state)
{
    return (double)(search_rng_next(state) >> 11) * 0x1.0p-53;
}

/* Box-Muller without a cached second value: the state is one word, and a
 * cache would make the stream depend on call history outside the state. */
double search_rng_normal(uint64_t *state)
{
    double u1 = search_rng_uniform(state);
    double u2 = search_rng_uniform(state);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t search_rng_derive(uint64_t seed, uint64_t n)
{
    uint64_t s = seed ^ 0x6A09E667F3BCC909ULL;
    uint64_t a = search_rng_next(&s);
    uint64_t t = n ^ a;
    uint64_t b = search_rng_next(&t);
    return a ^ b;
}

/* ---------------------------------------------------------------- parse */

static const char *kind_name(int kind)
{
    switch (kind) {
    case SPACE_UNIFORM: return "uniform";
    case SPACE_LOG: return "log";
    case SPACE_INT: return "int";
    case SPACE_CATEGORICAL: return "categorical";
    default: return "const";
    }
}

static int kind_parse(const char *s, int *kind)
{
    static const struct { const char *name; int kind; } table[] = {
        {"uniform", SPACE_UNIFORM}, {"double", SPACE_UNIFORM}, {"float", SPACE_UNIFORM},
        {"log", SPACE_LOG}, {"loguniform", SPACE_LOG}, {"log_uniform", SPACE_LOG},
        {"int", SPACE_INT}, {"integer", SPACE_INT},
        {"categorical", SPACE_CATEGORICAL}, {"choice", SPACE_CATEGORICAL},
        {"const", SPACE_CONST}, {"constant", SPACE_CONST},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(s, table[i].name) == 0) { *kind = table[i].kind; return 0; }
    return -1;
}

static int value_is_scalar(const json_t *v)
{
    return json_is_string(v) || json_is_number(v) || json_is_boolean(v);
}

static int values_contain(const json_t *arr, const json_t *v)
{
    size_t i; json_t *x;
    json_array_foreach(arr, i, x)
        if (json_equal(x, v)) return 1;
    return 0;
}

static void param_clear(space_param *p)
{
    free(p->name);
    json_decref(p->values);
    json_decref(p->cond_values);
    memset(p, 0, sizeof *p);
}

void search_space_free(search_space *sp)
{
    if (!sp) return;
    for (size_t i = 0; i < sp->n; i++) param_clear(&sp->p[i]);
    free(sp->p);
    free(sp);
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SPACE_MAX_NAME) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

/* min and max of a uniform, log or int parameter at path into p. */
static int param_parse_range(const json_t *v, const char *path, space_param *p, hf_jerr *e)
{
    int rc;
    if (p->kind != SPACE_INT) {
        double lo = 0, hi = 0, lim = 1e300;
        if ((rc = hf_json_get_number(v, path, "min", 1, -lim, lim, &lo, e))) return rc;
        if ((rc = hf_json_get_number(v, path, "max", 1, -lim, lim, &hi, e))) return rc;
        if (p->kind == SPACE_LOG && lo <= 0)
            return hf_jerr_set(e, path, "min", "must be > 0 for a log-scale parameter, got %g", lo);
        if (!(lo < hi))
            return hf_jerr_set(e, path, "max", "must be greater than min (%g), got %g", lo, hi);
        p->min = lo; p->max = hi;
        return 0;
    }
    int64_t lo = 0, hi = 0, lim = (int64_t)1 << 52;
    int lg = 0;
    if ((rc = hf_json_get_int(v, path, "min", 1, -lim, lim, &lo, e))) return rc;
    if ((rc = hf_json_get_int(v, path, "max", 1, -lim, lim, &hi, e))) return rc;
    if ((rc = hf_json_get_bool(v, path, "log", 0, &lg, e))) return rc;
    if (lo > hi)
        return hf_jerr_set(e, path, "max", "must be >= min (%lld), got %lld", (long long)lo, (long long)hi);
    if (lg && lo < 1)
        return hf_jerr_set(e, path, "min", "must be >= 1 for a log-scale integer, got %lld", (long long)lo);
    p->min = (double)lo; p->max = (double)hi; p->int_log = lg;
    return 0;
}

/* The values of a categorical parameter at path: scalars, no duplicates. */
static int param_parse_values(const json_t *v, const char *path, space_param *p, hf_jerr *e)
{
    json_t *arr = NULL;
    char ip[320];
    int rc;
    if ((rc = hf_json_get_array(v, path, "values", 1, SPACE_MAX_VALUES, &arr, e))) return rc;
    if (json_array_size(arr) == 0) return hf_jerr_set(e, path, "values", "must not be empty");
    size_t i; json_t *x;
    hf_jpath(ip, sizeof ip, path, "values");
    json_array_foreach(arr, i, x) {
        char ep[352];
        hf_jpath_index(ep, sizeof ep, ip, i);
        if (!value_is_scalar(x))
            return hf_jerr_set(e, ep, NULL, "must be a string, number or boolean");
        for (size_t j = 0; j < i; j++)
            if (json_equal(json_array_get(arr, j), x))
                return hf_jerr_set(e, ep, NULL, "duplicate of values[%zu]", j);
    }
    p->values = json_deep_copy(arr);
    return p->values ? 0 : HF_ENOMEM;
}

/* The optional "condition" {param, values} of the parameter at path: the
 * parent's name in *cond_name (points into v), the values into p. */
static int param_parse_condition(const json_t *v, const char *path, space_param *p, const char **cond_name,
                                 hf_jerr *e)
{
    static const char *const k_cond[] = {"param", "values", NULL};
    json_t *cond = NULL, *cv = NULL;
    char cp[320], vp[352];
    int rc;
    if ((rc = hf_json_get_object(v, path, "condition", 0, &cond, e)) || !cond) return rc;
    hf_jpath(cp, sizeof cp, path, "condition");
    if ((rc = hf_json_only_keys(cond, cp, k_cond, e))) return rc;
    if ((rc = hf_json_get_string(cond, cp, "param", 1, SPACE_MAX_NAME, cond_name, e))) return rc;
    if ((rc = hf_json_get_array(cond, cp, "values", 1, SPACE_MAX_VALUES, &cv, e))) return rc;
    if (json_array_size(cv) == 0) return hf_jerr_set(e, cp, "values", "must not be empty");
    hf_jpath(vp, sizeof vp, cp, "values");
    size_t i; json_t *x;
    json_array_foreach(cv, i, x) {
        if (!value_is_scalar(x)) {
            char ep[384];
            hf_jpath_index(ep, sizeof ep, vp, i);
            return hf_jerr_set(e, ep, NULL, "must be a string, number or boolean");
        }
    }
    p->cond_values = json_deep_copy(cv);
    return p->cond_values ? 0 : HF_ENOMEM;
}

/* Parse one parameter spec at path (e.g. "hyperparameters.lr") into p.
 * The condition's parent name is returned in *cond_name (points into v);
 * resolving it needs every parameter, so the caller does it. */
static int param_parse(const json_t *v, const char *path, space_param *p,
                       const char **cond_name, hf_jerr *e)
{
    int rc;
    *cond_name = NULL;
    p->cond_parent = -1;
    if (!json_is_object(v)) {
        if (json_is_null(v))
            return hf_jerr_set(e, path, NULL, "null is not a parameter: give a value or a {\"type\": ...} object");
        p->kind = SPACE_CONST;
        p->values = json_deep_copy(v);
        return p->values ? 0 : HF_ENOMEM;
    }
    const char *type = NULL;
    if ((rc = hf_json_get_string(v, path, "type", 1, 32, &type, e))) return rc;
    if (kind_parse(type, &p->kind))
        return hf_jerr_set(e, path, "type", "unknown type \"%s\": one of uniform, log, int, categorical, const", type);

    static const char *const k_num[] = {"type", "min", "max", "count", "condition", NULL};
    static const char *const k_int[] = {"type", "min", "max", "log", "count", "condition", NULL};
    static const char *const k_cat[] = {"type", "values", "condition", NULL};
    static const char *const k_const[] = {"type", "value", "condition", NULL};
    const char *const *allowed = p->kind == SPACE_INT ? k_int
                               : p->kind == SPACE_CATEGORICAL ? k_cat
                               : p->kind == SPACE_CONST ? k_const : k_num;
    if ((rc = hf_json_only_keys(v, path, allowed, e))) return rc;

    if (p->kind == SPACE_UNIFORM || p->kind == SPACE_LOG || p->kind == SPACE_INT) {
        if ((rc = param_parse_range(v, path, p, e))) return rc;
    } else if (p->kind == SPACE_CATEGORICAL) {
        if ((rc = param_parse_values(v, path, p, e))) return rc;
    } else {
        json_t *x = json_object_get(v, "value");
        if (!x) return hf_jerr_set(e, path, "value", "required field is missing");
        p->values = json_deep_copy(x);
        if (!p->values) return HF_ENOMEM;
    }

    if (json_object_get(v, "count")) {
        int64_t c = 0;
        if ((rc = hf_json_get_int(v, path, "count", 1, 1, SPACE_MAX_GRID_COUNT, &c, e))) return rc;
        p->grid_count = (int)c;
    }
    return param_parse_condition(v, path, p, cond_name, e);
}

static int index_of(const space_param *p, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(p[i].name, name) == 0) return (int)i;
    return -1;
}

/* Pass 1: each parameter of obj on its own, in file order, into tmp[] and
 * cond_names[] (n entries, zeroed); then the bound on all values. */
static int space_parse_params(const json_t *obj, space_param *tmp, const char **cond_names, size_t n, hf_jerr *e)
{
    const char *key; json_t *val;
    size_t k = 0;
    int rc;
    json_object_foreach((json_t *)obj, key, val) {
        char path[320];
        hf_jpath(path, sizeof path, SPACE_PATH, key);
        if (!name_ok(key))
            return hf_jerr_set(e, path, NULL, "parameter names are 1-%d characters of A-Z a-z 0-9 _ - .",
                               SPACE_MAX_NAME);
        tmp[k].name = strdup(key);
        if (!tmp[k].name) return HF_ENOMEM;
        rc = param_parse(val, path, &tmp[k], &cond_names[k], e);
        k++;
        if (rc) return rc;
    }
    size_t total_values = 0;
    for (size_t i = 0; i < n; i++)
        total_values += json_array_size(tmp[i].kind == SPACE_CATEGORICAL ? tmp[i].values : NULL) +
                        json_array_size(tmp[i].cond_values);
    if (total_values > SPACE_MAX_TOTAL_VALUES)
        return hf_jerr_set(e, SPACE_PATH, NULL, "lists %zu categorical and condition values in all, at most %d allowed",
                           total_values, SPACE_MAX_TOTAL_VALUES);
    return 0;
}

/* Pass 2: resolve parameter i's condition to a parent index in tmp and
 * check it (an existing categorical or const parameter, not i, whose
 * values include every condition value). */
static int space_resolve_condition(space_param *tmp, size_t n, size_t i, const char *cond_name, hf_jerr *e)
{
    char pp[320], path[352];
    hf_jpath(pp, sizeof pp, SPACE_PATH, tmp[i].name);
    hf_jpath(path, sizeof path, pp, "condition");
    int j = index_of(tmp, n, cond_name);
    if (j < 0) return hf_jerr_set(e, path, "param", "no parameter named \"%s\"", cond_name);
    if ((size_t)j == i) return hf_jerr_set(e, path, "param", "a parameter cannot depend on itself");
    if (tmp[j].kind != SPACE_CATEGORICAL && tmp[j].kind != SPACE_CONST)
        return hf_jerr_set(e, path, "param", "\"%s\" is %s; a condition's parent must be categorical or const",
                           cond_name, kind_name(tmp[j].kind));
    size_t q; json_t *x;
    json_array_foreach(tmp[i].cond_values, q, x) {
        int ok = tmp[j].kind == SPACE_CATEGORICAL ? values_contain(tmp[j].values, x) : json_equal(tmp[j].values, x);
        if (!ok) {
            char vp[384], ep[416];
            hf_jpath(vp, sizeof vp, path, "values");
            hf_jpath_index(ep, sizeof ep, vp, q);
            return hf_jerr_set(e, ep, NULL, "is not one of the values of \"%s\"", cond_name);
        }
    }
    tmp[i].cond_parent = j;   /* index into tmp for now */
    return 0;
}

/* Pass 3: move tmp[0..n) into sp->p in topological order, stable in file
 * order (a parameter is placed once its parent is; if a full sweep places
 * nothing, the rest lie on a cycle: an error, and they are moved anyway so
 * one free releases everything). tmp is left zeroed. RET 0 or HF_E*. */
static int space_order(search_space *sp, space_param *tmp, size_t n, hf_jerr *e)
{
    int *placed = calloc(n ? n : 1, sizeof *placed), *newidx = calloc(n ? n : 1, sizeof *newidx);
    size_t done = 0;
    int rc = 0;
    if (!placed || !newidx) { rc = HF_ENOMEM; goto end; }
    while (done < n) {
        size_t before = done;
        for (size_t i = 0; i < n; i++) {
            int par = tmp[i].cond_parent;
            if (placed[i] || (par >= 0 && !placed[par])) continue;
            placed[i] = 1;
            newidx[i] = (int)done;
            sp->p[done] = tmp[i];
            sp->p[done].cond_parent = par >= 0 ? newidx[par] : -1;
            done++;
        }
        if (done > before) continue;
        for (size_t i = 0; i < n && !rc; i++) {
            if (placed[i]) continue;
            char pp[320], path[352];
            hf_jpath(pp, sizeof pp, SPACE_PATH, tmp[i].name);
            hf_jpath(path, sizeof path, pp, "condition");
            rc = hf_jerr_set(e, path, "param", "conditions form a cycle through \"%s\"", tmp[i].name);
        }
        for (size_t i = 0; i < n; i++)
            if (!placed[i]) { sp->p[done++] = tmp[i]; placed[i] = 1; }
    }
    sp->n = done;
    memset(tmp, 0, n * sizeof *tmp);   /* ownership moved to sp->p */
end:
    free(placed);
    free(newidx);
    return rc;
}

int search_space_parse(const json_t *obj, search_space **out, hf_jerr *e)
{
    int rc = 0;
    size_t n = 0;
    space_param *tmp = NULL;
    search_space *sp = NULL;
    const char **cond_names = NULL;

    *out = NULL;
    if (!json_is_object(obj)) {
        rc = hf_jerr_set(e, SPACE_PATH, NULL, "must be an object of parameter specs");
        goto end;
    }
    n = json_object_size(obj);
    if (n > SPACE_MAX_PARAMS) {
        rc = hf_jerr_set(e, SPACE_PATH, NULL, "has %zu parameters, at most %d allowed", n, SPACE_MAX_PARAMS);
        goto end;
    }
    tmp = calloc(n ? n : 1, sizeof *tmp);
    cond_names = calloc(n ? n : 1, sizeof *cond_names);
    sp = calloc(1, sizeof *sp);
    if (!tmp || !cond_names || !sp || !(sp->p = calloc(n ? n : 1, sizeof *sp->p))) { rc = HF_ENOMEM; goto end; }
    if ((rc = space_parse_params(obj, tmp, cond_names, n, e))) goto end;
    for (size_t i = 0; i < n; i++)
        if (cond_names[i] && (rc = space_resolve_condition(tmp, n, i, cond_names[i], e))) goto end;
    if ((rc = space_order(sp, tmp, n, e))) goto end;
    *out = sp;
    sp = NULL;
end:
    if (tmp) for (size_t i = 0; i < n; i++) param_clear(&tmp[i]);
    free(tmp);
    free(cond_names);
    search_space_free(sp);
    return rc;
}

int search_space_find(const search_space *sp, const char *name)
{
    for (size_t i = 0; i < sp->n; i++)
        if (strcmp(sp->p[i].name, name) == 0) return (int)i;
    return -1;
}

/* ---------------------------------------------------------------- sampling */

int search_space_active(const search_space *sp, size_t i, const json_t *hp)
{
    const space_param *p = &sp->p[i];
    if (p->cond_parent < 0) return 1;
    const json_t *pv = json_object_get(hp, sp->p[p->cond_parent].name);
    if (!pv) return 0;
    return values_contain(p->cond_values, pv);
}

/* Integer axis as a continuous interval [lo, hi) on the sampling scale
 * (log or linear), so that each integer gets the mass it should. */
static void int_bounds(const space_param *p, double *lo, double *hi)
{
    if (p->int_log) { *lo = log(p->min - 0.5); *hi = log(p->max + 0.5); }
    else { *lo = p->min - 0.5; *hi = p->max + 0.5; }
}

/* Integer v's position on the sampling scale (what to_unit maps). */
static double int_pos(const space_param *p, double v) { return p->int_log ? log(v) : v; }

static json_t *int_value(const space_param *p, double x)
{
    double v = p->int_log ? exp(x) : x;
    v = floor(v + 0.5);
    if (v < p->min) v = p->min;
    if (v > p->max) v = p->max;
    /* x that is, up to rounding, exactly an integer's position (a value
     * that went through to_unit) gives that integer back: exp() of a
     * logarithm near 34 is off by one unit for integers near 1e15. Only
     * such x move (a few ulps), so sampling keeps its partition. */
    double tol = 8 * DBL_EPSILON * (fabs(x) > 1 ? fabs(x) : 1), best = fabs(int_pos(p, v) - x);
    for (int d = -1; d <= 1; d += 2) {
        double c = v + d;
        if (c < p->min || c > p->max) continue;
        double dist = fabs(int_pos(p, c) - x);
        if (dist <= tol && dist < best) { v = c; best = dist; }
    }
    return json_integer((json_int_t)v);
}

json_t *search_space_from_unit(const space_param *p, double u)
{
    if (!(u >= 0)) u = 0;          /* also catches NaN */
    if (u > 1) u = 1;
    switch (p->kind) {
    case SPACE_UNIFORM: {
        double v = p->min + u * (p->max - p->min);
        if (v > p->max) v = p->max;
        return json_real(v);
    }
    case SPACE_LOG: {
        double v = exp(log(p->min) + u * (log(p->max) - log(p->min)));
        if (v < p->min) v = p->min;
        if (v > p->max) v = p->max;
        return json_real(v);
    }
    case SPACE_INT: {
        double lo, hi;
        int_bounds(p, &lo, &hi);
        return int_value(p, lo + u * (hi - lo));
    }
    case SPACE_CATEGORICAL: {
        size_t k = json_array_size(p->values);
        size_t i = (size_t)(u * (double)k);
        if (i >= k) i = k - 1;
        return json_deep_copy(json_array_get(p->values, i));
    }
    default:
        return json_deep_copy(p->values);
    }
}

double search_space_to_unit(const space_param *p, const json_t *v)
{
    double u = 0.5;
    switch (p->kind) {
    case SPACE_UNIFORM:
        if (!json_is_number(v)) return 0.5;
        u = (json_number_value(v) - p->min) / (p->max - p->min);
        break;
    case SPACE_LOG: {
        if (!json_is_number(v) || json_number_value(v) <= 0) return 0.5;
        u = (log(json_number_value(v)) - log(p->min)) / (log(p->max) - log(p->min));
        break;
    }
    case SPACE_INT: {
        if (!json_is_number(v)) return 0.5;
        double lo, hi, x = json_number_value(v);
        int_bounds(p, &lo, &hi);
        if (p->int_log) x = x > 0 ? log(x) : lo;
        u = (x - lo) / (hi - lo);
        break;
    }
    case SPACE_CATEGORICAL: {
        size_t k = json_array_size(p->values), i; json_t *x;
        json_array_foreach(p->values, i, x)
            if (json_equal(x, v)) return ((double)i + 0.5) / (double)k;
        return 0.5;
    }
    default:
        return 0.5;
    }
    if (!(u >= 0)) u = 0;
    if (u > 1) u = 1;
    return u;
}

json_t *search_space_sample_param(const space_param *p, uint64_t *rng)
{
    return search_space_from_unit(p, search_rng_uniform(rng));
}

json_t *search_space_sample(const search_space *sp, uint64_t *rng)
{
    json_t *hp = json_object();
    if (!hp) return NULL;
    for (size_t i = 0; i < sp->n; i++) {
        /* Draw even for inactive parameters: parameter i then always uses
         * the same draws, whatever its parents chose. */
        double u = search_rng_uniform(rng);
        if (!search_space_active(sp, i, hp)) continue;
        json_t *v = search_space_from_unit(&sp->p[i], u);
        if (!v || json_object_set_new(hp, sp->p[i].name, v)) { json_decref(hp); return NULL; }
    }
    return hp;
}

/* ---------------------------------------------------------------- grid */

/* Points on parameter i's own axis (ignoring its children). */
static uint64_t axis_size(const space_param *p)
{
    switch (p->kind) {
    case SPACE_CATEGORICAL: return json_array_size(p->values);
    case SPACE_CONST: return 1;
    case SPACE_INT: {
        uint64_t range = (uint64_t)(p->max - p->min) + 1;
        uint64_t c = p->grid_count ? (uint64_t)p->grid_count
                                   : (range <= 10 ? range : SPACE_DEFAULT_COUNT);
        return c < range ? c : range;
    }
    default:
        return p->grid_count ? (uint64_t)p->grid_count : SPACE_DEFAULT_COUNT;
    }
}

static json_t *axis_value(const space_param *p, uint64_t j)
{
    uint64_t n = axis_size(p);
    switch (p->kind) {
    case SPACE_CATEGORICAL: return json_deep_copy(json_array_get(p->values, j));
    case SPACE_CONST: return json_deep_copy(p->values);
    case SPACE_INT: {
        uint64_t range = (uint64_t)(p->max - p->min) + 1;
        if (n == range) return json_integer((json_int_t)(p->min + (double)j));
        double t = n > 1 ? (double)j / (double)(n - 1) : 0.5;
        double v = p->int_log ? exp(log(p->min) + t * (log(p->max) - log(p->min)))
                              : p->min + t * (p->max - p->min);
        v = floor(v + 0.5);
        return json_integer((json_int_t)v);
    }
    case SPACE_LOG: {
        double t = n > 1 ? (double)j / (double)(n - 1) : 0.5;
        return json_real(exp(log(p->min) + t * (log(p->max) - log(p->min))));
    }
    default: {
        double t = n > 1 ? (double)j / (double)(n - 1) : 0.5;
        return json_real(p->min + t * (p->max - p->min));
    }
    }
}

/* Does child c turn on when its parent takes its j-th axis value? */
static int child_on(const search_space *sp, size_t c, uint64_t j)
{
    const space_param *par = &sp->p[sp->p[c].cond_parent];
    const json_t *v = par->kind == SPACE_CATEGORICAL ? json_array_get(par->values, j) : par->values;
    return values_contain(sp->p[c].cond_values, v);
}

static uint64_t sat_mul(uint64_t a, uint64_t b, uint64_t cap)
{
    if (a == 0 || b == 0) return 0;
    if (a > cap / b) return cap + 1;
    return a * b;
}

/* Sizes of the sub-grids rooted at each parameter, into size[n]: the sum
 * over i's axis values of the product of the sizes of the children that
 * value enables. Children come after parents, so one backward pass
 * computes them all (no recursion, no repeated work on long chains).
 * Saturates at cap + 1. RET 0 or HF_ENOMEM. */
static int subtree_sizes(const search_space *sp, uint64_t cap, uint64_t *size)
{
    for (size_t i = sp->n; i-- > 0;) {
        uint64_t total = 0, n = axis_size(&sp->p[i]);
        for (uint64_t j = 0; j < n && total <= cap; j++) {
            uint64_t prod = 1;
            for (size_t c = i + 1; c < sp->n; c++)
                if (sp->p[c].cond_parent == (int)i && child_on(sp, c, j))
                    prod = sat_mul(prod, size[c], cap);
            total += prod;
        }
        size[i] = total > cap ? cap + 1 : total;
    }
    return 0;
}

uint64_t search_space_grid_size(const search_space *sp, uint64_t limit)
{
    uint64_t cap = limit ? limit : UINT64_MAX - 1, prod = 1;
    uint64_t *size = malloc((sp->n ? sp->n : 1) * sizeof *size);
    if (!size) return 0;
    subtree_sizes(sp, cap, size);
    for (size_t i = 0; i < sp->n; i++)
        if (sp->p[i].cond_parent < 0)
            prod = sat_mul(prod, size[i], cap);
    free(size);
    return prod > cap ? 0 : prod;
}

typedef struct grid_ctx {
    const search_space *sp;
    const uint64_t     *size;
    size_t             *kids;     /* scratch, n per recursion level */
} grid_ctx;

static int grid_fill(const grid_ctx *g, size_t i, uint64_t k, json_t *hp, size_t depth);

/* Decompose k over a list of sibling subtrees (mixed radix, the last
 * sibling varying fastest, like nested loops in file order). */
static int grid_fill_siblings(const grid_ctx *g, const size_t *kids, size_t nk, uint64_t k,
                              json_t *hp, size_t depth)
{
    for (size_t a = nk; a-- > 0;) {
        uint64_t s = g->size[kids[a]];
        if (grid_fill(g, kids[a], k % s, hp, depth)) return -1;
        k /= s;
    }
    return 0;
}

static int grid_fill(const grid_ctx *g, size_t i, uint64_t k, json_t *hp, size_t depth)
{
    const search_space *sp = g->sp;
    uint64_t n = axis_size(&sp->p[i]);
    size_t *kids = g->kids + depth * sp->n;     /* depth <= n: parents before children */
    for (uint64_t j = 0; j < n; j++) {
        size_t nk = 0;
        uint64_t prod = 1;
        for (size_t c = i + 1; c < sp->n; c++)
            if (sp->p[c].cond_parent == (int)i && child_on(sp, c, j)) {
                kids[nk++] = c;
                prod = sat_mul(prod, g->size[c], UINT64_MAX - 1);
            }
        if (k >= prod) { k -= prod; continue; }
        json_t *v = axis_value(&sp->p[i], j);
        if (!v || json_object_set_new(hp, sp->p[i].name, v)) return -1;
        return grid_fill_siblings(g, kids, nk, k, hp, depth + 1);
    }
    return -1;
}

json_t *search_space_grid_point(const search_space *sp, uint64_t k)
{
    uint64_t total = search_space_grid_size(sp, 0);
    if (total == 0 || k >= total) return NULL;
    size_t n = sp->n ? sp->n : 1;
    json_t *hp = json_object(), *ordered = NULL;
    uint64_t *size = malloc(n * sizeof *size);
    size_t *roots = malloc(n * sizeof *roots);
    /* One scratch list of children per level of the condition forest. */
    size_t *kids = n <= 4096 ? malloc((n + 1) * n * sizeof *kids) : NULL;
    size_t nr = 0;
    if (!hp || !size || !roots || !kids) goto end;
    subtree_sizes(sp, UINT64_MAX - 1, size);
    for (size_t i = 0; i < sp->n; i++)
        if (sp->p[i].cond_parent < 0) roots[nr++] = i;
    grid_ctx g = {sp, size, kids};
    if (grid_fill_siblings(&g, roots, nr, k, hp, 0)) goto end;
    /* Keys in parameter order, for a stable, readable dump. */
    ordered = json_object();
    if (!ordered) goto end;
    for (size_t i = 0; i < sp->n; i++) {
        json_t *v = json_object_get(hp, sp->p[i].name);
        if (v) json_object_set(ordered, sp->p[i].name, v);
    }
end:
    json_decref(hp);
    free(size);
    free(roots);
    free(kids);
    return ordered;
}

/* ---------------------------------------------------------------- PBT */

static double clampd(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

json_t *search_space_perturb(const search_space *sp, const json_t *hp, double resample_p,
                             uint64_t *rng)
{
    json_t *out = json_object();
    if (!out) return NULL;
    for (size_t i = 0; i < sp->n; i++) {
        const space_param *p = &sp->p[i];
        /* Fixed number of draws per parameter, as in search_space_sample. */
        double u_resample = search_rng_uniform(rng);
        double u_dir = search_rng_uniform(rng);
        double u_prior = search_rng_uniform(rng);
        if (!search_space_active(sp, i, out)) continue;
        const json_t *old = json_object_get(hp, p->name);
        json_t *v = NULL;
        if (!old || u_resample < resample_p) {
            v = search_space_from_unit(p, u_prior);
        } else {
            double f = u_dir < 0.5 ? 0.8 : 1.2;
            switch (p->kind) {
            case SPACE_UNIFORM: case SPACE_LOG:
                if (json_is_number(old))
                    v = json_real(clampd(json_number_value(old) * f, p->min, p->max));
                break;
            case SPACE_INT:
                if (json_is_number(old)) {
                    double x = json_number_value(old), y = floor(x * f + 0.5);
                    if (y == x) y = f > 1 ? x + 1 : x - 1;    /* small ints must still move */
                    v = json_integer((json_int_t)clampd(y, p->min, p->max));
                }
                break;
            default:
                break;
            }
            if (!v) v = json_deep_copy(old);
        }
        if (!v || json_object_set_new(out, p->name, v)) { json_decref(out); return NULL; }
    }
    return out;
}
