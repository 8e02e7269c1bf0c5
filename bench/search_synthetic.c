/*
 * search_synthetic.c — our TPE (multivariate, the default, and univariate)
 * against random search on a suite of 11 standard functions, measured
 * without any training: Branin (2-D), Hartmann-3, Hartmann-6, Rosenbrock-5,
 * Ackley-5, Levy-6, Styblinski-Tang-4, and four with other parameter
 * kinds: a 6-D integer sphere, Hartmann-3 with two 5-way categoricals, a
 * log-scale bowl (two log floats and a log integer) and a conditional one
 * (an optimizer choice whose momentum/beta1 exist only for sgd/adam).
 * bench/search/optuna_synthetic.py defines the same functions for Optuna.
 *
 * For each seed 0..S-1 each searcher gets the same budget of T trials,
 * driven exactly as the dispatcher drives it (next -> on_created ->
 * on_report -> on_done), C trials in flight at a time (the first C are
 * asked before any result is known, then one new trial per finished one,
 * the oldest first). The figure is the regret of the best value found
 * (best - known minimum) per seed; we print its median over seeds for each
 * method, how many seeds TPE beat random in, and random/TPE. Exit status 1
 * when TPE's median is not below random's on some function.
 *
 *   bin/bench/search_synthetic [--seeds 30] [--trials 0 (= per function)]
 *                              [--concurrency 1] [--fn NAME|all] [--tsv]
 *                              [--tpe SEARCHER_JSON (replaces the tpe column's settings)]
 *                              [--tpe-only (the tpe column alone, for tuning runs)]
 *                              [--per-seed (also "raw FUNCTION SEED REGRET" lines of the tpe column)]
 *
 * --tsv prints "function method trials seeds median_regret" lines, which
 * optuna_synthetic.py --ours reads to print ours beside Optuna's.
 */
#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct synth_fn {
    const char *name;
    const char *space;         /* "hyperparameters" JSON */
    double      minimum;
    int         trials;        /* default budget */
    double    (*f)(const json_t *hp);
} synth_fn;

static double num(const json_t *hp, const char *k)
{
    return json_number_value(json_object_get(hp, k));
}

static double branin(const json_t *hp)
{
    double x1 = num(hp, "x1"), x2 = num(hp, "x2");
    double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
    double u = x2 - b * x1 * x1 + c * x1 - 6;
    return u * u + 10 * (1 - t) * cos(x1) + 10;
}

static double hartmann6(const json_t *hp)
{
    static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
    static const double A[4][6] = {
        {10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14},
        {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}};
    static const double P[4][6] = {
        {0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886},
        {0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991},
        {0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650},
        {0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381}};
    static const char *const names[6] = {"x1", "x2", "x3", "x4", "x5", "x6"};
    double x[6], s = 0;
    for (int j = 0; j < 6; j++) x[j] = num(hp, names[j]);
    for (int i = 0; i < 4; i++) {
        double in = 0;
        for (int j = 0; j < 6; j++) in += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
        s += alpha[i] * exp(-in);
    }
    return -s;
}

static double hartmann3(const json_t *hp)
{
    static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
    static const double A[4][3] = {{3, 10, 30}, {0.1, 10, 35}, {3, 10, 30}, {0.1, 10, 35}};
    static const double P[4][3] = {{0.3689, 0.1170, 0.2673}, {0.4699, 0.4387, 0.7470},
                                   {0.1091, 0.8732, 0.5547}, {0.0381, 0.5743, 0.8828}};
    double x[3] = {num(hp, "x1"), num(hp, "x2"), num(hp, "x3")}, s = 0;
    for (int i = 0; i < 4; i++) {
        double in = 0;
        for (int j = 0; j < 3; j++) in += A[i][j] * (x[j] - P[i][j]) * (x[j] - P[i][j]);
        s += alpha[i] * exp(-in);
    }
    return -s;
}

/* x[0..d) from parameters x1..xd. */
static void vec(const json_t *hp, int d, double *x)
{
    char k[16];
    for (int j = 0; j < d; j++) { snprintf(k, sizeof k, "x%d", j + 1); x[j] = num(hp, k); }
}

static double rosenbrock5(const json_t *hp)
{
    double x[5], s = 0;
    vec(hp, 5, x);
    for (int j = 0; j < 4; j++) s += 100 * pow(x[j + 1] - x[j] * x[j], 2) + pow(1 - x[j], 2);
    return s;
}

