/*
 * test_scheduler_importance.c — fANOVA importance (scheduler/search/importance.c)
 * on functions whose answer is known, the experiment-level encoding
 * (categoricals, constants, unfinished trials, conditional parameters),
 * the cache, and agreement with Optuna's FanovaImportanceEvaluator on the
 * same trials (Debian's python3-optuna; it needs scikit-learn, found in
 * $HF_OPTUNA_PYTHON or /usr/bin/python3: skipped with a message when
 * either is missing). Tolerance: the same ranking, and every value
 * within 0.1 absolute (docs/search.md gives the measured differences).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "hf_err.h"
#include "hf_metric.h"
#include "scheduler/search/importance.h"
#include "scheduler/search/search_space.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPTUNA_TOL 0.1

typedef double (*fn3)(const double *x);

static double f_lin(const double *x) { return 10 * x[0] + 0.1 * x[1]; }
static double f_x2(const double *x) { return x[1] * x[1]; }
static double f_third(const double *x) { return 5 * x[0] + 5 * x[2] + 0 * x[1]; }

/* n points uniform in [0,1]^3 (seeded), y = f. */
static void sample(size_t n, fn3 f, double *X, double *y, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        for (int j = 0; j < 3; j++) X[i * 3 + j] = search_rng_uniform(&seed);
        y[i] = f(&X[i * 3]);
    }
}

static void fanova3(fn3 f, size_t n, double imp[3])
{
    double *X = malloc(n * 3 * sizeof *X), *y = malloc(n * sizeof *y);
    double bounds[6] = {0, 1, 0, 1, 0, 1};
    int group[3] = {0, 1, 2};
    imp_opts o;
    imp_opts_default(&o);
    o.n_trees = 16;   /* the answer is clear with fewer trees; keeps the test fast */
    sample(n, f, X, y, 42);
    assert_int_equal(imp_fanova(X, y, n, 3, bounds, group, 3, &o, imp), 0);
    free(X);
    free(y);
}

/* Table of known functions: which feature dominates and by how much. */
static void test_known_functions(void **state)
{
    (void)state;
    static const struct { fn3 f; int top; double min_top; double max_zero; int zero; } cases[] = {
        {f_lin, 0, 0.95, 0.05, 2},      /* y = 10 x1 + 0.1 x2: x1 dominates, x3 is noise-free zero */
        {f_x2, 1, 0.95, 0.05, 0},       /* only x2 matters */
        {f_third, 0, 0.35, 0.05, 1},    /* x1 and x3 equal, x2 nothing */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double imp[3];
        fanova3(cases[c].f, 200, imp);
        double s = imp[0] + imp[1] + imp[2];
        assert_true(fabs(s - 1) < 1e-9);
        assert_true(imp[cases[c].top] >= cases[c].min_top);
        assert_true(imp[cases[c].zero] <= cases[c].max_zero);
    }
    double imp[3];
    fanova3(f_third, 200, imp);
    assert_true(fabs(imp[0] - imp[2]) < 0.15);
}

static void test_degenerate(void **state)
{
    (void)state;
    double X[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, y[3] = {1, 1, 1}, b[4] = {0, 1, 0, 1}, imp[2] = {9, 9};
    int g[2] = {0, 1};
    assert_int_equal(imp_fanova(X, y, 3, 2, b, g, 2, NULL, imp), 0);   /* constant y: nothing matters */
    assert_true(imp[0] == 0 && imp[1] == 0);
    assert_int_equal(imp_fanova(X, y, 1, 2, b, g, 2, NULL, imp), 0);   /* one trial */
    assert_true(imp[0] == 0 && imp[1] == 0);
    int bad[2] = {0, 5};
    assert_int_equal(imp_fanova(X, y, 3, 2, b, bad, 2, NULL, imp), HF_EINVAL);
    assert_int_equal(imp_fanova(X, y, 0, 2, b, g, 2, NULL, imp), HF_EINVAL);
}

/* An experiment: lr (log), layers (int), opt (categorical, decisive),
 * a constant and an unfinished trial; the objective depends on opt and,
 * a little, on lr. */
static json_t *space(void)
{
    return json_pack("{s{sssfsf}s{sssisi}s{ss s[sss]}si}", "lr", "type", "log", "min", 1e-4, "max", 1e-1,
                     "layers", "type", "int", "min", 1, "max", 8, "opt", "type", "categorical", "values", "sgd",
                     "adam", "rmsprop", "epochs", 3);
}

static json_t *trials_of(size_t n, uint64_t seed)
{
    static const char *opts[] = {"sgd", "adam", "rmsprop"};
    static const double effect[] = {0.0, 1.0, 0.4};
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        double lr = exp(log(1e-4) + search_rng_uniform(&seed) * (log(1e-1) - log(1e-4)));
        int layers = 1 + (int)(search_rng_uniform(&seed) * 8);
        int k = (int)(search_rng_uniform(&seed) * 3);
        double obj = effect[k] + 2 * lr;
        json_array_append_new(a, json_pack("{sIsss{sfsiss si}sf}", "id", (json_int_t)(i + 1), "state",
                                           i == n - 1 ? "RUNNING" : "COMPLETED", "hparams", "lr", lr, "layers",
                                           layers, "opt", opts[k], "epochs", 3, "objective", obj));
    }
    return a;
}

