/*
 * test_scheduler_search_asha.c — ASHA/Hyperband: rungs and brackets,
 * config validation with field paths, promotion = resume of the same trial
 * with a larger budget, the end condition after max_trials, stopping a
 * trial that overruns its budget, "stop" mode, a rebuilt-by-replay
 * searcher deciding exactly like the live one, and ASHA spending far fewer
 * epochs than random search to find a good trial on a simulated workload.
 * With "cost_metric" the TPE sampler favours the cheaper of two equally
 * good choices, and a replayed searcher still decides like the live one.
 * With "time_metric" the rungs are times: a trial stops where its summed
 * reports reach a rung, waits there, is promoted by its value at that
 * time, and ASHA spends less simulated training time to a target when
 * configurations differ in cost per epoch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_err.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"
#include "tests/unit/search_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static search_space *space(void)
{
    return space_of("{\"q\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                     " \"opt\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\"]}}");
}

static void test_validate(void **state)
{
    (void)state;
    search_space *sp = space();
    static const bad_searcher bad[] = {
        {"{\"name\": \"asha\"}", "searcher.max_epochs"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 1}", "searcher.reduction_factor"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": \"3\"}", "searcher.reduction_factor"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"min_epochs\": 27}", "searcher.min_epochs"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"min_epochs\": 0}", "searcher.min_epochs"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"brackets\": 5}", "searcher.brackets"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"brackets\": 0}", "searcher.brackets"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"mode\": \"halve\"}", "searcher.mode"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"gamma\": 0.2}", "searcher.gamma"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": \"bayes\"}", "searcher.sampler"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": 1}", "searcher.sampler"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"n_startup_trials\": 5}", "searcher.n_startup_trials"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": \"tpe\", \"n_startup_trials\": 1}",
         "searcher.n_startup_trials"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"cost_metric\": \"epoch_seconds\"}", "searcher.cost_metric"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": \"random\", \"cost_metric\": \"s\"}",
         "searcher.cost_metric"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": \"tpe\", \"cost_metric\": 5}", "searcher.cost_metric"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": \"tpe\", \"cost_metric\": [\"s\"]}",
         "searcher.cost_metric"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"sampler\": \"tpe\", \"cost_metric\": \"s\", \"cost_cooling\": true}",
         "searcher.cost_cooling"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80, \"sampler\": \"tpe\", \"cost_cooling\": true}",
         "searcher.cost_cooling"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80, \"sampler\": \"tpe\", \"cost_metric\": \"s\","
         " \"cost_cooling\": \"yes\"}", "searcher.cost_cooling"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"epoch_seconds\"}", "searcher.min_time"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"a b\", \"min_time\": 1}", "searcher.time_metric"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": 3, \"min_time\": 1}", "searcher.time_metric"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"s\", \"min_time\": 0}", "searcher.min_time"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"s\", \"min_time\": \"1\"}", "searcher.min_time"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"s\", \"min_time\": 2, \"max_time\": 2}",
         "searcher.max_time"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"min_time\": 2}", "searcher.min_time"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"max_time\": 2}", "searcher.max_time"},
        {"{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"s\", \"min_time\": 1, \"max_time\": 9,"
         " \"brackets\": 4}", "searcher.brackets"},
        {"{\"name\": \"tpe\", \"max_trials\": 9, \"time_metric\": \"s\"}", "searcher.time_metric"},
    };
    expect_refused(bad, sizeof bad / sizeof bad[0], sp);
    static const char *const good[] = {
        "{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"min_epochs\": 1,"
        " \"brackets\": 4, \"mode\": \"stop\", \"max_trials\": 50}",
        "{\"name\": \"asha\", \"max_epochs\": 9, \"sampler\": \"tpe\", \"n_startup_trials\": 4}",
        "{\"name\": \"asha\", \"max_epochs\": 9, \"sampler\": \"tpe\", \"cost_metric\": \"epoch_seconds\"}",
        "{\"name\": \"asha\", \"max_epochs\": 9, \"max_trials\": 80, \"sampler\": \"tpe\", \"cost_metric\": \"s\","
        " \"cost_cooling\": true}",
        "{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"epoch_seconds\", \"min_time\": 0.5}",
        "{\"name\": \"asha\", \"max_epochs\": 27, \"time_metric\": \"s\", \"min_time\": 1, \"max_time\": 9,"
        " \"brackets\": 3, \"mode\": \"stop\", \"sampler\": \"tpe\"}",
    };
    expect_accepted(good, sizeof good / sizeof good[0], sp);
    search_space_free(sp);
}

static void test_rungs(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *c = load("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"brackets\": 2}");
    const searcher_ops *ops = search_find("asha");
    searcher *s = ops->create(c, sp, 1, 1);
    json_t *d = ops->describe(s);
    json_t *b0 = json_object_get(json_array_get(json_object_get(d, "brackets"), 0), "rungs");
    json_t *b1 = json_object_get(json_array_get(json_object_get(d, "brackets"), 1), "rungs");
    assert_int_equal(json_array_size(b0), 4);
    assert_int_equal(json_array_size(b1), 3);
    static const int64_t w0[] = {1, 3, 9, 27}, w1[] = {3, 9, 27};
    for (size_t k = 0; k < 4; k++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(b0, k), "budget")), w0[k]);
    for (size_t k = 0; k < 3; k++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(b1, k), "budget")), w1[k]);
    /* New trials alternate between the brackets' lowest rungs. */
    for (int64_t n = 0; n < 4; n++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, n, n, &nw), SEARCH_CREATE);
        assert_int_equal(nw.budget, n % 2 ? 3 : 1);
        assert_int_equal(nw.resume_trial, 0);
        json_decref(nw.hparams);
    }
    json_decref(d);
    ops->destroy(s);
    json_decref(c);
    search_space_free(sp);
}

