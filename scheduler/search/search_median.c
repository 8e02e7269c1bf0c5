/*
 * search_median.c — the median stopping rule (Golovin et al., "Google
 * Vizier", 2017; as in Ray Tune's MedianStoppingRule), combinable with any
 * searcher:
 *
 *   at a report of trial t at epoch e > warmup_epochs, let best_t be t's
 *   best objective so far; for every other *finished* trial (COMPLETED or
 *   STOPPED) with a report at or before e take the running average of its
 *   objective over reports up to e; if at least min_trials such averages
 *   exist and best_t < their median, stop t.
 *
 * Values are higher-is-better (the dispatcher normalises the sign).
 * Finished trials only: a reference that cannot still change makes the
 * rule's decisions independent of report interleaving, hence replayable.
 *
 * Memory: per trial the reports as (epoch, cumulative sum, count); epochs
 * are made non-decreasing (a restarted attempt that repeats an epoch is
 * clamped), so a lookup is a binary search. At MEDIAN_MAX_POINTS points
 * every other one is dropped: cumulative sums stay exact, only the epoch
 * resolution of old reports gets coarser.
 */
#include "search.h"
#include "hf_err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MEDIAN_MAX_POINTS 4096

typedef struct med_point { double epoch, cum; int64_t count; } med_point;

typedef struct med_trial {
    int64_t    id;
    int        done;          /* finished COMPLETED or STOPPED: part of the reference */
    int        stopped;       /* this rule stopped it: answer STOP again */
    double     best;
    med_point *pts;
    size_t     n, cap;
} med_trial;

struct search_median {
    int64_t    min_trials;
    double     warmup;
    med_trial *t;
    size_t     n, cap;
};

int search_median_validate(const json_t *cfg, hf_jerr *e)
{
    static const char *const keys[] = {"min_trials", "warmup_epochs", NULL};
    const char *path = "searcher.median_stopping";
    int64_t mt; double w;
    int rc;
    if (!json_is_object(cfg)) return hf_jerr_set(e, path, NULL, "must be an object");
    if ((rc = hf_json_only_keys(cfg, path, keys, e))) return rc;
    if ((rc = hf_json_get_int(cfg, path, "min_trials", 0, 1, 100000, &mt, e))) return rc;
    if ((rc = hf_json_get_number(cfg, path, "warmup_epochs", 0, 0, 1e9, &w, e))) return rc;
    return 0;
}

search_median *search_median_new(const json_t *cfg)
{
    search_median *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->min_trials = search_cfg_int(cfg, "min_trials", 5);
    if (m->min_trials < 1) m->min_trials = 1;
    m->warmup = search_cfg_num(cfg, "warmup_epochs", 0);
    return m;
}

void search_median_free(search_median *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free(m->t[i].pts);
    free(m->t);
    free(m);
}

static med_trial *trial_get(search_median *m, int64_t id, int create)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->t[i].id == id) return &m->t[i];
    if (!create) return NULL;
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 16;
        med_trial *nt = realloc(m->t, nc * sizeof *nt);
        if (!nt) return NULL;
        m->t = nt; m->cap = nc;
    }
    med_trial *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    t->id = id;
    t->best = -INFINITY;
    return t;
}

static int trial_add(med_trial *t, double epoch, double value)
{
    if (t->n && epoch < t->pts[t->n - 1].epoch) epoch = t->pts[t->n - 1].epoch;
    if (t->n == MEDIAN_MAX_POINTS) {
        /* Keep odd indices (so the newest point survives), then append. */
        size_t k = 0;
        for (size_t i = 1; i < t->n; i += 2) t->pts[k++] = t->pts[i];
        t->n = k;
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 16;
        med_point *np = realloc(t->pts, nc * sizeof *np);
        if (!np) return HF_ENOMEM;
        t->pts = np; t->cap = nc;
    }
    med_point prev = t->n ? t->pts[t->n - 1] : (med_point){0, 0, 0};
    t->pts[t->n++] = (med_point){epoch, prev.cum + value, prev.count + 1};
    if (value > t->best) t->best = value;
    return 0;
}

/* Running average of t's reports with epoch <= e; 0 if none (then *ok = 0). */
static double trial_avg_at(const med_trial *t, double e, int *ok)
{
    size_t lo = 0, hi = t->n;          /* first index with epoch > e */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->pts[mid].epoch <= e) lo = mid + 1; else hi = mid;
    }
    *ok = lo > 0;
    return lo ? t->pts[lo - 1].cum / (double)t->pts[lo - 1].count : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int search_median_on_report(search_median *m, int64_t trial_id, double epoch, double value)
{
    if (!m || !isfinite(value) || !isfinite(epoch)) return SEARCH_CONTINUE;
    med_trial *t = trial_get(m, trial_id, 1);
    if (!t || trial_add(t, epoch, value)) return SEARCH_CONTINUE;
    if (t->stopped) return SEARCH_STOP;
    if (epoch <= m->warmup) return SEARCH_CONTINUE;

    double *avg = malloc((m->n ? m->n : 1) * sizeof *avg);
    size_t k = 0;
    int rc = SEARCH_CONTINUE;
    if (!avg) return SEARCH_CONTINUE;
    for (size_t i = 0; i < m->n; i++) {
        const med_trial *o = &m->t[i];
        int ok;
        if (o->id == trial_id || !o->done) continue;
        double a = trial_avg_at(o, epoch, &ok);
        if (ok) avg[k++] = a;
    }
    if ((int64_t)k >= m->min_trials) {
        qsort(avg, k, sizeof *avg, cmp_double);
        double med = k % 2 ? avg[k / 2] : 0.5 * (avg[k / 2 - 1] + avg[k / 2]);
        if (t->best < med) { t->stopped = 1; rc = SEARCH_STOP; }
    }
    free(avg);
    return rc;
}

void search_median_on_done(search_median *m, int64_t trial_id, int outcome)
{
    if (!m) return;
    med_trial *t = trial_get(m, trial_id, 0);
    if (!t) return;
    t->done = outcome == SEARCH_COMPLETED || outcome == SEARCH_STOPPED;
}
