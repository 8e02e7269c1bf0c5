/*
 * search_bbob.c — our searchers on the held-out benchmark's problems: the
 * BBOB functions, their mixed (integer, categorical, log-scale) and
 * conditional variants (bench/search/bbob.c; docs/search.md, "Held-out
 * benchmark: BBOB"), driven exactly as bench/search_synthetic drives them
 * (next -> on_created -> on_report -> on_done, C trials in flight, the
 * oldest finishing first). bench/search/bbob.sh runs this and the Optuna
 * side (bench/search/optuna_bbob.py, the same C functions through ctypes)
 * and prints the table; this program prints raw per-seed figures:
 *
 *   "raw<TAB>case<TAB>method<TAB>seed<TAB>regret<TAB>concurrency"
 *
 *   bin/bench/search_bbob [--half tune|heldout|all] [--case NAME[,NAME..]]
 *                         [--seeds 20] [--first-seed 0] [--concurrency 1]
 *                         [--method tpe|tpe-univariate|random]
 *                         [--searcher SEARCHER_JSON (settings to try; its label: --label)]
 *                         [--label NAME (default ours-METHOD)] [--list]
 *
 * --list prints "case<TAB>half<TAB>budget<TAB>parameters" per problem.
 * Seeds s = F..F+S-1 are the searcher's seeds, fixed before any run.
 */
#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"
#include "bench/search/bbob.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* v[] of case c from the trial's hparams (bbob_case_regret's order). */
static void point_of(const bbob_case *c, const search_space *sp, const json_t *hp, double *v)
{
    for (int j = 0; j < c->nparam; j++) {
        const json_t *x = json_object_get(hp, sp->p[j].name);
        v[j] = NAN;
        if (json_is_number(x)) v[j] = json_number_value(x);
        else if (json_is_string(x)) v[j] = json_string_value(x)[0] - 'a';   /* categories "a", "b", ... */
    }
}

/* One run: `trials` trials, `conc` in flight; RET the best regret. */
static double run_one(const char *cfgs, const bbob_case *c, const search_space *sp, uint64_t seed, int conc)
{
    json_t *cfg = json_loads(cfgs, 0, NULL);
    json_object_set_new(cfg, "max_trials", json_integer(c->budget));
    const searcher_ops *ops = search_find(json_string_value(json_object_get(cfg, "name")));
    searcher *s = ops->create(cfg, sp, 0, seed);
    json_t **inflight = calloc((size_t)conc, sizeof *inflight);
    int64_t *ids = calloc((size_t)conc, sizeof *ids);
    double best = INFINITY, v[BBOB_MAX_PARAMS];
    int64_t created = 0, done = 0, head = 0;
    int active = 0;
    if (!s || !inflight || !ids) { fprintf(stderr, "out of memory\n"); exit(1); }
    while (done < c->budget) {
        while (active < conc && created < c->budget) {
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
        int slot = (int)(head % conc);
        point_of(c, sp, inflight[slot], v);
        double y = bbob_case_regret(c, v);
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

static int wanted(const bbob_case *c, const char *half, const char *names)
{
    if (!strcmp(half, "tune") && c->heldout) return 0;
    if (!strcmp(half, "heldout") && !c->heldout) return 0;
    if (!names) return 1;
    size_t n = strlen(c->name);
    for (const char *p = names; (p = strstr(p, c->name)); p += n)
        if ((p == names || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
    return 0;
}

int main(int argc, char **argv)
{
    int seeds = 20, first = 0, conc = 1, list = 0;
    const char *half = "heldout", *names = NULL, *method = "tpe", *cfg = NULL, *label = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seeds") && i + 1 < argc) seeds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--first-seed") && i + 1 < argc) first = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--concurrency") && i + 1 < argc) conc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--half") && i + 1 < argc) half = argv[++i];
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) names = argv[++i];
        else if (!strcmp(argv[i], "--method") && i + 1 < argc) method = argv[++i];
        else if (!strcmp(argv[i], "--searcher") && i + 1 < argc) cfg = argv[++i];
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else if (!strcmp(argv[i], "--list")) list = 1;
        else {
            fprintf(stderr, "usage: %s [--half tune|heldout|all] [--case NAME[,NAME]] [--seeds N] [--first-seed F]"
                            " [--concurrency C] [--method tpe|tpe-univariate|random] [--searcher JSON]"
                            " [--label NAME] [--list]\n", argv[0]);
            return 2;
        }
    }
    if (seeds < 1 || first < 0 || conc < 1 || (strcmp(half, "tune") && strcmp(half, "heldout") && strcmp(half, "all"))) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
    if (!cfg) {
        cfg = !strcmp(method, "tpe") ? "{\"name\": \"tpe\"}"
            : !strcmp(method, "tpe-univariate") ? "{\"name\": \"tpe\", \"multivariate\": false}"
            : !strcmp(method, "random") ? "{\"name\": \"random\"}" : NULL;
        if (!cfg) { fprintf(stderr, "%s: unknown method %s\n", argv[0], method); return 2; }
    }
    char lb[64];
    if (!label) { snprintf(lb, sizeof lb, "ours-%s", method); label = lb; }   /* apart from Optuna's names */
    json_t *probe = json_loads(cfg, 0, NULL);
    const char *nm = json_string_value(json_object_get(probe, "name"));
    if (!json_is_object(probe) || !nm || !search_find(nm)) {
        fprintf(stderr, "%s: --searcher: not a searcher object with a known \"name\"\n", argv[0]);
        json_decref(probe);
        return 2;
    }
    json_decref(probe);
    bbob_case *c = malloc(sizeof *c);
    char buf[8192];
    int found = 0;
    if (!c) return 1;
    for (int k = 0; k < bbob_suite_count(); k++) {
        bbob_suite_case(k, c);
        if (!wanted(c, half, names)) continue;
        found++;
        if (list) { printf("%s\t%s\t%d\t%d\n", c->name, c->heldout ? "heldout" : "tune", c->budget, c->nparam); continue; }
        json_t *o = bbob_case_space(c, buf, sizeof buf) > 0 ? json_loads(buf, 0, NULL) : NULL;
        search_space *sp = NULL;
        hf_jerr e;
        if (!o || search_space_parse(o, &sp, &e)) { fprintf(stderr, "%s: bad space\n", c->name); return 1; }
        for (int sd = first; sd < first + seeds; sd++)
            printf("raw\t%s\t%s\t%d\t%.9g\t%d\n", c->name, label, sd, run_one(cfg, c, sp, (uint64_t)sd, conc), conc);
        fflush(stdout);
        search_space_free(sp);
        json_decref(o);
    }
    free(c);
    if (!found) { fprintf(stderr, "%s: no case matches\n", argv[0]); return 2; }
    return 0;
}