static void test_promotion(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *c = load("{\"name\": \"asha\", \"max_epochs\": 9, \"reduction_factor\": 3, \"max_trials\": 10}");
    const searcher_ops *ops = search_find("asha");
    searcher *s = ops->create(c, sp, 1, 5);
    json_t *hp[10];
    for (int64_t n = 0; n < 9; n++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, n, n, &nw), SEARCH_CREATE);
        assert_int_equal(nw.budget, 1);
        ops->on_created(s, 10 + n, n, nw.hparams, nw.budget, 0);
        hp[n] = nw.hparams;
    }
    /* Trial 10+n reaches 0.1*(n+1) at epoch 1 and ends at its budget. */
    for (int64_t n = 0; n < 9; n++) {
        assert_int_equal(ops->on_report(s, 10 + n, 1, 0.1 * (double)(n + 1)), SEARCH_CONTINUE);
        ops->on_done(s, 10 + n, SEARCH_COMPLETED, 0.1 * (double)(n + 1));
    }
    /* The top 9/3 = 3 are promoted to 3 epochs, best first, same trials. */
    for (int k = 0; k < 3; k++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, 9, k, &nw), SEARCH_CREATE);
        assert_int_equal(nw.resume_trial, 18 - k);
        assert_int_equal(nw.budget, 3);
        assert_true(json_equal(nw.hparams, hp[8 - k]));
        json_decref(nw.hparams);
    }
    /* Nothing more to promote: a new trial. */
    search_new nw = {0};
    assert_int_equal(ops->next(s, 9, 3, &nw), SEARCH_CREATE);
    assert_int_equal(nw.resume_trial, 0);
    assert_int_equal(nw.budget, 1);
    ops->on_created(s, 19, 9, nw.hparams, 1, 0);
    hp[9] = nw.hparams;
    /* Promoted trials continue: reports at epochs 2..3; an overrun stops. */
    assert_int_equal(ops->on_report(s, 18, 2, 0.91), SEARCH_CONTINUE);
    assert_int_equal(ops->on_report(s, 18, 3, 0.95), SEARCH_CONTINUE);
    assert_int_equal(ops->on_report(s, 18, 4, 0.96), SEARCH_STOP);
    ops->on_done(s, 18, SEARCH_STOPPED, 0.96);
    ops->on_report(s, 17, 3, 0.85);
    ops->on_done(s, 17, SEARCH_COMPLETED, 0.85);
    /* max_trials (10) exist; rung 3 has 2 results, 2/3 = 0: nobody to
     * promote yet, trials still run -> WAIT. */
    assert_int_equal(ops->next(s, 10, 2, &nw), SEARCH_WAIT);
    ops->on_report(s, 16, 3, 0.75);
    ops->on_done(s, 16, SEARCH_COMPLETED, 0.75);
    /* Now 3 results at rung 3: the best (trial 18, stopped at its budget
     * overrun) goes to the top rung although max_trials exist. */
    assert_int_equal(ops->next(s, 10, 1, &nw), SEARCH_CREATE);
    assert_int_equal(nw.resume_trial, 18);
    assert_int_equal(nw.budget, 9);
    json_decref(nw.hparams);
    ops->on_report(s, 18, 9, 0.97);
    ops->on_done(s, 18, SEARCH_COMPLETED, 0.97);
    ops->on_report(s, 19, 1, 0.05);
    ops->on_done(s, 19, SEARCH_COMPLETED, 0.05);
    assert_int_equal(ops->next(s, 10, 0, &nw), SEARCH_DONE);
    json_t *d = ops->describe(s);
    json_t *r0 = json_array_get(json_object_get(json_array_get(json_object_get(d, "brackets"), 0), "rungs"), 0);
    assert_int_equal(json_integer_value(json_object_get(r0, "results")), 10);
    assert_int_equal(json_integer_value(json_object_get(r0, "promoted")), 3);
    json_decref(d);
    for (int n = 0; n < 10; n++) json_decref(hp[n]);
    ops->destroy(s);
    json_decref(c);
    search_space_free(sp);
}

