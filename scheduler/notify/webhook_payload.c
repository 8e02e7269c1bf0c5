/*
 * webhook_payload.c — what a webhook delivery sends (webhook.h): the
 * body of a state change in the hook's format ("json" or "slack") and its
 * X-Hyperfarm-Signature (HMAC-SHA256 under the hook's secret). Pure
 * functions, table-tested by test_scheduler_webhook.
 */
#include "scheduler/notify/webhook_int.h"

#include "hf_err.h"

#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int webhook_sign(const char *secret, const void *body, size_t len, char out[72])
{
    unsigned char mac[32];
    static const char hex[] = "0123456789abcdef";
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, secret, strlen(secret), body, len, mac) < 0) return HF_EINVAL;
    memcpy(out, "sha256=", 7);
    for (int i = 0; i < 32; i++) {
        out[7 + 2 * i] = hex[mac[i] >> 4];
        out[8 + 2 * i] = hex[mac[i] & 15];
    }
    out[71] = '\0';
    return 0;
}

/* webhook_int.h */
const char *webhook_event_name(const webhook_event *ev, char *buf, size_t size)
{
    if (strcmp(ev->state, WEBHOOK_TEST_EVENT) == 0) return WEBHOOK_TEST_EVENT;
    snprintf(buf, size, "%s.%s", ev->trial_id > 0 ? "trial" : "experiment", ev->state);
    return buf;
}

char *webhook_body(const webhook_event *ev, const char *format)
{
    int test = strcmp(ev->state, WEBHOOK_TEST_EVENT) == 0;
    const char *kind = test ? "webhook" : ev->trial_id > 0 ? "trial" : "experiment";
    char buf[300];
    const char *name = webhook_event_name(ev, buf, sizeof buf);
    json_t *v;
    if (test && strcmp(format, "slack") == 0) {
        char text[400];
        snprintf(text, sizeof text, "hyperfarm: %.300s", ev->detail ? ev->detail : "test delivery");
        v = json_pack("{ss}", "text", text);
    } else if (strcmp(format, "slack") == 0) {
        char text[1200], obj[64] = "";
        if (ev->has_objective && ev->trial_id > 0) snprintf(obj, sizeof obj, ", objective %.6g", ev->objective);
        else if (ev->has_objective && ev->objective_trial > 0)   /* an experiment event: its best trial's */
            snprintf(obj, sizeof obj, ", best objective %.6g (trial %lld)", ev->objective,
                     (long long)ev->objective_trial);
        if (ev->trial_id > 0)
            snprintf(text, sizeof text, "hyperfarm: trial %lld of experiment %lld (%.200s) is %s%s%s%.300s",
                     (long long)ev->trial_id, (long long)ev->experiment_id,
                     ev->experiment_name ? ev->experiment_name : "?", ev->state, obj,
                     ev->detail && *ev->detail ? ": " : "", ev->detail ? ev->detail : "");
        else
            snprintf(text, sizeof text, "hyperfarm: experiment %lld (%.200s) is %s%s%s%.300s",
                     (long long)ev->experiment_id, ev->experiment_name ? ev->experiment_name : "?", ev->state,
                     *obj ? obj : "", ev->detail && *ev->detail ? ": " : "", ev->detail ? ev->detail : "");
        v = json_pack("{ss}", "text", text);
    } else {
        v = json_pack("{sIsssssssososIsIsosososo}", "delivery", (json_int_t)ev->delivery, "event", name, "kind", kind,
                      "state", test ? "test" : ev->state,
                      "experiment_id", ev->experiment_id > 0 ? json_integer(ev->experiment_id) : json_null(),
                      "experiment_name", ev->experiment_name ? json_string(ev->experiment_name) : json_null(),
                      "event_id", (json_int_t)ev->event_id, "time", (json_int_t)ev->time,
                      "trial_id", ev->trial_id > 0 ? json_integer(ev->trial_id) : json_null(),
                      "objective", ev->has_objective ? json_real(ev->objective) : json_null(),
                      "detail", ev->detail ? json_string(ev->detail) : json_null(),
                      "hyperfarm", json_string("1"));
    }
    if (v && strcmp(format, "slack") && !test) {
        /* Which trial the objective is of (an experiment event: its best),
         * and every objective of a list (docs/protocol.md "Webhooks"). */
        json_object_set_new(v, "objective_trial", ev->objective_trial > 0 ? json_integer(ev->objective_trial)
                                                                           : json_null());
        if (ev->objectives) {
            json_t *o = json_loads(ev->objectives, 0, NULL);
            if (json_is_object(o)) json_object_set_new(v, "objectives", o);
            else json_decref(o);
        }
    }
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(v);
    return s;
}