static double ackley5(const json_t *hp)
{
    double x[5], s2 = 0, sc = 0;
    vec(hp, 5, x);
    for (int j = 0; j < 5; j++) { s2 += x[j] * x[j]; sc += cos(2 * M_PI * x[j]); }
    return -20 * exp(-0.2 * sqrt(s2 / 5)) - exp(sc / 5) + 20 + M_E;
}

static double levy6(const json_t *hp)
{
    double x[6], w[6];
    vec(hp, 6, x);
    for (int j = 0; j < 6; j++) w[j] = 1 + (x[j] - 1) / 4;
    double s = pow(sin(M_PI * w[0]), 2);
    for (int j = 0; j < 5; j++) s += pow(w[j] - 1, 2) * (1 + 10 * pow(sin(M_PI * w[j] + 1), 2));
    return s + pow(w[5] - 1, 2) * (1 + pow(sin(2 * M_PI * w[5]), 2));
}

static double styblinski4(const json_t *hp)
{
    double x[4], s = 0;
    vec(hp, 4, x);
    for (int j = 0; j < 4; j++) s += pow(x[j], 4) - 16 * x[j] * x[j] + 5 * x[j];
    return s / 2;
}

/* Integer: a shifted sphere over 6 integers in [-10, 10], minimum 0. */
static double int_sphere6(const json_t *hp)
{
    static const double c[6] = {3, -7, 1, 8, -2, 5};
    double x[6], s = 0;
    vec(hp, 6, x);
    for (int j = 0; j < 6; j++) s += (x[j] - c[j]) * (x[j] - c[j]);
    return s;
}

/* Categorical: Hartmann-3 plus the offsets of two 5-way categoricals. */
static double cat_hartmann3(const json_t *hp)
{
    static const char *const names[5] = {"a", "b", "c", "d", "e"};
    static const double o1[5] = {0.8, 0.3, 0.0, 1.2, 0.5}, o2[5] = {0.4, 1.0, 0.7, 0.0, 0.2};
    const char *c1 = json_string_value(json_object_get(hp, "c1")), *c2 = json_string_value(json_object_get(hp, "c2"));
    double s = hartmann3(hp);
    for (int k = 0; k < 5; k++) {
        if (c1 && !strcmp(c1, names[k])) s += o1[k];
        if (c2 && !strcmp(c2, names[k])) s += o2[k];
    }
    return s;
}

/* Log scale: a training-like bowl in log10(lr), log10(wd), log2(batch)
 * (a log-scale integer) and momentum; minimum 0. */
static double log_bowl4(const json_t *hp)
{
    return pow(log10(num(hp, "lr")) + 2.5, 2) + 0.5 * pow(log10(num(hp, "wd")) + 4, 2) +
           0.25 * pow(log2(num(hp, "batch")) - 7, 2) + 4 * pow(num(hp, "mom") - 0.9, 2);
}

/* Conditional: sgd has a momentum, adam a beta1; minimum 0 (adam, lr 1e-3,
 * beta1 0.9, x 0.3); sgd's best is 0.3. */
static double cond_opt(const json_t *hp)
{
    const char *opt = json_string_value(json_object_get(hp, "opt"));
    double lr = log10(num(hp, "lr")), x = num(hp, "x");
    double s = 2 * pow(x - 0.3, 2);
    if (opt && !strcmp(opt, "sgd")) return s + 0.3 + pow(lr + 1.5, 2) + 4 * pow(num(hp, "mom") - 0.95, 2);
    return s + pow(lr + 3, 2) + 8 * pow(num(hp, "beta1") - 0.9, 2);
}

#define U(n, a, b) "\"" n "\": {\"type\": \"uniform\", \"min\": " #a ", \"max\": " #b "}"
#define I(n, a, b) "\"" n "\": {\"type\": \"int\", \"min\": " #a ", \"max\": " #b "}"

