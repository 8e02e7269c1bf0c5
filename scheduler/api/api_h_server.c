/*
 * api_h_server.c — the routes about the server itself (api_handlers.h):
 * GET /healthz (the store answers), GET /metrics (metrics.h renders the
 * Prometheus text), GET /api/v1/events (the SSE stream, api_stream.c) and
 * GET /api/v1/whoami (the token's user and role).
 */
#include "scheduler/api/api_handlers.h"

#include "hf_err.h"
#include "scheduler/api/auth.h"
#include "scheduler/api/metrics.h"

#include <stdlib.h>
#include <string.h>

/* ---------- handlers: health and metrics ---------- */

enum MHD_Result api_h_healthz(api_call *k)
{
    int ok = store_health(k->a->st) == 0;
    return api_send_json(k->c, ok ? 200 : 503, json_pack("{sbss}", "ok", ok, "db", ok ? "ok" : "error"));
}

/* The Prometheus text (metrics.h): the counters and the core's gauges,
 * the checkpoint store's, the connection guard's, failed self-checks. */
enum MHD_Result api_h_metrics(api_call *k)
{
    sched_stats ss;
    hf_buf b;
    size_t len;
    if (k->a->s) sched_get_stats(k->a->s, &ss);
    else memset(&ss, 0, sizeof ss);   /* a standby runs no core (repl.h): its gauges read 0 */
    metrics_sources src = {.ck = k->a->ck, .cr = k->a->cr, .guard = k->a->guard};
    hf_buf_init(&b, 1u << 20);
    if (metrics_scrape(&b, &ss, &src) || !b.data) {
        hf_buf_free(&b);
        return api_send_err(k->c, 500, NULL, "metrics too large");
    }
    char *text = hf_buf_take(&b, &len);
    return api_send_text(k->c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

enum MHD_Result api_h_events(api_call *k) { return api_stream_events(k->a, k->c); }

/* Who the token is: the dashboard disables what it may not do. */
enum MHD_Result api_h_whoami(api_call *k)
{
    return api_send_json(k->c, 200, json_pack("{sssssb}", "user", k->user, "role", auth_role_name(k->role), "tokens",
                                              k->a->au != NULL));
}
