/*
 * search_mo.c — multi-objective search measured without training: our TPE
 * with several objectives (MOTPE, scheduler/search/search_tpe.c with
 * search_mo.c's ranking) and random search on ZDT1 and ZDT2 (2 objectives,
 * 30 dimensions, Zitzler, Deb and Thiele 2000) and DTLZ2 (3 objectives,
 * 12 dimensions, Deb et al. 2002), all minimised. bench/search/mo_optuna.py
 * defines the same problems for Optuna's NSGAIISampler and TPESampler.
 *
 * For each seed 0..S-1 each searcher gets T trials one at a time, driven
 * as the dispatcher drives it (next -> on_created -> on_metric for the
 * other objectives -> on_report for the first -> on_done). The figure is
 * the hypervolume of all T trials' objective vectors against a fixed
 * reference point (ZDT: (11, 11); DTLZ2: (2.5, 2.5, 2.5)), higher is
 * better; we print its median over seeds.
 *
 *   bin/bench/search_mo [--seeds 10] [--trials 200] [--fn NAME|all] [--tsv]
 *                       [--tpe SEARCHER_JSON (replaces the tpe column's settings)]
 *
 * --tsv prints "problem method trials seeds median_hv" lines, which
 * mo_optuna.py --ours reads to print ours beside Optuna's.
 */
#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_mo.h"
#include "scheduler/search/search_space.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 30

typedef struct mo_problem {
    const char *name;
    int         dim, nobj;
    double      ref[3];
    void      (*f)(const double *x, int d, double *out);
} mo_problem;

static double zdt_g(const double *x, int d)
{
    double s = 0;
    for (int i = 1; i < d; i++) s += x[i];
    return 1 + 9 * s / (d - 1);
}

static void zdt1(const double *x, int d, double *f)
{
    double g = zdt_g(x, d);
    f[0] = x[0];
    f[1] = g * (1 - sqrt(x[0] / g));
}

static void zdt2(const double *x, int d, double *f)
{
    double g = zdt_g(x, d);
    f[0] = x[0];
    f[1] = g * (1 - (x[0] / g) * (x[0] / g));
}

static void dtlz2(const double *x, int d, double *f)
{
    double g = 0;
    for (int i = 2; i < d; i++) g += (x[i] - 0.5) * (x[i] - 0.5);
    double a = x[0] * M_PI / 2, b = x[1] * M_PI / 2;
    f[0] = (1 + g) * cos(a) * cos(b);
    f[1] = (1 + g) * cos(a) * sin(b);
    f[2] = (1 + g) * sin(a);
}

static const mo_problem problems[] = {
    {"zdt1", 30, 2, {11, 11, 0}, zdt1},
    {"zdt2", 30, 2, {11, 11, 0}, zdt2},
    {"dtlz2", 12, 3, {2.5, 2.5, 2.5}, dtlz2},
};

typedef struct method { const char *label; const char *cfg; } method;
static method methods[] = {
    {"random", "{\"name\": \"random\"}"},
    {"tpe", "{\"name\": \"tpe\"}"},
};
#define N_METHODS (sizeof methods / sizeof methods[0])

/* "x0".."x{d-1}" uniform on [0, 1]. Caller frees. */
static search_space *problem_space(const mo_problem *p)
{
    json_t *o = json_object();
    for (int i = 0; i < p->dim; i++) {
        char k[16];
        snprintf(k, sizeof k, "x%d", i);
        json_object_set_new(o, k, json_pack("{s:s, s:i, s:i}", "type", "uniform", "min", 0, "max", 1));
    }
    search_space *sp = NULL;
    hf_jerr e;
    if (search_space_parse(o, &sp, &e)) { fprintf(stderr, "%s: %s\n", e.field, e.msg); exit(1); }
    json_decref(o);
    return sp;
}