static void test_experiment_encoding(void **state)
{
    (void)state;
    json_t *sp = space(), *tr = trials_of(61, 7), *out = NULL;
    hf_jerr e;
    uint64_t sig = 0;
    imp_opts o;
    imp_opts_default(&o);
    o.n_trees = 16;
    assert_int_equal(importance_compute(sp, tr, &o, &out, &sig, &e), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "trials")), 60);   /* the RUNNING one left out */
    json_t *imp = json_object_get(out, "importance");
    assert_int_equal(json_object_size(imp), 3);                                 /* the constant left out */
    assert_null(json_object_get(imp, "epochs"));
    assert_string_equal(json_string_value(json_array_get(json_object_get(out, "params"), 0)), "opt");
    assert_true(json_real_value(json_object_get(imp, "opt")) > 0.8);
    assert_true(sig == importance_signature(tr));
    json_decref(out);

    /* A trial without "layers" (a conditional parameter): layers is dropped. */
    json_object_del(json_object_get(json_array_get(tr, 0), "hparams"), "layers");
    assert_int_equal(importance_compute(sp, tr, &o, &out, &sig, &e), 0);
    assert_null(json_object_get(json_object_get(out, "importance"), "layers"));
    assert_int_equal(json_object_size(json_object_get(out, "importance")), 2);
    json_decref(out);

    /* A bad space names its field. */
    json_t *bad = json_pack("{s{sssisi}}", "x", "type", "uniform", "min", 3, "max", 1);
    assert_int_not_equal(importance_compute(bad, tr, &o, &out, &sig, &e), 0);
    assert_non_null(strstr(e.field, "x"));
    json_decref(bad);
    json_decref(sp);
    json_decref(tr);
}

static void test_cache(void **state)
{
    (void)state;
    importance_cache *c = importance_cache_new();
    json_t *sp = space(), *tr = trials_of(30, 3), *out = NULL;
    hf_jerr e;
    assert_int_equal(importance_cache_get(c, 5, NULL, sp, tr, &out, &e), 0);
    assert_true(json_is_false(json_object_get(out, "cached")));
    json_decref(out);
    assert_int_equal(importance_cache_get(c, 5, NULL, sp, tr, &out, &e), 0);
    assert_true(json_is_true(json_object_get(out, "cached")));
    json_decref(out);
    /* the running trial completes: recomputed */
    json_t *last = json_array_get(tr, json_array_size(tr) - 1);
    json_object_set_new(last, "state", json_string("COMPLETED"));
    assert_int_equal(importance_cache_get(c, 5, NULL, sp, tr, &out, &e), 0);
    assert_true(json_is_false(json_object_get(out, "cached")));
    assert_int_equal(json_integer_value(json_object_get(out, "trials")), 30);
    json_decref(out);
    /* another experiment does not see experiment 5's answer */
    assert_int_equal(importance_cache_get(c, 6, NULL, sp, tr, &out, &e), 0);
    assert_true(json_is_false(json_object_get(out, "cached")));
    json_decref(out);
    json_decref(sp);
    json_decref(tr);
    importance_cache_free(c);
}

/* Two objectives: f1 (the trials' "objective", also in "latest") depends
 * only on x, f2 (its last value in "latest") only on y; ranking by f2
 * flips the answer, and the cache keeps one answer per objective. */
static json_t *trials_two_objectives(size_t n, uint64_t seed)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        double x = search_rng_uniform(&seed), y = search_rng_uniform(&seed);
        double f1 = 3 * x, f2 = (y - 0.2) * (y - 0.2);
        json_array_append_new(a, json_pack("{sIsss{sfsf}sfs{sfsf}}", "id", (json_int_t)(i + 1), "state",
                                           "COMPLETED", "hparams", "x", x, "y", y, "objective", f1, "latest",
                                           "f1", f1, "f2", f2));
    }
    /* a trial that never reported f2 is left out of f2's ranking only */
    json_array_append_new(a, json_pack("{sIsss{sfsf}sfs{sf}}", "id", (json_int_t)(n + 1), "state", "COMPLETED",
                                       "hparams", "x", 0.5, "y", 0.5, "objective", 1.5, "latest", "f1", 1.5));
    return a;
}

static const char *top_param(const json_t *out)
{
    return json_string_value(json_array_get(json_object_get(out, "params"), 0));
}

