/*
 * search_synthetic.c — TPE against random search on standard synthetic
 * functions, measured without any training: Branin (2-D, minimum
 * 0.397887) and Hartmann-6 (6-D on [0,1]^6, minimum -3.32237).
 *
 * For each seed 0..S-1 each searcher gets the same budget of T trials,
 * driven exactly as the dispatcher drives it (next -> on_created ->
 * on_report -> on_done), C trials in flight at a time (the first C are
 * asked before any result is known, then one new trial per finished one).
 * The figure is the best (lowest) function value found per seed; we print
 * the median and mean over seeds for each searcher, how many seeds each
 * won, and the ratio of the median regrets (best - minimum).
 *
 *   bin/bench/search_synthetic [--seeds 30] [--trials 0 (= per function)]
 *                              [--concurrency 1] [--fn branin|hartmann6|all]
 *
 * The peer (Optuna's TPESampler on the same functions, same budgets) is
 * bench/search/optuna_synthetic.py; bench/search/run.sh prints both.
 */
#include "hf_err.h"
#include "scheduler/search.h"
#include "scheduler/search_space.h"

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

static const synth_fn fns[] = {
    {"branin",
     "{\"x1\": {\"type\": \"uniform\", \"min\": -5, \"max\": 10},"
     " \"x2\": {\"type\": \"uniform\", \"min\": 0, \"max\": 15}}",
     0.397887, 50, branin},
    {"hartmann6",
     "{\"x1\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}, \"x2\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
     " \"x3\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}, \"x4\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
     " \"x5\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}, \"x6\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}",
     -3.32237, 100, hartmann6},
};

/* Run one searcher for `trials` trials with `conc` in flight; RET best f. */
static double run_one(const char *algo, const synth_fn *fn, const search_space *sp,
                      uint64_t seed, int trials, int conc)
{
    json_t *cfg = json_pack("{s:s, s:i}", "name", algo, "max_trials", trials);
    const searcher_ops *ops = search_find(algo);
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
    int seeds = 30, trials = 0, conc = 1;
    const char *which = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc) conc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fn") && i + 1 < argc) which = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--seeds N] [--trials N] [--concurrency N] [--fn branin|hartmann6|all]\n",
                    argv[0]);
            return 2;
        }
    }
    if (seeds < 1 || trials < 0 || conc < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    int all_won = 1;
    printf("%-10s %6s %5s %4s | %12s %12s | %12s %12s | %9s %s\n", "function", "trials", "seeds", "conc",
           "random med", "random mean", "tpe med", "tpe mean", "tpe wins", "verdict");
    for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
        const synth_fn *fn = &fns[k];
        if (strcmp(which, "all") && strcmp(which, fn->name)) continue;
        int T = trials ? trials : fn->trials;
        json_t *o = json_loads(fn->space, 0, NULL);
        search_space *sp = NULL;
        hf_jerr e;
        if (!o || search_space_parse(o, &sp, &e)) { fprintf(stderr, "bad space\n"); return 1; }
        double *r = malloc((size_t)seeds * sizeof *r), *t = malloc((size_t)seeds * sizeof *t);
        double rs = 0, ts = 0;
        int wins = 0;
        for (int sd = 0; sd < seeds; sd++) {
            r[sd] = run_one("random", fn, sp, (uint64_t)sd, T, conc);
            t[sd] = run_one("tpe", fn, sp, (uint64_t)sd, T, conc);
            rs += r[sd]; ts += t[sd];
            if (t[sd] < r[sd]) wins++;
        }
        double rm = median(r, seeds), tm = median(t, seeds);
        int won = tm < rm;
        all_won &= won;
        printf("%-10s %6d %5d %4d | %12.5f %12.5f | %12.5f %12.5f | %4d/%-4d %s (median regret random/tpe = %.2fx)\n",
               fn->name, T, seeds, conc, rm, rs / seeds, tm, ts / seeds, wins, seeds,
               won ? "TPE wins" : "random wins",
               (rm - fn->minimum) / (tm - fn->minimum > 1e-12 ? tm - fn->minimum : 1e-12));
        free(r); free(t);
        search_space_free(sp);
        json_decref(o);
    }
    return all_won ? 0 : 1;
}
