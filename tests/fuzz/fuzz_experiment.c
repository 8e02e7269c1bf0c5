/*
 * fuzz_experiment.c — libFuzzer target for the experiment-file validator
 * (scheduler/core/experiment.c, with the search-space parser and every
 * searcher's validate behind it). Any input: parse as JSON with the API's
 * depth limit, validate; accepted files must also build a searcher and
 * draw a few trials without crashing (after observing the file's
 * warm_start.enqueue points as history, as a warm start does: every point
 * validation accepted must be one the searcher's model can take) —
 * configured with the file's objectives and constraints, each drawn trial
 * reporting every objective and constrained metric (search_mo.h slots)
 * and the cost metric (SEARCH_COST_SLOT) and completing, so the multi-objective rankings run too. Nothing may
 * crash, leak or read out
 * of bounds; a rejection must name a reason.
 */
// FUZZ_SOURCES: common/*.c scheduler/core/experiment.c scheduler/search/*.c scheduler/store/ckstore.c scheduler/store/repl.c scheduler/store/repl_ring.c
// FUZZ_LIBS: -ljansson -lcurl -lm -lgnutls -lsqlite3 -lpthread
#include "hf_err.h"
#include "hf_json.h"
#include "scheduler/core/experiment.h"
#include "scheduler/search/warmstart.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *cfg = NULL;
    hf_jerr e;
    if (size > 1 << 20) return 0;
    if (hf_json_parse((const char *)data, size, HF_JSON_MAX_DEPTH, 1, &cfg, &e) != 0) return 0;
    exp_spec sp;
    int rc = experiment_parse(cfg, &sp, &e);
    if (rc != 0) {
        assert(rc == HF_EINVAL);
        assert(e.msg[0] != 0);
        assert(memchr(e.field, 0, sizeof e.field) && memchr(e.msg, 0, sizeof e.msg));
    } else {
        assert(sp.ops && sp.argv && json_array_size(sp.argv) > 0);
        assert(sp.workers >= 1 && sp.slots_per_worker >= 1 && sp.max_trials >= 1);
        searcher *s = sp.ops->create(sp.searcher_cfg, sp.sp, sp.goal_max, sp.seed);
        if (s) {
            s->ops = sp.ops;
            if (s->ops->configure) assert(s->ops->configure(s, &sp.mo) == 0);
            json_t *hist = json_array(), *hp;
            size_t k;
            json_array_foreach(warm_enqueue(cfg), k, hp)
                json_array_append_new(hist, json_pack("{sOsfsI}", "hparams", hp, "value", 0.5 + (double)k, "level",
                                                      (json_int_t)k));
            assert(warm_observe(s, hist, sp.goal_max) == json_array_size(hist));
            json_decref(hist);
            int64_t created = 0;
            for (int64_t i = 0; i < 14 && created < sp.max_trials; i++) {
                search_new nw;
                memset(&nw, 0, sizeof nw);
                int r = s->ops->next(s, created, 0, &nw);
                int64_t id = nw.resume_trial ? nw.resume_trial : created + 1;
                if (r == SEARCH_CREATE && nw.hparams && s->ops->on_created)
                    s->ops->on_created(s, id, id - 1, nw.hparams, nw.budget, nw.parent_trial);
                json_decref(nw.hparams);
                if (r != SEARCH_CREATE) break;
                if (!nw.resume_trial) created++;
                /* Every slot reports (values from the input's bytes), then the trial ends. */
                double ep = nw.budget > 0 ? (double)nw.budget : 1;
                for (int k = 1; s->ops->on_metric && k < sp.mo.n_obj + sp.mo.n_con + (sp.cost_metric != NULL); k++)
                    s->ops->on_metric(s, id, k, ep, (double)data[(size_t)(i * 7 + k) % size] / 25.0);
                double v = (double)data[(size_t)(i * 3) % size] / 25.0;
                if (s->ops->on_report) s->ops->on_report(s, id, ep, v);
                if (s->ops->on_done) s->ops->on_done(s, id, SEARCH_COMPLETED, v);
            }
            s->ops->destroy(s);
        }
        experiment_spec_free(&sp);
    }
    json_decref(cfg);
    return 0;
}