static void test_stop_mode(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *c = load("{\"name\": \"asha\", \"max_epochs\": 9, \"reduction_factor\": 3, \"mode\": \"stop\"}");
    const searcher_ops *ops = search_find("asha");
    searcher *s = ops->create(c, sp, 1, 5);
    for (int64_t n = 0; n < 6; n++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, n, n, &nw), SEARCH_CREATE);
        assert_int_equal(nw.budget, 9);
        ops->on_created(s, 1 + n, n, nw.hparams, nw.budget, 0);
        json_decref(nw.hparams);
    }
    /* First two at rung 1: too few values to judge. */
    assert_int_equal(ops->on_report(s, 1, 1, 0.5), SEARCH_CONTINUE);
    assert_int_equal(ops->on_report(s, 2, 1, 0.6), SEARCH_CONTINUE);
    /* Third: 3 values, it is the worst -> stopped, and stays stopped. */
    assert_int_equal(ops->on_report(s, 3, 1, 0.1), SEARCH_STOP);
    assert_int_equal(ops->on_report(s, 3, 2, 0.9), SEARCH_STOP);
    /* Fourth is the best so far -> continues; fifth in the middle -> stops. */
    assert_int_equal(ops->on_report(s, 4, 1, 0.7), SEARCH_CONTINUE);
    assert_int_equal(ops->on_report(s, 5, 1, 0.55), SEARCH_STOP);
    /* Reports between rungs never stop. */
    assert_int_equal(ops->on_report(s, 6, 0.5, 0.0), SEARCH_CONTINUE);
    ops->destroy(s);
    json_decref(c);
    search_space_free(sp);
}

/* ---- simulated workload: trial quality q, curve q*(1-exp(-e/4)) ---- */

typedef struct sim {
    const searcher_ops *ops;
    searcher *s;
    int64_t  created, epochs_total;
    int64_t  id[64], budget[64], at[64];   /* running trials: epoch reached */
    double   q[64];
    int      nrun;
    double   best;
    int64_t  epochs_to_target;
    json_t  *log;                          /* event log for replay */
    int      cost;                         /* report a cost (slot 1) before each objective */
    int      time;                         /* report the epoch's time (slot 2, time_metric) likewise */
    double   c[64];                        /* running trials: cost per epoch */
    double   time_total, time_to_target;   /* summed costs: the simulated training time */
} sim;

/* The simulated cost per epoch: "opt" b is 10x as costly as a (the curve
 * does not depend on it). */
static double sim_cost(const json_t *hp)
{
    const char *o = json_string_value(json_object_get(hp, "opt"));
    return o && !strcmp(o, "b") ? 1.0 : 0.1;
}

static double curve(double q, int64_t e)
{
    return q * (1 - exp(-(double)e / 4.0));
}

static void log_ev(sim *m, json_t *ev)
{
    if (m->log) json_array_append_new(m->log, ev);
    else json_decref(ev);
}

/* Run until the searcher is done; `conc` trials in flight; each step
 * advances every running trial one epoch. */
static void sim_run(sim *m, int conc, int64_t max_steps, double target)
{
    json_t *hpq[512] = {0};
    m->best = 0;
    m->epochs_to_target = -1;
    m->time_to_target = -1;
    for (int64_t step = 0; step < max_steps; step++) {
        while (m->nrun < conc) {
            search_new nw = {0};
            int rc = m->ops->next(m->s, m->created, m->nrun, &nw);
            if (rc != SEARCH_CREATE) { if (rc == SEARCH_DONE && m->nrun == 0) goto end; break; }
            int r = m->nrun++;
            if (nw.resume_trial) {
                m->id[r] = nw.resume_trial;
                m->q[r] = json_real_value(json_object_get(nw.hparams, "q"));
                m->at[r] = m->budget[r] = 0;
                /* find where it stopped: its previous budget */
                json_t *prev = hpq[nw.resume_trial];
                m->at[r] = json_integer_value(json_object_get(prev, "at"));
                json_object_set_new(prev, "budget", json_integer(nw.budget));
                log_ev(m, json_pack("{s:s, s:I, s:I}", "ev", "resume", "id", (json_int_t)nw.resume_trial,
                                    "budget", (json_int_t)nw.budget));
            } else {
                m->id[r] = m->created + 1;
                m->q[r] = json_real_value(json_object_get(nw.hparams, "q"));
                m->at[r] = 0;
                m->ops->on_created(m->s, m->id[r], m->created, nw.hparams, nw.budget, 0);
                hpq[m->id[r]] = json_pack("{s:I, s:I}", "at", (json_int_t)0, "budget", (json_int_t)nw.budget);
                log_ev(m, json_pack("{s:s, s:I, s:I, s:O, s:I}", "ev", "created", "id", (json_int_t)m->id[r],
                                    "index", (json_int_t)m->created, "hp", nw.hparams,
                                    "budget", (json_int_t)nw.budget));
                m->created++;
            }
            m->budget[r] = nw.budget ? nw.budget : 27;   /* 0 = the searcher's max */
            m->c[r] = sim_cost(nw.hparams);
            json_decref(nw.hparams);
        }
        if (m->nrun == 0) goto end;
        for (int r = 0; r < m->nrun;) {
            m->at[r]++;
            m->epochs_total++;
            double v = curve(m->q[r], m->at[r]);
            double c = m->c[r] * (1 + 0.01 * (double)m->at[r]);
            m->time_total += c;
            if (v > m->best) m->best = v;
            if (v >= target && m->epochs_to_target < 0) m->epochs_to_target = m->epochs_total;
            if (v >= target && m->time_to_target < 0) m->time_to_target = m->time_total;
            for (int slot = 1; slot <= 2; slot++) {
                if (!(slot == 1 ? m->cost : m->time)) continue;
                m->ops->on_metric(m->s, m->id[r], slot, (double)m->at[r], c);
                log_ev(m, json_pack("{s:s, s:I, s:I, s:f, s:i}", "ev", "metric", "id", (json_int_t)m->id[r],
                                    "epoch", (json_int_t)m->at[r], "value", c, "slot", slot));
            }
            int d = m->ops->on_report(m->s, m->id[r], (double)m->at[r], v);
            log_ev(m, json_pack("{s:s, s:I, s:I, s:f}", "ev", "report", "id", (json_int_t)m->id[r],
                                "epoch", (json_int_t)m->at[r], "value", v));
            int end = d == SEARCH_STOP ? SEARCH_STOPPED : m->at[r] >= m->budget[r] ? SEARCH_COMPLETED : -1;
            if (end >= 0) {
                m->ops->on_done(m->s, m->id[r], end, v);
                log_ev(m, json_pack("{s:s, s:I, s:i, s:f}", "ev", "done", "id", (json_int_t)m->id[r],
                                    "outcome", end, "value", v));
                json_object_set_new(hpq[m->id[r]], "at", json_integer(m->at[r]));
                m->nrun--;
                m->id[r] = m->id[m->nrun]; m->q[r] = m->q[m->nrun];
                m->at[r] = m->at[m->nrun]; m->budget[r] = m->budget[m->nrun]; m->c[r] = m->c[m->nrun];
                continue;
            }
            r++;
        }
    }
end:
    for (int i = 0; i < 512; i++) json_decref(hpq[i]);
}

