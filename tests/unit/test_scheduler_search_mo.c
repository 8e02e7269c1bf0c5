/*
 * test_scheduler_search_mo.c — multi-objective search and constraints
 * (scheduler/search/search_mo.c, the tpe and asha searchers configured with
 * several objectives): the "objective" list and "constraints" parser with
 * field paths, non-dominated sorting, crowding distance and hypervolume
 * against brute-force oracles, MOTPE reproducible by seed, replayed in
 * another order to the same next proposal, ahead of random search on a
 * bi-objective problem, TPE preferring feasible configurations under a
 * constraint, and ASHA ranking a rung by non-dominated sorting with
 * crowding distance as the tie-break (promote and stop modes, replay).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/core/experiment.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_mo.h"
#include "scheduler/search/search_space.h"
#include "tests/unit/search_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------- the parser ---------- */

static void test_parse(void **state)
{
    (void)state;
    static const struct { const char *obj, *con, *field; } bad[] = {
        {"[]", "null", "objective"},
        {"3", "null", "objective"},
        {"[{\"metric\": \"a\", \"goal\": \"minimize\"}, {\"metric\": \"b\", \"goal\": \"lower\"}]", "null",
         "objective[1].goal"},
        {"[{\"metric\": \"a\", \"goal\": \"minimize\"}, {\"metric\": \"a\", \"goal\": \"maximize\"}]", "null",
         "objective[1].metric"},
        {"[{\"metric\": \"a\", \"goal\": \"minimize\", \"weight\": 2}]", "null", "objective[0].weight"},
        {"[{\"metric\": \"a b\", \"goal\": \"minimize\"}]", "null", "objective[0].metric"},
        {"[{\"goal\": \"minimize\"}]", "null", "objective[0].metric"},
        {"[1]", "null", "objective[0]"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "{}", "constraints"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[{\"metric\": \"lat\"}]", "constraints[0]"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[{\"metric\": \"lat\", \"max\": \"20\"}]",
         "constraints[0].max"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[{\"metric\": \"lat\", \"min\": 5, \"max\": 2}]",
         "constraints[0].max"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[{\"metric\": \"lat\", \"max\": 2, \"below\": 1}]",
         "constraints[0].below"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[{\"max\": 2}]", "constraints[0].metric"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[{\"metric\": \"l\", \"max\": 2}, {\"metric\": \"l\", \"min\": 0}]",
         "constraints[1].metric"},
        {"{\"metric\": \"a\", \"goal\": \"minimize\"}", "[7]", "constraints[0]"},
    };
    const char *m[SEARCH_MO_MAX_OBJ], *cm[SEARCH_MO_MAX_CON];
    int g[SEARCH_MO_MAX_OBJ];
    search_objectives o;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *a = load(bad[i].obj), *c = load(bad[i].con);
        hf_jerr e;
        hf_jerr_clear(&e);
        int rc = search_mo_parse(a, c, m, g, cm, &o, &e);
        if (rc != HF_EINVAL || strcmp(e.field, bad[i].field))
            fail_msg("case %zu: rc %d field %s (%s), wanted %s", i, rc, e.field, e.msg, bad[i].field);
        json_decref(a);
        json_decref(c);
    }
    json_t *a = load("[{\"metric\": \"val_loss\", \"goal\": \"minimize\"},"
                     " {\"metric\": \"acc\", \"goal\": \"maximize\"}]");
    json_t *c = load("[{\"metric\": \"latency_ms\", \"max\": 20}, {\"metric\": \"mem\", \"min\": 1, \"max\": 3}]");
    hf_jerr e;
    assert_int_equal(search_mo_parse(a, c, m, g, cm, &o, &e), 0);
    assert_int_equal(o.n_obj, 2);
    assert_int_equal(o.n_con, 2);
    assert_string_equal(m[1], "acc");
    assert_int_equal(g[0], 0);
    assert_int_equal(g[1], 1);
    assert_true(isinf(o.con_min[0]) && o.con_max[0] == 20);
    assert_true(o.con_min[1] == 1 && o.con_max[1] == 3);
    /* Violation: distance outside the bounds, +inf when never reported. */
    search_mo_last l = {0};
    assert_true(isinf(search_mo_violation(&o, &l)));
    search_mo_last_set(&l, 2, 25);
    search_mo_last_set(&l, 3, 0.5);
    assert_true(fabs(search_mo_violation(&o, &l) - 5.5) < 1e-12);
    search_mo_last_set(&l, 2, 20);
    search_mo_last_set(&l, 3, 2);
    assert_true(search_mo_violation(&o, &l) == 0);
    json_decref(a);
    json_decref(c);
}

/* A whole experiment file: a list objective works, pbt and the median
 * rule refuse it naming their field. */
static void test_experiment(void **state)
{
    (void)state;
    static const char *tmpl =
        "{\"name\": \"mo\", \"objective\": [{\"metric\": \"val_loss\", \"goal\": \"minimize\"},"
        " {\"metric\": \"latency_ms\", \"goal\": \"minimize\"}], %s"
        " \"hyperparameters\": {\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}},"
        " \"searcher\": %s, \"trial\": {\"command\": [\"true\"]}}";
    static const struct { const char *con, *srch, *field; } cases[] = {
        {"", "{\"name\": \"tpe\", \"max_trials\": 10}", ""},
        {"\"constraints\": [{\"metric\": \"mem\", \"max\": 2}],", "{\"name\": \"asha\", \"max_epochs\": 9, \"max_trials\": 20}", ""},
        {"", "{\"name\": \"pbt\", \"max_trials\": 16}", "searcher.name"},
        {"", "{\"name\": \"tpe\", \"max_trials\": 10, \"median_stopping\": {}}", "searcher.median_stopping"},
        {"\"constraints\": [{\"metric\": \"mem\"}],", "{\"name\": \"tpe\", \"max_trials\": 10}", "constraints[0]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, tmpl, cases[i].con, cases[i].srch);
        json_t *cfg = load(buf);
        exp_spec sp;
        hf_jerr e;
        int rc = experiment_parse(cfg, &sp, &e);
        if (!cases[i].field[0]) {
            if (rc) fail_msg("case %zu refused: %s: %s", i, e.field, e.msg);
            assert_int_equal(sp.mo.n_obj, 2);
            assert_string_equal(sp.metric, "val_loss");
            assert_string_equal(sp.obj_metric[1], "latency_ms");
            experiment_spec_free(&sp);
        } else if (rc != HF_EINVAL || strcmp(e.field, cases[i].field)) {
            fail_msg("case %zu: rc %d field %s (%s), wanted %s", i, rc, e.field, e.msg, cases[i].field);
        }
        json_decref(cfg);
    }
}

/* ---------- orderings against brute force ---------- */

static uint64_t rng_state = 88172645463325252ull;
static double urand(void)
{
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Hypervolume by inclusion-exclusion over every subset (n <= 10). */
static double hv_brute(const double *p, int n, int m, const double *ref)
{
    double hv = 0;
    for (unsigned mask = 1; mask < (1u << n); mask++) {
        double vol = 1;
        int bits = 0;
        for (int j = 0; j < m; j++) {
            double worst = -INFINITY;
            for (int i = 0; i < n; i++) if (mask & (1u << i)) worst = fmax(worst, p[i * m + j]);
            vol *= fmax(0, ref[j] - worst);
        }
        for (int i = 0; i < n; i++) bits += (mask >> i) & 1;
        hv += (bits & 1) ? vol : -vol;
    }
    return hv;
}

static void test_hypervolume(void **state)
{
    (void)state;
    static const double a[] = {1, 2, 2, 1}, ra[] = {3, 3};
    assert_true(fabs(search_mo_hypervolume(a, 2, 2, ra) - 3) < 1e-12);
    static const double b[] = {0, 0, 0.5, 0.5, 0.5, 0}, rb[] = {1, 1, 1};
    assert_true(fabs(search_mo_hypervolume(b, 2, 3, rb) - 0.625) < 1e-12);
    /* A point outside the box adds nothing. */
    static const double c[] = {0.5, 0.5, 2, 0}, rc2[] = {1, 1};
    assert_true(fabs(search_mo_hypervolume(c, 2, 2, rc2) - 0.25) < 1e-12);
    for (int trial = 0; trial < 200; trial++) {
        int m = 2 + trial % 3, n = 1 + trial % 9;
        double p[10 * 4], ref[4] = {1, 1, 1, 1};
        for (int i = 0; i < n * m; i++) p[i] = urand();
        double want = hv_brute(p, n, m, ref), got = search_mo_hypervolume(p, (size_t)n, m, ref);
        if (fabs(want - got) > 1e-9) fail_msg("m %d n %d: hv %g, brute force %g", m, n, got, want);
    }
}

static void test_nds_crowding(void **state)
{
    (void)state;
    /* Higher is better. Front 0: (3,1) (2,2) (1,3); front 1: (1,1) (2,0.5); front 2: (0,0). */
    static const double y[] = {1, 1, 3, 1, 0, 0, 2, 2, 1, 3, 2, 0.5};
    int rank[6];
    assert_int_equal(search_mo_nds(y, 6, 2, rank), 0);
    static const int want[] = {1, 0, 2, 0, 0, 1};
    for (int i = 0; i < 6; i++) assert_int_equal(rank[i], want[i]);
    /* Random points: rank 0 iff dominated by none; rank r+1 dominated by a rank-r point. */
    for (int trial = 0; trial < 50; trial++) {
        double p[40 * 3];
        int r[40], n = 40, m = 2 + trial % 2;
        for (int i = 0; i < n * m; i++) p[i] = floor(urand() * 6);   /* ties on purpose */
        assert_int_equal(search_mo_nds(p, (size_t)n, m, r), 0);
        for (int i = 0; i < n; i++) {
            int dom_by_same_or_better = 0, dom_by_prev = r[i] == 0;
            for (int j = 0; j < n; j++) {
                if (!search_mo_dominates(p + j * m, p + i * m, m)) continue;
                if (r[j] >= r[i]) dom_by_same_or_better = 1;
                if (r[j] == r[i] - 1) dom_by_prev = 1;
            }
            assert_false(dom_by_same_or_better);
            assert_true(dom_by_prev);
        }
    }
    /* Crowding: the extremes are infinite, the middle point's is the sum of normalised gaps. */
    size_t idx[3] = {1, 3, 4};
    double cd[3];
    assert_int_equal(search_mo_crowding(y, idx, 3, 2, cd), 0);
    assert_true(isinf(cd[0]) && isinf(cd[2]));
    assert_true(fabs(cd[1] - 2.0) < 1e-12);
    /* Order: front 0 (extremes first, then the middle), front 1, front 2; infeasible last. */
    size_t ord[6];
    double viol[6] = {0, 0, 0, 0, 0, 0};
    assert_int_equal(search_mo_order(y, 6, 2, viol, NULL, ord), 0);
    static const size_t want_ord[] = {1, 4, 3, 0, 5, 2};
    for (int i = 0; i < 6; i++) assert_int_equal(ord[i], want_ord[i]);
    viol[1] = 2; viol[3] = 1;
    assert_int_equal(search_mo_order(y, 6, 2, viol, NULL, ord), 0);
    /* Without 1 and 3 (infeasible, last by violation): front 0 is {4, 5},
     * then 0 (dominated by 4), then 2. */
    static const size_t want_ord2[] = {4, 5, 0, 2, 3, 1};
    for (int i = 0; i < 6; i++) assert_int_equal(ord[i], want_ord2[i]);
}

/* ---------- driving a searcher on a bi-objective problem ---------- */

/* A bi-objective problem (both minimised): ZDT1 in 4 dimensions. */
static void zdt1(const json_t *hp, double *f)
{
    double x[4], g = 0;
    static const char *nm[4] = {"x0", "x1", "x2", "x3"};
    for (int i = 0; i < 4; i++) x[i] = json_number_value(json_object_get(hp, nm[i]));
    for (int i = 1; i < 4; i++) g += x[i];
    g = 1 + 9 * g / 3;
    f[0] = x[0];
    f[1] = g * (1 - sqrt(x[0] / g));
}

static const char *ZSPACE = "{\"x0\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                            " \"x1\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                            " \"x2\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                            " \"x3\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}";

typedef struct run_log { double f[200][2]; json_t *hp[200]; int n; } run_log;

/* Run n trials one at a time; objectives reported (negated: higher is
 * better) as slot 0 via on_report and slot 1 via on_metric, the
 * constraint "x1 >= 0.7" (when con) as slot 2. */
static void drive_mo(searcher *s, const searcher_ops *ops, int n, int con, run_log *lg)
{
    lg->n = 0;
    for (int i = 0; i < n; i++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, i, 0, &nw), SEARCH_CREATE);
        ops->on_created(s, 1000 + i, i, nw.hparams, nw.budget, 0);
        double f[2];
        zdt1(nw.hparams, f);
        if (con && ops->on_metric)
            ops->on_metric(s, 1000 + i, 2, 1, json_number_value(json_object_get(nw.hparams, "x1")));
        if (ops->on_metric) ops->on_metric(s, 1000 + i, 1, 1, -f[1]);
        ops->on_report(s, 1000 + i, 1, -f[0]);
        ops->on_done(s, 1000 + i, SEARCH_COMPLETED, -f[0]);
        lg->f[i][0] = f[0]; lg->f[i][1] = f[1];
        lg->hp[i] = nw.hparams;
        lg->n++;
    }
}

static void log_free(run_log *lg)
{
    for (int i = 0; i < lg->n; i++) json_decref(lg->hp[i]);
}

static searcher *mo_searcher(const char *cfg_json, const search_space *sp, uint64_t seed, int ncon)
{
    json_t *cfg = load(cfg_json);
    const searcher_ops *ops = search_find(json_string_value(json_object_get(cfg, "name")));
    searcher *s = ops->create(cfg, sp, 0, seed);
    s->ops = ops;
    search_objectives o = {.n_obj = 2, .n_con = ncon};
    o.con_min[0] = 0.7;     /* x1 >= 0.7: against ZDT1's optimum (x1 = 0) */
    o.con_max[0] = INFINITY;
    if (ops->configure) assert_int_equal(ops->configure(s, &o), 0);
    json_decref(cfg);
    return s;
}

static double log_hv(const run_log *lg)
{
    static const double ref[2] = {1.1, 11};
    return search_mo_hypervolume(&lg->f[0][0], (size_t)lg->n, 2, ref);
}

static void test_motpe_beats_random(void **state)
{
    (void)state;
    search_space *sp = space_of(ZSPACE);
    double hv_tpe[7], hv_rnd[7];
    for (int seed = 0; seed < 7; seed++) {
        run_log a, b;
        searcher *t = mo_searcher("{\"name\": \"tpe\", \"max_trials\": 80}", sp, (uint64_t)seed, 0);
        searcher *r = mo_searcher("{\"name\": \"random\", \"max_trials\": 80}", sp, (uint64_t)seed, 0);
        drive_mo(t, t->ops, 80, 0, &a);
        drive_mo(r, r->ops, 80, 0, &b);
        hv_tpe[seed] = log_hv(&a);
        hv_rnd[seed] = log_hv(&b);
        log_free(&a); log_free(&b);
        t->ops->destroy(t); r->ops->destroy(r);
    }
    int wins = 0;
    for (int i = 0; i < 7; i++) wins += hv_tpe[i] > hv_rnd[i];
    print_message("MOTPE hypervolume ahead of random on %d of 7 seeds\n", wins);
    assert_true(wins >= 6);
    search_space_free(sp);
}

/* Same seed, same proposals; a searcher rebuilt by replay (results in
 * another order) proposes what the live one does. */
static void test_motpe_reproducible_replay(void **state)
{
    (void)state;
    search_space *sp = space_of(ZSPACE);
    const char *cfg = "{\"name\": \"tpe\", \"max_trials\": 40}";
    run_log a, b;
    searcher *s1 = mo_searcher(cfg, sp, 5, 1), *s2 = mo_searcher(cfg, sp, 5, 1);
    drive_mo(s1, s1->ops, 30, 1, &a);
    drive_mo(s2, s2->ops, 30, 1, &b);
    for (int i = 0; i < 30; i++) assert_true(json_equal(a.hp[i], b.hp[i]));
    /* Replay in reverse order of ends, metrics before or after the objective. */
    searcher *s3 = mo_searcher(cfg, sp, 5, 1);
    const searcher_ops *ops = s3->ops;
    for (int i = 0; i < 30; i++) ops->on_created(s3, 1000 + i, i, a.hp[i], 0, 0);
    for (int i = 29; i >= 0; i--) {
        ops->on_report(s3, 1000 + i, 1, -a.f[i][0]);
        ops->on_metric(s3, 1000 + i, 1, 1, -a.f[i][1]);
        ops->on_metric(s3, 1000 + i, 2, 1, json_number_value(json_object_get(a.hp[i], "x1")));
        ops->on_done(s3, 1000 + i, SEARCH_COMPLETED, -a.f[i][0]);
    }
    search_new n1 = {0}, n3 = {0};
    assert_int_equal(s1->ops->next(s1, 30, 0, &n1), SEARCH_CREATE);
    assert_int_equal(ops->next(s3, 30, 0, &n3), SEARCH_CREATE);
    assert_true(json_equal(n1.hparams, n3.hparams));
    json_decref(n1.hparams); json_decref(n3.hparams);
    log_free(&a); log_free(&b);
    s1->ops->destroy(s1); s2->ops->destroy(s2); ops->destroy(s3);
    search_space_free(sp);
}

/* With the constraint x1 >= 0.7 (30 % of the prior, away from ZDT1's
 * optimum x1 = 0), TPE's proposals after the startup trials are feasible
 * well above the prior's 30 %; without it, well below. */
static void test_tpe_prefers_feasible(void **state)
{
    (void)state;
    search_space *sp = space_of(ZSPACE);
    int feas_con = 0, feas_free = 0, total = 0;
    for (int seed = 0; seed < 5; seed++) {
        run_log a, b;
        searcher *c = mo_searcher("{\"name\": \"tpe\", \"max_trials\": 60}", sp, (uint64_t)seed, 1);
        searcher *f = mo_searcher("{\"name\": \"tpe\", \"max_trials\": 60}", sp, (uint64_t)seed, 0);
        drive_mo(c, c->ops, 60, 1, &a);
        drive_mo(f, f->ops, 60, 0, &b);
        for (int i = 20; i < 60; i++) {
            feas_con += json_number_value(json_object_get(a.hp[i], "x1")) >= 0.7;
            feas_free += json_number_value(json_object_get(b.hp[i], "x1")) >= 0.7;
            total++;
        }
        log_free(&a); log_free(&b);
        c->ops->destroy(c); f->ops->destroy(f);
    }
    print_message("feasible proposals: %d of %d with the constraint, %d without\n", feas_con, total, feas_free);
    /* The prior puts 30 % there; measured 104 of 200 with, 38 without. */
    assert_true(feas_con > 0.45 * total);
    assert_true(feas_con > 2 * feas_free);
    search_space_free(sp);
}

/* Single objective with a constraint: the infeasible best value does not win. */
static void test_tpe_single_constrained(void **state)
{
    (void)state;
    search_space *sp = space_of("{\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}");
    json_t *cfg = load("{\"name\": \"tpe\", \"max_trials\": 60}");
    const searcher_ops *ops = search_find("tpe");
    searcher *s = ops->create(cfg, sp, 1, 3);
    search_objectives o = {.n_obj = 1, .n_con = 1};
    o.con_min[0] = -INFINITY;
    o.con_max[0] = 0.5;   /* feasible: x <= 0.5; objective: maximise x -> optimum at 0.5 */
    ops->configure(s, &o);
    int near = 0;
    for (int i = 0; i < 60; i++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, i, 0, &nw), SEARCH_CREATE);
        double x = json_number_value(json_object_get(nw.hparams, "x"));
        ops->on_created(s, i + 1, i, nw.hparams, 0, 0);
        ops->on_metric(s, i + 1, 1, 1, x);
        ops->on_report(s, i + 1, 1, x);
        ops->on_done(s, i + 1, SEARCH_COMPLETED, x);
        if (i >= 30 && x > 0.35 && x <= 0.55) near++;
        json_decref(nw.hparams);
    }
    print_message("last 30 proposals within [0.35, 0.55]: %d\n", near);
    assert_true(near >= 18);
    ops->destroy(s);
    json_decref(cfg);
    search_space_free(sp);
}

/* ---------- ASHA ---------- */

/* Five trials at rung 0 (budget 1) of an eta=2 ASHA, two objectives:
 * A (0.9, 0.1) B (0.1, 0.9) C (0.5, 0.5) on the front, D (0.4, 0.4) and
 * E (0.05, 0.05) dominated. floor(5/2) = 2 are promoted: the extremes A
 * and B (crowding distance infinite), not C, although C is on the front
 * and has the best sum. */
static void test_asha_promote_nds(void **state)
{
    (void)state;
    search_space *sp = space_of("{\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}");
    const char *cfg = "{\"name\": \"asha\", \"max_epochs\": 4, \"reduction_factor\": 2, \"max_trials\": 5}";
    static const double v[5][2] = {{0.9, 0.1}, {0.1, 0.9}, {0.5, 0.5}, {0.4, 0.4}, {0.05, 0.05}};
    searcher *s = mo_searcher(cfg, sp, 1, 0);
    const searcher_ops *ops = s->ops;
    for (int i = 0; i < 5; i++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, i, i, &nw), SEARCH_CREATE);
        assert_int_equal(nw.resume_trial, 0);
        assert_int_equal(nw.budget, 1);
        ops->on_created(s, 10 + i, i, nw.hparams, nw.budget, 0);
        json_decref(nw.hparams);
    }
    for (int i = 0; i < 5; i++) {
        ops->on_metric(s, 10 + i, 1, 1, v[i][1]);
        assert_int_equal(ops->on_report(s, 10 + i, 1, v[i][0]), SEARCH_CONTINUE);
        ops->on_done(s, 10 + i, SEARCH_COMPLETED, v[i][0]);
    }
    int64_t got[3];
    for (int j = 0; j < 3; j++) {
        search_new nw = {0};
        int rc = ops->next(s, 5, 0, &nw);
        got[j] = rc == SEARCH_CREATE ? nw.resume_trial : -1;
        if (rc == SEARCH_CREATE) {
            assert_int_equal(nw.budget, 2);
            json_decref(nw.hparams);
        }
    }
    /* A then B (equal position class: A older), then nothing more. */
    assert_int_equal(got[0], 10);
    assert_int_equal(got[1], 11);
    assert_int_not_equal(got[2], 12);
    assert_int_not_equal(got[2], 13);
    ops->destroy(s);
    search_space_free(sp);
}

/* With a constraint, an infeasible front point is ranked below feasible
 * dominated ones; stop mode stops the trials outside the top 1/eta. */
static void test_asha_stop_constrained(void **state)
{
    (void)state;
    search_space *sp = space_of("{\"x\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}");
    const char *cfg = "{\"name\": \"asha\", \"max_epochs\": 4, \"reduction_factor\": 2, \"mode\": \"stop\","
                      " \"max_trials\": 8}";
    searcher *s = mo_searcher(cfg, sp, 1, 1);   /* slot 2 >= 0.7 */
    const searcher_ops *ops = s->ops;
    /* Trial values at epoch 1: (obj0, obj1, constraint). */
    static const double v[4][3] = {{0.9, 0.9, 0.5},   /* best but infeasible */
                                   {0.2, 0.2, 0.9},
                                   {0.3, 0.1, 0.9},
                                   {0.1, 0.1, 0.9}};  /* dominated by both feasible */
    int stopped[4];
    for (int i = 0; i < 4; i++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, i, i, &nw), SEARCH_CREATE);
        ops->on_created(s, 20 + i, i, nw.hparams, nw.budget, 0);
        json_decref(nw.hparams);
        ops->on_metric(s, 20 + i, 2, 1, v[i][2]);
        ops->on_metric(s, 20 + i, 1, 1, v[i][1]);
        stopped[i] = ops->on_report(s, 20 + i, 1, v[i][0]) == SEARCH_STOP;
    }
    /* Trial 0 is decided only once eta = 2 results exist: it goes on. Trial 1
     * (2 results: 1 feasible first) top 1: trial 1 ranks above 0. Trial 2:
     * 3 results, top 1 is trial 1 or 2 (both on the feasible front; 2 is an
     * extreme of a 2-point front, as is 1: the older, 1, first) -> 2 stops.
     * Trial 3: dominated -> stops. */
    assert_int_equal(stopped[0], 0);
    assert_int_equal(stopped[1], 0);
    assert_int_equal(stopped[2], 1);
    assert_int_equal(stopped[3], 1);
    ops->destroy(s);
    search_space_free(sp);
}

/* A rebuilt ASHA (replay: creations, then reports with metrics, then ends)
 * promotes and proposes exactly what the live one does, over a longer run. */
static void asha_replay_check(const char *cfg)
{
    search_space *sp = space_of(ZSPACE);
    searcher *live = mo_searcher(cfg, sp, 9, 0);
    const searcher_ops *ops = live->ops;
    json_t *hps[64] = {0};
    int64_t budget[64] = {0};
    int ntr = 0;
    /* Event log to replay: (trial, epoch, f0, f1). */
    struct { int t; int64_t ep; double f0, f1; } ev[400];
    int nev = 0;
    for (int step = 0; step < 45; step++) {   /* stops while new trials remain: next() then samples */
        search_new nw = {0};
        int rc = ops->next(live, ntr, 0, &nw);
        if (rc != SEARCH_CREATE) break;
        int t;
        if (nw.resume_trial) {
            t = (int)(nw.resume_trial - 100);
            json_decref(nw.hparams);
        } else {
            t = ntr++;
            hps[t] = nw.hparams;
        }
        budget[t] = nw.budget;
        ops->on_created(live, 100 + t, t, hps[t], budget[t], 0);
        double f[2];
        zdt1(hps[t], f);
        /* The objectives improve with epochs. */
        double f0 = -f[0] * (1 + 1.0 / (double)budget[t]), f1 = -f[1] * (1 + 1.0 / (double)budget[t]);
        ops->on_metric(live, 100 + t, 1, (double)budget[t], f1);
        ops->on_report(live, 100 + t, (double)budget[t], f0);
        ops->on_done(live, 100 + t, SEARCH_COMPLETED, f0);
        ev[nev].t = t; ev[nev].ep = budget[t]; ev[nev].f0 = f0; ev[nev].f1 = f1; nev++;
    }
    assert_true(ntr >= 15);
    searcher *re = mo_searcher(cfg, sp, 9, 0);
    for (int t = 0; t < ntr; t++) ops->on_created(re, 100 + t, t, hps[t], budget[t], 0);
    for (int i = 0; i < nev; i++) {
        ops->on_metric(re, 100 + ev[i].t, 1, (double)ev[i].ep, ev[i].f1);
        ops->on_report(re, 100 + ev[i].t, (double)ev[i].ep, ev[i].f0);
    }
    for (int t = 0; t < ntr; t++) ops->on_done(re, 100 + t, SEARCH_COMPLETED, NAN);
    json_t *d1 = ops->describe(live), *d2 = ops->describe(re);
    assert_true(json_equal(d1, d2));
    json_decref(d1); json_decref(d2);
    int fresh = 0;
    for (int k = 0; k < 5; k++) {
        search_new a = {0}, b = {0};
        int r1 = ops->next(live, ntr, 0, &a), r2 = ops->next(re, ntr, 0, &b);
        assert_int_equal(r1, r2);
        assert_int_equal(a.resume_trial, b.resume_trial);
        fresh += r1 == SEARCH_CREATE && !a.resume_trial;
        if (r1 == SEARCH_CREATE) {
            assert_true(json_equal(a.hparams, b.hparams));
            json_decref(a.hparams); json_decref(b.hparams);
        }
    }
    assert_true(fresh > 0);   /* a new trial's draw was compared too */
    for (int t = 0; t < ntr; t++) json_decref(hps[t]);
    ops->destroy(live); ops->destroy(re);
    search_space_free(sp);
}

static void test_asha_replay(void **state)
{
    (void)state;
    asha_replay_check("{\"name\": \"asha\", \"max_epochs\": 9, \"reduction_factor\": 3, \"max_trials\": 40}");
    /* The TPE sampler over multi-objective rung rankings (BOHB-style). */
    asha_replay_check("{\"name\": \"asha\", \"max_epochs\": 9, \"reduction_factor\": 3, \"max_trials\": 40,"
                      " \"sampler\": \"tpe\", \"n_startup_trials\": 4}");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_experiment),
        cmocka_unit_test(test_hypervolume),
        cmocka_unit_test(test_nds_crowding),
        cmocka_unit_test(test_motpe_beats_random),
        cmocka_unit_test(test_motpe_reproducible_replay),
        cmocka_unit_test(test_tpe_prefers_feasible),
        cmocka_unit_test(test_tpe_single_constrained),
        cmocka_unit_test(test_asha_promote_nds),
        cmocka_unit_test(test_asha_stop_constrained),
        cmocka_unit_test(test_asha_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
