/*
 * fuzz_search_space.c — libFuzzer target for the "hyperparameters" parser
 * and everything that consumes a parsed space: sampling, the unit
 * encoding, the grid, PBT perturbation, and every searcher's validate /
 * create / next / on_report / on_done on a short simulated run.
 *
 * Input: a JSON document, either {"hyperparameters": {...}, "searcher":
 * {...}} or a bare hyperparameters object. Invariants checked (abort on
 * violation): a successful parse is topologically ordered; sampled points
 * contain exactly the active parameters; from_unit(to_unit(v)) is v for
 * discrete kinds (or a value at the same position on the scale, for
 * integers too large for the scale to separate); grid points are distinct-size-bounded; a rejected input names a
 * field.
 */
// FUZZ_SOURCES: common/hf_json.c common/hf_err.c common/hf_metric.c scheduler/search/*.c
// FUZZ_LIBS: -ljansson -lm
#include "hf_err.h"
#include "hf_json.h"
#include "scheduler/search/search.h"
#include "scheduler/search/search_space.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_point(const search_space *sp, const json_t *hp)
{
    if (!hp) return;              /* OOM only */
    for (size_t i = 0; i < sp->n; i++) {
        int present = json_object_get(hp, sp->p[i].name) != NULL;
        if (present != search_space_active(sp, i, hp)) abort();
        if (present) {
            const json_t *v = json_object_get(hp, sp->p[i].name);
            double u = search_space_to_unit(&sp->p[i], v);
            if (!(u >= 0 && u <= 1)) abort();
            json_t *back = search_space_from_unit(&sp->p[i], u);
            /* Discrete kinds come back as the same value, or (integers
             * beyond ~2^40 on a log scale) as one the scale cannot tell
             * apart from it: the same position, so the same unit value. */
            if (back && sp->p[i].kind != SPACE_UNIFORM && sp->p[i].kind != SPACE_LOG &&
                !json_equal(back, v) && search_space_to_unit(&sp->p[i], back) != u) abort();
            json_decref(back);
        }
    }
}

static void drive(const searcher_ops *ops, json_t *cfg, const search_space *sp, uint64_t seed)
{
    searcher *s = ops->create(cfg, sp, 1, seed);
    if (!s) return;
    int64_t created = 0;
    for (int step = 0; step < 24; step++) {
        search_new nw = {0};
        int rc = ops->next(s, created, 0, &nw);
        if (rc == SEARCH_DONE) break;
        if (rc != SEARCH_CREATE) { json_decref(nw.hparams); break; }
        int64_t id = nw.resume_trial ? nw.resume_trial : created + 1;
        if (!nw.resume_trial) {
            ops->on_created(s, id, created, nw.hparams, nw.budget, nw.parent_trial);
            created++;
        }
        double v = (double)((seed + (uint64_t)step * 7919) % 1000) / 1000.0;
        int64_t b = nw.budget > 0 && nw.budget < 30 ? nw.budget : 3;
        for (int64_t e = 1; e <= b; e++)
            if (ops->on_report(s, id, (double)e, v * (double)e) == SEARCH_STOP) break;
        ops->on_done(s, id, step % 7 == 3 ? SEARCH_FAILED : SEARCH_COMPLETED, v);
        json_decref(nw.hparams);
    }
    json_t *d = ops->describe ? ops->describe(s) : NULL;
    json_decref(d);
    ops->destroy(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *doc = NULL, *hp = NULL, *scfg = NULL;
    search_space *sp = NULL;
    hf_jerr e;
    if (size > 65536) return 0;
    if (hf_json_parse((const char *)data, size, HF_JSON_MAX_DEPTH, 1, &doc, &e)) return 0;
    hp = json_object_get(doc, "hyperparameters");
    scfg = json_object_get(doc, "searcher");
    if (!hp) hp = doc;
    hf_jerr_clear(&e);
    int rc = search_space_parse(hp, &sp, &e);
    if (rc) {
        if (sp || !e.msg[0]) abort();
        goto end;
    }
    for (size_t i = 0; i < sp->n; i++)
        if (sp->p[i].cond_parent >= (int)i) abort();
    uint64_t rng = size;
    for (int k = 0; k < 4; k++) {
        json_t *pt = search_space_sample(sp, &rng);
        check_point(sp, pt);
        json_t *q = pt ? search_space_perturb(sp, pt, 0.3, &rng) : NULL;
        check_point(sp, q);
        json_decref(q);
        json_decref(pt);
    }
    uint64_t g = search_space_grid_size(sp, 100000);
    for (uint64_t k = 0; k < g && k < 6; k++) {
        json_t *pt = search_space_grid_point(sp, k);
        if (!pt) abort();
        check_point(sp, pt);
        json_decref(pt);
    }
    if (g) {
        json_t *last = search_space_grid_point(sp, g - 1);
        check_point(sp, last);
        json_decref(last);
        if (search_space_grid_point(sp, g)) abort();
    }
    if (json_is_object(scfg)) {
        hf_jerr_clear(&e);
        if (search_validate(scfg, sp, &e) == 0) {
            const searcher_ops *ops = search_find(json_string_value(json_object_get(scfg, "name")));
            if (!ops) abort();
            drive(ops, scfg, sp, (uint64_t)size);
        } else if (!e.msg[0]) {
            abort();
        }
    }
end:
    search_space_free(sp);
    json_decref(doc);
    return 0;
}
