/*
 * test_scheduler_search_tpe_optuna.c — our univariate TPE given Optuna
 * 3.1's settings (gamma 0.1, 24 candidates, prior weight 1) proposes what
 * Optuna 3.1's TPESampler() proposes from the same history: floats
 * (Hartmann-3), integers (linear and log-scale) and a categorical, and a
 * log-scale integer with few values, scored at the integer it proposes.
 * The references are Optuna's proposals over 4000 seeds; docs/search.md
 * ("tpe against Optuna 3.1, candidate by candidate") lists what differs
 * and what does not.
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

static search_space *space(const char *s) { return space_of(s); }

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Our univariate TPE given Optuna's settings proposes what Optuna 3.1's
 * TPESampler() proposes. The history: 40 points of Hartmann-3 on [0,1]^3
 * (x1, x2, x3, value to minimise; numpy RandomState(0), rounded); the
 * reference: the quantiles 0.1 / 0.25 / 0.5 / 0.75 / 0.9 of each
 * parameter of Optuna's next proposal over 4000 seeds (TPESampler(seed=k),
 * the history added with create_trial, 2026-11-25). This pins the whole
 * proposal (split, age weights, prior, neighbour bandwidths, magic clip,
 * truncated sampling, best of 24 by log l - log g), not just the density:
 * issue 16 suspected a difference there and there is none (docs/search.md). */
static const double OPTUNA_HIST[40][4] = {
    {0.5488, 0.7152, 0.6028, -1.655783},
    {0.5449, 0.4237, 0.6459, -1.365569},
    {0.4376, 0.8918, 0.9637, -0.958060},
    {0.3834, 0.7917, 0.5289, -2.286909},
    {0.5680, 0.9256, 0.0710, -0.001793},
    {0.0871, 0.0202, 0.8326, -0.294975},
    {0.7782, 0.8700, 0.9786, -0.948344},
    {0.7992, 0.4615, 0.7805, -3.007637},
    {0.1183, 0.6399, 0.1434, -0.044820},
    {0.9447, 0.5218, 0.4147, -0.121407},
    {0.2646, 0.7742, 0.4562, -1.918958},
    {0.5684, 0.0188, 0.6176, -0.147804},
    {0.6121, 0.6169, 0.9437, -2.903275},
    {0.6818, 0.3595, 0.4370, -0.268075},
    {0.6976, 0.0602, 0.6668, -0.276896},
    {0.6706, 0.2104, 0.1289, -0.392673},
    {0.3154, 0.3637, 0.5702, -0.675510},
    {0.4386, 0.9884, 0.1020, -0.004273},
    {0.2089, 0.1613, 0.6531, -0.521101},
    {0.2533, 0.4663, 0.2444, -0.309301},
    {0.1590, 0.1104, 0.6563, -0.380801},
    {0.1382, 0.1966, 0.3687, -0.603107},
    {0.8210, 0.0971, 0.8379, -0.564199},
    {0.0961, 0.9765, 0.4687, -2.164801},
    {0.9768, 0.6048, 0.7393, -2.352635},
    {0.0392, 0.2828, 0.1202, -0.286776},
    {0.2961, 0.1187, 0.3180, -0.913540},
    {0.4143, 0.0641, 0.6925, -0.337628},
    {0.5666, 0.2654, 0.5232, -0.305497},
    {0.0939, 0.5759, 0.9293, -3.290451},
    {0.3186, 0.6674, 0.1318, -0.035712},
    {0.7163, 0.2894, 0.1832, -0.418876},
    {0.5865, 0.0201, 0.8289, -0.294502},
    {0.0047, 0.6778, 0.2700, -0.203365},
    {0.7352, 0.9622, 0.2488, -0.052156},
    {0.5762, 0.5920, 0.5723, -1.137880},
    {0.2231, 0.9527, 0.4471, -1.918765},
    {0.8464, 0.6995, 0.2974, -0.076629},
    {0.8138, 0.3965, 0.8811, -2.819924},
    {0.5813, 0.8817, 0.6925, -1.360544},
};
static const double OPTUNA_Q[3][5] = {
    {0.4805, 0.4914, 0.5031, 0.6326, 0.6484},
    {0.5098, 0.5206, 0.5291, 0.5363, 0.5444},
    {0.9253, 0.9318, 0.9386, 0.9951, 0.9982},
};

