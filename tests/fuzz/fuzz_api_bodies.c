/*
 * fuzz_api_bodies.c — libFuzzer target for every JSON body the scheduler's
 * API accepts, run through the real core (scheduler/core/dispatch.c) on a real
 * SQLite store in a temporary file: experiment submission, agent
 * registration, extend, and pause/resume/cancel/kill on whatever ids the
 * input names, and the workflow bodies (issue #17): fork, PATCH of an
 * experiment (description, tags) and of a trial (notes), extend by a user.
 * The first byte picks the route (bit 3 with routes 0-3: the workflow
 * calls); the rest is the body.
 * Nothing may crash or leak, and every rejection is HF_EINVAL/ENOTFOUND/
 * ESTATE with a message.
 */
// FUZZ_SOURCES: common/*.c scheduler/*/*.c build/rel/gen/schema_sql.c build/rel/gen/web_assets.c
// FUZZ_LIBS: -ljansson -lsqlite3 -lmicrohttpd -lgnutls -lcurl -lpcre2-8 -lm
#include "hf_err.h"
#include "hf_json.h"
#include "hf_log.h"
#include "scheduler/core/sched.h"
#include "scheduler/store/store.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static store *st;
static sched *core;
static int runs;
static char path[64];

static void core_reset(void)
{
    char err[256];
    sched_free(core);
    store_close(st);
    core = NULL;
    st = NULL;
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_api_%d.db", (int)getpid());
    unlink(path);
    char wal[80];
    snprintf(wal, sizeof wal, "%s-wal", path); unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", path); unlink(wal);
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (store_open(path, &st, err, sizeof err) || sched_new(&cfg, st, NULL, &core, err, sizeof err)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1 << 20)) return 0;
    if (!core || ++runs % 500 == 0) {
        hf_log_set_level(HF_LOG_OFF);
        core_reset();
    }
    json_t *body = NULL, *out = NULL;
    hf_jerr e;
    hf_jerr_clear(&e);
    uint8_t route = data[0];
    if (hf_json_parse((const char *)data + 1, size - 1, HF_JSON_MAX_DEPTH, 1, &body, &e) != 0) return 0;
    int64_t id = 1 + (route >> 4);
    int rc;
    if ((route & 8) && (route & 7) < 4) {
        switch (route & 3) {
        case 0: { int64_t nid; rc = sched_experiment_submit_as(core, body, "fuzz", id, &nid, &e); break; }
        case 1: rc = sched_experiment_patch(core, id, body, "fuzz", &out, &e); break;
        case 2: rc = sched_trial_patch(core, id, body, "fuzz", &out, &e); break;
        default: rc = sched_experiment_extend_as(core, id, body, "fuzz", &out, &e); break;
        }
        goto check;
    }
    switch (route & 7) {
    case 0: { int64_t nid; rc = sched_experiment_submit(core, body, &nid, &e); break; }
    case 1: rc = sched_agent_register(core, body, "127.0.0.1", &out, &e); break;
    case 2: rc = sched_experiment_extend(core, id, body, &out, &e); break;
    case 3: rc = sched_agent_heartbeat(core, id, body, &out, &e); break;
    case 4: rc = sched_experiment_action(core, id, (route & 8) ? "pause" : "cancel", &out, &e); break;
    case 5: rc = sched_experiment_action(core, id, "resume", &out, &e); break;
    case 6: rc = sched_trial_kill(core, id, &out, &e); break;
    default: rc = sched_experiment_trials(core, id, &out); break;
    }
check:
    assert(rc == 0 || rc == HF_EINVAL || rc == HF_ENOTFOUND || rc == HF_ESTATE);
    if (rc == HF_EINVAL) assert(e.msg[0] != 0);
    json_decref(out);
    json_decref(body);
    return 0;
}
