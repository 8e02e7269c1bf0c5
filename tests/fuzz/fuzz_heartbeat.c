/*
 * fuzz_heartbeat.c — libFuzzer target for the heartbeat message: a core on
 * a real temporary SQLite file holds one experiment whose trials are
 * placed on agent 1 (attempt 1), and the input is the heartbeat body of
 * agent 1, so well-formed inputs reach the started/exited/metrics/logs
 * paths, the searcher's on_report and the reply builder. Every 200 inputs
 * the state is rebuilt so trials keep being placed.
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

static const char *exp_json =
    "{\"name\":\"f\",\"objective\":{\"metric\":\"val_acc\",\"goal\":\"maximize\"},"
    "\"searcher\":{\"name\":\"random\",\"max_trials\":1000,\"max_concurrent_trials\":4,\"seed\":1,"
    "\"median_stopping\":{\"min_trials\":1}},"
    "\"hyperparameters\":{\"lr\":{\"type\":\"log\",\"min\":0.001,\"max\":0.1}},"
    "\"trial\":{\"command\":[\"true\"],\"max_restarts\":1}}";

static void core_reset(void)
{
    char err[256], path[64], aux[80];
    hf_jerr e;
    json_t *out = NULL;
    sched_free(core);
    store_close(st);
    snprintf(path, sizeof path, "/tmp/fuzz_hb_%d.db", (int)getpid());
    unlink(path);
    snprintf(aux, sizeof aux, "%s-wal", path); unlink(aux);
    snprintf(aux, sizeof aux, "%s-shm", path); unlink(aux);
    sched_config cfg;
    sched_config_defaults(&cfg);
    if (store_open(path, &st, err, sizeof err) || sched_new(&cfg, st, NULL, &core, err, sizeof err)) abort();
    json_t *x = json_loads(exp_json, 0, NULL);
    int64_t id;
    if (sched_experiment_submit(core, x, &id, &e)) abort();
    json_decref(x);
    x = json_loads("{\"name\":\"a1\",\"slots\":4}", 0, NULL);
    if (sched_agent_register(core, x, "127.0.0.1", &out, &e)) abort();
    json_decref(out);
    json_decref(x);
    /* Deliver the assignments (trials 1..4, attempt 1). */
    x = json_object();
    if (sched_agent_heartbeat(core, 1, x, &out, &e)) abort();
    json_decref(out);
    json_decref(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (8 << 20)) return 0;
    if (!core || ++runs % 200 == 0) {
        hf_log_set_level(HF_LOG_OFF);
        core_reset();
    }
    json_t *body = NULL, *out = NULL;
    hf_jerr e;
    hf_jerr_clear(&e);
    if (hf_json_parse((const char *)data, size, HF_JSON_MAX_DEPTH, 1, &body, &e) != 0) return 0;
    int rc = sched_agent_heartbeat(core, 1, body, &out, &e);
    assert(rc == 0 || rc == HF_EINVAL);
    if (rc == 0) assert(json_is_array(json_object_get(out, "assign")) && json_is_array(json_object_get(out, "kill")));
    else assert(e.msg[0] != 0);
    json_decref(out);
    json_decref(body);
    return 0;
}