static void test_univariate_matches_optuna(void **state)
{
    (void)state;
    search_space *sp = space("{\"x1\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                             " \"x2\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1},"
                             " \"x3\": {\"type\": \"uniform\", \"min\": 0, \"max\": 1}}");
    enum { NOBS = 40, DRAWS = 4000 };
    static const char *const names[3] = {"x1", "x2", "x3"};
    static const double qs[5] = {0.1, 0.25, 0.5, 0.75, 0.9};
    search_tpe_obs obs[NOBS];
    json_t *hps[NOBS];
    double *v[3];
    for (int j = 0; j < 3; j++) assert_non_null(v[j] = malloc(DRAWS * sizeof *v[j]));
    for (int i = 0; i < NOBS; i++) {
        const double *h = OPTUNA_HIST[i];
        hps[i] = json_pack("{s:f, s:f, s:f}", "x1", h[0], "x2", h[1], "x3", h[2]);
        obs[i] = (search_tpe_obs){hps[i], 0, -h[3], i, NAN};
    }
    search_tpe_opts o = {.gamma = 0.1, .n_candidates = 24, .prior_weight = 1.0, .multivariate = 0};
    for (int k = 0; k < DRAWS; k++) {
        uint64_t r = search_rng_derive(1000 + (uint64_t)k, 0);
        json_t *hp = search_tpe_propose(sp, &o, obs, NOBS, NULL, 0, &r);
        assert_non_null(hp);
        for (int j = 0; j < 3; j++) v[j][k] = json_real_value(json_object_get(hp, names[j]));
        json_decref(hp);
    }
    double worst = 0;
    for (int j = 0; j < 3; j++) {
        qsort(v[j], DRAWS, sizeof *v[j], cmp_dbl);
        for (int q = 0; q < 5; q++) {
            double ours = v[j][(int)(qs[q] * (DRAWS - 1))];
            worst = fmax(worst, fabs(ours - OPTUNA_Q[j][q]));
        }
        free(v[j]);
    }
    print_message("largest quantile difference from Optuna 3.1: %.4f\n", worst);
    assert_true(worst < 0.003);   /* consider_endpoints true: 0.0035; no magic clip 0.05 */
    for (int i = 0; i < NOBS; i++) json_decref(hps[i]);
    search_space_free(sp);
}

/* Integers and a categorical: n int [-10, 10], b int log [16, 1024], c
 * one of a..e. The history: 40 points (n, b, index of c, value to
 * minimise (n-3)^2/10 + (log2 b - 7)^2/4 + offset of c; Python's
 * random.Random(7)); the reference: Optuna 3.1's TPESampler(seed=k)
 * .sample_independent for each parameter, k = 0..3999 (2026-11-26), with
 * numpy's argsort made stable in _ParzenEstimator: P(n = 2, 3, 4) =
 * 0.904, 0.088, 0.007; b's quantiles 0.1 / 0.25 / 0.5 / 0.75 / 0.9 = 55,
 * 57, 59, 61, 64; c = b in 0.9998. Optuna's discrete kernel (the mass of
 * [n - 1/2, n + 1/2] under a Gaussian on [min - 1/2, max + 1/2], samples
 * rounded) is our DIM_STEP; a log integer is continuous on
 * [log(min - 1/2), log(max + 1/2)] and scored at its rounded value in
 * both (snap_int). Unpatched, Optuna gives P(n = 2, 3) = 0.085, 0.907:
 * its neighbour bandwidths sort the centres with numpy's default
 * (unstable) argsort, so which of several observations at the SAME integer
 * gets the gap to the next value and which the clipped minimum depends on
 * the sort's internals, and with age weights that moves g. Ours breaks
 * ties by age (cmp_ranked), a fixed order (docs/search.md). */
