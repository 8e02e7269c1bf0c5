/*
 * api_h_webhook.c — the webhook routes (api_handlers.h; webhook.h,
 * docs/protocol.md "Webhooks"): create (an experiment's owner, or an admin
 * for a global hook; the URL's address is checked), list (others' URLs
 * redacted), delete and test (the creator, the experiment's owner or an
 * admin). 503 when the scheduler runs without webhooks.
 */
#include "scheduler/api/api_handlers.h"

#include "hf_err.h"
#include "scheduler/api/auth.h"
#include "scheduler/notify/webhook.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

/* ---------- handlers: webhooks (webhook.h) ---------- */

static enum MHD_Result no_webhooks(api_call *k)
{
    return api_send_err(k->c, 503, NULL, "webhooks are not available on this scheduler");
}

/* url without what may be secret: "scheme://host[:port]/…" (no user
 * info, path or query). */
static void webhook_redact(const char *url, char *out, size_t len)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL;
    snprintf(out, len, "(redacted)");
    if (u && url && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK && curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        curl_url_get(u, CURLUPART_PORT, &port, 0);
        snprintf(out, len, "%s://%s%s%s/...", scheme, host, port ? ":" : "", port ? port : "");
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
}

enum MHD_Result api_h_webhook_create(api_call *k)
{
    webhook_spec sp;
    json_t *out = NULL;
    if (!k->a->wh) return no_webhooks(k);
    if (webhook_spec_parse(k->body, &sp, &k->e)) return api_send_jerr(k->c, 400, &k->e);
    if (sp.experiment_id > 0) {
        int rc = sched_experiment_get(k->a->s, sp.experiment_id, &out);
        json_decref(out);
        out = NULL;
        if (rc == HF_ENOTFOUND)
            return api_send_err(k->c, 400, "experiment_id", "no such experiment %lld", (long long)sp.experiment_id);
        enum MHD_Result ret;
        if (api_owner_refused(k, sp.experiment_id, 0, "add a webhook to", &ret)) return ret;
    } else if (k->role != AUTH_ADMIN) {
        return api_refuse(k, 0, 0, "experiment_id",
                      "only an admin may create a global webhook (one without experiment_id); %s is a %s", k->user,
                      auth_role_name(k->role));
    }
    if (webhook_url_check(k->a->wh, sp.url, &k->e)) return api_send_jerr(k->c, 403, &k->e);
    sp.owner = k->user;
    int rc = webhook_create(k->a->wh, &sp, &out);
    return api_reply(k, rc, "webhook", 201, out);
}

enum MHD_Result api_h_webhook_list(api_call *k)
{
    json_t *out = NULL;
    if (!k->a->wh) return no_webhooks(k);
    int rc = webhook_list(k->a->wh, &out);
    size_t i;
    json_t *h;
    json_array_foreach(rc == 0 ? json_object_get(out, "webhooks") : NULL, i, h) {
        const char *owner = json_string_value(json_object_get(h, "owner"));
        if (k->role == AUTH_ADMIN || (owner && strcmp(owner, k->user) == 0)) continue;
        char red[WEBHOOK_URL_MAX + 16];
        webhook_redact(json_string_value(json_object_get(h, "url")), red, sizeof red);
        json_object_set_new(h, "url", json_string(red));
        json_object_set_new(h, "url_redacted", json_true());
    }
    return api_reply(k, rc, "webhook", 200, out);
}

/* May the request act on (verb: "delete", "test") hook k->id? 0 when it
 * may, else 1 with the 404 or 403 in *ret (docs/api.md "Roles"). */
static int hook_refused(api_call *k, const char *verb, enum MHD_Result *ret)
{
    char owner[AUTH_NAME_MAX + 1];
    int64_t xid = 0;
    int rc = webhook_owner(k->a->wh, k->id, owner, sizeof owner, &xid);
    if (rc) return (*ret = api_send_rc(k->c, rc, NULL, "webhook")), 1;
    if (xid == 0 && k->role != AUTH_ADMIN)
        return (*ret = api_refuse(k, 0, 0, NULL, "webhook %lld is global; only an admin may %s it", (long long)k->id,
                              verb)), 1;
    /* A per-experiment hook: its creator, the experiment's owner, or an admin. */
    if (xid > 0 && !api_may_change(k, owner)) {
        char what[48];
        snprintf(what, sizeof what, "%s webhook %lld of", verb, (long long)k->id);
        if (api_owner_refused(k, xid, 0, what, ret)) return 1;
    }
    return 0;
}

enum MHD_Result api_h_webhook_delete(api_call *k)
{
    if (!k->a->wh) return no_webhooks(k);
    enum MHD_Result ret;
    if (hook_refused(k, "delete", &ret)) return ret;
    int rc = webhook_delete(k->a->wh, k->id);
    return api_reply(k, rc, "webhook", 200, rc ? NULL : json_pack("{sIsb}", "id", (json_int_t)k->id, "deleted", 1));
}

/* A webhook.test delivery through the outbox (webhook_test). */
enum MHD_Result api_h_webhook_test(api_call *k)
{
    if (!k->a->wh) return no_webhooks(k);
    enum MHD_Result ret;
    json_t *out = NULL;
    if (hook_refused(k, "test", &ret)) return ret;
    int rc = webhook_test(k->a->wh, k->id, k->user, &out);
    return api_reply(k, rc, "webhook", 202, out);
}