static void test_asha_beats_random_sim(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *ca = load("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"max_trials\": 60}");
    json_t *cr = load("{\"name\": \"random\", \"max_trials\": 60}");
    int64_t ea = 0, er = 0;
    for (uint64_t seed = 0; seed < 5; seed++) {
        sim a = {.ops = search_find("asha")}, r = {.ops = search_find("random")};
        a.s = a.ops->create(ca, sp, 1, seed);
        r.s = r.ops->create(cr, sp, 1, seed);
        sim_run(&a, 4, 100000, 0.95 * 0.9);
        sim_run(&r, 4, 100000, 0.95 * 0.9);
        assert_true(a.epochs_to_target > 0);
        ea += a.epochs_to_target;
        er += r.epochs_to_target > 0 ? r.epochs_to_target : r.epochs_total;
        assert_true(a.epochs_total < 60 * 27 / 3);
        a.ops->destroy(a.s); r.ops->destroy(r.s);
    }
    print_message("epochs to target: asha %lld, random %lld\n", (long long)ea, (long long)er);
    assert_true(ea * 2 < er);
    json_decref(ca); json_decref(cr);
    search_space_free(sp);
}

/* Mean quality q of the trials created after the first `skip`. */
static double mean_q_after(const json_t *log, int64_t skip, int64_t *count)
{
    double sum = 0;
    int64_t n = 0;
    size_t i; json_t *ev;
    json_array_foreach(log, i, ev) {
        if (strcmp(json_string_value(json_object_get(ev, "ev")), "created")) continue;
        if (json_integer_value(json_object_get(ev, "index")) < skip) continue;
        sum += json_real_value(json_object_get(json_object_get(ev, "hp"), "q"));
        n++;
    }
    *count = n;
    return n ? sum / (double)n : 0;
}

/* "sampler": "tpe" draws new trials where the rung results are good: over
 * 10 seeds the trials it creates once a rung has 10 results have a higher
 * quality than the priors' draws (uniform: 0.5), and it needs fewer epochs
 * to reach a high target than ASHA with random sampling. describe() names
 * the budget it models. */
static void test_tpe_sampler_sim(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *ct = load("{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80, \"sampler\": \"tpe\"}");
    json_t *cr = load("{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80}");
    const searcher_ops *ops = search_find("asha");
    double qt = 0, qr = 0;
    int64_t et = 0, er = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        sim t = {.ops = ops, .log = json_array()}, r = {.ops = ops, .log = json_array()};
        t.s = ops->create(ct, sp, 1, seed);
        r.s = ops->create(cr, sp, 1, seed);
        sim_run(&t, 4, 100000, 0.97 * 0.9);
        sim_run(&r, 4, 100000, 0.97 * 0.9);
        int64_t nt, nr;
        qt += mean_q_after(t.log, 20, &nt);
        qr += mean_q_after(r.log, 20, &nr);
        assert_true(nt > 30 && nr > 30);
        et += t.epochs_to_target > 0 ? t.epochs_to_target : t.epochs_total;
        er += r.epochs_to_target > 0 ? r.epochs_to_target : r.epochs_total;
        json_t *d = ops->describe(t.s);
        assert_string_equal(json_string_value(json_object_get(d, "sampler")), "tpe");
        assert_true(json_is_true(json_object_get(d, "model")));
        assert_true(json_integer_value(json_object_get(d, "observations")) >= 10);
        json_decref(d);
        ops->destroy(t.s); ops->destroy(r.s);
        json_decref(t.log); json_decref(r.log);
    }
    print_message("mean q of trials 20+: tpe %.3f, random %.3f; epochs to target: tpe %lld, random %lld\n",
                  qt / 10, qr / 10, (long long)et, (long long)er);
    assert_true(qt / 10 > 0.7);
    assert_true(qr / 10 < 0.6);
    assert_true(et < er);
    json_decref(ct); json_decref(cr);
    search_space_free(sp);
}