static void test_by_objective(void **state)
{
    (void)state;
    json_t *sp = json_pack("{s{sssfsf}s{sssfsf}}", "x", "type", "uniform", "min", 0.0, "max", 1.0, "y", "type",
                           "uniform", "min", 0.0, "max", 1.0);
    json_t *tr = trials_two_objectives(80, 11), *out = NULL;
    hf_jerr e;
    uint64_t sig = 0;
    imp_opts o;
    imp_opts_default(&o);
    o.n_trees = 16;
    assert_int_equal(importance_compute_of(sp, tr, NULL, &o, &out, &sig, &e), 0);
    assert_string_equal(top_param(out), "x");
    assert_int_equal(json_integer_value(json_object_get(out, "trials")), 81);
    assert_true(json_real_value(json_object_get(json_object_get(out, "importance"), "x")) > 0.9);
    json_decref(out);
    assert_int_equal(importance_compute_of(sp, tr, "f2", &o, &out, &sig, &e), 0);
    assert_string_equal(top_param(out), "y");
    assert_int_equal(json_integer_value(json_object_get(out, "trials")), 80);   /* the one without f2 left out */
    assert_true(json_real_value(json_object_get(json_object_get(out, "importance"), "y")) > 0.9);
    assert_true(sig == importance_signature_of(tr, "f2"));
    assert_true(sig != importance_signature_of(tr, NULL));
    json_decref(out);
    /* An objective no trial reported: nothing ranked. */
    assert_int_equal(importance_compute_of(sp, tr, "f3", &o, &out, &sig, &e), 0);
    assert_int_equal(json_integer_value(json_object_get(out, "trials")), 0);
    assert_int_equal(json_object_size(json_object_get(out, "importance")), 0);
    json_decref(out);

    /* The cache: (experiment, objective) pairs do not see each other's answers. */
    importance_cache *c = importance_cache_new();
    assert_int_equal(importance_cache_get(c, 9, NULL, sp, tr, &out, &e), 0);
    assert_string_equal(top_param(out), "x");
    json_decref(out);
    assert_int_equal(importance_cache_get(c, 9, "f2", sp, tr, &out, &e), 0);
    assert_true(json_is_false(json_object_get(out, "cached")));
    assert_string_equal(top_param(out), "y");
    json_decref(out);
    assert_int_equal(importance_cache_get(c, 9, NULL, sp, tr, &out, &e), 0);   /* still kept */
    assert_true(json_is_true(json_object_get(out, "cached")));
    assert_string_equal(top_param(out), "x");
    json_decref(out);
    assert_int_equal(importance_cache_get(c, 9, "f2", sp, tr, &out, &e), 0);
    assert_true(json_is_true(json_object_get(out, "cached")));
    assert_string_equal(top_param(out), "y");
    json_decref(out);
    /* f2 of trial 1 changes: f2's answer is recomputed, f1's still cached */
    json_object_set_new(json_object_get(json_array_get(tr, 0), "latest"), "f2", json_real(0.7));
    assert_int_equal(importance_cache_get(c, 9, "f2", sp, tr, &out, &e), 0);
    assert_true(json_is_false(json_object_get(out, "cached")));
    json_decref(out);
    assert_int_equal(importance_cache_get(c, 9, NULL, sp, tr, &out, &e), 0);
    assert_true(json_is_true(json_object_get(out, "cached")));
    json_decref(out);
    /* a name longer than any metric is refused, naming objective */
    char longname[HF_METRIC_NAME_MAX + 8];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_int_equal(importance_cache_get(c, 9, longname, sp, tr, &out, &e), HF_EINVAL);
    assert_string_equal(e.field, "objective");
    assert_null(out);
    importance_cache_free(c);
    json_decref(sp);
    json_decref(tr);
}

/* ---------- against Optuna ---------- */

static const char *optuna_python(void)
{
    static char py[256];
    const char *env = getenv("HF_OPTUNA_PYTHON");
    snprintf(py, sizeof py, "%s", env && *env ? env : "/usr/bin/python3");
    return py;
}

/* Optuna's importance of the same trials (mean of 3 seeds), written by a
 * Python script into imp[] in the order of names[]; RET 0, or 1 when
 * Optuna or scikit-learn is not there (skip). */
