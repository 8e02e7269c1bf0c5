/*
 * agent_link.c — registration, heartbeats and the long-poll over HTTP
 * (see agent_link.h and docs/protocol.md, "Agents").
 */
#include "agent_link.h"
#include "hf_err.h"
#include "hf_follow.h"
#include "hf_http.h"
#include "hf_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct agent_link {
    hf_http *http;
    int64_t  id;
    int64_t  interval_ms;
    json_t  *info;
    char     shared[1024];      /* shared_fs store path, "" = scheduler mode */
    size_t   reg_url;           /* several URLs: the index of the URL registered with */
};

agent_link *agent_link_new(const char *url, const char *token, const char *cafile, long timeout_ms, json_t *info)
{
    agent_link *l = calloc(1, sizeof *l);
    if (!l || !info) goto fail;
    l->info = info;
    info = NULL;
    if (json_object_set_new(l->info, "version", json_string(AGENT_VERSION))) goto fail;
    /* no client-side retries: the heartbeat loop has its own backoff and
     * must not sleep inside a request */
    if (!(l->http = hf_http_new(url, token, timeout_ms, 0))) goto fail;
    if (cafile) hf_http_set_cafile(l->http, cafile);
    return l;
fail:
    json_decref(info);
    agent_link_free(l);
    return NULL;
}

void agent_link_free(agent_link *l)
{
    if (!l) return;
    hf_http_free(l->http);
    json_decref(l->info);
    free(l);
}

int64_t agent_link_id(const agent_link *l) { return l->id; }
const char *agent_link_url(const agent_link *l) { return hf_http_base(l->http); }
int64_t agent_link_interval(const agent_link *l) { return l->interval_ms; }
void agent_link_forget(agent_link *l) { l->id = 0; }

void agent_link_set_interval(agent_link *l, int64_t interval_ms)
{
    hf_follow *f = hf_http_follow(l->http);
    if (f && interval_ms > 0) hf_follow_set_lost_after(f, 2 * interval_ms);
}

int agent_link_following(const agent_link *l) { return hf_http_follow(l->http) != NULL; }

int agent_link_shared_store(const agent_link *l, char *path, size_t len)
{
    snprintf(path, len, "%s", l->shared);
    return l->shared[0] != 0;
}

void agent_link_set_cached(agent_link *l, const json_t *cached)
{
    if (cached) json_object_set_new(l->info, "cached", json_deep_copy(cached));
}

static int status_error(long status, const json_t *resp, const char *what, char *err, size_t errlen)
{
    const char *msg = json_string_value(json_object_get(resp, "error"));
    snprintf(err, errlen, "%s: HTTP %ld%s%s", what, status, msg ? ": " : "", msg ? msg : "");
    if (status == 401 || status == 403) return HF_EAUTH;
    if (status == 404) return HF_ENOTFOUND;
    if (status == 400 || status == 413 || status == 422) return HF_EINVAL;   /* the body itself was refused */
    return HF_EHTTP;
}

int agent_link_register(agent_link *l, const json_t *running, char *err, size_t errlen)
{
    json_t *body = json_deep_copy(l->info), *resp = NULL;
    long status = 0;
    int rc;
    hf_jerr e;
    int64_t id = 0, iv = 0;

    if (!body || json_object_set(body, "running", (json_t *)running)) {
        snprintf(err, errlen, "out of memory");
        rc = HF_ENOMEM;
        goto end;
    }
    hf_follow *f = hf_http_follow(l->http);
    if ((rc = hf_http_request(l->http, "POST", "/api/v1/agents", body, &status, &resp, err, errlen)))
        goto end;
    if (status != 200 && status != 201) {
        rc = status_error(status, resp, "register", err, errlen);
        if (rc == HF_ENOTFOUND || rc == HF_EINVAL) rc = HF_EHTTP;
        goto end;
    }
    if (!json_is_object(resp) || hf_json_get_int(resp, "", "id", 1, 1, INT64_MAX, &id, &e)
        || hf_json_get_int(resp, "", "heartbeat_interval_ms", 0, 10, 3600000, &iv, &e)) {
        snprintf(err, errlen, "register: bad reply: %s", json_is_object(resp) ? e.msg : "not a JSON object");
        rc = HF_EPARSE;
        goto end;
    }
    l->id = id;
    l->interval_ms = iv;
    /* the registration went to the URL in use at its end: a move during
     * it (a standby's 503, then the primary) counts as before it */
    if (f) l->reg_url = hf_follow_current(f, NULL, 0);
    {
        json_t *cs = json_object_get(resp, "checkpoint_storage");
        const char *mode = json_string_value(json_object_get(cs, "mode"));
        const char *p = json_string_value(json_object_get(cs, "path"));
        l->shared[0] = 0;
        if (mode && !strcmp(mode, "shared_fs") && p && p[0] == '/' && strlen(p) < sizeof l->shared)
            snprintf(l->shared, sizeof l->shared, "%s", p);
    }
end:
    json_decref(body);
    json_decref(resp);
    return rc;
}

