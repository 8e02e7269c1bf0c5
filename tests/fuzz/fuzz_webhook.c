/*
 * fuzz_webhook.c — libFuzzer target for POST /api/v1/webhooks bodies
 * (scheduler/notify/webhook.c): validation, then the JSON and Slack bodies built
 * from what passed, and their signature.
 *
 * Input: a JSON document. Invariants (abort on violation): a refusal says
 * why; an accepted url starts with http:// or https:// and holds no
 * byte <= 0x20; both delivery bodies are valid JSON (the Slack one has only
 * "text"); signatures are "sha256=" and 64 lowercase hex digits, the same
 * for the same input.
 */
// FUZZ_SOURCES: common/*.c scheduler/notify/webhook*.c scheduler/store/store.c scheduler/store/repl.c scheduler/store/repl_ring.c
// FUZZ_LIBS: -ljansson -lsqlite3 -lcurl -lgnutls -lpthread
#include "hf_err.h"
#include "hf_json.h"
#include "scheduler/store/store.h"
#include "scheduler/notify/webhook.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const store_migration store_migrations[] = {{0, NULL, NULL}};   /* store.c links; no store is opened */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_body(char *s, int slack)
{
    if (!s) return;   /* OOM */
    json_t *v = json_loads(s, 0, NULL);
    if (!v) abort();
    if (slack && (json_object_size(v) != 1 || !json_is_string(json_object_get(v, "text")))) abort();
    json_decref(v);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *doc = NULL;
    hf_jerr e;
    if (size > 65536) return 0;
    if (hf_json_parse((const char *)data, size, HF_JSON_MAX_DEPTH, 0, &doc, &e)) return 0;
    webhook_spec sp;
    hf_jerr_clear(&e);
    if (webhook_spec_parse(doc, &sp, &e)) {
        if (!e.msg[0]) abort();   /* a field is named, possibly "" (an empty unknown key) */
    } else {
        if (strncmp(sp.url, "http://", 7) && strncmp(sp.url, "https://", 8)) abort();
        for (const char *c = sp.url; *c; c++)
            if ((unsigned char)*c <= 0x20) abort();
        webhook_event ev = {.delivery = 1, .event_id = 2, .time = 3, .experiment_id = sp.experiment_id,
                            .trial_id = (int64_t)size % 3, .state = sp.format, .detail = sp.url,
                            .experiment_name = sp.secret, .has_objective = (int)(size & 1), .objective = 1e308};
        check_body(webhook_body(&ev, "json"), 0);
        check_body(webhook_body(&ev, "slack"), 1);
        char a[72], b[72];
        const char *key = sp.secret ? sp.secret : "k";
        if (webhook_sign(key, data, size, a) || webhook_sign(key, data, size, b)) abort();
        if (strcmp(a, b) || strncmp(a, "sha256=", 7) || strlen(a) != 71) abort();
        for (int i = 7; i < 71; i++)
            if (!strchr("0123456789abcdef", a[i])) abort();
    }
    json_decref(doc);
    return 0;
}