/* Rebuild from the event log in the scheduler's replay order: every trial
 * in creation order with its CURRENT budget, then its reports, then its
 * end (the last one). */
static searcher *replay(const searcher_ops *ops, const json_t *cfg, const search_space *sp,
                        uint64_t seed, const json_t *log)
{
    searcher *s = ops->create(cfg, sp, 1, seed);
    json_t *budget = json_object(), *last_done = json_object();
    size_t i; json_t *ev;
    char key[32];
    json_array_foreach(log, i, ev) {
        const char *t = json_string_value(json_object_get(ev, "ev"));
        snprintf(key, sizeof key, "%lld", (long long)json_integer_value(json_object_get(ev, "id")));
        if (!strcmp(t, "created") || !strcmp(t, "resume"))
            json_object_set(budget, key, json_object_get(ev, "budget"));
        if (!strcmp(t, "done")) json_object_set(last_done, key, ev);
        if (!strcmp(t, "resume")) json_object_del(last_done, key);
    }
    json_array_foreach(log, i, ev) {
        if (strcmp(json_string_value(json_object_get(ev, "ev")), "created")) continue;
        snprintf(key, sizeof key, "%lld", (long long)json_integer_value(json_object_get(ev, "id")));
        ops->on_created(s, json_integer_value(json_object_get(ev, "id")),
                        json_integer_value(json_object_get(ev, "index")), json_object_get(ev, "hp"),
                        json_integer_value(json_object_get(budget, key)), 0);
    }
    json_array_foreach(log, i, ev) {   /* reports and cost reports, in arrival order */
        const char *t = json_string_value(json_object_get(ev, "ev"));
        int64_t id = json_integer_value(json_object_get(ev, "id"));
        double e = (double)json_integer_value(json_object_get(ev, "epoch"));
        if (!strcmp(t, "metric"))
            ops->on_metric(s, id, (int)json_integer_value(json_object_get(ev, "slot")), e,
                           json_real_value(json_object_get(ev, "value")));
        if (!strcmp(t, "report")) ops->on_report(s, id, e, json_real_value(json_object_get(ev, "value")));
    }
    const char *k;
    json_object_foreach(last_done, k, ev)
        ops->on_done(s, json_integer_value(json_object_get(ev, "id")),
                     (int)json_integer_value(json_object_get(ev, "outcome")),
                     json_real_value(json_object_get(ev, "value")));
    json_decref(budget);
    json_decref(last_done);
    return s;
}

static void replay_check(const char *cfg)
{
    search_space *sp = space();
    json_t *c = load(cfg);
    const searcher_ops *ops = search_find("asha");
    for (int64_t steps = 5; steps <= 65; steps += 12) {
        sim live = {.ops = ops, .log = json_array(), .cost = json_object_get(c, "cost_metric") != NULL,
                    .time = json_object_get(c, "time_metric") != NULL};
        live.s = ops->create(c, sp, 1, 11);
        sim_run(&live, 4, steps, 2.0);
        /* Stop mid-flight: the scheduler restarts here. */
        searcher *re = replay(ops, c, sp, 11, live.log);
        json_t *d1 = ops->describe(live.s), *d2 = ops->describe(re);
        if (!json_equal(d1, d2)) {
            char *a = json_dumps(d1, 0), *b = json_dumps(d2, 0);
            fail_msg("steps %lld: describe differs\nlive   %s\nreplay %s", (long long)steps, a, b);
        }
        json_decref(d1); json_decref(d2);
        /* Same next decisions: finish the running trials identically in
         * both and compare what next() answers. */
        for (int q = 0; q < 6; q++) {
            search_new a = {0}, b = {0};
            int ra = ops->next(live.s, live.created, 0, &a);
            int rb = ops->next(re, live.created, 0, &b);
            assert_int_equal(ra, rb);
            assert_int_equal(a.resume_trial, b.resume_trial);
            assert_int_equal(a.budget, b.budget);
            assert_true((!a.hparams && !b.hparams) || json_equal(a.hparams, b.hparams));
            json_decref(a.hparams); json_decref(b.hparams);
        }
        ops->destroy(live.s);
        ops->destroy(re);
        json_decref(live.log);
    }
    json_decref(c);
    search_space_free(sp);
}

