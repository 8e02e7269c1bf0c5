/*
 * api_handlers.h — one handler per route, by family; the route table
 * (api_routes.c) is their only caller. A handler gets the request as an
 * api_call (api_int.h) after the table's checks (role, body limit, id,
 * owner, JSON body) and answers it: every handler returns what
 * libmicrohttpd's request callback returns.
 *
 * Calls go one way: the table calls handlers; handlers call the helpers of
 * api_http.c and api_owner.c, the core and the stores; nothing here calls
 * back into the table.
 */
#ifndef HF_API_HANDLERS_H
#define HF_API_HANDLERS_H

#include "scheduler/api/api_int.h"

/* api_h_server.c: /healthz, /metrics, the SSE stream, /whoami */
enum MHD_Result api_h_healthz(api_call *k);
enum MHD_Result api_h_metrics(api_call *k);
enum MHD_Result api_h_events(api_call *k);
enum MHD_Result api_h_whoami(api_call *k);

/* api_h_exp.c: /api/v1/experiments... */
enum MHD_Result api_h_exp_list(api_call *k);
enum MHD_Result api_h_exp_submit(api_call *k);
enum MHD_Result api_h_exp_fork(api_call *k);
enum MHD_Result api_h_exp_patch(api_call *k);
enum MHD_Result api_h_exp_events(api_call *k);
enum MHD_Result api_h_exp_get(api_call *k);
enum MHD_Result api_h_exp_delete(api_call *k);
enum MHD_Result api_h_exp_action(api_call *k);
enum MHD_Result api_h_exp_trials(api_call *k);
enum MHD_Result api_h_exp_top(api_call *k);
enum MHD_Result api_h_exp_pareto(api_call *k);
enum MHD_Result api_h_exp_export(api_call *k);
enum MHD_Result api_h_exp_metrics(api_call *k);
enum MHD_Result api_h_exp_importance(api_call *k);

/* api_h_trial.c: /api/v1/trials... and the log searches (also an
 * experiment's: /experiments/{id}/logs) */
enum MHD_Result api_h_trial_get(api_call *k);
enum MHD_Result api_h_trial_metrics(api_call *k);
enum MHD_Result api_h_exp_logs(api_call *k);
enum MHD_Result api_h_trial_logs(api_call *k);
enum MHD_Result api_h_trial_kill(api_call *k);
enum MHD_Result api_h_trial_patch(api_call *k);

/* api_h_agent.c: /api/v1/agents... */
enum MHD_Result api_h_agent_list(api_call *k);
enum MHD_Result api_h_agent_register(api_call *k);
enum MHD_Result api_h_agent_heartbeat(api_call *k);
enum MHD_Result api_h_agent_wait(api_call *k);

/* api_h_webhook.c: /api/v1/webhooks... */
enum MHD_Result api_h_webhook_create(api_call *k);
enum MHD_Result api_h_webhook_list(api_call *k);
enum MHD_Result api_h_webhook_delete(api_call *k);
enum MHD_Result api_h_webhook_test(api_call *k);

/* api_objects.c: the object store's routes (docs/scheduler.md): PUT
 * /trials/{id}/checkpoints (F_STREAM), POST (register an object the store
 * has), GET (list); GET /checkpoints/{sha256} and /objects/{sha256} and
 * /contexts/{sha256}; PUT /contexts (F_STREAM). */
enum MHD_Result api_h_ckpt_put(api_call *k);
enum MHD_Result api_h_ckpt_register(api_call *k);
enum MHD_Result api_h_ckpt_list(api_call *k);
enum MHD_Result api_h_ckpt_get(api_call *k);
enum MHD_Result api_h_ctx_put(api_call *k);

#endif