static int optuna_importance(const json_t *sp, const json_t *tr, const char *const *names, size_t nn, double *imp)
{
    char dir[] = "/tmp/hf_imp_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char in[64], script[64], outp[64], cmd[1024];
    snprintf(in, sizeof in, "%s/trials.json", dir);
    snprintf(script, sizeof script, "%s/fanova.py", dir);
    snprintf(outp, sizeof outp, "%s/out.json", dir);
    json_t *doc = json_pack("{sOsO}", "space", sp, "trials", tr);
    json_dump_file(doc, in, 0);
    json_decref(doc);
    FILE *f = fopen(script, "w");
    fputs("import json, sys\n"
          "try:\n"
          "    import optuna, sklearn\n"
          "except ImportError as e:\n"
          "    print('skip:', e); sys.exit(3)\n"
          "from optuna.distributions import FloatDistribution, IntDistribution, CategoricalDistribution\n"
          "optuna.logging.set_verbosity(optuna.logging.ERROR)\n"
          "d = json.load(open(sys.argv[1]))\n"
          "dist = {}\n"
          "for k, v in d['space'].items():\n"
          "    if not isinstance(v, dict): continue\n"
          "    t = v['type']\n"
          "    if t == 'log': dist[k] = FloatDistribution(v['min'], v['max'], log=True)\n"
          "    elif t == 'uniform': dist[k] = FloatDistribution(v['min'], v['max'])\n"
          "    elif t == 'int': dist[k] = IntDistribution(v['min'], v['max'])\n"
          "    elif t == 'categorical': dist[k] = CategoricalDistribution(v['values'])\n"
          "study = optuna.create_study()\n"
          "for t in d['trials']:\n"
          "    if t['state'] != 'COMPLETED': continue\n"
          "    p = {k: t['hparams'][k] for k in dist}\n"
          "    study.add_trial(optuna.trial.create_trial(params=p, distributions=dist, value=t['objective']))\n"
          "acc = {}\n"
          "for seed in (0, 1, 2):\n"
          "    r = optuna.importance.get_param_importances(study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=seed))\n"
          "    for k, v in r.items(): acc[k] = acc.get(k, 0) + v / 3\n"
          "json.dump(acc, open(sys.argv[2], 'w'))\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' '%s'", optuna_python(), script, in, outp);
    int st = system(cmd);
    int rc = 1;
    json_t *res = json_load_file(outp, 0, NULL);
    if (st == 0 && res) {
        for (size_t i = 0; i < nn; i++) imp[i] = json_number_value(json_object_get(res, names[i]));
        rc = 0;
    }
    json_decref(res);
    unlink(in);
    unlink(script);
    unlink(outp);
    rmdir(dir);
    return rc;
}

static void test_against_optuna(void **state)
{
    (void)state;
    if (access(optuna_python(), X_OK) != 0) {
        print_message("SKIP: %s not found (set HF_OPTUNA_PYTHON to a python with optuna and scikit-learn)\n",
                      optuna_python());
        skip();
    }
    static const char *const names[] = {"lr", "layers", "opt"};
    /* Two data sets: the categorical one above and a numeric one. */
    for (int set = 0; set < 2; set++) {
        json_t *sp = space(), *tr = trials_of(120, 11 + (uint64_t)set);
        if (set == 1) {   /* objective = 3 lr/0.1 + 0.5 layers/8 (no categorical effect) */
            size_t i;
            json_t *t;
            json_array_foreach(tr, i, t) {
                json_t *h = json_object_get(t, "hparams");
                double lr = json_real_value(json_object_get(h, "lr"));
                double ly = (double)json_integer_value(json_object_get(h, "layers"));
                json_object_set_new(t, "objective", json_real(3 * lr / 0.1 + 0.5 * ly / 8));
            }
        }
        double ref[3];
        if (optuna_importance(sp, tr, names, 3, ref)) {
            print_message("SKIP: optuna or scikit-learn not importable by %s\n", optuna_python());
            json_decref(sp);
            json_decref(tr);
            skip();
        }
        json_t *out = NULL;
        hf_jerr e;
        uint64_t sig;
        assert_int_equal(importance_compute(sp, tr, NULL, &out, &sig, &e), 0);
        json_t *imp = json_object_get(out, "importance");
        double mine[3], maxdiff = 0;
        for (int k = 0; k < 3; k++) {
            mine[k] = json_number_value(json_object_get(imp, names[k]));
            maxdiff = fmax(maxdiff, fabs(mine[k] - ref[k]));
        }
        print_message("set %d: hyperfarm lr %.4f layers %.4f opt %.4f | optuna lr %.4f layers %.4f opt %.4f | "
                      "max |diff| %.4f\n", set, mine[0], mine[1], mine[2], ref[0], ref[1], ref[2], maxdiff);
        for (int a = 0; a < 3; a++)   /* the same ranking (pairs closer than the tolerance may swap) */
            for (int b = 0; b < 3; b++)
                if (ref[a] > ref[b] + OPTUNA_TOL) assert_true(mine[a] > mine[b]);
        assert_true(maxdiff <= OPTUNA_TOL);
        json_decref(out);
        json_decref(sp);
        json_decref(tr);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_functions),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_experiment_encoding),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_by_objective),
        cmocka_unit_test(test_against_optuna),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