/* One run of T trials; RET the hypervolume of every trial's objectives. */
static double run_one(const method *m, const mo_problem *p, const search_space *sp, uint64_t seed, int T)
{
    json_t *cfg = json_loads(m->cfg, 0, NULL);
    json_object_set_new(cfg, "max_trials", json_integer(T));
    const searcher_ops *ops = search_find(json_string_value(json_object_get(cfg, "name")));
    searcher *s = ops->create(cfg, sp, 0, seed);
    double *ys = malloc((size_t)T * 3 * sizeof *ys);
    if (!s || !ys) { fprintf(stderr, "out of memory\n"); exit(1); }
    search_objectives o = {.n_obj = p->nobj};
    if (ops->configure && ops->configure(s, &o)) { fprintf(stderr, "configure failed\n"); exit(1); }
    int n = 0;
    for (int i = 0; i < T; i++) {
        search_new nw = {0};
        if (ops->next(s, i, 0, &nw) != SEARCH_CREATE) break;
        ops->on_created(s, i + 1, i, nw.hparams, nw.budget, 0);
        double x[MAX_DIM], f[3];
        for (int j = 0; j < p->dim; j++) {
            char k[16];
            snprintf(k, sizeof k, "x%d", j);
            x[j] = json_number_value(json_object_get(nw.hparams, k));
        }
        p->f(x, p->dim, f);
        for (int k = 1; k < p->nobj; k++)
            if (ops->on_metric) ops->on_metric(s, i + 1, k, 1, -f[k]);   /* higher is better */
        ops->on_report(s, i + 1, 1, -f[0]);
        ops->on_done(s, i + 1, SEARCH_COMPLETED, -f[0]);
        memcpy(ys + (size_t)n * p->nobj, f, (size_t)p->nobj * sizeof *f);
        n++;
        json_decref(nw.hparams);
    }
    double hv = search_mo_hypervolume(ys, (size_t)n, p->nobj, p->ref);
    ops->destroy(s);
    free(ys);
    json_decref(cfg);
    return hv;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    int seeds = 10, trials = 200, tsv = 0, found = 0;
    const char *which = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fn") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--tsv")) tsv = 1;
        else if (!strcmp(argv[i], "--tpe") && i + 1 < argc) methods[1].cfg = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--seeds N] [--trials N] [--fn NAME|all] [--tsv] [--tpe SEARCHER_JSON]\n",
                    argv[0]);
            return 2;
        }
    }
    if (seeds < 1 || trials < 1) { fprintf(stderr, "bad arguments\n"); return 2; }
    if (!tsv)
        printf("median hypervolume over %d seeds, %d trials (higher is better)\n%-8s | %12s %12s | %s\n", seeds,
               trials, "problem", "random", "tpe (MOTPE)", "tpe/random");
    int all_won = 1;
    for (size_t k = 0; k < sizeof problems / sizeof problems[0]; k++) {
        const mo_problem *p = &problems[k];
        if (strcmp(which, "all") && strcmp(which, p->name)) continue;
        found = 1;
        search_space *sp = problem_space(p);
        double *r = malloc((size_t)seeds * sizeof *r), med[N_METHODS];
        for (size_t m = 0; m < N_METHODS; m++) {
            for (int sd = 0; sd < seeds; sd++) r[sd] = run_one(&methods[m], p, sp, (uint64_t)sd, trials);
            med[m] = median(r, seeds);
        }
        all_won &= med[1] > med[0];
        if (tsv)
            for (size_t m = 0; m < N_METHODS; m++)
                printf("%s\t%s\t%d\t%d\t%.6g\n", p->name, methods[m].label, trials, seeds, med[m]);
        else
            printf("%-8s | %12.5g %12.5g | %.3fx\n", p->name, med[0], med[1], med[1] / med[0]);
        fflush(stdout);
        free(r);
        search_space_free(sp);
    }
    if (!found) { fprintf(stderr, "unknown problem %s\n", which); return 2; }
    return all_won ? 0 : 1;
}