static void test_replay(void **state)
{
    (void)state;
    replay_check("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"brackets\": 2,"
                 " \"max_trials\": 40}");
    /* The TPE sampler's proposals depend on rung results only. */
    replay_check("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"brackets\": 2,"
                 " \"max_trials\": 40, \"sampler\": \"tpe\", \"n_startup_trials\": 4}");
    /* ... and the costs, fed in arrival order. */
    replay_check("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"brackets\": 2,"
                 " \"max_trials\": 40, \"sampler\": \"tpe\", \"n_startup_trials\": 4,"
                 " \"cost_metric\": \"epoch_seconds\"}");
    /* Rungs in time: the sums and the waiting trials come from the reports. */
    replay_check("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"brackets\": 2,"
                 " \"max_trials\": 40, \"time_metric\": \"epoch_seconds\", \"min_time\": 0.3}");
    replay_check("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"max_trials\": 40,"
                 " \"time_metric\": \"epoch_seconds\", \"min_time\": 0.3, \"sampler\": \"tpe\","
                 " \"n_startup_trials\": 4, \"cost_metric\": \"epoch_seconds\"}");
}

/* Trials created from index `from` on whose "opt" is the cheap a. */
static int64_t cheap_after(const json_t *log, int64_t from)
{
    int64_t n = 0;
    size_t i; json_t *ev;
    json_array_foreach(log, i, ev) {
        if (strcmp(json_string_value(json_object_get(ev, "ev")), "created")) continue;
        if (json_integer_value(json_object_get(ev, "index")) < from) continue;
        n += sim_cost(json_object_get(ev, "hp")) < 0.5;
    }
    return n;
}

/* "cost_metric": opt a and b reach the same values, b costs 10x per
 * epoch. Over 10 seeds the TPE sampler with the cost creates far more a
 * trials once its model is on than without it (where opt is noise), and
 * describe() counts the rung results with a cost. */
static void test_tpe_sampler_cost(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *ct = load("{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80, \"sampler\": \"tpe\"}");
    json_t *cc = load("{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80, \"sampler\": \"tpe\","
                      " \"cost_metric\": \"epoch_seconds\"}");
    const searcher_ops *ops = search_find("asha");
    int64_t at = 0, ac = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        sim t = {.ops = ops, .log = json_array(), .cost = 1}, c = {.ops = ops, .log = json_array(), .cost = 1};
        t.s = ops->create(ct, sp, 1, seed);
        c.s = ops->create(cc, sp, 1, seed);
        sim_run(&t, 4, 100000, 2.0);
        sim_run(&c, 4, 100000, 2.0);
        at += cheap_after(t.log, 20);
        ac += cheap_after(c.log, 20);
        json_t *d = ops->describe(c.s), *dt = ops->describe(t.s);
        assert_true(json_integer_value(json_object_get(d, "observations_with_cost")) >= 20);
        assert_null(json_object_get(dt, "observations_with_cost"));
        json_decref(d); json_decref(dt);
        ops->destroy(t.s); ops->destroy(c.s);
        json_decref(t.log); json_decref(c.log);
    }
    print_message("trials 20+ with the cheap opt, 10 seeds of 60: %lld without cost_metric, %lld with it\n",
                  (long long)at, (long long)ac);
    assert_true(ac > at + 120);
    assert_true(ac > 450);
    /* "cost_cooling": the cost's weight falls to 0 at max_trials (80), so
     * the last trials, where it is nearly gone, leave the cheap opt more
     * often than with the full cost (TPE alone wanders: opt does not
     * change the values). */
    json_t *ck = load("{\"name\": \"asha\", \"max_epochs\": 27, \"max_trials\": 80, \"sampler\": \"tpe\","
                      " \"cost_metric\": \"epoch_seconds\", \"cost_cooling\": true}");
    int64_t kl = 0, cl = 0, tl = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        sim t = {.ops = ops, .log = json_array(), .cost = 1}, c = {.ops = ops, .log = json_array(), .cost = 1},
            k = {.ops = ops, .log = json_array(), .cost = 1};
        t.s = ops->create(ct, sp, 1, seed);
        c.s = ops->create(cc, sp, 1, seed);
        k.s = ops->create(ck, sp, 1, seed);
        sim_run(&t, 4, 100000, 2.0);
        sim_run(&c, 4, 100000, 2.0);
        sim_run(&k, 4, 100000, 2.0);
        tl += cheap_after(t.log, 65);
        cl += cheap_after(c.log, 65);
        kl += cheap_after(k.log, 65);
        ops->destroy(t.s); ops->destroy(c.s); ops->destroy(k.s);
        json_decref(t.log); json_decref(c.log); json_decref(k.log);
    }
    print_message("trials 65+ with the cheap opt, 10 seeds of 150: %lld without cost_metric, %lld with it, "
                  "%lld with it cooled\n", (long long)tl, (long long)cl, (long long)kl);
    assert_true(kl + 25 <= cl);    /* measured 110 against 149 */
    json_decref(ck);
    json_decref(ct); json_decref(cc);
    search_space_free(sp);
}

