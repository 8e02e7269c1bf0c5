/*
 * fuzz_metric_line.c — libFuzzer target for the trial report line parser
 * (common/hf_metric.c) and what the agent does with its result
 * (agent/agent_outbox.c): trial output is untrusted, arbitrary bytes.
 *
 * The input is one "line" (the prefix is prepended when the first byte is
 * odd, so the fuzzer reaches the JSON part quickly). Invariants checked:
 *   - hf_metric_parse returns one of its documented codes;
 *   - on success, at most HF_METRIC_MAX_NAMES metrics, each name valid and
 *     NUL-terminated, every value finite, the checkpoint NUL-terminated;
 *   - on failure, the error strings are NUL-terminated;
 *   - the agent's outbox accepts the report and the raw line (invalid
 *     UTF-8 and NULs replaced), and the heartbeat body it builds
 *     serialises to JSON that parses back with the same number of items.
 */
// FUZZ_SOURCES: common/hf_metric.c common/hf_json.c common/hf_err.c common/hf_time.c common/hf_log.c agent/agent_outbox.c
// FUZZ_LIBS: -ljansson -lpthread
#include "hf_metric.h"
#include "hf_err.h"
#include "agent/agent_outbox.h"

#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static agent_outbox *ob;
    hf_metric_report r;
    hf_jerr e;
    char *line;
    size_t len;

    if (size > 2 * HF_METRIC_MAX_LINE) return 0;
    if (!ob) {
        agent_outbox_limits lim = {.max_log_lines = 8, .max_log_bytes = 1 << 16, .max_metrics = 8, .max_events = 8};
        ob = agent_outbox_new(&lim);
    }
    if (size > 0 && (data[0] & 1)) {
        len = HF_METRIC_PREFIX_LEN + size - 1;
        line = malloc(len + 1);
        memcpy(line, HF_METRIC_PREFIX, HF_METRIC_PREFIX_LEN);
        memcpy(line + HF_METRIC_PREFIX_LEN, data + 1, size - 1);
    } else {
        len = size;
        line = malloc(len + 1);
        memcpy(line, data, size);
    }
    line[len] = '\0';

    int rc = hf_metric_parse(line, len, &r, &e);
    assert(rc == HF_OK || rc == HF_ENOTFOUND || rc == HF_ETOOBIG || rc == HF_EPARSE);
    if (rc == HF_OK) {
        assert(r.n <= HF_METRIC_MAX_NAMES);
        for (size_t i = 0; i < r.n; i++) {
            assert(memchr(r.m[i].name, '\0', sizeof r.m[i].name));
            assert(hf_metric_name_ok(r.m[i].name));
            assert(isfinite(r.m[i].value));
        }
        assert(memchr(r.checkpoint, '\0', sizeof r.checkpoint));
        assert(!r.has_step || r.step >= 0);
        assert(agent_outbox_metric(ob, 1, 1, 0, &r) == HF_OK);
    } else {
        assert(memchr(e.field, '\0', sizeof e.field));
        assert(memchr(e.msg, '\0', sizeof e.msg));
    }
    assert(agent_outbox_log(ob, 1, 1, 0, AGENT_STREAM_STDOUT, line, len) == HF_OK);

    agent_outbox_mark m;
    json_t *body = agent_outbox_take(ob, &m);
    assert(body);
    char *text = json_dumps(body, JSON_COMPACT);
    assert(text);
    json_t *back = json_loads(text, 0, NULL);
    assert(back);
    assert(json_array_size(json_object_get(back, "logs")) == m.n_logs);
    assert(json_array_size(json_object_get(back, "metrics")) == m.n_metrics);
    json_decref(back);
    free(text);
    json_decref(body);
    agent_outbox_ack(ob, &m);
    free(line);
    return 0;
}