static const synth_fn fns[] = {
    {"branin", "{" U("x1", -5, 10) "," U("x2", 0, 15) "}", 0.397887, 50, branin},
    {"hartmann3", "{" U("x1", 0, 1) "," U("x2", 0, 1) "," U("x3", 0, 1) "}", -3.86278, 50, hartmann3},
    {"hartmann6",
     "{" U("x1", 0, 1) "," U("x2", 0, 1) "," U("x3", 0, 1) "," U("x4", 0, 1) "," U("x5", 0, 1) "," U("x6", 0, 1) "}",
     -3.32237, 100, hartmann6},
    {"rosenbrock5", "{" U("x1", -5, 10) "," U("x2", -5, 10) "," U("x3", -5, 10) "," U("x4", -5, 10) "," U("x5", -5, 10) "}",
     0, 100, rosenbrock5},
    {"ackley5",
     "{" U("x1", -32.768, 32.768) "," U("x2", -32.768, 32.768) "," U("x3", -32.768, 32.768) ","
     U("x4", -32.768, 32.768) "," U("x5", -32.768, 32.768) "}", 0, 100, ackley5},
    {"levy6",
     "{" U("x1", -10, 10) "," U("x2", -10, 10) "," U("x3", -10, 10) "," U("x4", -10, 10) "," U("x5", -10, 10) ","
     U("x6", -10, 10) "}", 0, 100, levy6},
    {"styblinski4", "{" U("x1", -5, 5) "," U("x2", -5, 5) "," U("x3", -5, 5) "," U("x4", -5, 5) "}",
     -39.16617 * 4, 100, styblinski4},
    {"int_sphere6",
     "{" I("x1", -10, 10) "," I("x2", -10, 10) "," I("x3", -10, 10) "," I("x4", -10, 10) "," I("x5", -10, 10) ","
     I("x6", -10, 10) "}", 0, 100, int_sphere6},
    {"cat_hartmann3",
     "{" U("x1", 0, 1) "," U("x2", 0, 1) "," U("x3", 0, 1) ","
     " \"c1\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\", \"c\", \"d\", \"e\"]},"
     " \"c2\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}}",
     -3.86278, 100, cat_hartmann3},
    {"log_bowl4",
     "{\"lr\": {\"type\": \"log\", \"min\": 1e-5, \"max\": 1}, \"wd\": {\"type\": \"log\", \"min\": 1e-6, \"max\": 0.1},"
     " \"batch\": {\"type\": \"int\", \"min\": 16, \"max\": 1024, \"log\": true}," U("mom", 0, 1) "}",
     0, 100, log_bowl4},
    {"cond_opt",
     "{\"opt\": {\"type\": \"categorical\", \"values\": [\"sgd\", \"adam\"]},"
     " \"lr\": {\"type\": \"log\", \"min\": 1e-5, \"max\": 1}," U("x", 0, 1) ","
     " \"mom\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1, \"condition\": {\"param\": \"opt\", \"values\": [\"sgd\"]}},"
     " \"beta1\": {\"type\": \"uniform\", \"min\": 0.5, \"max\": 0.999,"
     "   \"condition\": {\"param\": \"opt\", \"values\": [\"adam\"]}}}",
     0, 100, cond_opt},
};

/* The methods compared: a name for the table and the searcher config. */
typedef struct method { const char *label; const char *cfg; } method;
static method methods[] = {
    {"random", "{\"name\": \"random\"}"},
    {"tpe", "{\"name\": \"tpe\"}"},
    {"tpe-univariate", "{\"name\": \"tpe\", \"multivariate\": false}"},
};
#define N_METHODS (sizeof methods / sizeof methods[0])