/* Feed trial id one epoch: its time (slot 2) and then its objective. */
static int time_epoch(const searcher_ops *ops, searcher *s, int64_t id, int64_t epoch, double secs, double v)
{
    ops->on_metric(s, id, 2, (double)epoch, secs);
    return ops->on_report(s, id, (double)epoch, v);
}

static int64_t rung_field(const json_t *d, int b, int k, const char *f)
{
    json_t *rungs = json_object_get(json_array_get(json_object_get(d, "brackets"), (size_t)b), "rungs");
    return json_integer_value(json_object_get(json_array_get(rungs, (size_t)k), f));
}

/* "time_metric": rungs at min_time * eta^k; every trial is granted
 * max_epochs; a trial stops at the report whose summed time reaches a
 * rung (after 3 epochs of 0.2 s, or 1 of 1.0 s, for a 0.5 s rung), waits
 * there, and the best of the rung by its value there is continued with
 * max_epochs again until the next rung. A trial that completes its epochs
 * counts at every rung and is never continued. */
static void test_time_rungs(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *c = load("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"max_trials\": 3,"
                     " \"time_metric\": \"epoch_seconds\", \"min_time\": 0.5}");
    const searcher_ops *ops = search_find("asha");
    searcher *s = ops->create(c, sp, 1, 3);
    json_t *d = ops->describe(s);
    assert_string_equal(json_string_value(json_object_get(d, "resource")), "time");
    json_t *rungs = json_object_get(json_array_get(json_object_get(d, "brackets"), 0), "rungs");
    assert_int_equal(json_array_size(rungs), 4);
    static const double wt[] = {0.5, 1.5, 4.5, 13.5};
    for (size_t k = 0; k < 4; k++) {
        assert_true(fabs(json_real_value(json_object_get(json_array_get(rungs, k), "time")) - wt[k]) < 1e-12);
        assert_int_equal(rung_field(d, 0, (int)k, "budget"), 27);
    }
    json_decref(d);
    for (int64_t n = 0; n < 3; n++) {
        search_new nw = {0};
        assert_int_equal(ops->next(s, n, n, &nw), SEARCH_CREATE);
        assert_int_equal(nw.budget, 27);
        assert_int_equal(nw.resume_trial, 0);
        ops->on_created(s, 1 + n, n, nw.hparams, nw.budget, 0);
        json_decref(nw.hparams);
    }
    /* Trial 1: 0.2 s per epoch, stops at epoch 3 (0.6 s) with 0.7. */
    assert_int_equal(time_epoch(ops, s, 1, 1, 0.2, 0.5), SEARCH_CONTINUE);
    assert_int_equal(time_epoch(ops, s, 1, 2, 0.2, 0.6), SEARCH_CONTINUE);
    assert_int_equal(time_epoch(ops, s, 1, 3, 0.2, 0.7), SEARCH_STOP);
    ops->on_done(s, 1, SEARCH_STOPPED, 0.7);
    /* Trial 2: 1.0 s per epoch, stops after its first (0.65). */
    assert_int_equal(time_epoch(ops, s, 2, 1, 1.0, 0.65), SEARCH_STOP);
    ops->on_done(s, 2, SEARCH_STOPPED, 0.65);
    /* Only two results at the rung: nothing to promote yet, trials running. */
    search_new w = {0};
    assert_int_equal(ops->next(s, 3, 1, &w), SEARCH_WAIT);
    /* Trial 3: 0.3 s per epoch, stops at epoch 2 (0.6 s) with 0.4. */
    assert_int_equal(time_epoch(ops, s, 3, 1, 0.3, 0.45), SEARCH_CONTINUE);
    assert_int_equal(time_epoch(ops, s, 3, 2, 0.3, 0.4), SEARCH_STOP);
    ops->on_done(s, 3, SEARCH_STOPPED, 0.4);
    d = ops->describe(s);
    assert_int_equal(rung_field(d, 0, 0, "results"), 3);
    assert_int_equal(rung_field(d, 0, 1, "results"), 0);
    assert_int_equal(json_integer_value(json_object_get(d, "without_time")), 0);
    json_decref(d);
    /* The best at 0.5 s is trial 1 (0.7 after 3 epochs), though trial 3
     * had the best single epoch: it is continued with 27 epochs. */
    search_new nw = {0};
    assert_int_equal(ops->next(s, 3, 0, &nw), SEARCH_CREATE);
    assert_int_equal(nw.resume_trial, 1);
    assert_int_equal(nw.budget, 27);
    json_decref(nw.hparams);
    d = ops->describe(s);
    assert_int_equal(rung_field(d, 0, 0, "promoted"), 1);
    assert_int_equal(rung_field(d, 0, 1, "running"), 1);
    json_decref(d);
    /* Nothing else: one in three. */
    assert_int_equal(ops->next(s, 3, 1, &w), SEARCH_WAIT);
    /* Resumed at epoch 4; 1.5 s is reached at epoch 8 (0.6 + 5 x 0.2). */
    for (int64_t e = 4; e < 8; e++) assert_int_equal(time_epoch(ops, s, 1, e, 0.2, 0.7), SEARCH_CONTINUE);
    assert_int_equal(time_epoch(ops, s, 1, 8, 0.2, 0.8), SEARCH_STOP);
    ops->on_done(s, 1, SEARCH_STOPPED, 0.8);
    d = ops->describe(s);
    assert_int_equal(rung_field(d, 0, 1, "results"), 1);
    json_decref(d);
    ops->destroy(s);
    json_decref(c);

    /* A trial that completes its epochs before the first rung's time: its
     * last value stands at every rung, and it is not continued. */
    c = load("{\"name\": \"asha\", \"max_epochs\": 3, \"max_trials\": 1, \"time_metric\": \"s\", \"min_time\": 1}");
    s = ops->create(c, sp, 1, 3);
    assert_int_equal(ops->next(s, 0, 0, &nw), SEARCH_CREATE);
    ops->on_created(s, 1, 0, nw.hparams, nw.budget, 0);
    json_decref(nw.hparams);
    for (int64_t e = 1; e <= 3; e++) assert_int_equal(time_epoch(ops, s, 1, e, 0.1, 0.9), SEARCH_CONTINUE);
    ops->on_done(s, 1, SEARCH_COMPLETED, 0.9);
    d = ops->describe(s);
    assert_int_equal(rung_field(d, 0, 0, "results"), 1);
    assert_int_equal(rung_field(d, 0, 1, "results"), 1);
    json_decref(d);
    assert_int_equal(ops->next(s, 1, 0, &nw), SEARCH_DONE);
    ops->destroy(s);
    json_decref(c);

    /* Stop mode: the trial runs on past a rung with too few results, and
     * is stopped at max_time (the end of its time), unless at its last epoch. */
    c = load("{\"name\": \"asha\", \"max_epochs\": 27, \"mode\": \"stop\", \"time_metric\": \"s\", \"min_time\": 1,"
             " \"max_time\": 3}");
    s = ops->create(c, sp, 1, 3);
    for (int64_t n = 0; n < 2; n++) {
        assert_int_equal(ops->next(s, n, n, &nw), SEARCH_CREATE);
        assert_int_equal(nw.budget, 27);
        ops->on_created(s, 1 + n, n, nw.hparams, nw.budget, 0);
        json_decref(nw.hparams);
    }
    assert_int_equal(time_epoch(ops, s, 1, 1, 1.0, 0.5), SEARCH_CONTINUE);
    assert_int_equal(time_epoch(ops, s, 1, 2, 1.0, 0.6), SEARCH_CONTINUE);
    assert_int_equal(time_epoch(ops, s, 1, 3, 1.0, 0.7), SEARCH_STOP);
    /* A trial that reports no time reaches no rung; describe() counts it. */
    for (int64_t e = 1; e <= 5; e++) assert_int_equal(ops->on_report(s, 2, (double)e, 0.9), SEARCH_CONTINUE);
    d = ops->describe(s);
    assert_int_equal(json_integer_value(json_object_get(d, "without_time")), 1);
    assert_int_equal(rung_field(d, 0, 0, "results"), 1);
    json_decref(d);
    ops->destroy(s);
    json_decref(c);
    search_space_free(sp);
}

