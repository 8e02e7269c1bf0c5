/*
 * fuzz_agent_reply.c — libFuzzer target for what the agent accepts from
 * the scheduler: a heartbeat reply (agent/agent_assign.c agent_reply_parse,
 * which validates every assignment with agent_spec_parse, including the
 * checkpoint_dir / copy_checkpoint_from path checks of agent/agent_fs.c).
 *
 * Invariants: no crash, leak or out-of-bounds access whatever the JSON;
 * every accepted assignment has a non-empty NULL-terminated argv, "NAME=..."
 * environment entries none of which names a trial-contract variable
 * (common/hf_trial.h), and relative checkpoint paths without "..";
 * rejected assignments become well-formed start_failed events.
 */
// FUZZ_SOURCES: common/hf_json.c common/hf_err.c common/hf_time.c common/hf_log.c common/hf_buf.c common/hf_metric.c common/hf_trial.c agent/agent_assign.c agent/agent_fs.c
// FUZZ_LIBS: -ljansson -lpthread -lm
#include "agent/agent_assign.h"
#include "hf_err.h"
#include "hf_log.h"
#include "hf_trial.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Does path have a component "." or ".." (or an empty one)? */
static int has_dot_component(const char *path)
{
    const char *p = path;
    for (;;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 1;
        if (!e) return 0;
        p = e + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    json_t *j = NULL;
    hf_jerr e;
    agent_reply r;

    if (!init) {
        hf_log_set_level(HF_LOG_OFF);
        init = 1;
    }
    if (hf_json_parse((const char *)data, size, HF_JSON_MAX_DEPTH, 0, &j, &e)) return 0;
    int rc = agent_reply_parse(j, &r, &e);
    assert(rc == HF_OK || rc == HF_EINVAL);
    assert(memchr(e.field, '\0', sizeof e.field) && memchr(e.msg, '\0', sizeof e.msg));
    for (size_t i = 0; i < r.nassign; i++) {
        agent_spec *s = r.assign[i];
        assert(s->trial_id >= 1 && s->argv && s->argv[0] && s->argv[0][0]);
        for (char **p = s->env; p && *p; p++) {   /* never a contract variable (hf_trial.h) */
            char name[160];
            assert(strchr(*p, '='));
            snprintf(name, sizeof name, "%.*s", (int)strcspn(*p, "="), *p);
            assert(!hf_trial_env_reserved(name));
        }
        assert(s->checkpoint_dir[0] && s->checkpoint_dir[0] != '/');
        assert(!has_dot_component(s->checkpoint_dir));
        assert(s->copy_from[0] != '/' && (!s->copy_from[0] || !has_dot_component(s->copy_from)));
        assert(s->trial.ngpus >= 0 && s->trial.ngpus <= AGENT_MAX_GPUS);
        assert(s->trial.world_size >= 1 && s->trial_id == s->trial.trial_id && s->attempt == s->trial.attempt);
    }
    for (size_t i = 0; i < json_array_size(r.rejected); i++) {
        json_t *ev = json_array_get(r.rejected, i);
        assert(json_is_string(json_object_get(ev, "error")));
        assert(!strcmp(json_string_value(json_object_get(ev, "type")), "start_failed"));
    }
    for (size_t i = 0; i < r.nkill; i++) assert(r.kill[i].trial_id >= 1 && memchr(r.kill[i].reason, '\0', sizeof r.kill[i].reason));
    agent_reply_free(&r);
    json_decref(j);
    return 0;
}