static const double INT_HIST[40][4] = {
    {0, 823, 3, 3.901969},
    {10, 19, 4, 7.093476},
    {-7, 72, 0, 10.972256},
    {6, 38, 0, 2.467439},
    {3, 89, 1, 0.068714},
    {-8, 156, 0, 12.920364},
    {8, 26, 1, 3.821994},
    {10, 215, 0, 5.839948},
    {8, 180, 0, 3.360480},
    {-3, 19, 1, 5.493476},
    {-1, 90, 4, 1.964553},
    {-7, 170, 4, 10.341900},
    {-5, 24, 4, 8.158102},
    {10, 34, 0, 6.614450},
    {7, 307, 4, 2.298221},
    {-9, 208, 3, 15.722654},
    {7, 93, 2, 2.153094},
    {4, 180, 3, 1.360480},
    {1, 54, 1, 0.787576},
    {-3, 22, 2, 5.713622},
    {6, 123, 2, 1.400826},
    {4, 52, 0, 1.322214},
    {-7, 132, 1, 10.000493},
    {0, 29, 3, 3.247061},
    {3, 18, 0, 2.802331},
    {7, 171, 2, 2.143650},
    {0, 286, 4, 1.536325},
    {5, 176, 3, 1.652769},
    {-8, 524, 2, 13.633702},
    {5, 288, 0, 1.542181},
    {-9, 332, 2, 15.372683},
    {10, 175, 3, 6.150898},
    {-1, 312, 2, 2.513065},
    {-10, 799, 2, 19.145109},
    {-5, 201, 3, 7.705967},
    {-9, 39, 2, 15.634961},
    {-6, 342, 3, 9.802576},
    {2, 723, 3, 2.859816},
    {-8, 31, 3, 14.346328},
    {7, 50, 1, 2.059782},
};

static void test_integers_match_optuna(void **state)
{
    (void)state;
    search_space *sp = space("{\"n\": {\"type\": \"int\", \"min\": -10, \"max\": 10},"
                             " \"b\": {\"type\": \"int\", \"min\": 16, \"max\": 1024, \"log\": true},"
                             " \"c\": {\"type\": \"categorical\", \"values\": [\"a\", \"b\", \"c\", \"d\", \"e\"]}}");
    enum { NOBS = 40, DRAWS = 4000 };
    static const char *const cats[5] = {"a", "b", "c", "d", "e"};
    static const double qs[5] = {0.1, 0.25, 0.5, 0.75, 0.9}, bq[5] = {55, 57, 59, 61, 64};
    search_tpe_obs obs[NOBS];
    json_t *hps[NOBS];
    double *b = malloc(DRAWS * sizeof *b);
    int n_at[21] = {0}, c_b = 0;
    assert_non_null(b);
    for (int i = 0; i < NOBS; i++) {
        const double *h = INT_HIST[i];
        hps[i] = json_pack("{s:I, s:I, s:s}", "n", (json_int_t)h[0], "b", (json_int_t)h[1], "c", cats[(int)h[2]]);
        obs[i] = (search_tpe_obs){hps[i], 0, -h[3], i, NAN};
    }
    search_tpe_opts o = {.gamma = 0.1, .n_candidates = 24, .prior_weight = 1.0, .multivariate = 0};
    for (int k = 0; k < DRAWS; k++) {
        uint64_t r = search_rng_derive(1000 + (uint64_t)k, 0);
        json_t *hp = search_tpe_propose(sp, &o, obs, NOBS, NULL, 0, &r);
        assert_non_null(hp);
        n_at[json_integer_value(json_object_get(hp, "n")) + 10]++;
        b[k] = (double)json_integer_value(json_object_get(hp, "b"));
        c_b += !strcmp(json_string_value(json_object_get(hp, "c")), "b");
        json_decref(hp);
    }
    double p2 = n_at[12] / (double)DRAWS, p3 = n_at[13] / (double)DRAWS, p4 = n_at[14] / (double)DRAWS;
    print_message("P(n=2,3,4) ours %.4f %.4f %.4f, Optuna 3.1 (stable ties) 0.9042 0.0880 0.0073; c=b %.4f (0.9998)\n", p2, p3,
                  p4, c_b / (double)DRAWS);
    /* 4000 draws: a binomial's standard deviation at 0.9 is 0.005 */
    assert_true(fabs(p2 - 0.9042) < 0.02 && fabs(p3 - 0.0880) < 0.02 && p4 < 0.02);
    assert_true(c_b >= DRAWS - 8);
    qsort(b, DRAWS, sizeof *b, cmp_dbl);
    for (int q = 0; q < 5; q++) {
        double ours = b[(int)(qs[q] * (DRAWS - 1))];
        print_message("b quantile %.2f: ours %g, Optuna 3.1 %g\n", qs[q], ours, bq[q]);
        assert_true(fabs(ours - bq[q]) <= 1);
    }
    free(b);
    for (int i = 0; i < NOBS; i++) json_decref(hps[i]);
    search_space_free(sp);
}