/* Rungs in time against rungs in epochs on the simulated workload, where
 * opt b costs 10x per epoch and reaches the same values: over 10 seeds,
 * time rungs reach the target with less simulated training time
 * (the sum of the trials' epoch costs), because the rungs compare the
 * cheap configurations after as many epochs as the costly one's time. */
static void test_time_rungs_sim(void **state)
{
    (void)state;
    search_space *sp = space();
    json_t *ce = load("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"max_trials\": 80}");
    json_t *ct = load("{\"name\": \"asha\", \"max_epochs\": 27, \"reduction_factor\": 3, \"max_trials\": 80,"
                      " \"time_metric\": \"epoch_seconds\", \"min_time\": 0.3}");
    const searcher_ops *ops = search_find("asha");
    double te = 0, tt = 0;
    for (uint64_t seed = 0; seed < 10; seed++) {
        sim e = {.ops = ops}, t = {.ops = ops, .time = 1};
        e.s = ops->create(ce, sp, 1, seed);
        t.s = ops->create(ct, sp, 1, seed);
        sim_run(&e, 4, 100000, 0.95 * 0.9);
        sim_run(&t, 4, 100000, 0.95 * 0.9);
        assert_true(t.time_to_target > 0);
        te += e.time_to_target > 0 ? e.time_to_target : e.time_total;
        tt += t.time_to_target;
        ops->destroy(e.s); ops->destroy(t.s);
    }
    print_message("simulated training time to the target, 10 seeds: rungs in epochs %.1f, in time %.1f\n", te, tt);
    assert_true(tt * 1.25 < te);   /* measured 237 against 345 */
    json_decref(ce); json_decref(ct);
    search_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_rungs),
        cmocka_unit_test(test_promotion),
        cmocka_unit_test(test_stop_mode),
        cmocka_unit_test(test_asha_beats_random_sim),
        cmocka_unit_test(test_tpe_sampler_sim),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_tpe_sampler_cost),
        cmocka_unit_test(test_time_rungs),
        cmocka_unit_test(test_time_rungs_sim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