int agent_link_heartbeat(agent_link *l, const json_t *body, json_t **reply, char *err, size_t errlen)
{
    char path[96];
    long status = 0;
    json_t *resp = NULL;
    int rc;

    *reply = NULL;
    if (!l->id) {
        snprintf(err, errlen, "not registered");
        return HF_ENOTFOUND;
    }
    hf_follow *f = hf_http_follow(l->http);
    char url[HF_FOLLOW_URL_MAX + 1];
    if (f && hf_follow_current(f, url, sizeof url) != l->reg_url) {
        /* the set moved to another scheduler (a failure there, a
         * standby's hint): register there, so a new primary hears the
         * running trials first, as a restarted one does (docs/agent.md).
         * A bounce that came back to the URL registered with is no move. */
        snprintf(err, errlen, "the scheduler in use is now %s", url);
        l->id = 0;
        return HF_ESTATE;
    }
    snprintf(path, sizeof path, "/api/v1/agents/%lld/heartbeat", (long long)l->id);
    if ((rc = hf_http_request(l->http, "POST", path, body, &status, &resp, err, errlen))) return rc;
    if (status != 200) {
        rc = status_error(status, resp, "heartbeat", err, errlen);
        if (rc == HF_ENOTFOUND) l->id = 0;
        json_decref(resp);
        return rc;
    }
    if (!json_is_object(resp)) {
        snprintf(err, errlen, "heartbeat: reply is not a JSON object");
        json_decref(resp);
        return HF_EPARSE;
    }
    *reply = resp;
    return HF_OK;
}

struct agent_poll {
    hf_http *http;
};

agent_poll *agent_poll_new(const char *url, const char *token, const char *cafile, long timeout_ms,
                           const atomic_int *cancel)
{
    agent_poll *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    /* the request lasts up to the wait itself plus an ordinary timeout */
    if (!(p->http = hf_http_new(url, token, AGENT_POLL_WAIT_MS + timeout_ms, 0))) {
        free(p);
        return NULL;
    }
    if (cafile) hf_http_set_cafile(p->http, cafile);
    hf_http_set_cancel(p->http, cancel);
    return p;
}

void agent_poll_free(agent_poll *p)
{
    if (!p) return;
    hf_http_free(p->http);
    free(p);
}

int agent_poll_wait(agent_poll *p, int64_t id, int64_t wait_ms, int *pending, json_t **reply, char *err,
                    size_t errlen)
{
    char path[128];
    long status = 0;
    json_t *resp = NULL;
    int rc;

    *pending = 0;
    *reply = NULL;
    if (wait_ms > AGENT_POLL_WAIT_MS) wait_ms = AGENT_POLL_WAIT_MS;
    snprintf(path, sizeof path, "/api/v1/agents/%lld/wait?timeout_ms=%lld&assign=1", (long long)id,
             (long long)wait_ms);
    if ((rc = hf_http_request(p->http, "GET", path, NULL, &status, &resp, err, errlen))) return rc;
    if (status != 200) rc = status_error(status, resp, "wait", err, errlen);
    else if (!json_is_boolean(json_object_get(resp, "pending"))) {
        snprintf(err, errlen, "wait: reply without a boolean \"pending\"");
        rc = HF_EPARSE;
    } else *pending = json_is_true(json_object_get(resp, "pending"));
    if (rc == HF_EINVAL) rc = HF_EHTTP;
    if (rc == HF_OK) *reply = resp;
    else json_decref(resp);
    return rc;
}