/* Run one searcher for `trials` trials with `conc` in flight; RET best f. */
static double run_one(const method *m, const synth_fn *fn, const search_space *sp, uint64_t seed, int trials,
                      int conc)
{
    json_t *cfg = json_loads(m->cfg, 0, NULL);
    json_object_set_new(cfg, "max_trials", json_integer(trials));
    const searcher_ops *ops = search_find(json_string_value(json_object_get(cfg, "name")));
    searcher *s = ops->create(cfg, sp, 0, seed);
    json_t **inflight = calloc((size_t)conc, sizeof *inflight);
    int64_t *ids = calloc((size_t)conc, sizeof *ids);
    double best = INFINITY;
    int64_t created = 0, done = 0, head = 0;
    int active = 0;
    if (!s || !inflight || !ids) { fprintf(stderr, "out of memory\n"); exit(1); }
    while (done < trials) {
        while (active < conc && created < trials) {
            search_new nw = {0};
            if (ops->next(s, created, active, &nw) != SEARCH_CREATE) break;
            int64_t id = created + 1;
            ops->on_created(s, id, created, nw.hparams, nw.budget, nw.parent_trial);
            int slot = (int)((head + active) % conc);
            inflight[slot] = nw.hparams;
            ids[slot] = id;
            active++;
            created++;
        }
        if (active == 0) break;
        /* The oldest in flight finishes first (FIFO). */
        int slot = (int)(head % conc);
        double y = fn->f(inflight[slot]);
        if (y < best) best = y;
        ops->on_report(s, ids[slot], 1, -y);     /* higher is better */
        ops->on_done(s, ids[slot], SEARCH_COMPLETED, -y);
        json_decref(inflight[slot]);
        head++;
        active--;
        done++;
    }
    ops->destroy(s);
    free(inflight);
    free(ids);
    json_decref(cfg);
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double *c = malloc((size_t)n * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

int main(int argc, char **argv)
{
    int seeds = 30, trials = 0, conc = 1, tsv = 0, tpe_only = 0, per_seed = 0;
    const char *which = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc) conc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fn") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--tsv")) tsv = 1;
        else if (!strcmp(argv[i], "--tpe-only")) tpe_only = 1;   /* skip random and univariate (tuning runs) */
        else if (!strcmp(argv[i], "--per-seed")) per_seed = 1;
        else if (!strcmp(argv[i], "--tpe") && i + 1 < argc) methods[1].cfg = argv[++i];   /* try other settings */
        else {
            fprintf(stderr, "usage: %s [--seeds N] [--trials N] [--concurrency N] [--fn NAME|all] [--tsv] [--tpe SEARCHER_JSON] [--tpe-only] [--per-seed]\n",
                    argv[0]);
            return 2;
        }
    }
    if (seeds < 1 || trials < 0 || conc < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    /* --tpe replaces the whole searcher object: it must parse and name a searcher */
    for (size_t k = 0; k < N_METHODS; k++) {
        json_error_t je;
        json_t *c = json_loads(methods[k].cfg, 0, &je);
        const char *nm = json_string_value(json_object_get(c, "name"));
        if (!json_is_object(c) || !nm || !search_find(nm)) {
            fprintf(stderr, "%s: --tpe: %s\n", argv[0],
                    !c ? je.text : !json_is_object(c) ? "not a JSON object"
                    : !nm ? "no \"name\" (a searcher object, e.g. {\"name\": \"tpe\", \"gamma\": 0.1})"
                    : "unknown searcher name");
            json_decref(c);
            return 2;
        }
        json_decref(c);
    }
    int all_won = 1, found = 0;
    if (!tsv)
        printf("median regret (best found - minimum) over %d seeds, %d in flight\n"
               "%-14s %6s | %12s %12s %15s | %9s %s\n", seeds, conc, "function", "trials", "random", "tpe",
               "tpe-univariate", "tpe wins", "random/tpe");
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        const synth_fn *fn = &fns[k];
        if (strcmp(which, "all") && strcmp(which, fn->name)) continue;
        found = 1;
        int T = trials ? trials : fn->trials;
        json_t *o = json_loads(fn->space, 0, NULL);
        search_space *sp = NULL;
        hf_jerr e;
        if (!o || search_space_parse(o, &sp, &e)) { fprintf(stderr, "%s: bad space\n", fn->name); return 1; }
        double *r = malloc(N_METHODS * (size_t)seeds * sizeof *r), med[N_METHODS];
        int wins = 0;
        for (int sd = 0; sd < seeds; sd++)
            for (size_t m = 0; m < N_METHODS; m++)
                r[m * (size_t)seeds + (size_t)sd] = tpe_only && m != 1 ? NAN : run_one(&methods[m], fn, sp, (uint64_t)sd, T, conc) - fn->minimum;
        for (int sd = 0; sd < seeds; sd++) wins += r[(size_t)seeds + (size_t)sd] < r[sd];
        for (size_t m = 0; m < N_METHODS; m++) med[m] = median(r + m * (size_t)seeds, seeds);
        all_won &= med[1] < med[0];
        if (per_seed)   /* paired comparisons of two settings, seed by seed */
            for (int sd = 0; sd < seeds; sd++) printf("raw\t%s\t%d\t%.9g\n", fn->name, sd, r[(size_t)seeds + (size_t)sd]);
        if (tsv) {
            for (size_t m = 0; m < N_METHODS; m++)
                printf("%s\t%s\t%d\t%d\t%.6g\n", fn->name, methods[m].label, T, seeds, med[m]);
        } else {
            printf("%-14s %6d | %12.5g %12.5g %15.5g | %4d/%-4d %.2fx\n", fn->name, T, med[0], med[1], med[2], wins,
                   seeds, med[0] / (med[1] > 1e-12 ? med[1] : 1e-12));
        }
        free(r);
        search_space_free(sp);
        json_decref(o);
    }
    if (!found) { fprintf(stderr, "unknown function %s\n", which); return 2; }
    return all_won ? 0 : 1;
}
