/*
 * fuzz_experiment.c — libFuzzer target for the experiment-file validator
 * (scheduler/experiment.c, with the search-space parser and every
 * searcher's validate behind it). Any input: parse as JSON with the API's
 * depth limit, validate; accepted files must also build a searcher and
 * draw a few trials without crashing. Nothing may crash, leak or read out
 * of bounds; a rejection must name a reason.
 */
// FUZZ_SOURCES: common/*.c scheduler/experiment.c scheduler/search*.c
// FUZZ_LIBS: -ljansson -lcurl -lm
#include "hf_err.h"
#include "hf_json.h"
#include "scheduler/experiment.h"

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
            for (int64_t i = 0; i < 4 && i < sp.max_trials; i++) {
                search_new nw;
                memset(&nw, 0, sizeof nw);
                int r = s->ops->next(s, i, 0, &nw);
                if (r == SEARCH_CREATE && nw.hparams && nw.resume_trial == 0 && s->ops->on_created)
                    s->ops->on_created(s, i + 1, i, nw.hparams, nw.budget, nw.parent_trial);
                json_decref(nw.hparams);
                if (r != SEARCH_CREATE) break;
            }
            s->ops->destroy(s);
        }
        experiment_spec_free(&sp);
    }
    json_decref(cfg);
    return 0;
}