/* A log-scale integer with few values (k in [1, 8]): the candidate must be
 * scored at the integer it proposes. Scored at the continuous draw (before
 * snap_int), ours proposed k = 1, 2, 3 with 0.61, 0.37, 0.03 from this
 * history; Optuna 3.1 (TPESampler(seed=s).sample_independent, s =
 * 0..3999, 2026-11-26; history from Python's random.Random(11), value
 * (log2 k - 1.3)^2 + noise) proposes 2 with 0.9992 and 3 with 0.0008, as
 * ours does now. */
static const double LOGK_HIST[20][2] = {
    {8, 3.149723}, {8, 3.025550}, {4, 0.545398}, {8, 3.078965}, {3, 0.109441}, {5, 1.086876}, {1, 1.868631},
    {7, 2.561546}, {3, 0.268142}, {2, 0.107865}, {4, 0.753869}, {1, 1.923433}, {6, 1.783288}, {4, 0.645737},
    {5, 1.194269}, {2, 0.227199}, {5, 1.166371}, {2, 0.302343}, {6, 1.878526}, {5, 1.053263}};

static void test_log_integer_scored_where_proposed(void **state)
{
    (void)state;
    search_space *sp = space("{\"k\": {\"type\": \"int\", \"min\": 1, \"max\": 8, \"log\": true}}");
    enum { NOBS = 20, DRAWS = 4000 };
    search_tpe_obs obs[NOBS];
    json_t *hps[NOBS];
    int cnt[9] = {0};
    for (int i = 0; i < NOBS; i++) {
        hps[i] = json_pack("{s:I}", "k", (json_int_t)LOGK_HIST[i][0]);
        obs[i] = (search_tpe_obs){hps[i], 0, -LOGK_HIST[i][1], i, NAN};
    }
    search_tpe_opts o = {.gamma = 0.1, .n_candidates = 24, .prior_weight = 1.0, .multivariate = 0};
    for (int k = 0; k < DRAWS; k++) {
        uint64_t r = search_rng_derive(1000 + (uint64_t)k, 0);
        json_t *hp = search_tpe_propose(sp, &o, obs, NOBS, NULL, 0, &r);
        assert_non_null(hp);
        json_int_t v = json_integer_value(json_object_get(hp, "k"));
        assert_true(v >= 1 && v <= 8);
        cnt[v]++;
        json_decref(hp);
    }
    print_message("P(k=1,2,3) ours %.4f %.4f %.4f, Optuna 3.1 0 0.9992 0.0008\n", cnt[1] / (double)DRAWS,
                  cnt[2] / (double)DRAWS, cnt[3] / (double)DRAWS);
    assert_true(cnt[2] >= DRAWS * 0.99);
    for (int i = 0; i < NOBS; i++) json_decref(hps[i]);
    search_space_free(sp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_univariate_matches_optuna),
        cmocka_unit_test(test_integers_match_optuna),
        cmocka_unit_test(test_log_integer_scored_where_proposed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
